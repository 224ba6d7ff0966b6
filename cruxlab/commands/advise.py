"""``crux-advise [overrides]``: which solve() options to use on a problem, on the machine it runs on.

    crux-advise                                             # the default problem (poisson1d), budget 180 s
    crux-advise problem=heat1d model.width=32 --budget 120
    crux-advise --config-dir conf problem=unit_square       # a problem of one's own
    crux-advise --memory-budget 2000000000                  # weigh the memory options on a CPU (2 GB)
    crux-advise --capacity                                  # the largest batches that fit, with and without each
    crux-advise --against sqlite:////other/mlflow.db         # that store's recorded advice beside this one's

It runs the built-in sweep ``advise`` (sweeps/advise.yaml: each option beside the defaults, two repeats, the
second a round-off twin) on the problem and model the overrides choose, with the paired timings sized to the
budget; then ``crux-report advise`` on that sweep; then :func:`cruxlab.report.advice.advise` on its verdicts,
with the memory options weighed by the largest batches of the configured setting that fit the memory budget without
an option and with each (:func:`setting_capacity`) where the full batch does not fit or ``--capacity`` asks. It
prints the solve() call and the pipeline's overrides, each choice with its evidence, and what was rejected, and
writes ``advice.md`` and ``advice.json`` beside the report (and on the sweep's parent run), so that
``crux-report advise --against URI`` compares the evidence of two machines.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from omegaconf import OmegaConf

from cruxlab.commands import sweep as sweeps
from cruxlab.store.contract import ADVICE, ADVICE_DOCUMENT
from cruxlab.store.secrets import masked

SWEEP = "advise"
JOBS_GROUP = "advise_jobs"  # the sweep's own group: one option per setting (sweeps/advise_jobs/)
DEFAULT_BUDGET = 180.0
FUSED = 10  # the fewest updates a call the sweep fuses (sweeps/advise_jobs/fused10.yaml)
TIMING_SHARE = 0.5  # of the budget, for the paired timings; training, compiling and the report take the rest
VARIED = ("memory", "solver.inner_steps", "solver.precision", "timing", "repeat", "roundoff_twin", "variant",
          "hydra.sweeper", "sweeps")
"""What the sweep sets in each job: an override of these would make its pairs unlike."""


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def _last(overrides: list[str], key: str) -> str | None:
    """The value the last override of ``key`` gives it; None where none does."""
    return next((o.split("=", 1)[1] for o in reversed(overrides) if "=" in o and _key(o) == key), None)


def refused_overrides(overrides: list[str]) -> list[str]:
    """The overrides that set what the sweep varies (``memory.batchsize=8``), which no advice could rest on.

    Args:
        overrides: the command line's overrides.

    Returns:
        Those that set a key of :data:`VARIED` or below it, as given.
    """
    keys = [(o, _key(o)) for o in overrides]
    return [o for o, key in keys if any(key == v or key.startswith(v + ".") or key.startswith(v + "/") or
                                        key.startswith(v + "@") for v in VARIED)]


def timed_runs() -> int:
    """The jobs of the advise sweep that time themselves after training (a ``timing.against`` of their own)."""
    sweep = sweeps.find_sweep(SWEEP)
    options = [entry for entry in (sweep.folder / JOBS_GROUP).iterdir() if entry.name.endswith(sweeps.SUFFIXES)]
    timed = sum(1 for entry in options if "against" in (OmegaConf.create(entry.read_text()).get("timing") or {}))
    repeats = str(sweep.config.hydra.sweeper.params.repeat).split(",")
    return timed * len(repeats)


def run_advise_sweep(args: argparse.Namespace, sweep_dir: Path, timing_seconds: float) -> int:
    """crux-sweep advise in a process of its own (it owns the device while it runs); its exit status. SIGINT and
    SIGTERM are passed on to it and waited for, so that it closes its runs with the truth (crux-sweep ignores a
    second signal while it closes them).

    Args:
        args: the parsed command line (its ``--config-dir`` and overrides).
        sweep_dir: the sweep's Hydra folder, which tells its parent run.
        timing_seconds: each paired timing's budget.

    Returns:
        crux-sweep's exit status.
    """
    config_dir = ["--config-dir", str(args.config_dir.resolve())] if args.config_dir else []
    overrides = [o for o in args.overrides if _key(o) != "hydra.sweep.dir"]
    command = [sys.executable, "-m", "cruxlab.commands.sweep", SWEEP, *config_dir, *overrides,
               f"timing.budget_seconds={timing_seconds:g}", f"hydra.sweep.dir={sweep_dir}"]
    process = subprocess.Popen(command)
    passed_on = {number: signal.signal(number, lambda received, _: process.send_signal(received))
                 for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        return process.wait()
    finally:
        for number, handler in passed_on.items():
            signal.signal(number, handler)


def parent_run(uri: str | None, sweep_dir: Path) -> str | None:
    """The parent run of the sweep that ran in ``sweep_dir``.

    Args:
        uri: the store (None: as crux-sweep finds it).
        sweep_dir: the sweep's Hydra folder.

    Returns:
        The run's id; None where the sweep opened none (refused, or no store).
    """
    from cruxlab.report.sweep_reader import StoreError, open_client
    from cruxlab.store.contract import PARENT, ROLE, SWEEP_DIR

    try:
        client, _ = open_client(uri)
        experiment = client.get_experiment_by_name(SWEEP)
    except StoreError:  # no store: the sweep was refused before it made one
        return None
    if experiment is None:
        return None
    runs = client.search_runs([experiment.experiment_id], filter_string=f"tags.`{ROLE}` = '{PARENT}'")
    found = [r.info.run_id for r in runs if r.data.tags.get(SWEEP_DIR) == str(sweep_dir)]
    return found[0] if found else None


def record_advice(uri: str | None, parent: str, advice_md: str, advice_json: str) -> None:
    """Record the advice on the sweep's parent run; a store that refuses is said in one line on stderr.

    Args:
        uri: the store (None: as crux-sweep finds it).
        parent: the sweep's parent run.
        advice_md: the text of advice.md.
        advice_json: the text of advice.json.
    """
    from mlflow.exceptions import MlflowException

    from cruxlab.report.sweep_reader import StoreError, open_client

    try:
        client, _ = open_client(uri)
        client.log_text(parent, advice_md, ADVICE_DOCUMENT)
        client.log_text(parent, advice_json, ADVICE)
    except (MlflowException, StoreError, OSError) as error:
        print(f"crux-advise: could not add the advice to parent run {parent}: {error}", file=sys.stderr)


def recorded(uri: str | None, parent: str | None) -> tuple[str, dict]:
    """The advice crux-advise recorded on an advise sweep's parent run.

    Args:
        uri: the store (None: as crux-sweep finds it).
        parent: the sweep's parent run (None: the newest complete advise sweep there).

    Returns:
        The run's id and its advice.json.

    Raises:
        StoreError: naming what could not be read (the store, the sweep, its advice).
    """
    from mlflow.exceptions import MlflowException

    from cruxlab.report.sweep_reader import StoreError, load_sweep, open_client

    sweep = load_sweep(SWEEP, parent, uri)
    client, resolved = open_client(uri)
    with tempfile.TemporaryDirectory() as folder:
        try:
            path = client.download_artifacts(sweep.parent_id, ADVICE, folder)
        except (MlflowException, OSError) as error:
            raise StoreError(f"sweep {sweep.parent_id} at {masked(resolved)} holds no {ADVICE} ({error}): it was run "
                             f"by crux-sweep, not crux-advise; `crux-report advise --against` compares its "
                             f"verdicts") from None
        return sweep.parent_id, json.loads(Path(path).read_text(encoding="utf-8"))


def against(uri: str | None, parent: str | None, other: str) -> int:
    """``--against URI[#RUN]``: prints the advice recorded there (before) beside this store's (after).

    Args:
        uri: this store (None: as crux-sweep finds it).
        parent: this store's advise sweep (None: its newest complete).
        other: ``URI[#PARENT_RUN]`` of the other store.

    Returns:
        0; 2 when either advice cannot be read.
    """
    from cruxlab.report.advice import side_by_side
    from cruxlab.report.against import split_against
    from cruxlab.report.sweep_reader import StoreError

    try:
        other_uri, other_parent, _ = split_against(other)
        before_run, before = recorded(other_uri, other_parent)
        after_run, after = recorded(uri, parent)
    except StoreError as error:
        print(f"crux-advise: {error}", file=sys.stderr)
        return 2
    print(f"before: sweep {before_run} at {masked(other_uri)}\nafter:  sweep {after_run}\n")
    print("\n".join(side_by_side(before, after)))
    print(f"\nthe evidence, claim by claim: crux-report advise --against '{masked(other)}'")
    return 0


def report_and_advise(parent: str, uri: str | None, out: Path, args: argparse.Namespace) -> bool:
    """crux-report advise on the sweep of ``parent`` into ``out``, then the advice from its verdicts (and, where
    memory is tight or ``--capacity`` asks, the largest batches of the setting that fit, :func:`setting_capacity`):
    printed, written beside the report and recorded on the parent run.

    Args:
        parent: the sweep's parent run.
        uri: the store (None: as crux-sweep finds it).
        out: the report's folder.
        args: the parsed command line (``--memory-budget``, None: the device's own; ``--capacity``; the overrides).

    Returns:
        True; False where crux-report could not read the sweep.
    """
    from cruxlab.report.advice import advise, memory_is_tight
    from cruxlab.report.cli import UNREAD, main as report

    if report(["advise", "--run", parent, "--out", str(out), *(["--tracking-uri", uri] if uri else [])]) == UNREAD:
        return False
    verdicts = json.loads((out / "verdicts.json").read_text(encoding="utf-8"))
    budget = memory_budget(args.memory_budget)
    capacity = None
    if budget is None and args.capacity:
        print("crux-advise: --capacity: this device reports no memory limit (a CPU): give --memory-budget BYTES to "
              "search the largest batches that fit", file=sys.stderr)
    elif budget is not None and (args.capacity or memory_is_tight(verdicts, budget)):
        print(f"crux-advise: the largest batches that fit {budget:,} bytes, without a memory option and with each "
              f"(compiled, not run)", flush=True)
        capacity = setting_capacity(args, budget)
    advice = advise(verdicts, budget, capacity)
    advice_json = json.dumps(advice.as_dict(), indent=2, sort_keys=True) + "\n"
    (out / ADVICE_DOCUMENT).write_text(advice.markdown(), encoding="utf-8")
    (out / ADVICE).write_text(advice_json, encoding="utf-8")
    record_advice(uri, parent, advice.markdown(), advice_json)
    print("\n" + "\n".join(advice.lines()))
    return True


def setting_capacity(args: argparse.Namespace, budget: int) -> dict:
    """:func:`cruxlab.capacity_search.largest_batches` on the problem and model the command line's overrides
    configure, each network with what its first phase trains it with.

    Args:
        args: the parsed command line (its ``--config-dir`` and overrides).
        budget: the bytes the update may take.

    Returns:
        The batches tried and the full batch, as :func:`cruxlab.report.advice.advise` weighs them.
    """
    from hydra.types import RunMode

    from cruxlab import config
    from cruxlab.capacity_search import largest_batches
    from cruxlab.commands.experiment import composed
    from cruxlab.config.attachments import job_plan

    config.import_from_working_directory()  # a problem of one's own, as the sweep's jobs import it
    cfg = composed(args, [o for o in args.overrides if _key(o) != "hydra.sweep.dir"], RunMode.RUN)
    problem = config.problem(cfg)
    job_plan(problem, config.training_phases(cfg)[:1], cfg).attach(0, problem.models)
    return largest_batches(problem.solver(), budget)


def memory_budget(declared: int | None) -> int | None:
    """The memory the update may take.

    Args:
        declared: ``--memory-budget`` in bytes, or None.

    Returns:
        ``declared``, else the device's own memory (None on a CPU, which reports none).
    """
    from cruxlab.capacity_search import budget

    return budget(declared)


def command_line_refusal(args: argparse.Namespace) -> str | None:
    """What keeps the command line from an advice, before anything runs.

    Args:
        args: the parsed command line.

    Returns:
        The refusal, said with its fix; None where nothing does.
    """
    if args.budget <= 0:
        return f"--budget {args.budget:g}: must be > 0 seconds, e.g. --budget 180"
    if args.memory_budget is not None and args.memory_budget < 1:
        return f"--memory-budget {args.memory_budget}: must be >= 1 byte, e.g. --memory-budget 2000000000"
    if args.config_dir is not None and not args.config_dir.is_dir():
        return f"--config-dir {args.config_dir}: no such folder"
    epochs = _last(args.overrides, "solver.epochs")
    if epochs is not None and epochs.isdigit() and int(epochs) % FUSED:
        return (f"solver.epochs={epochs}: crux-advise times inner_steps={FUSED} against 1, which must divide the "
                f"epochs: give a multiple of {FUSED}, e.g. solver.epochs={max(FUSED, int(epochs) // FUSED * FUSED)}")
    backend = _last(args.overrides, "backend")
    if backend not in (None, "crux"):
        return (f"backend={backend}: crux-advise advises crux's own solve(); to judge the options on {backend}, run "
                f"`crux-sweep advise backend={backend}` and `crux-report advise`")
    varied = refused_overrides(args.overrides)
    if varied:
        return (f"{' '.join(varied)}: crux-advise sets the solve() options and their timings itself (each beside the "
                f"defaults); give the problem, model, optimizer or solver.epochs instead")
    if args.capacity and args.against:
        return "--capacity searches the batches that fit, and --against runs nothing: give one of them"
    if args.parent and not args.against:
        return "--run chooses the sweep --against compares; without --against crux-advise runs a new sweep"
    return None


def main(argv: list[str] | None = None) -> int:
    """The console script ``crux-advise``: runs the advise sweep within a time budget, reports it and prints the
    advice (or, with ``--against``, sets two stores' recorded advice side by side, running nothing).

    Args:
        argv: the command line without the program's name (None: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 with the advice printed; 1 when the sweep opened no run or crux-report could not read
        it; 2 when a store ``--against`` names cannot be read; 130 or 143 when SIGINT or SIGTERM stopped the sweep
        (its runs closed KILLED).

    Raises:
        SystemExit: status 2 on bad arguments (a budget <= 0, a missing ``--config-dir``, epochs not a multiple of
            the fused steps, another backend, an override of what the sweep sets itself: :data:`VARIED`, ``--run``
            without ``--against``), before anything runs.
    """
    parser = argparse.ArgumentParser(prog="crux-advise", description=__doc__.split("\n")[0],
                                     epilog="Results go under the working directory: the runs in mlflow.db "
                                            "(MLFLOW_TRACKING_URI or tracking.uri= elsewhere), the report and the "
                                            "advice in reports/advise/<UTC time>/.")
    parser.add_argument("--budget", type=float, default=DEFAULT_BUDGET, metavar="SECONDS",
                        help=f"the time to spend, about (default {DEFAULT_BUDGET:g}); half of it goes to the paired "
                             f"timings, so a larger budget decides closer speed differences")
    parser.add_argument("--memory-budget", type=int, metavar="BYTES",
                        help="the memory the update may take (default: the device's own; a CPU reports none, and "
                             "the memory options then stay off)")
    parser.add_argument("--capacity", action="store_true",
                        help="search the largest batches of the setting that fit the memory budget, without a memory "
                             "option and with each, even where the full batch fits (done anyway where it does not)")
    parser.add_argument("--config-dir", "-cd", type=Path, metavar="DIR",
                        help="a folder of config groups of one's own, e.g. problem/mine.yaml: problem=mine")
    parser.add_argument("--out", type=Path, help="the report's folder (default reports/advise/<UTC time>/)")
    parser.add_argument("--against", metavar="URI[#PARENT_RUN]",
                        help="run nothing: set the advice recorded in another store (its newest complete advise "
                             "sweep, or the parent run after '#') beside this store's, option by option")
    parser.add_argument("--run", dest="parent", metavar="PARENT_RUN",
                        help="with --against: this store's advise sweep to compare (default: the newest complete)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every job: the problem, the model, "
                                                     "the optimizer, solver.epochs, tracking.uri")
    args = parser.parse_intermixed_args(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # a bar per artifact read drowns the advice
    refused = command_line_refusal(args)
    if refused:
        parser.error(refused)
    uri = _last(args.overrides, "tracking.uri")
    if args.against:
        return against(uri, args.parent, args.against)
    started = time.monotonic()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    given = _last(args.overrides, "hydra.sweep.dir")
    sweep_dir = Path(given or Path("multirun") / f"advise-{stamp}-{os.getpid()}").resolve()
    out = args.out or Path.cwd() / "reports" / SWEEP / stamp
    timed = timed_runs()
    timing_seconds = max(1.0, args.budget * TIMING_SHARE / timed)
    print(f"crux-advise: budget {args.budget:g} s: the sweep {SWEEP} (each option beside the defaults), its "
          f"{timed} paired timings up to {timing_seconds:.3g} s each; then its report and the advice", flush=True)
    status = run_advise_sweep(args, sweep_dir, timing_seconds)
    if status in (128 + signal.SIGINT, 128 + signal.SIGTERM):
        print(f"crux-advise: the sweep was stopped (status {status}): no advice; run crux-advise again",
              file=sys.stderr)
        return status
    parent = parent_run(uri, sweep_dir)
    if parent is None:
        print(f"crux-advise: the sweep opened no run (status {status}): nothing to advise from", file=sys.stderr)
        return 1
    if status != 0:
        print(f"crux-advise: the sweep ended with status {status}: the advice rests on the runs that finished, and "
              f"what lacks runs stays at its default", file=sys.stderr)
    if not report_and_advise(parent, uri, out, args):
        return 1  # crux-report said why it could not read the sweep
    print(f"\nadvice: {out / ADVICE_DOCUMENT} (sweep {parent}); measured in {time.monotonic() - started:.0f} s, "
          f"budget {args.budget:g} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
