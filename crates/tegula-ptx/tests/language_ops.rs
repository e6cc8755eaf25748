//! The language ops a Triton user expects (random numbers, libdevice-style math, barriers,
//! pointer casts, hints) lower to PTX that `ptxas` assembles for sm_80 and sm_90a.
//! ptxas comes from $TEGULA_PTXAS, `.tools/nvcc` (scripts/ptxas.sh) or PATH; without one the
//! test fails rather than passing silently.

use std::path::PathBuf;
use tegula_ir::prelude::*;
use tegula_ir::Kernel;
use tegula_ptx::{compile, CompileOptions, Target};

fn ptxas() -> PathBuf {
    tegula_ptx::ptxas::find()
        .expect("ptxas not found: run scripts/ptxas.sh (or set TEGULA_PTXAS) before this test")
}

/// The options every kernel here compiles with.
fn options() -> CompileOptions {
    CompileOptions {
        num_warps: 4,
        num_stages: 1,
        mma: tegula_ptx::MmaChoice::Sync,
        fp_fusion: true,
        tma: false,
    }
}

/// Compiles `k` for each of `sms`, assembles each, and returns their PTX in that order.
fn assemble_for(name: &str, k: &Kernel, sms: &[u32]) -> Vec<String> {
    let dir = std::env::temp_dir().join(format!("tegula-language-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    sms.iter()
        .map(|&sm| {
            let c =
                compile(k, &Target { sm }, &options()).unwrap_or_else(|e| panic!("{name}: {e}"));
            tegula_ptx::ptxas::assemble(&ptxas(), &c.ptx, sm, &dir, &format!("{name}_sm{sm}"))
                .unwrap_or_else(|e| panic!("{name} sm_{sm}: {e}"));
            c.ptx
        })
        .collect()
}

/// Compiles `k` for sm_80 and sm_90a, assembles both, and returns the sm_80 PTX.
fn assemble(name: &str, k: &Kernel) -> String {
    assemble_for(name, k, &[80, 90]).swap_remove(0)
}

#[test]
fn random_kernels_assemble() {
    let k = trace("random", |p| {
        let (out, seed) = (p.ptr("out", DType::F32), p.scalar("seed", DType::I64));
        let ints = p.ptr("ints", DType::U32);
        let offs = program_id(0) * 256 + arange(0, 256);
        store_unmasked(out + offs, rand(seed, offs) + randn(seed, offs));
        let [a, b, c, d] = randint4x(seed, offs.cast(DType::I64));
        store_unmasked(ints + offs, a ^ b ^ c ^ d);
    })
    .unwrap();
    let ptx = assemble("random", &k);
    assert!(ptx.contains("mul.hi.u32"), "umulhi lowers to mul.hi.u32");
    let k = trace("umulhi64", |p| {
        let (x, y) = (p.ptr("x", DType::U64), p.ptr("y", DType::I64));
        let o = arange(0, 128);
        let v = umulhi(load_unmasked(x + o), load_unmasked(x + o));
        store_unmasked(y + o, v.cast(DType::I64));
    })
    .unwrap();
    assert!(assemble("umulhi64", &k).contains("mul.hi.u64"));
}

/// Every math-library op of a dtype, summed into one stored value.
fn math_kernel(dt: DType) -> Kernel {
    trace(&format!("math_{dt}"), |p| {
        let (x, y, out) = (p.ptr("x", dt), p.ptr("y", dt), p.ptr("out", dt));
        let o = program_id(0) * 128 + arange(0, 128);
        let (a, b) = (load_unmasked(x + o), load_unmasked(y + o));
        let mut acc = asin(a) + acos(a) + atan(a) + sinh(a) + cosh(a) + asinh(a);
        acc += acosh(a) + atanh(a) + log1p(a) + expm1(a) + erfinv(a) + cbrt(a);
        acc += tan(a) + log10(a) + exp10(a) + erfc(a) + lgamma(a) + tgamma(a);
        acc += rcbrt(a) + normcdf(a) + sinpi(a) + cospi(a) + erfcx(a) + erfcinv(a);
        acc += normcdfinv(a) + remainder(a, b) + rhypot(a, b);
        acc += cyl_bessel_i0(a) + cyl_bessel_i1(b) + j0(a) + j1(b) + y0(a) + y1(b);
        acc += jn(ilogb(b), a) + yn(-3, b);
        let ((s, c), (r, q)) = (sincospi(a), remquo(a, b));
        acc += s + c + r + q.to::<f32>();
        acc += atan2(a, b) + pow(a, b) + hypot(a, b) + fmod(a, b) + copysign(a, b);
        let (m, e) = frexp(b);
        acc += ldexp(a, ilogb(b)) + nextafter(a, b) + ldexp(m, e) + logb(a) + fdim(a, b);
        acc += round(a) + rint(b) + trunc(a) + nearbyint(b);
        let flags = isnan(a) | isinf(b) | signbit(a) | isfinite(b);
        store_unmasked(out + o, select(flags, acc, 0.0));
    })
    .unwrap()
}

#[test]
fn math_kernels_assemble() {
    for dt in [DType::F32, DType::F16, DType::BF16] {
        let ptx = assemble(&format!("math_{dt}"), &math_kernel(dt));
        assert!(ptx.contains("fma.rn.f64") && ptx.contains("cvt.rn.f32.f64"));
        // jn's and yn's recurrences: loops whose exit the CTA agrees on.
        assert!(ptx.contains("bar.red.or.pred"));
        assert!(
            !ptx.contains(".approx.f64"),
            "the math library uses no approximations"
        );
    }
    // f64: the exact ops (`ldexp`, `nextafter` and `ilogb` among them) lower; the
    // transcendental ones are refused with a clear error.
    let k = trace("round_f64", |p| {
        let (x, out) = (p.ptr("x", DType::F64), p.ptr("out", DType::F64));
        let o = arange(0, 128);
        let a = load_unmasked(x + o);
        let v = round(a) + rint(a) + trunc(a) + copysign(a, -1.0);
        let v = v + ldexp(a, ilogb(a)) + nextafter(a, 0.0) + frexp(a).0 + logb(a) + fdim(a, 1.0);
        store_unmasked(out + o, select(isnan(a) | signbit(a), 0.0, v));
    })
    .unwrap();
    assemble("round_f64", &k);
    let k = trace("asin_f64", |p| {
        let (x, out) = (p.ptr("x", DType::F64), p.ptr("out", DType::F64));
        let o = arange(0, 128);
        store_unmasked(out + o, asin(load_unmasked(x + o)));
    })
    .unwrap();
    let e = compile(&k, &Target { sm: 80 }, &options()).unwrap_err();
    assert!(e.to_string().contains("asin"), "{e}");
}

#[test]
fn barrier_pointers_hints_and_shape_ops_assemble() {
    let k = trace("lang", |p| {
        let (x, y) = (p.ptr("x", DType::F32), p.ptr("y", DType::F32));
        let table = p.ptr("table", DType::I64);
        let n = p.scalar("n", DType::I32);
        let rows = max_constancy(arange(0, 16).col() * 64, [1, 64]);
        let offs = multiple_of(
            max_contiguous(rows + arange(0, 64).row(), [1, 64]),
            [64, 16],
        );
        assume(n.gt(0));
        let v = load_unmasked(x + offs);
        store_unmasked(y + offs, v * 2.0);
        debug_barrier();
        let o = arange(0, 64);
        let base = int_to_ptr::<f32>(load_unmasked(table + o % 2));
        let w = load_masked(base + o, o.lt(n));
        let (a, b) = split(join(w, w + 1.0));
        let il = interleave(a, b);
        store_unmasked(
            y + arange(0, 128),
            select(o.col() % 2, il.reshape([64, 2]), 0.0).reshape([128]),
        );
        store_unmasked(y + 128 + arange(0, 128), cat(w, w * 2.0, true));
        store_unmasked(table + o, (y + o).to_int());
        atomic_add(y + o, 1.0, None);
    })
    .unwrap();
    let ptx = assemble("lang", &k);
    assert!(ptx.contains("bar.sync"), "debug_barrier is a bar.sync");
}

#[test]
fn indexing_ops_assemble() {
    // gather along either axis with indices of several widths (an mma accumulator as one
    // source), flip, sort both ways along both axes, swizzle2d of program ids.
    let k = trace("indexing", |p| {
        let (x, h, out) = (
            p.ptr("x", DType::F32),
            p.ptr("h", DType::F16),
            p.ptr("out", DType::F32),
        );
        let (i64s, u8s) = (p.ptr("i64s", DType::I64), p.ptr("u8s", DType::U8));
        let (hout, iout) = (p.ptr("hout", DType::F16), p.ptr("iout", DType::I32));
        let (rows, cols) = (arange(0, 32), arange(0, 64));
        let offs = rows.col() * 64 + cols.row();
        let v = load_unmasked(x + offs);
        let g0 = gather(v, load_unmasked(i64s + offs), 0);
        let g1 = v.gather(
            load_unmasked(u8s + rows.col() * 16 + arange(0, 16).row()),
            1,
        );
        store_unmasked(
            out + offs,
            g0 + sort(v, 1, false) + sort(v, 0, true).flip(1),
        );
        store_unmasked(out + rows.col() * 16 + arange(0, 16).row(), g1);
        let hv = load_unmasked(h + offs);
        store_unmasked(hout + offs, hv.flip(0));
        let acc = dot(
            load_unmasked(h + rows.col() * 16 + arange(0, 16).row()),
            load_unmasked(h + arange(0, 16).col() * 32 + rows.row()),
        );
        let ga = gather(acc, rows.row().broadcast_to([32, 32]) ^ 5, 1);
        store_unmasked(out + rows.col() * 32 + rows.row(), ga);
        let (ni, nj) = swizzle2d(program_id(0), program_id(1), num_programs(0), 8, 4);
        store_unmasked(iout + program_id(0) * 8 + program_id(1), ni * 8 + nj);
        let flags = v.gt(0.0).gather(load_unmasked(i64s + offs), 0);
        store_unmasked(iout + 64 + offs, select(flags, 1, 0));
    })
    .unwrap();
    let ptx = assemble("indexing", &k);
    assert!(
        ptx.contains("min.u64") && ptx.contains("min.u32"),
        "indices are clamped"
    );
}

#[test]
fn histogram_assembles() {
    // Masked and unmasked, of narrow, 32-bit and 64-bit, signed and unsigned inputs, into
    // fewer bins than elements and more.
    let k = trace("histogram", |p| {
        let (x8, x64) = (p.ptr("x8", DType::I8), p.ptr("x64", DType::U64));
        let x32 = p.ptr("x32", DType::I32);
        let out = p.ptr("out", DType::I32);
        let n = p.scalar("n", DType::I32);
        let o = arange(0, 256);
        let m = o.lt(n);
        let a = histogram(load(x8 + o, m, -1), 64);
        let b = histogram_masked(load(x64 + o, m, 0), 64, m);
        store_unmasked(out + arange(0, 64), a + b);
        let small = arange(0, 32);
        let c = load(x32 + small, small.lt(n), 0).histogram_masked(512, small.lt(n));
        store_unmasked(out + 64 + arange(0, 512), c);
    })
    .unwrap();
    let ptx = assemble("histogram", &k);
    // The bins compared in i32 for the i8 input, in u64 for the u64 one.
    assert!(ptx.contains("setp.eq.s32") && ptx.contains("setp.eq.u64"));
}

/// libdevice's integer intrinsics on each dtype they cover assemble for sm_80 and sm_90a.
#[test]
fn integer_intrinsics_assemble() {
    for dt in [DType::I32, DType::U32, DType::I64, DType::U64] {
        let k = trace(&format!("intrinsics_{dt}"), |p| {
            let (x, y, out) = (p.ptr("x", dt), p.ptr("y", dt), p.ptr("out", dt));
            let o = program_id(0) * 128 + arange(0, 128);
            let (a, b) = (load_unmasked(x + o), load_unmasked(y + o));
            let counts = clz(a) + popc(b) + ffs(a);
            let mut acc = brev(a) ^ mulhi(a, b) ^ umulhi(a, b) ^ counts.cast(dt);
            acc = acc ^ hadd(a, b) ^ rhadd(a, b) ^ uhadd(a, b) ^ urhadd(a, b);
            acc = acc ^ sad(a, b, acc) ^ usad(b, a, 7);
            if dt.bits() == 32 {
                acc = acc ^ mul24(a, b) ^ umul24(a, b) ^ byte_perm(a, b, acc);
            }
            store_unmasked(out + o, acc);
        })
        .unwrap();
        let ptx = assemble(&format!("intrinsics_{dt}"), &k);
        let w = dt.bits();
        for op in [
            format!("clz.b{w}"),
            format!("popc.b{w}"),
            format!("brev.b{w}"),
        ] {
            assert!(ptx.contains(&op), "{op} on {dt}");
        }
        if w == 32 {
            assert!(ptx.contains("prmt.b32") && ptx.contains("mul24.lo"), "{dt}");
        }
    }
}

/// The directed-rounding arithmetic of f32 and f64 assembles for sm_80 and sm_90a as one PTX
/// instruction each, in its direction.
#[test]
fn directed_rounding_assembles() {
    for dt in [DType::F32, DType::F64] {
        let k = trace(&format!("directed_{dt}"), |p| {
            let (x, y, out) = (p.ptr("x", dt), p.ptr("y", dt), p.ptr("out", dt));
            let o = program_id(0) * 128 + arange(0, 128);
            let (a, b) = (load_unmasked(x + o), load_unmasked(y + o));
            let mut acc = add_rn(a, b) + add_rz(a, b) + add_rd(a, b) + add_ru(a, b);
            acc += sub_rn(a, b) + sub_rz(a, b) + sub_rd(a, b) + sub_ru(a, b);
            acc += mul_rn(a, b) + mul_rz(a, b) + mul_rd(a, b) + mul_ru(a, b);
            acc += div_rn(a, b) + div_rz(a, b) + div_rd(a, b) + div_ru(a, b);
            acc += fma_rn(a, b, acc) + fma_rz(a, b, acc) + fma_rd(a, b, acc) + fma_ru(a, b, acc);
            acc += sqrt_rn(a) + sqrt_rz(a) + sqrt_rd(a) + sqrt_ru(b);
            acc += rcp_rn(a) + rcp_rz(a) + rcp_rd(a) + rcp_ru(b);
            store_unmasked(out + o, acc);
        })
        .unwrap();
        let ptx = assemble(&format!("directed_{dt}"), &k);
        let t = if dt == DType::F32 { "f32" } else { "f64" };
        for op in ["add", "sub", "mul", "div", "fma", "sqrt", "rcp"] {
            for m in ["rn", "rz", "rm", "rp"] {
                let ins = format!("{op}.{m}.{t}");
                assert!(ptx.contains(&ins), "{ins} missing");
            }
        }
    }
}

/// libdevice's conversions with a direction, the f64 words, the `fast_*` approximations,
/// `saturatef`, `rsqrt_rn` and the norms assemble for sm_80 and sm_90a, each conversion one
/// `cvt` in its direction (a cast to an integer rounds first: `cvt.rmi`, then the truncating
/// `cvt.rzi.sat`, which ptxas folds).
#[test]
fn libdevice_conversions_and_the_rest_assemble() {
    let k = trace("libdevice_rest", |p| {
        let (xf, xd) = (p.ptr("xf", DType::F32), p.ptr("xd", DType::F64));
        let (xi, xu) = (p.ptr("xi", DType::I32), p.ptr("xu", DType::U32));
        let (xl, xul) = (p.ptr("xl", DType::I64), p.ptr("xul", DType::U64));
        let (of, od, ol) = (
            p.ptr("of", DType::F32),
            p.ptr("od", DType::F64),
            p.ptr("ol", DType::I64),
        );
        let o = program_id(0) * 128 + arange(0, 128);
        let (f, d) = (load_unmasked(xf + o), load_unmasked(xd + o));
        let (i, u) = (load_unmasked(xi + o), load_unmasked(xu + o));
        let (l, ul) = (load_unmasked(xl + o), load_unmasked(xul + o));
        let mut acc = double2float_rn(d) + double2float_rz(d) + double2float_rd(d);
        acc += double2float_ru(d) + int2float_rd(i) + uint2float_ru(u) + ll2float_rz(l);
        acc += ull2float_rd(ul) + int2float_rn(i) + ll2float_ru(l);
        acc += fast_expf(f) + fast_exp10f(f) + fast_logf(f) + fast_log2f(f) + fast_log10f(f);
        acc +=
            fast_sinf(f) + fast_cosf(f) + fast_tanf(f) + fast_powf(f, acc) + fast_dividef(f, acc);
        acc += saturatef(f) + rsqrt_rn(f) + norm3d(f, acc, f) + rnorm4d(f, acc, f, acc);
        store_unmasked(of + o, acc);
        let mut dacc = ll2double_rd(l) + ull2double_ru(ul) + ll2double_rz(l) + int2double_rn(i);
        dacc += uint2double_rn(u) + hiloint2double(double2hiint(d), double2loint(d));
        dacc += norm3d(d, dacc, d) + rnorm3d(d, d, dacc);
        store_unmasked(od + o, dacc);
        let mut lacc = float2ll_rd(f) + double2ll_ru(d) + llrint(f) + llround(d);
        lacc += float2int_ru(f).to::<i64>() + double2uint_rz(d).to::<i64>();
        lacc += float2ull_rn(f).to::<i64>() + double2int_rd(d).to::<i64>();
        store_unmasked(ol + o, lacc);
    })
    .unwrap();
    let ptx = assemble("libdevice_rest", &k);
    for ins in [
        "cvt.rn.f32.f64",
        "cvt.rz.f32.f64",
        "cvt.rm.f32.f64",
        "cvt.rp.f32.f64",
        "cvt.rm.f32.s32",
        "cvt.rp.f32.u32",
        "cvt.rz.f32.s64",
        "cvt.rm.f32.u64",
        "cvt.rp.f32.s64",
        "cvt.rm.f64.s64",
        "cvt.rp.f64.u64",
        "cvt.rz.f64.s64",
        "cvt.rmi.f32.f32",
        "cvt.rpi.f64.f64",
        "ex2.approx",
        "lg2.approx",
        "sin.approx",
        "cos.approx",
        "rcp.rn.f64",
    ] {
        assert!(ptx.contains(ins), "{ins} missing");
    }
}

/// Casts into f16 and bf16 round down and up as `cvt.rm` / `cvt.rp` (from f32; from f64 and
/// wide integers through f32 rounded to odd, which makes the second rounding the right one).
#[test]
fn directed_casts_into_halves_assemble() {
    let k = trace("directed_halves", |p| {
        let (x, d, l) = (
            p.ptr("x", DType::F32),
            p.ptr("d", DType::F64),
            p.ptr("l", DType::I64),
        );
        let (oh, ob) = (p.ptr("oh", DType::F16), p.ptr("ob", DType::BF16));
        let o = program_id(0) * 128 + arange(0, 128);
        let (a, b, c) = (
            load_unmasked(x + o),
            load_unmasked(d + o),
            load_unmasked(l + o),
        );
        let h =
            a.cast_rounded(DType::F16, Rounding::Down) + b.cast_rounded(DType::F16, Rounding::Up);
        let h = h + c.cast_rounded(DType::F16, Rounding::Down);
        let bf =
            a.cast_rounded(DType::BF16, Rounding::Up) + b.cast_rounded(DType::BF16, Rounding::Down);
        store_unmasked(oh + o, h);
        store_unmasked(ob + o, bf);
    })
    .unwrap();
    let ptx = assemble("directed_halves", &k);
    for ins in [
        "cvt.rm.f16.f32",
        "cvt.rp.f16.f32",
        "cvt.rp.bf16.f32",
        "cvt.rm.bf16.f32",
    ] {
        assert!(ptx.contains(ins), "{ins} missing");
    }
}

/// fp8 loads, stores, casts, arithmetic, selection and a reduction assemble for sm_89 and
/// sm_90a; sm_80 has no fp8 conversions, and compiling for it is an error at the user's line.
#[test]
fn fp8_assembles_on_sm89_and_up_and_is_refused_below() {
    let k = trace("fp8_ops", |p| {
        let (x, y) = (p.ptr("x", DType::F8E4M3), p.ptr("y", DType::F8E5M2));
        let (o4, o5, of) = (
            p.ptr("o4", DType::F8E4M3),
            p.ptr("o5", DType::F8E5M2),
            p.ptr("of", DType::F32),
        );
        let o = program_id(0) * 128 + arange(0, 128);
        let (a, b) = (load_unmasked(x + o), load_unmasked(y + o));
        let s = a * a + b.to::<f8e4m3>();
        store_unmasked(o4 + o, select(s.gt(1.0), s, a));
        store_unmasked(o5 + o, (b - 2.0).to::<f64>().to::<f8e5m2>());
        store_unmasked(of + o, (a + b).to::<f32>() + sum(a.to::<f32>(), 0));
    })
    .unwrap();
    for (sm, ptx) in [89, 90]
        .into_iter()
        .zip(assemble_for("fp8_ops", &k, &[89, 90]))
    {
        for ins in [
            "cvt.rn.satfinite.e4m3x2.f32",
            "cvt.rn.satfinite.e5m2x2.f32",
            "cvt.rn.f16x2.e4m3x2",
        ] {
            assert!(ptx.contains(ins), "{ins} missing on sm_{sm}");
        }
    }
    let e = compile(&k, &Target { sm: 80 }, &options())
        .unwrap_err()
        .to_string();
    assert!(e.contains("sm_89") && e.contains("language_ops.rs"), "{e}");
}
