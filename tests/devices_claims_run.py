"""Run with ``XLA_FLAGS=--xla_force_host_platform_device_count=2``: the devices check on records of real solves,
on crux as it is and with the devices' sum of gradients broken on purpose (each device keeps its own), printed
as ``RESULT {json}``: per case, the verdict and its summary."""
from __future__ import annotations

import json

import jax

from cruxlab.report.claims import check_devices
from test_report_claims import B, poisson, solve_record


def verdict(split) -> dict[str, str]:
    big = solve_record("big", poisson(), batchsize=2 * B)
    plain = solve_record("plain", poisson(), batchsize=B)
    (found,) = check_devices([split, big, plain])
    return {"verdict": found.verdict, "summary": found.summary, "id": found.id}


def main() -> None:
    out = {"crux": verdict(solve_record("split", poisson(), batchsize=B, devices=2))}
    jax.lax.psum = lambda values, axis: values  # each device applies its own micro-batches' gradient
    out["own_gradient_only"] = verdict(solve_record("split", poisson(), batchsize=B, devices=2))
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
