use super::tables::unique_prefix_len;
use super::tools::states_a_duration;
use super::*;
use agent_proto::v1::{
    ErrorKind, PermissionDecision as D, Role, ShellStatus, StateKind, attach_response::Event as E,
    content_block::Block,
};

fn ev(event: E) -> pb::AttachResponse {
    pb::AttachResponse {
        seq: 1,
        at_ms: 0,
        event: Some(event),
    }
}

/// Renders events without colour into a string.
fn render(events: Vec<E>) -> String {
    let mut r = Renderer::new(Vec::new(), false);
    for e in events {
        r.event(&ev(e)).unwrap();
    }
    r.end_line().unwrap();
    String::from_utf8(r.into_inner()).unwrap()
}

fn text(t: &str) -> pb::ContentBlock {
    pb::ContentBlock {
        block: Some(Block::Text(pb::TextBlock { text: t.into() })),
    }
}

fn tool_use(id: &str, name: &str, input: &str) -> pb::ContentBlock {
    pb::ContentBlock {
        block: Some(Block::ToolUse(pb::ToolUseBlock {
            id: id.into(),
            name: name.into(),
            input_json: input.into(),
            ..Default::default()
        })),
    }
}

fn tool_result(id: &str, content: &str, is_error: bool) -> pb::ContentBlock {
    pb::ContentBlock {
        block: Some(Block::ToolResult(pb::ToolResultBlock {
            images: Vec::new(),
            tool_use_id: id.into(),
            content: content.into(),
            is_error,
        })),
    }
}

fn msg(seq: u64, role: Role, content: Vec<pb::ContentBlock>) -> pb::Message {
    pb::Message {
        seq,
        role: role as i32,
        content,
        ..Default::default()
    }
}

fn state(kind: StateKind) -> pb::ConversationState {
    pb::ConversationState {
        kind: kind as i32,
        ..Default::default()
    }
}

fn appended(m: pb::Message) -> E {
    E::MessageAppended(pb::MessageAppended { message: Some(m) })
}

fn request(options: &[D]) -> pb::PermissionRequest {
    pb::PermissionRequest {
        plan: None,
        request_id: "req1".into(),
        tool_name: "edit".into(),
        kind: pb::ToolKind::Edit as i32,
        tool_use_id: "t1".into(),
        input_json: "{}".into(),
        summary: "edit src/main.rs".into(),
        diff: "--- a\n+++ b\n@@ -1 +1 @@\n-old\n+new".into(),
        options: options.iter().map(|d| *d as i32).collect(),
        reason: "edits ask in default mode".into(),
        suggested_rule: "edit(src/**)".into(),
        ..Default::default()
    }
}

#[test]
fn text_deltas_stream_inline_and_the_message_is_not_repeated() {
    let out = render(vec![
        E::ReplyBegin(pb::ReplyBegin { attempt: 1 }),
        E::TextDelta(pb::TextDelta {
            block_index: 0,
            text: "Hel".into(),
        }),
        E::TextDelta(pb::TextDelta {
            block_index: 0,
            text: "lo!".into(),
        }),
        appended(msg(2, Role::Assistant, vec![text("Hello!")])),
        E::StateChanged(pb::StateChanged {
            state: Some(state(StateKind::Idle)),
        }),
    ]);
    assert_eq!(out, "Hello!\n");
}

#[test]
fn thinking_is_prefixed_and_text_starts_a_new_line() {
    let out = render(vec![
        E::ThinkingDelta(pb::ThinkingDelta {
            block_index: 0,
            text: "let me ".into(),
        }),
        E::ThinkingDelta(pb::ThinkingDelta {
            block_index: 0,
            text: "see".into(),
        }),
        E::TextDelta(pb::TextDelta {
            block_index: 1,
            text: "Done.".into(),
        }),
    ]);
    assert_eq!(out, "✻ thinking…\nDone.\n", "collapsed to one line");
}

#[test]
fn the_transcript_view_shows_thinking_whole() {
    let mut r = Renderer::new(Vec::new(), false);
    let thought = pb::ContentBlock {
        block: Some(pb::content_block::Block::Thinking(pb::ThinkingBlock {
            thinking: "first line\nsecond line".into(),
            ..Default::default()
        })),
    };
    let reply = pb::Message {
        seq: 2,
        role: pb::Role::Assistant as i32,
        content: vec![thought, text("Done.")],
        ..Default::default()
    };
    r.transcript(&pb::GetConversationResponse {
        messages: vec![reply.clone()],
        ..Default::default()
    })
    .unwrap();
    let out = String::from_utf8(r.into_inner()).unwrap();
    assert!(out.contains("thinking: first line\nsecond line\n"), "{out}");
    // Live, a reply's reasoning that was not streamed is one line.
    let mut r = Renderer::new(Vec::new(), false);
    r.message(&reply, false).unwrap();
    let out = String::from_utf8(r.into_inner()).unwrap();
    assert!(out.starts_with("✻ thinking: first line"), "{out}");
    assert!(!out.contains("second line"), "one line: {out}");
}

