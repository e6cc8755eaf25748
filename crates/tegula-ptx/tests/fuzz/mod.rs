//! What the differential fuzzers share: random tile programs, their inputs, the interpreter's
//! result (the reference) and the rule a result must meet to agree with it.
//! `fuzz_interp_vs_sim.rs` runs the programs on the PTX simulator, `gpu_fuzz.rs` on a GPU.
//!
//! The programs: 1-D and 2-D f32 tiles of odd extents (masked loads and stores of a ragged
//! part of a power-of-two tile, two or three programs), elementwise arithmetic, `maximum` and
//! `minimum`, comparisons and `select`, `abs`, casts through f16 and bf16 and from i32 offsets,
//! reductions broadcast back, `exp2`, `gather` along an axis (by an index computed from the
//! coordinates), `flip`, `sort` (ascending or descending), run-time `for` loops with a carried
//! tile, and f16 dots.
//!
//! What must agree, and how closely ([`agree`]): programs of elementwise ops, casts and the
//! ops that move values (`gather`, `flip`, `sort`) only are exact on both sides (IEEE
//! operations rounded to nearest even, the same casts), so they must agree bit for bit (any
//! NaN matches any NaN, +0 matches -0); that includes the elements outside the mask, which
//! must keep the output's [`POISON`]. Reductions (a tree in the PTX, index order on the
//! interpreter), dots (f32 accumulation in a different order) and `exp2` (the interpreter
//! rounds the f64 result once; the PTX's `ex2.approx` is not correctly rounded) may differ in
//! rounding: within [`TOLERANCE`] of the magnitude of what was summed.
//!
//! Each seed gives two programs ([`Case::pair`]): its own, and the same with `gather`, `flip`
//! or `sort` wrapped around some of its nodes (from a random stream of its own, so that a
//! seed's first program does not change as the ops that move values grow).
// Each test binary that includes this module uses a part of it.
#![allow(dead_code)]

use std::sync::Arc;
use tegula_interp::{Arg as IArg, Buffer, Options};
use tegula_ir::prelude::*;
use tegula_ir::Kernel;

/// Relative difference allowed where the order of rounding may differ (see the module docs):
/// about 2^-19 of the summed magnitude (a few f32 roundings of sums of up to 256 terms).
pub const TOLERANCE: f64 = 2e-6;

/// What the output holds before the kernel runs; elements outside the mask must keep it.
pub const POISON: f32 = -7.0;

/// How `exp2`'s results are built. `Exact`: as the interpreter computes them (the f64 result
/// rounded once). The others move each result by `k` ulps, `k` in [-2, 2], to stand for an
/// approximation good to 2 ulp (the GPU's `ex2.approx`) where there is no GPU: `Hashed` takes
/// `k` from a hash of the operand's bits (salted: a function of the operand, as the hardware's
/// error is), `Fixed` moves every result by the same `k`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exp2Model {
    Exact,
    Hashed(i64),
    Fixed(i64),
}

impl Exp2Model {
    /// `e = exp2(x)` as the model builds it.
    fn apply(self, x: Tile, e: Tile) -> Tile {
        let k = match self {
            Exp2Model::Exact => return e,
            Exp2Model::Fixed(k) => full::<i32>(x.shape(), k),
            Exp2Model::Hashed(salt) => {
                let h = (x.bitcast::<i32>() + salt) * 0x5bd1_e995_i64;
                ((h >> 15) & 0xffff) % 5 - 2
            }
        };
        // The operand is clamped to [-20, 20], so `e` is positive and normal: adding `k` to
        // its bits moves it by `k` ulps.
        (e.bitcast::<i32>() + k).bitcast::<f32>()
    }
}

/// What an expression is built from: the loaded inputs, the offsets and the mask of the tile,
/// and how `exp2` is built.
pub struct At<'a> {
    pub inputs: &'a [Tile],
    pub offs: Tile,
    pub mask: Tile,
    pub exp2: Exp2Model,
}

/// xorshift64*: deterministic, no dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

