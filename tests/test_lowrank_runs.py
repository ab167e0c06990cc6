"""The low-rank strategy in runs: a generation never forms a member's weights, the same search
on 1, 2 and 4 devices, bit-identical resume after SIGTERM and kill -9, sweeps over rank and std,
the command line from evolve to report, and the memory preflight at 65,536 members."""

from __future__ import annotations

import functools
import signal
import subprocess

import jax
import jax.numpy as jnp
import pytest
from test_cli import assert_clean_error, cli_env, esjax, esjax_command
from test_distributed import _python
from test_hardening import assert_same_result
from test_preemption import metrics_rows, wait_until
from test_run_as_data import cli
from test_strategy_door import shapes_in

from esjax._src.analysis import sweeps
from esjax._src.run import runs
from esjax._src.run.training import evolve

SMALL = ["episode_length=16", "policy.hidden=[8, 8]", "evaluation.every=2", "evaluation.episodes=4"]
RUN = dict(strategy="lowrank_es", popsize=8, overrides=SMALL)
TOTAL = 8


def test_a_generation_never_forms_a_members_weight_matrix(monkeypatch):
    """Traced in chunks of 8 of 64 members, a generation holds the hidden layer's 32 x 32
    kernel once per seed (the mean), never one per member; a member made whole would show.
    Shapes lead with the seeds' axis (1 here)."""
    import esjax._src.engine.generation
    from esjax._src.policies.perturb import materialise
    from esjax._src.run.training import clear_engine_cache, engine_for, resolve_config
    from esjax._src.strategies.population import PairedMembers

    config = resolve_config("cartpole", strategy="lowrank_es", popsize=64,
                            overrides=["policy.hidden=[32, 32]"])  # fmt: skip

    def traced_shapes() -> tuple[set[tuple[int, ...]], int]:
        clear_engine_cache()
        _, engine = engine_for(config)
        engine.rollout.chunk_size = 8  # read when the block is traced
        block = functools.partial(esjax._src.engine.generation.run_block, engine.step)
        jaxpr = jax.make_jaxpr(block)(engine.init(jnp.arange(1)), jnp.asarray(1, jnp.int32))
        return shapes_in(jaxpr.jaxpr), engine.num_dims

    try:
        shapes, num_dims = traced_shapes()
        per_member = {(1, 8, 32, 32), (8, 32, 32), (1, 64, 32, 32), (1, 64, num_dims)}
        assert not per_member & shapes
        assert (1, 32, 32) in shapes  # the shared kernel
        whole = PairedMembers.member
        monkeypatch.setattr(PairedMembers, "member",
                            lambda self, ident: materialise(whole(self, ident)))  # fmt: skip
        shapes, _ = traced_shapes()
        assert (1, 8, 32, 32) in shapes  # the check can see one
    finally:
        clear_engine_cache()


def test_the_same_search_on_1_2_and_4_devices():
    script = """
        import jax, jax.numpy as jnp, numpy as np
        from esjax._src.engine.generation import make_engine
        from esjax._src.policies.networks import MLP
        from esjax._src.rollout.population_rollout import PopulationRollout
        from esjax._src.strategies.strategy import build_strategy, load_strategy
        # 6 members pad to 8 on 4 devices; 130 members are 65 pairs; groups share keys.
        for popsize, groups, rank in ((8, 1, 1), (6, 1, 2), (8, 2, 1), (130, 1, 3)):
            found = []
            for count in (1, 2, 4):
                devices = jax.devices()[:count]
                rollout = PopulationRollout("Pendulum-v1", MLP(hidden=(8, 8)), 16, devices=devices)
                spec = load_strategy("lowrank_es", {"popsize": popsize, "env_groups": groups,
                                                    "rank": rank})
                engine = make_engine(rollout, rollout, lambda n: build_strategy(spec, n),
                                     block=3, eval_episodes=4, normalize_obs=True)
                state, _ = engine.run_block(engine.init(jnp.arange(1)), jnp.int32(3))
                found.append(jax.device_get((state.strategy, state.gen_best)))
            for other in found[1:]:
                for a, b in zip(jax.tree.leaves(found[0]), jax.tree.leaves(other), strict=True):
                    np.testing.assert_array_equal(a, b)
        print("ok")
    """
    # Twelve engines compiled in one process: minutes on 2 shared cores (a bound, not a timing).
    done = _python(script, {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}, 900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ok" in done.stdout


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("lowrank") / "run"
    evolve("pendulum", generations=TOTAL, out=out, **RUN)
    return out


def _start(tmp_path, *extra: str) -> subprocess.Popen:
    overrides = [x for o in SMALL for x in ("--set", o)]
    return subprocess.Popen(
        [*esjax_command(), "evolve", "pendulum", "--strategy", "lowrank_es", "--popsize", "8",
         *overrides, "--generations", "100000", "--out", str(tmp_path / "run"), *extra],
        cwd=tmp_path, env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL])
