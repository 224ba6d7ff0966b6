"""How accurate each backend's float32 elementwise functions are, against float64: the activations a PINN is built
from, their derivatives, crux's own tanh, and one matrix product at each matmul precision.

A network's second derivative carries the error of its activation and of the activation's derivatives; a backend
whose ``tanh`` is a few ulp off trains to a less accurate solution at any matmul precision. For every backend JAX
sees (the accelerator and the CPU), prints per function the largest and the median error in float32 ulp (of the
exact value, computed with NumPy in float64) over points spread where a tanh network's pre-activations lie.

    python scripts/function_accuracy.py [--out FILE.json] [--points N]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from crux.tanh import accurate_tanh

# name -> (the function in JAX, the exact one in NumPy float64, the smallest magnitude an error is measured at).
# The derivatives of tanh, as a network's derivatives compute them from tanh itself, lose their relative accuracy
# where they are small whatever the backend; they are measured in ulp of 1, their scale inside a network.
FUNCTIONS: dict[str, tuple[Callable, Callable, float]] = {
    "tanh": (jnp.tanh, np.tanh, 0.0),
    "tanh' = 1 - tanh^2": (lambda x: 1 - jnp.tanh(x) ** 2, lambda x: 1 / np.cosh(x) ** 2, 1.0),
    "tanh'' = -2 tanh tanh'": (lambda x: -2 * jnp.tanh(x) * (1 - jnp.tanh(x) ** 2),
                               lambda x: -2 * np.tanh(x) / np.cosh(x) ** 2, 1.0),
    "crux's accurate tanh": (accurate_tanh, np.tanh, 0.0),
    "its derivative (autodiff)": (jax.vmap(jax.grad(accurate_tanh)), lambda x: 1 / np.cosh(x) ** 2, 1.0),
    "its second derivative": (jax.vmap(jax.grad(jax.grad(accurate_tanh))),
                              lambda x: -2 * np.tanh(x) / np.cosh(x) ** 2, 1.0),
    "sin": (jnp.sin, np.sin, 0.0),
    "cos": (jnp.cos, np.cos, 0.0),
    "exp": (jnp.exp, np.exp, 0.0),
    "softplus": (jax.nn.softplus, lambda x: np.logaddexp(0, x), 0.0),
}
RANGE = 6.0  # |pre-activation| up to which the functions are probed


def ulp_errors(got: np.ndarray, exact: np.ndarray, floor: float = 0.0) -> np.ndarray:
    """|got - exact| in units of the float32 spacing at the exact value, or at ``floor`` where the exact value is
    smaller (and at least at the smallest normal number)."""
    scale = np.maximum(np.abs(exact), max(floor, float(np.finfo(np.float32).tiny)))
    spacing = np.spacing(scale.astype(np.float32)).astype(np.float64)
    return np.abs(got.astype(np.float64) - exact) / spacing


def probe(device: jax.Device, n: int) -> dict[str, dict[str, float]]:
    x32 = np.linspace(-RANGE, RANGE, n, dtype=np.float32)
    x64 = x32.astype(np.float64)
    out = {}
    for name, (function, exact, floor) in FUNCTIONS.items():
        got = np.asarray(jax.jit(function)(jax.device_put(x32, device)))
        errors = ulp_errors(got, exact(x64), floor)
        out[name] = {"max_ulp": float(errors.max()), "median_ulp": float(np.median(errors)),
                     "mean_ulp": float(errors.mean())}
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((256, 256)).astype(np.float32) for _ in range(2))
    exact = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))  # the products' own size
    for precision in ("default", "high", "highest"):
        product = jax.jit(lambda p, q: jnp.matmul(p, q, precision=precision))
        got = np.asarray(product(jax.device_put(a, device), jax.device_put(b, device))).astype(np.float64)
        relative = np.abs(got - exact) / scale
        out[f"matmul 256 ({precision})"] = {"max_relative": float(relative.max()),
                                             "median_relative": float(np.median(relative))}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--points", type=int, default=200_001, help="points in [-6, 6] (default 200001)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    devices = {jax.devices()[0].platform: jax.devices()[0]}
    devices.setdefault("cpu", jax.devices("cpu")[0])
    report = {"jax": jax.__version__, "devices": {p: d.device_kind for p, d in devices.items()},
              "points": args.points, "range": RANGE,
              "results": {platform: probe(device, args.points) for platform, device in devices.items()}}
    platforms = list(report["results"])
    print(f"float32 error against float64, {args.points} points in [-{RANGE:g}, {RANGE:g}]; "
          f"backends: {', '.join(f'{p} ({k})' for p, k in report['devices'].items())}")
    print(f"{'function':28s}" + "".join(f"{p + ' max / median':>28s}" for p in platforms))
    for name in report["results"][platforms[0]]:
        cells = []
        for platform in platforms:
            figures = report["results"][platform][name]
            if "max_ulp" in figures:
                cells.append(f"{figures['max_ulp']:12.1f} / {figures['median_ulp']:6.2f} ulp")
            else:
                cells.append(f"{figures['max_relative']:10.2e} / {figures['median_relative']:8.2e} rel")
        print(f"{name:28s}" + "".join(f"{c:>28s}" for c in cells))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
