//! The device's GPU paths of sizes, allocation, views, device errors and empty grids (their
//! interpreter halves are in `sizes_and_devices.rs`), and shape ops, histograms,
//! `reduce_with` and `scan_with` against the interpreter.
//!
//! Ignored without a GPU (CI has none): `TEGULA_GPU_TESTS=1 cargo test -p tegula --test
//! gpu_device -- --ignored` (the README's tests section). Asked to run without
//! `TEGULA_GPU_TESTS=1` or without a GPU, it fails, saying which.

use tegula::prelude::*;
use tegula::Error;

fn gpu() -> Device {
    assert!(
        tegula::env::bool_var("TEGULA_GPU_TESTS", false),
        "GPU tests run with TEGULA_GPU_TESTS=1 on a machine with a GPU: \
         TEGULA_GPU_TESTS=1 cargo test -- --ignored"
    );
    let dev = Device::cuda(0).unwrap_or_else(|e| panic!("TEGULA_GPU_TESTS=1, but no GPU: {e}"));
    dev.set_poison_empty(true);
    dev
}

#[tegula::kernel]
fn copy(x: Ptr<f32>, y: Ptr<f32>, n: i32) {
    let offs = program_id(0) * 16 + arange(0, 16);
    let mask = offs.lt(n);
    store(y + offs, load(x + offs, mask, 0.0), mask);
}

#[test]
#[ignore = "needs a GPU: TEGULA_GPU_TESTS=1 cargo test -- --ignored"]
fn sizes_memory_views_devices_and_empty_grids_on_the_gpu() {
    let dev = gpu();
    assert!(
        dev.name().starts_with(&format!("cuda:0#{} (", dev.id())),
        "{}",
        dev.name()
    );
    // Sizes that overflow, and memory the GPU does not have: typed errors.
    assert!(matches!(
        dev.zeros::<f32>([1usize << 32, 1 << 32]),
        Err(Error::TooLarge { .. })
    ));
    let e = dev.zeros::<f32>([1usize << 44]).unwrap_err();
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
    assert!(e.to_string().contains("out of memory on cuda:0#"), "{e}");
    // Views read and write their own elements.
    let data: Vec<f32> = (0..100).map(|i| i as f32).collect();
    let t = dev.from_slice(&data, [10, 10]).unwrap();
    let v = t.narrow(1, 2, 3).unwrap();
    assert_eq!(v.to_vec().unwrap()[..3], [2.0, 3.0, 4.0]);
    v.copy_from_slice(&[-1.0; 30]).unwrap();
    let all = t.to_vec().unwrap();
    assert_eq!(
        (all[1], all[2], all[4], all[5], all[92]),
        (1.0, -1.0, -1.0, 5.0, -1.0)
    );
    // An empty grid runs nothing, after the arguments are checked.
    let x = dev.full::<f32>([32], 2.0).unwrap();
    let y = dev.zeros::<f32>([32]).unwrap();
    for grid in [[0u32, 1, 1], [2, 0, 1]] {
        copy::launch(&dev, grid, &x, &y, 32).unwrap();
    }
    assert!(y.to_vec().unwrap().iter().all(|&v| v == 0.0));
    copy::launch(&dev, 2u32, &x, &y, 32).unwrap();
    assert_eq!(y.to_vec().unwrap(), vec![2.0; 32]);
    // A GPU tensor in an interpreter launch (and the other way) names the argument.
    let cpu = Device::cpu();
    let z = cpu.zeros::<f32>([32]).unwrap();
    for e in [
        copy::launch(&cpu, 2u32, &x, &z, 32).unwrap_err(),
        copy::launch(&dev, 2u32, &x, &z, 32).unwrap_err(),
    ] {
        assert!(matches!(e, Error::Device { .. }), "{e}");
        assert!(e.to_string().contains("argument `"), "{e}");
    }
}

#[test]
#[ignore = "needs a GPU: TEGULA_GPU_TESTS=1 cargo test -- --ignored"]
fn empty_is_poisoned_only_when_asked() {
    let dev = gpu();
    let x = dev.empty::<f32>([1000]).unwrap();
    assert!(x.to_vec().unwrap().iter().all(|v| v.is_nan()));
    let i = dev.empty::<i32>([77]).unwrap();
    assert!(i.to_vec().unwrap().iter().all(|&v| v == -1));
    // Unpoisoned: whatever the pool held; a kernel writing every element still reads back.
    dev.set_poison_empty(false);
    let data: Vec<f32> = (0..1000).map(|v| v as f32 * 0.5 - 7.0).collect();
    let src = dev.from_slice(&data, [1000]).unwrap();
    let y = dev.empty::<f32>([1000]).unwrap();
    copy::launch(&dev, 63u32, &src, &y, 1000).unwrap();
    assert_eq!(y.to_vec().unwrap(), src.to_vec().unwrap());
}

