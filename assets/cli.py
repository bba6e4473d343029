"""The `kcal` command line: run the demo, manage the model registry, query results with SQL.

The orchestration commands (demo, models add/remove) import the Dagster layer lazily, so the rest
of this library stays free of Dagster.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import select
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Literal, get_args, get_origin

import duckdb

from kcal_pipeline.core.filesystem_errors import KIND_OF_TEXT, storage_failure
from kcal_pipeline.core.filesystem_errors import describe as describe_storage_failure
from kcal_pipeline.core.options import GenerationOptions, Options, OptionsError, ProbeOptions, ScoringOptions
from kcal_pipeline.core.paths import (
    cross_model_report_path,
    duckdb_path,
    kcal_home,
    registry_path,
    report_path,
)
from kcal_pipeline.scoring.models import (
    DEFAULT_MODEL,
    ModelConfigError,
    ModelEntry,
    Registry,
    UnknownModelError,
)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_option_flags(
    parser: argparse.ArgumentParser, options: type[Options], skip: tuple[str, ...] = ()
) -> None:
    """One flag per option field, named, typed, described and defaulted by the field itself.

    A flag left out keeps the option's default (the parsed value is None), so only what the user
    typed reaches the settings; the options class validates it.
    """
    group = parser.add_argument_group(f"{options.GROUP} settings")
    for name, field in options.model_fields.items():
        if name in skip:
            continue
        default, help_text = field.get_default(call_default_factory=True), field.description or ""
        annotation = field.annotation
        if annotation is bool:
            flag = _flag(name) if not default else _flag(f"no_{name}")
            text = help_text if not default else f"switch off (on by default): {help_text}"
            group.add_argument(flag, dest=name, action="store_const", const=not default, help=text)
            continue
        kwargs: dict = {"dest": name, "help": f"{help_text} (default {default!r})"}
        if get_origin(annotation) is list:
            kwargs["type"] = lambda text: [part for part in text.split(",") if part]
            kwargs["help"] = f"{help_text}, comma-separated (default {','.join(map(str, default)) or 'none'})"
            kwargs["metavar"] = "A,B"
        elif get_origin(annotation) is Literal:
            kwargs["choices"] = get_args(annotation)
        else:
            numeric = [t for t in (int, float) if t in (annotation, *get_args(annotation))]
            kwargs["type"] = numeric[0] if numeric else str
            kwargs["metavar"] = {int: "N", float: "X"}.get(kwargs["type"], "TEXT")
        group.add_argument(_flag(name), **kwargs)


def option_values(args: argparse.Namespace, options: type[Options]) -> dict:
    """The option values the user gave on the command line (None = not given)."""
    return {n: getattr(args, n) for n in options.model_fields if getattr(args, n, None) is not None}


def _print_table(cols: list[str], rows: list[tuple], out=None) -> None:
    def fmt(v):
        return f"{v:.4f}" if isinstance(v, float) else ("NULL" if v is None else str(v))

    cells = [[fmt(v) for v in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)), file=out)
    print("  ".join("-" * w for w in widths), file=out)
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)), file=out)


def cmd_demo(args) -> int:
    from assets.runner import run_missing  # Dagster layer, imported only when orchestrating
    from kcal_pipeline.core.progress import share_terminal
    from kcal_pipeline.core.storage import partition_path, read_partition, read_partitions
    from kcal_pipeline.dataset.relations import relation_ids
    from kcal_pipeline.reporting.coverage import estimator_coverage_lines
    from kcal_pipeline.reporting.html import format_summary, summary_table, summary_title

    home = kcal_home(args.home)
    # Validated here, before any work: a bad value stops the run with the setting's name and value.
    probe, scoring = option_values(args, ProbeOptions), option_values(args, ScoringOptions)
    generation = option_values(args, GenerationOptions)
    if generation and not args.generate:
        flags = ", ".join(f"--{name.replace('_', '-')}" for name in generation)
        raise OptionsError(f"{flags}: generation settings need --generate")
    problems = []
    for options, values in (
        (ProbeOptions, probe),
        (ScoringOptions, scoring),
        (GenerationOptions, generation),
    ):
        try:
            options(**values)
        except OptionsError as error:
            problems.append(str(error))
    if problems:
        raise OptionsError("; ".join(problems))
    settings = {**probe, **scoring, **generation}
    if not args.no_progress:
        share_terminal()  # statement_scores draws its progress bar there
    relations = None if args.all_relations else (args.relation or DEMO_RELATIONS)
    started = time.perf_counter()
    summary = run_missing(
        home,
        models=args.model,
        relations=relations,
        settings=settings,
        refresh=args.refresh,
        log=_log_unless_interrupted,
        generate=args.generate,
    )
    elapsed = time.perf_counter() - started
    if not summary.materialized:
        print(
            f"Nothing to do: all {len(summary.skipped)} asset partitions are already materialized "
            f"(use --refresh to recompute)."
        )
    else:
        print(
            f"Materialized {len(summary.materialized)} asset partitions in {elapsed:.1f}s; "
            f"{len(summary.skipped)} were already materialized and skipped."
        )
    for entry in Registry(registry_path(home)).entries():
        if args.model and entry.key not in args.model:
            continue
        try:
            metrics = read_partition(home, "metrics", {"model": entry.key})
        except FileNotFoundError:
            continue
        print(f"\n{summary_title(entry.id)}")
        print(format_summary(summary_table(metrics)))
        status = [
            {"model": entry.key, "relation": r}
            for r in (relations or relation_ids())
            if partition_path(home, "estimator_status", {"model": entry.key, "relation": r}).exists()
        ]
        if status:
            print("\n".join(estimator_coverage_lines(read_partitions(home, "estimator_status", status))))
        if args.generate:
            from assets.cli_generation import print_generation_summary

            print_generation_summary(home, entry)
        print(f"report: {report_path(home, entry.key)}")
    if cross_model_report_path(home).exists():
        print(f"all models: {cross_model_report_path(home)}")
    print(f"duckdb: {duckdb_path(home)}   e.g. kcal sql --query leaderboard (every report: kcal sql --list)")
    for failure in summary.failed:
        print(f"kcal: failed: {failure}", file=sys.stderr)
    if summary.failed:
        print(f"kcal: {len(summary.failed)} model partition(s) failed; the others completed", file=sys.stderr)
        return 1
    return 0


DEMO_RELATIONS = ["P36", "P30", "P37", "mace-award"]


def cmd_backfill(args) -> int:
    from assets.backfill import daemon_is_running, submit_backfill, wait_for_backfill  # Dagster layer

    home = kcal_home(args.home)
    backfill_id, relations = submit_backfill(home, args.model, args.relation)
    print(f"backfill {backfill_id}: {args.model} on {', '.join(relations)}, then its evaluation")
    print(f"  in the UI: /runs/b/{backfill_id} (Overview → Backfills)")
    if not daemon_is_running(home):
        print("  no Dagster daemon runs on this store now: it starts when `kcal ui` (make ui) does")
    if not args.wait:
        return 0
    status = wait_for_backfill(home, backfill_id, timeout_s=args.timeout)
    print(f"backfill {backfill_id}: {status.value}")
    return 0 if status.value in ("COMPLETED", "COMPLETED_SUCCESS") else 1


def cmd_dataset_import_bear(args) -> int:
    from kcal_pipeline.dataset.sources.bear import import_bear

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
    _print_table(cols, rows)
    return 0


def cmd_models_list(args) -> int:
    reg = Registry(registry_path(kcal_home(args.home)))
    rows = [
        (e.key, e.id, e.source, e.kind, e.dtype, e.device, e.batch_size, e.token_budget or "auto")
        for e in reg.entries()
    ]
    _print_table(["key", "id", "source", "kind", "dtype", "device", "batch", "token budget"], rows)
    return 0


def _writes(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """A command that writes the store: it holds the store lock, and --no-wait fails if it is taken."""
    parser.add_argument(
        "--no-wait",
        action="store_true",
        help="fail at once if another kcal command or Dagster run writes this KCAL_HOME (default: wait)",
    )
    return parser


def _store_lock_for(args: argparse.Namespace, argv: list[str] | None):
    """The store lock for a writing command (one declared with _writes), nothing for the others."""
    if not hasattr(args, "no_wait"):
        return contextlib.nullcontext()
    from kcal_pipeline.core.store_lock import hold_store_lock

    command = " ".join(["kcal", *(sys.argv[1:] if argv is None else argv)])
    return hold_store_lock(kcal_home(args.home), wait=not args.no_wait, command=command)


def _sync(home: Path) -> None:
    from assets.instance import sync_model_partitions, sync_relation_partitions  # not the assets: fast

    keys = sync_model_partitions(home)
    print(f"model partitions in the Dagster instance: {', '.join(keys)}")
    relations = sync_relation_partitions(home)
    print(f"relation partitions (the probe): {', '.join(relations) or 'none yet (kcal demo --relation R)'}")


def cmd_models_add(args) -> int:
    home = kcal_home(args.home)
    if args.path:
        source = dict(source="local", path=str(Path(args.path).resolve()))
    elif args.gguf_package:
        source = dict(source="gguf_package", package=args.gguf_package, file=args.file)
    elif args.gguf:
        source = dict(source="gguf_file", path=str(Path(args.gguf).resolve()))
    else:
        source = dict(source="hf", revision=args.revision)
    entry = ModelEntry(
        id=args.id,
        kind=args.kind,
        dtype=args.dtype,
        device=args.device,
        batch_size=args.batch_size,
        token_budget=args.token_budget,
        tf32=args.tf32,
        start_token=args.start_token,
        trust_remote_code=args.trust_remote_code,
        engine=args.engine,
        **source,
    )
    from kcal_pipeline.scoring.models.loading import check_loadable

    kind = check_loadable(entry)  # a path that holds no loadable model is refused, not registered
    from assets.instance import get_instance

    # The instance (and its tables) first: a store that cannot hold them refuses before models.toml
    # changes, so the same command runs again once the disk has room.
    get_instance(home)
    Registry(registry_path(home)).add(entry)
    detected = f" (kind {kind}{', detected' if entry.kind == 'auto' else ''})" if kind else ""
    print(f"registered {entry.id} as {entry.key}{detected}")
    if kind is None:
        print(
            f"note: {entry.id} is a Hugging Face hub id and was not checked: loading it needs network "
            "access to the hub (or its files in the local hub cache); offline, register a downloaded "
            "folder with --path DIR",
            file=sys.stderr,
        )
    _sync(home)
    return 0


def cmd_models_sync(args) -> int:
    _sync(kcal_home(args.home))
    return 0


def cmd_models_remove(args) -> int:
    home = kcal_home(args.home)
    Registry(registry_path(home)).remove(args.id)
    print(f"removed {args.id}")
    _sync(home)
    return 0


def cmd_ui(args) -> int:
    """The Dagster UI on this store, and its reports over http (KCAL_REPORTS_PORT); Ctrl-C stops it
    with every process it started (assets/ui.py)."""
    from assets.ui import dagster_dev, serve
    from kcal_pipeline.core.report_server import REPORTS_PORT_ENV, ReportServer, reports_dir, reports_port

    home = kcal_home(args.home)
    workspace = Path(args.workspace)
    if not workspace.is_file():
        raise FileNotFoundError(f"--workspace {workspace}: no such file (the repository's workspace.yaml)")
    reports = ReportServer(reports_dir(home), reports_port())  # a taken port: an error, before the UI starts
    try:
        _sync(home)  # also writes DAGSTER_HOME's dagster.yaml where there is none, and sets DAGSTER_HOME
        # the runs the UI launches write report links to this port
        env = {**os.environ, "KCAL_HOME": str(home), REPORTS_PORT_ENV: str(reports.port)}
        url = f"http://{args.host}:{args.port or 3000}"
        print(f"Dagster UI: {url} (DAGSTER_HOME {env['DAGSTER_HOME']}); Ctrl-C stops it")
        print(f"Reports: {reports.url} (KCAL_HOME/reports; {REPORTS_PORT_ENV} sets the port)")
        return serve(dagster_dev(workspace, args.host, args.port), env=env, alongside=[reports])
    finally:
        reports.stop()


def _scale(text: str) -> float:
    """--scale: a number > 0 (argparse turns the ValueError into exit 2 naming the flag)."""
    from kcal_pipeline.dataset.findings_profile import check_scale

    try:
        return check_scale(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--scale ")) from None  # argparse names it


def cmd_findings_build(args) -> int:
    """`kcal findings --build`: materialize the profile's stage stores, then write the document."""
    from assets.findings_profile import build_profile
    from kcal_pipeline.core.progress import share_terminal
    from kcal_pipeline.dataset.findings_profile import DEFAULT_BEAR, DEFAULT_KISSLING, profile_stages

    root = profile_root(args)
    bear = Path(args.bear).expanduser().resolve() if args.bear else DEFAULT_BEAR
    kissling = Path(args.bear_templates).expanduser().resolve() if args.bear_templates else DEFAULT_KISSLING
    stages = profile_stages(args.scale, bear_dir=bear, kissling=kissling)
    share_terminal()  # statement_scores draws its progress bar there
    homes, failures = build_profile(
        root,
        stages,
        scale=args.scale,
        bear_dir=bear,
        kissling=kissling,
        command=getattr(args, "argv", []),
        log=_log_unless_interrupted,
    )
    code = _findings_after_build(args, homes)
    for failure in failures:
        print(f"kcal: failed: {failure}", file=sys.stderr)
    return 1 if failures else code


