"""One experiment, several libraries: each backend's sweep (parent tag ``crux.backend``) judged on its own.

``crux-sweep accumulation`` and ``crux-sweep accumulation backend=jno`` log into the
same experiment, each under its own parent run; the report judges each backend's
newest complete sweep (else its newest) on that backend's runs alone, so a run is
never paired with another library's, and sets the verdicts side by side.
"""
from __future__ import annotations

from cruxlab.report.sweep_reader import DEFAULT_BACKEND, Sweep, backend_of, load_sweep, open_client, parents
from cruxlab.store.connection import READING, bounded_http, store_errors


def backends_in(name: str, uri: str | None = None) -> list[str]:
    """The backends that ran sweeps of experiment ``name``, crux first, then by name; empty when the experiment
    or its parents do not exist (:func:`load_sweep` then says what is missing)."""
    with bounded_http():
        client, resolved = open_client(uri)
        with store_errors(resolved, READING):
            experiment = client.get_experiment_by_name(name)
            if experiment is None:
                return []
            found = {backend_of(parent) for parent in parents(client, experiment.experiment_id)}
    return sorted(found, key=lambda backend: (backend != DEFAULT_BACKEND, backend))


def load_sweeps(name: str, parent_run_id: str | None = None, uri: str | None = None) -> dict[str, Sweep]:
    """Backend -> its sweep: the given parent run's alone, else the sweep :func:`load_sweep` chooses for every
    backend of ``name``.

    Raises StoreError as :func:`load_sweep` does.
    """
    if parent_run_id is not None:
        sweep = load_sweep(name, parent_run_id, uri)
        return {sweep.backend: sweep}
    backends = backends_in(name, uri)
    if not backends:
        sweep = load_sweep(name, None, uri)  # raises, naming what is missing
        return {DEFAULT_BACKEND: sweep}
    return {backend: load_sweep(name, None, uri, backend) for backend in backends}
