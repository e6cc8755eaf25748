//! GPU check of the language ops against the interpreter, bit for bit: every math-library
//! function (`jn` and `yn` with orders -20 to 20) and the exact compositions (`nextafter`, `ilogb`, `ldexp`, `frexp`) over a stride through
//! all f32 bit patterns (and f16 samples), Philox
//! random numbers (4x32 and 4x64), the integer intrinsics (`clz`, `popc`, `brev`, `ffs`,
//! `mulhi`, `hadd`, `rhadd`, `uhadd`, `urhadd`, `sad`, `usad`, `mul24`, `umul24`, `byte_perm`)
//! on i32, u32, i64 and u64, the directed-rounding arithmetic (`add_rz`, .., `rcp_ru`) on f32
//! and f64, libdevice's conversions with a direction (`double2float_*`, `ll2float_*`,
//! `ll2double_*`, `double2ll_*`, `float2int_*`, `float2uint_*`), `rsqrt_rn`, `saturatef`,
//! `norm3d` and `rnorm4d` on f32, the fp8 casts (f32 into
//! `f8e4m3` and `f8e5m2`, every fp8 pattern back to f32), the rounding family, pointer round
//! trips and a barrier; and fp8 dots on the tensor cores against float64 (within the f32
//! sums' rounding, the one check not bit for bit: the interpreter sums in another order).
//!
//!     cargo run --release -p tegula --example language_gpu_check
//!
//! Prints one line per check and exits non-zero on a mismatch. Needs a GPU.

use tegula::prelude::*;

#[tegula::kernel]
fn unary_op<T: Element>(x: Ptr<T>, y: Ptr<T>, n: i32, #[constexpr] which: u32) {
    let offs = program_id(0) * 256 + arange(0, 256);
    let mask = offs.lt(n);
    let a = load(x + offs, mask, 0.0);
    let r = match which {
        0 => asin(a),
        1 => acos(a),
        2 => atan(a),
        3 => sinh(a),
        4 => cosh(a),
        5 => asinh(a),
        6 => acosh(a),
        7 => atanh(a),
        8 => log1p(a),
        9 => expm1(a),
        10 => erfinv(a),
        11 => cbrt(a),
        12 => round(a),
        13 => rint(a),
        14 => trunc(a),
        15 => copysign(2.0, a),
        16 => select(isnan(a) | isinf(a) | signbit(a), 1.0, 0.0),
        17 => tan(a),
        18 => log10(a),
        19 => exp10(a),
        20 => erfc(a),
        21 => lgamma(a),
        22 => tgamma(a),
        23 => nextafter(a, f32::INFINITY),
        24 => ilogb(a).to::<T>(),
        // Exponents from -150 to 149: subnormal and overflowing results.
        25 => ldexp(a, offs % 300 - 150),
        26 => {
            let (m, e) = frexp(a);
            m + e.to::<T>()
        }
        27 => logb(a),
        28 => rcbrt(a),
        29 => normcdf(a),
        30 => sinpi(a),
        31 => cospi(a),
        32 => erfcx(a),
        33 => erfcinv(a),
        34 => normcdfinv(a),
        35 => cyl_bessel_i0(a),
        36 => cyl_bessel_i1(a),
        37 => j0(a),
        38 => j1(a),
        39 => y0(a),
        40 => y1(a),
        41 => sincospi(a).0,
        42 => sincospi(a).1,
        _ => a,
    };
    store(y + offs, r, mask);
}

#[tegula::kernel]
fn binary_op(x: Ptr<f32>, z: Ptr<f32>, y: Ptr<f32>, n: i32, #[constexpr] which: u32) {
    let offs = program_id(0) * 256 + arange(0, 256);
    let mask = offs.lt(n);
    let a = load(x + offs, mask, 0.0);
    let b = load(z + offs, mask, 0.0);
    let r = match which {
        0 => atan2(a, b),
        1 => pow(a, b),
        2 => hypot(a, b),
        3 => nextafter(a, b),
        4 => ldexp(a, ilogb(b) * 2),
        5 => fdim(a, b),
        6 => remainder(a, b),
        7 => rhypot(a, b),
        // y = x 2^k for k in -3..=3: exact multiples (signed zeros) and, at k = 1, ties.
        8 => remainder(a, ldexp(a, offs % 7 - 3)),
        // Orders -20 to 20 across the elements: the recurrences' loops run to the CTA's
        // largest count.
        10 => jn(offs % 41 - 20, a),
        11 => yn(offs % 41 - 20, a),
        12 => remquo(a, b).0,
        13 => remquo(a, b).1.to::<f32>(),
        _ => fmod(a, b),
    };
    store(y + offs, r, mask);
}

#[tegula::kernel]
fn random(w: Ptr<u32>, u: Ptr<f32>, g: Ptr<f32>, seed: i64, n: i32) {
    let offs = program_id(0) * 256 + arange(0, 256);
    let mask = offs.lt(n);
    let [a, b, c, d] = randint4x(seed, offs);
    store(w + offs * 4, a, mask);
    store(w + offs * 4 + 1, b, mask);
    store(w + offs * 4 + 2, c, mask);
    store(w + offs * 4 + 3, d, mask);
    store(u + offs, rand(seed, offs), mask);
    store(g + offs, randn(seed, offs), mask);
}

