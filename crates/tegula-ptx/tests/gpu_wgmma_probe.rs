//! Hopper's `wgmma.mma_async` on a real device: the facts the wgmma lowering (`emit/wgmma.rs`)
//! and the PTX simulator's `descriptor_address` rely on, pinned down on the GPU with hand-written PTX (sm_90a, one warpgroup of 128 threads, bf16 in, f32 accumulate):
//! - the shared-memory layout of a swizzled tile (128-byte and 64-byte swizzle) written with
//!   ordinary `st.shared` from a row-major global matrix;
//! - the 64-bit matrix descriptor: start address >> 4 (bits 0-13), leading byte offset >> 4
//!   (16-29), stride byte offset >> 4 (32-45), swizzle mode (62-63: 1 = 128B, 2 = 64B);
//! - the k16 step: K-major operands advance the start address by 32 bytes inside a swizzled row,
//!   N-major B by 16 rows;
//! - both B layouts: K-major (`imm-trans-b` 0, B stored [N, K] as K in Q.K^T) and N-major
//!   (`imm-trans-b` 1, B stored [K, N] as V in P.V or the matmul's B);
//! - `scale-d` false on the first k-step ignores the accumulator (it starts as NaN here);
//! - the accumulator map: register d[i] of lane (g = lane / 4, t = lane % 4) of warp w is
//!   row 16w + g + 8 ((i >> 1) & 1), column 8 (i >> 2) + 2t + (i & 1).
//!
//! On the GPU (`wgmma_variants_match_float64_on_the_gpu`), each variant compares with an f64
//! reference and prints PASS/FAIL; on a FAIL it names the first wrong (row, col) and which
//! reference element the value equals, if any, to tell a layout mix-up from garbage. N-major
//! variants that fail are retried with LBO and SBO swapped (the ISA's wording for MN-major
//! operands is easy to misread); any failure fails the test.
//! `wgmma_and_mma_sync_rates_on_the_gpu` times loops on resident tiles and prints wgmma's rate
//! beside mma.sync's (a measurement: it asserts nothing about speed).
//!
//! Both need an sm_90 GPU and are ignored otherwise: `TEGULA_GPU_TESTS=1 cargo test --release
//! -p tegula-ptx --test gpu_wgmma_probe -- --ignored` (the README's tests section). Without a
//! GPU, the model of the ISA's layouts and ptxas's assembly of every probe kernel run as
//! ordinary tests here.

use std::fmt::Write as _;
use tegula_cuda::{CudaRuntime, KernelParam};

type Error = Box<dyn std::error::Error>;

/// Threads of one warpgroup.
const WARPGROUP: u32 = 128;
/// A quiet-NaN bf16 pair: shared memory is poisoned with it before the tiles are written, so a
/// wgmma that reads outside them yields NaN.
const POISON_BF16X2: u32 = 0x7fc0_7fc0;

#[derive(Clone, Copy, PartialEq, Debug)]
enum BLayout {
    /// B stored [N, K] row-major (K contiguous): `imm-trans-b` 0.
    KMajor,
    /// B stored [K, N] row-major (N contiguous): `imm-trans-b` 1.
    NMajor,
}

/// One checked configuration: C[64, N] = A[64, K] . B[K, N] with K = 16 * k_steps.
#[derive(Clone, Copy, Debug)]
struct Variant {
    n: usize,
    /// Swizzle width in bytes (128 or 64): also the row pitch of a shared tile.
    swizzle: usize,
    b_layout: BLayout,
    k_steps: usize,
    /// Alternative reading of the N-major descriptor (LBO and SBO exchanged).
    swap_lbo_sbo: bool,
}

impl Variant {
    fn k(&self) -> usize {
        16 * self.k_steps
    }
    fn name(&self) -> String {
        let b = match self.b_layout {
            BLayout::KMajor => "bk",
            BLayout::NMajor => "bn",
        };
        let alt = if self.swap_lbo_sbo { "_swapped" } else { "" };
        format!(
            "wgmma_m64n{}k{}_sw{}_{b}{alt}",
            self.n,
            self.k(),
            self.swizzle
        )
    }
    /// B's (LBO, SBO) in bytes, exchanged in the alternative.
    fn b_offsets(&self) -> (usize, usize) {
        let (lbo, sbo) = offsets(self.b_tile(), self.b_layout == BLayout::KMajor);
        if self.swap_lbo_sbo {
            (sbo, lbo)
        } else {
            (lbo, sbo)
        }
    }
    fn a_descriptor_high(&self) -> u64 {
        let (lbo, sbo) = offsets(self.a_tile(), true);
        descriptor_high_bits(lbo, sbo, self.swizzle)
    }
    fn b_descriptor_high(&self) -> u64 {
        let (lbo, sbo) = self.b_offsets();
        descriptor_high_bits(lbo, sbo, self.swizzle)
    }
    fn a_tile(&self) -> Tile {
        Tile {
            rows: 64,
            cols: self.k(),
            swizzle: self.swizzle,
        }
    }
    fn b_tile(&self) -> Tile {
        match self.b_layout {
            BLayout::KMajor => Tile {
                rows: self.n,
                cols: self.k(),
                swizzle: self.swizzle,
            },
            BLayout::NMajor => Tile {
                rows: self.k(),
                cols: self.n,
                swizzle: self.swizzle,
            },
        }
    }
}

/// A row-major global bf16 matrix [rows, cols] as stored in shared memory: panels of
/// `swizzle / 2` columns, each panel `rows` rows of `swizzle` bytes (a narrower matrix still
/// takes full rows), 16-byte chunks XOR-swizzled within each row by the address bits above
/// (CUTLASS's Swizzle<B, 4, 3>: bits [7, 7 + B) into bits [4, 4 + B), B = log2(swizzle / 16)).
#[derive(Clone, Copy, Debug)]
struct Tile {
    rows: usize,
    cols: usize,
    swizzle: usize,
}

