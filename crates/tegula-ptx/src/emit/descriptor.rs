//! Tensor-descriptor accesses the plan put on the tensor memory accelerator
//! (`plan/descriptors.rs`): one thread issues a `cp.async.bulk.tensor` copy of the whole block
//! between global memory and the scratch buffer (row-major, unswizzled), and every thread
//! reads or writes its elements there in the value's layout.
//!
//! A load completes on an `mbarrier` of its own, at the start of the shared array (each access
//! outside loops runs at most once, so its barrier's first phase, parity 0, is the one waited
//! on); the copy's bytes are the barrier's expected transaction count. A store's
//! shared-memory writes are made visible to the copy (the async proxy) with
//! `fence.proxy.async`; the copy runs on while the program goes on, until the next barrier,
//! where its thread waits until the copy has read them (`Lower::barrier`).

use super::{Lower, Scope, R};
use crate::ptx::{Arg, Reg, RegClass, SMEM};
use tegula_ir::{Inst, Value};

impl Lower<'_> {
    /// `%tid.x == 0`, the thread that issues the copies.
    pub(crate) fn first_thread(&mut self) -> Reg {
        if let Some(p) = self.addr.first_thread {
            return p;
        }
        let tid = self.thread.tid;
        let p = self
            .b
            .in_prologue(|b| b.op("setp.eq.u32", RegClass::Pred, vec![tid.into(), Arg::Imm(0)]));
        self.addr.first_thread = Some(p);
        p
    }

    /// The generic address of tensor map `map` (a `.param` of the kernel).
    pub(crate) fn tensor_map(&mut self, map: usize) -> Reg {
        if let Some(&r) = self.addr.tensor_maps.get(&map) {
            return r;
        }
        let name = self.plan.descriptors.maps[map].name.clone();
        let r = self.b.in_prologue(|b| {
            let p = b.op("mov.u64", RegClass::B64, vec![Arg::Sym(name)]);
            let g = b.op("cvta.param.u64", RegClass::B64, vec![p.into()]);
            b.emit("prefetch.tensormap", vec![Arg::Addr(Box::new(g.into()), 0)]);
            g
        });
        self.addr.tensor_maps.insert(map, r);
        r
    }

    /// The copy's coordinates, innermost first: `{offset1, offset0}` as 32-bit registers.
    pub(crate) fn tma_coords(&mut self, offsets: [Value; 2]) -> R<Vec<Reg>> {
        let mut out = Vec::new();
        for v in [offsets[1], offsets[0]] {
            let r = self.scalar(v)?;
            out.push(if r.class == RegClass::B64 {
                self.b.op("cvt.u32.u64", RegClass::B32, vec![r.into()])
            } else {
                r
            });
        }
        Ok(out)
    }

    pub(crate) fn lower_desc_load(&mut self, inst: Inst) -> R<()> {
        let d = self.k.insts[inst].clone();
        let map = self.plan.descriptors.on_tma[&inst];
        let ty = self.k.ty(d.results[0]);
        let class = super::types::class_of(ty.elem);
        let bytes = ty.shape.numel() as u32 * class.bytes();
        let tmap = self.tensor_map(map);
        let coords = self.tma_coords([d.args[5], d.args[6]])?;
        let first = self.first_thread();
        let n = self.shared.mbarriers;
        self.shared.mbarriers += 1;
        let buf = self.smem(bytes);
        // The barriers sit below the scratch buffer (`Lower::mbarrier_bytes`).
        let array = self
            .b
            .op("mov.u32", RegClass::B32, vec![Arg::Sym(SMEM.into())]);
        let bar = self.b.op(
            "add.s32",
            RegClass::B32,
            vec![array.into(), Arg::Imm(8 * n as i64)],
        );
        self.b.comment(format!("{ty} by TMA"));
        let bar_addr = || Arg::Addr(Box::new(bar.into()), 0);
        self.b.emit_guarded(
            first,
            false,
            "mbarrier.init.shared::cta.b64",
            vec![bar_addr(), Arg::Imm(1)],
        );
        self.b
            .emit_guarded(first, false, "fence.mbarrier_init.release.cluster", vec![]);
        // Orders the init before every thread's wait, and the scratch's previous readers
        // before the copy overwrites it.
        self.barrier();
        self.b.emit_guarded(
            first,
            false,
            "mbarrier.arrive.expect_tx.shared::cta.b64",
            vec![Arg::Sym("_".into()), bar_addr(), Arg::Imm(bytes as i64)],
        );
        self.b.emit_guarded(
            first,
            false,
            "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
            vec![
                Arg::Addr(Box::new(buf.into()), 0),
                Arg::TensorCoords(tmap, coords),
                bar_addr(),
            ],
        );
        let wait = self.b.new_label("tma_wait");
        self.b.place_label(&wait);
        let done = self.b.op(
            "mbarrier.try_wait.parity.shared::cta.b64",
            RegClass::Pred,
            vec![bar_addr(), Arg::Imm(0)],
        );
        self.b.bra_if(done, true, &wait);
        let (layout, _) = self.natural(d.results[0]);
        let parent = Lower::parent_strides(&layout, &ty.shape, 1);
        let regs = self.smem_read(class, &ty.shape, &layout, &parent, 0);
        self.define(d.results[0], &layout, regs);
        Ok(())
    }

    pub(crate) fn lower_desc_store(&mut self, inst: Inst) -> R<()> {
        let d = self.k.insts[inst].clone();
        let map = self.plan.descriptors.on_tma[&inst];
        let value = d.args[7];
        let ty = self.k.ty(value);
        let class = super::types::class_of(ty.elem);
        let bytes = ty.shape.numel() as u32 * class.bytes();
        let (layout, _) = self.natural(value);
        let src = self.get(value, &layout)?;
        let tmap = self.tensor_map(map);
        let coords = self.tma_coords([d.args[5], d.args[6]])?;
        let first = self.first_thread();
        // A TMA store cannot start at a negative coordinate: the region (the masked store)
        // runs instead. The coordinates are scalars, so every thread takes the same branch.
        let below: Vec<Reg> = coords
            .iter()
            .map(|&c| {
                self.b
                    .op("setp.lt.s32", RegClass::Pred, vec![c.into(), Arg::Imm(0)])
            })
            .collect();
        let negative = self.b.op(
            "or.pred",
            RegClass::Pred,
            vec![below[0].into(), below[1].into()],
        );
        let (masked, end) = (self.b.new_label("masked_store"), self.b.new_label("stored"));
        let hoist_point = self.b.hoist_point();
        self.b.bra_if(negative, false, &masked);
        let buf = self.smem(bytes);
        self.b.comment(format!("{ty} by TMA"));
        // The scratch's previous readers are done before it is overwritten.
        self.barrier();
        let parent = Lower::parent_strides(&layout, &ty.shape, 1);
        self.smem_write(&src, &ty.shape, &layout, &parent, 0, None);
        // Each thread's writes are made visible to the async proxy, then all are done before
        // the copy reads them.
        self.b.emit("fence.proxy.async.shared::cta", vec![]);
        self.barrier();
        self.b.emit_guarded(
            first,
            false,
            "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group",
            vec![
                Arg::TensorCoords(tmap, coords),
                Arg::Addr(Box::new(buf.into()), 0),
            ],
        );
        self.b
            .emit_guarded(first, false, "cp.async.bulk.commit_group", vec![]);
        // The buffer is free again once the copy has read it: the next barrier waits for
        // that (`Lower::barrier`).
        self.b.bra(&end);
        self.b.place_label(&masked);
        self.vals.regions_open += 1;
        self.vals.scopes.push(Scope::body(hoist_point));
        self.lower_block(d.regions[0])?;
        self.vals.scopes.pop();
        self.vals.regions_open -= 1;
        self.loc = d.loc;
        self.b.place_label(&end);
        Ok(())
    }
}
