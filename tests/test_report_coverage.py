"""Verdicts on sound data only, from records alone: an unreadable artifact or a missing repeat makes exactly the
verdicts that need it inconclusive, and every other verdict keeps the value it had."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from cruxlab.report import HOLDS, INCONCLUSIVE, RunRecord, SolveOptions, Sweep, UnreadableArtifact, judge, judge_sound
from cruxlab.report import claims as claim_checks
from cruxlab.report.jobs import account
from cruxlab.store import contract
from crux_testing import mlflow_run as run


def timed(run_id: str, seconds: float, repeat: int, **options) -> RunRecord:
    """A run with a trivial trajectory and a time per update: inner_steps judges both (identity and speed); a
    fused run has timed itself against K=1 in 8 pairs of chunks, K=1 taking 2 s an epoch."""
    histories = {"loss/total": np.linspace(2.0, 1.0, 10)}
    if options.get("inner_steps", 1) > 1:
        histories.update({"timing/candidate_seconds": np.full(8, seconds), "timing/reference_seconds": np.full(8, 2.0),
                          "timing/load1": np.ones(8)})
    return RunRecord(run_id, SolveOptions(epochs=10, **options), histories,
                     {"median_step_seconds": seconds, "compile_seconds": 1.0},
                     {"initial/u/0": np.zeros(2), "final/u/0": np.ones(2)}, repeat=repeat,
                     environment={"backend": "cpu", "device_kind": "cpu"}, variant=f"K={options.get('inner_steps', 1)}")


def fused_sweep() -> list[RunRecord]:
    """K=1 and K=5, three repeats each, K=5 clearly faster: both inner_steps verdicts hold."""
    return ([timed(f"k1-{i}", t, i) for i, t in enumerate((1.9, 2.0, 1.8))] +
            [timed(f"k5-{i}", t, i, inner_steps=5) for i, t in enumerate((1.0, 1.1, 1.2))])


def sweep_of(records: list[RunRecord], jobs=None) -> Sweep:
    return Sweep("inner_steps", "sqlite:///x.db", "1", "parent", {}, records, jobs)


def by_id(verdicts) -> dict[str, dict]:
    return {v.id: v.as_dict() for v in verdicts}


@pytest.mark.parametrize("run, artifact, needs_it", [
    ("k1-0", contract.PARAMS, "inner_steps.identical[K=5]"),  # the reference's final parameters
    ("k5-0", contract.ENVIRONMENT, None),  # the paired timing names its device itself (tag crux.timing.device)
    ("k5-2", contract.PARAMS, None),  # a repeat whose parameters no verdict compares
])
def test_an_unreadable_artifact_makes_only_the_verdict_that_reads_it_inconclusive(run, artifact, needs_it):
    clean = by_id(judge(fused_sweep(), ["inner_steps"]))
    assert {v["verdict"] for v in clean.values()} == {HOLDS}
    records = [replace(r, unreadable={artifact: "BadZipFile: File is not a zip file"}) if r.run_id == run else r
               for r in fused_sweep()]
    broken = by_id(judge_sound(sweep_of(records), ["inner_steps"]))
    assert broken.keys() == clean.keys()
    for claim_id, verdict in broken.items():
        if claim_id == needs_it:
            assert verdict["verdict"] == INCONCLUSIVE
            assert verdict["summary"] == (f"cannot judge: {artifact} of run `{run}` (K={run[1]}) is unreadable: "
                                          f"BadZipFile: File is not a zip file")
        else:
            assert verdict == clean[claim_id]


def test_verdicts_that_use_a_run_with_an_unreadable_config_are_inconclusive_and_others_unchanged():
    """Its config.yaml unreadable, what a run was is not known for sure: every verdict using it is inconclusive."""
    records = fused_sweep() + [timed(f"k2-{i}", 1.5, i, inner_steps=2) for i in range(2)]
    clean = by_id(judge(records, ["inner_steps"]))
    broken_records = [replace(r, unreadable={contract.CONFIG: "ParserError: while parsing a flow sequence"})
                      if r.run_id == "k5-1" else r for r in records]
    broken = by_id(judge_sound(sweep_of(broken_records), ["inner_steps"]))
    using = {claim_id for claim_id, v in clean.items() if "k5-1" in v["runs"]}
    assert using == {"inner_steps.faster[K=5]"}  # a timing repeat (identity compares repeat 0 only)
    for claim_id, verdict in broken.items():
        if claim_id in using:
            assert verdict["verdict"] == INCONCLUSIVE and verdict["evidence"] == {}
            assert "config.yaml of run `k5-1` (K=5) is unreadable: ParserError" in verdict["summary"]
        else:
            assert verdict == clean[claim_id]


def test_verdicts_using_a_setting_that_lacks_a_repeat_are_inconclusive_and_name_the_missing_job():
    """The K=5 timing repeat 2 was killed: the K=5 verdicts judge fewer runs than planned; K=2's are whole."""
    records = [r for r in fused_sweep() if r.run_id != "k5-2"] + [timed(f"k2-{i}", 1.5, i, inner_steps=2)
                                                                  for i in range(2)]
    plan = {n: (f"solver.inner_steps={k}", f"repeat={i}")
            for n, (k, i) in enumerate([(1, 0), (1, 1), (1, 2), (5, 0), (5, 1), (5, 2), (2, 0), (2, 1)])}
    order = ["k1-0", "k1-1", "k1-2", "k5-0", "k5-1", "k5-2", "k2-0", "k2-1"]
    children = [run(r, contract.KILLED if r == "k5-2" else contract.FINISHED, {contract.JOB: str(n)}) for n, r in enumerate(order)]
    jobs = account(run("parent", contract.KILLED), children, len(plan), plan)
    clean = by_id(judge(records, ["inner_steps"]))
    verdicts = by_id(judge_sound(sweep_of(records, jobs), ["inner_steps"]))
    for claim_id, verdict in verdicts.items():
        if claim_id.endswith("[K=5]"):
            assert verdict["verdict"] == INCONCLUSIVE
            assert verdict["summary"].startswith(
                "lacks data: job 5 (solver.inner_steps=5 repeat=2) did not finish (KILLED)")
        else:
            assert verdict == clean[claim_id]


def test_a_check_that_meets_an_unreadable_artifact_it_does_not_handle_is_one_inconclusive_verdict(monkeypatch):
    def careless(records):
        return [records[0].snapshot("final")]

    monkeypatch.setitem(claim_checks.CHECKS, "careless", careless)
    records = [replace(fused_sweep()[0], unreadable={contract.PARAMS: "not logged"})]
    (verdict,) = judge_sound(sweep_of(records), ["careless"])
    assert verdict.id == "careless" and verdict.verdict == INCONCLUSIVE
    assert verdict.summary == "cannot judge: params.npz of run `k1-0` (K=1) is unreadable: not logged"
    with pytest.raises(UnreadableArtifact):
        judge(records, ["careless"])
