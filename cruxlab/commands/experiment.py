"""``crux-run``: one job. Config -> problem and models -> phases of solve() on one solver -> MLflow.

    crux-run                                   # conf/config.yaml as it is
    crux-run memory=b8_acc4 solver.epochs=500  # overrides
    crux-run --multirun memory=b8,b8_acc4      # one MLflow child run per job under a parent run
    crux-run --config-dir ./myconf problem=mine  # a problem of one's own (myconf/problem/mine.yaml)
    crux-run --write-kept outputs/DATE/TIME/kept/0  # results a store fault kept, written into their run

The configs are the package's (``pkg://crux.conf``); everything a job writes goes
under the working directory unless configured (docs/usage.md).
"""
from __future__ import annotations

import argparse
import functools
import logging
import os
import re
import shutil
import sys
from pathlib import Path

from cruxlab.commands import heap

with heap.lasting():  # Hydra's and MLflow's modules, kept to the process's end: no collection walks them
    import hydra
    import jax
    from hydra import initialize_config_module
    from hydra._internal.utils import get_args_parser, run_and_report
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.plugins import Plugins
    from hydra.errors import ConfigCompositionException
    from hydra.types import RunMode
    from omegaconf import DictConfig, open_dict, read_write
    from omegaconf.errors import OmegaConfBaseException

    from hydra_plugins.crux_sweeper.config import SweeperConfig
    from hydra_plugins.crux_sweeper.crux_sweeper import CruxSweeper

    from crux import remat
    from crux.options import SolveOptions
    from crux.problems import Problem
    from cruxlab import backends, config
    from cruxlab.commands import processes
    from cruxlab.config import CONFIG_PACKAGE, Phase
    from cruxlab.config.attachments import TrainingPlan, job_plan
    from cruxlab.config.keys import refused_override
    from cruxlab.config.refusals import config_refusals
    from cruxlab.config.settings import job_options, ran_otherwise
    from cruxlab.runtime import JobRun, ParameterLeaves, parameter_leaves
    from cruxlab.runtime.capacity_job import run_capacity
    from cruxlab.runtime.compilation_cache import use_compilation_cache
    from cruxlab.runtime.composed import mode_composition_kept
    from cruxlab.runtime.interrupt import exit_status, interruptible, signal_name
    from cruxlab.runtime.kept import WRITE_KEPT
    from cruxlab.runtime.liveness import SWEEP_PID
    from cruxlab.runtime.objective import objective_value
    from cruxlab.runtime.paired_timing import time_against
    from cruxlab.runtime.tracebacks import errors_raised_by_hydra, job_failed, tracebacks_shown
    from cruxlab.runtime.write_kept import write_lone_kept
    from cruxlab.store.connection import StoreError
    from cruxlab.store.faults import StoreFault
    from cruxlab.store.secrets import masked, move_override_credentials

log = logging.getLogger(__name__)


def configure_jax(cfg: DictConfig) -> None:
    """Before any JAX work: the persistent compilation cache (repeats and later sweeps skip compiling), no
    GPU memory preallocation when a launcher runs jobs side by side (each would take 75% of the device), and
    no line about platforms JAX probes and cannot start (:func:`platform_probe_quiet`)."""
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode == RunMode.MULTIRUN and not hydra_cfg.launcher._target_.endswith(".BasicLauncher"):
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    use_compilation_cache(cfg.jax.compilation_cache_dir)
    quiet_platform_probe()


def quiet_platform_probe() -> None:
    """Keep JAX's line about platforms it probes and cannot start off the console (:func:`platform_probe_quiet`):
    in a job, and in a sweep's process, whose check builds the jobs' problems before any job starts."""
    probe = logging.getLogger(PLATFORM_PROBE)
    if platform_probe_quiet not in probe.filters:
        probe.addFilter(platform_probe_quiet)


PLATFORM_PROBE = "jax._src.xla_bridge"
"""The logger by which JAX says, at INFO level, which optional platforms it could not start (``Unable to
initialize backend 'tpu': ... libtpu.so ...`` on every machine without a TPU)."""


def platform_probe_quiet(record: logging.LogRecord) -> bool:
    """False for JAX's INFO line about an optional platform it probed and could not start, which reads like an
    error on every CPU or GPU machine; its warnings (a GPU present without a CUDA-enabled jaxlib) pass."""
    return record.levelno >= logging.WARNING or not record.getMessage().startswith("Unable to initialize backend")


