//! Loops and branches over run-time values, as builder calls with closures.
//!
//! Loops over Rust values need none of this: a Rust `for` in the body simply unrolls.

use super::tile::{materialize, to_tile};
use super::{emit, in_new_block, report, IntoOperand, Operand, Tile};
use crate::dtype::DType;
use crate::kernel::Loc;
use crate::op::Op;
use crate::types::TileType;

/// A set of tiles that flows through a loop or out of a branch: a tile, a tuple, an array or a
/// vector of them.
///
/// Rust numbers and bools are `Carry` too, as trace-time constants with no tiles: they may flow
/// through a run-time loop or branch unchanged, and changing one there is a trace error (its
/// value would have to be known at trace time).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot flow through a run-time loop or branch",
    label = "assigned inside a run-time `for`/`while`/`if`, or the value of such an `if`",
    note = "values assigned inside `for .. in range(..)`, a `while` or an `if` on a tile must be \
            tiles, Rust numbers or bools that do not change there, or tuples, arrays and Vecs \
            of these (they implement `tegula::ir::builder::Carry`)"
)]
pub trait Carry: Sized {
    /// The tiles in a fixed order.
    fn tiles(&self) -> Vec<Tile>;
    /// A value of the same structure as `self` built from `tiles` (taken in the same order).
    fn rebuild(&self, tiles: &mut dyn Iterator<Item = Tile>) -> Self;
    /// A name for each tile of [`Carry::tiles`], for error messages (empty when unnamed).
    fn names(&self) -> Vec<String> {
        vec![String::new(); self.tiles().len()]
    }
    /// Describes the first trace-time (Rust) value in `self` that differs from the one in
    /// `other`, a value of the same structure; `None` when all are equal.
    fn static_mismatch(&self, _other: &Self) -> Option<String> {
        None
    }
}