impl Tile {
    fn panel_cols(&self) -> usize {
        self.swizzle / 2
    }
    fn panel_bytes(&self) -> usize {
        self.rows * self.swizzle
    }
    fn bytes(&self) -> usize {
        self.cols.div_ceil(self.panel_cols()) * self.panel_bytes()
    }
    /// Byte offset of element (row, col) from the tile's (1024-byte-aligned) start: what
    /// `copy_tile_ptx` computes for each 16-byte chunk.
    #[cfg_attr(not(test), allow(dead_code))]
    fn byte_offset(&self, row: usize, col: usize) -> usize {
        let in_row = row * self.swizzle + (col % self.panel_cols()) * 2;
        let swizzled = in_row ^ (((in_row >> 7) & (self.swizzle / 16 - 1)) << 4);
        (col / self.panel_cols()) * self.panel_bytes() + swizzled
    }
}

/// Descriptor bits 62-63.
fn swizzle_mode(swizzle: usize) -> u64 {
    match swizzle {
        128 => 1,
        64 => 2,
        32 => 3,
        _ => panic!("no wgmma swizzle mode for {swizzle} bytes"),
    }
}

/// The descriptor without its start address: LBO, SBO (bytes) and swizzle mode.
fn descriptor_high_bits(lbo: usize, sbo: usize, swizzle: usize) -> u64 {
    let field = |bytes: usize| ((bytes as u64) >> 4) & 0x3fff;
    (field(lbo) << 16) | (field(sbo) << 32) | (swizzle_mode(swizzle) << 62)
}

/// (LBO, SBO) in bytes of an operand tile. K-major swizzled: LBO unused (16, as CUTLASS sets
/// it), SBO = 8 rows. N-major: LBO = one panel (the next `swizzle / 2` columns of N), SBO = 8
/// rows of K.
fn offsets(tile: Tile, k_major: bool) -> (usize, usize) {
    if k_major {
        (16, 8 * tile.swizzle)
    } else {
        (tile.panel_bytes(), 8 * tile.swizzle)
    }
}

/// Byte offset, from a tile's start, of the k16 step `k_step`.
fn k_step_offset(tile: Tile, k_major: bool, k_step: usize) -> usize {
    let k = 16 * k_step;
    if k_major {
        (k / tile.panel_cols()) * tile.panel_bytes() + (k % tile.panel_cols()) * 2
    } else {
        k * tile.swizzle
    }
}

fn log2(x: usize) -> u32 {
    assert!(x.is_power_of_two(), "{x} is not a power of two");
    x.trailing_zeros()
}

/// PTX that copies a row-major global tile (pointer in %rd_src) into shared memory at
/// %r_dst in the swizzled layout, 16 bytes a thread per round, over `threads` threads.
fn copy_tile_ptx(p: &mut String, tile: Tile, label: &str, threads: u32) {
    let chunks_per_row = tile.cols / 8;
    let chunks_per_panel_row = tile.swizzle / 16;
    let total = tile.rows * chunks_per_row;
    let mask = chunks_per_panel_row - 1;
    let panel_bytes = tile.panel_bytes();
    let (log_cpr, log_cppr, log_w) = (
        log2(chunks_per_row),
        log2(chunks_per_panel_row),
        log2(tile.swizzle),
    );
    let _ = write!(
        p,
        "\tmov.u32 %r_i, %r_tid;
{label}_LOOP:
\tsetp.ge.u32 %p_done, %r_i, {total};
\t@%p_done bra {label}_DONE;
\tshr.u32 %r_row, %r_i, {log_cpr};
\tand.b32 %r_chunk, %r_i, {cpr_mask};
\tshr.u32 %r_panel, %r_chunk, {log_cppr};
\tand.b32 %r_chunk, %r_chunk, {mask};
\tshl.b32 %r_off, %r_row, {log_w};
\tshl.b32 %r_tmp, %r_chunk, 4;
\tadd.u32 %r_off, %r_off, %r_tmp;
\tshr.u32 %r_tmp, %r_off, 7;
\tand.b32 %r_tmp, %r_tmp, {mask};
\tshl.b32 %r_tmp, %r_tmp, 4;
\txor.b32 %r_off, %r_off, %r_tmp;
\tmad.lo.u32 %r_off, %r_panel, {panel_bytes}, %r_off;
\tadd.u32 %r_off, %r_off, %r_dst;
\tmul.wide.u32 %rd_tmp, %r_i, 16;
\tadd.s64 %rd_tmp, %rd_src, %rd_tmp;
\tld.global.v4.b32 {{%r_v0, %r_v1, %r_v2, %r_v3}}, [%rd_tmp];
\tst.shared.v4.b32 [%r_off], {{%r_v0, %r_v1, %r_v2, %r_v3}};
\tadd.u32 %r_i, %r_i, {threads};
\tbra {label}_LOOP;
{label}_DONE:
",
        cpr_mask = chunks_per_row - 1,
    );
}

/// PTX that sets %rd_desc to the descriptor of shared address %r_addr plus `high` bits.
fn descriptor_ptx(p: &mut String, high: u64) {
    let _ = write!(
        p,
        "\tcvt.u64.u32 %rd_desc, %r_addr;
\tand.b64 %rd_desc, %rd_desc, 262143;
\tshr.u64 %rd_desc, %rd_desc, 4;
\tor.b64 %rd_desc, %rd_desc, {high};
"
    );
}

