#!/usr/bin/env bash
# The test command of the README: formatting, lints, and every test of the workspace.
# Installs what it needs first (ptxas from the nvidia-cuda-nvcc-cu12 wheel, to assemble every
# PTX the compiler emits). Needs only Rust and Python 3 with pip; no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
# Incremental caches of a one-shot build are gigabytes that nothing reads again.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

if [ -f scripts/ptxas.sh ]; then
  TEGULA_PTXAS="$(bash scripts/ptxas.sh)"
  export TEGULA_PTXAS
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== public API of tegula against crates/tegula/public-api.txt (scripts/check_public_api.sh)"
# Before cargo doc: it shares that step's dependency checks, and documenting a crate as JSON
# clears its HTML documentation, which cargo doc then writes again.
bash scripts/check_public_api.sh
echo "== cargo doc (broken or private links are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
echo "== cargo package (every published crate; offline, no build: README.md, \"Releasing\")"
cargo package --workspace --exclude tegula-ptx-sim --no-verify --allow-dirty --offline --quiet
echo "== cargo test"
cargo test --workspace
echo "== DLPack with a real producer and consumer: NumPy on the CPU (scripts/dlpack_torch.py)"
# The same script runs PyTorch on a GPU machine; here NumPy stands in (installed under .tools).
if [ ! -d .tools/numpy/numpy ]; then
  python3 -m pip install --quiet --disable-pip-version-check --target .tools/numpy numpy
fi
cargo build --quiet -p tegula --example dlpack_torch
dlpack_log=$(PYTHONPATH=.tools/numpy python3 scripts/dlpack_torch.py --framework numpy \
  --lib target/debug/examples/libdlpack_torch.so) || { echo "$dlpack_log"; exit 1; }
echo "$dlpack_log" | tail -1
echo "== link check: tegula beside cudarc with dynamic-linking, and with dynamic-loading"
# Two crates outside the workspace (ci/link-check), each asking cudarc for one loading feature,
# checked one at a time so their features never unify. `cargo check` compiles but does not
# link: a full build with dynamic-linking also needs libcuda.so at link time, which CI has not.
for crate in link-check-dynamic-linking link-check-dynamic-loading; do
  (cd ci/link-check && CARGO_TARGET_DIR="$PWD/../../target" cargo check --quiet -p "$crate")
done
if [ "${TEGULA_SKIP_CANDLE:-0}" != 1 ]; then
  echo "== tegula-candle (outside the workspace): fmt, clippy, tests against candle's own ops on the CPU"
  # Its own workspace (candle-core takes minutes to build), sharing the target directory.
  (cd integrations/tegula-candle && export CARGO_TARGET_DIR="$PWD/../../target" &&
    cargo fmt --check && cargo clippy --all-targets --quiet -- -D warnings && cargo test --quiet)
fi