/// A carried value with a variable name for error messages (what `#[kernel]` generates).
#[derive(Clone, Copy, Debug)]
pub struct Named<C>(pub &'static str, pub C);

impl<C: Carry> Carry for Named<C> {
    fn tiles(&self) -> Vec<Tile> {
        self.1.tiles()
    }
    fn rebuild(&self, tiles: &mut dyn Iterator<Item = Tile>) -> Self {
        Named(self.0, self.1.rebuild(tiles))
    }
    fn names(&self) -> Vec<String> {
        let inner = self.1.names();
        if inner.len() == 1 && inner[0].is_empty() {
            return vec![self.0.to_string()];
        }
        (0..inner.len())
            .map(|i| format!("{}[{i}]", self.0))
            .collect()
    }
    fn static_mismatch(&self, other: &Self) -> Option<String> {
        let m = self.1.static_mismatch(&other.1)?;
        Some(format!("`{}` {m}", self.0))
    }
}

/// Rust values inside carried structures: constants of the trace, no tiles.
macro_rules! carry_rust_value {
    ($($t:ty),*) => {$(
        impl Carry for $t {
            fn tiles(&self) -> Vec<Tile> {
                Vec::new()
            }
            fn rebuild(&self, _: &mut dyn Iterator<Item = Tile>) -> Self {
                *self
            }
            fn static_mismatch(&self, other: &Self) -> Option<String> {
                (self != other).then(|| {
                    format!("is a Rust value (`{}`), not a tile, and takes two values ({self:?} and {other:?})",
                            stringify!($t))
                })
            }
        }
    )*};
}
carry_rust_value!(
    bool,
    i8,
    i16,
    i32,
    i64,
    isize,
    u8,
    u16,
    u32,
    u64,
    usize,
    f32,
    f64,
    half::f16,
    half::bf16,
    &'static str
);

impl Carry for Tile {
    fn tiles(&self) -> Vec<Tile> {
        vec![*self]
    }
    fn rebuild(&self, tiles: &mut dyn Iterator<Item = Tile>) -> Self {
        tiles.next().unwrap_or(*self)
    }
}

impl Carry for () {
    fn tiles(&self) -> Vec<Tile> {
        Vec::new()
    }
    fn rebuild(&self, _: &mut dyn Iterator<Item = Tile>) -> Self {}
}

impl<C: Carry, const N: usize> Carry for [C; N] {
    fn tiles(&self) -> Vec<Tile> {
        self.iter().flat_map(|c| c.tiles()).collect()
    }
    fn rebuild(&self, tiles: &mut dyn Iterator<Item = Tile>) -> Self {
        std::array::from_fn(|i| self[i].rebuild(tiles))
    }
    fn names(&self) -> Vec<String> {
        self.iter().flat_map(|c| c.names()).collect()
    }
    fn static_mismatch(&self, other: &Self) -> Option<String> {
        self.iter()
            .zip(other)
            .find_map(|(a, b)| a.static_mismatch(b))
    }
}

impl<C: Carry> Carry for Vec<C> {
    fn tiles(&self) -> Vec<Tile> {
        self.iter().flat_map(|c| c.tiles()).collect()
    }
    fn rebuild(&self, tiles: &mut dyn Iterator<Item = Tile>) -> Self {
        self.iter().map(|c| c.rebuild(tiles)).collect()
    }
    fn names(&self) -> Vec<String> {
        self.iter().flat_map(|c| c.names()).collect()
    }
    fn static_mismatch(&self, other: &Self) -> Option<String> {
        if self.len() != other.len() {
            return Some(format!(
                "is a Vec whose length changes ({} before, {} after)",
                self.len(),
                other.len()
            ));
        }
        self.iter()
            .zip(other)
            .find_map(|(a, b)| a.static_mismatch(b))
    }
}

macro_rules! carry_tuple {
    ($($name:ident $idx:tt),*) => {
        impl<$($name: Carry),*> Carry for ($($name,)*) {
            fn tiles(&self) -> Vec<Tile> {
                let mut v = Vec::new();
                $(v.extend(self.$idx.tiles());)*
                v
            }
            fn rebuild(&self, tiles: &mut dyn Iterator<Item = Tile>) -> Self {
                ($(self.$idx.rebuild(tiles),)*)
            }
            fn names(&self) -> Vec<String> {
                let mut v = Vec::new();
                $(v.extend(self.$idx.names());)*
                v
            }
            fn static_mismatch(&self, other: &Self) -> Option<String> {
                None$(.or_else(|| self.$idx.static_mismatch(&other.$idx)))*
            }
        }
    };
}
carry_tuple!(A 0);
carry_tuple!(A 0, B 1);
carry_tuple!(A 0, B 1, C 2);
carry_tuple!(A 0, B 1, C 2, D 3);
carry_tuple!(A 0, B 1, C 2, D 3, E 4);
carry_tuple!(A 0, B 1, C 2, D 3, E 4, F 5);
carry_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
carry_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
carry_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
carry_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
carry_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
carry_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);

fn types_of(tiles: &[Tile]) -> Vec<TileType> {
    tiles.iter().map(|t| t.ty()).collect()
}

/// Checks that the trace-time (Rust) values leaving a region equal those entering it.
fn check_static<C: Carry>(what: &str, before: &C, after: &C, loc: Loc) {
    if let Some(m) = before.static_mismatch(after) {
        report(
            loc,
            format!(
                "{what}: {m}; a Rust value is fixed at trace time and cannot change inside a \
                 run-time loop or differ between the branches of a run-time `if`; make it a tile"
            ),
        );
    }
}

