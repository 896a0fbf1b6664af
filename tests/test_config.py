import pytest

from teamrl.config import ConfigError, load_config


def test_defaults_are_the_main_job():
    cfg = load_config()
    assert cfg.workflow.order == ["planner", "coder", "reviewer", "tester"]
    assert cfg.reward.alpha == 0.6
    assert cfg.trained_roles() == ["planner", "coder", "reviewer", "tester"]


@pytest.mark.parametrize(
    "override,needle",
    [
        ("algorithm.grup_size=3", "algorithm.grup_size: unknown key; did you mean 'group_size'"),
        ("workflow.roles.coder.sopp=x", "did you mean 'sop'"),
        (
            "algorithm.group_size=1",
            "algorithm.group_size: Input should be greater than or equal to 2 (got 1)",
        ),
        ("reward.alpha=1.5", "reward.alpha"),
        ("workflow.order=[coder,critic]", "'critic', which is not in workflow.roles"),
        ("workflow.order=[reviewer,coder]", "must come after the first 'code' role"),
        ("tasks.difficulty=[3,1]", "1 <= lo <= hi <= 3"),
        ("policies.default.kind=hf", "needs `path`"),
        ("workflow.roles.coder.policy=big", "known policies: ['default']"),
        ("workflow.roles.coder.adapter=false", "trainable needs adapter: true"),
        ("recipe.roles=[judge]", "recipe.roles names 'judge'"),
        ("recipe.iterations_per_role={judge: 3}", "names 'judge', which is not a trained role"),
        ("recipe.iterations_per_role={coder: 0}", "must be at least 1"),
        (
            "algorithm.top_entropy_quantile=0",
            "algorithm.top_entropy_quantile: Input should be greater than 0",
        ),
        ("algorithm.target_kl=-0.1", "algorithm.target_kl: Input should be greater than 0"),
        (
            "algorithm.lr_warmup_steps=-1",
            "algorithm.lr_warmup_steps: Input should be greater than or equal to 0",
        ),
        ("algorithm.baseline=greedy", "it needs algorithm.greedy_episodes >= 1 (got 0)"),
        ("algorithm.baseline=median", "algorithm.baseline: Input should be 'mean' or 'greedy'"),
        ("groupsize", "--set expects key=value"),
    ],
)
def test_bad_values_name_the_key_and_the_fix(override, needle):
    with pytest.raises(ConfigError) as err:
        load_config(overrides=[override])
    assert needle in str(err.value)


def test_a_greedy_baseline_needs_a_group_s_greedy_episode_and_no_critic():
    sets = ["algorithm.baseline=greedy", "algorithm.greedy_episodes=1"]
    assert load_config(overrides=sets).algorithm.baseline == "greedy"
    with pytest.raises(ConfigError, match="got ppo_critic: its baseline is the critic's value"):
        load_config(overrides=[*sets, "algorithm.name=ppo_critic"])


def test_yaml_changes_one_field_and_keeps_the_rest(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("workflow:\n  order: [coder, reviewer]\n  roles:\n    coder:\n      sop: Be brief.\n")
    cfg = load_config(path, ["algorithm.group_size=4"])
    assert cfg.workflow.order == ["coder", "reviewer"]
    assert cfg.workflow.roles["coder"].sop == "Be brief."
    assert cfg.workflow.roles["coder"].kind == "code"  # default kept
    assert cfg.algorithm.group_size == 4


def test_a_new_role_is_a_config_change(tmp_path):
    cfg = load_config(
        overrides=[
            "workflow.roles.critic.kind=review",
            "workflow.roles.critic.sop=Find the bug.",
            "workflow.order=[coder,critic,reviewer]",
        ]
    )
    assert cfg.workflow.roles["critic"].kind == "review"


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config(bad)


@pytest.mark.parametrize(
    "text", ["", "\n  \n", "# nothing here yet\n# algorithm:\n", "null\n", "~\n", "{}\n"]
)
def test_an_empty_file_is_an_error_not_the_defaults(tmp_path, text):
    empty = tmp_path / "empty.yaml"
    empty.write_text(text)
    with pytest.raises(
        ConfigError, match=r"empty\.yaml is empty: give at least one section.*omit the CONFIG"
    ):
        load_config(empty)


def test_a_key_given_twice_names_the_key_the_file_and_both_lines(tmp_path):
    twice = tmp_path / "twice.yaml"
    twice.write_text("algorithm:\n  lr: 0.1\nrun:\n  seed: 1\nalgorithm:\n  group_size: 4\n")
    with pytest.raises(ConfigError, match=r"twice\.yaml: key 'algorithm' is given twice .* lines 1 and 5"):
        load_config(twice)
    nested = tmp_path / "nested.yaml"
    nested.write_text("workflow:\n  roles:\n    coder:\n      max_new_tokens: 8\n      max_new_tokens: 9\n")
    with pytest.raises(ConfigError, match=r"nested\.yaml: key 'max_new_tokens' .* lines 4 and 5"):
        load_config(nested)
    flow = tmp_path / "flow.yaml"
    flow.write_text("algorithm: {lr: 0.1, lr: 0.2}\n")
    with pytest.raises(ConfigError, match=r"key 'lr' .* lines 1 and 1"):
        load_config(flow)
    # a YAML merge key may be overridden on purpose; that is no duplicate
    merged = tmp_path / "merged.yaml"
    merged.write_text("algorithm:\n  <<: {lr: 0.1, group_size: 4}\n  lr: 0.2\n")
    cfg = load_config(merged)
    assert (cfg.algorithm.lr, cfg.algorithm.group_size) == (0.2, 4)


@pytest.mark.parametrize(
    ("text", "needle"),
    [("- just\n- a list\n", "got a list"), ("algorithm\n", "got a single value: 'algorithm'")],
)
def test_a_top_level_that_is_not_a_mapping_says_so(tmp_path, text, needle):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(
        ConfigError, match=rf"bad\.yaml: the top level must be a mapping of sections .*{needle}"
    ):
        load_config(bad)


def test_per_role_iteration_counts_shape_the_freeze_rotate_schedule():
    from teamrl.recipes.schedule import DEFAULT_ITERATIONS, phases_for

    cfg = load_config(
        overrides=[
            "recipe.roles=[coder,planner,coder]",
            "recipe.iterations_per_role={coder: 7}",
            "recipe.rounds=2",
        ]
    )
    phases = phases_for(cfg)
    assert [p.name for p in phases[:3]] == ["round1/coder", "round1/planner", "round1/coder#2"]
    assert [p.iterations for p in phases] == [7, DEFAULT_ITERATIONS, 7] * 2
    assert all(p.roles == (p.name.split("/")[1].split("#")[0],) for p in phases)
