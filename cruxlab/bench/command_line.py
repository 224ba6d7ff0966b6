"""``crux-bench`` (``python -m cruxlab.bench``): its options, checked before any compute, and the run, problem by
problem, its tables written after each (a run cut short by a time limit still leaves them)."""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import cruxlab.bench
from crux import precision as matmul
from cruxlab.bench import speed_table
from cruxlab.bench.first_update import first_update, first_updates
from cruxlab.bench.fusing import bench_fusing
from cruxlab.bench.hand_written import FORMS, SAME_AS_CRUX
from cruxlab.bench.host import CHECKOUT, bench_environment
from cruxlab.bench.interleaved import PRECISIONS, Rounds
from cruxlab.bench.jno_column import merge_jno
from cruxlab.bench.laplacian_2d import bench_laplacian
from cruxlab.bench.loop_forms import loop_forms
from cruxlab.bench.micro_batches import bench_accumulation
from cruxlab.bench.scaling import bench_scaling, plot_scaling
from cruxlab.bench.shapes import bench_shapes
from cruxlab.bench.standard import bench_small, bench_standard
from cruxlab.bench.tables import markdown
from cruxlab.bench.targets import targets
from cruxlab.bench.throughput import THROUGHPUT_SIZES, THROUGHPUT_WIDTHS, bench_throughput
from cruxlab.runtime.provenance import checkout

COMMAND = "crux-bench"
PROBLEMS = ("standard", "small", "accumulation", "laplacian", "scaling", "fusing", "throughput", "shapes")
QUICK_PROBLEMS = ("standard", "small", "accumulation")  # the rest compile too many programs for a minute
SUBCOMMANDS = {  # crux-bench NAME ...: measurements beside the tables, each a module with main(argv)
    "anatomy": "cruxlab.bench.anatomy",  # where a fused update's time goes, crux beside variants of it
    "calls": "cruxlab.bench.call_cost",  # what a fused call costs beyond its updates
    "command": "cruxlab.bench.command_time",  # where a sweep command's time goes outside its training
    "compile": "cruxlab.bench.compile_cost",  # a first solve()'s compile per memory option, fresh processes
    "fused": "cruxlab.bench.against_jno_fused",
    "suite": "cruxlab.bench.suite",  # crux against the hand-written scan on a suite of shapes: compile and speed  # crux and jNO at K = 1, 10, 100, 1000 updates a call (jno extra)
}


def write(report: dict, out: Path | None, jno: Path | None, started: float, final: bool) -> str:
    """Merge the jNO column, judge the targets, and write bench.md/bench.json (and scaling.png) to ``out``.

    Args:
        report: the run's report so far; its targets, seconds and completeness are set here.
        out: the folder to write (None: nothing written).
        jno: a jNO measurement (``bench_jno.sh``'s JSON) to merge, or None.
        started: ``time.perf_counter()`` at the run's start.
        final: whether every problem asked for was measured.

    Returns:
        The tables, as bench.md holds them.
    """
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


def parser() -> argparse.ArgumentParser:
    """crux-bench's options."""
    parser = argparse.ArgumentParser(prog=COMMAND, description=cruxlab.bench.__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=f"also: {COMMAND} {{{','.join(SUBCOMMANDS)}}} --help (measurements beside "
                                            f"the tables)")
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
                        help=f"measure {','.join(speed_table.README_PROBLEMS)} and jNO (in its own process, unless "
                             f"--jno) and write the CPU column of README.md's speed table; needs a clean checkout")
    return parser


def _readme_here(parser: argparse.ArgumentParser, option: str) -> None:
    """Refuse ``option`` where crux runs from no checkout (installed from a wheel): it writes a checkout's README."""
    if not speed_table.README.exists():
        parser.error(f"{option} writes README.md of the checkout crux runs from, and there is none at "
                     f"{speed_table.README} (crux installed from a wheel): run it from a checkout, after "
                     f"pip install -e .")


