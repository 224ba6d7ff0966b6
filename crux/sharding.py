"""Several devices for one solve(): the mesh of the first ``D`` devices and how a call's arrays lie on it.

Parameters, optimizer states and the points stay whole on every device (replicated); what is split is the
micro-batch axis of an update's batches, so that each device computes the gradient of its own micro-batches
and the devices add theirs inside the compiled call.
"""
from __future__ import annotations

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

AXIS = "devices"  # the mesh axis the micro-batches are split over


def mesh(count: int) -> Mesh:
    """The first ``count`` devices as a one-axis mesh."""
    return Mesh(jax.devices()[:count], (AXIS,))


def placement(count: int) -> jax.sharding.Sharding:
    """Where a call's state and points live: on the first device, or whole on each of the first ``count``."""
    if count == 1:
        return SingleDeviceSharding(jax.devices()[0])
    return NamedSharding(mesh(count), PartitionSpec())


def split(count: int, axis: int) -> NamedSharding:
    """Arrays split along ``axis`` over the first ``count`` devices (a stream of offloaded batches)."""
    return NamedSharding(mesh(count), PartitionSpec(*([None] * axis), AXIS))
