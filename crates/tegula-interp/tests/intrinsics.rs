//! libdevice's integer intrinsics (`clz`, `popc`, `brev`, `ffs`, `byte_perm`, `mulhi`,
//! `mul24`, `umul24`, `sad`, `usad`, `hadd`, `rhadd`, `uhadd`, `urhadd`) on the interpreter
//! against plain-Rust references written here from their definitions (loops over bits, wide
//! integer arithmetic), on every integer dtype each covers: edge bit patterns (0, 1, all ones,
//! the signed extremes, every power of two and its neighbours, the 24-bit edges) in every pair,
//! and random patterns.

mod common;
use common::*;
use std::sync::Arc;
use tegula_interp::Buffer;
use tegula_ir::prelude::*;

const INTS: [DType; 4] = [DType::I32, DType::U32, DType::I64, DType::U64];

fn mask(bits: u32) -> u64 {
    if bits == 64 {
        u64::MAX
    } else {
        (1 << bits) - 1
    }
}

/// The value of the `bits`-wide pattern `x` as the dtype reads it.
fn value(d: DType, x: u64) -> i128 {
    let b = d.bits();
    let x = x & mask(b);
    if d.is_signed_int() && x >> (b - 1) & 1 == 1 {
        x as i128 - (1i128 << b)
    } else {
        x as i128
    }
}

/// Edge patterns of a width: 0, 1, all ones, the signed extremes, each power of two, one less
/// and its complement, alternating bits, and the 24-bit edges of `mul24`.
fn edges(bits: u32) -> Vec<u64> {
    let m = mask(bits);
    let mut v = vec![
        0,
        1,
        2,
        3,
        m,
        m - 1,
        m >> 1,
        1 << (bits - 1),
        (1 << (bits - 1)) + 1,
    ];
    v.extend([0x5555_5555_5555_5555 & m, 0xaaaa_aaaa_aaaa_aaaa & m]);
    v.extend([
        0xff_ffff,
        0x80_0000,
        0x7f_ffff,
        0xff80_0000 & m,
        0x1ff_ffff,
        0x100_0000,
    ]);
    for k in 0..bits {
        v.extend([1 << k, (1u64 << k) - 1, !(1u64 << k) & m]);
    }
    v.sort();
    v.dedup();
    v
}

fn random(bits: u32, r: &mut Rng, n: usize) -> Vec<u64> {
    (0..n)
        .map(|i| {
            let x = r.next_u64();
            // A third sparse (few set bits), a third dense, a third uniform.
            match i % 3 {
                0 => x & r.next_u64() & r.next_u64(),
                1 => x | r.next_u64() | r.next_u64(),
                _ => x,
            }
        })
        .map(|x| x & mask(bits))
        .collect()
}

fn buffer(d: DType, bits: &[u64]) -> Arc<Buffer> {
    let b = Buffer::zeroed(d, bits.len());
    for (i, &x) in bits.iter().enumerate() {
        b.write_bits(i, x);
    }
    Arc::new(b)
}

fn bits(b: &Buffer) -> Vec<u64> {
    (0..b.len()).map(|i| b.read_bits(i)).collect()
}

/// Runs `f` over the operands (each a column of patterns of dtype `d`) and checks each
/// element's bits, masked to the result's width, against `want`.
fn check(
    what: &str,
    d: DType,
    cols: &[Vec<u64>],
    f: impl FnOnce(&[Tile]) -> Tile,
    want: impl Fn(&[u64]) -> u64,
) {
    let bufs: Vec<Arc<Buffer>> = cols.iter().map(|c| buffer(d, c)).collect();
    let out = eval(&bufs, f);
    let m = mask(out.dtype().bits());
    for (i, got) in bits(&out).into_iter().enumerate() {
        let args: Vec<u64> = cols.iter().map(|c| c[i]).collect();
        let w = want(&args) & m;
        assert_eq!(
            got & m,
            w,
            "{what} on {d} of {args:#x?}: got {:#x}, want {w:#x}",
            got & m
        );
    }
}

/// Every pair of edge patterns, then random pairs.
fn pairs(bits: u32, r: &mut Rng) -> Vec<Vec<u64>> {
    let e = edges(bits);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for &x in &e {
        for &y in &e {
            a.push(x);
            b.push(y);
        }
    }
    a.extend(random(bits, r, 3000));
    b.extend(random(bits, r, 3000));
    vec![a, b]
}

fn singles(bits: u32, r: &mut Rng) -> Vec<Vec<u64>> {
    let mut a = edges(bits);
    a.extend(random(bits, r, 3000));
    vec![a]
}

