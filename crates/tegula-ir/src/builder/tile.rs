//! [`Tile`], the symbolic value a kernel body computes with, and its operators.

use super::{constant, defining_op, emit1, report, shape_at};
use crate::dtype::{DType, Element};
use crate::kernel::{Loc, Value};
use crate::op::{BinaryOp, CmpOp, Constant, Op, Rounding, UnaryOp};
use crate::types::{Elem, IntoShape, Shape, TileType};

/// A tile of static shape (rank 0 is a scalar) of numbers or pointers, during a trace.
///
/// Tiles are `Copy`: they name an SSA value of the kernel being traced.
#[derive(Clone, Copy, Debug)]
pub struct Tile {
    value: Value,
    ty: TileType,
}

/// An operand of a tile operation: a tile, or a Rust literal.
///
/// Literals are *weakly typed*, like Python literals in Triton: an integer literal takes the
/// dtype of the tile it meets (a float tile's too), a float literal takes the dtype of a float
/// tile and becomes f32 next to an integer tile.
#[derive(Clone, Copy, Debug)]
pub enum Operand {
    Tile(Tile),
    Int(i64),
    Float(f64),
    Bool(bool),
}

/// Conversion of tiles and Rust numbers into [`Operand`]s.
pub trait IntoOperand {
    fn into_operand(self) -> Operand;
}

impl IntoOperand for Tile {
    fn into_operand(self) -> Operand {
        Operand::Tile(self)
    }
}
impl IntoOperand for &Tile {
    fn into_operand(self) -> Operand {
        Operand::Tile(*self)
    }
}
impl IntoOperand for Operand {
    fn into_operand(self) -> Operand {
        self
    }
}
impl IntoOperand for bool {
    fn into_operand(self) -> Operand {
        Operand::Bool(self)
    }
}
macro_rules! int_operand {
    ($($t:ty),*) => {$(impl IntoOperand for $t {
        fn into_operand(self) -> Operand { Operand::Int(self as i64) }
    })*};
}
int_operand!(i8, i16, i32, i64, u8, u16, u32, u64, usize, isize);
impl IntoOperand for f32 {
    fn into_operand(self) -> Operand {
        Operand::Float(self as f64)
    }
}
impl IntoOperand for f64 {
    fn into_operand(self) -> Operand {
        Operand::Float(self)
    }
}

impl Operand {
    /// The dtype a literal takes next to a tile of dtype `other` (see [`Operand`]).
    fn literal_dtype(&self, other: DType) -> DType {
        match self {
            Operand::Tile(t) => t.dtype(),
            Operand::Bool(_) => {
                if other.is_bool() {
                    DType::I1
                } else {
                    other
                }
            }
            Operand::Int(_) => other,
            Operand::Float(_) => {
                if other.is_float() {
                    other
                } else {
                    DType::F32
                }
            }
        }
    }

    /// The dtype a literal has on its own: i32 (i64 when it does not fit), f32, i1.
    fn default_dtype(&self) -> DType {
        match self {
            Operand::Tile(t) => t.dtype(),
            Operand::Bool(_) => DType::I1,
            Operand::Int(v) if i32::try_from(*v).is_ok() => DType::I32,
            Operand::Int(_) => DType::I64,
            Operand::Float(_) => DType::F32,
        }
    }
}

/// True when the integer `v` is representable in `d`.
fn int_fits(v: i64, d: DType) -> bool {
    use DType::*;
    match d {
        I1 => v == 0 || v == 1,
        I8 => i8::try_from(v).is_ok(),
        I16 => i16::try_from(v).is_ok(),
        I32 => i32::try_from(v).is_ok(),
        I64 => true,
        U8 => u8::try_from(v).is_ok(),
        U16 => u16::try_from(v).is_ok(),
        U32 => u32::try_from(v).is_ok(),
        U64 => true, // bit pattern kept
        _ => true,   // floats take any integer, rounded
    }
}

