"""Progress of long work: throttled log lines (Dagster log) and a one-line bar (terminal).

Scoring a partition can take many minutes; users want the rate and an ETA both in the Dagster UI's
log and, when they run `kcal demo` in a terminal, as a live bar. The meter is a plain callable
progress(done, total) so scorers need not know where it goes.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import TextIO

BAR_WIDTH = 24


def format_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def describe(label: str, done: int, total: int, elapsed: float, unit: str = "statements") -> str:
    """'label 120/480 statements, 30.0/s, ETA 12s' (rate and ETA from the average so far)."""
    rate = done / elapsed if elapsed > 0 else 0.0
    eta = (total - done) / rate if rate > 0 else float("nan")
    eta_text = format_duration(eta) if eta == eta else "?"
    return f"{label} {done}/{total} {unit}, {rate:.1f}/s, ETA {eta_text}"


def bar(done: int, total: int, width: int = BAR_WIDTH) -> str:
    filled = width if total <= 0 else min(width, width * done // total)
    return "[" + "#" * filled + "." * (width - filled) + "]"


class ProgressMeter:
    """progress(done, total) → a log line at most every `log_every` s (and at the end), and, if a
    stream is given, a bar redrawn in place at most every `draw_every` s."""

    def __init__(
        self,
        label: str,
        log: Callable[[str], None] | None = None,
        stream: TextIO | None = None,
        log_every: float = 5.0,
        draw_every: float = 0.2,
        clock: Callable[[], float] = time.perf_counter,
        unit: str = "statements",
    ) -> None:
        self.label, self.log, self.stream, self.unit = label, log, stream, unit
        self.log_every, self.draw_every, self.clock = log_every, draw_every, clock
        self.started = clock()
        self._logged = self._drawn = float("-inf")
        self._last: tuple[int, int] | None = None

    def __call__(self, done: int, total: int) -> None:
        if (done, total) == self._last:  # e.g. a chunk's end reported by scorer and chunker
            return
        self._last = (done, total)
        now = self.clock()
        text = describe(self.label, done, total, now - self.started, self.unit)
        final = done >= total
        if self.log is not None and (final or now - self._logged >= self.log_every):
            self._logged = now
            self.log(text)
        if self.stream is not None and (final or now - self._drawn >= self.draw_every):
            self._drawn = now
            self.stream.write(f"\r{bar(done, total)} {text}\x1b[K" + ("\n" if final else ""))
            self.stream.flush()

    @property
    def elapsed(self) -> float:
        return self.clock() - self.started


PROGRESS_FD_ENV = "KCAL_PROGRESS_FD"


def share_terminal() -> None:
    """Called by the CLI before Dagster runs: Dagster captures a step's stderr into its compute
    logs, so the bar is drawn on a duplicate of the terminal's stderr, passed by descriptor."""
    if sys.stderr.isatty() and PROGRESS_FD_ENV not in os.environ:
        fd = os.dup(sys.stderr.fileno())
        os.set_inheritable(fd, False)
        os.environ[PROGRESS_FD_ENV] = str(fd)


_streams: dict[int, TextIO] = {}


def terminal_stream() -> TextIO | None:
    """The terminal shared by share_terminal(), if any and still a terminal; else None (log lines
    only: no escape codes in files or pipes)."""
    try:
        fd = int(os.environ.get(PROGRESS_FD_ENV, ""))
    except ValueError:
        return None
    try:
        if not os.isatty(fd):
            return None
    except OSError:
        return None
    if fd not in _streams:
        _streams[fd] = os.fdopen(fd, "w", encoding="utf-8", closefd=False)
    return _streams[fd]
