//! Distributed layouts: which thread holds which tile element in which register.
//!
//! A [`Layout`] is a blocked layout (Triton's sizePerThread / threadsPerWarp / warpsPerCTA /
//! order) over a *parent* rank, plus a set of parent axes that are sliced away (the layout of a
//! reduction result). Its parameters do not depend on the shape; the shape of the value it
//! describes is given separately, with sliced axes counting as size 1.
//!
//! For parent axis `d` of size `P` (all powers of two), thread position
//! `pos = lane_d + tpw_d * warp_d`, and register counter `c` (`rep = c / spt`, `j = c % spt`):
//!
//! ```text
//! index_d = rep * (spt * tpw * wpc) + ((pos * spt) mod P) + j
//! ```
//!
//! so every element index is a per-thread *base* (computed once, from `%tid.x`) plus a per-register
//! *constant*. On an *interleaved* axis a thread's `spt` elements are `tpw` apart, with the other
//! lanes' elements in between (the rows `g` and `g + 8` of an mma fragment):
//!
//! ```text
//! index_d = rep * (spt * tpw * wpc) + j * tpw + ((lane_d + spt * tpw * warp_d) mod P)
//! ```
//!
//! The tensor-core layouts built on this are in [`crate::mma_layout`]. When the threads along an axis cover more than `P`, the positions wrap and several
//! threads hold copies of an element (replication); stores and atomics then run only on the
//! *owner* copy (`pos * spt < P` on every axis).

use tegula_ir::Shape;

/// A blocked layout over `spt.len()` parent axes with some axes sliced away.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    /// Contiguous elements per thread, per parent axis.
    pub spt: Vec<u32>,
    /// Threads of a warp along each parent axis (product 32).
    pub tpw: Vec<u32>,
    /// Warps along each parent axis (product num_warps).
    pub wpc: Vec<u32>,
    /// Parent axes from fastest to slowest varying (registers, lanes and warps alike).
    pub order: Vec<usize>,
    /// Parent axes absent from the value (sorted).
    pub sliced: Vec<usize>,
    /// Per parent axis: a thread's `spt` elements are `tpw` apart (lanes in between) rather than
    /// contiguous. Only the mma layouts set it.
    pub interleaved: Vec<bool>,
}

/// How the registers of a value in a layout are numbered.
#[derive(Clone, Debug, PartialEq)]
pub struct RegGeometry {
    /// Parent shape (sliced axes are 1).
    pub parent: Vec<u32>,
    /// Register counters per parent axis.
    pub n: Vec<usize>,
    /// Register index multiplier per parent axis.
    pub mult: Vec<usize>,
    pub count: usize,
    spt_eff: Vec<u32>,
    cover: Vec<u32>,
    /// Distance between a thread's consecutive elements within a repetition (1 or `tpw`).
    gap: Vec<u32>,
}

impl RegGeometry {
    /// The counters of register `i`, per parent axis.
    pub fn coords(&self, i: usize) -> Vec<usize> {
        self.n
            .iter()
            .zip(&self.mult)
            .map(|(&n, &m)| (i / m) % n)
            .collect()
    }

    /// The register of this (source) geometry that a broadcast copies into the destination
    /// register with counters `dst`: axes the source holds once (one counter) stay at 0.
    pub fn broadcast_source(&self, dst: &[usize]) -> usize {
        let c: Vec<usize> = dst
            .iter()
            .zip(&self.n)
            .map(|(&c, &sn)| if sn == 1 { 0 } else { c })
            .collect();
        self.index(&c)
    }

    /// The register with counters `c`.
    pub fn index(&self, c: &[usize]) -> usize {
        c.iter().zip(&self.mult).map(|(&c, &m)| c * m).sum()
    }

    /// The constant part of the element index along parent axis `d` for counter `c`.
    pub fn const_index(&self, d: usize, c: usize) -> u64 {
        let s = self.spt_eff[d] as usize;
        ((c / s) * self.cover[d] as usize + (c % s) * self.gap[d] as usize) as u64
    }
}

impl Layout {
    /// The layout of rank-0 values: every thread holds the value in one register.
    pub fn scalar() -> Layout {
        Layout {
            spt: vec![],
            tpw: vec![],
            wpc: vec![],
            order: vec![],
            sliced: vec![],
            interleaved: vec![],
        }
    }

    pub fn parent_rank(&self) -> usize {
        self.spt.len()
    }

    pub fn rank(&self) -> usize {
        self.parent_rank() - self.sliced.len()
    }

    pub fn is_scalar(&self) -> bool {
        self.rank() == 0
    }

