use std::os::unix::fs::PermissionsExt as _;

use super::*;

/// A highlighter running the shell script `body` (with short waits), and the
/// file each start of the script adds a line to.
fn scripted(dir: &tempfile::TempDir, body: &str) -> (Highlighter, PathBuf) {
    let starts = dir.path().join("starts");
    let script = dir.path().join("agent-highlight");
    let text = format!(
        "#!/bin/sh\necho started >> '{}'\n{body}\n",
        starts.display()
    );
    std::fs::write(&script, text).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut highlighter = Highlighter::new(Program::At(script));
    highlighter.first_answer = Duration::from_millis(300);
    highlighter.next_answer = Duration::from_millis(300);
    (highlighter, starts)
}

fn starts(file: &Path) -> usize {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .count()
}

const CODE: &str = "fn main() {}\nlet x = 1;";

#[test]
fn a_missing_program_shows_the_code_plain() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("agent-highlight");
    let mut highlighter = Highlighter::new(Program::At(missing.clone()));
    assert_eq!(highlighter.highlight(CODE, "rust", false), None);
    assert!(matches!(highlighter.state, State::GivenUp));
    let err = probe_highlighter(&missing).unwrap_err();
    assert!(err.contains("cannot start"), "{err}");
}

#[test]
fn a_helper_that_never_answers_is_given_up_within_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let (mut highlighter, started) = scripted(&dir, "exec sleep 100");
    let pid = highlighter.helper().map(|h| h.child.id()).unwrap();
    let begin = Instant::now();
    assert_eq!(highlighter.highlight(CODE, "rust", false), None);
    assert!(
        begin.elapsed() < Duration::from_secs(2),
        "{:?}",
        begin.elapsed()
    );
    assert!(matches!(highlighter.state, State::GivenUp));
    // Killed and reaped: no zombie left.
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    // Not asked again, not started again.
    let again = Instant::now();
    assert_eq!(highlighter.highlight(CODE, "rust", false), None);
    assert!(again.elapsed() < Duration::from_millis(200));
    assert_eq!(starts(&started), 1);
}

#[test]
fn a_helper_that_answers_garbage_is_given_up() {
    let dir = tempfile::tempdir().unwrap();
    let (mut highlighter, started) = scripted(&dir, "while read -r l; do echo garbage; done");
    assert_eq!(highlighter.highlight(CODE, "rust", false), None);
    assert!(matches!(highlighter.state, State::GivenUp));
    assert_eq!(highlighter.highlight(CODE, "rust", false), None);
    assert_eq!(starts(&started), 1);
}

#[test]
fn a_helper_that_dies_or_miscounts_lines_is_given_up() {
    for body in [
        "exit 0",
        r#"read -r l; echo '{"lines": ["fn main() {}"]}'; exec sleep 100"#,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (mut highlighter, _) = scripted(&dir, body);
        assert_eq!(highlighter.highlight(CODE, "rust", false), None, "{body}");
        assert!(matches!(highlighter.state, State::GivenUp), "{body}");
    }
}

#[test]
fn a_language_the_helper_declines_is_plain_and_the_helper_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (mut highlighter, started) =
        scripted(&dir, r#"while read -r l; do echo '{"lines": null}'; done"#);
    assert_eq!(highlighter.highlight(CODE, "nosuchlang", false), None);
    assert_eq!(highlighter.highlight(CODE, "nosuchlang", false), None);
    assert!(matches!(highlighter.state, State::Running(_)));
    assert_eq!(starts(&started), 1);
}

#[test]
fn nothing_is_asked_for_empty_or_too_big_code_or_no_language() {
    let dir = tempfile::tempdir().unwrap();
    let (mut highlighter, started) = scripted(&dir, "exec sleep 100");
    let big = "x".repeat(HIGHLIGHT_MAX_BYTES + 1);
    for (code, lang) in [("", "rust"), (big.as_str(), "rust"), (CODE, "")] {
        assert_eq!(highlighter.highlight(code, lang, false), None);
    }
    assert!(matches!(highlighter.state, State::NotStarted));
    assert_eq!(starts(&started), 0);
}

#[test]
fn an_answer_must_be_the_code_in_colour() {
    let plain = vec!["fn f() {}".to_string(), "\u{fffd}    x".to_string()];
    let good =
        json!({"lines": ["\x1b[38;5;1mfn\x1b[0m f() {}", "\u{fffd}    \x1b[38;2;1;2;3mx\x1b[0m"]});
    assert_eq!(
        checked_answer(&good.to_string(), &plain),
        Ok(Some(vec![
            "\x1b[38;5;1mfn\x1b[0m f() {}".to_string(),
            "\u{fffd}    \x1b[38;2;1;2;3mx\x1b[0m".to_string(),
        ]))
    );
    assert_eq!(checked_answer(r#"{"lines": null}"#, &plain), Ok(None));
    for bad in [
        json!({"lines": null, "error": "not a JSON request"}),
        json!({"lines": ["fn f() {}"]}),
        json!({"lines": ["fn g() {}", "\u{fffd}    x"]}),
        json!({"lines": ["\x1b[2Jfn f() {}", "\u{fffd}    x"]}),
        json!({"lines": ["fn f() {}", "\u{fffd}\t    x"]}),
        json!({"lines": "fn f() {}"}),
    ] {
        assert!(checked_answer(&bad.to_string(), &plain).is_err(), "{bad}");
    }
    assert!(checked_answer("garbage", &plain).is_err());
}

#[test]
fn code_is_sent_as_it_is_shown_plain() {
    // The helper sees the code with tabs expanded and control characters
    // replaced, so its answer can be held against the plain text.
    let dir = tempfile::tempdir().unwrap();
    let requests = dir.path().join("requests");
    let body = format!(
        "while read -r l; do printf '%s\\n' \"$l\" >> '{}'; echo '{{\"lines\": null}}'; done",
        requests.display()
    );
    let (mut highlighter, _) = scripted(&dir, &body);
    assert_eq!(highlighter.highlight("\tx\u{7}\r\ny", "py", true), None);
    let sent: Value = serde_json::from_str(&std::fs::read_to_string(&requests).unwrap()).unwrap();
    assert_eq!(
        sent,
        json!({"lang": "py", "code": "    x\u{fffd}\ny", "truecolor": true})
    );
}
