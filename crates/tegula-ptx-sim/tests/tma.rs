//! The TMA and mbarrier model: hand-written kernels (one CTA of 4 warps) that load boxes of odd
//! tensors with `cp.async.bulk.tensor.2d` (out of bounds on every side, swizzled or not), store
//! them back (out of bounds past the end), and feed a wgmma, checked byte for byte against
//! references computed here; and each misuse the simulator refuses, by its message.
//!
//! Every copy obeys the two rules measured on the H200 (which the simulator refuses, tested
//! last): a box's innermost coordinate is a multiple of 16 bytes (4 f32, 8 f16 elements),
//! negative ones included, and a store's coordinates are not negative.

use half::bf16;
use tegula_ptx_sim::{try_run_ptx, Arg, TensorMapArg, TmaSwizzle};

/// A 64-bit LCG (Knuth's MMIX constants), seeded from the clock unless `TMA_SEED` is set: the
/// data is fresh at each run, and a failure names its seed.
struct Lcg(u64);

impl Lcg {
    fn new() -> Self {
        let seed = std::env::var("TMA_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        eprintln!("TMA_SEED={seed}");
        Lcg(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 24
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// The PTX ISA's swizzle tables (5.5.7): 16-byte chunk `c` of 128-byte line `l` holds chunk
/// `c ^ (l % (span / 16))`: where byte `x` of the box (row after row) lies in shared memory.
fn swizzled(x: usize, span: usize) -> usize {
    if span == 0 {
        return x;
    }
    let (line, chunk) = (x / 128, (x / 16) % 8);
    line * 128 + (chunk ^ (line % (span / 16))) * 16 + x % 16
}

fn span(s: TmaSwizzle) -> usize {
    match s {
        TmaSwizzle::None => 0,
        TmaSwizzle::B32 => 32,
        TmaSwizzle::B64 => 64,
        TmaSwizzle::B128 => 128,
    }
}

/// A tensor in a buffer of random bytes (padding included), at `offset`.
struct Tensor {
    bytes: Vec<u8>,
    map: TensorMapArg,
}

impl Tensor {
    /// `dims` innermost first; rows padded to a multiple of 16 bytes (plus `pad` more).
    fn new(
        rng: &mut Lcg,
        elem: u32,
        dims: [u64; 2],
        pad: u64,
        box_dims: [u32; 2],
        swizzle: TmaSwizzle,
        buf: usize,
    ) -> Self {
        let offset = 48;
        let stride = (dims[0] * elem as u64).div_ceil(16) * 16 + pad;
        let len = offset + stride * dims[1] + 32;
        Tensor {
            bytes: rng.bytes(len as usize),
            map: TensorMapArg {
                buf,
                byte_offset: offset,
                elem_bytes: elem,
                dims,
                row_stride_bytes: stride,
                box_dims,
                swizzle,
            },
        }
    }

    fn box_bytes(&self) -> usize {
        (self.map.box_dims[0] * self.map.box_dims[1] * self.map.elem_bytes) as usize
    }

    /// Where element (g0, g1) starts in the buffer, if inside the tensor.
    fn at(&self, g0: i64, g1: i64) -> Option<usize> {
        let m = &self.map;
        let inside = (0..m.dims[0] as i64).contains(&g0) && (0..m.dims[1] as i64).contains(&g1);
        inside.then(|| {
            (m.byte_offset + g1 as u64 * m.row_stride_bytes + g0 as u64 * m.elem_bytes as u64)
                as usize
        })
    }

    /// The box at `c` as the TMA leaves it in shared memory: elements row after row, zeros
    /// outside the tensor, swizzled.
    fn shared_image(&self, c: [i64; 2]) -> Vec<u8> {
        let m = &self.map;
        let e = m.elem_bytes as usize;
        let mut img = vec![0u8; self.box_bytes()];
        for i1 in 0..m.box_dims[1] as i64 {
            for i0 in 0..m.box_dims[0] as i64 {
                let lin = (i1 as usize * m.box_dims[0] as usize + i0 as usize) * e;
                if let Some(g) = self.at(c[0] + i0, c[1] + i1) {
                    for k in 0..e {
                        img[swizzled(lin + k, span(m.swizzle))] = self.bytes[g + k];
                    }
                }
            }
        }
        img
    }

    /// The buffer after a store of the shared `image` of a box at `c`: the elements inside
    /// the tensor replaced, every other byte as it was.
    fn stored(&self, image: &[u8], c: [i64; 2]) -> Vec<u8> {
        let m = &self.map;
        let e = m.elem_bytes as usize;
        let mut out = self.bytes.clone();
        for i1 in 0..m.box_dims[1] as i64 {
            for i0 in 0..m.box_dims[0] as i64 {
                let lin = (i1 as usize * m.box_dims[0] as usize + i0 as usize) * e;
                if let Some(g) = self.at(c[0] + i0, c[1] + i1) {
                    for k in 0..e {
                        out[g + k] = image[swizzled(lin + k, span(m.swizzle))];
                    }
                }
            }
        }
        out
    }
}

const HEAD: &str = ".version 8.0\n.target sm_90a\n.address_size 64\n\n\
                    .extern .shared .align 1024 .b8 smem[];\n\n";

/// The load kernel: thread 0 initializes the mbarrier (after the box), arms it with the box's
/// bytes and issues the load at coordinates (p2_c0, p3_c1); every thread waits for phase 0 and
/// copies shared memory out, 4 bytes a thread at a time.
fn load_kernel(bytes: usize) -> String {
    format!(
        "{HEAD}.visible .entry tma_load(
	.param .align 64 .b8 p0_map[128],
	.param .u64 p1_out,
	.param .u32 p2_c0,
	.param .u32 p3_c1,
	.param .u64 p4_tensor
)
.maxntid 128, 1, 1
{{
	.reg .pred %p<8>;
	.reg .b32 %r<32>;
	.reg .b64 %rd<16>;

	mov.u32 %r1, %tid.x;
	mov.u64 %rd1, p0_map;
	cvta.param.u64 %rd2, %rd1;
	ld.param.u64 %rd3, [p1_out];
	ld.param.u32 %r2, [p2_c0];
	ld.param.u32 %r3, [p3_c1];
	mov.u32 %r4, smem;
	add.u32 %r5, %r4, {bytes};
	setp.eq.u32 %p1, %r1, 0;
	@%p1 mbarrier.init.shared::cta.b64 [%r5], 1;
	@%p1 fence.mbarrier_init.release.cluster;
	bar.sync 0;
	@%p1 prefetch.tensormap [%rd2];
	@%p1 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r5], {bytes};
	@%p1 cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r4], [%rd2, {{%r2, %r3}}], [%r5];
$L_wait:
	mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r5], 0;
	@!%p2 bra $L_wait;
	shl.b32 %r6, %r1, 2;
$L_dump:
	add.u32 %r7, %r4, %r6;
	ld.shared.u32 %r8, [%r7];
	mul.wide.u32 %rd4, %r6, 1;
	add.s64 %rd5, %rd3, %rd4;
	st.global.u32 [%rd5], %r8;
	add.u32 %r6, %r6, 512;
	setp.lt.u32 %p3, %r6, {bytes};
	@%p3 bra $L_dump;
	ret;
}}
"
    )
}