/// Philox 4x64 on 64-bit counters that use all their bits.
#[tegula::kernel]
fn random64(w: Ptr<u64>, seed: i64, n: i32) {
    let offs = program_id(0) * 256 + arange(0, 256);
    let mask = offs.lt(n);
    let c = offs.to::<i64>() * 0x1_0000_0001i64 + seed;
    let words = philox(seed, [c, c ^ 0x5555, c * 3, -c].map(Operand::Tile), 10);
    for (i, word) in words.into_iter().enumerate() {
        store(w + offs * 4 + i as i32, word, mask);
    }
}

/// libdevice's integer intrinsics on one integer dtype (`mul24`, `umul24` and `byte_perm`,
/// `which` 10 to 12, on 32-bit dtypes only).
#[tegula::kernel]
fn int_op<T: Element>(x: Ptr<T>, z: Ptr<T>, w: Ptr<T>, y: Ptr<T>, n: i32, #[constexpr] which: u32) {
    let offs = program_id(0) * 256 + arange(0, 256);
    let mask = offs.lt(n);
    let (a, b, c) = (
        load(x + offs, mask, 0),
        load(z + offs, mask, 0),
        load(w + offs, mask, 0),
    );
    let r = match which {
        0 => clz(a).to::<T>(),
        1 => popc(a).to::<T>(),
        2 => brev(a),
        3 => ffs(a).to::<T>(),
        4 => mulhi(a, b),
        5 => hadd(a, b),
        6 => rhadd(a, b),
        7 => uhadd(a, b),
        8 => urhadd(a, b),
        9 => sad(a, b, c),
        10 => mul24(a, b),
        11 => umul24(a, b),
        12 => byte_perm(a, b, c),
        _ => usad(a, b, c),
    };
    store(y + offs, r, mask);
}

/// Runs every intrinsic of `int_op` on `gpu` and `cpu` over the bit patterns `v` (as `T`
/// through `conv`) and returns the number of differing elements.
fn int_ops<T: Element + PartialEq + std::fmt::Debug>(
    gpu: &Device,
    cpu: &Device,
    v: &[u64],
    conv: fn(u64) -> T,
) -> tegula::Result<usize> {
    let n = v.len();
    let xs: Vec<T> = v.iter().map(|&b| conv(b)).collect();
    let zs: Vec<T> = v
        .iter()
        .map(|&b| conv(b.rotate_left(17) ^ 0x9e37_79b9_7f4a_7c15))
        .collect();
    let ws: Vec<T> = v
        .iter()
        .map(|&b| conv(b.wrapping_mul(0x2545_f491_4f6c_dd1d)))
        .collect();
    let names = [
        "clz",
        "popc",
        "brev",
        "ffs",
        "mulhi",
        "hadd",
        "rhadd",
        "uhadd",
        "urhadd",
        "sad",
        "mul24",
        "umul24",
        "byte_perm",
        "usad",
    ];
    let wide = std::mem::size_of::<T>() == 8;
    let mut failed = 0;
    for (which, name) in names.iter().enumerate() {
        if wide && (10..=12).contains(&which) {
            continue;
        }
        let mut out = Vec::new();
        for dev in [gpu, cpu] {
            let x = dev.from_slice(&xs, [n])?;
            let z = dev.from_slice(&zs, [n])?;
            let w = dev.from_slice(&ws, [n])?;
            let y = dev.empty::<T>([n])?;
            int_op::launch(
                dev,
                (n as u32).div_ceil(256),
                &x,
                &z,
                &w,
                &y,
                n as i32,
                which as u32,
            )?;
            out.push(y.to_vec()?);
        }
        let bad = (0..n).filter(|&i| out[0][i] != out[1][i]).count();
        let first = (0..n).find(|&i| out[0][i] != out[1][i]);
        println!(
            "{} {name}: {n} elements, {bad} differ{}",
            std::any::type_name::<T>(),
            first.map_or(String::new(), |i| format!(
                " (first ({:?}, {:?}, {:?}): gpu {:?} cpu {:?})",
                xs[i], zs[i], ws[i], out[0][i], out[1][i]
            ))
        );
        failed += bad;
    }
    Ok(failed)
}

