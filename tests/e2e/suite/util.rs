//! Helpers the areas share, and only those: a test begins with
//! [`agent_tests::harness::Scenario`] and goes on with these.

mod attach;

pub(super) use attach::*;

use agent_proto::v1 as pb;
use agent_proto::v1::agent_service_client::AgentServiceClient;
use agent_tests::fake_llm::{Recorded, ReplyScript, Script};
use agent_tests::harness::{TestDaemon, WAIT};
use serde_json::Value;
use std::time::Duration;
use tonic::transport::Channel;

/// Rules that let every mutating tool run without asking.
pub(super) const MUTATING: &[&str] = &["bash", "write", "edit", "patch"];

/// A reply that is one tool call.
pub(super) fn tool(id: &str, name: &str, input: Value) -> Script {
    Script::Reply(ReplyScript::new().tool_use(id, name, input))
}

/// The daemon's conversations (the first page of ListConversations).
pub(super) async fn listed(
    client: &mut AgentServiceClient<Channel>,
) -> Vec<pb::ConversationSummary> {
    client
        .list_conversations(pb::ListConversationsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .conversations
}

/// A fresh directory, for a conversation besides the scenario's.
pub(super) fn workdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

pub(super) async fn create(
    client: &mut AgentServiceClient<Channel>,
    cwd: &std::path::Path,
    prompt: &str,
) -> String {
    create_with(client, cwd, prompt, &[], pb::PermissionMode::Unspecified).await
}

/// Creates a conversation with permission rules and a mode.
pub(super) async fn create_with(
    client: &mut AgentServiceClient<Channel>,
    cwd: &std::path::Path,
    prompt: &str,
    allow: &[&str],
    mode: pb::PermissionMode,
) -> String {
    client
        .create_conversation(pb::CreateConversationRequest {
            cwd: cwd.display().to_string(),
            prompt: prompt.to_string(),
            allow_rules: allow.iter().map(|r| r.to_string()).collect(),
            mode: mode as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .conversation
        .unwrap()
        .id
}

/// Sends a user message with the unary RPC.
pub(super) async fn send(client: &mut AgentServiceClient<Channel>, id: &str, text: &str) {
    client
        .send_message(pb::SendMessageRequest {
            conversation_id: id.to_string(),
            text: text.to_string(),
            ..Default::default()
        })
        .await
        .unwrap();
}

pub(super) async fn get(
    client: &mut AgentServiceClient<Channel>,
    id: &str,
) -> pb::GetConversationResponse {
    client
        .get_conversation(pb::GetConversationRequest {
            conversation_id: id.to_string(),
        })
        .await
        .unwrap()
        .into_inner()
}

pub(super) fn kind_of(r: &pb::GetConversationResponse) -> pb::StateKind {
    let k = r
        .conversation
        .as_ref()
        .and_then(|c| c.state.as_ref())
        .map(|s| s.kind)
        .unwrap_or(0);
    pb::StateKind::try_from(k).unwrap()
}

/// Polls until the conversation is in `kind`.
pub(super) async fn wait_state(
    client: &mut AgentServiceClient<Channel>,
    id: &str,
    kind: pb::StateKind,
) -> pb::GetConversationResponse {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let r = get(client, id).await;
        if kind_of(&r) == kind {
            return r;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "conversation never reached {kind:?}; last: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(super) fn text_of_message(m: &pb::Message) -> String {
    m.content
        .iter()
        .filter_map(|b| match &b.block {
            Some(pb::content_block::Block::Text(t)) => Some(t.text.clone()),
            _ => None,
        })
        .collect()
}

/// Runs the client binary against `d`: whether it succeeded, its stdout
/// and its stderr.
pub(super) async fn agent_out(d: &TestDaemon, args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::from(d.agent())
        .args(args)
        .output()
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `agent ARGS` started with its stdin, stdout and stderr piped (stdin
/// kept open: an `agent attach` goes on until it is closed).
pub(super) fn spawn_agent(d: &TestDaemon, args: &[&str]) -> tokio::process::Child {
    tokio::process::Command::from(d.agent())
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Checks the message chain of a recorded request: roles alternate from
/// user, and every tool_use is answered, in order, by the next message's
/// tool_results (and nothing else answers).
/// `agent` as a person's shell starts it with no daemon running: private
/// runtime, data and home directories under `root`, nothing from the
/// environment but `PATH`, the fake model's address and a key. Returns the
/// command (arguments still to add) and the runtime and data directories.
pub(super) fn autostarting_agent(
    fake: &agent_tests::fake_llm::FakeLlm,
    root: &std::path::Path,
) -> (
    tokio::process::Command,
    std::path::PathBuf,
    std::path::PathBuf,
) {
    use std::os::unix::fs::PermissionsExt;
    let (runtime, data, home) = (root.join("run"), root.join("data"), root.join("home"));
    for dir in [&runtime, &data, &home] {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let mut agent = tokio::process::Command::new(agent_tests::harness::client_bin());
    agent
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("XDG_RUNTIME_DIR", &runtime)
        .env("XDG_DATA_HOME", &data)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("AGENTD_BIN", agent_tests::harness::daemon_bin())
        .env("ANTHROPIC_BASE_URL", fake.base_url())
        .env("ANTHROPIC_API_KEY", "test-key");
    (agent, runtime, data)
}

/// Waits until some conversation asks for permission, then answers it with
/// `agent answer ID DECISION` as a person in another terminal would.
pub(super) async fn answer_with_agent(
    d: &TestDaemon,
    client: &mut AgentServiceClient<Channel>,
    decision: &str,
) {
    let deadline = tokio::time::Instant::now() + WAIT;
    let id = loop {
        let list = client
            .list_conversations(pb::ListConversationsRequest::default())
            .await
            .unwrap()
            .into_inner();
        let waiting = list.conversations.iter().find(|c| {
            c.state.as_ref().map(|s| s.kind) == Some(pb::StateKind::AwaitingPermission as i32)
        });
        if let Some(c) = waiting {
            break c.id.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no request was raised"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let answered = tokio::process::Command::from(d.agent())
        .args(["answer", &id, decision])
        .output()
        .await
        .unwrap();
    assert!(
        answered.status.success(),
        "{}",
        String::from_utf8_lossy(&answered.stderr)
    );
}

pub(super) fn assert_valid_chain(req: &Recorded) {
    let messages = req.body["messages"].as_array().expect("messages");
    assert!(!messages.is_empty());
    assert_eq!(messages[0]["role"], "user");
    for (i, m) in messages.iter().enumerate() {
        if i > 0 {
            assert_ne!(
                messages[i - 1]["role"],
                m["role"],
                "roles alternate at {i}: {messages:#?}"
            );
        }
        let blocks = m["content"].as_array().cloned().unwrap_or_default();
        let uses: Vec<&str> = blocks
            .iter()
            .filter(|b| b["type"] == "tool_use")
            .map(|b| b["id"].as_str().unwrap())
            .collect();
        if !uses.is_empty() {
            assert_eq!(m["role"], "assistant");
            let next = messages
                .get(i + 1)
                .expect("tool_use answered in the next message");
            assert_eq!(next["role"], "user");
            let results: Vec<&str> = next["content"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|b| b["type"] == "tool_result")
                .map(|b| b["tool_use_id"].as_str().unwrap())
                .collect();
            assert_eq!(
                results, uses,
                "every tool_use gets exactly one tool_result, in order"
            );
        }
        if m["role"] == "user" && i > 0 {
            let prev_uses = messages[i - 1]["content"]
                .as_array()
                .map(|a| a.iter().filter(|b| b["type"] == "tool_use").count())
                .unwrap_or(0);
            let results = blocks.iter().filter(|b| b["type"] == "tool_result").count();
            assert_eq!(results, prev_uses, "no tool_result without its tool_use");
        }
    }
}

/// Pids of the processes whose command line contains `needle`.
pub(super) fn processes_matching(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(entry.path().join("cmdline"))
            && String::from_utf8_lossy(&cmd)
                .replace('\0', " ")
                .contains(needle)
        {
            out.push(pid);
        }
    }
    out
}

/// The content blocks of the last message of a request body.
pub(super) fn last_content(body: &Value) -> Vec<Value> {
    body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_array())
        .cloned()
        .unwrap_or_default()
}

/// A reply that says "done".
pub(super) fn done() -> Script {
    Script::text("done")
}

pub(super) fn is_request(m: &pb::AttachResponse) -> bool {
    matches!(
        m.event,
        Some(pb::attach_response::Event::PermissionRequested(_))
    )
}

pub(super) fn request_of(m: &pb::AttachResponse) -> pb::PermissionRequest {
    match &m.event {
        Some(pb::attach_response::Event::PermissionRequested(r)) => r.request.clone().unwrap(),
        _ => panic!("not a permission request: {m:?}"),
    }
}

/// The tool result the model got for `tool_use_id` in a recorded request.
pub(super) fn result_of(req: &Recorded, tool_use_id: &str) -> Value {
    req.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find(|b| b["type"] == "tool_result" && b["tool_use_id"] == tool_use_id)
        .unwrap_or_else(|| panic!("no tool_result for {tool_use_id}: {:#}", req.body))
}

/// The texts of a conversation's user messages, in order.
pub(super) async fn user_texts(client: &mut AgentServiceClient<Channel>, id: &str) -> Vec<String> {
    get(client, id)
        .await
        .messages
        .iter()
        .filter(|m| m.role == pb::Role::User as i32)
        .map(text_of_message)
        .collect()
}

/// A real 1×1 PNG (70 bytes).
pub(super) const PIXEL_PNG: [u8; 70] = [
    0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1F, 0x15, 0xC4,
    0x89, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x44, 0x41, 0x54, 0x78, 0xDA, 0x63, 0x64, 0x60, 0xF8, 0x5F,
    0x0F, 0x00, 0x02, 0x87, 0x01, 0x80, 0xEB, 0x47, 0xBA, 0x92, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4E, 0x44, 0xAE, 0x42, 0x60, 0x82,
];

/// Runs git in `dir`; never refreshes the index behind the test's back.
pub(super) fn git(dir: &std::path::Path, args: &[&str]) -> String {
    agent_tests::crash::repo::git(dir, args).unwrap()
}

/// Every file under `dir` (recursively, `.git` left out) and its bytes, by
/// its path relative to `dir`.
pub(super) fn tree_files(dir: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    fn walk(
        root: &std::path::Path,
        dir: &std::path::Path,
        out: &mut std::collections::BTreeMap<String, Vec<u8>>,
    ) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() && path != root.join(".git") {
                walk(root, &path, out);
            } else if kind.is_file() {
                let rel = path.strip_prefix(root).unwrap().display().to_string();
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Fails with the paths that differ (at most 20 of them) when two
/// [`tree_files`] listings differ, instead of printing every byte of both.
#[track_caller]
pub(super) fn assert_same_files(
    got: &std::collections::BTreeMap<String, Vec<u8>>,
    want: &std::collections::BTreeMap<String, Vec<u8>>,
    what: &str,
) {
    if got == want {
        return;
    }
    let mut diffs = Vec::new();
    for (path, bytes) in want {
        match got.get(path) {
            None => diffs.push(format!("{path}: missing")),
            Some(b) if b != bytes => diffs.push(format!(
                "{path}: holds {:?}, expected {:?}",
                String::from_utf8_lossy(b),
                String::from_utf8_lossy(bytes)
            )),
            Some(_) => {}
        }
    }
    for path in got.keys().filter(|p| !want.contains_key(*p)) {
        diffs.push(format!("{path}: should not exist"));
    }
    let n = diffs.len();
    diffs.truncate(20);
    panic!("{what}: {n} file(s) differ:\n  {}", diffs.join("\n  "));
}

/// What a person's repository holds besides the work tree, which nothing
/// the agent or a rewind does may change: the index file's bytes, HEAD,
/// every ref (branches, tags, the stash) and the stash list.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct GitUserState {
    pub index: Vec<u8>,
    pub head: String,
    pub refs: String,
    pub stash: String,
}

pub(super) fn git_user_state(dir: &std::path::Path) -> GitUserState {
    // The index first: nothing run after may have rewritten it.
    let index = std::fs::read(dir.join(".git/index")).unwrap();
    GitUserState {
        index,
        head: git(dir, &["symbolic-ref", "HEAD"]) + &git(dir, &["rev-parse", "HEAD"]),
        refs: git(dir, &["for-each-ref", "--format=%(refname) %(objectname)"]),
        stash: git(dir, &["stash", "list"]),
    }
}

/// A path the daemon reported (absolute), relative to the working
/// directory `dir` (given as the daemon was, or canonical).
pub(super) fn relative_to(dir: &std::path::Path, reported: &str) -> String {
    let path = std::path::Path::new(reported);
    let canonical = dir.canonicalize().unwrap();
    path.strip_prefix(dir)
        .or_else(|_| path.strip_prefix(&canonical))
        .unwrap_or_else(|_| panic!("{reported} is not under {}", dir.display()))
        .display()
        .to_string()
}

/// The requests whose first user message contains `marker`.
pub(super) fn requests_of(all: &[Recorded], marker: &str) -> Vec<Recorded> {
    all.iter()
        .filter(|r| {
            r.body["messages"][0]["content"]
                .as_array()
                .and_then(|b| b.first())
                .and_then(|b| b["text"].as_str())
                .is_some_and(|t| t.contains(marker))
        })
        .cloned()
        .collect()
}

/// The names of the tools a request offered.
pub(super) fn offered(req: &Recorded) -> Vec<String> {
    req.body["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The text of a recorded tool result (its string, or its text blocks).
pub(super) fn result_text(result: &Value) -> String {
    match &result["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}
