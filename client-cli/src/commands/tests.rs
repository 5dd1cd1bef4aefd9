//! The one-shot commands against the mock daemon.

use agent_proto::v1 as pb;

use super::*;
use crate::json as js;
use crate::mock::{CONV_ID, Daemon, state};
use agent_proto::testing::rpc;

fn conversation(id: &str, title: &str) -> pb::ExportedConversation {
    pb::ExportedConversation {
        images: Vec::new(),
        conversation: Some(pb::ConversationSummary {
            id: id.into(),
            title: title.into(),
            cwd: "/srv/proj".into(),
            model: "m".into(),
            state: Some(state(pb::StateKind::Idle)),
            created_at_ms: 1,
            updated_at_ms: 2,
            message_count: 2,
            mode: pb::PermissionMode::Default as i32,
            usage: Some(pb::Usage {
                input_tokens: 10,
                output_tokens: 5,
                ..Default::default()
            }),
            last_seq: 9,
            ..Default::default()
        }),
        messages: vec![
            pb::Message {
                seq: 1,
                role: pb::Role::User as i32,
                content: vec![pb::ContentBlock {
                    block: Some(pb::content_block::Block::Text(pb::TextBlock {
                        text: "hello".into(),
                    })),
                }],
                created_at_ms: 1,
                ..Default::default()
            },
            pb::Message {
                seq: 2,
                role: pb::Role::Assistant as i32,
                content: vec![pb::ContentBlock {
                    block: Some(pb::content_block::Block::ToolUse(pb::ToolUseBlock {
                        id: "t1".into(),
                        name: "bash".into(),
                        input_json: "{\"command\":\"ls\"}".into(),
                        ..Default::default()
                    })),
                }],
                stop_reason: "tool_use".into(),
                usage: Some(pb::Usage::default()),
                ..Default::default()
            },
        ],
    }
}

#[tokio::test]
async fn export_then_import_round_trips_exactly() {
    let daemon = Daemon::start().await;
    let originals = vec![
        conversation("01AAA", "first"),
        conversation("01BBB", "second \"quoted\""),
    ];
    daemon.state().exports = originals.clone();
    let (result, out, _) = daemon.agent(&["export"], false).finish().await;
    assert_eq!(result.unwrap(), Exit::Ok);
    assert_eq!(out.lines().count(), 2);

    let mut agent = daemon.agent(&["import", "-"], false);
    for line in out.lines() {
        agent.type_line(line).await;
    }
    agent.close_stdin();
    let (result, out, _) = agent.finish().await;
    assert_eq!(result.unwrap(), Exit::Ok);
    assert_eq!(out, "imported 2 conversations\n");
    assert_eq!(daemon.requests::<rpc::ImportConversations>(), [originals]);
}

#[tokio::test]
async fn import_rejects_a_bad_file_before_sending_anything() {
    let daemon = Daemon::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("backup.jsonl");
    std::fs::write(&file, "{\"conversation\": {\"id\": \"x\"}}\n[1]\n").unwrap();
    let path = file.to_str().unwrap();
    let (result, _, _) = daemon.agent(&["import", path], false).finish().await;
    assert_eq!(
        result.unwrap_err().to_string(),
        format!("{path}: line 2: (top level): expected an object, found an array")
    );
    assert!(daemon.requests::<rpc::ImportConversations>().is_empty());
}

#[tokio::test]
async fn ls_prints_a_table_or_json() {
    let daemon = Daemon::start().await;
    let mut summary = conversation("01JDXYZABCDEFGHJKMNPQRSTVW", "fix it")
        .conversation
        .unwrap();
    summary.state = Some(state(pb::StateKind::AwaitingPermission));
    daemon.state().conversations = vec![summary];
    let (result, out, _) = daemon.agent(&["ls"], false).finish().await;
    assert_eq!(result.unwrap(), Exit::Ok);
    let mut lines = out.lines();
    assert_eq!(
        lines.next().unwrap().split_whitespace().collect::<Vec<_>>(),
        ["ID", "STATE", "AGE", "TOKENS", "COST", "CWD", "TITLE"]
    );
    let row = lines.next().unwrap();
    assert!(
        row.starts_with("01JDXYZABC  waiting for permission  "),
        "{row}"
    );
    assert!(row.ends_with("/srv/proj  fix it"), "{row}");

    let (_, out, _) = daemon.agent(&["ls", "--json"], false).finish().await;
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(list[0]["id"], "01JDXYZABCDEFGHJKMNPQRSTVW");
    assert_eq!(list[0]["state"]["kind"], "awaiting_permission");
}