/// Turns an operand into a tile of dtype `d` (a scalar for literals, a cast for tiles).
pub(crate) fn materialize(x: Operand, d: DType, loc: Loc) -> Tile {
    match x {
        Operand::Tile(t) => t.cast_at(d, Rounding::NearestEven, loc),
        Operand::Bool(b) => constant(Constant::Int(b as i64), d, Shape::SCALAR, loc),
        Operand::Int(v) => {
            if !int_fits(v, d) {
                report(loc, format!("integer literal {v} does not fit in {d}"));
            }
            if d.is_float() {
                constant(Constant::Float(v as f64), d, Shape::SCALAR, loc)
            } else {
                constant(Constant::Int(v), d, Shape::SCALAR, loc)
            }
        }
        Operand::Float(v) => {
            if d.is_float() {
                constant(Constant::Float(v), d, Shape::SCALAR, loc)
            } else {
                report(loc, format!("float literal {v} used where {d} is needed"));
                constant(Constant::Int(v as i64), d, Shape::SCALAR, loc)
            }
        }
    }
}

/// Turns an operand into a tile, typing literals by their default dtype.
pub(crate) fn to_tile(x: Operand, loc: Loc) -> Tile {
    let d = x.default_dtype();
    materialize(x, d, loc)
}

/// Brings two operands to one dtype (by promotion) and one shape (by broadcasting).
pub(crate) fn unify(a: Operand, b: Operand, what: &str, loc: Loc) -> (Tile, Tile) {
    let dtype = match (a, b) {
        (Operand::Tile(x), Operand::Tile(y)) => DType::promote(x.dtype(), y.dtype()),
        (Operand::Tile(x), lit) | (lit, Operand::Tile(x)) => lit.literal_dtype(x.dtype()),
        (x, y) => DType::promote(x.default_dtype(), y.default_dtype()),
    };
    let (ta, tb) = (materialize(a, dtype, loc), materialize(b, dtype, loc));
    broadcast_pair(ta, tb, what, loc)
}

/// Broadcasts two tiles to their common shape, reporting a mismatch.
pub(crate) fn broadcast_pair(a: Tile, b: Tile, what: &str, loc: Loc) -> (Tile, Tile) {
    match Shape::broadcast(a.shape(), b.shape()) {
        Some(s) => (a.broadcast_at(s, loc), b.broadcast_at(s, loc)),
        None if broadcastable(a.shape(), b.shape()) => {
            report(
                loc,
                format!(
                    "{what} of {} and {}: the broadcast tile has more than {} (2^32 - 1) \
                     elements",
                    a.ty,
                    b.ty,
                    crate::types::MAX_TILE_ELEMENTS
                ),
            );
            (a, a)
        }
        None => {
            report(
                loc,
                format!(
                    "shape mismatch in {what}: {} and {} do not broadcast",
                    a.ty, b.ty
                ),
            );
            (a, a)
        }
    }
}

/// Whether numpy's rules pair every axis of `a` and `b` (whatever the size of the result).
fn broadcastable(a: Shape, b: Shape) -> bool {
    let (da, db) = (a.dims(), b.dims());
    da.iter()
        .rev()
        .zip(db.iter().rev())
        .all(|(&x, &y)| x == y || x == 1 || y == 1)
}

/// `a op b` after promotion and broadcasting; pointer arithmetic for `ptr + int`.
pub(crate) fn binary(op: BinaryOp, a: Operand, b: Operand, loc: Loc) -> Tile {
    if let Some(t) = ptr_arith(op, a, b, loc) {
        return t;
    }
    let (x, y) = unify(a, b, op.name(), loc);
    let d = x.dtype();
    if x.is_ptr() {
        report(
            loc,
            format!("`{}` is not defined on pointers ({})", op.name(), x.ty),
        );
    } else if op.int_only() && d.is_float() {
        report(
            loc,
            format!("`{}` needs integer operands, got {}", op.name(), x.ty),
        );
    } else if op.int_bits().is_some_and(|b| !b.contains(&d.bits())) {
        report(
            loc,
            format!(
                "`{}` needs {} integers, got {}",
                op.name(),
                crate::op::width_words(op.int_bits().unwrap_or(&[])),
                x.ty
            ),
        );
    } else if op.float_only() && !d.is_float() {
        report(
            loc,
            format!(
                "`{}` needs float operands, got {} (convert with `.to::<f32>()`)",
                op.name(),
                x.ty
            ),
        );
    }
    emit1(Op::Binary(op), vec![x.value, y.value], x.ty, loc)
}

