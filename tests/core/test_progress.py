"""Progress lines and the terminal bar, on a fake clock (values computed by hand)."""

import io

from kcal_pipeline.core.progress import ProgressMeter, bar, describe, format_duration


def test_describe_rate_and_eta():
    assert describe("scoring:", 120, 480, 4.0) == "scoring: 120/480 statements, 30.0/s, ETA 12s"
    assert describe("x", 0, 10, 0.0) == "x 0/10 statements, 0.0/s, ETA ?"
    assert format_duration(3725) == "1h02m05s" and format_duration(61) == "1m01s"


def test_bar():
    assert bar(5, 10, width=10) == "[#####.....]"
    assert bar(10, 10, width=4) == "[####]" and bar(0, 0, width=2) == "[##]"


def test_meter_throttles_log_lines_but_always_logs_the_end():
    now = [0.0]
    lines, stream = [], io.StringIO()
    meter = ProgressMeter(
        "s:", log=lines.append, stream=stream, log_every=5, draw_every=1, clock=lambda: now[0]
    )
    for t, done in [(1, 10), (2, 20), (6, 60), (7, 70), (8, 100)]:
        now[0] = t
        meter(done, 100)
    assert lines == [
        "s: 10/100 statements, 10.0/s, ETA 9s",
        "s: 60/100 statements, 10.0/s, ETA 4s",
        "s: 100/100 statements, 12.5/s, ETA 0s",
    ]
    drawn = stream.getvalue().split("\r")[1:]
    assert len(drawn) == 5 and drawn[-1].endswith("\x1b[K\n") and drawn[-1].startswith("[" + "#" * 24 + "]")


def test_a_repeated_report_is_shown_once():
    lines = []
    meter = ProgressMeter("s:", log=lines.append, clock=lambda: 1.0)
    meter(10, 10)
    meter(10, 10)
    assert len(lines) == 1


def test_the_terminal_is_shared_by_descriptor_only_when_it_is_one(monkeypatch, tmp_path):
    from kcal_pipeline.core import progress

    monkeypatch.delenv(progress.PROGRESS_FD_ENV, raising=False)
    assert progress.terminal_stream() is None
    with open(tmp_path / "log", "w") as fh:  # a file is not a terminal: no bar, no escape codes
        monkeypatch.setenv(progress.PROGRESS_FD_ENV, str(fh.fileno()))
        assert progress.terminal_stream() is None
    monkeypatch.setenv(progress.PROGRESS_FD_ENV, "not-a-number")
    assert progress.terminal_stream() is None
