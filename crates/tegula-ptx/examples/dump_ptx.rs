//! Prints the PTX of a small softmax kernel: `cargo run -p tegula-ptx --example dump_ptx`.
use tegula_ir::prelude::*;
use tegula_ptx::{compile, CompileOptions, MmaChoice, Target};

fn main() {
    let block = 256usize;
    let k = trace("softmax", |p| {
        let (inp, out) = (p.ptr("inp", DType::F32), p.ptr("out", DType::F32));
        let (stride, n) = (p.scalar("stride", DType::I32), p.scalar("n", DType::I32));
        let row = program_id(0);
        let cols = arange(0, block as i64);
        let mask = cols.lt(n);
        let x = load(inp + row * stride + cols, mask, f64::NEG_INFINITY);
        let e = exp(x - max(x, 0));
        store(out + row * stride + cols, e / sum(e, 0), mask);
    })
    .expect("trace");
    let opts = CompileOptions {
        num_warps: 2,
        num_stages: 1,
        mma: MmaChoice::Sync,
        fp_fusion: true,
        tma: false,
    };
    match compile(&k, &Target { sm: 80 }, &opts) {
        Ok(c) => println!("{}", c.ptx),
        Err(e) => eprintln!("{e}"),
    }
}
