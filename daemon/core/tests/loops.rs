//! The doom-loop checks (`agentd_core::loops`) on the shapes of real loops
//! agents fall into, and on work that must not be taken for one.
//!
//! Each case is a session written as the model's rounds — one call per
//! line: `tool input => result` (`!` before the result marks an error) —
//! and the call that comes next.

use agentd_core::loops::{Loop, LoopLimits, command_key, detect, recent_calls};
use agentd_core::message::{ContentBlock, Message, Role, ToolCall};
use proptest::prelude::*;
use serde_json::{Value, json};

/// One call of a written session.
struct Call {
    tool: &'static str,
    input: Value,
    failed: bool,
    output: String,
}

fn call(tool: &'static str, input: Value, output: &str) -> Call {
    Call {
        tool,
        input,
        failed: false,
        output: output.to_string(),
    }
}

fn failing(tool: &'static str, input: Value, output: &str) -> Call {
    Call {
        failed: true,
        ..call(tool, input, output)
    }
}

fn bash(command: &str, output: &str) -> Call {
    call("bash", json!({ "command": command }), output)
}

fn bash_fails(command: &str, output: &str) -> Call {
    failing("bash", json!({ "command": command }), output)
}

fn edit(path: &str, old: &str, new: &str) -> Call {
    call(
        "edit",
        json!({ "path": path, "old_string": old, "new_string": new }),
        &format!("edited {path}"),
    )
}

fn read(path: &str, content: &str) -> Call {
    call("read", json!({ "path": path }), content)
}

/// The transcript of `rounds` (each the calls of one reply, with their
/// results in the next message).
fn transcript(rounds: &[Vec<Call>]) -> Vec<Message> {
    let mut messages = vec![Message::user(vec![ContentBlock::text("fix the build")], 0)];
    for (r, calls) in rounds.iter().enumerate() {
        let id = |i: usize| format!("r{r}c{i}");
        let mut reply = Message::user(Vec::new(), 0);
        reply.role = Role::Assistant;
        reply.content = calls
            .iter()
            .enumerate()
            .map(|(i, c)| ContentBlock::ToolUse {
                id: id(i),
                name: c.tool.to_string(),
                input: c.input.clone(),
            })
            .collect();
        messages.push(reply);
        messages.push(Message::user(
            calls
                .iter()
                .enumerate()
                .map(|(i, c)| ContentBlock::tool_result(id(i), c.output.clone(), c.failed))
                .collect(),
            0,
        ));
    }
    messages
}

/// What the checks say of `next` after `rounds`, one call a round.
fn after(rounds: Vec<Call>, next: Call) -> Option<Loop> {
    let rounds: Vec<Vec<Call>> = rounds.into_iter().map(|c| vec![c]).collect();
    judge(&rounds, &next)
}

fn judge(rounds: &[Vec<Call>], next: &Call) -> Option<Loop> {
    let history = recent_calls(&transcript(rounds), &[], 24);
    let next = ToolCall {
        id: "next".to_string(),
        name: next.tool.to_string(),
        input: next.input.clone(),
    };
    detect(&history, &next, &LoopLimits::default())
}

// ---------------------------------------------------------------------------
// Loops that are found.
// ---------------------------------------------------------------------------

#[test]
fn the_same_call_three_times_in_a_row() {
    let found = after(
        vec![read("a.rs", "x"), read("a.rs", "x")],
        read("a.rs", "x"),
    );
    assert_eq!(found, Some(Loop::Identical { times: 3 }));
    assert_eq!(
        found.map(|l| l.reason("read")).as_deref(),
        Some("doom loop: read was called with identical input 3 times in a row")
    );
}

#[test]
fn an_edit_undone_and_redone_between_the_same_failing_tests() {
    // Recorded shape: the model flips a line, the test fails; flips it
    // back, the test fails the other way; and starts over.
    let session = vec![
        edit("src/lib.rs", "a + b", "a - b"),
        bash_fails("cargo test", "test sum ... FAILED: left 1 right 3"),
        edit("src/lib.rs", "a - b", "a + b"),
        bash_fails("cargo test", "test diff ... FAILED: left 3 right 1"),
        edit("src/lib.rs", "a + b", "a - b"),
        bash_fails("cargo test", "test sum ... FAILED: left 1 right 3"),
        edit("src/lib.rs", "a - b", "a + b"),
        bash_fails("cargo test", "test diff ... FAILED: left 3 right 1"),
    ];
    let found = after(session, edit("src/lib.rs", "a + b", "a - b"));
    assert_eq!(
        found,
        Some(Loop::Cycle {
            calls: vec!["edit".into(), "bash".into(), "edit".into(), "bash".into()],
            cycles: 2
        })
    );
}

