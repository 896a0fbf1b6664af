"""The learner on a table policy (one logit per token id): which turns it trains on, and what it logs."""

from __future__ import annotations

import pytest
import torch

from teamrl.algorithms import grpo_loss
from teamrl.config import load_config
from teamrl.protocol import Episode, Turn
from teamrl.trainer.learner import Learner, micro_batches

VOCAB = 7


class TablePolicy:
    """Stands in for HFPolicy: log p(token) = log_softmax(logits)[token] whatever the prompt; adapters
    named ``ref_*`` (the KL reference) read a fixed table."""

    generation_backend = None

    def __init__(self) -> None:
        gen = torch.Generator().manual_seed(0)
        self.model = torch.nn.Module()
        self.model.logits = torch.nn.Parameter(torch.randn(VOCAB, generator=gen, dtype=torch.float64))
        self.ref_logits = torch.randn(VOCAB, generator=gen, dtype=torch.float64)

    def adapter_parameters(self, role: str) -> list[torch.nn.Parameter]:
        return [self.model.logits]

    def set_trainable(self, roles: list[str]) -> None:
        pass

    def token_logprobs(self, adapter, prompt_ids, completion_ids, temperature=1.0):
        logits = self.ref_logits if adapter.startswith("ref_") else self.model.logits
        table = torch.log_softmax(logits / temperature, dim=-1)
        width = max(len(c) for c in completion_ids)
        mask = torch.zeros(len(completion_ids), width)
        index = torch.zeros(len(completion_ids), width, dtype=torch.long)
        for row, c in enumerate(completion_ids):
            mask[row, : len(c)] = 1
            index[row, : len(c)] = torch.tensor(c)
        return table[index] * mask, mask

    def token_logprobs_entropy(self, adapter, prompt_ids, completion_ids, temperature=1.0):
        """The entropy of a position is made up: 1 where the token is FORK, 0 elsewhere."""
        lp, mask = self.token_logprobs(adapter, prompt_ids, completion_ids, temperature)
        entropy = torch.zeros_like(mask)
        for row, c in enumerate(completion_ids):
            entropy[row, : len(c)] = torch.tensor([float(t == FORK) for t in c])
        return lp, entropy, mask


FORK = 3


def episodes(rewards: dict[str, list[float]]) -> list[Episode]:
    """One coder turn per episode, of 1 to 5 tokens, with behaviour log-probs away from the policy's (so the
    PPO ratio is not 1 and some tokens clip)."""
    out = []
    for task, values in rewards.items():
        for g, r in enumerate(values):
            n = len(out)
            ids = [(n + k) % VOCAB for k in range(1 + n % 5)]
            turn = Turn(
                role="coder",
                prompt="p",
                text="",
                prompt_ids=[1],
                completion_ids=ids,
                logprobs=[-1.0 - 0.3 * ((n + k) % 4) for k in range(len(ids))],
            )
            out.append(Episode(task_id=task, group=g, turns=[turn], rewards={"coder": r}))
    return out


def learner(*overrides: str) -> Learner:
    cfg = load_config(None, ["algorithm.ppo_epochs=1", "algorithm.minibatches=1", *overrides])
    return Learner(cfg, {"default": TablePolicy()})  # type: ignore[dict-item]


def test_groups_of_equal_rewards_get_exactly_zero_and_the_batch_is_skipped():
    # 0.7 and 0.2 at G = 8: float32 group statistics used to give every member +0.056 / -0.0147
    eps = episodes({"t1": [0.7] * 8, "t2": [0.2] * 8})
    lrn = learner()
    assert set(lrn.turn_advantages(eps, ("coder",))["coder"].values()) == {0.0}
    before = lrn.policies["default"].model.logits.detach().clone()
    stats = lrn.update(eps, ("coder",), step=0)
    assert stats["train/coder/skipped"] == 1.0
    assert "train/coder/policy_loss" not in stats
    assert torch.equal(lrn.policies["default"].model.logits, before)


