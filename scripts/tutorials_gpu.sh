#!/usr/bin/env bash
# Triton's tutorials against tegula's ports, in ONE call on the GPU machine: `tegula check
# tutorial` (every port against float64 on the GPU), the Triton harness, `tegula bench` of the
# tutorials the harness timed, and the joined table (scripts/compare_tutorials.py) last.
#
# Prepare here (repository root):
#   echo /.peers/ >> .git/info/exclude; mkdir -p .peers
#   cp ../shared/peers/triton_tutorials/triton_tutorials.py .peers/
#   cargo build --release -p tegula-cli
# Device call: command `bash scripts/tutorials_gpu.sh`, carry [".peers", "target/release/tegula"].
# Outputs in $OUT (default /tmp/tutorials-out): check.log, triton.log, tegula.log,
# tegula.jsonl, table.md. Then, here, the rows into benchmarks/latest.json (records with `op`
# = `tutorial-<nn>-<name>` and a `triton` peer; run it again after copying a latest.json
# written by compare.sh, which holds only its own records):
#   python3 scripts/compare_tutorials.py --triton <out>/triton.log --tegula <out>/tegula.log \
#     --json benchmarks/latest.json --gpu "NVIDIA H200" --driver <v> --commit <c> --date <d>
#
# Time (each step has a timeout, so the whole call stays within about 8 minutes):
# - `tegula check tutorial` with the tuner off (each port's first config, as the interpreter
#   runs them; the tuned configs are what the benchmark times): 23 checks at small shapes,
#   a few seconds of JIT each at most; 75 s.
# - the harness with --no-extras (no TMA, warp-specialized or CUDA-graph variants, no torch
#   references; its README: about 3 minutes, mostly Triton's autotuning: 03's 16 configs
#   twice, 06's forward list per mask, 08's 6 configs per group, 09's 24 configs per
#   variant and its descriptor kernel's subtile twins); 225 s.
# - `tegula bench` of the tutorials the harness printed (the same ones: the extras' ports are
#   left out), tuned on their first call with tegula's quick tuning budget (about 170
#   candidates over 03, 06, 08 and 09, a JIT and a quick timing each), then timed with
#   do_bench's budget; inputs made on the host first (08's batches: 300M values); 180 s.
#   A stopped run keeps the lines printed so far (the joined table says what was not timed).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/tutorials-out}
mkdir -p "$OUT"
BIN=${TEGULA_BIN:-target/release/tegula}
HARNESS=${HARNESS:-.peers/triton_tutorials.py}
export TEGULA_CACHE_DIR=${TEGULA_CACHE_DIR:-$(mktemp -d)/cache} PYTHONUNBUFFERED=1
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
echo "== tutorials: $GPU, driver $DRIVER, binary $BIN"
[ -x "$BIN" ] || { echo "== no $BIN: build it with cargo build --release -p tegula-cli"; exit 1; }

echo "== tegula check tutorial (TEGULA_AUTOTUNE=off)"
TEGULA_AUTOTUNE=off timeout "${CHECK_TIMEOUT:-75}" "$BIN" check tutorial > "$OUT/check.log" 2>&1 \
    || echo "== tegula check tutorial: exit $?"
grep -E "FAILED|ERROR|passed," "$OUT/check.log"

# TUTORIALS="matmul attention ..." (the harness's names) runs only those.
echo "== Triton harness: $HARNESS --no-extras ${TUTORIALS:-}"
if [ -f "$HARNESS" ]; then
    # shellcheck disable=SC2086
    timeout "${TRITON_TIMEOUT:-225}" python3 "$HARNESS" --no-extras ${TUTORIALS:-} > "$OUT/triton.log" 2> "$OUT/triton.err" \
        || echo "== harness: exit $?"
    grep -E "^(# triton|TRITON-CHECK|TRITON-ERROR)" "$OUT/triton.log"
else
    echo "== no $HARNESS (copy ../shared/peers/triton_tutorials/triton_tutorials.py into .peers/)"
    touch "$OUT/triton.log"
fi

# The ports of the tutorials the harness timed; every port if it timed none.
registered=$("$BIN" list 2>/dev/null | awk '/^tutorial-/ {print $1}')
names=()
for t in $(awk '$1 == "TRITON" {print $2}' "$OUT/triton.log" | awk '!seen[$0]++'); do
    if grep -qx "tutorial-$t" <<< "$registered"; then names+=("tutorial-$t"); fi
done
[ ${#names[@]} -gt 0 ] || names=(tutorials)
echo "== tegula bench ${names[*]}"
timeout "${BENCH_TIMEOUT:-180}" "$BIN" bench "${names[@]}" --json "$OUT/tegula.jsonl" \
    > "$OUT/tegula.log" 2> "$OUT/tegula.err" || echo "== tegula bench: exit $?"
grep -E "^(TEGULA|# )" "$OUT/tegula.log"

echo "== Triton / tegula (median ms, do_bench's method; ratio above 1: tegula faster)"
python3 scripts/compare_tutorials.py --triton "$OUT/triton.log" --tegula "$OUT/tegula.log" \
    --out "$OUT/table.md"
