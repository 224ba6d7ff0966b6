"""crux-advise's decision (cruxlab.report.advice): planted verdicts in verdicts.json's shape in, advice out. A slow
option is not advised, an inexact one is rejected however fast, an inconclusive one stays at its default and the
advice says so; a memory option is advised only where the full batch does not fit the budget and it makes it fit."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from cruxlab.commands import advise as command
from cruxlab.config.settings import group_of
from cruxlab.store import contract
from crux_testing import run_opened, runs_by_role
from test_sweeps import jobs
from cruxlab.report.advice import ADVISED, DEFAULTS, KEPT, REJECTED, advise, side_by_side
from cruxlab.report.verdict import FAILS, HOLDS, INCONCLUSIVE, Verdict


def planted(id: str, verdict: str, summary: str = "planted", **evidence: float) -> dict:
    """One entry of verdicts.json, made by the report's own Verdict."""
    return json.loads(json.dumps(Verdict(id, "a claim", "docs/claims.md#x", "a test", verdict, summary,
                                         evidence).as_dict()))


def timed(ratio: float, low: float, high: float, **more: float) -> dict[str, float]:
    return {"time_ratio": ratio, "time_ratio_low": low, "time_ratio_high": high, **more}


SAME_BITS = {"bit_identical": 1.0}
CPU_ALIKE = "both precisions computed the same loss history to the bit on cpu (2 pair(s))"
PRECISION_ALIKE = [planted("precision.accuracy[precision=default]", INCONCLUSIVE, CPU_ALIKE),
                   planted("precision.faster[precision=default]", INCONCLUSIVE, CPU_ALIKE, **timed(1.0, 0.98, 1.02))]


def fused(k: int, speed: str, same: str, ratio: float, low: float, high: float) -> list[dict]:
    return [planted(f"inner_steps.identical[K={k}]", same, "planted identity", **SAME_BITS),
            planted(f"inner_steps.faster[K={k}]", speed, "planted speed", K=k, **timed(ratio, low, high))]


def chosen(advice, option: str):
    (choice,) = [c for c in advice.choices if c.option == option]
    return choice


def test_the_fastest_setting_shown_faster_with_the_same_numbers_is_advised_with_its_evidence():
    advice = advise(fused(10, HOLDS, HOLDS, 0.5, 0.48, 0.52) + fused(100, HOLDS, HOLDS, 0.104, 0.102, 0.106)
                    + PRECISION_ALIKE, None)
    choice = chosen(advice, "inner_steps")
    assert (choice.value, choice.status) == (100, ADVISED)
    assert "inner_steps=100: 9.62× faster (9.43–9.8) than 1, same numbers bit for bit" in choice.reason
    assert advice.solve_call() == "solver.solve(epochs, inner_steps=100)"
    assert advice.overrides() == ["solver.inner_steps=100"]
    assert [(c.value, c.status) for c in advice.rejected] == [(10, REJECTED)]
    assert "less than inner_steps=100" in advice.rejected[0].reason
    fewer_faster = advise(fused(10, HOLDS, HOLDS, 0.2, 0.19, 0.21) + fused(100, HOLDS, HOLDS, 0.4, 0.38, 0.42), None)
    assert chosen(fewer_faster, "inner_steps").value == 10  # the fastest, not the largest K


def test_a_planted_slow_option_is_not_advised():
    advice = advise(fused(10, FAILS, HOLDS, 1.3, 1.25, 1.35) + PRECISION_ALIKE, None)
    assert (chosen(advice, "inner_steps").value, chosen(advice, "inner_steps").status) == (1, KEPT)
    assert advice.solve_call() == "solver.solve(epochs)" and advice.overrides() == []
    (rejected,) = advice.rejected
    assert rejected.value == 10 and "not faster than 1: 1.3× the time of 1 (1.25–1.35)" in rejected.reason


