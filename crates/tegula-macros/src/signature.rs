//! The kernel signature: which parameters are pointers, scalars and constexprs, and the generics.

use syn::spanned::Spanned;
use syn::{
    Error, FnArg, GenericArgument, GenericParam, Ident, ItemFn, Pat, PathArguments, ReturnType,
    Token, Type,
};

/// Scalar types a launcher can pass by value (`tegula::ScalarArg`).
const SCALAR_TYPES: &[&str] = &[
    "bool", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f16", "bf16", "f32", "f64",
];

pub enum ParamKind {
    /// `Ptr<T>`: a pointer tile in the body; the element type `T`.
    Ptr(Box<Type>),
    /// A scalar tile in the body; its type is `ty`.
    Scalar,
    /// `#[constexpr]`: a Rust value in the body.
    Constexpr,
    /// `TensorDescriptor<T>`: a host tensor descriptor (Triton's `TensorDescriptor` argument),
    /// a tensor descriptor in the body; the element type `T`. Its tensor's pointer, shape and
    /// row stride are run-time parameters, its block shape a trace-time value.
    Descriptor(Box<Type>),
}

pub struct Param {
    pub name: Ident,
    pub mutability: Option<Token![mut]>,
    pub ty: Type,
    pub kind: ParamKind,
}

pub struct Signature {
    pub params: Vec<Param>,
    /// Names of the type parameters (each is a dtype in the key).
    pub type_params: Vec<Ident>,
    /// Names of the const generic parameters (constexprs in the key).
    pub const_params: Vec<Ident>,
}

impl Signature {
    /// Type parameters used as a scalar parameter's type: the launcher needs `T: ScalarArg`.
    pub fn scalar_type_params(&self) -> Vec<&Ident> {
        self.type_params
            .iter()
            .filter(|t| {
                self.params
                    .iter()
                    .any(|p| matches!(p.kind, ParamKind::Scalar) && type_ident(&p.ty) == Some(t))
            })
            .collect()
    }
}

/// The single identifier a type is, if it is a plain path like `T` or `f32`.
fn type_ident(ty: &Type) -> Option<&Ident> {
    match ty {
        Type::Path(p) if p.qself.is_none() && p.path.segments.len() == 1 => {
            let seg = &p.path.segments[0];
            matches!(seg.arguments, PathArguments::None).then_some(&seg.ident)
        }
        _ => None,
    }
}

/// `T` of `Ptr<T>` (any path ending in `Ptr`).
fn ptr_element(ty: &Type) -> Option<&Type> {
    generic_element(ty, "Ptr")
}

/// `T` of `TensorDescriptor<T>` (any path ending in `TensorDescriptor`, with one type).
fn descriptor_element(ty: &Type) -> Option<&Type> {
    generic_element(ty, "TensorDescriptor")
}

/// `T` of `Name<T>` (any path ending in `Name`).
fn generic_element<'t>(ty: &'t Type, name: &str) -> Option<&'t Type> {
    let Type::Path(p) = ty else { return None };
    let seg = p.path.segments.last()?;
    if seg.ident != name {
        return None;
    }
    match &seg.arguments {
        PathArguments::AngleBracketed(a) if a.args.len() == 1 => match &a.args[0] {
            GenericArgument::Type(t) => Some(t),
            _ => None,
        },
        _ => None,
    }
}

fn is_scalar_type(ty: &Type, type_params: &[Ident]) -> bool {
    let Type::Path(p) = ty else { return false };
    let Some(seg) = p.path.segments.last() else {
        return false;
    };
    if !matches!(seg.arguments, PathArguments::None) || p.qself.is_some() {
        return false;
    }
    let name = seg.ident.to_string();
    SCALAR_TYPES.contains(&name.as_str())
        || (p.path.segments.len() == 1 && type_params.contains(&seg.ident))
}

