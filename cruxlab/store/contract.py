"""The MLflow layout crux writes and reads: tag names, their values, run statuses, artifact files and params.

``cruxlab.runtime`` writes runs in this layout and ``cruxlab.report`` reads them; both name every tag, file and
status through this module, so a misspelt name is an import error rather than a report that finds no runs.
docs/CONTRACT.md describes what each one holds.
"""
from __future__ import annotations

import math
from typing import Mapping

# -- tags of every run ------------------------------------------------------------------------------------
ROLE = "crux.role"
"""What the run is: :data:`PARENT` (a sweep), :data:`CHILD` (one job of it), :data:`SINGLE` (a ``crux-run``
without a sweep, or a job of another sweeper), :data:`SEARCH` (another sweeper's multirun) or :data:`BENCH` (a
benchmark script's run)."""
PARENT, CHILD, SINGLE, BENCH = "parent", "child", "run", "bench"
SEARCH = "search"
"""The parent run of a multirun that another Hydra sweeper ran (Optuna's): its jobs' runs, ``crux.role=run``, nest
under it."""
SWEEP = "crux.sweep"
"""The sweep's name (the parent's) or the name of the sweep the job belongs to."""
CLAIM = "crux.claim"
"""The claim the sweep tests."""
BACKEND = "crux.backend"
"""The backend that trained the job (``backend.name``); the parent's is the sweep's."""
ERROR_TYPE, ERROR_MESSAGE = "crux.error_type", "crux.error_message"
"""Why a run closed FAILED or KILLED: the exception's class and its message."""
HOST, PID, PROCESS, HEARTBEAT = "crux.host", "crux.pid", "crux.process", "crux.heartbeat"
"""Which process writes the run, and when it last said it was alive."""

# -- tags of a sweep's parent run -------------------------------------------------------------------------
CLAIMS = "crux.claims"
"""Every claim the sweep's file names (JSON list)."""
CHECKED_CLAIMS = ("accumulation", "inner_steps", "checkpoint", "offload", "substeps", "phases", "resume", "devices",
                  "precision", "capacity")
"""The claims crux-report has a check for (the keys of ``cruxlab.report.CHECKS``): what :data:`CLAIMS` may name.
Named here so that crux-sweep refuses a sweep naming another without importing the report."""
OVERRIDES = "crux.overrides"
"""The sweep's command-line overrides (on a job's run: the job's own), space-separated."""
PLANNED_JOB_COUNT = "crux.planned_jobs"
"""How many jobs the sweep planned (their overrides are in :data:`PLANNED_JOBS`)."""
SWEEP_DIR = "crux.sweep_dir"
"""The folder of the sweep's outputs."""
SWEPT = "crux.swept"
"""The keys that differ between the sweep's jobs (JSON list)."""
RESUMES = "crux.resumes"
"""How many times the sweep was resumed."""
COMMAND = "crux.command"
"""The command that ran the sweep."""
WORKING_DIR = "crux.working_dir"
"""The folder the sweep ran in, where its command's paths start."""

# -- tags of a job's run ----------------------------------------------------------------------------------
JOB = "crux.job"
"""The job's number in its sweep (``0`` for a single run)."""
VARIANT = "crux.variant"
"""The job's variant: what sets it apart from its sweep's other jobs."""
REPEAT = "crux.repeat"
"""The job's repeat (``repeat``), a twin with another seed."""
HISTORY_POINTS = "crux.history_points"
"""``<sent> of <epochs>``: how many epochs of each history went to MLflow as metrics (every one is in
:data:`STATS`)."""
CONFIG_NAME = "crux.config_name"
"""The primary config the job's config was composed from (``--config-name``; ``config``, crux's own, by default)."""
ADJUSTED = "crux.adjusted"
"""Which settings ran otherwise than requested, and how."""
CHOSEN = "crux.chosen_for_every_network"
"""Which of the config's ``optimizer`` and ``schedule`` were chosen explicitly and so went to every network, and
where (``optimizer: the sweep file accumulation sets optimizer``); absent where each kept its problem's own."""
UNSUPPORTED = "crux.not_supported"
"""What another backend left out of the config it was given."""
TIMING_CPU, TIMING_DEVICE, TIMING_AGAINST = "crux.timing.cpu", "crux.timing.device", "crux.timing.against"
"""Where a paired timing ran (CPU model, device) and the settings it was timed against (JSON)."""
TIMING_CLOCK = "crux.timing.clock"
"""Which clock timed the chunks: the process's CPU time on a CPU, wall time on an accelerator."""
CHECKPOINT_FORM = "crux.checkpoint_form"
"""With ``checkpoint_gradients``: the name of the form of :mod:`crux.remat` the update ran in (``memory`` of its
solve). Runs made before it held metric ``memory/checkpoint_used`` (a capacity run ``capacity/checkpoint_used``):
the form's index in :data:`INDEXED_FORMS`."""
INDEXED_FORMS = ("plain", "layers", "whole", "unrolled")
"""The forms in the order older runs' ``checkpoint_used`` indices count them, fixed whatever crux's order."""

