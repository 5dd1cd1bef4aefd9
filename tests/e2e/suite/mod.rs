//! One module per area.

mod attach;
mod core_loop;
mod fake_llm;
mod foundation;
mod harness;
