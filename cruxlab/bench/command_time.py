"""Where a command's time goes outside the training it runs: a sweep command, run as a user runs it.

    crux-bench command crux-sweep accumulation solver.epochs=10
    crux-bench command --repeats 5 crux-sweep accumulation            # the sweep at its defaults
    crux-bench command --store sqlite:///runs.db crux-sweep accumulation solver.epochs=10

Runs the command ``--repeats`` times (default 3), each in a fresh process, in a scratch folder (Hydra's outputs)
and into one store (default a fresh SQLite file in that folder: the first command creates it, the later ones
find it), then reads the sweep's newest parent run and its jobs' runs back from the store. For each command it
prints its wall time; the time before its parent run opens (starting Python, the imports, the device
runtime's start, Hydra's composition and the jobs' check); the parent run's time; the time after the parent
run closes (the job table, the exit); the sum of the jobs' training and compilation (``run_seconds`` and
``compile_seconds``, the gradient draws' counted); the time inside the parent run outside any job's run
(Hydra's work between jobs); a job's time beyond its training and compilation (the rest of its run: building,
logging, the writes on its path), median and largest; and the sweep's own share, the command's time beyond its
jobs' training and compilation over its wall time. The persistent compilation cache is the one the command's
config names (crux's default: ``~/.cache/crux/jax``), warm after the first command. Where Python writes no
bytecode (``PYTHONDONTWRITEBYTECODE``) and none is cached for crux's modules (an editable install never run
otherwise), every command compiles them: the first line says how many, and ``python -m compileall`` on the
checkout writes it, as an install from a wheel does.

For reference, each measured ``--repeats`` times in a fresh process of its own: Python's start alone, and
within a process, ``import jax``, the device runtime's start (``jax.devices()`` after it), ``import mlflow``,
``import hydra`` and ``import crux``. This process itself never starts the device runtime: an accelerator
serves one process at a time.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import entry_points
from pathlib import Path

from crux.timing.machine import cpu_model

DEFAULT_REPEATS = 3
SOLVER_METRICS = ("run_seconds", "compile_seconds", "gradient_noise/run_seconds", "gradient_noise/compile_seconds")
"""A job's metrics that count its training and compilation (the gradient draws' included)."""
REFERENCES = {  # name -> the statements timed in a fresh process, after ``setup``
    "import jax": ("", "import jax"),
    "jax.devices() after import jax": ("import jax", "jax.devices()"),
    "import mlflow": ("", "import mlflow"),
    "import hydra": ("", "import hydra"),
    "import crux": ("", "import crux"),
}


def solver_seconds(metrics: dict[str, float]) -> float:
    """A job's training and compilation seconds, from its run's metrics."""
    return sum(metrics.get(key, 0.0) for key in SOLVER_METRICS)


def program(name: str) -> list[str]:
    """The command line that starts ``name``: a console script of an installed distribution (``crux-sweep``) as
    its script does, with this Python (found also where the distribution's scripts are on no PATH, as in an
    install with ``pip --target``); any other program as a shell finds it."""
    (script, *_) = [*entry_points(group="console_scripts", name=name), None]
    if script is None:
        return [shutil.which(name) or name]
    module, _, function = script.value.partition(":")
    return [sys.executable, "-c", f"import sys; sys.argv[0] = {name!r}; from {module} import {function}; "
                                  f"sys.exit({function}())"]


def newest_sweep(uri: str) -> dict[str, float]:
    """The newest parent run in the store at ``uri``: its start and end (seconds since the epoch), and its jobs'
    runs' durations and training and compilation seconds."""
    from mlflow.tracking import MlflowClient  # this process alone reads the store: none of the command's cost

    from cruxlab.store.connection import child_runs
    from cruxlab.store.contract import PARENT, ROLE, tag_filter

    client = MlflowClient(uri)
    experiments = client.search_experiments()
    parents = client.search_runs([e.experiment_id for e in experiments], tag_filter(ROLE, PARENT),
                                 order_by=["attributes.start_time DESC"], max_results=1)
    if not parents:
        raise ValueError(f"no sweep's parent run in {uri}: the command ran no sweep")
    parent = parents[0]
    jobs = [{"seconds": (run.info.end_time - run.info.start_time) / 1000, "solver": solver_seconds(run.data.metrics)}
            for run in child_runs(client, parent.info.experiment_id, parent.info.run_id) if run.info.end_time]
    return {"start": parent.info.start_time / 1000, "end": (parent.info.end_time or 0) / 1000, "jobs": jobs}


