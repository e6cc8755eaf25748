//! The attention backward on the GPU against the interpreter, with the same host-built inputs:
//! the library's `attention::backward` (and `forward`) at small shapes that straddle blocks,
//! with GQA, causal masks, one and four warps, f32, f16 and bf16, with held 16x16 blocks and
//! with the tuner's choice; and small kernels isolating the constructs the backward uses
//! (transposed dot operands, a cast score tile as the next dot's operand, a masked row vector
//! broadcast along either axis of a score tile, four dots per iteration with carried
//! accumulators, nested loops bounded by `minimum`). Each output's largest difference is
//! printed; past 1% of the output's scale it fails the test.
//!
//! Ignored without a GPU (CI has none): `TEGULA_GPU_TESTS=1 cargo test --release -p
//! tegula-kernels --test gpu_attention_backward -- --ignored` (the README's tests section).
//! Asked to run without `TEGULA_GPU_TESTS=1` or without a GPU, the tests fail, saying which.

use tegula::prelude::*;
use tegula::Result;
use tegula_kernels::attention::{self, AttentionOptions, Dims};

/// The GPU, after checking that the GPU tests were asked for; otherwise the test fails.
fn gpu() -> Device {
    assert!(
        tegula::env::bool_var("TEGULA_GPU_TESTS", false),
        "GPU tests run with TEGULA_GPU_TESTS=1 on a machine with a GPU: \
         TEGULA_GPU_TESTS=1 cargo test -- --ignored"
    );
    let dev = Device::cuda(0).unwrap_or_else(|e| panic!("TEGULA_GPU_TESTS=1, but no GPU: {e}"));
    dev.set_poison_empty(true);
    dev
}

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

/// Forward and backward of one case through the library's wrappers, on the GPU and on the
/// interpreter; `false` if any output differs.
fn wrappers_match<T: Element>(gpu: &Device, dims: Dims, causal: bool, warps: u32) -> bool {
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
    let (qs, ks, ls) = (dims.q_shape(), dims.kv_shape(), dims.lse_shape());
    let tuned = AttentionOptions {
        causal,
        ..Default::default()
    };
    // O and the logsumexp from the interpreter's forward, so both devices see the same.
    let cpu = Device::cpu();
    let (o, lse) = {
        let (o, lse) = attention::forward(
            &up::<T>(&cpu, &q, &qs).unwrap(),
            &up::<T>(&cpu, &k, &ks).unwrap(),
            &up::<T>(&cpu, &v, &ks).unwrap(),
            &tuned,
        )
        .unwrap();
        (o.to_f64_vec().unwrap(), lse.to_f64_vec().unwrap())
    };
    let held = AttentionOptions {
        block_m: 16,
        block_n: 16,
        config: LaunchConfig::new(warps, 1),
        ..tuned
    };
    let tag = format!(
        "{} {b}x{h}x{hkv} q{n_q} k{n_k} d{d} c{} w{warps}",
        T::DTYPE.name(),
        causal as u8
    );
    let mut ok = true;
    for (what, options) in [("16x16", held), ("tuned", tuned)] {
        ok &= diff(&format!("forward {what} {tag}"), gpu, |dev| {
            let (out, lse) = attention::forward(
                &up::<T>(dev, &q, &qs)?,
                &up::<T>(dev, &k, &ks)?,
                &up::<T>(dev, &v, &ks)?,
                &options,
            )?;
            Ok(vec![("out", out.to_f64_vec()?), ("lse", lse.to_f64_vec()?)])
        });
        ok &= diff(&format!("backward {what} {tag}"), gpu, |dev| {
            let g = attention::backward(
                &up::<T>(dev, &q, &qs)?,
                &up::<T>(dev, &k, &ks)?,
                &up::<T>(dev, &v, &ks)?,
                &up::<T>(dev, &o, &qs)?,
                &up::<T>(dev, &d_o, &qs)?,
                &up::<f32>(dev, &lse, &ls)?,
                &options,
            )?;
            Ok(vec![
                ("dq", g.dq.to_f64_vec()?),
                ("dk", g.dk.to_f64_vec()?),
                ("dv", g.dv.to_f64_vec()?),
            ])
        });
    }
    ok
}

#[test]
#[ignore = "needs a GPU: TEGULA_GPU_TESTS=1 cargo test -- --ignored"]
fn attention_backward_matches_the_interpreter_on_the_gpu() {
    let gpu = gpu();
    let dims = |b, h, hkv, n_q, n_k, d| Dims {
        batch: b,
        heads: h,
        kv_heads: hkv,
        n_q,
        n_k,
        head_dim: d,
    };
    let mut ok = true;
    for (dm, causal, w) in [
        (dims(1, 1, 1, 16, 16, 64), false, 4),
        (dims(1, 1, 1, 16, 16, 64), false, 1),
        (dims(1, 1, 1, 32, 16, 64), false, 4),
        (dims(1, 2, 1, 16, 16, 64), false, 4),
        (dims(1, 1, 1, 37, 53, 64), false, 4),
        (dims(2, 4, 2, 37, 53, 64), false, 4),
        (dims(2, 4, 2, 37, 53, 64), true, 4),
    ] {
        ok &= wrappers_match::<f32>(&gpu, dm, causal, w);
    }
    ok &= wrappers_match::<f16>(&gpu, dims(2, 4, 2, 37, 53, 64), true, 4);
    ok &= wrappers_match::<bf16>(&gpu, dims(1, 1, 1, 16, 16, 64), false, 4);
    assert!(
        ok,
        "the GPU differs from the interpreter (the BAD lines above)"
    );
}

#[test]
#[ignore = "needs a GPU: TEGULA_GPU_TESTS=1 cargo test -- --ignored"]
fn the_backwards_constructs_match_the_interpreter_on_the_gpu() {
    let gpu = gpu();
    let mut ok = true;
    for w in [4, 1] {
        ok &= minimal::<f32>(&gpu, w);
        ok &= minimal::<f16>(&gpu, w);
    }
    assert!(
        ok,
        "the GPU differs from the interpreter (the BAD lines above)"
    );
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

fn minimal<T: Element>(gpu: &Device, warps: u32) -> bool {
    let mut ok = true;
    let cfg = LaunchConfig::new(warps, 1);
    let (m, d) = (16usize, 64usize);
    let tag = format!("{} w{warps}", T::DTYPE.name());
    let mut rng = Lcg(7);
    let a = rng.vec(m * d);
    let b = rng.vec(m * d);
    let p = rng.vec(m * m);
    let acc = rng.vec(m * d);
    let lse: Vec<f64> = rng.vec(m).iter().map(|x| x * 2.0).collect();
    ok &= diff(&format!("m_dot_nt {tag}"), gpu, |dev| {
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
    ok &= diff(&format!("m_dot_acc {tag}"), gpu, |dev| {
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
        ok &= diff(&format!("m_row_bcast n{n} {tag}"), gpu, |dev| {
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
        ok &= diff(&format!("m_loop_dots nq{n_q} {tag}"), gpu, |dev| {
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
        ok &= diff(
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
    ok
}
