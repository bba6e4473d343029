"""Breakdown scopes on hand-built frames: each scope's members written out by hand."""

import numpy as np
import polars as pl
import pytest

from kcal_pipeline.evaluation import METRICS, compute_metrics
from kcal_pipeline.evaluation.scopes import (
    attach_attributes,
    breakdown_scopes,
    macro_average,
    macro_average_mixtures,
)

RELATIONS = pl.DataFrame(
    {
        "relation_id": ["P36", "mace-award", "mace-river"],
        "label": ["capital", "award laureates by year", "river countries"],
        "domain": ["closed_set", "mace", "mace"],
    }
)
# (instance, relation, n_gold, n_options)
INSTANCE_ROWS = [
    ("P36:a", "P36", 1, 3),
    ("P36:b", "P36", 1, 5),
    ("mace-award:q1", "mace-award", 1, 5),
    ("mace-award:q2", "mace-award", 2, 5),
    ("mace-award:q4", "mace-award", 4, 8),
    ("mace-river:r2", "mace-river", 2, 5),
    ("mace-river:r6", "mace-river", 6, 10),
]
INSTANCES = pl.DataFrame(
    INSTANCE_ROWS, schema=["instance_id", "relation_id", "n_gold", "n_options"], orient="row"
).with_columns(pl.col("n_gold", "n_options").cast(pl.Int32), split=pl.lit("test"))

# The estimates frame, deliberately not in (relation, instance) order: rows are frame positions.
#   row: 0 r6, 1 P36:a, 2 q2, 3 q1, 4 P36:b, 5 r2, 6 q4
ORDER = [
    "mace-river:r6",
    "P36:a",
    "mace-award:q2",
    "mace-award:q1",
    "P36:b",
    "mace-river:r2",
    "mace-award:q4",
]
CORRECT = [True, True, False, True, False, True, True]


def estimates() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "model_id": "m",
            "estimator": "e",
            "relation_id": [i.split(":")[0] for i in ORDER],
            "instance_id": ORDER,
            "template_id": [f"{i.split(':')[0]}:c0" for i in ORDER],
            "confidence": [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3],
            "correct": CORRECT,
        }
    )


def members(frame: pl.DataFrame, scopes=None) -> dict[tuple[str, str], list[int]]:
    return {(s.scope, s.scope_value): s.rows.tolist() for s in breakdown_scopes(frame, scopes)}


def test_attach_attributes_keeps_rows_and_order():
    out = attach_attributes(estimates(), relations=RELATIONS, instances=INSTANCES)
    assert out["instance_id"].to_list() == ORDER
    assert out["domain"].to_list() == ["mace", "closed_set", "mace", "mace", "closed_set", "mace", "mace"]
    assert out["n_gold"].to_list() == [6, 1, 2, 1, 1, 2, 4]
    assert out["n_options"].to_list() == [10, 3, 5, 5, 5, 5, 8]


def test_every_scope_and_its_members():
    frame = attach_attributes(estimates(), relations=RELATIONS, instances=INSTANCES)
    got = list(breakdown_scopes(frame))
    assert [s.scope for s in got] == (
        ["all"]
        + ["relation"] * 3
        + ["domain"] * 2
        + ["n_gold"] * 4
        + ["mixture_domain"] * 7
        + ["n_options"] * 4
    )
    expected = {
        ("all", "all"): [0, 1, 2, 3, 4, 5, 6],
        ("relation", "P36"): [1, 4],
        ("relation", "mace-award"): [2, 3, 6],
        ("relation", "mace-river"): [0, 5],
        ("domain", "closed_set"): [1, 4],
        ("domain", "mace"): [0, 2, 3, 5, 6],
        ("n_gold", "1"): [1, 3, 4],
        ("n_gold", "2"): [2, 5],
        ("n_gold", "4"): [6],
        ("n_gold", "6"): [0],
        # MACE relations only (P36's single-answer rows are not MACE questions); a domain with no
        # question in a mixture (mace-river has no 1-answer question) has no part in it.
        ("mixture_domain", "1|mace-award"): [3],
        ("mixture_domain", "1,2|mace-award"): [2, 3],
        ("mixture_domain", "1,2|mace-river"): [5],
        ("mixture_domain", "1,2,4|mace-award"): [2, 3, 6],
        ("mixture_domain", "1,2,4|mace-river"): [5],
        ("mixture_domain", "1,2,4,6|mace-award"): [2, 3, 6],
        ("mixture_domain", "1,2,4,6|mace-river"): [0, 5],
        # numeric order: 10 after 8
        ("n_options", "3"): [1],
        ("n_options", "5"): [2, 3, 4, 5],
        ("n_options", "8"): [6],
        ("n_options", "10"): [0],
    }
    assert members(frame) == expected
    assert list(members(frame)) == list(expected)  # values in this order too


