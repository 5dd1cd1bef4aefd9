use super::*;
use agentd_core::hooks::HookVerdict;
use serde_json::json;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

fn lists(toml_text: &str) -> HookLists {
    toml::from_str::<ProjectFile>(toml_text).unwrap().hooks
}

fn one(stage: Stage, command: &str, timeout_ms: u64) -> Hook {
    Hook {
        stage,
        matcher: Matcher::All,
        command: command.to_string(),
        timeout: Duration::from_millis(timeout_ms),
    }
}

fn env(dir: &Path) -> Env {
    Env {
        cwd: dir.to_path_buf(),
        conversation_id: "c1".to_string(),
        grace: Duration::from_millis(200),
        cancel: CancellationToken::new(),
        launch: Default::default(),
        sandboxes: std::sync::Arc::new(crate::process::sandbox::Sandboxes::off()),
        writable: Vec::new(),
    }
}

fn bash_call(command: &str) -> ToolCall {
    ToolCall {
        id: "t1".to_string(),
        name: "bash".to_string(),
        input: json!({ "command": command }),
    }
}

#[test]
fn matchers_are_checked_and_name_the_hook() {
    let bad = |text: &str| Hooks::compile(&lists(text), 1000).unwrap_err();
    let e = bad("[[hooks.pre_tool_use]]\nmatcher = \"bash(\"\ncommand = \"x\"\n");
    assert!(e.starts_with("hooks.pre_tool_use[0]: matcher"), "{e}");
    let e = bad("[[hooks.stop]]\nmatcher = \"bash\"\ncommand = \"x\"\n");
    assert!(e.contains("stop hooks take no matcher"), "{e}");
    let e = bad("[[hooks.notification]]\nmatcher = \"phone\"\ncommand = \"x\"\n");
    assert!(e.contains("permission_request"), "{e}");
    let e = bad("[[hooks.post_tool_use]]\ncommand = \"  \"\n");
    assert!(e.contains("command is empty"), "{e}");
    let e = bad("[[hooks.stop]]\ncommand = \"x\"\ntimeout_ms = 0\n");
    assert!(e.contains("timeout_ms"), "{e}");
    let unknown = toml::from_str::<ProjectFile>("[[hooks.pre_tool_sue]]\ncommand = \"x\"\n");
    assert!(unknown.is_err());
    let ok = Hooks::compile(
        &lists(
            "[[hooks.pre_tool_use]]\nmatcher = \"bash(git push:*)\"\ncommand = \"a\"\n\
             [[hooks.notification]]\nmatcher = \"turn_end\"\ncommand = \"b\"\ntimeout_ms = 5\n",
        ),
        1000,
    )
    .unwrap();
    assert_eq!(ok.len(), 2);
    assert_eq!(ok[0].timeout, Duration::from_millis(1000));
    assert_eq!(ok[1].matcher, Matcher::Kind(NotificationKind::TurnEnd));
    assert_eq!(ok[1].timeout, Duration::from_millis(5));
}

#[test]
fn calls_and_notifications_select_their_hooks() {
    let hooks = Hooks {
        hooks: Hooks::compile(
            &lists(
                "[[hooks.pre_tool_use]]\nmatcher = \"bash(git push:*)\"\ncommand = \"push\"\n\
                 [[hooks.pre_tool_use]]\ncommand = \"all\"\n\
                 [[hooks.notification]]\nmatcher = \"permission_request\"\ncommand = \"ask\"\n",
            ),
            1000,
        )
        .unwrap(),
        max_stop_continuations: 3,
        problem: None,
    };
    let policy = Policy::new(agentd_core::Mode::Default, "/w");
    let names = |call: &ToolCall| -> Vec<String> {
        hooks
            .for_call(Stage::PreToolUse, &policy, call)
            .into_iter()
            .map(|h| h.command)
            .collect()
    };
    assert_eq!(names(&bash_call("git push origin")), ["push", "all"]);
    // Quotes and paths do not dodge a matcher, as for deny rules.
    assert_eq!(
        names(&bash_call("ls && '/usr/bin/git' push")),
        ["push", "all"]
    );
    assert_eq!(names(&bash_call("git status")), ["all"]);
    assert!(
        hooks
            .for_call(Stage::PostToolUse, &policy, &bash_call("ls"))
            .is_empty()
    );
    assert_eq!(
        hooks
            .for_notification(NotificationKind::PermissionRequest)
            .len(),
        1
    );
    assert!(hooks.for_notification(NotificationKind::TurnEnd).is_empty());
    let m = hooks.matchers(1);
    assert_eq!(m.pre_tool_use.len(), 2);
    assert!(m.pre_tool_use[1].is_none());
    assert!(!m.stop);
    assert_eq!((m.max_stop_continuations, m.stop_continuations), (3, 1));
}

