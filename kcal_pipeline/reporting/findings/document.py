"""The findings document: provenance header, verdict rule, summary table, one section per paper."""

from __future__ import annotations

import hashlib
import math
import os
import platform
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    from kcal_pipeline.scoring.models.registry import ModelEntry

from kcal_pipeline.core.versions import stored_version
from kcal_pipeline.evaluation.resamples import N_RESAMPLES
from kcal_pipeline.evaluation.tables import BASELINE
from kcal_pipeline.reporting.findings.core import (
    DESCRIPTIVE,
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    NOT_TESTABLE,
    SEED,
    VERDICTS,
    Claim,
    Finding,
    StoreTables,
    fmt,
    ordered_claims,
)
from kcal_pipeline.reporting.findings.kissling import vote_levels
from kcal_pipeline.reporting.findings.selections import FEW_DEV, estimators_in, headline_rows
from kcal_pipeline.reporting.findings.verdicts import detects


def _cell(text: object) -> str:
    """Text safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _shown_verdict(f: Finding) -> str:
    """The verdict as a cell: not testable with its failed precondition, inconclusive with its MDE."""
    if f.verdict == NOT_TESTABLE:
        return f"{NOT_TESTABLE} here: {f.note}"
    if f.verdict == DESCRIPTIVE:
        return f"_{DESCRIPTIVE}_"
    if f.verdict == INCONCLUSIVE and not math.isnan(f.mde):
        return f"**{f.verdict}** (MDE {fmt(f.mde)})"
    return f"**{f.verdict}**"


def _here(findings: list[Finding], models: Sequence[str]) -> str:
    """One sentence per model on what this store shows for a claim."""
    parts = []
    for model in models:
        verdicts = [f.verdict for f in findings if f.model_id == model]
        counts = {v: verdicts.count(v) for v in VERDICTS if v in verdicts}
        if set(counts) == {HOLDS}:
            what = "the effect is present"
        elif set(counts) == {NOT_TESTABLE}:
            what = "it cannot be tested on this store"
        elif set(counts) == {FAILS}:
            what = "the claim does not hold here (the opposite is shown)"
        elif HOLDS in counts:
            what = "the effect is present in part"
        elif FAILS in counts:
            what = "the claim does not hold in part, the rest is inconclusive or not testable"
        else:
            what = "inconclusive at this sample size"
        listing = ", ".join(f"{n} {v}" for v, n in counts.items())
        parts.append(f"{model}: {what} ({listing}).")
    return " ".join(parts)


# --- provenance --------------------------------------------------------------------------------

# A GGUF file's quantization type as its name states it (llama.cpp's naming: …Q4_1.gguf, …F16.gguf).
_GGUF_TYPE = re.compile(r"[.-]((?:I?Q\d\w*)|BF16|F16|F32)\.gguf$", re.IGNORECASE)
_INSTRUCT = re.compile(r"instruct|chat|[-_]it(?:\b|[-_])|sft", re.IGNORECASE)


def model_provenance(entry: ModelEntry | None, model_id: str) -> str:
    """What the numbers were computed with, read from the model's registry entry: file, quantization
    and dtype (a GGUF is de-quantised to float32 by scoring.models.gguf), instruct or base (from
    the id's naming, e.g. '-Instruct', '-it', '-chat'). No entry: the model left the registry."""
    if entry is None:
        return f"`{model_id}`: not in the store's model registry (file, dtype unknown)"
    if entry.source == "gguf_package":
        where, gguf = f"{entry.file} from the Python package {entry.package}", entry.file
    elif entry.source == "gguf_file":
        where, gguf = str(entry.path), str(entry.path)
    elif entry.source == "hf":
        where, gguf = f"hub {entry.id} at revision {entry.revision}", None
    else:
        where, gguf = str(entry.path), None
    if gguf:
        kind = _GGUF_TYPE.search(gguf)
        weights = f"GGUF {kind[1].upper() if kind else 'of unstated type'}, de-quantised to float32"
    else:
        weights = f"not quantized, {entry.dtype}"
    tuned = "instruction-tuned" if _INSTRUCT.search(entry.id) else "base (no instruct/chat/-it in the id)"
    return f"`{entry.id}` ({entry.kind}): {where}; {weights}; {tuned}"


def kcal_commit(root: Path | None = None) -> str:
    """The checkout's commit (with '+changes' when the tree differs from it), 'unknown' outside one."""
    root = Path(root) if root else Path(__file__).resolve().parents[3]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root, capture_output=True, text=True, timeout=30, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}{'+changes' if dirty else ''}" if head else "unknown"


