import os

import polars as pl
import pytest

from kcal_pipeline.core import storage
from kcal_pipeline.core.storage import partition_path, read_partitions, write_parquet_atomic


def test_hive_layout(tmp_path):
    p = partition_path(tmp_path, "statement_scores", {"relation": "P36", "model": "m--x"})
    assert p == tmp_path / "statement_scores" / "model=m--x" / "relation=P36" / "part.parquet"
    assert partition_path(tmp_path, "relations") == tmp_path / "relations" / "part.parquet"


@pytest.mark.parametrize(
    ("dims", "message"),
    [
        ({"model": "../x"}, r"invalid model partition '\.\./x': must be one plain path segment"),
        ({"model": "a/b"}, r"invalid model partition 'a/b': must be one plain path segment"),
        ({"relation": "P36/.."}, r"invalid relation partition 'P36/\.\.': expected a letter followed by"),
        ({"batch": "1"}, r"unknown partition dimension\(s\) \['batch'\] for table 'estimates'"),
    ],
)
def test_partition_values_cannot_escape(tmp_path, dims, message):
    with pytest.raises(ValueError, match=message):
        partition_path(tmp_path, "estimates", dims)


def test_atomic_write_and_unchanged_file_untouched(tmp_path):
    path = tmp_path / "t" / "part.parquet"
    df = pl.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})
    assert write_parquet_atomic(df, path) is True
    os.utime(path, (1_000_000, 1_000_000))
    assert write_parquet_atomic(df, path) is False  # same content: file not rewritten
    assert path.stat().st_mtime == 1_000_000
    assert write_parquet_atomic(df.with_columns(a=pl.col("a") * 2), path) is True
    assert pl.read_parquet(path)["a"].to_list() == [2, 4, 6]
    assert [p.name for p in path.parent.iterdir()] == ["part.parquet"]  # no temp files left


def test_interrupted_write_keeps_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "t" / "part.parquet"
    old = pl.DataFrame({"a": [1, 2]})
    write_parquet_atomic(old, path)
    before = path.read_bytes()

    def half_then_fail(self, file, **kwargs):
        with open(file, "wb") as fh:
            fh.write(b"PAR1 half a file")
        raise KeyboardInterrupt("killed mid-write")

    monkeypatch.setattr(pl.DataFrame, "write_parquet", half_then_fail)
    with pytest.raises(KeyboardInterrupt, match="killed mid-write"):
        write_parquet_atomic(pl.DataFrame({"a": [9, 9, 9]}), path)
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir()] == ["part.parquet"]


def test_read_partitions_concatenates_and_names_missing(tmp_path):
    for r, n in (("P36", 2), ("P30", 3)):
        write_parquet_atomic(
            pl.DataFrame({"x": list(range(n))}), partition_path(tmp_path, "t", {"relation": r})
        )
    both = read_partitions(tmp_path, "t", [{"relation": "P36"}, {"relation": "P30"}])
    assert both["x"].to_list() == [0, 1, 0, 1, 2]
    with pytest.raises(FileNotFoundError, match="relation=P37"):
        read_partitions(tmp_path, "t", [{"relation": "P37"}])
    assert storage.existing_tables(tmp_path) == ["t"]


def test_read_partitions_reads_only_the_columns_asked_for_that_a_file_has(tmp_path):
    # a newer file with column k, an older one without: the older reads as nulls, never an error
    new = pl.DataFrame({"model_id": ["A"], "k": ["clm"], "wide": [[0.5, 0.25]]})
    write_parquet_atomic(new, partition_path(tmp_path, "t", {"relation": "P36"}))
    write_parquet_atomic(
        pl.DataFrame({"model_id": ["B"]}), partition_path(tmp_path, "t", {"relation": "P30"})
    )
    both = read_partitions(
        tmp_path, "t", [{"relation": "P36"}, {"relation": "P30"}], columns=["model_id", "k"]
    )
    assert both.columns == ["model_id", "k"] and both.rows() == [("A", "clm"), ("B", None)]


def test_existing_partitions_lists_one_models_files_or_every_file(tmp_path):
    from kcal_pipeline.core.storage import existing_partitions

    frame = pl.DataFrame({"x": [1]})
    for dims in (
        {"model": "a", "relation": "P1"},
        {"model": "a", "relation": "P2"},
        {"model": "b", "relation": "P1"},
    ):
        write_parquet_atomic(frame, partition_path(tmp_path, "generations", dims))
    found = existing_partitions(tmp_path, "generations", {"model": "a"})
    assert [p.parent.name for p in found] == ["relation=P1", "relation=P2"]
    assert len(existing_partitions(tmp_path, "generations")) == 3
    assert existing_partitions(tmp_path, "generation_metrics", {"model": "a"}) == []
    with pytest.raises(ValueError):
        existing_partitions(tmp_path, "generations", {"model": "../b"})


def test_declared_reads_of_relation_and_model_tables_version_exactly_those_files(tmp_path):
    from kcal_pipeline.core.options import GenerationOptions, ProbeOptions, ScoringOptions
    from resources.settings import generation_reads, resolve_reads

    frame = pl.DataFrame({"x": [1]})
    write_parquet_atomic(frame, partition_path(tmp_path, "wikidata_facts", {"relation": "P1"}))
    write_parquet_atomic(frame, partition_path(tmp_path, "wikidata_facts", {"relation": "P2"}))
    write_parquet_atomic(frame, partition_path(tmp_path, "generation_metrics", {"model": "a"}))
    dims = {"model": "a", "relation": "P1"}
    reads = [
        "relation_table:wikidata_facts",
        "relation_tables:wikidata_facts",
        "model_tables:generation_metrics",
    ]
    values, files = resolve_reads(reads, dims, ProbeOptions(), ScoringOptions(), tmp_path)
    assert values == {}
    assert [f.relative_to(tmp_path).as_posix() for f in files] == [
        "wikidata_facts/relation=P1/part.parquet",
        "wikidata_facts/relation=P1/part.parquet",
        "wikidata_facts/relation=P2/part.parquet",
        "generation_metrics/model=a/part.parquet",
    ]
    values, _ = resolve_reads(list(generation_reads()), dims, ProbeOptions(), ScoringOptions(), tmp_path,
                              GenerationOptions(n_samples=4))  # fmt: skip
    assert values["generation.n_samples"] == 4 and values["generation.temperature"] == 1.0
