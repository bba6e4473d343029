"""The parts every report page is made of: sections (one figure or one no-data sentence, or
tables), the run table and the page around them, with inline CSS so a page is one offline file."""

from __future__ import annotations

from dataclasses import dataclass

from matplotlib.figure import Figure

from kcal_pipeline.reporting import plots
from kcal_pipeline.reporting.html import esc

CSS = """body{font-family:system-ui,sans-serif;margin:1.5em 2em;color:#222;line-height:1.4}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.8em;border-bottom:1px solid #ddd}
.scroll{overflow-x:auto;max-width:100%;margin:.5em 0 1.2em}
table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:.2em .6em;white-space:nowrap}
th{background:#f0f0f0;position:sticky;top:0}td.num{text-align:right;font-variant-numeric:tabular-nums}
caption{text-align:left;font-weight:bold;padding:.3em 0}
figure{margin:.5em 0}svg.figure{max-width:100%;height:auto}
.note{color:#555;font-size:.9em;max-width:60em}.nodata{font-style:italic;color:#555}
nav a{margin-right:1em}"""


@dataclass(frozen=True)
class Section:
    """One part of a page: a figure section holds one figure or one no-data sentence (`body` is
    HTML); a table section holds tables."""

    id: str
    title: str
    note: str  # HTML
    body: str  # HTML
    kind: str  # "figure", "table", "text"

    def html(self) -> str:
        note = f'<p class="note">{self.note}</p>' if self.note else ""
        head = f'<section id="{esc(self.id)}" class="{self.kind}-section"><h2>{esc(self.title)}</h2>'
        return f"{head}{note}{self.body}</section>"


def figure_section(id_: str, title: str, note: str, figure: Figure | str, caption: str = "") -> Section:
    """A section of one figure, or of the sentence that stands in for it."""
    if isinstance(figure, str):
        body = f'<p class="nodata">{esc(figure)}</p>'
    else:
        cap = f'<figcaption class="note">{esc(caption)}</figcaption>' if caption else ""
        body = f"<figure>{plots.svg(figure, title)}{cap}</figure>"
    return Section(id_, title, note, body, "figure")


def page(title: str, sections: list[Section]) -> str:
    """A whole self-contained page: title, a link to each section, the sections."""
    nav = "".join(f'<a href="#{esc(s.id)}">{esc(s.title)}</a>' for s in sections)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{CSS}</style></head><body>
<h1>{esc(title)}</h1>
<nav>{nav}</nav>
{"".join(s.html() for s in sections)}
</body></html>
"""


def run_table(meta: dict) -> str:
    """The run's settings as a two-column table."""
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in meta.items())
    return f'<div class="scroll"><table>{rows}</table></div>'
