//! Kernels shared by the tensor-core tests (`mma.rs`, `mma_sim.rs`, `mma_sim_wgmma.rs`,
//! `wgmma.rs`, `hoisting.rs`, `pipeline_shared_load.rs`, `tf32x3.rs`, `report.rs`). Every
//! kernel here is used by at least one of them; each test binary uses a part (hence the
//! allow).
#![allow(dead_code)]

use tegula_ir::prelude::*;
use tegula_ir::Kernel;

/// `c = a @ b (+ acc)` for one tile; `ta` / `tb` load the operand transposed (`x.trans()` of a
/// tile stored the other way round), `iters` > 1 accumulates in a loop.
pub fn dot_tile(
    dt: DType,
    (m, n, k): (usize, usize, usize),
    precision: InputPrecision,
    ta: bool,
    tb: bool,
) -> Kernel {
    trace("dot_tile", |p| {
        let (a, b, c) = (p.ptr("a", dt), p.ptr("b", dt), p.ptr("c", DType::F32));
        let rm = arange(0, m as i64);
        let rn = arange(0, n as i64);
        let rk = arange(0, k as i64);
        let av = if ta {
            load_unmasked(a + rk.col() * m + rm.row()).trans()
        } else {
            load_unmasked(a + rm.col() * k + rk.row())
        };
        let bv = if tb {
            load_unmasked(b + rn.col() * k + rk.row()).trans()
        } else {
            load_unmasked(b + rk.col() * n + rn.row())
        };
        let acc = dot_with(av, bv, None, precision);
        store_unmasked(c + rm.col() * n + rn.row(), acc);
    })
    .map(aligned)
    .unwrap()
}

/// Triton's matmul loop: masked loads of A and B blocks, `acc = dot(a, b, acc)`.
pub fn matmul_loop(dt: DType, bm: usize, bn: usize, bk: usize) -> Kernel {
    matmul_loop_into(dt, DType::F32, bm, bn, bk)
}

/// [`matmul_loop`] written `acc + dot(a, b)` (as Triton's tutorials 08 and 09 do), traced and
/// canonicalized as a launch compiles it.
pub fn matmul_loop_adding(dt: DType, bm: usize, bn: usize, bk: usize) -> Kernel {
    let mut k = matmul_kernel(dt, DType::F32, (bm, bn, bk), true);
    tegula_ir::passes::canonicalize(&mut k);
    k
}

/// [`matmul_loop`] storing C as `out` (the f32 accumulator cast by the store).
pub fn matmul_loop_into(dt: DType, out: DType, bm: usize, bn: usize, bk: usize) -> Kernel {
    matmul_kernel(dt, out, (bm, bn, bk), false)
}

/// [`matmul_loop`] whose k-loop takes `options` (`range(..).num_stages(s)`).
pub fn matmul_loop_with(
    dt: DType,
    bm: usize,
    bn: usize,
    bk: usize,
    options: RangeOptions,
) -> Kernel {
    matmul_kernel_with(dt, DType::F32, (bm, bn, bk), false, options)
}

fn matmul_kernel(dt: DType, out: DType, blocks: (usize, usize, usize), adding: bool) -> Kernel {
    matmul_kernel_with(dt, out, blocks, adding, RangeOptions::new())
}

fn matmul_kernel_with(
    dt: DType,
    out: DType,
    (bm, bn, bk): (usize, usize, usize),
    adding: bool,
    options: RangeOptions,
) -> Kernel {
    trace("matmul", |p| {
        let (a, b, c) = (p.ptr("a", dt), p.ptr("b", dt), p.ptr("c", out));
        let (m, n, k) = (
            p.scalar("m", DType::I32),
            p.scalar("n", DType::I32),
            p.scalar("k", DType::I32),
        );
        let offs_m = program_id(0) * bm + arange(0, bm as i64);
        let offs_n = program_id(1) * bn + arange(0, bn as i64);
        matmul_tile(
            (a, b, c),
            (m, n, k),
            (offs_m, offs_n),
            (bm, bn, bk),
            adding,
            options,
        );
    })
    .map(aligned)
    .unwrap()
}

