//! The store of a tile held in an mma layout (a dot's accumulator, or a value computed from
//! it: a cast, a scaling by a row statistic).
//!
//! In the mma layout a thread holds pairs of adjacent columns on rows 8 apart; a store wants
//! each thread's 16-byte run of one row. The general conversion (`convert.rs`) would carry the
//! accumulator's f32 through shared memory in unpadded rows, and then cast: twice the bytes a
//! bf16 output needs, and the 8 rows of one warp's write land on the same banks (8 wavefronts
//! where 1 would do) when a row is a multiple of 128 bytes. Here the cast (and any elementwise
//! op before it whose other inputs the mma layout holds, e.g. attention's `acc * (1 / l)`
//! with `l` reduced from the accumulator's rows) runs first, in the mma layout, and the
//! narrower tile crosses in rows padded so that the rows of one write fall on different banks,
//! with each thread's runs written and read as single vector accesses.

use super::memory::{vec_suffix, word_plan, word_ty};
use super::types::class_of;
use super::{Lower, Vals, CONVERT_SCRATCH, R};
use crate::layout::{Layout, RegGeometry};
use crate::ptx::{Arg, Reg, RegClass};
use std::collections::HashSet;
use tegula_ir::{DType, Elem, Op, Shape, TileType, Value, ValueDef};

/// The widest shared-memory access a thread makes at once (`.v4.b32`).
const MAX_ACCESS_BYTES: u32 = 16;

/// The bytes one shared-memory wavefront covers: 32 banks of 4 bytes.
const BANKS_BYTES: u32 = 128;

/// How a tile crosses from an mma layout to the store's layout.
struct RowExchange {
    shape: Shape,
    dtype: DType,
    /// Bytes from one row to the next in shared memory (a row plus its padding).
    row_bytes: i64,
    /// Rows per round (write, barrier, read); the tile's rows in `rows / slab_rows` rounds.
    slab_rows: u32,
    /// Elements each thread writes (reads) as one vector access.
    write_run: usize,
    read_run: usize,
}

