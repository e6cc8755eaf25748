//! Who reads what, and what sits where: the users of each value (with the operand position),
//! the block of each instruction and the instruction owning each region, over the live
//! instructions of a kernel (those [`Kernel::walk`] reaches). Computed once by a pass that
//! needs them, so that no pass scans every block to find an instruction's home.

use crate::fast_hash::{HashMap, HashSet};
use crate::kernel::{Block, Inst, Kernel, Value};

/// The use lists and the nesting of a kernel, as of when it was built.
#[derive(Clone, Debug, Default)]
pub struct Uses {
    users: HashMap<Value, Vec<(Inst, usize)>>,
    block_of: HashMap<Inst, Block>,
    parent: HashMap<Block, Inst>,
}

impl Uses {
    pub fn new(k: &Kernel) -> Uses {
        let mut uses = Uses::default();
        let mut stack = vec![k.body];
        while let Some(b) = stack.pop() {
            for &i in &k.blocks[b].insts {
                uses.block_of.insert(i, b);
                for (pos, &a) in k.insts[i].args.iter().enumerate() {
                    uses.users.entry(a).or_default().push((i, pos));
                }
                for &r in &k.insts[i].regions {
                    uses.parent.insert(r, i);
                    stack.push(r);
                }
            }
        }
        // Program order within each list, whatever order the blocks were visited in.
        let order: HashMap<Inst, usize> = k.walk().into_iter().zip(0..).collect();
        for list in uses.users.values_mut() {
            list.sort_by_key(|&(i, pos)| (order[&i], pos));
        }
        uses
    }

    /// The live instructions reading `v`, each with the operand position it reads, in program
    /// order; `None` when nothing reads it.
    pub fn users(&self, v: Value) -> Option<&[(Inst, usize)]> {
        self.users.get(&v).map(Vec::as_slice)
    }

    /// Whether a live instruction reads `v`.
    pub fn is_read(&self, v: Value) -> bool {
        self.users.contains_key(&v)
    }

    /// The block holding `inst` (`None` for an instruction that is not live).
    pub fn block_of(&self, inst: Inst) -> Option<Block> {
        self.block_of.get(&inst).copied()
    }

    /// The instruction whose region `block` is (`None` for the kernel's body).
    pub fn parent_of(&self, block: Block) -> Option<Inst> {
        self.parent.get(&block).copied()
    }
}

/// Every value defined in `block` or in the regions nested in it: block arguments and results.
pub fn region_values(k: &Kernel, block: Block) -> HashSet<Value> {
    let mut out = HashSet::default();
    let mut stack = vec![block];
    while let Some(b) = stack.pop() {
        out.extend(k.blocks[b].args.iter().copied());
        for &i in &k.blocks[b].insts {
            out.extend(k.insts[i].results.iter().copied());
            stack.extend(k.insts[i].regions.iter().copied());
        }
    }
    out
}
