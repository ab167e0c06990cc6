"""Scale-out: a population sharded over 4 CPU devices, and a run spread over 2 processes."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from esjax._src.engine.distributed import initialize

ROOT = Path(__file__).resolve().parents[1]
ENV = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
SMALL = ["episode_length=16", "policy.hidden=[8]", "evaluation.every=3", "evaluation.episodes=4",
         "normalize_obs=true"]  # fmt: skip


def _python(script: str, env: dict | None = None, timeout: float = 240):
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        env={**ENV, **(env or {})},
        timeout=timeout,
    )


def test_sharded_population_matches_one_device():
    """4 devices vs 1: returns and the search bit-identical, sums over members within 1e-5."""
    script = """
        import jax, jax.numpy as jnp, numpy as np
        assert len(jax.devices()) == 4
        from esjax._src.engine.generation import make_engine
        from esjax._src.policies.networks import MLP
        from esjax._src.rollout.population_rollout import PopulationRollout
        from esjax._src.strategies.strategy import build_strategy, load_strategy
        # 6 is padded to 8 on 4 devices; env_groups hands each member its group's keys. Mirrored
        # OpenES splits its noise by pairs: 130 members are 65 pairs in 22 blocks of 3, padded
        # to 24 blocks on 4 devices, so tell adds blocks of three pairs across devices.
        for popsize, groups in ((8, 1), (6, 1), (8, 2), (130, 1)):
            runs = []
            for devices in (jax.devices()[:1], jax.devices()):
                rollout = PopulationRollout("Pendulum-v1", MLP(hidden=(8,)), 16, devices=devices)
                spec = load_strategy("open_es", {"popsize": popsize, "env_groups": groups})
                engine = make_engine(rollout, rollout, lambda n: build_strategy(spec, n),
                                     block=3, eval_episodes=4, normalize_obs=True)
                params = jax.vmap(engine.unravel)(
                    jax.random.normal(jax.random.key(1), (popsize, engine.num_dims)))
                returns = engine.population_rollout(jax.random.key(2), params, None).returns
                state, metrics = engine.run_block(engine.init(jnp.arange(1)), jnp.int32(3))
                runs.append((np.asarray(returns), jax.device_get(state), jax.device_get(metrics)))
            (r1, s1, m1), (r4, s4, m4) = runs
            assert r1.shape == (popsize, 1)
            np.testing.assert_array_equal(r1, r4)
            # The search itself (strategy state, best member) is bit-identical: each device draws
            # its pairs' rows of the same draw, the gathered returns are the same bits and tell
            # adds the same blocks in the same order. Sums over members (the observation
            # moments, the metrics) add per-device partial sums: last bits differ.
            exact = ((s1.strategy, s1.gen_best), (s4.strategy, s4.gen_best))
            for a, b in zip(*map(jax.tree.leaves, exact), strict=True):
                np.testing.assert_array_equal(a, b)
            for a, b in zip(jax.tree.leaves((s1, m1)), jax.tree.leaves((s4, m4)), strict=True):
                np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
        print("ok")
    """
    done = _python(script, {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ok" in done.stdout


def test_only_returns_and_block_sums_cross_devices():
    """The compiled generation's collectives: all-gathers and all-reduces only (no parameters,
    no noise, no distributed sort of the ranking). A materialised population moves one float
    per member and a few totals; mirrored OpenES also gathers one ``num_dims`` sum per block of
    pairs and sums the best member's row (its one holder adds it to the others' zeros)."""
    script = """
        import jax, jax.numpy as jnp
        assert len(jax.devices()) == 4
        from esjax._src.engine.distributed import block_collectives
        from esjax._src.engine.generation import make_engine
        from esjax._src.strategies.lazy_openes import PairLayout
        from esjax._src.policies.networks import MLP
        from esjax._src.rollout.population_rollout import PopulationRollout
        from esjax._src.strategies.strategy import build_strategy, load_strategy
        rollout = PopulationRollout("Pendulum-v1", MLP(hidden=(8,)), 8)
        # 38 is padded to 40 members; as mirrored pairs, 19 pairs to 20 blocks.
        cases = (("open_es", 38, {}), ("open_es", 64, {"env_groups": 4}), ("snes", 38, {}))
        for name, popsize, settings in cases:
            spec = load_strategy(name, {"popsize": popsize, **settings})
            engine = make_engine(rollout, rollout, lambda n: build_strategy(spec, n), block=2,
                                 eval_episodes=2, normalize_obs=True)
            moved = block_collectives(engine, engine.init(jnp.arange(1)))
            ops = sorted({op for op, _, _ in moved})
            assert ops == ["all-gather", "all-reduce"], moved
            # Returns (4 B per member, padding included), the env-step count and the
            # observation sums (2 x 3 floats for Pendulum).
            total = sum(size for _, _, size in moved)
            allowed = 4 * popsize + 64
            if name == "open_es":
                layout = PairLayout(popsize // 2, 4)
                blocks = layout.rows // layout.block
                allowed += 4 * engine.num_dims * (blocks + 2)
                assert any(shape.endswith(f"[1,{blocks},{engine.num_dims}]")
                           for _, shape, _ in moved), moved
            assert 4 * popsize <= total <= allowed, moved
        print("ok")
    """
    done = _python(script, {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ok" in done.stdout


def test_past_32_devices_the_gradient_is_all_reduced():
    """On more devices than gradient blocks, tell adds each device's blocks and all-reduces one
    ``num_dims`` vector instead of gathering a block sum per device; the sum is still right."""
    script = """
        import jax, jax.numpy as jnp, numpy as np
        from jax.sharding import Mesh
        from esjax._src.strategies import lazy_openes
        from esjax._src.engine.distributed import collective_bytes
        from esjax._src.strategies.strategy import build_strategy, load_strategy
        assert len(jax.devices()) == 34
        mesh = Mesh(np.array(jax.devices()), (lazy_openes.AXIS,))
        strategy = build_strategy(load_strategy("open_es", {"popsize": 140}), num_dims=5)
        state = strategy.init(jax.random.key(0), jnp.zeros(5))
        ask = jax.jit(lambda k: lazy_openes.ask(strategy, k, state, lambda f: f, mesh))
        lazy = ask(jax.random.key(1))
        assert lazy.layout.devices == 34 and lazy.layout.block == 3
        weights = jax.random.normal(jax.random.key(2), (70,))
        total = jax.jit(lazy_openes.weighted_noise)
        want = np.asarray(weights, np.float64) @ np.asarray(jax.random.normal(
            strategy.noise_key(jax.random.key(1)), (70, 5)), np.float64)
        np.testing.assert_allclose(total(lazy, weights), want, rtol=1e-5, atol=1e-5)
        moved = collective_bytes(total.lower(lazy, weights).compile().as_text())
        assert [op for op, _, _ in moved] == ["all-reduce"] and moved[0][2] == 20, moved
        print("ok")
    """
    done = _python(script, {"XLA_FLAGS": "--xla_force_host_platform_device_count=34"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ok" in done.stdout


def test_cpu_devices_wait_long_for_each_other():
    """use_cpu_cores gives the devices' collectives 900 s to meet (XLA's 40 s aborted a run
    beside other jobs), keeps a timeout the user set, and XLA accepts the flag: a psum over
    the two devices runs."""
    script = """
        import os, sys
        from esjax._src.engine import distributed
        distributed.use_cpu_cores(2)
        print("FLAGS", os.environ["XLA_FLAGS"])
        import jax, jax.numpy as jnp
        summed = jax.pmap(lambda x: jax.lax.psum(x, "d"), axis_name="d")(jnp.ones(2))
        print("SUM", summed.tolist())
    """
    flag = "--xla_cpu_collective_call_terminate_timeout_seconds"
    done = _python(script)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"FLAGS {flag}=900" in done.stdout
    assert "SUM [2.0, 2.0]" in done.stdout
    mine = _python(script, {"XLA_FLAGS": f"{flag}=5"})
    assert mine.returncode == 0, mine.stderr[-3000:]
    assert f"FLAGS {flag}=5\n" in mine.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


WORKER = """
    import sys
    from esjax._src.engine import distributed
    distributed.use_cpu_cores({cores})
    if {processes} > 1:
        distributed.initialize("127.0.0.1:{port}", {processes}, int(sys.argv[1]))
    import jax
    assert len(jax.devices()) == 2, jax.devices()
    from esjax._src.run.training import evolve
    summary = evolve("pendulum", popsize=6, generations=3, out=r"{out}", overrides={small})
    print("RESULT", jax.process_index(), summary.final_eval_return)
