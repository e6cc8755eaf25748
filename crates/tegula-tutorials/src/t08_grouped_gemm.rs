//! Tutorial 08, grouped GEMM: several independent fp16 matrix products `C_g = A_g B_g` in one
//! launch of a fixed number of programs (`NUM_SM`), which walk the tiles of all the products
//! in turn.
//!
//! # The Triton code
//!
//! The host builds device tables: the addresses of every A, B and C (`torch.tensor(A_addrs)`,
//! int64), the sizes `<M, N, K>` of each product and its leading dimensions `<lda, ldb, ldc>`
//! (int32, `[group_size, 3]`). `grouped_matmul_kernel` runs `NUM_SM` programs; program `p`
//! starts at tile `p` of a virtual list holding every product's tiles one product after
//! another. It loops over the products (`for g in range(group_size)`), and while its tile
//! falls inside product `g` (`tile_idx - last_problem_end < num_tiles`) it computes that tile:
//! loads the product's pointers from the tables (`tl.load(group_a_ptrs + g).to(tl.pointer_type(
//! tl.float16))`), builds pointer tiles, runs the K loop advancing them, stores the fp16 tile,
//! and moves on by `NUM_SM` tiles. The tiles are assumed whole: no loads or stores are masked.
//! The autotune key is `group_size`; the configs choose the tile and `NUM_SM`.
//!
//! `grouped_matmul_kernel_tma` (the tutorial's Hopper variant) takes B transposed (`[N, K]`)
//! and reads and writes through tensor descriptors made in the kernel for each product; its
//! loop over a product's tiles sits inside an `if` on the first tile.
//!
//! # What maps to what
//!
//! | Triton | tegula |
//! | --- | --- |
//! | `last_problem_end = 0`, reassigned in `for g in range(group_size)` | `let mut last_problem_end = scalar(0)`: a tile, so the loop can carry it |
//! | `while (tile_idx >= a and tile_idx < b):` | `while tile_idx.ge(a) & tile_idx.lt(b) { .. }`: an IR `while` carrying `tile_idx` |
//! | `tl.load(group_gemm_sizes + g * 3)` (a scalar pointer) | `load_unmasked(group_gemm_sizes + g * 3)` |
//! | `accumulator += tl.dot(a, b)` | `accumulator += dot(a, b)` |
//! | `tl.multiple_of(a_ptrs, [16, 16])` (its value unused) | `multiple_of(a_ptrs, [16, 16])`, unused likewise |
//! | `tl.load(group_a_ptrs + g).to(tl.pointer_type(tl.float16))` | `int_to_ptr::<f16>(load_unmasked(group_a_ptrs + g))` ([`table_ptr`]) |
//! | `torch.tensor([A.data_ptr() for A in group_A])` | the same table, from [`Tensor::data_ptr`](tegula::Tensor::data_ptr) |
//! | `tl.make_tensor_descriptor(..)`, `desc.load([..])` | the same, `desc.load((..))` |
//!
//! # What differs
//!
//! On a GPU the host builds the tutorial's tables of device addresses ([`GemmGroup`]) and the
//! kernels turn them into pointers with `int_to_ptr`, as the tutorial's do. The interpreter
//! cannot take host addresses as integers (the addresses `to_int` gives there belong to one
//! launch's buffer arguments: docs/semantics.md, "Pointers as integers"), so there the
//! group's matrices are copied into one buffer per operand, the tables hold byte offsets into
//! them, and the kernels take the three buffers as extra arguments (`base_a`, `base_b`,
//! `base_c`) and add their addresses (`base.to_int() + offset`) under the constexpr
//! `OFFSETS`, with a `workaround` note; on the GPU `OFFSETS` is false and the buffers are not
//! read. [`grouped_matmul`] launches on a prepared group, like the tutorial's
//! `triton_perf_fn`.
//!
//! Because the plain kernel masks nothing, a product whose M, N or K is not a multiple of the
//! config's blocks would read and write past its matrices; the host prunes such configs from
//! the candidates and refuses a config that does not fit (a typed error), where the tutorial
//! would silently go out of bounds. The descriptor variant checks bounds in its loads and
//! stores and takes any size. fp8 (`FP8`, `tl.float8e4nv`) is not ported yet: the kernels and
//! their host tables are fp16.
#![allow(non_snake_case)]
// The tutorial writes `last_problem_end = last_problem_end + num_tiles`.
#![allow(clippy::assign_op_pattern)]

use crate::common::{self, config, cx};
use crate::{Bench, BenchShape, CheckReport, Port};
use tegula::autotune::{median_ms, Config, Tuning};
use tegula::ir::DType;
use tegula::prelude::*;
use tegula::Result;

/// `num_sms()`: the GPU's SMs, or 148 elsewhere (the tutorial's answer off CUDA).
pub fn num_sms(dev: &Device) -> usize {
    dev.sm_count().unwrap_or(148)
}

