"""Whether the problem a sweep ran lets its trajectory verdicts decide: the reference trained, and round-off stayed
round-off.

A verdict that holds two runs to float32 round-off (an option that must make the numbers of another, to round-off)
rests on two facts about the problem, which the sweep measures on its *reference* run (the setting the run under
test must follow) and never on the run under test, so that a broken option cannot make itself unjudgeable:

- **it trained**: the reference's loss/total at the end (the median over the last tenth of its epochs, which
  mini-batch noise does not move much) is at most ``TRAINED_FRACTION`` of its first epoch's, and finite. A run
  whose loss did not fall is no evidence about training, and an optimizer too strong for the problem (plain SGD
  on a loss of 1e4) leaves the loss where it was while the parameters jump about;
- **round-off stays bounded**: round-off twins of the reference (the same job started with every parameter one
  ulp up or down, ``roundoff_twin``) end within the derived bound ``1e3 · eps · sqrt(T) · travel`` of it, in
  parameters and in the loss history. A problem that amplifies round-off (a step size past the edge of
  stability makes training chaotic) carries an ulp to the size of the parameters, and then any two runs part
  as far as anything could, the right option's included.

Twins that stay within the bound prove it on this problem, and it then decides whether or not the loss fell
(a verdict on a reference that did not train says so). Twins that part beyond it, or, in a sweep without twins,
a reference that did not train, leave the bound unproven: a verdict that needs it says ``inconclusive``, names
what failed and the command-line override that would make the sweep decide (a smaller learning rate, fewer
epochs). What stays decisive on such a problem is a departure that no round-off explains: the run ends further
from the reference than the twins do, by ``TWIN_FACTOR`` in parameters and in loss history both.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from cruxlab.report.numerics import ROUNDOFF_ALLOWANCE, TWIN_FACTOR, agreement, roundoff_floor, twin_comparison
from cruxlab.report.run_records import RunRecord
from cruxlab.report.verdict import FAILS, HOLDS, INCONCLUSIVE, fmt

TRAINED_FRACTION = 0.9  # a reference trained when its loss at the end is at most this fraction of its first
LEARNING_RATE = "schedule.value"  # the config key of a constant schedule's learning rate (conf/schedule/)
LR_DIVISOR = 100  # the override offered on a problem that amplifies round-off: the learning rate this much smaller


def logged_losses(history: np.ndarray) -> np.ndarray:
    """The epochs' losses a run logged: a NaN before the last epoch is an epoch whose loss was not logged (jNO
    logs one loss per fused call), not a loss; a NaN at the last epoch is kept, as the loss the run ended with."""
    values = np.asarray(history, np.float64)
    if not values.size or math.isnan(values[-1]):
        return values
    return values[~np.isnan(values)]


def first_loss(history: np.ndarray) -> float:
    """The first loss a run logged; NaN where it logged none."""
    values = logged_losses(history)
    return float(values[0]) if values.size else math.nan


def end_loss(history: np.ndarray) -> float:
    """The loss a run ended with: the median over the last tenth of its logged epochs (at least one), NaN if any
    is not finite."""
    values = logged_losses(history)
    tail = values[-max(len(values) // 10, 1):]
    return float(np.median(tail)) if tail.size and np.all(np.isfinite(tail)) else math.nan


def not_trained(record: RunRecord) -> str:
    """Why ``record`` did not train, in words ('' where it did): its loss/total at the end not at most
    ``TRAINED_FRACTION`` of its first logged epoch's, or not finite."""
    losses = record.histories.get("loss/total", ())
    first, end = first_loss(losses), end_loss(losses)
    return "" if _trained(first, end) else _untrained(record.label, first, end)


def _trained(first: float, end: float) -> bool:
    return math.isfinite(end) and end <= TRAINED_FRACTION * abs(first)


def _untrained(name: str, first: float, end: float) -> str:
    return (f"{name} did not train: its loss/total went from {fmt(first)} to {fmt(end)} (median of the last tenth "
            f"of the epochs), not below {TRAINED_FRACTION:g} of where it started")


