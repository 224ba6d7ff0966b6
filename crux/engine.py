"""The compiled training call: losses, micro-batch accumulation, optimizer steps, fused epochs.

A call runs ``inner_steps`` epochs; an epoch runs the plan's entries in order,
each entry ``steps`` updates of its constraints that move only its models. A
plain ``solve()`` is a plan of one entry (every constraint, every reached model,
one step); ``substeps`` give several. What is static (constraints, models, the
entries, batch shapes, accumulation count) is the :class:`Plan`, Python values
the program is traced from; what changes (parameters, optimizer states, the
update counter) is the :class:`State`, arrays the caller donates. A call writes
its epochs' figures into a ring buffer in the state, so that the caller reads
them with one transfer per synchronisation rather than one per call.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import optax
from jax.sharding import PartitionSpec as P

from crux import precision as matmul
from crux import remat as rematerialise
from crux import sharding
from crux.batching import DevicePoints, PointStream, StreamedBatches
from crux.constraint import Constraint, constraint_loss
from crux.layout import Layout
from crux.model import Model


@dataclass(frozen=True)
class Entry:
    """``steps`` updates on ``constraints`` (indices) that move only ``models`` (the ones they reach)."""

    constraints: tuple[int, ...]
    models: tuple[str, ...]
    steps: int = 1


@dataclass(frozen=True)
class Columns:
    """Where an epoch's figures sit in its row of the record: losses, trained models' learning rates, finite."""

    losses: slice
    lr: dict[str, int]
    finite: int

    @classmethod
    def of(cls, n_constraints: int, entries: Sequence[Entry]) -> "Columns":
        """The columns of ``n_constraints`` losses, a learning rate per model the ``entries`` train (sorted by
        name) and the finite flag."""
        trained = sorted({name for e in entries for name in e.models})
        return cls(slice(0, n_constraints), {name: n_constraints + i for i, name in enumerate(trained)},
                   n_constraints + len(trained))

    @property
    def width(self) -> int:
        """The columns of a row."""
        return self.finite + 1


class OptimizerState(NamedTuple):
    """One model's optimizer state in one entry."""

    count: jax.Array  # int32: updates made with this state, the schedule's position
    inner: Any  # the optax transform's state


class TrainState(NamedTuple):
    """What the updates change."""

    params: dict[str, Any]  # per model, packed by its Layout
    opt: tuple[dict[str, OptimizerState], ...]  # per entry, per model it trains
    step: jax.Array  # int32: updates so far, which drives the point stream
    failed: jax.Array  # bool: an update was non-finite; nothing is applied from then on


class Records(NamedTuple):
    """A ring buffer of the calls' records: one ``(inner_steps, columns.width)`` record per call."""

    rows: jax.Array  # (slots, inner_steps, width) float32
    slot: jax.Array  # int32: the slot the next call writes


class State(NamedTuple):
    """What a compiled call takes and returns (donated)."""

    train: TrainState
    records: Records


def repeat(body: Callable, carry: Any, xs: Any, length: int, unroll: int = 1) -> tuple[Any, Any]:
    """``lax.scan`` that skips the loop for a single iteration (outputs still get the leading axis).

    Args:
        body: ``body(carry, x) -> (carry, out)``.
        carry: the loop's starting carry.
        xs: the per-iteration inputs, each leaf of leading axis ``length``, or None.
        length: the iterations.
        unroll: iterations to a turn of the loop.

    Returns:
        ``(carry, outs)``, each leaf of ``outs`` of leading axis ``length``.
    """
    if length == 1:
        carry, out = body(carry, None if xs is None else jax.tree.map(lambda a: a[0], xs))
        return carry, jax.tree.map(lambda a: a[None], out)
    return jax.lax.scan(body, carry, xs, length=length, unroll=unroll)


@dataclass(frozen=True)
class Primitives:
    """The loop and the gradient sum a call is built from.

    crux uses the defaults alone; a test of a claim check builds a call from a broken one (a fused loop that
    drops its last update, a sum that keeps only the newest micro-batch) to show that the check catches it.
    """

    repeat: Callable[..., tuple[Any, Any]] = repeat  # runs an epoch's or a call's body (a call's: with unroll=)
    accumulate: Callable[[jax.Array, jax.Array], jax.Array] = jnp.add  # adds a micro-batch's gradient to the sum


