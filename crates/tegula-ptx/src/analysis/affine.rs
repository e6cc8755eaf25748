//! Affine forms: how an integer or pointer tile depends on a loop's induction variable and on
//! its element's coordinates, and which values depend on induction variables and loop
//! invariants only. The pipeliner reads them to copy a load a stage ahead and to keep its
//! copies' addresses in registers that advance by a constant each iteration.

use crate::analysis::{is_anchored, moves_across_threads};
use tegula_ir::fast_hash::HashSet;
use tegula_ir::{BinaryOp, Constant, Kernel, Op, Value, ValueDef};

/// How an integer or pointer tile depends on the induction variable and on its element's
/// coordinates: `value = v0 + iv * c_iv + sum(f_d(coord[d]))`, each `f_d` linear
/// (`coord[d] * c_d`, the coefficient the same for all elements and iterations; pointer
/// coefficients in bytes) or, where [`Coef::Varying`], any function fixed before the loop.
#[derive(Clone, Debug, PartialEq)]
pub struct AffineForm {
    pub iv: Coef,
    pub axes: Vec<Coef>,
    /// The value itself, when it is the same known constant for every element and iteration.
    pub known: Option<i64>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Coef {
    Zero,
    Const(i64),
    Runtime,
    /// Along an axis: not linear in the coordinate (a `%`, a `where`, a loaded table, ..),
    /// but the same at every iteration, so a copy's address still advances by the induction
    /// variable's term alone (tutorial 03's `offs_am = (..) % M`).
    Varying,
}

impl Coef {
    fn add(self, o: Coef, sign: i64) -> Coef {
        match (self, o) {
            (a, Coef::Zero) => a,
            (Coef::Varying, _) | (_, Coef::Varying) => Coef::Varying,
            (Coef::Zero, Coef::Const(b)) => Coef::Const(sign * b),
            (Coef::Const(a), Coef::Const(b)) => {
                a.checked_add(sign * b).map_or(Coef::Runtime, |c| {
                    if c == 0 {
                        Coef::Zero
                    } else {
                        Coef::Const(c)
                    }
                })
            }
            _ => Coef::Runtime,
        }
    }

    fn scale(self, k: Option<i64>) -> Coef {
        match (self, k) {
            (Coef::Zero, _) | (_, Some(0)) => Coef::Zero,
            (Coef::Varying, _) => Coef::Varying,
            (Coef::Const(a), Some(b)) => a.checked_mul(b).map_or(Coef::Runtime, Coef::Const),
            _ => Coef::Runtime,
        }
    }
}

impl AffineForm {
    /// A value the same for every element and iteration.
    pub fn uniform(rank: usize, known: Option<i64>) -> AffineForm {
        AffineForm {
            iv: Coef::Zero,
            axes: vec![Coef::Zero; rank],
            known,
        }
    }

    pub fn is_uniform(&self) -> bool {
        self.iv == Coef::Zero && self.axes.iter().all(|&c| c == Coef::Zero)
    }

    fn combine(&self, o: &AffineForm, sign: i64) -> Option<AffineForm> {
        if self.axes.len() != o.axes.len() {
            return None;
        }
        Some(AffineForm {
            iv: self.iv.add(o.iv, sign),
            axes: self
                .axes
                .iter()
                .zip(&o.axes)
                .map(|(a, b)| a.add(*b, sign))
                .collect(),
            known: self
                .known
                .zip(o.known)
                .and_then(|(a, b)| a.checked_add(sign * b)),
        })
    }

