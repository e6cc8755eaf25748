//! Differential test of the attention backward: runs the three backward kernels one by one
//! (and through `backward()`), and small kernels isolating the constructs they use (transposed
//! dot operands, a cast score tile as the next dot's operand, a masked row vector broadcast
//! along either axis of a score tile, four dots per iteration with carried accumulators, nested
//! loops bounded by `minimum`), on the GPU and on the interpreter with the same host-built
//! inputs, and prints the largest difference per output (`BAD` past 1% of the output's scale).
//!
//! Needs a GPU: `cargo build --release -p tegula-kernels --example attn_bwd_gpu_diff`, then run
//! `target/release/examples/attn_bwd_gpu_diff [minimal|full]` there (no argument: both).

use tegula::prelude::*;
use tegula::Result;
use tegula_kernels::attention::kernels::{attn_bwd_dkdv, attn_bwd_dq, attn_bwd_preprocess};
use tegula_kernels::attention::{forward, Dims};

/// Deterministic inputs (no dependency on the device's generator).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.next()).collect()
    }
}

fn up<T: Element>(dev: &Device, data: &[f64], shape: &[usize]) -> Result<Tensor<T>> {
    let v: Vec<T> = data.iter().map(|&x| T::from_f64(x)).collect();
    dev.from_slice(&v, shape.to_vec())
}

