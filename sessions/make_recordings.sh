#!/usr/bin/env bash
# Regenerates the shipped recordings in sessions/recordings/ with the real engine and real runs
# (never hand-written events). Needs the torch_xla venv (`make xla-venv`).
#   bash sessions/make_recordings.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
XLA_PY=${PORTSIDE_XLA_PYTHON:-$HOME/.cache/portside/xla-venv/bin/python}
TINY=tests/fixtures/trainers/train_tiny.py
OUT=sessions/recordings
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMP_NUM_THREADS=1

record() {  # record NAME -- portside args...
  local name=$1; shift; shift
  local db="$TMP/$name.db"
  "$PY" -m portside.cli --db "$db" "$@" --json > "$TMP/$name.json" || true
  local sid
  sid=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['session'])" "$TMP/$name.json")
  "$PY" -m portside.cli --db "$db" export "$sid" -o "$OUT/$name.jsonl"
}

# 1. The demo: the recorded agent ports the GPU project; its clipping change is caught.
record demo -- demo --headless --policy auto

# 2. A recompilation storm on XLA:CPU: the batch size changes every step.
record recompilation-storm -- verify --target xla:cpu --reference-runs 2 --stall 120 \
  --reference "$PY $TINY --steps 40 --batch-sizes 8,16,24,32,40,48" \
  --candidate "PJRT_DEVICE=CPU $XLA_PY $TINY --device xla --steps 40 --batch-sizes 8,16,24,32,40,48"

# 3. The silent CPU default: target tpu, PJRT_DEVICE unset, torch_xla quietly runs on the CPU.
record silent-cpu-default -- verify --target tpu --reference-runs 2 --stall 120 \
  --reference "$PY $TINY --steps 60" \
  --candidate "env -u PJRT_DEVICE $XLA_PY $TINY --device xla --steps 60"

ls -l "$OUT"
