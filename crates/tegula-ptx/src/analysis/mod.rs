//! Facts about a kernel's values that the planning passes read: contiguity, divisibility and
//! constancy per axis ([`axis_info`]).

pub mod axis_info;
