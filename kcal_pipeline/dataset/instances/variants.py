"""Template variants (epistemic markers, perturbations, contexts) and answer-space subsampling.

Markers (METHODS §2) test whether a model's likelihood responds to stated confidence: a verbal
marker goes inside the clause, where the catalog's marked form puts its [M] slot (curated
templates) or where marker_position finds a place (other templates; none found = no verbal
variant, never a sentence-initial one); a numeric marker is the prefix "I'm x% confident that".
Perturbations
(METHODS §4) test whether knowledge-gap decisions survive changes that leave the fact unchanged.
Both must leave subject and object alone, so every edit works on the template text *outside*
the `[X]`/`[Y]` slots, before filling: fill() then reports correct spans for the variant too.
Seeded choices use derived_rng(seed, template_id, variant), so a variant never depends on which
other templates are in the table. The random perturbations (extra space, typo) are drawn once per
perturbation seed (Zhao et al. use 4, 44 and 99), so consistency can report their mean and spread:
each draw is its own template, `<parent>:<variant>-s<seed>`, with the seed in `perturbation_seed`.
Context variants (demonstrations the statement is conditioned on, never scored) are described in
context.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import polars as pl

from kcal_pipeline.dataset.instances.context import CONTEXT_KINDS, context_template
from kcal_pipeline.dataset.instances.sampling import derived_rng
from kcal_pipeline.dataset.templates import (
    MARKER_SLOT,
    NUMERIC_LEVELS,
    OBJECT_SLOT,
    SUBJECT_SLOT,
    VERBAL_MARKERS,
    check_template,
    numeric_variant,
)

TEMPLATE_COLUMNS = ["relation_id", "template_id", "text", "kind", "source", "rank"]
VARIANT_COLUMNS = [*TEMPLATE_COLUMNS, "parent_id", "variant", "perturbation_seed"]
# Templates-table column of a relation's hand-written markers, [{variant, text}] on their parent.
EXPLICIT_MARKERS = "explicit_markers"
EXPLICIT_MARKERS_TYPE = pl.List(pl.Struct({"variant": pl.Utf8, "text": pl.Utf8}))
# Only base templates get variants: a variant of a variant would compound two edits.
BASE_KINDS = ("curated", "generated")

_SLOTS = (SUBJECT_SLOT, OBJECT_SLOT)
# A form of "be" or a modal after a space: the marker follows it ("is certainly located", "can
# certainly be found"), the mid position English gives such adverbs.
_AFTER = re.compile(r"(?<= )(is|are|was|were|can|could|will|would|may|might|must|should)(?= )")
# A lower-case word right after a slot: the marker goes between them if the word looks like a
# verb ("[X] certainly died in [Y]").
_SLOT_THEN_WORD = re.compile(r"\[[XY]\] ([a-z]+)\b")
_IRREGULAR_VERBS = frozenset((
    "has", "have", "had", "does", "did", "do", "made", "won", "grew", "held", "came", "went", "got",
    "gave", "took", "left", "ran", "wrote", "sang", "led", "built", "bought", "found", "knew", "met",
    "paid", "said", "saw", "sold", "sent", "spoke", "stood", "taught", "told", "thought", "became",
    "began", "brought", "fought", "flew", "lost", "put", "set",
))  # fmt: skip
_NOT_VERBS = frozenset(
    ("its", "his", "hers", "ours", "yours", "theirs", "this", "thus", "as", "us", "always", "perhaps", "news")
)
_WORD = re.compile(r"[^\W\d_]+")
# Typos replace a letter by a neighbouring key, the commonest kind of real typing error.
_QWERTY_ROWS = ("qwertyuiop", "asdfghjkl", "zxcvbnm")
_NEIGHBOURS = {c: row[i - 1 : i] + row[i + 1 : i + 2] for row in _QWERTY_ROWS for i, c in enumerate(row)}


# --- text edits ---------------------------------------------------------------------------------


def _lower_first(text: str) -> str:
    """Lower a sentence-initial word so it can follow a prefix; slots and acronyms keep their case."""
    if text.startswith(_SLOTS) or len(text) < 2 or not text[1].islower():
        return text
    return text[0].lower() + text[1:]


def marker_position(text: str) -> int | None:
    """Where a verbal marker goes in a template without a curated marked form, by rule: right after
    the first "is/are/was/were" or modal that follows a space; else right before a verb-like word
    (ending in -s or -ed, or a common irregular verb) that directly follows a slot. None when
    neither exists: such a template gets no verbal marker rather than a sentence-initial one."""
    match = _AFTER.search(text)
    if match:
        return match.end() + 1
    for match in _SLOT_THEN_WORD.finditer(text):
        word = match.group(1)
        if word in _IRREGULAR_VERBS or (word not in _NOT_VERBS and word.endswith(("s", "ed"))):
            return match.start(1)
    return None


def verbal_marker(text: str, marker: str, marked: str | None = None) -> str | None:
    """The template with a verbal marker: in the curated marked form's [M] slot when there is one,
    else at marker_position (None if the rule finds no place)."""
    if marked:
        return marked.replace(MARKER_SLOT, marker, 1)
    at = marker_position(text)
    return None if at is None else f"{text[:at]}{marker} {text[at:]}"


def numeric_marker(text: str, percent: int) -> str:
    return f"I'm {percent}% confident that {_lower_first(text)}"


def _template_spans(text: str) -> list[tuple[int, int]]:
    """Character ranges of the text outside the slots: the only places an edit may touch."""
    cuts = sorted((text.index(s), text.index(s) + len(s)) for s in _SLOTS)
    return [(a, b) for a, b in ((0, cuts[0][0]), (cuts[0][1], cuts[1][0]), (cuts[1][1], len(text))) if a < b]


def extra_space(text: str, seed: int, template_id: str) -> str | None:
    """Double one space, preferring one between two template words; None if there is no space."""
    spaces = [i for a, b in _template_spans(text) for i in range(a, b) if text[i] == " " and i > 0]
    between_words = [i for i in spaces if text[i - 1].isalpha() and text[i + 1 : i + 2].isalpha()]
    choices = between_words or spaces
    if not choices:
        return None
    i = derived_rng(seed, template_id, "extra-space").choice(choices)
    return text[:i] + " " + text[i:]


def typo(text: str, seed: int, template_id: str) -> str | None:
    """Replace one non-initial letter of a ≥4-letter template word by a keyboard neighbour.

    None when the template has no such word (then it gets no typo variant).
    """
    positions = [
        i
        for a, b in _template_spans(text)
        for m in _WORD.finditer(text, a, b)
        if len(m.group()) >= 4
        for i in range(m.start() + 1, m.end())
        if text[i].lower() in _NEIGHBOURS
    ]
    if not positions:
        return None
    rng = derived_rng(seed, template_id, "typo")
    i = rng.choice(positions)
    new = rng.choice(_NEIGHBOURS[text[i].lower()])
    return text[:i] + (new.upper() if text[i].isupper() else new) + text[i + 1 :]


# --- variant tables -----------------------------------------------------------------------------


def _base_rows(templates: pl.DataFrame) -> list[dict]:
    """Curated/generated templates, each with its marked form ("marked_text", None if it has none)
    and its hand-written marker templates ("explicit_markers", [{variant, text}] or None)."""
    marked = pl.col("marked_text") if "marked_text" in templates.columns else pl.lit(None, pl.Utf8)
    explicit = (
        pl.col(EXPLICIT_MARKERS)
        if EXPLICIT_MARKERS in templates.columns
        else pl.lit(None, EXPLICIT_MARKERS_TYPE)
    )
    return (
        templates.filter(pl.col("kind").is_in(BASE_KINDS))
        .select(*TEMPLATE_COLUMNS, marked.alias("marked_text"), explicit.alias(EXPLICIT_MARKERS))
        .to_dicts()
    )


def _variant_row(parent: dict, variant: str, kind: str, text: str, seed: int | None = None) -> dict:
    """The variant's row; a seeded draw's id ends in `-s<seed>` so every draw has its own id."""
    template_id = f"{parent['template_id']}:{variant}" + ("" if seed is None else f"-s{seed}")
    check_template(text, f"variant {template_id}")
    parent = {k: v for k, v in parent.items() if k not in ("marked_text", EXPLICIT_MARKERS)}
    return {
        **parent,
        "template_id": template_id,
        "text": text,
        "kind": kind,
        "source": "variant",
        "parent_id": parent["template_id"],
        "variant": variant,
        "perturbation_seed": seed,
    }


def _frame(rows: list[dict]) -> pl.DataFrame:
    schema = dict.fromkeys(VARIANT_COLUMNS, pl.Utf8) | {"rank": pl.Int32, "perturbation_seed": pl.Int64}
    return pl.DataFrame(rows, schema=schema)


def _marker_kind(variant: str) -> str:
    return "marker_numeric" if variant.startswith("numeric-") else "marker_verbal"


def marker_variants(templates: pl.DataFrame, log: Callable[[str], None] | None = None) -> pl.DataFrame:
    """Verbal and numeric marker variants of every curated/generated template.

    Verbal: at the [M] slot of the template's curated marked form (`marked_text`), else where
    marker_position puts it; a template where the rule finds no place gets no verbal variant, and
    `log` is told how many (and which) did not. Numeric: the "I'm x% confident that" prefix.
    A relation whose catalog entry writes its markers out (marker_templates, e.g. Kissling's BEAR
    file) gets exactly those, verbatim, as variants of the parent that carries them
    (`explicit_markers`, on its first template) and no rule-made ones on any template: the
    paper marks the first paraphrase only, in its own wording ("I'm 50% confident the …").
    A variant keeps its parent's rank, so a marked table lines up with the unmarked one; callers
    that pick the headline template (rank 0) must filter by kind first.
    """
    rows, unplaced = [], []
    parents = _base_rows(templates)
    explicit = {p["relation_id"] for p in parents if p[EXPLICIT_MARKERS]}
    for parent in parents:
        if parent[EXPLICIT_MARKERS]:
            for m in parent[EXPLICIT_MARKERS]:  # verbatim; the source says they are the catalog's
                row = _variant_row(parent, m["variant"], _marker_kind(m["variant"]), m["text"])
                rows.append({**row, "source": parent["source"]})
            continue
        if parent["relation_id"] in explicit:
            continue  # the catalog's markers are its only ones (the paper's setting)
        text = parent["text"]
        verbal = {m: verbal_marker(text, m, parent["marked_text"]) for m in VERBAL_MARKERS}
        if any(v is None for v in verbal.values()):
            unplaced.append(parent["template_id"])
        rows += [_variant_row(parent, m, "marker_verbal", v) for m, v in verbal.items() if v is not None]
        rows += [
            _variant_row(parent, numeric_variant(p), "marker_numeric", numeric_marker(text, p))
            for p in NUMERIC_LEVELS
        ]
    if unplaced and log is not None:
        log(
            f"{len(unplaced)} template(s) without a marked form got no verbal marker variant (no "
            f"copula, modal or verb after a slot to place it by): {', '.join(unplaced[:10])}"
        )
    return _frame(rows)


def check_perturbation_seeds(seeds: Sequence[int]) -> list[int]:
    """The seeds as a list; refuses a bare int, a negative or a repeated seed (two draws with one
    seed would be the same draw counted twice), naming the value."""
    if isinstance(seeds, int | str) or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise ValueError(f"perturbation_seeds must be a list of ints, got {seeds!r}")
    seeds = list(seeds)
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) < len(seeds):
        raise ValueError(f"perturbation_seeds must be distinct non-negative ints (at least one), got {seeds}")
    return seeds


def perturbation_variants(templates: pl.DataFrame, seeds: Sequence[int]) -> pl.DataFrame:
    """Extra-space and typo variants once per seed in `seeds` (ids `<parent>:typo-s<seed>`, the
    seed in `perturbation_seed`). A template without a space or a long enough word simply has no
    extra-space or typo variant. (The one-shot demonstration prefix is a context variant now:
    context_variants, context-fixed being Zhao et al.'s.)"""
    seeds = check_perturbation_seeds(seeds)
    rows = []
    for parent in _base_rows(templates):
        text, tid = parent["text"], parent["template_id"]
        for seed in seeds:
            edits = {"extra-space": extra_space(text, seed, tid), "typo": typo(text, seed, tid)}
            rows += [
                _variant_row(parent, name, "perturbation", new, seed) for name, new in edits.items() if new
            ]
    return _frame(rows)


def context_variants(templates: pl.DataFrame) -> pl.DataFrame:
    """The context variants of every curated/generated template, one per kind of
    context.CONTEXT_KINDS (ids `<parent>:context-1shot`, …): the parent's text behind the
    context slot; the demonstrations are drawn per instance when statements are built."""
    rows = [
        _variant_row(parent, variant, kind, context_template(parent["text"]))
        for parent in _base_rows(templates)
        for kind, (variant, _) in CONTEXT_KINDS.items()
    ]
    return _frame(rows)


# --- answer-space subsampling -------------------------------------------------------------------

# A subsample copy's id: its parent's id, then `#k<k>d<draw>` (e.g. `P36/Q1#k10d2`).
SUBSAMPLE_SUFFIX = r"#k\d+d\d+$"
# answer_space_k of an instance asked on its full answer space, from probe_instances through
# estimates and metrics to SQL (sql/views/_macros.sql full_answer_space); its draw is 0 too.
FULL_ANSWER_SPACE = 0
# Every probe_instances row carries these: an original has parent null, k and draw
# FULL_ANSWER_SPACE and status null; a sweep copy its parent, k, draw (1..) and status.
ANSWER_SPACE_COLUMNS = {
    "parent_instance_id": pl.Utf8,
    "answer_space_k": pl.Int32,
    "answer_space_draw": pl.Int32,
    "answer_space_status": pl.Utf8,
}


def with_full_answer_space(instances: pl.DataFrame) -> pl.DataFrame:
    """Instances as asked on their full answer space, with ANSWER_SPACE_COLUMNS saying so."""
    return instances.with_columns(
        pl.lit(None, pl.Utf8).alias("parent_instance_id"),
        pl.lit(FULL_ANSWER_SPACE, pl.Int32).alias("answer_space_k"),
        pl.lit(FULL_ANSWER_SPACE, pl.Int32).alias("answer_space_draw"),
        pl.lit(None, pl.Utf8).alias("answer_space_status"),
    )


def _subsample(row: dict, k: int, seed: int, draw: int) -> dict:
    gold = set(row["gold_ids"])
    distractors = sorted(o for o in row["option_ids"] if o not in gold)
    # One seeded order per (instance, draw), independent of k: within a draw, smaller answer
    # spaces nest in larger ones, so a sweep's points differ by the options added, not by a new draw.
    derived_rng(seed, row["instance_id"], "subsample", f"draw-{draw}").shuffle(distractors)
    keep = gold | set(distractors[: max(k - len(gold), 0)])
    idx = [i for i, o in enumerate(row["option_ids"]) if o in keep]
    status = "golds_exceed_k" if len(gold) > k else "fewer_options_than_k" if len(idx) < k else "ok"
    return {
        **row,
        "instance_id": f"{row['instance_id']}#k{k}d{draw}",
        "parent_instance_id": row["instance_id"],
        "option_ids": [row["option_ids"][i] for i in idx],
        "option_labels": [row["option_labels"][i] for i in idx],
        "n_options": len(idx),
        "answer_space_k": k,
        "answer_space_draw": draw,
        "answer_space_status": status,
    }


def subsample_answer_space(instances: pl.DataFrame, k: int, seed: int, draw: int = 1) -> pl.DataFrame:
    """Each instance with its answer space cut to k options, every gold kept, order preserved:
    draw `draw` (ids `<instance>#k<k>d<draw>`), its distractors drawn with derived_rng(seed,
    instance, draw), so every draw is its own subsample and smaller k nest in larger ones within it.

    An instance with more than k golds keeps all its golds (and no distractor) rather than lose a
    correct answer; one with fewer than k options keeps them all. answer_space_status says which
    ("ok", "golds_exceed_k", "fewer_options_than_k") so analyses can drop or report them.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if draw < 1:
        raise ValueError(f"draw must be >= 1, got {draw}")
    rows = [_subsample(row, k, seed, draw) for row in instances.iter_rows(named=True)]
    return pl.DataFrame(rows, schema=dict(instances.schema) | ANSWER_SPACE_COLUMNS)


def answer_space_sweep(instances: pl.DataFrame, ks: Sequence[int], draws: int, seed: int) -> pl.DataFrame:
    """The option-count sweep (Kissling et al. §5.4): per k and draw 1..draws, a subsample copy of
    every instance that k really cuts, i.e. one with more than k options and fewer than k golds.
    Where k is at least the instance's option count the copy would be its full space again (every
    draw alike, at the full space's scoring cost), and where its golds fill k it would hold no
    distractor (always right): neither is made, so a k holds only the instances it cuts (its n
    says how many) and every copy has answer_space_status "ok". Ordered by draw, then k."""
    if draws < 1:
        raise ValueError(f"answer_space_draws must be >= 1, got {draws}")

    def cuts(k: int) -> pl.Expr:
        return (pl.col("n_options") > k) & (pl.col("gold_ids").list.len() < k)

    cut = [
        subsample_answer_space(instances.filter(cuts(k)), k, seed, draw)
        for draw in range(1, draws + 1)
        for k in ks
    ]
    if not cut:
        return pl.DataFrame(schema=dict(instances.schema) | ANSWER_SPACE_COLUMNS)
    return pl.concat(cut)
