//! The libdevice functions Triton users call (`tl.extra.cuda.libdevice` / `tl.math`): inverse
//! trigonometric and hyperbolic functions, `pow`, `log1p`, `expm1`, `erfinv`, `cbrt`,
//! `hypot`, `rhypot`, `tan`, `log10`, `exp10`, `erfc`, `erfcx`, `erfcinv`, `lgamma`,
//! `tgamma`, `rcbrt`, `normcdf`, `normcdfinv`, `sinpi`, `cospi`, `sincospi`, `remainder`,
//! `remquo`,
//! `cyl_bessel_i0`, `cyl_bessel_i1`, `j0`, `j1`, `y0`, `y1`, `jn`, `yn`, the rounding
//! family, classification, `copysign`, `ldexp`, `frexp`, `nextafter`, `ilogb`, `logb` and
//! `fdim`.
//!
//! Float operands only (f16, bf16, f32, f64); integers are a trace error (convert first with
//! `.to::<f32>()`). Rust literals take the other operand's dtype. f32 results are correctly
//! rounded or within the bound docs/semantics.md gives per function; f16/bf16 compute in f32
//! and round once more; f64 runs on the interpreter only (std's functions, the `libm` crate's
//! where std has none). The interpreter and the GPU compute the same bits
//! (`tegula_ir::mathlib`). The rounding family, classification, `copysign`, `ldexp`, `frexp`,
//! `nextafter`, `ilogb` and `logb` are instead compositions of integer ops and exact float ops,
//! exact in every float dtype, f64 included, on both backends; `fdim` is one subtraction and a
//! selection, in every float dtype too.

use super::ops::select_at;
use super::tile::{binary, to_tile, unify};
use super::{report, IntoOperand, Operand, Tile};
use crate::dtype::DType;
use crate::kernel::Loc;
use crate::op::{BinaryOp, CmpOp, Rounding, UnaryOp};

fn float_unary(x: impl IntoOperand, op: UnaryOp, loc: Loc) -> Tile {
    let t = match x.into_operand() {
        // A bare integer literal means a float here: asin(1) is asin(1.0) in f32.
        Operand::Int(v) => to_tile(Operand::Float(v as f64), loc),
        o => to_tile(o, loc),
    };
    t.unary_at(op, loc)
}

