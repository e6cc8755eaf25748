//! `dot` on tensor cores: `mma.sync.m16n8k16` (f16, bf16), `m16n8k8` (tf32) and `m16n8k32`
//! (fp8), f32
//! accumulators in the [`ml::accumulator`] layout. Layouts and fragment maps are in
//! `mma_layout.rs`.
//!
//! Operands arrive as per-element registers in their operand layout, from one of:
//! - registers already there: a value computed from another dot's accumulator with the same
//!   warps along M and one warp along N (FlashAttention's `p.to::<bf16>()`), or operand
//!   fragments loaded before the enclosing loop because the operand is loop-invariant (Q);
//! - shared memory: the operand (or the untransposed source of `x.trans()`) is written
//!   row-major with a XOR swizzle, then read with `ldmatrix.x4` (`.trans` when K is the stored
//!   row). tf32 operands are rounded (`cvt.rna.tf32.f32`) as they are written; tf32 and fp8
//!   operands are always stored with K contiguous (`.trans` moves 16-bit elements only).

use super::{Lower, Vals, R};
use crate::analysis::staging_source;
use crate::layout::{Layout, RegGeometry};
use crate::mma_layout::{self as ml, MmaKind, Role, Stage};
pub(crate) use crate::plan::dots::MmaPlan;
use crate::plan::pipeline::Resident;
use crate::ptx::{Arg, Reg, RegClass};
use std::collections::{HashMap, HashSet};
use tegula_ir::uses::region_values;
use tegula_ir::{Inst, Op, Shape, Value};

/// The 32-bit words of one thread's operand fragment for one `mma.sync` (m16n8k16 or
/// m16n8k8): A's 16 rows x K take 4, B's K x 8 columns take 2.
const A_WORDS: usize = 4;
const B_WORDS: usize = 2;

/// The `k_width` elements that word `j` of a fragment packs at k-step `kk`, from the
/// operand's registers `regs` (in `g`): of m-tile `tile` for A, of n-tile `tile` for B.
fn fragment_word(
    plan: &MmaPlan,
    role: Role,
    g: &RegGeometry,
    regs: &[Option<Reg>],
    tile: usize,
    kk: usize,
    j: usize,
) -> Vec<Reg> {
    (0..plan.kind.k_width() as usize)
        .map(|e| {
            let counters = match role {
                Role::A => ml::a_counters(plan.kind_of(role), tile, kk, j, e),
                Role::B => ml::b_counters(plan.kind_of(role), tile, kk, j, e),
            };
            regs[g.index(&counters)].expect("operand loaded")
        })
        .collect()
}

/// A shared-memory write address: (shared array base, source layout, source parent shape,
/// transposed, stage, row constant mod 8, byte constant mod 128).
type WriteKey = (Reg, Layout, Vec<u32>, bool, Stage, u32, u32);

/// Per-kernel state of the tensor-core lowering.
#[derive(Default)]
pub(crate) struct MmaState {
    /// Shared-memory write addresses (per thread).
    write_addr: HashMap<WriteKey, Reg>,
    /// `ldmatrix` lane addresses per (shared array base, stage, wm, wn, operand M or N, chunk
    /// constant mod 8).
    read_addr: HashMap<(Reg, Stage, u32, u32, u32, u32), Reg>,
    /// Loop-invariant operands kept in shared memory and read with `ldmatrix` at each use
    /// (see [`HOISTED_OPERAND_REGS`]).
    resident: HashMap<(Value, Role), SharedOperand>,
    /// Resident A operands laid out for `wgmma` descriptors (K-major, panels, 1024-aligned).
    wgmma_resident: HashSet<Value>,
    /// fp8 element registers split from an `ldmatrix` word: (word, byte index).
    split_bytes: HashMap<Reg, (Reg, u32)>,
    /// Resident operands whose shared-memory write waits for the loop's pipeline prologue
    /// (see [`Lower::write_resident_operands`]).
    pending_resident: Vec<ResidentWrite>,
}

/// A resident operand's registers and where they go in shared memory, written after the
/// loop's first pipeline copies are issued.
#[derive(Clone, Debug)]
struct ResidentWrite {
    smem: Reg,
    regs: Vec<Reg>,
    layout: Layout,
    shape: Shape,
    transpose: bool,
    stage: Stage,
    round_tf32: bool,
}

/// An mma operand that is in shared memory already: the shared array's base, its stage there,
/// and a per-iteration byte shift (the pipeline slot read this iteration).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SharedOperand {
    pub base: Reg,
    pub stage: Stage,
    pub shift: Option<Reg>,
}

/// `i` as a shift amount.
fn log2(i: u32) -> i64 {
    i.trailing_zeros() as i64
}

