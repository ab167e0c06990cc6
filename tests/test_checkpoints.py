"""Named checkpoints (format version 2) and the migration of version 1 (positional) ones.

``tests/data/run-v1`` is a run directory written by the code before named checkpoints, and
``tests/data/run-v1-continued.json`` what that code produced when it resumed the run (see
``tests/data/README.md``). Resuming it with today's code must continue the same search.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from flax import serialization
from test_cli import esjax

from esjax._src.engine.generation import from_host, to_host
from esjax._src.run import runs
from esjax._src.run.lifecycle import HOST_ARRAYS, migrate_checkpoint
from esjax._src.run.training import engine_for, evolve
from esjax._src.specs.config import ConfigError

DATA = Path(__file__).parent / "data"
RECORD = json.loads((DATA / "run-v1-continued.json").read_text())
OLD, TOTAL = RECORD["generations"], RECORD["continued_to"]  # 4 and 8
EQUAL_SHAPES = ("state/strategy/mean", "state/gen_best")  # both (seeds, num_dims) float32


def run_args() -> tuple[str, dict]:
    """``run-v1``'s ``esjax.evolve`` arguments, as the script that made it recorded them."""
    args = dict(RECORD["evolve"])
    return args.pop("task"), args


def strip_wall(rows):
    return [{k: v for k, v in row.items() if k != "wall_s"} for row in rows]


def copy_old_run(tmp_path: Path) -> Path:
    out = tmp_path / "run-v1"
    shutil.copytree(DATA / "run-v1", out)
    return out


def same_arrays(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes() for k in a
    )


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> Path:
    """An uninterrupted run of ``run-v1``'s config to the continuation's length, by this code."""
    task, args = run_args()
    out = tmp_path_factory.mktemp("straight") / "run"
    evolve(task, generations=TOTAL, out=out, **args)
    return out


@pytest.fixture(scope="module")
def new_run(tmp_path_factory) -> Path:
    """``run-v1`` made again by this code: a version 2 checkpoint at the same generation."""
    task, args = run_args()
    out = tmp_path_factory.mktemp("new") / "run"
    evolve(task, generations=OLD, out=out, **args)
    return out


@pytest.fixture(scope="module")
def template(new_run):
    """The engine state a fresh start of ``run-v1``'s config begins from (generation 0)."""
    config = runs.read_run_config(new_run)
    engine = engine_for(config)[1]
    return engine.init(jnp.arange(config.seed, config.seed + config.seeds))


def test_the_checked_in_run_is_a_version_1_checkpoint():
    checkpoint = runs.load_checkpoint(DATA / "run-v1")
    assert checkpoint.version == 1 and checkpoint.meta["generation"] == OLD
    assert sorted(checkpoint.arrays) == [f"{i:05d}" for i in range(len(checkpoint.arrays))]


def test_an_old_run_directory_resumes_to_the_uninterrupted_result(
    straight, new_run, template, tmp_path
):
    out = copy_old_run(tmp_path)
    migrated = migrate_checkpoint(runs.load_checkpoint(out), template)
    summary = evolve(None, out=out, resume=True, generations=TOTAL)
    assert summary.generations == TOTAL
    resumed = strip_wall(runs.load_metrics(out))
    assert [r["generation"] for r in resumed] == [g for g in range(1, TOTAL + 1) for _ in "01"]
    assert runs.load_checkpoint(out).version == runs.CHECKPOINT_VERSION

    # Against the old code's own continuation: to the last bits XLA may round differently on
    # another CPU, hence a tight tolerance rather than equality.
    continued = [r for r in resumed if r["generation"] > OLD]
    assert [sorted(r) for r in continued] == [sorted(r) for r in RECORD["metrics"]]
    for mine, theirs in zip(continued, RECORD["metrics"], strict=True):
        for key, value in theirs.items():
            np.testing.assert_allclose(mine[key], value, rtol=1e-6, err_msg=key)
    for which, recorded in RECORD["policies"].items():
        for seed in range(len(recorded["params"])):
            _, params, (obs_mean, obs_std) = runs.read_policy(out, which, seed)
            for got, key in ((params, "params"), (obs_mean, "obs_mean"), (obs_std, "obs_std")):
                np.testing.assert_allclose(got, recorded[key][seed], rtol=1e-6, atol=1e-7)

    # Against an uninterrupted run by this code, bit for bit: wherever this machine computes
    # the checked-in generations 1-4 to the same bits (the state the resume starts from).
    if same_arrays(migrated.arrays, runs.load_checkpoint(new_run).arrays):
        assert resumed == strip_wall(runs.load_metrics(straight))
        assert same_arrays(runs.load_checkpoint(out).arrays, runs.load_checkpoint(straight).arrays)
        for which in ("final", "best"):
            for seed in range(RECORD["evolve"]["seeds"]):
                a, b = (runs.read_policy(d, which, seed)[1] for d in (out, straight))
                assert a.tobytes() == b.tobytes()
    else:  # pragma: no cover - another CPU: the same search, to XLA's rounding
        for mine, theirs in zip(resumed, strip_wall(runs.load_metrics(straight)), strict=True):
            for key, value in theirs.items():
                np.testing.assert_allclose(mine[key], value, rtol=1e-6, err_msg=key)


