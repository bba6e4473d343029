"""Marker estimators: Base on each marked variant, on its parent template's row, built on the real
templates table that run_templates makes (so variant names, kinds and parent ids are the real ones)."""

import dataclasses
import math

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from kcal_pipeline.dataset.instances.variants import NUMERIC_LEVELS, VERBAL_MARKERS
from kcal_pipeline.estimation import build_cube
from kcal_pipeline.estimation.markers import MARKER_VARIANTS, estimator_name
from kcal_pipeline.estimation.registry import ESTIMATORS, compute_estimates
from tests.estimation.test_selective_lama import (
    ALL_KINDS,
    MARKERS,
    p36_templates,
    quiet,
    random_partition,
    scores,
)

FOUR = ("sum", "mean", "answer_sum", "answer_mean")


def test_one_estimator_per_variant_the_dataset_makes():
    templates = p36_templates(ALL_KINDS)
    made = dict(
        templates.filter(pl.col("variant").is_not_null()).select("variant", "kind").unique().iter_rows()
    )
    assert made == {name: kind for name, (kind, _) in MARKER_VARIANTS.items()}
    expected_names = ["marker_certainly", "marker_possibly", *(f"marker_numeric_{p}" for p in NUMERIC_LEVELS)]
    assert expected_names == MARKERS
    assert len(MARKERS) == len(VERBAL_MARKERS) + len(NUMERIC_LEVELS) == 7
    for variant, (kind, _) in MARKER_VARIANTS.items():
        spec = ESTIMATORS[estimator_name(variant)]
        assert (spec.family, spec.grain, spec.output_kind) == ("markers", "template", "probability")
        assert spec.template_kinds == (kind,) and spec.reductions == FOUR


def marked_rows():
    """i1, options Q0 (gold) and Q1, on P36:c0 and its seven marker variants (ll_sum only):
    P36:c0 p = [.6, .4]; certainly [.9, .1]; possibly [.45, .55]; numeric-0 [.5, .5] (a tie);
    numeric-25 [.3, .7]; numeric-50 [.5, .5]; numeric-75 [.7, .3]; numeric-100 [.2, .8]."""
    probabilities = {
        "P36:c0": (0.6, 0.4),
        "P36:c0:certainly": (0.9, 0.1),
        "P36:c0:possibly": (0.45, 0.55),
        "P36:c0:numeric-0": (0.5, 0.5),
        "P36:c0:numeric-25": (0.3, 0.7),
        "P36:c0:numeric-50": (0.5, 0.5),
        "P36:c0:numeric-75": (0.7, 0.3),
        "P36:c0:numeric-100": (0.2, 0.8),
    }
    return [
        ("i1", t, o, f"Q{o}", o == 0, math.log(p))
        for t, ps in probabilities.items()
        for o, p in enumerate(ps)
    ]


def test_markers_by_hand_on_the_parents_row():
    cube = build_cube(scores(marked_rows(), ["ll_sum"]), templates=p36_templates(ALL_KINDS, max_templates=1))
    out = compute_estimates(cube, ["base", *MARKERS], log=quiet).filter(pl.col("reduction") == "sum")
    # every marker row is keyed by the parent P36:c0; Base on the parent is 0.6 (Q0, correct)
    assert set(out["template_id"]) == {"P36:c0", "P36:c0:certainly", "P36:c0:possibly"} | {
        f"P36:c0:numeric-{p}" for p in NUMERIC_LEVELS
    }  # base has a row on every template, the markers only on the parent's
    markers = out.filter(pl.col("estimator").is_in(MARKERS))
    assert set(markers["template_id"]) == {"P36:c0"}
    got = {
        e: (i, c, round(x, 12))
        for e, i, c, x in markers.select("estimator", "predicted_index", "correct", "confidence").rows()
    }
    assert got == {
        "marker_certainly": (0, True, 0.9),
        "marker_possibly": (1, False, 0.55),
        "marker_numeric_0": (0, True, 0.5),  # tie → the lowest index
        "marker_numeric_25": (1, False, 0.7),
        "marker_numeric_50": (0, True, 0.5),
        "marker_numeric_75": (0, True, 0.7),
        "marker_numeric_100": (1, False, 0.8),
    }
    # Δ against Base is one join on (instance_id, template_id, reduction): certainly − Base = 0.9 − 0.6
    base = out.filter((pl.col("estimator") == "base") & (pl.col("template_id") == "P36:c0"))
    delta = markers.join(base, on=["instance_id", "template_id", "reduction"], suffix="_base")
    assert delta.height == 7
    certainly = delta.filter(pl.col("estimator") == "marker_certainly")
    assert (certainly["confidence"] - certainly["confidence_base"]).item() == pytest.approx(0.3, abs=1e-12)


