//! fp8 tiles (`f8e4m3`, `f8e5m2`) compiled for sm_90a and run on the PTX simulator against
//! the interpreter, bit for bit: casts from f32 into both formats (every fp8 value, the
//! midpoints between neighbours and their neighbours, magnitudes past the largest finite
//! value, infinities, NaN, f32 subnormals), casts out of them over all 256 patterns, and
//! arithmetic and selection on fp8 tiles (computed in f32, rounded back once per op). The PTX
//! assembles with ptxas for sm_89 and sm_90a (`language_ops.rs`).

mod sim;

use sim::{agree_up_to, Rng, A};
use tegula_ir::prelude::*;
use tegula_ir::Kernel;

const BLOCK: usize = 256;

/// Every fp8 value of both formats as f32, the midpoints between neighbours, one f32 ulp on
/// either side of those, out-of-range magnitudes and the specials; then random f32 patterns.
fn f32_inputs(r: &mut Rng, len: usize) -> Vec<u64> {
    let mut v: Vec<f32> = Vec::new();
    for e5m2 in [false, true] {
        let mut vals: Vec<f32> = (0..=255u8)
            .map(|b| {
                if e5m2 {
                    f8e5m2::from_bits(b).to_f32()
                } else {
                    f8e4m3::from_bits(b).to_f32()
                }
            })
            .filter(|x| x.is_finite())
            .collect();
        vals.sort_by(f32::total_cmp);
        for w in vals.windows(2) {
            let mid = (w[0] + w[1]) / 2.0;
            v.extend([w[0], mid, mid.next_up(), mid.next_down()]);
        }
    }
    v.extend([
        500.0,
        465.0,
        464.0,
        6e4,
        61440.0,
        1e30,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ]);
    v.extend([f32::NAN, 1e-40, -1e-45, 0.0, -0.0]);
    let mut bits: Vec<u64> = v.iter().map(|x| x.to_bits() as u64).collect();
    while bits.len() < len {
        bits.push(r.next() & 0xffff_ffff);
    }
    bits.truncate(len);
    bits
}

fn kernel(name: &str, f: fn(Tile, Tile, Tile) -> (Tile, Tile, Tile)) -> Kernel {
    trace(name, |p| {
        let x = p.ptr("x", DType::F32);
        let (y4, y5) = (p.ptr("y4", DType::F8E4M3), p.ptr("y5", DType::F8E5M2));
        let (o4, o5) = (p.ptr("o4", DType::F8E4M3), p.ptr("o5", DType::F8E5M2));
        let of = p.ptr("of", DType::F32);
        let n = p.scalar("n", DType::I32);
        let o = program_id(0) * BLOCK as i64 + arange(0, BLOCK as i64);
        let m = o.lt(n);
        let a = load(x + o, m, 0.0);
        let (b4, b5) = (load(y4 + o, m, 0.0), load(y5 + o, m, 0.0));
        let (r4, r5, rf) = f(a, b4, b5);
        store(o4 + o, r4, m);
        store(o5 + o, r5, m);
        store(of + o, rf, m);
    })
    .unwrap()
}

/// Any NaN for any NaN (f32 payloads differ between the backends; fp8 NaN is canonical).
fn same(d: DType, a: u64, b: u64) -> bool {
    match d {
        DType::F32 => {
            a == b || (f32::from_bits(a as u32).is_nan() && f32::from_bits(b as u32).is_nan())
        }
        _ => a == b,
    }
}

fn check(what: &str, f: fn(Tile, Tile, Tile) -> (Tile, Tile, Tile)) {
    let mut r = Rng::new(what);
    let programs = 6;
    let len = programs * BLOCK;
    let x = f32_inputs(&mut r, len);
    let y: Vec<u64> = (0..len as u64).map(|i| (i * 37 + 11) & 0xff).collect();
    let mut y5 = y.clone();
    y5.rotate_left(3);
    let k = kernel(what, f);
    let args = vec![
        A::Buf(DType::F32, x),
        A::Buf(DType::F8E4M3, y),
        A::Buf(DType::F8E5M2, y5),
        A::Buf(DType::F8E4M3, vec![0x11; len]),
        A::Buf(DType::F8E5M2, vec![0x11; len]),
        A::Buf(DType::F32, vec![0x5a; len]),
        A::I32(len as i32 - 5),
    ];
    agree_up_to(what, &k, [programs as u32, 1, 1], &args, 90, 4, same);
}

