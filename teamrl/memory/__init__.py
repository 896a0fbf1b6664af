"""Cross-episode memory with a capacity, and a collaborator whose taste drifts (issue 19).

- :mod:`teamrl.memory.collaborator`: simulated streamers with hidden, structured, drifting taste;
- :mod:`teamrl.memory.store`: notes distilled from episodes, merging, capacity (entries and tokens);
- :mod:`teamrl.memory.policies`: what to write and forget (none, keep_all, fifo, recency, tally, learned);
- :mod:`teamrl.memory.learn`: sessions, and the outer loop that trains the learned policy by RL.
"""
