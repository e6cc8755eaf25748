//! Runs the emitted PTX of tensor-core kernels on the PTX simulator (`tegula-ptx-sim`: one CTA
//! at a time, all threads in lockstep, `ldmatrix`, `mma.sync` and `wgmma` from the PTX ISA's
//! definitions, not from `mma_layout.rs` or `emit/wgmma.rs`) and compares the results with
//! float64 references. The simulator checks that shared-memory accesses of different threads
//! are separated by a barrier, that branches are uniform, and models `cp.async` and `wgmma`
//! asynchrony at its latest (see its crate docs). Products on tensor cores are exact; the
//! simulator sums them in f64, so results are compared with a tolerance, not bit for bit.
//! Hopper's `wgmma` kernels are in `mma_sim_wgmma.rs`.

mod mma_kernels;
mod sim;

use half::bf16;
use mma_kernels::*;
use sim::*;
use tegula_ir::prelude::*;
use tegula_ir::Kernel;
use tegula_ptx::{compile, CompileOptions, Target};

#[test]
fn single_dots_match_a_float64_reference() {
    let cases = [
        (DType::F16, (32, 32, 32), false, false, 4),
        (DType::BF16, (64, 32, 32), true, false, 4),
        (DType::F16, (32, 64, 16), false, true, 8),
        (DType::BF16, (16, 16, 16), true, true, 8),
        (DType::F32, (32, 16, 16), false, false, 4),
        (DType::F32, (16, 32, 32), true, true, 4),
        (DType::F16, (128, 16, 32), false, false, 2),
        // A 64 KB accumulator: stored through shared memory in two slabs.
        (DType::F16, (128, 128, 16), false, true, 4),
    ];
    for (dt, (m, n, k), ta, tb, warps) in cases {
        let kern = dot_tile(dt, (m, n, k), InputPrecision::Tf32, ta, tb);
        let av = values(m * k, 1 + m as u64);
        let bv = values(k * n, 7 + n as u64);
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
        let bufs = run(
            &kern,
            warps,
            [1, 1, 1],
            &[
                Arg::Buf(&encode(dt, &av)),
                Arg::Buf(&encode(dt, &bv)),
                Arg::Buf(&out),
            ],
        );
        let got = decode(DType::F32, &bufs[2]);
        assert_close(
            &got,
            &want,
            &scale,
            1e-6,
            &format!("{dt} {m}x{n}x{k} ta={ta} tb={tb}"),
        );
    }
}

#[test]
fn matmul_loop_with_ragged_edges_matches() {
    for (dt, warps) in [(DType::F16, 4), (DType::BF16, 8), (DType::F32, 4)] {
        check_pipelined_matmul(dt, warps, 1, (32, 32, 16), (48, 40, 56));
    }
}

#[test]
fn flash_attention_matches_the_online_softmax_reference() {
    // (dtype, block_m, block_n, d, warps): 4 warps on 64 rows keep P in registers; 4 warps on
    // 16 rows (the library's default blocks) put 2 warps along N, replicate the other 2, and
    // stage P through shared memory.
    for (dt, bm, bn, d, warps) in [
        (DType::BF16, 64, 32, 32, 4),
        (DType::F16, 32, 64, 16, 2),
        (DType::BF16, 16, 16, 64, 1),
        (DType::F16, 16, 16, 32, 4),
        (DType::BF16, 16, 32, 64, 8),
        // The H200 configuration: 8 warps along M; the 64 KB accumulator leaves through
        // predicated slabs.
        (DType::BF16, 128, 64, 128, 8),
    ] {
        check_attention(dt, bm, bn, d, warps, 1);
    }
}

#[test]
fn attention_with_q_resident_in_shared_memory_matches() {
    // 128 x 128 bf16 Q over 4 warps is 64 registers a thread: above the hoisting limit, it is
    // written to shared memory before the loop and read with ldmatrix at each step.
    for stages in [1, 2, 3] {
        check_attention(DType::BF16, 128, 64, 128, 4, stages);
    }
    // In the loop, each warp reads its 32 rows of Q (2 x 8 ldmatrix.x4 over D = 128) beside
    // K (64 keys: 4 x 8); with 8 warps (16 rows, 32 registers) Q stays in registers.
    let loop_loads = |warps: u32| {
        let kern = flash_attention(DType::BF16, 128, 64, 128);
        let options = CompileOptions {
            num_warps: warps,
            num_stages: 2,
            mma: tegula_ptx::MmaChoice::Sync,
            fp_fusion: true,
            tma: false,
        };
        let ptx = compile(&kern, &Target { sm: 90 }, &options).unwrap().ptx;
        // Lines from the first loop's label to its end label.
        let body = ptx
            .lines()
            .skip_while(|l| !l.starts_with("$L_for_"))
            .take_while(|l| !l.starts_with("$L_endfor_"));
        body.filter(|l| l.contains("ldmatrix.sync.aligned.m8n8.x4.shared"))
            .count()
    };
    assert_eq!(loop_loads(8), 32);
    assert_eq!(loop_loads(4), 32 + 16);
    // Two loops over the keys read the same resident Q (written once, before the first).
    for (dt, bm, bn, d, warps, stages) in [
        (DType::BF16, 128, 64, 128, 4, 3),
        (DType::F16, 64, 32, 128, 2, 2),
        // Q in registers (16 a thread): the same kernel through the hoisting path.
        (DType::BF16, 64, 32, 32, 4, 2),
    ] {
        check_attention_kernel(
            &flash_attention_two_loops(dt, bm, bn, d),
            Some(bn as i32),
            80,
            (dt, bm, bn, d, warps, stages),
        );
    }
}

#[test]
fn resident_q_is_written_after_the_first_key_copies_are_issued() {
    // Q's global load and the first K/V stage are in flight together: the copies come before
    // Q's shared-memory write (which waits for its load), with one barrier between them and
    // the loop's first read (the simulator checks above run the same order for races).
    let kern = flash_attention(DType::BF16, 128, 64, 128);
    let options = CompileOptions {
        num_warps: 4,
        num_stages: 2,
        mma: tegula_ptx::MmaChoice::Sync,
        fp_fusion: true,
        tma: false,
    };
    let ptx = compile(&kern, &Target { sm: 90 }, &options).unwrap().ptx;
    let before_loop: Vec<&str> = ptx
        .lines()
        .take_while(|l| !l.starts_with("$L_for_"))
        .collect();
    let first = |what: &str| before_loop.iter().position(|l| l.contains(what));
    let copy = first("cp.async.cg.shared.global").expect("the first stage's copies");
    let write = first("st.shared").expect("Q's write to shared memory");
    assert!(copy < write, "copy at line {copy}, Q's write at {write}");
    let barriers_after_write = before_loop[write..]
        .iter()
        .filter(|l| l.contains("bar.sync"))
        .count();
    assert_eq!(barriers_after_write, 1);
}

/// Runs the FlashAttention kernel over 3 key blocks and compares with the same online
/// softmax in f64 (P rounded to the input dtype before the PV product).
fn check_attention(dt: DType, bm: usize, bn: usize, d: usize, warps: u32, stages: u32) {
    let kern = flash_attention(dt, bm, bn, d);
    check_attention_kernel(&kern, None, 80, (dt, bm, bn, d, warps, stages));
}

