#!/usr/bin/env bash
# Create the torch_xla venv the XLA suite launches training scripts with.
# torch_xla 2.9.0 needs torch 2.9.0 exactly; PyPI's Linux torch 2.9.0 is the CUDA build (~7 GB).
# Idempotent: does nothing when `import torch_xla` works there and the pins below are installed.
# Prints the python path.
set -euo pipefail

VENV="${PORTSIDE_XLA_VENV:-$HOME/.cache/portside/xla-venv}"
PY="$VENV/bin/python"

# accelerate, transformers, lightning: the corpus's accelerate-xla, hf-trainer-xla and
# lightning-xla ports (pyproject.toml's thirdparty extra, the same pins). A venv holding other
# versions is brought to these; their metadata is read, not the libraries imported (seconds).
THIRDPARTY="accelerate==1.16.0 transformers==5.25.0 lightning==2.6.6"
if [ -x "$PY" ] && "$PY" - "$THIRDPARTY" >/dev/null 2>&1 <<'PYEOF'
import sys
from importlib.metadata import version

import torch_xla  # noqa: F401

for pin in sys.argv[1].split():
    name, want = pin.split("==")
    assert version(name) == want, pin
PYEOF
then
    echo "$PY"
    exit 0
fi

mkdir -p "$(dirname "$VENV")"
[ -x "$PY" ] || python3 -m venv "$VENV"
"$PY" -m pip install --quiet --upgrade pip >&2 || true
# requests/absl-py/pyyaml: imported by torch_xla but not declared as its dependencies.
"$PY" -m pip install --quiet torch==2.9.0 torch_xla==2.9.0 requests absl-py pyyaml numpy \
    $THIRDPARTY >&2
PJRT_DEVICE=CPU "$PY" -c "import torch_xla" >&2
echo "$PY"
