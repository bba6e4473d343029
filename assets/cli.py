"""The `kcal` command line: run the demo, manage the model registry, query results with SQL.

The orchestration commands (demo, models add/remove) import the Dagster layer lazily, so the rest
of this library stays free of Dagster.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Literal, get_args, get_origin

import duckdb

from assets.cli_common import print_table, writes
from assets.cli_dataset import add_dataset_commands
from assets.cli_findings import add_findings_command
from assets.cli_generation import add_generation_commands
from assets.cli_interrupts import INTERRUPTED, CtrlC, is_interrupt, log_unless_interrupted
from assets.cli_models import add_models_commands, sync_partitions
from kcal_pipeline.core.filesystem_errors import describe as describe_storage_failure
from kcal_pipeline.core.filesystem_errors import storage_failure
from kcal_pipeline.core.options import GenerationOptions, Options, OptionsError, ProbeOptions, ScoringOptions
from kcal_pipeline.core.paths import (
    cross_model_report_path,
    duckdb_path,
    kcal_home,
    registry_path,
    report_path,
)
from kcal_pipeline.scoring.models import (
    Registry,
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


def cmd_demo(args) -> int:
    from assets.runner import run_missing  # Dagster layer, imported only when orchestrating
    from kcal_pipeline.core.progress import share_terminal
    from kcal_pipeline.dataset.relations import relation_ids
    from kcal_pipeline.reporting.terminal import model_summary_lines

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
        log=log_unless_interrupted,
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
        if args.model and not {entry.id, entry.key} & set(args.model):  # --model takes either
            continue
        lines = model_summary_lines(home, entry.id, entry.key, relations or relation_ids())
        if not lines:
            continue
        print("\n".join(lines))
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


def _store_lock_for(args: argparse.Namespace, argv: list[str] | None):
    """The store lock for a writing command (one declared with _writes), nothing for the others."""
    if not hasattr(args, "no_wait"):
        return contextlib.nullcontext()
    from kcal_pipeline.core.store_lock import hold_store_lock

    command = " ".join(["kcal", *(sys.argv[1:] if argv is None else argv)])
    return hold_store_lock(kcal_home(args.home), wait=not args.no_wait, command=command)


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
        sync_partitions(
            home
        )  # also writes DAGSTER_HOME's dagster.yaml where there is none, and sets DAGSTER_HOME
        # the runs the UI launches write report links to this port
        env = {**os.environ, "KCAL_HOME": str(home), REPORTS_PORT_ENV: str(reports.port)}
        url = f"http://{args.host}:{args.port or 3000}"
        print(f"Dagster UI: {url} (DAGSTER_HOME {env['DAGSTER_HOME']}); Ctrl-C stops it")
        print(f"Reports: {reports.url} (KCAL_HOME/reports; {REPORTS_PORT_ENV} sets the port)")
        return serve(dagster_dev(workspace, args.host, args.port), env=env, alongside=[reports])
    finally:
        reports.stop()


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
        print_table(cols, rows)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kcal", description=__doc__.splitlines()[0])
    p.add_argument("--home", help="state root (default: $KCAL_HOME or ./.kcal)")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser(
        "demo", help="materialize everything missing on the registered models and print the summary"
    )
    d.add_argument(
        "--model", action="append", help="model id or key (repeatable; default: every registered model)"
    )
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
    writes(d).set_defaults(func=cmd_demo)

    add_models_commands(sub)
    add_dataset_commands(sub)
    add_generation_commands(sub)

    q = sub.add_parser("sql", help="run a read-only SQL query over the DuckDB views")
    q.add_argument("select", nargs="?", metavar="SELECT", help="one SELECT over the views")
    q.add_argument("--query", metavar="NAME", help="run the report query sql/queries/NAME.sql instead")
    q.add_argument("--named", dest="query", help=argparse.SUPPRESS)  # the old spelling of --query
    q.add_argument("--list", action="store_true", help="list the report queries, one line each")
    q.add_argument("--csv", action="store_true", help="CSV output")
    q.set_defaults(func=cmd_sql)
    add_findings_command(sub)

    from assets.ui import WORKSPACE  # no Dagster import: the launcher only runs `dagster dev`

    bf = sub.add_parser(
        "backfill",
        help="submit a Dagster backfill scoring one model on every probe relation, then evaluating it "
        "(run by the daemon of `kcal ui`; shown on the UI's Backfills page)",
    )
    bf.add_argument("--model", required=True, help="model id or key (kcal models list)")
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
        if ctrl_c.pressed or is_interrupt(exc):
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
