"""A suite of problem shapes, each written twice: as a crux problem, and by hand in plain JAX and optax as a user
would write it without crux (one ``jax.jit`` of a ``lax.scan`` of updates, derivatives by nested ``jvp``).

Each shape's residuals are written once, against :class:`Derivatives`: crux's ``crux.laplacian`` and
``crux.partial`` for the crux problem, nested ``jvp`` along unit vectors for the hand-written loop. Both start
from crux's initial parameters, train on the full batch, and take the same loss (the sum over the
constraints of the mean squared residual; ``tests/test_bench_suite.py`` checks it at the start). The shapes:

- ``burgers``: u_t + u u_x - nu u_xx = 0 on [-1, 1] x [0, 1], three constraints of 2,000, 256 and 128 points
  (equation, initial condition, boundary), a 3 x 64 network: first-order terms and a product;
- ``square``: -Δu = 1 on the unit square, 256 interior and 64 edge points, 2 x 32;
- ``two_networks``: the biharmonic equation split into Δu = v and Δv = f, one network each (3 x 32),
  four constraints (two equations on 512 points, two edges on 128);
- ``cube``: -Δu = 1 in the unit cube, 1,024 interior and 384 face points, 3 x 48.
"""
from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

import crux
import crux.model
from cruxlab.bench.hand_written import initial_layers, network
from cruxlab.bench.host import bench_environment
from cruxlab.bench.interleaved import fastest, in_rounds, measure_interleaved, paired_ratio
from cruxlab.bench.variants import WARMUP_CALLS, CruxVariant, Variant, traced_at

Pointwise = Callable[[jax.Array], jax.Array]


class Derivatives(NamedTuple):
    """How a residual differentiates: ``laplacian(f)`` and ``partial(f, *axes)`` of a pointwise ``f``."""

    laplacian: Callable[[Pointwise], Pointwise]
    partial: Callable[..., Pointwise]


def _jvp_partial(f: Pointwise, *axes: int) -> Pointwise:
    """Nested forward-mode products along unit vectors, one per axis."""
    for i in axes:
        f = (lambda g, i: lambda x: jax.jvp(g, (x,), (jnp.eye(x.shape[0], dtype=x.dtype)[i],))[1])(f, i)
    return f


def _jvp_laplacian(f: Pointwise) -> Pointwise:
    return lambda x: sum(_jvp_partial(f, i, i)(x) for i in range(x.shape[0]))


CRUX_DERIVATIVES = Derivatives(crux.laplacian, crux.partial)
HAND_DERIVATIVES = Derivatives(_jvp_laplacian, _jvp_partial)
Residual = Callable[[Derivatives, Any, jax.Array], jax.Array]  # (derivatives, net, one point) -> residual


@dataclass(frozen=True)
class Shape:
    """A problem of the suite: its networks ``{name: (in_dim, hidden)}`` (one output each) and its constraints
    ``(name, residual, points)``."""

    name: str
    networks: dict[str, tuple[int, tuple[int, ...]]]
    constraints: tuple[tuple[str, Residual, np.ndarray], ...]

    def points(self) -> int:
        return sum(len(p) for _, _, p in self.constraints)


def _uniform(rng: np.random.Generator, n: int, low: list[float], high: list[float]) -> np.ndarray:
    return rng.uniform(low, high, (n, len(low))).astype(np.float32)


