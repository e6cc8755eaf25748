//! Hopper TMA tensor maps (`CUtensorMap`): a 2-D tiled map encoded on the host by
//! `cuTensorMapEncodeTiled` and passed to a kernel by value, as its 128 bytes
//! ([`KernelParam::TensorMap`](crate::KernelParam::TensorMap), a PTX parameter declared
//! `.param .align 64 .b8 NAME[128]`).
//!
//! [`TensorMapSpec::validate`] checks the documented limits of `cuTensorMapEncodeTiled` before
//! the driver is asked (without a GPU), so a bad spec is a [`CudaError::TensorMap`] naming the
//! rule, not a bare `CUDA_ERROR_INVALID_VALUE`. The limits, for rank 2 without interleave:
//!
//! - `globalAddress` (the base) is 16-byte aligned;
//! - each `globalDim` is non-zero and at most 2^32;
//! - each `globalStrides` entry (here the one row stride) is a multiple of 16 and less than 2^40;
//! - each `boxDim` is non-zero and at most 256;
//! - without interleave, `boxDim[0] * elementSize` is a multiple of 16 bytes;
//! - with a swizzle, `boxDim[0] * elementSize` is at most the swizzle span (32, 64 or 128 bytes).
//!
//! The map is encoded with element strides `[1, 1]`, no interleave, L2 promotion of 128 bytes,
//! and out-of-bounds elements filled with zeros (`CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE`).

use crate::error::drv;
use crate::runtime::init_driver;
use crate::CudaError;
use cudarc::driver::sys;
use std::panic::catch_unwind;

/// Size in bytes of a `CUtensorMap`.
pub const TENSOR_MAP_BYTES: usize = 128;

/// The opaque 128-byte `CUtensorMap` the driver encodes. 64-byte aligned, as the driver requires of
/// the memory it encodes into and as a kernel's `.param .align 64 .b8 NAME[128]` reads it.
#[repr(C, align(64))]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TensorMap {
    bytes: [u8; TENSOR_MAP_BYTES],
}

const _: () = assert!(std::mem::size_of::<TensorMap>() == TENSOR_MAP_BYTES);
const _: () = assert!(std::mem::align_of::<TensorMap>() == 64);
// The driver's struct has the same size (its alignment is 64 or, from CUDA 13, 128).
const _: () = assert!(std::mem::size_of::<sys::CUtensorMap>() == TENSOR_MAP_BYTES);

impl TensorMap {
    /// A map from its 128 bytes (for example one encoded elsewhere, or saved).
    pub fn from_bytes(bytes: [u8; TENSOR_MAP_BYTES]) -> Self {
        TensorMap { bytes }
    }

    /// The map's 128 bytes, as the kernel receives them.
    pub fn as_bytes(&self) -> &[u8; TENSOR_MAP_BYTES] {
        &self.bytes
    }
}

impl std::fmt::Debug for TensorMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hex: String = self.bytes.iter().map(|b| format!("{b:02x}")).collect();
        f.debug_tuple("TensorMap")
            .field(&format_args!("{hex}"))
            .finish()
    }
}

/// Element types a tensor map can describe (`CUtensorMapDataType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TmaDtype {
    U8,
    U16,
    U32,
    I32,
    U64,
    I64,
    F16,
    BF16,
    F32,
    F64,
}

impl TmaDtype {
    /// Size of one element in bytes.
    pub fn bytes(self) -> u32 {
        match self {
            TmaDtype::U8 => 1,
            TmaDtype::U16 | TmaDtype::F16 | TmaDtype::BF16 => 2,
            TmaDtype::U32 | TmaDtype::I32 | TmaDtype::F32 => 4,
            TmaDtype::U64 | TmaDtype::I64 | TmaDtype::F64 => 8,
        }
    }

    fn to_sys(self) -> sys::CUtensorMapDataType {
        use sys::CUtensorMapDataType as D;
        match self {
            TmaDtype::U8 => D::CU_TENSOR_MAP_DATA_TYPE_UINT8,
            TmaDtype::U16 => D::CU_TENSOR_MAP_DATA_TYPE_UINT16,
            TmaDtype::U32 => D::CU_TENSOR_MAP_DATA_TYPE_UINT32,
            TmaDtype::I32 => D::CU_TENSOR_MAP_DATA_TYPE_INT32,
            TmaDtype::U64 => D::CU_TENSOR_MAP_DATA_TYPE_UINT64,
            TmaDtype::I64 => D::CU_TENSOR_MAP_DATA_TYPE_INT64,
            TmaDtype::F16 => D::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
            TmaDtype::BF16 => D::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            TmaDtype::F32 => D::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
            TmaDtype::F64 => D::CU_TENSOR_MAP_DATA_TYPE_FLOAT64,
        }
    }
}

