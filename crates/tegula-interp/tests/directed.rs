//! libdevice's directed-rounding arithmetic (`add_*`, `sub_*`, `mul_*`, `div_*`, `fma_*`,
//! `sqrt_*`, `rcp_*` in `rn`, `rz`, `rd`, `ru`) on the interpreter against a reference written
//! here from integers alone: each operand as `+-m 2^e`, the exact result as a 128-bit integer
//! (sums aligned with the shifted-out bits jammed into a sticky bit, quotients and square roots
//! with their remainders as the sticky bit), rounded to f32 or f64 by the rules of IEEE 754
//! (subnormals, overflow to inf or MAX by direction, IEEE 754's signed zeros). Inputs: random
//! bit patterns of every class, subnormals, neighbours of the overflow threshold, near-equal
//! pairs (cancellation) and constructed ties.

mod common;
use common::*;
use std::sync::Arc;
use tegula_interp::Buffer;
use tegula_ir::prelude::*;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    Rn,
    Rz,
    Rd,
    Ru,
}

/// A float format: precision, smallest normal exponent, largest exponent.
#[derive(Clone, Copy)]
struct Fmt {
    p: i32,
    emin: i32,
    emax: i32,
}

const F32: Fmt = Fmt {
    p: 24,
    emin: -126,
    emax: 127,
};
const F64: Fmt = Fmt {
    p: 53,
    emin: -1022,
    emax: 1023,
};

/// An exact value `+-m 2^e`, `m` maybe with a sticky bit in bit 0 (then not exact, but below
/// every rounding position).
type Exact = (bool, u128, i32);

fn dec(x: f64) -> Exact {
    let b = x.to_bits();
    let exp = ((b >> 52) & 0x7ff) as i32;
    let frac = (b & ((1 << 52) - 1)) as u128;
    if exp == 0 {
        (b >> 63 == 1, frac, -1074)
    } else {
        (b >> 63 == 1, frac | 1 << 52, exp - 1075)
    }
}

fn pow2(k: i32) -> f64 {
    // Exact for k down to -1074, in two steps below -1000.
    if k < -1000 {
        2f64.powi(k + 200) * 2f64.powi(-200)
    } else {
        2f64.powi(k)
    }
}

/// `+-m 2^e` rounded to the format in `mode`; `m` nonzero.
fn round(x: Exact, mode: Mode, f: Fmt) -> f64 {
    let (neg, m, e) = x;
    let msb = 127 - m.leading_zeros() as i32;
    let top = msb + e;
    let q = top.max(f.emin) - (f.p - 1);
    let shift = q - e;
    let (mant, inc) = if shift <= 0 {
        (m << -shift, false)
    } else if shift >= 128 {
        let up = match mode {
            Mode::Rn => false,
            Mode::Rz => false,
            Mode::Rd => neg,
            Mode::Ru => !neg,
        };
        (0, up)
    } else {
        let mant = m >> shift;
        let rem = m & ((1u128 << shift) - 1);
        let half = 1u128 << (shift - 1);
        let inc = match mode {
            Mode::Rn => rem > half || (rem == half && mant & 1 == 1),
            Mode::Rz => false,
            Mode::Rd => neg && rem != 0,
            Mode::Ru => !neg && rem != 0,
        };
        (mant, inc)
    };
    let mant = mant + inc as u128;
    let mag = if mant == 0 {
        0.0
    } else {
        let mb = 127 - mant.leading_zeros() as i32;
        if mb + q > f.emax {
            // Overflow: inf to nearest and away from zero, MAX toward it.
            let max = (2.0 - pow2(1 - f.p)) * pow2(f.emax);
            let inf = match mode {
                Mode::Rn => true,
                Mode::Rz => false,
                Mode::Rd => neg,
                Mode::Ru => !neg,
            };
            if inf {
                f64::INFINITY
            } else {
                max
            }
        } else {
            mant as f64 * pow2(q)
        }
    };
    if neg {
        -mag
    } else {
        mag
    }
}

