//! Rule *accumulator home* (`plan/accumulators.rs`): a dot whose result the loop carries on
//! runs in the carried value's registers when that value is dead from the dot on. Checked on
//! the plan, on the PTX's shape (no copy of the accumulator after the dot), and on the PTX
//! simulator against float64 for the rule taken and for the readers that refuse it, on
//! `wgmma` (sm_90) and `mma.sync` (sm_80).

mod common;
mod sim;

use common::aligned;

use sim::*;
use tegula_ir::prelude::*;
use tegula_ir::Kernel;
use tegula_ptx::{plan, CompileOptions, MmaChoice, Target};

/// What reads the carried accumulator `acc` besides `dot(a, b, acc * 0.5)`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Reader {
    /// Nothing: the rule applies.
    None,
    /// `t + acc` after the dot (a second carried value): the old `acc` is live past the dot.
    AfterTheDot,
    /// `t + acc` before the dot: a free op, materialized where the loop's end asks for it,
    /// after the dot, so the old `acc` is live past the dot.
    FreeBeforeTheDot,
    /// `t + max(acc, 1)` before the dot: the reduction reads `acc` where it stands (anchored),
    /// the rule applies.
    ReducedBeforeTheDot,
    /// `acc * 0.5` again after the dot, the dot's accumulator read twice.
    ScaledAfterTheDot,
}

/// `C = acc + t` where each k-step does `acc = dot(A_j, B_j, acc * 0.5)` and `reader`'s `t`
/// (f16 operands, f32 accumulator, masked at every edge).
fn decaying_matmul(reader: Reader, (bm, bn, bk): (usize, usize, usize)) -> Kernel {
    trace("decaying_matmul", |p| {
        let (a, b, c) = (
            p.ptr("a", DType::F16),
            p.ptr("b", DType::F16),
            p.ptr("c", DType::F32),
        );
        let (m, n, k) = (
            p.scalar("m", DType::I32),
            p.scalar("n", DType::I32),
            p.scalar("k", DType::I32),
        );
        let offs_m = program_id(0) * bm + arange(0, bm as i64);
        let offs_n = program_id(1) * bn + arange(0, bn as i64);
        let offs_k = arange(0, bk as i64);
        let init = (zeros::<f32>([bm, bn]), zeros::<f32>([bm, bn]));
        let (acc, t) = for_range(0, k, bk, init, |start, (acc, t)| {
            let ks = start + offs_k;
            let at = load(
                a + offs_m.col() * k + ks.row(),
                offs_m.col().lt(m) & ks.row().lt(k),
                0.0,
            );
            let bt = load(
                b + ks.col() * n + offs_n.row(),
                ks.col().lt(k) & offs_n.row().lt(n),
                0.0,
            );
            match reader {
                Reader::None => (dot_acc(at, bt, acc * 0.5), t),
                Reader::AfterTheDot => {
                    let next = dot_acc(at, bt, acc * 0.5);
                    (next, t + acc)
                }
                Reader::FreeBeforeTheDot => {
                    let t = t + acc;
                    (dot_acc(at, bt, acc * 0.5), t)
                }
                Reader::ReducedBeforeTheDot => {
                    let t = t + max(acc, 1).col();
                    (dot_acc(at, bt, acc * 0.5), t)
                }
                Reader::ScaledAfterTheDot => {
                    let scaled = acc * 0.5;
                    let next = dot_acc(at, bt, scaled);
                    (next, t + scaled)
                }
            }
        });
        store(
            c + offs_m.col() * n + offs_n.row(),
            acc + t,
            offs_m.col().lt(m) & offs_n.row().lt(n),
        );
    })
    .map(aligned)
    .unwrap()
}

/// The float64 result of [`decaying_matmul`] and the scale of its error (sums of magnitudes).
fn reference(
    reader: Reader,
    a: &[f32],
    b: &[f32],
    (m, n, k): (usize, usize, usize),
    (bn, bk): (usize, usize),
) -> (Vec<f64>, Vec<f64>) {
    let (ar, br) = (rounded(DType::F16, a), rounded(DType::F16, b));
    let mut acc = vec![0f64; m * n];
    let mut t = vec![0f64; m * n];
    let mut scale = vec![0f64; m * n];
    for j0 in (0..k).step_by(bk) {
        // Row maxima of the old accumulator over each tile's columns (those past `n` hold 0).
        let row_max: Vec<f64> = (0..m * n)
            .map(|i| {
                let (r, c0) = (i / n, i % n / bn * bn);
                (c0..c0 + bn)
                    .map(|c| if c < n { acc[r * n + c] } else { 0.0 })
                    .fold(f64::NEG_INFINITY, f64::max)
            })
            .collect();
        for i in 0..m * n {
            let (r, c) = (i / n, i % n);
            let mut prod = 0.0;
            for kk in j0..(j0 + bk).min(k) {
                prod += ar[r * k + kk] * br[kk * n + c];
                scale[i] += (ar[r * k + kk] * br[kk * n + c]).abs();
            }
            let old = acc[i];
            acc[i] = old * 0.5 + prod;
            match reader {
                Reader::None => {}
                Reader::AfterTheDot | Reader::FreeBeforeTheDot => t[i] += old,
                Reader::ReducedBeforeTheDot => t[i] += row_max[i],
                Reader::ScaledAfterTheDot => t[i] += old * 0.5,
            }
        }
    }
    ((0..m * n).map(|i| acc[i] + t[i]).collect(), scale)
}

