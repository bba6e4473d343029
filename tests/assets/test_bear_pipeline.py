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


@pytest.mark.skipif(
    not (REAL_BEAR / "metadata_relations.json").is_file(),
    reason=f"BEAR's own files are not at {REAL_BEAR} (../shared/data/bear beside the repository)",
)
def test_the_real_bear_imports_whole_and_a_relation_runs_end_to_end(tmp_path, facts_store):
    home = copy_facts_store(facts_store, tmp_path / "home")
    out = kcal(home, "dataset", "import-bear", str(REAL_BEAR))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [x for x in lines if x.startswith("warning:")] == [
        "warning: metadata_relations.json [P103]: template 'The native language of [X] is [Y].' "
        "is given more than once; kept the first"
    ]
    per_relation = [x for x in lines if x.startswith("BEAR P")]
    assert len(per_relation) == 60 and all(x.endswith("dropped none") for x in per_relation)
    assert sum(int(x.split(": ")[1].split()[0]) for x in per_relation) == 7731  # every line of BEAR
    assert "imported 60 relation(s)" in out.stdout

    # The end-to-end run on one relation: the catalog keeps only it (each catalog relation would
    # cost the run a facts partition, ~1 s of Dagster bookkeeping apiece: 59 more than needed).
    out = kcal(home, "dataset", "import-bear", str(REAL_BEAR), "--replace", "--relation", "P105")
    assert out.returncode == 0, out.stderr
    assert "imported 1 relation(s)" in out.stdout and "removed 59 earlier relation(s)" in out.stdout

    # P105 (taxon rank): 150 subjects, 5 options; "pig" was dropped as a language code before, and
    # 18 subjects start in lower case, so capitalisation (on by default, as in lm-pub-quiz) changes
    # 18 × 5 statements of the template that opens with the subject.
    out = kcal(home, "demo", "--relation", "bear-P105", "--max-instances", "0", "--max-templates", "1")
    assert out.returncode == 0, out.stderr[-3000:]

    def sql(query: str) -> list[str]:
        result = kcal(home, "sql", "--csv", query)
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()[1:]

    assert sql(
        "select count(*), count(distinct instance_id), sum(capitalized::int) from statements "
        "where relation_id = 'bear-P105'"
    ) == ["750,150,90"]
    assert sql("select text from statements where instance_id = 'bear-P105:Q787' and is_gold") == [
        "Pig is classified at the subspecies level."
    ]
    assert sql("select count(*) from statement_scores where relation_id = 'bear-P105'") == ["750"]
    assert sql(
        "select sum(n) from metrics where scope = 'relation' and scope_value = 'bear-P105' "
        "and metric = 'accuracy' and estimator = 'base' and reduction = 'sum' and answer_space_k = 0"
    ) == ["150"]  # over the dev and test rows
    assert sql(
        "select value from data_quality where relation_id = 'bear-P105' and \"check\" in "
        "('facts', 'dropped:label_is_id') order by \"check\" desc"
    ) == ["150.0", "0.0"]


def test_the_statements_asset_reads_the_capitalisation_setting():
    """So that switching it (--no-capitalize-statements) makes the statements stale."""
    from assets.dataset import statements
    from resources.settings import declared_reads

    assert "probe.capitalize_statements" in declared_reads(statements.specs_by_key[statements.key].metadata)