def command_parts(began: float, ended: float, sweep: dict) -> dict[str, float]:
    """A command's time split by its parent run: ``began`` and ``ended`` (seconds since the epoch) are the
    command's process's start and end as the bench saw them, ``sweep`` what :func:`newest_sweep` read."""
    jobs = sweep["jobs"]
    parent = sweep["end"] - sweep["start"]
    solver = sum(job["solver"] for job in jobs)
    beyond = [job["seconds"] - job["solver"] for job in jobs]
    wall = ended - began
    in_jobs = sum(job["seconds"] for job in jobs)
    return {"wall": wall, "before parent": sweep["start"] - began, "parent": parent,
            "after parent": ended - sweep["end"], "jobs": len(jobs), "training and compile": solver,
            "parent outside jobs": parent - in_jobs, "outside runs": wall - in_jobs,
            "job beyond, median": statistics.median(beyond) if beyond else float("nan"),
            "job beyond, largest": max(beyond, default=float("nan")),
            "own share": (wall - solver) / wall}


def run_command(command: list[str], folder: Path, uri: str) -> dict[str, float]:
    """Run ``command`` once in ``folder`` into the store at ``uri``; its parts (:func:`command_parts`)."""
    env = dict(os.environ, MLFLOW_TRACKING_URI=uri)
    began = time.time()
    done = subprocess.run([*program(command[0]), *command[1:]], cwd=folder, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    ended = time.time()
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} ended with status {done.returncode}:\n{done.stdout[-3000:]}")
    return command_parts(began, ended, newest_sweep(uri))


def reference(setup: str, statement: str) -> float:
    """Seconds of ``statement`` after ``setup`` in a fresh Python process; for an empty statement, the wall time
    of a process that does nothing (Python's start and exit)."""
    if not statement:
        began = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        return time.perf_counter() - began
    code = (f"import time\n{setup}\nbegan = time.perf_counter()\n{statement}\n"
            f"print(time.perf_counter() - began)")
    return float(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                                text=True).stdout.split()[-1])


def machine_line() -> str:
    """When and where: date, commit, CPU model, cores, load; and crux's modules that each command compiles."""
    from cruxlab.bench.host import CHECKOUT
    from cruxlab.runtime.provenance import checkout

    tree = checkout(CHECKOUT)
    commit = (tree["commit"] or "?")[:7] + ("" if tree["clean"] in (True, None) else " with local changes")
    uncached, modules = uncached_modules(PACKAGES)
    compiled = (f"; {uncached} of crux's {modules} modules compiled by every command (PYTHONDONTWRITEBYTECODE set, "
                f"no bytecode cached: `python -m compileall` writes it, as an install does)" if uncached else "")
    return (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}; CPU {cpu_model()}, "
            f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}{compiled}")


PACKAGES = ("crux", "cruxlab", "hydra_plugins.crux_sweeper")
"""crux's Python packages, whose modules a sweep command imports."""


def uncached_modules(packages: tuple[str, ...]) -> tuple[int, int]:
    """How many modules of ``packages`` Python compiles from source at each start, and of how many: those without
    bytecode cached for their source as it is now, where Python writes none (``PYTHONDONTWRITEBYTECODE``, which
    the commands inherit; 0.2 s of a sweep command's start on a 2-core CPU); 0 where Python writes it, as only
    the first command then compiles them."""
    sources = [path for package in packages for folder in (importlib.util.find_spec(package)
                                                             .submodule_search_locations or [])
               for path in Path(folder).rglob("*.py")]
    if not (sys.flags.dont_write_bytecode or os.environ.get("PYTHONDONTWRITEBYTECODE")):
        return 0, len(sources)
    return sum(not _bytecode_cached(path) for path in sources), len(sources)


