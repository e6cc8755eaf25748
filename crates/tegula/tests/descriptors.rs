//! Tensor descriptors (`make_tensor_descriptor`, `desc.load`, `desc.store`) against float64
//! references on random inputs of odd sizes, with blocks that reach past every edge: on the
//! interpreter here, and on the GPU (where aligned descriptors move on TMA) with
//! `TEGULA_GPU_TESTS=1 cargo test -p tegula --test descriptors -- --ignored`.

use tegula::prelude::*;

/// Block `(bi, bj)` at `[bi * bm + dr, bj * bn + dc]`: `out = 2 * x` there through the
/// descriptors, and the loaded block (zeros outside `x`) written whole into `dump`.
#[tegula::kernel]
#[allow(clippy::too_many_arguments)]
fn desc_double<T: Element, const BM: usize, const BN: usize>(
    x: Ptr<T>,
    out: Ptr<T>,
    dump: Ptr<T>,
    m: i32,
    n: i32,
    sx: i32,
    so: i32,
    dr: i32,
    dc: i32,
) {
    let dx = make_tensor_descriptor(x, (m, n), (sx, 1), [BM, BN]);
    let dout = make_tensor_descriptor(out, (m, n), (so, 1), [BM, BN]);
    let (bi, bj) = (program_id(0), program_id(1));
    let r = bi * (BM as i32) + dr;
    let c = bj * (BN as i32) + dc;
    let v = dx.load((r, c));
    dout.store((r, c), v.to::<f32>() * 2.0);
    let rows = bi * (BM as i32) + arange(0, BM as i64).col();
    let cols = bj * (BN as i32) + arange(0, BN as i64).row();
    let width = num_programs(1) * (BN as i32);
    store_unmasked(dump + rows * width + cols, v);
}

/// Runs [`desc_double`] on `dev` over an `m x n` view with row stride `stride` (columns past
/// `n` are padding), with TMA asked for or not, and checks both outputs against float64.
fn check<T: Element>(dev: &Device, m: usize, n: usize, stride: usize, shift: (i32, i32)) {
    for tma in [false, true] {
        check_with::<T>(dev, m, n, stride, shift, tma);
    }
}

fn check_with<T: Element>(
    dev: &Device,
    m: usize,
    n: usize,
    stride: usize,
    shift: (i32, i32),
    tma: bool,
) {
    const BM: usize = 16;
    const BN: usize = 64;
    let full = dev.randn::<T>([m, stride]).unwrap();
    let x = full.narrow(1, 0, n).unwrap();
    let out_full = dev.full([m, stride], T::from_f64(-7.0)).unwrap();
    let mut out_view = out_full.narrow(1, 0, n).unwrap();
    let (gm, gn) = (m.div_ceil(BM) + 1, n.div_ceil(BN) + 1);
    let mut dump = dev.full([gm * BM, gn * BN], T::from_f64(f64::NAN)).unwrap();
    desc_double::launch_with::<T, BM, BN>(
        dev,
        [gm as u32, gn as u32],
        LaunchConfig::default().with_tma(tma),
        &x,
        &mut out_view,
        &mut dump,
        m as i32,
        n as i32,
        stride as i32,
        stride as i32,
        shift.0,
        shift.1,
    )
    .unwrap();
    let xs = full.to_f64_vec().unwrap();
    let outs = out_full.to_f64_vec().unwrap();
    let dumps = dump.to_f64_vec().unwrap();
    let covered = |i: i64, lo: i32, blocks: usize, b: usize| {
        i >= lo as i64 && i < lo as i64 + (blocks * b) as i64
    };
    for i in 0..m {
        for j in 0..stride {
            let got = outs[i * stride + j];
            let want = if j < n
                && covered(i as i64, shift.0, gm, BM)
                && covered(j as i64, shift.1, gn, BN)
            {
                // 2x rounds exactly in every float dtype.
                2.0 * xs[i * stride + j]
            } else {
                -7.0
            };
            assert_eq!(
                got, want,
                "out[{i}, {j}] (m {m}, n {n}, stride {stride}, shift {shift:?}, tma {tma})"
            );
        }
    }
    for bi in 0..gm {
        for bj in 0..gn {
            for i in 0..BM {
                for j in 0..BN {
                    let r = (bi * BM + i) as i64 + shift.0 as i64;
                    let c = (bj * BN + j) as i64 + shift.1 as i64;
                    let inside = r >= 0 && c >= 0 && (r as usize) < m && (c as usize) < n;
                    let want = if inside {
                        xs[r as usize * stride + c as usize]
                    } else {
                        0.0
                    };
                    let got = dumps[(bi * BM + i) * gn * BN + bj * BN + j];
                    assert_eq!(
                        got, want,
                        "block ({bi}, {bj}) [{i}, {j}] (shift {shift:?}, tma {tma})"
                    );
                }
            }
        }
    }
}

