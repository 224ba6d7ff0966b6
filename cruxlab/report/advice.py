"""From verdicts to a decision: which solve() options to use on the problem and machine a sweep measured.

:func:`advise` is a pure function of the ``verdicts.json`` entries of an ``advise`` sweep (sweeps/advise.yaml) and
the device's memory budget. An option is advised only where the verdicts on it hold: faster (its timing verdict
holds) with the same numbers (its identity verdict holds), or as accurate (the precision verdicts); a memory
option only where the full batch's update does not fit the budget and the option's memory verdict holds. A
verdict that fails rejects the option, saying why; an inconclusive one leaves it at its safe default, saying so.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from cruxlab.report.verdict import FAILS, HOLDS, fmt, fmt_bytes

ADVISED, KEPT, REJECTED = "advised", "kept", "rejected"
DEFAULTS: dict[str, Any] = {"inner_steps": 1, "precision": "highest", "batchsize": None,
                            "checkpoint_gradients": False, "offload_data": False}
"""The safe defaults advice starts from: solve()'s own, which every claim check pairs an option with."""
OVERRIDES = {"inner_steps": "solver.inner_steps", "precision": "solver.precision", "batchsize": "memory.batchsize",
             "checkpoint_gradients": "memory.checkpoint_gradients", "offload_data": "memory.offload_data"}
"""Each advised option as the pipeline's override sets it (cruxlab.config.settings.OPTION_KEYS)."""

Verdicts = Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class Decision:
    """One option's decision: ``value`` (its default unless ``status`` is ``advised``) and the evidence line."""

    option: str
    value: Any
    status: str
    reason: str
    verdicts: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return self.status == ADVISED and self.value != DEFAULTS[self.option]

    def as_dict(self) -> dict[str, Any]:
        return {"option": self.option, "value": self.value, "default": DEFAULTS[self.option], "status": self.status,
                "reason": self.reason, "verdicts": list(self.verdicts)}


@dataclass(frozen=True)
class Advice:
    """The options to use (one :class:`Decision` per option, in solve()'s order) and those not advised: rejected by a
    verdict that fails, or left out where one was inconclusive beside an advised value."""

    choices: tuple[Decision, ...]
    rejected: tuple[Decision, ...]
    budget_bytes: int | None
    capacity: Mapping[str, Any] | None = None  # the largest batches that fit, where they were searched

    def solve_call(self) -> str:
        """``solver.solve(epochs, inner_steps=100)``: the options that differ from solve()'s defaults."""
        changed = [f"{c.option}={c.value!r}" for c in self.choices if c.changed]
        return f"solver.solve({', '.join(['epochs', *changed])})"

    def overrides(self) -> list[str]:
        """The same options as the pipeline's overrides (``solver.inner_steps=100``)."""
        return [f"{OVERRIDES[c.option]}={_override_value(c.value)}" for c in self.choices if c.changed]

    def lines(self) -> list[str]:
        """The advice in plain text: the call, the overrides, each choice and each rejection with its evidence."""
        lines = ["use:", f"  {self.solve_call()}",
                 f"  crux-run {' '.join(self.overrides())}".rstrip() if self.overrides() else
                 "  crux-run (no override: the defaults are what the evidence supports)", "because:"]
        lines += [f"  {c.reason}" for c in self.choices]
        if self.rejected:
            lines += ["not advised:"] + [f"  {c.reason}" for c in self.rejected]
        return lines

    def markdown(self) -> str:
        """``advice.md``: the same as :meth:`lines`, with the verdicts each line rests on."""
        rows = ["# Advice", "", "```python", self.solve_call(), "```", "", "```sh",
                f"crux-run {' '.join(self.overrides())}".rstrip(), "```", "",
                "| option | value | decision | evidence | verdicts |", "|---|---|---|---|---|"]
        rows += [f"| {c.option} | `{c.value!r}` | {c.status} | {c.reason} | {', '.join(c.verdicts)} |"
                 for c in (*self.choices, *self.rejected)]
        budget = fmt_bytes(self.budget_bytes) if self.budget_bytes is not None else "none known"
        return "\n".join(rows + ["", f"Memory budget: {budget}.", ""])

    def as_dict(self) -> dict[str, Any]:
        return {"solve": self.solve_call(), "overrides": self.overrides(), "budget_bytes": self.budget_bytes,
                "capacity": self.capacity,
                "choices": [c.as_dict() for c in self.choices], "rejected": [c.as_dict() for c in self.rejected]}


