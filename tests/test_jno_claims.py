"""Every claim check on jNO: the jNO job (cruxlab.backends.jno.pipeline_job.train_and_log) run in this process on
tiny problems, its outcome turned into run records as the report reads them from MLflow, and judged.

jNO (the ``jno`` extra) is imported once for the module; each job builds its own
``jno.core``. What jNO does here is measured, so these tests say what jNO 0.4.2 does:
a change in jNO that breaks one of them is a finding for docs/jno.md.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
from hydra import compose, initialize_config_module

os.environ.setdefault("JNO_COMPILE_CACHE", jax.config.jax_compilation_cache_dir)  # conftest's cache, not ~/.cache
pytest.importorskip("jno", reason='the jNO backend needs the jno extra: pip install -e ".[jno]"')

from crux.timing.machine import WALL_TIME  # noqa: E402
from crux.timing.pairs import FIRST_LOOK  # noqa: E402
from cruxlab import config  # noqa: E402
from cruxlab.backends.jno.pipeline_job import train_and_log  # noqa: E402
from cruxlab.config import CONFIG_PACKAGE  # noqa: E402
from cruxlab.config.settings import group_of, phase_calls, solve_options  # noqa: E402
from cruxlab.report import FAILS, HOLDS, INCONCLUSIVE, NO_EFFECT, NOT_SUPPORTED, RunRecord, judge  # noqa: E402
from cruxlab.report.run_records import histories_of, summary_of  # noqa: E402
from cruxlab.store import contract  # noqa: E402

TINY = ["backend=jno", "model.width=8", "model.depth=2", "problem.n_interior=64", "solver.epochs=10",
        "jax.compilation_cache_dir=null"]


class CapturedRun:
    """What train_and_log hands to cruxlab.runtime.JobRun, kept in memory."""

    def __init__(self, folder: Path):
        self.folder, self.tags, self.metrics, self.outcome = folder, {}, {}, None
        self.run_id, self.client, self.series = folder.name, self, {}

    def log_batch(self, run_id, metrics) -> None:  # the paired timing's chunks, as MLflow's client takes them
        for metric in metrics:
            self.series.setdefault(metric.key, []).append(metric.value)

    def log_outcome(self, stats, errors, initial, phase_ends, final) -> None:
        self.outcome = (stats, errors, initial, phase_ends, final)

    def set_tags(self, tags) -> None:
        self.tags.update(tags)

    def log_metrics(self, values) -> None:
        self.metrics.update(values)


def jno_record(tmp_path: Path, run_id: str, *overrides: str, repeat: int = 0) -> RunRecord:
    """Run the jNO job of ``TINY + overrides`` and record it as crux-report would read it back from MLflow."""
    with initialize_config_module(CONFIG_PACKAGE, version_base="1.3"):
        cfg = compose("config", overrides=TINY + list(overrides))
    run = CapturedRun(tmp_path / run_id)
    train_and_log(cfg, run)
    stats, errors, initial, phase_ends, final = run.outcome
    stages = {"initial": initial, **{f"phase{k}": p for k, p in enumerate(phase_ends)}, "final": final}
    snapshots = {f"{when}/{name}/{i}": leaf for when, params in stages.items() for name, leaves in params.items()
                 for i, leaf in enumerate(leaves)}
    options = solve_options(cfg)
    reach = tuple(tuple(sorted(r)) for r in config.problem(cfg).solver().reach) if options.substeps else None
    timing = {key: np.array(values) for key, values in run.series.items()}
    summary = {key: float(values[-1]) for key, values in timing.items()}
    return RunRecord(run_id, options, {**histories_of(stats), **timing}, {**summary_of(stats), **run.metrics,
                                                                          **summary}, snapshots, stats,
                     reach, phase_calls(cfg), group_of(cfg), repeat, int(cfg.roundoff_twin), run_id,
                     {contract.BACKEND: "jno", **run.tags})


def verdict(verdicts, name: str) -> Any:
    found = [v for v in verdicts if v.id == name]
    assert len(found) == 1, [v.id for v in verdicts]
    return found[0]


def test_fused_steps_on_jno_match_unfused_ones_at_the_epochs_jno_reports(tmp_path):
    """jNO reports the last loss of each fused call: the history holds epochs 4 and 9 of 10 at K=5, and the
    identity check compares there, against round-off twins of K=1."""
    records = [jno_record(tmp_path, "k1"), jno_record(tmp_path, "k1_twin", "roundoff_twin=1", repeat=1),
               jno_record(tmp_path, "k5", "solver.inner_steps=5")]
    fused = records[2].histories["loss/total"]
    np.testing.assert_array_equal(np.flatnonzero(np.isfinite(fused)), [4, 9])
    identical = verdict(judge(records, ["inner_steps"]), "inner_steps.identical[K=5]")
    assert identical.verdict == HOLDS, identical.summary


def test_fused_steps_over_micro_batches_on_jno_are_caught_making_one_update_a_call(tmp_path):
    """jNO 0.4.2's accumulation branch runs one optimizer update per pass of its loop, and with inner_steps=K that
    loop makes epochs / K passes: K=5 over 10 epochs updates twice, not ten times (read in jNO's source,
    ``core.solve``; on a CPU and a TPU alike). The identity check sees it against the round-off twins of K=1."""
    micro = ["memory=b8_acc4"]
    records = [jno_record(tmp_path, "k1", *micro), jno_record(tmp_path, "k1_twin", *micro, "roundoff_twin=1", repeat=1),
               jno_record(tmp_path, "k5", *micro, "solver.inner_steps=5")]
    verdicts = judge(records, ["inner_steps"])
    identical = verdict(verdicts, "inner_steps.identical[b8_acc4 K=5]")
    assert identical.verdict == FAILS, identical.summary


def test_fused_steps_on_jno_time_themselves_against_one_update_a_call_on_jnos_loop_clock(tmp_path):
    """A fused jNO job times its own options against timing.against, as a crux job does: chunks of a whole
    number of fused calls, on the wall clock (jNO times its loop on no other), so the report judges the speed-up
    instead of finding nothing timed. How many pairs a budget holds depends on the machine (jNO pays seconds of
    warm-up at every solve() call, whatever its length): what holds on any machine is that the job times two pairs
    at least, stops at a look or before a pair that would overrun its budget, and says how many pairs it took; the
    report judges a first look's pairs and, given fewer, says that the budget was too short."""
    fused = jno_record(tmp_path, "k5", "solver.inner_steps=5", "+timing.against.inner_steps=1",
                       "timing.budget_seconds=10")
    assert fused.tags[contract.TIMING_CLOCK] == WALL_TIME
    assert json.loads(fused.tags[contract.TIMING_AGAINST]) == {"inner_steps": 1}
    chunk, pairs = int(fused.metrics["timing/chunk_epochs"]), len(fused.histories["timing/candidate_seconds"])
    budget, spent = fused.metrics["timing/budget_seconds"], fused.metrics["timing/spent_seconds"]
    assert chunk % 5 == 0 and budget == 10 and pairs >= 2
    # short of the first look only the budget ends a timing, before a pair that would take it past the budget; no
    # pair takes longer than all the timing before it, so such a timing has spent more than half its budget
    assert pairs >= FIRST_LOOK or spent > budget / 2, (pairs, spent)
    reference = jno_record(tmp_path, "k1")
    faster = verdict(judge([reference, fused], ["inner_steps"]), "inner_steps.faster[K=5]")
    assert faster.evidence["K"] == 5 and faster.evidence["seconds_per_update_K1"] > 0, faster.summary
    assert faster.evidence["timed_pairs"] == pairs and faster.evidence["timing_budget_seconds"] == budget
    if pairs < FIRST_LOOK:  # a machine slower than the budget was chosen for: no verdict, and the way out
        assert faster.verdict == INCONCLUSIVE and "raise timing.budget_seconds" in faster.summary, faster.summary


