//! fp8 dots (`f8e4m3`, `f8e5m2`) on the tensor cores: `mma.sync.m16n8k32` on sm_89 and sm_90,
//! run on the PTX simulator (whose fp8 decoding and `m16n8k32` fragments come from the PTX ISA,
//! not from `mma_layout.rs`) against float64 references. Operands are always staged with K
//! contiguous (`ldmatrix.trans` moves 16-bit elements only), so every case with K across the
//! source's rows exercises the transposing write.

mod mma_kernels;
mod sim;

use mma_kernels::*;
use sim::*;
use tegula_ir::prelude::*;
use tegula_ir::Kernel;
use tegula_ptx::Compiled;

const FP8: [DType; 2] = [DType::F8E4M3, DType::F8E5M2];

fn ptx_type(dt: DType) -> &'static str {
    if dt == DType::F8E5M2 {
        "e5m2"
    } else {
        "e4m3"
    }
}

#[test]
fn fp8_dots_run_on_tensor_cores_and_match_float64() {
    // ((m, n, k), a given transposed, b given transposed, warps)
    let cases = [
        ((32, 32, 32), false, false, 4),
        ((64, 32, 64), true, false, 4),
        ((16, 16, 32), false, true, 1),
        ((32, 64, 64), true, true, 8),
        ((16, 32, 128), false, false, 1),
        ((128, 16, 32), false, true, 2),
    ];
    for dt in FP8 {
        for sm in [89, 90] {
            for ((m, n, k), ta, tb, warps) in cases {
                let what = format!("{dt} sm_{sm} {m}x{n}x{k} ta={ta} tb={tb} {warps} warps");
                let kern = dot_tile(dt, (m, n, k), InputPrecision::Ieee, ta, tb);
                let ptx = ptx_of(&kern, sm, warps, 1);
                let t = ptx_type(dt);
                assert!(
                    ptx.contains(&format!(
                        "mma.sync.aligned.m16n8k32.row.col.f32.{t}.{t}.f32"
                    )),
                    "{what}: not on the fp8 tensor cores"
                );
                assert!(
                    ptx.contains(".version 8.4"),
                    "{what}: fp8 mma needs PTX 8.4"
                );
                let av = values(m * k, 3 + m as u64);
                let bv = values(k * n, 11 + n as u64);
                // a is given as [k][m] when ta, b as [n][k] when tb.
                let a_mk = if ta {
                    transposed(&av, k, m)
                } else {
                    av.clone()
                };
                let b_kn = if tb {
                    transposed(&bv, n, k)
                } else {
                    bv.clone()
                };
                let (want, scale) = matmul_reference(dt, &a_mk, &b_kn, (m, n, k));
                let out = vec![0u8; m * n * 4];
                let bufs = run_on(
                    sm,
                    &kern,
                    warps,
                    1,
                    [1, 1, 1],
                    &[
                        Arg::Buf(&encode(dt, &av)),
                        Arg::Buf(&encode(dt, &bv)),
                        Arg::Buf(&out),
                    ],
                );
                assert_close(&decode(DType::F32, &bufs[2]), &want, &scale, 1e-6, &what);
            }
        }
    }
}

/// The fp8 matmul loop with B given as `[k, n]` (`b_nk` false: K across B's rows) or as
/// `[n, k]` read through `.trans()` (true: tutorial 09's fp8 `dot(a, b.T)`, K contiguous in
/// both operands).
fn fp8_matmul(dt: DType, blocks: (usize, usize, usize), b_nk: bool) -> Kernel {
    if b_nk {
        matmul_loop_b_nk((dt, dt), DType::F32, blocks)
    } else {
        matmul_loop(dt, blocks.0, blocks.1, blocks.2)
    }
}

