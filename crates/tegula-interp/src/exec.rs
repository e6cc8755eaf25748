//! Running a kernel: argument binding, the grid, and one program's walk over the IR.

use crate::buffer::{try_vec, Buffer};
use crate::error::InterpError;
use crate::memory::{self, Memory, Slot, View, NO_WRITER};
use crate::ops::{self, invalid, Fault, OpResult};
use crate::round::*;
use crate::value::{row_major, Data, Ptr};
use rayon::prelude::*;
use std::rc::Rc;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use tegula_ir::kernel::EntityRef;
use tegula_ir::{Block, Constant, DType, Elem, InstData, Kernel, Op, Rounding, Value};

/// A kernel argument, in parameter order.
#[derive(Clone, Debug)]
pub enum Arg {
    /// A pointer to element `offset` of `buffer` (whose dtype must be the pointee's), through
    /// which the kernel may reach elements `offset .. offset + len` and no others: the view of
    /// the buffer it was given. An access outside that view is an out-of-bounds error naming
    /// the parameter and the index relative to `offset`, even where the buffer goes on (a
    /// 10-element view of a 100-element buffer does not reach element 10). [`Arg::ptr`] is
    /// the whole buffer, [`Arg::view`] a part of it.
    Ptr {
        buffer: Arc<Buffer>,
        offset: usize,
        len: usize,
    },
    /// An integer scalar (u64 parameters take the bit pattern), or a float parameter's value.
    Int(i64),
    /// A float scalar, rounded to the parameter's dtype.
    Float(f64),
}

impl Arg {
    /// A pointer to the first element of `buffer` that may reach all of it.
    pub fn ptr(buffer: &Arc<Buffer>) -> Arg {
        Arg::Ptr {
            buffer: buffer.clone(),
            offset: 0,
            len: buffer.len(),
        }
    }

    /// A pointer to element `offset` of `buffer` that may reach elements `offset .. offset +
    /// len` (see [`Arg::Ptr`]).
    pub fn view(buffer: &Arc<Buffer>, offset: usize, len: usize) -> Arg {
        Arg::Ptr {
            buffer: buffer.clone(),
            offset,
            len,
        }
    }

    fn describe(&self) -> String {
        match self {
            Arg::Ptr {
                buffer,
                offset,
                len,
            } => {
                format!(
                    "a view of {len} elements at offset {offset} of a buffer of {} {}",
                    buffer.len(),
                    buffer.dtype()
                )
            }
            Arg::Int(v) => format!("the integer {v}"),
            Arg::Float(v) => format!("the float {v}"),
        }
    }
}

/// How to run a grid.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Record which program stored each element and report write-write races between programs.
    pub check_races: bool,
    /// Run programs one after another in grid order (x fastest) instead of in parallel.
    pub sequential: bool,
}

/// Runs `kernel` over `grid` (x, y, z program counts) with `args`.
///
/// Programs run in parallel unless `options.sequential`. When several programs fail, the error
/// of the first one in grid order (x fastest, then y, then z) is returned. A grid with no
/// programs (a zero along any axis) runs nothing and returns `Ok` once the arguments are
/// checked, as on the GPU (see `docs/semantics.md`, "Launches").
pub fn run(
    kernel: &Kernel,
    grid: [u32; 3],
    args: &[Arg],
    options: &Options,
) -> Result<(), InterpError> {
    let (mem, params) = bind(kernel, args, options)?;
    let total = grid.iter().map(|&g| g as u64).product::<u64>();
    if total > usize::MAX as u64 || (options.check_races && total >= NO_WRITER as u64) {
        return Err(InterpError::Grid {
            kernel: kernel.name.clone(),
            message: format!("grid {grid:?} has too many programs"),
        });
    }
    let run_one = |linear: usize| {
        Program::new(kernel, &mem, grid, linear as u64)
            .run(&params)
            .err()
    };
    let first_error = if options.sequential {
        (0..total as usize).find_map(run_one)
    } else {
        (0..total as usize).into_par_iter().find_map_first(run_one)
    };
    first_error.map_or(Ok(()), Err)
}

