//! `#[tegula::kernel]`: a Rust function becomes a traced tile kernel with a typed launcher.
//!
//! ```text
//! #[tegula::kernel]
//! fn gemv(a: Ptr<f16>, x: Ptr<f16>, y: Ptr<f32>, n: i32, #[constexpr] block: usize) { .. }
//! // expands to a module `gemv` with `trace(block)`, `launch(dev, grid, a, x, y, n, block)`
//! // and `launch_with(dev, grid, config, a, x, y, n, block)`.
//! ```
//!
//! The body is ordinary Rust run once at trace time over symbolic tiles, with three rewrites
//! (see the `body` module): `for .. in range(..)` becomes an IR loop whose loop-carried values
//! are the outer variables assigned in it; `if` and `while` dispatch on the condition's type
//! (a Rust `bool` decides at trace time, a tile becomes an IR `if`/`while`); `static_range(..)`
//! unrolls.
//! Every generated call carries the span of the user's token, so `#[track_caller]` locations in
//! trace errors point at the user's line.

mod body;
mod expand;
mod signature;

use proc_macro::TokenStream;

/// Turns a function over tiles into a kernel module with `trace`, `launch` and `launch_with`.
///
/// Parameters: `Ptr<T>` (a pointer tile; the launcher takes a tensor), scalars (`i32`, `i64`,
/// `u32`, `u64`, `i8`, `i16`, `u8`, `u16`, `f32`, `f64`, `f16`, `bf16`, `bool` or a type
/// parameter; a scalar tile), `TensorDescriptor<T>` (a host tensor descriptor,
/// `tegula::TensorDescriptor`: a tensor descriptor in the body, made from the tensor's pointer,
/// shape and row stride, run-time parameters, and its block shape, which `trace` takes and the
/// specialization key holds), and `#[constexpr] name: Type` (a Rust value at trace time, part of
/// the specialization key). Type parameters and const generics become generic parameters of the
/// generated functions; const generics are constexprs too.
#[proc_macro_attribute]
pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::kernel(attr.into(), item.into()).into()
}

/// A helper function over tiles whose body is rewritten like a kernel body, callable from
/// kernels and from other `#[tegula::func]`s: `for .. in range(..)` becomes a run-time loop
/// carrying the `let mut` variables assigned in it, `if`/`while` on a tile become IR regions,
/// `static_range` unrolls. Parameters that are not `Tile`s are Rust values at trace time
/// (constexprs of the helper). The function keeps its signature and may return values.
#[proc_macro_attribute]
pub fn func(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::func(attr.into(), item.into()).into()
}

#[cfg(test)]
mod tests;
