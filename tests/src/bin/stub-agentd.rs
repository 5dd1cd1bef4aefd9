//! A stand-in daemon for testing the harness itself: it takes the daemon's
//! command line, listens on `--socket`, answers `ListConversations` with an
//! empty list (every other RPC is UNIMPLEMENTED: it is agent-proto's
//! [`FakeAgent`] with one RPC scripted), logs what it was given, and exits 0
//! on SIGTERM. Not a model of agentd's behaviour.
use std::path::PathBuf;
use std::process::ExitCode;

use agent_proto::testing::{FakeAgent, rpc};
use agent_proto::v1 as pb;
use agent_proto::v1::agent_service_server::AgentServiceServer;
use tokio::signal::unix::{SignalKind, signal};
use tokio_stream::wrappers::UnixListenerStream;

/// The value after `flag`, if given.
fn flag_value(args: &[String], flag: &str) -> Option<String> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(socket) = flag_value(&args, "--socket").map(PathBuf::from) else {
        eprintln!("stub-agentd: --socket is required");
        return ExitCode::from(2);
    };
    eprintln!("stub-agentd: pid={} args={args:?}", std::process::id());
    eprintln!(
        "stub-agentd: ANTHROPIC_BASE_URL={}",
        std::env::var("ANTHROPIC_BASE_URL").unwrap_or_default()
    );
    if let Some(config) = flag_value(&args, "--config") {
        eprintln!(
            "stub-agentd: config:\n{}",
            std::fs::read_to_string(config).unwrap_or_default()
        );
    }
    if args.iter().any(|a| a == "--fail-at-start") {
        eprintln!("stub-agentd: failing at start as asked");
        return ExitCode::from(3);
    }
    if let Some(data_dir) = flag_value(&args, "--data-dir")
        && let Err(e) = std::fs::create_dir_all(&data_dir)
    {
        eprintln!("stub-agentd: cannot create {data_dir}: {e}");
        return ExitCode::FAILURE;
    }
    // A socket left by a killed predecessor.
    let _ = std::fs::remove_file(&socket);
    let listener = match tokio::net::UnixListener::bind(&socket) {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("stub-agentd: cannot bind {}: {e}", socket.display());
            return ExitCode::FAILURE;
        }
    };
    let mut sigterm = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("stub-agentd: cannot handle SIGTERM: {e}");
            return ExitCode::FAILURE;
        }
    };
    let stub = FakeAgent::new();
    stub.on::<rpc::ListConversations>(|_| Ok(pb::ListConversationsResponse::default()));
    eprintln!("stub-agentd: listening on {}", socket.display());
    let served = tonic::transport::Server::builder()
        .add_service(AgentServiceServer::new(stub))
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async move {
            sigterm.recv().await;
            eprintln!("stub-agentd: SIGTERM, exiting");
        })
        .await;
    let _ = std::fs::remove_file(&socket);
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stub-agentd: server failed: {e}");
            ExitCode::FAILURE
        }
    }
}