/// Checks arguments against the parameters and lays out the buffers they reach.
fn bind(
    kernel: &Kernel,
    args: &[Arg],
    options: &Options,
) -> Result<(Memory, Vec<Data>), InterpError> {
    if args.len() != kernel.params.len() {
        return Err(InterpError::ArgCount {
            kernel: kernel.name.clone(),
            expected: kernel.params.len(),
            got: args.len(),
        });
    }
    let mut mem = Memory {
        slots: Vec::new(),
        views: Vec::new(),
    };
    let mut params = Vec::with_capacity(args.len());
    for (index, (p, a)) in kernel.params.iter().zip(args).enumerate() {
        let mismatch = |expected: String| InterpError::ArgMismatch {
            kernel: kernel.name.clone(),
            index,
            name: p.name.clone(),
            expected,
            got: a.describe(),
        };
        let value = match (p.ty.elem, a) {
            (
                Elem::Ptr(d),
                Arg::Ptr {
                    buffer,
                    offset,
                    len,
                },
            ) => {
                if buffer.dtype() != d {
                    return Err(mismatch(format!("a buffer of {d}")));
                }
                if offset
                    .checked_add(*len)
                    .is_none_or(|end| end > buffer.len())
                {
                    return Err(mismatch(format!(
                        "a view inside the buffer of {} elements",
                        buffer.len()
                    )));
                }
                // One slot per distinct buffer, so the race check sees aliasing arguments.
                let slot = match mem
                    .slots
                    .iter()
                    .position(|s| Arc::ptr_eq(&s.buffer, buffer))
                {
                    Some(s) => s,
                    None => {
                        let writers = if options.check_races {
                            let n = buffer.len();
                            let mut t = try_vec(n, "the race check's table of writers")?;
                            t.extend((0..n).map(|_| AtomicU32::new(NO_WRITER)));
                            Some(t.into_boxed_slice())
                        } else {
                            None
                        };
                        mem.slots.push(Slot {
                            buffer: buffer.clone(),
                            writers,
                        });
                        mem.slots.len() - 1
                    }
                };
                mem.views.push(View {
                    slot,
                    base: *offset,
                    len: *len,
                    param: index,
                });
                Data::P(vec![Ptr {
                    view: (mem.views.len() - 1) as u32,
                    off: 0,
                }])
            }
            (Elem::Ptr(d), _) => return Err(mismatch(format!("a pointer to {d} (Arg::Ptr)"))),
            (Elem::Scalar(d), Arg::Int(v)) if d.is_int() => {
                // The value must be representable; u64 takes any bit pattern.
                if d != DType::U64 && wrap(d, *v) != *v {
                    return Err(mismatch(format!("an integer that fits in {d}")));
                }
                Data::I(vec![*v])
            }
            (Elem::Scalar(d), Arg::Int(v)) => {
                Data::F(vec![int_to_float(d, Rounding::NearestEven, *v as i128)])
            }
            (Elem::Scalar(d), Arg::Float(f)) if d.is_float() => Data::F(vec![round_to(d, *f)]),
            (Elem::Scalar(d), _) => return Err(mismatch(format!("a {d} scalar"))),
        };
        params.push(value);
    }
    Ok((mem, params))
}

/// One program instance: its id and the values it has computed.
struct Program<'a> {
    k: &'a Kernel,
    mem: &'a Memory,
    grid: [u32; 3],
    pid: [u32; 3],
    /// The linear program id recorded by the race check.
    me: u32,
    env: Vec<Option<Rc<Data>>>,
}

fn unlinearize(grid: [u32; 3], linear: u64) -> [u32; 3] {
    let (gx, gy) = (grid[0].max(1) as u64, grid[1].max(1) as u64);
    [
        (linear % gx) as u32,
        ((linear / gx) % gy) as u32,
        (linear / (gx * gy)) as u32,
    ]
}

impl<'a> Program<'a> {
    fn new(k: &'a Kernel, mem: &'a Memory, grid: [u32; 3], linear: u64) -> Self {
        Program {
            k,
            mem,
            grid,
            pid: unlinearize(grid, linear),
            me: linear as u32,
            env: vec![None; k.values.len()],
        }
    }

    fn run(mut self, params: &[Data]) -> Result<(), InterpError> {
        for (p, d) in self.k.params.iter().zip(params) {
            self.env[p.value.index()] = Some(Rc::new(d.clone()));
        }
        self.block(self.k.body, Vec::new())?;
        Ok(())
    }

    /// The error `f` raised by `inst`, with the kernel, line and program id.
    fn error(&self, f: Fault, inst: &InstData) -> InterpError {
        let (kernel, loc, pid) = (self.k.name.clone(), inst.loc, self.pid);
        let param = |p: usize| self.k.params[p].name.clone();
        match f {
            Fault::OutOfBounds {
                op,
                param: p,
                index,
                len,
            } => InterpError::OutOfBounds {
                kernel,
                op,
                loc,
                pid,
                arg: param(p),
                index,
                len,
            },
            Fault::Race {
                param: p,
                index,
                other,
            } => InterpError::Race {
                kernel,
                loc,
                arg: param(p),
                index,
                first: unlinearize(self.grid, other as u64),
                second: pid,
            },
            Fault::OutOfMemory { bytes } => InterpError::TileOutOfMemory {
                kernel,
                loc,
                pid,
                ty: inst
                    .results
                    .first()
                    .map_or_else(String::new, |&r| self.k.ty(r).to_string()),
                bytes,
            },
            Fault::DivisionByZero => InterpError::DivisionByZero { kernel, loc, pid },
            Fault::IndexOutOfRange {
                index,
                dtype,
                axis,
                len,
                at,
            } => InterpError::IndexOutOfRange {
                kernel,
                op: "gather",
                loc,
                pid,
                index,
                dtype,
                axis,
                len,
                at,
            },
            Fault::ZeroStep => InterpError::ZeroStep { kernel, loc, pid },
            Fault::Assert(message) => InterpError::Assert {
                kernel,
                message,
                loc,
                pid,
            },
            Fault::Invalid(message) => InterpError::InvalidIr {
                kernel,
                loc,
                message,
            },
        }
    }

