"""Every bad file is named: a truncated or corrupted Parquet partition (read by the library, by the
IO manager in a Dagster run and by `kcal sql`), a non-UTF-8 or malformed BEAR import file, a bad
catalog and a bad models.toml. The error names the file (and the line, or the asset and partition)
and says how to rebuild or fix it; nothing is written on the way."""

import polars as pl
import pytest
from dagster import AssetKey, DagsterInstance, MultiPartitionKey, materialize

from assets.definitions import all_assets
from assets.partitions import model_partitions, relation_partitions
from kcal_pipeline.core.storage import BadFileError, partition_path, read_partitions, write_parquet_atomic
from kcal_pipeline.core.warehouse import refresh_views
from kcal_pipeline.dataset.relations import get_relation, load_catalog
from kcal_pipeline.dataset.sources.bear.importing import import_bear
from kcal_pipeline.dataset.sources.facts import relation_facts
from kcal_pipeline.scoring.models import DEFAULT_MODEL, ModelConfigError, Registry
from resources import default_resources
from tests.conftest import run_kcal
from tests.dataset.test_bear import FACTS, write_bear
from tests.scoring.test_scoring_engine import STATEMENTS

KEY = DEFAULT_MODEL.key
SCORES = {"model": KEY, "relation": "P36"}
REBUILD_SCORES = (
    f"delete it and re-materialize statement_scores [model={KEY}, relation=P36] "
    f"(`kcal demo --model {KEY} --relation P36`"
)
IMPORT_AGAIN = "re-run `kcal dataset import-bear`"


@pytest.fixture
def kcal(tmp_path):
    """`kcal --home HOME ...` in this process (run_kcal): (exit code, stdout, stderr)."""

    def run(*args):
        out = run_kcal(tmp_path / "home", *args)
        return out.returncode, out.stdout, out.stderr

    return run


def damage(path, how):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if how == "truncated" else b"PAR1" + b"\x00garbage" * 64)


@pytest.mark.parametrize("how", ["truncated", "garbage"])
def test_a_damaged_partition_is_named_with_how_to_rebuild_it(tmp_path, how):
    home = tmp_path / "home"
    path = partition_path(home, "statement_scores", SCORES)
    write_parquet_atomic(pl.DataFrame({"statement_id": ["a", "b"], "score": [1.0, 2.0]}), path)
    damage(path, how)
    with pytest.raises(BadFileError) as err:
        read_partitions(home, "statement_scores", [SCORES])
    message = str(err.value)
    assert message.startswith(f"{path}: not a readable Parquet file (")
    assert REBUILD_SCORES in message
    assert path.exists()  # named, not silently deleted


def test_the_io_manager_names_a_damaged_upstream_partition(tmp_path):
    home = tmp_path / "home"
    statements = partition_path(home, "statements", {"relation": "P36"})
    write_parquet_atomic(STATEMENTS, statements)
    damage(statements, "truncated")
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(model_partitions.name, [KEY])
    instance.add_dynamic_partitions(relation_partitions.name, ["P36"])
    result = materialize(
        all_assets,
        selection=[AssetKey("statement_scores")],
        partition_key=MultiPartitionKey(SCORES),
        instance=instance,
        resources=default_resources(home=str(home)),
        raise_on_error=False,
    )
    assert not result.success
    failure = "\n".join(
        str(e.event_specific_data.error) for e in result.all_events if e.event_type_value == "STEP_FAILURE"
    )
    assert f"{statements}: not a readable Parquet file" in failure
    assert "delete it and re-materialize statements [relation=P36] (`kcal demo --relation P36`" in failure
    assert not partition_path(home, "statement_scores", SCORES).exists()


@pytest.mark.parametrize("views", ["made before the damage", "made over the damaged file"])
def test_kcal_sql_names_a_damaged_partition_with_how_to_rebuild_it(tmp_path, kcal, views):
    home = tmp_path / "home"
    path = partition_path(home, "statement_scores", SCORES)
    write_parquet_atomic(pl.DataFrame({"statement_id": ["a", "b"], "score": [1.0, 2.0]}), path)
    if views == "made before the damage":
        refresh_views(home)
    damage(path, "truncated")
    code, out, err = kcal("sql", "select count(*) from statement_scores")
    assert code != 0 and out == ""
    assert err.startswith("kcal: error: ") and str(path) in err
    assert REBUILD_SCORES in err
    assert "Traceback" not in err


