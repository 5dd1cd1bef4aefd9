//! Scenario 7, search tools: the daemon's `grep` and `glob` over a large
//! tree (the cargo registry sources by default) against `rg` and `find` /
//! `rg --files` on the same tree and pattern, in the same run.
//!
//! The daemon's tools are called the way a model calls them: the fake
//! answers with a `tool_use`, and the time is from the attached client
//! receiving `ToolCallBegin` to receiving `ToolCallEnd`. The external
//! commands run in the tree with their output read through a pipe (rg
//! treats /dev/null specially). Every case is run once untimed first, so
//! the page cache is warm for both.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agent_proto::v1 as pb;
use serde_json::{Value, json};

use super::stats::{Report, Target};
use super::{Attached, BenchResult, Context as _, Settings, ms};
use crate::fake_llm::{FakeLlm, ReplyScript, Script};

struct Case {
    key: &'static str,
    label: &'static str,
    tool: &'static str,
    input: Value,
    /// The equivalent commands: (name, argv).
    commands: Vec<(&'static str, Vec<&'static str>)>,
}

/// Each grep pattern in both output modes, since files_with_matches can stop
/// reading a file at its first match while content reads it all. The
/// no-match pattern is searched once: without a match the two modes do the
/// same work.
fn cases() -> Vec<Case> {
    vec![
        Case {
            key: "grep_none",
            label: "grep, no match (whole tree searched)",
            tool: "grep",
            input: json!({"pattern": "fn [a-z]+_unused_xyz"}),
            commands: vec![("rg", vec!["rg", "-n", "fn [a-z]+_unused_xyz"])],
        },
        Case {
            key: "grep_some",
            label: "grep `SIGKILL`, content",
            tool: "grep",
            input: json!({"pattern": "SIGKILL"}),
            commands: vec![("rg", vec!["rg", "-n", "SIGKILL"])],
        },
        Case {
            key: "grep_some_files",
            label: "grep `SIGKILL`, files_with_matches",
            tool: "grep",
            input: json!({"pattern": "SIGKILL", "output_mode": "files_with_matches"}),
            commands: vec![("rg", vec!["rg", "-l", "SIGKILL"])],
        },
        Case {
            key: "grep_display",
            label: "grep `impl.*Display for`, content",
            tool: "grep",
            input: json!({"pattern": "impl.*Display for"}),
            commands: vec![("rg", vec!["rg", "-n", "impl.*Display for"])],
        },
        Case {
            key: "grep_files",
            label: "grep `impl.*Display for`, files_with_matches",
            tool: "grep",
            input: json!({"pattern": "impl.*Display for", "output_mode": "files_with_matches"}),
            commands: vec![("rg", vec!["rg", "-l", "impl.*Display for"])],
        },
        // The one pattern with a Unicode class (`\w`) in front of its
        // literal part, so a match is grown backwards from `Builder::new(`.
        Case {
            key: "grep_word",
            label: "grep `\\w+Builder::new\\(`, content",
            tool: "grep",
            input: json!({"pattern": "\\w+Builder::new\\("}),
            commands: vec![("rg", vec!["rg", "-n", "\\w+Builder::new\\("])],
        },
        Case {
            key: "grep_word_files",
            label: "grep `\\w+Builder::new\\(`, files_with_matches",
            tool: "grep",
            input: json!({"pattern": "\\w+Builder::new\\(", "output_mode": "files_with_matches"}),
            commands: vec![("rg", vec!["rg", "-l", "\\w+Builder::new\\("])],
        },
        Case {
            key: "glob_rs",
            label: "glob `**/*.rs`",
            tool: "glob",
            input: json!({"pattern": "**/*.rs"}),
            commands: vec![
                ("rg_files", vec!["rg", "--files", "-g", "*.rs"]),
                ("find", vec!["find", ".", "-type", "f", "-name", "*.rs"]),
            ],
        },
    ]
}

/// The tree searched: `--tree`, else `~/.cargo/registry/src`.
fn tree(settings: &Settings) -> BenchResult<PathBuf> {
    let path = match &settings.search_tree {
        Some(p) => p.clone(),
        None => std::env::var_os("CARGO_HOME")
            .map_or_else(
                || {
                    let home = std::env::var_os("HOME").unwrap_or_default();
                    PathBuf::from(home).join(".cargo")
                },
                PathBuf::from,
            )
            .join("registry/src"),
    };
    path.canonicalize()
        .map_err(|e| format!("search tree {}: {e} (pass --tree DIR)", path.display()))
}