/// PTX that sets `dst_a` and `dst_b` to the descriptors of k-step `step` of A (K-major, at
/// %r_base) and B (after A), with their `high` bits.
fn k_step_descriptors_ptx(
    p: &mut String,
    (a, a_high): (Tile, u64),
    (b, b_high, b_k_major): (Tile, u64, bool),
    step: usize,
    (dst_a, dst_b): (&str, &str),
) {
    let _ = writeln!(
        p,
        "\tadd.u32 %r_addr, %r_base, {};",
        k_step_offset(a, true, step)
    );
    descriptor_ptx(p, a_high);
    let _ = writeln!(p, "\tmov.b64 {dst_a}, %rd_desc;");
    let _ = writeln!(
        p,
        "\tadd.u32 %r_addr, %r_base, {};",
        a.bytes() + k_step_offset(b, b_k_major, step)
    );
    descriptor_ptx(p, b_high);
    let _ = writeln!(p, "\tmov.b64 {dst_b}, %rd_desc;");
}

fn accumulator_list(n: usize) -> String {
    (0..n / 2)
        .map(|i| format!("%d{i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

const HEADER: &str =
    ".version 8.0\n.target sm_90a\n.address_size 64\n\n.extern .shared .align 1024 .b8 smem[];\n\n";

/// Common register declarations of the probe kernels.
const REGS: &str = "\t.reg .pred %p_done, %p_first, %p_rest, %p_store;
\t.reg .b32 %r_tid, %r_i, %r_row, %r_chunk, %r_panel, %r_off, %r_tmp, %r_dst, %r_base, %r_addr;
\t.reg .b32 %r_v0, %r_v1, %r_v2, %r_v3, %r_zero, %r_warp, %r_lane, %r_g, %r_t, %r_iter;
\t.reg .b64 %rd_a, %rd_b, %rd_out, %rd_src, %rd_tmp, %rd_desc, %rd_da, %rd_db;
";

/// %r_base = the first 1024-byte-aligned address of the dynamic shared memory (the launch adds
/// 1024 bytes of slack), so that a swizzle pattern starts at a pattern boundary (base offset 0).
const ALIGNED_BASE: &str = "\tmov.u32 %r_base, smem;
\tadd.u32 %r_base, %r_base, 1023;
\tand.b32 %r_base, %r_base, -1024;
";

/// Stores this thread's accumulators d[0..n/2) of an m64nN tile to the row-major f32 [64, N]
/// at %rd_out, warp w = %r_warp of the warpgroup, with the documented map.
fn store_accumulators_ptx(p: &mut String, n: usize) {
    let _ = write!(
        p,
        "\tshr.u32 %r_warp, %r_tid, 5;
\tand.b32 %r_warp, %r_warp, 3;
\tand.b32 %r_lane, %r_tid, 31;
\tshr.u32 %r_g, %r_lane, 2;
\tand.b32 %r_t, %r_lane, 3;
\tshl.b32 %r_row, %r_warp, 4;
\tadd.u32 %r_row, %r_row, %r_g;
\tshl.b32 %r_tmp, %r_t, 1;
\tmad.lo.u32 %r_off, %r_row, {n}, %r_tmp;
\tmul.wide.u32 %rd_tmp, %r_off, 4;
\tadd.s64 %rd_tmp, %rd_out, %rd_tmp;
"
    );
    for i in 0..n / 2 {
        let row = 8 * ((i >> 1) & 1);
        let col = 8 * (i >> 2) + (i & 1);
        let _ = writeln!(
            p,
            "\tst.global.f32 [%rd_tmp+{}], %d{i};",
            4 * (row * n + col)
        );
    }
}

/// The checking kernel of one variant: a (64 x K) . b (K x N) -> out (64 x N, f32).
fn probe_ptx(v: &Variant) -> String {
    let (a, b) = (v.a_tile(), v.b_tile());
    let b_k_major = v.b_layout == BLayout::KMajor;
    let (a_high, b_high) = (v.a_descriptor_high(), v.b_descriptor_high());
    let name = v.name();
    let poison_chunks = (a.bytes() + b.bytes()) / 16;
    let mut p = String::from(HEADER);
    let _ = write!(
        p,
        ".visible .entry {name}(
\t.param .u64 {name}_a,
\t.param .u64 {name}_b,
\t.param .u64 {name}_out
)
.reqntid {WARPGROUP}, 1, 1
{{
{REGS}\t.reg .f32 %d<{acc}>;

\tld.param.u64 %rd_a, [{name}_a];
\tld.param.u64 %rd_b, [{name}_b];
\tld.param.u64 %rd_out, [{name}_out];
\tcvta.to.global.u64 %rd_a, %rd_a;
\tcvta.to.global.u64 %rd_b, %rd_b;
\tcvta.to.global.u64 %rd_out, %rd_out;
\tmov.u32 %r_tid, %tid.x;
{ALIGNED_BASE}
\t// Poison both tiles' bytes (NaN), so reads outside what is written below show.
\tmov.u32 %r_v0, {POISON_BF16X2};
\tmov.u32 %r_i, %r_tid;
POISON_LOOP:
\tsetp.ge.u32 %p_done, %r_i, {poison_chunks};
\t@%p_done bra POISON_DONE;
\tshl.b32 %r_off, %r_i, 4;
\tadd.u32 %r_off, %r_off, %r_base;
\tst.shared.v4.b32 [%r_off], {{%r_v0, %r_v0, %r_v0, %r_v0}};
\tadd.u32 %r_i, %r_i, {WARPGROUP};
\tbra POISON_LOOP;
POISON_DONE:
\tbar.sync 0;
\tmov.u64 %rd_src, %rd_a;
\tmov.u32 %r_dst, %r_base;
",
        acc = v.n / 2,
    );
    copy_tile_ptx(&mut p, a, "COPY_A", WARPGROUP);
    let _ = write!(
        p,
        "\tmov.u64 %rd_src, %rd_b;
\tadd.u32 %r_dst, %r_base, {a_bytes};
",
        a_bytes = a.bytes()
    );
    copy_tile_ptx(&mut p, b, "COPY_B", WARPGROUP);
    let _ = write!(
        p,
        "\t// Generic-proxy stores must be visible to the async proxy (wgmma) before the barrier.
\tfence.proxy.async.shared::cta;
\tbar.sync 0;
\t// scale-d false on the first step: D = A.B ignores the (NaN) accumulators.
\tmov.u32 %r_zero, 0;
\tsetp.ne.u32 %p_first, %r_zero, 0;
\tsetp.eq.u32 %p_rest, %r_zero, 0;
"
    );
    for i in 0..v.n / 2 {
        let _ = writeln!(p, "\tmov.f32 %d{i}, 0f7FC00000;");
    }
    p.push_str("\twgmma.fence.sync.aligned;\n");
    let accs = accumulator_list(v.n);
    for step in 0..v.k_steps {
        k_step_descriptors_ptx(
            &mut p,
            (a, a_high),
            (b, b_high, b_k_major),
            step,
            ("%rd_da", "%rd_db"),
        );
        let scale_d = if step == 0 { "%p_first" } else { "%p_rest" };
        let trans_b = u8::from(!b_k_major);
        let _ = writeln!(
            p,
            "\twgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{accs}}}, %rd_da, %rd_db, {scale_d}, 1, 1, 0, {trans_b};",
            n = v.n
        );
    }
    p.push_str("\twgmma.commit_group.sync.aligned;\n\twgmma.wait_group.sync.aligned 0;\n");
    store_accumulators_ptx(&mut p, v.n);
    p.push_str("\tret;\n}\n");
    p
}

/// A timed loop: `warpgroups` warpgroups a block, each issuing `iters` x 4 m64nNk16 wgmma on
/// resident tiles (A 64 x 64 and K-major B N x 64, 128-byte swizzle; no global traffic), one
/// commit group per 4 and at most one group left pending. Stores the accumulators' sum only when
/// the `store` parameter is non-zero (so nothing can be proven dead).
fn timed_wgmma_ptx(n: usize, warpgroups: u32) -> String {
    let name = timed_wgmma_name(n, warpgroups);
    let a = Tile {
        rows: 64,
        cols: 64,
        swizzle: 128,
    };
    let b = Tile {
        rows: n,
        cols: 64,
        swizzle: 128,
    };
    let (a_lbo, a_sbo) = offsets(a, true);
    let (b_lbo, b_sbo) = offsets(b, true);
    let a_high = descriptor_high_bits(a_lbo, a_sbo, 128);
    let b_high = descriptor_high_bits(b_lbo, b_sbo, 128);
    let threads = WARPGROUP * warpgroups;
    let chunks = (a.bytes() + b.bytes()) / 16;
    let accs = accumulator_list(n);
    let mut p = String::from(HEADER);
    let _ = write!(
        p,
        ".visible .entry {name}(
\t.param .u64 {name}_out,
\t.param .u32 {name}_iters,
\t.param .u32 {name}_store
)
.reqntid {threads}, 1, 1
{{
{REGS}\t.reg .f32 %d<{acc}>;
\t.reg .f32 %f_sum;
\t.reg .b64 %rd_ka<4>, %rd_kb<4>;

\tld.param.u64 %rd_out, [{name}_out];
\tcvta.to.global.u64 %rd_out, %rd_out;
\tld.param.u32 %r_iter, [{name}_iters];
\tld.param.u32 %r_tmp, [{name}_store];
\tsetp.ne.u32 %p_store, %r_tmp, 0;
\tmov.u32 %r_tid, %tid.x;
{ALIGNED_BASE}
\t// Small non-zero bf16 values (0x3C00 = 2^-7) in both tiles.
\tmov.u32 %r_v0, 0x3C003C00;
\tmov.u32 %r_i, %r_tid;
FILL_LOOP:
\tsetp.ge.u32 %p_done, %r_i, {chunks};
\t@%p_done bra FILL_DONE;
\tshl.b32 %r_off, %r_i, 4;
\tadd.u32 %r_off, %r_off, %r_base;
\tst.shared.v4.b32 [%r_off], {{%r_v0, %r_v0, %r_v0, %r_v0}};
\tadd.u32 %r_i, %r_i, {threads};
\tbra FILL_LOOP;
FILL_DONE:
\tfence.proxy.async.shared::cta;
\tbar.sync 0;
",
        acc = n / 2,
    );
    for i in 0..n / 2 {
        let _ = writeln!(p, "\tmov.f32 %d{i}, 0f00000000;");
    }
    p.push_str("\tmov.u32 %r_zero, 0;\n\tsetp.eq.u32 %p_rest, %r_zero, 0;\n");
    // Four descriptor pairs (k-steps 0..3) kept in registers across the loop.
    for step in 0..4 {
        let (ka, kb) = (format!("%rd_ka{step}"), format!("%rd_kb{step}"));
        k_step_descriptors_ptx(&mut p, (a, a_high), (b, b_high, true), step, (&ka, &kb));
    }
    p.push_str("\twgmma.fence.sync.aligned;\nTIMED_LOOP:\n");
    for step in 0..4 {
        let _ = writeln!(
            p,
            "\twgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{accs}}}, %rd_ka{step}, %rd_kb{step}, %p_rest, 1, 1, 0, 0;"
        );
    }
    p.push_str(
        "\twgmma.commit_group.sync.aligned;
\twgmma.wait_group.sync.aligned 1;
\tsub.u32 %r_iter, %r_iter, 1;
\tsetp.ne.u32 %p_done, %r_iter, 0;
\t@%p_done bra TIMED_LOOP;
\twgmma.wait_group.sync.aligned 0;
\t@!%p_store bra END;
\tmov.f32 %f_sum, 0f00000000;
",
    );
    for i in 0..n / 2 {
        let _ = writeln!(p, "\tadd.f32 %f_sum, %f_sum, %d{i};");
    }
    let _ = write!(
        p,
        "\tmov.u32 %r_tmp, %ctaid.x;
\tmad.lo.u32 %r_tmp, %r_tmp, {threads}, %r_tid;
\tmul.wide.u32 %rd_tmp, %r_tmp, 4;
\tadd.s64 %rd_tmp, %rd_out, %rd_tmp;
\tst.global.f32 [%rd_tmp], %f_sum;
END:
\tret;
}}
"
    );
    p
}

fn timed_wgmma_name(n: usize, warpgroups: u32) -> String {
    format!("timed_wgmma_m64n{n}k16_{warpgroups}wg")
}

/// mma.sync's rate for comparison: `warps` warps a block, each issuing `iters` x 8 independent
/// m16n8k16 bf16 mma.sync (8 accumulators, so latency is hidden) on register operands.
const TIMED_MMA_SYNC_NAME: &str = "timed_mma_sync_m16n8k16";
const MMA_SYNC_CHAINS: usize = 8;
fn timed_mma_sync_ptx(warps: u32) -> String {
    let name = TIMED_MMA_SYNC_NAME;
    let threads = 32 * warps;
    let mut p = String::from(".version 8.0\n.target sm_90a\n.address_size 64\n\n");
    let _ = write!(
        p,
        ".visible .entry {name}(
\t.param .u64 {name}_out,
\t.param .u32 {name}_iters,
\t.param .u32 {name}_store
)
.reqntid {threads}, 1, 1
{{
\t.reg .pred %p_done, %p_store;
\t.reg .b32 %r_a<4>, %r_b<2>, %r_iter, %r_tid, %r_tmp;
\t.reg .b64 %rd_out, %rd_tmp;
\t.reg .f32 %d<{acc}>, %f_sum;

\tld.param.u64 %rd_out, [{name}_out];
\tcvta.to.global.u64 %rd_out, %rd_out;
\tld.param.u32 %r_iter, [{name}_iters];
\tld.param.u32 %r_tmp, [{name}_store];
\tsetp.ne.u32 %p_store, %r_tmp, 0;
\tmov.u32 %r_tid, %tid.x;
\tmov.u32 %r_a0, 0x3C003C00;
\tmov.u32 %r_a1, 0x3C003C00;
\tmov.u32 %r_a2, 0x3C003C00;
\tmov.u32 %r_a3, 0x3C003C00;
\tmov.u32 %r_b0, 0x3C003C00;
\tmov.u32 %r_b1, 0x3C003C00;
",
        acc = 4 * MMA_SYNC_CHAINS,
    );
    for i in 0..4 * MMA_SYNC_CHAINS {
        let _ = writeln!(p, "\tmov.f32 %d{i}, 0f00000000;");
    }
    p.push_str("MMA_LOOP:\n");
    for c in 0..MMA_SYNC_CHAINS {
        let d = format!(
            "%d{}, %d{}, %d{}, %d{}",
            4 * c,
            4 * c + 1,
            4 * c + 2,
            4 * c + 3
        );
        let _ = writeln!(
            p,
            "\tmma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {{{d}}}, {{%r_a0, %r_a1, %r_a2, %r_a3}}, {{%r_b0, %r_b1}}, {{{d}}};"
        );
    }
    p.push_str(
        "\tsub.u32 %r_iter, %r_iter, 1;
\tsetp.ne.u32 %p_done, %r_iter, 0;
\t@%p_done bra MMA_LOOP;
\t@!%p_store bra END;
\tmov.f32 %f_sum, 0f00000000;
",
    );
    for i in 0..4 * MMA_SYNC_CHAINS {
        let _ = writeln!(p, "\tadd.f32 %f_sum, %f_sum, %d{i};");
    }
    let _ = write!(
        p,
        "\tmov.u32 %r_tmp, %ctaid.x;
\tmad.lo.u32 %r_tmp, %r_tmp, {threads}, %r_tid;
\tmul.wide.u32 %rd_tmp, %r_tmp, 4;
\tadd.s64 %rd_tmp, %rd_out, %rd_tmp;
\tst.global.f32 [%rd_tmp], %f_sum;
END:
\tret;
}}
"
    );
    p
}

/// The checked variants, in the order they run.
fn variants() -> Vec<Variant> {
    let mut list = Vec::new();
    let mut push = |n, swizzle, b_layout, k_steps| {
        list.push(Variant {
            n,
            swizzle,
            b_layout,
            k_steps,
            swap_lbo_sbo: false,
        })
    };
    // One k16 step first: descriptors and layouts without the k advance.
    push(64, 128, BLayout::KMajor, 1);
    push(64, 128, BLayout::NMajor, 1);
    // BLOCK_K = 64 with 128-byte swizzle (four k-steps), N = 8, 64, 256.
    for n in [8, 64, 256] {
        push(n, 128, BLayout::KMajor, 4);
        push(n, 128, BLayout::NMajor, 4);
    }
    // BLOCK_K = 32 with 64-byte swizzle (64-byte rows, two k-steps).
    for n in [8, 64, 256] {
        push(n, 64, BLayout::KMajor, 2);
        push(n, 64, BLayout::NMajor, 2);
    }
    // K past one swizzle row (D = 128 in Q.K^T, BLOCK_K = 64 with 64-byte rows): K-major tiles
    // in two column panels, the k-step crossing into the second panel; N-major B over 128 rows.
    push(64, 128, BLayout::KMajor, 8);
    push(64, 128, BLayout::NMajor, 8);
    push(64, 64, BLayout::KMajor, 4);
    list
}

/// Timed configurations: (N, warpgroups a block). m64n256 needs 128 accumulator registers a
/// thread, so four such warpgroups (512 threads) do not fit the 64K-register file: 2 at most.
const TIMED: [(usize, u32); 3] = [(256, 1), (256, 2), (128, 4)];
const MMA_SYNC_WARPS: u32 = 16;

/// Exactly representable bf16 values k / 64, k in [1, 127], random sign: never zero, and
/// every dot product of up to 128 of them is exact in f32 (sums < 2^24 / 4096), so a correct
/// result matches exactly.
fn bf16_values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = ((s >> 33) % 127 + 1) as f32;
            let sign = if (s >> 62) & 1 == 1 { -1.0 } else { 1.0 };
            sign * k / 64.0
        })
        .collect()
}

