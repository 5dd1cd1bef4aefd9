//! The daemon's keys out of tool results. A file tool cannot read agentd's
//! own files (`own.rs`), but an allowed command can print anything, an MCP
//! server can answer anything: so every tool result has the bytes of every
//! key the daemon holds replaced with `[redacted: NAME]` before it is
//! stored, sent to the model or shown to a client.
//!
//! The keys are those of the provider's sources (config file, credentials
//! file, environment; read again for every call, as `agent login` may
//! change them) and the daemon's environment variables that
//! `process::is_secret_var` names and whose name says they hold a
//! credential (`…KEY…`, `…TOKEN…`, `…SECRET…`, `…PASSWORD…`): not, say,
//! `ANTHROPIC_BASE_URL`, which is no secret and would be replaced wherever
//! a command printed the URL. A value shorter than [`MIN_SECRET_BYTES`] is
//! not redacted: it would replace ordinary words and numbers all over the
//! results, and a credential that short protects nothing anyway.

use std::ffi::OsStr;

use super::{OutputChunk, ToolOutput};

/// The shortest value that is redacted.
pub(super) const MIN_SECRET_BYTES: usize = 8;

/// The shortest piece of a key that a live chunk's edge is checked for
/// (see [`Redactor::chunk`]).
const MIN_EDGE_BYTES: usize = 4;

/// The values to replace, each with what replaces it.
#[derive(Debug, Default, Clone)]
pub(crate) struct Redactor {
    /// (value, replacement), longest value first: a key that contains
    /// another is replaced whole.
    secrets: Vec<(String, String)>,
}

impl Redactor {
    /// Redacts `secrets`: (name, value) pairs.
    pub(crate) fn new(secrets: impl IntoIterator<Item = (String, String)>) -> Redactor {
        let mut secrets: Vec<(String, String)> = secrets
            .into_iter()
            .filter(|(_, value)| value.len() >= MIN_SECRET_BYTES)
            .map(|(name, value)| (value, format!("[redacted: {name}]")))
            .collect();
        secrets.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        secrets.dedup_by(|a, b| a.0 == b.0);
        Redactor { secrets }
    }

    /// The daemon's keys now: `credentials`' and the credential variables
    /// of its environment.
    pub(crate) fn of_daemon(credentials: Option<&crate::llm::credentials::Sources>) -> Redactor {
        let from_sources = credentials
            .map(|c| c.keys())
            .unwrap_or_default()
            .into_iter()
            .map(|(name, key)| (name.to_string(), key));
        Redactor::new(env_secrets().iter().cloned().chain(from_sources))
    }

    /// Replaces every key in `text`.
    pub(crate) fn text(&self, text: &mut String) {
        for (value, replacement) in &self.secrets {
            if text.contains(value.as_str()) {
                *text = text.replace(value.as_str(), replacement);
            }
        }
    }

    /// Replaces every key in every text of `output`.
    pub(crate) fn output(&self, output: &mut ToolOutput) {
        if self.secrets.is_empty() {
            return;
        }
        self.text(&mut output.content);
        self.text(&mut output.summary);
        if let Some(diff) = &mut output.diff {
            self.text(diff);
        }
        if let Some(preview) = &mut output.preview {
            for line in preview.head.iter_mut().chain(preview.tail.iter_mut()) {
                self.text(line);
            }
        }
    }

    /// Replaces every key in a live chunk of output, and also a piece of
    /// one at either edge (at least [`MIN_EDGE_BYTES`]): a key the
    /// coalescer cut between two chunks would otherwise go out in halves.
    /// A chunk that merely ends with the start of a key (`sk-a…`) loses
    /// that piece in the live view; the result, which is what is stored,
    /// is redacted whole by [`Redactor::output`].
    pub(crate) fn chunk(&self, chunk: &mut OutputChunk) {
        self.text(&mut chunk.text);
        for (value, replacement) in &self.secrets {
            let text = &chunk.text;
            let tail = (MIN_EDGE_BYTES..value.len())
                .rev()
                .find(|&n| value.is_char_boundary(n) && text.ends_with(&value[..n]));
            if let Some(n) = tail {
                let at = chunk.text.len() - n;
                chunk.text.replace_range(at.., replacement);
            }
            let text = &chunk.text;
            let head = (MIN_EDGE_BYTES..value.len()).rev().find(|&n| {
                value.is_char_boundary(value.len() - n)
                    && text.starts_with(&value[value.len() - n..])
            });
            if let Some(n) = head {
                chunk.text.replace_range(..n, replacement);
            }
        }
    }
}

/// The credential variables of the daemon's environment (name, value),
/// read once: the environment does not change while the daemon runs.
fn env_secrets() -> &'static [(String, String)] {
    static SECRETS: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();
    SECRETS.get_or_init(|| {
        std::env::vars()
            .filter(|(name, _)| holds_credential(name))
            .collect()
    })
}

/// Whether the variable `name` holds a credential worth redacting.
fn holds_credential(name: &str) -> bool {
    crate::process::is_secret_var(OsStr::new(name))
        && ["KEY", "TOKEN", "SECRET", "PASSWORD"]
            .iter()
            .any(|word| name.contains(word))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redactor() -> Redactor {
        Redactor::new([
            (
                "ANTHROPIC_API_KEY".to_string(),
                "sk-ant-0123456789".to_string(),
            ),
            ("SHORT".to_string(), "abc".to_string()),
        ])
    }

    #[test]
    fn keys_are_replaced_in_every_text_of_a_result_and_short_ones_left() {
        let mut out = ToolOutput::ok("key=sk-ant-0123456789 abc\n", "sk-ant-0123456789");
        out.diff = Some("+sk-ant-0123456789".to_string());
        out.preview = Some(super::super::OutputPreview {
            head: vec!["sk-ant-0123456789".to_string()],
            tail: vec![],
            lines: 1,
        });
        redactor().output(&mut out);
        assert_eq!(out.content, "key=[redacted: ANTHROPIC_API_KEY] abc\n");
        assert_eq!(out.summary, "[redacted: ANTHROPIC_API_KEY]");
        assert_eq!(out.diff.as_deref(), Some("+[redacted: ANTHROPIC_API_KEY]"));
        assert_eq!(out.preview.unwrap().head, ["[redacted: ANTHROPIC_API_KEY]"]);
    }

    #[test]
    fn a_key_cut_between_two_live_chunks_goes_out_in_neither() {
        let r = redactor();
        let mut first = OutputChunk {
            text: "key=sk-ant-01".to_string(),
            skipped_bytes: 0,
        };
        let mut second = OutputChunk {
            text: "23456789 done".to_string(),
            skipped_bytes: 0,
        };
        r.chunk(&mut first);
        r.chunk(&mut second);
        assert_eq!(first.text, "key=[redacted: ANTHROPIC_API_KEY]");
        assert_eq!(second.text, "[redacted: ANTHROPIC_API_KEY] done");
        let mut plain = OutputChunk {
            text: "sk- nothing".to_string(),
            skipped_bytes: 0,
        };
        r.chunk(&mut plain);
        assert_eq!(plain.text, "sk- nothing");
    }

    #[test]
    fn only_credential_variables_count() {
        assert!(holds_credential("ANTHROPIC_API_KEY"));
        assert!(holds_credential("ANTHROPIC_AUTH_TOKEN"));
        assert!(holds_credential("AGENTD_TOKEN"));
        assert!(!holds_credential("ANTHROPIC_BASE_URL"));
        assert!(!holds_credential("MY_API_KEY"));
    }
}