/// Runs `c`, compiled from `kern` (parameters `a, b, c, m, n, k`: A `[m, k]` of `da`, B of
/// `db` given as `[n, k]` when `b_nk`, else `[k, n]`, C `[m, n]` f32), over `(bm, bn)` tiles of
/// fresh values (`seed`) on `warps` warps, and checks C against float64.
#[allow(clippy::too_many_arguments)]
fn check_matmul(
    kern: &Kernel,
    c: &Compiled,
    (da, db): (DType, DType),
    b_nk: bool,
    (m, n, k): (usize, usize, usize),
    (bm, bn): (usize, usize),
    warps: u32,
    seed: u64,
    what: &str,
) {
    let av = values(m * k, seed);
    let bv = values(k * n, seed + 1);
    let b_kn = if b_nk {
        transposed(&bv, n, k)
    } else {
        bv.clone()
    };
    let (want, scale) = matmul_reference_of((da, db), &av, &b_kn, (m, n, k));
    let out = vec![0u8; m * n * 4];
    let bufs = run_ptx(
        &c.ptx,
        c.shared_bytes as usize,
        &param_names(kern),
        warps,
        [m.div_ceil(bm) as u64, n.div_ceil(bn) as u64, 1],
        &[
            Arg::Buf(&encode(da, &av)),
            Arg::Buf(&encode(db, &bv)),
            Arg::Buf(&out),
            Arg::I32(m as i32),
            Arg::I32(n as i32),
            Arg::I32(k as i32),
        ],
    );
    assert_close(&decode(DType::F32, &bufs[2]), &want, &scale, 1e-6, what);
}

/// Both forms match float64 on sm_89 and sm_90, unpipelined and asked for three stages. With
/// K contiguous in both operands, both loads are copied into the slots (`cp.async`, plain
/// `ldmatrix`); with K across B's rows, A is and B is transposed through registers, and the
/// report says so.
#[test]
fn fp8_matmul_loops_with_ragged_edges_match() {
    let (m, n, k) = (40, 48, 112);
    for dt in FP8 {
        for b_nk in [true, false] {
            // Block K of two k-steps: the next tile's first fragments are read across the
            // iteration boundary (`boundary_fragments`), packed into carried registers.
            for (sm, warps, stages, (bm, bn, bk)) in [
                (89, 4, 1, (32, 32, 32)),
                (90, 2, 3, (32, 32, 32)),
                (89, 4, 2, (32, 32, 64)),
                (90, 4, 3, (64, 32, 64)),
            ] {
                let what = format!(
                    "fp8 matmul {dt} b_nk={b_nk} {bm}x{bn}x{bk} sm_{sm} {warps} warps {stages} stages"
                );
                let kern = fp8_matmul(dt, (bm, bn, bk), b_nk);
                let compiled = compiled(&kern, sm, warps, stages);
                let lp = &compiled.report.loops[0];
                if stages > 1 && b_nk {
                    assert_eq!(lp.boundary_fragments, bk == 64, "{what}");
                }
                assert_eq!(lp.stages, stages, "{what}: {:?}", lp.why);
                let streamed = if stages > 1 { 1 + b_nk as usize } else { 0 };
                assert_eq!(lp.streamed.len(), streamed, "{what}: {:?}", lp.why);
                if stages > 1 && !b_nk {
                    let why = lp.why.clone().unwrap_or_default();
                    assert!(why.contains("K across its rows"), "{what}: {why}");
                }
                assert_eq!(compiled.ptx.contains("cp.async"), stages > 1, "{what}");
                let fp8 = (dt, dt);
                check_matmul(
                    &kern,
                    &compiled,
                    fp8,
                    b_nk,
                    (m, n, k),
                    (bm, bn),
                    warps,
                    23,
                    &what,
                );
            }
        }
    }
}

/// An fp8 dot shorter than one k-step (32) runs on FMAs, and its module keeps PTX 8.1 (8.4 is asked
/// only of modules with fp8 mmas).
#[test]
fn fp8_dots_below_one_tile_stay_on_fma() {
    let small = dot_tile(
        DType::F8E4M3,
        (16, 16, 16),
        InputPrecision::Ieee,
        false,
        false,
    );
    let c = compiled(&small, 89, 1, 1);
    assert_eq!(c.report.dots[0].kind, tegula_ptx::DotKind::Fma);
    assert!(!c.ptx.contains("mma.sync"));
    assert!(c.ptx.contains(".version 8.1"));
}

