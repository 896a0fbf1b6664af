"""An open-ended multi-agent world (issue 20): a small town of agents with shared, private and conflicting
goals, whose reward is a weighted mix of objectives (:mod:`teamrl.world.town`)."""