/// Checks that a region produced the types its construct declared; `names` name the values.
fn check_types(
    what: &str,
    expected: &[TileType],
    names: &[String],
    got: &[Tile],
    loc: Loc,
) -> bool {
    if expected.len() != got.len() {
        report(
            loc,
            format!(
                "{what}: {} values expected, the body produced {}",
                expected.len(),
                got.len()
            ),
        );
        return false;
    }
    for (i, (e, g)) in expected.iter().zip(got).enumerate() {
        if *e != g.ty() {
            let name = match names.get(i) {
                Some(n) if !n.is_empty() => format!("`{n}`"),
                _ => format!("value {i}"),
            };
            report(
                loc,
                format!(
                    "{what}: {name} enters as {e} but the body makes it {}; \
                     a loop-carried or branch value must keep its dtype and shape \
                     (cast with `.to::<T>()` or broadcast it first)",
                    g.ty()
                ),
            );
            return false;
        }
    }
    true
}

/// A loop's stage count: a Rust integer, known at trace time (a constexpr or a literal).
#[diagnostic::on_unimplemented(
    message = "a loop's stage count must be a Rust integer known at trace time, not `{Self}`",
    label = "`num_stages(..)` takes a constexpr or a literal",
    note = "the pipelining depth of a loop is decided when the kernel is compiled; pass it as a \
            `#[constexpr]` parameter (Triton's `num_stages: tl.constexpr`)"
)]
pub trait StageCount {
    /// The value, widened (range-checked where the loop is traced).
    fn stage_count(self) -> i128;
}

macro_rules! stage_count_int {
    ($($t:ty),*) => {$(
        impl StageCount for $t {
            fn stage_count(self) -> i128 {
                self as i128
            }
        }
    )*};
}
stage_count_int!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize);

/// What a run-time loop takes beside its bounds, as Triton's `tl.range` keywords do:
/// `RangeOptions::new().num_stages(3)` is `tl.range(.., num_stages=3)`. A kernel body writes
/// it `for i in range(lo, hi, step).num_stages(3)`; the builder passes it to
/// [`for_range_with`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RangeOptions {
    num_stages: Option<i128>,
    unroll: Option<i128>,
}

impl RangeOptions {
    /// No options: the loop pipelines with the launch's `num_stages`.
    pub const fn new() -> RangeOptions {
        RangeOptions {
            num_stages: None,
            unroll: None,
        }
    }

    /// The loop's own pipelining depth: on the GPU the loads that feed its tensor-core dots
    /// stream through up to `s` shared-memory slots, whatever the launch's `num_stages`; 1
    /// turns its pipelining off. At least 1 (0 is a trace error at the loop's line). The
    /// interpreter ignores it: it changes no result.
    pub fn num_stages(self, s: impl StageCount) -> RangeOptions {
        RangeOptions {
            num_stages: Some(s.stage_count()),
            ..self
        }
    }

    /// Unrolls the loop `u` times (`tl.range(.., loop_unroll_factor=u)`): a loop whose body
    /// is `u` copies of this one, for `lo, lo + u step, ..` while a whole group of `u`
    /// iterations fits, then this loop for the iterations left (fewer than `u`, not
    /// pipelined). The iterations, their order and the results are the original loop's. A
    /// step that is not positive at run time runs the original loop whole (unpipelined); a
    /// constant one is a trace error, as is `u = 0`; 1 leaves the loop as it is.
    pub fn loop_unroll_factor(self, u: impl StageCount) -> RangeOptions {
        RangeOptions {
            unroll: Some(u.stage_count()),
            ..self
        }
    }
}

/// A loop over `lo, lo + step, .. < hi` (run-time bounds) carrying `init` through `body`.
///
/// `body(i, carried)` returns the next carried values; the loop returns the final ones.
/// The induction variable is i32, or i64 when a bound is i64.
#[track_caller]
pub fn for_range<C: Carry>(
    lo: impl IntoOperand,
    hi: impl IntoOperand,
    step: impl IntoOperand,
    init: C,
    body: impl FnOnce(Tile, C) -> C,
) -> C {
    let loc = Loc::caller();
    let (lo, hi, step) = (lo.into_operand(), hi.into_operand(), step.into_operand());
    emit_for(lo, hi, step, None, init, body, loc)
}