def _findings_after_build(args, stage_homes: dict[str, Path]) -> int:
    """The document from the built profile: every stage store, read as `kcal findings --profile
    DIR` does (the stores share one root, --profile-dir)."""
    if not stage_homes:
        print("kcal: error: no stage of the profile ran; no findings written", file=sys.stderr)
        return 2
    args.build, args.profile = False, str(profile_root(args))
    return cmd_findings(args)


def profile_root(args) -> Path:
    """--profile-dir, or KCAL_HOME/findings: the profile's stage stores live with the user's store."""
    if getattr(args, "profile_dir", None):
        return Path(args.profile_dir).expanduser().resolve()
    return kcal_home(args.home) / "findings"


DIRTY_REFUSAL = (
    "kcal: error: the checkout has uncommitted changes (kcal commit {commit}): findings are built and "
    "written from a clean commit, so that the commit they name reproduces them; commit the changes, "
    "or pass --allow-dirty (the document then says that no commit reproduces it)"
)


def cmd_findings(args) -> int:
    from kcal_pipeline.reporting.findings import kcal_commit

    commit = kcal_commit()
    if commit.endswith("+changes") and not getattr(args, "allow_dirty", False):
        print(DIRTY_REFUSAL.format(commit=commit), file=sys.stderr)
        return 2
    if getattr(args, "build", False):
        return cmd_findings_build(args)
    # Reads the store only (no lock); the document is written atomically, wherever --out points.
    from kcal_pipeline.core.storage import write_text_atomic
    from kcal_pipeline.reporting.findings import (
        VERDICTS,
        describe_sample,
        evaluate_claims,
        findings_json,
        model_provenance,
        profile_lines,
        provenance,
        read_profile,
        read_store_tables,
        readme_paragraph,
        render_findings,
        replace_readme_block,
    )

    if getattr(args, "profile", None):  # a findings profile: each claim reads its stage's store
        root = Path(args.profile).expanduser().resolve()
        stages, record = read_profile(root, args.model)
        findings = evaluate_claims(stages)
        models = list(dict.fromkeys(t.model_id for ts in stages.values() for t in ts))
        homes = [root / s for s in stages]
        samples = {f"`{t.model_id}`, stage `{s}`": describe_sample(t) for s, ts in stages.items() for t in ts}
        extra, shown_home = profile_lines(root, record), root
        again = f"kcal findings --profile {root} --out {args.out}" + (
            f" --readme {args.readme}" if getattr(args, "readme", None) else ""
        )
    else:
        home = kcal_home(args.home)
        tables = read_store_tables(home, args.model)
        findings = evaluate_claims(tables)
        models = [t.model_id for t in tables]
        homes, samples = [home], {f"`{t.model_id}`": describe_sample(t) for t in tables}
        extra, shown_home = [], home
        again = f"kcal findings --out {args.out}"
    # The registry describes each model (file, quantization, dtype); without its file the store
    # only knows the embedded default (Registry would write one: findings only read the store).
    entries = {m: DEFAULT_MODEL if m == DEFAULT_MODEL.id else None for m in models}
    for path in (registry_path(h) for h in homes):
        for m in (m for m in models if path.exists() and entries[m] is None):
            try:
                entries[m] = Registry(path).get(m)
            except (UnknownModelError, ModelConfigError):  # removed since, or a broken registry file
                entries[m] = None
    header = (
        provenance(shown_home, models, entries, ["kcal", *getattr(args, "argv", [])], commit=commit) + extra
    )
    document = render_findings(findings, models, samples, header, regenerate=again)
    path = write_text_atomic(Path(args.out), document)
    about = {"commit": commit, "model": "; ".join(model_provenance(entries.get(m), m) for m in models)}
    data = findings_json(findings, models, about)
    json_path = write_text_atomic(Path(args.out).with_suffix(".json"), data)
    if getattr(args, "readme", None):
        readme = Path(args.readme)
        text = replace_readme_block(readme.read_text("utf-8"), readme_paragraph(json.loads(data)))
        write_text_atomic(readme, text)
        print(f'findings: {readme}\'s "What it finds" regenerated from {json_path}')
    counts = ", ".join(f"{sum(f.verdict == v for f in findings)} {v}" for v in VERDICTS)
    print(f"findings: {path} ({len(findings)} verdicts on {len(models)} model(s): {counts})")
    return 0