/// The library forward's epilogue (`acc * (1 / l)`, cast; `m + log2(l)`): the scaling runs in
/// the mma layout, with `1 / l` once for each row a thread holds there, and the output crosses
/// to the store's layout in bf16 through padded rows, once; the row statistic is computed
/// where the reduction left it and crosses once. The simulator checks both results and the
/// shared-memory races.
#[test]
fn attention_output_is_scaled_and_cast_before_its_crossing() {
    // (dtype, block_m, block_n, d, warps, stages, the output's crossing, rows a thread holds)
    for (dt, bm, bn, d, warps, stages, plan, rows) in [
        (
            DType::BF16,
            128,
            64,
            128,
            4,
            2,
            "bf16[128, 128] through shared memory: rows of 272 bytes, 128 rows a round",
            4,
        ),
        (
            DType::F16,
            64,
            32,
            64,
            4,
            1,
            "f16[64, 64] through shared memory: rows of 144 bytes, 64 rows a round",
            2,
        ),
    ] {
        let kern = flash_attention_with_lse(dt, bm, bn, d);
        let options = CompileOptions {
            num_warps: warps,
            num_stages: stages,
            mma: tegula_ptx::MmaChoice::Sync,
            fp_fusion: true,
            tma: false,
        };
        let ptx = compile(&kern, &Target { sm: 90 }, &options).unwrap().ptx;
        let epilogue: Vec<&str> = ptx
            .lines()
            .skip_while(|l| !l.starts_with("$L_endfor_"))
            .collect();
        let what = format!("{dt} {bm}x{bn}x{d} {warps} warps");
        assert!(
            epilogue.iter().any(|l| l.contains(plan)),
            "{what}: no {plan:?}"
        );
        let conversions = epilogue
            .iter()
            .filter(|l| l.contains("// convert "))
            .count();
        assert_eq!(
            conversions, 1,
            "{what}: only the row statistic's general conversion"
        );
        let divisions = epilogue
            .iter()
            .filter(|l| l.contains("div.full.f32"))
            .count();
        assert_eq!(divisions, rows, "{what}: one division a row a thread holds");

        let nk = 3 * bn;
        let (qv, kv, vv) = (values(bm * d, 5), values(nk * d, 7), values(nk * d, 9));
        let scale = 0.45f32;
        let (want, want_lse) = attention_reference(dt, [&qv, &kv, &vv], (bm, bn, d), scale);
        let (out, lse) = (vec![0u8; bm * d * 2], vec![0u8; bm * 4]);
        let (qb, kb, vb) = (encode(dt, &qv), encode(dt, &kv), encode(dt, &vv));
        let args = [
            Arg::Buf(&qb),
            Arg::Buf(&kb),
            Arg::Buf(&vb),
            Arg::Buf(&out),
            Arg::Buf(&lse),
            Arg::I32(nk as i32),
            Arg::F32(scale),
        ];
        let bufs = run_staged(&kern, warps, stages, [1, 1, 1], &args);
        let ones = vec![1f64; bm * d];
        assert_close(&decode(dt, &bufs[3]), &want, &ones, 2e-2, &what);
        let got_lse = decode(DType::F32, &bufs[4]);
        assert_close(
            &got_lse,
            &want_lse,
            &vec![1f64; bm],
            1e-4,
            &format!("{what} lse"),
        );
    }
}

/// Runs a matmul kernel of parameters `a, b, c, m, n, k` (A and B encoded as `dt`, C of
/// `out` elements) and returns C's bytes.
#[allow(clippy::too_many_arguments)]
fn run_matmul(
    kern: &Kernel,
    (warps, stages): (u32, u32),
    grid: [u64; 3],
    dt: DType,
    out: DType,
    a: &[f32],
    b: &[f32],
    (m, n, k): (usize, usize, usize),
) -> Vec<u8> {
    let c = vec![0u8; m * n * out.size_bytes()];
    let mut bufs = run_staged(
        kern,
        warps,
        stages,
        grid,
        &[
            Arg::Buf(&encode(dt, a)),
            Arg::Buf(&encode(dt, b)),
            Arg::Buf(&c),
            Arg::I32(m as i32),
            Arg::I32(n as i32),
            Arg::I32(k as i32),
        ],
    );
    bufs.swap_remove(2)
}

/// Runs the matmul loop of `blocks` at `stages` (1: no pipeline) on `m x k` times `k x n`
/// inputs and compares with a float64 reference.
fn check_pipelined_matmul(
    dt: DType,
    warps: u32,
    stages: u32,
    (bm, bn, bk): (usize, usize, usize),
    (m, n, k): (usize, usize, usize),
) {
    let kern = matmul_loop(dt, bm, bn, bk);
    let av = values(m * k, 23);
    let bv = values(k * n, 29);
    let (want, scale) = matmul_reference(dt, &av, &bv, (m, n, k));
    let grid = [m.div_ceil(bm) as u64, n.div_ceil(bn) as u64, 1];
    let c = run_matmul(
        &kern,
        (warps, stages),
        grid,
        dt,
        DType::F32,
        &av,
        &bv,
        (m, n, k),
    );
    let got = decode(DType::F32, &c);
    assert_close(
        &got,
        &want,
        &scale,
        1e-6,
        &format!("matmul {dt} {bm}x{bn}x{bk} {warps} warps {stages} stages"),
    );
}

#[test]
fn pipelined_matmul_and_attention_match() {
    for stages in [2, 3, 4] {
        for (dt, warps) in [(DType::F16, 4), (DType::BF16, 2)] {
            check_pipelined_matmul(dt, warps, stages, (32, 32, 16), (40, 48, 72));
        }
        check_attention(DType::BF16, 64, 32, 32, 4, stages);
        check_attention(DType::F16, 32, 64, 16, 2, stages);
        check_attention(DType::F16, 16, 16, 32, 4, stages);
    }
    // Head dim 128: K and V slots do not both fit; K is pipelined, V staged in the loop.
    check_attention(DType::BF16, 128, 64, 128, 8, 2);
}

/// A matmul whose store casts the accumulator to f16 / bf16: the cast runs in the mma layout
/// and the narrow tile crosses to the store's layout through padded rows of shared memory, in
/// one round or (128 x 256 f16: 67.5 KB of rows against 48 KB of scratch) two; ragged edges
/// exercise the store's masks.
#[test]
fn narrow_outputs_cross_shared_memory_after_the_cast() {
    let cases = [
        // (input, output, warps, stages, tile, problem, rows of the exchange)
        (
            DType::BF16,
            DType::BF16,
            4,
            3,
            (64, 64, 16),
            (72, 80, 40),
            "rows of 144 bytes, 64 rows a round",
        ),
        (
            DType::F16,
            DType::F16,
            8,
            2,
            (128, 256, 16),
            (136, 264, 32),
            "rows of 528 bytes, 64 rows a round",
        ),
        (
            DType::BF16,
            DType::F16,
            2,
            1,
            (32, 64, 32),
            (40, 56, 64),
            "rows of 144 bytes, 32 rows a round",
        ),
    ];
    for (dt, out_dt, warps, stages, (bm, bn, bk), (m, n, k), plan) in cases {
        let kern = matmul_loop_into(dt, out_dt, bm, bn, bk);
        let options = CompileOptions {
            num_warps: warps,
            num_stages: stages,
            mma: tegula_ptx::MmaChoice::Sync,
            fp_fusion: true,
            tma: false,
        };
        let ptx = compile(&kern, &Target { sm: 80 }, &options).unwrap().ptx;
        assert!(
            ptx.contains(plan),
            "{dt}->{out_dt} {bm}x{bn}: no {plan:?} in the PTX"
        );
        let av = values(m * k, 41 + m as u64);
        let bv = values(k * n, 43 + n as u64);
        let (want, _) = matmul_reference(dt, &av, &bv, (m, n, k));
        let grid = [m.div_ceil(bm) as u64, n.div_ceil(bn) as u64, 1];
        let c = run_matmul(
            &kern,
            (warps, stages),
            grid,
            dt,
            out_dt,
            &av,
            &bv,
            (m, n, k),
        );
        let got = decode(out_dt, &c);
        // One rounding to the output: half an ulp, relative (bf16 8 bits, f16 11).
        let half_ulp = if out_dt == DType::BF16 {
            0.5f64.powi(8)
        } else {
            0.5f64.powi(11)
        };
        let magnitude: Vec<f64> = want.iter().map(|w| w.abs()).collect();
        assert_close(
            &got,
            &want,
            &magnitude,
            half_ulp,
            &format!("{dt}->{out_dt} {bm}x{bn}x{bk}"),
        );
    }
}