#[test]
fn descriptor_blocks_read_zero_outside_and_write_nothing_there() {
    let dev = Device::cpu();
    // A padded row stride (aligned: TMA on a GPU) and a contiguous odd one (masked accesses).
    check::<f16>(&dev, 37, 45, 64, (-3, 0));
    check::<f32>(&dev, 37, 45, 45, (5, -7));
    check::<bf16>(&dev, 19, 70, 80, (0, 3));
}

#[test]
fn a_descriptor_larger_than_its_view_is_an_error_at_the_access() {
    let dev = Device::cpu();
    let x = dev.randn::<f32>([8, 64]).unwrap();
    let mut out = dev.zeros::<f32>([8, 64]).unwrap();
    let mut dump = dev.zeros::<f32>([32, 128]).unwrap();
    // Declares 16 rows of a tensor of 8.
    let e = desc_double::launch::<f32, 16, 64>(
        &dev,
        [1u32, 1],
        &x,
        &mut out,
        &mut dump,
        16,
        64,
        64,
        64,
        0,
        0,
    )
    .unwrap_err();
    let s = e.to_string();
    assert!(s.contains("descriptors.rs"), "{s}");
    assert!(s.contains("x"), "{s}");
}

#[test]
#[ignore = "needs a GPU: TEGULA_GPU_TESTS=1 cargo test -- --ignored"]
fn descriptor_blocks_on_the_gpu() {
    assert!(
        tegula::env::bool_var("TEGULA_GPU_TESTS", false),
        "GPU tests run with TEGULA_GPU_TESTS=1 on a machine with a GPU"
    );
    let dev = Device::cuda(0).unwrap();
    check::<f16>(&dev, 37, 45, 64, (-3, 0));
    check::<f32>(&dev, 37, 45, 45, (5, -7));
    check::<f32>(&dev, 100, 33, 48, (-16, -32));
    check::<bf16>(&dev, 19, 70, 80, (0, 3));
    // Rows of whole 16-byte words: the stores move on TMA too (the first row of blocks,
    // at a negative row, on masked stores).
    check::<f16>(&dev, 37, 64, 64, (-3, 0));
    check::<f32>(&dev, 50, 96, 96, (5, 64));
    // Host descriptors: the tensor maps come from the descriptor's parts.
    check_host::<f16>(&dev, 37, 64, 64, [16, 64]);
    check_host::<f32>(&dev, 50, 96, 96, [32, 32]);
    check_gather_scatter_atomics(&dev);
    check_ranks(&dev);
}

/// The same copy through host descriptors (Triton's `TensorDescriptor` arguments): the block
/// shape comes with the descriptor, the tensor's pointer, shape and row stride with the launch.
#[tegula::kernel]
fn host_desc_double<T: Element>(x: TensorDescriptor<T>, out: TensorDescriptor<T>, dr: i32) {
    let (bm, bn) = (x.block_shape()[0], x.block_shape()[1]);
    let r = program_id(0) * (bm as i32) + dr;
    let c = program_id(1) * (bn as i32);
    let v = x.load((r, c));
    out.store((r, c), v.to::<f32>() * 2.0);
}