def checked_by_the_sweep(hydra_cfg: DictConfig) -> bool:
    """Whether crux's sweeper, in this process, refused or passed this job's config with every other job's
    before the first started (:class:`cruxlab.runtime.multirun.Multirun`), so that the job needs no check of its
    own. Any other job is checked by itself: a single run, another sweeper's job, and a job that a launcher
    runs in another process, whose machine (its devices, its packages) may refuse what the sweep's passed."""
    return (hydra_cfg.mode == RunMode.MULTIRUN and hydra_cfg.sweeper._target_ == SweeperConfig._target_
            and os.environ.get(SWEEP_PID) == str(os.getpid()))


def train(problem: Problem, phases: list[Phase], cfg: DictConfig, phase_ends: list[ParameterLeaves],
          plan: TrainingPlan | None = None, options: SolveOptions | None = None) -> None:
    """Run the phases on the problem's one solver with ``options`` (default: the job's as its solver runs them,
    :func:`cruxlab.config.settings.job_options`), each phase at its own epochs, appending every model's parameters
    to ``phase_ends`` after each phase (so those of the phases before a failure are kept).

    Each network trains in each phase with what ``plan`` says (default: :func:`cruxlab.config.attachments.job_plan`):
    in the first, its problem's own optimizer and schedule, or the config's where it has none or they were chosen
    explicitly; in a later phase whose optimizer and schedule equal the previous phase's, what it had (solve()
    resumes its optimizer state and schedule position); in any other, a fresh optimizer of the phase's.
    """
    plan = plan if plan is not None else job_plan(problem, phases, cfg)
    solver = problem.solver()
    options = options if options is not None else job_options(cfg, solver)[1]
    for number, phase in enumerate(phases, 1):
        log.info("training phase %d of %d: %d epochs, %s", number, len(phases), phase.epochs,
                 ", ".join(f"{name} {attached.words}" for name, attached in plan.phases[number - 1].items()))
        plan.attach(number - 1, problem.models)
        solver.solve(phase.epochs, options)
        phase_ends.append(parameter_leaves(problem.models))


def train_job(cfg: DictConfig, run: JobRun, problem: Problem | None = None) -> float:
    """The job's work once its run is open: problem built (unless given, built before the run), config logged
    (with the options as the problem's solver runs them, :meth:`crux.Crux.resolve`), phases trained, results
    logged; what ``objective`` names (:mod:`cruxlab.runtime.objective`; the final total loss by default)."""
    if cfg.backend.name != "crux":
        run.log_config(cfg)
        run.trains()
        return backends.run_on_backend(cfg, run)
    if cfg.capacity.option is not None:
        run.log_config(cfg)
        run.trains()
        return run_capacity(cfg, run)
    phases = config.training_phases(cfg)
    try:
        problem = problem if problem is not None else config.problem(cfg)
        solver = problem.solver()
        requested, options = job_options(cfg, solver)  # the one value training, the draws and the timing take
        ran = ran_otherwise(requested, options, {c.name: c.size for c in solver.constraints})
    except Exception:
        run.log_config(cfg)  # the failed run keeps what it was asked to run
        raise
    plan = job_plan(problem, phases, cfg)
    run.log_config(cfg, *ran, plan)
    run.check_room(problem, sum(phase.epochs for phase in phases), len(phases))
    run.trains()
    # A job is evidence on a claim: checkpoint_gradients runs the form of the least memory, as where memory
    # decides, not the one a small update runs uncompared (crux.remat).
    with remat.forms_compared():
        if backends.draws_wanted(cfg):
            run.log_metrics(backends.crux_gradient_draws(problem, backends.draws_wanted(cfg), options,
                                                         cfg.solver.seed).metrics())
        initial = parameter_leaves(problem.models)
        phase_ends: list[ParameterLeaves] = []
        try:
            train(problem, phases, cfg, phase_ends, plan, options)
        finally:  # a failed or stopped phase keeps the history and the parameter snapshots up to it
            history = problem.solver().history
            if history is not None:
                run.log_results(problem, history, initial, phase_ends)
        if processes.is_recording_process():  # one process of several times nothing: its timing would share the cores
            time_against(cfg, run, requested=requested, applied=options)
    return objective_value(cfg.objective, history, problem.relative_l2() if cfg.objective == "error" else {})


