"""solve(devices=D): D devices × B points per update train one batch of D·B, judged on the sweep's numbers.

The test rests on crux's own guarantee: on D devices an update's micro-batches are
those one device takes with D times as many, so D×B follows one batch of D·B to
round-off (only the order of the gradient's sum changes), while plain B follows
another trajectory. A run that follows plain B computed one device's share and
dropped the others'. The time per update against one batch of D·B on one device is
reported beside it, not judged: devices that share one machine's cores (CPU host
devices) cannot be faster than one of them.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from cruxlab.report import drawing
from cruxlab.report.claims.split_batch import SplitBatch, split_batch_verdict
from cruxlab.report.numerics import STEP_TIME, paired_timing, ratio_range, spread
from cruxlab.report.pairing import reference_and_twins, repeats, run_ids, settings
from cruxlab.report.run_records import RunRecord
from cruxlab.report.verdict import Claim, Verdict, fmt, not_in_sweep

ONE_BATCH = Claim("solve(devices=D) splits each update's batch over D devices and sums their gradients inside "
                  "the update: D devices × B points train the updates of one device with a batch of D·B, to "
                  "round-off", "devices-one-batch")


@dataclass(frozen=True)
class DeviceSet:
    """What the claim compares: the repeats on D devices × B, of one device with D·B, and plain B started alike."""

    split: list[RunRecord]
    big_batch: list[RunRecord]
    plain: RunRecord | None

    @property
    def d(self) -> int:
        return self.split[0].options.devices

    @property
    def b(self) -> int:
        return int(self.split[0].options.batchsize)


def device_sets(records: list[RunRecord]) -> list[DeviceSet]:
    """One set per setting of the sweep on several devices with a batch size."""
    found = []
    for (group, options), runs in settings(records, lambda o: o.devices > 1 and o.batchsize is not None).items():
        big = repeats(records, group, replace(options, batchsize=options.devices * options.batchsize, devices=1))
        plain, _ = reference_and_twins(repeats(records, group, replace(options, devices=1)), runs[0])
        found.append(DeviceSet(runs, big, plain))
    return found


def check_devices(records: list[RunRecord]) -> list[Verdict]:
    """A verdict per setting of the sweep on several devices with a batch size."""
    sets = device_sets(records)
    if not sets:
        return [not_in_sweep("devices.one_batch", ONE_BATCH, "a run with solver.devices > 1 and a batchsize",
                             "on several devices", run_ids(records))]
    return [_one_batch(s) for s in sets]


def _one_batch(s: DeviceSet) -> Verdict:
    d, b = s.d, s.b
    name = f"devices.one_batch[{s.split[0].label}]"
    test = (f"final parameters and loss/total history of {d} devices × {b} against one device with batch {d * b} "
            f"(must agree to round-off) and against plain batch {b} (must differ beyond round-off)")
    runs = run_ids(s.split, s.big_batch, s.plain)
    whole, twins = reference_and_twins(s.big_batch, s.split[0])
    split = SplitBatch(s.split[0], whole, s.plain, d, "D", f"{d}×{b} on {d} devices",
                       f"one device with batch {d * b}", f"batchsize={d * b} on one device", f"batch {b}",
                       f"batchsize={b} on one device", "the update saw one device's points", "vs_one_device_DB_",
                       twins)
    verdict = split_batch_verdict(ONE_BATCH, name, test, split, runs)
    # the time per update beside a comparison that was made (evidence), not beside a missing or unreadable run
    speed = _speed(s.split, s.big_batch) if verdict.evidence else None
    if speed is None:
        return verdict
    return replace(verdict, evidence={**verdict.evidence, **speed[0]},
                   summary=f"{verdict.summary}; time per update against one device with batch {d * b}: {speed[1]} "
                           f"(a finding, not judged)")


def _speed(split: list[RunRecord], big: list[RunRecord]) -> tuple[dict[str, float], str] | None:
    """The time per update on the devices over one device's with the whole batch: the split runs' paired
    timing where they timed themselves (timing.against), else the range over the repeats of separate jobs."""
    timing = paired_timing(split)
    if timing is not None:
        return timing.evidence(), f"{timing.described()}, paired in one process"
    mine, base = spread(split, STEP_TIME), spread(big, STEP_TIME)
    if len(mine.values) < 2 or len(base.values) < 2:
        return None
    low, high = ratio_range(mine, base)
    median = mine.median / base.median
    return ({"time_ratio_median": median, "time_ratio_low": low, "time_ratio_high": high},
            f"{fmt(median)}× ({fmt(low)}–{fmt(high)} over repeats of separate jobs, no confidence stated)")


def devices_figures(records: list[RunRecord], out: Path) -> list[drawing.Figure]:
    figures = []
    for s in device_sets(records):
        d, b = s.d, s.b
        whole, twins = reference_and_twins(s.big_batch, s.split[0])
        runs = [(f"{d} devices × {b}", s.split[0]), (f"{d * b}", whole), (f"{b}", s.plain)]
        figures.append(drawing.one_batch_figure(runs, out, f"devices_{s.split[0].label}", "devices",
                                                f"{d} devices × {b} against one device's batch of {d * b} and plain "
                                                f"{b}", twins))
    return figures
