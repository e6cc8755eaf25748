//! Tutorial 08 on the interpreter: groups of products of different sizes, programs that walk
//! tiles of several products, the descriptor variant at odd sizes, and the refusal of sizes
//! the unmasked kernel cannot cover.

mod common;
use common::plans;

use tegula::prelude::*;
use tegula_tutorials::common::config;
use tegula_tutorials::t08_grouped_gemm::{
    compare_group, group_gemm_fn, group_gemm_tma_fn, grouped_matmul_launch, random_group, GemmGroup,
};

#[test]
fn products_of_different_sizes_in_one_launch() -> tegula::Result<()> {
    let dev = Device::cpu();
    // 80 + 16 + 2 tiles of 64 x 64 (the tuner's default here): more than NUM_SM = 84, so
    // some programs move on to a tile of a later product.
    let mnk = [(512, 640, 32), (256, 256, 64), (64, 128, 96)];
    let (a, b) = random_group(&dev, &mnk, false)?;
    let c = group_gemm_fn(&a, &b)?;
    let r = compare_group(&a, &b, &c, false)?;
    assert!(r.passed(), "{r:?}");
    Ok(())
}

#[test]
fn few_programs_walk_many_tiles() -> tegula::Result<()> {
    let dev = Device::cpu();
    let mnk = [(128, 64, 64), (64, 192, 32), (192, 128, 128)];
    let (a, b) = random_group(&dev, &mnk, false)?;
    let group = GemmGroup::new(&a, &b, false)?;
    // Not one of the tutorial's configs: 3 programs for 2 + 3 + 6 tiles.
    let meta = config(
        &[
            ("BLOCK_SIZE_M", 64),
            ("BLOCK_SIZE_N", 64),
            ("BLOCK_SIZE_K", 32),
            ("NUM_SM", 3),
        ],
        4,
        3,
    );
    grouped_matmul_launch(&group, &meta)?;
    let r = compare_group(&a, &b, &group.group_c, false)?;
    assert!(r.passed(), "{r:?}");
    Ok(())
}

#[test]
fn the_descriptor_variant_takes_odd_sizes() -> tegula::Result<()> {
    let dev = Device::cpu();
    let mnk = [(37, 131, 77), (1, 17, 5), (130, 129, 65)];
    let (a, b) = random_group(&dev, &mnk, true)?;
    let c = group_gemm_tma_fn(&a, &b)?;
    let r = compare_group(&a, &b, &c, true)?;
    assert!(r.passed(), "{r:?}");
    Ok(())
}

#[test]
fn sizes_the_unmasked_kernel_cannot_cover_are_refused() -> tegula::Result<()> {
    let dev = Device::cpu();
    let (a, b) = random_group(&dev, &[(64, 64, 32), (37, 64, 32)], false)?;
    assert!(matches!(
        group_gemm_fn(&a, &b),
        Err(tegula::Error::Invalid { .. })
    ));
    let (a, b) = random_group(&dev, &[(64, 64, 32)], false)?;
    let b_bad = vec![dev.rand_uniform::<f16>([33, 64], 0.0, 1.0)?];
    assert!(matches!(
        group_gemm_fn(&a, &b_bad),
        Err(tegula::Error::Shape { .. })
    ));
    assert!(matches!(
        group_gemm_fn(&a, &[]),
        Err(tegula::Error::Invalid { .. })
    ));
    let _ = b;
    Ok(())
}

/// The tutorial's kernel as on a GPU (tables of addresses): its `tl.multiple_of(a_ptrs, [16,
/// 16])` hints, whose results it ignores, mark the pointers the table gives (as Triton's do),
/// so the loads are 16-byte vectors the pipeline streams. (The descriptor variant waits for
/// tensor descriptors: its block-pointer stand-in loads carry no such hint.)
#[test]
fn the_k_loops_are_pipelined_at_the_configs_stages_on_sm_90() -> tegula::Result<()> {
    let name = "08-grouped-gemm-square";
    let plans = plans(name, &[4, 256, 256, 256])?;
    let (launch, report) = &plans[0];
    let k_loop = report.loops.iter().find(|l| l.candidate).expect("a k-loop");
    assert_eq!(k_loop.asked, launch.config.num_stages, "{report}");
    assert_eq!(
        k_loop.stages, k_loop.asked,
        "{name}: {:?}\n{report}",
        k_loop.why
    );
    Ok(())
}