/// `ptr + offsets`, `offsets + ptr` and `ptr - offsets`.
fn ptr_arith(op: BinaryOp, a: Operand, b: Operand, loc: Loc) -> Option<Tile> {
    let is_ptr = |o: &Operand| matches!(o, Operand::Tile(t) if t.is_ptr());
    let (ptr, off, negate) = match (op, is_ptr(&a), is_ptr(&b)) {
        (BinaryOp::Add, true, false) => (a, b, false),
        (BinaryOp::Add, false, true) => (b, a, false),
        (BinaryOp::Sub, true, false) => (a, b, true),
        (_, false, false) => return None,
        _ => {
            report(loc, format!("`{}` is not defined on pointers", op.name()));
            return Some(match a {
                Operand::Tile(t) if t.is_ptr() => t,
                _ => match b {
                    Operand::Tile(t) => t,
                    _ => unreachable!("one side is a pointer tile"),
                },
            });
        }
    };
    let Operand::Tile(ptr) = ptr else {
        unreachable!()
    };
    let mut off = match off {
        Operand::Tile(t) => t,
        lit => materialize(lit, lit.default_dtype(), loc),
    };
    if !off.dtype().is_int() || off.dtype().is_bool() {
        report(
            loc,
            format!("pointer offsets must be integers, got {}", off.ty),
        );
    }
    if negate {
        off = off.unary_at(UnaryOp::Neg, loc);
    }
    let (p, o) = broadcast_pair(ptr, off, "pointer arithmetic", loc);
    Some(emit1(Op::AddPtr, vec![p.value, o.value], p.ty, loc))
}

impl Tile {
    pub(crate) fn from_raw(value: Value, ty: TileType) -> Tile {
        Tile { value, ty }
    }

    /// The IR value this tile names.
    pub fn value(&self) -> Value {
        self.value
    }

    pub fn ty(&self) -> TileType {
        self.ty
    }

    /// The element dtype (the pointee's for pointer tiles).
    pub fn dtype(&self) -> DType {
        self.ty.dtype()
    }

    pub fn shape(&self) -> Shape {
        self.ty.shape
    }

    pub fn is_ptr(&self) -> bool {
        self.ty.is_ptr()
    }

    pub(crate) fn unary_at(self, op: UnaryOp, loc: Loc) -> Tile {
        let d = self.dtype();
        if self.is_ptr() {
            report(loc, format!("`{}` is not defined on pointers", op.name()));
        } else if op.float_only() && !d.is_float() {
            report(
                loc,
                format!("`{}` needs a float operand, got {}", op.name(), self.ty),
            );
        } else if op.int_only() && d.is_float() {
            report(
                loc,
                format!("`{}` needs an integer operand, got {}", op.name(), self.ty),
            );
        } else if op.int_bits().is_some_and(|b| !b.contains(&d.bits())) {
            report(
                loc,
                format!(
                    "`{}` needs a {} integer, got {}",
                    op.name(),
                    crate::op::width_words(op.int_bits().unwrap_or(&[])),
                    self.ty
                ),
            );
        }
        emit1(Op::Unary(op), vec![self.value], self.ty, loc)
    }

    pub(crate) fn cast_at(self, to: DType, rounding: Rounding, loc: Loc) -> Tile {
        if self.is_ptr() {
            report(
                loc,
                format!("cannot cast the pointer tile {} to {to}", self.ty),
            );
            return self;
        }
        if self.dtype() == to {
            return self;
        }
        if to.is_fp8() && rounding != Rounding::NearestEven {
            report(
                loc,
                format!(
                    "a cast into {to} rounds to nearest only (PTX's `cvt.rn.satfinite`), not {}",
                    rounding.name()
                ),
            );
            return self;
        }
        emit1(
            Op::Cast { rounding },
            vec![self.value],
            self.ty.with_elem(Elem::Scalar(to)),
            loc,
        )
    }

