"""What identifies the code that produced a run: crux's wheel by its sha256 (or its checkout by commit and
state), the user's problem module by its file's sha256, and no commit where the folder is not a repository."""
from __future__ import annotations

import base64
import hashlib
import json
import subprocess
from importlib.metadata import Distribution
from pathlib import Path

from cruxlab.runtime import environment as job_environment
from cruxlab.runtime.environment import environment
from cruxlab.runtime.provenance import installed_crux, problem_code

REPO = Path(__file__).resolve().parent.parent
WHEEL_SHA256 = "a611795fdefcba1c47d18d1a754c5fe97cb8c3ccf606be3bc715fe8873a09754"
RECORD = """crux/__init__.py,sha256=AAAA,10
crux/__pycache__/__init__.cpython-311.pyc,,
hydra_plugins/crux_sweeper/__init__.py,sha256=BBBB,5
crux-0.1.0.dist-info/RECORD,,
crux-0.1.0.dist-info/direct_url.json,sha256=CCCC,252
../../../bin/crux-run,sha256=DDDD,179
"""


def wheel_install(folder: Path) -> Distribution:
    """A distribution as pip leaves one installed from a local wheel: METADATA, RECORD, direct_url.json."""
    info = folder / "crux-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: crux\nVersion: 0.1.0\n")
    (info / "RECORD").write_text(RECORD)
    (info / "direct_url.json").write_text(json.dumps({
        "archive_info": {"hash": f"sha256={WHEEL_SHA256}", "hashes": {"sha256": WHEEL_SHA256}},
        "url": "file:///home/someone/wheels/crux-0.1.0-py3-none-any.whl"}))
    return Distribution.at(info)


def test_a_wheel_install_is_identified_by_the_wheels_hash_and_its_files(tmp_path):
    found = installed_crux(wheel_install(tmp_path))
    files = hashlib.sha256(b"crux/__init__.py,AAAA\nhydra_plugins/crux_sweeper/__init__.py,BBBB").hexdigest()
    assert found == {"crux_version": "0.1.0", "crux_wheel": "crux-0.1.0-py3-none-any.whl",
                     "crux_wheel_path": "/home/someone/wheels/crux-0.1.0-py3-none-any.whl",  # where pip took it
                     "crux_wheel_sha256": WHEEL_SHA256, "crux_files_sha256": files,  # crux's files, no caches
                     "crux_commit": None, "crux_clean": None, "crux_source": None, "crux_origin": None}


def test_a_checkout_install_is_identified_by_its_commit_and_whether_it_was_clean():
    found = installed_crux()  # the tests run on an editable install of this checkout
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    status = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                            capture_output=True, text=True).stdout
    assert (found["crux_commit"], found["crux_clean"]) == (head.strip(), not status)
    assert found["crux_source"] == str(REPO) and found["crux_wheel"] is None and found["crux_files_sha256"] is None


def test_an_install_of_a_checkouts_folder_is_identified_by_its_commit_while_its_files_are_those_installed(tmp_path):
    """``pip install .`` from a clone: the commit is recorded where the folder still holds the very files pip
    installed (their sha256 in RECORD), and not once one of them has changed."""
    clone = tmp_path / "clone"
    (clone / "crux").mkdir(parents=True)
    (clone / "crux" / "__init__.py").write_text("VERSION = 1\n")
    git = lambda *args: subprocess.run(["git", "-C", str(clone), *args], capture_output=True, text=True,
                                       check=True).stdout.strip()
    git("init", "-q")
    git("remote", "add", "origin", "https://someone:s3cret-token@example.org/crux.git")  # a credential to mask
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "empty")
    git("add", "crux")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "crux")
    digest = hashlib.sha256(b"VERSION = 1\n").digest()
    info = tmp_path / "site" / "crux-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: crux\nVersion: 0.1.0\n")
    (info / "RECORD").write_text(f"crux/__init__.py,sha256={base64.urlsafe_b64encode(digest).rstrip(b'=').decode()},12\n"
                                 "crux-0.1.0.dist-info/RECORD,,\n")
    (info / "direct_url.json").write_text(json.dumps({"dir_info": {}, "url": clone.as_uri()}))
    found = installed_crux(Distribution.at(info))
    assert (found["crux_commit"], found["crux_clean"], found["crux_source"]) == (git("rev-parse", "HEAD"), True,
                                                                                  str(clone))
    assert found["crux_files_sha256"] is not None and found["crux_wheel"] is None
    assert found["crux_origin"] == "https://someone:***@example.org/crux.git"
    (clone / "crux" / "__init__.py").write_text("VERSION = 2\n")  # the folder moved on after the install
    assert installed_crux(Distribution.at(info))["crux_commit"] is None


def test_the_problems_module_is_identified_by_its_file_and_hash_without_importing_it(tmp_path, monkeypatch):
    text = b"import crux_no_such_dependency\n\n\ndef line(n, hidden, activation, seed):\n    pass\n"
    (tmp_path / "crux_provenance_mine.py").write_bytes(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert problem_code("crux_provenance_mine.line") == {
        "problem_module": "crux_provenance_mine", "problem_file": "crux_provenance_mine.py",
        "problem_sha256": hashlib.sha256(text).hexdigest()}
    assert problem_code("crux_provenance_absent.line") == {"problem_module": "crux_provenance_absent"}
    assert problem_code(None) == {}


def test_a_folder_outside_git_records_no_commit(tmp_path):
    found = environment(tmp_path, "crux.problems.poisson1d")
    assert (found["git_commit"], found["git_dirty"]) == (None, None)
    assert found["problem_module"] == "crux.problems" and len(found["problem_sha256"]) == 64


def test_each_jobs_environment_reads_its_folders_state_while_crux_install_is_read_once_a_process(tmp_path,
                                                                                                 monkeypatch):
    """A sweep's jobs share one process: what crux's install was when the process loaded it, read once; the
    working folder's commit and changes, read for each job (the user may commit between two jobs)."""
    git = lambda *args: subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)
    git("init", "-q")
    (tmp_path / "mine.py").write_text("a = 1\n")
    git("add", "mine.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    first = environment(tmp_path, None, {})
    (tmp_path / "mine.py").write_text("a = 2\n")
    calls = []
    monkeypatch.setattr(job_environment, "installed_crux", lambda *a: calls.append(a) or {})
    second = environment(tmp_path, None, {})
    assert (first["git_dirty"], second["git_dirty"]) == (False, True) and first["git_commit"] == second["git_commit"]
    assert calls == [] and second["crux_version"] == first["crux_version"] is not None
