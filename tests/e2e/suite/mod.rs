//! One module per area.

mod fake_llm;
mod harness;
