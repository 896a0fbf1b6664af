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
