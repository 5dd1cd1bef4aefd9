//! Scenario 2, fan-out: one conversation streams many small text deltas to
//! 1, 10 and 100 attached clients, each on its own connection.
//!
//! Two measurements per client count:
//! - throughput: 100,000 deltas as fast as the fake writes them; deltas/s
//!   is what every client received divided by the time from the fake's
//!   first delta to the last client's last delta. The daemon may merge
//!   several model deltas into one frame (for a client that is behind), so
//!   deltas are counted by the fake's stamps inside the frames' text, and
//!   frames are reported apart; text a reader only got inside a resync
//!   snapshot does not count as delivered;
//! - latency: fewer deltas, paced 1 ms apart by the fake (an unpaced fake
//!   queues deltas, and queueing is not delivery latency); each delta
//!   carries the fake's send time (`⟨t=NANOS⟩`), read on receipt against the
//!   same clock.
//!
//! Then the throughput run again with 10 readers and one client that never
//! reads: the readers' numbers should not move.
//!
//! Each throughput turn ends with the whole 2.5 MB reply appended as one
//! message, sent to every client: the daemon's peak RSS over each turn
//! (`VmHWM`, reset before it) shows what that costs per client.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_proto::v1 as pb;
use tokio::sync::Barrier;

use super::stats::{Report, Target, percentile_sorted};
use super::{Attached, BenchResult, Settings, parse_stamp, procfs, unix_nanos};
use crate::fake_llm::{FakeLlm, ReplyScript};

/// What one client saw of one turn.
#[derive(Debug, Default)]
struct ClientSeen {
    /// Model deltas received in delta frames (the fake's stamps counted).
    deltas: usize,
    /// Delta frames received (one may carry several model deltas).
    frames: usize,
    /// Delivery latency of each model delta, microseconds.
    latencies_us: Vec<u32>,
    /// Snapshots after the first: the client fell behind and was resynced.
    resyncs: usize,
    /// Unix nanos of the last delta's arrival.
    last_at: u128,
    /// Sequence numbers of the first and last delta frames.
    first_seq: u64,
    last_seq: u64,
}

struct TurnResult {
    /// Per client.
    seen: Vec<ClientSeen>,
    /// Unix nanos of the first and last deltas' stamps (the fake's writes).
    first_stamp: u128,
    last_stamp: u128,
    /// What the stalled client had queued, read after the turn.
    stalled: Option<Drained>,
    /// CPU time over the turn: the daemon's and this process's (the fake
    /// and every client).
    daemon_cpu: Duration,
    bench_cpu: Duration,
    /// The daemon's peak RSS over the turn (the stalled client's reading
    /// included), and its RSS just before, MiB.
    peak_rss_mib: f64,
    rss_before_mib: f64,
}

/// Runs the scenario.
pub async fn run(settings: &Settings) -> BenchResult<Report> {
    let mut report = Report::new("fanout");
    let fake = FakeLlm::start().await;
    let daemon = super::start_daemon(&fake).await;
    let pid = daemon.pid();
    let n_throughput = settings.size(100_000, 10_000);
    let n_latency = settings.size(2_000, 300);
    let counts: &[usize] = if settings.quick {
        &[1, 10]
    } else {
        &[1, 10, 100]
    };
    report.note(format!(
        "throughput: {n_throughput} deltas of 1 character (plus the fake's time stamp, ~25 bytes \
         of text each), unpaced; latency: {n_latency} deltas paced 1 ms apart; every client on \
         its own Unix-socket connection, all clients in the bench process (they share the 2 \
         cores with the daemon and the fake)"
    ));
    for &clients in counts {
        // The 100-client throughput run moves 10 million frames: fewer runs.
        let runs = if clients >= 100 {
            settings.runs.min(3)
        } else {
            settings.runs
        };
        for _ in 0..runs {
            let t = turn(
                pid,
                &daemon.socket,
                &daemon.work_dir,
                &fake,
                clients,
                false,
                n_throughput,
                false,
            )
            .await?;
            record_throughput(
                &mut report,
                &format!("c{clients}"),
                &format!("{clients} clients"),
                &t,
                n_throughput,
            );
        }
        for _ in 0..settings.runs.min(3) {
            let t = turn(
                pid,
                &daemon.socket,
                &daemon.work_dir,
                &fake,
                clients,
                false,
                n_latency,
                true,
            )
            .await?;
            record_latency(
                &mut report,
                &format!("c{clients}"),
                &format!("{clients} clients"),
                &t,
            );
        }
    }
    if !settings.quick || counts.contains(&10) {
        for _ in 0..settings.runs {
            let t = turn(
                pid,
                &daemon.socket,
                &daemon.work_dir,
                &fake,
                10,
                true,
                n_throughput,
                false,
            )
            .await?;
            record_throughput(
                &mut report,
                "c10_stalled",
                "10 clients + 1 stalled",
                &t,
                n_throughput,
            );
            if let Some(d) = &t.stalled {
                report.note(format!(
                    "stalled client, read after the turn: {} frames buffered, {} of them delta \
                     frames carrying {} deltas, {} resync snapshot(s)",
                    d.frames, d.delta_frames, d.deltas, d.snapshots
                ));
            }
        }
        for _ in 0..settings.runs.min(3) {
            let t = turn(
                pid,
                &daemon.socket,
                &daemon.work_dir,
                &fake,
                10,
                true,
                n_latency,
                true,
            )
            .await?;
            record_latency(&mut report, "c10_stalled", "10 clients + 1 stalled", &t);
        }
    }
    report.set_target("c10_deltas_per_s", Target::AtLeast(200_000.0));
    report.set_target("c100_paced_p99_ms", Target::AtMost(5.0));
    report.set_target("c100_peak_rss_mib", Target::AtMost(100.0));
    report.note(format!(
        "daemon RSS at the end of the scenario: {:.1} MiB (peaks per turn above)",
        procfs::rss_mib(pid)
    ));
    Ok(report)
}

