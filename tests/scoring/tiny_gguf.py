"""A tiny llama GGUF file for the tests of GGUF handling (file sources, conversion, the manifest)
that do not need SmolLM2's weights: one block of width 64 in float32 and a byte-level BPE tokenizer
of 260 tokens (GPT-2's byte alphabet, three merges, <|endoftext|> as token 0, as SmolLM2 has it).
It converts in about a second, where de-quantising the real file (and building its 49,152-token
tokenizer from GGUF fields, twice) takes ~30 s. The weights are seeded random numbers."""

from __future__ import annotations

from pathlib import Path

import numpy as np

WIDTH, FFN, HEADS, KV_HEADS = 64, 128, 4, 2
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he")]  # a few, so the BPE has merges to apply


def _byte_tokens() -> list[str]:
    """GPT-2's byte-level alphabet: one printable character per byte value."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[byte] = chr(byte)
        else:
            chars[byte] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def write_tiny_gguf(path: Path, seed: int = 0) -> Path:
    import gguf

    tokens = ["<|endoftext|>", *_byte_tokens(), *(a + b for a, b in MERGES)]
    vocab = len(tokens)
    writer = gguf.GGUFWriter(str(path), "llama")  # writes general.architecture itself
    writer.add_block_count(1)
    writer.add_context_length(512)
    writer.add_embedding_length(WIDTH)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(WIDTH // HEADS)
    writer.add_rope_freq_base(100000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL] + [gguf.TokenType.NORMAL] * (vocab - 1))
    writer.add_token_merges([f"{a} {b}" for a, b in MERGES])
    for set_id in (
        writer.add_bos_token_id,
        writer.add_eos_token_id,
        writer.add_unk_token_id,
        writer.add_pad_token_id,
    ):
        set_id(0)
    writer.add_add_bos_token(False)
    rng = np.random.default_rng(seed)
    head = WIDTH // HEADS

    def weight(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    tensors = {
        "token_embd.weight": weight(vocab, WIDTH),
        "blk.0.attn_norm.weight": np.ones(WIDTH, np.float32),
        "blk.0.attn_q.weight": weight(WIDTH, WIDTH),
        "blk.0.attn_k.weight": weight(KV_HEADS * head, WIDTH),
        "blk.0.attn_v.weight": weight(KV_HEADS * head, WIDTH),
        "blk.0.attn_output.weight": weight(WIDTH, WIDTH),
        "blk.0.ffn_norm.weight": np.ones(WIDTH, np.float32),
        "blk.0.ffn_gate.weight": weight(FFN, WIDTH),
        "blk.0.ffn_up.weight": weight(FFN, WIDTH),
        "blk.0.ffn_down.weight": weight(WIDTH, FFN),
        "output_norm.weight": np.ones(WIDTH, np.float32),
    }
    for name, array in tensors.items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
