"""Several devices for one solve(): the mesh of the first ``D`` devices and how a call's arrays lie on it.

Parameters, optimizer states and the points stay whole on every device (replicated); what is split is the
micro-batch axis of an update's batches, so that each device computes the gradient of its own micro-batches
and the devices add theirs inside the compiled call.
"""
from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

AXIS = "devices"  # the mesh axis the micro-batches are split over


def mesh(count: int) -> Mesh:
    """The first ``count`` devices as a one-axis mesh.

    Args:
        count: the devices, at most ``len(jax.devices())``.

    Returns:
        The mesh, its axis :data:`AXIS`.
    """
    return Mesh(jax.devices()[:count], (AXIS,))


def placement(count: int) -> jax.sharding.Sharding:
    """Where a call's state and points live.

    Args:
        count: the devices the solve() runs on.

    Returns:
        The first local device for 1, else whole copies on each of the first ``count`` devices.
    """
    if count == 1:
        return SingleDeviceSharding(jax.local_devices()[0])
    return NamedSharding(mesh(count), PartitionSpec())


def split(count: int, axis: int) -> NamedSharding:
    """How a stream of offloaded batches is split over the devices.

    Args:
        count: the devices.
        axis: the arrays' axis to split.

    Returns:
        Arrays split along ``axis`` over the first ``count`` devices.
    """
    return NamedSharding(mesh(count), PartitionSpec(*([None] * axis), AXIS))


def put(tree, target: jax.sharding.Sharding):
    """``tree`` on ``target``, in one transfer of the leaves not there already.

    Args:
        tree: a pytree of arrays (PRNG keys too).
        target: where to place them; where it spans devices of other processes (``jax.distributed``), every
            process passes the same values and each places its own devices' part.

    Returns:
        The tree, its leaves on ``target``.
    """
    if target.is_fully_addressable:  # one transfer of what is elsewhere; what is already there stays as it is
        leaves, treedef = jax.tree.flatten(tree)
        moving = [i for i, leaf in enumerate(leaves)
                  if not (isinstance(leaf, jax.Array) and leaf.committed and leaf.sharding == target)]
        if moving:
            for i, placed in zip(moving, jax.device_put([leaves[i] for i in moving], target)):
                leaves[i] = placed
        return jax.tree.unflatten(treedef, leaves)

    def place(leaf):
        if jax.dtypes.issubdtype(getattr(leaf, "dtype", None), jax.dtypes.prng_key):
            return jax.random.wrap_key_data(place(jax.random.key_data(leaf)), impl=jax.random.key_impl(leaf))
        value = np.asarray(leaf)
        return jax.make_array_from_callback(value.shape, target, lambda index: value[index])
    return jax.tree.map(place, tree)


def local(tree):
    """This process's copy of ``tree``.

    Args:
        tree: a pytree; arrays that span several processes are whole on every device, as a solve() keeps them.

    Returns:
        The tree, each such array replaced by the copy on this process's first device of it.
    """
    if jax.process_count() == 1:
        return tree
    return jax.tree.map(lambda x: x.addressable_data(0) if isinstance(x, jax.Array) and not x.is_fully_addressable
                        else x, tree)
