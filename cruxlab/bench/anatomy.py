"""Where a fused update's time goes: kernels in the compiled loop body and steps/s, crux against variants.

    crux-bench anatomy                                  # small and standard, inner_steps=100
    crux-bench anatomy --quick --out DIR                # fewer updates; also writes DIR/anatomy.md
    crux-bench anatomy --quick --profile --out DIR      # and each variant's device time per op
    crux-bench anatomy --problems square                # the 2-D problem on 256 points, 2 × 32
    crux-bench anatomy --suite burgers --precision highest --profile --out DIR
                                                        # a shape of crux-bench suite beside its hand-written scan

With ``--profile`` each variant's rounds are traced once more (``jax.profiler``) and the device's own time per
update is split by compiled instruction: what the device is busy with against the wall time of an update (the
rest is the device waiting: dispatch, the loop's turns, the host). DIR also receives each variant's optimised
HLO, to read what a costly fusion computes.

On a GPU a fused update costs about a kernel launch per fusion, library call and copy in the loop body,
so the body's instruction count explains most of a gap to the hand-written ``lax.scan`` of
crux-bench. crux's rounds are ``solve()`` calls: ``fixed ms/solve`` is the part of a round spent
outside the compiled calls, which the hand scan does not pay. Variants, each compiled on its own and
timed in interleaved rounds:

- ``crux``: as it is;
- ``crux, every update checked``: the program a failing window is replayed with, which keeps or drops each
  update on the finiteness of its loss and its new parameters (crux's fused calls before commit e0f7e97);
- ``crux, every update applied``: no keep-or-drop select at all, as in the hand scan (the replay alone
  would then find a failing update): what the fused calls' select on the loss costs. On a 2-core CPU
  this variant is slower than crux on the standard problem despite fewer instructions and copies, also
  pinned to one core (figures in docs/BENCHMARK.md);
- ``crux, scan unrolled 4x``: the fused loop with ``lax.scan(..., unroll=4)``: on a GPU the loop runs from
  the host, one graph launch per trip, so this shows what the launches between updates cost;
- ``crux, one stacked row``: each epoch's figures stacked into one row inside the loop (crux's calls before
  they output each figure on its own): what the in-loop stack costs;
- ``crux, tree layout``: parameters as the model's tree of arrays (equal hidden layers stacked), not one
  flat vector: what unpacking costs;
- ``crux, layer arrays``: the tree layout with a network that keeps one array per layer (no stacks), the
  structure of the hand-written loop;
- ``hand scan``: crux-bench's hand-written scan with the hand-derived Taylor u'';
- ``hand scan, unrolled 4x``: the same scan four updates to a turn, the fastest hand-written form on a TPU.

With ``--suite``, a shape of ``crux-bench suite`` is dissected instead: crux, crux with every update applied, with
one stacked row, in the tree layout, with layer arrays and, where crux evaluates its accurate tanh (a TPU, a precision above ``default``), crux with the device's own tanh;
beside that shape's hand-written scan (nested ``jvp``, an optax optimizer per network), plain and unrolled 4x.
crux's variants run the loop a long solve() runs (unrolled where the backend unrolls it).

The crux diagnostics patch crux internals here only; they are not options. The header records
``XLA_FLAGS``: on a GPU, ``XLA_FLAGS=--xla_gpu_enable_command_buffer=+WHILE`` keeps the loop itself in the CUDA graph.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import os
import re
import tempfile
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

import jax
import jax.numpy as jnp
from jax.profiler import ProfileData


import crux
import crux.engine
import crux.model
import crux.problems.poisson
import crux.solver
from cruxlab.bench.hand_written import SAME_AS_CRUX, initial_layers
from cruxlab.bench.interleaved import SCAN_STEPS, measure_interleaved
from cruxlab.bench.loop_forms import LoopForm
from cruxlab.bench.reference_problems import grid2d, interior, laplacian2d_problem, poisson_problem
from cruxlab.bench.suite import SHAPES, HandScan, Shape, SuiteProblem
from cruxlab.bench.variants import CruxVariant, HandVariant, Variant

NOT_WORK = {"parameter", "get-tuple-element", "tuple", "constant", "bitcast"}  # no kernel of their own


def loop_body_ops(hlo: str) -> collections.Counter:
    """Instructions by opcode in the body of the outermost while loop of optimised HLO text."""
    bodies = re.findall(r"\bwhile\(.*?body=%?([\w.\-]+)", hlo)
    counts: collections.Counter = collections.Counter()
    if not bodies:
        return counts
    match = re.search(rf"^%?{re.escape(bodies[-1])}\s.*?\{{\n(.*?)\n\}}", hlo, re.M | re.S)
    for line in (match.group(1).splitlines() if match else []):
        op = re.match(r"\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*.*?\s([a-z][\w\-]*)\(", line)
        if op and op.group(1) not in NOT_WORK:
            counts[op.group(1)] += 1
    return counts


def layer_arrays_mlp(in_dim: int, out_dim: int, hidden, activation: str = "tanh", seed: int = 0) -> crux.Model:
    """crux.mlp's network and initialisation with one (w, b) per layer instead of stacks of equal layers."""
    sigma = crux.model.ACTIVATIONS[activation]
    layers = [{"w": w, "b": b} for w, b in initial_layers((in_dim, *hidden, out_dim), seed)]

    def apply(params, x):
        h = x
        for i, layer in enumerate(params):
            h = h @ layer["w"] + layer["b"]
            h = sigma(h) if i < len(params) - 1 else h
        return h
    return crux.Model(lambda key: layers, apply, in_dim=in_dim, out_dim=out_dim, seed=seed)


