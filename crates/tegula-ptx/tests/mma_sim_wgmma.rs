//! Hopper's `wgmma` on the PTX simulator (`tegula-ptx-sim`, which executes `wgmma.mma_async`
//! from the PTX ISA, deferred to its `wait_group`, refusing touches of pending registers and
//! shared bytes): the matmul's pipelined dots, A from registers, persistent tiles, the
//! attention forward and a backward step with the wgmma, and the mistakes the simulator
//! must catch. The other tensor-core kernels are in `mma_sim.rs`.

mod mma_kernels;
mod sim;

use half::bf16;
use mma_kernels::*;
use sim::*;
use tegula_ir::prelude::*;
use tegula_ir::Kernel;

/// The matmul of `blocks` (compiled with `wgmma` asked for), C stored as `out`.
fn wgmma_matmul(dt: DType, out: DType, (bm, bn, bk): (usize, usize, usize)) -> Kernel {
    matmul_loop_into(dt, out, bm, bn, bk)
}

/// Runs `ptx`, the PTX of [`wgmma_matmul`], on `m x k` times `k x n` inputs and returns C (as
/// f32) with the float64 reference and scale, or the simulator's complaint.
#[allow(clippy::type_complexity)]
fn run_wgmma_matmul_ptx(
    ptx: &str,
    (dt, out): (DType, DType),
    (bm, bn, bk): (usize, usize, usize),
    (warps, stages): (u32, u32),
    mnk: (usize, usize, usize),
) -> (Result<Vec<f32>, String>, Vec<f64>, Vec<f64>) {
    let kern = wgmma_matmul(dt, out, (bm, bn, bk));
    let shared = compiled_wgmma(&kern, 90, warps, stages).shared_bytes as usize;
    run_matmul_ptx_of(&kern, ptx, shared, (dt, out), (bm, bn), warps, mnk)
}

/// Runs `ptx`, compiled from `kern` (a [`wgmma_matmul`] of `bm x bn` output tiles, whatever
/// its parameters' facts), with `shared` bytes of shared memory, as [`run_wgmma_matmul_ptx`].
#[allow(clippy::type_complexity)]
fn run_matmul_ptx_of(
    kern: &Kernel,
    ptx: &str,
    shared: usize,
    (dt, out): (DType, DType),
    (bm, bn): (usize, usize),
    warps: u32,
    (m, n, k): (usize, usize, usize),
) -> (Result<Vec<f32>, String>, Vec<f64>, Vec<f64>) {
    let av = values(m * k, 31 + m as u64);
    let bv = values(k * n, 37 + n as u64);
    let (want, scale) = matmul_reference(dt, &av, &bv, (m, n, k));
    let (ab, bb) = (encode(dt, &av), encode(dt, &bv));
    let c = vec![0u8; m * n * out.size_bytes()];
    let grid = [m.div_ceil(bm) as u64, n.div_ceil(bn) as u64, 1];
    let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let args = [
            Arg::Buf(&ab),
            Arg::Buf(&bb),
            Arg::Buf(&c),
            Arg::I32(m as i32),
            Arg::I32(n as i32),
            Arg::I32(k as i32),
        ];
        decode(
            out,
            &run_ptx(ptx, shared, &param_names(kern), warps, grid, &args)[2],
        )
    }))
    .map_err(|e| {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    });
    (got, want, scale)
}

/// The PTX of [`wgmma_matmul`] at `warps` and `stages`; asserts that the dot is on wgmma.
fn wgmma_matmul_ptx(
    dt: DType,
    out: DType,
    blocks: (usize, usize, usize),
    ws: (u32, u32),
) -> String {
    let kern = wgmma_matmul(dt, out, blocks);
    let c = compiled_wgmma(&kern, 90, ws.0, ws.1);
    assert!(
        c.ptx.contains("wgmma.mma_async"),
        "{blocks:?}: not on wgmma"
    );
    c.ptx
}

/// Runs the wgmma matmul and compares it with the float64 reference.
fn check_wgmma_matmul(
    (dt, out): (DType, DType),
    blocks: (usize, usize, usize),
    (warps, stages): (u32, u32),
    mnk: (usize, usize, usize),
) {
    let what = format!("wgmma {dt}->{out} {blocks:?} {warps}w {stages}s on {mnk:?}");
    let ptx = wgmma_matmul_ptx(dt, out, blocks, (warps, stages));
    let (got, want, scale) = run_wgmma_matmul_ptx(&ptx, (dt, out), blocks, (warps, stages), mnk);
    let got = got.unwrap_or_else(|e| panic!("{what}: {e}"));
    // An f32 C is exact up to f32 sums; a narrow C is rounded to 8 (bf16) or 11 bits.
    let tol = if out == DType::F32 { 1e-6 } else { 1e-2 };
    assert_close(&got, &want, &scale, tol, &what);
}