/// A search the provider ran shows as its one line, live (after the
/// streamed text) and in the transcript; the call itself shows nothing.
#[test]
fn a_web_search_is_one_line() {
    let server = |json: &str, summary: &str| pb::ContentBlock {
        block: Some(pb::content_block::Block::ServerTool(pb::ServerToolBlock {
            json: json.into(),
            summary: summary.into(),
        })),
    };
    let reply = pb::Message {
        seq: 2,
        role: pb::Role::Assistant as i32,
        content: vec![
            server(r#"{"type":"server_tool_use"}"#, ""),
            server(
                r#"{"type":"web_search_tool_result"}"#,
                "searched: serde derive (2 results)",
            ),
            text("Done."),
        ],
        ..Default::default()
    };
    for live in [false, true] {
        let mut r = Renderer::new(Vec::new(), false);
        r.message(&reply, live).unwrap();
        let out = String::from_utf8(r.into_inner()).unwrap();
        assert_eq!(
            out.matches("searched: serde derive (2 results)").count(),
            1,
            "{out}"
        );
        assert!(!out.contains("server_tool_use"), "{out}");
    }
}

#[test]
fn thinking_is_dimmed_with_colour() {
    let mut r = Renderer::new(Vec::new(), true);
    r.event(&ev(E::ThinkingDelta(pb::ThinkingDelta {
        block_index: 0,
        text: "hm".into(),
    })))
    .unwrap();
    let out = String::from_utf8(r.into_inner()).unwrap();
    assert_eq!(out, "\x1b[2m✻ thinking…\x1b[0m");
}

#[test]
fn tool_calls_begin_and_end() {
    let out = render(vec![
        E::TextDelta(pb::TextDelta {
            block_index: 0,
            text: "Running tests".into(),
        }),
        E::ToolCallBegin(pb::ToolCallBegin {
            tool_use_id: "t1".into(),
            tool_name: "bash".into(),
            kind: pb::ToolKind::Execute as i32,
            summary: "bash: cargo test".into(),
            input_json: "{\"command\":\"cargo test\"}".into(),
        }),
        E::ToolCallEnd(pb::ToolCallEnd {
            tool_use_id: "t1".into(),
            tool_name: "bash".into(),
            is_error: false,
            summary: "exit 0, 12 lines".into(),
            diff: String::new(),
            duration_ms: 1500,
            ..Default::default()
        }),
        E::ToolCallBegin(pb::ToolCallBegin {
            tool_use_id: "t2".into(),
            tool_name: "edit".into(),
            kind: pb::ToolKind::Edit as i32,
            summary: String::new(),
            input_json: "{\"file_path\":\"src/a.rs\"}".into(),
        }),
        E::ToolCallEnd(pb::ToolCallEnd {
            tool_use_id: "t2".into(),
            tool_name: "edit".into(),
            is_error: true,
            summary: "old_string not found".into(),
            diff: "@@ -1 +1 @@\n-a\n+b".into(),
            duration_ms: 3,
            ..Default::default()
        }),
        // The durable result message does not repeat what was shown.
        appended(msg(
            3,
            Role::User,
            vec![tool_result("t1", "ok", false), tool_result("t2", "x", true)],
        )),
    ]);
    assert_eq!(
        out,
        "Running tests\n\
         ⏺ bash: cargo test\n  ⎿ ok exit 0, 12 lines (1.5s)\n\
         ⏺ edit: src/a.rs\n  ⎿ error old_string not found\n      @@ -1 +1 @@\n    1 -a\n    1 +b\n"
    );
}

#[test]
fn a_diff_is_shown_once_with_its_lines_numbered() {
    // Shown with the request that asked for the edit, not again when the
    // edit ends; an edit nobody was asked about shows it when it ends.
    let end = |id: &str| {
        E::ToolCallEnd(pb::ToolCallEnd {
            tool_use_id: id.into(),
            tool_name: "edit".into(),
            diff: "--- a\n+++ b\n@@ -9,2 +9,2 @@\n keep\n-old\n+new".into(),
            ..Default::default()
        })
    };
    let out = render(vec![
        E::PermissionRequested(pb::PermissionRequested {
            request: Some(request(&[D::AllowOnce, D::Deny])),
        }),
        end("t1"),
        end("t2"),
    ]);
    assert_eq!(out.matches("-old").count(), 2, "{out}");
    assert_eq!(out.matches("+new").count(), 2, "{out}");
    assert!(out.contains("\n  1 -old\n  1 +new\n"), "{out}");
    assert!(
        out.contains(
            "\n       +++ b\n       @@ -9,2 +9,2 @@\n     9  keep\n    10 -old\n    10 +new\n"
        ),
        "{out}"
    );
}

#[test]
fn diffs_are_coloured_only_with_colour() {
    let mut r = Renderer::new(Vec::new(), true);
    r.event(&ev(E::ToolCallEnd(pb::ToolCallEnd {
        tool_use_id: "t".into(),
        tool_name: "edit".into(),
        diff: "-a\n+b".into(),
        ..Default::default()
    })))
    .unwrap();
    let out = String::from_utf8(r.into_inner()).unwrap();
    assert!(out.contains("\x1b[31m-a\x1b[0m"), "{out:?}");
    assert!(out.contains("\x1b[32m+b\x1b[0m"), "{out:?}");
}

#[test]
fn results_of_tools_never_run_show_the_call() {
    // A denied call never gets ToolCallBegin: its result names it.
    let out = render(vec![
        appended(msg(
            2,
            Role::Assistant,
            vec![
                text("I'll delete it"),
                tool_use("t9", "bash", "{\"command\":\"rm -rf x\"}"),
            ],
        )),
        appended(msg(
            3,
            Role::User,
            vec![tool_result("t9", "Permission denied by user\nmore", true)],
        )),
    ]);
    assert_eq!(
        out,
        "I'll delete it\n⏺ bash: rm -rf x\n  ⎿ error: Permission denied by user … (+1 lines)\n"
    );
}

#[test]
fn user_messages_are_quoted_unless_sent_here() {
    let mut r = Renderer::new(Vec::new(), false);
    r.note_sent("mine");
    r.event(&ev(appended(msg(1, Role::User, vec![text("mine")]))))
        .unwrap();
    r.event(&ev(appended(msg(
        2,
        Role::User,
        vec![text("theirs\nline two")],
    ))))
    .unwrap();
    assert_eq!(
        String::from_utf8(r.into_inner()).unwrap(),
        "> theirs\n  line two\n"
    );
}

#[test]
fn retrying_error_and_states() {
    let out = render(vec![
        E::Retrying(pb::Retrying {
            attempt: 2,
            max_attempts: 3,
            delay_ms: 1200,
            reason: "overloaded".into(),
        }),
        E::Error(pb::ErrorEvent {
            message: "invalid x-api-key".into(),
            kind: ErrorKind::Auth as i32,
        }),
        // The same error as a state change is not repeated.
        E::StateChanged(pb::StateChanged {
            state: Some(pb::ConversationState {
                kind: StateKind::Error as i32,
                error_message: "invalid x-api-key".into(),
                error_kind: ErrorKind::Auth as i32,
                ..Default::default()
            }),
        }),
        E::StateChanged(pb::StateChanged {
            state: Some(pb::ConversationState {
                kind: StateKind::Error as i32,
                error_message: "boom".into(),
                error_kind: ErrorKind::Network as i32,
                ..Default::default()
            }),
        }),
        E::StateChanged(pb::StateChanged {
            state: Some(state(StateKind::Cancelling)),
        }),
        E::StateChanged(pb::StateChanged {
            state: Some(state(StateKind::ContextExhausted)),
        }),
        E::StateChanged(pb::StateChanged {
            state: Some(state(StateKind::ToolExecuting)),
        }),
        E::UsageUpdated(pb::UsageUpdated::default()),
        E::Resumed(pb::Resumed { after_seq: 3 }),
    ]);
    assert_eq!(
        out,
        "retrying (2/3) in 1.2s: overloaded\n\
         ✗ error (auth): invalid x-api-key\n\
         ✗ error (network): boom\n\
         cancelling…\n\
         ✗ context window exhausted: the conversation is read-only\n"
    );
}

#[test]
fn clients_shells_and_notices() {
    let client = |id: &str, name: &str| pb::ClientInfo {
        client_id: id.into(),
        name: name.into(),
        ..Default::default()
    };
    let shell = pb::ShellInfo {
        id: "sh1".into(),
        command: "sleep 100".into(),
        status: ShellStatus::Exited as i32,
        exit_code: 2,
        ..Default::default()
    };
    let out = render(vec![
        E::ClientAttached(pb::ClientAttached {
            client: Some(client("c2", "bob@box:12")),
        }),
        E::ClientDetached(pb::ClientDetached {
            client: Some(client("c3", "")),
        }),
        E::ShellStarted(pb::ShellStarted {
            shell: Some(shell.clone()),
        }),
        E::ShellExited(pb::ShellExited { shell: Some(shell) }),
        E::Notice(pb::Notice {
            message: "recovered after restart".into(),
            ..Default::default()
        }),
    ]);
    assert_eq!(
        out,
        "· bob@box:12 attached\n· c3 detached\n· shell sh1 started: sleep 100\n\
         · shell sh1 exited (2)\n! recovered after restart\n"
    );
}

#[test]
fn a_notice_of_any_kind_shows_its_sentence_by_its_severity() {
    let notice = |kind: &str, severity: pb::NoticeSeverity, message: &str| {
        E::Notice(pb::Notice {
            message: message.into(),
            kind: kind.into(),
            severity: severity as i32,
            details_json: "{}".into(),
        })
    };
    let out = render(vec![
        notice(
            "cache_cold",
            pb::NoticeSeverity::Warning,
            "the cache is cold",
        ),
        notice("disk_full", pb::NoticeSeverity::Error, "the disk is full"),
        notice("info", pb::NoticeSeverity::Info, "hello"),
    ]);
    assert_eq!(out, "! the cache is cold\n✗ the disk is full\n! hello\n");
}

#[test]
fn own_join_is_not_announced() {
    let mut r = Renderer::new(Vec::new(), false).with_header(false);
    r.event(&ev(E::Snapshot(pb::Snapshot {
        your_client_id: "me".into(),
        ..Default::default()
    })))
    .unwrap();
    r.event(&ev(E::ClientAttached(pb::ClientAttached {
        client: Some(pb::ClientInfo {
            client_id: "me".into(),
            name: "x".into(),
            ..Default::default()
        }),
    })))
    .unwrap();
    assert_eq!(String::from_utf8(r.into_inner()).unwrap(), "");
}

#[test]
fn own_rejoin_after_a_resume_is_not_announced_and_its_answers_are_its_own() {
    // A resumed stream has no snapshot: the new id comes with the join.
    let mut r = Renderer::new(Vec::new(), false)
        .with_header(false)
        .with_own_name("me@box:7");
    let info = |id: &str, name: &str| {
        Some(pb::ClientInfo {
            client_id: id.into(),
            name: name.into(),
            ..Default::default()
        })
    };
    for e in [
        E::Snapshot(pb::Snapshot {
            your_client_id: "c1".into(),
            ..Default::default()
        }),
        E::ClientAttached(pb::ClientAttached {
            client: info("c9", "me@box:7"),
        }),
        E::ClientDetached(pb::ClientDetached {
            client: info("c1", "me@box:7"),
        }),
        E::ClientAttached(pb::ClientAttached {
            client: info("c1", "bob@box:12"),
        }),
        E::PermissionResolved(pb::PermissionResolved {
            request_id: "req1".into(),
            decision: D::Deny as i32,
            client_id: "c9".into(),
            client_name: "me@box:7".into(),
            ..Default::default()
        }),
    ] {
        r.event(&ev(e)).unwrap();
    }
    assert_eq!(
        String::from_utf8(r.into_inner()).unwrap(),
        "· bob@box:12 attached\n  ⎿ deny (you)\n",
        "its own join and leave are not news; bob, who got the old id, is"
    );
}

#[test]
fn permission_request_block_and_resolution() {
    let out = render(vec![
        E::PermissionRequested(pb::PermissionRequested {
            request: Some(request(&[
                D::AllowOnce,
                D::AllowAlways,
                D::Deny,
                D::DenyAndStop,
                D::Never,
            ])),
        }),
        // Shown once even if it arrives again (snapshot after a reconnect).
        E::PermissionRequested(pb::PermissionRequested {
            request: Some(request(&[D::AllowOnce])),
        }),
        E::PermissionResolved(pb::PermissionResolved {
            request_id: "req1".into(),
            decision: D::AllowOnce as i32,
            client_id: "c2".into(),
            client_name: "bob".into(),
            ..Default::default()
        }),
        E::PermissionResolved(pb::PermissionResolved {
            request_id: "req2".into(),
            decision: D::Cancelled as i32,
            ..Default::default()
        }),
    ]);
    assert_eq!(
        out,
        "⚠ permission needed: edit\n\
         \x20 edit src/main.rs\n\
         \x20 why: edits ask in default mode\n\
         \x20   --- a\n    +++ b\n    @@ -1 +1 @@\n  1 -old\n  1 +new\n\
         \x20 \"allow always\" adds the rule edit(src/**)\n\
         \x20 [y] allow once  [a] allow always  [n] deny\n\
         \x20 [s] deny and stop (then type feedback)  [v] never\n\
         \x20 ⎿ allow once (answered by bob)\n\
         \x20 ⎿ permission request cancelled\n"
    );
}

#[test]
fn a_path_outside_the_working_directory_stands_out() {
    let mut req = request(&[D::AllowOnce, D::Deny]);
    req.tool_name = "write".into();
    req.summary = "write ../x/a.txt".into();
    req.diff.clear();
    req.reason =
        "write /w/x/a.txt needs permission; outside the working directory: /w/x/a.txt".into();
    let mut r = Renderer::new(Vec::new(), false);
    r.permission_request(&req).unwrap();
    let out = String::from_utf8(r.into_inner()).unwrap();
    assert_eq!(
        out,
        "⚠ permission needed: write\n\
         \x20 write ../x/a.txt\n\
         \x20 outside the working directory: /w/x/a.txt\n\
         \x20 [y] allow once  [n] deny\n"
    );
    // "… needs permission" repeats the title: it is not shown as a reason.
    assert!(!out.contains("why:"), "{out:?}");
    // In colour it is red and bold; several paths get a line each, once.
    req.request_id = "req2".into();
    req.reason = "a; outside the working directory: /p/1; b; outside the working directory: /p/2; \
                  outside the working directory: /p/1"
        .into();
    let mut r = Renderer::new(Vec::new(), true);
    r.permission_request(&req).unwrap();
    let out = String::from_utf8(r.into_inner()).unwrap();
    assert!(
        out.contains("  \x1b[1m\x1b[31moutside the working directory: /p/1\x1b[0m\x1b[0m\n"),
        "{out:?}"
    );
    assert_eq!(out.matches("/p/1").count(), 1, "{out:?}");
    assert!(out.contains("/p/2"));
    assert!(out.contains("why: a; b\n"), "{out:?}");
}

#[test]
fn background_is_listed_only_when_offered() {
    let mut r = Renderer::new(Vec::new(), false);
    let mut req = request(&[D::AllowOnce, D::Background]);
    req.diff.clear();
    req.reason.clear();
    r.permission_request(&req).unwrap();
    let out = String::from_utf8(r.into_inner()).unwrap();
    assert!(out.ends_with("  [y] allow once  [b] background\n"), "{out}");
    assert!(!out.contains("adds the rule"));
}

#[test]
fn snapshot_shows_header_transcript_partial_and_pending() {
    let snapshot = pb::Snapshot {
        your_role: pb::ClientRole::Driver as i32,
        plan: None,
        conversation: Some(pb::ConversationSummary {
            id: "01JABC".into(),
            title: "fix it".into(),
            cwd: "/nowhere/proj".into(),
            model: "m".into(),
            state: Some(state(StateKind::AwaitingPermission)),
            ..Default::default()
        }),
        messages: vec![
            msg(1, Role::User, vec![text("fix it")]),
            msg(
                2,
                Role::Assistant,
                vec![
                    text("Looking."),
                    tool_use("t1", "read", "{\"path\":\"a.rs\"}"),
                ],
            ),
            msg(
                3,
                Role::User,
                vec![tool_result("t1", "fn main() {}", false)],
            ),
        ],
        partial_reply: Some(msg(0, Role::Assistant, vec![text("Now I will")])),
        pending_permission: Some(request(&[D::AllowOnce, D::Deny])),
        clients: vec![
            pb::ClientInfo {
                client_id: "me".into(),
                name: "me@here".into(),
                ..Default::default()
            },
            pb::ClientInfo {
                client_id: "c2".into(),
                name: "bob@there".into(),
                ..Default::default()
            },
        ],
        your_client_id: "me".into(),
    };
    let mut r = Renderer::new(Vec::new(), false);
    r.snapshot(&snapshot).unwrap();
    // The reply goes on streaming where the partial text stopped (a new
    // markdown paragraph after the permission block: no leading blank).
    r.event(&ev(E::TextDelta(pb::TextDelta {
        block_index: 0,
        text: " edit".into(),
    })))
    .unwrap();
    // A second snapshot (after a reconnect) repeats nothing already shown.
    let mut again = snapshot.clone();
    again.partial_reply = None;
    again.messages.push(msg(4, Role::User, vec![text("hurry")]));
    r.snapshot(&again).unwrap();
    let out = String::from_utf8(r.into_inner()).unwrap();
    assert_eq!(
        out,
        "conversation 01JABC · waiting for permission · m · /nowhere/proj\n\
         fix it\n\
         also attached: bob@there\n\
         > fix it\n\
         Looking.\n\
         ⏺ read: a.rs\n\
         \x20 ⎿ fn main() {}\n\
         Now I will\n\
         ⚠ permission needed: edit\n\
         \x20 edit src/main.rs\n\
         \x20 why: edits ask in default mode\n\
         \x20   --- a\n    +++ b\n    @@ -1 +1 @@\n  1 -old\n  1 +new\n\
         \x20 [y] allow once  [n] deny\n\
         edit\n\
         > hurry\n"
    );
}

#[test]
fn snapshot_of_a_long_conversation_shows_the_tail() {
    let messages = (1..=30)
        .map(|i| msg(i, Role::User, vec![text(&format!("m{i}"))]))
        .collect();
    let mut r = Renderer::new(Vec::new(), false);
    r.snapshot(&pb::Snapshot {
        conversation: Some(pb::ConversationSummary {
            id: "01X".into(),
            ..Default::default()
        }),
        messages,
        ..Default::default()
    })
    .unwrap();
    let out = String::from_utf8(r.into_inner()).unwrap();
    assert!(
        out.contains("… 10 earlier messages (agent show 01X)\n> m11\n"),
        "{out}"
    );
    assert!(out.ends_with("> m30\n"));
}

#[test]
fn transcript_for_show() {
    let response = pb::GetConversationResponse {
        plan: None,
        checkpoints: Vec::new(),
        environment: None,
        conversation: Some(pb::ConversationSummary {
            id: "01JABC".into(),
            state: Some(pb::ConversationState {
                kind: StateKind::Error as i32,
                error_kind: ErrorKind::RateLimit as i32,
                error_message: "spend cap".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        instructions: None,
        messages: vec![
            msg(1, Role::User, vec![text("hi")]),
            pb::Message {
                interrupted: true,
                ..msg(
                    2,
                    Role::Assistant,
                    vec![
                        text("Hello"),
                        tool_use("t1", "glob", "{\"pattern\":\"*.rs\"}"),
                    ],
                )
            },
            msg(3, Role::User, vec![tool_result("t1", "", false)]),
        ],
        pending_permission: None,
    };
    let mut r = Renderer::new(Vec::new(), false);
    r.transcript(&response).unwrap();
    assert_eq!(
        String::from_utf8(r.into_inner()).unwrap(),
        "conversation 01JABC · error (rate limit)\nenvironment: the daemon's\n\n#1 > hi\n\nHello\n⏺ glob: *.rs\n[interrupted]\n\
         \x20 ⎿ (no output)\n\n✗ error (rate limit): spend cap\n"
    );
}

#[test]
fn tables() {
    let mut out = Vec::new();
    let convs = vec![
        pb::ConversationSummary {
            id: "01JDXYZABCDEFGHJKMNPQRSTVW".into(),
            title: "fix the test".into(),
            cwd: "/srv/p".into(),
            state: Some(state(StateKind::AwaitingPermission)),
            created_at_ms: 1_000,
            usage: Some(pb::Usage {
                input_tokens: 1_200,
                output_tokens: 300,
                cache_creation_input_tokens: 10_000,
                cache_read_input_tokens: 40_000,
            }),
            cost_usd: Some(0.1234),
            ..Default::default()
        },
        pb::ConversationSummary {
            id: "01JDXYZ999".into(),
            title: "".into(),
            cwd: "/srv/q".into(),
            state: Some(pb::ConversationState {
                kind: StateKind::LlmRequesting as i32,
                attempt: 2,
                max_attempts: 3,
                ..Default::default()
            }),
            created_at_ms: 1_000 - 7_200_000,
            ..Default::default()
        },
    ];
    conversation_table(&mut out, &convs, 61_000, false).unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "ID          STATE                   AGE  TOKENS  COST   CWD     TITLE\n\
         01JDXYZABC  waiting for permission  1m   51.5k   $0.12  /srv/p  fix the test\n\
         01JDXYZ999  retrying (2/3)          2h   0       -      /srv/q\n"
    );
    let mut out = Vec::new();
    conversation_table(&mut out, &convs[..1], 61_000, true).unwrap();
    assert!(
        String::from_utf8(out)
            .unwrap()
            .contains("01JDXYZABCDEFGHJKMNPQRSTVW  waiting")
    );

    let mut out = Vec::new();
    let shells = vec![pb::ShellInfo {
        id: "sh1".into(),
        conversation_id: "01JDXYZABCDEFG".into(),
        command: "npm run dev".into(),
        status: ShellStatus::Running as i32,
        started_at_ms: 0,
        ..Default::default()
    }];
    shell_table(&mut out, &shells, None, 5_000).unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "ID   CONVERSATION  STATE    AGE  COMMAND\nsh1  01JDXYZABC    running  5s   npm run dev\n"
    );
    // Listed for a parent: a sub-agent's shell is marked.
    let mut out = Vec::new();
    shell_table(&mut out, &shells, Some("01JDXYZABC"), 5_000).unwrap();
    assert!(
        String::from_utf8(out)
            .unwrap()
            .contains("01JDXYZABC    running")
    );
    let mut out = Vec::new();
    shell_table(&mut out, &shells, Some("01JDPARENT"), 5_000).unwrap();
    assert!(
        String::from_utf8(out)
            .unwrap()
            .contains("01JDXYZABC (sub-agent)  running")
    );
    let mut out = Vec::new();
    shell_table(&mut out, &[], None, 0).unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), "no background shells\n");
}

#[test]
fn helpers() {
    assert_eq!(format_duration_ms(850), "850ms");
    assert_eq!(format_duration_ms(1234), "1.2s");
    assert_eq!(format_duration_ms(42_000), "42s");
    assert_eq!(format_duration_ms(185_000), "3m05s");
    assert_eq!(format_age(59_999), "59s");
    assert_eq!(format_age(-5), "0s");
    assert_eq!(format_age(3 * 86_400_000), "3d");
    assert_eq!(one_line("\n  first  \nsecond", 100), "first");
    assert_eq!(one_line("ééééé", 3), "éé…");
    assert_eq!(abbreviate("a\n\nb\nc"), "a … (+2 lines)");
    assert_eq!(
        tool_use_summary("bash", "{\"command\":\"ls -la\\nrm\"}"),
        "bash: ls -la"
    );
    assert_eq!(tool_use_summary("think", "{}"), "think");
    assert_eq!(tool_use_summary("x", "{\"n\":1}"), "x: {\"n\":1}");
    assert_eq!(tool_use_summary("x", "not json"), "x: not json");
}

#[test]
fn instruction_files_are_one_dim_line_as_an_event_and_a_list_for_show() {
    let files = pb::Instructions {
        files: vec![
            pb::InstructionFile {
                path: "/srv/repo/AGENTS.md".into(),
                bytes: 1234,
            },
            pb::InstructionFile {
                path: "/srv/repo/app/CLAUDE.md".into(),
                bytes: 80,
            },
        ],
        truncated: true,
    };
    let mut out = Vec::new();
    let mut r = Renderer::new(&mut out, false);
    r.event(&pb::AttachResponse {
        seq: 3,
        at_ms: 0,
        event: Some(Event::InstructionsLoaded(files.clone())),
    })
    .unwrap();
    r.instructions(&files).unwrap();
    r.instructions(&pb::Instructions::default()).unwrap();
    drop(r);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "instructions: /srv/repo/AGENTS.md (1.2 KB), /srv/repo/app/CLAUDE.md (80 B) — truncated\n\
         /srv/repo/AGENTS.md  1.2 KB\n\
         /srv/repo/app/CLAUDE.md  80 B\n\
         ! truncated to [instructions] max_bytes\n\
         no project instructions (AGENTS.md)\n"
    );
}

