//! A PTX simulator for tegula-ptx's tests: a parser of the PTX the lowering emits and a small
//! SIMT machine (one CTA at a time, all threads in lockstep) that runs it. The simulator
//! implements `ldmatrix`, `mma.sync` and `wgmma` from the PTX ISA's definitions (not from
//! `mma_layout.rs` or `emit/wgmma.rs`), checks that shared-memory accesses of different
//! threads are separated by a barrier, and that branches are uniform. Products on tensor cores
//! are exact; the simulator sums them in f64, so results are compared with a tolerance, not
//! bit for bit. (A test crate, not published: tegula-ptx's tests compile kernels and run them
//! here, `tests/mma_sim.rs` against float64 references.)
//!
//! Asynchrony is modeled at its latest: a `cp.async` lands when its thread's
//! `cp.async.wait_group` retires its group (reading the bytes before is an error; so is a
//! wgmma reading them before the copying thread's `fence.proxy.async` after that wait); a
//! `wgmma.mma_async` runs when a `wgmma.wait_group` retires its group, and until then its
//! registers (accumulator, A fragment) may not be touched by other instructions, nor the
//! shared bytes it reads written. Registers other instructions used need a `wgmma.fence`
//! before a wgmma uses them, and the descriptors must agree across the warpgroup.
//!
//! Hopper's Tensor Memory Accelerator and mbarriers are modeled the same way. A tensor map
//! ([`Arg::TensorMap`], bound to a `.param .align 64 .b8 NAME[128]` parameter, its address
//! taken with `mov` and `cvta.param`) describes a 2-D tensor in a buffer and a box; a
//! `cp.async.bulk.tensor.2d` load copies the box into shared memory (elements outside the
//! tensor read as zeros; the box row after row, swizzled as `CU_TENSOR_MAP_SWIZZLE_*` say) and
//! completes its bytes on an mbarrier. An mbarrier (`mbarrier.init`, `arrive`,
//! `arrive.expect_tx`, `expect_tx`, `try_wait.parity`) has a phase, pending arrivals and a
//! tx-count; a load lands at its latest, when a thread waits on the barrier's phase and every
//! arrival is in: then its bytes are written, the tx-count must come to exactly 0, the phase
//! completes and the wait returns true; the waiting threads may read the bytes with no
//! `bar.sync` (others need one). A wait that could never succeed (arrivals missing, expect_tx
//! bytes more than the attached copies bring, a parity no one completes) is refused instead
//! of spinning, and so are fewer (the phase would complete before its bytes land), touching
//! the bytes before the load lands ("read before completion"), a barrier used by another
//! thread before a `bar.sync` after its `mbarrier.init`, or by the copy before the
//! initializing thread's `fence.mbarrier_init` (or `fence.proxy.async`). A
//! `cp.async.bulk.tensor.2d` store reads its shared box when `cp.async.bulk.wait_group.read`
//! (or `wait_group`) retires its bulk group, or at the kernel's exit, and writes the elements
//! inside the tensor to global memory then: writing those shared bytes before is refused, and
//! so is a store of bytes `st.shared` wrote with no `fence.proxy.async` by the writer after
//! the write (and, another thread's, before a `bar.sync` before the store). Two faults
//! measured on the H200 (illegal instruction) are refused too: a copy, load or store, whose
//! innermost coordinate times the element size is not a multiple of 16 bytes (its rows would
//! not start 16-byte aligned), and a store at a negative coordinate (a load there zero-fills,
//! negative innermost coordinates included when they are multiples of 16 bytes). An mbarrier
//! synchronizes only the TMA landing with its waiters: threads that signal each other through
//! an mbarrier still need a `bar.sync` between their shared accesses. Not modeled (refused as
//! unsupported): other tensor ranks, im2col, multicast, cache hints, bulk reductions,
//! non-tensor `cp.async.bulk`, `mbarrier.test_wait` and state-token waits.
//!
//! What it refuses (a race, a non-uniform branch, a touch of a pending register, an
//! instruction it does not model) it refuses by panicking with a message, as a failed
//! assertion of the test would: [`run_ptx`] panics, [`try_run_ptx`] returns the message.

mod machine;
mod parse;

use machine::{run_cta, Gmem, TensorMap, GBASE, GSPAN};
use std::collections::HashMap;

pub use machine::tf32;

/// A kernel argument.
#[derive(Clone, Copy, Debug)]
pub enum Arg<'a> {
    /// A buffer in global memory: its initial bytes.
    Buf(&'a [u8]),
    I32(i32),
    F32(f32),
    /// A tensor map (`CUtensorMap`, as `cuTensorMapEncodeTiled` makes it) over a tensor in one
    /// of the buffer arguments. Its parameter must be declared `.param .align 64 .b8
    /// NAME[128]`.
    TensorMap(TensorMapArg),
}

