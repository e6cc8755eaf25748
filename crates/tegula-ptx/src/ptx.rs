//! A small typed PTX builder: registers are typed by class, instructions are data
//! (a guard, an opcode and operands), and the text is printed once at the end.
//!
//! Opcodes are assembled from typed pieces (`Ty` prints `.f32`, `.s32`, ...) by the lowering's
//! rule tables; nothing else in the crate writes PTX text.

use std::fmt::{self, Write};

/// The register classes of the emitted function; every virtual register belongs to one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RegClass {
    Pred,
    B16,
    B32,
    B64,
    F32,
    F64,
}

impl RegClass {
    pub const ALL: [RegClass; 6] = [
        RegClass::Pred,
        RegClass::B16,
        RegClass::B32,
        RegClass::B64,
        RegClass::F32,
        RegClass::F64,
    ];

    fn prefix(self) -> &'static str {
        match self {
            RegClass::Pred => "%p",
            RegClass::B16 => "%h",
            RegClass::B32 => "%r",
            RegClass::B64 => "%rd",
            RegClass::F32 => "%f",
            RegClass::F64 => "%fd",
        }
    }

    fn decl(self) -> &'static str {
        match self {
            RegClass::Pred => ".pred",
            RegClass::B16 => ".b16",
            RegClass::B32 => ".b32",
            RegClass::B64 => ".b64",
            RegClass::F32 => ".f32",
            RegClass::F64 => ".f64",
        }
    }

    /// Bytes one register of this class occupies in shared memory (predicates as one byte).
    pub fn bytes(self) -> u32 {
        match self {
            RegClass::Pred => 1,
            RegClass::B16 => 2,
            RegClass::B32 | RegClass::F32 => 4,
            RegClass::B64 | RegClass::F64 => 8,
        }
    }

    /// The untyped bit type of the class (`.b32` for `%r` and `%f`).
    pub fn bits_ty(self) -> Ty {
        match self {
            RegClass::Pred => Ty::Pred,
            RegClass::B16 => Ty::B16,
            RegClass::B32 | RegClass::F32 => Ty::B32,
            RegClass::B64 | RegClass::F64 => Ty::B64,
        }
    }
}

/// A virtual register.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reg {
    pub class: RegClass,
    id: u32,
}

impl fmt::Display for Reg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.class.prefix(), self.id)
    }
}

/// Instruction types: the `.f32` of `add.f32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ty {
    Pred,
    B8,
    B16,
    B32,
    B64,
    U8,
    U16,
    U32,
    U64,
    S8,
    S16,
    S32,
    S64,
    F16,
    BF16,
    F32,
    F64,
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Ty::Pred => ".pred",
            Ty::B8 => ".b8",
            Ty::B16 => ".b16",
            Ty::B32 => ".b32",
            Ty::B64 => ".b64",
            Ty::U8 => ".u8",
            Ty::U16 => ".u16",
            Ty::U32 => ".u32",
            Ty::U64 => ".u64",
            Ty::S8 => ".s8",
            Ty::S16 => ".s16",
            Ty::S32 => ".s32",
            Ty::S64 => ".s64",
            Ty::F16 => ".f16",
            Ty::BF16 => ".bf16",
            Ty::F32 => ".f32",
            Ty::F64 => ".f64",
        };
        f.write_str(s)
    }
}

/// An instruction operand.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    Reg(Reg),
    Imm(i64),
    /// A float immediate, printed as exact hex (`0f3F800000`).
    F32(f32),
    F64(f64),
    /// A special register or symbol: `%tid.x`, a parameter name, the shared buffer.
    Sym(String),
    /// `[base+offset]`.
    Addr(Box<Arg>, i64),
    /// `{%r1, %r2}`: vector operands and packing moves.
    Vec(Vec<Reg>),
    Label(String),
    /// `[map, {%r1, %r2}]`: a tensor map's address and a block's coordinates (TMA copies).
    TensorCoords(Reg, Vec<Reg>),
}

impl From<Reg> for Arg {
    fn from(r: Reg) -> Arg {
        Arg::Reg(r)
    }
}

