"""Loading a model from a folder (or a hub id) through transformers, and telling its kind.

Below loading.py and gguf.py, which both read folders: gguf.py checks a conversion by reloading the
folder it wrote, loading.py loads local and converted models, and neither needs the other for it.
"""

from __future__ import annotations

from pathlib import Path

from kcal_pipeline.scoring.models.registry import ModelLoadError

# Encoder-only families: transformers also offers a *ForCausalLM (decoder) head for several of them,
# so the model type alone would be ambiguous, but their checkpoints are masked LMs.
ENCODER_ONLY = (
    "albert",
    "bert",
    "big_bird",
    "camembert",
    "convbert",
    "data2vec-text",
    "deberta",
    "deberta-v2",
    "distilbert",
    "electra",
    "ernie",
    "megatron-bert",
    "mobilebert",
    "modernbert",
    "mpnet",
    "rembert",
    "roberta",
    "roberta-prelayernorm",
    "roc_bert",
    "roformer",
    "squeezebert",
    "xlm-roberta",
    "xlm-roberta-xl",
    "xmod",
)


def from_dir(
    folder: Path, torch_dtype, trust_remote_code: bool, kind: str = "clm", model_id: str | None = None
):
    """(model, tokenizer, kind) from a directory; kind 'auto' is decided from its config."""
    try:
        model, tokenizer, kind = from_pretrained(
            folder, torch_dtype, kind, model_id or str(folder), trust_remote_code=trust_remote_code
        )
    except (OSError, ValueError) as e:
        raise ModelLoadError(
            f"cannot load a model (kind {kind!r}) from {str(folder)!r} (config, tokenizer "
            f"and *.safetensors weights are required): {e}"
        ) from e
    return model, fast_tokenizer(tokenizer, str(folder)), kind


def from_pretrained(where, torch_dtype, kind: str, model_id: str, **opts):
    """Config first, so that kind 'auto' picks the model class before any weights are read."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

    config = AutoConfig.from_pretrained(where, **opts)
    kind = detect_kind(config, model_id) if kind == "auto" else kind
    auto = AutoModelForMaskedLM if kind == "mlm" else AutoModelForCausalLM
    model = auto.from_pretrained(where, config=config, dtype=torch_dtype, use_safetensors=True, **opts)
    tokenizer = AutoTokenizer.from_pretrained(where, **opts)
    return model, tokenizer, kind


def detect_kind(config, model_id: str) -> str:
    """'clm' or 'mlm' from a transformers config, so a registry entry need not say which.

    The checkpoint's own architecture decides first (…ForMaskedLM vs …ForCausalLM / …LMHeadModel),
    then is_decoder, then the model type: encoder-only families are masked LMs, and a type that
    transformers maps to only one of the two heads is that kind. Anything else is ambiguous
    (e.g. seq2seq models such as BART) and must be registered with an explicit kind.
    """
    archs = [a for a in (getattr(config, "architectures", None) or []) if isinstance(a, str)]
    by_arch = {k for k in map(_arch_kind, archs) if k}
    if len(by_arch) == 1:
        return by_arch.pop()
    model_type = getattr(config, "model_type", None)
    if not by_arch:
        if getattr(config, "is_decoder", False):
            return "clm"
        if model_type in ENCODER_ONLY:
            return "mlm"
        from transformers.models.auto import modeling_auto as auto

        causal = model_type in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
        masked = model_type in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES
        if causal != masked:
            return "clm" if causal else "mlm"
    raise ModelLoadError(
        f"model {model_id!r}: cannot tell whether it is a causal or a masked LM "
        f"(architectures {archs}, model_type {model_type!r}); set kind to 'clm' or 'mlm' "
        f"(`kcal models add ID --kind clm|mlm` or kind = ... in models.toml)"
    )


def _arch_kind(architecture: str) -> str | None:
    """XLM/Flaubert '…WithLMHeadModel' serve both objectives, so they decide nothing."""
    if architecture.endswith("ForMaskedLM"):
        return "mlm"
    if architecture.endswith("ForCausalLM") or (
        architecture.endswith("LMHeadModel") and not architecture.endswith("WithLMHeadModel")
    ):
        return "clm"
    return None


def fast_tokenizer(tokenizer, where: str):
    """Role assignment needs character offsets, which only fast tokenizers provide."""
    if not getattr(tokenizer, "is_fast", False):
        raise ModelLoadError(f"{where}: the tokenizer is not a fast (Rust) tokenizer; offsets are required")
    return tokenizer
