//! `device_print` on the GPU, through the CUDA runtime's `vprintf` system call.
//!
//! Each thread prints one line per tile element it owns (copies of an element held by several
//! threads print once), as Triton does:
//!
//! ```text
//! pid (x, y, z) idx (i, j) prefix value value..
//! ```
//!
//! `vprintf(format, args)` takes a generic pointer to a NUL-terminated format string (a
//! `.global` byte array per print) and a generic pointer to the arguments laid out as C varargs
//! would be: each argument aligned to its size, floats promoted to f64, integers as 4 or 8
//! bytes. The arguments go in a per-thread `.local` buffer per print: the program id is written
//! once, then the element index and the values for each element before each call.

use super::{Lower, R};
use crate::layout::Layout;
use crate::ptx::{Arg, Reg, RegClass};
use tegula_ir::kernel::EntityRef;
use tegula_ir::{DType, Elem, Inst, Op, Shape, Value};

/// The prototype of the CUDA runtime's device-side printf.
const VPRINTF_DECL: &str =
    ".extern .func (.param .b32 func_retval0) vprintf (.param .b64 format, .param .b64 args)";

/// The call's argument and return slots, declared once per function and reused by every call.
const FORMAT_PARAM: &str = "tg_vprintf_format";
const ARGS_PARAM: &str = "tg_vprintf_args";
const RET_PARAM: &str = "tg_vprintf_ret";

/// How one printed value is formatted and stored in the argument buffer.
#[derive(Clone, Copy)]
struct Slot {
    /// The printf conversion (`%d`, `%.9g`, ...).
    conversion: &'static str,
    /// 4 or 8: the slot's size, and its alignment in the buffer.
    bytes: u32,
}

/// The printf slot of an element type: the number of significant digits of each float format
/// is the fewest that identify every value of that format (so a value reads back exactly).
/// With `hex`, the bits in hexadecimal, zero-padded to the dtype's width.
fn slot_of(e: Elem, hex: bool) -> Slot {
    let (conversion, bytes) = match e {
        Elem::Ptr(_) => ("%p", 8),
        Elem::Scalar(d) if hex => match d.bits() {
            1 => ("0x%x", 4),
            8 => ("0x%02x", 4),
            16 => ("0x%04x", 4),
            32 => ("0x%08x", 4),
            _ => ("0x%016llx", 8),
        },
        Elem::Scalar(d) => match d {
            DType::I1 | DType::I8 | DType::I16 | DType::I32 => ("%d", 4),
            DType::U8 | DType::U16 | DType::U32 => ("%u", 4),
            DType::I64 => ("%lld", 8),
            DType::U64 => ("%llu", 8),
            DType::F8E4M3 | DType::F8E5M2 => ("%.3g", 8),
            DType::BF16 => ("%.4g", 8),
            DType::F16 => ("%.5g", 8),
            DType::F32 => ("%.9g", 8),
            DType::F64 => ("%.17g", 8),
        },
    };
    Slot { conversion, bytes }
}

/// The argument buffer of one print: byte offsets of the program id, the element index and the
/// values, each aligned to its size.
struct ArgsLayout {
    pid: [u32; 3],
    idx: Vec<u32>,
    values: Vec<u32>,
    size: u32,
}

impl ArgsLayout {
    fn new(rank: usize, slots: &[Slot]) -> ArgsLayout {
        let mut at = 0u32;
        let mut place = |bytes: u32| {
            let off = at.div_ceil(bytes) * bytes;
            at = off + bytes;
            off
        };
        let pid = [place(4), place(4), place(4)];
        let idx = (0..rank).map(|_| place(4)).collect();
        let values = slots.iter().map(|s| place(s.bytes)).collect();
        ArgsLayout {
            pid,
            idx,
            values,
            size: at.max(8).div_ceil(8) * 8,
        }
    }
}

/// The format string of one print line (`%` in the prefix escaped).
fn format_line(prefix: &str, rank: usize, slots: &[Slot]) -> String {
    let mut f = String::from("pid (%u, %u, %u)");
    if rank > 0 {
        f.push_str(" idx (");
        f.push_str(&vec!["%d"; rank].join(", "));
        f.push(')');
    }
    if !prefix.is_empty() {
        f.push(' ');
        f.push_str(&prefix.replace('%', "%%"));
    }
    for s in slots {
        f.push(' ');
        f.push_str(s.conversion);
    }
    f.push('\n');
    f
}

