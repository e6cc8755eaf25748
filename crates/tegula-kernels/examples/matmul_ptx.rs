//! Prints the matmul's PTX as the GPU launch compiles it for row-major `[M, K] x [K, N]`
//! operands (pointers 16-byte aligned, integer arguments that are multiples of 16 marked so,
//! unit strides bound to 1), for reading registers and SASS without a GPU:
//! `cargo run --release -p tegula-kernels --example matmul_ptx -- M N K BLOCK_M BLOCK_N BLOCK_K WARPS STAGES`
//! (bf16 inputs and output, GROUP_M 8, as `tegula bench matmul` runs it).

use tegula::ir::{passes, Constant};
use tegula::prelude::*;
use tegula_kernels::matmul::matmul_kernel;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let argv: Vec<usize> = std::env::args()
        .skip(1)
        .map(|s| s.parse())
        .collect::<Result<_, _>>()?;
    let [m, n, k, bm, bn, bk, warps, stages] = argv[..] else {
        return Err("expected M N K BLOCK_M BLOCK_N BLOCK_K WARPS STAGES".into());
    };
    let mut kernel = matmul_kernel::trace::<bf16, bf16>(bm, bn, bk, 8, InputPrecision::Ieee)?;
    // 3 pointers, then M, N, K and the strides of A, B, C (row-major: K, 1, N, 1, N, 1).
    let ints = [m, n, k, k, 1, n, 1, n, 1];
    for (i, p) in kernel.params.iter_mut().enumerate() {
        p.facts.divisible_by_16 = match i.checked_sub(3) {
            None => true,
            Some(j) => ints.get(j).is_some_and(|v| v % 16 == 0),
        };
    }
    for (j, &v) in ints.iter().enumerate() {
        if v == 1 {
            passes::bind_scalar_param(&mut kernel, 3 + j, Constant::Int(1));
        }
    }
    passes::canonicalize(&mut kernel);
    let options = tegula_ptx::CompileOptions {
        num_warps: warps as u32,
        num_stages: stages as u32,
    };
    let compiled = tegula_ptx::compile(&kernel, &tegula_ptx::Target { sm: 90 }, &options)?;
    eprintln!("// shared bytes {}", compiled.shared_bytes);
    print!("{}", compiled.ptx);
    Ok(())
}