impl fmt::Display for Arg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arg::Reg(r) => write!(f, "{r}"),
            Arg::Imm(v) => write!(f, "{v}"),
            Arg::F32(v) => write!(f, "0f{:08X}", v.to_bits()),
            Arg::F64(v) => write!(f, "0d{:016X}", v.to_bits()),
            Arg::Sym(s) | Arg::Label(s) => f.write_str(s),
            Arg::Addr(base, 0) => write!(f, "[{base}]"),
            Arg::Addr(base, off) => write!(f, "[{base}+{off}]"),
            Arg::TensorCoords(map, coords) => {
                write!(f, "[{map}, {{")?;
                for (i, r) in coords.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{r}")?;
                }
                f.write_str("}]")
            }
            Arg::Vec(regs) => {
                f.write_str("{")?;
                for (i, r) in regs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{r}")?;
                }
                f.write_str("}")
            }
        }
    }
}

/// One instruction: `@guard opcode args;`.
#[derive(Clone, Debug, PartialEq)]
pub struct Instr {
    /// The predicate register and whether it is negated (`@!%p1`).
    pub guard: Option<(Reg, bool)>,
    pub opcode: String,
    pub args: Vec<Arg>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    Instr(Instr),
    Label(String),
    Comment(String),
    /// Where the code hoisted before a loop or branch body goes ([`Builder::hoist_point`]);
    /// replaced by that code when the function is printed.
    HoistPoint(HoistPoint),
}

/// A place just before a region's code where values of the enclosing code the region computes
/// are emitted once (loop-invariant code motion), see [`Builder::set_hoist_target`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HoistPoint(usize);

impl fmt::Display for Stmt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stmt::Label(l) => write!(f, "{l}:"),
            Stmt::Comment(c) => write!(f, "\t// {c}"),
            Stmt::HoistPoint(_) => Ok(()),
            Stmt::Instr(i) => {
                f.write_str("\t")?;
                if let Some((p, neg)) = i.guard {
                    write!(f, "@{}{p} ", if neg { "!" } else { "" })?;
                }
                f.write_str(&i.opcode)?;
                for (k, a) in i.args.iter().enumerate() {
                    f.write_str(if k == 0 { " " } else { ", " })?;
                    write!(f, "{a}")?;
                }
                f.write_str(";")
            }
        }
    }
}

/// A kernel parameter declaration.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamDecl {
    pub name: String,
    pub ty: Ty,
    /// Passed as this many bytes, 64-byte aligned (`.param .align 64 .b8 NAME[N]`: a TMA
    /// tensor map), instead of one value of `ty`.
    pub bytes: Option<u32>,
}

/// The function being built: registers, a prologue (thread geometry, parameters, invariant
/// values) and the body.
#[derive(Debug, Default)]
pub struct Builder {
    counts: [u32; 6],
    prologue: Vec<Stmt>,
    body: Vec<Stmt>,
    /// While true, instructions go to the prologue.
    in_prologue: bool,
    /// The code of each hoist point, and the one instructions go to (when not to the
    /// prologue).
    hoisted: Vec<Vec<Stmt>>,
    hoist_target: Option<HoistPoint>,
    labels: u32,
    /// Module-scope declarations (a called function's prototype, constant strings), each once.
    module_decls: Vec<String>,
    /// Function-scope declarations (`.local` buffers, call `.param`s), each once.
    function_decls: Vec<String>,
}

impl Builder {
    pub fn new() -> Builder {
        Builder::default()
    }

    /// A fresh register of `class`.
    pub fn reg(&mut self, class: RegClass) -> Reg {
        let i = RegClass::ALL.iter().position(|&c| c == class).unwrap_or(0);
        self.counts[i] += 1;
        Reg {
            class,
            id: self.counts[i],
        }
    }

    fn push(&mut self, s: Stmt) {
        if self.in_prologue {
            self.prologue.push(s)
        } else if let Some(HoistPoint(h)) = self.hoist_target {
            self.hoisted[h].push(s)
        } else {
            self.body.push(s)
        }
    }

    /// Emits `opcode args;`.
    pub fn emit(&mut self, opcode: impl Into<String>, args: Vec<Arg>) {
        self.push(Stmt::Instr(Instr {
            guard: None,
            opcode: opcode.into(),
            args,
        }));
    }

    /// Emits `@p opcode args;` (`@!p` when `negate`).
    pub fn emit_guarded(
        &mut self,
        p: Reg,
        negate: bool,
        opcode: impl Into<String>,
        args: Vec<Arg>,
    ) {
        self.push(Stmt::Instr(Instr {
            guard: Some((p, negate)),
            opcode: opcode.into(),
            args,
        }));
    }