def store_data_version(home: Path) -> str:
    """One hash over every stored partition's data version (core.versions, in the Parquet metadata)
    and its path: equal hashes mean the findings read the same data."""
    home = Path(home)
    pairs = sorted(
        (str(p.relative_to(home)), stored_version(p) or "unreadable") for p in home.rglob("part.parquet")
    )
    if not pairs:
        return "no partitions"
    digest = hashlib.sha256("\n".join(f"{path} {version}" for path, version in pairs).encode())
    return f"{digest.hexdigest()[:20]} over {len(pairs)} partitions"


DIRTY_WARNING = (
    "**warning: written from uncommitted changes (--allow-dirty): no commit reproduces this document**"
)


def machine_description() -> str:
    """CPU cores and model, and the GPUs nvidia-smi lists (none without it)."""
    cpu = platform.processor() or platform.machine()
    try:
        names = [ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                 if ln.startswith("model name")]  # fmt: skip
        cpu = names[0] if names else cpu
    except OSError:
        pass
    gpus = "none detected"
    if shutil.which("nvidia-smi"):
        try:
            listed = subprocess.run(
                ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=30, check=True,
            ).stdout.split("\n")  # fmt: skip
            gpus = ", ".join(g.strip() for g in listed if g.strip()) or gpus
        except (OSError, subprocess.SubprocessError):
            pass
    return f"{os.cpu_count()} CPU cores ({cpu}); GPU: {gpus}"


def provenance(
    home: Path,
    models: Sequence[str],
    entries: Mapping[str, ModelEntry | None],
    command: Sequence[str],
    *,
    commit: str | None = None,
    machine: str | None = None,
    when: datetime | None = None,
) -> list[str]:
    """The document's header lines: each model as its registry entry describes it, the kcal commit,
    the store's data version, the exact command, date and machine. `commit`, `machine`, `when`
    default to this checkout, this machine and now (tests pin them)."""
    when = when or datetime.now(UTC)
    lines = [f"- Model {model_provenance(entries.get(m), m)}" for m in models]
    commit = commit or kcal_commit()
    return [
        *lines,
        f"- kcal commit: {commit}" + (f" — {DIRTY_WARNING}" if commit.endswith("+changes") else ""),
        f"- Store: `{home}`, data version {store_data_version(home)}",
        f"- Command: `{shlex.join(command)}`",
        f"- Date: {when.strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Machine: {machine or machine_description()}",
    ]


def describe_sample(t: StoreTables) -> str:
    """What one model's findings rest on: test instances per relation, paraphrase templates, the
    template kinds scored (what makes a claim testable or not)."""
    head = headline_rows(t)
    base = head.filter(pl.col("estimator") == BASELINE) if not head.is_empty() else head
    if base.is_empty():
        return "no test-split estimates"
    per_relation = base.group_by("relation_id").len().sort("relation_id")
    counts = ", ".join(f"{r} {n}" for r, n in per_relation.iter_rows())
    counts += f"; {per_relation.height} relation clusters (the bootstrap's resampling units)"
    scored = t.estimates.filter(pl.col("estimator") == BASELINE).select("relation_id", "template_id").unique()
    kinds = scored.join(
        t.templates.select("relation_id", "template_id", "kind"), on=["relation_id", "template_id"]
    )
    levels = vote_levels(estimators_in(head))
    scored_kinds = ", ".join(sorted(kinds["kind"].unique().to_list()))
    return (
        f"test instances {base.height} ({counts}); paraphrase templates per instance: up to "
        f"{max(levels, default=1)}; template kinds scored: {scored_kinds}"
    )


