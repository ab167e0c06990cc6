"""One meaning of *solved*: the final policy's mean return on fresh test episodes reaches the
task's ``solved_return``. ``summary.json``, the line ``esjax evolve`` prints and a sweep's
per-seed verdicts all say the same, and all agree with ``evaluate_run`` called directly.

The threshold is put between the final and the best policy's test returns, where the old
definitions (best-of-both in the CLI, the search mean's evaluation return in summary.json, an
evaluation ever crossing it in sweeps) could disagree.
"""

from __future__ import annotations

import json

import jax
import pytest
from test_cli import esjax

from esjax._src.analysis.sweeps import sweep
from esjax._src.run import programs, saved
from esjax._src.run.saved import evaluate_run
from esjax._src.run.training import evolve

TINY = ["episode_length=40", "evaluation.every=1", "evaluation.episodes=4"]
RUN = {"popsize": 8, "generations": 3, "rollouts": 1}


def threshold_between_final_and_best(run_dir) -> float:
    """A threshold that only one of the final and the best policy reaches, when they differ."""
    final = evaluate_run(run_dir, which="final")["mean"]
    best = evaluate_run(run_dir, which="best")["mean"]
    return (final + best) / 2 if final != best else final - 1.0


@pytest.fixture(scope="module")
def threshold(tmp_path_factory):
    probe = tmp_path_factory.mktemp("probe") / "run"
    evolve("pendulum", **RUN, out=probe, overrides=TINY)
    return threshold_between_final_and_best(probe)


def test_summary_and_printed_verdict_are_the_final_policys_test_return(threshold, tmp_path):
    out = tmp_path / "run"
    args = ["--popsize", "8", "--generations", "3", "--rollouts", "1"]
    sets = [f"--set={o}" for o in [*TINY, f"solved_return={threshold!r}"]]
    result = esjax("evolve", "pendulum", *args, *sets, "--out", out, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((out / "summary.json").read_text())
    final = evaluate_run(out, which="final")["mean"]  # the reference, called directly
    assert summary["solved"] is (final >= threshold)
    assert summary["solved_per_seed"] == [final >= threshold]
    assert summary["final_test_return"] == pytest.approx(final, rel=1e-6)
    printed = [line for line in result.stdout.splitlines() if "olved:" in line]
    assert len(printed) == 1, result.stdout
    assert printed[0].startswith("Solved:" if summary["solved"] else "Not solved:")
    assert "final policy" in printed[0]


def test_a_sweeps_per_seed_verdicts_are_each_runs_own(threshold, tmp_path):
    out = tmp_path / "sweep"
    overrides = [*TINY, f"solved_return={threshold!r}"]
    vary = ["strategy_settings.std_init=0.05,0.1"]
    record = sweep("pendulum", vary, out=out, seeds=2, overrides=overrides, **RUN)
    for entry in record["configurations"]:
        run_dir = out / entry["run_dir"]
        summary = json.loads((run_dir / "summary.json").read_text())
        expected = [evaluate_run(run_dir, seed=s)["mean"] >= threshold for s in range(2)]
        assert entry["solved_per_seed"] == summary["solved_per_seed"] == expected
        assert entry["solved_seeds"] == sum(expected)
        assert summary["solved"] is (summary["final_test_return"] >= threshold)


def test_a_tasks_test_episodes_set_the_verdicts_episodes_and_evals_default(threshold, tmp_path):
    """``test_episodes = 37``: the verdict is the mean over 37 fresh episodes, and so is
    ``esjax eval``'s default; 128 episodes (the default elsewhere) give another mean."""
    out = tmp_path / "run"
    overrides = [*TINY, f"solved_return={threshold!r}", "test_episodes=37"]
    evolve("pendulum", **RUN, out=out, overrides=overrides)
    summary = json.loads((out / "summary.json").read_text())
    on_37 = evaluate_run(out, episodes=37)
    assert summary["test_episodes"] == 37 and on_37["episodes"] == 37
    assert summary["final_test_return"] == pytest.approx(on_37["mean"], rel=1e-6)
    assert summary["solved_per_seed"] == [on_37["mean"] >= threshold]
    assert evaluate_run(out, episodes=128)["mean"] != pytest.approx(on_37["mean"], rel=1e-6)
    printed = esjax("eval", str(out), "--json", cwd=tmp_path)
    assert printed.returncode == 0, printed.stderr
    assert json.loads(printed.stdout)["episodes"] == 37


@pytest.mark.parametrize("normalize", [False, True])
def test_the_final_test_compiles_while_the_run_trains(normalize, tmp_path, monkeypatch):
    """The verdict's test program is traced and compiled in a thread during training, so the
    verdict itself traces nothing; its numbers still equal ``evaluate_run`` called afterwards.
    With ``normalize_obs`` the saved statistics must meet the program compiled without them.

    The thread is named as a background compile, so a stopped run exits without waiting for
    it (``esjax._src.cli.terminal.exit_stopped``). Shapes no other test here uses (41-step episodes,
    13 test episodes) make the run cold.
    """
    events = []

    def listen(event, duration, **kwargs):
        if event.startswith("/jax/core/compile/"):
            events.append((event, duration, kwargs))

    real_wait = saved._wait_for_test_compile
    ahead = []

    def wait_then_listen(rollout, episodes, stopped):
        ahead.append(saved._TEST_COMPILES.get((rollout, episodes)))
        real_wait(rollout, episodes, stopped)
        jax.monitoring.register_event_duration_secs_listener(listen)

    monkeypatch.setattr(saved, "_wait_for_test_compile", wait_then_listen)
    out = tmp_path / "run"
    overrides = [
        *("episode_length=41", "evaluation.every=2", "evaluation.episodes=4"),
        *("test_episodes=13", "solved_return=-1e9", f"normalize_obs={str(normalize).lower()}"),
    ]
    try:
        evolve("pendulum", popsize=8, generations=4, rollouts=1, out=out, overrides=overrides)
    finally:
        if ahead:
            jax.monitoring.unregister_event_duration_listener(listen)
    assert len(ahead) == 1 and ahead[0] is not None, ahead
    assert ahead[0].name.startswith(programs.COMPILE_THREAD)
    # Small programs around it (a parameter template, a squeeze) may trace; the test rollout
    # itself is neither traced nor compiled again.
    assert not [e for e in events if "population" in e[2].get("fun_name", "")], events
    summary = json.loads((out / "summary.json").read_text())
    final = evaluate_run(out, which="final")["mean"]
    assert summary["final_test_return"] == pytest.approx(final, rel=1e-6)
