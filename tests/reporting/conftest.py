"""One real store for the report tests (SQL reports, HTML pages, findings): the whole pipeline on
the embedded SmolLM2, a local oxigraph endpoint and a temporary Dagster instance, over a closed-set
relation and a MACE relation, with marker and perturbation templates and a small option-count
sweep (k 3, two draws), so every report has rows to show."""

import pytest

REPORT_RELATIONS = ["P36", "mace-award"]
# Small enough to build in about 58 s on two idle CPU cores: few instances (MACE: one question per
# gold count; the sweep cuts only the question with 2 golds and 4 options: 3 copied options per
# draw and template, where one k = 3 copy of every question took 16) and options, two curated
# templates with their verbal markers and perturbations; every report and every findings claim
# still has rows. MACE's statements open with the object, so they share no prefix and score ~4×
# slower than P36's: at 8 instances (2 questions per gold count) the store took 88 s (962 MACE
# statements, 38 s of scoring), at 12 instances and 4 negatives 195 s.
REPORT_SETTINGS = {
    "max_instances": 4,
    "max_templates": 2,
    "n_negatives": 2,
    "answer_space_size": 6,
    "answer_space_size_one_to_one": 6,
    # context_fixed: Zhao et al.'s one-shot prefix (it took the one-shot perturbation's place)
    "template_kinds": ["curated", "question", "marker_verbal", "perturbation", "context_fixed"],
    "perturbation_seeds": [4],
    "answer_space_k": [3],
    "answer_space_draws": 2,
}


@pytest.fixture(scope="session")
def report_store(tmp_path_factory, facts_store):
    """KCAL_HOME of a finished run (read it; copy it before writing)."""
    from assets.runner import run_missing
    from tests.conftest import copy_facts_store

    home = copy_facts_store(facts_store, tmp_path_factory.mktemp("kcal-report") / "kcal")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DAGSTER_HOME", str(tmp_path_factory.mktemp("dagster-report")))
        summary = run_missing(home, relations=REPORT_RELATIONS, settings=REPORT_SETTINGS, log=lambda m: None)
    assert not summary.failed, summary.failed
    return home