def test_a_stopped_run_resumes_bit_identically(reference, tmp_path, stop):
    """SIGTERM checkpoints and exits 143; kill -9 loses what followed the last periodic
    checkpoint. Either way a resume to generation 8 equals the run never stopped."""
    out = tmp_path / "run"
    proc = _start(tmp_path, "--checkpoint-every", "0")
    try:
        wait_until(lambda: len(metrics_rows(out)) >= 3, proc, "generation 3")
        proc.send_signal(stop)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == (143 if stop == signal.SIGTERM else -signal.SIGKILL)
    done = runs.load_checkpoint(out)[0]["generation"]
    assert 0 < done < TOTAL
    evolve(None, out=out, resume=True, generations=TOTAL)
    assert_same_result(out, reference)


def test_a_sweep_over_rank_and_std_equals_each_run_alone(tmp_path):
    from esjax._src.run.training import resolve_config

    vary = ["strategy_settings.rank=1,3", "strategy_settings.std_init=0.1,0.3"]
    small = [*SMALL, "test_episodes=4"]
    tiny = dict(strategy="lowrank_es", popsize=8, generations=3, rollouts=1, seeds=2,
                overrides=small)  # fmt: skip
    record = sweeps.sweep("pendulum", vary, out=tmp_path / "sweep", **tiny)
    grid = sweeps.configurations(vary)
    resolved = [resolve_config("pendulum", strategy="lowrank_es", popsize=8,
                               overrides=[*SMALL, *c.overrides]) for c in grid]  # fmt: skip
    programs = sweeps.programs(grid, resolved)
    assert len(programs) == 2  # one per rank (a shape); std is traced
    assert all("std_init" in engine.hyper_names for _, engine in programs)
    entries = record["configurations"]
    finals = set()
    for entry in (entries[0], entries[3]):
        alone = tmp_path / entry["run_dir"]
        overrides = [*SMALL, *entry["overrides"]]
        evolve("pendulum", out=alone, **{**tiny, "overrides": overrides})
        swept = tmp_path / "sweep" / entry["run_dir"]
        for name in ("final_policy.msgpack", "best_policy.msgpack"):
            assert (swept / name).read_bytes() == (alone / name).read_bytes(), name
        finals.add((swept / "final_policy.msgpack").read_bytes())
    assert len(finals) == 2


def test_the_command_line_from_evolve_to_report(tmp_path):
    import esjax

    run = tmp_path / "run"
    code, output = cli("evolve", "cartpole", "--strategy", "lowrank_es", "--popsize", "16",
                       "--generations", "3", "--seeds", "2", "--out", run,
                       "--set", "strategy_settings.rank=2", "--set", "episode_length=50",
                       "--set", "evaluation.every=1", "--set", "evaluation.episodes=4",
                       "--set", "test_episodes=4")  # fmt: skip
    assert code == 0, output
    code, output = cli("eval", run, "--episodes", "4", "--json")
    assert code == 0 and '"mean"' in output, output
    code, output = cli("render", run, "--steps", "8", "--out", tmp_path / "render.gif")
    assert code == 0, output
    code, output = cli("report", f"lowrank={run}", "--out", tmp_path / "report")
    assert code == 0, output
    controller = esjax.load_policy(run)
    assert controller is not None


def test_the_preflight_refuses_full_rank_openes_at_65536_members_and_passes_lowrank(tmp_path):
    """65,536 members of a 1 M-parameter MLP: OpenES's half noise alone is 32,768 x 1,054,721
    floats (138 GB), refused in one line before anything compiles; the low-rank strategy's
    generation passes the check."""
    from esjax._src.run.training import check_memory, resolve_config

    big = ["--popsize", "65536", "--set", "policy.hidden=[1024, 1024]", "--generations", "1"]
    result = esjax("evolve", "pendulum", "--strategy", "open_es", *big, cwd=tmp_path)
    assert_clean_error(result, "memory")
    assert not (tmp_path / "runs").exists()
    config = resolve_config("pendulum", strategy="lowrank_es", popsize=65536,
                            overrides=["policy.hidden=[1024, 1024]"])  # fmt: skip
    check_memory(config)  # passes: nothing population-sized is held


def test_esjax_list_says_low_rank(tmp_path):
    result = esjax("list", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if line.split()[:1] == ["lowrank_es"])
    assert "low-rank" in line.lower()