    fn val(&self, v: Value) -> OpResult<Rc<Data>> {
        match self.env.get(v.index()) {
            Some(Some(d)) => Ok(d.clone()),
            _ => invalid(format!("{v} is used before it is defined")),
        }
    }

    fn set(&mut self, v: Value, d: Rc<Data>) {
        self.env[v.index()] = Some(d);
    }

    /// Runs `b` with its arguments bound to `args`; returns the operands of its terminator.
    fn block(&mut self, b: Block, args: Vec<Rc<Data>>) -> Result<Vec<Rc<Data>>, InterpError> {
        let k = self.k;
        let bd = &k.blocks[b];
        for (&v, a) in bd.args.iter().zip(args) {
            self.set(v, a);
        }
        for &i in &bd.insts {
            let inst = &k.insts[i];
            if inst.op.is_terminator() {
                return inst
                    .args
                    .iter()
                    .map(|&v| self.val(v))
                    .collect::<OpResult<_>>()
                    .map_err(|f| self.error(f, inst));
            }
            match &inst.op {
                Op::For { .. } => self.exec_for(inst)?,
                Op::If => self.exec_if(inst)?,
                Op::While => self.exec_while(inst)?,
                Op::ReduceWith { axis } => self.exec_combined(inst, *axis as usize, None)?,
                Op::ScanWith { axis, reverse } => {
                    self.exec_combined(inst, *axis as usize, Some(*reverse))?
                }
                // A descriptor access runs as its region: the same access as masked ops.
                Op::DescLoad | Op::DescStore => {
                    let results = self.block(inst.regions[0], Vec::new())?;
                    self.bind_results(inst, results)?
                }
                _ => self.exec(inst).map_err(|f| self.error(f, inst))?,
            }
        }
        Ok(Vec::new())
    }

    fn bind_results(&mut self, inst: &InstData, values: Vec<Rc<Data>>) -> Result<(), InterpError> {
        if values.len() != inst.results.len() {
            return Err(self.error(
                Fault::Invalid(format!(
                    "{} values for {} results",
                    values.len(),
                    inst.results.len()
                )),
                inst,
            ));
        }
        for (&r, v) in inst.results.iter().zip(values) {
            self.set(r, v);
        }
        Ok(())
    }

    /// The integer value of a scalar operand, by its dtype's signedness.
    fn scalar_int(&self, v: Value) -> OpResult<i128> {
        match &*self.val(v)? {
            Data::I(x) if x.len() == 1 => Ok(int_value(self.k.ty(v).dtype(), x[0])),
            _ => invalid(format!("{v} is not an integer scalar")),
        }
    }

    /// `iv` over `lo, lo+step, ..` while `< hi` (step > 0) or `> hi` (step < 0).
    fn exec_for(&mut self, inst: &InstData) -> Result<(), InterpError> {
        let bounds = (|| {
            let lo = self.scalar_int(inst.args[0])?;
            let hi = self.scalar_int(inst.args[1])?;
            let step = self.scalar_int(inst.args[2])?;
            if step == 0 {
                return Err(Fault::ZeroStep);
            }
            let carried = inst.args[3..]
                .iter()
                .map(|&v| self.val(v))
                .collect::<OpResult<Vec<_>>>()?;
            Ok((lo, hi, step, carried))
        })();
        let (lo, hi, step, mut carried) = bounds.map_err(|f| self.error(f, inst))?;
        let body = inst.regions[0];
        let iv_dtype = self.k.ty(self.k.blocks[body].args[0]).dtype();
        let mut iv = lo;
        while (step > 0 && iv < hi) || (step < 0 && iv > hi) {
            let mut args = Vec::with_capacity(carried.len() + 1);
            args.push(Rc::new(Data::I(vec![wrap(iv_dtype, iv as i64)])));
            args.extend(carried);
            carried = self.block(body, args)?;
            iv += step;
        }
        self.bind_results(inst, carried)
    }

