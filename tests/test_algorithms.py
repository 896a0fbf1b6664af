"""Tests for teamrl.algorithms against hand-computed values."""

import math

import pytest
import torch

from teamrl.algorithms import (
    broadcast_episode_advantages,
    group_relative_advantages,
    grpo_loss,
    kl_k3,
    role_relative_advantages,
    team_relative_advantages,
)

torch.set_num_threads(1)

F64 = torch.float64


def t(values, dtype=F64):
    return torch.tensor(values, dtype=dtype)


def close(actual: torch.Tensor, expected, atol: float = 1e-5) -> None:
    torch.testing.assert_close(actual, t(expected, actual.dtype), atol=atol, rtol=0)


# --- group_relative_advantages -------------------------------------------------------------------


def test_group_advantages_std_hand_computed():
    # group a: mean .5, unbiased std sqrt(1/3) = 0.57735 -> +-0.5/0.57735 = +-0.86603; group b: all equal -> 0
    adv = group_relative_advantages(t([1, 0, 1, 0, 5, 5]), ["a", "a", "a", "a", "b", "b"])
    close(adv, [0.86603, -0.86603, 0.86603, -0.86603, 0.0, 0.0])


def test_group_advantages_interleaved_tensor_ids_and_singleton():
    # group 7: [3, 1, 2] mean 2, unbiased std 1 -> [1, -1, 0]; group 9: a single element -> 0
    adv = group_relative_advantages(t([3, 4, 1, 2]), torch.tensor([7, 9, 7, 7]))
    close(adv, [1.0, 0.0, -1.0, 0.0])


def test_group_advantages_scale_none_and_int_rewards():
    adv = group_relative_advantages(torch.tensor([1, 0, 1, 0, 5, 5]), [0, 0, 0, 0, 1, 1], scale="none")
    assert adv.dtype == torch.float32
    close(adv, [0.5, -0.5, 0.5, -0.5, 0.0, 0.0])


def test_group_advantages_against_a_greedy_baseline_hand_computed():
    # group a: greedy (first) 0.5, samples 1, 0, 0.5 -> 0.5, -0.5, 0 (greedy 0); mean 0.5 would agree here,
    # so group b has greedy 0 among samples 1, 1, 0: r - 0 = 1, 1, 0 against r - mean 0.5 = .5, .5, -.5;
    # group c has no greedy member: its mean (1 -> +0.5, 0 -> -0.5); group d is all equal: 0
    rewards = t([0.5, 1, 0, 0.5, 0, 1, 1, 0, 1, 0, 3, 3])
    ids = ["a"] * 4 + ["b"] * 4 + ["c"] * 2 + ["d"] * 2
    greedy = torch.tensor([1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0], dtype=torch.bool)
    adv = group_relative_advantages(rewards, ids, scale="none", baseline_mask=greedy)
    close(adv, [0, 0.5, -0.5, 0, 0, 1, 1, 0, 0.5, -0.5, 0, 0])
    # std: the same shifts over each group's own std around its mean (b: std of [0, 1, 1, 0] = 0.57735)
    adv = group_relative_advantages(rewards, ids, baseline_mask=greedy)
    close(adv[4:8], [0, 1 / 0.57735, 1 / 0.57735, 0], atol=1e-4)
    with pytest.raises(ValueError, match="baseline_mask has shape"):
        group_relative_advantages(rewards, ids, baseline_mask=greedy[:3])
    with pytest.raises(ValueError, match="bool tensor"):
        group_relative_advantages(rewards, ids, baseline_mask=greedy.float())


def test_group_advantages_validation():
    with pytest.raises(ValueError, match="scale='group'"):
        group_relative_advantages(t([1, 2]), [0, 0], scale="group")
    with pytest.raises(ValueError, match="3 ids but there are 2 rewards"):
        group_relative_advantages(t([1, 2]), [0, 0, 1])
    with pytest.raises(ValueError, match="expected a 1-D"):
        group_relative_advantages(t([[1, 2]]), [0, 0])
    with pytest.raises(ValueError, match=r"positions \[1\] are not finite"):
        group_relative_advantages(t([1, float("nan")]), [0, 0])


