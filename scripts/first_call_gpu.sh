#!/usr/bin/env bash
# What tuning costs the first call at a new shape, in ONE call on the GPU machine: `tegula run`
# with an empty TEGULA_CACHE_DIR and the driver's JIT cache off, three ways (tuning off; tuned
# with one compile thread; tuned with every core compiling candidates first), wall time of the
# whole process (`tegula run`'s float64 check included: compare against the `off` row).
#
# Device call: command `bash scripts/first_call_gpu.sh`, carry ["target/release/tegula"]
# (build it here first: cargo build --release -p tegula-cli). Results go to
# benchmarks/first-call.md by hand, with date, GPU, driver and commit.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${TEGULA_BIN:-target/release/tegula}
export CUDA_CACHE_DISABLE=1
echo "== first call: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), $(nproc) cores"
# Shapes small enough that the host's float64 reference stays short.
for what in "matmul --shape 3000,2000,1000 --dtype bf16" "attention --shape 2,8,8,1000,1000,64,0 --dtype bf16" \
    "attention --shape 1,16,16,3000,3000,128,0 --dtype bf16" "tutorial-03-matmul" "tutorial-09-matmul-persistent"; do
    for mode in off threads1 parallel; do
        dir=$(mktemp -d)
        case $mode in
            off) envs="TEGULA_AUTOTUNE=off" ;;
            threads1) envs="TEGULA_TUNE_THREADS=1" ;;
            parallel) envs="TEGULA_AUTOTUNE=full" ;;
        esac
        t0=$(date +%s.%N)
        # shellcheck disable=SC2086
        env TEGULA_CACHE_DIR="$dir" $envs timeout "${RUN_TIMEOUT:-120}" "$BIN" run $what > "$dir/out" 2> "$dir/err"
        rc=$?
        t1=$(date +%s.%N)
        echo "== $what [$mode]: rc=$rc $(python3 -c "print(round($t1 - $t0, 2))") s | $(grep -h "tuned now" "$dir/err" | sed 's/.*\]: //' | cut -c1-150) | $(grep -E " ok| FAIL" "$dir/out" | tail -1 | cut -c1-140)"
    done
done