#[test]
fn casts_into_and_out_of_fp8_agree_with_the_interpreter() {
    check("fp8_casts", |a, b4, b5| {
        // Into each format from f32; out of them into f32 (summed with a scale that keeps
        // every value exact in f32).
        let back = b4.to::<f32>() + b5.to::<f32>() * 1024.0;
        (a.to::<f8e4m3>(), a.to::<f8e5m2>(), back)
    });
}

#[test]
fn fp8_arithmetic_and_selection_agree_with_the_interpreter() {
    check("fp8_arith", |a, b4, b5| {
        let a4 = a.to::<f8e4m3>();
        let p = (a4 + b4) * b4 - b4 / 3.0;
        let q = select(b5.gt(a.to::<f8e5m2>()), b5 * b5, b5 - 1.5);
        // Across formats: e4m3 with e5m2 meets at f16.
        let mixed = (b4 + b5).to::<f32>() + max(b5, 0).to::<f32>() - min(b4, 0).to::<f32>();
        (p, q, mixed)
    });
}

/// Dots of fp8 tiles on the simulator against the interpreter, each format alone and the two
/// mixed: K = 32 on the tensor cores (`mma.sync.m16n8k32`), K = 16 (below one fp8 k-step) on
/// FMAs. Positive values, so that the
/// two summation orders differ by at most K f32 roundings of the sum, 32 x 2^-24 relative.
#[test]
fn fp8_dot_agrees_with_the_interpreter() {
    let (e4, e5) = (DType::F8E4M3, DType::F8E5M2);
    for (dt, dy) in [(e4, e4), (e5, e5), (e4, e5), (e5, e4)] {
        for kk in [32usize, 16] {
            let k = trace("fp8_dot", |p| {
                let (x, y, o) = (p.ptr("x", dt), p.ptr("y", dy), p.ptr("o", DType::F32));
                let r = arange(0, 32);
                let rk = arange(0, kk as i64);
                let a = load_unmasked(x + (r.col() * kk + rk.row()));
                let b = load_unmasked(y + (rk.col() * 32 + r.row()));
                store_unmasked(o + (r.col() * 32 + r.row()), dot(a, b));
            })
            .unwrap();
            let ptx = tegula_ptx::compile(
                &k,
                &tegula_ptx::Target { sm: 90 },
                &tegula_ptx::CompileOptions {
                    num_warps: 4,
                    ..Default::default()
                },
            )
            .unwrap()
            .ptx;
            assert_eq!(ptx.contains("m16n8k32"), kk == 32, "{dt} {dy} K={kk}");
            // Positive finite patterns below the NaN/infinity ones.
            let top = |d: DType| if d == DType::F8E4M3 { 0x7e } else { 0x7b };
            let n = 32 * kk as u64;
            let x: Vec<u64> = (0..n).map(|i| (i * 7 + 3) % top(dt)).collect();
            let y: Vec<u64> = (0..n).map(|i| (i * 13 + 5) % top(dy)).collect();
            let args = vec![
                A::Buf(dt, x),
                A::Buf(dy, y),
                A::Buf(DType::F32, vec![0; 1024]),
            ];
            agree_up_to(
                &format!("fp8 dot {dt} x {dy} K={kk}"),
                &k,
                [1, 1, 1],
                &args,
                90,
                4,
                |d, a, b| {
                    if d != DType::F32 {
                        return a == b;
                    }
                    let (a, b) = (
                        f32::from_bits(a as u32) as f64,
                        f32::from_bits(b as u32) as f64,
                    );
                    (a - b).abs() <= 1e-5 * a.abs().max(b.abs())
                },
            );
        }
    }
}
