//! Whole-tile arithmetic: elementwise ops, casts, reductions, scans and dot.
//!
//! Each op matches on op and dtype once and then runs a tight loop over slices.

use crate::bits;
use crate::math::erf;
use crate::round::*;
use crate::value::Data;
use tegula_ir::mathlib;
use tegula_ir::{BinaryOp, CmpOp, DType, InputPrecision, ReduceOp, Rounding, TernaryOp, UnaryOp};

/// Why an op could not produce its result; the executor adds kernel, line and program id.
#[derive(Debug)]
pub(crate) enum Fault {
    /// `index` (relative to the view) of pointer parameter `param`, whose view has `len`
    /// elements.
    OutOfBounds {
        op: &'static str,
        param: usize,
        index: i64,
        len: usize,
    },
    /// Element `index` of parameter `param`'s view was stored by program `other` too.
    Race {
        param: usize,
        index: usize,
        other: u32,
    },
    /// A tile of the result type needs more host memory than the host gives (`bytes`).
    OutOfMemory {
        bytes: u64,
    },
    DivisionByZero,
    /// A gather index (of `dtype`; a u64's bit pattern) outside `0..len` along `axis`, at
    /// element `at` of the index tile.
    IndexOutOfRange {
        index: i64,
        dtype: DType,
        axis: u8,
        len: usize,
        at: Box<[usize]>,
    },
    ZeroStep,
    Assert(String),
    Invalid(String),
}

pub(crate) type OpResult<T = Data> = Result<T, Fault>;

pub(crate) fn invalid<T>(msg: impl Into<String>) -> OpResult<T> {
    Err(Fault::Invalid(msg.into()))
}

fn zip_f(x: &[f64], y: &[f64], f: impl Fn(f64, f64) -> f64) -> Vec<f64> {
    x.iter().zip(y).map(|(&a, &b)| f(a, b)).collect()
}

fn zip_i(x: &[i64], y: &[i64], f: impl Fn(i64, i64) -> i64) -> Vec<i64> {
    x.iter().zip(y).map(|(&a, &b)| f(a, b)).collect()
}

/// IEEE maxNum as PTX `max`: the non-NaN operand wins; +0 counts as larger than -0.
#[inline(always)]
pub(crate) fn fmax(a: f64, b: f64) -> f64 {
    if a > b {
        a
    } else if b > a || a.is_nan() {
        b
    } else if b.is_nan() {
        a
    } else {
        // Equal: only the sign of zero can differ; clear it when either is +0.
        f64::from_bits(a.to_bits() & b.to_bits())
    }
}

/// IEEE minNum as PTX `min`: the non-NaN operand wins; -0 counts as smaller than +0.
#[inline(always)]
pub(crate) fn fmin(a: f64, b: f64) -> f64 {
    if a < b {
        a
    } else if b < a || a.is_nan() {
        b
    } else if b.is_nan() {
        a
    } else {
        f64::from_bits(a.to_bits() | b.to_bits())
    }
}

/// PTX `max.NaN`: NaN when either operand is NaN.
#[inline(always)]
pub(crate) fn fmax_nan(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        fmax(a, b)
    }
}

#[inline(always)]
pub(crate) fn fmin_nan(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        fmin(a, b)
    }
}

/// `a op b` elementwise; operands and result of dtype `d`.
pub(crate) fn binary(op: BinaryOp, d: DType, a: &Data, b: &Data) -> OpResult {
    if a.len() != b.len() {
        return invalid(format!(
            "{} operands of {} and {} elements",
            op.name(),
            a.len(),
            b.len()
        ));
    }
    match (a, b) {
        (Data::F(x), Data::F(y)) => float_binary(op, d, x, y).map(Data::F),
        (Data::I(x), Data::I(y)) => int_binary(op, d, x, y).map(Data::I),
        _ => invalid(format!("{} on mismatched or pointer operands", op.name())),
    }
}

fn float_binary(op: BinaryOp, d: DType, x: &[f64], y: &[f64]) -> OpResult<Vec<f64>> {
    use BinaryOp::*;
    if let Some(f) = op.libm() {
        // f32/f16/bf16: the GPU's algorithm on f32 (tegula_ir::mathlib), rounded to `d`.
        let mut out = if d == DType::F64 {
            zip_f(x, y, crate::math::libm2_f64(f))
        } else {
            zip_f(x, y, |a, b| {
                mathlib::eval2_f32(f, a as f32, b as f32) as f64
            })
        };
        round_slice(d, &mut out);
        return Ok(out);
    }
    let mut out = match op {
        Add => zip_f(x, y, |a, b| a + b),
        Sub => zip_f(x, y, |a, b| a - b),
        Mul => zip_f(x, y, |a, b| a * b),
        Div | DivRn => zip_f(x, y, |a, b| a / b),
        // fmod is exact, so computing it on the f64 values loses nothing.
        Rem => zip_f(x, y, |a, b| a % b),
        Max => zip_f(x, y, fmax),
        Min => zip_f(x, y, fmin),
        MaxNan => zip_f(x, y, fmax_nan),
        MinNan => zip_f(x, y, fmin_nan),
        And | Or | Xor | Shl | Shr | UMulHi | MulHi | Mul24 | Atan2 | Pow | Hypot | Remainder
        | Rhypot | Jn | Yn => return invalid(format!("{} on floats", op.name())),
    };
    round_slice(d, &mut out);
    Ok(out)
}

