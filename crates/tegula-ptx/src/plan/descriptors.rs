//! Rule *tensor memory accelerator*: a tensor descriptor's load or store (`Op::DescLoad`,
//! `Op::DescStore`) moves its whole block with one TMA copy (`cp.async.bulk.tensor`) when
//!
//! 0. its block is 2-D, and the launch asks for it (`CompileOptions::tma`,
//!    `LaunchConfig::with_tma`) or it is a load inside a loop (condition 7: a pipeline's TMA
//!    copies cost its threads nothing);
//! 1. the target has TMA (sm_90 and newer);
//! 2. the descriptor is known at launch: its base is a pointer parameter specialized as
//!    16-byte aligned, its shapes and its first stride are parameters or constants (the
//!    runtime encodes the tensor map from the launch's arguments);
//! 3. its last stride is the constant 1 and its first, in bytes, a multiple of 16 (a constant,
//!    or a parameter specialized as a multiple of 16);
//! 4. its block has at most 256 elements a side and rows of a multiple of 16 bytes, of
//!    elements held at their width in registers (f16, bf16, 32- and 64-bit types);
//! 5. its innermost offset is known to be a multiple of 16 bytes (a TMA copy's box starts
//!    16-byte aligned along its rows: the GPU faults otherwise);
//! 6. for a store: its innermost shape is known to be a multiple of 16 bytes (measured on the
//!    H200: a store into a tensor whose rows end inside a 16-byte word writes elements past
//!    the end of the row);
//! 7. for a load: it is not inside a loop. A load inside a loop that meets 0-5 is a
//!    [`Streamable`] instead: replaced by its region like the others, it remembers its map
//!    and coordinates, and a software pipeline that streams it fills its slots with TMA
//!    copies (rule *TMA slots* of [`super::pipeline`]), which adds its map then.
//!
//! A TMA store cannot start at a negative coordinate (the GPU faults); a store on TMA keeps
//! its region, which runs instead when an offset is negative at run time.
//! Every other descriptor access is replaced by its region (the same access as masked loads
//! and stores) before any other decision, so the rest of the plan sees ordinary loads and
//! stores, pipelines them, and reports them as such. Accesses on TMA keep their instruction
//! (without the region); the maps they use are kernel parameters the runtime fills in
//! ([`TensorMapAbi`]), one per distinct descriptor and block shape.

use crate::analysis::axis_info::AxisAnalysis;
use crate::{CompileOptions, Target};
use tegula_ir::fast_hash::HashMap;
use tegula_ir::uses::Uses;
use tegula_ir::{BinaryOp, Constant, DType, Inst, Kernel, Loc, Op, Value, ValueDef};

/// Where a number of the tensor map comes from at launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LaunchValue {
    /// The kernel's parameter of this index.
    Param(usize),
    Const(i64),
    /// The product of the first `count` of these integer parameters and `scale` (a shape
    /// the kernel computes as `Z * H * N_CTX`); the launch refuses one it cannot represent.
    Product {
        params: [usize; MAX_FACTORS],
        count: usize,
        scale: i64,
    },
}

/// The most parameters a [`LaunchValue::Product`] multiplies.
pub const MAX_FACTORS: usize = 4;

impl LaunchValue {
    /// The value from the launch's integer arguments (`arg(i)`: parameter `i`'s), `None`
    /// when one is missing or the product overflows.
    pub fn eval(self, arg: impl Fn(usize) -> Option<i64>) -> Option<i64> {
        match self {
            LaunchValue::Param(i) => arg(i),
            LaunchValue::Const(c) => Some(c),
            LaunchValue::Product {
                params,
                count,
                scale,
            } => params[..count]
                .iter()
                .try_fold(scale, |acc, &i| acc.checked_mul(arg(i)?)),
        }
    }