#[tegula::kernel]
fn shape_ops(x: Ptr<f32>, y: Ptr<f32>) {
    let o = arange(0, 16).col() * 32 + arange(0, 32).row();
    let a = load_unmasked(x + o);
    let b = load_unmasked(x + 512 + o);
    let all = arange(0, 32).col() * 32 + arange(0, 32).row();
    store_unmasked(y + all, cat(a, b, true));
    let wide = arange(0, 16).col() * 64 + arange(0, 64).row();
    store_unmasked(y + 1024 + wide, interleave(a, b));
    let (lo, hi) = split(join(a, b));
    store_unmasked(y + 2048 + o, hi - lo);
}

#[test]
#[ignore = "needs a GPU: TEGULA_GPU_TESTS=1 cargo test -- --ignored"]
fn shape_ops_match_the_interpreter_on_the_gpu() {
    let dev = gpu();
    let cpu = Device::cpu();
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let data: Vec<f32> = (0..1024)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 20) as f32 - 8.0
        })
        .collect();
    let run = |d: &Device| {
        let x = d.from_slice(&data, [1024]).unwrap();
        let y = d.zeros::<f32>([2560]).unwrap();
        shape_ops::launch(d, 1u32, &x, &y).unwrap();
        y.to_vec().unwrap()
    };
    let (got, want) = (run(&dev), run(&cpu));
    assert_eq!(got, want);
    // cat: a's rows, then b's.
    assert_eq!(
        (want[0], want[512], want[1023]),
        (data[0], data[512], data[1023])
    );
}

/// Per program of 256 values: their histogram into 64 bins, the same without multiples of 3,
/// and the histogram of 256 bytes; the values past `n` masked off (or read as 0 and counted).
#[tegula::kernel]
fn histograms(x: Ptr<i32>, bytes: Ptr<u8>, h: Ptr<i32>, n: i32) {
    let i = program_id(0) * 256 + arange(0, 256);
    let m = i.lt(n);
    let v = load(x + i, m, 0);
    let out = h + program_id(0) * 192 + arange(0, 64);
    store_unmasked(out, histogram(v, 64));
    store_unmasked(out + 64, histogram_masked(v, 64, m & (v % 3).ne(0)));
    store_unmasked(out + 128, load(bytes + i, m, 0).histogram_masked(64, m));
}

/// What `histograms` computes, on the host.
fn host_histograms(x: &[i32], bytes: &[u8]) -> Vec<i32> {
    let n = x.len();
    let mut h = vec![0; n.div_ceil(256) * 192];
    for p in 0..n.div_ceil(256) {
        for i in p * 256..(p + 1) * 256 {
            let (v, b) = (x.get(i).copied(), bytes.get(i).copied());
            // Past n the unmasked histogram reads 0 and counts it.
            let v0 = v.unwrap_or(0);
            if (0..64).contains(&v0) {
                h[p * 192 + v0 as usize] += 1;
            }
            if let Some(v) = v.filter(|v| (0..64).contains(v) && v % 3 != 0) {
                h[p * 192 + 64 + v as usize] += 1;
            }
            if let Some(b) = b.filter(|&b| b < 64) {
                h[p * 192 + 128 + b as usize] += 1;
            }
        }
    }
    h
}

#[test]
#[ignore = "needs a GPU: TEGULA_GPU_TESTS=1 cargo test -- --ignored"]
fn histogram_matches_the_interpreter_on_the_gpu() {
    let dev = gpu();
    let cpu = Device::cpu();
    let n = 1000usize;
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    // Values below, inside and past the 64 bins; bytes over all of 0..=255.
    let x: Vec<i32> = (0..n).map(|_| (next() % 80) as i32 - 8).collect();
    let bytes: Vec<u8> = (0..n).map(|_| next() as u8).collect();
    let run = |d: &Device| {
        let xt = d.from_slice(&x, [n]).unwrap();
        let bt = d.from_slice(&bytes, [n]).unwrap();
        let h = d.zeros::<i32>([n.div_ceil(256) * 192]).unwrap();
        histograms::launch(d, n.div_ceil(256) as u32, &xt, &bt, &h, n as i32).unwrap();
        h.to_vec().unwrap()
    };
    let (got, want) = (run(&dev), run(&cpu));
    assert_eq!(want, host_histograms(&x, &bytes));
    assert_eq!(got, want);
}