@pytest.mark.parametrize("which, word", [("P36.jsonl", b"Germany"), ("metadata_relations.json", b"capital")])
def test_a_non_utf8_bear_file_is_named_with_its_line(tmp_path, kcal, which, word):
    root = write_bear(tmp_path / "bear")
    raw = (root / which).read_bytes().replace(word, word[:4] + b"\xe4" + word[5:], 1)  # latin-1 'ä'
    (root / which).write_bytes(raw)
    at = raw.index(b"\xe4")
    line, column = raw.count(b"\n", 0, at) + 1, at - raw.rfind(b"\n", 0, at)
    code, _, err = kcal("dataset", "import-bear", str(root))
    assert code != 0
    assert f"{root / which}:{line}: not UTF-8 text (byte 0xe4 at column {column})" in err
    assert IMPORT_AGAIN in err and "Traceback" not in err
    assert not (tmp_path / "home" / "datasets").exists()  # nothing imported


def test_a_malformed_bear_line_is_named_and_nothing_is_imported(tmp_path, kcal):
    root = write_bear(tmp_path / "bear", facts={**FACTS, "P36": [FACTS["P36"][0], FACTS["P36"][1][:25]]})
    code, _, err = kcal("dataset", "import-bear", str(root))
    assert code != 0
    assert f"{root / 'P36.jsonl'}:2: malformed or truncated JSON line" in err
    assert f"nothing was imported: fix it and {IMPORT_AGAIN}" in err
    assert not (tmp_path / "home" / "datasets").exists()


@pytest.mark.parametrize(
    "content, needle",
    [
        (
            b'[bear-P36\nlabel = "x"\n',
            "not a valid TOML catalog (Expected ']' at the end of a table declaration",
        ),
        (b'[bear-P36]\nlabel = "Z\xfcrich"\n', "not a valid TOML catalog ('utf-8' codec can't decode"),
        (b'[bear-P36]\nlabel = "x"\n', "[bear-P36]: missing field(s) kind, object_type, templates"),
    ],
)
def test_a_bad_imported_catalog_is_named_with_how_to_rebuild_it(tmp_path, monkeypatch, content, needle):
    home = tmp_path / "home"
    catalog = home / "datasets" / "bear" / "catalog.toml"
    catalog.parent.mkdir(parents=True)
    catalog.write_bytes(content)
    monkeypatch.setenv("KCAL_HOME", str(home))
    load_catalog.cache_clear()
    try:
        with pytest.raises(ValueError) as err:
            load_catalog()
    finally:
        load_catalog.cache_clear()
    message = str(err.value)
    assert message.startswith(str(catalog)) and needle in message
    assert "it is written by `kcal dataset import-bear`: re-run the import" in message


def test_a_bad_user_catalog_is_named(tmp_path):
    user = tmp_path / "mine.toml"
    user.write_text("[P36\n")
    load_catalog.cache_clear()
    try:
        with pytest.raises(
            ValueError, match=r"mine\.toml: not a valid TOML catalog \(.*line 1.*unset KCAL_CATALOG"
        ):
            load_catalog(str(user))
    finally:
        load_catalog.cache_clear()


@pytest.mark.parametrize(
    "content, needle",
    [
        (b"[[model]]\nid = 'a'\nsource = \n", "not valid TOML: Invalid value (at line 3, column 10)"),
        (b"\xff\xfe[[model]]\n", "not valid TOML: 'utf-8' codec can't decode byte 0xff in position 0"),
    ],
)
def test_a_bad_models_toml_is_named_with_how_to_fix_it(tmp_path, content, needle):
    path = tmp_path / "models.toml"
    path.write_bytes(content)
    with pytest.raises(ModelConfigError) as err:
        Registry(path).entries()
    assert str(err.value).startswith(f"{path}: {needle}")
    assert "move it away to start over with only the default model" in str(err.value)
    assert path.read_bytes() == content  # never overwritten


def test_damaged_imported_facts_are_named_with_how_to_rebuild_them(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("KCAL_HOME", str(home))
    _, paths = import_bear(write_bear(tmp_path / "bear"), home, log=lambda _: None)
    damage(paths["bear-P36"], "truncated")
    load_catalog.cache_clear()
    try:
        with pytest.raises(BadFileError) as err:
            relation_facts(get_relation("bear-P36"), None)
    finally:
        load_catalog.cache_clear()
    assert str(err.value).startswith(f"{paths['bear-P36']}: not a readable Parquet file")
    assert IMPORT_AGAIN in str(err.value)