#[test]
fn clz_popc_brev_ffs_match_bit_loops() {
    let mut r = Rng::new(11);
    for d in INTS {
        let b = d.bits();
        let cols = singles(b, &mut r);
        let bit = |x: u64, k: u32| x >> k & 1;
        check(
            "clz",
            d,
            &cols,
            |t| clz(t[0]),
            |a| (0..b).rev().take_while(|&k| bit(a[0], k) == 0).count() as u64,
        );
        check(
            "popc",
            d,
            &cols,
            |t| popc(t[0]),
            |a| (0..b).map(|k| bit(a[0], k)).sum(),
        );
        check(
            "brev",
            d,
            &cols,
            |t| brev(t[0]),
            |a| (0..b).fold(0, |acc, k| acc | bit(a[0], k) << (b - 1 - k)),
        );
        check(
            "ffs",
            d,
            &cols,
            |t| ffs(t[0]),
            |a| {
                (0..b)
                    .find(|&k| bit(a[0], k) == 1)
                    .map_or(0, |k| k as u64 + 1)
            },
        );
    }
    // The results are i32 tiles (brev keeps the dtype).
    let e = trace("k", |p| {
        let x = p.scalar("x", DType::U64);
        assert_eq!(clz(x).dtype(), DType::I32);
        assert_eq!(popc(x).dtype(), DType::I32);
        assert_eq!(ffs(x).dtype(), DType::I32);
        assert_eq!(brev(x).dtype(), DType::U64);
    });
    assert!(e.is_ok());
}

#[test]
fn mulhi_is_the_high_half_of_the_full_product() {
    let mut r = Rng::new(12);
    for d in INTS {
        let b = d.bits();
        let cols = pairs(b, &mut r);
        // The signed product fits i128; the unsigned 64-bit one needs u128.
        check(
            "mulhi",
            d,
            &cols,
            |t| mulhi(t[0], t[1]),
            |a| {
                if d.is_signed_int() {
                    ((value(d, a[0]) * value(d, a[1])) >> b) as u64
                } else {
                    ((a[0] as u128 * a[1] as u128) >> b) as u64
                }
            },
        );
        // umulhi reads the bits as unsigned whatever the dtype.
        check(
            "umulhi",
            d,
            &cols,
            |t| umulhi(t[0], t[1]),
            |a| ((a[0] as u128 * a[1] as u128) >> b) as u64,
        );
    }
}

#[test]
fn mul24_multiplies_the_low_24_bits() {
    let mut r = Rng::new(13);
    for d in [DType::I32, DType::U32] {
        let cols = pairs(32, &mut r);
        let low24 = |x: u64, signed: bool| -> i128 {
            let l = (x & 0xff_ffff) as i128;
            if signed && l >= 1 << 23 {
                l - (1 << 24)
            } else {
                l
            }
        };
        let s = d == DType::I32;
        check(
            "mul24",
            d,
            &cols,
            |t| mul24(t[0], t[1]),
            |a| (low24(a[0], s) * low24(a[1], s)) as u64,
        );
        check(
            "umul24",
            d,
            &cols,
            |t| umul24(t[0], t[1]),
            |a| (low24(a[0], false) * low24(a[1], false)) as u64,
        );
    }
}

#[test]
fn halving_adds_floor_and_ceil_the_exact_mean() {
    let mut r = Rng::new(14);
    for d in INTS {
        let b = d.bits();
        let cols = pairs(b, &mut r);
        let u = |x: u64| x as i128;
        // The exact sum in i128, halved with floor (>> on i128) or ceil.
        check(
            "hadd",
            d,
            &cols,
            |t| hadd(t[0], t[1]),
            |a| ((value(d, a[0]) + value(d, a[1])) >> 1) as u64,
        );
        check(
            "rhadd",
            d,
            &cols,
            |t| rhadd(t[0], t[1]),
            |a| ((value(d, a[0]) + value(d, a[1]) + 1) >> 1) as u64,
        );
        check(
            "uhadd",
            d,
            &cols,
            |t| uhadd(t[0], t[1]),
            |a| ((u(a[0]) + u(a[1])) >> 1) as u64,
        );
        check(
            "urhadd",
            d,
            &cols,
            |t| urhadd(t[0], t[1]),
            |a| ((u(a[0]) + u(a[1]) + 1) >> 1) as u64,
        );
    }
}

#[test]
fn sad_adds_the_exact_absolute_difference() {
    let mut r = Rng::new(15);
    for d in INTS {
        let b = d.bits();
        let mut cols = pairs(b, &mut r);
        let n = cols[0].len();
        let mut z = random(b, &mut r, n);
        // Small addends too, where the sum does not wrap.
        for (i, x) in z.iter_mut().enumerate() {
            if i % 2 == 0 {
                *x &= 0xff;
            }
        }
        cols.push(z);
        check(
            "sad",
            d,
            &cols,
            |t| sad(t[0], t[1], t[2]),
            |a| ((value(d, a[0]) - value(d, a[1])).unsigned_abs() + a[2] as u128) as u64,
        );
        check(
            "usad",
            d,
            &cols,
            |t| usad(t[0], t[1], t[2]),
            |a| ((a[0] as i128 - a[1] as i128).unsigned_abs() + a[2] as u128) as u64,
        );
    }
}

