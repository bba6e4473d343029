"""Every seed claim rests on its paper's own words: each citation's quote is found in the paper's
full text (../shared/papers/, whitespace-normalised), every number shown as the paper's occurs in
one of its quotes, and no claim reads numbers off a plot or pleads an inaccessible text."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcal_pipeline.reporting.findings import CLAIMS, ordered_claims
from kcal_pipeline.reporting.findings.core import (
    PAPERS_DIR,
    normalise_text,
    number_in,
    paper_text,
    printed_numbers,
)

SEED_CLAIMS = [c for c in ordered_claims() if c.paper.seed != "kcal"]
FORBIDDEN = ("not accessible", "only the abstract", "no brier released", "read off")
FINDINGS_MD = Path(__file__).resolve().parents[2] / "docs" / "findings.md"


def test_the_papers_are_there():
    assert PAPERS_DIR.is_dir(), f"{PAPERS_DIR}: the seed papers' full texts are missing"
    files = {c.paper.file for c in SEED_CLAIMS}
    assert "" not in files, "a seed paper without its file in ../shared/papers/"
    for name in files:
        assert (PAPERS_DIR / name).is_file(), name


@pytest.mark.parametrize("key", [c.key for c in SEED_CLAIMS])
def test_every_quote_is_in_its_paper(key):
    c = CLAIMS[key]
    assert c.sources, f"{key}: a seed claim without a citation"
    text = paper_text(c.paper.file)
    for source in c.sources:
        quote = normalise_text(source.quote)
        assert len(quote) >= 15, f"{key}: quote {quote!r} is too short to identify a passage"
        assert quote in text, f"{key}: quote not found in {c.paper.file}: {quote!r}"
        assert source.section, f"{key}: a citation without a section"


@pytest.mark.parametrize("key", [c.key for c in SEED_CLAIMS])
def test_every_paper_number_is_in_a_quote(key):
    c = CLAIMS[key]
    quotes = " | ".join(normalise_text(s.quote) for s in c.sources)
    missing = [n for n in printed_numbers(c.number.text) if not number_in(n, quotes)]
    assert not missing, f"{key}: paper number(s) {missing} of {c.number.text!r} are in none of its quotes"
    if c.number.effect is not None:
        shown = f"{abs(c.number.effect):g}"
        assert c.number.derived or any(
            number_in(n, quotes) for n in {shown, f"{abs(c.number.effect):.3f}"}
        ), f"{key}: effect {c.number.effect} is neither printed in a quote nor says how it is derived"


@pytest.mark.parametrize("key", [c.key for c in SEED_CLAIMS])
def test_no_claim_reads_a_plot_or_pleads_an_inaccessible_text(key):
    c = CLAIMS[key]
    words = " ".join((c.number.text, c.number.derived, c.setting, c.rule, c.title)).lower()
    assert not [w for w in FORBIDDEN if w in words], f"{key}: {[w for w in FORBIDDEN if w in words]}"


def test_the_document_has_no_such_phrase():
    text = FINDINGS_MD.read_text("utf-8").lower()
    assert not [w for w in FORBIDDEN if w in text]


def test_numbers_are_matched_whole():
    assert printed_numbers("−0.14 vs 80.5 % at k = 60") == ["0.14", "80.5", "60"]
    assert number_in("0.5", "a threshold of 0.5.")
    assert not number_in("0.5", "0.55 and 10.5")
    assert not number_in("80", "80.5")
    assert number_in("80.5", "(80.5 vs 80.6)")
    assert printed_numbers("Gap .470 vs Token .478") == ["0.470", "0.478"]  # tables print no leading 0
    assert number_in("0.470", "Gap .470 .478") and number_in(".478", "Gap .470 .478")
    assert not number_in("0.47", "Gap .470")


def test_a_quote_not_in_the_paper_is_caught():
    assert "Margin strongly improves over Base" not in paper_text("kissling-self-aware-knowledge-probing.txt")
    assert normalise_text("C_{Margin}  strongly\n improves") in paper_text(
        "kissling-self-aware-knowledge-probing.txt"
    )