/// The tutorial's six autotune configs of `grouped_matmul_kernel` (Triton's default 4 warps
/// and 3 stages).
pub fn grouped_configs(dev: &Device) -> Vec<Config> {
    let c = |bm, bn, bk, nsm| {
        config(
            &[
                ("BLOCK_SIZE_M", bm),
                ("BLOCK_SIZE_N", bn),
                ("BLOCK_SIZE_K", bk),
                ("NUM_SM", nsm),
            ],
            4,
            3,
        )
    };
    let sms = num_sms(dev) as i64;
    vec![
        c(128, 128, 32, 84),
        c(128, 128, 32, 128),
        c(64, 64, 32, 84),
        c(64, 64, 32, 128),
        c(128, 128, 64, sms),
        c(64, 128, 64, sms),
    ]
}

/// The tutorial's `tma_configs`: BM 128, BN 128 or 256, BK 64 or 128, 3 or 4 stages, 4 or 8
/// warps.
pub fn tma_configs() -> Vec<Config> {
    let mut out = Vec::new();
    for BM in [128] {
        for BN in [128, 256] {
            for BK in [64, 128] {
                for s in [3, 4] {
                    for w in [4, 8] {
                        out.push(config(
                            &[
                                ("BLOCK_SIZE_M", BM),
                                ("BLOCK_SIZE_N", BN),
                                ("BLOCK_SIZE_K", BK),
                            ],
                            w,
                            s,
                        ));
                    }
                }
            }
        }
    }
    out
}

/// `tl.load(table + g).to(tl.pointer_type(tl.float16))`: the pointer to product `g`'s matrix
/// from a table of addresses.
// workaround: the interpreter cannot take host addresses as integers (docs/semantics.md,
// "Pointers as integers"); with `OFFSETS` the table holds byte offsets into `base`, whose
// address is added (`base.to_int()`). On the GPU `OFFSETS` is false: the table holds device
// addresses, as the tutorial's, and `base` is not read.
pub fn table_ptr(table: Tile, g: Tile, base: Tile, OFFSETS: bool) -> Tile {
    let addr = load_unmasked(table + g);
    int_to_ptr::<f16>(if OFFSETS { base.to_int() + addr } else { addr })
}

#[tegula::kernel]
pub fn grouped_matmul_kernel(
    // device tensor of matrices pointers
    group_a_ptrs: Ptr<i64>,
    group_b_ptrs: Ptr<i64>,
    group_c_ptrs: Ptr<i64>,
    // device tensor of gemm sizes. its shape is [group_size, 3]
    // dim 0 is group_size, dim 1 is the values of <M, N, K> of each gemm
    group_gemm_sizes: Ptr<i32>,
    // device tensor of leading dimension sizes. its shape is [group_size, 3]
    // dim 0 is group_size, dim 1 is the values of <lda, ldb, ldc> of each gemm
    g_lds: Ptr<i32>,
    // number of gemms
    group_size: i32,
    // workaround: the buffers the tables' byte offsets point into on the interpreter (see
    // table_ptr); not read on the GPU.
    base_a: Ptr<f16>,
    base_b: Ptr<f16>,
    base_c: Ptr<f16>,
    // number of virtual SM
    #[constexpr] NUM_SM: usize,
    // tile sizes
    #[constexpr] BLOCK_SIZE_M: usize,
    #[constexpr] BLOCK_SIZE_N: usize,
    #[constexpr] BLOCK_SIZE_K: usize,
    // workaround: the tables hold byte offsets into base_a, base_b, base_c (the interpreter)
    #[constexpr] OFFSETS: bool,
) {
    let mut tile_idx = program_id(0);
    let mut last_problem_end = scalar(0);
    for g in range(group_size) {
        // get the gemm size of the current problem
        let gm = load_unmasked(group_gemm_sizes + g * 3);
        let gn = load_unmasked(group_gemm_sizes + g * 3 + 1);
        let gk = load_unmasked(group_gemm_sizes + g * 3 + 2);
        let num_m_tiles = cdiv(gm, BLOCK_SIZE_M);
        let num_n_tiles = cdiv(gn, BLOCK_SIZE_N);
        let num_tiles = num_m_tiles * num_n_tiles;
        // iterate through the tiles in the current gemm problem
        while tile_idx.ge(last_problem_end) & tile_idx.lt(last_problem_end + num_tiles) {
            // pick up a tile from the current gemm problem
            let k = gk;
            let lda = load_unmasked(g_lds + g * 3);
            let ldb = load_unmasked(g_lds + g * 3 + 1);
            let ldc = load_unmasked(g_lds + g * 3 + 2);
            let a_ptr = table_ptr(group_a_ptrs, g, base_a, OFFSETS);
            let b_ptr = table_ptr(group_b_ptrs, g, base_b, OFFSETS);
            let c_ptr = table_ptr(group_c_ptrs, g, base_c, OFFSETS);
            // figure out tile coordinates
            let tile_idx_in_gemm = tile_idx - last_problem_end;
            let tile_m_idx = tile_idx_in_gemm / num_n_tiles;
            let tile_n_idx = tile_idx_in_gemm % num_n_tiles;

            // do regular gemm here
            let offs_am = tile_m_idx * BLOCK_SIZE_M + arange(0, BLOCK_SIZE_M);
            let offs_bn = tile_n_idx * BLOCK_SIZE_N + arange(0, BLOCK_SIZE_N);
            let offs_k = arange(0, BLOCK_SIZE_K);
            let mut a_ptrs = a_ptr + offs_am.col() * lda + offs_k.row();
            let mut b_ptrs = b_ptr + offs_k.col() * ldb + offs_bn.row();
            let mut accumulator = zeros::<f32>([BLOCK_SIZE_M, BLOCK_SIZE_N]);
            for _kk in range(0, cdiv(k, BLOCK_SIZE_K)) {
                // hint to Triton compiler to do proper loop pipelining (its value is unused,
                // as in the tutorial)
                multiple_of(a_ptrs, [16, 16]);
                multiple_of(b_ptrs, [16, 16]);
                // assume full tile for now
                let a = load_unmasked(a_ptrs);
                let b = load_unmasked(b_ptrs);
                accumulator += dot(a, b);
                a_ptrs += BLOCK_SIZE_K;
                b_ptrs += BLOCK_SIZE_K * ldb;
            }
            let c = accumulator.to::<f16>();

            let offs_cm = tile_m_idx * BLOCK_SIZE_M + arange(0, BLOCK_SIZE_M);
            let offs_cn = tile_n_idx * BLOCK_SIZE_N + arange(0, BLOCK_SIZE_N);
            let c_ptrs = c_ptr + ldc * offs_cm.col() + offs_cn.row();

            // assumes full tile for now
            store_unmasked(c_ptrs, c);

            // go to the next tile by advancing NUM_SM
            tile_idx += NUM_SM;
        }

        // get ready to go to the next gemm problem
        last_problem_end = last_problem_end + num_tiles;
    }
}