#[test]
fn wgmma_matmul_ragged_small_tiles_match() {
    for dt in [DType::BF16, DType::F16] {
        check_wgmma_matmul((dt, DType::F32), (64, 32, 32), (4, 3), (80, 48, 112));
    }
}

#[test]
fn wgmma_matmul_large_tiles_match() {
    // (blocks, warps, stages, problem): one CTA each, ragged in M, N and K; 8 warps are two
    // warpgroups along M.
    let cases = [
        ((128, 256, 64), (8, 3), (112, 240, 208)),
        ((128, 256, 32), (8, 4), (128, 176, 144)),
        ((256, 128, 64), (8, 3), (240, 128, 80)),
        ((128, 128, 128), (4, 2), (128, 112, 272)),
        // 4 stages of 64: each warpgroup keeps a k-tile's wgmmas in flight into the next
        // iteration.
        ((256, 128, 64), (8, 4), (240, 128, 336)),
        ((128, 256, 64), (8, 4), (112, 240, 336)),
    ];
    for (blocks, ws, mnk) in cases {
        for dt in [DType::BF16, DType::F16] {
            check_wgmma_matmul((dt, DType::F32), blocks, ws, mnk);
        }
    }
    for (blocks, ws, _) in &cases[4..] {
        let ptx = wgmma_matmul_ptx(DType::BF16, DType::F32, *blocks, *ws);
        assert!(
            ptx.contains("\twgmma.wait_group.sync.aligned 1;"),
            "{blocks:?}"
        );
    }
    // C stored as bf16 (the library's configuration): the epilogue reads the accumulator
    // after the last wait, in the loop or after it.
    for ws in [(8, 3), (8, 4)] {
        let (types, blocks) = ((DType::BF16, DType::BF16), (128, 256, 64));
        check_wgmma_matmul(types, blocks, ws, (128, 256, 320));
    }
}

/// Row strides that are not multiples of 16 bytes (the specialization records their
/// divisibility: 4 or 2 elements) stream through 8- and 4-byte `cp.async` copies into the
/// slots wgmma reads, beside 16-byte copies of the other operand where its rows allow them;
/// C matches the float64 reference.
#[test]
fn wgmma_matmul_fed_by_narrow_copies_matches() {
    // (m, n, k), the copy width of the narrower operand, whether both are narrow.
    let cases = [
        ((112, 196, 132), 8, true),
        ((96, 130, 102), 4, true),
        ((64, 200, 66), 4, false),
    ];
    for (mnk, width, both) in cases {
        let (m, n, k) = mnk;
        let mut kern = wgmma_matmul(DType::BF16, DType::F32, (64, 64, 32));
        for (param, value) in kern.params[3..6].iter_mut().zip([m, n, k]) {
            param.facts = tegula_ir::ParamFacts::of_value(value as u64);
        }
        let c = compiled_wgmma(&kern, 90, 4, 3);
        let what = format!("{mnk:?}");
        assert!(c.ptx.contains("wgmma.mma_async"), "{what}: not on wgmma");
        assert!(
            c.ptx.contains(&format!("], {width}, ")) && c.ptx.contains("cp.async.ca"),
            "{what}: no {width}-byte cp.async"
        );
        assert_eq!(
            c.ptx.contains("], 16, "),
            !both,
            "{what}: 16-byte copies only of 16-byte rows"
        );
        let types = (DType::BF16, DType::F32);
        let shared = c.shared_bytes as usize;
        let (got, want, scale) = run_matmul_ptx_of(&kern, &c.ptx, shared, types, (64, 64), 4, mnk);
        let got = got.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_close(&got, &want, &scale, 1e-6, &what);
    }
}

