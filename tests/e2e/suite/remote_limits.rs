//! What a remote peer cannot do to the daemon by opening connections
//! (issue 39, points 4 and 8): silent TCP connections and TLS connections
//! that never make a call are closed after their timeouts, remote
//! connections are capped below the open-file limit (which the daemon
//! raises to its hard limit), the local socket answers throughout, and an
//! accept loop out of descriptors pauses instead of spinning. Everything
//! runs on 127.0.0.0/8, the sources spread over its addresses.

use super::remote::{LISTEN, listening, secret, token};
use agent_proto::v1 as pb;
use agent_proto::v1::agent_service_client::AgentServiceClient;
use agent_tests::fake_llm::FakeLlm;
use agent_tests::harness::{DaemonOptions, TestDaemon, daemon_bin};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;

/// A daemon started through `sh`, its open-file limits lowered to `soft`
/// and `hard` first; the script's directory is returned to be kept.
async fn limited_daemon(
    fake: &FakeLlm,
    soft: u64,
    hard: u64,
    config: &str,
) -> (tempfile::TempDir, TestDaemon) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("limited-agentd");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nulimit -Sn {soft} && ulimit -Hn {hard} && exec '{}' \"$@\"\n",
            daemon_bin().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let d = TestDaemon::start_with(
        fake,
        DaemonOptions {
            extra_config: config.to_string(),
            daemon_bin: Some(script),
            ..Default::default()
        },
    )
    .await;
    (dir, d)
}

/// The soft and hard "Max open files" of process `pid`.
fn open_file_limits(pid: u32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let numbers: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (numbers[0], numbers[1])
}

/// A TCP connection to `to` from `from` (an address of 127.0.0.0/8).
async fn connect_from(from: Ipv4Addr, to: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(IpAddr::V4(from), 0))?;
    socket.connect(to).await
}