#[tegula::kernel]
pub fn grouped_matmul_tma_kernel(
    // device tensor of matrices pointers
    group_a_ptrs: Ptr<i64>,
    group_b_ptrs: Ptr<i64>,
    group_c_ptrs: Ptr<i64>,
    // device tensor of gemm sizes. its shape is [group_size, 3]
    // dim 0 is group_size, dim 1 is the values of <M, N, K> of each gemm
    group_gemm_sizes: Ptr<i32>,
    // device tensor of leading dimension sizes. its shape is [group_size, 3]
    // dim 0 is group_size, dim 1 is the values of <lda, ldb, ldc> of each gemm
    g_lds: Ptr<i32>,
    // number of gemms
    group_size: i32,
    // workaround: the interpreter's buffers (see table_ptr).
    base_a: Ptr<f16>,
    base_b: Ptr<f16>,
    base_c: Ptr<f16>,
    // number of virtual SM
    #[constexpr] NUM_SM: usize,
    // tile sizes
    #[constexpr] BLOCK_SIZE_M: usize,
    #[constexpr] BLOCK_SIZE_N: usize,
    #[constexpr] BLOCK_SIZE_K: usize,
    // workaround: the FP8 constexpr (is the output FP8 or FP16) is left out: the fp8 path is
    // not ported yet; dtype is float16. OFFSETS: see table_ptr.
    #[constexpr] OFFSETS: bool,
) {
    let mut tile_idx = program_id(0);
    let mut last_problem_end = scalar(0);
    for g in range(group_size) {
        // get the gemm size of the current problem
        let gm = load_unmasked(group_gemm_sizes + g * 3);
        let gn = load_unmasked(group_gemm_sizes + g * 3 + 1);
        let gk = load_unmasked(group_gemm_sizes + g * 3 + 2);
        let num_m_tiles = cdiv(gm, BLOCK_SIZE_M);
        let num_n_tiles = cdiv(gn, BLOCK_SIZE_N);
        let num_tiles = num_m_tiles * num_n_tiles;
        if tile_idx.ge(last_problem_end) & tile_idx.lt(last_problem_end + num_tiles) {
            // pick up a tile from the current gemm problem
            let lda = load_unmasked(g_lds + g * 3);
            let ldb = load_unmasked(g_lds + g * 3 + 1);
            let ldc = load_unmasked(g_lds + g * 3 + 2);

            let a_ptr = table_ptr(group_a_ptrs, g, base_a, OFFSETS);
            let b_ptr = table_ptr(group_b_ptrs, g, base_b, OFFSETS);
            let c_ptr = table_ptr(group_c_ptrs, g, base_c, OFFSETS);

            let a_desc =
                make_tensor_descriptor(a_ptr, (gm, gk), (lda, 1), [BLOCK_SIZE_M, BLOCK_SIZE_K]);
            let b_desc =
                make_tensor_descriptor(b_ptr, (gn, gk), (ldb, 1), [BLOCK_SIZE_N, BLOCK_SIZE_K]);
            let c_desc =
                make_tensor_descriptor(c_ptr, (gm, gn), (ldc, 1), [BLOCK_SIZE_M, BLOCK_SIZE_N]);

            // iterate through the tiles in the current gemm problem
            while tile_idx.ge(last_problem_end) & tile_idx.lt(last_problem_end + num_tiles) {
                let k = gk;
                // figure out tile coordinates
                let tile_idx_in_gemm = tile_idx - last_problem_end;
                let tile_m_idx = tile_idx_in_gemm / num_n_tiles;
                let tile_n_idx = tile_idx_in_gemm % num_n_tiles;

                // do regular gemm here
                let offs_am = tile_m_idx * BLOCK_SIZE_M;
                let offs_bn = tile_n_idx * BLOCK_SIZE_N;

                let mut accumulator = zeros::<f32>([BLOCK_SIZE_M, BLOCK_SIZE_N]);
                for kk in range(0, cdiv(k, BLOCK_SIZE_K)) {
                    let a = a_desc.load((offs_am, kk * BLOCK_SIZE_K));
                    let b = b_desc.load((offs_bn, kk * BLOCK_SIZE_K));
                    accumulator += dot(a, b.trans());
                }

                let offs_cm = tile_m_idx * BLOCK_SIZE_M;
                let offs_cn = tile_n_idx * BLOCK_SIZE_N;

                let c = accumulator.to::<f16>();
                c_desc.store((offs_cm, offs_cn), c);

                // go to the next tile by advancing NUM_SM
                tile_idx += NUM_SM;
            }
        }

        // get ready to go to the next gemm problem
        last_problem_end = last_problem_end + num_tiles;
    }
}

