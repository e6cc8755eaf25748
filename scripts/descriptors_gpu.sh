#!/usr/bin/env bash
# Tensor descriptors on TMA, in ONE call on the GPU machine: the descriptor tests on the GPU
# (float64 references, zero fill, edges), the same under compute-sanitizer memcheck, `tegula
# check tutorial` (the ports of 06, 08 and 09 use descriptors), then Triton's tutorial 09 with
# its TMA variants beside tegula's ports, and the joined table last.
#
# Prepare here (repository root), with .peers/ excluded from git:
#   cargo build --release -p tegula-cli && cp target/release/tegula .peers/tegula
#   cargo test --release -p tegula --test descriptors --no-run   # copy the binary it names
#   cp target/release/deps/descriptors-<hash> .peers/descriptors_test
#   cp ../shared/peers/triton_tutorials/triton_tutorials.py .peers/
#   (optional) a baseline binary as .peers/tegula-base: its 09 timings are printed beside
# Device call: command `bash scripts/descriptors_gpu.sh`, carry [".peers"].
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/descriptors-out}
mkdir -p "$OUT"
BIN=${TEGULA_BIN:-.peers/tegula}
export TEGULA_CACHE_DIR=${TEGULA_CACHE_DIR:-$(mktemp -d)/cache} PYTHONUNBUFFERED=1
echo "== $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), commit $(cat .peers/COMMIT 2>/dev/null)"
echo "== descriptor tests on the GPU"
TEGULA_GPU_TESTS=1 timeout 120 .peers/descriptors_test --ignored --test-threads 1 2>&1 | tail -6
echo "== memcheck"
TEGULA_GPU_TESTS=1 timeout 240 compute-sanitizer --tool memcheck .peers/descriptors_test --ignored 2>&1 | grep -E "ERROR SUMMARY|test result|panicked" | head -5
echo "== tegula check tutorial (TEGULA_AUTOTUNE=off)"
TEGULA_AUTOTUNE=off timeout 120 "$BIN" check tutorial > "$OUT/check.log" 2>&1 || echo "== check: exit $?"
grep -E "FAILED|ERROR|passed," "$OUT/check.log" | head -30
echo "== 09's ports at aligned shapes (their C tiles on TMA), against float64"
for v in tutorial-09-matmul-descriptor-persistent tutorial-09-matmul-tma tutorial-09-matmul-tma-persistent; do
    for shape in 1024,768,512 1000,1040,512; do
        TEGULA_AUTOTUNE=off timeout 60 "$BIN" run "$v" --shape "$shape" 2>&1 | grep -E " ok| FAIL|rror" | tail -2
    done
done
VARIANTS="tutorial-09-matmul-naive tutorial-09-matmul-persistent tutorial-09-matmul-descriptor-persistent tutorial-09-matmul-tma tutorial-09-matmul-tma-persistent"
echo "== Triton 09 (with its TMA variants)"
timeout "${TRITON_TIMEOUT:-200}" python3 .peers/triton_tutorials.py persistent-matmul > "$OUT/triton.log" 2> "$OUT/triton.err" || echo "== harness: exit $?"
grep -E "^(TRITON|REF)" "$OUT/triton.log"
for b in "$BIN" .peers/tegula-base; do
    [ -x "$b" ] || continue
    echo "== $b bench 09"
    # shellcheck disable=SC2086
    TEGULA_CACHE_DIR=$(mktemp -d) timeout 150 "$b" bench $VARIANTS > "$OUT/$(basename "$b").log" 2> "$OUT/$(basename "$b").err" || echo "== bench: exit $?"
    grep -E "^TEGULA" "$OUT/$(basename "$b").log"
done
echo "== Triton / tegula (median ms; ratio above 1: tegula faster)"
python3 scripts/compare_tutorials.py --triton "$OUT/triton.log" --tegula "$OUT/tegula.log" --out "$OUT/table.md" && cat "$OUT/table.md"
