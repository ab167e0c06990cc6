"""Analytic reference controllers: what a policy that knows the env's physics achieves.

A trained oracle (an MLP fed the true env parameters) is only as good as its training; where
it extrapolates badly, scores normalised against it flatter everything else. The controllers
here are derived from the equations of motion instead, and see the variant they control only
through the env parameters the rollout hands them (``param_inputs``), like the oracle does.

Pendulum (gymnax ``Pendulum-v1``, angle 0 upright):
``theta'' = (3 g / 2 l) sin(theta) + (3 / (m l^2)) u``. With the energy
``E = 1/2 theta'^2 + (3 g / 2 l)(cos(theta) - 1)`` (0 upright at rest) the torque changes it as
``dE/dt = (3 / (m l^2)) u theta'``, so a torque of the sign of ``-E theta' / m`` pumps the
pendulum towards the top whatever the sign of ``m``. Near the top a feedback-linearising PD
cancels gravity and divides by the actuator gain (a negative ``m`` flips the torque too). The
torque is clipped to the env's bound.

Acrobot (gymnax ``Acrobot-v1``, torque on the elbow only): no closed-form swing-up is known
that is also fast, so its reference plans with the physics instead. Every step it tries each
sequence of three held actions (27 plans of 9 steps, 1.8 s) through gymnax's own ``step_env``
with the parameters it is told, and takes the first action of the plan that lifts the tip
soonest or, where none does, ends with the most mechanical energy. The elbow torque's power is
``tau theta2'``, so pumping energy is what a swing-up needs; the short look-ahead picks when.
It sees the variant only through the told parameters, like the pendulum's controller, and
takes the env's other parameters from the rollout.

A controller must be told every parameter the episodes draw: a sampler or split that draws
another (a pendulum's ``dt``, say) is refused, since the reference would control another env.

Where no analytic controller is shipped, :data:`REFERENCES` names the reference used instead.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from esjax._src.envs.core import import_gymnax
from esjax._src.policies.networks import ActionHead, Policy
from esjax._src.rollout.population_rollout import PopulationRollout
from esjax._src.specs.config import BASELINES, ConfigError

if TYPE_CHECKING:
    from gymnax.environments.classic_control import acrobot

# Env parameters the pendulum controller is handed, appended to its observation in this order.
PENDULUM_INPUTS = ("m", "l", "g", "max_torque")
# Acrobot parameters the planner is handed: the sampled link and what a grid may vary.
ACROBOT_INPUTS = (
    "link_length_1",
    "link_mass_1",
    "link_mass_2",
    "link_com_pos_1",
    "link_com_pos_2",
    "link_moi",
)
# Params that change nothing a controller must know: every other env param a sampler or split
# draws must be among the controller's inputs, or its reference would be silently wrong.
UNUSED_PARAMS = {
    "Pendulum-v1": ("max_steps_in_episode",),
    "Acrobot-v1": ("max_steps_in_episode", "link_length_2"),  # gymnax never reads the second
}
# The planner's look-ahead: every sequence of PLAN_MOVES actions, each held for PLAN_HOLD steps.
# 3 x 3 (1.8 s) beat 1-4 moves held 1-5 steps on link lengths 0.1-1.9 (docs/meta.md).
PLAN_MOVES, PLAN_HOLD = 3, 3
# Envs without an analytic controller here, and the reference docs/meta.md uses for them.
REFERENCES = {
    "BernoulliBandit-misc": "the Bayes-optimal regret (Gittins index), examples/meta_bandit.py",
}


def default_pendulum_gains() -> dict[str, jax.Array]:
    """Controller gains: the pump's slope, the PD gains (rad/s^2 per rad and per rad/s) and
    the angle from the top inside which the PD takes over.

    Insensitive over a wide range (energy 0.5-10, PD 10/4-50/12, switch 0.6-1 rad gave the same
    train and extrapolate returns on pendulum-sign within 1-2 %); they are the "parameters" of
    a one-member population, so the rollout treats the controller like any other policy.
    """
    return {
        "energy": jnp.asarray(2.0),
        "kp": jnp.asarray(25.0),
        "kd": jnp.asarray(8.0),
        "catch_angle": jnp.asarray(0.6),
    }


def pendulum_torque(
    obs: jax.Array,
    m: jax.Array,
    l: jax.Array,
    g: jax.Array,
    max_torque: jax.Array,
    gains: dict[str, jax.Array] | None = None,
) -> jax.Array:
    """Torque for a pendulum observation ``(cos, sin, theta')``: energy pump, then PD on top."""
    gains = default_pendulum_gains() if gains is None else gains
    cos, sin, speed = obs[0], obs[1], obs[2]
    angle = jnp.arctan2(sin, cos)
    gravity = 1.5 * g / l
    gain = 3.0 / (m * l * l)  # signed: a negative m reverses every torque
    energy = 0.5 * speed * speed + gravity * (cos - 1.0)
    # The small bias towards the current direction starts a pendulum at rest at the bottom,
    # where the pure pump -E theta' would be zero forever.
    swing = speed + 0.05 * jnp.where(speed >= 0.0, 1.0, -1.0)
    pump = jnp.clip(-gains["energy"] * energy * swing * jnp.sign(gain), -1.0, 1.0) * max_torque
    hold = (-gains["kp"] * angle - gains["kd"] * speed - gravity * sin) / gain
    torque = jnp.where(cos > jnp.cos(gains["catch_angle"]), hold, pump)
    return jnp.clip(torque, -max_torque, max_torque)


def acrobot_energy(state: acrobot.EnvState, params: acrobot.EnvParams) -> jax.Array:
    """Kinetic plus potential energy of gymnax's acrobot (angles 0 hanging down).

    The mass matrix is the one gymnax's ``_dsdt`` integrates, with both links' moment of
    inertia ``link_moi``; gymnax's dynamics never read ``link_length_2``, so neither does this.
    """
    m1, m2, l1 = params.link_mass_1, params.link_mass_2, params.link_length_1
    lc1, lc2, inertia = params.link_com_pos_1, params.link_com_pos_2, params.link_moi
    theta1, theta2 = state.joint_angle1, state.joint_angle2
    speed1, speed2 = state.velocity_1, state.velocity_2
    coupling = m2 * l1 * lc2 * jnp.cos(theta2)
    d11 = m1 * lc1**2 + m2 * (l1**2 + lc2**2) + 2.0 * coupling + 2.0 * inertia
    d12 = m2 * lc2**2 + coupling + inertia
    d22 = m2 * lc2**2 + inertia
    kinetic = 0.5 * (d11 * speed1**2 + 2.0 * d12 * speed1 * speed2 + d22 * speed2**2)
    gravity = 9.8  # gymnax's _dsdt
    potential = -gravity * (
        (m1 * lc1 + m2 * l1) * jnp.cos(theta1) + m2 * lc2 * jnp.cos(theta1 + theta2)
    )
    return kinetic + potential


def acrobot_plans(moves: int = PLAN_MOVES, hold: int = PLAN_HOLD) -> jax.Array:
    """Every sequence of ``moves`` actions (0, 1, 2), each repeated ``hold`` steps."""
    plans = np.asarray(list(itertools.product(range(3), repeat=moves)), np.int32)
    return jnp.asarray(np.repeat(plans, hold, axis=1))


def _gymnax_acrobot():
    """gymnax's acrobot module, loaded on first use through :func:`import_gymnax` (which keeps
    gymnax's drawing-only imports out of every command's start-up)."""
    return import_gymnax().environments.classic_control.acrobot


def acrobot_action(obs: jax.Array, params: acrobot.EnvParams, plans: jax.Array) -> jax.Array:
    """The first action of the best plan from an acrobot observation, simulated with ``params``.

    The observation holds both angles (as cos, sin) and both speeds: the whole state. A plan
    that reaches the goal scores above every plan that does not, sooner above later. Torque
    noise, if ``params`` has any, is one fixed draw: the plans are compared on the same noise.
    """
    acrobot = _gymnax_acrobot()
    env = acrobot.Acrobot()
    start = acrobot.EnvState(
        joint_angle1=jnp.arctan2(obs[1], obs[0]),
        joint_angle2=jnp.arctan2(obs[3], obs[2]),
        velocity_1=obs[4],
        velocity_2=obs[5],
        time=jnp.int32(0),
    )
    horizon = plans.shape[1]

    def simulate(plan):
        def step(carry, action):
            state, reached_at, t = carry
            _, after, _, _, _ = env.step_env(jax.random.key(0), state, action, params)
            reached = env.is_terminated(after, params) & (reached_at > horizon)
            return (after, jnp.where(reached, t, reached_at), t + 1), None

        (end, reached_at, _), _ = jax.lax.scan(step, (start, horizon + 1, 0), plan)
        # Energies stay far below 1e6 (about 1.5 kJ at gymnax's speed limits), so a reached
        # goal outranks every plan that reaches none.
        return jnp.where(reached_at <= horizon, 1e6 - reached_at, acrobot_energy(end, params))

    return plans[jnp.argmax(jax.vmap(simulate)(plans)), 0]


def _acrobot_policy(head: ActionHead, env_params: Any) -> tuple[Policy, tuple[str, ...]]:
    """The planner as a policy: the rollout's fixed params, with the told ones put in."""
    obs_size, plans = 6, acrobot_plans()

    def apply(params, x, carry, key):
        told = dict(zip(ACROBOT_INPUTS, x[obs_size:], strict=True))
        return acrobot_action(x[:obs_size], env_params.replace(**told), plans), carry

    policy = Policy(
        init=lambda key: {"unused": jnp.zeros(())},  # a population needs one leaf to map over
        apply=apply,
        initial_carry=lambda: (),
        head=head,
        input_size=obs_size + len(ACROBOT_INPUTS),
    )
    return policy, ACROBOT_INPUTS


def analytic_policy(
    env_name: str, action_space: Any, env_params: Any
) -> tuple[Policy, tuple[str, ...]]:
    """The analytic controller as a :class:`Policy`, and the env parameters it must be fed.

    Its input is the raw observation followed by those parameters (a rollout's
    ``param_inputs``); its params are its gains (the pendulum's) or one unused leaf (the
    acrobot's planner); it carries nothing. The acrobot's planner simulates with
    ``env_params`` (the rollout's fixed ones) and the told ones.
    """
    head = ActionHead.from_space(action_space)
    if env_name == "Acrobot-v1":
        return _acrobot_policy(head, env_params)
    if env_name != "Pendulum-v1":
        raise ConfigError(f"no analytic controller for {env_name}: {_reference_hint(env_name)}")
    obs_size = 3

    def apply(gains, x, carry, key):
        m, l, g, max_torque = (x[obs_size + i] for i in range(len(PENDULUM_INPUTS)))
        torque = pendulum_torque(x[:obs_size], m, l, g, max_torque, gains)
        return torque.reshape(head.shape), carry

    policy = Policy(
        init=lambda key: default_pendulum_gains(),
        apply=apply,
        initial_carry=lambda: (),
        head=head,
        input_size=obs_size + len(PENDULUM_INPUTS),
    )
    return policy, PENDULUM_INPUTS


def random_policy(like: Policy) -> Policy:
    """Uniformly random actions, for any env: the floor a trained policy's margin is read from.

    It takes the same input as ``like`` (and ignores it), so it plays the same episodes; its
    actions come from the step's action key.
    """
    head = like.head

    def apply(params, x, carry, key):
        if head.discrete:
            return jax.random.randint(key, (), 0, head.size, jnp.int32), carry
        action = jax.random.uniform(key, (head.size,), minval=head.low, maxval=head.high)
        return action.reshape(head.shape), carry

    return Policy(
        init=lambda key: {"unused": jnp.zeros(())},  # a population needs one leaf to map over
        apply=apply,
        initial_carry=lambda: (),
        head=head,
        input_size=like.input_size,
        meta_inputs=like.meta_inputs,
    )


def _reference_hint(env_name: str) -> str:
    if env_name in REFERENCES:
        return f"its reference is {REFERENCES[env_name]}"
    return (
        "analytic baselines exist for Pendulum-v1 (pendulum, pendulum-meta, -cadm, -sign) "
        "and Acrobot-v1 (acrobot, acrobot-meta)"
    )


@functools.lru_cache(maxsize=8)
def baseline_rollout(rollout: Any, baseline: str) -> Any:
    """A rollout of the same env, parameters, sampler and episode length with a baseline policy.

    Episodes depend only on the keys (start state, sampled parameters), never on the policy,
    so the baseline faces exactly the episodes a trained policy faces with the same key.
    Cached per rollout object, so testing every seed of a run compiles once.
    """
    check_baseline(baseline)
    if baseline == "zero":
        return rollout
    if baseline == "random":
        return rollout.replace(policy=random_policy(rollout.policy))
    env_name = getattr(rollout.env, "name", type(rollout.env).__name__)
    space = rollout.env.action_space(rollout.env_params)
    policy, inputs = analytic_policy(env_name, space, rollout.env_params)
    _check_told_everything_drawn(env_name, rollout.env_params_sampler, inputs)
    return PopulationRollout(
        rollout.env,
        policy,
        rollout.episode_length,
        env_params=rollout.env_params,
        env_params_sampler=rollout.env_params_sampler,
        deterministic=True,
        devices=rollout.devices,
        param_inputs=inputs,
    )


def _check_told_everything_drawn(env_name: str, sampler: Any, inputs: tuple[str, ...]) -> None:
    """A controller must be told every param the episodes draw, or it controls another env."""
    drawn = [name for name, _ in sampler.distributions] if sampler is not None else []
    _check_told(env_name, drawn, inputs, "these episodes draw")


def _check_told(
    env_name: str, names: Sequence[str], inputs: Sequence[str], why: str, where: str = ""
) -> None:
    """The one check that every name in ``names`` (which the episodes ``why``) is told or unused."""
    hidden = sorted(set(names) - set(inputs) - set(UNUSED_PARAMS.get(env_name, ())))
    if hidden:
        raise ConfigError(
            f"{where}the analytic controller for {env_name} is not told {', '.join(hidden)}, "
            f"which {why}; it is told {', '.join(inputs)}"
        )


def check_baseline(baseline: str) -> None:
    if baseline not in BASELINES:
        raise ConfigError(f"unknown baseline {baseline!r}: choose from {', '.join(BASELINES)}")


def reference_returns(rollout: Any, key: jax.Array, episodes: int, baseline: str) -> np.ndarray:
    """Per-episode returns of a baseline on the episodes ``rollout.population(key, ...)`` runs.

    ``zero`` is the rollout's own policy with every weight zero (a zero action: the
    normalised score's floor); ``random`` uniformly random actions; ``analytic`` the
    controller above, fed the sampled parameters.
    """
    reference = baseline_rollout(rollout, baseline)
    population = reference_population(reference, baseline)
    return np.asarray(reference.population(key, population, episodes).returns[0])


def reference_population(reference: Any, baseline: str) -> Any:
    """A baseline's parameters as a one-member population for ``reference.population``.

    The analytic controller's gains, the random policy's unused leaf, or for ``zero`` the
    rollout's own policy with every weight zero.
    """
    params = reference.init_params(jax.random.key(0))
    if baseline == "zero":
        params = jax.tree.map(jnp.zeros_like, params)
    return jax.tree.map(lambda x: x[None], params)


def check_told_pinned(reference: Any, baseline: str, names: Sequence[str], where: str) -> None:
    """An analytic controller must be told every parameter a grid pins, as every one drawn.

    ``reference`` is ``baseline``'s :func:`baseline_rollout`. The zero and random baselines
    control nothing (the zero one is the run's own policy, whatever it is told), so only the
    analytic one is checked.
    """
    if baseline != "analytic":
        return
    env_name = getattr(reference.env, "name", type(reference.env).__name__)
    _check_told(env_name, names, reference.param_inputs, "the grid varies", f"{where}: ")
