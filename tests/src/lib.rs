//! Test support for agentd.
//!
//! - [`fake_llm`]: a real HTTP server speaking the Anthropic Messages and
//!   OpenAI chat-completions streaming formats, answering each request from
//!   a queue of [`fake_llm::Script`]s and recording every request, with fault
//!   injection (error statuses, mid-stream errors, dropped connections, held
//!   and slow streams).

pub mod fake_llm;
