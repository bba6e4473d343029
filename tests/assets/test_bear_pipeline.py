"""A BEAR-format directory runs through the whole pipeline from the command line:
import, facts, fixed answer spaces, statements, real scoring, estimates, metrics, DuckDB."""

from pathlib import Path

import pytest

from tests.conftest import copy_facts_store, run_kcal
from tests.dataset.test_bear import write_bear

pytestmark = pytest.mark.integration


def kcal(home: Path, *args: str):
    return run_kcal(home, *args, timeout=900)


def test_bear_directory_runs_end_to_end(tmp_path, facts_store):
    home = copy_facts_store(facts_store, tmp_path / "home")
    bear = write_bear(tmp_path / "BEAR-tiny")
    out = kcal(home, "dataset", "import-bear", str(bear))
    assert out.returncode == 0, out.stderr
    assert "bear-P19" in out.stdout
    out = kcal(home, "demo", "--relation", "bear-P19", "--max-templates", "2")
    assert out.returncode == 0, out.stderr[-3000:]
    out = kcal(
        home,
        "sql",
        "--csv",
        "select instance_id, n_options, gold_labels[1] as gold from probe_instances "
        "where relation_id = 'bear-P19' order by instance_id",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[1:] == [
        "bear-P19:Q1,3,São Paulo",
        "bear-P19:Q2,3,Zürich",
        "bear-P19:Q3,3,Paris",
    ]
    out = kcal(
        home,
        "sql",
        "--csv",
        "select count(*), count(distinct template_id) from statement_scores where relation_id = 'bear-P19'",
    )
    assert out.stdout.splitlines()[1] == "18,2"  # 3 instances × 3 options × 2 templates
    out = kcal(
        home,
        "sql",
        "--csv",
        "select estimator, split, n from metrics where scope = 'relation' "
        "and scope_value = 'bear-P19' and metric = 'accuracy' "
        "and estimator in ('base', 'margin') and reduction = 'sum' order by 1, 2",
    )
    # each split on its own row, never pooled: the seeded hash puts Q2 and Q3 in dev, Q1 in test
    assert out.stdout.splitlines()[1:] == ["base,dev,2", "base,test,1", "margin,dev,2", "margin,test,1"]
    out = kcal(
        home,
        "sql",
        "--csv",
        "select \"check\", value from data_quality where relation_id = 'bear-P19' "
        "and \"check\" like 'dropped:%' and value > 0 order by 1",
    )
    # the import's three dropped lines (tests/dataset/test_bear.py FACTS) reach the quality table
    assert out.stdout.splitlines()[1:] == [
        "dropped:duplicate,1.0",
        "dropped:label_is_id,1.0",
        "dropped:missing_label,1.0",
    ]


REAL_BEAR = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "bear"
KISSLING = REAL_BEAR.parent / "kissling-templates" / "metadata_relations.json"
MARKER_ESTIMATORS = [
    "marker_certainly",
    "marker_numeric_0",
    "marker_numeric_100",
    "marker_numeric_25",
    "marker_numeric_50",
    "marker_numeric_75",
    "marker_possibly",
]


@pytest.mark.skipif(
    not (REAL_BEAR / "metadata_relations.json").is_file() or not KISSLING.is_file(),
    reason=f"BEAR's own files or Kissling et al.'s templates are not at {REAL_BEAR} and {KISSLING} "
    "(../shared/data beside the repository)",
)
def test_the_real_bear_imports_whole_and_a_relation_runs_end_to_end(tmp_path, facts_store):
    """BEAR with Kissling et al.'s templates (their Table 1 setting): 5 paraphrases and 7 markers
    per relation; Vote(5) and every marker estimator run on one imported relation."""
    home = copy_facts_store(facts_store, tmp_path / "home")
    out = kcal(home, "dataset", "import-bear", str(REAL_BEAR), "--templates", str(KISSLING))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    # BEAR's repeated P103 template (tests/dataset/test_bear.py) is replaced by Kissling's own third
    assert [x for x in lines if x.startswith("warning:")] == []
    per_relation = [x for x in lines if x.startswith("BEAR P")]
    assert len(per_relation) == 60 and all(x.endswith("dropped none") for x in per_relation)
    assert all(", 5 templates + 7 markers," in x for x in per_relation)  # 60 × 12 templates
    assert sum(int(x.split(": ")[1].split()[0]) for x in per_relation) == 7731  # every line of BEAR
    assert "imported 60 relation(s)" in out.stdout

    # The end-to-end run on one relation: the catalog keeps only it (each catalog relation would
    # cost the run a facts partition, ~1 s of Dagster bookkeeping apiece: 59 more than needed).
    out = kcal(
        home, "dataset", "import-bear", str(REAL_BEAR), "--replace", "--relation", "P105",
        "--templates", str(KISSLING),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "imported 1 relation(s)" in out.stdout and "removed 59 earlier relation(s)" in out.stdout

    # P105 (taxon rank), 12 of its 150 subjects × 5 options × 12 templates (5 paraphrases, the 7
    # markers of the first) = 720 statements.
    out = kcal(
        home, "demo", "--relation", "bear-P105", "--max-instances", "12", "--max-templates", "5",
        "--template-kinds", "curated,marker_verbal,marker_numeric",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]

    def sql(query: str) -> list[str]:
        result = kcal(home, "sql", "--csv", query)
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()[1:]

    assert sql(
        "select count(*), count(distinct instance_id), count(distinct template_id) from statements "
        "where relation_id = 'bear-P105'"
    ) == ["720,12,12"]
    # Capitalisation (on by default, as in lm-pub-quiz): none of these 12 subjects is lower case
    # ("pig" is not among them), but c3 opens with the lower-case rank: 12 × 5 statements change.
    assert sql("select sum(capitalized::int) from statements where relation_id = 'bear-P105'") == ["60"]
    assert sql(
        "select template_id, text from statements where instance_id = 'bear-P105:Q133219' and is_gold "
        "and template_id in ('bear-P105:c3', 'bear-P105:c0:numeric-50', 'bear-P105:c0:possibly') order by 1"
    ) == [
        "bear-P105:c0:numeric-50,I'm 50% confident Charophyta is classified at the phylum level.",
        "bear-P105:c0:possibly,Charophyta is possibly classified at the phylum level.",
        "bear-P105:c3,Phylum is the taxonomic rank of Charophyta.",
    ]  # Kissling's wording, verbatim ("I'm 50% confident [X] is …", no "that")
    assert sql("select count(*) from statement_scores where relation_id = 'bear-P105'") == ["720"]
    assert sql(
        "select sum(n) from metrics where scope = 'relation' and scope_value = 'bear-P105' "
        "and metric = 'accuracy' and estimator = 'base' and reduction = 'sum' and answer_space_k = 0"
    ) == ["12"]  # over the dev and test rows
    # Vote(5) and the 7 marker estimators: one row per instance each (markers on the parent c0)
    wanted = ["vote5_average", *MARKER_ESTIMATORS]
    assert sql(
        "select estimator, count(*), count(distinct instance_id), min(coalesce(template_id, '-')) "
        "from estimates where relation_id = 'bear-P105' and reduction = 'sum' and estimator in "
        f"({', '.join(repr(e) for e in wanted)}) group by 1 order by 1"
    ) == [f"{e},12,12,bear-P105:c0" for e in MARKER_ESTIMATORS] + ["vote5_average,12,12,-"]
    # BEAR's topic domain of P105 (relation_info.json) is a metrics scope
    assert sql(
        "select scope_value, sum(n) from metrics where scope = 'bear_domain' and metric = 'accuracy' "
        "and estimator = 'base' and reduction = 'sum' and answer_space_k = 0 group by 1"
    ) == ["Scientific,12"]
    assert sql(
        "select value from data_quality where relation_id = 'bear-P105' and \"check\" in "
        "('facts', 'dropped:label_is_id') order by \"check\" desc"
    ) == ["150.0", "0.0"]


def test_the_statements_asset_reads_the_capitalisation_setting():
    """So that switching it (--no-capitalize-statements) makes the statements stale."""
    import assets.definitions  # noqa: F401  (the code location records the declared reads)
    from resources.settings import declared_reads

    assert "probe.capitalize_statements" in declared_reads("statements")