def cmd_sql(args) -> int:
    # Read-only door: one SELECT, files only inside KCAL_HOME, views recreated if the store moved.
    from kcal_pipeline.core.warehouse import named_queries, named_query, one_line, query, query_descriptions

    choices = (("a SELECT", args.select), ("--query", args.query), ("--list", args.list or None))
    given = [what for what, value in choices if value is not None]  # "" is an (empty) SELECT
    if len(given) != 1:
        known = ", ".join(named_queries())
        print(
            f"kcal: error: give one of a SELECT, --query NAME (one of: {known}) or --list; got "
            f"{' and '.join(given) or 'none'}",
            file=sys.stderr,
        )
        return 2
    if args.list:
        descriptions = query_descriptions()  # a query file without its description line: an error
        width = max(map(len, descriptions), default=0)
        for name, description in descriptions.items():
            print(f"{name:<{width}}  {description}")
        return 0
    sql = args.select if args.query is None else named_query(args.query)  # unknown name: error
    try:
        cols, rows = query(kcal_home(args.home), sql)  # report queries are one SELECT each too
    except duckdb.Error as exc:
        print(f"kcal: error: {one_line(exc)}", file=sys.stderr)
        return 2
    if args.csv:
        import csv

        w = csv.writer(sys.stdout)
        w.writerow(cols)
        w.writerows(rows)
    else:
        _print_table(cols, rows)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kcal", description=__doc__.splitlines()[0])
    p.add_argument("--home", help="state root (default: $KCAL_HOME or ./.kcal)")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser(
        "demo", help="materialize everything missing on the registered models and print the summary"
    )
    d.add_argument("--model", action="append", help="model key (repeatable; default: every registered model)")
    d.add_argument(
        "--relation", action="append", help=f"relation id (repeatable; default: {', '.join(DEMO_RELATIONS)})"
    )
    d.add_argument("--all-relations", action="store_true", help="every relation of the catalog")
    d.add_argument("--refresh", action="store_true", help="recompute even what is materialized")
    add_option_flags(d, ProbeOptions, skip=("paraphrase_model", "paraphrase_relations"))
    add_option_flags(d, ScoringOptions)
    d.add_argument(
        "--generate",
        action="store_true",
        help="also ask the relations' open questions (MACE's setting: sampled answers and 15 "
        "confidence methods; only relations with question templates, e.g. mace-award; minutes per relation)",
    )
    add_option_flags(d, GenerationOptions)
    d.add_argument("--no-progress", action="store_true", help="no progress bar (log lines only)")
    _writes(d).set_defaults(func=cmd_demo)

    m = sub.add_parser("models", help="the model registry (KCAL_HOME/models.toml)")
    msub = m.add_subparsers(dest="models_command", required=True)
    msub.add_parser("list", help="list registered models").set_defaults(func=cmd_models_list)
    a = msub.add_parser("add", help="register a model and add its partition")
    a.add_argument("id", help="model id, e.g. a Hugging Face hub id")
    a.add_argument("--path", help="local directory with config, tokenizer and safetensors weights")
    a.add_argument("--gguf-package", help="Python package that ships a GGUF file")
    a.add_argument("--file", help="GGUF file name inside --gguf-package")
    a.add_argument("--gguf", help="a .gguf file (converted once to a safetensors cache)")
    a.add_argument("--revision", default="main", help="hub revision (commit, tag or branch)")
    a.add_argument(
        "--kind",
        default="auto",
        choices=["auto", "clm", "mlm"],
        help="causal (clm) or masked (mlm) LM; auto detects it from the model's config when loaded",
    )
    a.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    a.add_argument("--device", default="auto")
    a.add_argument("--batch-size", type=int, default=32)
    a.add_argument(
        "--token-budget",
        type=int,
        help="token positions (rows × padded width) per causal-LM forward call; default: sized "
        "automatically (on a GPU from free memory, grown while throughput improves; on CPU batch size × 32)",
    )
    a.add_argument(
        "--no-tf32",
        dest="tf32",
        action="store_false",
        help="float32 models on GPUs: full float32 matmuls instead of TF32 (slower, ~1e-3 closer)",
    )
    a.add_argument("--start-token", help="token prepended to every statement (default: BOS, else EOS)")
    a.add_argument(
        "--engine",
        default="torch",
        choices=["torch", "llama.cpp"],
        help="llama.cpp: score a GGUF source on its own quantized weights (faster on CPU, not float32 "
        "scores; needs `make llama-cpp`); default torch (float32 reference)",
    )
    a.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="run the model repository's own code (off by default)",
    )
    _writes(a).set_defaults(func=cmd_models_add)
    msub.add_parser("sync", help="make the Dagster 'model' partitions match the registry").set_defaults(
        func=cmd_models_sync
    )
    r = msub.add_parser("remove", help="unregister a model")
    r.add_argument("id", help="model id or key")
    _writes(r).set_defaults(func=cmd_models_remove)

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
    _writes(b).set_defaults(func=cmd_dataset_import_bear)
    pp = dsub.add_parser("paraphrase", help="generate template paraphrases with an instruct model")
    pp.add_argument("--model", help="model key (default: the first registered model)")
    pp.add_argument("--relation", action="append", help="relation id (repeatable; default: all)")
    _writes(pp).set_defaults(func=cmd_dataset_paraphrase)
    dsub.add_parser("quality", help="print the data-quality table").set_defaults(func=cmd_dataset_quality)

    from assets.cli_generation import add_generation_commands

    add_generation_commands(sub)

    q = sub.add_parser("sql", help="run a read-only SQL query over the DuckDB views")
    q.add_argument("select", nargs="?", metavar="SELECT", help="one SELECT over the views")
    q.add_argument("--query", metavar="NAME", help="run the report query sql/queries/NAME.sql instead")
    q.add_argument("--named", dest="query", help=argparse.SUPPRESS)  # the old spelling of --query
    q.add_argument("--list", action="store_true", help="list the report queries, one line each")
    q.add_argument("--csv", action="store_true", help="CSV output")
    q.set_defaults(func=cmd_sql)

    fd = sub.add_parser("findings", help="re-test the seed papers' claims on the store's models (Markdown)")
    fd.add_argument("--out", default="docs/findings.md", help="the document to write (default: %(default)s)")
    fd.add_argument(
        "--model", action="append", help="model key or id (repeatable; default: every model with metrics)"
    )
    fd.add_argument(
        "--profile",
        metavar="DIR",
        help="read a findings profile (kcal findings --build --profile-dir DIR) instead of one store: "
        "each claim reads its own stage's store",
    )
    fd.add_argument(
        "--build",
        action="store_true",
        help="first materialize the findings profile (one store per stage under --profile-dir, "
        "incremental and resumable; ~90 min on 2 CPU cores at --scale 1), then write the document",
    )
    fd.add_argument(
        "--profile-dir",
        default=None,
        metavar="DIR",
        help="with --build: the profile's root, a store per stage in DIR/<stage> (default: "
        "KCAL_HOME/findings)",
    )
    fd.add_argument(
        "--readme",
        metavar="FILE",
        help='also regenerate FILE\'s "What it finds" block (between its findings markers) from the '
        "findings written beside --out as JSON",
    )
    fd.add_argument(
        "--allow-dirty",
        action="store_true",
        help="build or write findings from a checkout with uncommitted changes (refused by default: no "
        "commit would reproduce them); the document then carries a warning",
    )
    fd.add_argument(
        "--scale",
        type=_scale,
        default=1.0,
        metavar="S",
        help="with --build: multiply the profile's instance targets by S > 0 (default: %(default)s)",
    )
    fd.add_argument(
        "--bear", metavar="DIR", help="with --build: the BEAR directory (default: ../shared/data/bear)"
    )
    fd.add_argument(
        "--bear-templates",
        metavar="FILE",
        help="with --build: Kissling et al.'s metadata_relations.json "
        "(default: ../shared/data/kissling-templates/metadata_relations.json)",
    )
    fd.set_defaults(func=cmd_findings)

    from assets.ui import WORKSPACE  # no Dagster import: the launcher only runs `dagster dev`

    bf = sub.add_parser(
        "backfill",
        help="submit a Dagster backfill scoring one model on every probe relation, then evaluating it "
        "(run by the daemon of `kcal ui`; shown on the UI's Backfills page)",
    )
    bf.add_argument("--model", required=True, help="model key (kcal models list)")
    bf.add_argument(
        "--relation", action="append", help="relation id (repeatable; default: every probe relation)"
    )
    bf.add_argument(
        "--wait", action="store_true", help="wait until the backfill is done, printing its progress"
    )
    bf.add_argument("--timeout", type=float, default=0, help="with --wait: give up after this many seconds")
    bf.set_defaults(func=cmd_backfill)

    from kcal_pipeline.core.report_server import DEFAULT_REPORTS_PORT, REPORTS_PORT_ENV

    u = sub.add_parser(
        "ui",
        help="the Dagster UI (dagster dev) on this store, and its reports over http on 127.0.0.1 "
        f"(port: {REPORTS_PORT_ENV}, default {DEFAULT_REPORTS_PORT}); Ctrl-C stops all of it",
    )
    u.add_argument("--host", default="127.0.0.1", help="webserver host (default: %(default)s)")
    u.add_argument("--port", type=int, help="webserver port (default: 3000)")
    u.add_argument("--workspace", default=str(WORKSPACE), help="workspace file (default: %(default)s)")
    u.set_defaults(func=cmd_ui)
    return p