@pytest.mark.parametrize("value", [0.7, 0.2])
def test_group_advantages_of_equal_float32_rewards_are_exactly_zero(value):
    # float32 statistics used to round the mean and give all eight +0.056 (0.7) or -0.0147 (0.2)
    for scale in ("std", "none"):
        adv = group_relative_advantages(torch.full((8,), value), [0] * 8, scale=scale)
        assert adv.dtype == torch.float32
        assert adv.tolist() == [0.0] * 8


def test_group_advantages_are_exactly_zero_for_any_equal_group():
    gen = torch.Generator().manual_seed(0)
    for size in range(1, 33):
        values = (torch.rand(50, generator=gen, dtype=F64) - 0.5) * 10.0 ** torch.randint(-3, 4, (50,))
        for dtype in (torch.float32, F64):
            # 50 equal groups of `size`, interleaved with one group whose rewards differ
            rewards = values.repeat_interleave(size).to(dtype)
            ids = torch.arange(50).repeat_interleave(size)
            rewards = torch.cat([rewards, t([0.0, 1.0], dtype)])
            ids = torch.cat([ids, torch.tensor([99, 99])])
            for scale in ("std", "none"):
                adv = group_relative_advantages(rewards, ids, scale=scale)
                assert adv.dtype == dtype
                assert (adv[:-2] == 0).all(), (size, dtype, scale)
                assert (adv[-2:].abs() >= 0.5).all()
    assert group_relative_advantages(t([0.3, 0.3, 1.0, 0.0]), [0, 0, 1, 1], eps=0.0).tolist()[:2] == [0, 0]


def test_group_advantages_of_unequal_groups_match_a_float64_hand_computation():
    gen = torch.Generator().manual_seed(1)
    rewards = torch.rand(40, generator=gen)
    ids = torch.randint(0, 6, (40,), generator=gen)
    adv = group_relative_advantages(rewards, ids)
    expected = torch.empty(40, dtype=F64)
    for g in ids.unique():
        members = ids == g
        r = rewards[members].to(F64)
        expected[members] = (r - r.mean()) / (r.std() + 1e-6)
    assert adv.dtype == torch.float32
    torch.testing.assert_close(adv, expected.float(), atol=0, rtol=0)


# --- kl_k3 ---------------------------------------------------------------------------------------


def test_kl_k3_known_values():
    # d = ref - logp; k3 = e^d - d - 1: d=0 -> 0, ln2 -> 2 - .693147 - 1, -ln2 -> .5 + .693147 - 1, 1 -> e - 2
    logp = t([-1.0, -1.0, -1.0, -2.0])
    ref = t([-1.0, -1.0 + math.log(2), -1.0 - math.log(2), -1.0])
    close(kl_k3(logp, ref), [0.0, 0.306853, 0.193147, 0.718282])
    with pytest.raises(ValueError, match="ref_logp has shape"):
        kl_k3(logp, ref[:2])


# --- grpo_loss -----------------------------------------------------------------------------------

# A 2x3 case. Ratios [[1.5, .5, 1.1], [.5, 1.5, masked]], advantages [2, -1], clip .2:
#   row 0 (A=2):  min(3.0, 2.4)=2.4 (high clip), min(1.0, 1.6)=1.0, min(2.2, 2.2)=2.2
#   row 1 (A=-1): min(-.5, -.8)=-.8 (low clip), min(-1.5, -1.2)=-1.5
# per-token loss -obj: [[-2.4, -1.0, -2.2], [.8, 1.5, -]]
#   token_mean    = -3.3 / 5 = -0.66
#   sequence_mean = ((-5.6 / 3) + (2.3 / 2)) / 2 = (-1.866667 + 1.15) / 2 = -0.358333
RATIOS = [[1.5, 0.5, 1.1], [0.5, 1.5, 1.0]]
LOGP = [[-1.0, -0.5, -2.0], [-1.2, -0.3, -float("inf")]]  # the masked slot holds -inf padding
MASK = [[1, 1, 1], [1, 1, 0]]
ADV = [2.0, -1.0]


