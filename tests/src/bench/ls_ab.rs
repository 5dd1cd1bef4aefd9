//! Scenario `ls-ab`: the start-up of two client builds, A and B, compared
//! (issue 40 point 5: `agent ls` before and after the client lost its ACP
//! bridge, its linker symbol list and its clap workarounds). Each run is a
//! new `CLIENT ls` process on one running daemon holding 10 conversations,
//! A and B alternating (ABAB…), so a change in the machine's load falls on
//! both alike; the median and spread of each, and the binaries' sizes.
//!
//! ```text
//! agent-bench ls-ab --client A_BIN --client B_BIN --runs 40
//! ```

use std::path::Path;

use super::stats::Report;
use super::{BenchResult, Context as _, Settings, procfs};

/// Runs the scenario: `settings.runs` runs of each client, after 3 of each
/// to warm the page cache.
pub async fn run(settings: &Settings) -> BenchResult<Report> {
    let [a, b] = settings.clients.as_slice() else {
        return Err("ls-ab compares two clients: give --client A_BIN --client B_BIN".to_string());
    };
    // Absolute: the clients run in the daemon's work directory.
    let a = &std::fs::canonicalize(a).ctx(&format!("client {}", a.display()))?;
    let b = &std::fs::canonicalize(b).ctx(&format!("client {}", b.display()))?;
    let mut report = Report::new("ls-ab");
    for (name, bin) in [("A", a), ("B", b)] {
        let size = std::fs::metadata(bin)
            .ctx(&format!("client {}", bin.display()))?
            .len();
        report.note(format!(
            "{name}: {} ({:.2} MiB)",
            bin.display(),
            procfs::mib(size)
        ));
    }
    // The fake stays up while the daemon runs.
    let (_fake, daemon) = super::daemon_with_conversations(10).await?;
    for _ in 0..3 {
        ls(&daemon, a).await?;
        ls(&daemon, b).await?;
    }
    for _ in 0..settings.runs {
        for (key, name, bin) in [("a", "A", a), ("b", "B", b)] {
            let (took, rss) = ls(&daemon, bin).await?;
            report.sample(
                &format!("ls_{key}_ms"),
                &format!("cold `agent ls` process, 10 conversations: {name}"),
                "ms",
                took,
            );
            report.sample(
                &format!("ls_{key}_rss_mib"),
                &format!("`agent ls` peak RSS: {name}"),
                "MiB",
                rss,
            );
        }
    }
    Ok(report)
}

async fn ls(daemon: &crate::harness::TestDaemon, bin: &Path) -> BenchResult<(f64, f64)> {
    super::startup::ls_process(daemon.agent_bin(bin)).await
}