/// libdevice's `sad(int, int, unsigned)`: the comparison is signed, `z` unsigned, the result
/// in the dtype of `x` and `y`.
#[test]
fn sad_compares_by_the_dtype_of_x_and_y() {
    let x = [-5i32, 3, i32::MIN, 7];
    let y = [3i32, -5, i32::MAX, 7];
    let z = [1u32, 0xffff_ffff, 2, 9];
    let out = eval(&[buf(&x), buf(&y), buf(&z)], |t| {
        let r = sad(t[0], t[1], t[2]);
        assert_eq!(r.dtype(), DType::I32);
        r
    });
    let want: Vec<i32> = (0..4)
        .map(|i| {
            (x[i] as i64 - y[i] as i64)
                .unsigned_abs()
                .wrapping_add(z[i] as u64) as i32
        })
        .collect();
    assert_eq!(out.to_vec::<i32>().unwrap(), want);
    // usad reads x and y as unsigned: |0xfffffffb - 3| + 1.
    let out = eval(&[buf(&x), buf(&y), buf(&z)], |t| usad(t[0], t[1], t[2]));
    assert_eq!(
        out.to_vec::<i32>().unwrap()[0],
        (0xffff_fffbu32 - 3 + 1) as i32
    );
}

#[test]
fn byte_perm_follows_prmt_at_every_selector() {
    let mut r = Rng::new(16);
    // Every value of the selector's low 16 bits, with random upper bits (not read).
    let n = 1 << 16;
    let x = random(32, &mut r, n);
    let y = random(32, &mut r, n);
    let s: Vec<u64> = (0..n as u64)
        .map(|i| i | (r.next_u64() & 0xffff_0000))
        .collect();
    let want = |a: &[u64]| {
        let byte = |k: u64| {
            if k < 4 {
                a[0] >> (8 * k) & 0xff
            } else {
                a[1] >> (8 * (k - 4)) & 0xff
            }
        };
        (0..4).fold(0u64, |acc, n| {
            let sel = a[2] >> (4 * n) & 0xf;
            let v = byte(sel % 8);
            let v = if sel >= 8 { (v >> 7) * 0xff } else { v };
            acc | v << (8 * n)
        })
    };
    for d in [DType::I32, DType::U32] {
        let cols = vec![x.clone(), y.clone(), s.clone()];
        check("byte_perm", d, &cols, |t| byte_perm(t[0], t[1], t[2]), want);
    }
    // The classic uses: a byte swap and picking bytes of the second word.
    let out = eval(&[buf(&[0x1122_3344u32]), buf(&[0xaabb_ccddu32])], |t| {
        byte_perm(t[0], t[1], 0x0123)
    });
    assert_eq!(out.to_vec::<u32>().unwrap(), [0x4433_2211]);
    let out = eval(&[buf(&[0x1122_3344u32]), buf(&[0xaabb_ccddu32])], |t| {
        byte_perm(t[0], t[1], 0x7654)
    });
    assert_eq!(out.to_vec::<u32>().unwrap(), [0xaabb_ccdd]);
}

#[test]
fn intrinsics_reject_floats_and_other_widths_naming_the_function() {
    let err = |f: fn(Tile) -> Tile, d: DType| {
        trace("k", |p| {
            let x = p.scalar("x", d);
            let _ = f(x);
        })
        .unwrap_err()
    };
    type Case = (&'static str, fn(Tile) -> Tile, DType);
    let cases: [Case; 12] = [
        ("clz", |x| clz(x), DType::F32),
        ("popc", |x| popc(x), DType::F64),
        ("brev", |x| brev(x), DType::I16),
        ("ffs", |x| ffs(x), DType::F32),
        ("clz", |x| clz(x), DType::I8),
        ("mulhi", |x| mulhi(x, x), DType::F32),
        ("mul24", |x| mul24(x, x), DType::I64),
        ("umul24", |x| umul24(x, x), DType::F32),
        ("hadd", |x| hadd(x, 1), DType::F32),
        ("urhadd", |x| urhadd(x, x), DType::I16),
        ("sad", |x| sad(x, x, x), DType::F32),
        ("byte_perm", |x| byte_perm(x, x, 0x3210), DType::U64),
    ];
    for (name, f, d) in cases {
        let e = err(f, d);
        assert!(e.message.contains(name), "{name} on {d}: {e}");
        assert!(e.loc.file.ends_with("intrinsics.rs"), "{name}: {e}");
    }
}