/// An expression over the loaded tiles.
#[derive(Clone, Debug)]
pub enum Expr {
    /// Input `i`, loaded (masked, `other` 0) at the tile's offsets.
    Input(usize),
    /// A weak f32 constant.
    Const(f32),
    /// The flat element offset as an i32 tile, cast to f32.
    Offsets,
    Bin(Bin, Box<Expr>, Box<Expr>),
    Abs(Box<Expr>),
    Neg(Box<Expr>),
    /// `select(a < b, c, d)` (or `>=`, `==`).
    Select(Cmp, Box<Expr>, Box<Expr>, Box<Expr>, Box<Expr>),
    /// A round trip through f16 or bf16.
    Narrow(DType, Box<Expr>),
    /// A reduction along `axis`, broadcast back to the tile.
    Reduce(ReduceOp, usize, Box<Expr>),
    /// `exp2` of the operand (scaled into a small range first).
    Exp2(Box<Expr>),
    /// `gather` along `axis` at `(a * own + b * other + c) mod n`: the element's coordinate
    /// along the axis and along the other axis (0 for a rank-1 tile), `n` the axis's size.
    Gather(usize, [i64; 3], Box<Expr>),
    /// `flip` along an axis.
    Flip(usize, Box<Expr>),
    /// `sort` along an axis, descending when true.
    Sort(usize, bool, Box<Expr>),
}

#[derive(Clone, Copy, Debug)]
pub enum Bin {
    Add,
    Sub,
    Mul,
    Max,
    Min,
}

#[derive(Clone, Copy, Debug)]
pub enum Cmp {
    Lt,
    Ge,
    Eq,
}

impl Expr {
    /// Whether both sides must agree bit for bit (see the module docs).
    pub fn exact(&self) -> bool {
        match self {
            Expr::Input(_) | Expr::Const(_) | Expr::Offsets => true,
            Expr::Bin(_, a, b) => a.exact() && b.exact(),
            Expr::Abs(a)
            | Expr::Neg(a)
            | Expr::Narrow(_, a)
            | Expr::Gather(_, _, a)
            | Expr::Flip(_, a)
            | Expr::Sort(_, _, a) => a.exact(),
            Expr::Select(_, a, b, c, d) => a.exact() && b.exact() && c.exact() && d.exact(),
            Expr::Reduce(..) | Expr::Exp2(_) => false,
        }
    }

    /// Whether an `exp2` is among the expression's nodes.
    pub fn has_exp2(&self) -> bool {
        match self {
            Expr::Exp2(_) => true,
            Expr::Input(_) | Expr::Const(_) | Expr::Offsets => false,
            Expr::Bin(_, a, b) => a.has_exp2() || b.has_exp2(),
            Expr::Abs(a)
            | Expr::Neg(a)
            | Expr::Narrow(_, a)
            | Expr::Reduce(_, _, a)
            | Expr::Gather(_, _, a)
            | Expr::Flip(_, a)
            | Expr::Sort(_, _, a) => a.has_exp2(),
            Expr::Select(_, a, b, c, d) => {
                a.has_exp2() || b.has_exp2() || c.has_exp2() || d.has_exp2()
            }
        }
    }

    pub fn random(rng: &mut Rng, depth: u32, inputs: usize, rank: usize) -> Expr {
        if depth == 0 || rng.chance(20) {
            return match rng.below(10) {
                0..=6 => Expr::Input(rng.below(inputs as u64) as usize),
                7 | 8 => Expr::Const(rng.pick(&[0.0, 1.0, -0.5, 3.0, 0.125, -2.0])),
                _ => Expr::Offsets,
            };
        }
        let sub = |rng: &mut Rng| Box::new(Expr::random(rng, depth - 1, inputs, rank));
        match rng.below(16) {
            0..=6 => {
                let op = rng.pick(&[Bin::Add, Bin::Sub, Bin::Mul, Bin::Max, Bin::Min]);
                Expr::Bin(op, sub(rng), sub(rng))
            }
            7 => Expr::Abs(sub(rng)),
            8 => Expr::Neg(sub(rng)),
            9 | 10 => {
                let cmp = rng.pick(&[Cmp::Lt, Cmp::Ge, Cmp::Eq]);
                Expr::Select(cmp, sub(rng), sub(rng), sub(rng), sub(rng))
            }
            11 | 12 => Expr::Narrow(rng.pick(&[DType::F16, DType::BF16]), sub(rng)),
            13 | 14 => {
                let op = rng.pick(&[ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min]);
                Expr::Reduce(op, rng.below(rank as u64) as usize, sub(rng))
            }
            _ => Expr::Exp2(sub(rng)),
        }
    }

