"""``teamrl report``: the HTML report of LLM-team and classic-MARL runs, its CLI, ``--serve``, the
live table of ``teamrl train``, and the page itself in headless Chromium.

The run directories are built here with the writers the trainer and ``teamrl marl train`` use
(``JsonlLog``, ``write_jsonl``, ``dump_config``, ``RunContext.log``) so no test depends on a real run.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import types
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from teamrl.atomic import atomic_write_text
from teamrl.cli import main as cli_main
from teamrl.config import dump_config, load_config
from teamrl.protocol import Episode, FormatError, Turn, parse_message
from teamrl.recipes import phases_for
from teamrl.report.load import EpisodeSample, ReportError, load_run, read_metrics, sample_episodes
from teamrl.report.page import write_report
from teamrl.report.serve import ReportServer
from teamrl.trainer.live import LiveTable
from teamrl.trainer.run_dir import JsonlLog, write_jsonl

ROLES = ["planner", "coder", "reviewer", "tester"]
TEAM_FIGURES = {"success", "reward", "kl", "loss", "throughput", "schedule", "contribution"}


# -- synthetic runs, in the trainer's formats ---------------------------------------------------
def _turn(role: str, kind: str, prompt: str, raw: str, n_tokens: int = 12) -> Turn:
    try:
        message, error = parse_message(role, kind, raw), None
    except FormatError as exc:
        message, error = None, str(exc)
    return Turn(
        role=role,
        prompt=prompt,
        text=raw,
        prompt_ids=list(range(30)),
        completion_ids=list(range(n_tokens)),
        logprobs=[-0.2] * n_tokens,
        message=message,
        error=error,
    )


def make_episode(task_id: str, group: int, solved: bool, bad_tests: bool = False) -> Episode:
    task = "write gap(x): return the distance between x and 8\nexamples: gap(10) == 2; gap(7) == 1\n"
    code = "def gap(x):\n    return abs(x - 8)" if solved else "def gap(x):\n    return abs(x - 9)"
    tests = "assert gap(10) == 2\nassert gap(6) == 2"
    turns = [
        _turn(
            "planner", "plan", f"### planner: Plan the steps.\n{task}", "<plan>subtract 8; take abs</plan>"
        ),
        _turn(
            "coder",
            "code",
            f"### coder: Write the function.\n{task}plan: subtract 8\n",
            f"<code>{code}</code>",
        ),
        _turn(
            "reviewer",
            "review",
            f"### reviewer: Approve or ask.\n{task}solution:\n{code}\n",
            "<review>approve</review>",
        ),
        _turn(
            "tester",
            "tests",
            f"### tester: Write asserts.\n{task}solution:\n{code}\n",
            "<tests>assert gap(10) == 2" if bad_tests else f"<tests>{tests}</tests>",
        ),
    ]
    outcome = 1.0 if solved else 0.0
    process = {"planner": 0.67, "coder": outcome, "reviewer": outcome, "tester": 0.0 if bad_tests else 0.5}
    return Episode(
        task_id=task_id,
        group=group,
        turns=turns,
        verifier={
            "code_pass": [outcome],
            "code_turns": [1],
            "reviews": [[2, 0]],
            "plan": "subtract 8; take abs",
            "plan_keys": ["subtract", "8", "absolute"],
            "tests": [] if bad_tests else tests.splitlines(),
            "tests_on_reference": [] if bad_tests else [True, True],
            "tests_on_buggy": [] if bad_tests else [False, True],
            "solved": solved,
        },
        outcome=outcome,
        process=process,
        rewards={
            r: 0.6 * outcome + 0.4 * process[r] - (0.5 if r == "tester" and bad_tests else 0.0) for r in ROLES
        },
    )


def _wave(step: int, base: float, slope: float) -> float:
    return min(1.0, max(0.0, base + slope * step + 0.05 * math.sin(1.7 * step)))


def _split(prefix: str, step: int) -> dict[str, float]:
    out = {f"{prefix}solved": _wave(step, 0.25, 0.01), f"{prefix}outcome": _wave(step, 0.3, 0.01)}
    out[f"{prefix}tokens_per_episode"] = 60.0 - step
    for i, role in enumerate(ROLES):
        out[f"{prefix}reward/{role}"] = _wave(step, 0.2 + 0.1 * i, 0.01)
        out[f"{prefix}process/{role}"] = _wave(step, 0.4, 0.005)
        out[f"{prefix}format_error/{role}"] = 0.01 if role == "tester" else 0.0
    return out


def make_team_run(path: Path, iterations: int = 3, finished: bool = True) -> Path:
    """A freeze-rotate run of four roles, as ``Trainer.fit`` writes it."""
    cfg = load_config(
        overrides=[
            "recipe.name=freeze_rotate",
            "recipe.rounds=1",
            f"recipe.iterations_per_role={iterations}",
            f"run.name={path.name}",
            f"run.out_dir={path.parent}",
            "run.eval_each_phase=true",
        ]
    )
    path.mkdir(parents=True)
    atomic_write_text(path / "config.yaml", dump_config(cfg))
    log = JsonlLog(path / "metrics.jsonl")
    sft = {f"sft/{r}/loss": 0.5 - 0.1 * i for i, r in enumerate(ROLES)}
    evals = [{"label": "after_sft", "step": 0, **_split("eval/", 0)}]
    log.append({"step": 0, **sft, **_split("eval/", 0)})
    step, tokens = 0, 0
    for phase in phases_for(cfg):
        for _ in range(phase.iterations):
            step += 1
            tokens += 3000
            record = {"step": step, "phase": phase.name, **_split("rollout/", step)}
            for role in phase.roles:
                record.update(
                    {
                        f"train/{role}/policy_loss": 0.01 * math.cos(step),
                        f"train/{role}/kl": 0.002 * step,
                        f"train/{role}/clip_fraction": 0.01,
                        f"train/{role}/grad_norm": 0.1,
                        f"train/{role}/turns": 64.0,
                    }
                )
            record.update(
                {
                    "perf/rollout_tokens_per_s": 600.0 + 10 * step,
                    "perf/rl_tokens_total": tokens,
                    "perf/generate_s": 4.0,
                    "perf/rollout_s": 5.0,
                    "perf/iteration_s": 9.0,
                }
            )
            log.append(record)
        ev = {"step": step, **_split("eval/", step)}
        label = (
            "after_rl" if phase.name == phases_for(cfg)[-1].name else f"after_{phase.name.replace('/', '_')}"
        )
        evals.append({"label": label, **ev})
        log.append(ev)
    eps = [
        make_episode(f"gap-d1-write-{i:04x}", g, solved=(i + g) % 2 == 0) for i in range(5) for g in range(2)
    ]
    eps.append(make_episode("wrap-d2-fix-beef", 0, solved=False, bad_tests=True))
    write_jsonl(path / "episodes" / "eval_after_sft.jsonl", (e.model_dump() for e in eps))
    write_jsonl(path / "episodes" / "last_rollout.jsonl", (e.model_dump() for e in eps[:4]))
    if finished:
        write_jsonl(path / "episodes" / "eval_after_rl.jsonl", (e.model_dump() for e in eps[::-1]))
        atomic_write_text(path / "summary.json", json.dumps({"run_dir": str(path), "evals": evals}, indent=2))
    (path / "tb").mkdir()
    return path


def make_marl_run(path: Path, rows: int = 40) -> Path:
    """A classic-MARL run directory as ``teamrl marl train`` writes it (through ``RunContext.log``)."""
    from teamrl.marl.run import RunContext

    path.mkdir(parents=True)
    config = {
        "algorithm": "mappo",
        "env": "simple_spread",
        "env_kwargs": {},
        "config": {"total_env_steps": rows * 3200},
    }
    atomic_write_text(path / "config.yaml", yaml.safe_dump(config, sort_keys=False))
    run = RunContext(path, make_env=None, total_steps=rows * 3200, show_progress=False, tensorboard=False)
    for i in range(1, rows + 1):
        ret = -80 + 45 * (1 - math.exp(-i / 10))
        run.log(
            i * 3200,
            {
                "loss/policy": -0.002,
                "loss/value": 2.0 / i,
                "entropy": 1.6 - 0.01 * i,
                "approx_kl": 0.001,
                "clip_frac": 0.003,
                "agent_steps_per_s": 40000.0 + 100 * i,
                "lr": 0.001,
                "return/mean": ret,
                **{f"return/agent_{j}": ret / 3 for j in range(3)},
                "episode_length": 25.0,
            },
        )
    result = {
        "return/mean": -36.0,
        "return/std": 12.0,
        "episodes": 50.0,
        "algorithm": "mappo",
        "policy": "deterministic",
    }
    atomic_write_text(path / "eval.json", json.dumps(result, indent=1))
    return path


@pytest.fixture
def team_run(tmp_path: Path) -> Path:
    return make_team_run(tmp_path / "runs" / "E1")


# -- the report builder ---------------------------------------------------------------------------
def _figures(out: Path) -> set[str]:
    return {p.stem.split("-", 1)[1] for p in (out / "figures").glob("*.png")}


def test_team_report_has_curves_phases_credit_and_transcripts(team_run, tmp_path):
    out = tmp_path / "report"
    result = write_report([team_run], out)
    page = result.index.read_text()
    assert result.index == out / "index.html" and result.warnings == []
    assert _figures(out) == TEAM_FIGURES
    for png in (out / "figures").glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # self-contained: every chart is embedded, nothing is fetched from elsewhere
    assert page.count('<img class="chart"') == len(TEAM_FIGURES) == page.count("data:image/png;base64,")
    assert "http://" not in page and "https://" not in page and "<script" not in page
    assert "Per-role contribution by phase" in page and "round1/tester" in page
    assert "Per-role credit at each evaluation" in page and "after_round1_planner" in page
    # sample episodes of every episodes file, as conversations with sandbox results and credit
    for source in ("eval_after_rl", "last_rollout", "eval_after_sft"):
        assert f"{source} <span" in page
    assert page.count('<details class="episode"') == 6 + 4 + 6
    assert "Sandbox results" in page and "passes on buggy" in page and "format error" in page
    assert page.index('class="turn" style="--role:#1f77b4"><div class="who"><b>planner') > 0
    run = load_run(team_run)
    assert [s.name for s in run.phases] == [f"round1/{r}" for r in ROLES]
    assert [s.roles for s in run.phases] == [(r,) for r in ROLES] and run.phases[0].planned == 3
    assert [e.label for e in run.evals][:2] == ["after_sft", "after_round1_planner"]


def test_a_run_in_progress_and_a_truncated_line_give_a_warning_not_an_error(tmp_path):
    run = make_team_run(tmp_path / "live", finished=False)
    with open(run / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 13, "phase": "round1/coder", "rollout/sol')  # a crash mid-write
    with open(run / "episodes" / "last_rollout.jsonl", "a") as fh:
        fh.write('{"task_id": "x", "turns": [')
    result = write_report([run], tmp_path / "out")
    page = result.index.read_text()
    assert any("metrics.jsonl: skipped 1 unreadable line" in w for w in result.warnings)
    assert any("last_rollout.jsonl: skipped 1" in w for w in result.warnings)
    assert "skipped 1 unreadable line" in page and "finished" not in page.split("<h2>")[1].split("</h2>")[0]
    assert "running" in page


def test_read_metrics_keeps_a_killed_runs_rows_and_refuses_a_directory_without_metrics(tmp_path, capsys):
    run = make_team_run(tmp_path / "killed", finished=False)
    whole = read_metrics(run)
    with open(run / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 99, "phase": "round1/coder", "rollout/sol')  # a crash mid-write
    notes: list[str] = []
    assert read_metrics(run, notes) == whole and len(whole) > 3
    steps = [r["step"] for r in whole]
    assert steps == sorted(steps) and 99 not in steps
    assert len(notes) == 1 and "skipped 1 unreadable line" in notes[0]
    assert read_metrics(str(run)) == whole  # no list given: the note goes to stderr
    assert "skipped 1 unreadable line" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match="no metrics.jsonl"):
        read_metrics(tmp_path)


def test_a_run_whose_code_ran_without_bubblewrap_says_so(tmp_path):
    run = make_team_run(tmp_path / "weak")
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "sandbox_isolation": "rlimits"}))
    result = write_report([run], tmp_path / "out")
    assert any("sandbox.isolation: rlimits" in w for w in result.warnings)
    assert "no file-system isolation" in result.index.read_text()
    strong = make_team_run(tmp_path / "strong")
    assert not any("isolation" in w for w in write_report([strong], tmp_path / "out2").warnings)


def test_marl_run_gets_its_curves(tmp_path):
    run = make_marl_run(tmp_path / "mappo_s0")
    out = tmp_path / "out"
    result = write_report([run], out)
    page = result.index.read_text()
    assert _figures(out) == {"return", "losses", "diagnostics", "throughput"}
    assert "classic MARL" in page and "simple_spread" in page and "Evaluation (eval.json)" in page
    assert "-36.00 ± 12.00" in page and load_run(run).roles == ["agent_0", "agent_1", "agent_2"]


def test_several_runs_side_by_side(tmp_path):
    a = make_team_run(tmp_path / "sweep_a" / "base")
    b = make_team_run(tmp_path / "sweep_b" / "base", iterations=2)
    m = make_marl_run(tmp_path / "mappo")
    out = tmp_path / "out"
    result = write_report([a, b, m], out)
    page = result.index.read_text()
    assert "Side by side" in page and '<a href="#compare">' in page
    assert "sweep_a/base" in page and "sweep_b/base" in page  # same names told apart by their parent
    assert {"heldout", "solved", "outcome", "tokens", "return", "sps"} <= _figures(out)
    assert len({p.name for p in (out / "figures").glob("*.png")}) == len(
        list((out / "figures").glob("*.png"))
    )
    assert page.count('<section class="run"') == 3


def test_sample_episodes_mixes_solved_failed_and_badly_formatted_ones():
    eps = [make_episode(f"t{i}", 0, solved=i < 2, bad_tests=i == 7) for i in range(10)]
    samples = [EpisodeSample("eval", i, e.model_dump()) for i, e in enumerate(eps)]
    picked = sample_episodes(samples, 3)
    assert {s.data["task_id"] for s in picked} == {"t0", "t2", "t7"}
    assert len(sample_episodes(samples, 50)) == 10 and sample_episodes(samples, 0) == []


def test_a_directory_that_is_not_a_run_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match="not a run directory"):
        load_run(tmp_path / "empty")
    with pytest.raises(ReportError, match="no such directory"):
        load_run(tmp_path / "missing")
    for bad in ("empty", "missing"):
        assert cli_main(["report", str(tmp_path / bad)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("teamrl report: ") and err.count("\n") == 1 and "Traceback" not in err
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "metrics.jsonl").write_text('{"step": 1, "foo": 2}\nnot json\n')
    assert cli_main(["report", str(tmp_path / "junk")]) == 2
    assert "does not look like a teamrl run" in capsys.readouterr().err


def test_cli_report_default_location_and_skipping_a_bad_directory(team_run, tmp_path, capsys):
    assert cli_main(["report", str(team_run), "--episodes", "2"]) == 0
    assert (team_run / "report" / "index.html").exists()
    assert "report written to" in capsys.readouterr().out
    assert load_run(team_run).episodes["eval_after_rl"].__len__() == 6
    (tmp_path / "notarun").mkdir()
    out = tmp_path / "both"
    assert cli_main(["report", str(team_run), str(tmp_path / "notarun"), "--out", str(out)]) == 0
    assert "skipped" in (out / "index.html").read_text()


def test_cli_train_writes_the_report_at_the_end_and_a_failure_only_warns(
    tmp_path, monkeypatch, capsys, caplog
):
    class FakeTrainer:  # stands in for the real one (slow to import and to run)
        def __init__(self, cfg, run_dir, resume=False):
            self.run_dir = Path(run_dir)

        def fit(self):
            shutil.rmtree(self.run_dir, ignore_errors=True)
            make_team_run(self.run_dir)
            return {"run_dir": str(self.run_dir), "evals": []}

        def close(self):
            pass

    fake = types.ModuleType("teamrl.trainer.trainer")
    fake.Trainer, fake.resume_config = FakeTrainer, None
    fake.TrainingStopped = type("TrainingStopped", (Exception,), {})
    monkeypatch.setitem(sys.modules, "teamrl.trainer.trainer", fake)
    args = ["train", "--set", f"run.out_dir={tmp_path}", "--set", "run.name=r1"]
    assert cli_main(args) == 0
    assert (tmp_path / "r1" / "report" / "index.html").exists()
    assert "report:" in capsys.readouterr().out

    def broken(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr("teamrl.report.page.write_report", broken)
    assert cli_main(["train", "--set", f"run.out_dir={tmp_path}", "--set", "run.name=r2"]) == 0
    assert "could not write the report: RuntimeError: disk full" in caplog.text


def test_live_table_rows():
    table = LiveTable(ROLES, header_every=2)
    record = {"step": 7, "phase": "round1/coder", **_split("rollout/", 7), "train/coder/kl": 0.0123}
    record.update(
        {"train/coder/policy_loss": -0.05, "perf/rollout_tokens_per_s": 712.4, "perf/iteration_s": 9.1}
    )
    first = table.lines(record)
    assert len(first) == 2 and first[0].split()[:4] == ["step", "phase", "solved", "R"]
    row = first[1].split()
    assert row[:2] == ["7", "round1/coder"] and "0.0123" in row and "-0.0500" in row and "712" in row
    assert len(table.lines(record)) == 1 and len(table.lines(record)) == 2  # the header every 2 rows
    assert len({len(line) for line in first}) == 1  # fixed width: the columns line up
    skipped = {"step": 8, "phase": "round1/coder", "train/coder/skipped": 1.0}
    assert "skip" in table.row(skipped)
    debate = LiveTable(["debater_0", "debater_12", "judge"]).header().split()
    assert debate[4:7] == ["r:deb_0", "r:de_12", "r:judge"]  # numbered roles keep their number


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


def test_serve_rebuilds_when_metrics_change(team_run, tmp_path):
    server = ReportServer([team_run], tmp_path / "out", port=0, interval=60)
    server.start()
    try:
        status, body = _get(server.url)
        assert status == 200 and b"fetch('version'" in body and b'data-version="1"' in body
        assert json.loads(_get(server.url + "version")[1]) == {"version": 1}
        assert _get(server.url + "figures/E1-success.png")[1][:4] == b"\x89PNG"
        assert _get(server.url + "figures/../../etc/passwd")[0] == 404
        assert server.refresh() is False  # nothing changed
        JsonlLog(team_run / "metrics.jsonl").append(
            {"step": 13, "phase": "round2/coder", "rollout/solved": 0.9}
        )
        assert server.refresh() is True
        assert json.loads(_get(server.url + "version")[1]) == {"version": 2}
        assert b"round2/coder" in _get(server.url)[1]
    finally:
        server.close()


# -- the page in a real browser -------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Fails (never skips) when Chromium is missing: CI installs it (scripts/setup.sh)."""
    from teamrl.report.browser import BrowserMissing, headless_chromium

    try:
        drv = headless_chromium(tmp_path_factory.mktemp("chromium-profile"), console_log=True)
    except BrowserMissing as exc:
        pytest.fail(str(exc))
    drv.set_page_load_timeout(30)
    yield drv
    drv.quit()


