//! Tutorial 09, persistent matmul: the same fp16 product `C = A B` five ways, from one
//! program a tile to persistent programs that read through tensor descriptors.
//!
//! # The Triton code
//!
//! - `matmul_kernel` (naive): one program a tile in grouped order, as tutorial 03, with the
//!   rows and columns past the edge clamped to 0 by `tl.where` and declared contiguous and
//!   aligned (`tl.max_contiguous(tl.multiple_of(..))`), pointer tiles advanced along K.
//! - `matmul_kernel_persistent`: `min(NUM_SMS, tiles)` programs, each looping over tiles
//!   `start_pid, start_pid + NUM_SMS, ..` (`tl.range(.., flatten=True)`), the tile coordinates
//!   from the helper `_compute_pid`, the K pointers recomputed from the loop counter, and the
//!   epilogue's tile id kept in a second counter `tile_id_c` (a workaround of Triton's
//!   Blackwell pipeliner that the tutorial keeps).
//! - `matmul_kernel_tma`: one program a tile reading A and B (B stored transposed, `[N, K]`)
//!   through host-made tensor descriptors, `tl.dot(a, b.T, acc)`, storing C through one.
//! - `matmul_kernel_tma_persistent`: the persistent loop over descriptors, with an optional
//!   *epilogue subtile*: the accumulator reshaped to `[BM, 2, BN / 2]`, permuted and split
//!   into two halves stored one after the other.
//! - `matmul_kernel_descriptor_persistent`: the same with the descriptors made in the kernel
//!   (`tl.make_tensor_descriptor`).
//!
//! The autotune lists are `matmul_get_configs` (BM 128, BN 128 or 256, BK 64 or 128, 2-4
//! stages, 4 or 8 warps) and, for the persistent descriptor kernels, the same times
//! `EPILOGUE_SUBTILE` true or false.
//!
//! # What maps to what
//!
//! | Triton | tegula |
//! | --- | --- |
//! | `tl.where(offs_am < M, offs_am, 0)` | `select(offs_am.lt(M), offs_am, 0)` |
//! | `tl.max_contiguous(tl.multiple_of(x, B), B)` | `max_contiguous(multiple_of(x, B), B)` (facts about the first element of each run, as Triton's) |
//! | `for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=True)` | `for tile_id in range(start_pid, num_tiles, NUM_SMS)` |
//! | `pid_m, pid_n = _compute_pid(..)` (a `@triton.jit` helper) | `let (pid_m, pid_n) = _compute_pid(..)`: a Rust function over tiles, inlined by tracing |
//! | `TensorDescriptor(a, a.shape, a.stride(), block)` + `pre_hook` setting `block_shape` | `tegula::TensorDescriptor::from_tensor(&a, block)` with the hook's block shapes; a `a_desc: TensorDescriptor<f16>` parameter |
//! | `desc.load([i, j])`, `desc.store([i, j], v)` | `desc.load((i, j))`, `desc.store((i, j), v)` ([`TensorDescriptor`]) |
//! | `tl.reshape`, `tl.permute` | `.reshape(..)`, `.permute(&[..])` |
//! | `acc.reshape(..).permute(..).split()` | `split(acc.reshape(..).permute(&[..]))` |
//!
//! # What differs
//!
//! The loop options `flatten=` and `warp_specialize=` of `tl.range` have no tegula
//! counterpart (both are scheduling choices that leave the result alone); the ports loop
//! plainly and the host functions accept `warp_specialize` without effect. The kernels are
//! generic over the element type, as the tutorial's are over `a.dtype`: with `f8e4m3` inputs
//! (`--prec fp8`) C is `f8e4m3` too (the `c_ptr.dtype.element_ty == tl.float8e4nv` branch of
//! the pointer kernels, `FP8_OUTPUT` of the descriptor ones), and on Hopper the dots run on
//! fp8 `wgmma`; the registry times fp16, the harness's precision. The persistent kernels take `NUM_SMS` from the device; on the
//! interpreter, which has no SMs, [`INTERPRETER_SMS`], so that its programs walk several tiles.
#![allow(non_snake_case)]

use crate::common::{self, config, cx};
use crate::{Bench, BenchShape, CheckReport, Port};
use tegula::autotune::{median_ms, Config, Tuning};
use tegula::ir::{DType, Kernel, TraceError};
use tegula::prelude::*;
use tegula::Result;

/// SMs the persistent grids assume on the interpreter.
pub const INTERPRETER_SMS: usize = 2;

/// `torch.cuda.get_device_properties("cuda").multi_processor_count`, or
/// [`INTERPRETER_SMS`].
pub fn num_sms(dev: &Device) -> usize {
    dev.sm_count().unwrap_or(INTERPRETER_SMS)
}

