//! Static tile shapes and tile types.

use crate::dtype::DType;
use std::fmt;

/// Largest tile rank.
pub const MAX_RANK: usize = 4;

/// The most elements a tile may hold: each dimension and the element count are below 2^32
/// (the GPU lowering indexes tile elements with 32-bit integers). A larger shape is a trace
/// error at the line that asked for it.
pub const MAX_TILE_ELEMENTS: u64 = u32::MAX as u64;

/// A static tile shape of rank 0 (a scalar) to [`MAX_RANK`]. `Copy`, so tiles can be too.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    rank: u8,
    dims: [u32; MAX_RANK],
}

impl Shape {
    pub const SCALAR: Shape = Shape {
        rank: 0,
        dims: [0; MAX_RANK],
    };

    /// `None` when the rank exceeds [`MAX_RANK`], or the element count exceeds
    /// [`MAX_TILE_ELEMENTS`] (so does every dimension). [`Shape::check`] says which.
    pub fn new(dims: &[usize]) -> Option<Shape> {
        Shape::check(dims).ok()
    }

    /// [`Shape::new`] with the reason for a refusal, in words for a trace error.
    pub fn check(dims: &[usize]) -> Result<Shape, String> {
        if dims.len() > MAX_RANK {
            return Err(format!(
                "a tile has at most {MAX_RANK} dimensions, got {dims:?}"
            ));
        }
        let mut s = Shape {
            rank: dims.len() as u8,
            dims: [0; MAX_RANK],
        };
        let mut numel: u64 = 1;
        for (slot, &d) in s.dims.iter_mut().zip(dims) {
            let fits = u64::try_from(d)
                .ok()
                .filter(|&d| d <= MAX_TILE_ELEMENTS)
                .and_then(|d| numel.checked_mul(d))
                .filter(|&n| n <= MAX_TILE_ELEMENTS);
            match fits {
                Some(n) => numel = n,
                None => {
                    return Err(format!(
                        "a tile of shape {dims:?} has more than {MAX_TILE_ELEMENTS} (2^32 - 1) \
                         elements"
                    ))
                }
            }
            *slot = d as u32;
        }
        Ok(s)
    }

    pub fn rank(&self) -> usize {
        self.rank as usize
    }

    pub fn dims(&self) -> &[u32] {
        &self.dims[..self.rank()]
    }

    pub fn dim(&self, axis: usize) -> usize {
        self.dims()[axis] as usize
    }

    /// Number of elements (1 for a scalar).
    pub fn numel(&self) -> usize {
        self.dims().iter().map(|&d| d as usize).product()
    }

    pub fn is_scalar(&self) -> bool {
        self.rank == 0
    }

    /// Row-major strides in elements.
    pub fn strides(&self) -> [usize; MAX_RANK] {
        let mut st = [0; MAX_RANK];
        let mut acc = 1;
        for ax in (0..self.rank()).rev() {
            st[ax] = acc;
            acc *= self.dims[ax] as usize;
        }
        st
    }

    /// Shape with `axis` removed (the shape of a reduction result).
    pub fn without_axis(&self, axis: usize) -> Shape {
        let mut v: Vec<usize> = self.dims().iter().map(|&d| d as usize).collect();
        v.remove(axis);
        Shape::new(&v).expect("removing an axis keeps the rank in range")
    }

    /// Shape with a size-1 axis inserted at `axis`; `None` past [`MAX_RANK`].
    pub fn with_axis(&self, axis: usize) -> Option<Shape> {
        let mut v: Vec<usize> = self.dims().iter().map(|&d| d as usize).collect();
        if axis > v.len() {
            return None;
        }
        v.insert(axis, 1);
        Shape::new(&v)
    }

