#!/usr/bin/env python
"""Benchmark crux against hand-written JAX + optax training loops, and check the targets of docs/BENCHMARK.md.

    python scripts/bench.py                                  # every problem (about 10 min on 2 CPU cores)
    python scripts/bench.py --quick                          # smoke run, under a minute
    python scripts/bench.py --problems standard,small --out bench-out --mlflow
    python scripts/bench.py --jno jno.json                   # merge the column of scripts/bench_jno.sh
    python scripts/bench.py --readme                         # README.md's speed table from this commit (~10 min)
    python scripts/bench.py --readme-from tpu/bench.json     # ... from a run elsewhere, in its device's column
    python scripts/bench.py --problems throughput --sizes 16384,65536 --widths 64,512 --peak-tflops 197

Reference problems: -u'' = pi^2 sin(pi x) on [0, 1] with u = x(1-x) N(x), N a tanh MLP, Adam 1e-3.

- ``standard``: 1024 uniform points, N = 1-64-64-64-1, full batch;
- ``small``: 64 points, N = 1-32-32-32-1 (dispatch-bound);
- ``accumulation``: the standard problem with batches of 8, of 32, and 4 micro-batches of 8;
- ``laplacian``: the 2-D analogue -Δu = 2 pi^2 sin(pi x) sin(pi y), u = x(1-x)y(1-y) N(x, y) on 1024
  points, to rank the Laplacian formulations where there is more than one direction;
- ``scaling``: the standard problem from 1k to 64k points and from width 32 to 256;
- ``fusing``: Burgers' equation on (x, t) (u_t, u_x, u_xx), updates of 4 micro-batches of 8: crux's time per
  update at K = 1, 10, 100, 1000 updates a call, each against K = 1's;
- ``throughput``: full batch, fused ×100, at ``--sizes`` and ``--widths``, at each of ``--precisions``: crux beside
  the hand-written scan, FLOP/s (XLA's count of an update over its time) and the fraction of ``--peak-tflops``;
- ``shapes``: the 2-D problem in shapes users train, few points on a narrow network (256 points, 2 × 32) and many
  on a wide one (16,384 points, 4 × 128; 4,096 on a CPU), at each of ``--precisions``: crux fused ×100 and ×1000
  against the fastest hand-written scan of as many updates (plain, and unrolled four to a turn), back to back.

The standard problem's table also gives the time to a first update: from the first call that trains, in a fresh
process, to the first update's loss on the host (crux's ``solve(1)``; the hand-written loop's trace, compile and
first call; jNO's first ``solve(1)``, with ``--jno``).

The standard and small problems are also fused at K = epochs (one call a round). crux and the hand-written code
run at the same matmul precision (``--precision``; crux's solve() defaults to full float32, hand-written JAX to the
device's fastest); ``--loop-forms`` also times both with their fused loop unrolled or guarded otherwise.

Every variant of a problem is built first (that is where compile seconds are measured), then the
variants are timed in turns, ``repeats`` rounds of ``steps`` updates each, in a rotating order, so
the load of a shared machine falls on all of them alike. Reported: updates per second (median of the
rounds, and min-max), CPU milliseconds per update (all threads of the process: less sensitive to
other processes than wall time, a proxy for work), and ratios against the baselines: of the medians,
and round by round (two variants in the same round meet the same load; the median of those ratios
moves less on a shared machine). Then each crux variant meets the fastest hand-written variant of its
kind (loop, or scan of as many updates a call) in a duel: the two timed back to back, ``DUEL_ROUNDS``
times in alternating order; the target ratios are those duels' (see ``duel``: why not the survey's
rounds). Beside the clock, XLA's count of the FLOPs and bytes of crux's compiled call and of the
hand-written one of crux's formulation (``work``): what each does per update, whatever the machine's load
(the targets ask crux for no more FLOPs). crux's rounds are ``solve()`` calls, so they include its fixed cost,
shown on its own as ``fixed ms/solve``: the round's wall time outside the compiled calls (setting up
the state, reading back the history).

Hand-written baselines: a list of (W, b) layers from crux's initial parameters, the same loss,
``optax.adam(1e-3)`` (tests/test_bench.py checks they make crux's updates); a jitted step
in a Python loop (``loop``) and ``lax.scan`` over k = 10 and 100 steps in one jitted call (``scan k=10``,
``scan k=100``: as many updates a call as crux's ``inner_steps=k``); u'' (or the
Laplacian, summed over the axes unrolled in Python) by each of: forward-over-forward ``jvp``
(``fwd-fwd``, crux's fallback), reverse-over-reverse ``grad`` (``rev-rev``), ``jacfwd(jacrev)``
(``fwd-rev``), Taylor mode ``jax.experimental.jet`` (``jet``), and a hand-derived second-order forward
propagation through the tanh layers, batched over the points (``hand-taylor``; tanh only, the same
formulation crux.laplacian derives generically in crux/taylor.py). Mini-batches are drawn without
replacement like crux's point stream, by the cheapest such draw found (top-k of uniforms, see ``sampled``).
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.experimental import jet

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

import crux  # noqa: E402
from crux import engine, precision as matmul  # noqa: E402
from crux.loop import unrolled as unrolled_by_crux  # noqa: E402
from crux.solver import Machinery  # noqa: E402
from crux.timing.pairs import in_turn  # noqa: E402
from cruxlab.store.contract import BENCH, ROLE, SWEEP  # noqa: E402

PROBLEMS = ("standard", "small", "accumulation", "laplacian", "scaling", "fusing", "throughput", "shapes")
QUICK_PROBLEMS = ("standard", "small", "accumulation")  # the rest compile too many programs for a minute
FORMS = ("fwd-fwd", "rev-rev", "fwd-rev", "jet", "hand-taylor")
SAME_AS_CRUX = "hand-taylor"  # crux.laplacian's formulation: Taylor mode (crux/taylor.py), written by hand
FUSED_STEPS = (10, 100)  # inner_steps of the fused variants: the README's example and the long scan
SCAN_STEPS = FUSED_STEPS[-1]
DUEL_ROUNDS = 16  # back-to-back rounds of each crux variant against the fastest hand-written one
WARMUP_CALLS = 2  # a hand-written variant's first calls allocate: run when built, not timed


# ---------------------------------------------------------------------------------------------------
# Hand-written baselines
# ---------------------------------------------------------------------------------------------------
def initial_layers(widths: tuple[int, ...], seed: int = 0) -> list[tuple[jax.Array, jax.Array]]:
    """crux.mlp's initial parameters (``seed``) as one ``(W, b)`` per layer, its stacks of equal layers split:
    a hand-written loop starts where crux starts, so their losses compare update by update."""
    model = crux.model.mlp(widths[0], widths[-1], widths[1:-1], seed=seed)  # crux.mlp itself, even where patched
    return [(stack["w"][k], stack["b"][k]) for stack in model.params for k in range(stack["w"].shape[0])]


def network(params, x: jax.Array) -> jax.Array:
    """One point ``(d,)`` -> scalar."""
    h = x
    for w, b in params[:-1]:
        h = jnp.tanh(h @ w + b)
    w, b = params[-1]
    return (h @ w + b)[0]


def envelope(x: jax.Array) -> jax.Array:
    """prod_i x_i (1 - x_i): zero on the boundary of the unit cube (the hard boundary condition)."""
    g = x[..., 0] * (1.0 - x[..., 0])
    for i in range(1, x.shape[-1]):  # not jnp.prod: jax.experimental.jet has no rule for reduce_prod
        g = g * x[..., i] * (1.0 - x[..., i])
    return g


def solution(params, x: jax.Array) -> jax.Array:
    return envelope(x) * network(params, x)


def source(x: jax.Array) -> jax.Array:
    """-Δ of prod_i sin(pi x_i)."""
    d = x.shape[-1]
    return d * jnp.pi ** 2 * jnp.prod(jnp.sin(jnp.pi * x), axis=-1)


def _eye(x: jax.Array) -> jax.Array:
    return jnp.eye(x.shape[0], dtype=x.dtype)


def _directions(x: jax.Array) -> list[jax.Array]:
    eye = jnp.eye(x.shape[0], dtype=x.dtype)
    return [eye[i] for i in range(x.shape[0])]


def laplacian_fwd_fwd(f: Callable) -> Callable:
    """sum_i d^2 f / dx_i^2 by jvp of jvp along each axis, the axes unrolled in Python.

    Unrolled, not ``vmap`` over the identity (crux.laplacian's form): vmapping the directions made the
    2-D and 3-D steps 1.4-1.7x slower on 2 CPU cores (scripts/bench.py problem ``laplacian``)."""
    def lap(x):
        def second(e):
            return jax.jvp(lambda y: jax.jvp(f, (y,), (e,))[1], (x,), (e,))[1]
        return sum(second(e) for e in _directions(x))
    return lap


def laplacian_rev_rev(f: Callable) -> Callable:
    """sum_i d/dx_i (df/dx_i), each by reverse mode (``jnp.trace(jacrev(grad(f)))`` was 1.6x slower in 1-D)."""
    def lap(x):
        gradient = jax.grad(f)
        return sum(jax.grad(lambda y, i=i: gradient(y)[i])(x)[i] for i in range(x.shape[0]))
    return lap


def laplacian_fwd_rev(f: Callable) -> Callable:
    return lambda x: jnp.trace(jax.jacfwd(jax.jacrev(f))(x))


def laplacian_jet(f: Callable) -> Callable:
    def lap(x):
        # jet's series are derivatives (not divided by k!): the second term is e^T H e.
        return sum(jet.jet(f, (x,), ((e, jnp.zeros_like(e)),))[1][1] for e in _directions(x))
    return lap


POINTWISE = {"fwd-fwd": laplacian_fwd_fwd, "rev-rev": laplacian_rev_rev, "fwd-rev": laplacian_fwd_rev,
             "jet": laplacian_jet}


def taylor_laplacian(params, xs: jax.Array) -> jax.Array:
    """Δ(envelope * N) at points ``(B, d)`` by pushing value, first and second directional derivatives
    along each axis through the tanh layers at once (tanh' = s = 1 - t^2, tanh'' = -2 t s).

    One ``(B, width)`` array per axis: a ``(B, d, width)`` layout was 1.15x slower than fwd-fwd in 1-D."""
    batch, d = xs.shape
    h = xs
    dh = [jnp.broadcast_to(jnp.eye(d, dtype=xs.dtype)[i], (batch, d)) for i in range(d)]
    ddh = [jnp.zeros_like(xs) for _ in range(d)]
    for w, b in params[:-1]:
        t = jnp.tanh(h @ w + b)
        s = 1.0 - t * t
        dz, ddz = [v @ w for v in dh], [v @ w for v in ddh]
        h, dh, ddh = t, [s * v for v in dz], [s * a - 2.0 * t * s * v * v for a, v in zip(ddz, dz)]
    w, b = params[-1]
    n = (h @ w + b)[:, 0]
    grad_n = jnp.stack([(v @ w)[:, 0] for v in dh], 1)
    second_n = jnp.stack([(v @ w)[:, 0] for v in ddh], 1)
    g = xs * (1.0 - xs)                                       # per-axis factors of the envelope
    g_all = jnp.prod(g, axis=1)
    others = g_all[:, None] / jnp.where(g == 0, 1.0, g)       # product over the other axes
    grad_g, second_g = (1.0 - 2.0 * xs) * others, -2.0 * others
    return g_all * jnp.sum(second_n, 1) + 2.0 * jnp.sum(grad_g * grad_n, 1) + n * jnp.sum(second_g, 1)


def residual_loss(form: str) -> Callable:
    """``loss(params, xs (B, d)) = mean((-Δu - f)^2)``."""
    if form == "hand-taylor":
        return lambda params, xs: jnp.mean(jnp.square(-taylor_laplacian(params, xs) - source(xs)))
    lap = POINTWISE[form]

    def loss(params, xs):
        laps = jax.vmap(lambda x: lap(lambda y: solution(params, y))(x))(xs)
        return jnp.mean(jnp.square(-laps - source(xs)))
    return loss


def sampled(loss: Callable, n: int, batch: int | None, micro: int) -> Callable:
    """``step_loss_and_grad(params, points, key, step)``: full batch, or ``micro`` micro-batches of ``batch``
    drawn without replacement at each update (crux's point-stream semantics).

    The draw is the top ``micro * batch`` of ``n`` uniform numbers: a uniformly random subset in random
    order, like ``permutation(n)[:m]``, but without sorting all ``n`` keys (measured on 2 CPU cores:
    13-19 us against 210-230 us per draw at n = 1024, 0.6-1 ms against 44 ms at n = 65536).
    """
    value_and_grad = jax.value_and_grad(loss)
    if batch is None or batch >= n:
        return lambda params, points, key, step: value_and_grad(params, points)

    def draw(params, points, key, step):
        take = jax.lax.top_k(jax.random.uniform(jax.random.fold_in(key, step), (n,)), micro * batch)[1]
        batches = points[take].reshape(micro, batch, points.shape[1])
        if micro == 1:
            return value_and_grad(params, batches[0])

        def accumulate(total, xs):
            value, grads = value_and_grad(params, xs)
            return jax.tree.map(jnp.add, total, grads), value
        total, values = jax.lax.scan(accumulate, jax.tree.map(jnp.zeros_like, params), batches)
        return jnp.mean(values), jax.tree.map(lambda g: g / micro, total)
    return draw


def _cpu_seconds() -> float:
    return time.process_time()


@dataclass
class Variant:
    """A way to train: ``build()`` compiles and returns seconds; ``run(steps)`` -> (wall, cpu) seconds."""

    name: str
    family: str  # "crux", "hand", "jNO"
    steps_per_call: int = 1
    compile_seconds: float = float("nan")
    flops: float | None = None
    info: dict = field(default_factory=dict)

    def build(self) -> float:
        raise NotImplementedError

    def run(self, steps: int) -> tuple[float, float]:
        raise NotImplementedError


@dataclass(frozen=True)
class LoopForm:
    """How a fused loop is written: ``unroll`` updates per iteration of the scan, and the finiteness guard of an
    update: ``None`` (each as it is written: crux keeps an update if its loss is finite, the hand-written loop
    keeps every update), ``"loss"`` (the hand-written loop guarded as crux is) or ``"full"`` (an update kept if
    its loss and the new parameters are finite, both: crux's replay program).

    On the chip either may decide crux against hand-written JAX; ``--loop-forms`` times crux and the
    hand-written scan in each form asked for, side by side."""

    unroll: int = 1
    guard: str | None = None
    tree: bool = False  # crux's parameters kept as each model's tree of arrays, not packed into one vector

    @property
    def crux_default(self) -> bool:
        """crux's own form: no unrolling, its own guard and parameter layout."""
        return self.unroll == 1 and self.guard != "full" and not self.tree

    @property
    def changes_hand(self) -> bool:
        """Whether the hand-written scan differs in this form (it always keeps its parameters as a tree)."""
        return self.unroll > 1 or self.guard is not None

    @property
    def label(self) -> str:
        parts = ([f"unroll={self.unroll}"] if self.unroll > 1 else []) + ([f"{self.guard}-check"] if self.guard
                                                                          else []) + (["tree"] if self.tree else [])
        return "+".join(parts) or "plain"


GUARDS = {"loss-check": "loss", "full-check": "full"}


def loop_forms(text: str) -> list[LoopForm]:
    """``--loop-forms``: comma-separated forms, each ``+``-joined from ``unroll=U``, ``loss-check``, ``full-check``
    and ``tree`` (e.g. ``unroll=4,full-check,unroll=8+tree``); ValueError naming the option and its syntax."""
    forms = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        unroll, guard, tree = 1, None, False
        for part in item.split("+"):
            match = re.fullmatch(r"unroll=(\d+)", part.strip())
            if match and int(match.group(1)) >= 1:
                unroll = int(match.group(1))
            elif part.strip() in GUARDS:
                guard = GUARDS[part.strip()]
            elif part.strip() == "tree":
                tree = True
            else:
                raise ValueError(f"--loop-forms: {part.strip()!r} is not a loop form; use unroll=U (U >= 1), "
                                 f"loss-check, full-check or tree, joined by + within a form and by commas between "
                                 f"forms, e.g. --loop-forms unroll=4,full-check,unroll=8+tree")
        forms.append(LoopForm(unroll, guard, tree))
    return forms


def _all_finite(tree: Any) -> jax.Array:
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(tree)]))


def traced_at(precision: str, function: Callable) -> Callable:
    """``function`` traced at the matmul ``precision``; ``"default"``: untouched, as hand-written code runs."""
    if precision == "default":
        return function

    def at(*args):
        with jax.default_matmul_precision(precision):
            return function(*args)
    return at


class HandVariant(Variant):
    def __init__(self, name: str, form: str, points: np.ndarray, widths: tuple[int, ...], steps_per_call: int,
                 batch: int | None = None, micro: int = 1, seed: int = 0, precision: str = "default",
                 loop: LoopForm = LoopForm()):
        super().__init__(name, "hand", steps_per_call, info={"form": form, "precision": precision,
                                                             "loop_form": loop.label})
        self.form, self.points, self.widths, self.batch, self.micro = form, points, widths, batch, micro
        self.seed, self.precision, self.loop = seed, precision, loop

    def build(self) -> float:
        params = initial_layers(self.widths, self.seed)
        tx = optax.adam(1e-3)
        loss_and_grad = sampled(residual_loss(self.form), len(self.points), self.batch, self.micro)
        k, guard = self.steps_per_call, self.loop.guard

        def call(carry, data):
            def step(carry, _):
                params, opt_state, t = carry
                value, grads = loss_and_grad(params, data["points"], data["key"], t)
                updates, new_opt_state = tx.update(grads, opt_state, params)
                new_params = optax.apply_updates(params, updates)
                if guard is not None:
                    keep = jnp.isfinite(value) & (_all_finite(new_params) if guard == "full" else True)
                    new_params, new_opt_state = jax.tree.map(lambda a, b: jnp.where(keep, a, b),
                                                             (new_params, new_opt_state), (params, opt_state))
                return (new_params, new_opt_state, t + 1), value
            if k == 1:
                carry, value = step(carry, None)
                return carry, value[None]
            return jax.lax.scan(step, carry, None, length=k, unroll=self.loop.unroll)

        self.carry = (params, tx.init(params), jnp.int32(0))
        data = {"points": jnp.asarray(self.points), "key": jax.random.key(self.seed)}
        start = time.perf_counter()
        self.call = jax.jit(traced_at(self.precision, call), donate_argnums=0).lower(self.carry, data).compile()
        self.compile_seconds = time.perf_counter() - start
        if k == 1:  # a scan body is counted once, so only the loop's is per step
            self.flops = work(self.call).get("flops")
        self.data_arrays = data
        self.info["first_call_seconds"] = self.run(k)[0]
        self.run((WARMUP_CALLS - 1) * k)
        return self.compile_seconds

    def run(self, steps: int) -> tuple[float, float]:
        calls, data = max(steps // self.steps_per_call, 1), self.data_arrays
        wall, cpu = time.perf_counter(), _cpu_seconds()
        for _ in range(calls):
            self.carry, values = self.call(self.carry, data)
        jax.block_until_ready(self.carry)
        self.last_loss = float(values[-1])
        return time.perf_counter() - wall, _cpu_seconds() - cpu


class CruxVariant(Variant):
    """``solve()`` on a crux problem; the first solve (``first_epochs``) compiles and is the reference run."""

    def __init__(self, name: str, make_problem: Callable[[], Any], inner_steps: int, first_epochs: int,
                 batchsize: int | None = None, accumulation_steps: int = 1, precision: str = "default",
                 loop: LoopForm = LoopForm()):
        super().__init__(name, "crux", inner_steps, info={"inner_steps": inner_steps, "batchsize": batchsize,
                                                           "accumulation_steps": accumulation_steps,
                                                           "precision": precision, "loop_form": loop.label})
        self.make_problem, self.first_epochs, self.loop = make_problem, first_epochs, loop
        self.options = dict(inner_steps=inner_steps, batchsize=batchsize, accumulation_steps=accumulation_steps,
                            precision=precision)
        self.recompile_seconds: list[float] = []
        self.fixed_seconds: list[float] = []  # per solve(): time outside its compiled calls (setup, history)

    def build(self) -> float:
        self.problem = self.make_problem()
        self.solver = self.problem.solver()
        if not self.loop.crux_default:  # the same problem, its calls built in another loop form
            self.solver = crux.Crux(self.solver.constraints, self.solver.models, machinery=crux_machinery(self.loop))
        start = time.perf_counter()
        stats = self.solver.solve(epochs=self.first_epochs, **self.options)
        self.info["first_solve_seconds"] = time.perf_counter() - start
        self.compile_seconds = float(stats.compile_seconds)
        self.info["first_solve_final_loss"] = stats.final_loss
        try:
            errors = list(self.problem.relative_l2().values())
            self.info["first_solve_relative_l2"] = float(np.mean(errors)) if errors else None
        except Exception as error:  # an accuracy figure is a bonus here, never a reason to stop the benchmark
            self.info["first_solve_relative_l2"] = f"{type(error).__name__}: {error}"
        self.info["memory"] = dict(stats.memory)
        return self.compile_seconds

    def run(self, steps: int) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), _cpu_seconds()
        stats = self.solver.solve(epochs=steps, **self.options)
        wall, cpu = time.perf_counter() - wall, _cpu_seconds() - cpu
        self.recompile_seconds.append(float(stats.compile_seconds))  # a second solve() must compile nothing
        self.fixed_seconds.append(wall - stats.run_seconds)
        self.last_loss = stats.final_loss
        return wall, cpu


def work(compiled: Any) -> dict[str, float]:
    """XLA's count of what one run of a compiled program does: ``flops`` and ``bytes`` (accessed), from its cost
    analysis. A loop's body is counted once, so a fused call of k updates counts as one update (and the work
    outside its loop): the figures compare per update, free of timing noise. Empty where the backend counts
    nothing."""
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    if not cost or "flops" not in cost:
        return {}
    return {"flops": float(cost["flops"]), "bytes": float(cost.get("bytes accessed", float("nan")))}


def per_turn(counts: dict[str, float], unroll: int) -> dict[str, float]:
    """:func:`work` of a loop whose body makes ``unroll`` updates, per update."""
    return {name: value / unroll for name, value in counts.items()}


def unrolled(unroll: int) -> Callable:
    """crux's ``repeat`` (engine.Primitives) with ``unroll`` iterations of its scan per loop iteration, whatever
    the engine would choose."""
    def repeat(body: Callable, carry: Any, xs: Any, length: int, **chosen: int) -> tuple[Any, Any]:
        return engine.repeat(body, carry, xs, length, unroll=unroll)
    return repeat


def crux_machinery(loop: LoopForm) -> Machinery:
    """crux's machinery with its fused loop in the form ``loop``, through the solver's own seams (its primitives
    and the function that traces a plan), the engine untouched: ``unroll`` for the scan of the call's updates (and
    of an epoch's micro-batches), guard ``"full"`` for the program that checks every update's parameters, which
    crux otherwise runs only to replay a non-finite window (any other guard: crux's own, the loss)."""
    primitives = engine.Primitives(repeat=unrolled(loop.unroll)) if loop.unroll > 1 else engine.Primitives()
    flat = False if loop.tree else None
    if loop.guard == "full":
        return Machinery(primitives=primitives, flat_params=flat,
                         make_call=lambda plan: engine.make_call(dataclasses.replace(plan, check_updates=True)))
    return Machinery(primitives=primitives, flat_params=flat)


# ---------------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------------
def measure(variants: list[Variant], steps: int, repeats: int, log: Callable[[str], None]) -> dict[str, dict]:
    """Build every variant, then time ``repeats`` rounds of ``steps`` updates, interleaved."""
    for variant in variants:
        variant.build()
        log(f"  built {variant.name:<34} compile {variant.compile_seconds:6.2f} s")
    rounds: dict[str, list[tuple[float, float]]] = {v.name: [] for v in variants}
    for r in range(repeats):
        order = variants[r % len(variants):] + variants[:r % len(variants)]
        for variant in order:
            rounds[variant.name].append(variant.run(steps))
    results = {}
    for variant in variants:
        wall = np.array([w for w, _ in rounds[variant.name]])
        cpu = np.array([c for _, c in rounds[variant.name]])
        rate = steps / wall
        result = {"family": variant.family, "steps_per_call": variant.steps_per_call,
                  "compile_seconds": variant.compile_seconds, "steps": steps, "repeats": repeats,
                  "steps_per_second": {"median": float(np.median(rate)), "min": float(rate.min()),
                                       "max": float(rate.max()), "all": rate.tolist()},
                  "ms_per_step": float(np.median(wall) / steps * 1e3),
                  "cpu_ms_per_step": float(np.median(cpu) / steps * 1e3),
                  "final_loss": getattr(variant, "last_loss", None), **variant.info}
        if variant.flops is not None:
            result["gflop_per_step"] = variant.flops / 1e9
        if isinstance(variant, CruxVariant):
            result["recompile_seconds"] = variant.recompile_seconds
            result["second_solve_compiles_nothing"] = all(s == 0 for s in variant.recompile_seconds)
            result["fixed_ms_per_solve"] = float(np.median(variant.fixed_seconds) * 1e3)
        results[variant.name] = result
        log(f"  {variant.name:<34} {result['steps_per_second']['median']:9.1f} steps/s "
            f"[{rate.min():.1f}-{rate.max():.1f}]  cpu {result['cpu_ms_per_step']:.3f} ms/step")
    return results


def rate(results: dict, name: str) -> float:
    return results[name]["steps_per_second"]["median"] if name in results else float("nan")


def paired_ratio(results: dict, a: str, b: str) -> dict[str, float]:
    """Steps/s of ``a`` over ``b`` round by round: both run in the same round of the rotation, so a load that
    slows one round slows both alike, and the median of these ratios is steadier than the ratio of medians."""
    ratio = np.array(results[a]["steps_per_second"]["all"]) / np.array(results[b]["steps_per_second"]["all"])
    return {"median": float(np.median(ratio)), "min": float(ratio.min()), "max": float(ratio.max())}


def fastest(results: dict, names: list[str]) -> str:
    return max((n for n in names if n in results), key=lambda n: rate(results, n))


def split_call(seconds_per_call: dict[int, float]) -> dict[str, float]:
    """A call of k updates taking ``per_call + k * per_update`` seconds, fitted to the smallest and the largest k of
    ``seconds_per_call`` (k -> seconds): both in microseconds."""
    k1, k2 = min(seconds_per_call), max(seconds_per_call)
    per_update = (seconds_per_call[k2] - seconds_per_call[k1]) / (k2 - k1)
    return {"per_call_us": (seconds_per_call[k1] - k1 * per_update) * 1e6, "per_update_us": per_update * 1e6}


def call_costs(results: dict, names: dict[int, str]) -> dict[str, float] | None:
    """:func:`split_call` of one way to train from its medians (``names``: k -> variant), or None where it did not
    run at two values of k. What a fused call costs beyond its updates (starting the loop, the work outside it)
    shows as ``per_call``; crux's rounds also spread its fixed cost per solve() over their updates, which lands
    in ``per_update``."""
    if len(names) < 2 or any(name not in results for name in names.values()):
        return None
    return split_call({k: k / rate(results, name) for k, name in names.items()})


def duel(a: Variant, b: Variant, steps: int, rounds: int) -> dict[str, Any]:
    """Steps/s of ``a`` over ``b``, timed back to back ``rounds`` times, the order alternating (a b, b a, ...).

    The survey's rounds choose ``b`` (the fastest hand-written variant) and the duel times it afresh: a choice
    and a comparison made on the same rounds favour whichever variant had lucky rounds, as the largest of
    several noisy medians overstates its variant. Back to back, the two meet the same load, which rounds
    with twenty variants between them do not. The order alternates as in crux's paired timing
    (:func:`crux.timing.pairs.in_turn`)."""
    ratios, sides = [], (a, b)
    for r in range(rounds):
        seconds = {sides[side].name: sides[side].run(steps)[0] for side in in_turn(r)}
        ratios.append(seconds[b.name] / seconds[a.name])
    ratio = np.array(ratios)
    return {"median": float(np.median(ratio)), "min": float(ratio.min()), "max": float(ratio.max()),
            "rounds": rounds, "back_to_back": True, "all": ratio.tolist()}


def first_update(family: str, precision: str) -> float:
    """Seconds from the first call that trains the standard problem, in this process, to the first update's loss
    on the host: crux's ``solve(1)`` (planning, compiling, the update), or the hand-written loop's trace,
    compile and first call. Run in a fresh process, so that nothing is compiled or cached before it."""
    n, hidden = 1024, (64, 64, 64)
    if family == "crux":
        solver = poisson_problem(n, hidden)().solver()
        start = time.perf_counter()
        float(solver.solve(1, precision=precision).final_loss)
        return time.perf_counter() - start
    hand = HandVariant("first update", SAME_AS_CRUX, interior(n), (1, *hidden, 1), 1, precision=precision)
    hand.build()
    return hand.compile_seconds + hand.info["first_call_seconds"]


def first_updates(plan: "Plan", log) -> dict[str, float]:
    """:func:`first_update` of crux and of the hand-written loop, each in fresh processes (JAX's persistent
    compilation cache off), in alternating order: the median over ``plan.repeats`` of each. Called before this
    process opens the device, which a TPU lets one process hold at a time."""
    seconds: dict[str, list[float]] = {"crux": [], "hand": []}
    for r in range(plan.repeats):
        for family in ("crux", "hand") if r % 2 == 0 else ("hand", "crux"):
            out = subprocess.run([sys.executable, __file__, "--first-update", family, "--precision", plan.precision],
                                 capture_output=True, text=True, check=True,
                                 env={**os.environ, "JAX_ENABLE_COMPILATION_CACHE": "false"})
            seconds[family].append(float(out.stdout.split()[-1]))
    result = {family: float(np.median(values)) for family, values in seconds.items()}
    log(f"  time to first update: crux {result['crux']:.2f} s, hand-written {result['hand']:.2f} s")
    return result


# ---------------------------------------------------------------------------------------------------
# Problems
# ---------------------------------------------------------------------------------------------------
@dataclass
class Plan:
    """How long to time each problem: updates per round, rounds, and the first (reference) solve."""

    quick: bool
    repeats: int
    precision: str = "default"  # of crux's and the hand-written programs alike: like is compared with like
    loop_forms: tuple[LoopForm, ...] = ()  # fused loops also timed in these forms (standard and small problems)

    def steps(self, full: int, quick: int) -> int:
        return quick if self.quick else full

    @property
    def duel_rounds(self) -> int:
        """Back-to-back rounds of crux against the fastest hand-written variant (see ``duel``)."""
        return 4 if self.quick else DUEL_ROUNDS


def interior(n: int) -> np.ndarray:
    return np.linspace(0.0, 1.0, n + 2, dtype=np.float32)[1:-1, None]


def grid2d(n: int) -> np.ndarray:
    side = int(round(math.sqrt(n)))
    axis = np.linspace(0.0, 1.0, side + 2, dtype=np.float32)[1:-1]
    return np.stack(np.meshgrid(axis, axis, indexing="ij"), -1).reshape(-1, 2)


def poisson_problem(n: int, hidden: tuple[int, ...], laplacian_mode: str = "taylor") -> Callable[[], Any]:
    return lambda: crux.problems.poisson1d(n_interior=n, hidden=hidden, hard_boundary=True,
                                           laplacian_mode=laplacian_mode)


def laplacian2d_problem(points: np.ndarray, hidden: tuple[int, ...]) -> Callable[[], Any]:
    """The 2-D analogue built from the public API: a Constraint, crux.mlp, crux.laplacian."""
    def make():
        model = crux.mlp(2, 1, hidden)
        model.optimizer(optax.adam).scale(crux.lrs(1e-3))
        u_of = lambda net: (lambda x: envelope(x) * net.u(x))
        constraint = crux.Constraint("pde", lambda net, x: -crux.laplacian(u_of(net))(x) - source(x), points)

        class Problem2D:  # the two things CruxVariant asks of a problem
            solver_ = crux.Crux([constraint], {"u": model})

            def solver(self):
                return self.solver_

            def relative_l2(self):
                exact = np.prod(np.sin(np.pi * points), axis=1)
                guess = np.prod(points * (1 - points), axis=1) * np.asarray(model(points))[:, 0]
                return {"u": float(np.linalg.norm(guess - exact) / np.linalg.norm(exact))}
        return Problem2D()
    return make


def hand_survey(points: np.ndarray, widths: tuple[int, ...], fused: tuple[int, ...], forms=FORMS,
                modes=("loop", "scan"), **options) -> list[Variant]:
    """The hand-written variants: a loop of one update a call, and a scan of ``k`` updates a call for each
    ``k`` in ``fused``, with each derivative formulation in ``forms``."""
    out = []
    for mode in modes:
        for k in (1,) if mode == "loop" else fused:
            for form in forms:
                out.append(HandVariant(hand_name(mode, k, form), form, points, widths, k, **options))
    return out


def hand_name(mode: str, k: int, form: str) -> str:
    return f"hand loop {form}" if mode == "loop" else f"hand scan k={k} {form}"


def fused_depths(steps: int) -> tuple[int, ...]:
    """The fused depths of a problem timed in rounds of ``steps`` updates: ``FUSED_STEPS`` and K = epochs (one
    call runs a round's every update), none deeper than a round."""
    return tuple(sorted({min(k, steps) for k in (*FUSED_STEPS, steps)}))


def formed(name: str, loop: LoopForm) -> str:
    return f"{name} [{loop.label}]"


def loop_form_variants(plan: Plan, make_problem: Callable[[], Any], points: np.ndarray, widths: tuple[int, ...],
                       fused: tuple[int, ...], first: int) -> list[Variant]:
    """crux and the hand-written scan of crux's formulation in each of ``plan.loop_forms`` at each fused depth
    (crux's own form, a loss check alone, is its plain variant)."""
    out: list[Variant] = []
    for loop in plan.loop_forms:
        for k in fused:
            if not loop.crux_default:
                out.append(CruxVariant(formed(f"crux inner_steps={k}", loop), make_problem, k, first,
                                       precision=plan.precision, loop=loop))
            if loop.changes_hand:
                out.append(HandVariant(formed(hand_name("scan", k, SAME_AS_CRUX), loop), SAME_AS_CRUX, points, widths,
                                       k, precision=plan.precision, loop=loop))
    return out


def loop_form_pairs(results: dict, plan: Plan, fused: tuple[int, ...]) -> dict[str, tuple[str, str]]:
    """Each crux loop form against the hand-written scan in the same form, and each against crux's own."""
    pairs = {}
    for loop in plan.loop_forms:
        for k in fused:
            ours, hand = formed(f"crux inner_steps={k}", loop), hand_name("scan", k, SAME_AS_CRUX)
            if loop.changes_hand:
                hand = formed(hand, loop)
            if loop.crux_default:
                ours = f"crux inner_steps={k}"
            if ours in results and hand in results:
                pairs[f"{ours} / {hand}"] = (ours, hand)
            if ours in results and ours != f"crux inner_steps={k}":
                pairs[f"{ours} / crux inner_steps={k}"] = (ours, f"crux inner_steps={k}")
            if loop.changes_hand and hand in results:
                pairs[f"{hand} / {hand_name('scan', k, SAME_AS_CRUX)}"] = (hand, hand_name("scan", k, SAME_AS_CRUX))
    return pairs


def bench_standard(plan: Plan, log, name="standard", n=1024, hidden=(64, 64, 64), full_steps=500,
                   quick_steps=40, first_full=2000, forms=FORMS) -> dict:
    steps = plan.steps(full_steps, quick_steps)
    fused = fused_depths(steps)
    first = plan.steps(first_full, steps)
    first = first - first % steps  # solve(epochs=first) at every fused depth: a multiple of K = epochs
    crux_name = lambda k: f"crux inner_steps={k}"
    variants: list[Variant] = [CruxVariant(crux_name(k), poisson_problem(n, hidden), k, first,
                                           precision=plan.precision) for k in (1, *fused)]
    crux_reverse = lambda k: f"{crux_name(k)}, laplacian_mode=reverse"
    if "rev-rev" in forms:  # crux with the hand scans' rev-rev formulation of u'', at each fused k
        variants += [CruxVariant(crux_reverse(k), poisson_problem(n, hidden, "reverse"), k, first,
                                 precision=plan.precision) for k in fused]
    variants += hand_survey(interior(n), (1, *hidden, 1), fused, forms, precision=plan.precision)
    variants += loop_form_variants(plan, poisson_problem(n, hidden), interior(n), (1, *hidden, 1), fused, first)
    results = measure(variants, steps, plan.repeats, log)
    loops = [v for v in results if v.startswith("hand loop")]
    scans = {k: [v for v in results if v.startswith(f"hand scan k={k} ")] for k in fused}
    best_loop, best_scan = fastest(results, loops), {k: fastest(results, scans[k]) for k in fused}
    best_hand = fastest(results, loops + sum(scans.values(), []))
    best_crux = fastest(results, [v for v in results if v.startswith("crux")])
    pairs = {"crux inner_steps=1 / fastest hand loop": (crux_name(1), best_loop)}
    for k in fused:
        pairs[f"{crux_name(k)} / fastest hand scan k={k}"] = (crux_name(k), best_scan[k])
    pairs["fastest crux / fastest hand"] = (best_crux, best_hand)
    pairs[f"crux inner_steps=1 / hand loop {SAME_AS_CRUX}"] = (crux_name(1), hand_name("loop", 1, SAME_AS_CRUX))
    for k in fused:
        pairs[f"{crux_name(k)} / {hand_name('scan', k, SAME_AS_CRUX)}"] = (crux_name(k),
                                                                            hand_name("scan", k, SAME_AS_CRUX))
    pairs.update(loop_form_pairs(results, plan, fused))
    for k in fused:
        if crux_reverse(k) in results:
            pairs[f"{crux_reverse(k)} / {hand_name('scan', k, 'rev-rev')}"] = (crux_reverse(k),
                                                                                hand_name("scan", k, "rev-rev"))
            pairs[f"fastest crux inner_steps={k} (either laplacian_mode) / fastest hand scan k={k}"] = (
                fastest(results, [crux_name(k), crux_reverse(k)]), best_scan[k])
    costs = {"crux": call_costs(results, {k: crux_name(k) for k in fused}),
             "crux, laplacian_mode=reverse": call_costs(results, {k: crux_reverse(k) for k in fused}),
             **{f"hand scan {form}": call_costs(results, {k: hand_name("scan", k, form) for k in fused})
                for form in forms}}
    # crux against the fastest hand-written variant at the same k: back to back; the other pairs from the survey
    dueled = ["crux inner_steps=1 / fastest hand loop", *(f"{crux_name(k)} / fastest hand scan k={k}" for k in fused)]
    by_name = {v.name: v for v in variants}
    paired = {key: paired_ratio(results, a, b) for key, (a, b) in pairs.items() if key not in dueled}
    for key in dueled:
        a, b = pairs[key]
        paired[key] = duel(by_name[a], by_name[b], steps, plan.duel_rounds)
        log(f"  {key} ({b}), back to back: {paired[key]['median']:.3f} "
            f"[{paired[key]['min']:.3f}-{paired[key]['max']:.3f}]")
    return {"variants": results, "ratios": {key: rate(results, a) / rate(results, b) for key, (a, b) in pairs.items()},
            "paired": paired, "work": work_per_update(by_name, fused),
            "call_costs": {name: cost for name, cost in costs.items() if cost is not None},
            "fused": list(fused), "epochs": steps, "precision": plan.precision,
            "best": {"loop": best_loop, "scan": best_scan, "hand": best_hand, "crux": best_crux},
            "description": f"{n} points, 1-{'-'.join(map(str, hidden))}-1 tanh, full batch, Adam 1e-3, matmul "
                           f"precision {plan.precision!r} for crux and the hand-written code; {steps} updates per "
                           f"round, fused at K = {', '.join(map(str, fused))} (K = {steps}: one call a round)"}


def work_per_update(variants: dict[str, Variant], fused: tuple[int, ...]) -> dict[int, dict[str, dict]]:
    """k -> XLA's count (:func:`work`) of crux's call of k updates and of the hand-written loop (k = 1) or scan of
    the same formulation (``SAME_AS_CRUX``): what each does per update, whatever the machine's load."""
    out = {}
    for k in (1, *fused):
        hand = variants.get(hand_name("loop" if k == 1 else "scan", k, SAME_AS_CRUX))
        ours = variants.get(f"crux inner_steps={k}")
        if isinstance(hand, HandVariant) and isinstance(ours, CruxVariant):
            compiled = ours.solver.compiled_call(inner_steps=k, precision=ours.options["precision"])
            # the turns of crux's loop: as the engine chooses them for such a small program (crux.loop.unrolled)
            counts = {"crux": per_turn(work(compiled.call), unrolled_by_crux(k, jax.default_backend())),
                      "hand": work(hand.call)}
            if all(counts.values()):
                out[k] = counts
    return out


def bench_small(plan: Plan, log, forms=FORMS) -> dict:
    return bench_standard(plan, log, "small", n=64, hidden=(32, 32, 32), full_steps=2000, quick_steps=200,
                          first_full=2000, forms=forms)


def bench_accumulation(plan: Plan, log, form: str) -> dict:
    """One update of 4 micro-batches of 8 against single updates of 8 and of 32 points (same problem)."""
    n, hidden = 1024, (64, 64, 64)
    steps = plan.steps(1000, 100)
    fused = min(SCAN_STEPS, steps)
    cases = {"b8": dict(batchsize=8), "b32": dict(batchsize=32), "b8x4": dict(batchsize=8, accumulation_steps=4)}
    variants: list[Variant] = []
    for k in ((1,) if plan.quick else (1, fused)):
        for case, options in cases.items():
            variants.append(CruxVariant(f"crux {case} inner_steps={k}", poisson_problem(n, hidden), k, k,
                                        precision=plan.precision, **options))
    hand_cases = ("b8", "b8x4") if plan.quick else tuple(cases)
    for mode, k in (("loop", 1),) if plan.quick else (("loop", 1), ("scan", fused)):
        for case in hand_cases:
            options = cases[case]
            variants.append(HandVariant(f"hand {mode} {form} {case}", form, interior(n), (1, *hidden, 1), k,
                                        batch=options["batchsize"], micro=options.get("accumulation_steps", 1),
                                        precision=plan.precision))
    results = measure(variants, steps, plan.repeats, log)
    ratios = {}
    for prefix in ["crux", f"hand loop {form}", f"hand scan {form}"]:
        for suffix in ["inner_steps=1", f"inner_steps={fused}"] if prefix == "crux" else [""]:
            name = lambda case: " ".join(filter(None, [prefix, case, suffix]))
            label = " ".join(filter(None, [prefix, suffix]))
            t = {case: 1 / rate(results, name(case)) for case in cases if name(case) in results}
            if "b8x4" in t and "b8" in t:
                ratios[f"{label}: t(4x8) / (4 t(8))"] = t["b8x4"] / (4 * t["b8"])
            if "b8x4" in t and "b32" in t:
                ratios[f"{label}: t(4x8) / t(32)"] = t["b8x4"] / t["b32"]
    return {"variants": results, "ratios": ratios, "form": form,
            "description": f"{n} points, 1-64-64-64-1; per update: 8 points, 32 points, 4 micro-batches of 8; "
                           f"{steps} updates per round"}


def bench_laplacian(plan: Plan, log, forms=FORMS) -> dict:
    points, hidden = grid2d(1024), (64, 64, 64)
    steps = plan.steps(100, 10)
    variants: list[Variant] = [CruxVariant("crux inner_steps=1", laplacian2d_problem(points, hidden), 1, steps,
                                           precision=plan.precision)]
    variants += hand_survey(points, (2, *hidden, 1), (), forms, modes=("loop",), precision=plan.precision)
    results = measure(variants, steps, plan.repeats, log)
    loops = [v for v in results if v.startswith("hand loop")]
    best = fastest(results, loops)
    return {"variants": results, "best": {"loop": best},
            "ratios": {"crux inner_steps=1 / fastest hand loop": rate(results, "crux inner_steps=1") /
                       rate(results, best),
                       f"crux inner_steps=1 / hand loop {SAME_AS_CRUX}": rate(results, "crux inner_steps=1") /
                       rate(results, f"hand loop {SAME_AS_CRUX}")},
            "description": f"-Δu = 2 pi^2 sin(pi x) sin(pi y), {len(points)} grid points, 2-64-64-64-1; "
                           f"{steps} updates per round"}


def bench_scaling(plan: Plan, log, form: str) -> dict:
    """crux inner_steps=1 against the hand loop with ``form``, from 1k to 64k points, width 32 to 256."""
    if plan.quick:
        configs = [(1024, 32), (4096, 32)]
    else:
        configs = [(1024, 64), (4096, 64), (16384, 64), (65536, 64), (1024, 32), (1024, 128), (1024, 256)]
    rows = []
    for n, width in configs:
        hidden = (width,) * 3
        pair = [CruxVariant("crux inner_steps=1", poisson_problem(n, hidden), 1, 2, precision=plan.precision),
                HandVariant(f"hand loop {form}", form, interior(n), (1, *hidden, 1), 1, precision=plan.precision)]
        for variant in pair:
            variant.build()
        probe = min(v.run(2)[0] / 2 for v in pair)  # seconds per update, to size the rounds
        steps = int(np.clip((0.15 if plan.quick else 1.0) / probe, 2, 500))
        rounds = {v.name: [] for v in pair}
        for r in range(plan.repeats):
            for variant in (pair if r % 2 == 0 else pair[::-1]):
                rounds[variant.name].append(steps / variant.run(steps)[0])
        row = {"points": n, "width": width, "steps": steps,
               "crux_steps_per_second": float(np.median(rounds[pair[0].name])),
               "hand_steps_per_second": float(np.median(rounds[pair[1].name])),
               "crux_compile_seconds": pair[0].compile_seconds, "hand_compile_seconds": pair[1].compile_seconds}
        row["ratio"] = row["crux_steps_per_second"] / row["hand_steps_per_second"]
        rows.append(row)
        log(f"  {n:6d} points width {width:3d}: crux {row['crux_steps_per_second']:8.2f} steps/s, "
            f"hand {row['hand_steps_per_second']:8.2f} ({row['ratio']:.2f}x)")
    return {"rows": rows, "form": form, "description": f"crux inner_steps=1 vs hand loop {form}; 3 hidden layers"}


def burgers_problem(n: int, hidden: tuple[int, ...], nu: float = 0.01 / math.pi) -> Callable[[], Any]:
    """Burgers' equation u_t + u u_x = nu u_xx on (x, t) in [0, 1]^2 with u(x, 0) = sin(pi x), from the public
    API: two inputs, three partial derivatives (u_t, u_x, u_xx), ``n`` interior and ``n // 8`` initial points."""
    def make():
        rng = np.random.default_rng(0)
        interior_points = rng.uniform(0.0, 1.0, (n, 2)).astype(np.float32)
        initial = np.stack([rng.uniform(0.0, 1.0, n // 8), np.zeros(n // 8)], 1).astype(np.float32)
        u = lambda net: net.u
        pde = lambda net, x: (crux.partial(u(net), 1)(x) + u(net)(x) * crux.partial(u(net), 0)(x)
                              - nu * crux.partial(u(net), 0, 0)(x))
        constraints = [crux.Constraint("pde", pde, interior_points),
                       crux.Constraint("initial", lambda net, x: u(net)(x) - jnp.sin(jnp.pi * x[0]), initial)]
        return crux.problems.problem.Problem("burgers", constraints, {"u": crux.mlp(2, 1, hidden)})
    return make


FUSING_DEPTHS = (1, 10, 100, 1000)


def per_update_cost(results: dict, names: dict[int, str]) -> list[dict[str, float]]:
    """For each fused depth k (``names``: k -> variant): µs per update (median of the rounds), and its time per
    update over K = 1's and over the next shallower depth's, round by round (:func:`paired_ratio`: the median of
    the rounds' ratios and their range; above 1, fusing made an update dearer)."""
    depths = sorted(k for k, name in names.items() if name in results)
    rows = []
    for previous, k in zip([depths[0], *depths], depths):
        against_one = paired_ratio(results, names[depths[0]], names[k])  # steps/s of K=1 over K's: t(K) / t(1)
        rows.append({"k": k, "us_per_update": 1e6 / rate(results, names[k]),
                     "over_k1": against_one["median"], "over_k1_min": against_one["min"],
                     "over_k1_max": against_one["max"],
                     "over_previous": paired_ratio(results, names[previous], names[k])["median"]})
    return rows


def bench_fusing(plan: Plan, log) -> dict:
    """Per-update cost against the fused depth K on Burgers' equation, batches of 4 micro-batches of 8: each K's
    rounds run the same updates (``steps`` a round, one solve()), K = 1 pays a dispatch per update."""
    n, hidden, batch, micro = 1024, (32, 32, 32), 8, 4
    steps = plan.steps(max(FUSING_DEPTHS), 100)
    depths = [k for k in FUSING_DEPTHS if k <= steps]
    names = {k: f"crux inner_steps={k}" for k in depths}
    variants: list[Variant] = [CruxVariant(names[k], burgers_problem(n, hidden), k, steps, batchsize=batch,
                                           accumulation_steps=micro, precision=plan.precision) for k in depths]
    results = measure(variants, steps, plan.repeats, log)
    rows = per_update_cost(results, names)
    for row in rows:
        log(f"  K={row['k']:<5d} {row['us_per_update']:9.1f} µs/update, {row['over_k1']:.3f}x K=1's "
            f"[{row['over_k1_min']:.3f}-{row['over_k1_max']:.3f}], {row['over_previous']:.3f}x the shallower K's")
    return {"variants": results, "per_update": rows, "precision": plan.precision,
            "description": f"Burgers u_t + u u_x = nu u_xx on (x, t), 2-{'-'.join(map(str, hidden))}-1 tanh, {n} "
                           f"interior points, updates of {micro} micro-batches of {batch}, Adam 1e-3; {steps} "
                           f"updates per round at each fused depth K"}


# Throughput at scale: the sizes and widths on a CPU (small: a smoke run) and the fused depth of every row.
THROUGHPUT_SIZES, THROUGHPUT_WIDTHS, THROUGHPUT_K = (1024,), (64,), 100
PRECISIONS = ("default", "highest")


def throughput(flops_per_update: float | None, updates_per_second: float,
               peak_tflops: float | None) -> dict[str, float | None]:
    """FLOP/s of a training loop from XLA's count of an update's FLOPs (:func:`work`) over its time, and the
    fraction of a peak of ``peak_tflops`` (None where no peak or no count is given)."""
    if not flops_per_update:
        return {"tflops": None, "peak_fraction": None}
    flops = flops_per_update * updates_per_second
    return {"tflops": flops / 1e12, "peak_fraction": flops / (peak_tflops * 1e12) if peak_tflops else None}


def bench_throughput(plan: Plan, log, sizes: tuple[int, ...] = THROUGHPUT_SIZES,
                     widths: tuple[int, ...] = THROUGHPUT_WIDTHS, precisions: tuple[str, ...] = PRECISIONS,
                     peak_tflops: float | None = None, k: int = THROUGHPUT_K,
                     on_row: Callable[[dict], None] = lambda result: None) -> dict:
    """Full-batch Adam on the standard problem fused ×``k``, crux beside the hand-written scan of crux's
    formulation, for every size and width (3 hidden layers) at each matmul precision: updates/s, and FLOP/s
    from XLA's count of one update of the hand-written program (the same arithmetic for both: tests hold crux's
    count to it), with the fraction of ``peak_tflops``. ``on_row`` gets the result after every row, so that a
    run cut short keeps its rows."""
    rows: list[dict] = []
    result = {"rows": rows, "k": k, "peak_tflops": peak_tflops,
              "description": f"Poisson 1-D, 3 hidden tanh layers, full batch, Adam 1e-3, fused ×{k}: crux beside "
                             f"the hand-written scan ({SAME_AS_CRUX}); FLOP/s from XLA's count of one update"}
    for n in sizes:
        for width in widths:
            hidden, layers = (width,) * 3, (1, width, width, width, 1)
            counter = HandVariant("count", SAME_AS_CRUX, interior(n), layers, 1)
            counter.build()
            flops = work(counter.call).get("flops")
            for precision in precisions:
                pair = [CruxVariant(f"crux inner_steps={k}", poisson_problem(n, hidden), k, k, precision=precision),
                        HandVariant(hand_name("scan", k, SAME_AS_CRUX), SAME_AS_CRUX, interior(n), layers, k,
                                    precision=precision)]
                try:
                    for variant in pair:
                        variant.build()
                except Exception as error:  # the largest sizes may not fit the device: say so, go on with the rest
                    if "RESOURCE_EXHAUSTED" not in str(error):
                        raise
                    result.setdefault("out_of_memory", []).append({"points": n, "width": width,
                                                                   "precision": precision})
                    log(f"  {n:7d} points width {width:3d} {precision:>7}: out of device memory, skipped")
                    on_row(result)
                    continue
                probe = min(v.run(k)[0] for v in pair) / k  # seconds per update, to size the rounds
                steps = k * int(np.clip(round((0.15 if plan.quick else 1.0) / (probe * k)), 1, 50))
                rounds = {v.name: [] for v in pair}
                for r in range(plan.repeats):
                    for variant in (pair if r % 2 == 0 else pair[::-1]):
                        rounds[variant.name].append(steps / variant.run(steps)[0])
                row = {"points": n, "width": width, "precision": precision, "steps": steps,
                       "flops_per_update": flops}
                for family, variant in zip(("crux", "hand"), pair):
                    rate_ = float(np.median(rounds[variant.name]))
                    row[family] = {"steps_per_second": rate_, "compile_seconds": variant.compile_seconds,
                                   **throughput(flops, rate_, peak_tflops)}
                row["ratio"] = float(np.median(np.array(rounds[pair[0].name]) / np.array(rounds[pair[1].name])))
                rows.append(row)
                log(f"  {n:7d} points width {width:3d} {precision:>7}: crux {row['crux']['steps_per_second']:9.1f} "
                    f"updates/s {_num(row['crux']['tflops'], '{:.3f}')} TFLOP/s, hand "
                    f"{row['hand']['steps_per_second']:9.1f} {_num(row['hand']['tflops'], '{:.3f}')} TFLOP/s "
                    f"({row['ratio']:.2f}x)")
                on_row(result)
    return result


# The shapes problem: (label, points per side of the grid, hidden widths); on a CPU the wide shape at 32 × 32
# points (an update of 16,384 would take some 0.3 s there), fused ×100 only.
SHAPES = (("2-D, 256 points, 2×32", 16, (32, 32)), ("2-D, 16,384 points, 4×128", 128, (128,) * 4))
SHAPE_DEPTHS = (100, 1000)
CPU_WIDE_SIDE = 32
SHAPE_UNROLL = LoopForm(unroll=4)  # the hand-written scan's fastest form on a TPU


def bench_shapes(plan: Plan, log, precisions: tuple[str, ...] = PRECISIONS) -> dict:
    """crux fused ×100 and ×1000 on the 2-D problem in shapes outside the standard ones, each against the fastest
    of the hand-written Taylor scans of as many updates (plain and unrolled four to a turn), back to back, at
    each matmul precision."""
    rows = []
    for label, side, hidden in SHAPES:
        depths = SHAPE_DEPTHS
        if jax.default_backend() == "cpu" and hidden[0] > 32:
            side, depths = CPU_WIDE_SIDE, SHAPE_DEPTHS[:1]
            label = f"{label} ({side * side:,} points on a CPU)"
        points, widths = grid2d(side * side), (2, *hidden, 1)
        steps = plan.steps(max(depths), min(depths))
        depths = tuple(sorted({min(k, steps) for k in depths}))
        for precision in precisions:
            variants: list[Variant] = []
            for k in depths:
                variants.append(CruxVariant(f"crux inner_steps={k}", laplacian2d_problem(points, hidden), k, steps,
                                            precision=precision))
                variants += [HandVariant(formed(hand_name("scan", k, SAME_AS_CRUX), loop), SAME_AS_CRUX, points,
                                         widths, k, precision=precision, loop=loop)
                             for loop in (LoopForm(), SHAPE_UNROLL)]
            log(f"  {label}, precision {precision}")
            results = measure(variants, steps, plan.repeats, log)
            by_name = {v.name: v for v in variants}
            for k in depths:
                best = fastest(results, [n for n in results if n.startswith(f"hand scan k={k} ")])
                pair = duel(by_name[f"crux inner_steps={k}"], by_name[best], steps, plan.duel_rounds)
                rows.append({"shape": label, "points": len(points), "hidden": list(hidden), "precision": precision,
                             "k": k, "steps": steps, "hand": best, "duel": pair,
                             "crux_steps_per_second": rate(results, f"crux inner_steps={k}"),
                             "hand_steps_per_second": rate(results, best)})
                log(f"  {label} {precision} fused ×{k}: crux / {best} {pair['median']:.3f} "
                    f"[{pair['min']:.3f}-{pair['max']:.3f}]")
    return {"rows": rows, "description": "-Δu = 2 pi^2 sin(pi x) sin(pi y) on a grid, u = x(1-x)y(1-y) N(x, y), N a "
                                         "tanh MLP, full batch, Adam 1e-3: crux fused against the fastest hand-written "
                                         "Taylor scan of as many updates (plain or unrolled 4), back to back"}


def shapes_table(p: dict) -> list[str]:
    lines = ["| shape | precision | updates a call | crux updates/s | hand updates/s | fastest hand-written "
             "| crux / hand (back to back) |", "|---|---|---:|---:|---:|---|---:|"]
    lines += [f"| {r['shape']} | {r['precision']} | {r['k']} | {r['crux_steps_per_second']:.1f} | "
              f"{r['hand_steps_per_second']:.1f} | {r['hand']} | {r['duel']['median']:.2f} ({r['duel']['min']:.2f}–"
              f"{r['duel']['max']:.2f}) |" for r in p["rows"]]
    return lines + [""]


def plot_scaling(scaling: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = scaling["rows"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, fixed, label in ((axes[0], "points", ("width", 64), "collocation points (width 64)"),
                                  (axes[1], "width", ("points", 1024), "hidden width (1024 points)")):
        sel = sorted((r for r in rows if r[fixed[0]] == fixed[1]), key=lambda r: r[key])
        if not sel:
            continue
        xs = [r[key] for r in sel]
        ax.loglog(xs, [1e3 / r["crux_steps_per_second"] for r in sel], "o-", label="crux inner_steps=1")
        ax.loglog(xs, [1e3 / r["hand_steps_per_second"] for r in sel], "s--", label=f"hand loop {scaling['form']}")
        ax.set_xlabel(label)
        ax.set_ylabel("ms per update")
        ax.set_xscale("log", base=2)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle("crux vs hand-written JAX: time per Adam update (median of rounds)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------
# jNO column and targets
# ---------------------------------------------------------------------------------------------------
def merge_jno(report: dict, path: Path) -> None:
    """Add the variants of scripts/bench_jno_problems.py's JSON (measured in its own process) to each problem."""
    jno = json.loads(path.read_text())
    report["jno"] = {k: v for k, v in jno.items() if k != "problems"}
    for problem, entry in jno.get("problems", {}).items():
        if problem not in report["problems"]:
            continue
        for name, result in entry.get("variants", {}).items():  # idempotent: called after every problem
            report["problems"][problem]["variants"][name] = {**result, "family": "jNO", "separate_process": True}
        first = entry.get("variants", {}).get("jNO inner_steps=1", {}).get("first_solve_seconds")
        if "first_update" in report["problems"][problem] and first is not None:  # its process's first solve(1)
            report["problems"][problem]["first_update"]["jNO"] = first
        ratios = report["problems"][problem].setdefault("ratios", {})
        ratios.update(entry.get("ratios", {}))
        variants = report["problems"][problem]["variants"]
        by = {family: [n for n, r in variants.items() if r["family"] == family] for family in ("crux", "jNO")}
        if by["crux"] and by["jNO"]:
            ratios["fastest crux / fastest jNO (separate process)"] = \
                rate(variants, fastest(variants, by["crux"])) / rate(variants, fastest(variants, by["jNO"]))
        for name in by["jNO"]:  # the same call of crux, where there is one: "jNO b8 inner_steps=1" -> "crux b8 ..."
            twin = "crux" + name[len("jNO"):]
            if twin in variants:
                ratios[f"{twin} / {name} (separate process)"] = rate(variants, twin) / rate(variants, name)


def targets(report: dict) -> list[dict]:
    """The performance targets of docs/BENCHMARK.md (figures, not test assertions), each with its measured value."""
    out = []
    problems = report["problems"]

    def add(what, value, goal, ok):
        out.append({"target": what, "value": value, "goal": goal,
                    "met": None if value is None or not np.isfinite(value) else bool(ok(value))})

    for name in ("standard", "small"):
        if name not in problems:
            continue
        p = problems[name]
        v = p["variants"]
        jno = [n for n in v if v[n]["family"] == "jNO"]
        if name == "standard":
            add("standard: fastest crux / fastest jNO", rate(v, p["best"]["crux"]) / max(rate(v, n) for n in jno)
                if jno else None, ">= 1.3", lambda x: x >= 1.3)
        for key in [k for k in p["paired"] if re.fullmatch(r"crux inner_steps=\d+ / fastest hand (loop|scan k=\d+)", k)]:
            add(f"{name}: {key} ({_how(p['paired'][key])})", p["paired"][key]["median"], ">= 1.0", lambda x: x >= 1.0)
        for k, counts in p.get("work", {}).items():
            add(f"{name}: FLOPs of an update, crux / hand-written {SAME_AS_CRUX} (XLA's count), {_calls(int(k))}",
                counts["crux"]["flops"] / counts["hand"]["flops"], "<= 1.0", lambda x: x <= 1.0)
    if "accumulation" in problems:
        r = problems["accumulation"]["ratios"]
        for key in [k for k in r if k.startswith("crux") and "(4 t(8))" in k]:
            add(f"accumulation: {key}", r[key], "<= 1.2", lambda x: x <= 1.2)
    for row in problems.get("fusing", {}).get("per_update", [])[1:]:
        add(f"fusing: time per update at K={row['k']} / at K=1 (round by round)", row["over_k1"], "<= 1.0",
            lambda x: x <= 1.0)
    for row in problems.get("shapes", {}).get("rows", []):
        add(f"shapes: crux / fastest hand-written scan, {row['shape']}, precision {row['precision']}, fused "
            f"×{row['k']} (back to back)", row["duel"]["median"], ">= 1.0", lambda x: x >= 1.0)
    for row in problems.get("throughput", {}).get("rows", []):
        add(f"throughput: crux / hand-written, {row['points']} points, width {row['width']}, precision "
            f"{row['precision']}", row["ratio"], ">= 1.0", lambda x: x >= 1.0)
    for name, p in problems.items():
        for vname, result in p.get("variants", {}).items():
            if "second_solve_compiles_nothing" in result:
                add(f"{name}: {vname}: later solve() calls compile nothing (compile_seconds == 0)",
                    float(max(result["recompile_seconds"], default=0.0)), "== 0", lambda x: x == 0)
    return out


# ---------------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------------
def _num(x, fmt="{:.2f}"):
    return "-" if x is None or (isinstance(x, float) and not np.isfinite(x)) else fmt.format(x)


def _how(pair: dict) -> str:
    """How a paired ratio was timed: in a duel (:func:`duel`) or in the survey's rounds (:func:`paired_ratio`)."""
    return "back to back" if pair.get("back_to_back") else "round by round"


def markdown(report: dict) -> str:
    lines = ["# crux benchmark", "",
             f"`{report['command']}`  ", f"{report['environment']['summary']}", ""]
    for name, p in report["problems"].items():
        lines += [f"## {name}", "", p.get("description", ""), ""]
        if name == "scaling":
            lines += ["| points | width | crux steps/s | hand steps/s | crux / hand | updates per round |",
                      "|---:|---:|---:|---:|---:|---:|"]
            for r in p["rows"]:
                lines.append(f"| {r['points']} | {r['width']} | {r['crux_steps_per_second']:.2f} | "
                             f"{r['hand_steps_per_second']:.2f} | {r['ratio']:.2f} | {r['steps']} |")
            lines.append("")
            continue
        if name == "throughput":
            lines += throughput_table(p)
            continue
        if name == "shapes":
            lines += shapes_table(p)
            continue
        lines += ["| variant | compile s | steps/s (median) | min-max | CPU ms/step | fixed ms/solve | GFLOP/step "
                  "| final loss |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for vname, r in sorted(p["variants"].items(), key=lambda kv: -kv[1]["steps_per_second"]["median"]):
            sps = r["steps_per_second"]
            mark = " (separate process)" if r.get("separate_process") else ""
            lines.append(f"| {vname}{mark} | {_num(r.get('compile_seconds'))} | {sps['median']:.1f} | "
                         f"{sps['min']:.1f}-{sps['max']:.1f} | {_num(r.get('cpu_ms_per_step'), '{:.3f}')} | "
                         f"{_num(r.get('fixed_ms_per_solve'))} | {_num(r.get('gflop_per_step'), '{:.3f}')} | "
                         f"{_num(r.get('final_loss'), '{:.3e}')} |")
        lines.append("")
        if p.get("call_costs"):
            k1, k2 = p["fused"][0], p["fused"][-1]
            lines += [f"Cost of a fused call, fitted to the medians at {k1} and {k2} updates a call (where the two "
                      f"medians differ by less than their rounds' spread, the split is noise, a negative figure too):",
                      "",
                      "| way to train | µs per call | µs per update |", "|---|---:|---:|"]
            lines += [f"| {name} | {c['per_call_us']:.1f} | {c['per_update_us']:.2f} |"
                      for name, c in p["call_costs"].items()]
            lines.append("")
        if p.get("work"):
            lines += [f"Work of an update, as XLA counts the compiled programs (a loop's body once, so a fused call "
                      f"counts one update): crux against the hand-written {SAME_AS_CRUX} of as many updates a call:",
                      "", "| updates a call | crux MFLOP | hand MFLOP | crux / hand | crux MB accessed | hand MB "
                      "accessed | crux / hand |", "|---:|---:|---:|---:|---:|---:|---:|"]
            for k, c in p["work"].items():
                ours, hand = c["crux"], c["hand"]
                lines.append(f"| {k} | {ours['flops'] / 1e6:.3f} | {hand['flops'] / 1e6:.3f} | "
                             f"{ours['flops'] / hand['flops']:.4f} | {ours['bytes'] / 1e6:.3f} | "
                             f"{hand['bytes'] / 1e6:.3f} | {ours['bytes'] / hand['bytes']:.4f} |")
            lines.append("")
        if p.get("per_update"):
            lines += ["Per-update time against the fused depth K, each K's rounds against K = 1's and against the "
                      "next shallower K's round by round (median of the rounds' ratios; above 1, fusing made an "
                      "update dearer):", "",
                      "| K | µs per update | / K = 1 | range | / shallower K |", "|---:|---:|---:|---:|---:|"]
            lines += [f"| {r['k']} | {r['us_per_update']:.1f} | {r['over_k1']:.3f} | {r['over_k1_min']:.3f}-"
                      f"{r['over_k1_max']:.3f} | {r['over_previous']:.3f} |" for r in p["per_update"]]
            lines.append("")
        if p.get("first_update"):
            lines += ["Time to first update (s), from the first call that trains, in a fresh process: " + ", ".join(
                f"{family} {seconds:.2f}" for family, seconds in p["first_update"].items()), ""]
        for key, value in p.get("ratios", {}).items():
            pair = p.get("paired", {}).get(key)
            rounds = "" if pair is None else \
                f" ({_how(pair)}: median {pair['median']:.2f}, {pair['min']:.2f}-{pair['max']:.2f})"
            lines.append(f"- {key}: **{value:.2f}**{rounds}")
        lines.append("")
    lines += ["## Targets (docs/BENCHMARK.md; figures, not assertions)", "", "| target | measured | goal | met |",
              "|---|---:|---:|---|"]
    for t in report["targets"]:
        met = {True: "yes", False: "NO", None: "n/a"}[t["met"]]
        lines.append(f"| {t['target']} | {_num(t['value'], '{:.3f}')} | {t['goal']} | {met} |")
    lines.append("")
    return "\n".join(lines)


def throughput_table(p: dict) -> list[str]:
    """The throughput rows: updates/s, TFLOP/s and the fraction of the peak, crux beside hand-written JAX; then
    the sizes that did not fit the device."""
    peak = p.get("peak_tflops")
    fraction = f" of {peak:g} TFLOP/s" if peak else " (no --peak-tflops)"
    lines = [f"| points | width | precision | MFLOP/update | crux updates/s | crux TFLOP/s | crux fraction{fraction} "
             f"| hand updates/s | hand TFLOP/s | hand fraction | crux / hand |",
             "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in p["rows"]:
        flops = None if r["flops_per_update"] is None else r["flops_per_update"] / 1e6
        cells = [f"{r[f]['steps_per_second']:.1f} | {_num(r[f]['tflops'], '{:.3f}')} | "
                 f"{_num(r[f]['peak_fraction'], '{:.1%}')}" for f in ("crux", "hand")]
        lines.append(f"| {r['points']} | {r['width']} | {r['precision']} | {_num(flops, '{:.1f}')} | {cells[0]} | "
                     f"{cells[1]} | {r['ratio']:.2f} |")
    lines.append("")
    if p.get("out_of_memory"):
        lines += ["Out of device memory: " + ", ".join(f"{r['points']} points width {r['width']} ({r['precision']})"
                                                      for r in p["out_of_memory"]), ""]
    return lines


# ---------------------------------------------------------------------------------------------------
# The README's speed table
# ---------------------------------------------------------------------------------------------------
README = ROOT / "README.md"
README_BEGIN = "<!-- speed table: written by `python scripts/bench.py --readme` -->"
README_END = "<!-- end of speed table -->"
README_PROBLEMS = ("standard", "small", "accumulation")
README_SEPARATOR = "|---|---|---|---|"
# jax's device_kind -> the name of the README's column; other kinds are named as jax names them
DEVICE_NAMES = {"TPU v5 lite": "TPU v5e", "TPU v5e": "TPU v5e", "NVIDIA H200": "H200"}
# row label -> (problem, kind, goal); the cells of the column a run did not measure are kept as they stand
README_ROWS = {
    "crux / fastest hand-written JAX, standard problem": ("standard", "hand", "≥ 1.0"),
    "crux / fastest hand-written JAX, 64 points, 3×32": ("small", "hand", "≥ 1.0"),
    "FLOPs of an update, crux / hand-written JAX (XLA's count), standard problem": ("standard", "work", "≤ 1.0"),
    "FLOPs of an update, crux / hand-written JAX (XLA's count), 64 points, 3×32": ("small", "work", "≤ 1.0"),
    "crux / jNO, standard problem": ("standard", "jNO", "≥ 1.3"),
    "crux / jNO, 64 points, 3×32": ("small", "jNO", "–"),
    "one update of 4×8 / four updates of 8": ("accumulation", "accumulation", "≤ 1.2"),
    "time to first update, standard problem (fresh process)": ("standard", "first", "–"),
}


def readme_header(device: str) -> str:
    return f"| ratio | CPU | {device} | goal |"


def _calls(k: int, epochs: int | None = None) -> str:
    return "one update a call" if k == 1 else f"fused ×{k}" + (" (K = epochs)" if k == epochs else "")


def readme_cell(problem: dict, kind: str) -> str:
    """The cell of one row: ratios back to back (median, range) against the hand-written code, of XLA's FLOP
    counts against the hand-written code of crux's formulation, or of the medians against jNO (timed in its own
    process)."""
    epochs = problem.get("epochs")
    if kind == "accumulation":
        r = problem["ratios"]
        parts = [f"{r[key]:.2f} {_calls(int(k))}" for key in r
                 for k in re.findall(r"^crux inner_steps=(\d+): t\(4x8\) / \(4 t\(8\)\)$", key)]
        jno = r.get("jNO inner_steps=1: t(4x8) / (4 t(8))")
        return "; ".join(parts) + ("" if jno is None else f"; jNO {jno:.2f}")
    if kind == "first":
        first = problem.get("first_update", {})
        return "; ".join(f"{name} {first[family]:.2f} s" for family, name in (
            ("crux", "crux"), ("hand", "hand-written"), ("jNO", "jNO")) if family in first) or "not run"
    if kind == "work":
        return "; ".join(f"{c['crux']['flops'] / c['hand']['flops']:.3f} {_calls(int(k), epochs)}"
                         for k, c in problem.get("work", {}).items()) or "not run"
    parts = []
    for k in [1, *problem.get("fused", [])]:
        if kind == "hand":
            key = "crux inner_steps=1 / fastest hand loop" if k == 1 else \
                f"crux inner_steps={k} / fastest hand scan k={k}"
            pair = problem["paired"][key]
            parts.append(f"{pair['median']:.2f} ({pair['min']:.2f}–{pair['max']:.2f}) {_calls(k, epochs)}")
        else:
            value = problem["ratios"].get(f"crux inner_steps={k} / jNO inner_steps={k} (separate process)")
            if value is not None:
                parts.append(f"{value:.2f} {_calls(k, epochs)}")
    return "; ".join(parts) or "not run"


def report_column(report: dict) -> str:
    """The README column a report's figures belong in: ``CPU``, or the accelerator it ran on (DEVICE_NAMES)."""
    env = report["environment"]
    if env.get("backend", "cpu") == "cpu":
        return "CPU"
    kind = env.get("device_kind") or env["backend"].upper()
    return DEVICE_NAMES.get(kind, kind)


@dataclass
class ReadmeTable:
    """The README's speed table as it stands."""

    block: list[str]  # its lines, the markers included
    device: str  # the name of its accelerator column
    notes: dict[str, str]  # column -> the line that says how and when its figures were taken
    cells: dict[str, dict[str, str]]  # row label (of README_ROWS) -> column -> cell
    kept: list[str]  # the rows README_ROWS does not name, as they stand


def readme_block(report: dict, table: ReadmeTable) -> list[str]:
    """The README's speed table with the figures of ``report`` in the column of the device it ran on: the CPU's,
    or the accelerator's (named after the device; an accelerator column of another device is replaced, its
    figures kept in docs/BENCHMARK.md's history). The other column's cells and note stay as they stand."""
    env, column = report["environment"], report_column(report)
    device = table.device if column == "CPU" else column
    notes = {"CPU": table.notes.get("CPU"), device: table.notes.get(device) if device == table.device else None}
    notes[column] = (f"{column} column: `{without_out(report['command'])}`, {env['summary']}. Ratios against the "
                     f"fastest hand-written JAX of each kind: the two timed back to back, {DUEL_ROUNDS} rounds in "
                     f"alternating order, the median of the rounds' ratios and their range in brackets; against "
                     f"jNO (timed in its own process): the ratio of the medians.")
    lines = [README_BEGIN, *(notes[c] for c in ("CPU", device) if notes[c]), "", readme_header(device),
             README_SEPARATOR]
    for label, (name, kind, goal) in README_ROWS.items():
        kept = table.cells.get(label, {})
        cells = {"CPU": kept.get("CPU", "not run"), device: kept.get(device, "not run")}
        if name in report["problems"]:
            cells[column] = readme_cell(report["problems"][name], kind)
        lines.append(f"| {label} | {cells['CPU']} | {cells[device]} | {goal} |")
    return lines + table.kept + [README_END]


def without_out(command: str) -> str:
    """``command`` without its ``--out FOLDER``: where the run wrote its files changes no figure, and a
    scratch folder's path has no place in the README."""
    return re.sub(r" --out(=| )[^\s`]+", "", command)


def readme_table(text: str) -> ReadmeTable:
    """The README's speed table: its lines between the markers, its accelerator column, each column's note,
    each row's cells by label and column, and the rows that ``README_ROWS`` does not name (kept as they are)."""
    if README_BEGIN not in text or README_END not in text:
        raise ValueError(f"README.md has no speed table between {README_BEGIN!r} and {README_END!r}")
    block = text[text.index(README_BEGIN):text.index(README_END) + len(README_END)].splitlines()
    headers = [m.group(1) for line in block for m in [re.fullmatch(r"\| ratio \| CPU \| (.+) \| goal \|", line)] if m]
    if len(headers) != 1:
        raise ValueError(f"README.md's speed table needs one header line {readme_header('DEVICE')!r}")
    device, notes, cells, kept = headers[0], {}, {}, []
    for line in block:
        note = None if line.startswith("|") else re.match(r"(.+?) column: `", line)
        if note:
            notes[note.group(1)] = line
        if not line.startswith("|") or line in (readme_header(device), README_SEPARATOR):
            continue
        row = [c.strip() for c in line.strip().strip("|").split("|")]
        if row[0] in README_ROWS:
            cells[row[0]] = {"CPU": row[1], device: row[2]}
        else:
            kept.append(line)
    return ReadmeTable(block, device, notes, cells, kept)


def merged(reports: list[dict]) -> dict:
    """Runs of the bench on one device as one report: their problems together (a later run's over an earlier's),
    their commands in turn, the first's environment."""
    devices = {report_column(r) for r in reports}
    if len(devices) > 1:
        raise ValueError(f"--readme-from: the runs come from different devices ({', '.join(sorted(devices))}); "
                         f"give the runs of one device")
    return {"command": "`; `".join(r["command"] for r in reports), "environment": reports[0]["environment"],
            "problems": {name: p for r in reports for name, p in r["problems"].items()}}


def update_readme(report: dict, path: Path = README) -> str:
    """Replace the speed table of the README at ``path`` with the figures of ``report``; returns the table."""
    text = path.read_text()
    table = readme_table(text)
    new = "\n".join(readme_block(report, table))
    path.write_text(text.replace("\n".join(table.block), new))
    return new


def environment() -> dict:
    try:
        from cruxlab.runtime.environment import environment as crux_environment
        env = crux_environment(ROOT)
    except Exception:  # the tracking layer needs MLflow; the benchmark does not
        env = {"python": platform.python_version(), "backend": jax.default_backend(),
               "versions": {"jax": jax.__version__, "optax": optax.__version__}}
    env["device"] = str(jax.devices()[0])
    env.setdefault("backend", jax.default_backend())
    env.setdefault("device_kind", jax.devices()[0].device_kind)
    env["cpu_count"] = os.cpu_count()
    try:
        env["load_average"] = os.getloadavg()
    except OSError:
        pass
    # What a reader needs to compare the figures with others: when, which code, which machine and versions.
    commit = (env.get("git_commit") or "?")[:7] + (" with local changes" if env.get("git_dirty") else "")
    env["summary"] = (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}; "
                      f"jax {jax.__version__} (jaxlib {env['versions'].get('jaxlib') or '?'}) on "
                      f"{jax.default_backend()} ({env['device']}); "
                      f"CPU {env.get('cpu') or platform.processor() or '?'}, {os.cpu_count()} cores")
    if isinstance(env.get("load_average"), tuple):
        env["summary"] += f", load average at start {env['load_average'][0]:.2f}"
    return env


def _metric_name(text: str) -> str:
    return re.sub(r"[^0-9A-Za-z_\-./ ]", "_", text).replace("=", "_")


def log_mlflow(report: dict, out: Path) -> str:
    """One MLflow run in experiment ``bench``: a metric per variant and ratio, the files as artifacts."""
    import mlflow
    try:
        from cruxlab.store.connection import ensure_experiment, move_store_credentials, tracking_uri
        move_store_credentials(None)
        uri = tracking_uri(None)
        experiment_id = ensure_experiment(mlflow.tracking.MlflowClient(uri), "bench", uri)
    except ImportError:
        uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{ROOT / 'mlflow.db'}"
        mlflow.set_tracking_uri(uri)
        experiment_id = mlflow.set_experiment("bench").experiment_id
    mlflow.set_tracking_uri(uri)
    with mlflow.start_run(experiment_id=experiment_id, run_name=f"bench{'-quick' if report['quick'] else ''}") as run:
        mlflow.set_tags({ROLE: BENCH, SWEEP: "bench"})
        mlflow.log_params({"problems": ",".join(report["problems"]), "quick": report["quick"],
                           "repeats": report["repeats"], "backend": jax.default_backend()})
        metrics = {}
        for name, p in report["problems"].items():
            for vname, r in p.get("variants", {}).items():
                base = _metric_name(f"{name}/{vname}")
                metrics[f"{base}/steps_per_second"] = r["steps_per_second"]["median"]
                metrics[f"{base}/cpu_ms_per_step"] = r.get("cpu_ms_per_step", float("nan"))
                if np.isfinite(r.get("compile_seconds", float("nan"))):
                    metrics[f"{base}/compile_seconds"] = r["compile_seconds"]
            for key, value in p.get("ratios", {}).items():
                metrics[_metric_name(f"{name}/ratio/{key}")] = value
            for row in p.get("per_update", []):
                metrics[f"{name}/k{row['k']}/us_per_update"] = row["us_per_update"]
                metrics[f"{name}/k{row['k']}/over_k1"] = row["over_k1"]
            for row in p.get("rows", []):
                base = f"{name}/n{row['points']}_w{row['width']}"
                if name == "throughput":
                    base += f"_{row['precision']}"
                    for family in ("crux", "hand"):
                        metrics[f"{base}/{family}_steps_per_second"] = row[family]["steps_per_second"]
                        metrics[f"{base}/{family}_tflops"] = row[family]["tflops"]
                    continue
                metrics[f"{base}/crux_steps_per_second"] = row["crux_steps_per_second"]
                metrics[f"{base}/hand_steps_per_second"] = row["hand_steps_per_second"]
        mlflow.log_metrics({k: float(v) for k, v in metrics.items() if v is not None and np.isfinite(v)})
        for path in sorted(out.iterdir()):
            if path.is_file():
                mlflow.log_artifact(str(path))
        return run.info.run_id


def write(report: dict, out: Path | None, jno: Path | None, started: float, final: bool) -> str:
    """Merge the jNO column, judge the targets, and write bench.md/bench.json (and scaling.png) to ``out``."""
    if jno:
        merge_jno(report, jno)
    report["targets"] = targets(report)
    report["seconds"] = time.perf_counter() - started
    report["complete"] = final
    text = markdown(report)
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "bench.md").write_text(text)
        (out / "bench.json").write_text(json.dumps(report, indent=1, default=str))
        if "scaling" in report["problems"]:
            plot_scaling(report["problems"]["scaling"], out / "scaling.png")
    return text


def _parsed(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type from a parser that raises ValueError with its own message (argparse would replace it)."""
    def typed(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    return typed


def _integers(option: str) -> Callable[[str], tuple[int, ...]]:
    def parse(text: str) -> tuple[int, ...]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items or not all(t.isdigit() and int(t) > 0 for t in items):
            raise ValueError(f"{option} takes positive integers separated by commas, e.g. {option} 16384,65536")
        return tuple(int(t) for t in items)
    return parse


def _precisions(text: str) -> tuple[str, ...]:
    items = [t.strip().lower() for t in text.split(",") if t.strip()]
    if not items or set(items) - set(matmul.NAMES):
        raise ValueError(f"--precisions takes matmul precisions from {','.join(matmul.NAMES)} separated by commas, "
                         f"e.g. --precisions {_joined(PRECISIONS)}")
    return tuple(items)


def _joined(values: tuple) -> str:
    return ",".join(map(str, values))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="few updates per round: a smoke run (< 1 min)")
    parser.add_argument("--problems", help=f"comma-separated, from {','.join(PROBLEMS)} (default: all; with "
                                           f"--quick: {','.join(QUICK_PROBLEMS)})")
    parser.add_argument("--forms", default=",".join(FORMS),
                        help="derivative formulations of the hand-written baselines (default: all)")
    parser.add_argument("--repeats", type=int, help="timed rounds per variant (default 3, 5 for the fast problems)")
    parser.add_argument("--out", type=Path, help="write bench.md, bench.json, scaling.png here")
    parser.add_argument("--jno", type=Path, help="JSON written by scripts/bench_jno.sh, merged as jNO rows")
    parser.add_argument("--mlflow", action="store_true", help="log the tables as one MLflow run (experiment bench)")
    parser.add_argument("--precision", default="default",
                        help="matmul precision of crux's and the hand-written programs alike, for every problem but "
                             "throughput (default: 'default', hand-written JAX's own; 'high', 'highest')")
    parser.add_argument("--loop-forms", default="", type=_parsed(loop_forms),
                        help="also time crux's fused loop and the hand-written scan in these forms (standard, "
                             "small): comma-separated, each +-joined from unroll=U, loss-check (crux's default "
                             "guard), full-check, tree (crux's parameters as each model's tree of arrays); e.g. "
                             "unroll=4,full-check,unroll=8+tree")
    parser.add_argument("--sizes", type=_parsed(_integers("--sizes")), default=THROUGHPUT_SIZES,
                        help=f"throughput: points, comma-separated (default {_joined(THROUGHPUT_SIZES)}; on the chip "
                             f"e.g. 16384,65536,262144)")
    parser.add_argument("--widths", type=_parsed(_integers("--widths")), default=THROUGHPUT_WIDTHS,
                        help=f"throughput: hidden widths, comma-separated (default {_joined(THROUGHPUT_WIDTHS)}; on "
                             f"the chip e.g. 64,128,256,512)")
    parser.add_argument("--precisions", type=_parsed(_precisions), default=PRECISIONS,
                        help=f"throughput and shapes: matmul precisions, comma-separated (default "
                             f"{_joined(PRECISIONS)})")
    parser.add_argument("--peak-tflops", type=float,
                        help="throughput: the device's peak TFLOP/s, for the fraction of it reached (TPU v5e: 197, "
                             "bfloat16 matrix work)")
    parser.add_argument("--readme-from", type=Path, nargs="+", metavar="BENCH_JSON",
                        help="write README.md's speed table from the bench.json of runs with --out (e.g. on a TPU; "
                             "their problems together), in the column of the device they ran on; measures nothing")
    parser.add_argument("--first-update", choices=("crux", "hand"), help=argparse.SUPPRESS)  # first_updates' child
    parser.add_argument("--readme", action="store_true",
                        help=f"measure {','.join(README_PROBLEMS)} and jNO (in its own process, unless --jno) and "
                             f"write the CPU column of README.md's speed table; needs a clean checkout")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.readme_from:
        absent = [str(path) for path in args.readme_from if not path.exists()]
        if absent:
            parser.error(f"--readme-from {' '.join(absent)}: no such file (write it with --out FOLDER: "
                         f"FOLDER/bench.json)")
        try:
            report = merged([json.loads(path.read_text()) for path in args.readme_from])
        except ValueError as error:
            parser.error(str(error))
        if not set(README_PROBLEMS) & set(report["problems"]):
            parser.error(f"--readme-from: no run measured any of {','.join(README_PROBLEMS)}, the problems of the "
                         f"README's table (--problems)")
        missing = [p for p in README_PROBLEMS if p not in report["problems"]]
        print(update_readme(report, README))
        if missing:
            print(f"no run measured {','.join(missing)}: their rows keep what the {report_column(report)} column "
                  f"held ('not run' in a new column)", file=sys.stderr)
        return 0
    if args.peak_tflops is not None and not args.peak_tflops > 0:
        parser.error(f"--peak-tflops {args.peak_tflops}: give the device's peak in TFLOP/s, e.g. --peak-tflops 197 "
                     f"(TPU v5e, bfloat16)")
    try:
        precision = matmul.checked(args.precision, "--precision")
    except ValueError:
        parser.error(f"--precision {args.precision!r} is not a matmul precision; use default (here the default: "
                     f"hand-written JAX's own, one bfloat16 pass on a TPU), high or highest (full float32)")
    if args.first_update:
        print(first_update(args.first_update, precision))
        return 0
    default = README_PROBLEMS if args.readme else QUICK_PROBLEMS if args.quick else PROBLEMS
    problems = [p.strip() for p in (args.problems or ",".join(default)).split(",") if p.strip()]
    unknown = sorted(set(problems) - set(PROBLEMS))
    if unknown:
        parser.error(f"unknown problems {unknown}; choose from {','.join(PROBLEMS)}")
    forms = [f.strip() for f in args.forms.split(",") if f.strip()]
    if set(forms) - set(FORMS) or SAME_AS_CRUX not in forms:
        parser.error(f"--forms takes names from {','.join(FORMS)} and must include {SAME_AS_CRUX}")
    if args.quick and args.forms == ",".join(FORMS):
        forms = [SAME_AS_CRUX]  # compiling every formulation alone would take the minute
    if args.jno and not args.jno.exists():
        parser.error(f"--jno {args.jno}: no such file (write it with scripts/bench_jno.sh)")
    log = lambda text: print(text, file=sys.stderr, flush=True)
    fast_repeats = args.repeats or (3 if args.quick else 5)
    slow_repeats = args.repeats or 3
    plan = lambda repeats: Plan(args.quick, repeats, precision, tuple(args.loop_forms))
    # before this process opens the device: an accelerator takes one process at a time
    first = first_updates(plan(1 if args.quick else slow_repeats), log) if "standard" in problems else None
    env = environment()
    if args.readme:
        if args.quick or args.problems or args.forms != ",".join(FORMS):
            parser.error("--readme measures the README's problems in full: drop --quick, --problems and --forms")
        readme_table(README.read_text())  # a README without the table's markers: say so before any compute
        if env.get("git_dirty") is not False:
            parser.error("--readme writes the commit it measured into README.md: commit your changes first "
                         "(git status shows them)")
        if args.jno is None and importlib.util.find_spec("jno") is None:
            parser.error("--readme needs jNO for the crux / jNO rows: pip install -e '.[jno]', or pass --jno FILE "
                         "written by scripts/bench_jno.sh")

    started = time.perf_counter()
    report: dict[str, Any] = {"command": " ".join(["python scripts/bench.py", *(sys.argv[1:] if argv is None
                                                                                  else argv)]),
                              "quick": args.quick, "environment": env, "problems": {}}
    if args.readme and args.jno is None:  # jNO first, in its own process, on the machine as the run finds it
        args.jno = Path(tempfile.mkdtemp(prefix="crux-bench-")) / "jno.json"
        log(f"[{time.perf_counter() - started:6.1f} s] jNO, in its own process")
        command = [sys.executable, str(ROOT / "scripts" / "bench_jno_problems.py"), "--out", str(args.jno),
                   "--problems", ",".join(problems)]
        subprocess.run(command + ([] if args.repeats is None else ["--repeats", str(args.repeats)]), check=True,
                       stdout=sys.stderr)
    report["repeats"] = {"fast problems": fast_repeats, "slow problems": slow_repeats}
    best_form = SAME_AS_CRUX
    for problem in problems:
        log(f"[{time.perf_counter() - started:6.1f} s] {problem}")
        if problem == "standard":
            result = bench_standard(plan(slow_repeats), log, forms=forms)
            result["first_update"] = first
            best_form = result["variants"][result["best"]["loop"]]["form"]
        elif problem == "small":
            result = bench_small(plan(fast_repeats), log, forms=forms)
        elif problem == "accumulation":
            result = bench_accumulation(plan(fast_repeats), log, best_form)
        elif problem == "laplacian":
            result = bench_laplacian(plan(slow_repeats), log, forms=forms)
        elif problem == "fusing":
            result = bench_fusing(plan(fast_repeats), log)
        elif problem == "throughput":
            def keep(partial: dict) -> None:  # every row as it comes: a run cut short keeps the rows it made
                report["problems"][problem] = partial
                if args.out:
                    write(report, args.out, args.jno, started, final=False)
            result = bench_throughput(plan(slow_repeats), log, args.sizes, args.widths, args.precisions,
                                      args.peak_tflops, on_row=keep)
        elif problem == "shapes":
            result = bench_shapes(plan(slow_repeats), log, args.precisions)
        else:
            result = bench_scaling(plan(slow_repeats), log, best_form)
        report["problems"][problem] = result
        if args.out:  # after every problem: a run cut short by a time limit still leaves its tables
            write(report, args.out, args.jno, started, final=False)
    text = write(report, args.out, args.jno, started, final=True)
    print(text)
    if args.readme:
        print(update_readme(report))
        log(f"wrote the speed table of {README}")
    if args.mlflow:
        out = args.out
        if out is None:  # MLflow gets the files too: write them somewhere
            out = Path(tempfile.mkdtemp(prefix="crux-bench-"))
            write(report, out, None, started, final=True)
        log(f"MLflow run {log_mlflow(report, out)}")
    log(f"done in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
