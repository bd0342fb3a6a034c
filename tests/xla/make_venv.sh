#!/usr/bin/env bash
# Create the torch_xla venv the XLA suite launches training scripts with.
# torch_xla 2.9.0 needs torch 2.9.0 exactly; PyPI's Linux torch 2.9.0 is the CUDA build (~7 GB).
# Idempotent: does nothing when `import torch_xla` works there and the pins below are installed.
# Prints the python path on stdout; each step, as it starts, on stderr (the whole can take minutes).
set -euo pipefail
say() { echo "portside xla-venv: $*" >&2; }

VENV="${PORTSIDE_XLA_VENV:-$HOME/.cache/portside/xla-venv}"
PY="$VENV/bin/python"

# accelerate, transformers, lightning: the corpus's accelerate-xla, hf-trainer-xla and
# lightning-xla ports (pyproject.toml's thirdparty extra, the same pins). A venv holding other
# versions is brought to these; their metadata is read, not the libraries imported (seconds).
THIRDPARTY="accelerate==1.16.0 transformers==5.25.0 lightning==2.6.6"
[ -x "$PY" ] && say "checking $VENV (imports torch_xla: ~20 s)"
if [ -x "$PY" ] && "$PY" - "$THIRDPARTY" >/dev/null 2>&1 <<'PYEOF'
import sys
from importlib.metadata import version

import torch_xla  # noqa: F401

for pin in sys.argv[1].split():
    name, want = pin.split("==")
    assert version(name) == want, pin
PYEOF
then
    say "ready"
    echo "$PY"
    exit 0
fi

mkdir -p "$(dirname "$VENV")"
LOG="$VENV.install.log"
say "[1/4] venv at $VENV (log: $LOG)"
[ -x "$PY" ] || python3 -m venv "$VENV"
say "[2/4] pip"
"$PY" -m pip install --quiet --upgrade pip >>"$LOG" 2>&1 || true
# requests/absl-py/pyyaml: imported by torch_xla but not declared as its dependencies.
say "[3/4] torch 2.9.0 + torch_xla 2.9.0 + $THIRDPARTY (about 7 GB: the longest step)"
if ! "$PY" -m pip install --quiet torch==2.9.0 torch_xla==2.9.0 requests absl-py pyyaml numpy \
    $THIRDPARTY >>"$LOG" 2>&1; then
    tail -30 "$LOG" >&2
    say "install failed, see $LOG"
    exit 1
fi
say "[4/4] checking that torch_xla imports (PJRT_DEVICE=CPU)"
PJRT_DEVICE=CPU "$PY" -c "import torch_xla" >&2
say "ready"
echo "$PY"
