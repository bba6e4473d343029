"""Chunked, resumable scoring: a killed run loses at most one chunk and never duplicates a row."""

import polars as pl
import pytest

from kcal_pipeline.scoring.checkpoints import FINGERPRINT_FILE, score_in_chunks


def statements(n: int = 10) -> pl.DataFrame:
    return pl.DataFrame(
        {"statement_id": [f"s{i:02d}" for i in range(n)], "text": [f"statement number {i}" for i in range(n)]}
    )


class Scorer:
    """A deterministic per-row function (length of the text), counting what it scored."""

    def __init__(self, crash_on_call: int | None = None):
        self.calls, self.rows, self.crash_on_call = 0, [], crash_on_call

    def __call__(self, chunk: pl.DataFrame) -> pl.DataFrame:
        self.calls += 1
        if self.calls == self.crash_on_call:
            raise KeyboardInterrupt("killed (injected)")
        self.rows += chunk["statement_id"].to_list()
        return pl.DataFrame({"n_chars": chunk["text"].str.len_chars()})


def test_chunks_cover_every_row_once_in_order(tmp_path):
    seen = []
    frame, report = score_in_chunks(
        statements(),
        Scorer(),
        tmp_path / "ck",
        "fp1",
        chunk_size=4,
        on_chunk=lambda d, t: seen.append((d, t)),
    )
    assert seen == [(4, 10), (8, 10), (10, 10)]
    assert (report.chunks, report.scored, report.resumed) == (3, 3, 0)
    assert frame["statement_id"].to_list() == statements()["statement_id"].to_list()
    assert frame["n_chars"].to_list() == [18] * 10  # "statement number 0" … all 18 characters
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == [
        "chunk-000000.parquet",
        "chunk-000001.parquet",
        "chunk-000002.parquet",
        FINGERPRINT_FILE,
    ]


def test_a_killed_run_resumes_without_losing_or_duplicating_rows(tmp_path):
    expected, _ = score_in_chunks(statements(), Scorer(), tmp_path / "clean", "fp", chunk_size=3)
    killed = Scorer(crash_on_call=3)  # dies while scoring the third chunk
    with pytest.raises(KeyboardInterrupt):
        score_in_chunks(statements(), killed, tmp_path / "ck", "fp", chunk_size=3)
    assert killed.rows == ["s00", "s01", "s02", "s03", "s04", "s05"]  # two chunks finished
    resumed = Scorer()
    frame, report = score_in_chunks(statements(), resumed, tmp_path / "ck", "fp", chunk_size=3)
    assert resumed.rows == ["s06", "s07", "s08", "s09"]  # only what was lost or not yet done
    assert (report.resumed, report.scored) == (2, 2)
    assert frame.equals(expected)
    assert frame["statement_id"].n_unique() == frame.height == 10


def test_other_inputs_discard_the_checkpoints(tmp_path):
    score_in_chunks(statements(), Scorer(), tmp_path, "old", chunk_size=4)
    again = Scorer()
    _, report = score_in_chunks(statements(), again, tmp_path, "new", chunk_size=4)
    assert report.resumed == 0 and len(again.rows) == 10
    assert (tmp_path / FINGERPRINT_FILE).read_text().strip() == "new"


def test_a_chunk_file_for_other_statements_is_rescored(tmp_path):
    score_in_chunks(statements(), Scorer(), tmp_path, "fp", chunk_size=5)
    pl.DataFrame({"statement_id": ["x"] * 5, "n_chars": [0] * 5}).write_parquet(
        tmp_path / "chunk-000001.parquet"
    )
    (tmp_path / "chunk-000000.parquet").write_bytes(b"not parquet")
    again = Scorer()
    frame, report = score_in_chunks(statements(), again, tmp_path, "fp", chunk_size=5)
    assert report.scored == 2 and frame["n_chars"].to_list() == [18] * 10


def test_bad_chunk_size_and_missing_ids_are_errors(tmp_path):
    with pytest.raises(ValueError, match="chunk_size must be a positive integer, got 0"):
        score_in_chunks(statements(), Scorer(), tmp_path, "fp", chunk_size=0)
    with pytest.raises(ValueError, match="'statement_id'"):
        score_in_chunks(statements().drop("statement_id"), Scorer(), tmp_path, "fp")


def test_a_scorer_returning_the_wrong_row_count_is_an_error(tmp_path):
    with pytest.raises(RuntimeError, match="returned 1 rows for a chunk of 4"):
        score_in_chunks(statements(), lambda c: pl.DataFrame({"n_chars": [1]}), tmp_path, "fp", chunk_size=4)