#[test]
fn a_command_shows_what_it_is_for_and_where_it_runs() {
    let mut req = request(&[D::AllowOnce, D::Deny]);
    req.tool_name = "bash".into();
    req.kind = pb::ToolKind::Execute as i32;
    req.summary = "bash: cargo test".into();
    req.input_json = r#"{"command":"cargo test","description":"run the tests"}"#.into();
    req.diff.clear();
    let mut r = Renderer::new(Vec::new(), false).with_header(false);
    r.snapshot(&pb::Snapshot {
        conversation: Some(pb::ConversationSummary {
            cwd: "/work/proj".into(),
            ..Default::default()
        }),
        ..Default::default()
    })
    .unwrap();
    r.permission_request(&req).unwrap();
    let out = String::from_utf8(r.into_inner()).unwrap();
    assert!(
        out.contains("  bash: cargo test\n  run the tests\n  in /work/proj\n"),
        "{out}"
    );
    // The interactive terminal shows its own keys.
    let mut r = Renderer::new(Vec::new(), false).with_keys(false);
    req.request_id = "req2".into();
    r.permission_request(&req).unwrap();
    let out = String::from_utf8(r.into_inner()).unwrap();
    assert!(!out.contains("[y]"), "{out}");
}

#[test]
fn an_interrupt_marker_is_not_shown_as_typed_text() {
    let mut r = Renderer::new(Vec::new(), false);
    for (seq, text) in [(1, "fix it"), (2, "[Request interrupted by user]")] {
        r.message(
            &pb::Message {
                seq,
                role: pb::Role::User as i32,
                content: vec![pb::ContentBlock {
                    block: Some(pb::content_block::Block::Text(pb::TextBlock {
                        text: text.into(),
                    })),
                }],
                ..Default::default()
            },
            false,
        )
        .unwrap();
    }
    let out = String::from_utf8(r.into_inner()).unwrap();
    assert_eq!(out, "> fix it\n  [Request interrupted by user]\n");
}

