//! Model providers: one streaming request in, stream events and a complete
//! reply out.
//!
//! `sse` decodes the Server-Sent Events both providers stream.

pub mod sse;