def test_migration_names_the_old_arrays_as_a_new_checkpoint_does(new_run, template):
    old = runs.load_checkpoint(DATA / "run-v1")
    new = runs.load_checkpoint(new_run)
    migrated = migrate_checkpoint(old, template)
    assert migrated.version == runs.CHECKPOINT_VERSION and migrated.meta == old.meta
    assert list(migrated.arrays) != list(old.arrays)
    assert sorted(migrated.arrays) == sorted(new.arrays)
    for name, array in new.arrays.items():
        assert migrated.arrays[name].dtype == array.dtype, name
        np.testing.assert_allclose(migrated.arrays[name], array, rtol=1e-6, err_msg=name)
    # The mean the old checkpoint held is the final policy the old code saved with it.
    for seed in range(RECORD["evolve"]["seeds"]):
        final = runs.read_policy(DATA / "run-v1", "final", seed)[1]
        np.testing.assert_array_equal(migrated.arrays["state/strategy/mean"][seed], final)
        best = runs.read_policy(DATA / "run-v1", "best", seed)[1]
        np.testing.assert_array_equal(migrated.arrays["host/best_params"][seed], best)
    # A checkpoint from a later format is refused, not guessed at.
    with pytest.raises(ConfigError, match="format version 3 is not supported"):
        migrate_checkpoint(runs.Checkpoint(new.meta, new.arrays, 3), template)


def test_an_old_checkpoint_from_before_settings_were_state_gets_the_config_s(template):
    """Version 1 files written before the strategy settings joined the state lack them."""
    old = runs.load_checkpoint(DATA / "run-v1")
    full = migrate_checkpoint(old, template).arrays
    leaves = [old.arrays[k] for k in sorted(old.arrays)]
    hyper = sum(name.startswith("state/hyper/") for name in full)
    assert hyper > 0
    state_end = len(leaves) - len(HOST_ARRAYS)  # no sampler bounds: settings come last
    shorter = leaves[: state_end - hyper] + leaves[state_end:]
    arrays = {f"{i:05d}": leaf for i, leaf in enumerate(shorter)}
    legacy = migrate_checkpoint(runs.Checkpoint(old.meta, arrays, 1), template).arrays
    assert sorted(legacy) == sorted(full)
    for name in full:
        np.testing.assert_array_equal(legacy[name], full[name], err_msg=name)
    del arrays[f"{len(shorter) - 1:05d}"]
    with pytest.raises(ConfigError, match=rf"holds {len(shorter) - 1} arrays, this run needs"):
        migrate_checkpoint(runs.Checkpoint(old.meta, arrays, 1), template)


def test_a_new_checkpoint_holds_arrays_by_name(new_run):
    outer = serialization.msgpack_restore((new_run / runs.CHECKPOINT).read_bytes())
    assert outer["version"] == runs.CHECKPOINT_VERSION == 2
    names = list(serialization.msgpack_restore(outer["payload"])["arrays"])
    assert not [name for name in names if re.fullmatch(r"\d+", name)]
    for name in (
        "state/strategy/mean",
        "state/norm/mean",
        "state/hyper/learning_rate",
        *HOST_ARRAYS,
    ):
        assert name in names
    # Each name holds what it says: the mean is the saved final policy, and so on.
    arrays = runs.load_checkpoint(new_run).arrays
    for seed in range(RECORD["evolve"]["seeds"]):
        _, final, (obs_mean, _) = runs.read_policy(new_run, "final", seed)
        np.testing.assert_array_equal(arrays["state/strategy/mean"][seed], final)
        np.testing.assert_array_equal(arrays["state/norm/mean"][seed], obs_mean)
        best = runs.read_policy(new_run, "best", seed)[1]
        np.testing.assert_array_equal(arrays["host/best_params"][seed], best)


