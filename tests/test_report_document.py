"""report.md and verdicts.json from records alone: missing jobs, non-finite evidence, the verdict table."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from cruxlab.report import FAILS, HOLDS, RunRecord, SolveOptions, Sweep, judge, judge_sound, report_markdown
from cruxlab.report import verdicts_json
from cruxlab.report.document import verdict_table
from cruxlab.report.jobs import account
from cruxlab.store import contract
from crux_testing import mlflow_run


def record(run_id: str, epochs: int, final: float, rows: int | None = None, **options) -> RunRecord:
    """A run of ``epochs`` epochs whose history kept ``rows`` of them (fewer when it stopped early)."""
    history = np.linspace(2.0, 1.0, epochs)[:rows]
    return RunRecord(run_id, SolveOptions(epochs=epochs, **options), {"loss/total": history},
                     {"final_loss": 1.0}, {"initial/u/0": np.zeros(2), "final/u/0": np.full(2, final)},
                     environment={"backend": "cpu", "git_commit": "abc123", "git_dirty": False},
                     config=f"solver:\n  inner_steps: {options.get('inner_steps', 1)}\n")


def sweep(records, jobs=None) -> Sweep:
    return Sweep("inner_steps", "sqlite:///x.db", "1", "parent0", {contract.CLAIM: "K steps fused are the same",
                                                                   contract.OVERRIDES: "+sweeps=inner_steps repeat=0"},
                 list(records), jobs)


def test_verdicts_file_stays_valid_json_when_evidence_is_infinite():
    """A fused run that stopped early has fewer history rows than its reference: an infinite difference."""
    records = [record("k1", 10, 1.0), record("k5", 10, 1.0, rows=5, inner_steps=5)]
    verdicts = judge(records, ["inner_steps"])
    identical = next(v for v in verdicts if v.id == "inner_steps.identical[K=5]")
    assert identical.verdict == FAILS

    def refuse(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    entries = json.loads(verdicts_json(verdicts), parse_constant=refuse)
    evidence = next(e for e in entries if e["id"] == "inner_steps.identical[K=5]")["evidence"]
    assert evidence["max_relative_history_difference"] == "inf"


def test_a_failed_job_is_listed_at_the_top_and_left_out_of_the_verdicts():
    records = [record("k1", 10, 1.0), record("k5", 10, 1.0, inner_steps=5)]
    plan = {n: ("+sweeps=inner_steps", f"solver.inner_steps={k}") for n, k in enumerate((1, 5, 20))}
    children = [mlflow_run(run_id, status, {contract.JOB: str(n), contract.VARIANT: f"K={k}", **error})
                for n, (run_id, k, status, error) in enumerate([
                    ("k1", 1, contract.FINISHED, {}), ("k5", 5, contract.FINISHED, {}),
                    ("k20", 20, contract.FAILED, {contract.ERROR_TYPE: "ValueError",
                                           contract.ERROR_MESSAGE: "inner_steps=20 must divide epochs=10"})])]
    failed = sweep(records, account(mlflow_run("parent0", contract.FAILED), children, 3, plan))
    verdicts = judge_sound(failed, ["inner_steps"])
    text = report_markdown(failed, verdicts, [], ["inner_steps"]).splitlines()
    assert text[2] == ("Sweep `inner_steps`, parent run `parent0`: **incomplete: 2 of 3 planned jobs finished, and "
                       "its parent run is FAILED.**")
    assert text[8] == ("| job 2 (solver.inner_steps=20) | FAILED | ValueError: inner_steps=20 must divide epochs=10 "
                       "| `k20` |")
    assert all("k20" not in v.runs for v in verdicts)
    assert {v.id: v.verdict for v in verdicts}["inner_steps.identical[K=5]"] == HOLDS  # K=5 lacks no run
    assert "crux-sweep inner_steps repeat=0" in "\n".join(text)  # the sweep's own overrides, without +sweeps=


@pytest.mark.parametrize("final, outcome", [(1.0, "holds"), (2.0, "fails")])
def test_verdict_table_shows_each_verdict_once(final, outcome):
    verdicts = judge([record("k1", 10, 1.0), record("k5", 10, final, inner_steps=5)], ["inner_steps"])
    table = verdict_table(verdicts).splitlines()
    assert [line.split()[0] for line in table[2:]] == [v.verdict for v in verdicts]
    assert table[2].startswith(f"{outcome:<13} inner_steps.identical[K=5]")


def test_reproduce_gives_the_folder_the_exact_crux_to_install_and_the_command_as_typed():
    """An own sweep file run with its own config folder from crux's wheel, in a folder outside git: the wheel by
    its sha256, the problem's file by its own, the versions that ran, the commands naming all of them."""
    own = record("k1", 10, 1.0)
    wheel, digest, files = "crux-0.1.0-py3-none-any.whl", "a6" * 32, "f0" * 32
    path = f"/home/me/wheels/{wheel}"  # where pip took it from
    own.environment.update(
        git_commit=None, git_dirty=None, versions={"crux": "0.1.0", "jax": "0.10.2", "jaxlib": "0.10.2",
                                                   "optax": "0.2.8"},
        device_kind="cpu", matmul_precision="highest", crux_version="0.1.0", crux_wheel=wheel, crux_wheel_path=path,
        crux_wheel_sha256=digest, crux_files_sha256=files, crux_commit=None, crux_clean=None,
        problem_module="heat2d", problem_file="heat2d.py", problem_sha256="5e" * 32)
    tags = {contract.CLAIM: "mine", contract.OVERRIDES: "+sweeps=heat problem=heat2d",
            contract.COMMAND: "crux-sweep heat_checkpoint.yaml --config-dir conf problem=heat2d",
            contract.WORKING_DIR: "/home/me/my project"}
    text = report_markdown(Sweep("heat_checkpoint", "sqlite:///x.db", "1", "p0", tags, [own]), [], [], [])
    reproduce = text.split("## Reproduce")[1].split("## Environment")[0]
    said = reproduce.split("```sh")[0]
    assert "- the folder was not in a git repository: the problem's file below is its code" in said
    assert f"- the problem's module `heat2d`, file `heat2d.py` of sha256 `{'5e' * 32}`" in said
    assert f"- crux 0.1.0 from the wheel `{path}`, sha256 `{digest}` (its installed files: `{files}`)" in said
    assert "- jax 0.10.2, jaxlib 0.10.2, optax 0.2.8 on cpu (cpu), matmul precision highest" in said
    commands = reproduce.split("```sh\n")[1].split("```")[0].splitlines()
    assert commands == ["cd '/home/me/my project'", f"echo '{digest}  {path}' | sha256sum --check   # the wheel "
                        "the runs installed", f"pip install {path}", "pip install jax==0.10.2 jaxlib==0.10.2 "
                        "optax==0.2.8", "crux-sweep heat_checkpoint.yaml --config-dir conf problem=heat2d",
                        "crux-report heat_checkpoint"]
    assert "/path/to" not in text and "commit `crux" not in text
    own.environment.update(crux_wheel=None, crux_wheel_path=None, crux_wheel_sha256=None, crux_files_sha256=None,
                           crux_commit="c0ffee", crux_clean=False, crux_source="/home/me/crux",
                           crux_origin="https://example.org/crux.git", git_commit="abc123", git_dirty=True)
    text = report_markdown(Sweep("heat_checkpoint", "sqlite:///x.db", "1", "p0", tags, [own]), [], [], [])
    assert ("- crux 0.1.0 from a checkout at commit `c0ffee` (`/home/me/crux`), with uncommitted changes (the commit "
            "alone does not hold the code that ran)") in text
    assert "- the folder's commit `abc123` with uncommitted changes" in text
    assert ('src=$(mktemp -d)/crux && git clone --quiet /home/me/crux "$src" && git -C "$src" checkout --quiet c0ffee'
            '   # or clone https://example.org/crux.git\npip install "$src"\n') in text
    old = report_markdown(sweep([record("k1", 10, 1.0)]), [], [], [])  # a parent without those tags
    assert "crux-sweep inner_steps repeat=0\n" in old.split("## Reproduce")[1]