@pytest.mark.parametrize(("pos", "neg"), [(1.0, 0.0), (1.0, 0.25), (0.1, 1.0), (0.0, 1.0)])
def test_positive_and_negative_weights_scale_their_side_only(pos, neg):
    eps = episodes({"t1": [1.0, 0.0, 0.5, 0.0], "t2": [0.3, 0.9, 0.1, 0.4]})
    plain = learner().turn_advantages(eps, ("coder",))["coder"]
    sets = (f"algorithm.positive_weight={pos}", f"algorithm.negative_weight={neg}")
    leaning = learner(*sets).turn_advantages(eps, ("coder",))["coder"]
    assert plain.keys() == leaning.keys()
    assert any(v < 0 for v in plain.values()) and any(v > 0 for v in plain.values())
    for key, value in plain.items():
        assert leaning[key] == pytest.approx(value * (pos if value > 0 else neg))
    # a side weighted 0 carries no policy gradient: its turns are not trained on
    stats = learner(*sets).update(eps, ("coder",), step=0)
    kept = sum((v > 0 and pos > 0) or (v < 0 and neg > 0) for v in plain.values())
    assert stats["train/coder/turns"] == kept


def test_a_greedy_baseline_credits_samples_against_the_group_s_greedy_episode():
    eps = episodes({"t1": [0.0, 1.0, 1.0, 0.0], "t2": [1.0, 1.0, 0.0, 1.0]})
    for ep in (eps[0], eps[4]):  # each task's first episode is its greedy anchor
        ep.turns[0].greedy = True
    mean = learner("algorithm.greedy_episodes=1", "algorithm.scale=none").turn_advantages(eps, ("coder",))
    remax = learner(
        "algorithm.greedy_episodes=1", "algorithm.scale=none", "algorithm.baseline=greedy"
    ).turn_advantages(eps, ("coder",))
    assert [mean["coder"][(i, 0)] for i in range(8)] == pytest.approx(
        [-0.5, 0.5, 0.5, -0.5, 0.25, 0.25, -0.75, 0.25]
    )
    # greedy failed t1: the samples that solved it are credited 1, the one that failed too 0; greedy solved
    # t2: only the failing sample is pushed down; the greedy episodes carry no policy gradient
    assert [remax["coder"][(i, 0)] for i in range(8)] == pytest.approx([0, 1, 1, 0, 0, 0, -1, 0])
    stats = learner(
        "algorithm.greedy_episodes=1", "algorithm.scale=none", "algorithm.baseline=greedy"
    ).update(eps, ("coder",), step=0)
    assert stats["train/coder/turns"] == 3.0


def test_only_the_unequal_groups_are_trained_on():
    eps = episodes({"t1": [0.7] * 4, "t2": [1.0, 0.0, 0.5, 0.0]})
    stats = learner().update(eps, ("coder",), step=0)
    assert "train/coder/skipped" not in stats
    assert stats["train/coder/turns"] == 4.0


