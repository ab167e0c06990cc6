"""``esjax eval RUN --grid``: returns per cell of fixed env parameters, the heatmap, the errors.

One tiny pendulum-meta run (popsize 8, 16-step episodes, 1 generation) is evaluated on a 2 x 2
grid through the console script; one cell is then replayed in a plain Python loop over gymnax's
``env.step`` with the saved policy, as an independent reference.
"""

from __future__ import annotations

import json
import shutil

import jax
import numpy as np
import pytest
from test_cli import SMALL, assert_clean_error, esjax

from esjax._src.analysis import meta
from esjax._src.analysis.plotting import plot_grid, training_outline
from esjax._src.specs import presets
from esjax._src.specs.config import parse_task

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
EPISODES = 3
# Rows m, columns l: only (m=1, l=1) lies in the training box [0.5, 2] x [0.5, 2].
AXES = ("--grid-axis", "m=0.4,1.0", "--grid-axis", "l=1.0,3.0")


@pytest.fixture(scope="module")
def grid_run(tmp_path_factory):
    """``(run_dir, grid record from the CLI, its JSON path)`` for a tiny pendulum-meta run."""
    work = tmp_path_factory.mktemp("grid")
    run_dir = work / "tiny"
    small = (*SMALL, "--generations", "1", "--set", "policy.hidden=[8]")
    result = esjax("evolve", "pendulum-meta", *small, "--out", run_dir, cwd=work)
    assert result.returncode == 0, result.stdout + result.stderr
    out = work / "cells.json"
    result = esjax("eval", run_dir, *AXES, "-n", EPISODES, "--out", out, cwd=work)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "m \\ l" in result.stdout and str(out) in result.stdout
    return run_dir, json.loads(out.read_text()), out


def reference_returns(run_dir, m: float, l: float, episodes: int, act=None) -> np.ndarray:
    """Test returns on fixed (m, l) from a Python loop over gymnax's ``env.step``.

    Start states come from the run's test key root split per episode as the rollout splits it
    (``params, reset, episode`` keys, then one key per step); nothing else is shared with the
    jitted rollout. ``act(obs, env_params)``: a controller instead of the saved policy.
    """
    import gymnax

    from esjax._src.engine.generation import seed_keys
    from esjax._src.run.runs import read_run_config
    from esjax._src.run.saved import load_policy

    config = read_run_config(run_dir)
    length = config.task.episode_length
    env, default = gymnax.make("Pendulum-v1")
    params = default.replace(m=m, l=l)
    policy = load_policy(run_dir)
    totals = []
    for key in jax.random.split(seed_keys(config.seed)["test"], episodes):
        _, k_reset, k_episode = jax.random.split(key, 3)
        obs, state = env.reset(k_reset, params)
        policy.reset()
        total = 0.0
        for step_key in jax.random.split(k_episode, length):
            _, k_env = jax.random.split(step_key)
            action = policy.act(obs) if act is None else act(obs, params)
            obs, state, reward, *done, _ = env.step(k_env, state, action, params)
            total += float(reward)
            assert not any(map(bool, done))  # 16 steps: the pendulum never ends early
        totals.append(total)
    return np.asarray(totals)


