//! A differential fuzzer: random tile programs run on the interpreter (`tegula-interp`, the
//! reference) and, compiled to PTX, on the PTX simulator (`tegula-ptx-sim`), with the same
//! inputs; the results must agree.
//!
//! The programs: 1-D and 2-D f32 tiles of odd extents (masked loads and stores of a ragged
//! part of a power-of-two tile, two or three programs), elementwise arithmetic, `maximum` and
//! `minimum`, comparisons and `select`, `abs`, casts through f16 and bf16 and from i32 offsets,
//! reductions broadcast back, `exp2`, `gather` along an axis (by an index computed from the
//! coordinates), `flip`, `sort` (ascending or descending), run-time `for` loops with a carried
//! tile, and f16 dots (mma.sync).
//!
//! What must agree, and how closely: programs of elementwise ops, casts and the ops that move
//! values (`gather`, `flip`, `sort`) only are exact on both sides (IEEE operations rounded to
//! nearest even, the same casts), so they must agree bit for bit (any NaN matches any NaN). Reductions (a tree on the GPU, index order on the
//! interpreter), dots (f32 accumulation in a different order) and `exp2` (the interpreter
//! rounds the f64 result once, the simulator takes Rust's f32 `exp2`; the GPU's `ex2.approx` is
//! good to 2 ulp, which the simulator does not model) may differ in rounding: within
//! `TOLERANCE` of the magnitude of what was summed.
//!
//! Time-bounded: cases run for about `TEGULA_FUZZ_SECONDS` seconds (default 3) from seed
//! `TEGULA_FUZZ_SEED` (default 1, then the next seeds), each seed twice: its program, and the
//! same program with `gather`, `flip` or `sort` wrapped around some of its nodes
//! (`Case::random_with_moves`, from a random stream of its own, so that a seed's first program
//! does not change as the ops that move values grow). A failure names its seed and prints the
//! program's description and Tile IR. Each failure found becomes a test below
//! (`regressions`).

use std::sync::Arc;
use tegula_interp::{Arg as IArg, Buffer, Options};
use tegula_ir::prelude::*;
use tegula_ir::Kernel;
use tegula_ptx::{compile, CompileOptions, Target};
use tegula_ptx_sim::{try_run_ptx, Arg as SArg};

/// Relative difference allowed where the order of rounding may differ (see the module docs):
/// about 2^-19 of the summed magnitude (a few f32 roundings of sums of up to 256 terms).
const TOLERANCE: f64 = 2e-6;

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