def _where_cell(c: Claim) -> str:
    """The paper's file and the sections, tables and figures a claim rests on (kcal's own claims:
    their literature)."""
    if c.sources and c.paper.file:
        return f"`{c.paper.file}` {c.where}"
    return c.where


def _quotes(c: Claim) -> list[str]:
    """The paper's own words behind a claim, one quoted line per citation."""
    if not c.sources:
        return []
    return ["- **The paper says.**", *(f"  - {s.where()}: “{' '.join(s.quote.split())}”" for s in c.sources)]


def _has_interval(f: Finding) -> bool:
    return f.verdict not in (NOT_TESTABLE, DESCRIPTIVE) and not (
        math.isnan(f.ci_low) or math.isnan(f.ci_high)
    )


def _holm_cell(f: Finding) -> str:
    """The Holm-adjusted p and the number of comparisons it was adjusted over (m = 1: unadjusted)."""
    if f.m_holm < 1 or math.isnan(f.p_holm):
        return ""
    return f"{f.p_holm:.3g} ({f.m_holm})"


def _inside_cell(f: Finding, c: Claim) -> str:
    if not _has_interval(f):
        return ""
    if f.paper_inside is None:
        return "no effect printed" if c.number.effect is None else "n/a"
    return "inside" if f.paper_inside else "outside"


def _number_cell(f: Finding) -> str:
    """kcal's number with its interval, as the summary shows it (the first item of `numbers`)."""
    return f.numbers.split("; ")[0] if f.verdict != NOT_TESTABLE else ""


# The verdict rule and how to read the summary: the document's fixed text after its provenance.
VERDICT_RULE = (
    "**Verdicts.** A claim about a difference **holds** when the 95 % interval of the difference "
    "(a paired bootstrap where both sides are on the same instances: the same resamples for both, "
    f"relations then instances drawn, B = {N_RESAMPLES}, seed {SEED}, bias-corrected so that it "
    "contains its point) excludes 0 in the claimed direction, **does not hold** when it excludes 0 in "
    "the other direction, and is **inconclusive at this sample size** otherwise; an inconclusive "
    "difference shows its minimum detectable effect (MDE = (z₀.₉₇₅ + z₀.₈₀) · sd, sd = interval "
    "width / (2 · 1.96): the smallest effect this n finds with 80 % power) and, where the paper "
    "states its effect, whether that lies inside the interval. Several comparisons of one claim "
    "on one model are Holm–Bonferroni adjusted (p from each interval by the normal "
    "approximation); a verdict that does not survive becomes inconclusive. A claim that is not a "
    "difference (a criterion) states its numeric criterion in its section; a **descriptive** row "
    "shows numbers beside the paper's with no verdict (a criterion that could not fail here, or a "
    "sensitivity table). **Not testable here** names what failed (e.g. fewer than "
    f"{FEW_DEV} dev instances behind a fitted parameter, or a claim about several models on a store "
    "of one) and the command that would test it."
)
READING_THE_SUMMARY = (
    "**Reading the summary.** *where*: the paper's file in `../shared/papers/`, its section and table "
    "or figure; each claim's section quotes the sentence or table cells it rests on (a test finds "
    "every quote in its file, and every number shown as the paper's in a quote). *paper*: the "
    "paper's number as printed, with its model and setting (an effect computed from printed numbers "
    "says how; a figure without printed numbers says so). *Holm p (m)*: the row's two-sided p, "
    "Holm-adjusted over the m comparisons of its claim on its model (m = 1: unadjusted). *paper's "
    "effect in interval*: whether the effect the paper prints lies inside kcal's 95 % interval. "
    "*MDE detects it*: whether this sample's minimum detectable effect (80 % power, two-sided 5 %) is "
    "at most the paper's effect, i.e. whether kcal could have found it."
)


