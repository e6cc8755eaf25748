//! `gather` (`tl.gather`): the source goes to shared memory in its own layout, at its
//! row-major positions (as a layout conversion writes it), a barrier, and every thread reads
//! the elements of the result it holds in the layout its consumer asked for: the address of
//! result element `c` is the row-major offset of `c` with the gathered coordinate replaced by
//! the index the thread holds for `c`. The index is clamped into the axis first (an unsigned
//! `min`, so negative indices clamp too): an out-of-range index reads an element of the source,
//! never another value's scratch. A barrier before the writes protects the scratch buffer's
//! previous user, as in `convert.rs`.

use super::convert::st_ty;
use super::{Lower, Vals, R};
use crate::layout::Layout;
use crate::ptx::{Arg, RegClass};
use tegula_ir::InstData;

impl Lower<'_> {
    /// The result of `gather` instruction `d` along `axis`, in layout `l`.
    pub(crate) fn lower_gather(&mut self, d: &InstData, axis: usize, l: &Layout) -> R<Vals> {
        let (src_v, index_v) = (d.args[0], d.args[1]);
        let src_ty = self.k.ty(src_v);
        let ty = self.k.ty(d.results[0]);
        let (sl, _) = self.natural(src_v);
        let src = self.get(src_v, &sl)?;
        let index = self.get(index_v, l)?;
        let class = src.first().map_or(RegClass::B32, |r| r.class);
        let es = class.bytes() as i64;
        let bytes = src_ty.shape.numel() as u64 * es as u64;
        if bytes > self.max_shared() as u64 {
            return Err(self.unsupported(format!(
                "a gather from {src_ty} ({bytes} bytes of shared memory)"
            )));
        }
        self.smem(bytes as u32);
        self.b.comment(format!(
            "gather {ty} from {src_ty} along axis {axis} through shared memory"
        ));
        self.barrier();
        let ws = Lower::parent_strides(&sl, &src_ty.shape, 1);
        self.smem_write(&src, &src_ty.shape, &sl, &ws, 0, None);
        self.barrier();
        // Byte strides of the source's row-major order, per result axis, without the gathered
        // axis (its part comes from the index), mapped onto the parent axes of `l`.
        let st = src_ty.shape.strides();
        let mut ps = vec![0i64; l.parent_rank()];
        for (k, p) in l.kept().into_iter().enumerate() {
            if k != axis {
                ps[p] = st[k] as i64 * es;
            }
        }
        let axis_bytes = st[axis] as i64 * es;
        let last = src_ty.shape.dim(axis) as i64 - 1;
        let base = self.smem(0);
        let addr = self.thread_address(base, l, &ty.shape, &ps);
        let geom = l.geometry(&ty.shape);
        let wide = index.first().is_some_and(|r| r.class == RegClass::B64);
        let sty = st_ty(class);
        let mut out = Vec::with_capacity(geom.count);
        for (i, &ix) in index.iter().enumerate().take(geom.count) {
            let k = if wide {
                let c = self
                    .b
                    .op("min.u64", RegClass::B64, vec![ix.into(), Arg::Imm(last)]);
                self.b.op("cvt.u32.u64", RegClass::B32, vec![c.into()])
            } else {
                self.b
                    .op("min.u32", RegClass::B32, vec![ix.into(), Arg::Imm(last)])
            };
            let a = self.b.op(
                "mad.lo.u32",
                RegClass::B32,
                vec![k.into(), Arg::Imm(axis_bytes), addr.into()],
            );
            let at = Arg::Addr(Box::new(a.into()), Lower::reg_offset(&geom, i, &ps));
            let r = if class == RegClass::Pred {
                let w = self.b.op("ld.shared.u8", RegClass::B32, vec![at]);
                self.b
                    .op("setp.ne.u32", RegClass::Pred, vec![w.into(), Arg::Imm(0)])
            } else {
                self.b.op(format!("ld.shared{sty}"), class, vec![at])
            };
            out.push(r);
        }
        Ok(out)
    }
}
