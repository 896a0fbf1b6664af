"""The ``reward:`` section: the hybrid reward's weights, the credit strategy and the reward functions."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from teamrl.protocol.settings import Strict


class MAPoRLConfig(Strict):
    """MAPoRL's influence-aware verifier reward (see ``teamrl.rewards.credit.maporl_turn_credit``)."""

    gamma: float = Field(
        0.3, ge=0, le=1, description="discount of the team's later scores (0.3 in the authors' GSM8K config)"
    )
    alpha_follow: float = Field(
        0.0,
        allow_inf_nan=False,
        description="alpha_0: +/- for switching to the answer the others held (right / wrong switch)",
    )
    alpha_independent: float = Field(
        0.0,
        allow_inf_nan=False,
        description="alpha_1: +/- for switching away from the answer the others held",
    )
    beta_persuade: float = Field(
        0.0,
        allow_inf_nan=False,
        description="beta_1: +/- when the others move to this turn's answer next (right / wrong)",
    )
    beta_oppose: float = Field(
        0.0,
        allow_inf_nan=False,
        description="beta_0: +/- when the others move away from this turn's answer next (right / wrong)",
    )


class MARTIConfig(Strict):
    """MARTI's reward shaping (see ``teamrl.rewards.credit.marti_turn_credit``)."""

    mode: Literal["quality", "margin"] = Field(
        "quality", description="quality: r + a(Qr - (1-Q)(1-r)); margin: r + a(r - Q)"
    )
    alpha: float = Field(0.5, ge=0, description="weight a of the shaping term")
    outcome_bonus: float = Field(0.0, ge=0, description="beta: + beta * R added to every turn")
    history: Literal["team", "own"] = Field(
        "team", description="Q averages the earlier turns of the whole team, or of the role itself"
    )


class RewardFunctionConfig(Strict):
    """One reward function of ``reward.functions``."""

    name: str = Field(
        description="a built-in (hybrid, shared, counterfactual, maporl, marti) or an import path "
        "package.module:function"
    )
    weight: float = Field(1.0, allow_inf_nan=False, description="its weight in the sum of the functions")
    args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments passed to it")


class RewardConfig(Strict):
    alpha: float = Field(0.6, ge=0, le=1, description="r_i = alpha * R + (1 - alpha) * p_i")
    role_alpha: dict[str, Annotated[float, Field(ge=0, le=1)]] = Field(
        default_factory=dict,
        description="roles whose hybrid reward uses another alpha than reward.alpha, e.g. "
        "{reviewer: 1.0}: the reviewer rewarded by the team outcome alone",
    )
    format_penalty: float = Field(
        0.5, ge=0, description="subtracted per malformed turn, averaged over the role's turns"
    )
    credit: Literal["shared", "hybrid", "counterfactual", "maporl", "marti"] = Field(
        "hybrid",
        description="how the team outcome becomes per-role rewards: shared (R), hybrid (alpha mix), "
        "counterfactual (R - R with the role replaced), maporl, marti; see docs/guide.md. The same as "
        "functions: [{name: <credit>}]",
    )
    functions: list[RewardFunctionConfig] | None = Field(
        None,
        description="reward functions whose weighted sum is each role's reward (default: the one named by "
        "credit); built-ins or yours by import path (teamrl.rewards.functions)",
    )
    counterfactual_baseline: Literal["reference", "empty"] = Field(
        "reference",
        description="who takes the role's seat in a counterfactual replay: its frozen SFT snapshot "
        "(the KL reference) or an empty turn",
    )
    counterfactual_budget: int = Field(
        64, ge=0, description="counterfactual replays per iteration at most; the rest keep hybrid rewards"
    )
    maporl: MAPoRLConfig = Field(default_factory=MAPoRLConfig)
    marti: MARTIConfig = Field(default_factory=MARTIConfig)

    @model_validator(mode="after")
    def _functions(self) -> RewardConfig:
        if self.functions is not None and "credit" in self.model_fields_set and self.credit != "hybrid":
            raise ValueError(
                "give reward.credit or reward.functions, not both (credit: X is functions: [{name: X}])"
            )
        if self.functions is not None and not self.functions:
            raise ValueError("reward.functions is empty: list at least one (e.g. [{name: hybrid}])")
        return self

    def function_list(self) -> list[RewardFunctionConfig]:
        """The reward functions to apply: ``functions``, or the one ``credit`` names."""
        return (
            list(self.functions) if self.functions is not None else [RewardFunctionConfig(name=self.credit)]
        )
