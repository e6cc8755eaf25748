//! The text printer (being written).
use crate::kernel::Kernel;
use std::fmt;

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for i in self.walk() {
            writeln!(f, "{}", self.insts[i].op.name())?;
        }
        Ok(())
    }
}