"""


def test_two_processes_match_one_process(tmp_path):
    """2 processes x 1 device each give the same run as 1 process with 2 devices; only process 0
    writes the run directory."""
    from esjax._src.run.runs import load_metrics, read_policy

    port = _free_port()
    worker = WORKER.format(cores=1, processes=2, port=port, out=tmp_path / "multi", small=SMALL)
    script = textwrap.dedent(worker)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
        )
        for i in range(2)
    ]
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=240))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err[-3000:]
    single = _python(
        WORKER.format(cores=2, processes=1, port=0, out=tmp_path / "single", small=SMALL)
    )
    assert single.returncode == 0, single.stderr[-3000:]
    results = {
        line.split()[2] for out, _ in outputs for line in out.splitlines() if "RESULT" in line
    }
    assert len(results) == 1 and single.stdout.split()[-1] in results
    strip = lambda rows: [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]  # noqa: E731
    assert strip(load_metrics(tmp_path / "multi")) == strip(load_metrics(tmp_path / "single"))
    _, multi, _ = read_policy(tmp_path / "multi", "final", 0)
    _, one, _ = read_policy(tmp_path / "single", "final", 0)
    assert (multi == one).all()


def test_initialize_needs_a_coordinator(monkeypatch):
    for name in ("ESJAX_COORDINATOR", "ESJAX_NUM_PROCESSES", "ESJAX_PROCESS_ID"):
        monkeypatch.delenv(name, raising=False)
    assert initialize() is False  # single process: nothing to join
    with pytest.raises(ValueError, match="coordinator"):
        initialize(num_processes=2, process_id=0)
    monkeypatch.setenv("ESJAX_COORDINATOR", "127.0.0.1:1")
    with pytest.raises(ValueError, match="num_processes"):
        initialize()
    with pytest.raises(ValueError, match="process_id"):
        initialize(num_processes=2, process_id=2)


@pytest.mark.slow
def test_a_lost_process_stops_the_run_with_a_clear_error(tmp_path):
    """Kill one of two CLI processes mid-run: the other stops with a message, not a hang.

    Which message depends on where the survivor is: in a collective, gloo fails at once and
    esjax exits with code 3 and the resume command; otherwise JAX's coordination service aborts
    it after the heartbeat timeout (30 s) with its own message.
    """
    import time

    port = _free_port()
    args = ["evolve", "pendulum", "--popsize", "8", "--generations", "100000",
            "--out", str(tmp_path / "run"), "--coordinator", f"127.0.0.1:{port}",
            "--num-processes", "2"] + [f"--set={s}" for s in SMALL[:-1]]  # fmt: skip
    # Output goes to files, not pipes: a pipe nobody reads fills up with progress lines and
    # blocks the run before its first checkpoint.
    logs = [tmp_path / f"process{i}.log" for i in range(2)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "esjax._src.cli.main", *args, "--process-id", str(i)],
            stdout=subprocess.DEVNULL,
            stderr=log.open("w"),
            env=ENV,
        )
        for i, log in enumerate(logs)
    ]
    try:
        deadline = time.monotonic() + 180
        while not (tmp_path / "run" / "checkpoint.msgpack").exists():
            assert time.monotonic() < deadline and procs[0].poll() is None, logs[0].read_text()
            time.sleep(0.5)
        procs[1].kill()
        killed = time.monotonic()
        procs[0].wait(timeout=90)
        err = logs[0].read_text()
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert time.monotonic() - killed < 60
    if procs[0].returncode == 3:  # the dead peer broke a collective: esjax's own message
        assert "lost a process" in err and "--resume" in err
    else:  # killed between collectives: JAX's heartbeat check aborts the survivor
        assert procs[0].returncode != 0, err[-3000:]
        assert "stopped sending heartbeats" in err