/// Checks the function and classifies its parameters; every misuse found is an error at the
/// offending tokens. Strips `#[constexpr]` from the parameters of `f`.
pub fn parse(f: &mut ItemFn) -> Result<Signature, Error> {
    let mut errors: Vec<Error> = Vec::new();
    let sig = &mut f.sig;
    if let Some(t) = &sig.asyncness {
        errors.push(Error::new(t.span(), "a kernel cannot be `async`"));
    }
    if let Some(t) = &sig.unsafety {
        errors.push(Error::new(t.span(), "a kernel cannot be `unsafe`"));
    }
    if let Some(t) = &sig.constness {
        errors.push(Error::new(t.span(), "a kernel cannot be `const`"));
    }
    if let Some(t) = &sig.abi {
        errors.push(Error::new(t.span(), "a kernel cannot have an ABI"));
    }
    if let Some(v) = &sig.variadic {
        errors.push(Error::new(v.span(), "a kernel cannot be variadic"));
    }
    if let ReturnType::Type(_, ty) = &sig.output {
        errors.push(Error::new(
            ty.span(),
            "a kernel returns nothing: it writes its results through `Ptr` parameters",
        ));
    }

    let mut type_params = Vec::new();
    let mut const_params = Vec::new();
    for g in &sig.generics.params {
        match g {
            GenericParam::Type(t) => type_params.push(t.ident.clone()),
            GenericParam::Const(c) => const_params.push(c.ident.clone()),
            GenericParam::Lifetime(l) => errors.push(Error::new(
                l.span(),
                "a kernel cannot have lifetime parameters",
            )),
        }
    }

    let mut params = Vec::new();
    for input in sig.inputs.iter_mut() {
        let arg = match input {
            FnArg::Receiver(r) => {
                errors.push(Error::new(
                    r.span(),
                    "a kernel is a free function; it takes no `self`",
                ));
                continue;
            }
            FnArg::Typed(arg) => arg,
        };
        let mut constexpr = false;
        arg.attrs.retain(|a| {
            let is = a.path().is_ident("constexpr");
            constexpr |= is;
            !is
        });
        let (name, mutability) = match &*arg.pat {
            Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => {
                (p.ident.clone(), p.mutability)
            }
            other => {
                errors.push(Error::new(
                    other.span(),
                    "kernel parameters must be plain names (`x: Ptr<f32>`), not patterns",
                ));
                continue;
            }
        };
        let ty = (*arg.ty).clone();
        let kind = if let Some(elem) = ptr_element(&ty) {
            if constexpr {
                errors.push(Error::new(
                    ty.span(),
                    "a `Ptr` cannot be `#[constexpr]`: pointers are run-time arguments",
                ));
            }
            ParamKind::Ptr(Box::new(elem.clone()))
        } else if let Some(elem) = descriptor_element(&ty) {
            if constexpr {
                errors.push(Error::new(
                    ty.span(),
                    "a `TensorDescriptor` cannot be `#[constexpr]`: its tensor is a run-time \
                     argument (its block shape is part of the specialization already)",
                ));
            }
            ParamKind::Descriptor(Box::new(elem.clone()))
        } else if constexpr {
            ParamKind::Constexpr
        } else if is_scalar_type(&ty, &type_params) {
            ParamKind::Scalar
        } else {
            errors.push(Error::new(
                ty.span(),
                "unsupported kernel parameter type: use `Ptr<T>`, `TensorDescriptor<T>`, a \
                 scalar (bool, i8..i64, u8..u64, f16, bf16, f32, f64, or a type parameter), or \
                 mark a trace-time value `#[constexpr]`",
            ));
            continue;
        };
        params.push(Param {
            name,
            mutability,
            ty,
            kind,
        });
    }

    match errors.into_iter().reduce(|mut a, b| {
        a.combine(b);
        a
    }) {
        Some(e) => Err(e),
        None => Ok(Signature {
            params,
            type_params,
            const_params,
        }),
    }
}
