"""crux-report on stores written straight with MlflowClient: which sweep it judges, what it says of an incomplete
one, what a damaged artifact changes, and how it fails on a store it cannot read.

The runs follow docs/CONTRACT.md (tags, params, histories, artifacts) with made-up numbers: two accumulated
settings, 4×8 (against 32 and 8) and 2×4 (against 8 and 4), whose effective-batch and memory verdicts all hold.
Nothing trains, so every test here takes seconds.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pytest
from hydra import compose, initialize_config_module
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from crux.stats import Statistics
from cruxlab.config import CONFIG_PACKAGE, effective_settings
from cruxlab.config.settings import configuration
from cruxlab.report import HOLDS, INCONCLUSIVE, load_sweep, main
from cruxlab.report.sweep_reader import config_from_params
from cruxlab.store import contract
from cruxlab.store.connection import HTTP_LIMITS, StoreError, writable_store
from cruxlab.store.params import flatten
from crux_testing import planned_job_configs, selected

EPOCHS = 20
T0 = 1_780_000_000_000  # start of the first sweep, ms since the epoch (2026-05-28 20:26:40 UTC)
# batchsize, accumulation_steps -> final parameters (all start at 1), loss/total history, compiled temp bytes.
# N×B ends where one batch of N·B does, plain B elsewhere: both effective-batch verdicts hold, and
# temp_bytes(N×B) < temp_bytes(N·B): both memory verdicts hold.
SETTINGS = {(32, 1): (3.0, 1.0, 300), (8, 4): (3.0, 1.0, 100), (8, 1): (2.0, 1.2, 80), (4, 2): (2.0, 1.2, 50),
            (4, 1): (1.5, 1.4, 40)}


def variant(batchsize: int, steps: int) -> str:
    return f"b{batchsize}" + (f"_acc{steps}" if steps > 1 else "")


@pytest.fixture(scope="module")
def base_config():
    """The accumulation sweep's resolved job config, shortened; each job changes only its memory."""
    with initialize_config_module(CONFIG_PACKAGE, version_base="1.3"):
        return compose("config", overrides=selected("accumulation") + [f"solver.epochs={EPOCHS}", "model.width=8",
                                                                       "memory=b8"])


class SweepWriter:
    """Logs sweeps as crux-sweep would: a parent with its plan, then a child run per job attempt."""

    def __init__(self, folder: Path, base_config):
        self.uri = f"sqlite:///{folder / 'mlflow.db'}"
        self.client = MlflowClient(self.uri)
        self.folder, self.base = folder, base_config
        self.experiment = self.client.create_experiment("accumulation", (folder / "mlartifacts").as_uri())

    def parent(self, jobs: list[tuple[int, int, int]], started: int, plan: bool = True) -> str:
        """A parent run planning ``jobs`` (batchsize, accumulation_steps, repeat), left RUNNING."""
        tags = {contract.SWEEP: "accumulation", contract.CLAIM: "N×B is a batch of N·B", contract.ROLE: contract.PARENT,
                contract.OVERRIDES: f"+sweeps=accumulation solver.epochs={EPOCHS}"}
        if plan:
            tags[contract.PLANNED_JOB_COUNT] = str(len(jobs))
        parent = self.client.create_run(self.experiment, start_time=started, tags=tags).info.run_id
        if plan:
            entries = [{"job": n, "overrides": ["+sweeps=accumulation", f"memory.batchsize={b}",
                                                f"memory.accumulation_steps={a}", f"repeat={r}"]}
                       for n, (b, a, r) in enumerate(jobs)]
            path = self.folder / contract.PLANNED_JOBS
            path.write_text(json.dumps(entries))
            self.client.log_artifact(parent, str(path))
        return parent

    def job(self, parent: str, number: int, batchsize: int, steps: int, repeat: int, started: int,
            status: str = contract.FINISHED, error: str | None = None) -> str:
        """One attempt of job ``number``; a FINISHED one has everything crux-run logs."""
        cfg = self.base.copy()
        cfg.memory.batchsize, cfg.memory.accumulation_steps, cfg.repeat = batchsize, steps, repeat
        tags = {contract.PARENT_ID: parent, contract.SWEEP: "accumulation", contract.ROLE: contract.CHILD,
                contract.JOB: str(number), contract.VARIANT: variant(batchsize, steps), contract.REPEAT: str(repeat)}
        run_id = self.client.create_run(self.experiment, start_time=started, tags=tags).info.run_id
        self.client.log_batch(run_id, params=[Param(k, v) for k, v in flatten(effective_settings(cfg)).items()])
        folder = self.folder / run_id
        folder.mkdir()
        (folder / contract.CONFIG).write_text(OmegaConf.to_yaml(cfg, resolve=True))
        (folder / contract.ENVIRONMENT).write_text(json.dumps({"backend": "cpu", "cpu": "test CPU"}))
        self.client.log_artifact(run_id, str(folder / contract.CONFIG))
        self.client.log_artifact(run_id, str(folder / contract.ENVIRONMENT))
        if status == contract.FINISHED:
            final, last_loss, temp_bytes = SETTINGS[(batchsize, steps)]
            history = np.linspace(2.0, last_loss, EPOCHS)
            metrics = [Metric("loss/total", float(v), started, step) for step, v in enumerate(history)]
            metrics += [Metric("memory/temp_bytes", temp_bytes, started, 0),
                        Metric("median_step_seconds", 1e-3, started, 0)]
            metrics += [Metric(key, value, started, 0) for key, value in gradient_noise(batchsize, steps).items()]
            self.client.log_batch(run_id, metrics=metrics)
            np.savez(folder / contract.PARAMS, **{"initial/u/0": np.ones(4), "final/u/0": np.full(4, final)})
            losses = np.stack([history, np.zeros(EPOCHS)], axis=1)
            Statistics(["pde", "bc"], losses, np.arange(EPOCHS), phases=[0]).save(folder / contract.STATS)
            self.client.log_artifact(run_id, str(folder / contract.PARAMS))
            self.client.log_artifact(run_id, str(folder / contract.STATS))
        if error:
            self.client.set_tag(run_id, contract.ERROR_TYPE, error.split(":")[0])
            self.client.set_tag(run_id, contract.ERROR_MESSAGE, error.split(": ", 1)[1])
        if status != contract.RUNNING:
            self.client.set_terminated(run_id, status, end_time=started + 1000)
        return run_id

    def artifact(self, run_id: str, name: str) -> Path:
        return Path(urlparse(self.client.get_run(run_id).info.artifact_uri).path) / name


