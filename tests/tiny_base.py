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
