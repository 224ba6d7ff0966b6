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

from crux.report.numerics import (HISTORY_RULE, ROUNDOFF_ALLOWANCE, ROUNDOFF_ORIGIN, ROUNDOFF_RULE, STEP_TIME,
                                  Agreement, agreement, history_departure, paired_timing, ratio_range, spread, unmoved)
from crux.report.pairing import first, repeats, run_ids, settings
from crux.report.records import RunRecord, UnreadableArtifact
from crux.report.verdict import (FAILS, HOLDS, INCONCLUSIVE, Claim, Threshold, Verdict, cannot_judge, fmt,
                                 not_in_sweep)

ONE_BATCH = Claim("solve(devices=D) splits each update's batch over D devices and sums their gradients inside "
                  "the update: D devices × B points train the updates of one device with a batch of D·B, to "
                  "round-off", "devices-one-batch")


@dataclass(frozen=True)
class DeviceSet:
    """What the claim compares: the repeats on D devices × B, of one device with D·B, the first of plain B."""

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
        found.append(DeviceSet(runs, big, first(repeats(records, group, replace(options, devices=1)))))
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
    if not s.big_batch:
        missing = " and ".join([f"batchsize={d * b}"] + ([f"batchsize={b}"] if s.plain is None else []))
        return ONE_BATCH.verdict(name, test, INCONCLUSIVE, f"the sweep has no run on one device with {missing} "
                                 f"to compare with", runs=runs)
    try:
        together = agreement(s.big_batch[0], s.split[0])
        alone = agreement(s.plain, s.split[0]) if s.plain is not None else None
    except UnreadableArtifact as error:
        found = history_departure(s.big_batch[0], s.split[0])
        if not found:
            return cannot_judge(name, ONE_BATCH, test, error, runs)
        return ONE_BATCH.verdict(name, test, FAILS, f"{d} devices × {b} depart from one device with batch {d * b}: "
                                                    f"{found} (parameters not compared: {error})", runs=runs)
    evidence = {"D": d, "B": b, "updates": together.updates, "travel": together.travel,
                **together.evidence("vs_one_device_DB_"),
                **(alone.evidence("vs_plain_B_") if alone is not None else {})}
    thresholds = {"parameter_distance": Threshold(together.parameter_bound, ROUNDOFF_RULE, ROUNDOFF_ORIGIN),
                  "history_difference": Threshold(together.history_bound, HISTORY_RULE, ROUNDOFF_ORIGIN)}
    verdict, summary = _judge(s, together, alone)
    speed = _speed(s.split, s.big_batch)
    if speed:
        evidence.update(speed[0])
        summary += f"; time per update against one device with batch {d * b}: {speed[1]} (a finding, not judged)"
    return ONE_BATCH.verdict(name, test, verdict, summary, evidence, thresholds, runs)


def _judge(s: DeviceSet, together: Agreement, alone: Agreement | None) -> tuple[str, str]:
    d, b = s.d, s.b
    if together.travel == 0:
        return unmoved(s.big_batch[0], s.split[0], f"{d} devices × {b} did not move the parameters and depart "
                                                   f"from one device with batch {d * b}")
    position = (f"distance in units of eps·sqrt(T)·travel: vs {d * b} on one device {fmt(together.in_eps_units)}"
                + (f", vs {b} {fmt(alone.in_eps_units)}" if alone is not None else "")
                + f", round-off bound {fmt(ROUNDOFF_ALLOWANCE)}")
    if alone is None:
        if together.within_roundoff:
            return INCONCLUSIVE, (f"{d} devices × {b} follow one device with batch {d * b} to round-off, but the "
                                  f"sweep has no run with batchsize={b} on one device to show the two differ; "
                                  f"{position}")
        return FAILS, f"{d} devices × {b} do not follow one device with batch {d * b}; {position}"
    if together.within_roundoff and not alone.within_roundoff:
        return HOLDS, f"{d} devices × {b} follow one batch of {d * b} to round-off and not batch {b}; {position}"
    if together.within_roundoff:
        return INCONCLUSIVE, (f"{d}×{b}, {d * b} and {b} follow one trajectory: every batch holds all points, so "
                              f"this sweep cannot tell the devices' batches apart; {position}")
    if alone.within_roundoff:
        return FAILS, (f"{d} devices × {b} follow plain batch {b}: the update saw one device's points; "
                       f"{position}")
    return FAILS, f"{d} devices × {b} follow neither one batch of {d * b} nor batch {b}; {position}"


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
