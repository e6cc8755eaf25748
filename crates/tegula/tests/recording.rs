//! A recording device: launches are kept, not run, and compile to the specialization a GPU
//! launch with the same arguments compiles (aligned pointers vectorize, unit strides fold).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tegula::prelude::*;

/// `y[i] = x[i * stride]` for `i < n`.
#[tegula::kernel]
fn strided_copy(x: Ptr<f32>, y: Ptr<f32>, n: i32, stride: i32, #[constexpr] block: usize) {
    let offs = program_id(0) * block as i64 + arange(0, block as i64);
    let mask = offs.lt(n);
    store(y + offs, load(x + offs * stride, mask, 0.0), mask);
}

const BLOCK: usize = 512;

fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen_range(-1.0f32..1.0)).collect()
}

#[test]
fn recording_keeps_the_launch_and_runs_nothing() -> tegula::Result<()> {
    let n = 1001usize;
    let dev = Device::recording(132);
    assert_eq!(dev.sm_count(), Some(132));
    assert_eq!(Device::cpu().sm_count(), None);
    let x = dev.from_slice(&random(n, 1), [n])?;
    let mut y = dev.zeros::<f32>([n])?;
    let grid = n.div_ceil(BLOCK);
    strided_copy::launch(&dev, grid, &x, &mut y, n as i32, 1, BLOCK)?;
    assert!(
        y.to_vec()?.iter().all(|&v| v == 0.0),
        "a recorded launch ran"
    );
    let recorded = dev.take_recorded();
    assert_eq!(recorded.len(), 1);
    let r = &recorded[0];
    assert_eq!(r.name, "strided_copy");
    assert_eq!(r.grid.0, [grid as u32, 1, 1]);
    assert_eq!(r.args.len(), 4);
    assert_eq!(r.kernel.params.len(), 4);
    assert!(dev.take_recorded().is_empty(), "taking empties the record");
    Ok(())
}

#[test]
fn recorded_launch_compiles_the_gpu_specialization() -> tegula::Result<()> {
    // n a multiple of 16 too: the mask then holds over 4-element runs.
    let n = 1008usize;
    let dev = Device::recording(132);
    let x = dev.from_slice(&random(n + 1, 2), [n + 1])?;
    let mut y = dev.zeros::<f32>([n])?;
    let grid = n.div_ceil(BLOCK);
    strided_copy::launch(&dev, grid, &x, &mut y, n as i32, 1, BLOCK)?;
    // The same call on a view one element in: x is no longer 16-byte aligned.
    let shifted = x.narrow(0, 1, n)?;
    strided_copy::launch(&dev, grid, &shifted, &mut y, n as i32, 1, BLOCK)?;
    let recorded = dev.take_recorded();
    assert_eq!(recorded.len(), 2);

    let aligned = tegula::specialize(&recorded[0].kernel, &recorded[0].args)?;
    let facts: Vec<u32> = aligned
        .params
        .iter()
        .map(|p| p.facts.divisibility)
        .collect();
    // x and y 16-byte aligned, n a multiple of 16, the stride 1.
    assert_eq!(facts, [16, 16, 16, 1]);
    let shifted_facts = tegula::specialize(&recorded[1].kernel, &recorded[1].args)?;
    assert_eq!(
        shifted_facts.params[0].facts.divisibility, 4,
        "x one f32 in"
    );
    let target = tegula::compiler::Target { sm: 90 };
    let aligned_ptx = recorded[0].compile(&target)?.ptx;
    let shifted_ptx = recorded[1].compile(&target)?.ptx;
    // Stride 1 is bound, so x's addresses are contiguous: 4-wide loads when aligned only.
    assert!(aligned_ptx.contains("ld.global.v4"), "{aligned_ptx}");
    assert!(!shifted_ptx.contains("ld.global.v4"), "{shifted_ptx}");
    Ok(())
}

/// Below 16 the facts keep the largest power of two: a view two f32s in (8 bytes) and a length
/// of 1000 (8) still give 8-byte loads, where "divisible by 16 or not" would give scalars.
#[test]
fn facts_below_16_keep_their_power_of_two() -> tegula::Result<()> {
    let n = 1000usize;
    let dev = Device::recording(132);
    let x = dev.from_slice(&random(n + 2, 3), [n + 2])?;
    let mut y = dev.zeros::<f32>([n])?;
    let two_in = x.narrow(0, 2, n)?;
    strided_copy::launch(&dev, n.div_ceil(BLOCK), &two_in, &mut y, n as i32, 1, BLOCK)?;
    let recorded = dev.take_recorded();
    let facts: Vec<u32> = tegula::specialize(&recorded[0].kernel, &recorded[0].args)?
        .params
        .iter()
        .map(|p| p.facts.divisibility)
        .collect();
    assert_eq!(facts, [8, 16, 8, 1]);
    assert_eq!(tegula::compiler::fact_bits(&recorded[0].args), "3430|0001");
    let ptx = recorded[0]
        .compile(&tegula::compiler::Target { sm: 90 })?
        .ptx;
    assert!(ptx.contains("ld.global.v2.b32"), "{ptx}");
    assert!(!ptx.contains("ld.global.v4"), "{ptx}");
    Ok(())
}
