"""``crux-sweep SWEEP [overrides]``: run a sweep as a Hydra multirun logged to MLflow; the overrides apply to
every job.

    crux-sweep --list                                      # the sweeps and the claims they check
    crux-sweep accumulation                                # a built-in sweep, by name
    crux-sweep accumulation solver.epochs=30               # shorter, every job
    crux-sweep offload hydra/launcher=joblib               # jobs in parallel processes
    crux-sweep ./my_sweep.yaml --config-dir ./myconf       # a sweep file, config groups of one's own
    crux-sweep my_sweep --sweeps-dir ./sweeps              # a folder of one's own sweeps, by name
    crux-sweep accumulation --resume                       # the jobs of the newest one that did not finish

A sweep file is a Hydra config merged at the top level of every job's config
(whether or not it starts with ``# @package _global_``): ``hydra.sweeper.params``
says what varies, ``claim`` says in words what the sweep checks, ``claims`` names
the checks ``crux-report`` runs on it (keys of ``cruxlab.report.CHECKS``). crux-sweep
registers the file in Hydra's ConfigStore as option NAME of the group ``sweeps``
(the ConfigStore travels to launchers' worker processes) and runs
``crux-run --multirun +sweeps=NAME [overrides]``; the experiment is named NAME.
crux's Hydra sweeper (:mod:`cruxlab.runtime.multirun`) runs the multirun, ``--resume``
sets its ``hydra.sweeper.resume``.
"""
from __future__ import annotations

import argparse
import difflib
import shlex
import sys
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Iterable

from omegaconf import DictConfig, OmegaConf

from cruxlab import device_start
from cruxlab.store.contract import CHECKED_CLAIMS

SWEEP_PACKAGE = "crux.sweeps"
"""The package that holds the built-in sweeps (the repository's ``sweeps/``)."""
SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class SweepFile:
    """A sweep: its name (the file's stem, which names the experiment), where it was read, its config, and the
    folder it lives in (whose sub-folders are config groups the sweep may choose from, as ``sweeps/<sub-folder>``)."""

    name: str
    source: str
    config: DictConfig
    folder: Traversable

    @property
    def claim(self) -> str:
        """The claim the sweep sets out to check, in words ("" where it states none)."""
        return str(self.config.get("claim", "")).strip()

    @property
    def claims(self) -> list[str]:
        """The checks of crux-report that judge it (empty: its name's check where there is one, else every check)."""
        return list(self.config.get("claims", []))

    @property
    def problem_fields(self) -> dict[str, str]:
        """The problem fields the sweep sets for every job (``problem: {n_interior: 1024}``) or sweeps
        (``hydra.sweeper.params``), as ``problem.<field>`` -> the value written."""
        written = OmegaConf.to_container(self.config, resolve=False)
        fields = {f"problem.{key}": str(value) for key, value in (written.get("problem") or {}).items()}
        params = ((written.get("hydra") or {}).get("sweeper") or {}).get("params") or {}
        return {**fields, **{key: str(value) for key, value in params.items() if key.startswith("problem.")}}


def problem_note(sweep: SweepFile, overrides: list[str]) -> str | None:
    """What the sweep changes of a problem chosen on the command line (``problem=mine``).

    Args:
        sweep: the sweep.
        overrides: the command line's overrides.

    Returns:
        The fields it sets over the problem's own values (those not given on the command line), and how to
        choose others; None when no problem is chosen or the sweep sets none.
    """
    chosen = [o.split("=", 1)[1] for o in overrides if o.startswith("problem=")]
    typed = {o.split("=", 1)[0].lstrip("+") for o in overrides if o.lstrip("+").startswith("problem.")}
    fields = {key: value for key, value in sweep.problem_fields.items() if key not in typed}
    if not chosen or not fields:
        return None
    return (f"{sweep.name} sets {', '.join(f'{key}={value}' for key, value in fields.items())} in every job, over "
            f"problem={chosen[-1]}'s own value; give {' '.join(f'{key}=...' for key in fields)} on the command line "
            f"to choose another")


def read_sweep(name: str, source: str, text: str, folder: Traversable) -> SweepFile:
    """A sweep file, read.

    Args:
        name: the sweep's name (the file's stem).
        source: where it was read, named in the messages.
        text: the file's text.
        folder: the folder it lives in.

    Returns:
        The sweep.

    Raises:
        ValueError: naming the file, for anything but a YAML mapping whose ``claims`` is a list.
    """
    try:
        config = OmegaConf.create(text)
    except Exception as error:  # omegaconf reports YAML errors as several exception types
        raise ValueError(f"{source}: not a YAML mapping: {error}") from None
    if not isinstance(config, DictConfig):
        raise ValueError(f"{source}: a sweep file is a YAML mapping (claim, hydra.sweeper.params, ...)")
    claims = config.get("claims", [])
    if not OmegaConf.is_list(claims) and claims != []:
        raise ValueError(f"{source}: claims: {claims!r} is not a list; write e.g. `claims: [accumulation]`")
    return SweepFile(name, source, config, folder)


