"""A templates file in place of a BEAR directory's templates (import_bear's `templates`).

A templates file (e.g. Kissling et al.'s metadata_relations.json) replaces each imported
relation's templates: its paraphrases become the curated templates in file order, its marker
templates the relation's explicit markers of the first paraphrase (relations.py
marker_templates), classified by their text (templates.marker_variant_of). Its answer space must
be the directory's, relation by relation.
"""

from __future__ import annotations

from dataclasses import replace as with_fields
from pathlib import Path

from kcal_pipeline.dataset.sources.bear.files import read_metadata
from kcal_pipeline.dataset.sources.bear.parsed import METADATA, BearDataset, BearFormatError
from kcal_pipeline.dataset.templates import check_template, marker_variant_of


def split_templates(
    rid: str, given: list[str], where: str
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(paraphrases, marker templates, their variant names) of one relation's templates, in file
    order, each classified by its text against the first template (templates.marker_variant_of).
    Paraphrases must come first and every variant at most once; errors name the index."""
    if not given:
        raise BearFormatError(f"{where}: templates is empty")
    paraphrases, markers, first = [], [], {}  # first: variant name -> its index
    for i, text in enumerate(given):
        at = f"{where} templates[{i}]"
        check_template(text, at)
        if text in given[:i]:
            raise BearFormatError(f"{at}: {text!r} repeats templates[{given.index(text)}]")
        variant = marker_variant_of(text, given[0], at)
        if variant is None and markers:
            raise BearFormatError(
                f"{at}: {text!r} has no marker but follows the marker templates; give the paraphrases "
                "first, then the markers of the first one"
            )
        if variant is not None and i == 0:
            raise BearFormatError(
                f"{at}: {text!r} is a marker template; the first template must be a paraphrase"
            )
        if variant in first:
            raise BearFormatError(
                f"{at}: a second {variant!r} marker template (the first is templates[{first[variant]}])"
            )
        if variant is None:
            paraphrases.append(text)
        else:
            markers.append(text)
            first[variant] = i
    return tuple(paraphrases), tuple(markers), tuple(first)


def with_templates_file(ds: BearDataset, path: Path | str) -> BearDataset:
    """`ds` with each relation's templates from a templates file in BEAR's metadata format (e.g.
    Kissling et al.'s: 5 paraphrases, then "possibly", "certainly" and 0 … 100 % markers): the
    paraphrases replace the relation's templates, the markers become its explicit markers. The
    file must have every relation of `ds`, with the same answer space (ids and labels, in order);
    relations it has beyond those are ignored."""
    path = Path(path)
    if not path.is_file():
        raise BearFormatError(f"{path}: no such templates file")
    data = read_metadata(path)
    relations = {}
    for rid, rel in ds.relations.items():
        where = f"{path} [{rid}]"
        entry = data.get(rid)
        if not isinstance(entry, dict):
            raise BearFormatError(
                f"{where}: the templates file has no entry for relation {rid}, which is being imported"
                if entry is None
                else f"{where}: expected an object with templates and the answer space"
            )
        for field in ("answer_space_ids", "answer_space_labels"):
            theirs, ours = entry.get(field), list(getattr(rel, field))
            if theirs != ours:
                if not isinstance(theirs, list):
                    detail = f"the templates file gives {theirs!r}"
                else:
                    at = next((i for i, (a, b) in enumerate(zip(theirs, ours, strict=False)) if a != b), None)
                    detail = (
                        f"first difference at [{at}]: {theirs[at]!r} there, {ours[at]!r} here"
                        if at is not None
                        else f"{len(theirs)} entries there, {len(ours)} here"
                    )
                raise BearFormatError(
                    f"{where}: {field} differs from the imported directory's {ds.root / METADATA} "
                    f"({detail}); a templates file must probe the same answer space"
                )
        given = entry.get("templates")
        if not isinstance(given, list) or not all(isinstance(t, str) for t in given):
            raise BearFormatError(f"{where}: templates must be a list of strings")
        paraphrases, markers, names = split_templates(rid, given, where)
        relations[rid] = with_fields(
            rel, templates=paraphrases, marker_templates=markers, marker_variants=names, repeated_templates=()
        )
    return with_fields(ds, relations=relations)
