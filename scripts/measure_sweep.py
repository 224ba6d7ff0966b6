"""A sweep's own time: its command's wall time against its jobs' training and compilation, sweep after sweep.

    python scripts/measure_sweep.py --uri URI [--sweeps N] [--commit REV ...] SWEEP [overrides...]
    python scripts/measure_sweep.py --uri http://127.0.0.1:PORT --sweeps 6 --commit main --commit HEAD \\
        accumulation solver.epochs=5000
    pip install --no-deps --target /tmp/ml_dtypes-0.6 ml_dtypes==0.6.0
    python scripts/measure_sweep.py --uri URI --commit main --commit HEAD+/tmp/ml_dtypes-0.6 accumulation

Runs ``crux-sweep SWEEP [overrides]`` N times (default 4), each in a process of its own as a user starts it,
into the store at ``URI`` (a tracking server's ``http://...``, ``sqlite:///...``, ``postgresql://...``), in
a scratch folder (Hydra's outputs). With ``--commit`` (repeatable) each round runs the sweep once per commit,
alternated, so that a shared machine's load falls on each alike: the commit's files (``git archive``) go
before the installed crux on ``PYTHONPATH``. ``--commit REV+DIR`` puts the folder ``DIR`` right after them: what
was installed there (``pip install --target DIR``) takes the place of the environment's, another version of a
dependency beside the same environment for the other commits. For each sweep it prints the seconds of its
command, of its jobs' training and compilation (the runs' ``run_seconds`` and ``compile_seconds``, the gradient
draws' counted, as ``measure_tracking.py`` counts them), the rest, the sweep's share (the rest over the command's
seconds) and a job's median share ((run duration - training - compile) / run duration); its compile seconds and
its first jobs' compile share (each variant's first job: its compile seconds over its compile and training
seconds); then the medians per commit, and each later sweep's compile seconds over the first's: with the
overrides ``jax.compilation_cache_dir=DIR`` of a fresh DIR, what JAX's persistent compilation cache spares a
second run of the same sweep. With ``--compile-log`` each sweep runs with JAX's compile log on
(``JAX_LOG_COMPILES=1``) and the script adds where its compile seconds went: tracing, lowering and XLA's
compiles (those that the persistent cache answered apart), in all and for the programs that took longest.
"""
from __future__ import annotations

import argparse
import collections
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

from mlflow.tracking import MlflowClient

from cruxlab.measure.compile_log import FROM_THE_CACHE, stages as compile_stages
from cruxlab.store.connection import child_runs
from cruxlab.store.contract import JOB, PARENT, ROLE, VARIANT, tag_filter

REPOSITORY = Path(__file__).resolve().parent.parent
SWEEP = "import sys; sys.argv[0] = 'crux-sweep'; from cruxlab.commands.sweep import main; main()"
"""What the ``crux-sweep`` console script runs."""


def checkout(commit: str, folder: Path) -> Path:
    """The files of ``commit`` in ``folder``, laid out as crux installs them (``conf/`` and ``sweeps/`` as
    ``crux.conf`` and ``crux.sweeps``)."""
    archive = subprocess.run(["git", "-C", str(REPOSITORY), "archive", commit], check=True, capture_output=True)
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as files:
        files.extractall(folder, filter="data")
    for package in ("conf", "sweeps"):
        (folder / "crux" / package).symlink_to(folder / package, target_is_directory=True)
    return folder


def last_sweep(uri: str, name: str) -> dict[str, float]:
    """The newest sweep of experiment ``name``: its jobs' training and compilation seconds, a job's median
    share, its compile seconds and its first jobs' compile share."""
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(name)
    (parent,) = client.search_runs([experiment.experiment_id], tag_filter(ROLE, PARENT),
                                   order_by=["attributes.start_time DESC"], max_results=1)
    busy, compiled, shares, firsts = 0.0, 0.0, [], {}
    for run in child_runs(client, experiment.experiment_id, parent.info.run_id):
        metrics = run.data.metrics
        solver = sum(metrics.get(key, 0.0) for key in ("run_seconds", "compile_seconds", "gradient_noise/run_seconds",
                                                        "gradient_noise/compile_seconds"))
        duration = (run.info.end_time - run.info.start_time) / 1000
        busy += solver
        compiled += metrics.get("compile_seconds", 0.0)
        shares.append((duration - solver) / duration)
        job, variant = int(run.data.tags.get(JOB, 0)), run.data.tags.get(VARIANT, "")
        if variant not in firsts or job < firsts[variant][0]:
            firsts[variant] = (job, metrics.get("compile_seconds", 0.0), metrics.get("run_seconds", 0.0))
    first_compile = sum(c for _, c, _ in firsts.values())
    first_total = first_compile + sum(r for _, _, r in firsts.values())
    return {"busy": busy, "job_share": statistics.median(shares), "compile": compiled,
            "first_compile_share": first_compile / first_total if first_total else float("nan")}


