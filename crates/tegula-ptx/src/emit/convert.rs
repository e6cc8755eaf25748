//! Layout conversion through shared memory.
//!
//! Every thread writes its registers at the elements' row-major positions, a barrier, and every
//! thread reads the elements of the destination layout. A [`Remap`] changes where the
//! destination reads, which turns the same code into `reshape` (row-major order is kept: the
//! identity), `permute` and axis reversal. A barrier before the writes protects the previous
//! user of the scratch buffer.

use super::{Lower, Vals, R};
use crate::layout::Layout;
use crate::ptx::{Arg, Reg, RegClass, Ty};
use tegula_ir::fast_hash::{HashMap, HashSet};
use tegula_ir::{Shape, TileType};

/// Where destination element `idx` is read from: `offset + sum_i idx[i] * strides[i]`
/// (in elements of the source's row-major order), and the destination shape.
#[derive(Clone, Debug)]
pub struct Remap {
    pub shape: Shape,
    pub strides: Vec<i64>,
    pub offset: i64,
}

impl Remap {
    /// `permute(perm)` of a value of `src` shape.
    pub fn permute(src: &Shape, perm: &[u8]) -> Remap {
        let st = src.strides();
        let dims: Vec<usize> = perm.iter().map(|&p| src.dim(p as usize)).collect();
        Remap {
            shape: Shape::new(&dims).expect("same rank"),
            strides: perm.iter().map(|&p| st[p as usize] as i64).collect(),
            offset: 0,
        }
    }

    /// Reversal of `axis`.
    pub fn flip(shape: &Shape, axis: usize) -> Remap {
        let st = shape.strides();
        let mut strides: Vec<i64> = (0..shape.rank()).map(|i| st[i] as i64).collect();
        strides[axis] = -strides[axis];
        Remap {
            shape: *shape,
            strides,
            offset: (shape.dim(axis) as i64 - 1) * st[axis] as i64,
        }
    }
}

pub(crate) fn st_ty(c: RegClass) -> Ty {
    match c {
        RegClass::Pred => Ty::U8,
        RegClass::F32 => Ty::F32,
        RegClass::F64 => Ty::F64,
        c => c.bits_ty(),
    }
}