@pytest.mark.parametrize("kl_coef", [0.0, 0.05])
def test_logged_stats_do_not_depend_on_the_micro_batch_and_policy_loss_is_the_optimised_loss(kl_coef):
    eps = episodes({"t1": [1.0, 0.0, 0.5, 0.2], "t2": [0.3, 0.9, 0.1, 0.4]})
    logged = {}
    params = {}
    # micro_batch_tokens: cut by padded size after sorting by length (a turn here is 2-6 positions)
    settings = {8: [], 1: [], 2: [], 3: [], "t6": ["algorithm.micro_batch_tokens=6"]}
    settings["t13"] = ["algorithm.micro_batch_tokens=13"]
    for micro_batch, more in settings.items():
        mb = 8 if isinstance(micro_batch, str) else micro_batch
        lrn = learner(f"algorithm.micro_batch={mb}", f"algorithm.kl_coef={kl_coef}", *more)
        logged[micro_batch] = lrn.update(eps, ("coder",), step=0)
        params[micro_batch] = lrn.policies["default"].model.logits.detach().clone()
    keys = ["policy_loss", "kl", "clip_fraction", "ratio_mean", "entropy_proxy", "grad_norm"]
    for micro_batch in (1, 2, 3, "t6", "t13"):
        assert torch.allclose(params[micro_batch], params[8], rtol=1e-9, atol=1e-12), micro_batch
        for k in keys:
            assert logged[micro_batch][f"train/coder/{k}"] == pytest.approx(
                logged[8][f"train/coder/{k}"], rel=1e-9, abs=1e-12
            ), (k, micro_batch)
    # recompute the loss of the whole batch at the starting parameters, as one chunk
    lrn = learner(f"algorithm.kl_coef={kl_coef}")
    adv = lrn.turn_advantages(eps, ("coder",))["coder"]
    turns = [eps[i].turns[j] for i, j in adv]
    policy = TablePolicy()
    logp, mask = policy.token_logprobs("coder", [], [t.completion_ids for t in turns], 0.7)
    ref, _ = policy.token_logprobs("ref_coder", [], [t.completion_ids for t in turns], 0.7)
    ref = ref.float() if kl_coef > 0 else None  # the learner scores the reference only for KL, in float32
    old = torch.zeros(logp.shape)  # float32, as the learner pads behaviour log-probs
    for row, t in enumerate(turns):
        old[row, : len(t.logprobs)] = torch.tensor(t.logprobs)
    a = lrn.cfg.algorithm
    full = grpo_loss(
        logp,
        old,
        torch.tensor(list(adv.values())),
        mask,
        ref_logp=ref,
        clip_low=a.clip_low,
        clip_high=a.clip_high,
        kl_coef=kl_coef,
    )
    assert full.stats["clip_fraction"] > 0  # the case exercises the clip
    assert logged[2]["train/coder/policy_loss"] == pytest.approx(full.stats["policy_loss"], rel=1e-9)
    assert logged[2]["train/coder/kl"] == pytest.approx(full.stats["kl"], rel=1e-9)


def test_micro_batches_by_tokens_sort_by_length_and_bound_the_padded_size():
    # rows are (prompt, completion) lengths; the identity gives each row's shape
    rows = [(5, 2), (1, 1), (9, 4), (2, 3), (1, 1), (3, 3), (20, 5), (4, 1)]
    assert micro_batches(rows, 3, 0, lambda r: r) == [rows[0:3], rows[3:6], rows[6:8]]  # off: in order
    chunks = micro_batches(rows, 3, 16, lambda r: r)
    assert sorted(r for c in chunks for r in c) == sorted(rows)  # every row exactly once
    flat = [r for c in chunks for r in c]
    assert flat == sorted(rows)
    for c in chunks:
        assert len(c) <= 3
        padded = len(c) * (max(p for p, _ in c) + max(t for _, t in c))
        assert padded <= 16 or len(c) == 1, c  # a row longer than the budget goes alone
    assert [(20, 5)] in chunks
    # greedy: a chunk ends only when the next row would not fit
    for a, b in zip(chunks, chunks[1:], strict=False):
        grown = [*a, b[0]]
        assert len(a) == 3 or len(grown) * (max(p for p, _ in grown) + max(t for _, t in grown)) > 16


