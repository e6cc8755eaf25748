//! Float-to-integer casts compiled for sm_90a and run on the PTX simulator (which converts
//! NaN as the H100 does: 0 from f32 into 32 bits, the smallest signed integer's pattern from
//! f64 or into 64 bits) against the interpreter (NaN gives 0 everywhere, docs/semantics.md),
//! bit for bit: NaN, infinities, values past every integer dtype's range, negative values into
//! unsigned types, halves, for f32 and f64 into i8 .. u64, plainly and through libdevice's
//! directed conversions.

mod sim;

use sim::{agree, A};
use tegula_ir::prelude::*;

const BLOCK: usize = 128;

fn values() -> Vec<f64> {
    let mut v = vec![
        f64::NAN,
        -f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
        0.5,
        -0.5,
        1.5,
        -2.5,
        127.5,
        -128.5,
        255.5,
        65535.5,
        -32768.5,
        2147483647.0,
        2147483648.0,
        -2147483649.0,
        4294967296.0,
        9.3e18,
        -9.3e18,
        1.9e19,
        1e30,
        -1e30,
    ];
    while v.len() < BLOCK {
        let k = v.len() as f64;
        v.push((k * 7919.0).sin() * 10f64.powf(k % 21.0));
    }
    v
}

#[test]
fn float_to_integer_casts_agree_with_the_interpreter() {
    let targets = [
        DType::I8,
        DType::U8,
        DType::I16,
        DType::U16,
        DType::I32,
        DType::U32,
        DType::I64,
        DType::U64,
    ];
    for from in [DType::F32, DType::F64] {
        let bits: Vec<u64> = values()
            .iter()
            .map(|&x| {
                if from == DType::F32 {
                    (x as f32).to_bits() as u64
                } else {
                    x.to_bits()
                }
            })
            .collect();
        for to in targets {
            let k = trace("float_to_int", |p| {
                let (x, y) = (p.ptr("x", from), p.ptr("y", to));
                let (z, w) = (p.ptr("z", DType::I64), p.ptr("w", DType::I32));
                let o = arange(0, BLOCK as i64);
                let v = load_unmasked(x + o);
                store_unmasked(y + o, v.cast(to));
                // libdevice's directed conversions round first, then cast the same way.
                let (l, i) = if from == DType::F32 {
                    (float2ll_rd(v), float2int_ru(v))
                } else {
                    (double2ll_rn(v), double2int_rz(v))
                };
                store_unmasked(z + o, l);
                store_unmasked(w + o, i);
            })
            .unwrap();
            let args = vec![
                A::Buf(from, bits.clone()),
                A::Buf(to, vec![0x5a; BLOCK]),
                A::Buf(DType::I64, vec![0x5a; BLOCK]),
                A::Buf(DType::I32, vec![0x5a; BLOCK]),
            ];
            agree(&format!("{from} to {to}"), &k, [1, 1, 1], &args, 90, 4);
        }
    }
}
