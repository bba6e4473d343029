#!/usr/bin/env bash
# Serves a model folder (config.json, tokenizer files, *.safetensors) with vLLM's CPU build as an
# OpenAI-compatible server on 127.0.0.1:PORT, in the foreground: a caller starts it (e.g. Popen with
# start_new_session=True), polls GET /v1/models, and stops it with SIGINT/SIGTERM to its process group.
# Needs .venv-vllm (bash scripts/serving/vllm-venv.sh, or `make serving-vllm`).
# Usage: scripts/serving/vllm-serve.sh PORT NAME MODEL_DIR [extra api_server flags...]
set -euo pipefail
if [[ $# -lt 3 ]]; then
    echo "usage: $0 PORT NAME MODEL_DIR [extra api_server flags...]" >&2
    exit 2
fi
port=$1 name=$2 model=$3
shift 3
root=$(cd "$(dirname "$0")/../.." && pwd)
venv=${VLLM_VENV:-$root/.venv-vllm}
py=$venv/bin/python
[[ -x $py ]] || { echo "$py missing: run bash scripts/serving/vllm-venv.sh" >&2; exit 1; }

# vLLM loads every *.safetensors in a model folder, and kcal's cache also holds
# gguf-probe-logits.safetensors (a "logits" tensor vLLM rejects: "no module or parameter named
# 'logits'"). No flag narrows that for a local folder, so serve a view of it: symlinks to every
# file but the safetensors that are not the model's (model.safetensors or model-*-of-*.safetensors).
model=$(cd "$model" && pwd)
view=$venv/model-views/$(basename "$model")-$(printf %s "$model" | cksum | cut -d' ' -f1)
mkdir -p "$view"
find "$view" -maxdepth 1 -type l -delete
for f in "$model"/*; do
    base=$(basename "$f")
    case $base in
        model.safetensors | model-*.safetensors) ;;
        *.safetensors) continue ;;
    esac
    ln -sfn "$f" "$view/$base"
done

# Environment for vLLM's CPU backend on a small machine (2 cores, no network but package registries):
# no usage-stats report to vLLM's collector (it would only fail here);
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
# the model is a local folder: Hugging Face libraries must not try the hub;
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# OpenMP threads: "auto" binds the model worker to core 0 and leaves core 1 to the API server, the
# engine's scheduler and the caller (measured: binding both cores, VLLM_CPU_OMP_THREADS_BIND=0-1,
# batches ~20 % faster but one-prompt requests ~45 % slower); a caller may override it.
export VLLM_CPU_OMP_THREADS_BIND=${VLLM_CPU_OMP_THREADS_BIND:-auto}

# --served-model-name: the name requests give as "model" (not the view folder's path);
# --host 127.0.0.1: loopback only;
# --dtype float32: kcal's cache is float32 and its torch engine scores in float32 (same numbers);
# --max-model-len 256: kcal scores short statements (a prompt may have 255 tokens: vLLM counts one
#   output token even with max_tokens 0); a small limit keeps the KV cache small;
# --kv-cache-memory-bytes 256M: an explicit KV cache (~5,800 tokens, 22 full-length sequences)
#   instead of --gpu-memory-utilization's default 0.92 of RAM, which the CPU worker refuses to
#   start with when less than that is free (VLLM_CPU_KVCACHE_SPACE=N GiB is the legacy spelling);
# --no-enable-chunked-prefill: prompts are prefilled whole. vllm-cpu 0.32.0's engine dies
#   ("RuntimeError: CPU Generator does not use offset") when a seeded request (kcal's sampled open
#   answers) is prefilled in chunks, as happens once a step's 2,048-token budget fills; CUDA
#   generators have offsets, so a GPU server needs no such flag;
# --enforce-eager: no torch.compile warm-up: up in ~40 s instead of ~95-110 s, about as fast after;
# --uvicorn-log-level warning: no access-log line per request.
exec "$py" -m vllm.entrypoints.openai.api_server \
    --model "$view" --served-model-name "$name" \
    --host 127.0.0.1 --port "$port" \
    --dtype float32 --max-model-len 256 \
    --kv-cache-memory-bytes 256M \
    --no-enable-chunked-prefill \
    --enforce-eager \
    --uvicorn-log-level warning \
    "$@"