def test_a_planted_inexact_option_is_rejected_however_fast():
    inexact = fused(10, HOLDS, FAILS, 0.1, 0.09, 0.11)
    inexact[0]["summary"] = "inner_steps=10 departs from the reference"
    less_accurate = [planted("precision.accuracy[precision=default]", FAILS, "27× the error", error_ratio_median=27.0,
                             highest_repeats_spread=1.1),
                     planted("precision.faster[precision=default]", HOLDS, "faster", **timed(0.45, 0.44, 0.46))]
    advice = advise(inexact + less_accurate, None)
    assert chosen(advice, "inner_steps").value == 1 and chosen(advice, "precision").value == "highest"
    reasons = {c.option: c.reason for c in advice.rejected}
    assert all(c.status == REJECTED for c in advice.rejected)
    assert "not the same numbers as 1: inner_steps=10 departs from the reference" in reasons["inner_steps"]
    assert "precision='default': 2.22× faster (2.17–2.27), but 27× the error of 'highest'" in reasons["precision"]
    assert advice.overrides() == []


def test_an_inconclusive_option_stays_at_its_default_and_the_advice_says_so():
    undecided = fused(10, INCONCLUSIVE, HOLDS, 0.97, 0.9, 1.05)
    undecided[1]["summary"] = "undecided on cpu: ratio 0.97 (95% interval 0.9–1.05) takes in both; what decides it: …"
    advice = advise(undecided + PRECISION_ALIKE, None)
    steps, precision = chosen(advice, "inner_steps"), chosen(advice, "precision")
    assert (steps.value, steps.status, precision.value, precision.status) == (1, KEPT, "highest", KEPT)
    assert ("inner_steps=1 (the default): inner_steps=10: inconclusive, not advised (undecided on cpu: ratio 0.97 "
            "(95% interval 0.9–1.05) takes in both)") == steps.reason
    assert "'default' is not shown both faster and as accurate here: accuracy inconclusive and speed inconclusive: " \
        + CPU_ALIKE in precision.reason
    assert advice.overrides() == [] and advice.rejected == ()


def test_an_inconclusive_setting_beside_an_advised_one_is_listed_as_not_advised():
    advice = advise(fused(10, HOLDS, HOLDS, 0.5, 0.48, 0.52) + fused(100, HOLDS, INCONCLUSIVE, 0.1, 0.09, 0.11), None)
    assert chosen(advice, "inner_steps").value == 10
    assert [(c.value, c.status) for c in advice.rejected] == [(100, KEPT)]
    assert "identity planted identity" in advice.rejected[0].reason


def test_default_precision_is_advised_only_where_it_is_shown_faster_and_as_accurate():
    both = [planted("precision.accuracy[precision=default]", HOLDS, "as accurate", error_ratio_median=1.02,
                    highest_repeats_spread=1.3),
            planted("precision.faster[precision=default]", HOLDS, "faster", **timed(0.45, 0.44, 0.46))]
    advice = advise(both, None)
    assert (chosen(advice, "precision").value, chosen(advice, "precision").status) == ("default", ADVISED)
    assert advice.overrides() == ["solver.precision=default"]
    assert "1.02× the error of 'highest' on this problem (round-off alone moves it 1.3×)" in \
        chosen(advice, "precision").reason
    both[1] = planted("precision.faster[precision=default]", INCONCLUSIVE, "undecided", **timed(0.9, 0.8, 1.01))
    kept = chosen(advise(both, None), "precision")
    assert (kept.value, kept.status) == ("highest", KEPT)
    assert kept.reason.endswith("here: accuracy holds: as accurate; speed inconclusive: undecided")
    fast_unknown_error = [planted("precision.accuracy[precision=default]", INCONCLUSIVE, "no exact solution"),
                          planted("precision.faster[precision=default]", HOLDS, "faster", **timed(0.45, 0.44, 0.46))]
    assert chosen(advise(fast_unknown_error, None), "precision").value == "highest"


MEMORY = [planted("checkpoint.same_numbers[checkpoint]", HOLDS, "bit-identical", **SAME_BITS),
          planted("checkpoint.saves_memory[checkpoint]", HOLDS, "saves", temp_bytes_plain=900.0,
                  temp_bytes_checkpointed=500.0, ratio=500 / 900),
          planted("checkpoint.time_cost[checkpoint]", HOLDS, "~30%", **timed(1.3, 1.28, 1.32)),
          planted("offload.same_numbers[offload_b8]", HOLDS, "bit-identical", **SAME_BITS),
          planted("offload.moves_data[offload_b8]", HOLDS, "moves", argument_bytes_on_device=100.0,
                  argument_bytes_offloaded=30.0),
          planted("accumulation.effective_batch[b8_acc4]", HOLDS, "4×8 follows one batch of 32"),
          planted("accumulation.memory[b8_acc4]", HOLDS, "less", temp_bytes_NxB=40.0, temp_bytes_N_times_B=120.0,
                  temp_bytes_B=40.0)]