fn bf16_bytes(v: &[f32]) -> Vec<u8> {
    // The values are exact in bf16: the top half of the f32 bits.
    v.iter()
        .flat_map(|x| ((x.to_bits() >> 16) as u16).to_le_bytes())
        .collect()
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Runs one checking variant; returns whether it passed.
fn run_variant(rt: &CudaRuntime, v: &Variant) -> Result<bool, Error> {
    let (m, n, k) = (64, v.n, v.k());
    let a = bf16_values(m * k, 11 + v.n as u64);
    let b = bf16_values(k * n, 29 + v.k() as u64);
    // b is the logical B[k][n]; stored as [N, K] for K-major, [K, N] for N-major.
    let b_stored: Vec<f32> = match v.b_layout {
        BLayout::KMajor => (0..n)
            .flat_map(|j| (0..k).map(move |kk| (j, kk)))
            .map(|(j, kk)| b[kk * n + j])
            .collect(),
        BLayout::NMajor => b.clone(),
    };
    let reference: Vec<f64> = (0..m * n)
        .map(|idx| {
            let (i, j) = (idx / n, idx % n);
            (0..k)
                .map(|kk| a[i * k + kk] as f64 * b[kk * n + j] as f64)
                .sum()
        })
        .collect();
    let ptx = probe_ptx(v);
    let kernel = rt.load(&ptx, &v.name(), &|_| None)?;
    let da = rt.alloc(m * k * 2)?;
    let db = rt.alloc(k * n * 2)?;
    let dout = rt.alloc_uninit(m * n * 4)?;
    rt.htod(&da, &bf16_bytes(&a))?;
    rt.htod(&db, &bf16_bytes(&b_stored))?;
    rt.fill_u32(&dout, 0x7fc0_0000)?;
    let smem = (v.a_tile().bytes() + v.b_tile().bytes() + 1024) as u32;
    rt.launch(
        &kernel,
        [1, 1, 1],
        [WARPGROUP, 1, 1],
        smem,
        &[da.param(), db.param(), dout.param()],
    )?;
    rt.synchronize()?;
    let mut bytes = vec![0u8; m * n * 4];
    rt.dtoh(&dout, &mut bytes)?;
    let out = f32s(&bytes);
    let tolerance = 1e-3;
    let errors: Vec<f64> = out
        .iter()
        .zip(&reference)
        .map(|(&o, &r)| {
            if o.is_finite() {
                (o as f64 - r).abs()
            } else {
                f64::INFINITY
            }
        })
        .collect();
    let max_err = errors.iter().cloned().fold(0.0, f64::max);
    let bad = errors.iter().filter(|&&e| e > tolerance).count();
    let pass = bad == 0;
    println!(
        "{} {:<32} max |err| {max_err:e}{}",
        if pass { "PASS" } else { "FAIL" },
        v.name(),
        if pass {
            String::new()
        } else {
            format!(
                ", {bad} of {} wrong ({} not finite)",
                m * n,
                out.iter().filter(|o| !o.is_finite()).count()
            )
        }
    );
    if let Some(first) = errors.iter().position(|&e| e > tolerance) {
        let (i, j) = (first / n, first % n);
        let got = out[first];
        let same = reference
            .iter()
            .position(|&r| (got as f64 - r).abs() <= tolerance);
        println!(
            "     first wrong C[{i}][{j}] = {got} (want {}); {}",
            reference[first],
            match same {
                Some(s) => format!("equals the reference's C[{}][{}]", s / n, s % n),
                None => "equals no reference element".to_string(),
            }
        );
    }
    Ok(pass)
}

/// (entry name, PTX) of every kernel the probe can run, alternatives included.
fn all_kernels() -> Vec<(String, String)> {
    let mut kernels: Vec<(String, String)> = Vec::new();
    for v in variants() {
        kernels.push((v.name(), probe_ptx(&v)));
        if v.b_layout == BLayout::NMajor {
            let alt = Variant {
                swap_lbo_sbo: true,
                ..v
            };
            kernels.push((alt.name(), probe_ptx(&alt)));
        }
    }
    for (n, wg) in TIMED {
        kernels.push((timed_wgmma_name(n, wg), timed_wgmma_ptx(n, wg)));
    }
    kernels.push((
        TIMED_MMA_SYNC_NAME.to_string(),
        timed_mma_sync_ptx(MMA_SYNC_WARPS),
    ));
    kernels
}

/// Times `launch` (after one warm-up), best of five, in milliseconds.
fn best_ms(
    rt: &CudaRuntime,
    launch: &dyn Fn() -> Result<(), tegula_cuda::CudaError>,
) -> Result<f64, Error> {
    launch()?;
    rt.synchronize()?;
    let mut best = f64::MAX;
    for _ in 0..5 {
        best = best.min(rt.time(launch)? as f64);
    }
    Ok(best)
}

/// The GPU's runtime, after checking that the GPU tests were asked for (`TEGULA_GPU_TESTS=1`)
/// and that the GPU has wgmma (sm_90): otherwise the test fails, saying which.
fn hopper() -> CudaRuntime {
    let asked = std::env::var("TEGULA_GPU_TESTS").is_ok_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "on" | "yes"
        )
    });
    assert!(
        asked,
        "GPU tests run with TEGULA_GPU_TESTS=1 on a machine with a GPU: \
         TEGULA_GPU_TESTS=1 cargo test -- --ignored"
    );
    let rt = CudaRuntime::new(0).unwrap_or_else(|e| panic!("TEGULA_GPU_TESTS=1, but no GPU: {e}"));
    let info = rt.device_info();
    println!(
        "{} (sm_{}{}), {} SMs",
        info.name, info.compute_capability.0, info.compute_capability.1, info.sm_count
    );
    assert!(
        info.compute_capability.0 >= 9,
        "wgmma needs sm_90 or newer, this GPU is sm_{}{}",
        info.compute_capability.0,
        info.compute_capability.1
    );
    rt
}

