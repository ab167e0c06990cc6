"""``esjax render`` draws a suite's env with the suite's own renderer.

Each run is built without training: its config resolved as ``esjax evolve`` resolves it and a
random final policy saved (``esjax evolve`` would compile a generation and an evaluation first,
10-50 s a suite here). ``esjax render`` runs as a subprocess; its GIF must hold one frame per
state of the episode, and its first frame must be the suite's own renderer applied to the
suite's own env reset on the render's episode key, computed here from the suite alone. MuJoCo's
renderer (Brax, Playground) needs OpenGL: where this machine has none, the command must say so
in one line instead. Each test is skipped, naming the extra, where its suite is not installed.
"""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import jax
import numpy as np
import pytest

from esjax._src.analysis.render import play_episode
from esjax._src.envs.suite_base import check_mujoco_gl, default_mujoco_gl, policy_observation
from esjax._src.rollout.episode import episode_keys
from esjax._src.run import runs
from esjax._src.run.saved import SavedPolicy
from esjax._src.run.training import resolve_config
from esjax._src.specs.config import ConfigError

REPO = Path(__file__).resolve().parents[1]
# Too few for any of these envs to end the episode: navix's and xminigrid's goals are 5 and 11
# steps away, 2048 needs a full board, the pendulum a fall, Craftax a death.
STEPS = 3
# The OpenGL settings this process was started with, which ``esjax render`` gets: it picks its
# own where they are unset. This process picks the same before anything here imports MuJoCo
# (which sets PyOpenGL's), so the MuJoCo references below draw where the command can.
STARTED_WITH = {name: os.environ.get(name) for name in ("MUJOCO_GL", "PYOPENGL_PLATFORM")}
default_mujoco_gl()


# ---------------------------------------------------------------------------- references
def navix_picture(key: jax.Array) -> np.ndarray:
    import navix

    timestep = jax.jit(navix.make("Navix-Empty-5x5-v0").reset)(key)
    return np.asarray(navix.observations.rgb(timestep.state))


def xminigrid_picture(key: jax.Array) -> np.ndarray:
    import xminigrid

    env, params = xminigrid.make("MiniGrid-Empty-8x8")
    return np.asarray(env.render(params, jax.jit(env.reset)(params, key)))


def craftax_picture(key: jax.Array) -> np.ndarray:
    from craftax.craftax_classic.constants import BLOCK_PIXEL_SIZE_IMG
    from craftax.craftax_classic.renderer import make_craftax_pixel_renderer
    from craftax.craftax_env import make_craftax_env_from_name

    env = make_craftax_env_from_name("Craftax-Classic-Symbolic-v1", auto_reset=False)
    _, state = jax.jit(env.reset)(key, env.default_params)
    render_craftax_pixels = jax.jit(make_craftax_pixel_renderer(BLOCK_PIXEL_SIZE_IMG))
    return np.asarray(render_craftax_pixels(state)).astype(np.uint8)


def jumanji_picture(key: jax.Array) -> np.ndarray:
    """The viewer's own ``rgb_array`` mode, which returns the picture it drew."""
    import jumanji
    from jumanji.environments.logic.game_2048.viewer import Game2048Viewer

    env = jumanji.make("Game2048-v1")
    state, _ = jax.jit(env.reset)(key)
    viewer = Game2048Viewer(board_size=env.board_size, render_mode="rgb_array")
    return np.asarray(viewer.render(state))[..., :3]


def brax_picture(key: jax.Array) -> np.ndarray:
    from brax import envs

    env = envs.get_environment("inverted_pendulum", backend="positional")
    return np.asarray(env.render(jax.jit(env.reset)(key).pipeline_state))


def playground_picture(key: jax.Array) -> np.ndarray:
    from mujoco_playground import registry

    env = registry.load("CartpoleBalance", config_overrides={"impl": "jax"})
    return np.asarray(env.render(jax.jit(env.reset)(key)))


@dataclass(frozen=True)
class Case:
    package: str
    extra: str
    task: str  # the task's TOML, less its episode length
    reference: Callable[[jax.Array], np.ndarray]
    mujoco: bool = False


CASES = {
    "navix": Case("navix", "navix", 'env = "navix:Navix-Empty-5x5-v0"\n', navix_picture),
    "xminigrid": Case("xminigrid", "xminigrid", 'env = "xminigrid:MiniGrid-Empty-8x8"\n',
                      xminigrid_picture),
    "craftax": Case("craftax", "craftax", 'env = "craftax:Craftax-Classic-Symbolic-v1"\n',
                    craftax_picture),
    "jumanji": Case("jumanji", "jumanji", 'env = "jumanji:Game2048-v1"\n', jumanji_picture),
    "brax": Case("brax", "brax", 'env = "brax:inverted_pendulum"\n[env_kwargs]\n'
                 'backend = "positional"\n', brax_picture, mujoco=True),
    "playground": Case("mujoco_playground", "playground", 'env = "playground:CartpoleBalance"\n',
                       playground_picture, mujoco=True),
}  # fmt: skip


# ---------------------------------------------------------------------------- helpers
def installed(case: Case) -> None:
    pytest.importorskip(
        case.package, reason=f'{case.package} is not installed (pip install "esjax[{case.extra}]")'
    )


def untrained_run(case: Case, where: Path) -> Path:
    """A run directory as ``esjax evolve`` writes it, with a random final policy."""
    task = where / "task.toml"
    task.write_text(f"episode_length = {STEPS}\n{case.task}")
    config = resolve_config(task, popsize=4, generations=1)
    run = where / "run"
    run.mkdir()
    runs.write_run_config(run, config)
    params = np.random.default_rng(0).normal(0.0, 0.5, (1, config.num_dims))
    runs.save_policy(run, "final", params, None, None, {"generation": 1})
    return run


