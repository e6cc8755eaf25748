//! How tile elements live in registers, and the PTX types their arithmetic uses.
//!
//! i8/i16/u8/u16 live in 32-bit registers, kept sign- or zero-extended ("normalized") after
//! every op that could leave the narrow range; f16/bf16 live in 16-bit registers and compute in
//! f32 (one rounding back per op: for +, -, *, / and sqrt that is the correctly rounded result,
//! since f32 has more than twice their precision plus two bits). The fp8 formats live as a
//! zero-extended byte in a 32-bit register, as u8 does, and compute in f32 too (PTX's
//! `cvt.rn.satfinite.e4m3x2.f32` / `.e5m2x2` back, sm_89 and newer).

use crate::ptx::{RegClass, Ty};
use tegula_ir::{DType, Elem};

/// The register class of one element.
pub fn class_of(e: Elem) -> RegClass {
    match e {
        Elem::Ptr(_) => RegClass::B64,
        Elem::Scalar(d) => match d {
            DType::I1 => RegClass::Pred,
            DType::I8
            | DType::I16
            | DType::I32
            | DType::U8
            | DType::U16
            | DType::U32
            | DType::F8E4M3
            | DType::F8E5M2 => RegClass::B32,
            DType::I64 | DType::U64 => RegClass::B64,
            DType::F16 | DType::BF16 => RegClass::B16,
            DType::F32 => RegClass::F32,
            DType::F64 => RegClass::F64,
        },
    }
}

/// The type arithmetic on a dtype uses (f16/bf16 compute in f32).
pub fn arith_ty(d: DType) -> Ty {
    match d {
        DType::I1 => Ty::Pred,
        DType::I8 | DType::I16 | DType::I32 => Ty::S32,
        DType::U8 | DType::U16 | DType::U32 => Ty::U32,
        DType::I64 => Ty::S64,
        DType::U64 => Ty::U64,
        DType::F16 | DType::BF16 | DType::F32 | DType::F8E4M3 | DType::F8E5M2 => Ty::F32,
        DType::F64 => Ty::F64,
    }
}

/// The register class of [`arith_ty`].
pub fn arith_class(d: DType) -> RegClass {
    match arith_ty(d) {
        Ty::Pred => RegClass::Pred,
        Ty::S32 | Ty::U32 => RegClass::B32,
        Ty::S64 | Ty::U64 => RegClass::B64,
        Ty::F64 => RegClass::F64,
        _ => RegClass::F32,
    }
}

/// The PTX memory type of one element in global memory (i1 as a byte).
pub fn mem_ty(d: DType) -> Ty {
    match d {
        DType::I1 | DType::U8 | DType::F8E4M3 | DType::F8E5M2 => Ty::U8,
        DType::I8 => Ty::S8,
        DType::I16 => Ty::S16,
        DType::U16 => Ty::U16,
        DType::I32 => Ty::S32,
        DType::U32 => Ty::U32,
        DType::I64 => Ty::S64,
        DType::U64 => Ty::U64,
        DType::F16 | DType::BF16 => Ty::B16,
        DType::F32 => Ty::F32,
        DType::F64 => Ty::F64,
    }
}

/// Integers narrower than their 32-bit register.
pub fn is_narrow_int(d: DType) -> bool {
    matches!(d, DType::I8 | DType::I16 | DType::U8 | DType::U16)
}

/// The PTX scalar type of a kernel parameter.
pub fn param_ty(e: Elem) -> Ty {
    match e {
        Elem::Ptr(_) => Ty::U64,
        Elem::Scalar(d) => match d {
            DType::I1 | DType::U8 => Ty::U8,
            DType::I8 => Ty::S8,
            DType::I16 => Ty::S16,
            DType::U16 => Ty::U16,
            DType::F16 | DType::BF16 => Ty::B16,
            other => mem_ty(other),
        },
    }
}