    /// The default blocked layout for `shape`: `vec` contiguous elements per thread along the
    /// last axis, lanes then warps filling axes from the last (fastest) to the first.
    pub fn blocked(shape: &Shape, vec: u32, num_warps: u32) -> Layout {
        let r = shape.rank();
        if r == 0 {
            return Layout::scalar();
        }
        let dims: Vec<u32> = shape.dims().to_vec();
        let order: Vec<usize> = (0..r).rev().collect();
        let mut spt = vec![1u32; r];
        spt[r - 1] = vec.clamp(1, dims[r - 1]);
        let mut tpw = vec![1u32; r];
        let mut lanes = 32u32;
        for &d in &order {
            let t = lanes.min((dims[d] / spt[d]).max(1));
            tpw[d] = t;
            lanes /= t;
        }
        tpw[order[0]] *= lanes;
        let mut wpc = vec![1u32; r];
        let mut warps = num_warps;
        for &d in &order {
            let w = warps.min((dims[d] / (spt[d] * tpw[d])).max(1));
            wpc[d] = w;
            warps /= w;
        }
        // Leftover warps replicate along the slowest axis.
        wpc[order[r - 1]] *= warps;
        Layout {
            interleaved: vec![false; spt.len()],
            spt,
            tpw,
            wpc,
            order,
            sliced: vec![],
        }
    }

    /// A layout in which each thread holds one contiguous run along `axis` (the scan layout):
    /// threads first cover `axis`, the rest go to the other axes.
    pub fn chunked(shape: &Shape, axis: usize, num_warps: u32) -> Layout {
        let r = shape.rank();
        let dims: Vec<u32> = shape.dims().to_vec();
        let mut order: Vec<usize> = vec![axis];
        order.extend((0..r).rev().filter(|&d| d != axis));
        let threads = 32 * num_warps;
        let along = dims[axis].min(threads);
        let mut tpw = vec![1u32; r];
        let mut wpc = vec![1u32; r];
        tpw[axis] = along.min(32);
        wpc[axis] = (along / tpw[axis]).max(1).min(num_warps);
        let mut spt = vec![1u32; r];
        spt[axis] = dims[axis] / (tpw[axis] * wpc[axis]);
        let mut lanes = 32 / tpw[axis];
        let mut warps = num_warps / wpc[axis];
        for &d in order.iter().skip(1) {
            let t = lanes.min(dims[d].max(1));
            tpw[d] = t;
            lanes /= t;
            let w = warps.min((dims[d] / t).max(1));
            wpc[d] = w;
            warps /= w;
        }
        let last = *order.last().unwrap_or(&axis);
        tpw[last] *= lanes;
        wpc[last] *= warps;
        Layout {
            interleaved: vec![false; spt.len()],
            spt,
            tpw,
            wpc,
            order,
            sliced: vec![],
        }
    }

    /// Parent axes present in the value, in value-axis order.
    pub fn kept(&self) -> Vec<usize> {
        (0..self.parent_rank())
            .filter(|d| !self.sliced.contains(d))
            .collect()
    }

    /// The layout of a value with value-axis `axis` reduced away.
    pub fn slice(&self, axis: usize) -> Layout {
        if self.rank() <= 1 {
            return Layout::scalar();
        }
        let mut l = self.clone();
        l.sliced.push(self.kept()[axis]);
        l.sliced.sort_unstable();
        l
    }

    /// The layout of `expand_dims(axis)` of a value in this layout, when a sliced parent axis
    /// sits at that position (the inverse of [`Layout::slice`]).
    pub fn unslice(&self, axis: usize) -> Option<Layout> {
        let kept = self.kept();
        let q = *self
            .sliced
            .iter()
            .find(|&&q| kept.iter().filter(|&&k| k < q).count() == axis)?;
        let mut l = self.clone();
        l.sliced.retain(|&s| s != q);
        Some(l)
    }

    /// The parent shape of a value of `shape` in this layout.
    pub fn parent_shape(&self, shape: &Shape) -> Vec<u32> {
        let mut p = vec![1u32; self.parent_rank()];
        for (k, d) in self.kept().into_iter().enumerate() {
            p[d] = shape.dims()[k];
        }
        p
    }

    /// Register numbering of a value of `shape` in this layout.
    pub fn geometry(&self, shape: &Shape) -> RegGeometry {
        let parent = self.parent_shape(shape);
        let r = parent.len();
        let mut spt_eff = vec![1; r];
        let mut cover = vec![1; r];
        let mut gap = vec![1; r];
        let mut n = vec![1usize; r];
        for d in 0..r {
            spt_eff[d] = if self.interleaved[d] {
                // Elements j * tpw beyond the axis wrap onto lower ones: keep the distinct ones.
                gap[d] = self.tpw[d];
                (parent[d] / self.tpw[d]).clamp(1, self.spt[d])
            } else {
                self.spt[d].min(parent[d])
            };
            cover[d] = self.spt[d] * self.tpw[d] * self.wpc[d];
            let reps = (parent[d] / cover[d]).max(1);
            n[d] = (reps * spt_eff[d]) as usize;
        }
        let mut mult = vec![1usize; r];
        let mut m = 1;
        for &d in &self.order {
            mult[d] = m;
            m *= n[d];
        }
        RegGeometry {
            parent,
            n,
            mult,
            count: m,
            spt_eff,
            cover,
            gap,
        }
    }

