//! The harness against ordinary programs (`sh`, `bash`, `stty`, `cat`).

use super::*;
use std::os::unix::process::ExitStatusExt as _;

const T: Duration = Duration::from_secs(20);

fn sh(script: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(script);
    cmd
}

/// An interactive bash with a known prompt and nothing from the user's
/// files.
fn bash() -> Command {
    let mut cmd = Command::new("bash");
    cmd.args(["--norc", "--noprofile", "-i"])
        .env("PS1", "pty$ ")
        .env("HISTFILE", "/dev/null");
    cmd
}

#[test]
fn the_program_sees_a_terminal_of_the_given_size() {
    let term = PtySession::spawn(
        sh("stty size; [ -t 0 ] && [ -t 1 ] && [ -t 2 ] && echo all-a-tty; echo TERM=$TERM"),
        80,
        24,
    )
    .unwrap();
    term.wait_for("all-a-tty", T).unwrap();
    assert!(term.wait_exit(T).unwrap().success());
    let screen = term.screen();
    assert_eq!(
        screen.lines().collect::<Vec<_>>(),
        ["24 80", "all-a-tty", "TERM=xterm-256color"],
        "{}",
        term.dump()
    );

    let big = PtySession::spawn(sh("stty size"), 160, 45).unwrap();
    big.wait_for("45 160", T).unwrap();
    assert_eq!(big.size(), (160, 45));
}

/// On a loaded machine the reader thread may not have run since the
/// program's last write, and its output before may have paused long
/// before it exited: what it wrote is on the screen all the same once
/// `wait_exit` returns.
#[test]
fn what_was_written_just_before_the_exit_is_on_the_screen() {
    let term = PtySession::spawn(sh("echo ready; read line; echo last words"), 80, 24).unwrap();
    term.wait_for("ready", T).unwrap();
    term.shared.paused.store(true, Ordering::Release);
    {
        let mut state = term.term();
        let long_ago = state.last_output.checked_sub(DRAIN_QUIET * 10);
        state.last_output = long_ago.unwrap_or(state.last_output);
    }
    term.send("go\r").unwrap();
    assert!(term.wait_exit(T).unwrap().success());
    assert!(term.screen().contains("last words"), "{}", term.dump());
}

#[test]
fn escape_sequences_are_interpreted_not_shown() {
    let term = PtySession::spawn(
        sh(r"printf '\033[31mred\033[0m plain\033[5;10Hat-5-10\033[2;1Hsecond\033[1;1Hx'"),
        80,
        24,
    )
    .unwrap();
    term.wait_exit(T).unwrap();
    let rows = term.rows();
    // "x" overwrote the "r" of "red"; no escape byte reached the text.
    assert_eq!(rows[0], "xed plain", "{}", term.dump());
    assert_eq!(rows[1], "second");
    assert_eq!(rows[4], "         at-5-10");
    assert!(!term.contents_with_scrollback().contains('\u{1b}'));
    assert_eq!(term.cursor(), (0, 1));
    term.with_screen(|s| {
        let cell = |col| s.cell(0, col).map(|c| c.fgcolor());
        assert_eq!(cell(1), Some(vt100::Color::Idx(1)), "\"ed\" is red");
        assert_eq!(cell(4), Some(vt100::Color::Default), "\"plain\" is not");
    });
}

