//! Global loads, stores and atomics.
//!
//! A load or store runs in the blocked layout whose per-thread run along the last axis is the
//! vector width axis analysis allows (16 bytes at most): contiguous, aligned elements, with a
//! mask constant over the vector. Each run is one `ld.global.v{2,4}` / `st.global.v{2,4}` of
//! 32-bit (or 64-bit) words; masked-off runs skip the access under a predicate and keep the
//! `other` value moved into the destination beforehand. Stores and atomics of replicated
//! layouts run on the owner copy only.

use super::types::{class_of, is_narrow_int, mem_ty};
use super::{Lower, Vals, R};
use crate::layout::Layout;
use crate::ptx::{Arg, Reg, RegClass, Ty};
use tegula_ir::{
    AtomicOp, BinaryOp, CacheModifier, Constant, DType, Elem, EvictionPolicy, Inst, MemSem, Op,
    Value, ValueDef,
};

/// Bytes per word and words per vector access for `vec` consecutive elements of `es` bytes:
/// 32-bit words (64-bit for 8-byte elements), or one narrower word when the run is shorter.
pub(super) fn word_plan(es: u32, vec: u32) -> (u32, u32) {
    let total = es * vec;
    let ws = if es == 8 { 8 } else { total.min(4) };
    (ws, total.div_ceil(ws))
}

fn word_class(ws: u32) -> RegClass {
    match ws {
        8 => RegClass::B64,
        2 => RegClass::B16,
        _ => RegClass::B32,
    }
}

pub(super) fn word_ty(ws: u32) -> Ty {
    match ws {
        8 => Ty::B64,
        4 => Ty::B32,
        2 => Ty::B16,
        _ => Ty::U8,
    }
}

/// The `.vN` of a vector access of `n` words (nothing for one).
pub(super) fn vec_suffix(n: u32) -> String {
    if n > 1 {
        format!(".v{n}")
    } else {
        String::new()
    }
}

