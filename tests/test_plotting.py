"""Fitness plots from metrics rows, and animations drawn from env state and parameters."""

from __future__ import annotations

import math

import numpy as np
import pytest

from esjax._src.analysis import plotting, render
from esjax._src.specs.config import ConfigError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def rows(seed: int, generations: int = 30, offset: float = 0.0, jitter: float = 0.0):
    rng = np.random.default_rng(seed)
    out = []
    for g in range(1, generations + 1):
        row = {
            "generation": g,
            "env_steps": g * 8 * 16,
            "wall_s": g * 0.1 + jitter * rng.random(),
            "fitness_mean": -1000 + 20 * g + offset + rng.normal(),
            "fitness_best": -800 + 20 * g + offset,
            "fitness_std": 10.0,
        }
        if g % 5 == 0:
            row["eval_return"] = -900 + 20 * g + offset + rng.normal()
        out.append(row)
    return out


def test_mean_band_is_a_95_percent_confidence_interval():
    x = np.arange(4.0)
    curves = [(x, x + d) for d in (0.0, 1.0, 2.0)]
    gx, mean, low, high = plotting.mean_band(curves)
    np.testing.assert_array_equal(gx, x)
    np.testing.assert_allclose(mean, x + 1.0)
    half = 4.302652729749464 * 1.0 / math.sqrt(3)  # t_{0.975, 2}; sample std of (0, 1, 2) is 1
    np.testing.assert_allclose(high - mean, half)
    np.testing.assert_allclose(mean - low, half)


def test_mean_band_of_one_curve_has_no_band():
    x = np.arange(3.0)
    _, mean, low, high = plotting.mean_band([(x, 2 * x)])
    np.testing.assert_array_equal(mean, 2 * x)
    np.testing.assert_array_equal(low, high)


def test_mean_band_never_extrapolates_ragged_curves():
    a = (np.array([0.0, 1.0, 2.0, 3.0]), np.array([0.0, 1.0, 2.0, 3.0]))
    b = (np.array([0.5, 1.5, 2.5]), np.array([1.0, 2.0, 3.0]))
    gx, mean, _, _ = plotting.mean_band([a, b])
    assert gx.min() >= 0.5 and gx.max() <= 2.5
    # at x = 1.5: a interpolates to 1.5, b is 2.0
    assert mean[np.searchsorted(gx, 1.5)] == pytest.approx(1.75)


def test_series_skips_rows_without_the_value():
    x, y = plotting.series(rows(0), "generations", "eval_return")
    np.testing.assert_array_equal(x, [5, 10, 15, 20, 25, 30])
    assert np.all(np.isfinite(y))


def test_split_seeds():
    mixed = [{**r, "seed": s} for s in (0, 1, 2) for r in rows(s, 3)]
    assert [len(part) for part in plotting.split_seeds(mixed)] == [3, 3, 3]
    assert len(plotting.split_seeds(rows(0, 3))) == 1


@pytest.mark.parametrize("x", ["generations", "env_steps", "wall_s"])
def test_plot_groups_writes_a_png(tmp_path, x):
    seeded = [{**r, "seed": s} for s in range(3) for r in rows(s, jitter=0.05)]
    groups = [
        plotting.Group("open_es", (seeded,)),
        plotting.Group("pgpe", (rows(7, offset=50), rows(8, offset=60))),
    ]
    path = plotting.plot_groups(groups, tmp_path / "sub" / "fit.png", x=x, solved_return=-200.0)
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert len(data) > 20_000


def test_plot_without_evaluations_still_draws(tmp_path):
    no_eval = [{k: v for k, v in r.items() if k != "eval_return"} for r in rows(0)]
    path = plotting.plot_groups([plotting.Group("run", (no_eval,))], tmp_path / "f.png")
    assert path.read_bytes().startswith(PNG_MAGIC)


def test_plot_rejects_unknown_x(tmp_path):
    with pytest.raises(ValueError, match="generations"):
        plotting.plot_groups([plotting.Group("run", (rows(0),))], tmp_path / "f.png", x="time")