/// A persistent matmul (a tile loop around the pipelined k-loop) on fewer programs than
/// tiles, with a narrow output whose store crosses shared memory. With 2 or more stages the
/// nest is pipelined across the tile loop: the next tile's first stages are copied into the
/// slots while this tile's store exchanges rows in the scratch after them, so the simulator's
/// race, bounds and cp.async-wait checks see whether the exchange stays clear of the slots and
/// the barriers separate the last k-step's reads from the next tile's copies. Ragged M, N, K;
/// K shorter than the prologue (fewer k-steps than S - 1); programs that get one tile less.
#[test]
fn persistent_matmul_reuses_the_slots_tile_after_tile() {
    for (dt, out_dt, warps, stages, (bm, bn, bk), (m, n, k), programs) in [
        (
            DType::BF16,
            DType::BF16,
            4,
            3,
            (32, 32, 16),
            (72, 88, 56),
            2,
        ),
        (DType::F16, DType::F32, 2, 2, (32, 64, 32), (40, 200, 72), 3),
        (
            DType::BF16,
            DType::BF16,
            4,
            4,
            (32, 32, 16),
            (72, 88, 24),
            4,
        ),
        (
            DType::F16,
            DType::F16,
            8,
            4,
            (64, 64, 32),
            (136, 200, 104),
            5,
        ),
        (DType::BF16, DType::F32, 4, 1, (32, 32, 16), (72, 72, 40), 4),
    ] {
        let kern = persistent_matmul_into(dt, out_dt, bm, bn, bk);
        let options = CompileOptions {
            num_warps: warps,
            num_stages: stages,
            mma: tegula_ptx::MmaChoice::Sync,
            fp_fusion: true,
            tma: false,
        };
        let ptx = compile(&kern, &Target { sm: 80 }, &options).unwrap().ptx;
        assert_eq!(
            ptx.contains("loop nest pipelined across the outer loop"),
            stages >= 2,
            "{stages} stages: the nest pipelined across the tile loop when the k-loop is"
        );
        let av = values(m * k, 53 + m as u64);
        let bv = values(k * n, 59 + n as u64);
        let (want, scale) = matmul_reference(dt, &av, &bv, (m, n, k));
        let tiles = m.div_ceil(bm) * n.div_ceil(bn);
        assert!(
            tiles > 2 * programs && tiles % programs != 0,
            "{tiles} tiles: each program takes several, some one more"
        );
        let grid = [programs as u64, 1, 1];
        let c = run_matmul(
            &kern,
            (warps, stages),
            grid,
            dt,
            out_dt,
            &av,
            &bv,
            (m, n, k),
        );
        let got = decode(out_dt, &c);
        let tol = match out_dt {
            DType::BF16 => 0.5f64.powi(8),
            DType::F16 => 0.5f64.powi(11),
            _ => 1e-6,
        };
        assert_close(
            &got,
            &want,
            &scale,
            tol,
            &format!("persistent {dt}->{out_dt} {bm}x{bn}x{bk} {warps} warps {stages} stages"),
        );
    }
}

/// One pipelined load read by four dot operands (every role and orientation, see
/// [`shared_operand_loop`]): the slot written once per iteration must serve all of them, with
/// the last block's rows past `n` zero-filled. Stage 1 (no pipeline: the tile goes through
/// registers and is staged per dot) is checked the same way.
#[test]
fn one_pipelined_load_feeds_four_dot_operands() {
    for (dt, (bm, bn, d, e), n, warps) in [
        (DType::BF16, (32, 32, 32, 16), 72, 4),
        (DType::F16, (16, 64, 64, 32), 40, 8),
    ] {
        let kern = shared_operand_loop(dt, bm, bn, d, e);
        let (xv, kv, wv) = (
            values(n * d, 31 + n as u64),
            values(bn * d, 37),
            values(d * e, 41),
        );
        let (xr, kr, wr) = (rounded(dt, &xv), rounded(dt, &kv), rounded(dt, &wv));
        // Rows past n read as zero (only whole blocks of bm rows are covered).
        let blocks = n.div_ceil(bm);
        let x_at = |r: usize, c: usize| if r < n { xr[r * d + c] } else { 0.0 };
        let round = |x: f64| rounded(dt, &[x as f32])[0];
        let (mut a, mut a_scale) = (vec![0f64; bn * d], vec![0f64; bn * d]);
        let (mut g, mut g_scale) = (vec![0f64; d * d], vec![0f64; d * d]);
        let (mut c, mut c_scale) = (vec![0f64; bm * e], vec![0f64; bm * e]);
        for t in 0..blocks {
            let rows: Vec<usize> = (t * bm..(t + 1) * bm).collect();
            for j in 0..bn {
                // s[j][i] = K[j] . X[row i], rounded to dt as the kernel's cast does.
                let s: Vec<f64> = rows
                    .iter()
                    .map(|&r| round((0..d).map(|cc| kr[j * d + cc] * x_at(r, cc)).sum()))
                    .collect();
                for col in 0..d {
                    for (i, &r) in rows.iter().enumerate() {
                        a[j * d + col] += s[i] * x_at(r, col);
                        a_scale[j * d + col] += (s[i] * x_at(r, col)).abs();
                    }
                }
            }
            for p in 0..d {
                for q in 0..d {
                    for &r in &rows {
                        g[p * d + q] += x_at(r, p) * x_at(r, q);
                        g_scale[p * d + q] += (x_at(r, p) * x_at(r, q)).abs();
                    }
                }
            }
            for (i, &r) in rows.iter().enumerate() {
                for col in 0..e {
                    for p in 0..d {
                        c[i * e + col] += x_at(r, p) * wr[p * e + col];
                        c_scale[i * e + col] += (x_at(r, p) * wr[p * e + col]).abs();
                    }
                }
            }
        }
        let (xb, kb, wb) = (encode(dt, &xv), encode(dt, &kv), encode(dt, &wv));
        let (ao, go, co) = (
            vec![0u8; bn * d * 4],
            vec![0u8; d * d * 4],
            vec![0u8; bm * e * 4],
        );
        for stages in [1, 2, 3] {
            let bufs = run_staged(
                &kern,
                warps,
                stages,
                [1, 1, 1],
                &[
                    Arg::Buf(&xb),
                    Arg::Buf(&kb),
                    Arg::Buf(&wb),
                    Arg::Buf(&ao),
                    Arg::Buf(&go),
                    Arg::Buf(&co),
                    Arg::I32(n as i32),
                ],
            );
            let what = |name: &str| format!("{name}: {dt} {bm}x{bn}x{d}x{e}, {stages} stages");
            let tol = 1e-5;
            assert_close(&decode(DType::F32, &bufs[3]), &a, &a_scale, tol, &what("a"));
            assert_close(&decode(DType::F32, &bufs[4]), &g, &g_scale, tol, &what("g"));
            assert_close(&decode(DType::F32, &bufs[5]), &c, &c_scale, tol, &what("c"));
        }
    }
}