def test_each_variant_shows_its_first_jobs_compile_beside_the_later_ones_and_the_training_time():
    """Two variants of two jobs each, listed out of the order they ran in: each variant's first job (the lowest
    job number) is the one whose compile is shown as the first's, and the sweep's first jobs' compile share is
    their compile seconds over their compile and training seconds."""
    def timed(run_id, job, compile_seconds, run_seconds, **options):
        r = record(run_id, 10, 1.0, **options)
        return RunRecord(r.run_id, r.options, r.histories, {"compile_seconds": compile_seconds,
                                                            "run_seconds": run_seconds}, r.snapshots,
                         tags={contract.JOB: str(job)}, environment=r.environment, config=r.config)

    records = [timed("k1-b", 2, 0.1, 1.0), timed("k1-a", 0, 3.0, 1.0), timed("k5-a", 1, 6.0, 2.0, inner_steps=5),
               timed("k5-b", 3, 0.3, 2.0, inner_steps=5)]
    text = report_markdown(sweep(records), judge(records, ["inner_steps"]), [], ["inner_steps"]).splitlines()
    table = text.index("| variant | jobs | first job's compile s | later jobs' compile s | run s | first job's compile "
                       "share |")
    assert text[table + 2:table + 4] == ["| full | 2 | 3 | 0.1 | 1 | 75% |", "| full K=5 | 2 | 6 | 0.3 | 2 | 75% |"]
    assert ("The first jobs spent 75% of their compile and training seconds compiling (9 of 12 s); the later jobs "
            "12% (0.4 of 3.4 s).") in text