def render(run: Path, out: Path, **env: str) -> subprocess.CompletedProcess:
    """``esjax render RUN --out OUT`` in a subprocess; ``env`` sets variables ("": unset)."""
    settings = {**{name: value or "" for name, value in STARTED_WITH.items()}, **env}
    variables = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO), **settings)
    for name in [name for name, value in settings.items() if value == ""]:
        del variables[name]
    return subprocess.run(
        [sys.executable, "-m", "esjax", "render", str(run), "--out", str(out)],
        env=variables, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def gif_frames(path: Path) -> list[np.ndarray]:
    from PIL import Image, ImageSequence

    with Image.open(path) as gif:
        return [np.asarray(frame.convert("RGB")) for frame in ImageSequence.Iterator(gif)]


def picture_in(frame: np.ndarray, like: np.ndarray) -> np.ndarray:
    """The suite's picture inside a GIF frame: its top-left block, every ``factor``-th pixel
    (the caption strip lies beneath, small pictures are enlarged by a whole factor)."""
    factor = frame.shape[1] // like.shape[1]
    height, width = like.shape[0] * factor, like.shape[1] * factor
    return frame[:height:factor, :width:factor]


def one_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    return lines[0]


# ---------------------------------------------------------------------------- tests
@pytest.mark.parametrize("suite", sorted(CASES))
def test_render_draws_with_the_suites_own_renderer(suite, tmp_path):
    case = CASES[suite]
    installed(case)
    run = untrained_run(case, tmp_path)
    out = tmp_path / "episode.gif"
    result = render(run, out)
    if case.mujoco:
        try:
            check_mujoco_gl(suite)
        except ConfigError:  # no OpenGL here: the command says so, in one line
            assert result.returncode == 2
            assert "OpenGL" in one_line(result) and "MUJOCO_GL" in one_line(result)
            return
    assert result.returncode == 0, result.stderr[-3000:]
    frames = gif_frames(out)
    assert len(frames) == STEPS + 1
    _, k_reset, _ = episode_keys(jax.random.key(0))  # render's default --seed 0
    reference = case.reference(k_reset)
    first = picture_in(frames[0], reference)
    if len(np.unique(reference.reshape(-1, 3), axis=0)) <= 256:  # GIF keeps it exactly
        np.testing.assert_array_equal(first, reference)
    else:  # quantised to 256 colours (Craftax's textures, MuJoCo's shading): a few levels off
        difference = np.abs(first.astype(int) - reference.astype(int))
        assert difference.mean() < 2.0, difference.mean()
        assert np.mean(difference > 48) < 0.01


def test_render_plays_the_rollouts_episode_on_a_suite(tmp_path):
    """The states ``esjax render`` draws are the population rollout's episode for the same
    key: each observation of the episode, as the rollout saw it, and the return."""
    installed(CASES["navix"])
    saved = SavedPolicy.load(untrained_run(CASES["navix"], tmp_path))
    key = jax.random.key(0)
    result = saved.rollout.single(key, saved.params, saved.obs_stats, trajectory=True)
    env, params = saved.rollout.env, saved.rollout.env_params
    states, returns = play_episode(saved.controller(), env, params, key, STEPS)
    valid = np.asarray(result.trajectory.valid)
    assert len(states) == valid.sum() + 1 == STEPS + 1
    seen = [np.ravel(policy_observation(state.observation)) for state in states[:-1]]
    np.testing.assert_array_equal(np.stack(seen), np.asarray(result.trajectory.obs)[valid])
    assert returns[-1] == pytest.approx(float(result.returns))
    actions = np.asarray(result.trajectory.action)[valid]
    assert len(set(actions.tolist())) > 1, "a policy that always turns the same way shows little"


@pytest.fixture(scope="module")
def brax_run(tmp_path_factory):
    case = CASES["brax"]
    installed(case)
    return untrained_run(case, tmp_path_factory.mktemp("brax"))


def test_mujoco_without_opengl_is_one_line(brax_run, tmp_path):
    """glfw, MuJoCo's default, cannot draw without a display."""
    headless = {"DISPLAY": "", "WAYLAND_DISPLAY": "", "PYOPENGL_PLATFORM": ""}
    result = render(brax_run, tmp_path / "x.gif", MUJOCO_GL="glfw", **headless)
    assert result.returncode == 2
    line = one_line(result)
    assert line.startswith("error: render: brax:inverted_pendulum draws with MuJoCo's renderer")
    assert "MUJOCO_GL=glfw" in line and "MUJOCO_GL=egl" in line
    assert not (tmp_path / "x.gif").exists()


def test_a_mujoco_gl_whose_library_is_missing_is_one_line(brax_run, tmp_path):
    """MuJoCo loads ``MUJOCO_GL``'s platform as it is imported; OSMesa's library missing
    fails there, in PyOpenGL (or, where PyOpenGL raises an ImportError, when it first draws)."""
    if ctypes.util.find_library("OSMesa") is not None:
        pytest.skip("libOSMesa is installed here: MUJOCO_GL=osmesa loads")
    # PyOpenGL's platform as MuJoCo sets it, not the one this process's MuJoCo left behind.
    result = render(brax_run, tmp_path / "x.gif", MUJOCO_GL="osmesa", PYOPENGL_PLATFORM="")
    assert result.returncode == 2
    line = one_line(result)
    assert line.startswith("error: ") and "brax:inverted_pendulum" in line
    assert "OpenGL" in line and "MUJOCO_GL=osmesa" in line