#[test]
fn two_calls_alternating_with_the_same_results() {
    let session = vec![
        bash_fails("make", "error: x undefined"),
        read("Makefile", "all: x"),
        bash_fails("make", "error: x undefined"),
        read("Makefile", "all: x"),
    ];
    let found = after(session, bash_fails("make", ""));
    assert!(
        matches!(&found, Some(Loop::Cycle { calls, cycles: 2 }) if calls == &["bash", "read"]),
        "{found:?}"
    );
    assert_eq!(
        found.map(|l| l.reason("bash")).as_deref(),
        Some(
            "doom loop: the same 2 calls (bash → read) came 2 times in a row with the same results"
        )
    );
}

#[test]
fn the_same_failing_command_with_cosmetic_changes() {
    // Recorded shape: the output is piped, filtered and cd'ed around, and
    // the test fails the same way each time.
    let session = vec![
        bash_fails("cargo test --lib -q", "error[E0425]: cannot find value `x`"),
        bash_fails(
            "cargo test --lib -q 2>&1 | tail -40",
            "error[E0425]: cannot find value `x`\nerror: could not compile",
        ),
    ];
    let found = after(
        session,
        bash("cd . && cargo  test -q --lib | head -n 80", ""),
    );
    assert_eq!(
        found,
        Some(Loop::Cosmetic {
            command: "cargo test --lib -q".into(),
            times: 3
        })
    );
}

#[test]
fn rounds_that_bring_nothing_new_before_a_repeated_call() {
    // Recorded shape: the model re-reads the same files and re-runs the
    // same failing check, never changing anything.
    let mut session = vec![read("src/main.rs", "fn main() {}")];
    for _ in 0..4 {
        session.push(read("src/lib.rs", "pub fn f() {}"));
        session.push(bash_fails("cargo check", "error: f is unused"));
        session.push(read("Cargo.toml", "[package]"));
    }
    // The same three again would be a cycle; a reread of main.rs is not.
    let found = after(session, read("src/main.rs", "fn main() {}"));
    assert_eq!(found, Some(Loop::NoProgress { rounds: 8 }));
}

#[test]
fn a_refused_call_repeated_with_new_wording_has_no_progress_either() {
    let mut session = vec![bash("ls", "a b")];
    for i in 0..9 {
        session.push(bash_fails(&format!("rm -rf /tmp/x{i}"), "denied by a rule"));
    }
    assert_eq!(
        after(session, bash("ls", "")),
        Some(Loop::NoProgress { rounds: 8 })
    );
}

// ---------------------------------------------------------------------------
// Work that is not a loop.
// ---------------------------------------------------------------------------

#[test]
fn a_long_test_fix_cycle_that_makes_progress() {
    // Recorded shape: each edit fixes one more thing; the test command is
    // the same every time but its output changes.
    let mut session = Vec::new();
    for i in 0..10 {
        session.push(edit("src/lib.rs", &format!("bug{i}"), &format!("fix{i}")));
        session.push(bash_fails(
            "cargo test",
            &format!("{} passed; {} failed", i, 10 - i),
        ));
    }
    assert_eq!(after(session, bash("cargo test", "")), None);
}

#[test]
fn the_same_edit_cycle_with_new_results_is_not_a_cycle() {
    let session = vec![
        bash("cargo build", "compiled 1"),
        read("log.txt", "first"),
        bash("cargo build", "compiled 2"),
        read("log.txt", "second"),
    ];
    assert_eq!(after(session, bash("cargo build", "")), None);
}

#[test]
fn a_failing_command_changed_for_real_is_not_cosmetic() {
    let session = vec![
        bash_fails("cargo test", "1 failed"),
        bash_fails("cargo test --features x", "1 failed"),
    ];
    assert_eq!(after(session, bash("cargo test --features y", "")), None);
}

#[test]
fn a_command_that_worked_is_not_part_of_a_cosmetic_loop() {
    let session = vec![
        bash("cargo test", "ok"),
        bash("cargo test 2>&1 | tail", "ok"),
    ];
    assert_eq!(after(session, bash("cargo test | head", "")), None);
}

#[test]
fn reading_many_files_is_progress() {
    let mut session = Vec::new();
    for i in 0..12 {
        session.push(read(&format!("src/m{i}.rs"), &format!("mod m{i};")));
    }
    assert_eq!(after(session, read("src/m0.rs", "")), None);
}

#[test]
fn parallel_reads_in_one_reply_are_not_a_loop() {
    let round: Vec<Call> = (0..6)
        .map(|i| read(&format!("f{i}"), &format!("{i}")))
        .collect();
    assert_eq!(judge(&[round], &read("f0", "")), None);
}