/// The simulator catches mistakes in wgmma code: each edit of a kernel's PTX is either
/// refused (the message says why) or computes a wrong C. Three loops, each leaving a k-tile's
/// wgmmas in flight into the next iteration (the refill, after the wait for last iteration's
/// k-tile and a barrier, writes the slot it read): one warpgroup at 3 and 4 stages, two
/// warpgroups at 3.
#[test]
fn wgmma_mistakes_are_caught() {
    let types = (DType::BF16, DType::F32);
    // (blocks, warps and stages, problem, A's descriptor high word)
    let cases = [
        ((64, 32, 32), (4, 3), (80, 48, 112), 0x8000_0020u32),
        ((64, 32, 64), (4, 4), (80, 48, 272), 0x4000_0040u32),
        ((128, 32, 32), (8, 3), (208, 48, 112), 0x8000_0020u32),
    ];
    for (blocks, ws, mnk, a_high) in cases {
        let ptx = wgmma_matmul_ptx(types.0, types.1, blocks, ws);
        let what = format!("{blocks:?} {ws:?}");
        let edited = |from: &str, to: &str| {
            assert!(ptx.contains(from), "{what}: {from:?} not in the PTX");
            ptx.replacen(from, to, 1)
        };
        let edited_last = |from: &str, to: &str| {
            let at = ptx.rfind(from).unwrap();
            format!("{}{to}{}", &ptx[..at], &ptx[at + from.len()..])
        };
        let run = |text: &str| run_wgmma_matmul_ptx(text, types, blocks, ws, mnk);
        let refused = |text: &str, why: &str| {
            let err = run(text).0.err();
            let err = err.unwrap_or_else(|| panic!("{what}: not refused: {why}"));
            assert!(err.contains(why), "{what}: expected {why:?}, got {err:?}");
        };
        // The first (or last) line starting with `prefix`.
        let line = |prefix: &str, last: bool| -> String {
            let mut lines = ptx.lines().filter(|l| l.starts_with(prefix));
            let l = if last {
                lines.next_back()
            } else {
                lines.next()
            };
            format!("{}\n", l.unwrap_or_else(|| panic!("{what}: no {prefix:?}")))
        };
        // The unedited PTX runs and matches (the other tests compare it in full).
        let (got, want, scale) = run(&ptx);
        assert_close(&got.unwrap(), &want, &scale, 1e-6, &what);

        // The loop: copies' wait, proxy fence, barrier, wgmma.fence, the wgmmas, commit, a
        // wait for all groups but the newest, a barrier, the refill of the slot the retired
        // group read; after the loop a wait for all.
        let (loop_wait, final_wait) = (
            line("\twgmma.wait_group", false),
            line("\twgmma.wait_group", true),
        );
        let wait_1 = "\twgmma.wait_group.sync.aligned 1;\n";
        assert_eq!(loop_wait, wait_1, "{what}");
        assert_eq!(final_wait, "\twgmma.wait_group.sync.aligned 0;\n", "{what}");
        // No last wait, or one that leaves the newest group pending: the accumulator is read
        // by the epilogue while its wgmma may still write it.
        refused(&edited_last(&final_wait, ""), "not yet waited for");
        refused(&edited_last(&final_wait, wait_1), "not yet waited for");
        // A loop wait that leaves one more group in flight, or none: the refill overwrites
        // the slot a pending wgmma reads.
        let wait_2 = "\twgmma.wait_group.sync.aligned 2;\n";
        refused(&edited(&loop_wait, wait_2), "which a pending wgmma reads");
        refused(&edited(&loop_wait, ""), "which a pending wgmma reads");
        // Without the barrier after the wait, one warpgroup refills the slot that the other's
        // wgmma still reads.
        let retire = format!("{wait_1}\tbar.sync 0;\n");
        assert!(
            ptx.contains(&retire),
            "{what}: no barrier after the loop's wait"
        );
        if ws.0 == 8 {
            refused(&edited(&retire, wait_1), "another thread reads");
        }
        // No wgmma.fence between the accumulator's initialization and the wgmma.
        refused(
            &edited("\twgmma.fence.sync.aligned;\n", ""),
            "without a wgmma.fence",
        );
        // The copies' bytes reach wgmma (the async proxy) only after the proxy fence.
        let fence = "\tfence.proxy.async.shared::cta;\n";
        refused(&edited(fence, ""), "fence.proxy.async");
        // Without the copies' wait the wgmma reads bytes still in flight.
        let copies_wait = line("\tcp.async.wait_group", false);
        refused(&edited(&copies_wait, ""), "in flight");
        // A proxy fence before the copies' wait does not cover the bytes landing at the wait.
        refused(
            &edited(
                &format!("{copies_wait}{fence}"),
                &format!("{fence}{copies_wait}"),
            ),
            "fence.proxy.async",
        );
        // A shared store into the slot the pending wgmma reads (stage 0, at the start of
        // shared memory), between the commit and the wait; the same with a cp.async.
        let commit = "\twgmma.commit_group.sync.aligned;\n";
        let store = format!("{commit}\tst.shared.u32 [tg_smem], %r1;\n");
        refused(&edited(commit, &store), "while a pending wgmma reads it");
        let copy = format!("{commit}\tcp.async.cg.shared.global [tg_smem], [%rd1], 16, 16;\n");
        refused(&edited(commit, &copy), "which a pending wgmma reads");
        // A descriptor that differs between the threads of the warpgroup.
        let a_high_mov = format!(", {a_high};");
        refused(
            &edited(&a_high_mov, ", %tid.x;"),
            "differs across warpgroup",
        );
        // A's descriptor with another swizzle mode: its rows land elsewhere and C is wrong.
        for mode in 1..4u32 {
            let text = format!(", {};", (a_high & 0x3fff_ffff) | mode << 30);
            if text == a_high_mov {
                continue;
            }
            let (got, want, scale) = run(&edited(&a_high_mov, &text));
            let got = got.unwrap();
            let wrong = got
                .iter()
                .zip(&want)
                .zip(&scale)
                .filter(|((&g, &w), &s)| (g as f64 - w).abs() > 1e-6 * s.max(1e-3))
                .count();
            assert!(
                wrong > got.len() / 4,
                "{what}: swizzle mode {mode}: {wrong} wrong elements"
            );
        }
    }
}

