//! The math library (`asin` .. `cbrt`, `tan` .. `tgamma`, `rcbrt`, `normcdf`, `sinpi`,
//! `cospi`, `sincospi`, `erfcx`, `erfcinv`, `normcdfinv`, `cyl_bessel_i0`, `cyl_bessel_i1`, `j0`, `j1`, `y0`, `y1`, `jn`, `yn`, `atan2`, `pow`, `hypot`, `remainder`, `remquo`, `rhypot`, and `%` on floats)
//! and the exact compositions (`ldexp`, `nextafter`, `ilogb`, `frexp`) compiled to PTX and run on the
//! PTX simulator against the interpreter, bit for bit: both evaluate the same IEEE f32 and
//! f64 operations (`tegula_ir::mathlib`), so every result, special values included, must
//! agree (a NaN's sign and payload aside).
//! The emitter computes a thread's elements in groups (`emit/libm.rs`), so the tiles here
//! give a thread 1, 2 and 8 elements (a group of one, a partial group, two whole groups),
//! with a masked tail; f16 goes through the same f32 path.
//!
//! The seed is printed and comes from the clock, or from `TEGULA_TEST_SEED`.

mod sim;

use half::f16;
use sim::{agree_up_to, Rng, A};
use tegula_ir::prelude::*;
use tegula_ir::Kernel;

/// Values each function meets: a spread of magnitudes, both signs, its domain's edges and
/// beyond, and the special values.
fn inputs(r: &mut Rng, n: usize) -> Vec<f32> {
    const SPECIAL: [f32; 14] = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MIN_POSITIVE,
        1.0e-40,
        f32::MAX,
        0.99999994,
    ];
    (0..n)
        .map(|i| match r.below(4) {
            _ if i < SPECIAL.len() => SPECIAL[i],
            0 => (r.below(1 << 24) as f32 / (1 << 23) as f32) - 1.0,
            1 => (r.below(1 << 24) as f32 / (1 << 22) as f32) - 2.0,
            2 => {
                // Any sign and exponent from 2^-30 to 2^30.
                let e = 97 + r.below(61) as u32;
                let bits = (r.below(2) as u32) << 31 | e << 23 | r.below(1 << 23) as u32;
                f32::from_bits(bits)
            }
            _ => f32::from_bits(r.next() as u32),
        })
        .collect()
}

/// The function under test, of one argument or two (a unary one ignores the second).
type Body = fn(Tile, Tile) -> Tile;

/// Equal bits, or both NaN: the NaN's sign and payload are not specified (the interpreter's
/// f64 arithmetic and the GPU's may produce different ones).
fn same_up_to_nan_payload(dt: DType, a: u64, b: u64) -> bool {
    let nan = |x: u64| match dt {
        DType::F16 => f16::from_bits(x as u16).is_nan(),
        _ => f32::from_bits(x as u32).is_nan(),
    };
    a == b || (nan(a) && nan(b))
}

/// `out = f(x)` (or `f(x, y)`) over `block` elements a program, masked by `n`.
fn kernel(name: &str, dt: DType, block: usize, binary: bool, f: Body) -> Kernel {
    trace(name, |p| {
        let x = p.ptr("x", dt);
        let y = p.ptr("y", dt);
        let out = p.ptr("out", dt);
        let n = p.scalar("n", DType::I32);
        let o = program_id(0) * block as i64 + arange(0, block as i64);
        let m = o.lt(n);
        let a = load(x + o, m, 0.0).cast(DType::F32);
        let b = if binary {
            load(y + o, m, 0.0).cast(DType::F32)
        } else {
            a
        };
        store(out + o, f(a, b).cast(dt), m);
    })
    .unwrap()
}

fn check(r: &mut Rng, what: &str, binary: bool, f: Body) {
    // (dtype, block, warps): 1, 2 and 8 elements a thread.
    for (dt, block, warps) in [
        (DType::F32, 128, 4),
        (DType::F32, 256, 4),
        (DType::F32, 1024, 4),
        (DType::F16, 256, 4),
    ] {
        let k = kernel(what, dt, block, binary, f);
        let programs = 2;
        let len = programs * block;
        let n = len - 3;
        let bits = |v: Vec<f32>| -> Vec<u64> {
            match dt {
                DType::F16 => v
                    .iter()
                    .map(|&x| f16::from_f32(x).to_bits() as u64)
                    .collect(),
                _ => v.iter().map(|&x| x.to_bits() as u64).collect(),
            }
        };
        let x = bits(inputs(r, len));
        let mut y = inputs(r, len);
        y.rotate_left(5);
        let args = vec![
            A::Buf(dt, x),
            A::Buf(dt, bits(y)),
            A::Buf(dt, vec![0x7e00; len]),
            A::I32(n as i32),
        ];
        agree_up_to(
            &format!("{what} on {dt}, {block} elements over {warps} warps"),
            &k,
            [programs as u32, 1, 1],
            &args,
            90,
            warps,
            same_up_to_nan_payload,
        );
    }
}

