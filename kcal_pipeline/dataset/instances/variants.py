"""Template variants (epistemic markers, perturbations) and answer-space subsampling.

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
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import polars as pl

from kcal_pipeline.dataset.instances.sampling import derived_rng
from kcal_pipeline.dataset.templates import MARKER_SLOT, OBJECT_SLOT, SUBJECT_SLOT, check_template, fill

TEMPLATE_COLUMNS = ["relation_id", "template_id", "text", "kind", "source", "rank"]
VARIANT_COLUMNS = [*TEMPLATE_COLUMNS, "parent_id", "variant", "perturbation_seed"]
VERBAL_MARKERS = ("certainly", "possibly")
NUMERIC_LEVELS = (0, 25, 50, 75, 100)
DEMO_SLOT = "[D]"
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


def one_shot(text: str) -> str:
    """A [D] slot for the demonstration, which depends on the instance (see demonstration_for)."""
    return f"{DEMO_SLOT} {text}"


# --- variant tables -----------------------------------------------------------------------------


def _base_rows(templates: pl.DataFrame) -> list[dict]:
    """Curated/generated templates, each with its marked form ("marked_text", None if it has none)."""
    marked = pl.col("marked_text") if "marked_text" in templates.columns else pl.lit(None, pl.Utf8)
    return (
        templates.filter(pl.col("kind").is_in(BASE_KINDS))
        .select(*TEMPLATE_COLUMNS, marked.alias("marked_text"))
        .to_dicts()
    )


def _variant_row(parent: dict, variant: str, kind: str, text: str, seed: int | None = None) -> dict:
    """The variant's row; a seeded draw's id ends in `-s<seed>` so every draw has its own id."""
    template_id = f"{parent['template_id']}:{variant}" + ("" if seed is None else f"-s{seed}")
    check_template(text, f"variant {template_id}")
    parent = {k: v for k, v in parent.items() if k != "marked_text"}
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


def marker_variants(templates: pl.DataFrame, log: Callable[[str], None] | None = None) -> pl.DataFrame:
    """Verbal and numeric marker variants of every curated/generated template.

    Verbal: at the [M] slot of the template's curated marked form (`marked_text`), else where
    marker_position puts it; a template where the rule finds no place gets no verbal variant, and
    `log` is told how many (and which) did not. Numeric: the "I'm x% confident that" prefix.
    A variant keeps its parent's rank, so a marked table lines up with the unmarked one; callers
    that pick the headline template (rank 0) must filter by kind first.
    """
    rows, unplaced = [], []
    for parent in _base_rows(templates):
        text = parent["text"]
        verbal = {m: verbal_marker(text, m, parent["marked_text"]) for m in VERBAL_MARKERS}
        if any(v is None for v in verbal.values()):
            unplaced.append(parent["template_id"])
        rows += [_variant_row(parent, m, "marker_verbal", v) for m, v in verbal.items() if v is not None]
        rows += [
            _variant_row(parent, f"numeric-{p}", "marker_numeric", numeric_marker(text, p))
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
    seed in `perturbation_seed`), and one one-shot variant (its demonstration is drawn per instance
    when statements are built). A template without a space or a long enough word simply has no
    extra-space or typo variant."""
    seeds = check_perturbation_seeds(seeds)
    rows = []
    for parent in _base_rows(templates):
        text, tid = parent["text"], parent["template_id"]
        for seed in seeds:
            edits = {"extra-space": extra_space(text, seed, tid), "typo": typo(text, seed, tid)}
            rows += [
                _variant_row(parent, name, "perturbation", new, seed) for name, new in edits.items() if new
            ]
        rows.append(_variant_row(parent, "one-shot", "perturbation", one_shot(text)))
    return _frame(rows)


# --- one-shot demonstrations --------------------------------------------------------------------


def _demo_pool(rows: pl.DataFrame) -> list[tuple[str, str, str]]:
    """(subject_id, subject_label, gold object label), sorted, from instances or facts of one relation."""
    if "relation_id" in rows.columns and rows["relation_id"].n_unique() > 1:
        raise ValueError(
            f"demonstrations must come from one relation; got rows of {sorted(rows['relation_id'].unique())}"
        )
    if "gold_labels" in rows.columns:
        pairs = rows.select("subject_id", "subject_label", pl.col("gold_labels").list.first())
    else:
        pairs = rows.group_by("subject_id").agg(
            pl.col("subject_label").first(), pl.col("object_label").sort_by("object_id").first()
        )
    return sorted(pairs.drop_nulls().iter_rows())


def demonstration_for(subject_id: str, rows: pl.DataFrame, template: str, seed: int) -> str:
    """The template filled with another subject of the relation and its gold object.

    `rows` are the relation's instances (gold_labels) or facts (object_label). Subjects whose label
    equals the instance's are excluded too: a namesake would leak the answer's form.
    """
    pool = _demo_pool(rows)
    own = {label.casefold() for sid, label, _ in pool if sid == subject_id}
    others = [p for p in pool if p[0] != subject_id and p[1].casefold() not in own]
    if not others:
        raise ValueError(f"no other subject than {subject_id!r} to demonstrate the relation with")
    _, label, obj = derived_rng(seed, subject_id, "one-shot").choice(others)
    return fill(template.removeprefix(f"{DEMO_SLOT} "), label, obj).text


def expand_demo(template: str, demo: str) -> str:
    """Put the demonstration into a one-shot template *before* filling, so spans stay right."""
    if template.count(DEMO_SLOT) != 1:
        raise ValueError(f"{template!r} must contain {DEMO_SLOT} exactly once")
    return check_template(template.replace(DEMO_SLOT, demo), "one-shot template with its demonstration")


# --- answer-space subsampling -------------------------------------------------------------------


def _subsample(row: dict, k: int, seed: int) -> dict:
    gold = set(row["gold_ids"])
    distractors = sorted(o for o in row["option_ids"] if o not in gold)
    # One seeded order per instance, independent of k: smaller answer spaces nest in larger ones.
    derived_rng(seed, row["instance_id"], "subsample").shuffle(distractors)
    keep = gold | set(distractors[: max(k - len(gold), 0)])
    idx = [i for i, o in enumerate(row["option_ids"]) if o in keep]
    status = "golds_exceed_k" if len(gold) > k else "fewer_options_than_k" if len(idx) < k else "ok"
    return {
        **row,
        "instance_id": f"{row['instance_id']}#k{k}",
        "parent_instance_id": row["instance_id"],
        "option_ids": [row["option_ids"][i] for i in idx],
        "option_labels": [row["option_labels"][i] for i in idx],
        "n_options": len(idx),
        "subsample_k": k,
        "subsample_status": status,
    }


def subsample_answer_space(instances: pl.DataFrame, k: int, seed: int) -> pl.DataFrame:
    """Each instance with its answer space cut to k options, every gold kept, order preserved.

    An instance with more than k golds keeps all its golds (and no distractor) rather than lose a
    correct answer; one with fewer than k options keeps them all. subsample_status says which
    ("ok", "golds_exceed_k", "fewer_options_than_k") so analyses can drop or report them.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    rows = [_subsample(row, k, seed) for row in instances.iter_rows(named=True)]
    schema = dict(instances.schema) | {
        "parent_instance_id": pl.Utf8,
        "subsample_k": pl.Int32,
        "subsample_status": pl.Utf8,
    }
    return pl.DataFrame(rows, schema=schema)