    /// The expression with some of its nodes wrapped in an op that moves values (`gather`,
    /// `flip`, `sort`), drawn from `rng` (a stream of its own, so that each seed's expression
    /// without them stays what it was).
    pub fn with_moves(self, rng: &mut Rng, rank: usize) -> Expr {
        let go = |e: Box<Expr>, rng: &mut Rng| Box::new(e.with_moves(rng, rank));
        let e = match self {
            Expr::Bin(op, a, b) => {
                let a = go(a, rng);
                Expr::Bin(op, a, go(b, rng))
            }
            Expr::Abs(a) => Expr::Abs(go(a, rng)),
            Expr::Neg(a) => Expr::Neg(go(a, rng)),
            Expr::Select(c, a, b, x, y) => {
                let (a, b) = (go(a, rng), go(b, rng));
                let x = go(x, rng);
                Expr::Select(c, a, b, x, go(y, rng))
            }
            Expr::Narrow(d, a) => Expr::Narrow(d, go(a, rng)),
            Expr::Reduce(op, axis, a) => Expr::Reduce(op, axis, go(a, rng)),
            Expr::Exp2(a) => Expr::Exp2(go(a, rng)),
            leaf => leaf,
        };
        if !rng.chance(30) {
            return e;
        }
        let axis = rng.below(rank as u64) as usize;
        match rng.below(4) {
            0 | 1 => {
                let c = [
                    rng.below(8) as i64,
                    rng.below(8) as i64,
                    rng.below(64) as i64,
                ];
                Expr::Gather(axis, c, Box::new(e))
            }
            2 => Expr::Flip(axis, Box::new(e)),
            _ => Expr::Sort(axis, rng.chance(50), Box::new(e)),
        }
    }

    /// The expression as a tile, given the loaded inputs and the offsets tile.
    fn build(&self, at: &At) -> Tile {
        let (offs, mask) = (at.offs, at.mask);
        match self {
            Expr::Input(i) => at.inputs[*i],
            Expr::Const(c) => full::<f32>(offs.shape(), *c as f64),
            Expr::Offsets => offs.to::<f32>(),
            Expr::Bin(op, a, b) => {
                let (a, b) = (a.build(at), b.build(at));
                match op {
                    Bin::Add => a + b,
                    Bin::Sub => a - b,
                    Bin::Mul => a * b,
                    Bin::Max => maximum(a, b),
                    Bin::Min => minimum(a, b),
                }
            }
            Expr::Abs(a) => abs(a.build(at)),
            Expr::Neg(a) => -a.build(at),
            Expr::Select(cmp, a, b, c, d) => {
                let (a, b) = (a.build(at), b.build(at));
                let cond = match cmp {
                    Cmp::Lt => a.lt(b),
                    Cmp::Ge => a.ge(b),
                    Cmp::Eq => a.eq(b),
                };
                select(cond, c.build(at), d.build(at))
            }
            Expr::Narrow(d, a) => a.build(at).cast(*d).to::<f32>(),
            Expr::Reduce(op, axis, a) => {
                // Lanes outside the mask hold values of their own (offsets, constants): the
                // reduction sees only the masked-on lanes, as a kernel would arrange.
                let neutral = match op {
                    ReduceOp::Sum => 0.0,
                    ReduceOp::Max => f64::NEG_INFINITY,
                    _ => f64::INFINITY,
                };
                let x = select(mask, a.build(at), neutral);
                let r = reduce(x, *op, *axis).expand_dims(*axis);
                // Rows or columns wholly masked off reduce to +-inf: keep those lanes finite.
                select(mask, r.broadcast_to(offs.shape()), 0.0)
            }
            Expr::Exp2(a) => {
                let x = minimum(maximum(a.build(at) * 0.25, -20.0), 20.0);
                at.exp2.apply(x, exp2(x))
            }
            Expr::Gather(axis, [a, b, c], x) => {
                let shape = offs.shape();
                let x = x.build(at);
                // The coordinates from the flat offsets of a row-major tile.
                let (coord, other) = if shape.rank() == 1 {
                    (offs, zeros_like(offs))
                } else {
                    let cols = shape.dim(1) as i64;
                    let (row, col) = (offs / cols, offs % cols);
                    if *axis == 0 {
                        (row, col)
                    } else {
                        (col, row)
                    }
                };
                let n = shape.dim(*axis) as i64;
                gather(x, (coord * *a + other * *b + *c) & (n - 1), *axis)
            }
            Expr::Flip(axis, x) => x.build(at).flip(*axis),
            Expr::Sort(axis, descending, x) => sort(x.build(at), *axis, *descending),
        }
    }
}

