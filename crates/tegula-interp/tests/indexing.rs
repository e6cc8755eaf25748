//! Triton's indexing ops against host references on fresh random inputs: `swizzle2d` over
//! ragged grids, `gather` over ranks 1 to 3, every axis, index tiles longer and shorter than
//! the source, integer indices of every width and signedness and sources of every dtype,
//! `flip` along every axis, `sort` (ascending and descending, with ties, signed zeros and
//! NaN), and `histogram` of every integer dtype with and without a mask (values below, inside
//! and past the bins). The tiles cover odd extents: loads and stores are masked to a ragged
//! part of each power-of-two tile. Out-of-range gather indices are errors naming the gather's
//! line, and so are bad operands of a histogram.
//!
//! The seed is printed and comes from the clock, or from `TEGULA_TEST_SEED`.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use tegula_interp::{run, Arg, Buffer, InterpError, Options};
use tegula_ir::prelude::*;
use tegula_ir::{Kernel, TraceError};

fn rng(test: &str) -> StdRng {
    let seed = std::env::var("TEGULA_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    println!("{test}: seed {seed} (TEGULA_TEST_SEED={seed} repeats it)");
    StdRng::seed_from_u64(seed)
}

/// Row-major offsets of a tile of `shape` and the mask of its first `ext[a]` indices along
/// each axis `a`.
fn offsets(shape: &[usize], ext: &[Tile]) -> (Tile, Tile) {
    let rank = shape.len();
    let mut stride = 1i64;
    let mut offs: Option<Tile> = None;
    let mut mask: Option<Tile> = None;
    for a in (0..rank).rev() {
        let mut r = arange(0, shape[a] as i64);
        for b in 0..rank {
            if b != a {
                r = r.expand_dims(b);
            }
        }
        let o = r * stride;
        let m = r.lt(ext[a]);
        offs = Some(match offs {
            None => o,
            Some(p) => p + o,
        });
        mask = Some(match mask {
            None => m,
            Some(p) => p & m,
        });
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

/// The row-major coordinates of element `e` of `shape`.
fn coords(shape: &[usize], mut e: usize) -> Vec<usize> {
    let mut c = vec![0; shape.len()];
    for a in (0..shape.len()).rev() {
        c[a] = e % shape[a];
        e /= shape[a];
    }
    c
}

fn linear(shape: &[usize], c: &[usize]) -> usize {
    c.iter().zip(shape).fold(0, |acc, (&x, &n)| acc * n + x)
}

/// The linear indices of the line through `c` along `dim` of a tile of `shape`.
fn line_along(shape: &[usize], c: &[usize], dim: usize) -> Vec<usize> {
    (0..shape[dim])
        .map(|i| {
            let mut c = c.to_vec();
            c[dim] = i;
            linear(shape, &c)
        })
        .collect()
}

fn inside(c: &[usize], ext: &[usize]) -> bool {
    c.iter().zip(ext).all(|(&x, &e)| x < e)
}

/// A buffer of `dt` holding `bits`.
fn buffer(dt: DType, bits: &[u64]) -> Arc<Buffer> {
    let b = Buffer::zeroed(dt, bits.len());
    for (i, &v) in bits.iter().enumerate() {
        b.write_bits(i, v);
    }
    Arc::new(b)
}

fn read(b: &Buffer) -> Vec<u64> {
    (0..b.len()).map(|i| b.read_bits(i)).collect()
}

/// Random bits of a value of `dt` (floats: finite values of a few magnitudes, and some ties).
fn random_bits(r: &mut StdRng, dt: DType) -> u64 {
    let bits = dt.bits();
    match dt {
        DType::F32 => (r.gen_range(-64i32..64) as f32 * 0.375).to_bits() as u64,
        DType::F64 => (r.gen_range(-1e6..1e6f64)).to_bits(),
        DType::F16 => f16::from_f32(r.gen_range(-8.0..8.0f32)).to_bits() as u64,
        DType::BF16 => bf16::from_f32(r.gen_range(-8.0..8.0f32)).to_bits() as u64,
        DType::I1 => r.gen_range(0..2),
        _ if bits == 64 => r.gen(),
        _ => r.gen::<u64>() & ((1u64 << bits) - 1),
    }
}

/// What one masked tile program computes: `src` of `src_shape` (valid `src_ext`) loaded with
/// `other = 0`, `index` of `index_shape` (valid `index_ext`, zeros elsewhere) loaded likewise,
/// `op(src, index)` of `index_shape` stored where the index is valid.
struct Program {
    src_dt: DType,
    index_dt: DType,
    src_shape: Vec<usize>,
    src_ext: Vec<usize>,
    index_shape: Vec<usize>,
    index_ext: Vec<usize>,
}

impl Program {
    fn trace(&self, name: &str, op: impl FnOnce(Tile, Tile) -> Tile) -> Kernel {
        trace(name, |p| {
            let src = p.ptr("src", self.src_dt);
            let index = p.ptr("index", self.index_dt);
            let out = p.ptr("out", self.src_dt);
            let sext: Vec<Tile> = (0..self.src_shape.len())
                .map(|a| p.scalar(&format!("s{a}"), DType::I32))
                .collect();
            let iext: Vec<Tile> = (0..self.index_shape.len())
                .map(|a| p.scalar(&format!("i{a}"), DType::I32))
                .collect();
            let (so, sm) = offsets(&self.src_shape, &sext);
            let (io, im) = offsets(&self.index_shape, &iext);
            let x = load(src + so, sm, 0);
            let ix = load(index + io, im, 0);
            store(out + io, op(x, ix), im);
        })
        .unwrap()
    }

    /// Runs `k` on `src` and `index` (bits of full tiles); the output buffer's bits, which start
    /// as `poison`.
    fn run(
        &self,
        k: &Kernel,
        src: &[u64],
        index: &[u64],
        poison: u64,
    ) -> Result<Vec<u64>, InterpError> {
        let out = buffer(self.src_dt, &vec![poison; numel(&self.index_shape)]);
        let mut args = vec![
            Arg::ptr(&buffer(self.src_dt, src)),
            Arg::ptr(&buffer(self.index_dt, index)),
            Arg::ptr(&out),
        ];
        let ext = self.src_ext.iter().chain(&self.index_ext);
        args.extend(ext.map(|&e| Arg::Int(e as i64)));
        run(k, [1, 1, 1], &args, &Options::default())?;
        Ok(read(&out))
    }

    /// The source tile as the kernel loads it: zeros outside the valid extents.
    fn loaded(&self, bits: &[u64], shape: &[usize], ext: &[usize]) -> Vec<u64> {
        (0..numel(shape))
            .map(|e| {
                if inside(&coords(shape, e), ext) {
                    bits[e]
                } else {
                    0
                }
            })
            .collect()
    }

    /// Checks `got` against `want(e)` on the valid part of the index tile, and the poison
    /// elsewhere.
    fn check(&self, got: &[u64], poison: u64, want: impl Fn(usize) -> u64, what: &str) {
        for (e, &g) in got.iter().enumerate() {
            let c = coords(&self.index_shape, e);
            let w = if inside(&c, &self.index_ext) {
                want(e)
            } else {
                poison
            };
            assert_eq!(
                g,
                w,
                "{what}: element {c:?}: got bits {g:#x}, want {w:#x} (src {:?} of {:?}, \
                 index {:?} of {:?}, {} from {})",
                self.src_ext,
                self.src_shape,
                self.index_ext,
                self.index_shape,
                self.src_dt,
                self.index_dt
            );
        }
    }
}

fn pick<T: Copy>(r: &mut StdRng, xs: &[T]) -> T {
    xs[r.gen_range(0..xs.len())]
}

/// A shape of `rank` power-of-two axes with at most `max` elements, and ragged extents in it.
fn shape_and_ext(r: &mut StdRng, rank: usize, max: usize) -> (Vec<usize>, Vec<usize>) {
    loop {
        let shape: Vec<usize> = (0..rank).map(|_| 1 << r.gen_range(0..6)).collect();
        if numel(&shape) <= max {
            let ext = shape.iter().map(|&n| r.gen_range(1..=n)).collect();
            return (shape, ext);
        }
    }
}

/// The largest index of dtype `dt`, for index values: narrow types cannot name every row.
fn index_limit(dt: DType) -> u64 {
    match dt.bits() {
        8 if dt.is_signed_int() => 127,
        8 => 255,
        16 if dt.is_signed_int() => i16::MAX as u64,
        _ => u64::MAX,
    }
}

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

#[test]
fn gather_matches_a_host_gather() {
    let mut r = rng("gather");
    for case in 0..200 {
        let rank = 1 + case % 3;
        let axis = r.gen_range(0..rank);
        let (src_shape, src_ext) = shape_and_ext(&mut r, rank, 2048);
        let mut index_shape = src_shape.clone();
        index_shape[axis] = 1 << r.gen_range(0..6);
        let mut index_ext: Vec<usize> = index_shape.iter().map(|&n| r.gen_range(1..=n)).collect();
        // Off the gathered axis the index covers the source's valid part or less.
        for a in 0..rank {
            if a != axis {
                index_ext[a] = index_ext[a].min(src_ext[a]);
            }
        }
        let index_dt = pick(&mut r, &INDEX_DTYPES);
        let src_dt = pick(&mut r, &VALUE_DTYPES);
        let rows = src_shape[axis] as u64;
        if index_limit(index_dt) < rows - 1 {
            continue;
        }
        let p = Program {
            src_dt,
            index_dt,
            src_shape: src_shape.clone(),
            src_ext: src_ext.clone(),
            index_shape: index_shape.clone(),
            index_ext,
        };
        let k = p.trace("gather", |x, ix| gather(x, ix, axis));
        let src: Vec<u64> = (0..numel(&src_shape))
            .map(|_| random_bits(&mut r, src_dt))
            .collect();
        // Indices anywhere along the tile's axis, the zero padding of the load included.
        let index: Vec<u64> = (0..numel(&index_shape))
            .map(|_| r.gen_range(0..rows))
            .collect();
        let poison = 1;
        let got = p.run(&k, &src, &index, poison).unwrap();
        let loaded = p.loaded(&src, &src_shape, &src_ext);
        p.check(
            &got,
            poison,
            |e| {
                let mut c = coords(&index_shape, e);
                c[axis] = index[e] as usize;
                loaded[linear(&src_shape, &c)]
            },
            "gather",
        );
    }
}

#[test]
fn gather_method_and_pointer_sources() {
    // `src.gather(index, axis)`, and a gather of pointers: each lane loads through the pointer
    // its index picks.
    let k = trace("gather_ptrs", |p| {
        let (x, idx, out) = (
            p.ptr("x", DType::F32),
            p.ptr("idx", DType::I32),
            p.ptr("out", DType::F32),
        );
        let o = arange(0, 16);
        let ptrs = x + o * 2;
        let picked = ptrs.gather(load_unmasked(idx + o), 0);
        store_unmasked(out + o, load_unmasked(picked));
    })
    .unwrap();
    let x: Vec<f32> = (0..32).map(|i| i as f32 * 1.5).collect();
    let idx: Vec<i32> = (0..16).map(|i| (i * 7 + 3) % 16).collect();
    let (xb, ib) = (
        Arc::new(Buffer::from_slice(&x)),
        Arc::new(Buffer::from_slice(&idx)),
    );
    let out = Arc::new(Buffer::zeroed(DType::F32, 16));
    run(
        &k,
        [1, 1, 1],
        &[Arg::ptr(&xb), Arg::ptr(&ib), Arg::ptr(&out)],
        &Options::default(),
    )
    .unwrap();
    let got = out.to_vec::<f32>().unwrap();
    for i in 0..16 {
        assert_eq!(got[i], x[2 * idx[i] as usize]);
    }
}

#[test]
fn gather_index_out_of_range_is_an_error_at_its_line() {
    for (bad, dt) in [
        (8u64, DType::I32),
        ((-1i32) as u32 as u64, DType::I32),
        (u64::MAX, DType::U64),
        (200, DType::U8),
    ] {
        let p = Program {
            src_dt: DType::F32,
            index_dt: dt,
            src_shape: vec![4, 8],
            src_ext: vec![3, 5],
            index_shape: vec![4, 2],
            index_ext: vec![3, 2],
        };
        let line = line!() + 1;
        let k = p.trace("oob", |x, ix| gather(x, ix, 1));
        let mut index = vec![0u64; 8];
        index[5] = bad;
        let e = p.run(&k, &[0; 32], &index, 0).unwrap_err();
        match &e {
            InterpError::IndexOutOfRange {
                loc,
                index,
                dtype,
                axis,
                len,
                at,
                op,
                ..
            } => {
                assert_eq!(loc.line, line, "{e}");
                assert_eq!((*axis, *len, &at[..], *op), (1, 8, &[2, 1][..], "gather"));
                let want = match dt {
                    DType::I32 => bad as u32 as i32 as i64,
                    _ => bad as i64,
                };
                assert_eq!((*index, *dtype), (want, dt), "{e}");
            }
            other => panic!("expected an index error, got {other}"),
        }
        let text = e.to_string();
        let shown = match dt {
            DType::I32 => (bad as u32 as i32).to_string(),
            _ => bad.to_string(),
        };
        assert!(
            text.contains("gather index out of range")
                && text.contains("indexing.rs")
                && text.contains(&format!("index {shown} at [2, 1]")),
            "{text}"
        );
    }
}

/// Traces a gather that case `which` gets wrong; the error and the line of the gather.
fn bad_gather(which: usize) -> (TraceError, u32) {
    let mut line = 0;
    let e = trace("bad", |p| {
        let x = load_unmasked(p.ptr("x", DType::F32) + arange(0, 16));
        let i = load_unmasked(p.ptr("i", DType::I32) + arange(0, 16));
        let (x2, i2, f) = (x.reshape([4, 4]), i.reshape([2, 8]), x * 2.0);
        match which {
            0 => (line, _) = (line!(), gather(x, f, 0)),
            1 => (line, _) = (line!(), gather(x, i.reshape([4, 4]), 0)),
            2 => (line, _) = (line!(), gather(x2, i2, 1)),
            3 => (line, _) = (line!(), gather(x, i, 1)),
            _ => (line, _) = (line!(), x.gather(x.eq(0.0), 0)),
        }
    })
    .unwrap_err();
    (e, line)
}

#[test]
fn gather_refuses_bad_operands_at_the_users_line() {
    let wants = [
        "integer index tile",
        "one rank",
        "differ on axis 0",
        "one rank",
        "integer index tile",
    ];
    for (which, want) in wants.iter().enumerate() {
        let (e, line) = bad_gather(which);
        assert!(e.message.contains(want), "{want}: {e}");
        assert_eq!(e.loc.line, line, "{e}");
        assert!(e.loc.file.ends_with("indexing.rs"), "{e}");
    }
}

#[test]
fn flip_matches_a_host_reversal() {
    let mut r = rng("flip");
    for case in 0..120 {
        let rank = 1 + case % 3;
        let axis = r.gen_range(0..rank);
        let (shape, ext) = shape_and_ext(&mut r, rank, 2048);
        let dt = pick(&mut r, &VALUE_DTYPES);
        let p = Program {
            src_dt: dt,
            index_dt: DType::I32,
            src_shape: shape.clone(),
            src_ext: ext.clone(),
            index_shape: shape.clone(),
            index_ext: ext.clone(),
        };
        let method = case % 2 == 0;
        let k = p.trace(
            "flip",
            |x, _| if method { x.flip(axis) } else { flip(x, axis) },
        );
        let src: Vec<u64> = (0..numel(&shape))
            .map(|_| random_bits(&mut r, dt))
            .collect();
        let got = p.run(&k, &src, &vec![0; numel(&shape)], 3).unwrap();
        let loaded = p.loaded(&src, &shape, &ext);
        p.check(
            &got,
            3,
            |e| {
                let mut c = coords(&shape, e);
                c[axis] = shape[axis] - 1 - c[axis];
                loaded[linear(&shape, &c)]
            },
            "flip",
        );
    }
    let e = trace("bad", |p| {
        flip(load_unmasked(p.ptr("x", DType::F32) + arange(0, 16)), 1);
    })
    .unwrap_err();
    assert!(e.message.contains("not an axis"), "{e}");
}

/// A sort key: integers by value (signed or unsigned), floats by value.
#[derive(Clone, Copy, PartialEq, PartialOrd, Debug)]
enum Key {
    I(i128),
    F(f64),
}

fn key(dt: DType, bits: u64) -> Key {
    let b = dt.bits();
    match dt {
        DType::F32 => Key::F(f32::from_bits(bits as u32) as f64),
        DType::F64 => Key::F(f64::from_bits(bits)),
        DType::F16 => Key::F(f16::from_bits(bits as u16).to_f64()),
        DType::BF16 => Key::F(bf16::from_bits(bits as u16).to_f64()),
        _ if dt.is_signed_int() => Key::I(((bits << (64 - b)) as i64 >> (64 - b)) as i128),
        _ => Key::I(bits as i128),
    }
}

#[test]
fn sort_matches_a_host_sort() {
    let mut r = rng("sort");
    for case in 0..120 {
        let rank = 1 + case % 3;
        let dim = r.gen_range(0..rank);
        let (shape, ext) = shape_and_ext(&mut r, rank, 1024);
        let dt = pick(&mut r, &VALUE_DTYPES);
        let descending = r.gen_bool(0.5);
        let p = Program {
            src_dt: dt,
            index_dt: DType::I32,
            src_shape: shape.clone(),
            src_ext: ext.clone(),
            index_shape: shape.clone(),
            index_ext: shape.clone(),
        };
        let k = p.trace("sort", |x, _| sort(x, dim, descending));
        let mut src: Vec<u64> = (0..numel(&shape))
            .map(|_| random_bits(&mut r, dt))
            .collect();
        if dt.is_float() && case % 4 == 0 {
            // Signed zeros: equal, in the network's order.
            let neg_zero = match dt {
                DType::F32 => (-0.0f32).to_bits() as u64,
                DType::F64 => (-0.0f64).to_bits(),
                _ => 0x8000,
            };
            src[0] = neg_zero;
        }
        let got = p.run(&k, &src, &vec![0; numel(&shape)], 0).unwrap();
        let loaded = p.loaded(&src, &shape, &ext);
        // Each line along `dim`: the host's sort of its keys, and the same bits.
        for e in 0..numel(&shape) {
            let c = coords(&shape, e);
            if c[dim] != 0 {
                continue;
            }
            let line = line_along(&shape, &c, dim);
            let mut want: Vec<Key> = line.iter().map(|&i| key(dt, loaded[i])).collect();
            want.sort_by(|a, b| a.partial_cmp(b).unwrap());
            if descending {
                want.reverse();
            }
            let keys: Vec<Key> = line.iter().map(|&i| key(dt, got[i])).collect();
            assert_eq!(
                keys, want,
                "line at {c:?} of {shape:?} along {dim}, {dt}, descending {descending}"
            );
            let mut bits_in: Vec<u64> = line.iter().map(|&i| loaded[i]).collect();
            let mut bits_out: Vec<u64> = line.iter().map(|&i| got[i]).collect();
            bits_in.sort();
            bits_out.sort();
            assert_eq!(bits_in, bits_out, "the sort permutes the line's bits");
        }
    }
}

#[test]
fn topk_is_the_largest_k_of_each_line_largest_first() {
    let mut r = rng("topk");
    for case in 0..80 {
        let rank = 1 + case % 3;
        let dim = r.gen_range(0..rank);
        let (shape, ext) = shape_and_ext(&mut r, rank, 512);
        let n = shape[dim];
        let k = 1usize << r.gen_range(0..=n.trailing_zeros());
        let mut out_shape = shape.clone();
        out_shape[dim] = k;
        let dt = pick(&mut r, &VALUE_DTYPES);
        let p = Program {
            src_dt: dt,
            index_dt: DType::I32,
            src_shape: shape.clone(),
            src_ext: ext.clone(),
            index_shape: out_shape.clone(),
            index_ext: out_shape.clone(),
        };
        let kern = p.trace("topk", |x, _| x.topk(k, dim));
        let src: Vec<u64> = (0..numel(&shape))
            .map(|_| random_bits(&mut r, dt))
            .collect();
        let got = p.run(&kern, &src, &vec![0; numel(&out_shape)], 0).unwrap();
        let loaded = p.loaded(&src, &shape, &ext);
        for e in 0..numel(&out_shape) {
            let c = coords(&out_shape, e);
            if c[dim] != 0 {
                continue;
            }
            let mut line: Vec<Key> = line_along(&shape, &c, dim)
                .into_iter()
                .map(|i| key(dt, loaded[i]))
                .collect();
            line.sort_by(|a, b| b.partial_cmp(a).unwrap());
            let keys: Vec<Key> = line_along(&out_shape, &c, dim)
                .into_iter()
                .map(|i| key(dt, got[i]))
                .collect();
            assert_eq!(
                keys,
                line[..k],
                "line at {c:?} of {shape:?} along {dim}, top {k}, {dt}"
            );
        }
    }
    // k must be a power of two no larger than the axis.
    for k in [3, 32] {
        let e = trace("bad", |_| {
            topk(full::<f32>([16], 1.0), k, 0);
        })
        .unwrap_err();
        assert!(e.message.contains("power of two no larger"), "{e}");
    }
}

#[test]
fn sort_with_nan_permutes_and_sorts_the_rest_around_it() {
    // A NaN is never exchanged: the result keeps every value, NaN included.
    let p = Program {
        src_dt: DType::F32,
        index_dt: DType::I32,
        src_shape: vec![16],
        src_ext: vec![16],
        index_shape: vec![16],
        index_ext: vec![16],
    };
    let k = p.trace("sort_nan", |x, _| sort(x, 0, false));
    let mut src: Vec<u64> = (0..16)
        .map(|i| ((i * 5 % 16) as f32).to_bits() as u64)
        .collect();
    src[3] = f32::NAN.to_bits() as u64;
    let got = p.run(&k, &src, &[0; 16], 0).unwrap();
    let (mut a, mut b) = (src.clone(), got.clone());
    a.sort();
    b.sort();
    assert_eq!(a, b);
    // Without the NaN the same network sorts.
    src[3] = 100f32.to_bits() as u64;
    let got = p.run(&k, &src, &[0; 16], 0).unwrap();
    let vals: Vec<f32> = got.iter().map(|&b| f32::from_bits(b as u32)).collect();
    assert!(vals.windows(2).all(|w| w[0] <= w[1]), "{vals:?}");
}

#[test]
fn sort_refuses_what_a_network_cannot_sort() {
    let e = trace("bad", |_| {
        sort(full::<f32>([12], 1.0), 0, false);
    })
    .unwrap_err();
    assert!(e.message.contains("power of two"), "{e}");
    let e = trace("bad", |p| {
        sort(
            load_unmasked(p.ptr("x", DType::F32) + arange(0, 16)),
            1,
            true,
        );
    })
    .unwrap_err();
    assert!(e.message.contains("not an axis"), "{e}");
    let e = trace("bad", |p| {
        let x = p.ptr("x", DType::F32) + arange(0, 16);
        sort(x, 0, false);
    })
    .unwrap_err();
    assert!(e.message.contains("sort needs numbers"), "{e}");
}

/// Triton's formula, on the host.
fn host_swizzle(i: i64, j: i64, size_i: i64, size_j: i64, size_g: i64) -> (i64, i64) {
    let ij = i * size_j + j;
    let size_gj = size_g * size_j;
    let group = ij / size_gj;
    let off_i = group * size_g;
    let g = (size_i - off_i).min(size_g);
    let ij = ij % size_gj;
    (off_i + ij % g, ij / g)
}

/// Runs `swizzle2d` over a `[16, 16]` tile of `(i, j)`, returning `(new_i, new_j)` per element.
fn swizzle_run(size_i: i64, size_j: i64, size_g: i64, dt: DType) -> Vec<(i64, i64)> {
    let k = trace("swizzle", |p| {
        let (oi, oj) = (p.ptr("oi", dt), p.ptr("oj", dt));
        let (si, sj, sg) = (p.scalar("si", dt), p.scalar("sj", dt), p.scalar("sg", dt));
        let i = arange(0, 16).col().cast(dt);
        let j = arange(0, 16).row().cast(dt);
        let mask = i.lt(si) & j.lt(sj);
        // Lanes outside the grid would divide by an empty group: give them (0, 0).
        let (ni, nj) = swizzle2d(select(mask, i, 0), select(mask, j, 0), si, sj, sg);
        let offs = arange(0, 16).col() * 16 + arange(0, 16).row();
        store(oi + offs, ni, mask);
        store(oj + offs, nj, mask);
    })
    .unwrap();
    let (oi, oj) = (
        Arc::new(Buffer::zeroed(dt, 256)),
        Arc::new(Buffer::zeroed(dt, 256)),
    );
    run(
        &k,
        [1, 1, 1],
        &[
            Arg::ptr(&oi),
            Arg::ptr(&oj),
            Arg::Int(size_i),
            Arg::Int(size_j),
            Arg::Int(size_g),
        ],
        &Options::default(),
    )
    .unwrap();
    let (a, b) = (oi.to_f64(), oj.to_f64());
    a.iter()
        .zip(&b)
        .map(|(&x, &y)| (x as i64, y as i64))
        .collect()
}

#[test]
fn swizzle2d_matches_tritons_example() {
    // The docstring's 4 x 4 grid in groups of 2 rows: linear index `i * 4 + j` lands at the
    // swizzled position.
    let got = swizzle_run(4, 4, 2, DType::I32);
    let mut grid = [[0i64; 4]; 4];
    for i in 0..4 {
        for j in 0..4 {
            let (ni, nj) = got[i * 16 + j];
            grid[ni as usize][nj as usize] = (i * 4 + j) as i64;
        }
    }
    assert_eq!(
        grid,
        [[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], [9, 11, 13, 15]]
    );
}

#[test]
fn swizzle2d_matches_the_host_formula_and_permutes_the_grid() {
    let mut r = rng("swizzle2d");
    for _ in 0..60 {
        let (si, sj, sg) = (
            r.gen_range(1..=16i64),
            r.gen_range(1..=16i64),
            r.gen_range(1..=9i64),
        );
        let dt = pick(&mut r, &[DType::I32, DType::I64, DType::U32, DType::I16]);
        let got = swizzle_run(si, sj, sg, dt);
        let mut seen = vec![false; (si * sj) as usize];
        for i in 0..si {
            for j in 0..sj {
                let (ni, nj) = got[(i * 16 + j) as usize];
                assert_eq!(
                    (ni, nj),
                    host_swizzle(i, j, si, sj, sg),
                    "({i}, {j}) of {si} x {sj}, groups of {sg}, {dt}"
                );
                assert!(ni < si && nj < sj, "({ni}, {nj}) inside the grid");
                assert!(!std::mem::replace(&mut seen[(ni * sj + nj) as usize], true));
            }
        }
    }
    // Scalars and literals, as a matmul kernel's program ids use it.
    let k = trace("swizzle_scalars", |p| {
        let out = p.ptr("out", DType::I32);
        let (ni, nj) = swizzle2d(program_id(0), program_id(1), 5, 7, 2);
        store_unmasked(out + (program_id(0) * 7 + program_id(1)) * 2, ni);
        store_unmasked(out + (program_id(0) * 7 + program_id(1)) * 2 + 1, nj);
    })
    .unwrap();
    let out = Arc::new(Buffer::zeroed(DType::I32, 70));
    run(&k, [5, 7, 1], &[Arg::ptr(&out)], &Options::default()).unwrap();
    let got = out.to_vec::<i32>().unwrap();
    for i in 0..5 {
        for j in 0..7 {
            let e = ((i * 7 + j) * 2) as usize;
            let want = host_swizzle(i, j, 5, 7, 2);
            assert_eq!((got[e] as i64, got[e + 1] as i64), want);
        }
    }
    let e = trace("bad", |_| {
        swizzle2d(program_id(0), 1.5, 4, 4, 2);
    })
    .unwrap_err();
    assert!(e.message.contains("`j` is the float 1.5"), "{e}");
}

/// The value of the bits of an integer `dt` (signed or unsigned; i1 as 0 or 1).
fn int_value(dt: DType, bits: u64) -> i128 {
    match key(dt, bits) {
        Key::I(v) => v,
        Key::F(_) => unreachable!("{dt} is an integer dtype"),
    }
}

/// A histogram program: `src` (a tile of `n`, valid `ext`) loaded with `other`, its histogram
/// into `bins` bins stored to `out`; `masked` counts only where the load's mask is true and
/// the byte of `keep` is nonzero; `method` spells it `x.histogram(..)`.
fn histogram_kernel(
    dt: DType,
    n: usize,
    bins: usize,
    masked: bool,
    other: i64,
    method: bool,
) -> Kernel {
    trace("histogram", |p| {
        let (src, keep) = (p.ptr("src", dt), p.ptr("keep", DType::I8));
        let out = p.ptr("out", DType::I32);
        let ext = p.scalar("ext", DType::I32);
        let o = arange(0, n as i64);
        let m = o.lt(ext);
        let x = load(src + o, m, other);
        let h = match (masked, method) {
            (false, false) => histogram(x, bins),
            (false, true) => x.histogram(bins),
            (true, false) => histogram_masked(x, bins, m & load(keep + o, m, 0).ne(0)),
            (true, true) => x.histogram_masked(bins, m & load(keep + o, m, 0).ne(0)),
        };
        store_unmasked(out + arange(0, bins as i64), h);
    })
    .unwrap()
}

/// Bits of a value of the integer `dt`: mostly near the bins (below them, in them, past
/// them; negative ones wrap in unsigned dtypes), else any bits of the dtype.
fn histogram_value(r: &mut StdRng, dt: DType, bins: usize) -> u64 {
    if dt == DType::I1 {
        return r.gen_range(0..2);
    }
    let w = dt.bits();
    let mask = if w == 64 { u64::MAX } else { (1u64 << w) - 1 };
    if r.gen_bool(0.75) {
        let spread = bins as i64 / 4 + 2;
        (r.gen_range(-spread..bins as i64 + spread) as u64) & mask
    } else {
        r.gen::<u64>() & mask
    }
}

const HISTOGRAM_DTYPES: [DType; 9] = [
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

#[test]
fn histogram_matches_a_host_count() {
    let mut r = rng("histogram");
    for case in 0..160 {
        let dt = pick(&mut r, &HISTOGRAM_DTYPES);
        let (n, bins) = loop {
            let (n, bins) = (1usize << r.gen_range(0..=10), 1usize << r.gen_range(0..=9));
            if n * bins <= 1 << 16 {
                break (n, bins);
            }
        };
        let ext = r.gen_range(1..=n);
        let masked = case % 2 == 1;
        // Lanes past `ext` read `other`: counted in its bin unless masked off.
        let other = match dt {
            DType::I1 | DType::U8 | DType::U16 | DType::U32 | DType::U64 => r.gen_range(0..2),
            _ => r.gen_range(-1..2),
        };
        let k = histogram_kernel(dt, n, bins, masked, other, case % 4 >= 2);
        let src: Vec<u64> = (0..n).map(|_| histogram_value(&mut r, dt, bins)).collect();
        let keep: Vec<u64> = (0..n).map(|_| r.gen_bool(0.7) as u64).collect();
        let out = buffer(DType::I32, &vec![0xdead; bins]);
        run(
            &k,
            [1, 1, 1],
            &[
                Arg::ptr(&buffer(dt, &src)),
                Arg::ptr(&buffer(DType::I8, &keep)),
                Arg::ptr(&out),
                Arg::Int(ext as i64),
            ],
            &Options::default(),
        )
        .unwrap();
        let mut want = vec![0u64; bins];
        for i in 0..n {
            let v = if i < ext {
                int_value(dt, src[i])
            } else {
                other as i128
            };
            let counted = !masked || (i < ext && keep[i] != 0);
            if counted && (0..bins as i128).contains(&v) {
                want[v as usize] += 1;
            }
        }
        let got = read(&out);
        assert_eq!(
            got, want,
            "histogram of {dt}[{n}] (valid {ext}, other {other}) into {bins} bins, masked \
             {masked}"
        );
        let total: u64 = got.iter().sum();
        assert!(total <= n as u64, "every element counts at most once");
    }
}

#[test]
fn histogram_of_a_small_tile() {
    // Triton's semantics: bins of width 1 from 0; -1 and 5 fall outside 4 bins; a mask leaves
    // elements out, and a scalar mask broadcasts.
    let values: [i32; 8] = [0, 1, 1, 3, -1, 5, 2, 1];
    let k = trace("small", |p| {
        let (x, out) = (p.ptr("x", DType::I32), p.ptr("out", DType::I32));
        let o = arange(0, 8);
        let v = load_unmasked(x + o);
        store_unmasked(out + arange(0, 4), histogram(v, 4));
        store_unmasked(out + 4 + arange(0, 4), histogram_masked(v, 4, o.lt(3)));
        let everywhere = program_id(0).eq(0);
        store_unmasked(out + 8 + arange(0, 4), v.histogram_masked(4, everywhere));
        store_unmasked(
            out + 12 + arange(0, 4),
            histogram_masked(v, 4, everywhere.ne(1)),
        );
        store_unmasked(out + 16 + arange(0, 16), histogram(v.cast(DType::U8), 16));
    })
    .unwrap();
    let x = buffer(DType::I32, &values.map(|v| v as u32 as u64));
    let out = buffer(DType::I32, &[7; 32]);
    run(
        &k,
        [1, 1, 1],
        &[Arg::ptr(&x), Arg::ptr(&out)],
        &Options::default(),
    )
    .unwrap();
    let got = read(&out);
    assert_eq!(got[..4], [1, 3, 1, 1]);
    assert_eq!(got[4..8], [1, 2, 0, 0]);
    assert_eq!(got[8..12], [1, 3, 1, 1]);
    assert_eq!(got[12..16], [0, 0, 0, 0]);
    // As u8, -1 is 255: still outside 16 bins; 5 is inside.
    let mut want = [0u64; 16];
    for v in [0, 1, 1, 3, 5, 2, 1] {
        want[v] += 1;
    }
    assert_eq!(got[16..32], want);
}

/// Traces a histogram that case `which` gets wrong; the error and the line of the histogram.
fn bad_histogram(which: usize) -> (TraceError, u32) {
    let mut line = 0;
    let e = trace("bad", |p| {
        let x = load_unmasked(p.ptr("x", DType::I32) + arange(0, 16));
        let f = load_unmasked(p.ptr("f", DType::F32) + arange(0, 16));
        let (m, q) = (x.gt(0), p.ptr("q", DType::I32) + arange(0, 16));
        match which {
            0 => (line, _) = (line!(), histogram(f, 8)),
            1 => (line, _) = (line!(), histogram(x.reshape([4, 4]), 8)),
            2 => (line, _) = (line!(), histogram(x, 12)),
            3 => (line, _) = (line!(), x.histogram(0)),
            4 => (line, _) = (line!(), histogram_masked(x, 8, m.reshape([4, 4]))),
            5 => (line, _) = (line!(), histogram_masked(x, 8, arange(0, 8).gt(2))),
            6 => (line, _) = (line!(), x.histogram_masked(8, x)),
            7 => (line, _) = (line!(), histogram(q, 8)),
            _ => (line, _) = (line!(), histogram(arange(0, 1 << 20), 1 << 13)),
        }
    })
    .unwrap_err();
    (e, line)
}

#[test]
fn histogram_refuses_bad_operands_at_the_users_line() {
    let wants = [
        "histogram needs an integer tile, got f32[16]",
        "histogram needs a 1-D tile, got i32[4, 4]",
        "num_bins = 12 must be a positive power of two",
        "num_bins = 0 must be a positive power of two",
        "does not broadcast to the input's shape",
        "does not broadcast to the input's shape",
        "the mask of a histogram must be i1, got i32[16]",
        "histogram needs an integer tile",
        "more than a tile holds",
    ];
    for (which, want) in wants.iter().enumerate() {
        let (e, line) = bad_histogram(which);
        assert!(e.message.contains(want), "{want}: {e}");
        assert_eq!(e.loc.line, line, "{e}");
        assert!(e.loc.file.ends_with("indexing.rs"), "{e}");
    }
}