    /// `reduce_with` (`scan: None`) and `scan_with` (`scan: Some(reverse)`): the combine
    /// region runs once per combine step. A reduction combines each output's elements as a
    /// balanced tree of adjacent pairs in index order (the GPU's order: bit for bit the same
    /// results); a scan folds in index order (from the end when `reverse`).
    fn exec_combined(
        &mut self,
        inst: &InstData,
        axis: usize,
        scan: Option<bool>,
    ) -> Result<(), InterpError> {
        let k = self.k;
        let inputs = inst
            .args
            .iter()
            .map(|&v| self.val(v))
            .collect::<OpResult<Vec<_>>>()
            .map_err(|f| self.error(f, inst))?;
        let dims: Vec<usize> = k
            .ty(inst.args[0])
            .shape
            .dims()
            .iter()
            .map(|&d| d as usize)
            .collect();
        let s = ops::AxisSplit::new(&dims, axis);
        if s.n == 0 && scan.is_none() {
            return Err(self.error(Fault::Invalid("reduction over an empty tile".into()), inst));
        }
        let body = inst.regions[0];
        let element = |x: &Data, at: usize| -> Rc<Data> {
            Rc::new(match x {
                Data::F(v) => Data::F(vec![v[at]]),
                Data::I(v) => Data::I(vec![v[at]]),
                Data::P(v) => Data::P(vec![v[at]]),
            })
        };
        let at = |o: usize, j: usize, i: usize| (o * s.n + j) * s.inner + i;
        let count = match scan {
            None => s.outer * s.inner,
            Some(_) => s.outer * s.n * s.inner,
        };
        // Per result, its elements in row-major order.
        let mut out: Vec<Vec<Option<Rc<Data>>>> = vec![vec![None; count]; inputs.len()];
        for o in 0..s.outer {
            for i in 0..s.inner {
                let column: Vec<Vec<Rc<Data>>> = (0..s.n)
                    .map(|j| inputs.iter().map(|x| element(x, at(o, j, i))).collect())
                    .collect();
                match scan {
                    None => {
                        let total = self.combine_tree(body, column)?;
                        for (r, v) in out.iter_mut().zip(total) {
                            r[o * s.inner + i] = Some(v);
                        }
                    }
                    Some(reverse) => {
                        let order: Vec<usize> = if reverse {
                            (0..s.n).rev().collect()
                        } else {
                            (0..s.n).collect()
                        };
                        let mut acc: Option<Vec<Rc<Data>>> = None;
                        for &j in &order {
                            // What the scan has passed is on the left.
                            let next = match acc {
                                None => column[j].clone(),
                                Some(mut left) => {
                                    left.extend(column[j].iter().cloned());
                                    self.block(body, left)?
                                }
                            };
                            for (r, v) in out.iter_mut().zip(&next) {
                                r[at(o, j, i)] = Some(v.clone());
                            }
                            acc = Some(next);
                        }
                    }
                }
            }
        }
        let results = out
            .into_iter()
            .map(|elems| {
                let elems: Vec<Rc<Data>> = elems.into_iter().flatten().collect();
                Rc::new(concat(&elems))
            })
            .collect();
        self.bind_results(inst, results)
    }

    /// The combination of `leaves` (each the n values of one element) as a balanced tree of
    /// adjacent pairs: `((x0 x1) (x2 x3)) ..`, an odd last one passed up unpaired.
    fn combine_tree(
        &mut self,
        body: Block,
        mut level: Vec<Vec<Rc<Data>>>,
    ) -> Result<Vec<Rc<Data>>, InterpError> {
        while level.len() > 1 {
            let mut next = Vec::with_capacity(level.len().div_ceil(2));
            let mut it = level.into_iter();
            while let Some(mut left) = it.next() {
                match it.next() {
                    Some(right) => {
                        left.extend(right);
                        next.push(self.block(body, left)?);
                    }
                    None => next.push(left),
                }
            }
            level = next;
        }
        Ok(level.pop().expect("a reduction has elements"))
    }

    fn exec_if(&mut self, inst: &InstData) -> Result<(), InterpError> {
        let cond = self
            .scalar_int(inst.args[0])
            .map_err(|f| self.error(f, inst))?;
        let region = inst.regions[if cond != 0 { 0 } else { 1 }];
        let results = self.block(region, Vec::new())?;
        self.bind_results(inst, results)
    }

    fn exec_while(&mut self, inst: &InstData) -> Result<(), InterpError> {
        let mut carried = inst
            .args
            .iter()
            .map(|&v| self.val(v))
            .collect::<OpResult<Vec<_>>>()
            .map_err(|f| self.error(f, inst))?;
        let (before, after) = (inst.regions[0], inst.regions[1]);
        loop {
            let cond = self.block(before, carried.clone())?;
            let go = match cond.first().map(|c| &**c) {
                Some(Data::I(c)) if c.len() == 1 => c[0] != 0,
                _ => {
                    return Err(self.error(
                        Fault::Invalid("while condition is not an i1 scalar".into()),
                        inst,
                    ))
                }
            };
            if !go {
                break;
            }
            carried = self.block(after, carried)?;
        }
        self.bind_results(inst, carried)
    }

