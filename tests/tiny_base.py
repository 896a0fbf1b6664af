"""Test helper: overrides that make a run tiny (a base built in seconds, groups of two, three held-out
tasks), for the workflow tests that train end to end."""

TINY_BASE = [
    "policies.default.embedded.hidden_size=64",
    "policies.default.embedded.num_layers=2",
    "policies.default.embedded.num_heads=2",
    "policies.default.embedded.vocab_size=400",
    "policies.default.embedded.demo_episodes=30",
    "policies.default.embedded.steps=8",
    "policies.default.lora.r=4",
    "policies.default.lora.alpha=8",
    "recipe.sft.demo_episodes=6",
    "tasks.heldout_size=3",
    "algorithm.group_size=2",
    "algorithm.tasks_per_iteration=2",
    "run.progress=false",
]


def train_tiny_coder(tmp_path, workflow: str) -> dict:  # noqa: ANN001
    """Train ``workflow`` on the tiny base, SFT then one RL iteration of its coder (one revision at most);
    the run's summary."""
    from teamrl.config import load_config
    from teamrl.trainer.trainer import Trainer

    cfg = load_config(
        None,
        [
            *TINY_BASE,
            f"workflow.name={workflow}",
            "workflow.max_revisions=1",
            "recipe.roles=[coder]",
            "recipe.iterations_per_role=1",
            f"policies.default.embedded.cache_dir={tmp_path / 'cache'}",
        ],
    )
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        return trainer.fit()
    finally:
        trainer.close()