def test_a_report_reads_verdicts_first_and_gives_the_environment_and_config_once_with_each_runs_own():
    """Two variants of two repeats each, alike but for their options, their repeat and the overrides that chose
    them: the verdicts come first, every heading is unique, the environment and the config are printed once, and
    per run only what sets it apart (one run that lacks an entry the others have says so)."""
    def ran(run_id, repeat, **options):
        r = record(run_id, 10, 1.0, **options)
        k = options.get("inner_steps", 1)
        environment = {"backend": "cpu", "versions": {"jax": "0.10.2"}, "overrides": [f"solver.inner_steps={k}",
                                                                                      f"repeat={repeat}"]}
        if run_id == "k5-b":
            environment["cpu_count"] = 2
        config = f"solver:\n  inner_steps: {k}\n  epochs: 10\nrepeat: {repeat}\nmodel:\n  width: 8\n"
        return dataclasses.replace(r, repeat=repeat, environment=environment, config=config)

    records = [ran("k1-a", 0), ran("k1-b", 1), ran("k5-a", 0, inner_steps=5), ran("k5-b", 1, inner_steps=5)]
    text = report_markdown(sweep(records), judge(records, ["inner_steps"]), [], ["inner_steps"])
    headings = [line for line in text.splitlines() if line.startswith("#")]
    assert len(headings) == len(set(headings)), headings
    assert headings[:2] == ["# crux claim report: inner_steps", "## Verdicts"]
    assert text.count("```json") == 1 and text.count("```yaml") == 1
    environment = text.split("## Environment")[1].split("## Resolved config")[0]
    assert json.loads(environment.split("```json\n")[1].split("```")[0]) == {"backend": "cpu",
                                                                              "versions": {"jax": "0.10.2"}}
    assert ('| `k5-b` | full K=5 | 1 | `overrides` = ["solver.inner_steps=5", "repeat=1"]; `cpu_count` = 2 |'
            in environment)
    assert '| `k1-a` | full | 0 | `overrides` = ["solver.inner_steps=1", "repeat=0"]; `cpu_count` = (absent) |' \
        in environment
    config = text.split("## Resolved config")[1]
    assert config.split("```yaml\n")[1].split("```")[0] == "solver:\n  epochs: 10\nmodel:\n  width: 8\n"
    assert "| `k5-a` | full K=5 | 0 | `solver.inner_steps` = 5; `repeat` = 0 |" in config
