//! Scenario 5, durability cost: how many messages per second the daemon
//! appends when every write is flushed before anyone hears of it.
//!
//! The daemon has no switch for group commit: its store always groups the
//! flushes that are requested while one is running (`store::group_commit`).
//! So the comparison is between load that cannot be grouped and load that
//! can:
//! - turns: one conversation doing one-round turns back to back (each turn
//!   appends 2 messages, the prompt and the answer) vs 64 conversations
//!   doing the same at once;
//! - raw appends: ImportConversations of 2-message conversations (one
//!   transaction and one flush each) over one stream vs 16 streams.
//!
//! The fsync/fdatasync calls the daemon makes are counted with `perf stat`
//! when it is available: flushes per message show the grouping.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_proto::v1 as pb;

use super::stats::Report;
use super::{Attached, BenchResult, Settings, procfs};
use crate::fake_llm::{FakeLlm, Script};

/// Runs the scenario.
pub async fn run(settings: &Settings) -> BenchResult<Report> {
    let mut report = Report::new("durability");
    let fake = FakeLlm::start().await;
    fake.set_default(Some(Script::text("ok")));
    let daemon = super::start_daemon(&fake).await;
    let pid = daemon.pid();
    let turns_serial = settings.size(200, 30);
    let parallel = settings.size(64, 8);
    let turns_each = settings.size(20, 5);
    let imports = settings.size(2_000, 200);
    report.note(format!(
        "turns: {turns_serial} back-to-back one-round turns in 1 conversation vs {parallel} \
         conversations × {turns_each} turns at once; raw: {imports} 2-message conversations \
         imported over 1 stream vs 16 streams. sled 0.34 flushes its log with \
         sync_file_range on Linux (counted separately from fsync/fdatasync)"
    ));
    for _ in 0..settings.runs {
        let socket = daemon.socket.clone();
        let work = daemon.work_dir.clone();
        let (took, syncs) = counted(pid, async {
            let mut t = TurnLoop::new(&socket, &work).await?;
            for _ in 0..turns_serial {
                t.turn().await?;
            }
            Ok(())
        })
        .await?;
        let messages = 2 * turns_serial;
        record(
            &mut report,
            "serial_turns",
            "1 conversation, turns back to back",
            messages,
            took,
            syncs,
        );

        let (took, syncs) = counted(pid, async {
            let mut tasks = Vec::new();
            for _ in 0..parallel {
                let socket = socket.clone();
                let work = work.clone();
                tasks.push(tokio::spawn(async move {
                    let mut t = TurnLoop::new(&socket, &work).await?;
                    for _ in 0..turns_each {
                        t.turn().await?;
                    }
                    BenchResult::Ok(())
                }));
            }
            for t in tasks {
                t.await.map_err(|e| e.to_string())??;
            }
            Ok(())
        })
        .await?;
        let messages = 2 * parallel * turns_each;
        record(
            &mut report,
            "parallel_turns",
            &format!("{parallel} conversations, turns at once"),
            messages,
            took,
            syncs,
        );

        for streams in [1, 16] {
            let (took, syncs) = counted(pid, import(&socket, &work, imports, streams)).await?;
            record(
                &mut report,
                &format!("import_{streams}"),
                &format!("raw appends, {streams} import stream(s)"),
                2 * imports,
                took,
                syncs,
            );
        }
    }
    report.note(format!(
        "this disk: appending 100 bytes and fdatasync-ing takes {:.2} ms (measured by the bench)",
        fsync_cost_ms()
    ));
    Ok(report)
}

fn record(
    report: &mut Report,
    key: &str,
    label: &str,
    messages: usize,
    took: Duration,
    syncs: Option<procfs::SyncCounts>,
) {
    report.sample(
        &format!("{key}_msgs_per_s"),
        &format!("{label}: messages appended/s"),
        "msg/s",
        messages as f64 / took.as_secs_f64(),
    );
    if let Some(syncs) = syncs {
        report.sample(
            &format!("{key}_fsync_per_msg"),
            &format!("{label}: fsync+fdatasync calls per message"),
            "calls",
            syncs.fsync as f64 / messages as f64,
        );
        report.sample(
            &format!("{key}_sfr_per_msg"),
            &format!("{label}: sync_file_range calls per message"),
            "calls",
            syncs.sync_file_range as f64 / messages as f64,
        );
    }
}

