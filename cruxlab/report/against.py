"""The two sweeps of ``crux-report NAME --against URI[#PARENT_RUN]``: this store's and the other's.

This side is chosen as crux-report chooses a sweep to judge (``--run``, else the newest complete sweep, else the
newest), of crux's own sweeps where the experiment has sweeps of several libraries. The other side is the sweep of
``NAME`` at ``URI``: the parent run after ``#``, or the newest complete sweep of the library named after ``#``
(``#jno``), else the newest complete sweep of this side's library. ``URI`` is any store crux-report reads, a
store packed as files included (:mod:`cruxlab.report.packed`).

The other side is read as *before* and this one as *after*: ``--against`` names what a sweep is held against,
the older sweep of a commit's before-and-after, the other machine, the other library.
"""
from __future__ import annotations

from typing import Sequence

from cruxlab.config import BACKENDS
from cruxlab.report.backends import backends_in
from cruxlab.report.comparison import Comparison, compare
from cruxlab.report.sweep_reader import StoreError, Sweep, load_sweep


def split_against(against: str) -> tuple[str, str | None, str | None]:
    """``URI[#PARENT_RUN|#BACKEND]`` as (URI, parent run id or None, backend or None)."""
    uri, hash_sign, fragment = against.rpartition("#")
    if not hash_sign:
        return against, None, None
    if not uri:
        raise StoreError(f"--against {against}: give the other store's URI before '#' (e.g. sqlite:///PATH/mlflow.db"
                         f"#{fragment})")
    if not fragment:
        return uri, None, None
    return (uri, None, fragment) if fragment in BACKENDS else (uri, fragment, None)


def this_sweep(name: str, parent: str | None, uri: str | None) -> Sweep:
    """The sweep crux-report judges: ``parent``'s, else the newest complete one, of crux's where several
    libraries ran sweeps of ``name``."""
    if parent is not None:
        return load_sweep(name, parent, uri)
    backends = backends_in(name, uri)
    return load_sweep(name, None, uri, backends[0] if backends else None)


def compare_against(name: str, parent: str | None, uri: str | None, against: str,
                    claims: Sequence[str] | None = None) -> Comparison:
    """The sweep ``against`` names (before) and this store's sweep of ``name`` (after), judged on ``claims``
    (default: the claims the sweeps name). Raises StoreError where a store, sweep or run cannot be read, and
    :class:`cruxlab.report.comparison.Incomparable` where the two cannot be compared."""
    other_uri, other_parent, backend = split_against(against)
    this = this_sweep(name, parent, uri)
    other = load_sweep(name, other_parent, other_uri, None if other_parent else backend or this.backend)
    return compare(other, this, claims)