#[test]
#[ignore = "needs a GPU: TEGULA_GPU_TESTS=1 cargo test -- --ignored"]
fn wgmma_variants_match_float64_on_the_gpu() -> Result<(), Error> {
    let rt = hopper();
    let mut failed = Vec::new();
    for v in variants() {
        let (a, b) = (v.a_tile(), v.b_tile());
        let b_k_major = v.b_layout == BLayout::KMajor;
        let (lbo, sbo) = offsets(b, b_k_major);
        println!(
            "---- {}: A {}x{} K-major, B {:?} ({}x{} stored), {}B swizzle; B LBO {lbo} SBO {sbo}; A SBO {}",
            v.name(),
            a.rows,
            a.cols,
            v.b_layout,
            b.rows,
            b.cols,
            v.swizzle,
            offsets(a, true).1
        );
        if !run_variant(&rt, &v)? {
            failed.push(v.name());
            if v.b_layout == BLayout::NMajor {
                let alt = Variant {
                    swap_lbo_sbo: true,
                    ..v
                };
                println!("     retry with LBO {sbo} and SBO {lbo}:");
                run_variant(&rt, &alt)?;
            }
        }
    }
    if failed.is_empty() {
        println!("all wgmma variants passed");
        Ok(())
    } else {
        Err(format!("wgmma variants failed: {}", failed.join(", ")).into())
    }
}

