//! How each `dot` maps onto the hardware.
//!
//! - f16/bf16 operands, f32 ones with `InputPrecision::Tf32` or `Tf32x3`, and fp8 ones (either
//!   format, mixed too: e4m3 with e5m2) on a target with fp8 tensor cores ([`crate::Target::has_fp8_mma`]), with an f32
//!   accumulator of at least 16 x 8 (and K of at least one k-step) run on tensor cores
//!   ([`MmaPlan`]): `mma.sync.m16n8k16` (f16, bf16), `m16n8k8` (tf32) or `m16n8k32` (fp8),
//!   the warps laid out
//!   over M and N by [`crate::mma_layout::warps_for`] (chained dots, whose accumulator feeds
//!   another dot's A, keep one warp along N so that it already is that A's layout);
//! - everything else runs on FMAs (f32 `ieee`, f64, integers, other accumulators).
//!
//! A tensor-core dot is a `wgmma` candidate ([`MmaPlan::wgmma`]) when the options allow
//! `wgmma` ([`crate::MmaChoice`]) on a target that has it, the operands are f16/bf16 or fp8
//! (K a multiple of 32 for fp8; both fp8 operands K-major, checked where slots are placed), at
//! least two stages are asked for the dot's block (by the `for` loop whose body it is: the
//! loop's own `num_stages`, else the launch's; by the launch elsewhere), the target takes the
//! shape over the launch's warps ([`crate::Target::wgmma_takes_shape`]: all warps along M),
//! and B is loaded in the dot's own
//! block with 4- to 16-byte vectors (what a pipeline copies into its slots) while A is either
//! such a load or not loaded there at all (in registers: FlashAttention's P and its
//! loop-invariant Q). The software pipeline decides whether it really runs on `wgmma`
//! (`emit/pipeline.rs`): a candidate whose operands find no slot keeps `mma.sync` with the
//! same warps.

use super::layouts::access_vec;
use super::Context;
use crate::analysis::untransposed;
use crate::layout::{Layout, RegGeometry};
use crate::mma_layout::{self as ml, MmaKind, Role, Stage};
use tegula_ir::fast_hash::{HashMap, HashSet};
use tegula_ir::{DType, InputPrecision, Inst, Kernel, Op, Shape, Value};

/// How one dot maps onto tensor-core instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmaPlan {
    /// A's element kind.
    pub kind: MmaKind,
    /// B's: A's, or the other fp8 format (an e4m3 tile with an e5m2 one).
    pub b_kind: MmaKind,
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub wm: u32,
    pub wn: u32,
    /// `Tf32x3`: f32 operands are staged unrounded and each mma step splits them into tf32
    /// parts and issues three mmas.
    pub split_tf32: bool,
    /// A `wgmma` candidate (see the module doc): all warps along M (`wn = 1`), each warpgroup
    /// owning 64 rows of every `16 * wm` rows.
    pub wgmma: bool,
}

impl MmaPlan {
    /// The element kind of operand `role`.
    pub fn kind_of(&self, role: Role) -> MmaKind {
        match role {
            Role::A => self.kind,
            Role::B => self.b_kind,
        }
    }

    /// The shared-memory stage of an operand whose source is K-major or not, at byte `offset`,
    /// and whether writing it transposes the source (tf32 and fp8 are always stored K-major:
    /// [`MmaKind::transposable`]).
    pub fn operand_stage(&self, role: Role, src_k_major: bool, offset: u32) -> (Stage, bool) {
        let kind = self.kind_of(role);
        let k_major = src_k_major || !kind.transposable();
        let (outer, k) = match role {
            Role::A => (self.m, self.k),
            Role::B => (self.n, self.k),
        };
        let (rows, cols) = if k_major { (outer, k) } else { (k, outer) };
        let st = Stage {
            role,
            kind,
            rows,
            cols,
            k_major,
            offset,
            panel_major: false,
        };
        (st, k_major != src_k_major)
    }

    pub fn operand_layout(&self, role: Role) -> Layout {
        match role {
            Role::A => ml::operand_a(self.kind, self.wm),
            Role::B => ml::operand_b(self.b_kind, self.wn),
        }
    }

    pub fn operand_shape(&self, role: Role) -> Shape {
        let (r, c) = match role {
            Role::A => (self.m, self.k),
            Role::B => (self.k, self.n),
        };
        Shape::new(&[r as usize, c as usize]).expect("rank 2")
    }

    /// Where a thread holds the operand's elements.
    pub fn operand_geometry(&self, role: Role) -> RegGeometry {
        self.operand_layout(role)
            .geometry(&self.operand_shape(role))
    }

    /// Registers a thread needs to hold the operand's fragments.
    pub fn fragment_registers(&self, role: Role) -> u32 {
        let per_thread = self.operand_geometry(role).count as u32;
        per_thread * self.kind_of(role).elem_bytes() / 4
    }

    /// The accumulator's layout.
    pub fn accumulator(&self) -> Layout {
        ml::accumulator(self.wm, self.wn)
    }
}

/// The tensor-core plan of every dot that runs on tensor cores.
#[derive(Clone, Debug, Default)]
pub struct DotPlans {
    mma: HashMap<Inst, MmaPlan>,
}

impl DotPlans {
    /// The tensor-core plan of `dot`, or `None` when it runs on FMAs (or is no dot).
    pub fn mma(&self, dot: Inst) -> Option<MmaPlan> {
        self.mma.get(&dot).copied()
    }

    /// Whether some dot runs on fp8 tensor cores (the module needs PTX 8.4).
    pub fn any_fp8(&self) -> bool {
        self.mma.values().any(|p| p.kind.is_fp8())
    }
}