def compile_log(output: str) -> str:
    """Where a sweep's compile seconds went, from JAX's compile log in its ``output``: seconds traced, lowered
    and compiled by XLA (those the persistent cache answered counted apart), and the three programs that took
    longest."""
    found = compile_stages(output)
    by_stage, by_program = collections.Counter(), collections.Counter()
    for program, stage, seconds in found:
        by_stage[stage] += seconds
        by_program[program] += seconds
    hits = sum(stage == FROM_THE_CACHE for _, stage, _ in found)
    longest = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in by_program.most_common(3))
    return (", ".join(f"{stage} {by_stage[stage]:.2f} s" for stage in ("traced", "lowered", "compiled",
                                                                        FROM_THE_CACHE))
            + f" ({hits} programs from the cache); longest: {longest}")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uri", required=True, help="the store: http://HOST:PORT, sqlite:///PATH, postgresql://...")
    parser.add_argument("--sweeps", type=int, default=4, help="sweeps per commit (4)")
    parser.add_argument("--commit", action="append", default=[], help="a commit to run, REV or REV+DIR with the "
                                                                      "packages in DIR (repeatable; default: the "
                                                                      "installed crux)")
    parser.add_argument("--compile-log", action="store_true", help="JAX's compile log on: where the compile "
                                                                     "seconds went")
    parser.add_argument("sweep", help="the sweep's name")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="crux-measure-sweep-") as scratch:
        trees = {commit: checkout(commit.split("+", 1)[0], Path(scratch) / f"tree{n}")
                 for n, commit in enumerate(args.commit)}
        work = Path(scratch) / "work"
        work.mkdir()
        rows: dict[str, list[dict[str, float]]] = {}
        for _ in range(args.sweeps):
            for commit in args.commit or ["installed"]:
                env = dict(os.environ, MLFLOW_TRACKING_URI=args.uri)
                if commit in trees:
                    packages = commit.split("+", 1)[1] if "+" in commit else None
                    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(trees[commit]), packages,
                                                                      env.get("PYTHONPATH"))))
                if args.compile_log:
                    env["JAX_LOG_COMPILES"] = "1"
                begin = time.perf_counter()
                done = subprocess.run([sys.executable, "-c", SWEEP, args.sweep, *args.overrides], cwd=work, env=env,
                                      check=True, stdout=subprocess.PIPE if args.compile_log else subprocess.DEVNULL,
                                      stderr=subprocess.STDOUT if args.compile_log else None, text=True)
                row = {"wall": time.perf_counter() - begin, **last_sweep(args.uri, Path(args.sweep).stem)}
                row["rest"] = row["wall"] - row["busy"]
                rows.setdefault(commit, []).append(row)
                print(f"{commit}: {row['wall']:.2f} s, training and compilation {row['busy']:.2f} s, rest "
                      f"{row['rest']:.2f} s: the sweep's share {100 * row['rest'] / row['wall']:.1f}%, a job's "
                      f"median {100 * row['job_share']:.1f}%; compile {row['compile']:.2f} s, the first jobs' "
                      f"compile share {100 * row['first_compile_share']:.1f}% (load {os.getloadavg()[0]:.1f})",
                      flush=True)
                if args.compile_log:
                    print(f"{commit}: compile log: {compile_log(done.stdout)}", flush=True)
    for commit, measured in rows.items():
        print(f"{commit}, median of {len(measured)}: rest {statistics.median(r['rest'] for r in measured):.2f} s, "
              f"the sweep's share {100 * statistics.median(r['rest'] / r['wall'] for r in measured):.1f}%, a job's "
              f"median {100 * statistics.median(r['job_share'] for r in measured):.1f}%")
        if len(measured) > 1:
            print(f"{commit}: each later sweep's compile seconds over the first's: " + ", ".join(
                f"{r['compile'] / measured[0]['compile']:.1%}" for r in measured[1:]))


if __name__ == "__main__":
    main(sys.argv[1:])
