"""A BEAR-format directory runs through the whole pipeline from the command line:
import, facts, fixed answer spaces, statements, real scoring, estimates, metrics, DuckDB."""

from pathlib import Path

import pytest

from tests.conftest import run_kcal
from tests.dataset.test_bear import write_bear

pytestmark = pytest.mark.integration


def kcal(home: Path, *args: str):
    return run_kcal(home, *args, timeout=900)


def test_bear_directory_runs_end_to_end(tmp_path):
    home = tmp_path / "home"
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
        "select estimator, n from metrics where scope = 'relation' "
        "and scope_value = 'bear-P19' and metric = 'accuracy' order by 1",
    )
    assert out.stdout.splitlines()[1:] == ["base,3", "margin,3"]