/// libdevice's directed-rounding arithmetic on f32 or f64: `which` is 4 op + mode, the ops
/// add, sub, mul, div, fma, sqrt, rcp and the modes rn, rz, rd, ru.
#[tegula::kernel]
fn rounded_op<T: Element>(
    x: Ptr<T>,
    z: Ptr<T>,
    w: Ptr<T>,
    y: Ptr<T>,
    n: i32,
    #[constexpr] which: u32,
) {
    let offs = program_id(0) * 256 + arange(0, 256);
    let mask = offs.lt(n);
    let (a, b, c) = (
        load(x + offs, mask, 0.0),
        load(z + offs, mask, 0.0),
        load(w + offs, mask, 0.0),
    );
    let r = match which {
        0 => add_rn(a, b),
        1 => add_rz(a, b),
        2 => add_rd(a, b),
        3 => add_ru(a, b),
        4 => sub_rn(a, b),
        5 => sub_rz(a, b),
        6 => sub_rd(a, b),
        7 => sub_ru(a, b),
        8 => mul_rn(a, b),
        9 => mul_rz(a, b),
        10 => mul_rd(a, b),
        11 => mul_ru(a, b),
        12 => div_rn(a, b),
        13 => div_rz(a, b),
        14 => div_rd(a, b),
        15 => div_ru(a, b),
        16 => fma_rn(a, b, c),
        17 => fma_rz(a, b, c),
        18 => fma_rd(a, b, c),
        19 => fma_ru(a, b, c),
        20 => sqrt_rn(a),
        21 => sqrt_rz(a),
        22 => sqrt_rd(a),
        23 => sqrt_ru(a),
        24 => rcp_rn(a),
        25 => rcp_rz(a),
        26 => rcp_rd(a),
        _ => rcp_ru(a),
    };
    store(y + offs, r, mask);
}

/// Every directed op of `rounded_op` on `gpu` and `cpu` over `xs`, `zs`, `ws` (bit for bit,
/// any NaN for any NaN); returns the number of differing elements.
fn rounded_ops<T: Element + Copy + std::fmt::Debug>(
    gpu: &Device,
    cpu: &Device,
    cols: [&[T]; 3],
    bits: fn(T) -> u64,
    nan: fn(T) -> bool,
) -> tegula::Result<usize> {
    let n = cols[0].len();
    let ops = ["add", "sub", "mul", "div", "fma", "sqrt", "rcp"];
    let mut failed = 0;
    for which in 0..28u32 {
        let name = format!(
            "{}_{}",
            ops[which as usize / 4],
            ["rn", "rz", "rd", "ru"][which as usize % 4]
        );
        let mut out = Vec::new();
        for dev in [gpu, cpu] {
            let x = dev.from_slice(cols[0], [n])?;
            let z = dev.from_slice(cols[1], [n])?;
            let w = dev.from_slice(cols[2], [n])?;
            let y = dev.empty::<T>([n])?;
            rounded_op::launch(
                dev,
                (n as u32).div_ceil(256),
                &x,
                &z,
                &w,
                &y,
                n as i32,
                which,
            )?;
            out.push(y.to_vec()?);
        }
        let same =
            |i: usize| bits(out[0][i]) == bits(out[1][i]) || (nan(out[0][i]) && nan(out[1][i]));
        let bad = (0..n).filter(|&i| !same(i)).count();
        let first = (0..n).find(|&i| !same(i));
        println!(
            "{} {name}: {n} elements, {bad} differ{}",
            std::any::type_name::<T>(),
            first.map_or(String::new(), |i| format!(
                " (first ({:?}, {:?}, {:?}): gpu {:?} cpu {:?})",
                cols[0][i], cols[1][i], cols[2][i], out[0][i], out[1][i]
            ))
        );
        failed += bad;
    }
    Ok(failed)
}

#[tegula::kernel]
fn pointers(x: Ptr<f32>, y: Ptr<f32>, d: Ptr<i64>) {
    let o = arange(0, 256);
    store_unmasked(y + o, o.to::<f32>());
    debug_barrier();
    let back = int_to_ptr::<f32>((y + (255 - o)).to_int());
    let v = load_unmasked(back);
    let (p, q) = split(join(v, load_unmasked(x + o)));
    store_unmasked(x + o, p + q);
    store_unmasked(d + o, (y + o).to_int() - y.to_int());
}

fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// libdevice's conversions in direction `mode` (rn, rz, rd, ru): f64 and i64 to f32, i64 to
/// f64, f64 to i64, f32 to i32 and u32.
#[tegula::kernel]
#[allow(clippy::too_many_arguments)]
fn conversion_op(
    xf: Ptr<f32>,
    xd: Ptr<f64>,
    xl: Ptr<i64>,
    of: Ptr<f32>,
    ol2f: Ptr<f32>,
    od: Ptr<f64>,
    ol: Ptr<i64>,
    oi: Ptr<i32>,
    ou: Ptr<u32>,
    n: i32,
    #[constexpr] mode: u32,
) {
    let offs = program_id(0) * 256 + arange(0, 256);
    let mask = offs.lt(n);
    let (f, d, l) = (
        load(xf + offs, mask, 0.0),
        load(xd + offs, mask, 0.0),
        load(xl + offs, mask, 0),
    );
    let (a, b, c, e, g, h) = match mode {
        0 => (
            double2float_rn(d),
            ll2float_rn(l),
            ll2double_rn(l),
            double2ll_rn(d),
            float2int_rn(f),
            float2uint_rn(f),
        ),
        1 => (
            double2float_rz(d),
            ll2float_rz(l),
            ll2double_rz(l),
            double2ll_rz(d),
            float2int_rz(f),
            float2uint_rz(f),
        ),
        2 => (
            double2float_rd(d),
            ll2float_rd(l),
            ll2double_rd(l),
            double2ll_rd(d),
            float2int_rd(f),
            float2uint_rd(f),
        ),
        _ => (
            double2float_ru(d),
            ll2float_ru(l),
            ll2double_ru(l),
            double2ll_ru(d),
            float2int_ru(f),
            float2uint_ru(f),
        ),
    };
    store(of + offs, a, mask);
    store(ol2f + offs, b, mask);
    store(od + offs, c, mask);
    store(ol + offs, e, mask);
    store(oi + offs, g, mask);
    store(ou + offs, h, mask);
}

