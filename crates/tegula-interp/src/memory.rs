//! Loads, stores and atomics on pointer tiles, with bounds checks and the optional race check.
//!
//! A pointer element names the pointer argument it was derived from (its [`View`]) and an
//! offset from the start of that view. Every active lane is checked against its view's
//! extent, not against the whole buffer: a kernel given a 10-element view of a 100-element
//! buffer may not touch element 10, even though the buffer has one.

use crate::buffer::{with_words, Buffer, Word, Words};
use crate::ops::{fmax, fmin, invalid, Fault, OpResult};
use crate::round::*;
use crate::value::{Data, Ptr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use tegula_ir::{AtomicOp, DType};

/// No program has written this element yet (in the race table).
pub(crate) const NO_WRITER: u32 = u32::MAX;

/// One distinct argument buffer.
pub(crate) struct Slot {
    pub buffer: Arc<Buffer>,
    /// The linear id of the program that last stored each element (only when checking races).
    pub writers: Option<Box<[AtomicU32]>>,
}

/// One pointer argument: elements `base .. base + len` of the buffer in `slots[slot]`.
pub(crate) struct View {
    pub slot: usize,
    pub base: usize,
    pub len: usize,
    /// The parameter's index, for messages.
    pub param: usize,
}

/// The buffers a run can reach, and the views its pointer arguments were given; pointer
/// elements index `views`.
pub(crate) struct Memory {
    pub slots: Vec<Slot>,
    pub views: Vec<View>,
}

impl Memory {
    /// The buffer element a pointer lane addresses (after [`check_bounds`]).
    #[inline(always)]
    fn element(&self, p: Ptr) -> (&Slot, usize) {
        let v = &self.views[p.view as usize];
        (&self.slots[v.slot], v.base + p.off as usize)
    }
}

#[inline(always)]
fn active(mask: Option<&[i64]>, lane: usize) -> bool {
    match mask {
        Some(m) => m[lane] != 0,
        None => true,
    }
}

/// Checks every active lane against its view's extent; masked-off lanes may point anywhere.
fn check_bounds(
    mem: &Memory,
    op: &'static str,
    ptrs: &[Ptr],
    mask: Option<&[i64]>,
) -> OpResult<()> {
    for (lane, p) in ptrs.iter().enumerate() {
        if active(mask, lane) {
            let view = &mem.views[p.view as usize];
            if p.off < 0 || p.off as u64 >= view.len as u64 {
                return Err(Fault::OutOfBounds {
                    op,
                    param: view.param,
                    index: p.off,
                    len: view.len,
                });
            }
        }
    }
    Ok(())
}

/// The view every lane points into, if there is one (the common case, which gets the
/// monomorphic loops below): its buffer's words from the view's start.
fn single_view<'m>(mem: &'m Memory, ptrs: &[Ptr]) -> Option<(&'m View, &'m Slot)> {
    let first = ptrs.first()?.view;
    ptrs.iter().all(|p| p.view == first).then(|| {
        let v = &mem.views[first as usize];
        (v, &mem.slots[v.slot])
    })
}

/// `out[lane] = dec(w[lane's offset])` for the active lanes; `w` starts at the view's start.
fn gather<W: Word, T>(
    w: &[W],
    ptrs: &[Ptr],
    mask: Option<&[i64]>,
    out: &mut [T],
    dec: impl Fn(u64) -> T,
) {
    match mask {
        None => {
            for (o, p) in out.iter_mut().zip(ptrs) {
                *o = dec(w[p.off as usize].get());
            }
        }
        Some(m) => {
            for ((o, p), &m) in out.iter_mut().zip(ptrs).zip(m) {
                if m != 0 {
                    *o = dec(w[p.off as usize].get());
                }
            }
        }
    }
}

