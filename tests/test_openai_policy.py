"""The openai policy kind: an OpenAI-compatible endpoint serves a frozen role, inference only.

Everything talks to the local scripted server in tests/openai_server.py; nothing leaves 127.0.0.1.
"""

import random

import pytest
from openai_server import OpenAIServer

from teamrl.config import ConfigError, load_config
from teamrl.engine.engine import Engine
from teamrl.engine.team import Seat, Team
from teamrl.policies.base import GenerationRequest, TrainablePolicy
from teamrl.policies.openai_compat import ERROR_PREFIX, OpenAICompatPolicy
from teamrl.rewards.credit import assign_hybrid_rewards
from teamrl.tasks.programming import ProgrammingTaskSuite
from teamrl.trainer.build import build_policy, build_team
from teamrl.workflows.experts import pipeline_experts
from teamrl.workflows.pipeline import play_pipeline, prompt_for


def api_overrides(base_url="http://127.0.0.1:9/v1", role="planner", **extra):
    """A config where ``role`` is served by the openai policy 'api' (frozen unless ``extra`` says)."""
    out = [
        "policies.api.kind=openai",
        f"policies.api.base_url={base_url}",
        "policies.api.model=scripted-7b",
        f"workflow.roles.{role}.policy=api",
    ]
    frozen = {"trainable": "false", "adapter": "false"}
    frozen.update(extra)
    return out + [f"workflow.roles.{role}.{k}={v}" for k, v in frozen.items()]


@pytest.fixture
def server():
    with OpenAIServer() as s:
        yield s


# ----- config -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "seat", [{"trainable": "true"}, {"adapter": "true"}, {"trainable": "true", "adapter": "true"}]
)
def test_a_trainable_or_adapted_openai_role_is_a_one_line_config_error(seat):
    with pytest.raises(ConfigError) as err:
        load_config(overrides=api_overrides(role="reviewer", **seat))
    lines = str(err.value).splitlines()[1:]
    assert len(lines) == 1
    assert lines[0].endswith(
        "workflow.roles.reviewer: policy 'api' is an openai endpoint (inference only); "
        "set trainable: false and adapter: false"
    )


def test_a_frozen_openai_role_is_valid_and_not_trained():
    cfg = load_config(overrides=api_overrides(role="reviewer"))
    pc = cfg.policies["api"]
    assert (pc.kind, pc.endpoint, pc.max_concurrency, pc.timeout_s, pc.retries) == (
        "openai",
        "chat",
        16,
        60,
        2,
    )
    assert cfg.trained_roles() == ["planner", "coder", "tester"]
    with pytest.raises(
        ConfigError, match="recipe.roles names 'reviewer', but workflow.roles.reviewer.trainable"
    ):
        load_config(overrides=api_overrides(role="reviewer") + ["recipe.roles=[coder,reviewer]"])


@pytest.mark.parametrize(
    "override,needle",
    [
        ("policies.api.base_url=null", "policies.api: kind 'openai' needs `base_url`"),
        ("policies.api.base_url=localhost:8000", "needs `base_url`"),
        ("policies.api.model=", "kind 'openai' needs `model`"),
        ("policies.api.endpoint=embeddings", "policies.api.endpoint"),
        ("policies.api.max_concurrency=0", "policies.api.max_concurrency"),
        ("policies.default.base_url=http://x/v1", "base_url only apply to kind 'openai'"),
    ],
)
def test_bad_openai_settings_name_the_key(override, needle):
    with pytest.raises(ConfigError) as err:
        load_config(overrides=api_overrides() + [override])
    assert needle in str(err.value)


def test_api_key_env_is_a_variable_name_never_the_key():
    secret = "sk-live-abc123"
    with pytest.raises(ConfigError) as err:
        load_config(overrides=api_overrides() + [f"policies.api.api_key_env={secret}"])
    assert "NAME of an environment variable" in str(err.value)
    assert secret not in str(err.value)