/// The tutorial's `matmul_get_configs()`, in its order.
pub fn matmul_get_configs() -> Vec<Config> {
    let mut out = Vec::new();
    for BM in [128] {
        for BN in [128, 256] {
            for BK in [64, 128] {
                for s in [2, 3, 4] {
                    for w in [4, 8] {
                        out.push(config(
                            &[
                                ("BLOCK_SIZE_M", BM),
                                ("BLOCK_SIZE_N", BN),
                                ("BLOCK_SIZE_K", BK),
                                ("GROUP_SIZE_M", 8),
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

/// The tutorial's `matmul_tma_persistent_get_configs()`: [`matmul_get_configs`] with
/// `EPILOGUE_SUBTILE` true, then false, for each.
pub fn matmul_tma_persistent_get_configs() -> Vec<Config> {
    matmul_get_configs()
        .into_iter()
        .flat_map(|c| {
            [
                c.clone().with("EPILOGUE_SUBTILE", 1),
                c.with("EPILOGUE_SUBTILE", 0),
            ]
        })
        .collect()
}

#[tegula::kernel]
pub fn matmul_kernel<T: Element>(
    a_ptr: Ptr<T>,
    b_ptr: Ptr<T>,
    c_ptr: Ptr<T>,
    M: i32,
    N: i32,
    K: i32,
    stride_am: i32,
    stride_ak: i32,
    stride_bk: i32,
    stride_bn: i32,
    stride_cm: i32,
    stride_cn: i32,
    #[constexpr] BLOCK_SIZE_M: usize,
    #[constexpr] BLOCK_SIZE_N: usize,
    #[constexpr] BLOCK_SIZE_K: usize,
    #[constexpr] GROUP_SIZE_M: usize,
) {
    let pid = program_id(0);
    let num_pid_m = cdiv(M, BLOCK_SIZE_M);
    let num_pid_n = cdiv(N, BLOCK_SIZE_N);
    let num_pid_in_group = GROUP_SIZE_M * num_pid_n;
    let group_id = pid / num_pid_in_group;
    let first_pid_m = group_id * GROUP_SIZE_M;
    let group_size_m = minimum(num_pid_m - first_pid_m, GROUP_SIZE_M);
    let pid_m = first_pid_m + (pid % group_size_m);
    let pid_n = (pid % num_pid_in_group) / group_size_m;

    let start_m = pid_m * BLOCK_SIZE_M;
    let start_n = pid_n * BLOCK_SIZE_N;

    let offs_am = start_m + arange(0, BLOCK_SIZE_M as i64);
    let offs_bn = start_n + arange(0, BLOCK_SIZE_N as i64);
    let offs_am = select(offs_am.lt(M), offs_am, 0);
    let offs_bn = select(offs_bn.lt(N), offs_bn, 0);

    let offs_am = max_contiguous(
        multiple_of(offs_am, BLOCK_SIZE_M as u32),
        BLOCK_SIZE_M as u32,
    );
    let offs_bn = max_contiguous(
        multiple_of(offs_bn, BLOCK_SIZE_N as u32),
        BLOCK_SIZE_N as u32,
    );
    let offs_k = arange(0, BLOCK_SIZE_K as i64);
    let mut a_ptrs = a_ptr + (offs_am.col() * stride_am + offs_k.row() * stride_ak);
    let mut b_ptrs = b_ptr + (offs_k.col() * stride_bk + offs_bn.row() * stride_bn);

    let mut accumulator = zeros::<f32>([BLOCK_SIZE_M, BLOCK_SIZE_N]);

    for k in range(0, cdiv(K, BLOCK_SIZE_K)) {
        let a = load(a_ptrs, offs_k.row().lt(K - k * BLOCK_SIZE_K), 0.0);
        let b = load(b_ptrs, offs_k.col().lt(K - k * BLOCK_SIZE_K), 0.0);
        accumulator = dot_acc(a, b, accumulator);
        a_ptrs += BLOCK_SIZE_K * stride_ak;
        b_ptrs += BLOCK_SIZE_K * stride_bk;
    }

    let c = if T::DTYPE == DType::F8E4M3 {
        accumulator.to::<f8e4m3>()
    } else {
        accumulator.to::<f16>()
    };

    let offs_cm = pid_m * BLOCK_SIZE_M + arange(0, BLOCK_SIZE_M as i64);
    let offs_cn = pid_n * BLOCK_SIZE_N + arange(0, BLOCK_SIZE_N as i64);
    let c_ptrs = c_ptr + stride_cm * offs_cm.col() + stride_cn * offs_cn.row();
    let c_mask = offs_cm.col().lt(M) & offs_cn.row().lt(N);
    store(c_ptrs, c, c_mask);
}

#[tegula::kernel]
pub fn matmul_kernel_tma<T: Element>(
    a_desc: TensorDescriptor<T>,
    b_desc: TensorDescriptor<T>,
    c_desc: TensorDescriptor<T>,
    M: i32,
    N: i32,
    K: i32,
    #[constexpr] BLOCK_SIZE_M: usize,
    #[constexpr] BLOCK_SIZE_N: usize,
    #[constexpr] BLOCK_SIZE_K: usize,
    #[constexpr] GROUP_SIZE_M: usize,
    #[constexpr] FP8_OUTPUT: bool,
) {
    let dtype = if FP8_OUTPUT {
        DType::F8E4M3
    } else {
        DType::F16
    };

    let pid = program_id(0);
    let num_pid_m = cdiv(M, BLOCK_SIZE_M);
    let num_pid_n = cdiv(N, BLOCK_SIZE_N);
    let num_pid_in_group = GROUP_SIZE_M * num_pid_n;
    let group_id = pid / num_pid_in_group;
    let first_pid_m = group_id * GROUP_SIZE_M;
    let group_size_m = minimum(num_pid_m - first_pid_m, GROUP_SIZE_M);
    let pid_m = first_pid_m + (pid % group_size_m);
    let pid_n = (pid % num_pid_in_group) / group_size_m;

    let k_tiles = cdiv(K, BLOCK_SIZE_K);

    let offs_am = pid_m * BLOCK_SIZE_M;
    let offs_bn = pid_n * BLOCK_SIZE_N;

    let mut accumulator = zeros::<f32>([BLOCK_SIZE_M, BLOCK_SIZE_N]);

    // workaround: tl.range(.., warp_specialize=) has no tegula counterpart; a plain loop.
    for k in range(0, k_tiles) {
        let offs_k = k * BLOCK_SIZE_K;
        let a = a_desc.load((offs_am, offs_k));
        let b = b_desc.load((offs_bn, offs_k));
        accumulator = dot_acc(a, b.trans(), accumulator);
    }

    let c = accumulator.cast(dtype);

    let offs_cm = pid_m * BLOCK_SIZE_M;
    let offs_cn = pid_n * BLOCK_SIZE_N;
    c_desc.store((offs_cm, offs_cn), c);
}

/// The tutorial's `_compute_pid`: the grouped-order coordinates of tile `tile_id`.
pub fn _compute_pid(
    tile_id: Tile,
    num_pid_in_group: Tile,
    num_pid_m: Tile,
    GROUP_SIZE_M: usize,
    _NUM_SMS: usize,
) -> (Tile, Tile) {
    let group_id = tile_id / num_pid_in_group;
    let first_pid_m = group_id * GROUP_SIZE_M;
    let group_size_m = minimum(num_pid_m - first_pid_m, GROUP_SIZE_M);
    let pid_m = first_pid_m + (tile_id % group_size_m);
    let pid_n = (tile_id % num_pid_in_group) / group_size_m;
    (pid_m, pid_n)
}

#[tegula::kernel]
pub fn matmul_kernel_persistent<T: Element>(
    a_ptr: Ptr<T>,
    b_ptr: Ptr<T>,
    c_ptr: Ptr<T>,
    M: i32,
    N: i32,
    K: i32,
    stride_am: i32,
    stride_ak: i32,
    stride_bk: i32,
    stride_bn: i32,
    stride_cm: i32,
    stride_cn: i32,
    #[constexpr] BLOCK_SIZE_M: usize,
    #[constexpr] BLOCK_SIZE_N: usize,
    #[constexpr] BLOCK_SIZE_K: usize,
    #[constexpr] GROUP_SIZE_M: usize,
    #[constexpr] NUM_SMS: usize,
) {
    let start_pid = program_id(0);
    let num_pid_m = cdiv(M, BLOCK_SIZE_M);
    let num_pid_n = cdiv(N, BLOCK_SIZE_N);
    let k_tiles = cdiv(K, BLOCK_SIZE_K);
    let num_tiles = num_pid_m * num_pid_n;

    // NOTE: There is currently a bug in blackwell pipelining that means it can't handle a value being
    // used in both the prologue and epilogue, so we duplicate the counters as a work-around.
    let mut tile_id_c = start_pid - NUM_SMS;

    let offs_k_for_mask = arange(0, BLOCK_SIZE_K as i64);
    let num_pid_in_group = GROUP_SIZE_M * num_pid_n;

    // workaround: tl.range(.., flatten=True) has no tegula counterpart; a plain loop.
    for tile_id in range(start_pid, num_tiles, NUM_SMS) {
        let (pid_m, pid_n) =
            _compute_pid(tile_id, num_pid_in_group, num_pid_m, GROUP_SIZE_M, NUM_SMS);
        let start_m = pid_m * BLOCK_SIZE_M;
        let start_n = pid_n * BLOCK_SIZE_N;
        let offs_am = start_m + arange(0, BLOCK_SIZE_M as i64);
        let offs_bn = start_n + arange(0, BLOCK_SIZE_N as i64);
        let offs_am = select(offs_am.lt(M), offs_am, 0);
        let offs_bn = select(offs_bn.lt(N), offs_bn, 0);
        let offs_am = max_contiguous(
            multiple_of(offs_am, BLOCK_SIZE_M as u32),
            BLOCK_SIZE_M as u32,
        );
        let offs_bn = max_contiguous(
            multiple_of(offs_bn, BLOCK_SIZE_N as u32),
            BLOCK_SIZE_N as u32,
        );

        let mut accumulator = zeros::<f32>([BLOCK_SIZE_M, BLOCK_SIZE_N]);
        for ki in range(0, k_tiles) {
            let offs_k = ki * BLOCK_SIZE_K + arange(0, BLOCK_SIZE_K as i64);
            let a_ptrs = a_ptr + (offs_am.col() * stride_am + offs_k.row() * stride_ak);
            let b_ptrs = b_ptr + (offs_k.col() * stride_bk + offs_bn.row() * stride_bn);

            let a = load(a_ptrs, offs_k_for_mask.row().lt(K - ki * BLOCK_SIZE_K), 0.0);
            let b = load(b_ptrs, offs_k_for_mask.col().lt(K - ki * BLOCK_SIZE_K), 0.0);
            accumulator = dot_acc(a, b, accumulator);
        }

        tile_id_c += NUM_SMS;
        let (pid_m, pid_n) = _compute_pid(
            tile_id_c,
            num_pid_in_group,
            num_pid_m,
            GROUP_SIZE_M,
            NUM_SMS,
        );
        let offs_cm = pid_m * BLOCK_SIZE_M + arange(0, BLOCK_SIZE_M as i64);
        let offs_cn = pid_n * BLOCK_SIZE_N + arange(0, BLOCK_SIZE_N as i64);
        let c_ptrs = c_ptr + stride_cm * offs_cm.col() + stride_cn * offs_cn.row();
        let c_mask = offs_cm.col().lt(M) & offs_cn.row().lt(N);
        let c = if T::DTYPE == DType::F8E4M3 {
            accumulator.to::<f8e4m3>()
        } else {
            accumulator.to::<f16>()
        };
        store(c_ptrs, c, c_mask);
    }
}

#[tegula::kernel]
pub fn matmul_kernel_tma_persistent<T: Element>(
    a_desc: TensorDescriptor<T>,
    b_desc: TensorDescriptor<T>,
    c_desc: TensorDescriptor<T>,
    M: i32,
    N: i32,
    K: i32,
    #[constexpr] BLOCK_SIZE_M: usize,
    #[constexpr] BLOCK_SIZE_N: usize,
    #[constexpr] BLOCK_SIZE_K: usize,
    #[constexpr] GROUP_SIZE_M: usize,
    #[constexpr] FP8_OUTPUT: bool,
    #[constexpr] EPILOGUE_SUBTILE: bool,
    #[constexpr] NUM_SMS: usize,
) {
    let dtype = if FP8_OUTPUT {
        DType::F8E4M3
    } else {
        DType::F16
    };

    let start_pid = program_id(0);
    let num_pid_m = cdiv(M, BLOCK_SIZE_M);
    let num_pid_n = cdiv(N, BLOCK_SIZE_N);
    let k_tiles = cdiv(K, BLOCK_SIZE_K);
    let num_tiles = num_pid_m * num_pid_n;

    let mut tile_id_c = start_pid - NUM_SMS;
    let num_pid_in_group = GROUP_SIZE_M * num_pid_n;

    // Enable warp specialization to leverage async warp scheduling in the GPU.
    // workaround: tl.range(.., flatten=True, warp_specialize=) has no tegula counterpart; a
    // plain loop.
    for tile_id in range(start_pid, num_tiles, NUM_SMS) {
        let (pid_m, pid_n) =
            _compute_pid(tile_id, num_pid_in_group, num_pid_m, GROUP_SIZE_M, NUM_SMS);
        let offs_am = pid_m * BLOCK_SIZE_M;
        let offs_bn = pid_n * BLOCK_SIZE_N;

        let mut accumulator = zeros::<f32>([BLOCK_SIZE_M, BLOCK_SIZE_N]);
        for ki in range(0, k_tiles) {
            let offs_k = ki * BLOCK_SIZE_K;
            let a = a_desc.load((offs_am, offs_k));
            let b = b_desc.load((offs_bn, offs_k));
            accumulator = dot_acc(a, b.trans(), accumulator);
        }

        tile_id_c += NUM_SMS;
        let (pid_m, pid_n) = _compute_pid(
            tile_id_c,
            num_pid_in_group,
            num_pid_m,
            GROUP_SIZE_M,
            NUM_SMS,
        );
        let offs_am_c = pid_m * BLOCK_SIZE_M;
        let offs_bn_c = pid_n * BLOCK_SIZE_N;

        // Epilogue subtiling is a technique to break our computation and stores into multiple pieces
        // By subtiling we can reduce shared memory consumption by the epilogue and instead use that
        // memory to increase our stage count.
        // In this case we partition the accumulator into 2 BLOCK_SIZE_M x BLOCK_SIZE_N // 2 tensors
        if EPILOGUE_SUBTILE {
            let acc = accumulator.reshape([BLOCK_SIZE_M, 2, BLOCK_SIZE_N / 2]);
            let acc = acc.permute(&[0, 2, 1]);
            let (acc0, acc1) = split(acc);
            let c0 = acc0.cast(dtype);
            c_desc.store((offs_am_c, offs_bn_c), c0);
            let c1 = acc1.cast(dtype);
            c_desc.store((offs_am_c, offs_bn_c + BLOCK_SIZE_N / 2), c1);
        } else {
            let accumulator = accumulator.cast(dtype);
            c_desc.store((offs_am_c, offs_bn_c), accumulator);
        }
    }
}

#[tegula::kernel]
pub fn matmul_kernel_descriptor_persistent<T: Element>(
    a_ptr: Ptr<T>,
    b_ptr: Ptr<T>,
    c_ptr: Ptr<T>,
    M: i32,
    N: i32,
    K: i32,
    #[constexpr] BLOCK_SIZE_M: usize,
    #[constexpr] BLOCK_SIZE_N: usize,
    #[constexpr] BLOCK_SIZE_K: usize,
    #[constexpr] GROUP_SIZE_M: usize,
    #[constexpr] EPILOGUE_SUBTILE: bool,
    #[constexpr] NUM_SMS: usize,
) {
    // Matmul using TMA and device-side descriptor creation
    let dtype = T::DTYPE;
    let start_pid = program_id(0);
    let num_pid_m = cdiv(M, BLOCK_SIZE_M);
    let num_pid_n = cdiv(N, BLOCK_SIZE_N);
    let k_tiles = cdiv(K, BLOCK_SIZE_K);
    let num_tiles = num_pid_m * num_pid_n;

    let a_desc = make_tensor_descriptor(a_ptr, (M, K), (K, 1), [BLOCK_SIZE_M, BLOCK_SIZE_K]);
    let b_desc = make_tensor_descriptor(b_ptr, (N, K), (K, 1), [BLOCK_SIZE_N, BLOCK_SIZE_K]);
    let c_desc = make_tensor_descriptor(
        c_ptr,
        (M, N),
        (N, 1),
        [
            BLOCK_SIZE_M,
            if !EPILOGUE_SUBTILE {
                BLOCK_SIZE_N
            } else {
                BLOCK_SIZE_N / 2
            },
        ],
    );

    // tile_id_c is used in the epilogue to break the dependency between
    // the prologue and the epilogue
    let mut tile_id_c = start_pid - NUM_SMS;
    let num_pid_in_group = GROUP_SIZE_M * num_pid_n;

    // workaround: tl.range(.., flatten=FLATTEN, warp_specialize=) has no tegula counterpart;
    // a plain loop (FLATTEN only prunes configs on the host).
    for tile_id in range(start_pid, num_tiles, NUM_SMS) {
        let (pid_m, pid_n) =
            _compute_pid(tile_id, num_pid_in_group, num_pid_m, GROUP_SIZE_M, NUM_SMS);
        let offs_am = pid_m * BLOCK_SIZE_M;
        let offs_bn = pid_n * BLOCK_SIZE_N;

        let mut accumulator = zeros::<f32>([BLOCK_SIZE_M, BLOCK_SIZE_N]);
        for ki in range(0, k_tiles) {
            let offs_k = ki * BLOCK_SIZE_K;
            let a = a_desc.load((offs_am, offs_k));
            let b = b_desc.load((offs_bn, offs_k));
            accumulator = dot_acc(a, b.trans(), accumulator);
        }

        tile_id_c += NUM_SMS;
        let (pid_m, pid_n) = _compute_pid(
            tile_id_c,
            num_pid_in_group,
            num_pid_m,
            GROUP_SIZE_M,
            NUM_SMS,
        );
        let offs_cm = pid_m * BLOCK_SIZE_M;
        let offs_cn = pid_n * BLOCK_SIZE_N;

        if EPILOGUE_SUBTILE {
            let acc = accumulator.reshape([BLOCK_SIZE_M, 2, BLOCK_SIZE_N / 2]);
            let acc = acc.permute(&[0, 2, 1]);
            let (acc0, acc1) = split(acc);
            let c0 = acc0.cast(dtype);
            c_desc.store((offs_cm, offs_cn), c0);
            let c1 = acc1.cast(dtype);
            c_desc.store((offs_cm, offs_cn + BLOCK_SIZE_N / 2), c1);
        } else {
            let c = accumulator.cast(dtype);
            c_desc.store((offs_cm, offs_cn), c);
        }
    }
}

const OP: &str = "tutorial-09-persistent-matmul";

/// The five ways of the tutorial.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// `matmul(a, b)`: `matmul_kernel`, B `[K, N]` by strides.
    Naive,
    /// `matmul_persistent(a, b)`: `matmul_kernel_persistent`, B `[K, N]` by strides.
    Persistent,
    /// `matmul_tma(a, b, ws)`: `matmul_kernel_tma`, B `[N, K]`.
    Tma,
    /// `matmul_tma_persistent(a, b, ws)`: `matmul_kernel_tma_persistent`, B `[N, K]`.
    TmaPersistent,
    /// `matmul_descriptor_persistent(a, b, ws)`: `matmul_kernel_descriptor_persistent`, B
    /// `[N, K]`, both contiguous.
    DescriptorPersistent,
}

impl Variant {
    pub const ALL: [Variant; 5] = [
        Variant::Naive,
        Variant::Persistent,
        Variant::Tma,
        Variant::TmaPersistent,
        Variant::DescriptorPersistent,
    ];

    /// Whether B is `[N, K]` (the descriptor kernels) rather than `[K, N]`.
    pub fn b_transposed(self) -> bool {
        !matches!(self, Variant::Naive | Variant::Persistent)
    }

    fn persistent(self) -> bool {
        matches!(
            self,
            Variant::Persistent | Variant::TmaPersistent | Variant::DescriptorPersistent
        )
    }

    fn name(self) -> &'static str {
        match self {
            Variant::Naive => "matmul_kernel",
            Variant::Persistent => "matmul_kernel_persistent",
            Variant::Tma => "matmul_kernel_tma",
            Variant::TmaPersistent => "matmul_kernel_tma_persistent",
            Variant::DescriptorPersistent => "matmul_kernel_descriptor_persistent",
        }
    }

    /// The tutorial's autotune candidates for this variant. `flatten` is the descriptor
    /// variant's `FLATTEN` (`prune_invalid_configs` drops the subtiled configs without it).
    pub fn configs(self, flatten: bool) -> Vec<Config> {
        match self {
            Variant::Naive | Variant::Persistent | Variant::Tma => matmul_get_configs(),
            Variant::TmaPersistent => matmul_tma_persistent_get_configs(),
            Variant::DescriptorPersistent => matmul_tma_persistent_get_configs()
                .into_iter()
                // Filter out configs where EPILOGUE_SUBTILE is true and FLATTEN is false
                .filter(|c| c.get("EPILOGUE_SUBTILE").unwrap_or(1) == 0 || flatten)
                .collect(),
        }
    }
}

/// `(M, N, K)` of `a` `[M, K]` and `b` (`[K, N]`, or `[N, K]` for the descriptor variants),
/// with the tutorial's asserts as typed errors.
fn check_operands<T: Element>(
    variant: Variant,
    a: &Tensor<T>,
    b: &Tensor<T>,
) -> Result<(usize, usize, usize)> {
    common::expect_rank(OP, "a", a, 2)?;
    common::expect_rank(OP, "b", b, 2)?;
    common::expect_same_device(OP, a, b)?;
    let (M, K) = (a.shape()[0], a.shape()[1]);
    let (kb, N) = if variant.b_transposed() {
        (b.shape()[1], b.shape()[0])
    } else {
        (b.shape()[0], b.shape()[1])
    };
    if kb != K {
        return Err(tegula::Error::Shape {
            op: OP.into(),
            message: format!(
                "Incompatible dimensions: a is {:?}, b is {:?}{}",
                a.shape(),
                b.shape(),
                if variant.b_transposed() {
                    " (b is transposed)"
                } else {
                    ""
                }
            ),
        });
    }
    common::expect_i32_extent(OP, "a", a)?;
    common::expect_i32_extent(OP, "b", b)?;
    if variant.b_transposed() {
        // Descriptors need unit strides along the last axis (the device-made ones assume
        // contiguous tensors).
        for (name, t) in [("a", a), ("b", b)] {
            let unit = t.strides()[1] == 1 || t.shape()[1] <= 1;
            let contiguous_enough = variant != Variant::DescriptorPersistent || t.is_contiguous();
            if !unit || !contiguous_enough {
                return Err(tegula::Error::Stride {
                    op: OP.into(),
                    message: format!(
                        "{}: `{name}` must be {}, got strides {:?}",
                        variant.name(),
                        if variant == Variant::DescriptorPersistent {
                            "contiguous"
                        } else {
                            "of unit stride along its last axis"
                        },
                        t.strides()
                    ),
                });
            }
        }
    }
    Ok((
        M,
        common::as_i32(OP, "N", N)? as usize,
        common::as_i32(OP, "K", K)? as usize,
    ))
}

/// One launch of `variant` with the config `meta`, into `c` `[M, N]` of the operands' dtype
/// (contiguous for the descriptor variants).
pub fn launch<T: Element>(
    variant: Variant,
    a: &Tensor<T>,
    b: &Tensor<T>,
    c: &Tensor<T>,
    meta: &Config,
) -> Result<()> {
    let (M, N, K) = check_operands(variant, a, b)?;
    common::expect_shape(OP, "c", c, &[M, N])?;
    common::expect_same_device(OP, a, c)?;
    common::expect_i32_extent(OP, "c", c)?;
    if variant.b_transposed() {
        common::expect_contiguous(OP, "c", c)?;
    }
    if M == 0 || N == 0 {
        return Ok(());
    }
    let dev = a.device();
    let (BM, BN, BK, GROUP) = (
        cx(meta, "BLOCK_SIZE_M")?,
        cx(meta, "BLOCK_SIZE_N")?,
        cx(meta, "BLOCK_SIZE_K")?,
        cx(meta, "GROUP_SIZE_M")?,
    );
    let tiles = common::cdiv(M, BM) * common::cdiv(N, BN);
    let NUM_SMS = num_sms(dev);
    let grid = if variant.persistent() {
        NUM_SMS.min(tiles)
    } else {
        tiles
    };
    let subtile = meta.get("EPILOGUE_SUBTILE").unwrap_or(0) != 0;
    let lc = meta.launch_config();
    let fp8_output = T::DTYPE == DType::F8E4M3;
    let (m, n, k) = (M as i32, N as i32, K as i32);
    let (sa, sb, sc) = (
        common::strides2(a),
        common::strides2(b),
        common::strides2(c),
    );
    match variant {
        Variant::Naive => matmul_kernel::launch_with::<T>(
            dev, grid, lc, a, b, c, m, n, k, sa.0, sa.1, sb.0, sb.1, sc.0, sc.1, BM, BN, BK, GROUP,
        ),
        Variant::Persistent => matmul_kernel_persistent::launch_with::<T>(
            dev, grid, lc, a, b, c, m, n, k, sa.0, sa.1, sb.0, sb.1, sc.0, sc.1, BM, BN, BK, GROUP,
            NUM_SMS,
        ),
        Variant::Tma => {
            let [a_desc, b_desc, c_desc] = host_descriptors(a, b, c, (BM, BN, BK), false)?;
            matmul_kernel_tma::launch_with::<T>(
                dev, grid, lc, &a_desc, &b_desc, &c_desc, m, n, k, BM, BN, BK, GROUP, fp8_output,
            )
        }
        Variant::TmaPersistent => {
            let [a_desc, b_desc, c_desc] = host_descriptors(a, b, c, (BM, BN, BK), subtile)?;
            matmul_kernel_tma_persistent::launch_with::<T>(
                dev, grid, lc, &a_desc, &b_desc, &c_desc, m, n, k, BM, BN, BK, GROUP, fp8_output,
                subtile, NUM_SMS,
            )
        }
        Variant::DescriptorPersistent => matmul_kernel_descriptor_persistent::launch_with::<T>(
            dev, grid, lc, a, b, c, m, n, k, BM, BN, BK, GROUP, subtile, NUM_SMS,
        ),
    }
}

/// The block shapes the tutorial's `matmul_tma_set_block_size_hook` gives A, B (`[N, K]`) and
/// C (half as wide with `EPILOGUE_SUBTILE`).
fn descriptor_blocks((bm, bn, bk): (usize, usize, usize), subtile: bool) -> [[usize; 2]; 3] {
    let c_bn = if subtile { bn / 2 } else { bn };
    [[bm, bk], [bn, bk], [bm, c_bn]]
}

/// The tutorial's host descriptors (`TensorDescriptor(a, a.shape, a.stride(), ..)`) with the
/// hook's block shapes.
fn host_descriptors<T: Element>(
    a: &Tensor<T>,
    b: &Tensor<T>,
    c: &Tensor<T>,
    blocks: (usize, usize, usize),
    subtile: bool,
) -> Result<[tegula::TensorDescriptor<T>; 3]> {
    let [ba, bb, bc] = descriptor_blocks(blocks, subtile);
    Ok([
        tegula::TensorDescriptor::from_tensor(a, ba)?,
        tegula::TensorDescriptor::from_tensor(b, bb)?,
        tegula::TensorDescriptor::from_tensor(c, bc)?,
    ])
}

fn trace<T: Element>(
    variant: Variant,
    meta: &Config,
    sms: usize,
) -> std::result::Result<Kernel, TraceError> {
    let fp8_output = T::DTYPE == DType::F8E4M3;
    let get = |n: &str| meta.get(n).unwrap_or(16) as usize;
    let (bm, bn, bk, g) = (
        get("BLOCK_SIZE_M"),
        get("BLOCK_SIZE_N"),
        get("BLOCK_SIZE_K"),
        get("GROUP_SIZE_M"),
    );
    let subtile = meta.get("EPILOGUE_SUBTILE").unwrap_or(0) != 0;
    match variant {
        Variant::Naive => matmul_kernel::trace::<T>(bm, bn, bk, g),
        Variant::Persistent => matmul_kernel_persistent::trace::<T>(bm, bn, bk, g, sms),
        Variant::Tma => {
            let [a, b, c] = descriptor_blocks((bm, bn, bk), false);
            matmul_kernel_tma::trace::<T>(a, b, c, bm, bn, bk, g, fp8_output)
        }
        Variant::TmaPersistent => {
            let [a, b, c] = descriptor_blocks((bm, bn, bk), subtile);
            matmul_kernel_tma_persistent::trace::<T>(
                a, b, c, bm, bn, bk, g, fp8_output, subtile, sms,
            )
        }
        Variant::DescriptorPersistent => {
            matmul_kernel_descriptor_persistent::trace::<T>(bm, bn, bk, g, subtile, sms)
        }
    }
}

/// The autotuner's choice for `variant` on these operands. Keys as the tutorial's: `M, N, K`,
/// plus `WARP_SPECIALIZE` for the descriptor kernels and `FLATTEN` for the device-descriptor
/// one.
pub fn tuned_config<T: Element>(
    variant: Variant,
    a: &Tensor<T>,
    b: &Tensor<T>,
    c: &Tensor<T>,
    warp_specialize: bool,
) -> Result<Config> {
    let (M, N, K) = check_operands(variant, a, b)?;
    let dev = a.device();
    // Hopper warpspec doesn't work with flatten
    let hopper = dev
        .cuda_runtime()
        .is_some_and(|rt| rt.device_info().compute_capability.0 == 9);
    let flatten = !(warp_specialize && hopper);
    let mut key = format!("M={M},N={N},K={K},{}", T::DTYPE);
    if variant.b_transposed() {
        key += &format!(",WARP_SPECIALIZE={warp_specialize}");
    }
    if variant == Variant::DescriptorPersistent {
        key += &format!(",FLATTEN={flatten}");
    }
    let kernel = format!("tegula_tutorials::t09_{}", variant.name());
    common::autotune(
        dev,
        &kernel,
        &key,
        || {
            let configs = variant.configs(flatten);
            let ir = trace::<T>(variant, &configs[0], num_sms(dev))?;
            Ok(Tuning::new(&kernel, &ir.to_string(), key.clone(), configs)
                .prepare_with(move |meta| dev.prepare(|| launch(variant, a, b, c, meta))))
        },
        |meta| median_ms(dev, || launch(variant, a, b, c, meta)),
    )
}

/// The tutorial's host functions (`matmul`, `matmul_persistent`, `matmul_tma`,
/// `matmul_tma_persistent`, `matmul_descriptor_persistent`): allocate C, launch the autotuned
/// kernel. `warp_specialize` is accepted by the descriptor variants and changes nothing here.
pub fn matmul<T: Element>(
    variant: Variant,
    a: &Tensor<T>,
    b: &Tensor<T>,
    warp_specialize: bool,
) -> Result<Tensor<T>> {
    let (M, N, _) = check_operands(variant, a, b)?;
    // Allocates output.
    let c = a.device().empty::<T>([M, N])?;
    let meta = tuned_config(variant, a, b, &c, warp_specialize)?;
    launch(variant, a, b, &c, &meta)?;
    Ok(c)
}

/// [`matmul`] with the config `meta` instead of the tuner's.
pub fn matmul_with<T: Element>(
    variant: Variant,
    a: &Tensor<T>,
    b: &Tensor<T>,
    meta: &Config,
) -> Result<Tensor<T>> {
    let (M, N, _) = check_operands(variant, a, b)?;
    let c = a.device().empty::<T>([M, N])?;
    launch(variant, a, b, &c, meta)?;
    Ok(c)
}

/// The harness's operands: `a` `[M, K]` and `b` `[K, N]` unit normal, and `b_t = b.T` made
/// contiguous (`[N, K]`). The naive and persistent variants take `b_t.T` (a strided view).
pub fn inputs<T: Element>(
    dev: &Device,
    (m, n, k): (usize, usize, usize),
) -> Result<(Tensor<T>, Tensor<T>)> {
    let a = dev.randn::<T>([m, k])?;
    let b_t = dev.randn::<T>([n, k])?;
    Ok((a, b_t))
}

/// The operand B as `variant` takes it, from `b_t` `[N, K]`.
pub fn b_for<T: Element>(variant: Variant, b_t: &Tensor<T>) -> Result<Tensor<T>> {
    if variant.b_transposed() {
        Ok(b_t.clone())
    } else {
        b_t.transpose(0, 1)
    }
}

/// Runs `variant` (tuned, or with `meta`) on fresh fp16 inputs and compares with float64.
pub fn check_with(
    dev: &Device,
    variant: Variant,
    mnk: (usize, usize, usize),
    meta: Option<&Config>,
) -> Result<CheckReport> {
    check_dtype::<f16>(dev, variant, mnk, meta)
}

/// [`check_with`] on inputs of `T` (`f16`, or `f8e4m3` as the tutorial's `--prec fp8`), C of
/// `T` too.
pub fn check_dtype<T: Element>(
    dev: &Device,
    variant: Variant,
    (m, n, k): (usize, usize, usize),
    meta: Option<&Config>,
) -> Result<CheckReport> {
    let (a, b_t) = inputs::<T>(dev, (m, n, k))?;
    let b = b_for(variant, &b_t)?;
    let c = match meta {
        Some(meta) => matmul_with(variant, &a, &b, meta)?,
        None => matmul(variant, &a, &b, false)?,
    };
    let (av, bv) = (a.to_f64_vec()?, b_t.transpose(0, 1)?.to_f64_vec()?);
    let want = common::matmul_f64(&av, &bv, m, k, n);
    let magnitude = common::abs_matmul_f64(&av, &bv, m, k, n);
    Ok(common::compare_scaled(
        OP,
        format!("M={m} N={n} K={k} {}", variant.name()),
        T::DTYPE,
        &c.to_f64_vec()?,
        &want,
        &magnitude,
        common::dot_tolerance(T::DTYPE, k),
    ))
}

fn mnk(shape: &[usize]) -> (usize, usize, usize) {
    (
        common::dim(shape, 0, 257),
        common::dim(shape, 1, 131),
        common::dim(shape, 2, 77),
    )
}

fn bench_variant(dev: &Device, shape: &[usize], variant: Variant) -> Result<Bench> {
    let (m, n, k) = mnk(shape);
    let (a, b_t) = inputs::<f16>(dev, (m, n, k))?;
    let b = b_for(variant, &b_t)?;
    let c = dev.empty::<f16>([m, n])?;
    Ok(Bench {
        flops: 2.0 * (m * n * k) as f64,
        bytes: 2.0 * (m * k + n * k + m * n) as f64,
        input_copies: 1,
        launch: Box::new(move || {
            let meta = tuned_config(variant, &a, &b, &c, false)?;
            launch(variant, &a, &b, &c, &meta)
        }),
    })
}

macro_rules! entry_fns {
    ($($check:ident, $bench:ident => $variant:expr;)*) => {$(
        fn $check(dev: &Device, shape: &[usize], _dtype: DType) -> Result<CheckReport> {
            check_with(dev, $variant, mnk(shape), None)
        }
        fn $bench(dev: &Device, shape: &[usize], _dtype: DType) -> Result<Bench> {
            bench_variant(dev, shape, $variant)
        }
    )*};
}

entry_fns! {
    check_naive, bench_naive => Variant::Naive;
    check_persistent, bench_persistent => Variant::Persistent;
    check_tma, bench_tma => Variant::Tma;
    check_tma_persistent, bench_tma_persistent => Variant::TmaPersistent;
    check_descriptor, bench_descriptor => Variant::DescriptorPersistent;
}

/// The registry entries: the harness's `09-matmul-naive`, `-persistent`,
/// `-descriptor-persistent` and its extras `-tma`, `-tma-persistent`, at 8192x8192x512 fp16.
pub fn tutorials() -> Vec<Port> {
    const SHAPES: &[BenchShape] = &[BenchShape {
        label: "8192x8192x512",
        dims: &[8192, 8192, 512],
    }];
    type Fns = (
        fn(&Device, &[usize], DType) -> Result<CheckReport>,
        fn(&Device, &[usize], DType) -> Result<Bench>,
    );
    let entry = |name, about, (check, bench): Fns| Port {
        name,
        about,
        dims: &["M", "N", "K"],
        default_shape: &[257, 131, 77],
        bench_shapes: SHAPES,
        dtypes: &[DType::F16],
        check,
        bench,
    };
    vec![
        entry(
            "tutorial-09-matmul-naive",
            "one program a tile, clamped edge rows, carried pointer tiles",
            (check_naive, bench_naive),
        ),
        entry(
            "tutorial-09-matmul-persistent",
            "min(NUM_SMS, tiles) programs looping over tiles",
            (check_persistent, bench_persistent),
        ),
        entry(
            "tutorial-09-matmul-descriptor-persistent",
            "persistent, descriptors made in the kernel, optional epilogue subtile",
            (check_descriptor, bench_descriptor),
        ),
        entry(
            "tutorial-09-matmul-tma",
            "one program a tile through host descriptors (B transposed)",
            (check_tma, bench_tma),
        ),
        entry(
            "tutorial-09-matmul-tma-persistent",
            "persistent through host descriptors, optional epilogue subtile",
            (check_tma_persistent, bench_tma_persistent),
        ),
    ]
}
