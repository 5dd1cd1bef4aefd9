//! Placeholder: the tools land here.
