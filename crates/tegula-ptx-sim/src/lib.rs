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
//! What it refuses (a race, a non-uniform branch, a touch of a pending register, an
//! instruction it does not model) it refuses by panicking with a message, as a failed
//! assertion of the test would: [`run_ptx`] panics, [`try_run_ptx`] returns the message.

mod machine;
mod parse;

use machine::{run_cta, Gmem, GBASE, GSPAN};
use std::collections::HashMap;

pub use machine::tf32;

/// A kernel argument.
#[derive(Clone, Copy, Debug)]
pub enum Arg<'a> {
    /// A buffer in global memory: its initial bytes.
    Buf(&'a [u8]),
    I32(i32),
    F32(f32),
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
    let mut params = HashMap::new();
    for (i, a) in args.iter().enumerate() {
        let name = names[i].clone();
        let v = match a {
            Arg::Buf(b) => {
                gmem.bufs.push(b.to_vec());
                GBASE + GSPAN * (gmem.bufs.len() as u64 - 1)
            }
            Arg::I32(x) => *x as u32 as u64,
            Arg::F32(x) => x.to_bits() as u64,
        };
        params.insert(name, v);
    }
    let threads = 32 * warps as usize;
    for z in 0..grid[2] {
        for y in 0..grid[1] {
            for x in 0..grid[0] {
                run_cta(&prog, &mut gmem, &params, threads, [x, y, z], grid);
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
