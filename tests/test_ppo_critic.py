"""teamrl.algorithms.ppo_critic against hand-computed values."""

import math

import pytest
import torch

from teamrl.algorithms import explained_variance, gae, normalize_advantages, per_role_gae, value_loss

torch.set_num_threads(1)


def t(values):
    return torch.tensor(values, dtype=torch.float64)


def close(actual: torch.Tensor, expected, atol: float = 1e-6) -> None:
    torch.testing.assert_close(actual, t(expected).to(actual.dtype), atol=atol, rtol=0)


def test_gae_hand_computed():
    # gamma .9, lambda .8, V = [.5, .4, .8], reward 1 at the last turn:
    # delta2 = 1 - .8 = .2                 A2 = .2
    # delta1 = .9 * .8 - .4 = .32          A1 = .32 + .72 * .2 = .464
    # delta0 = .9 * .4 - .5 = -.14         A0 = -.14 + .72 * .464 = .19408
    adv, ret = gae(t([0, 0, 1]), t([0.5, 0.4, 0.8]), gamma=0.9, lam=0.8)
    close(adv, [0.19408, 0.464, 0.2])
    close(ret, [0.69408, 0.864, 1.0])


def test_gae_lambda_one_gives_discounted_returns_and_lambda_zero_one_step_td():
    rewards, values = t([0.5, 0, 1]), t([0.3, 0.2, 0.1])
    _, ret = gae(rewards, values, gamma=0.9, lam=1.0)
    close(ret, [0.5 + 0.81, 0.9, 1.0])  # Monte Carlo, whatever the values
    adv, _ = gae(rewards, values, gamma=0.9, lam=0.0)
    close(adv, [0.5 + 0.9 * 0.2 - 0.3, 0.9 * 0.1 - 0.2, 1 - 0.1])


def test_gae_single_turn_is_reward_minus_value():
    adv, ret = gae(t([0.7]), t([0.25]), gamma=0.5, lam=0.5)
    close(adv, [0.45])
    close(ret, [0.7])


def test_per_role_gae_keeps_sequences_apart_in_input_order():
    # episode 0: coder, reviewer, coder (revision); episode 1: coder, reviewer. gamma 1, lambda 1.
    ids = [(0, "coder"), (0, "reviewer"), (0, "coder"), (1, "coder"), (1, "reviewer")]
    rewards = t([0, 1, 0.5, 0.2, 0])
    values = t([0.1, 0.6, 0.4, 0.3, 0.3])
    adv, ret = per_role_gae(rewards, values, ids, gamma=1.0, lam=1.0)
    # (0, coder): returns [.5, .5] -> A = [.4, .1]; (0, reviewer): [1] -> .4;
    # (1, coder): .2 - .3; (1, reviewer): 0 - .3
    close(ret, [0.5, 1.0, 0.5, 0.2, 0.0])
    close(adv, [0.4, 0.4, 0.1, -0.1, -0.3])


def test_gae_validation():
    with pytest.raises(ValueError, match="gamma=1.5"):
        gae(t([1]), t([0]), gamma=1.5)
    with pytest.raises(ValueError, match="must both be"):
        gae(t([1, 2]), t([0]))
    with pytest.raises(ValueError, match="2 sequence ids for 3 turns"):
        per_role_gae(t([1, 2, 3]), t([0, 0, 0]), ["a", "b"])


def test_normalize_advantages():
    close(normalize_advantages(t([1, 2, 3]), eps=0.0), [-1, 0, 1])
    close(normalize_advantages(t([4.0])), [0.0])
    assert normalize_advantages(t([])).numel() == 0
    # float32 rounding in the mean used to leave equal advantages a same-sign residue
    assert normalize_advantages(torch.full((8,), 0.7)).tolist() == [0.0] * 8


def test_clipped_value_loss_hand_computed_and_its_gradient():
    # old .5 and clip .2 for every item:
    #   item 0: V=1, G=2: unclipped 1, clipped V .7 -> 1.69: the clipped term wins (no gradient)
    #   item 1: V=0, G=0: unclipped 0, clipped V .3 -> .09: clipped wins (no gradient)
    #   item 2: V=0, G=1: unclipped 1, clipped V .3 -> .49: unclipped wins, gradient (V - G) / 3 = -1/3
    values = t([1.0, 0.0, 0.0]).requires_grad_(True)
    out = value_loss(values, t([0.5, 0.5, 0.5]), t([2.0, 0.0, 1.0]), clip=0.2)
    assert math.isclose(out.loss.item(), 0.5 * (1.69 + 0.09 + 1.0) / 3, abs_tol=1e-9)
    assert math.isclose(out.stats["value_clip_fraction"], 2 / 3)
    out.loss.backward()
    close(values.grad, [0.0, 0.0, -1 / 3])


def test_value_loss_without_clip_and_with_a_shared_divisor():
    values = t([1.0, 0.0])
    plain = value_loss(values, t([0.0, 0.0]), t([0.0, 2.0]), clip=None)
    assert math.isclose(plain.loss.item(), 0.5 * (1 + 4) / 2)
    # micro-batches that share the full batch's size sum to the full batch's loss
    targets = t([0.0, 2.0])
    halves = [value_loss(values[i : i + 1], t([0.0]), targets[i : i + 1], None, num_items=2) for i in (0, 1)]
    assert math.isclose(sum(h.loss.item() for h in halves), plain.loss.item())
    with pytest.raises(ValueError, match="clip=0"):
        value_loss(values, values, values, clip=0)


def test_explained_variance():
    target = t([1.0, 2.0, 3.0])
    assert explained_variance(target, target) == 1.0
    assert math.isclose(explained_variance(t([2.0, 2.0, 2.0]), target), 0.0, abs_tol=1e-12)
    assert math.isnan(explained_variance(t([1.0, 1.0]), t([1.0, 1.0])))