const LOAD_NAMES: [&str; 5] = ["p0_map", "p1_out", "p2_c0", "p3_c1", "p4_tensor"];

fn names(n: &[&str]) -> Vec<String> {
    n.iter().map(|s| s.to_string()).collect()
}

/// Runs a load kernel (`ptx`) on `t` at `c`: the shared image it copied out, or the refusal.
fn run_load(ptx: &str, t: &Tensor, c: [i64; 2]) -> Result<Vec<u8>, String> {
    let bytes = t.box_bytes();
    let out = vec![0u8; bytes];
    let args = [
        Arg::TensorMap(t.map),
        Arg::Buf(&out),
        Arg::I32(c[0] as i32),
        Arg::I32(c[1] as i32),
        Arg::Buf(&t.bytes),
    ];
    let bufs = try_run_ptx(ptx, bytes + 8, &names(&LOAD_NAMES), 4, [1, 1, 1], &args)?;
    assert_eq!(bufs[1], t.bytes, "the load wrote its tensor");
    Ok(bufs[0].clone())
}

/// `ptx` with `from` (which must be there) replaced by `to`.
fn edit(ptx: &str, from: &str, to: &str) -> String {
    assert!(ptx.contains(from), "{from:?} not in the kernel");
    ptx.replacen(from, to, 1)
}

fn refused(result: Result<Vec<u8>, String>, why: &[&str]) {
    let err = result.expect_err(&format!("refusal {why:?} expected"));
    for w in why {
        assert!(
            err.contains(w),
            "expected {w:?} in the refusal, got {err:?}"
        );
    }
}

#[test]
fn loads_land_boxes_with_zeros_outside_the_tensor() {
    let mut rng = Lcg::new();
    // f32 tensors 45, 44 and 47 wide, 37 tall (rows of 180, 176 and 188 bytes padded to 192)
    // and a 16 x 32 box: inside, across each edge, from negative coordinates, and wholly
    // outside. Columns 28 and 32 end the box at 44 and 48: exactly at the 44-wide tensor's
    // end, one short of the 45-wide and one past the 47-wide; row 5 ends it exactly at the
    // bottom.
    for (width, pad) in [(45, 0), (44, 16), (47, 0)] {
        let t = Tensor::new(&mut rng, 4, [width, 37], pad, [16, 32], TmaSwizzle::None, 4);
        let ptx = load_kernel(t.box_bytes());
        for c in [
            [0, 0],
            [-4, 20],
            [40, -10],
            [32, 5],
            [28, 5],
            [-20, -40],
            [-12, 36],
            [48, 0],
        ] {
            let want = t.shared_image(c);
            let got = run_load(&ptx, &t, c).unwrap();
            assert_eq!(got, want, "f32 box at {c:?} of a {width}-wide tensor");
            if c == [-20, -40] || c == [48, 0] {
                assert!(got.iter().all(|&b| b == 0), "a box outside is zeros");
            }
        }
    }
}

#[test]
fn swizzled_loads_match_the_tensor_map_layouts() {
    let mut rng = Lcg::new();
    // fp16 tensors of 93 x 37 (186-byte rows, padded to 192 and then 208).
    for (swizzle, box_dims) in [
        (TmaSwizzle::B128, [64, 16]),
        (TmaSwizzle::B128, [32, 32]),
        (TmaSwizzle::B64, [32, 16]),
        (TmaSwizzle::B32, [16, 32]),
        (TmaSwizzle::None, [64, 8]),
    ] {
        let t = Tensor::new(&mut rng, 2, [93, 37], 16, box_dims, swizzle, 4);
        let ptx = load_kernel(t.box_bytes());
        for c in [[-8, 30], [40, -3], [0, 0], [48, 25], [-72, 3]] {
            let want = t.shared_image(c);
            let got = run_load(&ptx, &t, c).unwrap();
            assert_eq!(got, want, "fp16 box {box_dims:?} {swizzle:?} at {c:?}");
        }
        if swizzle == TmaSwizzle::B128 && box_dims == [64, 16] {
            // The 128-byte rows' 16-byte chunks really moved: row 1 starts with chunk 1 of
            // line 1 (its 9th element), row 0 with chunk 0.
            let got = run_load(&ptx, &t, [0, 0]).unwrap();
            let g = |g0, g1| t.at(g0, g1).unwrap();
            assert_eq!(got[128..130], t.bytes[g(8, 1)..g(8, 1) + 2]);
            assert_eq!(got[0..2], t.bytes[g(0, 0)..g(0, 0) + 2]);
        }
    }
}

