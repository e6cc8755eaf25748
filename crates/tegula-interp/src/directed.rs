//! IEEE 754 arithmetic rounded in a chosen direction (`add_rz`, `div_ru`, `fma_rd`, ..), exact
//! on f32 and f64: the result is found among the target dtype's values next to the native
//! (round-to-nearest) result by comparing each candidate `x` with the exact value `v` of the
//! operation: `x - v` (or `x b - a` for a quotient, `x^2 - a` for a square root) is a sum of
//! products of two floats, evaluated exactly as a fixed-width integer of 4352 bits, which holds
//! every such product of two f64s, subnormals included, at one scale.

use std::cmp::Ordering;
use tegula_ir::{DType, RoundedOp, Rounding};

const LIMBS: usize = 68;
/// The exponent of bit 0: below the smallest product of two f64 subnormals, 2^-2148.
const BASE: i32 = -2176;

/// A finite float as `(negative, m, e)` with the value `+-m 2^e`.
fn parts(x: f64) -> (bool, u64, i32) {
    let b = x.to_bits();
    let exp = ((b >> 52) & 0x7ff) as i32;
    let frac = b & ((1 << 52) - 1);
    let (m, e) = if exp == 0 {
        (frac, -1074)
    } else {
        (frac | 1 << 52, exp - 1075)
    };
    (b >> 63 == 1, m, e)
}

/// A sum of terms `+-m 2^e` (`m` below 2^128), exact, in two's complement.
struct Sum([u64; LIMBS]);

impl Sum {
    fn new() -> Sum {
        Sum([0; LIMBS])
    }

    fn term(&mut self, neg: bool, m: u128, e: i32) {
        if m == 0 {
            return;
        }
        let shift = (e - BASE) as usize;
        let (q, r) = (shift / 64, (shift % 64) as u32);
        let (lo, hi) = (m as u64, (m >> 64) as u64);
        let w = if r == 0 {
            [lo, hi, 0]
        } else {
            [lo << r, hi << r | lo >> (64 - r), hi >> (64 - r)]
        };
        let mut t = [0u64; LIMBS];
        for (k, &x) in w.iter().enumerate() {
            t[q + k] = x;
        }
        if neg {
            let mut carry = 1u64;
            for x in t.iter_mut() {
                let (s, c) = (!*x).overflowing_add(carry);
                *x = s;
                carry = c as u64;
            }
        }
        let mut carry = false;
        for (x, y) in self.0.iter_mut().zip(t) {
            let (s1, c1) = x.overflowing_add(y);
            let (s2, c2) = s1.overflowing_add(carry as u64);
            *x = s2;
            carry = c1 || c2;
        }
    }

    /// A finite float times `2^k`.
    fn float(&mut self, neg: bool, x: f64, k: i32) {
        let (n, m, e) = parts(x);
        self.term(neg ^ n, m as u128, e + k);
    }

    /// The product of two finite floats.
    fn product(&mut self, neg: bool, x: f64, y: f64) {
        self.product_k(neg, x, y, 0);
    }

    /// The product of two finite floats times `2^k`.
    fn product_k(&mut self, neg: bool, x: f64, y: f64, k: i32) {
        let (nx, mx, ex) = parts(x);
        let (ny, my, ey) = parts(y);
        self.term(neg ^ nx ^ ny, mx as u128 * my as u128, ex + ey + k);
    }

    fn sign(&self) -> Ordering {
        if self.0[LIMBS - 1] >> 63 == 1 {
            Ordering::Less
        } else if self.0.iter().all(|&x| x == 0) {
            Ordering::Equal
        } else {
            Ordering::Greater
        }
    }
}

/// Subtracts the exact value of `add`, `sub`, `mul` or `fma` from `s` (its terms negated);
/// the other ops' values are not sums of products, and their callers compare them otherwise.
fn subtract_value(s: &mut Sum, op: RoundedOp, a: &[f64]) {
    match op {
        RoundedOp::Add | RoundedOp::Sub => {
            s.float(true, a[0], 0);
            s.float(op == RoundedOp::Add, a[1], 0);
        }
        RoundedOp::Mul => s.product(true, a[0], a[1]),
        RoundedOp::Fma => {
            s.product(true, a[0], a[1]);
            s.float(true, a[2], 0);
        }
        RoundedOp::Div | RoundedOp::Rcp | RoundedOp::Sqrt => {}
    }
}

/// The numerator and denominator of `div` (`a[0] / a[1]`) or `rcp` (`1 / a[0]`).
fn quotient(op: RoundedOp, a: &[f64]) -> (f64, f64) {
    if op == RoundedOp::Div {
        (a[0], a[1])
    } else {
        (1.0, a[0])
    }
}