/// Loads the active lanes; masked-off lanes take `other`, or zero without one.
pub(crate) fn load(
    mem: &Memory,
    d: DType,
    ptrs: &[Ptr],
    mask: Option<&[i64]>,
    other: Option<&Data>,
) -> OpResult {
    check_bounds(mem, "load", ptrs, mask)?;
    let n = ptrs.len();
    let view = single_view(mem, ptrs);
    let base = view.map_or(0, |(v, _)| v.base);
    let single = view.map(|(_, s)| s.buffer.words());
    if d.is_float() {
        let mut out = match other {
            Some(Data::F(o)) => o.clone(),
            _ => vec![0.0; n],
        };
        match (single, d) {
            (Some(Words::W16(w)), DType::F16) => gather(&w[base..], ptrs, mask, &mut out, |b| {
                half::f16::from_bits(b as u16).to_f64()
            }),
            (Some(Words::W16(w)), _) => gather(&w[base..], ptrs, mask, &mut out, |b| {
                half::bf16::from_bits(b as u16).to_f64()
            }),
            (Some(Words::W32(w)), _) => gather(&w[base..], ptrs, mask, &mut out, |b| {
                f32::from_bits(b as u32) as f64
            }),
            (Some(Words::W64(w)), _) => gather(&w[base..], ptrs, mask, &mut out, f64::from_bits),
            _ => {
                for (lane, p) in ptrs.iter().enumerate() {
                    if active(mask, lane) {
                        let (slot, index) = mem.element(*p);
                        out[lane] = float_from_bits(d, slot.buffer.read_bits(index));
                    }
                }
            }
        }
        Ok(Data::F(out))
    } else {
        let mut out = match other {
            Some(Data::I(o)) => o.clone(),
            _ => vec![0; n],
        };
        match (single, d) {
            (Some(Words::W8(w)), DType::I1) => {
                gather(&w[base..], ptrs, mask, &mut out, |b| (b & 1) as i64)
            }
            (Some(Words::W8(w)), DType::I8) => {
                gather(&w[base..], ptrs, mask, &mut out, |b| b as u8 as i8 as i64)
            }
            (Some(Words::W16(w)), DType::I16) => {
                gather(&w[base..], ptrs, mask, &mut out, |b| b as u16 as i16 as i64)
            }
            (Some(Words::W32(w)), DType::I32) => {
                gather(&w[base..], ptrs, mask, &mut out, |b| b as u32 as i32 as i64)
            }
            // Unsigned (and 64-bit) values are the zero-extended bits.
            (Some(Words::W8(w)), _) => gather(&w[base..], ptrs, mask, &mut out, |b| b as i64),
            (Some(Words::W16(w)), _) => gather(&w[base..], ptrs, mask, &mut out, |b| b as i64),
            (Some(Words::W32(w)), _) => gather(&w[base..], ptrs, mask, &mut out, |b| b as i64),
            (Some(Words::W64(w)), _) => gather(&w[base..], ptrs, mask, &mut out, |b| b as i64),
            _ => {
                for (lane, p) in ptrs.iter().enumerate() {
                    if active(mask, lane) {
                        let (slot, index) = mem.element(*p);
                        out[lane] = int_from_bits(d, slot.buffer.read_bits(index));
                    }
                }
            }
        }
        Ok(Data::I(out))
    }
}

/// Records that program `me` writes element `index` of the buffer (through lane `p`); a
/// different earlier writer is a race, reported at `p`'s view-relative index.
#[inline(always)]
fn claim(
    mem: &Memory,
    writers: Option<&[AtomicU32]>,
    index: usize,
    p: Ptr,
    me: u32,
) -> OpResult<()> {
    if let Some(t) = writers {
        let prev = t[index].swap(me, Ordering::Relaxed);
        if prev != NO_WRITER && prev != me {
            return Err(Fault::Race {
                param: mem.views[p.view as usize].param,
                index: p.off as usize,
                other: prev,
            });
        }
    }
    Ok(())
}

