"""The import contracts in pyproject.toml ([tool.importlinter]) hold, and they can fail.

The library (kcal_pipeline) stays free of Dagster and of the Dagster layer (assets, resources), so it
can be used and tested on its own; its stages import only earlier stages; resources never import
assets. import-linter checks this statically, lazy (function-level) imports included.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
CONTRACTS = (
    "The library (kcal_pipeline) does not use Dagster",
    "Library stages import only earlier stages",
    "Inside dataset: relations and templates < sources < instances",
    "Resources do not import assets",
)


def lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    """lint-imports on cwd's packages with cwd's pyproject.toml; no cache is read or written."""
    if not LINT_IMPORTS.is_file():
        pytest.fail(f"{LINT_IMPORTS} not found; install the dev extras: pip install -e '.[dev]'")
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(cwd / "pyproject.toml"), "--no-cache"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_import_contracts_hold():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(CONTRACTS)} kept, 0 broken" in result.stdout


# A tree with the project's package layout (every layer present, as the contracts require) and one
# violation of each contract. lint-imports puts its working directory first on sys.path, so this
# tree, not the installed project, is what it analyses.
VIOLATIONS = {
    "kcal_pipeline/core/clock.py": "import dagster\n",
    "kcal_pipeline/core/keys.py": "from kcal_pipeline.scoring import engine\n",
    "kcal_pipeline/dataset/sources/bear.py": "from kcal_pipeline.dataset.instances import probe\n",
    "resources/provider.py": "import assets.jobs\n",
}
LAYOUT = (
    "kcal_pipeline/core",
    "kcal_pipeline/dataset/instances",
    "kcal_pipeline/dataset/sources",
    "kcal_pipeline/scoring",
    "kcal_pipeline/estimation",
    "kcal_pipeline/evaluation",
    "kcal_pipeline/reporting",
    "assets",
    "resources",
)
MODULES = (
    "kcal_pipeline/dataset/relations.py",
    "kcal_pipeline/dataset/templates.py",
    "kcal_pipeline/dataset/instances/probe.py",
    "kcal_pipeline/scoring/engine.py",
    "assets/jobs.py",
)


def fake_project(root: Path, violations: dict[str, str]) -> Path:
    for package in LAYOUT:
        for parent in (root / package, *(root / package).parents):
            if parent == root:
                break
            parent.mkdir(parents=True, exist_ok=True)
            (parent / "__init__.py").touch()
    for module in MODULES:
        (root / module).touch()
    for module, source in violations.items():
        (root / module).write_text(source)
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def test_a_clean_tree_passes_the_contracts(tmp_path):
    result = lint_imports(fake_project(tmp_path, {}))
    assert result.returncode == 0, result.stdout + result.stderr


def test_each_contract_fails_on_a_violating_import(tmp_path):
    result = lint_imports(fake_project(tmp_path, VIOLATIONS))
    assert result.returncode != 0
    out = " ".join(result.stdout.split())  # the report wraps long lines
    assert f"0 kept, {len(CONTRACTS)} broken" in out, result.stdout + result.stderr
    for name in CONTRACTS:
        assert name in out
    assert "kcal_pipeline.core.clock -> dagster" in out
    assert "kcal_pipeline.core.keys -> kcal_pipeline.scoring" in out
    assert "kcal_pipeline.dataset.sources.bear -> kcal_pipeline.dataset.instances" in out
    assert "resources.provider -> assets.jobs" in out


@pytest.mark.parametrize("module", ["assets.definitions", "assets.cli"])
def test_the_code_location_and_the_cli_import_without_torch(module):
    """Every kcal command, run worker, code server and UI process imports these; torch (2 s of a
    5 s import on two cores) comes in only when something is scored, scipy (0.7 s) when something
    is fitted or calibrated, matplotlib (0.3 s) when something is drawn."""
    heavy = ("torch", "transformers", "scipy", "matplotlib")
    probe = f"import sys, {module}; print(sorted(m for m in {heavy} if m in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