def _console_errors(drv) -> list[str]:
    return [e["message"] for e in drv.get_log("browser") if e["level"] == "SEVERE"]


def _charts_rendered(drv) -> list[dict]:
    return drv.execute_script(
        "return Array.from(document.querySelectorAll('img.chart')).map(function(i){"
        "return {alt: i.alt, w: i.clientWidth,"
        " ok: i.complete && i.naturalWidth > 0 && i.naturalHeight > 0};});"
    )


def _open_first_episode(drv):
    from selenium.webdriver.common.by import By

    episode = drv.find_element(By.CSS_SELECTOR, "details.episode")
    transcript = episode.find_element(By.CSS_SELECTOR, ".transcript")
    assert not transcript.is_displayed() and episode.get_attribute("open") is None
    summary = episode.find_element(By.TAG_NAME, "summary")
    drv.execute_script("arguments[0].scrollIntoView({block: 'center'});", summary)
    summary.click()
    return episode, transcript


def test_the_page_in_headless_chromium(browser, tmp_path):
    from selenium.webdriver.common.by import By

    team = make_team_run(tmp_path / "E1")
    marl = make_marl_run(tmp_path / "mappo")
    result = write_report([team, marl], tmp_path / "out")
    browser.get(result.index.as_uri())
    assert browser.title.startswith("teamrl report: E1, mappo")
    charts = _charts_rendered(browser)
    assert len(charts) >= len(TEAM_FIGURES) + 4 + 6  # team + MARL + side-by-side charts
    assert all(c["ok"] and c["w"] > 100 for c in charts), [c["alt"] for c in charts if not c["ok"]]
    episode, transcript = _open_first_episode(browser)
    assert episode.get_attribute("open") is not None and transcript.is_displayed()
    turns = transcript.find_elements(By.CSS_SELECTOR, ".turn")
    assert [t.find_element(By.CSS_SELECTOR, ".who b").text for t in turns] == ROLES
    assert transcript.find_element(By.CSS_SELECTOR, ".sandbox").is_displayed()
    assert "Credit" in transcript.find_element(By.CSS_SELECTOR, ".credit").text
    assert _console_errors(browser) == []