/// The backward's nest ([`resident_operand_nest`]): K and V, read by dots of a loop nested in
/// another, stay in shared memory when their fragments would take more than 32 registers a
/// thread together (K as A 16, V as A 16 and K as B 16 at 64 x 64 over 4 warps): one copy of
/// each, written once before the outer loop, K's read both with plain and with `.trans`
/// `ldmatrix`. At 32 x 32 they stay in registers. Both must match float64 for 1 to 3 stages.
/// The accumulator `a`, carried by both loops, keeps the inner dot's mma layout across the
/// outer loop too: it crosses no layout through shared memory at either end of the inner loop.
#[test]
fn operands_of_a_nested_loop_stay_resident() {
    for (dt, (bm, bn, d), warps, resident) in [
        (DType::BF16, (16, 64, 64), 4, true),
        (DType::F16, (32, 64, 64), 8, true),
        (DType::BF16, (16, 32, 32), 4, false),
    ] {
        let (n, groups) = (40, 2);
        let kern = resident_operand_nest(dt, bm, bn, d);
        let (xv, kv, vv) = (
            values(groups * n * d, 43 + bm as u64),
            values(bn * d, 47),
            values(bn * d, 53),
        );
        let (xr, kr, vr) = (rounded(dt, &xv), rounded(dt, &kv), rounded(dt, &vv));
        let round = |x: f64| rounded(dt, &[x as f32])[0];
        let (mut a, mut a_scale) = (vec![0f64; bn * d], vec![0f64; bn * d]);
        let (mut y, mut y_scale) = (vec![0f64; groups * n * d], vec![0f64; groups * n * d]);
        for r in 0..groups * n {
            let x_row = &xr[r * d..(r + 1) * d];
            // p[j] = (K[j] . x + V[j] . x) rounded to dt; rows past n are zero and add nothing.
            let p: Vec<f64> = (0..bn)
                .map(|j| {
                    let kx: f64 = (0..d).map(|c| kr[j * d + c] * x_row[c]).sum();
                    let vx: f64 = (0..d).map(|c| vr[j * d + c] * x_row[c]).sum();
                    round(kx + vx)
                })
                .collect();
            for j in 0..bn {
                for c in 0..d {
                    a[j * d + c] += p[j] * x_row[c];
                    a_scale[j * d + c] += (p[j] * x_row[c]).abs();
                    y[r * d + c] += p[j] * kr[j * d + c];
                    y_scale[r * d + c] += (p[j] * kr[j * d + c]).abs();
                }
            }
        }
        let (xb, kb, vb) = (encode(dt, &xv), encode(dt, &kv), encode(dt, &vv));
        let (ao, yo) = (vec![0u8; bn * d * 4], vec![0u8; groups * n * d * 4]);
        for stages in [1, 2, 3] {
            let what = |name: &str| format!("{name}: {dt} {bm}x{bn}x{d} {warps}w {stages}s");
            let options = CompileOptions {
                num_warps: warps,
                num_stages: stages,
                mma: tegula_ptx::MmaChoice::Sync,
                fp_fusion: true,
                tma: false,
            };
            let ptx = compile(&kern, &Target { sm: 80 }, &options).unwrap().ptx;
            let carried = format!("convert f32[{bn}, {d}]");
            assert!(!ptx.contains(&carried), "{}", what("accumulator layout"));
            let comment = "loop-invariant dot operand: resident in shared memory";
            let written = ptx.find(comment);
            assert_eq!(written.is_some(), resident, "{}", what("resident"));
            if let Some(at) = written {
                // Written once, before the outer loop: K and V, one copy each (16-byte stores of
                // `bn x d` 2-byte elements over the block's threads; K's B reads share A's copy).
                assert_eq!(ptx.matches(comment).count(), 1, "{}", what("one write"));
                let outer_loop = ptx.find("$L_for_").unwrap();
                assert!(at < outer_loop, "{}", what("before"));
                let stores = ptx[at..outer_loop].matches("st.shared.v4.b32").count();
                let per_copy = bn * d * 2 / (16 * 32 * warps as usize);
                assert_eq!(stores, 2 * per_copy, "{}", what("copies"));
            }
            let bufs = run_staged(
                &kern,
                warps,
                stages,
                [1, 1, 1],
                &[
                    Arg::Buf(&xb),
                    Arg::Buf(&kb),
                    Arg::Buf(&vb),
                    Arg::Buf(&ao),
                    Arg::Buf(&yo),
                    Arg::I32(n as i32),
                    Arg::I32(groups as i32),
                ],
            );
            let tol = 1e-5;
            assert_close(&decode(DType::F32, &bufs[3]), &a, &a_scale, tol, &what("a"));
            assert_close(&decode(DType::F32, &bufs[4]), &y, &y_scale, tol, &what("y"));
        }
    }
}

/// With two or more k-steps a tile, the matmul loop loads the next tile's first fragments
/// before the last k-step's mmas (`BoundaryFragments` in pipeline.rs): the wait and barrier
/// leave the top of the loop. The simulator checks that no `cp.async` overwrites bytes another
/// thread reads since the last barrier, and that no read precedes its copy's wait; K is ragged
/// (the last tile is part zeros) and the tile counts cover 1 to 4 iterations.
#[test]
fn matmul_with_fragments_across_the_tile_boundary_matches() {
    for (bk, k) in [(32, 72), (64, 200), (32, 24)] {
        for stages in [2, 3, 4] {
            check_pipelined_matmul(DType::BF16, 4, stages, (32, 32, bk), (40, 48, k));
        }
    }
    check_pipelined_matmul(DType::F16, 8, 3, (64, 32, 64), (72, 40, 136));
    let ptx = ptx_of(&matmul_loop(DType::BF16, 32, 32, 64), 80, 4, 3);
    let top = ptx.find("$L_for").expect("a loop");
    let (before, body) = ptx.split_at(top);
    // (the loop label, not the exit branch right after it)
    let body = &body[..body.find("\n$L_endfor").expect("the loop's end")];
    // One wait and barrier before the loop (after the first slots' copies), one in the body,
    // with the next tile's ldmatrix after it and mmas after those.
    assert_eq!(before.matches("cp.async.wait_group 1;").count(), 1);
    assert_eq!(body.matches("cp.async.wait_group 1;").count(), 1);
    let wait = body.find("cp.async.wait_group").unwrap();
    assert!(body[..wait].contains("mma.sync"), "mmas before the wait");
    let after = &body[wait..];
    let ld = after.find("ldmatrix").expect("fragments after the barrier");
    assert!(after[..ld].contains("bar.sync"));
    assert!(
        after[ld..].contains("mma.sync"),
        "the last k-step's mmas follow"
    );
    // Attention (two dots in the loop) keeps the wait at the top of the loop.
    let fa = ptx_of(&flash_attention(DType::BF16, 64, 32, 32), 80, 4, 3);
    let body = &fa[fa.find("$L_for").unwrap()..];
    let first_wait = body.find("cp.async.wait_group").unwrap();
    assert!(!body[..first_wait].contains("mma.sync"));
}