/// The `bm x bn` tile of rows `offs_m` and columns `offs_n` of `C = A B` (row-major, masked at the
/// edges): a k-loop of `bk`-wide steps with `options` accumulating in f32 (`dot(a, b, acc)`,
/// or with `adding` `acc + dot(a, b)`), then the store.
fn matmul_tile(
    (a, b, c): (Tile, Tile, Tile),
    (m, n, k): (Tile, Tile, Tile),
    (offs_m, offs_n): (Tile, Tile),
    (bm, bn, bk): (usize, usize, usize),
    adding: bool,
    options: RangeOptions,
) {
    let offs_k = arange(0, bk as i64);
    let acc = for_range_with(0, k, bk, options, zeros::<f32>([bm, bn]), |start, acc| {
        let ks = start + offs_k;
        let at = load(
            a + offs_m.col() * k + ks.row(),
            offs_m.col().lt(m) & ks.row().lt(k),
            0.0,
        );
        let bt = load(
            b + ks.col() * n + offs_n.row(),
            ks.col().lt(k) & offs_n.row().lt(n),
            0.0,
        );
        if adding {
            acc + dot(at, bt)
        } else {
            dot_acc(at, bt, acc)
        }
    });
    store(
        c + offs_m.col() * n + offs_n.row(),
        acc,
        offs_m.col().lt(m) & offs_n.row().lt(n),
    );
}

/// Triton's matmul loop with B given as `[n, k]` and read through `.trans()` (tutorial 09's
/// `dot(a, b.T)`; K contiguous in both operands, as fp8 tensor cores need), masked at the
/// edges: A of `da`, B of `db` (the same, or the other fp8 format), C stored as `out`.
pub fn matmul_loop_b_nk(
    (da, db): (DType, DType),
    out: DType,
    (bm, bn, bk): (usize, usize, usize),
) -> Kernel {
    trace("matmul_b_nk", |p| {
        let (a, b, c) = (p.ptr("a", da), p.ptr("b", db), p.ptr("c", out));
        let (m, n, k) = (
            p.scalar("m", DType::I32),
            p.scalar("n", DType::I32),
            p.scalar("k", DType::I32),
        );
        let offs_m = program_id(0) * bm + arange(0, bm as i64);
        let offs_n = program_id(1) * bn + arange(0, bn as i64);
        let offs_k = arange(0, bk as i64);
        let acc = for_range(0, k, bk, zeros::<f32>([bm, bn]), |start, acc| {
            let ks = start + offs_k;
            let at = load(
                a + offs_m.col() * k + ks.row(),
                offs_m.col().lt(m) & ks.row().lt(k),
                0.0,
            );
            let bt = load(
                b + offs_n.col() * k + ks.row(),
                offs_n.col().lt(n) & ks.row().lt(k),
                0.0,
            );
            dot_acc(at, bt.trans(), acc)
        });
        store(
            c + offs_m.col() * n + offs_n.row(),
            acc.cast(out),
            offs_m.col().lt(m) & offs_n.row().lt(n),
        );
    })
    .map(aligned)
    .unwrap()
}

/// [`matmul_loop_into`] on a persistent grid: each program walks the tiles (row-major order)
/// `program_id, program_id + num_programs, ..`, so the next tile's pipeline prologue writes
/// the slots the last tile's store just used for its shared-memory crossing.
pub fn persistent_matmul_into(dt: DType, out: DType, bm: usize, bn: usize, bk: usize) -> Kernel {
    persistent_matmul_with(
        dt,
        out,
        (bm, bn, bk),
        RangeOptions::new(),
        RangeOptions::new(),
    )
}

