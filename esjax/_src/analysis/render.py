"""Animations of a policy drawn from the env state *and* its parameters.

gymnax's own renderers draw every variant at its default size; here a pendulum of length 1.6
is drawn four times as long as one of 0.4, a heavier bob is bigger, and acrobot links and the
cart-pole's pole take their lengths from ``EnvParams``. Axis limits depend on parameters only
through generous fixed minimums, so variants are comparable by eye across GIFs.

Drawing is plain matplotlib (no pyplot state); GIFs are written by matplotlib's ``PillowWriter``.
matplotlib is imported by the functions that draw: every ``esjax`` command imports this
module, and only ``render`` draws (about 0.1 s of every other command's start-up).

An env of another suite (``SUITE:NAME``) is drawn by the suite's own renderer instead, through
its adapter's ``renderer(params)`` (see :mod:`esjax._src.envs.suite_base`): navix's sprites,
xminigrid's tiles, Craftax's textures, a jumanji env's matplotlib viewer, MuJoCo's renderer for
Brax and Playground. Its pictures are kept pixel for pixel (small ones enlarged by a whole
factor), with the step and return written in a strip beneath.
"""

from __future__ import annotations

import functools
import math
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from esjax._src.engine.tasks import check_param_names, fixed_env_params, split_sampler
from esjax._src.envs.core import env_step, import_gymnax, make_env
from esjax._src.envs.suite_base import Renderer, default_mujoco_gl
from esjax._src.rollout.episode import episode_keys, split_step_key
from esjax._src.run import runs, trust
from esjax._src.run.files import atomic_write
from esjax._src.run.saved import SavedPolicy
from esjax._src.specs.config import ConfigError, check_param_values, parse_override

Update = Callable[[Any, str], None]  # (env state, caption) -> redraw the artists
PIVOT = "#2c3e50"
# A suite's picture narrower than this is enlarged by a whole factor, so its caption fits.
MIN_WIDTH = 240
CAPTION_HEIGHT = 16


def _f(value: Any) -> float:
    return float(np.asarray(value))


def _frame_axes(ax: Any, xlim: tuple[float, float], ylim: tuple[float, float]) -> None:
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)


# ---------------------------------------------------------------------------- scenes
def pendulum_points(state: Any, params: Any) -> tuple[np.ndarray, np.ndarray]:
    """Pivot and bob centre; ``theta = 0`` is upright, positive angles turn counter-clockwise."""
    theta, length = _f(state.theta), _f(params.l)
    return np.zeros(2), np.array([-length * math.sin(theta), length * math.cos(theta)])


def _pendulum(ax: Any, params: Any) -> Update:
    from matplotlib.patches import Circle

    length, mass = _f(params.l), _f(params.m)
    reach = max(2.2, 1.15 * length + 0.3)
    _frame_axes(ax, (-reach, reach), (-reach, reach))
    (rod,) = ax.plot([], [], color="#c0392b", lw=7, solid_capstyle="round", zorder=2)
    # A negative mass flips the actuator (pendulum-sign): the bob is as big as its magnitude.
    bob = ax.add_patch(Circle((0, 0), 0.12 * math.sqrt(abs(mass)), color="#7b241c", zorder=3))
    ax.plot([0], [0], "o", color=PIVOT, ms=6, zorder=4)
    caption = ax.text(0.02, 0.02, "", transform=ax.transAxes, fontsize=8, family="monospace")
    ax.set_title(f"Pendulum  l = {length:.2f}  m = {mass:.2f}", fontsize=10)

    def update(state: Any, text: str) -> None:
        pivot, tip = pendulum_points(state, params)
        rod.set_data([pivot[0], tip[0]], [pivot[1], tip[1]])
        bob.center = tuple(tip)
        caption.set_text(f"{text}  u = {_f(state.last_u):+.2f}")

    return update


