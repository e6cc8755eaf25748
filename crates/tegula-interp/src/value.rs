//! Run-time tile values: flat row-major vectors, one representation per kind of element.
//!
//! The dtype and shape live in the IR (`Kernel::ty`), not here, so reshapes and hints are free.
//! Floats are f64 holding values exactly representable in their dtype (rounded after every op);
//! integers are i64 wrapped to their width (sign-extended when signed, zero-extended when
//! unsigned, u64 as its bit pattern, i1 as 0/1); pointers are (argument, element offset) pairs.

use tegula_ir::MAX_RANK;

/// One pointer element: the pointer argument it derives from (an index into the run's views)
/// and an element offset from the start of that argument's view (which may be anything until
/// the pointer is dereferenced).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ptr {
    pub view: u32,
    pub off: i64,
}

#[derive(Clone, Debug)]
pub(crate) enum Data {
    F(Vec<f64>),
    I(Vec<i64>),
    P(Vec<Ptr>),
}

impl Data {
    pub fn len(&self) -> usize {
        match self {
            Data::F(v) => v.len(),
            Data::I(v) => v.len(),
            Data::P(v) => v.len(),
        }
    }

    /// `n` copies of the single element of `self` (a scalar).
    pub fn splat(&self, n: usize) -> Data {
        match self {
            Data::F(v) => Data::F(vec![v[0]; n]),
            Data::I(v) => Data::I(vec![v[0]; n]),
            Data::P(v) => Data::P(vec![v[0]; n]),
        }
    }

    /// The elements at `strides` over an output of `dims` (see [`strided_gather`]).
    pub fn gather(&self, dims: &[usize], strides: &[usize]) -> Data {
        match self {
            Data::F(v) => Data::F(strided_gather(v, dims, strides)),
            Data::I(v) => Data::I(strided_gather(v, dims, strides)),
            Data::P(v) => Data::P(strided_gather(v, dims, strides)),
        }
    }
}

/// Row-major strides of `dims`.
pub(crate) fn row_major(dims: &[usize]) -> Vec<usize> {
    let mut st = vec![0; dims.len()];
    let mut acc = 1;
    for ax in (0..dims.len()).rev() {
        st[ax] = acc;
        acc *= dims[ax];
    }
    st
}

/// `out[i0, .., ir] = src[sum ik * strides[k]]` over an output of `dims` in row-major order:
/// broadcasts (stride 0) and permutations (permuted strides) in one loop nest.
pub(crate) fn strided_gather<T: Copy>(src: &[T], dims: &[usize], strides: &[usize]) -> Vec<T> {
    // Pad to MAX_RANK leading unit axes so one fixed loop nest serves every rank.
    let pad = MAX_RANK - dims.len();
    let mut d = [1usize; MAX_RANK];
    let mut s = [0usize; MAX_RANK];
    d[pad..].copy_from_slice(dims);
    s[pad..].copy_from_slice(strides);
    let mut out = Vec::with_capacity(d.iter().product());
    for i0 in 0..d[0] {
        for i1 in 0..d[1] {
            for i2 in 0..d[2] {
                let base = i0 * s[0] + i1 * s[1] + i2 * s[2];
                if s[3] == 1 {
                    out.extend_from_slice(&src[base..base + d[3]]);
                } else {
                    out.extend((0..d[3]).map(|i3| src[base + i3 * s[3]]));
                }
            }
        }
    }
    out
}