def gradient_noise(batchsize: int, steps: int) -> dict[str, float]:
    """The spread of first-update gradients as a job with gradient_draws logs it, from 1024 interior points and 2
    boundary points (in every batch): 1/B for plain B, and for N×B the 1024-point constraint's factor
    (1/N)(1024 - N·B)/(1024 - B) times that (0.244 for 4×8, 0.498 for 2×4), within 2% standard errors, so both
    noise verdicts hold."""
    factor = (1024 - steps * batchsize) / (steps * (1024 - batchsize)) if steps > 1 else 1.0
    variance = factor / batchsize
    return {"gradient_noise/variance": variance, "gradient_noise/standard_error": 0.02 * variance,
            "gradient_noise/mean_norm": 1.0, "gradient_noise/draws": 64.0, "gradient_noise/population": 1024.0,
            "gradient_noise/items/pde": 1024.0, "gradient_noise/items/bc": 2.0}


COMPLETE_JOBS = [(32, 1, 0), (8, 4, 0), (8, 1, 0), (4, 2, 0), (4, 1, 0)]


def complete_sweep(writer: SweepWriter, started: int = T0) -> tuple[str, dict[str, str]]:
    """Every planned job FINISHED, the parent FINISHED: returns the parent and the run of each variant."""
    parent = writer.parent(COMPLETE_JOBS, started)
    runs = {variant(b, a): writer.job(parent, n, b, a, r, started + 1000 * (n + 1))
            for n, (b, a, r) in enumerate(COMPLETE_JOBS)}
    writer.client.set_terminated(parent, contract.FINISHED, end_time=started + 10_000)
    return parent, runs


def interrupted_sweep(writer: SweepWriter, started: int) -> str:
    """Seven planned jobs (every setting, plus repeats 1 and 2 of plain 4): job 2 failed and was run again, the
    sweep was interrupted during job 5 (KILLED) and job 6 never started; the parent KILLED."""
    jobs = COMPLETE_JOBS + [(4, 1, 1), (4, 1, 2)]
    parent = writer.parent(jobs, started)
    at = iter(range(started + 1000, started + 100_000, 1000))
    for n, (b, a, r) in enumerate(jobs[:5]):
        if n == 2:
            writer.job(parent, n, b, a, r, next(at), contract.FAILED, "FloatingPointError: loss is nan at epoch 3")
        writer.job(parent, n, b, a, r, next(at))
    writer.job(parent, 5, 4, 1, 1, next(at), contract.KILLED, "KeyboardInterrupt: ")
    writer.client.set_terminated(parent, contract.KILLED, end_time=started + 100_000)
    return parent


