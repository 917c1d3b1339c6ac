#!/usr/bin/env bash
# GPU smoke test of the migrated training fixtures (see scripts/gpu_smoke.py for what it checks).
# One command with a time limit, for a machine with GPUs:  bash scripts/gpu_smoke.sh
# Needs the test extras (pip install -e ".[test]") and a CUDA build of torch.
set -euo pipefail
cd "$(dirname "$0")/.."
exec timeout "${GPU_SMOKE_TIMEOUT_S:-540}" python scripts/gpu_smoke.py "$@"