def sweeps_in(folder: Path) -> dict[str, SweepFile]:
    """The sweep files of a folder.

    Args:
        folder: a ``--sweeps-dir``.

    Returns:
        ``{name: sweep}`` of its ``.yaml``/``.yml`` files.

    Raises:
        ValueError: no such folder, or a file :func:`read_sweep` refuses.
    """
    if not folder.is_dir():
        raise ValueError(f"--sweeps-dir {folder}: no such folder")
    return {path.stem: read_sweep(path.stem, str(path), path.read_text(), folder)
            for path in sorted(folder.iterdir()) if path.suffix in SUFFIXES}


def builtin_sweeps(name: str | None = None) -> dict[str, SweepFile]:
    """The sweeps installed with crux, by name; with ``name``, only the file of that name is read (a command
    runs one sweep: the others' files are not parsed)."""
    folder = files(SWEEP_PACKAGE)
    entries = sorted(folder.iterdir(), key=lambda entry: entry.name)
    return {Path(entry.name).stem: read_sweep(Path(entry.name).stem, f"{SWEEP_PACKAGE}/{entry.name}",
                                              entry.read_text(), folder)
            for entry in entries if entry.name.endswith(SUFFIXES) and name in (None, Path(entry.name).stem)}


def available(folders: list[Path] | tuple[Path, ...] = (), name: str | None = None) -> dict[str, SweepFile]:
    """The sweeps a name can choose.

    Args:
        folders: the ``--sweeps-dir`` folders, in order.
        name: where given, the built-in sweeps are read for this name only (every folder is read whole).

    Returns:
        ``{name: sweep}``: the built-in ones, then those of each folder (a later one wins on a name).

    Raises:
        ValueError: as :func:`sweeps_in` raises it.
    """
    sweeps = builtin_sweeps(name)
    for folder in folders:
        sweeps.update(sweeps_in(folder))
    return sweeps


def find_sweep(spec: str, folders: list[Path] | tuple[Path, ...] = ()) -> SweepFile:
    """The sweep the command line names.

    Args:
        spec: a sweep file's path (it ends ``.yaml`` or ``.yml``), else a sweep's name.
        folders: the ``--sweeps-dir`` folders, searched after the built-in sweeps.

    Returns:
        The sweep.

    Raises:
        ValueError: no such file or sweep, saying what there is to choose from; as :func:`read_sweep` raises it.
    """
    if spec.endswith(SUFFIXES):
        path = Path(spec)
        if not path.is_file():
            raise ValueError(f"no sweep file {spec}")
        return read_sweep(path.stem, str(path.resolve()), path.read_text(), path.resolve().parent)
    sweeps = available(folders, spec)
    if spec not in sweeps:
        sweeps = available(folders)
        raise ValueError(f"unknown sweep {spec!r}{did_you_mean(spec, sweeps)}; choose one of {', '.join(sweeps)} "
                         f"(see --list), or give a sweep file's path (my_sweep.yaml)")
    return sweeps[spec]


def did_you_mean(name: str, names: Iterable[str]) -> str:
    """A hint for a misspelt name.

    Args:
        name: the name given.
        names: the names there are.

    Returns:
        `` (did you mean accumulation?)`` for the one of ``names`` closest to ``name``, else "".
    """
    closest = difflib.get_close_matches(name, list(names), n=1)
    return f" (did you mean {closest[0]}?)" if closest else ""


def check_claims(sweep: SweepFile) -> None:
    """Refuse a sweep whose ``claims`` crux-report cannot judge, before any job runs.

    Args:
        sweep: the sweep.

    Raises:
        ValueError: ``claims`` names a check crux-report does not have.
    """
    unknown = [claim for claim in sweep.claims if claim not in CHECKED_CLAIMS]
    if unknown:
        raise ValueError(f"{sweep.source}: claims: no check named {', '.join(map(repr, unknown))}"
                         f"{did_you_mean(unknown[0], CHECKED_CLAIMS)}; choose from {sorted(CHECKED_CLAIMS)}")


def register(sweep: SweepFile, command: str) -> None:
    """Make ``sweep`` Hydra's option ``sweeps=<name>``, with ``command`` (the command line that runs it) for
    the parent run's description, and every file of a sub-folder ``G`` of its folder option ``sweeps/G=<stem>``
    (a sweep's own group, chosen in its defaults list or swept: ``sweeps/G@_global_: a,b``).

    Args:
        sweep: the sweep.
        command: the command line that runs it, credentials left out.
    """
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    node = sweep.config.copy()
    OmegaConf.update(node, "hydra.sweeper.command", command, force_add=True)
    store.store(group="sweeps", name=sweep.name, node=node, package="_global_", provider="crux-sweep")
    for group in sweep.folder.iterdir():
        if not group.is_dir():
            continue
        for option in group.iterdir():
            if option.name.endswith(SUFFIXES):
                store.store(group=f"sweeps/{group.name}", name=Path(option.name).stem,
                            node=OmegaConf.create(option.read_text()), provider="crux-sweep")


