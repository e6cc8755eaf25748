//! Reductions and scans with a combine function (`Op::ReduceWith`, `Op::ScanWith`): the
//! structure of the built-in ones (reduce.rs), with the combine region's body inlined at each
//! combine step.
//!
//! The operands go to the scan layout ([`Layout::chunked`]): each thread holds one contiguous
//! run of the axis, consecutive lanes hold consecutive runs, then consecutive warps. A
//! reduction then combines a thread's run as a balanced tree of adjacent pairs, the lanes with
//! butterfly shuffles (the lower lane's value on the left), the warps' results as a tree
//! again: together the balanced tree of adjacent pairs over the whole axis in index order,
//! which is the interpreter's order, so the results agree bit for bit whatever the combine.

use super::convert::Remap;
use super::{Lower, Scope, R};
use crate::layout::Layout;
use crate::ptx::{Arg, Reg, RegClass};
use tegula_ir::{Block, Inst, Op};

/// One partial result: a register per combined tile.
type Part = Vec<Reg>;

impl Lower<'_> {
    /// `combine(left, right)`: the region's body emitted once more, its arguments bound to the
    /// registers of `left` and `right`.
    fn combine_with(&mut self, body: Block, left: &[Reg], right: &[Reg]) -> R<Part> {
        let args = self.k.blocks[body].args.clone();
        let yields = self.terminator_args(body);
        // A fresh scope: the body's values are emitted anew at every step.
        self.vals.scopes.push(Scope::default());
        for (&a, &r) in args.iter().zip(left.iter().chain(right)) {
            self.define(a, &Layout::scalar(), vec![r]);
        }
        let out = yields.iter().map(|&y| self.scalar(y)).collect::<R<Part>>();
        self.vals.scopes.pop();
        out
    }

    /// `x` as a 32- or 64-bit register, for shuffles and shared memory.
    fn word_of(&mut self, x: Reg) -> Reg {
        match x.class {
            RegClass::Pred => self.b.op(
                "selp.u32",
                RegClass::B32,
                vec![Arg::Imm(1), Arg::Imm(0), x.into()],
            ),
            RegClass::B16 => self.b.op("cvt.u32.u16", RegClass::B32, vec![x.into()]),
            _ => x,
        }
    }

    /// The inverse of [`Lower::word_of`] for a register of class `class`.
    fn word_to_class(&mut self, class: RegClass, w: Reg) -> Reg {
        match class {
            RegClass::Pred => self
                .b
                .op("setp.ne.u32", RegClass::Pred, vec![w.into(), Arg::Imm(0)]),
            RegClass::B16 => self.b.op("cvt.u16.u32", RegClass::B16, vec![w.into()]),
            _ => w,
        }
    }

    /// Each register of `part` shuffled (`shfl.sync.{mode}`) by `amount` lanes.
    fn shuffle_part(&mut self, mode: &str, part: &[Reg], amount: u32, c: i64) -> Part {
        part.iter()
            .map(|&r| {
                let w = self.word_of(r);
                let s = self.shuffle(mode, w, amount, c);
                self.word_to_class(r.class, s)
            })
            .collect()
    }

    fn select_part(&mut self, c: Reg, a: &[Reg], b: &[Reg]) -> Part {
        a.iter()
            .zip(b)
            .map(|(&x, &y)| self.select(c, x, y))
            .collect()
    }

    /// The combination of `level` as a balanced tree of adjacent pairs (an odd last one
    /// passes up unpaired), as the interpreter combines.
    fn combine_tree(&mut self, body: Block, mut level: Vec<Part>) -> R<Part> {
        while level.len() > 1 {
            let mut next = Vec::with_capacity(level.len().div_ceil(2));
            for pair in level.chunks(2) {
                next.push(match pair {
                    [a, b] => self.combine_with(body, a, b)?,
                    [a] => a.clone(),
                    _ => unreachable!("chunks of two"),
                });
            }
            level = next;
        }
        Ok(level.pop().expect("a reduction has elements"))
    }

    pub(crate) fn lower_reduce_with(&mut self, inst: Inst) -> R<()> {
        let d = self.k.insts[inst].clone();
        let Op::ReduceWith { axis } = d.op else {
            unreachable!("a reduce_with")
        };
        let p = axis as usize;
        let body = d.regions[0];
        let shape = self.k.ty(d.args[0]).shape;
        let out_shape = shape.without_axis(p);
        let l = Layout::chunked(&shape, p, self.num_warps());
        let out_l = l.slice(p);
        let inputs = d
            .args
            .iter()
            .map(|&x| self.get(x, &l))
            .collect::<R<Vec<_>>>()?;
        let gin = l.geometry(&shape);
        let gout = out_l.geometry(&out_shape);
        // 1. Within the thread: each output's elements in index order, combined as a tree.
        let mut leaves: Vec<Vec<Part>> = vec![Vec::new(); gout.count];
        for i in 0..inputs[0].len() {
            let mut c = gin.coords(i);
            c[p] = 0;
            let o = if out_l.is_scalar() { 0 } else { gout.index(&c) };
            leaves[o].push(inputs.iter().map(|v| v[i]).collect());
        }
        let mut parts = Vec::with_capacity(leaves.len());
        for level in leaves {
            parts.push(self.combine_tree(body, level)?);
        }
        // 2. Across the lanes holding the axis: butterflies, the lower lane's part on the left
        // so that both lanes of a pair compute the same combination.
        let pp = gin.parent[p];
        let lane_stride = l.lane_strides()[p];
        let mut k = 1u32;
        while k < l.tpw[p] && k * l.spt[p] < pp {
            let bit = self.b.op(
                "and.b32",
                RegClass::B32,
                vec![self.thread.lane.into(), Arg::Imm((k * lane_stride) as i64)],
            );
            let upper = self
                .b
                .op("setp.ne.u32", RegClass::Pred, vec![bit.into(), Arg::Imm(0)]);
            for part in parts.iter_mut() {
                let other = self.shuffle_part("bfly", part, k * lane_stride, 0x1f);
                let left = self.select_part(upper, &other, part);
                let right = self.select_part(upper, part, &other);
                *part = self.combine_with(body, &left, &right)?;
            }
            k *= 2;
        }
        // 3. Across warps, through shared memory: every thread combines the warps' parts.
        let distinct_warps = l.wpc[p].min((pp / (l.tpw[p] * l.spt[p])).max(1));
        if distinct_warps > 1 {
            self.reduce_with_across_warps(&l, p, &out_shape, body, distinct_warps, &mut parts)?;
        }
        for (j, &r) in d.results.iter().enumerate() {
            let regs = parts.iter().map(|part| part[j]).collect();
            self.define(r, &out_l, regs);
        }
        Ok(())
    }

    fn reduce_with_across_warps(
        &mut self,
        l: &Layout,
        p: usize,
        out_shape: &tegula_ir::Shape,
        body: Block,
        distinct_warps: u32,
        parts: &mut [Part],
    ) -> R<()> {
        let n_out = out_shape.numel() as i64;
        let words: Vec<RegClass> = parts[0]
            .iter()
            .map(|r| match r.class {
                RegClass::Pred | RegClass::B16 => RegClass::B32,
                c => c,
            })
            .collect();
        // Byte offset of each tile's slots, 16-byte aligned.
        let align = |b: i64| (b + 15) / 16 * 16;
        let mut offsets = Vec::with_capacity(words.len());
        let mut total = 0i64;
        for c in &words {
            offsets.push(total);
            total += align(distinct_warps as i64 * n_out * c.bytes() as i64);
        }
        if total > self.max_shared() as i64 {
            return Err(self.unsupported(format!(
                "a reduction needing {total} bytes of shared memory"
            )));
        }
        let base = self.smem(total as u32);
        // The scan layout slices nothing: the axis is parent axis `p`.
        let slots = self.warp_slots(l, p, out_shape, distinct_warps);
        let out_offset = |o: usize| slots.out_offset(o);
        let my = self.warp_slot(&slots, slots.warp);
        let zero = self.imm(RegClass::B32, Arg::Imm(0));
        let first = self.warp_slot(&slots, zero);
        self.barrier();
        for (j, (&off, class)) in offsets.iter().zip(&words).enumerate() {
            let es = class.bytes() as i64;
            let addr = self.b.op(
                "mad.lo.s32",
                RegClass::B32,
                vec![my.into(), Arg::Imm(es), base.into()],
            );
            let st = super::convert::st_ty(*class);
            for (o, part) in parts.iter().enumerate() {
                let w = self.word_of(part[j]);
                self.b.emit(
                    format!("st.shared{st}"),
                    vec![
                        Arg::Addr(Box::new(addr.into()), off + out_offset(o) * es),
                        w.into(),
                    ],
                );
            }
        }
        self.barrier();
        let classes: Vec<RegClass> = parts[0].iter().map(|r| r.class).collect();
        let addrs: Vec<Reg> = words
            .iter()
            .map(|c| {
                self.b.op(
                    "mad.lo.s32",
                    RegClass::B32,
                    vec![first.into(), Arg::Imm(c.bytes() as i64), base.into()],
                )
            })
            .collect();
        for (o, part) in parts.iter_mut().enumerate() {
            let mut level = Vec::with_capacity(distinct_warps as usize);
            for w in 0..distinct_warps as i64 {
                let mut from_warp = Vec::with_capacity(words.len());
                for (j, &class) in words.iter().enumerate() {
                    let es = class.bytes() as i64;
                    let st = super::convert::st_ty(class);
                    let v = self.b.op(
                        format!("ld.shared{st}"),
                        class,
                        vec![Arg::Addr(
                            Box::new(addrs[j].into()),
                            offsets[j] + (w * n_out + out_offset(o)) * es,
                        )],
                    );
                    from_warp.push(self.word_to_class(classes[j], v));
                }
                level.push(from_warp);
            }
            *part = self.combine_tree(body, level)?;
        }
        Ok(())
    }

    pub(crate) fn lower_scan_with(&mut self, inst: Inst) -> R<()> {
        let d = self.k.insts[inst].clone();
        let Op::ScanWith { axis, reverse } = d.op else {
            unreachable!("a scan_with")
        };
        let p = axis as usize;
        let body = d.regions[0];
        let shape = self.k.ty(d.args[0]).shape;
        let ls = Layout::chunked(&shape, p, self.num_warps());
        let flip = Remap::flip(&shape, p);
        let mut inputs = Vec::with_capacity(d.args.len());
        for &x in &d.args {
            let ty = self.k.ty(x);
            let (l, _) = self.natural(x);
            let vals = self.get(x, &l)?;
            inputs.push(self.convert(&vals, ty, &l, &ls, reverse.then_some(&flip))?);
        }
        let g = ls.geometry(&shape);
        let count = inputs[0].len();
        // 1. The thread's run, in order.
        let mut acc: Vec<Part> = (0..count)
            .map(|i| inputs.iter().map(|v| v[i]).collect())
            .collect();
        for i in 0..count {
            if g.coords(i)[p] > 0 {
                let prev = acc[i - g.mult[p]].clone();
                acc[i] = self.combine_with(body, &prev, &acc[i].clone())?;
            }
        }
        // Run totals: the last element of each run, one per group of the other axes.
        let groups: Vec<usize> = (0..count)
            .filter(|&i| g.coords(i)[p] == g.n[p] - 1)
            .collect();
        // The lanes and warps holding distinct runs: an axis shorter than the layout's
        // threads is replicated across the rest, which must scan as copies of the first ones
        // (every copy writes the result of a reverse scan's flip).
        let pp = g.parent[p];
        let tpw = ls.tpw[p].min((pp / ls.spt[p]).max(1));
        let lane_p = self.b.op(
            "and.b32",
            RegClass::B32,
            vec![self.thread.lane.into(), Arg::Imm(tpw as i64 - 1)],
        );
        // 2. Inclusive scan of run totals across lanes (Hillis-Steele, the lower lanes on the
        // left), then each lane's exclusive prefix, valid from lane 1 on.
        let mut lane_incl = Vec::with_capacity(groups.len());
        let mut lane_excl = Vec::with_capacity(groups.len());
        for &gi in &groups {
            let mut incl = acc[gi].clone();
            let mut k = 1;
            while k < tpw {
                let t = self.shuffle_part("up", &incl, k, 0);
                let ok = self.b.op(
                    "setp.ge.u32",
                    RegClass::Pred,
                    vec![lane_p.into(), Arg::Imm(k as i64)],
                );
                let c = self.combine_with(body, &t, &incl)?;
                incl = self.select_part(ok, &c, &incl);
                k *= 2;
            }
            let excl = (tpw > 1).then(|| self.shuffle_part("up", &incl, 1, 0));
            lane_incl.push(incl);
            lane_excl.push(excl);
        }
        let has_lane_prefix = self.b.op(
            "setp.ge.u32",
            RegClass::Pred,
            vec![lane_p.into(), Arg::Imm(1)],
        );
        // 3. Across warps: the combination of the totals of the warps before this one, valid
        // from warp 1 on.
        let wpc = ls.wpc[p].min((pp / (tpw * ls.spt[p])).max(1));
        let mut warp_prefix: Vec<Option<Part>> = vec![None; groups.len()];
        let mut has_warp_prefix = None;
        if wpc > 1 {
            let wc = self.warp_coord(&ls, p);
            let wcoord = self.b.op(
                "and.b32",
                RegClass::B32,
                vec![wc.into(), Arg::Imm(wpc as i64 - 1)],
            );
            has_warp_prefix = Some(self.b.op(
                "setp.gt.u32",
                RegClass::Pred,
                vec![wcoord.into(), Arg::Imm(0)],
            ));
            let words: Vec<RegClass> = lane_incl[0]
                .iter()
                .map(|r| match r.class {
                    RegClass::Pred | RegClass::B16 => RegClass::B32,
                    c => c,
                })
                .collect();
            let mut ostr: Vec<i64> = vec![0; shape.rank()];
            let mut m = 1i64;
            for dd in (0..shape.rank()).rev() {
                if dd != p {
                    ostr[dd] = m * wpc as i64;
                    m *= shape.dim(dd) as i64;
                }
            }
            // Slots in elements: [tile][other axes][warp], each tile's 16-byte aligned.
            let per_tile = m * wpc as i64;
            let mut offsets = Vec::with_capacity(words.len());
            let mut total = 0i64;
            for c in &words {
                offsets.push(total);
                total += (per_tile * c.bytes() as i64 + 15) / 16 * 16;
            }
            let base = self.smem(total as u32);
            let last_lane = self.b.op(
                "setp.eq.u32",
                RegClass::Pred,
                vec![lane_p.into(), Arg::Imm(tpw as i64 - 1)],
            );
            // Element offset of this thread's group and warp.
            let elem_strides: Vec<i64> = ostr.clone();
            let toff = self.thread_offset(&ls, &shape, &elem_strides);
            let mine = match toff {
                Some(t) => self
                    .b
                    .op("add.s32", RegClass::B32, vec![t.into(), wcoord.into()]),
                None => wcoord,
            };
            let group0 = toff.unwrap_or_else(|| self.imm(RegClass::B32, Arg::Imm(0)));
            self.barrier();
            for (gk, &gi) in groups.iter().enumerate() {
                let c = Lower::reg_offset(&g, gi, &ostr);
                for (j, class) in words.iter().enumerate() {
                    let es = class.bytes() as i64;
                    let addr = self.b.op(
                        "mad.lo.s32",
                        RegClass::B32,
                        vec![mine.into(), Arg::Imm(es), base.into()],
                    );
                    let w = self.word_of(lane_incl[gk][j]);
                    let st = super::convert::st_ty(*class);
                    self.b.emit_guarded(
                        last_lane,
                        false,
                        format!("st.shared{st}"),
                        vec![
                            Arg::Addr(Box::new(addr.into()), offsets[j] + c * es),
                            w.into(),
                        ],
                    );
                }
            }
            self.barrier();
            let classes: Vec<RegClass> = lane_incl[0].iter().map(|r| r.class).collect();
            for (gk, &gi) in groups.iter().enumerate() {
                let c = Lower::reg_offset(&g, gi, &ostr);
                let mut wp: Option<Part> = None;
                for w in 0..wpc as i64 {
                    let mut total_w = Vec::with_capacity(words.len());
                    for (j, &class) in words.iter().enumerate() {
                        let es = class.bytes() as i64;
                        let addr = self.b.op(
                            "mad.lo.s32",
                            RegClass::B32,
                            vec![group0.into(), Arg::Imm(es), base.into()],
                        );
                        let st = super::convert::st_ty(class);
                        let v = self.b.op(
                            format!("ld.shared{st}"),
                            class,
                            vec![Arg::Addr(Box::new(addr.into()), offsets[j] + (c + w) * es)],
                        );
                        total_w.push(self.word_to_class(classes[j], v));
                    }
                    wp = Some(match wp {
                        None => total_w,
                        Some(acc_w) => {
                            // Only the warps before this one count.
                            let before = self.b.op(
                                "setp.gt.u32",
                                RegClass::Pred,
                                vec![wcoord.into(), Arg::Imm(w)],
                            );
                            let c2 = self.combine_with(body, &acc_w, &total_w)?;
                            self.select_part(before, &c2, &acc_w)
                        }
                    });
                }
                warp_prefix[gk] = wp;
            }
        }
        // 4. Each element: (warp prefix) (+) ((lane prefix) (+) its run's inclusive value).
        let mut out: Vec<Vec<Reg>> = vec![Vec::with_capacity(count); d.args.len()];
        for (i, a) in acc.iter().enumerate() {
            let mut c = g.coords(i);
            c[p] = g.n[p] - 1;
            let gi = g.index(&c);
            let gk = groups.iter().position(|&x| x == gi).expect("group");
            let mut v = a.clone();
            if let Some(excl) = &lane_excl[gk] {
                let c = self.combine_with(body, excl, &v)?;
                v = self.select_part(has_lane_prefix, &c, &v);
            }
            if let (Some(wp), Some(has)) = (&warp_prefix[gk], has_warp_prefix) {
                let c = self.combine_with(body, wp, &v)?;
                v = self.select_part(has, &c, &v);
            }
            for (j, r) in v.into_iter().enumerate() {
                out[j].push(r);
            }
        }
        for (j, &r) in d.results.iter().enumerate() {
            let ty = self.k.ty(r);
            let vals = if reverse {
                self.convert(&out[j], ty, &ls, &ls, Some(&flip))?
            } else {
                std::mem::take(&mut out[j])
            };
            self.define(r, &ls, vals);
        }
        Ok(())
    }
}
