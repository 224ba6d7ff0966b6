"""crux-report NAME --against, end to end: real (small) sweeps through crux-sweep into SQLite files, a packed store
and an MLflow server, compared through the console entry points; and the README's table made from the stores.

Defects are planted through a problem of one's own (tests/planted_problems.py: a solver's machinery), so the
sweeps run, log and are read back exactly as any other.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest
from mlflow.tracking import MlflowClient

from cruxlab.report import FAILS, HOLDS, main
from cruxlab.report import results
from cruxlab.report.changes import INTERVALS, VERDICT
from cruxlab.store import contract
from crux_testing import pack
from mlflow_server import mlflow_server

pytestmark = pytest.mark.integration  # runs sweeps in subprocesses and an MLflow server

TESTS = Path(__file__).resolve().parent
ACCUMULATION = ["solver.epochs=20", "model.width=8", "problem.n_interior=64", "memory=b8,b32,b8_acc4", "repeat=0",
                "gradient_draws=16"]
# Fused calls of 10 updates against single updates; a step costly enough (32 wide, 512 points) that running a fused
# call's updates four times (planted_problems.slowed_fused_loop) shows in its time.
INNER_STEPS = ["memory=full", "solver.inner_steps=1,10", "repeat=0,1", "solver.epochs=100", "model.width=32",
               "problem.n_interior=512", "timing.budget_seconds=5"]


def sweep(folder: Path, uri: str, name: str, overrides: list[str], planted: str | None = None) -> str:
    """``crux-sweep name overrides`` logging to ``uri``, on planted_problems.``planted`` where given; the id of
    the sweep's parent run."""
    problem = [f"problem._target_=planted_problems.{planted}"] if planted else []
    done = subprocess.run([sys.executable, "-m", "cruxlab.commands.sweep", name, *overrides, *problem,
                           f"hydra.sweep.dir={folder / 'multirun' / str(len(list(folder.glob('multirun/*'))))}"],
                          cwd=folder, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "MLFLOW_TRACKING_URI": uri, "PYTHONPATH": str(TESTS)})
    assert done.returncode == 0, done.stderr[-3000:]
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(name)
    (newest,) = client.search_runs([experiment.experiment_id], contract.tag_filter(contract.ROLE, contract.PARENT),
                                   order_by=["attributes.start_time DESC"], max_results=1)
    return newest.info.run_id


def report(*arguments: str) -> tuple[int, dict]:
    """crux-report with ``arguments`` (``--out`` among them), its exit code and its comparison.json."""
    code = main(list(arguments))
    out = Path(arguments[arguments.index("--out") + 1])
    return code, json.loads((out / "comparison.json").read_text())


def rows(comparison: dict) -> dict[str, dict]:
    return {row["id"]: row for row in comparison["rows"]}