/// `.global` initializer bytes of a NUL-terminated string.
fn byte_list(s: &str) -> String {
    let bytes: Vec<String> = s.bytes().chain([0]).map(|b| b.to_string()).collect();
    bytes.join(",")
}

impl Lower<'_> {
    /// `device_print(prefix, values)`. Operands of one shape (scalars alongside them) print on
    /// one line per element; operands of different shapes print one after another, each with
    /// `(operand i)` after the prefix.
    pub(super) fn lower_print(&mut self, inst: Inst) -> R<()> {
        let d = self.k.insts[inst].clone();
        let Op::Print { prefix, hex } = &d.op else {
            return Err(self.invalid("lower_print on another op"));
        };
        let tile_shapes: Vec<Shape> = d
            .args
            .iter()
            .map(|&v| self.k.ty(v).shape)
            .filter(|s| !s.is_scalar())
            .collect();
        if tile_shapes.windows(2).all(|w| w[0] == w[1]) {
            return self.print_line(inst, 0, prefix, *hex, &d.args);
        }
        for (i, &v) in d.args.iter().enumerate() {
            self.print_line(inst, i, &format!("{prefix} (operand {i})"), *hex, &[v])?;
        }
        Ok(())
    }

    /// One `vprintf` per owned element of `values` (all of one shape, or scalars).
    fn print_line(
        &mut self,
        inst: Inst,
        part: usize,
        prefix: &str,
        hex: bool,
        values: &[Value],
    ) -> R<()> {
        let tile = values
            .iter()
            .copied()
            .find(|&v| !self.k.ty(v).shape.is_scalar());
        let (shape, layout) = match tile {
            Some(v) => (self.k.ty(v).shape, self.natural(v).0),
            None => (Shape::SCALAR, Layout::scalar()),
        };
        let rank = shape.rank();
        let slots: Vec<Slot> = values
            .iter()
            .map(|&v| slot_of(self.k.ty(v).elem, hex))
            .collect();
        let args = ArgsLayout::new(rank, &slots);
        let regs: Vec<Vec<Reg>> = values
            .iter()
            .map(|&v| self.get(v, &layout))
            .collect::<R<_>>()?;

        // The element index along each value axis: a per-thread base plus a per-register constant.
        let kept = layout.kept();
        let unit_strides: Vec<Vec<i64>> = (0..rank)
            .map(|k| {
                let mut s = vec![0i64; layout.parent_rank()];
                s[kept[k]] = 1;
                s
            })
            .collect();
        let idx_bases: Vec<Option<Reg>> = unit_strides
            .iter()
            .map(|s| self.thread_offset(&layout, &shape, s))
            .collect();
        let owner = self.owner(&layout, &shape);

        let name = format!("tg_print{}_{part}", inst.index());
        let (fmt_name, buf_name) = (format!("{name}_format"), format!("{name}_args"));
        let line = format_line(prefix, rank, &slots);
        self.b.declare_in_module(VPRINTF_DECL.to_string());
        self.b.declare_in_module(format!(
            ".global .align 1 .b8 {fmt_name}[{}] = {{{}}}",
            line.len() + 1,
            byte_list(&line)
        ));
        self.b
            .declare_in_function(format!(".local .align 8 .b8 {buf_name}[{}]", args.size));
        for (p, ty) in [
            (FORMAT_PARAM, "b64"),
            (ARGS_PARAM, "b64"),
            (RET_PARAM, "b32"),
        ] {
            self.b.declare_in_function(format!(".param .{ty} {p}"));
        }

        let skip = self.b.new_label("print_done");
        if let Some(o) = owner {
            self.b.bra_if(o, true, &skip);
        }
        let fmt_ptr = self.generic_address(&fmt_name, "global");
        let buf_ptr = self.generic_address(&buf_name, "local");
        let buf = |off: u32| Arg::Addr(Box::new(Arg::Sym(buf_name.clone())), off as i64);
        for (axis, off) in ["x", "y", "z"].into_iter().zip(args.pid) {
            let pid = self.b.op(
                "mov.u32",
                RegClass::B32,
                vec![Arg::Sym(format!("%ctaid.{axis}"))],
            );
            self.b.emit("st.local.u32", vec![buf(off), pid.into()]);
        }
        let geom = layout.geometry(&shape);
        let count = if rank == 0 { 1 } else { geom.count };
        for i in 0..count {
            for k in 0..rank {
                let c = Self::reg_offset(&geom, i, &unit_strides[k]);
                let idx = match idx_bases[k] {
                    Some(b) if c == 0 => b,
                    Some(b) => self
                        .b
                        .op("add.s32", RegClass::B32, vec![b.into(), Arg::Imm(c)]),
                    None => self.imm(RegClass::B32, Arg::Imm(c)),
                };
                self.b
                    .emit("st.local.u32", vec![buf(args.idx[k]), idx.into()]);
            }
            for (j, &v) in values.iter().enumerate() {
                let r = if regs[j].len() == 1 {
                    regs[j][0]
                } else {
                    regs[j][i]
                };
                let elem = self.k.ty(v).elem;
                let (opcode, stored) = if hex {
                    self.printf_bits(elem, r)
                } else {
                    self.printf_promote(elem, r)
                };
                self.b
                    .emit(opcode, vec![buf(args.values[j]), stored.into()]);
            }
            self.b.emit(
                "st.param.b64",
                vec![
                    Arg::Addr(Box::new(Arg::Sym(FORMAT_PARAM.into())), 0),
                    fmt_ptr.into(),
                ],
            );
            self.b.emit(
                "st.param.b64",
                vec![
                    Arg::Addr(Box::new(Arg::Sym(ARGS_PARAM.into())), 0),
                    buf_ptr.into(),
                ],
            );
            // Not `call.uni`: only the owning threads get here.
            self.b.emit(
                "call",
                vec![
                    Arg::Sym(format!("({RET_PARAM})")),
                    Arg::Sym("vprintf".into()),
                    Arg::Sym(format!("({FORMAT_PARAM}, {ARGS_PARAM})")),
                ],
            );
        }
        self.b.place_label(&skip);
        Ok(())
    }

    /// The generic address of a `.global` or `.local` variable.
    fn generic_address(&mut self, var: &str, space: &str) -> Reg {
        let a = self
            .b
            .op("mov.u64", RegClass::B64, vec![Arg::Sym(var.to_string())]);
        self.b
            .op(format!("cvta.{space}.u64"), RegClass::B64, vec![a.into()])
    }

    /// A value as C varargs pass it: the store opcode and the register to store (floats
    /// promoted to f64, i1 as an int).
    /// The store of an element's bits for a `hex` slot: floats moved to integer registers
    /// unconverted, narrow integers masked to their width (they live sign-extended).
    fn printf_bits(&mut self, e: Elem, r: Reg) -> (&'static str, Reg) {
        let d = match e {
            Elem::Ptr(_) => return ("st.local.u64", r),
            Elem::Scalar(d) => d,
        };
        match d {
            DType::F32 => {
                let b = self.b.op("mov.b32", RegClass::B32, vec![r.into()]);
                ("st.local.u32", b)
            }
            DType::F64 => {
                let b = self.b.op("mov.b64", RegClass::B64, vec![r.into()]);
                ("st.local.u64", b)
            }
            DType::F16 | DType::BF16 => {
                let b = self.b.op("cvt.u32.u16", RegClass::B32, vec![r.into()]);
                ("st.local.u32", b)
            }
            // A zero-extended byte already.
            DType::F8E4M3 | DType::F8E5M2 => ("st.local.u32", r),
            DType::I8 | DType::I16 => {
                let mask = if d == DType::I8 { 0xff } else { 0xffff };
                let b = self
                    .b
                    .op("and.b32", RegClass::B32, vec![r.into(), Arg::Imm(mask)]);
                ("st.local.u32", b)
            }
            _ => self.printf_promote(e, r),
        }
    }

    fn printf_promote(&mut self, e: Elem, r: Reg) -> (&'static str, Reg) {
        let d = match e {
            Elem::Ptr(_) => return ("st.local.u64", r),
            Elem::Scalar(d) => d,
        };
        match d {
            DType::I1 => {
                let i = self.b.op(
                    "selp.u32",
                    RegClass::B32,
                    vec![Arg::Imm(1), Arg::Imm(0), r.into()],
                );
                ("st.local.u32", i)
            }
            DType::F16 | DType::BF16 | DType::F32 | DType::F8E4M3 | DType::F8E5M2 => {
                let f32 = self.widen(d, r);
                let f64 = self.b.op("cvt.f64.f32", RegClass::F64, vec![f32.into()]);
                ("st.local.f64", f64)
            }
            DType::F64 => ("st.local.f64", r),
            DType::I64 | DType::U64 => ("st.local.u64", r),
            // Narrow integers live sign- or zero-extended in 32-bit registers already.
            _ => ("st.local.u32", r),
        }
    }
}