/// [`persistent_matmul_into`] with `outer` options on the tile loop and `inner` on the
/// k-loop.
pub fn persistent_matmul_with(
    dt: DType,
    out: DType,
    (bm, bn, bk): (usize, usize, usize),
    outer: RangeOptions,
    inner: RangeOptions,
) -> Kernel {
    trace("persistent_matmul", |p| {
        let (a, b, c) = (p.ptr("a", dt), p.ptr("b", dt), p.ptr("c", out));
        let (m, n, k) = (
            p.scalar("m", DType::I32),
            p.scalar("n", DType::I32),
            p.scalar("k", DType::I32),
        );
        let tiles_n = cdiv(n, bn);
        let tiles = cdiv(m, bm) * tiles_n;
        for_range_with(
            program_id(0),
            tiles,
            num_programs(0),
            outer,
            (),
            |tile, ()| {
                let offs_m = (tile / tiles_n) * bm + arange(0, bm as i64);
                let offs_n = (tile % tiles_n) * bn + arange(0, bn as i64);
                matmul_tile(
                    (a, b, c),
                    (m, n, k),
                    (offs_m, offs_n),
                    (bm, bn, bk),
                    false,
                    inner,
                );
            },
        );
    })
    .map(aligned)
    .unwrap()
}

/// FlashAttention forward for one (query block, head): Q resident, K and V streamed,
/// online softmax in base 2, P cast to the input dtype and multiplied by V from registers.
pub fn flash_attention(dt: DType, bm: usize, bn: usize, d: usize) -> Kernel {
    flash_attention_traced("flash_attention", dt, bm, bn, d, false, false)
}

/// [`flash_attention`] with V stored transposed (`[d, n]`), loaded as `[d, BLOCK_N]` blocks and
/// read through `.trans()`, as Triton's fp8 attention stores it (K of `P V` contiguous).
pub fn flash_attention_v_transposed(dt: DType, bm: usize, bn: usize, d: usize) -> Kernel {
    flash_attention_traced("flash_attention_v_transposed", dt, bm, bn, d, false, true)
}

/// [`flash_attention`] with the library forward's epilogue: the accumulator times each row's
/// `1 / l`, cast to the input dtype, and each row's `m + log2(l)` (base 2) stored to `lse`.
pub fn flash_attention_with_lse(dt: DType, bm: usize, bn: usize, d: usize) -> Kernel {
    flash_attention_traced("flash_attention_with_lse", dt, bm, bn, d, true, false)
}

/// The kernels above: parameters `q, k, v, o, [lse], n, scale`.
fn flash_attention_traced(
    name: &str,
    dt: DType,
    bm: usize,
    bn: usize,
    d: usize,
    with_lse: bool,
    v_transposed: bool,
) -> Kernel {
    trace(name, |p| {
        let (q, kp, vp, o) = (
            p.ptr("q", dt),
            p.ptr("k", dt),
            p.ptr("v", dt),
            p.ptr("o", dt),
        );
        let lse = with_lse.then(|| p.ptr("lse", DType::F32));
        let n = p.scalar("n", DType::I32);
        let scale = p.scalar("scale", DType::F32);
        let offs_m = program_id(0) * bm + arange(0, bm as i64);
        let offs_d = arange(0, d as i64);
        let offs_n = arange(0, bn as i64);
        let qv = load_unmasked(q + offs_m.col() * d + offs_d.row());
        let init = (
            full::<f32>([bm], f64::NEG_INFINITY),
            zeros::<f32>([bm]),
            zeros::<f32>([bm, d]),
        );
        let (m_i, l_i, acc) = for_range(0, n, bn, init, |start, (m_i, l_i, acc)| {
            let kv = start + offs_n;
            let kt = load_unmasked(kp + kv.col() * d + offs_d.row());
            let vt = if v_transposed {
                load_unmasked(vp + offs_d.col() * n + kv.row()).trans()
            } else {
                load_unmasked(vp + kv.col() * d + offs_d.row())
            };
            let qk = dot(qv, kt.trans()) * scale;
            let m_ij = maximum(m_i, max(qk, 1));
            let pm = exp2(qk - m_ij.col());
            let alpha = exp2(m_i - m_ij);
            let l_ij = sum(pm, 1);
            let acc = dot_acc(pm.cast(dt), vt, acc * alpha.col());
            (m_ij, l_i * alpha + l_ij, acc)
        });
        let o_ptrs = o + offs_m.col() * d + offs_d.row();
        match lse {
            None => store_unmasked(o_ptrs, (acc / l_i.col()).cast(dt)),
            Some(lse) => {
                let l_rcp: Tile = 1.0 / l_i;
                store_unmasked(o_ptrs, (acc * l_rcp.col()).cast(dt));
                store_unmasked(lse + offs_m, m_i + log2(l_i));
            }
        }
    })
    .map(aligned)
    .unwrap()
}

