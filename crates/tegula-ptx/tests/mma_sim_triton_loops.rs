//! Triton's loop idioms, end to end on the PTX simulator against float64: tutorial 03's
//! k-loop advances its pointer tiles (`a_ptrs += BLOCK_K * stride_ak`) and masks by
//! `offs_k < K - k * BLOCK_K`, and its B is column-major (contiguous down K). The compile
//! pipeline's `affine_recurrences` turns the pointers into functions of the counter and the
//! plan's *transposed load* rule loads B as its transpose, so both operands stream through the
//! software pipeline (the report says so) — and the results must still be right, on
//! `mma.sync` (sm_80) and on `wgmma` (sm_90a). With the tutorial's `offs_am = (..) % M` rows
//! (not linear in the row), each copy's address is carried and advanced by the k-step.

mod mma_kernels;
mod sim;

use mma_kernels::aligned;
use sim::*;
use tegula_ir::prelude::*;
use tegula_ir::{passes, Kernel};
use tegula_ptx::{compile, CompileOptions, MmaChoice, OperandHome, Target};

/// Tutorial 03's kernel body over `bm x bn x bk` tiles, B stored `[N, K]` row-major (so the
/// `[K, N]` operand is contiguous down K), after the compile pipeline's IR passes. `wrap`
/// loads rows `% m` and columns `% n`, as the tutorial does.
fn triton_matmul(dt: DType, (bm, bn, bk): (usize, usize, usize), wrap: bool) -> Kernel {
    let mut k = trace("triton_matmul", |p| {
        let (a, b, c) = (p.ptr("a", dt), p.ptr("b", dt), p.ptr("c", DType::F32));
        let (m, n, kk) = (
            p.scalar("m", DType::I32),
            p.scalar("n", DType::I32),
            p.scalar("k", DType::I32),
        );
        let offs_am = program_id(0) * bm + arange(0, bm as i64);
        let offs_bn = program_id(1) * bn + arange(0, bn as i64);
        let offs_k = arange(0, bk as i64);
        let (rows, cols) = if wrap {
            (offs_am % m, offs_bn % n)
        } else {
            (offs_am, offs_bn)
        };
        let a_ptrs = a + (rows.col() * kk + offs_k.row());
        let b_ptrs = b + (offs_k.col() + cols.row() * kk);
        let steps = (kk + (bk as i64 - 1)) / bk as i64;
        let (acc, _, _) = for_range(
            0,
            steps,
            1,
            (zeros::<f32>([bm, bn]), a_ptrs, b_ptrs),
            |i, (acc, a_ptrs, b_ptrs)| {
                let left = kk - i * bk as i64;
                let at = load(a_ptrs, offs_am.col().lt(m) & offs_k.row().lt(left), 0.0);
                let bt = load(b_ptrs, offs_k.col().lt(left) & offs_bn.row().lt(n), 0.0);
                let acc = dot_acc(at, bt, acc);
                (acc, a_ptrs + bk as i64, b_ptrs + bk as i64)
            },
        );
        store(
            c + offs_am.col() * n + offs_bn.row(),
            acc,
            offs_am.col().lt(m) & offs_bn.row().lt(n),
        );
    })
    .map(aligned)
    .unwrap();
    assert!(passes::affine_recurrences(&mut k));
    passes::canonicalize(&mut k);
    k
}

fn check(
    dt: DType,
    sm: u32,
    mma: MmaChoice,
    blocks: (usize, usize, usize),
    ws: (u32, u32),
    wrap: bool,
) {
    let (bm, bn, _) = blocks;
    let (m, n, k) = (72, 56, 200);
    let kern = triton_matmul(dt, blocks, wrap);
    let options = CompileOptions {
        num_warps: ws.0,
        num_stages: ws.1,
        mma,
        fp_fusion: true,
        tma: false,
    };
    let compiled = compile(&kern, &Target { sm }, &options).unwrap();
    let what = format!("{dt} sm_{sm} {mma} {blocks:?} {ws:?} wrap {wrap}");
    // The copies' addresses advance by additions: no 64-bit multiply in the loop.
    let body = compiled.ptx.split("$L_for_").nth(1).expect("a loop");
    let body = body.split("bra.uni $L_for_").next().unwrap();
    assert!(
        !body.contains("mul.lo.s64") && !body.contains("mul.wide"),
        "{what}: the loop recomputes addresses:\n{body}"
    );
    let l = &compiled.report.loops[0];
    assert_eq!((l.stages, l.streamed.len()), (ws.1, 2), "{what}: {l:?}");
    assert_eq!(
        (compiled.report.dots[0].a, compiled.report.dots[0].b),
        (OperandHome::Slot, OperandHome::Slot),
        "{what}"
    );
    let av = values(m * k, 41);
    let bt = values(n * k, 43);
    // The reference takes B as [K, N].
    let bv: Vec<f32> = (0..k * n).map(|i| bt[(i % n) * k + i / n]).collect();
    let (want, scale) = matmul_reference(dt, &av, &bv, (m, n, k));
    let c = vec![0u8; m * n * 4];
    let grid = [m.div_ceil(bm) as u64, n.div_ceil(bn) as u64, 1];
    let bufs = run_ptx(
        &compiled.ptx,
        compiled.shared_bytes as usize,
        &param_names(&kern),
        ws.0,
        grid,
        &[
            Arg::Buf(&encode(dt, &av)),
            Arg::Buf(&encode(dt, &bt)),
            Arg::Buf(&c),
            Arg::I32(m as i32),
            Arg::I32(n as i32),
            Arg::I32(k as i32),
        ],
    );
    assert_close(&decode(DType::F32, &bufs[2]), &want, &scale, 1e-6, &what);
}