/// One random program: its tile, the extents it covers, the expression, a loop, a dot.
#[derive(Clone, Debug)]
pub struct Case {
    pub seed: u64,
    /// The tile's shape (powers of two) and the valid extents (at most the shape).
    pub shape: Vec<usize>,
    pub valid: Vec<usize>,
    pub programs: u32,
    pub inputs: usize,
    pub expr: Expr,
    /// A run-time loop of this many trips carrying `acc = acc * 0.5 + expr(trip)`.
    pub trips: Option<i32>,
    /// `dot(f16 tile [m, k], f16 tile [k, n])` added to a 2-D result of shape [m, n].
    pub dot_k: Option<usize>,
}

impl Case {
    pub fn random(seed: u64) -> Case {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let rank = 1 + rng.below(2) as usize;
        let dot_k = (rank == 2 && rng.chance(20)).then(|| rng.pick(&[16, 32]));
        let sizes: &[usize] = if dot_k.is_some() {
            &[16, 32]
        } else if rank == 1 {
            &[16, 32, 64, 128, 256]
        } else {
            &[1, 2, 4, 8, 16, 32]
        };
        let shape: Vec<usize> = (0..rank).map(|_| rng.pick(sizes)).collect();
        let valid = shape
            .iter()
            .map(|&s| {
                if rng.chance(40) {
                    s
                } else {
                    1 + rng.below(s as u64) as usize
                }
            })
            .collect();
        let inputs = 1 + rng.below(2) as usize;
        let depth = 1 + rng.below(4) as u32;
        Case {
            seed,
            programs: 1 + rng.below(3) as u32,
            expr: Expr::random(&mut rng, depth, inputs, rank),
            trips: rng.chance(25).then(|| rng.below(4) as i32),
            shape,
            valid,
            inputs,
            dot_k,
        }
    }

    /// [`Case::random`] with ops that move values wrapped around some of its expression's
    /// nodes.
    pub fn random_with_moves(seed: u64) -> Case {
        let mut case = Case::random(seed);
        let mut rng = Rng(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0x6d6f_7665 | 1);
        let rank = case.shape.len();
        case.expr = case.expr.with_moves(&mut rng, rank);
        case
    }

    pub fn exact(&self) -> bool {
        self.expr.exact() && self.dot_k.is_none()
    }

    /// Elements of each input and of the output: a tile per program (and per trip).
    pub fn numel(&self) -> usize {
        let per: usize = self.shape.iter().product();
        per * self.programs as usize * (1 + self.trips.unwrap_or(0).max(0) as usize)
    }

    /// Parameters: the inputs, `a` and `b` (f16 dot operands), `out`, then the valid extents
    /// and the trips as i32 scalars.
    pub fn trace(&self) -> Kernel {
        self.trace_with(Exp2Model::Exact)
    }