#[test]
fn a_project_file_counts_only_under_a_trusted_directory() {
    let root = tempfile::tempdir().unwrap();
    let project = root.path().canonicalize().unwrap().join("repo");
    let sub = project.join("src");
    std::fs::create_dir_all(sub.join("..").join(".agentd")).unwrap();
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(
        project.join(PROJECT_FILE),
        "[[hooks.stop]]\ncommand = \"echo project\"\n",
    )
    .unwrap();
    let user = Hooks::default();
    let (hooks, problem) = Hooks::for_conversation(&user, 1000, &sub, &[]);
    assert!(hooks.hooks.is_empty() && problem.is_none());
    let elsewhere = root.path().join("other");
    let (hooks, _) = Hooks::for_conversation(&user, 1000, &sub, &[trusting(&elsewhere)]);
    assert!(hooks.hooks.is_empty());
    let (hooks, problem) = Hooks::for_conversation(&user, 1000, &sub, &[trusting(&project)]);
    assert!(problem.is_none());
    assert_eq!(hooks.all_of(Stage::Stop).len(), 1);
    // A parent trusted counts too; a broken file is reported, not used.
    std::fs::write(project.join(PROJECT_FILE), "[hooks]\nmodel = 1\n").unwrap();
    let trusted = [trusting(&root.path().canonicalize().unwrap())];
    let (hooks, problem) = Hooks::for_conversation(&user, 1000, &sub, &trusted);
    assert!(hooks.hooks.is_empty());
    assert!(problem.unwrap().contains("are ignored"));
}

/// A directory trusted now, as `agent trust` records it.
fn trusting(dir: &Path) -> (PathBuf, TrustRecord) {
    (
        dir.to_path_buf(),
        TrustRecord {
            pinned: pins_under(dir),
        },
    )
}

#[test]
fn a_trusted_project_file_counts_only_as_it_was_when_trusted() {
    let root = tempfile::tempdir().unwrap();
    let trusted_dir = root.path().canonicalize().unwrap().join("trusted");
    let project = trusted_dir.join("repo");
    let evil = root.path().canonicalize().unwrap().join("evil");
    for dir in [&project, &evil] {
        std::fs::create_dir_all(dir.join(".agentd")).unwrap();
        std::fs::write(
            dir.join(PROJECT_FILE),
            "[[hooks.stop]]\ncommand = \"echo here\"\n",
        )
        .unwrap();
    }
    let user = Hooks::default();
    let trust = [trusting(&trusted_dir)];
    let (hooks, problem) = Hooks::for_conversation(&user, 1000, &project, &trust);
    assert_eq!((hooks.all_of(Stage::Stop).len(), problem), (1, None));

    // `<trusted>/../evil` is not under `<trusted>`.
    let dotted = trusted_dir.join("../evil");
    let (hooks, problem) = Hooks::for_conversation(&user, 1000, &dotted, &trust);
    assert!(hooks.hooks.is_empty() && problem.is_none(), "{problem:?}");

    // Changed after it was trusted (a `git pull`): refused until trusted again.
    std::fs::write(
        project.join(PROJECT_FILE),
        "[[hooks.stop]]\ncommand = \"echo changed\"\n",
    )
    .unwrap();
    let (hooks, problem) = Hooks::for_conversation(&user, 1000, &project, &trust);
    assert!(hooks.hooks.is_empty());
    let problem = problem.unwrap();
    assert!(
        problem.contains("it changed since its directory was trusted")
            && problem.contains(&format!("run `agent trust {}`", project.display())),
        "{problem}"
    );
    let again = [trusting(&trusted_dir)];
    let (hooks, problem) = Hooks::for_conversation(&user, 1000, &project, &again);
    assert_eq!((hooks.all_of(Stage::Stop).len(), problem), (1, None));

    // A project that appeared after the trust (a repository cloned there).
    let cloned = trusted_dir.join("cloned");
    std::fs::create_dir_all(cloned.join(".agentd")).unwrap();
    std::fs::write(
        cloned.join(PROJECT_FILE),
        "[[hooks.stop]]\ncommand = \"id\"\n",
    )
    .unwrap();
    let (hooks, problem) = Hooks::for_conversation(&user, 1000, &cloned, &again);
    assert!(hooks.hooks.is_empty());
    assert!(
        problem
            .unwrap()
            .contains("it was not there when its directory was trusted"),
    );

    // Another owner's file with the same bytes (root may hand it over).
    let file = project.join(PROJECT_FILE);
    if std::os::unix::fs::chown(&file, Some(54_321), None).is_ok() {
        let (hooks, problem) = Hooks::for_conversation(&user, 1000, &project, &again);
        assert!(hooks.hooks.is_empty());
        assert!(problem.unwrap().contains("its owner changed"));
    }

    // A directory trusted before files were pinned pins nothing.
    let legacy = [(trusted_dir.clone(), TrustRecord::default())];
    let (hooks, problem) = Hooks::for_conversation(&user, 1000, &project, &legacy);
    assert!(hooks.hooks.is_empty() && problem.is_some());
}