fn check_host<T: Element>(dev: &Device, m: usize, n: usize, stride: usize, block: [usize; 2]) {
    let full = dev.randn::<T>([m, stride]).unwrap();
    let x = full.narrow(1, 0, n).unwrap();
    let out_full = dev.full([m, stride], T::from_f64(-7.0)).unwrap();
    let out = out_full.narrow(1, 0, n).unwrap();
    let dx = tegula::TensorDescriptor::from_tensor(&x, [1, 1]).unwrap();
    // What a tuner's pre_hook does: the config's block shape.
    let dx = dx.with_block_shape(block).unwrap();
    let dout = tegula::TensorDescriptor::from_tensor(&out, block).unwrap();
    assert_eq!(
        (dx.block_shape(), dx.shape()),
        (block, [m as i32, n as i32])
    );
    let grid = [
        (m.div_ceil(block[0]) + 1) as u32,
        n.div_ceil(block[1]) as u32,
    ];
    host_desc_double::launch::<T>(dev, grid, &dx, &dout, -3).unwrap();
    let (xs, outs) = (full.to_f64_vec().unwrap(), out_full.to_f64_vec().unwrap());
    for i in 0..m {
        for j in 0..stride {
            let want = if j < n {
                2.0 * xs[i * stride + j]
            } else {
                -7.0
            };
            assert_eq!(outs[i * stride + j], want, "out[{i}, {j}] block {block:?}");
        }
    }
}

#[test]
fn host_descriptors_carry_their_block_shape_into_the_specialization() {
    let dev = Device::cpu();
    // Two block shapes of one kernel: two specializations, both right.
    check_host::<f32>(&dev, 37, 45, 48, [16, 32]);
    check_host::<f32>(&dev, 37, 45, 48, [8, 64]);
    check_host::<f16>(&dev, 21, 70, 80, [16, 16]);
    let ir = host_desc_double::trace::<f32>([4, 16], [4, 16])
        .unwrap()
        .to_string();
    assert!(ir.contains("desc_load"), "{ir}");
}

#[test]
fn host_descriptors_refuse_what_a_tensor_map_cannot_describe() {
    let dev = Device::cpu();
    let e = |r: tegula::Result<tegula::TensorDescriptor<f32>>| r.unwrap_err().to_string();
    let cube = dev.zeros::<f32>([2, 3, 4]).unwrap();
    assert!(e(tegula::TensorDescriptor::from_tensor(&cube, [1, 1])).contains("2-D"));
    // A transposed view: its last axis strides by 8.
    let t = dev.zeros::<f32>([8, 4]).unwrap().transpose(0, 1).unwrap();
    assert!(e(tegula::TensorDescriptor::from_tensor(&t, [2, 2])).contains("contiguous"));
    let x = dev.zeros::<f32>([8, 8]).unwrap();
    assert!(e(tegula::TensorDescriptor::from_tensor(&x, [3, 8])).contains("power of two"));
    let d = tegula::TensorDescriptor::from_tensor(&x, [8, 8]).unwrap();
    assert!(e(d.with_block_shape([8, 0])).contains("power of two"));
}

