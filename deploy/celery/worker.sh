#!/usr/bin/env bash
# Start one kcal Celery worker: deploy/celery/worker.sh QUEUES [NAME] [celery worker options...]
#   QUEUES  comma-separated: `scoring` on a GPU host (one worker per GPU, CUDA_VISIBLE_DEVICES=i),
#           `dagster` on CPU hosts (estimation steps), `scoring,dagster` on a one-host setup.
# Needs, on every host: this repository with its .venv, the same KCAL_HOME (a shared filesystem),
# the same DAGSTER_HOME (deploy/postgres/dagster.yaml), and KCAL_CELERY_BROKER (default
# redis://127.0.0.1:6379/0) / KCAL_CELERY_BACKEND (default: the broker) as in assets/engine.py.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
queues="${1:?usage: deploy/celery/worker.sh QUEUES [NAME] [celery worker options...]}"
name="${2:-kcal-${queues//,/-}}"
shift $(($# >= 2 ? 2 : 1))
export KCAL_CELERY_BROKER="${KCAL_CELERY_BROKER:-redis://127.0.0.1:6379/0}"
export KCAL_CELERY_BACKEND="${KCAL_CELERY_BACKEND:-$KCAL_CELERY_BROKER}"
export PATH="$repo/.venv/bin:$PATH"  # dagster-celery runs `celery` from PATH
cd "$repo"
# One step at a time per worker (--concurrency 1): a scoring step uses the whole device.
exec dagster-celery worker start -A dagster_celery.app -y "$repo/deploy/celery/celery.yaml" \
  -q "$queues" -n "$name" -- --concurrency 1 "$@"