/// A hand-written kernel of one warpgroup: `D = A0 B0 - A1 B1` by two chained
/// `wgmma.m64n16k16` with A from registers (`scale-d` false on the first: D's registers are
/// never initialized) and B N-major (`imm-trans-b` 1) in shared memory with 32-byte swizzle.
/// Parameters: A fragments (4 words a thread, A0's then A1's), B's shared image (1024
/// bytes: B0 then B1), D (8 words a thread).
const REGISTER_A_WGMMA: &str = "
.extern .shared .align 1024 .b8 tg_smem[];
.visible .entry tg_register_a(.param .u64 p0_a, .param .u64 p1_b, .param .u64 p2_d)
.maxntid 128, 1, 1
{
	mov.u32 %r1, %tid.x;
	ld.param.u64 %rd1, [p0_a];
	ld.param.u64 %rd2, [p1_b];
	ld.param.u64 %rd3, [p2_d];
	mul.wide.u32 %rd4, %r1, 8;
	add.s64 %rd5, %rd2, %rd4;
	ld.global.u64 %rd6, [%rd5];
	mov.u32 %r2, tg_smem;
	mad.lo.u32 %r3, %r1, 8, %r2;
	st.shared.u64 [%r3], %rd6;
	fence.proxy.async.shared::cta;
	bar.sync 0;
	mul.wide.u32 %rd7, %r1, 16;
	add.s64 %rd8, %rd1, %rd7;
	ld.global.v4.u32 {%r10, %r11, %r12, %r13}, [%rd8];
	ld.global.v4.u32 {%r14, %r15, %r16, %r17}, [%rd8+2048];
	shr.u32 %r20, %r2, 4;
	add.s32 %r21, %r20, 32;
	mov.b32 %r22, 3221225488;
	mov.b64 %rd10, {%r20, %r22};
	mov.b64 %rd11, {%r21, %r22};
	setp.ne.u32 %p1, %r1, %r1;
	setp.eq.u32 %p2, %r1, %r1;
	wgmma.fence.sync.aligned;
	wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f8}, {%r10, %r11, %r12, %r13}, %rd10, %p1, 1, 1, 1;
	wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f8}, {%r14, %r15, %r16, %r17}, %rd11, %p2, -1, 1, 1;
	wgmma.commit_group.sync.aligned;
	wgmma.wait_group.sync.aligned 0;
	mul.wide.u32 %rd12, %r1, 32;
	add.s64 %rd13, %rd3, %rd12;
	st.global.v4.f32 [%rd13], {%f1, %f2, %f3, %f4};
	st.global.v4.f32 [%rd13+16], {%f5, %f6, %f7, %f8};
	ret;
}
";