    pub(crate) fn broadcast_at(self, shape: Shape, loc: Loc) -> Tile {
        if self.shape() == shape {
            return self;
        }
        if let Some(Op::Const(c)) = defining_op(self.value) {
            return emit1(Op::Const(c), vec![], self.ty.with_shape(shape), loc);
        }
        if self.shape().is_scalar() {
            return emit1(Op::Splat, vec![self.value], self.ty.with_shape(shape), loc);
        }
        let mut t = self;
        while t.shape().rank() < shape.rank() {
            t = t.expand_dims_at(0, loc);
        }
        if t.shape() == shape {
            return t;
        }
        let ok = t
            .shape()
            .dims()
            .iter()
            .zip(shape.dims())
            .all(|(&a, &b)| a == b || a == 1);
        if !ok {
            report(
                loc,
                format!("cannot broadcast {} to shape {shape}", self.ty),
            );
            return self;
        }
        emit1(Op::Broadcast, vec![t.value], t.ty.with_shape(shape), loc)
    }

    pub(crate) fn expand_dims_at(self, axis: usize, loc: Loc) -> Tile {
        match self.shape().with_axis(axis) {
            Some(s) => emit1(
                Op::ExpandDims { axis: axis as u8 },
                vec![self.value],
                self.ty.with_shape(s),
                loc,
            ),
            None => {
                report(loc, format!("cannot insert axis {axis} into {}", self.ty));
                self
            }
        }
    }

    pub(crate) fn compare(self, op: CmpOp, other: Operand, loc: Loc) -> Tile {
        let (x, y) = unify(Operand::Tile(self), other, op.name(), loc);
        emit1(
            Op::Compare(op),
            vec![x.value, y.value],
            x.ty.with_elem(Elem::Scalar(DType::I1)),
            loc,
        )
    }

    /// Converts to the dtype of `T` (`x.to::<f32>()`), rounding to nearest even.
    #[track_caller]
    pub fn to<T: Element>(self) -> Tile {
        self.cast_at(T::DTYPE, Rounding::NearestEven, Loc::caller())
    }

    /// Converts to `dtype`, rounding to nearest even.
    #[track_caller]
    pub fn cast(self, dtype: DType) -> Tile {
        self.cast_at(dtype, Rounding::NearestEven, Loc::caller())
    }

    /// Converts to `dtype` with an explicit rounding of float results.
    #[track_caller]
    pub fn cast_rounded(self, dtype: DType, rounding: Rounding) -> Tile {
        self.cast_at(dtype, rounding, Loc::caller())
    }

    /// Reinterprets the bits as `T`, which must have the same width.
    #[track_caller]
    pub fn bitcast<T: Element>(self) -> Tile {
        self.bitcast_at(T::DTYPE, Loc::caller())
    }

    pub(crate) fn bitcast_at(self, to: DType, loc: Loc) -> Tile {
        if self.is_ptr() || self.dtype().bits() != to.bits() {
            report(loc, format!("cannot bitcast {} to {to}", self.ty));
            return self;
        }
        if self.dtype() == to {
            return self;
        }
        emit1(
            Op::Bitcast,
            vec![self.value],
            self.ty.with_elem(Elem::Scalar(to)),
            loc,
        )
    }

    /// The addresses of a pointer tile as an i64 tile (Triton's `ptr.to(tl.int64)`): device
    /// addresses on the GPU, the interpreter's addresses there (docs/semantics.md); in both,
    /// the difference of two addresses into one buffer is their distance in bytes.
    #[track_caller]
    pub fn to_int(self) -> Tile {
        self.ptr_to_int_at(Loc::caller())
    }

    pub(crate) fn ptr_to_int_at(self, loc: Loc) -> Tile {
        if !self.is_ptr() {
            report(loc, format!("to_int needs a pointer tile, got {}", self.ty));
            return self;
        }
        emit1(
            Op::Bitcast,
            vec![self.value],
            self.ty.with_elem(Elem::Scalar(DType::I64)),
            loc,
        )
    }