/// [`flash_attention`] with the keys split over two loops, `[0, split)` and `[split, n)`, both
/// reading the same Q (the library's unmasked and masked loops).
pub fn flash_attention_two_loops(dt: DType, bm: usize, bn: usize, d: usize) -> Kernel {
    trace("flash_attention_two_loops", |p| {
        let (q, kp, vp, o) = (
            p.ptr("q", dt),
            p.ptr("k", dt),
            p.ptr("v", dt),
            p.ptr("o", dt),
        );
        let n = p.scalar("n", DType::I32);
        let scale = p.scalar("scale", DType::F32);
        let split = p.scalar("split", DType::I32);
        let offs_m = program_id(0) * bm + arange(0, bm as i64);
        let offs_d = arange(0, d as i64);
        let offs_n = arange(0, bn as i64);
        let qv = load_unmasked(q + offs_m.col() * d + offs_d.row());
        let step = |start: Tile, (m_i, l_i, acc): (Tile, Tile, Tile)| {
            let kv = start + offs_n;
            let kt = load_unmasked(kp + kv.col() * d + offs_d.row());
            let vt = load_unmasked(vp + kv.col() * d + offs_d.row());
            let qk = dot(qv, kt.trans()) * scale;
            let m_ij = maximum(m_i, max(qk, 1));
            let pm = exp2(qk - m_ij.col());
            let alpha = exp2(m_i - m_ij);
            let l_ij = sum(pm, 1);
            let acc = dot_acc(pm.cast(dt), vt, acc * alpha.col());
            (m_ij, l_i * alpha + l_ij, acc)
        };
        let init = (
            full::<f32>([bm], f64::NEG_INFINITY),
            zeros::<f32>([bm]),
            zeros::<f32>([bm, d]),
        );
        let state = for_range(0, split, bn, init, step);
        let (_, l_i, acc) = for_range(split, n, bn, state, step);
        store_unmasked(
            o + offs_m.col() * d + offs_d.row(),
            (acc / l_i.col()).cast(dt),
        );
    })
    .map(aligned)
    .unwrap()
}