def advise(verdicts: Verdicts, budget_bytes: int | None, capacity: Mapping[str, Any] | None = None) -> Advice:
    """The advice the ``verdicts.json`` entries support on a device of ``budget_bytes`` of memory (None: it
    reports none, as a CPU does). ``capacity``: the largest batches of the user's own setting that fit, without a
    memory option and with each (:func:`cruxlab.capacity_search.largest_batches`); where given, the memory
    options are decided from it."""
    chosen, rejected = [], []
    for decide in (_inner_steps, _precision):
        choice, others = decide(verdicts)
        chosen.append(choice)
        rejected += others
    memory, others = (_memory(verdicts, budget_bytes) if capacity is None else
                      _by_capacity(_Memory.of(verdicts), capacity))
    chosen += memory
    rejected += others
    order = list(DEFAULTS)
    return Advice(tuple(sorted(chosen, key=lambda c: order.index(c.option))), tuple(rejected), budget_bytes,
                  capacity)


def _inner_steps(verdicts: Verdicts) -> tuple[Decision, list[Decision]]:
    """The fastest K whose speed and identity verdicts both hold; every other K rejected or undecided."""
    faster = {_setting(v): v for v in _prefixed(verdicts, "inner_steps.faster[")}
    identical = {_setting(v): v for v in _prefixed(verdicts, "inner_steps.identical[")}
    shown, rejected, undecided = [], [], []
    for setting, speed in faster.items():
        k = int(speed["evidence"].get("K") or _k_of(setting))
        same = identical.get(setting)
        ids = tuple(v["id"] for v in (speed, same) if v is not None)
        if same is not None and same["verdict"] == FAILS:
            rejected.append(Decision("inner_steps", k, REJECTED, f"inner_steps={k}: not the same numbers as 1: "
                                     f"{same['summary']}", ids))
        elif speed["verdict"] == FAILS:
            rejected.append(Decision("inner_steps", k, REJECTED, f"inner_steps={k}: not faster than 1: "
                                     f"{_speed(speed, 'the time of 1')}", ids))
        elif speed["verdict"] == HOLDS and same is not None and same["verdict"] == HOLDS:
            shown.append((float(speed["evidence"]["time_ratio"]), k, speed, same, ids))
        else:
            word = speed["verdict"] if speed["verdict"] != HOLDS else same["verdict"] if same else "not judged"
            undecided.append(Decision("inner_steps", k, KEPT, f"inner_steps={k}: {word}, not advised "
                                      f"({_undecided(speed, same)})", ids))
    if not shown:
        why = "; ".join(c.reason for c in undecided) or "no fused setting was shown faster with the same numbers"
        return Decision("inner_steps", 1, KEPT, f"inner_steps=1 (the default): {why}",
                        tuple(v["id"] for v in (*faster.values(), *identical.values()))), rejected
    _, k, speed, same, ids = min(shown, key=lambda s: s[0])
    for ratio, other, _, _, other_ids in shown:
        if other != k:
            rejected.append(Decision("inner_steps", other, REJECTED, f"inner_steps={other}: faster too "
                                     f"({fmt(1 / ratio)}×), but less than inner_steps={k}", other_ids))
    return Decision("inner_steps", k, ADVISED, f"inner_steps={k}: {_speed(speed)} than 1, {_sameness(same)} "
                    f"(inner_steps must divide epochs)", ids), rejected + undecided


