//! `#[tegula::kernel]` launchers end to end on the interpreter, against float64 or hand
//! references on random inputs of odd sizes.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tegula::prelude::*;

#[tegula::kernel]
fn gemv(a: Ptr<f16>, x: Ptr<f16>, y: Ptr<f32>, n: i32, #[constexpr] block: usize) {
    let row = program_id(0);
    let offs = arange(0, block as i64);
    let mut acc = zeros::<f32>([block]);
    for start in range(0, n, block) {
        let cols = start + offs;
        let mask = cols.lt(n);
        let av = load(a + row * n + cols, mask, 0.0).to::<f32>();
        let xv = load(x + cols, mask, 0.0).to::<f32>();
        acc += av * xv;
    }
    store_unmasked(y + row, sum(acc, 0));
}

fn random_f16(rng: &mut StdRng, n: usize) -> Vec<f16> {
    (0..n)
        .map(|_| f16::from_f64(rng.gen_range(-1.0..1.0)))
        .collect()
}

#[test]
fn gemv_matches_float64_reference() -> tegula::Result<()> {
    let dev = Device::cpu();
    let mut rng = StdRng::seed_from_u64(7);
    let (m, n) = (37usize, 301usize);
    let a = random_f16(&mut rng, m * n);
    let x = random_f16(&mut rng, n);
    let at = dev.from_slice(&a, [m, n])?;
    let xt = dev.from_slice(&x, [n])?;
    let mut yt = dev.zeros::<f32>([m])?;
    gemv::launch(&dev, m, &at, &xt, &mut yt, n as i32, 64)?;
    let y = yt.to_vec()?;
    for (r, &got) in y.iter().enumerate() {
        let want: f64 = (0..n).map(|c| a[r * n + c].to_f64() * x[c].to_f64()).sum();
        // f32 accumulation of 301 products of magnitude < 1.
        assert!((got as f64 - want).abs() < 1e-4, "row {r}: {got} vs {want}");
    }
    Ok(())
}

/// Each program clamps its element into a band with a tile `if`/`else if`/`else`, and counts
/// doublings with a tile `while`.
#[tegula::kernel]
fn branch_and_loop(x: Ptr<i32>, band: Ptr<i32>, pow2: Ptr<i32>, steps: Ptr<i32>, lo: i32, hi: i32) {
    let pid = program_id(0);
    let v = load_unmasked(x + pid);
    let mut out = v;
    if v.lt(lo) {
        out = scalar(lo);
    } else if v.gt(hi) {
        out = scalar(hi);
    }
    store_unmasked(band + pid, out);
    let mut p = scalar(1);
    let mut n = scalar(0);
    while p.lt(v) {
        p *= 2;
        n += 1;
    }
    store_unmasked(pow2 + pid, p);
    store_unmasked(steps + pid, n);
}

#[test]
fn tile_if_and_while_compute_per_program() -> tegula::Result<()> {
    let dev = Device::cpu();
    let mut rng = StdRng::seed_from_u64(11);
    let xs: Vec<i32> = (0..53).map(|_| rng.gen_range(-20..3000)).collect();
    let x = dev.from_slice(&xs, [xs.len()])?;
    let band = dev.zeros::<i32>([xs.len()])?;
    let pow2 = dev.zeros::<i32>([xs.len()])?;
    let steps = dev.zeros::<i32>([xs.len()])?;
    branch_and_loop::launch(&dev, xs.len(), &x, &band, &pow2, &steps, 5, 1000)?;
    let (band, pow2, steps) = (band.to_vec()?, pow2.to_vec()?, steps.to_vec()?);
    for (i, &v) in xs.iter().enumerate() {
        assert_eq!(band[i], v.clamp(5, 1000), "band of {v}");
        let (mut p, mut n) = (1, 0);
        while p < v {
            p *= 2;
            n += 1;
        }
        assert_eq!((pow2[i], steps[i]), (p, n), "doublings of {v}");
    }
    Ok(())
}

