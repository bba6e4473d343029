"""The recipes in docs/architecture.md name every file the suite requires a new estimator, metric,
findings claim or relation source to appear in, and the test that fails while it is missing there.

REQUIRED is that list, one table per recipe: file (or folder) → a test that fails while the new
entry is missing there. It was found by registering a scratch spec of each kind (and a packaged
relation of a new source) in a copy of the tree and running the suite: each file whose omission
failed a test is here, with that test. A new test that asserts every registered name appears
somewhere belongs in REQUIRED, and the recipe then names that place. The checks: each enforcing
test still exists where REQUIRED says (a renamed or removed one would leave the step unchecked),
each file in the repository still exists (a moved module would leave the recipe pointing
nowhere), and the recipe's section names each file in backticks and each enforcing test."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"

REQUIRED: dict[str, dict[str, str]] = {
    "Add an estimator": {
        # the register call: a main family's probability estimator passes main=True
        "kcal_pipeline/estimation/": (
            "tests/reporting/test_catalog.py::test_main_flags_select_what_main_families_selected"
        ),
        # a new family module is imported there, or the documented name is not registered
        "kcal_pipeline/estimation/__init__.py": (
            "tests/test_readme_estimators.py::"
            "test_every_registered_estimator_is_in_the_methods_table_and_nothing_else"
        ),
        "docs/methods.md": (
            "tests/test_readme_estimators.py::"
            "test_every_registered_estimator_is_in_the_methods_table_and_nothing_else"
        ),
        "bench/estimators.py": (
            "tests/bench/test_estimators_bench.py::test_the_bench_implements_every_registered_estimator"
        ),
    },
    "Add a metric": {
        # the register call: `batched` equals the one-sample definition
        "kcal_pipeline/evaluation/": (
            "tests/evaluation/test_batched_metrics.py::test_batched_equals_the_definition_sample_by_sample"
        ),
        # a new family module is imported there, or the bench's name is not registered
        "kcal_pipeline/evaluation/__init__.py": (
            "tests/bench/test_evaluation_bench.py::test_the_bench_implements_every_registered_metric"
        ),
        "tests/evaluation/test_metrics.py": (
            "tests/evaluation/test_metrics.py::test_every_metric_declares_needs_and_direction"
        ),
        "bench/evaluation.py": (
            "tests/bench/test_evaluation_bench.py::test_the_bench_implements_every_registered_metric"
        ),
    },
    "Add a findings claim": {
        # every registered claim, on an empty store: not testable, saying why
        "kcal_pipeline/reporting/findings/": (
            "tests/reporting/test_findings.py::"
            "test_an_empty_store_makes_every_claim_not_testable_and_the_document_says_why"
        ),
        # a seed paper's full text, which every quote of its claims is found in
        "../shared/papers/": "tests/reporting/test_findings_citations.py::test_every_quote_is_in_its_paper",
        # the tests that list every claim of their paper (seeds 001 and 002)
        "tests/reporting/test_findings_tinner.py": (
            "tests/reporting/test_findings_tinner.py::test_tinners_claims_cite_the_thesis_and_read_their_stages"
        ),
        "tests/reporting/test_findings_selective_lama.py": (
            "tests/reporting/test_findings_selective_lama.py::"
            "test_selective_lamas_claims_name_their_stages_sections_and_numbers"
        ),
    },
    "Add a relation source": {
        # SOURCES: a catalog naming another source does not load; this test loads all of it
        "kcal_pipeline/dataset/relations.py": (
            "tests/dataset/test_variants.py::test_every_catalog_template_has_a_hand_marked_form_inside_the_clause"
        ),
        # the reader: sources import no instances
        "kcal_pipeline/dataset/sources/": "tests/test_architecture.py::test_the_import_contracts_hold",
        # a packaged catalog file: a hand-marked form of every template
        "kcal_pipeline/dataset/data/": (
            "tests/dataset/test_variants.py::test_every_catalog_template_has_a_hand_marked_form_inside_the_clause"
        ),
        # a packaged closed-set relation: its facts in the embedded snapshot
        "kcal_pipeline/dataset/sources/snapshot/": (
            "tests/dataset/test_closed_set_relations.py::test_each_relation_yields_labelled_facts"
        ),
    },
}
ENTRIES = [(recipe, path, test) for recipe, files in REQUIRED.items() for path, test in files.items()]


def recipe_section(text: str, title: str) -> str:
    """The recipe from its bold title up to the next recipe or heading; '' when there is none."""
    match = re.search(rf"^\*\*{re.escape(title)}\*\*.*?(?=^\*\*Add |^#|\Z)", text, re.S | re.M)
    return match.group(0) if match else ""


def defined_functions(path: Path) -> set[str]:
    """The names of the functions a test file defines (in classes too); none when it is missing."""
    if not path.is_file():
        return set()
    tree = ast.parse(path.read_text("utf-8"))
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def missing_tests(root: Path, entries: list[tuple[str, str, str]]) -> list[str]:
    """Each enforcing test ('file::function') that its file no longer defines."""
    missing = []
    for _, _, test in entries:
        file, _, function = test.partition("::")
        if function not in defined_functions(root / file):
            missing.append(test)
    return missing


def unnamed(section: str, files: dict[str, str]) -> list[str]:
    """What a recipe's section leaves out: a required file not named in backticks, or its test."""
    out = [f"file {path}" for path in files if f"`{path}`" not in section]
    tests = dict.fromkeys(test.partition("::")[2] for test in files.values())
    return out + [f"test {name}" for name in tests if not re.search(rf"\b{name}\b", section)]