def memory_choices(budget):
    advice = advise(MEMORY, budget)
    return {c.option: (c.value, c.status) for c in advice.choices if c.option in
            ("batchsize", "checkpoint_gradients", "offload_data")}, advice


@pytest.mark.parametrize("budget", [None, 1000, 10 ** 9])
def test_memory_options_stay_off_where_the_full_batch_fits_or_no_budget_is_known(budget):
    choices, advice = memory_choices(budget)
    assert choices == {"batchsize": (None, KEPT), "checkpoint_gradients": (False, KEPT), "offload_data": (False, KEPT)}
    reason = chosen(advice, "checkpoint_gradients").reason
    assert ("--memory-budget BYTES" in reason) == (budget is None)
    assert budget is None or "not needed, the full batch's update needs about 1,000 bytes" in reason


def test_checkpointing_is_advised_where_it_makes_the_full_batch_fit_and_gives_the_same_numbers():
    choices, advice = memory_choices(700)
    assert choices["checkpoint_gradients"] == (True, ADVISED) and choices["batchsize"] == (None, KEPT)
    assert advice.overrides() == ["memory.checkpoint_gradients=true"]
    assert "checkpointed about 600 bytes fits, same numbers bit for bit, at 1.3× the time (1.28–1.32)" in \
        chosen(advice, "checkpoint_gradients").reason
    choices, advice = memory_choices(550)  # checkpointed (about 600 bytes) still over the budget
    assert choices["checkpoint_gradients"] == (False, KEPT) and choices["batchsize"] == (32, ADVISED)
    assert "about 600 bytes checkpointed, still over the budget" in advice.rejected[0].reason
    inexact = [dict(v, verdict=FAILS) if v["id"].startswith("checkpoint.same_numbers") else v for v in MEMORY]
    advice = advise(inexact, 700)
    assert chosen(advice, "checkpoint_gradients").value is False
    assert [c.option for c in advice.rejected] == ["checkpoint_gradients"]


def test_mini_batches_are_advised_where_nothing_else_fits_and_offloading_where_the_points_do_not():
    choices, advice = memory_choices(300)
    assert choices == {"batchsize": (32, ADVISED), "checkpoint_gradients": (False, KEPT),
                       "offload_data": (False, KEPT)}
    assert "accumulation_steps=N makes an effective batch of N×32" in chosen(advice, "batchsize").reason
    choices, advice = memory_choices(90)
    assert choices == {"batchsize": (8, ADVISED), "checkpoint_gradients": (False, KEPT),
                       "offload_data": (True, ADVISED)}
    assert advice.solve_call() == "solver.solve(epochs, batchsize=8, offload_data=True)"


def test_offloading_that_changes_the_numbers_is_rejected_and_missing_figures_are_said_unknown():
    inexact = [dict(v, verdict=FAILS) if v["id"].startswith("offload.same_numbers") else v for v in MEMORY]
    advice = advise(inexact, 90)
    assert chosen(advice, "offload_data").value is False
    (offload,) = [c for c in advice.rejected if c.option == "offload_data"]
    assert offload.status == REJECTED and "not shown to move them off with the same numbers" in offload.reason
    assert chosen(advice, "batchsize").value is None  # the points stay on the device: no batch fits beside them
    blind = [planted("accumulation.memory[b8_acc4]", INCONCLUSIVE, "temp bytes missing") if
             v["id"].startswith("accumulation.memory") else v for v in MEMORY]
    advice = advise(blind, 300)
    assert chosen(advice, "batchsize").value is None and "(batch 8: about unknown)" in chosen(advice, "batchsize").reason