class _EveryUpdateApplied:
    """``jax.numpy`` whose ``where`` returns its new values: the fused guard's keep-or-drop selects vanish."""

    def __getattr__(self, name):
        return getattr(jnp, name)

    @staticmethod
    def where(condition, new, old):
        return new


class _UnrolledScans:
    """``jax`` whose ``lax.scan`` unrolls ``unroll`` iterations per loop trip (one GPU graph launch each)."""

    def __init__(self, unroll: int):
        self.lax = type("lax", (), {"__getattr__": lambda _, name: getattr(jax.lax, name),
                                    "scan": staticmethod(functools.partial(jax.lax.scan, unroll=unroll))})()

    def __getattr__(self, name):
        return getattr(jax, name)


UNROLLED_4 = [(crux.engine, "jax", _UnrolledScans(4))]
EVERY_UPDATE_APPLIED = [(crux.engine, "jnp", _EveryUpdateApplied())]
TREE_LAYOUT = [(crux.model, "layout_free", lambda optimizer: False)]
ONE_STACKED_ROW = [(crux.engine, "_figures", lambda figures: (jnp.stack(figures),))]
DEVICE_TANH = [(crux.model, "ACTIVATIONS", {**crux.model.ACTIVATIONS, "tanh": jnp.tanh}),  # and a cache of applies
               (crux.model, "_mlp_apply", functools.lru_cache(maxsize=None)(crux.model._mlp_apply.__wrapped__))]

LAYER_ARRAYS = [(crux.problems.poisson, "mlp", layer_arrays_mlp), (crux, "mlp", layer_arrays_mlp), *TREE_LAYOUT]


@contextlib.contextmanager
def patched(patches: list[tuple[object, str, object]]) -> Iterator[None]:
    """Set each ``owner.name = value`` for the duration, then put the originals back."""
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    try:
        for owner, name, value in patches:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)


class PatchedCrux(CruxVariant):
    """A crux variant built and run with patches in place (the compile key must see the same layout)."""

    def __init__(self, name: str, patches: list[tuple[object, str, object]], *args, **kwargs):
        super().__init__(name, *args, **kwargs)
        self.patches = patches

    def build(self) -> float:
        with patched(self.patches):  # the problem (and so its network) is made here
            return super().build()

    def run(self, steps: int) -> tuple[float, float]:
        with patched(self.patches):
            return super().run(steps)