#[tokio::test]
async fn show_prints_the_transcript_and_names_bad_ids() {
    let daemon = Daemon::start().await;
    daemon.state().exports = vec![conversation("01AAA", "first")];
    let (result, out, _) = daemon.agent(&["show", "01A"], false).finish().await;
    assert_eq!(result.unwrap(), Exit::Ok);
    assert_eq!(
        out,
        "conversation 01AAA · idle · m · /srv/proj\nfirst\nenvironment: the daemon's\n\n#1 > hello\n⏺ bash: ls\n\n\
         15 tokens: 10 in, 0 cache write, 0 cache read, 5 out · cost -\n"
    );
    let (_, out, _) = daemon
        .agent(&["--json", "show", "01A"], false)
        .finish()
        .await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["messages"][1]["content"][0]["name"], "bash");

    let (result, _, _) = daemon.agent(&["show", "01Z"], false).finish().await;
    assert_eq!(result.unwrap_err().to_string(), "unknown conversation 01Z");
    let (result, _, _) = daemon.agent(&["show", "01"], false).finish().await;
    assert_eq!(
        result.unwrap_err().to_string(),
        "ambiguous conversation prefix 01"
    );
}

#[tokio::test]
async fn send_cancel_and_answer() {
    let daemon = Daemon::start().await;
    let (result, out, _) = daemon
        .agent(&["send", "01T", "do", "it"], false)
        .finish()
        .await;
    assert_eq!(result.unwrap(), Exit::Ok);
    assert_eq!(out, format!("sent to {CONV_ID} (message 4)\n"));
    let sent = daemon.requests::<rpc::SendMessage>();
    assert_eq!(sent[0].text, "do it");
    assert_eq!(sent[0].conversation_id, "01T");

    let (result, _, _) = daemon.agent(&["send", "01T", "busy"], false).finish().await;
    let err = result.unwrap_err();
    assert_eq!(err.to_string(), "agent is busy");
    assert_eq!(err.exit(), Exit::Error);

    let (_, out, _) = daemon.agent(&["cancel", "01T"], false).finish().await;
    assert_eq!(out, "cancelled\n");

    let (result, out, _) = daemon
        .agent(
            &["answer", "01T", "allow_always", "--always-project"],
            false,
        )
        .finish()
        .await;
    assert_eq!(result.unwrap(), Exit::Ok);
    assert_eq!(out, "answered: allow always\n");
    let (_, out, _) = daemon
        .agent(
            &[
                "--json",
                "answer",
                "01T",
                "deny_and_stop",
                "--feedback",
                "stop",
            ],
            false,
        )
        .finish()
        .await;
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&out).unwrap(),
        serde_json::json!({"answered": true, "decision": "deny_and_stop", "scope": "unspecified"})
    );
    let answers = daemon.requests::<rpc::AnswerPermission>();
    assert_eq!(
        answers[0].decision,
        pb::PermissionDecision::AllowAlways as i32
    );
    assert_eq!(answers[0].scope, pb::RuleScope::Project as i32);
    assert_eq!(answers[0].request_id, "");
    assert!(!answers[0].client_name.is_empty());
    assert_eq!(answers[1].feedback, "stop");
}

#[tokio::test]
async fn shell_output_is_raw_bytes() {
    let daemon = Daemon::start().await;
    daemon.state().shell_chunks = vec![
        pb::ReadShellOutputResponse {
            offset: 0,
            data: b"1\n2\n".to_vec(),
            finished: None,
        },
        pb::ReadShellOutputResponse {
            offset: 4,
            data: vec![0xff, b'\n'],
            finished: Some(pb::ShellInfo {
                id: "sh1".into(),
                status: pb::ShellStatus::Exited as i32,
                exit_code: 0,
                ..Default::default()
            }),
        },
    ];
    let agent = daemon.agent(&["shells", "output", "sh1", "--follow"], false);
    let bytes = agent.captured.out.clone();
    let (result, _, err) = agent.finish().await;
    assert_eq!(result.unwrap(), Exit::Ok);
    assert_eq!(bytes.bytes(), b"1\n2\n\xff\n");
    assert_eq!(err, "shell sh1: exited (0)\n");

    let (result, _, _) = daemon
        .agent(&["shells", "output", "nope"], false)
        .finish()
        .await;
    assert_eq!(result.unwrap_err().to_string(), "unknown shell nope");
    let (result, _, _) = daemon
        .agent(&["shells", "kill", "sh9"], false)
        .finish()
        .await;
    assert_eq!(result.unwrap_err().to_string(), "unknown shell sh9");
    let (result, out, _) = daemon.agent(&["shells", "--all"], false).finish().await;
    assert_eq!(result.unwrap(), Exit::Ok);
    assert_eq!(out, "no background shells\n");
}