def test_two_recorded_advices_side_by_side_name_what_changed_with_both_sides_evidence():
    cpu = advise(fused(10, HOLDS, HOLDS, 0.9, 0.86, 0.93) + PRECISION_ALIKE, None).as_dict()
    chip = advise(fused(10, HOLDS, HOLDS, 0.15, 0.14, 0.16) + fused(200, HOLDS, HOLDS, 0.137, 0.136, 0.141), 2 ** 34)
    lines = side_by_side(cpu, chip.as_dict())
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:7]}
    assert rows["inner_steps"] == ["10", "200", "yes"] and rows["precision"] == ["'highest'", "'highest'", "no"]
    assert "after:  solver.solve(epochs, inner_steps=200)" in lines
    assert any(line.startswith("inner_steps, before: inner_steps=10: 1.11× faster") for line in lines)
    assert any(line.startswith("inner_steps, after: inner_steps=200: 7.3× faster") for line in lines)
    assert not any(line.startswith("precision, ") for line in lines)  # unchanged: no evidence lines


def test_no_verdicts_advise_the_defaults():
    advice = advise([], None)
    assert {c.option: c.value for c in advice.choices} == DEFAULTS
    assert all(c.status == KEPT for c in advice.choices) and advice.overrides() == []


@pytest.mark.parametrize("overrides", [["memory.batchsize=8"], ["memory=b8"], ["+timing.budget_seconds=5"],
                                       ["solver.inner_steps=5"], ["solver.epochs=25"], ["backend=jno"],
                                       ["--run", "0123abc"], ["--capacity", "--against", "sqlite:///x.db"]])
