"""Each memory option at the smallest size the run without it does not fit: one line per option, and a verdict.

    python scripts/capacity.py --options checkpoint_gradients --out capacity.json   # on a device: its memory
    python scripts/capacity.py --budget-bytes 4194304                                # on a CPU: a declared budget

Sizes are points of the 1-D Poisson problem on three hidden layers, grown from --start to the smallest power-of-two
multiple that the run without the option does not fit (XLA's compiled memory analysis needs more, or XLA refuses
with RESOURCE_EXHAUSTED), up to what the host's memory holds; for offload_data points of the Poisson problem on
[0, 1]^D (--offload-dims D: 4 on a device, where 2^30 such points are 16 GiB, past a TPU v5e's 15.75 GiB, within
a constraint's 2^31 - 1 points); for checkpoint_gradients they are the network's hidden layers over --depth-points
points, doubled from three and bisected, as depth is what rematerialising saves on. The option's run then trains
two updates at that size and its peak is held to the budget (cruxlab.capacity_search). On a device the budget is its
memory (memory_stats()["bytes_limit"]); a CPU reports none, so the budget is declared there.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from pathlib import Path
from typing import Sequence

from cruxlab import capacity_search
from cruxlab.report.claims.capacity import capacity_verdict



def tried(attempt: capacity_search.Attempt) -> None:
    """One size as it is tried, on stderr: how far a search came where a time limit stops it."""
    print(f"  {attempt}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--budget-bytes", type=int, default=None,
                        help="the memory to fit in (default: the device's bytes_limit; required on a CPU, e.g. "
                             "--budget-bytes 4194304)")
    parser.add_argument("--options", default=",".join(capacity_search.OPTIONS),
                        help=f"comma-separated options to show (default all: {','.join(capacity_search.OPTIONS)})")
    parser.add_argument("--width", type=int, default=None,
                        help="the networks' width (default: 256 on a device that reports its memory, else 64)")
    parser.add_argument("--start", type=int, default=None,
                        help="the first point set tried where the points grow (default: 1024 on such a device, "
                             "else 64)")
    parser.add_argument("--offload-batch", type=int, default=None,
                        help="offload_data's batch, and the on-device batches it is set against (default: 65536 on "
                             "such a device, else 256)")
    parser.add_argument("--depth-points", type=int, default=None,
                        help="checkpoint_gradients' point set, over which the network's hidden layers grow (default: "
                             "524288 on such a device, else 64)")
    parser.add_argument("--offload-dims", type=int, default=None,
                        help="the coordinates of offload_data's points (default: 4 on such a device, else 1)")
    parser.add_argument("--out", type=Path, default=None, help="write the results and verdicts to this JSON file")
    args = parser.parse_args(argv)
    options = [o.strip() for o in args.options.split(",") if o.strip()]
    unknown = [o for o in options if o not in capacity_search.OPTIONS]
    if unknown or not options:
        parser.error(f"--options {args.options}: choose from {','.join(capacity_search.OPTIONS)}")
    budget = capacity_search.budget(args.budget_bytes)
    if budget is None:
        parser.error("this device reports no memory limit (a CPU): declare one, e.g. --budget-bytes 4194304")
    if budget <= 0:
        parser.error(f"--budget-bytes {budget}: give a positive number of bytes")
    width, start, batch, depth_points, dims = [
        given if given is not None else default for given, default in
        zip((args.width, args.start, args.offload_batch, args.depth_points, args.offload_dims),
            dataclasses.astuple(capacity_search.default_sizes()))]
    if min(width, start, batch, depth_points, dims) < 1:
        parser.error(f"--width {width}, --start {start}, --offload-batch {batch}, --depth-points {depth_points}, "
                     f"--offload-dims {dims}: each must be at least 1")
    logging.getLogger("crux").setLevel(logging.WARNING)
    results, compiled = [], {}
    for option in options:
        result = capacity_search.measure_capacity(option, budget, width=width, start=start, offload_batch=batch,
                                                  depth_points=depth_points, offload_dims=dims, compiled=compiled,
                                                  tried=tried)
        verdict = capacity_verdict(option, result.metrics(), form=result.form)
        print(f"{result}; verdict {verdict.verdict}", flush=True)
        results.append({"option": option, **result.record(), "verdict": verdict.as_dict()})
        if args.out is not None:  # after each option: a run stopped at a time limit keeps those done
            args.out.write_text(json.dumps({"budget_bytes": budget, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
