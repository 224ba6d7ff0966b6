"""bench.md: a report's tables, problem by problem, then the targets of docs/BENCHMARK.md with what was measured."""
from __future__ import annotations

import numpy as np

from cruxlab.bench.hand_written import SAME_AS_CRUX
from cruxlab.bench.interleaved import how_timed


def figure(x: float | None, fmt: str = "{:.2f}") -> str:
    """``x`` as ``fmt`` writes it, or ``-`` where there is none (None or not finite)."""
    return "-" if x is None or (isinstance(x, float) and not np.isfinite(x)) else fmt.format(x)


def markdown(report: dict) -> str:
    """bench.md of ``report``: its command and machine, each problem's table, ratios and figures, the targets."""
    lines = ["# crux benchmark", "",
             f"`{report['command']}`  ", f"{report['environment']['summary']}", ""]
    for name, p in report["problems"].items():
        lines += [f"## {name}", "", p.get("description", ""), ""]
        if name == "scaling":
            lines += ["| points | width | crux steps/s | hand steps/s | crux / hand | updates per round |",
                      "|---:|---:|---:|---:|---:|---:|"]
            for r in p["rows"]:
                lines.append(f"| {r['points']} | {r['width']} | {r['crux_steps_per_second']:.2f} | "
                             f"{r['hand_steps_per_second']:.2f} | {r['ratio']:.2f} | {r['steps']} |")
            lines.append("")
            continue
        if name == "throughput":
            lines += throughput_table(p)
            continue
        if name == "shapes":
            lines += shapes_table(p)
            continue
        lines += ["| variant | compile s | steps/s (median) | min-max | CPU ms/step | fixed ms/solve | GFLOP/step "
                  "| final loss |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for vname, r in sorted(p["variants"].items(), key=lambda kv: -kv[1]["steps_per_second"]["median"]):
            sps = r["steps_per_second"]
            mark = " (separate process)" if r.get("separate_process") else ""
            lines.append(f"| {vname}{mark} | {figure(r.get('compile_seconds'))} | {sps['median']:.1f} | "
                         f"{sps['min']:.1f}-{sps['max']:.1f} | {figure(r.get('cpu_ms_per_step'), '{:.3f}')} | "
                         f"{figure(r.get('fixed_ms_per_solve'))} | {figure(r.get('gflop_per_step'), '{:.3f}')} | "
                         f"{figure(r.get('final_loss'), '{:.3e}')} |")
        lines.append("")
        if p.get("call_costs"):
            k1, k2 = p["fused"][0], p["fused"][-1]
            lines += [f"Cost of a fused call, fitted to the medians at {k1} and {k2} updates a call (where the two "
                      f"medians differ by less than their rounds' spread, the split is noise, a negative figure too):",
                      "",
                      "| way to train | µs per call | µs per update |", "|---|---:|---:|"]
            lines += [f"| {name} | {c['per_call_us']:.1f} | {c['per_update_us']:.2f} |"
                      for name, c in p["call_costs"].items()]
            lines.append("")
        if p.get("work"):
            lines += [f"Work of an update, as XLA counts the compiled programs (a loop's body once, so a fused call "
                      f"counts one update): crux against the hand-written {SAME_AS_CRUX} of as many updates a call:",
                      "", "| updates a call | crux MFLOP | hand MFLOP | crux / hand | crux MB accessed | hand MB "
                      "accessed | crux / hand |", "|---:|---:|---:|---:|---:|---:|---:|"]
            for k, c in p["work"].items():
                ours, hand = c["crux"], c["hand"]
                lines.append(f"| {k} | {ours['flops'] / 1e6:.3f} | {hand['flops'] / 1e6:.3f} | "
                             f"{ours['flops'] / hand['flops']:.4f} | {ours['bytes'] / 1e6:.3f} | "
                             f"{hand['bytes'] / 1e6:.3f} | {ours['bytes'] / hand['bytes']:.4f} |")
            lines.append("")
        if p.get("per_update"):
            lines += ["Per-update time against the fused depth K, each K's rounds against K = 1's and against the "
                      "next shallower K's round by round (median of the rounds' ratios; above 1, fusing made an "
                      "update dearer):", "",
                      "| K | µs per update | / K = 1 | range | / shallower K |", "|---:|---:|---:|---:|---:|"]
            lines += [f"| {r['k']} | {r['us_per_update']:.1f} | {r['over_k1']:.3f} | {r['over_k1_min']:.3f}-"
                      f"{r['over_k1_max']:.3f} | {r['over_previous']:.3f} |" for r in p["per_update"]]
            lines.append("")
        if p.get("first_update"):
            lines += ["Time to first update (s), from the first call that trains, in a fresh process: " + ", ".join(
                f"{family} {seconds:.2f}" for family, seconds in p["first_update"].items()), ""]
        for key, value in p.get("ratios", {}).items():
            pair = p.get("paired", {}).get(key)
            rounds = "" if pair is None else \
                f" ({how_timed(pair)}: median {pair['median']:.2f}, {pair['min']:.2f}-{pair['max']:.2f})"
            lines.append(f"- {key}: **{value:.2f}**{rounds}")
        lines.append("")
    lines += ["## Targets (docs/BENCHMARK.md; figures, not assertions)", "", "| target | measured | goal | met |",
              "|---|---:|---:|---|"]
    for t in report["targets"]:
        met = {True: "yes", False: "NO", None: "n/a"}[t["met"]]
        lines.append(f"| {t['target']} | {figure(t['value'], '{:.3f}')} | {t['goal']} | {met} |")
    lines.append("")
    return "\n".join(lines)


def throughput_table(p: dict) -> list[str]:
    """The throughput rows: updates/s, TFLOP/s and the fraction of the peak, crux beside hand-written JAX; then
    the sizes that did not fit the device."""
    peak = p.get("peak_tflops")
    fraction = f" of {peak:g} TFLOP/s" if peak else " (no --peak-tflops)"
    lines = [f"| points | width | precision | MFLOP/update | crux updates/s | crux TFLOP/s | crux fraction{fraction} "
             f"| hand updates/s | hand TFLOP/s | hand fraction | crux / hand |",
             "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in p["rows"]:
        flops = None if r["flops_per_update"] is None else r["flops_per_update"] / 1e6
        cells = [f"{r[f]['steps_per_second']:.1f} | {figure(r[f]['tflops'], '{:.3f}')} | "
                 f"{figure(r[f]['peak_fraction'], '{:.1%}')}" for f in ("crux", "hand")]
        lines.append(f"| {r['points']} | {r['width']} | {r['precision']} | {figure(flops, '{:.1f}')} | {cells[0]} | "
                     f"{cells[1]} | {r['ratio']:.2f} |")
    lines.append("")
    if p.get("out_of_memory"):
        lines += ["Out of device memory: " + ", ".join(f"{r['points']} points width {r['width']} ({r['precision']})"
                                                      for r in p["out_of_memory"]), ""]
    return lines


def shapes_table(p: dict) -> list[str]:
    """The shapes rows: crux and the fastest hand-written scan, updates/s and their duel's ratio."""
    lines = ["| shape | precision | updates a call | crux updates/s | hand updates/s | fastest hand-written "
             "| crux / hand (back to back) |", "|---|---|---:|---:|---:|---|---:|"]
    lines += [f"| {r['shape']} | {r['precision']} | {r['k']} | {r['crux_steps_per_second']:.1f} | "
              f"{r['hand_steps_per_second']:.1f} | {r['hand']} | {r['duel']['median']:.2f} ({r['duel']['min']:.2f}–"
              f"{r['duel']['max']:.2f}) |" for r in p["rows"]]
    return lines + [""]
