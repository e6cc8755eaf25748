//! The verifier: checks every invariant of a kernel and names the instruction that breaks one.
//!
//! Checks run in two layers and the first failure is returned:
//! 1. layout: every block and instruction a kernel refers to exists, each instruction sits in
//!    exactly one block, each region block belongs to exactly one instruction;
//! 2. per instruction, in program order: its results are its own, its operands exist and are in
//!    scope (defined earlier in the same block or in a block enclosing it), terminators end
//!    regions, and operand, result and region counts and types follow the doc comment of its
//!    [`Op`] variant.
//!
//! Every error carries the instruction, its mnemonic and the source line it was traced from, and
//! explains the problem in terms of the kernel body (a value leaking out of a loop, a mask that is
//! not i1), since [`crate::builder::trace`] hands these messages to kernel authors.

use crate::dtype::DType;
use crate::error::VerifyError;
use crate::kernel::{Block, EntityRef, Inst, InstData, Kernel, Value, ValueDef};
use crate::op::{AtomicOp, Constant, Op};
use crate::types::{Elem, TileType};

/// Checks every invariant of `kernel`; the error names the first offending instruction.
pub fn verify(kernel: &Kernel) -> Result<(), VerifyError> {
    let layout = Layout::build(kernel)?;
    check_params(kernel)?;
    for &inst in &layout.order {
        Check {
            k: kernel,
            layout: &layout,
            inst,
            d: &kernel.insts[inst],
        }
        .run()?;
    }
    Ok(())
}

/// An error about the kernel as a whole (no instruction to blame): reported on `inst0`.
fn kernel_error(k: &Kernel, message: String) -> VerifyError {
    let (inst, op, loc) = match k.insts.get(Inst::new(0)) {
        Some(d) => (Inst::new(0), d.op.name(), d.loc),
        None => (
            Inst::new(0),
            "kernel".to_string(),
            crate::kernel::Loc::UNKNOWN,
        ),
    };
    VerifyError {
        kernel: k.name.clone(),
        inst,
        op,
        message,
        loc,
    }
}

fn inst_error(k: &Kernel, inst: Inst, message: String) -> VerifyError {
    let d = &k.insts[inst];
    VerifyError {
        kernel: k.name.clone(),
        inst,
        op: d.op.name(),
        message,
        loc: d.loc,
    }
}

fn check_params(k: &Kernel) -> Result<(), VerifyError> {
    for (i, p) in k.params.iter().enumerate() {
        let ok =
            matches!(k.values.get(p.value), Some(v) if v.def == ValueDef::Param(i) && v.ty == p.ty);
        if !ok {
            return Err(kernel_error(
                k,
                format!(
                    "parameter {i} (`{}`) does not own its value {}",
                    p.name, p.value
                ),
            ));
        }
        if !p.ty.shape.is_scalar() {
            return Err(kernel_error(
                k,
                format!(
                    "parameter `{}` has type {}; parameters are scalars or pointers",
                    p.name, p.ty
                ),
            ));
        }
    }
    Ok(())
}

/// Where every placed instruction and region block sits.
struct Layout {
    /// The block of each placed instruction and its index there.
    place: Vec<Option<(Block, usize)>>,
    /// The instruction owning each region block (`None` for the body and unattached blocks).
    parent: Vec<Option<Inst>>,
    /// Placed instructions in program order (an instruction before its regions).
    order: Vec<Inst>,
}

impl Layout {
    fn build(k: &Kernel) -> Result<Layout, VerifyError> {
        if k.blocks.get(k.body).is_none() {
            return Err(kernel_error(
                k,
                format!("the kernel body {} does not exist", k.body),
            ));
        }
        if !k.blocks[k.body].args.is_empty() {
            return Err(kernel_error(
                k,
                "the kernel's top-level block has arguments; only region blocks take arguments"
                    .into(),
            ));
        }
        let mut layout = Layout {
            place: vec![None; k.insts.len()],
            parent: vec![None; k.blocks.len()],
            order: Vec::with_capacity(k.insts.len()),
        };
        layout.visit(k, k.body)?;
        Ok(layout)
    }

    fn visit(&mut self, k: &Kernel, b: Block) -> Result<(), VerifyError> {
        for (pos, &i) in k.blocks[b].insts.iter().enumerate() {
            if k.insts.get(i).is_none() {
                return Err(VerifyError {
                    kernel: k.name.clone(),
                    inst: i,
                    op: "<missing>".into(),
                    message: format!("block {b} lists {i}, which does not exist"),
                    loc: crate::kernel::Loc::UNKNOWN,
                });
            }
            if let Some((other, _)) = self.place[i.index()] {
                return Err(inst_error(
                    k,
                    i,
                    format!(
                        "appears in block {other} and again in block {b}; an instruction must \
                         sit in exactly one block"
                    ),
                ));
            }
            self.place[i.index()] = Some((b, pos));
            self.order.push(i);
            for &r in &k.insts[i].regions {
                if k.blocks.get(r).is_none() {
                    return Err(inst_error(k, i, format!("its region {r} does not exist")));
                }
                if r == k.body {
                    return Err(inst_error(
                        k,
                        i,
                        "uses the kernel's top-level block as a region".into(),
                    ));
                }
                if let Some(owner) = self.parent[r.index()] {
                    return Err(inst_error(
                        k,
                        i,
                        format!(
                            "its region {r} is already a region of {owner} (`{}`); a block \
                             belongs to one instruction",
                            k.insts[owner].op.name()
                        ),
                    ));
                }
                self.parent[r.index()] = Some(i);
                self.visit(k, r)?;
            }
        }
        Ok(())
    }