/// Two boxes through one mbarrier, phase 0 then phase 1, into the same shared bytes (a
/// bar.sync between the first box's reads and the second load).
fn two_phase_kernel(bytes: usize, second_parity: u32) -> String {
    let wait = |label: &str, parity: &str| {
        format!(
            "{label}:
	mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 %p2, [%r5], {parity};
	@!%p2 bra {label};
"
        )
    };
    let dump = |label: &str, out: &str| {
        format!(
            "	shl.b32 %r6, %r1, 2;
{label}:
	add.u32 %r7, %r4, %r6;
	ld.shared.u32 %r8, [%r7];
	mul.wide.u32 %rd4, %r6, 1;
	add.s64 %rd5, {out}, %rd4;
	st.global.u32 [%rd5], %r8;
	add.u32 %r6, %r6, 512;
	setp.lt.u32 %p3, %r6, {bytes};
	@%p3 bra {label};
"
        )
    };
    let issue = |c0: &str, c1: &str| {
        format!(
            "	@%p1 mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%r5], {bytes};
	@%p1 cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r4], [%rd2, {{{c0}, {c1}}}], [%r5];
	@%p1 mbarrier.arrive.shared::cta.b64 %rd9, [%r5];
"
        )
    };
    format!(
        "{HEAD}.visible .entry tma_two(
	.param .align 64 .b8 p0_map[128],
	.param .u64 p1_out,
	.param .u32 p2_c0,
	.param .u32 p3_c1,
	.param .u64 p4_tensor
)
.maxntid 128, 1, 1
{{
	mov.u32 %r1, %tid.x;
	mov.b64 %rd1, p0_map;
	cvta.param.u64 %rd2, %rd1;
	ld.param.u64 %rd3, [p1_out];
	add.s64 %rd6, %rd3, {bytes};
	ld.param.u32 %r2, [p2_c0];
	ld.param.u32 %r3, [p3_c1];
	mov.u32 %r4, smem;
	add.u32 %r5, %r4, {bytes};
	mov.u32 %r10, {second_parity};
	setp.eq.u32 %p1, %r1, 0;
	@%p1 mbarrier.init.shared.b64 [%r5], 1;
	@%p1 fence.proxy.async.shared::cta;
	bar.sync 0;
{}{}{}	bar.sync 0;
{}{}{}	ret;
}}
",
        issue("%r2", "%r3"),
        wait("$L_w0", "0"),
        dump("$L_d0", "%rd3"),
        issue("%r3", "-9"),
        wait("$L_w1", "%r10"),
        dump("$L_d1", "%rd6"),
    )
}

#[test]
fn a_barrier_serves_consecutive_phases() {
    let mut rng = Lcg::new();
    let t = Tensor::new(&mut rng, 2, [93, 37], 0, [64, 16], TmaSwizzle::B128, 4);
    let bytes = t.box_bytes();
    // The first box across the left edge, the second (at (c[1], -9)) across the top.
    let c = [-8i64, 16i64];
    let run = |ptx: &str| {
        let out = vec![0u8; 2 * bytes];
        let args = [
            Arg::TensorMap(t.map),
            Arg::Buf(&out),
            Arg::I32(c[0] as i32),
            Arg::I32(c[1] as i32),
            Arg::Buf(&t.bytes),
        ];
        try_run_ptx(ptx, bytes + 8, &names(&LOAD_NAMES), 4, [1, 1, 1], &args).map(|b| b[0].clone())
    };
    let got = run(&two_phase_kernel(bytes, 1)).unwrap();
    assert_eq!(got[..bytes], t.shared_image(c), "phase 0's box");
    assert_eq!(got[bytes..], t.shared_image([c[1], -9]), "phase 1's box");
    // Waiting on parity 0 again finds phase 0 complete at once: the second box is not in.
    refused(
        run(&two_phase_kernel(bytes, 0)),
        &["read before completion", "mbarrier at shared 0x800"],
    );
}

#[test]
fn waits_that_could_never_return_are_refused() {
    let mut rng = Lcg::new();
    let t = Tensor::new(&mut rng, 4, [45, 37], 0, [16, 32], TmaSwizzle::None, 4);
    let ptx = load_kernel(t.box_bytes());
    let c = [-4, 20];
    let arrive = "@%p1 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r5], 2048;";
    // No arrival at all.
    refused(
        run_load(&edit(&ptx, arrive, ""), &t, c),
        &[
            "mbarrier at shared 0x800",
            "never complete",
            "1 of its 1 arrivals missing",
        ],
    );
    // The bytes expected, but no arrival.
    let expect_only = "@%p1 mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%r5], 2048;";
    refused(
        run_load(&edit(&ptx, arrive, expect_only), &t, c),
        &[
            "1 of its 1 arrivals missing",
            "expect_tx announced 2048 bytes",
        ],
    );
    // An arrival count the one arrival does not reach.
    let init = "mbarrier.init.shared::cta.b64 [%r5], 1;";
    refused(
        run_load(
            &edit(&ptx, init, "mbarrier.init.shared::cta.b64 [%r5], 2;"),
            &t,
            c,
        ),
        &["1 of its 2 arrivals missing"],
    );
    // expect_tx announcing more bytes than the copy brings: the phase never completes.
    refused(
        run_load(&edit(&ptx, arrive, &arrive.replace("2048", "4096")), &t, c),
        &["never complete", "tx-count would end at 2048", "bring 2048"],
    );
    // Fewer: the phase would complete before the copy lands.
    refused(
        run_load(&edit(&ptx, arrive, &arrive.replace("2048", "1024")), &t, c),
        &["tx-count would end at -1024", "before all of them land"],
    );
    // Waiting for phase 1 after phase 0 (a parity no one completes).
    let waited = "@!%p2 bra $L_wait;\n";
    let again = "@!%p2 bra $L_wait;
$L_again:
	mbarrier.try_wait.parity.shared::cta.b64 %p4, [%r5], 1;
	@!%p4 bra $L_again;
";
    refused(
        run_load(&edit(&ptx, waited, again), &t, c),
        &[
            "waits for phase 1, which can never complete",
            "1 of its 1 arrivals missing",
        ],
    );
    // The same kernel, right, terminates.
    assert_eq!(run_load(&ptx, &t, c).unwrap(), t.shared_image(c));
}

