"""One job trained by several processes together (``jax.processes > 1``): joining JAX's distributed runtime
before any JAX work, and which process records the run.

Every process of the job runs the same ``crux-run`` (or the same sweep job, one per Slurm task) and trains the
same ``solve()`` calls: each places its own devices' part of every update and the gradients are summed across
processes inside the compiled call, so every process ends with the same parameters (:mod:`crux.sharding`).
Process 0 records the run; the others train without a run of their own, so a sweep's store holds one run per
job whatever the number of processes.
"""
from __future__ import annotations

import logging

import jax
from omegaconf import DictConfig

log = logging.getLogger(__name__)


def join(settings: DictConfig, devices: int) -> None:
    """Join the job's other processes when ``settings.processes > 1``, then check that the first ``devices``
    devices include one of this process's.

    Args:
        settings: the config's ``jax`` node (``processes``, ``coordinator``, ``process_id``).
        devices: ``solver.devices``.

    Raises:
        ValueError: naming the option, where no coordinator is given or found, or the first ``devices`` devices
            hold none of this process's.
    """
    if settings.processes == 1:
        return
    # JAX's CPU client has no collectives between processes unless told which to use; GPUs use NCCL.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(coordinator_address=settings.coordinator, num_processes=settings.processes,
                                   process_id=settings.process_id)
    except ValueError as error:  # no coordinator given and no cluster (Slurm) that names one
        raise ValueError(f"jax.processes={settings.processes}: {error}; give jax.coordinator=HOST:PORT (process 0's "
                         f"address) and jax.process_id=N, or run the job as {settings.processes} Slurm tasks") from None
    mine = {d.id for d in jax.local_devices()}
    if not mine & {d.id for d in jax.devices()[:devices]}:
        raise ValueError(f"solver.devices={devices} takes the first {devices} of the job's {jax.device_count()} "
                         f"devices, none of which is process {jax.process_index()}'s: set "
                         f"solver.devices={jax.device_count()}")
    log.info("process %d of %d: %d of the job's %d devices are this process's", jax.process_index(),
             jax.process_count(), jax.local_device_count(), jax.device_count())


def is_recording_process() -> bool:
    """Whether this process records the job's run: process 0 (the only one of a single-process job)."""
    return jax.process_index() == 0


class Unrecorded:
    """The run of a process other than 0: it trains, and what it would log, process 0 logs."""

    def __enter__(self) -> "Unrecorded":
        return self

    def __exit__(self, *error) -> bool:
        return False

    def log_config(self, cfg: DictConfig, applied=None, adjustments=(), trained_with=None) -> None:
        """Nothing: process 0 logs the job's config (and the settings as they applied)."""

    def log_metrics(self, values) -> None:
        """Nothing: process 0 logs the job's metrics."""

    def check_room(self, problem, epochs, phases) -> None:
        """Nothing: process 0 writes the job's run."""

    def trains(self) -> None:
        """Nothing: no writer waits for this process's training."""

    def log_results(self, problem, stats, initial, phase_ends=()) -> None:
        log.info("process %d trained %d epochs beside process 0, which records the run", jax.process_index(),
                 stats.steps)