/// Runs [`REGISTER_A_WGMMA`] (or an edit of it) on random bf16 A0, A1 (64 x 16) and B0, B1
/// (16 x 16): D as the test reads it back through the accumulator layout, and the float64
/// reference, or the simulator's complaint.
fn run_register_a_wgmma(ptx: &str) -> (Result<Vec<f32>, String>, Vec<f64>) {
    let dt = DType::BF16;
    let a: Vec<Vec<f64>> = (0..2)
        .map(|i| rounded(dt, &values(64 * 16, 41 + i)))
        .collect();
    let b: Vec<Vec<f64>> = (0..2)
        .map(|i| rounded(dt, &values(16 * 16, 43 + i)))
        .collect();
    let bits16 = |x: f64| bf16::from_f64(x).to_bits();
    // A's fragment (the PTX ISA's wgmma m64nNk16 A layout): register j of thread 32w + 4g + q
    // holds row 16w + g + 8 (j % 2), columns 2q + 8 (j / 2) and the next.
    let mut a_words = Vec::new();
    for am in &a {
        for t in 0..128 {
            let (w, g, q) = (t / 32, (t % 32) / 4, t % 4);
            for j in 0..4 {
                let (row, col) = (16 * w + g + 8 * (j % 2), 2 * q + 8 * (j / 2));
                let lo = bits16(am[row * 16 + col]) as u32;
                let hi = bits16(am[row * 16 + col + 1]) as u32;
                a_words.extend((lo | hi << 16).to_le_bytes());
            }
        }
    }
    // B N-major with 32-byte rows: row k holds B[k][0..16]; the swizzle flips 16-byte
    // halves (8 columns) of rows 4-7 of every 8.
    let mut b_image = vec![0u8; 1024];
    for (i, bm) in b.iter().enumerate() {
        for k in 0..16 {
            for n in 0..16 {
                let at = 512 * i + 32 * k + 2 * (n ^ (8 * ((k / 4) % 2)));
                b_image[at..at + 2].copy_from_slice(&bits16(bm[k * 16 + n]).to_le_bytes());
            }
        }
    }
    let mut want = vec![0f64; 64 * 16];
    for r in 0..64 {
        for c in 0..16 {
            want[r * 16 + c] = (0..16)
                .map(|k| a[0][r * 16 + k] * b[0][k * 16 + c] - a[1][r * 16 + k] * b[1][k * 16 + c])
                .sum();
        }
    }
    let d_words = vec![0u8; 128 * 8 * 4];
    let names = ["p0_a", "p1_b", "p2_d"].map(String::from);
    let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let args = [Arg::Buf(&a_words), Arg::Buf(&b_image), Arg::Buf(&d_words)];
        let bufs = run_ptx(ptx, 1024, &names, 4, [1, 1, 1], &args);
        let words = decode(DType::F32, &bufs[2]);
        // The accumulator layout: register i of thread 32w + 4g + q is row
        // 16w + g + 8 ((i / 2) % 2), column 8 (i / 4) + 2q + i % 2.
        let mut d = vec![0f32; 64 * 16];
        for t in 0..128 {
            let (w, g, q) = (t / 32, (t % 32) / 4, t % 4);
            for i in 0..8 {
                let (row, col) = (16 * w + g + 8 * ((i / 2) % 2), 8 * (i / 4) + 2 * q + i % 2);
                d[row * 16 + col] = words[8 * t + i];
            }
        }
        d
    }))
    .map_err(|e| {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    });
    (got, want)
}

#[test]
fn wgmma_with_a_from_registers_matches() {
    let ptx = format!(".version 8.0\n.target sm_90a\n.address_size 64\n{REGISTER_A_WGMMA}");
    let (got, want) = run_register_a_wgmma(&ptx);
    let ones = vec![1f64; want.len()];
    assert_close(&got.unwrap(), &want, &ones, 1e-6, "register A");
    let refused = |from: &str, to: &str, why: &str| {
        assert!(ptx.contains(from), "{from:?}");
        let (got, _) = run_register_a_wgmma(&ptx.replacen(from, to, 1));
        let err = got.expect_err(why);
        assert!(err.contains(why), "expected {why:?}, got {err:?}");
    };
    let commit = "\twgmma.commit_group.sync.aligned;\n";
    // A's registers belong to the wgmma until its wait: no write, no read.
    for access in ["mov.b32 %r14, 0", "add.s32 %r9, %r11, 1"] {
        let text = format!("{commit}\t{access};\n");
        refused(commit, &text, "A fragment");
    }
    // The loads of A's registers need a wgmma.fence before the wgmma reads them.
    refused("\twgmma.fence.sync.aligned;\n", "", "without a wgmma.fence");
    // Accumulating into a register another pending wgmma of other registers writes.
    refused(
        "{%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f8}, {%r14",
        "{%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f9}, {%r14",
        "shared with a pending wgmma",
    );
}