CONTROL = ("while", "conditional", "call")  # instructions whose events span the ones they run


def hlo_of(variant: Variant) -> str:
    """The optimised HLO text of the program ``variant`` runs."""
    if isinstance(variant, CruxVariant):
        with patched(variant.patches):  # the key of the program its solve() compiled
            return variant.solver.compiled_call(**variant.options).call.as_text()
    return variant.call.as_text()


def device_time(variant: Variant, steps: int) -> tuple[float, dict[str, float], collections.Counter]:
    """One round of ``steps`` updates traced: its wall seconds per update, the device's seconds per update by
    timeline (``XLA Modules``: whole programs, ``XLA Ops``: instructions, loops excluded), and per instruction."""
    with tempfile.TemporaryDirectory() as folder:
        with jax.profiler.trace(folder):
            wall, _ = variant.run(steps)
        paths = list(Path(folder).rglob("*.xplane.pb"))
        data = ProfileData.from_file(str(paths[0]))
    per_op: collections.Counter = collections.Counter()
    lines: dict[str, float] = collections.defaultdict(float)
    for plane in data.planes:
        on_device = plane.name.startswith("/device:")
        for line in plane.lines:
            for event in line.events:
                hlo_op = dict(event.stats).get("hlo_op") if not on_device else None
                if on_device and line.name in ("XLA Modules", "XLA Ops"):  # a TPU names an op by its HLO text
                    name, timeline = event.name.split(" = ")[0].lstrip("%"), line.name
                elif hlo_op is not None:  # a CPU: the instructions' events sit on the host's threads
                    name, timeline = str(hlo_op), "XLA Ops"
                else:
                    continue
                if timeline == "XLA Ops":
                    if name.split(".")[0] in CONTROL:
                        continue
                    per_op[name] += event.duration_ns * 1e-9 / steps
                lines[timeline] += event.duration_ns * 1e-9 / steps
    return wall / steps, dict(lines), per_op


def profile(variants: list[Variant], steps: int, out: Path | None, tag: str) -> str:
    """Per variant: wall time per update against the device's busy time, and its costliest instructions."""
    rows = [f"### {tag}: device time per update ({steps} updates traced)", "",
            "| variant | wall µs | programs µs | instructions µs | instructions | top instructions (µs) |",
            "|---|---:|---:|---:|---:|---|"]
    for variant in variants:
        wall, lines, per_op = device_time(variant, steps)
        top = ", ".join(f"{name} {seconds * 1e6:.2f}" for name, seconds in per_op.most_common(12))
        rows.append(f"| {variant.name} | {wall * 1e6:.2f} | {lines.get('XLA Modules', 0) * 1e6:.2f} | "
                    f"{lines.get('XLA Ops', 0) * 1e6:.2f} | {len(per_op)} | {top} |")
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            slug = re.sub(r"[^\w]+", "_", f"{tag}_{variant.name}").strip("_")
            (out / f"{slug}.hlo.txt").write_text(hlo_of(variant))
            (out / f"{slug}.ops.txt").write_text("\n".join(f"{seconds * 1e6:10.3f} {name}"
                                                           for name, seconds in per_op.most_common()))
    return "\n".join(rows + [""])


def body_of(variant: Variant) -> collections.Counter:
    return loop_body_ops(hlo_of(variant))


class DissectedProblem(NamedTuple):
    """A problem to dissect: its crux problem, its points and hidden widths, and updates per round."""

    make: Callable
    points: object
    hidden: tuple[int, ...]
    steps: int