fn int_binary(op: BinaryOp, d: DType, x: &[i64], y: &[i64]) -> OpResult<Vec<i64>> {
    use BinaryOp::*;
    let unsigned = is_unsigned(d);
    let bits = d.bits() as u64;
    let mut out = match op {
        // Wrapping in i64 then wrapping to the width is arithmetic modulo 2^width.
        Add => zip_i(x, y, i64::wrapping_add),
        Sub => zip_i(x, y, i64::wrapping_sub),
        Mul => zip_i(x, y, i64::wrapping_mul),
        Div | Rem => {
            // Undefined on the GPU (PTX gives an unspecified value); an error here.
            if y.contains(&0) {
                return Err(Fault::DivisionByZero);
            }
            match (op, unsigned) {
                (Div, true) => zip_i(x, y, |a, b| ((a as u64) / (b as u64)) as i64),
                (Rem, true) => zip_i(x, y, |a, b| ((a as u64) % (b as u64)) as i64),
                // Truncating, as in C; MIN / -1 wraps to MIN.
                (Div, false) => zip_i(x, y, i64::wrapping_div),
                _ => zip_i(x, y, i64::wrapping_rem),
            }
        }
        // Canonical values stay canonical under bitwise ops.
        And => zip_i(x, y, |a, b| a & b),
        Or => zip_i(x, y, |a, b| a | b),
        Xor => zip_i(x, y, |a, b| a ^ b),
        // Shift amounts are read as unsigned; amounts >= the width give 0 (shl, logical shr)
        // or the sign fill (arithmetic shr), as PTX clamps them.
        Shl => zip_i(x, y, |a, b| if (b as u64) >= bits { 0 } else { a << b }),
        Shr if unsigned => zip_i(x, y, |a, b| {
            if (b as u64) >= bits {
                0
            } else {
                ((a as u64) >> b) as i64
            }
        }),
        Shr => zip_i(x, y, |a, b| a >> (b as u64).min(63)),
        // The high half of the unsigned product of the bit patterns (wrapped to the dtype).
        UMulHi if bits == 64 => zip_i(x, y, |a, b| {
            (((a as u64 as u128) * (b as u64 as u128)) >> 64) as i64
        }),
        UMulHi => zip_i(x, y, |a, b| {
            let m = (1u64 << bits) - 1;
            ((((a as u64) & m) * ((b as u64) & m)) >> bits) as i64
        }),
        MulHi | Mul24 => {
            let f = match (op, bits, unsigned) {
                (MulHi, 64, true) => bits::umulhi64,
                (MulHi, 64, false) => bits::mulhi64,
                (MulHi, _, true) => bits::umulhi32,
                (MulHi, _, false) => bits::mulhi32,
                (_, _, true) => bits::umul24,
                _ => bits::mul24,
            };
            zip_i(x, y, f)
        }
        Atan2 | Pow | Hypot | Remainder | Rhypot | Jn | Yn | DivRn => {
            return invalid(format!("{} on integers", op.name()))
        }
        Max | MaxNan if unsigned => zip_i(x, y, |a, b| (a as u64).max(b as u64) as i64),
        Min | MinNan if unsigned => zip_i(x, y, |a, b| (a as u64).min(b as u64) as i64),
        Max | MaxNan => zip_i(x, y, i64::max),
        Min | MinNan => zip_i(x, y, i64::min),
    };
    wrap_slice(d, &mut out);
    Ok(out)
}