def _precision(verdicts: Verdicts) -> tuple[Decision, list[Decision]]:
    """``default`` only where it is shown both faster and as accurate as ``highest``."""
    accurate = list(_prefixed(verdicts, "precision.accuracy["))
    faster = list(_prefixed(verdicts, "precision.faster["))
    ids = tuple(v["id"] for v in (*accurate, *faster))
    if not accurate or not faster:
        return Decision("precision", "highest", KEPT, "precision='highest' (the default): the sweep did not measure "
                        "precision='default'", ids), []
    failed = [v for v in accurate if v["verdict"] == FAILS] + [v for v in faster if v["verdict"] == FAILS]
    if failed:
        speed = "; ".join(_speed(v) for v in faster if "time_ratio" in v["evidence"]) or "time not measured"
        error = "; ".join(_error(v) for v in accurate)
        return (Decision("precision", "highest", KEPT, "precision='highest' (the default): 'default' was rejected",
                       ids), [Decision("precision", "default", REJECTED, f"precision='default': {speed}, but "
                                       f"{error}", ids)])
    if all(v["verdict"] == HOLDS for v in (*accurate, *faster)):
        return Decision("precision", "default", ADVISED, f"precision='default': {'; '.join(map(_speed, faster))} "
                        f"than 'highest', {'; '.join(map(_error, accurate))}", ids), []
    findings = {}  # each finding once: on a CPU both verdicts say the same
    for kind, found in (("accuracy", accurate), ("speed", faster)):
        for v in found:
            findings.setdefault(v["summary"], []).append(f"{kind} {v['verdict']}")
    said = "; ".join(f"{' and '.join(kinds)}: {summary}" for summary, kinds in findings.items())
    return Decision("precision", "highest", KEPT, f"precision='highest' (the safe default): 'default' is not shown "
                    f"both faster and as accurate here: {said}", ids), []


@dataclass(frozen=True)
class _Memory:
    """The memory verdicts of an advise sweep and the figures advice weighs (NaN where a verdict lacks one)."""

    saves: Mapping[str, Any] | None
    same: Mapping[str, Any] | None
    cost: Mapping[str, Any] | None
    moves: Mapping[str, Any] | None
    offload_same: Mapping[str, Any] | None
    batch: Mapping[str, Any] | None
    batch_memory: Mapping[str, Any] | None

    @classmethod
    def of(cls, verdicts: Verdicts) -> "_Memory":
        return cls(*(_one(verdicts, f"{name}[") for name in (
            "checkpoint.saves_memory", "checkpoint.same_numbers", "checkpoint.time_cost", "offload.moves_data",
            "offload.same_numbers", "accumulation.effective_batch", "accumulation.memory")))

    @property
    def ids(self) -> dict[str, tuple[str, ...]]:
        return {"checkpoint_gradients": _ids(self.saves, self.same, self.cost),
                "offload_data": _ids(self.moves, self.offload_same), "batchsize": _ids(self.batch, self.batch_memory)}

    @property
    def arguments(self) -> float:
        """The update's arguments with every point on the device (the mini-batch run's: the points, the state)."""
        return _number(self.moves, "argument_bytes_on_device")

    def full_batch(self) -> float:
        return _number(self.saves, "temp_bytes_plain") + self.arguments

    def checkpointed(self) -> float:
        return _number(self.saves, "temp_bytes_checkpointed") + self.arguments

    def time_cost(self) -> str:
        timed = self.cost is not None and "time_ratio" in self.cost["evidence"]
        return f", at {_speed(self.cost, 'the time')}" if timed else ""

    def measured(self) -> str:
        if not _holds(self.saves):
            return "checkpointing saved no memory here"
        return f"checkpointing needs {fmt(_number(self.saves, 'ratio'))}× the temporary memory{self.time_cost()}"


def _memory(verdicts: Verdicts, budget: int | None) -> tuple[list[Decision], list[Decision]]:
    """batchsize, checkpoint_gradients, offload_data: the full batch, plain and on the device, unless its update
    does not fit ``budget``; then the option that makes it fit with the same numbers, else mini-batches."""
    m = _Memory.of(verdicts)
    need = m.full_batch()
    if budget is None or math.isnan(need):
        why = ("this device reports no memory limit (a CPU): give --memory-budget BYTES to weigh the memory options"
               if budget is None else "the sweep lacks the full batch's memory figures")
        return _kept(m, {"batchsize": why, "checkpoint_gradients": f"{why}; {m.measured()}", "offload_data": why}), []
    share = (f"the full batch's update needs about {_bytes(need)} (temporary {_bytes(need - m.arguments)} + "
             f"arguments {_bytes(m.arguments)})")
    if need <= budget:
        fits = f"{share}, {fmt(100 * need / budget)}% of the {_bytes(budget)} budget"
        return _kept(m, {"batchsize": fits, "checkpoint_gradients": f"not needed, {fits}; {m.measured()}",
                         "offload_data": f"not needed, {fits}"}), []
    return _tight(m, budget, f"{share}, over the {_bytes(budget)} budget")