    /// `self * other`, while the factors fit in a [`LaunchValue::Product`].
    pub fn times(self, other: LaunchValue) -> Option<LaunchValue> {
        let parts = |v: LaunchValue| match v {
            LaunchValue::Param(i) => (vec![i], 1),
            LaunchValue::Const(c) => (vec![], c),
            LaunchValue::Product {
                params,
                count,
                scale,
            } => (params[..count].to_vec(), scale),
        };
        let (mut ps, a) = parts(self);
        let (qs, b) = parts(other);
        ps.extend(qs);
        let scale = a.checked_mul(b)?;
        if ps.len() > MAX_FACTORS {
            return None;
        }
        let mut params = [0; MAX_FACTORS];
        params[..ps.len()].copy_from_slice(&ps);
        Some(LaunchValue::Product {
            params,
            count: ps.len(),
            scale,
        })
    }
}

/// A tensor map the launch encodes (`cuTensorMapEncodeTiled`) and passes as an extra kernel
/// parameter (`.param .align 64 .b8 NAME[128]`) after the kernel's own.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorMapAbi {
    /// The PTX parameter's name.
    pub name: String,
    pub dtype: DType,
    /// The pointer parameter holding the tensor's address.
    pub base: usize,
    /// Sizes, innermost (contiguous) axis first: `[shape1, shape0]`.
    pub dims: [LaunchValue; 2],
    /// The stride of the outer axis, in elements (`stride0`).
    pub row_stride: LaunchValue,
    /// The block, innermost axis first: `[block1, block0]`.
    pub box_dims: [u32; 2],
    /// The shared-memory swizzle of the box, as the span in bytes whose 16-byte chunks it
    /// permutes (`CU_TENSOR_MAP_SWIZZLE_32B`/`64B`/`128B`), or 0 for none.
    pub swizzle: u32,
}

/// A descriptor load inside a loop that a TMA copy can move (conditions 0-5 of the module
/// doc), replaced by its region: the pipeline may fill its slots by TMA.
#[derive(Clone, Debug)]
pub struct Streamable {
    /// Its map, unnamed, unswizzled, with the block as its box.
    pub map: TensorMapAbi,
    /// The block's offsets `[o0, o1]` (scalars).
    pub offsets: [Value; 2],
}

/// The rule's decisions.
#[derive(Clone, Debug, Default)]
pub struct Descriptors {
    pub maps: Vec<TensorMapAbi>,
    /// Each access on TMA and the map it uses.
    pub on_tma: HashMap<Inst, usize>,
    /// Accesses replaced by their region, with the unmet condition, for the report.
    pub expanded: Vec<(Loc, String)>,
    /// The loads inside loops that TMA can move, by the region's load that replaced them.
    pub streamable: HashMap<Inst, Streamable>,
}

impl Descriptors {
    /// How many loads move on TMA (each waits on an `mbarrier` of its own).
    pub fn tma_loads(&self, k: &Kernel) -> usize {
        self.on_tma
            .keys()
            .filter(|&&i| matches!(k.insts[i].op, Op::DescLoad))
            .count()
    }

    /// How many stores move on TMA.
    pub fn tma_stores(&self, k: &Kernel) -> usize {
        self.on_tma.len() - self.tma_loads(k)
    }

    /// The index of `map` (named here when it is new), one per distinct map.
    pub fn add_map(&mut self, map: &TensorMapAbi) -> usize {
        let same = |m: &TensorMapAbi| TensorMapAbi {
            name: String::new(),
            ..m.clone()
        };
        if let Some(i) = self.maps.iter().position(|m| same(m) == same(map)) {
            return i;
        }
        let n = self.maps.len();
        self.maps.push(TensorMapAbi {
            name: format!("tmap{n}"),
            ..map.clone()
        });
        n
    }
}

/// Whether the registers of the descriptor access `inst` hold its elements at their width, so
/// that a block in shared memory is the registers' bytes (8- and 16-bit integers, fp8 and i1
/// are held widened).
fn held_at_width(k: &Kernel, inst: Inst) -> Result<(), String> {
    let dtype = k.ty(k.insts[inst].args[0]).dtype();
    if crate::emit::types::class_of(tegula_ir::Elem::Scalar(dtype)).bytes()
        != dtype.size_bytes() as u32
    {
        return Err(format!(
            "its {dtype} elements are held widened in registers"
        ));
    }
    Ok(())
}