/// `op x` elementwise.
pub(crate) fn unary(op: UnaryOp, d: DType, x: &Data) -> OpResult {
    use UnaryOp::*;
    match x {
        Data::F(v) if op.libm().is_some() => {
            let f = op.libm().expect("a library function");
            // f32/f16/bf16: the GPU's algorithm on f32 (tegula_ir::mathlib), rounded to `d`.
            let mut out: Vec<f64> = if d == DType::F64 {
                v.iter().map(|&a| crate::math::libm1_f64(f, a)).collect()
            } else {
                v.iter()
                    .map(|&a| mathlib::eval_f32(f, a as f32) as f64)
                    .collect()
            };
            round_slice(d, &mut out);
            Ok(Data::F(out))
        }
        Data::F(v) => {
            let f: fn(f64) -> f64 = match op {
                Neg => |a| -a,
                Abs => f64::abs,
                // Transcendentals in f64 then rounded once: closer than the GPU's approximate
                // instructions (`ex2.approx`, `lg2.approx`, ..), which differ by a few ulps.
                Exp => f64::exp,
                Exp2 => f64::exp2,
                Log => f64::ln,
                Log2 => f64::log2,
                Sqrt => f64::sqrt,
                Rsqrt => |a| 1.0 / a.sqrt(),
                Sin => f64::sin,
                Cos => f64::cos,
                Erf => erf,
                Tanh => f64::tanh,
                Floor => f64::floor,
                Ceil => f64::ceil,
                // Exact in every float dtype.
                Round => f64::round,
                Rint => f64::round_ties_even,
                Trunc => f64::trunc,
                Not => return invalid("not on floats"),
                _ => return invalid(format!("{} has no f64 rule", op.name())),
            };
            let mut out: Vec<f64> = v.iter().map(|&a| f(a)).collect();
            round_slice(d, &mut out);
            Ok(Data::F(out))
        }
        Data::I(v) => {
            let mut out: Vec<i64> = match op {
                Neg => v.iter().map(|a| a.wrapping_neg()).collect(),
                Not if d == DType::I1 => v.iter().map(|a| a ^ 1).collect(),
                Not => v.iter().map(|a| !a).collect(),
                // abs(MIN) wraps to MIN; unsigned values are their own absolute value.
                Abs if is_unsigned(d) => v.clone(),
                Abs => v.iter().map(|a| a.wrapping_abs()).collect(),
                Clz if d.bits() == 64 => v.iter().map(|&a| bits::clz64(a)).collect(),
                Clz => v.iter().map(|&a| bits::clz32(a)).collect(),
                Popc if d.bits() == 64 => v.iter().map(|&a| bits::popc64(a)).collect(),
                Popc => v.iter().map(|&a| bits::popc32(a)).collect(),
                Brev if d.bits() == 64 => v.iter().map(|&a| bits::brev64(a)).collect(),
                Brev => v.iter().map(|&a| bits::brev32(a)).collect(),
                _ => return invalid(format!("{} on integers", op.name())),
            };
            wrap_slice(d, &mut out);
            Ok(Data::I(out))
        }
        Data::P(_) => invalid(format!("{} on pointers", op.name())),
    }
}

/// Comparison of operands of dtype `d`; i1 result. Float comparisons are ordered except `Ne`.
pub(crate) fn compare(op: CmpOp, d: DType, a: &Data, b: &Data) -> OpResult {
    fn cmp<T: PartialOrd + Copy>(op: CmpOp, x: &[T], y: &[T]) -> Vec<i64> {
        let f = |a: T, b: T| match op {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        };
        x.iter().zip(y).map(|(&a, &b)| f(a, b) as i64).collect()
    }
    match (a, b) {
        (Data::F(x), Data::F(y)) => Ok(Data::I(cmp(op, x, y))),
        (Data::I(x), Data::I(y)) if is_unsigned(d) => {
            let xu: Vec<u64> = x.iter().map(|&v| v as u64).collect();
            let yu: Vec<u64> = y.iter().map(|&v| v as u64).collect();
            Ok(Data::I(cmp(op, &xu, &yu)))
        }
        (Data::I(x), Data::I(y)) => Ok(Data::I(cmp(op, x, y))),
        // Pointers arrive as (buffer, element of the buffer) pairs (the executor's
        // `absolute`), so views of one buffer compare by address.
        (Data::P(x), Data::P(y)) => {
            let key = |p: &crate::value::Ptr| ((p.view as i128) << 64) + p.off as i128;
            let xk: Vec<i128> = x.iter().map(key).collect();
            let yk: Vec<i128> = y.iter().map(key).collect();
            Ok(Data::I(cmp(op, &xk, &yk)))
        }
        _ => invalid("comparison of mismatched operands"),
    }
}

/// `cond ? a : b` elementwise.
pub(crate) fn select(cond: &Data, a: &Data, b: &Data) -> OpResult {
    let Data::I(c) = cond else {
        return invalid("select condition is not i1");
    };
    fn pick<T: Copy>(c: &[i64], x: &[T], y: &[T]) -> Vec<T> {
        c.iter()
            .zip(x.iter().zip(y))
            .map(|(&c, (&a, &b))| if c != 0 { a } else { b })
            .collect()
    }
    match (a, b) {
        (Data::F(x), Data::F(y)) => Ok(Data::F(pick(c, x, y))),
        (Data::I(x), Data::I(y)) => Ok(Data::I(pick(c, x, y))),
        (Data::P(x), Data::P(y)) => Ok(Data::P(pick(c, x, y))),
        _ => invalid("select of mismatched operands"),
    }
}