def test_turns_with_an_attempt_group_are_ranked_across_the_task_s_episodes():
    def ep(task: str, g: int, reward: float, revision: float | None) -> Episode:
        turns = [
            Turn(role="coder", prompt=f"p{g}", text="", prompt_ids=[1], completion_ids=[2], logprobs=[-1.0])
        ]
        out = Episode(task_id=task, group=g, turns=turns, rewards={"coder": reward})
        if revision is not None:  # a second version, scored by what it changed, in group "revision 1"
            out.turns.append(turns[0].model_copy(update={"prompt": f"p{g} revise"}))
            out.attempt_rewards[1], out.attempt_groups[1] = revision, "revision 1"
        return out

    eps = [ep("t1", 0, 1.0, -1.0), ep("t1", 1, 1.0, 0.0), ep("t1", 2, 0.0, 1.0), ep("t1", 3, 0.0, None)]
    eps += [ep("t2", 0, 0.5, 1.0)]  # alone in its task's revision group: nothing to rank it against
    adv = learner().turn_advantages(eps, ("coder",))["coder"]
    # first versions: the episode's advantage (t1's rewards 1, 1, 0, 0)
    assert adv[(0, 0)] == adv[(1, 0)] > 0 > adv[(2, 0)] == adv[(3, 0)]
    # revisions: -1, 0, +1 ranked together across t1's episodes (not each alone at its own prompt)
    assert adv[(0, 1)] == pytest.approx(-1.0, abs=1e-5) and adv[(1, 1)] == pytest.approx(0.0)
    assert adv[(2, 1)] == pytest.approx(1.0, abs=1e-5)
    assert adv[(4, 1)] == 0.0 and (3, 1) not in adv
    # against a greedy baseline: episode 1's turns were decoded greedily, so its revision (0.0) is the
    # group's baseline: -1 and +1 keep their sign, the greedy revision gets 0 (scale none: r - 0)
    for turn in eps[1].turns:
        turn.greedy = True
    sets = ("algorithm.greedy_episodes=1", "algorithm.baseline=greedy", "algorithm.scale=none")
    remax = learner(*sets).turn_advantages(eps, ("coder",))["coder"]
    assert [remax[(i, 1)] for i in range(3)] == pytest.approx([-1.0, 0.0, 1.0])
    # and the first versions against greedy's 1.0: the two that failed -1, the other success 0
    assert [remax[(i, 0)] for i in range(4)] == pytest.approx([0.0, 0.0, -1.0, -1.0])
    eps[1].attempt_rewards[1] = 1.0  # greedy's revision now the best: the others are credited below it
    remax = learner(*sets).turn_advantages(eps, ("coder",))["coder"]
    assert [remax[(i, 1)] for i in range(3)] == pytest.approx([-2.0, 0.0, 0.0])


def test_revisions_not_learned_get_no_advantage():
    """test_driven's revision_credit: none: the revisions get 0 in one group, so the learner gives them no
    advantage, while the first versions (first_version_credit: own) are ranked by their own pass fraction."""
    from teamrl.workflows.test_driven import credit_revisions

    eps = []
    for g, code_pass in enumerate([[0.0, 1.0], [1.0], [0.5, 0.0, 0.5]]):
        turn = Turn(role="coder", prompt="p", text="", prompt_ids=[1], completion_ids=[2], logprobs=[-1.0])
        ep = Episode(task_id="t", group=g, verifier={"code_pass": code_pass}, rewards={"coder": float(g)})
        ep.turns = [turn.model_copy(update={"prompt": f"p{g}.{k}"}) for k in range(len(code_pass))]
        credit_revisions(ep, list(range(len(code_pass))), first=True, revisions="none")
        eps.append(ep)
    assert eps[2].attempt_rewards == {0: 0.5, 1: 0.0, 2: 0.0}
    adv = learner().turn_advantages(eps, ("coder",))["coder"]
    assert adv[(0, 1)] == adv[(2, 1)] == adv[(2, 2)] == 0.0  # revisions: nothing to learn
    assert adv[(1, 0)] > adv[(2, 0)] > adv[(0, 0)]  # first versions by their own pass fraction, not rewards


