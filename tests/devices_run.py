"""Run in a process of its own, with ``XLA_FLAGS=--xla_force_host_platform_device_count=D`` set before JAX
starts: trains small problems on D devices, on one device with the batch of D devices, with D micro-batches,
and with the other options on D devices, and prints one line ``RESULT {json}``: per problem and optimizer,
each run's parameter distance to the run on D devices, relative to the distance that run travelled.

    python tests/devices_run.py DEVICES EPOCHS [poisson/sgd,heat/adam,...]   (default: both problems, both optimizers)
"""
from __future__ import annotations

import json
import sys

import numpy as np
import optax

import crux
from crux_testing import flat, poisson, train, with_probes


def problems(optimizer):
    """The default problem with a constraint of each size regime beside its interior, and a 2-D one (x, t)."""
    yield "poisson", lambda: with_probes(poisson(optimizer), 12, 20)

    def heat():
        problem = crux.problems.heat1d(n_interior=256, n_initial=24, n_boundary=6, hidden=(16, 16))
        for model in problem.models.values():
            model.optimizer(optimizer).scale(crux.lrs(1e-3))
        return problem
    yield "heat", heat


def distances(make, devices: int, epochs: int) -> dict[str, float]:
    start, split, stats = train(make(), epochs, batchsize=8, devices=devices)
    travel = float(np.linalg.norm(split - start))
    runs = {"one_device_batch": dict(batchsize=8 * devices),
            "accumulation": dict(batchsize=8, accumulation_steps=devices),
            "plain_batch": dict(batchsize=8),
            "offload": dict(batchsize=8, devices=devices, offload_data=True),
            "fused": dict(batchsize=8, devices=devices, inner_steps=epochs // 2),
            "checkpointed": dict(batchsize=8, devices=devices, checkpoint_gradients=True)}
    out = {}
    for name, options in runs.items():
        _, params, other = train(make(), epochs, **options)
        out[name] = float(np.linalg.norm(params - split)) / travel
        if name == "one_device_batch":
            out["loss_one_device_batch"] = float(np.max(np.abs(other.losses - stats.losses) / np.abs(other.losses)))
    # A devices x accumulation x batch: one device's batch of all of it
    _, both, _ = train(make(), epochs, batchsize=4, accumulation_steps=2, devices=devices)
    _, one, _ = train(make(), epochs, batchsize=8 * devices)
    out["devices_accumulation_batch"] = float(np.linalg.norm(both - one)) / travel
    # substeps: the constraints in two steps an epoch, each step's batch split
    plan = [[0], list(range(1, len(make().constraints)))]
    _, steps, _ = train(make(), epochs, batchsize=8, devices=devices, substeps=plan)
    _, steps_one, _ = train(make(), epochs, batchsize=8 * devices, substeps=plan)
    out["substeps_batch"] = float(np.linalg.norm(steps - steps_one)) / travel
    # the full batch, split over the devices, against the unsplit one
    full_start, full, _ = train(make(), epochs)
    _, full_split, _ = train(make(), epochs, devices=devices)
    out["full_batch"] = float(np.linalg.norm(full_split - full) / np.linalg.norm(full - full_start))
    return out


def main(devices: int, epochs: int, cases: list[str]) -> None:
    out = {f"{name}/{o}": distances(make, devices, epochs)
           for o in ("sgd", "adam") for name, make in problems(getattr(optax, o)) if f"{name}/{o}" in cases}
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]),
         sys.argv[3].split(",") if len(sys.argv) > 3 else ["poisson/sgd", "heat/sgd", "poisson/adam", "heat/adam"])
