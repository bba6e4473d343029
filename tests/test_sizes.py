"""No module over MAX_LINES lines and no function over MAX_FUNCTION_LINES lines in kcal's own
packages (issue 53's bar): a module that long mixes concerns a reader should find in separate
files, a function that long does several things its steps should name. The few exceptions are
listed by name with the reason each is kept whole; a failure names each module or function and its
length, and an exception that no longer needs its place is named too, so the list only shrinks."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kcal_pipeline", "assets", "resources")
MAX_LINES = 500
MAX_FUNCTION_LINES = 80

# path (or path::function) -> why it stays whole
MODULE_EXCEPTIONS: dict[str, str] = {}
FUNCTION_EXCEPTIONS: dict[str, str] = {}


def oversized_modules(root: Path, limit: int) -> dict[str, int]:
    """Every .py file under `root` (subpackages too) with more than `limit` lines: {path relative
    to root: line count}."""
    counts = {p.relative_to(root).as_posix(): len(p.read_text().splitlines()) for p in root.rglob("*.py")}
    return {name: n for name, n in sorted(counts.items()) if n > limit}


def oversized_functions(root: Path, limit: int) -> dict[str, int]:
    """Every function or method under `root` longer than `limit` lines (decorators excluded,
    docstring included): {"path::name": lines}."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > limit:
                    found[f"{path.relative_to(root).as_posix()}::{node.name}"] = n
    return found


def _ours(found_in_each: list[dict[str, int]]) -> dict[str, int]:
    return {name: n for found in found_in_each for name, n in found.items()}


def test_no_module_is_over_500_lines():
    found = _ours(
        [{f"{p}/{k}": n for k, n in oversized_modules(ROOT / p, MAX_LINES).items()} for p in PACKAGES]
    )
    too_long = {k: n for k, n in found.items() if k not in MODULE_EXCEPTIONS}
    assert not too_long, f"modules over {MAX_LINES} lines: " + ", ".join(
        f"{k} ({n})" for k, n in too_long.items()
    )
    assert not set(MODULE_EXCEPTIONS) - set(found), "no longer over the limit: remove from MODULE_EXCEPTIONS"


def test_no_function_is_over_80_lines():
    found = _ours(
        [
            {f"{p}/{k}": n for k, n in oversized_functions(ROOT / p, MAX_FUNCTION_LINES).items()}
            for p in PACKAGES
        ]
    )
    too_long = {k: n for k, n in found.items() if k not in FUNCTION_EXCEPTIONS}
    assert not too_long, f"functions over {MAX_FUNCTION_LINES} lines: " + ", ".join(
        f"{k} ({n})" for k, n in too_long.items()
    )
    assert not set(FUNCTION_EXCEPTIONS) - set(found), (
        "no longer over the limit: remove from FUNCTION_EXCEPTIONS"
    )


def test_a_module_over_the_limit_is_named_with_its_line_count_and_one_at_it_is_not(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * 501)
    (tmp_path / "at_limit.py").write_text("x = 1\n" * 500)
    (tmp_path / "notes.txt").write_text("x\n" * 900)  # not a module
    assert oversized_modules(tmp_path, 500) == {"pkg/long.py": 501}


def test_a_function_over_the_limit_is_named_and_one_at_it_is_not(tmp_path):
    body = "    x = 1\n"
    (tmp_path / "m.py").write_text(
        "def at_limit():\n" + body * 79 + "\n\nclass C:\n    def long(self):\n" + "        x = 1\n" * 80
    )
    assert oversized_functions(tmp_path, 80) == {"m.py::long": 81}
