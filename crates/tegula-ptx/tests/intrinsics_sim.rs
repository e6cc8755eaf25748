//! libdevice's integer intrinsics (`clz`, `popc`, `brev`, `ffs`, `byte_perm`, `mulhi`,
//! `umulhi`, `mul24`, `umul24`, `sad`, `usad`, `hadd`, `rhadd`, `uhadd`, `urhadd`) compiled to
//! PTX (`clz`, `popc`, `brev`, `prmt`, `mul.hi`, `mul24.lo`, `sad` and a few exact integer
//! ops) and run on the PTX simulator against the interpreter, bit for bit, on each integer
//! dtype a function covers: edge bit patterns (0, 1, all ones, the signed extremes, powers of
//! two and their neighbours, the 24-bit edges) and random ones, with a masked tail. The PTX
//! assembles with ptxas for sm_80 and sm_90a (`language_ops.rs`).
//!
//! The seed is printed and comes from the clock, or from `TEGULA_TEST_SEED`.

mod sim;

use sim::{agree, Rng, A};
use tegula_ir::prelude::*;
use tegula_ir::Kernel;

type Body = fn(Tile, Tile, Tile) -> Tile;

const BLOCK: usize = 256;
const PROGRAMS: usize = 3;

fn mask(bits: u32) -> u64 {
    if bits == 64 {
        u64::MAX
    } else {
        (1 << bits) - 1
    }
}

/// Edge patterns of a width, then random ones (sparse, dense and uniform), `len` in all.
fn patterns(r: &mut Rng, bits: u32, len: usize) -> Vec<u64> {
    let m = mask(bits);
    let mut v = vec![0, 1, 3, m, m >> 1, 1 << (bits - 1), (1 << (bits - 1)) + 1];
    v.extend([0xff_ffff, 0x80_0000, 0x7f_ffff, 0xff80_0000 & m, 0x100_0000]);
    for k in 0..bits {
        v.extend([1 << k, (1u64 << k) - 1]);
    }
    while v.len() < len {
        let x = r.next();
        v.push(match r.below(3) {
            0 => x & r.next() & r.next(),
            1 => x | r.next() | r.next(),
            _ => x,
        });
    }
    v.truncate(len);
    v.iter().map(|x| x & m).collect()
}

fn kernel(name: &str, dt: DType, f: Body) -> Kernel {
    trace(name, |p| {
        let (x, y, z) = (p.ptr("x", dt), p.ptr("y", dt), p.ptr("z", dt));
        let out = p.ptr("out", dt);
        let n = p.scalar("n", DType::I32);
        let o = program_id(0) * BLOCK as i64 + arange(0, BLOCK as i64);
        let m = o.lt(n);
        let (a, b, c) = (load(x + o, m, 0), load(y + o, m, 0), load(z + o, m, 0));
        store(out + o, f(a, b, c).cast(dt), m);
    })
    .unwrap()
}

fn check(r: &mut Rng, what: &str, dts: &[DType], f: Body) {
    for &dt in dts {
        let k = kernel(what, dt, f);
        let len = PROGRAMS * BLOCK;
        let bits = dt.bits();
        let x = patterns(r, bits, len);
        // The second operand: the edges in another order, so that edges meet edges.
        let mut y = patterns(r, bits, len);
        y.rotate_left(7);
        let mut z = patterns(r, bits, len);
        z.rotate_left(13);
        let args = vec![
            A::Buf(dt, x),
            A::Buf(dt, y),
            A::Buf(dt, z),
            A::Buf(dt, vec![0x5a; len]),
            A::I32(len as i32 - 3),
        ];
        agree(
            &format!("{what} on {dt}"),
            &k,
            [PROGRAMS as u32, 1, 1],
            &args,
            90,
            4,
        );
    }
}

const ALL: [DType; 4] = [DType::I32, DType::U32, DType::I64, DType::U64];
const W32: [DType; 2] = [DType::I32, DType::U32];

#[test]
fn bit_counts_and_reversal_agree_with_the_interpreter() {
    let mut r = Rng::new("intrinsics_bits");
    let fs: [(&str, Body); 4] = [
        ("clz", |a, _, _| clz(a)),
        ("popc", |a, _, _| popc(a)),
        ("brev", |a, _, _| brev(a)),
        ("ffs", |a, _, _| ffs(a)),
    ];
    for (name, f) in fs {
        check(&mut r, name, &ALL, f);
    }
}

#[test]
fn products_and_halving_adds_agree_with_the_interpreter() {
    let mut r = Rng::new("intrinsics_arith");
    let fs: [(&str, Body); 7] = [
        ("mulhi", |a, b, _| mulhi(a, b)),
        ("umulhi", |a, b, _| umulhi(a, b)),
        ("hadd", |a, b, _| hadd(a, b)),
        ("rhadd", |a, b, _| rhadd(a, b)),
        ("uhadd", |a, b, _| uhadd(a, b)),
        ("urhadd", |a, b, _| urhadd(a, b)),
        ("sad", |a, b, c| sad(a, b, c)),
    ];
    for (name, f) in fs {
        check(&mut r, name, &ALL, f);
    }
    check(&mut r, "usad", &ALL, |a, b, c| usad(a, b, c));
    check(&mut r, "mul24", &W32, |a, b, _| mul24(a, b));
    check(&mut r, "umul24", &W32, |a, b, _| umul24(a, b));
}

#[test]
fn byte_perm_agrees_with_the_interpreter_at_every_selector_nibble() {
    let mut r = Rng::new("intrinsics_prmt");
    check(&mut r, "byte_perm", &W32, |a, b, c| byte_perm(a, b, c));
    // Selectors with each nibble value in each position (the sign-replicating ones too).
    check(&mut r, "byte_perm_nibbles", &W32, |a, b, _| {
        let s = (arange(0, BLOCK as i64) * 0x1111) ^ (program_id(0) * 0x0f0f);
        byte_perm(a, b, s.cast(a.dtype()))
    });
}

#[test]
fn the_ptx_uses_the_instructions() {
    let ptx = |dt: DType, f: Body| sim::ptx_of(&kernel("k", dt, f), 90, 4, 1);
    let cases: [(DType, Body, &str); 10] = [
        (DType::I32, |a, _, _| clz(a), "clz.b32"),
        (DType::U64, |a, _, _| clz(a), "clz.b64"),
        (DType::I64, |a, _, _| popc(a), "popc.b64"),
        (DType::U32, |a, _, _| brev(a), "brev.b32"),
        (DType::I64, |a, _, _| ffs(a), "clz.b64"),
        (DType::I32, |a, b, _| mulhi(a, b), "mul.hi.s32"),
        (DType::I64, |a, b, _| mulhi(a, b), "mul.hi.s64"),
        (DType::I32, |a, b, _| mul24(a, b), "mul24.lo.s32"),
        (DType::U32, |a, b, c| sad(a, b, c), "sad.u32"),
        (DType::I32, |a, b, c| byte_perm(a, b, c), "prmt.b32"),
    ];
    for (dt, f, op) in cases {
        assert!(ptx(dt, f).contains(op), "{op} on {dt}");
    }
}