def test_the_served_page_reloads_itself_when_the_run_writes(browser, tmp_path):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    run = make_team_run(tmp_path / "E2", finished=False)
    server = ReportServer([run], tmp_path / "out", port=0, interval=0.2, poll_ms=200)
    server.start()
    try:
        browser.get(server.url)
        assert browser.find_element("tag name", "body").get_attribute("data-version") == "1"
        assert all(c["ok"] for c in _charts_rendered(browser))
        episode, _ = _open_first_episode(browser)
        ident = episode.get_attribute("id")
        JsonlLog(run / "metrics.jsonl").append({"step": 13, "phase": "round2/coder", "rollout/solved": 0.9})
        # the page may reload between finding the body and reading it: look again then
        WebDriverWait(browser, 15, ignored_exceptions=(StaleElementReferenceException,)).until(
            lambda d: d.find_element("tag name", "body").get_attribute("data-version") == "2"
        )
        assert "round2/coder" in browser.page_source
        # the reload keeps the transcript that was open
        assert browser.find_element("id", ident).get_attribute("open") is not None
        assert _console_errors(browser) == []
    finally:
        server.close()


def test_cli_serve_on_a_busy_port_is_a_one_line_error(team_run, tmp_path, capsys):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        code = cli_main(
            ["report", str(team_run), "--serve", "--port", str(port), "--out", str(tmp_path / "o")]
        )
    assert code == 2 and f"port {port} is in use" in capsys.readouterr().err