    /// Allocates a register of `class`, emits `opcode dst, srcs..;` and returns `dst`.
    pub fn op(&mut self, opcode: impl Into<String>, class: RegClass, srcs: Vec<Arg>) -> Reg {
        let d = self.reg(class);
        let mut args = vec![Arg::Reg(d)];
        args.extend(srcs);
        self.emit(opcode, args);
        d
    }

    pub fn comment(&mut self, c: impl Into<String>) {
        self.push(Stmt::Comment(c.into()));
    }

    /// A fresh label name (not yet placed).
    pub fn new_label(&mut self, hint: &str) -> String {
        self.labels += 1;
        format!("$L_{hint}_{}", self.labels)
    }

    pub fn place_label(&mut self, l: &str) {
        self.push(Stmt::Label(l.to_string()));
    }

    pub fn bra(&mut self, l: &str) {
        self.emit("bra.uni", vec![Arg::Label(l.to_string())]);
    }

    pub fn bra_if(&mut self, p: Reg, negate: bool, l: &str) {
        self.emit_guarded(p, negate, "bra", vec![Arg::Label(l.to_string())]);
    }

    pub fn mov(&mut self, dst: Reg, src: impl Into<Arg>) {
        let ty = match dst.class {
            RegClass::F32 => Ty::F32,
            RegClass::F64 => Ty::F64,
            c => c.bits_ty(),
        };
        self.emit(format!("mov{ty}"), vec![Arg::Reg(dst), src.into()]);
    }

    /// Declares `text` (a whole PTX directive, without the `;`) at module scope, once.
    pub fn declare_in_module(&mut self, text: String) {
        if !self.module_decls.contains(&text) {
            self.module_decls.push(text);
        }
    }

    /// Declares `text` (a whole PTX directive, without the `;`) in the function, once.
    pub fn declare_in_function(&mut self, text: String) {
        if !self.function_decls.contains(&text) {
            self.function_decls.push(text);
        }
    }

    /// Runs `f` with instructions going to the prologue.
    pub fn in_prologue<R>(&mut self, f: impl FnOnce(&mut Builder) -> R) -> R {
        let was = std::mem::replace(&mut self.in_prologue, true);
        let r = f(self);
        self.in_prologue = was;
        r
    }

    pub fn is_in_prologue(&self) -> bool {
        self.in_prologue
    }

    pub fn set_prologue(&mut self, on: bool) -> bool {
        std::mem::replace(&mut self.in_prologue, on)
    }

    /// Marks the current place of the body as a hoist point: code sent there later (see
    /// [`Builder::set_hoist_target`]) runs here, before what is emitted after this call.
    pub fn hoist_point(&mut self) -> HoistPoint {
        let h = HoistPoint(self.hoisted.len());
        self.hoisted.push(Vec::new());
        self.body.push(Stmt::HoistPoint(h));
        h
    }

    /// Sends instructions to hoist point `to` (`None`: the body again); returns the previous
    /// target. The prologue, while on, takes precedence.
    pub fn set_hoist_target(&mut self, to: Option<HoistPoint>) -> Option<HoistPoint> {
        std::mem::replace(&mut self.hoist_target, to)
    }

    /// Instructions emitted so far (prologue then body, hoisted code in place), for tests.
    pub fn stmts(&self) -> impl Iterator<Item = &Stmt> {
        let body = self.body.iter().flat_map(|s| match s {
            Stmt::HoistPoint(HoistPoint(h)) => self.hoisted[*h].iter(),
            s => std::slice::from_ref(s).iter(),
        });
        self.prologue.iter().chain(body)
    }