/// Writes the active lanes into `w`, the words of one view's buffer from the buffer's start
/// (`base` is the view's start).
#[allow(clippy::too_many_arguments)]
fn scatter<W: Word, T: Copy>(
    mem: &Memory,
    (w, base): (&[W], usize),
    writers: Option<&[AtomicU32]>,
    me: u32,
    ptrs: &[Ptr],
    mask: Option<&[i64]>,
    vals: &[T],
    enc: impl Fn(T) -> u64,
) -> OpResult<()> {
    for (lane, (p, &v)) in ptrs.iter().zip(vals).enumerate() {
        if active(mask, lane) {
            let index = base + p.off as usize;
            claim(mem, writers, index, *p, me)?;
            w[index].set(enc(v));
        }
    }
    Ok(())
}

/// Stores the active lanes. Lanes of one program that hit the same element are written in lane
/// order (the GPU picks one of them; which one is unspecified).
pub(crate) fn store(
    mem: &Memory,
    me: u32,
    d: DType,
    ptrs: &[Ptr],
    vals: &Data,
    mask: Option<&[i64]>,
) -> OpResult<()> {
    check_bounds(mem, "store", ptrs, mask)?;
    let Some((view, slot)) = single_view(mem, ptrs) else {
        // Lanes in several views: element by element.
        for (lane, p) in ptrs.iter().enumerate() {
            if active(mask, lane) {
                let (slot, index) = mem.element(*p);
                claim(mem, slot.writers.as_deref(), index, *p, me)?;
                let bits = match vals {
                    Data::F(v) => float_to_bits(d, v[lane]),
                    Data::I(v) => int_to_bits(d, v[lane]),
                    Data::P(_) => return invalid("store of pointers"),
                };
                slot.buffer.write_bits(index, bits);
            }
        }
        return Ok(());
    };
    let (wr, base) = (slot.writers.as_deref(), view.base);
    match (slot.buffer.words(), vals, d) {
        (Words::W16(w), Data::F(v), DType::F16) => {
            scatter(mem, (&w[..], base), wr, me, ptrs, mask, v, |x| {
                half::f16::from_f64(x).to_bits() as u64
            })
        }
        (Words::W16(w), Data::F(v), _) => {
            scatter(mem, (&w[..], base), wr, me, ptrs, mask, v, |x| {
                half::bf16::from_f64(x).to_bits() as u64
            })
        }
        (Words::W32(w), Data::F(v), _) => {
            scatter(mem, (&w[..], base), wr, me, ptrs, mask, v, |x| {
                (x as f32).to_bits() as u64
            })
        }
        (Words::W64(w), Data::F(v), _) => {
            scatter(mem, (&w[..], base), wr, me, ptrs, mask, v, f64::to_bits)
        }
        (Words::W8(w), Data::F(v), d) if d.is_fp8() => {
            let e5m2 = d == DType::F8E5M2;
            scatter(mem, (&w[..], base), wr, me, ptrs, mask, v, |x| {
                tegula_ir::fp8::fp8_bits(e5m2, x) as u64
            })
        }
        // Canonical integers: the low bits are the stored bits.
        (Words::W8(w), Data::I(v), _) => {
            scatter(mem, (&w[..], base), wr, me, ptrs, mask, v, |x| x as u64)
        }
        (Words::W16(w), Data::I(v), _) => {
            scatter(mem, (&w[..], base), wr, me, ptrs, mask, v, |x| x as u64)
        }
        (Words::W32(w), Data::I(v), _) => {
            scatter(mem, (&w[..], base), wr, me, ptrs, mask, v, |x| x as u64)
        }
        (Words::W64(w), Data::I(v), _) => {
            scatter(mem, (&w[..], base), wr, me, ptrs, mask, v, |x| x as u64)
        }
        _ => invalid(format!("store of mismatched values into a {d} buffer")),
    }
}