/// [`for_range`] with [`RangeOptions`]: `for_range_with(0, k, bk, RangeOptions::new()
/// .num_stages(2), acc, |i, acc| ..)` is `for i in range(0, k, bk).num_stages(2)` in a kernel
/// body, Triton's `for i in tl.range(0, K, BK, num_stages=2)`. The body may be traced more
/// than once (once a copy with `loop_unroll_factor`).
#[track_caller]
pub fn for_range_with<C: Carry>(
    lo: impl IntoOperand,
    hi: impl IntoOperand,
    step: impl IntoOperand,
    options: RangeOptions,
    init: C,
    mut body: impl FnMut(Tile, C) -> C,
) -> C {
    let loc = Loc::caller();
    let count = |what: &str, v: Option<i128>| {
        v.and_then(|s| match u32::try_from(s) {
            Ok(s) => Some(s),
            Err(_) => {
                report(
                    loc,
                    format!("{what}({s}): an integer from 1 to {}", u32::MAX),
                );
                None
            }
        })
    };
    // 0 stages reaches the verifier, which rejects it at this loop's line.
    let num_stages = count("num_stages", options.num_stages);
    let unroll = count("loop_unroll_factor", options.unroll);
    let (lo, hi, step) = (lo.into_operand(), hi.into_operand(), step.into_operand());
    match unroll {
        Some(0) => {
            report(loc, "loop_unroll_factor(0): a loop unrolls at least once");
            emit_for(lo, hi, step, num_stages, init, body, loc)
        }
        Some(u) if u >= 2 => {
            if matches!(step, Operand::Int(s) if s <= 0) {
                report(loc, "an unrolled loop needs a positive step");
            }
            let [lo_t, hi_t, step_t] = loop_bounds([lo, hi, step], loc);
            // Whole groups of `u` iterations: n = ceil(max(hi - lo, 0) / step), the first
            // n - n % u of them in the unrolled loop, from `lo` to `split` by `u step`.
            let t = Operand::Tile;
            let span = step_t * (u as i64);
            let distance = super::maximum(hi_t - lo_t, Operand::Int(0));
            let n = (distance + step_t - 1) / step_t;
            let grouped_end = lo_t + (n / (u as i64)) * span;
            // A step not positive at run time: no groups, the original loop runs whole.
            let split = super::select_at(step_t.gt(0), t(grouped_end), t(lo_t), loc);
            let grouped = emit_for(
                t(lo_t),
                t(split),
                t(span),
                num_stages,
                init,
                |iv, mut c| {
                    for j in 0..u {
                        let at = if j == 0 { iv } else { iv + step_t * (j as i64) };
                        c = body(at, c);
                    }
                    c
                },
                loc,
            );
            emit_for(t(split), t(hi_t), t(step_t), Some(1), grouped, body, loc)
        }
        _ => emit_for(lo, hi, step, num_stages, init, body, loc),
    }
}

/// The bounds as integer scalars of the induction variable's dtype (i32, or i64 when one is
/// i64), with their errors reported at `loc`.
fn loop_bounds(bounds: [Operand; 3], loc: Loc) -> [Tile; 3] {
    let mut iv_dtype = DType::I32;
    for b in &bounds {
        if let Operand::Tile(t) = b {
            if !t.shape().is_scalar() || !t.dtype().is_int() || t.dtype().is_bool() || t.is_ptr() {
                report(
                    loc,
                    format!("loop bounds must be integer scalars, got {}", t.ty()),
                );
            } else {
                iv_dtype = DType::promote(iv_dtype, t.dtype());
            }
        }
    }
    if let Operand::Int(0) = bounds[2] {
        report(loc, "the loop step must not be zero");
    }
    bounds.map(|b| materialize(b, iv_dtype, loc))
}