/// Every mode of `conversion_op` on `gpu` and `cpu` (bit for bit, any NaN for any NaN);
/// returns the number of differing elements.
fn conversions(
    gpu: &Device,
    cpu: &Device,
    xf: &[f32],
    xd: &[f64],
    xl: &[i64],
) -> tegula::Result<usize> {
    let n = xf.len();
    let mut failed = 0;
    for mode in 0..4u32 {
        let mut out: Vec<[Vec<u64>; 6]> = Vec::new();
        for dev in [gpu, cpu] {
            let (f, d, l) = (
                dev.from_slice(xf, [n])?,
                dev.from_slice(xd, [n])?,
                dev.from_slice(xl, [n])?,
            );
            let (of, ol2f) = (dev.empty::<f32>([n])?, dev.empty::<f32>([n])?);
            let (od, ol) = (dev.empty::<f64>([n])?, dev.empty::<i64>([n])?);
            let (oi, ou) = (dev.empty::<i32>([n])?, dev.empty::<u32>([n])?);
            conversion_op::launch(
                dev,
                (n as u32).div_ceil(256),
                &f,
                &d,
                &l,
                &of,
                &ol2f,
                &od,
                &ol,
                &oi,
                &ou,
                n as i32,
                mode,
            )?;
            let f32_bits = |v: Vec<f32>| {
                v.iter()
                    .map(|x| {
                        if x.is_nan() {
                            u64::MAX
                        } else {
                            x.to_bits() as u64
                        }
                    })
                    .collect::<Vec<u64>>()
            };
            out.push([
                f32_bits(of.to_vec()?),
                f32_bits(ol2f.to_vec()?),
                od.to_vec()?.iter().map(|x| x.to_bits()).collect(),
                ol.to_vec()?.iter().map(|&x| x as u64).collect(),
                oi.to_vec()?.iter().map(|&x| x as u32 as u64).collect(),
                ou.to_vec()?.iter().map(|&x| x as u64).collect(),
            ]);
        }
        let m = ["rn", "rz", "rd", "ru"][mode as usize];
        let names = [
            "double2float",
            "ll2float",
            "ll2double",
            "double2ll",
            "float2int",
            "float2uint",
        ];
        for (k, name) in names.iter().enumerate() {
            let bad: Vec<usize> = (0..n).filter(|&i| out[0][k][i] != out[1][k][i]).collect();
            println!(
                "{name}_{m}: {n} elements, {} differ{}",
                bad.len(),
                bad.first().map_or(String::new(), |&i| format!(
                    " (first ({:e}, {:e}, {}): gpu {:#x} cpu {:#x})",
                    xf[i], xd[i], xl[i], out[0][k][i], out[1][k][i]
                ))
            );
            failed += bad.len();
        }
    }
    Ok(failed)
}

/// f32 into both fp8 formats, and every fp8 pattern (as `y4`, `y5`) back to f32.
#[tegula::kernel]
fn fp8_casts(
    x: Ptr<f32>,
    y4: Ptr<f8e4m3>,
    y5: Ptr<f8e5m2>,
    o4: Ptr<f8e4m3>,
    o5: Ptr<f8e5m2>,
    of: Ptr<f32>,
    n: i32,
) {
    let offs = program_id(0) * 256 + arange(0, 256);
    let mask = offs.lt(n);
    let a = load(x + offs, mask, 0.0);
    store(o4 + offs, a.to::<f8e4m3>(), mask);
    store(o5 + offs, a.to::<f8e5m2>(), mask);
    let back =
        load(y4 + offs, mask, 0.0).to::<f32>() + load(y5 + offs, mask, 0.0).to::<f32>() * 1024.0;
    store(of + offs, back, mask);
}