/// The exact sum of two values (products of f64s included), the smaller's shifted-out bits
/// jammed into a sticky bit.
fn add(x: Exact, y: Exact) -> Exact {
    if x.1 == 0 {
        return y;
    }
    if y.1 == 0 {
        return x;
    }
    let norm = |(n, m, e): Exact| {
        let s = m.leading_zeros() as i32 - 2;
        (n, m << s, e - s)
    };
    let (mut big, mut small) = (norm(x), norm(y));
    if small.2 > big.2 || (small.2 == big.2 && small.1 > big.1) {
        std::mem::swap(&mut big, &mut small);
    }
    let d = big.2 - small.2;
    let sm = if d >= 127 {
        1
    } else if d == 0 {
        small.1
    } else {
        small.1 >> d | ((small.1 & ((1u128 << d) - 1)) != 0) as u128
    };
    if big.0 == small.0 {
        (big.0, big.1 + sm, big.2)
    } else {
        (big.0, big.1 - sm, big.2)
    }
}

fn mul(x: Exact, y: Exact) -> Exact {
    (x.0 ^ y.0, x.1 * y.1, x.2 + y.2)
}

/// `m` normalized to its bit 52 (subnormals' too).
fn norm52((n, m, e): Exact) -> Exact {
    let s = m.leading_zeros() as i32 - 75;
    (n, m << s, e - s)
}

fn div(x: Exact, y: Exact) -> Exact {
    let (x, y) = (norm52(x), norm52(y));
    let num = x.1 << 74;
    let q = num / y.1;
    let sticky = (num % y.1 != 0) as u128;
    (x.0 ^ y.0, q | sticky, x.2 - y.2 - 74)
}

