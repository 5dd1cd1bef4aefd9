//! One module per area, and `util`, the one module of helpers they share.

mod caching;
mod cli;
mod cli_fixes;
mod core_loop;
mod crash;
mod durability;
mod fake_llm;
mod foundation;
mod fuzz;
mod hardening;
mod harness;
mod hooks;
mod idempotency;
mod limits;
mod live_output;
mod mcp;
mod ops;
mod permissions;
mod queue;
mod shells;
mod stock_clients;
mod streams;
mod terminal;
mod usage;
mod util;
mod workspace;
