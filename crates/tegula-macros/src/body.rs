//! Rewrites a kernel body into tracing-builder calls.
//!
//! - `for p in range(..)` becomes `for_range(lo, hi, step, carried, |p, carried| { .. })`;
//!   the carried values are the variables from outside the loop assigned inside it, passed in
//!   and out as a tuple and assigned back after the loop. `for p in range(..).num_stages(s)`
//!   becomes `for_range_with(lo, hi, step, RangeOptions::new().num_stages(s), carried, ..)`,
//!   and `.loop_unroll_factor(u)` likewise.
//! - `if c { .. } else { .. }` becomes `Condition::branch(c, carried, |taken, carried| ..)`,
//!   which decides at trace time for a Rust `bool` and emits an IR `if` for a tile (the type is
//!   unknown here, so a trait decides). Conditions that are visibly Rust bools (comparisons,
//!   `&&`, literals, constexpr names, ..) and `if let` stay plain Rust; so do `if`s containing
//!   `break`/`continue`/`return`, whose condition must then be a `bool` (`RustBool`).
//! - `while c { .. }` likewise becomes `while_any(carried, |carried| c, |carried| { .. })`.
//! - `for p in static_range(..)` becomes a Rust loop over `static_range(lo, hi, step)`.
//!
//! Every generated call is spanned at the user's keyword (`for`, `if`, `while`) so that the
//! builder's `#[track_caller]` locations name the user's line.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use std::collections::HashSet;
use syn::spanned::Spanned;
use syn::visit::{self, Visit};
use syn::visit_mut::{self, VisitMut};
use syn::{
    BinOp, Block, Error, Expr, ExprForLoop, ExprIf, ExprWhile, Ident, Label, Lit, Pat, UnOp,
};

/// Rewrites the control flow of a kernel body in place, collecting misuse errors.
pub struct Rewriter {
    pub errors: Vec<Error>,
    /// Constexpr parameters and const generics: names that are Rust values for sure.
    pub constexprs: HashSet<String>,
    /// Keys of the errors already reported (a `return` inside nested loops is seen by each).
    reported: HashSet<String>,
}

impl Rewriter {
    pub fn new(constexprs: HashSet<String>) -> Self {
        Rewriter {
            errors: Vec::new(),
            constexprs,
            reported: HashSet::new(),
        }
    }

    fn error(&mut self, span: Span, message: String) {
        if self.reported.insert(format!("{span:?}{message}")) {
            self.errors.push(Error::new(span, message));
        }
    }

    /// Reports every `return` with a value outside closures: a kernel returns nothing.
    pub fn check_returns(&mut self, body: &Block) {
        let mut esc = Escapes::default();
        esc.visit_block(body);
        for (span, what, has_value) in esc.found {
            if what == "return" && has_value {
                self.error(
                    span,
                    "a kernel returns nothing: `return` may not carry a value (write results \
                     through `Ptr` parameters)"
                        .into(),
                );
            }
        }
    }

