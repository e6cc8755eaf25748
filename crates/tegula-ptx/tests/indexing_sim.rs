//! Triton's indexing ops (`swizzle2d`, `gather`, `flip`, `cat`, `sort`, `topk`, `histogram`)
//! compiled to PTX and run on the PTX simulator against the interpreter, bit for bit (they
//! move values, or are exact integer arithmetic): random shapes, axes, dtypes, index dtypes
//! and warp counts on fresh inputs (histograms of every integer dtype, masked and not, on 1, 4
//! and 8 warps), and the layouts a gather meets (a blocked load, an mma accumulator as its
//! source, a reduction and a broadcast as its consumers, a loop carrying what it gathers, an
//! i1 source, an index longer than its source).
//!
//! The seed is printed and comes from the clock, or from `TEGULA_TEST_SEED`.

mod sim;

use sim::{agree, Rng, A};
use tegula_ir::prelude::*;
use tegula_ir::Kernel;
use tegula_ptx::{compile, CompileOptions, MmaChoice, Target};

/// Row-major offsets of a tile of `shape` and the mask of its first `ext[a]` indices on each
/// axis `a`.
fn offsets(shape: &[usize], ext: &[Tile]) -> (Tile, Tile) {
    let rank = shape.len();
    let mut stride = 1i64;
    let (mut offs, mut mask): (Option<Tile>, Option<Tile>) = (None, None);
    for a in (0..rank).rev() {
        let mut r = arange(0, shape[a] as i64);
        for b in 0..rank {
            if b != a {
                r = r.expand_dims(b);
            }
        }
        let (o, m) = (r * stride, r.lt(ext[a]));
        offs = Some(offs.map_or(o, |p| p + o));
        mask = Some(mask.map_or(m, |p| p & m));
        stride *= shape[a] as i64;
    }
    (
        offs.unwrap().broadcast_to(shape),
        mask.unwrap().broadcast_to(shape),
    )
}

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

fn random_bits(r: &mut Rng, dt: DType) -> u64 {
    match dt {
        DType::F32 => ((r.below(128) as f32 - 64.0) * 0.375).to_bits() as u64,
        DType::F64 => ((r.below(4096) as f64 - 2048.0) * 0.125).to_bits(),
        DType::F16 => f16::from_f32(r.below(64) as f32 * 0.25 - 8.0).to_bits() as u64,
        DType::BF16 => bf16::from_f32(r.below(64) as f32 * 0.25 - 8.0).to_bits() as u64,
        DType::I1 => r.below(2) as u64,
        _ if dt.bits() == 64 => r.next(),
        _ => r.next() & ((1u64 << dt.bits()) - 1),
    }
}

const VALUE_DTYPES: [DType; 11] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::F64,
    DType::I32,
    DType::I8,
    DType::U16,
    DType::I64,
    DType::U64,
    DType::U8,
    DType::I1,
];

const INDEX_DTYPES: [DType; 8] = [
    DType::I32,
    DType::I64,
    DType::I8,
    DType::I16,
    DType::U8,
    DType::U16,
    DType::U32,
    DType::U64,
];

/// A shape of `rank` power-of-two axes of at most `max` elements, and ragged extents in it.
fn shape_and_ext(r: &mut Rng, rank: usize, max: usize, largest: usize) -> (Vec<usize>, Vec<usize>) {
    loop {
        let shape: Vec<usize> = (0..rank).map(|_| 1 << r.below(largest + 1)).collect();
        if numel(&shape) <= max {
            let ext = shape.iter().map(|&n| 1 + r.below(n)).collect();
            return (shape, ext);
        }
    }
}

/// A masked program of one op: `src` (valid `src_ext` of `src_shape`) and `index` (valid
/// `index_ext` of `index_shape`) loaded with `other = 0`, `op(src, index)` stored where the
/// index is valid.
#[allow(clippy::too_many_arguments)]
fn masked_program(
    name: &str,
    src_dt: DType,
    index_dt: DType,
    src_shape: &[usize],
    index_shape: &[usize],
    op: impl FnOnce(Tile, Tile) -> Tile,
) -> Kernel {
    trace(name, |p| {
        let src = p.ptr("src", src_dt);
        let index = p.ptr("index", index_dt);
        let out = p.ptr("out", src_dt);
        let sext: Vec<Tile> = (0..src_shape.len())
            .map(|a| p.scalar(&format!("s{a}"), DType::I32))
            .collect();
        let iext: Vec<Tile> = (0..index_shape.len())
            .map(|a| p.scalar(&format!("i{a}"), DType::I32))
            .collect();
        let (so, sm) = offsets(src_shape, &sext);
        let (io, im) = offsets(index_shape, &iext);
        let x = load(src + so, sm, 0);
        let ix = load(index + io, im, 0);
        store(out + io, op(x, ix), im);
    })
    .unwrap()
}

