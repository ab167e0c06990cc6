"""The one episode step: what the policy sees, how it acts, and how keys are laid out.

:class:`~esjax._src.rollout.population_rollout.PopulationRollout` (training, evaluation, tests), a
saved policy's :class:`Controller` (``esjax.load_policy``, ``esjax render``) and anything else that
plays an episode step through the same functions here, so a policy is shown and tested as it was
trained:

- the policy input is the normalised observation, the stacked frames before it and the
  *episode's own* env parameters named in ``param_inputs``;
- the meta-RL inputs are the previous action, the reward it earned and whether it ended an
  episode;
- an episode key splits into ``(variant, reset, steps)`` (:func:`episode_keys`), the step
  keys are ``split(steps, episode_length)`` and each step key splits into
  ``(action, env)`` (:func:`split_step_key`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from esjax._src.policies.networks import Policy

PyTree = Any


@struct.dataclass
class PolicyState:
    """What the policy side of an episode carries from one step to the next."""

    carry: PyTree  # the recurrent state (an empty tuple for a feed-forward policy)
    prev_action: jax.Array
    prev_reward: jax.Array
    prev_done: jax.Array
    frames: jax.Array  # the normalised observations before this one, oldest first


def episode_keys(key: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(variant, reset, steps)`` keys of one episode."""
    k_variant, k_reset, k_steps = jax.random.split(key, 3)
    return k_variant, k_reset, k_steps


def step_keys(k_steps: jax.Array, episode_length: int) -> jax.Array:
    """The key of every step of an episode, from the third key of :func:`episode_keys`."""
    return jax.random.split(k_steps, episode_length)


def split_step_key(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(action, env)`` keys of one step."""
    k_act, k_env = jax.random.split(key)
    return k_act, k_env


@dataclass(frozen=True)
class EpisodeStep:
    """A built policy bound to an env's observation size and the inputs it is given."""

    policy: Policy
    obs_size: int
    frame_stack: int = 1
    param_inputs: tuple[str, ...] = ()

    def start(self) -> PolicyState:
        """The policy state before an episode's first step."""
        zero = jnp.zeros((), jnp.float32)
        stack = jnp.zeros((self.obs_size * (self.frame_stack - 1),), jnp.float32)
        return PolicyState(self.policy.initial_carry(), self.policy.head.zero_action(), zero,
                           zero, stack)  # fmt: skip

    def known_params(self, env_params: Any) -> jax.Array:
        """The episode's env parameters the policy is told (an oracle's extra inputs)."""
        values = [getattr(env_params, name) for name in self.param_inputs]
        return jnp.asarray(values, jnp.float32).reshape(-1)

    def act(
        self,
        params: PyTree,
        obs_stats: Any,
        state: PolicyState,
        obs: jax.Array,
        known: jax.Array,
        key: jax.Array,
    ) -> tuple[jax.Array, PolicyState]:
        """The action for ``obs`` and the state with the new recurrent carry and frames.

        ``prev_*`` are left as they were: :meth:`observe` records the step's outcome.
        """
        normed = (obs - obs_stats.mean) / obs_stats.std
        # Oldest frame first; the newest (this step's) observation is always last.
        features = jnp.concatenate([state.frames, normed, known])
        frames = jnp.concatenate([state.frames, normed])[self.obs_size :]
        x = self.policy.policy_input(features, state.prev_action, state.prev_reward,
                                     state.prev_done)  # fmt: skip
        action, carry = self.policy.apply(params, x, state.carry, key)
        return action, dataclasses.replace(state, carry=carry, frames=frames)

    def observe(
        self, state: PolicyState, action: jax.Array, reward: jax.Array, done: jax.Array
    ) -> PolicyState:
        """Record what the last action earned, for the meta-RL inputs of the next step."""
        return dataclasses.replace(state, prev_action=action, prev_reward=reward, prev_done=done)