def readme_from(parser: argparse.ArgumentParser, paths: list[Path]) -> int:
    """``--readme-from``: README.md's speed table from the bench.json of runs made elsewhere; measures nothing.

    Args:
        parser: the command line's parser, which refuses.
        paths: the runs' bench.json files.

    Returns:
        0 once the table is written.

    Raises:
        SystemExit: status 2 for a missing or unmergeable file, runs of none of the table's problems, or no
            checkout to write.
    """
    absent = [str(path) for path in paths if not path.exists()]
    if absent:
        parser.error(f"--readme-from {' '.join(absent)}: no such file (write it with --out FOLDER: "
                     f"FOLDER/bench.json)")
    try:
        report = speed_table.merged([json.loads(path.read_text()) for path in paths])
    except ValueError as error:
        parser.error(str(error))
    problems = speed_table.README_PROBLEMS
    if not set(problems) & set(report["problems"]):
        parser.error(f"--readme-from: no run measured any of {','.join(problems)}, the problems of the "
                     f"README's table (--problems)")
    _readme_here(parser, "--readme-from")
    missing = [p for p in problems if p not in report["problems"]]
    print(speed_table.update_readme(report, speed_table.README))
    if missing:
        print(f"no run measured {','.join(missing)}: their rows keep what the {speed_table.report_column(report)} "
              f"column held ('not run' in a new column)", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """The console script ``crux-bench``: measures the problems asked (or runs a subcommand of
    :data:`SUBCOMMANDS`), printing the tables and writing them after each problem where ``--out`` is given.

    Args:
        argv: the command line without the program's name (None: ``sys.argv[1:]``).

    Returns:
        0 when it ran (a subcommand: the status its ``main`` returns).

    Raises:
        SystemExit: status 2 on bad options (an unknown problem or form, a precision that is none, ``--readme``
            with a partial run, uncommitted changes or no checkout, a missing ``--jno`` or ``--readme-from``
            file), before any compute.
        subprocess.CalledProcessError: the jNO measurement of ``--readme`` failed in its own process.
    """
    arguments = sys.argv[1:] if argv is None else argv
    if arguments and arguments[0] in SUBCOMMANDS:
        return importlib.import_module(SUBCOMMANDS[arguments[0]]).main(arguments[1:])
    options = parser()
    args = options.parse_args(arguments)
    if args.readme_from:
        return readme_from(options, args.readme_from)
    if args.peak_tflops is not None and not args.peak_tflops > 0:
        options.error(f"--peak-tflops {args.peak_tflops}: give the device's peak in TFLOP/s, e.g. --peak-tflops 197 "
                      f"(TPU v5e, bfloat16)")
    try:
        precision = matmul.checked(args.precision, "--precision")
    except ValueError:
        options.error(f"--precision {args.precision!r} is not a matmul precision; use default (here the default: "
                      f"hand-written JAX's own, one bfloat16 pass on a TPU), high or highest (full float32)")
    if args.first_update:
        print(first_update(args.first_update, precision))
        return 0
    default = speed_table.README_PROBLEMS if args.readme else QUICK_PROBLEMS if args.quick else PROBLEMS
    problems = [p.strip() for p in (args.problems or ",".join(default)).split(",") if p.strip()]
    unknown = sorted(set(problems) - set(PROBLEMS))
    if unknown:
        options.error(f"unknown problems {unknown}; choose from {','.join(PROBLEMS)}")
    forms = [f.strip() for f in args.forms.split(",") if f.strip()]
    if set(forms) - set(FORMS) or SAME_AS_CRUX not in forms:
        options.error(f"--forms takes names from {','.join(FORMS)} and must include {SAME_AS_CRUX}")
    if args.quick and args.forms == ",".join(FORMS):
        forms = [SAME_AS_CRUX]  # compiling every formulation alone would take the minute
    if args.jno and not args.jno.exists():
        options.error(f"--jno {args.jno}: no such file (write it with scripts/bench_jno.sh)")
    if args.readme:
        if args.quick or args.problems or args.forms != ",".join(FORMS):
            options.error("--readme measures the README's problems in full: drop --quick, --problems and --forms")
        _readme_here(options, "--readme")
        speed_table.readme_table(speed_table.README.read_text())  # a README without the table: say so first
        if checkout(CHECKOUT)["clean"] is not True:
            options.error("--readme writes the commit it measured into README.md: commit your changes first "
                          "(git status shows them)")
        if args.jno is None and importlib.util.find_spec("jno") is None:
            options.error("--readme needs jNO for the crux / jNO rows: pip install -e '.[jno]', or pass --jno FILE "
                          "written by scripts/bench_jno.sh")
    log = lambda text: print(text, file=sys.stderr, flush=True)
    fast_repeats = args.repeats or (3 if args.quick else 5)
    slow_repeats = args.repeats or 3
    rounds = lambda repeats: Rounds(args.quick, repeats, precision, tuple(args.loop_forms))
    # before this process opens the device: an accelerator takes one process at a time
    first = first_updates(1 if args.quick else slow_repeats, precision, log) if "standard" in problems else None
    env = bench_environment()

    started = time.perf_counter()
    report: dict[str, Any] = {"command": " ".join([COMMAND, *arguments]), "quick": args.quick, "environment": env,
                              "problems": {}}
    if args.readme and args.jno is None:  # jNO first, in its own process, on the machine as the run finds it
        args.jno = Path(tempfile.mkdtemp(prefix="crux-bench-")) / "jno.json"
        log(f"[{time.perf_counter() - started:6.1f} s] jNO, in its own process")
        command = [sys.executable, "-m", "cruxlab.bench.jno_problems", "--out", str(args.jno),
                   "--problems", ",".join(problems)]
        subprocess.run(command + ([] if args.repeats is None else ["--repeats", str(args.repeats)]), check=True,
                       stdout=sys.stderr)
    report["repeats"] = {"fast problems": fast_repeats, "slow problems": slow_repeats}
    best_form = SAME_AS_CRUX
    for problem in problems:
        log(f"[{time.perf_counter() - started:6.1f} s] {problem}")
        if problem == "standard":
            result = bench_standard(rounds(slow_repeats), log, forms=forms)
            result["first_update"] = first
            best_form = result["variants"][result["best"]["loop"]]["form"]
        elif problem == "small":
            result = bench_small(rounds(fast_repeats), log, forms=forms)
        elif problem == "accumulation":
            result = bench_accumulation(rounds(fast_repeats), log, best_form)
        elif problem == "laplacian":
            result = bench_laplacian(rounds(slow_repeats), log, forms=forms)
        elif problem == "fusing":
            result = bench_fusing(rounds(fast_repeats), log)
        elif problem == "throughput":
            def keep(partial: dict) -> None:  # every row as it comes: a run cut short keeps the rows it made
                report["problems"][problem] = partial
                if args.out:
                    write(report, args.out, args.jno, started, final=False)
            result = bench_throughput(rounds(slow_repeats), log, args.sizes, args.widths, args.precisions,
                                      args.peak_tflops, on_row=keep)
        elif problem == "shapes":
            result = bench_shapes(rounds(slow_repeats), log, args.precisions)
        else:
            result = bench_scaling(rounds(slow_repeats), log, best_form)
        report["problems"][problem] = result
        if args.out:  # after every problem: a run cut short by a time limit still leaves its tables
            write(report, args.out, args.jno, started, final=False)
    text = write(report, args.out, args.jno, started, final=True)
    print(text)
    if args.readme:
        print(speed_table.update_readme(report))
        log(f"wrote the speed table of {speed_table.README}")
    if args.mlflow:
        from cruxlab.bench.mlflow_run import log_mlflow  # MLflow loads only where a run is logged

        out = args.out
        if out is None:  # MLflow gets the files too: write them somewhere
            out = Path(tempfile.mkdtemp(prefix="crux-bench-"))
            write(report, out, None, started, final=True)
        log(f"MLflow run {log_mlflow(report, out)}")
    log(f"done in {time.perf_counter() - started:.0f} s")
    return 0
