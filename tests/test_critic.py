"""PPO with a centralised critic: per-turn rewards, the critic's transcript, a tiny update, resume."""

from __future__ import annotations

import json
import math

import pytest
import torch
from test_credit import pipeline_episode
from test_trainer import SMALL

from teamrl.config import CRITIC_ADAPTER, ConfigError, load_config
from teamrl.rewards.credit import apply_credit, assign_hybrid_rewards
from teamrl.trainer.critic import critic_state, turn_rewards
from teamrl.trainer.trainer import Trainer


@pytest.mark.parametrize(
    "override,needle",
    [
        (["algorithm.critic.policy=big"], "algorithm.critic.policy is 'big'; known policies: ['default']"),
        (["algorithm.gae_lambda=1.5"], "algorithm.gae_lambda: Input should be less than or equal to 1"),
        (["algorithm.critic.value_clip=0"], "algorithm.critic.value_clip: Input should be greater than 0"),
        (
            [
                "policies.api.kind=openai",
                "policies.api.base_url=http://localhost:1/v1",
                "policies.api.model=m",
                "algorithm.critic.policy=api",
            ],
            "algorithm.critic.policy 'api' is an openai endpoint",
        ),
        (
            ["workflow.roles.value_critic.kind=review", "workflow.roles.value_critic.sop=x"],
            "workflow.roles.value_critic: algorithm ppo_critic keeps its critic's adapter under that name",
        ),
    ],
)
def test_bad_critic_settings_name_the_key_and_the_fix(override, needle):
    with pytest.raises(ConfigError) as err:
        load_config(overrides=["algorithm.name=ppo_critic", *override])
    assert needle in str(err.value)


def test_hybrid_reward_arrives_at_the_roles_last_turn():
    cfg = load_config()
    ep = pipeline_episode()
    assign_hybrid_rewards(ep, cfg.workflow.roles, cfg.reward.alpha, cfg.reward.format_penalty)
    r = ep.rewards
    # turns: planner, coder, reviewer, coder, reviewer, tester
    assert turn_rewards(ep, cfg.reward, cfg.workflow.roles) == [
        r["planner"],
        0.0,
        0.0,
        r["coder"],
        r["reviewer"],
        r["tester"],
    ]


def test_per_turn_credit_is_spread_over_the_roles_turns_and_sums_to_its_reward():
    cfg = load_config(overrides=["reward.credit=marti"])
    ep = pipeline_episode()
    assign_hybrid_rewards(ep, cfg.workflow.roles, cfg.reward.alpha, cfg.reward.format_penalty)
    apply_credit(ep, cfg.reward, cfg.workflow.roles)
    got = turn_rewards(ep, cfg.reward, cfg.workflow.roles)
    # MARTI quality shaping, alpha .5, team history; scores [1, 0, 1, 1, 1, 1]:
    # coder's first turn: Q = 1, r = 0 -> 0; its revision: Q = 2/3, r = 1 -> 1 + .5 * 2/3; two turns -> / 2
    assert math.isclose(got[1], 0.0) and math.isclose(got[3], (1 + 0.5 * 2 / 3) / 2)
    for role in ep.rewards:
        own = [x for x, t in zip(got, ep.turns, strict=True) if t.role == role]
        assert math.isclose(sum(own), ep.rewards[role])


def test_the_critic_reads_every_earlier_turn_of_every_role():
    ep = pipeline_episode()
    state = critic_state(ep, 5)  # before the tester's turn, which sees only the final code itself
    assert state.startswith("planner prompt\n[planner] multiply x by 3\n[coder] return x + 3\n")
    assert "[reviewer] wrong" in state and state.endswith("[next: tester]\n")
    assert critic_state(ep, 0) == "planner prompt\n[next: planner]\n"


@pytest.fixture
def critic_cfg(tmp_path):
    return load_config(
        overrides=SMALL
        + [
            f"policies.default.embedded.cache_dir={tmp_path / 'cache'}",
            "algorithm.name=ppo_critic",
            "recipe.roles=[coder]",
            "run.eval_each_phase=false",
        ]
    )


