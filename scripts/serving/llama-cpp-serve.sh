#!/usr/bin/env bash
# Serves a GGUF file with llama-cpp-python's OpenAI-compatible server (llama_cpp.server) on
# 127.0.0.1:PORT, in the foreground: a caller starts it (e.g. Popen with start_new_session=True),
# polls GET /v1/models, and stops it with SIGINT/SIGTERM to its process group.
# This server's echoed prompt log-probabilities are wrong (its generated tokens' are right): kcal's
# "openai" engine must refuse it. Its /v1/completions takes a string prompt (or a list of one string),
# not token ids (422).
# Needs .venv-llama-server (bash scripts/serving/llama-cpp-venv.sh, or `make serving-llama-cpp`).
# Usage: scripts/serving/llama-cpp-serve.sh PORT NAME GGUF_FILE [extra llama_cpp.server flags...]
set -euo pipefail
if [[ $# -lt 3 ]]; then
    echo "usage: $0 PORT NAME GGUF_FILE [extra llama_cpp.server flags...]" >&2
    exit 2
fi
port=$1 name=$2 gguf=$3
shift 3
root=$(cd "$(dirname "$0")/../.." && pwd)
venv=${LLAMA_SERVER_VENV:-$root/.venv-llama-server}
py=$venv/bin/python
[[ -x $py ]] || { echo "$py missing: run bash scripts/serving/llama-cpp-venv.sh" >&2; exit 1; }
[[ -f $gguf ]] || { echo "$gguf: no such GGUF file" >&2; exit 1; }

# --model_alias: the name requests give as "model" and GET /v1/models lists (not the file's path);
# --host 127.0.0.1: loopback only;
# --logits_all true: keep every position's logits, without which a completion with logprobs is refused
#   ("logprobs is not supported for models created with logits_all=False"; 0.3.36's default is true);
# --n_ctx 512: kcal scores short statements; a small context keeps the KV cache and logits buffer small;
# --n_threads 2 / --n_threads_batch 2: this project's machines have 2 cores (generation / prompt);
# --seed 0: a fixed sampler seed (requests use temperature 0 anyway);
# --verbose false: no llama.cpp load dump or per-request timing lines on stderr.
exec "$py" -m llama_cpp.server \
    --model "$gguf" --model_alias "$name" \
    --host 127.0.0.1 --port "$port" \
    --logits_all true \
    --n_ctx 512 \
    --n_threads 2 --n_threads_batch 2 \
    --seed 0 \
    --verbose false \
    "$@"
