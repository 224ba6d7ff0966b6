"""What the claim checks read: one record per run, however the run was obtained.

A :class:`RunRecord` holds what a sweep job leaves behind (tags, params,
metric histories, summary metrics, parameter snapshots, statistics, the
environment). Records come from MLflow (:mod:`cruxlab.report.sweep_reader`) or straight
from a solve (:func:`record_from_solve`), so the checks can be proven on
deliberately broken solvers without a tracking server.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import jax
import numpy as np

from crux.options import SolveOptions
from crux.solver import Crux
from crux.stats import Statistics
from cruxlab.config.settings import PhaseCall
from cruxlab.store.contract import BACKEND, ENVIRONMENT, PARAMS, UNSUPPORTED, memory_logged

class UnreadableArtifact(LookupError):
    """A check needs an artifact of a run that could not be read: the verdict it was building cannot be told."""

    def __init__(self, run_id: str, label: str, artifact: str, problem: str):
        super().__init__(f"{artifact} of run `{run_id}` ({label}) is unreadable: {problem}")
        self.run_id, self.artifact, self.problem = run_id, artifact, problem


@dataclass(frozen=True)
class RunRecord:
    """One finished run of a sweep.

    ``histories`` map a metric (``loss/total``, ``loss/<constraint>``, ``lr/<model>``)
    to its values by epoch; ``metrics`` are the summary metrics; ``snapshots``
    are ``params.npz`` (``initial/<model>/<i>``, ``final/<model>/<i>``, and
    ``phase<k>/<model>/<i>`` where the pipeline saves them); ``reach`` lists,
    per constraint, the models its residual reaches. ``group`` names what the
    run shares with its partners beyond the solve options (problem, model,
    optimizer): runs of different groups are never compared. ``roundoff_twin``
    is nonzero for a round-off twin (initial parameters moved one ulp each).

    ``unreadable`` maps an artifact the run logged but that could not be read
    (or that it did not log) to what was wrong. What comes from it then raises
    :class:`UnreadableArtifact` when a check asks for it (``params.npz``: the
    snapshots; ``environment.json``: the device), so only the verdicts that need
    it lose it; a run without ``stats.npz`` has ``stats=None``, which the checks
    do without.
    """

    run_id: str
    options: SolveOptions
    histories: Mapping[str, np.ndarray]
    metrics: Mapping[str, float]
    snapshots: Mapping[str, np.ndarray]
    stats: Statistics | None = None
    reach: tuple[tuple[str, ...], ...] | None = None
    phases: tuple[PhaseCall, ...] = ()
    group: str = ""
    repeat: int = 0
    roundoff_twin: int = 0
    variant: str = ""
    tags: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, str] = field(default_factory=dict)
    environment: Mapping[str, Any] = field(default_factory=dict)
    config: str = ""
    unreadable: Mapping[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """Short name for tables and legends: the sweep's variant name, else one built from the options."""
        return self.variant or describe(self.options)

    @property
    def backend(self) -> str:
        """The library that trained the run (tag ``crux.backend``; runs from before the tag were crux's)."""
        return self.tags.get(BACKEND, "crux")

    @property
    def unsupported(self) -> str | None:
        """The library's own message when it refused an option of this run or fell back from it."""
        return self.tags.get(UNSUPPORTED)

    @property
    def device(self) -> str:
        """What the run ran on, from environment.json: ``cpu (<CPU model>)`` or ``gpu (<device kind>)``.

        Timing verdicts hold for this device only.
        """
        self.require(ENVIRONMENT)
        backend = self.environment.get("backend")
        if not backend:
            return "an unrecorded device"
        detail = self.environment.get("cpu" if backend == "cpu" else "device_kind")
        return f"{backend} ({detail})" if detail and detail != backend else str(backend)

    def models(self) -> list[str]:
        """Model names present in the parameter snapshots, sorted."""
        self.require(PARAMS)
        return sorted({key.split("/")[1] for key in self.snapshots if key.startswith("final/")})

    def snapshot(self, which: str, model: str | None = None) -> np.ndarray:
        """One flat float64 vector of the parameters saved under ``which`` (``initial``, ``final``, ``phase1``).

        Leaves are taken in their saved order per model, models in sorted order,
        so two runs of the same network give vectors that line up.
        """
        self.require(PARAMS)
        models = [model] if model is not None else self.models()
        parts = []
        for name in models:
            prefix = f"{which}/{name}/"
            keys = sorted((k for k in self.snapshots if k.startswith(prefix)), key=lambda k: int(k[len(prefix):]))
            if not keys:
                raise KeyError(f"run {self.run_id} saved no parameters under '{prefix}'")
            parts.extend(np.asarray(self.snapshots[k], np.float64).ravel() for k in keys)
        return np.concatenate(parts)

    def has_snapshot(self, which: str) -> bool:
        self.require(PARAMS)
        return any(k.startswith(f"{which}/") for k in self.snapshots)

    def require(self, artifact: str) -> None:
        """Raise :class:`UnreadableArtifact` if ``artifact`` of this run could not be read."""
        if artifact in self.unreadable:
            raise UnreadableArtifact(self.run_id, self.label, artifact, self.unreadable[artifact])

    @property
    def updates(self) -> int:
        """Optimizer updates the run made (each substep entry's steps count separately)."""
        epochs = len(self.histories.get("loss/total", ())) or self.options.epochs
        per_epoch = sum(steps for _, steps in self.options.substeps) if self.options.substeps else 1
        return epochs * per_epoch


