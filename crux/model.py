"""Networks and the optimizer attached to each.

A :class:`Model` is an ``init``/``apply`` pair evaluated pointwise
(``apply(params, x)`` with ``x`` of shape ``(in_dim,)``) plus the optimizer and
learning-rate schedule that train it. ``crux.mlp`` builds the usual one.
"""
from __future__ import annotations

import functools
import inspect
import math
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from crux import precision as matmul
from crux import remat
from crux.layout import Layout, layout_free
from crux.numbers import is_real_scalar
from crux.schedules import Schedule
from crux.tanh import tanh

Params = Any
Apply = Callable[[Params, jax.Array], jax.Array]

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "tanh": tanh,
    "sin": jnp.sin,
    "gelu": jax.nn.gelu,
    "silu": jax.nn.silu,
    "softplus": jax.nn.softplus,
    "relu": jax.nn.relu,
}


class ShapeMismatch(ValueError):
    """A model met a point, or returned a value, of another shape than its ``in_dim`` or ``out_dim``."""


class Model:
    """A pointwise network with its current parameters and the optimizer that trains it.

    Any network fits: crux evaluates it one point at a time and vectorises it itself. With
    ``checkpoint_gradients`` the update is measured in each form of :mod:`crux.remat` the model has
    (:attr:`forms`) and runs the one that needs the least memory; a model without forms of its own is
    rematerialised whole (``jax.checkpoint(apply)``, which saves little: :func:`mlp` says why).

    Args:
        init: ``init(key)``: the parameter pytree, called once with ``jax.random.key(seed)``.
        apply: ``apply(params, x)``: one point ``x`` of shape ``(in_dim,)`` to ``(out_dim,)``.
        in_dim: the coordinates of a point.
        out_dim: the values at a point.
        seed: the key ``init`` is called with.
        checkpointed_apply: ``apply`` with activations rematerialised in the backward pass (None: the whole
            ``apply`` under ``jax.checkpoint``).
        unrolled_apply: the same rematerialisation as ``checkpointed_apply`` with its segments applied one after
            another instead of by a loop: which of the two needs less memory depends on the device (None: that
            form runs ``checkpointed_apply``).

    Raises:
        TypeError: ``init`` or ``apply`` is not a function, or an optional apply is neither one nor None.
    """

    def __init__(self, init: Callable[[jax.Array], Params], apply: Apply, *, in_dim: int, out_dim: int,
                 seed: int = 0, checkpointed_apply: Apply | None = None, unrolled_apply: Apply | None = None):
        for name, function, optional in [("init", init, False), ("apply", apply, False),
                                         ("checkpointed_apply", checkpointed_apply, True),
                                         ("unrolled_apply", unrolled_apply, True)]:
            if not callable(function) and not (optional and function is None):
                raise TypeError(f"crux.Model: {name} must be a function{' or None' if optional else ''}, got "
                                f"{function!r} (init(key) gives the parameters, apply(params, x) maps one point)")
        self.apply = apply
        self.checkpointed_apply = checkpointed_apply
        self.unrolled_apply = unrolled_apply
        self.in_dim, self.out_dim = int(in_dim), int(out_dim)
        self.params: Params = init(jax.random.key(seed))
        self._optimizer: Any = None
        self._schedule: Schedule | None = None
        self.optimizer_version = 0
        self._transform: tuple[int, optax.GradientTransformationExtraArgs] | None = None

    @property
    def checkpointed_apply(self) -> Apply:
        """The apply with activations rematerialised: the one given, else ``jax.checkpoint(apply)``."""
        return self._checkpointed_apply or _checkpointed_whole(self.apply)

    @checkpointed_apply.setter
    def checkpointed_apply(self, value: Apply | None) -> None:
        self._checkpointed_apply = value

    # -- parameters --------------------------------------------------------------
    @property
    def params(self) -> Params:
        """The parameters, as the last solve() left them (or as set). Reading them hands them out to be changed at
        will, so the next solve() packs them anew rather than take the packed vector it left."""
        params = self._unpacked()
        self._packed = None
        return params

    @params.setter
    def params(self, value: Params) -> None:
        self._params, self._packed = value, None

    def hold_packed(self, packed: Any, layout: Layout) -> None:
        """Keep the parameters as a solve() left them, packed by ``layout``: unpacked when first read, and given
        to the next solve() as they are where nobody read or set them in between (saving a solve() an unpack and
        a pack, a dispatch each, which on a TPU cost more than a short call's updates).

        Args:
            packed: the parameters as the solve() left them, packed.
            layout: the packing (:class:`crux.layout.Layout`).
        """
        self._params, self._packed = None, (packed, layout)

    def layout(self, flat: bool) -> Layout:
        """How a solve() packs the parameters (see :mod:`crux.layout`).

        Args:
            flat: whether the optimizer sees one flat vector.

        Returns:
            The held packing where it is the one asked, else the parameters' own.
        """
        if self._packed is not None and self._packed[1].flat == flat:
            return self._packed[1]
        return Layout.of(self._unpacked(), flat)

    def packed(self, layout: Layout) -> Any:
        """The parameters packed by ``layout``.

        Args:
            layout: a packing of these parameters (:meth:`layout`).

        Returns:
            The held vector where it is packed so, else the parameters packed now.
        """
        if self._packed is not None and self._packed[1] == layout:
            return self._packed[0]
        return layout.pack(self._unpacked())

    def _unpacked(self) -> Params:
        if self._params is None:
            packed, layout = self._packed
            self._params = layout.unpack(packed)
        return self._params

    # -- optimizer -------------------------------------------------------------
    def optimizer(self, optimizer: Callable[..., optax.GradientTransformation] | optax.GradientTransformation) -> "Model":
        """Attach the optimizer that trains the model; the next solve() starts a fresh optimizer state.

        Args:
            optimizer: an optax factory that takes ``learning_rate`` (``optax.adam``,
                ``functools.partial(optax.adamw, weight_decay=1e-4)``), whose ``learning_rate`` becomes the
                schedule of :meth:`scale` (a factory without a default one needs it), every other argument at its
                default or bound value; or a ready transform (``crux.optim.soap(1)``, ``optax.chain(...)``), whose
                updates the schedule multiplies.

        Returns:
            The model, so that ``crux.mlp(1, 1).optimizer(optax.adam).scale(crux.lrs(1e-3))`` reads as a chain.

        Raises:
            TypeError: ``optimizer`` is neither an optax factory nor a transform.
        """
        if not (isinstance(optimizer, optax.GradientTransformation) or callable(optimizer)):
            raise TypeError(f"Model.optimizer takes an optax factory (optax.adam) or transform, got {optimizer!r}")
        self._optimizer = optimizer
        self.optimizer_version += 1
        return self

    def scale(self, schedule: Schedule | float) -> "Model":
        """Set the learning-rate schedule; the next solve() starts a fresh optimizer state, its schedule at step 0.

        A constant rate is kept in the optimizer's state rather than in the compiled program, so models that
        differ only in it train with the same program (and its compilation).

        Args:
            schedule: a :mod:`crux.lrs` schedule, or a number (``lrs(number)``): a factory's ``learning_rate``, or
                the multiplier of a ready transform's updates.

        Returns:
            The model.

        Raises:
            TypeError: ``schedule`` is neither a schedule nor a real number (``True`` is not one).
            ValueError: a number that is NaN, infinite or negative.
        """
        if not isinstance(schedule, Schedule):
            if not is_real_scalar(schedule):
                raise TypeError(f"Model.scale takes a crux.lrs schedule or a number, got {schedule!r}")
            from crux.schedules import lrs
            schedule = lrs(schedule)
        self._schedule = schedule
        self.optimizer_version += 1
        return self

    @property
    def has_optimizer(self) -> bool:
        """Whether :meth:`optimizer` was called: a model that a solve() trains needs one."""
        return self._optimizer is not None

    @property
    def attached_optimizer(self) -> Any:
        """The optimizer :meth:`optimizer` attached, as given (None before)."""
        return self._optimizer

    @property
    def schedule(self) -> Schedule | None:
        """The schedule :meth:`scale` set (None before)."""
        return self._schedule

    @property
    def trains_flat(self) -> bool:
        """Whether the optimizer sees one flat parameter vector (see crux.layout: same numbers, fewer kernels)."""
        return layout_free(self._optimizer)

    def transform(self, name: str) -> optax.GradientTransformationExtraArgs:
        """The optax transform to train with; accepts ``value``/``grad``/``value_fn`` (used by L-BFGS).

        Built once per optimizer version (``optimizer()`` or ``scale()`` make a new one), not per solve().

        Args:
            name: the model's name in the solver, for the messages.

        Returns:
            The transform, a factory's with its ``learning_rate`` the schedule, a ready one's updates times it.

        Raises:
            ValueError: no optimizer attached; a factory without ``learning_rate``; a factory whose
                ``learning_rate`` has no default, without :meth:`scale`.
        """
        if self._transform is None or self._transform[0] != self.optimizer_version:
            self._transform = (self.optimizer_version, self._build_transform(name))
        return self._transform[1]

    def _build_transform(self, name: str) -> optax.GradientTransformationExtraArgs:
        opt, schedule = self._optimizer, self._schedule
        if opt is None:
            raise ValueError(f"model '{name}' has no optimizer: call models['{name}'].optimizer(optax.adam)"
                             f".scale(crux.lrs(1e-3)) before solve()")
        if isinstance(opt, optax.GradientTransformation):
            tx = opt
            if schedule is not None:
                if schedule.value is not None:  # kept in state: a swept value compiles to the same program
                    scaling = optax.inject_hyperparams(optax.scale)(step_size=schedule.value)
                else:
                    scaling = optax.scale_by_schedule(schedule)
                tx = optax.chain(tx, scaling)
        else:
            arguments = inspect.signature(opt).parameters
            if "learning_rate" not in arguments:
                raise ValueError(f"model '{name}': optimizer factory {opt!r} takes no learning_rate; pass a ready "
                                 f"transform instead, e.g. .optimizer(factory(...))")
            if schedule is None:
                if arguments["learning_rate"].default is inspect.Parameter.empty:
                    raise ValueError(f"model '{name}': {opt.__name__} needs a learning rate: call "
                                     f".scale(crux.lrs(1e-3)) after .optimizer()")
                tx = opt()
            else:
                # Every other argument static: inject_hyperparams would make them all traced hyperparameters,
                # and optax.lbfgs fails on a traced memory_size (TracerBoolConversionError).
                static = [a for a in arguments if a != "learning_rate"]
                learning_rate = schedule.value if schedule.value is not None else schedule
                tx = optax.inject_hyperparams(opt, static_args=static)(learning_rate=learning_rate)
        return optax.with_extra_args_support(tx)

    # -- evaluation --------------------------------------------------------------
    @property
    def forms(self) -> tuple[str, ...]:
        """The forms of :mod:`crux.remat` the model has an apply of its own for: plain and whole always, layers
        with a ``checkpointed_apply`` of its own, unrolled with an ``unrolled_apply``. Another form would run the
        very apply of one of these, so ``checkpoint_gradients`` does not compile it again."""
        own = {remat.LAYERS: self._checkpointed_apply is not None, remat.UNROLLED: self.unrolled_apply is not None}
        return tuple(form for form in remat.FORMS if own.get(form, True))

    def applied(self, form: str = remat.PLAIN) -> Apply:
        """The apply of a form of :mod:`crux.remat`: plain, the model's own rematerialised one (by default one
        checkpoint around the whole apply), one checkpoint around the whole apply, or the model's own segments
        unrolled (by default its own rematerialised one).

        Args:
            form: one of :data:`crux.remat.FORMS`.

        Returns:
            The apply, ``apply(params, x) -> (out_dim,)``.

        Raises:
            ValueError: ``form`` is not one of :data:`crux.remat.FORMS`.
        """
        if form not in remat.FORMS:
            raise ValueError(f"no rematerialisation form {form!r}; crux has {remat.FORMS}")
        return {remat.PLAIN: self.apply, remat.LAYERS: self.checkpointed_apply,
                remat.WHOLE: _checkpointed_whole(self.apply),
                remat.UNROLLED: self.unrolled_apply or self.checkpointed_apply}[form]

    def pointwise(self, params: Params, x: jax.Array, form: str = remat.PLAIN) -> jax.Array:
        """The network at one point, through the apply of ``form`` (:meth:`applied`).

        Args:
            params: the parameters to apply (traced, in a residual).
            x: one point, shape ``(in_dim,)``.
            form: a form of :mod:`crux.remat`.

        Returns:
            A scalar when ``out_dim == 1``, else shape ``(out_dim,)``.

        Raises:
            ShapeMismatch: (while tracing) ``x`` is not ``(in_dim,)``, or ``apply`` does not return ``(out_dim,)``.
            ValueError: an unknown ``form``.
        """
        if jnp.shape(x) != (self.in_dim,):
            raise ShapeMismatch(f"takes one point of shape ({self.in_dim},), and the residual passed it shape "
                                f"{jnp.shape(x)}")
        y = self.applied(form)(params, x)
        if jnp.shape(y) != (self.out_dim,):
            raise ShapeMismatch(f"was declared with out_dim={self.out_dim}, and its apply returns shape "
                                f"{jnp.shape(y)} at one point")
        return y[0] if self.out_dim == 1 else y

    def __call__(self, xs: Any, precision: str = matmul.CRUX_PRECISION) -> jax.Array:
        """Evaluate the network at many points with the current parameters.

        Args:
            xs: points ``(N, in_dim)``; a 1-D array is ``N`` points when ``in_dim == 1``, else one point.
            precision: of the network's matrix products (:mod:`crux.precision`; full float32 unless told
                otherwise).

        Returns:
            ``(N, out_dim)`` float32.

        Raises:
            ValueError: ``xs`` is not ``(N, in_dim)`` (nor a 1-D array read as above).
        """
        precision = matmul.checked(precision, "Model(xs, precision)")
        xs = jnp.asarray(xs, jnp.float32)
        given = xs.shape
        if xs.ndim == 1:
            xs = xs[:, None] if self.in_dim == 1 else xs[None, :]
        if xs.ndim != 2 or xs.shape[1] != self.in_dim:
            read = f", read as one point of shape {xs.shape[1:]}" if len(given) == 1 else ""
            raise ValueError(f"the model takes points of shape (N, {self.in_dim}) (in_dim={self.in_dim}), got shape "
                             f"{given}{read}")
        return _batched(self.apply, precision)(self._unpacked(), xs)