@dataclass(frozen=True, eq=False)
class Plan:
    """What one compiled call is traced from.

    ``check_updates=False`` keeps or drops an update on its loss alone, a select that XLA fuses into the
    update, and checks only the parameters the call leaves (the ``finite`` column of its last epoch): a
    non-finite update goes unnoticed until then, so the caller replays such a call with
    ``check_updates=True`` to find it. The full check waits for a reduction over the new parameters before
    the select, which keeps XLA from fusing the update into one pass.
    """

    constraints: tuple[Constraint, ...]
    models: Mapping[str, Model]
    layouts: Mapping[str, Layout]
    transforms: Mapping[str, optax.GradientTransformationExtraArgs]  # per trained model
    entries: tuple[Entry, ...]
    stream: PointStream
    inner_steps: int = 1
    remat: str = rematerialise.PLAIN  # the networks' rematerialisation form (crux.remat)
    offload_data: bool = False
    precision: str = matmul.CRUX_PRECISION  # of every float32 matrix product in the call (crux.precision)
    check_updates: bool = True
    unroll: int = 1  # epochs per turn of the call's loop (crux.loop.unrolled)
    record_slots: int = 1  # calls whose records the state holds between two reads
    primitives: Primitives = Primitives()

    @property
    def steps_per_epoch(self) -> int:
        """The updates of one epoch: each entry's steps, summed."""
        return sum(e.steps for e in self.entries)

    @property
    def columns(self) -> Columns:
        """Where an epoch's figures sit in its row of the record."""
        return Columns.of(len(self.constraints), self.entries)

    @property
    def record_shape(self) -> tuple[int, int, int]:
        """The record buffer's shape: ``record_slots`` calls of ``inner_steps`` epochs' rows."""
        return (self.record_slots, self.inner_steps, self.columns.width)


def started(params: dict[str, Any], opt: tuple[dict[str, OptimizerState], ...], step: Any,
            record_shape: tuple[int, int, int], target: jax.sharding.Sharding) -> State:
    """The state a solve()'s first call takes, made on ``target`` in one dispatch: copies of the parameters, the
    optimizer states and the update counter (a call donates what it takes; these stay whole, to start a replay
    or to be kept should the first calls fail), no failed update, and an empty record buffer. Nothing travels
    from the host where they are on ``target`` already.

    Args:
        params: each model's packed parameters.
        opt: per entry, each trained model's optimizer state.
        step: the update counter.
        record_shape: the record buffer's shape (:attr:`Plan.record_shape`).
        target: where the state lives (:func:`crux.sharding.placement`).

    Returns:
        The starting :class:`State`.
    """
    return _starter(record_shape, target)(params, opt, step)


@functools.lru_cache(maxsize=32)
def _starter(record_shape: tuple[int, int, int], target: jax.sharding.Sharding) -> Callable[..., State]:
    def start(params, opt, step):
        params, opt, step = jax.tree.map(jnp.copy, (params, opt, step))
        return State(TrainState(params, opt, step.astype(jnp.int32), jnp.zeros((), jnp.bool_)),
                     Records(jnp.zeros(record_shape, jnp.float32), jnp.zeros((), jnp.int32)))
    return jax.jit(start, out_shardings=target)


Data = DevicePoints | StreamedBatches


def make_call(plan: Plan) -> Callable[[State, Data], State]:
    """``call(state, data) -> state``: ``plan.inner_steps`` epochs.

    The call writes into ``state.records`` one record ``(inner_steps, columns.width)``: per epoch each
    constraint's loss (its mean over the updates that evaluated it; NaN if none), each trained model's
    learning rate, and 1.0 if the epoch was finite, 0.0 if it met a non-finite loss or update (which was not
    applied). ``data`` is :class:`DevicePoints` (batches drawn inside the call) or, with ``offload_data``,
    :class:`StreamedBatches`.

    Args:
        plan: what the call is traced from.

    Returns:
        The call, to be compiled (it traces at ``plan.precision``).
    """
    return matmul.applied(plan.precision, lambda state, data: _call(plan, state, data))


