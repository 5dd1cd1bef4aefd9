//! One module per area.

mod attach;
mod cli;
mod core_loop;
mod crash;
mod durability;
mod fake_llm;
mod foundation;
mod harness;
mod permissions;
mod shells;
mod util;