    /// Lane strides per parent axis (lane = sum of lane_d * stride_d).
    pub fn lane_strides(&self) -> Vec<u32> {
        strides(&self.tpw, &self.order)
    }

    pub fn warp_strides(&self) -> Vec<u32> {
        strides(&self.wpc, &self.order)
    }

    /// The row-major index (over `shape`) of the element thread `t` holds in each register, as
    /// the lowering computes it: the thread's base per parent axis (wrapped at the axis size)
    /// plus the register's constant index. It is `thread_bases(shape, t + 1)[t]` plus each of
    /// [`Layout::register_offsets`].
    pub fn thread_elements(&self, shape: &Shape, t: u32) -> Vec<u64> {
        let base = self.thread_bases(shape, t + 1)[t as usize];
        self.register_offsets(shape)
            .into_iter()
            .map(|o| base + o)
            .collect()
    }

    /// Row-major strides over `parent` (the parent shape of a value in this layout) for the
    /// kept axes; sliced axes have extent 1 and contribute 0.
    fn row_major_strides(&self, parent: &[u32]) -> Vec<u64> {
        let mut st = vec![0u64; parent.len()];
        let mut acc = 1u64;
        for d in (0..parent.len()).rev() {
            if !self.sliced.contains(&d) {
                st[d] = acc;
                acc *= parent[d] as u64;
            }
        }
        st
    }

    /// The row-major part of the elements' index that depends on the thread alone, for
    /// threads `0..threads`: its position per parent axis (wrapped at the axis size) under the
    /// row-major strides. A thread's elements are this plus [`Layout::register_offsets`]
    /// (the index is a sum over axes, and the register's part is not wrapped).
    pub fn thread_bases(&self, shape: &Shape, threads: u32) -> Vec<u64> {
        let parent = self.parent_shape(shape);
        let st = self.row_major_strides(&parent);
        let (ls, ws) = (self.lane_strides(), self.warp_strides());
        (0..threads)
            .map(|t| {
                let (lane, warp) = (t % 32, t / 32);
                (0..self.parent_rank())
                    .map(|d| {
                        let l = (lane / ls[d]) % self.tpw[d];
                        let w = (warp / ws[d]) % self.wpc[d];
                        let pos = if self.interleaved[d] {
                            l + self.spt[d] * self.tpw[d] * w
                        } else {
                            (l + self.tpw[d] * w) * self.spt[d]
                        };
                        (pos % parent[d]) as u64 * st[d]
                    })
                    .sum()
            })
            .collect()
    }

    /// The row-major part of the elements' index that depends on the register alone (the same
    /// on every thread), per register.
    pub fn register_offsets(&self, shape: &Shape) -> Vec<u64> {
        let g = self.geometry(shape);
        let st = self.row_major_strides(&g.parent);
        (0..g.count)
            .map(|i| {
                g.coords(i)
                    .iter()
                    .enumerate()
                    .map(|(d, &c)| g.const_index(d, c) * st[d])
                    .sum()
            })
            .collect()
    }

    /// True when some thread holds a copy of an element another thread also holds.
    pub fn replicates(&self, shape: &Shape) -> bool {
        if self.is_scalar() {
            return true;
        }
        let p = self.parent_shape(shape);
        (0..self.parent_rank()).any(|d| self.spt[d] * self.tpw[d] * self.wpc[d] > p[d])
    }
}