#[test]
fn touching_the_box_before_its_phase_completes_is_refused() {
    let mut rng = Lcg::new();
    let t = Tensor::new(&mut rng, 2, [93, 37], 0, [64, 16], TmaSwizzle::B128, 4);
    let ptx = load_kernel(t.box_bytes());
    let c = [-8, 30];
    let wait = "$L_wait:
	mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r5], 0;
	@!%p2 bra $L_wait;
";
    // No wait: the dump reads the box while the copy is in flight.
    refused(
        run_load(&edit(&ptx, wait, ""), &t, c),
        &[
            "read before completion",
            "issued at pc",
            "mbarrier at shared 0x800",
        ],
    );
    // Parity 1 first: phase "-1" is complete, the wait returns at once.
    refused(
        run_load(&edit(&ptx, "[%r5], 0;", "[%r5], 1;"), &t, c),
        &["read before completion"],
    );
    // A thread writing into the box while the load is in flight.
    let issued = "[%r5];\n$L_wait:";
    let scribble = "[%r5];\n\t@%p1 st.shared.u32 [%r4+256], %r1;\n$L_wait:";
    refused(
        run_load(&edit(&ptx, issued, scribble), &t, c),
        &["shared byte 256 written before completion"],
    );
    // Only thread 0 waits: the others read the landed bytes unordered...
    let alone = "$L_wait:
	setp.eq.u32 %p2, %r1, %r1;
	@%p1 mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r5], 0;
	@!%p2 bra $L_wait;
";
    let lone = edit(&ptx, wait, alone);
    refused(run_load(&lone, &t, c), &["did not wait for"]);
    // ... unless a barrier orders them after thread 0's wait.
    let synced = edit(
        &lone,
        "shl.b32 %r6, %r1, 2;",
        "bar.sync 0;\n\tshl.b32 %r6, %r1, 2;",
    );
    assert_eq!(run_load(&synced, &t, c).unwrap(), t.shared_image(c));
}

#[test]
fn barriers_must_be_initialized_visibly() {
    let mut rng = Lcg::new();
    let t = Tensor::new(&mut rng, 4, [45, 37], 0, [16, 32], TmaSwizzle::None, 4);
    let ptx = load_kernel(t.box_bytes());
    let c = [4, 3];
    // The TMA needs the init fenced by its thread (fence.mbarrier_init or fence.proxy.async).
    let fence = "@%p1 fence.mbarrier_init.release.cluster;";
    refused(
        run_load(&edit(&ptx, fence, ""), &t, c),
        &[
            "ran no fence.mbarrier_init",
            "not visible to the async proxy",
        ],
    );
    let proxy = "@%p1 fence.proxy.async.shared::cta;";
    assert_eq!(
        run_load(&edit(&ptx, fence, proxy), &t, c).unwrap(),
        t.shared_image(c)
    );
    // Other threads need a bar.sync after the init.
    refused(
        run_load(&edit(&ptx, "bar.sync 0;", ""), &t, c),
        &["which thread 0 initialized", "with no bar.sync since"],
    );
    // One init, from one thread.
    refused(
        run_load(&edit(&ptx, "@%p1 mbarrier.init", "mbarrier.init"), &t, c),
        &["already initialized (by thread 0"],
    );
    // The barrier is no shared data.
    let dump = "ld.shared.u32 %r8, [%r7];";
    refused(
        run_load(&edit(&ptx, dump, "ld.shared.u32 %r8, [%r5];"), &t, c),
        &["part of an mbarrier"],
    );
}