/// On Hopper with `wgmma` asked for, the fp8 matmul with K contiguous in both operands runs on
/// `wgmma.mma_async ... k32.f32.e4m3.e4m3` from its slots (no transpose immediates), checked
/// on the simulator (which models wgmma's descriptors, asynchrony and fences) against
/// float64; with K across B's rows it stays on `mma.sync`.
#[test]
fn fp8_matmul_on_wgmma_matches() {
    let (m, n, k) = (136, 80, 192);
    for dt in FP8 {
        let t = ptx_type(dt);
        for (warps, stages, (bm, bn, bk)) in [
            (4, 2, (64, 64, 64)),
            (4, 3, (64, 32, 128)),
            (8, 3, (128, 64, 64)),
        ] {
            let what = format!("wgmma fp8 {dt} {bm}x{bn}x{bk} {warps} warps {stages} stages");
            let kern = fp8_matmul(dt, (bm, bn, bk), true);
            let c = compiled_wgmma(&kern, 90, warps, stages);
            assert_eq!(
                c.report.wgmma_dots(),
                1,
                "{what}: {:?}",
                c.report.loops[0].why
            );
            assert!(
                c.ptx.contains(&format!("k32.f32.{t}.{t}")),
                "{what}: not on fp8 wgmma"
            );
            check_matmul(
                &kern,
                &c,
                (dt, dt),
                true,
                (m, n, k),
                (bm, bn),
                warps,
                41,
                &what,
            );
        }
        let rows = fp8_matmul(dt, (64, 64, 64), false);
        let c = compiled_wgmma(&rows, 90, 4, 3);
        assert_eq!(c.report.wgmma_dots(), 0, "{dt}: B with K across its rows");
        assert!(c.ptx.contains("m16n8k32"));
    }
}