/// Loop invariants are computed in the kernel prologue only when first asked for inside a loop
/// or branch; asked for in straight-line code, they are computed where they are asked for.
/// This kernel mixes the two: `offs` and `mask` are first used before the loop (straight-line
/// code), then by invariants inside the loop and the branch (which the prologue must compute
/// again: the prologue precedes the body), and `offs + n` is first used in the loop and then
/// again after the branch. Blocks past the first and a nonzero `n` make any register read
/// before it is written show in the results.
#[test]
fn invariants_first_used_before_loops_and_branches_match() {
    let block = 64usize;
    let kern = trace("invariants_around_loops", |p| {
        let (x, out) = (p.ptr("x", DType::F32), p.ptr("out", DType::F32));
        let n = p.scalar("n", DType::I32);
        let iters = p.scalar("iters", DType::I32);
        let offs = program_id(0) * block + arange(0, block as i64);
        let mask = offs.lt(n);
        let first = load(x + offs, mask, 0.0);
        let acc = for_range(0, iters, 1, first, |_, acc| {
            acc + load(x + (offs + n), mask, 0.0)
        });
        if_then(iters.gt(2), || store(out + (offs + n), acc, mask));
        store(out + offs, acc, mask);
        store(out + ((offs + n) + n), acc + acc, mask);
    })
    .unwrap();
    let ptx = ptx_of(&kern, 80, 2, 1);
    // The two straight-line stores after the loop compute their addresses there (the old
    // lowering put every invariant in the prologue); the ones the loop and branch use stay
    // before the loop.
    let (top, end) = (
        ptx.find("$L_for").expect("a loop"),
        ptx.find("$L_endfor").expect("a loop"),
    );
    let offsets = |s: &str| s.matches("mul.wide.s32").count();
    assert_eq!(offsets(&ptx[end..]), 2, "{ptx}");
    assert_eq!(offsets(&ptx[..top]), 3, "{ptx}");
    let n = 150usize;
    let xs = values(2 * n, 31);
    let init = values(3 * n, 37);
    for iters in [3, 1] {
        let bufs = run(
            &kern,
            2,
            [n.div_ceil(block) as u64, 1, 1],
            &[
                Arg::Buf(&encode(DType::F32, &xs)),
                Arg::Buf(&encode(DType::F32, &init)),
                Arg::I32(n as i32),
                Arg::I32(iters),
            ],
        );
        let got = decode(DType::F32, &bufs[1]);
        let mut want: Vec<f64> = init.iter().map(|&v| v as f64).collect();
        for i in 0..n {
            let acc = (0..iters).fold(xs[i], |a, _| a + xs[n + i]) as f64;
            want[i] = acc;
            if iters > 2 {
                want[n + i] = acc;
            }
            want[2 * n + i] = 2.0 * acc;
        }
        assert_close(
            &got,
            &want,
            &vec![1.0; 3 * n],
            0.0,
            &format!("{iters} iterations"),
        );
    }
}

/// Whether the loop of a compiled matmul waits for its next slot after some of its mmas
/// (fragments across the tile boundary) rather than at its top.
fn waits_after_mmas(bm: usize, bn: usize, bk: usize, warps: u32, stages: u32) -> bool {
    let ptx = ptx_of(&matmul_loop(DType::BF16, bm, bn, bk), 90, warps, stages);
    let body = &ptx[ptx.find("$L_for").expect("a loop")..];
    let wait = body
        .find("cp.async.wait_group")
        .expect("a wait in the loop");
    body[..wait].contains("mma.sync")
}

/// The fragments cross the tile boundary when the loop's estimated registers fit (see
/// `BOUNDARY_MAX_REGISTERS` in pipeline.rs): 128 accumulators a thread at 256x128x64 and 8
/// warps (estimated 236), not at 256x64x64 and 4 warps (244; ptxas spills there).
#[test]
fn fragments_cross_the_boundary_when_the_registers_fit() {
    assert!(waits_after_mmas(128, 128, 64, 8, 3));
    assert!(waits_after_mmas(256, 128, 64, 8, 4));
    assert!(waits_after_mmas(128, 128, 32, 4, 4));
    assert!(!waits_after_mmas(256, 64, 64, 4, 3));
}

/// Split-K `C += A B` with the accumulator added by atomics, `bm x bn` tiles over a ragged
/// `m`: with `n` a constant (`const_n`) every `red` of a thread addresses one base register
/// plus an immediate (`address_deltas` in `emit/memory.rs`); with `n` a runtime parameter
/// each element keeps its own address. Both must add every element once, masked rows none.
fn split_k_atomic_matmul(
    bm: usize,
    bn: usize,
    bk: usize,
    k: usize,
    n: usize,
    const_n: bool,
) -> Kernel {
    trace("split_k_atomic", |p| {
        let (a, b, c) = (
            p.ptr("a", DType::BF16),
            p.ptr("b", DType::BF16),
            p.ptr("c", DType::F32),
        );
        let m = p.scalar("m", DType::I32);
        let n_arg = p.scalar("n", DType::I32);
        let offs_m = program_id(0) * bm + arange(0, bm as i64);
        let offs_n = program_id(1) * bn + arange(0, bn as i64);
        let offs_k = program_id(2) * bk + arange(0, bk as i64);
        let rows = offs_m.col().lt(m);
        let at = load(a + offs_m.col() * k + offs_k.row(), rows, 0.0);
        let bt = load_unmasked(b + offs_k.col() * n + offs_n.row());
        let acc = dot_with(at, bt, None, InputPrecision::Tf32);
        let c_rows = if const_n {
            offs_m.col() * n
        } else {
            offs_m.col() * n_arg
        };
        let _ = atomic_add_relaxed(c + c_rows + offs_n.row(), acc, Some(rows));
    })
    .map(aligned)
    .unwrap()
}

#[test]
fn atomic_adds_of_an_accumulator_address_base_plus_immediates() {
    // m ragged (rows 40..64 of the second row block masked off: C has 40 rows, so a misplaced
    // add is out of bounds), two column blocks, k split over two programs along z that add
    // into the same C.
    let (m, n, bm, bn, bk) = (40usize, 64usize, 32usize, 32usize, 16usize);
    let splits = 2;
    let k = bk * splits;
    for sm in [80, 90] {
        for const_n in [true, false] {
            let kern = split_k_atomic_matmul(bm, bn, bk, k, n, const_n);
            let ptx = ptx_of(&kern, sm, 4, 1);
            let folded = ptx.lines().any(|l| l.contains("red.") && l.contains("+"));
            assert_eq!(folded, const_n, "sm {sm} const_n {const_n}:\n{ptx}");
            // A is [2 bm][k] (rows past m exist but are masked), B [k][n], C [m][n].
            let av = values(2 * bm * k, 3);
            let bv = values(k * n, 5);
            let c0 = values(m * n, 9);
            let (ar, br) = (rounded(DType::BF16, &av), rounded(DType::BF16, &bv));
            let mut want: Vec<f64> = c0.iter().map(|&x| x as f64).collect();
            let mut scale = vec![1f64; m * n];
            for i in 0..m {
                for j in 0..n {
                    for kk in 0..k {
                        let x = ar[i * k + kk] * br[kk * n + j];
                        want[i * n + j] += x;
                        scale[i * n + j] += x.abs();
                    }
                }
            }
            let bufs = run_on(
                sm,
                &kern,
                4,
                1,
                [2, (n / bn) as u64, splits as u64],
                &[
                    Arg::Buf(&encode(DType::BF16, &av)),
                    Arg::Buf(&encode(DType::BF16, &bv)),
                    Arg::Buf(&encode(DType::F32, &c0)),
                    Arg::I32(m as i32),
                    Arg::I32(n as i32),
                ],
            );
            let got = decode(DType::F32, &bufs[2]);
            assert_close(
                &got,
                &want,
                &scale,
                1e-5,
                &format!("sm {sm} const_n {const_n}"),
            );
        }
    }
}

