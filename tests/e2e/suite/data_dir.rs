//! The data directory (issue 39, point 10): one others can enter is refused
//! at start with the command that fixes it, the checkpoint copies in it are
//! the user's alone, and a store moved aside at start keeps the copies its
//! records name.

use super::util::{MUTATING, create_with, tool, wait_state};
use agent_proto::v1 as pb;
use agent_tests::fake_llm::Script;
use agent_tests::harness::{Scenario, TestDaemon, WAIT};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Every file and directory under `dir`.
fn entries(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        out.push(entry.path());
        if entry.file_type().unwrap().is_dir() {
            entries(&entry.path(), out);
        }
    }
}

fn blobs(d: &TestDaemon) -> Vec<PathBuf> {
    let mut all = Vec::new();
    entries(&d.data_dir.join("checkpoints/blobs"), &mut all);
    all.retain(|p| p.is_file());
    all
}

/// A daemon whose conversation overwrote a file once, so that one
/// checkpoint copy is stored.
async fn with_one_copy() -> (TestDaemon, tempfile::TempDir) {
    let s = Scenario::new()
        .scripts([
            tool("w1", "write", json!({"path": "a.txt", "content": "new\n"})),
            Script::text("done"),
        ])
        .start()
        .await;
    let (d, work) = (s.daemon, s.work);
    let mut client = s.client;
    let dir = work.path().canonicalize().unwrap();
    std::fs::write(dir.join("a.txt"), "old\n").unwrap();
    let id = create_with(
        &mut client,
        &dir,
        "change it",
        MUTATING,
        pb::PermissionMode::Unspecified,
    )
    .await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    assert_eq!(blobs(&d).len(), 1, "one copy of a.txt");
    (d, work)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_others_can_enter_is_refused_and_the_copies_in_it_are_private() {
    let (mut d, _work) = with_one_copy().await;
    d.terminate().await;
    std::fs::set_permissions(&d.data_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let started = tokio::process::Command::new(agent_tests::harness::daemon_bin())
        .arg("--socket")
        .arg(d.dir.path().join("other.sock"))
        .arg("--data-dir")
        .arg(&d.data_dir)
        .arg("--config")
        .arg(&d.config_path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // A daemon that accepts the directory serves until it is killed.
    let out = tokio::time::timeout(WAIT, started.wait_with_output())
        .await
        .expect("a 0755 data directory is accepted: the daemon runs")
        .unwrap();
    assert!(!out.status.success(), "a 0755 data directory is accepted");
    let err = String::from_utf8_lossy(&out.stderr);
    let fix = format!("chmod 700 {}", d.data_dir.display());
    assert!(err.contains(&fix), "stderr: {err}");
    assert!(err.contains("--data-dir"), "stderr: {err}");
    // Fixed as told, it starts.
    std::fs::set_permissions(&d.data_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    d.restart().await;
    let mut all = Vec::new();
    entries(&d.data_dir.join("checkpoints"), &mut all);
    for path in all {
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o077, 0, "{} is {mode:o}", path.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_moved_aside_at_start_keeps_its_checkpoint_copies() {
    let (mut d, _work) = with_one_copy().await;
    d.terminate().await;
    // Older than the sweep's grace period, as after a day's work.
    let copy = blobs(&d).remove(0);
    std::fs::File::options()
        .append(true)
        .open(&copy)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(3600))
        .unwrap();
    for entry in std::fs::read_dir(d.data_dir.join("db")).unwrap().flatten() {
        if entry.file_type().unwrap().is_file() {
            std::fs::write(entry.path(), vec![0xA5u8; 4096]).unwrap();
        }
    }
    d.restart().await;
    // Retention runs as the daemon starts; give it time to be wrong.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert!(
        copy.exists(),
        "the copy of a record in the old store was swept"
    );
    let log = d.log();
    assert!(log.contains("To go back to the old store"), "{log}");
    assert!(log.contains("mv "), "{log}");
    // And at the next start too, while the old store is still there.
    d.terminate().await;
    d.restart().await;
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert!(copy.exists(), "swept at the next start");
}