def render_findings(
    findings: Sequence[Finding],
    models: Sequence[str],
    samples: Mapping[str, str] | None = None,
    header: Sequence[str] | None = None,
    regenerate: str = "kcal findings --out docs/findings.md",
) -> str:
    """The findings document (Markdown): its provenance (`header`: provenance's lines), the verdict
    rule, what each model's findings rest on (`samples`: label → describe_sample), a summary table
    (paper, table or figure, claim, model, the paper's number, kcal's number, verdict), then one
    section per paper with each claim's setting, preconditions, test and rows."""
    by_claim: dict[str, list[Finding]] = {}
    for f in findings:
        by_claim.setdefault(f.claim, []).append(f)
    claims = ordered_claims()
    lines = [
        *_preamble(models, samples, header, regenerate),
        "## Summary",
        "",
        *_summary_table(claims, by_claim, models),
    ]
    for paper in sorted({c.paper for c in claims}, key=lambda p: p.seed):
        lines += ["", f"## {paper.short}", "", f"{paper.citation}."]
        for c in (c for c in claims if c.paper == paper):
            lines += _claim_section(c, by_claim.get(c.key, []), models)
    return "\n".join(lines) + "\n"


def _preamble(
    models: Sequence[str], samples: Mapping[str, str] | None, header: Sequence[str] | None, regenerate: str
) -> list[str]:
    """The title, what the document is and how to regenerate it, its provenance, the verdict rule,
    how to read the summary and what each model's findings rest on."""
    return [
        "# Findings: the seed papers' claims re-tested",
        "",
        "Generated by `kcal findings` from the tables of kcal stores; models: "
        + ", ".join(f"`{m}`" for m in models)
        + ". Every number is on the test split and full answer spaces (the dev split only tunes "
        "thresholds and recalibration), reduction Sum unless a claim says otherwise. The paper's "
        "number is in the same metric and unit as kcal's where the paper states one, with the model "
        f"it was measured on. Regenerate: `{regenerate}`.",
        "",
        *(["**Provenance.**", "", *header, ""] if header else []),
        VERDICT_RULE,
        "",
        READING_THE_SUMMARY,
        "",
        *(f"- {label}: {text}" for label, text in (samples or {}).items()),
        *([""] if samples else []),
    ]


def _summary_table(
    claims: Sequence[Claim], by_claim: Mapping[str, list[Finding]], models: Sequence[str]
) -> list[str]:
    """One row per finding, claims in document order (a model column only for several models)."""
    summary = []
    one_model = len(models) == 1
    for c in claims:
        for i, f in enumerate(by_claim.get(c.key, [])):
            summary.append(
                (
                    f"{c.paper.seed}",
                    _where_cell(c),
                    c.title,
                    *(() if one_model else (f.model_id,)),
                    f.subject,
                    c.number.shown() if i == 0 else "(as above)",  # one claim's rows share it
                    _number_cell(f),
                    _holm_cell(f),
                    _inside_cell(f, c),
                    detects(f.mde, c.number.effect) if _has_interval(f) else "",
                    _shown_verdict(f),
                )
            )
    return _table(
        [
            "seed", "where", "claim", *(() if one_model else ("model",)), "compared", "paper",
            "kcal [95 % interval]", "Holm p (m)", "paper's effect in interval", "MDE detects it",
            "verdict",
        ],
        summary,
    )  # fmt: skip