    fn scale(&self, k: Option<i64>) -> AffineForm {
        AffineForm {
            iv: self.iv.scale(k),
            axes: self.axes.iter().map(|c| c.scale(k)).collect(),
            known: self.known.zip(k).and_then(|(a, b)| a.checked_mul(b)),
        }
    }
}

/// Whether `v` is the constant zero (a constant or a splat of one).
pub fn is_zero(k: &Kernel, v: Value) -> bool {
    let Some(i) = k.def_inst(v) else {
        return false;
    };
    match &k.insts[i].op {
        Op::Const(Constant::Int(0)) => true,
        Op::Const(Constant::Float(f)) => *f == 0.0 && f.is_sign_positive(),
        Op::Splat | Op::Broadcast => is_zero(k, k.insts[i].args[0]),
        _ => false,
    }
}

/// Whether `v` depends only on the induction variables `ivs`, free ops and values defined
/// outside `inside`.
pub fn depends_on_ivs_only(k: &Kernel, v: Value, ivs: &[Value], inside: &HashSet<Value>) -> bool {
    if ivs.contains(&v) || !inside.contains(&v) {
        return true;
    }
    match k.values[v].def {
        ValueDef::Result(i, _) => {
            let d = &k.insts[i];
            !is_anchored(&d.op)
                && !moves_across_threads(&d.op)
                && d.args
                    .iter()
                    .all(|&a| depends_on_ivs_only(k, a, ivs, inside))
        }
        _ => false,
    }
}

/// `v` as an affine form of the induction variable `iv` and of its element's coordinates
/// (see [`AffineForm`]); `None` when it is not one (or not provably).
pub fn affine_form(k: &Kernel, v: Value, iv: Value, inside: &HashSet<Value>) -> Option<AffineForm> {
    let ty = k.ty(v);
    let rank = ty.shape.rank();
    if v == iv {
        return Some(AffineForm {
            iv: Coef::Const(1),
            axes: vec![],
            known: None,
        });
    }
    // A value from outside the loop is fixed while it runs: a scalar (a parameter, a
    // program id, ..) is the same for every element, a tile varies along its axes in a way
    // its definition may tell (below).
    let fixed = || {
        (!inside.contains(&v)).then(|| AffineForm {
            iv: Coef::Zero,
            axes: vec![Coef::Varying; rank],
            known: None,
        })
    };
    let Some(i) = k.def_inst(v) else {
        return fixed();
    };
    let d = &k.insts[i];
    let arg = |j: usize| affine_form(k, d.args[j], iv, inside);
    match &d.op {
        Op::Const(Constant::Int(c)) => Some(AffineForm::uniform(rank, Some(*c))),
        Op::Arange { .. } => Some(AffineForm {
            iv: Coef::Zero,
            axes: vec![Coef::Const(1)],
            known: None,
        }),
        Op::Splat => {
            let a = arg(0)?;
            Some(AffineForm {
                axes: vec![Coef::Zero; rank],
                ..a
            })
        }
        Op::Broadcast => {
            let a = arg(0)?;
            let src = k.ty(d.args[0]).shape;
            // A stretched size-1 axis repeats one element.
            let axes = (a.axes.iter().zip(src.dims()))
                .map(|(&c, &n)| if n == 1 { Coef::Zero } else { c })
                .collect();
            Some(AffineForm { axes, ..a })
        }
        Op::ExpandDims { axis } => {
            let mut a = arg(0)?;
            let axis = *axis as usize;
            (axis <= a.axes.len()).then(|| {
                a.axes.insert(axis, Coef::Zero);
                a
            })
        }
        Op::MultipleOf { .. } | Op::MaxContiguous { .. } | Op::MaxConstancy { .. } => arg(0),
        // Integer widening or narrowing: taken as exact, as the address arithmetic of
        // every load assumes offsets that do not wrap.
        Op::Cast { .. } if ty.dtype().is_int() && k.ty(d.args[0]).dtype().is_int() => arg(0),
        Op::Binary(BinaryOp::Add) => arg(0)?.combine(&arg(1)?, 1),
        Op::Binary(BinaryOp::Sub) => arg(0)?.combine(&arg(1)?, -1),
        Op::Binary(BinaryOp::Mul) => {
            let (a, b) = (arg(0)?, arg(1)?);
            if a.is_uniform() {
                Some(b.scale(a.known))
            } else if b.is_uniform() {
                Some(a.scale(b.known))
            } else {
                None
            }
        }
        Op::AddPtr => {
            let bytes = k.ty(d.args[0]).dtype().size_bytes() as i64;
            let offset = arg(1)?.scale(Some(bytes));
            let mut p = arg(0)?.combine(&offset, 1)?;
            p.known = None;
            Some(p)
        }
        _ => fixed(),
    }
}