# ---------------------------------------------------------------------------- render
def pendulum(length: float, mass: float = 1.0):
    from esjax._src.envs.core import make_env

    env, params = make_env("Pendulum-v1")
    import jax

    _, state = env.reset(jax.random.key(0), params)
    return state.replace(theta=0.0), params.replace(l=length, m=mass)


def centre_row(image: np.ndarray, rgb: tuple[int, int, int]) -> float:
    """Mean row of the pixels of colour ``rgb``."""
    close = np.all(np.abs(image[..., :3].astype(int) - np.array(rgb)) < 12, axis=-1)
    return float(np.flatnonzero(close.any(axis=1)).mean())


def bob_height_px(length: float) -> float:
    """Pixels from the pivot up to the centre of the bob of an upright pendulum."""
    image = render.frame("Pendulum-v1", *pendulum(length))
    return centre_row(image, (0x2C, 0x3E, 0x50)) - centre_row(image, (0x7B, 0x24, 0x1C))


def test_pendulum_is_drawn_from_its_length():
    short, long = bob_height_px(0.4), bob_height_px(1.6)
    assert short > 5
    assert long / short == pytest.approx(4.0, rel=0.1)


def test_pendulum_geometry_follows_params():
    state, params = pendulum(1.6)
    pivot, tip = render.pendulum_points(state.replace(theta=math.pi / 2), params)
    np.testing.assert_allclose(tip - pivot, [-1.6, 0.0], atol=1e-6)


def test_acrobot_links_take_their_lengths_from_params():
    import jax

    from esjax._src.envs.core import make_env

    env, params = make_env("Acrobot-v1")
    _, state = env.reset(jax.random.key(0), params)
    state = state.replace(joint_angle1=0.0, joint_angle2=0.0)
    points = render.acrobot_points(state, params.replace(link_length_1=0.5, link_length_2=1.5))
    np.testing.assert_allclose(points[:, 1], [0.0, -0.5, -2.0], atol=1e-6)


@pytest.mark.parametrize("env_id", sorted(render.SCENES))
def test_every_scene_draws_a_reset_state(env_id):
    import jax

    from esjax._src.envs.core import make_env

    env, params = make_env(env_id)
    _, state = env.reset(jax.random.key(0), params)
    image = render.frame(env_id, state, params, "step 0")
    assert image.ndim == 3 and image.shape[-1] == 4
    assert (image[..., :3] < 200).any()  # something was drawn


def test_gif_has_one_frame_per_state(tmp_path):
    from PIL import Image

    state, params = pendulum(1.0)
    states = [state.replace(theta=t) for t in np.linspace(0, math.pi, 5)]
    path = render.save_gif("Pendulum-v1", states, params, tmp_path / "p.gif", fps=10)
    with Image.open(path) as gif:
        assert gif.format == "GIF"
        assert gif.n_frames == 5


def test_env_without_renderer_is_a_one_line_error():
    with pytest.raises(ConfigError, match="no renderer for env 'Reacher-misc'"):
        render.scene("Reacher-misc", None)


def fake_run(path, strategy: str, seed: int):
    from esjax._src.run import runs
    from esjax._src.specs.config import RunConfig, StrategySpec, parse_task

    path.mkdir(parents=True)
    task = parse_task({"env": "Pendulum-v1", "solved_return": -200.0}, "test")
    config = RunConfig("pendulum", task, StrategySpec(strategy, "Open_ES"), popsize=8,
                       num_dims=1, rollouts=1, generations=3, seed=seed, seeds=1)  # fmt: skip
    runs.write_run_config(path, config)
    runs.append_metrics(path, rows(seed))
    return path


def test_runs_differing_only_in_seed_are_one_group(tmp_path):
    dirs = [fake_run(tmp_path / f"open-s{s}", "open_es", s) for s in range(3)]
    dirs.append(fake_run(tmp_path / "pgpe", "pgpe", 0))
    groups = plotting.group_runs(dirs)
    assert [(g.label, len(g.runs)) for g in groups] == [
        ("pendulum · open_es · pop 8", 3),
        ("pendulum · pgpe · pop 8", 1),
    ]
    assert plotting.solved_return_of(dirs) == -200.0
    out = plotting.plot_runs(dirs, tmp_path / "all.png", x="wall_s")
    assert out.read_bytes().startswith(PNG_MAGIC)