def _glorot(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    fan_in, fan_out = shape[-2], shape[-1]
    # The barrier keeps XLA from folding the scale into the normal draw's own constants where both are compiled
    # together (:func:`_mlp_init`), which changes the weights' last bits. A Python float keeps the weights float32
    # under jax_enable_x64 too (a NumPy scalar would make them float64).
    draw = jax.lax.optimization_barrier(jax.random.normal(key, shape, jnp.float32))
    return draw * math.sqrt(2.0 / (fan_in + fan_out))


def _stack_layout(widths: Sequence[int]) -> list[tuple[int, int, int]]:
    """Group consecutive hidden layers of equal shape: ``[(count, d_in, d_out), ...]``.

    The output layer always stands alone (it has no activation).
    """
    shapes = list(zip(widths[:-1], widths[1:]))
    stacks: list[list[int]] = []
    for i, (d_in, d_out) in enumerate(shapes):
        output_layer = i == len(shapes) - 1
        if stacks and not output_layer and (stacks[-1][1], stacks[-1][2]) == (d_in, d_out):
            stacks[-1][0] += 1
        else:
            stacks.append([1, d_in, d_out])
    return [(n, d_in, d_out) for n, d_in, d_out in stacks]


def mlp(in_dim: int, out_dim: int, hidden: Sequence[int] = (64, 64, 64), activation: str = "tanh",
        seed: int = 0) -> Model:
    """A fully connected network: Glorot-normal weights (standard deviation ``sqrt(2 / (fan_in + fan_out))``),
    zero biases, ``activation`` between layers and none after the last.

    Consecutive hidden layers of equal shape are stored stacked: ``params`` is a list of ``{"w": (count, d_in,
    d_out), "b": (count, d_out)}``, the output layer on its own. With ``checkpoint_gradients`` a stack of n
    layers is applied in rematerialised segments of about sqrt(n) layers (the backward pass keeps the segments'
    inputs and recomputes one segment at a time; ``jax.checkpoint`` around a whole network keeps every layer's
    activations alive while it recomputes them), by a ``lax.scan`` over the segments (``checkpointed_apply``)
    or one after another (``unrolled_apply``, None where no stack has two whole segments: the two would be one
    program, so ``checkpoint_gradients`` traces it once); without, by a Python loop over its layers.

    Args:
        in_dim: the coordinates of a point.
        out_dim: the values at a point.
        hidden: the hidden layers' widths.
        activation: one of ``tanh``, ``sin``, ``gelu``, ``silu``, ``softplus``, ``relu`` (``tanh`` is
            float32-accurate on every backend: on a TPU crux's own, :mod:`crux.tanh`).
        seed: the key of the initial weights.

    Returns:
        A :class:`Model`, without an optimizer.

    Raises:
        TypeError: a dimension is not an integer, or ``hidden`` is not a sequence of widths.
        ValueError: an unknown ``activation``, or a dimension below 1.
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"crux.mlp: unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}")
    if not isinstance(hidden, Sequence) or isinstance(hidden, str):
        raise TypeError(f"crux.mlp: hidden is the hidden layers' widths, a sequence such as hidden=(64, 64), "
                        f"got {hidden!r}")
    for name, value in [("in_dim", in_dim), ("out_dim", out_dim), *((f"hidden[{i}]", h) for i, h in enumerate(hidden))]:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"crux.mlp: {name} must be an integer, got {value!r}")
    if in_dim < 1 or out_dim < 1 or any(h < 1 for h in hidden):
        raise ValueError(f"crux.mlp: dimensions must be >= 1, got in_dim={in_dim}, hidden={hidden}, out_dim={out_dim}")
    layout = _stack_layout([in_dim, *hidden, out_dim])
    # segments unrolled are another program than segments scanned only where a stack has two whole segments or more
    several = any(n > 1 and n // _segment_size(n) > 1 for n, _, _ in layout)
    return Model(_mlp_init(tuple(layout)), _mlp_apply(activation, remat.PLAIN), in_dim=in_dim, out_dim=out_dim,
                 seed=seed, checkpointed_apply=_mlp_apply(activation, remat.LAYERS),
                 unrolled_apply=_mlp_apply(activation, remat.UNROLLED) if several else None)


@functools.lru_cache(maxsize=64)
def _mlp_init(layout: tuple[tuple[int, int, int], ...]) -> Callable[[jax.Array], Params]:
    """The parameters of every ``crux.mlp`` of ``layout`` (:func:`_stack_layout`) from a key, as one compiled
    program per layout: drawn op by op, a process's first network lowered and ran some 14 small programs (its
    set-up took 0.16 s instead of 0.10 s on a 2-core CPU, the compilation cache warm: docs/BENCHMARK.md). The same
    weights, bit for bit, as drawn op by op."""

    def init(key):
        keys = jax.random.split(key, len(layout))
        return [{"w": _glorot(k, (n, d_in, d_out)), "b": jnp.zeros((n, d_out), jnp.float32)}
                for k, (n, d_in, d_out) in zip(keys, layout)]
    return jax.jit(init)


@functools.lru_cache(maxsize=64)
def _batched(apply: Apply, precision: str) -> Callable[[Params, jax.Array], jax.Array]:
    """``apply`` over a batch of points at ``precision``, one jit per apply: models of the same apply (every
    ``crux.mlp`` of an activation) share it, so a sweep's next job evaluates its new model without compiling
    again."""
    return jax.jit(matmul.applied(precision, jax.vmap(apply, in_axes=(None, 0))))


@functools.lru_cache(maxsize=256)
def _checkpointed_whole(apply: Apply) -> Apply:
    """``jax.checkpoint(apply)``, one per apply, so that a sweep's next job traces the same function again."""
    return jax.checkpoint(apply)


