"""What identifies the code and the command that produced a run, recorded in ``environment.json`` so that a
report can say how to rebuild its runs.

crux itself is identified by how it was installed: from a wheel, by the wheel's sha256
(pip records it in the distribution's ``direct_url.json``) and, whatever the
installer, by :func:`files_sha256` over the hashes of crux's installed files in its
``RECORD`` (the same for every install of the same wheel); from a checkout (an
editable install, or ``pip install`` of its folder whose files are still those installed), by the checkout's
commit and whether it had uncommitted changes.
The user's problem is identified by its module's file and that file's sha256, the
job by its command line and overrides.
"""
from __future__ import annotations

import base64
import getpass
import hashlib
import importlib.util
import json
import shlex
import subprocess
import sys
from importlib.metadata import Distribution, PackageNotFoundError, distribution
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig
from mlflow.utils.credentials import read_mlflow_creds

from cruxlab.runtime.composed import override_lines
from cruxlab.store.contract import CONFIG_NAME, GIT_COMMIT, OVERRIDES, SOURCE_NAME, SOURCE_TYPE, USER
from cruxlab.store.secrets import masked, overrides_without_credentials

PACKAGES = ("crux/", "cruxlab/", "hydra_plugins/")
"""The folders of crux's wheel, whose installed files identify the crux that ran."""


