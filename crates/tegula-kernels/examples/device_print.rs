//! `device_print` from a kernel, on the default device (the GPU when there is one):
//! `cargo run --release -p tegula-kernels --example device_print`.
//!
//! Two programs of 8 elements each print their values `x[i] = 100 * pid + i + 0.25` (f32) and
//! the program id. On the GPU every element prints on a line of its own, from the thread that
//! holds it (in no particular order between threads and programs):
//!
//! ```text
//! pid (1, 0, 0) idx (3) x: 103.25 1
//! ```
//!
//! 16 such lines, one per (pid, idx), with `x = 100 * pid + idx + 0.25`. The interpreter prints
//! each program's tile on one line instead: `pid (1, 0, 0) x: [100.25, 101.25, ...] 1`.

use tegula::prelude::*;

const BLOCK: usize = 8;

#[tegula::kernel]
fn print_kernel(x: Ptr<f32>, #[constexpr] block: usize) {
    let pid = program_id(0);
    let v = load_unmasked(x + pid * block + arange(0, block as i64));
    device_print("x:", &[v, pid]);
}

fn main() -> tegula::Result<()> {
    let dev = Device::default()?;
    let data: Vec<f32> = (0..2 * BLOCK)
        .map(|i| (100 * (i / BLOCK) + i % BLOCK) as f32 + 0.25)
        .collect();
    let x = dev.from_slice(&data, [2 * BLOCK])?;
    print_kernel::launch(&dev, 2usize, &x, BLOCK)?;
    // Device printf output is flushed when the host waits for the kernel.
    dev.synchronize()?;
    eprintln!("(printed from {})", dev.name());
    Ok(())
}