    /// Executes a non-region instruction.
    fn exec(&mut self, inst: &InstData) -> OpResult<()> {
        let k = self.k;
        let arg = |i: usize| -> OpResult<Rc<Data>> {
            match inst.args.get(i) {
                Some(&v) => self.val(v),
                None => invalid(format!("operand {i} is missing")),
            }
        };
        let arg_ty = |i: usize| k.ty(inst.args[i]);
        let out_ty = inst.results.first().map(|&r| k.ty(r));
        let dims = |ty: tegula_ir::TileType| -> Vec<usize> {
            ty.shape.dims().iter().map(|&d| d as usize).collect()
        };
        let ty = match out_ty {
            Some(t) => t,
            None => return self.exec_effect(inst),
        };
        let d = ty.dtype();
        let n = ty.numel();
        reserve(ty)?;
        let data = match &inst.op {
            Op::ProgramId { axis } => Data::I(vec![self.axis(&self.pid, *axis)? as i64]),
            Op::NumPrograms { axis } => Data::I(vec![self.axis(&self.grid, *axis)? as i64]),
            Op::Arange { start, end } => Data::I((*start..*end).collect()),
            Op::Const(c) => constant(*c, d, n),
            Op::Splat => arg(0)?.splat(n),
            Op::Broadcast => {
                let (src, dst) = (dims(arg_ty(0)), dims(ty));
                let mut strides = row_major(&src);
                for ax in 0..src.len() {
                    if src[ax] == 1 && dst.get(ax) != Some(&1) {
                        strides[ax] = 0;
                    }
                }
                arg(0)?.gather(&dst, &strides)
            }
            // Same elements in the same row-major order: share the value.
            Op::ExpandDims { .. }
            | Op::Reshape
            | Op::MultipleOf { .. }
            | Op::MaxContiguous { .. }
            | Op::MaxConstancy { .. } => {
                let v = arg(0)?;
                self.set(inst.results[0], v);
                return Ok(());
            }
            Op::Permute { perm } => {
                let src = dims(arg_ty(0));
                let src_strides = row_major(&src);
                let strides: Vec<usize> = perm.iter().map(|&p| src_strides[p as usize]).collect();
                arg(0)?.gather(&dims(ty), &strides)
            }
            Op::Flip { axis } => ops::flip(&dims(arg_ty(0)), *axis as usize, &*arg(0)?)?,
            Op::Gather { axis } => ops::gather(
                &dims(arg_ty(0)),
                &dims(arg_ty(1)),
                arg_ty(1).dtype(),
                *axis as usize,
                &*arg(0)?,
                &*arg(1)?,
            )?,
            Op::Binary(op) => ops::binary(*op, d, &*arg(0)?, &*arg(1)?)?,
            Op::Unary(op) => ops::unary(*op, d, &*arg(0)?)?,
            Op::Compare(op) => ops::compare(
                *op,
                arg_ty(0).dtype(),
                &self.absolute(arg(0)?),
                &self.absolute(arg(1)?),
            )?,
            Op::Select => ops::select(&*arg(0)?, &*arg(1)?, &*arg(2)?)?,
            Op::Fma => ops::fma(d, &*arg(0)?, &*arg(1)?, &*arg(2)?)?,
            Op::Ternary(op) => ops::ternary(*op, d, &*arg(0)?, &*arg(1)?, &*arg(2)?)?,
            Op::Rounded { op, mode } => {
                let xs = (0..op.arity()).map(arg).collect::<OpResult<Vec<_>>>()?;
                let xs: Vec<&Data> = xs.iter().map(|x| &**x).collect();
                ops::rounded(*op, *mode, d, &xs)?
            }
            Op::Cast { rounding } => ops::cast(arg_ty(0).dtype(), d, *rounding, &*arg(0)?)?,
            Op::Bitcast if arg_ty(0).is_ptr() || ty.is_ptr() => {
                self.ptr_bitcast(arg_ty(0), ty, &*arg(0)?)?
            }
            Op::Bitcast => ops::bitcast(arg_ty(0).dtype(), d, &*arg(0)?)?,
            Op::AddPtr => match (&*arg(0)?, &*arg(1)?) {
                (Data::P(p), Data::I(o)) => Data::P(
                    p.iter()
                        .zip(o)
                        .map(|(p, &o)| Ptr {
                            view: p.view,
                            off: p.off.wrapping_add(o),
                        })
                        .collect(),
                ),
                _ => return invalid("addptr needs a pointer and integer offsets"),
            },
            Op::Load {
                has_mask,
                has_other,
                ..
            } => {
                let ptr = arg(0)?;
                let mask = if *has_mask { Some(arg(1)?) } else { None };
                let other = if *has_other {
                    Some(arg(1 + *has_mask as usize)?)
                } else {
                    None
                };
                memory::load(
                    self.mem,
                    d,
                    ptrs(&ptr)?,
                    mask.as_deref().map(ints).transpose()?,
                    other.as_deref(),
                )?
            }
            // `sem` and `scope` change nothing here: every atomic is performed whole, in one
            // order for the whole grid (sequentially consistent, whatever the scope).
            Op::Atomic { op, has_mask, .. } => {
                let (ptr, vals) = (arg(0)?, arg(1)?);
                let mask = if *has_mask { Some(arg(2)?) } else { None };
                memory::atomic(
                    self.mem,
                    *op,
                    arg_ty(0).dtype(),
                    ptrs(&ptr)?,
                    &vals,
                    mask.as_deref().map(ints).transpose()?,
                )?
            }
            Op::AtomicCas { .. } => {
                let (ptr, cmp, vals) = (arg(0)?, arg(1)?, arg(2)?);
                memory::atomic_cas(self.mem, arg_ty(0).dtype(), ptrs(&ptr)?, &cmp, &vals)?
            }
            Op::Reduce { op, axis } => ops::reduce(
                *op,
                arg_ty(0).dtype(),
                &dims(arg_ty(0)),
                *axis as usize,
                &*arg(0)?,
            )?,
            Op::Scan { op, axis, reverse } => ops::scan(
                *op,
                d,
                &dims(arg_ty(0)),
                *axis as usize,
                *reverse,
                &*arg(0)?,
            )?,
            Op::Dot { precision } => {
                let (a, b) = (dims(arg_ty(0)), dims(arg_ty(1)));
                if a.len() != 2 || b.len() != 2 || a[1] != b[0] {
                    return invalid("dot needs a[M, K] and b[K, N]");
                }
                ops::dot(
                    *precision,
                    arg_ty(0).dtype(),
                    d,
                    (a[0], a[1], b[1]),
                    &*arg(0)?,
                    &*arg(1)?,
                    &*arg(2)?,
                )?
            }
            op => return invalid(format!("`{}` does not produce a value here", op.name())),
        };
        if data.len() != n {
            return invalid(format!(
                "`{}` produced {} elements for a result of type {ty}",
                inst.op.name(),
                data.len()
            ));
        }
        self.set(inst.results[0], Rc::new(data));
        Ok(())
    }

