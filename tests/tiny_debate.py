"""Test helper: the overrides of a debate on a tiny embedded base that builds in seconds."""

from tiny_base import TINY_BASE

TINY_DEBATE = ["workflow.name=debate", *TINY_BASE]