def test_anchored_turns_add_only_their_kl_and_do_not_dilute_the_learned_ones():
    """anchor_unlearned: a group of equal rewards enters the update with the KL to the reference only. The
    gradient equals the plain one plus kl_coef times the anchored turns' KL gradient over the learned
    turns' token count (so the learned turns keep their weight); without KL nothing is anchored; a batch of
    only anchors is still skipped."""
    from teamrl.algorithms.grpo import kl_k3

    eps = episodes({"t1": [1.0, 0.0, 0.5, 0.2], "t2": [0.4] * 4})
    sets = ["algorithm.kl_coef=0.05", "algorithm.max_grad_norm=1e9"]  # no clipping: compare raw gradients
    plain, anchored = learner(*sets), learner(*sets, "algorithm.anchor_unlearned=true")
    stats = anchored.update(eps, ("coder",), step=0)
    plain.update(eps, ("coder",), step=0)
    assert stats["train/coder/anchored_turns"] == 4.0 and stats["train/coder/turns"] == 8.0
    # one optimizer step (1 epoch, 1 minibatch): each policy's .grad is that step's gradient
    extra = anchored.policies["default"].model.logits.grad - plain.policies["default"].model.logits.grad
    start = TablePolicy()
    anchors = [t for e in eps[4:] for t in e.turns]
    logp, mask = start.token_logprobs("coder", [], [t.completion_ids for t in anchors], 0.7)
    ref, _ = start.token_logprobs("ref_coder", [], [t.completion_ids for t in anchors], 0.7)
    learned_tokens = sum(len(t.completion_ids) for e in eps[:4] for t in e.turns)
    (0.05 * (kl_k3(logp, ref.float().double()) * mask).sum() / learned_tokens).backward()
    want = start.model.logits.grad
    assert want is not None and want.abs().max() > 1e-4
    assert torch.allclose(extra, want, rtol=1e-5, atol=1e-9)
    without_kl = learner("algorithm.kl_coef=0", "algorithm.anchor_unlearned=true")
    assert "train/coder/anchored_turns" not in without_kl.update(eps, ("coder",), step=0)
    only_anchors = learner(*sets, "algorithm.anchor_unlearned=true")
    assert only_anchors.update(episodes({"t2": [0.4] * 4}), ("coder",), step=0)["train/coder/skipped"] == 1.0


def test_top_entropy_quantile_learns_on_the_forking_tokens_only():
    """algorithm.top_entropy_quantile < 1: the policy gradient comes from the learned turns' highest-entropy
    tokens (here the FORK tokens: 2 of 21, so the top 5% are they), averaged over all their tokens; the
    other tokens and anchored turns keep their KL. Checked against grpo_loss with that token mask by hand."""
    eps = episodes({"t1": [1.0, 0.0, 0.5, 0.2], "t2": [0.0, 1.0, 0.3, 0.9]})
    sets = ["algorithm.max_grad_norm=1e9", "algorithm.kl_coef=0"]
    forks = learner(*sets, "algorithm.top_entropy_quantile=0.05")
    stats = forks.update(eps, ("coder",), step=0)
    turns = [e.turns[0] for e in eps]
    n_tokens = sum(len(t.completion_ids) for t in turns)
    n_forks = sum(t.completion_ids.count(FORK) for t in turns)
    assert (n_forks, n_tokens) == (2, 21)
    assert stats["train/coder/policy_token_fraction"] == pytest.approx(n_forks / n_tokens)
    assert stats["train/coder/entropy"] == pytest.approx(n_forks / n_tokens)
    got = forks.policies["default"].model.logits.grad

    start = TablePolicy()
    adv = learner().turn_advantages(eps, ("coder",))["coder"]
    logp, mask = start.token_logprobs("coder", [], [t.completion_ids for t in turns], 0.7)
    width = logp.shape[1]
    old = torch.tensor([t.logprobs + [0.0] * (width - len(t.logprobs)) for t in turns])
    is_fork = torch.tensor(
        [[float(i == FORK) for i in t.completion_ids + [0] * (width - len(t.completion_ids))] for t in turns]
    )
    out = grpo_loss(
        logp,
        old,
        torch.tensor([adv[(i, 0)] for i in range(len(eps))], dtype=torch.float64),
        mask,
        clip_high=0.28,
        policy_mask=is_fork.bool(),
    )
    out.loss.backward()
    assert got is not None and got.abs().max() > 1e-4
    assert torch.allclose(got, start.model.logits.grad, rtol=1e-5, atol=1e-10)
    everything = learner(*sets)
    everything.update(eps, ("coder",), step=0)
    assert not torch.allclose(got, everything.policies["default"].model.logits.grad, atol=1e-4)