/// Decides every descriptor access of `k` and replaces those not on TMA by their regions.
pub fn place(k: &mut Kernel, target: &Target, options: &CompileOptions) -> Descriptors {
    let uses = Uses::new(k);
    let axis = AxisAnalysis::run(k);
    let mut out = Descriptors::default();
    let accesses: Vec<Inst> = k
        .walk()
        .into_iter()
        .filter(|&i| matches!(k.insts[i].op, Op::DescLoad | Op::DescStore))
        .collect();
    for inst in accesses {
        let is_load = matches!(k.insts[inst].op, Op::DescLoad);
        let looped = is_load && in_loop(k, &uses, inst);
        let asked = if options.tma || looped {
            Ok(())
        } else {
            Err("TMA not asked for (LaunchConfig::with_tma)".to_string())
        };
        // A slot's bytes are read by the tensor cores as they are; a block landed for the
        // registers is read at the registers' width.
        let placed = asked
            .and_then(|()| tma_map(k, &axis, target, inst))
            .and_then(|map| {
                if looped {
                    Ok(map)
                } else {
                    held_at_width(k, inst).map(|()| map)
                }
            });
        match placed {
            Ok(map) if !looped => {
                let at = out.add_map(&map);
                out.on_tma.insert(inst, at);
                if is_load {
                    k.insts[inst].regions.clear();
                }
            }
            Ok(map) => {
                let offsets = [k.insts[inst].args[5], k.insts[inst].args[6]];
                if let Some(load) = expand(k, &uses, inst) {
                    out.streamable.insert(load, Streamable { map, offsets });
                }
            }
            Err(why) => {
                out.expanded.push((k.insts[inst].loc, why));
                expand(k, &uses, inst);
            }
        }
    }
    out
}

/// The map of access `inst` when the rule takes it, else the first condition it fails.
fn tma_map(
    k: &Kernel,
    axis: &AxisAnalysis,
    target: &Target,
    inst: Inst,
) -> Result<TensorMapAbi, String> {
    if target.sm < 90 {
        return Err(format!("sm_{} has no tensor memory accelerator", target.sm));
    }
    let d = &k.insts[inst];
    let is_load = matches!(d.op, Op::DescLoad);
    let rank = if is_load {
        k.ty(d.results[0]).shape.rank()
    } else {
        k.ty(d.args[d.args.len() - 1]).shape.rank()
    };
    if rank != 2 {
        return Err(format!("its block is {rank}-D (the rule moves 2-D blocks)"));
    }
    let base = match k.values[d.args[0]].def {
        ValueDef::Param(i) if k.params[i].facts.divisible_by(16) => i,
        ValueDef::Param(_) => return Err("its base is not specialized as 16-byte aligned".into()),
        _ => return Err("its base is computed in the kernel, not a parameter".into()),
    };
    let dtype = k.ty(d.args[0]).dtype();
    let eb = dtype.size_bytes() as i64;
    let launch = |v: Value, what: &str| -> Result<LaunchValue, String> {
        launch_value(k, v).ok_or_else(|| {
            format!(
                "its {what} is computed in the kernel (other than as a product of parameters \
                 and constants)"
            )
        })
    };
    let shape0 = launch(d.args[1], "shape")?;
    let shape1 = launch(d.args[2], "shape")?;
    let stride0 = launch(d.args[3], "first stride")?;
    if launch(d.args[4], "last stride") != Ok(LaunchValue::Const(1)) {
        return Err("its last stride is not the constant 1".into());
    }
    // A count of elements whose bytes are known to be a multiple of 16.
    let whole_words_of = |v: LaunchValue| {
        let divisor = |i: usize| Some(k.params[i].facts.divisibility as i64);
        v.eval(divisor)
            .is_some_and(|d| d.saturating_mul(eb) % 16 == 0)
    };
    let aligned = whole_words_of(stride0);
    if !aligned {
        return Err("its first stride is not known to be a multiple of 16 bytes".into());
    }
    let block = if is_load {
        k.ty(d.results[0]).shape
    } else {
        k.ty(d.args[7]).shape
    };
    let (b0, b1) = (block.dim(0) as i64, block.dim(1) as i64);
    if b0 > 256 || b1 > 256 || (b1 * eb) % 16 != 0 {
        return Err(format!(
            "its block {b0}x{b1} is not one TMA moves (at most 256 a side, rows of a multiple \
             of 16 bytes)"
        ));
    }
    if !is_load {
        let whole_words = whole_words_of(shape1);
        if !whole_words {
            return Err(format!(
                "its last shape is not known to be a multiple of {} elements (16 bytes)",
                16 / eb
            ));
        }
    }
    let inner = axis.get(k, d.args[6]);
    let inner_divisor = inner
        .constant
        .map_or(inner.last_divisibility() as i64, |c| {
            if c == 0 {
                1 << 40
            } else {
                c.abs() & c.abs().wrapping_neg()
            }
        });
    if inner_divisor.saturating_mul(eb) % 16 != 0 {
        return Err(format!(
            "its last offset is not known to be a multiple of {} elements (16 bytes)",
            16 / eb
        ));
    }
    Ok(TensorMapAbi {
        name: String::new(),
        dtype,
        base,
        dims: [shape1, shape0],
        row_stride: stride0,
        box_dims: [b1 as u32, b0 as u32],
        swizzle: 0,
    })
}

