"""Issue 13: a run survives preemption. Stop signals checkpoint and exit 128 + the signal, a run
resumes from its first instant, one process writes a run directory, readers of a live run
never see half a file, non-finite settings and networks that cannot fit are refused.

Process faults are real processes: a real signal, a real ``kill -9``, a real second writer.
``tests/README.md`` maps the issue's items to these tests.
"""

from __future__ import annotations

import dataclasses
import json
import random
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
from test_cli import cli_env, esjax_command
from test_hardening import RUN, SMALL, TOTAL, assert_same_result

from esjax._src.run import runs
from esjax._src.run.training import Interrupted, evolve
from esjax._src.specs.config import ConfigError

CLI_SMALL = ["--popsize", "8", *(x for o in SMALL for x in ("--set", o))]


def strip_wall(rows):
    return [{k: v for k, v in row.items() if k != "wall_s"} for row in rows]


def metrics_rows(run_dir: Path) -> list[dict]:
    return runs.load_metrics(run_dir) if (run_dir / runs.METRICS).is_file() else []


def wait_until(condition, proc: subprocess.Popen, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"process ended before {what}: {proc.communicate()}")
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run the driver-based fault tests must reproduce."""
    out = tmp_path_factory.mktemp("reference") / "run"
    evolve("pendulum", generations=TOTAL, out=out, **RUN)
    return out


# A run that stays alive long enough to be disturbed: it naps after each generation, and
# waits while the file RUN.hold exists.
DRIVER = textwrap.dedent(
    """
    import os, sys, time
    from esjax._src.run.training import Interrupted, evolve

    out, total, every_s, nap = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])

    def progress(row):
        time.sleep(nap)
        while os.path.exists(out + ".hold"):
            time.sleep(0.05)

    try:
        evolve("pendulum", generations=total, out=out, popsize=8, overrides=sys.argv[5:],
               block=1, checkpoint_every_s=every_s, on_progress=progress)
    except Interrupted as stop:
        print(stop, file=sys.stderr)
        sys.exit(stop.exit_code)
    """
)


def start_driver(
    tmp_path: Path, out: Path, *, every_s: float, nap: float, total: int = TOTAL, hold=False
):
    """The driver in a process of its own; with ``hold`` it waits after generation 1 until
    ``release(out)``."""
    if hold:
        Path(f"{out}.hold").touch()
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    args = [sys.executable, str(driver), str(out), str(total), str(every_s), str(nap), *SMALL]
    with open(tmp_path / "driver.log", "w") as log:  # a file: an unread pipe could block the run
        return subprocess.Popen(args, cwd=tmp_path, env=cli_env(), stdout=log, stderr=log)


def release(out: Path) -> None:
    Path(f"{out}.hold").unlink()


# ---------------------------------------------------------------------------- stop signals
def test_sigterm_at_a_random_generation_resumes_to_the_same_result(tmp_path):
    """The CLI as a scheduler sees it: SIGTERM, exit 143, the resume command, same result."""
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [*esjax_command(), "evolve", "pendulum", *CLI_SMALL, "--generations", "100000",
         "--out", str(out)],
        cwd=tmp_path, env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    at = random.Random(13).randint(5, 60)
    try:
        wait_until(lambda: len(metrics_rows(out)) >= at, proc, f"generation {at}")
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM == 143, stderr
    assert "Traceback" not in stderr
    assert "SIGTERM" in stderr and f"--resume --out {out}" in stderr
    done = runs.load_checkpoint(out)[0]["generation"]
    assert done >= at
    assert [r["generation"] for r in runs.load_metrics(out)] == list(range(1, done + 1))

    total = done + 7
    resumed = subprocess.run(
        [*esjax_command(), "evolve", "--resume", "--out", str(out), "--generations", str(total)],
        cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    reference = tmp_path / "reference"
    evolve("pendulum", generations=total, out=reference, **RUN)
    assert_same_result(out, reference)
    assert strip_wall(runs.load_metrics(out)) == strip_wall(runs.load_metrics(reference))


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGUSR1, signal.SIGINT])
def test_every_stop_signal_checkpoints_and_exits_128_plus_its_number(tmp_path, signum):
    out = tmp_path / "run"
    proc = start_driver(tmp_path, out, every_s=1e9, nap=0.0, hold=True)  # no periodic checkpoint
    try:
        wait_until(lambda: len(metrics_rows(out)) >= 1, proc, "generation 1")
        proc.send_signal(signum)
        release(out)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = (tmp_path / "driver.log").read_text()
    assert proc.returncode == 128 + signum, log
    assert signal.Signals(signum).name in log
    assert runs.load_checkpoint(out)[0]["generation"] == 1
    assert [r["generation"] for r in metrics_rows(out)] == [1]


def test_a_second_signal_while_checkpointing_corrupts_nothing(reference, tmp_path):
    """SIGTERM, then SIGTERM again from inside the checkpoint write it started."""
    code = textwrap.dedent(
        """
        import os, signal, sys, time
        from esjax._src.run import runs
        from esjax._src.run.training import Interrupted, evolve

        real_write = runs.atomic_write

        def write(path, data, **options):
            if os.path.basename(path) == runs.CHECKPOINT:
                os.kill(os.getpid(), signal.SIGTERM)  # lands mid-write
                time.sleep(0.2)
            return real_write(path, data, **options)

        def progress(row):
            if row["generation"] == 3:
                runs.atomic_write = write
                os.kill(os.getpid(), signal.SIGTERM)

        try:
            evolve("pendulum", generations=int(sys.argv[2]), out=sys.argv[1], popsize=8,
                   overrides=sys.argv[3:], block=1, checkpoint_every_s=1e9, on_progress=progress)
        except Interrupted as stop:
            sys.exit(stop.exit_code)
        """
    )
    out = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-c", code, str(out), str(TOTAL), *SMALL],
        cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 143, result.stderr
    assert runs.load_checkpoint(out)[0]["generation"] == 3
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]
    evolve(None, out=out, resume=True)
    assert_same_result(out, reference)


def test_signal_handlers_are_restored_after_a_run(tmp_path):
    """Library use: the caller's handlers come back, whether the run finishes or stops."""

    def mine(signum, frame):
        raise AssertionError("the caller's handler ran during the run")

    # Whatever SIGINT was before (Python's default, or ignored when started in the background).
    caller_sigint = signal.getsignal(signal.SIGINT)
    previous = signal.signal(signal.SIGTERM, mine)
    try:
        evolve("pendulum", generations=2, out=tmp_path / "a", **RUN)
        assert signal.getsignal(signal.SIGTERM) is mine

        def stop(row):
            signal.raise_signal(signal.SIGTERM)

        with pytest.raises(Interrupted) as err:
            evolve("pendulum", generations=TOTAL, out=tmp_path / "b", on_progress=stop, **RUN)
        assert err.value.exit_code == 143 and err.value.generation == 1  # the first host visit
        assert signal.getsignal(signal.SIGTERM) is mine
        assert signal.getsignal(signal.SIGINT) is caller_sigint
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.parametrize("moment", ["in_the_block", "while_waiting"])
def test_a_stop_while_the_evaluation_compiles_does_not_wait_for_it(tmp_path, monkeypatch, moment):
    """A signal in the block before an evaluation whose program is still compiling in the
    background, or while the loop waits for that compile: the run stops at its last recorded
    generation, without the evaluation, and resumes to the uninterrupted run's numbers."""
    import importlib
    import os
    import threading

    from esjax._src.run import loop

    evolve_module = importlib.import_module("esjax._src.run.training")
    real_build = evolve_module.engine_for
    calls = {"evaluate": 0}

    def build(config):
        task, engine = real_build(config)

        def run_block(state, n):
            out = engine.run_block(state, n)
            if int(n) > 1 and moment == "in_the_block":  # the block after the first generation
                signal.raise_signal(signal.SIGTERM)
            return out

        def evaluate(state):
            calls["evaluate"] += 1
            return engine.evaluate(state)

        evaluate.compile_in_background = engine.evaluate.compile_in_background
        return task, dataclasses.replace(engine, run_block=run_block, evaluate=evaluate)

    timers = []

    def compiling(program):  # the first time the loop asks, it is about to wait: signal then
        if moment == "while_waiting" and not timers:
            timers.append(threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)))
            timers[0].start()
        return True

    # A signal that came after the run (had it not waited) must fail the test, not end pytest.
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        with monkeypatch.context() as patch:
            patch.setattr(evolve_module, "engine_for", build)
            patch.setattr(loop, "_compiling", compiling)
            with pytest.raises(Interrupted) as err:
                evolve("pendulum", generations=TOTAL, out=tmp_path / "run", **RUN)
    finally:
        for timer in timers:
            timer.join()
        signal.signal(signal.SIGTERM, previous)
    assert err.value.exit_code == 143 and err.value.generation == 1
    assert calls["evaluate"] == 0
    assert runs.load_checkpoint(tmp_path / "run")[0]["generation"] == 1
    evolve(None, out=tmp_path / "run", resume=True)
    assert_same_result(tmp_path / "run", reference_run(tmp_path))