def _tight(m: _Memory, budget: int, over: str) -> tuple[list[Decision], list[Decision]]:
    """Where the full batch does not fit: checkpointing if it makes it fit with the same numbers, else the larger
    measured mini-batch that fits (offloaded where the points alone do not fit)."""
    checkpointed = m.checkpointed()
    if _holds(m.saves) and _holds(m.same) and checkpointed <= budget:
        return [Decision("batchsize", None, KEPT, "batchsize=None (the full batch): it fits checkpointed",
                         m.ids["batchsize"]),
                Decision("checkpoint_gradients", True, ADVISED, f"checkpoint_gradients=True: {over}; checkpointed "
                         f"about {_bytes(checkpointed)} fits, {_sameness(m.same)}{m.time_cost()}",
                         m.ids["checkpoint_gradients"]),
                Decision("offload_data", False, KEPT, "offload_data=False: not needed once checkpointed",
                         m.ids["offload_data"])], []
    rejected = [Decision("checkpoint_gradients", True, REJECTED, "checkpoint_gradients=True: " + (
        f"about {_bytes(checkpointed)} checkpointed, still over the budget" if _holds(m.same) else
        f"not shown to give the same numbers: {(m.same or {}).get('summary', 'no verdict')}"),
        m.ids["checkpoint_gradients"])]
    offload = m.arguments > budget and _holds(m.moves) and _holds(m.offload_same)
    if m.arguments > budget and not offload:
        rejected.append(Decision("offload_data", True, REJECTED, f"offload_data=True: the points take "
                                 f"{_bytes(m.arguments)}, over the budget, but offloading was not shown to move them "
                                 f"off with the same numbers", m.ids["offload_data"]))
    resident = _number(m.moves, "argument_bytes_offloaded") if offload else m.arguments
    batches = {b: _number(m.batch_memory, key) + resident
               for b, key in ((32, "temp_bytes_N_times_B"), (8, "temp_bytes_B"))}
    fitting = [b for b, needs in batches.items() if needs <= budget]
    if not fitting:
        return _kept(m, {"batchsize": f"{over}, and no measured mini-batch fits either (batch 8: about "
                                      f"{_bytes(batches[8])}): a smaller model or problem is needed",
                         "checkpoint_gradients": "it does not make the update fit",
                         "offload_data": "no measured batch fits with it"}), rejected
    b = fitting[0]
    accumulate = (f"; accumulation_steps=N makes an effective batch of N×{b} at this memory "
                  f"({m.batch['summary'].split(';')[0]})" if _holds(m.batch) else "")
    chosen = [Decision("batchsize", b, ADVISED, f"batchsize={b}: {over}; batches of {b} need about "
                       f"{_bytes(batches[b])} (mini-batches train otherwise than the full batch){accumulate}",
                       m.ids["batchsize"]),
              Decision("checkpoint_gradients", False, KEPT, "checkpoint_gradients=False: it does not make the full "
                       "batch fit", m.ids["checkpoint_gradients"])]
    if offload:
        chosen.append(Decision("offload_data", True, ADVISED, f"offload_data=True: the points alone take "
                               f"{_bytes(m.arguments)} on the device, over the budget; offloaded {_bytes(resident)}, "
                               f"{_sameness(m.offload_same)}", m.ids["offload_data"]))
    else:
        chosen.append(Decision("offload_data", False, KEPT, f"offload_data=False: the points take "
                               f"{_bytes(m.arguments)}, within the budget", m.ids["offload_data"]))
    return chosen, rejected


def memory_is_tight(verdicts: Verdicts, budget: int | None) -> bool:
    """Whether the full batch's update, as the advise sweep compiled it, needs more than ``budget`` bytes."""
    return budget is not None and _Memory.of(verdicts).full_batch() > budget


def largest_fitting(capacity: Mapping[str, Any], label: str) -> int | None:
    """The largest batch searched with ``label`` (``plain``, or a memory option) that fits the search's budget;
    None where none did."""
    budget = capacity["budget_bytes"]
    fitting = [t["batch"] for t in capacity["tried"].get(label, ())
               if t["refused"] is None and t["needed"] is not None and t["needed"] <= budget]
    return max(fitting) if fitting else None


