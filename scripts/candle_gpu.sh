#!/usr/bin/env bash
# The candle example (integrations/tegula-candle, `--features cuda`) on the GPU machine, where
# that machine has nvcc and the driver but no Rust, and this one has Rust but no CUDA. Four
# steps, two of them device calls; everything lands in the ignored .tools/candle-gpu/.
#
#   bash scripts/candle_gpu.sh prepare   # here: candle-kernels' CUDA sources (from cargo's registry)
#   # device call: `bash scripts/candle_gpu.sh ptx`, carry [".tools/candle-gpu"]
#   #   (nvcc compiles candle's 11 PTX modules for sm_90, as candle-kernels' build script would)
#   bash scripts/candle_gpu.sh build /work/.device/N/ptx.tgz   # here: the example, linked
#   #   against stub libraries named as the GPU machine's (libcuda.so.1, libcublas.so.13, ...)
#   # device call: `bash scripts/candle_gpu.sh run`, carry [".tools/candle-gpu"]
#
# The stubs only satisfy the linker (candle asks cudarc for dynamic-linking); at run time the
# real CUDA 13 libraries load, with lazy binding (-z lazy), since cudarc's 12.8 bindings name a
# few symbols CUDA 13 dropped that this program never calls. candle's static MoE kernels are
# left empty: candle-core calls none of them.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$root/.tools/candle-gpu"
cmd="${1:-}"

case "$cmd" in
prepare)
    src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/candle-kernels-0.11.1/src | head -1)
    [[ -d "$src" ]] || (cd "$root/integrations/tegula-candle" && cargo fetch --quiet)
    src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/candle-kernels-0.11.1/src | head -1)
    mkdir -p "$work" && rm -rf "$work/src" && cp -r "$src" "$work/src"
    echo "prepared $work/src"
    ;;
ptx)
    cd "$work" && mkdir -p ptx
    nvcc --version | tail -1
    for f in affine binary cast conv fill indexing quantized reduce sort ternary unary; do
        nvcc -gencode=arch=compute_90,code=sm_90 --ptx --default-stream per-thread \
            --output-directory ptx --expt-relaxed-constexpr -std=c++17 -O3 "src/$f.cu" &
    done
    wait
    ls -la ptx
    tar czf "$OUT/ptx.tgz" ptx
    ;;
build)
    tgz="${2:?usage: candle_gpu.sh build PATH/TO/ptx.tgz}"
    mkdir -p "$work/toolkit/bin" "$work/toolkit/include" "$work/stubs"
    tar xzf "$tgz" -C "$work"
    # Stub libraries exporting every function cudarc's bindings declare, under the GPU
    # machine's sonames.
    reg=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-0.19.10/src | head -1)
    for spec in "driver libcuda.so libcuda.so.1" "cublas libcublas.so libcublas.so.13" \
        "cublaslt libcublasLt.so libcublasLt.so.13" "curand libcurand.so libcurand.so.10" \
        "nvrtc libnvrtc.so libnvrtc.so.13"; do
        set -- $spec
        grep -ohE "pub unsafe fn [A-Za-z0-9_]+\(" "$reg/$1/sys/mod.rs" | sort -u |
            sed -E 's/pub unsafe fn ([A-Za-z0-9_]+)\(/void \1(void) {}/' > "$work/stubs/$1.c"
        gcc -shared -fPIC -Wl,-soname,"$3" -o "$work/stubs/$2" "$work/stubs/$1.c"
    done
    # candle-kernels asks for cudart beside its MoE archive, which is empty here: an empty stub.
    : > "$work/stubs/cudart.c"
    gcc -shared -fPIC -Wl,-soname,libcudart.so.13 -o "$work/stubs/libcudart.so" "$work/stubs/cudart.c"
    ln -sfn "$work/stubs" "$work/toolkit/lib64"
    # A stand-in nvcc for candle-kernels' build script: the PTX compiled on the GPU machine,
    # empty archives for the MoE kernels.
    cat > "$work/toolkit/bin/nvcc" <<NVCC
#!/usr/bin/env bash
if [[ " \$* " == *" --version "* ]]; then
  echo nvcc; echo; echo; echo "Cuda compilation tools, release 12.8, V12.8.93"; exit 0
fi
out=""; outdir=""; prev=""; src=""
for a in "\$@"; do
  [[ "\$prev" == "-o" ]] && out="\$a"
  [[ "\$prev" == "--output-directory" ]] && outdir="\$a"
  [[ "\$a" == *.cu ]] && src="\$a"
  prev="\$a"
done
if [[ -n "\$outdir" && -n "\$src" ]]; then cp "$work/ptx/\$(basename "\$src" .cu).ptx" "\$outdir/" || exit 1; fi
if [[ -n "\$out" ]]; then case "\$out" in *.a) ar rcs "\$out" ;; *) : > "\$out" ;; esac; fi
NVCC
    chmod +x "$work/toolkit/bin/nvcc"
    cd "$root/integrations/tegula-candle"
    NVCC="$work/toolkit/bin/nvcc" CUDA_HOME="$work/toolkit" CUDA_COMPUTE_CAP=90 \
        PATH="$work/toolkit/bin:$PATH" CARGO_TARGET_DIR="$root/target/candle-gpu" \
        RUSTFLAGS="-L native=$work/stubs -C link-arg=-Wl,-z,lazy" \
        cargo build --release --features cuda --example cross_entropy
    cp "$root/target/candle-gpu/release/examples/cross_entropy" "$work/cross_entropy"
    git -C "$root" rev-parse --short HEAD > "$work/COMMIT"
    echo "built $work/cross_entropy"
    ;;
run)
    export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}"
    echo "commit $(cat "$work/COMMIT" 2>/dev/null || echo unknown), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
    "$work/cross_entropy" | tee "$OUT/candle-cross-entropy.txt"
    ;;
*)
    sed -n '2,16p' "$0"
    exit 1
    ;;
esac
