//! `reduce_with` and `scan_with` (a combine function, tuple inputs) compiled to PTX and run
//! on the PTX simulator against the interpreter, bit for bit: an argmax with indices (f32 and
//! f16 values), Welford's (mean, m2, count) in f32, 2x2 integer matrix products (four
//! tiles, associative but not commutative, so any change of combine order shows) and i1, u8
//! and f64 tiles combined together (every register class through the shuffles), over fresh
//! random inputs, masked tiles with odd extents, each axis, on 1, 4 and 8 warps; the kernels
//! also assemble with ptxas for sm_80 and sm_90a.
//!
//! The seed is printed and comes from the clock, or from `TEGULA_TEST_SEED`.

mod sim;

use sim::{agree, Rng, A};
use tegula_ir::prelude::*;
use tegula_ir::Kernel;
use tegula_ptx::{compile, CompileOptions, MmaChoice, Target};

/// Row-major offsets of a tile of `shape`, the mask of its first `ext[a]` indices on each axis
/// `a`, and the index along `axis`.
fn offsets(shape: &[usize], ext: &[Tile], axis: usize) -> (Tile, Tile, Tile) {
    let rank = shape.len();
    let mut stride = 1i64;
    let (mut offs, mut mask, mut along): (Option<Tile>, Option<Tile>, Option<Tile>) =
        (None, None, None);
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
        if a == axis {
            along = Some(r);
        }
        stride *= shape[a] as i64;
    }
    (
        offs.unwrap().broadcast_to(shape),
        mask.unwrap().broadcast_to(shape),
        along.unwrap().broadcast_to(shape),
    )
}

#[derive(Clone, Copy, Debug)]
enum Combine {
    /// (value, index): the largest value, the lowest index on ties.
    ArgMax(DType),
    /// Welford's (mean, m2, count), f32.
    Welford,
    /// Products of 2x2 i32 matrices (a, b, c, d), wrapping.
    MatMul,
    /// (i1 or, u8 max, f64 sum): predicates, narrow integers and 64-bit floats through the
    /// shuffles and shared memory.
    Mixed,
}

impl Combine {
    fn dtypes(self) -> Vec<DType> {
        match self {
            Combine::ArgMax(d) => vec![d, DType::I32],
            Combine::Welford => vec![DType::F32; 3],
            Combine::MatMul => vec![DType::I32; 4],
            Combine::Mixed => vec![DType::I1, DType::U8, DType::F64],
        }
    }

    /// The dtypes of the input buffers: the combined ones, except that `Mixed` makes its i1
    /// and u8 tiles from i32 loads.
    fn input_dtypes(self) -> Vec<DType> {
        match self {
            Combine::Mixed => vec![DType::I32, DType::I32, DType::F64],
            c => c.dtypes(),
        }
    }
}

fn argmax_combine((v0, i0): (Tile, Tile), (v1, i1): (Tile, Tile)) -> (Tile, Tile) {
    let take = v1.gt(v0) | (v1.eq(v0) & i1.lt(i0));
    (select(take, v1, v0), select(take, i1, i0))
}

fn welford_combine(
    (m0, s0, n0): (Tile, Tile, Tile),
    (m1, s1, n1): (Tile, Tile, Tile),
) -> (Tile, Tile, Tile) {
    let n = n0 + n1;
    let delta = m1 - m0;
    let w = select(n.eq(0.0), 0.0, div_rn(n1, n));
    (m0 + delta * w, s0 + s1 + delta * delta * n0 * w, n)
}

#[allow(clippy::type_complexity)]
fn matmul_combine(
    (a0, b0, c0, d0): (Tile, Tile, Tile, Tile),
    (a1, b1, c1, d1): (Tile, Tile, Tile, Tile),
) -> (Tile, Tile, Tile, Tile) {
    (
        a0 * a1 + b0 * c1,
        a0 * b1 + b0 * d1,
        c0 * a1 + d0 * c1,
        c0 * b1 + d0 * d1,
    )
}