@dataclass(frozen=True)
class ProblemCalibration:
    """What the sweep measured of its problem on a reference run and its round-off twins.

    ``first_loss`` and ``end_loss`` are the reference's loss/total at its first epoch and at the end
    (:func:`end_loss`); ``twins`` counts the twins that could be compared; ``twin_in_eps_units`` is the
    farthest twin's final-parameter distance in units of eps·sqrt(T)·travel and ``twin_history_ratio`` its
    largest loss/total difference over the derived history bound (both NaN without twins);
    ``twin_epochs_within`` the epochs before a twin's loss first leaves that bound; ``epochs`` the reference's;
    ``learning_rate`` its configured ``schedule.value`` ('' where the run does not say).
    """

    first_loss: float
    end_loss: float
    twins: int
    twin_in_eps_units: float
    twin_history_ratio: float
    twin_epochs_within: int
    epochs: int
    learning_rate: str = ""

    @property
    def trained(self) -> bool:
        return _trained(self.first_loss, self.end_loss)

    @property
    def amplifies_roundoff(self) -> bool:
        """The twins parted beyond the derived bound (False where there are none to tell)."""
        return self.twins > 0 and not (self.twin_in_eps_units <= ROUNDOFF_ALLOWANCE and self.twin_history_ratio <= 1.0)

    @property
    def calm(self) -> bool:
        """Twins measured it, and they stayed within the derived bound."""
        return self.twins > 0 and not self.amplifies_roundoff

    @property
    def decisive(self) -> bool:
        """The derived bound decides on this problem: twins stayed within it, or, where the sweep has none, the
        reference trained (a loss that falls is the only sign of a step the problem can take that a sweep without
        twins shows)."""
        return self.calm or (self.twins == 0 and self.trained)

    def reasons(self) -> list[str]:
        """What keeps the bound from deciding, in words (empty where it decides)."""
        found = []
        if self.amplifies_roundoff:
            found.append(f"the problem amplifies round-off: a round-off twin of the reference (every parameter one "
                         f"ulp away) ends {fmt(self.twin_in_eps_units)} units of eps·sqrt(T)·travel from it (bound "
                         f"1e3), its loss history {fmt(self.twin_history_ratio)}× the round-off bound"
                         + (f" from epoch {self.twin_epochs_within}" if self.twin_epochs_within < self.epochs else ""))
        if not self.trained:
            found.append(_untrained("the reference", self.first_loss, self.end_loss))
        return found

    def fix(self) -> str:
        """The override that would make the sweep decide, in the user's terms."""
        if not self.amplifies_roundoff and not math.isfinite(self.end_loss):
            return self._smaller_rate("the loss overflowed")
        if self.amplifies_roundoff:
            fewer = (f", or train only the epochs round-off stays bounded: solver.epochs="
                     f"{self.twin_epochs_within}" if 0 < self.twin_epochs_within < self.epochs else "")
            return self._smaller_rate("training that amplifies round-off is a step too large for the problem") + fewer
        return (f"train longer (a larger solver.epochs) or faster (a larger {LEARNING_RATE}), until the loss falls; "
                f"a smaller {LEARNING_RATE} where the loss does not fall because the steps overshoot")

    def _smaller_rate(self, why: str) -> str:
        try:
            smaller = f"{LEARNING_RATE}={float(self.learning_rate) / LR_DIVISOR:g}"
        except ValueError:
            smaller = f"a {LR_DIVISOR}× smaller {LEARNING_RATE}"
        return f"{why}: rerun the sweep with {smaller}"

    def summary(self) -> str:
        """``inconclusive``'s finding: what failed, and the fix."""
        return "; ".join(self.reasons()) + f"; to decide, {self.fix()}"

    def evidence(self) -> dict[str, float]:
        """The calibration's numbers (the twins' only where there are twins)."""
        found = {"reference_first_loss": self.first_loss, "reference_end_loss": self.end_loss,
                 "reference_trained": float(self.trained), "calibration_twins": self.twins}
        if self.twins:
            found.update({"twin_distance_in_eps_sqrtT_travel": self.twin_in_eps_units,
                          "twin_history_difference_over_bound": self.twin_history_ratio,
                          "twin_epochs_within_bound": self.twin_epochs_within})
        return found