@pytest.mark.parametrize("tested_when_signalled", [1, 2])
def test_a_stop_during_the_final_test_leaves_it_and_a_resume_tests_again(
    reference, tmp_path, monkeypatch, tested_when_signalled
):
    """A signal while the final test runs stops it before the next policy's test (a 16-seed
    test can take minutes) with 128 + the signal, and no summary; the run is checkpointed at
    its last generation, and a resume only tests, to the uninterrupted run's verdict. A signal
    during the last policy's test (the second: one seed's final and best) stops it alike."""
    from esjax._src.run import saved

    real_test = saved.SavedPolicy.test_returns
    calls = []

    def test_returns(self, *args, **kwargs):
        calls.append(self)
        if len(calls) == tested_when_signalled:
            signal.raise_signal(signal.SIGTERM)  # the run's handler only records it
        return real_test(self, *args, **kwargs)

    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        patch.setattr(saved.SavedPolicy, "test_returns", test_returns)
        with pytest.raises(Interrupted) as err:
            evolve("pendulum", generations=TOTAL, out=out, **RUN)
    assert err.value.exit_code == 143 and err.value.generation == TOTAL
    assert len(calls) == tested_when_signalled  # then no other policy's test
    assert not (out / runs.SUMMARY).exists()
    assert runs.load_checkpoint(out)[0]["generation"] == TOTAL
    evolve(None, out=out, resume=True)
    assert_same_result(out, reference)
    mine, expected = runs.read_summary(out), runs.read_summary(reference)
    for key in ("final_test_return_per_seed", "best_test_return_per_seed", "solved"):
        assert mine[key] == expected[key], key


