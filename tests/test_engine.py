import asyncio
import time

import pytest

from teamrl.engine.engine import Engine
from teamrl.engine.team import Seat, Team
from teamrl.policies.scripted import ScriptedPolicy


def echo(req):
    return f"<plan>{req.prompt}</plan>"


def test_requests_of_concurrent_episodes_are_batched_per_policy():
    policy = ScriptedPolicy(echo)
    engine = Engine({"p": policy})
    team = Team({"a": Seat(policy="p"), "b": Seat(policy="p")}, engine)

    async def episode(i):
        t1 = await team.act("a", f"x{i}", "plan")
        t2 = await team.act("b", t1.message.content + "y", "plan")
        return t2.message.content

    out = engine.run([lambda i=i: episode(i) for i in range(64)])
    assert out == [f"x{i}y" for i in range(64)]
    assert policy.batch_sizes == [64, 64]  # two steps, each one full batch
    assert engine.stats.requests == 128 and engine.stats.batches == 2
    assert engine.stats.queued_during == [0, 0]  # lockstep: nothing arrives while a batch generates


def test_requests_that_arrive_while_a_batch_generates_are_counted():
    """Odd episodes ask after a pause: they miss the first batch and queue while it generates."""
    policy = ScriptedPolicy(echo, seconds_per_batch=0.2)
    engine = Engine({"p": policy}, max_batch=4)
    team = Team({"a": Seat(policy="p")}, engine)

    async def episode(i):
        if i % 2:
            await asyncio.sleep(0.05)
        return (await team.act("a", str(i), "plan")).message.content

    out = engine.run([lambda i=i: episode(i) for i in range(12)])
    assert out == [str(i) for i in range(12)]
    # 6 even ones: a batch of 4 (the other 2 wait, not counted), during which the 6 odd ones arrive
    assert policy.batch_sizes == [4, 4, 4]
    assert engine.stats.queued_during == [6, 0, 0]


def test_max_batch_splits_and_concurrency_limit_holds():
    policy = ScriptedPolicy(echo)
    engine = Engine({"p": policy}, max_batch=16, max_concurrency=40)
    team = Team({"a": Seat(policy="p")}, engine)
    live = {"now": 0, "peak": 0}

    async def episode(i):
        live["now"] += 1
        live["peak"] = max(live["peak"], live["now"])
        turn = await team.act("a", str(i), "plan")
        live["now"] -= 1
        return turn.message.content

    out = engine.run([lambda i=i: episode(i) for i in range(100)])
    assert out == [str(i) for i in range(100)]
    assert max(policy.batch_sizes) <= 16
    assert live["peak"] <= 40


def test_a_fast_role_does_not_wait_for_a_slow_one():
    slow = ScriptedPolicy(echo, seconds_per_batch=0.3)
    fast = ScriptedPolicy(echo, seconds_per_batch=0.0)
    engine = Engine({"slow": slow, "fast": fast})
    team = Team({"big": Seat(policy="slow"), "small": Seat(policy="fast")}, engine)
    finished = []

    async def slow_episode():
        await team.act("big", "s", "plan")
        finished.append("slow")

    async def fast_episode():
        for _ in range(5):
            await team.act("small", "f", "plan")
        finished.append("fast")

    start = time.perf_counter()
    engine.run([slow_episode, fast_episode])
    assert finished == ["fast", "slow"]
    assert time.perf_counter() - start < 0.6


def test_malformed_output_is_recorded_not_raised():
    engine = Engine({"p": ScriptedPolicy(lambda r: "no tags here")})
    team = Team({"coder": Seat(policy="p")}, engine)
    turn = asyncio.run(team.act("coder", "x", "code"))
    assert turn.message is None and "expected '<code>" in turn.error


def test_a_policy_error_fails_only_its_requests():
    def boom(req):
        raise RuntimeError("backend down")

    engine = Engine({"p": ScriptedPolicy(boom)})
    team = Team({"a": Seat(policy="p")}, engine)
    with pytest.raises(RuntimeError, match="backend down"):
        asyncio.run(team.act("a", "x", "plan"))


def test_scripted_seat_and_missing_engine():
    team = Team({"a": Seat(script=lambda call: f"<plan>{call.context['n']}</plan>")})
    turn = asyncio.run(team.act("a", "p", "plan", context={"n": 3}))
    assert turn.message.content == "3"
    with pytest.raises(ValueError, match="needs an engine"):
        Team({"a": Seat(policy="p")})
    with pytest.raises(KeyError, match="no role 'z'"):
        asyncio.run(team.act("z", "p", "plan"))


def test_shared_roles_sample_each_prompt_once_and_mark_the_copies_reused():
    calls = []

    def numbered(req):
        calls.append(req.prompt)
        return f"<plan>{req.prompt}#{len(calls)}</plan>"

    engine = Engine({"p": ScriptedPolicy(numbered)})
    team = Team({"planner": Seat(policy="p"), "coder": Seat(policy="p")}, engine)

    async def episode(task, g):
        plan = await team.act("planner", f"task{task}", "plan")
        code = await team.act("coder", plan.message.content, "plan")
        return plan, code

    team.share_turns({"planner"})
    out = engine.run([lambda t=t, g=g: episode(t, g) for t in range(2) for g in range(4)])
    plans = [p for p, _ in out]
    # one planner sample per task, shared by its 4 episodes; the coder samples every episode
    assert [p.message.content for p in plans[:4]] == [plans[0].message.content] * 4
    assert plans[0].message.content != plans[4].message.content
    assert [p.reused for p in plans] == [False, True, True, True] * 2
    assert sum(c in ("task0", "task1") for c in calls) == 2
    assert not any(c.reused for _, c in out) and len(calls) == 2 + 8
    team.share_turns()  # off again: every episode samples its own plan
    calls.clear()
    out = engine.run([lambda g=g: episode(0, g) for g in range(4)])
    assert len({p.message.content for p, _ in out}) == 4 and not any(p.reused for p, _ in out)


def test_an_event_loop_blocked_by_synchronous_code_is_warned_of_with_where(caplog):
    def stuck_check() -> bool:  # a task's check that blocks the loop (here for a while, not for ever)
        time.sleep(1.6)
        return True

    async def episode() -> bool:
        await asyncio.sleep(0.05)
        return stuck_check()

    async def quick() -> bool:
        await asyncio.sleep(0.05)
        return True

    engine = Engine({}, stall_warning_s=0.4)
    with caplog.at_level("WARNING", logger="teamrl.engine.engine"):
        assert engine.run([quick, quick]) == [True, True]  # a loop that moves: no warning
        assert not caplog.records
        assert engine.run([episode, quick]) == [True, True]
    warned = [r.getMessage() for r in caplog.records]
    assert warned and "the event loop is blocked at" in warned[0] and "in stuck_check" in warned[0]
    assert "test_engine.py" in warned[0]
    assert len(warned) <= 1.6 / 0.4  # once per 0.4 s of it at most, not once per check
