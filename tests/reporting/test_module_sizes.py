"""No module under kcal_pipeline/reporting/ grows past MAX_LINES lines (issue 32's bar): a module that
long mixes concerns a reader should find in separate files. A failure names each module and its
line count."""

from pathlib import Path

import kcal_pipeline.reporting as reporting

MAX_LINES = 500
REPORTING = Path(reporting.__file__).parent


def oversized_modules(root: Path, limit: int) -> dict[str, int]:
    """Every .py file under `root` (subpackages too) with more than `limit` lines: {path relative
    to root: line count}."""
    counts = {p.relative_to(root).as_posix(): len(p.read_text().splitlines()) for p in root.rglob("*.py")}
    return {name: n for name, n in sorted(counts.items()) if n > limit}


def test_no_reporting_module_is_over_500_lines():
    too_long = oversized_modules(REPORTING, MAX_LINES)
    assert not too_long, f"modules in kcal_pipeline/reporting/ over {MAX_LINES} lines: " + ", ".join(
        f"{name} ({n} lines)" for name, n in too_long.items()
    )


def test_a_module_over_the_limit_is_named_with_its_line_count_and_one_at_it_is_not(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * 501)
    (tmp_path / "at_limit.py").write_text("x = 1\n" * 500)
    (tmp_path / "notes.txt").write_text("x\n" * 900)  # not a module
    assert oversized_modules(tmp_path, 500) == {"pkg/long.py": 501}