    /// [`Case::trace`] with `exp2`'s results moved as `exp2` says.
    pub fn trace_with(&self, exp2: Exp2Model) -> Kernel {
        trace("fuzz", |p| {
            let xs: Vec<Tile> = (0..self.inputs)
                .map(|i| p.ptr(&format!("x{i}"), DType::F32))
                .collect();
            let (a, b) = (p.ptr("a", DType::F16), p.ptr("b", DType::F16));
            let out = p.ptr("out", DType::F32);
            let ext: Vec<Tile> = (0..self.shape.len())
                .map(|i| p.scalar(&format!("n{i}"), DType::I32))
                .collect();
            let trips = p.scalar("trips", DType::I32);
            let per: usize = self.shape.iter().product();
            let (offs, mask) = if self.shape.len() == 1 {
                let r = arange(0, self.shape[0] as i64);
                (r, r.lt(ext[0]))
            } else {
                let r = arange(0, self.shape[0] as i64);
                let c = arange(0, self.shape[1] as i64);
                (
                    r.col() * self.shape[1] as i64 + c.row(),
                    r.col().lt(ext[0]) & c.row().lt(ext[1]),
                )
            };
            let base = program_id(0) * per as i64;
            let load_at = |at: Tile| -> Vec<Tile> {
                xs.iter().map(|&x| load(x + at + offs, mask, 0.0)).collect()
            };
            let build = |inputs: &[Tile]| {
                let at = At {
                    inputs,
                    offs,
                    mask,
                    exp2,
                };
                self.expr.build(&at)
            };
            let mut v = build(&load_at(base));
            if self.trips.is_some() {
                let stride = per as i64 * self.programs as i64;
                v = for_range(0, trips, 1, v, |i, acc| {
                    let at = base + (i + 1) * stride;
                    acc * 0.5 + build(&load_at(at))
                });
            }
            if let Some(k) = self.dot_k {
                let (m, n) = (self.shape[0], self.shape[1]);
                let (rm, rn, rk) = (
                    arange(0, m as i64),
                    arange(0, n as i64),
                    arange(0, k as i64),
                );
                let av = load_unmasked(a + rm.col() * k as i64 + rk.row());
                let bv = load_unmasked(b + rk.col() * n as i64 + rn.row());
                v += dot(av, bv);
            }
            store(out + base + offs, v, mask);
        })
        .unwrap_or_else(|e| {
            panic!(
                "seed {}: the program does not trace: {e}\n{self:#?}",
                self.seed
            )
        })
    }
}

impl Case {
    /// The two programs of `seed`: [`Case::random`] and [`Case::random_with_moves`].
    pub fn pair(seed: u64) -> [Case; 2] {
        [Case::random(seed), Case::random_with_moves(seed)]
    }

    /// The inputs the case runs on (a function of its seed).
    pub fn data(&self) -> Data {
        let n = self.numel();
        let (dm, dn, dk) = match self.dot_k {
            Some(k) => (self.shape[0], self.shape[1], k),
            None => (16, 16, 16),
        };
        let half = |v: Vec<f32>| -> Vec<f16> { v.into_iter().map(f16::from_f32).collect() };
        Data {
            xs: (0..self.inputs)
                .map(|i| values(n, self.seed * 7 + i as u64))
                .collect(),
            a: half(values(dm * dk, self.seed * 7 + 5)),
            b: half(values(dk * dn, self.seed * 7 + 6)),
            ext: self.valid.iter().map(|&v| v as i32).collect(),
            trips: self.trips.unwrap_or(0),
            dk,
        }
    }

    /// The output's index among the kernel's arguments ([`Data::args`]).
    pub fn out_arg(&self) -> usize {
        self.inputs + 2
    }
}

/// Input values with few bits (multiples of 1/64 in [-4, 4)), so that most arithmetic is exact.
pub fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng(seed | 1);
    (0..n)
        .map(|_| (rng.below(512) as f32 - 256.0) / 64.0)
        .collect()
}

pub fn le_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// One kernel argument: a buffer's bytes, or an i32 scalar.
pub enum Arg {
    Buf(Vec<u8>),
    I32(i32),
}

/// A case's inputs: the f32 tiles `xs`, the f16 dot operands, the valid extents and the trips.
pub struct Data {
    pub xs: Vec<Vec<f32>>,
    pub a: Vec<f16>,
    pub b: Vec<f16>,
    pub ext: Vec<i32>,
    pub trips: i32,
    /// The dot's k (16 when there is no dot), for the tolerance's scale.
    dk: usize,
}

impl Data {
    /// The kernel's arguments in parameter order ([`Case::trace`]), the output all [`POISON`].
    pub fn args(&self) -> Vec<Arg> {
        let n = self.xs[0].len();
        let half = |v: &[f16]| v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let mut args: Vec<Arg> = self.xs.iter().map(|x| Arg::Buf(le_bytes(x))).collect();
        args.push(Arg::Buf(half(&self.a)));
        args.push(Arg::Buf(half(&self.b)));
        args.push(Arg::Buf(le_bytes(&vec![POISON; n])));
        args.extend(self.ext.iter().map(|&e| Arg::I32(e)));
        args.push(Arg::I32(self.trips));
        args
    }

