"""The import contracts in pyproject.toml ([tool.importlinter]) hold, and they can fail.

The library (kcal_pipeline) stays free of Dagster and of the Dagster layer (assets, resources), so it
can be used and tested on its own; its stages import only earlier stages; no package's modules
import each other in a circle; resources never import assets. import-linter checks this statically,
lazy (function-level) imports included. A function-level import of the library's own modules is
kept only where it keeps torch (or another heavy package) out of an import.
"""

import ast
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
    "No import cycles among the modules of any library package",
    "Inside instances: labels < sampling < probe < mace_questions < quality",
    "Inside scoring.models: registry < folders < gguf < loading",
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
    "kcal_pipeline/scoring/native.py": "from kcal_pipeline.scoring import prefix\n",
    "kcal_pipeline/scoring/prefix.py": "from kcal_pipeline.scoring import native\n",
    "kcal_pipeline/dataset/instances/sampling.py": "from kcal_pipeline.dataset.instances import quality\n",
    "kcal_pipeline/scoring/models/gguf.py": "from kcal_pipeline.scoring.models import loading\n",
    "resources/provider.py": "import assets.jobs\n",
}
LAYOUT = (
    "kcal_pipeline/core",
    "kcal_pipeline/dataset/instances",
    "kcal_pipeline/dataset/sources",
    "kcal_pipeline/scoring/models",
    "kcal_pipeline/estimation",
    "kcal_pipeline/evaluation",
    "kcal_pipeline/reporting",
    "assets",
    "resources",
)
MODULES = (
    "kcal_pipeline/dataset/relations.py",
    "kcal_pipeline/dataset/templates.py",
    "kcal_pipeline/dataset/instances/labels.py",
    "kcal_pipeline/dataset/instances/sampling.py",
    "kcal_pipeline/dataset/instances/probe.py",
    "kcal_pipeline/dataset/instances/mace_questions.py",
    "kcal_pipeline/dataset/instances/quality.py",
    "kcal_pipeline/scoring/engine.py",
    "kcal_pipeline/scoring/models/registry.py",
    "kcal_pipeline/scoring/models/folders.py",
    "kcal_pipeline/scoring/models/gguf.py",
    "kcal_pipeline/scoring/models/loading.py",
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
    assert "No cycles are allowed in kcal_pipeline.scoring." in out
    assert "kcal_pipeline.dataset.instances.sampling -> kcal_pipeline.dataset.instances.quality" in out
    assert "kcal_pipeline.scoring.models.gguf -> kcal_pipeline.scoring.models.loading" in out
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


# --- function-level imports of the library's own modules ---------------------------------------------

# Packages whose import costs seconds (or that are optional): a library module that brings one in at
# import may be imported inside the function that needs it, so that importing its caller stays cheap
# (see the test above). Any other function-level import of a kcal module can only be there to break
# an import circle, which the acyclic contract forbids: it belongs at the top of the module.
HEAVY = frozenset({"torch", "transformers", "scipy", "matplotlib", "llama_cpp"})


def _imported_modules(node: ast.Import | ast.ImportFrom, package: str, known: set[str]) -> list[str]:
    """The modules an import statement loads (for `from a import b`: a.b where that is a module)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], base]).strip(".")
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]


def _imports(tree: ast.Module, package: str, known: set[str]) -> tuple[set[str], list[tuple[int, str]]]:
    """(modules imported when the module is, (line, module) of each function-level import); what an
    `if TYPE_CHECKING:` block imports is neither: it never runs."""
    top: set[str] = set()
    lazy: list[tuple[int, str]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for orelse in child.orelse:
                    visit(ast.Module(body=[orelse], type_ignores=[]), in_function)
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                for module in _imported_modules(child, package, known):
                    if in_function:
                        lazy.append((child.lineno, module))
                    else:
                        top.add(module)
            visit(
                child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            )

    visit(tree, False)
    return top, lazy


def lazy_library_imports(root: Path, library: str = "kcal_pipeline") -> list[str]:
    """'path:line imports module' for each function-level import of a library module that does not
    bring a HEAVY package in at import (through the library's own module-level imports, packages'
    __init__ included)."""
    files = {}
    for path in sorted((root / library).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    known = set(files)
    top, lazy = {}, {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        top[module], lazy[module] = _imports(ast.parse(path.read_text(encoding="utf-8")), package, known)

    heavy: dict[str, bool] = {}

    def is_heavy(module: str) -> bool:
        if module not in heavy:
            heavy[module] = False  # a circle adds nothing
            parents = [module.rsplit(".", n)[0] for n in range(1, module.count(".") + 1)]
            loads = [*top.get(module, ()), *(p for p in parents if p in known)]
            heavy[module] = any(m.split(".")[0] in HEAVY or (m in known and is_heavy(m)) for m in loads)
        return heavy[module]

    return [
        f"{files[module].relative_to(root)}:{line} imports {target}"
        for module, imports in lazy.items()
        for line, target in imports
        if target.split(".")[0] == library and not is_heavy(target)
    ]


def test_no_function_level_import_of_a_light_library_module():
    """Such an import exists only to break an import circle: move the shared code one level down
    (as labels.py, folders.py and loaded_model.py were) and import it at the top."""
    assert lazy_library_imports(ROOT) == []


def test_a_function_level_import_is_kept_only_for_a_heavy_module(tmp_path):
    library = tmp_path / "lib"
    sources = {
        "__init__.py": "",
        "light.py": "import json\n",
        "heavy.py": "import torch\n",
        "through.py": "from lib import heavy\n",  # heavy by what it imports
        "user.py": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from lib.light import x\n"
            "def f():\n    from lib import light\n"
            "def g():\n    from lib.heavy import y\n    import lib.through\n"
            "def h():\n    from lib.light import z\n"
        ),
    }
    library.mkdir()
    for name, source in sources.items():
        (library / name).write_text(source)
    assert lazy_library_imports(tmp_path, "lib") == [
        f"{Path('lib/user.py')}:5 imports lib.light",
        f"{Path('lib/user.py')}:10 imports lib.light",
    ]