def on_policy(eps: list[Episode]) -> list[Episode]:
    """The episodes with their behaviour log-probs set to the starting policy's (PPO's ratio starts at 1)."""
    start = TablePolicy()
    for e in eps:
        for turn in e.turns:
            logp, _ = start.token_logprobs("coder", [], [turn.completion_ids], 0.7)
            turn.logprobs = logp[0].tolist()
    return eps


def test_target_kl_stops_the_update_once_the_policy_moved_that_far(monkeypatch):
    """A step whose approx_kl (the policy against the sampler) exceeds 1.5 x target_kl is not taken, nor any
    after it: on-policy turns take the first step (approx_kl 0) and stop at the second with a tiny target;
    with a large one every step is taken, as without."""
    eps = on_policy(episodes({"t1": [1.0, 0.0, 0.5, 0.2], "t2": [0.0, 1.0, 0.3, 0.9]}))
    sets = ["algorithm.minibatches=4", "algorithm.ppo_epochs=2"]
    tiny, loose, plain = (
        learner(*sets, *more) for more in (["algorithm.target_kl=1e-12"], ["algorithm.target_kl=10"], [])
    )
    norms: list[float] = []
    clip = torch.nn.utils.clip_grad_norm_
    monkeypatch.setattr(
        torch.nn.utils, "clip_grad_norm_", lambda *a, **k: norms.append(float(clip(*a, **k))) or norms[-1]
    )
    stopped = tiny.update(eps, ("coder",), step=0)
    monkeypatch.undo()
    assert stopped["train/coder/stopped_at"] == 1 / 8
    assert len(norms) == 1 and stopped["train/coder/grad_norm"] == pytest.approx(norms[0])  # the step taken
    assert "train/coder/stopped_at" not in loose.update(eps, ("coder",), step=0)
    plain.update(eps, ("coder",), step=0)
    moved = {
        k: lrn.policies["default"].model.logits.detach()
        for k, lrn in {"tiny": tiny, "loose": loose, "plain": plain}.items()
    }
    assert torch.equal(moved["loose"], moved["plain"])
    first = TablePolicy().model.logits.detach()
    assert not torch.equal(moved["tiny"], first)  # one step was taken
    assert not torch.equal(moved["tiny"], moved["plain"])
    assert 0 < stopped["train/coder/approx_kl_max"]
    # its logged means are over the two steps measured (the second refused): ratio_mean stays near 1
    assert stopped["train/coder/ratio_mean"] == pytest.approx(1.0, abs=0.05)


def test_lr_warmup_scales_the_first_steps_and_then_reaches_the_rate():
    """Adam's first step moves every weight by about lr whatever the gradient's size; with lr_warmup_steps N
    the k-th step of a role runs at lr x k / N, then at lr."""
    eps = episodes({"t1": [1.0, 0.0, 0.5, 0.2]})
    start = TablePolicy().model.logits.detach().clone()
    full, warm = learner(), learner("algorithm.lr_warmup_steps=4")
    lr = full.cfg.algorithm.lr
    full.update(eps, ("coder",), step=0)
    warm.update(eps, ("coder",), step=0)
    step_full = (full.policies["default"].model.logits.detach() - start).abs()
    step_warm = (warm.policies["default"].model.logits.detach() - start).abs()
    assert step_full.max() == pytest.approx(lr, rel=1e-3)
    assert step_warm.max() == pytest.approx(lr / 4, rel=1e-3)
    for _ in range(4):
        warm.update(eps, ("coder",), step=1)
    assert [g["lr"] for g in warm.optimizers["coder"].param_groups] == [lr]
