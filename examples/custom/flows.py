"""A user workflow (a solver answers, a verifier accepts or rejects) and its own reward function."""

from __future__ import annotations

import random
import re

from teamrl import (
    Episode,
    Message,
    RoleCall,
    SeatConfig,
    Workflow,
    WorkflowSettings,
    extract_answer,
    render_message,
    reward_function,
)


class SolverVerifierSettings(WorkflowSettings):
    name: str = "solver_verifier"
    roles: dict[str, SeatConfig] = {"solver": SeatConfig(max_new_tokens=48), "verifier": SeatConfig()}
    order: list[str] = ["solver", "verifier"]
    slip_rate: float = 0.3  # how often the scripted solver (the SFT data) gets it wrong


def verdict(text: str) -> str | None:
    found = re.search(r"VERDICT: (ACCEPT|REJECT)", text)
    return found.group(1) if found else None


class SolverVerifier(Workflow[SolverVerifierSettings]):
    Settings = SolverVerifierSettings
    task_suite = "reasoning"

    async def play(self, team, task, group=0) -> Episode:
        episode = Episode(task_id=task.task_id, group=group)
        ask = f"### solver: End with ANSWER: <number>.\n{task.brief()}\n"
        solved = await team.act("solver", ask, "answer", context={"task": task})
        answer = extract_answer(solved.message.content) if solved.message else None
        check = f"### verifier: Reply VERDICT: ACCEPT or REJECT.\n{task.brief()}\nanswer: {answer}\n"
        judged = await team.act("verifier", check, "answer", context={"task": task, "answer": answer})
        episode.turns += [solved, judged]
        episode.errors += [t.error for t in (solved, judged) if t.error]
        right = answer is not None and task.check(answer)
        said = verdict(judged.message.content) if judged.message else None
        episode.outcome = float(right and said == "ACCEPT")  # the team delivers a right, checked answer
        episode.verifier = {"solved": bool(episode.outcome), "correct": right, "verdict": said}
        return episode

    def process_scores(self, episode: Episode) -> dict[str, float]:
        v = episode.verifier
        return {
            "solver": float(v["correct"]),
            "verifier": float(v["verdict"] == ("ACCEPT" if v["correct"] else "REJECT")),
        }

    def experts(self, rng: random.Random):
        def solver(call: RoleCall) -> str:
            answer = int(call.context["task"].answer) + (rng.random() < self.settings.slip_rate)
            return render_message(Message(role="solver", kind="answer", content=f"ANSWER: {answer}"))

        def verifier(call: RoleCall) -> str:
            task, answer = call.context["task"], call.context["answer"]
            said = "ACCEPT" if answer is not None and task.check(answer) else "REJECT"
            return render_message(Message(role="verifier", kind="answer", content=f"VERDICT: {said}"))

        return {"solver": solver, "verifier": verifier}


@reward_function
def decisive(episodes, ctx, bonus: float = 1.0):
    """The verifier earns a bonus for rejecting a wrong answer (the case a lazy verifier misses)."""
    return [
        {"verifier": bonus * (e.verifier["verdict"] == "REJECT" and not e.verifier["correct"])}
        for e in episodes
    ]
