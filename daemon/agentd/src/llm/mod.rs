//! Placeholder: the LLM providers land here.
