//! Layout conversions too large for the shared scratch buffer (a 128x128 f32 accumulator is
//! 64 KB): the tile goes through shared memory in slabs of `R` indices along one axis, one
//! write, barrier, read round per slab.
//!
//! Whether a register's element lies in slab `s` depends only on the register's constant part
//! when the layout's thread coverage of the axis (`spt * tpw * wpc`) divides `R`, since a
//! thread's base index along the axis is below its coverage. Otherwise (an mma accumulator whose
//! warps cover all 128 rows) the access is predicated on `(base + constant) / R == s`.

use super::convert::st_ty;
use super::{Lower, Vals, R};
use crate::layout::Layout;
use crate::ptx::{Arg, Reg, RegClass};
use std::collections::HashMap;
use tegula_ir::{Shape, TileType};

/// How one side of the conversion decides which of its registers belong to a slab.
struct Side {
    /// Parent axis of the slab axis.
    p: usize,
    /// The thread's base index along it, when membership needs a runtime test.
    base: Option<Option<Reg>>,
}

impl Lower<'_> {
    /// Converts like `convert_smem` (no remap) in slabs; `None` when even one index of every
    /// axis is too large (the caller reports the conversion as unsupported).
    pub(crate) fn convert_in_pieces(
        &mut self,
        src: &[Reg],
        ty: TileType,
        from: &Layout,
        to: &Layout,
    ) -> Option<R<Vals>> {
        let shape = ty.shape;
        let class = src.first().map(|r| r.class).unwrap_or(RegClass::B32);
        let es = class.bytes() as i64;
        // Per axis: the largest slab that fits, and how many sides need predicates; take the
        // cheapest axis.
        let (axis, slab_rows, _) = (0..shape.rank())
            .filter_map(|a| {
                let rows = shape.dim(a) as u32;
                let slab_bytes = |r: u32| (shape.numel() as u32 / rows) * r * class.bytes();
                let mut r = rows;
                while r > 1 && slab_bytes(r) > super::CONVERT_SCRATCH {
                    r /= 2;
                }
                if slab_bytes(r) > super::CONVERT_SCRATCH {
                    return None;
                }
                let predicated = [from, to]
                    .iter()
                    .filter(|l| Self::slab_cover(l, a, rows) > r)
                    .count();
                Some((a, r, predicated))
            })
            .min_by_key(|&(_, _, p)| p)?;
        let rows = shape.dim(axis) as u32;
        let mut dims: Vec<usize> = shape.dims().iter().map(|&d| d as usize).collect();
        dims[axis] = slab_rows as usize;
        let slab_shape = Shape::new(&dims).expect("same rank");
        let base = self.smem(slab_shape.numel() as u32 * class.bytes());
        self.b.comment(format!(
            "convert {ty} through shared memory in slabs of {slab_rows} along axis {axis}"
        ));
        // Slab-local row-major strides, mapped onto each layout's parent axes.
        let st = slab_shape.strides();
        let strides = |l: &Layout| {
            let mut out = vec![0i64; l.parent_rank()];
            for (k, d) in l.kept().into_iter().enumerate() {
                out[d] = st[k] as i64 * es;
            }
            out
        };
        let (ws, rs) = (strides(from), strides(to));
        let slab_stride = st[axis] as i64 * es * slab_rows as i64;
        let (gf, gt) = (from.geometry(&shape), to.geometry(&shape));
        let side = |s: &mut Self, l: &Layout| {
            let p = l.kept()[axis];
            let base = (Self::slab_cover(l, axis, rows) > slab_rows).then(|| s.bases(l, &shape)[p]);
            Side { p, base }
        };
        let (sf, stt) = (side(self, from), side(self, to));
        let waddr = self.thread_address(base, from, &shape, &ws);
        let raddr = self.thread_address(base, to, &shape, &rs);
        let out: Vec<Reg> = (0..gt.count).map(|_| self.b.reg(class)).collect();
        let sty = st_ty(class);
        for s in 0..rows / slab_rows {
            let shift = -(s as i64) * slab_stride;
            let mut preds: HashMap<(bool, u64), Option<Reg>> = HashMap::new();
            self.barrier();
            let mut seen = std::collections::HashSet::new();
            for (i, &r) in src.iter().enumerate() {
                let c = gf.const_index(sf.p, gf.coords(i)[sf.p]);
                let Some(guard) = self.slab_member(&sf, c, s, slab_rows, &mut preds, false) else {
                    continue;
                };
                let off = Lower::reg_offset(&gf, i, &ws) + shift;
                if !seen.insert(off) {
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
                let args = vec![Arg::Addr(Box::new(waddr.into()), off), v.into()];
                match guard {
                    Some(g) => self
                        .b
                        .emit_guarded(g, false, format!("st.shared{sty}"), args),
                    None => self.b.emit(format!("st.shared{sty}"), args),
                }
            }
            self.barrier();
            for (i, &d) in out.iter().enumerate() {
                let c = gt.const_index(stt.p, gt.coords(i)[stt.p]);
                let Some(guard) = self.slab_member(&stt, c, s, slab_rows, &mut preds, true) else {
                    continue;
                };
                let a = Arg::Addr(
                    Box::new(raddr.into()),
                    Lower::reg_offset(&gt, i, &rs) + shift,
                );
                let emit = |s: &mut Self, op: String, args: Vec<Arg>| match guard {
                    Some(g) => s.b.emit_guarded(g, false, op, args),
                    None => s.b.emit(op, args),
                };
                if class == RegClass::Pred {
                    let w = self.b.reg(RegClass::B32);
                    emit(self, "ld.shared.u8".into(), vec![w.into(), a]);
                    emit(
                        self,
                        "setp.ne.u32".into(),
                        vec![d.into(), w.into(), Arg::Imm(0)],
                    );
                } else {
                    emit(self, format!("ld.shared{sty}"), vec![d.into(), a]);
                }
            }
        }
        Some(Ok(out))
    }

    /// The thread coverage of value axis `a` in `l`, at most the axis size.
    pub(super) fn slab_cover(l: &Layout, a: usize, rows: u32) -> u32 {
        let p = l.kept()[a];
        (l.spt[p] * l.tpw[p] * l.wpc[p]).min(rows)
    }

    /// Whether the register with constant index `c` belongs to slab `s`: `None` when it does
    /// not, `Some(None)` when it always does, `Some(Some(p))` when `p` says so at run time.
    fn slab_member(
        &mut self,
        side: &Side,
        c: u64,
        s: u32,
        slab_rows: u32,
        preds: &mut HashMap<(bool, u64), Option<Reg>>,
        read: bool,
    ) -> Option<Option<Reg>> {
        let Some(base) = side.base else {
            return (c as u32 / slab_rows == s).then_some(None);
        };
        let Some(base) = base else {
            return (c as u32 / slab_rows == s).then_some(None);
        };
        let p = *preds.entry((read, c)).or_insert_with(|| {
            let idx = self.b.op(
                "add.s32",
                RegClass::B32,
                vec![base.into(), Arg::Imm(c as i64)],
            );
            let q = self.b.op(
                "shr.u32",
                RegClass::B32,
                vec![idx.into(), Arg::Imm(slab_rows.trailing_zeros() as i64)],
            );
            Some(self.b.op(
                "setp.eq.u32",
                RegClass::Pred,
                vec![q.into(), Arg::Imm(s as i64)],
            ))
        });
        Some(p)
    }
}
