//! Philox on the GPU path: the PTX of 32- and 64-bit Philox (`mul.hi.u32` / `mul.hi.u64`,
//! wrapping products and key sums) on the PTX simulator gives the interpreter's bits.

mod sim;

use sim::{param_names, run_ptx, Arg};
use std::sync::Arc;
use tegula_interp::{run, Buffer, Options};
use tegula_ir::prelude::*;
use tegula_ir::Kernel;

/// 256 lanes of Philox on counters of `dt` built from `offs = arange + base`, one output
/// buffer a word.
fn philox_kernel(dt: DType) -> Kernel {
    trace("philox_lanes", |p| {
        let base = p.scalar("base", DType::I32);
        let outs: Vec<Tile> = (0..4)
            .map(|i| {
                p.ptr(
                    &format!("out{i}"),
                    if dt.bits() == 64 {
                        DType::U64
                    } else {
                        DType::U32
                    },
                )
            })
            .collect();
        let offs = (arange(0, 256) + base).cast(dt);
        let c = if dt.bits() == 64 {
            [
                offs,
                (offs * 0x1_0000_0001i64) ^ offs,
                offs * 3,
                offs ^ 0x5555,
            ]
        } else {
            [offs, offs * 3, offs ^ 0x5555, offs]
        };
        let words = philox(0x0123_4567_89ab_cdefu64 as i64, c.map(Operand::Tile), 10);
        for (o, w) in outs.iter().zip(words) {
            store_unmasked(*o + arange(0, 256), w);
        }
    })
    .unwrap()
}

#[test]
fn philox_ptx_matches_the_interpreter_bit_for_bit() {
    for (dt, base) in [(DType::I32, 77), (DType::U64, 5), (DType::I64, -1_000_003)] {
        let k = philox_kernel(dt);
        let word = if dt.bits() == 64 {
            DType::U64
        } else {
            DType::U32
        };
        let bufs: Vec<Arc<Buffer>> = (0..4)
            .map(|_| Arc::new(Buffer::zeroed(word, 256)))
            .collect();
        let mut args = vec![tegula_interp::Arg::Int(base)];
        args.extend(bufs.iter().map(tegula_interp::Arg::ptr));
        run(&k, [1, 1, 1], &args, &Options::default()).unwrap();
        let c = sim::compiled(&k, 80, 4, 1);
        if dt.bits() == 64 {
            assert!(
                c.ptx.contains("mul.hi.u64"),
                "64-bit Philox multiplies 64-bit words"
            );
        }
        let zeros = vec![0u8; 256 * word.size_bytes()];
        let mut sim_args = vec![Arg::I32(base as i32)];
        sim_args.extend((0..4).map(|_| Arg::Buf(&zeros)));
        let out = run_ptx(
            &c.ptx,
            c.shared_bytes as usize,
            &param_names(&k),
            4,
            [1, 1, 1],
            &sim_args,
        );
        for w in 0..4 {
            let want: Vec<u64> = (0..256).map(|i| bufs[w].read_bits(i)).collect();
            let got: Vec<u64> = out[w]
                .chunks(word.size_bytes())
                .map(|b| b.iter().rev().fold(0u64, |acc, &x| (acc << 8) | x as u64))
                .collect();
            assert_eq!(got, want, "{dt} word {w}");
        }
    }
}