def _cartpole(ax: Any, params: Any) -> Update:
    from matplotlib.patches import Rectangle

    pole = 2.0 * _f(params.length)  # gymnax's ``length`` is half the pole
    bound = _f(params.x_threshold)
    cart_w, cart_h = 0.5, 0.28 * math.sqrt(_f(params.masscart))
    _frame_axes(ax, (-bound - 0.4, bound + 0.4), (-0.6, max(1.6, pole + 0.6)))
    ax.plot([-bound, bound], [0, 0], color="0.4", lw=1.5)
    ax.plot([-bound, -bound], [-0.1, 0.1], color="0.4", lw=1.5)
    ax.plot([bound, bound], [-0.1, 0.1], color="0.4", lw=1.5)
    cart = ax.add_patch(Rectangle((0, 0), cart_w, cart_h, color="#34495e", zorder=2))
    width = 3 + 6 * math.sqrt(_f(params.masspole) / 0.1) / 2
    (rod,) = ax.plot([], [], color="#d68910", lw=width, solid_capstyle="round", zorder=3)
    caption = ax.text(0.02, 0.02, "", transform=ax.transAxes, fontsize=8, family="monospace")
    ax.set_title(f"CartPole  pole = {pole:.2f}  m_pole = {_f(params.masspole):.2f}", fontsize=10)

    def update(state: Any, text: str) -> None:
        x, theta = _f(state.x), _f(state.theta)
        cart.set_xy((x - cart_w / 2, -cart_h / 2))
        top = cart_h / 2
        rod.set_data([x, x + pole * math.sin(theta)], [top, top + pole * math.cos(theta)])
        caption.set_text(text)

    return update


def acrobot_points(state: Any, params: Any) -> np.ndarray:
    """Pivot, elbow and tip; both angles 0 hang straight down."""
    a1, a2 = _f(state.joint_angle1), _f(state.joint_angle2)
    l1, l2 = _f(params.link_length_1), _f(params.link_length_2)
    elbow = np.array([l1 * math.sin(a1), -l1 * math.cos(a1)])
    tip = elbow + np.array([l2 * math.sin(a1 + a2), -l2 * math.cos(a1 + a2)])
    return np.stack([np.zeros(2), elbow, tip])


def _acrobot(ax: Any, params: Any) -> Update:
    l1, l2 = _f(params.link_length_1), _f(params.link_length_2)
    reach = max(2.3, 1.1 * (l1 + l2) + 0.1)
    _frame_axes(ax, (-reach, reach), (-reach, reach))
    # gymnax ends the episode when -cos(a1) - cos(a1 + a2) > 1: for equal links, a tip above
    # half the arm's full length.
    ax.axhline(0.5 * (l1 + l2), color="0.5", ls=":", lw=1.2)
    (link1,) = ax.plot([], [], color="#1f618d", lw=6, solid_capstyle="round", zorder=2)
    (link2,) = ax.plot([], [], color="#2e86c1", lw=6, solid_capstyle="round", zorder=2)
    size1 = 6 * math.sqrt(_f(params.link_mass_1))
    size2 = 6 * math.sqrt(_f(params.link_mass_2))
    (elbow,) = ax.plot([], [], "o", color="#f1c40f", ms=size1, zorder=3)
    (tip,) = ax.plot([], [], "o", color="#f1c40f", ms=size2, zorder=3)
    ax.plot([0], [0], "o", color=PIVOT, ms=6, zorder=4)
    caption = ax.text(0.02, 0.02, "", transform=ax.transAxes, fontsize=8, family="monospace")
    ax.set_title(f"Acrobot  l1 = {l1:.2f}  l2 = {l2:.2f}", fontsize=10)

    def update(state: Any, text: str) -> None:
        p = acrobot_points(state, params)
        link1.set_data(p[:2, 0], p[:2, 1])
        link2.set_data(p[1:, 0], p[1:, 1])
        elbow.set_data([p[1, 0]], [p[1, 1]])
        tip.set_data([p[2, 0]], [p[2, 1]])
        caption.set_text(text)

    return update


def _hill(x: np.ndarray | float) -> np.ndarray | float:
    return np.sin(3 * x) * 0.45 + 0.55