def git(root: Path, *args: str) -> str | None:
    """``git -C root args``'s output, or None where git is absent or fails (``root`` not in a repository)."""
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def checkout(root: Path) -> dict[str, Any]:
    """``commit`` of the git repository holding ``root`` and ``clean`` (no uncommitted changes to the files git
    tracks: what runs write beside them, a store or Hydra's folders, does not count); both None outside one."""
    commit = git(root, "rev-parse", "HEAD")
    status = git(root, "status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "clean": None if status is None else not status}


def files_sha256(dist: Distribution) -> str | None:
    """The sha256 of the sorted ``path,hash`` lines of crux's own files in ``dist``'s RECORD (compiled caches
    left out): the same for every install of one wheel, whatever the installer; None without a RECORD."""
    lines = sorted(f"{f},{f.hash.value}" for f in dist.files or () if f.hash is not None
                   and str(f).startswith(PACKAGES) and "__pycache__" not in f.parts)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest() if lines else None


def installed_crux(dist: Distribution | None = None) -> dict[str, Any]:
    """How the crux that runs was installed: ``crux_version``; from a wheel, ``crux_wheel`` (its file name),
    ``crux_wheel_path`` (where pip took it from, where that was a file), ``crux_wheel_sha256`` and
    ``crux_files_sha256``; from a checkout, ``crux_commit``, ``crux_clean``, ``crux_source`` (the checkout's
    folder) and ``crux_origin`` (its remote ``origin``, where it has one). ``dist``: crux's distribution (default:
    the installed one)."""
    try:
        dist = dist or distribution("crux")
    except PackageNotFoundError:
        dist = None
    direct = json.loads(dist.read_text("direct_url.json") or "{}") if dist else {}
    editable = bool(direct.get("dir_info", {}).get("editable"))
    hashes = direct.get("archive_info", {}).get("hashes", {})
    url = urlsplit(direct.get("url", ""))
    found = {"crux_version": dist.version if dist else None,
             "crux_wheel": url.path.rpartition("/")[2] if "archive_info" in direct else None,
             "crux_wheel_path": unquote(url.path) if "archive_info" in direct and url.scheme == "file" else None,
             "crux_wheel_sha256": hashes.get("sha256"),
             "crux_files_sha256": None if editable or dist is None else files_sha256(dist),
             "crux_commit": None, "crux_clean": None, "crux_source": None, "crux_origin": None}
    source = Path(__file__).resolve().parents[2]
    if "dir_info" in direct and not editable and url.scheme == "file" and dist is not None:
        source = Path(unquote(url.path))  # installed from a folder (``pip install .``): a copy of a checkout?
        if not _installed_from(dist, source):
            return found  # the folder has changed since, or is gone: its commit would not name what runs
    top = None if "archive_info" in direct else git(source, "rev-parse", "--show-toplevel")
    if top and Path(top).resolve() == source.resolve():  # crux runs from its own checkout, or a copy of it
        state = checkout(source)
        found.update(crux_commit=state["commit"], crux_clean=state["clean"], crux_source=str(source),
                     crux_origin=masked(git(source, "remote", "get-url", "origin") or "") or None)
    return found


def _installed_from(dist: Distribution, folder: Path) -> bool:
    """Whether every one of crux's files that ``dist`` installed lies in ``folder`` with the same content (the
    sha256 pip recorded for it): then ``folder``'s state is what runs."""
    files = [f for f in dist.files or () if f.hash is not None and str(f).startswith(PACKAGES)]
    for file in files:
        try:
            digest = hashlib.sha256((folder / str(file)).read_bytes()).digest()
        except OSError:
            return False
        if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != file.hash.value:
            return False
    return bool(files)


def problem_code(target: str | None) -> dict[str, Any]:
    """The user's problem module named by ``target`` (``module.function``): ``problem_module``,
    ``problem_file`` (relative to the working directory when it lies below it) and ``problem_sha256`` of
    that file's bytes (the module alone where it has no file); empty for no target."""
    module_name = (target or "").rpartition(".")[0]
    if not module_name:
        return {}
    try:  # found, not imported: a module that fails to import is still identified
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.has_location or not Path(spec.origin).is_file():
        return {"problem_module": module_name}
    path = Path(spec.origin).resolve()
    shown = path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path
    return {"problem_module": module_name, "problem_file": str(shown),
            "problem_sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def launch_folder() -> Path:
    """The folder the command was typed in: where a job's relative paths start, even where Hydra runs the job in
    another (``hydra.job.chdir=True``: its output folder)."""
    return Path(HydraConfig.get().runtime.cwd) if HydraConfig.initialized() else Path.cwd()


def invocation(hydra: DictConfig | None = None) -> dict[str, Any]:
    """The command line that ran the job (a sweep's, for its jobs) and the job's own overrides (``hydra``: a
    config's ``hydra`` node; default: the job's, nothing outside a Hydra job)."""
    if hydra is None and not HydraConfig.initialized():
        return {}
    hydra = hydra or HydraConfig.get()
    command = hydra.sweeper.get("command") or shlex.join(["crux-run", *sys.argv[1:]])
    return {"command": masked(command), "overrides": overrides_without_credentials(override_lines(hydra.overrides.task))}


def invocation_tags(invoked: dict[str, Any]) -> dict[str, str]:
    """A job's tags that say how it was run (``invoked``: :func:`invocation`'s): its own overrides
    (``crux.overrides``, credentials left out), the primary config it was composed from (``crux.config_name``) and
    MLflow's own (:func:`mlflow_source`)."""
    return {OVERRIDES: " ".join(invoked["overrides"]), CONFIG_NAME: HydraConfig.get().job.config_name,
            **mlflow_source(invoked["command"].split()[0])}


def mlflow_source(program: str, commit: str | None = None) -> dict[str, str]:
    """The tags ``mlflow.start_run`` gives a run it creates (MLflow's default and git run contexts), for the runs
    crux creates with ``MlflowClient.create_run``: ``mlflow.user``, the store's user name where credentials give one
    (as MLflow takes it), else the login name; ``mlflow.source.name``, the program that ran (``crux-run``,
    ``crux-sweep``), by its path where this process is the one that was typed (MLflow's ``sys.argv[0]``);
    ``mlflow.source.type`` ``LOCAL``; ``mlflow.source.git.commit``, ``commit`` where given (a job's is
    ``environment.json``'s ``git_commit``, the checkout of the folder the command was typed in)."""
    try:
        user = read_mlflow_creds().username or getpass.getuser()
    except (ImportError, KeyError, OSError):  # no login name: a container's user without a passwd entry
        user = "unknown"
    typed = sys.argv[0] if sys.argv and Path(sys.argv[0]).name == program else program
    return {USER: user, SOURCE_NAME: typed, SOURCE_TYPE: "LOCAL", **({GIT_COMMIT: commit} if commit else {})}