/// `v` as the launch computes it: a parameter, an integer constant, or a product of them
/// (through integer casts).
fn launch_value(k: &Kernel, v: Value) -> Option<LaunchValue> {
    match k.values[v].def {
        ValueDef::Param(i) => Some(LaunchValue::Param(i)),
        ValueDef::Result(def, 0) => {
            let d = &k.insts[def];
            let int = |v: Value| k.ty(v).dtype().is_int();
            match d.op {
                Op::Const(Constant::Int(c)) => Some(LaunchValue::Const(c)),
                Op::Binary(BinaryOp::Mul) if int(d.results[0]) => {
                    launch_value(k, d.args[0])?.times(launch_value(k, d.args[1])?)
                }
                // Widening only: a narrowing cast would wrap what the launch computes whole.
                Op::Cast { .. } | Op::Splat
                    if int(d.results[0])
                        && int(d.args[0])
                        && k.ty(d.results[0]).dtype().bits() >= k.ty(d.args[0]).dtype().bits() =>
                {
                    launch_value(k, d.args[0])
                }
                _ => None,
            }
        }
        _ => None,
    }
}

fn in_loop(k: &Kernel, uses: &Uses, inst: Inst) -> bool {
    let mut at = uses.block_of(inst).and_then(|b| uses.parent_of(b));
    while let Some(p) = at {
        if matches!(k.insts[p].op, Op::For { .. } | Op::While) {
            return true;
        }
        at = uses.block_of(p).and_then(|b| uses.parent_of(b));
    }
    false
}

/// Replaces access `inst` by the instructions of its region, the yielded value standing for
/// its result; returns the region's load whose value that is.
fn expand(k: &mut Kernel, uses: &Uses, inst: Inst) -> Option<Inst> {
    let block = uses.block_of(inst).expect("a live access");
    let region = k.insts[inst].regions[0];
    let mut body = k.blocks[region].insts.clone();
    let term = body.pop().expect("the region ends in its yield");
    let yielded = k.insts[term].args.clone();
    let at = k.blocks[block]
        .insts
        .iter()
        .position(|&i| i == inst)
        .expect("the access is in its block");
    k.blocks[block].insts.splice(at..=at, body);
    k.blocks[region].insts.clear();
    let (&r, &v) = (k.insts[inst].results.first()?, yielded.first()?);
    for &(u, pos) in uses.users(r).unwrap_or(&[]) {
        k.insts[u].args[pos] = v;
    }
    k.def_inst(v)
        .filter(|&i| matches!(k.insts[i].op, Op::Load { .. }))
}
