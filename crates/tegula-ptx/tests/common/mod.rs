//! Kernels shared by the golden and ptxas tests, built with the tracing builder.
#![allow(dead_code)]

use tegula_ir::prelude::*;
use tegula_ir::{Kernel, ReduceOp};

/// Marks every pointer and integer parameter as divisible by 16 (Triton's specialization).
pub fn aligned(mut k: Kernel) -> Kernel {
    for p in &mut k.params {
        if p.ty.is_ptr() || p.ty.dtype().is_int() {
            p.facts.divisibility = 16;
        }
    }
    k
}

pub fn vector_add(dt: DType, block: usize) -> Kernel {
    trace("vector_add", |p| {
        let (x, y, out) = (p.ptr("x", dt), p.ptr("y", dt), p.ptr("out", dt));
        let n = p.scalar("n", DType::I32);
        let offs = program_id(0) * block + arange(0, block as i64);
        let mask = offs.lt(n);
        let s = load(x + offs, mask, 0) + load(y + offs, mask, 0);
        store(out + offs, s, mask);
    })
    .unwrap()
}

pub fn softmax(dt: DType, block: usize) -> Kernel {
    trace("softmax", |p| {
        let (inp, out) = (p.ptr("inp", dt), p.ptr("out", dt));
        let (stride, n) = (p.scalar("stride", DType::I32), p.scalar("n", DType::I32));
        let row = program_id(0);
        let cols = arange(0, block as i64);
        let mask = cols.lt(n);
        let x = load(inp + row * stride + cols, mask, f64::NEG_INFINITY).to::<f32>();
        let m = max(x, 0);
        let e = exp(x - m);
        let s = sum(e, 0);
        store(out + row * stride + cols, (e / s).cast(dt), mask);
    })
    .unwrap()
}

pub fn layer_norm(dt: DType, block: usize) -> Kernel {
    trace("layer_norm", |p| {
        let (x, y, w, b) = (
            p.ptr("x", dt),
            p.ptr("y", dt),
            p.ptr("w", dt),
            p.ptr("b", dt),
        );
        let (mean_out, rstd_out) = (p.ptr("mean", DType::F32), p.ptr("rstd", DType::F32));
        let (stride, n) = (p.scalar("stride", DType::I32), p.scalar("n", DType::I32));
        let eps = p.scalar("eps", DType::F32);
        let row = program_id(0);
        let cols = arange(0, block as i64);
        let mask = cols.lt(n);
        let xv = load(x + row * stride + cols, mask, 0.0).to::<f32>();
        let nf = n.to::<f32>();
        let mean = sum(xv, 0) / nf;
        let xc = select(mask, xv - mean, 0.0f32);
        let var = sum(xc * xc, 0) / nf;
        let rstd = rsqrt(var + eps);
        let wv = load(w + cols, mask, 0.0).to::<f32>();
        let bv = load(b + cols, mask, 0.0).to::<f32>();
        store(
            y + row * stride + cols,
            (xc * rstd * wv + bv).cast(dt),
            mask,
        );
        store_unmasked(mean_out + row, mean);
        store_unmasked(rstd_out + row, rstd);
    })
    .unwrap()
}

pub fn rms_norm(dt: DType, block: usize) -> Kernel {
    trace("rms_norm", |p| {
        let (x, y, w) = (p.ptr("x", dt), p.ptr("y", dt), p.ptr("w", dt));
        let (stride, n) = (p.scalar("stride", DType::I32), p.scalar("n", DType::I32));
        let row = program_id(0);
        let cols = arange(0, block as i64);
        let mask = cols.lt(n);
        let xv = load(x + row * stride + cols, mask, 0.0).to::<f32>();
        let ms = sum(xv * xv, 0) / n.to::<f32>();
        let r = rsqrt(ms + 1e-6f32);
        let wv = load(w + cols, mask, 0.0).to::<f32>();
        store(y + row * stride + cols, (xv * r * wv).cast(dt), mask);
    })
    .unwrap()
}

pub fn gemv(dt: DType, block: usize) -> Kernel {
    trace("gemv", |p| {
        let (a, x, y) = (p.ptr("a", dt), p.ptr("x", dt), p.ptr("y", DType::F32));
        let n = p.scalar("n", DType::I32);
        let row = program_id(0);
        let offs = arange(0, block as i64);
        let acc = for_range(0, n, block, zeros::<f32>([block]), |start, acc| {
            let cols = start + offs;
            let mask = cols.lt(n);
            let av = load(a + row * n + cols, mask, 0.0).to::<f32>();
            let xv = load(x + cols, mask, 0.0).to::<f32>();
            acc + av * xv
        });
        store_unmasked(y + row, sum(acc, 0));
    })
    .unwrap()
}