fn masked_args(
    src_dt: DType,
    index_dt: DType,
    src: Vec<u64>,
    index: Vec<u64>,
    src_ext: &[usize],
    index_ext: &[usize],
) -> Vec<A> {
    let n = index.len();
    let mut args = vec![
        A::Buf(src_dt, src),
        A::Buf(index_dt, index),
        A::Buf(src_dt, vec![1; n]),
    ];
    args.extend(src_ext.iter().chain(index_ext).map(|&e| A::I32(e as i32)));
    args
}

#[test]
fn gather_agrees_with_the_interpreter() {
    let mut r = Rng::new("gather");
    for case in 0..40 {
        let rank = 1 + case % 3;
        let axis = r.below(rank);
        let (src_shape, src_ext) = shape_and_ext(&mut r, rank, 1024, 6);
        let mut index_shape = src_shape.clone();
        index_shape[axis] = 1 << r.below(7);
        if numel(&index_shape) > 2048 {
            continue;
        }
        let index_ext: Vec<usize> = index_shape.iter().map(|&n| 1 + r.below(n)).collect();
        let (src_dt, index_dt) = (r.pick(&VALUE_DTYPES), r.pick(&INDEX_DTYPES));
        let rows = src_shape[axis];
        if index_dt.bits() == 8 && rows > 127 {
            continue;
        }
        let warps = r.pick(&[1, 2, 4, 8]);
        let k = masked_program(
            "gather",
            src_dt,
            index_dt,
            &src_shape,
            &index_shape,
            |x, i| gather(x, i, axis),
        );
        let src = (0..numel(&src_shape))
            .map(|_| random_bits(&mut r, src_dt))
            .collect();
        let index = (0..numel(&index_shape))
            .map(|_| r.below(rows) as u64)
            .collect();
        let args = masked_args(src_dt, index_dt, src, index, &src_ext, &index_ext);
        let what =
            format!("gather {src_dt}{src_shape:?} by {index_dt}{index_shape:?} along {axis}");
        agree(&what, &k, [1, 1, 1], &args, r.pick(&[80, 90]), warps);
    }
}

#[test]
fn flip_agrees_with_the_interpreter() {
    let mut r = Rng::new("flip");
    for case in 0..30 {
        let rank = 1 + case % 3;
        let axis = r.below(rank);
        let (shape, ext) = shape_and_ext(&mut r, rank, 1024, 6);
        let dt = r.pick(&VALUE_DTYPES);
        let warps = r.pick(&[1, 4, 8]);
        let k = masked_program("flip", dt, DType::I32, &shape, &shape, |x, _| x.flip(axis));
        let src = (0..numel(&shape))
            .map(|_| random_bits(&mut r, dt))
            .collect();
        let args = masked_args(dt, DType::I32, src, vec![0; numel(&shape)], &ext, &ext);
        let what = format!("flip {dt}{shape:?} along {axis}");
        agree(&what, &k, [1, 1, 1], &args, 80, warps);
    }
}

#[test]
fn cat_agrees_with_the_interpreter() {
    // cat(x, flip(x)) along axis 0: the result, twice as long there, in the index's shape.
    let mut r = Rng::new("cat");
    for case in 0..24 {
        let rank = 1 + case % 3;
        let (shape, ext) = shape_and_ext(&mut r, rank, 512, 5);
        let mut out_shape = shape.clone();
        out_shape[0] *= 2;
        let out_ext: Vec<usize> = out_shape.iter().map(|&n| 1 + r.below(n)).collect();
        let dt = r.pick(&VALUE_DTYPES);
        let warps = r.pick(&[1, 4, 8]);
        let k = masked_program("cat", dt, DType::I32, &shape, &out_shape, |x, _| {
            cat(x, x.flip(0), true)
        });
        let src = (0..numel(&shape))
            .map(|_| random_bits(&mut r, dt))
            .collect();
        let args = masked_args(
            dt,
            DType::I32,
            src,
            vec![0; numel(&out_shape)],
            &ext,
            &out_ext,
        );
        let what = format!("cat {dt}{shape:?}");
        agree(&what, &k, [1, 1, 1], &args, 80, warps);
    }
}

