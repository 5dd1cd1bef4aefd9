//! Remote attach over TCP on 127.0.0.1 (issue 19, Done-when 2): TLS only,
//! a bearer token on every call (none, wrong, revoked and expired ones
//! refused, saying which), the certificate pinned by the client, roles
//! enforced on RPCs and Attach frames with refusals that name the rule;
//! failed attempts rate-limited; `agent attach --view-only` on the local
//! socket; and the audit trail `agent show --audit` prints.

use super::util::{Attached, agent_out, done, is_request, request_of, tool, wait_state};
use agent_proto::v1 as pb;
use agent_proto::v1::agent_service_client::AgentServiceClient;
use agent_proto::v1::attach_response::Event as Ev;
use agent_tests::harness::{Scenario, TestDaemon, WAIT};
use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;
use tonic::transport::Channel;

/// The daemon listens on an ephemeral port of 127.0.0.1.
pub(super) const LISTEN: &str = "[remote]\nlisten = \"127.0.0.1:0\"";

/// The TCP listener's address and certificate fingerprint, as the local
/// socket tells them.
pub(super) async fn listening(client: &mut AgentServiceClient<Channel>) -> (String, String) {
    let r = client
        .list_tokens(pb::ListTokensRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(r.listen_address.starts_with("127.0.0.1:"), "{r:?}");
    assert!(r.fingerprint.starts_with("SHA256:"), "{r:?}");
    (r.listen_address, r.fingerprint)
}

/// `agent token create --out FILE` on the local socket; the file's path
/// is returned (it is created 0600: the client refuses a token file
/// others can read).
pub(super) async fn token(d: &TestDaemon, role: &str, name: &str, extra: &[&str]) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let file = d.dir.path().join(format!("{name}.token"));
    let path = file.to_str().unwrap();
    let mut args = vec![
        "token", "create", "--role", role, "--name", name, "--out", path,
    ];
    args.extend_from_slice(extra);
    let (ok, out, err) = agent_out(d, &args).await;
    assert!(ok, "token create failed: {err}");
    assert!(out.is_empty(), "the token is not printed: {out}");
    assert!(err.contains("written to"), "{err}");
    let secret = std::fs::read_to_string(&file).unwrap();
    let secret = secret.trim();
    assert!(
        secret.starts_with("agentd_") && secret.len() >= 64 + 7,
        "{secret}"
    );
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{}", file.display());
    file
}

/// Runs `agent --remote ADDR --token-file FILE --fingerprint FP ARGS…`.
pub(super) async fn remote(
    d: &TestDaemon,
    (address, fingerprint): &(String, String),
    token: &std::path::Path,
    args: &[&str],
) -> (bool, String, String) {
    let mut all = vec![
        "--remote",
        address,
        "--token-file",
        token.to_str().unwrap(),
        "--fingerprint",
        fingerprint,
        "--name",
        "tester@laptop",
    ];
    all.extend_from_slice(args);
    agent_out(d, &all).await
}

/// A gRPC client over TLS to the listener that sends `authorization` as it
/// is given (or none).
pub(super) async fn raw(
    (address, fingerprint): &(String, String),
    authorization: Option<&str>,
) -> AgentServiceClient<
    tonic::service::interceptor::InterceptedService<
        Channel,
        impl tonic::service::Interceptor + Clone + use<>,
    >,
> {
    let channel = agent_cli::remote::channel(address, fingerprint)
        .await
        .unwrap();
    let header: Option<tonic::metadata::AsciiMetadataValue> =
        authorization.map(|a| a.parse().unwrap());
    AgentServiceClient::with_interceptor(channel, move |mut r: tonic::Request<()>| {
        if let Some(h) = &header {
            r.metadata_mut().insert("authorization", h.clone());
        }
        Ok(r)
    })
}

