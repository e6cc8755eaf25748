#!/usr/bin/env bash
# Every candidate's timing at the library's benchmark shapes, in ONE call on the GPU machine:
# `tegula bench` with an empty cache, `TEGULA_TUNE_TOP_K=all` (every candidate timed, ranked
# requests included) and `TEGULA_TUNE_LOG` (one JSON line a tuning: each candidate's median
# milliseconds, the model's prediction where there is one, the seconds spent compiling and
# timing). The log is the data a kernel's performance model (`Tuning::rank_with`) is
# checked against before it short-lists anything: benchmarks/tune-data/ keeps such logs.
#
# Device call: command `bash scripts/tune_data_gpu.sh`, carry [".peers"] (the binary as
# .peers/tegula). Output: $OUT/tune.jsonl (copy it to benchmarks/tune-data/<date>-<gpu>.jsonl),
# $OUT/bench.log, $OUT/smi.csv (clocks, power and temperature every 200 ms).
# MATMUL_SHAPES and ATTENTION_SHAPES replace the default shape lists (space-separated).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/tune-data}
mkdir -p "$OUT"
BIN=${TEGULA_BIN:-.peers/tegula}
export TEGULA_CACHE_DIR=${TEGULA_CACHE_DIR:-$(mktemp -d)/cache}
export TEGULA_TUNE_TOP_K=all TEGULA_TUNE_LOG="$OUT/tune.jsonl"
echo "== tune data: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $BIN"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
    --format=csv -lms 200 > "$OUT/smi.csv" 2>/dev/null &
smi=$!
trap 'kill $smi 2>/dev/null' EXIT

MATMUL_SHAPES=${MATMUL_SHAPES:-"4096,4096,4096 8192,8192,8192 3000,2000,1000 1024,1024,1024 2048,2048,2048 8192,8192,512 16384,1024,1024 512,512,8192 257,131,77"}
ATTENTION_SHAPES=${ATTENTION_SHAPES:-"16,8,1024,64 16,8,4096,64 4,8,16384,64 16,8,1024,128 16,8,4096,128 2,16,16384,128 2,8,1000,64 1,16,3000,128"}
for shape in $MATMUL_SHAPES; do
    echo "== matmul $shape bf16"
    timeout "${SHAPE_TIMEOUT:-60}" "$BIN" bench matmul --quick --shape "$shape" --dtype bf16 \
        >> "$OUT/bench.log" 2>&1 || echo "== matmul $shape: exit $?"
done
for shape in $ATTENTION_SHAPES; do
    echo "== attention $shape bf16 (both masks)"
    timeout "${SHAPE_TIMEOUT:-60}" "$BIN" bench attention --quick --shape "$shape" --dtype bf16 \
        >> "$OUT/bench.log" 2>&1 || echo "== attention $shape: exit $?"
done
echo "== $(wc -l < "$OUT/tune.jsonl" 2>/dev/null || echo 0) tunings logged"
grep -h "tuned now" "$OUT/bench.log" | sed 's/^tegula: //' | cut -c1-220