def test_substeps_on_jno_leave_an_unreached_model_bit_identical(tmp_path):
    records = [jno_record(tmp_path, name, "problem=mixed_poisson1d", "optimizer=adamw", f"solver.substeps={plan}")
               for name, plan in (("flux_balance_only", "[[0]]"), ("alternating", "[[0],[1],[2]]"))]
    reached = verdict(judge(records, ["substeps"]), "substeps.reached_only")
    assert reached.verdict == HOLDS, reached.summary
    assert reached.evidence["flux_balance_only/u/bit_identical"] == 1.0


def test_adam_then_lbfgs_then_soap_on_jno_resume_and_each_moves(tmp_path):
    record = jno_record(tmp_path, "phases", "phases=lbfgs_soap", "schedule=warmup_cosine", "schedule.warmup=2",
                        "phases.lbfgs.epochs=3", "phases.soap.epochs=3")
    verdicts = judge([record], ["phases"])
    for name in ("phases.resume", "phases.every_phase_moves", "phases.fresh_optimizer"):
        assert verdict(verdicts, name).verdict == HOLDS, verdict(verdicts, name).summary


def test_checkpointing_and_offloading_on_jno_keep_the_numbers_and_their_memory_is_unmeasured_on_a_cpu(tmp_path):
    """jNO does not expose its compiled update, so there are no compiled memory figures to judge on a CPU."""
    records = [jno_record(tmp_path, "full"), jno_record(tmp_path, "checkpoint", "memory=checkpoint"),
               jno_record(tmp_path, "b8", "memory=b8"), jno_record(tmp_path, "offload_b8", "memory=offload_b8")]
    verdicts = judge(records, ["checkpoint", "offload"])
    for name in ("checkpoint.same_numbers[checkpoint]", "offload.same_numbers[offload_b8]"):
        assert verdict(verdicts, name).verdict == HOLDS, verdict(verdicts, name).summary
    for name in ("checkpoint.saves_memory[checkpoint]", "offload.moves_data[offload_b8]"):
        assert verdict(verdicts, name).verdict == INCONCLUSIVE
        assert "memory/" in verdict(verdicts, name).summary