def case(dtype=F64):
    logp = t(LOGP, dtype).requires_grad_(True)
    old = (logp.detach() - t(RATIOS, dtype).log()).nan_to_num(neginf=0.0)
    return logp, old, t(ADV, dtype), t(MASK, dtype)


def test_grpo_loss_token_mean_clipping_both_directions():
    logp, old, adv, mask = case()
    out = grpo_loss(logp, old, adv, mask)
    close(out.loss, -0.66)
    assert out.stats["policy_loss"] == pytest.approx(-0.66)
    assert out.stats["clip_fraction"] == pytest.approx(0.4)
    assert out.stats["clip_fraction_low"] == pytest.approx(0.2)
    assert out.stats["clip_fraction_high"] == pytest.approx(0.2)
    assert out.stats["ratio_mean"] == pytest.approx(5.1 / 5)
    assert out.stats["entropy_proxy"] == pytest.approx(1.0)  # (1 + .5 + 2 + 1.2 + .3) / 5
    # (r - 1) - log r for r = 1.5, .5, 1.1, .5, 1.5: .094535, .193147, .004690, .193147, .094535
    assert out.stats["approx_kl"] == pytest.approx(0.580054 / 5, rel=1e-5)
    assert out.stats["approx_kl_max"] == pytest.approx(0.193147, rel=1e-5)
    assert out.stats["kl"] == 0.0
    assert out.stats["num_tokens"] == 5.0
    out.loss.backward()
    # unclipped tokens: d(-ratio*A)/dlogp / 5 = -A*ratio/5; clipped tokens and padding: 0 (and finite)
    close(logp.grad, [[0.0, -0.2, -0.44], [0.0, 0.3, 0.0]])


def test_grpo_loss_sequence_mean():
    logp, old, adv, mask = case()
    out = grpo_loss(logp, old, adv, mask, aggregation="sequence_mean")
    close(out.loss, -0.358333)
    out.loss.backward()
    # per-token grad scaled by 1/(len_i * num_sequences): row 0 by 1/6, row 1 by 1/4
    close(logp.grad, [[0.0, -2 * 0.5 / 6, -2 * 1.1 / 6], [0.0, 1.5 / 4, 0.0]])


def test_grpo_loss_asymmetric_clip_high():
    # clip_high .6 -> upper bound 1.6: token (0, 0) is no longer clipped: -3.0 instead of -2.4
    logp, old, adv, mask = case()
    out = grpo_loss(logp, old, adv, mask, clip_high=0.6)
    close(out.loss, -3.9 / 5)
    assert out.stats["clip_fraction_high"] == 0.0


def test_grpo_loss_kl_term():
    # ref - logp = [[0, ln2, -ln2], [1, -1, masked]] -> k3 [0, .306853, .193147, .718282, .367879]
    # mean k3 = 1.586161 / 5 = .317232; loss = -0.66 + 0.1 * .317232 = -0.628277
    logp, old, adv, mask = case()
    d = t([[0.0, math.log(2), -math.log(2)], [1.0, -1.0, 7.0]])
    ref = (logp.detach() + d).nan_to_num(neginf=3.0)
    out = grpo_loss(logp, old, adv, mask, ref_logp=ref, kl_coef=0.1)
    close(out.loss, -0.628277)
    assert out.stats["kl"] == pytest.approx(0.317232, abs=1e-6)
    assert out.stats["policy_loss"] == pytest.approx(-0.66)
    # kl stat is reported even when it is not in the loss
    assert grpo_loss(logp, old, adv, mask, ref_logp=ref).stats["kl"] == pytest.approx(0.317232, abs=1e-6)