@hydra.main(version_base="1.3", config_path=f"pkg://{CONFIG_PACKAGE}", config_name="config")
def run_job(cfg: DictConfig) -> float:
    """One job; returns what ``objective`` names, the final total loss by default (what a searching Hydra sweeper,
    Optuna's, minimises). Stopped by SIGINT or
    SIGTERM, it closes its run KILLED with the history so far and raises KeyboardInterrupt. A job that fails
    closes its run FAILED and raises :class:`JobFailed` (a single run: exits), one line, its traceback in the
    job's log file."""
    configure_jax(cfg)
    with interruptible():
        try:
            checked = checked_by_the_sweep(HydraConfig.get())
            refused = [] if checked else config_refusals(cfg)
            if refused:
                raise ValueError("; ".join(refused))
            processes.join(cfg.jax, cfg.solver.devices)
            heap.between_jobs()
            # built before its run, as the sweep built it before the first job: one that cannot be is refused
            problem = config.built_problem(cfg) if not checked and config.builds_problem(cfg) else None
            run = JobRun.start(cfg) if processes.is_recording_process() else processes.Unrecorded()
        except (ValueError, StoreError, OmegaConfBaseException) as error:  # no run yet: nothing to record
            if isinstance(error, config.UnbuiltProblem) and tracebacks_shown():
                raise
            if HydraConfig.get().mode == RunMode.RUN:
                remove_output_dir(HydraConfig.get())
            raise SystemExit(f"crux-run: {error}") from None
        try:
            with run:
                return train_job(cfg, run, problem)
        except StoreFault as fault:  # the store's, not the job's: the run could not be closed with it
            if HydraConfig.get().mode == RunMode.RUN:
                raise SystemExit(f"crux-run: {masked(str(fault))}") from None
            raise  # the sweep ends with it, in one line
        except Exception as error:  # noqa: BLE001 - the run closed FAILED with it; said in one line
            failed = job_failed(error)
            if HydraConfig.get().mode == RunMode.RUN and not tracebacks_shown():
                raise SystemExit(f"crux-run: {failed}") from None  # past Hydra, which would print it again
            raise failed from error


HYDRA_FILES = {".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml"}
"""What Hydra writes into a single run's folder before the job starts (``hydra.output_subdir``)."""


def remove_output_dir(hydra_cfg: DictConfig) -> None:
    """Remove the folder Hydra made for a single run that was refused before its run existed (``outputs/<date>/
    <time>``: Hydra's files and an empty log), and the folders above it inside the working directory that it
    leaves empty: a refused command leaves nothing behind. A folder holding anything else (a log with lines,
    another run's files) is left as it is."""
    folder, log = Path(hydra_cfg.runtime.output_dir), f"{hydra_cfg.job.name}.log"
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:
        if Path(handler.baseFilename).parent == folder:
            root.removeHandler(handler)
            handler.close()
    written = {str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file()}
    if written - HYDRA_FILES - {log} or ((folder / log).is_file() and (folder / log).stat().st_size):
        return
    shutil.rmtree(folder)
    here = Path(hydra_cfg.runtime.cwd)  # the command's folder, also where Hydra ran the job in its own
    for parent in folder.parents:
        if parent == here or not parent.is_relative_to(here) or any(parent.iterdir()):
            break
        parent.rmdir()


ALREADY_THERE = re.compile(r"Could not append to config\. An item is already at '([^']+)'")
"""Hydra's refusal of ``+key=value`` for a key the config has: ``+`` adds a key."""


def reported(error: Exception) -> str | None:
    """A key crux's schema or the problem's function lacks (Hydra's "Could not override 'solver.X'"), a key
    added with ``+`` that the config has already, or a value of the wrong type for its key, in one line, said
    for every job of a multirun; None for any other error, which Hydra reports."""
    if not isinstance(error, ConfigCompositionException):
        return None
    arguments = get_args_parser().parse_args()
    every_job = " (in every job); nothing was run" if arguments.multirun else ""
    there = ALREADY_THERE.search(str(error))
    if there is not None:
        key = there[1]
        written = next((o for o in arguments.overrides if o.startswith(f"+{key}=")), f"+{key}=...")
        return f"{written}: {key} is in the config already, and + adds a key: write {written[1:]}{every_job}"
    line = refused_override(error, lambda key: composed(arguments, config.overrides_without(arguments.overrides,
                                                                                          key)))
    return line + every_job if line is not None else None


