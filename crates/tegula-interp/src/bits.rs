//! The integer intrinsics of libdevice on canonical elements (`i64`s holding an i32/u32/i64/
//! u64 value): exact, as the PTX instructions the GPU runs (`clz`, `popc`, `brev`, `mul.hi`,
//! `mul24.lo`, `sad`, `prmt`). The results hold the right low bits; the caller wraps them to
//! the dtype.

pub(crate) fn clz32(a: i64) -> i64 {
    (a as u32).leading_zeros() as i64
}

pub(crate) fn clz64(a: i64) -> i64 {
    (a as u64).leading_zeros() as i64
}

pub(crate) fn popc32(a: i64) -> i64 {
    (a as u32).count_ones() as i64
}

pub(crate) fn popc64(a: i64) -> i64 {
    (a as u64).count_ones() as i64
}

pub(crate) fn brev32(a: i64) -> i64 {
    (a as u32).reverse_bits() as i64
}

pub(crate) fn brev64(a: i64) -> i64 {
    (a as u64).reverse_bits() as i64
}

/// The high 32 bits of the signed 64-bit product of two i32s.
pub(crate) fn mulhi32(a: i64, b: i64) -> i64 {
    ((a as i32 as i64) * (b as i32 as i64)) >> 32
}

pub(crate) fn umulhi32(a: i64, b: i64) -> i64 {
    ((a as u32 as u64 * b as u32 as u64) >> 32) as i64
}

pub(crate) fn mulhi64(a: i64, b: i64) -> i64 {
    ((a as i128 * b as i128) >> 64) as i64
}

pub(crate) fn umulhi64(a: i64, b: i64) -> i64 {
    ((a as u64 as u128 * b as u64 as u128) >> 64) as i64
}

/// The low 32 bits of the product of the low 24 bits, those sign-extended from bit 23.
pub(crate) fn mul24(a: i64, b: i64) -> i64 {
    let s = |x: i64| ((x as i32) << 8 >> 8) as i64;
    s(a).wrapping_mul(s(b)) as i32 as i64
}

pub(crate) fn umul24(a: i64, b: i64) -> i64 {
    let u = |x: i64| x & 0xff_ffff;
    (u(a) * u(b)) as u32 as i64
}

/// `|a - b| + c` of signed canonical values, modulo 2^64 (and so modulo the dtype's width).
pub(crate) fn sad(a: i64, b: i64, c: i64) -> i64 {
    let d = if a < b {
        b.wrapping_sub(a)
    } else {
        a.wrapping_sub(b)
    };
    d.wrapping_add(c)
}

/// `|a - b| + c` of unsigned canonical values.
pub(crate) fn usad(a: i64, b: i64, c: i64) -> i64 {
    let (x, y) = (a as u64, b as u64);
    x.abs_diff(y).wrapping_add(c as u64) as i64
}

/// PTX `prmt.b32 d, a, b, s` in its default mode (CUDA's `__byte_perm(a, b, s)`).
pub(crate) fn byte_perm(a: i64, b: i64, s: i64) -> i64 {
    let src = ((b as u32 as u64) << 32) | a as u32 as u64;
    let mut r = 0u32;
    for n in 0..4 {
        let sel = (s as u32 >> (4 * n)) & 0xf;
        let byte = (src >> (8 * (sel & 7))) as u8;
        let byte = if sel & 8 != 0 {
            ((byte as i8) >> 7) as u8
        } else {
            byte
        };
        r |= (byte as u32) << (8 * n);
    }
    r as i64
}