#[tegula::kernel]
fn axpy<T: Element, const BLOCK: usize>(x: Ptr<T>, y: Ptr<T>, alpha: T, n: i32) {
    let offs = program_id(0) * (BLOCK as i32) + arange(0, BLOCK as i64);
    let mask = offs.lt(n);
    let v = load(x + offs, mask, 0.0) * alpha + load(y + offs, mask, 0.0);
    store(y + offs, v, mask);
}

#[test]
fn generic_kernel_specializes_per_type_and_constant() -> tegula::Result<()> {
    let dev = Device::cpu();
    let mut rng = StdRng::seed_from_u64(3);
    let n = 131usize;
    let xs: Vec<f32> = (0..n).map(|_| rng.gen_range(-2.0..2.0)).collect();
    let ys: Vec<f32> = (0..n).map(|_| rng.gen_range(-2.0..2.0)).collect();
    let x = dev.from_slice(&xs, [n])?;
    let y = dev.from_slice(&ys, [n])?;
    axpy::launch::<f32, 32>(&dev, n.div_ceil(32), &x, &y, 1.5f32, n as i32)?;
    let got = y.to_vec()?;
    for i in 0..n {
        let want = xs[i] * 1.5 + ys[i];
        assert!((got[i] - want).abs() <= 1e-6 * want.abs().max(1.0), "{i}");
    }
    assert_eq!(dev.traced_kernels(), 1);
    // Same specialization: no new trace. New BLOCK or new T: a new one each.
    axpy::launch::<f32, 32>(&dev, n.div_ceil(32), &x, &y, 1.0f32, n as i32)?;
    assert_eq!(dev.traced_kernels(), 1);
    axpy::launch_with::<f32, 64>(
        &dev,
        n.div_ceil(64),
        LaunchConfig::new(2, 1),
        &x,
        &y,
        -1.0f32,
        n as i32,
    )?;
    assert_eq!(dev.traced_kernels(), 2);
    // y = x*1.5 + y0, then + x, then - x: back to x*1.5 + y0.
    let got = y.to_vec()?;
    for i in 0..n {
        let want = xs[i] * 1.5 + ys[i];
        assert!((got[i] - want).abs() <= 1e-5 * want.abs().max(1.0), "{i}");
    }
    let xh: Vec<f16> = xs.iter().map(|&v| f16::from_f32(v)).collect();
    let yh: Vec<f16> = ys.iter().map(|&v| f16::from_f32(v)).collect();
    let (xh_t, yh_t) = (dev.from_slice(&xh, [n])?, dev.from_slice(&yh, [n])?);
    axpy::launch::<f16, 32>(
        &dev,
        n.div_ceil(32),
        &xh_t,
        &yh_t,
        f16::from_f32(0.5),
        n as i32,
    )?;
    assert_eq!(dev.traced_kernels(), 3);
    let got = yh_t.to_vec()?;
    for i in 0..n {
        let want = xh[i].to_f64() * 0.5 + yh[i].to_f64();
        // Two f16 roundings (product, sum).
        assert!((got[i].to_f64() - want).abs() <= 4e-3, "{i}");
    }
    Ok(())
}

/// A stencil whose taps unroll at trace time; the constexpr `taps` selects how many.
#[tegula::kernel]
fn stencil(x: Ptr<f32>, y: Ptr<f32>, n: i32, #[constexpr] taps: usize, #[constexpr] block: usize) {
    let offs = program_id(0) * (block as i32) + arange(0, block as i64);
    let mut acc = zeros::<f32>([block]);
    for t in static_range(taps) {
        let idx = offs + t as i32;
        acc += load(x + idx, idx.lt(n), 0.0) * ((t + 1) as f32);
    }
    store(y + offs, acc, offs.lt(n));
}