def composed(arguments: argparse.Namespace, overrides: list[str], mode: RunMode = RunMode.MULTIRUN) -> DictConfig:
    """The config the command line's ``arguments`` (its ``--config-dir``) and ``overrides`` compose, as Hydra
    composes it in ``mode`` (sweeps not expanded)."""
    search = [f"hydra.searchpath=[file://{Path(arguments.config_dir).resolve()}]"] if arguments.config_dir else []
    with initialize_config_module(CONFIG_PACKAGE, version_base="1.3"):
        return GlobalHydra.instance().config_loader().load_configuration("config", search + overrides, mode,
                                                                         validate_sweep_overrides=False)


def shown_refusals(program: str) -> None:
    """After ``--cfg job`` (or ``all``) has shown a single run's config: what in it ``program`` would refuse, one
    line on stderr, so that the config shown is not taken for one that runs."""
    arguments = get_args_parser().parse_args()
    if arguments.cfg not in ("job", "all") or arguments.multirun:
        return
    try:
        cfg = composed(arguments, arguments.overrides, RunMode.RUN)
        with read_write(cfg), open_dict(cfg):
            del cfg["hydra"]
        refused = config_refusals(cfg)
    except (ConfigCompositionException, OmegaConfBaseException, ValueError) as error:
        refused = [reported(error) or str(error).splitlines()[0]]
    if refused:
        print(f"{program}: this config would be refused: {'; '.join(refused)}", file=sys.stderr)


def write_kept_command(program: str, arguments: list[str]) -> None:
    """``crux-run --write-kept FOLDER``: the results a lone run kept after a store fault written into its run
    (:func:`cruxlab.runtime.write_kept.write_lone_kept`); exits, status 0 once written, else 1 with one line."""
    if len(arguments) != 1:
        raise SystemExit(f"{program}: {WRITE_KEPT} takes one folder, the one the run's last line named")
    try:
        line = write_lone_kept(Path(arguments[0]))
    except (ValueError, StoreError, StoreFault, OSError) as error:
        store = f"{error.store} failed: " if getattr(error, "store", None) else ""
        raise SystemExit(f"{program}: {store}{masked(str(error))}") from None
    print(f"{program}: {line}")
    raise SystemExit(0)


def main(program: str = "crux-run") -> None:
    """The console script ``crux-run`` (and the multirun of ``crux-sweep``): Hydra reads the command line. Once the
    run or sweep is done the process ends here with status 0, its exit handlers run but not the interpreter's
    teardown (:func:`cruxlab.commands.heap.exit_without_teardown`).

    Args:
        program: the command named in its messages (``crux-run`` or ``crux-sweep``).

    Raises:
        SystemExit: status 130 or 143 when SIGINT or SIGTERM stopped it (the run closed KILLED); status 1 with one
            line for an override that names no key, adds a key the config has or gives a value of the wrong type
            (every other error as Hydra reports it, also status 1; with ``HYDRA_FULL_ERROR=1``, the exception).
    """
    if sys.argv[1:2] == [WRITE_KEPT]:
        write_kept_command(program, sys.argv[2:])
    config.import_from_working_directory()
    quiet_platform_probe()
    Plugins.instance().register(CruxSweeper)  # Hydra's scan misses it in an editable install
    sys.argv = move_override_credentials(sys.argv)  # Hydra saves the overrides, crux records them
    try:
        with errors_raised_by_hydra(), mode_composition_kept():
            run_job()
    except KeyboardInterrupt as stopped:
        print(f"{program}: stopped by {signal_name(stopped)}; the run closed KILLED with what it had logged",
              file=sys.stderr)
        raise SystemExit(exit_status(stopped)) from None
    except Exception as error:  # noqa: BLE001 - handed back by Hydra: said in one line, else as Hydra says it
        if tracebacks_shown():
            raise
        line = reported(error)
        if line is None:
            run_and_report(functools.partial(raise_again, error))  # Hydra's report; it exits with status 1
        raise SystemExit(f"{program}: {line}") from None
    shown_refusals(program)
    heap.exit_without_teardown()


def raise_again(error: Exception) -> None:
    raise error


if __name__ == "__main__":
    main()