PROBLEMS = {
    "small": DissectedProblem(poisson_problem(64, (32, 32, 32)), interior(64), (32, 32, 32), 2000),
    "standard": DissectedProblem(poisson_problem(1024, (64, 64, 64)), interior(1024), (64, 64, 64), 500),
    "square": DissectedProblem(laplacian2d_problem(grid2d(256), (32, 32)), grid2d(256), (32, 32), 2000),
}
SUITE_STEPS = 2000  # updates per round on a shape of the suite, as crux-bench suite times them


def poisson_variants(problem: DissectedProblem, k: int, precision: str) -> list[Variant]:
    """crux as it is and in its diagnostic forms, beside the hand-written scan with the hand-derived u''."""
    make, points, widths = problem.make, problem.points, (problem.points.shape[1], *problem.hidden, 1)
    crux_options = dict(precision=precision, long_solve=True)
    return [PatchedCrux("crux", [], make, k, k, **crux_options),
            PatchedCrux("crux, every update checked", [], make, k, k, loop=LoopForm(guard="full"), **crux_options),
            PatchedCrux("crux, every update applied", EVERY_UPDATE_APPLIED, make, k, k, **crux_options),
            PatchedCrux("crux, scan unrolled 4x", UNROLLED_4, make, k, k, **crux_options),
            PatchedCrux("crux, tree layout", TREE_LAYOUT, make, k, k, **crux_options),
            PatchedCrux("crux, layer arrays", LAYER_ARRAYS, make, k, k, **crux_options),
            HandVariant(f"hand scan {SAME_AS_CRUX}", SAME_AS_CRUX, points, widths, k, precision=precision),
            HandVariant(f"hand scan {SAME_AS_CRUX}, unrolled 4x", SAME_AS_CRUX, points, widths, k,
                        precision=precision, loop=LoopForm(unroll=4))]


def suite_variants(shape: Shape, k: int, precision: str) -> list[Variant]:
    """crux on a shape of ``crux-bench suite`` (as a long solve() runs it): as it is, with no keep-or-drop select,
    with one stacked row, in the tree layout, with one array per layer and, where it differs, with the device's own tanh; beside that shape's hand-written scan, plain and
    unrolled four updates to a turn."""
    make = functools.partial(SuiteProblem, shape)
    crux_options = dict(precision=precision, long_solve=True)
    variants: list[Variant] = [PatchedCrux("crux", [], make, k, k, **crux_options),
                               PatchedCrux("crux, every update applied", EVERY_UPDATE_APPLIED, make, k, k,
                                           **crux_options),
                               PatchedCrux("crux, one stacked row", ONE_STACKED_ROW, make, k, k, **crux_options),
                               PatchedCrux("crux, tree layout", TREE_LAYOUT, make, k, k, **crux_options),
                               PatchedCrux("crux, layer arrays", LAYER_ARRAYS, make, k, k, **crux_options)]
    if precision != "default" and jax.default_backend() == "tpu":  # where crux evaluates its accurate tanh
        variants.append(PatchedCrux("crux, the device's tanh", DEVICE_TANH, make, k, k, **crux_options))
    return variants + [HandScan("hand scan", shape, "adam", k, precision),
                       HandScan("hand scan, unrolled 4x", shape, "adam", k, precision, unroll=4)]