/// Each row's largest value with its first column (`reduce_with` over (value, index) pairs),
/// a Welford (count, mean, m2) reduction, and the running maximum (`scan_with`).
#[tegula::kernel]
fn row_combines(
    x: Ptr<f32>,
    best: Ptr<f32>,
    at: Ptr<i32>,
    stats: Ptr<f32>,
    running: Ptr<f32>,
    n: i32,
    #[constexpr] block: usize,
) {
    let row = program_id(0);
    let cols = arange(0, block as i64);
    let mask = cols.lt(n);
    let v = load(x + row * n + cols, mask, f32::NEG_INFINITY);
    let (m, i) = reduce_with((v, cols), 0, |(v0, i0), (v1, i1)| {
        let take = v1.gt(v0) | (v1.eq(v0) & i1.lt(i0));
        (select(take, v1, v0), select(take, i1, i0))
    });
    store_unmasked(best + row, m);
    store_unmasked(at + row, i);
    let w = load(x + row * n + cols, mask, 0.0f32);
    let count = select(
        mask,
        full::<f32>([block], 1.0f32),
        full::<f32>([block], 0.0f32),
    );
    let (c, mean, m2) = reduce_with(
        (count, w, zeros::<f32>([block])),
        0,
        |(c0, m0, s0), (c1, m1, s1)| {
            let c = c0 + c1;
            let safe = select(c.gt(0.0f32), c, full::<f32>([], 1.0f32));
            let d = m1 - m0;
            (c, m0 + d * (c1 / safe), s0 + s1 + d * d * (c0 * c1 / safe))
        },
    );
    store_unmasked(stats + row * 3, c);
    store_unmasked(stats + row * 3 + 1, mean);
    store_unmasked(stats + row * 3 + 2, m2);
    let r = scan_with(v, 0, false, |a, b| maximum(a, b));
    store(running + row * n + cols, r, mask);
}

#[test]
#[ignore = "needs a GPU: TEGULA_GPU_TESTS=1 cargo test -- --ignored"]
fn reduce_with_and_scan_with_match_the_interpreter_on_the_gpu() {
    let dev = gpu();
    let cpu = Device::cpu();
    let (m, n) = (37usize, 201usize);
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    // Small integers (ties for the argmax) scaled, so Welford's sums are exact in f32.
    let x: Vec<f32> = (0..m * n).map(|_| (next() % 17) as f32 * 0.25).collect();
    let run = |d: &Device| {
        let xt = d.from_slice(&x, [m, n]).unwrap();
        let (mut b, mut i) = (d.zeros::<f32>([m]).unwrap(), d.zeros::<i32>([m]).unwrap());
        let mut st = d.zeros::<f32>([m * 3]).unwrap();
        let mut r = d.zeros::<f32>([m, n]).unwrap();
        row_combines::launch(d, m, &xt, &mut b, &mut i, &mut st, &mut r, n as i32, 256).unwrap();
        (
            b.to_vec().unwrap(),
            i.to_vec().unwrap(),
            st.to_vec().unwrap(),
            r.to_vec().unwrap(),
        )
    };
    let (got, want) = (run(&dev), run(&cpu));
    for row in 0..m {
        let line = &x[row * n..(row + 1) * n];
        let top = line.iter().copied().fold(f32::MIN, f32::max);
        let first = line.iter().position(|&v| v == top).unwrap() as i32;
        assert_eq!((want.0[row], want.1[row]), (top, first), "row {row}");
        let mean = line.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
        let m2: f64 = line.iter().map(|&v| (v as f64 - mean).powi(2)).sum();
        assert_eq!(want.2[3 * row], n as f32, "row {row}");
        assert!((want.2[3 * row + 1] as f64 - mean).abs() < 1e-5 * mean.abs().max(1.0));
        assert!((want.2[3 * row + 2] as f64 - m2).abs() < 1e-4 * m2.max(1.0));
    }
    // The same reduction tree on both: bit-identical (exact ops for the argmax and the scan;
    // Welford's rounding follows the tree, up to ptxas's fma contraction).
    assert_eq!(got.0, want.0);
    assert_eq!(got.1, want.1);
    assert_eq!(got.3, want.3);
    for (g, w) in got.2.iter().zip(&want.2) {
        assert!(
            (g - w).abs() <= 1e-5 * w.abs().max(1.0),
            "welford {g} vs {w}"
        );
    }
}