    /// The shape two operands broadcast to (numpy rules: align trailing axes, size 1 stretches).
    pub fn broadcast(a: Shape, b: Shape) -> Option<Shape> {
        let rank = a.rank().max(b.rank());
        let mut out = [0usize; MAX_RANK];
        // Axis `i` of the result lines up with the operand's axis `i - (rank - operand rank)`.
        let dim_at = |s: &Shape, i: usize| {
            let pad = rank - s.rank();
            if i < pad {
                1
            } else {
                s.dims[i - pad]
            }
        };
        for (i, slot) in out.iter_mut().enumerate().take(rank) {
            *slot = match (dim_at(&a, i), dim_at(&b, i)) {
                (x, y) if x == y => x as usize,
                (1, y) => y as usize,
                (x, 1) => x as usize,
                _ => return None,
            };
        }
        Shape::new(&out[..rank])
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.dims().iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

macro_rules! shape_from_array {
    ($($n:literal),*) => {$(
        /// # Panics
        /// When the shape holds more than [`MAX_TILE_ELEMENTS`] elements. The builder's
        /// functions take [`IntoShape`] instead, which makes that a trace error.
        impl From<[usize; $n]> for Shape {
            #[track_caller]
            fn from(d: [usize; $n]) -> Shape {
                match Shape::check(&d) {
                    Ok(s) => s,
                    Err(e) => panic!("{e}"),
                }
            }
        }
    )*};
}
shape_from_array!(0, 1, 2, 3, 4);

/// A tile shape as the builder's functions take it (`full`, `zeros`, `broadcast_to`,
/// `reshape`): a [`Shape`] or an array of `usize`. The conversion is checked where the kernel
/// asks for it: a shape of more than [`MAX_RANK`] axes or [`MAX_TILE_ELEMENTS`] elements is a
/// trace error at that line, not a panic.
pub trait IntoShape {
    /// The shape, or why it is not one.
    fn into_shape(self) -> Result<Shape, String>;
}

impl IntoShape for Shape {
    fn into_shape(self) -> Result<Shape, String> {
        Ok(self)
    }
}

impl<const N: usize> IntoShape for [usize; N] {
    fn into_shape(self) -> Result<Shape, String> {
        Shape::check(&self)
    }
}

impl IntoShape for &[usize] {
    fn into_shape(self) -> Result<Shape, String> {
        Shape::check(self)
    }
}

/// What one element of a tile is: a number, or a pointer to numbers in global memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elem {
    Scalar(DType),
    Ptr(DType),
}

impl Elem {
    /// The dtype of the value, or of the pointee for pointers.
    pub fn dtype(self) -> DType {
        match self {
            Elem::Scalar(d) | Elem::Ptr(d) => d,
        }
    }

    pub fn is_ptr(self) -> bool {
        matches!(self, Elem::Ptr(_))
    }
}

impl fmt::Display for Elem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Elem::Scalar(d) => write!(f, "{d}"),
            Elem::Ptr(d) => write!(f, "ptr<{d}>"),
        }
    }
}

/// The type of an IR value: an element kind and a static shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TileType {
    pub elem: Elem,
    pub shape: Shape,
}

impl TileType {
    pub fn new(elem: Elem, shape: Shape) -> TileType {
        TileType { elem, shape }
    }

    pub fn scalar(d: DType) -> TileType {
        TileType::new(Elem::Scalar(d), Shape::SCALAR)
    }

    pub fn ptr(d: DType) -> TileType {
        TileType::new(Elem::Ptr(d), Shape::SCALAR)
    }

    pub fn tile(d: DType, shape: Shape) -> TileType {
        TileType::new(Elem::Scalar(d), shape)
    }

    pub fn with_shape(self, shape: Shape) -> TileType {
        TileType { shape, ..self }
    }

    pub fn with_elem(self, elem: Elem) -> TileType {
        TileType { elem, ..self }
    }

    pub fn dtype(&self) -> DType {
        self.elem.dtype()
    }

    pub fn is_ptr(&self) -> bool {
        self.elem.is_ptr()
    }

    pub fn numel(&self) -> usize {
        self.shape.numel()
    }
}

/// `f32` for a scalar, `f32[16, 64]` for a tile, `ptr<f16>[128]` for a pointer tile.
impl fmt::Display for TileType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.elem)?;
        if !self.shape.is_scalar() {
            write!(f, "{}", self.shape)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_rules() {
        let s = |d: &[usize]| Shape::new(d).unwrap();
        assert_eq!(
            Shape::broadcast(s(&[16, 1]), s(&[1, 32])),
            Some(s(&[16, 32]))
        );
        assert_eq!(Shape::broadcast(s(&[16, 32]), s(&[32])), Some(s(&[16, 32])));
        assert_eq!(Shape::broadcast(Shape::SCALAR, s(&[8])), Some(s(&[8])));
        assert_eq!(Shape::broadcast(s(&[16]), s(&[32])), None);
    }

    #[test]
    fn display() {
        let t = TileType::tile(DType::F32, Shape::from([16, 64]));
        assert_eq!(t.to_string(), "f32[16, 64]");
        assert_eq!(TileType::ptr(DType::F16).to_string(), "ptr<f16>");
        assert_eq!(Shape::new(&[1, 2, 3, 4, 5]), None);
    }

    #[test]
    fn element_counts_of_two_to_the_32_are_refused() {
        assert!(Shape::new(&[1 << 16, (1 << 16) - 1]).is_some());
        assert_eq!(Shape::new(&[1 << 16, 1 << 16]), None);
        assert_eq!(Shape::new(&[1 << 32]), None);
        assert_eq!(Shape::new(&[usize::MAX, 2]), None);
        // A zero dimension does not excuse a dimension that is too large by itself.
        assert_eq!(Shape::new(&[0, 1 << 32]), None);
        assert!(Shape::check(&[1 << 20, 1 << 20])
            .unwrap_err()
            .contains("2^32 - 1"));
    }
}