/// The float op `op(a..)` elementwise, rounded once in direction `mode` (f32 or f64).
pub(crate) fn rounded(
    op: tegula_ir::RoundedOp,
    mode: tegula_ir::Rounding,
    d: DType,
    args: &[&Data],
) -> OpResult {
    let mut cols: Vec<&[f64]> = Vec::new();
    for a in args {
        match a {
            Data::F(v) => cols.push(v),
            _ => return invalid(format!("{} needs float operands", op.name())),
        }
    }
    let n = cols[0].len();
    if cols.iter().any(|c| c.len() != n) {
        return invalid(format!("{} operands of unequal lengths", op.name()));
    }
    let mut x = [0.0; 3];
    Ok(Data::F(
        (0..n)
            .map(|i| {
                for (k, c) in cols.iter().enumerate() {
                    x[k] = c[i];
                }
                crate::directed::rounded(op, mode, d, &x[..cols.len()])
            })
            .collect(),
    ))
}

/// The integer op `op(a, b, c)` elementwise; operands and result of dtype `d`.
pub(crate) fn ternary(op: TernaryOp, d: DType, a: &Data, b: &Data, c: &Data) -> OpResult {
    let (Data::I(a), Data::I(b), Data::I(c)) = (a, b, c) else {
        return invalid(format!("{} needs integer operands", op.name()));
    };
    if a.len() != b.len() || a.len() != c.len() {
        return invalid(format!("{} operands of unequal lengths", op.name()));
    }
    let f = match op {
        TernaryOp::Sad if is_unsigned(d) => bits::usad,
        TernaryOp::Sad => bits::sad,
        TernaryOp::BytePerm => bits::byte_perm,
    };
    let mut out: Vec<i64> = a
        .iter()
        .zip(b)
        .zip(c)
        .map(|((&x, &y), &z)| f(x, y, z))
        .collect();
    wrap_slice(d, &mut out);
    Ok(Data::I(out))
}

/// `a * b + c` with one rounding.
pub(crate) fn fma(d: DType, a: &Data, b: &Data, c: &Data) -> OpResult {
    let (Data::F(a), Data::F(b), Data::F(c)) = (a, b, c) else {
        return invalid("fma needs float operands");
    };
    Ok(Data::F(
        a.iter()
            .zip(b)
            .zip(c)
            .map(|((&x, &y), &z)| fma_round(d, x, y, z))
            .collect(),
    ))
}

/// Value conversion from `from` to `to`.
pub(crate) fn cast(from: DType, to: DType, mode: Rounding, x: &Data) -> OpResult {
    match x {
        Data::F(v) if to.is_float() => {
            // f64 values are exact, so one rounding into the target is exact too.
            Ok(Data::F(if mode == Rounding::NearestEven {
                let mut out = v.clone();
                round_slice(to, &mut out);
                out
            } else {
                v.iter().map(|&a| round_with(to, mode, a)).collect()
            }))
        }
        Data::F(v) => Ok(Data::I(v.iter().map(|&a| float_to_int(to, a)).collect())),
        Data::I(v) if to.is_float() => Ok(Data::F(
            v.iter()
                .map(|&a| int_to_float(to, mode, int_value(from, a)))
                .collect(),
        )),
        // Integer to integer: i1 is `x != 0`; otherwise the value modulo 2^width (sign- or
        // zero-extending from the source first).
        Data::I(v) if to == DType::I1 => Ok(Data::I(v.iter().map(|&a| (a != 0) as i64).collect())),
        Data::I(v) => {
            let mut out = v.clone();
            wrap_slice(to, &mut out);
            Ok(Data::I(out))
        }
        Data::P(_) => invalid("cast of a pointer"),
    }
}

/// Reinterprets bits between dtypes of one width.
pub(crate) fn bitcast(from: DType, to: DType, x: &Data) -> OpResult {
    let bits: Vec<u64> = match x {
        Data::F(v) => v.iter().map(|&a| float_to_bits(from, a)).collect(),
        Data::I(v) => v.iter().map(|&a| int_to_bits(from, a)).collect(),
        Data::P(_) => return invalid("bitcast of a pointer"),
    };
    Ok(if to.is_float() {
        Data::F(bits.iter().map(|&b| float_from_bits(to, b)).collect())
    } else {
        Data::I(bits.iter().map(|&b| int_from_bits(to, b)).collect())
    })
}

/// Splits a reduction axis: `outer` blocks of `n` rows of `inner` contiguous elements.
#[derive(Clone, Copy)]
pub(crate) struct AxisSplit {
    pub outer: usize,
    pub n: usize,
    pub inner: usize,
}

impl AxisSplit {
    pub fn new(dims: &[usize], axis: usize) -> AxisSplit {
        AxisSplit {
            outer: dims[..axis].iter().product(),
            n: dims[axis],
            inner: dims[axis + 1..].iter().product(),
        }
    }
}