/// `C = A B` over fp8 blocks, as Triton's fp8 matmuls write it: A `[m, k]`, B either `[n, k]`
/// read through `.trans()` (`b_nk`: K contiguous, the tensor cores' fp8 operands, streamed
/// and on `wgmma` on Hopper) or `[k, n]` (K across its rows: transposed through registers).
#[tegula::kernel]
fn fp8_matmul<T: Element>(
    a: Ptr<T>,
    b: Ptr<T>,
    c: Ptr<f32>,
    m: i32,
    n: i32,
    k: i32,
    #[constexpr] bm: usize,
    #[constexpr] bn: usize,
    #[constexpr] bk: usize,
    #[constexpr] b_nk: bool,
) {
    let offs_m = program_id(0) * bm + arange(0, bm as i64);
    let offs_n = program_id(1) * bn + arange(0, bn as i64);
    let offs_k = arange(0, bk as i64);
    let mut acc = zeros::<f32>([bm, bn]);
    for k0 in range(0, k, bk) {
        let ks = k0 + offs_k;
        let at = load(
            a + offs_m.col() * k + ks.row(),
            offs_m.col().lt(m) & ks.row().lt(k),
            0.0,
        );
        let bt = if b_nk {
            load(
                b + offs_n.col() * k + ks.row(),
                offs_n.col().lt(n) & ks.row().lt(k),
                0.0,
            )
            .trans()
        } else {
            load(
                b + ks.col() * n + offs_n.row(),
                ks.col().lt(k) & offs_n.row().lt(n),
                0.0,
            )
        };
        acc = dot_acc(at, bt, acc);
    }
    store(
        c + offs_m.col() * n + offs_n.row(),
        acc,
        offs_m.col().lt(m) & offs_n.row().lt(n),
    );
}

/// fp8 dots on `gpu` (both formats; `wgmma` where the compiler places it, `mma.sync`, and B
/// with K across its rows) against float64. Products are exact; the tensor cores' fp8 sums
/// may keep fewer bits than f32 (DeepSeek-V3's report measured about 14 on Hopper), so an
/// element fails beyond `2^-10 sum |a b|` (a wrong fragment or byte order is off by the
/// products themselves), and the worst error is printed in units of `sum |a b|` beside
/// what f32 sums alone would allow (`K 2^-24`).
fn fp8_dots(gpu: &Device) -> tegula::Result<usize> {
    let mut failed = 0;
    for e5m2 in [false, true] {
        for (b_nk, mma, what) in [
            (
                true,
                MmaChoice::Auto,
                "K-contiguous B, the compiler's choice",
            ),
            (true, MmaChoice::Sync, "K-contiguous B, mma.sync"),
            (false, MmaChoice::Auto, "B with K across its rows"),
        ] {
            let (m, n, k) = (300, 200, 448);
            let (worst, bad) = if e5m2 {
                fp8_dot::<f8e5m2>(gpu, (m, n, k), b_nk, mma)?
            } else {
                fp8_dot::<f8e4m3>(gpu, (m, n, k), b_nk, mma)?
            };
            println!(
                "fp8 dot {} {m}x{n}x{k} ({what}): {bad} elements off by more than 2^-10 of \
                 sum |a b|; worst {worst:.2e} of it (f32 sums alone: {:.2e})",
                if e5m2 { "e5m2" } else { "e4m3" },
                k as f64 * 2f64.powi(-24)
            );
            failed += bad;
        }
    }
    Ok(failed)
}

/// One [`fp8_dots`] case: `fp8_matmul` of `T` tiles, B given as `[n, k]` when `b_nk`, else
/// `[k, n]`; the worst error in units of `sum |a b|`, and the elements beyond 2^-10 of it.
fn fp8_dot<T: Element>(
    gpu: &Device,
    (m, n, k): (usize, usize, usize),
    b_nk: bool,
    mma: MmaChoice,
) -> tegula::Result<(f64, usize)> {
    let a8: Vec<T> = (0..m * k)
        .map(|i| T::from_f64(((i * 37 % 101) as f64 - 50.0) / 16.0))
        .collect();
    let b8: Vec<T> = (0..k * n)
        .map(|i| T::from_f64(((i * 53 % 97) as f64 - 48.0) / 8.0))
        .collect();
    let (a, b) = (gpu.from_slice(&a8, [m, k])?, gpu.from_slice(&b8, [k * n])?);
    let c = gpu.empty::<f32>([m, n])?;
    let config = LaunchConfig::new(4, 3).with_mma(mma);
    let grid = ((m as u32).div_ceil(128), (n as u32).div_ceil(128), 1);
    fp8_matmul::launch_with::<T>(
        gpu, grid, config, &a, &b, &c, m as i32, n as i32, k as i32, 128, 128, 64, b_nk,
    )?;
    let (a64, b64): (Vec<f64>, Vec<f64>) = (
        a8.iter().map(|x| x.to_f64()).collect(),
        b8.iter().map(|x| x.to_f64()).collect(),
    );
    let got = c.to_vec()?;
    let (mut worst, mut bad) = (0f64, 0);
    for i in 0..m {
        for j in 0..n {
            let (mut want, mut scale) = (0f64, 0f64);
            for x in 0..k {
                let bx = if b_nk { b64[j * k + x] } else { b64[x * n + j] };
                want += a64[i * k + x] * bx;
                scale += (a64[i * k + x] * bx).abs();
            }
            let rel = (got[i * n + j] as f64 - want).abs() / scale.max(f64::MIN_POSITIVE);
            worst = worst.max(rel);
            bad += (rel > 2f64.powi(-10)) as usize;
        }
    }
    Ok((worst, bad))
}

