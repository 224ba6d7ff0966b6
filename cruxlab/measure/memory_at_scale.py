"""Memory of ``checkpoint_gradients`` and ``offload_data`` at stated sizes: what each compiled update needs (or
the figure in XLA's refusal), and what the option's run peaks at.

    python scripts/memory_at_scale.py --out scale.json          # on a device: its sizes (below)
    python scripts/memory_at_scale.py --checkpoint 3000:64x8 --offload 4096:256:4   # anywhere, stated sizes
    python scripts/memory_at_scale.py --checkpoint "" --offload 1073741824:524288:16:4   # 16 GiB of 4-D points

``--checkpoint POINTS:WIDTHxDEPTH`` (comma-separated): the 1-D Poisson update over POINTS points on DEPTH hidden
layers of WIDTH, compiled in each form of ``crux.remat`` alone (plain, the model's rematerialised segments scanned, one
checkpoint around the network, the segments unrolled), then as ``checkpoint_gradients=True`` compiles it where
memory decides (held to the least form's need, so that it compares the forms), choosing among them. Where XLA refuses a
form, its refusal's figure stands for what it needed (two decimals of its unit). The line holds the choice
against the plain update: checkpointing must never need more.

``--offload POINTS:BATCH:MICRO[:DIMS]``: two updates of MICRO micro-batches of BATCH points drawn from POINTS
points of the Poisson problem in DIMS dimensions (default 1; more on the cube ``[0, 1]^DIMS``, float32 points of
``4 * DIMS`` bytes each, generated once for both runs), with the points on the device and streamed from the host
(``offload_data``): each one's compiled need, recorded peak and median seconds per update. Offloading must not
need more device memory than the on-device batches, and the recorded peak must be the update's own: within 10%
of its compiled temporaries, arguments and outputs. Where the device refuses the on-device run (RESOURCE_EXHAUSTED:
the point set does not fit), the line records the need its refusal names, and the offloaded run must train
within the device's memory: what offloading is for.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import json
import re
import sys
from pathlib import Path
from typing import Any, Sequence

from crux import Crux, device_memory, engine, remat
from crux.solver import Machinery
from cruxlab import capacity_search

# On a device: the sizes at which a TPU v5e's plain update no longer fits (3 x 256 over 4M points; 8 x 256 over
# 786,432), one that fits (1M), 16 micro-batches of 1M over 16M points, and of 512K over 2^30 points in 4-D (16 GiB:
# more than a TPU v5e's 15.75 GiB).
DEVICE_CHECKPOINT = "1048576:256x3,4194304:256x3,786432:256x8"
DEVICE_OFFLOAD = "16777216:1048576:16,1073741824:524288:16:4"
CPU_CHECKPOINT, CPU_OFFLOAD = "3000:64x8", "4096:256:4,2048:128:4:3"


def in_form(form: str) -> Machinery:
    """crux's machinery with every call traced in the rematerialisation ``form``: one form's need alone, a
    diagnostic through the solver's seam, not an option."""
    return Machinery(make_call=lambda plan: engine.make_call(dataclasses.replace(plan, remat=form)))


def need(solver: Crux, options: dict[str, Any]) -> dict[str, Any]:
    """The compiled update's bytes, or the bytes XLA's refusal names and the refusal itself."""
    try:
        return {"bytes": device_memory.compiled_bytes(solver.compiled_memory(**options)), "refused": None}
    except Exception as error:  # XLA's own error type differs between versions; its message does not
        refused = device_memory.refusal(error)
        if refused is None:
            raise
        return {"bytes": device_memory.refused_bytes(str(error)), "refused": refused}


def checkpoint_forms(points: int, hidden: Sequence[int]) -> dict[str, Any]:
    """Each form's need over ``points`` on ``hidden``, and the need of the form ``checkpoint_gradients`` runs where
    memory decides: on a device that holds the least form's need and no more (or its own, where every form is
    refused), so that the forms are compared."""
    base = capacity_search.poisson_solver(points, hidden)
    forms = {form: need(Crux(base.constraints, base.models, machinery=in_form(form)), {}) for form in remat.FORMS}
    needs = [f["bytes"] for f in forms.values() if not f["refused"] and f["bytes"] is not None]
    with device_memory.held_to(min(needs)) if needs else contextlib.nullcontext():
        chosen = need(base, {"checkpoint_gradients": True})
    plain, figure = forms[remat.PLAIN]["bytes"], chosen["bytes"]
    ratio = figure / plain if figure is not None and plain else None
    return {"points": points, "hidden": list(hidden), "forms": forms, "checkpoint_gradients": chosen,
            "chosen_over_plain": ratio, "never_more": ratio is not None and ratio <= 1.0}


