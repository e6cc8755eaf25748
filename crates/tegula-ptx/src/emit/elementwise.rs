//! Free ops: indices, constants, shape ops and elementwise arithmetic, lowered per register in
//! the layout the consumer asked for. The PTX of each op comes from the small rule tables below.

use super::convert::Remap;
use super::types::{arith_class, arith_ty, class_of, is_narrow_int, param_ty};
use super::{Lower, Vals, R};
use crate::layout::Layout;
use crate::ptx::{Arg, Reg, RegClass, Ty};
use tegula_ir::{
    BinaryOp, CmpOp, Constant, DType, Elem, Op, Rounding, TernaryOp, UnaryOp, Value, ValueDef,
};

/// The PTX opcode of a binary op on an arithmetic type, where one instruction does it.
/// `fuse`: float add, sub and mul carry no rounding modifier, which lets ptxas contract a
/// multiply and an add into one `fma` (`CompileOptions::fp_fusion`); else `.rn`, each rounded.
fn binary_rule(op: BinaryOp, t: Ty, fuse: bool) -> Option<String> {
    use BinaryOp::*;
    let float = matches!(t, Ty::F32 | Ty::F64);
    let rn = if fuse { "" } else { ".rn" };
    let bits = match t {
        Ty::S64 | Ty::U64 | Ty::F64 => Ty::B64,
        Ty::Pred => Ty::Pred,
        _ => Ty::B32,
    };
    Some(match (op, t) {
        (Add | Sub | Xor, Ty::Pred) => "xor.pred".into(),
        (Mul | And | Min, Ty::Pred) => "and.pred".into(),
        (Or | Max, Ty::Pred) => "or.pred".into(),
        (_, Ty::Pred) => return None,
        (Add, _) if float => format!("add{rn}{t}"),
        (Sub, _) if float => format!("sub{rn}{t}"),
        (Mul, _) if float => format!("mul{rn}{t}"),
        // Triton's `/`: fast, full-range, within 2 ulp; `div_rn` and f64 are IEEE.
        (Div, Ty::F32) => "div.full.f32".into(),
        (Div | DivRn, _) if float => format!("div.rn{t}"),
        (Add, _) => format!("add{t}"),
        (Sub, _) => format!("sub{t}"),
        (Mul, _) => format!("mul.lo{t}"),
        (Div, _) => format!("div{t}"),
        (Rem, _) if !float => format!("rem{t}"),
        (And, _) => format!("and{bits}"),
        (Or, _) => format!("or{bits}"),
        (Xor, _) => format!("xor{bits}"),
        (Shl, _) => format!("shl{bits}"),
        (Shr, _) => format!("shr{t}"),
        (Max, _) => format!("max{t}"),
        (Min, _) => format!("min{t}"),
        (MaxNan, Ty::F32) => "max.NaN.f32".into(),
        (MinNan, Ty::F32) => "min.NaN.f32".into(),
        (UMulHi, Ty::S32 | Ty::U32) => "mul.hi.u32".into(),
        (UMulHi, Ty::S64 | Ty::U64) => "mul.hi.u64".into(),
        (MulHi, Ty::S32 | Ty::U32 | Ty::S64 | Ty::U64) => format!("mul.hi{t}"),
        (Mul24, Ty::S32 | Ty::U32) => format!("mul24.lo{t}"),
        (MaxNan, _) if !float => format!("max{t}"),
        (MinNan, _) if !float => format!("min{t}"),
        _ => return None,
    })
}

/// The comparison suffix of `setp`; float `ne` is unordered (true on NaN) as the IR says.
fn cmp_rule(op: CmpOp, float: bool) -> &'static str {
    match op {
        CmpOp::Eq => "eq",
        CmpOp::Ne if float => "neu",
        CmpOp::Ne => "ne",
        CmpOp::Lt => "lt",
        CmpOp::Le => "le",
        CmpOp::Gt => "gt",
        CmpOp::Ge => "ge",
    }
}