def test_grpo_loss_ratio_one_is_minus_weighted_mean_advantage():
    logp = torch.zeros(2, 3, dtype=F64)
    adv, mask = t([2.0, -1.0]), t([[1, 1, 1], [1, 0, 0]])
    # token_mean weights each sequence by its token count: -(2*3 - 1*1) / 4; sequence_mean: -(2 - 1) / 2
    close(grpo_loss(logp, logp, adv, mask).loss, -1.25)
    close(grpo_loss(logp, logp, adv, mask, aggregation="sequence_mean").loss, -0.5)


def test_grpo_loss_gradient_direction():
    logp = torch.full((1, 2), -1.0, requires_grad=True)
    grpo_loss(logp, logp.detach(), torch.tensor([1.0]), torch.ones(1, 2)).loss.backward()
    assert (logp.grad < 0).all()  # raising logp of a positive-advantage token lowers the loss


def test_grpo_loss_micro_batch_accumulation_matches_full_batch():
    gen = torch.Generator().manual_seed(0)
    logp = (-torch.rand(4, 5, generator=gen, dtype=F64) * 3).requires_grad_(True)
    old = logp.detach() + 0.3 * torch.randn(4, 5, generator=gen, dtype=F64)
    ref = logp.detach() + 0.2 * torch.randn(4, 5, generator=gen, dtype=F64)
    adv = t([1.0, -0.5, 2.0, -1.5])
    mask = t([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 0, 0]])
    kwargs = {"ref_logp": ref, "kl_coef": 0.05}
    full = grpo_loss(logp, old, adv, mask, **kwargs).loss
    (full_grad,) = torch.autograd.grad(full, logp)

    total = float(mask.sum())
    acc = torch.zeros((), dtype=F64)
    for i in range(4):
        s = slice(i, i + 1)
        part = grpo_loss(logp[s], old[s], adv[s], mask[s], ref_logp=ref[s], kl_coef=0.05, num_tokens=total)
        acc = acc + part.loss
    (acc_grad,) = torch.autograd.grad(acc, logp)
    torch.testing.assert_close(acc, full)
    torch.testing.assert_close(acc_grad, full_grad)

    # without the shared divisor each micro-batch is averaged on its own and the sum differs
    naive = sum(
        grpo_loss(logp[i : i + 1], old[i : i + 1], adv[i : i + 1], mask[i : i + 1]).loss for i in range(4)
    )
    assert not torch.allclose(naive, grpo_loss(logp, old, adv, mask).loss)


def test_grpo_loss_bfloat16_inputs_compute_in_float32():
    logp, old, adv, mask = case(torch.bfloat16)
    out = grpo_loss(logp, old, adv, mask.bool())
    assert out.loss.dtype == torch.float32
    assert out.loss.item() == pytest.approx(-0.66, abs=0.02)


def test_grpo_loss_validation():
    logp, old, adv, mask = case()
    with pytest.raises(ValueError, match="aggregation='sum'"):
        grpo_loss(logp, old, adv, mask, aggregation="sum")
    with pytest.raises(ValueError, match="old_logp has shape"):
        grpo_loss(logp, old[:, :2], adv, mask)
    with pytest.raises(ValueError, match="advantages has shape"):
        grpo_loss(logp, old, adv[:1], mask)
    with pytest.raises(ValueError, match="needs ref_logp"):
        grpo_loss(logp, old, adv, mask, kl_coef=0.1)
    with pytest.raises(ValueError, match="num_tokens=5 only applies"):
        grpo_loss(logp, old, adv, mask, aggregation="sequence_mean", num_tokens=5)
    with pytest.raises(ValueError, match="only 0/1"):
        grpo_loss(logp, old, adv, mask * 0.5)
    with pytest.raises(ValueError, match="clip_low=1.5"):
        grpo_loss(logp, old, adv, mask, clip_low=1.5)


# --- M-GRPO --------------------------------------------------------------------------------------