def offload_against_device(points: int, batch: int, micro: int, dims: int, width: int, budget: int | None
                           ) -> dict[str, Any]:
    """Two updates of ``micro`` micro-batches of ``batch`` over ``points`` of ``dims`` coordinates (three hidden
    layers of ``width``), on the device and offloaded; a run whose update the device refuses is not started."""
    runs, hidden = {}, (width,) * capacity_search.SHALLOW
    base = capacity_search.poisson_solver(points, hidden, dims=dims)  # the point set, generated once for every run

    def fresh() -> Crux:  # the same points, the network as initialised (a run writes its parameters back)
        return Crux(base.constraints, {name: copy.copy(model) for name, model in base.models.items()})

    for offload in (False, True):
        options = {"batchsize": batch, "accumulation_steps": micro, "offload_data": offload}
        compiled = need(fresh(), options)
        run = (capacity_search.train_updates(fresh(), options, budget if budget is not None else 2 ** 62)
               if not compiled["refused"] else {"peak": None, "trained": False, "error": compiled["refused"], "step_seconds": None})
        runs["offloaded" if offload else "on_device"] = {"compiled": compiled, **run}
    device, streamed = runs["on_device"], runs["offloaded"]
    refused = bool(device["compiled"]["refused"])
    ratio = (streamed["peak"] / device["peak"]) if streamed["peak"] and device["peak"] else None
    own = (streamed["peak"] / streamed["compiled"]["bytes"]
           if streamed["peak"] and streamed["compiled"]["bytes"] else None)
    return {"points": points, "batch": batch, "micro_batches": micro, "dims": dims,
            "points_bytes": points * dims * 4, **runs, "device_refused": refused,
            "offloaded_over_on_device_peak": ratio,
            "never_more": streamed["trained"] if refused else ratio is not None and ratio <= 1.0,
            "offloaded_peak_over_compiled": own, "peak_is_the_updates": own is not None and own <= 1.1,
            "offloaded_over_on_device_seconds": (streamed["step_seconds"] / device["step_seconds"]
                                                 if streamed["step_seconds"] and device["step_seconds"] else None)}


def _gib(value: int | None) -> str:
    if value is None:
        return "-"
    return f"{value / 2 ** 30:.2f} GiB" if value >= 2 ** 30 else f"{value / 2 ** 20:.2f} MiB"


def summary(result: dict[str, Any]) -> str:
    """One line per measurement."""
    if "forms" in result:
        parts = ", ".join(f"{form} {_gib(r['bytes'])}{' (refused)' if r['refused'] else ''}"
                          for form, r in result["forms"].items())
        ratio = result["chosen_over_plain"]
        return (f"checkpoint_gradients over {result['points']:,} points, {'x'.join(map(str, result['hidden']))}: "
                f"{parts}; checkpoint_gradients=True needs {_gib(result['checkpoint_gradients']['bytes'])}, "
                f"{'-' if ratio is None else f'{ratio:.3f}'} of the plain update's")
    device, streamed = result["on_device"], result["offloaded"]
    head = (f"offload_data, {result['micro_batches']} x {result['batch']:,} over {result['points']:,} points in "
            f"{result['dims']}-D ({_gib(result['points_bytes'])})")
    if result["device_refused"]:
        return (f"{head}: the point set does not fit on the device (refused: needs "
                f"{_gib(device['compiled']['bytes'])}, {device['compiled']['refused']}); offloaded, compiled "
                f"{_gib(streamed['compiled']['bytes'])}, it {'trains' if streamed['trained'] else 'does not train'} "
                f"at peak {_gib(streamed['peak'])}, {streamed['step_seconds'] or float('nan'):.2f} s per update")
    return (f"{head}: on the "
            f"device compiled {_gib(device['compiled']['bytes'])}, peak {_gib(device['peak'])}; offloaded compiled "
            f"{_gib(streamed['compiled']['bytes'])}, peak {_gib(streamed['peak'])} "
            f"({result['offloaded_over_on_device_peak'] or float('nan'):.3f} of on the device; "
            f"{result['offloaded_peak_over_compiled'] or float('nan'):.3f} of its compiled bytes); seconds per "
            f"update {result['offloaded_over_on_device_seconds'] or float('nan'):.2f} of on the device's")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", default=None,
                        help=f"POINTS:WIDTHxDEPTH, comma-separated (default on a device {DEVICE_CHECKPOINT}, else "
                             f"{CPU_CHECKPOINT}); an empty value skips")
    parser.add_argument("--offload", default=None,
                        help=f"POINTS:BATCH:MICRO[:DIMS], comma-separated (default on a device {DEVICE_OFFLOAD}, else "
                             f"{CPU_OFFLOAD}); an empty value skips")
    parser.add_argument("--width", type=int, default=None, help="the offload runs' width (default 256 on a device, "
                                                                 "else 64), three hidden layers")
    parser.add_argument("--out", type=Path, default=None, help="write the results to this JSON file")
    args = parser.parse_args(argv)
    budget = capacity_search.device_budget()
    on_device = budget is not None
    checkpoint = args.checkpoint if args.checkpoint is not None else (
        DEVICE_CHECKPOINT if on_device else CPU_CHECKPOINT)
    offload = args.offload if args.offload is not None else (DEVICE_OFFLOAD if on_device else CPU_OFFLOAD)
    if args.width is not None and args.width < 1:
        parser.error(f"--width {args.width}: give a whole number >= 1, e.g. --width 64")
    width = args.width or (256 if on_device else 64)
    whole = r"([1-9]\d*)"  # every size is a whole number >= 1
    try:
        checkpoints = [(int(p), [int(w)] * int(d)) for p, w, d in
                       (re.fullmatch(f"{whole}:{whole}x{whole}", s.strip()).groups()
                        for s in checkpoint.split(",") if s.strip())]
        offloads = [tuple(int(v or 1) for v in
                          re.fullmatch(f"{whole}:{whole}:{whole}(?::{whole})?", s.strip()).groups())
                    for s in offload.split(",") if s.strip()]
    except AttributeError:
        parser.error(f"--checkpoint {checkpoint!r} / --offload {offload!r}: write POINTS:WIDTHxDEPTH and "
                     f"POINTS:BATCH:MICRO[:DIMS], each a whole number >= 1, e.g. --checkpoint 3000:64x8 "
                     f"--offload 4096:256:4:2")
    results = []
    for points, hidden in checkpoints:
        results.append(checkpoint_forms(points, hidden))
        print(summary(results[-1]), flush=True)
    for points, batch, micro, dims in offloads:
        results.append(offload_against_device(points, batch, micro, dims, width, budget))
        print(summary(results[-1]), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"budget_bytes": budget, "results": results}, indent=2, default=str))
    return 0 if all(r["never_more"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