#[test]
fn ctrl_c_interrupts_the_foreground_program() {
    // The program alone: SIGINT from the line discipline kills it.
    let sleeper = PtySession::spawn(sh("echo sleeping; exec sleep 10"), 80, 24).unwrap();
    sleeper.wait_for("sleeping", T).unwrap();
    let started = Instant::now();
    sleeper.ctrl_c().unwrap();
    let status = sleeper.wait_exit(T).unwrap();
    assert_eq!(status.signal(), Some(2), "{status}");
    assert!(started.elapsed() < Duration::from_secs(8));

    // Under an interactive shell: the job dies, the shell prompts again.
    let shell = PtySession::spawn(bash(), 80, 24).unwrap();
    shell.wait_for("pty$ ", T).unwrap();
    shell.send("sleep 10 && echo slept-through").unwrap();
    shell.enter().unwrap();
    // Ctrl-C before sleep runs would only cancel the line being typed.
    let deadline = Instant::now() + T;
    while !foreground_child(shell.pid(), "sleep") {
        assert!(
            Instant::now() < deadline,
            "sleep never ran:\n{}",
            shell.dump()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    shell.ctrl_c().unwrap();
    shell
        .wait_until("a second prompt", T, |s| {
            s.contents().matches("pty$ ").count() >= 2
        })
        .unwrap();
    shell.send("echo still-here").unwrap();
    shell.enter().unwrap();
    shell.wait_for("\nstill-here", T).unwrap();
    assert!(!shell.contents_with_scrollback().contains("\nslept-through"));
}

/// Whether a child of `parent` named `name` is its terminal's foreground
/// process group (from `/proc/PID/stat`: `pid (comm) state ppid pgrp
/// session tty_nr tpgid ...`).
fn foreground_child(parent: u32, name: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|entry| {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            return false;
        };
        let Some((head, tail)) = stat.rsplit_once(") ") else {
            return false;
        };
        let fields: Vec<&str> = tail.split_whitespace().collect();
        head.ends_with(&format!("({name}"))
            && fields.get(1) == Some(&parent.to_string().as_str())
            && fields.get(2).is_some()
            && fields.get(2) == fields.get(5)
    })
}

#[test]
fn a_timeout_shows_the_screen() {
    let term = PtySession::spawn(sh("echo what-is-there; exec sleep 10"), 80, 24).unwrap();
    term.wait_for("what-is-there", T).unwrap();
    let err = term
        .wait_for("what-never-comes", Duration::from_millis(200))
        .unwrap_err();
    let message = format!("{err:?}");
    assert!(matches!(err, PtyError::Timeout { .. }), "{message}");
    assert!(message.contains("\"what-never-comes\""), "{message}");
    assert!(message.contains("│what-is-there"), "{message}");
    assert!(message.contains("80x24"), "{message}");
}

#[test]
fn waiting_ends_when_the_terminal_closes() {
    let term = PtySession::spawn(sh("echo bye"), 80, 24).unwrap();
    let started = Instant::now();
    let err = term.wait_for("never", T).unwrap_err();
    assert!(matches!(err, PtyError::Closed { .. }), "{err}");
    assert!(started.elapsed() < T / 2, "{err}");
    assert!(err.to_string().contains("│bye"), "{err}");
}

#[test]
fn scrollback_keeps_what_scrolled_off() {
    let term = PtySession::spawn(
        sh("for i in $(seq 1 100); do printf 'row %03d\\n' $i; done"),
        80,
        24,
    )
    .unwrap();
    term.wait_exit(T).unwrap();
    let screen = term.screen();
    assert!(!screen.contains("row 001"), "{screen}");
    assert!(screen.contains("row 100"), "{screen}");
    let all = term.contents_with_scrollback();
    let expected: Vec<String> = (1..=100).map(|i| format!("row {i:03}")).collect();
    assert_eq!(all.lines().collect::<Vec<_>>(), expected);
    term.wait_for("row 001", T).unwrap();
}

#[test]
fn long_lines_are_one_line_in_the_contents() {
    let long = "0123456789".repeat(20);
    let term = PtySession::spawn(sh(&format!("echo {long}")), 80, 24).unwrap();
    term.wait_for(&long, T).unwrap();
    assert_eq!(term.rows()[0], long[..80]);
    assert_eq!(term.rows()[2], long[160..]);
}

#[test]
fn a_resize_reaches_the_program() {
    let term = PtySession::spawn(
        sh("trap 'echo winch; stty size' WINCH; echo ready; while :; do sleep 0.05; done"),
        80,
        24,
    )
    .unwrap();
    term.wait_for("ready", T).unwrap();
    term.resize(160, 45).unwrap();
    term.wait_for("winch\n45 160", T).unwrap();
    assert_eq!(term.size(), (160, 45));
    assert_eq!(term.rows().len(), 45);

    let shell = PtySession::spawn(bash(), 80, 24).unwrap();
    shell.wait_for("pty$ ", T).unwrap();
    shell.resize(100, 30).unwrap();
    shell.send("stty size").unwrap();
    shell.enter().unwrap();
    shell.wait_for("\n30 100", T).unwrap();
}

