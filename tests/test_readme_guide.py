"""README.md stays a guide: short, linking every docs/ page once, and no link or cited section
points nowhere (the detail lives in docs/, where a dead link would hide it)."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
MAX_README_LINES = 300
MAX_LINE_CHARS = 200
# [text](target) outside code; a target's #anchor and "title" are not part of the path.
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
# A code or SQL comment citing a section of the README or a docs page: (README, 'Using it'),
# (docs/methods.md, "Confidence intervals").
CITATION = re.compile(r"\b(README|docs/[\w-]+\.md),? [\"']([^\"'\n]+)[\"']")
CITING_SOURCES = ("kcal_pipeline", "assets", "resources", "sql", "scripts")


def prose(text: str) -> str:
    """The Markdown without fenced blocks and inline code, where brackets are not links."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def links(page: Path) -> list[str]:
    return LINK.findall(prose(page.read_text("utf-8")))


def relative(target: str) -> bool:
    return not re.match(r"[a-z][a-z0-9+.-]*:|#", target)


def doc_pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def test_the_readme_is_a_guide_of_at_most_300_short_lines():
    lines = README.read_text("utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; move detail into docs/"
    long = [n for n, line in enumerate(lines, 1) if len(line) > MAX_LINE_CHARS]
    assert not long, f"README.md lines over {MAX_LINE_CHARS} characters: {long}"


def test_every_docs_page_is_linked_from_the_readme_exactly_once():
    targets = [t.split("#")[0] for t in links(README) if relative(t)]
    counts = {page.name: targets.count(f"docs/{page.name}") for page in doc_pages()}
    assert counts, "no docs/*.md pages"
    assert {name: n for name, n in counts.items() if n != 1} == {}, "docs pages linked not exactly once"


@pytest.mark.parametrize("page", [README, *doc_pages()], ids=lambda p: p.relative_to(REPO).as_posix())
def test_relative_links_point_to_files_that_exist(page):
    missing = [
        target
        for target in links(page)
        if relative(target) and not (page.parent / target.split("#")[0]).exists()
    ]
    assert not missing, f"{page.relative_to(REPO)} links to missing files: {missing}"


def test_the_link_parser_sees_links_and_skips_code():
    """The checks above are only as good as the parser: it finds links, not code that looks like one."""
    text = "[a](docs/x.md#s) and [b](https://e.org) `[c](nope.md)`\n```\n[d](nope.md)\n```\n![i](pic.png)\n"
    assert LINK.findall(prose(text)) == ["docs/x.md#s", "https://e.org"]
    assert [t for t in LINK.findall(prose(text)) if relative(t)] == ["docs/x.md#s"]


def section_exists(page: Path, name: str) -> bool:
    """A heading or a bold lead of that name: how the README and the docs open a section."""
    text = page.read_text("utf-8")
    return bool(re.search(rf"^#+ {re.escape(name)}|\*\*{re.escape(name)}", text, re.M))


def cited_sections() -> list[tuple[str, str, str]]:
    cited = []
    for folder in CITING_SOURCES:
        for source in sorted((REPO / folder).rglob("*")):
            if source.suffix in {".py", ".sql", ".sh"} and source.is_file():
                for page, name in CITATION.findall(source.read_text("utf-8", errors="replace")):
                    cited.append((source.relative_to(REPO).as_posix(), page, name))
    return cited


def test_sections_cited_by_code_exist_where_they_are_cited():
    cited = cited_sections()
    assert ("kcal_pipeline/core/warehouse.py", "README", "Using it") in cited  # the parser finds them
    missing = [
        (source, page, name)
        for source, page, name in cited
        if not section_exists(README if page == "README" else REPO / page, name)
    ]
    assert not missing, f"code cites sections that do not exist (file, page, section): {missing}"