@functools.lru_cache(maxsize=None)
def _mlp_apply(activation: str, form: str) -> Apply:
    """The apply in ``form`` (:data:`crux.remat.PLAIN`, ``LAYERS`` or ``UNROLLED``) of every ``crux.mlp`` with this
    activation: one inlined jit, so that vmap and value_and_grad transform a network's layers once per shape and
    process (a sweep's next job reuses them)."""
    sigma = ACTIVATIONS[activation]

    def apply(params, x):
        h = x
        for i, layer in enumerate(params):
            activate = sigma if i < len(params) - 1 else (lambda z: z)

            def layers_fn(h, wb, activate=activate):
                for w, b in zip(*(_layers(stack) for stack in wb)):
                    h = activate(h @ w + b)
                return h, None

            count = layer["w"].shape[0]
            if form != remat.PLAIN and count > 1:
                h = _segmented(layers_fn, h, layer["w"], layer["b"], unrolled=form == remat.UNROLLED)
            else:  # a Python loop over the stack: less CPU per update than an unrolled scan on the standard
                # problem, a little more on the small one (docs/BENCHMARK.md)
                h, _ = layers_fn(h, (layer["w"], layer["b"]))
        return h
    return jax.jit(apply, inline=True)


def _segment_size(n: int) -> int:
    """The layers of a rematerialised segment of a stack of ``n`` layers: ceil(sqrt(n))."""
    return math.isqrt(n - 1) + 1


