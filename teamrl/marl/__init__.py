"""Classic multi-agent RL on PettingZoo environments: IPPO, MAPPO, QMIX, MADDPG.

Every algorithm is one readable file (``ippo.py``, ``mappo.py``, ``qmix.py``, ``maddpg.py``) written
against the vectorised multi-agent environment interface of :mod:`teamrl.marl.core`; environments
(the batched MPE and adaptors for any PettingZoo env) live in :mod:`teamrl.marl.envs`.
"""