fn sqrt(x: Exact) -> Exact {
    let (_, m, e) = norm52(x);
    let k = if (e - 74) % 2 == 0 { 74 } else { 75 };
    let v = m << k;
    let mut r = (v as f64).sqrt() as u128;
    while r.checked_mul(r).is_none_or(|s| s > v) {
        r -= 1;
    }
    while (r + 1).checked_mul(r + 1).is_some_and(|s| s <= v) {
        r += 1;
    }
    let sticky = (r * r != v) as u128;
    (false, r << 1 | sticky, (e - k) / 2 - 1)
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Op {
    Add,
    Sub,
    Mul,
    Div,
    Fma,
    Sqrt,
    Rcp,
}

/// The reference: specials from IEEE 754's exact cases (an infinite or NaN operand, x / 0,
/// sqrt of a negative or zero), exact zeros by the sign rules, the rest rounded from the
/// exact value.
fn reference(op: Op, mode: Mode, f: Fmt, a: &[f64]) -> f64 {
    let to = |x: f64| if f.p == 24 { x as f32 as f64 } else { x };
    let native = match op {
        Op::Add => a[0] + a[1],
        Op::Sub => a[0] - a[1],
        Op::Mul => a[0] * a[1],
        Op::Div => a[0] / a[1],
        Op::Fma => a[0].mul_add(a[1], a[2]),
        Op::Sqrt => a[0].sqrt(),
        Op::Rcp => 1.0 / a[0],
    };
    if a.iter().any(|x| !x.is_finite())
        || (op == Op::Div && a[1] == 0.0)
        || (op == Op::Rcp && a[0] == 0.0)
        || (op == Op::Sqrt && a[0] <= 0.0)
    {
        return to(native);
    }
    let neg = |(n, m, e): Exact| (!n, m, e);
    let d = |i: usize| dec(a[i]);
    let (v, addends): (Exact, Option<(f64, f64)>) = match op {
        Op::Add => (add(d(0), d(1)), Some((a[0], a[1]))),
        Op::Sub => (add(d(0), neg(d(1))), Some((a[0], -a[1]))),
        Op::Mul => (mul(d(0), d(1)), None),
        Op::Div => (
            if a[0] == 0.0 {
                (false, 0, 0)
            } else {
                div(d(0), d(1))
            },
            None,
        ),
        Op::Fma => (add(mul(d(0), d(1)), d(2)), Some((a[0] * a[1], a[2]))),
        Op::Sqrt => (sqrt(d(0)), None),
        Op::Rcp => (div(dec(1.0), d(0)), None),
    };
    if v.1 != 0 {
        return round(v, mode, f);
    }
    // Exact zeros.
    match addends {
        None => to(native),
        Some((x, y)) => {
            let both_zero = x == 0.0 && y == 0.0;
            let (nx, ny) = (x.is_sign_negative(), y.is_sign_negative());
            let negative = match (both_zero, mode) {
                (true, Mode::Rd) => nx || ny,
                (true, _) => nx && ny,
                (false, Mode::Rd) => true,
                (false, _) => false,
            };
            if negative {
                -0.0
            } else {
                0.0
            }
        }
    }
}

fn traced(op: Op, mode: Mode, t: &[Tile]) -> Tile {
    use Mode::*;
    match (op, mode) {
        (Op::Add, Rn) => add_rn(t[0], t[1]),
        (Op::Add, Rz) => add_rz(t[0], t[1]),
        (Op::Add, Rd) => add_rd(t[0], t[1]),
        (Op::Add, Ru) => add_ru(t[0], t[1]),
        (Op::Sub, Rn) => sub_rn(t[0], t[1]),
        (Op::Sub, Rz) => sub_rz(t[0], t[1]),
        (Op::Sub, Rd) => sub_rd(t[0], t[1]),
        (Op::Sub, Ru) => sub_ru(t[0], t[1]),
        (Op::Mul, Rn) => mul_rn(t[0], t[1]),
        (Op::Mul, Rz) => mul_rz(t[0], t[1]),
        (Op::Mul, Rd) => mul_rd(t[0], t[1]),
        (Op::Mul, Ru) => mul_ru(t[0], t[1]),
        (Op::Div, Rn) => div_rn(t[0], t[1]),
        (Op::Div, Rz) => div_rz(t[0], t[1]),
        (Op::Div, Rd) => div_rd(t[0], t[1]),
        (Op::Div, Ru) => div_ru(t[0], t[1]),
        (Op::Fma, Rn) => fma_rn(t[0], t[1], t[2]),
        (Op::Fma, Rz) => fma_rz(t[0], t[1], t[2]),
        (Op::Fma, Rd) => fma_rd(t[0], t[1], t[2]),
        (Op::Fma, Ru) => fma_ru(t[0], t[1], t[2]),
        (Op::Sqrt, Rn) => sqrt_rn(t[0]),
        (Op::Sqrt, Rz) => sqrt_rz(t[0]),
        (Op::Sqrt, Rd) => sqrt_rd(t[0]),
        (Op::Sqrt, Ru) => sqrt_ru(t[0]),
        (Op::Rcp, Rn) => rcp_rn(t[0]),
        (Op::Rcp, Rz) => rcp_rz(t[0]),
        (Op::Rcp, Rd) => rcp_rd(t[0]),
        (Op::Rcp, Ru) => rcp_ru(t[0]),
    }
}

/// Operands of every class for format `f`, as f64 values of it: three columns.
fn operands(f: Fmt, r: &mut Rng, n: usize) -> [Vec<f64>; 3] {
    let to = |x: f64| if f.p == 24 { x as f32 as f64 } else { x };
    let max = (2.0 - pow2(1 - f.p)) * pow2(f.emax);
    let tiny = pow2(f.emin - f.p + 1);
    let special = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        max,
        -max,
        tiny,
        -tiny,
        pow2(f.emin),
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        3.0,
        0.1,
    ];
    let any = |r: &mut Rng| -> f64 {
        let bits = r.next_u64();
        match bits % 8 {
            0 => to(special[(bits >> 8) as usize % special.len()]),
            // Any pattern of the format.
            1 | 2 => {
                if f.p == 24 {
                    f32::from_bits((bits >> 16) as u32) as f64
                } else {
                    f64::from_bits(bits.rotate_left(7))
                }
            }
            // Subnormals.
            3 => {
                to(tiny * ((bits >> 20) % (1 << (f.p - 1))) as f64)
                    * if bits & 1 == 0 { 1.0 } else { -1.0 }
            }
            // Near the overflow threshold.
            4 => to(max * (1.0 - (bits >> 40) as f64 * pow2(-30))),
            // Moderate magnitudes with a full mantissa.
            _ => to(r.uniform(-4.0, 4.0) * pow2(((bits >> 32) % 40) as i32 - 20)),
        }
    };
    let mut c = [Vec::new(), Vec::new(), Vec::new()];
    for i in 0..n {
        let x = any(r);
        let (y, z) = match i % 4 {
            // Cancellation: y near -x (or x for sub), z near -x*y.
            0 => {
                let y = to(-x * (1.0 + r.uniform(-1.0, 1.0) * pow2(-f.p + 2)));
                (y, to(-(x * y)))
            }
            // Ties of sums: half an ulp of x.
            1 => {
                let half = if x.is_finite() && x != 0.0 {
                    let e = dec(x);
                    let top = 127 - e.1.leading_zeros() as i32 + e.2;
                    to(pow2(top.max(f.emin) - f.p))
                } else {
                    1.0
                };
                (half, to(half * 3.0))
            }
            _ => (any(r), any(r)),
        };
        c[0].push(x);
        c[1].push(y);
        c[2].push(z);
    }
    c
}

