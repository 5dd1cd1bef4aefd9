//! The user's environment, per conversation (issue 41 point 1, Done-when
//! 1): commands run in the environment of the client that created the
//! conversation, never with the daemon's credentials; what `[shell.
//! environment] exclude` names is held in memory only, lost in a restart
//! and sent again with `agent set --env-from-here`; `inherit`,
//! `include_only` and `set` shape it; background shells and hooks run in it
//! as the `bash` tool does; a remote caller may not send one.

use super::remote::{LISTEN, listening, raw, secret, token};
use super::secrets::{all_files, text_of};
use super::util::{agent_out, done, result_of, send, tool, wait_state};
use agent_proto::v1 as pb;
use agent_proto::v1::agent_service_client::AgentServiceClient;
use agent_tests::harness::{Scenario, TestDaemon};
use std::collections::HashMap;
use std::path::Path;
use tonic::transport::Channel;

/// What every test's command prints: each variable it looks at (the held
/// one by its length, so the transcript does not hold its value), and
/// whether `mytool` was found on its `PATH`.
const PROBE: &str = "echo \"FOO=${FOO-unset} BAR=${BAR-unset} tok=${#MY_TOKEN} \
                     key=${ANTHROPIC_API_KEY-unset} set=${FROM_CONFIG-unset}\"; \
                     mytool || echo no-mytool";

/// A held variable's value: never on disk.
const HELD: &str = "held-token-value-0123456789";

