//! `agent-highlight`: syntax highlighting of the fenced code in the model's
//! replies, for the `agent` client, which runs it as a co-process.
//!
//! Why a separate program: syntect (its syntaxes, themes and regex engine)
//! is most of what a highlighting client weighs, and `agent ls` and every
//! other command that never shows a reply would carry it and map it at
//! every start. On its own, the client is a quarter smaller (BENCHMARKS.md,
//! 2026-11-29 noon: 8.98 MB with syntect, 6.75 MB without) and starts with
//! fewer page faults; the syntax set is loaded only in this process, once,
//! by the first reply that has code in it. Without this program installed,
//! code is shown plain.
//!
//! The protocol, one JSON object a line each way. A request on stdin:
//! `{"lang": "rust", "code": "fn main() {}", "truecolor": false}`; its answer
//! on stdout, flushed at once: `{"lines": ["<line with ANSI colours>", …]}`
//! (one line per line of the code), or `{"lines": null}` when the language is
//! unknown or empty or the code too big. A line that is not such a request
//! gets `{"lines": null, "error": "…"}`, and the next one is read as usual.
//! The program exits 0 at the end of stdin.
//!
//! The answer's lines hold the code's text unchanged, with only colours
//! (SGR sequences) added: the client makes the code safe for a terminal
//! before it asks, and checks that the answer is its code in colour.

mod highlight;

use std::io::{self, BufRead, Write};
use std::process::ExitCode;

use serde_json::{Value, json};

/// The program: answers requests on stdin until it ends.
pub fn main() -> ExitCode {
    highlight::load();
    match serve(io::stdin().lock(), io::stdout().lock()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agent-highlight: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Reads requests from `input` and writes one answer each to `output` until
/// `input` ends. Fails only when reading or writing does.
fn serve(mut input: impl BufRead, mut output: impl Write) -> io::Result<()> {
    let mut line = Vec::new();
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            return Ok(());
        }
        let request = line.strip_suffix(b"\n").unwrap_or(&line);
        let mut text = answer(request).to_string();
        text.push('\n');
        output.write_all(text.as_bytes())?;
        output.flush()?;
    }
}

/// The answer to one request line.
fn answer(request: &[u8]) -> Value {
    match parse(request) {
        Ok((lang, code, truecolor)) => {
            json!({"lines": highlight::highlight(&code, &lang, truecolor)})
        }
        Err(error) => json!({"lines": null, "error": error}),
    }
}

/// A request's language, code and palette.
fn parse(request: &[u8]) -> Result<(String, String, bool), String> {
    let value: Value =
        serde_json::from_slice(request).map_err(|e| format!("not a JSON request: {e}"))?;
    let text = |key: &str| match value.get(key) {
        Some(Value::String(s)) => Ok(s.clone()),
        _ => Err(format!("the request has no string \"{key}\"")),
    };
    let truecolor = match value.get("truecolor") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err("\"truecolor\" is not a boolean".to_string()),
    };
    Ok((text("lang")?, text("code")?, truecolor))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(input: &str) -> Vec<Value> {
        let mut out = Vec::new();
        serve(input.as_bytes(), &mut out).unwrap_or_else(|e| panic!("{e}"));
        String::from_utf8_lossy(&out)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
            .collect()
    }

    #[test]
    fn each_request_gets_one_answer_in_order() {
        let answers = served(concat!(
            r#"{"lang": "rust", "code": "fn main() {}\nlet x = 1;", "truecolor": true}"#,
            "\n",
            r#"{"lang": "nosuchlang", "code": "x = 1"}"#,
            "\n",
            r#"{"lang": "", "code": "x"}"#,
        ));
        assert_eq!(answers.len(), 3, "{answers:?}");
        let lines = answers[0]["lines"].as_array().cloned().unwrap_or_default();
        assert_eq!(lines.len(), 2, "{answers:?}");
        assert!(lines[0].as_str().unwrap_or_default().contains("\x1b[38;2;"));
        assert_eq!(answers[1], json!({"lines": null}));
        assert_eq!(answers[2], json!({"lines": null}));
    }

    #[test]
    fn a_bad_request_gets_an_error_and_the_next_is_answered() {
        let answers = served(concat!(
            "not json\n",
            r#"{"code": "x"}"#,
            "\n",
            r#"{"lang": "rust", "code": "x", "truecolor": "yes"}"#,
            "\n\u{0}\u{ff}\n",
            r#"{"lang": "rust", "code": "fn f() {}"}"#,
            "\n",
        ));
        assert_eq!(answers.len(), 5, "{answers:?}");
        for bad in &answers[..4] {
            assert_eq!(bad["lines"], Value::Null, "{bad}");
            assert!(
                bad["error"].as_str().is_some_and(|e| !e.is_empty()),
                "{bad}"
            );
        }
        assert!(answers[4]["lines"].is_array(), "{answers:?}");
    }
}