#[test]
fn persistent_wgmma_matmul_matches() {
    // 3 programs over 2 x 3 tiles of 64 x 32: the next tile's prologue refills the slots the
    // last tile's wgmmas read (and its epilogue's crossing used). A k-tile stays in flight
    // into the next iteration (the outer loop copies S - 1 stages ahead, and the last k-tile
    // is waited for before the store).
    for (stages, k) in [(2, 80), (3, 48), (6, 176)] {
        let (dt, out, (bm, bn, bk), (m, n), programs) =
            (DType::BF16, DType::F32, (64, 32, 32), (112, 80), 3);
        let kern = persistent_matmul_into(dt, out, bm, bn, bk);
        let c = compiled_wgmma(&kern, 90, 4, stages);
        assert!(c.ptx.contains("wgmma.mma_async"));
        assert!(c.ptx.contains("wgmma.wait_group.sync.aligned 1"));
        let av = values(m * k, 61);
        let bv = values(k * n, 67);
        let (want, scale) = matmul_reference(dt, &av, &bv, (m, n, k));
        let (ab, bb) = (encode(dt, &av), encode(dt, &bv));
        let cb = vec![0u8; m * n * 4];
        let args = [
            Arg::Buf(&ab),
            Arg::Buf(&bb),
            Arg::Buf(&cb),
            Arg::I32(m as i32),
            Arg::I32(n as i32),
            Arg::I32(k as i32),
        ];
        let grid = [programs, 1, 1];
        let bufs = run_ptx(
            &c.ptx,
            c.shared_bytes as usize,
            &param_names(&kern),
            4,
            grid,
            &args,
        );
        let got = decode(out, &bufs[2]);
        let what = format!("persistent wgmma matmul, {stages} stages");
        assert_close(&got, &want, &scale, 1e-6, &what);
    }
}

/// A warpgroup's `wgmma.wait_group` orders its own threads after its wgmmas' reads, not the
/// other warpgroup's: a store into A's first row (read by warpgroup 0 only) right after the
/// wait is fine from warpgroup 0 and a race from warpgroup 1 (no barrier between).
#[test]
fn wgmma_reads_are_ordered_only_for_their_own_warpgroup() {
    let (types, blocks, ws, mnk) = (
        (DType::F16, DType::F32),
        (128, 256, 64),
        (8, 3),
        (112, 240, 208),
    );
    let ptx = wgmma_matmul_ptx(types.0, types.1, blocks, ws);
    let wait = "\twgmma.wait_group.sync.aligned 0;\n";
    assert!(ptx.contains(wait));
    let store_by = |thread: u32| {
        let store = format!(
            "{wait}\tsetp.eq.u32 %p_store, %r1, {thread};\n\t@%p_store st.shared.u32 [tg_smem], %r1;\n"
        );
        ptx.replacen(wait, &store, 1)
    };
    let (got, want, scale) = run_wgmma_matmul_ptx(&store_by(0), types, blocks, ws, mnk);
    assert_close(&got.unwrap(), &want, &scale, 1e-6, "store by warpgroup 0");
    let (got, ..) = run_wgmma_matmul_ptx(&store_by(128), types, blocks, ws, mnk);
    let err = got.expect_err("store by warpgroup 1");
    assert!(err.contains("while another thread reads it"), "{err}");
}

/// FlashAttention's forward asked for wgmma on sm_90a, against the online-softmax reference:
/// both dots on wgmma with A from registers (Q, packed once before the loop, and P, the first
/// dot's accumulator after the softmax), two warpgroups or one, two 64-row blocks a
/// warpgroup, K and V slots of 64- to 256-byte rows, 2 and 3 stages; Q resident in shared
/// memory (128 x 128 over 4 warps), read by `Q K^T`'s descriptors;
/// and the two-loop kernel (the library's unmasked and masked loops).
#[test]
fn attention_on_wgmma_match() {
    for (dt, bm, bn, d, warps, stages, split) in [
        (DType::BF16, 64, 64, 64, 4, 2, false),
        (DType::F16, 64, 32, 32, 4, 3, false),
        (DType::BF16, 128, 64, 128, 8, 2, false),
        (DType::BF16, 128, 64, 128, 4, 2, false),
        (DType::F16, 128, 128, 64, 8, 3, false),
        (DType::BF16, 64, 64, 128, 4, 2, true),
        (DType::F16, 128, 32, 64, 8, 2, true),
    ] {
        let kern = if split {
            flash_attention_two_loops(dt, bm, bn, d)
        } else {
            flash_attention(dt, bm, bn, d)
        };
        let c = compiled_wgmma(&kern, 90, warps, stages);
        let what =
            format!("attention, wgmma, {dt} {bm}x{bn}x{d} {warps}w {stages}s, two loops {split}");
        // Each loop: both dots, one wgmma a k16 step and 64-row block of a warpgroup; Q
        // resident in shared memory (a wgmma's invariant A stays there whatever its size)
        // is read there by Q K^T's descriptors (K-major, panels past 128-byte rows).
        let loops = if split { 2 } else { 1 };
        let blocks = bm / (16 * warps as usize);
        let k_steps = (d + bn) / 16;
        assert_eq!(
            c.ptx.matches("wgmma.mma_async").count(),
            loops * blocks * k_steps,
            "{what}"
        );
        assert!(!c.ptx.contains("mma.sync.aligned.m16n8k16"), "{what}");
        assert!(c.ptx.contains("A from shared memory"), "{what}");
        // The two loops split the keys after the first block.
        let split_at = split.then_some(bn as i32);
        check_attention_kernel(&kern, split_at, 90, (dt, bm, bn, d, warps, stages));
    }
}