INTERRUPTED = "interrupted; the next run resumes from the partition checkpoints"
_INTERRUPT_ERRORS = ("KeyboardInterrupt", "DagsterExecutionInterruptedError")


def _is_interrupt(exc: BaseException) -> bool:
    return any(cls.__name__ in _INTERRUPT_ERRORS for cls in type(exc).__mro__)


def _not_an_interrupt_report(record: logging.LogRecord) -> bool:
    """False for Dagster's report of an interrupted step or run (an error with its stack trace)."""
    return record.levelno < logging.ERROR or not any(n in str(record.msg) for n in _INTERRUPT_ERRORS)


def _not_a_logged_interrupt(record: logging.LogRecord) -> bool:
    """False for a record that carries a Ctrl-C as its exception: SQLAlchemy's pool logs one that
    lands while it closes a connection ("Exception closing connection" and a traceback)."""
    error = record.exc_info[1] if record.exc_info else None
    return error is None or not (isinstance(error, KeyboardInterrupt) or _is_interrupt(error))


# Loggers that can report a Ctrl-C with its traceback, when made before the command started.
IMPORT_TIME_LOGGERS = ("sqlalchemy",)


def _import_time_loggers() -> list[logging.Logger]:
    return [
        logger
        for name, logger in logging.root.manager.loggerDict.items()
        if isinstance(logger, logging.Logger) and name.startswith(IMPORT_TIME_LOGGERS)
    ]