def test_every_enforcing_test_exists():
    assert missing_tests(ROOT, ENTRIES) == [], "REQUIRED names tests that no longer exist: update it"


@pytest.mark.parametrize("path", sorted({p for _, p, _ in ENTRIES if not p.startswith("../")}))
def test_every_required_file_is_in_the_repository(path):
    assert (ROOT / path).exists(), f"{path} moved: update REQUIRED and docs/architecture.md"


@pytest.mark.parametrize("recipe", list(REQUIRED))
def test_the_recipe_names_every_required_file_and_its_test(recipe):
    section = recipe_section(ARCHITECTURE.read_text("utf-8"), recipe)
    assert section, f"docs/architecture.md has no recipe **{recipe}**"
    assert unnamed(section, REQUIRED[recipe]) == [], f"the recipe {recipe!r} leaves these out"


def test_the_checks_catch_an_omitted_file_a_missing_test_and_a_renamed_one(tmp_path):
    """The checks above are only as good as these helpers: they see what is missing."""
    text = (
        "## Recipes\n\n**Add a thing**\n1. A row in `docs/x.md`: `tests/t.py::test_x`.\n"
        "2. An entry in `bench/x.py.bak`: `test_y_old`.\n\n**Add another** in `bench/x.py`: test_y.\n# End\n"
    )
    section = recipe_section(text, "Add a thing")
    assert section.startswith("**Add a thing**") and "Add another" not in section
    assert recipe_section(text, "Add nothing") == ""
    files = {"docs/x.md": "tests/t.py::test_x", "bench/x.py": "tests/t.py::test_y"}
    assert unnamed(section, files) == ["file bench/x.py", "test test_y"]  # nor `bench/x.py.bak`, test_y_old
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.py").write_text(
        "def test_x():\n    pass\n\n\nclass TestY:\n    def test_z(self): ...\n"
    )
    entries = [("r", "p", f"tests/{test}") for test in ("t.py::test_x", "t.py::test_y", "t.py::test_z")]
    entries.append(("r", "p", "tests/gone.py::test_x"))  # the file itself removed
    assert missing_tests(tmp_path, entries) == ["tests/t.py::test_y", "tests/gone.py::test_x"]