    /// The same addresses as pointers to `T` (Triton's `ptr.to(tl.pointer_type(T))`).
    #[track_caller]
    pub fn cast_ptr<T: Element>(self) -> Tile {
        let loc = Loc::caller();
        super::ops::int_to_ptr_at(self.ptr_to_int_at(loc), T::DTYPE, loc)
    }

    /// `self < other`, elementwise (an i1 tile).
    #[track_caller]
    pub fn lt(self, other: impl IntoOperand) -> Tile {
        self.compare(CmpOp::Lt, other.into_operand(), Loc::caller())
    }
    #[track_caller]
    pub fn le(self, other: impl IntoOperand) -> Tile {
        self.compare(CmpOp::Le, other.into_operand(), Loc::caller())
    }
    #[track_caller]
    pub fn gt(self, other: impl IntoOperand) -> Tile {
        self.compare(CmpOp::Gt, other.into_operand(), Loc::caller())
    }
    #[track_caller]
    pub fn ge(self, other: impl IntoOperand) -> Tile {
        self.compare(CmpOp::Ge, other.into_operand(), Loc::caller())
    }
    #[track_caller]
    #[allow(clippy::should_implement_trait)]
    pub fn eq(self, other: impl IntoOperand) -> Tile {
        self.compare(CmpOp::Eq, other.into_operand(), Loc::caller())
    }
    #[track_caller]
    #[allow(clippy::should_implement_trait)]
    pub fn ne(self, other: impl IntoOperand) -> Tile {
        self.compare(CmpOp::Ne, other.into_operand(), Loc::caller())
    }

    /// Inserts a size-1 axis at `axis` (Triton's `x[None, :]` is `x.expand_dims(0)`).
    #[track_caller]
    pub fn expand_dims(self, axis: usize) -> Tile {
        self.expand_dims_at(axis, Loc::caller())
    }

    /// A 1-D tile as a column, `[n] -> [n, 1]` (Triton's `x[:, None]`).
    #[track_caller]
    pub fn col(self) -> Tile {
        self.expand_dims_at(self.shape().rank(), Loc::caller())
    }

    /// A 1-D tile as a row, `[n] -> [1, n]` (Triton's `x[None, :]`).
    #[track_caller]
    pub fn row(self) -> Tile {
        self.expand_dims_at(0, Loc::caller())
    }

    /// Broadcasts to `shape` (size-1 axes stretch; missing leading axes are added).
    #[track_caller]
    pub fn broadcast_to(self, shape: impl IntoShape) -> Tile {
        let loc = Loc::caller();
        self.broadcast_at(shape_at(shape, loc), loc)
    }

    /// The same elements (row-major order) in another shape of equal size.
    #[track_caller]
    pub fn reshape(self, shape: impl IntoShape) -> Tile {
        let loc = Loc::caller();
        let shape = match shape.into_shape() {
            Ok(s) => s,
            Err(message) => {
                report(loc, message);
                return self;
            }
        };
        if shape.numel() != self.shape().numel() {
            report(
                loc,
                format!("cannot reshape {} to {shape}: sizes differ", self.ty),
            );
            return self;
        }
        emit1(
            Op::Reshape,
            vec![self.value],
            self.ty.with_shape(shape),
            loc,
        )
    }

    /// Reorders axes: result axis `i` is axis `perm[i]` of `self`.
    #[track_caller]
    pub fn permute(self, perm: &[usize]) -> Tile {
        self.permute_at(perm, Loc::caller())
    }

    pub(crate) fn permute_at(self, perm: &[usize], loc: Loc) -> Tile {
        let rank = self.shape().rank();
        let mut seen = [false; crate::types::MAX_RANK];
        let valid = perm.len() == rank
            && perm
                .iter()
                .all(|&p| p < rank && !std::mem::replace(&mut seen[p], true));
        if !valid {
            report(
                loc,
                format!("{perm:?} is not a permutation of the axes of {}", self.ty),
            );
            return self;
        }
        let dims: Vec<usize> = perm.iter().map(|&p| self.shape().dim(p)).collect();
        let shape = Shape::new(&dims).expect("same rank");
        emit1(
            Op::Permute {
                perm: perm.iter().map(|&p| p as u8).collect(),
            },
            vec![self.value],
            self.ty.with_shape(shape),
            loc,
        )
    }