/// Runs `f` on both devices and prints the largest difference of each output.
fn diff(
    name: &str,
    gpu: &Device,
    f: impl Fn(&Device) -> Result<Vec<(&'static str, Vec<f64>)>>,
) -> bool {
    let cpu = Device::cpu();
    let (want, got) = match (f(&cpu), f(gpu)) {
        (Ok(w), Ok(g)) => (w, g),
        (w, g) => {
            println!(
                "{name:<44} ERROR cpu={:?} gpu={:?}",
                w.err().map(|e| e.to_string()),
                g.err().map(|e| e.to_string())
            );
            return false;
        }
    };
    let mut ok = true;
    for ((out, w), (_, g)) in want.iter().zip(&got) {
        let scale = w.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        let mut worst = (0.0f64, 0usize);
        for (i, (a, b)) in w.iter().zip(g).enumerate() {
            let d = if a == b { 0.0 } else { (a - b).abs() };
            let d = if d.is_nan() { f64::INFINITY } else { d };
            if d > worst.0 {
                worst = (d, i);
            }
        }
        let bad = worst.0 > 1e-2 * scale.max(1.0);
        ok &= !bad;
        println!(
            "{name:<44} {out:<6} maxdiff {:>10.3e} at {:>6} (max |ref| {:>9.3e}) {}",
            worst.0,
            worst.1,
            scale,
            if bad { "BAD" } else { "ok" }
        );
    }
    ok
}

fn contiguous_strides(h: usize, n: usize, d: usize) -> [i32; 3] {
    [(h * n * d) as i32, (n * d) as i32, d as i32]
}

/// The three backward kernels, launched one at a time on the same host inputs.
fn full_kernels<T: Element>(gpu: &Device, dims: Dims, causal: bool, warps: u32) {
    let Dims {
        batch: b,
        heads: h,
        kv_heads: hkv,
        n_q,
        n_k,
        head_dim: d,
    } = dims;
    let mut rng = Lcg(0x5eed ^ (n_q * 131 + n_k) as u64);
    let q = rng.vec(b * h * n_q * d);
    let k = rng.vec(b * hkv * n_k * d);
    let v = rng.vec(b * hkv * n_k * d);
    let d_o = rng.vec(b * h * n_q * d);
    let (qs, ks) = (dims.q_shape(), dims.kv_shape());
    // O and the logsumexp from the interpreter's forward, so both devices see the same.
    let cpu = Device::cpu();
    let options = tegula_kernels::attention::AttentionOptions {
        causal,
        ..Default::default()
    };
    let (o, lse) = {
        let (o, lse) = forward(
            &up::<T>(&cpu, &q, &qs).unwrap(),
            &up::<T>(&cpu, &k, &ks).unwrap(),
            &up::<T>(&cpu, &v, &ks).unwrap(),
            &options,
        )
        .unwrap();
        (o.to_f64_vec().unwrap(), lse.to_f64_vec().unwrap())
    };
    let mut delta = vec![0.0; b * h * n_q];
    for (r, dl) in delta.iter_mut().enumerate() {
        *dl = (0..d)
            .map(|j| T::from_f64(o[r * d + j]).to_f64() * T::from_f64(d_o[r * d + j]).to_f64())
            .sum();
    }
    let sm_scale = 1.0 / (d as f32).sqrt();
    let cfg = LaunchConfig::new(warps, 1);
    let (bm, bn) = (16usize, 16usize);
    let tag = format!(
        "{} {b}x{h}x{hkv} q{n_q} k{n_k} d{d} c{} w{warps}",
        T::DTYPE.name(),
        causal as u8
    );
    let [sqz, sqh, sqm] = contiguous_strides(h, n_q, d);
    let [skz, skh, skn] = contiguous_strides(hkv, n_k, d);
    let qb = n_q.div_ceil(bm) as u32;
    let kb = n_k.div_ceil(bn) as u32;

    diff(&format!("preprocess {tag}"), gpu, |dev| {
        let out = dev.zeros::<f32>([b * h * n_q])?;
        attn_bwd_preprocess::launch_with::<T>(
            dev,
            (qb, (b * h) as u32),
            cfg,
            &up::<T>(dev, &o, &qs)?,
            &up::<T>(dev, &d_o, &qs)?,
            &out,
            sqz,
            sqh,
            sqm,
            sqz,
            sqh,
            sqm,
            h as i32,
            n_q as i32,
            d,
            bm,
        )?;
        Ok(vec![("delta", out.to_f64_vec()?)])
    });
    diff(&format!("dkdv {tag}"), gpu, |dev| {
        let dk = dev.zeros::<T>(ks)?;
        let dv = dev.zeros::<T>(ks)?;
        attn_bwd_dkdv::launch_with::<T>(
            dev,
            (kb, (b * hkv) as u32),
            cfg,
            &up::<T>(dev, &q, &qs)?,
            &up::<T>(dev, &k, &ks)?,
            &up::<T>(dev, &v, &ks)?,
            &up::<T>(dev, &d_o, &qs)?,
            &up::<f32>(dev, &lse, &[b * h * n_q])?,
            &up::<f32>(dev, &delta, &[b * h * n_q])?,
            &dk,
            &dv,
            &dev.zeros::<f32>([1])?, // dQ sums: unused without atomic dQ
            &dev.zeros::<f32>([1])?, // dK/dV partial sums: unused without a split tail
            sqz,
            sqh,
            sqm,
            skz,
            skh,
            skn,
            skz,
            skh,
            skn,
            sqz,
            sqh,
            sqm,
            skz,
            skh,
            skn,
            skz,
            skh,
            skn,
            hkv as i32,
            (h / hkv) as i32,
            n_q as i32,
            n_k as i32,
            sm_scale,
            0, // whole_programs, slices, slice_rows: no split tail
            1,
            0,
            causal,
            false,
            false,
            !n_q.is_multiple_of(bm), // ragged_queries
            d,
            bm,
            bn,
        )?;
        Ok(vec![("dk", dk.to_f64_vec()?), ("dv", dv.to_f64_vec()?)])
    });
    diff(&format!("dq {tag}"), gpu, |dev| {
        let dq = dev.zeros::<T>(qs)?;
        attn_bwd_dq::launch_with::<T>(
            dev,
            (qb, (b * h) as u32),
            cfg,
            &up::<T>(dev, &q, &qs)?,
            &up::<T>(dev, &k, &ks)?,
            &up::<T>(dev, &v, &ks)?,
            &up::<T>(dev, &d_o, &qs)?,
            &up::<f32>(dev, &lse, &[b * h * n_q])?,
            &up::<f32>(dev, &delta, &[b * h * n_q])?,
            &dq,
            sqz,
            sqh,
            sqm,
            skz,
            skh,
            skn,
            skz,
            skh,
            skn,
            sqz,
            sqh,
            sqm,
            sqz,
            sqh,
            sqm,
            h as i32,
            (h / hkv) as i32,
            n_q as i32,
            n_k as i32,
            sm_scale,
            causal,
            d,
            bm,
            bn,
        )?;
        Ok(vec![("dq", dq.to_f64_vec()?)])
    });
    diff(&format!("backward() {tag}"), gpu, |dev| {
        let g = tegula_kernels::attention::backward(
            &up::<T>(dev, &q, &qs)?,
            &up::<T>(dev, &k, &ks)?,
            &up::<T>(dev, &v, &ks)?,
            &up::<T>(dev, &o, &qs)?,
            &up::<T>(dev, &d_o, &qs)?,
            &up::<f32>(dev, &lse, &[b, h, n_q])?,
            &tegula_kernels::attention::AttentionOptions {
                config: cfg,
                ..options
            },
        )?;
        Ok(vec![
            ("dq", g.dq.to_f64_vec()?),
            ("dk", g.dk.to_f64_vec()?),
            ("dv", g.dv.to_f64_vec()?),
        ])
    });
}

// --- minimal kernels, one suspicious construct each ------------------------------------------

/// `a[M, D] @ b[N, D]^T` (the transposed right operand of `dot(k, q.trans())`).
#[tegula::kernel]
fn m_dot_nt<T: Element>(
    a: Ptr<T>,
    b: Ptr<T>,
    out: Ptr<f32>,
    #[constexpr] m: usize,
    #[constexpr] d: usize,
) {
    let r = arange(0, m as i64);
    let c = arange(0, d as i64);
    let x = load_unmasked(a + r.col() * d as i64 + c.row());
    let y = load_unmasked(b + r.col() * d as i64 + c.row());
    let s = dot_with(x, y.trans(), None, InputPrecision::Ieee);
    store_unmasked(out + r.col() * m as i64 + r.row(), s);
}

/// `acc + p[M, M] @ b[M, D]` with `p` computed in f32 and cast (the `dv`/`dk` update).
#[tegula::kernel]
fn m_dot_acc<T: Element>(
    p: Ptr<f32>,
    b: Ptr<T>,
    acc: Ptr<f32>,
    out: Ptr<f32>,
    #[constexpr] m: usize,
    #[constexpr] d: usize,
) {
    let r = arange(0, m as i64);
    let c = arange(0, d as i64);
    let x = load_unmasked(p + r.col() * m as i64 + r.row()) * 0.5;
    let y = load_unmasked(b + r.col() * d as i64 + c.row());
    let a0 = load_unmasked(acc + r.col() * d as i64 + c.row());
    let s = dot_with(x.to::<T>(), y, Some(a0), InputPrecision::Ieee);
    store_unmasked(out + r.col() * d as i64 + c.row(), s);
}

/// A row vector loaded per query row (masked, `other = inf`) broadcast along the other axis of
/// a transposed score tile: `exp2(s_t - lse[None, :])` and `s - lse[:, None]`.
#[tegula::kernel]
fn m_row_bcast<T: Element>(
    a: Ptr<T>,
    b: Ptr<T>,
    lse: Ptr<f32>,
    out_t: Ptr<f32>,
    out: Ptr<f32>,
    n: i32,
    #[constexpr] m: usize,
    #[constexpr] d: usize,
) {
    let r = arange(0, m as i64);
    let c = arange(0, d as i64);
    let x = load_unmasked(a + r.col() * d as i64 + c.row());
    let y = load_unmasked(b + r.col() * d as i64 + c.row());
    let l = load(lse + r, r.lt(n), f32::INFINITY);
    let s_t = dot_with(x, y.trans(), None, InputPrecision::Ieee) * 0.25;
    let p_t = exp2(s_t - l.row());
    store_unmasked(out_t + r.col() * m as i64 + r.row(), p_t);
    let s = dot_with(y, x.trans(), None, InputPrecision::Ieee) * 0.25;
    let p = exp2(s - l.col());
    store_unmasked(out + r.col() * m as i64 + r.row(), p);
}

/// The dK/dV step's four dots per iteration over a run-time loop with two carried
/// accumulators, no masks or exponentials.
#[tegula::kernel]
fn m_loop_dots<T: Element>(
    q: Ptr<T>,
    k: Ptr<T>,
    v: Ptr<T>,
    d_o: Ptr<T>,
    dk_out: Ptr<f32>,
    dv_out: Ptr<f32>,
    n_q: i32,
    #[constexpr] m: usize,
    #[constexpr] d: usize,
) {
    let r = arange(0, m as i64);
    let c = arange(0, d as i64);
    let kt = load_unmasked(k + r.col() * d as i64 + c.row());
    let vt = load_unmasked(v + r.col() * d as i64 + c.row());
    let mut dk = zeros::<f32>([m, d]);
    let mut dv = zeros::<f32>([m, d]);
    for start in range(0, n_q, m as i64) {
        let rows = start + r;
        let msk = rows.col().lt(n_q);
        let qt = load(q + rows.col() * d as i64 + c.row(), msk, 0.0);
        let dot_t = load(d_o + rows.col() * d as i64 + c.row(), msk, 0.0);
        let s_t = dot_with(kt, qt.trans(), None, InputPrecision::Ieee) * 0.125;
        dv = dot_with(s_t.to::<T>(), dot_t, Some(dv), InputPrecision::Ieee);
        let dp_t = dot_with(vt, dot_t.trans(), None, InputPrecision::Ieee);
        let ds_t = s_t * dp_t * 0.125;
        dk = dot_with(ds_t.to::<T>(), qt, Some(dk), InputPrecision::Ieee);
    }
    store_unmasked(dk_out + r.col() * d as i64 + c.row(), dk);
    store_unmasked(dv_out + r.col() * d as i64 + c.row(), dv);
}

/// Nested run-time loops, the inner one bounded by `minimum`, with a carried dot accumulator.
#[tegula::kernel]
fn m_nested<T: Element>(
    q: Ptr<T>,
    k: Ptr<T>,
    out: Ptr<f32>,
    groups: i32,
    n_q: i32,
    mid: i32,
    #[constexpr] m: usize,
    #[constexpr] d: usize,
) {
    let r = arange(0, m as i64);
    let c = arange(0, d as i64);
    let kt = load_unmasked(k + r.col() * d as i64 + c.row());
    let mut acc = zeros::<f32>([m, d]);
    for g in range(0, groups, 1) {
        let base = q + g * n_q * d as i64;
        for start in range(0, minimum(mid, n_q), m as i64) {
            let rows = start + r;
            let qt = load(
                base + rows.col() * d as i64 + c.row(),
                rows.col().lt(n_q),
                0.0,
            );
            let s_t = dot_with(kt, qt.trans(), None, InputPrecision::Ieee) * 0.125;
            acc = dot_with(s_t.to::<T>(), qt, Some(acc), InputPrecision::Ieee);
        }
        for start in range(mid, n_q, m as i64) {
            let rows = start + r;
            let qt = load(
                base + rows.col() * d as i64 + c.row(),
                rows.col().lt(n_q),
                0.0,
            );
            let s_t = dot_with(kt, qt.trans(), None, InputPrecision::Ieee) * 0.0625;
            acc = dot_with(s_t.to::<T>(), qt, Some(acc), InputPrecision::Ieee);
        }
    }
    store_unmasked(out + r.col() * d as i64 + c.row(), acc);
}

fn minimal<T: Element>(gpu: &Device, warps: u32) {
    let cfg = LaunchConfig::new(warps, 1);
    let (m, d) = (16usize, 64usize);
    let tag = format!("{} w{warps}", T::DTYPE.name());
    let mut rng = Lcg(7);
    let a = rng.vec(m * d);
    let b = rng.vec(m * d);
    let p = rng.vec(m * m);
    let acc = rng.vec(m * d);
    let lse: Vec<f64> = rng.vec(m).iter().map(|x| x * 2.0).collect();
    diff(&format!("m_dot_nt {tag}"), gpu, |dev| {
        let out = dev.zeros::<f32>([m * m])?;
        m_dot_nt::launch_with::<T>(
            dev,
            1u32,
            cfg,
            &up::<T>(dev, &a, &[m * d])?,
            &up::<T>(dev, &b, &[m * d])?,
            &out,
            m,
            d,
        )?;
        Ok(vec![("s", out.to_f64_vec()?)])
    });
    diff(&format!("m_dot_acc {tag}"), gpu, |dev| {
        let out = dev.zeros::<f32>([m * d])?;
        m_dot_acc::launch_with::<T>(
            dev,
            1u32,
            cfg,
            &up::<f32>(dev, &p, &[m * m])?,
            &up::<T>(dev, &b, &[m * d])?,
            &up::<f32>(dev, &acc, &[m * d])?,
            &out,
            m,
            d,
        )?;
        Ok(vec![("out", out.to_f64_vec()?)])
    });
    for n in [16, 13] {
        diff(&format!("m_row_bcast n{n} {tag}"), gpu, |dev| {
            let (ot, o) = (dev.zeros::<f32>([m * m])?, dev.zeros::<f32>([m * m])?);
            m_row_bcast::launch_with::<T>(
                dev,
                1u32,
                cfg,
                &up::<T>(dev, &a, &[m * d])?,
                &up::<T>(dev, &b, &[m * d])?,
                &up::<f32>(dev, &lse, &[m])?,
                &ot,
                &o,
                n,
                m,
                d,
            )?;
            Ok(vec![("p_t", ot.to_f64_vec()?), ("p", o.to_f64_vec()?)])
        });
    }
    for n_q in [16usize, 32, 37] {
        let q = rng.vec(n_q * d);
        let dd = rng.vec(n_q * d);
        diff(&format!("m_loop_dots nq{n_q} {tag}"), gpu, |dev| {
            let (dk, dv) = (dev.zeros::<f32>([m * d])?, dev.zeros::<f32>([m * d])?);
            m_loop_dots::launch_with::<T>(
                dev,
                1u32,
                cfg,
                &up::<T>(dev, &q, &[n_q * d])?,
                &up::<T>(dev, &a, &[m * d])?,
                &up::<T>(dev, &b, &[m * d])?,
                &up::<T>(dev, &dd, &[n_q * d])?,
                &dk,
                &dv,
                n_q as i32,
                m,
                d,
            )?;
            Ok(vec![("dk", dk.to_f64_vec()?), ("dv", dv.to_f64_vec()?)])
        });
    }
    for (groups, n_q, mid) in [
        (1usize, 16usize, 0i32),
        (1, 37, 16),
        (2, 37, 16),
        (2, 37, 48),
    ] {
        let q = rng.vec(groups * n_q * d);
        diff(
            &format!("m_nested g{groups} nq{n_q} mid{mid} {tag}"),
            gpu,
            |dev| {
                let out = dev.zeros::<f32>([m * d])?;
                m_nested::launch_with::<T>(
                    dev,
                    1u32,
                    cfg,
                    &up::<T>(dev, &q, &[groups * n_q * d])?,
                    &up::<T>(dev, &a, &[m * d])?,
                    &out,
                    groups as i32,
                    n_q as i32,
                    mid,
                    m,
                    d,
                )?;
                Ok(vec![("acc", out.to_f64_vec()?)])
            },
        );
    }
}

fn main() -> Result<()> {
    let gpu = Device::cuda(0)?;
    let only = std::env::args().nth(1).unwrap_or_default();
    if only.is_empty() || only == "minimal" {
        for w in [4, 1] {
            minimal::<f32>(&gpu, w);
            minimal::<f16>(&gpu, w);
        }
    }
    if only.is_empty() || only == "full" {
        let dims = |b, h, hkv, n_q, n_k, d| Dims {
            batch: b,
            heads: h,
            kv_heads: hkv,
            n_q,
            n_k,
            head_dim: d,
        };
        for (dm, causal, w) in [
            (dims(1, 1, 1, 16, 16, 64), false, 4),
            (dims(1, 1, 1, 16, 16, 64), false, 1),
            (dims(1, 1, 1, 32, 16, 64), false, 4),
            (dims(1, 2, 1, 16, 16, 64), false, 4),
            (dims(1, 1, 1, 37, 53, 64), false, 4),
            (dims(2, 4, 2, 37, 53, 64), false, 4),
            (dims(2, 4, 2, 37, 53, 64), true, 4),
        ] {
            full_kernels::<f32>(&gpu, dm, causal, w);
        }
        full_kernels::<f16>(&gpu, dims(2, 4, 2, 37, 53, 64), true, 4);
        full_kernels::<bf16>(&gpu, dims(1, 1, 1, 16, 16, 64), false, 4);
    }
    Ok(())
}
