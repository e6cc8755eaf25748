//! Prints a library kernel's PTX as the GPU launch would compile it: pointer arguments 16-byte
//! aligned, integer arguments that are multiples of 16 marked so, integers equal to 1 bound
//! (the specialization `tegula::gpu` applies), which `tegula ptx` leaves out. For reading the
//! memory-bound kernels' loads without a GPU:
//! `cargo run --release -p tegula-kernels --example ptx_specialized -- KERNEL M N [WARPS [BLOCK_M]]`
//! or `.. KERNEL M N NAME=VALUE,..` (e.g. `gemv 8192 8192 BLOCK_M=1,BLOCK_N=4096,UNROLL=1`)
//! (KERNEL: gemv, softmax, softmax_online, layer_norm, rms_norm, vector_add).

use tegula::ir::{passes, Constant, Kernel};
use tegula::prelude::*;
use tegula_kernels::{gemv, norm, softmax, vector_add};

/// An argument's value at launch: a (16-byte aligned) pointer, or an integer.
enum Arg {
    Ptr,
    Int(i64),
    Float,
}

fn specialize(mut k: Kernel, args: &[Arg]) -> Kernel {
    for (p, a) in k.params.iter_mut().zip(args) {
        p.facts.divisible_by_16 = match a {
            Arg::Ptr => true,
            Arg::Int(v) => v % 16 == 0,
            Arg::Float => false,
        };
    }
    for (i, a) in args.iter().enumerate() {
        if matches!(a, Arg::Int(1)) {
            passes::bind_scalar_param(&mut k, i, Constant::Int(1));
        }
    }
    passes::canonicalize(&mut k);
    k
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let name = argv.first().map(String::as_str).unwrap_or("gemv");
    let m: i64 = argv.get(1).map_or(Ok(8192), |s| s.parse())?;
    let n: i64 = argv.get(2).map_or(Ok(8192), |s| s.parse())?;
    let nu = n as usize;
    use Arg::{Float as F, Int as I, Ptr as P};
    // The host wrapper's config for the shape; the last two arguments override the warps and
    // the rows per program.
    let mut c = match name {
        "gemv" => gemv::config(nu, 1, nu, 2),
        "softmax" | "softmax_online" => softmax::config(nu, softmax::MAX_BLOCK),
        "layer_norm" => norm::layer_norm_config(nu),
        "rms_norm" => norm::rms_norm_config(nu),
        _ => tegula::Config::new(4, 1),
    };
    // Either `NAME=VALUE,..` pairs overriding the config (`warps` sets the warps), or WARPS
    // [BLOCK_M].
    match argv.get(3) {
        Some(pairs) if pairs.contains('=') => {
            for pair in pairs.split(',') {
                let (k, v) = pair.split_once('=').ok_or("expected NAME=VALUE")?;
                match k {
                    "warps" => c.num_warps = v.parse()?,
                    _ => c = c.with(k, v.parse()?),
                }
            }
        }
        w => {
            if let Some(w) = w {
                c.num_warps = w.parse()?;
            }
            if let Some(r) = argv.get(4) {
                c = c.with("BLOCK_M", r.parse()?);
            }
        }
    }
    let get = |k: &str| c.get(k).unwrap_or(0) as usize;
    eprintln!("// config {c}");
    let (kernel, args) = match name {
        "gemv" => {
            let unroll = c.get("UNROLL").unwrap_or(1) as usize;
            let k = gemv::gemv_kernel::trace::<f16>(get("BLOCK_M"), get("BLOCK_N"), unroll)?;
            (k, vec![P, P, P, I(m), I(n), I(n), I(1), I(1), I(1)])
        }
        "softmax" if get("BLOCK_M") > 0 => {
            let k = softmax::softmax_kernel::trace::<bf16>(get("BLOCK_M"), get("BLOCK"))?;
            (k, vec![P, P, I(n), I(n), I(m), I(n)])
        }
        "softmax" | "softmax_online" => {
            let k = softmax::softmax_online_kernel::trace::<bf16>(get("BLOCK"))?;
            (k, vec![P, P, I(n), I(n), I(n)])
        }
        "layer_norm" if get("BLOCK_M") > 0 => {
            let k = norm::layer_norm_fwd_rows::trace::<bf16>(get("BLOCK_M"), get("BLOCK"))?;
            (k, vec![P, P, P, P, P, P, I(n), I(n), I(m), I(n), F])
        }
        "layer_norm" => {
            let k = norm::layer_norm_fwd::trace::<bf16>(get("BLOCK"))?;
            (k, vec![P, P, P, P, P, P, I(n), I(n), I(n), F])
        }
        "rms_norm" if get("BLOCK_M") > 0 => {
            let k = norm::rms_norm_fwd_rows::trace::<bf16>(get("BLOCK_M"), get("BLOCK"))?;
            (k, vec![P, P, P, I(n), I(n), I(m), I(n), F])
        }
        "rms_norm" => {
            let k = norm::rms_norm_fwd::trace::<bf16>(get("BLOCK"))?;
            (k, vec![P, P, P, I(n), I(n), I(n), F])
        }
        "vector_add" => {
            let k = vector_add::add_kernel::trace::<f32>(vector_add::BLOCK)?;
            (k, vec![P, P, P, I(n)])
        }
        other => return Err(format!("unknown kernel {other}").into()),
    };
    let k = specialize(kernel, &args);
    let options = tegula_ptx::CompileOptions {
        num_warps: c.num_warps,
        ..Default::default()
    };
    let compiled = tegula_ptx::compile(&k, &tegula_ptx::Target { sm: 90 }, &options)?;
    print!("{}", compiled.ptx);
    Ok(())
}