def _call(plan: Plan, state: State, data: Data) -> State:
    xs = None
    if plan.offload_data:
        xs = jax.tree.map(lambda a: a.reshape(plan.inner_steps, plan.steps_per_epoch, *a.shape[1:]), data.points())
    unrolled = {"unroll": plan.unroll} if plan.unroll > 1 else {}
    train, columns = plan.primitives.repeat(functools.partial(_epoch, plan, data), state.train, xs,
                                            plan.inner_steps, **unrolled)
    rows = jnp.column_stack(columns)  # (inner_steps, width): one stack for the call, none per epoch
    if not plan.check_updates:  # the parameters left behind: a non-finite update marks the call's last epoch
        rows = rows.at[-1, -1].multiply(all_finite(train.params).astype(rows.dtype))
    records = state.records
    return State(train, Records(jax.lax.dynamic_update_index_in_dim(records.rows, rows, records.slot, 0),
                                (records.slot + 1) % records.rows.shape[0]))


def _epoch(plan: Plan, data: Data, state: TrainState, epoch_batches: Any) -> tuple[TrainState, tuple]:
    """The entries in order; the record's figures of the epoch: losses, learning rates, finite."""
    n_constraints = len(plan.constraints)
    sums = [jnp.float32(0.0)] * n_constraints
    lr: dict[str, jax.Array] = {}
    finite = jnp.bool_(True)
    offset = 0
    for index, entry in enumerate(plan.entries):
        xs = None if epoch_batches is None else jax.tree.map(lambda a: a[offset:offset + entry.steps], epoch_batches)
        update = functools.partial(_update, plan, index, data)
        state, (pers, lrs, oks) = plan.primitives.repeat(update, state, xs, entry.steps)
        for j, c in enumerate(entry.constraints):
            sums[c] = sums[c] + jnp.sum(pers[:, j])
        lr.update({name: values[-1] for name, values in lrs.items()})
        finite = finite & jnp.all(oks)
        offset += entry.steps
    counts = [sum(e.steps for e in plan.entries if c in e.constraints) for c in range(n_constraints)]
    losses = [s / n if n else jnp.float32(jnp.nan) for s, n in zip(sums, counts)]
    return state, _figures([*losses, *(lr[name] for name in sorted(lr)), finite.astype(jnp.float32)])


def _figures(figures: list[jax.Array]) -> tuple[jax.Array, ...]:
    """An epoch's figures as the loop outputs them: each its own output, stacked into rows after the loop. Stacked
    inside the loop they were an instruction of their own in every epoch on a TPU v5e (1.2 µs of a 52 µs update;
    docs/tpu/README.md), which ``crux-bench anatomy --suite`` sets beside this form as "one stacked row"."""
    return tuple(figures)


def _update(plan: Plan, index: int, data: Data, state: TrainState, step_batches: Any) -> tuple[TrainState, tuple]:
    """One update of entry ``index``: its loss and gradient over the update's micro-batches, one optimizer
    step for each model it trains, kept only if finite (and no earlier update failed)."""
    entry, params = plan.entries[index], state.params
    if step_batches is None:  # every constraint drawn from its points on the device
        step_batches = plan.stream.gather(data.points, data.key, state.step)
    elif any(b is None for b in step_batches):  # offloaded: the constraints sent whole drawn from them here
        drawn = plan.stream.gather(data.whole, data.key, state.step)
        step_batches = tuple(d if b is None else b for b, d in zip(step_batches, drawn))
    batches = [step_batches[c] for c in entry.constraints]
    trainable = {m: params[m] for m in entry.models}
    value, per, grads = _gradient(plan, entry, trainable, params, batches)

    new_params, new_opt, lr = dict(params), dict(state.opt[index]), {}
    for name in entry.models:
        count, inner = new_opt[name]
        value_fn = lambda p, name=name: _mean_loss(plan, entry, {**trainable, name: p}, params, batches)
        updates, inner = plan.transforms[name].update(grads[name], inner, trainable[name], value=value,
                                                      grad=grads[name], value_fn=value_fn)
        new_params[name] = optax.apply_updates(trainable[name], updates)
        new_opt[name] = OptimizerState(count + 1, inner)
        schedule = plan.models[name].schedule
        lr[name] = schedule(count).astype(jnp.float32) if schedule is not None else jnp.float32(jnp.nan)
    # A non-finite loss or update leaves parameters and optimizer state as they were; the caller stops.
    finite = jnp.isfinite(value)
    if plan.check_updates:
        finite = finite & all_finite({m: new_params[m] for m in entry.models})
    # After one, nothing more is applied, so the caller gets the parameters from before it.
    apply = finite & ~state.failed
    keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(apply, a, b), new, old)
    opt = list(state.opt)
    opt[index] = keep(new_opt, state.opt[index])
    new_state = TrainState(keep(new_params, params), tuple(opt), state.step + 1, state.failed | ~finite)
    return new_state, (per, lr, finite)


