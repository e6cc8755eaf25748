//! A loop's own pipeline stages (`range(..).num_stages(s)`) on the GPU: the compiled loop has
//! the loop's count whatever the launch asks for, and the product is the same as without it.
//!
//! Ignored without a GPU (CI has none): `TEGULA_GPU_TESTS=1 cargo test -p tegula --test
//! gpu_loop_stages -- --ignored`. Asked to run without `TEGULA_GPU_TESTS=1` or without a GPU,
//! it fails, saying which.

use tegula::prelude::*;

fn gpu() -> Device {
    assert!(
        tegula::env::bool_var("TEGULA_GPU_TESTS", false),
        "GPU tests run with TEGULA_GPU_TESTS=1 on a machine with a GPU: \
         TEGULA_GPU_TESTS=1 cargo test -- --ignored"
    );
    Device::cuda(0).unwrap_or_else(|e| panic!("TEGULA_GPU_TESTS=1, but no GPU: {e}"))
}

#[tegula::kernel]
fn matmul(
    a: Ptr<f16>,
    b: Ptr<f16>,
    c: Ptr<f32>,
    m: i32,
    n: i32,
    k: i32,
    #[constexpr] bm: usize,
    #[constexpr] bn: usize,
    #[constexpr] bk: usize,
    #[constexpr] num_stages: u32,
) {
    let rows = program_id(0) * bm + arange(0, bm as i64);
    let cols = program_id(1) * bn + arange(0, bn as i64);
    let ks = arange(0, bk as i64);
    let mut acc = zeros::<f32>([bm, bn]);
    for start in range(0, k, bk).num_stages(num_stages) {
        let kk = start + ks;
        let at = load(
            a + rows.col() * k + kk.row(),
            rows.lt(m).col() & kk.lt(k).row(),
            0.0,
        );
        let bt = load(
            b + kk.col() * n + cols.row(),
            kk.lt(k).col() & cols.lt(n).row(),
            0.0,
        );
        acc = dot_acc(at, bt, acc);
    }
    store(
        c + rows.col() * n + cols.row(),
        acc,
        rows.lt(m).col() & cols.lt(n).row(),
    );
}

#[test]
#[ignore = "needs a GPU: TEGULA_GPU_TESTS=1 cargo test -- --ignored"]
fn a_loops_own_stages_on_the_gpu() -> tegula::Result<()> {
    let dev = gpu();
    let (m, n, k) = (256usize, 192usize, 1000usize);
    let a = dev.randn::<f16>([m, k])?;
    let b = dev.randn::<f16>([k, n])?;
    let (ah, bh) = (a.to_f64_vec()?, b.to_f64_vec()?);
    let want: Vec<f64> = (0..m * n)
        .map(|i| (0..k).map(|j| ah[i / n * k + j] * bh[j * n + i % n]).sum())
        .collect();
    let grid = [(m / 64) as u32, (n / 64) as u32];
    // (the loop's stages, the launch's): the loop's count wins either way, 1 included.
    for (stages, launch) in [(2, 4), (4, 1), (1, 3), (3, 3)] {
        let config = LaunchConfig::new(4, launch);
        let c = dev.zeros::<f32>([m, n])?;
        let args = (m as i32, n as i32, k as i32);
        let report = matmul::plan(
            &dev, grid, config, &a, &b, &c, args.0, args.1, args.2, 64, 64, 32, stages,
        )?;
        let l = &report.loops[0];
        assert_eq!((l.stages, l.asked), (stages, stages), "{report}");
        assert!(!report.stages_lost(), "{report}");
        matmul::launch_with(
            &dev, grid, config, &a, &b, &c, args.0, args.1, args.2, 64, 64, 32, stages,
        )?;
        let got = c.to_f64_vec()?;
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-3 + 1e-4 * w.abs(),
                "stages {stages} (launch {launch}), element {i}: {g} vs {w}"
            );
        }
    }
    Ok(())
}