fn bash_begin(id: &str, command: &str) -> E {
    E::ToolCallBegin(pb::ToolCallBegin {
        tool_use_id: id.into(),
        tool_name: "bash".into(),
        kind: pb::ToolKind::Execute as i32,
        summary: format!("bash: {command}"),
        input_json: String::new(),
    })
}

fn output(id: &str, text: &str) -> E {
    E::ToolOutputDelta(pb::ToolOutputDelta {
        tool_use_id: id.into(),
        text: text.into(),
        skipped_bytes: 0,
    })
}

/// The end of a bash call that printed `lines` (numbered from 1) lines,
/// with the preview the daemon makes of them.
fn bash_end(id: &str, lines: usize, summary: &str) -> E {
    let all: Vec<String> = (1..=lines).map(|i| format!("line-{i}")).collect();
    let head = all.len().min(OUTPUT_LINES);
    let tail = (all.len() - head).min(OUTPUT_LINES);
    E::ToolCallEnd(pb::ToolCallEnd {
        tool_use_id: id.into(),
        tool_name: "bash".into(),
        summary: summary.into(),
        output_head: all[..head].to_vec(),
        output_tail: all[all.len() - tail..].to_vec(),
        output_lines: lines as u64,
        ..Default::default()
    })
}

#[test]
fn a_fast_commands_output_is_shown_from_its_end() {
    let out = render(vec![
        bash_begin("t1", "echo hi"),
        E::ToolCallEnd(pb::ToolCallEnd {
            tool_use_id: "t1".into(),
            tool_name: "bash".into(),
            summary: "exit code 0 in 0.0 s".into(),
            output_head: vec!["hi".into()],
            output_lines: 1,
            ..Default::default()
        }),
    ]);
    assert_eq!(
        out,
        "⏺ bash: echo hi\n  │ hi\n  ⎿ ok exit code 0 in 0.0 s\n"
    );
}