impl Lower<'_> {
    /// The vector width of a load, store or atomic (the plan's).
    pub(crate) fn access_vec(&self, inst: Inst) -> u32 {
        self.plan.layouts.access(inst).vec
    }

    /// The layout a load, store or atomic runs in (the plan's).
    pub(crate) fn access_layout(&self, inst: Inst) -> Layout {
        self.plan.layouts.access(inst).layout.clone()
    }

    fn cache_suffix(&mut self, cache: CacheModifier, store: bool) -> &'static str {
        match (cache, store) {
            (CacheModifier::Ca, false) => ".ca",
            (CacheModifier::Cg, _) => ".cg",
            (CacheModifier::Cs, _) => ".cs",
            (CacheModifier::Wb, true) => ".wb",
            (CacheModifier::Wt, true) => ".wt",
            _ => "",
        }
    }

    fn policy_of(&mut self, evict: EvictionPolicy) -> Option<Reg> {
        match evict {
            EvictionPolicy::Normal => None,
            EvictionPolicy::First => Some(self.policy(false)),
            EvictionPolicy::Last => Some(self.policy(true)),
        }
    }

    /// Packs `elems` (registers of dtype `d`) into one word of `ws` bytes.
    pub(super) fn pack(&mut self, d: DType, elems: &[Reg], ws: u32) -> Reg {
        let es = d.size_bytes() as u32;
        let wc = word_class(ws);
        if es == ws {
            let e = elems[0];
            return match (e.class, wc) {
                (RegClass::Pred, _) => {
                    self.b
                        .op("selp.u32", wc, vec![Arg::Imm(1), Arg::Imm(0), e.into()])
                }
                (a, b) if a == b => e,
                (a, b) => self.b.op(format!("mov{}", a.bits_ty()), b, vec![e.into()]),
            };
        }
        if es == 2 {
            let halves: Vec<Reg> = elems
                .iter()
                .map(|&e| {
                    if e.class == RegClass::B16 {
                        e
                    } else {
                        self.b.op("cvt.u16.u32", RegClass::B16, vec![e.into()])
                    }
                })
                .collect();
            return self.b.op("mov.b32", RegClass::B32, vec![Arg::Vec(halves)]);
        }
        // Bytes into a 32-bit word.
        let mut w = self.imm(RegClass::B32, Arg::Imm(0));
        for (k, &e) in elems.iter().enumerate() {
            let e = if e.class == RegClass::Pred {
                self.b.op(
                    "selp.u32",
                    RegClass::B32,
                    vec![Arg::Imm(1), Arg::Imm(0), e.into()],
                )
            } else {
                e
            };
            w = self.b.op(
                "bfi.b32",
                RegClass::B32,
                vec![e.into(), w.into(), Arg::Imm(8 * k as i64), Arg::Imm(8)],
            );
        }
        w
    }

    /// Splits a word of `ws` bytes into `count` elements of dtype `d`.
    pub(super) fn unpack(&mut self, d: DType, w: Reg, ws: u32, count: usize) -> Vals {
        let es = d.size_bytes() as u32;
        let ec = class_of(Elem::Scalar(d));
        if es == ws {
            return vec![match (w.class, ec) {
                (_, RegClass::Pred) => {
                    self.b
                        .op("setp.ne.u32", RegClass::Pred, vec![w.into(), Arg::Imm(0)])
                }
                (a, b) if a == b => w,
                (a, b) => self.b.op(format!("mov{}", a.bits_ty()), b, vec![w.into()]),
            }];
        }
        if es == 2 {
            let halves: Vec<Reg> = (0..count).map(|_| self.b.reg(RegClass::B16)).collect();
            self.b
                .emit("mov.b32", vec![Arg::Vec(halves.clone()), w.into()]);
            // The word holds nothing else after this point (its definitions, the load and the
            // preset before a guarded load, come just before), so it can stand for its halves.
            for (k, &h) in halves.iter().enumerate() {
                self.packed_halves.insert(h, (w, k == 1));
            }
            return halves
                .into_iter()
                .map(|h| match ec {
                    RegClass::B16 => h,
                    _ => {
                        let op = if d.is_signed_int() {
                            "cvt.s32.s16"
                        } else {
                            "cvt.u32.u16"
                        };
                        self.b.op(op, RegClass::B32, vec![h.into()])
                    }
                })
                .collect();
        }
        (0..count)
            .map(|k| {
                let op = if d.is_signed_int() {
                    "bfe.s32"
                } else {
                    "bfe.u32"
                };
                let e = self.b.op(
                    op,
                    RegClass::B32,
                    vec![w.into(), Arg::Imm(8 * k as i64), Arg::Imm(8)],
                );
                if d == DType::I1 {
                    self.b
                        .op("setp.ne.u32", RegClass::Pred, vec![e.into(), Arg::Imm(0)])
                } else {
                    e
                }
            })
            .collect()
    }

    pub(crate) fn lower_load(&mut self, inst: Inst) -> R<()> {
        let d = self.k.insts[inst].clone();
        let Op::Load {
            has_mask,
            has_other,
            cache,
            evict,
            volatile,
        } = d.op
        else {
            unreachable!()
        };
        let ty = self.k.ty(d.results[0]);
        let dt = ty.dtype();
        let l = self.access_layout(inst);
        let vec = self
            .access_vec(inst)
            .min(Lower::contiguous_run(&l, &ty.shape)) as usize;
        let ptrs = self.get(d.args[0], &l)?;
        // A rank-1 tile addresses every access from the thread's first pointer when the
        // offsets are compile-time constants (a row slice of an mma accumulator, say).
        let from_first = if ty.shape.rank() == 1 {
            self.address_deltas(d.args[0], &l)
        } else {
            None
        };
        let mask = if has_mask {
            Some(self.get(d.args[1], &l)?)
        } else {
            None
        };
        let other = if has_other {
            Some(self.get(d.args[2], &l)?)
        } else {
            None
        };
        let es = dt.size_bytes() as u32;
        let (ws, nw) = word_plan(es, vec as u32);
        let per_word = (ws / es) as usize;
        let narrow_scalar = vec == 1 && es < 4 && !dt.is_float();
        let cop = if volatile {
            ""
        } else {
            self.cache_suffix(cache, false)
        };
        let policy = if volatile {
            None
        } else {
            self.policy_of(evict)
        };
        let space = if volatile {
            "ld.volatile.global"
        } else {
            "ld.global"
        };
        let hint = if policy.is_some() {
            ".L2::cache_hint"
        } else {
            ""
        };
        let mut out = Vec::with_capacity(ptrs.len());
        for g in 0..ptrs.len() / vec {
            let lanes = g * vec..(g + 1) * vec;
            let guard = mask.as_ref().map(|m| m[lanes.start]);
            // Destination words, preset to `other` (or zero) when the access may be skipped.
            let words: Vec<Reg> = (0..nw as usize)
                .map(|w| {
                    let first = lanes.start + w * per_word;
                    match (guard, &other) {
                        (Some(_), Some(o)) if !narrow_scalar => {
                            let packed = self.pack(dt, &o[first..first + per_word], ws);
                            let r = self.b.reg(word_class(ws));
                            self.b.mov(r, packed);
                            r
                        }
                        (Some(_), Some(o)) => {
                            let r = self.b.reg(RegClass::B32);
                            let v = if o[first].class == RegClass::Pred {
                                self.b.op(
                                    "selp.u32",
                                    RegClass::B32,
                                    vec![Arg::Imm(1), Arg::Imm(0), o[first].into()],
                                )
                            } else {
                                o[first]
                            };
                            self.b.mov(r, v);
                            r
                        }
                        (Some(_), None) => {
                            let c = if narrow_scalar {
                                RegClass::B32
                            } else {
                                word_class(ws)
                            };
                            self.imm(c, Arg::Imm(0))
                        }
                        (None, _) => self.b.reg(if narrow_scalar {
                            RegClass::B32
                        } else {
                            word_class(ws)
                        }),
                    }
                })
                .collect();
            let ety = if narrow_scalar {
                mem_ty(dt)
            } else {
                word_ty(ws)
            };
            let dst = if nw > 1 {
                Arg::Vec(words.clone())
            } else {
                Arg::Reg(words[0])
            };
            let addr = match &from_first {
                Some(bytes) => Arg::Addr(Box::new(ptrs[0].into()), bytes[lanes.start]),
                None => Arg::Addr(Box::new(ptrs[lanes.start].into()), 0),
            };
            let mut args = vec![dst, addr];
            if let Some(p) = policy {
                args.push(p.into());
            }
            let opc = format!("{space}{cop}{hint}{}{ety}", vec_suffix(nw));
            match guard {
                Some(p) => self.b.emit_guarded(p, false, opc, args),
                None => self.b.emit(opc, args),
            }
            for &w in &words {
                if narrow_scalar {
                    out.push(if dt == DType::I1 {
                        self.b
                            .op("setp.ne.u32", RegClass::Pred, vec![w.into(), Arg::Imm(0)])
                    } else {
                        w
                    });
                } else {
                    out.extend(self.unpack(dt, w, ws, per_word));
                }
            }
        }
        self.define(d.results[0], &l, out);
        Ok(())
    }

    pub(crate) fn lower_store(&mut self, inst: Inst) -> R<()> {
        let d = self.k.insts[inst].clone();
        let Op::Store {
            has_mask,
            cache,
            evict,
        } = d.op
        else {
            unreachable!()
        };
        let pty = self.k.ty(d.args[0]);
        let dt = pty.dtype();
        let l = self.access_layout(inst);
        let vec = self.access_vec(inst) as usize;
        let ptrs = self.get(d.args[0], &l)?;
        let vals = self.stored_value(d.args[1], &l)?;
        let mask = if has_mask {
            Some(self.get(d.args[2], &l)?)
        } else {
            None
        };
        let owner = self.owner(&l, &pty.shape);
        let es = dt.size_bytes() as u32;
        let (ws, nw) = word_plan(es, vec as u32);
        let per_word = (ws / es) as usize;
        let narrow_scalar = vec == 1 && es < 4 && !dt.is_float();
        let cop = self.cache_suffix(cache, true);
        let policy = self.policy_of(evict);
        let hint = if policy.is_some() {
            ".L2::cache_hint"
        } else {
            ""
        };
        for g in 0..ptrs.len() / vec {
            let start = g * vec;
            let guard = self.access_guard(mask.as_ref().map(|m| m[start]), owner);
            let words: Vec<Reg> = (0..nw as usize)
                .map(|w| {
                    let first = start + w * per_word;
                    if narrow_scalar {
                        let v = vals[first];
                        if v.class == RegClass::Pred {
                            self.b.op(
                                "selp.u32",
                                RegClass::B32,
                                vec![Arg::Imm(1), Arg::Imm(0), v.into()],
                            )
                        } else {
                            v
                        }
                    } else {
                        self.pack(dt, &vals[first..first + per_word], ws)
                    }
                })
                .collect();
            let ety = if narrow_scalar {
                mem_ty(dt)
            } else {
                word_ty(ws)
            };
            let src = if nw > 1 {
                Arg::Vec(words)
            } else {
                Arg::Reg(words[0])
            };
            let mut args = vec![Arg::Addr(Box::new(ptrs[start].into()), 0), src];
            if let Some(p) = policy {
                args.push(p.into());
            }
            let opc = format!("st.global{cop}{hint}{}{ety}", vec_suffix(nw));
            match guard {
                Some(p) => self.b.emit_guarded(p, false, opc, args),
                None => self.b.emit(opc, args),
            }
        }
        Ok(())
    }

    pub(crate) fn lower_atomic(&mut self, inst: Inst) -> R<()> {
        let d = self.k.insts[inst].clone();
        let pty = self.k.ty(d.args[0]);
        let dt = pty.dtype();
        let l = self.access_layout(inst);
        let ptrs = self.get(d.args[0], &l)?;
        let (op, sem, scope, vals, cmp, mask) = match d.op {
            Op::Atomic {
                op,
                has_mask,
                sem,
                scope,
            } => {
                let v = self.get(d.args[1], &l)?;
                let m = if has_mask {
                    Some(self.get(d.args[2], &l)?)
                } else {
                    None
                };
                (Some(op), sem, scope, v, None, m)
            }
            Op::AtomicCas { sem, scope } => {
                let c = self.get(d.args[1], &l)?;
                let v = self.get(d.args[2], &l)?;
                (None, sem, scope, v, Some(c), None)
            }
            _ => unreachable!(),
        };
        if is_narrow_int(dt) || dt == DType::I1 {
            return Err(self.unsupported(format!(
                "atomics on {dt} (PTX atomics are 16 bits and wider)"
            )));
        }
        // `atom{.sem}{.scope}` and `red{.sem}{.scope}`: PTX writes the ordering, then the
        // scope, both always spelled out (an `atom` without `.sem` would be relaxed).
        let order = format!(".{}.{}", sem.name(), scope.name());
        let owner = self.owner(&l, &pty.shape);
        if let Some(op) = op.filter(|_| self.result_unused(inst)) {
            if let Some(suffix) = self.red_rule(op, dt, sem) {
                let vec = self.plan.layouts.access(inst).red_vec as usize;
                let deltas = self.address_deltas(d.args[0], &l);
                self.lower_red(
                    &l,
                    &pty.shape,
                    &ptrs,
                    &vals,
                    mask.as_deref(),
                    owner,
                    &order,
                    &suffix,
                    vec,
                    deltas.as_deref(),
                );
                return Ok(());
            }
        }
        let class = class_of(Elem::Scalar(dt));
        let deltas = self.address_deltas(d.args[0], &l);
        let mut out = Vec::with_capacity(ptrs.len());
        for i in 0..ptrs.len() {
            let guard = self.access_guard(mask.as_ref().map(|m| m[i]), owner);
            let res = self.imm(class, zero_of(class));
            let addr = match &deltas {
                Some(dl) => Arg::Addr(Box::new(ptrs[0].into()), dl[i]),
                None => Arg::Addr(Box::new(ptrs[i].into()), 0),
            };
            let direct = match op {
                Some(op) => self.atom_rule(op, dt),
                None => Some(format!("cas{}", class.bits_ty())),
            };
            match direct {
                Some(suffix) => {
                    let mut args = vec![res.into(), addr];
                    if let Some(c) = &cmp {
                        args.push(c[i].into());
                    }
                    args.push(vals[i].into());
                    let opc = format!("atom{order}.global.{suffix}");
                    match guard {
                        Some(g) => self.b.emit_guarded(g, false, opc, args),
                        None => self.b.emit(opc, args),
                    }
                }
                None => {
                    let op = op.expect("cas is always direct");
                    self.cas_loop(op, dt, &order, ptrs[i], vals[i], res, guard)?;
                }
            }
            out.push(res);
        }
        // Replicas skipped the atomic: give them the owner's old value.
        let out = if owner.is_some() {
            let shape = pty.shape;
            let bytes = shape.numel() as u32 * class.bytes();
            self.smem(bytes);
            self.barrier();
            let st = Lower::parent_strides(&l, &shape, 1);
            self.smem_write(&out, &shape, &l, &st, 0, owner);
            self.barrier();
            self.smem_read(class, &shape, &l, &st, 0)
        } else {
            out
        };
        self.define(d.results[0], &l, out);
        Ok(())
    }

    /// True when no live instruction reads the atomic's result (the old values), so it can be
    /// a `red`, which returns nothing and needs no exchange between replicas.
    fn result_unused(&self, inst: Inst) -> bool {
        !self.cx.uses.is_read(self.k.insts[inst].results[0])
    }

    /// The `red` opcode suffix for an atomic whose result is unused: the `atom` operation where
    /// `red` has it too (not exchange) and the ordering is one `red` takes (`red_takes`): an
    /// acquire or acq_rel atomic stays an `atom` whose result is dropped. `red` takes every
    /// scope.
    fn red_rule(&self, op: AtomicOp, d: DType, sem: MemSem) -> Option<String> {
        if op == AtomicOp::Xchg || !red_takes(sem) {
            return None;
        }
        self.atom_rule(op, d)
    }

    /// `red` for an atomic whose result is unused: one instruction per `vec` contiguous
    /// elements of a thread, on the owner copy of replicated elements only. With `deltas`
    /// (see `address_deltas`), every `red` addresses `[ptrs[0] + delta]`.
    #[allow(clippy::too_many_arguments)]
    fn lower_red(
        &mut self,
        l: &Layout,
        shape: &tegula_ir::Shape,
        ptrs: &[Reg],
        vals: &[Reg],
        mask: Option<&[Reg]>,
        owner: Option<Reg>,
        order: &str,
        suffix: &str,
        vec: usize,
        deltas: Option<&[i64]>,
    ) {
        let geo = (vec > 1).then(|| l.geometry(shape));
        for i in 0..ptrs.len() {
            // The registers of the run that starts at register i (counters along the last axis).
            let group: Vec<usize> = match &geo {
                None => vec![i],
                Some(g) => {
                    let c = g.coords(i);
                    let last = c.len() - 1;
                    if c[last] % vec != 0 {
                        continue;
                    }
                    (0..vec)
                        .map(|k| {
                            let mut ck = c.clone();
                            ck[last] += k;
                            g.index(&ck)
                        })
                        .collect()
                }
            };
            let guard = self.access_guard(mask.map(|m| m[i]), owner);
            let addr = match deltas {
                Some(dl) => Arg::Addr(Box::new(ptrs[0].into()), dl[i]),
                None => Arg::Addr(Box::new(ptrs[i].into()), 0),
            };
            let (opc, src) = if vec > 1 {
                let regs = group.iter().map(|&j| vals[j]).collect();
                (format!("red{order}.global.add.v{vec}.f32"), Arg::Vec(regs))
            } else {
                (format!("red{order}.global.{suffix}"), vals[i].into())
            };
            let args = vec![addr, src];
            match guard {
                Some(g) => self.b.emit_guarded(g, false, opc, args),
                None => self.b.emit(opc, args),
            }
        }
    }

    /// Per register of pointer tile `ptr` in layout `l`, its address minus register 0's in
    /// bytes, when that difference is a compile-time constant: the tile is a base plus offsets
    /// built from aranges, splats, broadcasts, integer adds and subtractions, and products by
    /// constants (`base + offs_m[:, None] * 128 + offs_d[None, :]`). A thread's registers of an
    /// arange differ by constants in every layout (`lower_free` builds them as the thread's
    /// position plus a per-register immediate), so then every access can address
    /// `[ptrs[0] + delta]`: one base register, no 64-bit address arithmetic per element, and
    /// no address registers for ptxas to recycle between in-flight atomics. `None` when any
    /// difference depends on data or on a runtime value (a stride passed as a parameter).
    ///
    /// The deltas are exact integer arithmetic; they equal the registers' differences unless the
    /// 32-bit offsets wrap around, where the addresses were not meaningful in the first place.
    fn address_deltas(&self, ptr: Value, l: &Layout) -> Option<Vec<i64>> {
        let deltas = self.constant_deltas(ptr, l)?;
        deltas
            .iter()
            .all(|&x| i32::try_from(x).is_ok())
            .then_some(deltas)
    }

    /// Per register of `v` in layout `l`, its value minus register 0's (pointers: in bytes),
    /// when that is a compile-time constant. Mirrors how `lower_free` builds the registers.
    fn constant_deltas(&self, v: Value, l: &Layout) -> Option<Vec<i64>> {
        let ty = self.k.ty(v);
        if ty.shape.is_scalar() {
            // One register, whatever defines it.
            return Some(vec![0]);
        }
        let geom = l.geometry(&ty.shape);
        let n = geom.count;
        let ValueDef::Result(inst, _) = self.k.values[v].def else {
            return None;
        };
        let d = &self.k.insts[inst];
        let int_arith = !ty.is_ptr()
            && matches!(
                ty.dtype(),
                DType::I32 | DType::U32 | DType::I64 | DType::U64
            );
        match &d.op {
            Op::Const(_) | Op::Splat => Some(vec![0; n]),
            Op::Arange { .. } => {
                let axis = l.kept()[0];
                let at = |i: usize| geom.const_index(axis, geom.coords(i)[axis]) as i64;
                let first = at(0);
                Some((0..n).map(|i| at(i) - first).collect())
            }
            Op::Broadcast => {
                let src_shape = self.k.ty(d.args[0]).shape;
                let src = self.constant_deltas(d.args[0], l)?;
                let gs = l.geometry(&src_shape);
                // Register 0 of the source is register 0's source too: its delta stays zero.
                Some(
                    (0..n)
                        .map(|i| src[gs.broadcast_source(&geom.coords(i))])
                        .collect(),
                )
            }
            Op::ExpandDims { axis } => {
                if self.k.ty(d.args[0]).shape.is_scalar() {
                    return Some(vec![0; n]);
                }
                self.constant_deltas(d.args[0], &l.slice(*axis as usize))
            }
            Op::MultipleOf { .. } | Op::MaxContiguous { .. } | Op::MaxConstancy { .. } => {
                self.constant_deltas(d.args[0], l)
            }
            Op::AddPtr => {
                let es = ty.dtype().size_bytes() as i64;
                let p = self.constant_deltas(d.args[0], l)?;
                let o = self.constant_deltas(d.args[1], l)?;
                p.iter()
                    .zip(&o)
                    .map(|(&p, &o)| o.checked_mul(es)?.checked_add(p))
                    .collect()
            }
            Op::Binary(op @ (BinaryOp::Add | BinaryOp::Sub)) if int_arith => {
                let a = self.constant_deltas(d.args[0], l)?;
                let b = self.constant_deltas(d.args[1], l)?;
                a.iter()
                    .zip(&b)
                    .map(|(&x, &y)| match op {
                        BinaryOp::Add => x.checked_add(y),
                        _ => x.checked_sub(y),
                    })
                    .collect()
            }
            Op::Binary(op @ (BinaryOp::Mul | BinaryOp::Shl)) if int_arith => {
                // One operand varies, the other is the same constant in every register.
                let (var, factor) = match (
                    self.uniform_constant(d.args[0]),
                    self.uniform_constant(d.args[1]),
                ) {
                    (Some(c), _) if *op == BinaryOp::Mul => (d.args[1], c),
                    (_, Some(c)) if *op == BinaryOp::Mul => (d.args[0], c),
                    (_, Some(c)) if (0..32).contains(&c) => (d.args[0], 1i64 << c),
                    _ => return None,
                };
                let a = self.constant_deltas(var, l)?;
                a.iter().map(|&x| x.checked_mul(factor)).collect()
            }
            _ => None,
        }
    }

    /// The value of `v` when it is one integer constant in every element.
    fn uniform_constant(&self, v: Value) -> Option<i64> {
        let ValueDef::Result(inst, _) = self.k.values[v].def else {
            return None;
        };
        let d = &self.k.insts[inst];
        match d.op {
            Op::Const(Constant::Int(c)) => Some(c),
            Op::Splat | Op::Broadcast | Op::ExpandDims { .. } => self.uniform_constant(d.args[0]),
            _ => None,
        }
    }

    /// The predicate of one memory access: its mask element and the owner predicate of
    /// replicated elements (or any other condition), either, both (`and`) or none.
    pub(super) fn access_guard(&mut self, mask: Option<Reg>, owner: Option<Reg>) -> Option<Reg> {
        match (mask, owner) {
            (Some(m), Some(o)) => Some(self.b.op(
                "and.pred",
                RegClass::Pred,
                vec![m.into(), o.into()],
            )),
            (m, o) => m.or(o),
        }
    }

    /// The `atom` suffix (`add.f32`, ...) where PTX has the operation for the type.
    fn atom_rule(&self, op: AtomicOp, d: DType) -> Option<String> {
        use DType::*;
        Some(match (op, d) {
            (AtomicOp::Add, F32) => "add.f32".into(),
            (AtomicOp::Add, F64) => "add.f64".into(),
            (AtomicOp::Add, F16) => "add.noftz.f16".into(),
            (AtomicOp::Add, BF16) if self.sm() >= 90 => "add.noftz.bf16".into(),
            (AtomicOp::Add, I32 | U32) => "add.u32".into(),
            (AtomicOp::Add, I64 | U64) => "add.u64".into(),
            (AtomicOp::Max | AtomicOp::Min, I32 | U32 | I64 | U64) => {
                let t = match d {
                    I32 => ".s32",
                    U32 => ".u32",
                    I64 => ".s64",
                    _ => ".u64",
                };
                format!("{}{t}", if op == AtomicOp::Max { "max" } else { "min" })
            }
            (AtomicOp::And | AtomicOp::Or | AtomicOp::Xor, I32 | U32 | I64 | U64) => {
                let b = if d.bits() == 64 { ".b64" } else { ".b32" };
                format!("{}{b}", op.name())
            }
            (AtomicOp::Xchg, I32 | U32 | F32) => "exch.b32".into(),
            (AtomicOp::Xchg, I64 | U64 | F64) => "exch.b64".into(),
            _ => return None,
        })
    }

    /// A compare-and-swap loop for atomics PTX lacks (float max/min, 16-bit exchange, bf16 add
    /// before sm_90). Float max/min follow the IR's `max`/`min` (a NaN operand is ignored).
    #[allow(clippy::too_many_arguments)]
    fn cas_loop(
        &mut self,
        op: AtomicOp,
        d: DType,
        order: &str,
        ptr: Reg,
        v: Reg,
        res: Reg,
        guard: Option<Reg>,
    ) -> R<()> {
        let class = v.class;
        let bits = class.bits_ty();
        let wc = match class {
            RegClass::F32 => RegClass::B32,
            RegClass::F64 => RegClass::B64,
            c => c,
        };
        let skip = self.b.new_label("atom_skip");
        let top = self.b.new_label("atom_cas");
        if let Some(g) = guard {
            self.b.bra_if(g, true, &skip);
        }
        let addr = Arg::Addr(Box::new(ptr.into()), 0);
        let old = self
            .b
            .op(format!("ld.global{bits}"), wc, vec![addr.clone()]);
        self.b.place_label(&top);
        let oldv = if wc == class {
            old
        } else {
            self.b.op(format!("mov{bits}"), class, vec![old.into()])
        };
        let new = match op {
            AtomicOp::Add => self.binary(BinaryOp::Add, d, oldv, v)?,
            AtomicOp::Max => self.binary(BinaryOp::Max, d, oldv, v)?,
            AtomicOp::Min => self.binary(BinaryOp::Min, d, oldv, v)?,
            AtomicOp::Xchg => v,
            _ => return Err(self.unsupported(format!("atomic {} on {d}", op.name()))),
        };
        let newb = if wc == class {
            new
        } else {
            self.b.op(format!("mov{bits}"), wc, vec![new.into()])
        };
        let prev = self.b.op(
            format!("atom{order}.global.cas{bits}"),
            wc,
            vec![addr, old.into(), newb.into()],
        );
        let again = self.b.op(
            format!("setp.ne{bits}"),
            RegClass::Pred,
            vec![prev.into(), old.into()],
        );
        self.b.mov(old, prev);
        self.b.bra_if(again, false, &top);
        if wc == class {
            self.b.mov(res, old);
        } else {
            self.b
                .emit(format!("mov{bits}"), vec![res.into(), old.into()]);
        }
        self.b.place_label(&skip);
        Ok(())
    }
}

/// Whether PTX's `red` has the ordering `sem` (`.relaxed`, `.release`; not `.acquire` or
/// `.acq_rel`, which order accesses after a read that `red` does not return).
pub(crate) fn red_takes(sem: MemSem) -> bool {
    matches!(sem, MemSem::Relaxed | MemSem::Release)
}

fn zero_of(c: RegClass) -> Arg {
    match c {
        RegClass::F32 => Arg::F32(0.0),
        RegClass::F64 => Arg::F64(0.0),
        _ => Arg::Imm(0),
    }
}