/// `fp8_casts` on `gpu` and `cpu` over `xs` (bit for bit, any f32 NaN for any NaN).
fn fp8(gpu: &Device, cpu: &Device, xs: &[f32]) -> tegula::Result<usize> {
    let n = xs.len();
    let y4: Vec<f8e4m3> = (0..n).map(|i| f8e4m3::from_bits(i as u8)).collect();
    let y5: Vec<f8e5m2> = (0..n).map(|i| f8e5m2::from_bits((i * 7) as u8)).collect();
    let mut out = Vec::new();
    for dev in [gpu, cpu] {
        let (x, a, b) = (
            dev.from_slice(xs, [n])?,
            dev.from_slice(&y4, [n])?,
            dev.from_slice(&y5, [n])?,
        );
        let (o4, o5, of) = (
            dev.empty::<f8e4m3>([n])?,
            dev.empty::<f8e5m2>([n])?,
            dev.empty::<f32>([n])?,
        );
        fp8_casts::launch(
            dev,
            (n as u32).div_ceil(256),
            &x,
            &a,
            &b,
            &o4,
            &o5,
            &of,
            n as i32,
        )?;
        let f = of.to_vec()?;
        out.push((o4.to_vec()?, o5.to_vec()?, f));
    }
    let (g, c) = (&out[0], &out[1]);
    let bad4 = (0..n)
        .filter(|&i| g.0[i].to_bits() != c.0[i].to_bits())
        .count();
    let bad5 = (0..n)
        .filter(|&i| g.1[i].to_bits() != c.1[i].to_bits())
        .count();
    let badf = (0..n)
        .filter(|&i| g.2[i].to_bits() != c.2[i].to_bits() && !(g.2[i].is_nan() && c.2[i].is_nan()))
        .count();
    let first = (0..n)
        .find(|&i| g.0[i].to_bits() != c.0[i].to_bits() || g.1[i].to_bits() != c.1[i].to_bits());
    println!(
        "fp8 casts: {n} elements, {bad4} e4m3 / {bad5} e5m2 / {badf} back to f32 differ{}",
        first.map_or(String::new(), |i| format!(
            " (first {:e}: gpu {:#04x} {:#04x} cpu {:#04x} {:#04x})",
            xs[i],
            g.0[i].to_bits(),
            g.1[i].to_bits(),
            c.0[i].to_bits(),
            c.1[i].to_bits()
        ))
    );
    Ok(bad4 + bad5 + badf)
}

/// The exact compositions of libdevice's rest on f32: `rsqrt_rn`, `saturatef`, `norm3d`,
/// `rnorm4d`.
#[tegula::kernel]
fn rest_op(x: Ptr<f32>, z: Ptr<f32>, y: Ptr<f32>, n: i32, #[constexpr] which: u32) {
    let offs = program_id(0) * 256 + arange(0, 256);
    let mask = offs.lt(n);
    let (a, b) = (load(x + offs, mask, 0.0), load(z + offs, mask, 0.0));
    let r = match which {
        0 => rsqrt_rn(a),
        1 => saturatef(a),
        2 => norm3d(a, b, a * 0.5),
        _ => rnorm4d(a, b, b * 3.0, a - b),
    };
    store(y + offs, r, mask);
}

/// Every function of `rest_op` on `gpu` and `cpu` (bit for bit, any NaN for any NaN).
fn rest(gpu: &Device, cpu: &Device, xs: &[f32], zs: &[f32]) -> tegula::Result<usize> {
    let n = xs.len();
    let mut failed = 0;
    for (which, name) in ["rsqrt_rn", "saturatef", "norm3d", "rnorm4d"]
        .iter()
        .enumerate()
    {
        let mut out = Vec::new();
        for dev in [gpu, cpu] {
            let (x, z, y) = (
                dev.from_slice(xs, [n])?,
                dev.from_slice(zs, [n])?,
                dev.empty::<f32>([n])?,
            );
            rest_op::launch(
                dev,
                (n as u32).div_ceil(256),
                &x,
                &z,
                &y,
                n as i32,
                which as u32,
            )?;
            out.push(y.to_vec()?);
        }
        let same = |i: usize| {
            out[0][i].to_bits() == out[1][i].to_bits() || (out[0][i].is_nan() && out[1][i].is_nan())
        };
        let bad = (0..n).filter(|&i| !same(i)).count();
        let first = (0..n).find(|&i| !same(i));
        println!(
            "{name}: {n} elements, {bad} differ{}",
            first.map_or(String::new(), |i| format!(
                " (first ({:e}, {:e}): gpu {:e} cpu {:e})",
                xs[i], zs[i], out[0][i], out[1][i]
            ))
        );
        failed += bad;
    }
    Ok(failed)
}

