from pettingzoo.test import api_test

from teamrl.trainer.pettingzoo_env import TeamAECEnv


def test_passes_pettingzoo_api_test():
    env = TeamAECEnv()
    api_test(env, num_cycles=10)
    env.close()


def test_scripted_team_plays_through_the_aec_api():
    env = TeamAECEnv()
    env.reset(seed=3)
    task = env.task
    answers = {
        "planner": f"<plan>{task.plan}</plan>",
        "coder": "<code>" + task.reference_solution.strip() + "</code>",
        "reviewer": "<review>approve</review>",
        "tester": "<tests>" + "\n".join(task.demo_tests) + "</tests>",
    }
    order = []
    for agent in env.agent_iter():
        obs, reward, term, trunc, info = env.last()
        if term or trunc:
            env.step(None)
            continue
        assert task.spec in obs  # every role's observation is its prompt with the task
        order.append(agent)
        env.step(answers[agent])
    assert order == ["planner", "coder", "reviewer", "tester"]
    assert env.episode.outcome == 1.0
    assert env.episode.rewards == {r: 1.0 for r in order}
    env.close()