impl Lower<'_> {
    /// The tensor-core plan of a dot (the plan's), or `None` when it goes through FMA.
    pub(crate) fn mma_plan(&self, inst: Inst) -> Option<MmaPlan> {
        self.plan.dots.mma(inst)
    }

    pub(crate) fn lower_mma(&mut self, inst: Inst, plan: MmaPlan) -> R<()> {
        if plan.wgmma && self.lower_wgmma(inst, plan)? {
            return Ok(());
        }
        let d = self.k.insts[inst].clone();
        let (a, b, c) = (d.args[0], d.args[1], d.args[2]);
        let acc_l = ml::accumulator(plan.wm, plan.wn);
        let init = self.get(c, &acc_l)?;
        // Operands in shared memory already are read one k-step ahead of the mmas that use
        // them (as FlashAttention-2 does), so only two k-steps of their fragments are live;
        // the others come in registers, whole.
        let roles = [(a, Role::A), (b, Role::B)];
        let shared: Vec<Option<SharedOperand>> = roles
            .iter()
            .map(|&(v, role)| self.shared_operand(v, role, &plan))
            .collect();
        let in_regs: Vec<(Value, Role)> = roles
            .iter()
            .zip(&shared)
            .filter(|(_, s)| s.is_none())
            .map(|(&r, _)| r)
            .collect();
        let mut whole = self.mma_operands(&in_regs, &plan)?.into_iter();
        let mut ops: Vec<Vec<Option<Reg>>> = roles
            .iter()
            .zip(&shared)
            .map(|(&(_, role), s)| match s {
                None => whole
                    .next()
                    .expect("an operand in registers")
                    .into_iter()
                    .map(Some)
                    .collect(),
                Some(_) => vec![None; plan.operand_geometry(role).count],
            })
            .collect();
        let ksteps = plan.k / plan.kind.k_step();
        let load_step = |s: &mut Self, ops: &mut Vec<Vec<Option<Reg>>>, kk: u32| {
            for (op, so) in ops.iter_mut().zip(&shared) {
                if let Some(so) = so {
                    s.ldmatrix_ksteps(so, &plan, kk..kk + 1, op);
                }
            }
        };
        let acc = self.accumulator_registers(inst, &init, &acc_l)?;
        let cshape = self.k.ty(c).shape;
        let gc = acc_l.geometry(&cshape);
        let (ga, gb) = (
            plan.operand_geometry(Role::A),
            plan.operand_geometry(Role::B),
        );
        let (tiles_m, tiles_n) = (gc.n[0] / 2, gc.n[1] / 2);
        self.b.comment(format!(
            "dot {}x{}x{} on tensor cores ({:?}, warps {}x{})",
            plan.m, plan.n, plan.k, plan.kind, plan.wm, plan.wn
        ));
        // k-step 0's fragments may be in registers already, loaded across the tile boundary
        // (pipeline.rs, `BoundaryFragments`): A's `tiles_m x A_WORDS`, then B's
        // `tiles_n x B_WORDS`.
        let boundary = self.boundary_fragments(inst);
        if boundary.is_none() {
            load_step(self, &mut ops, 0);
        }
        for kk in 0..ksteps as usize {
            if kk as u32 + 1 < ksteps {
                load_step(self, &mut ops, kk as u32 + 1);
            }
            // A pipelined loop's refill goes after the first k-step's mmas and the next
            // fragments (pipeline.rs): the tensor cores start right after the barrier.
            if kk == 1 {
                self.pipeline_refill_in_dot(false)?;
            }
            if boundary.is_some() && kk as u32 + 1 == ksteps {
                self.boundary_next_fragments(inst)?;
            }
            let (av, bv) = (&ops[0], &ops[1]);
            let carried = boundary.as_ref().filter(|_| kk == 0);
            let afrag: Vec<Vec<Reg>> = (0..tiles_m)
                .map(|rm| match carried {
                    Some(w) => w[rm * A_WORDS..(rm + 1) * A_WORDS].to_vec(),
                    None => (0..A_WORDS)
                        .map(|j| {
                            let el = fragment_word(&plan, Role::A, &ga, av, rm, kk, j);
                            self.pack_operand(&el)
                        })
                        .collect(),
                })
                .collect();
            for rn in 0..tiles_n {
                let bfrag: Vec<Reg> = match carried {
                    Some(w) => {
                        let first = tiles_m * A_WORDS + rn * B_WORDS;
                        w[first..first + B_WORDS].to_vec()
                    }
                    None => (0..B_WORDS)
                        .map(|j| {
                            let el = fragment_word(&plan, Role::B, &gb, bv, rn, kk, j);
                            self.pack_operand(&el)
                        })
                        .collect(),
                };
                for (rm, af) in afrag.iter().enumerate() {
                    let cregs: Vec<Reg> = (0..4)
                        .map(|j| acc[gc.index(&ml::c_counters(rm, rn, j))])
                        .collect();
                    if plan.split_tf32 {
                        self.mma_tf32x3(&cregs, af, &bfrag);
                        continue;
                    }
                    self.b.emit(
                        plan.kind.opcode(plan.b_kind),
                        vec![
                            Arg::Vec(cregs.clone()),
                            Arg::Vec(af.clone()),
                            Arg::Vec(bfrag.clone()),
                            Arg::Vec(cregs),
                        ],
                    );
                }
            }
        }
        // A single k-step: the refill follows its mmas.
        self.pipeline_refill_in_dot(false)?;
        self.define(d.results[0], &acc_l, acc);
        Ok(())
    }

    /// 3xTF32: `c += a b` for f32 fragments `a` (4 registers) and `b` (2), each element split
    /// as `x = big + small` with `big = rna(x)` and `small = rna(x - big)` (the subtraction is
    /// exact). Three m16n8k8 mmas, the small products first so that they are added while the
    /// accumulator is still small: `c += a_small b_big; c += a_big b_small; c += a_big b_big`
    /// (`a_small b_small`, below 2^-22 of the product, is dropped). ptxas removes the repeated
    /// splits of a fragment used by several mmas.
    fn mma_tf32x3(&mut self, c: &[Reg], a: &[Reg], b: &[Reg]) {
        let (a_big, a_small) = self.split_tf32(a);
        let (b_big, b_small) = self.split_tf32(b);
        for (x, y) in [(&a_small, &b_big), (&a_big, &b_small), (&a_big, &b_big)] {
            self.b.emit(
                MmaKind::Tf32.opcode(MmaKind::Tf32),
                vec![
                    Arg::Vec(c.to_vec()),
                    Arg::Vec(x.clone()),
                    Arg::Vec(y.clone()),
                    Arg::Vec(c.to_vec()),
                ],
            );
        }
    }

    /// The tf32 `(big, small)` parts of f32 registers.
    fn split_tf32(&mut self, x: &[Reg]) -> (Vec<Reg>, Vec<Reg>) {
        x.iter()
            .map(|&r| {
                let big = self.b.op("cvt.rna.tf32.f32", RegClass::B32, vec![r.into()]);
                let rest = self
                    .b
                    .op("sub.f32", RegClass::F32, vec![r.into(), big.into()]);
                let small = self
                    .b
                    .op("cvt.rna.tf32.f32", RegClass::B32, vec![rest.into()]);
                (big, small)
            })
            .unzip()
    }

    /// One 32-bit mma operand register from its elements (one tf32 word, two halves, or four
    /// fp8 bytes, each zero-extended in a 32-bit register; the lowest K in the low bits).
    /// Four bytes that `ldmatrix` split from one word, in order, are that word.
    pub(crate) fn pack_operand(&mut self, el: &[Reg]) -> Reg {
        match el.len() {
            1 => el[0],
            2 => self
                .b
                .op("mov.b32", RegClass::B32, vec![Arg::Vec(el.to_vec())]),
            _ => {
                let split = el
                    .iter()
                    .map(|r| self.mma.split_bytes.get(r).copied())
                    .collect::<Option<Vec<_>>>();
                if let Some(parts) = split {
                    let w = parts[0].0;
                    if parts
                        .iter()
                        .enumerate()
                        .all(|(i, &(p, b))| p == w && b == i as u32)
                    {
                        return w;
                    }
                }
                // prmt's 0x5410 joins the low halves of two byte pairs.
                let lo = self.pack_byte_pair(el[0], el[1]);
                let hi = self.pack_byte_pair(el[2], el[3]);
                self.b.op(
                    "prmt.b32",
                    RegClass::B32,
                    vec![lo.into(), hi.into(), Arg::Imm(0x5410)],
                )
            }
        }
    }

    /// The low bytes of `x` and `y` (zero-extended fp8 registers) in bytes 0 and 1 of a word:
    /// prmt's selector nibbles pick bytes of `{y, x}`, 0x0040 taking x's byte 0 and y's.
    fn pack_byte_pair(&mut self, x: Reg, y: Reg) -> Reg {
        self.b.op(
            "prmt.b32",
            RegClass::B32,
            vec![x.into(), y.into(), Arg::Imm(0x0040)],
        )
    }

    /// Where operand `v` is in this iteration's pipeline slot, when the dot reads it from
    /// there (as [`Self::shared_operand`] finds it).
    pub(crate) fn slot_operand(
        &mut self,
        v: Value,
        role: Role,
        plan: &MmaPlan,
    ) -> Option<SharedOperand> {
        let so = self.shared_operand(v, role, plan)?;
        so.shift.is_some().then_some(so)
    }

    /// `dot`'s k-step 0 fragments of both operands, read from the pipeline slot at byte
    /// offset `shift` and packed as the mmas take them: A's `tiles_m x A_WORDS` words, then
    /// B's `tiles_n x B_WORDS` (the order of [`Self::lower_mma`]). Packed into `into` when given (the
    /// registers carried across iterations), else into new registers. `None` when an operand
    /// is not in a slot (see [`Self::slot_operand`]).
    pub(crate) fn first_kstep_fragments(
        &mut self,
        dot: Inst,
        shift: Reg,
        into: Option<&[Reg]>,
    ) -> Option<Vec<Reg>> {
        let plan = self.mma_plan(dot)?;
        let args = self.k.insts[dot].args.clone();
        let mut ops = Vec::new();
        for (v, role) in [(args[0], Role::A), (args[1], Role::B)] {
            let so = SharedOperand {
                shift: Some(shift),
                ..self.slot_operand(v, role, &plan)?
            };
            let mut op = vec![None; plan.operand_geometry(role).count];
            self.ldmatrix_ksteps(&so, &plan, 0..1, &mut op);
            ops.push(op);
        }
        let gc = ml::accumulator(plan.wm, plan.wn).geometry(&self.k.ty(args[2]).shape);
        let (tiles_m, tiles_n) = (gc.n[0] / 2, gc.n[1] / 2);
        let (ga, gb) = (
            plan.operand_geometry(Role::A),
            plan.operand_geometry(Role::B),
        );
        let mut elems: Vec<Vec<Reg>> = Vec::new();
        for rm in 0..tiles_m {
            for j in 0..A_WORDS {
                elems.push(fragment_word(&plan, Role::A, &ga, &ops[0], rm, 0, j));
            }
        }
        for rn in 0..tiles_n {
            for j in 0..B_WORDS {
                elems.push(fragment_word(&plan, Role::B, &gb, &ops[1], rn, 0, j));
            }
        }
        Some(match into {
            Some(regs) => {
                for (&r, el) in regs.iter().zip(&elems) {
                    let src = match el.len() {
                        2 => Arg::Vec(el.clone()),
                        _ => self.pack_operand(el).into(),
                    };
                    self.b.emit("mov.b32", vec![r.into(), src]);
                }
                regs.to_vec()
            }
            None => elems.iter().map(|el| self.pack_operand(el)).collect(),
        })
    }

    /// Where operand `v` is in shared memory already (resident, or this iteration's pipeline
    /// slot), unless it is in registers.
    fn shared_operand(&mut self, v: Value, role: Role, plan: &MmaPlan) -> Option<SharedOperand> {
        let ol = plan.operand_layout(role);
        if self.lookup(v, &ol).is_some() || self.natural(v).0 == ol {
            return None;
        }
        if let Some(&so) = self.mma.resident.get(&(v, role)) {
            if so.stage.kind == plan.kind_of(role) {
                return Some(so);
            }
        }
        let (src, src_k_major) = staging_source(self.k, v, role);
        self.pipelined_stage(src, role, src_k_major, plan)
    }

    /// Operand registers (per element, in the operand layout) of each `(value, role)`, from
    /// the cache, from registers, or staged through shared memory together.
    pub(crate) fn mma_operands(&mut self, reqs: &[(Value, Role)], plan: &MmaPlan) -> R<Vec<Vals>> {
        let mut out: Vec<Option<Vals>> = vec![None; reqs.len()];
        // (request index, staged value, its layout, its registers, transposed write, stage)
        let mut staged: Vec<(usize, Value, Layout, Vals, bool, Stage)> = Vec::new();
        let mut offset = 0u32;
        for (i, &(v, role)) in reqs.iter().enumerate() {
            let ol = plan.operand_layout(role);
            if let Some(r) = self.lookup(v, &ol) {
                out[i] = Some(r);
                continue;
            }
            if self.natural(v).0 == ol {
                out[i] = Some(self.get(v, &ol)?);
                continue;
            }
            if let Some(so) = self.shared_operand(v, role, plan) {
                let regs = self.ldmatrix_operand(&so, plan);
                self.remember(v, &ol, regs.clone());
                out[i] = Some(regs);
                continue;
            }
            let (src, src_k_major) = staging_source(self.k, v, role);
            let (st, transpose) = plan.operand_stage(role, src_k_major, offset);
            offset += st.bytes().div_ceil(128) * 128;
            let (sl, _) = self.natural(src);
            let regs = self.get(src, &sl)?;
            staged.push((i, src, sl, regs, transpose, st));
        }
        if !staged.is_empty() {
            // Stage together when they fit, else one at a time from offset 0.
            let together = offset <= self.max_shared();
            let groups: Vec<Vec<usize>> = if together {
                vec![(0..staged.len()).collect()]
            } else {
                (0..staged.len()).map(|s| vec![s]).collect()
            };
            for group in groups {
                let mut end = 0;
                for &s in &group {
                    if !together {
                        staged[s].5.offset = 0;
                    }
                    end = end.max(staged[s].5.offset + staged[s].5.bytes());
                }
                if end > self.max_shared() {
                    return Err(self.unsupported(format!(
                        "a tensor-core dot operand of {end} bytes of shared memory (at most {})",
                        self.max_shared()
                    )));
                }
                let smem = self.smem(end);
                self.b.comment("stage dot operands in shared memory");
                self.barrier();
                for &s in &group {
                    let (_, src, sl, regs, transpose, st) = staged[s].clone();
                    let shape = self.k.ty(src).shape;
                    let round_tf32 = !plan.split_tf32;
                    self.stage_write(smem, &regs, &sl, &shape, transpose, &st, round_tf32);
                }
                self.barrier();
                for &s in &group {
                    let (i, _, _, _, _, st) = staged[s].clone();
                    let (v, role) = reqs[i];
                    let so = SharedOperand {
                        base: self.smem(0),
                        stage: st,
                        shift: None,
                    };
                    let regs = self.ldmatrix_operand(&so, plan);
                    self.remember(v, &plan.operand_layout(role), regs.clone());
                    out[i] = Some(regs);
                }
            }
        }
        Ok(out.into_iter().map(|o| o.expect("every operand")).collect())
    }

    /// Writes a 2-D value (registers `regs` in layout `l`) into the swizzled stage, element
    /// `(i0, i1)` at stored `(i0, i1)`, or `(i1, i0)` when `transpose`. f32 elements of a tf32
    /// stage are rounded to tf32 when `round_tf32`.
    #[allow(clippy::too_many_arguments)]
    fn stage_write(
        &mut self,
        smem: Reg,
        regs: &[Reg],
        l: &Layout,
        shape: &Shape,
        transpose: bool,
        st: &Stage,
        round_tf32: bool,
    ) {
        let es = st.kind.elem_bytes();
        let kept = l.kept();
        let (p0, p1) = (kept[0], kept[1]);
        let g = l.geometry(shape);
        // Runs of registers contiguous along the stored row become one vector store.
        let run = if !transpose && !l.interleaved[p1] && g.mult[p1] == 1 {
            let s = if g.n[p1] > 1 {
                (g.const_index(p1, 1) == 1) as usize * g.n[p1].min(l.spt[p1] as usize)
            } else {
                1
            };
            s.clamp(1, (16 / es) as usize)
        } else {
            1
        };
        // fp8 bytes go four to a word, two to a halfword (an accumulator's column pairs), or
        // one at a time.
        let run = match (es, run) {
            (1, 2..=3) => 2,
            (1, 0..=1) => 1,
            _ => run,
        };
        let mut seen = HashSet::new();
        for i in 0..g.count {
            let c = g.coords(i);
            if !c[p1].is_multiple_of(run) {
                continue;
            }
            let (c0, c1) = (
                g.const_index(p0, c[p0]) as u32,
                g.const_index(p1, c[p1]) as u32,
            );
            let (rc, cc) = if transpose { (c1, c0) } else { (c0, c1) };
            if !seen.insert((rc, cc)) {
                continue;
            }
            let cbyte = cc * es;
            let (rlo, blo) = (rc % 8, cbyte % 128);
            let addr = self.stage_write_addr(smem, l, shape, transpose, st, rlo, blo);
            // Whole groups of 8 rows and 128 bytes: no swizzle phase (panels when
            // panel-major).
            let imm = st.stored_offset(rc - rlo, cbyte - blo) as i64;
            let elems: Vec<Reg> = (0..run)
                .map(|e| regs[i + e])
                .map(|r| {
                    if st.kind == MmaKind::Tf32 && round_tf32 {
                        self.b.op("cvt.rna.tf32.f32", RegClass::B32, vec![r.into()])
                    } else {
                        r
                    }
                })
                .collect();
            let words: Vec<Reg> = match (es, run) {
                (1, 2) => vec![self.pack_byte_pair(elems[0], elems[1])],
                (4, _) | (_, 1) => elems,
                _ => elems
                    .chunks(4 / es as usize)
                    .map(|p| self.pack_operand(p))
                    .collect(),
            };
            let (ty, src) = match (words.len(), words[0].class) {
                (1, _) if es == 1 && run == 1 => (".u8", Arg::Reg(words[0])),
                (1, _) if es == 1 && run == 2 => (".u16", Arg::Reg(words[0])),
                (1, RegClass::B16) => (".b16", Arg::Reg(words[0])),
                (1, _) => (".b32", Arg::Reg(words[0])),
                (n, _) => (if n == 2 { ".v2.b32" } else { ".v4.b32" }, Arg::Vec(words)),
            };
            self.b.emit(
                format!("st.shared{ty}"),
                vec![Arg::Addr(Box::new(addr.into()), imm), src],
            );
        }
    }

    /// The shared address of the stored element at (thread row base + `rlo`, thread column
    /// base in bytes + `blo`), swizzled (computed once per thread, in the prologue).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn stage_write_addr(
        &mut self,
        smem: Reg,
        l: &Layout,
        shape: &Shape,
        transpose: bool,
        st: &Stage,
        rlo: u32,
        blo: u32,
    ) -> Reg {
        let key = (
            smem,
            l.clone(),
            l.parent_shape(shape),
            transpose,
            *st,
            rlo,
            blo,
        );
        if let Some(&r) = self.mma.write_addr.get(&key) {
            return r;
        }
        let kept = l.kept();
        let bases = self.bases(l, shape);
        let (rb, cb) = if transpose {
            (bases[kept[1]], bases[kept[0]])
        } else {
            (bases[kept[0]], bases[kept[1]])
        };
        let sw = st.swizzle();
        let es = st.kind.elem_bytes() as i64;
        let r = self.b.in_prologue(|b| {
            let imm = |b: &mut crate::ptx::Builder, v: i64| {
                let r = b.reg(RegClass::B32);
                b.mov(r, Arg::Imm(v));
                r
            };
            let row = match rb {
                Some(x) => b.op(
                    "add.s32",
                    RegClass::B32,
                    vec![x.into(), Arg::Imm(rlo as i64)],
                ),
                None => imm(b, rlo as i64),
            };
            let col = match cb {
                Some(x) => b.op(
                    "mad.lo.s32",
                    RegClass::B32,
                    vec![x.into(), Arg::Imm(es), Arg::Imm(blo as i64)],
                ),
                None => imm(b, blo as i64),
            };
            let ph = b.op(
                "shr.u32",
                RegClass::B32,
                vec![row.into(), Arg::Imm(log2(sw.per_phase))],
            );
            let ph = b.op(
                "and.b32",
                RegClass::B32,
                vec![ph.into(), Arg::Imm(sw.max_phase as i64 - 1)],
            );
            let ph = b.op("shl.b32", RegClass::B32, vec![ph.into(), Arg::Imm(4)]);
            // (chunk ^ phase) * 16 + byte-in-chunk == col ^ (phase * 16)
            let sc = b.op("xor.b32", RegClass::B32, vec![col.into(), ph.into()]);
            let sc = if st.panel_major {
                // Panel `sc / 128` starts `rows * 128` bytes after the previous one.
                let panel = b.op("shr.u32", RegClass::B32, vec![sc.into(), Arg::Imm(7)]);
                let within = b.op("and.b32", RegClass::B32, vec![sc.into(), Arg::Imm(127)]);
                b.op(
                    "mad.lo.s32",
                    RegClass::B32,
                    vec![
                        panel.into(),
                        Arg::Imm((st.rows * 128) as i64),
                        within.into(),
                    ],
                )
            } else {
                sc
            };
            let ro = b.op(
                "mad.lo.s32",
                RegClass::B32,
                vec![row.into(), Arg::Imm(st.row_pitch() as i64), sc.into()],
            );
            let base = b.op(
                "add.s32",
                RegClass::B32,
                vec![smem.into(), Arg::Imm(st.offset as i64)],
            );
            b.op("add.s32", RegClass::B32, vec![base.into(), ro.into()])
        });
        self.mma.write_addr.insert(key, r);
        r
    }

    /// The lane's `ldmatrix` address register for loads whose chunk constant is `lo` mod 8.
    fn ldmatrix_lane_addr(&mut self, smem: Reg, st: &Stage, plan: &MmaPlan, lo: u32) -> Reg {
        let m_or_n = match st.role {
            Role::A => plan.m,
            Role::B => plan.n,
        };
        let key = (smem, *st, plan.wm, plan.wn, m_or_n, lo);
        if let Some(&r) = self.mma.read_addr.get(&key) {
            return r;
        }
        let (lane, warp) = (self.thread.lane, self.thread.warp);
        let sw = st.swizzle();
        let (wm, wn) = (plan.wm, plan.wn);
        let ce = 16 / st.kind.elem_bytes();
        let r = self.b.in_prologue(|b| {
            let op = |b: &mut crate::ptx::Builder, o: &str, x: Reg, y: Arg| {
                b.op(o, RegClass::B32, vec![x.into(), y])
            };
            // Lane term (see Stage::lane_term): i = lane / 8, r = lane % 8.
            let i = op(b, "shr.u32", lane, Arg::Imm(3));
            let r = op(b, "and.b32", lane, Arg::Imm(7));
            let lo_bit = op(b, "and.b32", i, Arg::Imm(1));
            let hi_bit = op(b, "shr.u32", i, Arg::Imm(1));
            let (outer_bit, k_bit) = match st.role {
                Role::A => (lo_bit, hi_bit),
                Role::B => (hi_bit, lo_bit),
            };
            let outer_step = match st.role {
                Role::A => 8,
                Role::B => 8 * wn,
            };
            let (row_l, chunk_l) = if st.k_major {
                let t = op(b, "mul.lo.s32", outer_bit, Arg::Imm(outer_step as i64));
                (op(b, "add.s32", r, t.into()), k_bit)
            } else {
                let t = op(b, "shl.b32", k_bit, Arg::Imm(3));
                let ch = op(
                    b,
                    "mul.lo.s32",
                    outer_bit,
                    Arg::Imm((outer_step / ce) as i64),
                );
                (op(b, "add.s32", r, t.into()), ch)
            };
            // Warp term (see Stage::warp_term).
            let (w_outer, unit) = match st.role {
                Role::A => {
                    let w = op(b, "shr.u32", warp, Arg::Imm(log2(wn)));
                    let w = op(b, "and.b32", w, Arg::Imm(wm as i64 - 1));
                    (w, 16)
                }
                Role::B => (op(b, "and.b32", warp, Arg::Imm(wn as i64 - 1)), 8),
            };
            let outer = op(b, "mul.lo.s32", w_outer, Arg::Imm(unit));
            let outer = op(b, "and.b32", outer, Arg::Imm(m_or_n as i64 - 1));
            let (row, chunk) = if st.k_major {
                (op(b, "add.s32", row_l, outer.into()), chunk_l)
            } else {
                let wc = op(b, "shr.u32", outer, Arg::Imm(log2(ce)));
                (row_l, op(b, "add.s32", chunk_l, wc.into()))
            };
            let chunk = op(b, "add.s32", chunk, Arg::Imm(lo as i64));
            let ph = op(b, "shr.u32", r, Arg::Imm(log2(sw.per_phase)));
            let ph = op(b, "and.b32", ph, Arg::Imm(sw.max_phase as i64 - 1));
            let sc = op(b, "xor.b32", chunk, ph.into());
            let sc = if st.panel_major {
                // Panel `sc / 8` starts `rows * 128` bytes after the previous one.
                let panel = op(b, "shr.u32", sc, Arg::Imm(3));
                let within = op(b, "and.b32", sc, Arg::Imm(7));
                let within = op(b, "shl.b32", within, Arg::Imm(4));
                b.op(
                    "mad.lo.s32",
                    RegClass::B32,
                    vec![
                        panel.into(),
                        Arg::Imm(st.chunk_group_bytes() as i64),
                        within.into(),
                    ],
                )
            } else {
                op(b, "shl.b32", sc, Arg::Imm(4))
            };
            let ro = b.op(
                "mad.lo.s32",
                RegClass::B32,
                vec![row.into(), Arg::Imm(st.row_pitch() as i64), sc.into()],
            );
            let base = op(b, "add.s32", smem, Arg::Imm(st.offset as i64));
            op(b, "add.s32", base, ro.into())
        });
        self.mma.read_addr.insert(key, r);
        r
    }

    /// Reads an operand in shared memory with `ldmatrix` into per-element registers of its
    /// operand layout.
    pub(crate) fn ldmatrix_operand(&mut self, so: &SharedOperand, plan: &MmaPlan) -> Vals {
        let shape = plan.operand_shape(so.stage.role);
        let mut out = vec![None; plan.operand_layout(so.stage.role).geometry(&shape).count];
        self.ldmatrix_ksteps(so, plan, 0..plan.k / plan.kind.k_step(), &mut out);
        out.into_iter()
            .map(|r| r.expect("ldmatrix covers the operand"))
            .collect()
    }

    /// Reads k-steps `ksteps` of an operand in shared memory with `ldmatrix` into `out` (its
    /// per-element registers in the operand layout).
    fn ldmatrix_ksteps(
        &mut self,
        so: &SharedOperand,
        plan: &MmaPlan,
        ksteps: std::ops::Range<u32>,
        out: &mut [Option<Reg>],
    ) {
        let (st, smem, shift) = (&so.stage, so.base, so.shift);
        let g = plan.operand_geometry(st.role);
        let elem_class = match st.kind.elem_bytes() {
            2 => RegClass::B16,
            _ => RegClass::B32,
        };
        let trans = if st.k_major { "" } else { ".trans" };
        // (tile index, fragment register) of each matrix of one load, and the tile origin.
        let loads: Vec<(Vec<(usize, usize)>, u32)> = match st.role {
            Role::A => (0..g.n[0] / 2)
                .map(|rm| {
                    (
                        (0..A_WORDS).map(|j| (rm, j)).collect(),
                        rm as u32 * 16 * plan.wm,
                    )
                })
                .collect(),
            Role::B => {
                let tiles = g.n[1];
                (0..tiles)
                    .step_by(2)
                    .map(|rn| {
                        let mut mats = vec![(rn, 0), (rn, 1)];
                        if rn + 1 < tiles {
                            mats.extend([(rn + 1, 0), (rn + 1, 1)]);
                        }
                        (mats, rn as u32 * 8 * plan.wn)
                    })
                    .collect()
            }
        };
        for kk in ksteps {
            for (mats, outer) in &loads {
                let (irow, ichunk) = st.instr_term(*outer, kk);
                let lo = ichunk % 8;
                let addr = self.ldmatrix_lane_addr(smem, st, plan, lo);
                let addr = match shift {
                    Some(sh) => self
                        .b
                        .op("add.s32", RegClass::B32, vec![addr.into(), sh.into()]),
                    None => addr,
                };
                let imm =
                    (irow * st.row_pitch() + (ichunk - lo) / 8 * st.chunk_group_bytes()) as i64;
                let words: Vec<Reg> = mats.iter().map(|_| self.b.reg(RegClass::B32)).collect();
                self.b.emit(
                    format!(
                        "ldmatrix.sync.aligned.m8n8.x{}{trans}.shared.b16",
                        words.len()
                    ),
                    vec![
                        Arg::Vec(words.clone()),
                        Arg::Addr(Box::new(addr.into()), imm),
                    ],
                );
                for (&(tile, j), &w) in mats.iter().zip(&words) {
                    let counters = |e: usize| match st.role {
                        Role::A => ml::a_counters(st.kind, tile, kk as usize, j, e),
                        Role::B => ml::b_counters(st.kind, tile, kk as usize, j, e),
                    };
                    if st.kind.elem_bytes() == 1 {
                        for e in 0..4 {
                            let r = self.b.op(
                                "bfe.u32",
                                RegClass::B32,
                                vec![w.into(), Arg::Imm(8 * e as i64), Arg::Imm(8)],
                            );
                            self.mma.split_bytes.insert(r, (w, e as u32));
                            out[g.index(&counters(e))] = Some(r);
                        }
                    } else if elem_class == RegClass::B32 {
                        out[g.index(&counters(0))] = Some(w);
                    } else {
                        let (h0, h1) = (self.b.reg(RegClass::B16), self.b.reg(RegClass::B16));
                        self.b
                            .emit("mov.b32", vec![Arg::Vec(vec![h0, h1]), w.into()]);
                        out[g.index(&counters(0))] = Some(h0);
                        out[g.index(&counters(1))] = Some(h1);
                    }
                }
            }
        }
    }

    /// Before `for` loop `inst`: the operands of its dots that are defined outside the loop.
    /// Those the plan keeps resident in shared memory (rule *resident operands*) are written
    /// after the loop's first pipeline copies ([`Self::write_resident_operands`]); the others
    /// of the dots directly in the body are loaded here and stay in registers for every
    /// iteration (a nested loop hoists those of its own dots before it starts).
    pub(crate) fn hoist_dot_operands(&mut self, inst: Inst) -> R<()> {
        let plan = self.plan;
        let body = self.k.insts[inst].regions[0];
        let residents = plan
            .pipelines
            .of(inst)
            .map_or(&[][..], |l| &l.residents[..]);
        for r in residents {
            let saved = self.loc;
            self.loc = self.k.insts[r.dot].loc;
            let kept = self.stay_resident(r);
            self.loc = saved;
            kept?;
        }
        let inside = region_values(self.k, body);
        let dots: Vec<Inst> = self.k.blocks[body]
            .insts
            .iter()
            .copied()
            .filter(|&i| matches!(self.k.insts[i].op, Op::Dot { .. }))
            .collect();
        for inst in dots {
            let Some(plan) = self.mma_plan(inst) else {
                continue;
            };
            let saved = self.loc;
            self.loc = self.k.insts[inst].loc;
            let args = self.k.insts[inst].args.clone();
            let reqs: Vec<(Value, Role)> = [(args[0], Role::A), (args[1], Role::B)]
                .into_iter()
                .filter(|&(v, role)| {
                    !inside.contains(&v) && !self.mma.resident.contains_key(&(v, role))
                })
                .collect();
            if !reqs.is_empty() {
                self.mma_operands(&reqs, &plan)?;
            }
            self.loc = saved;
        }
        Ok(())
    }

    /// Keeps a loop-invariant operand in shared memory for the rest of the kernel as the plan
    /// placed it (later scratch uses go after it); dots read it with `ldmatrix` at each use.
    /// The write itself waits for [`Lower::write_resident_operands`], after the loop's first
    /// pipeline copies are issued, so that the operand's global load and those copies are in
    /// flight together.
    fn stay_resident(&mut self, r: &Resident) -> R<()> {
        let (v, role) = (r.value, r.role);
        if r.as_loaded {
            let other = match role {
                Role::A => Role::B,
                Role::B => Role::A,
            };
            let so = *self
                .mma
                .resident
                .get(&(v, other))
                .expect("the plan keeps the other role's copy");
            let so = SharedOperand {
                stage: r.stage,
                ..so
            };
            self.mma.resident.insert((v, role), so);
            return Ok(());
        }
        let shift = self.reserved_shared();
        let (src, _) = staging_source(self.k, v, role);
        let (sl, _) = self.natural(src);
        let regs = self.get(src, &sl)?;
        let shape = self.k.ty(src).shape;
        let base = self.smem(r.bytes);
        let round_tf32 = !self.mma_plan(r.dot).is_some_and(|p| p.split_tf32);
        self.mma.pending_resident.push(ResidentWrite {
            smem: base,
            regs,
            layout: sl,
            shape,
            transpose: r.transpose,
            stage: r.stage,
            round_tf32,
        });
        let bytes = r.bytes;
        let rest = self.b.in_prologue(|b| {
            b.op(
                "add.s32",
                RegClass::B32,
                vec![base.into(), Arg::Imm(bytes as i64)],
            )
        });
        self.shared.smem_shift.push((rest, shift + bytes));
        let so = SharedOperand {
            base,
            stage: r.stage,
            shift: None,
        };
        self.mma.resident.insert((v, role), so);
        if r.wgmma {
            self.mma.wgmma_resident.insert(v);
        }
        Ok(())
    }

    /// Where the loop-invariant A operand `v` is resident in shared memory in a layout a
    /// `wgmma` descriptor reads (see [`Self::stay_resident`]).
    pub(crate) fn wgmma_resident_a(&self, v: Value) -> Option<SharedOperand> {
        if !self.mma.wgmma_resident.contains(&v) {
            return None;
        }
        self.mma.resident.get(&(v, Role::A)).copied()
    }

    /// Writes the resident operands [`Self::stay_resident`] kept back, then a barrier.
    /// `after_barrier`: nothing has touched shared memory since the last barrier but copies
    /// into other bytes (a pipeline prologue's), so no barrier is needed before the write.
    pub(crate) fn write_resident_operands(&mut self, after_barrier: bool) {
        let pending = std::mem::take(&mut self.mma.pending_resident);
        if pending.is_empty() {
            return;
        }
        self.b
            .comment("loop-invariant dot operand: resident in shared memory, read at each use");
        if !after_barrier {
            self.barrier();
        }
        for w in &pending {
            self.stage_write(
                w.smem,
                &w.regs,
                &w.layout,
                &w.shape,
                w.transpose,
                &w.stage,
                w.round_tf32,
            );
        }
        self.barrier();
    }
}