#[test]
fn a_fast_commands_long_output_is_folded_to_its_first_and_last_lines() {
    let out = render(vec![
        bash_begin("t1", "seq 100"),
        bash_end("t1", 100, "exit code 0 in 0.1 s"),
    ]);
    let want = "⏺ bash: seq 100\n\
                \x20 │ line-1\n  │ line-2\n  │ line-3\n  │ line-4\n  │ line-5\n\
                \x20 │ … 90 more lines\n\
                \x20 │ line-96\n  │ line-97\n  │ line-98\n  │ line-99\n  │ line-100\n\
                \x20 ⎿ ok exit code 0 in 0.1 s · 100 lines\n";
    assert_eq!(out, want);
}

#[test]
fn live_output_shows_the_first_lines_as_they_come_then_the_count_and_the_last() {
    let mut events = vec![bash_begin("t1", "make")];
    // Lines arrive in pieces, split anywhere.
    let text: String = (1..=40).map(|i| format!("line-{i}\n")).collect();
    for piece in text.as_bytes().chunks(7) {
        events.push(output("t1", std::str::from_utf8(piece).unwrap()));
    }
    events.push(bash_end("t1", 40, "exit code 0 in 2.0 s"));
    let out = render(events);
    let want = "⏺ bash: make\n\
                \x20 │ line-1\n  │ line-2\n  │ line-3\n  │ line-4\n  │ line-5\n\
                \x20 │ … 30 more lines\n\
                \x20 │ line-36\n  │ line-37\n  │ line-38\n  │ line-39\n  │ line-40\n\
                \x20 ⎿ ok exit code 0 in 2.0 s · 40 lines\n";
    assert_eq!(out, want);
}