impl Lower<'_> {
    /// The value a store writes, in the store's layout `to`. A value computed from an mma
    /// layout's registers (see [`Lower::mma_source`]) is computed there and crosses once, at
    /// the narrow end of its cast chain: through padded shared-memory rows for a 2-D tile,
    /// else through the general conversion. Any other value comes from [`Lower::get`].
    pub(crate) fn stored_value(&mut self, v: Value, to: &Layout) -> R<Vals> {
        if let Some(r) = self.lookup(v, to) {
            return Ok(r);
        }
        let Some((at, from)) = self.mma_source(v) else {
            return self.get(v, to);
        };
        let aty = self.k.ty(at);
        if let Some(plan) = self.row_exchange(aty, &from, to) {
            let held = self.get(at, &from)?;
            let out = self.exchange_rows(&plan, &held, &from, to);
            self.remember(at, to, out);
            return self.get(v, to);
        }
        // A cast chain over one anchored tile converts that tile either way (as any anchored
        // value asked for in another layout). A value computed from several held inputs (a
        // row vector's `m + log2(l)`, say) would convert each of them: compute it once here
        // and convert the result once.
        if self.vals.anchors.contains_key(&self.cast_chain_end(v)) {
            return self.get(v, to);
        }
        let held = self.get(at, &from)?;
        let out = self.convert(&held, aty, &from, to, None)?;
        self.remember(at, to, out);
        self.get(v, to)
    }

    /// Where a stored value `v` crosses from an mma layout, and that layout: `v` must be
    /// computable in an mma layout (the only layouts with interleaved axes; or a slice of one)
    /// from the registers held there, through casts and elementwise ops over the tiles anchored
    /// in it, broadcasts of vectors anchored in its slices (a reduction's row statistics),
    /// constants and scalars (see [`Lower::held_in`]). It crosses at the narrower end of its
    /// leading cast chain (the ends' dtypes are known without walking it again; inner casts
    /// are rare), so an accumulator scaled and cast to bf16 crosses at 2 bytes an element.
    fn mma_source(&self, v: Value) -> Option<(Value, Layout)> {
        let (from, anchored) = self.natural(v);
        if !anchored || !from.interleaved.iter().any(|&i| i) {
            return None;
        }
        if !self.held_in(v, &from, &mut HashSet::new()) {
            return None;
        }
        let end = self.cast_chain_end(v);
        let size = |x: Value| self.k.ty(x).dtype().size_bytes();
        let at = if size(v) <= size(end) { v } else { end };
        Some((at, from))
    }

    /// The first value below `v` that is not a cast (`v` itself when it is none).
    fn cast_chain_end(&self, v: Value) -> Value {
        let mut cur = v;
        while let ValueDef::Result(inst, _) = self.k.values[cur].def {
            let d = &self.k.insts[inst];
            if !matches!(d.op, Op::Cast { .. }) {
                break;
            }
            cur = d.args[0];
        }
        cur
    }

    /// Whether `v` can be computed in layout `l` without a layout conversion: from values
    /// anchored in `l` (or, below an `expand_dims`, in the slice of `l` it expands), scalars,
    /// constants and aranges, through elementwise ops and broadcasts. `known` holds the
    /// (value, layout) pairs already found so, so a shared operand is walked once.
    fn held_in(&self, v: Value, l: &Layout, known: &mut HashSet<(Value, Layout)>) -> bool {
        if self.k.ty(v).shape.is_scalar() || known.contains(&(v, l.clone())) {
            return true;
        }
        if let Some(a) = self.vals.anchors.get(&v) {
            return a == l;
        }
        let ValueDef::Result(inst, _) = self.k.values[v].def else {
            return false;
        };
        let d = &self.k.insts[inst];
        let held = match &d.op {
            Op::Const(_) | Op::Arange { .. } | Op::Splat => true,
            Op::ExpandDims { axis } => self.held_in(d.args[0], &l.slice(*axis as usize), known),
            op if *op == Op::Broadcast || op.is_elementwise() => {
                d.args.iter().all(|&a| self.held_in(a, l, known))
            }
            _ => false,
        };
        if held {
            known.insert((v, l.clone()));
        }
        held
    }

    /// The plan for moving a 2-D tile of `ty` from `from` to `to`, or `None` where the general
    /// conversion applies instead (another rank, a sliced or replicated layout, an element that
    /// is not a 2-, 4- or 8-byte float, or no slab of rows that fits the scratch buffer).
    fn row_exchange(&self, ty: TileType, from: &Layout, to: &Layout) -> Option<RowExchange> {
        let shape = ty.shape;
        let dtype = ty.dtype();
        let plain_2d =
            |l: &Layout| l.parent_rank() == 2 && l.sliced.is_empty() && !l.replicates(&shape);
        if shape.rank() != 2 || from == to || !plain_2d(from) || !plain_2d(to) {
            return None;
        }
        if !dtype.is_float() || !matches!(dtype.size_bytes(), 2 | 4 | 8) {
            return None;
        }
        let es = dtype.size_bytes() as u32;
        let (rows, cols) = (shape.dim(0) as u32, shape.dim(1) as u32);
        // A thread's contiguous run along the columns, at most 16 bytes (one vector access).
        let run = |l: &Layout| {
            let r = if l.interleaved[1] {
                1
            } else {
                l.spt[1].min(cols)
            };
            r.min(MAX_ACCESS_BYTES / es).max(1)
        };
        let (write_run, read_run) = (run(from), run(to));
        // One write of a warp covers `tpw[1]` runs of each of `tpw[0]` rows. Padding a row by
        // that width puts those rows on consecutive banks (a row of 128-byte multiples would
        // put them all on the same ones); the padding keeps every run aligned.
        let write_row = from.tpw[1] * write_run * es;
        let pad = if write_row >= BANKS_BYTES {
            0
        } else {
            write_row.max(read_run * es)
        };
        let row_bytes = cols * es + pad;
        // Rows per round: the whole tile when it fits the scratch buffer (or the shared memory
        // the kernel holds anyway, e.g. a finished pipeline's), else halves down to the rows
        // both layouts' threads cover, so that a register's round is a constant.
        let least = Self::slab_cover(from, 0, rows).max(Self::slab_cover(to, 0, rows));
        let budget = CONVERT_SCRATCH.max(self.shared.smem_bytes);
        let mut slab_rows = rows;
        while slab_rows * row_bytes > budget && slab_rows / 2 >= least {
            slab_rows /= 2;
        }
        if slab_rows * row_bytes > budget || !slab_rows.is_multiple_of(least) {
            return None;
        }
        Some(RowExchange {
            shape,
            dtype,
            row_bytes: row_bytes as i64,
            slab_rows,
            write_run: write_run as usize,
            read_run: read_run as usize,
        })
    }

    /// Moves `src` (in `from`) to `to` through shared memory as [`Lower::row_exchange`] planned:
    /// per slab of rows, a barrier (earlier readers of the scratch buffer), the vector writes,
    /// a barrier, the vector reads.
    fn exchange_rows(
        &mut self,
        plan: &RowExchange,
        src: &[Reg],
        from: &Layout,
        to: &Layout,
    ) -> Vals {
        let shape = plan.shape;
        let es = plan.dtype.size_bytes() as i64;
        let strides = [plan.row_bytes, es];
        let slab_bytes = plan.slab_rows as i64 * plan.row_bytes;
        let base = self.smem(slab_bytes as u32);
        self.b.comment(format!(
            "store's {} through shared memory: rows of {} bytes, {} rows a round",
            TileType::new(Elem::Scalar(plan.dtype), shape),
            plan.row_bytes,
            plan.slab_rows
        ));
        let waddr = self.thread_address(base, from, &shape, &strides);
        let raddr = self.thread_address(base, to, &shape, &strides);
        let (gf, gt) = (from.geometry(&shape), to.geometry(&shape));
        let writes = runs(&gf, plan.write_run, &strides);
        let reads = runs(&gt, plan.read_run, &strides);
        let mut out: Vec<Option<Reg>> = vec![None; gt.count];
        let rounds = shape.dim(0) as u32 / plan.slab_rows;
        for s in 0..rounds {
            let in_round = |g: &RegGeometry, first: usize| {
                g.const_index(0, g.coords(first)[0]) as u32 / plan.slab_rows == s
            };
            let shift = s as i64 * slab_bytes;
            self.barrier();
            for (regs, off) in writes.iter().filter(|(r, _)| in_round(&gf, r[0])) {
                let elems: Vec<Reg> = regs.iter().map(|&i| src[i]).collect();
                let (ws, words) = self.words_of(plan.dtype, &elems);
                let addr = Arg::Addr(Box::new(waddr.into()), off - shift);
                let op = format!("st.shared{}{}", vec_suffix(words.len() as u32), word_ty(ws));
                self.b.emit(op, vec![addr, vector(words)]);
            }
            self.barrier();
            for (regs, off) in reads.iter().filter(|(r, _)| in_round(&gt, r[0])) {
                let (ws, n) = word_plan(es as u32, regs.len() as u32);
                let class = if ws as i64 == es {
                    class_of(Elem::Scalar(plan.dtype))
                } else {
                    RegClass::B32
                };
                let words: Vec<Reg> = (0..n).map(|_| self.b.reg(class)).collect();
                let addr = Arg::Addr(Box::new(raddr.into()), off - shift);
                let op = format!("ld.shared{}{}", vec_suffix(n), word_ty(ws));
                self.b.emit(op, vec![vector(words.clone()), addr]);
                let per_word = (ws as i64 / es) as usize;
                let elems: Vec<Reg> = words
                    .into_iter()
                    .flat_map(|w| self.unpack(plan.dtype, w, ws, per_word))
                    .collect();
                for (&i, e) in regs.iter().zip(elems) {
                    out[i] = Some(e);
                }
            }
        }
        out.into_iter()
            .map(|r| r.expect("every register is read in some round"))
            .collect()
    }

    /// `elems` (floats of `d`, consecutive in memory) as words of 4 bytes (8 for f64). A word
    /// of one element is that element's register (`st.shared.b32` takes an f32 one as is).
    fn words_of(&mut self, d: DType, elems: &[Reg]) -> (u32, Vec<Reg>) {
        let es = d.size_bytes() as u32;
        let (ws, _) = word_plan(es, elems.len() as u32);
        let per_word = (ws / es) as usize;
        let words = elems
            .chunks(per_word)
            .map(|c| match c {
                [e] => *e,
                halves => self.pack(d, halves, ws),
            })
            .collect();
        (ws, words)
    }
}

/// A thread's vector accesses in geometry `g`: the registers of each run of up to `run`
/// consecutive columns (in column order) and the run's byte offset under `strides` (rows,
/// columns). A run whose elements are not consecutive in memory is split into single elements.
fn runs(g: &RegGeometry, run: usize, strides: &[i64; 2]) -> Vec<(Vec<usize>, i64)> {
    let off = |r: usize| Lower::reg_offset(g, r, strides);
    let mut out = Vec::new();
    for i in 0..g.count {
        let c = g.coords(i);
        if !c[1].is_multiple_of(run) {
            continue;
        }
        let regs: Vec<usize> = (c[1]..(c[1] + run).min(g.n[1]))
            .map(|col| g.index(&[c[0], col]))
            .collect();
        let consecutive = regs.len() == run
            && (regs.iter().enumerate()).all(|(k, &r)| off(r) == off(i) + k as i64 * strides[1]);
        if consecutive {
            out.push((regs, off(i)));
        } else {
            out.extend(regs.into_iter().map(|r| (vec![r], off(r))));
        }
    }
    out
}

fn vector(words: Vec<Reg>) -> Arg {
    if words.len() == 1 {
        Arg::Reg(words[0])
    } else {
        Arg::Vec(words)
    }
}