/// An expression over the loaded tiles.
#[derive(Clone, Debug)]
enum Expr {
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
enum Bin {
    Add,
    Sub,
    Mul,
    Max,
    Min,
}

#[derive(Clone, Copy, Debug)]
enum Cmp {
    Lt,
    Ge,
    Eq,
}

impl Expr {
    /// Whether both sides must agree bit for bit (see the module docs).
    fn exact(&self) -> bool {
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

    fn random(rng: &mut Rng, depth: u32, inputs: usize, rank: usize) -> Expr {
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
    fn with_moves(self, rng: &mut Rng, rank: usize) -> Expr {
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
    fn build(&self, inputs: &[Tile], offs: Tile, mask: Tile) -> Tile {
        match self {
            Expr::Input(i) => inputs[*i],
            Expr::Const(c) => full::<f32>(offs.shape(), *c as f64),
            Expr::Offsets => offs.to::<f32>(),
            Expr::Bin(op, a, b) => {
                let (a, b) = (a.build(inputs, offs, mask), b.build(inputs, offs, mask));
                match op {
                    Bin::Add => a + b,
                    Bin::Sub => a - b,
                    Bin::Mul => a * b,
                    Bin::Max => maximum(a, b),
                    Bin::Min => minimum(a, b),
                }
            }
            Expr::Abs(a) => abs(a.build(inputs, offs, mask)),
            Expr::Neg(a) => -a.build(inputs, offs, mask),
            Expr::Select(cmp, a, b, c, d) => {
                let (a, b) = (a.build(inputs, offs, mask), b.build(inputs, offs, mask));
                let cond = match cmp {
                    Cmp::Lt => a.lt(b),
                    Cmp::Ge => a.ge(b),
                    Cmp::Eq => a.eq(b),
                };
                select(
                    cond,
                    c.build(inputs, offs, mask),
                    d.build(inputs, offs, mask),
                )
            }
            Expr::Narrow(d, a) => a.build(inputs, offs, mask).cast(*d).to::<f32>(),
            Expr::Reduce(op, axis, a) => {
                // Lanes outside the mask hold values of their own (offsets, constants): the
                // reduction sees only the masked-on lanes, as a kernel would arrange.
                let neutral = match op {
                    ReduceOp::Sum => 0.0,
                    ReduceOp::Max => f64::NEG_INFINITY,
                    _ => f64::INFINITY,
                };
                let x = select(mask, a.build(inputs, offs, mask), neutral);
                let r = reduce(x, *op, *axis).expand_dims(*axis);
                // Rows or columns wholly masked off reduce to +-inf: keep those lanes finite.
                select(mask, r.broadcast_to(offs.shape()), 0.0)
            }
            Expr::Exp2(a) => {
                let x = a.build(inputs, offs, mask);
                exp2(minimum(maximum(x * 0.25, -20.0), 20.0))
            }
            Expr::Gather(axis, [a, b, c], x) => {
                let shape = offs.shape();
                let x = x.build(inputs, offs, mask);
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
            Expr::Flip(axis, x) => x.build(inputs, offs, mask).flip(*axis),
            Expr::Sort(axis, descending, x) => {
                sort(x.build(inputs, offs, mask), *axis, *descending)
            }
        }
    }
}

/// One random program: its tile, the extents it covers, the expression, a loop, a dot.
#[derive(Clone, Debug)]
struct Case {
    seed: u64,
    /// The tile's shape (powers of two) and the valid extents (at most the shape).
    shape: Vec<usize>,
    valid: Vec<usize>,
    programs: u32,
    inputs: usize,
    expr: Expr,
    /// A run-time loop of this many trips carrying `acc = acc * 0.5 + expr(trip)`.
    trips: Option<i32>,
    /// `dot(f16 tile [m, k], f16 tile [k, n])` added to a 2-D result of shape [m, n].
    dot_k: Option<usize>,
}

impl Case {
    fn random(seed: u64) -> Case {
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
    fn random_with_moves(seed: u64) -> Case {
        let mut case = Case::random(seed);
        let mut rng = Rng(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0x6d6f_7665 | 1);
        let rank = case.shape.len();
        case.expr = case.expr.with_moves(&mut rng, rank);
        case
    }

    fn exact(&self) -> bool {
        self.expr.exact() && self.dot_k.is_none()
    }

    /// Elements of each input and of the output: a tile per program (and per trip).
    fn numel(&self) -> usize {
        let per: usize = self.shape.iter().product();
        per * self.programs as usize * (1 + self.trips.unwrap_or(0).max(0) as usize)
    }

    /// Parameters: the inputs, `a` and `b` (f16 dot operands), `out`, then the valid extents
    /// and the trips as i32 scalars.
    fn trace(&self) -> Kernel {
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
            let mut v = self.expr.build(&load_at(base), offs, mask);
            if self.trips.is_some() {
                let stride = per as i64 * self.programs as i64;
                v = for_range(0, trips, 1, v, |i, acc| {
                    let at = base + (i + 1) * stride;
                    acc * 0.5 + self.expr.build(&load_at(at), offs, mask)
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

/// Input values with few bits (multiples of 1/64 in [-4, 4)), so that most arithmetic is exact.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng(seed | 1);
    (0..n)
        .map(|_| (rng.below(512) as f32 - 256.0) / 64.0)
        .collect()
}

fn le_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// What one case produced on each side.
struct Outcome {
    want: Vec<f32>,
    got: Vec<f32>,
    /// Per element, the magnitude the result was summed from (for the tolerance).
    scale: Vec<f64>,
}

fn run(case: &Case) -> Result<Outcome, String> {
    let kernel = case.trace();
    let n = case.numel();
    let xs: Vec<Vec<f32>> = (0..case.inputs)
        .map(|i| values(n, case.seed * 7 + i as u64))
        .collect();
    let (dm, dn, dk) = match case.dot_k {
        Some(k) => (case.shape[0], case.shape[1], k),
        None => (16, 16, 16),
    };
    let half = |v: Vec<f32>| -> Vec<f16> { v.into_iter().map(f16::from_f32).collect() };
    let a = half(values(dm * dk, case.seed * 7 + 5));
    let b = half(values(dk * dn, case.seed * 7 + 6));
    let poison = vec![-7.0f32; n];
    let ext: Vec<i64> = case.valid.iter().map(|&v| v as i64).collect();
    let trips = case.trips.unwrap_or(0) as i64;

    // The interpreter.
    let out = Arc::new(Buffer::from_slice(&poison));
    let mut args: Vec<IArg> = xs
        .iter()
        .map(|x| IArg::ptr(&Arc::new(Buffer::from_slice(x))))
        .collect();
    args.push(IArg::ptr(&Arc::new(Buffer::from_slice(&a))));
    args.push(IArg::ptr(&Arc::new(Buffer::from_slice(&b))));
    args.push(IArg::ptr(&out));
    args.extend(ext.iter().map(|&e| IArg::Int(e)));
    args.push(IArg::Int(trips));
    tegula_interp::run(&kernel, [case.programs, 1, 1], &args, &Options::default())
        .map_err(|e| format!("the interpreter refused it: {e}"))?;
    let want = out.to_vec::<f32>().unwrap();

    // The simulator, on the PTX for sm_80 with 4 warps.
    let compiled = compile(
        &kernel,
        &Target { sm: 80 },
        &CompileOptions {
            num_warps: 4,
            num_stages: 1,
            mma: tegula_ptx::MmaChoice::Sync,
            fp_fusion: true,
            tma: false,
        },
    )
    .map_err(|e| format!("the backend refused it: {e}"))?;
    let names: Vec<String> = kernel
        .params
        .iter()
        .enumerate()
        .map(|(i, p)| format!("p{i}_{}", p.name))
        .collect();
    let x_bytes: Vec<Vec<u8>> = xs.iter().map(|x| le_bytes(x)).collect();
    let a_bytes: Vec<u8> = a.iter().flat_map(|x| x.to_le_bytes()).collect();
    let b_bytes: Vec<u8> = b.iter().flat_map(|x| x.to_le_bytes()).collect();
    let out_bytes = le_bytes(&poison);
    let mut sargs: Vec<SArg> = x_bytes.iter().map(|x| SArg::Buf(x)).collect();
    sargs.push(SArg::Buf(&a_bytes));
    sargs.push(SArg::Buf(&b_bytes));
    sargs.push(SArg::Buf(&out_bytes));
    sargs.extend(ext.iter().map(|&e| SArg::I32(e as i32)));
    sargs.push(SArg::I32(trips as i32));
    let bufs = try_run_ptx(
        &compiled.ptx,
        compiled.shared_bytes as usize,
        &names,
        4,
        [case.programs as u64, 1, 1],
        &sargs,
    )
    .map_err(|e| format!("the simulator refused it: {e}"))?;
    let got: Vec<f32> = bufs[case.inputs + 2]
        .chunks(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    // The scale: the largest magnitude among the inputs, the dot's operands and the result,
    // times the elements a reduction or a dot may sum.
    let per: usize = case.shape.iter().product();
    let biggest = xs
        .iter()
        .flatten()
        .chain(&want)
        .filter(|v| v.is_finite())
        .fold(1.0f64, |m, &v| m.max(v.abs() as f64));
    let terms = (per + dk * 16) as f64 * (1 + trips) as f64;
    let scale = want
        .iter()
        .map(|w| (w.abs() as f64).max(biggest * terms))
        .collect();
    Ok(Outcome { want, got, scale })
}

/// `Err` with the first disagreement, or why a side refused the program.
fn check(case: &Case) -> Result<(), String> {
    let o = run(case)?;
    let exact = case.exact();
    for (i, ((&w, &g), &s)) in o.want.iter().zip(&o.got).zip(&o.scale).enumerate() {
        let agree = if w.is_nan() || g.is_nan() {
            w.is_nan() && g.is_nan()
        } else if exact {
            w.to_bits() == g.to_bits() || (w == 0.0 && g == 0.0)
        } else {
            w == g || ((w as f64) - (g as f64)).abs() <= TOLERANCE * s
        };
        if !agree {
            return Err(format!(
                "element {i}: the interpreter has {w:e}, the simulator {g:e} ({}, scale {s:e})",
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

fn report(case: &Case, why: &str) -> String {
    format!(
        "fuzz case seed {} failed: {why}\n{case:#?}\n{}",
        case.seed,
        case.trace()
    )
}

#[test]
fn random_programs_agree_on_the_interpreter_and_the_simulator() {
    let seconds: f64 = std::env::var("TEGULA_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let first: u64 = std::env::var("TEGULA_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let start = std::time::Instant::now();
    let mut ran = 0;
    for seed in first.. {
        if start.elapsed().as_secs_f64() > seconds && ran >= 10 {
            break;
        }
        for case in [Case::random(seed), Case::random_with_moves(seed)] {
            if let Err(why) = check(&case) {
                panic!("{}", report(&case, &why));
            }
            ran += 1;
        }
    }
    eprintln!(
        "fuzz: {ran} programs from seed {first} agreed in {:.1} s",
        start.elapsed().as_secs_f64()
    );
}

/// A case of one program and one input, built by hand (for regressions and minimal cases).
fn hand(shape: &[usize], valid: &[usize], expr: Expr) -> Case {
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

// --- regressions: each failure the fuzzer found, as its seed and as a minimal case ----------

/// Seed 2444: `max(x * 0.0, axis 0)` of a [16, 8] tile. The four lanes of a column that the
/// butterfly combined stored their partial maximum to one shared word, and the simulator
/// took `max(+0, -0)` from Rust's `f32::max`, which depends on the operand order: the lanes
/// disagreed (+0 and -0) and the simulator reported a race. The H200's `max.f32` gives +0
/// (and `min.f32` -0) in either order; the simulator now does too (and its `min.NaN` returns
/// NaN, as `max.NaN` did). A simulator bug: the lowering was right.
#[test]
fn regression_max_of_signed_zeros_across_lanes() {
    use Expr::*;
    let zeros = Box::new(Bin(
        crate::Bin::Mul,
        Box::new(Input(0)),
        Box::new(Const(0.0)),
    ));
    for valid in [[16, 8], [7, 8]] {
        let case = hand(&[16, 8], &valid, Reduce(ReduceOp::Max, 0, zeros.clone()));
        check(&case).unwrap_or_else(|why| panic!("{}", report(&case, &why)));
        let case = hand(&[16, 8], &valid, Reduce(ReduceOp::Min, 0, zeros.clone()));
        check(&case).unwrap_or_else(|why| panic!("{}", report(&case, &why)));
    }
    let case = Case::random(2444);
    check(&case).unwrap_or_else(|why| panic!("{}", report(&case, &why)));
}
