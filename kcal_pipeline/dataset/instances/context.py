"""Context templates: demonstrations a statement is conditioned on, never scored (issue 29 §5).

Seed 001 (§6) puts 1 or 3 true facts of the same relation before a statement, and a wrong fact as
a control; seed 004 (§2, Zhao et al.; METHODS §4) a fixed demonstration that carries no knowledge
of any test fact ("What is 2+2? 4"). Each is a variant of a curated/generated parent template
(variants.context_variants), whose text is the parent's behind CONTEXT_SLOT:

| kind          | variant       | the context                                                       |
|---------------|---------------|-------------------------------------------------------------------|
| context_1shot | context-1shot | one true fact: the parent filled with another subject and its object |
| context_3shot | context-3shot | three such facts (the first is the 1-shot's)                      |
| context_wrong | context-wrong | the 1-shot's subject with an object that is not one of its own*   |
| context_fixed | context-fixed | FIXED_DEMONSTRATIONS, the same for every relation and instance    |

(*the next valid subject if the 1-shot's has no object to be wrong with; the wrong object is no
object of any subject of that name.) A demonstration never names the instance: its subject and its
object are neither the instance's subject nor any of its options (gold or distractor), by id or by
label (labels.label_key), so a context can neither leak the answer nor prime a distractor; the
3 shots name 3 different subjects. Demonstrations come from the relation's facts (every subject of
the relation, not only the probed ones: in a BEAR-style answer space every probed gold is an option
of every instance, so only unprobed subjects can demonstrate), else from its instances' golds. They
are seeded (derived_rng(seed, relation, subject, "context")): one shuffled order of the relation's
subjects per instance, whose first valid ones demonstrate, the same under every parent template,
so the 1-shot is the 3-shot's first demonstration and the wrong fact differs from the 1-shot in its
object alone. An instance with too few valid demonstrations (e.g. a relation whose few objects are
all options, such as continents) gets no statement of that kind; the log says how many.

A statement is the context, then the statement proper: each demonstration ends with
CONTEXT_SEPARATOR (a line break, a token of its own for byte-level BPE, so the statement's tokens
are those it has without a context), and statements.context_end is the character where the
statement begins (0 = no context). Subject and object spans are exact in the whole text. The
scorers condition on the context and count none of its tokens (scoring/clm.py). Capitalisation
(`capitalize_statements`) applies to the statement as without a context, and to each
demonstration alike (a demonstration is the parent template filled, as a statement is); the fixed
demonstrations are used verbatim.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import polars as pl

from kcal_pipeline.dataset.instances.labels import label_key
from kcal_pipeline.dataset.instances.sampling import derived_rng
from kcal_pipeline.dataset.templates import Filled, fill

CONTEXT_SLOT = "[C]"
CONTEXT_SEPARATOR = "\n"
CONTEXT_COLUMN = "context_end"  # statements: where the statement proper begins (0 = no context)
SPAN_COLUMNS = ("subject_start", "subject_end", "object_start", "object_end")
# kind -> (variant name, how many true demonstrations); context_wrong has one wrong one.
CONTEXT_KINDS = {
    "context_1shot": ("context-1shot", 1),
    "context_3shot": ("context-3shot", 3),
    "context_wrong": ("context-wrong", 1),
    "context_fixed": ("context-fixed", 0),
}
# Zhao et al.'s knowledge-free demonstration (METHODS §4): one set for every relation.
FIXED_DEMONSTRATIONS = ("What is 2+2? 4",)


def context_template(text: str) -> str:
    """A context variant's template text: the parent's behind CONTEXT_SLOT."""
    return f"{CONTEXT_SLOT}{text}"


def statement_template(text: str) -> str:
    """The parent's text of a context template (what the statement proper is filled from)."""
    if not text.startswith(CONTEXT_SLOT) or text.count(CONTEXT_SLOT) != 1:
        raise ValueError(f"context template {text!r} must start with {CONTEXT_SLOT} and contain it once")
    return text.removeprefix(CONTEXT_SLOT)


