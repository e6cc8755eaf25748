//! Axis analysis: per value and axis, how long the runs of consecutive integers are
//! (contiguity), how long the runs of equal values are (constancy), and the largest power of two
//! dividing the first element of each run (divisibility; in bytes for pointers).
//!
//! These facts choose the vector width of global loads and stores: a 16-byte access needs 16-byte
//! aligned, contiguous elements whose mask is constant over the vector.

use std::collections::HashMap;
use tegula_ir::{BinaryOp, CmpOp, Constant, Kernel, Op, TileType, Value, ValueDef};

/// Divisibility cap: 2^30 stands for "zero / any multiple".
const MAX_DIV: u64 = 1 << 30;

/// Facts about one value, per axis (one entry for scalars).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AxisInfo {
    pub contiguity: Vec<u64>,
    pub divisibility: Vec<u64>,
    pub constancy: Vec<u64>,
    /// The value of every element, when known at compile time.
    pub constant: Option<i64>,
}

impl AxisInfo {
    fn unknown(ty: &TileType) -> AxisInfo {
        let r = ty.shape.rank().max(1);
        AxisInfo {
            contiguity: vec![1; r],
            divisibility: vec![1; r],
            constancy: vec![1; r],
            constant: None,
        }
    }

    /// A value equal everywhere, with divisibility `div`.
    fn uniform(ty: &TileType, div: u64, constant: Option<i64>) -> AxisInfo {
        let dims = ty.shape.dims();
        let r = dims.len().max(1);
        AxisInfo {
            contiguity: vec![1; r],
            divisibility: vec![div; r],
            constancy: if dims.is_empty() {
                vec![1]
            } else {
                dims.iter().map(|&d| d as u64).collect()
            },
            constant,
        }
    }

    fn last(v: &[u64]) -> u64 {
        *v.last().unwrap_or(&1)
    }

    pub fn last_contiguity(&self) -> u64 {
        Self::last(&self.contiguity)
    }
    pub fn last_divisibility(&self) -> u64 {
        Self::last(&self.divisibility)
    }
    pub fn last_constancy(&self) -> u64 {
        Self::last(&self.constancy)
    }
}

