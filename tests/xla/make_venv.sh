#!/usr/bin/env bash
# Create the torch_xla venv the XLA suite launches training scripts with.
# torch_xla 2.9.0 needs torch 2.9.0 exactly; PyPI's Linux torch 2.9.0 is the CUDA build (~7 GB).
# Idempotent: does nothing when `import torch_xla` already works there. Prints the python path.
set -euo pipefail

VENV="${PORTSIDE_XLA_VENV:-$HOME/.cache/portside/xla-venv}"
PY="$VENV/bin/python"

# accelerate, transformers, lightning: the corpus's accelerate-xla, hf-trainer-xla and
# lightning-xla ports (pyproject.toml's thirdparty extra, the same pins).
if [ -x "$PY" ] && "$PY" -c "import torch_xla, accelerate, transformers, lightning" >/dev/null 2>&1; then
    echo "$PY"
    exit 0
fi

mkdir -p "$(dirname "$VENV")"
[ -x "$PY" ] || python3 -m venv "$VENV"
"$PY" -m pip install --quiet --upgrade pip >&2 || true
# requests/absl-py/pyyaml: imported by torch_xla but not declared as its dependencies.
"$PY" -m pip install --quiet torch==2.9.0 torch_xla==2.9.0 requests absl-py pyyaml numpy \
    accelerate==1.16.0 transformers==5.25.0 lightning==2.6.6 >&2
PJRT_DEVICE=CPU "$PY" -c "import torch_xla" >&2
echo "$PY"