# -- MLflow's own tags ------------------------------------------------------------------------------------
PARENT_ID = "mlflow.parentRunId"
"""A child run's parent run."""
NOTE = "mlflow.note.content"
USER, SOURCE_NAME, SOURCE_TYPE = "mlflow.user", "mlflow.source.name", "mlflow.source.type"
"""Who ran the run and from which program, as ``mlflow.start_run`` records them (the UI's User and Source)."""
GIT_COMMIT = "mlflow.source.git.commit"
"""The commit of the git checkout the run was started in (the UI's Source links it)."""
EXPERIMENT_KIND = "mlflow.experimentKind"

# -- run statuses (MLflow's) ------------------------------------------------------------------------------
RUNNING, FINISHED, FAILED, KILLED = "RUNNING", "FINISHED", "FAILED", "KILLED"

# -- artifacts --------------------------------------------------------------------------------------------
PLANNED_JOBS = "planned_jobs.json"
"""The parent's plan: ``[{"job": number, "overrides": [...]}, ...]``, the number being :data:`JOB`."""
CONFIG = "config.yaml"
"""A job's resolved config."""
ENVIRONMENT = "environment.json"
"""The versions and machine a job ran on."""
STATS = "stats.npz"
"""Every epoch of every history (:class:`crux.stats.Statistics`)."""
PARAMS = "params.npz"
"""The parameters, one array per leaf: ``<when>/<model>/<i>`` for :data:`INITIAL`, ``phase<k>``, :data:`FINAL`."""
HISTORY_PLOT = "history.png"
MODEL = "model"
"""A job's trained networks as an MLflow model (``python_function`` flavor), a folder of the run's artifacts:
``mlflow.pyfunc.load_model("runs:/<run id>/model")`` (:mod:`cruxlab.store.model`)."""
MODEL_LOADER = "cruxlab.trained"
"""The module that loads :data:`MODEL` (MLflow's ``loader_module``)."""
CAPACITY_SIZES = "capacity.json"
"""A capacity job's sizes tried (:class:`cruxlab.capacity_search.Attempt`, one object each) and its option's run."""
ADVICE, ADVICE_DOCUMENT = "advice.json", "advice.md"
"""What crux-advise adds to the parent run of the sweep it ran: :meth:`cruxlab.report.advice.Advice.as_dict` and its
markdown."""
INITIAL, FINAL = "initial", "final"

# -- params -----------------------------------------------------------------------------------------------
VARIANT_PARAM = "variant"
"""The param holding the job's variant, beside its flattened settings (``memory.batchsize``, ...)."""
CAPACITY_OPTION = "capacity.option"
"""The param of a capacity job's memory option: its run logs :data:`CAPACITY_SIZES` and ``capacity/...`` metrics,
no histories or parameters."""
NETWORK_PARAMS = "network."
"""The prefix of the params recording what each network trained with (not a setting of the config):
``network.<name>.optimizer``, ``network.<name>.schedule`` for the first phase, ``network.<name>.phases.<phase>.``
``optimizer`` and ``.schedule`` for each later one (:mod:`cruxlab.config.attachments`)."""
REQUESTED = "_requested"
"""The suffix of a param that keeps a setting as requested, beside the setting as it ran (``memory.batchsize``
above every constraint's points: ``memory.batchsize_requested``)."""


def memory_logged(memory: Mapping[str, int | str]) -> tuple[dict[str, float], dict[str, str]]:
    """A solve's ``memory`` as a run records it: its figures as metrics ``memory/<key>``, the checkpoint form, a
    name, as tag :data:`CHECKPOINT_FORM`."""
    metrics = {f"memory/{key}": float(value) for key, value in memory.items() if not isinstance(value, str)}
    return metrics, ({CHECKPOINT_FORM: str(memory["checkpoint_form"])} if "checkpoint_form" in memory else {})


def recorded_form(tags: Mapping[str, str], metrics: Mapping[str, float], key: str = "memory/checkpoint_used"
                  ) -> str | None:
    """The form of :mod:`crux.remat` a run records: its tag :data:`CHECKPOINT_FORM`, or in a run made before it, the
    index metric ``key`` (``memory/checkpoint_used``, a capacity run's ``capacity/checkpoint_used``) read in
    :data:`INDEXED_FORMS`; None where it records none (no tag, an index absent, NaN or out of range)."""
    if CHECKPOINT_FORM in tags:
        return tags[CHECKPOINT_FORM]
    used = metrics.get(key)
    if used is None or math.isnan(used) or not 0 <= used < len(INDEXED_FORMS):
        return None
    return INDEXED_FORMS[int(used)]


def tag_filter(tag: str, value: str) -> str:
    """MLflow's search filter for runs whose ``tag`` is ``value`` (``tag_filter(ROLE, PARENT)``)."""
    return f"tags.`{tag}` = '{value}'"
