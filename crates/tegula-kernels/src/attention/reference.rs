//! Float64 references: attention written out directly (scores, softmax, weighted sum) and its
//! analytic gradient. All tensors are row-major `[B, H, N, D]` vectors (K, V with `Hkv` heads).
//!
//! Each result comes with a *magnitude* of the same shape: the sum of the absolute values of the
//! terms that make up the element (`|P| |V|` for the output, `scale |dS| |K|`-like sums for the
//! gradients). Rounding an operand of a sum to the input dtype moves the sum by at most one unit
//! roundoff times this magnitude, so `|got - want| <= atol + rtol * magnitude` is the bound a
//! correct kernel meets, also for elements that cancel to near zero (as gradient elements do:
//! `dS = P * (dP - delta)` sums to zero over each row).

use super::Dims;

/// The forward reference: output `[B, H, Nq, D]` and natural-log logsumexp `[B, H, Nq]`.
pub struct Forward {
    pub out: Vec<f64>,
    pub lse: Vec<f64>,
    /// `sum_j P_ij |V_jd|` (at least `|out|`).
    pub out_magnitude: Vec<f64>,
}

/// The gradients, shaped like Q, K and V.
pub struct Backward {
    pub dq: Vec<f64>,
    pub dk: Vec<f64>,
    pub dv: Vec<f64>,
    /// Magnitudes of the terms of each gradient element: with
    /// `m_ij = P_ij (|dP_ij| + sum_d sum_j' P_ij' |V_j'd| |dO_id|)` (the second part bounds how far
    /// `delta` moves when O is rounded), `scale sum_j m_ij |K_j|`, `scale sum_i m_ij |Q_i|` and
    /// `sum_i P_ij |dO_i|`.
    pub dq_magnitude: Vec<f64>,
    pub dk_magnitude: Vec<f64>,
    pub dv_magnitude: Vec<f64>,
}