const OP: &str = "tutorial-08-grouped-gemm";

/// A group of products as the kernels read it: the device tables of the matrices' addresses,
/// sizes and leading dimensions (the tutorial's `d_a_ptrs`, .., `d_g_lds`) and the matrices
/// they point to.
///
/// On a GPU (and a recording device standing for one) the tables hold the device addresses of
/// the caller's A and B and of new C matrices (`A.data_ptr()`, as the tutorial's host
/// function). On the interpreter, whose kernels cannot take host addresses as integers, the
/// group's matrices are copied into one buffer per operand (`bases`) and the tables hold
/// byte offsets into them (see [`table_ptr`]).
#[derive(Clone, Debug)]
pub struct GemmGroup {
    pub a_ptrs: Tensor<i64>,
    pub b_ptrs: Tensor<i64>,
    pub c_ptrs: Tensor<i64>,
    /// `[M, N, K]` of each product.
    pub sizes: Tensor<i32>,
    /// `[lda, ldb, ldc]` of each product.
    pub lds: Tensor<i32>,
    /// `(M, N, K)` of each product, on the host.
    pub mnk: Vec<(usize, usize, usize)>,
    /// Whether B is stored transposed (`[N, K]`, the descriptor variant's layout).
    pub b_transposed: bool,
    /// The matrices the tables point to (the caller's on a GPU, the packed copies'
    /// views on the interpreter), kept alive with the tables.
    pub group_a: Vec<Tensor<f16>>,
    pub group_b: Vec<Tensor<f16>>,
    /// The outputs `C_g` `[M, N]`.
    pub group_c: Vec<Tensor<f16>>,
    /// On the interpreter: the buffers of A, B and C that the tables' byte offsets point into.
    pub bases: Option<[Tensor<f16>; 3]>,
}

/// The i32 of a size or leading dimension, or a typed error.
fn lds_i32(v: usize) -> Result<i32> {
    common::as_i32(OP, "a size or leading dimension", v)
}