impl Lower<'_> {
    /// The shared-memory address of this thread's first element in `l`: `base` plus
    /// [`Lower::thread_offset`] under byte `strides` (per parent axis).
    pub(crate) fn thread_address(
        &mut self,
        base: Reg,
        l: &Layout,
        shape: &Shape,
        strides: &[i64],
    ) -> Reg {
        match self.thread_offset(l, shape, strides) {
            Some(o) => self
                .b
                .op("add.s32", RegClass::B32, vec![base.into(), o.into()]),
            None => base,
        }
    }

    /// Writes `src` (a value of `ty` in `from`) to shared memory at byte offset `at`, with
    /// element `idx` at `at + es * sum(idx * strides)`.
    pub(crate) fn smem_write(
        &mut self,
        src: &[Reg],
        shape: &Shape,
        from: &Layout,
        strides: &[i64],
        at: i64,
        guard: Option<Reg>,
    ) {
        let class = src[0].class;
        let es = class.bytes() as i64;
        let ps: Vec<i64> = strides.iter().map(|s| s * es).collect();
        let base = self.smem(0);
        let addr = self.thread_address(base, from, shape, &ps);
        let geom = from.geometry(shape);
        let mut seen = std::collections::HashSet::new();
        for (i, &r) in src.iter().enumerate() {
            let c = Lower::reg_offset(&geom, i, &ps) + at;
            if !seen.insert(c) {
                continue;
            }
            let v = if class == RegClass::Pred {
                self.b.op(
                    "selp.u32",
                    RegClass::B32,
                    vec![Arg::Imm(1), Arg::Imm(0), r.into()],
                )
            } else {
                r
            };
            let args = vec![Arg::Addr(Box::new(addr.into()), c), v.into()];
            let op = format!("st.shared{}", st_ty(class));
            match guard {
                Some(g) => self.b.emit_guarded(g, false, op, args),
                None => self.b.emit(op, args),
            }
        }
    }

    /// Reads a value of `shape` in layout `to` from shared memory (see [`Lower::smem_write`]).
    pub(crate) fn smem_read(
        &mut self,
        class: RegClass,
        shape: &Shape,
        to: &Layout,
        strides: &[i64],
        at: i64,
    ) -> Vals {
        let es = class.bytes() as i64;
        let ps: Vec<i64> = strides.iter().map(|s| s * es).collect();
        let mut base = self.smem(0);
        let mut at = at;
        if at != 0 {
            // Reads in descending address order (a flip) start `at` bytes in: the offset goes
            // into the thread's address register, so that no register holds an address below
            // the buffer (only the immediates may be negative).
            base = self
                .b
                .op("add.s32", RegClass::B32, vec![base.into(), Arg::Imm(at)]);
            at = 0;
        }
        let addr = self.thread_address(base, to, shape, &ps);
        let geom = to.geometry(shape);
        let mut cache = std::collections::HashMap::new();
        (0..geom.count)
            .map(|i| {
                let c = Lower::reg_offset(&geom, i, &ps) + at;
                if let Some(&r) = cache.get(&c) {
                    return r;
                }
                let a = Arg::Addr(Box::new(addr.into()), c);
                let r = if class == RegClass::Pred {
                    let w = self.b.op("ld.shared.u8", RegClass::B32, vec![a]);
                    self.b
                        .op("setp.ne.u32", RegClass::Pred, vec![w.into(), Arg::Imm(0)])
                } else {
                    self.b
                        .op(format!("ld.shared{}", st_ty(class)), class, vec![a])
                };
                cache.insert(c, r);
                r
            })
            .collect()
    }

    /// The conversion without shared memory when every thread already holds, in `from`, each
    /// element `to` gives it, in the same register on every thread (e.g. a 1-D blocked load
    /// and the slice of a 2-D blocked layout that distributes the same axis the same way, or
    /// replicated layouts of a reduction result): the registers are only renamed. `None` when
    /// some thread would need another thread's element.
    pub(crate) fn convert_in_registers(
        &self,
        src: &[Reg],
        shape: &Shape,
        from: &Layout,
        to: &Layout,
    ) -> Option<Vals> {
        if from.parent_rank() == 0 || to.parent_rank() == 0 {
            return None;
        }
        // Thread t holds element `base(t) + offset(i)` in register i (see
        // `Layout::thread_bases`), so the register of `from` holding what `to` puts in register
        // j is the one whose offset is `to_offset(j) + (to_base(t) - from_base(t))`: the
        // registers picked depend on the thread only through that difference, and each distinct
        // difference is checked once.
        let threads = 32 * self.num_warps();
        let from_offsets = from.register_offsets(shape);
        if from_offsets.len() != src.len() {
            return None;
        }
        // A thread's registers hold distinct elements; were two the same, the last is read.
        let register_at: HashMap<u64, usize> = from_offsets
            .iter()
            .enumerate()
            .map(|(i, &o)| (o, i))
            .collect();
        let to_offsets = to.register_offsets(shape);
        let from_bases = from.thread_bases(shape, threads);
        let to_bases = to.thread_bases(shape, threads);
        let mut pick: Option<Vec<usize>> = None;
        let mut differences_seen = HashSet::default();
        for (&from_base, &to_base) in from_bases.iter().zip(&to_bases) {
            let difference = to_base as i64 - from_base as i64;
            if !differences_seen.insert(difference) {
                continue;
            }
            let regs: Vec<usize> = to_offsets
                .iter()
                .map(|&o| {
                    let offset = u64::try_from(o as i64 + difference).ok()?;
                    register_at.get(&offset).copied()
                })
                .collect::<Option<_>>()?;
            match &pick {
                None => pick = Some(regs),
                Some(p) if *p == regs => {}
                Some(_) => return None,
            }
        }
        Some(pick?.into_iter().map(|i| src[i]).collect())
    }

    pub(crate) fn convert_smem(
        &mut self,
        src: &[Reg],
        ty: TileType,
        from: &Layout,
        to: &Layout,
        remap: Option<&Remap>,
    ) -> R<Vals> {
        let class = src.first().map(|r| r.class).unwrap_or(RegClass::B32);
        let shape = ty.shape;
        let bytes = shape.numel() as u32 * class.bytes();
        if bytes > self.max_shared() {
            return Err(self.unsupported(format!(
                "a layout conversion of {ty} ({bytes} bytes of shared memory)"
            )));
        }
        self.smem(bytes);
        self.b
            .comment(format!("convert {ty} through shared memory"));
        self.barrier();
        let ws = Lower::parent_strides(from, &shape, 1);
        self.smem_write(src, &shape, from, &ws, 0, None);
        self.barrier();
        let (dshape, rstrides, offset) = match remap {
            Some(m) => (m.shape, m.strides.clone(), m.offset),
            None => {
                let st = shape.strides();
                (shape, (0..shape.rank()).map(|i| st[i] as i64).collect(), 0)
            }
        };
        // Read strides are given per destination value axis; map them to parent axes.
        let mut ps = vec![0i64; to.parent_rank()];
        for (k, d) in to.kept().into_iter().enumerate() {
            ps[d] = rstrides[k];
        }
        let es = class.bytes() as i64;
        Ok(self.smem_read(class, &dshape, to, &ps, offset * es))
    }
}
