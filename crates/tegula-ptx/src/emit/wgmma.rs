//! `dot` on Hopper's `wgmma.mma_async` (sm_90a), when the kernel asks for it
//! ([`tegula_ir::KernelHints::wgmma`]; the matmul's and the attention forward's `WGMMA=1`).
//! The facts used here were checked on the H200 by `tegula-cuda`'s `wgmma_probe` example
//! (docs/perf-notes.md).
//!
//! Which dots: f16/bf16 in a software pipeline's loop (`pipeline.rs`) with B in one of its
//! slots, stored either way, and A either in a slot too, stored K-major (`[M, K]` rows; the
//! matmul), or in registers: a value not loaded in the loop body (FlashAttention's Q, loaded
//! before the loop, and P, the previous dot's accumulator after the softmax), read by the
//! register form of the instruction; or an A kept resident in shared memory because its
//! fragments would not fit in registers (`HOISTED_OPERAND_REGS`: the backward's K and V, Q at
//! D = 256 or 128 x 128 over 4 warps), laid out for descriptors when a wgmma candidate reads
//! it (K-major, panels, 1024-aligned; `mma.rs`, `stay_resident`). A slot may be read by other
//! dots too, either way (the backward's Q and dO: B K-major of `K Q^T`, B N-major of
//! `dS^T Q`), `mma.sync` ones through `ldmatrix`, which reads panels too. M a multiple of 16 x
//! warps (the warps form `warps / 4` warpgroups along M, each owning 64 rows of every
//! `16 x warps`), N from 8 to 256 (one instruction covers the warpgroup's whole N).
//! Slots are those the pipeline already writes (our XOR swizzle is wgmma's for 64- and
//! 128-byte rows) except that wider rows are stored as panels of 128-byte rows
//! ([`crate::mma_layout::Stage::panel_major`]), and every slot starts at a multiple of 1024
//! bytes (the swizzle pattern's period in the address bits). Other dots keep `mma.sync`.
//!
//! Register A: per warp, the ISA's wgmma A fragment of a k16 step is the `mma.sync`
//! m16n8k16 one (four words: rows `g` and `g + 8`, columns `2t..` and `8 + 2t..`), with warp
//! `w` of a warpgroup on rows `16w..16w+15` of its 64: the `mma.sync` A layout with all warps
//! along M, which is what a chained dot's accumulator already is (so P needs no conversion).
//! Every word is packed before `wgmma.fence`; a loop-invariant A once, before the loop.
//!
//! Accumulators: warp `w` of a warpgroup holds rows `16w..16w+15` of its 64, register `d[i]`
//! of lane `(g, t)` row `g + 8 ((i >> 1) & 1)` and column `8 (i >> 2) + 2t + (i & 1)`: the
//! `mma.sync` accumulator layout with all warps along M (`wm = warps`, `wn = 1`), so the
//! epilogue and everything else reading the accumulator are unchanged.
//!
//! One k-tile (the pipelined loop's iteration):
//!
//! ```text
//! cp.async.wait_group S-2; fence.proxy.async.shared::cta; bar.sync   (pipeline.rs)
//! wgmma.fence
//! per 64-row block of the warpgroup, per k16 step: wgmma.mma_async (descriptors of the slot)
//! wgmma.commit_group
//! refill of the slot read last iteration (cp.async)
//! wgmma.wait_group 0                          (before the next barrier lets the slot refill)
//! ```
//!
//! A k-tile in flight (the plan's `wgmma_in_flight`: the loop's one dot, its accumulator
//! carried by the loop and read by this dot only): the accumulators are the carried registers
//! themselves, and after the commit `wgmma.wait_group 1` retires last iteration's k-tile; a
//! barrier later (every warpgroup's is retired) the slot it read is refilled, and the
//! pipeline's epilogue waits for the last one. The tensor cores then hold the next k-tile
//! while a warpgroup waits, copies and loops.
//!
//! A loop with two dots (FlashAttention: `Q K^T`, the softmax, `P V`) runs each as above, the
//! first taking the refill (the slot of K and V read last iteration, whose wgmmas every warp
//! waited for before this iteration's barrier); the softmax reads S after its wait.
//!
//! Descriptor (64 bits): start address >> 4 in bits 0-13, leading byte offset >> 4 in 16-29,
//! stride byte offset >> 4 in 32-45, swizzle mode in 62-63 (1: 128 bytes, 2: 64 bytes).
//! K-major: stride = 8 rows; a k16 step moves the start 32 bytes along the row (into the
//! next panel past 128 bytes). N-major (`trans-b` 1): leading = one panel (K rows of 128 or
//! 64 bytes), stride = 8 rows; a k16 step moves 16 rows.

