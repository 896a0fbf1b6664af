"""The settings of workflow ``self_play`` (the ``workflow:`` section with ``name: self_play``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from teamrl.protocol.settings import SeatConfig, WorkflowSettings

JUDGE = "judge"
GENERATOR, SOLVER, PROPOSER = "generator", "solver", "proposer"
SELF_PLAY_ROLES = {"generator_judge": [GENERATOR, JUDGE], "proposer_solver": [PROPOSER, SOLVER]}


class SelfPlayConfig(WorkflowSettings):
    """Workflow ``self_play``: two roles play a game against each other (see
    teamrl/workflows/self_play.py). ``generator_judge``: roles ``generator`` and ``judge``;
    ``proposer_solver``: roles ``proposer`` and ``solver``."""

    name: str = "self_play"
    game: Literal["generator_judge", "proposer_solver"] = Field(
        "generator_judge", description="which game: a judge checks answers, or a proposer poses problems"
    )
    generator_sop: str = Field("Solve it step by step. End with ANSWER: <number>.")
    judge_sop: str = Field("Is the answer correct? End with VERDICT: ACCEPT or VERDICT: REJECT.")
    proposer_sop: str = Field(
        "Write a new arithmetic problem, about as hard as the example. Reply PROBLEM: <expression>."
    )
    solver_sop: str = Field("Solve it step by step. End with ANSWER: <number>.")
    solver_samples: int = Field(
        4, ge=1, le=64, description="attempts K of the solver at each proposed problem"
    )
    solver_credit: Literal["attempt", "episode"] = Field(
        "attempt",
        description="attempt: each of the solver's K attempts is rewarded by its own correctness and ranked "
        "against the other attempts at the same problem (GRPO's group = the K attempts); episode: every "
        "attempt gets the success rate, ranked against the solver's other episodes (it then learns which "
        "problems are easy, not how to answer them). For GRPO and M-GRPO; ppo_critic's critic values turns "
        "itself",
    )
    anchor_samples: int = Field(
        0,
        ge=0,
        le=64,
        description="proposer_solver: the solver also attempts the example the proposer was shown (a "
        "training problem of the suite) this many times per episode, each attempt scored alone and ranked "
        "against the other attempts at the example; the proposer's reward still counts its own problem "
        "only. Keeps the solver practising the task distribution while the proposer's problems drift "
        "(0: pure self-play). Needs solver_credit: attempt",
    )
    reference_samples: int = Field(
        2,
        ge=0,
        le=64,
        description="proposer_solver, at each evaluation: the solver as it started (its snapshot before RL, "
        "the KL reference) attempts every valid proposal this many times; its success rate "
        "(eval/selfplay/reference_solver_rate) is the proposals' difficulty for a solver that does not "
        "learn, so it falls only if the proposer's problems get harder (0: not measured; needs a solver "
        "adapter)",
    )
    target_rate: float = Field(
        0.5, ge=0, le=1, description="the solver success rate at which the proposer's reward peaks (1.0)"
    )
    invalid_penalty: float = Field(
        -1.0, le=0, description="the proposer's reward for a malformed, unsafe or too large problem"
    )
    repetition_penalty: float = Field(
        1.0,
        ge=0,
        description="proposer_solver: lambda of the batch repetition penalty (as R-Zero's): a valid problem "
        "loses lambda * (its near-duplicates in the iteration's batch) / (valid problems - 1), so a proposer "
        "that writes one problem (by default: one template) over and over earns less than one that varies; 0 "
        "turns it off",
    )
    repetition_on: Literal["shape", "text"] = Field(
        "shape",
        description="what the repetition penalty compares: shape, the expressions with every number "
        "written N (2 - 8 and 1 - 9 are the same problem template); text, numbers included",
    )
    repetition_threshold: float = Field(
        0.75,
        gt=0,
        le=1,
        description="two proposed expressions are near-duplicates when the similarity of their token "
        "sequences (difflib ratio over operators and numbers, or N for each number) is at least this",
    )
    max_chars: int = Field(200, ge=1, le=2000, description="longest proposed expression, in characters")
    max_operations: int = Field(12, ge=1, le=64, description="most operators in a proposed expression")
    max_operand: int = Field(10**6, ge=1, description="largest absolute value of a number written in it")
    max_value: int = Field(10**12, ge=1, description="largest absolute value of any intermediate result")
    roles: dict[str, SeatConfig] = Field(
        default_factory=dict,
        description="seat of each role (policy, adapter, trainable, max_new_tokens); roles left out get "
        "the defaults",
    )

    @model_validator(mode="after")
    def _roles(self) -> SelfPlayConfig:
        if self.anchor_samples and self.solver_credit != "attempt":
            raise ValueError(
                "anchor_samples needs solver_credit: attempt (with episode credit every anchor attempt would "
                "get the advantage of the proposed problem's success rate)"
            )
        for name in self.roles:
            if name not in self.order:
                raise ValueError(
                    f"roles.{name} is not a role of game {self.game!r} {self.order}; remove it or change game"
                )
        for name in self.order:  # in place: assigning would validate this model again
            self.roles.setdefault(name, SeatConfig())
        return self

    merge_exclude = frozenset({"roles"})  # they follow from the game

    @property
    def order(self) -> list[str]:
        """Every role of the game, in speaking order."""
        return list(SELF_PLAY_ROLES[self.game])