fn buffer(d: DType, v: &[f64]) -> Arc<Buffer> {
    if d == DType::F32 {
        buf(&v.iter().map(|&x| x as f32).collect::<Vec<_>>())
    } else {
        buf(v)
    }
}

fn same(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

fn check_all(d: DType, f: Fmt, seed: u64) {
    let mut r = Rng::new(seed);
    let n = 6000;
    let cols = operands(f, &mut r, n);
    let ops = [
        Op::Add,
        Op::Sub,
        Op::Mul,
        Op::Div,
        Op::Fma,
        Op::Sqrt,
        Op::Rcp,
    ];
    for op in ops {
        let arity = match op {
            Op::Sqrt | Op::Rcp => 1,
            Op::Fma => 3,
            _ => 2,
        };
        // Square roots of magnitudes too, so that most are not NaN.
        let inputs: Vec<Vec<f64>> = (0..arity)
            .map(|k| {
                if op == Op::Sqrt {
                    cols[k].iter().map(|x| x.abs()).collect()
                } else {
                    cols[k].clone()
                }
            })
            .collect();
        for mode in [Mode::Rn, Mode::Rz, Mode::Rd, Mode::Ru] {
            let bufs: Vec<Arc<Buffer>> = inputs.iter().map(|c| buffer(d, c)).collect();
            let out = eval(&bufs, |t| traced(op, mode, t));
            let got: Vec<f64> = if d == DType::F32 {
                out.to_vec::<f32>()
                    .unwrap()
                    .iter()
                    .map(|&x| x as f64)
                    .collect()
            } else {
                out.to_vec::<f64>().unwrap()
            };
            for i in 0..n {
                let a: Vec<f64> = inputs.iter().map(|c| c[i]).collect();
                let want = reference(op, mode, f, &a);
                assert!(
                    same(got[i], want),
                    "{op:?}_{mode:?} on {d} of {a:?}: got {:e} ({:#x}), want {want:e} ({:#x})",
                    got[i],
                    got[i].to_bits(),
                    want.to_bits()
                );
            }
        }
    }
}

#[test]
fn directed_f32_matches_the_integer_reference() {
    check_all(DType::F32, F32, 21);
}

#[test]
fn directed_f64_matches_the_integer_reference() {
    check_all(DType::F64, F64, 22);
}

/// Round to nearest is the native IEEE operation, and the directed results bracket it.
#[test]
fn rn_is_native_and_the_directions_bracket_it() {
    let (a, b) = (1.0f32, 3.0f32);
    let t = |f: fn(Tile, Tile) -> Tile| {
        eval(&[buf(&[a]), buf(&[b])], |x| f(x[0], x[1]))
            .to_vec::<f32>()
            .unwrap()[0]
    };
    assert_eq!(t(|x, y| div_rn(x, y)), a / b);
    let (dn, up, z) = (
        t(|x, y| div_rd(x, y)),
        t(|x, y| div_ru(x, y)),
        t(|x, y| div_rz(x, y)),
    );
    assert_eq!(up, dn.next_up());
    assert_eq!(z, dn);
    assert!(dn < 1.0 / 3.0 && (1.0f64 / 3.0) < up as f64);
    // Overflow: MAX + MAX is inf up and to nearest, MAX down and toward zero.
    let m = f32::MAX;
    let o = |f: fn(Tile, Tile) -> Tile| {
        eval(&[buf(&[m]), buf(&[m])], |x| f(x[0], x[1]))
            .to_vec::<f32>()
            .unwrap()[0]
    };
    assert_eq!(o(|x, y| add_rn(x, y)), f32::INFINITY);
    assert_eq!(o(|x, y| add_ru(x, y)), f32::INFINITY);
    assert_eq!(o(|x, y| add_rd(x, y)), f32::MAX);
    assert_eq!(o(|x, y| add_rz(x, y)), f32::MAX);
    // x - x is -0 rounding down.
    assert!(o(|x, y| sub_rd(x, y)).is_sign_negative());
    assert!(o(|x, y| sub_ru(x, y)).is_sign_positive());
}

#[test]
fn directed_ops_reject_integers_and_halves_naming_the_function() {
    for (d, name) in [(DType::I32, "add_rz"), (DType::F16, "add_rz")] {
        let e = trace("k", |p| {
            let x = p.scalar("x", d);
            let _ = add_rz(x, x);
        })
        .unwrap_err();
        assert!(e.message.contains(name), "{e}");
    }
    let e = trace("k", |p| {
        let x = p.scalar("x", DType::BF16);
        let _ = sqrt_ru(x);
    })
    .unwrap_err();
    assert!(e.message.contains("sqrt_ru"), "{e}");
}

/// The libdevice conversion of `mode` from `from` to `to` (as the names pair them).
fn converted(from: DType, to: DType, mode: Mode, x: Tile) -> Tile {
    use DType::*;
    use Mode::*;
    match (from, to, mode) {
        (F64, F32, Rn) => double2float_rn(x),
        (F64, F32, Rz) => double2float_rz(x),
        (F64, F32, Rd) => double2float_rd(x),
        (F64, F32, Ru) => double2float_ru(x),
        (I32, F32, Rn) => int2float_rn(x),
        (I32, F32, Rz) => int2float_rz(x),
        (I32, F32, Rd) => int2float_rd(x),
        (I32, F32, Ru) => int2float_ru(x),
        (U32, F32, Rn) => uint2float_rn(x),
        (U32, F32, Rz) => uint2float_rz(x),
        (U32, F32, Rd) => uint2float_rd(x),
        (U32, F32, Ru) => uint2float_ru(x),
        (I64, F32, Rn) => ll2float_rn(x),
        (I64, F32, Rz) => ll2float_rz(x),
        (I64, F32, Rd) => ll2float_rd(x),
        (I64, F32, Ru) => ll2float_ru(x),
        (U64, F32, Rn) => ull2float_rn(x),
        (U64, F32, Rz) => ull2float_rz(x),
        (U64, F32, Rd) => ull2float_rd(x),
        (U64, F32, Ru) => ull2float_ru(x),
        (I64, F64, Rn) => ll2double_rn(x),
        (I64, F64, Rz) => ll2double_rz(x),
        (I64, F64, Rd) => ll2double_rd(x),
        (I64, F64, Ru) => ll2double_ru(x),
        (U64, F64, Rn) => ull2double_rn(x),
        (U64, F64, Rz) => ull2double_rz(x),
        (U64, F64, Rd) => ull2double_rd(x),
        (U64, F64, Ru) => ull2double_ru(x),
        (I32, F64, Rn) => int2double_rn(x),
        (U32, F64, Rn) => uint2double_rn(x),
        (F32, I32, Rn) => float2int_rn(x),
        (F32, I32, Rz) => float2int_rz(x),
        (F32, I32, Rd) => float2int_rd(x),
        (F32, I32, Ru) => float2int_ru(x),
        (F32, U32, Rn) => float2uint_rn(x),
        (F32, U32, Rz) => float2uint_rz(x),
        (F32, U32, Rd) => float2uint_rd(x),
        (F32, U32, Ru) => float2uint_ru(x),
        (F32, I64, Rn) => float2ll_rn(x),
        (F32, I64, Rz) => float2ll_rz(x),
        (F32, I64, Rd) => float2ll_rd(x),
        (F32, I64, Ru) => float2ll_ru(x),
        (F32, U64, Rn) => float2ull_rn(x),
        (F32, U64, Rz) => float2ull_rz(x),
        (F32, U64, Rd) => float2ull_rd(x),
        (F32, U64, Ru) => float2ull_ru(x),
        (F64, I32, Rn) => double2int_rn(x),
        (F64, I32, Rz) => double2int_rz(x),
        (F64, I32, Rd) => double2int_rd(x),
        (F64, I32, Ru) => double2int_ru(x),
        (F64, U32, Rn) => double2uint_rn(x),
        (F64, U32, Rz) => double2uint_rz(x),
        (F64, U32, Rd) => double2uint_rd(x),
        (F64, U32, Ru) => double2uint_ru(x),
        (F64, I64, Rn) => double2ll_rn(x),
        (F64, I64, Rz) => double2ll_rz(x),
        (F64, I64, Rd) => double2ll_rd(x),
        (F64, I64, Ru) => double2ll_ru(x),
        (F64, U64, Rn) => double2ull_rn(x),
        (F64, U64, Rz) => double2ull_rz(x),
        (F64, U64, Rd) => double2ull_rd(x),
        (F64, U64, Ru) => double2ull_ru(x),
        c => panic!("no libdevice conversion {c:?}"),
    }
}

const MODES: [Mode; 4] = [Mode::Rn, Mode::Rz, Mode::Rd, Mode::Ru];

/// Integers of every magnitude for a dtype of `bits` bits (`signed` or not): extremes, small
/// values, random ones of every bit length (so that f32 and f64 must round them), and ties.
fn integers(r: &mut Rng, bits: u32, signed: bool, n: usize) -> Vec<i128> {
    let (lo, hi) = if signed {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    };
    let mut v = vec![
        lo,
        hi,
        0,
        1,
        -1,
        lo + 1,
        hi - 1,
        1 << 24,
        (1 << 24) + 1,
        (1 << 53) + 1,
    ];
    for i in 0..n {
        let len = 1 + (r.next_u64() % bits as u64) as u32;
        let mut x = (r.next_u64() as i128) & ((1i128 << len) - 1) | (1i128 << (len - 1));
        // Every fourth: a tie at f32's precision (bit 24 below the top set, nothing below).
        if i % 4 == 0 && len > 25 {
            x = (x >> (len - 25) | 1) << (len - 25);
        }
        if signed && r.next_u64() & 1 == 1 {
            x = -x;
        }
        v.push(x);
    }
    v.into_iter().filter(|&x| (lo..=hi).contains(&x)).collect()
}

/// An integer `v` rounded to `f` in `mode` by the reference above.
fn int_reference(v: i128, mode: Mode, f: Fmt) -> f64 {
    if v == 0 {
        return 0.0;
    }
    round((v < 0, v.unsigned_abs(), 0), mode, f)
}

/// A float rounded to an integer in `mode`, saturated to `[lo, hi]`, NaN to 0 (libdevice).
fn float_to_int_reference(x: f64, mode: Mode, lo: i128, hi: i128) -> i128 {
    if x.is_nan() {
        return 0;
    }
    let r = match mode {
        Mode::Rn => x.round_ties_even(),
        Mode::Rz => x.trunc(),
        Mode::Rd => x.floor(),
        Mode::Ru => x.ceil(),
    };
    if r <= lo as f64 {
        lo
    } else if r >= hi as f64 {
        hi
    } else {
        r as i128
    }
}

/// `to_vec` of an integer buffer of dtype `d`, as i128 values.
fn ints_of(b: &Buffer, d: DType) -> Vec<i128> {
    match d {
        DType::I32 => b
            .to_vec::<i32>()
            .unwrap()
            .iter()
            .map(|&x| x as i128)
            .collect(),
        DType::U32 => b
            .to_vec::<u32>()
            .unwrap()
            .iter()
            .map(|&x| x as i128)
            .collect(),
        DType::I64 => b
            .to_vec::<i64>()
            .unwrap()
            .iter()
            .map(|&x| x as i128)
            .collect(),
        _ => b
            .to_vec::<u64>()
            .unwrap()
            .iter()
            .map(|&x| x as i128)
            .collect(),
    }
}

fn int_buffer(d: DType, v: &[i128]) -> Arc<Buffer> {
    match d {
        DType::I32 => buf(&v.iter().map(|&x| x as i32).collect::<Vec<_>>()),
        DType::U32 => buf(&v.iter().map(|&x| x as u32).collect::<Vec<_>>()),
        DType::I64 => buf(&v.iter().map(|&x| x as i64).collect::<Vec<_>>()),
        _ => buf(&v.iter().map(|&x| x as u64).collect::<Vec<_>>()),
    }
}

fn floats_of(b: &Buffer, d: DType) -> Vec<f64> {
    if d == DType::F32 {
        b.to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|&x| x as f64)
            .collect()
    } else {
        b.to_vec::<f64>().unwrap()
    }
}