#[test]
fn each_check_can_be_turned_off() {
    let session = vec![
        bash_fails("make", "e"),
        read("Makefile", "m"),
        bash_fails("make", "e"),
        read("Makefile", "m"),
    ];
    let rounds: Vec<Vec<Call>> = session.into_iter().map(|c| vec![c]).collect();
    let history = recent_calls(&transcript(&rounds), &[], 24);
    let next = ToolCall {
        id: "n".into(),
        name: "bash".into(),
        input: json!({"command": "make"}),
    };
    let off = LoopLimits {
        cycles: 0,
        ..LoopLimits::default()
    };
    assert!(detect(&history, &next, &LoopLimits::default()).is_some());
    assert_eq!(detect(&history, &next, &off), None);
}

// ---------------------------------------------------------------------------
// Reading the history and the commands.
// ---------------------------------------------------------------------------

#[test]
fn recent_calls_pairs_each_call_with_its_result_and_skips_the_current_ones() {
    let rounds = vec![
        vec![bash_fails("make", "boom"), read("a", "x")],
        vec![read("b", "y")],
    ];
    let messages = transcript(&rounds);
    let history = recent_calls(&messages, &["r1c0"], 24);
    assert_eq!(history.len(), 2);
    assert_eq!(history[0].name, "bash");
    assert!(history[0].outcome.is_some_and(|o| o.failed));
    assert!(history[1].outcome.is_some_and(|o| !o.failed));
    assert!(history[0].round < u64::MAX && history[0].round == history[1].round);
    assert_eq!(recent_calls(&messages, &[], 1).len(), 1);
}

#[test]
fn command_keys_ignore_cosmetics_and_keep_meaning() {
    let same = [
        ("cargo test -q --lib", "cargo   test --lib -q"),
        ("cargo test", "cargo test 2>&1 | tail -n 50"),
        ("cargo test", "cd /repo && cargo test | grep FAIL"),
        ("pytest 'tests/a.py'", "pytest tests/a.py"),
    ];
    for (a, b) in same {
        assert_eq!(command_key(a), command_key(b), "{a} vs {b}");
    }
    let different = [
        ("cargo test", "cargo build"),
        ("mv a b", "mv b a"),
        ("pytest tests/a.py", "pytest tests/b.py"),
    ];
    for (a, b) in different {
        assert_ne!(command_key(a), command_key(b), "{a} vs {b}");
    }
    // A line that cannot be read is still compared, spacing aside.
    assert_eq!(
        command_key("echo 'unclosed"),
        command_key("echo  'unclosed")
    );
}

proptest! {
    /// Calls that are all different never make a loop, whatever the
    /// results.
    #[test]
    fn distinct_calls_never_loop(failed in proptest::collection::vec(any::<bool>(), 1..20)) {
        let session: Vec<Call> = failed
            .iter()
            .enumerate()
            .map(|(i, f)| Call {
                failed: *f,
                ..call("read", json!({ "path": format!("f{i}") }), &format!("out{i}"))
            })
            .collect();
        prop_assert_eq!(after(session, read("new", "")), None);
    }

    /// Whatever came before, a call never repeated in the window is never
    /// judged a loop but by the cosmetic check (which reads commands).
    #[test]
    fn a_new_call_is_only_ever_a_cosmetic_repeat(
        picks in proptest::collection::vec((0usize..4, any::<bool>()), 0..30)
    ) {
        let session: Vec<Call> = picks
            .iter()
            .map(|(k, f)| Call {
                failed: *f,
                ..bash(&format!("cmd{k}"), &format!("o{k}"))
            })
            .collect();
        let found = after(session, bash("something never run", ""));
        prop_assert!(found.is_none(), "{:?}", found);
    }

    /// The identical check counts exactly the calls in a row.
    #[test]
    fn identical_counts_the_run(before in 0usize..6, run in 0usize..6) {
        let mut session: Vec<Call> = (0..before).map(|i| read(&format!("o{i}"), "")).collect();
        session.extend((0..run).map(|_| read("same", "x")));
        let found = after(session, read("same", "x"));
        let expected = (run + 1 >= 3).then_some(Loop::Identical { times: run + 1 });
        prop_assert_eq!(found, expected);
    }
}

#[test]
fn a_refused_loop_tells_the_model_with_the_seed_warning() {
    let found = Loop::Identical { times: 3 };
    let call = ToolCall {
        id: "t".into(),
        name: "read".into(),
        input: json!({"filePath": "/tmp/test.txt"}),
    };
    assert_eq!(
        agentd_core::texts::doom_loop_warning(&found.reason("read"), &found, &call),
        "doom loop: read was called with identical input 3 times in a row\n\
         [WARNING: Doom loop detected!]\n\
         [The LLM has called 'read' with identical arguments 3 times in a row]\n\
         [Arguments: {\"filePath\":\"/tmp/test.txt\"}]\n\
         [This may indicate the LLM is stuck.]"
    );
    let cycle = Loop::NoProgress { rounds: 8 };
    let text = agentd_core::texts::doom_loop_warning(&cycle.reason("read"), &cycle, &call);
    assert!(
        text.contains("\n[8 rounds in a row brought no new output"),
        "{text}"
    );
}