/// `out[i, :] = x[rows[i], y0 ..]` by `desc.gather`, then the same rows written back into
/// `back` by `desc.scatter`, and every element of `count` bumped by `desc.atomic_add` once a
/// program for each block of the grid that covers it (the blocks overlap).
#[tegula::kernel]
#[allow(clippy::too_many_arguments)]
fn desc_gather_scatter<const M: usize, const N: usize>(
    x: Ptr<f32>,
    rows: Ptr<i32>,
    out: Ptr<f32>,
    back: Ptr<f32>,
    count: Ptr<i32>,
    latest: Ptr<i32>,
    m: i32,
    n: i32,
    y0: i32,
) {
    let dx = make_tensor_descriptor(x, (m, n), (n, 1), [1, N]);
    let dback = make_tensor_descriptor(back, (m, n), (n, 1), [1, N]);
    let idx = load_unmasked(rows + arange(0, M as i64));
    let v = dx.gather(idx, y0);
    store_unmasked(
        out + arange(0, M as i64).col() * (N as i32) + arange(0, N as i64).row(),
        v,
    );
    dback.scatter(v, idx, y0);
    let dcount = make_tensor_descriptor(count, (m, n), (n, 1), [M, N]);
    dcount.atomic_add((program_id(0) * 4 - 3, y0), 1);
    let dlatest = make_tensor_descriptor(latest, (m, n), (n, 1), [M, N]);
    dlatest.atomic_max((program_id(0) * 4 - 3, y0), program_id(0));
}

#[test]
fn descriptor_gathers_scatters_and_atomics_stay_inside_the_tensor() {
    check_gather_scatter_atomics(&Device::cpu());
}

fn check_gather_scatter_atomics(dev: &Device) {
    const M: usize = 8;
    const N: usize = 16;
    let (m, n, y0) = (13usize, 21usize, 9i32);
    let x = dev.randn::<f32>([m, n]).unwrap();
    // Rows out of range (negative, past the end) gather zeros and scatter nothing.
    let idx: Vec<i32> = vec![4, -1, 12, 0, 13, 7, 2, 30];
    let rows = dev.from_slice(&idx, [M]).unwrap();
    let out = dev.full([M, N], -5.0f32).unwrap();
    let back = dev.full([m, n], -7.0f32).unwrap();
    let count = dev.zeros::<i32>([m, n]).unwrap();
    let latest = dev.full([m, n], -1i32).unwrap();
    let programs = 3;
    desc_gather_scatter::launch::<M, N>(
        dev,
        [programs, 1],
        &x,
        &rows,
        &out,
        &back,
        &count,
        &latest,
        m as i32,
        n as i32,
        y0,
    )
    .unwrap();
    let (xs, outs, backs) = (
        x.to_f64_vec().unwrap(),
        out.to_f64_vec().unwrap(),
        back.to_f64_vec().unwrap(),
    );
    let counts: Vec<i32> = count.to_vec().unwrap();
    let latests: Vec<i32> = latest.to_vec().unwrap();
    let inside = |r: i64, c: i64| r >= 0 && c >= 0 && r < m as i64 && c < n as i64;
    for (i, &r) in idx.iter().enumerate() {
        for j in 0..N {
            let c = y0 as i64 + j as i64;
            let want = if inside(r as i64, c) {
                xs[r as usize * n + c as usize]
            } else {
                0.0
            };
            assert_eq!(outs[i * N + j], want, "gathered [{i}, {j}] (row {r})");
        }
    }
    for r in 0..m {
        for c in 0..n {
            let gathered = idx.contains(&(r as i32)) && c as i32 >= y0;
            let want = if gathered { xs[r * n + c] } else { -7.0 };
            assert_eq!(backs[r * n + c], want, "scattered [{r}, {c}]");
            // Program p's block covers rows 4p - 3 .. 4p + 5, columns y0 .. y0 + 16.
            let covering: Vec<i32> = (0..programs as i32)
                .filter(|p| {
                    let lo = 4 * p - 3;
                    (lo..lo + M as i32).contains(&(r as i32)) && c as i32 >= y0
                })
                .collect();
            assert_eq!(counts[r * n + c], covering.len() as i32, "count [{r}, {c}]");
            let last = covering.iter().max().copied().unwrap_or(-1);
            assert_eq!(latests[r * n + c], last, "max [{r}, {c}]");
        }
    }
}