/// The sign of `s` times `d`'s: a comparison with `n / d` made by multiplying through by `d`.
fn times_sign_of(s: &Sum, d: f64) -> Ordering {
    if d < 0.0 {
        s.sign().reverse()
    } else {
        s.sign()
    }
}

/// `x - v` for a finite candidate `x`, as an ordering (`x` against the exact value `v`).
fn compare(op: RoundedOp, a: &[f64], x: f64) -> Ordering {
    if x.is_infinite() {
        return if x > 0.0 {
            Ordering::Greater
        } else {
            Ordering::Less
        };
    }
    let mut s = Sum::new();
    match op {
        RoundedOp::Add | RoundedOp::Sub | RoundedOp::Mul | RoundedOp::Fma => {
            s.float(false, x, 0);
            subtract_value(&mut s, op, a);
        }
        // x - n / d has the sign of (x d - n) d.
        RoundedOp::Div | RoundedOp::Rcp => {
            let (n, d) = quotient(op, a);
            s.product(false, x, d);
            s.float(true, n, 0);
            return times_sign_of(&s, d);
        }
        // x - sqrt(a) for x >= 0 has the sign of x^2 - a.
        RoundedOp::Sqrt => {
            if x < 0.0 {
                return Ordering::Less;
            }
            s.product(false, x, x);
            s.float(true, a[0], 0);
        }
    }
    s.sign()
}

/// `(L + U) / 2 - v`, `L` and `U` neighbours of the target dtype (the infinities standing for
/// `+-2^(emax + 1)`, where IEEE 754 rounds to nearest as if the exponent range went on).
fn compare_mid(op: RoundedOp, a: &[f64], lo: f64, hi: f64, big: f64) -> Ordering {
    let fin = |x: f64| if x.is_infinite() { big.copysign(x) } else { x };
    let mut s = Sum::new();
    s.float(false, fin(lo), -1);
    s.float(false, fin(hi), -1);
    match op {
        RoundedOp::Add | RoundedOp::Sub | RoundedOp::Mul | RoundedOp::Fma => {
            subtract_value(&mut s, op, a);
            s.sign()
        }
        RoundedOp::Div | RoundedOp::Rcp => {
            let (n, d) = quotient(op, a);
            // mid - n/d has the sign of (lo d + hi d)/2 - n, times d's.
            let mut t = Sum::new();
            t.product_k(false, fin(lo), d, -1);
            t.product_k(false, fin(hi), d, -1);
            t.float(true, n, 0);
            times_sign_of(&t, d)
        }
        RoundedOp::Sqrt => {
            // mid >= 0 here; mid^2 - a, with mid = (lo + hi) / 2 exactly.
            let mut t = Sum::new();
            let (lo, hi) = (fin(lo), fin(hi));
            t.product_k(false, lo, lo, -2);
            t.product_k(false, hi, hi, -2);
            t.product_k(false, lo, hi, -1);
            t.float(true, a[0], 0);
            t.sign()
        }
    }
}

/// The native round-to-nearest result (the starting point, and the exact result where an
/// operand is not finite or the result is an IEEE special case).
fn native(op: RoundedOp, a: &[f64]) -> f64 {
    match op {
        RoundedOp::Add => a[0] + a[1],
        RoundedOp::Sub => a[0] - a[1],
        RoundedOp::Mul => a[0] * a[1],
        RoundedOp::Div => a[0] / a[1],
        RoundedOp::Fma => a[0].mul_add(a[1], a[2]),
        RoundedOp::Sqrt => a[0].sqrt(),
        RoundedOp::Rcp => 1.0 / a[0],
    }
}

