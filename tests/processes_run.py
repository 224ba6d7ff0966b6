"""One training on two devices, in one of two forms, its final parameters saved to ``OUT``:

    python tests/processes_run.py OUT distributed PORT PROCESS   # one of 2 processes, one CPU device each
    python tests/processes_run.py OUT local                      # 1 process with 2 host devices (XLA_FLAGS)

The distributed form joins a coordinator on 127.0.0.1:PORT (process 0 runs it) with JAX's CPU collectives
(gloo), as a script of several processes or Slurm tasks would before building its solver.
"""
from __future__ import annotations

import sys

import jax
import numpy as np
import optax

from crux_testing import poisson, train, with_probes


def main(out: str, form: str, *where: str) -> None:
    if form == "distributed":
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(f"127.0.0.1:{where[0]}", num_processes=2, process_id=int(where[1]))
    start, params, _ = train(with_probes(poisson(optax.sgd), 12, 20), 20, batchsize=8, devices=2)
    np.save(out, np.stack([start, params]))


if __name__ == "__main__":
    main(*sys.argv[1:])