@pytest.fixture(autouse=True)
def scratch(tmp_path, monkeypatch) -> None:
    """Packed stores are unpacked into the test's own temporary folder."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> tuple[str, list[str], str]:
    """A packed store of three accumulation sweeps (two alike, then one of the full batch alone) made in a folder
    that is gone, as the device check returns one; the parents' ids; a report made from it before it was packed,
    the store named as its packed file is."""
    made = tmp_path_factory.mktemp("made")
    uri = f"sqlite:///{made / 'mlflow.db'}"
    parents = [sweep(made, uri, "accumulation", ACCUMULATION), sweep(made, uri, "accumulation", ACCUMULATION),
               sweep(made, uri, "accumulation", ["solver.epochs=5", "model.width=8", "problem.n_interior=64",
                                                 "memory=full", "repeat=0", "gradient_draws=0"])]
    before = tmp_path_factory.mktemp("before")
    assert main(["accumulation", "--tracking-uri", uri, "--run", parents[0], "--out", str(before)]) == 0
    store = pack(made, tmp_path_factory.mktemp("docs"))
    shutil.rmtree(made)
    report_md = (before / "report.md").read_text()
    assert report_md.count(uri) == 1  # in the command that makes this report again
    return str(store), parents, report_md.replace(uri, f"sqlite:///{store}")


def test_a_packed_store_gives_the_report_made_where_it_ran(packed, tmp_path):
    store, parents, before = packed
    out = tmp_path / "report"
    assert main(["accumulation", "--tracking-uri", store, "--run", parents[0], "--out", str(out)]) == 0
    assert (out / "report.md").read_text() == before


def test_two_runs_of_one_sweep_are_never_changed(packed, tmp_path):
    store, (first, second, _), _ = packed
    code, comparison = report("accumulation", "--tracking-uri", store, "--run", second, "--against",
                              f"{store}#{first}", "--strict", "--out", str(tmp_path))
    assert code == 0 and comparison["changed"] is False
    found = rows(comparison)
    assert set(found) == {"accumulation.effective_batch[b8_acc4]", "accumulation.memory[b8_acc4]",
                          "accumulation.noise[b8_acc4]"}
    assert all(row["compared"] and not row["changed"] and row["after"]["verdict"] == HOLDS for row in found.values())
    # --against names the earlier sweep: it is read first
    assert (comparison["sides"]["before"]["parent_run"], comparison["sides"]["after"]["parent_run"]) == (first, second)
    text = (tmp_path / "report.md").read_text()
    assert "**3 claim(s) compared: none changed.**" in text and "![" in text
    assert (tmp_path / "histories.png").stat().st_size > 10_000


def test_sweeps_without_a_common_variant_are_refused_in_one_line(packed, tmp_path):
    store, (_, second, full_batch), _ = packed
    done = subprocess.run([sys.executable, "-m", "cruxlab.report", "accumulation", "--tracking-uri", store, "--run",
                           second, "--against", f"{store}#{full_batch}", "--out", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line == ("crux-report: no variant is in both sweeps (solver.epochs=5 memory=full gradient_draws=0: default; "
                    "solver.epochs=20 memory=b8,b32,b8_acc4 gradient_draws=16: b32, b8, b8_acc4): they ran different "
                    "settings")
    assert not (tmp_path / "r").exists()


@pytest.fixture
def tracking_server(tmp_path, empty_store) -> Iterator[str]:
    with mlflow_server(tmp_path, empty_store) as uri:
        yield uri


def test_broken_accumulation_on_a_server_flips_the_effective_batch(packed, tracking_server, tmp_path):
    """A sweep whose micro-batch gradients replace their sum, logged through a tracking server, against the honest
    one: read before → after, holds → fails."""
    store, (first, _, _), _ = packed
    broken = sweep(tmp_path, tracking_server, "accumulation", ACCUMULATION, "broken_accumulation")
    code, comparison = report("accumulation", "--tracking-uri", tracking_server, "--against", f"{store}#{first}",
                              "--strict", "--out", str(tmp_path / "strict"))
    assert code == 1
    effective = rows(comparison)["accumulation.effective_batch[b8_acc4]"]
    assert (effective["before"]["verdict"], effective["after"]["verdict"]) == (HOLDS, FAILS)
    assert effective["changed"] and effective["flipped"]
    assert comparison["sides"]["after"]["parent_run"] == broken
    assert comparison["sides"]["after"]["store"] == tracking_server
    assert main(["accumulation", "--tracking-uri", tracking_server, "--against", f"{store}#{first}", "--out",
                 str(tmp_path / "plain")]) == 0  # without --strict a change is a finding, not a failure


@pytest.fixture(scope="module")
def fused(tmp_path_factory) -> tuple[Path, Path]:
    """The folders of two inner_steps sweeps' stores: crux's fused loop, and one whose fused calls run four times."""
    folders = tmp_path_factory.mktemp("honest"), tmp_path_factory.mktemp("slowed")
    for folder, planted in zip(folders, (None, "slowed_fused_loop")):
        sweep(folder, f"sqlite:///{folder / 'mlflow.db'}", "inner_steps", INNER_STEPS, planted)
    return folders


def test_a_slowed_fused_loop_is_caught_by_strict(fused, tmp_path):
    honest, slowed = (f"sqlite:///{folder / 'mlflow.db'}" for folder in fused)
    code, comparison = report("inner_steps", "--tracking-uri", slowed, "--against", honest, "--strict", "--out",
                              str(tmp_path))
    assert code == 1
    found = rows(comparison)
    assert not found["inner_steps.identical[K=10]"]["changed"]  # four runs of a call: the same numbers
    faster = found["inner_steps.faster[K=10]"]
    (timing,) = [test for test in faster["tests"] if test["figure"] == "time_ratio"]
    assert (timing["test"], timing["changed"], timing["detail"]) == (INTERVALS, True, "the intervals do not overlap")
    before, after = (faster[side]["figures"]["time_ratio"] for side in ("before", "after"))
    assert before["high"] < after["low"]  # slower: the whole interval moved up
    assert (tmp_path / "timing.png").stat().st_size > 5_000
    assert [t["test"] for t in faster["tests"]][0] == VERDICT


def test_the_readme_table_and_the_docs_are_made_from_the_stores(fused, tmp_path):
    honest, slowed = fused
    readme = tmp_path / "README.md"
    readme.write_text(f"# crux\n\n{results.BEGIN}\ntyped by hand\n{results.END}\n\nthe rest\n")
    assert results.main([f"CPU=sqlite:///{honest / 'mlflow.db'}", f"slowed=sqlite:///{slowed / 'mlflow.db'}",
                         "--readme", str(readme), "--docs"]) == 0
    text = readme.read_text()
    assert "typed by hand" not in text and text.startswith("# crux\n\n") and text.endswith("\n\nthe rest\n")
    (line,) = [l for l in text.splitlines() if l.startswith("| inner_steps |")]
    cells = [c.strip() for c in line.strip("| ").split(" | ")]
    assert cells[1] == "4" and cells[2].startswith("identical **holds**; faster K=10: ")
    link = os.path.relpath(slowed / "comparisons" / "inner_steps" / "report.md", tmp_path)
    assert cells[4].startswith("faster[K=10]: ") and cells[4].endswith(f"([comparison]({link}))")
    assert (tmp_path / link).is_file()
    for folder in fused:
        assert json.loads((folder / "reports" / "inner_steps" / "verdicts.json").read_text())
