"""Every verdict cites a section a reader can open: docs/claims.md, which states the claim the verdict quotes."""
from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import numpy as np
import pytest

import cruxlab.report.claims
from cruxlab.report import RunRecord, SolveOptions, judge
from cruxlab.report.claims import CHECKS
from cruxlab.report.verdict import Claim

PROJECT = Path(__file__).resolve().parents[1]
ANCHOR = re.compile(r'<a id="([^"]+)"></a>')


def defined_claims() -> dict[str, Claim]:
    """Every claim a check module of cruxlab.report.claims defines, by ``module.NAME`` (a claim another module
    imports counts once, where it is defined)."""
    found: dict[str, Claim] = {}
    for module in pkgutil.iter_modules(cruxlab.report.claims.__path__):
        loaded = importlib.import_module(f"cruxlab.report.claims.{module.name}")
        found.update({f"{module.name}.{name}": value for name, value in vars(loaded).items()
                      if isinstance(value, Claim) and not any(value is seen for seen in found.values())})
    return found


def words(text: str) -> str:
    """Markdown as the words a reader sees: blockquote marks dropped, any run of whitespace one space."""
    return " ".join(" ".join(re.sub(r"^\s*>\s?", "", line) for line in text.splitlines()).split())


def sections(path: Path) -> dict[str, str]:
    """The text of each anchored section of ``path``, up to the next anchor, as :func:`words`."""
    text = path.read_text()
    marks = list(ANCHOR.finditer(text))
    ends = [m.start() for m in marks[1:]] + [len(text)]
    return {m.group(1): words(text[m.end():end]) for m, end in zip(marks, ends)}


def cited_section(source: str) -> str:
    """The section ``source`` (``path#anchor``) names; fails naming what is missing."""
    file, _, anchor = source.partition("#")
    path = PROJECT / file
    assert path.is_file(), f"{source}: {file} is not a file of the project"
    found = sections(path)
    assert anchor in found, f"{source}: no anchor {anchor!r} in {file} (it has {sorted(found)})"
    return found[anchor]


def test_every_check_defines_claims_and_their_anchors_are_unique():
    claims = defined_claims()
    assert {name.split(".")[0] for name in claims} >= {"accumulation", "checkpoint", "fusion", "offload", "phases",
                                                      "substeps", "resume"}
    anchors = [claim.anchor for claim in claims.values()]
    assert len(anchors) == len(set(anchors)), anchors
    text = (PROJECT / "docs" / "claims.md").read_text()
    assert len(ANCHOR.findall(text)) == len(set(ANCHOR.findall(text)))


@pytest.mark.parametrize("name, claim", sorted(defined_claims().items()))
def test_each_claim_is_stated_word_for_word_in_the_section_it_cites(name, claim):
    """Every quoted piece of the wording (pieces are separated by an omission mark or a table-cell dash) is in the
    cited section, so a verdict quotes nothing its source does not say."""
    section = cited_section(claim.source)
    for piece in re.split(r" \[\.\.\.\] | — ", claim.text):
        assert words(piece) in section, f"{name}: {piece!r} is not in {claim.source}"


def trivial(run_id: str, **options) -> RunRecord:
    return RunRecord(run_id, SolveOptions(epochs=4, **options), {"loss/total": np.linspace(2, 1, 4)}, {},
                     {"initial/u/0": np.zeros(2), "final/u/0": np.ones(2)})


@pytest.mark.parametrize("records", [[], [trivial("plain"), trivial("b4", batchsize=4)]], ids=["no runs", "two runs"])
def test_every_verdict_cites_a_file_of_the_project_and_an_anchor_in_it(records):
    verdicts = judge(records, list(CHECKS))
    assert {v.id.split(".")[0] for v in verdicts} == set(CHECKS)
    for verdict in verdicts:
        assert verdict.source.startswith("docs/claims.md#"), verdict.source
        cited_section(verdict.source)


def test_every_link_within_docs_claims_leads_to_one_of_its_sections():
    text = (PROJECT / "docs" / "claims.md").read_text()
    links = set(re.findall(r"\]\(#([^)]+)\)", text))
    assert links and links <= set(ANCHOR.findall(text)), links - set(ANCHOR.findall(text))
