"""The README's verdict table is what `python -m cruxlab.report.results` makes from the stores kept in docs/: the
command it names, run again on those stores, writes the same table (no cell typed by hand)."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from cruxlab.report import results

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.integration  # reads every kept store (about 25 s): in CI, out of the quick loop
def test_the_readme_table_is_the_one_its_command_makes_from_the_kept_stores(tmp_path, monkeypatch):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start, end = results._bounds(readme, ROOT / "README.md")
    block = readme[start:end]
    (command,) = re.findall(r"Written by `(python -m cruxlab\.report\.results [^`]+)`", block)
    args = shlex.split(command)[3:]
    assert "--readme" in args and "--docs" in args
    copy = tmp_path / "README.md"
    copy.write_text(readme, encoding="utf-8")
    args[args.index("--readme") + 1] = str(copy)
    args.remove("--docs")  # the reports and comparisons in docs/ are left as they are
    monkeypatch.chdir(ROOT)
    assert results.main(args) == 0
    made = copy.read_text(encoding="utf-8")
    # the command line it records names the copy and no --docs, and without --docs no comparison is written to
    # link to; every other word is the README's
    normalise = lambda text: re.sub(r"Written by `[^`]+`| \(\[comparison\]\([^)]+\)\)", "",
                                    text[slice(*results._bounds(text, copy))])
    assert normalise(made) == normalise(readme)