    /// Prints the whole module.
    pub fn finish(
        &self,
        version: &str,
        target: &str,
        entry: &str,
        params: &[ParamDecl],
        max_threads: u32,
        min_blocks_per_sm: Option<u32>,
    ) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "//\n// Generated by tegula-ptx\n//\n");
        let _ = writeln!(s, ".version {version}");
        let _ = writeln!(s, ".target {target}");
        let _ = writeln!(s, ".address_size 64\n");
        for d in &self.module_decls {
            let _ = writeln!(s, "{d};");
        }
        if !self.module_decls.is_empty() {
            s.push('\n');
        }
        let _ = writeln!(s, ".visible .entry {entry}(");
        for (i, p) in params.iter().enumerate() {
            let sep = if i + 1 < params.len() { "," } else { "" };
            let _ = match p.bytes {
                Some(n) => writeln!(s, "\t.param .align 64 .b8 {}[{n}]{sep}", p.name),
                None => writeln!(s, "\t.param {} {}{sep}", p.ty, p.name),
            };
        }
        let _ = writeln!(s, ")\n.maxntid {max_threads}, 1, 1");
        if let Some(n) = min_blocks_per_sm {
            let _ = writeln!(s, ".minnctapersm {n}");
        }
        s.push_str("{\n");
        for (i, c) in RegClass::ALL.iter().enumerate() {
            if self.counts[i] > 0 {
                let _ = writeln!(
                    s,
                    "\t.reg {} {}<{}>;",
                    c.decl(),
                    c.prefix(),
                    self.counts[i] + 1
                );
            }
        }
        for d in &self.function_decls {
            let _ = writeln!(s, "\t{d};");
        }
        s.push('\n');
        let live = self.live_statements();
        for (st, _) in self.stmts().zip(live).filter(|(_, live)| *live) {
            let _ = writeln!(s, "{st}");
        }
        let _ = writeln!(s, "\tret;\n}}");
        s
    }
}

impl Builder {
    /// Which statements of [`Builder::stmts`] the printed function keeps: all but the
    /// instructions without side effects whose results nothing kept reads (to a fixpoint, so a
    /// dead address also frees the multiplication feeding it). The lowering computes values
    /// per element and leaves unused ones (e.g. the 64-bit address of every element of a
    /// vector access, of which only the first is used); ptxas would remove them too, but its
    /// time grows with the text it is given.
    ///
    /// Liveness ignores control flow: a register read anywhere counts, including above its
    /// definition through a loop's back edge, which is always correct and enough here.
    fn live_statements(&self) -> Vec<bool> {
        let stmts: Vec<&Stmt> = self.stmts().collect();
        // Registers are numbered densely per class (see `Builder::reg`), so sets and maps of
        // them are vectors indexed by a slot: the class's first slot plus the register's id.
        let mut class_start = [0usize; 6];
        let mut slots = 0;
        for (start, &count) in class_start.iter_mut().zip(&self.counts) {
            *start = slots;
            slots += count as usize + 1;
        }
        let slot = |r: Reg| class_start[r.class as usize] + r.id as usize;
        let removable: Vec<bool> = stmts
            .iter()
            .map(|st| matches!(st, Stmt::Instr(ins) if ins.is_removable()))
            .collect();
        // The removable instructions defining each register: those of slot s are
        // `defs[def_start[s]..def_start[s + 1]]`, in statement order.
        let mut def_start = vec![0usize; slots + 1];
        for (st, _) in stmts.iter().zip(&removable).filter(|(_, &r)| r) {
            if let Stmt::Instr(ins) = st {
                for &r in ins.destinations() {
                    def_start[slot(r) + 1] += 1;
                }
            }
        }
        for s in 0..slots {
            def_start[s + 1] += def_start[s];
        }
        let mut defs = vec![0usize; def_start[slots]];
        let mut filled = def_start.clone();
        let mut live = vec![true; stmts.len()];
        // Registers known to be read by a kept instruction, and those still to propagate.
        let mut read = vec![false; slots];
        let mut pending: Vec<Reg> = Vec::new();
        for (i, st) in stmts.iter().enumerate() {
            let Stmt::Instr(ins) = st else { continue };
            if removable[i] {
                live[i] = false;
                for &r in ins.destinations() {
                    defs[filled[slot(r)]] = i;
                    filled[slot(r)] += 1;
                }
            } else {
                ins.for_each_read(|r| {
                    if !std::mem::replace(&mut read[slot(r)], true) {
                        pending.push(r);
                    }
                });
            }
        }
        while let Some(r) = pending.pop() {
            for &i in &defs[def_start[slot(r)]..def_start[slot(r) + 1]] {
                if live[i] {
                    continue;
                }
                live[i] = true;
                if let Stmt::Instr(ins) = stmts[i] {
                    ins.for_each_read(|r| {
                        if !std::mem::replace(&mut read[slot(r)], true) {
                            pending.push(r);
                        }
                    });
                }
            }
        }
        live
    }
}