def _claim_section(c: Claim, rows: list[Finding], models: Sequence[str]) -> list[str]:
    """A claim's section: where it is in the paper and the paper's words, setting and number, its
    preconditions, test and inputs, what this store shows, and its findings' rows."""
    return [
        "",
        f"### {c.title}",
        "",
        f"- **Where.** {_where_cell(c)}.",
        *_quotes(c),
        f"- **The paper's setting.** {c.setting}",
        f"- **The paper's number.** {c.number.shown()}.",
        *([f"- **Preconditions.** {'; '.join(c.preconditions)}."] if c.preconditions else []),
        f"- **Test** ({c.kind}). {c.rule}",
        f"- **Reads.** {c.reads} (profile stage `{c.stage}`).",
        f"- **Here.** {_here(rows, models)}",
        "",
        *_table(
            ["model", "compared", "verdict", "numbers", "note"],
            [
                (
                    f.model_id,
                    f.subject,
                    _shown_verdict(f),
                    f.numbers,
                    f.note if f.verdict != NOT_TESTABLE else "",
                )
                for f in rows
            ],
        ),
    ]


def _duration(seconds: object) -> str:
    if not isinstance(seconds, int | float):
        return "time not recorded"
    return f"{int(seconds // 60)} min {seconds % 60:02.0f} s"


def profile_lines(root: Path, record: Mapping) -> list[str]:
    """The provenance of a findings profile (kcal findings --build): how it was built (scale,
    command, commit, total time, BEAR's and the template file's hashes, library versions) and per
    stage its purpose, how its relations were chosen, relations, settings, probe seed, dev and test
    instances, statements, build time and store data version, so every verdict can be traced to the
    store that decided it."""
    command = shlex.join(["kcal", *record.get("command", [])]) if record.get("command") else "not recorded"
    built_at = record.get("kcal_commit") or "unknown"
    dirty = f" — {DIRTY_WARNING}" if built_at.endswith("+changes") else ""
    lines = [
        f"- Findings profile `{root}` at scale {record.get('scale', '?')}: built by `{command}` "
        f"(kcal commit {built_at}{dirty}), {record.get('started', '?')} to "
        f"{record.get('finished') or 'unfinished'}, {_duration(record.get('seconds'))} on this machine",
    ]
    for label, path, digest in (
        ("BEAR", record.get("bear"), record.get("bear_sha256")),
        ("Kissling templates", record.get("bear_templates"), record.get("bear_templates_sha256")),
    ):
        if path:
            lines.append(f"- {label}: `{path}`, sha256 {digest or 'not recorded'}")
    if record.get("libraries"):
        lines.append("- Libraries: " + ", ".join(f"{k} {v}" for k, v in record["libraries"].items()))
    if record.get("note"):  # what the record cannot show by itself, e.g. a build resumed after a fix
        lines.append(f"- Note on this build: {record['note']}")
    for entry in record.get("stages", []):
        name = entry.get("name", "?")
        if entry.get("skipped"):
            lines.append(f"- Stage `{name}`: skipped ({entry['skipped']})")
            continue
        settings = ", ".join(f"{k}={v}" for k, v in sorted(entry.get("settings", {}).items()))
        relations = entry.get("relations", [])
        if not isinstance(entry.get("statements"), int):
            purpose = entry.get("purpose", "")
            lines.append(f"- Stage `{name}` ({purpose}): {', '.join(relations)}; {settings}; not finished")
            continue
        instances = entry.get("instances") or {}
        dev = sum(v.get("dev", 0) for v in instances.values())
        test = sum(v.get("test", 0) for v in instances.values())
        counts = f"{dev:,} dev and {test:,} test instances" if instances else "instances not recorded"
        chosen = f", chosen as {entry['chosen']}" if entry.get("chosen") else ""
        lines.append(
            f"- Stage `{name}` ({entry.get('purpose', '')}): {len(relations)} relations{chosen} "
            f"({', '.join(relations)}); {settings}; probe seed {entry.get('seed', 'not recorded')}; "
            f"{counts}; {entry['statements']:,} statements; built in "
            f"{_duration(entry.get('seconds'))}; data version {store_data_version(root / name)}"
        )
    return lines