#[tokio::test]
async fn no_daemon_and_no_autostart() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nothing.sock");
    let cli = Cli::parse_args([
        "agent",
        "--no-autostart",
        "--socket",
        socket.to_str().unwrap(),
        "ls",
    ])
    .unwrap();
    let (_lines, lines_rx) = tokio::sync::mpsc::channel(1);
    let (_int, int_rx) = tokio::sync::mpsc::channel(1);
    let (mut io, _) = Io::captured(lines_rx, false, int_rx);
    let err = execute(cli, &mut io).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("no daemon at {} (autostart is off)", socket.display())
    );
}

#[test]
fn export_lines_parse_back_with_line_numbers_in_errors() {
    let one = js::exported_conversation(&conversation("01A", ""));
    let text = format!("{one}\n\n{one}\n");
    assert_eq!(parse_export(&text).unwrap().len(), 2);
    let err = parse_export(&format!("{one}\n{{\"conversation\": 3}}\n")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "line 2: conversation: expected an object, found a number"
    );
    let err = parse_export("nope").unwrap_err();
    assert!(err.to_string().starts_with("line 1: not JSON: "), "{err}");
}

#[test]
fn client_names_say_who_and_where() {
    let name = client_name();
    assert!(
        name.ends_with(&format!(":{}", std::process::id())),
        "{name}"
    );
}

#[test]
fn the_user_comes_from_user_then_logname() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |key: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.to_string())
        }
    };
    assert_eq!(
        user_from_env(env(&[("USER", "ann"), ("LOGNAME", "bob")])).as_deref(),
        Some("ann")
    );
    assert_eq!(
        user_from_env(env(&[("USER", ""), ("LOGNAME", "bob")])).as_deref(),
        Some("bob")
    );
    assert_eq!(
        user_from_env(env(&[("LOGNAME", "bob")])).as_deref(),
        Some("bob")
    );
    assert_eq!(user_from_env(env(&[("USER", "")])), None);
    assert_eq!(user_from_env(env(&[])), None);
}

#[test]
fn names_say_user_host_and_pid_as_far_as_known() {
    let some = |s: &str| Some(s.to_string());
    assert_eq!(name_from(some("ann"), some("box"), 7), "ann@box:7");
    assert_eq!(name_from(some("ann"), None, 7), "ann:7");
    assert_eq!(name_from(None, some("box"), 7), "agent@box:7");
    assert_eq!(name_from(None, None, 7), "agent-7");
}

#[test]
fn mcp_args_are_commands_or_urls() {
    let s = mcp_server_arg("fs=npx -y 'my server' .").unwrap();
    assert_eq!((s.name.as_str(), s.command.as_str()), ("fs", "npx"));
    assert_eq!(s.args, ["-y", "my server", "."]);
    let s = mcp_server_arg("gh=https://example.test/mcp").unwrap();
    assert_eq!(s.url, "https://example.test/mcp");
    assert!(s.command.is_empty());
    for bad in ["fs", "=x", "fs=", "fs=echo 'open"] {
        assert!(mcp_server_arg(bad).is_err(), "{bad}");
    }
}

#[test]
fn request_ids_are_distinct_ulids_of_now() {
    let before = u64::try_from(now_ms()).unwrap();
    let ids: Vec<String> = (0..1000).map(|_| request_id()).collect();
    let after = u64::try_from(now_ms()).unwrap();
    let unique: std::collections::HashSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "a request id repeated");
    for id in &ids {
        let ulid = ulid::Ulid::from_string(id).unwrap();
        assert!((before..=after).contains(&ulid.timestamp_ms()), "{id}");
    }
    // The random part differs in more than the low bits.
    let randoms: std::collections::HashSet<u128> = ids
        .iter()
        .map(|id| ulid::Ulid::from_string(id).unwrap().random() >> 40)
        .collect();
    assert!(randoms.len() > 990, "{}", randoms.len());
}
