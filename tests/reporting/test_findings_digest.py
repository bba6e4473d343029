"""The README's "What it finds" is generated from the findings data (docs/findings.json) that
`kcal findings` writes beside docs/findings.md: the README's block is what that data generates, and
the data's verdicts are the document's summary rows."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kcal_pipeline.reporting.findings import CLAIMS
from kcal_pipeline.reporting.findings.core import (
    DESCRIPTIVE,
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    NOT_TESTABLE,
    Finding,
)
from kcal_pipeline.reporting.findings.digest import (
    README_END,
    README_START,
    findings_json,
    readme_block,
    readme_paragraph,
    replace_readme_block,
)

ROOT = Path(__file__).resolve().parents[2]


def _data(findings):
    return json.loads(findings_json(findings, ["m"], {"commit": "0123456789abcdef"}))


def test_the_paragraph_counts_the_papers_claims_apart_from_kcals_own():
    own = next(k for k, c in CLAIMS.items() if c.paper.seed == "kcal")
    seed = [k for k, c in CLAIMS.items() if c.paper.seed != "kcal"][:2]
    findings = [
        Finding(seed[0], "m", "a", HOLDS, 0.1, 0.05, 0.2, 10, "Δx 0.100 [0.050, 0.200]; more"),
        Finding(seed[0], "m", "b", INCONCLUSIVE, 0.1, -0.1, 0.2, 10, "Δx 0.100 [-0.100, 0.200]"),
        Finding(seed[1], "m", "c", NOT_TESTABLE, note="needs two models"),
        Finding(seed[1], "m", "d", DESCRIPTIVE, numbers="r 0.5"),
        Finding(own, "m", "e", FAILS, -0.3, -0.4, -0.2, 5, "Δy -0.300 [-0.400, -0.200]"),
    ]
    text = readme_paragraph(_data(findings))
    assert all(len(line) <= 100 for line in text.splitlines())  # the README's lines stay short
    text = " ".join(line.strip() for line in text.splitlines())  # unwrapped, as a reader reads it
    assert "kcal commit 0123456789ab" in text
    # 2 seed claims in 4 rows; kcal's 1 check in 1 row
    assert (
        "Of the seed papers' 2 claims, tested in 4 rows: 1 hold, 0 do not hold, 1 inconclusive, "
        "1 not testable here, 1 descriptive." in text
    )
    assert "kcal's own 1 checks, in 1 rows: 0 hold, 1 do not hold, 0 inconclusive" in text
    assert (
        f"- {CLAIMS[seed[0]].title} (seed {CLAIMS[seed[0]].paper.seed}): holds in 1 row "
        "(e.g. Δx 0.100 [0.050, 0.200])" in text
    )
    assert (
        f"- {CLAIMS[own].title} (kcal's own): does not hold in 1 row (e.g. Δy -0.300 [-0.400, -0.200])"
        in text
    )
    assert CLAIMS[seed[1]].title not in text  # nothing decided: not listed


def test_nan_is_null_in_the_json():
    key = next(iter(CLAIMS))
    (row,) = _data([Finding(key, "m", "x", NOT_TESTABLE, note="why")])["findings"]
    assert row["value"] is None and row["ci_low"] is None and row["mde"] is None
    assert row["paper"] == CLAIMS[key].paper.seed and row["title"] == CLAIMS[key].title
    assert not any(isinstance(v, float) and math.isnan(v) for v in row.values())


def test_the_readme_block_is_replaced_in_place_and_its_markers_are_required():
    readme = f"# x\n\nbefore\n{README_START}\nold text\n{README_END}\nafter\n"
    new = replace_readme_block(readme, "new\ntext")
    assert new == f"# x\n\nbefore\n{README_START}\nnew\ntext\n{README_END}\nafter\n"
    assert readme_block(new) == "new\ntext"
    with pytest.raises(ValueError, match="no block between"):
        replace_readme_block("# no markers\n", "x")


def test_the_readme_says_what_docs_findings_json_says():
    data = json.loads((ROOT / "docs" / "findings.json").read_text("utf-8"))
    block = readme_block((ROOT / "README.md").read_text("utf-8"))
    assert block, "README.md has no generated findings block"
    assert block == readme_paragraph(data), (
        "README's What it finds is stale: kcal findings --readme README.md"
    )


def test_docs_findings_json_is_the_documents_summary():
    data = json.loads((ROOT / "docs" / "findings.json").read_text("utf-8"))
    doc = (ROOT / "docs" / "findings.md").read_text("utf-8")
    summary = doc.split("## Summary", 1)[1].split("\n## ", 1)[0]
    rows = [
        line for line in summary.splitlines() if line.startswith("| ") and not line.startswith("| seed |")
    ]
    assert len(rows) == len(data["findings"])
    for line, finding in zip(rows, data["findings"], strict=True):
        assert finding["title"].replace("|", "\\|") in line
        assert finding["verdict"] in line.rsplit(" | ", 1)[-1]