use super::{Lower, R};
use crate::mma_layout::{self as ml, MmaKind, Role, Stage};
use crate::ptx::{Arg, Reg, RegClass};
use tegula_ir::fast_hash::HashMap;
use tegula_ir::{Inst, Value};

use super::mma::{MmaPlan, SharedOperand};

/// The descriptor's leading byte offset: unused for K-major swizzled tiles (set to 16), one
/// panel (K rows) for N-major B.
fn leading_bytes(st: &Stage) -> u32 {
    if st.k_major {
        16
    } else {
        st.rows * st.row_pitch()
    }
}

/// The descriptor's high 32 bits for a stage: the stride byte offset (8 rows) and the swizzle
/// mode (bits 62-63: 1 for 128-byte rows, 2 for 64-byte rows).
fn descriptor_high(st: &Stage) -> u32 {
    let pitch = st.row_pitch();
    let stride = 8 * pitch;
    let mode = if pitch == 128 { 1 } else { 2 };
    debug_assert!(stride >> 4 < (1 << 14));
    ((stride >> 4) & 0x3fff) | (mode << 30)
}

/// The descriptor's low 32 bits without the start address: the leading byte offset (bits
/// 16-29).
fn descriptor_low_const(st: &Stage) -> u32 {
    let leading = leading_bytes(st);
    debug_assert!(leading >> 4 < (1 << 14));
    ((leading >> 4) & 0x3fff) << 16
}

/// Bytes from the stage's start to k16 step `kk` of its stored row `row` (K-major: A's
/// rows, B's columns; N-major B: `row` is 0).
fn step_offset(st: &Stage, row: u32, kk: u32) -> u32 {
    let pitch = st.row_pitch();
    if !st.k_major {
        return 16 * kk * pitch;
    }
    let k_bytes = 32 * kk;
    if st.panel_major {
        (k_bytes / 128) * st.rows * 128 + row * 128 + k_bytes % 128
    } else {
        row * pitch + k_bytes
    }
}

/// Where a `wgmma` reads its A operand.
enum AOperand {
    /// A pipeline slot (K-major): the stage and the descriptor's low word (this iteration's
    /// slot and warpgroup) and high word.
    Slot(Stage, Reg, Reg),
    /// Registers: per (64-row block, k16 step), the four packed words of the fragment.
    Registers(Vec<Vec<Reg>>),
}

/// The operand-layout counters (`ml::operand_a` with all warps along M) of element `e` of word
/// `j` of the register-A fragment of 64-row block `rb`, k-step `kk`: the `mma.sync` A
/// fragment's, since per warp the ISA's wgmma A fragment is the m16n8k16 one (m16n8k32 for
/// fp8; warp `w` of a warpgroup holds rows `16w..16w+15` of its 64; see the test).
fn register_a_counters(kind: MmaKind, rb: usize, kk: usize, j: usize, e: usize) -> [usize; 2] {
    ml::a_counters(kind, rb, kk, j, e)
}