impl GemmGroup {
    /// The tables for `group_A[g]` `[M, K]` and `group_B[g]`: `[K, N]`, or `[N, K]` when
    /// `b_transposed` (the layout of `group_gemm_tma_fn`), with new outputs. Each matrix needs
    /// unit stride along its last axis (the kernels index its rows by the leading dimension).
    pub fn new(
        group_A: &[Tensor<f16>],
        group_B: &[Tensor<f16>],
        b_transposed: bool,
    ) -> Result<GemmGroup> {
        if group_A.len() != group_B.len() {
            return Err(common::invalid(
                OP,
                format!(
                    "{} A matrices and {} B matrices",
                    group_A.len(),
                    group_B.len()
                ),
            ));
        }
        let Some(first) = group_A.first() else {
            return Err(common::invalid(OP, "an empty group"));
        };
        let dev = first.device();
        let mut mnk = Vec::new();
        for (A, B) in group_A.iter().zip(group_B) {
            common::expect_rank(OP, "A", A, 2)?;
            common::expect_rank(OP, "B", B, 2)?;
            common::expect_same_device(OP, first, A)?;
            common::expect_same_device(OP, first, B)?;
            let (M, K) = (A.shape()[0], A.shape()[1]);
            let (kb, N) = if b_transposed {
                (B.shape()[1], B.shape()[0])
            } else {
                (B.shape()[0], B.shape()[1])
            };
            if kb != K {
                return Err(tegula::Error::Shape {
                    op: OP.into(),
                    message: format!("A is {:?} and B is {:?}", A.shape(), B.shape()),
                });
            }
            for (name, t) in [("A", A), ("B", B)] {
                if t.shape()[1] > 1 && t.strides()[1] != 1 {
                    return Err(tegula::Error::Stride {
                        op: OP.into(),
                        message: format!(
                            "`{name}` must have unit stride along its last axis, got strides {:?}",
                            t.strides()
                        ),
                    });
                }
                common::expect_i32_extent(OP, name, t)?;
            }
            mnk.push((M, N, K));
        }
        let i32s = |v: &[i32]| dev.from_slice(v, [v.len()]);
        let i64s = |v: &[i64]| dev.from_slice(v, [v.len()]);
        let mut g_sizes = Vec::new();
        for &(m, n, k) in &mnk {
            g_sizes.extend([lds_i32(m)?, lds_i32(n)?, lds_i32(k)?]);
        }
        // A GPU, or a recording device standing for one: the tutorial's tables of addresses.
        if dev.sm_count().is_some() {
            let group_C = mnk
                .iter()
                .map(|&(m, n, _)| dev.empty::<f16>([m, n]))
                .collect::<Result<Vec<_>>>()?;
            let (mut A_addrs, mut B_addrs, mut C_addrs) = (Vec::new(), Vec::new(), Vec::new());
            let mut g_lds = Vec::new();
            for ((A, B), C) in group_A.iter().zip(group_B).zip(&group_C) {
                // A recording device's host tensors have no address: its launches never run.
                let addr = |t: &Tensor<f16>| t.data_ptr().unwrap_or(0) as i64;
                A_addrs.push(addr(A));
                B_addrs.push(addr(B));
                C_addrs.push(addr(C));
                g_lds.extend([
                    lds_i32(A.strides()[0])?,
                    lds_i32(B.strides()[0])?,
                    lds_i32(C.strides()[0])?,
                ]);
            }
            return Ok(GemmGroup {
                a_ptrs: i64s(&A_addrs)?,
                b_ptrs: i64s(&B_addrs)?,
                c_ptrs: i64s(&C_addrs)?,
                sizes: i32s(&g_sizes)?,
                lds: i32s(&g_lds)?,
                mnk,
                b_transposed,
                group_a: group_A.to_vec(),
                group_b: group_B.to_vec(),
                group_c: group_C,
                bases: None,
            });
        }
        // The interpreter: one buffer per operand, byte offsets into it.
        let (mut a_host, mut b_host) = (Vec::new(), Vec::new());
        let (mut A_offs, mut B_offs, mut C_offs) = (Vec::new(), Vec::new(), Vec::new());
        let mut g_lds = Vec::new();
        let mut c_len = 0usize;
        let size = DType::F16.size_bytes();
        for ((A, B), &(M, N, K)) in group_A.iter().zip(group_B).zip(&mnk) {
            A_offs.push((a_host.len() * size) as i64);
            B_offs.push((b_host.len() * size) as i64);
            C_offs.push((c_len * size) as i64);
            // Packed contiguous: lda = K, ldb = N (K for B transposed), ldc = N.
            a_host.extend(A.to_vec()?);
            b_host.extend(B.to_vec()?);
            c_len += M * N;
            g_lds.extend([
                lds_i32(K)?,
                lds_i32(if b_transposed { K } else { N })?,
                lds_i32(N)?,
            ]);
        }
        for (name, len) in [("A", a_host.len()), ("B", b_host.len()), ("C", c_len)] {
            common::as_i32(OP, &format!("the elements of every {name}"), len)?;
        }
        let a = dev.from_slice(&a_host, [a_host.len().max(1)])?;
        let b = dev.from_slice(&b_host, [b_host.len().max(1)])?;
        let c = dev.empty::<f16>([c_len.max(1)])?;
        let view = |t: &Tensor<f16>, off: i64, rows: usize, cols: usize| {
            t.narrow(0, off as usize / size, rows * cols)?
                .reshape([rows, cols])
        };
        let mut views = (Vec::new(), Vec::new(), Vec::new());
        for (g, &(m, n, k)) in mnk.iter().enumerate() {
            views.0.push(view(&a, A_offs[g], m, k)?);
            let (br, bc) = if b_transposed { (n, k) } else { (k, n) };
            views.1.push(view(&b, B_offs[g], br, bc)?);
            views.2.push(view(&c, C_offs[g], m, n)?);
        }
        Ok(GemmGroup {
            a_ptrs: i64s(&A_offs)?,
            b_ptrs: i64s(&B_offs)?,
            c_ptrs: i64s(&C_offs)?,
            sizes: i32s(&g_sizes)?,
            lds: i32s(&g_lds)?,
            mnk,
            b_transposed,
            group_a: views.0,
            group_b: views.1,
            group_c: views.2,
            bases: Some([a, b, c]),
        })
    }