/// One streamed tile read by four dot operands, in every (role, orientation) an `ldmatrix`
/// can read it: a loop over the `[bm, d]` blocks of X (rows past `n` masked) with K `[bn, d]`
/// and W `[d, e]` resident accumulates
/// - `a += (K X^T).cast(dt) X` (`[bn, d]`: X as B read K-major, then as B read with `.trans`),
/// - `g += X^T X` (`[d, d]`: X as A with `.trans` and as B with `.trans` in one dot),
/// - `c += X W` (`[bm, e]`: X as A, K-major),
///
/// stored as f32 at `a`, `g` and `c` (row-major).
pub fn shared_operand_loop(dt: DType, bm: usize, bn: usize, d: usize, e: usize) -> Kernel {
    trace("shared_operand_loop", |p| {
        let (x, kp, wp) = (p.ptr("x", dt), p.ptr("k", dt), p.ptr("w", dt));
        let (ap, gp, cp) = (
            p.ptr("a", DType::F32),
            p.ptr("g", DType::F32),
            p.ptr("c", DType::F32),
        );
        let n = p.scalar("n", DType::I32);
        let offs_n = arange(0, bn as i64);
        let offs_d = arange(0, d as i64);
        let offs_e = arange(0, e as i64);
        let offs_m = arange(0, bm as i64);
        let kv = load_unmasked(kp + offs_n.col() * d + offs_d.row());
        let wv = load_unmasked(wp + offs_d.col() * e + offs_e.row());
        let init = (
            zeros::<f32>([bn, d]),
            zeros::<f32>([d, d]),
            zeros::<f32>([bm, e]),
        );
        let (a, g, c) = for_range(0, n, bm, init, |start, (a, g, c)| {
            let rows = start + offs_m;
            let xt = load(x + rows.col() * d + offs_d.row(), rows.col().lt(n), 0.0);
            let s = dot(kv, xt.trans());
            let a = dot_acc(s.cast(dt), xt, a);
            let g = dot_acc(xt.trans(), xt, g);
            let c = dot_acc(xt, wv, c);
            (a, g, c)
        });
        store_unmasked(ap + offs_n.col() * d + offs_d.row(), a);
        store_unmasked(gp + offs_d.col() * d + offs_d.row(), g);
        store_unmasked(cp + offs_m.col() * e + offs_e.row(), c);
    })
    .map(aligned)
    .unwrap()
}

/// FlashAttention's backward nest in miniature: K and V `[bn, d]` loaded once, a loop over
/// `groups` heads with a loop over the `[bm, d]` row blocks of each head's X nested in it (rows
/// past `n` masked). Each step computes `p = (K X^T + V X^T).cast(dt)` (`[bn, bm]`: K and V as
/// A), accumulates `a += p X` (`[bn, d]`) and stores `y = p^T K` (`[bm, d]`: K as B, K the
/// stored row) as f32 rows `g * n + row` of `y`; `a` is stored at the end.
pub fn resident_operand_nest(dt: DType, bm: usize, bn: usize, d: usize) -> Kernel {
    trace("resident_operand_nest", |p| {
        let (x, kp, vp) = (p.ptr("x", dt), p.ptr("k", dt), p.ptr("v", dt));
        let (ap, yp) = (p.ptr("a", DType::F32), p.ptr("y", DType::F32));
        let n = p.scalar("n", DType::I32);
        let groups = p.scalar("groups", DType::I32);
        let offs_n = arange(0, bn as i64);
        let offs_d = arange(0, d as i64);
        let offs_m = arange(0, bm as i64);
        let kv = load_unmasked(kp + offs_n.col() * d + offs_d.row());
        let vv = load_unmasked(vp + offs_n.col() * d + offs_d.row());
        let a = for_range(0, groups, 1, zeros::<f32>([bn, d]), |g, a| {
            let row0 = g * n;
            for_range(0, n, bm, a, |start, a| {
                let rows = start + offs_m;
                let in_rows = rows.col().lt(n);
                let xt = load(x + (row0 + rows).col() * d + offs_d.row(), in_rows, 0.0);
                let pt = (dot(kv, xt.trans()) + dot(vv, xt.trans())).cast(dt);
                let y = dot(pt.trans(), kv);
                store(yp + (row0 + rows).col() * d + offs_d.row(), y, in_rows);
                dot_acc(pt, xt, a)
            })
        });
        store_unmasked(ap + offs_n.col() * d + offs_d.row(), a);
    })
    .map(aligned)
    .unwrap()
}

/// Marks every pointer and integer parameter as divisible by 16, as the runtime's
/// specialization does for aligned tensors (16-byte vector loads).
pub fn aligned(mut k: Kernel) -> Kernel {
    for p in &mut k.params {
        if p.ty.is_ptr() || p.ty.dtype().is_int() {
            p.facts.divisibility = 16;
        }
    }
    k
}
