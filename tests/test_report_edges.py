"""Verdicts at the edges of their evidence: a round-off bound applied as the verdict states it, runs that cannot
be told apart, and an unreached model moved by a hair. Records are written by hand, so each case sits exactly
where it should."""
from __future__ import annotations

import numpy as np
import pytest

from cruxlab.report import FAILS, HOLDS, INCONCLUSIVE, RunRecord, SolveOptions
from cruxlab.report.claims import check_accumulation, check_substeps

EPOCHS = 10
ACC, BIG, PLAIN = dict(batchsize=4, accumulation_steps=4), dict(batchsize=16), dict(batchsize=4)


def run(run_id: str, final: float = 1.0, loss_factor: float = 1.0, **options) -> RunRecord:
    """A run of EPOCHS epochs whose three parameters go from 0 to ``final`` and whose loss falls from 2 to 1,
    times ``loss_factor``."""
    return RunRecord(run_id, SolveOptions(epochs=EPOCHS, **options),
                     {"loss/total": np.linspace(2.0, 1.0, EPOCHS) * loss_factor}, {},
                     {"initial/u/0": np.zeros(3), "final/u/0": np.full(3, final)})


def effective_batch(acc: RunRecord, big: RunRecord, plain: RunRecord):
    (verdict,) = [v for v in check_accumulation([acc, big, plain]) if v.id.startswith("accumulation.effective_batch")]
    return verdict


@pytest.mark.parametrize("share, outcome", [(0.5, HOLDS), (3.0, FAILS)])
def test_the_round_off_bound_is_applied_as_the_verdict_states_it(share, outcome):
    """4×4 ends ``share`` times the stated parameter bound away from one batch of 16 (plain batch 4 far off, the
    loss histories equal): within the bound it holds, three times beyond it it fails."""
    plain = run("plain", final=2.0, **PLAIN)
    bound = effective_batch(run("acc", **ACC), run("big", **BIG), plain).thresholds["parameter_distance"].value
    assert 0 < bound < 1e-2
    offset = share * bound / np.sqrt(3)  # the distance of three parameters each moved by ``offset``
    verdict = effective_batch(run("acc", final=1.0 + offset, **ACC), run("big", **BIG), plain)
    assert verdict.verdict == outcome, verdict.summary
    assert verdict.evidence["vs_NxB_batch_parameter_distance"] == pytest.approx(share * bound, rel=1e-6)


def test_a_split_batch_that_cannot_be_told_from_plain_batches_is_inconclusive():
    """4×4, one batch of 16 and plain batch 4 on one trajectory (as when every batch holds all the points): the
    sweep shows nothing about which batch 4×4 trains as."""
    verdict = effective_batch(run("acc", **ACC), run("big", **BIG), run("plain", **PLAIN))
    assert verdict.verdict == INCONCLUSIVE, verdict.summary
    assert "follow one trajectory" in verdict.summary


def test_an_unreached_model_moved_by_a_hair_fails_the_substeps_claim():
    """u, which no constraint of substeps=[[0]] reaches, ends one float32 step from where it started (a change
    np.allclose would call no change): the claim is bit-identical, so it fails."""
    hair = np.nextafter(np.float32(1.0), np.float32(2.0))
    snapshots = {"initial/u/0": np.ones(2, np.float32), "final/u/0": np.array([1.0, hair], np.float32),
                 "initial/q/0": np.zeros(2), "final/q/0": np.ones(2)}
    record = RunRecord("r", SolveOptions(epochs=EPOCHS, substeps=[[0]]), {"loss/total": np.ones(EPOCHS)}, {},
                       snapshots, reach=(("q",), ("q", "u"), ("u",)))
    (verdict,) = [v for v in check_substeps([record]) if v.id.startswith("substeps.reached_only")]
    assert verdict.verdict == FAILS, verdict.summary
    assert "unreached models moved: u in" in verdict.summary
