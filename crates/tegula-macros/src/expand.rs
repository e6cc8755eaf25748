//! Generates the kernel module: `trace`, `launch`, `launch_with` and `plan`.

use crate::body::Rewriter;
use crate::signature::{self, ParamKind, Signature};
use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::visit_mut::VisitMut;
use syn::{Error, Ident, ItemFn};

pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        return Error::new_spanned(attr, "#[tegula::kernel] takes no arguments").to_compile_error();
    }
    let mut f: ItemFn = match syn::parse2(item) {
        Ok(f) => f,
        Err(e) => {
            return Error::new(e.span(), "#[tegula::kernel] applies to a free function")
                .to_compile_error()
        }
    };
    let sig = match signature::parse(&mut f) {
        Ok(s) => s,
        Err(e) => return e.to_compile_error(),
    };
    let constexprs = sig
        .params
        .iter()
        .filter(|p| matches!(p.kind, ParamKind::Constexpr))
        .map(|p| p.name.to_string())
        .chain(sig.const_params.iter().map(|c| c.to_string()))
        .collect();
    let mut rewriter = Rewriter::new(constexprs);
    rewriter.check_returns(&f.block);
    rewriter.visit_block_mut(&mut f.block);
    if let Some(e) = rewriter.errors.into_iter().reduce(|mut a, b| {
        a.combine(b);
        a
    }) {
        return e.to_compile_error();
    }
    generate(&f, &sig)
}

/// `#[tegula::func]`: the body rewritten as a kernel body, the function otherwise unchanged.
pub fn func(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        return Error::new_spanned(attr, "#[tegula::func] takes no arguments").to_compile_error();
    }
    let mut f: ItemFn = match syn::parse2(item) {
        Ok(f) => f,
        Err(e) => {
            return Error::new(e.span(), "#[tegula::func] applies to a free function")
                .to_compile_error()
        }
    };
    // Parameters that are not tiles are Rust values: conditions on them stay plain Rust.
    let constexprs = f
        .sig
        .inputs
        .iter()
        .filter_map(|a| match a {
            syn::FnArg::Typed(t) => Some(t),
            syn::FnArg::Receiver(_) => None,
        })
        .filter(|t| !is_tile_type(&t.ty))
        .filter_map(|t| match &*t.pat {
            syn::Pat::Ident(i) => Some(i.ident.to_string()),
            _ => None,
        })
        .chain(f.sig.generics.const_params().map(|c| c.ident.to_string()))
        .collect();
    let mut rewriter = Rewriter::new(constexprs);
    rewriter.visit_block_mut(&mut f.block);
    if let Some(e) = rewriter.errors.into_iter().reduce(|mut a, b| {
        a.combine(b);
        a
    }) {
        return e.to_compile_error();
    }
    quote!(#f)
}

/// `Tile`, `&Tile` or a path ending in `Tile`.
fn is_tile_type(ty: &syn::Type) -> bool {
    match ty {
        syn::Type::Reference(r) => is_tile_type(&r.elem),
        syn::Type::Path(p) => p.path.segments.last().is_some_and(|s| s.ident == "Tile"),
        _ => false,
    }
}