/// `(A B - r[i]) * s[j]` over a ragged `m x n`: the row vector `r` and the column vector `s`
/// are rank-1 loads whose only uses broadcast them into the dot's accumulator, so they load
/// straight into the accumulator's row and column slices (each thread's elements from one base
/// register plus immediates, `emit/mod.rs`); masked rows and columns take the `other` values.
fn dot_minus_row_times_col(bm: usize, bn: usize, k: usize) -> Kernel {
    trace("rank1_into_accumulator", |p| {
        let (a, b) = (p.ptr("a", DType::BF16), p.ptr("b", DType::BF16));
        let (rv, sv, c) = (
            p.ptr("r", DType::F32),
            p.ptr("s", DType::F32),
            p.ptr("c", DType::F32),
        );
        let (m, n) = (p.scalar("m", DType::I32), p.scalar("n", DType::I32));
        let offs_m = program_id(0) * bm + arange(0, bm as i64);
        let offs_n = program_id(1) * bn + arange(0, bn as i64);
        let ks = arange(0, k as i64);
        let (rows, cols) = (offs_m.lt(m), offs_n.lt(n));
        let at = load(a + offs_m.col() * k + ks.row(), rows.col(), 0.0);
        let bt = load(b + ks.col() * n + offs_n.row(), cols.row(), 0.0);
        let acc = dot_with(at, bt, None, InputPrecision::Tf32);
        let r = load(rv + offs_m, rows, 2.0);
        let s = load(sv + offs_n, cols, 3.0);
        let out = (acc - r.col()) * s.row();
        store(
            c + offs_m.col() * n + offs_n.row(),
            out,
            rows.col() & cols.row(),
        );
    })
    .map(aligned)
    .unwrap()
}

#[test]
fn rank1_loads_broadcast_into_an_accumulator_match() {
    // Two row blocks and two column blocks over m = 45, n = 40: the second ones are ragged.
    let (m, n, k, bm, bn) = (45usize, 40usize, 32usize, 32usize, 32usize);
    let kern = dot_minus_row_times_col(bm, bn, k);
    let (av, bv) = (values(m * k, 11), values(k * n, 13));
    let (rv, sv) = (values(m, 17), values(n, 19));
    let (ar, br) = (rounded(DType::BF16, &av), rounded(DType::BF16, &bv));
    let (mut want, mut scale) = (vec![0f64; m * n], vec![0f64; m * n]);
    for i in 0..m {
        for j in 0..n {
            let (mut d, mut mag) = (0f64, rv[i].abs() as f64);
            for kk in 0..k {
                d += ar[i * k + kk] * br[kk * n + j];
                mag += (ar[i * k + kk] * br[kk * n + j]).abs();
            }
            want[i * n + j] = (d - rv[i] as f64) * sv[j] as f64;
            scale[i * n + j] = mag * (sv[j] as f64).abs();
        }
    }
    for warps in [4, 8] {
        // Poisoned: every in-bounds element must be written.
        let out = encode(DType::F32, &vec![f32::NAN; m * n]);
        let bufs = run(
            &kern,
            warps,
            [2, 2, 1],
            &[
                Arg::Buf(&encode(DType::BF16, &av)),
                Arg::Buf(&encode(DType::BF16, &bv)),
                Arg::Buf(&encode(DType::F32, &rv)),
                Arg::Buf(&encode(DType::F32, &sv)),
                Arg::Buf(&out),
                Arg::I32(m as i32),
                Arg::I32(n as i32),
            ],
        );
        let got = decode(DType::F32, &bufs[4]);
        assert_close(&got, &want, &scale, 1e-5, &format!("{warps} warps"));
    }
}

/// The lines of the first loop's body in `ptx` (from its label to its end label).
fn first_loop_body(ptx: &str) -> Vec<&str> {
    ptx.lines()
        .skip_while(|l| !l.starts_with("$L_for_"))
        .take_while(|l| !l.starts_with("$L_endfor_"))
        .collect()
}

/// Row sums of `x` (`[rows, n]`, f32) folded over its blocks of `cols` columns, from `init`:
/// `acc = acc * b + sum(x[:, j..j + cols], 1)` at each block's first column `j`, where row
/// `r`'s `b` is `1 - (j + r) * decay`,
/// stored to `out`. `t = t + acc` (the `acc` before the update) runs beside it and goes to
/// `t`; with `running`, `acc` is read twice in the loop, else `t` stays zero. `fused` writes
/// the update as one `fma(acc, b, sum)`.
fn decayed_row_sums(rows: usize, cols: usize, running: bool, fused: bool) -> Kernel {
    trace("decayed_row_sums", |p| {
        let (x, init) = (p.ptr("x", DType::F32), p.ptr("init", DType::F32));
        let (out, out_t) = (p.ptr("out", DType::F32), p.ptr("t", DType::F32));
        let n = p.scalar("n", DType::I32);
        let decay = p.scalar("decay", DType::F32);
        let offs_r = arange(0, rows as i64);
        let offs_c = arange(0, cols as i64);
        let start = (load_unmasked(init + offs_r), zeros::<f32>([rows]));
        let (acc, t) = for_range(0, n, cols, start, |j, (acc, t)| {
            let xt = load_unmasked(x + offs_r.col() * n + (j + offs_c).row());
            // One factor a row and step, computed where it is used (no conversion).
            let bt = 1.0 - (j + offs_r).to::<f32>() * decay;
            let t = if running { t + acc } else { t };
            // The fma form where the caller asks for it (the same rule applies).
            let next = if fused {
                fma(acc, bt, sum(xt, 1))
            } else {
                acc * bt + sum(xt, 1)
            };
            (next, t)
        });
        store_unmasked(out + offs_r, acc);
        store_unmasked(out_t + offs_r, t);
    })
    .map(aligned)
    .unwrap()
}

/// A loop-carried `acc * b + sum(x, 1)` keeps per-thread partial sums: no shuffle and no
/// round through shared memory inside the loop, one after it; with `acc` also read elsewhere
/// in the loop it is reduced at every step as before. Both against a float64 reference, from
/// a nonzero initial value, over layouts whose sums cross lanes only and lanes and warps.
#[test]
fn loop_carried_row_sums_reduce_across_threads_after_the_loop() {
    // (rows, cols, warps, whether the sum crosses warps): x's load takes 4 columns a thread;
    // [2, 32] over 4 warps holds each element in 2 lanes of a warp and in every warp.
    for (rows, cols, warps, across_warps) in [
        (16, 64, 4, false),
        (4, 256, 4, true),
        (8, 32, 2, false),
        (2, 32, 4, false),
    ] {
        for running in [false, true] {
            // The fma form on one layout (its rounding differs by one product's).
            let fused = rows == 8;
            let what = format!("{rows}x{cols}, {warps} warps, running {running}, fma {fused}");
            let kern = decayed_row_sums(rows, cols, running, fused);
            let options = CompileOptions {
                num_warps: warps,
                num_stages: 1,
                mma: tegula_ptx::MmaChoice::Sync,
                fp_fusion: true,
                tma: false,
            };
            let ptx = compile(&kern, &Target { sm: 90 }, &options).unwrap().ptx;
            let body = first_loop_body(&ptx);
            let shuffles = body.iter().filter(|l| l.contains("shfl.sync")).count();
            let after: Vec<&str> = ptx
                .lines()
                .skip_while(|l| !l.starts_with("$L_endfor_"))
                .collect();
            let after_loop = after.iter().filter(|l| l.contains("shfl.sync")).count();
            if running {
                assert!(shuffles > 0, "{what}: acc is read twice, reduced each step");
            } else {
                assert_eq!(shuffles, 0, "{what}: no shuffle in the loop");
                assert!(after_loop > 0, "{what}: the shuffles after the loop");
                // The sum's round across warps: barriers before the store's crossing.
                let before_store = after
                    .iter()
                    .take_while(|l| !l.contains("// convert") && !l.contains("st.global"));
                assert_eq!(
                    before_store.filter(|l| l.contains("bar.sync")).count(),
                    if across_warps { 2 } else { 0 },
                    "{what}: the round across warps, after the loop"
                );
                assert!(
                    !body.iter().any(|l| l.contains("bar.sync")),
                    "{what}: no round across warps in the loop"
                );
            }

            let n = 3 * cols;
            let xv = values(rows * n, 21 + rows as u64);
            let decay = 1.0f32 / 1024.0;
            let iv = values(rows, 29);
            let (mut want, mut want_t) = (
                iv.iter().map(|&v| v as f64).collect::<Vec<f64>>(),
                vec![0f64; rows],
            );
            let mut scale = vec![1f64; rows];
            for j in (0..n).step_by(cols) {
                for r in 0..rows {
                    if running {
                        want_t[r] += want[r];
                    }
                    let s: f64 = (0..cols).map(|c| xv[r * n + j + c] as f64).sum();
                    let b = 1.0 - (j + r) as f32 * decay;
                    want[r] = want[r] * b as f64 + s;
                    scale[r] = scale[r].max(want[r].abs());
                }
            }
            let bufs = run_on(
                90,
                &kern,
                warps,
                1,
                [1, 1, 1],
                &[
                    Arg::Buf(&encode(DType::F32, &xv)),
                    Arg::Buf(&encode(DType::F32, &iv)),
                    Arg::Buf(&vec![0u8; rows * 4]),
                    Arg::Buf(&vec![0u8; rows * 4]),
                    Arg::I32(n as i32),
                    Arg::F32(decay),
                ],
            );
            assert_close(&decode(DType::F32, &bufs[2]), &want, &scale, 1e-5, &what);
            assert_close(&decode(DType::F32, &bufs[3]), &want_t, &scale, 1e-5, &what);
        }
    }
}