@pytest.fixture
def writer(store, base_config) -> SweepWriter:
    return SweepWriter(store, base_config)


def report(writer: SweepWriter, out: Path, monkeypatch, *extra: str) -> tuple[int, str, dict[str, dict]]:
    """crux-report accumulation on the writer's store: (exit code, report.md, verdicts by id)."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", writer.uri)
    code = main(["accumulation", "--out", str(out), *extra])
    verdicts = json.loads((out / "verdicts.json").read_text())
    # The black-box check (accumulation.noise) reads gradient draws, which these made-up runs do not have; its
    # own tests are in test_gradient_noise.py.
    return code, (out / "report.md").read_text(), {v["id"]: v for v in verdicts if v["id"] != "accumulation.noise"}


def test_default_report_judges_the_newest_complete_sweep_and_names_the_newer_incomplete_one(
        writer, tmp_path, monkeypatch, capsys):
    complete, _ = complete_sweep(writer)
    newer = interrupted_sweep(writer, T0 + 3_600_000)
    code, text, verdicts = report(writer, tmp_path / "r", monkeypatch)
    assert code == 0
    assert text.splitlines()[2] == (f"Sweep `accumulation`, parent run `{complete}`, started 2026-05-28 20:26:40 "
                                    f"UTC: complete: 5 of 5 planned jobs finished.")
    assert (f"Newer sweeps of `accumulation` in this store: `{newer}` (started 2026-05-28 21:26:40 UTC, incomplete: 5 "
            f"of 7 jobs finished, parent KILLED).") in text
    # 2 accumulated settings, each with effective batch, memory and noise verdicts
    assert {v["verdict"] for v in verdicts.values()} == {HOLDS} and len(verdicts) == 6
    printed = capsys.readouterr().out
    assert f"newer sweeps of accumulation, passed over as incomplete: {newer}" in printed
    chosen = report(writer, tmp_path / "chosen", monkeypatch, "--run", complete)
    assert chosen[:2] == (code, text)  # the same sweep, the same report, however it was chosen


def test_report_of_an_incomplete_sweep_says_so_at_the_top_and_exits_3(writer, tmp_path, monkeypatch):
    """The 2×4 setting's plain partner lacks two of its repeats: its verdicts are inconclusive; 4×8's hold."""
    complete_sweep(writer)
    newer = interrupted_sweep(writer, T0 + 3_600_000)
    code, text, verdicts = report(writer, tmp_path / "r", monkeypatch, "--run", newer)
    assert code == 3
    lines = text.splitlines()
    assert lines[2] == (f"Sweep `accumulation`, parent run `{newer}`, started 2026-05-28 21:26:40 UTC: **incomplete: "
                        f"5 of 7 planned jobs finished, and its parent run is KILLED.**")
    killed = load_sweep("accumulation", newer, writer.uri).missing[0].run_id
    assert lines[4:9] == ["Jobs without a finished run (verdicts that lack their runs are inconclusive):", "",
                          "| job | status | why | run |", "|---|---|---|---|",
                          f"| job 5 (memory.batchsize=4 memory.accumulation_steps=1 repeat=1) | KILLED | "
                          f"interrupted (KeyboardInterrupt) | `{killed}` |"]
    assert lines[9] == ("| job 6 (memory.batchsize=4 memory.accumulation_steps=1 repeat=2) | never started | no run: "
                        "the sweep stopped before this job started |  |")
    assert "FloatingPointError" not in text  # job 2 failed once, then finished: nothing is missing there
    assert verdicts["accumulation.effective_batch[b8_acc4]"]["verdict"] == HOLDS
    assert verdicts["accumulation.memory[b8_acc4]"]["verdict"] == HOLDS
    for claim_id in ("accumulation.effective_batch[b4_acc2]", "accumulation.memory[b4_acc2]"):
        assert verdicts[claim_id]["verdict"] == INCONCLUSIVE
        assert verdicts[claim_id]["summary"] == (
            "lacks data: job 5 (memory.batchsize=4 memory.accumulation_steps=1 repeat=1) did not finish (KILLED); "
            "job 6 (memory.batchsize=4 memory.accumulation_steps=1 repeat=2) did not finish (never started)")
    again = report(writer, tmp_path / "again", monkeypatch, "--run", newer)
    assert again[1] == text  # the same runs give the same bytes
    assert (tmp_path / "again" / "verdicts.json").read_bytes() == (tmp_path / "r" / "verdicts.json").read_bytes()


def test_with_no_complete_sweep_the_newest_is_judged_and_called_incomplete(writer, tmp_path, monkeypatch, capsys):
    interrupted_sweep(writer, T0)
    newest = interrupted_sweep(writer, T0 + 3_600_000)
    code, text, _ = report(writer, tmp_path / "r", monkeypatch)
    assert code == 3
    assert "no sweep of accumulation is complete: judged the newest" in capsys.readouterr().out
    assert f"parent run `{newest}`" in text.splitlines()[2] and "**incomplete: 5 of 7" in text
    assert "Newer sweeps" not in text


def test_a_sweep_stopped_before_its_first_job_is_reported_with_every_job_missing(writer, tmp_path, monkeypatch):
    parent = writer.parent(COMPLETE_JOBS, T0)
    writer.client.set_terminated(parent, contract.KILLED)
    code, text, verdicts = report(writer, tmp_path / "r", monkeypatch)
    assert code == 3
    assert "**incomplete: 0 of 5 planned jobs finished, and its parent run is KILLED.**" in text
    assert text.count("| never started | no run: the sweep stopped before this job started |") == 5
    assert [v["verdict"] for v in verdicts.values()] == [INCONCLUSIVE]


def test_a_sweep_that_recorded_no_plan_counts_the_jobs_that_started(writer, tmp_path, monkeypatch):
    parent = writer.parent(COMPLETE_JOBS, T0, plan=False)
    for n, (b, a, r) in enumerate(COMPLETE_JOBS[:4]):
        writer.job(parent, n, b, a, r, T0 + n)
    writer.job(parent, 4, 4, 1, 0, T0 + 5, contract.FAILED, "ValueError: epochs must be >= 1, got 0")
    writer.client.set_terminated(parent, contract.FAILED)
    code, text, verdicts = report(writer, tmp_path / "r", monkeypatch)
    assert code == 3
    assert "**incomplete: 4 of the 5 jobs that started finished (the sweep recorded no plan), and its parent run " \
           "is FAILED.**" in text
    assert "| job 4 (b4) | FAILED | ValueError: epochs must be >= 1, got 0 |" in text
    assert verdicts["accumulation.effective_batch[b8_acc4]"]["verdict"] == HOLDS


def truncate(path: Path) -> str:
    path.write_bytes(path.read_bytes()[:100])
    return "BadZipFile: File is not a zip file"


def flip_a_data_byte(path: Path) -> str:
    data = bytearray(path.read_bytes())
    data[data.index(b"final/u/0.npy") - 40] ^= 0xFF  # within the initial/u/0 array's data, covered by its CRC
    path.write_bytes(bytes(data))
    return "BadZipFile: Bad CRC-32 for file 'initial/u/0.npy'"


def remove(path: Path) -> str:
    path.unlink()
    return "not logged"


@pytest.fixture(scope="module")
def clean_sweep(tmp_path_factory, empty_store, base_config) -> tuple[SweepWriter, dict[str, str], dict[str, dict]]:
    """One complete sweep, its runs by variant and its report's verdicts, shared by the damaged-artifact cases:
    each damages one artifact and puts it back, so writing the sweep and its clean report happen once."""
    folder = tmp_path_factory.mktemp("clean_sweep")
    shutil.copy(empty_store, folder / "mlflow.db")
    writer = SweepWriter(folder, base_config)
    _, runs = complete_sweep(writer)
    with pytest.MonkeyPatch.context() as monkeypatch:
        _, _, clean = report(writer, folder / "clean", monkeypatch)
    return writer, runs, clean


@pytest.mark.parametrize("run, artifact, damage, needed_by", [
    # the batch-32 run is the big batch of 4×8 only (its gradient spread beside the noise verdict, not in it)
    ("b32", contract.PARAMS, truncate, {"accumulation.effective_batch[b8_acc4]"}),
    ("b32", contract.PARAMS, flip_a_data_byte, {"accumulation.effective_batch[b8_acc4]"}),
    ("b32", contract.CONFIG, lambda path: path.write_text("solver: [unclosed\n") and "ParserError",
     {"accumulation.effective_batch[b8_acc4]", "accumulation.memory[b8_acc4]", "accumulation.noise[b8_acc4]"}),
    ("b32", contract.STATS, remove, set()),  # no check reads it: phase boundaries come from the config as well
    ("b32", contract.ENVIRONMENT, lambda path: path.write_text('{"backend": ') and "JSONDecodeError", set()),
    # 4×8's own parameters: its trajectory and its spread's round-off floor read them, its memory does not
    ("b8_acc4", contract.PARAMS, truncate, {"accumulation.effective_batch[b8_acc4]", "accumulation.noise[b8_acc4]"}),
])
def test_a_damaged_artifact_makes_only_the_verdicts_that_need_it_inconclusive(
        clean_sweep, tmp_path, monkeypatch, run, artifact, damage, needed_by):
    """Every verdict id stays; those that do not read the damaged artifact keep their value; 2×4's never read
    the runs damaged here."""
    writer, runs, clean = clean_sweep
    assert {v["verdict"] for v in clean.values()} == {HOLDS} and len(clean) == 6
    path = writer.artifact(runs[run], artifact)
    kept = path.read_bytes()
    try:
        problem = damage(path)
        code, text, broken = report(writer, tmp_path / "broken", monkeypatch)
    finally:
        path.write_bytes(kept)  # whole again for the next case
    assert code == 3
    named = [line for line in text.splitlines() if line.startswith(f"- {artifact} of run `{runs[run]}` ({run} r0): ")]
    assert len(named) == 1 and problem in named[0], text[:2000]
    assert broken.keys() == clean.keys()
    for claim_id, verdict in broken.items():
        if claim_id in needed_by:
            assert verdict["verdict"] == INCONCLUSIVE
            assert f"{artifact} of run `{runs[run]}` ({run}" in verdict["summary"] and problem in verdict["summary"]
        else:
            assert verdict == clean[claim_id]


def test_finished_runs_whose_artifacts_are_all_gone_are_said_elsewhere_once_for_the_sweep(writer, tmp_path, monkeypatch,
                                                                                            capsys):
    """A FINISHED run wrote its artifacts before closing: none of them in its artifact store is not "not logged"
    but an artifact store that lost them or a server that keeps another artifact root now (restarted with one).
    Said in one line for the sweep (how many runs, the parent's plan among them, the root their URIs lie under,
    what to do), in the report and on the console, not once per run and artifact."""
    complete_sweep(writer)
    shutil.rmtree(writer.folder / "mlartifacts")  # the parent's plan goes too
    code, text, verdicts = report(writer, tmp_path / "r", monkeypatch)
    assert code == 3
    root = (writer.folder / "mlartifacts").as_uri()
    said = [line for line in text.splitlines() if "artifact root" in line]
    assert said == [f"**6 runs of the sweep (its parent run among them) wrote their artifacts before closing, but "
                    f"none of them is under {root} now: the artifact store lost them, or its server keeps another artifact root now (started "
                    f"again with another --artifacts-destination); verdicts that need them are inconclusive. Serve "
                    f"the root they were written to again (`bash scripts/mlflow_server.sh restart DIR` restarts a "
                    f"server on its own root) and run crux-report again.**"], text[:3000]
    assert "could not be read" not in text and "not logged" not in text
    printed = capsys.readouterr().out
    assert [line for line in printed.splitlines() if "artifact root" in line] == [said[0].strip("*.")], printed
    assert {v["verdict"] for v in verdicts.values()} == {INCONCLUSIVE}


def test_a_run_neither_config_nor_params_describe_is_left_out_and_named(writer, tmp_path, monkeypatch):
    _, runs = complete_sweep(writer)
    writer.artifact(runs["b4"], contract.CONFIG).write_text("")
    writer.client.log_param(runs["b4"], "solver.bogus", "1")  # params are immutable: add one the schema refuses
    code, text, verdicts = report(writer, tmp_path / "r", monkeypatch)
    assert code == 3
    (line,) = [line for line in text.splitlines() if line.startswith("- config.yaml")]
    assert line.startswith(f"- config.yaml of run `{runs['b4']}` (b4 r0): MissingMandatoryValue: ")
    assert "; its params do not give a configuration either (ConfigKeyError: " in line
    assert line.endswith("; the run is left out")
    assert runs["b4"] not in {run for v in verdicts.values() for run in v["runs"]}


def test_params_give_back_the_configuration_of_every_job_of_every_sweep(hydra_configs):
    """A run whose config.yaml is unreadable is placed by its params (what crux-run logs: the settings the job
    ran with, unset values left out): they must give what the checks read from config.yaml, i.e. the same solve
    options, phases, pairing group and round-off twin (lists such as substeps, nested phases, None, floats in
    exponent form)."""
    for name, job, cfg in planned_job_configs():
        logged = flatten(effective_settings(cfg))
        assert comparable(configuration(config_from_params(logged))) == comparable(configuration(cfg)), (name, job)


def comparable(configured: dict) -> dict:
    """A configuration with each phase's schedule (a function) as the learning rates it gives."""
    phases = [(p.epochs, p.optimizer, p.fresh, np.asarray(p.schedule(np.arange(p.epochs))).tolist())
              for p in configured["phases"]]
    return {**configured, "phases": phases}