/// Shared-memory swizzle of the box (`CUtensorMapSwizzle`): 16-byte chunks permuted within a
/// span of 32, 64 or 128 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TmaSwizzle {
    None,
    B32,
    B64,
    B128,
}

impl TmaSwizzle {
    /// The swizzle span in bytes, None without a swizzle.
    pub fn span_bytes(self) -> Option<u32> {
        match self {
            TmaSwizzle::None => None,
            TmaSwizzle::B32 => Some(32),
            TmaSwizzle::B64 => Some(64),
            TmaSwizzle::B128 => Some(128),
        }
    }

    fn to_sys(self) -> sys::CUtensorMapSwizzle {
        use sys::CUtensorMapSwizzle as S;
        match self {
            TmaSwizzle::None => S::CU_TENSOR_MAP_SWIZZLE_NONE,
            TmaSwizzle::B32 => S::CU_TENSOR_MAP_SWIZZLE_32B,
            TmaSwizzle::B64 => S::CU_TENSOR_MAP_SWIZZLE_64B,
            TmaSwizzle::B128 => S::CU_TENSOR_MAP_SWIZZLE_128B,
        }
    }
}

/// A 2-D tiled tensor map: a row-major matrix of `dims[1]` rows of `dims[0]` elements, rows
/// `row_stride_bytes` apart, moved a box of `box_dims[1]` rows of `box_dims[0]` elements at a
/// time. Axes are innermost (contiguous) first, as the driver takes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TensorMapSpec {
    pub dtype: TmaDtype,
    /// Device address of element (0, 0).
    pub base: u64,
    /// Elements along each axis, innermost first: `[columns, rows]`.
    pub dims: [u64; 2],
    /// Bytes from one row to the next.
    pub row_stride_bytes: u64,
    /// The box (the tile one copy moves), innermost first: `[columns, rows]`.
    pub box_dims: [u32; 2],
    pub swizzle: TmaSwizzle,
}

impl TensorMapSpec {
    /// Checks the documented limits of `cuTensorMapEncodeTiled` (see the module docs). Needs no
    /// driver; the first rule broken is the error, naming the rule and the value.
    pub fn validate(&self) -> Result<(), CudaError> {
        let fail = |what: String| Err(CudaError::TensorMap { what });
        if !self.base.is_multiple_of(16) {
            return fail(format!(
                "base address {:#x} breaks the rule: globalAddress must be 16-byte aligned",
                self.base
            ));
        }
        for (i, &d) in self.dims.iter().enumerate() {
            if d == 0 || d > 1 << 32 {
                return fail(format!(
                    "dims[{i}] = {d} breaks the rule: globalDim must be non-zero and at most 2^32"
                ));
            }
        }
        let stride = self.row_stride_bytes;
        if !stride.is_multiple_of(16) {
            return fail(format!(
                "row_stride_bytes = {stride} breaks the rule: globalStrides must be a multiple of 16"
            ));
        }
        if stride >= 1 << 40 {
            return fail(format!(
                "row_stride_bytes = {stride} breaks the rule: globalStrides must be less than 2^40"
            ));
        }
        for (i, &b) in self.box_dims.iter().enumerate() {
            if b == 0 || b > 256 {
                return fail(format!(
                    "box_dims[{i}] = {b} breaks the rule: boxDim must be non-zero and at most 256"
                ));
            }
        }
        let elem = self.dtype.bytes();
        // At most 256 * 8 bytes: no overflow.
        let inner = self.box_dims[0] * elem;
        if !inner.is_multiple_of(16) {
            return fail(format!(
                "box_dims[0] = {} of {elem}-byte {:?} is {inner} bytes, which breaks the rule: \
                 boxDim[0] * elementSize must be a multiple of 16 bytes",
                self.box_dims[0], self.dtype
            ));
        }
        if let Some(span) = self.swizzle.span_bytes() {
            if inner > span {
                return fail(format!(
                    "box_dims[0] = {} of {elem}-byte {:?} is {inner} bytes, which breaks the rule: \
                     with swizzle {:?}, boxDim[0] * elementSize must be at most the {span}-byte span",
                    self.box_dims[0], self.dtype, self.swizzle
                ));
            }
        }
        Ok(())
    }
}

