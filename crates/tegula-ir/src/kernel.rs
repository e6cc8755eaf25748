//! The kernel: arenas of values, instructions and blocks addressed by typed indices.

use crate::op::Op;
use crate::types::TileType;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Index, IndexMut};

/// A typed index into an [`Arena`].
pub trait EntityRef: Copy + Eq {
    fn new(index: usize) -> Self;
    fn index(self) -> usize;
}

macro_rules! entity {
    ($(#[$m:meta])* $name:ident, $prefix:literal) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(u32);
        impl EntityRef for $name {
            fn new(index: usize) -> Self {
                $name(u32::try_from(index).expect("arena overflow"))
            }
            fn index(self) -> usize {
                self.0 as usize
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{self}")
            }
        }
    };
}

entity!(
    /// An SSA value: a kernel parameter, an instruction result, or a block argument.
    Value,
    "%"
);
entity!(
    /// An instruction.
    Inst,
    "inst"
);
entity!(
    /// A region body: block arguments and a list of instructions.
    Block,
    "^bb"
);

/// A vector addressed by a typed index: the storage of every entity.
#[derive(Clone, Debug, PartialEq)]
pub struct Arena<K, V> {
    items: Vec<V>,
    _key: PhantomData<K>,
}

impl<K: EntityRef, V> Arena<K, V> {
    pub fn new() -> Self {
        Arena {
            items: Vec::new(),
            _key: PhantomData,
        }
    }

    pub fn push(&mut self, v: V) -> K {
        self.items.push(v);
        K::new(self.items.len() - 1)
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn get(&self, k: K) -> Option<&V> {
        self.items.get(k.index())
    }

    pub fn keys(&self) -> impl Iterator<Item = K> {
        (0..self.items.len()).map(K::new)
    }

    pub fn iter(&self) -> impl Iterator<Item = (K, &V)> {
        self.items.iter().enumerate().map(|(i, v)| (K::new(i), v))
    }
}

impl<K: EntityRef, V> Default for Arena<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: EntityRef, V> Index<K> for Arena<K, V> {
    type Output = V;
    fn index(&self, k: K) -> &V {
        &self.items[k.index()]
    }
}

impl<K: EntityRef, V> IndexMut<K> for Arena<K, V> {
    fn index_mut(&mut self, k: K) -> &mut V {
        &mut self.items[k.index()]
    }
}

/// A place in the user's Rust source (from `#[track_caller]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Loc {
    pub file: &'static str,
    pub line: u32,
    pub col: u32,
}

impl Loc {
    pub const UNKNOWN: Loc = Loc {
        file: "<unknown>",
        line: 0,
        col: 0,
    };

    /// The location of the caller of the `#[track_caller]` function this is called in.
    #[track_caller]
    pub fn caller() -> Loc {
        let l = std::panic::Location::caller();
        Loc {
            file: l.file(),
            line: l.line(),
            col: l.column(),
        }
    }
}

impl fmt::Display for Loc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.col)
    }
}

/// Where a value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueDef {
    Param(usize),
    Result(Inst, usize),
    BlockArg(Block, usize),
}

#[derive(Clone, Debug, PartialEq)]
pub struct ValueData {
    pub ty: TileType,
    pub def: ValueDef,
}

#[derive(Clone, Debug, PartialEq)]
pub struct InstData {
    pub op: Op,
    pub args: Vec<Value>,
    pub results: Vec<Value>,
    pub regions: Vec<Block>,
    /// The user's source line that created this instruction.
    pub loc: Loc,
}

#[derive(Clone, Debug, PartialEq, Default)]
pub struct BlockData {
    pub args: Vec<Value>,
    pub insts: Vec<Inst>,
}

/// Facts about a pointer or integer argument that a specialization may rely on (Triton's
/// `tt.divisibility`): they feed vectorization on the GPU and are part of the cache key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ParamFacts {
    /// The largest power of two, at most [`ParamFacts::MAX_DIVISIBILITY`], known to divide the
    /// argument: a pointer's address in bytes, an integer's value; 1 where nothing is known.
    /// Triton specializes on 16 alone; the powers below it matter too: a bf16 row stride of
    /// 1000 elements (divisible by 8) still gives 16-byte rows, so its loads vectorize.
    pub divisibility: u32,
}