def test_team_advantages_broadcast_to_all_roles_turns():
    # task t1: teams [1, 0] -> mean .5, unbiased std .707107 -> +-.707107; task t2: [.5, .5] -> 0
    team_adv = team_relative_advantages(t([1.0, 0.0, 0.5, 0.5]), ["t1", "t1", "t2", "t2"])
    close(team_adv, [0.707107, -0.707107, 0.0, 0.0])
    # turns of a planner and a solver, interleaved across episodes
    turn_episode = torch.tensor([0, 0, 1, 1, 1, 2, 3, 0])
    turn_role = ["planner", "solver", "planner", "solver", "solver", "planner", "solver", "planner"]
    turn_adv = broadcast_episode_advantages(team_adv, turn_episode)
    close(turn_adv, [0.707107, 0.707107, -0.707107, -0.707107, -0.707107, 0.0, 0.0, 0.707107])
    # both roles see the same value in episode 0
    ep0 = {turn_role[i]: turn_adv[i].item() for i in range(8) if turn_episode[i] == 0}
    assert ep0["planner"] == ep0["solver"]


def test_role_relative_advantages_differ_per_role():
    groups = ["t1", "t1", "t2", "t2"]
    adv = role_relative_advantages(
        {"planner": t([1.0, 0.0, 0.0, 0.0]), "solver": t([0.0, 1.0, 1.0, 0.0])}, groups
    )
    close(adv["planner"], [0.707107, -0.707107, 0.0, 0.0])
    close(adv["solver"], [-0.707107, 0.707107, 0.707107, -0.707107])
    with pytest.raises(ValueError, match="differing shapes"):
        role_relative_advantages({"planner": t([1.0, 0.0]), "solver": t([0.0, 1.0, 1.0])}, [0, 0])


def test_team_and_role_advantages_of_equal_groups_are_exactly_zero():
    rewards = torch.full((8,), 0.7)
    assert team_relative_advantages(rewards, [0] * 8).tolist() == [0.0] * 8
    adv = role_relative_advantages({"planner": rewards, "solver": torch.full((8,), 0.2)}, [0] * 8)
    assert adv["planner"].tolist() == adv["solver"].tolist() == [0.0] * 8


def test_broadcast_validation():
    with pytest.raises(ValueError, match=r"turn_episode_index\[1\]=4 is out of range for 2 episodes"):
        broadcast_episode_advantages(t([1.0, -1.0]), torch.tensor([0, 4]))
    with pytest.raises(ValueError, match=r"turn_episode_index\[0\]=-1"):
        broadcast_episode_advantages(t([1.0, -1.0]), torch.tensor([-1]))
    with pytest.raises(ValueError, match="integer tensor"):
        broadcast_episode_advantages(t([1.0, -1.0]), t([0.0]))


def test_grpo_loss_policy_mask_drops_the_policy_term_and_keeps_kl_and_divisor():
    torch.manual_seed(0)
    logp = torch.randn(3, 5, requires_grad=True)
    old, ref = logp.detach() + 0.01 * torch.randn(3, 5), torch.randn(3, 5)  # ratios near 1: nothing clipped
    adv, mask = torch.tensor([1.0, -0.5, 2.0]), torch.ones(3, 5, dtype=torch.bool)
    keep = torch.zeros(3, 5, dtype=torch.bool)
    keep[:, 1] = True
    masked = grpo_loss(logp, old, adv, mask, policy_mask=keep)
    (grad,) = torch.autograd.grad(masked.loss, logp)
    assert torch.all(grad[~keep] == 0) and torch.all(grad[keep] != 0)
    full = grpo_loss(logp, old, adv, mask)
    (full_grad,) = torch.autograd.grad(full.loss, logp)
    assert torch.allclose(grad[keep], full_grad[keep])  # same divisor: the kept tokens' weight is unchanged
    assert masked.stats["policy_token_fraction"] == pytest.approx(3 / 15)
    with_kl = grpo_loss(logp, old, adv, mask, ref_logp=ref, kl_coef=0.1, policy_mask=keep)
    (kl_grad,) = torch.autograd.grad(with_kl.loss, logp)
    assert torch.all(kl_grad[~keep] != 0)  # the KL term stays on every token
    with pytest.raises(ValueError, match="policy_mask"):
        grpo_loss(logp, old, adv, mask, policy_mask=keep[:, :2])