DAMAGE = {
    "wrong_shape": ("state/strategy/mean", lambda a: a[:, :-1]),
    "wrong_dtype": ("host/best_generation", lambda a: a.astype(np.int32)),
    "missing": ("state/norm/m2", None),
    "extra": ("state/strategy/velocity", lambda a: np.zeros(3, np.float32)),
}


def damage(run_dir: Path, case: str) -> str:
    """Rewrite the run's checkpoint (checksum and all) with one array wrong; its name."""
    name, change = DAMAGE[case]
    checkpoint = runs.load_checkpoint(run_dir)
    arrays = dict(checkpoint.arrays)
    if change is None:
        del arrays[name]
    else:
        arrays[name] = change(arrays.get(name, np.zeros(0)))
    runs.save_checkpoint(run_dir, checkpoint.meta, arrays)
    return name


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_wrong_named_array_is_a_one_line_error_naming_it(new_run, tmp_path, case):
    out = tmp_path / "run"
    shutil.copytree(new_run, out)
    name = damage(out, case)
    with pytest.raises(ConfigError) as err:
        evolve(None, out=out, resume=True, generations=TOTAL)
    message = str(err.value)
    assert repr(name) in message and str(out) in message and "\n" not in message
    assert runs.load_checkpoint(out).meta["generation"] == OLD  # nothing was overwritten


def test_the_cli_reports_a_wrong_named_array_in_one_line(new_run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(new_run, out)
    name = damage(out, "wrong_shape")
    result = esjax("evolve", "--resume", "--out", out, "--generations", str(TOTAL), cwd=tmp_path)
    assert result.returncode != 0 and "Traceback" not in result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and repr(name) in lines[0], result.stderr


def test_restoring_by_name_does_not_depend_on_the_order_of_the_arrays(new_run, template):
    arrays = {
        k: v for k, v in runs.load_checkpoint(new_run).arrays.items() if k.startswith("state/")
    }
    shuffled = dict(reversed(list(arrays.items())))
    assert list(shuffled) != list(arrays)
    assert same_arrays(to_host(from_host(template, shuffled)), arrays)
    # Two arrays of equal shape given each other's names: each lands where its name says.
    a, b = EQUAL_SHAPES
    assert arrays[a].shape == arrays[b].shape and not np.array_equal(arrays[a], arrays[b])
    swapped = {**arrays, a: arrays[b], b: arrays[a]}
    state = from_host(template, swapped)
    np.testing.assert_array_equal(state.strategy.mean, arrays[b])
    np.testing.assert_array_equal(state.gen_best, arrays[a])


def write_in_order(path: Path, meta: dict, arrays: dict) -> None:
    """A version 2 checkpoint whose arrays are stored in ``arrays``' order (``runs.pack``
    stores them sorted by name)."""
    inner = {"meta": json.dumps(meta, sort_keys=True), "arrays": arrays}
    payload = serialization.msgpack_serialize(inner, in_place=True)  # in place: keeps the order
    outer = {"format": "esjax", "kind": "checkpoint", "version": 2, "payload": payload,
             "sha256": hashlib.sha256(payload).hexdigest()}  # fmt: skip
    path.write_bytes(serialization.msgpack_serialize(outer))


def test_a_checkpoint_with_its_arrays_in_another_order_resumes_the_same(
    new_run, straight, tmp_path
):
    out = tmp_path / "run"
    shutil.copytree(new_run, out)
    checkpoint = runs.load_checkpoint(out)
    order = list(reversed(checkpoint.arrays))
    i, j = order.index(EQUAL_SHAPES[0]), order.index(EQUAL_SHAPES[1])
    order[i], order[j] = order[j], order[i]  # the two equal-shape arrays trade places too
    write_in_order(out / runs.CHECKPOINT, checkpoint.meta, {k: checkpoint.arrays[k] for k in order})
    stored = runs.load_checkpoint(out).arrays
    assert list(stored) == order and order != sorted(order)
    evolve(None, out=out, resume=True, generations=TOTAL)
    assert strip_wall(runs.load_metrics(out)) == strip_wall(runs.load_metrics(straight))
    assert same_arrays(runs.load_checkpoint(out).arrays, runs.load_checkpoint(straight).arrays)
