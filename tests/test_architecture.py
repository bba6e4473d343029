"""The domain library stays free of Dagster, so it can be used (and tested) on its own."""

import ast
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "kcal_pipeline"


def imported_modules(tree: ast.Module):
    """(module name, imported at module level?) for every import in a file."""
    top = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((a.name, id(node) in top) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module, id(node) in top


def test_no_dagster_imports_in_kcal_pipeline():
    offenders = []
    for path in LIB.rglob("*.py"):
        for name, top_level in imported_modules(ast.parse(path.read_text())):
            root = name.split(".")[0]
            # cli.py may reach the Dagster layer lazily (inside a command), never at module level.
            if root == "dagster" or (root in ("assets", "resources") and top_level):
                offenders.append(f"{path.relative_to(LIB.parent)}: {name}")
    assert offenders == []


def test_the_check_sees_a_top_level_dagster_import():
    tree = ast.parse("import dagster\ndef f():\n    from assets.runner import x\n")
    assert list(imported_modules(tree)) == [("dagster", True), ("assets.runner", False)]