/// One `for` op over `lo..hi` by `step` with its own stage count.
fn emit_for<C: Carry>(
    lo: Operand,
    hi: Operand,
    step: Operand,
    num_stages: Option<u32>,
    init: C,
    body: impl FnOnce(Tile, C) -> C,
    loc: Loc,
) -> C {
    let bounds = loop_bounds([lo, hi, step], loc);
    let iv_dtype = bounds[0].dtype();
    let init_tiles = init.tiles();
    let carried_types = types_of(&init_tiles);
    let mut block_types = vec![TileType::scalar(iv_dtype)];
    block_types.extend(&carried_types);
    let (block, out) = in_new_block(&block_types, |args| {
        let carried = init.rebuild(&mut args[1..].iter().copied());
        let next = body(args[0], carried);
        let next_tiles = next.tiles();
        check_types("for_range", &carried_types, &init.names(), &next_tiles, loc);
        check_static("for_range", &init, &next, loc);
        emit(
            Op::Yield,
            next_tiles.iter().map(|t| t.value()).collect(),
            &[],
            vec![],
            loc,
        );
        next
    });
    let mut args: Vec<_> = bounds.iter().map(|t| t.value()).collect();
    args.extend(init_tiles.iter().map(|t| t.value()));
    let results = emit(
        Op::For { num_stages },
        args,
        &carried_types,
        vec![block],
        loc,
    );
    let result_tiles: Vec<Tile> = results
        .iter()
        .zip(&carried_types)
        .map(|(&v, &ty)| Tile::from_raw(v, ty))
        .collect();
    out.rebuild(&mut result_tiles.into_iter())
}

fn check_cond(cond: Tile, what: &str, loc: Loc) {
    if cond.dtype() != DType::I1 || !cond.shape().is_scalar() || cond.is_ptr() {
        report(
            loc,
            format!(
                "{what} needs a scalar i1 condition, got {}; reduce a tile condition first",
                cond.ty()
            ),
        );
    }
}

/// `if cond { then_() } else { else_() }` on a run-time scalar condition; both branches return
/// values of the same types.
#[track_caller]
pub fn if_else<C: Carry>(cond: Tile, then_: impl FnOnce() -> C, else_: impl FnOnce() -> C) -> C {
    let loc = Loc::caller();
    check_cond(cond, "if_else", loc);
    let (then_block, then_out) = in_new_block(&[], |_| {
        let out = then_();
        let tiles = out.tiles();
        emit(
            Op::Yield,
            tiles.iter().map(|t| t.value()).collect(),
            &[],
            vec![],
            loc,
        );
        out
    });
    let types = types_of(&then_out.tiles());
    let (else_block, _) = in_new_block(&[], |_| {
        let out = else_();
        let tiles = out.tiles();
        check_types(
            "if_else (else branch)",
            &types,
            &then_out.names(),
            &tiles,
            loc,
        );
        check_static("if_else", &then_out, &out, loc);
        emit(
            Op::Yield,
            tiles.iter().map(|t| t.value()).collect(),
            &[],
            vec![],
            loc,
        );
    });
    let results = emit(
        Op::If,
        vec![cond.value()],
        &types,
        vec![then_block, else_block],
        loc,
    );
    let tiles: Vec<Tile> = results
        .iter()
        .zip(&types)
        .map(|(&v, &ty)| Tile::from_raw(v, ty))
        .collect();
    then_out.rebuild(&mut tiles.into_iter())
}

/// `if cond { then_() }` with no results.
#[track_caller]
pub fn if_then(cond: Tile, then_: impl FnOnce()) {
    let loc = Loc::caller();
    check_cond(cond, "if_then", loc);
    let (then_block, _) = in_new_block(&[], |_| {
        then_();
        emit(Op::Yield, vec![], &[], vec![], loc);
    });
    let (else_block, _) = in_new_block(&[], |_| {
        emit(Op::Yield, vec![], &[], vec![], loc);
    });
    emit(
        Op::If,
        vec![cond.value()],
        &[],
        vec![then_block, else_block],
        loc,
    );
}