def _by_capacity(m: _Memory, capacity: Mapping[str, Any]) -> tuple[list[Decision], list[Decision]]:
    """The memory options from the largest batches that fit, with and without each: the full batch where it fits
    plain; checkpoint_gradients where it makes the full batch fit (with the same numbers); else the largest
    mini-batch that fits, offloaded only where offloading lets a larger batch fit than on the device."""
    full, budget = capacity["full_batch"], capacity["budget_bytes"]
    plain, checkpointed, offloaded = (largest_fitting(capacity, label)
                                      for label in ("plain", "checkpoint_gradients", "offload_data"))
    said = lambda n: "no batch" if n is None else f"{n:,} points"  # noqa: E731
    found = (f"the largest batch that fits {_bytes(budget)}: {said(plain)} a constraint without an option, "
             f"{said(checkpointed)} with checkpoint_gradients, {said(offloaded)} with offload_data (compiled; the "
             f"full batch: {full:,} points)")
    if plain == full:
        return _kept(m, {"batchsize": found, "checkpoint_gradients": f"not needed: {found}",
                         "offload_data": f"not needed: {found}"}), []
    if checkpointed == full and _holds(m.same):
        return [Decision("batchsize", None, KEPT, "batchsize=None (the full batch): it fits checkpointed",
                         m.ids["batchsize"]),
                Decision("checkpoint_gradients", True, ADVISED, f"checkpoint_gradients=True: the full batch fits only "
                         f"with it: {found}; {_sameness(m.same)}{m.time_cost()}", m.ids["checkpoint_gradients"]),
                Decision("offload_data", False, KEPT, "offload_data=False: not needed once checkpointed",
                         m.ids["offload_data"])], []
    rejected = [Decision("checkpoint_gradients", True, REJECTED, "checkpoint_gradients=True: " + (
        f"it does not make the full batch fit: {found}" if checkpointed != full else
        f"not shown to give the same numbers: {(m.same or {}).get('summary', 'no verdict')}"),
        m.ids["checkpoint_gradients"])]
    offload = offloaded is not None and offloaded > (plain or 0) and _holds(m.offload_same)
    if offloaded is not None and offloaded > (plain or 0) and not offload:
        rejected.append(Decision("offload_data", True, REJECTED, f"offload_data=True: a larger batch fits with it, but "
                                 f"it was not shown to give the same numbers: {found}", m.ids["offload_data"]))
    batch = offloaded if offload else plain
    if batch is None:
        return _kept(m, {"batchsize": f"no batch fits: {found}: a smaller model or problem is needed",
                         "checkpoint_gradients": "it does not make the update fit",
                         "offload_data": "no batch fits with it"}), rejected
    chosen = [Decision("batchsize", batch, ADVISED, f"batchsize={batch}: mini-batches, which train otherwise than the "
                       f"full batch: {found}", m.ids["batchsize"]),
              Decision("checkpoint_gradients", False, KEPT, "checkpoint_gradients=False: it does not make the full "
                       "batch fit", m.ids["checkpoint_gradients"])]
    chosen.append(Decision("offload_data", True, ADVISED, f"offload_data=True: it lets batches of {batch:,} points "
                           f"fit, {said(plain)} without it; {_sameness(m.offload_same)}", m.ids["offload_data"])
                  if offload
                  else Decision("offload_data", False, KEPT, f"offload_data=False: it lets no larger batch fit: "
                                f"{found}", m.ids["offload_data"]))
    return chosen, rejected


def _kept(m: _Memory, why: Mapping[str, str]) -> list[Decision]:
    """Every memory option at its default, each with ``why[option]``."""
    return [Decision(option, DEFAULTS[option], KEPT, f"{option}={DEFAULTS[option]}"
                     f"{' (the full batch)' if option == 'batchsize' else ''}: {why[option]}", m.ids[option])
            for option in ("batchsize", "checkpoint_gradients", "offload_data")]


def _bytes(value: float) -> str:
    """A byte count as the report writes it; ``unknown`` where a verdict lacked the figure."""
    return "unknown" if math.isnan(value) else fmt_bytes(value)