def _entry_losses(plan: Plan, entry: Entry, trainable: dict, params: dict, batch: Sequence[jax.Array],
                  weights: Sequence[jax.Array | None]) -> tuple[jax.Array, jax.Array]:
    """(total, per-constraint losses) of the entry's constraints on one micro-batch (``weights``: per
    constraint, its slots' weights in this micro-batch, or None for the plain mean)."""
    full = {name: plan.layouts[name].unpack(p) for name, p in {**params, **trainable}.items()}
    per = jnp.stack([constraint_loss(plan.constraints[c], plan.models, full, points, plan.remat, w)
                     for c, points, w in zip(entry.constraints, batch, weights)])
    return jnp.sum(per), per


def _micro_batches(plan: Plan, entry: Entry, batches: Sequence[jax.Array]) -> tuple[list, list]:
    """What the scan over micro-batches runs on: per constraint its ``(G, B_c, d)`` points and its slots'
    ``(G, B_c)`` weights (None where the micro-batch's loss is its plain mean)."""
    weights = [plan.stream.slot_weights(c) for c in entry.constraints]
    return list(batches), [None if w is None else jnp.asarray(w) for w in weights]


def _gradient(plan: Plan, entry: Entry, trainable: dict, params: dict,
              batches: Sequence[jax.Array]) -> tuple[jax.Array, jax.Array, dict]:
    """(loss, per-constraint losses, gradient of the trainable parameters), each the mean over the
    micro-batches; they are scanned, so that memory holds one micro-batch's activations at a time. On
    several devices each scans its own micro-batches and the devices add their sums."""
    value_and_grad = jax.value_and_grad(functools.partial(_entry_losses, plan, entry), has_aux=True)
    micro = plan.stream.micro_batches
    if micro == 1:  # one micro-batch of B slots: each a distinct point, or all N_c <= B of them
        (value, per), grads = value_and_grad(trainable, params, [b[0] for b in batches], [None] * len(batches))
        return value, per, grads

    def accumulate(total, micro_batch):
        (v, p), g = value_and_grad(trainable, params, *micro_batch)
        return jax.tree.map(plan.primitives.accumulate, total, g), (v, p)
    zeros = jax.tree.map(jnp.zeros_like, trainable)
    if plan.stream.devices == 1:
        total, (values, pers) = jax.lax.scan(accumulate, zeros, _micro_batches(plan, entry, batches))
        return jnp.mean(values), jnp.mean(pers, axis=0), jax.tree.map(lambda g: g / micro, total)

    def on_each_device(micro_batches):
        total, (values, pers) = jax.lax.scan(accumulate, zeros, micro_batches)
        return jax.lax.psum((total, jnp.sum(values), jnp.sum(pers, axis=0)), sharding.AXIS)
    # Explicit sums (check_vma off): the parameters enter every device whole, and each device's gradient is
    # its own micro-batches' alone until the psum.
    total, value, per = jax.shard_map(on_each_device, mesh=sharding.mesh(plan.stream.devices),
                                      in_specs=(P(sharding.AXIS),), out_specs=P(), check_vma=False)(
        _micro_batches(plan, entry, batches))
    return value / micro, per / micro, jax.tree.map(lambda g: g / micro, total)


def _mean_loss(plan: Plan, entry: Entry, trainable: dict, params: dict, batches: Sequence[jax.Array]) -> jax.Array:
    """The loss alone over all micro-batches, for an optimizer's line search (L-BFGS's ``value_fn``)."""
    if plan.stream.micro_batches == 1:
        return _entry_losses(plan, entry, trainable, params, [b[0] for b in batches], [None] * len(batches))[0]
    _, values = jax.lax.scan(lambda _, mb: (None, _entry_losses(plan, entry, trainable, params, *mb)[0]), None,
                             _micro_batches(plan, entry, batches))
    return jnp.mean(values)


def all_finite(tree: Any) -> jax.Array:
    """Whether an update's parameters are all finite (the engine's guard, and the hand-written loops' alike).

    Args:
        tree: a pytree of arrays.

    Returns:
        A boolean scalar array: True where every element of every leaf is finite.
    """
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(tree)]))