def test_a_stopped_command_leaves_at_once_only_while_a_compile_runs(monkeypatch):
    """Python would wait for a compiling thread at exit; a stopped command does not."""
    import typer

    from esjax._src.cli import terminal

    class Left(Exception):
        pass

    def leave(code):
        raise Left(code)

    monkeypatch.setattr(terminal.os, "_exit", leave)
    with pytest.raises(Left) as left:
        terminal.exit_stopped("stopped", 143, compiling=True)
    assert left.value.args == (143,)
    with pytest.raises(typer.Exit) as normal:
        terminal.exit_stopped("stopped", 143, compiling=False)
    assert normal.value.exit_code == 143


def reference_run(tmp_path: Path) -> Path:
    out = tmp_path / "reference"
    evolve("pendulum", generations=TOTAL, out=out, **RUN)
    return out


# ---------------------------------------------------------------------------- kill -9, early
@pytest.mark.parametrize("moment", ["config_written", "generation_1"])
def test_kill_9_before_the_first_checkpoint_resumes_to_the_same_result(reference, tmp_path, moment):
    out = tmp_path / "run"
    proc = start_driver(tmp_path, out, every_s=1e9, nap=0.0, hold=True)
    try:
        if moment == "config_written":  # still building and compiling
            wait_until(lambda: runs.is_run_dir(out), proc, "config.json")
        else:
            wait_until(lambda: len(metrics_rows(out)) >= 1, proc, "generation 1")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert not (out / runs.CHECKPOINT).exists()
    evolve(None, out=out, resume=True, generations=TOTAL)
    assert_same_result(out, reference)
    assert [r["generation"] for r in runs.load_metrics(out)] == list(range(1, TOTAL + 1))