/// libdevice's conversions into floats (`double2float_*`, `int2float_*`, .., `ull2double_*`)
/// against the integer reference: the exact value rounded once in the direction, overflow
/// by direction, subnormals kept.
#[test]
fn conversions_to_floats_match_the_integer_reference() {
    let mut r = Rng::new(24);
    // f64 -> f32: every class of f64, and f64s near f32's subnormals, its overflow threshold
    // and its ties.
    let mut xs = operands(F64, &mut r, 3000)[0].clone();
    for _ in 0..3000 {
        let f = f32::from_bits(r.next_u64() as u32) as f64;
        let ulp = pow2(-24)
            * if f.is_finite() {
                f.abs().max(pow2(-126))
            } else {
                1.0
            };
        let k = (r.next_u64() % 5) as f64 - 2.0;
        xs.push(f + k * ulp / 2.0);
    }
    xs.extend([
        f32::MAX as f64 * (1.0 + pow2(-25)),
        pow2(-150),
        -pow2(-150),
        pow2(-149) * 1.5,
    ]);
    for mode in MODES {
        let out = eval(&[buf(&xs)], |t| {
            converted(DType::F64, DType::F32, mode, t[0])
        });
        for (&x, got) in xs.iter().zip(floats_of(&out, DType::F32)) {
            let want = if !x.is_finite() || x == 0.0 {
                x as f32 as f64
            } else {
                round(dec(x), mode, F32)
            };
            assert!(
                same(got, want),
                "double2float_{mode:?}({x:e}): got {got:e}, want {want:e}"
            );
        }
    }
    let cases = [
        (DType::I32, 32, true, DType::F32, F32),
        (DType::U32, 32, false, DType::F32, F32),
        (DType::I64, 64, true, DType::F32, F32),
        (DType::U64, 64, false, DType::F32, F32),
        (DType::I64, 64, true, DType::F64, F64),
        (DType::U64, 64, false, DType::F64, F64),
        (DType::I32, 32, true, DType::F64, F64),
        (DType::U32, 32, false, DType::F64, F64),
    ];
    for (from, bits, signed, to, f) in cases {
        let vs = integers(&mut r, bits, signed, 3000);
        // int2double and uint2double exist only to nearest (they are exact).
        let modes: &[Mode] = if to == DType::F64 && bits == 32 {
            &[Mode::Rn]
        } else {
            &MODES
        };
        for &mode in modes {
            let out = eval(&[int_buffer(from, &vs)], |t| {
                converted(from, to, mode, t[0])
            });
            for (&v, got) in vs.iter().zip(floats_of(&out, to)) {
                let want = int_reference(v, mode, f);
                assert!(
                    same(got, want),
                    "{from} {v} to {to} {mode:?}: got {got:e}, want {want:e}"
                );
            }
        }
    }
}