/// A 3-D descriptor over `[b, m, n]` (a batch of matrices) and a 1-D one over `v`: `out =
/// 2 x` block by block, and `w[i] = v[i] + 1` through 1-D blocks, every block reaching past
/// the ends.
#[tegula::kernel]
#[allow(clippy::too_many_arguments)]
fn desc_ranks(
    x: Ptr<f32>,
    out: Ptr<f32>,
    v: Ptr<f32>,
    w: Ptr<f32>,
    b: i32,
    m: i32,
    n: i32,
    len: i32,
) {
    let dx = make_tensor_descriptor(x, (b, m, n), (m * n, n, 1), [2, 4, 8]);
    let dout = make_tensor_descriptor(out, [b, m, n], (m * n, n, 1), [2, 4, 8]);
    let (i, j, k) = (program_id(0) * 2, program_id(1) * 4 - 1, program_id(2) * 8);
    let blk = dx.load((i, j, k));
    dout.store((i, j, k), blk * 2.0);
    let dv = make_tensor_descriptor(v, (len,), (1,), [16]);
    let dw = make_tensor_descriptor(w, (len,), (1,), [16]);
    let at = program_id(0) * 16 + program_id(1) * 64 + program_id(2) * 256;
    dw.store((at,), dv.load((at,)) + 1.0);
}

#[test]
fn descriptors_of_one_and_three_axes() {
    check_ranks(&Device::cpu());
}

fn check_ranks(dev: &Device) {
    let (b, m, n, len) = (3usize, 9usize, 19usize, 1000usize);
    let x = dev.randn::<f32>([b, m, n]).unwrap();
    let out = dev.full([b, m, n], -7.0f32).unwrap();
    let v = dev.randn::<f32>([len]).unwrap();
    let w = dev.full([len], -7.0f32).unwrap();
    let grid = [
        b.div_ceil(2) as u32,
        (m + 1).div_ceil(4) as u32,
        n.div_ceil(8) as u32,
    ];
    desc_ranks::launch(
        dev, grid, &x, &out, &v, &w, b as i32, m as i32, n as i32, len as i32,
    )
    .unwrap();
    let (xs, outs) = (x.to_f64_vec().unwrap(), out.to_f64_vec().unwrap());
    for i in 0..b * m * n {
        assert_eq!(outs[i], 2.0 * xs[i], "out[{i}]");
    }
    // The 1-D blocks start at 16 p0 + 64 p1 + 256 p2 over the same grid.
    let starts: Vec<usize> = (0..grid[0] as usize)
        .flat_map(|p0| (0..grid[1] as usize).map(move |p1| (p0, p1)))
        .flat_map(|(p0, p1)| (0..grid[2] as usize).map(move |p2| 16 * p0 + 64 * p1 + 256 * p2))
        .collect();
    let (vs, ws) = (v.to_f64_vec().unwrap(), w.to_f64_vec().unwrap());
    for i in 0..len {
        let covered = starts.iter().any(|&s| (s..s + 16).contains(&i));
        let want = if covered {
            (vs[i] as f32 + 1.0) as f64
        } else {
            -7.0
        };
        assert_eq!(ws[i], want, "w[{i}]");
    }
}

#[test]
fn a_descriptor_s_axes_must_agree() {
    let e = tegula::ir::builder::trace("bad_desc", |p| {
        let x = p.ptr("x", tegula::ir::DType::F32);
        let d = make_tensor_descriptor(x, (4, 4), (4, 1, 1), [2, 2]);
        let _ = d.load((0, 0));
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("2 shapes, 3 strides"), "{e}");
    let e = tegula::ir::builder::trace("bad_offsets", |p| {
        let x = p.ptr("x", tegula::ir::DType::F32);
        let d = make_tensor_descriptor(x, (4, 4, 4), (16, 4, 1), [2, 2, 2]);
        let _ = d.load((0, 0));
    })
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("3-D tensor descriptor takes 3 offsets, got 2"),
        "{e}"
    );
}
