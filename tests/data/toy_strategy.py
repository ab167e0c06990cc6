"""A strategy added from outside esjax, for tests/test_strategy_door.py: the recipe's toy.

``KeyedES`` is antithetic Gaussian ES whose pair ``p``'s noise is drawn from ``fold_in(key,
p)``, so the population never exists as a matrix: esjax's shared :class:`PairedForm` steps it
from :class:`GaussianNoise`. A test registers it with one line.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import optax
from evosax.algorithms.distribution_based.base import DistributionBasedAlgorithm
from evosax.algorithms.distribution_based.open_es import Params, State

from esjax._src.strategies.population import PairedForm, blocked_sum, descend, pair_and_sign


class GaussianNoise:
    """A pair's noise: a standard normal array per leaf, keyed by the pair and the leaf."""

    def __init__(self, shapes):
        self.shapes = tuple(shapes)
        self.pair_floats = sum(math.prod(shape) for shape in self.shapes)

    def noise(self, key, pair):
        key = jax.random.fold_in(key, pair)
        return [jax.random.normal(jax.random.fold_in(key, i), s) for i, s in enumerate(self.shapes)]

    def member(self, leaves, noise, std, sign):
        return [leaf + sign * std * z for leaf, z in zip(leaves, noise, strict=True)]

    def delta(self, noise):
        return jnp.concatenate([z.reshape(-1) for z in noise])

    def weighted_sum(self, key, weights):
        block = max(1, min(weights.shape[0], (1 << 20) // max(1, self.pair_floats)))
        leaf_sum = lambda w, z, shape: jnp.tensordot(w, z, axes=1)  # noqa: E731
        return blocked_sum(lambda p: self.noise(key, p), weights, block, self.shapes, leaf_sum)

    def member_bytes(self):
        return 4 * self.pair_floats


SGD, STD = optax.sgd(0.05), optax.constant_schedule(0.1)  # defaults outside esjax


class KeyedES(DistributionBasedAlgorithm):
    """Antithetic OpenES in evosax's API; its ``ask`` materialises the population (the
    reference), its ``form`` is how esjax steps it without the matrix."""

    form = PairedForm("keyed Gaussian ES", lambda strategy, layout: GaussianNoise(layout.shapes))

    def __init__(self, population_size, solution, optimizer=SGD, std_schedule=STD, **kwargs):
        super().__init__(population_size, solution, **kwargs)
        self.optimizer, self.std_schedule = optimizer, std_schedule
        self.pairs, self.use_antithetic_sampling = population_size // 2, True
        self.noise = GaussianNoise([(self.num_dims,)])

    @property
    def _default_params(self):
        return Params()

    def _init(self, key, params):
        nan = jnp.full((self.num_dims,), jnp.nan)
        return State(mean=nan, std=self.std_schedule(0), best_solution=nan, best_fitness=jnp.inf,
                     opt_state=self.optimizer.init(nan), generation_counter=0)  # fmt: skip

    def _ask(self, key, state, params):
        pair, sign = pair_and_sign(jnp.arange(self.population_size), self.pairs)
        z = jax.vmap(lambda p: self.noise.delta(self.noise.noise(key, p)))(pair)
        return state.mean + state.std * sign[:, None] * z, state

    def _tell(self, key, population, fitness, state, params):
        z = (population - state.mean) / state.std
        return descend(self, fitness @ z / (self.population_size * state.std), state)
