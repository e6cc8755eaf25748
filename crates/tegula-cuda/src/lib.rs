//! (crate being built)