impl Lower<'_> {
    /// `dot` on `wgmma` when the pipeline placed its operands for it; `false` (nothing
    /// emitted) otherwise, and the dot goes to `mma.sync` with the same warps.
    pub(crate) fn lower_wgmma(&mut self, inst: Inst, plan: MmaPlan) -> R<bool> {
        if !self.plan.pipelines.wgmma_dots.contains(&inst) {
            return Ok(false);
        }
        let d = self.k.insts[inst].clone();
        let (a, b, c) = (d.args[0], d.args[1], d.args[2]);
        let Some(sb) = self.slot_operand(b, Role::B, &plan) else {
            return Ok(false);
        };
        // A from its slot, or resident in shared memory (K-major, panels; the backward's K).
        let sa = self
            .slot_operand(a, Role::A, &plan)
            .or_else(|| self.wgmma_resident_a(a));
        if sa.is_some_and(|sa| !sa.stage.k_major) {
            return Ok(false);
        }
        let acc_l = ml::accumulator(plan.wm, plan.wn);
        let cshape = self.k.ty(c).shape;
        let gc = acc_l.geometry(&cshape);
        let row_blocks = gc.n[0] / 2;
        let n_tiles = gc.n[1] / 2;
        let ksteps = plan.k / plan.kind.k_step();
        // A in registers: every word packed before `wgmma.fence` (the ISA wants the fence
        // between the last ordinary write of an A register and the wgmma reading it).
        let a_words = match sa {
            Some(_) => None,
            None => Some(self.register_a_words(a, &plan, row_blocks, ksteps as usize)?),
        };
        let init = self.get(c, &acc_l)?;
        // In flight into the next iteration: the carried registers themselves (its home; a
        // copy would read them before the wait).
        let in_flight = self.plan.pipelines.wgmma_in_flight.contains(&inst);
        let acc = self.accumulator_registers(inst, &init, &acc_l)?;
        debug_assert!(
            plan.kind != MmaKind::Tf32,
            "tf32 dots are not wgmma candidates"
        );
        let (ta, tb) = (plan.kind.ptx_type(), plan.b_kind.ptx_type());
        // fp8 takes no transposes (both operands K-major) and has no trans immediates.
        let fp8 = !plan.kind.transposable();
        if fp8 && !sb.stage.k_major {
            return Ok(false);
        }
        self.b.comment(format!(
            "dot {}x{}x{} on wgmma ({} warpgroups along M, A from {})",
            plan.m,
            plan.n,
            plan.k,
            plan.wm / 4,
            if sa.is_some() {
                "shared memory"
            } else {
                "registers"
            }
        ));
        // A from its slot: this thread's warpgroup reads it from its first row (64 rows per
        // warpgroup). The descriptor must be uniform to ptxas, else it moves each of its words
        // with `R2UR` before every `HGMMA`, and ptxas cannot tell `%tid.x / 128` uniform: with
        // one warpgroup the start is a constant, with more the warpgroup comes from lane 0.
        let warp = self.thread.warp;
        let a_lo = match &sa {
            Some(sa) => {
                let pitch_a = sa.stage.row_pitch();
                let a_start = if plan.wm <= 4 {
                    self.imm(RegClass::B32, Arg::Imm(sa.stage.offset as i64))
                } else {
                    self.b.in_prologue(|b| {
                        // Broadcast from lane 0, so that ptxas knows the warpgroup uniform
                        // across the warp (as Triton's warp id is).
                        let wg = b.op("shr.u32", RegClass::B32, vec![warp.into(), Arg::Imm(2)]);
                        let wg = b.op(
                            "shfl.sync.idx.b32",
                            RegClass::B32,
                            vec![wg.into(), Arg::Imm(0), Arg::Imm(31), Arg::Imm(-1)],
                        );
                        let off = b.op(
                            "mul.lo.u32",
                            RegClass::B32,
                            vec![wg.into(), Arg::Imm((64 * pitch_a) as i64)],
                        );
                        b.op(
                            "add.s32",
                            RegClass::B32,
                            vec![off.into(), Arg::Imm(sa.stage.offset as i64)],
                        )
                    })
                };
                Some(self.descriptor_start(sa, a_start))
            }
            None => None,
        };
        let b_start = self.imm(RegClass::B32, Arg::Imm(sb.stage.offset as i64));
        let b_lo = self.descriptor_start(&sb, b_start);
        let a = match (sa, a_lo, a_words) {
            (Some(sa), Some(lo), _) => {
                let hi = self.imm(RegClass::B32, Arg::Imm(descriptor_high(&sa.stage) as i64));
                AOperand::Slot(sa.stage, lo, hi)
            }
            (_, _, Some(words)) => AOperand::Registers(words),
            _ => return Ok(false),
        };
        let b_hi = self.imm(RegClass::B32, Arg::Imm(descriptor_high(&sb.stage) as i64));
        // Scale-d true (add to the accumulator), a predicate register as the instruction
        // wants. A constant: ptxas then knows it uniform, where one computed per thread took
        // a `VOTEU` before every `HGMMA` (10 a k-step of tutorial 06's forward loop).
        let scale_d = self.b.in_prologue(|b| {
            let p = b.reg(RegClass::Pred);
            b.mov(p, Arg::Imm(1));
            p
        });
        let trans_b = i64::from(!sb.stage.k_major);
        let opcode = format!(
            "wgmma.mma_async.sync.aligned.m64n{}k{}.f32.{ta}.{tb}",
            plan.n,
            plan.kind.k_step()
        );
        self.b.emit("wgmma.fence.sync.aligned", vec![]);
        for rb in 0..row_blocks {
            let a_row = 16 * plan.wm * rb as u32;
            for kk in 0..ksteps {
                // A from shared memory: `d, a-desc, b-desc, scale-d, scale-a, scale-b, trans-a,
                // trans-b`; from registers: `d, {a0..a3}, b-desc, ..., scale-b, trans-b` (no
                // trans-a).
                let (a_arg, trans_a) = match &a {
                    AOperand::Slot(st, lo, hi) => {
                        let da = self.descriptor(*lo, *hi, step_offset(st, a_row, kk));
                        (da.into(), Some(Arg::Imm(0)))
                    }
                    AOperand::Registers(words) => {
                        let step = &words[rb * ksteps as usize + kk as usize];
                        (Arg::Vec(step.clone()), None)
                    }
                };
                let db = self.descriptor(b_lo, b_hi, step_offset(&sb.stage, 0, kk));
                let regs: Vec<Reg> = (0..n_tiles * 4)
                    .map(|i| acc[gc.index(&ml::c_counters(rb, i / 4, i % 4))])
                    .collect();
                let mut args = vec![
                    Arg::Vec(regs),
                    a_arg,
                    db.into(),
                    scale_d.into(),
                    Arg::Imm(1),
                    Arg::Imm(1),
                ];
                if !fp8 {
                    args.extend(trans_a);
                    args.push(Arg::Imm(trans_b));
                }
                self.b.emit(opcode.clone(), args);
            }
        }
        self.b.emit("wgmma.commit_group.sync.aligned", vec![]);
        if in_flight {
            // Last iteration's k-tile is done in this warpgroup (this one runs on); the
            // refill of the slot it read follows a barrier.
            self.b
                .emit("wgmma.wait_group.sync.aligned", vec![Arg::Imm(1)]);
            self.pipeline_refill_in_dot(true)?;
        } else {
            // The refill writes another slot: it overlaps the tensor cores' work.
            self.pipeline_refill_in_dot(false)?;
            self.b
                .emit("wgmma.wait_group.sync.aligned", vec![Arg::Imm(0)]);
        }
        self.define(d.results[0], &acc_l, acc);
        Ok(true)
    }

    /// A register operand's packed words, per (64-row block, k16 step), for `wgmma`'s register
    /// form. A value from outside the loop (Q) is packed once, at the hoist point of the first
    /// body inside its scope: packed in the loop, ptxas copies it into the wgmma's operand
    /// registers every iteration (64 moves a step at 128x64, D = 128, 8 warps; 232 registers
    /// against 199 packed once).
    fn register_a_words(
        &mut self,
        a: Value,
        plan: &MmaPlan,
        row_blocks: usize,
        ksteps: usize,
    ) -> R<Vec<Vec<Reg>>> {
        let home = self.home_scope(a, &mut HashMap::default());
        let here = self.current_scope();
        let point = self.vals.scopes[(home + 1).min(here + 1)..=here]
            .iter()
            .find_map(|s| s.hoist_point);
        let saved = point.map(|p| {
            (
                self.b.set_hoist_target(Some(p)),
                self.vals.hoisting_into.replace(home),
            )
        });
        let words = self.pack_register_a(a, plan, row_blocks, ksteps);
        if let Some((target, scope)) = saved {
            self.b.set_hoist_target(target);
            self.vals.hoisting_into = scope;
        }
        words
    }

    /// [`Self::register_a_words`] where the code is emitted now.
    fn pack_register_a(
        &mut self,
        a: Value,
        plan: &MmaPlan,
        row_blocks: usize,
        ksteps: usize,
    ) -> R<Vec<Vec<Reg>>> {
        let regs = self.mma_operands(&[(a, Role::A)], plan)?.remove(0);
        let ga = plan.operand_geometry(Role::A);
        let mut words = Vec::new();
        for rb in 0..row_blocks {
            for kk in 0..ksteps {
                let step: Vec<Reg> = (0..4)
                    .map(|j| {
                        let el: Vec<Reg> = (0..plan.kind.k_width() as usize)
                            .map(|e| regs[ga.index(&register_a_counters(plan.kind, rb, kk, j, e))])
                            .collect();
                        self.pack_operand(&el)
                    })
                    .collect();
                words.push(step);
            }
        }
        Ok(words)
    }

    /// The descriptor's low word for this iteration's slot (or the resident operand) without
    /// the step offset:
    /// `(slot address + start) >> 4 | leading byte offset << 16`.
    fn descriptor_start(&mut self, so: &SharedOperand, start: Reg) -> Reg {
        let base = self
            .b
            .op("add.s32", RegClass::B32, vec![so.base.into(), start.into()]);
        // A resident operand has no per-iteration slot shift.
        let addr = match so.shift {
            Some(shift) => self
                .b
                .op("add.s32", RegClass::B32, vec![base.into(), shift.into()]),
            None => base,
        };
        let lo = self
            .b
            .op("shr.u32", RegClass::B32, vec![addr.into(), Arg::Imm(4)]);
        self.b.op(
            "or.b32",
            RegClass::B32,
            vec![lo.into(), Arg::Imm(descriptor_low_const(&so.stage) as i64)],
        )
    }

    /// A 64-bit descriptor `offset` bytes past the one whose words are `lo` and `hi` (the start
    /// address field has room: shared addresses are below 2^18).
    fn descriptor(&mut self, lo: Reg, hi: Reg, offset: u32) -> Reg {
        let lo = if offset == 0 {
            lo
        } else {
            self.b.op(
                "add.s32",
                RegClass::B32,
                vec![lo.into(), Arg::Imm((offset >> 4) as i64)],
            )
        };
        self.b
            .op("mov.b64", RegClass::B64, vec![Arg::Vec(vec![lo, hi])])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// The shared address a wgmma reads for element (mn, k) of a k16 step from its descriptor,
    /// per the PTX ISA's canonical swizzled layouts (the reading `tegula-cuda`'s wgmma probe
    /// confirmed on the H200), stated independently of `Stage::stored_offset`.
    fn hardware_address(desc: u64, mn: u32, k: u32, k_major: bool) -> u32 {
        let field = |shift: u32| (((desc >> shift) & 0x3fff) << 4) as u32;
        let (start, leading, stride) = (field(0), field(16), field(32));
        let width = match desc >> 62 {
            1 => 128,
            2 => 64,
            mode => panic!("swizzle mode {mode}"),
        };
        let linear = if k_major {
            start + (mn % 8) * width + (mn / 8) * stride + 2 * k
        } else {
            let per_row = width / 2;
            start
                + 2 * (mn % per_row)
                + (mn / per_row) * leading
                + (k % 8) * width
                + (k / 8) * stride
        };
        linear ^ (((linear >> 7) & (width / 16 - 1)) << 4)
    }

    /// The descriptor the lowering builds for the stage at shared address `slot` (1024-aligned)
    /// and byte offset `start` from the stage (the warpgroup's rows), k-step `kk` of stored
    /// row `row`.
    fn descriptor(st: &Stage, slot: u32, start: u32, row: u32, kk: u32) -> u64 {
        let lo = (((slot + st.offset + start) >> 4) | descriptor_low_const(st))
            + (step_offset(st, row, kk) >> 4);
        u64::from(lo) | (u64::from(descriptor_high(st)) << 32)
    }

    /// Every element of a stage as the pipeline's copies store it: address -> (row, col).
    fn stored(st: &Stage, slot: u32) -> HashMap<u32, (u32, u32)> {
        let mut map = HashMap::new();
        for row in 0..st.rows {
            for col in 0..st.cols {
                let at = slot + st.offset + st.stored_offset(row, 2 * col);
                assert!(st.stored_offset(row, 2 * col) < st.bytes());
                assert!(
                    map.insert(at, (row, col)).is_none(),
                    "{st:?} ({row}, {col})"
                );
            }
        }
        map
    }

    fn stage(role: Role, rows: u32, cols: u32, k_major: bool) -> Stage {
        Stage {
            role,
            kind: MmaKind::BF16,
            rows,
            cols,
            k_major,
            offset: 4096,
            panel_major: cols * 2 > 128,
        }
    }

    /// Register A: the elements each thread packs into word `j` of k16 step `kk` of 64-row
    /// block `rb` (through the operand layout with all warps along M) are those the PTX ISA's
    /// wgmma `.m64nNk16` A fragment gives it, stated here independently: in warpgroup `g` of
    /// block `rb`, warp `w` (of 4) holds rows `16w..16w+15`; lane (`q = lane / 4`, `t = lane %
    /// 4`) holds a0, a1 at row `q`, columns `2t, 2t+1`; a2, a3 at row `q + 8`; a4..a7 the same
    /// 8 columns on. Rows of block `rb` start at `rb * 16 * warps`, warpgroup `g`'s at `64g`.
    #[test]
    fn register_a_fragments_are_the_isa_layout() {
        for (m, k, warps) in [(64, 64, 4), (128, 128, 8), (128, 64, 4), (256, 32, 8)] {
            let layout = ml::operand_a(MmaKind::BF16, warps);
            let shape = tegula_ir::Shape::new(&[m as usize, k as usize]).expect("rank 2");
            let g = layout.geometry(&shape);
            for thread in 0..32 * warps {
                let elements = layout.thread_elements(&shape, thread);
                let (warp, lane) = (thread / 32, thread % 32);
                let (q, t) = (lane / 4, lane % 4);
                for rb in 0..m / (16 * warps) {
                    for kk in 0..k / 16 {
                        for j in 0..4 {
                            for e in 0..2 {
                                let c = register_a_counters(
                                    MmaKind::BF16,
                                    rb as usize,
                                    kk as usize,
                                    j,
                                    e,
                                );
                                let at = elements[g.index(&c)];
                                let a = 2 * j as u32 + e as u32;
                                let row = rb * 16 * warps
                                    + 64 * (warp / 4)
                                    + 16 * (warp % 4)
                                    + q
                                    + 8 * ((a / 2) % 2);
                                let col = 16 * kk + 8 * (a / 4) + 2 * t + a % 2;
                                assert_eq!(
                                    at,
                                    u64::from(row * k + col),
                                    "{m}x{k} {warps} warps thread {thread} block {rb} step {kk} a{a}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// A operands (K-major, `m` rows over `warpgroups`) and B operands (N-major and K-major)
    /// of the slot shapes the lowering accepts: every element each k-step's wgmma reads is
    /// the one the copies stored there.
    #[test]
    fn descriptors_read_the_stored_tiles() {
        let slot = 3 * 1024;
        for (m, k, warpgroups) in [(64, 32, 1), (128, 64, 2), (256, 64, 2), (128, 128, 1)] {
            let st = stage(Role::A, m, k, true);
            let map = stored(&st, slot);
            let per_block = 64 * warpgroups;
            for wg in 0..warpgroups {
                for block in 0..m / per_block {
                    let row0 = block * per_block;
                    for kk in 0..k / 16 {
                        let start = 64 * wg * st.row_pitch();
                        let desc = descriptor(&st, slot, start, row0, kk);
                        for r in 0..64 {
                            for kx in 0..16 {
                                let got = map.get(&hardware_address(desc, r, kx, true));
                                let want = (row0 + 64 * wg + r, 16 * kk + kx);
                                assert_eq!(got, Some(&want), "A {m}x{k} wg {wg}");
                            }
                        }
                    }
                }
            }
        }
        for (k, n) in [
            (32, 32),
            (64, 64),
            (32, 256),
            (64, 256),
            (128, 128),
            (16, 8),
        ] {
            for k_major in [false, true] {
                let st = if k_major {
                    stage(Role::B, n, k, true)
                } else {
                    stage(Role::B, k, n, false)
                };
                let row_bytes = st.cols * 2;
                if row_bytes < 64 {
                    continue;
                }
                let map = stored(&st, slot);
                for kk in 0..k / 16 {
                    let desc = descriptor(&st, slot, 0, 0, kk);
                    for c in 0..n {
                        for kx in 0..16 {
                            let got = map.get(&hardware_address(desc, c, kx, k_major));
                            let kv = 16 * kk + kx;
                            let want = if k_major { (c, kv) } else { (kv, c) };
                            assert_eq!(got, Some(&want), "B {k}x{n} k-major {k_major}");
                        }
                    }
                }
            }
        }
    }
}