#[test]
fn unary_functions_agree_with_the_interpreter_bit_for_bit() {
    let mut r = Rng::new("libm_unary");
    let fs: [(&str, Body); 33] = [
        ("asin", |a, _| asin(a)),
        ("acos", |a, _| acos(a)),
        ("atan", |a, _| atan(a)),
        ("sinh", |a, _| sinh(a)),
        ("cosh", |a, _| cosh(a)),
        ("asinh", |a, _| asinh(a)),
        ("acosh", |a, _| acosh(a)),
        ("atanh", |a, _| atanh(a)),
        ("log1p", |a, _| log1p(a)),
        ("expm1", |a, _| expm1(a)),
        ("erfinv", |a, _| erfinv(a)),
        ("cbrt", |a, _| cbrt(a)),
        ("tan", |a, _| tan(a)),
        ("log10", |a, _| log10(a)),
        ("exp10", |a, _| exp10(a)),
        ("erfc", |a, _| erfc(a)),
        ("lgamma", |a, _| lgamma(a)),
        ("tgamma", |a, _| tgamma(a)),
        ("rcbrt", |a, _| rcbrt(a)),
        ("normcdf", |a, _| normcdf(a)),
        ("sinpi", |a, _| sinpi(a)),
        ("cospi", |a, _| cospi(a)),
        ("erfcx", |a, _| erfcx(a)),
        ("erfcinv", |a, _| erfcinv(a)),
        ("normcdfinv", |a, _| normcdfinv(a)),
        ("cyl_bessel_i0", |a, _| cyl_bessel_i0(a)),
        ("cyl_bessel_i1", |a, _| cyl_bessel_i1(a)),
        ("j0", |a, _| j0(a)),
        ("j1", |a, _| j1(a)),
        ("y0", |a, _| y0(a)),
        ("y1", |a, _| y1(a)),
        ("sincospi_sin", |a, _| sincospi(a).0),
        ("sincospi_cos", |a, _| sincospi(a).1),
    ];
    for (name, f) in fs {
        check(&mut r, name, false, f);
    }
}

#[test]
fn binary_functions_agree_with_the_interpreter_bit_for_bit() {
    let mut r = Rng::new("libm_binary");
    let fs: [(&str, Body); 13] = [
        ("atan2", |a, b| atan2(a, b)),
        // `%` on floats: exact on both (the interpreter's is Rust's `%` on the values).
        ("fmod", |a, b| a % b),
        ("pow", |a, b| pow(a, b)),
        ("hypot", |a, b| hypot(a, b)),
        ("remainder", |a, b| remainder(a, b)),
        ("rhypot", |a, b| rhypot(a, b)),
        ("remquo", |a, b| remquo(a, b).0),
        ("remquo_quo", |a, b| remquo(a, b).1.cast(DType::F32)),
        // Exponents from the second input, -298 to 254 (subnormal, vanishing and overflowing
        // results) and the wrapped sums of i32::MIN and i32::MAX.
        ("ldexp", |a, b| ldexp(a, ilogb(b) * 2)),
        ("nextafter", |a, b| nextafter(a, b)),
        ("ilogb", |a, _| ilogb(a).cast(DType::F32)),
        ("logb", |a, _| logb(a)),
        ("fdim", |a, b| fdim(a, b)),
    ];
    for (name, f) in fs {
        check(&mut r, name, true, f);
    }
}

