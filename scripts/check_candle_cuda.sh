#!/usr/bin/env bash
# Type-checks tegula-candle's `cuda` feature (the CUDA CustomOp path) on a machine without CUDA:
# `cargo check` and `cargo clippy` with a stand-in nvcc that writes empty outputs, so that
# candle-kernels' build script passes. Nothing is linked or run, and the empty PTX it leaves
# lives in its own target directory (target/fake-cuda), away from real builds. Not part of
# scripts/test.sh (it builds candle a second time, with its CUDA backend); run it after
# touching integrations/tegula-candle's `#[cfg(feature = "cuda")]` code.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
fake="$root/target/fake-cuda/toolkit"
mkdir -p "$fake/bin" "$fake/include" "$fake/lib64"
cat > "$fake/bin/nvcc" <<'NVCC'
#!/usr/bin/env bash
# A stand-in nvcc for type-checking only: empty outputs where the real one writes files.
if [[ " $* " == *" --version "* ]]; then
  echo "nvcc: NVIDIA (R) Cuda compiler driver"; echo; echo
  echo "Cuda compilation tools, release 12.8, V12.8.93"; exit 0
fi
out=""; outdir=""; prev=""; src=""
for a in "$@"; do
  [[ "$prev" == "-o" ]] && out="$a"
  [[ "$prev" == "--output-directory" ]] && outdir="$a"
  [[ "$a" == *.cu ]] && src="$a"
  prev="$a"
done
if [[ -n "$outdir" && -n "$src" ]]; then : > "$outdir/$(basename "$src" .cu).ptx"; fi
if [[ -n "$out" ]]; then
  case "$out" in *.a) ar rcs "$out" ;; *) : > "$out" ;; esac
fi
NVCC
chmod +x "$fake/bin/nvcc"
cd "$root/integrations/tegula-candle"
export NVCC="$fake/bin/nvcc" CUDA_HOME="$fake" CUDA_COMPUTE_CAP=90 PATH="$fake/bin:$PATH"
export CARGO_TARGET_DIR="$root/target/fake-cuda"
cargo check --features cuda --all-targets --quiet
cargo clippy --features cuda --all-targets --quiet -- -D warnings
echo "tegula-candle --features cuda: type-checks and is clippy-clean (nothing linked or run)"
