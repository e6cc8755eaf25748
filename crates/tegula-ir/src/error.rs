//! Errors of tracing and verification; both point at the user's source line.

use crate::kernel::{Inst, Loc};
use thiserror::Error;

/// A type, shape or usage error found while tracing a kernel body.
#[derive(Clone, Debug, PartialEq, Error)]
#[error("error in kernel `{kernel}`: {message}\n  --> {loc}")]
pub struct TraceError {
    pub kernel: String,
    pub message: String,
    /// The line of the kernel body that caused it.
    pub loc: Loc,
}

/// An invariant of the IR that does not hold, naming the offending instruction.
#[derive(Clone, Debug, PartialEq, Error)]
#[error("invalid IR in kernel `{kernel}`: {inst} (`{op}`): {message}\n  --> {loc}")]
pub struct VerifyError {
    pub kernel: String,
    pub inst: Inst,
    pub op: String,
    pub message: String,
    pub loc: Loc,
}