/// An fp8 A that is not a load on wgmma, B streamed as `[n, k]` blocks through `.trans()`,
/// each iteration storing `A B_j`: A computed in the loop (an f32 tile cast to fp8, as
/// attention's P) is read by the register form, packed four bytes a word as the m16n8k32 A
/// fragment; A loaded once before the loop stays resident in shared memory and is read by
/// descriptor.
#[test]
fn fp8_wgmma_with_a_not_streamed_matches() {
    let (bm, bn, kk) = (64usize, 32usize, 64usize);
    let n = 96;
    for (dt, in_loop) in [
        (DType::F8E4M3, true),
        (DType::F8E5M2, true),
        (DType::F8E4M3, false),
    ] {
        let kern = trace("fp8_a_in_registers", |p| {
            let a_dt = if in_loop { DType::F32 } else { dt };
            let (a, b, c) = (p.ptr("a", a_dt), p.ptr("b", dt), p.ptr("c", DType::F32));
            let n_ = p.scalar("n", DType::I32);
            let (rm, rn, rk) = (
                arange(0, bm as i64),
                arange(0, bn as i64),
                arange(0, kk as i64),
            );
            let before = load_unmasked(a + rm.col() * kk + rk.row());
            for_range(0, n_, bn, (), |j, ()| {
                let at = if in_loop {
                    load_unmasked(a + rm.col() * kk + rk.row()).cast(dt)
                } else {
                    before
                };
                let cols = j + rn;
                let bt = load_unmasked(b + cols.col() * kk + rk.row()).trans();
                store_unmasked(c + rm.col() * n_ + cols.row(), dot(at, bt));
            });
        })
        .map(aligned)
        .unwrap();
        let c = compiled_wgmma(&kern, 90, 4, 2);
        assert_eq!(
            c.report.wgmma_dots(),
            1,
            "{dt}: {:?}",
            c.report.loops[0].why
        );
        let t = ptx_type(dt);
        // The register form: `d, {a0..a3}, b-desc, ..`; the descriptor form: `d, a-desc, ..`.
        let line = c
            .ptx
            .lines()
            .find(|l| l.contains(&format!("k32.f32.{t}.{t}")));
        assert_eq!(
            line.map(|l| l.contains("}, {")),
            Some(in_loop),
            "{dt} in_loop={in_loop}: {line:?}"
        );
        let av = values(bm * kk, 51);
        let bv = values(n * kk, 53);
        let (ar, br) = (rounded(dt, &av), rounded(dt, &bv));
        let mut want = vec![0f64; bm * n];
        let mut scale = vec![0f64; bm * n];
        for i in 0..bm {
            for j in 0..n {
                for x in 0..kk {
                    want[i * n + j] += ar[i * kk + x] * br[j * kk + x];
                    scale[i * n + j] += (ar[i * kk + x] * br[j * kk + x]).abs();
                }
            }
        }
        let out = vec![0u8; bm * n * 4];
        let bufs = run_ptx(
            &c.ptx,
            c.shared_bytes as usize,
            &param_names(&kern),
            4,
            [1, 1, 1],
            &[
                Arg::Buf(&encode(if in_loop { DType::F32 } else { dt }, &av)),
                Arg::Buf(&encode(dt, &bv)),
                Arg::Buf(&out),
                Arg::I32(n as i32),
            ],
        );
        let what = format!("{dt} A in_loop={in_loop}");
        assert_close(&decode(DType::F32, &bufs[2]), &want, &scale, 1e-6, &what);
    }
}
/// Tutorial 03's fp8 form: the host passes `b.T` (B `[k, n]` with strides `(1, k)`, K
/// contiguous) and the kernel loads `[BLOCK_K, BLOCK_N]` blocks with those strides, no
/// `.trans()` in sight. The load is K-contiguous all the same: both operands stream into the
/// slots, and on Hopper the dot runs on fp8 wgmma. f16 beside it for comparison.
#[test]
fn matmul_with_b_column_major_streams_both_operands() {
    let (bm, bn, bk) = (64usize, 32usize, 64usize);
    let (m, n, k) = (100, 48, 128);
    for dt in [DType::F16, DType::F8E4M3, DType::F8E5M2] {
        let kern = trace("b_column_major", |p| {
            let (a, b, c) = (p.ptr("a", dt), p.ptr("b", dt), p.ptr("c", DType::F32));
            let (m, n, k) = (
                p.scalar("m", DType::I32),
                p.scalar("n", DType::I32),
                p.scalar("k", DType::I32),
            );
            let offs_m = program_id(0) * bm + arange(0, bm as i64);
            let offs_n = program_id(1) * bn + arange(0, bn as i64);
            let offs_k = arange(0, bk as i64);
            let acc = for_range(0, k, bk, zeros::<f32>([bm, bn]), |start, acc| {
                let ks = start + offs_k;
                let at = load(
                    a + offs_m.col() * k + ks.row(),
                    offs_m.col().lt(m) & ks.row().lt(k),
                    0.0,
                );
                // Element (kk, j) of B at j * k + kk.
                let bt = load(
                    b + ks.col() + offs_n.row() * k,
                    ks.col().lt(k) & offs_n.row().lt(n),
                    0.0,
                );
                dot_acc(at, bt, acc)
            });
            store(
                c + offs_m.col() * n + offs_n.row(),
                acc,
                offs_m.col().lt(m) & offs_n.row().lt(n),
            );
        })
        .map(aligned)
        .unwrap();
        let sms: &[u32] = if dt == DType::F16 {
            &[80, 90]
        } else {
            &[89, 90]
        };
        for &sm in sms {
            let what = format!("{dt} sm_{sm}");
            let c = if sm == 90 {
                compiled_wgmma(&kern, sm, 4, 3)
            } else {
                compiled(&kern, sm, 4, 3)
            };
            let lp = &c.report.loops[0];
            assert_eq!(
                (lp.stages, lp.streamed.len()),
                (3, 2),
                "{what}: {:?}",
                lp.why
            );
            assert_eq!(c.report.wgmma_dots(), (sm == 90) as usize, "{what}");
            // B's memory is [n, k]: the kernel reads element (kk, j) at j * k + kk.
            check_matmul(&kern, &c, (dt, dt), true, (m, n, k), (bm, bn), 4, 23, &what);
        }
    }
}
/// FlashAttention's forward over fp8 Q, K, V (one query block, three key blocks; P cast to
/// fp8 for `P V`; the output fp8) on the simulator against the float64 online softmax: `Q K^T`
/// on the fp8 tensor cores (`wgmma` on Hopper), K streamed; V streamed when stored transposed
/// as Triton's fp8 tutorial stores it (`v_t`: K of `P V` contiguous), else transposed through
/// registers. Within fp8's rounding of P and of the output (2^-3 of each output for e4m3,
/// 2^-2 for e5m2).
#[test]
fn fp8_attention_matches_float64() {
    for dt in FP8 {
        let rel = if dt == DType::F8E5M2 { 0.25 } else { 0.125 };
        for v_t in [false, true] {
            for (sm, (bm, bn, d), warps, wgmma) in [
                (89, (64, 32, 64), 4, false),
                (90, (64, 64, 64), 4, true),
                (90, (128, 64, 128), 8, true),
            ] {
                let what = format!("{dt} v_t={v_t} sm_{sm} {bm}x{bn}x{d}");
                let kern = if v_t {
                    flash_attention_v_transposed(dt, bm, bn, d)
                } else {
                    flash_attention(dt, bm, bn, d)
                };
                let c = if wgmma {
                    compiled_wgmma(&kern, sm, warps, 2)
                } else {
                    compiled(&kern, sm, warps, 2)
                };
                let lp = &c.report.loops[0];
                assert_eq!(lp.streamed.len(), 1 + v_t as usize, "{what}: {:?}", lp.why);
                assert!(c.report.wgmma_dots() >= wgmma as usize, "{what}");
                let nk = 3 * bn;
                let (qv, kv, vv) = (values(bm * d, 11), values(nk * d, 13), values(nk * d, 17));
                let scale = 0.7f32;
                let (want, _) = attention_reference(dt, [&qv, &kv, &vv], (bm, bn, d), scale);
                // V as the kernel reads it: [nk, d], or its transpose [d, nk].
                let v_in = if v_t {
                    transposed(&vv, nk, d)
                } else {
                    vv.clone()
                };
                let (qb, kb, vb) = (encode(dt, &qv), encode(dt, &kv), encode(dt, &v_in));
                let out = vec![0u8; bm * d];
                let args = [
                    Arg::Buf(&qb),
                    Arg::Buf(&kb),
                    Arg::Buf(&vb),
                    Arg::Buf(&out),
                    Arg::I32(nk as i32),
                    Arg::F32(scale),
                ];
                let bufs = run_ptx(
                    &c.ptx,
                    c.shared_bytes as usize,
                    &param_names(&kern),
                    warps,
                    [1, 1, 1],
                    &args,
                );
                let got = decode(dt, &bufs[3]);
                // Each output rounds to fp8 (half an ulp: 2^-4 of it for e4m3, 2^-3 for
                // e5m2) after sums of P rounded alike; the absolute term covers the smallest.
                let worst = got
                    .iter()
                    .zip(&want)
                    .map(|(g, w)| (*g as f64 - w).abs() / (w.abs() * rel + 2f64.powi(-8)))
                    .fold(0f64, f64::max);
                assert!(worst <= 1.0, "{what}: worst {worst} of the bound");
            }
        }
    }
}