/// The largest power of two dividing `v` (capped; zero counts as divisible by anything).
pub fn pow2_divisor(v: i64) -> u64 {
    if v == 0 {
        MAX_DIV
    } else {
        (1u64 << v.unsigned_abs().trailing_zeros()).min(MAX_DIV)
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    // All facts are powers of two (or sizes, which are too).
    a.min(b)
}

/// Axis facts for every value of a kernel.
pub struct AxisAnalysis {
    info: HashMap<Value, AxisInfo>,
}

impl AxisAnalysis {
    pub fn run(k: &Kernel) -> AxisAnalysis {
        let mut a = AxisAnalysis {
            info: HashMap::new(),
        };
        for p in &k.params {
            let ty = k.ty(p.value);
            // A pointer is at least aligned to its element.
            let natural = if ty.is_ptr() {
                ty.dtype().size_bytes() as u64
            } else {
                1
            };
            let div = natural.max(p.facts.divisibility as u64);
            a.info.insert(p.value, AxisInfo::uniform(&ty, div, None));
        }
        for inst in k.walk() {
            let data = &k.insts[inst];
            // Block arguments first: loop induction variables keep the divisibility of their
            // bounds and step; carried values are unknown.
            if let Op::For { .. } = data.op {
                let body = data.regions[0];
                let args = &k.blocks[body].args;
                let lo = a.get(k, data.args[0]).divisibility[0];
                let step = a.get(k, data.args[2]).divisibility[0];
                a.info.insert(
                    args[0],
                    AxisInfo::uniform(&k.ty(args[0]), gcd(lo, step), None),
                );
            }
            for &r in &data.regions {
                for &arg in &k.blocks[r].args {
                    a.info
                        .entry(arg)
                        .or_insert_with(|| AxisInfo::unknown(&k.ty(arg)));
                }
            }
            for (i, &res) in data.results.iter().enumerate() {
                let info = a.infer(k, inst, i);
                a.info.insert(res, info);
            }
        }
        a
    }

    /// The facts of `v` (unknown for values never seen).
    pub fn get(&self, k: &Kernel, v: Value) -> AxisInfo {
        self.info
            .get(&v)
            .cloned()
            .unwrap_or_else(|| AxisInfo::unknown(&k.ty(v)))
    }

    fn infer(&self, k: &Kernel, inst: tegula_ir::Inst, result: usize) -> AxisInfo {
        let d = &k.insts[inst];
        let ty = k.ty(d.results[result]);
        let arg = |i: usize| self.get(k, d.args[i]);
        let rank = ty.shape.rank().max(1);
        match &d.op {
            Op::Const(Constant::Int(c)) => AxisInfo::uniform(&ty, pow2_divisor(*c), Some(*c)),
            Op::Const(Constant::Float(_)) => AxisInfo::uniform(&ty, 1, None),
            Op::ProgramId { .. } | Op::NumPrograms { .. } => AxisInfo::uniform(&ty, 1, None),
            Op::Arange { start, end } => AxisInfo {
                contiguity: vec![(end - start) as u64],
                divisibility: vec![pow2_divisor(*start)],
                constancy: vec![1],
                constant: None,
            },
            Op::Splat => {
                let a = arg(0);
                AxisInfo::uniform(&ty, a.divisibility[0], a.constant)
            }
            Op::Broadcast => {
                let a = arg(0);
                let src = k.ty(d.args[0]).shape;
                let mut out = a.clone();
                for (ax, (&from, &to)) in src.dims().iter().zip(ty.shape.dims()).enumerate() {
                    if from == 1 && to != 1 {
                        out.contiguity[ax] = 1;
                        out.constancy[ax] = to as u64;
                    }
                }
                out
            }
            Op::ExpandDims { axis } => {
                let a = arg(0);
                let ax = *axis as usize;
                let src_rank = k.ty(d.args[0]).shape.rank();
                let mut out = a.clone();
                if src_rank == 0 {
                    return AxisInfo::uniform(&ty, a.divisibility[0], a.constant);
                }
                let div = a.divisibility.iter().copied().max().unwrap_or(1);
                out.contiguity.insert(ax, 1);
                out.divisibility.insert(ax, div);
                out.constancy.insert(ax, 1);
                out
            }
            Op::MultipleOf { n } => {
                let mut a = arg(0);
                for (dv, &n) in a.divisibility.iter_mut().zip(n) {
                    *dv = (*dv).max(n as u64 & (!(n as u64) + 1));
                }
                a
            }
            Op::MaxContiguous { n } => {
                let mut a = arg(0);
                for (c, &n) in a.contiguity.iter_mut().zip(n) {
                    *c = (*c).max(n as u64);
                }
                a
            }
            Op::MaxConstancy { n } => {
                let mut a = arg(0);
                for (c, &n) in a.constancy.iter_mut().zip(n) {
                    *c = (*c).max(n as u64);
                }
                a
            }
            Op::AddPtr => {
                let (p, o) = (arg(0), arg(1));
                let es = ty.dtype().size_bytes() as u64;
                // Contiguous runs of either side survive where the other is constant (a
                // uniform base plus contiguous offsets, or a contiguous pointer tile advanced
                // by a uniform offset), as for integer `add`.
                let contiguity = (0..rank)
                    .map(|i| {
                        gcd(p.contiguity[i], o.constancy[i])
                            .max(gcd(p.constancy[i], o.contiguity[i]))
                    })
                    .collect();
                AxisInfo {
                    contiguity,
                    divisibility: p
                        .divisibility
                        .iter()
                        .zip(&o.divisibility)
                        .map(|(&pd, &od)| gcd(pd, od.saturating_mul(es)))
                        .collect(),
                    constancy: zip(&p.constancy, &o.constancy, gcd),
                    constant: None,
                }
            }
            Op::Binary(op) if ty.dtype().is_int() => {
                let (a, b) = (arg(0), arg(1));
                self.int_binary(*op, &a, &b, rank)
            }
            Op::Cast { .. } if ty.dtype().is_int() && k.ty(d.args[0]).dtype().is_int() => {
                // Integer widening keeps the facts; narrowing might wrap, which keeps them for
                // every run that does not cross a wrap, so be conservative only on contiguity.
                let mut a = arg(0);
                if ty.dtype().bits() < k.ty(d.args[0]).dtype().bits() {
                    a.contiguity = vec![1; rank];
                }
                a
            }
            Op::Compare(c) => {
                let (a, b) = (arg(0), arg(1));
                let both = zip(&a.constancy, &b.constancy, gcd);
                // `x < n` and `x >= n` with x contiguous and n constant and aligned are constant
                // over aligned blocks (likewise `n > x`, `n <= x`).
                let run = |x: &AxisInfo, n: &AxisInfo| -> Vec<u64> {
                    (0..rank)
                        .map(|i| {
                            let blk =
                                gcd(x.contiguity[i], gcd(x.divisibility[i], n.divisibility[i]));
                            gcd(blk, n.constancy[i]).max(both[i])
                        })
                        .collect()
                };
                let constancy = match c {
                    CmpOp::Lt | CmpOp::Ge => run(&a, &b),
                    CmpOp::Gt | CmpOp::Le => run(&b, &a),
                    _ => both,
                };
                AxisInfo {
                    contiguity: vec![1; rank],
                    divisibility: vec![1; rank],
                    constancy,
                    constant: None,
                }
            }
            Op::Select => {
                let (c, a, b) = (arg(0), arg(1), arg(2));
                AxisInfo {
                    contiguity: vec![1; rank],
                    divisibility: zip(&a.divisibility, &b.divisibility, gcd),
                    constancy: zip(&c.constancy, &zip(&a.constancy, &b.constancy, gcd), gcd),
                    constant: None,
                }
            }
            Op::Binary(_)
            | Op::Unary(_)
            | Op::Cast { .. }
            | Op::Bitcast
            | Op::Fma
            | Op::Ternary(_)
            | Op::Rounded { .. } => {
                // Float values: only constancy survives.
                let mut c = arg(0).constancy;
                for i in 1..d.args.len() {
                    c = zip(&c, &arg(i).constancy, gcd);
                }
                AxisInfo {
                    contiguity: vec![1; rank],
                    divisibility: vec![1; rank],
                    constancy: c,
                    constant: None,
                }
            }
            _ => AxisInfo::unknown(&ty),
        }
    }

    fn int_binary(&self, op: BinaryOp, a: &AxisInfo, b: &AxisInfo, rank: usize) -> AxisInfo {
        let constancy = zip(&a.constancy, &b.constancy, gcd);
        let constant = match (a.constant, b.constant) {
            (Some(x), Some(y)) => match op {
                BinaryOp::Add => x.checked_add(y),
                BinaryOp::Sub => x.checked_sub(y),
                BinaryOp::Mul => x.checked_mul(y),
                _ => None,
            },
            _ => None,
        };
        let (contiguity, divisibility) = match op {
            BinaryOp::Add | BinaryOp::Sub => {
                let c = (0..rank)
                    .map(|i| {
                        let x = gcd(a.contiguity[i], b.constancy[i]);
                        let y = if op == BinaryOp::Add {
                            gcd(a.constancy[i], b.contiguity[i])
                        } else {
                            1
                        };
                        x.max(y)
                    })
                    .collect();
                (c, zip(&a.divisibility, &b.divisibility, gcd))
            }
            BinaryOp::Mul => {
                let c = (0..rank)
                    .map(|i| {
                        if b.constant == Some(1) {
                            a.contiguity[i]
                        } else if a.constant == Some(1) {
                            b.contiguity[i]
                        } else {
                            1
                        }
                    })
                    .collect();
                let d = zip(&a.divisibility, &b.divisibility, |x, y| {
                    x.saturating_mul(y).min(MAX_DIV)
                });
                (c, d)
            }
            // `x % n` with `n` the same over each run of `x`: runs of `x` aligned to a divisor
            // `g` of `n` never cross a multiple of `n` inside, so they stay runs of `g`
            // (Triton's rule: `(pid * BLOCK + arange) % N` keeps its vectors when 16 divides N).
            // Taken for non-negative `x`, as address offsets are.
            BinaryOp::Rem => {
                let c = (0..rank)
                    .map(|i| {
                        let g = gcd(gcd(a.contiguity[i], b.divisibility[i]), a.divisibility[i]);
                        if b.constancy[i].is_multiple_of(a.contiguity[i].max(1)) {
                            g.max(1)
                        } else {
                            1
                        }
                    })
                    .collect();
                (c, zip(&a.divisibility, &b.divisibility, gcd))
            }
            BinaryOp::Shl => {
                let d = match b.constant {
                    Some(s) if (0..31).contains(&s) => a
                        .divisibility
                        .iter()
                        .map(|&x| (x << s).min(MAX_DIV))
                        .collect(),
                    _ => vec![1; rank],
                };
                (vec![1; rank], d)
            }
            _ => (vec![1; rank], vec![1; rank]),
        };
        let divisibility = match constant {
            Some(c) => vec![pow2_divisor(c); rank],
            None => divisibility,
        };
        AxisInfo {
            contiguity,
            divisibility,
            constancy,
            constant,
        }
    }
}

fn zip(a: &[u64], b: &[u64], f: impl Fn(u64, u64) -> u64) -> Vec<u64> {
    a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect()
}

/// Whether a value is a block argument (used by the lowering's layout choice).
pub fn is_block_arg(k: &Kernel, v: Value) -> bool {
    matches!(k.values[v].def, ValueDef::BlockArg(..))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tegula_ir::prelude::*;

    fn info_of_store_ptr(k: &Kernel) -> (AxisInfo, Option<AxisInfo>) {
        let a = AxisAnalysis::run(k);
        let st = k
            .walk()
            .into_iter()
            .find(|&i| matches!(k.insts[i].op, Op::Store { .. }))
            .unwrap();
        let args = &k.insts[st].args;
        (a.get(k, args[0]), args.get(2).map(|&m| a.get(k, m)))
    }

    #[test]
    fn aligned_pointer_plus_block_offsets_is_contiguous_and_aligned() {
        let mut k = trace("t", |p| {
            let x = p.ptr("x", DType::F32);
            let n = p.scalar("n", DType::I32);
            let offs = program_id(0) * 256 + arange(0, 256);
            let m = offs.lt(n);
            store(x + offs, 1.0f32, m);
        })
        .unwrap();
        k.params[0].facts.divisibility = 16;
        k.params[1].facts.divisibility = 16;
        let (p, m) = info_of_store_ptr(&k);
        assert_eq!(p.contiguity, vec![256]);
        assert_eq!(p.divisibility, vec![16]);
        assert_eq!(m.unwrap().constancy, vec![16]);
    }

    #[test]
    fn max_constancy_raises_a_masks_constancy_to_the_hint() {
        // A bound loaded per row: nothing shows the mask constant along a row but the hint.
        let k = trace("t", |p| {
            let x = p.ptr("x", DType::F32);
            let bounds = p.ptr("bounds", DType::I32);
            let rows = arange(0, 16).col();
            let offs = rows * 64 + arange(0, 64).row();
            let bound = load_unmasked(bounds + offs);
            let m = max_constancy(offs.lt(bound), [1, 32]);
            store(x + offs, 1.0f32, m);
        })
        .unwrap();
        let (_, m) = info_of_store_ptr(&k);
        assert_eq!(m.unwrap().constancy, vec![1, 32]);
        let unhinted = trace("t", |p| {
            let x = p.ptr("x", DType::F32);
            let bounds = p.ptr("bounds", DType::I32);
            let offs = arange(0, 16).col() * 64 + arange(0, 64).row();
            store(x + offs, 1.0f32, offs.lt(load_unmasked(bounds + offs)));
        })
        .unwrap();
        assert_eq!(
            info_of_store_ptr(&unhinted).1.unwrap().constancy,
            vec![1, 1]
        );
    }

    #[test]
    fn unknown_bound_gives_no_mask_constancy_and_unaligned_pointer() {
        let k = trace("t", |p| {
            let x = p.ptr("x", DType::F16);
            let n = p.scalar("n", DType::I32);
            let offs = program_id(0) * n + arange(0, 64);
            store(x + offs, 1.0f32, offs.lt(n));
        })
        .unwrap();
        let (p, m) = info_of_store_ptr(&k);
        assert_eq!(p.contiguity, vec![64]);
        assert_eq!(p.divisibility, vec![2]);
        assert_eq!(m.unwrap().constancy, vec![1]);
    }

    #[test]
    fn two_d_offsets_keep_row_contiguity() {
        let mut k = trace("t", |p| {
            let x = p.ptr("x", DType::F32);
            let stride = p.scalar("stride", DType::I32);
            let r = arange(0, 16).col();
            let c = arange(0, 64).row();
            store_unmasked(x + r * stride + c, 0.0f32);
        })
        .unwrap();
        k.params[0].facts.divisibility = 16;
        k.params[1].facts.divisibility = 16;
        let (p, _) = info_of_store_ptr(&k);
        assert_eq!(p.contiguity, vec![1, 64]);
        assert_eq!(p.divisibility[1], 16);
        assert_eq!(pow2_divisor(48), 16);
        assert_eq!(pow2_divisor(-8), 8);
    }
}
