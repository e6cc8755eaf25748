#!/usr/bin/env bash
# Installs ptxas (from NVIDIA's `nvidia-cuda-nvcc-cu12` wheel) under .tools/nvcc if it is not
# there yet, and prints its path. Idempotent and quiet; needs no GPU and no CUDA toolkit.
# The ptxas integration test of tegula-ptx finds it there (or through $TEGULA_PTXAS / PATH).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target="$root/.tools/nvcc"
ptxas="$target/nvidia/cuda_nvcc/bin/ptxas"
if [[ ! -x "$ptxas" ]]; then
    python3 -m pip install --quiet --disable-pip-version-check --no-deps \
        --target "$target" nvidia-cuda-nvcc-cu12 >&2
fi
if [[ ! -x "$ptxas" ]]; then
    echo "ptxas.sh: installation finished but $ptxas is missing" >&2
    exit 1
fi
echo "$ptxas"