def test_scopes_follow_the_columns_present_and_can_be_chosen():
    assert list(members(estimates())) == [("all", "all"), ("relation", "P36"), ("relation", "mace-award"),
                                          ("relation", "mace-river")]  # fmt: skip
    with_instances = attach_attributes(estimates(), instances=INSTANCES)
    assert {s for s, _ in members(with_instances)} == {"all", "relation", "n_gold", "n_options"}  # no domain
    assert list(members(with_instances, ["n_options", "all"])) == [
        ("all", "all"), ("n_options", "3"), ("n_options", "5"), ("n_options", "8"), ("n_options", "10")
    ]  # fmt: skip
    with pytest.raises(ValueError, match=r"scope 'domain' needs column 'domain'.*attach_attributes"):
        list(breakdown_scopes(with_instances, ["domain"]))
    with pytest.raises(ValueError, match=r"scope 'mixture_domain' needs column 'domain'"):
        list(breakdown_scopes(with_instances, ["mixture_domain"]))
    with pytest.raises(ValueError, match=r"unknown scope\(s\) \['gold'\]"):
        list(breakdown_scopes(with_instances, ["gold"]))


def test_template_kinds_group_the_templates_table_kinds():
    templates = pl.DataFrame(
        {
            "relation_id": "P36",
            "template_id": [
                "P36:c0",
                "P36:c1",
                "P36:g0",
                "P36:c0:certainly",
                "P36:c0:numeric-50",
                "P36:c0:typo",
            ],
            "kind": ["curated", "curated", "generated", "marker_verbal", "marker_numeric", "perturbation"],
        }
    )
    # one instance on every template, plus an instance-grain row (no template)
    tids = ["P36:c0:typo", "P36:c0", "P36:g0", None, "P36:c0:numeric-50", "P36:c1", "P36:c0:certainly"]
    frame = pl.DataFrame(
        {
            "relation_id": "P36",
            "instance_id": "P36:a",
            "template_id": tids,
            "confidence": 0.5,
            "correct": True,
        }
    )
    out = attach_attributes(frame, templates=templates)
    assert out["template_kind"].to_list() == [
        "perturbation", "curated", "paraphrase", None, "marker", "curated", "marker"
    ]  # fmt: skip
    assert members(out, ["template_kind"]) == {  # report order, the null row in none
        ("template_kind", "curated"): [1, 5],
        ("template_kind", "paraphrase"): [2],
        ("template_kind", "marker"): [4, 6],
        ("template_kind", "perturbation"): [0],
    }
    assert list(members(out, ["template_kind"])) == [
        ("template_kind", "curated"), ("template_kind", "paraphrase"), ("template_kind", "marker"),
        ("template_kind", "perturbation"),
    ]  # fmt: skip


def test_bad_attribute_tables_name_the_row():
    with pytest.raises(
        ValueError, match=r"probe_instances: no row for \{'relation_id': 'P36', 'instance_id': 'P36:a'\}"
    ):
        attach_attributes(estimates(), instances=INSTANCES.filter(pl.col("instance_id") != "P36:a"))
    with pytest.raises(ValueError, match=r"relations: no row for \{'relation_id': 'mace-river'\}"):
        attach_attributes(estimates(), relations=RELATIONS.head(2))
    with pytest.raises(ValueError, match=r"probe_instances: several rows for .*'P36:b'"):
        attach_attributes(
            estimates(), instances=pl.concat([INSTANCES, INSTANCES.filter(pl.col("instance_id") == "P36:b")])
        )
    with pytest.raises(ValueError, match=r"probe_instances: missing column 'n_options'"):
        attach_attributes(estimates(), instances=INSTANCES.drop("n_options"))
    once = attach_attributes(estimates(), relations=RELATIONS)
    with pytest.raises(ValueError, match=r"already has column 'domain'"):
        attach_attributes(once, relations=RELATIONS)
    odd = pl.DataFrame({"relation_id": ["P36"], "template_id": ["P36:c0"], "kind": ["fancy"]})
    with pytest.raises(ValueError, match=r"template 'P36:c0' has kind 'fancy'"):
        attach_attributes(estimates(), templates=odd)
    with pytest.raises(
        ValueError, match=r"templates: no row for \{'relation_id': 'mace-river', 'template_id'"
    ):
        attach_attributes(estimates(), templates=odd.with_columns(kind=pl.lit("curated")))