/// Folds rows along the axis in index order: `out[o, i] = f(.. f(x[o,0,i], x[o,1,i]) ..)`.
fn fold<T: Copy>(x: &[T], s: AxisSplit, f: impl Fn(T, T) -> T) -> Vec<T> {
    let mut out = Vec::with_capacity(s.outer * s.inner);
    for o in 0..s.outer {
        let block = &x[o * s.n * s.inner..(o + 1) * s.n * s.inner];
        let start = out.len();
        out.extend_from_slice(&block[..s.inner]);
        let acc = &mut out[start..];
        for row in block.chunks_exact(s.inner).skip(1) {
            for (a, &v) in acc.iter_mut().zip(row) {
                *a = f(*a, v);
            }
        }
    }
    out
}

/// Inclusive scan along the axis, forward or reversed.
fn scan_rows<T: Copy>(x: &[T], s: AxisSplit, reverse: bool, f: impl Fn(T, T) -> T) -> Vec<T> {
    let mut out = x.to_vec();
    for o in 0..s.outer {
        let block = &mut out[o * s.n * s.inner..(o + 1) * s.n * s.inner];
        for step in 1..s.n {
            let (k, prev) = if reverse {
                (s.n - 1 - step, s.n - step)
            } else {
                (step, step - 1)
            };
            for i in 0..s.inner {
                block[k * s.inner + i] = f(block[prev * s.inner + i], block[k * s.inner + i]);
            }
        }
    }
    out
}

/// Index of the winner along the axis; `better(v, best)` must be strict so the first index
/// wins ties.
fn arg_fold<T: Copy>(x: &[T], s: AxisSplit, better: impl Fn(T, T) -> bool) -> Vec<i64> {
    let mut idx = vec![0i64; s.outer * s.inner];
    for o in 0..s.outer {
        let block = &x[o * s.n * s.inner..(o + 1) * s.n * s.inner];
        let mut best: Vec<T> = block[..s.inner].to_vec();
        let ix = &mut idx[o * s.inner..(o + 1) * s.inner];
        for (k, row) in block.chunks_exact(s.inner).enumerate().skip(1) {
            for i in 0..s.inner {
                if better(row[i], best[i]) {
                    best[i] = row[i];
                    ix[i] = k as i64;
                }
            }
        }
    }
    idx
}

/// Float combiner of a reduction or scan, rounding to `d` after each step. Sums and products
/// run sequentially in index order (the GPU's tree order can differ in the last bits); max
/// and min propagate NaN, like `tl.max`.
macro_rules! float_combine {
    ($op:expr, $d:expr, |$f:ident| $body:expr) => {{
        match ($op, $d) {
            (ReduceOp::Sum, DType::F32) => {
                let $f = |a: f64, b: f64| round_f32(a + b);
                $body
            }
            (ReduceOp::Sum, DType::F16) => {
                let $f = |a: f64, b: f64| round_f16(a + b);
                $body
            }
            (ReduceOp::Sum, DType::BF16) => {
                let $f = |a: f64, b: f64| round_bf16(a + b);
                $body
            }
            (ReduceOp::Sum, _) => {
                let $f = |a: f64, b: f64| a + b;
                $body
            }
            (ReduceOp::Prod, d) => {
                let $f = move |a: f64, b: f64| round_to(d, a * b);
                $body
            }
            (ReduceOp::Max, _) => {
                let $f = fmax_nan;
                $body
            }
            (ReduceOp::Min, _) => {
                let $f = fmin_nan;
                $body
            }
            (op, _) => return invalid(format!("reduce {} on floats", op.name())),
        }
    }};
}

/// Integer combiner (results wrapped to the width afterwards).
macro_rules! int_combine {
    ($op:expr, $d:expr, |$f:ident| $body:expr) => {{
        let unsigned = is_unsigned($d);
        match $op {
            ReduceOp::Sum => {
                let $f = i64::wrapping_add;
                $body
            }
            ReduceOp::Prod => {
                let $f = i64::wrapping_mul;
                $body
            }
            ReduceOp::Max if unsigned => {
                let $f = |a: i64, b: i64| (a as u64).max(b as u64) as i64;
                $body
            }
            ReduceOp::Min if unsigned => {
                let $f = |a: i64, b: i64| (a as u64).min(b as u64) as i64;
                $body
            }
            ReduceOp::Max => {
                let $f = i64::max;
                $body
            }
            ReduceOp::Min => {
                let $f = i64::min;
                $body
            }
            ReduceOp::And => {
                let $f = |a: i64, b: i64| a & b;
                $body
            }
            ReduceOp::Or => {
                let $f = |a: i64, b: i64| a | b;
                $body
            }
            ReduceOp::Xor => {
                let $f = |a: i64, b: i64| a ^ b;
                $body
            }
            op => return invalid(format!("{} is not a combiner", op.name())),
        }
    }};
}