    /// Pointers as (buffer, element of the buffer) pairs, in `Ptr`'s fields, for comparing
    /// pointers into different views of one buffer by address; other values unchanged.
    fn absolute(&self, d: Rc<Data>) -> Rc<Data> {
        match &*d {
            Data::P(p) => Rc::new(Data::P(
                p.iter()
                    .map(|p| {
                        let v = &self.mem.views[p.view as usize];
                        Ptr {
                            view: v.slot as u32,
                            off: (v.base as i64).wrapping_add(p.off),
                        }
                    })
                    .collect(),
            )),
            _ => d,
        }
    }

    /// Pointers as integers and back. An address is `(slot + 1) << 40` plus the byte offset
    /// into the launch's `slot`-th buffer: differences of addresses into one buffer are byte
    /// distances, as on the GPU, and an integer that is no address of this launch's buffers
    /// is an error when it becomes a pointer.
    fn ptr_bitcast(
        &self,
        from: tegula_ir::TileType,
        to: tegula_ir::TileType,
        x: &Data,
    ) -> OpResult<Data> {
        const SLOT: i64 = 1 << 40;
        match x {
            Data::P(p) => {
                let size = from.dtype().size_bytes() as i64;
                Ok(Data::I(
                    p.iter()
                        .map(|p| {
                            let v = &self.mem.views[p.view as usize];
                            let element = (v.base as i64).wrapping_add(p.off);
                            ((v.slot as i64 + 1) * SLOT).wrapping_add(element.wrapping_mul(size))
                        })
                        .collect(),
                ))
            }
            Data::I(v) => {
                let d = to.dtype();
                let size = d.size_bytes() as i64;
                v.iter()
                    .map(|&a| {
                        let slot = a.wrapping_add(SLOT / 2).div_euclid(SLOT) - 1;
                        let bad = || {
                            Fault::Invalid(format!(
                                "int_to_ptr: {a:#x} is not an address of this launch's buffers"
                            ))
                        };
                        let s = usize::try_from(slot).map_err(|_| bad())?;
                        let buffer = &self.mem.slots.get(s).ok_or_else(bad)?.buffer;
                        let bytes = a - (slot + 1) * SLOT;
                        if bytes % size != 0 || buffer.dtype().bits() != d.bits() {
                            return Err(Fault::Invalid(format!(
                                "int_to_ptr: {a:#x} is no {d} element of its buffer (of {})",
                                buffer.dtype()
                            )));
                        }
                        // The pointer belongs to the first argument viewing that buffer; its
                        // accesses are checked against that view.
                        let (view, v) = self
                            .mem
                            .views
                            .iter()
                            .enumerate()
                            .find(|(_, v)| v.slot == s)
                            .ok_or_else(bad)?;
                        Ok(Ptr {
                            view: view as u32,
                            off: bytes / size - v.base as i64,
                        })
                    })
                    .collect::<OpResult<Vec<_>>>()
                    .map(Data::P)
            }
            Data::F(_) => invalid("int_to_ptr of floats"),
        }
    }

