//! The tile operations a kernel body calls, named after `triton.language`.

use super::tile::{binary, broadcast_pair, materialize, to_tile, unify};
use super::{constant, emit, emit1, report, shape_at, IntoOperand, Operand, Tile};
use crate::dtype::{DType, Element};
use crate::kernel::Loc;
use crate::op::{
    AtomicOp, BinaryOp, CacheModifier, Constant, EvictionPolicy, InputPrecision, MemScope, MemSem,
    Op, ReduceOp, UnaryOp,
};
use crate::types::{Elem, IntoShape, Shape, TileType};

// --- indices -----------------------------------------------------------------------------

/// This program's index along grid axis `axis` (0, 1 or 2), an i32 scalar.
#[track_caller]
pub fn program_id(axis: usize) -> Tile {
    let loc = Loc::caller();
    if axis > 2 {
        report(
            loc,
            format!("program_id axis must be 0, 1 or 2, got {axis}"),
        );
    }
    emit1(
        Op::ProgramId { axis: axis as u8 },
        vec![],
        TileType::scalar(DType::I32),
        loc,
    )
}

/// The number of programs along grid axis `axis`, an i32 scalar.
#[track_caller]
pub fn num_programs(axis: usize) -> Tile {
    let loc = Loc::caller();
    if axis > 2 {
        report(
            loc,
            format!("num_programs axis must be 0, 1 or 2, got {axis}"),
        );
    }
    emit1(
        Op::NumPrograms { axis: axis as u8 },
        vec![],
        TileType::scalar(DType::I32),
        loc,
    )
}

/// A Rust integer known at trace time (a literal or a constexpr of any integer type), where an
/// op takes a trace-time integer: `arange(0, block)` with `block: usize`.
pub trait ConstInt: Copy {
    /// The value as i64 (u64 and usize values above `i64::MAX` saturate).
    fn to_i64(self) -> i64;
}

macro_rules! const_int {
    ($($t:ty),*) => {$(impl ConstInt for $t {
        fn to_i64(self) -> i64 {
            i64::try_from(self).unwrap_or(i64::MAX)
        }
    })*};
}
const_int!(i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);

/// `[start, start + 1, .., end - 1]` as an i32 tile (`tl.arange`). `end - start` must be a
/// power of two, as in Triton, since tiles map onto threads and registers in powers of two.
/// The bounds are Rust integers of any type: literals, `usize` constexprs (`arange(0, block)`).
#[track_caller]
pub fn arange(start: impl ConstInt, end: impl ConstInt) -> Tile {
    let (start, end) = (start.to_i64(), end.to_i64());
    let loc = Loc::caller();
    let n = end - start;
    if n <= 0 || !(n as u64).is_power_of_two() {
        report(
            loc,
            format!("arange({start}, {end}): the length must be a positive power of two"),
        );
    }
    if i32::try_from(start).is_err() || i32::try_from(end).is_err() {
        report(loc, format!("arange({start}, {end}) does not fit in i32"));
    }
    let n = usize::try_from(n.max(1)).unwrap_or(usize::MAX);
    emit1(
        Op::Arange { start, end },
        vec![],
        TileType::tile(DType::I32, shape_at([n], loc)),
        loc,
    )
}

/// A tile of `shape` filled with `value`, of the dtype of `T`.
#[track_caller]
pub fn full<T: Element>(shape: impl IntoShape, value: impl IntoOperand) -> Tile {
    full_dtype(shape, T::DTYPE, value)
}

/// A tile of `shape` filled with `value`, of `dtype`.
#[track_caller]
pub fn full_dtype(shape: impl IntoShape, dtype: DType, value: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let shape = shape_at(shape, loc);
    let c = match value.into_operand() {
        Operand::Int(v) if dtype.is_float() => Constant::Float(v as f64),
        Operand::Int(v) => Constant::Int(v),
        Operand::Bool(b) => Constant::Int(b as i64),
        Operand::Float(f) if dtype.is_float() => Constant::Float(f),
        Operand::Tile(t) => {
            let t = materialize(Operand::Tile(t), dtype, loc);
            if !t.shape().is_scalar() {
                report(loc, format!("full needs a scalar value, got {}", t.ty()));
            }
            return t.broadcast_at(shape, loc);
        }
        Operand::Float(f) => {
            report(loc, format!("float value {f} for a tile of {dtype}"));
            Constant::Int(f as i64)
        }
    };
    constant(c, dtype, shape, loc)
}

/// A tile of `shape` filled with zeros of the dtype of `T`.
#[track_caller]
pub fn zeros<T: Element>(shape: impl IntoShape) -> Tile {
    full_dtype(shape, T::DTYPE, 0)
}

/// A zero tile with the shape and dtype of `like`.
#[track_caller]
pub fn zeros_like(like: Tile) -> Tile {
    full_dtype(like.shape(), like.dtype(), 0)
}

/// `ceil(a / b)` for non-negative integers.
#[track_caller]
pub fn cdiv(a: impl IntoOperand, b: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let (a, b) = unify(a.into_operand(), b.into_operand(), "cdiv", loc);
    let sum = binary(BinaryOp::Add, Operand::Tile(a), Operand::Tile(b), loc);
    let num = binary(BinaryOp::Sub, Operand::Tile(sum), Operand::Int(1), loc);
    binary(BinaryOp::Div, Operand::Tile(num), Operand::Tile(b), loc)
}