def calibrate(reference: RunRecord, twins: Sequence[RunRecord]) -> ProblemCalibration:
    """The calibration of the problem on ``reference`` and its round-off ``twins``. Raises
    :class:`~cruxlab.report.run_records.UnreadableArtifact` where a parameter snapshot cannot be read."""
    losses = np.asarray(reference.histories["loss/total"], np.float64)
    first = first_loss(losses)
    epochs = len(losses)
    distances, ratios, within = [], [], epochs
    for twin in twins:
        if len(twin.histories["loss/total"]) != epochs:
            continue  # a twin that does not line up epoch by epoch calibrates nothing
        a = agreement(twin, reference)
        distances.append(a.in_eps_units if a.travel > 0 else (0.0 if a.distance == 0 else math.inf))
        bound = max(a.history_bound, roundoff_floor(reference.updates))
        differences = np.abs(np.asarray(twin.histories["loss/total"], np.float64) - losses) / np.maximum(
            np.abs(losses), np.finfo(np.float64).tiny)
        differences = np.where(np.isfinite(differences), differences, math.inf)
        ratios.append(float(np.max(differences, initial=0.0)) / bound)
        beyond = np.flatnonzero(differences > bound)
        within = min(within, int(beyond[0]) if beyond.size else epochs)
    worst = lambda values: max((v if math.isfinite(v) else math.inf for v in values), default=math.nan)
    return ProblemCalibration(first, end_loss(losses), len(distances), worst(distances), worst(ratios), within,
                              epochs, reference.params.get(LEARNING_RATE, ""))


def beyond_twins(run: RunRecord, reference: RunRecord, twins: Sequence[RunRecord]) -> str:
    """How ``run`` departs from ``reference`` further than its round-off ``twins`` do, by ``TWIN_FACTOR`` in final
    parameters and in loss history both, in words ('' where it does not, or where no twin lines up): what decides
    on a problem that amplifies round-off, where the derived bound cannot."""
    twin = twin_comparison(run, reference, twins)
    if twin is None:
        return ""
    distance = twin.distance if math.isfinite(twin.distance) else math.inf
    parameters = distance / max(twin.twin_distance, twin.parameter_floor)
    if not (parameters > TWIN_FACTOR and twin.history_ratio > TWIN_FACTOR):
        return ""
    return (f"it ends {fmt(parameters)}× as far from the reference as round-off twins do and its loss history "
            f"parts {fmt(twin.history_ratio)}× as far (bound {fmt(TWIN_FACTOR)}× in both), which no amplified "
            f"round-off explains")


NO_TWINS = ("no round-off twin of the reference in the sweep shows that the bound holds on this problem (repeats "
            "with roundoff_twin: ${repeat} would)")


def calibrated(verdict: str, summary: str, calibration: ProblemCalibration, departs: str = "",
               decisive_anyway: bool = False) -> tuple[str, str]:
    """The verdict the derived round-off bound gave, as far as the problem lets it stand.

    Where the bound decides on this problem (:attr:`ProblemCalibration.decisive`), it stands. Where it does not,
    ``fails`` stands only on evidence that no amplified round-off explains: ``departs`` (the run parts from the
    reference further than the twins do: :func:`beyond_twins`) or ``decisive_anyway`` (the caller's own such
    evidence). Anything else is ``inconclusive``, saying why and how to make the sweep decide, with what the bound
    alone found."""
    if calibration.decisive:
        if calibration.twins == 0 and verdict in (HOLDS, FAILS):
            return verdict, f"{summary}; {NO_TWINS}"
        if not calibration.trained:
            return verdict, f"{summary}; note: {calibration.reasons()[0]}, so this is about the trajectory only"
        return verdict, summary
    if verdict == FAILS and (departs or decisive_anyway):
        return FAILS, f"{summary}; {departs}" if departs else summary
    if calibration.twins == 0 and not calibration.amplifies_roundoff:
        return INCONCLUSIVE, f"{calibration.summary()}, and {NO_TWINS}; the round-off bound alone found: {summary}"
    return INCONCLUSIVE, f"{calibration.summary()}; the round-off bound alone found: {summary}"