#[test]
fn tutorial_03s_loop_streams_both_operands_on_mma_sync() {
    for (dt, stages) in [(DType::F16, 2), (DType::BF16, 3)] {
        for wrap in [false, true] {
            check(dt, 80, MmaChoice::Sync, (32, 32, 32), (4, stages), wrap);
        }
    }
}

#[test]
fn tutorial_03s_loop_streams_both_operands_on_wgmma() {
    for wrap in [false, true] {
        check(
            DType::BF16,
            90,
            MmaChoice::Wgmma,
            (64, 32, 32),
            (4, 3),
            wrap,
        );
    }
}

/// `tl.range(.., loop_unroll_factor=2)` on a k-loop whose loads are addressed from the
/// counter: the unrolled loop streams both copies' operands (four loads) through its slots,
/// the remainder loop (one iteration here) runs unpipelined, and C is A B.
#[test]
fn an_unrolled_k_loop_streams_every_copy_and_computes_the_product() {
    use tegula_ir::builder::{for_range_with, RangeOptions};
    let (bm, bn, bk) = (32usize, 32usize, 32usize);
    // Strides of whole 16-element rows (the specialization says so); 5 k-steps, the last half.
    let (m, n, k) = (40usize, 48usize, 4 * bk + 16);
    for (sm, mma) in [(80, MmaChoice::Sync), (90, MmaChoice::Wgmma)] {
        let kern = trace("unrolled_matmul", |p| {
            let dt = DType::F16;
            let (a, b, c) = (p.ptr("a", dt), p.ptr("b", dt), p.ptr("c", DType::F32));
            let (mm, nn, kk) = (
                p.scalar("m", DType::I32),
                p.scalar("n", DType::I32),
                p.scalar("k", DType::I32),
            );
            let offs_m = program_id(0) * bm + arange(0, bm as i64);
            let offs_n = program_id(1) * bn + arange(0, bn as i64);
            let acc = for_range_with(
                0,
                kk,
                bk as i32,
                RangeOptions::new().loop_unroll_factor(2),
                zeros::<f32>([bm, bn]),
                |k0, acc| {
                    let offs_k = k0 + arange(0, bk as i64);
                    let at = load(
                        a + offs_m.col() * kk + offs_k.row(),
                        offs_m.col().lt(mm) & offs_k.row().lt(kk),
                        0.0,
                    );
                    let bt = load(
                        b + offs_k.col() * nn + offs_n.row(),
                        offs_k.col().lt(kk) & offs_n.row().lt(nn),
                        0.0,
                    );
                    dot_acc(at, bt, acc)
                },
            );
            store(
                c + offs_m.col() * nn + offs_n.row(),
                acc,
                offs_m.col().lt(mm) & offs_n.row().lt(nn),
            );
        })
        .map(aligned)
        .unwrap();
        let options = CompileOptions {
            num_warps: 4,
            num_stages: 3,
            mma,
            fp_fusion: true,
            tma: false,
        };
        let compiled = compile(&kern, &Target { sm }, &options).unwrap();
        let loops = &compiled.report.loops;
        assert_eq!(loops.len(), 2, "{}", compiled.report);
        assert_eq!(
            (loops[0].stages, loops[0].streamed.len()),
            (3, 4),
            "{:?}",
            loops[0]
        );
        assert_eq!(loops[1].stages, 1, "{:?}", loops[1]);
        let av = values(m * k, 17);
        let bv = values(k * n, 19);
        let (want, scale) = matmul_reference(DType::F16, &av, &bv, (m, n, k));
        let c = vec![0u8; m * n * 4];
        let grid = [m.div_ceil(bm) as u64, n.div_ceil(bn) as u64, 1];
        let bufs = run_ptx(
            &compiled.ptx,
            compiled.shared_bytes as usize,
            &param_names(&kern),
            4,
            grid,
            &[
                Arg::Buf(&encode(DType::F16, &av)),
                Arg::Buf(&encode(DType::F16, &bv)),
                Arg::Buf(&c),
                Arg::I32(m as i32),
                Arg::I32(n as i32),
                Arg::I32(k as i32),
            ],
        );
        let what = format!("sm_{sm} {mma}");
        assert_close(&decode(DType::F32, &bufs[2]), &want, &scale, 1e-6, &what);
    }
}