macro_rules! float_unary_fns {
    ($($(#[$m:meta])* $name:ident => $op:ident;)*) => {$(
        $(#[$m])*
        #[track_caller]
        pub fn $name(x: impl IntoOperand) -> Tile {
            float_unary(x, UnaryOp::$op, Loc::caller())
        }
    )*};
}

float_unary_fns! {
    /// The arc sine, in `[-pi/2, pi/2]`; NaN outside `[-1, 1]` (`libdevice.asin`).
    asin => Asin;
    /// The arc cosine, in `[0, pi]`; NaN outside `[-1, 1]` (`libdevice.acos`).
    acos => Acos;
    /// The arc tangent, in `[-pi/2, pi/2]` (`libdevice.atan`).
    atan => Atan;
    /// The hyperbolic sine (`libdevice.sinh`); overflows to +-inf past about +-89.4 in f32.
    sinh => Sinh;
    /// The hyperbolic cosine (`libdevice.cosh`).
    cosh => Cosh;
    /// The inverse hyperbolic sine (`libdevice.asinh`).
    asinh => Asinh;
    /// The inverse hyperbolic cosine, for `x >= 1`; NaN below (`libdevice.acosh`).
    acosh => Acosh;
    /// The inverse hyperbolic tangent: +-inf at +-1, NaN outside `[-1, 1]` (`libdevice.atanh`).
    atanh => Atanh;
    /// `log(1 + x)`, accurate for `x` near 0 (`libdevice.log1p`).
    log1p => Log1p;
    /// `exp(x) - 1`, accurate for `x` near 0 (`libdevice.expm1`).
    expm1 => Expm1;
    /// The inverse error function on `(-1, 1)`: +-inf at +-1, NaN outside (`libdevice.erfinv`).
    erfinv => Erfinv;
    /// The real cube root (`libdevice.cbrt`); negative for negative `x`.
    cbrt => Cbrt;
    /// The tangent (`libdevice.tan`), for arguments of any magnitude (the reduction by pi/2
    /// is exact).
    tan => Tan;
    /// The base-10 logarithm (`libdevice.log10`): -inf at +-0, NaN below 0.
    log10 => Log10;
    /// `10^x` (`libdevice.exp10`); overflows to +inf past about 38.5 in f32.
    exp10 => Exp10;
    /// The complementary error function `1 - erf x` (`libdevice.erfc`), with a small relative
    /// error for large `x` too, where `1 - erf(x)` would cancel to 0.
    erfc => Erfc;
    /// `log |gamma x|` (`libdevice.lgamma`): +inf at 0, the negative integers and +-inf.
    lgamma => Lgamma;
    /// The gamma function (`libdevice.tgamma`): +-inf at +-0, NaN at the negative integers
    /// and -inf; overflows to +inf past about 35.04 in f32.
    tgamma => Tgamma;
    /// The reciprocal cube root `1 / cbrt(x)` (`libdevice.rcbrt`): +-inf at +-0, +-0 at
    /// +-inf.
    rcbrt => Rcbrt;
    /// The standard normal distribution function `(1 + erf(x / sqrt 2)) / 2`
    /// (`libdevice.normcdf`), with a small relative error in the left tail too.
    normcdf => Normcdf;
    /// `sin(pi x)` (`libdevice.sinpi`), the argument reduced exactly: `+0` at the positive
    /// integers, `-0` at the negative ones, `+-0` at `+-0`, NaN at `+-inf`.
    sinpi => Sinpi;
    /// `cos(pi x)` (`libdevice.cospi`), the argument reduced exactly: `+0` at the
    /// half-integers, `+-1` at the integers, NaN at `+-inf`.
    cospi => Cospi;
    /// The scaled complementary error function `exp(x^2) erfc(x)` (`libdevice.erfcx`): about
    /// `1 / (x sqrt pi)` for large `x`, 0 at +inf, +inf below about -9.38 in f32.
    erfcx => Erfcx;
    /// The inverse complementary error function (`libdevice.erfcinv`): `erfc(erfcinv y) = y`
    /// for `y` in [0, 2]; +inf at 0, -inf at 2, NaN outside [0, 2].
    erfcinv => Erfcinv;
    /// The inverse of the standard normal distribution function (`libdevice.normcdfinv`),
    /// `-sqrt(2) erfcinv(2p)`: -inf at 0, +0 at 1/2, +inf at 1, NaN outside [0, 1].
    normcdfinv => Normcdfinv;
    /// The modified Bessel function of the first kind of order 0, `I_0(x)`
    /// (`libdevice.cyl_bessel_i0`; unscaled): 1 at 0, even, +inf past about 91.9 in f32.
    cyl_bessel_i0 => CylBesselI0;
    /// The modified Bessel function of the first kind of order 1, `I_1(x)`
    /// (`libdevice.cyl_bessel_i1`; unscaled): odd, `+-0` at `+-0`, `+-inf` past about 91.9
    /// in f32.
    cyl_bessel_i1 => CylBesselI1;
    /// The Bessel function of the first kind of order 0, `J_0(x)` (`libdevice.j0`): even, 1
    /// at 0, +0 at +-inf; a small relative error near its zeros too.
    j0 => J0;
    /// The Bessel function of the first kind of order 1, `J_1(x)` (`libdevice.j1`): odd,
    /// `+-0` at `+-0` and at `+-inf`; a small relative error near its zeros too.
    j1 => J1;
    /// The Bessel function of the second kind of order 0, `Y_0(x)` (`libdevice.y0`): -inf at
    /// +-0, NaN below 0, +0 at +inf; a small relative error near its zeros too.
    y0 => Y0;
    /// The Bessel function of the second kind of order 1, `Y_1(x)` (`libdevice.y1`): -inf at
    /// +-0 (and below about 6e-39 in f32), NaN below 0, +0 at +inf.
    y1 => Y1;
    /// The nearest integer, halfway cases away from zero (`libdevice.round`); exact.
    round => Round;
    /// The nearest integer, halfway cases to even (`libdevice.rint`); exact.
    rint => Rint;
    /// The nearest integer, halfway cases to even (`libdevice.nearbyint`, the same as `rint`:
    /// there are no floating-point exception flags to leave untouched); exact.
    nearbyint => Rint;
    /// The integer part, rounding toward zero (`libdevice.trunc`); exact.
    trunc => Trunc;
}

fn float_binary(op: BinaryOp, a: impl IntoOperand, b: impl IntoOperand, loc: Loc) -> Tile {
    // Integer literals beside each other mean floats: pow(2, 10) is f32.
    let lit = |o: Operand| match o {
        Operand::Int(v) => Operand::Float(v as f64),
        o => o,
    };
    binary(op, lit(a.into_operand()), lit(b.into_operand()), loc)
}

/// `atan2(y, x)`: the angle of the point `(x, y)` from the positive x axis, in `[-pi, pi]`, with
/// C99's values at zeros and infinities (`libdevice.atan2`).
#[track_caller]
pub fn atan2(y: impl IntoOperand, x: impl IntoOperand) -> Tile {
    float_binary(BinaryOp::Atan2, y, x, Loc::caller())
}

/// `x` to the power `y` (`libdevice.pow`), with C99's special values: `pow(x, 0) = 1` and
/// `pow(1, y) = 1` even for NaN, a negative finite `x` needs an integer `y` (else NaN), odd
/// integer powers keep the sign.
#[track_caller]
pub fn pow(x: impl IntoOperand, y: impl IntoOperand) -> Tile {
    float_binary(BinaryOp::Pow, x, y, Loc::caller())
}

/// `x / y` rounded to nearest as IEEE 754 says, on the GPU too, where `/` on f32 is Triton's
/// faster `div.full` (within 2 ulp) (`tl.math.div_rn`).
#[track_caller]
pub fn div_rn(x: impl IntoOperand, y: impl IntoOperand) -> Tile {
    float_binary(BinaryOp::DivRn, x, y, Loc::caller())
}

/// `sqrt(x^2 + y^2)` without intermediate overflow or underflow; +inf when either is infinite,
/// even if the other is NaN (`libdevice.hypot`).
#[track_caller]
pub fn hypot(x: impl IntoOperand, y: impl IntoOperand) -> Tile {
    float_binary(BinaryOp::Hypot, x, y, Loc::caller())
}

/// `1 / sqrt(x^2 + y^2)` (`libdevice.rhypot`) without intermediate overflow or underflow;
/// +0 when either is infinite, even if the other is NaN; +inf when both are zero.
#[track_caller]
pub fn rhypot(x: impl IntoOperand, y: impl IntoOperand) -> Tile {
    float_binary(BinaryOp::Rhypot, x, y, Loc::caller())
}

/// IEEE 754's remainder (`libdevice.remainder`): `x - n y` with `n` the integer nearest
/// `x / y`, halfway cases to even, computed exactly (so `|result| <= |y| / 2`); a zero result
/// has the sign of `x`; NaN when `y` is 0 or `x` is infinite, `x` when `y` is infinite.
#[track_caller]
pub fn remainder(x: impl IntoOperand, y: impl IntoOperand) -> Tile {
    float_binary(BinaryOp::Remainder, x, y, Loc::caller())
}

/// The Bessel function of the first kind of integer order `n`, `J_n(x)` (`libdevice.jn`):
/// `n` an integer tile or literal (i32 in Triton), `x` a float tile. By the recurrence from
/// `j0` and `j1` in f64 (forward when `|n| <= |x|`, Miller's backward recurrence above), so
/// it costs about `|n|` steps (of the largest order in a warp, on the GPU) beyond `j0` and
/// `j1`; `J_(-n) = (-1)^n J_n` (CUDA's `jnf` gives NaN for `n < 0`), `J_n(-x) = (-1)^n
/// J_n(x)`, `J_0(0) = 1` and `+-0` at 0 otherwise, `+-0` at `+-inf`. f32 computes with `n`
/// as an f32 (exact to `|n| = 2^24`), f16/bf16 through f32.
#[track_caller]
pub fn jn(n: impl IntoOperand, x: impl IntoOperand) -> Tile {
    bessel_n(BinaryOp::Jn, n, x, Loc::caller())
}

/// The Bessel function of the second kind of integer order `n`, `Y_n(x)` (`libdevice.yn`),
/// `n` as for [`jn`]: the forward recurrence from `y0` and `y1` in f64, about `|n|` steps;
/// `Y_(-n) = (-1)^n Y_n` (CUDA's `ynf` gives NaN for `n < 0`), -inf at `+-0` (+inf for a
/// negative odd `n`, the reflection's limit), NaN below 0, +0 at +inf, -inf where `Y_n`
/// passes the f32 range near 0.
#[track_caller]
pub fn yn(n: impl IntoOperand, x: impl IntoOperand) -> Tile {
    bessel_n(BinaryOp::Yn, n, x, Loc::caller())
}

fn bessel_n(op: BinaryOp, n: impl IntoOperand, x: impl IntoOperand, loc: Loc) -> Tile {
    let x = float_operand(x, op.name(), loc);
    let n = to_tile(n.into_operand(), loc);
    if n.is_ptr() || !n.dtype().is_int() {
        report(
            loc,
            format!("{} needs an integer order, got {}", op.name(), n.ty()),
        );
        return x;
    }
    if x.is_ptr() || !x.dtype().is_float() {
        return x;
    }
    let d = x.dtype();
    let work = if d == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    let nf = n.cast_at(work, Rounding::NearestEven, loc);
    let xw = x.cast_at(work, Rounding::NearestEven, loc);
    let r = binary(op, Operand::Tile(nf), Operand::Tile(xw), loc);
    r.cast_at(d, Rounding::NearestEven, loc)
}

/// `(sin(pi x), cos(pi x))` (`libdevice.sincospi`, whose results CUDA stores through two
/// pointers): [`sinpi`] and [`cospi`], the same bits, each its own op (each reduces the
/// argument itself, a few exact operations).
#[track_caller]
pub fn sincospi(x: impl IntoOperand) -> (Tile, Tile) {
    let loc = Loc::caller();
    let t = float_operand(x, "sincospi", loc);
    if t.is_ptr() || !t.dtype().is_float() {
        return (t, t);
    }
    (
        t.unary_at(UnaryOp::Sinpi, loc),
        t.unary_at(UnaryOp::Cospi, loc),
    )
}

/// `(remainder(x, y), quo)` (`libdevice.remquo`, whose quotient CUDA stores through a
/// pointer): IEEE 754's remainder, exact, as [`remainder`], and an i32 tile with the sign of
/// `x / y` and the low three bits of the magnitude of the integer quotient `n` (the one
/// `remainder` rounds to, halfway cases to even), C99's minimum and glibc's choice; `quo` is
/// 0 where the remainder is NaN. The bits come from `m = remainder(|x|, 8|y|)` (exact, in
/// `[-4|y|, 4|y|]`: `|x| / |y| = 8k + m / |y|`, and rounding half to even commutes with the
/// even `8k`) as `rint(m / |y| - remainder(m, |y|) / |y|)` mod 8, an integer from -4 to 4
/// whose rounding errors stay far below 1/2.
#[track_caller]
pub fn remquo(x: impl IntoOperand, y: impl IntoOperand) -> (Tile, Tile) {
    let loc = Loc::caller();
    let lit = |o: Operand| match o {
        Operand::Int(v) => Operand::Float(v as f64),
        o => o,
    };
    let (x, y) = unify(lit(x.into_operand()), lit(y.into_operand()), "remquo", loc);
    let t = Operand::Tile;
    let r = binary(BinaryOp::Remainder, t(x), t(y), loc);
    if r.is_ptr() || !r.dtype().is_float() {
        return (r, r);
    }
    let work = if x.dtype() == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    let xw = x.cast_at(work, Rounding::NearestEven, loc);
    let yw = y.cast_at(work, Rounding::NearestEven, loc);
    let ax = xw.unary_at(UnaryOp::Abs, loc);
    let ay = yw.unary_at(UnaryOp::Abs, loc);
    let ay8 = binary(BinaryOp::Mul, t(ay), Operand::Float(8.0), loc);
    let m = binary(BinaryOp::Remainder, t(ax), t(ay8), loc);
    let rm = binary(BinaryOp::Remainder, t(m), t(ay), loc);
    let a = binary(BinaryOp::DivRn, t(m), t(ay), loc);
    let b = binary(BinaryOp::DivRn, t(rm), t(ay), loc);
    let q = binary(BinaryOp::Sub, t(a), t(b), loc).unary_at(UnaryOp::Rint, loc);
    let q = q.cast_at(DType::I32, Rounding::NearestEven, loc);
    let q = binary(BinaryOp::And, t(q), Operand::Int(7), loc);
    let sign = |v: Tile| {
        let signed = if work == DType::F64 {
            DType::I64
        } else {
            DType::I32
        };
        v.bitcast_at(signed, loc)
            .compare(CmpOp::Lt, Operand::Int(0), loc)
    };
    let neg = binary(BinaryOp::Xor, t(sign(xw)), t(sign(yw)), loc);
    let nq = binary(BinaryOp::Sub, Operand::Int(0), t(q), loc);
    let q = select_at(neg, t(nq), t(q), loc);
    let nan = r.compare(CmpOp::Ne, t(r), loc);
    let q = select_at(nan, Operand::Int(0), t(q), loc);
    (r, q)
}

/// The remainder of `x / y` with the sign of `x`, `x - trunc(x / y) * y` computed exactly
/// (`libdevice.fmod`; the same op as `x % y` on floats).
#[track_caller]
pub fn fmod(x: impl IntoOperand, y: impl IntoOperand) -> Tile {
    binary(
        BinaryOp::Rem,
        x.into_operand(),
        y.into_operand(),
        Loc::caller(),
    )
}

fn float_tile(x: impl IntoOperand, what: &str, loc: Loc) -> Tile {
    let t = to_tile(x.into_operand(), loc);
    if t.is_ptr() || !t.dtype().is_float() {
        report(loc, format!("{what} needs a float tile, got {}", t.ty()));
    }
    t
}

/// The unsigned integer dtype of `d`'s width.
fn bits_dtype(d: DType) -> DType {
    match d.bits() {
        16 => DType::U16,
        64 => DType::U64,
        _ => DType::U32,
    }
}

/// Whether each element is NaN, an i1 tile (`libdevice.isnan`).
#[track_caller]
pub fn isnan(x: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let t = float_tile(x, "isnan", loc);
    t.compare(CmpOp::Ne, Operand::Tile(t), loc)
}

/// Whether each element is +inf or -inf, an i1 tile (`libdevice.isinf`).
#[track_caller]
pub fn isinf(x: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let t = float_tile(x, "isinf", loc);
    t.unary_at(UnaryOp::Abs, loc)
        .compare(CmpOp::Eq, Operand::Float(f64::INFINITY), loc)
}

/// Whether each element is finite (neither infinite nor NaN), an i1 tile
/// (`libdevice.isfinited`).
#[track_caller]
pub fn isfinite(x: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let t = float_tile(x, "isfinite", loc);
    t.unary_at(UnaryOp::Abs, loc)
        .compare(CmpOp::Lt, Operand::Float(f64::INFINITY), loc)
}

/// Whether the sign bit is set, an i1 tile: true for negative numbers, -0.0, -inf and NaNs
/// with the sign bit (`libdevice.signbit`).
#[track_caller]
pub fn signbit(x: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let t = float_tile(x, "signbit", loc);
    let signed = match t.dtype().bits() {
        16 => DType::I16,
        64 => DType::I64,
        _ => DType::I32,
    };
    t.bitcast_at(signed, loc)
        .compare(CmpOp::Lt, Operand::Int(0), loc)
}

/// The magnitude of `x` with the sign bit of `y` (`libdevice.copysign`); exact, NaNs included.
/// The operands are promoted to one float dtype first.
#[track_caller]
pub fn copysign(x: impl IntoOperand, y: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let (a, b) = match float_pair(x, y, "copysign", loc) {
        Ok(pair) => pair,
        Err(a) => return a,
    };
    let d = a.dtype();
    let u = bits_dtype(d);
    let sign: i64 = match d.bits() {
        16 => 0x8000,
        64 => i64::MIN,
        _ => 0x8000_0000,
    };
    let mag = if d.bits() == 64 { i64::MAX } else { sign - 1 };
    let t = Operand::Tile;
    let ma = binary(
        BinaryOp::And,
        t(a.bitcast_at(u, loc)),
        Operand::Int(mag),
        loc,
    );
    let sb = binary(
        BinaryOp::And,
        t(b.bitcast_at(u, loc)),
        Operand::Int(sign),
        loc,
    );
    binary(BinaryOp::Or, t(ma), t(sb), loc).bitcast_at(d, loc)
}

/// Two operands promoted to one float dtype, bare integer literals read as floats; or, with
/// the error reported at `loc`, the first as it is (for the caller to return).
fn float_pair(
    x: impl IntoOperand,
    y: impl IntoOperand,
    what: &str,
    loc: Loc,
) -> Result<(Tile, Tile), Tile> {
    let lit = |o: Operand| match o {
        Operand::Int(v) => Operand::Float(v as f64),
        o => o,
    };
    let (a, b) = unify(lit(x.into_operand()), lit(y.into_operand()), what, loc);
    if a.is_ptr() || !a.dtype().is_float() {
        report(loc, format!("{what} needs float operands, got {}", a.ty()));
        return Err(a);
    }
    Ok((a, b))
}

/// A float operand, bare integer literals read as floats (`ldexp(1, n)` is f32).
fn float_operand(x: impl IntoOperand, what: &str, loc: Loc) -> Tile {
    let x = match x.into_operand() {
        Operand::Int(v) => Operand::Float(v as f64),
        o => o,
    };
    float_tile(x, what, loc)
}

/// The signed integer dtype of `d`'s width.
fn signed_bits_dtype(d: DType) -> DType {
    match d.bits() {
        16 => DType::I16,
        64 => DType::I64,
        _ => DType::I32,
    }
}

/// `x * 2^n` (`libdevice.ldexp`), exact but for one rounding where the result is subnormal
/// (gradual underflow), +-inf on overflow, +-0 below the subnormals; `n` an integer tile or
/// literal of any integer dtype. f16 and bf16 go through f32 (exact there, then one rounding).
#[track_caller]
pub fn ldexp(x: impl IntoOperand, n: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let x = float_operand(x, "ldexp", loc);
    let n = to_tile(n.into_operand(), loc);
    ldexp_at(x, n, loc)
}

fn ldexp_at(x: Tile, n: Tile, loc: Loc) -> Tile {
    if n.is_ptr() || !n.dtype().is_int() {
        report(
            loc,
            format!("ldexp needs an integer exponent, got {}", n.ty()),
        );
        return x;
    }
    let d = x.dtype();
    let work = if d == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    let y = scalbn(x.cast_at(work, Rounding::NearestEven, loc), n, loc);
    y.cast_at(d, Rounding::NearestEven, loc)
}

/// `x * 2^n` for an f32 or f64 `x`: by at most two exact steps of 2^emax up or of
/// 2^(emin + p) down, then one multiplication by a normal power of two, the only one that can
/// round. (A down step rounds only when the result is below half the smallest subnormal, 0
/// either way.)
fn scalbn(x: Tile, n: Tile, loc: Loc) -> Tile {
    let t = Operand::Tile;
    let wide = x.dtype() == DType::F64;
    let (emax, emin, p, mb, id) = if wide {
        (1023i64, -1022i64, 53i64, 52i64, DType::I64)
    } else {
        (127, -126, 24, 23, DType::I32)
    };
    // Past +-lim every finite x overflows or vanishes: clamp first, in i64 (a u64 exponent
    // above i64::MAX is clamped before it would wrap negative).
    let lim = emax - emin + p + 1;
    let mut n = n;
    if n.dtype() == DType::U64 {
        n = binary(BinaryOp::Min, t(n), Operand::Int(lim), loc);
    }
    let n = n.cast_at(DType::I64, Rounding::NearestEven, loc);
    let n = binary(BinaryOp::Max, t(n), Operand::Int(-lim), loc);
    let n = binary(BinaryOp::Min, t(n), Operand::Int(lim), loc);
    let mut n = n.cast_at(id, Rounding::NearestEven, loc);
    let pow2 = |e: Tile| {
        let b = binary(BinaryOp::Add, t(e), Operand::Int(emax), loc);
        binary(BinaryOp::Shl, t(b), Operand::Int(mb), loc).bitcast_at(x.dtype(), loc)
    };
    let mut y = x;
    for _ in 0..2 {
        let up = n.compare(CmpOp::Gt, Operand::Int(emax), loc);
        let scaled = binary(
            BinaryOp::Mul,
            t(y),
            Operand::Float(2f64.powi(emax as i32)),
            loc,
        );
        y = select_at(up, t(scaled), t(y), loc);
        let less = binary(BinaryOp::Sub, t(n), Operand::Int(emax), loc);
        n = select_at(up, t(less), t(n), loc);
    }
    n = binary(BinaryOp::Min, t(n), Operand::Int(emax), loc);
    let step = emin + p;
    for _ in 0..2 {
        let down = n.compare(CmpOp::Lt, Operand::Int(emin), loc);
        let scaled = binary(
            BinaryOp::Mul,
            t(y),
            Operand::Float(2f64.powi(step as i32)),
            loc,
        );
        y = select_at(down, t(scaled), t(y), loc);
        let more = binary(BinaryOp::Sub, t(n), Operand::Int(step), loc);
        n = select_at(down, t(more), t(n), loc);
    }
    n = binary(BinaryOp::Max, t(n), Operand::Int(emin), loc);
    binary(BinaryOp::Mul, t(y), t(pow2(n)), loc)
}

/// The next representable value after `x` in the direction of `y` (`libdevice.nextafter`), in
/// the operands' (promoted) float dtype, f16 and bf16 included: `y` when `x == y` (so
/// `nextafter(0.0, -0.0)` is -0.0), NaN when either is NaN, the smallest subnormal of `y`'s
/// sign from a zero, +-inf past the largest finite value. Exact.
#[track_caller]
pub fn nextafter(x: impl IntoOperand, y: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let (a, b) = match float_pair(x, y, "nextafter", loc) {
        Ok(pair) => pair,
        Err(a) => return a,
    };
    let t = Operand::Tile;
    let d = a.dtype();
    let si = signed_bits_dtype(d);
    // The bits as a sign-magnitude integer: +1 steps away from zero, -1 toward it.
    let ia = a.bitcast_at(si, loc);
    let rising = b.compare(CmpOp::Gt, t(a), loc);
    let negative = a.compare(CmpOp::Lt, Operand::Float(0.0), loc);
    let away = binary(BinaryOp::Xor, t(rising), t(negative), loc);
    let inc = binary(BinaryOp::Add, t(ia), Operand::Int(1), loc);
    let dec = binary(BinaryOp::Sub, t(ia), Operand::Int(1), loc);
    let stepped = select_at(away, t(inc), t(dec), loc);
    let min_neg = match d.bits() {
        16 => -0x7FFF,
        64 => i64::MIN + 1,
        _ => i32::MIN as i64 + 1,
    };
    let down = b.compare(CmpOp::Lt, Operand::Float(0.0), loc);
    let tiny = select_at(down, Operand::Int(min_neg), Operand::Int(1), loc).cast_at(
        si,
        Rounding::NearestEven,
        loc,
    );
    let zero = a.compare(CmpOp::Eq, Operand::Float(0.0), loc);
    let r = select_at(zero, t(tiny), t(stepped), loc).bitcast_at(d, loc);
    let same = a.compare(CmpOp::Eq, t(b), loc);
    let r = select_at(same, t(b), t(r), loc);
    let an = a.compare(CmpOp::Ne, t(a), loc);
    let bn = b.compare(CmpOp::Ne, t(b), loc);
    let nan = binary(BinaryOp::Or, t(an), t(bn), loc);
    let sum = binary(BinaryOp::Add, t(a), t(b), loc);
    select_at(nan, t(sum), t(r), loc)
}

/// The unbiased exponent of `x` as an i32 tile, `floor(log2 |x|)` (`libdevice.ilogb`),
/// subnormals included; as CUDA documents it, `i32::MIN` at +-0 and NaN (C's `FP_ILOGB0` and
/// `FP_ILOGBNAN`) and `i32::MAX` at +-inf. Exact in every float dtype.
#[track_caller]
pub fn ilogb(x: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    ilogb_at(float_operand(x, "ilogb", loc), loc)
}

fn ilogb_at(x: Tile, loc: Loc) -> Tile {
    let t = Operand::Tile;
    let d = x.dtype();
    if !d.is_float() {
        return x;
    }
    // (mantissa bits, exponent bias, smallest normal exponent) of the dtype.
    let (mb, bias, emin) = match d {
        DType::F16 => (10i64, 15i64, -14i32),
        DType::BF16 => (7, 127, -126),
        DType::F64 => (52, 1023, -1022),
        _ => (23, 127, -126),
    };
    // A subnormal times 2^(mb + 1) is normal, exactly.
    let a = x.unary_at(UnaryOp::Abs, loc);
    let sub = a.compare(CmpOp::Lt, Operand::Float(2f64.powi(emin)), loc);
    let up = binary(
        BinaryOp::Mul,
        t(x),
        Operand::Float(2f64.powi(mb as i32 + 1)),
        loc,
    );
    let s = select_at(sub, t(up), t(x), loc);
    let si = signed_bits_dtype(d);
    let bits = s.bitcast_at(si, loc);
    let sh = binary(BinaryOp::Shr, t(bits), Operand::Int(mb), loc);
    let field = binary(
        BinaryOp::And,
        t(sh),
        Operand::Int((1 << (d.bits() as i64 - 1 - mb)) - 1),
        loc,
    );
    let e = binary(BinaryOp::Sub, t(field), Operand::Int(bias), loc).cast_at(
        DType::I32,
        Rounding::NearestEven,
        loc,
    );
    let shift = select_at(sub, Operand::Int(mb + 1), Operand::Int(0), loc);
    let e = binary(BinaryOp::Sub, t(e), t(shift), loc);
    let inf = a.compare(CmpOp::Eq, Operand::Float(f64::INFINITY), loc);
    let e = select_at(inf, Operand::Int(i32::MAX as i64), t(e), loc);
    // NaN is unordered, so `!(|x| > 0)` holds at zeros and NaN alike.
    let pos = a.compare(CmpOp::Gt, Operand::Float(0.0), loc);
    select_at(pos, t(e), Operand::Int(i32::MIN as i64), loc)
}

/// The exponent of `x` as a float of its dtype (`libdevice.logb`): `floor(log2 |x|)`, exact;
/// -inf at +-0, +inf at +-inf, NaN at NaN; subnormals give their own exponent.
#[track_caller]
pub fn logb(x: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let x = float_operand(x, "logb", loc);
    let d = x.dtype();
    if !d.is_float() {
        return x;
    }
    let t = Operand::Tile;
    let e = ilogb_at(x, loc).cast_at(d, Rounding::NearestEven, loc);
    let a = x.unary_at(UnaryOp::Abs, loc);
    let zero = a.compare(CmpOp::Eq, Operand::Float(0.0), loc);
    let inf = a.compare(CmpOp::Eq, Operand::Float(f64::INFINITY), loc);
    let nan = x.compare(CmpOp::Ne, t(x), loc);
    let e = select_at(zero, Operand::Float(f64::NEG_INFINITY), t(e), loc);
    let e = select_at(inf, Operand::Float(f64::INFINITY), t(e), loc);
    select_at(nan, t(x), t(e), loc)
}

/// The positive difference (`libdevice.fdim`): `x - y` where `x > y`, else +0; NaN when
/// either is NaN. One rounding, as the subtraction.
#[track_caller]
pub fn fdim(x: impl IntoOperand, y: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let (a, b) = match float_pair(x, y, "fdim", loc) {
        Ok(pair) => pair,
        Err(a) => return a,
    };
    let t = Operand::Tile;
    let diff = binary(BinaryOp::Sub, t(a), t(b), loc);
    // Ordered: false when either is NaN, which keeps the difference's NaN.
    let not_above = a.compare(CmpOp::Le, t(b), loc);
    select_at(not_above, Operand::Float(0.0), t(diff), loc)
}

/// `x` split as `m * 2^e` with `|m|` in `[1/2, 1)` and `e` an i32 tile (C's `frexp`, the
/// exponent returned rather than stored): `(m, e)`. `(x, 0)` at +-0, +-inf and NaN. Exact in
/// every float dtype.
#[track_caller]
pub fn frexp(x: impl IntoOperand) -> (Tile, Tile) {
    let loc = Loc::caller();
    let x = float_operand(x, "frexp", loc);
    if !x.dtype().is_float() {
        return (x, x);
    }
    let t = Operand::Tile;
    let e = binary(BinaryOp::Add, t(ilogb_at(x, loc)), Operand::Int(1), loc);
    let a = x.unary_at(UnaryOp::Abs, loc);
    let gt0 = a.compare(CmpOp::Gt, Operand::Float(0.0), loc);
    let fin = a.compare(CmpOp::Lt, Operand::Float(f64::INFINITY), loc);
    let regular = binary(BinaryOp::And, t(gt0), t(fin), loc);
    let e = select_at(regular, t(e), Operand::Int(0), loc);
    let ne = binary(BinaryOp::Sub, Operand::Int(0), t(e), loc);
    (ldexp_at(x, ne, loc), e)
}