/// An e4m3 A with an e5m2 B (and the other way round), as fp8 training's gradient products
/// pair them: on the tensor cores (`.e4m3.e5m2` on `mma.sync` and `wgmma`), both operands
/// streamed, against float64.
#[test]
fn mixed_fp8_dots_match_float64() {
    let (m, n, k) = (72, 64, 160);
    let (bm, bn, bk) = (64, 32, 64);
    for (da, db) in [
        (DType::F8E4M3, DType::F8E5M2),
        (DType::F8E5M2, DType::F8E4M3),
    ] {
        let kern = matmul_loop_b_nk((da, db), DType::F32, (bm, bn, bk));
        let (ta, tb) = (ptx_type(da), ptx_type(db));
        for (sm, wgmma) in [(89, false), (90, false), (90, true)] {
            let what = format!("{da} x {db} sm_{sm} wgmma={wgmma}");
            let c = if wgmma {
                compiled_wgmma(&kern, sm, 4, 3)
            } else {
                compiled(&kern, sm, 4, 3)
            };
            assert_eq!(c.report.loops[0].streamed.len(), 2, "{what}");
            assert_eq!(c.report.wgmma_dots(), wgmma as usize, "{what}");
            let op = if wgmma {
                format!("k32.f32.{ta}.{tb}")
            } else {
                format!("m16n8k32.row.col.f32.{ta}.{tb}.f32")
            };
            assert!(c.ptx.contains(&op), "{what}: no {op}");
            check_matmul(&kern, &c, (da, db), true, (m, n, k), (bm, bn), 4, 61, &what);
        }
    }
}