#[tokio::test]
async fn pre_tool_use_answers_combine_and_failures_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let e = env(dir.path());
    let call = bash_call("ls");
    let run = |hooks: Vec<Hook>| {
        let e = e.clone();
        let call = call.clone();
        async move { pre_tool_use(&hooks, &e, &call).await }
    };
    // Ask beats allow; the second hook sees the first one's input.
    let (out, reports) = run(vec![
        one(
            Stage::PreToolUse,
            r#"echo '{"decision": "allow", "input": {"command": "ls -a"}}'"#,
            5000,
        ),
        one(
            Stage::PreToolUse,
            r#"grep -q '"ls -a"' && echo '{"decision": "ask", "reason": "sure?"}'"#,
            5000,
        ),
    ])
    .await;
    assert_eq!(out.verdict, HookVerdict::Ask("sure?".to_string()));
    assert_eq!(out.new_input, Some(json!({"command": "ls -a"})));
    assert_eq!(reports.len(), 2);
    // Failures: no decision, each reported with what went wrong.
    let (out, reports) = run(vec![
        one(Stage::PreToolUse, "echo oops >&2; exit 1", 5000),
        one(Stage::PreToolUse, "echo not json", 5000),
        one(Stage::PreToolUse, r#"echo '{"decision": "maybe"}'"#, 5000),
        one(Stage::PreToolUse, "sleep 5", 100),
    ])
    .await;
    assert_eq!(out.verdict, HookVerdict::None);
    assert_eq!(out.new_input, None);
    let errors: Vec<String> = reports.iter().map(|r| r.error.clone().unwrap()).collect();
    assert_eq!(errors[0], "exited with 1: oops");
    assert!(
        errors[1].starts_with("stdout is not a JSON answer"),
        "{}",
        errors[1]
    );
    assert!(
        errors[2].contains("unknown decision \"maybe\""),
        "{}",
        errors[2]
    );
    assert_eq!(errors[3], "timed out after 100 ms and was killed");
    assert!(reports[3].duration_ms < 2000, "{:?}", reports[3]);
    // A deny ends the run: later hooks do not run.
    let (out, reports) = run(vec![
        one(Stage::PreToolUse, "echo no >&2; exit 2", 5000),
        one(Stage::PreToolUse, "touch later", 5000),
    ])
    .await;
    assert_eq!(out.verdict, HookVerdict::Deny("no".to_string()));
    assert_eq!(reports.len(), 1);
    assert!(!dir.path().join("later").exists());
}

#[tokio::test]
async fn a_prompt_hook_blocks_or_adds_context_and_session_start_adds_context() {
    let dir = tempfile::tempdir().unwrap();
    let e = env(dir.path());
    let start = [one(
        Stage::SessionStart,
        r#"echo '{"context": "branch: main"}'"#,
        5000,
    )];
    let submit = [one(
        Stage::UserPromptSubmit,
        r#"grep -q secret && { echo 'no secrets please' >&2; exit 2; }; echo '{"context": "today is Friday"}'"#,
        5000,
    )];
    let (out, reports) = before_prompt(&start, &submit, &e, "fix it").await;
    assert_eq!(
        out,
        Prompt::Send {
            context: vec!["branch: main".to_string(), "today is Friday".to_string()]
        }
    );
    assert_eq!(reports.len(), 2);
    let (out, _) = before_prompt(&[], &submit, &e, "the secret is 42").await;
    assert_eq!(out, Prompt::Block("no secrets please".to_string()));
}

#[tokio::test]
async fn a_cancel_kills_a_hook_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let e = env(dir.path());
    let cancel = e.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        cancel.cancel();
    });
    let hooks = [one(Stage::Stop, "sleep 20", 60_000)];
    let started = Instant::now();
    let (out, reports) = stop(&hooks, &e, "done").await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(out, None);
    assert_eq!(
        reports[0].error.as_deref(),
        Some("cancelled with the turn and killed")
    );
}