/// A directory with an executable `mytool` that prints `mytool-ran`.
fn tool_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mytool");
    std::fs::write(&path, "#!/bin/sh\necho mytool-ran\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// `bin` before the test's own `PATH`.
fn path_with(bin: &Path) -> String {
    format!("{}:{}", bin.display(), std::env::var("PATH").unwrap())
}

/// The environment a terminal would send: `FOO`, `BAR`, a `PATH` with
/// `bin`, a `*TOKEN*` variable and a model key.
fn terminal(bin: &Path) -> pb::Environment {
    let vars: HashMap<String, String> = [
        ("FOO", "bar".to_string()),
        ("BAR", "bar".to_string()),
        ("PATH", path_with(bin)),
        ("MY_TOKEN", HELD.to_string()),
        ("ANTHROPIC_API_KEY", "sk-sent-by-the-client".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    pb::Environment { vars }
}

async fn create_in(
    client: &mut AgentServiceClient<Channel>,
    cwd: &Path,
    environment: pb::Environment,
) -> String {
    client
        .create_conversation(pb::CreateConversationRequest {
            cwd: cwd.display().to_string(),
            prompt: "probe".to_string(),
            allow_rules: vec!["bash".to_string()],
            environment: Some(environment),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .conversation
        .unwrap()
        .id
}

/// The output of the bash call `call`, once the conversation is idle.
async fn output_of(
    s: &agent_tests::fake_llm::FakeLlm,
    client: &mut AgentServiceClient<Channel>,
    id: &str,
    call: &str,
) -> String {
    wait_state(client, id, pb::StateKind::Idle).await;
    let requests = s.requests();
    let last = requests.last().unwrap();
    text_of(&result_of(last, call))
}

async fn origin(client: &mut AgentServiceClient<Channel>, id: &str) -> pb::EnvironmentOrigin {
    client
        .get_conversation(pb::GetConversationRequest {
            conversation_id: id.to_string(),
        })
        .await
        .unwrap()
        .into_inner()
        .environment
        .expect("the conversation has the client's environment")
}

/// Whether any file of the daemon's data directory holds `needle`.
fn on_disk(d: &TestDaemon, needle: &str) -> bool {
    let mut files = Vec::new();
    all_files(&d.data_dir, &mut files);
    files
        .iter()
        .any(|(_, bytes)| bytes.windows(needle.len()).any(|w| w == needle.as_bytes()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_run_in_the_creating_clients_environment_across_a_restart() {
    let s = Scenario::new()
        .scripts([
            tool("b1", "bash", serde_json::json!({ "command": PROBE })),
            done(),
            // Each call another command: three alike would be a doom loop.
            tool(
                "b2",
                "bash",
                serde_json::json!({ "command": format!("{PROBE} # 2") }),
            ),
            done(),
            tool(
                "b3",
                "bash",
                serde_json::json!({ "command": format!("{PROBE} # 3") }),
            ),
            done(),
        ])
        .start()
        .await;
    let (fake, mut d, work) = (s.fake, s.daemon, s.work);
    let mut client = s.client;
    let bin = tool_dir();
    let id = create_in(&mut client, work.path(), terminal(bin.path())).await;

    let out = output_of(&fake, &mut client, &id, "b1").await;
    assert!(
        out.contains(&format!(
            "FOO=bar BAR=bar tok={} key=unset set=unset\nmytool-ran",
            HELD.len()
        )),
        "{out}"
    );
    // The daemon's own key (the harness gives it one) is no command's.
    assert!(!out.contains("test-key"), "{out}");
    let o = origin(&mut client, &id).await;
    assert_eq!((o.variables, o.held, o.missing), (4, 1, 0), "{o:?}");
    assert!(!on_disk(&d, HELD), "a held variable was written to disk");
    assert!(on_disk(&d, &bin.path().display().to_string()));

    // After a restart the stored variables are back, the held one is not
    // until a client sends the environment again.
    d.terminate().await;
    d.restart().await;
    let mut client = d.client().await;
    send(&mut client, &id, "again").await;
    let out = output_of(&fake, &mut client, &id, "b2").await;
    assert!(
        out.contains("FOO=bar BAR=bar tok=0 key=unset set=unset\nmytool-ran"),
        "{out}"
    );
    assert_eq!(origin(&mut client, &id).await.missing, 1);
    let (ok, shown, err) = agent_out(&d, &["show", &id]).await;
    assert!(ok, "{err}");
    assert!(
        shown.contains("4 variables (1 held for the daemon's life only and lost in a restart"),
        "{shown}"
    );

    // `agent set --env-from-here` sends the terminal's as it is now.
    let refreshed = tokio::process::Command::from(d.agent())
        .args(["set", &id, "--env-from-here"])
        .env("FOO", "baz")
        .env("MY_TOKEN", HELD)
        .env("PATH", path_with(bin.path()))
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&refreshed.stdout);
    assert!(refreshed.status.success(), "{said}");
    assert!(said.contains("environment: this terminal's"), "{said}");
    send(&mut client, &id, "once more").await;
    let out = output_of(&fake, &mut client, &id, "b3").await;
    assert!(
        out.contains(&format!("FOO=baz BAR=unset tok={} key=unset", HELD.len())),
        "{out}"
    );
    assert!(out.contains("mytool-ran"), "{out}");
    assert_eq!(origin(&mut client, &id).await.missing, 0);
    assert!(!on_disk(&d, HELD), "a held variable sent again was written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inherit_none_keeps_only_what_the_config_sets() {
    let s = Scenario::new()
        .config("[shell.environment]\ninherit = \"none\"\nset = { FROM_CONFIG = \"yes\" }")
        .scripts([
            tool("b1", "bash", serde_json::json!({ "command": PROBE })),
            done(),
        ])
        .start()
        .await;
    let mut client = s.client;
    let bin = tool_dir();
    let id = create_in(&mut client, s.work.path(), terminal(bin.path())).await;
    let out = output_of(&s.fake, &mut client, &id, "b1").await;
    assert!(
        out.contains("FOO=unset BAR=unset tok=0 key=unset set=yes\n"),
        "{out}"
    );
    assert!(out.contains("no-mytool"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn include_only_lets_through_what_it_names_and_set_wins() {
    let s = Scenario::new()
        .config(
            "[shell.environment]\ninclude_only = [\"FOO\", \"PATH\", \"*token*\"]\n\
             set = { FROM_CONFIG = \"yes\", FOO = \"from-config\" }",
        )
        .scripts([
            tool("b1", "bash", serde_json::json!({ "command": PROBE })),
            done(),
        ])
        .start()
        .await;
    let mut client = s.client;
    let bin = tool_dir();
    let id = create_in(&mut client, s.work.path(), terminal(bin.path())).await;
    let out = output_of(&s.fake, &mut client, &id, "b1").await;
    assert!(
        out.contains(&format!(
            "FOO=from-config BAR=unset tok={} key=unset set=yes\nmytool-ran",
            HELD.len()
        )),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_caller_may_not_send_an_environment() {
    let s = Scenario::new()
        .conversation("")
        .config(LISTEN)
        .start()
        .await;
    let (mut client, d) = (s.client.clone(), &s.daemon);
    let at = listening(&mut client).await;
    let driver = token(d, "driver", "pilot", &[]).await;
    let mut remote = raw(&at, Some(&format!("Bearer {}", secret(&driver)))).await;
    let bin = tool_dir();
    let refused = remote
        .update_conversation(pb::UpdateConversationRequest {
            conversation_id: s.id.clone(),
            environment: Some(terminal(bin.path())),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert!(
        refused
            .message()
            .contains("a remote client may not send an environment"),
        "{refused:?}"
    );
    let refused = remote
        .create_conversation(pb::CreateConversationRequest {
            cwd: s.work.path().display().to_string(),
            environment: Some(terminal(bin.path())),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert!(
        refused.message().contains("may not send an environment"),
        "{refused:?}"
    );
    // Nothing changed: the conversation still runs in the daemon's.
    let r = client
        .get_conversation(pb::GetConversationRequest {
            conversation_id: s.id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.environment, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_shells_and_hooks_run_in_it_too() {
    let s = Scenario::new()
        .config(
            "[[hooks.post_tool_use]]\nmatcher = \"bash\"\n\
             command = \"echo hook FOO=$FOO key=${ANTHROPIC_API_KEY-unset} > hook-env.txt\"",
        )
        .scripts([
            tool(
                "b1",
                "bash",
                serde_json::json!({
                    "command": "{ echo FOO=$FOO; mytool; } > bg-env.txt",
                    "run_in_background": true,
                }),
            ),
            done(),
        ])
        .start()
        .await;
    let mut client = s.client;
    let bin = tool_dir();
    let work = s.work.path();
    let id = create_in(&mut client, work, terminal(bin.path())).await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let deadline = tokio::time::Instant::now() + agent_tests::harness::WAIT;
    let read = |name: &str| std::fs::read_to_string(work.join(name)).unwrap_or_default();
    while !read("bg-env.txt").ends_with("mytool-ran\n") && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(read("bg-env.txt"), "FOO=bar\nmytool-ran\n");
    assert_eq!(read("hook-env.txt"), "hook FOO=bar key=unset\n");
}