def _bytecode_cached(source: Path) -> bool:
    """Whether ``source`` has bytecode that Python's import takes as it is: its cache file, for this Python, made
    from a source of this modification time and size (or checked by hash)."""
    try:
        header = Path(importlib.util.cache_from_source(str(source))).read_bytes()[:16]
    except OSError:
        return False
    if len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER:
        return False
    if int.from_bytes(header[4:8], "little"):  # a hash-based file, checked against its source by its own rule
        return True
    stat = source.stat()
    return (int.from_bytes(header[8:12], "little") == int(stat.st_mtime) & 0xFFFFFFFF
            and int.from_bytes(header[12:16], "little") == stat.st_size & 0xFFFFFFFF)


ROWS = ("wall", "before parent", "parent", "after parent", "parent outside jobs", "outside runs", "training and compile",
        "job beyond, median", "job beyond, largest", "own share")


def parts_table(rows: list[dict[str, float]]) -> str:
    """The commands' parts side by side, one column a command (the first into a fresh store)."""
    lines = ["| | " + " | ".join(f"command {n}" for n in range(1, len(rows) + 1)) + " |",
             "|---|" + "---:|" * len(rows)]
    for name in ROWS:
        cells = [f"{100 * row[name]:.1f}%" if name == "own share" else f"{row[name]:.2f} s" for row in rows]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def command_options() -> argparse.ArgumentParser:
    """``crux-bench command``'s options."""
    parser = argparse.ArgumentParser(prog="crux-bench command", description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="e.g. crux-bench command crux-sweep accumulation solver.epochs=10")
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS,
                        help=f"commands run, each in a fresh process (default {DEFAULT_REPEATS})")
    parser.add_argument("--store", help="the store the commands write (default: a fresh SQLite file in the "
                                        "scratch folder)")
    parser.add_argument("--no-references", action="store_true", help="leave out the imports timed alone")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the sweep command, e.g. crux-sweep accumulation")
    return parser


def main(argv: list[str]) -> int:
    """``crux-bench command [options] COMMAND...``: prints the table and the references; 0 once measured.

    Raises:
        SystemExit: status 2 without a command or with ``--repeats`` below 1, before anything runs.
        RuntimeError: a command failed, with the end of its output.
    """
    options = command_options()
    args = options.parse_args(argv)
    if not args.command:
        options.error("give the command to measure, e.g. crux-bench command crux-sweep accumulation "
                      "solver.epochs=10")
    if args.repeats < 1:
        options.error(f"--repeats {args.repeats}: give 1 or more")
    header = machine_line()
    print(f"{' '.join(args.command)}: {header}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="crux-bench-command-") as scratch:
        uri = args.store or f"sqlite:///{Path(scratch) / 'mlflow.db'}"
        for n in range(args.repeats):
            rows.append(run_command(args.command, Path(scratch), uri))
            row = rows[-1]
            print(f"command {n + 1}: {row['wall']:.2f} s, parent run {row['parent']:.2f} s, training and compile "
                  f"{row['training and compile']:.2f} s over {row['jobs']} jobs; outside runs "
                  f"{row['outside runs']:.2f} s, own share {100 * row['own share']:.1f}% "
                  f"(load {os.getloadavg()[0]:.2f})", flush=True)
    print(parts_table(rows))
    references = {}
    if not args.no_references:
        references["python start"] = statistics.median(reference("", "") for _ in range(args.repeats))
        for name, (setup, statement) in REFERENCES.items():
            references[name] = statistics.median(reference(setup, statement) for _ in range(args.repeats))
        print("alone, each in a fresh process (median of {}): ".format(args.repeats)
              + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in references.items()))
    if args.json:
        args.json.write_text(json.dumps({"command": args.command, "machine": header, "commands": rows,
                                         "references": references}, indent=1))
    return 0