/// The shared-memory layout of a tensor map's box: `CU_TENSOR_MAP_SWIZZLE_{NONE, 32B, 64B,
/// 128B}`. The box lies in shared memory row after row (a row: `box_dims[0]` elements, at most
/// the swizzle's span of 32, 64 or 128 bytes); a swizzle then moves each byte's 16-byte chunk
/// within its 128-byte line of shared memory: bits 4-6 of the shared address XOR bits 7-9 for
/// 128B, bits 4-5 XOR 7-8 for 64B, bit 4 XOR bit 7 for 32B (the PTX ISA's swizzling modes).
/// The box's shared address must then be aligned to the pattern, 1024, 512 or 256 bytes
/// (without swizzle, 128).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TmaSwizzle {
    None,
    B32,
    B64,
    B128,
}

/// A 2-D tiled tensor map, the arguments of `cuTensorMapEncodeTiled` that the simulator uses
/// (interleave none, element strides 1, out-of-bounds fill none: zeros).
#[derive(Clone, Copy, Debug)]
pub struct TensorMapArg {
    /// The index, among the kernel's arguments, of the [`Arg::Buf`] the tensor lives in.
    pub buf: usize,
    /// Where the tensor starts in that buffer (16-byte aligned).
    pub byte_offset: u64,
    /// The size of an element: 1, 2, 4 or 8.
    pub elem_bytes: u32,
    /// `globalDim`: the tensor's sizes, the innermost (contiguous) dimension first.
    pub dims: [u64; 2],
    /// `globalStrides[0]`: the bytes between the starts of consecutive rows (a multiple of 16).
    pub row_stride_bytes: u64,
    /// `boxDim`: the box, innermost first (each 1 to 256; the inner row a multiple of 16
    /// bytes).
    pub box_dims: [u32; 2],
    pub swizzle: TmaSwizzle,
}

/// Runs `ptx` (parameters `names`, in order, `shared_bytes` of dynamic shared memory, `warps`
/// warps a CTA) over `grid` and returns the final contents of each buffer argument, in order.
///
/// # Panics
/// When the kernel does something the simulator refuses or does not model (see the crate
/// docs), with a message that says what.
pub fn run_ptx(
    ptx: &str,
    shared_bytes: usize,
    names: &[String],
    warps: u32,
    grid: [u64; 3],
    args: &[Arg],
) -> Vec<Vec<u8>> {
    let prog = parse::parse(ptx, shared_bytes);
    let mut gmem = Gmem { bufs: Vec::new() };
    // Argument index -> its buffer's index in `gmem`.
    let bufs: Vec<Option<usize>> = args
        .iter()
        .scan(0, |n, a| {
            Some(matches!(a, Arg::Buf(_)).then(|| {
                *n += 1;
                *n - 1
            }))
        })
        .collect();
    let mut params = HashMap::new();
    let mut tmaps = Vec::new();
    for (i, a) in args.iter().enumerate() {
        let name = names[i].clone();
        let declared_map = prog.params.get(&name).copied();
        match a {
            Arg::TensorMap(_) => assert!(
                declared_map == Some(true),
                "argument {i} ({name}) is a tensor map: its parameter must be declared \
                 `.param .align 64 .b8 {name}[128]`"
            ),
            _ => assert!(
                declared_map != Some(true),
                "argument {i} ({name}) is not a tensor map, but its parameter is declared as one"
            ),
        }
        let v = match a {
            Arg::Buf(b) => {
                gmem.bufs.push(b.to_vec());
                GBASE + GSPAN * (gmem.bufs.len() as u64 - 1)
            }
            Arg::I32(x) => *x as u32 as u64,
            Arg::F32(x) => x.to_bits() as u64,
            Arg::TensorMap(m) => {
                tmaps.push(TensorMap::new(i, &name, m, args, &bufs));
                TensorMap::param_address(tmaps.len() - 1)
            }
        };
        params.insert(name, v);
    }
    let threads = 32 * warps as usize;
    for z in 0..grid[2] {
        for y in 0..grid[1] {
            for x in 0..grid[0] {
                run_cta(&prog, &mut gmem, &params, &tmaps, threads, [x, y, z], grid);
            }
        }
    }
    gmem.bufs
}

/// [`run_ptx`], with a refusal as `Err(message)` instead of a panic.
pub fn try_run_ptx(
    ptx: &str,
    shared_bytes: usize,
    names: &[String],
    warps: u32,
    grid: [u64; 3],
    args: &[Arg],
) -> Result<Vec<Vec<u8>>, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_ptx(ptx, shared_bytes, names, warps, grid, args)
    }))
    .map_err(|e| {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}
