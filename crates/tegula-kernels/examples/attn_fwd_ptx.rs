//! Prints the attention forward's PTX as the GPU launch compiles it at `[B, H, N, D]`
//! contiguous bf16 (pointers 16-byte aligned, integer arguments that are multiples of 16 marked
//! so, a group size of 1 bound), for reading registers and SASS without a GPU:
//! `cargo run --release -p tegula-kernels --example attn_fwd_ptx -- H N D CAUSAL BLOCK_M BLOCK_N WARPS STAGES`
//! (CAUSAL 0 or 1).

use tegula::ir::{passes, Constant};
use tegula::prelude::*;
use tegula_kernels::attention::kernels::attn_fwd;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let argv: Vec<usize> = std::env::args()
        .skip(1)
        .map(|s| s.parse())
        .collect::<Result<_, _>>()?;
    let [h, n, d, causal, bm, bn, warps, stages] = argv[..] else {
        return Err("expected H N D CAUSAL BLOCK_M BLOCK_N WARPS STAGES".into());
    };
    let mut k = attn_fwd::trace::<bf16>(false, causal == 1, d, bm, bn)?;
    // 5 pointers, 12 strides (z, h, row for q, k, v, o), H, group, Nq, Nk, then the scale.
    let (sz, sh, sm) = (h * n * d, n * d, d);
    let mut ints: Vec<Option<usize>> = vec![None; 5];
    for _ in 0..4 {
        ints.extend([Some(sz), Some(sh), Some(sm)]);
    }
    ints.extend([Some(h), Some(1), Some(n), Some(n)]);
    for (i, p) in k.params.iter_mut().enumerate() {
        p.facts.divisible_by_16 = match ints.get(i) {
            Some(None) => true,
            Some(Some(v)) => v % 16 == 0,
            None => false,
        };
    }
    let group_param = 5 + 12 + 1;
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