impl Instr {
    /// True when the instruction's only effect is writing its destination operand (the
    /// first): arithmetic, comparisons, conversions, moves, and loads that are not ordered
    /// memory operations. Listed positively, so an opcode not named here is always kept.
    fn is_removable(&self) -> bool {
        const PURE: &[&str] = &[
            "mov",
            "add",
            "sub",
            "mul",
            "mad",
            "fma",
            "div",
            "rem",
            "neg",
            "abs",
            "min",
            "max",
            "and",
            "or",
            "xor",
            "not",
            "shl",
            "shr",
            "bfe",
            "bfi",
            "clz",
            "popc",
            "brev",
            "prmt",
            "sad",
            "mul24",
            "setp",
            "selp",
            "testp",
            "copysign",
            "cvt",
            "cvta",
            "ex2",
            "lg2",
            "sqrt",
            "rsqrt",
            "rcp",
            "sin",
            "cos",
            "tanh",
            "createpolicy",
        ];
        if self.destinations().is_empty() {
            return false;
        }
        let mut parts = self.opcode.split('.');
        match parts.next() {
            // Volatile, relaxed or acquire loads order memory; plain ones only read it.
            Some("ld") => !parts.any(|q| matches!(q, "volatile" | "relaxed" | "acquire" | "mmio")),
            Some(head) => PURE.contains(&head),
            None => false,
        }
    }

    /// The registers a removable instruction writes: its first operand, one or a vector.
    fn destinations(&self) -> &[Reg] {
        match self.args.first() {
            Some(Arg::Reg(r)) => std::slice::from_ref(r),
            Some(Arg::Vec(regs)) => regs,
            _ => &[],
        }
    }

    /// Calls `f` on every register the instruction reads: its guard, and its operands past
    /// the destination for a removable instruction, all operands otherwise (a store's first
    /// operand is its address; an atomic's result is kept as if read).
    fn for_each_read(&self, mut f: impl FnMut(Reg)) {
        if let Some((p, _)) = self.guard {
            f(p);
        }
        let skip = usize::from(self.is_removable());
        for a in &self.args[skip.min(self.args.len())..] {
            a.for_each_reg(&mut f);
        }
    }
}

impl Arg {
    fn for_each_reg(&self, f: &mut impl FnMut(Reg)) {
        match self {
            Arg::Reg(r) => f(*r),
            Arg::Addr(base, _) => base.for_each_reg(f),
            Arg::Vec(regs) => regs.iter().copied().for_each(f),
            Arg::TensorCoords(map, coords) => {
                f(*map);
                coords.iter().copied().for_each(f)
            }
            Arg::Imm(_) | Arg::F32(_) | Arg::F64(_) | Arg::Sym(_) | Arg::Label(_) => {}
        }
    }
}