def test_crux_advise_refuses_what_it_sets_itself_before_anything_runs(overrides, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit:
        command.main(["problem=heat1d", *overrides])
    assert exit.value.code == 2
    said = capsys.readouterr().err
    assert overrides[0] in said and any(fix in said for fix in ("multiple of 10", "sets the solve() options",
                                                                 "crux-sweep advise backend=jno",
                                                                 "chooses the sweep --against compares",
                                                                 "give one of them"))
    assert list(tmp_path.iterdir()) == []  # no store, no Hydra folder


def test_the_advise_sweep_pairs_every_option_with_the_defaults_and_times_what_it_judges_by_speed():
    composed = {cfg.variant: cfg for cfg in jobs("advise", "solver.epochs=30")}
    assert set(composed) == {"full", "K=10", "K=30", "precision=default", "checkpoint", "b8", "offload_b8", "b32",
                             "b8_acc4"}
    groups = {group_of(cfg) for cfg in composed.values()}
    assert len(groups) == 1  # every setting pairs with every other: they differ only in the options and timing
    timed = {variant: dict(cfg.timing.against) for variant, cfg in composed.items() if cfg.timing.against}
    assert timed == {"K=10": {"inner_steps": 1}, "K=30": {"inner_steps": 1},
                     "precision=default": {"precision": "highest"}, "checkpoint": {"checkpoint_gradients": False}}
    assert command.timed_runs() == 2 * len(timed)  # two repeats of each


@pytest.mark.integration
def test_crux_advise_on_a_small_problem_advises_only_what_its_verdicts_show(tmp_path):
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    done = subprocess.run([sys.executable, "-m", "cruxlab.commands.advise", "--budget", "16", "--out",
                           str(tmp_path / "advice"), "solver.epochs=20", "model.width=8", "model.depth=1",
                           "problem.n_interior=64"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    verdicts = json.loads((tmp_path / "advice" / "verdicts.json").read_text())
    by_id = {v["id"]: v for v in verdicts}
    assert {"inner_steps.faster[K=10]", "inner_steps.identical[K=20]", "precision.accuracy[precision=default]",
            "checkpoint.saves_memory[checkpoint]", "offload.moves_data[offload_b8]",
            "accumulation.effective_batch[b8_acc4]"} <= set(by_id)
    written = json.loads((tmp_path / "advice" / "advice.json").read_text())
    assert written == json.loads(json.dumps(advise(verdicts, None).as_dict()))  # the pure function, on a CPU
    for choice in written["choices"]:
        if choice["status"] == ADVISED:
            assert all(by_id[i]["verdict"] == HOLDS for i in choice["verdicts"]), choice
        else:
            assert choice["value"] == choice["default"], choice
    precision = next(c for c in written["choices"] if c["option"] == "precision")
    if by_id["precision.accuracy[precision=default]"]["verdict"] == INCONCLUSIVE:
        assert precision["value"] == "highest" and "inconclusive" in precision["reason"]
    assert written["solve"] in done.stdout and "measured in" in done.stdout
    client, roles = runs_by_role(tmp_path, "advise")
    (parent,) = roles["parent"]
    assert len(roles["child"]) == 18 and parent.info.status == contract.FINISHED
    logged = client.download_artifacts(parent.info.run_id, "advice.json", str(tmp_path))
    assert json.loads(open(logged).read()) == written
    # the advice recorded there, against itself: every option on both sides, nothing changed
    compared = subprocess.run([sys.executable, "-m", "cruxlab.commands.advise", "--against",
                               f"sqlite:///{tmp_path / 'mlflow.db'}#{parent.info.run_id}"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
    assert compared.returncode == 0, compared.stderr[-3000:]
    table = compared.stdout.split("option")[1].splitlines()[2:7]
    assert [row.split()[0] for row in table] == list(DEFAULTS) and all(row.endswith(" no") for row in table)


@pytest.mark.integration
def test_crux_advise_stopped_by_sigterm_stops_its_sweep_which_closes_every_run(tmp_path):
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    log = tmp_path / "advise.log"
    with open(log, "w") as out:
        advising = subprocess.Popen([sys.executable, "-m", "cruxlab.commands.advise", "--budget", "16",
                                     "solver.epochs=2000", "model.width=8", "model.depth=1", "problem.n_interior=64"],
                                    cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 600
        while not run_opened(env["MLFLOW_TRACKING_URI"], "advise", "0"):  # the sweep's first job has its run
            assert advising.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.05)
        advising.send_signal(signal.SIGTERM)
        status = advising.wait(timeout=600)
    said = log.read_text()
    assert status == 128 + signal.SIGTERM, said[-3000:]
    assert "crux-advise: the sweep was stopped (status 143): no advice" in said
    _, roles = runs_by_role(tmp_path, "advise")
    (parent,) = roles["parent"]
    assert parent.info.status == contract.KILLED
    assert all(run.info.status != contract.RUNNING for run in roles["child"])
    assert not list(tmp_path.glob("reports/advise/*/advice.json"))


@pytest.mark.integration
def test_a_sweep_refused_before_it_runs_leaves_no_advice_and_says_why(tmp_path):
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    done = subprocess.run([sys.executable, "-m", "cruxlab.commands.advise", "problem.n_interor=64"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1
    assert "write problem.n_interior=64" in done.stderr  # the sweep's own refusal, with the fix
    assert "crux-advise: the sweep opened no run (status 1): nothing to advise from" in done.stderr
    assert not (tmp_path / "reports").exists()


def searched(full: int, budget: int, **largest: int | None) -> dict:
    """Planted largest_batches records: for each label (plain, checkpoint_gradients, offload_data) a batch that fits
    at ``largest[label]`` (None: none fits) and one that does not at twice it (or at the full batch)."""
    tried = {}
    for label in ("plain", "checkpoint_gradients", "offload_data"):
        fits = largest.get(label)
        over = min(2 * fits, full) if fits is not None else full
        tried[label] = ([{"batch": fits, "needed": budget, "refused": None}] if fits is not None else []) + \
            ([{"batch": over, "needed": budget + 1, "refused": None}] if over != fits else [])
    return {"budget_bytes": budget, "full_batch": full, "tried": tried}


def capacity_choices(capacity: dict, verdicts: list[dict] = MEMORY):
    advice = advise(verdicts, capacity["budget_bytes"], capacity)
    return {c.option: (c.value, c.status) for c in advice.choices if c.option in
            ("batchsize", "checkpoint_gradients", "offload_data")}, advice


def test_a_memory_option_that_does_not_make_the_setting_fit_is_not_advised():
    choices, advice = capacity_choices(searched(1024, 5000, plain=256, checkpoint_gradients=512, offload_data=256))
    assert choices == {"batchsize": (256, ADVISED), "checkpoint_gradients": (False, KEPT),
                       "offload_data": (False, KEPT)}
    (checkpoint,) = advice.rejected
    assert checkpoint.reason == ("checkpoint_gradients=True: it does not make the full batch fit: the largest batch "
                                 "that fits 5,000 bytes: 256 points a constraint without an option, 512 points with "
                                 "checkpoint_gradients, 256 points with offload_data (compiled; the full batch: "
                                 "1,024 points)")
    assert "it lets no larger batch fit" in chosen(advice, "offload_data").reason
    assert advice.as_dict()["capacity"]["full_batch"] == 1024


def test_a_memory_option_that_makes_the_setting_fit_is_advised_with_its_evidence():
    choices, advice = capacity_choices(searched(1024, 5000, plain=512, checkpoint_gradients=1024, offload_data=512))
    assert choices == {"batchsize": (None, KEPT), "checkpoint_gradients": (True, ADVISED),
                       "offload_data": (False, KEPT)}
    assert chosen(advice, "checkpoint_gradients").reason == (
        "checkpoint_gradients=True: the full batch fits only with it: the largest batch that fits 5,000 bytes: 512 "
        "points a constraint without an option, 1,024 points with checkpoint_gradients, 512 points with offload_data "
        "(compiled; the full batch: 1,024 points); same numbers bit for bit, at 1.3× the time (1.28–1.32)")
    inexact = [dict(v, verdict=FAILS) if v["id"].startswith("checkpoint.same_numbers") else v for v in MEMORY]
    choices, advice = capacity_choices(searched(1024, 5000, plain=512, checkpoint_gradients=1024), inexact)
    assert choices["checkpoint_gradients"] == (False, KEPT) and choices["batchsize"] == (512, ADVISED)
    assert "not shown to give the same numbers" in advice.rejected[0].reason


def test_offloading_is_advised_only_where_it_lets_a_larger_batch_fit():
    choices, advice = capacity_choices(searched(1024, 5000, plain=None, checkpoint_gradients=None, offload_data=128))
    assert choices == {"batchsize": (128, ADVISED), "checkpoint_gradients": (False, KEPT),
                       "offload_data": (True, ADVISED)}
    assert advice.solve_call() == "solver.solve(epochs, batchsize=128, offload_data=True)"
    assert "offload_data=True: it lets batches of 128 points fit, no batch without it" in \
        chosen(advice, "offload_data").reason
    inexact = [dict(v, verdict=FAILS) if v["id"].startswith("offload.same_numbers") else v for v in MEMORY]
    choices, advice = capacity_choices(searched(1024, 5000, offload_data=128), inexact)
    assert choices["offload_data"] == (False, KEPT) and choices["batchsize"] == (None, KEPT)
    assert [c.option for c in advice.rejected] == ["checkpoint_gradients", "offload_data"]


def test_where_the_full_batch_fits_plain_no_memory_option_is_advised():
    choices, advice = capacity_choices(searched(1024, 5000, plain=1024, checkpoint_gradients=1024, offload_data=512))
    assert choices == {"batchsize": (None, KEPT), "checkpoint_gradients": (False, KEPT), "offload_data": (False, KEPT)}
    assert "not needed: the largest batch that fits 5,000 bytes: 1,024 points" in \
        chosen(advice, "checkpoint_gradients").reason


def test_memory_is_tight_only_where_the_full_batch_is_over_the_budget():
    from cruxlab.report.advice import memory_is_tight

    assert [memory_is_tight(MEMORY, budget) for budget in (None, 999, 1000)] == [False, True, False]


def test_the_largest_batches_of_a_users_setting_are_searched_on_its_own_compiled_update():
    """On the configured problem (64 points): a budget one byte short of its full batch's plain update leaves a
    smaller batch as the largest that fits plain, and checkpointing makes the full batch fit exactly where its own
    compiled update needs no more than the budget."""
    import argparse

    from cruxlab.report.advice import largest_fitting

    args = argparse.Namespace(config_dir=None, overrides=["problem.n_interior=64", "model.width=8"])
    probe = command.setting_capacity(args, 10 ** 12)
    assert probe["full_batch"] == 64 and largest_fitting(probe, "plain") == 64
    (full_plain,) = probe["tried"]["plain"]
    budget = full_plain["needed"] - 1
    capacity = command.setting_capacity(args, budget)
    plain = largest_fitting(capacity, "plain")
    assert plain is not None and 64 - 64 // 8 <= plain < 64  # bisected to within an eighth of the full batch
    (checkpointed,) = capacity["tried"]["checkpoint_gradients"][:1]
    assert (largest_fitting(capacity, "checkpoint_gradients") == 64) == (checkpointed["needed"] <= budget)
    assert all(t["batch"] < 64 for t in capacity["tried"]["offload_data"])