fn record_throughput(report: &mut Report, key: &str, label: &str, t: &TurnResult, n: usize) {
    let last = t.seen.iter().map(|s| s.last_at).max().unwrap_or(0);
    let span = last.saturating_sub(t.first_stamp) as f64 / 1e9;
    let min_deltas = t.seen.iter().map(|s| s.deltas).min().unwrap_or(0);
    let delivered: usize = t.seen.iter().map(|s| s.deltas).sum();
    let frames: usize = t.seen.iter().map(|s| s.frames).sum();
    let resyncs: usize = t.seen.iter().map(|s| s.resyncs).sum();
    let readers = t.seen.len().max(1) as f64;
    // Only deltas that arrived in delta frames count: a reader that fell
    // behind the hub's ring was sent a snapshot instead of what it missed.
    report.sample(
        &format!("{key}_deltas_per_s"),
        &format!("{label}: deltas/s received per reader (as deltas)"),
        "deltas/s",
        delivered as f64 / readers / span,
    );
    report.sample(
        &format!("{key}_frames_per_reader"),
        &format!("{label}: delta frames per reader"),
        "frames",
        frames as f64 / readers,
    );
    // The daemon numbers every event it sends out; between the first and
    // the last delta frame nearly all are deltas (merged as they were read
    // from the model's stream), so the span says how many it made. Only a
    // reader that was never resynchronised saw both ends.
    let span_seqs = t
        .seen
        .iter()
        .filter(|s| s.frames > 0 && s.resyncs == 0)
        .map(|s| s.last_seq.saturating_sub(s.first_seq) + 1)
        .max();
    if let Some(span_seqs) = span_seqs {
        report.sample(
            &format!("{key}_hub_events"),
            &format!("{label}: delta events the daemon made (sequence-number span)"),
            "events",
            span_seqs as f64,
        );
    }
    report.sample(
        &format!("{key}_complete_pct"),
        &format!("{label}: share of the deltas the worst reader got as deltas"),
        "%",
        100.0 * min_deltas as f64 / n as f64,
    );
    let fake_span = t.last_stamp.saturating_sub(t.first_stamp) as f64 / 1e9;
    report.sample(
        &format!("{key}_fake_deltas_per_s"),
        &format!("{label}: rate the fake wrote at (daemon reading)"),
        "deltas/s",
        n as f64 / fake_span,
    );
    let (p50, p99, max) = latency_summary(t);
    report.sample(
        &format!("{key}_unpaced_p50_ms"),
        &format!("{label}: latency under full load, p50"),
        "ms",
        p50,
    );
    report.sample(
        &format!("{key}_unpaced_p99_ms"),
        &format!("{label}: latency under full load, p99"),
        "ms",
        p99,
    );
    report.sample(
        &format!("{key}_unpaced_max_ms"),
        &format!("{label}: latency under full load, max"),
        "ms",
        max,
    );
    report.sample(
        &format!("{key}_daemon_us_per_frame"),
        &format!("{label}: daemon CPU per delta delivered to one client"),
        "µs",
        t.daemon_cpu.as_secs_f64() * 1e6 / delivered as f64,
    );
    report.sample(
        &format!("{key}_bench_us_per_frame"),
        &format!("{label}: bench CPU (fake + clients) per delta delivered"),
        "µs",
        t.bench_cpu.as_secs_f64() * 1e6 / delivered as f64,
    );
    report.sample(
        &format!("{key}_resyncs"),
        &format!("{label}: resync snapshots to readers"),
        "count",
        resyncs as f64,
    );
    report.sample(
        &format!("{key}_peak_rss_mib"),
        &format!("{label}: daemon peak RSS over the turn"),
        "MiB",
        t.peak_rss_mib,
    );
    report.sample(
        &format!("{key}_peak_over_before_mib"),
        &format!(
            "{label}: that, over the RSS just before the turn (earlier turns' conversations \
             stay loaded)"
        ),
        "MiB",
        t.peak_rss_mib - t.rss_before_mib,
    );
}

