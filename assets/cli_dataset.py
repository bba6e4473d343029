"""`kcal dataset import-bear/paraphrase/quality`: dataset construction helpers."""

from __future__ import annotations

from pathlib import Path

from assets.cli_common import print_table, writes
from kcal_pipeline.core.paths import kcal_home


def cmd_dataset_import_bear(args) -> int:
    from kcal_pipeline.dataset.sources.bear.importing import import_bear

    home = kcal_home(args.home)
    try:
        catalog, paths = import_bear(
            Path(args.directory),
            home,
            prefix=args.prefix,
            replace=args.replace,
            relations=args.relation or (),
            templates=args.templates,
            subset=args.subset,
        )
    except ValueError as exc:  # bad input, named by file and line; found before anything is written
        if "kcal dataset import-bear" in str(exc):
            raise
        raise ValueError(
            f"{exc}; nothing was imported: fix it and re-run `kcal dataset import-bear`"
        ) from exc
    print(f"imported {len(paths)} relation(s) into {catalog}: {', '.join(paths)}")
    print(
        "they are part of the catalog from now on; run them with e.g. "
        f"kcal demo --relation {next(iter(paths))} (in the UI: reload definitions)"
    )
    return 0


def cmd_dataset_paraphrase(args) -> int:
    from assets.runner import materialize_unpartitioned  # Dagster layer
    from kcal_pipeline.core.storage import read_partition

    home = kcal_home(args.home)
    settings = {
        k: v for k, v in {"paraphrase_model": args.model, "paraphrase_relations": args.relation}.items() if v
    }
    materialize_unpartitioned(home, "generated_templates", settings)
    frame = read_partition(home, "generated_templates")
    print(f"{frame.height} generated templates kept; use them with --template-kinds curated,generated")
    for rid, n in frame.group_by("relation_id").len().sort("relation_id").iter_rows():
        print(f"  {rid}: {n}")
    return 0


def cmd_dataset_quality(args) -> int:
    from kcal_pipeline.core.warehouse import named_query, query, refresh_views

    home = kcal_home(args.home)
    refresh_views(home)
    cols, rows = query(home, named_query("data_quality"))
    print_table(cols, rows)
    return 0


def add_dataset_commands(sub) -> None:
    ds = sub.add_parser("dataset", help="dataset construction helpers")
    dsub = ds.add_subparsers(dest="dataset_command", required=True)
    b = dsub.add_parser(
        "import-bear", help="import a directory in BEAR's format (P*.jsonl + metadata_relations.json)"
    )
    b.add_argument("directory")
    b.add_argument("--prefix", default="bear-", help="prefix for the imported relation ids (default bear-)")
    b.add_argument(
        "--replace",
        action="store_true",
        help="the catalog holds only this import's relations (default: merge with earlier imports by id)",
    )
    b.add_argument(
        "--relation",
        action="append",
        help="import only this BEAR relation, e.g. P19 (repeatable; default: all). Every relation in "
        "the catalog gets its own facts run, so a subset makes later runs shorter",
    )
    b.add_argument(
        "--templates",
        metavar="FILE",
        help="templates in BEAR's metadata format (e.g. Kissling et al.'s metadata_relations.json: 5 "
        "paraphrases + 2 verbal + 5 numeric markers per relation) replacing the directory's; its answer "
        "spaces must equal the directory's",
    )
    b.add_argument(
        "--subset",
        choices=["lite"],
        help="lite: only the relations and lines bear_lite_indices.json lists (in DIR or beside it): "
        "BEAR out of a BEAR-big directory",
    )
    writes(b).set_defaults(func=cmd_dataset_import_bear)
    pp = dsub.add_parser("paraphrase", help="generate template paraphrases with an instruct model")
    pp.add_argument("--model", help="model key (default: the first registered model)")
    pp.add_argument("--relation", action="append", help="relation id (repeatable; default: all)")
    writes(pp).set_defaults(func=cmd_dataset_paraphrase)
    dsub.add_parser("quality", help="print the data-quality table").set_defaults(func=cmd_dataset_quality)