#[test]
fn sort_agrees_with_the_interpreter() {
    let mut r = Rng::new("sort");
    let dtypes = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I8,
        DType::U16,
        DType::U8,
    ];
    for case in 0..16 {
        let rank = 1 + case % 2;
        let dim = r.below(rank);
        let (shape, ext) = shape_and_ext(&mut r, rank, 256, 6);
        let dt = r.pick(&dtypes);
        let descending = r.below(2) == 1;
        let warps = r.pick(&[1, 4]);
        let k = masked_program("sort", dt, DType::I32, &shape, &shape, |x, _| {
            sort(x, dim, descending)
        });
        let mut src: Vec<u64> = (0..numel(&shape))
            .map(|_| random_bits(&mut r, dt))
            .collect();
        if dt == DType::F32 && case % 3 == 0 {
            src[0] = f32::NAN.to_bits() as u64;
            src[numel(&shape) - 1] = (-0.0f32).to_bits() as u64;
        }
        let args = masked_args(dt, DType::I32, src, vec![0; numel(&shape)], &ext, &shape);
        let what = format!("sort {dt}{shape:?} along {dim}, descending {descending}");
        agree(&what, &k, [1, 1, 1], &args, 80, warps);
    }
}

#[test]
fn topk_agrees_with_the_interpreter() {
    let mut r = Rng::new("topk");
    for case in 0..8 {
        let rank = 1 + case % 2;
        let dim = r.below(rank);
        let (shape, ext) = shape_and_ext(&mut r, rank, 128, 6);
        let n = shape[dim];
        let k = 1usize << r.below(n.trailing_zeros() as usize + 1);
        let mut out_shape = shape.clone();
        out_shape[dim] = k;
        let dt = r.pick(&[DType::F32, DType::BF16, DType::I32, DType::U8]);
        let warps = r.pick(&[1, 4]);
        let kern = masked_program("topk", dt, DType::I32, &shape, &out_shape, |x, _| {
            x.topk(k, dim)
        });
        let src: Vec<u64> = (0..numel(&shape))
            .map(|_| random_bits(&mut r, dt))
            .collect();
        let args = masked_args(
            dt,
            DType::I32,
            src,
            vec![0; numel(&out_shape)],
            &ext,
            &out_shape,
        );
        let what = format!("topk {k} of {dt}{shape:?} along {dim}");
        agree(&what, &kern, [1, 1, 1], &args, 80, warps);
    }
}

/// A histogram program: `src` (a tile of `n`, valid `ext`) loaded with `other` (0: the lanes
/// past `ext` count in bin 0), its histogram into `bins` bins stored; `masked` counts only
/// where the load's mask is true and the byte of `keep` is nonzero.
fn histogram_program(dt: DType, n: usize, bins: usize, masked: bool) -> Kernel {
    trace("histogram", |p| {
        let (src, keep) = (p.ptr("src", dt), p.ptr("keep", DType::I8));
        let out = p.ptr("out", DType::I32);
        let ext = p.scalar("ext", DType::I32);
        let o = arange(0, n as i64);
        let m = o.lt(ext);
        let x = load(src + o, m, 0);
        let h = if masked {
            histogram_masked(x, bins, m & load(keep + o, m, 0).ne(0))
        } else {
            histogram(x, bins)
        };
        store_unmasked(out + arange(0, bins as i64), h);
    })
    .unwrap()
}