fn record_latency(report: &mut Report, key: &str, label: &str, t: &TurnResult) {
    let (p50, p99, max) = latency_summary(t);
    report.sample(
        &format!("{key}_paced_p50_ms"),
        &format!("{label}: latency, paced, p50"),
        "ms",
        p50,
    );
    report.sample(
        &format!("{key}_paced_p99_ms"),
        &format!("{label}: latency, paced, p99"),
        "ms",
        p99,
    );
    report.sample(
        &format!("{key}_paced_max_ms"),
        &format!("{label}: latency, paced, max"),
        "ms",
        max,
    );
}

/// p50, p99 and max delivery latency over every reader, in ms.
fn latency_summary(t: &TurnResult) -> (f64, f64, f64) {
    let mut all: Vec<u32> = t
        .seen
        .iter()
        .flat_map(|s| s.latencies_us.iter().copied())
        .collect();
    all.sort_unstable();
    let at = |p: f64| percentile_sorted(&all, p).map_or(f64::NAN, |us| f64::from(us) / 1000.0);
    (at(50.0), at(99.0), at(100.0))
}

#[expect(clippy::too_many_arguments)]
async fn turn(
    daemon_pid: u32,
    socket: &Path,
    work_dir: &Path,
    fake: &FakeLlm,
    clients: usize,
    with_stalled: bool,
    n: usize,
    paced: bool,
) -> BenchResult<TurnResult> {
    let mut client = super::client(socket).await?;
    let id = super::create(&mut client, work_dir, "", &[]).await?;
    let ready = Arc::new(Barrier::new(clients + 1));
    let mut readers = Vec::with_capacity(clients);
    for i in 0..clients {
        let mut attached = Attached::open(socket, &id, &format!("reader-{i}")).await?;
        let ready = ready.clone();
        readers.push(tokio::spawn(async move {
            ready.wait().await;
            read_turn(&mut attached).await
        }));
    }
    // Attached and never read: its connection's flow-control windows fill,
    // then the daemon's per-client buffer, then its broadcast ring lags.
    let stalled = if with_stalled {
        Some(Attached::open(socket, &id, "stalled").await?)
    } else {
        None
    };
    let mut script = ReplyScript::new().deltas(n, "x").timestamps();
    if paced {
        script = script.pace(Duration::from_millis(1));
    }
    fake.push(script.into());
    ready.wait().await;
    let rss_before_mib = procfs::rss_mib(daemon_pid);
    procfs::reset_hwm(daemon_pid);
    let daemon_before = procfs::cpu_times(daemon_pid).unwrap_or_default();
    let bench_before = procfs::cpu_times(std::process::id()).unwrap_or_default();
    super::send(&mut client, &id, "stream").await?;
    let mut seen = Vec::with_capacity(clients);
    for r in readers {
        seen.push(r.await.map_err(|e| format!("a reader panicked: {e}"))??);
    }
    let daemon_cpu = procfs::cpu_times(daemon_pid)
        .unwrap_or_default()
        .since(daemon_before)
        .own;
    let bench_cpu = procfs::cpu_times(std::process::id())
        .unwrap_or_default()
        .since(bench_before)
        .own;
    let stalled = match stalled {
        Some(mut s) => Some(drain(&mut s).await),
        None => None,
    };
    let peak_rss_mib = procfs::hwm_mib(daemon_pid);
    let (first_stamp, last_stamp) = stamps_of_reply(&mut client, &id).await?;
    Ok(TurnResult {
        peak_rss_mib,
        rss_before_mib,
        seen,
        first_stamp,
        last_stamp,
        stalled,
        daemon_cpu,
        bench_cpu,
    })
}