pub fn atomics() -> Kernel {
    trace("atomics", |p| {
        let (fx, ix, ux, cnt) = (
            p.ptr("fx", DType::F32),
            p.ptr("ix", DType::I32),
            p.ptr("ux", DType::U64),
            p.ptr("cnt", DType::I32),
        );
        let hx = p.ptr("hx", DType::F16);
        let n = p.scalar("n", DType::I32);
        let offs = arange(0, 128);
        let m = offs.lt(n);
        let v = offs.to::<f32>() * 0.5f32;
        let _ = atomic_add(fx + offs, v, Some(m));
        let _ = atomic_max(fx + offs, v, Some(m));
        let _ = atomic_max(ix + offs, offs, Some(m));
        let _ = atomic_min(ix + offs, offs, None);
        let _ = atomic(AtomicOp::Xor, ux + offs, offs.to::<u64>(), Some(m));
        let _ = atomic_add(hx + offs, v.to::<f16>(), Some(m));
        let old = atomic_cas(ix + offs, 0, offs);
        store(ix + offs, old + 1, m);
        // One counter bumped once per program: the result is the same on every thread.
        let ticket = atomic_add(cnt, 1, None);
        store_unmasked(cnt + 1, ticket);
    })
    .unwrap()
}

pub fn cumsum_kernel(dt: DType, block: usize, reverse: bool) -> Kernel {
    trace("cumsum", |p| {
        let (x, y) = (p.ptr("x", dt), p.ptr("y", dt));
        let n = p.scalar("n", DType::I32);
        let offs = arange(0, block as i64);
        let m = offs.lt(n);
        let v = load(x + offs, m, 0);
        let c = scan(v, ReduceOp::Sum, 0, reverse);
        store(y + offs, c, m);
    })
    .unwrap()
}

/// Online max and sum over chunks: two carried values of different layouts' origins.
pub fn for_carried(block: usize) -> Kernel {
    trace("for_carried", |p| {
        let (x, out) = (p.ptr("x", DType::F32), p.ptr("out", DType::F32));
        let n = p.scalar("n", DType::I32);
        let offs = arange(0, block as i64);
        let init = (
            full::<f32>([], f64::NEG_INFINITY),
            zeros::<f32>([]),
            zeros::<f32>([block]),
        );
        let (m, s, acc) = for_range(0, n, block, init, |start, (m, s, acc)| {
            let cols = start + offs;
            let v = load(x + cols, cols.lt(n), f64::NEG_INFINITY);
            let m2 = maximum(m, max(v, 0));
            let s2 = s * exp(m - m2) + sum(exp(v - m2), 0);
            (m2, s2, acc + select(cols.lt(n), v, 0.0f32))
        });
        store_unmasked(out, m);
        store_unmasked(out + 1, s);
        store(out + 2 + offs, acc, offs.lt(n));
    })
    .unwrap()
}

pub fn if_kernel() -> Kernel {
    trace("if_kernel", |p| {
        let (x, out) = (p.ptr("x", DType::F32), p.ptr("out", DType::F32));
        let pid = program_id(0);
        let offs = arange(0, 256);
        let v = load_unmasked(x + pid * 256 + offs);
        let r = if_else((pid % 2).eq(0), || v * 2.0f32, || sqrt(abs(v)) + sum(v, 0));
        if_then(pid.eq(0), || store_unmasked(out + 256 * 1024 + offs, v));
        store_unmasked(out + pid * 256 + offs, r);
    })
    .unwrap()
}

pub fn while_kernel() -> Kernel {
    trace("while_kernel", |p| {
        let (x, out) = (p.ptr("x", DType::I32), p.ptr("out", DType::I32));
        let offs = arange(0, 64);
        let v = load_unmasked(x + offs);
        // Halve until the total is small; count the steps.
        let (v, steps) = while_loop(
            (v, zeros::<i32>([])),
            |(v, _)| sum(v, 0).gt(100),
            |(v, s)| (v / 2, s + 1),
        );
        store_unmasked(out + offs, v);
        store_unmasked(out + 64, steps);
    })
    .unwrap()
}