def _not_a_storage_report(record: logging.LogRecord) -> bool:
    """False for Dagster's report, with its stack trace, of a step or resource that the file system
    refused (read-only, no permission, full): the command ends with one line saying it (main)."""
    return record.levelno < logging.ERROR or not any(words in str(record.msg) for words in KIND_OF_TEXT)


class _QuietOnInterrupt(logging.Logger):
    """The class of loggers made while a kcal command runs, Dagster's console logger and SQLAlchemy's
    (imported on first use) among them: they drop Dagster's reports of an interruption or of a
    refusing file system (the instance's event log still has them, where it can be written) and any
    record whose exception is the Ctrl-C."""

    def __init__(self, name: str, level: int | str = logging.NOTSET) -> None:
        super().__init__(name, level)
        self.addFilter(_not_an_interrupt_report)
        self.addFilter(_not_a_storage_report)
        self.addFilter(_not_a_logged_interrupt)


class CtrlC:
    """Ctrl-C ends a command with one line and exit code 130, and no traceback from anyone.

    The terminal sends SIGINT to the whole process group, so also to the processes kcal started,
    among them the `tail` and Python watcher that mirror each Dagster run's captured output (the
    watchers would print a KeyboardInterrupt traceback each). While the command runs, SIGINT is
    blocked in the main thread, so every child inherits it blocked; one of kcal's other threads
    takes the signal, Python runs the handler in the main thread as always (Dagster's, during a
    run: it stops the step, fails the run and tears its resources down) and a watcher thread,
    woken through signal.set_wakeup_fd, pokes the main thread with POKE so that a blocking call
    (an HTTP request, a sleep) returns at once. Dagster's console report of the interruption is
    dropped (_QuietOnInterrupt). Off the main thread or without pthread_sigmask a plain
    KeyboardInterrupt still ends in the same line.
    """

    POKE = getattr(signal, "SIGUSR2", None)
    active: CtrlC | None = None  # the running command's

    def __init__(self) -> None:
        self.pressed = False
        self._thread: threading.Thread | None = None

    def __enter__(self) -> CtrlC:
        CtrlC.active = self
        self._logger_class = logging.getLoggerClass()
        logging.setLoggerClass(_QuietOnInterrupt)
        self._filtered = _import_time_loggers()
        for logger in self._filtered:
            logger.addFilter(_not_a_logged_interrupt)
        usable = self.POKE is not None and hasattr(signal, "pthread_sigmask")
        if not usable or threading.current_thread() is not threading.main_thread():
            return self
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._wakeup = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._poke_handler = signal.signal(self.POKE, lambda signum, frame: None)
        self._mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        # The poke must reach the main thread even if the caller's mask blocks it.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {self.POKE})
        self._thread = threading.Thread(target=self._watch, name="kcal-ctrl-c", daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        # Unblocked here, so some thread can always take SIGINT (the main thread blocks it).
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        main = threading.main_thread().ident
        pokes = 0
        while True:
            # After Ctrl-C the main thread is poked a few more times, 0.2 s apart, in case one poke
            # landed just before a blocking call began; bounded, since each poke interrupts a syscall.
            retry = self.pressed and pokes < 10
            ready, _, _ = select.select([self._read], [], [], 0.2 if retry else None)
            if retry:
                pokes += 1
                signal.pthread_kill(main, self.POKE)
            if not ready:
                continue
            data = os.read(self._read, 64)
            if signal.SIGINT in data or signal.SIGTERM in data:
                self.pressed = True
                signal.pthread_kill(main, self.POKE)
            if not data or b"\xff" in data:  # __exit__: the command is over
                return

    def __exit__(self, *exc) -> bool:
        if self._thread is not None:
            os.write(self._write, b"\xff")
            self._thread.join()
            signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
            signal.signal(self.POKE, self._poke_handler)
            signal.set_wakeup_fd(self._wakeup)
            os.close(self._read)
            os.close(self._write)
        logging.setLoggerClass(self._logger_class)
        for logger in self._filtered:
            logger.removeFilter(_not_a_logged_interrupt)
        CtrlC.active = None
        return False


def _log_unless_interrupted(message: str) -> None:
    """run_missing's log, called between two Dagster runs. Dagster raises a Ctrl-C in user code (a
    step, an IO manager, a resource) and defers one that comes during its own bookkeeping to the
    next user code; one that comes after a run's last user code is dropped when the run ends. Such
    a Ctrl-C stops the command here, before the next run."""
    if CtrlC.active is not None and CtrlC.active.pressed:
        raise KeyboardInterrupt
    print(message)


def _interrupted(args: argparse.Namespace) -> int:
    print(f"kcal: {INTERRUPTED if args.command == 'demo' else 'interrupted'}", file=sys.stderr)
    return 130


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the exact command, for provenance
    if args.home:
        # The catalog (imported datasets) and the Dagster layer read KCAL_HOME from the environment.
        os.environ["KCAL_HOME"] = str(kcal_home(args.home))
    ctrl_c = CtrlC()
    # `kcal ui` takes its stop signals itself (assets/ui.py): CtrlC's SIGINT mask would reach dagster dev.
    guard = contextlib.nullcontext() if args.command == "ui" else ctrl_c
    try:
        with guard, _store_lock_for(args, argv):
            code = args.func(args)
        return _interrupted(args) if ctrl_c.pressed else code
    except BaseException as exc:
        # KeyboardInterrupt or Dagster's DagsterExecutionInterruptedError, or an error raised while
        # the interrupted run unwound
        if ctrl_c.pressed or _is_interrupt(exc):
            return _interrupted(args)
        home = kcal_home(args.home)
        refused = storage_failure(exc, home)  # a read-only, unwritable or full store, however wrapped
        if refused is not None:
            print(f"kcal: error: {describe_storage_failure(refused, home)}", file=sys.stderr)
            return 2
        if isinstance(exc, KeyError | ValueError | FileNotFoundError | RuntimeError | duckdb.Error):
            msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            print(f"kcal: error: {msg}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