@dataclass(frozen=True)
class DemoPool:
    """One relation's facts to demonstrate with: per subject (sorted by id) its label and objects."""

    relation_id: str
    subjects: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...]  # (id, label, ((oid, olabel), …))
    objects: tuple[tuple[str, str], ...]  # every distinct (object id, label), sorted by id


def demo_pool(rows: pl.DataFrame) -> DemoPool:
    """The pool from a relation's facts (subject_id, subject_label, object_id, object_label) or,
    without facts, its instances (gold_ids, gold_labels; `#k` subsample copies left out)."""
    if rows.is_empty():
        raise ValueError("demonstrations need the relation's facts or instances; got an empty frame")
    relations = sorted(rows["relation_id"].unique().to_list())
    if len(relations) != 1:
        raise ValueError(f"demonstrations must come from one relation; got rows of {relations}")
    if "object_id" in rows.columns:
        pairs = rows.select("subject_id", "subject_label", "object_id", "object_label")
    else:
        base = rows.filter(~pl.col("instance_id").str.contains("#", literal=True))
        pairs = base.select(
            "subject_id", "subject_label", object_id="gold_ids", object_label="gold_labels"
        ).explode("object_id", "object_label")
    pairs = pairs.drop_nulls().unique().sort("subject_id", "object_id")
    subjects = tuple(
        (sid, labels[0], tuple(zip(oids, olabels, strict=True)))
        for sid, labels, oids, olabels in pairs.group_by("subject_id", maintain_order=True)
        .agg("subject_label", "object_id", "object_label")
        .iter_rows()
    )
    objects = pairs.select("object_id", "object_label").unique("object_id").sort("object_id")
    return DemoPool(relations[0], subjects, tuple(objects.iter_rows()))


def _allowed(oid: str, label: str, ids: set[str], labels: set[str]) -> bool:
    return oid not in ids and label_key(label) not in labels


def draw_demonstrations(
    kind: str,
    pool: DemoPool,
    subject_id: str,
    forbidden_ids: set[str],
    forbidden_labels: set[str],
    seed: int,
) -> list[tuple[str, str]] | None:
    """The (subject label, object label) pairs of one instance's context of `kind`, in order; None
    when the pool has too few valid ones. `forbidden_*`: the instance's subject and options (ids,
    and label_key'd labels), which no demonstration may name. context_fixed needs no pool: []."""
    if kind not in CONTEXT_KINDS:
        raise ValueError(f"unknown context kind {kind!r}; allowed: {', '.join(CONTEXT_KINDS)}")
    shots = CONTEXT_KINDS[kind][1]
    if kind == "context_fixed":
        return []
    order = list(pool.subjects)
    derived_rng(seed, pool.relation_id, subject_id, "context").shuffle(order)
    picked: list[tuple[str, str]] = []
    for sid, label, objects in order:
        if sid == subject_id or not _allowed(sid, label, forbidden_ids, forbidden_labels):
            continue
        true = [(o, ol) for o, ol in objects if _allowed(o, ol, forbidden_ids, forbidden_labels)]
        if not true:
            continue
        if kind == "context_wrong":
            # wrong for every subject of that name: a namesake's object would read as a true fact
            namesakes = [objs for _, other, objs in pool.subjects if label_key(other) == label_key(label)]
            own_ids = {o for objs in namesakes for o, _ in objs}
            own_labels = {label_key(ol) for objs in namesakes for _, ol in objs}
            wrong = [
                (o, ol)
                for o, ol in pool.objects
                if _allowed(o, ol, own_ids, own_labels) and _allowed(o, ol, forbidden_ids, forbidden_labels)
            ]
            if not wrong:
                continue
            _, obj = derived_rng(seed, pool.relation_id, subject_id, "context-wrong").choice(wrong)
            return [(label, obj)]
        if any(label_key(label) == label_key(shown) for shown, _ in picked):
            continue  # a namesake of a subject already shown: three shots name three subjects
        picked.append((label, true[0][1]))
        if len(picked) == shots:
            return picked
    return None