/// The forward's row sum `l * alpha + sum(p, 1)` reduces across the quad's lanes after the
/// loop when the loop carries at most 96 elements a thread: at 128 rows of D=64 over 4 warps
/// (64 accumulators a thread) the loop keeps the row maximum's 2 shuffles a row (4 rows a
/// thread) and the sum's 8 come after it; at D=128 (128 accumulators a thread, where the
/// partials spilled on the H200) the sum stays in the loop. The second loop of the two-loop
/// kernel starts from the first one's reduced sums (in the first lane of each quad, or warp
/// along the keys); 16 rows over 4 warps put 2 warps along the keys and replicate the other 2.
#[test]
fn attention_row_sums_are_partial_inside_the_loop() {
    for (d, in_loop_want, after_want) in [(64, 8, 8), (128, 16, 0)] {
        let kern = flash_attention(DType::BF16, 128, 64, d);
        let options = CompileOptions {
            num_warps: 4,
            num_stages: 2,
            mma: tegula_ptx::MmaChoice::Sync,
            fp_fusion: true,
            tma: false,
        };
        let ptx = compile(&kern, &Target { sm: 90 }, &options).unwrap().ptx;
        let in_loop = first_loop_body(&ptx)
            .iter()
            .filter(|l| l.contains("shfl.sync"))
            .count();
        assert_eq!(in_loop, in_loop_want, "D={d}: shuffles in the loop");
        let after = ptx
            .lines()
            .skip_while(|l| !l.starts_with("$L_endfor_"))
            .filter(|l| l.contains("shfl.sync"))
            .count();
        assert_eq!(
            after, after_want,
            "D={d}: the row sum's shuffles after the loop"
        );
    }
    for (dt, bm, bn, d, warps, stages) in [
        (DType::F16, 16, 16, 32, 4, 1),
        (DType::BF16, 32, 32, 64, 2, 2),
    ] {
        check_attention_kernel(
            &flash_attention_two_loops(dt, bm, bn, d),
            Some(bn as i32),
            80,
            (dt, bm, bn, d, warps, stages),
        );
    }
}

/// bf16 bit patterns of every kind, then pseudo-random ones: signed zeros, subnormals, the
/// extremes, infinities and NaNs with payloads and either sign.
fn bf16_patterns(n: usize, seed: u64) -> Vec<u16> {
    const SPECIAL: [u16; 14] = [
        0x0000, 0x8000, 0x0001, 0x807f, 0x0040, 0x0080, 0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x7fc0,
        0xffc1, 0x7f81, 0x3f80,
    ];
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            // Specials spread over both halves of the packed words and over the threads.
            if i % 5 == 0 {
                SPECIAL[(s >> 20) as usize % SPECIAL.len()]
            } else {
                (s >> 32) as u16
            }
        })
        .collect()
}

/// Loaded bf16 pairs are widened from their packed word (shift / mask, `widen`), not split and
/// converted one by one: the f32 of a cast has the exact bits of the bf16 (NaN payloads too),
/// a bf16 product computed through f32 is the correctly rounded one, and the PTX keeps neither
/// a `cvt.f32.bf16` nor the split of the words.
#[test]
fn bf16_pairs_widen_from_their_packed_word() {
    // Rows of 4 elements, one a thread: the bf16 loads (8 bytes) and the f32 store (16 bytes)
    // take the same layout, so the cast reads the loaded registers (no conversion between).
    let rows = 128usize;
    let kern = trace("bf16_widen", |p| {
        let (x, y) = (p.ptr("x", DType::BF16), p.ptr("y", DType::BF16));
        let (wide, prod) = (p.ptr("wide", DType::F32), p.ptr("prod", DType::BF16));
        let n = p.scalar("n", DType::I32);
        let offs_r = program_id(0) * rows + arange(0, rows as i64);
        let offs = offs_r.col() * 4 + arange(0, 4).row();
        let mask = offs_r.col().lt(n);
        let xv = load(x + offs, mask, 0.0);
        let yv = load(y + offs, mask, 0.0);
        store(wide + offs, xv.to::<f32>(), mask);
        store(prod + offs, xv * yv, mask);
    })
    .map(aligned)
    .unwrap();
    let ptx = ptx_of(&kern, 90, 4, 1);
    assert!(ptx.contains("ld.global.v2.b32"), "{ptx}");
    assert!(!ptx.contains("cvt.f32.bf16"), "{ptx}");
    assert!(!ptx.contains("mov.b32 {"), "the split stays dead: {ptx}");
    assert!(ptx.contains("shl.b32") && ptx.contains("and.b32"), "{ptx}");
    // Not a multiple of the block (the last program is masked).
    let n_rows = 149;
    let n = 4 * n_rows;
    let xs = bf16_patterns(n, 3);
    let ys = bf16_patterns(n, 11);
    let bytes = |v: &[u16]| v.iter().flat_map(|b| b.to_le_bytes()).collect::<Vec<u8>>();
    let bufs = run_on(
        90,
        &kern,
        4,
        1,
        [n_rows.div_ceil(rows) as u64, 1, 1],
        &[
            Arg::Buf(&bytes(&xs)),
            Arg::Buf(&bytes(&ys)),
            Arg::Buf(&vec![0u8; 4 * n]),
            Arg::Buf(&vec![0u8; 2 * n]),
            Arg::I32(n_rows as i32),
        ],
    );
    for i in 0..n {
        let c = &bufs[2][4 * i..4 * i + 4];
        let wide = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        assert_eq!(wide, (xs[i] as u32) << 16, "element {i}: {:#06x}", xs[i]);
        let got = bf16::from_le_bytes([bufs[3][2 * i], bufs[3][2 * i + 1]]);
        let (a, b) = (bf16::from_bits(xs[i]), bf16::from_bits(ys[i]));
        let want = bf16::from_f64(a.to_f64() * b.to_f64());
        assert!(
            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
            "element {i}: {a} * {b}: got {got}, want {want}"
        );
    }
}

