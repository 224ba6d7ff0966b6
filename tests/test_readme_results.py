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


NUMBER = r"([0-9.]+(?:e[+-]?[0-9]+)?)"


@pytest.mark.parametrize("machine", ["cpu", "tpu"])
def test_the_kept_fused_findings_never_contradict_themselves(machine):
    """Every speed finding kept in docs/ reads back consistent: the fused update's cost is the ratio it states
    times the unfused one's, and the ceiling no K passes is at least the speed-up it states (each number printed to
    3 significant digits, so off by at most 0.5% of itself)."""
    import json

    findings = [v["summary"] for path in sorted((ROOT / "docs" / machine / "reports").glob("inner_steps*/verdicts.json"))
                for v in json.loads(path.read_text()) if v["id"].startswith("inner_steps.faster")
                and "no K gains more than" in v["summary"]]
    assert findings
    for summary in findings:
        ratio = float(re.search(rf"ratio {NUMBER} \(", summary).group(1))
        unfused, fused = map(float, re.search(rf"an unfused update takes {NUMBER} ms here[^,]*? and a fused one "
                                              rf"{NUMBER} ms", summary).groups())
        ceiling = float(re.search(rf"no K gains more than {NUMBER}×", summary).group(1))
        assert fused == pytest.approx(ratio * unfused, rel=3 * 5e-3), summary
        assert ceiling >= 1 / ratio * (1 - 2 * 5e-3), summary
        stated = re.search(rf"faster on .+? by {NUMBER}×", summary)
        if stated:  # both rounded from numbers of which the ceiling is never the smaller
            assert ceiling >= float(stated.group(1)), summary