def test_mixtures_are_macro_averaged_over_domains():
    frame = attach_attributes(estimates(), relations=RELATIONS, instances=INSTANCES)
    c, y = frame["confidence"].to_numpy(), frame["correct"].to_numpy()
    accuracy = METRICS["accuracy"]
    long = pl.DataFrame(
        [
            ("m", "e", s.scope, s.scope_value, "accuracy", accuracy(c[s.rows], y[s.rows]), len(s.rows))
            for s in breakdown_scopes(frame, ["all", "mixture_domain"])
        ],
        schema=["model_id", "estimator", "scope", "scope_value", "metric", "value", "n"],
        orient="row",
    )
    mixed = macro_average_mixtures(long)
    assert mixed.columns == long.columns
    # correct: q1 T, q2 F, q4 T (award); r2 T, r6 T (river)
    # {1}: award q1 → 1; river has none → 1.0
    # {1,2}: award (q1, q2) → 1/2, river r2 → 1 → (1/2 + 1)/2 = 3/4 (pooled would be 2/3)
    # {1,2,4}: award 2/3, river 1 → 5/6;  {1,2,4,6}: award 2/3, river (r2, r6) 1 → 5/6
    assert mixed["scope"].to_list() == ["mixture"] * 4
    assert mixed["scope_value"].to_list() == ["1", "1,2", "1,2,4", "1,2,4,6"]
    assert mixed["value"].to_list() == pytest.approx([1.0, 0.75, 5 / 6, 5 / 6])
    assert mixed["n"].to_list() == [1, 3, 4, 5]
    assert macro_average_mixtures(long.filter(pl.col("scope") == "all")).is_empty()
    with pytest.raises(ValueError, match="ci_low"):
        macro_average_mixtures(long.with_columns(ci_low=pl.lit(0.0)))


def test_macro_average_rule():
    assert macro_average([0.5, 1.0]) == 0.75
    assert np.isnan(macro_average([0.5, np.nan]))  # an undefined domain makes the mean undefined
    # per resample: rows are resamples, columns domains
    np.testing.assert_array_equal(macro_average(np.array([[0.0, 1.0], [0.5, 0.25]])), [0.5, 0.375])
    with pytest.raises(ValueError, match="no domain values"):
        macro_average([])


def test_each_scope_partitions_the_rows_in_ascending_order():
    # 20,000 shuffled rows: within a scope the values split the (non-null) rows, each ascending,
    # so a metric reads a scope's rows in the frame's order (the tie rule of AURC).
    rng = np.random.default_rng(7)
    n = 20_000
    relation = rng.choice(["P36", "mace-award", "mace-river"], n)
    frame = pl.DataFrame(
        {
            "relation_id": relation,
            "instance_id": [f"i{i}" for i in range(n)],
            "domain": np.where(relation == "P36", "closed_set", "mace"),
            "n_gold": rng.choice([1, 2, 4, 6], n).astype(np.int32),
            "n_options": rng.integers(3, 30, n).astype(np.int32),
        }
    )
    by_scope: dict[str, list[np.ndarray]] = {}
    for s in breakdown_scopes(frame):
        assert np.all(np.diff(s.rows) > 0), (s.scope, s.scope_value)
        by_scope.setdefault(s.scope, []).append(s.rows)
    for scope in ("all", "relation", "domain", "n_gold", "n_options"):
        np.testing.assert_array_equal(np.sort(np.concatenate(by_scope[scope])), np.arange(n))
    n_gold = frame["n_gold"].to_numpy()
    assert [len(r) for r in by_scope["n_gold"]] == [int((n_gold == g).sum()) for g in (1, 2, 4, 6)]


def test_bear_domains_count_a_row_in_each_of_its_relations_domains():
    # P36 is Geographic and Political, mace-award Arts, mace-river has no BEAR domain (in none)
    domains = pl.Series([["Geographic", "Political"], ["Arts"], []], dtype=pl.List(pl.String))
    frame = attach_attributes(estimates(), relations=RELATIONS.with_columns(bear_domains=domains))
    #   row: 0 r6, 1 P36:a, 2 q2, 3 q1, 4 P36:b, 5 r2, 6 q4
    expected = {
        ("bear_domain", "Arts"): [2, 3, 6],
        ("bear_domain", "Geographic"): [1, 4],
        ("bear_domain", "Political"): [1, 4],
    }
    assert members(frame, ["bear_domain"]) == expected
    assert {k: v for k, v in members(frame).items() if k[0] == "bear_domain"} == expected
    # the vectorised metrics read the same members: accuracy = correct share of each domain's rows
    # (CORRECT: q2 F, q1 T, q4 T → 2/3; P36:a T, P36:b F → 1/2)
    got = compute_metrics(frame, metrics=["accuracy"], scopes=["bear_domain"])
    assert got.select("scope_value", "value", "n").rows() == [
        ("Arts", pytest.approx(2 / 3), 3),
        ("Geographic", 0.5, 2),
        ("Political", 0.5, 2),
    ]
    # a relations table without bear_domains (hand-built, or before the column existed): no scope
    assert "bear_domain" not in attach_attributes(estimates(), relations=RELATIONS).columns
