"""`kcal findings`: re-test the seed papers' claims on a store or a findings profile, and
`--build` the profile first."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from assets.cli_interrupts import log_unless_interrupted
from kcal_pipeline.core.paths import kcal_home, registry_path
from kcal_pipeline.scoring.models import DEFAULT_MODEL, ModelConfigError, Registry, UnknownModelError


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
        log=log_unless_interrupted,
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


def add_findings_command(sub) -> None:
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