#[test]
#[ignore = "needs a GPU: TEGULA_GPU_TESTS=1 cargo test -- --ignored"]
fn wgmma_and_mma_sync_rates_on_the_gpu() -> Result<(), Error> {
    let rt = hopper();
    let info = rt.device_info();
    // Timed loops: FLOP per block and launch, TFLOP/s for the chip and per SM.
    let sms = info.sm_count;
    let out = rt.alloc(sms as usize * 1024 * 4)?;
    let tflops = |flops: f64, ms: f64| flops / (ms * 1e-3) / 1e12;
    for (n, wg) in TIMED {
        let kernel = rt.load(&timed_wgmma_ptx(n, wg), &timed_wgmma_name(n, wg), &|_| None)?;
        let iters = 2048u32;
        let smem = (64 * 128 + n * 128 + 1024) as u32;
        let args = [out.param(), KernelParam::U32(iters), KernelParam::U32(0)];
        let launch = || rt.launch(&kernel, [sms, 1, 1], [WARPGROUP * wg, 1, 1], smem, &args);
        let ms = best_ms(&rt, &launch)?;
        let flops = sms as f64 * wg as f64 * iters as f64 * 4.0 * 2.0 * 64.0 * n as f64 * 16.0;
        println!(
            "timed wgmma m64n{n}k16, {wg} warpgroup(s) a block, {sms} blocks: {ms:.3} ms, {:.0} TFLOP/s chip, {:.2} TFLOP/s an SM ({} regs)",
            tflops(flops, ms),
            tflops(flops, ms) / sms as f64,
            kernel.resources().registers_per_thread
        );
    }
    let kernel = rt.load(
        &timed_mma_sync_ptx(MMA_SYNC_WARPS),
        TIMED_MMA_SYNC_NAME,
        &|_| None,
    )?;
    let iters = 8192u32;
    let args = [out.param(), KernelParam::U32(iters), KernelParam::U32(0)];
    let launch = || rt.launch(&kernel, [sms, 1, 1], [32 * MMA_SYNC_WARPS, 1, 1], 0, &args);
    let ms = best_ms(&rt, &launch)?;
    let flops = sms as f64
        * MMA_SYNC_WARPS as f64
        * iters as f64
        * MMA_SYNC_CHAINS as f64
        * 2.0
        * 16.0
        * 8.0
        * 16.0;
    println!(
        "timed mma.sync m16n8k16, {MMA_SYNC_WARPS} warps a block x {MMA_SYNC_CHAINS} chains, {sms} blocks: {ms:.3} ms, {:.0} TFLOP/s chip, {:.2} TFLOP/s an SM",
        tflops(flops, ms),
        tflops(flops, ms) / sms as f64
    );
    Ok(())
}