/// Encodes a 2-D tiled tensor map (`cuTensorMapEncodeTiled`) after [`TensorMapSpec::validate`].
/// Host-only: needs the driver library loaded but no context. Without a driver this is
/// [`CudaError::NoDriver`]; a rule the driver still refuses is a [`CudaError::Driver`] naming
/// `cuTensorMapEncodeTiled`.
pub fn encode_tensor_map_2d(spec: &TensorMapSpec) -> Result<TensorMap, CudaError> {
    spec.validate()?;
    init_driver()?;
    let global_dim: [u64; 2] = spec.dims;
    let global_strides: [u64; 1] = [spec.row_stride_bytes];
    let box_dim: [u32; 2] = spec.box_dims;
    let element_strides: [u32; 2] = [1, 1];
    let mut raw = sys::CUtensorMap {
        opaque: [0; TENSOR_MAP_BYTES / 8],
    };
    // A libcuda without this symbol (a driver older than CUDA 12) makes cudarc's loader panic;
    // treat that as no usable driver.
    let encoded = catch_unwind(move || {
        // SAFETY: `raw` is a `CUtensorMap`, 128 writable bytes at the driver's alignment; the
        // four arrays hold `tensorRank` = 2 entries (`globalStrides` rank - 1 = 1) and live for the
        // call; the base is only recorded in the map, never dereferenced on the host; the enums are
        // the driver's own.
        let r = unsafe {
            sys::cuTensorMapEncodeTiled(
                &mut raw,
                spec.dtype.to_sys(),
                2,
                std::ptr::without_provenance_mut(spec.base as usize),
                global_dim.as_ptr(),
                global_strides.as_ptr(),
                box_dim.as_ptr(),
                element_strides.as_ptr(),
                sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                spec.swizzle.to_sys(),
                sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            )
        };
        r.result().map(|()| raw)
    });
    let raw = encoded
        .map_err(|_| CudaError::NoDriver)?
        .map_err(drv("cuTensorMapEncodeTiled"))?;
    let mut bytes = [0u8; TENSOR_MAP_BYTES];
    for (chunk, word) in bytes.chunks_exact_mut(8).zip(raw.opaque) {
        // The driver wrote the map as memory: native byte order keeps it as written.
        chunk.copy_from_slice(&word.to_ne_bytes());
    }
    Ok(TensorMap { bytes })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver_library_present;

    /// A 1000 x 300 f16 matrix with 640-byte rows, moved 64 x 32 at a time, 128-byte swizzle.
    fn good() -> TensorMapSpec {
        TensorMapSpec {
            dtype: TmaDtype::F16,
            base: 0x7f00_0000_0100,
            dims: [300, 1000],
            row_stride_bytes: 640,
            box_dims: [64, 32],
            swizzle: TmaSwizzle::B128,
        }
    }

    fn refused(spec: TensorMapSpec, rule: &str, value: &str) {
        let err = spec.validate().unwrap_err();
        assert!(matches!(err, CudaError::TensorMap { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains(rule), "{msg}\n  should name the rule: {rule}");
        assert!(
            msg.contains(value),
            "{msg}\n  should name the value: {value}"
        );
        // Validation comes before the driver: the same error with or without one.
        let enc = encode_tensor_map_2d(&spec).unwrap_err();
        assert_eq!(enc.to_string(), msg);
    }

    #[test]
    fn element_sizes_and_spans() {
        use TmaDtype::*;
        let sizes: Vec<u32> = [U8, U16, U32, I32, U64, I64, F16, BF16, F32, F64]
            .iter()
            .map(|d| d.bytes())
            .collect();
        assert_eq!(sizes, [1, 2, 4, 4, 8, 8, 2, 2, 4, 8]);
        assert_eq!(TmaSwizzle::None.span_bytes(), None);
        assert_eq!(TmaSwizzle::B32.span_bytes(), Some(32));
        assert_eq!(TmaSwizzle::B64.span_bytes(), Some(64));
        assert_eq!(TmaSwizzle::B128.span_bytes(), Some(128));
    }

    #[test]
    fn validate_accepts_good_specs() {
        good().validate().unwrap();
        // The limits themselves are inside.
        TensorMapSpec {
            dtype: TmaDtype::U8,
            base: 0,
            dims: [1 << 32, 1],
            row_stride_bytes: (1 << 40) - 16,
            box_dims: [256, 256],
            swizzle: TmaSwizzle::None,
        }
        .validate()
        .unwrap();
        // Inner box exactly the span: 32 bytes of f32 under a 32-byte swizzle, 8 f64 under 64.
        for (dtype, b0, swizzle) in [
            (TmaDtype::F32, 8, TmaSwizzle::B32),
            (TmaDtype::F64, 8, TmaSwizzle::B64),
            (TmaDtype::BF16, 64, TmaSwizzle::B128),
            (TmaDtype::I64, 2, TmaSwizzle::B32),
        ] {
            TensorMapSpec {
                dtype,
                box_dims: [b0, 1],
                swizzle,
                ..good()
            }
            .validate()
            .unwrap_or_else(|e| panic!("{dtype:?} {b0} {swizzle:?}: {e}"));
        }
    }

    #[test]
    fn validate_refuses_each_rule() {
        let align = "globalAddress must be 16-byte aligned";
        refused(
            TensorMapSpec {
                base: 0x1008,
                ..good()
            },
            align,
            "0x1008",
        );
        refused(TensorMapSpec { base: 1, ..good() }, align, "0x1");

        let dim = "globalDim must be non-zero and at most 2^32";
        refused(
            TensorMapSpec {
                dims: [0, 4],
                ..good()
            },
            dim,
            "dims[0] = 0",
        );
        refused(
            TensorMapSpec {
                dims: [8, (1 << 32) + 1],
                ..good()
            },
            dim,
            "dims[1] = 4294967297",
        );

        refused(
            TensorMapSpec {
                row_stride_bytes: 640 + 8,
                ..good()
            },
            "globalStrides must be a multiple of 16",
            "row_stride_bytes = 648",
        );
        refused(
            TensorMapSpec {
                row_stride_bytes: 1 << 40,
                ..good()
            },
            "globalStrides must be less than 2^40",
            "row_stride_bytes = 1099511627776",
        );

        let boxd = "boxDim must be non-zero and at most 256";
        refused(
            TensorMapSpec {
                box_dims: [0, 8],
                ..good()
            },
            boxd,
            "box_dims[0] = 0",
        );
        refused(
            TensorMapSpec {
                box_dims: [64, 257],
                ..good()
            },
            boxd,
            "box_dims[1] = 257",
        );

        // 12 f16 = 24 bytes.
        refused(
            TensorMapSpec {
                box_dims: [12, 8],
                swizzle: TmaSwizzle::None,
                ..good()
            },
            "boxDim[0] * elementSize must be a multiple of 16 bytes",
            "is 24 bytes",
        );
        // 3 f32 = 12 bytes, under a swizzle too: the multiple-of-16 rule comes first.
        refused(
            TensorMapSpec {
                dtype: TmaDtype::F32,
                box_dims: [3, 8],
                ..good()
            },
            "multiple of 16 bytes",
            "box_dims[0] = 3 of 4-byte F32 is 12 bytes",
        );

        let span = "boxDim[0] * elementSize must be at most the";
        // 128 f16 = 256 bytes > 128.
        refused(
            TensorMapSpec {
                box_dims: [128, 8],
                ..good()
            },
            span,
            "is 256 bytes",
        );
        refused(
            TensorMapSpec {
                box_dims: [32, 8],
                swizzle: TmaSwizzle::B32,
                ..good()
            },
            "with swizzle B32, boxDim[0] * elementSize must be at most the 32-byte span",
            "is 64 bytes",
        );
        refused(
            TensorMapSpec {
                dtype: TmaDtype::U8,
                box_dims: [80, 8],
                swizzle: TmaSwizzle::B64,
                ..good()
            },
            "64-byte span",
            "is 80 bytes",
        );
        // Without a swizzle the same box is fine.
        TensorMapSpec {
            dtype: TmaDtype::U8,
            box_dims: [80, 8],
            swizzle: TmaSwizzle::None,
            ..good()
        }
        .validate()
        .unwrap();
    }

    #[test]
    fn encode_without_a_driver_is_no_driver() {
        if driver_library_present() {
            return;
        }
        let err = encode_tensor_map_2d(&good()).unwrap_err();
        assert!(matches!(err, CudaError::NoDriver), "{err:?}");
    }

    #[test]
    fn tensor_map_layout_and_bytes() {
        assert_eq!(std::mem::size_of::<TensorMap>(), 128);
        assert_eq!(std::mem::align_of::<TensorMap>(), 64);
        let mut bytes = [0u8; 128];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = i as u8;
        }
        let m = TensorMap::from_bytes(bytes);
        assert_eq!(m.as_bytes(), &bytes);
        assert_eq!(m, TensorMap::from_bytes(bytes));
        assert_ne!(m, TensorMap::from_bytes([0; 128]));
        let dbg = format!("{m:?}");
        assert!(dbg.starts_with("TensorMap(000102"), "{dbg}");
        assert!(dbg.ends_with("7e7f)"), "{dbg}");
    }
}