/// A kernel that loads the inputs of `combine` as tiles of `shape` (the first `ext` indices
/// per axis; the rest are the combine's identity), combines along `axis` (a reduction, or a
/// scan when `scan` is `Some(reverse)`) and stores every result flat.
fn kernel(shape: &[usize], axis: usize, combine: Combine, scan: Option<bool>) -> Kernel {
    let dtypes = combine.dtypes();
    let input_dtypes = combine.input_dtypes();
    trace("combine", |p| {
        let ins: Vec<Tile> = (0..dtypes.len())
            .map(|i| p.ptr(&format!("x{i}"), input_dtypes[i]))
            .collect();
        let outs: Vec<Tile> = (0..dtypes.len())
            .map(|i| p.ptr(&format!("y{i}"), dtypes[i]))
            .collect();
        let ext: Vec<Tile> = (0..shape.len())
            .map(|a| p.scalar(&format!("ext{a}"), DType::I32))
            .collect();
        let (offs, mask, along) = offsets(shape, &ext, axis);
        let results: Vec<Tile> = match combine {
            Combine::ArgMax(_) => {
                let v = load(ins[0] + offs, mask, f64::NEG_INFINITY);
                let i = select(mask, along, i32::MAX);
                let x = (v, i);
                let (a, b) = match scan {
                    None => reduce_with(x, axis, argmax_combine),
                    Some(rev) => scan_with(x, axis, rev, argmax_combine),
                };
                vec![a, b]
            }
            Combine::Welford => {
                let v = load(ins[0] + offs, mask, 0.0);
                let x = (v, v * 0.0, select(mask, 1.0f32, 0.0f32));
                let (a, b, c) = match scan {
                    None => reduce_with(x, axis, welford_combine),
                    Some(rev) => scan_with(x, axis, rev, welford_combine),
                };
                vec![a, b, c]
            }
            Combine::Mixed => {
                let l = |i: usize| load(ins[i] + offs, mask, 0);
                let x = (l(0).eq(0) & mask, l(1).to::<u8>(), l(2));
                let f = |(f0, u0, s0): (Tile, Tile, Tile), (f1, u1, s1): (Tile, Tile, Tile)| {
                    (f0 | f1, maximum(u0, u1), s0 + s1)
                };
                let (a, b, c) = match scan {
                    None => reduce_with(x, axis, f),
                    Some(rev) => scan_with(x, axis, rev, f),
                };
                vec![a, b, c]
            }
            Combine::MatMul => {
                let l = |i: usize, other: i64| load(ins[i] + offs, mask, other);
                let x = (l(0, 1), l(1, 0), l(2, 0), l(3, 1));
                let (a, b, c, d) = match scan {
                    None => reduce_with(x, axis, matmul_combine),
                    Some(rev) => scan_with(x, axis, rev, matmul_combine),
                };
                vec![a, b, c, d]
            }
        };
        let out_shape: Vec<usize> = match scan {
            None => (0..shape.len())
                .filter(|&a| a != axis)
                .map(|a| shape[a])
                .collect(),
            Some(_) => shape.to_vec(),
        };
        let n: usize = out_shape.iter().product();
        let o = if out_shape.is_empty() {
            None
        } else {
            Some(arange(0, n as i64).reshape(&out_shape[..]))
        };
        for (y, r) in outs.iter().zip(results) {
            match o {
                Some(o) => store_unmasked(*y + o, r),
                None => store_unmasked(*y, r),
            }
        }
    })
    .unwrap()
}

fn random_input(r: &mut Rng, dt: DType, n: usize) -> Vec<u64> {
    (0..n)
        .map(|_| match dt {
            // Few distinct values: many ties.
            DType::F32 => ((r.below(16) as f32 - 8.0) * 0.5).to_bits() as u64,
            DType::F16 => half::f16::from_f32(r.below(16) as f32 - 8.0).to_bits() as u64,
            DType::F64 => (r.below(1 << 20) as f64 / 1024.0 - 512.0).to_bits(),
            _ => (r.below(9) as i64 - 4) as u32 as u64,
        })
        .collect()
}

fn welford_input(r: &mut Rng, n: usize) -> Vec<u64> {
    (0..n)
        .map(|_| ((r.next() % 20_000) as f32 / 997.0 - 10.0).to_bits() as u64)
        .collect()
}

/// One random case on the simulator against the interpreter.
fn check(r: &mut Rng, shape: &[usize], combine: Combine, scan: Option<bool>, warps: u32) {
    let axis = r.below(shape.len());
    let k = kernel(shape, axis, combine, scan);
    let n: usize = shape.iter().product();
    let out_n = match scan {
        None => n / shape[axis],
        Some(_) => n,
    };
    let dtypes = combine.dtypes();
    let mut args = Vec::new();
    for (i, &dt) in combine.input_dtypes().iter().enumerate() {
        let bits = match combine {
            Combine::Welford if i == 0 => welford_input(r, n),
            _ => random_input(r, dt, n),
        };
        args.push(A::Buf(dt, bits));
    }
    for &dt in &dtypes {
        args.push(A::Buf(dt, vec![0; out_n]));
    }
    // Odd extents: every axis masked somewhere in its range (at least one element).
    let ext: Vec<usize> = shape.iter().map(|&s| 1 + r.below(s)).collect();
    for &e in &ext {
        args.push(A::I32(e as i32));
    }
    let what = format!("{combine:?} scan {scan:?} of {shape:?} (extents {ext:?}) along {axis}");
    agree(&what, &k, [1, 1, 1], &args, 80, warps);
}