fn generate(f: &ItemFn, sig: &Signature) -> TokenStream {
    let name = &f.sig.ident;
    let name_str = name.to_string();
    let vis = &f.vis;
    let generics = &f.sig.generics;
    let where_clause = &generics.where_clause;
    let turbofish = generics.split_for_impl().1;
    let turbofish = turbofish.as_turbofish();
    let (docs, other_attrs): (Vec<_>, Vec<_>) =
        f.attrs.iter().partition(|a| a.path().is_ident("doc"));

    // Hygienic names for the generated plumbing, so user parameters may be called `dev` etc.
    let params_var = Ident::new("__tegula_params", Span::mixed_site());
    let dev = Ident::new("dev", Span::mixed_site());
    let grid = Ident::new("grid", Span::mixed_site());
    let config = Ident::new("config", Span::mixed_site());
    let trace_fn = Ident::new("__tegula_trace", Span::mixed_site());

    // trace(): constexprs are its arguments; pointer and scalar parameters become tiles.
    let mut trace_args = Vec::new();
    let mut declare_params = Vec::new();
    let mut constexpr_names = Vec::new();
    // What launch passes trace, in parameter order (constexprs, descriptors' block shapes).
    let mut trace_values: Vec<TokenStream> = Vec::new();
    let mut key_descriptors: Vec<Ident> = Vec::new();
    let mut trace_names: Vec<String> = Vec::new();
    // launch(): every parameter, tensors through TensorArg, scalars through ScalarArg.
    let mut launch_args = Vec::new();
    let mut launch_names = Vec::new();
    let mut kernel_args = Vec::new();
    let mut doc_params = Vec::new();
    for p in &sig.params {
        let (pname, ty, mutability) = (&p.name, &p.ty, &p.mutability);
        let pstr = pname.to_string();
        let ty_str = ty.to_token_stream().to_string().replace(' ', "");
        launch_names.push(pname.clone());
        match &p.kind {
            ParamKind::Ptr(elem) => {
                declare_params.push(quote_spanned!(pname.span()=>
                    let #mutability #pname = #params_var.ptr(
                        #pstr, <#elem as ::tegula::ir::Element>::DTYPE);
                ));
                launch_args.push(quote!(#pname: impl ::tegula::TensorArg<#elem>));
                kernel_args.push(quote!([::tegula::TensorArg::kernel_arg(&#pname)]));
                doc_params.push(format!(
                    "- `{pstr}: {ty_str}`: a pointer tile; the launcher takes a tensor"
                ));
            }
            ParamKind::Scalar => {
                declare_params.push(quote_spanned!(pname.span()=>
                    let #mutability #pname = #params_var.scalar(
                        #pstr, <#ty as ::tegula::ir::Element>::DTYPE);
                ));
                launch_args.push(quote!(#pname: #ty));
                kernel_args.push(quote!([::tegula::ScalarArg::kernel_arg(#pname)]));
                doc_params.push(format!("- `{pstr}: {ty_str}`: a scalar tile"));
            }
            ParamKind::Constexpr => {
                trace_args.push(quote!(#mutability #pname: #ty));
                trace_values.push(quote!(::core::clone::Clone::clone(&#pname)));
                trace_names.push(pstr.clone());
                constexpr_names.push(pname.clone());
                launch_args.push(quote!(#pname: #ty));
                doc_params.push(format!(
                    "- `{pstr}: {ty_str}`: constexpr, a Rust value at trace time"
                ));
            }
            ParamKind::Descriptor(elem) => {
                // The body sees the descriptor made from its parts; `trace` takes its block
                // shape, the launch its parts (`tegula::TensorDescriptor::kernel_args`).
                let block = format_ident!("{}_block_shape", pname);
                let (base, shape0, shape1, stride0) = (
                    format!("{pstr}_base"),
                    format!("{pstr}_shape0"),
                    format!("{pstr}_shape1"),
                    format!("{pstr}_stride0"),
                );
                declare_params.push(quote_spanned!(pname.span()=>
                    let #mutability #pname = ::tegula::ir::builder::make_tensor_descriptor(
                        #params_var.ptr(#base, <#elem as ::tegula::ir::Element>::DTYPE),
                        (
                            #params_var.scalar(#shape0, ::tegula::ir::DType::I32),
                            #params_var.scalar(#shape1, ::tegula::ir::DType::I32),
                        ),
                        (#params_var.scalar(#stride0, ::tegula::ir::DType::I32), 1),
                        #block,
                    );
                ));
                trace_args.push(quote!(#block: [usize; 2]));
                trace_values.push(quote!(::tegula::TensorDescriptor::block_shape(#pname)));
                trace_names.push(block.to_string());
                key_descriptors.push(pname.clone());
                launch_args.push(quote!(#pname: &::tegula::TensorDescriptor<#elem>));
                kernel_args.push(quote!(::tegula::TensorDescriptor::kernel_args(#pname)));
                doc_params.push(format!(
                    "- `{pstr}: {ty_str}`: a host tensor descriptor (its tensor's pointer, shape \
                     and row stride at run time, its block shape at trace time); a tensor \
                     descriptor in the body"
                ));
            }
        }
    }
    for c in &sig.const_params {
        doc_params.push(format!(
            "- const generic `{c}`: constexpr, a Rust value at trace time"
        ));
    }

    // The specialization key: constexpr values, const generics, type parameters' dtypes.
    let mut key_parts = Vec::new();
    let mut key_values: Vec<TokenStream> = Vec::new();
    for c in constexpr_names.iter().chain(&sig.const_params) {
        key_parts.push(format!("{c}={{:?}}"));
        key_values.push(quote!(#c));
    }
    for t in &sig.type_params {
        key_parts.push(format!("{t}={{:?}}"));
        key_values.push(quote!(<#t as ::tegula::ir::Element>::DTYPE));
    }
    for d in &key_descriptors {
        key_parts.push(format!("{d}.block_shape={{:?}}"));
        key_values.push(quote!(::tegula::TensorDescriptor::block_shape(#d)));
    }
    let key_format = key_parts.join(", ");

    // Scalar parameters of a type parameter's type are passed by value: `T: ScalarArg`.
    let mut launch_generics = generics.clone();
    let scalar_type_params = sig.scalar_type_params();
    for param in launch_generics.type_params_mut() {
        if scalar_type_params.contains(&&param.ident) {
            param.bounds.push(syn::parse_quote!(::tegula::ScalarArg));
        }
    }
    let launch_where = &launch_generics.where_clause;

    let body = &f.block;
    let trace_call_args = &trace_values;
    let trace_sig_doc = format!("`trace({})`", trace_names.join(", "));
    let launch_sig_doc = format!(
        "`launch(dev, grid, {})`",
        launch_names
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let doc_params = doc_params.join("\n");
    let module_doc = format!(
        "Kernel `{name_str}`, generated by `#[tegula::kernel]`.\n\n\
         Parameters, in order:\n{doc_params}\n\n\
         {trace_sig_doc} traces it into Tile IR for one specialization; {launch_sig_doc} runs it \
         on a device with the default `LaunchConfig`, `launch_with` takes one, and `plan` says what \
         the compiler decides for a launch without running it."
    );
    let user_docs_sep = if docs.is_empty() {
        quote!()
    } else {
        quote!(#[doc = ""])
    };
    let launch_with = format_ident!("launch_with");

    quote! {
        #(#docs)*
        #user_docs_sep
        #[doc = #module_doc]
        #vis mod #name {
            #[allow(unused_imports)]
            use super::*;

            /// Traces the kernel for these constexpr values (and type parameters) into Tile IR;
            /// the first type or shape error comes back with the line of the kernel body.
            #(#other_attrs)*
            #[allow(clippy::too_many_arguments)]
            pub fn trace #generics (#(#trace_args),*)
                -> ::core::result::Result<::tegula::ir::Kernel, ::tegula::ir::TraceError>
                #where_clause
            {
                ::tegula::ir::builder::trace(#name_str, |#params_var: &mut ::tegula::ir::builder::Params| {
                    #(#declare_params)*
                    #body
                })
            }

            /// Runs the kernel over `grid` programs with the default launch config.
            #[allow(clippy::too_many_arguments)]
            pub fn launch #launch_generics (
                #dev: &::tegula::Device,
                #grid: impl ::core::convert::Into<::tegula::Grid>,
                #(#launch_args),*
            ) -> ::tegula::Result<()> #launch_where {
                #launch_with #turbofish (
                    #dev, #grid, ::core::default::Default::default(), #(#launch_names),*
                )
            }

            /// Runs the kernel over `grid` programs with `config` (warps, pipeline stages).
            #[allow(clippy::too_many_arguments)]
            pub fn launch_with #launch_generics (
                #dev: &::tegula::Device,
                #grid: impl ::core::convert::Into<::tegula::Grid>,
                #config: ::tegula::LaunchConfig,
                #(#launch_args),*
            ) -> ::tegula::Result<()> #launch_where {
                let #trace_fn = || trace #turbofish (#(#trace_call_args),*);
                #dev.launch(::tegula::Launch {
                    name: #name_str,
                    key: ::std::format!(#key_format, #(#key_values),*),
                    trace: &#trace_fn,
                    grid: ::core::convert::Into::into(#grid),
                    config: #config,
                    args: {
                        let mut args = ::std::vec::Vec::new();
                        #(args.extend(#kernel_args);)*
                        args
                    },
                })
            }

            /// What the compiler decides for this launch, without running it: per loop its
            /// pipeline stages (and why fewer than asked), per dot its instructions, the
            /// shared memory and occupancy (`Device::plan`; on a device without a GPU, for
            /// sm_90a).
            #[allow(clippy::too_many_arguments)]
            pub fn plan #launch_generics (
                #dev: &::tegula::Device,
                #grid: impl ::core::convert::Into<::tegula::Grid>,
                #config: ::tegula::LaunchConfig,
                #(#launch_args),*
            ) -> ::tegula::Result<::tegula::Report> #launch_where {
                let #trace_fn = || trace #turbofish (#(#trace_call_args),*);
                #dev.plan(&::tegula::Launch {
                    name: #name_str,
                    key: ::std::format!(#key_format, #(#key_values),*),
                    trace: &#trace_fn,
                    grid: ::core::convert::Into::into(#grid),
                    config: #config,
                    args: {
                        let mut args = ::std::vec::Vec::new();
                        #(args.extend(#kernel_args);)*
                        args
                    },
                })
            }
        }
    }
}
