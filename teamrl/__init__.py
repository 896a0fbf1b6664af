"""teamrl: train teams of LLM agents with reinforcement learning."""

__version__ = "0.1.0"