    fn axis(&self, v: &[u32; 3], axis: u8) -> OpResult<u32> {
        match v.get(axis as usize) {
            Some(&x) => Ok(x),
            None => invalid(format!("grid axis {axis} does not exist")),
        }
    }

    /// Instructions without results: stores, prints, assertions.
    fn exec_effect(&mut self, inst: &InstData) -> OpResult<()> {
        let arg = |i: usize| -> OpResult<Rc<Data>> {
            match inst.args.get(i) {
                Some(&v) => self.val(v),
                None => invalid(format!("operand {i} is missing")),
            }
        };
        match &inst.op {
            Op::Store { has_mask, .. } => {
                let (ptr, vals) = (arg(0)?, arg(1)?);
                let mask = if *has_mask { Some(arg(2)?) } else { None };
                memory::store(
                    self.mem,
                    self.me,
                    self.k.ty(inst.args[0]).dtype(),
                    ptrs(&ptr)?,
                    &vals,
                    mask.as_deref().map(ints).transpose()?,
                )
            }
            Op::Print { prefix, hex } => {
                let [x, y, z] = self.pid;
                let mut line = format!("pid ({x}, {y}, {z}) {prefix}");
                for &v in &inst.args {
                    line.push(' ');
                    let names = |view: u32| {
                        let param = self.mem.views[view as usize].param;
                        self.k.params[param].name.as_str()
                    };
                    let dtype = self.k.ty(v).dtype();
                    line.push_str(&format_value(dtype, &*self.val(v)?, *hex, names));
                }
                eprintln!("{line}");
                Ok(())
            }
            Op::Assert { message } => match &*arg(0)? {
                Data::I(c) if c.iter().all(|&c| c != 0) => Ok(()),
                Data::I(_) => Err(Fault::Assert(message.clone())),
                _ => invalid("assert condition is not i1"),
            },
            // The compiler may rely on an assumption, so a false one is a bug the interpreter
            // reports like a failed assertion.
            Op::Assume { message } => match &*arg(0)? {
                Data::I(c) if c.iter().all(|&c| c != 0) => Ok(()),
                Data::I(_) => Err(Fault::Assert(format!("assumption violated: {message}"))),
                _ => invalid("assumed condition is not i1"),
            },
            // One program is one thread of execution here: nothing to wait for.
            Op::Barrier => Ok(()),
            op => invalid(format!("`{}` must produce a value", op.name())),
        }
    }
}

fn ptrs(d: &Data) -> OpResult<&[Ptr]> {
    match d {
        Data::P(p) => Ok(p),
        _ => invalid("expected a pointer tile"),
    }
}

fn ints(d: &Data) -> OpResult<&[i64]> {
    match d {
        Data::I(v) => Ok(v),
        _ => invalid("expected an i1 mask"),
    }
}

/// A constant of dtype `d` splatted over `n` elements (converted by the cast rules when the
/// literal's kind differs from the dtype).
fn constant(c: Constant, d: DType, n: usize) -> Data {
    match c {
        Constant::Float(f) if d.is_float() => Data::F(vec![round_to(d, f); n]),
        Constant::Float(f) => Data::I(vec![float_to_int(d, f); n]),
        Constant::Int(v) if d.is_float() => {
            Data::F(vec![int_to_float(d, Rounding::NearestEven, v as i128); n])
        }
        Constant::Int(v) => Data::I(vec![wrap(d, v); n]),
    }
}

/// The tiles an op makes smaller than this many elements are not checked against host memory
/// before the op runs (they cost at most a few MB).
const RESERVE_MIN_ELEMENTS: usize = 1 << 18;