/// How long until the peer closes `stream` (reads end or fail), waiting
/// at most `limit`; None when it is still open then.
async fn closed_within(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
    limit: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = [0u8; 512];
    loop {
        match tokio::time::timeout(
            limit.saturating_sub(started.elapsed()),
            stream.read(&mut buf),
        )
        .await
        {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

/// CPU time (user + system) process `pid` has used, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command's closing parenthesis; utime and stime
    // are the 14th and 15th of the line.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_idle_remote_connections_lock_out_neither_the_local_user_nor_a_token() {
    let fake = FakeLlm::start().await;
    // Started with 128 open files allowed, 512 at most: the daemon raises
    // its limit to 512, and takes at most 256 remote connections.
    let config = format!("{LISTEN}\nidle_timeout_ms = 3000\n");
    let (_script, d) = limited_daemon(&fake, 128, 512, &config).await;
    assert_eq!(
        open_file_limits(d.pid()),
        (512, 512),
        "the soft limit is raised to the hard one"
    );
    let mut local = d.client().await;
    let at = listening(&mut local).await;
    let driver = token(&d, "driver", "pilot", &[]).await;
    let bearer = secret(&driver);
    let target: SocketAddr = at.0.parse().unwrap();

    // 200 TLS connections that never send a request, from 50 addresses.
    let tls = futures::future::join_all((0..200u32).map(|i| {
        let fingerprint = at.1.clone();
        async move {
            let from = Ipv4Addr::new(127, 0, 0, 2 + (i / 4) as u8);
            let attempt = async {
                let tcp = connect_from(from, target).await?;
                agent_cli::remote::handshake(tcp, &fingerprint).await
            };
            tokio::time::timeout(Duration::from_secs(10), attempt)
                .await
                .ok()
                .and_then(Result::ok)
        }
    }))
    .await;
    let mut tls: Vec<_> = tls.into_iter().flatten().collect();
    // 300 TCP connections that send nothing, from 100 other addresses.
    let mut silent = Vec::new();
    for i in 0..300u32 {
        let from = Ipv4Addr::new(127, 0, 1, 1 + (i / 3) as u8);
        silent.push(connect_from(from, target).await.unwrap());
    }
    let opened = Instant::now();

    // The local socket answers at once.
    let started = Instant::now();
    let listed = tokio::time::timeout(
        Duration::from_secs(5),
        local.list_conversations(pb::ListConversationsRequest::default()),
    )
    .await;
    let local_took = started.elapsed();
    assert!(
        matches!(listed, Ok(Ok(_))),
        "the local socket did not answer: {listed:?}"
    );
    assert!(
        local_took < Duration::from_secs(1),
        "the local socket answered in {local_took:?}"
    );

    // A remote call with a valid token gets through within seconds (the
    // silent connections' handshake timeout frees the places they held).
    let started = Instant::now();
    let remote_took = loop {
        let answered = async {
            let channel = agent_cli::remote::channel(&at.0, &at.1).await.ok()?;
            let header: tonic::metadata::AsciiMetadataValue =
                format!("Bearer {bearer}").parse().unwrap();
            let mut client =
                AgentServiceClient::with_interceptor(channel, move |mut r: tonic::Request<()>| {
                    r.metadata_mut().insert("authorization", header.clone());
                    Ok(r)
                });
            client
                .list_conversations(pb::ListConversationsRequest::default())
                .await
                .ok()
        };
        if tokio::time::timeout(Duration::from_secs(5), answered)
            .await
            .ok()
            .flatten()
            .is_some()
        {
            break started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "no remote call got through in 15 s. Log:\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        remote_took < Duration::from_secs(10),
        "a remote call took {remote_took:?}"
    );

    // Every silent connection is closed: those over the cap at once, the
    // others at the 2 s handshake timeout.
    let mut slowest = Duration::ZERO;
    for stream in &mut silent {
        let limit = Duration::from_secs(10).saturating_sub(opened.elapsed());
        let closed = closed_within(stream, limit).await;
        assert!(
            closed.is_some(),
            "a silent connection is still open after 10 s"
        );
        slowest = slowest.max(opened.elapsed());
    }
    // The TLS connections that never made a call, at the idle timeout.
    let mut open = 0;
    for stream in &mut tls {
        if closed_within(
            stream,
            Duration::from_secs(10)
                .saturating_sub(opened.elapsed())
                .max(Duration::from_millis(100)),
        )
        .await
        .is_none()
        {
            open += 1;
        }
    }
    assert_eq!(
        open,
        0,
        "of {} idle TLS connections, {open} are still open {:?} after they were made",
        tls.len(),
        opened.elapsed(),
    );
    eprintln!(
        "{} idle TLS connections, 300 silent ones: local answer in {local_took:?}, \
         remote call through in {remote_took:?}, the last silent one closed after {slowest:?}",
        tls.len()
    );
    // And the daemon kept working.
    assert!(
        local
            .list_conversations(pb::ListConversationsRequest::default())
            .await
            .is_ok()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accept_loop_out_of_descriptors_pauses_instead_of_spinning() {
    let fake = FakeLlm::start().await;
    // 96 open files and no more: 150 local connections use them up.
    let (_script, d) = limited_daemon(&fake, 96, 96, "").await;
    let mut held = Vec::new();
    for _ in 0..150 {
        held.push(tokio::net::UnixStream::connect(&d.socket).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = cpu_ticks(d.pid());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let used = cpu_ticks(d.pid()) - before;
    // A spinning loop uses a whole CPU: 200 ticks in 2 s.
    assert!(
        used < 60,
        "the daemon used {used} ticks of CPU in 2 s while out of descriptors"
    );
    let failures = d.log().matches("cannot accept a connection").count();
    assert!(failures <= 2, "{failures} lines about accept failures");
    drop(held);
    let started = Instant::now();
    let mut client = d.client().await;
    let answered = tokio::time::timeout(
        Duration::from_secs(10),
        client.list_conversations(pb::ListConversationsRequest::default()),
    )
    .await;
    assert!(matches!(answered, Ok(Ok(_))), "{answered:?}");
    eprintln!(
        "out of descriptors: {used} ticks of CPU in 2 s; answering again {:?} after the connections closed",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_failed_handshakes_is_logged_in_a_few_lines() {
    use tokio::io::AsyncWriteExt;
    let s = agent_tests::harness::Scenario::new()
        .config(LISTEN)
        .start()
        .await;
    let (mut client, d) = (s.client.clone(), &s.daemon);
    let at = listening(&mut client).await;
    let target: SocketAddr = at.0.parse().unwrap();
    let before = d.log().len();
    let started = Instant::now();
    for _ in 0..2000 {
        let mut tcp = tokio::net::TcpStream::connect(target).await.unwrap();
        let _ = tcp
            .write_all(b"GET / HTTP/1.1\r\nHost: agentd\r\n\r\n")
            .await;
        assert!(
            closed_within(&mut tcp, Duration::from_secs(10))
                .await
                .is_some(),
            "a plaintext connection was kept"
        );
    }
    let took = started.elapsed();
    let log = d.log();
    let flood = &log[before..];
    let lines: Vec<&str> = flood.lines().filter(|l| l.contains("handshake")).collect();
    assert!(
        !lines.is_empty() && lines.len() <= 3,
        "{} lines about handshakes:\n{}",
        lines.len(),
        lines[..lines.len().min(10)].join("\n")
    );
    assert!(lines[0].contains("127.0.0.1"), "{}", lines[0]);
    eprintln!(
        "2000 failed handshakes in {took:?}: {} log lines, {} bytes of log",
        lines.len(),
        flood.len()
    );
    // A client with the right certificate still gets through.
    let driver = token(d, "viewer", "after", &[]).await;
    let (ok, _, err) = super::remote::remote(d, &at, &driver, &["ls"]).await;
    assert!(ok, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_with_a_stream_open_is_not_idle() {
    use super::remote::raw;
    use super::util::{done, user_texts};
    let s = agent_tests::harness::Scenario::new()
        .scripts([done()])
        .config(&format!("{LISTEN}\nidle_timeout_ms = 1000\n"))
        .conversation("")
        .start()
        .await;
    let (mut client, d, id) = (s.client.clone(), &s.daemon, s.id.clone());
    let at = listening(&mut client).await;
    let driver = token(d, "driver", "pilot", &[]).await;
    let mut remote = raw(&at, Some(&format!("Bearer {}", secret(&driver)))).await;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(pb::AttachRequest {
        frame: Some(pb::attach_request::Frame::Subscribe(pb::Subscribe {
            conversation_id: id.clone(),
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
    stream.message().await.unwrap().unwrap();
    // Three idle timeouts pass with nothing sent either way.
    tokio::time::sleep(Duration::from_secs(3)).await;
    tx.send(pb::AttachRequest {
        frame: Some(pb::attach_request::Frame::Send(pb::SendMessageFrame {
            text: "still here".into(),
            ..Default::default()
        })),
    })
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !user_texts(&mut client, &id)
        .await
        .contains(&"still here".to_string())
    {
        assert!(
            Instant::now() < deadline,
            "the stream's frame never arrived"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Once the stream ends, the connection is idle and closed: a new call
    // on the same channel reconnects and is served.
    drop((tx, stream));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        remote
            .list_conversations(pb::ListConversationsRequest::default())
            .await
            .is_ok()
    );
    assert!(
        d.log().contains("closing a remote connection idle"),
        "the connection was not closed as idle after its stream ended"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemons_log_file_is_kept_under_its_cap() {
    let fake = FakeLlm::start().await;
    let d = TestDaemon::start_with(
        &fake,
        DaemonOptions {
            extra_config: format!("{LISTEN}\n\n[log]\nmax_bytes = 16384\n"),
            ..Default::default()
        },
    )
    .await;
    let mut client = d.client().await;
    let at = listening(&mut client).await;
    let target: SocketAddr = at.0.parse().unwrap();
    // Each address's first failed handshake is a line of about 200 bytes
    // (for the first 256 addresses of a minute): more than the 16 KiB cap.
    for i in 0..300u32 {
        let from = Ipv4Addr::new(127, 0, 2 + (i / 250) as u8, 1 + (i % 250) as u8);
        let mut tcp = connect_from(from, target).await.unwrap();
        use tokio::io::AsyncWriteExt;
        let _ = tcp.write_all(b"not TLS\r\n\r\n").await;
        assert!(
            closed_within(&mut tcp, Duration::from_secs(10))
                .await
                .is_some()
        );
    }
    let size = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let older = d.log_path.with_extension("log.1");
    assert!(size(&older) > 0, "no {} was started", older.display());
    assert!(size(&older) <= 16384, "{}", size(&older));
    assert!(size(&d.log_path) <= 16384, "{}", size(&d.log_path));
    // Standard error follows the new file.
    let stderr = std::fs::read_link(format!("/proc/{}/fd/2", d.pid())).unwrap();
    assert_eq!(stderr, d.log_path);
    // And the daemon still answers.
    assert!(
        client
            .list_conversations(pb::ListConversationsRequest::default())
            .await
            .is_ok()
    );
    eprintln!(
        "log kept at {} bytes and {} bytes in .1",
        size(&d.log_path),
        size(&older)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_redirected_without_append_loses_no_line() {
    use std::os::unix::fs::PermissionsExt;
    let fake = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("redirected.log");
    let script = dir.path().join("redirecting-agentd");
    // `2> FILE` opens the file to write at its own offset, not to append.
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nexec '{}' \"$@\" 2> '{}'\n",
            daemon_bin().display(),
            log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let d = TestDaemon::start_with(
        &fake,
        DaemonOptions {
            extra_config: LISTEN.to_string(),
            daemon_bin: Some(script),
            ..Default::default()
        },
    )
    .await;
    let mut client = d.client().await;
    listening(&mut client).await;
    let text = std::fs::read_to_string(&log).unwrap();
    // The log's lines (appended) and the start line (written to standard
    // error) are all there.
    for needle in [
        "API key from the environment",
        "agentd listening socket=",
        "agentd: listening on 127.0.0.1:",
    ] {
        assert!(text.contains(needle), "{needle} missing:\n{text}");
    }
}
