#!/usr/bin/env bash
# Creates .venv-llama-server: llama-cpp-python's OpenAI-compatible server (llama_cpp.server) in a
# venv of its own, for scripts/serving/llama-cpp-serve.sh (kcal's "openai" engine tested against a
# real server, one known to echo wrong prompt log-probabilities, which kcal must refuse).
# It installs the wheel `make llama-cpp` builds once into .wheels/ (the registry has only the source;
# `make serving-llama-cpp` builds the wheel first when missing) with its [server] extras (fastapi,
# uvicorn, sse-starlette, starlette-context, pydantic-settings). Nothing goes into .venv.
# Idempotent: a stamp file holding this script's pins and the wheel's checksum skips the work when
# nothing changed; a missing or stale stamp (other pins, a rebuilt wheel, broken venv) rebuilds it.
# Usage: bash scripts/serving/llama-cpp-venv.sh   (or `make serving-llama-cpp`)
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/serving/venv-lib.sh

PYTHON=${PYTHON:-python3}
VENV=${LLAMA_SERVER_VENV:-.venv-llama-server}
VERSION=0.3.36
UV_PIN=uv==0.13.9
STAMP=$VENV/.kcal-llama-server-installed

wheel=$(ls .wheels/llama_cpp_python-"$VERSION"-*.whl 2>/dev/null | head -n 1 || true)
if [[ -z $wheel ]]; then
    echo "no .wheels/llama_cpp_python-$VERSION-*.whl: run make serving-llama-cpp (builds it, ~7 min)" >&2
    exit 1
fi
WANT="$(basename "$wheel") $(cksum < "$wheel" | cut -d' ' -f1) [server] $UV_PIN"

venv_current "$VENV" "$STAMP" "$WANT" llama_cpp.server.app && exit 0
fresh_venv "$VENV" "$UV_PIN"
# The wheel's path names llama-cpp-python directly, so the resolver takes it over any registry
# version; --no-build makes sure no source build (of it or anything) can start here.
"$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" \
    ${FIND_LINKS:+--find-links "$FIND_LINKS"} --no-build \
    "$wheel[server]"
"$VENV/bin/python" -c "
import llama_cpp, llama_cpp.server.app
assert llama_cpp.__version__ == '$VERSION', llama_cpp.__version__"
venv_ready "$VENV" "$STAMP" "$WANT"
