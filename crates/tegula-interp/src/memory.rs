//! Loads, stores and atomics on pointer tiles, with bounds checks and the optional race check.

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
    pub len: usize,
    /// The linear id of the program that last stored each element (only when checking races).
    pub writers: Option<Box<[AtomicU32]>>,
}

/// The buffers a run can reach; pointer elements index `slots`.
pub(crate) struct Memory {
    pub slots: Vec<Slot>,
}

#[inline(always)]
fn active(mask: Option<&[i64]>, lane: usize) -> bool {
    match mask {
        Some(m) => m[lane] != 0,
        None => true,
    }
}

/// Checks every active lane against its buffer's extent; masked-off lanes may point anywhere.
fn check_bounds(
    mem: &Memory,
    op: &'static str,
    ptrs: &[Ptr],
    mask: Option<&[i64]>,
) -> OpResult<()> {
    for (lane, p) in ptrs.iter().enumerate() {
        if active(mask, lane) {
            let len = mem.slots[p.buf as usize].len;
            if p.off < 0 || p.off as u64 >= len as u64 {
                return Err(Fault::OutOfBounds {
                    op,
                    index: p.off,
                    len,
                });
            }
        }
    }
    Ok(())
}

/// The buffer every lane points into, if there is one (the common case, which gets the
/// monomorphic loops below).
fn single_buffer(ptrs: &[Ptr]) -> Option<u32> {
    let first = ptrs.first()?.buf;
    ptrs.iter().all(|p| p.buf == first).then_some(first)
}

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
    let single = single_buffer(ptrs).map(|b| mem.slots[b as usize].buffer.words());
    if d.is_float() {
        let mut out = match other {
            Some(Data::F(o)) => o.clone(),
            _ => vec![0.0; n],
        };
        match (single, d) {
            (Some(Words::W16(w)), DType::F16) => gather(w, ptrs, mask, &mut out, |b| {
                half::f16::from_bits(b as u16).to_f64()
            }),
            (Some(Words::W16(w)), _) => gather(w, ptrs, mask, &mut out, |b| {
                half::bf16::from_bits(b as u16).to_f64()
            }),
            (Some(Words::W32(w)), _) => {
                gather(w, ptrs, mask, &mut out, |b| f32::from_bits(b as u32) as f64)
            }
            (Some(Words::W64(w)), _) => gather(w, ptrs, mask, &mut out, f64::from_bits),
            _ => {
                for (lane, p) in ptrs.iter().enumerate() {
                    if active(mask, lane) {
                        let b = &mem.slots[p.buf as usize].buffer;
                        out[lane] = float_from_bits(d, b.read_bits(p.off as usize));
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
            (Some(Words::W8(w)), DType::I1) => gather(w, ptrs, mask, &mut out, |b| (b & 1) as i64),
            (Some(Words::W8(w)), DType::I8) => {
                gather(w, ptrs, mask, &mut out, |b| b as u8 as i8 as i64)
            }
            (Some(Words::W16(w)), DType::I16) => {
                gather(w, ptrs, mask, &mut out, |b| b as u16 as i16 as i64)
            }
            (Some(Words::W32(w)), DType::I32) => {
                gather(w, ptrs, mask, &mut out, |b| b as u32 as i32 as i64)
            }
            // Unsigned (and 64-bit) values are the zero-extended bits.
            (Some(Words::W8(w)), _) => gather(w, ptrs, mask, &mut out, |b| b as i64),
            (Some(Words::W16(w)), _) => gather(w, ptrs, mask, &mut out, |b| b as i64),
            (Some(Words::W32(w)), _) => gather(w, ptrs, mask, &mut out, |b| b as i64),
            (Some(Words::W64(w)), _) => gather(w, ptrs, mask, &mut out, |b| b as i64),
            _ => {
                for (lane, p) in ptrs.iter().enumerate() {
                    if active(mask, lane) {
                        let b = &mem.slots[p.buf as usize].buffer;
                        out[lane] = int_from_bits(d, b.read_bits(p.off as usize));
                    }
                }
            }
        }
        Ok(Data::I(out))
    }
}

/// Records that program `me` writes element `index`; a different earlier writer is a race.
#[inline(always)]
fn claim(writers: Option<&[AtomicU32]>, index: usize, me: u32) -> OpResult<()> {
    if let Some(t) = writers {
        let prev = t[index].swap(me, Ordering::Relaxed);
        if prev != NO_WRITER && prev != me {
            return Err(Fault::Race { index, other: prev });
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn scatter<W: Word, T: Copy>(
    w: &[W],
    writers: Option<&[AtomicU32]>,
    me: u32,
    ptrs: &[Ptr],
    mask: Option<&[i64]>,
    vals: &[T],
    enc: impl Fn(T) -> u64,
) -> OpResult<()> {
    for (lane, (p, &v)) in ptrs.iter().zip(vals).enumerate() {
        if active(mask, lane) {
            let index = p.off as usize;
            claim(writers, index, me)?;
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
    let Some(b) = single_buffer(ptrs) else {
        // Lanes in several buffers: element by element.
        for (lane, p) in ptrs.iter().enumerate() {
            if active(mask, lane) {
                let slot = &mem.slots[p.buf as usize];
                let index = p.off as usize;
                claim(slot.writers.as_deref(), index, me)?;
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
    let slot = &mem.slots[b as usize];
    let wr = slot.writers.as_deref();
    match (slot.buffer.words(), vals, d) {
        (Words::W16(w), Data::F(v), DType::F16) => scatter(w, wr, me, ptrs, mask, v, |x| {
            half::f16::from_f64(x).to_bits() as u64
        }),
        (Words::W16(w), Data::F(v), _) => scatter(w, wr, me, ptrs, mask, v, |x| {
            half::bf16::from_f64(x).to_bits() as u64
        }),
        (Words::W32(w), Data::F(v), _) => {
            scatter(w, wr, me, ptrs, mask, v, |x| (x as f32).to_bits() as u64)
        }
        (Words::W64(w), Data::F(v), _) => scatter(w, wr, me, ptrs, mask, v, f64::to_bits),
        // Canonical integers: the low bits are the stored bits.
        (Words::W8(w), Data::I(v), _) => scatter(w, wr, me, ptrs, mask, v, |x| x as u64),
        (Words::W16(w), Data::I(v), _) => scatter(w, wr, me, ptrs, mask, v, |x| x as u64),
        (Words::W32(w), Data::I(v), _) => scatter(w, wr, me, ptrs, mask, v, |x| x as u64),
        (Words::W64(w), Data::I(v), _) => scatter(w, wr, me, ptrs, mask, v, |x| x as u64),
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
    let b = &mem.slots[p.buf as usize].buffer;
    with_words!(b.words(), |w| Word::read_modify_write(
        &w[p.off as usize],
        f
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
        let b = &mem.slots[p.buf as usize].buffer;
        let (e, n) = (enc(cmp, lane), enc(vals, lane));
        old_bits.push(with_words!(b.words(), |w| Word::compare_swap(
            &w[p.off as usize],
            e,
            n
        )));
    }
    Ok(if d.is_float() {
        Data::F(old_bits.iter().map(|&b| float_from_bits(d, b)).collect())
    } else {
        Data::I(old_bits.iter().map(|&b| int_from_bits(d, b)).collect())
    })
}