def describe(options: SolveOptions) -> str:
    """``b8_acc4 K=5 ckpt offload`` style name of the options that differ from a plain full-batch solve."""
    parts = ["full" if options.batchsize is None else f"b{options.batchsize}"]
    if options.accumulation_steps > 1:
        parts[0] += f"_acc{options.accumulation_steps}"
    if options.inner_steps > 1:
        parts.append(f"K={options.inner_steps}")
    if options.checkpoint_gradients:
        parts.append("ckpt")
    if options.offload_data:
        parts.append("offload")
    if options.devices > 1:
        parts[0] += f"_d{options.devices}"
    if options.substeps is not None:
        parts.append("substeps=" + ",".join(
            "[" + ",".join(map(str, c)) + "]" + (f"x{n}" if n > 1 else "") for c, n in options.substeps))
    return " ".join(parts)


def snapshot_arrays(params: Mapping[str, Any], which: str) -> dict[str, np.ndarray]:
    """``{which/<model>/<i>: leaf}`` for the i-th leaf of ``jax.tree.leaves``: the ``params.npz`` layout."""
    return {f"{which}/{name}/{i}": np.asarray(leaf)
            for name, tree in params.items() for i, leaf in enumerate(jax.tree.leaves(tree))}


def histories_of(stats: Statistics) -> dict[str, np.ndarray]:
    """The metric histories the pipeline logs, by epoch: ``loss/total``, ``loss/<constraint>``, ``lr/<model>``."""
    histories = {"loss/total": np.asarray(stats.total_loss)}
    histories.update({f"loss/{name}": np.asarray(stats.losses[:, j]) for j, name in enumerate(stats.names)})
    histories.update({f"lr/{model}": np.asarray(values) for model, values in stats.lr.items()})
    return histories


def summary_of(stats: Statistics) -> dict[str, float]:
    """The summary metrics the checks read that a Statistics object carries (timings, compiled memory)."""
    metrics = {"compile_seconds": float(stats.compile_seconds), "run_seconds": float(stats.run_seconds),
               "median_step_seconds": float(stats.median_step_seconds)}
    metrics.update(memory_logged(stats.memory)[0])
    return metrics


def record_from_solve(run_id: str, solver: Crux, initial: Mapping[str, Any], stats: Statistics,
                      options: SolveOptions, phases: Sequence[PhaseCall] = (),
                      snapshots: Mapping[str, Any] | None = None, repeat: int = 0, group: str = "",
                      roundoff_twin: int = 0) -> RunRecord:
    """A record of a solve done in this process, as the pipeline would have logged it, for the checks to judge
    without a store.

    Args:
        run_id: the id the verdicts name the run by.
        solver: the solver after its solves: its final parameters and the models each constraint reaches.
        initial: ``{model: params}`` before the first solve() (copy them before solving: the solver donates its
            buffers).
        stats: the statistics of every phase (``solver.history``).
        options: the :class:`crux.SolveOptions` the run is recorded with (``stats.options`` holds those it ran).
        phases: the solve() calls of each phase, as a multi-phase job records them.
        snapshots: more parameter snapshots, as ``phase<k>/...`` arrays.
        repeat: the repeat's index among the runs of one setting.
        group: what the run shares with its partners beyond the options (problem, model, optimizer): runs of
            different groups are never compared.
        roundoff_twin: nonzero if it started as a round-off twin.

    Returns:
        The :class:`RunRecord`.
    """
    arrays = {**snapshot_arrays(initial, "initial"), **snapshot_arrays(solver.params, "final"),
              **dict(snapshots or {})}
    return RunRecord(run_id=run_id, options=options, histories=histories_of(stats), metrics=summary_of(stats),
                     snapshots=arrays, stats=stats, reach=tuple(tuple(sorted(r)) for r in solver.reach),
                     phases=tuple(phases), group=group, repeat=repeat, roundoff_twin=roundoff_twin,
                     tags=memory_logged(stats.memory)[1])