def _on_faces(rng: np.random.Generator, n: int, dims: int) -> np.ndarray:
    """``n`` points on the faces of the unit cube of ``dims`` dimensions, each on a face drawn at random."""
    points = rng.uniform(0.0, 1.0, (n, dims))
    face = rng.integers(0, 2 * dims, n)
    points[np.arange(n), face // 2] = face % 2
    return points.astype(np.float32)


def burgers(seed: int = 0) -> Shape:
    rng, nu = np.random.default_rng(seed), 0.01 / np.pi
    edges = _uniform(rng, 128, [-1.0, 0.0], [1.0, 1.0])
    edges[:, 0] = np.where(rng.integers(0, 2, 128) == 0, -1.0, 1.0)

    def equation(d, net, x):
        u = net.u(x)
        return d.partial(net.u, 1)(x) + u * d.partial(net.u, 0)(x) - nu * d.partial(net.u, 0, 0)(x)
    initial = _uniform(rng, 256, [-1.0, 0.0], [1.0, 0.0])
    return Shape("burgers", {"u": (2, (64,) * 3)}, (
        ("equation", equation, _uniform(rng, 2000, [-1.0, 0.0], [1.0, 1.0])),
        ("initial", lambda d, net, x: net.u(x) + jnp.sin(jnp.pi * x[0]), initial),
        ("boundary", lambda d, net, x: net.u(x), edges)))


def square(seed: int = 0) -> Shape:
    rng = np.random.default_rng(seed)
    return Shape("square", {"u": (2, (32, 32))}, (
        ("equation", lambda d, net, x: -d.laplacian(net.u)(x) - 1.0, _uniform(rng, 256, [0.0] * 2, [1.0] * 2)),
        ("edge", lambda d, net, x: net.u(x), _on_faces(rng, 64, 2))))


def two_networks(seed: int = 0) -> Shape:
    rng = np.random.default_rng(seed)
    interior, edge = _uniform(rng, 512, [0.0] * 2, [1.0] * 2), _on_faces(rng, 128, 2)
    return Shape("two_networks", {"u": (2, (32,) * 3), "v": (2, (32,) * 3)}, (
        ("u_equation", lambda d, net, x: d.laplacian(net.u)(x) - net.v(x), interior),
        ("v_equation", lambda d, net, x: d.laplacian(net.v)(x) - jnp.sin(jnp.pi * x[0]) * x[1], interior),
        ("u_edge", lambda d, net, x: net.u(x), edge),
        ("v_edge", lambda d, net, x: net.v(x), edge)))


def cube(seed: int = 0) -> Shape:
    rng = np.random.default_rng(seed)
    return Shape("cube", {"u": (3, (48,) * 3)}, (
        ("equation", lambda d, net, x: -d.laplacian(net.u)(x) - 1.0, _uniform(rng, 1024, [0.0] * 3, [1.0] * 3)),
        ("faces", lambda d, net, x: net.u(x), _on_faces(rng, 384, 3))))


SHAPES: dict[str, Callable[[], Shape]] = {"burgers": burgers, "square": square, "two_networks": two_networks,
                                          "cube": cube}
OPTIMIZERS = {"adam": (optax.adam, 1e-3), "lbfgs": (optax.lbfgs, 1.0)}  # factory, learning rate


class SuiteProblem:
    """A shape as a crux problem, each network trained by ``optimizer`` (a key of :data:`OPTIMIZERS`)."""

    def __init__(self, shape: Shape, optimizer: str = "adam", seed: int = 0):
        factory, rate = OPTIMIZERS[optimizer]
        self.models = {name: crux.mlp(in_dim, 1, hidden, seed=seed).optimizer(factory).scale(crux.lrs(rate))
                       for name, (in_dim, hidden) in shape.networks.items()}
        self.constraints = [crux.Constraint(name, (lambda r: lambda net, x: r(CRUX_DERIVATIVES, net, x))(residual),
                                            points) for name, residual, points in shape.constraints]

    def solver(self) -> crux.Crux:
        return crux.Crux(self.constraints, self.models)

    def relative_l2(self) -> dict:
        return {}  # the suite's shapes are timed, not scored


class _HandNets:
    """``net.u(x)`` for the hand-written loss: network ``u`` of the layer list ``params["u"]`` at one point."""

    def __init__(self, params: dict):
        self._params = params

    def __getattr__(self, name: str) -> Pointwise:
        return lambda x: network(self._params[name], x)


def hand_loss(shape: Shape) -> Callable[[dict, list[jax.Array]], jax.Array]:
    """``loss(params, points)``: the sum over the constraints of the mean squared residual, derivatives by nested
    ``jvp``."""
    def loss(params, points):
        net = _HandNets(params)
        return sum(jnp.mean(jnp.square(jax.vmap(lambda x, r=residual: r(HAND_DERIVATIVES, net, x))(p)))
                   for (_, residual, _), p in zip(shape.constraints, points))
    return loss


def hand_layers(shape: Shape, seed: int = 0) -> dict[str, list[tuple[jax.Array, jax.Array]]]:
    return {name: initial_layers((in_dim, *hidden, 1), seed) for name, (in_dim, hidden) in shape.networks.items()}


def hand_step(shape: Shape, optimizer: str) -> tuple[Callable, Callable]:
    """``(init(params) -> opt_state, step((params, opt_state), _) -> ((params, opt_state), loss))``: one update of
    every network by its own ``optimizer`` (L-BFGS's line search varying that network alone), as a user
    would write it."""
    factory, rate = OPTIMIZERS[optimizer]
    tx = factory(learning_rate=rate)
    loss = hand_loss(shape)

    def init(params):
        return {name: tx.init(p) for name, p in params.items()}

    def step(carry, points):
        params, opt_state = carry
        value, grads = jax.value_and_grad(loss)(params, points)
        new_params, new_state = {}, {}
        for name in params:
            value_fn = lambda p, name=name: loss({**params, name: p}, points)
            updates, new_state[name] = tx.update(grads[name], opt_state[name], params[name], value=value,
                                                 grad=grads[name], value_fn=value_fn)
            new_params[name] = optax.apply_updates(params[name], updates)
        return (new_params, new_state), value
    return init, step


class HandScan(Variant):
    """The hand-written loop of ``steps_per_call`` updates in one ``lax.scan`` (``unroll`` to a turn), jitted."""

    def __init__(self, name: str, shape: Shape, optimizer: str, steps_per_call: int, precision: str = "highest",
                 unroll: int = 1):
        super().__init__(name, "hand", steps_per_call, info={"precision": precision, "unroll": unroll})
        self.shape, self.optimizer, self.precision, self.unroll = shape, optimizer, precision, unroll

    def build(self) -> float:
        init, step = hand_step(self.shape, self.optimizer)
        params = hand_layers(self.shape)
        k = self.steps_per_call

        def call(carry, points):
            return jax.lax.scan(lambda c, _: step(c, points), carry, None, length=k, unroll=self.unroll)
        self.carry = jax.tree.map(jnp.copy, (params, init(params)))  # distinct buffers: the call donates them
        self.points = [jnp.asarray(p) for _, _, p in self.shape.constraints]
        start = time.perf_counter()
        self.call = jax.jit(traced_at(self.precision, call), donate_argnums=0).lower(self.carry, self.points).compile()
        self.compile_seconds = time.perf_counter() - start
        self.info["first_call_seconds"] = self.run(k)[0]
        self.run((WARMUP_CALLS - 1) * k)
        return self.compile_seconds

    def run(self, steps: int) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(max(steps // self.steps_per_call, 1)):
            self.carry, values = self.call(self.carry, self.points)
        jax.block_until_ready(self.carry)
        self.last_loss = float(values[-1])
        return time.perf_counter() - wall, time.process_time() - cpu


FAMILIES = {"crux": "crux's solve(k, inner_steps=k)", "hand": "the hand-written scan",
            "crux-device-tanh": "crux with the device's own tanh (jnp.tanh) where crux evaluates its accurate one"}


def first_compile(family: str, shape_name: str, optimizer: str, k: int, precision: str) -> dict:
    """The first fused call of ``k`` updates of a shape in this process, one of :data:`FAMILIES`: its compile
    seconds, the seconds to its first loss on the host, and every program XLA compiled on the way (name, seconds),
    read from JAX's compile log."""
    if family == "crux-device-tanh":  # a diagnostic, in its own process: what crux's accurate tanh costs
        crux.model.ACTIVATIONS["tanh"] = jnp.tanh
    compiled: list[tuple[str, float]] = []

    class Programs(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            match = COMPILE_LINE.match(record.getMessage())
            if match:
                compiled.append((match["name"], float(match["seconds"])))
    handler = Programs()
    jax_log = logging.getLogger("jax")
    jax_log.addHandler(handler)
    jax_log.setLevel(logging.DEBUG)
    try:
        with jax.log_compiles(True):
            shape = SHAPES[shape_name]()
            start = time.perf_counter()
            if family != "hand":
                stats = SuiteProblem(shape, optimizer).solver().solve(k, inner_steps=k, precision=precision)
                compile_seconds, loss = stats.compile_seconds, stats.final_loss
            else:
                hand = HandScan("hand", shape, optimizer, k, precision)
                hand.build()
                compile_seconds, loss = hand.compile_seconds, hand.last_loss
            first = time.perf_counter() - start
    finally:
        jax_log.removeHandler(handler)
    return {"compile_seconds": compile_seconds, "first_loss_seconds": first, "loss": float(loss),
            "programs": sorted(compiled, key=lambda p: -p[1])}


COMPILE_LINE = re.compile(r"Finished XLA compilation of (?P<name>.+) in (?P<seconds>[0-9.e-]+) sec")


def _in_fresh_process(family: str, shape: str, optimizer: str, k: int, precision: str) -> dict:
    env = {**os.environ, "JAX_ENABLE_COMPILATION_CACHE": "false"}
    out = subprocess.run([sys.executable, "-m", "cruxlab.bench", "suite", "--one", family, shape, optimizer, str(k),
                          precision], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare_compiles(shapes: list[str], optimizers: list[str], k: int, precision: str, rounds: int,
                     log: Callable[[str], None], families: tuple[str, ...] = ("crux", "hand")) -> dict:
    """Each shape's first fused call, crux against the hand-written scan, each in fresh processes (no persistent
    cache), the two in turn for ``rounds`` rounds: the median compile seconds and their ratio, and the
    programs each compiled in its last round."""
    table = {}
    for shape in shapes:
        for optimizer in optimizers:
            runs = {family: functools.partial(_in_fresh_process, family, shape, optimizer, k, precision)
                    for family in families}
            got = in_rounds(runs, rounds)
            seconds = {family: [r["compile_seconds"] for r in got[family]] for family in runs}
            ratio = np.array(seconds["crux"]) / np.array(seconds["hand"])
            row = {family: {"compile_seconds": float(np.median(seconds[family])),
                            "first_loss_seconds": float(np.median([r["first_loss_seconds"] for r in got[family]])),
                            "programs": got[family][-1]["programs"]} for family in runs}
            row["ratio"] = {"median": float(np.median(ratio)), "min": float(ratio.min()), "max": float(ratio.max())}
            table[f"{shape}/{optimizer}/{precision}"] = row
            log(f"  {shape:<13} {optimizer:<6} compile crux {row['crux']['compile_seconds']:6.2f} s, hand "
                f"{row['hand']['compile_seconds']:6.2f} s: ×{row['ratio']['median']:.2f} "
                f"[{ratio.min():.2f}-{ratio.max():.2f}]; programs crux {len(row['crux']['programs'])} "
                f"(largest {_largest(row['crux'])}), hand {len(row['hand']['programs'])} "
                f"(largest {_largest(row['hand'])})")
            for family in families[2:]:
                log(f"    {family}: compile {row[family]['compile_seconds']:6.2f} s; largest {_largest(row[family])}")
    return table


def _largest(row: dict) -> str:
    return ", ".join(f"{name} {seconds:.2f} s" for name, seconds in row["programs"][:2])


def compare_speeds(shapes: list[str], depths: tuple[int, ...], precision: str, rounds: int, steps: int,
                   log: Callable[[str], None]) -> dict:
    """Each shape's fused update at each depth k, crux's ``solve(inner_steps=k)`` against the fastest hand-written
    scan of k updates (plain, or unrolled 4 to a turn), Adam, crux's loop as a long solve() runs it
    (``long_solve``): every variant built, then timed in interleaved
    rounds of ``steps`` updates; the ratio of crux's updates per second to the fastest hand scan's, round by
    round."""
    table = {}
    for shape_name in shapes:
        shape = SHAPES[shape_name]()
        variants: list[Variant] = []
        for k in depths:
            variants.append(CruxVariant(f"crux ×{k}", functools.partial(SuiteProblem, shape), k, 2 * k,
                                        precision=precision, long_solve=True))
            variants += [HandScan(f"hand ×{k}" + (f" unroll {u}" if u > 1 else ""), shape, "adam", k, precision, u)
                         for u in (1, 4)]
        log(f" {shape_name}: {shape.points():,} points, {precision}")
        results = measure_interleaved(variants, steps, rounds, log)
        for k in depths:
            hand = fastest(results, [f"hand ×{k}", f"hand ×{k} unroll 4"])
            table[f"{shape_name}/{precision}/×{k}"] = {"against": hand, **paired_ratio(results, f"crux ×{k}", hand)}
            log(f"  ×{k}: crux / {hand} = {table[f'{shape_name}/{precision}/×{k}']['median']:.2f}")
    return table


def main(argv: list[str] | None = None) -> int:
    """Run ``crux-bench suite``: crux against the hand-written scan on each shape of the suite, the first fused
    call's compile (fresh processes) and the fused update's speed.

    Args:
        argv: the command line after ``crux-bench suite`` (None: ``sys.argv[1:]``).

    Returns:
        0 when it ran.
    """
    parser = argparse.ArgumentParser(prog="crux-bench suite", description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--optimizers", default=",".join(OPTIMIZERS), help="of the compile comparison")
    parser.add_argument("--precisions", default="highest,default",
                        help="matmul precisions of both comparisons: at highest, on a TPU, crux evaluates its accurate "
                             "tanh where the hand-written scan takes the device's")
    parser.add_argument("--depths", default="10,100,1000", help="updates per fused call of the speed comparison")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2000, help="updates per timed round")
    parser.add_argument("--only", choices=("compile", "speed"))
    parser.add_argument("--families", default="crux,hand", help=f"of the compile comparison: crux and hand first, "
                                                                  f"then any of {list(FAMILIES)[2:]}")
    parser.add_argument("--out", type=Path, help="write suite.json here")
    parser.add_argument("--one", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    families = args.families.split(",")
    if families[:2] != ["crux", "hand"] or not set(families) <= set(FAMILIES):
        parser.error(f"--families: crux,hand first, then any of {list(FAMILIES)[2:]}; got {args.families}")
    if args.one:
        family, shape, optimizer, k, precision = args.one
        print(json.dumps(first_compile(family, shape, optimizer, int(k), precision)))
        return 0
    shapes = args.shapes.split(",")
    unknown = sorted(set(shapes) - set(SHAPES))
    if unknown:
        parser.error(f"--shapes: unknown {unknown}; choose from {','.join(SHAPES)}")
    log = functools.partial(print, flush=True)
    report: dict[str, Any] = {}  # the environment last: reading it opens the device, which the fresh processes need
    if args.only != "speed":
        report["compile"] = {}
        for precision in args.precisions.split(","):
            log(f"first fused call of 100 updates, compile, {args.rounds} rounds, fresh processes, {precision}")
            report["compile"].update(compare_compiles(shapes, args.optimizers.split(","), 100, precision, args.rounds,
                                                      log, tuple(families)))
    if args.only != "compile":
        depths = tuple(int(k) for k in args.depths.split(","))
        report["speed"] = {}
        for precision in args.precisions.split(","):
            log(f"fused update, {args.rounds} rounds of {args.steps} updates, {precision}")
            report["speed"].update(compare_speeds(shapes, depths, precision, args.rounds, args.steps, log))
    report["environment"] = bench_environment()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "suite.json").write_text(json.dumps(report, indent=1))
    return 0