#[test]
fn histogram_agrees_with_the_interpreter() {
    let mut r = Rng::new("histogram");
    let dtypes = [
        DType::I32,
        DType::I8,
        DType::I16,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::I1,
    ];
    for case in 0..24 {
        let dt = r.pick(&dtypes);
        let (n, bins) = loop {
            let (n, bins) = (1usize << r.below(10), 1usize << r.below(9));
            if n * bins <= 16384 {
                break (n, bins);
            }
        };
        let ext = 1 + r.below(n);
        let masked = case % 2 == 1;
        let warps = [1, 4, 8][case / 2 % 3];
        let k = histogram_program(dt, n, bins, masked);
        // Mostly values near the bins (negative ones too), some of any bits.
        let w = dt.bits();
        let bits_mask = if w == 64 { u64::MAX } else { (1u64 << w) - 1 };
        let src = (0..n)
            .map(|_| match r.below(4) {
                _ if dt == DType::I1 => r.below(2) as u64,
                0 => r.next() & bits_mask,
                _ => {
                    (r.below(bins + bins / 2 + 4) as u64).wrapping_sub(bins as u64 / 4 + 2)
                        & bits_mask
                }
            })
            .collect();
        let keep = (0..n).map(|_| (r.below(10) < 7) as u64).collect();
        let args = vec![
            A::Buf(dt, src),
            A::Buf(DType::I8, keep),
            A::Buf(DType::I32, vec![0xdead; bins]),
            A::I32(ext as i32),
        ];
        let what = format!("histogram of {dt}[{n}] (valid {ext}) into {bins}, masked {masked}");
        agree(&what, &k, [1, 1, 1], &args, r.pick(&[80, 90]), warps);
    }
}

/// A gather of an mma accumulator (the dot's layout is the source's), along either axis.
#[test]
fn gather_from_a_dot_accumulator() {
    let mut r = Rng::new("gather_dot");
    for axis in [0, 1] {
        let k = trace("gather_dot", |p| {
            let (a, b) = (p.ptr("a", DType::F16), p.ptr("b", DType::F16));
            let (idx, out) = (p.ptr("idx", DType::I32), p.ptr("out", DType::F32));
            let (rm, rk) = (arange(0, 32), arange(0, 16));
            let av = load_unmasked(a + rm.col() * 16 + rk.row());
            let bv = load_unmasked(b + rk.col() * 32 + rm.row());
            let acc = dot(av, bv);
            let offs = rm.col() * 32 + rm.row();
            let g = gather(acc, load_unmasked(idx + offs), axis);
            store_unmasked(out + offs, g);
        })
        .unwrap();
        let half = |n: usize, r: &mut Rng| -> Vec<u64> {
            (0..n)
                .map(|_| f16::from_f32(r.below(16) as f32 * 0.125 - 1.0).to_bits() as u64)
                .collect()
        };
        let args = vec![
            A::Buf(DType::F16, half(512, &mut r)),
            A::Buf(DType::F16, half(512, &mut r)),
            A::Buf(DType::I32, (0..1024).map(|_| r.below(32) as u64).collect()),
            A::Buf(DType::F32, vec![0; 1024]),
        ];
        agree(
            &format!("gather of a dot along {axis}"),
            &k,
            [1, 1, 1],
            &args,
            80,
            4,
        );
    }
}

