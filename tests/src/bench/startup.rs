//! Scenario 4, start-up and restart, and the client's own costs:
//! - a data directory with 10,000 conversations × 50 messages: one real
//!   conversation is built through the daemon (a 24-round turn of `think`
//!   and `bash echo` calls: 1 prompt + 24 × (call + result) + 1 answer),
//!   exported, and imported 10,000 times under new ids (ImportConversations);
//! - time from spawning the daemon to the first answered
//!   ListConversations of the newest 50, as `agent ls` asks (polled every
//!   1 ms), and its idle RSS; then the RPC listing all of them, and the
//!   idle RSS after that;
//! - cold `agent ls` (a new `test-agent` process) on that idle daemon, and
//!   on a daemon with 10 conversations;
//! - `agent run --json` of a one-round task on a running daemon: process
//!   start → the fake receives the request → the first reply text is
//!   printed → exit; the client's peak RSS and the daemon's RSS.

use std::io::{BufRead as _, BufReader, Read as _};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use agent_proto::v1 as pb;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;

use super::stats::{Report, Target};
use super::{BenchResult, Context as _, Settings, ms, procfs};
use crate::fake_llm::{FakeLlm, ReplyScript, Script};
use crate::harness::{TestDaemon, daemon_bin};

/// How many conversations `agent ls` asks for.
const LS_PAGE: usize = 50;