def test_jno_accumulation_reduces_noise_over_points_and_changes_nothing_over_stacked_samples(tmp_path):
    """The black-box check on jNO's two forms: points= micro-batches average noise away; batchsize= over
    64 * domain draws copies of one sample set (jNO 0.4.2 stacks the same points in every sample), so no draw
    differs from another. The trajectory test, which needs crux's point stream, is not applied."""
    records = [jno_record(tmp_path, f"{memory}_{form}", f"memory={memory}", f"backend.batching={form}",
                          "gradient_draws=32") for form in ("points", "samples") for memory in ("b8", "b8_acc4")]
    verdicts = judge(records, ["accumulation"])
    assert not [v for v in verdicts if v.id.startswith("accumulation.effective_batch")]
    noise = [v for v in verdicts if v.id.startswith("accumulation.noise")]
    by_form = {v.runs[0].split("_")[-1]: v for v in noise}
    assert by_form["points"].verdict == HOLDS, by_form["points"].summary
    assert by_form["samples"].verdict == NO_EFFECT, by_form["samples"].summary
    assert by_form["samples"].evidence["variance_B"] == 0.0


def test_an_option_jno_falls_back_from_or_refuses_is_not_supported_in_its_own_words(tmp_path):
    fallback = jno_record(tmp_path, "full_acc4", "memory.accumulation_steps=4")
    refused = jno_record(tmp_path, "b32_of_16_samples", "memory=b32", "backend.batching=samples", "backend.samples=16")
    assert "has no effect with full-batch training" in fallback.unsupported
    assert "exceeds the number of stacked samples" in refused.unsupported
    assert refused.snapshot("final").tolist() == refused.snapshot("initial").tolist()
    verdicts = judge([fallback, refused], ["accumulation"])
    unsupported = [v for v in verdicts if v.verdict == NOT_SUPPORTED]
    assert {v.runs[0] for v in unsupported} == {"full_acc4", "b32_of_16_samples"}
    assert all(v.summary.startswith("jno: ") for v in unsupported)
    assert FAILS not in {v.verdict for v in verdicts}