/// Reads one turn's frames until the conversation is idle again.
async fn read_turn(attached: &mut Attached) -> BenchResult<ClientSeen> {
    use pb::attach_response::Event;
    let mut seen = ClientSeen::default();
    let deadline = Instant::now() + Duration::from_secs(900);
    let mut busy = false;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let m = attached.next(left).await?;
        match &m.event {
            Some(Event::TextDelta(d)) => {
                let now = unix_nanos();
                seen.frames += 1;
                seen.last_at = now;
                if seen.first_seq == 0 {
                    seen.first_seq = m.seq;
                }
                seen.last_seq = m.seq;
                for stamp in stamps(&d.text) {
                    seen.deltas += 1;
                    let us = now.saturating_sub(stamp) / 1000;
                    seen.latencies_us
                        .push(u32::try_from(us).unwrap_or(u32::MAX));
                }
            }
            Some(Event::Snapshot(_)) => seen.resyncs += 1,
            _ => {}
        }
        match super::state_of(&m) {
            Some(pb::StateKind::Idle) if busy || seen.resyncs > 0 => return Ok(seen),
            Some(pb::StateKind::Error) => return Err(format!("the turn failed: {m:?}")),
            Some(pb::StateKind::Idle) | None => {}
            Some(_) => busy = true,
        }
    }
}

/// What a stalled client had queued.
#[derive(Debug, Default)]
struct Drained {
    frames: usize,
    delta_frames: usize,
    /// Model deltas in the delta frames.
    deltas: usize,
    snapshots: usize,
}

/// Reads what a stalled client had queued.
async fn drain(attached: &mut Attached) -> Drained {
    use pb::attach_response::Event;
    let mut d = Drained::default();
    while let Ok(m) = attached.next(Duration::from_millis(500)).await {
        d.frames += 1;
        match &m.event {
            Some(Event::Snapshot(_)) => d.snapshots += 1,
            Some(Event::TextDelta(t)) => {
                d.delta_frames += 1;
                d.deltas += stamps(&t.text).count();
            }
            _ => {}
        }
    }
    d
}

/// The fake's stamps in a delta frame's text: one per model delta merged
/// into it (a merged frame carries the deltas whole, stamps included).
fn stamps(text: &str) -> impl Iterator<Item = u128> + '_ {
    text.match_indices("⟨t=")
        .filter_map(|(at, _)| parse_stamp(&text[at..]))
}

/// The stamps of the first and last delta of the conversation's last reply.
async fn stamps_of_reply(
    client: &mut agent_proto::v1::agent_service_client::AgentServiceClient<
        tonic::transport::Channel,
    >,
    id: &str,
) -> BenchResult<(u128, u128)> {
    let conv = client
        .get_conversation(pb::GetConversationRequest {
            conversation_id: id.to_string(),
        })
        .await
        .map_err(|e| format!("GetConversation: {e}"))?
        .into_inner();
    let text: String = conv
        .messages
        .iter()
        .rev()
        .find(|m| m.role == pb::Role::Assistant as i32)
        .map(|m| {
            m.content
                .iter()
                .filter_map(|b| match &b.block {
                    Some(pb::content_block::Block::Text(t)) => Some(t.text.as_str()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    let first = parse_stamp(&text).ok_or("the reply has no time stamp")?;
    let last_at = text.rfind("⟨t=").ok_or("the reply has no time stamp")?;
    let last = parse_stamp(&text[last_at..]).ok_or("the reply has no time stamp")?;
    Ok((first, last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stamp_of_a_merged_frame_counts() {
        let merged = "⟨t=17⟩x⟨t=18⟩x⟨t=20⟩x";
        assert_eq!(stamps(merged).collect::<Vec<_>>(), [17, 18, 20]);
        assert_eq!(stamps("⟨t=5⟩x").count(), 1);
        assert_eq!(stamps("no stamp").count(), 0);
    }
}