#[test]
fn tensor_maps_are_opaque_and_checked() {
    let mut rng = Lcg::new();
    let t = Tensor::new(&mut rng, 4, [45, 37], 0, [16, 32], TmaSwizzle::None, 4);
    let ptx = load_kernel(t.box_bytes());
    let c = [0, 0];
    // The handle is no memory.
    let dump = "ld.shared.u32 %r8, [%r7];";
    refused(
        run_load(&edit(&ptx, dump, "ld.global.u32 %r8, [%rd2];"), &t, c),
        &["a tensor map's address"],
    );
    refused(
        run_load(
            &edit(
                &ptx,
                "mov.u64 %rd1, p0_map;",
                "ld.param.u64 %rd1, [p0_map];",
            ),
            &t,
            c,
        ),
        &["p0_map, a tensor map: an opaque object"],
    );
    // The copy takes the generic address.
    let cvta = "cvta.param.u64 %rd2, %rd1;";
    refused(
        run_load(&edit(&ptx, cvta, "mov.u64 %rd2, %rd1;"), &t, c),
        &["cvta.param it"],
    );
    // A tensor map argument needs a tensor map parameter, and the other way round.
    let decl = ".param .align 64 .b8 p0_map[128],";
    refused(
        run_load(&edit(&ptx, decl, ".param .u64 p0_map,"), &t, c),
        &["argument 0 (p0_map) is a tensor map"],
    );
    let out = vec![0u8; 2048];
    let args = [
        Arg::Buf(&out),
        Arg::Buf(&out),
        Arg::I32(0),
        Arg::I32(0),
        Arg::Buf(&t.bytes),
    ];
    let err = try_run_ptx(&ptx, 2056, &names(&LOAD_NAMES), 4, [1, 1, 1], &args).unwrap_err();
    assert!(err.contains("is not a tensor map"), "{err}");
    // What cuTensorMapEncodeTiled refuses.
    let with = |f: &dyn Fn(&mut TensorMapArg)| {
        let mut t2 = Tensor {
            bytes: t.bytes.clone(),
            map: t.map,
        };
        f(&mut t2.map);
        run_load(&ptx, &t2, c)
    };
    refused(
        with(&|m| m.swizzle = TmaSwizzle::B32),
        &["inner row is 64 bytes, more than the 32-byte swizzle span"],
    );
    refused(with(&|m| m.box_dims = [3, 32]), &["not a multiple of 16"]);
    refused(
        with(&|m| m.box_dims = [16, 300]),
        &["box dimension 1 of size 300"],
    );
    refused(with(&|m| m.row_stride_bytes = 184), &["row stride 184"]);
    refused(with(&|m| m.byte_offset = 40), &["not 16-byte aligned"]);
    refused(with(&|m| m.dims = [45, 370]), &["the tensor ends at byte"]);
    refused(with(&|m| m.buf = 2), &["argument 2 is not a buffer"]);
    // A swizzled box needs its shared destination aligned to the pattern's repeat (1024
    // bytes for 128B), not only to 128.
    let t3 = Tensor::new(&mut rng, 2, [93, 37], 0, [64, 8], TmaSwizzle::B128, 4);
    let ptx3 = load_kernel(t3.box_bytes());
    let off = edit(&ptx3, "[%r4], [%rd2", "[%r9], [%rd2");
    let off = edit(
        &off,
        "setp.eq.u32 %p1",
        "add.u32 %r9, %r4, 128;\n\tsetp.eq.u32 %p1",
    );
    refused(
        run_load(&off, &t3, c),
        &["shared destination 0x80 is not 1024-byte aligned"],
    );
    // Without swizzle, 128 bytes do.
    let t4 = Tensor::new(&mut rng, 2, [93, 37], 0, [64, 8], TmaSwizzle::None, 4);
    let off = off.replace("add.u32 %r9, %r4, 128;", "add.u32 %r9, %r4, 0;");
    assert_eq!(run_load(&off, &t4, c).unwrap(), t4.shared_image(c));
}

/// The store kernel: every thread copies 4-byte words of the shared image (p1_tile) into
/// shared memory, fences and syncs; thread 0 stores the box at (p2_c0, p3_c1), commits and
/// waits for the group's reads, then its writes.
fn store_kernel(bytes: usize) -> String {
    format!(
        "{HEAD}.visible .entry tma_store(
	.param .align 64 .b8 p0_map[128],
	.param .u64 p1_tile,
	.param .u32 p2_c0,
	.param .u32 p3_c1,
	.param .u64 p4_tensor
)
.maxntid 128, 1, 1
{{
	mov.u32 %r1, %tid.x;
	mov.u64 %rd1, p0_map;
	cvta.param.u64 %rd2, %rd1;
	ld.param.u64 %rd3, [p1_tile];
	ld.param.u32 %r2, [p2_c0];
	ld.param.u32 %r3, [p3_c1];
	mov.u32 %r4, smem;
	setp.eq.u32 %p1, %r1, 0;
	shl.b32 %r6, %r1, 2;
$L_fill:
	mul.wide.u32 %rd4, %r6, 1;
	add.s64 %rd5, %rd3, %rd4;
	ld.global.u32 %r8, [%rd5];
	add.u32 %r7, %r4, %r6;
	st.shared.u32 [%r7], %r8;
	add.u32 %r6, %r6, 512;
	setp.lt.u32 %p3, %r6, {bytes};
	@%p3 bra $L_fill;
	fence.proxy.async.shared::cta;
	bar.sync 0;
	@%p1 cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%rd2, {{%r2, %r3}}], [%r4];
	@%p1 cp.async.bulk.commit_group;
	@%p1 cp.async.bulk.wait_group.read 0;
	@%p1 cp.async.bulk.wait_group 0;
	ret;
}}
"
    )
}

/// Runs a store kernel on `t` with the shared `image` at `c`: the tensor's buffer after.
fn run_store(ptx: &str, t: &Tensor, image: &[u8], c: [i64; 2]) -> Result<Vec<u8>, String> {
    let names = names(&["p0_map", "p1_tile", "p2_c0", "p3_c1", "p4_tensor"]);
    let args = [
        Arg::TensorMap(t.map),
        Arg::Buf(image),
        Arg::I32(c[0] as i32),
        Arg::I32(c[1] as i32),
        Arg::Buf(&t.bytes),
    ];
    let bufs = try_run_ptx(ptx, image.len(), &names, 4, [1, 1, 1], &args)?;
    Ok(bufs[1].clone())
}