/// Runs `work` while counting the daemon's sync calls: (wall time, calls).
async fn counted(
    pid: u32,
    work: impl Future<Output = BenchResult<()>>,
) -> BenchResult<(Duration, Option<procfs::SyncCounts>)> {
    let counter = tokio::task::spawn_blocking(move || procfs::SyncCounter::start(pid))
        .await
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    work.await?;
    let took = started.elapsed();
    let syncs = match counter {
        Some(c) => tokio::task::spawn_blocking(move || c.stop())
            .await
            .map_err(|e| e.to_string())?,
        None => None,
    };
    Ok((took, syncs))
}

/// One conversation and an attached client, for turn after turn.
struct TurnLoop {
    client: agent_proto::v1::agent_service_client::AgentServiceClient<tonic::transport::Channel>,
    attached: Attached,
    id: String,
    n: usize,
}

impl TurnLoop {
    async fn new(socket: &std::path::Path, work: &std::path::Path) -> BenchResult<TurnLoop> {
        let mut client = super::client(socket).await?;
        let id = super::create(&mut client, work, "", &[]).await?;
        let attached = Attached::open(socket, &id, "bench").await?;
        Ok(TurnLoop {
            client,
            attached,
            id,
            n: 0,
        })
    }

    /// Sends a message and waits for the answer.
    async fn turn(&mut self) -> BenchResult<()> {
        self.n += 1;
        super::send(&mut self.client, &self.id, &format!("message {}", self.n)).await?;
        let mut busy = false;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let m = self
                .attached
                .next(deadline.saturating_duration_since(Instant::now()))
                .await?;
            match super::state_of(&m) {
                Some(pb::StateKind::Idle) if busy => return Ok(()),
                Some(pb::StateKind::Error) => return Err(format!("a turn failed: {m:?}")),
                Some(pb::StateKind::Idle) | None => {}
                Some(_) => busy = true,
            }
        }
    }
}

/// Imports `count` conversations of 2 messages over `streams` streams.
async fn import(
    socket: &std::path::Path,
    work: &std::path::Path,
    count: usize,
    streams: usize,
) -> BenchResult<()> {
    let cwd = work.display().to_string();
    let template = Arc::new(pb::ExportedConversation {
        images: Vec::new(),
        conversation: Some(pb::ConversationSummary {
            title: "imported".to_string(),
            cwd,
            model: "claude-test".to_string(),
            mode: pb::PermissionMode::Default as i32,
            ..Default::default()
        }),
        messages: vec![
            message(1, pb::Role::User, "What does this function do?"),
            message(
                2,
                pb::Role::Assistant,
                "It parses the header and returns the length.",
            ),
        ],
    });
    let mut tasks = Vec::new();
    for s in 0..streams {
        let mut client = super::client(socket).await?;
        let template = template.clone();
        let items = (s..count).step_by(streams).map(move |_| {
            let mut copy = (*template).clone();
            if let Some(c) = &mut copy.conversation {
                c.id = super::startup::ulid_now();
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
        return Err(format!("imported {imported} of {count}"));
    }
    Ok(())
}

fn message(seq: u64, role: pb::Role, text: &str) -> pb::Message {
    pb::Message {
        seq,
        role: role as i32,
        content: vec![pb::ContentBlock {
            block: Some(pb::content_block::Block::Text(pb::TextBlock {
                text: text.to_string(),
            })),
        }],
        ..Default::default()
    }
}

/// The cost of appending 100 bytes to a file and `fdatasync`ing it (what
/// a durable log append costs), in the system's temporary directory (the
/// daemon's data is there too), in ms.
fn fsync_cost_ms() -> f64 {
    use std::io::Write as _;
    let Ok(named) = tempfile::NamedTempFile::new() else {
        return f64::NAN;
    };
    let mut file = named.as_file();
    let n = 100;
    let started = Instant::now();
    for _ in 0..n {
        if file.write_all(&[b'x'; 100]).is_err() || file.sync_data().is_err() {
            return f64::NAN;
        }
    }
    super::ms(started.elapsed()) / f64::from(n)
}