def test_a_marker_row_needs_both_the_variant_and_its_parent():
    rows = marked_rows()
    # i2 has the parent and 'possibly' only; i3 has 'certainly' but not the parent
    rows += [("i2", t, o, f"Q{o}", o == 1, -1.0 - o) for t in ("P36:c0", "P36:c0:possibly") for o in range(2)]
    rows += [("i3", "P36:c0:certainly", o, f"Q{o}", o == 0, -1.0 - o) for o in range(2)]
    cube = build_cube(scores(rows, ["ll_sum"]), templates=p36_templates(ALL_KINDS, max_templates=1))
    out = compute_estimates(cube, ["marker_certainly", "marker_possibly"], log=quiet)
    pairs = out.filter(pl.col("reduction") == "sum").select("instance_id", "estimator").rows()
    assert pairs == [("i1", "marker_certainly"), ("i1", "marker_possibly"), ("i2", "marker_possibly")]


@pytest.fixture
def base_everywhere(monkeypatch):
    """Base under all four reductions for this test, whatever the registry declares."""
    monkeypatch.setitem(ESTIMATORS, "base", dataclasses.replace(ESTIMATORS["base"], reductions=FOUR))


@pytest.mark.parametrize("seed", range(8))
def test_marker_rows_are_base_on_the_marked_template_keyed_by_its_parent(seed, base_everywhere):
    frame, probe, templates = random_partition(seed)
    out = compute_estimates(build_cube(frame, probe, templates), ["base", *MARKERS], log=quiet)
    variants = templates.filter(pl.col("variant").is_not_null()).select("template_id", "parent_id", "variant")
    # Base rows on the variant templates, moved to their parent's row and renamed after the marker,
    # where the parent was scored for that instance too
    parent_scored = frame.select("instance_id", pl.col("template_id").alias("parent_id")).unique()
    expected = (
        out.filter(pl.col("estimator") == "base")
        .join(variants, on="template_id")
        .join(parent_scored, on=["instance_id", "parent_id"], how="semi")
        .with_columns(
            template_id=pl.col("parent_id"),
            estimator=pl.concat_str(pl.lit("marker_"), pl.col("variant").str.replace("-", "_")),
        )
        .select(out.columns)
        .sort("instance_id", "template_id", "estimator", "reduction")
    )
    markers = out.filter(pl.col("estimator").is_in(MARKERS))
    assert markers.height > 0
    assert_frame_equal(markers, expected)
    assert np.isin(markers["template_id"].unique().to_list(), ["P36:c0", "P36:c1"]).all()


# --- skipped with one line naming what is missing ---------------------------------------------------


def two_options(template_ids) -> pl.DataFrame:
    """i1 with options Q0 (gold), Q1 on each template, every reduction's column present."""
    rows = [
        ("i1", t, o, f"Q{o}", o == 0, -1.0 - o, -0.5 - o, -1.0 - o, -0.5 - o)
        for t in template_ids
        for o in range(2)
    ]
    return scores(rows, ["ll_sum", "ll_mean", "ll_answer_sum", "ll_answer_mean"])


def skip_lines(cube, estimators=MARKERS) -> tuple[list[str], pl.DataFrame]:
    lines = []
    out = compute_estimates(cube, estimators, log=lines.append)
    return lines, out


def every_reduction(*names: str) -> str:
    return ", ".join(f"{n} ({r})" for n in names for r in FOUR)


def test_without_marker_templates_every_marker_is_skipped():
    lines, out = skip_lines(build_cube(two_options(["P36:c0"]), templates=p36_templates()))
    verbal = ["marker_certainly", "marker_possibly"]
    numeric = [f"marker_numeric_{p}" for p in NUMERIC_LEVELS]
    assert lines == [
        f"skipped, no marker_verbal templates (P36): {every_reduction(*verbal)}",
        f"skipped, no marker_numeric templates (P36): {every_reduction(*numeric)}",
    ]
    assert out.is_empty()


def test_a_missing_variant_name_is_skipped_by_name():
    # the table has 'certainly' but not 'possibly' (and no numeric markers)
    templates = p36_templates(("curated", "marker_verbal"), max_templates=1).filter(
        pl.col("variant").is_null() | (pl.col("variant") == "certainly")
    )
    cube = build_cube(two_options(["P36:c0", "P36:c0:certainly"]), templates=templates)
    lines, out = skip_lines(cube, ["marker_certainly", "marker_possibly"])
    assert lines == [f"skipped, no 'possibly' marker templates (P36): {every_reduction('marker_possibly')}"]
    assert out["estimator"].unique().to_list() == ["marker_certainly"]


def test_variants_scored_without_their_parents_are_skipped():
    # --template-kinds marker_verbal alone: run_templates keeps the variants, not the curated parents
    templates = p36_templates(("marker_verbal",), max_templates=1)
    assert set(templates["kind"]) == {"marker_verbal"}
    cube = build_cube(two_options(templates["template_id"]), templates=templates)
    lines, out = skip_lines(cube, ["marker_certainly"])
    assert lines == [
        "skipped, no 'certainly' marker templates whose parent template was scored (P36): "
        + every_reduction("marker_certainly")
    ]
    assert out.is_empty()


def test_a_templates_table_without_variant_columns_has_no_markers():
    templates = p36_templates(ALL_KINDS, max_templates=1).drop("parent_id", "variant")
    lines, _ = skip_lines(
        build_cube(two_options(templates["template_id"]), templates=templates), ["marker_certainly"]
    )
    assert lines == [f"skipped, no 'certainly' marker templates (P36): {every_reduction('marker_certainly')}"]