#[test]
fn stores_write_the_box_inside_the_tensor_only() {
    let mut rng = Lcg::new();
    for (elem, dims, box_dims, swizzle) in [
        (4, [45, 37], [16, 32], TmaSwizzle::None),
        (2, [93, 37], [64, 16], TmaSwizzle::B128),
        (2, [93, 37], [32, 16], TmaSwizzle::B64),
        (2, [37, 45], [16, 32], TmaSwizzle::B32),
    ] {
        let t = Tensor::new(&mut rng, elem, dims, 16, box_dims, swizzle, 4);
        let image = rng.bytes(t.box_bytes());
        let ptx = store_kernel(t.box_bytes());
        // A store cannot start at a negative coordinate: inside, across the right edge, the
        // bottom and both (half the box past them, the innermost coordinate a multiple of 8
        // elements), and wholly outside past the end.
        let (d0, d1) = (dims[0] as i64, dims[1] as i64);
        let right = (d0 - box_dims[0] as i64 / 2) / 8 * 8;
        let below = d1 - box_dims[1] as i64 / 2;
        let outside = [(d0 + 7) / 8 * 8, d1 + 3];
        for c in [[0, 0], [right, 0], [0, below], [right, below], outside] {
            let got = run_store(&ptx, &t, &image, c).unwrap();
            let want = t.stored(&image, c);
            assert_eq!(got, want, "store of {box_dims:?} {swizzle:?} at {c:?}");
            if c == outside {
                assert_eq!(got, t.bytes, "a box outside writes nothing");
            } else {
                assert_ne!(got, t.bytes, "a box in part inside writes");
            }
        }
    }
}

#[test]
fn a_store_reads_its_box_at_the_group_wait_and_lands_by_the_exit() {
    let mut rng = Lcg::new();
    let t = Tensor::new(&mut rng, 2, [93, 37], 0, [64, 16], TmaSwizzle::B128, 4);
    let image = rng.bytes(t.box_bytes());
    let ptx = store_kernel(t.box_bytes());
    // Across the right edge and the bottom.
    let c = [40, 30];
    let want = t.stored(&image, c);
    // The spelling without `.tile`.
    let untiled = edit(
        &ptx,
        ".shared::cta.tile.bulk_group",
        ".shared::cta.bulk_group",
    );
    assert_eq!(run_store(&untiled, &t, &image, c).unwrap(), want);
    // Never waited for: the bytes still land, at the exit.
    let waits = "@%p1 cp.async.bulk.wait_group.read 0;\n\t@%p1 cp.async.bulk.wait_group 0;\n";
    assert_eq!(
        run_store(&edit(&ptx, waits, ""), &t, &image, c).unwrap(),
        want
    );
    // Not even committed.
    let commit = "@%p1 cp.async.bulk.commit_group;\n";
    let bare = edit(&edit(&ptx, waits, ""), commit, "");
    assert_eq!(run_store(&bare, &t, &image, c).unwrap(), want);
    // After wait_group.read the shared bytes are free again: the store took the old ones.
    let reuse = "@%p1 cp.async.bulk.wait_group.read 0;\n\t@%p1 st.shared.u32 [%r4], %r1;\n";
    let read = "@%p1 cp.async.bulk.wait_group.read 0;\n";
    assert_eq!(
        run_store(&edit(&ptx, read, reuse), &t, &image, c).unwrap(),
        want
    );
    // Before it, overwriting the box (here from thread 0, its issuer) is refused.
    let early = "@%p1 cp.async.bulk.commit_group;\n\t@%p1 st.shared.u32 [%r4+64], %r1;\n";
    refused(
        run_store(&edit(&ptx, commit, early), &t, &image, c),
        &["while a bulk tensor store reads it", "wait_group.read"],
    );
    // `wait_group.read 1` leaves one group pending: this one.
    let one = edit(&ptx, "wait_group.read 0;", "wait_group.read 1;");
    let one = edit(
        &one,
        "@%p1 cp.async.bulk.wait_group 0;\n",
        "@%p1 st.shared.u32 [%r4+64], %r1;\n",
    );
    refused(
        run_store(&one, &t, &image, c),
        &["while a bulk tensor store reads it"],
    );
}

#[test]
fn stores_need_the_writers_fence_proxy_async() {
    let mut rng = Lcg::new();
    let t = Tensor::new(&mut rng, 4, [45, 37], 0, [16, 32], TmaSwizzle::None, 4);
    let image = rng.bytes(t.box_bytes());
    let ptx = store_kernel(t.box_bytes());
    let c = [4, 3];
    let fence = "fence.proxy.async.shared::cta;\n\tbar.sync 0;\n";
    refused(
        run_store(&edit(&ptx, fence, "bar.sync 0;\n"), &t, &image, c),
        &["wrote it (st.shared) and ran no fence.proxy.async since"],
    );
    // The fence after the barrier orders nothing for the storing thread.
    refused(
        run_store(
            &edit(
                &ptx,
                fence,
                "bar.sync 0;\n\tfence.proxy.async.shared::cta;\n",
            ),
            &t,
            &image,
            c,
        ),
        &["fence.proxy.async only after the last barrier"],
    );
    // No barrier at all: other threads' writes are unordered.
    refused(
        run_store(
            &edit(&ptx, fence, "fence.proxy.async.shared::cta;\n"),
            &t,
            &image,
            c,
        ),
        &["with no barrier since"],
    );
    // The right kernel passes.
    assert_eq!(run_store(&ptx, &t, &image, c).unwrap(), t.stored(&image, c));
}

/// A wgmma whose B (two 16 x 16 bf16, N-major, 32-byte swizzle) a TMA load brings in; A from
/// registers: D = A0 B0 - A1 B1.
const TMA_WGMMA: &str = ".visible .entry tma_wgmma(
	.param .u64 p0_a,
	.param .align 64 .b8 p1_bmap[128],
	.param .u64 p2_d,
	.param .u64 p3_b
)
.maxntid 128, 1, 1
{
	mov.u32 %r1, %tid.x;
	ld.param.u64 %rd1, [p0_a];
	mov.u64 %rd20, p1_bmap;
	cvta.param.u64 %rd21, %rd20;
	ld.param.u64 %rd3, [p2_d];
	mov.u32 %r2, smem;
	add.u32 %r30, %r2, 1024;
	setp.eq.u32 %p3, %r1, 0;
	@%p3 mbarrier.init.shared::cta.b64 [%r30], 1;
	@%p3 fence.mbarrier_init.release.cluster;
	bar.sync 0;
	@%p3 mbarrier.arrive.expect_tx.shared::cta.b64 %rd22, [%r30], 1024;
	@%p3 cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r2], [%rd21, {0, 0}], [%r30];