def _mountain_car(ax: Any, params: Any) -> Update:
    from matplotlib.patches import Polygon

    low, high = _f(params.min_position), _f(params.max_position)
    goal = _f(params.goal_position)
    _frame_axes(ax, (low - 0.05, high + 0.05), (-0.05, 1.25))
    xs = np.linspace(low, high, 200)
    ax.plot(xs, _hill(xs), color="0.3", lw=2)
    ax.fill_between(xs, -0.05, _hill(xs), color="0.9")
    flag_y = float(_hill(goal))
    ax.plot([goal, goal], [flag_y, flag_y + 0.18], color="black", lw=1.5)
    ax.add_patch(
        Polygon(
            [[goal, flag_y + 0.18], [goal + 0.08, flag_y + 0.15], [goal, flag_y + 0.12]],
            color="#e67e22",
        )
    )
    body = ax.add_patch(Polygon(np.zeros((4, 2)), color="#27ae60", zorder=3))
    caption = ax.text(0.02, 0.93, "", transform=ax.transAxes, fontsize=8, family="monospace")
    power = getattr(params, "power", getattr(params, "force", math.nan))
    ax.set_title(f"MountainCar  power = {_f(power):.4f}", fontsize=10)
    half_w, height = 0.08, 0.06

    def update(state: Any, text: str) -> None:
        x = _f(state.position)
        angle = math.atan(1.35 * math.cos(3 * x))
        along = np.array([math.cos(angle), math.sin(angle)])
        up = np.array([-along[1], along[0]])
        base = np.array([x, float(_hill(x))])
        corners = [
            base - half_w * along,
            base + half_w * along,
            base + half_w * along + height * up,
            base - half_w * along + height * up,
        ]
        body.set_xy(np.array(corners))
        caption.set_text(text)

    return update


# ---------------------------------------------------------------------------- grid and image envs
# One colour per observation channel, so each MinAtar object kind keeps its colour.
CHANNEL_COLOURS = (
    "#f1c40f", "#e74c3c", "#3498db", "#2ecc71", "#9b59b6",
    "#e67e22", "#1abc9c", "#ecf0f1", "#95a5a6", "#d35400",
)  # fmt: skip


def channel_image(obs: Any) -> np.ndarray:
    """An ``(H, W, 3)`` float RGB picture of an ``(H, W)`` or ``(H, W, C)`` observation: each
    channel in its own colour on black, later channels drawn over earlier ones."""
    from matplotlib.colors import to_rgb

    grid = np.asarray(obs, np.float32)
    if grid.ndim == 2:
        grid = grid[..., None]
    image = np.zeros((*grid.shape[:2], 3), np.float32)
    for c in range(grid.shape[-1]):
        colour = np.array(to_rgb(CHANNEL_COLOURS[c % len(CHANNEL_COLOURS)]), np.float32)
        weight = np.clip(grid[..., c], 0.0, 1.0)[..., None]
        image = image * (1.0 - weight) + colour * weight
    return image


