"""What the kcal subcommand modules share: the writing-command flag and the plain-text table."""

from __future__ import annotations

import argparse


def writes(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """A command that writes the store: it holds the store lock, and --no-wait fails if it is taken."""
    parser.add_argument(
        "--no-wait",
        action="store_true",
        help="fail at once if another kcal command or Dagster run writes this KCAL_HOME (default: wait)",
    )
    return parser


def print_table(cols: list[str], rows: list[tuple], out=None) -> None:
    def fmt(v):
        return f"{v:.4f}" if isinstance(v, float) else ("NULL" if v is None else str(v))

    cells = [[fmt(v) for v in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)), file=out)
    print("  ".join("-" * w for w in widths), file=out)
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)), file=out)
