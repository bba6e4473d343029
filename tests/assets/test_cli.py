"""The `kcal` command line on a temporary KCAL_HOME and DAGSTER_HOME (a real Dagster instance)."""

from pathlib import Path

import pytest

from bench._data import build_tiny_mlm
from tests.conftest import run_kcal


def kcal(home: Path, *args: str):
    return run_kcal(home, *args, timeout=120)


def partitions(home: Path) -> list[str]:
    from dagster import DagsterInstance

    with DagsterInstance.from_config(str(home / "dagster")) as inst:
        return sorted(inst.get_dynamic_partitions("model"))


def embedded_gguf() -> Path:
    """The GGUF file of the embedded model, in its package (registering a file does not load it)."""
    import importlib.util

    from kcal_pipeline.scoring.models import DEFAULT_MODEL

    spec = importlib.util.find_spec(DEFAULT_MODEL.package)
    return Path(next(iter(spec.submodule_search_locations))) / DEFAULT_MODEL.file


def test_models_add_list_remove_keeps_partitions_in_sync(tmp_path):
    (tmp_path / "dagster").mkdir()
    (tmp_path / "dagster" / "dagster.yaml").touch()
    out = kcal(tmp_path, "models", "list")
    assert out.returncode == 0 and "HuggingFaceTB/SmolLM2-135M-Instruct" in out.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    out = kcal(tmp_path, "models", "add", "lab/my-clm", "--path", str(empty))
    assert out.returncode == 2 and "has no config.json" in out.stderr and "Traceback" not in out.stderr
    model_dir = build_tiny_mlm(tmp_path / "my model")
    out = kcal(
        tmp_path, "models", "add", "lab/my-clm", "--path", str(model_dir), "--batch-size", "8",
        "--token-budget", "2048", "--no-tf32",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert partitions(tmp_path) == ["HuggingFaceTB--SmolLM2-135M-Instruct", "lab--my-clm"]
    listed = kcal(tmp_path, "models", "list").stdout
    assert "lab/my-clm" in listed and "token budget" in listed
    mine = next(line for line in listed.splitlines() if "lab/my-clm" in line)
    assert mine.split()[-2:] == ["8", "2048"]  # batch, token budget
    assert next(line for line in listed.splitlines() if "SmolLM2" in line).split()[-1] == "auto"
    assert "tf32 = false" in (tmp_path / "models.toml").read_text()
    again = kcal(tmp_path, "models", "add", "lab/my-clm", "--path", str(model_dir))
    assert again.returncode == 2 and "lab/my-clm" in again.stderr and "Traceback" not in again.stderr
    assert kcal(tmp_path, "models", "remove", "lab/my-clm").returncode == 0
    assert partitions(tmp_path) == ["HuggingFaceTB--SmolLM2-135M-Instruct"]
    out = kcal(tmp_path, "models", "add", "lab/my-gguf", "--gguf", str(tmp_path / "m.gguf"))
    assert out.returncode == 2 and "does not exist" in out.stderr
    out = kcal(tmp_path, "models", "add", "lab/my-gguf", "--gguf", str(embedded_gguf()))
    assert out.returncode == 0, out.stderr
    listed = kcal(tmp_path, "models", "list").stdout
    assert "lab--my-gguf" in listed and "gguf_file" in listed


@pytest.mark.parametrize(
    "args, needle",
    [
        (["models", "add", "x/y", "--batch-size", "0"], "batch_size"),
        (["models", "add", "x/y", "--token-budget", "8"], "token_budget must be an integer >= 16"),
        (["models", "remove", "not/registered"], "not/registered"),
        (["models", "add", "x/y", "--gguf", "weights.bin"], "'.gguf' file"),
        (["models", "add", "x/y", "--kind", "seq2seq"], "invalid choice: 'seq2seq'"),
        (["models", "add", "x/y", "--engine", "llama.cpp"], "engine must be 'torch' for source 'hf'"),
        (["models", "add", "x/y", "--engine", "onnx"], "invalid choice: 'onnx'"),
    ],
)
def test_models_bad_input_is_named(tmp_path, args, needle):
    out = kcal(tmp_path, *args)
    assert out.returncode == 2 and needle in out.stderr and "Traceback" not in out.stderr


def test_sql_is_read_only_and_errors_are_clean(tmp_path):
    import polars as pl

    from kcal_pipeline.core.storage import partition_path, write_parquet_atomic

    write_parquet_atomic(
        pl.DataFrame({"relation_id": ["P36"], "label": ["capital"]}), partition_path(tmp_path, "relations")
    )
    out = kcal(tmp_path, "sql", "select label from relations")
    assert out.returncode == 0 and "capital" in out.stdout
    out = kcal(tmp_path, "sql", "create table t as select 1")
    assert out.returncode == 2 and "read-only" in out.stderr.lower() and "Traceback" not in out.stderr
    out = kcal(tmp_path, "sql", "select * from no_such_table")
    assert out.returncode == 2 and "no_such_table" in out.stderr


def test_sql_named_runs_the_projects_query_and_names_bad_choices(tmp_path):
    import polars as pl

    from kcal_pipeline.core.storage import partition_path, write_parquet_atomic
    from kcal_pipeline.estimation.catalog import estimator_catalog
    from kcal_pipeline.evaluation.catalog import metric_catalog

    # the report queries select estimators and metrics by the catalogs' flags
    write_parquet_atomic(estimator_catalog(), partition_path(tmp_path, "estimator_catalog"))
    write_parquet_atomic(metric_catalog(), partition_path(tmp_path, "metric_catalog"))
    # a metrics table with Base and Margin on the headline selection (test, k 0, scope all), and
    # one estimator_status and estimates row each, as the estimators query joins them
    metrics = pl.DataFrame(
        {
            "model_id": "m", "estimator": ["base", "base", "margin", "gap"], "reduction": "sum",
            "split": "test", "answer_space_k": 0, "scope": "all", "scope_value": "all",
            "metric": ["accuracy", "ace", "accuracy", "auroc"], "value": [0.75, 0.125, 0.75, 0.5], "n": 8,
        }
    )  # fmt: skip
    write_parquet_atomic(metrics, partition_path(tmp_path, "metrics", {"model": "m"}))
    status = pl.DataFrame(
        {
            "model_id": "m",
            "relation_id": "P36",
            "estimator": ["base", "margin", "gap"],
            "family": "f",
            "status": "ran",
        }
    )
    where = {"model": "m", "relation": "P36"}
    write_parquet_atomic(status, partition_path(tmp_path, "estimator_status", where))
    kinds = pl.DataFrame(
        {"estimator": ["base", "margin", "gap"], "output_kind": ["probability"] * 2 + ["score"]}
    )
    write_parquet_atomic(kinds, partition_path(tmp_path, "estimates", where))
    out = kcal(tmp_path, "sql", "--query", "estimators", "--csv")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "model_id,family,estimator,reduction,output_kind,instances,accuracy,ace,brier,auroc"
    assert lines[1:] == [
        "m,f,base,sum,probability,8,0.75,0.125,,",
        "m,f,gap,sum,score,8,,,,0.5",
        "m,f,margin,sum,probability,8,0.75,,,",
    ]
    out = kcal(tmp_path, "sql", "--query", "../../etc/passwd")
    assert (
        out.returncode == 2
        and "no query named '../../etc/passwd'" in out.stderr
        and "estimators" in out.stderr
    )
    out = kcal(tmp_path, "sql", "select 1", "--query", "estimators")
    assert out.returncode == 2 and "got a SELECT and --query" in out.stderr
    alias = kcal(tmp_path, "sql", "--named", "estimators", "--csv")  # the old spelling, hidden
    assert alias.returncode == 0 and alias.stdout.splitlines() == lines


def test_demo_flags_are_the_option_fields():
    from assets.cli import build_parser, option_values
    from kcal_pipeline.core.options import ProbeOptions, ScoringOptions

    args = build_parser().parse_args(
        ["demo", "--template-kinds", "curated,marker_verbal", "--no-fast-path", "--subject-mask",
         "--dropout-rate", "0.25", "--max-instances", "7", "--mlm-variant", "original",
         "--perturbation-seeds", "4,44"]
    )  # fmt: skip
    assert option_values(args, ProbeOptions) == {
        "template_kinds": ["curated", "marker_verbal"],
        "max_instances": 7,
        "perturbation_seeds": ["4", "44"],
    }
    assert ProbeOptions(**option_values(args, ProbeOptions)).perturbation_seeds == [4, 44]
    assert option_values(args, ScoringOptions) == {
        "fast_path": False, "subject_mask": True, "dropout_rate": 0.25, "mlm_variant": "original"
    }  # fmt: skip
    help_text = build_parser()._subparsers._group_actions[0].choices["demo"].format_help()
    for options in (ProbeOptions, ScoringOptions):
        for name, field in options.model_fields.items():
            if name.startswith("paraphrase_"):
                continue  # `kcal dataset paraphrase` takes those
            assert f"--{name.replace('_', '-')}" in help_text or f"--no-{name.replace('_', '-')}" in help_text
            assert field.description and field.description.split()[0] in help_text


@pytest.mark.parametrize(
    "args, needle",
    [
        (
            ["--answer-space-k", "1"],
            "probe settings: answer_space_k=1: a one-option copy is always 'correct'",
        ),
        (["--template-kinds", "curated,bogus"], "probe setting template_kinds=['curated', 'bogus']"),
        (
            ["--perturbation-seeds", "4,44,4"],
            "probe setting perturbation_seeds=['4', '44', '4']: seeds must be distinct, got [4]",
        ),
        (["--dropout-passes", "-2"], "scoring setting dropout_passes=-2"),
        (["--dropout-rate", "1.5", "--n-negatives", "0"], "n_negatives=0"),
        (["--relation", "P36", "--relation", "P999"], "--relation P999: not in the catalog; known: P36,"),
        (
            ["--model", "nobody/none"],
            "--model nobody/none: not registered; registered (id or key): "
            "HuggingFaceTB/SmolLM2-135M-Instruct (HuggingFaceTB--SmolLM2-135M-Instruct)",
        ),
    ],
)
def test_demo_refuses_bad_settings_before_any_work(tmp_path, args, needle):
    out = kcal(tmp_path, "demo", *args)
    assert out.returncode == 2 and needle in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "dagster").exists() and not list(tmp_path.rglob("*.parquet"))


