"""The ways to train that the bench times: crux's ``solve()`` and the hand-written loops, each a :class:`Variant`.

Every variant is built first (that is where its compile seconds are measured), then run for as many updates as
a round asks (:mod:`cruxlab.bench.interleaved`). A hand-written variant runs one update a call in a jitted step
(``loop``) or k in one ``lax.scan`` (``scan k=...``: as many as crux's ``inner_steps=k``); a crux variant's
round is one ``solve()`` call, its fixed cost included (``fixed ms/solve``: the wall time outside its compiled
calls, setting up the state and reading back the history).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

import crux
import crux.solver
from crux.engine import all_finite
from cruxlab.bench.flop_count import work
from cruxlab.bench.hand_written import FORMS, initial_layers, residual_loss, sampled
from cruxlab.bench.loop_forms import LoopForm, crux_machinery

WARMUP_CALLS = 2  # a hand-written variant's first calls allocate: run when built, not timed


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


def traced_at(precision: str, function: Callable) -> Callable:
    """``function`` traced at the matmul ``precision``; ``"default"``: untouched, as hand-written code runs."""
    if precision == "default":
        return function

    def at(*args):
        with jax.default_matmul_precision(precision):
            return function(*args)
    return at


class HandVariant(Variant):
    """The hand-written loop (``steps_per_call`` 1) or ``lax.scan`` of ``steps_per_call`` updates: crux's problem
    on ``points`` from crux's initial parameters (``widths``, ``seed``), u'' by ``form``, full batch or
    ``micro`` micro-batches of ``batch``, Adam 1e-3, at the matmul ``precision``, the scan in the form ``loop``."""

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
                    keep = jnp.isfinite(value) & (all_finite(new_params) if guard == "full" else True)
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
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(calls):
            self.carry, values = self.call(self.carry, data)
        jax.block_until_ready(self.carry)
        self.last_loss = float(values[-1])
        return time.perf_counter() - wall, time.process_time() - cpu


class CruxVariant(Variant):
    """``solve()`` on a crux problem; the first solve (``first_epochs``) compiles and is the reference run.

    With ``long_solve``, the timed solve()s run what the calls of a long solve() run: where the backend unrolls
    the loop, a first solve() compiles the unrolled loop on the side only when its calls left repay it; here the
    first solve() compiles it whatever its length and waits for it."""

    def __init__(self, name: str, make_problem: Callable[[], Any], inner_steps: int, first_epochs: int,
                 batchsize: int | None = None, accumulation_steps: int = 1, precision: str = "default",
                 loop: LoopForm = LoopForm(), long_solve: bool = False):
        super().__init__(name, "crux", inner_steps, info={"inner_steps": inner_steps, "batchsize": batchsize,
                                                           "accumulation_steps": accumulation_steps,
                                                           "precision": precision, "loop_form": loop.label})
        self.make_problem, self.first_epochs, self.loop, self.long_solve = make_problem, first_epochs, loop, long_solve
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
        payback = crux.solver.UNROLL_PAYBACK
        crux.solver.UNROLL_PAYBACK = 0.0 if self.long_solve else payback
        try:
            stats = self.solver.solve(epochs=self.first_epochs, **self.options)
        finally:
            crux.solver.UNROLL_PAYBACK = payback
        self.info["first_solve_seconds"] = time.perf_counter() - start
        if self.long_solve and self.solver._background is not None:
            self.solver._background.shutdown(wait=True)
        self.info["unrolled"] = bool(self.solver._unrolled)
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
        wall, cpu = time.perf_counter(), time.process_time()
        stats = self.solver.solve(epochs=steps, **self.options)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        self.recompile_seconds.append(float(stats.compile_seconds))  # a second solve() must compile nothing
        self.fixed_seconds.append(wall - stats.run_seconds)
        self.last_loss = stats.final_loss
        return wall, cpu


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
    """A hand-written variant's name: ``hand loop FORM`` or ``hand scan k=K FORM``."""
    return f"hand loop {form}" if mode == "loop" else f"hand scan k={k} {form}"


def formed(name: str, loop: LoopForm) -> str:
    """The name of variant ``name`` in the loop form ``loop``."""
    return f"{name} [{loop.label}]"