/// `while cond(carried) { carried = body(carried) }` on run-time values.
#[track_caller]
pub fn while_loop<C: Carry>(init: C, cond: impl FnOnce(C) -> Tile, body: impl FnOnce(C) -> C) -> C {
    let loc = Loc::caller();
    let init_tiles = init.tiles();
    let types = types_of(&init_tiles);
    let (before, _) = in_new_block(&types, |args| {
        let c = cond(init.rebuild(&mut args.iter().copied()));
        check_cond(c, "while_loop", loc);
        emit(Op::Condition, vec![c.value()], &[], vec![], loc);
    });
    let (after, _) = in_new_block(&types, |args| {
        let next = body(init.rebuild(&mut args.iter().copied()));
        let tiles = next.tiles();
        check_types("while_loop", &types, &init.names(), &tiles, loc);
        check_static("while_loop", &init, &next, loc);
        emit(
            Op::Yield,
            tiles.iter().map(|t| t.value()).collect(),
            &[],
            vec![],
            loc,
        );
    });
    let results = emit(
        Op::While,
        init_tiles.iter().map(|t| t.value()).collect(),
        &types,
        vec![before, after],
        loc,
    );
    let tiles: Vec<Tile> = results
        .iter()
        .zip(&types)
        .map(|(&v, &ty)| Tile::from_raw(v, ty))
        .collect();
    init.rebuild(&mut tiles.into_iter())
}

/// A scalar tile from a Rust value or tile (helper for generated code).
#[track_caller]
pub fn scalar(x: impl IntoOperand) -> Tile {
    to_tile(x.into_operand(), Loc::caller())
}

/// The condition of an `if` or `while` in a `#[kernel]` body: its type decides when the choice
/// is made. A Rust `bool` is decided at trace time (the branch not taken is never traced, a loop
/// unrolls); a tile is decided at run time, as an IR `if` with results or an IR `while`.
pub trait Condition: Sized {
    /// `body(true, init)` when the condition holds, else `body(false, init)`. For a tile both
    /// run, each tracing one region of an IR `if` whose results are the returned values.
    #[track_caller]
    fn branch<C: Carry + Clone, R: Carry>(self, init: C, body: impl FnMut(bool, C) -> R) -> R;

    /// `while cond(carried) { carried = body(carried) }`, where `cond` returns `Self`.
    #[track_caller]
    fn repeat_while<C: Carry + Clone>(
        init: C,
        cond: impl FnMut(C) -> Self,
        body: impl FnMut(C) -> C,
    ) -> C;
}

impl Condition for bool {
    fn branch<C: Carry + Clone, R: Carry>(self, init: C, mut body: impl FnMut(bool, C) -> R) -> R {
        body(self, init)
    }

    fn repeat_while<C: Carry + Clone>(
        init: C,
        mut cond: impl FnMut(C) -> bool,
        mut body: impl FnMut(C) -> C,
    ) -> C {
        let mut carried = init;
        while cond(carried.clone()) {
            carried = body(carried);
        }
        carried
    }
}

impl Condition for Tile {
    #[track_caller]
    fn branch<C: Carry + Clone, R: Carry>(self, init: C, body: impl FnMut(bool, C) -> R) -> R {
        // Both branches share one closure (so they may share captures); if_else calls them in turn.
        let body = std::cell::RefCell::new(body);
        let else_init = init.clone();
        if_else(
            self,
            || (body.borrow_mut())(true, init),
            || (body.borrow_mut())(false, else_init),
        )
    }

    #[track_caller]
    fn repeat_while<C: Carry + Clone>(
        init: C,
        cond: impl FnMut(C) -> Tile,
        body: impl FnMut(C) -> C,
    ) -> C {
        while_loop(init, cond, body)
    }
}

/// A `while` loop of a `#[kernel]` body, at trace time or run time by the type `cond` returns
/// (see [`Condition`]).
#[track_caller]
pub fn while_any<C: Carry + Clone, K: Condition>(
    init: C,
    cond: impl FnMut(C) -> K,
    body: impl FnMut(C) -> C,
) -> C {
    K::repeat_while(init, cond, body)
}