/// libdevice's conversions into integers (`float2int_*`, .., `double2ull_*`, `llrint`,
/// `llround`): rounded in the direction, saturated, NaN to 0.
#[test]
fn conversions_to_integers_round_then_saturate() {
    let mut r = Rng::new(25);
    let mut xs = operands(F64, &mut r, 2000)[0].clone();
    for _ in 0..4000 {
        // Halves and near-halves, small and near every integer dtype's limits.
        let scale = pow2((r.next_u64() % 70) as i32 - 4);
        let x = (r.next_u64() % 64) as f64 / 4.0 * scale;
        xs.push(if r.next_u64() & 1 == 1 { -x } else { x });
    }
    xs.extend([
        2147483647.5,
        -2147483648.5,
        4294967295.5,
        9.3e18,
        -9.3e18,
        1.9e19,
        -0.5,
        -0.0,
    ]);
    let targets = [
        (DType::I32, -(1i128 << 31), (1i128 << 31) - 1),
        (DType::U32, 0, (1i128 << 32) - 1),
        (DType::I64, -(1i128 << 63), (1i128 << 63) - 1),
        (DType::U64, 0, (1i128 << 64) - 1),
    ];
    for from in [DType::F32, DType::F64] {
        let xs: Vec<f64> = if from == DType::F32 {
            xs.iter().map(|&x| x as f32 as f64).collect()
        } else {
            xs.clone()
        };
        let input = if from == DType::F32 {
            buf(&xs.iter().map(|&x| x as f32).collect::<Vec<_>>())
        } else {
            buf(&xs)
        };
        for (to, lo, hi) in targets {
            for mode in MODES {
                let out = eval(std::slice::from_ref(&input), |t| {
                    converted(from, to, mode, t[0])
                });
                for (&x, got) in xs.iter().zip(ints_of(&out, to)) {
                    let want = float_to_int_reference(x, mode, lo, hi);
                    assert_eq!(got, want, "{from} {x:e} to {to} {mode:?}");
                }
            }
        }
        let lo = -(1i128 << 63);
        let hi = (1i128 << 63) - 1;
        let rint = eval(std::slice::from_ref(&input), |t| llrint(t[0]));
        let round = eval(std::slice::from_ref(&input), |t| llround(t[0]));
        for ((&x, a), b) in xs
            .iter()
            .zip(ints_of(&rint, DType::I64))
            .zip(ints_of(&round, DType::I64))
        {
            assert_eq!(
                a,
                float_to_int_reference(x, Mode::Rn, lo, hi),
                "llrint({x:e})"
            );
            let want = if x.is_nan() {
                0
            } else {
                (x.round().clamp(lo as f64, hi as f64)) as i128
            };
            assert_eq!(b, want.clamp(lo, hi), "llround({x:e})");
        }
    }
}

