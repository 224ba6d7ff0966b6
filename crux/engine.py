"""The compiled training call: losses, micro-batch accumulation, optimizer steps, fused epochs.

One call runs ``epochs_per_call`` epochs; an epoch runs the plan's entries in
order, each entry ``steps`` updates of its constraints that move only its
models. A plain ``solve()`` is a plan of one entry (every constraint, every
reached model, one step); ``substeps`` give several. Everything static (the
plan, batch shapes, accumulation count) is Python; everything that changes
(parameters, optimizer states, the update counter) is the state pytree, which
the caller donates. A call writes its epochs' figures into a ring buffer in the
state, so the caller reads them with one transfer per sync, not one per call
(on a GPU a transfer per call cost about as much as the update of a small problem).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from crux.batching import PointStream
from crux.constraint import Constraint
from crux.layout import Layout
from crux.model import Model

# {"params": {model: packed p}, "opt": ({model: (count, tx_state)}, ...), "step": int32, "failed": bool,
#  "records": (slots, K, width) float32, "slot": int32}
State = dict[str, Any]


@dataclass(frozen=True)
class Columns:
    """Where an epoch's figures sit in its row of the record: losses, trained models' learning rates, finite."""

    losses: slice
    lr: dict[str, int]
    finite: int

    @classmethod
    def of(cls, n_constraints: int, entries: Sequence["Entry"]) -> "Columns":
        trained = sorted({name for e in entries for name in e.models})
        return cls(slice(0, n_constraints), {name: n_constraints + i for i, name in enumerate(trained)},
                   n_constraints + len(trained))

    @property
    def width(self) -> int:
        return self.finite + 1


def empty_records(columns: Columns, slots: int, epochs_per_call: int) -> dict[str, np.ndarray]:
    """The state's ring buffer: room for ``slots`` calls' records, and the slot the next call writes.

    Host arrays: they reach the device with the rest of the initial state, in one transfer.
    """
    return {"records": np.zeros((slots, epochs_per_call, columns.width), np.float32), "slot": np.int32(0)}


@dataclass(frozen=True)
class Entry:
    """``steps`` updates on ``constraints`` (indices) that move only ``models`` (the ones they reach)."""

    constraints: tuple[int, ...]
    models: tuple[str, ...]
    steps: int = 1


class Nets:
    """What a residual sees as ``net``: ``net.u(x)`` (or ``net["u"](x)``) evaluates model ``u`` at one point."""

    def __init__(self, models: dict[str, Model], params: dict[str, Any], checkpointed: bool):
        self._models, self._params, self._checkpointed = models, params, checkpointed

    def __getitem__(self, name: str) -> Callable[[jax.Array], jax.Array]:
        if name not in self._models:
            raise KeyError(f"residual asked for model '{name}', but the solver has models {sorted(self._models)}")
        model, params = self._models[name], self._params[name]
        return lambda x: model.pointwise(params, x, self._checkpointed)

    def __getattr__(self, name: str) -> Callable[[jax.Array], jax.Array]:
        if name.startswith("_"):
            raise AttributeError(name)
        return self[name]


def constraint_loss(constraint: Constraint, models: dict[str, Model], params: dict[str, Any],
                    points: jax.Array, checkpointed: bool = False) -> jax.Array:
    """``weight * mean(residual**2)`` over ``points (B, d)``."""
    net = Nets(models, params, checkpointed)
    residuals = jax.vmap(lambda x: constraint.residual(net, x))(points)
    return constraint.weight * jnp.mean(jnp.square(residuals))


def reached_models(constraint: Constraint, models: dict[str, Model], params: dict[str, Any]) -> set[str]:
    """Models whose parameters enter the traced loss of ``constraint`` (tracing only, no compute)."""
    names = sorted(params)
    closed = jax.make_jaxpr(lambda p: constraint_loss(constraint, models, p, constraint.points[:1]))(params)
    used = {id(v) for eqn in closed.jaxpr.eqns for v in eqn.invars} | {id(v) for v in closed.jaxpr.outvars}
    reached, position = set(), 0
    for name in names:  # make_jaxpr flattens the dict in sorted-key order
        count = len(jax.tree.leaves(params[name]))
        if any(id(v) in used for v in closed.jaxpr.invars[position:position + count]):
            reached.add(name)
        position += count
    return reached


def _all_finite(tree: Any) -> jax.Array:
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(tree)]))


def _repeat(body: Callable, carry: Any, xs: Any, length: int) -> tuple[Any, Any]:
    """``lax.scan`` that skips the loop for a single iteration (outputs still get the leading axis)."""
    if length == 1:
        carry, out = body(carry, None if xs is None else jax.tree.map(lambda a: a[0], xs))
        return carry, jax.tree.map(lambda a: a[None], out)
    return jax.lax.scan(body, carry, xs, length=length)


def make_call(constraints: Sequence[Constraint], models: dict[str, Model], layouts: dict[str, Layout],
              transforms: dict[str, optax.GradientTransformationExtraArgs], entries: Sequence[Entry],
              stream: PointStream, epochs_per_call: int, checkpointed: bool, offload: bool,
              check_updates: bool = True) -> Callable:
    """Build ``call(state, data) -> state``. It writes into ``state["records"][state["slot"]]`` a record
    ``(K, columns.width)``: per epoch the constraints' losses, each trained model's learning rate and 1.0
    if the epoch was finite (see :class:`Columns`), and moves the slot on by one (modulo the slots).

    Parameters sit in the state packed by ``layouts`` (a flat vector for layout-free optimizers);
    optimizers and the guard see them packed, residuals unpacked.

    ``data`` is ``{"key", "points"}`` (points on the device, batches drawn inside)
    or, with ``offload``, ``{"batches"}``: per constraint ``(K * steps_per_epoch, A, B_c, d)``.
    Losses of an epoch are each constraint's mean over the updates that evaluated it (NaN if none);
    ``finite`` is 0.0 for an epoch with a non-finite loss or update (which was not applied).

    Without ``check_updates`` an update is kept or dropped on its loss alone, a select that XLA fuses
    into the update itself, and only the parameters the call leaves are checked (``finite`` of its last
    epoch): a non-finite update goes unnoticed until then, so the caller replays such a call from
    a copy with ``check_updates`` to find it (see Crux._run). On an H200 the checked select cost 7-8% of
    a small problem's update: it waits for a reduction over the new parameters, so XLA computed the
    update twice.
    """
    micro = stream.micro_batches
    n_constraints = len(constraints)
    steps_per_epoch = sum(e.steps for e in entries)
    counts = [sum(e.steps for e in entries if c in e.constraints) for c in range(n_constraints)]

    def entry_update(entry: Entry, index: int, data: dict) -> Callable:
        def losses_of(trainable, params, batch):
            full = {name: layouts[name].unpack(p) for name, p in {**params, **trainable}.items()}
            per = jnp.stack([constraint_loss(constraints[c], models, full, points, checkpointed)
                             for c, points in zip(entry.constraints, batch)])
            return jnp.sum(per), per

        value_and_grad = jax.value_and_grad(losses_of, has_aux=True)

        def mean_loss(trainable, params, batches):
            """Forward loss over all micro-batches, scanned so memory stays per micro-batch (for L-BFGS)."""
            if micro == 1:
                return losses_of(trainable, params, [b[0] for b in batches])[0]
            _, values = jax.lax.scan(lambda _, mb: (None, losses_of(trainable, params, mb)[0]), None, batches)
            return jnp.mean(values)

        def update(state: State, step_batches: Any) -> tuple[State, tuple]:
            params = state["params"]
            if step_batches is None:
                step_batches = stream.gather(data["points"], data["key"], state["step"])
            batches = [step_batches[c] for c in entry.constraints]
            trainable = {m: params[m] for m in entry.models}
            if micro == 1:
                (value, per), grads = value_and_grad(trainable, params, [b[0] for b in batches])
            else:
                def accumulate(total, micro_batch):
                    (v, p), g = value_and_grad(trainable, params, micro_batch)
                    return jax.tree.map(jnp.add, total, g), (v, p)
                zeros = jax.tree.map(jnp.zeros_like, trainable)
                total, (values, pers) = jax.lax.scan(accumulate, zeros, batches)
                grads = jax.tree.map(lambda g: g / micro, total)
                value, per = jnp.mean(values), jnp.mean(pers, axis=0)

            new_params, new_opt, lr = dict(params), dict(state["opt"][index]), {}
            for name in entry.models:
                count, tx_state = new_opt[name]
                value_fn = lambda p, name=name: mean_loss({**trainable, name: p}, params, batches)
                updates, tx_state = transforms[name].update(grads[name], tx_state, trainable[name], value=value,
                                                             grad=grads[name], value_fn=value_fn)
                new_params[name] = optax.apply_updates(trainable[name], updates)
                new_opt[name] = (count + 1, tx_state)
                schedule = models[name].schedule
                lr[name] = schedule(count).astype(jnp.float32) if schedule is not None else jnp.float32(jnp.nan)
            # A non-finite loss or update leaves parameters and optimizer state as they were; the caller stops.
            finite = jnp.isfinite(value)
            if check_updates:
                finite = finite & _all_finite({m: new_params[m] for m in entry.models})
            # After one, nothing more is applied, so the caller gets the parameters from before it.
            apply = finite & ~state["failed"]
            keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(apply, a, b), new, old)
            opt = list(state["opt"])
            opt[index] = keep(new_opt, state["opt"][index])
            new_state = {"params": keep(new_params, params), "opt": tuple(opt), "step": state["step"] + 1,
                         "failed": state["failed"] | ~finite}
            return new_state, (per, lr, finite)
        return update

    def epoch(data: dict) -> Callable:
        def run(state: State, epoch_batches: Any) -> tuple[State, tuple]:
            sums = [jnp.float32(0.0)] * n_constraints
            lr: dict[str, jax.Array] = {}
            finite = jnp.bool_(True)
            offset = 0
            for index, entry in enumerate(entries):
                xs = None if epoch_batches is None else \
                    jax.tree.map(lambda a: a[offset:offset + entry.steps], epoch_batches)
                state, (pers, lrs, oks) = _repeat(entry_update(entry, index, data), state, xs, entry.steps)
                for j, c in enumerate(entry.constraints):
                    sums[c] = sums[c] + jnp.sum(pers[:, j])
                lr.update({name: values[-1] for name, values in lrs.items()})
                finite = finite & jnp.all(oks)
                offset += entry.steps
            losses = [s / n if n else jnp.float32(jnp.nan) for s, n in zip(sums, counts)]
            # One row per epoch: a fused loop stacks one output, not one per figure.
            return state, jnp.stack([*losses, *(lr[name] for name in sorted(lr)), finite.astype(jnp.float32)])
        return run

    def call(state: State, data: dict) -> State:
        xs = None
        if offload:
            xs = jax.tree.map(lambda a: a.reshape(epochs_per_call, steps_per_epoch, *a.shape[1:]), data["batches"])
        records, slot = state["records"], state["slot"]
        state = {key: value for key, value in state.items() if key not in ("records", "slot")}
        state, rows = _repeat(epoch(data), state, xs, epochs_per_call)
        if not check_updates:  # the parameters left behind: a non-finite update marks the call's last epoch
            rows = rows.at[-1, -1].multiply(_all_finite(state["params"]).astype(rows.dtype))
        records = jax.lax.dynamic_update_index_in_dim(records, rows, slot, 0)
        return {**state, "records": records, "slot": (slot + 1) % records.shape[0]}

    return call
