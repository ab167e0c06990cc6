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

Where no analytic controller is shipped, :data:`REFERENCES` names the reference used instead.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from esjax.config import ConfigError
from esjax.policies import ActionHead, Policy
from esjax.rollout import PopulationRollout

BASELINES = ("analytic", "random", "zero")
# Env parameters the pendulum controller is handed, appended to its observation in this order.
PENDULUM_INPUTS = ("m", "l", "g", "max_torque")
# Envs without an analytic controller here, and the reference docs/meta.md uses for them.
REFERENCES = {
    "Acrobot-v1": "the trained oracle MLP (an energy-based acrobot swing-up is not shipped)",
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


def analytic_policy(env_name: str, action_space: Any) -> tuple[Policy, tuple[str, ...]]:
    """The analytic controller as a :class:`Policy`, and the env parameters it must be fed.

    Its input is the raw observation followed by those parameters (a rollout's
    ``param_inputs``); its params are its gains; it carries nothing.
    """
    if env_name != "Pendulum-v1":
        raise ConfigError(f"no analytic controller for {env_name}: {_reference_hint(env_name)}")
    head = ActionHead.from_space(action_space)
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
    return "analytic baselines exist for Pendulum-v1 (pendulum, pendulum-meta, -cadm, -sign)"


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
    policy, inputs = analytic_policy(env_name, rollout.env.action_space(rollout.env_params))
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
    params = reference.init_params(jax.random.key(0))
    if baseline == "zero":
        params = jax.tree.map(jnp.zeros_like, params)
    population = jax.tree.map(lambda x: x[None], params)
    return np.asarray(reference.population(key, population, episodes).returns[0])
