#!/usr/bin/env bash
# The first call of a bundled library call against the JIT path, in ONE call on the GPU
# machine. Every `tegula first-call` runs in a fresh process with the driver's JIT cache off
# (CUDA_CACHE_DISABLE=1) and an empty TEGULA_CACHE_DIR of its own, four ways per call:
#   jit+tune   nothing cached: trace, plan, emit, tune (the short list), JIT, run
#   jit        the tuning cache imported (`tegula tune --import`), no cubins: trace, plan,
#              emit, JIT, run
#   bundle     `tegula aot --tuned` (PTX and the tuned configs): the driver's JIT and the run
#   cubin      `tegula aot --tuned --assemble` (cubins from ptxas): a module load and the run
# and prints one FIRST_CALL line each, then `traced 0` must hold for the bundled rows. With
# BASE_BIN set (another build's CLI), its jit+tune row is printed first, for a before/after.
#
# Device call: command `bash scripts/aot_gpu.sh`, carry [".peers"] with the CLI at
# .peers/tegula (cargo build --release -p tegula-cli; cp target/release/tegula .peers/).
# Results go to benchmarks/first-call.md by hand, with date, GPU, driver and commit.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${TEGULA_BIN:-.peers/tegula}
export CUDA_CACHE_DISABLE=1
export TEGULA_PTXAS=${TEGULA_PTXAS:-$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)}
echo "== aot first call: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), ptxas $("$TEGULA_PTXAS" --version 2>/dev/null | tail -1)"
fail=0
DEFAULT_CALLS="attention:2,8,1000,64 attention:1,16,3000,128 attention:4,32,4096,64 attention:4,32,4096,128,1 matmul:4096,4096,4096 matmul:1536,1536,1536"
for what in ${CALLS:-$DEFAULT_CALLS}; do
    work=$(mktemp -d)
    call="${what%%:*} --shape ${what#*:} --dtype bf16"
    if [ -n "${BASE_BIN:-}" ]; then
        # shellcheck disable=SC2086
        TEGULA_CACHE_DIR="$work/base" "$BASE_BIN" first-call $call 2> "$work/base.err" | sed 's/^/base     /'
        grep -h "tuned now" "$work/base.err" | sed 's/.*\]: /    /'
    fi
    # shellcheck disable=SC2086
    TEGULA_CACHE_DIR="$work/tune" "$BIN" first-call $call 2> "$work/tune.err" | sed 's/^/jit+tune /'
    grep -h "tuned now" "$work/tune.err" | sed 's/.*\]: /    /'
    TEGULA_CACHE_DIR="$work/tune" "$BIN" tune --export "$work/tuned.json" > /dev/null
    TEGULA_CACHE_DIR="$work/jit" "$BIN" tune --import "$work/tuned.json" > /dev/null
    # shellcheck disable=SC2086
    TEGULA_CACHE_DIR="$work/jit" "$BIN" first-call $call 2> "$work/jit.err" | sed 's/^/jit      /'
    # shellcheck disable=SC2086
    TEGULA_CACHE_DIR=off "$BIN" aot $call --tuned "$work/tuned.json" --out "$work/ptx.json" 2>&1 | tail -1 | sed 's/^/    /'
    # shellcheck disable=SC2086
    TEGULA_CACHE_DIR=off "$BIN" aot $call --tuned "$work/tuned.json" --assemble --out "$work/cubin.json" 2>&1 | tail -1 | sed 's/^/    /'
    for b in ptx cubin; do
        # shellcheck disable=SC2086
        out=$(TEGULA_CACHE_DIR="$work/$b-run" "$BIN" first-call $call --bundle "$work/$b.json" 2> "$work/$b.err")
        echo "$out" | sed "s/^/$(printf '%-8s' "$b") /"
        grep -q "traced 0 kernels" <<< "$out" || { echo "    FAILED: the bundled call traced ($b)"; sed 's/^/    /' "$work/$b.err" | tail -5; fail=1; }
    done
done
exit $fail