impl ParamFacts {
    /// The largest divisibility a specialization records (16: a 16-byte vector's alignment).
    pub const MAX_DIVISIBILITY: u32 = 16;

    /// The fact of a value: its largest power-of-two divisor, capped at
    /// [`ParamFacts::MAX_DIVISIBILITY`] (0 is divisible by everything).
    pub fn of_value(value: u64) -> ParamFacts {
        let cap = Self::MAX_DIVISIBILITY.trailing_zeros();
        ParamFacts {
            divisibility: 1 << value.trailing_zeros().min(cap),
        }
    }

    /// Whether the argument is known to be a multiple of `n` (a power of two).
    pub fn divisible_by(&self, n: u32) -> bool {
        self.divisibility.is_multiple_of(n)
    }
}

impl Default for ParamFacts {
    fn default() -> ParamFacts {
        ParamFacts { divisibility: 1 }
    }
}

/// A kernel parameter: a pointer or a scalar.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub name: String,
    pub ty: TileType,
    pub value: Value,
    pub facts: ParamFacts,
}

/// One traced kernel specialization.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    pub name: String,
    pub params: Vec<Param>,
    /// The top-level block; it has no arguments and no terminator.
    pub body: Block,
    pub values: Arena<Value, ValueData>,
    pub insts: Arena<Inst, InstData>,
    pub blocks: Arena<Block, BlockData>,
}

impl Kernel {
    /// An empty kernel with its top-level block.
    pub fn new(name: impl Into<String>) -> Kernel {
        let mut blocks = Arena::new();
        let body = blocks.push(BlockData::default());
        Kernel {
            name: name.into(),
            params: Vec::new(),
            body,
            values: Arena::new(),
            insts: Arena::new(),
            blocks,
        }
    }

    pub fn ty(&self, v: Value) -> TileType {
        self.values[v].ty
    }

    /// Adds a parameter and returns its value.
    pub fn add_param(&mut self, name: impl Into<String>, ty: TileType) -> Value {
        let index = self.params.len();
        let value = self.values.push(ValueData {
            ty,
            def: ValueDef::Param(index),
        });
        self.params.push(Param {
            name: name.into(),
            ty,
            value,
            facts: ParamFacts::default(),
        });
        value
    }

    /// Creates an empty block with arguments of the given types.
    pub fn add_block(&mut self, arg_types: &[TileType]) -> Block {
        let block = self.blocks.push(BlockData::default());
        for (i, &ty) in arg_types.iter().enumerate() {
            let v = self.values.push(ValueData {
                ty,
                def: ValueDef::BlockArg(block, i),
            });
            self.blocks[block].args.push(v);
        }
        block
    }

    /// Appends an instruction to `block`, creating its result values; returns the instruction.
    pub fn append(
        &mut self,
        block: Block,
        op: Op,
        args: Vec<Value>,
        result_types: &[TileType],
        regions: Vec<Block>,
        loc: Loc,
    ) -> Inst {
        let inst = self.insts.push(InstData {
            op,
            args,
            results: Vec::new(),
            regions,
            loc,
        });
        for (i, &ty) in result_types.iter().enumerate() {
            let v = self.values.push(ValueData {
                ty,
                def: ValueDef::Result(inst, i),
            });
            self.insts[inst].results.push(v);
        }
        self.blocks[block].insts.push(inst);
        inst
    }

    /// The instruction that defines `v`, if it is an instruction result.
    pub fn def_inst(&self, v: Value) -> Option<Inst> {
        match self.values[v].def {
            ValueDef::Result(i, _) => Some(i),
            _ => None,
        }
    }

    /// A name for a value in messages: the parameter name for parameters, `%N` otherwise.
    pub fn value_name(&self, v: Value) -> String {
        match self.values[v].def {
            ValueDef::Param(i) => format!("%{}", self.params[i].name),
            _ => v.to_string(),
        }
    }

    /// Every instruction, depth first in program order (regions before what follows them).
    pub fn walk(&self) -> Vec<Inst> {
        let mut out = Vec::with_capacity(self.insts.len());
        self.walk_block(self.body, &mut out);
        out
    }

    fn walk_block(&self, b: Block, out: &mut Vec<Inst>) {
        for &i in &self.blocks[b].insts {
            out.push(i);
            for &r in &self.insts[i].regions {
                self.walk_block(r, out);
            }
        }
    }
}