/// Reduction of `x` (dtype `d`, shape `dims`) along `axis`.
pub(crate) fn reduce(op: ReduceOp, d: DType, dims: &[usize], axis: usize, x: &Data) -> OpResult {
    let s = AxisSplit::new(dims, axis);
    if s.n == 0 || s.inner == 0 {
        return invalid("reduction over an empty tile");
    }
    match (x, op) {
        // NaN counts as the largest (argmax) and the smallest (argmin); first index on ties.
        (Data::F(v), ReduceOp::ArgMax) => Ok(Data::I(arg_fold(v, s, |a: f64, b: f64| {
            a > b || (a.is_nan() && !b.is_nan())
        }))),
        (Data::F(v), ReduceOp::ArgMin) => Ok(Data::I(arg_fold(v, s, |a: f64, b: f64| {
            a < b || (a.is_nan() && !b.is_nan())
        }))),
        (Data::I(v), ReduceOp::ArgMax) if is_unsigned(d) => {
            Ok(Data::I(arg_fold(v, s, |a, b| (a as u64) > (b as u64))))
        }
        (Data::I(v), ReduceOp::ArgMin) if is_unsigned(d) => {
            Ok(Data::I(arg_fold(v, s, |a, b| (a as u64) < (b as u64))))
        }
        (Data::I(v), ReduceOp::ArgMax) => Ok(Data::I(arg_fold(v, s, |a, b| a > b))),
        (Data::I(v), ReduceOp::ArgMin) => Ok(Data::I(arg_fold(v, s, |a, b| a < b))),
        (Data::F(v), _) => float_combine!(op, d, |f| Ok(Data::F(fold(v, s, f)))),
        (Data::I(v), _) => int_combine!(op, d, |f| {
            let mut out = fold(v, s, f);
            wrap_slice(d, &mut out);
            Ok(Data::I(out))
        }),
        (Data::P(_), _) => invalid("reduction of pointers"),
    }
}

/// Inclusive scan of `x` along `axis`.
pub(crate) fn scan(
    op: ReduceOp,
    d: DType,
    dims: &[usize],
    axis: usize,
    reverse: bool,
    x: &Data,
) -> OpResult {
    let s = AxisSplit::new(dims, axis);
    if s.inner == 0 {
        return invalid("scan over an empty tile");
    }
    match x {
        Data::F(v) => float_combine!(op, d, |f| Ok(Data::F(scan_rows(v, s, reverse, f)))),
        Data::I(v) => int_combine!(op, d, |f| {
            let mut out = scan_rows(v, s, reverse, f);
            wrap_slice(d, &mut out);
            Ok(Data::I(out))
        }),
        Data::P(_) => invalid("scan of pointers"),
    }
}

/// `acc + a @ b` with a[m,k], b[k,n], acc[m,n].
///
/// Floats: each k step adds an exact product and rounds to the accumulator dtype (f32 for
/// f16/bf16/f32 operands), in k order: a sequence of fused multiply-adds, which is what the
/// GPU's FMA path computes; tensor cores sum a few products before rounding and can differ in
/// the last bit. f32 operands are first rounded to tf32 under `InputPrecision::Tf32`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn dot(
    precision: InputPrecision,
    in_dtype: DType,
    acc_dtype: DType,
    (m, k, n): (usize, usize, usize),
    a: &Data,
    b: &Data,
    acc: &Data,
) -> OpResult {
    match (a, b, acc) {
        (Data::F(a), Data::F(b), Data::F(acc)) => {
            if in_dtype == DType::F32 && precision == InputPrecision::Tf32x3 {
                return Ok(Data::F(dot_tf32x3(a, b, acc, acc_dtype, (m, k, n))));
            }
            if in_dtype == DType::F64 {
                // f64 products are not exact in f64: real fmas.
                return Ok(Data::F(dot_f64(a, b, acc, (m, k, n))));
            }
            let tf32 = in_dtype == DType::F32 && precision == InputPrecision::Tf32;
            let (ta, tb);
            let (a, b) = if tf32 {
                ta = a.iter().map(|&x| round_tf32(x)).collect::<Vec<_>>();
                tb = b.iter().map(|&x| round_tf32(x)).collect::<Vec<_>>();
                (&ta[..], &tb[..])
            } else {
                (&a[..], &b[..])
            };
            if acc_dtype == DType::F32 {
                if let Some(out) = dot_f32_fused(a, b, acc, (m, k, n)) {
                    return Ok(Data::F(out));
                }
            }
            // Products of f32 (and narrower) operands are exact in f64 (<= 48 bits).
            let out = match acc_dtype {
                DType::F32 => dot_f(a, b, acc, (m, k, n), add_round_f32),
                DType::F64 => dot_f(a, b, acc, (m, k, n), |c, p| c + p),
                d => dot_f(a, b, acc, (m, k, n), move |c, p| round_to(d, add_odd(c, p))),
            };
            Ok(Data::F(out))
        }
        (Data::I(a), Data::I(b), Data::I(acc)) => {
            // Modulo 2^width arithmetic: wrapping at the end equals wrapping every step.
            let mut out = acc.clone();
            for i in 0..m {
                let row = &mut out[i * n..(i + 1) * n];
                for kk in 0..k {
                    let aik = a[i * k + kk];
                    for (c, &bkj) in row.iter_mut().zip(&b[kk * n..(kk + 1) * n]) {
                        *c = c.wrapping_add(aik.wrapping_mul(bkj));
                    }
                }
            }
            wrap_slice(acc_dtype, &mut out);
            Ok(Data::I(out))
        }
        _ => invalid("dot operands of mismatched kinds"),
    }
}

