//! What a token's revocation or expiry does to what it opened before
//! (issue 39, point 5): an Attach stream over TCP ends with
//! UNAUTHENTICATED, nothing it sends afterwards is done or recorded in the
//! audit; and the smaller points of 10 about remote callers.

use super::remote::{LISTEN, listening, raw, secret, token};
use super::util::{agent_out, done, user_texts, wait_state};
use agent_proto::v1 as pb;
use agent_proto::v1::attach_response::Event as Ev;
use agent_tests::harness::{Scenario, WAIT};
use std::time::{Duration, Instant};

/// The id of the token called `name`.
async fn token_id(
    client: &mut agent_proto::v1::agent_service_client::AgentServiceClient<
        tonic::transport::Channel,
    >,
    name: &str,
) -> String {
    let tokens = client
        .list_tokens(pb::ListTokensRequest {})
        .await
        .unwrap()
        .into_inner()
        .tokens;
    tokens.into_iter().find(|t| t.name == name).unwrap().id
}

fn send(text: &str) -> pb::AttachRequest {
    pb::AttachRequest {
        frame: Some(pb::attach_request::Frame::Send(pb::SendMessageFrame {
            text: text.into(),
            ..Default::default()
        })),
    }
}

/// Reads `stream` until it ends with an error status, which is returned
/// (None when it ends without one or `limit` passes).
async fn ending(
    stream: &mut tonic::Streaming<pb::AttachResponse>,
    limit: Duration,
) -> Option<tonic::Status> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, stream.message()).await {
            Err(_) | Ok(Ok(None)) => return None,
            Ok(Err(status)) => return Some(status),
            Ok(Ok(Some(_))) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_or_expiring_a_token_ends_its_live_streams() {
    let s = Scenario::new()
        .scripts([done(), done(), done()])
        .config(LISTEN)
        .conversation("")
        .start()
        .await;
    let (mut client, d, id) = (s.client.clone(), &s.daemon, s.id.clone());
    let at = listening(&mut client).await;
    let driver = token(d, "driver", "pilot", &[]).await;
    let brief = token(d, "viewer", "brief", &["--expires", "3s"]).await;

    // A driver attached over TCP sends a message.
    let mut remote = raw(&at, Some(&format!("Bearer {}", secret(&driver)))).await;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(pb::AttachRequest {
        frame: Some(pb::attach_request::Frame::Subscribe(pb::Subscribe {
            conversation_id: id.clone(),
            client_name: "pilot@laptop".into(),
            ..Default::default()
        })),
    })
    .await
    .unwrap();
    let mut stream = remote
        .attach(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    assert!(matches!(first.event, Some(Ev::Snapshot(_))), "{first:?}");
    tx.send(send("before the revocation")).await.unwrap();
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    tokio::time::timeout(WAIT, async {
        while !user_texts(&mut client, &id)
            .await
            .contains(&"before the revocation".to_string())
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap();

    // A viewer whose token expires in 3 s watches too.
    let mut watcher = raw(&at, Some(&format!("Bearer {}", secret(&brief)))).await;
    let (_watch_tx, watch_rx) = tokio::sync::mpsc::channel(4);
    _watch_tx
        .send(pb::AttachRequest {
            frame: Some(pb::attach_request::Frame::Subscribe(pb::Subscribe {
                conversation_id: id.clone(),
                ..Default::default()
            })),
        })
        .await
        .unwrap();
    let mut watching = watcher
        .attach(tokio_stream::wrappers::ReceiverStream::new(watch_rx))
        .await
        .unwrap()
        .into_inner();

    // Revoked on the daemon's machine: the driver's stream ends, saying so.
    let pilot = token_id(&mut client, "pilot").await;
    let revoked_at = Instant::now();
    let (ok, _, err) = agent_out(d, &["token", "revoke", &pilot]).await;
    assert!(ok, "{err}");
    // Whatever it sends from now on is neither done nor recorded.
    let _ = tx.send(send("after the revocation")).await;
    let ended = ending(&mut stream, WAIT).await;
    let took = revoked_at.elapsed();
    let status = ended.expect("the revoked token's stream did not end with a status");
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
    assert!(
        status.message().contains("(pilot) was revoked"),
        "{status:?}"
    );
    let _ = tx.send(send("after the end")).await;

    // The expired token's stream ends too.
    let status = ending(&mut watching, WAIT)
        .await
        .expect("the expired token's stream did not end with a status");
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
    assert!(status.message().contains("(brief) expired"), "{status:?}");

    tokio::time::sleep(Duration::from_millis(300)).await;
    let texts = user_texts(&mut client, &id).await;
    assert_eq!(texts, vec!["before the revocation".to_string()]);
    let (ok, audit, err) = agent_out(d, &["show", "--audit", &id]).await;
    assert!(ok, "{err}");
    assert!(audit.contains("before the revocation"), "{audit}");
    assert!(!audit.contains("after the"), "{audit}");
    eprintln!("the revoked token's stream ended {took:?} after `agent token revoke` began");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_files_are_private_and_the_client_refuses_one_that_is_not() {
    use std::os::unix::fs::PermissionsExt;
    let s = Scenario::new().config(LISTEN).start().await;
    let (mut client, d) = (s.client.clone(), &s.daemon);
    let at = listening(&mut client).await;
    // Printed on stdout without --out, as before.
    let (ok, printed, err) = agent_out(
        d,
        &["token", "create", "--role", "viewer", "--name", "shown"],
    )
    .await;
    assert!(ok, "{err}");
    assert!(printed.trim().starts_with("agentd_"), "{printed}");
    // A token file others can read is refused, saying how to fix it.
    let loose = d.dir.path().join("loose.token");
    std::fs::write(&loose, printed.trim()).unwrap();
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (ok, _, err) = super::remote::remote(d, &at, &loose, &["ls"]).await;
    assert!(!ok, "a world-readable token file was used");
    assert!(
        err.contains("is accessible by others (mode 644)")
            && err.contains(&format!("chmod 600 {}", loose.display())),
        "{err}"
    );
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (ok, _, err) = super::remote::remote(d, &at, &loose, &["ls"]).await;
    assert!(ok, "{err}");
    // --out over a file others could read leaves a private one.
    let (ok, _, err) = agent_out(
        d,
        &[
            "token",
            "create",
            "--role",
            "viewer",
            "--out",
            loose.to_str().unwrap(),
        ],
    )
    .await;
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(ok, "{err}");
    let (ok, _, err) = agent_out(
        d,
        &[
            "token",
            "create",
            "--role",
            "viewer",
            "--out",
            loose.to_str().unwrap(),
        ],
    )
    .await;
    assert!(ok, "{err}");
    let mode = std::fs::metadata(&loose).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let (ok, _, err) = super::remote::remote(d, &at, &loose, &["ls"]).await;
    assert!(ok, "{err}");
    // Nothing else is left beside it.
    let left: Vec<_> = std::fs::read_dir(d.dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_driver_has_the_model_checked_and_not_often() {
    let s = Scenario::new()
        .scripts([done(), done(), done(), done()])
        .config(LISTEN)
        .start()
        .await;
    let (mut client, d) = (s.client.clone(), &s.daemon);
    let at = listening(&mut client).await;
    let viewer = token(d, "viewer", "watcher", &[]).await;
    let driver = token(d, "driver", "pilot", &[]).await;
    let check = pb::GetDaemonInfoRequest { check_model: true };
    let requests = || s.fake.requests().len();
    let before = requests();
    // A viewer sees the daemon's info, but makes no paid request.
    let mut watching = raw(&at, Some(&format!("Bearer {}", secret(&viewer)))).await;
    assert!(
        watching
            .get_daemon_info(pb::GetDaemonInfoRequest { check_model: false })
            .await
            .is_ok()
    );
    let refused = watching.get_daemon_info(check).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert!(
        refused.message().contains("needs the driver role"),
        "{refused:?}"
    );
    assert_eq!(requests(), before, "the viewer made a model request");
    // A driver may, once per 10 s.
    let mut driving = raw(&at, Some(&format!("Bearer {}", secret(&driver)))).await;
    let answered = driving.get_daemon_info(check).await.unwrap().into_inner();
    assert!(
        answered.model_check.as_ref().is_some_and(|c| c.ok),
        "{answered:?}"
    );
    let again = driving.get_daemon_info(check).await.unwrap_err();
    assert_eq!(again.code(), tonic::Code::ResourceExhausted, "{again:?}");
    assert!(again.message().contains("try again in"), "{again:?}");
    assert_eq!(requests(), before + 1);
    // The local user is not limited (`agent doctor` twice in a row).
    for _ in 0..2 {
        let local = client.get_daemon_info(check).await.unwrap().into_inner();
        assert!(local.model_check.is_some_and(|c| c.ok));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listening_on_every_interface_is_warned_about() {
    let s = Scenario::new()
        .config("[remote]\nlisten = \"0.0.0.0:0\"")
        .start()
        .await;
    let log = s.daemon.log();
    let warning = log
        .lines()
        .find(|l| l.starts_with("agentd: WARNING: listening on 0.0.0.0:"))
        .unwrap_or_else(|| panic!("no warning on standard error:\n{log}"));
    assert!(
        warning.contains("reaches every network this machine is on"),
        "{warning}"
    );
    // And in the log proper.
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("reaches every network")),
        "{log}"
    );
    // An address of one interface is not warned about.
    let local = Scenario::new().config(LISTEN).start().await;
    assert!(!local.daemon.log().contains("reaches every network"));
}

/// The DER bytes of the first certificate in the PEM file `path`.
fn certificate_der(path: &std::path::Path) -> Vec<u8> {
    use base64::Engine;
    let pem = std::fs::read_to_string(path).unwrap();
    let body: String = pem
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN CERTIFICATE"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_certificate_names_the_listen_address_and_the_configured_names() {
    let s = Scenario::new()
        .config(&format!("{LISTEN}\ncert_names = [\"work.example\"]"))
        .start()
        .await;
    let mut d = s.daemon;
    let cert = d.data_dir.join("tls/cert.pem");
    let der = certificate_der(&cert);
    // A SAN of IP 127.0.0.1 (tag 7, four octets) and of DNS work.example
    // (tag 2).
    let ip = [0x87, 4, 127, 0, 0, 1];
    assert!(der.windows(ip.len()).any(|w| w == ip), "no 127.0.0.1 SAN");
    let mut dns = vec![0x82, 12];
    dns.extend_from_slice(b"work.example");
    assert!(der.windows(dns.len()).any(|w| w == dns.as_slice()));
    let first = s.client.clone().list_tokens(pb::ListTokensRequest {}).await;
    let first = first.unwrap().into_inner().fingerprint;
    // Restarted with the same names: the same certificate.
    d.terminate().await;
    d.restart().await;
    let again = d.client().await.list_tokens(pb::ListTokensRequest {}).await;
    assert_eq!(again.unwrap().into_inner().fingerprint, first);
    assert!(!d.log().contains("NEW: the certificate"), "{}", d.log());
    // A new name: made again, and the start line says so.
    let config = std::fs::read_to_string(&d.config_path).unwrap().replace(
        "cert_names = [\"work.example\"]",
        "cert_names = [\"work.example\", \"other.example\"]",
    );
    std::fs::write(&d.config_path, config).unwrap();
    d.terminate().await;
    d.restart().await;
    let changed = d.client().await.list_tokens(pb::ListTokensRequest {}).await;
    let changed = changed.unwrap().into_inner().fingerprint;
    assert_ne!(changed, first);
    let log = d.log();
    let start = log
        .lines()
        .find(|l| l.contains(&format!("certificate fingerprint {changed}")))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        start.contains("NEW: the certificate was made again to name other.example"),
        "{start}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_a_token_ends_its_shell_output_follow() {
    use super::util::tool;
    let s = Scenario::new()
        .scripts([
            tool(
                "b1",
                "bash",
                serde_json::json!({"command": "echo started; sleep 60", "run_in_background": true}),
            ),
            done(),
        ])
        .config(LISTEN)
        .start()
        .await;
    let (mut client, d, work) = (s.client.clone(), &s.daemon, &s.work);
    let cwd = work.path().display().to_string();
    let (ok, _, err) = agent_out(d, &["run", "--allow", "bash", "--cwd", &cwd, "start it"]).await;
    assert!(ok, "{err}");
    let shells = client
        .list_shells(pb::ListShellsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .shells;
    let sid = shells[0].id.clone();
    let at = listening(&mut client).await;
    let viewer = token(d, "viewer", "follower", &[]).await;
    let mut remote = raw(&at, Some(&format!("Bearer {}", secret(&viewer)))).await;
    let mut output = remote
        .read_shell_output(pb::ReadShellOutputRequest {
            shell_id: sid.clone(),
            offset: 0,
            follow: true,
        })
        .await
        .unwrap()
        .into_inner();
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("started") {
        let chunk = tokio::time::timeout(WAIT, output.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        seen.extend_from_slice(&chunk.data);
    }
    let id = token_id(&mut client, "follower").await;
    let (ok, _, err) = agent_out(d, &["token", "revoke", &id]).await;
    assert!(ok, "{err}");
    let ended = tokio::time::timeout(WAIT, async {
        loop {
            match output.message().await {
                Ok(Some(_)) => {}
                Ok(None) => return None,
                Err(status) => return Some(status),
            }
        }
    })
    .await
    .expect("the follow went on after the revocation");
    let status = ended.expect("the follow ended without saying why");
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
    assert!(
        status.message().contains("(follower) was revoked"),
        "{status:?}"
    );
    let (ok, _, err) = agent_out(d, &["shells", "kill", &sid]).await;
    assert!(ok, "{err}");
}