    /// Whether the tables hold byte offsets into [`GemmGroup::bases`] (the interpreter).
    pub fn offsets(&self) -> bool {
        self.bases.is_some()
    }

    /// The kernels' `base_a`, `base_b`, `base_c`: the interpreter's buffers, or on a GPU any
    /// matrices of the group (not read).
    fn base_args(&self) -> [&Tensor<f16>; 3] {
        match &self.bases {
            Some([a, b, c]) => [a, b, c],
            None => [&self.group_a[0], &self.group_b[0], &self.group_c[0]],
        }
    }

    pub fn group_size(&self) -> usize {
        self.mnk.len()
    }

    fn device(&self) -> &Device {
        self.a_ptrs.device()
    }

    /// Whether the plain kernel's unmasked tiles cover every product exactly with `meta`.
    pub fn whole_tiles(&self, meta: &Config) -> bool {
        let b = |n: &str| meta.get(n).unwrap_or(1).max(1) as usize;
        self.mnk.iter().all(|&(m, n, k)| {
            m % b("BLOCK_SIZE_M") == 0 && n % b("BLOCK_SIZE_N") == 0 && k % b("BLOCK_SIZE_K") == 0
        })
    }
}

/// `grouped_matmul_kernel[grid](..)` with one config: grid `(NUM_SM,)`.
pub fn grouped_matmul_launch(group: &GemmGroup, meta: &Config) -> Result<()> {
    if group.b_transposed {
        return Err(common::invalid(
            OP,
            "grouped_matmul_kernel takes B as [K, N]; this group holds B transposed",
        ));
    }
    if !group.whole_tiles(meta) {
        return Err(common::invalid(
            OP,
            format!(
                "config {meta}: grouped_matmul_kernel masks nothing, so every M, N and K must be \
                 a multiple of its blocks; the group has {:?}",
                group.mnk
            ),
        ));
    }
    let NUM_SM = cx(meta, "NUM_SM")?;
    let [base_a, base_b, base_c] = group.base_args();
    grouped_matmul_kernel::launch_with(
        group.device(),
        NUM_SM,
        meta.launch_config(),
        &group.a_ptrs,
        &group.b_ptrs,
        &group.c_ptrs,
        &group.sizes,
        &group.lds,
        group.group_size() as i32,
        base_a,
        base_b,
        base_c,
        NUM_SM,
        cx(meta, "BLOCK_SIZE_M")?,
        cx(meta, "BLOCK_SIZE_N")?,
        cx(meta, "BLOCK_SIZE_K")?,
        group.offsets(),
    )
}

/// The autotuner's choice (`key=['group_size']`) among the configs whose tiles cover the
/// group's products exactly.
pub fn grouped_tuned_config(group: &GemmGroup) -> Result<Config> {
    let dev = group.device();
    let configs: Vec<Config> = grouped_configs(dev)
        .into_iter()
        .filter(|c| group.whole_tiles(c))
        .collect();
    let Some(first) = configs.first() else {
        return Err(common::invalid(
            OP,
            format!(
                "no config's blocks divide the group's sizes {:?} (grouped_matmul_kernel masks \
                 nothing)",
                group.mnk
            ),
        ));
    };
    // The tutorial's key, plus which configs fit (the pruning depends on the sizes).
    let fits: String = configs.iter().map(|c| format!("[{c}]")).collect();
    let key = format!("group_size={},{fits}", group.group_size());
    let first = first.clone();
    common::autotune(
        dev,
        "tegula_tutorials::t08_grouped_matmul",
        &key,
        || {
            let ir = grouped_matmul_kernel::trace(
                cx(&first, "NUM_SM")?,
                cx(&first, "BLOCK_SIZE_M")?,
                cx(&first, "BLOCK_SIZE_N")?,
                cx(&first, "BLOCK_SIZE_K")?,
                group.offsets(),
            )?;
            Ok(Tuning::new(
                "tegula_tutorials::t08_grouped_matmul",
                &ir.to_string(),
                key.clone(),
                configs,
            )
            .prepare_with(move |meta| dev.prepare(|| grouped_matmul_launch(group, meta))))
        },
        |meta| median_ms(dev, || grouped_matmul_launch(group, meta)),
    )
}