/// Runs the scenario.
pub async fn run(settings: &Settings) -> BenchResult<Report> {
    let mut report = Report::new("startup");
    let conversations = settings.size(10_000, 500);
    let fake = FakeLlm::start().await;
    let mut daemon = super::start_daemon(&fake).await;

    let template = build_template(&fake, &daemon).await?;
    report.note(format!(
        "data set: {conversations} conversations × {} messages ({} bytes of message text and \
         tool I/O each), imported over 4 concurrent ImportConversations streams",
        template.messages.len(),
        template.messages.iter().map(prost_len).sum::<usize>()
    ));
    let started = Instant::now();
    import_copies(&daemon.socket, &template, conversations).await?;
    let took = started.elapsed();
    report.note(format!(
        "import: {:.1} s ({:.0} conversations/s, {:.0} messages/s)",
        took.as_secs_f64(),
        conversations as f64 / took.as_secs_f64(),
        (conversations * template.messages.len()) as f64 / took.as_secs_f64()
    ));
    let db_size = dir_size(&daemon.data_dir);
    report.note(format!(
        "data directory: {:.0} MiB on disk",
        procfs::mib(db_size)
    ));
    daemon.terminate().await;

    for _ in 0..settings.runs {
        let started = Instant::now();
        let mut child = spawn_like(&daemon, &fake)?;
        let pid = child.id();
        let (listening, listed, count) =
            poll_until_listed(&daemon.socket, &mut child, started).await?;
        if count != LS_PAGE.min(conversations + 1) {
            return Err(format!(
                "the restarted daemon lists {count} conversations, not {}",
                LS_PAGE.min(conversations + 1)
            ));
        }
        report.sample(
            "spawn_to_listen_ms",
            &format!("daemon spawn → socket accepts ({conversations} conversations)"),
            "ms",
            ms(listening),
        );
        report.sample(
            "spawn_to_list_ms",
            &format!(
                "daemon spawn → first answered `agent ls` list (newest {LS_PAGE} of {conversations})"
            ),
            "ms",
            ms(listed),
        );
        report.sample(
            "startup_peak_rss_mib",
            "daemon peak RSS through start-up and one list",
            "MiB",
            procfs::hwm_mib(pid),
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        report.sample(
            "idle_rss_mib",
            &format!("idle daemon RSS, {conversations} persisted, `agent ls` answered once"),
            "MiB",
            procfs::rss_mib(pid),
        );
        let mut client = super::client(&daemon.socket).await?;
        for _ in 0..3 {
            let started = Instant::now();
            let all = super::list_states(&mut client).await?;
            report.sample(
                "list_rpc_ms",
                &format!(
                    "ListConversations RPC of all {} (`agent ls --all`)",
                    all.len()
                ),
                "ms",
                ms(started.elapsed()),
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        report.sample(
            "idle_rss_all_listed_mib",
            &format!("idle daemon RSS after listing all {conversations}"),
            "MiB",
            procfs::rss_mib(pid),
        );
        for _ in 0..3 {
            let r = agent_ls(&daemon).await?;
            report.sample(
                "ls_big_ms",
                &format!("cold `agent ls` process, {conversations} conversations"),
                "ms",
                r.0,
            );
            report.sample(
                "ls_big_rss_mib",
                &format!("`agent ls` peak RSS, {conversations} conversations"),
                "MiB",
                r.1,
            );
        }
        stop(child).await?;
    }
    // Memory before anything asks for the list (start-up recovery still
    // reads every record).
    let mut child = spawn_like(&daemon, &fake)?;
    let pid = child.id();
    let mut listening = false;
    for _ in 0..10_000 {
        if tokio::net::UnixStream::connect(&daemon.socket)
            .await
            .is_ok()
        {
            listening = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    if listening {
        tokio::time::sleep(Duration::from_secs(1)).await;
        report.sample(
            "idle_unlisted_rss_mib",
            &format!("idle daemon RSS, {conversations} persisted, never listed"),
            "MiB",
            procfs::rss_mib(pid),
        );
    }
    let _ = child.try_wait();
    stop(child).await?;
    report.set_target("spawn_to_list_ms", Target::AtMost(500.0));
    report.set_target("idle_unlisted_rss_mib", Target::AtMost(30.0));
    report.set_target("idle_rss_mib", Target::AtMost(30.0));
    drop(daemon);

    // A daemon with a handful of conversations, already running.
    let (fake, daemon) = super::daemon_with_conversations(10).await?;
    for _ in 0..settings.runs * 2 {
        let (took, rss) = agent_ls(&daemon).await?;
        report.sample(
            "ls_small_ms",
            "cold `agent ls` process, 10 conversations",
            "ms",
            took,
        );
        report.sample(
            "ls_small_rss_mib",
            "`agent ls` peak RSS, 10 conversations",
            "MiB",
            rss,
        );
    }
    report.set_target("ls_small_ms", Target::AtMost(20.0));
    report.set_target("ls_big_ms", Target::AtMost(20.0));
    // Warm the page cache for the client binary before timing it.
    agent_run(&daemon, &fake).await?;
    for _ in 0..settings.runs * 2 {
        let r = agent_run(&daemon, &fake).await?;
        report.sample(
            "run_total_ms",
            "`agent run` one-round task: process start → exit",
            "ms",
            r.total_ms,
        );
        report.sample(
            "run_to_request_ms",
            "`agent run`: process start → the fake has the request",
            "ms",
            r.to_request_ms,
        );
        report.sample(
            "run_to_first_text_ms",
            "`agent run`: process start → first reply text printed",
            "ms",
            r.to_first_text_ms,
        );
        report.sample(
            "run_first_byte_to_text_ms",
            "`agent run`: fake's first delta written → printed",
            "ms",
            r.stamp_to_print_ms,
        );
        report.sample(
            "run_client_rss_mib",
            "`agent run` client peak RSS",
            "MiB",
            r.client_rss_mib,
        );
        report.sample(
            "run_daemon_rss_mib",
            "daemon RSS after the run",
            "MiB",
            r.daemon_rss_mib,
        );
        report.sample(
            "run_daemon_anon_mib",
            "  of which anonymous (heap, stacks; the rest is the mapped binary and libraries)",
            "MiB",
            r.daemon_anon_mib,
        );
        report.sample(
            "run_memory_mib",
            "`agent run` client peak + daemon RSS",
            "MiB",
            r.client_rss_mib + r.daemon_rss_mib,
        );
        if let Some(kind) = r.first_text_in
            && !report.notes.iter().any(|n| n.contains(&kind))
        {
            report.note(format!(
                "`agent run`: the first reply text reached the client in a `{kind}` event"
            ));
        }
    }
    report.set_target("run_total_ms", Target::AtMost(60.0));
    report.set_target("run_memory_mib", Target::AtMost(30.0));
    Ok(report)
}

fn prost_len(m: &pb::Message) -> usize {
    m.content
        .iter()
        .map(|b| match &b.block {
            Some(pb::content_block::Block::Text(t)) => t.text.len(),
            Some(pb::content_block::Block::ToolUse(t)) => t.input_json.len(),
            Some(pb::content_block::Block::ToolResult(t)) => t.content.len(),
            Some(pb::content_block::Block::Thinking(t)) => t.thinking.len(),
            Some(pb::content_block::Block::Image(i)) => i.sha256.len(),
            Some(pb::content_block::Block::ServerTool(s)) => s.json.len(),
            None => 0,
        })
        .sum()
}

/// A realistic 50-message conversation, made by the daemon.
async fn build_template(
    fake: &FakeLlm,
    daemon: &TestDaemon,
) -> BenchResult<pb::ExportedConversation> {
    let mut client = super::client(&daemon.socket).await?;
    for round in 0..24 {
        let script = if round % 2 == 0 {
            ReplyScript::new().text("Let me look at that.").tool_use(
                &format!("toolu_t{round}"),
                "bash",
                json!({"command": format!("echo step {round}; seq 1 12")}),
            )
        } else {
            ReplyScript::new().tool_use(
                &format!("toolu_t{round}"),
                "think",
                json!({"thought": format!("Round {round}: the output looks right; next I check the tests in module {round}.")}),
            )
        };
        fake.push(script.into());
    }
    fake.push(Script::text(
        "Done: the change is in place and the tests pass. Summary: updated the parser, added two tests.",
    ));
    let id = super::create(
        &mut client,
        &daemon.work_dir,
        "Please fix the failing parser test in src/parse.rs and run the test suite.",
        &["bash"],
    )
    .await?;
    super::wait_all_at_rest(&mut client, 1, Duration::from_secs(60)).await?;
    let mut stream = client
        .export_conversations(pb::ExportConversationsRequest {
            conversation_ids: vec![id],
        })
        .await
        .ctx("ExportConversations")?
        .into_inner();
    let exported = stream
        .message()
        .await
        .ctx("ExportConversations")?
        .ctx("ExportConversations")?;
    if exported.messages.len() != 50 {
        return Err(format!(
            "the template conversation has {} messages, not 50",
            exported.messages.len()
        ));
    }
    Ok(exported)
}

/// A new ULID for the current time.
pub fn ulid_now() -> String {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    ulid(now)
}

/// A new ULID (Crockford base32 of 48 bits of milliseconds and 80 random bits).
fn ulid(ms: u64) -> String {
    const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let random: u128 = rand::random::<u128>() & ((1u128 << 80) - 1);
    let value = (u128::from(ms & ((1 << 48) - 1)) << 80) | random;
    (0..26)
        .map(|i| {
            let shift = 125 - 5 * i;
            char::from(ALPHABET[((value >> shift) & 31) as usize])
        })
        .collect()
}

async fn import_copies(
    socket: &Path,
    template: &pb::ExportedConversation,
    count: usize,
) -> BenchResult<()> {
    let template = Arc::new(template.clone());
    let base_ms = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
        - 86_400_000;
    let streams = 4;
    let mut tasks = Vec::new();
    for s in 0..streams {
        let mut client = super::client(socket).await?;
        let template = template.clone();
        let items = (s..count).step_by(streams).map(move |i| {
            let mut copy = (*template).clone();
            if let Some(c) = &mut copy.conversation {
                c.id = ulid(base_ms + i as u64);
                c.title = format!("{} #{i}", c.title);
            }
            copy
        });
        tasks.push(tokio::spawn(async move {
            client
                .import_conversations(futures::stream::iter(items))
                .await
                .map(|r| r.into_inner().imported)
                .map_err(|e| format!("ImportConversations: {e}"))
        }));
    }
    let mut imported = 0;
    for t in tasks {
        imported += t.await.map_err(|e| e.to_string())??;
    }
    if imported != count as u64 {
        return Err(format!("imported {imported} of {count} conversations"));
    }
    Ok(())
}

fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Starts the daemon binary exactly as the harness does (same socket, data
/// directory, configuration and environment), without its 10 ms polling.
fn spawn_like(daemon: &TestDaemon, fake: &FakeLlm) -> BenchResult<Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&daemon.log_path)
        .ctx("opening the daemon log")?;
    let log_err = log.try_clone().ctx("opening the daemon log")?;
    let mut cmd = Command::new(daemon_bin());
    cmd.arg("--socket")
        .arg(&daemon.socket)
        .arg("--data-dir")
        .arg(&daemon.data_dir)
        .arg("--config")
        .arg(&daemon.config_path);
    for (name, _) in std::env::vars_os() {
        let n = name.to_string_lossy();
        if ["AGENTD_", "ANTHROPIC_", "OPENAI_"]
            .iter()
            .any(|p| n.starts_with(p))
        {
            cmd.env_remove(name);
        }
    }
    for (var, sub) in [
        ("XDG_CONFIG_HOME", "config"),
        ("XDG_DATA_HOME", "data"),
        ("XDG_STATE_HOME", "state"),
        ("XDG_CACHE_HOME", "cache"),
        ("XDG_RUNTIME_DIR", "run"),
    ] {
        cmd.env(var, daemon.dir.path().join("xdg").join(sub));
    }
    cmd.env("ANTHROPIC_BASE_URL", fake.base_url())
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("RUST_LOG", "agentd=info")
        .current_dir(&daemon.work_dir)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .process_group(0);
    cmd.spawn().ctx("starting the daemon")
}

/// Polls every millisecond: (spawn → socket accepts, spawn → list answered,
/// conversations listed), timed from `started` (just before the spawn).
async fn poll_until_listed(
    socket: &Path,
    child: &mut Child,
    started: Instant,
) -> BenchResult<(Duration, Duration, usize)> {
    let deadline = started + Duration::from_secs(120);
    let mut listening = None;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("the daemon exited during start-up: {status}"));
        }
        if Instant::now() > deadline {
            return Err("the daemon did not answer within 120 s".to_string());
        }
        if let Ok(channel) = crate::harness::connect_uds(socket).await {
            listening.get_or_insert_with(|| started.elapsed());
            let mut client =
                agent_proto::v1::agent_service_client::AgentServiceClient::new(channel)
                    .max_decoding_message_size(512 * 1024 * 1024);
            if let Ok(list) = client
                .list_conversations(pb::ListConversationsRequest {
                    limit: LS_PAGE as u32,
                    before_id: String::new(),
                    archived: false,
                })
                .await
            {
                let listed = started.elapsed();
                return Ok((
                    listening.unwrap_or(listed),
                    listed,
                    list.into_inner().conversations.len(),
                ));
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// SIGTERM, and wait for the exit.
async fn stop(mut child: Child) -> BenchResult<()> {
    let pid = Pid::from_raw(i32::try_from(child.id()).ctx("pid")?);
    let _ = kill(pid, Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            return Ok(());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err("the daemon did not stop within 15 s of SIGTERM".to_string());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Runs `agent ls` once: (wall ms, peak RSS MiB).
async fn agent_ls(daemon: &TestDaemon) -> BenchResult<(f64, f64)> {
    ls_process(daemon.agent()).await
}

/// Runs `cmd` (a client with its `--socket`) with `ls` once, as a new
/// process: (spawn → exit in ms, peak RSS MiB).
pub(super) async fn ls_process(mut cmd: Command) -> BenchResult<(f64, f64)> {
    cmd.arg("ls").stdout(Stdio::piped()).stderr(Stdio::piped());
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let mut child = cmd.spawn().ctx("starting `agent ls`")?;
        let peak = procfs::watch_peak_rss(child.id());
        let mut out = Vec::new();
        if let Some(mut stdout) = child.stdout.take() {
            stdout.read_to_end(&mut out).ctx("reading `agent ls`")?;
        }
        let status = child.wait().ctx("waiting for `agent ls`")?;
        let took = started.elapsed();
        if !status.success() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            return Err(format!("`agent ls` failed ({status}): {err}"));
        }
        let peak = peak.join().ok().flatten().map_or(f64::NAN, procfs::mib);
        Ok((ms(took), peak))
    })
    .await
    .map_err(|e| e.to_string())?
}

struct RunTimes {
    total_ms: f64,
    to_request_ms: f64,
    to_first_text_ms: f64,
    stamp_to_print_ms: f64,
    client_rss_mib: f64,
    daemon_rss_mib: f64,
    daemon_anon_mib: f64,
    first_text_in: Option<String>,
}

/// Runs `agent --json run PROMPT` once against the running daemon.
async fn agent_run(daemon: &TestDaemon, fake: &FakeLlm) -> BenchResult<RunTimes> {
    fake.push(
        ReplyScript::new()
            .text("Hello from the fake model, done.")
            .timestamps()
            .into(),
    );
    let before = fake.request_count();
    let mut cmd = daemon.agent();
    cmd.arg("--json")
        .arg("run")
        .arg("say hello")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let daemon_pid = daemon.pid();
    let (spawned_at, total, first) = tokio::task::spawn_blocking(move || {
        let spawned_at = SystemTime::now();
        let started = Instant::now();
        let mut child = cmd.spawn().ctx("starting `agent run`")?;
        let peak = procfs::watch_peak_rss(child.id());
        let mut first = None;
        if let Some(stdout) = child.stdout.take() {
            for line in BufReader::new(stdout).lines() {
                let line = line.ctx("reading `agent run`")?;
                if first.is_none()
                    && let Some(stamp) = super::parse_stamp(&line)
                {
                    let kind = serde_json::from_str::<serde_json::Value>(&line)
                        .ok()
                        .and_then(|v| v["type"].as_str().map(str::to_string));
                    first = Some((started.elapsed(), SystemTime::now(), stamp, kind));
                }
            }
        }
        let status = child.wait().ctx("waiting for `agent run`")?;
        let total = started.elapsed();
        if !status.success() {
            return Err(format!("`agent run` failed: {status}"));
        }
        let peak = peak.join().ok().flatten().map_or(f64::NAN, procfs::mib);
        Ok((spawned_at, total, first.map(|f| (f, peak))))
    })
    .await
    .map_err(|e| e.to_string())??;
    let ((to_text, printed_at, stamp, kind), client_peak) =
        first.ctx("`agent run` printed no reply text")?;
    let requests = fake.requests();
    let request = requests.get(before).ctx("the fake saw no request")?;
    let stamp_time =
        SystemTime::UNIX_EPOCH + Duration::from_nanos(u64::try_from(stamp).unwrap_or(0));
    Ok(RunTimes {
        total_ms: ms(total),
        to_request_ms: super::secs_between(spawned_at, request.received_at) * 1000.0,
        to_first_text_ms: ms(to_text),
        stamp_to_print_ms: super::secs_between(stamp_time, printed_at) * 1000.0,
        client_rss_mib: client_peak,
        daemon_rss_mib: procfs::rss_mib(daemon_pid),
        daemon_anon_mib: procfs::status_bytes(daemon_pid, "RssAnon").map_or(f64::NAN, procfs::mib),
        first_text_in: kind,
    })
}