/// Atomic read-modify-write of each active lane, in lane order; returns the old values
/// (zero for masked-off lanes). Not part of the race check. Float add rounds once to the
/// dtype; float max/min follow `maximum`/`minimum` (the non-NaN operand wins).
pub(crate) fn atomic(
    mem: &Memory,
    op: AtomicOp,
    d: DType,
    ptrs: &[Ptr],
    vals: &Data,
    mask: Option<&[i64]>,
) -> OpResult {
    check_bounds(mem, "atomic", ptrs, mask)?;
    match vals {
        Data::F(v) => {
            let mut old = vec![0.0; ptrs.len()];
            for (lane, p) in ptrs.iter().enumerate() {
                if !active(mask, lane) {
                    continue;
                }
                let x = v[lane];
                let f = |bits: u64| {
                    let cur = float_from_bits(d, bits);
                    let new = match op {
                        AtomicOp::Add => round_to(d, cur + x),
                        AtomicOp::Max => fmax(cur, x),
                        AtomicOp::Min => fmin(cur, x),
                        _ => x, // Xchg; the bit ops are rejected below
                    };
                    float_to_bits(d, new)
                };
                if matches!(op, AtomicOp::And | AtomicOp::Or | AtomicOp::Xor) {
                    return invalid(format!("atomic {} on floats", op.name()));
                }
                let bits = rmw(mem, *p, &f);
                old[lane] = float_from_bits(d, bits);
            }
            Ok(Data::F(old))
        }
        Data::I(v) => {
            let unsigned = is_unsigned(d);
            let mut old = vec![0; ptrs.len()];
            for (lane, p) in ptrs.iter().enumerate() {
                if !active(mask, lane) {
                    continue;
                }
                let x = v[lane];
                let f = |bits: u64| {
                    let cur = int_from_bits(d, bits);
                    let new = match op {
                        AtomicOp::Add => cur.wrapping_add(x),
                        AtomicOp::Max if unsigned => (cur as u64).max(x as u64) as i64,
                        AtomicOp::Min if unsigned => (cur as u64).min(x as u64) as i64,
                        AtomicOp::Max => cur.max(x),
                        AtomicOp::Min => cur.min(x),
                        AtomicOp::And => cur & x,
                        AtomicOp::Or => cur | x,
                        AtomicOp::Xor => cur ^ x,
                        AtomicOp::Xchg => x,
                    };
                    int_to_bits(d, new)
                };
                old[lane] = int_from_bits(d, rmw(mem, *p, &f));
            }
            Ok(Data::I(old))
        }
        Data::P(_) => invalid("atomic on pointer values"),
    }
}

fn rmw(mem: &Memory, p: Ptr, f: &impl Fn(u64) -> u64) -> u64 {
    let (slot, index) = mem.element(p);
    with_words!(slot.buffer.words(), |w| Word::read_modify_write(
        &w[index], f
    ))
}

/// Compare-and-swap per lane: stores `vals` where the element's bits equal those of `cmp`
/// (floats compare bit patterns, as `atom.cas` does); returns the old values.
pub(crate) fn atomic_cas(
    mem: &Memory,
    d: DType,
    ptrs: &[Ptr],
    cmp: &Data,
    vals: &Data,
) -> OpResult {
    check_bounds(mem, "atomic", ptrs, None)?;
    let enc = |data: &Data, lane: usize| match data {
        Data::F(v) => float_to_bits(d, v[lane]),
        Data::I(v) => int_to_bits(d, v[lane]),
        Data::P(_) => 0,
    };
    let mut old_bits = Vec::with_capacity(ptrs.len());
    for (lane, p) in ptrs.iter().enumerate() {
        let (slot, index) = mem.element(*p);
        let (e, n) = (enc(cmp, lane), enc(vals, lane));
        old_bits.push(with_words!(slot.buffer.words(), |w| Word::compare_swap(
            &w[index], e, n
        )));
    }
    Ok(if d.is_float() {
        Data::F(old_bits.iter().map(|&b| float_from_bits(d, b)).collect())
    } else {
        Data::I(old_bits.iter().map(|&b| int_from_bits(d, b)).collect())
    })
}