/// Plans every dot of the kernel.
pub fn plan(cx: &Context<'_>) -> DotPlans {
    let chained = chained_dots(cx.k);
    let mut mma = HashMap::default();
    for inst in cx.k.walk() {
        if let Some(p) = mma_plan(cx, &chained, inst) {
            mma.insert(inst, p);
        }
    }
    DotPlans { mma }
}

/// Dots that feed, or are fed by, another dot's A operand.
fn chained_dots(k: &Kernel) -> HashSet<Inst> {
    let mut chained = HashSet::default();
    for inst in k.walk() {
        if !matches!(k.insts[inst].op, Op::Dot { .. }) {
            continue;
        }
        if let Some(src) = dot_source(k, k.insts[inst].args[0], 12) {
            chained.insert(inst);
            chained.insert(src);
        }
    }
    chained
}

/// The dot whose result `v` is computed from by same-shape elementwise ops, if any.
fn dot_source(k: &Kernel, v: Value, depth: u32) -> Option<Inst> {
    let inst = k.def_inst(v)?;
    let d = &k.insts[inst];
    match d.op {
        Op::Dot { .. } => Some(inst),
        ref op if op.is_elementwise() && depth > 0 => {
            let shape = k.ty(v).shape;
            d.args
                .iter()
                .filter(|&&a| k.ty(a).shape == shape)
                .find_map(|&a| dot_source(k, a, depth - 1))
        }
        _ => None,
    }
}

/// The tensor-core plan of a dot, or `None` when it goes through FMA.
fn mma_plan(cx: &Context<'_>, chained: &HashSet<Inst>, inst: Inst) -> Option<MmaPlan> {
    let k = cx.k;
    let d = &k.insts[inst];
    let Op::Dot { precision } = d.op else {
        return None;
    };
    let (aty, bty, cty) = (k.ty(d.args[0]), k.ty(d.args[1]), k.ty(d.args[2]));
    let fp8 = |d: DType| match d {
        DType::F8E4M3 => Some(MmaKind::E4M3),
        DType::F8E5M2 => Some(MmaKind::E5M2),
        _ => None,
    };
    let (kind, b_kind) = match (aty.dtype(), bty.dtype(), precision) {
        (DType::F16, DType::F16, _) => (MmaKind::F16, MmaKind::F16),
        (DType::BF16, DType::BF16, _) => (MmaKind::BF16, MmaKind::BF16),
        (DType::F32, DType::F32, InputPrecision::Tf32 | InputPrecision::Tf32x3) => {
            (MmaKind::Tf32, MmaKind::Tf32)
        }
        (a, b, _) if cx.target.has_fp8_mma() && fp8(a).is_some() && fp8(b).is_some() => {
            (fp8(a)?, fp8(b)?)
        }
        _ => return None,
    };
    if cty.dtype() != DType::F32 {
        return None;
    }
    let (m, kk, n) = (
        aty.shape.dim(0) as u32,
        aty.shape.dim(1) as u32,
        bty.shape.dim(1) as u32,
    );
    if m < 16 || n < 8 || kk < kind.k_step() {
        return None;
    }
    let warps = cx.num_warps();
    // A chained dot's plan with all warps along M is the one `warps_for` gives it whenever
    // the wgmma shape rule holds (M a multiple of 16 x warps), so the accumulator of Q K^T is
    // still P's A layout.
    let wgmma = wgmma_candidate(cx, inst, kind, (m, n, kk));
    let (wm, wn) = if wgmma {
        (warps, 1)
    } else {
        ml::warps_for(m, n, warps, chained.contains(&inst))
    };
    Some(MmaPlan {
        kind,
        b_kind,
        m,
        n,
        k: kk,
        wm,
        wn,
        split_tf32: precision == InputPrecision::Tf32x3,
        wgmma,
    })
}

/// Whether a tensor-core dot of `kind` and these sizes is a `wgmma` candidate (module doc).
fn wgmma_candidate(cx: &Context<'_>, dot: Inst, kind: MmaKind, (m, n, k): (u32, u32, u32)) -> bool {
    cx.options.mma.allows_wgmma()
        && cx.target.has_wgmma()
        && kind != MmaKind::Tf32
        && cx
            .uses
            .block_of(dot)
            .is_some_and(|b| cx.stages_of_block(b) >= 2)
        && cx.target.wgmma_takes_shape(m, n, k, cx.num_warps())
        && k.is_multiple_of(kind.k_step())
        && wgmma_operands_placed(cx, dot)
}

/// Whether B of `dot` is a load (or its `.trans()`) in the dot's own block with 4-, 8- or
/// 16-byte accesses, and A is either such a load or not loaded in that block at all.
fn wgmma_operands_placed(cx: &Context<'_>, dot: Inst) -> bool {
    let k = cx.k;
    let Some(block) = cx.uses.block_of(dot) else {
        return false;
    };
    let load_here = |operand: Value| {
        let (src, _) = untransposed(k, operand);
        k.def_inst(src)
            .filter(|&li| matches!(k.insts[li].op, Op::Load { .. }))
            .filter(|&li| cx.uses.block_of(li) == Some(block))
    };
    let streamed = |operand: Value| {
        let bytes = k.ty(operand).dtype().size_bytes() as u32;
        load_here(operand).is_some_and(|li| matches!(access_vec(cx, li) * bytes, 4 | 8 | 16))
    };
    let d = &k.insts[dot];
    let (a, b) = (d.args[0], d.args[1]);
    streamed(b) && (streamed(a) || load_here(a).is_none())
}
