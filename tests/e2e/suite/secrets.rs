//! The daemon's secrets stay its own (issue 39, points 6, 7 and 10): no
//! child it starts (git, MCP servers, hooks) inherits its credentials, a
//! repository cannot make the checkpoint snapshot run its programs, no file
//! tool reads agentd's own files, and a key that reaches a tool's output
//! anyway is redacted before it is stored or sent.

use super::util::{MUTATING, agent_out, create_with, git, result_of, tool, wait_state};
use agent_proto::v1 as pb;
use agent_tests::fake_llm::{ReplyScript, Script};
use agent_tests::harness::Scenario;
use serde_json::{Value, json};
use std::path::Path;

/// The credentials the daemon is given in these tests, each long enough to
/// be told apart from anything else.
const AUTH_TOKEN: &str = "auth-token-0123456789abcdef";
const AGENTD_TOKEN: &str = "agentd-token-0123456789abcdef";

/// Writes an executable shell script that appends its name and its whole
/// environment to `marker`, then runs `then`.
fn spy(dir: &Path, name: &str, marker: &Path, then: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\n{{ echo '== {name}'; env; }} >> '{}'\n{then}\n",
            marker.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// Asserts that an environment dump holds none of the daemon's credentials.
fn assert_no_credentials(dump: &str, what: &str) {
    for secret in ["test-key", AUTH_TOKEN, AGENTD_TOKEN] {
        assert!(!dump.contains(secret), "{what} saw {secret}:\n{dump}");
    }
    for line in dump.lines() {
        for prefix in ["ANTHROPIC_", "OPENAI_", "AGENTD_TOKEN"] {
            assert!(!line.starts_with(prefix), "{what} inherited {line}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_repository_runs_nothing_during_the_snapshot_and_rewind_still_works() {
    let s = Scenario::new()
        .env("ANTHROPIC_AUTH_TOKEN", AUTH_TOKEN)
        .env("AGENTD_TOKEN", AGENTD_TOKEN)
        .scripts([
            tool(
                "b1",
                "bash",
                json!({"command": "echo changed by bash >> a.txt"}),
            ),
            Script::text("done"),
        ])
        .start()
        .await;
    let (d, work) = (s.daemon, s.work);
    let mut client = s.client;
    let dir = work.path().canonicalize().unwrap();
    git(&dir, &["init", "-q", "-b", "main"]);
    git(&dir, &["config", "user.name", "Test User"]);
    git(&dir, &["config", "user.email", "test@example.com"]);
    std::fs::write(dir.join("a.txt"), "alpha\n").unwrap();
    git(&dir, &["add", "."]);
    git(&dir, &["commit", "-qm", "first"]);
    // Now the repository turns hostile: an fsmonitor, a clean and a smudge
    // filter for every text file, all of them programs of its own.
    let scripts = tempfile::tempdir().unwrap();
    let marker = scripts.path().join("ran");
    let fsmonitor = spy(scripts.path(), "fsmonitor", &marker, "");
    let clean = spy(scripts.path(), "clean", &marker, "cat");
    let smudge = spy(scripts.path(), "smudge", &marker, "cat");
    git(&dir, &["config", "core.fsmonitor", &fsmonitor]);
    git(&dir, &["config", "filter.evil.clean", &clean]);
    git(&dir, &["config", "filter.evil.smudge", &smudge]);
    std::fs::write(dir.join(".gitattributes"), "*.txt filter=evil\n").unwrap();
    std::fs::write(dir.join(".git/info/attributes"), "* filter=evil\n").unwrap();

    let id = create_with(
        &mut client,
        &dir,
        "change a file",
        MUTATING,
        pb::PermissionMode::Unspecified,
    )
    .await;
    let r = wait_state(&mut client, &id, pb::StateKind::Idle).await;
    assert_eq!(
        std::fs::read(dir.join("a.txt")).unwrap(),
        b"alpha\nchanged by bash\n"
    );
    // The command was tracked through the snapshot.
    assert_eq!(r.checkpoints.len(), 1, "{:?}", r.checkpoints);
    assert_eq!(r.checkpoints[0].files.len(), 1, "{:?}", r.checkpoints);
    assert!(
        !marker.exists(),
        "the repository's programs ran:\n{}",
        std::fs::read_to_string(&marker).unwrap_or_default()
    );

    let (ok, out, err) = agent_out(&d, &["rewind", &id, "--to", "1", "--code"]).await;
    assert!(ok, "{out}{err}");
    assert_eq!(std::fs::read(dir.join("a.txt")).unwrap(), b"alpha\n");
    assert!(
        !marker.exists(),
        "the repository's programs ran at the rewind:\n{}",
        std::fs::read_to_string(&marker).unwrap_or_default()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_servers_and_hooks_do_not_inherit_the_daemons_credentials() {
    let spies = tempfile::tempdir().unwrap();
    let server_env = spies.path().join("server.env");
    let hook_env = spies.path().join("hook.env");
    let server = spy(
        spies.path(),
        "server.sh",
        &server_env,
        &format!("exec {} stdio", env!("CARGO_BIN_EXE_test-mcp-server")),
    );
    let hook = spy(spies.path(), "hook.sh", &hook_env, "exit 0");
    let config = format!(
        "[mcp.servers.t]\ncommand = {}\nenv = {{ OPENAI_ORG_ID = \"written-by-the-user\" }}\n\n\
         [[hooks.user_prompt_submit]]\ncommand = {}\n",
        toml_str(&server),
        toml_str(&hook),
    );
    let s = Scenario::new()
        .env("ANTHROPIC_AUTH_TOKEN", AUTH_TOKEN)
        .env("AGENTD_TOKEN", AGENTD_TOKEN)
        .env("OPENAI_ORG_ID", "the-daemons-own")
        .config(&config)
        .scripts([Script::text("hello")])
        .conversation("hi")
        .start()
        .await;
    let mut client = s.client;
    wait_state(&mut client, &s.id, pb::StateKind::Idle).await;
    // The server is started for the model request, the hook before it.
    let server_dump = std::fs::read_to_string(&server_env)
        .unwrap_or_else(|e| panic!("the server did not start: {e}. Log:\n{}", s.daemon.log()));
    let hook_dump = std::fs::read_to_string(&hook_env).unwrap();
    assert!(server_dump.contains("PATH="), "{server_dump}");
    assert!(hook_dump.contains("PATH="), "{hook_dump}");
    assert_no_credentials(&hook_dump, "the hook");
    // What the user wrote in the server's own `env` is given as written;
    // nothing is inherited.
    let given: Vec<&str> = server_dump
        .lines()
        .filter(|l| l.starts_with("OPENAI_"))
        .collect();
    assert_eq!(
        given,
        ["OPENAI_ORG_ID=written-by-the-user"],
        "{server_dump}"
    );
    let without_given: String = server_dump
        .lines()
        .filter(|l| !l.starts_with("OPENAI_ORG_ID="))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_no_credentials(&without_given, "the MCP server");
}

/// The key in the daemon's environment, and the one `agent login` wrote.
const ENV_KEY: &str = "sk-env-key-0123456789abcdef";
const LOGIN_KEY: &str = "sk-login-key-0123456789abcdef";

pub(super) fn text_of(result: &Value) -> String {
    match &result["content"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Every file under `dir`, with its bytes.
pub(super) fn all_files(dir: &Path, out: &mut Vec<(std::path::PathBuf, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            all_files(&entry.path(), out);
        } else if kind.is_file() {
            out.push((
                entry.path(),
                std::fs::read(entry.path()).unwrap_or_default(),
            ));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_tool_reads_agentds_own_files_and_a_key_a_command_prints_is_redacted() {
    use std::os::unix::fs::PermissionsExt;
    let s = Scenario::new()
        .env("ANTHROPIC_API_KEY", ENV_KEY)
        // The redaction behind the sandbox: with the sandbox on (the
        // default) `cat` cannot read the credentials file at all, which
        // `sandbox::an_allowed_command_stays_inside_until_run_unsandboxed_is_approved`
        // tests; here the command runs unconfined, as where the kernel has
        // no Landlock, and what it prints is redacted.
        .config("[sandbox]\nmode = \"off\"\n")
        .scripts([
            Script::Reply(
                ReplyScript::new()
                    .tool_use(
                        "r1",
                        "read",
                        json!({"path": "xdg/config/agentd/credentials.toml"}),
                    )
                    .tool_use("r2", "read", json!({"path": "/proc/self/environ"}))
                    .tool_use("r3", "read", json!({"path": "innocent-link"}))
                    .tool_use("g1", "glob", json!({"pattern": "**/*.toml"}))
                    .tool_use("g2", "grep", json!({"pattern": "api_key"}))
                    .tool_use(
                        "b1",
                        "bash",
                        json!({"command": "cat xdg/config/agentd/credentials.toml leak.txt"}),
                    ),
            ),
            Script::text("done"),
        ])
        .start()
        .await;
    let (d, fake) = (s.daemon, s.fake);
    let mut client = s.client;
    // The conversation works in the directory that holds all of the
    // daemon's files, as a conversation in $HOME does.
    let home = d.dir.path().canonicalize().unwrap();
    let credentials = d.user_config_dir().join("credentials.toml");
    std::fs::create_dir_all(credentials.parent().unwrap()).unwrap();
    std::fs::write(
        &credentials,
        format!("[anthropic]\napi_key = \"{LOGIN_KEY}\"\n"),
    )
    .unwrap();
    std::fs::set_permissions(&credentials, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink(&credentials, home.join("innocent-link")).unwrap();
    std::fs::write(home.join("leak.txt"), format!("env key: {ENV_KEY}\n")).unwrap();
    std::fs::write(home.join("work/project.toml"), "api_key = \"not one\"\n").unwrap();

    let id = client
        .create_conversation(pb::CreateConversationRequest {
            cwd: home.display().to_string(),
            prompt: "look around".to_string(),
            allow_rules: MUTATING.iter().map(|r| r.to_string()).collect(),
            additional_dirs: vec!["/proc".to_string()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .conversation
        .unwrap()
        .id;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let requests = fake.requests();
    let last = requests.last().unwrap();
    for id in ["r1", "r2", "r3"] {
        let result = result_of(last, id);
        assert_eq!(result["is_error"], true, "{id}: {result}");
        assert!(
            text_of(&result).contains("no tool may read"),
            "{id}: {result}"
        );
    }
    let glob = text_of(&result_of(last, "g1"));
    assert!(glob.contains("work/project.toml"), "{glob}");
    assert!(
        !glob.contains("credentials.toml") && !glob.contains("config.toml"),
        "{glob}"
    );
    assert!(glob.contains("agentd's own"), "{glob}");
    let grep = text_of(&result_of(last, "g2"));
    assert!(grep.contains("work/project.toml"), "{grep}");
    assert!(!grep.contains("credentials.toml"), "{grep}");
    let bash = text_of(&result_of(last, "b1"));
    assert_eq!(
        bash.matches("[redacted: ANTHROPIC_API_KEY]").count(),
        2,
        "{bash}"
    );

    // Nothing of either key went to the model, into the store or into an
    // export.
    for request in &requests {
        let body = String::from_utf8_lossy(&request.raw_body);
        for key in [ENV_KEY, LOGIN_KEY] {
            assert!(!body.contains(key), "a request body holds {key}: {body}");
        }
    }
    let (ok, exported, err) = agent_out(&d, &["export", &id]).await;
    assert!(ok, "{err}");
    let mut stored = Vec::new();
    all_files(&d.data_dir, &mut stored);
    for key in [ENV_KEY, LOGIN_KEY] {
        assert!(!exported.contains(key), "the export holds {key}");
        for (path, bytes) in &stored {
            assert!(
                !bytes.windows(key.len()).any(|w| w == key.as_bytes()),
                "{} holds {key}",
                path.display()
            );
        }
    }
}

/// The first `sh-…` id in `text`.
fn shell_id(text: &str) -> Option<String> {
    let start = text.find("sh-")?;
    let id: String = text[start..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    Some(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_in_background_shell_output_or_an_mcp_result_is_redacted() {
    let config = format!(
        "[mcp.servers.t]\ncommand = {}\nargs = [\"stdio\"]\n",
        toml_str(env!("CARGO_BIN_EXE_test-mcp-server"))
    );
    let responder: agent_tests::fake_llm::Responder = std::sync::Arc::new(|body: &Value| {
        let turns = body["messages"]
            .as_array()
            .map(|m| m.iter().filter(|m| m["role"] == "assistant").count())
            .unwrap_or(0);
        let id = shell_id(&body["messages"].to_string()).unwrap_or_default();
        match turns {
            0 => tool(
                "b1",
                "bash",
                json!({"command": "cat leak.txt", "run_in_background": true}),
            ),
            1 => tool("w1", "bash", json!({"command": "sleep 1.5"})),
            2 => tool("o1", "bash_output", json!({"shell_id": id})),
            3 => tool(
                "m1",
                "mcp__t__echo",
                json!({"text": format!("the key is {ENV_KEY}")}),
            ),
            _ => Script::text("done"),
        }
    });
    let s = Scenario::new()
        .env("ANTHROPIC_API_KEY", ENV_KEY)
        .config(&config)
        .responder(responder)
        .start()
        .await;
    let (fake, work) = (s.fake, s.work);
    let mut client = s.client;
    let dir = work.path().canonicalize().unwrap();
    std::fs::write(dir.join("leak.txt"), format!("env key: {ENV_KEY}\n")).unwrap();
    let mut allow = MUTATING.to_vec();
    allow.push("mcp__t__echo");
    let id = create_with(
        &mut client,
        &dir,
        "go",
        &allow,
        pb::PermissionMode::Unspecified,
    )
    .await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let requests = fake.requests();
    let last = requests.last().unwrap();
    let shell = text_of(&result_of(last, "o1"));
    assert!(
        shell.contains("env key: [redacted: ANTHROPIC_API_KEY]"),
        "{shell}"
    );
    let mcp = text_of(&result_of(last, "m1"));
    assert!(mcp.contains("[redacted: ANTHROPIC_API_KEY]"), "{mcp}");
    // The model's own request may hold the key it wrote; no result does.
    for request in &requests {
        for block in request.body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .filter(|b| b["type"] == "tool_result")
        {
            assert!(!block.to_string().contains(ENV_KEY), "{block}");
        }
    }
}