/// A condition that must be known at trace time: `#[kernel]` requires it of an `if` or `while`
/// that contains `break`, `continue` or `return`, which only a trace-time branch can honour.
#[diagnostic::on_unimplemented(
    message = "this condition must be a Rust `bool`, known at trace time",
    label = "its `if`/`while` contains `break`, `continue` or `return`",
    note = "an `if` or `while` on a tile becomes an IR region, which cannot leave an enclosing \
            loop or the kernel early; use a mask or a loop-carried flag instead"
)]
pub trait RustBool {
    fn rust_bool(self) -> bool;
}

impl RustBool for bool {
    fn rust_bool(self) -> bool {
        self
    }
}

/// `lo, lo + step, ..` up to and excluding `hi`, as a Rust iterator: a loop over it unrolls at
/// trace time (Triton's `tl.static_range`). `step` must be positive.
#[track_caller]
pub fn static_range<T>(lo: T, hi: T, step: T) -> impl Iterator<Item = T>
where
    T: Copy + PartialOrd + std::ops::Add<Output = T>,
{
    let advances = lo + step > lo;
    if !advances && lo < hi {
        report(Loc::caller(), "static_range: the step must be positive");
    }
    std::iter::successors(Some(lo), move |&i| Some(i + step))
        .take_while(move |&i| advances && i < hi)
}

/// The marker a plain Rust function's `range(..)` fails on: only `#[tegula::kernel]` and
/// `#[tegula::func]` bodies have run-time loops.
#[diagnostic::on_unimplemented(
    message = "`for .. in range(..)` is a run-time loop only in a `#[tegula::kernel]` or \
               `#[tegula::func]` body",
    label = "this function is not rewritten by tegula's macros",
    note = "mark the helper function `#[tegula::func]` (its `for .. in range(..)`, tile `if`s \
            and `let mut` carried values then work as in a kernel), use `for_range(lo, hi, \
            step, init, |i, carried| ..)`, or `static_range(..)` to unroll at trace time"
)]
pub trait InKernelOrFunc {}

/// A run-time loop in `#[tegula::kernel]` and `#[tegula::func]` bodies: `for i in range(hi)`,
/// `range(lo, hi)` or `range(lo, hi, step)` (Triton's `tl.range`) is rewritten into
/// [`for_range`], its `let mut` variables assigned in the body carried through the loop.
///
/// `for i in range(lo, hi, step).num_stages(s)` (also on the 1- and 2-argument forms) gives
/// the loop its own pipelining depth, Triton's `tl.range(lo, hi, step, num_stages=s)`: `s` is
/// a Rust integer known at trace time (a `#[constexpr]` parameter or a literal), at least 1,
/// and on the GPU it replaces the launch's `num_stages` for this loop (1 turns its pipelining
/// off); the interpreter ignores it. The macro passes it to [`for_range_with`] as
/// [`RangeOptions::num_stages`]. Triton's other `tl.range` keywords (`loop_unroll_factor`,
/// `flatten`, `warp_specialize`, ..) have no counterpart.
///
/// ```text
/// #[tegula::kernel]
/// fn k(.., #[constexpr] num_stages: u32) {
///     let mut acc = zeros::<f32>([bm, bn]);
///     for start in range(0, k, bk).num_stages(num_stages) {
///         acc = dot_acc(load(..), load(..), acc);
///     }
/// }
/// ```
///
/// What `range(lo, hi, step)` means outside the macros: a compile error that says to mark the
/// enclosing helper `#[tegula::func]`; inside the macros' bodies this function is never
/// called.
///
/// ```compile_fail
/// use tegula_ir::prelude::*;
/// fn helper(n: Tile) -> Tile {
///     let mut acc = n;
///     for i in range(0, n, 1) {
///         acc = acc + i;
///     }
///     acc
/// }
/// ```
pub fn range<L: InKernelOrFunc, H, S>(lo: L, hi: H, step: S) -> std::iter::Empty<Tile> {
    let _ = (lo, hi, step);
    std::iter::empty()
}
