//! One module per area.

mod harness;