fn report(k: &Kernel, sm: u32, mma: MmaChoice) -> tegula_ptx::plan::report::Report {
    let options = CompileOptions {
        num_warps: 4,
        num_stages: 2,
        mma,
        ..CompileOptions::default()
    };
    plan(k, &Target { sm }, &options).unwrap()
}

/// Runs the compiled kernel on the simulator at `mnk` and compares with float64.
fn check(
    reader: Reader,
    sm: u32,
    mma: MmaChoice,
    blocks: (usize, usize, usize),
    mnk: (usize, usize, usize),
) {
    let (bm, bn, bk) = blocks;
    let (m, n, k) = mnk;
    let kern = decaying_matmul(reader, blocks);
    let c = compiled_with(&kern, sm, 4, 2, mma);
    let av = values(m * k, 41 + m as u64);
    let bv = values(k * n, 43 + n as u64);
    let (want, scale) = reference(reader, &av, &bv, mnk, (bn, bk));
    let (ab, bb) = (encode(DType::F16, &av), encode(DType::F16, &bv));
    let out = vec![0u8; m * n * 4];
    let args = [
        Arg::Buf(&ab),
        Arg::Buf(&bb),
        Arg::Buf(&out),
        Arg::I32(m as i32),
        Arg::I32(n as i32),
        Arg::I32(k as i32),
    ];
    let grid = [m.div_ceil(bm) as u64, n.div_ceil(bn) as u64, 1];
    let got = decode(
        DType::F32,
        &run_ptx(
            &c.ptx,
            c.shared_bytes as usize,
            &param_names(&kern),
            4,
            grid,
            &args,
        )[2],
    );
    for i in 0..m * n {
        let err = (got[i] as f64 - want[i]).abs();
        assert!(
            err <= 1e-5 * scale[i] + 1e-6,
            "{reader:?} sm_{sm} {mma:?} {mnk:?}: C[{i}] = {} against {} (scale {})",
            got[i],
            want[i],
            scale[i]
        );
    }
}

#[test]
fn the_plan_homes_a_dot_whose_carried_accumulator_is_dead_from_it_on() {
    for (sm, mma) in [(90, MmaChoice::Wgmma), (80, MmaChoice::Sync)] {
        let homed = |reader| {
            let r = report(&decaying_matmul(reader, (64, 64, 32)), sm, mma);
            assert_eq!(r.dots.len(), 1);
            r.dots[0].accumulator_in_carried
        };
        assert!(homed(Reader::None), "sm_{sm}");
        assert!(homed(Reader::ReducedBeforeTheDot), "sm_{sm}");
        assert!(!homed(Reader::AfterTheDot), "sm_{sm}");
        assert!(!homed(Reader::FreeBeforeTheDot), "sm_{sm}");
        assert!(!homed(Reader::ScaledAfterTheDot), "sm_{sm}");
    }
    let r = report(
        &decaying_matmul(Reader::None, (64, 64, 32)),
        90,
        MmaChoice::Wgmma,
    );
    assert!(
        r.to_string()
            .contains("accumulating in the carried registers"),
        "{r}"
    );
}

#[test]
fn a_homed_wgmma_copies_no_accumulator_register() {
    // 64 x 64 over 4 warps: 32 accumulator registers a thread. Homed, the loop moves none of
    // them after the dot; with the old value read after it, the copy stays.
    let moves_after_the_wait = |reader| {
        let c = compiled_wgmma(&decaying_matmul(reader, (64, 64, 32)), 90, 4, 2);
        assert!(c.ptx.contains("wgmma.mma_async"), "{reader:?}");
        let body = &c.ptx[c.ptx.find("wgmma.wait_group").unwrap()..];
        let body = &body[..body.find("bra.uni").unwrap()];
        body.lines()
            .filter(|l| l.trim_start().starts_with("mov.f32"))
            .count()
    };
    assert_eq!(moves_after_the_wait(Reader::None), 0);
    assert!(moves_after_the_wait(Reader::AfterTheDot) >= 32);
}

#[test]
fn homed_and_unhomed_dots_match_float64_on_wgmma() {
    for reader in [
        Reader::None,
        Reader::AfterTheDot,
        Reader::FreeBeforeTheDot,
        Reader::ReducedBeforeTheDot,
        Reader::ScaledAfterTheDot,
    ] {
        check(reader, 90, MmaChoice::Wgmma, (64, 64, 32), (64, 64, 96));
    }
    // Ragged edges (the sizes keep the parameters' divisibility by 16): rows, columns and
    // the last k-step masked.
    check(
        Reader::None,
        90,
        MmaChoice::Wgmma,
        (64, 64, 32),
        (48, 48, 80),
    );
    check(
        Reader::ReducedBeforeTheDot,
        90,
        MmaChoice::Wgmma,
        (64, 64, 32),
        (48, 48, 80),
    );
}

#[test]
fn homed_and_unhomed_dots_match_float64_on_mma_sync() {
    for reader in [
        Reader::None,
        Reader::AfterTheDot,
        Reader::FreeBeforeTheDot,
        Reader::ReducedBeforeTheDot,
    ] {
        check(reader, 80, MmaChoice::Sync, (32, 32, 16), (48, 48, 48));
    }
}