#[test]
fn static_range_stencil_matches_reference() -> tegula::Result<()> {
    let dev = Device::cpu();
    let mut rng = StdRng::seed_from_u64(5);
    let n = 77usize;
    let xs: Vec<f32> = (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect();
    let x = dev.from_slice(&xs, [n])?;
    for taps in [1usize, 3] {
        let y = dev.zeros::<f32>([n])?;
        stencil::launch(&dev, n.div_ceil(16), &x, &y, n as i32, taps, 16)?;
        let got = y.to_vec()?;
        for i in 0..n {
            let want: f64 = (0..taps)
                .filter(|t| i + t < n)
                .map(|t| xs[i + t] as f64 * (t + 1) as f64)
                .sum();
            assert!((got[i] as f64 - want).abs() < 1e-5, "taps {taps}, {i}");
        }
    }
    Ok(())
}

/// Histograms of `n` values in chunks of `block`, the counts of the chunks added (the way to
/// histogram more values than one comparison tile should hold): of every value, and of the
/// even ones only (a mask beside the bounds).
#[tegula::kernel]
fn bin_counts(
    x: Ptr<i32>,
    all: Ptr<i32>,
    even: Ptr<i32>,
    n: i32,
    #[constexpr] bins: usize,
    #[constexpr] block: usize,
) {
    let offs = arange(0, block as i64);
    let mut counts = zeros::<i32>([bins]);
    let mut evens = zeros::<i32>([bins]);
    for start in range(0, n, block) {
        let i = start + offs;
        let mask = i.lt(n);
        let v = load(x + i, mask, 0);
        counts += histogram_masked(v, bins, mask);
        evens += v.histogram_masked(bins, mask & (v % 2).eq(0));
    }
    let b = arange(0, bins as i64);
    store_unmasked(all + b, counts);
    store_unmasked(even + b, evens);
}

#[test]
fn chunked_histograms_match_a_host_count() -> tegula::Result<()> {
    let dev = Device::cpu();
    let mut rng = StdRng::seed_from_u64(21);
    for (n, bins, block) in [(1000usize, 32usize, 128usize), (77, 8, 16), (5, 64, 4)] {
        let x: Vec<i32> = (0..n).map(|_| rng.gen_range(-3..bins as i32 + 3)).collect();
        let xt = dev.from_slice(&x, [n])?;
        let (all, even) = (dev.zeros::<i32>([bins])?, dev.zeros::<i32>([bins])?);
        bin_counts::launch(&dev, 1u32, &xt, &all, &even, n as i32, bins, block)?;
        let (mut want_all, mut want_even) = (vec![0; bins], vec![0; bins]);
        for &v in &x {
            if (0..bins as i32).contains(&v) {
                want_all[v as usize] += 1;
                if v % 2 == 0 {
                    want_even[v as usize] += 1;
                }
            }
        }
        assert_eq!(all.to_vec()?, want_all, "{n} values into {bins} bins");
        assert_eq!(even.to_vec()?, want_even, "{n} values into {bins} bins");
    }
    Ok(())
}

/// Each row's largest value and its first column, with `reduce_with` and a closure over
/// (value, index) pairs, and the running maximum of the row with `scan_with`.
#[tegula::kernel]
fn row_argmax(
    x: Ptr<f32>,
    best: Ptr<f32>,
    at: Ptr<i32>,
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
    let r = scan_with(v, 0, false, |a, b| maximum(a, b));
    store(running + row * n + cols, r, mask);
}

#[test]
fn a_macro_kernel_reduces_and_scans_with_closures() -> tegula::Result<()> {
    let dev = Device::cpu();
    let mut rng = StdRng::seed_from_u64(11);
    let (m, n) = (5usize, 91usize);
    // Small integers: ties, which the first column wins.
    let x: Vec<f32> = (0..m * n).map(|_| rng.gen_range(0..9) as f32).collect();
    let xt = dev.from_slice(&x, [m, n])?;
    let (mut bt, mut it, mut rt) = (
        dev.zeros::<f32>([m])?,
        dev.zeros::<i32>([m])?,
        dev.zeros::<f32>([m, n])?,
    );
    row_argmax::launch(&dev, m, &xt, &mut bt, &mut it, &mut rt, n as i32, 128)?;
    let (b, i, r) = (bt.to_vec()?, it.to_vec()?, rt.to_vec()?);
    for row in 0..m {
        let line = &x[row * n..(row + 1) * n];
        let top = line.iter().copied().fold(f32::MIN, f32::max);
        let first = line.iter().position(|&v| v == top).unwrap();
        assert_eq!((b[row], i[row]), (top, first as i32), "row {row}");
        let mut run = f32::MIN;
        for c in 0..n {
            run = run.max(line[c]);
            assert_eq!(r[row * n + c], run, "row {row} column {c}");
        }
    }
    Ok(())
}

/// Triton's `tl.atomic_add(sums + cols, v, mask=mask, sem="relaxed", scope="sys")` and a
/// ticket counter at the defaults, written with `atomic_with` in a `#[tegula::kernel]`.
#[tegula::kernel]
fn column_sums(
    x: Ptr<f32>,
    sums: Ptr<f32>,
    count: Ptr<i32>,
    tickets: Ptr<i32>,
    n_cols: i32,
    #[constexpr] block: usize,
) {
    let row = program_id(0);
    let cols = arange(0, block as i64);
    let mask = cols.lt(n_cols);
    let v = load(x + row * n_cols + cols, mask, 0.0);
    let _ = atomic_with(
        AtomicOp::Add,
        sums + cols,
        v,
        Some(mask),
        MemSem::Relaxed,
        MemScope::Sys,
    );
    let ticket = atomic_with(
        AtomicOp::Add,
        count,
        1,
        None,
        MemSem::Release,
        MemScope::Gpu,
    );
    store_unmasked(tickets + row, ticket);
}

#[test]
fn atomics_with_ordering_and_scope_match_float64_reference() -> tegula::Result<()> {
    let k = column_sums::trace(64).unwrap();
    let orders: Vec<(MemSem, MemScope)> = k
        .walk()
        .into_iter()
        .filter_map(|i| match k.insts[i].op {
            tegula::ir::Op::Atomic { sem, scope, .. } => Some((sem, scope)),
            _ => None,
        })
        .collect();
    assert_eq!(
        orders,
        [
            (MemSem::Relaxed, MemScope::Sys),
            (MemSem::Release, MemScope::Gpu)
        ]
    );
    let dev = Device::cpu();
    let mut rng = StdRng::seed_from_u64(13);
    let (rows, cols) = (45usize, 50usize);
    let xs: Vec<f32> = (0..rows * cols).map(|_| rng.gen_range(-1.0..1.0)).collect();
    let x = dev.from_slice(&xs, [rows, cols])?;
    let sums = dev.zeros::<f32>([cols])?;
    let count = dev.zeros::<i32>([1])?;
    let tickets = dev.zeros::<i32>([rows])?;
    column_sums::launch(&dev, rows, &x, &sums, &count, &tickets, cols as i32, 64)?;
    for (c, got) in sums.to_vec()?.into_iter().enumerate() {
        let want: f64 = (0..rows).map(|r| xs[r * cols + c] as f64).sum();
        let magnitude: f64 = (0..rows).map(|r| xs[r * cols + c].abs() as f64).sum();
        // 45 additions, each rounding once.
        let bound = rows as f64 * f32::EPSILON as f64 / 2.0 * magnitude;
        assert!(
            (got as f64 - want).abs() <= bound,
            "column {c}: {got} vs {want}"
        );
    }
    assert_eq!(count.to_vec()?, vec![rows as i32]);
    let mut t = tickets.to_vec()?;
    t.sort_unstable();
    assert_eq!(t, (0..rows as i32).collect::<Vec<_>>());
    Ok(())
}