def test_the_api_key_is_read_from_the_named_env_var(server, monkeypatch):
    cfg = load_config(overrides=api_overrides(server.base_url) + ["policies.api.api_key_env=TEAMRL_TEST_KEY"])
    monkeypatch.delenv("TEAMRL_TEST_KEY", raising=False)
    with pytest.raises(
        ConfigError, match="policies.api.api_key_env: the environment variable TEAMRL_TEST_KEY"
    ):
        build_policy(cfg, "api")
    monkeypatch.setenv("TEAMRL_TEST_KEY", "secret-123")
    policy = build_policy(cfg, "api")
    assert isinstance(policy, OpenAICompatPolicy) and policy.roles == ("planner",)
    assert "secret-123" not in repr(policy)
    try:
        [gen] = policy.generate([GenerationRequest("hello there", None, max_new_tokens=8, temperature=0.0)])
    finally:
        policy.close()
    assert gen.text == "<plan>echo 11</plan>"
    [req] = server.requests
    assert req.path == "/v1/chat/completions"
    assert req.headers["Authorization"] == "Bearer secret-123"
    assert req.body == {
        "model": "scripted-7b",
        "messages": [{"role": "user", "content": "hello there"}],
        "max_tokens": 8,
        "temperature": 0.0,
    }


# ----- the policy -----------------------------------------------------------------------------------


def test_completions_endpoint_maps_stop_and_estimates_tokens_without_usage():
    with OpenAIServer(reply=lambda p: "one two END three four five", usage=False) as srv:
        policy = OpenAICompatPolicy(srv.base_url, "m", endpoint="completions", stop=["END"])
        reqs = [GenerationRequest("p", None, max_new_tokens=3, temperature=0.7)]
        reqs.append(GenerationRequest("q", None, max_new_tokens=1, temperature=0.7))
        short, cut = policy.generate(reqs)
        policy.close()
    assert [r.path for r in srv.requests] == ["/v1/completions"] * 2
    body = next(r.body for r in srv.requests if r.body["prompt"] == "p")
    assert body == {"model": "m", "prompt": "p", "max_tokens": 3, "temperature": 0.7, "stop": ["END"]}
    assert short.text == "one two " and short.finished
    assert len(short.completion_ids) == 2 and short.logprobs == []  # ceil(8 chars / 4): an estimate
    assert cut.text == "one" and not cut.finished  # finish_reason "length"


def test_server_errors_are_retried_with_backoff(server):
    server.fail_first = 2
    policy = OpenAICompatPolicy(server.base_url, "m", retries=2, backoff_s=0.01)
    [gen] = policy.generate([GenerationRequest("abc", None)])
    policy.close()
    assert gen.text == "<plan>echo 3</plan>" and gen.finished
    assert [r.status for r in server.requests] == [500, 500, 200]
    assert (policy.stats.attempts, policy.stats.retries, policy.stats.failures) == (3, 2, 0)
    assert len(gen.prompt_ids) == 1 and len(gen.completion_ids) == 2  # from the server's usage


def test_client_errors_are_not_retried_and_a_dead_server_is_an_error_text():
    with OpenAIServer() as srv:
        wrong = OpenAICompatPolicy(srv.base_url + "/oops", "m", retries=3, backoff_s=0.01)
        [gen] = wrong.generate([GenerationRequest("x", None)])
        wrong.close()
        dead_url = srv.base_url
    assert len(srv.requests) == 1 and gen.text.startswith(f"{ERROR_PREFIX} after 1 attempt: HTTP 404")
    dead = OpenAICompatPolicy(dead_url, "m", retries=1, backoff_s=0.01, timeout_s=2)
    [gen] = dead.generate([GenerationRequest("x", None)])
    dead.close()
    assert gen.text.startswith(f"{ERROR_PREFIX} after 2 attempts: network error")
    assert gen.completion_ids == [] and not gen.finished and dead.stats.failures == 1


def test_training_log_probs_are_a_type_error_naming_the_role():
    policy = OpenAICompatPolicy("http://127.0.0.1:9/v1", "m", name="api", roles=["reviewer"])
    with pytest.raises(TypeError, match="role 'reviewer' cannot be trained: policy 'api' is an OpenAI"):
        policy.token_logprobs("reviewer", [[1, 2]], [[3]])
    for method in ("token_logprobs", "adapter_parameters", "set_trainable", "sft", "backward"):
        assert not hasattr(policy, method)
    assert not isinstance(policy, TrainablePolicy)
    from teamrl.policies.hf import HFPolicy

    assert issubclass(HFPolicy, TrainablePolicy)
    with pytest.raises(AttributeError):
        policy.no_such_thing  # noqa: B018 - other missing names stay plain AttributeErrors
    with pytest.raises(ValueError, match="adapter: false"):
        policy.generate([GenerationRequest("x", "reviewer")])
    assert policy._pool is None  # nothing started, nothing sent