/// Runs the scenario.
pub async fn run(settings: &Settings) -> BenchResult<Report> {
    let mut report = Report::new("search");
    let root = tree(settings)?;
    let have_rg = Command::new("rg").arg("--version").output().is_ok();
    if !have_rg {
        return Err("`rg` is not installed: `cargo install ripgrep` (tests/bench.sh does)".into());
    }
    let files = count_files(&root);
    report.note(format!(
        "tree: {} ({files} files, rg {})",
        root.display(),
        rg_version()
    ));
    let fake = FakeLlm::start().await;
    let daemon = super::start_daemon(&fake).await;
    let mut client = super::client(&daemon.socket).await?;
    for case in cases() {
        let mut summary = String::new();
        // The first round of each is the untimed warm-up.
        for run in 0..=settings.runs {
            // A fresh conversation each time: the same call three times in
            // a row would be a doom loop, which asks for a permission.
            let id = super::create(&mut client, &root, "", &[]).await?;
            let mut watcher = Attached::open(&daemon.socket, &id, "bench").await?;
            let (took, s) = ours(&fake, &mut client, &mut watcher, &id, &case, run).await?;
            summary = s;
            let mut theirs = Vec::new();
            for (name, argv) in &case.commands {
                theirs.push((*name, external(&root, argv).await?));
            }
            if run == 0 {
                continue;
            }
            report.sample(
                &format!("{}_ours_ms", case.key),
                &format!("{}: daemon tool", case.label),
                "ms",
                ms(took),
            );
            for (name, (t, lines)) in &theirs {
                report.sample(
                    &format!("{}_{name}_ms", case.key),
                    &format!("{}: {}", case.label, argv_text(&case, name)),
                    "ms",
                    ms(*t),
                );
                report.sample(
                    &format!("{}_{name}_lines", case.key),
                    &format!("{}: lines {name} printed", case.label),
                    "lines",
                    *lines as f64,
                );
                report.sample(
                    &format!("{}_ratio_{name}", case.key),
                    &format!("{}: daemon / {name}", case.label),
                    "×",
                    took.as_secs_f64() / t.as_secs_f64(),
                );
            }
        }
        report.note(format!(
            "{}: the daemon's tool said \"{summary}\"",
            case.key
        ));
        if case.tool == "grep" {
            report.set_target(&format!("{}_ratio_rg", case.key), Target::AtMost(1.5));
        }
    }
    report.note(
        "the daemon's grep stops at its output budget (~30 KB) and glob lists 200 paths: with \
         many matches they can quit early where rg prints everything; the no-match case compares \
         full walks",
    );
    Ok(report)
}

fn argv_text(case: &Case, name: &str) -> String {
    case.commands
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, argv)| format!("`{}`", argv.join(" ")))
        .unwrap_or_default()
}

/// Runs the tool through the daemon: (ToolCallBegin → ToolCallEnd, summary).
async fn ours(
    fake: &FakeLlm,
    client: &mut agent_proto::v1::agent_service_client::AgentServiceClient<
        tonic::transport::Channel,
    >,
    watcher: &mut Attached,
    id: &str,
    case: &Case,
    n: usize,
) -> BenchResult<(Duration, String)> {
    fake.push(
        ReplyScript::new()
            .tool_use(&format!("toolu_{n}"), case.tool, case.input.clone())
            .into(),
    );
    fake.push(Script::text("Found it."));
    super::send(client, id, &format!("search {n}")).await?;
    let mut begin = None;
    let mut end = None;
    let mut summary = String::new();
    watcher
        .until_at_rest(Duration::from_secs(300), |m, at| match &m.event {
            Some(pb::attach_response::Event::ToolCallBegin(_)) => begin = Some(at),
            Some(pb::attach_response::Event::ToolCallEnd(e)) => {
                end = Some(at);
                summary.clone_from(&e.summary);
            }
            _ => {}
        })
        .await?;
    let begin = begin.ctx("no ToolCallBegin")?;
    let end = end.ctx("no ToolCallEnd")?;
    Ok((end.duration_since(begin), summary))
}

/// Runs a command in `dir`, reading its output: (wall time, lines).
async fn external(dir: &Path, argv: &[&str]) -> BenchResult<(Duration, usize)> {
    let dir = dir.to_path_buf();
    let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let (program, args) = argv.split_first().ctx("empty command")?;
        let started = Instant::now();
        let mut child = Command::new(program)
            .args(args)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ctx("starting a search command")?;
        let mut out = Vec::new();
        if let Some(mut stdout) = child.stdout.take() {
            stdout
                .read_to_end(&mut out)
                .ctx("reading a search command")?;
        }
        child.wait().ctx("waiting for a search command")?;
        Ok((
            started.elapsed(),
            out.iter().filter(|b| **b == b'\n').count(),
        ))
    })
    .await
    .map_err(|e| e.to_string())?
}

fn count_files(root: &Path) -> usize {
    Command::new("rg")
        .args(["--files", "--no-ignore", "--hidden"])
        .current_dir(root)
        .output()
        .map_or(0, |o| o.stdout.iter().filter(|b| **b == b'\n').count())
}

fn rg_version() -> String {
    Command::new("rg")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_string))
        .unwrap_or_default()
}
