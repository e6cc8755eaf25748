//! Prints the attention backward's dK/dV kernel PTX as the GPU launch compiles it at
//! `[B, H, N, D]` contiguous bf16 (pointers 16-byte aligned, integer arguments that are
//! multiples of 16 marked so, a group size of 1 bound), for reading registers and SASS without
//! a GPU:
//! `cargo run --release -p tegula-kernels --example attn_bwd_ptx -- B H N D CAUSAL BLOCK_M BLOCK_N WARPS STAGES`
//! (CAUSAL 0 or 1; the dQ strategy is the atomic one).

use tegula::ir::{passes, Constant};
use tegula::prelude::*;
use tegula_kernels::attention::kernels::attn_bwd_dkdv;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let argv: Vec<usize> = std::env::args()
        .skip(1)
        .map(|s| s.parse())
        .collect::<Result<_, _>>()?;
    let [b, h, n, d, causal, bm, bn, warps, stages] = argv[..] else {
        return Err("expected B H N D CAUSAL BLOCK_M BLOCK_N WARPS STAGES".into());
    };
    let mut k = attn_bwd_dkdv::trace::<bf16>(causal == 1, true, d, bm, bn)?;
    // 9 pointers, 18 strides (z, h, row for q, k, v, dO, dK, dV), Hkv, group, Nq, Nk, scale.
    let (sz, sh, sm) = (h * n * d, n * d, d);
    let mut ints: Vec<Option<usize>> = vec![None; 9];
    for _ in 0..6 {
        ints.extend([Some(sz), Some(sh), Some(sm)]);
    }
    ints.extend([Some(h), Some(1), Some(n), Some(n)]);
    let _ = b;
    for (i, p) in k.params.iter_mut().enumerate() {
        p.facts.divisible_by_16 = match ints.get(i) {
            Some(None) => true,
            Some(Some(v)) => v % 16 == 0,
            None => false,
        };
    }
    let group_param = 9 + 18 + 1;
    passes::bind_scalar_param(&mut k, group_param, Constant::Int(1));
    passes::canonicalize(&mut k);
    let options = tegula_ptx::CompileOptions {
        num_warps: warps as u32,
        num_stages: stages as u32,
    };
    let compiled = tegula_ptx::compile(&k, &tegula_ptx::Target { sm: 90 }, &options)?;
    eprintln!("// shared bytes {}", compiled.shared_bytes);
    print!("{}", compiled.ptx);
    Ok(())
}