# ----- a frozen role served over HTTP inside real team episodes -------------------------------------------


def http_team(cfg, policy, seed=0):
    """The config's team with the planner behind the engine (the openai policy) and scripted experts
    in the other seats."""
    engine = Engine({"api": policy})
    seats = build_team(cfg, engine, temperature=0.0).seats
    experts = pipeline_experts(random.Random(seed), bug_rate=0.0)
    for role, seat in seats.items():
        if role != "planner":
            seats[role] = Seat(trainable=seat.trainable, script=experts[cfg.workflow.roles[role].kind])
    return engine, Team(seats, engine)


def play(engine, team, cfg, tasks):
    def factory(task):
        return lambda: play_pipeline(team, task, cfg.workflow)

    return [episode for episode, _ in engine.run([factory(t) for t in tasks])]


def test_a_frozen_planner_over_http_in_team_episodes(server):
    server.delay_s = 0.05
    server.fail_first = 2  # two of the first requests fail once and are retried
    server.reply = lambda prompt: f"<plan>step for {prompt.splitlines()[1][:30]}</plan>"
    cfg = load_config(overrides=api_overrides(server.base_url) + ["policies.api.max_concurrency=4"])
    policy = build_policy(cfg, "api")
    policy.backoff_s = 0.01
    engine, team = http_team(cfg, policy)
    tasks = ProgrammingTaskSuite(seed=3).sample("train", 8, random.Random(0))
    try:
        episodes = play(engine, team, cfg, tasks)
    finally:
        policy.close()

    planner = cfg.workflow.roles["planner"]
    expected = sorted(prompt_for("planner", planner.sop, t, []) for t in tasks)
    ok = [r for r in server.requests if r.status == 200]
    assert (
        sorted(p for p, r in zip(server.prompts(), server.requests, strict=True) if r.status == 200)
        == expected
    )
    assert len(server.requests) == 10 and policy.stats.retries == 2 and policy.stats.failures == 0
    assert all(r.body["max_tokens"] == planner.max_new_tokens and r.body["temperature"] == 0.0 for r in ok)
    # the engine batched the 8 episodes' planner turns into one call, sent 4 at a time
    assert policy.stats.batches == 1 and engine.stats.batch_sizes == [8]
    assert 2 <= server.peak_in_flight <= 4 and policy.stats.peak_in_flight <= 4
    for task, episode in zip(tasks, episodes, strict=True):
        plan, code = episode.turns[0], episode.turns[1]
        assert plan.role == "planner" and plan.error is None
        assert plan.message.content == f"step for {task.brief().splitlines()[0][:30]}"
        assert len(plan.completion_ids) == len(plan.text.split())  # the server's usage: one token a word
        assert code.role == "coder" and f"plan: {plan.message.content}" in code.prompt
        assert [t.role for t in episode.turns] == ["planner", "coder", "reviewer", "tester"]


def test_a_dead_endpoint_gives_recorded_format_errors_not_exceptions():
    with OpenAIServer(fail_always=True) as srv:
        cfg = load_config(overrides=api_overrides(srv.base_url) + ["policies.api.retries=1"])
        policy = build_policy(cfg, "api")
        policy.backoff_s = 0.01
        engine, team = http_team(cfg, policy)
        tasks = ProgrammingTaskSuite(seed=3).sample("train", 3, random.Random(1))
        try:
            episodes = play(engine, team, cfg, tasks)
        finally:
            policy.close()
    assert len(srv.requests) == 6 and policy.stats.failures == 3
    for episode in episodes:
        plan = episode.turns[0]
        assert plan.message is None
        assert plan.error.startswith(
            "planner: expected '<plan>...</plan>', got 'endpoint error after 2 attempts"
        )
        assert episode.errors == [plan.error]
        assert [t.role for t in episode.turns] == [
            "planner",
            "coder",
            "reviewer",
            "tester",
        ]  # the team went on
        assign_hybrid_rewards(episode, cfg.workflow.roles, alpha=0.6, format_penalty=0.5)
        assert episode.rewards["planner"] <= 0.4 * episode.process.get("planner", 0.0) - 0.5 + 1e-9