/// The attention backward's dK/dV step (`attn_bwd_dkdv` in tegula-kernels) in small, over row
/// blocks of `q` and `d_o` (`n` rows, a multiple of `bm`) against a key block of `bn` rows,
/// with its five dots: `s^T = K q^T`, `p^T = s^T - r[rows]`, `dv += p^T d_o` (p^T cast),
/// `dp^T = V d_o^T`, `ds^T = (dp^T - c[rows]) * p^T` (cast), `dq[rows] = (ds^T)^T K` (stored),
/// `dk += ds^T q`. K and V are loop-invariant (resident in shared memory when their fragments
/// would not fit), `q` and `d_o` each feed two dots, as is and transposed, `r` and `c` are
/// the rank-1 loads the pipeliner stages beside them (the library's lse and delta).
fn backward_step_loop(dt: DType, (bm, bn, d): (usize, usize, usize)) -> Kernel {
    trace("backward_step_loop", |p| {
        let (qp, dop) = (p.ptr("q", dt), p.ptr("d_o", dt));
        let (kp, vp) = (p.ptr("k", dt), p.ptr("v", dt));
        let (rp, cp) = (p.ptr("r", DType::F32), p.ptr("c", DType::F32));
        let (dqp, dkp, dvp) = (
            p.ptr("dq", DType::F32),
            p.ptr("dk", DType::F32),
            p.ptr("dv", DType::F32),
        );
        let n = p.scalar("n", DType::I32);
        let offs_n = arange(0, bn as i64);
        let offs_d = arange(0, d as i64);
        let offs_m = arange(0, bm as i64);
        let kv = load_unmasked(kp + offs_n.col() * d + offs_d.row());
        let vv = load_unmasked(vp + offs_n.col() * d + offs_d.row());
        let zero = zeros::<f32>([bn, d]);
        let (dk, dv) = for_range(0, n, bm, (zero, zero), |start, (dk, dv)| {
            let rows = start + offs_m;
            let q = load_unmasked(qp + rows.col() * d + offs_d.row());
            let d_o = load_unmasked(dop + rows.col() * d + offs_d.row());
            let (r, c) = (load_unmasked(rp + rows), load_unmasked(cp + rows));
            let p_t = dot(kv, q.trans()) - r.row();
            let dv = dot_acc(p_t.cast(dt), d_o, dv);
            let dp_t = dot(vv, d_o.trans());
            let ds_t = ((dp_t - c.row()) * p_t).cast(dt);
            let dq = dot(ds_t.trans(), kv);
            store_unmasked(dqp + rows.col() * d + offs_d.row(), dq);
            (dot_acc(ds_t, q, dk), dv)
        });
        store_unmasked(dkp + offs_n.col() * d + offs_d.row(), dk);
        store_unmasked(dvp + offs_n.col() * d + offs_d.row(), dv);
    })
    .map(aligned)
    .unwrap()
}