$L_wait:
	mbarrier.try_wait.parity.shared::cta.b64 %p4, [%r30], 0;
	@!%p4 bra $L_wait;
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

fn run_tma_wgmma(ptx: &str, rng: &mut Lcg) -> (Result<Vec<f32>, String>, Vec<f64>) {
    let value = |rng: &mut Lcg| bf16::from_f64((rng.next() % 17) as f64 / 4.0 - 2.0);
    let a: Vec<Vec<bf16>> = (0..2)
        .map(|_| (0..64 * 16).map(|_| value(rng)).collect())
        .collect();
    let b: Vec<Vec<bf16>> = (0..2)
        .map(|_| (0..16 * 16).map(|_| value(rng)).collect())
        .collect();
    // A's wgmma fragment: register j of thread 32w + 4g + q holds row 16w + g + 8 (j % 2),
    // columns 2q + 8 (j / 2) and the next.
    let mut a_words = Vec::new();
    for am in &a {
        for t in 0..128 {
            let (w, g, q) = (t / 32, (t % 32) / 4, t % 4);
            for j in 0..4 {
                let (row, col) = (16 * w + g + 8 * (j % 2), 2 * q + 8 * (j / 2));
                a_words.extend(am[row * 16 + col].to_bits().to_le_bytes());
                a_words.extend(am[row * 16 + col + 1].to_bits().to_le_bytes());
            }
        }
    }
    // B's tensor: 32 rows of 16 bf16, B0's k then B1's, in a buffer with 64-byte rows.
    let mut tensor = rng.bytes(64 * 32);
    for (i, bm) in b.iter().enumerate() {
        for k in 0..16 {
            for n in 0..16 {
                let at = 64 * (16 * i + k) + 2 * n;
                tensor[at..at + 2].copy_from_slice(&bm[k * 16 + n].to_bits().to_le_bytes());
            }
        }
    }
    let map = TensorMapArg {
        buf: 3,
        byte_offset: 0,
        elem_bytes: 2,
        dims: [16, 32],
        row_stride_bytes: 64,
        box_dims: [16, 32],
        swizzle: TmaSwizzle::B32,
    };
    let mut want = vec![0f64; 64 * 16];
    for r in 0..64 {
        for c in 0..16 {
            want[r * 16 + c] = (0..16)
                .map(|k| {
                    let f = |m: &[bf16], i: usize| m[i].to_f64();
                    f(&a[0], r * 16 + k) * f(&b[0], k * 16 + c)
                        - f(&a[1], r * 16 + k) * f(&b[1], k * 16 + c)
                })
                .sum();
        }
    }
    let d = vec![0u8; 128 * 32];
    let names = names(&["p0_a", "p1_bmap", "p2_d", "p3_b"]);
    let args = [
        Arg::Buf(&a_words),
        Arg::TensorMap(map),
        Arg::Buf(&d),
        Arg::Buf(&tensor),
    ];
    let got = try_run_ptx(ptx, 1032, &names, 4, [1, 1, 1], &args).map(|bufs| {
        let words: Vec<f32> = bufs[1]
            .chunks(4)
            .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        let mut d = vec![0f32; 64 * 16];
        for t in 0..128 {
            let (w, g, q) = (t / 32, (t % 32) / 4, t % 4);
            for i in 0..8 {
                let (row, col) = (16 * w + g + 8 * ((i / 2) % 2), 8 * (i / 4) + 2 * q + i % 2);
                d[row * 16 + col] = words[8 * t + i];
            }
        }
        d
    });
    (got, want)
}

#[test]
fn a_wgmma_reads_what_a_tma_load_landed() {
    let mut rng = Lcg::new();
    let ptx = format!("{HEAD}{TMA_WGMMA}");
    let (got, want) = run_tma_wgmma(&ptx, &mut rng);
    // Small integers over 4: the products and sums are exact in f32.
    assert_eq!(
        got.unwrap(),
        want.iter().map(|&x| x as f32).collect::<Vec<_>>()
    );
    // A warpgroup whose threads did not wait (only thread 0 did, no barrier after).
    let wait = "	mbarrier.try_wait.parity.shared::cta.b64 %p4, [%r30], 0;";
    let alone = "	setp.eq.u32 %p4, %r1, %r1;\n\t@%p3 mbarrier.try_wait.parity.shared::cta.b64 %p4, [%r30], 0;";
    let (got, _) = run_tma_wgmma(&edit(&ptx, wait, alone), &mut rng);
    let err = got.unwrap_err();
    assert!(
        err.contains("wgmma") && err.contains("did not wait for"),
        "{err}"
    );
    // No wait at all: the wgmma reads B before the copy lands.
    let loop_ = "$L_wait:\n\tmbarrier.try_wait.parity.shared::cta.b64 %p4, [%r30], 0;\n\t@!%p4 bra $L_wait;\n";
    let (got, _) = run_tma_wgmma(&edit(&ptx, loop_, ""), &mut rng);
    let err = got.unwrap_err();
    assert!(err.contains("read before completion"), "{err}");
}