@pytest.mark.parametrize("value", ["70000", "0", "http", "-1"])
def test_a_bad_reports_port_stops_the_demo_before_any_work(tmp_path, monkeypatch, value):
    """KCAL_REPORTS_PORT is read by the last step (the report links): checked with the run's models
    and relations, it stops `kcal demo` at once, not after the probe and the scoring."""
    from tests.dataset.test_bear import write_bear

    home = tmp_path / "kcal"
    assert run_kcal(home, "dataset", "import-bear", str(write_bear(tmp_path / "BEAR"))).returncode == 0
    assert run_kcal(home, "models", "list").returncode == 0  # a store with files, Dagster's included
    before = {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in home.rglob("*")}
    monkeypatch.setenv("KCAL_REPORTS_PORT", value)
    result = run_kcal(home, "demo", "--relation", "P36", timeout=120)
    assert result.returncode != 0
    assert f"KCAL_REPORTS_PORT={value!r}: not a port number (1-65535)" in result.stderr
    assert "Traceback" not in result.stderr
    assert {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in home.rglob("*")} == before  # no file changed


def test_a_model_is_named_by_its_hub_id_or_its_key(tmp_path):
    """`--model` takes what users type: `models add/remove` take the id, the registry both."""
    from assets.runner import check_run
    from kcal_pipeline.scoring.models import DEFAULT_MODEL

    key, hub_id = DEFAULT_MODEL.key, DEFAULT_MODEL.id
    assert check_run(tmp_path, [hub_id], ["P36"]) == ([key], ["P36"])
    assert check_run(tmp_path, [key, hub_id], ["P36"]) == ([key], ["P36"])  # one model, named twice
    with pytest.raises(KeyError, match=r"--model lab/none: not registered; registered \(id or key\)"):
        check_run(tmp_path, ["lab/none"], ["P36"])