# ---------------------------------------------------------------------------- one writer
def test_a_second_writer_is_refused_and_the_first_run_is_untouched(reference, tmp_path):
    out = tmp_path / "run"
    # The first run waits after its first generation until the contenders are done.
    first = start_driver(tmp_path, out, every_s=0.0, nap=0.0, hold=True)
    try:
        wait_until(lambda: len(metrics_rows(out)) >= 1, first, "generation 1")
        contenders = {
            "evolve": ["evolve", "pendulum", *CLI_SMALL, "--out", str(out)],
            "overwrite": ["evolve", "pendulum", *CLI_SMALL, "--out", str(out), "--overwrite"],
            "resume": ["evolve", "--resume", "--out", str(out)],
        }
        started = {
            name: subprocess.Popen([*esjax_command(), *args], cwd=tmp_path, env=cli_env(),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for name, args in contenders.items()
        }  # fmt: skip
        for name, proc in started.items():
            stdout, stderr = proc.communicate(timeout=300)
            assert proc.returncode == 2, (name, stdout, stderr)
            lines = stderr.strip().splitlines()
            assert len(lines) == 1 and f"PID {first.pid}" in lines[0], (name, stderr)
        assert first.poll() is None, "the first run must still be running"
        release(out)
        first.wait(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, (tmp_path / "driver.log").read_text()
    assert [r["generation"] for r in runs.load_metrics(out)] == list(range(1, TOTAL + 1))
    assert_same_result(out, reference)


def test_the_lock_is_released_when_the_writer_dies(tmp_path):
    """No stale lock: after kill -9 the run resumes at once, no cleanup needed."""
    out = tmp_path / "run"
    proc = start_driver(tmp_path, out, every_s=0.0, nap=0.0, hold=True)
    try:
        wait_until(lambda: len(metrics_rows(out)) >= 1, proc, "generation 1")
        with pytest.raises(ConfigError, match=f"in use .*PID {proc.pid}"):
            evolve(None, out=out, resume=True)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    assert (out / runs.LOCK).is_file()
    summary = evolve(None, out=out, resume=True)
    assert summary.generations == TOTAL


def test_a_reader_of_a_live_run_never_fails_to_parse(tmp_path):
    """What eval, plot and render read, read in a loop while a run writes every generation."""
    out = tmp_path / "run"
    proc = start_driver(tmp_path, out, every_s=0.0, nap=0.0, total=40)
    reads = 0
    try:
        wait_until(lambda: runs.is_run_dir(out), proc, "config.json")
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a damaged checkpoint would warn
            while proc.poll() is None or reads == 0:
                config = runs.read_run_config(out)
                assert config.task_name == "pendulum"
                rows = runs.load_metrics(out)
                assert [r["generation"] for r in rows] == list(range(1, len(rows) + 1))
                if (out / runs.CHECKPOINT).is_file():
                    meta = runs.load_checkpoint(out).meta
                    assert meta["generation"] <= 40
                    for which in ("final", "best"):
                        runs.read_policy(out, which)
                    reads += 1
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.wait(timeout=60) == 0, (tmp_path / "driver.log").read_text()
    assert reads > 0
    json.loads((out / runs.SUMMARY).read_text())


# ---------------------------------------------------------------------------- bad numbers
NONFINITE = {
    "env_param": ["env_params.l=nan"],
    "sampler_bound": ['env_sampler.l={dist="uniform",low=0.5,high=inf}'],
    "sampler_choice": ['env_sampler.l={dist="choice",values=[1.0,-inf]}'],
    "task_strategy_setting": ["strategy_settings.learning_rate=nan"],
    "solved_return": ["solved_return=-inf"],
    "grid_value": [
        'grid.rows={param="l",values=[1.0,nan]}',
        'grid.columns={param="m",values=[1.0]}',
    ],
}


@pytest.mark.parametrize("case", list(NONFINITE))
def test_nonfinite_settings_are_refused_before_compiling(tmp_path, case, monkeypatch):
    def no_building(config):
        raise AssertionError("built an engine for a non-finite setting")

    monkeypatch.setattr(sys.modules["esjax._src.run.training"], "engine_for", no_building)
    with pytest.raises(ConfigError, match="must be a finite number") as err:
        evolve("pendulum", out=tmp_path / "run", **{**RUN, "overrides": [*SMALL, *NONFINITE[case]]})
    assert "\n" not in str(err.value)
    assert not (tmp_path / "run").exists()


def test_nonfinite_strategy_preset_setting_is_refused(tmp_path):
    preset = tmp_path / "mine.toml"
    text = (Path(__file__).parents[1] / "strategies" / "open_es.toml").read_text()
    preset.write_text(text.replace("std_init = 0.15", "std_init = inf"))
    with pytest.raises(ConfigError, match=r"std_init must be a number above 0, got inf"):
        evolve("pendulum", strategy=str(preset), out=tmp_path / "run", **RUN)
    assert not (tmp_path / "run").exists()


def test_nonfinite_strategy_settings_are_refused_whatever_the_settings_are(tmp_path, monkeypatch):
    """The resolved settings are walked generically: a setting no table knows is still checked."""
    import esjax._src.strategies.strategy

    real = esjax._src.strategies.strategy.load_strategy

    def with_a_new_setting(*args, **kwargs):
        spec = real(*args, **kwargs)
        settings = {**spec.settings, "a_new_setting": [1.0, float("inf")]}
        return dataclasses.replace(spec, settings=settings)

    monkeypatch.setattr(esjax._src.strategies.strategy, "load_strategy", with_a_new_setting)
    with pytest.raises(ConfigError, match=r"a_new_setting\[1\]: must be a finite number, got inf"):
        evolve("pendulum", out=tmp_path / "run", **RUN)
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------------------- memory preflight
def test_memory_preflight_refuses_an_impossible_network_without_allocating(tmp_path, monkeypatch):
    import jax

    import esjax._src.engine.generation
    import esjax._src.run.saved  # binds engine's functions now, not while they are patched below
    import esjax._src.strategies.strategy
    from esjax._src.rollout.population_rollout import PopulationRollout

    def no_allocating(*args, **kwargs):
        raise AssertionError("allocated parameters for a network that cannot fit")

    shapes_only = PopulationRollout.init_params

    def traced_only(self, key):
        """A member's parameters from shapes alone (traced); a concrete init would allocate."""
        if not isinstance(key, jax.core.Tracer):
            no_allocating()
        return shapes_only(self, key)

    # Building the engine or a strategy (or any concrete init) would allocate the weights.
    monkeypatch.setattr(esjax._src.engine.generation, "make_engine", no_allocating)
    monkeypatch.setattr(PopulationRollout, "init_params", traced_only)
    hidden = ["policy.hidden=[100000,100000]"]
    with pytest.raises(ConfigError) as err:
        evolve("pendulum", out=tmp_path / "run", popsize=8, overrides=[*SMALL, *hidden])
    message = str(err.value)
    assert "\n" not in message
    assert "GiB" in message and "available" in message
    assert "popsize 8" in message and "10,000,600,001" in message  # 3 -> 1e5 -> 1e5 -> 1 MLP
    assert "policy.hidden" in message
    assert not (tmp_path / "run").exists()


def test_eval_refuses_more_test_episodes_than_memory_holds_before_running(reference):
    """esjax eval --episodes N compiles the test, reads XLA's memory analysis, and refuses a
    count past the memory available in one line, instead of a crash or the kernel's OOM kill.
    The bytes are linear in N: 1e12 episodes need 1,000x what 1e9 do (within 1 %)."""
    from esjax._src.run.memory import available_memory
    from esjax._src.run.saved import SavedPolicy, evaluate_run

    policy = SavedPolicy.load(reference)
    per_device = [
        policy.rollout.compile_population(*policy.test_inputs()[:2], n) for n in (10**9, 10**12)
    ]
    assert per_device[1] == pytest.approx(1000 * per_device[0], rel=0.01)
    available, _ = available_memory(list(policy.rollout.devices))
    assert available is not None and per_device[1] > available  # the premise of the refusal
    with pytest.raises(ConfigError) as err:
        evaluate_run(reference, episodes=10**12)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("testing 1,000,000,000,000 episodes needs about")
    assert message.endswith("available; lower --episodes")
    assert evaluate_run(reference, episodes=64)["episodes"] == 64  # a count that fits runs
