//! Static tile shapes and tile types.

use crate::dtype::DType;
use std::fmt;

/// Largest tile rank.
pub const MAX_RANK: usize = 4;

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

    /// `None` when the rank exceeds [`MAX_RANK`] or a dimension does not fit in `u32`.
    pub fn new(dims: &[usize]) -> Option<Shape> {
        if dims.len() > MAX_RANK {
            return None;
        }
        let mut s = Shape {
            rank: dims.len() as u8,
            dims: [0; MAX_RANK],
        };
        for (slot, &d) in s.dims.iter_mut().zip(dims) {
            *slot = u32::try_from(d).ok()?;
        }
        Some(s)
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
        impl From<[usize; $n]> for Shape {
            fn from(d: [usize; $n]) -> Shape {
                Shape::new(&d).expect("dimension too large for u32")
            }
        }
    )*};
}
shape_from_array!(0, 1, 2, 3, 4);

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
}