def context_text(
    demonstrations: Sequence[tuple[str, str]],
    template: str,
    kind: str,
    fix_case: Callable[[Filled], Filled] | None = None,
) -> str:
    """The context: each demonstration (`template` filled with it, then `fix_case`, the statements'
    capitalisation; FIXED_DEMONSTRATIONS verbatim for context_fixed) followed by CONTEXT_SEPARATOR."""
    if kind == "context_fixed":
        shown = list(FIXED_DEMONSTRATIONS)
    else:
        filled = [fill(template, s, o) for s, o in demonstrations]
        shown = [(fix_case(f) if fix_case else f).text for f in filled]
    return "".join(f"{d}{CONTEXT_SEPARATOR}" for d in shown)


def _forbidden(instances: pl.DataFrame) -> dict[str, tuple[set[str], set[str]]]:
    """Per instance id, the ids and label keys no demonstration may name: its subject and options.
    A `#k` subsample copy takes its parent's (a superset), so it gets the parent's demonstrations."""
    rows = {r["instance_id"]: r for r in instances.iter_rows(named=True)}
    out = {}
    for iid, r in rows.items():
        source = rows.get(r.get("parent_instance_id") or "", r)
        ids = {r["subject_id"], *source["option_ids"], *r["option_ids"]}
        labels = {label_key(x) for x in (r["subject_label"], *source["option_labels"], *r["option_labels"])}
        out[iid] = (ids, labels)
    return out


def context_statements(
    instances: pl.DataFrame,
    templates: pl.DataFrame,
    pool_rows: pl.DataFrame,
    seed: int,
    build: Callable[[pl.DataFrame, pl.DataFrame], pl.DataFrame],
    fix_case: Callable[[Filled], Filled] | None = None,
    log: Callable[[str], None] | None = None,
) -> list[pl.DataFrame]:
    """Statements of the context templates (kind in CONTEXT_KINDS) for every instance that has a
    valid context: the statement proper as `build(instances, templates)` makes it from the parent
    text, with the context before it, its spans shifted and `context_end` set. `pool_rows`: the
    relation's facts, or its instances (demo_pool). Instances without one are counted in `log`."""
    parts = []
    forbidden = _forbidden(instances)
    pool = None
    # (kind, instance id) -> its demonstrations: drawn once, the same under every parent template
    drawn: dict[tuple[str, str], list[tuple[str, str]] | None] = {}
    logged: set[str] = set()
    for row in templates.iter_rows(named=True):
        kind, parent = row["kind"], statement_template(row["text"])
        if kind not in CONTEXT_KINDS:
            raise ValueError(f"template {row['template_id']!r}: kind {kind!r} is not a context kind")
        if pool is None and kind != "context_fixed":
            pool = demo_pool(pool_rows)
        contexts, missing = {}, 0
        for iid, sid in instances.select("instance_id", "subject_id").iter_rows():
            if (kind, iid) not in drawn:
                drawn[kind, iid] = (
                    [] if pool is None else draw_demonstrations(kind, pool, sid, *forbidden[iid], seed)
                )
            demos = drawn[kind, iid]
            if demos is None:
                missing += 1
                continue
            contexts[iid] = context_text(demos, parent, kind, fix_case)
        if missing and log is not None and kind not in logged:
            logged.add(kind)  # the same instances under every parent template: said once per kind
            log(
                f"{row['relation_id']}: {missing} of {instances.height} instance(s) have no valid {kind} "
                "demonstration (too few other subjects whose fact names neither their subject nor any of "
                f"their options); their {kind} statements are left out"
            )
        if not contexts:
            continue
        chosen = instances.filter(pl.col("instance_id").is_in(list(contexts)))
        plain = build(chosen, pl.DataFrame([{**row, "text": parent}]))
        ctx = pl.DataFrame({"instance_id": list(contexts), "_context": list(contexts.values())})
        end = pl.col("_context").str.len_chars().cast(pl.Int32)
        parts.append(
            plain.join(ctx, on="instance_id", how="left", maintain_order="left")
            .with_columns(
                (pl.col("_context") + pl.col("text")).alias("text"),
                *[(pl.col(c) + end).alias(c) for c in SPAN_COLUMNS],
                end.alias(CONTEXT_COLUMN),
            )
            .drop("_context")
        )
    return parts
