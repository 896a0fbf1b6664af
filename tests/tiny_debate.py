"""Test helper: the overrides of a debate on a tiny embedded base that builds in seconds."""

TINY_DEBATE = [
    "workflow.name=debate",
    "policies.default.embedded.hidden_size=64",
    "policies.default.embedded.num_layers=2",
    "policies.default.embedded.num_heads=2",
    "policies.default.embedded.vocab_size=400",
    "policies.default.embedded.demo_episodes=30",
    "policies.default.embedded.steps=8",
    "policies.default.lora.r=4",
    "policies.default.lora.alpha=8",
    "recipe.sft.demo_episodes=6",
    "algorithm.group_size=2",
    "algorithm.tasks_per_iteration=2",
    "run.progress=false",
]