# -- a store that cannot be read ---------------------------------------------------------------------------------
def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("damage, says", [
    (lambda db: db.write_bytes(np.random.default_rng(0).bytes(64 * 1024)), "(DatabaseError: file is not a database)"),
    (lambda db: db.write_bytes(db.read_bytes()[:8192]), "(DatabaseError: database disk image is malformed)"),
    (lambda db: db.write_bytes(b""), "(OperationalError: no such table: alembic_version)"),
])
def test_a_corrupt_store_is_one_line_and_exit_2_and_is_left_as_it_was(writer, tmp_path, monkeypatch, capsys,
                                                                       damage, says):
    complete_sweep(writer)
    db = Path(writer.uri[len("sqlite:///"):])
    damage(db)
    before = digest(db)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", writer.uri)
    assert main(["accumulation", "--out", str(tmp_path / "r")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (f"crux-report: {writer.uri} is not a readable MLflow store {says}: point MLFLOW_TRACKING_URI / "
                    f"--tracking-uri at the store your sweeps logged to, or restore the file from a backup")
    assert digest(db) == before and not (tmp_path / "r").exists()


def test_an_unknown_run_id_is_one_line_naming_the_sweeps_there(writer, tmp_path, monkeypatch, capsys):
    complete, runs = complete_sweep(writer)
    before = digest(Path(writer.uri[len("sqlite:///"):]))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", writer.uri)
    assert main(["accumulation", "--run", "0123456789abcdef", "--out", str(tmp_path / "r")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (f"crux-report: no run 0123456789abcdef at {writer.uri}; the newest sweeps of 'accumulation' "
                    f"there: {complete} (2026-05-28 20:26:40 UTC, FINISHED). Pass one of them to --run, or leave "
                    f"--run out for the newest complete sweep")
    assert main(["accumulation", "--run", runs["b8"], "--out", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err == (f"crux-report: run {runs['b8']} is a job of the sweep {complete}: "
                                       f"pass --run {complete}\n")
    assert digest(Path(writer.uri[len("sqlite:///"):])) == before


def test_a_tracking_server_that_is_down_is_given_up_after_crux_s_bounded_retries(tmp_path, monkeypatch, capsys):
    """MLflow alone retries a refused connection 7 times with a backoff of 2 s doubling (about 4 minutes);
    crux-report and crux-sweep's store check each try 1 + HTTP_LIMITS' retries, then give up."""
    import urllib3.connection

    for variable in HTTP_LIMITS:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
    attempts = []
    connect = urllib3.connection.HTTPConnection._new_conn
    monkeypatch.setattr(urllib3.connection.HTTPConnection, "_new_conn",
                        lambda self: attempts.append(self.port) or connect(self))
    tries = 1 + int(HTTP_LIMITS["MLFLOW_HTTP_REQUEST_MAX_RETRIES"])
    assert main(["accumulation", "--out", str(tmp_path / "r")]) == 2
    assert attempts == [9] * tries
    with pytest.raises(StoreError, match="the tracking server at http://127.0.0.1:9 did not answer"):
        writable_store("http://127.0.0.1:9")
    assert attempts == [9] * 2 * tries
    (line,) = capsys.readouterr().err.splitlines()
    assert line == ("crux-report: the tracking server at http://127.0.0.1:9 did not answer ([Errno 111] Connection "
                    "refused): start it, or point MLFLOW_TRACKING_URI / --tracking-uri at a running one")