/// The tutorial's `triton_perf_fn`: launches the autotuned kernel on a packed group.
pub fn grouped_matmul(group: &GemmGroup) -> Result<()> {
    let meta = grouped_tuned_config(group)?;
    grouped_matmul_launch(group, &meta)
}

/// The tutorial's `group_gemm_fn(group_A, group_B)`: packs the group, launches, returns the
/// outputs.
pub fn group_gemm_fn(group_A: &[Tensor<f16>], group_B: &[Tensor<f16>]) -> Result<Vec<Tensor<f16>>> {
    let group = GemmGroup::new(group_A, group_B, false)?;
    grouped_matmul(&group)?;
    Ok(group.group_c)
}

/// `grouped_matmul_tma_kernel[grid](.., NUM_SM=num_sms())` with one config.
pub fn grouped_matmul_tma_launch(group: &GemmGroup, meta: &Config) -> Result<()> {
    if !group.b_transposed {
        return Err(common::invalid(
            OP,
            "grouped_matmul_tma_kernel takes B transposed ([N, K]); this group holds B as [K, N]",
        ));
    }
    let dev = group.device();
    let NUM_SM = num_sms(dev);
    let [base_a, base_b, base_c] = group.base_args();
    grouped_matmul_tma_kernel::launch_with(
        dev,
        NUM_SM,
        meta.launch_config(),
        &group.a_ptrs,
        &group.b_ptrs,
        &group.c_ptrs,
        &group.sizes,
        &group.lds,
        group.group_size() as i32,
        base_a,
        base_b,
        base_c,
        NUM_SM,
        cx(meta, "BLOCK_SIZE_M")?,
        cx(meta, "BLOCK_SIZE_N")?,
        cx(meta, "BLOCK_SIZE_K")?,
        group.offsets(),
    )
}

/// The autotuner's choice for the descriptor variant. The tutorial's key is the three table
/// pointers and `group_size` (so a new group tunes again); here the key is the group's
/// sizes, which is what the pointers stand for between calls on one group.
pub fn grouped_tma_tuned_config(group: &GemmGroup) -> Result<Config> {
    let dev = group.device();
    let key = format!("group_size={},mnk={:?}", group.group_size(), group.mnk);
    common::autotune(
        dev,
        "tegula_tutorials::t08_grouped_matmul_tma",
        &key,
        || {
            let configs = tma_configs();
            let first = &configs[0];
            let ir = grouped_matmul_tma_kernel::trace(
                num_sms(dev),
                cx(first, "BLOCK_SIZE_M")?,
                cx(first, "BLOCK_SIZE_N")?,
                cx(first, "BLOCK_SIZE_K")?,
                group.offsets(),
            )?;
            Ok(Tuning::new(
                "tegula_tutorials::t08_grouped_matmul_tma",
                &ir.to_string(),
                key.clone(),
                configs,
            )
            .prepare_with(move |meta| dev.prepare(|| grouped_matmul_tma_launch(group, meta))))
        },
        |meta| median_ms(dev, || grouped_matmul_tma_launch(group, meta)),
    )
}

/// The tutorial's `triton_tma_perf_fn`.
pub fn grouped_matmul_tma(group: &GemmGroup) -> Result<()> {
    let meta = grouped_tma_tuned_config(group)?;
    grouped_matmul_tma_launch(group, &meta)
}

/// The tutorial's `group_gemm_tma_fn(group_A, group_B)` (B transposed, `[N, K]`).
pub fn group_gemm_tma_fn(
    group_A: &[Tensor<f16>],
    group_B: &[Tensor<f16>],
) -> Result<Vec<Tensor<f16>>> {
    let group = GemmGroup::new(group_A, group_B, true)?;
    grouped_matmul_tma(&group)?;
    Ok(group.group_c)
}

/// The A and B matrices of a group.
pub type Operands = (Vec<Tensor<f16>>, Vec<Tensor<f16>>);

/// Fresh inputs for products of sizes `mnk`: `torch.rand` (uniform in [0, 1)) fp16 A `[M, K]`
/// and B `[K, N]` (`[N, K]` when `b_transposed`).
pub fn random_group(
    dev: &Device,
    mnk: &[(usize, usize, usize)],
    b_transposed: bool,
) -> Result<Operands> {
    let mut a = Vec::new();
    let mut b = Vec::new();
    for &(m, n, k) in mnk {
        a.push(dev.rand_uniform::<f16>([m, k], 0.0, 1.0)?);
        let shape = if b_transposed { [n, k] } else { [k, n] };
        b.push(dev.rand_uniform::<f16>(shape, 0.0, 1.0)?);
    }
    Ok((a, b))
}