fn strides(counts: &[u32], order: &[usize]) -> Vec<u32> {
    let mut s = vec![1u32; counts.len()];
    let mut acc = 1;
    for &d in order {
        s[d] = acc;
        acc *= counts[d];
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every element of `shape` is held by some (thread, register), and the registers of one
    /// thread hold distinct elements.
    fn check_covers(l: &Layout, shape: &Shape, threads: u32) {
        let g = l.geometry(shape);
        let ls = l.lane_strides();
        let ws = l.warp_strides();
        let pr = l.parent_rank();
        let mut seen = vec![false; shape.numel()];
        let st = shape.strides();
        for t in 0..threads {
            let (lane, warp) = (t % 32, t / 32);
            let mut mine = std::collections::HashSet::new();
            // The lowering's split of each element into a thread part and a register part.
            let elements = l.thread_elements(shape, t);
            assert_eq!(elements.len(), g.count);
            for (i, &element) in elements.iter().enumerate() {
                let c = g.coords(i);
                let mut lin = 0;
                let mut k = 0;
                for d in 0..pr {
                    let pos = (lane / ls[d]) % l.tpw[d] + l.tpw[d] * ((warp / ws[d]) % l.wpc[d]);
                    let idx = g.const_index(d, c[d]) + ((pos * l.spt[d]) % g.parent[d]) as u64;
                    assert!(idx < g.parent[d] as u64);
                    if !l.sliced.contains(&d) {
                        lin += idx as usize * st[k];
                        k += 1;
                    }
                }
                assert_eq!(element, lin as u64, "{l:?} thread {t} register {i}");
                assert!(mine.insert(lin), "thread {t} holds element {lin} twice");
                seen[lin] = true;
            }
        }
        assert!(seen.iter().all(|&s| s), "{l:?} misses elements of {shape}");
    }

    #[test]
    fn blocked_layouts_cover_their_tiles() {
        for (dims, vec, warps) in [
            (vec![1024], 4, 4),
            (vec![128], 8, 8),
            (vec![16], 1, 4),
            (vec![64, 64], 4, 4),
            (vec![2, 256], 8, 4),
            (vec![128, 2], 2, 2),
            (vec![16, 16], 4, 8),
        ] {
            let shape = Shape::new(&dims).unwrap();
            let l = Layout::blocked(&shape, vec, warps);
            assert_eq!(l.tpw.iter().product::<u32>(), 32);
            assert_eq!(l.wpc.iter().product::<u32>(), warps);
            check_covers(&l, &shape, 32 * warps);
            let c = Layout::chunked(&shape, dims.len() - 1, warps);
            check_covers(&c, &shape, 32 * warps);
            assert_eq!(c.tpw.iter().product::<u32>(), 32);
            assert_eq!(c.wpc.iter().product::<u32>(), warps);
        }
    }

    #[test]
    fn vector_runs_are_contiguous_registers() {
        let shape = Shape::new(&[1024]).unwrap();
        let l = Layout::blocked(&shape, 4, 4);
        assert_eq!((l.spt[0], l.tpw[0], l.wpc[0]), (4, 32, 4));
        let g = l.geometry(&shape);
        assert_eq!(g.count, 8);
        // Registers 0..4 are elements base+0..3, registers 4..8 the next repetition (+512).
        let idx: Vec<u64> = (0..8).map(|i| g.const_index(0, g.coords(i)[0])).collect();
        assert_eq!(idx, vec![0, 1, 2, 3, 512, 513, 514, 515]);
        assert!(!l.replicates(&shape));
        assert!(Layout::blocked(&Shape::new(&[16]).unwrap(), 1, 4)
            .replicates(&Shape::new(&[16]).unwrap()));
    }

    #[test]
    fn a_row_slice_holds_what_the_one_d_layout_holds() {
        // x [1024] loaded 8 to a thread, and the rows' slice of the [2, 1024] tile it is
        // broadcast into: the same element in the same register of every thread.
        let x = Shape::new(&[1024]).unwrap();
        let one_d = Layout::blocked(&x, 8, 4);
        let row = Layout::blocked(&Shape::new(&[2, 1024]).unwrap(), 8, 4).slice(0);
        for t in [0, 1, 31, 32, 77, 127] {
            assert_eq!(one_d.thread_elements(&x, t), row.thread_elements(&x, t));
        }
        assert_eq!(one_d.thread_elements(&x, 33)[..2], [264, 265]);
        // A column-major thread order distributes the axis differently.
        let col = Layout::blocked(&Shape::new(&[1024, 2]).unwrap(), 1, 4).slice(1);
        assert_ne!(one_d.thread_elements(&x, 1), col.thread_elements(&x, 1));
    }

    #[test]
    fn slice_and_unslice_are_inverse() {
        let shape = Shape::new(&[32, 64]).unwrap();
        let l = Layout::blocked(&shape, 4, 4);
        let rows = l.slice(1);
        assert_eq!(rows.rank(), 1);
        assert_eq!(rows.kept(), vec![0]);
        assert_eq!(rows.unslice(1), Some(l.clone()));
        assert_eq!(rows.unslice(0), None);
        let s = Shape::new(&[32]).unwrap();
        check_covers(&rows, &s, 128);
        // The row layout's registers are the parent's with the column axis collapsed.
        assert_eq!(
            rows.geometry(&s).count,
            l.geometry(&Shape::new(&[32, 1]).unwrap()).count
        );
        assert!(rows.slice(0).is_scalar());
    }
}