const SHAPES: [&[usize]; 8] = [
    &[64],
    &[1024],
    &[8, 32],
    &[32, 16],
    &[4, 256],
    &[128, 4],
    &[2, 4, 64],
    &[16],
];

#[test]
fn reductions_agree_with_the_interpreter() {
    let mut r = Rng::new("reductions_agree_with_the_interpreter");
    for warps in [1, 4, 8] {
        for shape in SHAPES {
            for combine in [
                Combine::ArgMax(DType::F32),
                Combine::ArgMax(DType::F16),
                Combine::Welford,
                Combine::MatMul,
                Combine::Mixed,
            ] {
                check(&mut r, shape, combine, None, warps);
            }
        }
    }
}

#[test]
fn scans_agree_with_the_interpreter() {
    let mut r = Rng::new("scans_agree_with_the_interpreter");
    for warps in [1, 4, 8] {
        for shape in SHAPES {
            for combine in [Combine::ArgMax(DType::F32), Combine::MatMul, Combine::Mixed] {
                let reverse = r.below(2) == 1;
                check(&mut r, shape, combine, Some(reverse), warps);
            }
        }
    }
}

fn ptxas() -> std::path::PathBuf {
    tegula_ptx::ptxas::find()
        .expect("ptxas not found: run scripts/ptxas.sh (or set TEGULA_PTXAS) before this test")
}

#[test]
fn combine_kernels_assemble() {
    let dir = std::env::temp_dir().join(format!("tegula-combine-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ptxas = ptxas();
    for (i, (shape, combine, scan)) in [
        (&[8usize, 32][..], Combine::ArgMax(DType::F16), None),
        (&[1024][..], Combine::Welford, None),
        (&[32, 16][..], Combine::MatMul, None),
        (&[4, 256][..], Combine::MatMul, Some(true)),
        (&[1024][..], Combine::ArgMax(DType::F32), Some(false)),
        (&[16, 64][..], Combine::Mixed, None),
        (&[16, 64][..], Combine::Mixed, Some(true)),
    ]
    .into_iter()
    .enumerate()
    {
        for warps in [1, 4, 8] {
            for axis in 0..shape.len() {
                let k = kernel(shape, axis, combine, scan);
                for sm in [80, 90] {
                    let opts = CompileOptions {
                        num_warps: warps,
                        num_stages: 1,
                        mma: MmaChoice::Sync,
                        fp_fusion: true,
                        tma: false,
                    };
                    let c = compile(&k, &Target { sm }, &opts).unwrap();
                    let name = format!("combine{i}_w{warps}_a{axis}_sm{sm}");
                    tegula_ptx::ptxas::assemble(&ptxas, &c.ptx, sm, &dir, &name)
                        .unwrap_or_else(|e| panic!("{name}: {e}"));
                }
            }
        }
    }
}

/// A reduction inside a loop body (a row's argmax per block of columns, carried across the
/// loop) whose combine also reads a kernel argument: the body is emitted anew at every step
/// inside the loop, and the outer value is read where it is defined.
#[test]
fn a_reduction_in_a_loop_reads_an_outer_value() {
    let mut r = Rng::new("a_reduction_in_a_loop_reads_an_outer_value");
    let k = trace("loop", |p| {
        let (x, y) = (p.ptr("x", DType::I32), p.ptr("y", DType::I32));
        let (n, bias) = (p.scalar("n", DType::I32), p.scalar("bias", DType::I32));
        let cols = arange(0, 32);
        let rows = arange(0, 4).col();
        let best = for_range(0, n, 32, full::<i32>([4], i32::MIN), |start, best| {
            let c = start + cols.row();
            let mask = c.lt(n).broadcast_to([4, 32]);
            let v = load(x + rows * n + c, mask, i32::MIN);
            // max(a, b + bias - bias) is max(a, b): the bias cancels, but the body reads it.
            let m = reduce_with(v, 1, |a, b| maximum(a, b + bias - bias));
            maximum(best, m)
        });
        store_unmasked(y + arange(0, 4), best);
    })
    .unwrap();
    let n: usize = 77;
    let x: Vec<u64> = (0..4 * n).map(|_| r.below(1000) as u64).collect();
    for warps in [1, 4] {
        let args = [
            A::Buf(DType::I32, x.clone()),
            A::Buf(DType::I32, vec![0; 4]),
            A::I32(n as i32),
            A::I32(5),
        ];
        agree("a reduction in a loop", &k, [1, 1, 1], &args, 80, warps);
    }
}