def _prefixed(verdicts: Verdicts, prefix: str) -> list[Mapping[str, Any]]:
    return [v for v in verdicts if str(v.get("id", "")).startswith(prefix)]


def _one(verdicts: Verdicts, prefix: str) -> Mapping[str, Any] | None:
    found = _prefixed(verdicts, prefix)
    return found[0] if found else None


def _ids(*verdicts: Mapping[str, Any] | None) -> tuple[str, ...]:
    return tuple(v["id"] for v in verdicts if v is not None)


def _holds(verdict: Mapping[str, Any] | None) -> bool:
    return verdict is not None and verdict["verdict"] == HOLDS


def _number(verdict: Mapping[str, Any] | None, key: str) -> float:
    """A number of the verdict's evidence; NaN where the verdict or the number is missing (or was not finite)."""
    value = (verdict or {}).get("evidence", {}).get(key)
    return float(value) if isinstance(value, (int, float)) else math.nan


def _setting(verdict: Mapping[str, Any]) -> str:
    return str(verdict["id"]).split("[", 1)[1].rstrip("]")


def _k_of(setting: str) -> int:
    found = re.search(r"K=(\d+)", setting)
    if found is None:
        raise ValueError(f"no K= in the fused setting {setting!r}")
    return int(found.group(1))


def _speed(verdict: Mapping[str, Any], of: str = "") -> str:
    """``9.6× faster (9.4–9.8)`` from a timing verdict's ratio and interval (time over the reference's), or,
    with ``of``, ``1.26× the time (1.25–1.27)``."""
    e = verdict["evidence"]
    ratio, low, high = (float(e.get(key, math.nan)) for key in ("time_ratio", "time_ratio_low", "time_ratio_high"))
    if of:
        return f"{fmt(ratio)}× {of} ({fmt(low)}–{fmt(high)})"
    if ratio <= 1:
        return f"{fmt(1 / ratio)}× faster ({fmt(1 / high)}–{fmt(1 / low)})"
    return f"{fmt(ratio)}× the time ({fmt(low)}–{fmt(high)})"


def _sameness(verdict: Mapping[str, Any] | None) -> str:
    evidence = (verdict or {}).get("evidence", {})
    if evidence.get("bit_identical") == 1:
        return "same numbers bit for bit"
    return "the same numbers to round-off (no farther apart than a twin started one ulp away)"


def _error(verdict: Mapping[str, Any]) -> str:
    e = verdict["evidence"]
    if "error_ratio_median" not in e:
        return verdict["summary"]
    return (f"{fmt(float(e['error_ratio_median']))}× the error of 'highest' on this problem (round-off alone moves "
            f"it {fmt(float(e.get('highest_repeats_spread', math.nan)))}×)")


def _undecided(speed: Mapping[str, Any], same: Mapping[str, Any] | None) -> str:
    """Why a fused setting is not decided: the speed verdict's finding (its first clause: the ratio, its interval
    and what kept it open), else the identity verdict's."""
    if speed["verdict"] != HOLDS:
        return speed["summary"].split(";")[0]
    return "identity " + (same["summary"].split(";")[0] if same is not None else "not judged")


def _override_value(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def side_by_side(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """Two recorded advices (``advice.json``: another machine's *before*, this one's *after*) option by option:
    each value on both, and for an option whose value changed the evidence on each side."""
    values = [{c["option"]: c for c in advice["choices"]} for advice in (before, after)]
    width = max(map(len, DEFAULTS))
    lines = [f"{'option':<{width}}  {'before':<10} {'after':<10} changed", f"{'-' * width}  {'-' * 10} {'-' * 10} -------"]
    changed = []
    for option in DEFAULTS:
        was, now = (side.get(option) for side in values)
        shown = [repr(c["value"]) if c is not None else "-" for c in (was, now)]
        moved = shown[0] != shown[1]
        lines.append(f"{option:<{width}}  {shown[0]:<10} {shown[1]:<10} {'yes' if moved else 'no'}")
        if moved:
            changed += [f"{option}, before: {was['reason'] if was else 'not advised on'}",
                        f"{option}, after: {now['reason'] if now else 'not advised on'}"]
    return lines + ["", f"before: {before['solve']}", f"after:  {after['solve']}"] + (["", *changed] if changed else [])