/// Checks that the host can hold a tile of `ty` before an op builds one: a fallible
/// reservation of its size (8 bytes an element, 16 a pointer), released at once. A tile the
/// host cannot hold is then an error at the op's line, not an abort. It checks one tile at a
/// time, not the sum of the tiles a program keeps alive.
fn reserve(ty: tegula_ir::TileType) -> OpResult<()> {
    let n = ty.numel();
    if n < RESERVE_MIN_ELEMENTS {
        return Ok(());
    }
    let per = if ty.is_ptr() {
        std::mem::size_of::<Ptr>()
    } else {
        8
    };
    let bytes = (n as u64).saturating_mul(per as u64);
    let mut probe: Vec<u8> = Vec::new();
    match usize::try_from(bytes) {
        Ok(b) if probe.try_reserve_exact(b).is_ok() => Ok(()),
        _ => Err(Fault::OutOfMemory { bytes }),
    }
}

/// The bits of an `f64` holding a value of float dtype `d`, in `d`'s format.
fn float_bits(d: DType, a: f64) -> u64 {
    match d {
        DType::F16 => u64::from(half::f16::from_f64(a).to_bits()),
        DType::BF16 => u64::from(half::bf16::from_f64(a).to_bits()),
        DType::F8E4M3 | DType::F8E5M2 => crate::round::float_to_bits(d, a),
        DType::F32 => u64::from((a as f32).to_bits()),
        _ => a.to_bits(),
    }
}

/// `bits` as `0x` and hex digits, its low `d.bits()` bits zero-padded to that width.
fn hex_bits(d: DType, bits: u64) -> String {
    let width = d.bits().clamp(1, 64);
    let masked = if width == 64 {
        bits
    } else {
        bits & ((1u64 << width) - 1)
    };
    format!("0x{masked:0w$x}", w = (width as usize).div_ceil(4))
}

fn format_value<'n>(d: DType, v: &Data, hex: bool, names: impl Fn(u32) -> &'n str) -> String {
    let items: Vec<String> = match v {
        Data::F(x) if hex => x.iter().map(|&a| hex_bits(d, float_bits(d, a))).collect(),
        Data::I(x) if hex => x.iter().map(|&a| hex_bits(d, a as u64)).collect(),
        Data::F(x) => x.iter().map(|a| format!("{a}")).collect(),
        Data::I(x) if is_unsigned(d) => x.iter().map(|&a| format!("{}", a as u64)).collect(),
        Data::I(x) => x.iter().map(|a| format!("{a}")).collect(),
        Data::P(x) => x
            .iter()
            .map(|p| format!("{}+{}", names(p.view), p.off))
            .collect(),
    };
    if items.len() == 1 {
        items[0].clone()
    } else {
        format!("[{}]", items.join(", "))
    }
}

/// The scalars `parts` (each one element) as one tile's data, in order.
fn concat(parts: &[Rc<Data>]) -> Data {
    let mut out = match parts.first().map(|p| &**p) {
        Some(Data::F(_)) => Data::F(Vec::with_capacity(parts.len())),
        Some(Data::P(_)) => Data::P(Vec::with_capacity(parts.len())),
        _ => Data::I(Vec::with_capacity(parts.len())),
    };
    for p in parts {
        match (&mut out, &**p) {
            (Data::F(o), Data::F(v)) => o.extend_from_slice(v),
            (Data::I(o), Data::I(v)) => o.extend_from_slice(v),
            (Data::P(o), Data::P(v)) => o.extend_from_slice(v),
            _ => unreachable!("one result holds one kind of element"),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_prints_each_dtypes_bits_at_its_width() {
        let none = |_: u32| "";
        let f = |d: DType, v: f64| format_value(d, &Data::F(vec![v]), true, none);
        let i = |d: DType, v: i64| format_value(d, &Data::I(vec![v]), true, none);
        assert_eq!(f(DType::F32, 1.0), "0x3f800000");
        assert_eq!(f(DType::F32, -0.0), "0x80000000");
        assert_eq!(f(DType::F16, 1.0), "0x3c00");
        assert_eq!(f(DType::BF16, -2.0), "0xc000");
        assert_eq!(f(DType::F64, 1.0), "0x3ff0000000000000");
        assert_eq!(i(DType::I8, -1), "0xff");
        assert_eq!(i(DType::I16, 0x1234), "0x1234");
        assert_eq!(i(DType::I32, -2), "0xfffffffe");
        assert_eq!(i(DType::U32, 10), "0x0000000a");
        assert_eq!(i(DType::I64, -1), "0xffffffffffffffff");
        assert_eq!(i(DType::I1, 1), "0x1");
        let tile = format_value(DType::I8, &Data::I(vec![1, -128]), true, none);
        assert_eq!(tile, "[0x01, 0x80]");
        assert_eq!(
            format_value(DType::F32, &Data::F(vec![1.5]), false, none),
            "1.5"
        );
    }
}