// --- elementwise -------------------------------------------------------------------------

macro_rules! unary_fns {
    ($($(#[$m:meta])* $name:ident => $op:ident;)*) => {$(
        $(#[$m])*
        #[track_caller]
        pub fn $name(x: impl IntoOperand) -> Tile {
            let loc = Loc::caller();
            let t = to_tile(x.into_operand(), loc);
            t.unary_at(UnaryOp::$op, loc)
        }
    )*};
}

unary_fns! {
    /// `e^x`.
    exp => Exp;
    /// `2^x`; on the GPU one `ex2.approx` instruction.
    exp2 => Exp2;
    /// Natural logarithm.
    log => Log;
    /// Base-2 logarithm.
    log2 => Log2;
    /// Square root, correctly rounded.
    sqrt => Sqrt;
    /// `1 / sqrt(x)`.
    rsqrt => Rsqrt;
    /// Absolute value.
    abs => Abs;
    sin => Sin;
    cos => Cos;
    /// The error function.
    erf => Erf;
    tanh => Tanh;
    floor => Floor;
    ceil => Ceil;
}

/// `1 / (1 + e^-x)`.
#[track_caller]
pub fn sigmoid(x: Tile) -> Tile {
    let loc = Loc::caller();
    let e = x.unary_at(UnaryOp::Neg, loc).unary_at(UnaryOp::Exp, loc);
    let d = binary(BinaryOp::Add, Operand::Tile(e), Operand::Int(1), loc);
    binary(BinaryOp::Div, Operand::Int(1), Operand::Tile(d), loc)
}

/// Elementwise maximum; for floats the non-NaN operand when one is NaN.
#[track_caller]
pub fn maximum(a: impl IntoOperand, b: impl IntoOperand) -> Tile {
    binary(
        BinaryOp::Max,
        a.into_operand(),
        b.into_operand(),
        Loc::caller(),
    )
}

/// Elementwise minimum; for floats the non-NaN operand when one is NaN.
#[track_caller]
pub fn minimum(a: impl IntoOperand, b: impl IntoOperand) -> Tile {
    binary(
        BinaryOp::Min,
        a.into_operand(),
        b.into_operand(),
        Loc::caller(),
    )
}

/// Elementwise maximum that returns NaN when either operand is NaN.
#[track_caller]
pub fn maximum_nan(a: impl IntoOperand, b: impl IntoOperand) -> Tile {
    binary(
        BinaryOp::MaxNan,
        a.into_operand(),
        b.into_operand(),
        Loc::caller(),
    )
}

/// Elementwise minimum that returns NaN when either operand is NaN.
#[track_caller]
pub fn minimum_nan(a: impl IntoOperand, b: impl IntoOperand) -> Tile {
    binary(
        BinaryOp::MinNan,
        a.into_operand(),
        b.into_operand(),
        Loc::caller(),
    )
}

/// `a` where `cond` is true, else `b` (Triton's `tl.where`), broadcast to one shape.
///
/// - `cond`: an i1 tile, or an integer or float tile that counts as true where it is nonzero
///   (converted by `cond != 0`, as Triton casts a condition to int1; a NaN is true).
/// - `a`, `b`: tiles or Rust literals, promoted to one dtype (docs/semantics.md).
#[track_caller]
pub fn select(cond: Tile, a: impl IntoOperand, b: impl IntoOperand) -> Tile {
    select_at(cond, a.into_operand(), b.into_operand(), Loc::caller())
}

pub(crate) fn select_at(cond: Tile, a: Operand, b: Operand, loc: Loc) -> Tile {
    if cond.is_ptr() {
        report(
            loc,
            format!(
                "select needs an i1 or a number condition, got {}",
                cond.ty()
            ),
        );
    }
    // A numeric condition is true where nonzero (Triton casts it to int1): `cond != 0`.
    let cond = cond.cast_at(DType::I1, Default::default(), loc);
    let (x, y) = unify(a, b, "select", loc);
    let shape = Shape::broadcast(cond.shape(), x.shape());
    let Some(shape) = shape else {
        report(
            loc,
            format!(
                "shape mismatch in select: condition {} and values {}",
                cond.ty(),
                x.ty()
            ),
        );
        return x;
    };
    let (c, x, y) = (
        cond.broadcast_at(shape, loc),
        x.broadcast_at(shape, loc),
        y.broadcast_at(shape, loc),
    );
    emit1(
        Op::Select,
        vec![c.value(), x.value(), y.value()],
        x.ty(),
        loc,
    )
}

/// The high half of the full product of two 32- or 64-bit integers, their bits read as
/// unsigned (`tl.umulhi`): `(a as u64 * b as u64) >> 32` for 32-bit operands. The operands are
/// promoted to one dtype first; the result has that dtype (a signed result holds the bits).
/// One `mul.hi.u32` / `mul.hi.u64` on the GPU.
#[track_caller]
pub fn umulhi(a: impl IntoOperand, b: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let t = binary(BinaryOp::UMulHi, a.into_operand(), b.into_operand(), loc);
    if !t.dtype().is_int() || !matches!(t.dtype().bits(), 32 | 64) {
        report(
            loc,
            format!("umulhi needs 32- or 64-bit integers, got {}", t.ty()),
        );
    }
    t
}

/// `a * b + c` rounded once.
#[track_caller]
pub fn fma(a: impl IntoOperand, b: impl IntoOperand, c: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let (x, y) = unify(a.into_operand(), b.into_operand(), "fma", loc);
    let (x, z) = unify(Operand::Tile(x), c.into_operand(), "fma", loc);
    let (y, _) = broadcast_pair(y, z, "fma", loc);
    let y = y.cast_at(x.dtype(), Default::default(), loc);
    if !x.dtype().is_float() {
        report(loc, format!("fma needs float operands, got {}", x.ty()));
    }
    emit1(Op::Fma, vec![x.value(), y.value(), z.value()], x.ty(), loc)
}

// --- memory ------------------------------------------------------------------------------

/// Options of [`load_with`]; `Default` is an unmasked, uncached-hint load.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoadOptions {
    pub mask: Option<Tile>,
    /// The value of masked-off elements (zero when `None`).
    pub other: Option<Operand>,
    pub cache: CacheModifier,
    pub evict: EvictionPolicy,
    pub volatile: bool,
}

/// Options of [`store_with`].
#[derive(Clone, Copy, Debug, Default)]
pub struct StoreOptions {
    pub mask: Option<Tile>,
    pub cache: CacheModifier,
    pub evict: EvictionPolicy,
}

fn check_mask(mask: Tile, shape: Shape, what: &str, loc: Loc) -> Tile {
    if mask.dtype() != DType::I1 || mask.is_ptr() {
        report(
            loc,
            format!("the mask of a {what} must be i1, got {}", mask.ty()),
        );
    }
    match Shape::broadcast(mask.shape(), shape) {
        Some(s) if s == shape => mask.broadcast_at(shape, loc),
        _ => {
            report(
                loc,
                format!(
                    "the mask {} of a {what} does not broadcast to the pointer shape {shape}",
                    mask.ty()
                ),
            );
            mask
        }
    }
}

fn check_ptr(ptr: Tile, what: &str, loc: Loc) {
    if !ptr.is_ptr() {
        report(
            loc,
            format!("{what} needs a pointer tile, got {}", ptr.ty()),
        );
    }
}

/// Loads the elements `ptr` points to where `mask` is true; others read as `other`.
#[track_caller]
pub fn load(ptr: Tile, mask: Tile, other: impl IntoOperand) -> Tile {
    load_at(
        ptr,
        LoadOptions {
            mask: Some(mask),
            other: Some(other.into_operand()),
            ..Default::default()
        },
        Loc::caller(),
    )
}

/// Loads every element `ptr` points to; each must be in bounds.
#[track_caller]
pub fn load_unmasked(ptr: Tile) -> Tile {
    load_at(ptr, LoadOptions::default(), Loc::caller())
}

/// A load with every option: mask, other, cache modifier, eviction policy, volatile.
#[track_caller]
pub fn load_with(ptr: Tile, options: LoadOptions) -> Tile {
    load_at(ptr, options, Loc::caller())
}

fn load_at(ptr: Tile, o: LoadOptions, loc: Loc) -> Tile {
    check_ptr(ptr, "load", loc);
    let ty = ptr.ty().with_elem(Elem::Scalar(ptr.dtype()));
    let mut args = vec![ptr.value()];
    if let Some(m) = o.mask {
        args.push(check_mask(m, ptr.shape(), "load", loc).value());
    }
    let has_other = o.other.is_some() && o.mask.is_some();
    if let (Some(other), true) = (o.other, has_other) {
        let t = materialize(other, ptr.dtype(), loc);
        if !t.shape().is_scalar() && t.shape() != ptr.shape() {
            report(
                loc,
                format!(
                    "`other` {} does not match the loaded shape {}",
                    t.ty(),
                    ptr.shape()
                ),
            );
        }
        args.push(t.broadcast_at(ptr.shape(), loc).value());
    }
    emit1(
        Op::Load {
            has_mask: o.mask.is_some(),
            has_other,
            cache: o.cache,
            evict: o.evict,
            volatile: o.volatile,
        },
        args,
        ty,
        loc,
    )
}

/// Stores `value` (converted to the pointee dtype) where `mask` is true.
#[track_caller]
pub fn store(ptr: Tile, value: impl IntoOperand, mask: Tile) {
    store_at(
        ptr,
        value.into_operand(),
        StoreOptions {
            mask: Some(mask),
            ..Default::default()
        },
        Loc::caller(),
    );
}

/// Stores `value` to every element `ptr` points to; each must be in bounds.
#[track_caller]
pub fn store_unmasked(ptr: Tile, value: impl IntoOperand) {
    store_at(
        ptr,
        value.into_operand(),
        StoreOptions::default(),
        Loc::caller(),
    );
}

/// A store with every option.
#[track_caller]
pub fn store_with(ptr: Tile, value: impl IntoOperand, options: StoreOptions) {
    store_at(ptr, value.into_operand(), options, Loc::caller());
}

fn store_at(ptr: Tile, value: Operand, o: StoreOptions, loc: Loc) {
    check_ptr(ptr, "store", loc);
    let v = stored_value(ptr, value, "store", loc);
    let mut args = vec![ptr.value(), v.value()];
    if let Some(m) = o.mask {
        args.push(check_mask(m, ptr.shape(), "store", loc).value());
    }
    emit(
        Op::Store {
            has_mask: o.mask.is_some(),
            cache: o.cache,
            evict: o.evict,
        },
        args,
        &[],
        vec![],
        loc,
    );
}

/// Converts a value to the pointee dtype and the pointer's shape (a value may broadcast to the
/// pointer tile, not the other way round).
fn stored_value(ptr: Tile, value: Operand, what: &str, loc: Loc) -> Tile {
    let v = materialize(value, ptr.dtype(), loc);
    match Shape::broadcast(v.shape(), ptr.shape()) {
        Some(s) if s == ptr.shape() => v.broadcast_at(s, loc),
        _ => {
            report(
                loc,
                format!(
                    "{what}: the value {} does not fit the pointer tile {}",
                    v.ty(),
                    ptr.ty()
                ),
            );
            v
        }
    }
}

/// Atomic read-modify-write of every element `ptr` points to where `mask` (if any) is true;
/// returns the old values. Ordered `acq_rel` at `gpu` scope, Triton's defaults; other orderings
/// and scopes: [`atomic_with`].
#[track_caller]
pub fn atomic(op: AtomicOp, ptr: Tile, value: impl IntoOperand, mask: Option<Tile>) -> Tile {
    atomic_with(op, ptr, value, mask, MemSem::AcqRel, MemScope::Gpu)
}

/// `atomic_add` with relaxed ordering: only the sum is atomic, no other memory access is
/// ordered by it (accumulating partial sums; on the GPU, a `red` when the result is unused).
#[track_caller]
pub fn atomic_add_relaxed(ptr: Tile, value: impl IntoOperand, mask: Option<Tile>) -> Tile {
    atomic_with(
        AtomicOp::Add,
        ptr,
        value,
        mask,
        MemSem::Relaxed,
        MemScope::Gpu,
    )
}

/// `atomic` with Triton's `sem=` and `scope=`: `sem` is the ordering it gives this thread's
/// other memory accesses, `scope` the threads (of the program, of the device, of the system)
/// it is atomic and ordered with respect to. Triton's
/// `tl.atomic_add(p, v, mask=m, sem="release", scope="cta")` is
/// `atomic_with(AtomicOp::Add, p, v, Some(m), MemSem::Release, MemScope::Cta)`.
#[track_caller]
pub fn atomic_with(
    op: AtomicOp,
    ptr: Tile,
    value: impl IntoOperand,
    mask: Option<Tile>,
    sem: MemSem,
    scope: MemScope,
) -> Tile {
    let loc = Loc::caller();
    check_ptr(ptr, "atomic", loc);
    let v = stored_value(ptr, value.into_operand(), "atomic", loc);
    if matches!(op, AtomicOp::And | AtomicOp::Or | AtomicOp::Xor) && ptr.dtype().is_float() {
        report(loc, format!("atomic {} needs integers", op.name()));
    }
    let mut args = vec![ptr.value(), v.value()];
    if let Some(m) = mask {
        args.push(check_mask(m, ptr.shape(), "atomic", loc).value());
    }
    emit1(
        Op::Atomic {
            op,
            has_mask: mask.is_some(),
            sem,
            scope,
        },
        args,
        v.ty(),
        loc,
    )
}

/// `atomic(AtomicOp::Add, ..)`.
#[track_caller]
pub fn atomic_add(ptr: Tile, value: impl IntoOperand, mask: Option<Tile>) -> Tile {
    atomic(AtomicOp::Add, ptr, value, mask)
}

/// `atomic(AtomicOp::Max, ..)`.
#[track_caller]
pub fn atomic_max(ptr: Tile, value: impl IntoOperand, mask: Option<Tile>) -> Tile {
    atomic(AtomicOp::Max, ptr, value, mask)
}

/// `atomic(AtomicOp::Min, ..)`.
#[track_caller]
pub fn atomic_min(ptr: Tile, value: impl IntoOperand, mask: Option<Tile>) -> Tile {
    atomic(AtomicOp::Min, ptr, value, mask)
}

/// `atomic(AtomicOp::Xchg, ..)`.
#[track_caller]
pub fn atomic_xchg(ptr: Tile, value: impl IntoOperand, mask: Option<Tile>) -> Tile {
    atomic(AtomicOp::Xchg, ptr, value, mask)
}

/// Compare-and-swap: where `*ptr == cmp`, stores `value`; returns the old values. Ordered
/// `acq_rel` at `gpu` scope; others: [`atomic_cas_with`].
#[track_caller]
pub fn atomic_cas(ptr: Tile, cmp: impl IntoOperand, value: impl IntoOperand) -> Tile {
    atomic_cas_with(ptr, cmp, value, MemSem::AcqRel, MemScope::Gpu)
}

/// `atomic_cas` with Triton's `sem=` and `scope=` (see [`atomic_with`]).
#[track_caller]
pub fn atomic_cas_with(
    ptr: Tile,
    cmp: impl IntoOperand,
    value: impl IntoOperand,
    sem: MemSem,
    scope: MemScope,
) -> Tile {
    let loc = Loc::caller();
    check_ptr(ptr, "atomic_cas", loc);
    let c = stored_value(ptr, cmp.into_operand(), "atomic_cas", loc);
    let v = stored_value(ptr, value.into_operand(), "atomic_cas", loc);
    emit1(
        Op::AtomicCas { sem, scope },
        vec![ptr.value(), c.value(), v.value()],
        v.ty(),
        loc,
    )
}

// --- reductions, scans, dot --------------------------------------------------------------

pub(crate) fn reduce_at(x: Tile, op: ReduceOp, axis: usize, loc: Loc) -> Tile {
    if x.is_ptr() || axis >= x.shape().rank() {
        report(
            loc,
            format!(
                "cannot reduce {} along axis {axis} (rank {})",
                x.ty(),
                x.shape().rank()
            ),
        );
        return x;
    }
    let x = accumulation_dtype(x, op, loc);
    let dtype = if op.is_arg() { DType::I32 } else { x.dtype() };
    emit1(
        Op::Reduce {
            op,
            axis: axis as u8,
        },
        vec![x.value()],
        TileType::tile(dtype, x.shape().without_axis(axis)),
        loc,
    )
}

/// Sums and products of integers narrower than 32 bits accumulate in i32, as in Triton.
fn accumulation_dtype(x: Tile, op: ReduceOp, loc: Loc) -> Tile {
    let d = x.dtype();
    if matches!(op, ReduceOp::Sum | ReduceOp::Prod) && d.is_int() && d.bits() < 32 {
        x.cast_at(DType::I32, Default::default(), loc)
    } else if matches!(op, ReduceOp::Sum | ReduceOp::Prod) && d.is_fp8() {
        // As Triton: an 8-bit float sum would lose nearly everything to rounding.
        x.cast_at(DType::F32, Default::default(), loc)
    } else {
        if matches!(op, ReduceOp::And | ReduceOp::Or | ReduceOp::Xor) && d.is_float() {
            report(
                loc,
                format!("reduce {} needs integers, got {}", op.name(), x.ty()),
            );
        }
        x
    }
}

/// A reduction of `x` along `axis` with the combiner `op`.
#[track_caller]
pub fn reduce(x: Tile, op: ReduceOp, axis: usize) -> Tile {
    reduce_at(x, op, axis, Loc::caller())
}

macro_rules! reduce_fns {
    ($($(#[$m:meta])* $name:ident => $op:ident;)*) => {$(
        $(#[$m])*
        #[track_caller]
        pub fn $name(x: Tile, axis: usize) -> Tile {
            reduce_at(x, ReduceOp::$op, axis, Loc::caller())
        }
    )*};
}

reduce_fns! {
    /// Sum along `axis` (`tl.sum`).
    sum => Sum;
    /// Product along `axis`.
    prod => Prod;
    /// Maximum along `axis` (`tl.max`); NaN propagates.
    max => Max;
    /// Minimum along `axis` (`tl.min`); NaN propagates.
    min => Min;
    /// Index of the maximum along `axis` (first on ties), as i32.
    argmax => ArgMax;
    /// Index of the minimum along `axis` (first on ties), as i32.
    argmin => ArgMin;
    /// Bitwise and along `axis`.
    reduce_and => And;
    /// Bitwise or along `axis`.
    reduce_or => Or;
    /// Bitwise xor along `axis`.
    reduce_xor => Xor;
}

/// Inclusive scan of `x` along `axis` with `op` (not the arg-reductions).
#[track_caller]
pub fn scan(x: Tile, op: ReduceOp, axis: usize, reverse: bool) -> Tile {
    let loc = Loc::caller();
    if x.is_ptr() || axis >= x.shape().rank() || op.is_arg() {
        report(
            loc,
            format!(
                "cannot scan {} along axis {axis} with {}",
                x.ty(),
                op.name()
            ),
        );
        return x;
    }
    let x = accumulation_dtype(x, op, loc);
    emit1(
        Op::Scan {
            op,
            axis: axis as u8,
            reverse,
        },
        vec![x.value()],
        x.ty(),
        loc,
    )
}

/// Inclusive prefix sum along `axis` (`tl.cumsum`).
#[track_caller]
pub fn cumsum(x: Tile, axis: usize) -> Tile {
    scan_at(x, ReduceOp::Sum, axis)
}

/// Inclusive prefix product along `axis` (`tl.cumprod`).
#[track_caller]
pub fn cumprod(x: Tile, axis: usize) -> Tile {
    scan_at(x, ReduceOp::Prod, axis)
}

#[track_caller]
fn scan_at(x: Tile, op: ReduceOp, axis: usize) -> Tile {
    scan(x, op, axis, false)
}

/// `a @ b` for 2-D tiles `a[M, K]`, `b[K, N]`, accumulated in f32 (i32 for 8-bit integers).
#[track_caller]
pub fn dot(a: Tile, b: Tile) -> Tile {
    dot_at(a, b, None, InputPrecision::default(), Loc::caller())
}

/// `acc + a @ b`; the result has the dtype of `acc`.
#[track_caller]
pub fn dot_acc(a: Tile, b: Tile, acc: Tile) -> Tile {
    dot_at(a, b, Some(acc), InputPrecision::default(), Loc::caller())
}

/// `acc + a @ b` with an explicit precision for f32 operands (Triton's `input_precision`).
#[track_caller]
pub fn dot_with(a: Tile, b: Tile, acc: Option<Tile>, precision: InputPrecision) -> Tile {
    dot_at(a, b, acc, precision, Loc::caller())
}

fn dot_at(a: Tile, b: Tile, acc: Option<Tile>, precision: InputPrecision, loc: Loc) -> Tile {
    let (sa, sb) = (a.shape(), b.shape());
    let shapes_ok = sa.rank() == 2 && sb.rank() == 2 && sa.dim(1) == sb.dim(0);
    if !shapes_ok {
        report(
            loc,
            format!(
                "dot needs a[M, K] and b[K, N], got {} and {}",
                a.ty(),
                b.ty()
            ),
        );
        return a;
    }
    let (m, k, n) = (sa.dim(0), sa.dim(1), sb.dim(1));
    if m < 16 || n < 16 || k < 16 {
        report(
            loc,
            format!(
                "dot needs M, N and K of at least 16 (tensor-core tiles), got M={m} N={n} K={k}; \
                 pad the tiles and mask the loads"
            ),
        );
    }
    // The two fp8 formats may meet, as in Triton (and on the tensor cores).
    let fp8_pair = a.dtype().is_fp8() && b.dtype().is_fp8();
    if (a.dtype() != b.dtype() && !fp8_pair) || a.is_ptr() || b.is_ptr() {
        report(
            loc,
            format!(
                "dot operands must share a dtype (or both be fp8), got {} and {}",
                a.ty(),
                b.ty()
            ),
        );
    }
    let out_shape = shape_at([m, n], loc);
    let acc_dtype = if a.dtype().is_int() {
        DType::I32
    } else if a.dtype() == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    let acc = match acc {
        Some(c) => {
            if c.shape() != out_shape {
                report(
                    loc,
                    format!(
                        "dot accumulator {} does not match the product shape {out_shape}",
                        c.ty()
                    ),
                );
            }
            c
        }
        None => constant(
            if acc_dtype.is_float() {
                Constant::Float(0.0)
            } else {
                Constant::Int(0)
            },
            acc_dtype,
            out_shape,
            loc,
        ),
    };
    emit1(
        Op::Dot { precision },
        vec![a.value(), b.value(), acc.value()],
        acc.ty(),
        loc,
    )
}

// --- shapes ------------------------------------------------------------------------------

/// Transpose (`tl.trans`).
#[track_caller]
pub fn trans(x: Tile) -> Tile {
    x.trans()
}

/// Broadcasts two tiles against each other (`tl.broadcast`).
#[track_caller]
pub fn broadcast(a: Tile, b: Tile) -> (Tile, Tile) {
    broadcast_pair(a, b, "broadcast", Loc::caller())
}

// --- hints and debugging -----------------------------------------------------------------

/// Per-axis values of a compiler hint: one `u32` for every axis, or a list with one entry per
/// axis (`[16, 1]`, `vec![..]`, `&[..]`).
#[derive(Clone, Debug)]
pub enum HintValues {
    /// The same value for every axis ([`multiple_of`]) or the last axis ([`max_contiguous`]).
    One(u32),
    PerAxis(Vec<u32>),
}

impl From<u32> for HintValues {
    fn from(n: u32) -> Self {
        HintValues::One(n)
    }
}
impl From<usize> for HintValues {
    fn from(n: usize) -> Self {
        HintValues::One(n as u32)
    }
}
impl From<i32> for HintValues {
    fn from(n: i32) -> Self {
        HintValues::One(n.max(0) as u32)
    }
}
impl<const N: usize> From<[u32; N]> for HintValues {
    fn from(n: [u32; N]) -> Self {
        HintValues::PerAxis(n.to_vec())
    }
}
impl From<&[u32]> for HintValues {
    fn from(n: &[u32]) -> Self {
        HintValues::PerAxis(n.to_vec())
    }
}
impl From<Vec<u32>> for HintValues {
    fn from(n: Vec<u32>) -> Self {
        HintValues::PerAxis(n)
    }
}

fn hint_values(x: Tile, v: HintValues, what: &str, all_axes: bool, loc: Loc) -> Vec<u32> {
    let rank = x.shape().rank().max(1);
    let n = match v {
        HintValues::One(n) if all_axes => vec![n; rank],
        HintValues::One(n) => {
            let mut v = vec![1; rank];
            v[rank - 1] = n;
            v
        }
        HintValues::PerAxis(v) => v,
    };
    if n.len() != rank || n.contains(&0) {
        report(
            loc,
            format!(
                "{what}: {n:?} must hold one positive value per axis of {} ({rank})",
                x.ty()
            ),
        );
        return vec![1; rank];
    }
    n
}

/// The hint `op` of per-axis values `n` on `x` (see [`hint_values`]), marking `x` as hinted for
/// what is traced after it.
fn hint(
    x: Tile,
    n: HintValues,
    name: &str,
    all_axes: bool,
    op: impl FnOnce(Vec<u32>) -> Op,
    loc: Loc,
) -> Tile {
    let n = hint_values(x, n, name, all_axes, loc);
    let h = emit1(op(n), vec![x.value()], x.ty(), loc);
    super::mark_hinted(x.value(), h.value());
    h
}

/// Promises that the elements of `x` are multiples of `n` along each axis (`tl.multiple_of`):
/// for an offset tile, that the first element of each contiguous run is. `n` is one value for
/// every axis or one per axis (`multiple_of(offs, [16, 1])`). A hint: the GPU lowering uses
/// it for vector widths; nothing checks it. As in Triton the hint marks `x` itself: `x` read
/// after it (in the same block and the blocks nested in it) is the hinted value, so the result
/// may be ignored.
#[track_caller]
pub fn multiple_of(x: Tile, n: impl Into<HintValues>) -> Tile {
    hint(
        x,
        n.into(),
        "multiple_of",
        true,
        |n| Op::MultipleOf { n },
        Loc::caller(),
    )
}

/// Promises runs of `n` contiguous values (each the previous plus one) along each axis
/// (`tl.max_contiguous`). `n` is one value, for the last axis, or one per axis
/// (`max_contiguous(offs, [1, 64])`). A hint, unchecked; like [`multiple_of`] it marks `x`
/// for what is traced after it.
#[track_caller]
pub fn max_contiguous(x: Tile, n: impl Into<HintValues>) -> Tile {
    hint(
        x,
        n.into(),
        "max_contiguous",
        false,
        |n| Op::MaxContiguous { n },
        Loc::caller(),
    )
}

/// Promises runs of `n` equal values along each axis (`tl.max_constancy`). `n` is one value,
/// for the last axis, or one per axis (`max_constancy(rows, [16, 1])`). A hint, unchecked;
/// like [`multiple_of`] it marks `x` for what is traced after it.
#[track_caller]
pub fn max_constancy(x: Tile, n: impl Into<HintValues>) -> Tile {
    hint(
        x,
        n.into(),
        "max_constancy",
        false,
        |n| Op::MaxConstancy { n },
        Loc::caller(),
    )
}

/// Tells the compiler that every element of `cond` is true (`tl.assume`); a numeric `cond`
/// counts as true where nonzero. A hint for the GPU lowering, which emits nothing for it; the
/// interpreter checks it and fails with "assumption violated" and the line where it is false.
#[track_caller]
pub fn assume(cond: Tile) {
    let loc = Loc::caller();
    if cond.is_ptr() {
        report(loc, format!("assume needs a condition, got {}", cond.ty()));
    }
    let c = cond.cast_at(DType::I1, Default::default(), loc);
    emit(
        Op::Assume {
            message: format!("{}:{}", loc.file, loc.line),
        },
        vec![c.value()],
        &[],
        vec![],
        loc,
    );
}

/// Makes every thread of the program wait here until all have arrived (`tl.debug_barrier`):
/// `bar.sync 0` on the GPU. Memory writes of the program before it are visible to its
/// threads after it (a CTA-scope barrier). A no-op on the interpreter, which runs a program as
/// one thread in program order. See docs/semantics.md for ordering stores before atomics.
#[track_caller]
pub fn debug_barrier() {
    emit(Op::Barrier, vec![], &[], vec![], Loc::caller());
}

/// A pointer tile to elements of `T` at the addresses held by the i64 (or u64) tile `addr`
/// (Triton's `x.to(tl.pointer_type(T))`). On the GPU the addresses are device addresses; on
/// the interpreter they are the addresses [`Tile::to_int`] gives (see docs/semantics.md): an
/// integer that is not one is an error when the pointer is made.
#[track_caller]
pub fn int_to_ptr<T: Element>(addr: Tile) -> Tile {
    int_to_ptr_at(addr, T::DTYPE, Loc::caller())
}

pub(crate) fn int_to_ptr_at(addr: Tile, d: DType, loc: Loc) -> Tile {
    if addr.is_ptr() || !matches!(addr.dtype(), DType::I64 | DType::U64) {
        report(
            loc,
            format!("int_to_ptr needs an i64 or u64 tile, got {}", addr.ty()),
        );
        return addr;
    }
    emit1(
        Op::Bitcast,
        vec![addr.value()],
        TileType::ptr(d).with_shape(addr.shape()),
        loc,
    )
}

/// Loads the elements `ptr` points to where `mask` is true (`tl.load(ptr, mask)` without
/// `other`); masked-off elements read as zero on every backend (Triton leaves them
/// undefined, so a portable kernel does not read them).
#[track_caller]
pub fn load_masked(ptr: Tile, mask: Tile) -> Tile {
    load_at(
        ptr,
        LoadOptions {
            mask: Some(mask),
            ..Default::default()
        },
        Loc::caller(),
    )
}

/// `a` and `b` (of one shape, after broadcasting and promotion) stacked along a new last axis
/// of size 2 (`tl.join`): `join(a, b)[.., 0] == a`, `[.., 1] == b`.
#[track_caller]
pub fn join(a: impl IntoOperand, b: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let (a, b) = unify(a.into_operand(), b.into_operand(), "join", loc);
    join_at(a, b, loc)
}

fn join_at(a: Tile, b: Tile, loc: Loc) -> Tile {
    let rank = a.shape().rank();
    let mut dims: Vec<usize> = a.shape().dims().iter().map(|&d| d as usize).collect();
    dims.push(2);
    let Some(shape) = Shape::new(&dims) else {
        report(
            loc,
            format!("join: {} has the largest rank already", a.ty()),
        );
        return a;
    };
    let (ea, eb) = (a.expand_dims_at(rank, loc), b.expand_dims_at(rank, loc));
    let first = arange(0, 2).compare(crate::op::CmpOp::Eq, Operand::Int(0), loc);
    select_at(
        first.broadcast_at(shape, loc),
        Operand::Tile(ea.broadcast_at(shape, loc)),
        Operand::Tile(eb.broadcast_at(shape, loc)),
        loc,
    )
}

/// The two halves of a tile whose last axis has size 2 (`tl.split`), the inverse of [`join`]:
/// `(x[.., 0], x[.., 1])`, each without the last axis. Exact for every dtype (pointers too).
#[track_caller]
pub fn split(x: Tile) -> (Tile, Tile) {
    let loc = Loc::caller();
    let rank = x.shape().rank();
    if rank == 0 || x.shape().dim(rank - 1) != 2 {
        report(
            loc,
            format!(
                "split needs a tile whose last axis has size 2, got {}",
                x.ty()
            ),
        );
        return (x, x);
    }
    if x.is_ptr() {
        let (a, b) = split(x.ptr_to_int_at(loc));
        let d = x.dtype();
        return (int_to_ptr_at(a, d, loc), int_to_ptr_at(b, d, loc));
    }
    let d = x.dtype();
    let filler = if d.is_float() {
        Operand::Float(-0.0)
    } else {
        Operand::Int(0)
    };
    let idx = arange(0, 2);
    // Each half is a sum of its element and the identity (-0.0 keeps every float, -0.0 too).
    let half = |which: i64| {
        let keep = idx.compare(crate::op::CmpOp::Eq, Operand::Int(which), loc);
        let v = select_at(keep, Operand::Tile(x), filler, loc);
        reduce_at(v, ReduceOp::Sum, rank - 1, loc).cast_at(d, Default::default(), loc)
    };
    (half(0), half(1))
}

/// `a` and `b` interleaved along their last axis (`tl.interleave`): `[a0, b0, a1, b1, ..]`,
/// the last axis twice as long; `join` followed by a reshape.
#[track_caller]
pub fn interleave(a: impl IntoOperand, b: impl IntoOperand) -> Tile {
    let loc = Loc::caller();
    let (a, b) = unify(a.into_operand(), b.into_operand(), "interleave", loc);
    let j = join_at(a, b, loc);
    let mut dims: Vec<usize> = a.shape().dims().iter().map(|&d| d as usize).collect();
    match dims.last_mut() {
        Some(last) => *last *= 2,
        None => dims.push(2),
    }
    let shape = Shape::new(&dims).expect("rank of a");
    emit1(Op::Reshape, vec![j.value()], j.ty().with_shape(shape), loc)
}

/// `a` followed by `b` along the first axis (`tl.cat`): two tiles of one shape `[n, ..]`
/// (after broadcasting and promotion) give `[2n, ..]`, `a`'s rows first. Triton may reorder
/// the elements and so asks for `can_reorder=True`; here the order is always kept, so the
/// flag changes nothing (a port passes it as it is). `join`, the axis moved to the front, and a
/// reshape.
#[track_caller]
pub fn cat(a: impl IntoOperand, b: impl IntoOperand, can_reorder: bool) -> Tile {
    let _ = can_reorder;
    let loc = Loc::caller();
    let (a, b) = unify(a.into_operand(), b.into_operand(), "cat", loc);
    let rank = a.shape().rank();
    if rank == 0 {
        report(
            loc,
            format!("cat needs tiles of rank 1 or more, got {}", a.ty()),
        );
        return a;
    }
    let j = join_at(a, b, loc);
    if j.shape().rank() == rank {
        return j; // join reported the rank
    }
    let mut perm = vec![rank];
    perm.extend(0..rank);
    let front = j.permute_at(&perm, loc);
    let mut dims: Vec<usize> = a.shape().dims().iter().map(|&d| d as usize).collect();
    dims[0] *= 2;
    let shape = Shape::new(&dims).expect("rank of a");
    emit1(
        Op::Reshape,
        vec![front.value()],
        front.ty().with_shape(shape),
        loc,
    )
}

/// Prints `values` with `prefix` from every program (`tl.device_print`).
#[track_caller]
pub fn device_print(prefix: &str, values: &[Tile]) {
    print_at(prefix, values, false, Loc::caller());
}

/// [`device_print`] with each value's bit pattern in hexadecimal, zero-padded to its dtype's
/// width (`tl.device_print(prefix, .., hex=True)`): `0x3f800000` for an f32 1.0, `0xff` for
/// an i8 -1. Pointers print as they do without it.
#[track_caller]
pub fn device_print_hex(prefix: &str, values: &[Tile]) {
    print_at(prefix, values, true, Loc::caller());
}

fn print_at(prefix: &str, values: &[Tile], hex: bool, loc: Loc) {
    emit(
        Op::Print {
            prefix: prefix.to_string(),
            hex,
        },
        values.iter().map(|t| t.value()).collect(),
        &[],
        vec![],
        loc,
    );
}

/// Reports `message` at run time when any element of `cond` is false (`tl.device_assert`).
#[track_caller]
pub fn device_assert(cond: Tile, message: &str) {
    let loc = Loc::caller();
    if cond.dtype() != DType::I1 {
        report(
            loc,
            format!("device_assert needs an i1 tile, got {}", cond.ty()),
        );
    }
    emit(
        Op::Assert {
            message: message.to_string(),
        },
        vec![cond.value()],
        &[],
        vec![],
        loc,
    );
}

/// Fails the trace with `message` when the trace-time condition is false (`tl.static_assert`).
#[track_caller]
pub fn static_assert(cond: bool, message: &str) {
    if !cond {
        report(Loc::caller(), format!("static assertion failed: {message}"));
    }
}