/// The probe's kernels and layouts without a GPU.
mod model {
    use super::*;
    use std::collections::HashMap;

    /// The descriptor the PTX builds for shared address `addr`.
    fn descriptor(addr: usize, high: u64) -> u64 {
        ((addr as u64 & 0x3ffff) >> 4) | high
    }

    /// The shared address a wgmma reads for element (mn, k) of its k16 step, from the descriptor
    /// alone, per the PTX ISA's canonical layouts (as CUTLASS's GmmaDescriptor documents them):
    /// an independent statement of what `Tile::byte_offset` and the descriptors must agree with.
    fn hardware_address(desc: u64, mn: usize, k: usize, k_major: bool) -> usize {
        let field = |shift: u32| (((desc >> shift) & 0x3fff) << 4) as usize;
        let (start, lbo, sbo) = (field(0), field(16), field(32));
        let width = match desc >> 62 {
            1 => 128,
            2 => 64,
            3 => 32,
            mode => panic!("swizzle mode {mode} is not swizzled"),
        };
        let linear = if k_major {
            // Rows of `width` bytes hold K contiguously; groups of 8 MN rows at SBO; LBO unused.
            start + (mn % 8) * width + (mn / 8) * sbo + 2 * k
        } else {
            // `width / 2` MN contiguous per row, the next ones at LBO; 8 K rows of `width` bytes,
            // the next 8 at SBO.
            let per_row = width / 2;
            start + 2 * (mn % per_row) + (mn / per_row) * lbo + (k % 8) * width + (k / 8) * sbo
        };
        linear ^ (((linear >> 7) & (width / 16 - 1)) << 4)
    }

