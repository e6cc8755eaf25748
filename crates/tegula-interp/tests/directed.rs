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