    fn block_of(&self, i: Inst) -> Option<(Block, usize)> {
        self.place.get(i.index()).copied().flatten()
    }

    fn parent_of(&self, b: Block) -> Option<Inst> {
        self.parent.get(b.index()).copied().flatten()
    }

    /// The blocks enclosing `inst`, innermost first, each with the position of the instruction
    /// in it that is or contains `inst`.
    fn chain(&self, inst: Inst) -> Vec<(Block, usize)> {
        let mut out = Vec::new();
        let mut cur = self.block_of(inst);
        while let Some((b, pos)) = cur {
            out.push((b, pos));
            cur = self.parent_of(b).and_then(|p| self.block_of(p));
        }
        out
    }
}

/// What each region of a control-flow op is called in messages.
fn region_name(op: &Op, index: usize) -> &'static str {
    match (op, index) {
        (Op::For { .. }, _) => "body",
        (Op::If, 0) => "then branch",
        (Op::If, _) => "else branch",
        (Op::While, 0) => "condition region",
        (Op::While, _) => "body",
        (Op::DescLoad | Op::DescStore, _) => "expansion",
        (Op::ReduceWith { .. } | Op::ScanWith { .. }, _) => "combine function",
        _ => "region",
    }
}

/// `for loop`, `if`, `while loop`.
fn construct_name(op: &Op) -> String {
    match op {
        Op::For { .. } => "for loop".into(),
        Op::While => "while loop".into(),
        other => other.name(),
    }
}

fn types_list(tys: &[TileType]) -> String {
    let v: Vec<String> = tys.iter().map(|t| t.to_string()).collect();
    format!("({})", v.join(", "))
}

fn is_int_scalar_elem(t: TileType) -> bool {
    !t.is_ptr() && t.dtype().is_int() && !t.dtype().is_bool()
}

fn i1_of(t: TileType) -> TileType {
    TileType::new(Elem::Scalar(DType::I1), t.shape)
}

/// How many operands, results and regions an op takes, and its operand names for messages.
struct Signature {
    operands: &'static str,
    /// `None`: any number (at least `min_args`).
    args: Option<usize>,
    min_args: usize,
    /// `None`: checked by the op's own rule.
    results: Option<usize>,
    regions: usize,
}

fn signature(op: &Op) -> Signature {
    let fixed = |operands, n, results| Signature {
        operands,
        args: Some(n),
        min_args: n,
        results: Some(results),
        regions: 0,
    };
    match op {
        Op::ProgramId { .. } | Op::NumPrograms { .. } | Op::Arange { .. } | Op::Const(_) => {
            fixed("()", 0, 1)
        }
        Op::Splat => fixed("(scalar)", 1, 1),
        Op::Broadcast
        | Op::ExpandDims { .. }
        | Op::Reshape
        | Op::Permute { .. }
        | Op::Flip { .. }
        | Op::Unary(_)
        | Op::Cast { .. }
        | Op::Bitcast
        | Op::Reduce { .. }
        | Op::Scan { .. }
        | Op::MultipleOf { .. }
        | Op::MaxContiguous { .. }
        | Op::MaxConstancy { .. } => fixed("(x)", 1, 1),
        Op::Binary(_) | Op::Compare(_) => fixed("(a, b)", 2, 1),
        Op::Gather { .. } => fixed("(src, index)", 2, 1),
        Op::Select => fixed("(cond, a, b)", 3, 1),
        Op::Fma | Op::Ternary(_) => fixed("(a, b, c)", 3, 1),
        Op::Rounded { op, .. } => match op.arity() {
            1 => fixed("(a)", 1, 1),
            2 => fixed("(a, b)", 2, 1),
            _ => fixed("(a, b, c)", 3, 1),
        },
        Op::AddPtr => fixed("(ptr, offset)", 2, 1),
        Op::Load {
            has_mask,
            has_other,
            ..
        } => match (has_mask, has_other) {
            (false, _) => fixed("(ptr)", 1, 1),
            (true, false) => fixed("(ptr, mask)", 2, 1),
            (true, true) => fixed("(ptr, mask, other)", 3, 1),
        },
        Op::Store { has_mask, .. } => {
            if *has_mask {
                fixed("(ptr, value, mask)", 3, 0)
            } else {
                fixed("(ptr, value)", 2, 0)
            }
        }
        Op::Atomic { has_mask, .. } => {
            if *has_mask {
                fixed("(ptr, value, mask)", 3, 1)
            } else {
                fixed("(ptr, value)", 2, 1)
            }
        }
        Op::AtomicCas { .. } => fixed("(ptr, cmp, value)", 3, 1),
        Op::Dot { .. } => fixed("(a, b, acc)", 3, 1),
        Op::For { .. } => Signature {
            operands: "(lo, hi, step, init..)",
            args: None,
            min_args: 3,
            results: None,
            regions: 1,
        },
        Op::ReduceWith { .. } | Op::ScanWith { .. } => Signature {
            operands: "(x..)",
            args: None,
            min_args: 1,
            results: None,
            regions: 1,
        },
        Op::If => Signature {
            operands: "(cond)",
            args: Some(1),
            min_args: 1,
            results: None,
            regions: 2,
        },
        Op::While => Signature {
            operands: "(init..)",
            args: None,
            min_args: 0,
            results: None,
            regions: 2,
        },
        Op::Yield | Op::Print { .. } => Signature {
            operands: "(values..)",
            args: None,
            min_args: 0,
            results: Some(0),
            regions: 0,
        },
        Op::Condition | Op::Assert { .. } | Op::Assume { .. } => fixed("(cond)", 1, 0),
        Op::Barrier => fixed("()", 0, 0),
        // Arity by the block's rank: checked by the op's own rule.
        Op::DescLoad => Signature {
            operands: "(base, shapes.., strides.., offsets..)",
            args: None,
            min_args: 4,
            results: Some(1),
            regions: 1,
        },
        Op::DescStore => Signature {
            operands: "(base, shapes.., strides.., offsets.., value)",
            args: None,
            min_args: 5,
            results: Some(0),
            regions: 1,
        },
    }
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// The checks of one instruction.
struct Check<'a> {
    k: &'a Kernel,
    layout: &'a Layout,
    inst: Inst,
    d: &'a InstData,
}