def _layers(stack: jax.Array) -> list[jax.Array]:
    """A stack of equal layers' arrays as one array per layer, by one split: its gradient is one concatenation,
    where indexing the stack layer by layer sends back a zero-padded copy of the stack per layer, summed."""
    return [jnp.squeeze(layer, 0) for layer in jnp.split(stack, stack.shape[0])] if stack.shape[0] > 1 else [stack[0]]


def _segmented(layers_fn: Callable, h: jax.Array, w: jax.Array, b: jax.Array, unrolled: bool) -> jax.Array:
    """A stack of n layers applied in segments of s = ceil(sqrt(n)) layers, each segment rematerialised: the
    backward pass keeps the input of each segment, about sqrt(n) of them, and recomputes one segment's layers
    at a time, so the activations alive at once grow as 2 sqrt(n), not n. The whole segments are a ``lax.scan``
    over a rematerialised body (its size does not grow with depth) or, ``unrolled``, one checkpoint each, one
    after another (which of the two needs less memory depends on the device: :mod:`crux.remat`; with one whole
    segment the two are one program, so that choosing between them compiles it once); the remaining n mod s
    layers one more."""
    n = w.shape[0]
    size = _segment_size(n)
    whole = n // size * size
    segment = jax.checkpoint(layers_fn)
    if unrolled or whole == size:  # one whole segment: a loop of one turn is that segment, the program unrolled's
        for start in range(0, whole, size):
            h, _ = segment(h, (w[start:start + size], b[start:start + size]))
    else:
        grouped = (w[:whole].reshape(-1, size, *w.shape[1:]), b[:whole].reshape(-1, size, *b.shape[1:]))
        h, _ = jax.lax.scan(segment, h, grouped)
    if whole < n:
        h, _ = segment(h, (w[whole:], b[whole:]))
    return h