pub(super) fn secret(file: &std::path::Path) -> String {
    std::fs::read_to_string(file).unwrap().trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_calls_need_tls_a_valid_token_the_pinned_certificate_and_the_role() {
    let cmd = json!({"command": "echo remote >> log.txt"});
    let s = Scenario::new()
        .scripts([done(), tool("p1", "bash", cmd), done()])
        .config(LISTEN)
        .conversation("")
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (mut client, d, id) = (s.client.clone(), &s.daemon, s.id.clone());
    let at = listening(&mut client).await;
    assert!(
        d.log()
            .contains(&format!("certificate fingerprint {}", at.1)),
        "the fingerprint is printed at start:\n{}",
        d.log()
    );
    let viewer = token(d, "viewer", "watcher", &[]).await;
    let approver = token(d, "approver", "reviewer", &[]).await;
    let driver = token(d, "driver", "pilot", &[]).await;
    let revoked = token(d, "driver", "old", &[]).await;
    let expiring = token(d, "driver", "brief", &["--expires", "1s"]).await;

    // Every token is listed, none with its text.
    let (ok, listed, _) = agent_out(d, &["token", "ls"]).await;
    assert!(ok);
    for name in ["watcher", "reviewer", "pilot", "old", "brief"] {
        assert!(listed.contains(name), "{listed}");
    }
    assert!(!listed.contains(&secret(&driver)), "{listed}");
    assert!(listed.contains(&at.1), "ls shows the fingerprint: {listed}");
    let old_id = {
        let tokens = client
            .list_tokens(pb::ListTokensRequest {})
            .await
            .unwrap()
            .into_inner()
            .tokens;
        tokens.into_iter().find(|t| t.name == "old").unwrap().id
    };
    let (ok, out, err) = agent_out(d, &["token", "revoke", &old_id]).await;
    assert!(ok && out.contains("revoked token"), "{out}{err}");

    // A driver's token works for every command over TCP.
    let (ok, out, err) = remote(d, &at, &driver, &["ls"]).await;
    assert!(ok, "{err}");
    assert!(out.contains(&id[..8]), "{out}");

    // No token, a wrong one, a revoked one, an expired one: each refused,
    // saying which.
    let refusal = |r: Result<tonic::Response<pb::ListConversationsResponse>, tonic::Status>| {
        let s = r.unwrap_err();
        assert_eq!(s.code(), tonic::Code::Unauthenticated, "{s:?}");
        s.message().to_string()
    };
    let list = pb::ListConversationsRequest::default();
    let none = refusal(raw(&at, None).await.list_conversations(list.clone()).await);
    assert!(none.starts_with("no token"), "{none}");
    let wrong = refusal(
        raw(&at, Some("Bearer agentd_0123456789abcdef"))
            .await
            .list_conversations(list.clone())
            .await,
    );
    assert!(wrong.starts_with("wrong token"), "{wrong}");
    let was_revoked = refusal(
        raw(&at, Some(&format!("Bearer {}", secret(&revoked))))
            .await
            .list_conversations(list.clone())
            .await,
    );
    assert!(was_revoked.contains("(old) was revoked"), "{was_revoked}");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let expired = refusal(
        raw(&at, Some(&format!("Bearer {}", secret(&expiring))))
            .await
            .list_conversations(list.clone())
            .await,
    );
    assert!(expired.contains("(brief) expired"), "{expired}");
    // The CLI says the same.
    let (ok, _, err) = remote(d, &at, &revoked, &["ls"]).await;
    assert!(!ok && err.contains("was revoked"), "{err}");

    // Plaintext HTTP/2 to the TLS port gets nothing.
    let plain = tonic::transport::Endpoint::from_shared(format!("http://{}", at.0))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(5))
        .connect()
        .await;
    if let Ok(channel) = plain {
        let answered = AgentServiceClient::new(channel)
            .list_conversations(list.clone())
            .await;
        assert!(
            answered.is_err(),
            "a plaintext call was answered: {answered:?}"
        );
    }

    // The client refuses a certificate other than the pinned one.
    let wrong_pin = (at.0.clone(), format!("SHA256:{}", "00".repeat(32)));
    let (ok, _, err) = remote(d, &wrong_pin, &driver, &["ls"]).await;
    assert!(!ok, "a wrong fingerprint was accepted");
    assert!(err.contains("not the pinned SHA256:0000"), "{err}");
    assert!(
        err.contains(&at.1),
        "the error names the certificate's fingerprint: {err}"
    );

    // Commands that act on this machine's daemon process refuse --remote
    // (a remote pid must never be signalled here).
    let (ok, _, err) = remote(d, &at, &driver, &["daemon", "stop"]).await;
    assert!(!ok && err.contains("do not work with --remote"), "{err}");

    // A remote client cannot mint tokens, whatever its role.
    let (ok, _, err) = remote(d, &at, &driver, &["token", "create", "--role", "driver"]).await;
    assert!(
        !ok && err.contains("served on the local socket only"),
        "{err}"
    );

    // A viewer sees but cannot send, cancel or answer; the refusal names
    // the rule and the role.
    let (ok, out, err) = remote(d, &at, &viewer, &["show", &id]).await;
    assert!(ok, "{err}{out}");
    let (ok, _, err) = remote(d, &at, &viewer, &["send", &id, "hello"]).await;
    assert!(!ok, "a viewer sent a message");
    assert!(
        err.contains("SendMessage needs the driver role; this client is a viewer"),
        "{err}"
    );
    let (ok, _, err) = remote(d, &at, &viewer, &["cancel", &id]).await;
    assert!(
        !ok && err.contains("CancelConversation needs the driver role; this client is a viewer"),
        "{err}"
    );
    let (ok, _, err) = remote(d, &at, &viewer, &["answer", &id, "allow_once"]).await;
    assert!(
        !ok && err.contains("AnswerPermission needs the approver role; this client is a viewer"),
        "{err}"
    );
    // `run` creates on its Attach stream: refused as CreateConversation is.
    let (ok, _, err) = remote(d, &at, &viewer, &["run", "hello"]).await;
    assert!(
        !ok && err
            .contains("the Attach `create` frame needs the driver role; this client is a viewer"),
        "{err}"
    );

    // The driver sends over TCP; the turn asks for permission.
    let (ok, _, err) = remote(d, &at, &driver, &["send", &id, "first, from afar"]).await;
    assert!(ok, "{err}");
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let mut local = Attached::open(&mut client, &id, 0, "local watcher").await;
    let (ok, _, err) = remote(d, &at, &driver, &["send", &id, "log it"]).await;
    assert!(ok, "{err}");
    let request = request_of(local.until(WAIT, is_request).await.last().unwrap());

    // A viewer attached over TCP: listed with its role, its frames refused.
    let mut watching = raw(&at, Some(&format!("Bearer {}", secret(&viewer)))).await;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(pb::AttachRequest {
        frame: Some(pb::attach_request::Frame::Subscribe(pb::Subscribe {
            conversation_id: id.clone(),
            client_name: "viewer@laptop".into(),
            ..Default::default()
        })),
    })
    .await
    .unwrap();
    let mut stream = watching
        .attach(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    let Some(Ev::Snapshot(snapshot)) = first.event else {
        panic!("no snapshot first: {first:?}")
    };
    assert_eq!(snapshot.your_role, pb::ClientRole::Viewer as i32);
    let me = snapshot
        .clients
        .iter()
        .find(|c| c.client_id == snapshot.your_client_id)
        .unwrap();
    assert_eq!(
        (me.name.as_str(), me.role, me.token_name.as_str()),
        ("viewer@laptop", pb::ClientRole::Viewer as i32, "watcher")
    );
    assert!(me.address.starts_with("127.0.0.1:"), "{me:?}");
    tx.send(pb::AttachRequest {
        frame: Some(pb::attach_request::Frame::Answer(
            pb::AnswerPermissionFrame {
                request_id: request.request_id.clone(),
                decision: pb::PermissionDecision::AllowOnce as i32,
                ..Default::default()
            },
        )),
    })
    .await
    .unwrap();
    let refused = loop {
        let m = tokio::time::timeout(WAIT, stream.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let Some(Ev::Error(e)) = m.event {
            assert_eq!(m.seq, 0, "to this client only");
            break e.message;
        }
    };
    assert!(
        refused
            .contains("the Attach `answer` frame needs the approver role; this client is a viewer"),
        "{refused}"
    );

    // An approver cannot send, but answers the request.
    let (ok, _, err) = remote(d, &at, &approver, &["send", &id, "sneaky"]).await;
    assert!(
        !ok && err.contains("SendMessage needs the driver role; this client is an approver"),
        "{err}"
    );
    let (ok, _, err) = remote(d, &at, &approver, &["answer", &id, "allow_once"]).await;
    assert!(ok, "the approver's answer: {err}");
    let frames = local
        .until(WAIT, |m| matches!(m.event, Some(Ev::PermissionResolved(_))))
        .await;
    let Some(Ev::PermissionResolved(resolved)) = &frames.last().unwrap().event else {
        unreachable!()
    };
    assert_eq!(resolved.client_name, "tester@laptop");
    assert_eq!(resolved.client_role, pb::ClientRole::Approver as i32);
    wait_state(&mut client, &id, pb::StateKind::Idle).await;

    // The audit trail names who did what, with role and token, and
    // survives a restart.
    drop((watching, stream, tx, local));
    let mut d = s.daemon;
    d.terminate().await;
    d.restart().await;
    let (ok, audit, err) = agent_out(&d, &["show", "--audit", &id]).await;
    assert!(ok, "{err}");
    let lines: Vec<&str> = audit.lines().collect();
    assert_eq!(lines.len(), 3, "{audit}");
    assert!(
        lines[0].contains("tester@laptop (driver, token pilot from 127.0.0.1:")
            && lines[0].contains("sent \"first, from afar\""),
        "{audit}"
    );
    assert!(lines[1].contains("sent \"log it\""), "{audit}");
    assert!(
        lines[2].contains("tester@laptop (approver, token reviewer from 127.0.0.1:")
            && lines[2].contains("answered")
            && lines[2].contains("allow_once for bash: ")
            && lines[2].contains("echo remote"),
        "{audit}"
    );
    // Nothing the refused clients tried is in it.
    assert!(
        !audit.contains("hello") && !audit.contains("sneaky"),
        "{audit}"
    );
}

/// Issue 39, point 10: the lockout once refused a valid token too, so one
/// client with an old token file locked out everyone behind the same
/// address. The token is checked first: only calls without a valid one
/// are refused outright.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_that_keeps_failing_is_refused_but_a_good_token_still_passes() {
    let s = Scenario::new().config(LISTEN).start().await;
    let (mut client, d) = (s.client.clone(), &s.daemon);
    let at = listening(&mut client).await;
    let good = token(d, "viewer", "good", &[]).await;
    let bearer = format!("Bearer {}", secret(&good));
    let list = pb::ListConversationsRequest::default();
    assert!(
        raw(&at, Some(&bearer))
            .await
            .list_conversations(list.clone())
            .await
            .is_ok()
    );
    let mut wrong = raw(&at, Some("Bearer agentd_nope")).await;
    for _ in 0..10 {
        let s = wrong.list_conversations(list.clone()).await.unwrap_err();
        assert_eq!(s.code(), tonic::Code::Unauthenticated);
    }
    let s = wrong.list_conversations(list.clone()).await.unwrap_err();
    assert_eq!(s.code(), tonic::Code::ResourceExhausted, "{s:?}");
    assert!(
        s.message()
            .contains("too many failed authentication attempts from 127.0.0.1"),
        "{s:?}"
    );
    let none = raw(&at, None)
        .await
        .list_conversations(list.clone())
        .await
        .unwrap_err();
    assert_eq!(none.code(), tonic::Code::ResourceExhausted, "{none:?}");
    // A valid token from the same address is served.
    let served = raw(&at, Some(&bearer))
        .await
        .list_conversations(list.clone())
        .await;
    assert!(served.is_ok(), "{served:?}");
    // The local socket is not affected.
    assert!(client.list_conversations(list).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_view_only_watches_and_is_refused_a_message() {
    let s = Scenario::new()
        .scripts([done()])
        .conversation("hello")
        .start()
        .await;
    let (mut client, d, id) = (s.client.clone(), &s.daemon, s.id.clone());
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let mut watch = tokio::process::Command::from(d.agent());
    watch
        .args(["--name", "quiet@box", "attach", "--view-only", &id])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = watch.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // Presence: the others see it as a viewer.
    let mut other = Attached::open(&mut client, &id, 0, "other").await;
    let joined = other
        .until(WAIT, |m| match &m.event {
            Some(Ev::Snapshot(s)) => s.clients.iter().any(|c| c.name == "quiet@box"),
            Some(Ev::ClientAttached(a)) => a.client.as_ref().is_some_and(|c| c.name == "quiet@box"),
            _ => false,
        })
        .await;
    let quiet = match &joined.last().unwrap().event {
        Some(Ev::Snapshot(s)) => s.clients.iter().find(|c| c.name == "quiet@box").cloned(),
        Some(Ev::ClientAttached(a)) => a.client.clone(),
        _ => None,
    }
    .unwrap();
    assert_eq!(quiet.role, pb::ClientRole::Viewer as i32);
    use tokio::io::AsyncWriteExt;
    stdin.write_all(b"may I?\n").await.unwrap();
    stdin.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(stdin);
    let out = tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        all.contains("the Attach `send` frame needs the driver role; this client is a viewer"),
        "{all}"
    );
    let texts = super::util::user_texts(&mut client, &id).await;
    assert_eq!(texts, vec!["hello".to_string()], "nothing was sent");
}
