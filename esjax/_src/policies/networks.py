"""Policies: feed-forward and recurrent controllers with an action head fitted to the env.

A policy spec (``MLP``, the recurrent ``LSTM`` and ``GRU``, the image policy ``CNN``, or a user's
network in any JAX framework, ``CodePolicy``: :mod:`esjax._src.policies.user`) knows only sizes;
:data:`SPECS` builds each kind of :mod:`esjax._src.specs.policy_kinds` from a task.
``spec.build(obs_size, action_space)`` binds it to an environment and returns a :class:`Policy`,
a bundle of pure functions:

* ``init(key) -> params``
* ``initial_carry() -> carry`` (an empty tuple for feed-forward policies)
* ``apply(params, obs, carry, key) -> (action, carry)``

so the rollout has one code path for both kinds.

``apply`` also takes a low-rank member (weight leaves as
:class:`~esjax._src.policies.perturb.LowRank`): every network, esjax's and a user's alike, passes
through :func:`esjax._src.policies.perturb.splitting`, which applies a member's weights where the
network multiplies by them. Plain params take the network's own path, unchanged.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

import flax.linen as nn
import jax
import jax.numpy as jnp

from esjax._src.envs import core as envs
from esjax._src.policies import mirror, perturb, user
from esjax._src.specs import live, policy_kinds
from esjax._src.specs.config import ConfigError, PolicyConfig

META_INPUTS = ("action", "reward", "done")
ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "tanh": jnp.tanh,
    "relu": jax.nn.relu,
    "gelu": jax.nn.gelu,
    "elu": jax.nn.elu,
}

PyTree = Any
# (params, carry, x) -> (carry, outputs): a network before its action head.
StepFn = Callable[[PyTree, PyTree, jax.Array], tuple[PyTree, Any]]


def is_discrete(space: Any) -> bool:
    """Duck-typed on gymnax's Discrete (``n``) and Box (``low``/``high``/``shape``), so spaces
    of gymnax-style envs from other packages work too."""
    return hasattr(space, "n") and not hasattr(space, "low")


class PolicyError(ConfigError):
    """A policy that does not fit its env (the observation's shape, the action space, a size):
    the task's fault, so the command line says it in one line."""


@dataclass(frozen=True)
class ActionHead:
    """How network outputs become env actions.

    Continuous (Box) actions are ``tanh`` squashed into the bounds, or with ``raw`` the
    outputs as they are: the env applies its own bounds, as ARS's linear policies leave it to
    (Brax and MuJoCo clamp the control and charge their control cost on the action given, so
    an action far outside the bounds costs more rather than saturating for free). Discrete
    actions are logits, argmax when deterministic and sampled otherwise.
    """

    discrete: bool
    size: int  # logits for discrete, action dimension for continuous
    shape: tuple[int, ...] = ()
    low: Any = None
    high: Any = None
    raw: bool = False

    @classmethod
    def from_space(cls, space: Any, raw: bool = False) -> ActionHead:
        if is_discrete(space):
            if raw:
                raise PolicyError("raw actions are for continuous (Box) action spaces")
            return cls(discrete=True, size=int(space.n))
        if all(hasattr(space, name) for name in ("low", "high", "shape")):
            shape = tuple(space.shape)
            size = 1
            for dim in shape:
                size *= int(dim)
            low = jnp.broadcast_to(jnp.asarray(space.low, jnp.float32), shape).reshape(-1)
            high = jnp.broadcast_to(jnp.asarray(space.high, jnp.float32), shape).reshape(-1)
            return cls(discrete=False, size=size, shape=shape, low=low, high=high, raw=raw)
        raise PolicyError(f"unsupported action space {type(space).__name__}: need Discrete or Box")

    def __call__(self, outputs: jax.Array, key: jax.Array, deterministic: bool) -> jax.Array:
        if self.discrete:
            if deterministic:
                return jnp.argmax(outputs, axis=-1).astype(jnp.int32)
            return jax.random.categorical(key, outputs).astype(jnp.int32)
        if self.raw:
            return outputs.reshape(self.shape)
        squashed = (jnp.tanh(outputs) + 1.0) * 0.5
        return (self.low + squashed * (self.high - self.low)).reshape(self.shape)

    def encode(self, action: jax.Array) -> jax.Array:
        """Previous-action feature for meta-RL inputs: one-hot or the raw continuous value."""
        if self.discrete:
            return jax.nn.one_hot(action, self.size)
        return jnp.asarray(action, jnp.float32).reshape(-1)

    def zero_action(self) -> jax.Array:
        """The "previous action" before the first step: -1 one-hot encodes to all zeros, so
        it cannot be mistaken for having taken action 0."""
        if self.discrete:
            return jnp.full((), -1, jnp.int32)
        return jnp.zeros(self.shape, jnp.float32)

    @property
    def feature_size(self) -> int:
        return self.size


@dataclass(frozen=True)
class Policy:
    """A policy bound to an env: pure functions over explicit params, carry and key."""

    init: Callable[[jax.Array], PyTree]
    apply: Callable[[PyTree, jax.Array, PyTree, jax.Array], tuple[jax.Array, PyTree]]
    initial_carry: Callable[[], PyTree]
    head: ActionHead
    input_size: int
    meta_inputs: tuple[str, ...] = ()
    recurrent: bool = False

    def policy_input(
        self,
        obs: jax.Array,
        prev_action: jax.Array,
        prev_reward: jax.Array,
        prev_done: jax.Array,
    ) -> jax.Array:
        """The network input: the flat observation, then the meta-RL features asked for."""
        parts = [jnp.asarray(obs, jnp.float32).reshape(-1)]
        for name in self.meta_inputs:
            if name == "action":
                parts.append(self.head.encode(prev_action))
            elif name == "reward":
                parts.append(jnp.asarray(prev_reward, jnp.float32).reshape(1))
            else:
                parts.append(jnp.asarray(prev_done, jnp.float32).reshape(1))
        return jnp.concatenate(parts) if len(parts) > 1 else parts[0]

    def num_params(self, params: PyTree) -> int:
        return int(sum(leaf.size for leaf in jax.tree.leaves(params)))

    def plan(self) -> perturb.Plan:
        """Where each parameter leaf is multiplied, read off the network from shapes alone:
        how a low-rank strategy perturbs it (:func:`esjax._src.policies.perturb.plan`)."""
        params = jax.eval_shape(self.init, jax.random.key(0))
        x = jax.ShapeDtypeStruct((self.input_size,), jnp.float32)
        carry = jax.eval_shape(self.initial_carry)
        return perturb.plan(self.apply, params, x, carry, jax.random.key(0))


def _meta_feature_size(meta_inputs: Sequence[str], head: ActionHead) -> int:
    sizes = {"action": head.feature_size, "reward": 1, "done": 1}
    return sum(sizes[name] for name in meta_inputs)


def _check_meta_inputs(meta_inputs: Sequence[str]) -> tuple[str, ...]:
    unknown = [name for name in meta_inputs if name not in META_INPUTS]
    if unknown:
        choices = ", ".join(META_INPUTS)
        raise PolicyError(f"unknown meta input {unknown[0]!r}: choose from {choices}")
    return tuple(meta_inputs)


class _MLPNet(nn.Module):
    hidden: Sequence[int]
    outputs: int
    activation: str

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        for width in self.hidden:
            x = act(nn.Dense(width)(x))
        return nn.Dense(self.outputs)(x)


class _RecurrentNet(nn.Module):
    """A flax recurrent cell class of ``hidden`` units, then a linear head; the parameter
    names are the cell's (``OptimizedLSTMCell_0`` or ``GRUCell_0``) and ``Dense_0``."""

    cell: type[nn.Module]
    hidden: int
    outputs: int

    @nn.compact
    def __call__(self, carry: PyTree, x: jax.Array) -> tuple[PyTree, jax.Array]:
        carry, h = self.cell(self.hidden)(carry, x)
        return carry, nn.Dense(self.outputs)(h)


@dataclass(frozen=True)
class Network:
    """What a spec adds to the shared opening of :meth:`_Spec.build`: its network as
    ``init(key) -> params``, ``step(params, carry, x) -> (carry, outputs)`` and its carry.

    Nothing here knows about low-rank members: :meth:`_Spec.build` passes every network
    through :func:`esjax._src.policies.perturb.splitting`.
    """

    init: Callable[[jax.Array], PyTree]
    step: StepFn
    initial_carry: Callable[[], PyTree] = tuple
    recurrent: bool = False

    @classmethod
    def feed_forward(cls, net: nn.Module, input_size: int) -> Network:
        return cls(
            lambda key: net.init(key, jnp.zeros((input_size,), jnp.float32)),
            lambda params, carry, x: (carry, net.apply(params, x)),
        )


class _Spec:
    """What every spec shares: :meth:`build` opens with the meta inputs, the action head and the
    input size, asks the spec for its :class:`Network`, mirrors it if asked and closes with the
    action head. A spec has ``meta_inputs`` and ``raw_actions`` (and may have ``mirror``)."""

    meta_inputs: tuple[str, ...]
    raw_actions: bool

    def _network(self, input_size: int, outputs: int, layout: dict[str, Any]) -> Network:
        raise NotImplementedError

    def build(
        self, obs_size: int, action_space: Any, deterministic: bool = True, **layout: Any
    ) -> Policy:
        """The policy bound to an env: ``obs_size`` features (stacked observations and
        env-parameter inputs); ``layout`` holds the rollout's ``obs_shape`` and
        ``frame_stack``."""
        meta = _check_meta_inputs(self.meta_inputs)
        head = ActionHead.from_space(action_space, raw=self.raw_actions)
        input_size = obs_size + _meta_feature_size(meta, head)
        net = self._network(input_size, head.size, layout)
        mirrored, initial_carry = _mirrored(
            net.step, net.initial_carry, self, obs_size, head, meta, layout
        )
        # The one place a network meets low-rank members, whoever wrote it.
        step = perturb.splitting(mirrored)

        def apply(params, x, carry, key):
            carry, outputs = step(params, carry, x)
            return head(outputs, key, deterministic), carry

        return Policy(net.init, apply, initial_carry, head, input_size, meta, net.recurrent)


def _check_positive(**sizes: int | Sequence[int]) -> None:
    problem = policy_kinds.positive_problem(**sizes)
    if problem:
        raise PolicyError(f"{problem[0]}: {problem[1]}")


def _check_activation(activation: str) -> None:
    if activation not in ACTIVATIONS:
        raise PolicyError(
            f"unknown activation {activation!r}: choose from {', '.join(ACTIVATIONS)}"
        )


def _inputs(config: PolicyConfig) -> dict[str, Any]:
    """What every kind's spec takes from the shared keys of a task's ``[policy]`` table."""
    return {
        "meta_inputs": config.meta_inputs,
        "mirror": config.mirror,
        "mirror_actions": config.mirror_actions,
        "raw_actions": config.actions == "raw",
    }


@dataclass(frozen=True)
class MLP(_Spec):
    """Feed-forward policy: ``hidden`` layers of ``activation``; carries nothing.

    No hidden layer (``hidden=()``) is a linear policy: enough where the action follows from
    comparing one-hot positions (Breakout's ball and paddle columns), at a tenth of the weights.
    """

    hidden: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    meta_inputs: tuple[str, ...] = ()
    mirror: tuple[float, ...] = ()
    mirror_actions: tuple[int, ...] = ()
    raw_actions: bool = False  # continuous actions unsquashed (see ActionHead)

    @classmethod
    def from_config(cls, config: PolicyConfig) -> MLP:
        return cls(hidden=config.hidden, activation=config.activation, **_inputs(config))

    def _network(self, input_size: int, outputs: int, layout: dict[str, Any]) -> Network:
        _check_activation(self.activation)
        _check_positive(hidden=self.hidden)
        net = _MLPNet(tuple(int(w) for w in self.hidden), outputs, self.activation)
        return Network.feed_forward(net, input_size)


@dataclass(frozen=True)
class _Recurrent(_Spec):
    """One recurrent cell of ``hidden`` units, then a linear action head.

    ``meta_inputs`` appends the previous action, previous reward and/or done flag to the
    observation, which is what a controller needs to identify the task it is given.
    """

    hidden: int = 32
    meta_inputs: tuple[str, ...] = ()
    mirror: tuple[float, ...] = ()
    mirror_actions: tuple[int, ...] = ()
    raw_actions: bool = False  # continuous actions unsquashed (see ActionHead)

    @classmethod
    def from_config(cls, config: PolicyConfig) -> Self:
        return cls(hidden=config.hidden[0], **_inputs(config))

    def _net(self, outputs: int) -> nn.Module:
        raise NotImplementedError

    def _initial_carry(self) -> PyTree:
        raise NotImplementedError

    def _network(self, input_size: int, outputs: int, layout: dict[str, Any]) -> Network:
        _check_positive(hidden=int(self.hidden))
        net = self._net(outputs)

        def init(key: jax.Array) -> PyTree:
            return net.init(key, self._initial_carry(), jnp.zeros((input_size,), jnp.float32))

        return Network(init, net.apply, self._initial_carry, recurrent=True)


def _mirrored(
    network: Callable,
    initial_carry: Callable[[], PyTree],
    spec: _Spec,
    features: int,
    head: ActionHead,
    meta: tuple[str, ...],
    layout: dict[str, Any],
) -> tuple[Callable, Callable[[], PyTree]]:
    """``network`` and its initial carry, made mirror-symmetric when ``spec.mirror`` is set.

    ``features`` counts the stacked observations and env-parameter inputs; ``layout`` holds
    the rollout's ``obs_shape`` and ``frame_stack``, which say how they split. A spec without
    ``mirror`` (a cnn) is never mirrored.
    """
    signs, actions = getattr(spec, "mirror", ()), getattr(spec, "mirror_actions", ())
    if not signs and not actions:
        return network, initial_carry
    frame_stack = int(layout.get("frame_stack", 1))
    obs_shape = layout.get("obs_shape")
    obs_size = math.prod(obs_shape) if obs_shape is not None else features // frame_stack
    problem = mirror.check_mirror(signs, actions, obs_size, head)
    if problem:
        raise PolicyError(problem)
    reflection = mirror.reflection(
        signs,
        actions,
        frame_stack=frame_stack,
        param_inputs=features - obs_size * frame_stack,
        head=head,
        meta_inputs=meta,
    )
    return mirror.symmetrize(network, reflection), mirror.paired_carry(initial_carry)


@dataclass(frozen=True)
class LSTM(_Recurrent):
    """Recurrent policy: an LSTM cell of ``hidden`` units (state: cell and hidden vectors)."""

    def _net(self, outputs: int) -> nn.Module:
        return _RecurrentNet(nn.OptimizedLSTMCell, int(self.hidden), outputs)

    def _initial_carry(self) -> PyTree:
        zeros = jnp.zeros((int(self.hidden),), jnp.float32)
        return (zeros, zeros)


@dataclass(frozen=True)
class GRU(_Recurrent):
    """Recurrent policy: a GRU cell of ``hidden`` units. One state vector (an LSTM has two)
    and three gate blocks (an LSTM has four): about three quarters of an LSTM's weights.
    """

    def _net(self, outputs: int) -> nn.Module:
        return _RecurrentNet(nn.GRUCell, int(self.hidden), outputs)

    def _initial_carry(self) -> PyTree:
        return jnp.zeros((int(self.hidden),), jnp.float32)


def centred_view(image: jax.Array, channel: int, radius: int) -> jax.Array:
    """The ``(2 radius + 1)``-square window of ``image`` centred on the cell lit in ``channel``.

    Cells beyond the grid read as zeros (with normalised observations, as the average cell).
    Centred on the agent, "an enemy just left of me" is one input wherever the agent stands,
    so a reaction that an absolute image makes a conjunction of positions is a single weight
    (a linear policy can dodge). Where several cells are lit, the first in row-major order is
    the centre; where none is (no agent drawn), the top-left cell is.
    """
    width = image.shape[1]
    lit = jnp.argmax(image[:, :, channel].reshape(-1))
    row, col = lit // width, lit % width
    padded = jnp.pad(image, ((radius, radius), (radius, radius), (0, 0)))
    size = (2 * radius + 1, 2 * radius + 1, image.shape[2])
    return jax.lax.dynamic_slice(padded, (row, col, jnp.zeros_like(row)), size)


class _ConvTorso(nn.Module):
    """Image features: the flat input's leading pixels back to ``(H, W, frames * C)``, the view
    centred on the agent (if asked), convs, then the remaining (non-image) inputs joined to the
    flattened feature map."""

    image_shape: tuple[int, int, int]
    frames: int
    channels: Sequence[int]
    kernel: int
    stride: int
    hidden: Sequence[int]
    activation: str
    ego_channel: int | None = None
    ego_radius: int = 0

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        image = self.image(x)
        for features in self.channels:
            window, step = (self.kernel, self.kernel), (self.stride, self.stride)
            image = act(nn.Conv(features, window, step, "VALID")(image))
        x = jnp.concatenate([image.reshape(-1), self.rest(x)])
        for width_ in self.hidden:
            x = act(nn.Dense(width_)(x))
        return x

    @nn.nowrap
    def image(self, x: jax.Array) -> jax.Array:
        """The flat input's leading pixels as the ``(H, W, frames * C)`` image the convs see,
        centred on the agent if asked."""
        height, width, depth = self.image_shape
        pixels = self.frames * height * width * depth
        # Stacked frames arrive oldest first; they become extra channels of one image.
        image = x[:pixels].reshape(self.frames, height, width, depth)
        image = jnp.moveaxis(image, 0, 2).reshape(height, width, self.frames * depth)
        if self.ego_channel is not None:  # the newest frame's agent
            image = centred_view(
                image, (self.frames - 1) * depth + self.ego_channel, self.ego_radius
            )
        return image

    @nn.nowrap
    def rest(self, x: jax.Array) -> jax.Array:
        """The inputs after the image (meta inputs, env parameters)."""
        return x[self.frames * math.prod(self.image_shape) :]


class _CNNNet(nn.Module):
    torso: _ConvTorso
    outputs: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.Dense(self.outputs)(self.torso(x))


class _CNNLSTMNet(nn.Module):
    torso: _ConvTorso
    cell: int
    outputs: int

    @nn.compact
    def __call__(self, carry: PyTree, x: jax.Array) -> tuple[PyTree, jax.Array]:
        carry, h = nn.OptimizedLSTMCell(self.cell)(carry, self.torso(x))
        return carry, nn.Dense(self.outputs)(h)


@dataclass(frozen=True)
class CNN(_Spec):
    """Image policy (MinAtar's ``10 x 10 x C`` grids): ``channels`` conv layers of
    ``kernel x kernel`` (valid padding, ``stride``), then ``hidden`` dense layers.

    ``lstm > 0`` puts an LSTM cell of that size between the features and the action head, for
    image tasks that need memory. Stacked frames become extra input channels; inputs beyond
    the image (meta inputs, env parameters) join the flattened feature map.

    ``ego_channel``: the image is first cut to the window of ``ego_radius`` cells around the
    cell lit in that channel (the agent's), see :func:`centred_view`. ``ego_radius`` None: the
    whole grid stays in view from every cell (a square window of side ``2 max(H, W) - 1``).
    """

    channels: tuple[int, ...] = (16,)
    kernel: int = 3
    stride: int = 1
    hidden: tuple[int, ...] = (32,)
    activation: str = "relu"
    lstm: int = 0
    meta_inputs: tuple[str, ...] = ()
    raw_actions: bool = False  # continuous actions unsquashed (see ActionHead)
    ego_channel: int | None = None
    ego_radius: int | None = None

    @classmethod
    def from_config(cls, config: PolicyConfig) -> CNN:
        inputs = _inputs(config)
        return cls(
            channels=config.channels,
            kernel=config.kernel,
            stride=config.stride,
            hidden=config.hidden,
            activation=config.activation,
            lstm=config.lstm,
            meta_inputs=inputs["meta_inputs"],
            raw_actions=inputs["raw_actions"],
            ego_channel=config.ego_channel,
            ego_radius=config.ego_radius,
        )

    def _network(self, input_size: int, outputs: int, layout: dict[str, Any]) -> Network:
        """``layout``'s ``obs_shape`` is one observation's shape (``(H, W)`` or ``(H, W, C)``)."""
        obs_shape = layout.get("obs_shape")
        if obs_shape is None or len(obs_shape) not in (2, 3):
            raise PolicyError(
                f"a cnn policy needs image observations (H, W) or (H, W, C), got shape "
                f"{tuple(obs_shape) if obs_shape is not None else 'unknown'}; use an mlp"
            )
        height, width, *channels = (int(d) for d in obs_shape)
        image_shape = (height, width, channels[0] if channels else 1)
        self._check(image_shape)
        torso = _ConvTorso(
            image_shape,
            int(layout.get("frame_stack", 1)),
            tuple(int(c) for c in self.channels),
            int(self.kernel),
            int(self.stride),
            tuple(int(w) for w in self.hidden),
            self.activation,
            self.ego_channel,
            self._radius(image_shape),
        )
        if int(self.lstm) <= 0:
            net = _CNNNet(torso, outputs)
            return Network.feed_forward(net, input_size)
        cell = int(self.lstm)
        recurrent_net = _CNNLSTMNet(torso, cell, outputs)

        def initial_carry() -> PyTree:
            zeros = jnp.zeros((cell,), jnp.float32)
            return (zeros, zeros)

        def init(key: jax.Array) -> PyTree:
            zeros_x = jnp.zeros((input_size,), jnp.float32)
            return recurrent_net.init(key, initial_carry(), zeros_x)

        return Network(init, recurrent_net.apply, initial_carry, recurrent=True)

    def _radius(self, image_shape: tuple[int, int, int]) -> int:
        """The window's radius; by default far enough that no cell leaves the view."""
        if self.ego_radius is None:
            return max(image_shape[:2]) - 1
        return int(self.ego_radius)

    def _check(self, image_shape: tuple[int, int, int]) -> None:
        if self.ego_radius is not None and (self.ego_channel is None or self.ego_radius < 1):
            raise PolicyError(
                f"ego_radius {self.ego_radius} needs an ego_channel to centre on and must be >= 1"
            )
        if self.ego_channel is not None and not 0 <= self.ego_channel < image_shape[2]:
            raise PolicyError(
                f"ego_channel {self.ego_channel} is not a channel of a {image_shape[2]}-channel "
                "image"
            )
        _check_activation(self.activation)
        _check_positive(channels=self.channels, hidden=self.hidden, kernel=int(self.kernel),
                        stride=int(self.stride))  # fmt: skip
        side = min(image_shape[:2])
        seen = f"a {image_shape[0]} x {image_shape[1]} image"
        if self.ego_channel is not None:
            side = 2 * self._radius(image_shape) + 1
            seen = f"the {side} x {side} centred view"
        for _ in self.channels:
            side = (side - int(self.kernel)) // int(self.stride) + 1
        if side <= 0:
            raise PolicyError(
                f"{len(self.channels)} conv layer(s) of kernel {self.kernel}, stride {self.stride} "
                f"do not fit {seen}"
            )


@dataclass(frozen=True)
class CodePolicy(_Spec):
    """A user's network as a policy, in any JAX framework (:mod:`esjax._src.policies.user` says what
    its factory may return): ``factory`` names it as ``"package.module:factory"`` or
    ``"path/to/file.py:factory"`` (loaded as :mod:`esjax._src.envs.core` loads a user's env), and
    ``arguments`` are the task's other ``[policy]`` keys."""

    factory: str
    arguments: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    meta_inputs: tuple[str, ...] = ()
    mirror: tuple[float, ...] = ()
    mirror_actions: tuple[int, ...] = ()
    raw_actions: bool = False

    @classmethod
    def from_config(cls, config: PolicyConfig) -> CodePolicy:
        extras = getattr(config.settings, "extras", {})  # a code kind's settings are its extras
        return cls(config.kind, dict(extras), **_inputs(config))

    def _network(self, input_size: int, outputs: int, layout: dict[str, Any]) -> Network:
        """The factory's network, checked on one input (its source keys the programs kept
        across processes: see :func:`esjax._src.run.training.program_key`)."""
        source, _, attribute = self.factory.rpartition(":")
        factory = envs.load_factory(source, attribute, self.factory)
        arguments = {"input_size": input_size, "output_size": outputs, **self.arguments}
        made = user.make(factory, self.factory, arguments, input_size)
        user.check(made, self.factory, input_size, outputs)
        return Network(made.init, made.step, made.initial_carry, made.recurrent)


@dataclass(frozen=True, eq=False)
class UserNetwork(_Spec):
    """A network object handed over from Python, trained as it is (:func:`user.adapt` says
    what it may be); ``name`` is how lines about it name it. It never names code: a run made
    with one records it by its live name (:mod:`esjax._src.specs.live`)."""

    network: Any
    name: str
    meta_inputs: tuple[str, ...] = ()
    mirror: tuple[float, ...] = ()
    mirror_actions: tuple[int, ...] = ()
    raw_actions: bool = False

    @classmethod
    def from_config(cls, config: PolicyConfig) -> UserNetwork:
        network = live.lookup(config.kind)
        if network is None:
            raise ConfigError(live.missing(config.kind, "network"))
        return cls(network, live.label(config.kind), **_inputs(config))

    def _network(self, input_size: int, outputs: int, layout: dict[str, Any]) -> Network:
        made = user.adapt(self.network, self.name, input_size)
        user.check(made, self.name, input_size, outputs)
        return Network(made.init, made.step, made.initial_carry, made.recurrent)


PolicySpec = MLP | LSTM | GRU | CNN | CodePolicy | UserNetwork

# The spec that builds each kind of :data:`esjax._src.specs.policy_kinds.KINDS`, by the same
# name; a kind named as code is a :class:`CodePolicy`, a live one a :class:`UserNetwork`.
SPECS: dict[str, type[MLP | LSTM | GRU | CNN]] = {"mlp": MLP, "lstm": LSTM, "gru": GRU, "cnn": CNN}


def spec_for(config: PolicyConfig) -> PolicySpec:
    """The spec a task's ``[policy]`` table describes."""
    if live.is_live(config.kind):
        return UserNetwork.from_config(config)
    if policy_kinds.names_code(config.kind):
        return CodePolicy.from_config(config)
    return SPECS[config.kind].from_config(config)


def as_spec(network: Any, name: str | None = None) -> PolicySpec:
    """Any network a user hands over as a spec: a spec as it is, an object as a
    :class:`UserNetwork` (checked for being a network at all, in one line, here)."""
    if isinstance(network, (MLP, LSTM, GRU, CNN, CodePolicy, UserNetwork)):
        return network
    name = name or live.describe(network)
    user.adapt(network, name, 1)  # its kind only: sizes are checked when it is built
    return UserNetwork(network, name)


def policy_config(spec: PolicySpec, name: str | None = None) -> PolicyConfig:
    """The ``[policy]`` table that builds ``spec``: what a run records of it. A user's object
    is recorded by its live name (``name``, made here when not given)."""
    shared: dict[str, Any] = {
        "meta_inputs": tuple(spec.meta_inputs),
        "mirror": tuple(getattr(spec, "mirror", ())),
        "mirror_actions": tuple(getattr(spec, "mirror_actions", ())),
        "actions": "raw" if spec.raw_actions else "greedy",
    }
    if isinstance(spec, UserNetwork):
        kind = name or live.name_for(spec.network, live.describe(spec.network))
        return PolicyConfig(kind=kind, settings=policy_kinds.CodeSettings(), **shared)
    if isinstance(spec, CodePolicy):
        extras = policy_kinds.CodeSettings(dict(spec.arguments))
        return PolicyConfig(kind=spec.factory, settings=extras, **shared)
    if isinstance(spec, MLP):
        settings: object = policy_kinds.MLPSettings(tuple(spec.hidden), spec.activation)
        return PolicyConfig(kind="mlp", settings=settings, **shared)
    if isinstance(spec, LSTM | GRU):
        kind = "lstm" if isinstance(spec, LSTM) else "gru"
        settings = policy_kinds.RecurrentSettings((int(spec.hidden),))
        return PolicyConfig(kind=kind, settings=settings, **shared)
    settings = policy_kinds.CNNSettings(
        hidden=tuple(spec.hidden), activation=spec.activation, channels=tuple(spec.channels),
        kernel=spec.kernel, stride=spec.stride, lstm=spec.lstm, ego_channel=spec.ego_channel,
        ego_radius=spec.ego_radius,
    )  # fmt: skip
    return PolicyConfig(kind="cnn", settings=settings, **shared)


def memory_lesion(policy: Policy) -> Policy:
    """The same policy with its recurrent state reset before every step.

    Evaluating a trained recurrent policy this way measures how much of its score comes from memory.
    """

    def apply(params, x, carry, key):
        return policy.apply(params, x, policy.initial_carry(), key)

    return dataclasses.replace(policy, apply=apply)