/// A looping row reduction over bf16 (the norms' pattern): masked 16-byte loads at the row's
/// tail, each pair widened from its word inside the loop, the row sums of squares against a
/// float64 reference.
#[test]
fn looping_bf16_row_sums_widen_in_the_loop() {
    let (rows, cols) = (4usize, 256usize);
    let kern = trace("bf16_row_squares", |p| {
        let (x, out) = (p.ptr("x", DType::BF16), p.ptr("out", DType::F32));
        let n = p.scalar("n", DType::I32);
        let offs_r = program_id(0) * rows + arange(0, rows as i64);
        let offs_c = arange(0, cols as i64);
        let acc = for_range(0, n, cols, zeros::<f32>([rows]), |j, acc| {
            let c = j + offs_c;
            let xt = load(x + offs_r.col() * n + c.row(), c.row().lt(n), 0.0).to::<f32>();
            acc + sum(xt * xt, 1)
        });
        store_unmasked(out + offs_r, acc);
    })
    .map(aligned)
    .unwrap();
    let options = CompileOptions {
        num_warps: 4,
        num_stages: 1,
        mma: tegula_ptx::MmaChoice::Sync,
        fp_fusion: true,
        tma: false,
    };
    let ptx = compile(&kern, &Target { sm: 90 }, &options).unwrap().ptx;
    let body = first_loop_body(&ptx);
    assert!(body.iter().any(|l| l.contains("ld.global.v4.b32")), "{ptx}");
    assert!(
        !body
            .iter()
            .any(|l| l.contains("cvt.f32.bf16") || l.contains("mov.b32 {")),
        "{ptx}"
    );
    let high_halves = body.iter().filter(|l| l.contains("and.b32 %f")).count();
    // One a pair of the thread's elements (4 warps, no replication).
    assert_eq!(high_halves, rows * cols / (32 * 4) / 2, "{ptx}");
    // Three blocks and a masked tail of 40 columns (a multiple of 8: 16-byte loads).
    let n = 3 * cols + 40;
    let grid = 3;
    let xs = values(grid * rows * n, 5);
    let xr = rounded(DType::BF16, &xs);
    let bufs = run_on(
        90,
        &kern,
        4,
        1,
        [grid as u64, 1, 1],
        &[
            Arg::Buf(&encode(DType::BF16, &xs)),
            Arg::Buf(&vec![0u8; 4 * grid * rows]),
            Arg::I32(n as i32),
        ],
    );
    let want: Vec<f64> = xr
        .chunks(n)
        .map(|r| r.iter().map(|v| v * v).sum())
        .collect();
    let got = decode(DType::F32, &bufs[1]);
    assert_close(&got, &want, &want, 1e-6, "row sums of squares");
}

/// The attention backward's step in small: over row blocks of `x` (`n` rows, the last block
/// partial when `ragged`), `s^T = K x^T` (`[bn, bm]`), `p = (s^T - r[rows]) * c[rows]` and
/// `a += p x`. `r` and `c` are rank-1 loads whose uses broadcast into the dot's accumulator, so
/// the pipeliner stages them beside `x` (`RowLoad` in pipeline.rs) unless a masked element
/// must read a nonzero `c_other` (a copy can only zero-fill): then `c` stays a global load.
fn staged_rows_loop(
    dt: DType,
    (bm, bn, d): (usize, usize, usize),
    ragged: bool,
    c_other: f32,
) -> Kernel {
    trace("staged_rows_loop", |p| {
        let (x, kp) = (p.ptr("x", dt), p.ptr("k", dt));
        let (rp, cp, ap) = (
            p.ptr("r", DType::F32),
            p.ptr("c", DType::F32),
            p.ptr("a", DType::F32),
        );
        let n = p.scalar("n", DType::I32);
        let offs_n = arange(0, bn as i64);
        let offs_d = arange(0, d as i64);
        let offs_m = arange(0, bm as i64);
        let kv = load_unmasked(kp + offs_n.col() * d + offs_d.row());
        let a = for_range(0, n, bm, zeros::<f32>([bn, d]), |start, a| {
            let rows = start + offs_m;
            let (xt, rv, cv) = if ragged {
                let in_rows = rows.lt(n);
                (
                    load(x + rows.col() * d + offs_d.row(), in_rows.col(), 0.0),
                    load(rp + rows, in_rows, 0.0),
                    load(cp + rows, in_rows, c_other),
                )
            } else {
                (
                    load_unmasked(x + rows.col() * d + offs_d.row()),
                    load_unmasked(rp + rows),
                    load_unmasked(cp + rows),
                )
            };
            let st = dot(kv, xt.trans());
            let pt = ((st - rv.row()) * cv.row()).cast(dt);
            dot_acc(pt, xt, a)
        });
        store_unmasked(ap + offs_n.col() * d + offs_d.row(), a);
    })
    .map(aligned)
    .unwrap()
}

/// Rank-1 loads staged by the pipeliner (`staged_rows_loop`): copied with `cp.async` into the
/// slots beside the tile, read back with `ld.shared.v2` straight into the accumulator's
/// slice, and no global load left in the loop; whole blocks unmasked and a ragged last block
/// (zero-filled copies), 2 and 3 stages, against float64. The simulator checks that no read
/// precedes its copy's wait and that no copy overwrites bytes another thread reads since the
/// last barrier (the slot's reuse).
#[test]
fn rank1_loads_staged_beside_the_tiles_match() {
    let dt = DType::BF16;
    let (bm, bn, d, warps) = (32usize, 64usize, 32usize, 4u32);
    for (n, ragged, c_other, staged) in [
        (96usize, false, 0.0f32, 2usize),
        (72, true, 0.0, 2),
        (72, true, 2.0, 1),
    ] {
        let kern = staged_rows_loop(dt, (bm, bn, d), ragged, c_other);
        let (xv, kv) = (values(n * d, 61 + n as u64), values(bn * d, 67));
        let (rv, cv) = (values(n, 71), values(n, 73));
        let (xr, kr) = (rounded(dt, &xv), rounded(dt, &kv));
        let round = |x: f64| rounded(dt, &[x as f32])[0];
        let (mut a, mut a_scale) = (vec![0f64; bn * d], vec![0f64; bn * d]);
        for i in 0..n {
            let x_row = &xr[i * d..(i + 1) * d];
            for j in 0..bn {
                let s: f64 = (0..d).map(|c| kr[j * d + c] * x_row[c]).sum();
                let p = round((s - rv[i] as f64) * cv[i] as f64);
                for c in 0..d {
                    a[j * d + c] += p * x_row[c];
                    a_scale[j * d + c] += (p * x_row[c]).abs();
                }
            }
        }
        for stages in [2, 3] {
            let what = format!("n {n}, ragged {ragged}, c_other {c_other}, {stages} stages");
            let options = CompileOptions {
                num_warps: warps,
                num_stages: stages,
                mma: tegula_ptx::MmaChoice::Sync,
                fp_fusion: true,
                tma: false,
            };
            let ptx = compile(&kern, &Target { sm: 80 }, &options).unwrap().ptx;
            assert!(
                ptx.contains(&format!("and {staged} rank-1 loads, {stages} stages")),
                "{what}"
            );
            let body = first_loop_body(&ptx);
            let count = |what: &str| body.iter().filter(|l| l.contains(what)).count();
            // Each thread reads its `bm / 4` columns of the slice as pairs, per staged vector.
            assert_eq!(count("ld.shared.v2.f32"), staged * bm / 4 / 2, "{what}");
            assert_eq!(count("ld.global"), (2 - staged) * bm / 4 / 2, "{what}");
            let bufs = run_staged(
                &kern,
                warps,
                stages,
                [1, 1, 1],
                &[
                    Arg::Buf(&encode(dt, &xv)),
                    Arg::Buf(&encode(dt, &kv)),
                    Arg::Buf(&encode(DType::F32, &rv)),
                    Arg::Buf(&encode(DType::F32, &cv)),
                    Arg::Buf(&encode(DType::F32, &vec![f32::NAN; bn * d])),
                    Arg::I32(n as i32),
                ],
            );
            assert_close(&decode(DType::F32, &bufs[4]), &a, &a_scale, 1e-5, &what);
        }
    }
}