/// `jn` and `yn` with an i32 tile of orders, each element its own (-12 to 12, a few to 60
/// and a scalar order too): the recurrences' loops run to the warp's largest count, so the
/// elements of a warp take different numbers of steps of their own; 1, 2 and 8 elements a
/// thread, f32 and f16.
#[test]
fn jn_and_yn_agree_with_the_interpreter_bit_for_bit() {
    let mut r = Rng::new("libm_bessel_n");
    type BesselN = fn(Tile, Tile) -> Tile;
    let fs: [(&str, BesselN); 4] = [
        ("jn", |n, x| jn(n, x)),
        ("yn", |n, x| yn(n, x)),
        ("jn_scalar", |_, x| jn(-7, x)),
        ("yn_scalar", |_, x| yn(9, x)),
    ];
    for (what, f) in fs {
        for (dt, block, warps) in [
            (DType::F32, 128, 4),
            (DType::F32, 256, 4),
            (DType::F32, 1024, 4),
            (DType::F16, 256, 4),
        ] {
            let k = trace(what, |p| {
                let ns = p.ptr("n", DType::I32);
                let x = p.ptr("x", dt);
                let out = p.ptr("out", dt);
                let len = p.scalar("len", DType::I32);
                let o = program_id(0) * block as i64 + arange(0, block as i64);
                let m = o.lt(len);
                let n = load(ns + o, m, 0);
                let a = load(x + o, m, 0.0);
                store(out + o, f(n, a), m);
            })
            .unwrap();
            let programs = 2;
            let len = programs * block;
            let orders: Vec<u64> = (0..len)
                .map(|_| {
                    let n = match r.below(8) {
                        0 => r.below(61) as i64 - 30,
                        _ => r.below(25) as i64 - 12,
                    };
                    n as i32 as u32 as u64
                })
                .collect();
            let xs: Vec<f32> = inputs(&mut r, len)
                .into_iter()
                .enumerate()
                .map(|(i, x)| {
                    if i % 2 == 0 && x.abs() > 80.0 {
                        x % 80.0
                    } else {
                        x
                    }
                })
                .collect();
            let xs: Vec<u64> = match dt {
                DType::F16 => xs
                    .iter()
                    .map(|&x| f16::from_f32(x).to_bits() as u64)
                    .collect(),
                _ => xs.iter().map(|&x| x.to_bits() as u64).collect(),
            };
            let args = vec![
                A::Buf(DType::I32, orders),
                A::Buf(dt, xs),
                A::Buf(dt, vec![0x7e00; len]),
                A::I32(len as i32 - 3),
            ];
            agree_up_to(
                &format!("{what} on {dt}, {block} elements over {warps} warps"),
                &k,
                [programs as u32, 1, 1],
                &args,
                90,
                warps,
                same_up_to_nan_payload,
            );
        }
    }
}

/// `ldexp`, `nextafter`, `ilogb` and `frexp` in f32 and f64 themselves, with every exponent: integer
/// ops and exact multiplications on both sides. (Their f16 and bf16 forms use 16-bit integer
/// ops the simulator does not model; `language_ops.rs` assembles them and the GPU check in
/// `tegula`'s examples runs them.)
#[test]
fn exact_compositions_agree_in_f32_and_f64() {
    let mut r = Rng::new("libm_exact");
    let block = 256;
    for dt in [DType::F32, DType::F64] {
        let k = trace("exact", |p| {
            let (x, y) = (p.ptr("x", dt), p.ptr("y", dt));
            let e = p.ptr("e", DType::I32);
            let (o1, o2) = (p.ptr("ldexp", dt), p.ptr("nextafter", dt));
            let o3 = p.ptr("ilogb", DType::I32);
            let (o4, o5) = (p.ptr("frexp_m", dt), p.ptr("frexp_e", DType::I32));
            let o = arange(0, block as i64);
            let (a, b) = (load_unmasked(x + o), load_unmasked(y + o));
            store_unmasked(o1 + o, ldexp(a, load_unmasked(e + o)));
            store_unmasked(o2 + o, nextafter(a, b));
            store_unmasked(o3 + o, ilogb(a));
            let (m, e) = frexp(a);
            store_unmasked(o4 + o, m);
            store_unmasked(o5 + o, e);
        })
        .unwrap();
        let sign = 1u64 << (dt.bits() - 1);
        let inf = match dt {
            DType::F32 => 0x7F80_0000,
            _ => 0x7FF0_0000_0000_0000,
        };
        let random_bits = |r: &mut Rng| -> Vec<u64> {
            (0..block)
                .map(|i| match i {
                    // Zeros, infinities and the smallest subnormals; then any bit pattern.
                    0..6 => [0, sign, inf, sign | inf, 1, sign | 1][i],
                    _ => r.next() & (sign | (sign - 1)),
                })
                .collect()
        };
        let x = random_bits(&mut r);
        let mut y = random_bits(&mut r);
        y[1] = x[1];
        let e: Vec<u64> = (0..block)
            .map(|i| {
                let n = match i % 3 {
                    0 => r.below(80) as i64 - 40,
                    1 => r.below(5000) as i64 - 2500,
                    _ => r.next() as i32 as i64,
                };
                n as u32 as u64
            })
            .collect();
        let args = vec![
            A::Buf(dt, x),
            A::Buf(dt, y),
            A::Buf(DType::I32, e),
            A::Buf(dt, vec![0; block]),
            A::Buf(dt, vec![0; block]),
            A::Buf(DType::I32, vec![0; block]),
            A::Buf(dt, vec![0; block]),
            A::Buf(DType::I32, vec![0; block]),
        ];
        agree_up_to(
            &format!("ldexp, nextafter, ilogb, frexp on {dt}"),
            &k,
            [1, 1, 1],
            &args,
            90,
            4,
            |dt, a, b| {
                let nan = |x: u64| match dt {
                    DType::F32 => f32::from_bits(x as u32).is_nan(),
                    DType::F64 => f64::from_bits(x).is_nan(),
                    _ => false,
                };
                a == b || (nan(a) && nan(b))
            },
        );
    }
}
