//! Facts about a kernel's values that the planning passes read: contiguity, divisibility and
//! constancy per axis ([`axis_info`]); affine forms of pointers and masks in a loop's
//! induction variable ([`affine`]).

pub mod affine;
pub mod axis_info;
