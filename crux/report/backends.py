"""One experiment, several libraries: the latest sweep of each backend (parent tag ``crux.backend``).

``crux-sweep accumulation`` and ``crux-sweep accumulation backend=jno`` log into the
same experiment, each under its own parent run; the report judges each backend's
latest sweep on its own runs (a run is never paired with another library's) and sets
the verdicts side by side.
"""
from __future__ import annotations

from crux.report.store import Sweep, load_sweep, open_client

DEFAULT_BACKEND = "crux"  # parents from before the tag were crux's


def latest_parents(name: str, uri: str | None = None) -> dict[str, str]:
    """Backend -> the id of its latest parent run in experiment ``name`` (crux first, then by name); empty when
    the experiment or its parents do not exist (:func:`load_sweep` then says what is missing)."""
    client, _ = open_client(uri)
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        return {}
    parents = client.search_runs([experiment.experiment_id], "tags.`crux.role` = 'parent'",
                                 order_by=["attributes.start_time DESC"], max_results=1000)
    latest: dict[str, str] = {}
    for parent in parents:
        latest.setdefault(parent.data.tags.get("crux.backend", DEFAULT_BACKEND), parent.info.run_id)
    return dict(sorted(latest.items(), key=lambda item: (item[0] != DEFAULT_BACKEND, item[0])))


def load_sweeps(name: str, parent_run_id: str | None = None, uri: str | None = None) -> dict[str, Sweep]:
    """Backend -> its sweep: the given parent run alone, else the latest sweep of every backend in ``name``.

    Raises LookupError as :func:`load_sweep` does.
    """
    if parent_run_id is None:
        parents = latest_parents(name, uri)
        if len(parents) > 1:
            return {backend: load_sweep(name, parent, uri) for backend, parent in parents.items()}
    sweep = load_sweep(name, parent_run_id, uri)
    return {sweep.parent_tags.get("crux.backend", DEFAULT_BACKEND): sweep}
