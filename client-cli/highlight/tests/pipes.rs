//! `agent-highlight` driven over its pipes, as the `agent` client drives it.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use serde_json::Value;

#[test]
fn answers_each_request_over_pipes_and_exits_at_eof() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent-highlight"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start agent-highlight: {e}"));
    let mut stdin = child.stdin.take().unwrap_or_else(|| panic!("no stdin"));
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let mut answers = BufReader::new(stdout).lines();
    let mut ask = |request: &str| -> Value {
        writeln!(stdin, "{request}").unwrap_or_else(|e| panic!("write: {e}"));
        let line = answers
            .next()
            .unwrap_or_else(|| panic!("no answer to {request}"))
            .unwrap_or_else(|e| panic!("read: {e}"));
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
    };

    let rust = ask(r#"{"lang": "rust", "code": "fn main() {}\n", "truecolor": false}"#);
    let lines = rust["lines"].as_array().cloned().unwrap_or_default();
    assert_eq!(lines.len(), 2, "{rust}");
    assert!(
        lines[0].as_str().unwrap_or_default().contains("\x1b[38;5;"),
        "{rust}"
    );
    assert_eq!(lines[1], "", "{rust}");

    let unknown = ask(r#"{"lang": "nosuchlang", "code": "x = 1", "truecolor": false}"#);
    assert_eq!(unknown, serde_json::json!({"lines": null}));

    let bad = ask("{not json");
    assert_eq!(bad["lines"], Value::Null, "{bad}");
    assert!(bad["error"].is_string(), "{bad}");
    let after = ask(r#"{"lang": "py", "code": "x = 1", "truecolor": true}"#);
    assert!(
        after["lines"][0]
            .as_str()
            .unwrap_or_default()
            .contains("\x1b[38;2;"),
        "{after}"
    );

    drop(stdin);
    let status = child.wait().unwrap_or_else(|e| panic!("wait: {e}"));
    assert!(status.success(), "{status}");
}
