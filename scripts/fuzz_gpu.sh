#!/usr/bin/env bash
# The differential fuzzer on the GPU (crates/tegula-ptx/tests/gpu_fuzz.rs: random tile programs
# on the interpreter and, compiled for sm_80 and for the GPU's own target, on the GPU), for a
# number of seconds, in ONE call on the GPU machine; the last line sums it up.
#
#   bash scripts/fuzz_gpu.sh [seconds [first seed]]      (default 60 s from seed 1)
#
# The GPU machine may have no cargo registry: prepare the test binary here (repository root),
# with .peers/ excluded from git:
#   cargo test --release -p tegula-ptx --test gpu_fuzz --no-run   # copy the binary it names
#   cp target/release/deps/gpu_fuzz-<hash> .peers/fuzz_gpu_test
# Device call: command `bash scripts/fuzz_gpu.sh 300`, carry [".peers"]. Without
# .peers/fuzz_gpu_test (or $FUZZ_BIN), the script builds the binary with cargo first.
# TEGULA_FUZZ_THREADS sets the threads that prepare cases (default: every core). The log is
# $OUT/fuzz.log (default /tmp/fuzz-gpu-out).
set -uo pipefail
cd "$(dirname "$0")/.."
RUN_SECONDS=${1:-${TEGULA_FUZZ_SECONDS:-60}}
FIRST_SEED=${2:-${TEGULA_FUZZ_SEED:-1}}
OUT=${OUT:-/tmp/fuzz-gpu-out}
mkdir -p "$OUT"
BIN=${FUZZ_BIN:-.peers/fuzz_gpu_test}
if [ ! -x "$BIN" ]; then
    echo "== no $BIN: building it"
    BIN=$(cargo test --release -p tegula-ptx --test gpu_fuzz --no-run --message-format=json 2>/dev/null |
        python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "gpu_fuzz" and m.get("executable"):
        print(m["executable"])')
    [ -x "$BIN" ] || { echo "fuzz_gpu: FAIL: the test binary did not build"; exit 1; }
fi
echo "== $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), binary $BIN$( [ -f "$BIN.commit" ] && echo " (commit $(cat "$BIN.commit"))")"
echo "== fuzzing for $RUN_SECONDS s from seed $FIRST_SEED"
# The test stops taking seeds after RUN_SECONDS; the cases in flight (a JIT each) finish after.
TEGULA_GPU_TESTS=1 TEGULA_FUZZ_SECONDS="$RUN_SECONDS" TEGULA_FUZZ_SEED="$FIRST_SEED" \
    timeout $((RUN_SECONDS + 120)) "$BIN" random_programs_agree_on_the_interpreter_and_the_gpu \
    --ignored --nocapture > "$OUT/fuzz.log" 2>&1
rc=$?
cat "$OUT/fuzz.log"
summary=$(grep -h "^gpu fuzz:" "$OUT/fuzz.log" | tail -1)
if [ "$rc" -eq 0 ] && grep -q "test result: ok. 1 passed" "$OUT/fuzz.log"; then
    echo "fuzz_gpu: PASS: ${summary:-no summary line}"
elif [ "$rc" -eq 124 ]; then
    echo "fuzz_gpu: FAIL (timed out after $((RUN_SECONDS + 120)) s): ${summary:-no summary line}"
else
    seed=$(grep -ho "fuzz case seed [0-9]* failed" "$OUT/fuzz.log" | head -1)
    echo "fuzz_gpu: FAIL (exit $rc${seed:+, $seed}): ${summary:-no summary line}"
fi
exit "$rc"