pub fn dot_kernel(dt: DType, m: usize, n: usize, k: usize) -> Kernel {
    trace("dot_fma", |p| {
        let (a, b, c) = (p.ptr("a", dt), p.ptr("b", dt), p.ptr("c", DType::F32));
        let rm = arange(0, m as i64).col();
        let rn = arange(0, n as i64).row();
        let rk = arange(0, k as i64);
        let av = load_unmasked(a + rm * k + rk.row());
        let bv = load_unmasked(b + rk.col() * n + rn);
        let acc = for_range(0, 2, 1, zeros::<f32>([m, n]), |_, acc| dot_acc(av, bv, acc));
        store_unmasked(c + rm * n + rn, acc);
    })
    .unwrap()
}

/// Row and column reductions broadcast back, a transpose, a reshape and argmax.
pub fn shapes_kernel() -> Kernel {
    trace("shapes", |p| {
        let (x, out, idx) = (
            p.ptr("x", DType::F32),
            p.ptr("out", DType::F32),
            p.ptr("idx", DType::I32),
        );
        let r = arange(0, 32).col();
        let c = arange(0, 64).row();
        let v = load_unmasked(x + r * 64 + c);
        let rows = max(v, 1).col();
        let cols = sum(v, 0).row();
        let centered = v - rows + cols;
        store_unmasked(out + r * 64 + c, centered);
        let t = centered.trans();
        let rt = arange(0, 64).col();
        let ct = arange(0, 32).row();
        store_unmasked(out + 2048 + rt * 32 + ct, t);
        let flat = v.reshape([2048]);
        store_unmasked(out + 4096 + arange(0, 2048), flat * 3.0f32);
        store_unmasked(idx + arange(0, 32), argmax(v, 1));
        store_unmasked(idx + 32 + arange(0, 64), argmin(v, 0));
    })
    .unwrap()
}

/// Every cast pair, math functions, integer ops on narrow types, cache and eviction hints.
pub fn elementwise_kernel() -> Kernel {
    let dts = [
        DType::I1,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
    ];
    trace("elementwise", |p| {
        let ptrs: Vec<Tile> = dts.iter().map(|&d| p.ptr(&format!("p_{d}"), d)).collect();
        let offs = arange(0, 128);
        let vals: Vec<Tile> = ptrs
            .iter()
            .map(|&q| {
                load_with(
                    q + offs,
                    LoadOptions {
                        cache: CacheModifier::Cg,
                        evict: EvictionPolicy::First,
                        ..Default::default()
                    },
                )
            })
            .collect();
        for (i, &src) in vals.iter().enumerate() {
            let j = (i + 1) % dts.len();
            let cast = src.cast(dts[j]);
            let cast_rz = src.cast_rounded(dts[(i + 5) % dts.len()], Rounding::TowardZero);
            store_with(
                ptrs[j] + offs,
                cast,
                StoreOptions {
                    cache: CacheModifier::Cs,
                    evict: EvictionPolicy::Last,
                    ..Default::default()
                },
            );
            store_unmasked(ptrs[(i + 5) % dts.len()] + offs, cast_rz);
        }
        for &d in &[DType::F16, DType::BF16, DType::F32] {
            let i = dts.iter().position(|&x| x == d).unwrap();
            let v = vals[i];
            let r = exp(v)
                + exp2(v)
                + log(v)
                + log2(v)
                + sqrt(v)
                + rsqrt(v)
                + sin(v)
                + cos(v)
                + erf(v)
                + tanh(v)
                + floor(v)
                + ceil(v)
                + abs(v)
                - v % 3.0
                + maximum_nan(v, 1.0)
                + minimum(v, 2.0)
                + fma(v, v, v)
                + sigmoid(v);
            store_unmasked(ptrs[i] + offs, r);
        }
        for &d in &[DType::I8, DType::U16, DType::I32, DType::U64, DType::I64] {
            let i = dts.iter().position(|&x| x == d).unwrap();
            let v = vals[i];
            let r = (v * 3 + 7) / 5 % 4 - (v << 2)
                + (v >> 1)
                + (v & 6)
                + (v | 1)
                + (v ^ 9)
                + maximum(v, 3)
                + minimum(v, 2)
                + abs(v)
                + !v;
            let r = select(r.gt(v), r, -r);
            store_unmasked(ptrs[i] + offs, r);
        }
        let f = vals[11];
        store_unmasked(ptrs[3] + offs, f.bitcast::<i32>());
        store_unmasked(ptrs[6] + offs, vals[9].bitcast::<u16>());
        store_unmasked(ptrs[0] + offs, f.ne(f) | f.lt(0.0f32));
        let v = load_with(
            ptrs[11] + offs,
            LoadOptions {
                volatile: true,
                ..Default::default()
            },
        );
        store_unmasked(ptrs[11] + offs, v + 1.0f32);
        device_assert(offs.lt(128), "in range");
    })
    .unwrap()
}