/// Whether query row `i` sees key `j`: inside the keys, and with `causal` `j <= i + Nk - Nq`.
pub fn visible(dims: Dims, causal: bool, i: usize, j: usize) -> bool {
    j < dims.n_k && (!causal || j + dims.n_q <= i + dims.n_k)
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Offsets of head `(b, h)`'s rows in a Q-shaped tensor and of its KV head in K/V.
fn heads(dims: Dims, b: usize, h: usize) -> (usize, usize) {
    let d = dims.head_dim;
    let q_off = (b * dims.heads + h) * dims.n_q * d;
    let kv_off = (b * dims.kv_heads + h / dims.group_size()) * dims.n_k * d;
    (q_off, kv_off)
}

/// The softmax weights of query row `i` of one head (zeros where masked, all zeros when the row
/// sees nothing) and its logsumexp.
fn weights(
    q_row: &[f64],
    k: &[f64],
    dims: Dims,
    causal: bool,
    scale: f64,
    i: usize,
) -> (Vec<f64>, f64) {
    let d = dims.head_dim;
    let scores: Vec<Option<f64>> = (0..dims.n_k)
        .map(|j| visible(dims, causal, i, j).then(|| scale * dot(q_row, &k[j * d..(j + 1) * d])))
        .collect();
    let max = scores
        .iter()
        .flatten()
        .copied()
        .fold(f64::NEG_INFINITY, f64::max);
    if max == f64::NEG_INFINITY {
        return (vec![0.0; dims.n_k], f64::NEG_INFINITY);
    }
    let e: Vec<f64> = scores
        .iter()
        .map(|s| s.map_or(0.0, |s| (s - max).exp()))
        .collect();
    let total: f64 = e.iter().sum();
    (e.iter().map(|x| x / total).collect(), max + total.ln())
}

/// `softmax(scale * Q K^T) V` per head, with the library's conventions (GQA head mapping,
/// end-aligned causal mask; rows with no visible key give output 0 and logsumexp -inf).
pub fn attention(q: &[f64], k: &[f64], v: &[f64], dims: Dims, causal: bool, scale: f64) -> Forward {
    let d = dims.head_dim;
    let mut out = vec![0.0; dims.batch * dims.heads * dims.n_q * d];
    let mut lse = vec![0.0; dims.batch * dims.heads * dims.n_q];
    let mut out_magnitude = vec![0.0; out.len()];
    for b in 0..dims.batch {
        for h in 0..dims.heads {
            let (qo, kvo) = heads(dims, b, h);
            let (kh, vh) = (&k[kvo..kvo + dims.n_k * d], &v[kvo..kvo + dims.n_k * d]);
            for i in 0..dims.n_q {
                let row = qo + i * d;
                let (p, l) = weights(&q[row..row + d], kh, dims, causal, scale, i);
                lse[(b * dims.heads + h) * dims.n_q + i] = l;
                for (j, &pj) in p.iter().enumerate() {
                    for c in 0..d {
                        out[row + c] += pj * vh[j * d + c];
                        out_magnitude[row + c] += pj * vh[j * d + c].abs();
                    }
                }
            }
        }
    }
    Forward {
        out,
        lse,
        out_magnitude,
    }
}

/// The gradient of `sum(O * dO)` with respect to Q, K and V, where `O = attention(Q, K, V)`:
/// `dV = P^T dO`, `dP = dO V^T`, `dS = P * (dP - rowsum(P * dP))`, `dQ = scale dS K`,
/// `dK = scale dS^T Q`; a KV head accumulates over the query heads of its group.
#[allow(clippy::too_many_arguments)]
pub fn attention_backward(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    d_o: &[f64],
    dims: Dims,
    causal: bool,
    scale: f64,
) -> Backward {
    let d = dims.head_dim;
    let mut dq = vec![0.0; q.len()];
    let mut dk = vec![0.0; k.len()];
    let mut dv = vec![0.0; v.len()];
    let (mut dq_mag, mut dk_mag, mut dv_mag) = (dq.clone(), dk.clone(), dv.clone());
    for b in 0..dims.batch {
        for h in 0..dims.heads {
            let (qo, kvo) = heads(dims, b, h);
            let kh = &k[kvo..kvo + dims.n_k * d];
            let vh = &v[kvo..kvo + dims.n_k * d];
            for i in 0..dims.n_q {
                let row = qo + i * d;
                let (qi, doi) = (&q[row..row + d], &d_o[row..row + d]);
                let (p, _) = weights(qi, kh, dims, causal, scale, i);
                let dp: Vec<f64> = (0..dims.n_k)
                    .map(|j| dot(doi, &vh[j * d..(j + 1) * d]))
                    .collect();
                let delta = dot(&p, &dp);
                // sum_d (sum_j P_ij |V_jd|) |dO_id|: bounds delta's error from a rounded O.
                let delta_magnitude: f64 = (0..d)
                    .map(|c| {
                        let o_mag: f64 = (0..dims.n_k).map(|j| p[j] * vh[j * d + c].abs()).sum();
                        o_mag * doi[c].abs()
                    })
                    .sum();
                for j in 0..dims.n_k {
                    if p[j] == 0.0 {
                        continue;
                    }
                    let ds = p[j] * (dp[j] - delta);
                    let ds_mag = p[j] * (dp[j].abs() + delta_magnitude);
                    for c in 0..d {
                        dq[row + c] += scale * ds * kh[j * d + c];
                        dk[kvo + j * d + c] += scale * ds * qi[c];
                        dv[kvo + j * d + c] += p[j] * doi[c];
                        dq_mag[row + c] += scale * ds_mag * kh[j * d + c].abs();
                        dk_mag[kvo + j * d + c] += scale * ds_mag * qi[c].abs();
                        dv_mag[kvo + j * d + c] += p[j] * doi[c].abs();
                    }
                }
            }
        }
    }
    Backward {
        dq,
        dk,
        dv,
        dq_magnitude: dq_mag,
        dk_magnitude: dk_mag,
        dv_magnitude: dv_mag,
    }
}