# the same small embedded model, as a policy of its own
def test_a_long_transcript_keeps_the_task_and_the_latest_turns(critic_cfg, tmp_path):
    critic = Trainer(critic_cfg, tmp_path / "run").learner.critic
    critic.max_positions = 10
    (ids,) = critic.encode(["x" * 400])
    (full,) = critic.policy.tokenizer(["x" * 400])["input_ids"]
    assert len(full) > 10 and ids == full[:5] + full[-5:]


SEPARATE_CRITIC = [s.replace("policies.default.", "policies.critic.") for s in SMALL if "default." in s]


@pytest.mark.parametrize("separate", [False, True], ids=["shared_base", "separate_model"])
def test_a_ppo_critic_update_moves_the_critic_and_the_trained_role_only(critic_cfg, tmp_path, separate):
    if separate:  # the critic on a policy of its own, which no role uses
        critic_cfg = load_config(
            overrides=SMALL
            + SEPARATE_CRITIC
            + [
                f"policies.default.embedded.cache_dir={tmp_path / 'cache'}",
                f"policies.critic.embedded.cache_dir={tmp_path / 'cache'}",
                "algorithm.name=ppo_critic",
                "algorithm.critic.policy=critic",
                "recipe.roles=[coder]",
            ]
        )
    trainer = Trainer(critic_cfg, tmp_path / "run")
    assert trainer.learner.critic.policy is trainer.policies["critic" if separate else "default"]
    trainer.sft_roles()
    episodes = trainer.rollout(trainer.suite.fixed_set("train", 2), 2)
    for ep in episodes:  # make the rewards differ, so that advantages are not all 0
        ep.rewards = {r: float(ep.group) for r in ep.rewards}
    before, critic_before = trainer.fingerprints(), trainer.learner.critic.fingerprint()
    stats = trainer.update(episodes, ("coder",))
    after = trainer.fingerprints()
    assert {k for k in before if before[k] != after[k]} == {"coder"}
    assert trainer.learner.critic.fingerprint() != critic_before
    assert CRITIC_ADAPTER not in after  # the frozen check never looks at the critic
    assert stats["train/coder/turns"] >= 2 and stats["critic/turns"] >= 4
    assert stats["critic/value_loss"] > 0 and stats["critic/grad_norm"] > 0
    # the head starts at 0, so the first values are 0 and the returns come from the rewards alone
    assert stats["critic/value_mean"] == 0.0 and 0.0 < stats["critic/return_mean"] <= 0.5


def test_the_critic_is_checkpointed_and_restored_on_resume(critic_cfg, tmp_path):
    run = tmp_path / "run"
    cfg = critic_cfg.model_copy(
        update={"recipe": critic_cfg.recipe.model_copy(update={"iterations_per_role": 2})}
    )
    trainer = Trainer(cfg, run)
    calls = {"n": 0}
    original = trainer.update

    def dies_on_second(episodes, roles):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return original(episodes, roles)

    trainer.update = dies_on_second
    with pytest.raises(KeyboardInterrupt):
        trainer.fit()
    trained = trainer.learner.critic.fingerprint()
    assert (run / "checkpoint" / "critic" / "adapter" / "adapter_config.json").exists()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any("critic/value_loss" in r for r in rows)

    resumed = Trainer(load_config(run / "config.yaml"), run, resume=True)
    assert resumed.learner.critic.fingerprint() == trained
    assert resumed.learner.critic.optimizer.state  # AdamW's moments came back too
    fresh = Trainer(cfg, tmp_path / "other").learner.critic
    assert fresh.fingerprint() != trained
    with torch.no_grad():
        assert not torch.equal(resumed.learner.critic.head.weight, fresh.head.weight)
    assert resumed.fit()["evals"][-1]["label"] == "after_rl"


def test_the_example_config_loads():
    from pathlib import Path

    cfg = load_config(Path(__file__).parents[1] / "examples" / "pipeline_ppo_critic.yaml")
    assert cfg.algorithm.name == "ppo_critic" and cfg.algorithm.critic.policy == "default"
