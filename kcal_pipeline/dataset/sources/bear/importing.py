"""import_bear: a BEAR directory into a store's home/datasets/bear.

Everything is read and checked before anything is written; then the facts files, then the catalog
that names them, merged by relation id with an earlier import's (or replacing it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace as with_fields
from pathlib import Path

import polars as pl

from kcal_pipeline.core.keys import check_relation_id
from kcal_pipeline.core.storage import write_parquet_atomic, write_text_atomic
from kcal_pipeline.core.versions import DATA_VERSION_KEY
from kcal_pipeline.dataset.sources.bear.catalog import catalog_entries, checked_catalog_toml, imported_entries
from kcal_pipeline.dataset.sources.bear.parsed import BearDataset, BearRelation
from kcal_pipeline.dataset.sources.bear.reading import read_bear
from kcal_pipeline.dataset.sources.bear.tables import content_version, stored_frame
from kcal_pipeline.dataset.sources.bear.templates_file import with_templates_file


def select_relations(ds: BearDataset, relations: Sequence[str], prefix: str) -> BearDataset:
    """`ds` with only `relations` (BEAR's ids, or with the import prefix); all of it when empty."""
    if not relations:
        return ds
    wanted = [r.removeprefix(prefix) if r not in ds.relations else r for r in relations]
    unknown = [given for given, rid in zip(relations, wanted, strict=True) if rid not in ds.relations]
    if unknown:
        raise ValueError(
            f"--relation {', '.join(unknown)}: not in {ds.root}; it has {', '.join(ds.relations)}"
        )
    return with_fields(ds, relations={rid: ds.relations[rid] for rid in dict.fromkeys(wanted)})


def import_bear(
    directory: Path | str,
    home: Path | str,
    prefix: str = "bear-",
    log: Callable[[str], None] = print,
    replace: bool = False,
    relations: Sequence[str] = (),
    templates: Path | str | None = None,
    subset: str | None = None,
) -> tuple[Path, dict[str, Path]]:
    """BEAR directory -> home/datasets/bear/{catalog.toml, facts/<prefix><rel>.parquet}.

    `relations` (BEAR's ids, e.g. P19, or prefixed ones) imports only those; the whole directory is
    still read and checked. Fewer relations mean fewer facts partitions for every later run.
    `subset` ("lite"): only the lines bear_lite_indices.json lists (BEAR out of BEAR-big).
    `templates`: a templates file (with_templates_file) whose paraphrases and markers replace the
    directory's templates of every imported relation.

    Relation ids get `prefix` so an imported P19 never replaces the packaged P19 (the catalog
    loader picks up every home/datasets/*/catalog.toml). A second import merges with the first by
    relation id: a relation imported again gets the new entry and facts, the others stay. With
    `replace` the catalog holds only this import's relations and the other facts files go.

    Everything is read and checked (the new directory, the earlier catalog, the merged catalog)
    before anything is written; facts are written before the catalog that points at them, so a
    loaded catalog never names a missing file. Returns the catalog and this import's facts files.
    """
    ds = _dataset_to_import(directory, subset, relations, prefix, templates)
    for warning in ds.warnings():
        log(warning)
    base = Path(home) / "datasets" / "bear"
    catalog = base / "catalog.toml"
    new = _prefixed_entries(ds, base / "facts", prefix)
    earlier = {} if replace else imported_entries(catalog)
    # Earlier relations keep their place (a re-imported one gets its new entry there); new ones follow.
    entries = {rid: new.get(rid, entry) for rid, entry in earlier.items()} | new
    text = checked_catalog_toml(entries, catalog)
    paths = _write_facts(ds, base / "facts", prefix, log)
    write_text_atomic(catalog, text)
    _log_merge(list(new), list(earlier), directory, log)
    if replace:
        _remove_stale(base / "facts", paths, log)
    return catalog, paths


def _dataset_to_import(
    directory: Path | str,
    subset: str | None,
    relations: Sequence[str],
    prefix: str,
    templates: Path | str | None,
) -> BearDataset:
    """The directory, read and checked whole, cut to `relations`, with the templates file's
    templates when one is given."""
    ds = select_relations(read_bear(directory, subset=subset), relations, prefix)
    if templates is not None:
        ds = with_templates_file(ds, templates)
    return ds


def _prefixed_entries(ds: BearDataset, facts_dir: Path, prefix: str) -> dict[str, dict]:
    """The catalog entries of this import, under the prefixed ids (checked), each naming its facts
    file in `facts_dir`."""
    return {
        check_relation_id(prefix + rid, "prefixed BEAR relation id"): {
            **entry,
            "object_type": prefix + rid,
            "data": str(facts_dir / f"{prefix}{rid}.parquet"),
        }
        for rid, entry in catalog_entries(ds, facts_dir).items()
    }


def _write_facts(
    ds: BearDataset, facts_dir: Path, prefix: str, log: Callable[[str], None]
) -> dict[str, Path]:
    """Each relation's stored facts (kept and dropped lines) to facts_dir/<prefix><relation>.parquet,
    with the rows' hash as its data version; one log line per relation. Returns prefixed id -> file."""
    facts = stored_frame(ds).with_columns(relation_id=pl.lit(prefix) + pl.col("relation_id"))
    paths = {}
    for rid, rel in ds.relations.items():
        new_id = prefix + rid
        paths[new_id] = facts_dir / f"{new_id}.parquet"
        frame = facts.filter(pl.col("relation_id") == new_id)
        write_parquet_atomic(frame, paths[new_id], metadata={DATA_VERSION_KEY: content_version(frame)})
        log(_imported_line(rid, new_id, rel))
    return paths


def _imported_line(rid: str, new_id: str, rel: BearRelation) -> str:
    """What was imported for one relation: facts, options, templates and markers, drops."""
    return (
        f"BEAR {rid} -> {new_id}: {len(rel.facts)} facts, {len(rel.answer_space_ids)} options"
        + (" (the objects of its instances)" if rel.derived_space else "")
        + (
            f", {len(rel.templates)} templates + {len(rel.marker_templates)} markers"
            if rel.marker_templates
            else ""
        )
        + f", dropped {rel.dropped_counts() or 'none'}"
    )


def _log_merge(new: list[str], earlier: list[str], directory: Path | str, log: Callable[[str], None]) -> None:
    """Which of the earlier import's relations this one replaced, and which it kept."""
    replaced = [rid for rid in new if rid in earlier]
    kept = [rid for rid in earlier if rid not in new]
    if replaced:
        log(
            f"replaced {', '.join(replaced)}: catalog entr{'ies' if len(replaced) > 1 else 'y'} and facts "
            f"now come from {Path(directory)}"
            + (f"; kept {', '.join(kept)} from the earlier import" if kept else "")
        )
    elif kept:
        log(f"merged with the earlier import: kept {', '.join(kept)}")


def _remove_stale(facts_dir: Path, paths: dict[str, Path], log: Callable[[str], None]) -> None:
    """--replace: remove the facts files of earlier relations, once the catalog no longer names them."""
    stale = sorted(p for p in facts_dir.glob("*.parquet") if p not in paths.values())
    for path in stale:  # after the catalog stopped naming them
        path.unlink()
    if stale:
        log(f"--replace: removed {len(stale)} earlier relation(s): {', '.join(p.stem for p in stale)}")