fn main() -> tegula::Result<()> {
    let gpu = Device::cuda(0)?;
    let cpu = Device::cpu();
    let mut failed = 0;
    let mut xs: Vec<f32> = Vec::new();
    let mut bits = 0u32;
    while bits < 0x7F80_0000 {
        xs.push(f32::from_bits(bits));
        xs.push(-f32::from_bits(bits));
        bits += 509;
    }
    xs.extend([
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        0.5,
        -0.5,
        1.0,
        -1.0,
    ]);
    let n = xs.len();
    let grid = (n as u32).div_ceil(256);
    let names = [
        "asin",
        "acos",
        "atan",
        "sinh",
        "cosh",
        "asinh",
        "acosh",
        "atanh",
        "log1p",
        "expm1",
        "erfinv",
        "cbrt",
        "round",
        "rint",
        "trunc",
        "copysign",
        "classify",
        "tan",
        "log10",
        "exp10",
        "erfc",
        "lgamma",
        "tgamma",
        "nextafter",
        "ilogb",
        "ldexp",
        "frexp",
        "logb",
        "rcbrt",
        "normcdf",
        "sinpi",
        "cospi",
        "erfcx",
        "erfcinv",
        "normcdfinv",
        "cyl_bessel_i0",
        "cyl_bessel_i1",
        "j0",
        "j1",
        "y0",
        "y1",
        "sincospi.0",
        "sincospi.1",
    ];
    for (which, name) in names.iter().enumerate() {
        let mut out = Vec::new();
        for dev in [&gpu, &cpu] {
            let x = dev.from_slice(&xs, [n])?;
            let y = dev.empty::<f32>([n])?;
            unary_op::launch(dev, grid, &x, &y, n as i32, which as u32)?;
            out.push(y.to_vec()?);
        }
        let bad = (0..n).filter(|&i| !same(out[0][i], out[1][i])).count();
        let first = (0..n).find(|&i| !same(out[0][i], out[1][i]));
        println!(
            "f32 {name}: {n} inputs, {bad} differ{}",
            first.map_or(String::new(), |i| format!(
                " (first {:e}: gpu {:e} cpu {:e})",
                xs[i], out[0][i], out[1][i]
            ))
        );
        failed += bad;
        // f16 and bf16 through f32.
        let h: Vec<half::f16> = xs.iter().map(|&x| half::f16::from_f32(x)).collect();
        let mut oh = Vec::new();
        for dev in [&gpu, &cpu] {
            let x = dev.from_slice(&h, [n])?;
            let y = dev.empty::<half::f16>([n])?;
            unary_op::launch(dev, grid, &x, &y, n as i32, which as u32)?;
            oh.push(y.to_vec()?);
        }
        let bad = (0..n)
            .filter(|&i| !same(oh[0][i].to_f32(), oh[1][i].to_f32()))
            .count();
        println!("f16 {name}: {bad} differ");
        failed += bad;
    }
    let zs: Vec<f32> = xs.iter().rev().copied().collect();
    let binary_names = [
        "atan2",
        "pow",
        "hypot",
        "nextafter",
        "ldexp",
        "fdim",
        "remainder",
        "rhypot",
        "remainder_scaled",
        "fmod",
        "jn",
        "yn",
        "remquo.0",
        "remquo.1",
    ];
    for (which, name) in binary_names.iter().enumerate() {
        let mut out = Vec::new();
        for dev in [&gpu, &cpu] {
            let x = dev.from_slice(&xs, [n])?;
            let z = dev.from_slice(&zs, [n])?;
            let y = dev.empty::<f32>([n])?;
            binary_op::launch(dev, grid, &x, &z, &y, n as i32, which as u32)?;
            out.push(y.to_vec()?);
        }
        let bad = (0..n).filter(|&i| !same(out[0][i], out[1][i])).count();
        let first = (0..n).find(|&i| !same(out[0][i], out[1][i]));
        println!(
            "f32 {name}: {n} pairs, {bad} differ{}",
            first.map_or(String::new(), |i| format!(
                " (first ({:e}, {:e}): gpu {:e} cpu {:e})",
                xs[i], zs[i], out[0][i], out[1][i]
            ))
        );
        failed += bad;
    }
    let m = 1 << 16;
    let mut res = Vec::new();
    for dev in [&gpu, &cpu] {
        let w = dev.empty::<u32>([4 * m])?;
        let u = dev.empty::<f32>([m])?;
        let g = dev.empty::<f32>([m])?;
        random::launch(
            dev,
            (m as u32) / 256,
            &w,
            &u,
            &g,
            0x1234_5678_9ABC,
            m as i32,
        )?;
        res.push((w.to_vec()?, u.to_vec()?, g.to_vec()?));
    }
    let wbad = (0..4 * m).filter(|&i| res[0].0[i] != res[1].0[i]).count();
    let ubad = (0..m).filter(|&i| !same(res[0].1[i], res[1].1[i])).count();
    let gmax = (0..m)
        .map(|i| (res[0].2[i] - res[1].2[i]).abs())
        .fold(0.0f32, f32::max);
    println!(
        "randint4x: {wbad} words differ; rand: {ubad} differ; randn: max |gpu - cpu| {gmax:e}"
    );
    failed += wbad + ubad + (gmax > 1e-5) as usize;
    let mut words64 = Vec::new();
    for dev in [&gpu, &cpu] {
        let w = dev.empty::<u64>([4 * m])?;
        random64::launch(dev, (m as u32) / 256, &w, -0x0123_4567_89AB_CDEF, m as i32)?;
        words64.push(w.to_vec()?);
    }
    let bad64 = (0..4 * m)
        .filter(|&i| words64[0][i] != words64[1][i])
        .count();
    println!("philox 4x64: {bad64} words differ");
    failed += bad64;
    // Integer intrinsics: edge patterns (powers of two, their neighbours, the extremes) and
    // a stride of multiplicative hashes.
    let mut pats: Vec<u64> = vec![0, 1, u64::MAX, u64::MAX >> 1, 1 << 63, 0xff_ffff, 0x80_0000];
    for k in 0..64 {
        pats.extend([1u64 << k, (1u64 << k) - 1, !(1u64 << k), 1u64 << (k % 32)]);
    }
    pats.extend((0..1u64 << 16).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (i % 40)));
    failed += int_ops(&gpu, &cpu, &pats, |b| b as i32)?;
    failed += int_ops(&gpu, &cpu, &pats, |b| b as u32)?;
    failed += int_ops(&gpu, &cpu, &pats, |b| b as i64)?;
    failed += int_ops(&gpu, &cpu, &pats, |b| b)?;
    // Directed roundings: a stride through the f32 patterns, the second and third operands
    // near the first (cancellation, ties of sums) or anywhere; f64 from their bits and scaled.
    let mut d32: [Vec<f32>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    let mut bits = 0u32;
    let mut k = 0u32;
    while let Some(next) = bits.checked_add(40_009) {
        let x = f32::from_bits(bits);
        let y = match k % 4 {
            0 => -x * (1.0 + f32::EPSILON * (k % 7) as f32),
            1 => f32::from_bits((x.to_bits() & 0xff80_0000).wrapping_sub(12 << 23)),
            _ => f32::from_bits(bits.rotate_left(11) ^ k),
        };
        let w = f32::from_bits(bits.wrapping_mul(2_654_435_761));
        d32[0].push(x);
        d32[1].push(y);
        d32[2].push(if k.is_multiple_of(3) { -(x * y) } else { w });
        bits = next;
        k += 1;
    }
    let d32r = [&d32[0][..], &d32[1][..], &d32[2][..]];
    failed += rounded_ops(&gpu, &cpu, d32r, |x| x.to_bits() as u64, f32::is_nan)?;
    let d64: Vec<Vec<f64>> = (0..3)
        .map(|c| {
            d32[c]
                .iter()
                .enumerate()
                .map(|(i, &x)| {
                    let v = x as f64 * (1.0 + f64::EPSILON * (i % 5) as f64);
                    match i % 5 {
                        0 => {
                            f64::from_bits((x.to_bits() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))
                        }
                        1 => v * 1e-300,
                        2 => v * 1e290,
                        _ => v,
                    }
                })
                .collect()
        })
        .collect();
    let d64r = [&d64[0][..], &d64[1][..], &d64[2][..]];
    failed += rounded_ops(&gpu, &cpu, d64r, f64::to_bits, f64::is_nan)?;
    // Integers of every bit length (ties at f32's and f64's precision among them).
    let ls: Vec<i64> = d64[0]
        .iter()
        .enumerate()
        .map(|(i, x)| (x.to_bits() as i64) >> (i % 64))
        .collect();
    let fs: Vec<f32> = d32[0]
        .iter()
        .enumerate()
        .map(|(i, &x)| x * (1u64 << (i % 40)) as f32)
        .collect();
    failed += conversions(&gpu, &cpu, &fs, &d64[0], &ls)?;
    // f32s near and between every fp8 value (scaled copies of the stride's patterns), and
    // the stride itself.
    let f8in: Vec<f32> = d32[0]
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            if i % 2 == 0 {
                x
            } else {
                (x.to_bits() % 1_000_000) as f32 / 1000.0 - 500.0
            }
        })
        .collect();
    failed += fp8(&gpu, &cpu, &f8in)?;
    failed += fp8_dots(&gpu)?;
    failed += rest(&gpu, &cpu, &d32[0], &d32[1])?;
    let x = gpu.from_slice(&vec![1.0f32; 256], [256])?;
    let y = gpu.empty::<f32>([256])?;
    let d = gpu.empty::<i64>([256])?;
    pointers::launch(&gpu, 1u32, &x, &y, &d)?;
    let xv = x.to_vec()?;
    let dv = d.to_vec()?;
    let ok = (0..256).all(|i| xv[i] == (255 - i) as f32 + 1.0 && dv[i] == 4 * i as i64);
    println!(
        "pointers, barrier, split/join: {}",
        if ok { "ok" } else { "WRONG" }
    );
    failed += !ok as usize;
    if failed > 0 {
        eprintln!("{failed} mismatches");
        std::process::exit(1);
    }
    println!("all bit-identical");
    Ok(())
}