def test_a_self_play_run_gets_its_game_figure(tmp_path):
    """Held-out shares of the game over training and the training proposals' difficulty: drawn only
    when the run logged them (the pipeline run above has no such figure)."""
    run_dir = make_team_run(tmp_path / "runs" / "SP", iterations=2)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for r in rows:
        if "eval/solved" in r:
            r["eval/selfplay/solver_heldout_accuracy"] = 0.3 + 0.01 * r["step"]
            r["eval/selfplay/reference_solver_rate"] = 0.7 - 0.01 * r["step"]
        if "phase" in r:
            r["rollout/selfplay/difficulty/operations"] = 1.5 + 0.1 * r["step"]
            r["rollout/selfplay/difficulty/max_operand"] = 8.0 + r["step"]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "report"
    result = write_report([run_dir], out)
    assert result.warnings == [] and _figures(out) == TEAM_FIGURES | {"selfplay"}
    assert ">Self-play<" in result.index.read_text()


def test_what_a_workflow_reports_is_drawn_for_a_team_run(tmp_path):
    """A workflow's own figures (``rollout/<name>/<key>``, e.g. the town's objectives) get one chart of small
    curves with the held-out evaluations; the trainer's per-role figures are not among them."""
    from teamrl.report.page import team_charts

    run_dir = make_team_run(tmp_path / "runs" / "TOWN", iterations=3)
    assert "workflow" not in [c.key for c in team_charts(load_run(run_dir))]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for r in rows:
        if "phase" in r:
            r["rollout/town/plausibility"] = 0.6 + 0.01 * r["step"]
            r["rollout/town/conversations_per_agent"] = 4.0 + r["step"]
        if "eval/solved" in r:
            r["eval/town/plausibility"] = 0.65
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = load_run(run_dir)
    charts = {c.key: c for c in team_charts(run)}
    assert "workflow" in charts and charts["workflow"].png[:8] == b"\x89PNG\r\n\x1a\n"
    keys = sorted({k for r in run.rl_rows for k in r if k.startswith("rollout/") and k.count("/") >= 2})
    assert "rollout/town/plausibility" in keys and any(k.startswith("rollout/reward/") for k in keys)
    out = tmp_path / "report"
    result = write_report([run_dir], out)
    assert result.warnings == [] and _figures(out) == TEAM_FIGURES | {"workflow"}


def test_what_the_env_reports_is_drawn_for_a_marl_run(tmp_path):
    """``env/<key>`` rows (an env's ``info[agent]["episode"]``, e.g. a world's objectives) get one chart of
    small curves; a run without them gets none."""
    import io

    from matplotlib.image import imread

    from teamrl.marl.run import RunContext
    from teamrl.report.page import marl_charts

    plain = load_run(make_marl_run(tmp_path / "plain", rows=10))
    assert "env" not in [c.key for c in marl_charts(plain)]
    path = make_marl_run(tmp_path / "world", rows=10)
    run = RunContext(path, make_env=None, total_steps=64_000, show_progress=False, tensorboard=False)
    for i in range(11, 21):  # what a world reports, logged as `teamrl marl train` logs it
        run.log(i * 3200, {f"env/objective/{k}": 0.1 * (i % 5) for k in ("goals", "social", "coherence")})
    world = load_run(path)
    [chart] = [c for c in marl_charts(world) if c.key == "env"]
    image = imread(io.BytesIO(chart.png))
    assert image.shape[1] > 2 * image.shape[0]  # three panels side by side
    assert not world.warnings