    fn rewrite_for(&mut self, f: &mut ExprForLoop) -> Option<Expr> {
        // `range(..).num_stages(s).loop_unroll_factor(u)`: the loop's options (any of them, in
        // any order), then its bounds.
        let mut methods = Vec::new();
        let mut receiver = &*f.expr;
        while let Expr::MethodCall(m) = receiver {
            methods.push(m);
            receiver = &m.receiver;
        }
        let Expr::Call(call) = receiver else {
            return None;
        };
        let options = if methods.is_empty() {
            None
        } else {
            let Expr::Path(func) = &*call.func else {
                return None;
            };
            if !func.path.is_ident("range") {
                return None;
            }
            let mut options = quote!(::tegula::ir::builder::RangeOptions::new());
            for m in methods.iter().rev() {
                let name = m.method.to_string();
                match (name.as_str(), m.args.len()) {
                    ("num_stages" | "loop_unroll_factor", 1) => {
                        let (method, arg) = (&m.method, &m.args[0]);
                        let span = m.method.span();
                        options = quote_spanned!(span=> #options.#method(#arg));
                    }
                    ("num_stages" | "loop_unroll_factor", n) => {
                        self.error(m.span(), format!("`{name}` takes one argument, got {n}"));
                        return None;
                    }
                    (other, _) => {
                        self.error(
                            m.method.span(),
                            format!(
                                "`range(..).{other}(..)` is not a loop option: a run-time loop \
                                 takes `.num_stages(s)` and `.loop_unroll_factor(u)` (Triton's \
                                 `tl.range(.., num_stages=s, loop_unroll_factor=u)`)"
                            ),
                        );
                        return None;
                    }
                }
            }
            Some(options)
        };
        let Expr::Path(func) = &*call.func else {
            return None;
        };
        let func_name = func.path.get_ident()?.to_string();
        let span = f.for_token.span;
        let args: Vec<&Expr> = call.args.iter().collect();
        let bounds = match args.as_slice() {
            [hi] => (
                quote_spanned!(span=> 0),
                quote!(#hi),
                quote_spanned!(span=> 1),
            ),
            [lo, hi] => (quote!(#lo), quote!(#hi), quote_spanned!(span=> 1)),
            [lo, hi, step] => (quote!(#lo), quote!(#hi), quote!(#step)),
            _ if func_name == "range" || func_name == "static_range" => {
                self.error(
                    call.span(),
                    format!(
                        "`{func_name}` takes 1 to 3 arguments: (hi), (lo, hi) or (lo, hi, step)"
                    ),
                );
                return None;
            }
            _ => return None,
        };
        let (lo, hi, step) = bounds;
        match func_name.as_str() {
            "static_range" => {
                visit_mut::visit_block_mut(self, &mut f.body);
                let ExprForLoop {
                    attrs,
                    label,
                    for_token,
                    pat,
                    in_token,
                    body,
                    ..
                } = f;
                let iter =
                    quote_spanned!(span=> ::tegula::ir::builder::static_range(#lo, #hi, #step));
                Some(syn::parse_quote_spanned!(span=>
                    #(#attrs)* #label #for_token #pat #in_token #iter #body
                ))
            }
            "range" => Some(self.runtime_for(f, lo, hi, step, options)),
            _ => None,
        }
    }

    fn runtime_for(
        &mut self,
        f: &mut ExprForLoop,
        lo: TokenStream,
        hi: TokenStream,
        step: TokenStream,
        options: Option<TokenStream>,
    ) -> Expr {
        let span = f.for_token.span;
        if let Some(Label { name, .. }) = &f.label {
            self.error(
                name.span(),
                "a run-time loop (`for .. in range(..)`) cannot have a label: nothing may break \
                 out of it"
                    .into(),
            );
        }
        let mut esc = Escapes::default();
        esc.visit_block(&f.body);
        for (s, what, _) in esc.found {
            self.error(
                s,
                format!(
                    "`{what}` cannot leave a run-time loop (`for .. in range(..)`): the loop \
                     becomes one IR region traced once; use a mask, a loop-carried flag or a \
                     `while` on a tile condition"
                ),
            );
        }
        let mut vars = AssignedVars::default();
        vars.push_scope();
        vars.declare_pat(&f.pat);
        vars.visit_block(&f.body);
        let carried = vars.found;

        visit_mut::visit_block_mut(self, &mut f.body);
        let pat = &f.pat;
        let body = &f.body;
        let c = carried_tokens(&carried, span);
        let (init, unpack, repack, assign_back) = (&c.init, &c.unpack_mut, &c.repack, &c.assign);
        let carried_var = Ident::new("__tegula_carried", Span::mixed_site());
        let attrs = &f.attrs;
        let (func, options) = match options {
            Some(o) => (quote_spanned!(span=> for_range_with), quote!(#o,)),
            None => (quote_spanned!(span=> for_range), quote!()),
        };
        syn::parse_quote_spanned!(span=> #(#attrs)* {
            let #carried_var = ::tegula::ir::builder::#func(
                #lo, #hi, #step, #options #init,
                |#pat, #carried_var| {
                    #unpack
                    #body;
                    #repack
                },
            );
            #assign_back
        })
    }

    fn rewrite_if(&mut self, i: &mut ExprIf) -> Option<Expr> {
        if contains_let(&i.cond) {
            return None;
        }
        let span = i.if_token.span;
        let mut esc = Escapes::default();
        esc.visit_block(&i.then_branch);
        if let Some((_, e)) = &i.else_branch {
            esc.visit_expr(e);
        }
        if !esc.found.is_empty() {
            // Only a trace-time branch can leave a loop or the kernel.
            if !self.is_rust_bool(&i.cond) {
                let cond = &i.cond;
                *i.cond = syn::parse_quote_spanned!(span=>
                    ::tegula::ir::builder::RustBool::rust_bool(#cond));
            }
            return None;
        }
        if self.is_rust_bool(&i.cond) {
            return None;
        }
        let mut vars = AssignedVars::default();
        vars.push_scope();
        vars.visit_block(&i.then_branch);
        if let Some((_, e)) = &i.else_branch {
            vars.visit_expr(e);
        }
        let carried = vars.found;

        self.visit_block_mut(&mut i.then_branch);
        if let Some((_, e)) = &mut i.else_branch {
            self.visit_expr_mut(e);
        }
        let taken = Ident::new("__tegula_taken", Span::mixed_site());
        let carried_var = Ident::new("__tegula_carried", Span::mixed_site());
        let value = Ident::new("__tegula_value", Span::mixed_site());
        let cond = &i.cond;
        let then_branch = &i.then_branch;
        let else_branch = i.else_branch.as_ref().map(|(e, b)| quote!(#e #b));
        let c = carried_tokens(&carried, span);
        let (init, unpack, repack, assign_back) = (&c.init, &c.unpack_mut, &c.repack, &c.assign);
        let attrs = &i.attrs;
        Some(syn::parse_quote_spanned!(span=> #(#attrs)* {
            let (#value, #carried_var) = ::tegula::ir::builder::Condition::branch(
                #cond,
                #init,
                |#taken, #carried_var| {
                    #unpack
                    (if #taken #then_branch #else_branch, #repack)
                },
            );
            #assign_back
            #value
        }))
    }

    fn rewrite_while(&mut self, w: &mut ExprWhile) -> Option<Expr> {
        if contains_let(&w.cond) {
            return None;
        }
        let span = w.while_token.span;
        let mut esc = Escapes::default();
        esc.visit_block(&w.body);
        if !esc.found.is_empty() {
            if !self.is_rust_bool(&w.cond) {
                let cond = &w.cond;
                *w.cond = syn::parse_quote_spanned!(span=>
                    ::tegula::ir::builder::RustBool::rust_bool(#cond));
            }
            return None;
        }
        if self.is_rust_bool(&w.cond) {
            return None;
        }
        if let Some(Label { name, .. }) = &w.label {
            self.error(
                name.span(),
                "a `while` on a run-time condition cannot have a label; if the condition is a \
                 Rust bool, write it so (e.g. `flag == true`) or drop the label"
                    .into(),
            );
        }
        let mut vars = AssignedVars::default();
        vars.push_scope();
        vars.visit_expr(&w.cond);
        vars.visit_block(&w.body);
        let carried = vars.found;

        self.visit_expr_mut(&mut w.cond);
        self.visit_block_mut(&mut w.body);
        let carried_var = Ident::new("__tegula_carried", Span::mixed_site());
        let c = carried_tokens(&carried, span);
        let (init, unpack, unpack_mut, repack, assign_back) =
            (&c.init, &c.unpack, &c.unpack_mut, &c.repack, &c.assign);
        let cond = &w.cond;
        let body = &w.body;
        let attrs = &w.attrs;
        Some(syn::parse_quote_spanned!(span=> #(#attrs)* {
            let #carried_var = ::tegula::ir::builder::while_any(
                #init,
                |#carried_var| {
                    #unpack
                    #cond
                },
                |#carried_var| {
                    #unpack_mut
                    #body;
                    #repack
                },
            );
            #assign_back
        }))
    }

    /// True when `e` is visibly a Rust `bool`: a tile has no `==`, `<`, `&&`, and so on.
    fn is_rust_bool(&self, e: &Expr) -> bool {
        match e {
            Expr::Lit(l) => matches!(l.lit, Lit::Bool(_)),
            Expr::Binary(b) => matches!(
                b.op,
                BinOp::Eq(_)
                    | BinOp::Ne(_)
                    | BinOp::Lt(_)
                    | BinOp::Le(_)
                    | BinOp::Gt(_)
                    | BinOp::Ge(_)
                    | BinOp::And(_)
                    | BinOp::Or(_)
            ),
            Expr::Unary(u) => matches!(u.op, UnOp::Not(_)) && self.is_rust_bool(&u.expr),
            Expr::Paren(p) => self.is_rust_bool(&p.expr),
            Expr::Group(g) => self.is_rust_bool(&g.expr),
            Expr::Path(p) => p
                .path
                .get_ident()
                .is_some_and(|i| self.constexprs.contains(&i.to_string())),
            Expr::MethodCall(m) => [
                "is_some",
                "is_none",
                "is_ok",
                "is_err",
                "is_empty",
                "contains",
                "starts_with",
                "ends_with",
                "is_power_of_two",
                "is_nan",
                "is_finite",
                "is_float",
                "is_int",
            ]
            .iter()
            .any(|n| m.method == n),
            _ => false,
        }
    }
}

impl VisitMut for Rewriter {
    fn visit_expr_mut(&mut self, e: &mut Expr) {
        let replacement = match e {
            Expr::ForLoop(f) => self.rewrite_for(f),
            Expr::If(i) => self.rewrite_if(i),
            Expr::While(w) => self.rewrite_while(w),
            _ => None,
        };
        match replacement {
            Some(r) => *e = r,
            None => visit_mut::visit_expr_mut(self, e),
        }
    }

    // Items nested in the body are ordinary Rust, not part of the kernel trace.
    fn visit_item_mut(&mut self, _: &mut syn::Item) {}
}

fn contains_let(e: &Expr) -> bool {
    match e {
        Expr::Let(_) => true,
        Expr::Binary(b) => contains_let(&b.left) || contains_let(&b.right),
        Expr::Paren(p) => contains_let(&p.expr),
        _ => false,
    }
}

/// The pieces of generated code that move carried variables in and out of a closure.
struct CarriedTokens {
    /// `(Named("a", a), ..)`: the values entering.
    init: TokenStream,
    /// `let (Named(_, a), ..) = __tegula_carried;`
    unpack: TokenStream,
    /// `let (Named(_, mut a), ..) = __tegula_carried;`
    unpack_mut: TokenStream,
    /// `(Named("a", a), ..)`: the values leaving (same tokens as `init`).
    repack: TokenStream,
    /// `(Named(_, a), ..) = __tegula_carried;`: assigned back to the outer variables.
    assign: TokenStream,
}

/// Carry implements tuples up to this length; longer lists nest.
const MAX_TUPLE: usize = 12;

fn tuple(items: Vec<TokenStream>) -> TokenStream {
    if items.len() <= MAX_TUPLE {
        return quote!((#(#items,)*));
    }
    let chunks: Vec<TokenStream> = items.chunks(MAX_TUPLE).map(|c| tuple(c.to_vec())).collect();
    tuple(chunks)
}

fn carried_tokens(vars: &[Ident], span: Span) -> CarriedTokens {
    let carried_var = Ident::new("__tegula_carried", Span::mixed_site());
    let named = quote_spanned!(span=> ::tegula::ir::builder::Named);
    let values = tuple(
        vars.iter()
            .map(|v| {
                let name = v.to_string();
                quote_spanned!(span=> #named(#name, #v))
            })
            .collect(),
    );
    let pats = tuple(
        vars.iter()
            .map(|v| quote_spanned!(span=> #named(_, #v)))
            .collect(),
    );
    let pats_mut = tuple(
        vars.iter()
            .map(|v| quote_spanned!(span=> #named(_, mut #v)))
            .collect(),
    );
    let (unpack, unpack_mut, assign) = if vars.is_empty() {
        (
            quote_spanned!(span=> let () = #carried_var;),
            quote_spanned!(span=> let () = #carried_var;),
            TokenStream::new(),
        )
    } else {
        (
            quote_spanned!(span=> #[allow(unused_variables)] let #pats = #carried_var;),
            quote_spanned!(span=> #[allow(unused_mut, unused_assignments)] let #pats_mut = #carried_var;),
            // The borrows mark each variable as read after the loop, so a carried value the
            // kernel never reads again (Triton's `ptrs += step` style) raises no
            // `unused_assignments` warning in the user's crate.
            quote_spanned!(span=> #pats = #carried_var; #(let _ = &#vars;)*),
        )
    };
    CarriedTokens {
        init: values.clone(),
        unpack,
        unpack_mut,
        repack: values,
        assign,
    }
}

/// The variables assigned in a region that are declared outside it, in order of first
/// assignment. Tracks `let`, closure, `for`, `match` and `if let` bindings as inner scopes.
#[derive(Default)]
struct AssignedVars {
    scopes: Vec<HashSet<String>>,
    found: Vec<Ident>,
}

impl AssignedVars {
    fn push_scope(&mut self) {
        self.scopes.push(HashSet::new());
    }

    fn pop_scope(&mut self) {
        self.scopes.pop();
    }

    fn declare_pat(&mut self, pat: &Pat) {
        let mut names = PatIdents::default();
        names.visit_pat(pat);
        let scope = self.scopes.last_mut().expect("a scope is open");
        scope.extend(names.0.into_iter().map(|i| i.to_string()));
    }

    /// Records the variables an assignment to `target` writes (`a`, `(a, b)`, `a[i]`, `a.f`).
    fn assign_target(&mut self, target: &Expr) {
        match target {
            Expr::Path(p) => {
                if let Some(id) = p.path.get_ident() {
                    let name = id.to_string();
                    let local = self.scopes.iter().any(|s| s.contains(&name));
                    if !local && !self.found.iter().any(|f| f == id) {
                        self.found.push(id.clone());
                    }
                }
            }
            Expr::Tuple(t) => t.elems.iter().for_each(|e| self.assign_target(e)),
            Expr::Array(a) => a.elems.iter().for_each(|e| self.assign_target(e)),
            Expr::Paren(p) => self.assign_target(&p.expr),
            Expr::Index(i) => {
                self.assign_target(&i.expr);
                self.visit_expr(&i.index);
            }
            Expr::Field(f) => self.assign_target(&f.base),
            other => self.visit_expr(other),
        }
    }
}

impl<'a> Visit<'a> for AssignedVars {
    fn visit_block(&mut self, b: &'a Block) {
        self.push_scope();
        visit::visit_block(self, b);
        self.pop_scope();
    }

    fn visit_local(&mut self, l: &'a syn::Local) {
        if let Some(init) = &l.init {
            self.visit_expr(&init.expr);
            if let Some((_, diverge)) = &init.diverge {
                self.visit_expr(diverge);
            }
        }
        self.declare_pat(&l.pat);
    }

    fn visit_expr_closure(&mut self, c: &'a syn::ExprClosure) {
        self.push_scope();
        for p in &c.inputs {
            self.declare_pat(p);
        }
        self.visit_expr(&c.body);
        self.pop_scope();
    }

    fn visit_expr_for_loop(&mut self, f: &'a ExprForLoop) {
        self.visit_expr(&f.expr);
        self.push_scope();
        self.declare_pat(&f.pat);
        self.visit_block(&f.body);
        self.pop_scope();
    }

    fn visit_arm(&mut self, a: &'a syn::Arm) {
        self.push_scope();
        self.declare_pat(&a.pat);
        if let Some((_, g)) = &a.guard {
            self.visit_expr(g);
        }
        self.visit_expr(&a.body);
        self.pop_scope();
    }

    fn visit_expr_if(&mut self, i: &'a ExprIf) {
        self.push_scope();
        self.visit_expr(&i.cond);
        self.visit_block(&i.then_branch);
        self.pop_scope();
        if let Some((_, e)) = &i.else_branch {
            self.visit_expr(e);
        }
    }

    fn visit_expr_while(&mut self, w: &'a ExprWhile) {
        self.push_scope();
        self.visit_expr(&w.cond);
        self.visit_block(&w.body);
        self.pop_scope();
    }

    fn visit_expr_let(&mut self, l: &'a syn::ExprLet) {
        self.visit_expr(&l.expr);
        self.declare_pat(&l.pat);
    }

    fn visit_expr_assign(&mut self, a: &'a syn::ExprAssign) {
        self.assign_target(&a.left);
        self.visit_expr(&a.right);
    }

    fn visit_expr_binary(&mut self, b: &'a syn::ExprBinary) {
        if is_compound_assign(&b.op) {
            self.assign_target(&b.left);
            self.visit_expr(&b.right);
        } else {
            visit::visit_expr_binary(self, b);
        }
    }

    fn visit_item(&mut self, _: &'a syn::Item) {}
}

fn is_compound_assign(op: &BinOp) -> bool {
    matches!(
        op,
        BinOp::AddAssign(_)
            | BinOp::SubAssign(_)
            | BinOp::MulAssign(_)
            | BinOp::DivAssign(_)
            | BinOp::RemAssign(_)
            | BinOp::BitXorAssign(_)
            | BinOp::BitAndAssign(_)
            | BinOp::BitOrAssign(_)
            | BinOp::ShlAssign(_)
            | BinOp::ShrAssign(_)
    )
}

/// The identifiers a pattern binds.
#[derive(Default)]
struct PatIdents(Vec<Ident>);

impl<'a> Visit<'a> for PatIdents {
    fn visit_pat_ident(&mut self, p: &'a syn::PatIdent) {
        self.0.push(p.ident.clone());
        visit::visit_pat_ident(self, p);
    }
}

/// `break`, `continue` and `return` that leave the visited region (not those inside closures,
/// nested items, or loops nested in the region that they target).
#[derive(Default)]
struct Escapes {
    loop_depth: usize,
    labels: Vec<String>,
    /// (span, keyword, whether it carries a value)
    found: Vec<(Span, &'static str, bool)>,
}

impl Escapes {
    fn jump(&mut self, span: Span, what: &'static str, label: Option<&syn::Lifetime>) {
        let leaves = match label {
            Some(l) => !self.labels.contains(&l.ident.to_string()),
            None => self.loop_depth == 0,
        };
        if leaves {
            self.found.push((span, what, false));
        }
    }

    fn in_loop(&mut self, label: Option<&Label>, f: impl FnOnce(&mut Self)) {
        self.loop_depth += 1;
        if let Some(l) = label {
            self.labels.push(l.name.ident.to_string());
        }
        f(self);
        if label.is_some() {
            self.labels.pop();
        }
        self.loop_depth -= 1;
    }
}

impl<'a> Visit<'a> for Escapes {
    fn visit_expr_break(&mut self, b: &'a syn::ExprBreak) {
        self.jump(b.break_token.span, "break", b.label.as_ref());
        visit::visit_expr_break(self, b);
    }

    fn visit_expr_continue(&mut self, c: &'a syn::ExprContinue) {
        self.jump(c.continue_token.span, "continue", c.label.as_ref());
    }

    fn visit_expr_return(&mut self, r: &'a syn::ExprReturn) {
        self.found
            .push((r.return_token.span, "return", r.expr.is_some()));
        visit::visit_expr_return(self, r);
    }

    fn visit_expr_for_loop(&mut self, f: &'a ExprForLoop) {
        self.visit_expr(&f.expr);
        self.in_loop(f.label.as_ref(), |s| s.visit_block(&f.body));
    }

    fn visit_expr_while(&mut self, w: &'a ExprWhile) {
        self.in_loop(w.label.as_ref(), |s| {
            s.visit_expr(&w.cond);
            s.visit_block(&w.body);
        });
    }

    fn visit_expr_loop(&mut self, l: &'a syn::ExprLoop) {
        self.in_loop(l.label.as_ref(), |s| s.visit_block(&l.body));
    }

    fn visit_expr_block(&mut self, b: &'a syn::ExprBlock) {
        // A labeled block is a target of `break 'label` only.
        if let Some(l) = &b.label {
            self.labels.push(l.name.ident.to_string());
            self.visit_block(&b.block);
            self.labels.pop();
        } else {
            self.visit_block(&b.block);
        }
    }

    fn visit_expr_closure(&mut self, _: &'a syn::ExprClosure) {}
    fn visit_expr_async(&mut self, _: &'a syn::ExprAsync) {}
    fn visit_item(&mut self, _: &'a syn::Item) {}
}