/// [`backward_step_loop`] asked for wgmma on sm_90a, against float64: four dots on wgmma,
/// `K q^T` and `V d_o^T` with A from K and V resident in shared memory (K-major panels) and B
/// K-major from the slots of `q` and `d_o`, `dv += p^T d_o` and `dk += ds^T q` with A from
/// registers (the first dots' accumulators, all warps along M) and B N-major from the same
/// slots; `dq = ds K` on mma.sync, reading K's resident panels with `ldmatrix.trans`. The dQ
/// rows of each block, dK and dV all checked. On mma.sync, no wgmma.
#[test]
fn attention_backward_step_on_wgmma_match() {
    for (dt, bm, bn, d, warps, stages) in [
        (DType::BF16, 64, 128, 128, 8, 3),
        (DType::F16, 32, 64, 64, 4, 2),
        (DType::BF16, 32, 64, 128, 4, 2),
    ] {
        let n = 2 * bm;
        let kern = backward_step_loop(dt, (bm, bn, d));
        let what = format!("backward step, wgmma, {dt} {bm}x{bn}x{d} {warps}w {stages}s");
        assert!(
            !ptx_of(&kern, 90, warps, stages).contains("wgmma"),
            "{what}"
        );
        let c = compiled_wgmma(&kern, 90, warps, stages);
        // One wgmma a k16 step and 64-row block of a warpgroup: dv's and dk's dots (k = bm),
        // K q^T and V d_o^T (k = d) with K and V resident, read by descriptors.
        let blocks = bn / (16 * warps as usize);
        assert_eq!(
            c.ptx.matches("wgmma.mma_async").count(),
            blocks * (2 * bm + 2 * d) / 16,
            "{what}"
        );
        assert_eq!(c.ptx.matches("A from shared memory)").count(), 2, "{what}");
        // dq's dot, whose A (ds^T transposed) is in no A layout, stays on mma.sync.
        assert_eq!(c.ptx.matches("on tensor cores").count(), 1, "{what}");
        let (qv, dov) = (values(n * d, 81), values(n * d, 83));
        let (kv, vv) = (values(bn * d, 87), values(bn * d, 89));
        let (rv, cv) = (values(n, 91), values(n, 93));
        let (qr, dor, kr, vr) = (
            rounded(dt, &qv),
            rounded(dt, &dov),
            rounded(dt, &kv),
            rounded(dt, &vv),
        );
        let round = |x: f64| rounded(dt, &[x as f32])[0];
        let mut dq = vec![0f64; n * d];
        let (mut dk, mut dv) = (vec![0f64; bn * d], vec![0f64; bn * d]);
        let (mut dq_scale, mut dk_scale, mut dv_scale) = (dq.clone(), dk.clone(), dv.clone());
        for i in 0..n {
            let row = |x: &[f64]| x[i * d..(i + 1) * d].to_vec();
            let (q_i, do_i) = (row(&qr), row(&dor));
            for j in 0..bn {
                let s: f64 = (0..d).map(|c| kr[j * d + c] * q_i[c]).sum();
                let dp: f64 = (0..d).map(|c| vr[j * d + c] * do_i[c]).sum();
                let p = s - rv[i] as f64;
                let ds = round((dp - cv[i] as f64) * p);
                for c in 0..d {
                    dv[j * d + c] += round(p) * do_i[c];
                    dv_scale[j * d + c] += (round(p) * do_i[c]).abs();
                    dk[j * d + c] += ds * q_i[c];
                    dk_scale[j * d + c] += (ds * q_i[c]).abs();
                    dq[i * d + c] += ds * kr[j * d + c];
                    dq_scale[i * d + c] += (ds * kr[j * d + c]).abs();
                }
            }
        }
        let nan = |len: usize| encode(DType::F32, &vec![f32::NAN; len]);
        let args = [
            encode(dt, &qv),
            encode(dt, &dov),
            encode(dt, &kv),
            encode(dt, &vv),
            encode(DType::F32, &rv),
            encode(DType::F32, &cv),
            nan(n * d),
            nan(bn * d),
            nan(bn * d),
        ];
        let mut run_args: Vec<Arg> = args.iter().map(|b| Arg::Buf(b)).collect();
        run_args.push(Arg::I32(n as i32));
        let bufs = run_ptx(
            &c.ptx,
            c.shared_bytes as usize,
            &param_names(&kern),
            warps,
            [1, 1, 1],
            &run_args,
        );
        // P^T and dS^T are rounded to the input dtype from f32 sums: a rounding step apart
        // from the float64 ones now and then.
        let tol = 1e-2;
        let out = |i: usize| decode(DType::F32, &bufs[i]);
        assert_close(&out(6), &dq, &dq_scale, tol, &format!("{what}: dq"));
        assert_close(&out(7), &dk, &dk_scale, tol, &format!("{what}: dk"));
        assert_close(&out(8), &dv, &dv_scale, tol, &format!("{what}: dv"));
    }
}