def _observation_image(env_id: str) -> Callable[[Any, Any], Update]:
    """MinAtar games, Catch and DeepSea: the env's own observation grid, drawn from the state."""

    def build(ax: Any, params: Any) -> Update:
        gymnax = import_gymnax()

        env = gymnax.make(env_id)[0]
        obs = np.asarray(env.get_obs(env.reset(_key(), params)[1], params))
        picture = ax.imshow(channel_image(obs), interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
        caption = ax.text(0.0, -0.06, "", transform=ax.transAxes, fontsize=8, family="monospace")
        ax.set_title(env_id, fontsize=10)

        def update(state: Any, text: str) -> None:
            picture.set_data(channel_image(env.get_obs(state, params)))
            caption.set_text(text)

        return update

    return build


def _key() -> Any:
    return jax.random.key(0)


def _maze(env_id: str) -> Callable[[Any, Any], Update]:
    """FourRooms and MetaMaze: walls from the env's map, the goal and the agent on it."""

    def build(ax: Any, params: Any) -> Update:
        gymnax = import_gymnax()

        env = gymnax.make(env_id)[0]
        walls = 1.0 - np.asarray(env.env_map, np.float32)
        ax.imshow(walls, cmap="Greys", vmin=0.0, vmax=1.5, interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
        (goal,) = ax.plot([], [], "*", color="#e67e22", ms=16, zorder=3)
        (agent,) = ax.plot([], [], "o", color="#2980b9", ms=11, zorder=4)
        caption = ax.text(0.0, -0.06, "", transform=ax.transAxes, fontsize=8, family="monospace")
        ax.set_title(f"{env_id}  (agent: dot, goal: star)", fontsize=10)

        def update(state: Any, text: str) -> None:
            row, col = np.asarray(state.goal)
            goal.set_data([col], [row])
            row, col = np.asarray(state.pos)
            agent.set_data([col], [row])
            caption.set_text(text)

        return update

    return build


def _point_robot(ax: Any, params: Any) -> Update:
    from matplotlib.patches import Circle

    radius, goal_radius = _f(params.circle_radius), _f(params.goal_radius)
    reach = 1.3 * radius
    _frame_axes(ax, (-reach, reach), (-0.4 * radius, reach))
    angles = np.linspace(0.0, math.pi, 100)
    ax.plot(radius * np.cos(angles), radius * np.sin(angles), color="0.7", ls=":")
    goal = ax.add_patch(Circle((0, 0), goal_radius, color="#f5cba7", zorder=1))
    (path,) = ax.plot([], [], color="#85c1e9", lw=1, zorder=2)
    (agent,) = ax.plot([], [], "o", color="#2980b9", ms=8, zorder=3)
    caption = ax.text(0.02, 0.02, "", transform=ax.transAxes, fontsize=8, family="monospace")
    ax.set_title("PointRobot  (goal hidden on the semicircle)", fontsize=10)
    trail: list[np.ndarray] = []

    def update(state: Any, text: str) -> None:
        pos = np.asarray(state.pos, np.float64)
        if _f(state.time) == 0:
            trail.clear()
        trail.append(pos)
        goal.center = tuple(np.asarray(state.goal, np.float64))
        path.set_data([p[0] for p in trail], [p[1] for p in trail])
        agent.set_data([pos[0]], [pos[1]])
        caption.set_text(f"{text}  goals {int(np.asarray(state.goals_reached))}")

    return update


# ---------------------------------------------------------------------------- bandits and chains
def _bandit(ax: Any, params: Any) -> Update:
    """The episode so far: each pull a dot on its arm's row, filled by the reward it paid."""
    ax.set_ylim(-0.6, 1.6)
    ax.set_yticks([0, 1], ["arm 0", "arm 1"])
    ax.set_xlabel("step")
    steps = int(_f(getattr(params, "t_max", params.max_steps_in_episode)))
    ax.set_xlim(-1, steps)
    dots = ax.scatter([], [], c=[], cmap="RdYlGn", vmin=-1.0, vmax=1.0, s=18, edgecolors="0.3")
    caption = ax.text(0.02, 0.93, "", transform=ax.transAxes, fontsize=8, family="monospace")
    known = {"reward_prob": "p", "mu": "mu"}
    ax.set_title("Bandit: arm pulled each step, colour = reward", fontsize=10)
    pulls: list[tuple[float, float, float]] = []

    def update(state: Any, text: str) -> None:
        t = _f(state.time)
        if t == 0:
            pulls.clear()
        else:
            pulls.append((t - 1, _f(state.last_action), _f(state.last_reward)))
        if pulls:
            data = np.array(pulls)
            dots.set_offsets(data[:, :2])
            dots.set_array(np.clip(data[:, 2], -1.0, 1.0))
        hidden = [f"{short}={_f(np.mean(getattr(state, name))):+.2f}"
                  for name, short in known.items() if hasattr(state, name)]  # fmt: skip
        caption.set_text(f"{text}  {' '.join(hidden)}")

    return update


CHAIN_FIELDS = ("need_umbrella", "has_umbrella", "context", "query")


def _chain(length_of: Callable[[Any], float]) -> Callable[[Any, Any], Update]:
    """bsuite chains: one node per step of the chain, the steps taken so far filled, and the
    state's hidden context (umbrella needed and taken, context bit, query) written beneath."""

    def build(ax: Any, params: Any) -> Update:
        length = max(1, int(length_of(params)))
        _frame_axes(ax, (-1, length + 1), (-2.0, 2.0))
        xs = np.arange(length + 1)
        ax.plot(xs, np.zeros_like(xs), color="0.6", lw=1, zorder=1)
        nodes = ax.scatter(xs, np.zeros_like(xs), s=60, c=["white"] * len(xs),
                           edgecolors="0.3", zorder=2)  # fmt: skip
        caption = ax.text(0.02, 0.1, "", transform=ax.transAxes, fontsize=8, family="monospace")
        facts = ax.text(0.02, 0.85, "", transform=ax.transAxes, fontsize=9, family="monospace")
        ax.set_title("Chain: steps taken so far", fontsize=10)

        def update(state: Any, text: str) -> None:
            t = min(int(_f(state.time)), length)
            colours = ["#2980b9" if i < t else ("#f1c40f" if i == t else "white") for i in xs]
            nodes.set_color(colours)
            nodes.set_edgecolor("0.3")
            shown = [f"{name}={int(_f(np.ravel(getattr(state, name))[0]))}"
                     for name in CHAIN_FIELDS if hasattr(state, name)]  # fmt: skip
            facts.set_text("  ".join(shown))
            caption.set_text(text)

        return update

    return build


# Envs whose observation is itself a picture of the state.
IMAGE_ENVS = (
    "Breakout-MinAtar", "Asterix-MinAtar", "Freeway-MinAtar", "SpaceInvaders-MinAtar",
    "Seaquest-MinAtar", "Catch-bsuite", "DeepSea-bsuite",
)  # fmt: skip

SCENES: dict[str, Callable[[Any, Any], Update]] = {
    "Pendulum-v1": _pendulum,
    "CartPole-v1": _cartpole,
    "Acrobot-v1": _acrobot,
    "MountainCar-v0": _mountain_car,
    "MountainCarContinuous-v0": _mountain_car,
    **{env_id: _observation_image(env_id) for env_id in IMAGE_ENVS},
    "FourRooms-misc": _maze("FourRooms-misc"),
    "MetaMaze-misc": _maze("MetaMaze-misc"),
    "PointRobot-misc": _point_robot,
    "BernoulliBandit-misc": _bandit,
    "GaussianBandit-misc": _bandit,
    "UmbrellaChain-bsuite": _chain(lambda params: _f(params.chain_length)),
    "MemoryChain-bsuite": _chain(lambda params: _f(params.memory_length) + 1),
    "DiscountingChain-bsuite": _chain(lambda params: 100),
}


def scene(env_id: str, params: Any, size: float = 4.0, dpi: int = 80) -> tuple[Any, Update]:
    """A figure for one env and its params, and the function that draws a state into it."""
    from matplotlib.figure import Figure

    if env_id not in SCENES:
        raise ConfigError(
            f"render: no renderer for env {env_id!r}; esjax draws {', '.join(sorted(SCENES))}"
        )
    fig = Figure(figsize=(size, size), dpi=dpi, layout="constrained")
    ax = fig.add_subplot()
    return fig, SCENES[env_id](ax, params)


def frame(env_id: str, state: Any, params: Any, caption: str = "") -> np.ndarray:
    """One drawn state as an ``(H, W, 4)`` uint8 RGBA array."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig, update = scene(env_id, params)
    update(state, caption)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba()).copy()


def save_gif(
    env_id: str,
    states: Sequence[Any],
    params: Any,
    out: str | Path,
    *,
    captions: Sequence[str] | None = None,
    fps: int = 25,
    draw: Renderer | None = None,
    through_special: bool = True,
) -> Path:
    """Draw every state into one GIF: with ``draw``, a suite's own renderer (an adapter's
    ``renderer(params)``), where given, else with esjax's scene for ``env_id``.

    The GIF is drawn in a private folder, then written whole with
    :func:`esjax._src.run.files.atomic_write` (``through_special`` as there: False for a file inside
    a run, where a link must never be written through).
    """
    from matplotlib.animation import PillowWriter

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="esjax-gif-") as folder:
        drawn = Path(folder) / "episode.gif"
        if draw is not None:
            pictures = [captioned(picture, captions[i] if captions else "")
                        for i, picture in enumerate(draw(states))]  # fmt: skip
            # The call PillowWriter makes for the scenes below.
            pictures[0].save(drawn, save_all=True, append_images=pictures[1:],
                             duration=int(1000 / fps), loop=0)  # fmt: skip
        else:
            fig, update = scene(env_id, params)
            writer = PillowWriter(fps=fps)
            with writer.saving(fig, str(drawn), dpi=fig.dpi):
                for i, state in enumerate(states):
                    update(state, captions[i] if captions else "")
                    writer.grab_frame()
        atomic_write(out, drawn.read_bytes(), through_special=through_special)
    return out


def captioned(picture: np.ndarray, caption: str) -> Any:
    """A suite's ``(H, W, 3)`` picture as a PIL image, its pixels kept (each repeated a whole
    number of times where it is narrower than ``MIN_WIDTH``), the caption in a strip beneath.

    Whole-factor enlargement keeps a sprite's pixels sharp; a suite's own picture stays
    recoverable from the GIF by taking every ``factor``-th pixel of its top-left block.
    """
    from PIL import Image, ImageDraw

    picture = np.asarray(picture, np.uint8)
    factor = max(1, math.ceil(MIN_WIDTH / picture.shape[1]))
    picture = picture.repeat(factor, axis=0).repeat(factor, axis=1)
    if not caption:
        return Image.fromarray(picture)
    strip = Image.new("RGB", (picture.shape[1], CAPTION_HEIGHT), "white")
    ImageDraw.Draw(strip).text((4, 2), caption, fill="black")
    return Image.fromarray(np.concatenate([picture, np.asarray(strip)], axis=0))


# ---------------------------------------------------------------------------- a run's policy
def play_episode(controller: Any, env: Any, env_params: Any, key: Any, steps: int):
    """``(states, cumulative returns)`` of one episode of ``controller`` (a host-side loop).

    The episode the population rollout plays for ``key`` on ``env_params``: the same reset key, step
    keys and end (termination, truncation or the episode length), through
    :func:`esjax._src.envs.core.env_step` and the controller's
    :class:`esjax._src.rollout.episode.EpisodeStep`. The last state is the one the episode ended in:
    ``env_step`` never hands back gymnax's reset.
    """
    _, k_reset, _ = episode_keys(key)
    obs, state = jax.jit(env.reset)(k_reset, env_params)
    step = jax.jit(functools.partial(env_step, env))
    controller.reset(key, env_params=env_params)
    states, returns, total, reward = [state], [0.0], 0.0, 0.0
    for t in range(steps):
        _, k_env = split_step_key(controller.step_key(t))
        action = controller.act(np.asarray(obs), reward=reward)  # the reward the last action earned
        obs, state, reward, done = step(k_env, state, action, env_params)
        reward = float(np.float32(reward))
        total += reward
        states.append(state)
        returns.append(total)
        if bool(done):
            break
    return states, returns


def render_run(
    run_dir: str | Path,
    out: str | Path | None = None,
    *,
    which: str = "final",
    seed: int = 0,
    split: str | None = None,
    env_params: Sequence[str] = (),
    steps: int | None = None,
    fps: int = 25,
    max_frames: int = 250,
    trust_code: bool = False,
) -> tuple[Path, float]:
    """Play one episode of a run's saved policy and write it as a GIF; returns ``(path, return)``.

    Code the run's task names is imported only if this user made the run, or with
    ``trust_code`` (:mod:`esjax._src.run.trust`).

    The variant is drawn from the task's training distribution (or ``split``) with ``seed``;
    ``env_params`` (``"l=1.6"`` strings) then pin individual fields.
    """
    default_mujoco_gl()  # before a suite the run names imports MuJoCo
    if trust_code:
        trust.grant([run_dir])
    saved = SavedPolicy.load(run_dir, which=which)
    task = saved.task
    env, default_params = make_env(task.env, task.env_kwargs)
    if not hasattr(env, "renderer") and task.env not in SCENES:
        raise ConfigError(
            f"render: no renderer for env {task.env!r}; esjax draws {', '.join(sorted(SCENES))} "
            "and the envs of the suites it adapts (SUITE:NAME)"
        )
    params = fixed_env_params(task, default_params)
    # The rollout's own layout: the episode key's first part draws the variant.
    key = jax.random.key(seed)
    sampler = split_sampler(task, split)
    if sampler is not None:
        params = sampler(episode_keys(key)[0], params)
    pinned = {}
    for text in env_params:
        path, value = parse_override(text)
        if len(path) != 1 or not isinstance(value, int | float) or isinstance(value, bool):
            raise ConfigError(f"--param {text!r}: expected NAME=NUMBER, e.g. l=1.6")
        if not math.isfinite(value):
            raise ConfigError(f"--param {text!r}: must be a finite number")
        pinned[path[0]] = value
    check_param_names(list(pinned), params, "--param")
    check_param_values(task.env, pinned, "--param")
    if pinned:
        params = params.replace(**pinned)
    # A suite's own renderer, set up before the episode: one that cannot draw here says so first.
    draw = env.renderer(params) if hasattr(env, "renderer") else None
    controller = saved.controller(env_params=params)
    length = steps or task.episode_length or int(params.max_steps_in_episode)
    states, returns = play_episode(controller, env, params, key, length)
    stride = max(1, math.ceil(len(states) / max_frames))
    picked = list(range(0, len(states), stride))
    if picked[-1] != len(states) - 1:
        picked.append(len(states) - 1)
    states = [jax.device_get(states[i]) for i in picked]
    captions = [f"step {i:4d}  return {returns[i]:8.1f}" for i in picked]
    named, out = out is not None, Path(out) if out is not None else Path(run_dir) / runs.EPISODE_GIF
    try:
        save_gif(task.env, states, params, out, captions=captions, fps=fps, draw=draw,
                 through_special=named)  # fmt: skip
    except (ValueError, OverflowError) as error:  # a scene's geometry the guard did not foresee
        raise ConfigError(f"cannot draw {task.env} with these env parameters ({error})") from None
    return out, returns[-1]
