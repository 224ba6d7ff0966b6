"""Models' parameters in a ``.npz`` file, as snapshots taken during training: one array per leaf, under
``<when>/<model>/<i>`` for the i-th leaf of ``jax.tree.leaves(model.params)`` (``when``: ``initial``,
``phase0``, ``phase1``, ..., ``final``). crux-run logs each run's as ``params.npz``; :func:`load_params` puts a
snapshot back into networks built as the run built them.
"""
from __future__ import annotations

import os
from typing import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from crux.model import Model

Snapshot = Mapping[str, Sequence[np.ndarray]]
"""``{model name: its parameter leaves, in jax.tree.leaves order}``."""


def save_params(path: str | os.PathLike, snapshots: Mapping[str, Snapshot]) -> None:
    """Write snapshots of models' parameters to a ``.npz`` file, one array per leaf (read by :func:`load_params`).

    Args:
        path: the file to write; numpy adds ``.npz`` where the name lacks it.
        snapshots: ``{when: {model name: its leaves in jax.tree.leaves order}}``, ``when`` as ``final``,
            ``initial`` or ``phase<k>``.

    Raises:
        OSError: the file cannot be written.
    """
    np.savez(path, **{f"{when}/{name}/{i}": leaf for when, snapshot in snapshots.items()
                      for name, leaves in snapshot.items() for i, leaf in enumerate(leaves)})


def load_params(path: str | os.PathLike, models: Mapping[str, Model], when: str = "final") -> Mapping[str, Model]:
    """Set each of ``models`` to its parameters of snapshot ``when`` in the file at ``path``.

    The models must be built as those that were saved (same names, same networks: each leaf of the same shape
    and dtype); their optimizers are left as they are, and where one is refused none is set.

    Args:
        path: a file :func:`save_params` wrote (a crux-run's ``params.npz``).
        models: ``{name: crux.Model}``, e.g. a problem's ``models``.
        when: the snapshot: ``final``, ``initial`` or ``phase<k>``.

    Returns:
        ``models``, their parameters set.

    Raises:
        ValueError: the file lacks the snapshot or a model, or holds another network than a model's.
    """
    with np.load(path) as saved:
        leaves: dict[str, dict[int, np.ndarray]] = {}
        for key in saved.files:
            snapshot, name, i = _parts(key)
            if snapshot == when:
                leaves.setdefault(name, {})[i] = saved[key]
        if not leaves:
            snapshots = sorted({_parts(key)[0] for key in saved.files})
            raise ValueError(f"load_params: {os.fspath(path)} has no snapshot {when!r}; it has "
                             f"{', '.join(snapshots) or 'none'}: pass when= one of them")
    loaded = {}
    for name, model in models.items():
        if name not in leaves:
            raise ValueError(f"load_params: {os.fspath(path)} has no model {name!r} in snapshot {when!r}; it has "
                             f"{', '.join(sorted(leaves))}")
        mine, treedef = jax.tree.flatten(model.params)
        theirs = [leaves[name][i] for i in sorted(leaves[name])]
        shapes = [(np.shape(leaf), np.dtype(leaf.dtype)) for leaf in mine]
        saved_shapes = [(leaf.shape, leaf.dtype) for leaf in theirs]
        if shapes != saved_shapes:
            raise ValueError(f"load_params: model {name!r} of {os.fspath(path)} is another network: leaves "
                             f"{_shapes(saved_shapes)} there, {_shapes(shapes)} here; build the model as the run "
                             f"did (its widths, depth and dimensions)")
        loaded[name] = jax.tree.unflatten(treedef, [jnp.asarray(leaf) for leaf in theirs])
    for name, params in loaded.items():  # each model checked first: a refusal leaves every one as it was
        models[name].params = params
    return models


def _parts(key: str) -> tuple[str, str, int]:
    """``<when>/<model>/<i>`` as its three parts (a model's name may hold a ``/``)."""
    when, rest = key.split("/", 1)
    name, i = rest.rsplit("/", 1)
    return when, name, int(i)


def _shapes(leaves: Sequence[tuple[tuple[int, ...], np.dtype]]) -> str:
    return "[" + ", ".join(f"{dtype}{list(shape)}" for shape, dtype in leaves) + "]"