#[test]
fn a_landed_box_stores_back_without_a_proxy_fence() {
    let mut rng = Lcg::new();
    // Load a box of one tensor and store it into another at other coordinates: the async
    // proxy wrote the bytes, the async proxy reads them, the issuing thread waited.
    let src = Tensor::new(&mut rng, 2, [93, 37], 0, [64, 16], TmaSwizzle::B128, 4);
    let dst = Tensor::new(&mut rng, 2, [70, 41], 32, [64, 16], TmaSwizzle::B128, 6);
    let ptx = load_kernel(src.box_bytes());
    let ptx = edit(
        &ptx,
        ".param .u64 p4_tensor\n",
        ".param .u64 p4_tensor,\n\t.param .align 64 .b8 p5_map[128],\n\t.param .u64 p6_dst\n",
    );
    let ptx = edit(
        &ptx,
        "cvta.param.u64 %rd2, %rd1;",
        "cvta.param.u64 %rd2, %rd1;\n\tmov.u64 %rd8, p5_map;\n\tcvta.param.u64 %rd9, %rd8;",
    );
    let store =
        "@%p1 cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%rd9, {%r3, %r2}], [%r4];
	@%p1 cp.async.bulk.commit_group;
	@%p1 cp.async.bulk.wait_group 0;
	shl.b32 %r6, %r1, 2;";
    let ptx = edit(&ptx, "shl.b32 %r6, %r1, 2;", store);
    // The load across the bottom, the store (at (c[1], c[0]): not negative, and c[1] a
    // multiple of 8) across the right edge.
    let (c, out) = ([8i64, 24i64], vec![0u8; src.box_bytes()]);
    let args = [
        Arg::TensorMap(src.map),
        Arg::Buf(&out),
        Arg::I32(c[0] as i32),
        Arg::I32(c[1] as i32),
        Arg::Buf(&src.bytes),
        Arg::TensorMap(dst.map),
        Arg::Buf(&dst.bytes),
    ];
    let names = names(&[
        "p0_map",
        "p1_out",
        "p2_c0",
        "p3_c1",
        "p4_tensor",
        "p5_map",
        "p6_dst",
    ]);
    let bufs = try_run_ptx(&ptx, src.box_bytes() + 8, &names, 4, [1, 1, 1], &args).unwrap();
    let image = src.shared_image(c);
    assert_eq!(bufs[0], image, "the box loaded");
    assert_eq!(bufs[2], dst.stored(&image, [c[1], c[0]]), "the box stored");
    // Issued by a thread that did not wait (the store from thread 1, only thread 0 waiting).
    let lone = edit(
        &ptx,
        "	mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r5], 0;",
        "	setp.eq.u32 %p2, %r1, %r1;\n\t@%p1 mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r5], 0;\n\tsetp.eq.u32 %p5, %r1, 1;",
    );
    let lone = ["tensor.2d.global", "commit_group", "wait_group"]
        .iter()
        .fold(lone, |k, op| {
            edit(
                &k,
                &format!("@%p1 cp.async.bulk.{op}"),
                &format!("@%p5 cp.async.bulk.{op}"),
            )
        });
    let err = try_run_ptx(&lone, src.box_bytes() + 8, &names, 4, [1, 1, 1], &args).unwrap_err();
    assert!(err.contains("that thread 1 did not wait for"), "{err}");
}

#[test]
fn boxes_whose_rows_would_not_start_16_byte_aligned_are_refused() {
    let mut rng = Lcg::new();
    // The H200 faults (illegal instruction) on a box whose innermost coordinate is not a
    // multiple of 16 bytes: here -3 f16 elements, -6 bytes.
    let t = Tensor::new(&mut rng, 2, [93, 37], 0, [64, 16], TmaSwizzle::B128, 4);
    let ptx = load_kernel(t.box_bytes());
    refused(
        run_load(&ptx, &t, [-3, 5]),
        &[
            "innermost coordinate -3 of 2-byte elements",
            "its rows would not start 16-byte aligned",
        ],
    );
    // -8 f16 elements, 16 bytes, is aligned: it loads, zeros left of the tensor.
    assert_eq!(
        run_load(&ptx, &t, [-8, 5]).unwrap(),
        t.shared_image([-8, 5])
    );
    // A store's rows too: 3 f16 elements.
    let image = rng.bytes(t.box_bytes());
    refused(
        run_store(&store_kernel(t.box_bytes()), &t, &image, [3, 5]),
        &["its rows would not start 16-byte aligned"],
    );
}

#[test]
fn stores_at_negative_coordinates_are_refused() {
    let mut rng = Lcg::new();
    // The H200 faults (illegal instruction) on a store at a negative coordinate, where a load
    // zero-fills: here outer coordinate -1.
    let t = Tensor::new(&mut rng, 4, [45, 37], 0, [16, 32], TmaSwizzle::None, 4);
    let image = rng.bytes(t.box_bytes());
    let ptx = store_kernel(t.box_bytes());
    refused(
        run_store(&ptx, &t, &image, [4, -1]),
        &[
            "a bulk tensor store at coordinates [4, -1]",
            "cannot start at a negative coordinate",
        ],
    );
    // An innermost coordinate of -4 f32 elements is aligned, and refused for its sign.
    refused(
        run_store(&ptx, &t, &image, [-4, 0]),
        &["cannot start at a negative coordinate"],
    );
    // The same box at (4, 0) stores; the load at (4, -1) zero-fills its first row.
    assert_eq!(
        run_store(&ptx, &t, &image, [4, 0]).unwrap(),
        t.stored(&image, [4, 0])
    );
    let load = run_load(&load_kernel(t.box_bytes()), &t, [4, -1]).unwrap();
    assert_eq!(load, t.shared_image([4, -1]));
    assert!(load[..16 * 4].iter().all(|&b| b == 0));
}