    /// Which operand element each shared byte address holds: ('A' or 'B', stored row, col).
    fn shared_contents(v: &Variant, base: usize) -> HashMap<usize, (char, usize, usize)> {
        let mut map = HashMap::new();
        for (which, tile, start) in [
            ('A', v.a_tile(), base),
            ('B', v.b_tile(), base + v.a_tile().bytes()),
        ] {
            for row in 0..tile.rows {
                for col in 0..tile.cols {
                    let off = tile.byte_offset(row, col);
                    assert!(
                        off + 2 <= tile.bytes(),
                        "{which}[{row}][{col}] outside its tile"
                    );
                    let old = map.insert(start + off, (which, row, col));
                    assert!(old.is_none(), "{which}[{row}][{col}] overwrites {old:?}");
                }
            }
        }
        map
    }

    /// Operand elements the modelled wgmma reads wrong, over every k-step of a variant.
    fn misread_elements(v: &Variant) -> usize {
        let base = 3 * 1024;
        let map = shared_contents(v, base);
        let b_k_major = v.b_layout == BLayout::KMajor;
        let (a, b) = (v.a_tile(), v.b_tile());
        let mut wrong = 0;
        for step in 0..v.k_steps {
            let desc_a = descriptor(base + k_step_offset(a, true, step), v.a_descriptor_high());
            let b_start = base + a.bytes() + k_step_offset(b, b_k_major, step);
            let desc_b = descriptor(b_start, v.b_descriptor_high());
            for k in 0..16 {
                let kk = 16 * step + k;
                for m in 0..64 {
                    let got = map.get(&hardware_address(desc_a, m, k, true));
                    wrong += usize::from(got != Some(&('A', m, kk)));
                }
                for n in 0..v.n {
                    let want = if b_k_major {
                        ('B', n, kk)
                    } else {
                        ('B', kk, n)
                    };
                    let got = map.get(&hardware_address(desc_b, n, k, b_k_major));
                    wrong += usize::from(got != Some(&want));
                }
            }
        }
        wrong
    }

    #[test]
    fn every_variant_reads_its_tiles_under_the_isa_layouts() {
        for v in variants() {
            assert_eq!(misread_elements(&v), 0, "{}", v.name());
        }
    }

    #[test]
    fn swapped_lbo_and_sbo_misread_n_major_b() {
        for v in variants() {
            if v.b_layout == BLayout::NMajor {
                let alt = Variant {
                    swap_lbo_sbo: true,
                    ..v
                };
                assert!(misread_elements(&alt) > 0, "{}", alt.name());
            }
        }
    }

    #[test]
    fn descriptor_fields_land_in_their_bits() {
        // 128B swizzle, LBO 16 B, SBO 1024 B, start 0x400: CUTLASS's K-major bf16 tile.
        let d = descriptor(0x400, descriptor_high_bits(16, 1024, 128));
        assert_eq!(d, (1u64 << 62) | (64u64 << 32) | (1 << 16) | 0x40);
        assert_eq!(descriptor_high_bits(16, 512, 64) >> 62, 2);
    }

    /// Every kernel assembles for sm_90a with ptxas, without spills; ptxas comes from
    /// $TEGULA_PTXAS, `.tools/nvcc` or PATH (scripts/test.sh installs it), missing is a failure.
    #[test]
    fn every_kernel_assembles_for_sm_90a_without_spills() {
        let ptxas = tegula_ptx::ptxas::find()
            .expect("ptxas not found: run scripts/ptxas.sh (or set TEGULA_PTXAS)");
        let dir = tempfile::tempdir().unwrap();
        for (name, ptx) in all_kernels() {
            let report = tegula_ptx::ptxas::assemble(&ptxas, &ptx, 90, dir.path(), &name)
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(report.spill_stores, 0, "{name} spills:\n{}", report.log);
            assert!(
                report.registers > 0,
                "{name}: no register count in\n{}",
                report.log
            );
        }
    }
}