/// A gather consumed by a reduction, by a broadcast of its rank-1 result (a sliced layout),
/// inside a loop that carries its source, and of an i1 source with an index longer than it.
#[test]
fn gather_in_the_layouts_its_consumers_ask_for() {
    let mut r = Rng::new("gather_layouts");
    let k = trace("gather_consumers", |p| {
        let (x, idx, out) = (
            p.ptr("x", DType::F32),
            p.ptr("idx", DType::I32),
            p.ptr("out", DType::F32),
        );
        let (sums, grid, n) = (
            p.ptr("sums", DType::F32),
            p.ptr("grid", DType::F32),
            p.scalar("n", DType::I32),
        );
        let (rows, cols) = (arange(0, 16), arange(0, 64));
        let offs = rows.col() * 64 + cols.row();
        let v = load_unmasked(x + offs);
        let ix = load_unmasked(idx + offs);
        // Reduced: the gather materializes in the reduction's operand layout.
        store_unmasked(sums + rows, sum(gather(v, ix, 1), 1));
        // A rank-1 gather broadcast down the rows of a 2-D tile.
        let line = gather(load_unmasked(x + cols), load_unmasked(idx + cols), 0);
        store_unmasked(grid + offs, line.row() + rows.col().to::<f32>());
        // A loop that permutes the tile it carries, `n` times.
        let permuted = for_range(0, n, 1, v, |_, acc| gather(acc, ix, 1) * 0.5 + acc);
        store_unmasked(out + offs, permuted);
    })
    .unwrap();
    let x: Vec<u64> = (0..1024).map(|_| random_bits(&mut r, DType::F32)).collect();
    let idx: Vec<u64> = (0..1024).map(|_| r.below(64) as u64).collect();
    for warps in [1, 4, 8] {
        let args = vec![
            A::Buf(DType::F32, x.clone()),
            A::Buf(DType::I32, idx.clone()),
            A::Buf(DType::F32, vec![0; 1024]),
            A::Buf(DType::F32, vec![0; 16]),
            A::Buf(DType::F32, vec![0; 1024]),
            A::I32(3),
        ];
        agree("gather consumers", &k, [1, 1, 1], &args, 80, warps);
    }
    // An i1 source of 8 elements gathered into 128 lanes, across two programs.
    let k = trace("gather_i1", |p| {
        let (x, idx, out) = (
            p.ptr("x", DType::F32),
            p.ptr("idx", DType::I64),
            p.ptr("out", DType::I32),
        );
        let base = program_id(0) * 128;
        let flags = load_unmasked(x + program_id(0) * 8 + arange(0, 8)).gt(0.0);
        let o = arange(0, 128);
        let picked = gather(flags, load_unmasked(idx + base + o), 0);
        store_unmasked(out + base + o, select(picked, o, -1));
    })
    .unwrap();
    let args = vec![
        A::Buf(
            DType::F32,
            (0..16).map(|_| random_bits(&mut r, DType::F32)).collect(),
        ),
        A::Buf(DType::I64, (0..256).map(|_| r.below(8) as u64).collect()),
        A::Buf(DType::I32, vec![0; 256]),
    ];
    agree("gather of i1", &k, [2, 1, 1], &args, 80, 4);
}

#[test]
fn swizzle2d_agrees_with_the_interpreter() {
    let mut r = Rng::new("swizzle2d");
    for dt in [DType::I32, DType::I64, DType::U32] {
        let k = trace("swizzle", |p| {
            let (oi, oj) = (p.ptr("oi", dt), p.ptr("oj", dt));
            let (si, sj, sg) = (
                p.scalar("si", DType::I32),
                p.scalar("sj", DType::I32),
                p.scalar("sg", DType::I32),
            );
            let (si, sj, sg) = (si.cast(dt), sj.cast(dt), sg.cast(dt));
            let i = arange(0, 16).col().cast(dt);
            let j = arange(0, 32).row().cast(dt);
            let mask = i.lt(si) & j.lt(sj);
            let (ni, nj) = swizzle2d(select(mask, i, 0), select(mask, j, 0), si, sj, sg);
            let offs = arange(0, 16).col() * 32 + arange(0, 32).row();
            store(oi + offs, ni, mask);
            store(oj + offs, nj, mask);
        })
        .unwrap();
        for _ in 0..3 {
            let (si, sj, sg) = (1 + r.below(16), 1 + r.below(32), 1 + r.below(7));
            let args = vec![
                A::Buf(dt, vec![0; 512]),
                A::Buf(dt, vec![0; 512]),
                A::I32(si as i32),
                A::I32(sj as i32),
                A::I32(sg as i32),
            ];
            agree(
                &format!("swizzle2d {dt} {si}x{sj}/{sg}"),
                &k,
                [1, 1, 1],
                &args,
                80,
                4,
            );
        }
    }
}

/// A gather whose source does not fit in a block's shared memory is refused, at its line.
#[test]
fn a_gather_larger_than_shared_memory_is_refused_at_its_line() {
    let mut line = 0;
    let k = trace("big_gather", |p| {
        let (x, idx) = (p.ptr("x", DType::F32), p.ptr("idx", DType::I32));
        let offs = arange(0, 256).col() * 256 + arange(0, 256).row();
        let v = load_unmasked(x + offs);
        line = line!() + 1;
        let g = gather(v, load_unmasked(idx + offs), 1);
        store_unmasked(x + offs, g);
    })
    .unwrap();
    let e = compile(
        &k,
        &Target { sm: 90 },
        &CompileOptions {
            num_warps: 8,
            num_stages: 1,
            mma: MmaChoice::Sync,
            fp_fusion: true,
            tma: false,
        },
    )
    .unwrap_err();
    let text = e.to_string();
    assert!(text.contains("gather from f32[256, 256]"), "{text}");
    assert!(text.contains(&format!("indexing_sim.rs:{line}")), "{text}");
}
