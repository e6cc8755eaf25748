//! A differential fuzzer: random tile programs (`fuzz/mod.rs`) run on the interpreter
//! (`tegula-interp`, the reference) and, compiled to PTX for sm_80, on the PTX simulator
//! (`tegula-ptx-sim`), with the same inputs; the results must agree by the rule in
//! `fuzz/mod.rs` ([`fuzz::agree`]). The simulator takes Rust's f32 `exp2` for `ex2.approx` (it
//! does not model the GPU's 2 ulp; `gpu_fuzz.rs` runs the same programs on a GPU).
//!
//! Time-bounded: cases run for about `TEGULA_FUZZ_SECONDS` seconds (default 3) from seed
//! `TEGULA_FUZZ_SEED` (default 1, then the next seeds), each seed twice ([`fuzz::Case::pair`]).
//! A failure names its seed and prints the program's description and Tile IR. Each failure
//! found becomes a test below (`regressions`).

mod fuzz;

use fuzz::{agree, f32s, hand, report, Arg, Case, Expr};
use tegula_ir::ReduceOp;
use tegula_ptx::{compile, CompileOptions, MmaChoice, Target};
use tegula_ptx_sim::{try_run_ptx, Arg as SArg};

/// The output of `case` on the simulator, from the PTX for sm_80 with 4 warps.
fn simulate(
    case: &Case,
    data: &fuzz::Data,
    kernel: &tegula_ir::Kernel,
) -> Result<Vec<f32>, String> {
    let compiled = compile(
        kernel,
        &Target { sm: 80 },
        &CompileOptions {
            num_warps: 4,
            num_stages: 1,
            mma: MmaChoice::Sync,
            fp_fusion: true,
            tma: false,
        },
    )
    .map_err(|e| format!("the backend refused it: {e}"))?;
    let names: Vec<String> = kernel
        .params
        .iter()
        .enumerate()
        .map(|(i, p)| format!("p{i}_{}", p.name))
        .collect();
    let args = data.args();
    let sargs: Vec<SArg> = args
        .iter()
        .map(|a| match a {
            Arg::Buf(bytes) => SArg::Buf(bytes),
            Arg::I32(v) => SArg::I32(*v),
        })
        .collect();
    let bufs = try_run_ptx(
        &compiled.ptx,
        compiled.shared_bytes as usize,
        &names,
        4,
        [case.programs as u64, 1, 1],
        &sargs,
    )
    .map_err(|e| format!("the simulator refused it: {e}"))?;
    Ok(f32s(&bufs[case.out_arg()]))
}

/// `Err` with the first disagreement, or why a side refused the program.
fn check(case: &Case) -> Result<(), String> {
    let kernel = case.trace();
    let data = case.data();
    let want = data.interpret(case, &kernel)?;
    let got = simulate(case, &data, &kernel)?;
    agree(case, &want, &got, &data.scale(case, &want), "simulator")
}

#[test]
fn random_programs_agree_on_the_interpreter_and_the_simulator() {
    let (seconds, first) = fuzz::settings(3.0);
    let start = std::time::Instant::now();
    let mut ran = 0;
    for seed in first.. {
        if start.elapsed().as_secs_f64() > seconds && ran >= 10 {
            break;
        }
        for case in Case::pair(seed) {
            if let Err(why) = check(&case) {
                panic!("{}", report(&case, &why));
            }
            ran += 1;
        }
    }
    eprintln!(
        "fuzz: {ran} programs from seed {first} agreed in {:.1} s",
        start.elapsed().as_secs_f64()
    );
}

// --- regressions: each failure the fuzzer found, as its seed and as a minimal case ----------

/// Seed 2444: `max(x * 0.0, axis 0)` of a [16, 8] tile. The four lanes of a column that the
/// butterfly combined stored their partial maximum to one shared word, and the simulator
/// took `max(+0, -0)` from Rust's `f32::max`, which depends on the operand order: the lanes
/// disagreed (+0 and -0) and the simulator reported a race. The H200's `max.f32` gives +0
/// (and `min.f32` -0) in either order; the simulator now does too (and its `min.NaN` returns
/// NaN, as `max.NaN` did). A simulator bug: the lowering was right.
#[test]
fn regression_max_of_signed_zeros_across_lanes() {
    use Expr::*;
    let zeros = Box::new(Bin(
        fuzz::Bin::Mul,
        Box::new(Input(0)),
        Box::new(Const(0.0)),
    ));
    for valid in [[16, 8], [7, 8]] {
        let case = hand(&[16, 8], &valid, Reduce(ReduceOp::Max, 0, zeros.clone()));
        check(&case).unwrap_or_else(|why| panic!("{}", report(&case, &why)));
        let case = hand(&[16, 8], &valid, Reduce(ReduceOp::Min, 0, zeros.clone()));
        check(&case).unwrap_or_else(|why| panic!("{}", report(&case, &why)));
    }
    let case = Case::random(2444);
    check(&case).unwrap_or_else(|why| panic!("{}", report(&case, &why)));
}