impl Lower<'_> {
    pub(crate) fn lower_free(&mut self, v: Value, l: &Layout) -> R<Vals> {
        let ty = self.k.ty(v);
        let (inst, _) = match self.k.values[v].def {
            ValueDef::Param(i) => return Ok(vec![self.param(i)]),
            ValueDef::Result(i, k) => (i, k),
            ValueDef::BlockArg(..) => {
                return Err(self.invalid(format!("block argument {v} used before its region")))
            }
        };
        let d = self.k.insts[inst].clone();
        self.loc = d.loc;
        let n = l.geometry(&ty.shape).count;
        let arg_ty = |i: usize| self.k.ty(d.args[i]);
        match &d.op {
            Op::ProgramId { axis } | Op::NumPrograms { axis } => {
                let xyz = ["x", "y", "z"][(*axis as usize).min(2)];
                let sreg = if matches!(d.op, Op::ProgramId { .. }) {
                    "%ctaid"
                } else {
                    "%nctaid"
                };
                Ok(vec![self.b.op(
                    "mov.u32",
                    RegClass::B32,
                    vec![Arg::Sym(format!("{sreg}.{xyz}"))],
                )])
            }
            Op::Const(c) => {
                let r = self.constant(*c, ty.dtype())?;
                Ok(vec![r; n])
            }
            Op::Arange { start, .. } => {
                let geom = l.geometry(&ty.shape);
                let axis = l.kept()[0];
                let base = self.bases(l, &ty.shape)[axis];
                Ok((0..n)
                    .map(|i| {
                        let c = geom.const_index(axis, geom.coords(i)[axis]) as i64 + start;
                        match base {
                            Some(b) => {
                                self.b
                                    .op("add.s32", RegClass::B32, vec![b.into(), Arg::Imm(c)])
                            }
                            None => self.imm(RegClass::B32, Arg::Imm(c)),
                        }
                    })
                    .collect())
            }
            Op::Splat => {
                let s = self.scalar(d.args[0])?;
                Ok(vec![s; n])
            }
            Op::Broadcast => {
                let src_shape = arg_ty(0).shape;
                let src = self.get(d.args[0], l)?;
                let (gs, gd) = (l.geometry(&src_shape), l.geometry(&ty.shape));
                Ok((0..n)
                    .map(|i| src[gs.broadcast_source(&gd.coords(i))])
                    .collect())
            }
            Op::ExpandDims { axis } => {
                if arg_ty(0).shape.is_scalar() {
                    let s = self.scalar(d.args[0])?;
                    return Ok(vec![s; n]);
                }
                self.get(d.args[0], &l.slice(*axis as usize))
            }
            Op::Reshape | Op::Permute { .. } => {
                let src_ty = arg_ty(0);
                let (sl, _) = self.natural(d.args[0]);
                let src = self.get(d.args[0], &sl)?;
                let remap = match &d.op {
                    Op::Permute { perm } => Remap::permute(&src_ty.shape, perm),
                    _ => {
                        let st = ty.shape.strides();
                        Remap {
                            shape: ty.shape,
                            strides: (0..ty.shape.rank()).map(|i| st[i] as i64).collect(),
                            offset: 0,
                        }
                    }
                };
                self.convert(&src, src_ty, &sl, l, Some(&remap))
            }
            Op::Flip { axis } => {
                let src_ty = arg_ty(0);
                let (sl, _) = self.natural(d.args[0]);
                let src = self.get(d.args[0], &sl)?;
                let remap = Remap::flip(&src_ty.shape, *axis as usize);
                self.convert(&src, src_ty, &sl, l, Some(&remap))
            }
            Op::Gather { axis } => self.lower_gather(&d, *axis as usize, l),
            Op::MultipleOf { .. } | Op::MaxContiguous { .. } | Op::MaxConstancy { .. } => {
                self.get(d.args[0], l)
            }
            Op::AddPtr => {
                let p = self.get(d.args[0], l)?;
                let o = self.get(d.args[1], l)?;
                let es = ty.dtype().size_bytes() as i64;
                let od = arg_ty(1).dtype();
                Ok(p.iter()
                    .zip(&o)
                    .map(|(&p, &o)| self.addptr(p, o, od, es))
                    .collect())
            }
            Op::Binary(op) => {
                let a = self.get(d.args[0], l)?;
                let b = self.get(d.args[1], l)?;
                let dt = ty.dtype();
                match op.libm() {
                    // The math library computes a thread's elements in groups (`libm.rs`).
                    Some(f) if arith_ty(dt) == Ty::F32 => {
                        let x = self.widen_all(dt, &a);
                        let y = self.widen_all(dt, &b);
                        let r = self.libm2_f32(f, &x, &y);
                        Ok(self.narrow_all(dt, &r))
                    }
                    _ => a
                        .iter()
                        .zip(&b)
                        .map(|(&x, &y)| self.binary(*op, dt, x, y))
                        .collect(),
                }
            }
            Op::Unary(op) => {
                let a = self.get(d.args[0], l)?;
                let dt = ty.dtype();
                match op.libm() {
                    Some(f) if arith_ty(dt) == Ty::F32 => {
                        let x = self.widen_all(dt, &a);
                        let r = self.libm1_f32(f, &x);
                        Ok(self.narrow_all(dt, &r))
                    }
                    _ => a.iter().map(|&x| self.unary(*op, dt, x)).collect(),
                }
            }
            Op::Compare(op) => {
                let a = self.get(d.args[0], l)?;
                let b = self.get(d.args[1], l)?;
                let dt = arg_ty(0).dtype();
                let is_ptr = arg_ty(0).is_ptr();
                a.iter()
                    .zip(&b)
                    .map(|(&x, &y)| self.compare(*op, dt, is_ptr, x, y))
                    .collect()
            }
            Op::Select => {
                let c = self.get(d.args[0], l)?;
                let a = self.get(d.args[1], l)?;
                let b = self.get(d.args[2], l)?;
                Ok((0..n).map(|i| self.select(c[i], a[i], b[i])).collect())
            }
            Op::Fma => {
                let a = self.get(d.args[0], l)?;
                let b = self.get(d.args[1], l)?;
                let c = self.get(d.args[2], l)?;
                let dt = ty.dtype();
                Ok((0..n)
                    .map(|i| {
                        let (x, y, z) = (
                            self.widen(dt, a[i]),
                            self.widen(dt, b[i]),
                            self.widen(dt, c[i]),
                        );
                        let t = arith_ty(dt);
                        let r = self.b.op(
                            format!("fma.rn{t}"),
                            arith_class(dt),
                            vec![x.into(), y.into(), z.into()],
                        );
                        self.narrow(dt, r, Rounding::NearestEven)
                    })
                    .collect())
            }
            // One IEEE instruction in the rounding direction, f32 or f64 (no `.ftz`).
            Op::Rounded { op, mode } => {
                let dt = ty.dtype();
                let t = arith_ty(dt);
                if !matches!(t, Ty::F32 | Ty::F64) || !matches!(dt, DType::F32 | DType::F64) {
                    return Err(self.unsupported(format!("`{}` on {dt}", d.op.name())));
                }
                let m = mode.ptx();
                let opc = format!("{}.{m}{t}", op.name());
                let args: Vec<Vals> = (0..op.arity())
                    .map(|i| self.get(d.args[i], l))
                    .collect::<R<_>>()?;
                Ok((0..n)
                    .map(|i| {
                        let xs = args.iter().map(|a| a[i].into()).collect();
                        self.b.op(opc.clone(), arith_class(dt), xs)
                    })
                    .collect())
            }
            Op::Ternary(op) => {
                let a = self.get(d.args[0], l)?;
                let b = self.get(d.args[1], l)?;
                let c = self.get(d.args[2], l)?;
                let dt = ty.dtype();
                let t = arith_ty(dt);
                let (opc, class) = match (op, t) {
                    (TernaryOp::Sad, Ty::S32 | Ty::U32 | Ty::S64 | Ty::U64) => {
                        (format!("sad{t}"), arith_class(dt))
                    }
                    (TernaryOp::BytePerm, Ty::S32 | Ty::U32) => {
                        ("prmt.b32".to_string(), RegClass::B32)
                    }
                    _ => return Err(self.unsupported(format!("`{}` on {dt}", op.name()))),
                };
                Ok((0..n)
                    .map(|i| {
                        self.b.op(
                            opc.clone(),
                            class,
                            vec![a[i].into(), b[i].into(), c[i].into()],
                        )
                    })
                    .collect())
            }
            Op::Cast { rounding } => {
                let a = self.get(d.args[0], l)?;
                let from = arg_ty(0).dtype();
                a.iter()
                    .map(|&x| self.cast(from, ty.dtype(), *rounding, x))
                    .collect()
            }
            // A pointer is its 64-bit address in a b64 register, as an i64/u64 is.
            Op::Bitcast if ty.is_ptr() || arg_ty(0).is_ptr() => self.get(d.args[0], l),
            Op::Bitcast => {
                let a = self.get(d.args[0], l)?;
                let from = arg_ty(0).dtype();
                a.iter()
                    .map(|&x| self.bitcast(from, ty.dtype(), x))
                    .collect()
            }
            other => Err(self.unsupported(format!("`{}` in this position", other.name()))),
        }
    }

    /// Loads parameter `i` (pointers converted to global addresses).
    fn param(&mut self, i: usize) -> Reg {
        let p = &self.k.params[i];
        let name = crate::param_name(self.k, i);
        let pty = param_ty(p.ty.elem);
        let class = class_of(p.ty.elem);
        let addr = Arg::Addr(Box::new(Arg::Sym(name)), 0);
        match p.ty.elem {
            Elem::Ptr(_) => {
                let r = self.b.op("ld.param.u64", RegClass::B64, vec![addr]);
                self.b
                    .op("cvta.to.global.u64", RegClass::B64, vec![r.into()])
            }
            Elem::Scalar(DType::I1) => {
                let r = self.b.op("ld.param.u8", RegClass::B32, vec![addr]);
                self.b
                    .op("setp.ne.u32", RegClass::Pred, vec![r.into(), Arg::Imm(0)])
            }
            Elem::Scalar(_) => self.b.op(format!("ld.param{pty}"), class, vec![addr]),
        }
    }

    /// A register holding constant `c` of dtype `d`.
    pub(crate) fn constant(&mut self, c: Constant, d: DType) -> R<Reg> {
        let class = class_of(Elem::Scalar(d));
        let f = match c {
            Constant::Int(i) => i as f64,
            Constant::Float(f) => f,
        };
        let i = match c {
            Constant::Int(i) => i,
            Constant::Float(f) => f as i64,
        };
        Ok(match d {
            DType::I1 => self.b.op(
                "setp.ne.u32",
                RegClass::Pred,
                vec![Arg::Imm(i & 1), Arg::Imm(0)],
            ),
            DType::F32 => self.imm(class, Arg::F32(f as f32)),
            DType::F64 => self.imm(class, Arg::F64(f)),
            DType::F16 => {
                let bits = half::f16::from_f64(f).to_bits();
                self.imm(class, Arg::Imm(bits as i64))
            }
            DType::BF16 => {
                let bits = half::bf16::from_f64(f).to_bits();
                self.imm(class, Arg::Imm(bits as i64))
            }
            DType::F8E4M3 | DType::F8E5M2 => {
                let bits = tegula_ir::fp8::fp8_bits(d == DType::F8E5M2, f);
                self.imm(class, Arg::Imm(bits as i64))
            }
            DType::I8 => self.imm(class, Arg::Imm(i as i8 as i64)),
            DType::I16 => self.imm(class, Arg::Imm(i as i16 as i64)),
            DType::U8 => self.imm(class, Arg::Imm(i as u8 as i64)),
            DType::U16 => self.imm(class, Arg::Imm(i as u16 as i64)),
            DType::I32 => self.imm(class, Arg::Imm(i as i32 as i64)),
            DType::U32 => self.imm(class, Arg::Imm(i as u32 as i64)),
            DType::I64 | DType::U64 => self.imm(class, Arg::Imm(i)),
        })
    }

    /// `ptr + off * es` (64-bit).
    pub(crate) fn addptr(&mut self, p: Reg, off: Reg, od: DType, es: i64) -> Reg {
        let bytes = if off.class == RegClass::B64 {
            self.b
                .op("mul.lo.s64", RegClass::B64, vec![off.into(), Arg::Imm(es)])
        } else {
            let w = if od.is_signed_int() { "s32" } else { "u32" };
            self.b.op(
                format!("mul.wide.{w}"),
                RegClass::B64,
                vec![off.into(), Arg::Imm(es)],
            )
        };
        self.b
            .op("add.s64", RegClass::B64, vec![p.into(), bytes.into()])
    }

    /// The register of `x` in `d`'s arithmetic type (f16/bf16 widened to f32).
    /// [`Lower::widen`] of each register.
    fn widen_all(&mut self, d: DType, xs: &[Reg]) -> Vec<Reg> {
        xs.iter().map(|&x| self.widen(d, x)).collect()
    }

    /// [`Lower::narrow`] of each register, rounding to nearest.
    fn narrow_all(&mut self, d: DType, xs: &[Reg]) -> Vec<Reg> {
        xs.iter()
            .map(|&x| self.narrow(d, x, Rounding::NearestEven))
            .collect()
    }

    pub(crate) fn widen(&mut self, d: DType, x: Reg) -> Reg {
        match d {
            DType::F16 => self.b.op("cvt.f32.f16", RegClass::F32, vec![x.into()]),
            // e5m2 is the high byte of the f16 of its value, exactly.
            DType::F8E5M2 => {
                let h = self
                    .b
                    .op("shl.b32", RegClass::B32, vec![x.into(), Arg::Imm(8)]);
                let h = self.b.op("cvt.u16.u32", RegClass::B16, vec![h.into()]);
                self.b.op("cvt.f32.f16", RegClass::F32, vec![h.into()])
            }
            // e4m3 through the f16 pair conversion (the byte in the low half).
            DType::F8E4M3 => {
                let b = self.b.op("cvt.u16.u32", RegClass::B16, vec![x.into()]);
                let pair = self
                    .b
                    .op("cvt.rn.f16x2.e4m3x2", RegClass::B32, vec![b.into()]);
                let h = self.b.op("cvt.u16.u32", RegClass::B16, vec![pair.into()]);
                self.b.op("cvt.f32.f16", RegClass::F32, vec![h.into()])
            }
            DType::BF16 => match self.packed_halves.get(&x) {
                Some(&(word, high)) => self.bf16_half_to_f32(word, high),
                None => self.b.op("cvt.f32.bf16", RegClass::F32, vec![x.into()]),
            },
            _ => x,
        }
    }

    /// The f32 of the bf16 in the low or high half of the 32-bit `word`. A bf16 is the top 16
    /// bits of the f32 it converts to, exactly (NaNs, infinities and subnormals included), so
    /// the conversion is a shift of the low half or a mask of the high one: one instruction
    /// each, where ptxas makes the split `mov.b32 {lo, hi}` plus two `cvt.f32.bf16` into
    /// three (the high half is extracted, then shifted). f16 has no such rule.
    fn bf16_half_to_f32(&mut self, word: Reg, high: bool) -> Reg {
        // A .b32 operation may write an f32 register (same size): no extra move.
        if high {
            self.b.op(
                "and.b32",
                RegClass::F32,
                vec![word.into(), Arg::Imm(0xffff_0000)],
            )
        } else {
            self.b
                .op("shl.b32", RegClass::F32, vec![word.into(), Arg::Imm(16)])
        }
    }

    /// An arithmetic result back in `d`'s registers: f16/bf16 rounded, narrow ints re-extended.
    pub(crate) fn narrow(&mut self, d: DType, x: Reg, rounding: Rounding) -> Reg {
        let rnd = rounding.ptx();
        match d {
            DType::F16 => self
                .b
                .op(format!("cvt.{rnd}.f16.f32"), RegClass::B16, vec![x.into()]),
            DType::BF16 => self
                .b
                .op(format!("cvt.{rnd}.bf16.f32"), RegClass::B16, vec![x.into()]),
            // The pair conversion packs its first operand in the high byte: 0 there, `x` in
            // the low one; then zero-extended to the register.
            DType::F8E4M3 | DType::F8E5M2 => {
                let f = if d == DType::F8E4M3 {
                    "e4m3x2"
                } else {
                    "e5m2x2"
                };
                let pair = self.b.op(
                    format!("cvt.rn.satfinite.{f}.f32"),
                    RegClass::B16,
                    vec![Arg::F32(0.0), x.into()],
                );
                self.b.op("cvt.u32.u16", RegClass::B32, vec![pair.into()])
            }
            d if is_narrow_int(d) => self.normalize(d, x),
            _ => x,
        }
    }

    /// Sign- or zero-extends the low bits of a 32-bit register holding a narrow integer.
    pub(crate) fn normalize(&mut self, d: DType, x: Reg) -> Reg {
        let op = if d.is_signed_int() {
            "bfe.s32"
        } else {
            "bfe.u32"
        };
        self.b.op(
            op,
            RegClass::B32,
            vec![x.into(), Arg::Imm(0), Arg::Imm(d.bits() as i64)],
        )
    }

    pub(crate) fn binary(&mut self, op: BinaryOp, d: DType, a: Reg, b: Reg) -> R<Reg> {
        let t = arith_ty(d);
        let class = arith_class(d);
        let (x, y) = (self.widen(d, a), self.widen(d, b));
        let r = match (op, t) {
            // f32 (and the narrower floats, computing in it): exact, by the math library's
            // reduction; f64: the quotient's fma, exact while |x / y| < 2^53.
            (BinaryOp::Rem, Ty::F32) => {
                self.libm2_f32(tegula_ir::mathlib::Fn2::Fmod, &[x], &[y])[0]
            }
            (BinaryOp::Rem, Ty::F64) => self.fmod(t, x, y),
            (
                BinaryOp::Atan2
                | BinaryOp::Pow
                | BinaryOp::Hypot
                | BinaryOp::Remainder
                | BinaryOp::Rhypot
                | BinaryOp::Jn
                | BinaryOp::Yn,
                Ty::F32,
            ) => {
                let f = op.libm().expect("a library function");
                self.libm2_f32(f, &[x], &[y])[0]
            }
            (BinaryOp::MaxNan | BinaryOp::MinNan, Ty::F64) => {
                let m = if op == BinaryOp::MaxNan {
                    "max.f64"
                } else {
                    "min.f64"
                };
                let r = self.b.op(m, class, vec![x.into(), y.into()]);
                // max.f64 drops a NaN; put it back.
                let nan = self
                    .b
                    .op("setp.nan.f64", RegClass::Pred, vec![x.into(), y.into()]);
                let qnan = self.imm(RegClass::F64, Arg::F64(f64::NAN));
                self.b
                    .op("selp.f64", class, vec![qnan.into(), r.into(), nan.into()])
            }
            (BinaryOp::Shl | BinaryOp::Shr, Ty::S64 | Ty::U64) => {
                // The amount is a u32 operand; clamp before truncating so 2^32 + 1 stays large.
                let c = self
                    .b
                    .op("min.u64", RegClass::B64, vec![y.into(), Arg::Imm(64)]);
                let s = self.b.op("cvt.u32.u64", RegClass::B32, vec![c.into()]);
                let opc = binary_rule(op, t, false).expect("shift rule");
                self.b.op(opc, class, vec![x.into(), s.into()])
            }
            _ => {
                let opc = binary_rule(op, t, self.cx.options.fp_fusion)
                    .ok_or_else(|| self.unsupported(format!("`{}` on {d}", op.name())))?;
                self.b.op(opc, class, vec![x.into(), y.into()])
            }
        };
        Ok(self.narrow(d, r, Rounding::NearestEven))
    }

    /// `fmod(x, y)` on f64: `x - trunc(x / y) * y` with one fused rounding, corrected by one
    /// `y` when the rounded quotient was off by one (exact whenever |x / y| < 2^53).
    fn fmod(&mut self, t: Ty, x: Reg, y: Reg) -> Reg {
        let c = x.class;
        let q = self.b.op(format!("div.rn{t}"), c, vec![x.into(), y.into()]);
        let qt = self.b.op(format!("cvt.rzi{t}{t}"), c, vec![q.into()]);
        let nq = self.b.op(format!("neg{t}"), c, vec![qt.into()]);
        let r = self
            .b
            .op(format!("fma.rn{t}"), c, vec![nq.into(), y.into(), x.into()]);
        // If r and x have opposite signs (and r != 0), the quotient was one too large.
        let ay = self.b.op(format!("abs{t}"), c, vec![y.into()]);
        let zero = if t == Ty::F64 {
            Arg::F64(0.0)
        } else {
            Arg::F32(0.0)
        };
        let xneg = self.b.op(
            format!("setp.lt{t}"),
            RegClass::Pred,
            vec![x.into(), zero.clone()],
        );
        let rneg = self.b.op(
            format!("setp.lt{t}"),
            RegClass::Pred,
            vec![r.into(), zero.clone()],
        );
        let rpos = self
            .b
            .op(format!("setp.gt{t}"), RegClass::Pred, vec![r.into(), zero]);
        // `up`: x >= 0 and r < 0  -> r += |y|;  `down`: x < 0 and r > 0 -> r -= |y|.
        let xnonneg = self.b.op("not.pred", RegClass::Pred, vec![xneg.into()]);
        let up = self.b.op(
            "and.pred",
            RegClass::Pred,
            vec![xnonneg.into(), rneg.into()],
        );
        let down = self
            .b
            .op("and.pred", RegClass::Pred, vec![xneg.into(), rpos.into()]);
        let plus = self
            .b
            .op(format!("add.rn{t}"), c, vec![r.into(), ay.into()]);
        let minus = self
            .b
            .op(format!("sub.rn{t}"), c, vec![r.into(), ay.into()]);
        let r1 = self.b.op(
            format!("selp{t}"),
            c,
            vec![plus.into(), r.into(), up.into()],
        );
        let r2 = self.b.op(
            format!("selp{t}"),
            c,
            vec![minus.into(), r1.into(), down.into()],
        );
        // NaN or infinite x, or zero y, give NaN as fmod does; div.rn already produced NaN there
        // except for x finite and y infinite, where fmod is x.
        let yinf = self
            .b
            .op(format!("testp.infinite{t}"), RegClass::Pred, vec![y.into()]);
        let xfin = self
            .b
            .op(format!("testp.finite{t}"), RegClass::Pred, vec![x.into()]);
        let keep = self
            .b
            .op("and.pred", RegClass::Pred, vec![yinf.into(), xfin.into()]);
        self.b.op(
            format!("selp{t}"),
            c,
            vec![x.into(), r2.into(), keep.into()],
        )
    }

    pub(crate) fn unary(&mut self, op: UnaryOp, d: DType, a: Reg) -> R<Reg> {
        let t = arith_ty(d);
        let class = arith_class(d);
        if t == Ty::Pred {
            return Ok(match op {
                UnaryOp::Not => self.b.op("not.pred", RegClass::Pred, vec![a.into()]),
                UnaryOp::Neg | UnaryOp::Abs => a,
                _ => return Err(self.unsupported(format!("`{}` on i1", op.name()))),
            });
        }
        let x = self.widen(d, a);
        let float = matches!(t, Ty::F32 | Ty::F64);
        let r = match op {
            UnaryOp::Neg => {
                // Two's complement negation is the same for unsigned values.
                let t = match t {
                    Ty::U32 => Ty::S32,
                    Ty::U64 => Ty::S64,
                    t => t,
                };
                self.b.op(format!("neg{t}"), class, vec![x.into()])
            }
            UnaryOp::Not => {
                let bits = if class == RegClass::B64 { "b64" } else { "b32" };
                self.b.op(format!("not.{bits}"), class, vec![x.into()])
            }
            UnaryOp::Abs if float => self.b.op(format!("abs{t}"), class, vec![x.into()]),
            UnaryOp::Abs if d.is_unsigned_int() => x,
            UnaryOp::Abs => self.b.op(format!("abs{t}"), class, vec![x.into()]),
            // `clz` and `popc` write a 32-bit count whatever the operand's width.
            UnaryOp::Clz | UnaryOp::Popc if !float => {
                let (w, name) = (bits_of(class), op.name());
                let n = self
                    .b
                    .op(format!("{name}.{w}"), RegClass::B32, vec![x.into()]);
                if class == RegClass::B64 {
                    self.b.op("cvt.u64.u32", RegClass::B64, vec![n.into()])
                } else {
                    n
                }
            }
            UnaryOp::Brev if !float => {
                let w = bits_of(class);
                self.b.op(format!("brev.{w}"), class, vec![x.into()])
            }
            UnaryOp::Floor => self.b.op(format!("cvt.rmi{t}{t}"), class, vec![x.into()]),
            UnaryOp::Ceil => self.b.op(format!("cvt.rpi{t}{t}"), class, vec![x.into()]),
            UnaryOp::Rint => self.b.op(format!("cvt.rni{t}{t}"), class, vec![x.into()]),
            UnaryOp::Trunc => self.b.op(format!("cvt.rzi{t}{t}"), class, vec![x.into()]),
            UnaryOp::Round if float => self.round_half_away(t, x),
            _ if t == Ty::F32 => self.math_f32(op, x)?,
            UnaryOp::Sqrt if t == Ty::F64 => self.b.op("sqrt.rn.f64", class, vec![x.into()]),
            UnaryOp::Rsqrt if t == Ty::F64 => self.b.op("rsqrt.approx.f64", class, vec![x.into()]),
            _ => return Err(self.unsupported(format!("`{}` on {d}", op.name()))),
        };
        Ok(self.narrow(d, r, Rounding::NearestEven))
    }

    pub(crate) fn compare(&mut self, op: CmpOp, d: DType, is_ptr: bool, a: Reg, b: Reg) -> R<Reg> {
        let (x, y, t) = if is_ptr {
            (a, b, Ty::U64)
        } else if d == DType::I1 {
            let x = self.b.op(
                "selp.u32",
                RegClass::B32,
                vec![Arg::Imm(1), Arg::Imm(0), a.into()],
            );
            let y = self.b.op(
                "selp.u32",
                RegClass::B32,
                vec![Arg::Imm(1), Arg::Imm(0), b.into()],
            );
            (x, y, Ty::U32)
        } else {
            (self.widen(d, a), self.widen(d, b), arith_ty(d))
        };
        let float = matches!(t, Ty::F32 | Ty::F64);
        Ok(self.b.op(
            format!("setp.{}{t}", cmp_rule(op, float)),
            RegClass::Pred,
            vec![x.into(), y.into()],
        ))
    }

    pub(crate) fn select(&mut self, c: Reg, a: Reg, b: Reg) -> Reg {
        if a.class == RegClass::Pred {
            let t = self
                .b
                .op("and.pred", RegClass::Pred, vec![c.into(), a.into()]);
            let nc = self.b.op("not.pred", RegClass::Pred, vec![c.into()]);
            let e = self
                .b
                .op("and.pred", RegClass::Pred, vec![nc.into(), b.into()]);
            return self
                .b
                .op("or.pred", RegClass::Pred, vec![t.into(), e.into()]);
        }
        let t = match a.class {
            RegClass::F32 => Ty::F32,
            RegClass::F64 => Ty::F64,
            c => c.bits_ty(),
        };
        self.b.op(
            format!("selp{t}"),
            a.class,
            vec![a.into(), b.into(), c.into()],
        )
    }

    /// Value conversion between any two dtypes (see the crate docs for the rounding rules).
    pub(crate) fn cast(&mut self, from: DType, to: DType, rnd: Rounding, x: Reg) -> R<Reg> {
        use DType::*;
        if from == to {
            return Ok(x);
        }
        let rn = rnd.ptx();
        let to_class = class_of(Elem::Scalar(to));
        // i1 sources: 0 or 1.
        if from == I1 {
            let (one, zero) = match to {
                F32 => (Arg::F32(1.0), Arg::F32(0.0)),
                F64 => (Arg::F64(1.0), Arg::F64(0.0)),
                F16 => (Arg::Imm(0x3C00), Arg::Imm(0)),
                BF16 => (Arg::Imm(0x3F80), Arg::Imm(0)),
                F8E4M3 => (Arg::Imm(0x38), Arg::Imm(0)),
                F8E5M2 => (Arg::Imm(0x3C), Arg::Imm(0)),
                _ => (Arg::Imm(1), Arg::Imm(0)),
            };
            let t = match to_class {
                RegClass::F32 => Ty::F32,
                RegClass::F64 => Ty::F64,
                c => c.bits_ty(),
            };
            return Ok(self
                .b
                .op(format!("selp{t}"), to_class, vec![one, zero, x.into()]));
        }
        // i1 targets: nonzero (NaN counts as zero, as in the interpreter).
        if to == I1 {
            let w = self.widen(from, x);
            let t = arith_ty(from);
            let zero = match t {
                Ty::F32 => Arg::F32(0.0),
                Ty::F64 => Arg::F64(0.0),
                _ => Arg::Imm(0),
            };
            return Ok(self
                .b
                .op(format!("setp.ne{t}"), RegClass::Pred, vec![w.into(), zero]));
        }
        let (fi, ti) = (from.is_int(), to.is_int());
        Ok(match (fi, ti) {
            (true, true) => {
                let (fw, tw) = (from.bits() == 64, to.bits() == 64);
                match (fw, tw) {
                    (false, false) => {
                        if is_narrow_int(to) {
                            self.normalize(to, x)
                        } else {
                            x // i32 <-> u32 and widening from narrow: bits already right
                        }
                    }
                    (false, true) => {
                        let s = if from.is_signed_int() { "s" } else { "u" };
                        self.b
                            .op(format!("cvt.{s}64.{s}32"), RegClass::B64, vec![x.into()])
                    }
                    (true, false) => {
                        let r = self.b.op("cvt.u32.u64", RegClass::B32, vec![x.into()]);
                        if is_narrow_int(to) {
                            self.normalize(to, r)
                        } else {
                            r
                        }
                    }
                    (true, true) => x,
                }
            }
            (false, true) => {
                // Float to int truncates toward zero and saturates; NaN gives 0.
                let w = if from == F64 { x } else { self.widen(from, x) };
                let ft = if from == F64 { Ty::F64 } else { Ty::F32 };
                // The hardware converts NaN to 0 only from f32 into 32 bits; from f64, and into
                // 64 bits, it gives the smallest integer's bit pattern (H100: 0x80000000 and
                // 1 << 63, for unsigned types too), so those select 0 for NaN.
                let nan_to_zero = |l: &mut Self, r: Reg| {
                    if from != F64 && to.bits() < 64 {
                        return r;
                    }
                    let nan = l.b.op(
                        format!("testp.notanumber{ft}"),
                        RegClass::Pred,
                        vec![w.into()],
                    );
                    let t = if r.class == RegClass::B64 {
                        "b64"
                    } else {
                        "b32"
                    };
                    l.b.op(
                        format!("selp.{t}"),
                        r.class,
                        vec![Arg::Imm(0), r.into(), nan.into()],
                    )
                };
                match to {
                    I64 | U64 => {
                        let t = if to == I64 { Ty::S64 } else { Ty::U64 };
                        let r =
                            self.b
                                .op(format!("cvt.rzi.sat{t}{ft}"), RegClass::B64, vec![w.into()]);
                        nan_to_zero(self, r)
                    }
                    _ => {
                        let t = if to.is_signed_int() { Ty::S32 } else { Ty::U32 };
                        let r =
                            self.b
                                .op(format!("cvt.rzi.sat{t}{ft}"), RegClass::B32, vec![w.into()]);
                        let r = nan_to_zero(self, r);
                        if is_narrow_int(to) {
                            let (lo, hi) = int_range(to);
                            let a = self.b.op(
                                format!("max{t}"),
                                RegClass::B32,
                                vec![r.into(), Arg::Imm(lo)],
                            );
                            self.b.op(
                                format!("min{t}"),
                                RegClass::B32,
                                vec![a.into(), Arg::Imm(hi)],
                            )
                        } else {
                            r
                        }
                    }
                }
            }
            (true, false) => {
                let it = if from.bits() == 64 {
                    if from.is_signed_int() {
                        Ty::S64
                    } else {
                        Ty::U64
                    }
                } else if from.is_signed_int() {
                    Ty::S32
                } else {
                    Ty::U32
                };
                match to {
                    F32 | F64 => self.b.op(
                        format!("cvt.{rn}{}{it}", if to == F32 { Ty::F32 } else { Ty::F64 }),
                        to_class,
                        vec![x.into()],
                    ),
                    _ => {
                        // Narrow ints are exact in f32; wider ones go through f32 rounded to odd,
                        // which makes the second rounding to f16/bf16 the correct one.
                        let f = if is_narrow_int(from) {
                            self.b
                                .op(format!("cvt.rn.f32{it}"), RegClass::F32, vec![x.into()])
                        } else {
                            self.round_to_f32_odd(x, it)
                        };
                        self.narrow(to, f, rnd)
                    }
                }
            }
            (false, false) => match (from, to) {
                // fp8 through f32, which holds every fp8 value and every f16 and bf16 one: a
                // widening is exact, a narrowing rounds once (from f64 through f32 rounded to
                // odd, which makes the second rounding the right one).
                (f, F32) if f.is_fp8() => self.widen(from, x),
                (f, F64) if f.is_fp8() => {
                    let w = self.widen(from, x);
                    self.b.op("cvt.f64.f32", RegClass::F64, vec![w.into()])
                }
                (f, t) if f.is_fp8() || t.is_fp8() => {
                    let w = match from {
                        F64 => self.round_to_f32_odd(x, Ty::F64),
                        _ => self.widen(from, x),
                    };
                    self.narrow(to, w, rnd)
                }
                (F16 | BF16, F32) => self.widen(from, x),
                (F16 | BF16, F64) => {
                    let f = self.widen(from, x);
                    self.b.op("cvt.f64.f32", RegClass::F64, vec![f.into()])
                }
                (F16 | BF16, F16 | BF16) => {
                    let f = self.widen(from, x);
                    self.narrow(to, f, rnd)
                }
                (F32, F16 | BF16) => self.narrow(to, x, rnd),
                (F32, F64) => self.b.op("cvt.f64.f32", RegClass::F64, vec![x.into()]),
                (F64, F32) => self
                    .b
                    .op(format!("cvt.{rn}.f32.f64"), RegClass::F32, vec![x.into()]),
                (F64, F16 | BF16) => {
                    let f = self.round_to_f32_odd(x, Ty::F64);
                    self.narrow(to, f, rnd)
                }
                _ => return Err(self.unsupported(format!("cast from {from} to {to}"))),
            },
        })
    }

    /// `x` (of PTX type `t`: a 32/64-bit integer or f64) as f32 rounded toward zero with the
    /// lowest mantissa bit set when inexact ("round to odd").
    fn round_to_f32_odd(&mut self, x: Reg, t: Ty) -> Reg {
        let f = self
            .b
            .op(format!("cvt.rz.f32{t}"), RegClass::F32, vec![x.into()]);
        let back = match t {
            Ty::F64 => self.b.op("cvt.f64.f32", RegClass::F64, vec![f.into()]),
            _ => self
                .b
                .op(format!("cvt.rzi{t}.f32"), x.class, vec![f.into()]),
        };
        let cmp = t;
        let inexact = self.b.op(
            format!("setp.ne{cmp}"),
            RegClass::Pred,
            vec![back.into(), x.into()],
        );
        let bits = self.b.op("mov.b32", RegClass::B32, vec![f.into()]);
        let odd = self
            .b
            .op("or.b32", RegClass::B32, vec![bits.into(), Arg::Imm(1)]);
        let sel = self.b.op(
            "selp.b32",
            RegClass::B32,
            vec![odd.into(), bits.into(), inexact.into()],
        );
        self.b.op("mov.b32", RegClass::F32, vec![sel.into()])
    }

    pub(crate) fn bitcast(&mut self, from: DType, to: DType, x: Reg) -> R<Reg> {
        let (fc, tc) = (class_of(Elem::Scalar(from)), class_of(Elem::Scalar(to)));
        if fc == tc {
            return Ok(if is_narrow_int(to) {
                self.normalize(to, x)
            } else if to.is_fp8() {
                // From i8, whose register is sign-extended: the byte alone.
                self.b
                    .op("and.b32", RegClass::B32, vec![x.into(), Arg::Imm(0xff)])
            } else {
                x
            });
        }
        Ok(match (fc, tc) {
            (RegClass::B16, RegClass::B32) => {
                let op = if to.is_signed_int() {
                    "cvt.s32.s16"
                } else {
                    "cvt.u32.u16"
                };
                self.b.op(op, RegClass::B32, vec![x.into()])
            }
            (RegClass::B32, RegClass::B16) => {
                self.b.op("cvt.u16.u32", RegClass::B16, vec![x.into()])
            }
            (a, b) if a.bytes() == b.bytes() => {
                let t = a.bits_ty();
                self.b.op(format!("mov{t}"), b, vec![x.into()])
            }
            _ => return Err(self.unsupported(format!("bitcast from {from} to {to}"))),
        })
    }
}

/// The range of a narrow integer type.
fn int_range(d: DType) -> (i64, i64) {
    match d {
        DType::I8 => (-128, 127),
        DType::I16 => (-32768, 32767),
        DType::U8 => (0, 255),
        DType::U16 => (0, 65535),
        _ => (i64::MIN, i64::MAX),
    }
}

/// `b32` or `b64`: the bit-type suffix of a 32- or 64-bit integer register.
fn bits_of(class: RegClass) -> &'static str {
    if class == RegClass::B64 {
        "b64"
    } else {
        "b32"
    }
}