#[test]
fn a_paste_arrives_bracketed_and_intact() {
    let term = PtySession::spawn(sh("stty -echo; echo ready; exec cat -v"), 80, 24).unwrap();
    term.wait_for("ready", T).unwrap();
    term.paste("hello, world").unwrap();
    term.enter().unwrap();
    term.wait_for("^[[200~hello, world^[[201~", T).unwrap();
    term.ctrl_d().unwrap();
    assert!(term.wait_exit(T).unwrap().success());
}

#[test]
fn keys_send_what_a_terminal_sends() {
    let term = PtySession::spawn(
        sh("stty raw -echo; echo ready; od -An -c -N 11; stty sane"),
        80,
        24,
    )
    .unwrap();
    term.wait_for("ready", T).unwrap();
    term.up().unwrap();
    term.alt_enter().unwrap();
    term.esc().unwrap();
    term.ctrl_c().unwrap();
    term.ctrl_d().unwrap();
    term.tab().unwrap();
    term.backspace().unwrap();
    term.enter().unwrap();
    // In raw mode ^C is a byte, not a signal.
    let status = term.wait_exit(T).unwrap();
    assert!(status.success(), "{status}\n{}", term.dump());
    let text = term.contents_with_scrollback();
    let words: Vec<&str> = text
        .lines()
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        words,
        [
            "033", "[", "A", "033", "\\r", "033", "003", "004", "\\t", "177", "\\r"
        ],
        "{}",
        term.dump()
    );
}

#[test]
fn the_cursor_position_query_is_answered() {
    // `stty raw` so the answer is read without a newline.
    let term = PtySession::spawn(
        sh(r"stty raw -echo; printf '\033[3;7H\033[6n'; od -An -c -N 6; stty sane"),
        80,
        24,
    )
    .unwrap();
    term.wait_exit(T).unwrap();
    let text = term.contents_with_scrollback();
    let words: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(words, ["033", "[", "3", ";", "7", "R"], "{}", term.dump());
}

#[test]
fn dropping_kills_the_process_group() {
    let term = PtySession::spawn(sh("sleep 1000 & echo bg=$!; exec sleep 1000"), 80, 24).unwrap();
    let text = term
        .wait_for_regex(&regex::Regex::new(r"bg=\d+").unwrap(), T)
        .unwrap();
    let bg: u32 = text.trim_start_matches("bg=").parse().unwrap();
    let proc = format!("/proc/{bg}");
    assert!(std::path::Path::new(&proc).exists());
    drop(term);
    let deadline = Instant::now() + T;
    // Killed, then reaped by init (or a subreaper): gone, or a zombie.
    while std::fs::read_to_string(format!("{proc}/stat")).is_ok_and(|stat| !stat.contains(") Z ")) {
        assert!(
            Instant::now() < deadline,
            "the background sleep {bg} survived"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_dump_frames_every_row() {
    let term = PtySession::spawn(sh("printf 'top'"), 20, 3).unwrap();
    term.wait_exit(T).unwrap();
    let dump = term.dump();
    let lines: Vec<&str> = dump.lines().collect();
    assert_eq!(lines.len(), 5, "{dump}");
    assert!(lines[0].starts_with("┌ 20x3, cursor row 0 col 3"), "{dump}");
    assert_eq!(lines[1], "│top                 │");
    assert_eq!(lines[3], "│                    │");
    assert_eq!(lines[4], format!("└{}┘", "─".repeat(20)));
}

#[test]
fn a_zero_size_is_refused() {
    let err = PtySession::spawn(sh("true"), 0, 24).unwrap_err();
    assert!(matches!(err, PtyError::Size { cols: 0, rows: 24 }), "{err}");
}