/// Compares each `C_g` with `A_g B_g` in float64.
pub fn compare_group(
    group_a: &[Tensor<f16>],
    group_b: &[Tensor<f16>],
    group_c: &[Tensor<f16>],
    b_transposed: bool,
) -> Result<CheckReport> {
    let mut reports = Vec::new();
    for ((a, b), c) in group_a.iter().zip(group_b).zip(group_c) {
        let (m, k) = (a.shape()[0], a.shape()[1]);
        let b = if b_transposed {
            b.transpose(0, 1)?
        } else {
            b.clone()
        };
        let n = b.shape()[1];
        let (av, bv) = (a.to_f64_vec()?, b.to_f64_vec()?);
        let want = common::matmul_f64(&av, &bv, m, k, n);
        let magnitude = common::abs_matmul_f64(&av, &bv, m, k, n);
        reports.push(common::compare_scaled(
            OP,
            format!("{m}x{n}x{k}"),
            DType::F16,
            &c.to_f64_vec()?,
            &want,
            &magnitude,
            common::dot_tolerance(DType::F16, k),
        ));
    }
    Ok(common::worst(reports))
}

/// `[G, M, N, K]`: G products of one size.
fn group_of(shape: &[usize]) -> Vec<(usize, usize, usize)> {
    let g = common::dim(shape, 0, 3);
    let mnk = (
        common::dim(shape, 1, 128),
        common::dim(shape, 2, 64),
        common::dim(shape, 3, 96),
    );
    vec![mnk; g]
}

fn check_plain(dev: &Device, shape: &[usize], _dtype: DType) -> Result<CheckReport> {
    let (a, b) = random_group(dev, &group_of(shape), false)?;
    let c = group_gemm_fn(&a, &b)?;
    compare_group(&a, &b, &c, false)
}

fn check_tma(dev: &Device, shape: &[usize], _dtype: DType) -> Result<CheckReport> {
    let (a, b) = random_group(dev, &group_of(shape), true)?;
    let c = group_gemm_tma_fn(&a, &b)?;
    compare_group(&a, &b, &c, true)
}

fn bench_with(dev: &Device, shape: &[usize], tma: bool) -> Result<Bench> {
    let mnk = group_of(shape);
    let (a, b) = random_group(dev, &mnk, tma)?;
    let group = GemmGroup::new(&a, &b, tma)?;
    let flops = mnk.iter().map(|&(m, n, k)| 2.0 * (m * n * k) as f64).sum();
    let bytes = mnk
        .iter()
        .map(|&(m, n, k)| 2.0 * (m * k + k * n + m * n) as f64)
        .sum();
    Ok(Bench {
        flops,
        bytes,
        input_copies: 1,
        launch: Box::new(move || {
            if tma {
                grouped_matmul_tma(&group)
            } else {
                grouped_matmul(&group)
            }
        }),
    })
}

fn bench_plain(dev: &Device, shape: &[usize], _dtype: DType) -> Result<Bench> {
    bench_with(dev, shape, false)
}

fn bench_tma(dev: &Device, shape: &[usize], _dtype: DType) -> Result<Bench> {
    bench_with(dev, shape, true)
}

const SQUARE: &[BenchShape] = &[BenchShape {
    label: "1024x1024x1024,1024x1024x1024,1024x1024x1024,1024x1024x1024",
    dims: &[4, 1024, 1024, 1024],
}];
const BATCHES: &[BenchShape] = &[BenchShape {
    label: "1024x8192x8192,1024x8192x8192,1024x8192x8192,1024x8192x8192",
    dims: &[4, 1024, 8192, 8192],
}];

/// The registry entries: the harness's `08-grouped-gemm-square` and `-batches` (four fp16
/// products each), and its `08-grouped-gemm-tma-*` extras (the descriptor variant).
pub fn tutorials() -> Vec<Port> {
    let entry = |name, about, bench_shapes, tma: bool| Port {
        name,
        about,
        dims: &["G", "M", "N", "K"],
        default_shape: &[3, 128, 64, 96],
        bench_shapes,
        dtypes: &[DType::F16],
        check: if tma { check_tma } else { check_plain },
        bench: if tma { bench_tma } else { bench_plain },
    };
    vec![
        entry(
            "tutorial-08-grouped-gemm-square",
            "G fp16 products in one launch of NUM_SM programs (4 x 1024^3)",
            SQUARE,
            false,
        ),
        entry(
            "tutorial-08-grouped-gemm-batches",
            "G fp16 products in one launch of NUM_SM programs (4 x 1024x8192x8192)",
            BATCHES,
            false,
        ),
        entry(
            "tutorial-08-grouped-gemm-tma-square",
            "the descriptor variant, B transposed (4 x 1024^3)",
            SQUARE,
            true,
        ),
        entry(
            "tutorial-08-grouped-gemm-tma-batches",
            "the descriptor variant, B transposed (4 x 1024x8192x8192)",
            BATCHES,
            true,
        ),
    ]
}
