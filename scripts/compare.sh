#!/usr/bin/env bash
# The comparison, in ONE call on the GPU machine: tegula's benchmarks (the release binary built
# here and carried), peers.py (copied into the ignored .peers/ and carried), then the join by
# scripts/compare.py into $OUT/BENCHMARKS.md and $OUT/latest.json.
#
# Prepare here (repository root):
#   echo /.peers/ >> .git/info/exclude; mkdir -p .peers && cp ../shared/peers/peers.py .peers/
#   cargo build --release -p tegula-cli && cp target/release/tegula .peers/tegula
#   git rev-parse --short HEAD > .peers/COMMIT; git diff --quiet HEAD || echo "+dirty" >> .peers/COMMIT
# Device call: command `bash scripts/compare.sh`, carry [".peers"].
# Then copy $OUT's BENCHMARKS.md to the repository root and latest.json to benchmarks/.
#
# Options (environment): QUICK=1 for the short sweep (about 3 minutes); PEERS=0 to skip peers.py;
# PART=tc (matmul and attention, with their peers) or PART=mem (the rest, with theirs) splits the
# full run in two calls, each kernel beside its peers from the same call; join the two calls'
# tegula.jsonl and peers.txt with scripts/compare.py;
# TEGULA_CACHE_DIR=<dir> to start from an autotune cache (e.g. one written by an earlier call
# that tuned the attention sweep, which alone takes minutes; the full run may not fit one call);
# TUNE_FIRST=1 (PART=tc or all) tunes matmul and attention before peers.py runs, so that
# minutes of tuning at full load do not sit between the peers' timings and tegula's (timings
# right after them ran up to 5% slow; docs/archive/findings.md, "Measuring").
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/compare-out}
WORK=$(mktemp -d)
mkdir -p "$OUT"
BIN=${TEGULA_BIN:-.peers/tegula}
[ -x "$BIN" ] || BIN=target/release/tegula
export TEGULA_CACHE_DIR=${TEGULA_CACHE_DIR:-$WORK/cache} PYTHONUNBUFFERED=1
LOG=$OUT/run.log
exec > >(tee -a "$LOG") 2>&1

COMMIT=$(tr -d '\n' < .peers/COMMIT 2>/dev/null || echo unknown)
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
echo "== compare: commit $COMMIT, $GPU, driver $DRIVER, binary $BIN"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu --format=csv 2>/dev/null

touch "$WORK/peers.txt"
# Tuning first (optional): the same sweeps with a small timing budget, their records dropped;
# what they tune lands in the autotune cache that the timed sweeps below read.
if [ "${TUNE_FIRST:-0}" = 1 ] && [ "${QUICK:-0}" != 1 ] && [ "${PART:-all}" != mem ]; then
    for what in matmul attention "attention_backward --shape 4,32,4096,128"; do
        echo "== tune: tegula bench $what --quick"
        # shellcheck disable=SC2086
        timeout 600 "$BIN" bench $what --quick > /dev/null 2>> "$WORK/tune.log" \
            || echo "== tune $what: exit $?"
    done
    grep -h "tuned now" "$WORK/tune.log" 2>/dev/null
fi
# Peers first, so that the plots can draw them beside tegula.
if [ "${PEERS:-1}" = 1 ]; then
    P=.peers/peers.py
    if [ "${QUICK:-0}" = 1 ]; then
        for what in copy "gemv --dtype fp16 --quick" "matmul --quick" "attention --quick"; do
            echo "== peers.py $what"; timeout 300 python3 $P $what >> "$WORK/peers.txt" || echo "== peers.py $what: exit $?"
        done
    else
        tc=(matmul attention "attention-bwd --quick")
        mem=(copy "gemv --dtype fp16" "gemv --dtype bf16" seed-fa)
        case "${PART:-all}" in
            tc) whats=("${tc[@]}") ;;
            mem) whats=("${mem[@]}") ;;
            *) whats=("${mem[@]}" "${tc[@]}") ;;
        esac
        for what in "${whats[@]}"; do
            echo "== peers.py $what"; timeout 300 python3 $P $what >> "$WORK/peers.txt" || echo "== peers.py $what: exit $?"
        done
    fi
fi

# tegula: one JSON-lines file per kernel and option set (a failing kernel does not stop the
# others).
bench() {
    local name=$1; shift
    local file="$WORK/tegula-$name$(echo "$*" | tr -c 'a-zA-Z0-9' '_' | cut -c1-40).jsonl"
    echo "== tegula bench $name $*"
    timeout "${BENCH_TIMEOUT:-150}" "$BIN" bench "$name" --json "$file" \
        --peers "$WORK/peers.txt" "$@" \
        || echo "== tegula bench $name: exit $?"
}
if [ "${QUICK:-0}" = 1 ]; then
    bench copy
    bench gemv --shape 4096,4096 --shape 8192,8192
    bench matmul --shape 8192,8192,8192
    bench attention --shape 4,32,4096,64 --shape 4,32,4096,128
else
    if [ "${PART:-all}" != mem ]; then
        bench matmul --plot "$OUT/matmul.svg"
        bench attention --plot "$OUT/attention.svg"
        bench attention_backward --shape 4,32,4096,128
    fi
    if [ "${PART:-all}" != tc ]; then
        bench copy
        bench gemv --plot "$OUT/gemv.svg"
        bench gemv --dtype bf16
        bench softmax
        bench layer_norm
        bench layer_norm_backward
        bench rms_norm
        bench vector_add --dtype fp32
        bench attention_single_head_f32 --dtype fp32
    fi
fi

# Host cost of launches: first launch of a specialization with a cold JIT (no tegula disk cache,
# no driver cache), and a cached launch against a raw driver launch.
if [ "${PART:-all}" != tc ]; then
    echo "== tegula launch-cost"
    # launch-cost makes the JIT cold itself (driver cache off, no disk cache of cubins).
    timeout 120 "$BIN" launch-cost 2>&1 | grep -v "^tegula:"

    # The autotuner's cache across processes: a second process must find the copy kernel's
    # config cached and time no candidate (its stderr says "from the autotune cache").
    echo "== second process: tegula bench copy"
    "$BIN" bench copy --json "$WORK/copy-second.json" 2>&1 | grep -E "^copy|config"
fi
echo "== autotune cache: $(ls "$TEGULA_CACHE_DIR" 2>/dev/null | tr '\n' ' ')"
[ -f "$TEGULA_CACHE_DIR/autotune.json" ] && python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('autotune entries:', len(d['entries'])); [print(' ', k, '->', v['config'], round(v['ms'], 4), 'ms') for k, v in d['entries'].items()]" "$TEGULA_CACHE_DIR/autotune.json"

cat "$WORK"/tegula-*.jsonl > "$OUT/tegula.jsonl" 2>/dev/null
cp "$WORK/peers.txt" "$OUT/peers.txt" 2>/dev/null
python3 scripts/compare.py --tegula "$WORK"/tegula-*.jsonl --peers "$WORK/peers.txt" \
    --gpu "$GPU" --driver "$DRIVER" --commit "$COMMIT" --out "$OUT"
echo "== tables"
sed -n '/^## /,$p' "$OUT/BENCHMARKS.md"