/// `c = fma(a[i,k], b[k,j], c)` in f32, k in order: one rounding per step, the same result as
/// the exact f64 path below, but vectorized with hardware fma. Operands here are f32, tf32,
/// f16 or bf16 values, all exact in f32.
#[inline(always)]
fn dot_f32_body(a: &[f32], b: &[f32], c: &mut [f32], (m, k, n): (usize, usize, usize)) {
    for i in 0..m {
        let row = &mut c[i * n..(i + 1) * n];
        for (kk, &aik) in a[i * k..(i + 1) * k].iter().enumerate() {
            for (c, &bkj) in row.iter_mut().zip(&b[kk * n..(kk + 1) * n]) {
                *c = aik.mul_add(bkj, *c);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_f32_avx2_fma(a: &[f32], b: &[f32], c: &mut [f32], dims: (usize, usize, usize)) {
    dot_f32_body(a, b, c, dims)
}

/// The f32-accumulator dot with hardware fma, where the CPU has it (else `None`: without it
/// `mul_add` is a libm call, slower than the f64 path).
fn dot_f32_fused(
    a: &[f64],
    b: &[f64],
    acc: &[f64],
    dims: (usize, usize, usize),
) -> Option<Vec<f64>> {
    let to_f32 = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
    #[cfg(target_arch = "x86_64")]
    {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
            return None;
        }
        let (a, b, mut c) = (to_f32(a), to_f32(b), to_f32(acc));
        // SAFETY: the CPU supports AVX2 and FMA, checked just above.
        unsafe { dot_f32_avx2_fma(&a, &b, &mut c, dims) };
        Some(c.iter().map(|&x| x as f64).collect())
    }
    #[cfg(target_arch = "aarch64")]
    {
        // fma is part of the aarch64 baseline.
        let (a, b, mut c) = (to_f32(a), to_f32(b), to_f32(acc));
        dot_f32_body(&a, &b, &mut c, dims);
        Some(c.iter().map(|&x| x as f64).collect())
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = (a, b, acc, dims, to_f32);
        None
    }
}

/// The float dot loop (exact f64 path): i, then k, then a contiguous row of j, so the inner loop streams `b`.
fn dot_f(
    a: &[f64],
    b: &[f64],
    acc: &[f64],
    (m, k, n): (usize, usize, usize),
    step: impl Fn(f64, f64) -> f64,
) -> Vec<f64> {
    let mut out = acc.to_vec();
    for i in 0..m {
        let row = &mut out[i * n..(i + 1) * n];
        for (kk, &aik) in a[i * k..(i + 1) * k].iter().enumerate() {
            for (c, &bkj) in row.iter_mut().zip(&b[kk * n..(kk + 1) * n]) {
                *c = step(*c, aik * bkj);
            }
        }
    }
    out
}

fn dot_f64(a: &[f64], b: &[f64], acc: &[f64], (m, k, n): (usize, usize, usize)) -> Vec<f64> {
    let mut out = acc.to_vec();
    for i in 0..m {
        let row = &mut out[i * n..(i + 1) * n];
        for (kk, &aik) in a[i * k..(i + 1) * k].iter().enumerate() {
            for (c, &bkj) in row.iter_mut().zip(&b[kk * n..(kk + 1) * n]) {
                *c = aik.mul_add(bkj, *c);
            }
        }
    }
    out
}

/// 3xTF32: each operand splits into a tf32 high part and a tf32 residual; the k-th term is
/// `hi*hi + (hi*lo + lo*hi)` summed in f64 (exact in practice) and added to the accumulator
/// with one rounding. Close to, not bit-equal with, the GPU's three-dot emulation.
fn dot_tf32x3(
    a: &[f64],
    b: &[f64],
    acc: &[f64],
    acc_dtype: DType,
    (m, k, n): (usize, usize, usize),
) -> Vec<f64> {
    let split = |v: &[f64]| -> (Vec<f64>, Vec<f64>) {
        let hi: Vec<f64> = v.iter().map(|&x| round_tf32(x)).collect();
        let lo = v
            .iter()
            .zip(&hi)
            .map(|(&x, &h)| round_tf32(x - h))
            .collect();
        (hi, lo)
    };
    let ((ah, al), (bh, bl)) = (split(a), split(b));
    let mut out = acc.to_vec();
    for i in 0..m {
        for kk in 0..k {
            let (xh, xl) = (ah[i * k + kk], al[i * k + kk]);
            for j in 0..n {
                let (yh, yl) = (bh[kk * n + j], bl[kk * n + j]);
                let p = xh * yh + (xh * yl + xl * yh);
                let c = &mut out[i * n + j];
                *c = round_to(acc_dtype, add_odd(*c, p));
            }
        }
    }
    out
}

/// `x` reversed along `axis` (of a tile of `dims`).
pub(crate) fn flip(dims: &[usize], axis: usize, x: &Data) -> OpResult {
    fn rows<T: Copy>(x: &[T], s: AxisSplit) -> Vec<T> {
        let mut out = Vec::with_capacity(x.len());
        for o in 0..s.outer {
            let block = &x[o * s.n * s.inner..(o + 1) * s.n * s.inner];
            for row in block.chunks_exact(s.inner.max(1)).rev() {
                out.extend_from_slice(row);
            }
        }
        out
    }
    if axis >= dims.len() {
        return invalid(format!("flip axis {axis} of a tile of rank {}", dims.len()));
    }
    let s = AxisSplit::new(dims, axis);
    Ok(match x {
        Data::F(v) => Data::F(rows(v, s)),
        Data::I(v) => Data::I(rows(v, s)),
        Data::P(v) => Data::P(rows(v, s)),
    })
}

/// `out[o, i, r] = src[o, index[o, i, r], r]` along `axis`: `src` of `src_dims`, `index` (of
/// dtype `index_dtype`) of `index_dims`, equal but along `axis`. Every index is checked.
pub(crate) fn gather(
    src_dims: &[usize],
    index_dims: &[usize],
    index_dtype: DType,
    axis: usize,
    src: &Data,
    index: &Data,
) -> OpResult {
    let rank = src_dims.len();
    let same_elsewhere = index_dims.len() == rank
        && axis < rank
        && (0..rank).all(|d| d == axis || src_dims[d] == index_dims[d]);
    if !same_elsewhere {
        return invalid(format!(
            "gather along axis {axis} of {src_dims:?} with an index of {index_dims:?}"
        ));
    }
    let Data::I(index) = index else {
        return invalid("gather needs integer indices");
    };
    let (s, d) = (
        AxisSplit::new(src_dims, axis),
        AxisSplit::new(index_dims, axis),
    );
    // Where each result element reads `src`, every index checked first.
    let mut at = Vec::with_capacity(index.len());
    for (e, &raw) in index.iter().enumerate() {
        let k = if index_dtype == DType::U64 {
            raw as u64 as i128
        } else {
            raw as i128
        };
        if k < 0 || k >= s.n as i128 {
            let mut coords = vec![0; rank];
            let mut rest = e;
            for ax in (0..rank).rev() {
                coords[ax] = rest % index_dims[ax];
                rest /= index_dims[ax];
            }
            return Err(Fault::IndexOutOfRange {
                index: raw,
                dtype: index_dtype,
                axis: axis as u8,
                len: s.n,
                at: coords.into(),
            });
        }
        let (o, r) = (e / (d.n * d.inner), e % d.inner);
        at.push((o * s.n + k as usize) * s.inner + r);
    }
    Ok(match src {
        Data::F(v) => Data::F(at.iter().map(|&i| v[i]).collect()),
        Data::I(v) => Data::I(at.iter().map(|&i| v[i]).collect()),
        Data::P(v) => Data::P(at.iter().map(|&i| v[i]).collect()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fused_f32_dot_equals_the_exact_f64_path() {
        // Inputs with wide exponent spread and cancellation, where a naive f64 sum rounded
        // to f32 at the end would differ.
        let mut state = 12345u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let m = (state >> 40) as f64 / (1u64 << 24) as f64 - 0.5;
            let e = ((state >> 8) % 40) as i32 - 20;
            round_f32(m * 2f64.powi(e))
        };
        let (m, k, n) = (8, 64, 16);
        let a: Vec<f64> = (0..m * k).map(|_| next()).collect();
        let b: Vec<f64> = (0..k * n).map(|_| next()).collect();
        let acc: Vec<f64> = (0..m * n).map(|_| next()).collect();
        let exact = dot_f(&a, &b, &acc, (m, k, n), add_round_f32);
        let generic = dot_f(&a, &b, &acc, (m, k, n), |c, p| round_f32(add_odd(c, p)));
        assert_eq!(exact, generic);
        if let Some(fused) = dot_f32_fused(&a, &b, &acc, (m, k, n)) {
            assert_eq!(fused, exact);
        }
    }
}