def test_grid_cell_matches_a_plain_gymnax_loop(grid_run):
    run_dir, record, _ = grid_run
    assert record["axes"] == ["m", "l"]
    assert record["values"] == [[0.4, 1.0], [1.0, 3.0]]
    assert np.shape(record["mean"]) == np.shape(record["std"]) == (2, 2)
    expected = reference_returns(run_dir, m=0.4, l=3.0, episodes=EPISODES)
    np.testing.assert_allclose(record["mean"][0][1], expected.mean(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(record["std"][0][1], expected.std(), rtol=1e-3, atol=1e-3)
    # The parameters reach the dynamics: another length gives another return.
    assert abs(record["mean"][0][0] - record["mean"][0][1]) > 1e-3


def test_grid_against_the_analytic_controller_matches_plain_gymnax_loops(grid_run, tmp_path):
    """``--grid --baseline analytic``: the references per cell, each replayed in a Python loop
    with the cell's (m, l) told to the controller, and the policy's score from the three.

    A negative mass (pendulum-sign's kind) reverses every torque the controller gives, so a
    controller told the default m = 1 there would play another episode.
    """
    from esjax._src.engine.baselines import pendulum_torque

    run_dir, plain, _ = grid_run
    out = tmp_path / "scored.json"
    axes = ("--grid-axis", "m=-1.0,1.0", "--grid-axis", "l=1.0,3.0")
    args = (*axes, "-n", EPISODES, "--baseline", "analytic", "--out", out)
    result = esjax("eval", run_dir, *args, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    words = " ".join(result.stdout.split())  # the table titles wrap at the terminal's width
    assert "score (0 = zero action, 1 = analytic), per cell" in words
    assert "mean test return of the analytic controller on the same episodes" in words
    record = json.loads(out.read_text())
    assert record["mean"][1] == plain["mean"][1]  # m = 1: the same episodes as without it
    assert out.with_suffix(".png").read_bytes()[:8] == PNG_MAGIC

    def analytic(obs, params):
        return pendulum_torque(obs, params.m, params.l, params.g, params.max_torque)

    def zero(obs, params):
        return np.zeros(1)

    references = record["reference_mean"]
    for (row, m), (col, l) in [((0, -1.0), (0, 1.0)), ((1, 1.0), (0, 1.0))]:
        top = reference_returns(run_dir, m, l, EPISODES, act=analytic).mean()
        bottom = reference_returns(run_dir, m, l, EPISODES, act=zero).mean()
        np.testing.assert_allclose(references["analytic"][row][col], top, rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(references["zero action"][row][col], bottom, rtol=1e-4)
        assert top - bottom > 1.0  # 16 steps: the controller already gains on zero torque
        expected = (record["mean"][row][col] - bottom) / (top - bottom)
        np.testing.assert_allclose(
            record["score_vs_analytic"][row][col], expected, rtol=1e-3, atol=1e-3
        )

    def told_defaults(obs, params):
        return pendulum_torque(obs, 1.0, 1.0, params.g, params.max_torque)

    believed = reference_returns(run_dir, -1.0, 1.0, EPISODES, act=told_defaults).mean()
    assert abs(references["analytic"][0][0] - believed) > 1.0


def test_heatmap_and_training_region(grid_run):
    _, record, out = grid_run
    png = out.with_suffix(".png")
    assert png.read_bytes()[:8] == PNG_MAGIC
    assert record["figure"] == png.name
    assert record["in_training"] == [[False, False], [True, False]]
    assert record["training_range"] == {
        "m": {"low": 0.5, "high": 2.0},
        "l": {"low": 0.5, "high": 2.0},
    }
    # The outline is the single training cell's four edges.
    assert sorted(training_outline(np.asarray(record["in_training"]))) == sorted(
        [
            ((-0.5, 0.5), (0.5, 0.5)),
            ((-0.5, 0.5), (1.5, 1.5)),
            ((-0.5, -0.5), (0.5, 1.5)),
            ((0.5, 0.5), (0.5, 1.5)),
        ]
    )


def test_training_region_of_a_signed_parameter_has_two_parts():
    """pendulum-sign trains on m = ±[0.5, 2] at l = 1: two blocks, split by |m| = 0.3."""
    _, raw, source = presets.locate("task", "pendulum-sign")
    task = parse_task(raw, source)
    rows, cols = task.grid["rows"].values, task.grid["columns"].values
    dist = task.env_sampler["m"]
    inside = np.array(
        [[meta._inside(m, dist, 1.0) and meta._inside(l, None, 1.0) for l in cols] for m in rows]
    )
    assert inside.sum() == 10  # |m| in {0.5, 0.707, 1, 1.41, 2}, both signs, l = 1 only
    assert inside[:, cols.index(1.0)].tolist() == [0.5 <= abs(m) <= 2 for m in rows]
    segments = training_outline(inside)
    assert len(segments) == 2 * (2 + 2 * 5)  # per block: top, bottom, 5 cells on either side


def test_plot_grid_draws_any_record(tmp_path):
    record = {
        "axes": ["m", "l"],
        "values": [[0.5, 1.0, 2.0], [1.0, 2.0]],
        "mean": [[-100.0, -200.0], [float("nan"), -300.0], [-400.0, -500.0]],
        "in_training": [[False, False], [True, True], [False, False]],
        "episodes": 4,
    }
    path = plot_grid(record, tmp_path / "sub" / "grid.png")
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_existing_output_is_refused_without_overwrite(grid_run):
    run_dir, _, out = grid_run
    before = out.stat().st_mtime_ns
    result = esjax("eval", run_dir, *AXES, "--out", out, cwd=run_dir.parent)
    assert_clean_error(result, str(out), "--overwrite")
    assert out.stat().st_mtime_ns == before
    out.with_suffix(".png").unlink()
    result = esjax("eval", run_dir, *AXES, "--out", out, cwd=run_dir.parent)
    assert_clean_error(result, "exists", "--overwrite")  # the JSON alone is enough to refuse


@pytest.mark.parametrize(
    ("axes", "message"),
    [
        (("--grid-axis", "mass=0.5:2:3", "--grid-axis", "l=1,2"), "'mass' is not a parameter"),
        (("--grid-axis", "m=0.5:2", "--grid-axis", "l=1,2"), "NAME=LOW:HIGH:COUNT"),
        (("--grid-axis", "m=0:2:3", "--grid-axis", "l=1,2"), "LOW > 0"),
        (("--grid-axis", "m=1,x", "--grid-axis", "l=1,2"), "--grid-axis 'm=1,x'"),
        (("--grid-axis", "m=1,2"), "exactly two"),
        (("--grid", "--split", "extrapolate"), "exclude each other"),
        (
            ("--grid-axis", "max_steps_in_episode=100,200", "--grid-axis", "l=1,2"),
            "a grid needs real values",
        ),
    ],
)
def test_bad_grid_input_is_one_line(grid_run, tmp_path, axes, message):
    run_dir, _, _ = grid_run
    result = esjax("eval", run_dir, *axes, "--out", tmp_path / "g.json", cwd=tmp_path)
    assert_clean_error(result, message)
    assert not (tmp_path / "g.json").exists()


def test_default_grid_comes_from_the_task_and_its_absence_is_one_line(grid_run, tmp_path):
    run_dir, _, _ = grid_run
    axes = meta.grid_axes(run_dir)  # the preset's [grid], stored in the run's config.json
    assert list(axes) == ["m", "l"]
    assert axes["m"][0] == 0.4 and axes["m"][-1] == 3.0 and len(axes["m"]) == 8
    bare = tmp_path / "bare"
    shutil.copytree(run_dir, bare)
    config = json.loads((bare / "config.json").read_text())
    # A run without a grid of its own (from before [grid] existed, or whose task file had none)
    # falls back to the preset of the same name and env.
    config["task"]["grid"] = {}
    (bare / "config.json").write_text(json.dumps(config))
    assert meta.grid_axes(bare) == axes
    del config["task"]["grid"]
    (bare / "config.json").write_text(json.dumps(config))
    assert meta.grid_axes(bare) == axes
    # A task of its own with no grid: one line naming the way out.
    config["task_name"] = "my-pendulum"
    (bare / "config.json").write_text(json.dumps(config))
    result = esjax("eval", bare, "--grid", cwd=tmp_path)
    assert_clean_error(result, "has no grid", "--grid-axis")


def test_grid_axis_spec_is_log_spaced():
    name, values = meta.parse_grid_axis("m=0.5:3:8")
    assert name == "m" and len(values) == 8
    assert values[0] == pytest.approx(0.5) and values[-1] == pytest.approx(3.0)
    np.testing.assert_allclose(np.diff(np.log(values)), np.log(6) / 7)
    assert meta.parse_grid_axis("l=2,1,0.5") == ("l", (0.5, 1.0, 2.0))


def test_preset_grids_name_env_parameters():
    from esjax._src.engine.tasks import check_param_names
    from esjax._src.envs.core import make_env

    for name in ("pendulum-meta", "pendulum-cadm", "pendulum-sign", "acrobot-meta"):
        _, raw, source = presets.locate("task", name)
        task = parse_task(raw, source)
        _, default = make_env(task.env)
        params = [task.grid[k].param for k in ("rows", "columns")]
        check_param_names(params, default, f"{name}: grid")


def test_the_grid_compiles_once_whatever_its_size(grid_run, monkeypatch):
    """The env step is traced as often for 6 cells as for 1: cells are a batch axis."""
    from gymnax.environments.classic_control.pendulum import Pendulum

    run_dir, _, _ = grid_run
    traced = []
    original = Pendulum.step_env

    def counting(self, *args, **kwargs):
        traced.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Pendulum, "step_env", counting)
    counts = []
    for axes in ({"m": (1.0,), "l": (1.0,)}, {"m": (0.5, 1.0, 2.0), "l": (0.7, 1.4)}):
        traced.clear()
        returns = meta.grid_returns(run_dir, axes, episodes=2)
        assert returns.shape == (len(axes["m"]), len(axes["l"]), 2)
        counts.append(len(traced))
    assert counts[0] == counts[1] >= 1


def test_grid_and_lesion_leave_the_shared_test_rollout_as_it_was(grid_run):
    """A grid cell and a lesion are new rollouts (``PopulationRollout.replace``): the test
    rollout that every caller shares keeps its sampler, policy and compiled programs."""
    from esjax._src.run.saved import make_test_rollout

    run_dir, _, _ = grid_run
    _, shared = make_test_rollout(run_dir)
    before = dict(vars(shared))
    meta.grid_returns(run_dir, {"m": (1.0,), "l": (1.0, 2.0)}, episodes=2)
    meta.evaluate_policy(run_dir, episodes=2, lesion=True)
    assert make_test_rollout(run_dir)[1] is shared
    assert vars(shared).keys() == before.keys()
    changed = [name for name, value in vars(shared).items() if value is not before[name]]
    assert not changed, changed


def test_the_grid_tests_the_tasks_test_episodes_by_default(grid_run, tmp_path):
    """Without ``--episodes``, each cell runs the task's ``test_episodes`` (as one split does),
    not a fixed 128: here a run whose task asks for 3."""
    run_dir, _, _ = grid_run
    mine = tmp_path / "three"
    shutil.copytree(run_dir, mine)
    config = json.loads((mine / "config.json").read_text())
    config["task"]["test_episodes"] = EPISODES
    (mine / "config.json").write_text(json.dumps(config))
    record = meta.evaluate_grid(mine, {"m": (0.4,), "l": (3.0,)})
    assert record["episodes"] == EPISODES
    expected = reference_returns(run_dir, m=0.4, l=3.0, episodes=EPISODES)
    np.testing.assert_allclose(record["mean"][0][0], expected.mean(), rtol=1e-4, atol=1e-3)