/// `double2hiint`, `double2loint` and `hiloint2double` split and rebuild the bit pattern.
#[test]
fn double_words_split_and_rebuild() {
    let mut r = Rng::new(26);
    let xs: Vec<f64> = (0..500).map(|_| f64::from_bits(r.next_u64())).collect();
    let b = buf(&xs);
    let hi = eval(std::slice::from_ref(&b), |t| double2hiint(t[0]))
        .to_vec::<i32>()
        .unwrap();
    let lo = eval(std::slice::from_ref(&b), |t| double2loint(t[0]))
        .to_vec::<i32>()
        .unwrap();
    for ((&x, &h), &l) in xs.iter().zip(&hi).zip(&lo) {
        assert_eq!(h as u32, (x.to_bits() >> 32) as u32, "{x:e}");
        assert_eq!(l as u32, x.to_bits() as u32, "{x:e}");
    }
    let back = eval(&[buf(&hi), buf(&lo)], |t| hiloint2double(t[0], t[1]));
    for (&x, y) in xs.iter().zip(back.to_vec::<f64>().unwrap()) {
        assert_eq!(x.to_bits(), y.to_bits());
    }
}

#[test]
fn conversions_reject_the_wrong_source_dtype_naming_the_function() {
    for (d, name, f) in [
        (DType::F64, "float2int_rn", float2int_rn as fn(Tile) -> Tile),
        (DType::F32, "double2float_rz", double2float_rz),
        (DType::I64, "int2float_rd", int2float_rd),
        (DType::I32, "double2hiint", double2hiint),
    ] {
        let e = trace("k", |p| {
            let x = p.scalar("x", d);
            let _ = f(x);
        })
        .unwrap_err();
        assert!(e.message.contains(name), "{e}");
    }
}