    /// Transpose of a 2-D tile (Triton's `tl.trans`); reverses the axes of any rank.
    #[track_caller]
    pub fn trans(self) -> Tile {
        let perm: Vec<usize> = (0..self.shape().rank()).rev().collect();
        self.permute(&perm)
    }
}

macro_rules! binary_operator {
    ($trait:ident, $method:ident, $op:expr, [$($lit:ty),*]) => {
        impl<R: IntoOperand> std::ops::$trait<R> for Tile {
            type Output = Tile;
            #[track_caller]
            fn $method(self, rhs: R) -> Tile {
                binary($op, Operand::Tile(self), rhs.into_operand(), Loc::caller())
            }
        }
        impl<R: IntoOperand> std::ops::$trait<R> for &Tile {
            type Output = Tile;
            #[track_caller]
            fn $method(self, rhs: R) -> Tile {
                binary($op, Operand::Tile(*self), rhs.into_operand(), Loc::caller())
            }
        }
        $(
        impl std::ops::$trait<Tile> for $lit {
            type Output = Tile;
            #[track_caller]
            fn $method(self, rhs: Tile) -> Tile {
                binary($op, self.into_operand(), Operand::Tile(rhs), Loc::caller())
            }
        }
        )*
    };
}

macro_rules! assign_operator {
    ($trait:ident, $method:ident, $op:expr) => {
        impl<R: IntoOperand> std::ops::$trait<R> for Tile {
            #[track_caller]
            fn $method(&mut self, rhs: R) {
                *self = binary($op, Operand::Tile(*self), rhs.into_operand(), Loc::caller());
            }
        }
    };
}

binary_operator!(
    Add,
    add,
    BinaryOp::Add,
    [i32, i64, u32, u64, usize, f32, f64]
);
binary_operator!(
    Sub,
    sub,
    BinaryOp::Sub,
    [i32, i64, u32, u64, usize, f32, f64]
);
binary_operator!(
    Mul,
    mul,
    BinaryOp::Mul,
    [i32, i64, u32, u64, usize, f32, f64]
);
binary_operator!(
    Div,
    div,
    BinaryOp::Div,
    [i32, i64, u32, u64, usize, f32, f64]
);
binary_operator!(
    Rem,
    rem,
    BinaryOp::Rem,
    [i32, i64, u32, u64, usize, f32, f64]
);
binary_operator!(BitAnd, bitand, BinaryOp::And, [i32, i64, u32, u64, bool]);
binary_operator!(BitOr, bitor, BinaryOp::Or, [i32, i64, u32, u64, bool]);
binary_operator!(BitXor, bitxor, BinaryOp::Xor, [i32, i64, u32, u64, bool]);
binary_operator!(Shl, shl, BinaryOp::Shl, [i32, i64, u32, u64]);
binary_operator!(Shr, shr, BinaryOp::Shr, [i32, i64, u32, u64]);
assign_operator!(AddAssign, add_assign, BinaryOp::Add);
assign_operator!(SubAssign, sub_assign, BinaryOp::Sub);
assign_operator!(MulAssign, mul_assign, BinaryOp::Mul);
assign_operator!(DivAssign, div_assign, BinaryOp::Div);
assign_operator!(RemAssign, rem_assign, BinaryOp::Rem);
assign_operator!(BitAndAssign, bitand_assign, BinaryOp::And);
assign_operator!(BitOrAssign, bitor_assign, BinaryOp::Or);
assign_operator!(BitXorAssign, bitxor_assign, BinaryOp::Xor);
assign_operator!(ShlAssign, shl_assign, BinaryOp::Shl);
assign_operator!(ShrAssign, shr_assign, BinaryOp::Shr);

impl std::ops::Neg for Tile {
    type Output = Tile;
    #[track_caller]
    fn neg(self) -> Tile {
        self.unary_at(UnaryOp::Neg, Loc::caller())
    }
}

impl std::ops::Not for Tile {
    type Output = Tile;
    #[track_caller]
    fn not(self) -> Tile {
        self.unary_at(UnaryOp::Not, Loc::caller())
    }
}