def own_config_files(sweep: SweepFile, config_dir: Path | None) -> list[Path]:
    """The config files a job of ``sweep`` may choose beyond crux's own: those of ``config_dir`` (``--config-dir``)
    and the options of the groups of the sweep's folder (as :func:`register` makes them)."""
    found = sorted(config_dir.rglob("*.y*ml")) if config_dir is not None else []
    for group in sweep.folder.iterdir():
        if group.is_dir():
            found += [Path(str(option)) for option in group.iterdir() if option.name.endswith(SUFFIXES)]
    return found


def refuse_other_sweepers(overrides: list[str]) -> None:
    """Raise ValueError, in one line saying what works, for an override that chooses another Hydra sweeper: a
    claim's sweep is the jobs its file lists, which crux's sweeper runs under one parent run and the report
    judges; a search (Optuna's) runs under ``crux-run -m``.

    Args:
        overrides: the command line's overrides.

    Raises:
        ValueError: an override ``hydra/sweeper=`` other than ``crux``.
    """
    for override in overrides:
        key, _, choice = override.lstrip("+~").partition("=")
        if key == "hydra/sweeper" and choice != "crux":
            raise ValueError(f"{override}: crux-sweep runs a claim's sweep with crux's own sweeper; to search with "
                             f"another sweeper run `crux-run -m {override} ...`, each job returning what "
                             f"objective=final_loss|error|run_seconds names (docs/usage.md)")


def main(argv: list[str] | None = None) -> None:
    """The console script ``crux-sweep``: checks the sweep and the overrides, then hands the multirun to
    ``crux-run``'s main (:func:`cruxlab.commands.experiment.main`), which ends the process.

    Args:
        argv: the command line without the program's name (None: ``sys.argv[1:]``).

    Raises:
        SystemExit: status 2, in one line, where no sweep is named or found, another ``hydra/sweeper`` is chosen,
            ``--config-dir`` is no folder, or the sweep names a claim crux-report has no check for; before
            anything runs. Otherwise as ``crux-run`` exits.
    """
    parser = argparse.ArgumentParser(prog="crux-sweep", description="Run a sweep as a Hydra multirun logged to "
                                     "MLflow; the overrides apply to every job.",
                                     epilog="Results go under the working directory: the MLflow store mlflow.db "
                                            "(and mlartifacts/; MLFLOW_TRACKING_URI or tracking.uri= elsewhere), "
                                            "Hydra's folders in multirun/. Then: crux-report NAME.")
    parser.add_argument("--list", action="store_true", help="name the sweeps and their claims")
    parser.add_argument("sweep", nargs="?", help="a sweep's name (built-in or in --sweeps-dir) or a sweep "
                                                 "file's path (ending .yaml)")
    parser.add_argument("--sweeps-dir", action="append", type=Path, default=[], metavar="DIR",
                        help="a folder of sweep files, found by name (repeatable; a later folder wins)")
    parser.add_argument("--config-dir", "-cd", type=Path, metavar="DIR",
                        help="a folder of config groups of one's own, e.g. problem/mine.yaml (Hydra's "
                             "--config-dir): problem=mine")
    parser.add_argument("--resume", action="store_true",
                        help="continue the newest sweep of this name under its parent run: run its jobs that did "
                             "not finish (failed, stopped, never started) as it planned them; nothing if it is "
                             "complete")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every job")
    words = sys.argv[1:] if argv is None else argv
    args = parser.parse_intermixed_args(words)
    try:
        if args.list:
            sweeps = available(args.sweeps_dir)
            width = max(map(len, sweeps))
            for name, sweep in sweeps.items():
                print(f"{name:<{width}}  {' '.join(sweep.claim.split()) or '(no claim)'}")
            return
        if args.sweep is None:
            parser.error("name a sweep (see --list) or give a sweep file's path")
        refuse_other_sweepers(args.overrides)
        sweep = find_sweep(args.sweep, args.sweeps_dir)
        if args.config_dir is not None and not args.config_dir.is_dir():
            raise ValueError(f"--config-dir {args.config_dir}: no such folder")
        check_claims(sweep)
        if device_start.why_not_early(OmegaConf.to_container(sweep.config, resolve=False), args.overrides,
                                      own_config_files(sweep, args.config_dir)) is None:
            device_start.start_beside()  # while the imports below run, in the thread that imports them
    except ValueError as error:  # one line, as every refusal before a run: no usage to read past
        parser.exit(2, f"crux-sweep: {error}\n")
    from cruxlab.commands import experiment  # after the argument checks: importing JAX and Hydra takes seconds
    from cruxlab.store.secrets import overrides_without_credentials

    # the command is recorded and shown; crux-run's main moves the credentials into the environment
    register(sweep, shlex.join(["crux-sweep", *overrides_without_credentials(words)]))
    note = problem_note(sweep, args.overrides)
    if note:
        print(f"crux-sweep: {note}", flush=True)

    config_dir = ["--config-dir", str(args.config_dir.resolve())] if args.config_dir is not None else []
    resume = ["hydra.sweeper.resume=true"] if args.resume else []
    sys.argv = [sys.argv[0], "--multirun", *config_dir, f"+sweeps={sweep.name}", *args.overrides, *resume]
    experiment.main("crux-sweep")


if __name__ == "__main__":
    main()