#[test]
fn live_output_of_a_few_lines_is_shown_whole_once() {
    let out = render(vec![
        bash_begin("t1", "for i in 1 2 3"),
        output("t1", "line-1\n"),
        output("t1", "line-2\nline-"),
        output("t1", "3"),
        bash_end("t1", 3, "exit code 0 in 0.6 s"),
        // The durable result does not repeat it.
        appended(msg(
            3,
            Role::User,
            vec![tool_result("t1", "line-1\n…", false)],
        )),
    ]);
    assert_eq!(
        out,
        "⏺ bash: for i in 1 2 3\n  │ line-1\n  │ line-2\n  │ line-3\n  ⎿ ok exit code 0 in 0.6 s\n"
    );
    // Seven lines: five live, the last two from the end, nothing counted.
    let mut events = vec![bash_begin("t1", "seven")];
    events.extend((1..=7).map(|i| output("t1", &format!("line-{i}\n"))));
    events.push(bash_end("t1", 7, "done"));
    let out = render(events);
    assert_eq!(
        out.lines().filter(|l| l.starts_with("  │ line-")).count(),
        7,
        "{out}"
    );
    assert!(
        out.contains("  │ line-6\n  │ line-7\n  ⎿ ok done\n"),
        "{out}"
    );
    assert!(!out.contains("more"), "{out}");
}

#[test]
fn an_interrupted_call_counts_what_it_printed_live() {
    let mut events = vec![bash_begin("t1", "yes")];
    events.extend((1..=12).map(|i| output("t1", &format!("y{i}\n"))));
    events.push(E::ToolCallEnd(pb::ToolCallEnd {
        tool_use_id: "t1".into(),
        is_error: true,
        summary: "interrupted".into(),
        ..Default::default()
    }));
    // Output that comes after the end is not shown.
    events.push(output("t1", "late\n"));
    let out = render(events);
    assert!(
        out.ends_with("  │ y5\n  │ … 7 more lines\n  ⎿ error interrupted · 12 lines\n"),
        "{out}"
    );
    assert!(!out.contains("late"));
}

#[test]
fn skipped_output_is_counted_from_the_end() {
    let out = render(vec![
        bash_begin("t1", "flood"),
        output("t1", "line-1\nline-2\n"),
        E::ToolOutputDelta(pb::ToolOutputDelta {
            tool_use_id: "t1".into(),
            text: "line-999\nline-1000\n".into(),
            skipped_bytes: 10_000,
        }),
        bash_end("t1", 1000, "exit code 0"),
    ]);
    assert!(
        out.contains("  │ line-1\n  │ line-2\n  │ … 993 more lines\n  │ line-996\n"),
        "{out}"
    );
    assert!(
        out.ends_with("  │ line-1000\n  ⎿ ok exit code 0 · 1000 lines\n"),
        "{out}"
    );
}

#[test]
fn a_duration_the_summary_states_is_not_repeated() {
    assert!(states_a_duration("exit code 0 in 2.8 s"));
    assert!(states_a_duration("exit code 1 in 350 ms"));
    assert!(!states_a_duration("read README.md"));
    assert!(!states_a_duration("3 matches in 2 files"));
    let out = render(vec![E::ToolCallEnd(pb::ToolCallEnd {
        tool_use_id: "t9".into(),
        tool_name: "bash".into(),
        summary: "exit code 0 in 2.8 s".into(),
        duration_ms: 2_800,
        ..Default::default()
    })]);
    assert!(out.contains("⎿ ok exit code 0 in 2.8 s\n"), "{out}");
}

#[test]
fn the_keys_wrap_between_options_at_the_screen_width() {
    let all = [
        D::AllowOnce,
        D::AllowAlways,
        D::Deny,
        D::DenyAndStop,
        D::Never,
        D::Background,
    ];
    let mut r = Renderer::new(Vec::new(), false).with_screen(80, false);
    r.permission_request(&request(&all)).unwrap();
    let out = String::from_utf8(r.into_inner()).unwrap();
    let keys: Vec<&str> = out.lines().filter(|l| l.contains("] ")).collect();
    assert!(keys.len() >= 2, "{out}");
    for line in &keys {
        assert!(line.chars().count() <= 80, "{line:?}");
        assert!(line.starts_with("  ["), "an option is never cut: {line:?}");
    }
    assert!(
        out.contains("[s] deny and stop (then type feedback)"),
        "{out}"
    );
}

/// A call started, of a tool of the kind the daemon names.
fn begin_of(id: &str, name: &str, kind: pb::ToolKind, summary: &str) -> E {
    E::ToolCallBegin(pb::ToolCallBegin {
        tool_use_id: id.into(),
        tool_name: name.into(),
        kind: kind as i32,
        summary: summary.into(),
        input_json: String::new(),
    })
}