/// `op(a..)` rounded in direction `mode` to `d` (f32 or f64; the operands are values of `d`).
pub(crate) fn rounded(op: RoundedOp, mode: Rounding, d: DType, a: &[f64]) -> f64 {
    let f32 = d != DType::F64;
    let to_d = |x: f64| if f32 { x as f32 as f64 } else { x };
    let up = |x: f64| {
        if f32 {
            (x as f32).next_up() as f64
        } else {
            x.next_up()
        }
    };
    let down = |x: f64| {
        if f32 {
            (x as f32).next_down() as f64
        } else {
            x.next_down()
        }
    };
    let t0 = native(op, a);
    // f32 operands' sums, products and their fma are exact in f64 but for the last rounding,
    // except where the f64 rounding hides a tie; the search below settles that.
    let special = a.iter().any(|x| !x.is_finite())
        || t0.is_nan()
        || matches!(op, RoundedOp::Div if a[1] == 0.0)
        || matches!(op, RoundedOp::Rcp if a[0] == 0.0)
        || matches!(op, RoundedOp::Sqrt if a[0] <= 0.0);
    if special {
        return to_d(t0);
    }
    let cmp = |x: f64| compare(op, a, x);
    // L: the largest value of d not above v.
    let mut lo = to_d(t0);
    while cmp(lo) == Ordering::Greater {
        lo = down(lo);
    }
    loop {
        let u = up(lo);
        if cmp(u) == Ordering::Greater {
            break;
        }
        lo = u;
    }
    let r = if cmp(lo) == Ordering::Equal {
        lo
    } else {
        let hi = up(lo);
        match mode {
            Rounding::Down => lo,
            Rounding::Up => hi,
            // v > 0 when 0 - v < 0.
            Rounding::TowardZero if cmp(0.0) == Ordering::Less => lo,
            Rounding::TowardZero => hi,
            Rounding::NearestEven => {
                // f32's 2^128 is an f64; f64's 2^1024 is not, so its overflow threshold is
                // taken directly.
                let big = 2f64.powi(128);
                let mid = if !f32 && (hi.is_infinite() || lo.is_infinite()) {
                    overflow_mid(op, a, lo, hi)
                } else {
                    compare_mid(op, a, lo, hi, big)
                };
                let even = |x: f64| {
                    x.is_infinite()
                        || if f32 {
                            (x as f32).to_bits() & 1 == 0
                        } else {
                            x.to_bits() & 1 == 0
                        }
                };
                match mid {
                    Ordering::Greater => lo,
                    Ordering::Less => hi,
                    Ordering::Equal if even(lo) => lo,
                    Ordering::Equal => hi,
                }
            }
        }
    };
    if r != 0.0 {
        return r;
    }
    // Zeros: a nonzero v keeps its sign; an exact zero of a sum is -0 rounding down, +0
    // otherwise, except a sum of zeros alone, whose signs decide (IEEE 754, 6.3).
    match cmp(0.0) {
        Ordering::Less => return 0.0,
        Ordering::Greater => return -0.0,
        Ordering::Equal => {}
    }
    let additive = matches!(op, RoundedOp::Add | RoundedOp::Sub | RoundedOp::Fma);
    if !additive {
        return to_d(t0);
    }
    let neg = |x: f64| x.is_sign_negative();
    let (zero_terms, both_neg, any_neg) = match op {
        RoundedOp::Add => (
            a[0] == 0.0 && a[1] == 0.0,
            neg(a[0]) && neg(a[1]),
            neg(a[0]) || neg(a[1]),
        ),
        RoundedOp::Sub => (
            a[0] == 0.0 && a[1] == 0.0,
            neg(a[0]) && !neg(a[1]),
            neg(a[0]) || !neg(a[1]),
        ),
        _ => {
            let p = neg(a[0]) != neg(a[1]);
            (
                (a[0] == 0.0 || a[1] == 0.0) && a[2] == 0.0,
                p && neg(a[2]),
                p || neg(a[2]),
            )
        }
    };
    let negative = match (zero_terms, mode) {
        (true, Rounding::Down) => any_neg,
        (true, _) => both_neg,
        (false, Rounding::Down) => true,
        (false, _) => false,
    };
    if negative {
        -0.0
    } else {
        0.0
    }
}

/// Round to nearest in f64 where `lo` or `hi` is infinite: IEEE 754 overflows to inf exactly
/// when `|v| >= MAX + ulp(MAX) / 2 = 2^1024 - 2^970`.
fn overflow_mid(op: RoundedOp, a: &[f64], lo: f64, hi: f64) -> Ordering {
    // The threshold t with the sign of the finite neighbour; t - v's sign.
    let fin = if lo.is_infinite() { hi } else { lo };
    let neg = fin < 0.0;
    let mut s = Sum::new();
    // 2^1024 - 2^970 = (2^54 - 1) 2^970.
    let thr = (1u128 << 54) - 1;
    match op {
        RoundedOp::Add | RoundedOp::Sub | RoundedOp::Mul | RoundedOp::Fma => {
            subtract_value(&mut s, op, a);
        }
        RoundedOp::Div | RoundedOp::Rcp => {
            let (n, d) = quotient(op, a);
            // t d - n, with t = (2^54 - 1) 2^970 and d = m 2^e.
            let (nd, md, ed) = parts(d);
            s.term(neg ^ nd, thr * md as u128, 970 + ed);
            s.float(true, n, 0);
            return times_sign_of(&s, d);
        }
        // A square root never overflows.
        RoundedOp::Sqrt => return Ordering::Greater,
    }
    s.term(neg, thr, 970);
    s.sign()
}