def anatomy(title: str, variants: list[Variant], steps: int, repeats: int, log,
            traced: Path | None | bool = False) -> str:
    """The variants' table under ``title``; with ``traced`` (a folder for the HLO, or None) their profile too."""
    results = measure_interleaved(variants, steps, repeats, log)
    lines = [f"## {title}, {steps} updates per round, {repeats} rounds", "",
             "| variant | steps/s (median) | min-max | fixed ms/solve | body instructions | fusions | library calls "
             "| copies |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for variant in variants:
        ops, r = body_of(variant), results[variant.name]["steps_per_second"]
        fixed = results[variant.name].get("fixed_ms_per_solve")
        lines.append(f"| {variant.name} | {r['median']:.0f} | {r['min']:.0f}-{r['max']:.0f} | "
                     f"{'-' if fixed is None else f'{fixed:.2f}'} | {sum(ops.values())} | {ops['fusion']} | "
                     f"{ops['custom-call'] + ops['dot']} | {ops['copy']} |")
    lines += ["", "Loop body of crux by opcode: " + ", ".join(f"{op} {c}" for op, c in
                                                            body_of(variants[0]).most_common()), ""]
    if traced is not False:
        lines.append(profile(variants, steps, traced, title.split(":")[0]))
    return "\n".join(lines)


def _names(parser: argparse.ArgumentParser, option: str, value: str, known: dict) -> list[str]:
    """The comma-separated names of ``value``; exit 2 naming ``option`` where one is not in ``known``."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    if set(names) - set(known):
        parser.error(f"{option} {value!r}: choose from {','.join(known)}")
    return names


def main(argv: list[str] | None = None) -> int:
    """Run ``crux-bench anatomy``: print where each problem's fused update spends its time (with ``--out``, also
    into ``anatomy.md``).

    Args:
        argv: the command line after ``crux-bench anatomy`` (None: ``sys.argv[1:]``).

    Returns:
        0 when it ran.

    Raises:
        SystemExit: status 2 where ``--problems`` or ``--suite`` names one it does not know, or the two name
            nothing, before any compute.
    """
    parser = argparse.ArgumentParser(prog="crux-bench anatomy", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer updates per round")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true",
                        help="trace each variant once more: the device's time per update by instruction (with "
                             "--out, also each variant's HLO and per-instruction times there)")
    parser.add_argument("--out", type=Path, help="folder for anatomy.md")
    parser.add_argument("--problems", help=f"comma-separated, from {','.join(PROBLEMS)} (square: the 2-D problem on "
                                           f"256 points, 2 × 32; default: small,standard unless --suite is given)")
    parser.add_argument("--suite", default="", help=f"comma-separated shapes of crux-bench suite, from "
                                                    f"{','.join(SHAPES)}: crux beside that shape's hand-written scan")
    parser.add_argument("--precision", default="default", choices=("default", "high", "highest"),
                        help="the matmul precision every variant is traced at")
    args = parser.parse_args(argv)
    names = _names(parser, "--problems", "small,standard" if args.problems is None and not args.suite
                   else args.problems or "", PROBLEMS)
    shapes = _names(parser, "--suite", args.suite, SHAPES)
    if not names and not shapes:
        parser.error("--problems and --suite name nothing to dissect; e.g. --problems small or --suite burgers")
    k = SCAN_STEPS
    device = jax.devices()[0]
    text = [f"# Anatomy of a fused update\n\njax {jax.__version__} on {device.platform} ({device.device_kind}), "
            f"XLA_FLAGS: {os.environ.get('XLA_FLAGS') or '(none)'}, matmul precision {args.precision}\n"]
    traced = (args.out / "profile" if args.out else None) if args.profile else False
    for name in names:
        problem = PROBLEMS[name]
        title = (f"{name}: {len(problem.points)} points, "
                 f"{'-'.join(map(str, (problem.points.shape[1], *problem.hidden, 1)))}, inner_steps={k}")
        text.append(anatomy(title, poisson_variants(problem, k, args.precision), 200 if args.quick else problem.steps,
                            args.repeats, print, traced))
        print(text[-1])
    for name in shapes:
        shape = SHAPES[name]()
        networks = ", ".join(f"{net} {'-'.join(map(str, (d, *hidden, 1)))}" for net, (d, hidden) in
                             shape.networks.items())
        title = f"{name}: {shape.points():,} points in {len(shape.constraints)} constraints, {networks}, inner_steps={k}"
        text.append(anatomy(title, suite_variants(shape, k, args.precision), 200 if args.quick else SUITE_STEPS,
                            args.repeats, print, traced))
        print(text[-1])
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "anatomy.md").write_text("\n".join(text))
    return 0