#[test]
fn reads_greps_and_globs_are_one_line_each() {
    let begin = |id: &str, name: &str, summary: &str| {
        let kind = match name {
            "read" => pb::ToolKind::Read,
            "glob" => pb::ToolKind::Search,
            _ => pb::ToolKind::Execute,
        };
        begin_of(id, name, kind, summary)
    };
    let end = |id: &str, name: &str, summary: &str| {
        E::ToolCallEnd(pb::ToolCallEnd {
            tool_use_id: id.into(),
            tool_name: name.into(),
            summary: summary.into(),
            ..Default::default()
        })
    };
    let out = render(vec![
        begin("r1", "read", "read a.rs"),
        begin("g1", "glob", "glob: *.md"),
        end("g1", "glob", "3 files"),
        end("r1", "read", "lines 1-9 of 9"),
        begin("b1", "bash", "bash: ls"),
        end("b1", "bash", "exit code 0"),
    ]);
    assert_eq!(
        out,
        "⏺ glob: *.md ⎿ ok 3 files\n\
         ⏺ read a.rs ⎿ ok lines 1-9 of 9\n\
         ⏺ bash: ls\n\
         \x20 ⎿ ok exit code 0\n"
    );
    // Something else printed first: the read's call is shown alone, then
    // its result under it.
    let out = render(vec![
        begin("r1", "read", "read a.rs"),
        E::Notice(pb::Notice {
            message: "hello".into(),
            ..Default::default()
        }),
        end("r1", "read", "lines 1-9 of 9"),
    ]);
    assert!(out.starts_with("⏺ read a.rs\n"), "{out}");
    assert!(out.contains("hello"), "{out}");
}

/// Which calls are held for one line is the daemon's kind of the tool, not
/// its name: a search of an MCP server is held, a call of an unknown kind
/// (an older daemon) is announced at once whatever its name.
#[test]
fn the_tool_kind_decides_what_is_one_line() {
    let end = |id: &str, summary: &str| {
        E::ToolCallEnd(pb::ToolCallEnd {
            tool_use_id: id.into(),
            summary: summary.into(),
            ..Default::default()
        })
    };
    let out = render(vec![
        begin_of("m1", "mcp__docs__find", pb::ToolKind::Search, "find x"),
        end("m1", "2 hits"),
        begin_of("r1", "read", pb::ToolKind::Unspecified, "read a.rs"),
        end("r1", "lines 1-9 of 9"),
    ]);
    assert_eq!(
        out,
        "⏺ find x ⎿ ok 2 hits\n\
         ⏺ read a.rs\n\
         \x20 ⎿ ok lines 1-9 of 9\n"
    );
}

#[test]
fn command_output_cannot_drive_the_terminal() {
    let out = render(vec![
        bash_begin("b9", "printf"),
        E::ToolOutputDelta(pb::ToolOutputDelta {
            tool_use_id: "b9".into(),
            text: "\x1b[2Jcleared\tx\n".into(),
            skipped_bytes: 0,
        }),
    ]);
    assert!(!out.contains('\x1b'), "{out:?}");
    assert!(out.contains("  │ \u{fffd}[2Jcleared    x\n"), "{out:?}");
}