    /// The output of `kernel` (a trace of `case`) on the interpreter: the reference.
    pub fn interpret(&self, case: &Case, kernel: &Kernel) -> Result<Vec<f32>, String> {
        let out = Arc::new(Buffer::from_slice(&vec![POISON; self.xs[0].len()]));
        let mut args: Vec<IArg> = self
            .xs
            .iter()
            .map(|x| IArg::ptr(&Arc::new(Buffer::from_slice(x))))
            .collect();
        args.push(IArg::ptr(&Arc::new(Buffer::from_slice(&self.a))));
        args.push(IArg::ptr(&Arc::new(Buffer::from_slice(&self.b))));
        args.push(IArg::ptr(&out));
        args.extend(self.ext.iter().map(|&e| IArg::Int(e as i64)));
        args.push(IArg::Int(self.trips as i64));
        tegula_interp::run(kernel, [case.programs, 1, 1], &args, &Options::default())
            .map_err(|e| format!("the interpreter refused it: {e}"))?;
        Ok(out.to_vec::<f32>().unwrap())
    }

    /// Per element, the magnitude the result was summed from (for the tolerance): the largest
    /// magnitude among the inputs and the reference, times the elements a reduction or a dot
    /// may sum.
    pub fn scale(&self, case: &Case, want: &[f32]) -> Vec<f64> {
        let per: usize = case.shape.iter().product();
        let biggest = self
            .xs
            .iter()
            .flatten()
            .chain(want)
            .filter(|v| v.is_finite())
            .fold(1.0f64, |m, &v| m.max(v.abs() as f64));
        let terms = (per + self.dk * 16) as f64 * (1 + self.trips) as f64;
        want.iter()
            .map(|w| (w.abs() as f64).max(biggest * terms))
            .collect()
    }
}

/// Whether `got` agrees with the reference element `want` (scale `s`, from [`Data::scale`]) by
/// the rule of the module docs: bit for bit if `exact`, else within the tolerance.
pub fn agrees(exact: bool, want: f32, got: f32, s: f64) -> bool {
    if want.is_nan() || got.is_nan() {
        want.is_nan() && got.is_nan()
    } else if exact {
        want.to_bits() == got.to_bits() || (want == 0.0 && got == 0.0)
    } else {
        want == got || ((want as f64) - (got as f64)).abs() <= TOLERANCE * s
    }
}

/// `Err` naming the first element of `got` that does not agree with `want` ([`agrees`]);
/// `side` names where `got` came from.
pub fn agree(
    case: &Case,
    want: &[f32],
    got: &[f32],
    scale: &[f64],
    side: &str,
) -> Result<(), String> {
    agree_where(case, want, got, scale, side, |_| true)
}

/// [`agree`] on the elements `i` for which `compared(i)` holds.
pub fn agree_where(
    case: &Case,
    want: &[f32],
    got: &[f32],
    scale: &[f64],
    side: &str,
    compared: impl Fn(usize) -> bool,
) -> Result<(), String> {
    if want.len() != got.len() {
        return Err(format!(
            "the interpreter has {} elements, the {side} {}",
            want.len(),
            got.len()
        ));
    }
    let exact = case.exact();
    for (i, ((&w, &g), &s)) in want.iter().zip(got).zip(scale).enumerate() {
        if compared(i) && !agrees(exact, w, g, s) {
            return Err(format!(
                "element {i}: the interpreter has {w:e}, the {side} {g:e} ({}, scale {s:e})",
                if exact {
                    "exact"
                } else {
                    "within the tolerance"
                }
            ));
        }
    }
    Ok(())
}

/// A failure's message: the seed, why, the program's description and its Tile IR.
pub fn report(case: &Case, why: &str) -> String {
    format!(
        "fuzz case seed {} failed: {why}\n{case:#?}\n{}",
        case.seed,
        case.trace()
    )
}

/// How long to fuzz and from which seed: `TEGULA_FUZZ_SECONDS` (else `default_seconds`) and
/// `TEGULA_FUZZ_SEED` (else 1; the seeds after it follow).
pub fn settings(default_seconds: f64) -> (f64, u64) {
    let seconds = std::env::var("TEGULA_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default_seconds);
    let first = std::env::var("TEGULA_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    (seconds, first)
}

/// A case of one program and two inputs, built by hand (for regressions and minimal cases).
pub fn hand(shape: &[usize], valid: &[usize], expr: Expr) -> Case {
    Case {
        seed: 0,
        shape: shape.to_vec(),
        valid: valid.to_vec(),
        programs: 1,
        inputs: 2,
        expr,
        trips: None,
        dot_k: None,
    }
}