type R = Result<(), VerifyError>;

impl Check<'_> {
    fn err(&self, message: impl Into<String>) -> VerifyError {
        VerifyError {
            kernel: self.k.name.clone(),
            inst: self.inst,
            op: self.d.op.name(),
            message: message.into(),
            loc: self.d.loc,
        }
    }

    fn fail(&self, message: impl Into<String>) -> R {
        Err(self.err(message))
    }

    fn name(&self, v: Value) -> String {
        self.k.value_name(v)
    }

    fn arg(&self, n: usize) -> TileType {
        self.k.ty(self.d.args[n])
    }

    fn res(&self, n: usize) -> TileType {
        self.k.ty(self.d.results[n])
    }

    /// `"operand 1 (%7: f32[16])"`.
    fn describe_arg(&self, n: usize) -> String {
        format!(
            "operand {n} ({}: {})",
            self.name(self.d.args[n]),
            self.arg(n)
        )
    }

    fn run(&self) -> R {
        self.check_results()?;
        self.check_operands_exist()?;
        self.check_scoping()?;
        self.check_terminator_placement()?;
        self.check_counts()?;
        self.check_types()?;
        self.check_regions()
    }

    fn check_results(&self) -> R {
        for (n, &v) in self.d.results.iter().enumerate() {
            match self.k.values.get(v) {
                None => return self.fail(format!("result {n} is {v}, which does not exist")),
                Some(vd) if vd.def != ValueDef::Result(self.inst, n) => {
                    return self.fail(format!(
                        "result {n} is {v}, but that value is defined elsewhere ({:?})",
                        vd.def
                    ))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    fn check_operands_exist(&self) -> R {
        for (n, &v) in self.d.args.iter().enumerate() {
            if self.k.values.get(v).is_none() {
                return self.fail(format!("operand {n} is {v}, which does not exist"));
            }
        }
        Ok(())
    }

    /// Every operand must be defined before this instruction, in its block or an enclosing one.
    fn check_scoping(&self) -> R {
        let chain = self.layout.chain(self.inst);
        for (n, &v) in self.d.args.iter().enumerate() {
            self.check_visible(n, v, &chain)?;
        }
        Ok(())
    }

    fn check_visible(&self, n: usize, v: Value, chain: &[(Block, usize)]) -> R {
        let k = self.k;
        let vn = self.name(v);
        match k.values[v].def {
            ValueDef::Param(i) => {
                if i >= k.params.len() || k.params[i].value != v {
                    return self.fail(format!(
                        "operand {n} ({vn}) claims to be parameter {i}, which the kernel does \
                         not have"
                    ));
                }
                Ok(())
            }
            ValueDef::BlockArg(b, i) => {
                if chain.iter().any(|&(cb, _)| cb == b) {
                    return Ok(());
                }
                match self.layout.parent_of(b) {
                    Some(owner) => {
                        let od = &k.insts[owner];
                        let ri = od.regions.iter().position(|&r| r == b).unwrap_or(0);
                        self.fail(format!(
                            "value {vn} (argument {i} of the {} of the {} at {}) is used \
                             outside it{}",
                            region_name(&od.op, ri),
                            construct_name(&od.op),
                            od.loc,
                            escape_hint(&od.op)
                        ))
                    }
                    None => self.fail(format!(
                        "value {vn} is an argument of block {b}, which is not a region of any \
                         placed instruction"
                    )),
                }
            }
            ValueDef::Result(def, _) => {
                let Some((db, dpos)) = self.layout.block_of(def) else {
                    return self.fail(format!(
                        "operand {n} ({vn}) is defined by {def} (`{}`), which is not in any \
                         block (was it removed without replacing its uses?)",
                        k.insts.get(def).map(|d| d.op.name()).unwrap_or_default()
                    ));
                };
                let dd = &k.insts[def];
                if def == self.inst {
                    return self.fail(format!("uses its own result {vn}"));
                }
                if let Some(&(_, upos)) = chain.iter().find(|&&(cb, _)| cb == db) {
                    if dpos < upos {
                        return Ok(());
                    }
                    if dpos == upos {
                        return self.fail(format!(
                            "value {vn} is a result of the enclosing {} at {} and is used \
                             inside it; inside the loop or branch, use the region's block \
                             arguments instead",
                            construct_name(&dd.op),
                            dd.loc
                        ));
                    }
                    return self.fail(format!(
                        "value {vn} is used before it is defined (by `{}` at {})",
                        dd.op.name(),
                        dd.loc
                    ));
                }
                // The definition sits in a region that does not enclose this use: find the
                // outermost such region to name it.
                let mut region = db;
                loop {
                    let owner = self.layout.parent_of(region).expect("db is placed");
                    let (ob, _) = self.layout.block_of(owner).expect("owner is placed");
                    if chain.iter().any(|&(cb, _)| cb == ob) {
                        let od = &k.insts[owner];
                        let ri = od.regions.iter().position(|&r| r == region).unwrap_or(0);
                        let place = match od.op {
                            Op::For { .. } => format!("inside the for loop at {}", od.loc),
                            _ => format!(
                                "inside the {} of the {} at {}",
                                region_name(&od.op, ri),
                                construct_name(&od.op),
                                od.loc
                            ),
                        };
                        return self.fail(format!(
                            "value {vn} defined {place} is used outside it{}",
                            escape_hint(&od.op)
                        ));
                    }
                    region = ob;
                }
            }
        }
    }

    fn check_terminator_placement(&self) -> R {
        let (b, pos) = self
            .layout
            .block_of(self.inst)
            .expect("checked insts are placed");
        let len = self.k.blocks[b].insts.len();
        let name = self.d.op.name();
        if self.d.op.is_terminator() {
            if b == self.k.body {
                return self.fail(format!(
                    "`{name}` appears at the top level of the kernel; it may only end the body \
                     of a for, if or while"
                ));
            }
            if pos + 1 != len {
                return self.fail(format!(
                    "`{name}` must be the last instruction of its region, but {} follow it",
                    plural(len - pos - 1, "instruction")
                ));
            }
        }
        Ok(())
    }

    fn check_counts(&self) -> R {
        let op = &self.d.op;
        let name = op.name();
        if let Op::Load {
            has_mask: false,
            has_other: true,
            ..
        } = op
        {
            return self
                .fail("has an `other` value but no mask; `other` only fills masked-off lanes");
        }
        let sig = signature(op);
        let nargs = self.d.args.len();
        let args_ok = match sig.args {
            Some(n) => nargs == n,
            None => nargs >= sig.min_args,
        };
        if !args_ok {
            let expected = match sig.args {
                Some(n) => plural(n, "operand"),
                None => format!("at least {}", plural(sig.min_args, "operand")),
            };
            return self.fail(format!(
                "`{name}` takes {expected} {}, but has {nargs}",
                sig.operands
            ));
        }
        if let Some(n) = sig.results {
            if self.d.results.len() != n {
                return self.fail(format!(
                    "`{name}` produces {}, but has {}",
                    plural(n, "result"),
                    self.d.results.len()
                ));
            }
        }
        if self.d.regions.len() != sig.regions {
            return self.fail(format!(
                "`{name}` has {}, but {} expected",
                plural(self.d.regions.len(), "region"),
                sig.regions
            ));
        }
        Ok(())
    }

    /// Requires the listed operands (by index) and the result to all have one type.
    fn same_types(&self, args: &[usize], with_result: bool) -> R {
        let first = self.arg(args[0]);
        for &n in &args[1..] {
            if self.arg(n) != first {
                return self.fail(format!(
                    "`{}` needs operands of one type, but {} and {} differ",
                    self.d.op.name(),
                    self.describe_arg(args[0]),
                    self.describe_arg(n)
                ));
            }
        }
        if with_result && self.res(0) != first {
            return self.fail(format!(
                "the result type {} differs from the operand type {first}",
                self.res(0)
            ));
        }
        Ok(())
    }

    fn expect_result(&self, expected: TileType, why: &str) -> R {
        if self.res(0) != expected {
            return self.fail(format!(
                "the result is {} but must be {expected} ({why})",
                self.res(0)
            ));
        }
        Ok(())
    }

    fn no_ptr(&self, n: usize) -> R {
        if self.arg(n).is_ptr() {
            return self.fail(format!(
                "`{}` is not defined on pointers: {}",
                self.d.op.name(),
                self.describe_arg(n)
            ));
        }
        Ok(())
    }

    fn need_ptr(&self, n: usize) -> R {
        if !self.arg(n).is_ptr() {
            return self.fail(format!("{} must be a pointer tile", self.describe_arg(n)));
        }
        Ok(())
    }

    /// The type a value loaded through (or stored to) operand `n` has: the pointee at its shape.
    fn pointee(&self, n: usize) -> TileType {
        let p = self.arg(n);
        TileType::new(Elem::Scalar(p.dtype()), p.shape)
    }

    fn expect_arg(&self, n: usize, expected: TileType, what: &str) -> R {
        if self.arg(n) != expected {
            return self.fail(format!(
                "the {what}, {}, must be {expected}",
                self.describe_arg(n)
            ));
        }
        Ok(())
    }

    fn check_mask(&self, n: usize) -> R {
        let expected = i1_of(self.arg(0));
        self.expect_arg(n, expected, "mask (i1 of the pointer's shape)")
    }

    fn check_types(&self) -> R {
        use Op::*;
        let op = &self.d.op;
        let name = op.name();
        match op {
            ProgramId { axis } | NumPrograms { axis } => {
                if *axis > 2 {
                    return self.fail(format!("grid axis {axis} does not exist (0, 1 or 2)"));
                }
                self.expect_result(TileType::scalar(DType::I32), "grid indices are i32")
            }
            Arange { start, end } => {
                if end <= start {
                    return self.fail(format!("arange({start}, {end}) is empty"));
                }
                if i32::try_from(*start).is_err() || i32::try_from(*end).is_err() {
                    return self.fail(format!("arange({start}, {end}) does not fit in i32"));
                }
                let n = (end - start) as usize;
                let expected = TileType::tile(DType::I32, [n].into());
                self.expect_result(expected, "an i32 tile of length end - start")
            }
            Const(c) => {
                let t = self.res(0);
                if t.is_ptr() {
                    return self.fail(format!("a constant cannot be a pointer ({t})"));
                }
                match c {
                    Constant::Float(_) if !t.dtype().is_float() => self.fail(format!(
                        "the float constant {c} cannot have the integer type {t}"
                    )),
                    Constant::Int(v) if t.dtype().is_bool() && *v != 0 && *v != 1 => {
                        self.fail(format!("the i1 constant must be 0 or 1, got {v}"))
                    }
                    _ => Ok(()),
                }
            }
            Splat => {
                let (x, y) = (self.arg(0), self.res(0));
                if !x.shape.is_scalar() {
                    return self.fail(format!(
                        "splat repeats a scalar, but {} is a tile",
                        self.describe_arg(0)
                    ));
                }
                self.expect_result(y.with_elem(x.elem), "the element type of the scalar")
            }
            Broadcast => {
                let (x, y) = (self.arg(0), self.res(0));
                let fits = x.elem == y.elem
                    && x.shape.rank() == y.shape.rank()
                    && x.shape
                        .dims()
                        .iter()
                        .zip(y.shape.dims())
                        .all(|(&a, &b)| a == b || a == 1);
                if !fits {
                    return self.fail(format!(
                        "cannot broadcast {} to {y}: the rank and element type must match and \
                         only size-1 axes may stretch",
                        self.describe_arg(0)
                    ));
                }
                Ok(())
            }
            ExpandDims { axis } => {
                let x = self.arg(0);
                match x.shape.with_axis(*axis as usize) {
                    Some(s) => self.expect_result(x.with_shape(s), "a size-1 axis inserted"),
                    None => self.fail(format!(
                        "cannot insert axis {axis} into {}",
                        self.describe_arg(0)
                    )),
                }
            }
            Reshape => {
                let (x, y) = (self.arg(0), self.res(0));
                if x.elem != y.elem || x.numel() != y.numel() {
                    return self.fail(format!(
                        "cannot reshape {} to {y}: element type and element count must match",
                        self.describe_arg(0)
                    ));
                }
                Ok(())
            }
            Permute { perm } => {
                let x = self.arg(0);
                let rank = x.shape.rank();
                let mut seen = [false; crate::types::MAX_RANK];
                let valid = perm.len() == rank
                    && perm.iter().all(|&p| {
                        (p as usize) < rank && !std::mem::replace(&mut seen[p as usize], true)
                    });
                if !valid {
                    return self.fail(format!(
                        "{perm:?} is not a permutation of the {rank} axes of {}",
                        self.describe_arg(0)
                    ));
                }
                let dims: Vec<usize> = perm.iter().map(|&p| x.shape.dim(p as usize)).collect();
                let shape = crate::types::Shape::new(&dims).expect("same rank as the operand");
                self.expect_result(x.with_shape(shape), "the operand's axes reordered")
            }
            Flip { axis } => {
                let x = self.arg(0);
                if *axis as usize >= x.shape.rank() {
                    return self.fail(format!(
                        "cannot flip axis {axis} of {}, which has rank {}",
                        self.describe_arg(0),
                        x.shape.rank()
                    ));
                }
                self.expect_result(x, "a flip keeps the operand's type")
            }
            Gather { axis } => {
                let (src, index) = (self.arg(0), self.arg(1));
                let axis = *axis as usize;
                if index.is_ptr() || !index.dtype().is_int() || index.dtype().is_bool() {
                    return self.fail(format!(
                        "gather indices must be integers, but {} is not",
                        self.describe_arg(1)
                    ));
                }
                let rank = src.shape.rank();
                if index.shape.rank() != rank || axis >= rank {
                    return self.fail(format!(
                        "gather along axis {axis} needs a source and an index of one rank, with \
                         the axis among theirs; got {} and {}",
                        self.describe_arg(0),
                        self.describe_arg(1)
                    ));
                }
                if let Some(d) =
                    (0..rank).find(|&d| d != axis && index.shape.dim(d) != src.shape.dim(d))
                {
                    return self.fail(format!(
                        "gather along axis {axis}: the index {} and the source {} differ on \
                         axis {d}; they may differ only on the gathered axis",
                        self.describe_arg(1),
                        self.describe_arg(0)
                    ));
                }
                self.expect_result(
                    src.with_shape(index.shape),
                    "the source's element type at the index's shape",
                )
            }
            Binary(b) => {
                self.same_types(&[0, 1], true)?;
                self.no_ptr(0)?;
                if b.int_only() && self.arg(0).dtype().is_float() {
                    return self.fail(format!(
                        "`{name}` needs integer operands, got {}",
                        self.arg(0)
                    ));
                }
                if b.float_only() && !self.arg(0).dtype().is_float() {
                    return self.fail(format!(
                        "`{name}` needs float operands, got {}",
                        self.arg(0)
                    ));
                }
                if let Some(bits) = b.int_bits() {
                    if !bits.contains(&self.arg(0).dtype().bits()) {
                        return self.fail(format!(
                            "`{name}` needs {} integers, got {}",
                            crate::op::width_words(bits),
                            self.arg(0)
                        ));
                    }
                }
                Ok(())
            }
            Unary(u) => {
                self.same_types(&[0], true)?;
                self.no_ptr(0)?;
                let d = self.arg(0).dtype();
                if u.float_only() && !d.is_float() {
                    return self.fail(format!(
                        "`{name}` needs a float operand, got {}",
                        self.arg(0)
                    ));
                }
                if u.int_only() && d.is_float() {
                    return self.fail(format!(
                        "`{name}` needs an integer operand, got {}",
                        self.arg(0)
                    ));
                }
                if let Some(bits) = u.int_bits() {
                    if !bits.contains(&d.bits()) {
                        return self.fail(format!(
                            "`{name}` needs a {} integer, got {}",
                            crate::op::width_words(bits),
                            self.arg(0)
                        ));
                    }
                }
                Ok(())
            }
            Compare(_) => {
                self.same_types(&[0, 1], false)?;
                self.expect_result(i1_of(self.arg(0)), "i1 of the operands' shape")
            }
            Select => {
                self.same_types(&[1, 2], true)?;
                let expected = i1_of(self.res(0));
                self.expect_arg(0, expected, "condition (i1 of the result's shape)")
            }
            Rounded { op, .. } => {
                let all: Vec<usize> = (0..op.arity()).collect();
                self.same_types(&all, true)?;
                let d = self.arg(0).dtype();
                if self.arg(0).is_ptr() || !matches!(d, DType::F32 | DType::F64) {
                    return self.fail(format!(
                        "`{name}` needs f32 or f64 operands, got {}",
                        self.arg(0)
                    ));
                }
                Ok(())
            }
            Ternary(op) => {
                self.same_types(&[0, 1, 2], true)?;
                let d = self.arg(0).dtype();
                if self.arg(0).is_ptr() || !d.is_int() || !op.int_bits().contains(&d.bits()) {
                    return self.fail(format!(
                        "`{name}` needs {} integers, got {}",
                        crate::op::width_words(op.int_bits()),
                        self.arg(0)
                    ));
                }
                Ok(())
            }
            Fma => {
                self.same_types(&[0, 1, 2], true)?;
                if self.arg(0).is_ptr() || !self.arg(0).dtype().is_float() {
                    return self.fail(format!("`fma` needs float operands, got {}", self.arg(0)));
                }
                Ok(())
            }
            Bitcast if self.arg(0).is_ptr() || self.res(0).is_ptr() => {
                let (x, y) = (self.arg(0), self.res(0));
                let int64 =
                    |t: TileType| !t.is_ptr() && matches!(t.dtype(), DType::I64 | DType::U64);
                if !(x.is_ptr() && int64(y) || int64(x) && y.is_ptr()) || x.shape != y.shape {
                    return self.fail(format!(
                        "a bitcast with pointers converts between a pointer tile and an i64 \
                         or u64 tile of one shape, not {x} to {y}"
                    ));
                }
                Ok(())
            }
            Cast { .. } | Bitcast => {
                let (x, y) = (self.arg(0), self.res(0));
                if x.is_ptr() || y.is_ptr() {
                    return self.fail(format!(
                        "cannot convert between pointers and numbers ({x} to {y})"
                    ));
                }
                if x.shape != y.shape {
                    return self.fail(format!("`{name}` keeps the shape, but converts {x} to {y}"));
                }
                if matches!(op, Bitcast) && x.dtype().bits() != y.dtype().bits() {
                    return self.fail(format!(
                        "bitcast needs types of one width, but {} has {} bits and {} has {}",
                        x.dtype(),
                        x.dtype().bits(),
                        y.dtype(),
                        y.dtype().bits()
                    ));
                }
                Ok(())
            }
            AddPtr => {
                self.need_ptr(0)?;
                let (p, o) = (self.arg(0), self.arg(1));
                if !is_int_scalar_elem(o) {
                    return self.fail(format!(
                        "pointer offsets must be integers, but {} is not",
                        self.describe_arg(1)
                    ));
                }
                if o.shape != p.shape {
                    return self.fail(format!(
                        "the pointer {} and the offsets {} must have one shape",
                        self.describe_arg(0),
                        self.describe_arg(1)
                    ));
                }
                self.expect_result(p, "the pointer operand's type")
            }
            Load {
                has_mask,
                has_other,
                ..
            } => {
                self.need_ptr(0)?;
                let value = self.pointee(0);
                if *has_mask {
                    self.check_mask(1)?;
                }
                if *has_other {
                    self.expect_arg(2, value, "`other` value (the loaded type)")?;
                }
                self.expect_result(value, "the pointee type at the pointer's shape")
            }
            Store { has_mask, .. } | Atomic { has_mask, .. } => {
                self.need_ptr(0)?;
                let value = self.pointee(0);
                self.expect_arg(
                    1,
                    value,
                    "stored value (the pointee type at the pointer's shape)",
                )?;
                if *has_mask {
                    self.check_mask(2)?;
                }
                if let Atomic { op: aop, .. } = op {
                    if matches!(aop, AtomicOp::And | AtomicOp::Or | AtomicOp::Xor)
                        && value.dtype().is_float()
                    {
                        return self.fail(format!(
                            "atomic {} needs integers, the pointee is {}",
                            aop.name(),
                            value.dtype()
                        ));
                    }
                    self.expect_result(value, "the old values, of the pointee type")?;
                }
                Ok(())
            }
            AtomicCas { .. } => {
                self.need_ptr(0)?;
                let value = self.pointee(0);
                self.expect_arg(1, value, "compared value (the pointee type)")?;
                self.expect_arg(2, value, "new value (the pointee type)")?;
                self.expect_result(value, "the old values, of the pointee type")
            }
            Reduce { op: rop, axis } => {
                self.no_ptr(0)?;
                let x = self.arg(0);
                let axis = *axis as usize;
                if axis >= x.shape.rank() {
                    return self.fail(format!(
                        "cannot reduce axis {axis} of {}, which has rank {}",
                        self.describe_arg(0),
                        x.shape.rank()
                    ));
                }
                let dtype = if rop.is_arg() { DType::I32 } else { x.dtype() };
                let expected = TileType::tile(dtype, x.shape.without_axis(axis));
                let why = if rop.is_arg() {
                    "arg-reductions give i32 indices, without the reduced axis"
                } else {
                    "the operand's type without the reduced axis"
                };
                self.expect_result(expected, why)
            }
            Scan { op: rop, axis, .. } => {
                self.no_ptr(0)?;
                if rop.is_arg() {
                    return self.fail(format!("there is no {} scan", rop.name()));
                }
                let x = self.arg(0);
                if *axis as usize >= x.shape.rank() {
                    return self.fail(format!(
                        "cannot scan axis {axis} of {}, which has rank {}",
                        self.describe_arg(0),
                        x.shape.rank()
                    ));
                }
                self.expect_result(x, "a scan keeps the operand's type")
            }
            ReduceWith { axis } | ScanWith { axis, .. } => self.check_combined(*axis as usize),
            Dot { .. } => {
                for n in 0..3 {
                    self.no_ptr(n)?;
                }
                let (a, b, c) = (self.arg(0), self.arg(1), self.arg(2));
                let shapes_ok = a.shape.rank() == 2
                    && b.shape.rank() == 2
                    && c.shape.rank() == 2
                    && a.shape.dim(1) == b.shape.dim(0)
                    && c.shape.dim(0) == a.shape.dim(0)
                    && c.shape.dim(1) == b.shape.dim(1);
                if !shapes_ok {
                    return self.fail(format!(
                        "dot needs a[M, K], b[K, N] and acc[M, N], got a: {a}, b: {b}, acc: {c}"
                    ));
                }
                if a.dtype() != b.dtype() && !(a.dtype().is_fp8() && b.dtype().is_fp8()) {
                    return self.fail(format!(
                        "dot operands must share a dtype (or both be fp8), got a: {a} and b: {b}"
                    ));
                }
                self.expect_result(c, "the accumulator's type")
            }
            MultipleOf { n } | MaxContiguous { n } | MaxConstancy { n } => {
                let rank = self.arg(0).shape.rank().max(1);
                if n.len() != rank || n.contains(&0) {
                    return self.fail(format!(
                        "`{name}` needs one positive value per axis ({rank}), got {n:?}"
                    ));
                }
                self.same_types(&[0], true)
            }
            Condition => self.expect_arg(
                0,
                TileType::scalar(DType::I1),
                "loop condition (a scalar i1)",
            ),
            Barrier => Ok(()),
            DescLoad | DescStore => {
                let base = self.arg(0);
                if !base.is_ptr() || !base.shape.is_scalar() {
                    return self.fail(format!(
                        "a tensor descriptor's base must be a scalar pointer, got {}",
                        self.describe_arg(0)
                    ));
                }
                let block = if matches!(op, DescLoad) {
                    self.res(0)
                } else {
                    self.arg(self.d.args.len() - 1)
                };
                let rank = block.shape.rank();
                let want = 1 + 3 * rank + usize::from(matches!(op, DescStore));
                if rank == 0 || self.d.args.len() != want {
                    return self.fail(format!(
                        "a tensor descriptor access of a {rank}-D block takes {want} operands \
                         (base, then {rank} shapes, strides and offsets{}), got {}",
                        if matches!(op, DescStore) {
                            ", then the value"
                        } else {
                            ""
                        },
                        self.d.args.len()
                    ));
                }
                for i in 1..=3 * rank {
                    let t = self.arg(i);
                    if !t.shape.is_scalar() || !is_int_scalar_elem(t) {
                        return self.fail(format!(
                            "a tensor descriptor's shapes, strides and offsets must be integer \
                             scalars, got {}",
                            self.describe_arg(i)
                        ));
                    }
                }
                let elem = self.pointee(0).elem;
                if block.elem != elem {
                    return self.fail(format!(
                        "a tensor descriptor moves blocks of its pointee type ({}), not {block}",
                        elem
                    ));
                }
                Ok(())
            }
            Assert { .. } | Assume { .. } => {
                let c = self.arg(0);
                if c.is_ptr() || c.dtype() != DType::I1 {
                    return self.fail(format!(
                        "the asserted condition {} must be i1",
                        self.describe_arg(0)
                    ));
                }
                Ok(())
            }
            Yield | Print { .. } => Ok(()),
            For { num_stages } => {
                if *num_stages == Some(0) {
                    return self.fail(
                        "num_stages(0): a loop runs with at least 1 stage (1 turns its \
                         pipelining off)",
                    );
                }
                let iv = self.arg(0);
                for n in 0..3 {
                    let t = self.arg(n);
                    if !is_int_scalar_elem(t) || !t.shape.is_scalar() || t.dtype() != iv.dtype() {
                        return self.fail(format!(
                            "loop bounds must be integer scalars of one type, but {} is not \
                             (the lower bound is {iv})",
                            self.describe_arg(n)
                        ));
                    }
                }
                let init: Vec<TileType> = (3..self.d.args.len()).map(|n| self.arg(n)).collect();
                self.expect_results(&init, "its carried values")
            }
            If => self.expect_arg(0, TileType::scalar(DType::I1), "condition (a scalar i1)"),
            While => {
                let init: Vec<TileType> = (0..self.d.args.len()).map(|n| self.arg(n)).collect();
                self.expect_results(&init, "its carried values")
            }
        }
    }

    fn result_types(&self) -> Vec<TileType> {
        self.d.results.iter().map(|&v| self.k.ty(v)).collect()
    }

    fn expect_results(&self, expected: &[TileType], what: &str) -> R {
        let got = self.result_types();
        if got != expected {
            return self.fail(format!(
                "the results {} must match {what} {}",
                types_list(&got),
                types_list(expected)
            ));
        }
        Ok(())
    }

    /// Region block arguments and terminators of for, if and while.
    fn check_regions(&self) -> R {
        let op = &self.d.op;
        match op {
            Op::For { .. } => {
                let mut args = vec![self.arg(0)];
                args.extend(self.result_types());
                self.check_region(0, &args, &Op::Yield, &self.result_types())
            }
            Op::If => {
                let results = self.result_types();
                self.check_region(0, &[], &Op::Yield, &results)?;
                self.check_region(1, &[], &Op::Yield, &results)
            }
            Op::While => {
                let carried = self.result_types();
                self.check_region(0, &carried, &Op::Condition, &[TileType::scalar(DType::I1)])?;
                self.check_region(1, &carried, &Op::Yield, &carried)
            }
            Op::DescLoad | Op::DescStore => {
                self.check_region(0, &[], &Op::Yield, &self.result_types())
            }
            Op::ReduceWith { .. } | Op::ScanWith { .. } => {
                let elems: Vec<TileType> = (0..self.d.args.len())
                    .map(|n| TileType::scalar(self.arg(n).dtype()))
                    .collect();
                let pair: Vec<TileType> = elems.iter().chain(&elems).copied().collect();
                self.check_region(0, &pair, &Op::Yield, &elems)?;
                self.check_combine_body()
            }
            _ => Ok(()),
        }
    }

    /// The operands and results of `reduce_with` / `scan_with` along `axis`: n tiles of one
    /// shape (no pointers), n results of the operands' element types, without the axis for a
    /// reduction, of the operands' shape for a scan.
    fn check_combined(&self, axis: usize) -> R {
        let n = self.d.args.len();
        let shape = self.arg(0).shape;
        for i in 0..n {
            self.no_ptr(i)?;
            if self.arg(i).shape != shape {
                return self.fail(format!(
                    "combines tiles of one shape, but {} and {} differ",
                    self.describe_arg(0),
                    self.describe_arg(i)
                ));
            }
        }
        if axis >= shape.rank() {
            return self.fail(format!(
                "cannot combine along axis {axis} of {}, which has rank {}",
                self.describe_arg(0),
                shape.rank()
            ));
        }
        let (out_shape, why) = match self.d.op {
            Op::ReduceWith { .. } => (
                shape.without_axis(axis),
                "the operands' types without the reduced axis",
            ),
            _ => (shape, "the operands' types"),
        };
        let expected: Vec<TileType> = (0..n)
            .map(|i| TileType::tile(self.arg(i).dtype(), out_shape))
            .collect();
        self.expect_results(&expected, why)
    }

    /// A combine region holds pure scalar ops only (each backend repeats it per step).
    fn check_combine_body(&self) -> R {
        let b = self.d.regions[0];
        for &i in &self.k.blocks[b].insts {
            let op = &self.k.insts[i].op;
            if !op.allowed_in_combine() && !op.is_terminator() {
                return Err(inst_error(
                    self.k,
                    i,
                    format!(
                        "`{}` cannot appear in the combine function of the {} at {}; a \
                         combine function holds elementwise scalar ops only (arithmetic, \
                         comparisons, select, casts)",
                        op.name(),
                        self.d.op.name(),
                        self.d.loc
                    ),
                ));
            }
        }
        Ok(())
    }

    fn check_region(
        &self,
        index: usize,
        arg_types: &[TileType],
        terminator: &Op,
        term_types: &[TileType],
    ) -> R {
        let op = &self.d.op;
        let what = format!(
            "the {} of the {}",
            region_name(op, index),
            construct_name(op)
        );
        let b = self.d.regions[index];
        let bd = &self.k.blocks[b];
        let got: Option<Vec<TileType>> = bd
            .args
            .iter()
            .map(|&v| self.k.values.get(v).map(|d| d.ty))
            .collect();
        let Some(got) = got else {
            return self.fail(format!("{what} has an argument that does not exist"));
        };
        if got != arg_types {
            let expected_desc = match op {
                Op::For { .. } => "(induction variable, carried values..)",
                Op::While => "(carried values..)",
                Op::ReduceWith { .. } | Op::ScanWith { .. } => {
                    "(left elements.., right elements..)"
                }
                _ => "()",
            };
            return self.fail(format!(
                "{what} takes arguments {}, but must take {} {expected_desc}",
                types_list(&got),
                types_list(arg_types)
            ));
        }
        let Some(&last) = bd.insts.last() else {
            return self.fail(format!(
                "{what} is empty; it must end in `{}`",
                terminator.name()
            ));
        };
        let ld = &self.k.insts[last];
        let misplaced_terminator = bd.insts.iter().any(|&i| self.k.insts[i].op.is_terminator());
        if misplaced_terminator && !ld.op.is_terminator() {
            // Reported on the terminator itself, which says where it should go.
            return Ok(());
        }
        if std::mem::discriminant(&ld.op) != std::mem::discriminant(terminator) {
            return self.fail(format!(
                "{what} ends in `{}` ({last} at {}) instead of `{}`",
                ld.op.name(),
                ld.loc,
                terminator.name()
            ));
        }
        // Missing operands are reported when the terminator itself is checked.
        let yielded: Option<Vec<TileType>> = ld
            .args
            .iter()
            .map(|&v| self.k.values.get(v).map(|d| d.ty))
            .collect();
        let Some(yielded) = yielded else {
            return Ok(());
        };
        if yielded != term_types {
            let message = format!(
                "passes {} to {what} at {}, which expects {}",
                types_list(&yielded),
                self.d.loc,
                types_list(term_types)
            );
            return Err(inst_error(self.k, last, message));
        }
        Ok(())
    }
}

/// How to get a value out of a construct legitimately.
fn escape_hint(op: &Op) -> &'static str {
    match op {
        Op::For { .. } | Op::While => {
            "; a value computed in a loop body exists only inside it, so return it from the body \
             as a loop-carried value and use the loop's result"
        }
        Op::If => {
            "; a value computed in a branch exists only inside it, so return it from both \
             branches and use the if's result"
        }
        _ => "",
    }
}
