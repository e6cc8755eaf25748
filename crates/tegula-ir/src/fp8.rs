//! The two 8-bit float formats of Hopper's tensor cores, as host element types: [`f8e4m3`]
//! (Triton's `float8e4nv`, OCP's E4M3FN: 4 exponent bits, 3 mantissa bits, bias 7, no
//! infinities, largest finite 448) and [`f8e5m2`] (Triton's `float8e5`: 5 and 2, bias 15,
//! IEEE 754-style infinities, largest finite 57344). Both have subnormals.
//!
//! Conversions into them round to nearest, ties to even, and saturate: a value beyond the
//! largest finite one (an infinity included) becomes the largest finite value of its sign, a
//! NaN becomes the canonical NaN `0x7f`, as PTX's `cvt.rn.satfinite.e4m3x2.f32` and
//! `.e5m2x2` do (and Triton's conversions on NVIDIA GPUs). Conversions out of them are exact.

use std::fmt;

/// A format's parameters: mantissa bits, exponent bias, and the largest finite value.
struct Format {
    mantissa: u32,
    bias: i32,
    max: f64,
    /// Whether the all-ones exponent holds infinities and NaNs (e5m2) or ordinary values and,
    /// with an all-ones mantissa, the NaN (e4m3).
    ieee_specials: bool,
}

const E4M3: Format = Format {
    mantissa: 3,
    bias: 7,
    max: 448.0,
    ieee_specials: false,
};

const E5M2: Format = Format {
    mantissa: 2,
    bias: 15,
    max: 57344.0,
    ieee_specials: true,
};

const NAN_BITS: u8 = 0x7f;

impl Format {
    fn decode(&self, bits: u8) -> f64 {
        let sign = if bits & 0x80 != 0 { -1.0 } else { 1.0 };
        let exp_bits = 7 - self.mantissa;
        let e = ((bits >> self.mantissa) & ((1 << exp_bits) - 1)) as i32;
        let m = (bits & ((1 << self.mantissa) - 1)) as i32;
        let top = (1 << exp_bits) - 1;
        if self.ieee_specials && e == top {
            return if m == 0 {
                sign * f64::INFINITY
            } else {
                f64::NAN
            };
        }
        if !self.ieee_specials && e == top && m == (1 << self.mantissa) - 1 {
            return f64::NAN;
        }
        let scale = |k: i32| 2f64.powi(k);
        if e == 0 {
            sign * m as f64 * scale(1 - self.bias - self.mantissa as i32)
        } else {
            sign * (1.0 + m as f64 * scale(-(self.mantissa as i32))) * scale(e - self.bias)
        }
    }

    /// `x` rounded to nearest even, saturated to the largest finite value, NaN to `0x7f`.
    fn encode(&self, x: f64) -> u8 {
        if x.is_nan() {
            return NAN_BITS;
        }
        let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
        let a = x.abs();
        let emin = 1 - self.bias;
        // The exponent of `a` (at least the smallest normal one's): f64's own field, which is
        // exact for every normal f64; f64 subnormals are far below `emin`.
        let field = ((a.to_bits() >> 52) & 0x7ff) as i32;
        let e = (field - 1023).max(emin);
        let quantum = 2f64.powi(e - self.mantissa as i32);
        // Scaling by a power of two is exact, and so is the rounded quotient times it.
        let r = if a.is_infinite() {
            f64::INFINITY
        } else {
            (a / quantum).round_ties_even() * quantum
        };
        if r > self.max {
            return sign | self.encode(self.max);
        }
        if r < 2f64.powi(emin) {
            // Subnormal (or zero): the mantissa counts quanta of the smallest exponent.
            return sign | (r / 2f64.powi(emin - self.mantissa as i32)) as u8;
        }
        let re = ((r.to_bits() >> 52) & 0x7ff) as i32 - 1023;
        let m = ((r / 2f64.powi(re) - 1.0) * (1 << self.mantissa) as f64) as u8;
        sign | ((re + self.bias) as u8) << self.mantissa | m
    }
}

macro_rules! fp8_type {
    ($(#[$m:meta])* $name:ident, $format:ident) => {
        $(#[$m])*
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
        pub struct $name(u8);

        impl $name {
            /// The largest finite value.
            pub const MAX: f64 = $format.max;

            /// The value whose bit pattern is `bits`.
            pub const fn from_bits(bits: u8) -> Self {
                $name(bits)
            }

            /// The bit pattern.
            pub const fn to_bits(self) -> u8 {
                self.0
            }

            /// `x` rounded to nearest even and saturated (see the module docs).
            pub fn from_f64(x: f64) -> Self {
                $name($format.encode(x))
            }

            /// `x` rounded to nearest even and saturated; f32 values are exact in f64, so
            /// this rounds once.
            pub fn from_f32(x: f32) -> Self {
                Self::from_f64(x as f64)
            }

            /// The value, exactly.
            pub fn to_f64(self) -> f64 {
                $format.decode(self.0)
            }

            /// The value, exactly (every value of the format is an f32).
            pub fn to_f32(self) -> f32 {
                self.to_f64() as f32
            }

            pub fn is_nan(self) -> bool {
                self.to_f64().is_nan()
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.to_f64(), f)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.to_f64(), f)
            }
        }
    };
}

fp8_type!(
    /// An 8-bit float with 4 exponent and 3 mantissa bits (E4M3FN: no infinities, NaN at
    /// `0x7f` and `0xff`, largest finite 448, smallest subnormal 2^-9).
    f8e4m3,
    E4M3
);

fp8_type!(
    /// An 8-bit float with 5 exponent and 2 mantissa bits (E5M2: infinities at `0x7c` and
    /// `0xfc`, NaNs above them, largest finite 57344, smallest subnormal 2^-16). Its bits are
    /// the high byte of the f16 of the same value.
    f8e5m2,
    E5M2
);

/// `x` rounded into an fp8 dtype's format (nearest even, saturated), as f64.
pub fn round_fp8(e5m2: bool, x: f64) -> f64 {
    if e5m2 {
        E5M2.decode(E5M2.encode(x))
    } else {
        E4M3.decode(E4M3.encode(x))
    }
}

/// The bit pattern of `x` rounded into an fp8 format.
pub fn fp8_bits(e5m2: bool, x: f64) -> u8 {
    if e5m2 {
        E5M2.encode(x)
    } else {
        E4M3.encode(x)
    }
}

/// The value of an fp8 bit pattern.
pub fn fp8_value(e5m2: bool, bits: u8) -> f64 {
    if e5m2 {
        E5M2.decode(bits)
    } else {
        E4M3.decode(bits)
    }
}