#[test]
fn a_folded_output_names_the_key_and_the_key_shows_the_whole_result() {
    let whole: String = (1..=40).map(|i| format!("line-{i}\n")).collect();
    let mut r = Renderer::new(Vec::new(), false).with_expand_key("Ctrl-O");
    for e in [
        appended(msg(
            2,
            Role::Assistant,
            vec![tool_use("t1", "bash", r#"{"command":"make"}"#)],
        )),
        bash_begin("t1", "make"),
        bash_end("t1", 40, "exit code 0 in 2.0 s"),
        appended(msg(3, Role::User, vec![tool_result("t1", &whole, false)])),
    ] {
        r.event(&ev(e)).unwrap();
    }
    r.expand_last().unwrap();
    let out = String::from_utf8(r.into_inner()).unwrap();
    let (live, expanded) = out.split_once("— the whole result").unwrap();
    assert!(
        live.contains("  │ … 30 more lines (Ctrl-O shows the whole result)\n"),
        "{out}"
    );
    assert!(!live.contains("line-20\n"), "{out}");
    assert!(expanded.starts_with(" (40 lines):\n"), "{out}");
    for i in 1..=40 {
        assert!(expanded.contains(&format!("  │ line-{i}\n")), "{out}");
    }
}

#[test]
fn expanding_before_any_tool_ran_says_so() {
    let mut r = Renderer::new(Vec::new(), false).with_expand_key("Ctrl-O");
    r.expand_last().unwrap();
    let out = String::from_utf8(r.into_inner()).unwrap();
    assert!(out.contains("no tool has run"), "{out}");
}

#[test]
fn show_full_prints_every_line_of_a_result_and_its_error() {
    let whole: String = (1..=30).map(|i| format!("row {i}\n")).collect();
    let transcript = pb::GetConversationResponse {
        messages: vec![
            msg(
                1,
                Role::Assistant,
                vec![
                    tool_use("t1", "bash", r#"{"command":"seq 30"}"#),
                    tool_use("t2", "read", r#"{"path":"gone.txt"}"#),
                ],
            ),
            msg(
                2,
                Role::User,
                vec![
                    tool_result("t1", &whole, false),
                    tool_result("t2", "no such file: gone.txt\n\x1b[2Jcleared?", true),
                ],
            ),
        ],
        ..Default::default()
    };
    let mut r = Renderer::new(Vec::new(), false).with_full_output(true);
    r.transcript(&transcript).unwrap();
    let out = String::from_utf8(r.into_inner()).unwrap();
    for i in 1..=30 {
        assert!(out.contains(&format!("  │ row {i}\n")), "{out}");
    }
    assert!(
        out.contains("  ⎿ error:\n  │ no such file: gone.txt\n"),
        "{out}"
    );
    assert!(
        !out.contains('\x1b'),
        "escape sequences are cleaned: {out:?}"
    );

    // Without --full the result is one abbreviated line.
    let mut r = Renderer::new(Vec::new(), false);
    r.transcript(&transcript).unwrap();
    let out = String::from_utf8(r.into_inner()).unwrap();
    assert!(!out.contains("row 30"), "{out}");
}

#[test]
fn listed_ids_are_cut_where_they_still_differ() {
    // Made in one millisecond: the same 10 first characters.
    let ids = ["01M8BRPVD1AAAA", "01M8BRPVD1BBBB", "01M8BRPVD3CCCC"];
    assert_eq!(unique_prefix_len(ids.into_iter(), 10), 11);
    assert_eq!(unique_prefix_len(["01A", "01B"].into_iter(), 10), 10);
    // The same id twice (a tree lists nothing twice, but a page might).
    assert_eq!(unique_prefix_len(["01M8BRPVD1AAAA"; 2].into_iter(), 10), 10);
}

#[test]
fn a_parents_stream_shows_one_line_per_child_event() {
    let who = || {
        Some(pb::SubAgentRef {
            conversation_id: "01CHILD".into(),
            agent_id: "agent_1_t".into(),
            description: "fix the tests".into(),
        })
    };
    let call = |summary: &str, is_error: bool| pb::SubAgentToolCall {
        sub_agent: who(),
        tool_use_id: "b1".into(),
        tool_name: "bash".into(),
        summary: summary.into(),
        is_error,
        duration_ms: 2100,
    };
    let out = render(vec![
        E::SubAgentStarted(pb::SubAgentStarted { sub_agent: who() }),
        E::SubAgentStateChanged(pb::SubAgentStateChanged {
            sub_agent: who(),
            state: Some(pb::ConversationState {
                kind: StateKind::ToolExecuting as i32,
                ..Default::default()
            }),
        }),
        E::SubAgentToolCallBegin(call("cargo test", false)),
        E::SubAgentToolCallEnd(call("exit 1", true)),
        E::SubAgentFinished(pb::SubAgentFinished {
            sub_agent: who(),
            success: false,
            summary: "tests fail\nmore".into(),
            usage: Some(pb::Usage {
                input_tokens: 1200,
                output_tokens: 34,
                ..Default::default()
            }),
            cost_usd: Some(0.04),
        }),
    ]);
    assert_eq!(
        out,
        "⑂ agent_1_t (fix the tests) started as 01CHILD\n\
         ⑂ agent_1_t (fix the tests): running tools\n\
         ⑂ agent_1_t (fix the tests) → cargo test\n\
         ⑂ agent_1_t (fix the tests) ✗ bash: exit 1 (2.1s)\n\
         ⑂ agent_1_t (fix the tests) failed: tests fail [1.2k tokens, $0.04]\n"
    );
}

#[test]
fn a_childs_permission_request_names_the_child() {
    let out = render(vec![E::PermissionRequested(pb::PermissionRequested {
        request: Some(pb::PermissionRequest {
            request_id: "r1".into(),
            tool_name: "bash".into(),
            summary: "echo hi".into(),
            options: vec![D::AllowOnce as i32, D::Deny as i32],
            sub_agent_conversation_id: "01CHILD".into(),
            sub_agent_id: "agent_2_t".into(),
            sub_agent_description: "look around".into(),
            ..Default::default()
        }),
    })]);
    assert!(
        out.contains(
            "⚠ permission needed: bash\n  asked by sub-agent agent_2_t (01CHILD): look around\n"
        ),
        "{out}"
    );
}

#[test]
fn correction_events_are_one_line_each() {
    let out = render(vec![
        E::CorrectionAttempt(pb::CorrectionAttempt {
            attempt: 1,
            max_attempts: 3,
            tool: "edit".into(),
            error: "old_string was not found in a.txt\nmore".into(),
            fallback_request: "Read a.txt again and write the whole file with `write`.".into(),
            fallback_tools: vec!["write".into()],
        }),
        E::CorrectionSuccess(pb::CorrectionSuccess {
            attempts: 1,
            tool: "write".into(),
        }),
        E::CorrectionSuccess(pb::CorrectionSuccess {
            attempts: 2,
            tool: "edit".into(),
        }),
        E::CorrectionFailed(pb::CorrectionFailed {
            attempts: 3,
            tool: "edit".into(),
            error: "old_string was not found in a.txt".into(),
            message: "Self-correction stopped: edit failed again after 3 correction attempts (the limit).".into(),
        }),
    ]);
    assert_eq!(
        out,
        "! self-correction 1/3: edit failed (old_string was not found in a.txt); asking the model to \
         read a.txt again and write the whole file with `write`.\n\
         ! self-correction succeeded with write after 1 attempt\n\
         ! self-correction succeeded with edit after 2 attempts\n\
         ! self-correction gave up: edit failed again after 3 attempts; the turn ended\n"
    );
}

/// A live turn that keeps a todo list: the `update_plan` calls get no
/// lines of their own, and on a terminal the panel is drawn again in place
/// while nothing else was printed after it.
#[test]
fn todo_updates_redraw_the_panel_in_place_and_their_calls_are_quiet() {
    let list = |status: &str| pb::Plan {
        phase: "todo".into(),
        steps: vec![pb::PlanStep {
            id: "1".into(),
            title: "Read the parser".into(),
            status: status.into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let input = r#"{"steps":[{"title":"Read the parser","status":"in_progress"}]}"#;
    let mut r = Renderer::new(Vec::new(), false)
        .with_live_thinking(true)
        .with_todo_panel(true, false);
    let events = [
        E::ReplyBegin(pb::ReplyBegin { attempt: 1 }),
        appended(msg(
            2,
            Role::Assistant,
            vec![tool_use("t1", "update_plan", input)],
        )),
        appended(msg(
            3,
            Role::User,
            vec![tool_result(
                "t1",
                "Todo list updated.\n[>] 1. Read the parser\n",
                false,
            )],
        )),
        E::StateChanged(pb::StateChanged {
            state: Some(state(StateKind::LlmRequesting)),
        }),
        E::TodoUpdated(pb::TodoUpdated {
            plan: Some(list("in_progress")),
        }),
        E::ReplyBegin(pb::ReplyBegin { attempt: 1 }),
        appended(msg(
            4,
            Role::Assistant,
            vec![tool_use("t2", "update_plan", input)],
        )),
        appended(msg(
            5,
            Role::User,
            vec![tool_result("t2", "Todo list updated.", false)],
        )),
        E::StateChanged(pb::StateChanged {
            state: Some(state(StateKind::LlmRequesting)),
        }),
        E::TodoUpdated(pb::TodoUpdated {
            plan: Some(list("completed")),
        }),
        appended(msg(6, Role::Assistant, vec![text("Done.")])),
        E::StateChanged(pb::StateChanged {
            state: Some(state(StateKind::Idle)),
        }),
    ];
    for e in events {
        r.event(&ev(e)).unwrap();
    }
    let out = String::from_utf8(r.into_inner()).unwrap();
    assert_eq!(
        out,
        "Todo list · 0/1 done\n  ◐ Read the parser\n\x1b[2A\r\x1b[JTodo list · 1/1 done\n  ☒ Read the parser\nDone.\n"
    );
    // A refused update is shown, with its error.
    let out = render(vec![
        appended(msg(
            2,
            Role::Assistant,
            vec![tool_use("t3", "update_plan", input)],
        )),
        appended(msg(
            3,
            Role::User,
            vec![tool_result("t3", "The todo list was not updated: no", true)],
        )),
    ]);
    assert_eq!(
        out,
        "⏺ update_plan: todo list, 1 items, 0 done\n  ⎿ error: The todo list was not updated: no\n"
    );
}