/// The name of the kernel's shared-memory scratch buffer.
pub const SMEM: &str = "tg_smem";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_typed_instructions() {
        let mut b = Builder::new();
        let a = b.reg(RegClass::F32);
        let p = b.reg(RegClass::Pred);
        let d = b.op(
            format!("add.rn{}", Ty::F32),
            RegClass::F32,
            vec![a.into(), Arg::F32(1.0)],
        );
        b.emit_guarded(
            p,
            true,
            format!("st.global{}", Ty::F32),
            vec![Arg::Addr(Box::new(Arg::Sym("x".into())), 8), d.into()],
        );
        let text = b.finish("8.0", "sm_80", "k", &[], 128, None);
        assert!(text.contains("add.rn.f32 %f2, %f1, 0f3F800000;"), "{text}");
        assert!(text.contains("@!%p1 st.global.f32 [x+8], %f2;"), "{text}");
        assert!(text.contains(".reg .f32 %f<3>;"), "{text}");
    }

    fn printed(b: &Builder) -> String {
        b.finish("8.0", "sm_80", "k", &[], 128, None)
    }

    /// Every `kept` line is in the printed module and no `dead` one is.
    fn assert_kept_and_dead(text: &str, kept: &[String], dead: &[String]) {
        for k in kept {
            assert!(text.contains(k), "{k} missing:\n{text}");
        }
        for d in dead {
            assert!(!text.contains(d), "{d} kept:\n{text}");
        }
    }

    /// A load's address: `base + 4 * i` (mul.wide, add.s64).
    fn address(b: &mut Builder, base: Reg, i: Reg) -> Reg {
        let off = b.op("mul.wide.s32", RegClass::B64, vec![i.into(), Arg::Imm(4)]);
        b.op("add.s64", RegClass::B64, vec![base.into(), off.into()])
    }

    #[test]
    fn unread_results_are_removed_to_a_fixpoint() {
        let mut b = Builder::new();
        let base = b.op("ld.param.u64", RegClass::B64, vec![Arg::Sym("p0".into())]);
        let tid = b.op("mov.u32", RegClass::B32, vec![Arg::Sym("%tid.x".into())]);
        let used = address(&mut b, base, tid);
        // Only the first address of a vector access is used; the second one's chain (add.s32,
        // mul.wide.s32, add.s64) is dead, and so is a load whose value nobody reads.
        let next = b.op("add.s32", RegClass::B32, vec![tid.into(), Arg::Imm(1)]);
        let unused = address(&mut b, base, next);
        let x = b.op(
            "ld.global.v2.f32",
            RegClass::F32,
            vec![Arg::Addr(Box::new(used.into()), 0)],
        );
        let dead_load = b.reg(RegClass::F32);
        b.emit(
            "ld.global.f32",
            vec![dead_load.into(), Arg::Addr(Box::new(unused.into()), 0)],
        );
        let y = b.op("add.rn.f32", RegClass::F32, vec![x.into(), Arg::F32(1.0)]);
        b.emit(
            "st.global.f32",
            vec![Arg::Addr(Box::new(used.into()), 0), y.into()],
        );
        let text = printed(&b);
        let kept = [
            format!("ld.param.u64 {base}, p0;"),
            format!("mov.u32 {tid}, %tid.x;"),
            format!("add.s64 {used},"),
            format!("ld.global.v2.f32 {x},"),
            format!("add.rn.f32 {y}, {x},"),
            format!("st.global.f32 [{used}], {y};"),
        ];
        let dead = [
            format!("add.s32 {next},"),
            format!("add.s64 {unused},"),
            format!("ld.global.f32 {dead_load},"),
        ];
        assert_kept_and_dead(&text, &kept, &dead);
        assert_eq!(text.matches("mul.wide.s32").count(), 1, "{text}");
    }

    #[test]
    fn loop_carried_values_guards_and_ordered_loads_stay() {
        let mut b = Builder::new();
        let acc = b.reg(RegClass::F32);
        let i = b.reg(RegClass::B32);
        let counter = b.reg(RegClass::B32);
        let ptr = b.op("ld.param.u64", RegClass::B64, vec![Arg::Sym("p0".into())]);
        b.mov(acc, Arg::F32(0.0));
        b.mov(i, Arg::Imm(0));
        b.mov(counter, Arg::Imm(0));
        let top = b.new_label("loop");
        b.place_label(&top);
        // `acc` is read here before its redefinition below, through the back edge.
        let sum = b.op("add.rn.f32", RegClass::F32, vec![acc.into(), Arg::F32(2.0)]);
        b.mov(acc, sum);
        // A counter only incrementing itself is read by nothing else: dead with its start.
        b.emit("add.s32", vec![counter.into(), counter.into(), Arg::Imm(1)]);
        let flag = b.reg(RegClass::B32);
        b.emit(
            "ld.volatile.global.u32",
            vec![flag.into(), Arg::Addr(Box::new(ptr.into()), 0)],
        );
        b.emit("add.s32", vec![i.into(), i.into(), Arg::Imm(1)]);
        let more = b.op("setp.lt.s32", RegClass::Pred, vec![i.into(), Arg::Imm(8)]);
        b.bra_if(more, false, &top);
        let owner = b.op(
            "setp.eq.u32",
            RegClass::Pred,
            vec![Arg::Sym("%tid.x".into()), Arg::Imm(0)],
        );
        b.emit_guarded(
            owner,
            false,
            "st.global.f32",
            vec![Arg::Addr(Box::new(ptr.into()), 0), acc.into()],
        );
        let text = printed(&b);
        let kept = [
            format!("mov.f32 {acc}, 0f00000000;"),
            format!("add.rn.f32 {sum}, {acc},"),
            format!("mov.f32 {acc}, {sum};"),
            format!("ld.volatile.global.u32 {flag},"),
            format!("mov.b32 {i}, 0;"),
            format!("add.s32 {i}, {i}, 1;"),
            format!("setp.eq.u32 {owner},"),
        ];
        assert_kept_and_dead(&text, &kept, &[format!("{counter},")]);
    }
}
