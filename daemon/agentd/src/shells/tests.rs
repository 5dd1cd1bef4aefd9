use std::time::Instant;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::*;
use crate::process::{group_alive, proc_stat};

/// A manager in a fresh temporary data directory, with what it persisted
/// and the events it sent.
struct Fixture {
    _dir: tempfile::TempDir,
    cwd: PathBuf,
    spool_dir: PathBuf,
    mgr: Arc<ShellManager>,
    persisted: Arc<Mutex<Vec<ShellRecord>>>,
    events: broadcast::Receiver<ShellEvent>,
}

fn fixture(limits: ShellLimits) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().canonicalize().unwrap();
    let spool_dir = cwd.join("data").join("shells");
    let persisted = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&persisted);
    let (tx, events) = broadcast::channel(64);
    let mgr = ShellManager::new(
        spool_dir.clone(),
        limits,
        Box::new(move |r: &ShellRecord| lock(&sink).push(r.clone())),
        tx,
    );
    Fixture {
        _dir: dir,
        cwd,
        spool_dir,
        mgr,
        persisted,
        events,
    }
}

fn quick() -> ShellLimits {
    ShellLimits {
        kill_grace_ms: 500,
        ..ShellLimits::default()
    }
}

/// Waits (at most 10 s) for the shell to end and returns its record.
async fn ended(mgr: &ShellManager, id: &str) -> ShellRecord {
    tokio::time::timeout(Duration::from_secs(10), mgr.wait_output(id, u64::MAX))
        .await
        .unwrap();
    let record = mgr.get(id).unwrap();
    assert!(record.status.is_ended(), "{record:?}");
    record
}

#[tokio::test]
async fn each_line_is_read_once_across_polls() {
    let mut f = fixture(quick());
    let rec = f
        .mgr
        .spawn(
            "conv-a",
            "for i in $(seq 1 5); do echo $i; sleep 0.2; done",
            &f.cwd,
        )
        .await
        .unwrap();
    assert!(rec.id.starts_with("sh-") && rec.id.len() == 9, "{}", rec.id);
    assert_eq!(rec.status, ShellStatus::Running);
    assert_eq!(rec.cwd, f.cwd);
    assert!(rec.proc_start_ticks.is_some());

    tokio::time::sleep(Duration::from_millis(450)).await;
    let (first, r1) = f.mgr.read_new(&rec.id, None, 10_000).await.unwrap();
    assert_eq!(r1.status, ShellStatus::Running);
    assert!(!first.is_empty() && first.ends_with('\n'), "{first:?}");

    let done = ended(&f.mgr, &rec.id).await;
    assert_eq!(done.status, ShellStatus::Exited { code: 0 });
    let (second, r2) = f.mgr.read_new(&rec.id, None, 10_000).await.unwrap();
    assert_eq!(r2.status, ShellStatus::Exited { code: 0 });
    assert_eq!(format!("{first}{second}"), "1\n2\n3\n4\n5\n");
    let (third, _) = f.mgr.read_new(&rec.id, None, 10_000).await.unwrap();
    assert_eq!(third, "");

    // Stored on start and on exit; clients heard both.
    let persisted = lock(&f.persisted).clone();
    assert_eq!(persisted.first().unwrap().status, ShellStatus::Running);
    assert_eq!(persisted.last().unwrap(), &done);
    assert!(matches!(f.events.recv().await.unwrap(), ShellEvent::Started(r) if r.id == rec.id));
    assert!(matches!(f.events.recv().await.unwrap(), ShellEvent::Exited(r) if r == done));
}

#[tokio::test]
async fn read_new_filters_lines_and_read_pages_by_offset() {
    let f = fixture(quick());
    let rec = f
        .mgr
        .spawn("c", "printf 'a1\\nb2\\na3\\nb4'; exit 3", &f.cwd)
        .await
        .unwrap();
    let done = ended(&f.mgr, &rec.id).await;
    assert_eq!(done.status, ShellStatus::Exited { code: 3 });
    assert_eq!(done.output_bytes, 11);
    let re = Regex::new("^a").unwrap();
    let (text, _) = f.mgr.read_new(&rec.id, Some(&re), 1000).await.unwrap();
    assert_eq!(text, "a1\na3\n");
    // Filtered-out lines count as read.
    let (text, _) = f.mgr.read_new(&rec.id, None, 1000).await.unwrap();
    assert_eq!(text, "");

    let (bytes, r) = f.mgr.read(&rec.id, 3, 5).await.unwrap();
    assert_eq!(bytes, b"b2\na3");
    assert_eq!(r, done);
    let (bytes, _) = f.mgr.read(&rec.id, 9, 100).await.unwrap();
    assert_eq!(bytes, b"b4");
    let (bytes, _) = f.mgr.read(&rec.id, 50, 100).await.unwrap();
    assert!(bytes.is_empty());
    assert!(matches!(
        f.mgr.read("sh-nope00", 0, 10).await,
        Err(ShellError::NotFound(_))
    ));
    assert!(matches!(
        f.mgr.read_new("sh-nope00", None, 10).await,
        Err(ShellError::NotFound(_))
    ));

    let spool = f.spool_dir.join(format!("{}.log", rec.id));
    let mode = std::fs::metadata(&spool).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let mode = std::fs::metadata(&f.spool_dir)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
}

#[tokio::test]
async fn kill_takes_the_whole_group_and_is_idempotent() {
    let f = fixture(quick());
    let rec = f
        .mgr
        .spawn("c", "sleep 300 & sleep 300; wait", &f.cwd)
        .await
        .unwrap();
    let pgid = Pid::from_raw(rec.pid as i32);
    // Let bash start both sleeps.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let members = group_members(pgid);
    assert!(members.len() >= 3, "{members:?}");

    let started = Instant::now();
    let killed = f.mgr.kill(&rec.id).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(killed.status, ShellStatus::Killed);
    assert!(killed.ended_at_ms.is_some());
    assert!(!group_alive(pgid), "left: {:?}", group_members(pgid));
    assert_eq!(f.mgr.kill(&rec.id).await.unwrap(), killed);
    assert_eq!(f.mgr.get(&rec.id).unwrap(), killed);
    assert_eq!(lock(&f.persisted).last().unwrap(), &killed);
    assert!(matches!(
        f.mgr.kill("sh-nope00").await,
        Err(ShellError::NotFound(_))
    ));
}

/// Live (not zombie) pids in the group, from /proc.
fn group_members(pgid: Pid) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| proc_stat(*pid).is_some_and(|s| s.pgrp == pgid.as_raw() && s.is_alive()))
        .collect()
}

#[tokio::test]
async fn processes_left_behind_are_stopped_when_the_shell_exits() {
    let f = fixture(quick());
    let rec = f
        .mgr
        .spawn("c", "sleep 300 >/dev/null 2>&1 & echo started", &f.cwd)
        .await
        .unwrap();
    let done = ended(&f.mgr, &rec.id).await;
    assert_eq!(done.status, ShellStatus::Exited { code: 0 });
    assert!(!group_alive(Pid::from_raw(rec.pid as i32)));
    let (text, _) = f.mgr.read_new(&rec.id, None, 1000).await.unwrap();
    assert_eq!(
        text,
        "started\n[agentd: the shell exited; processes it left running were stopped]\n"
    );
}

#[tokio::test]
async fn count_limits_per_conversation_and_in_total() {
    let f = fixture(ShellLimits {
        max_total: 3,
        max_per_conversation: 2,
        ..quick()
    });
    let spawn = |conv: &'static str| f.mgr.spawn(conv, "sleep 300", &f.cwd);
    let a1 = spawn("a").await.unwrap();
    spawn("a").await.unwrap();
    let err = spawn("a").await.unwrap_err();
    assert!(matches!(err, ShellError::Limit(_)));
    assert_eq!(
        err.to_string(),
        "too many background shells in this conversation (2 running; limit 2) — kill one with \
         kill_shell first"
    );
    spawn("b").await.unwrap();
    let err = spawn("c").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "too many background shells (3 running; limit 3) — kill one with kill_shell first"
    );
    // Ended shells do not count.
    f.mgr.kill(&a1.id).await.unwrap();
    spawn("c").await.unwrap();

    assert_eq!(f.mgr.list(Some("a")).len(), 2);
    assert_eq!(f.mgr.list(Some("zzz")).len(), 0);
    let all = f.mgr.list(None);
    assert_eq!(all.len(), 4);
    // Newest first.
    assert_eq!(all.last().unwrap().id, a1.id);
    assert_eq!(all.first().unwrap().conversation_id, "c");

    f.mgr.kill_all().await;
    for r in f.mgr.list(None) {
        assert_eq!(r.status, ShellStatus::Killed, "{r:?}");
        assert!(!group_alive(Pid::from_raw(r.pid as i32)));
    }
}

#[tokio::test]
async fn output_beyond_the_cap_is_discarded_and_memory_stays_bounded() {
    const CAP: u64 = 1024 * 1024;
    let f = fixture(ShellLimits {
        max_spool_bytes: CAP,
        tail_bytes: 4096,
        ..quick()
    });
    let rec = f
        .mgr
        .spawn("c", "yes | head -c 20000000; echo done >&2", &f.cwd)
        .await
        .unwrap();
    let done = ended(&f.mgr, &rec.id).await;
    assert_eq!(done.status, ShellStatus::Exited { code: 0 });
    assert!(done.truncated);
    let marker = format!("[agentd: output beyond {CAP} bytes discarded]\n");
    let spool = std::fs::read(f.spool_dir.join(format!("{}.log", rec.id))).unwrap();
    assert_eq!(spool.len() as u64, CAP + marker.len() as u64);
    assert_eq!(done.output_bytes, spool.len() as u64);
    assert!(spool.ends_with(marker.as_bytes()));
    assert!(spool[..CAP as usize].chunks(2).all(|c| c == b"y\n"));
    assert!(f.mgr.tail_len(&rec.id) <= 4096);
    // The cap was stored when it was hit, not only at the end.
    assert!(
        lock(&f.persisted)
            .iter()
            .any(|r| r.truncated && r.status == ShellStatus::Running)
    );

    let (text, _) = f.mgr.read_new(&rec.id, None, 2000).await.unwrap();
    assert!(text.starts_with("y\ny\n"), "{text}");
    assert!(text.ends_with(&marker), "{text}");
    assert!(text.contains("[output truncated: "), "{text}");
    assert!(text.len() < 2200, "{}", text.len());
}

#[tokio::test]
async fn wait_output_wakes_on_output_and_on_exit() {
    let f = fixture(quick());
    let rec = f
        .mgr
        .spawn("c", "sleep 0.3; echo a; sleep 0.3", &f.cwd)
        .await
        .unwrap();
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), f.mgr.wait_output(&rec.id, 0))
        .await
        .unwrap();
    let woke = started.elapsed();
    assert!(woke >= Duration::from_millis(250), "{woke:?}");
    let r = f.mgr.get(&rec.id).unwrap();
    assert_eq!((r.output_bytes, &r.status), (2, &ShellStatus::Running));

    tokio::time::timeout(Duration::from_secs(5), f.mgr.wait_output(&rec.id, 2))
        .await
        .unwrap();
    let r = f.mgr.get(&rec.id).unwrap();
    assert_eq!(r.status, ShellStatus::Exited { code: 0 });
    assert_eq!(r.output_bytes, 2);
    // Ended: returns at once, whatever the offset; so does an unknown id.
    tokio::time::timeout(Duration::from_millis(100), f.mgr.wait_output(&rec.id, 2))
        .await
        .unwrap();
    tokio::time::timeout(
        Duration::from_millis(100),
        f.mgr.wait_output("sh-nope00", 0),
    )
    .await
    .unwrap();
}

fn running_record(id: &str, pid: u32, ticks: Option<u64>) -> ShellRecord {
    ShellRecord {
        id: id.to_string(),
        conversation_id: "c".to_string(),
        command: "sleep 300".to_string(),
        cwd: PathBuf::from("/"),
        pid,
        started_at_ms: 1,
        ended_at_ms: None,
        status: ShellStatus::Running,
        output_bytes: 0,
        truncated: false,
        proc_start_ticks: ticks,
        report_pending: false,
    }
}

/// A process group `bash -c 'sleep 300 & sleep 300'` of our own, as a
/// shell from before a crash would be.
fn orphan_like_group() -> (std::process::Child, u32, u64) {
    use std::os::unix::process::CommandExt;
    let child = std::process::Command::new("bash")
        .args(["-c", "sleep 300 & sleep 300"])
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = child.id();
    let ticks = proc_stat(pid as i32).unwrap().start_ticks;
    std::thread::sleep(Duration::from_millis(100));
    (child, pid, ticks)
}

#[test]
fn recover_marks_running_shells_lost_and_kills_only_provable_ones() {
    let f = fixture(quick());
    let mut dead = std::process::Command::new("true").spawn().unwrap();
    dead.wait().unwrap();
    let (mut ours, ours_pid, ours_ticks) = orphan_like_group();
    let (mut other, other_pid, other_ticks) = orphan_like_group();
    std::fs::create_dir_all(&f.spool_dir).unwrap();
    std::fs::write(f.spool_dir.join("sh-ours00.log"), "before the crash\n").unwrap();
    let exited = ShellRecord {
        status: ShellStatus::Exited { code: 0 },
        ended_at_ms: Some(5),
        ..running_record("sh-done00", 1, None)
    };

    let records = vec![
        running_record("sh-dead00", dead.id(), Some(1)),
        running_record("sh-ours00", ours_pid, Some(ours_ticks)),
        running_record("sh-othr00", other_pid, Some(other_ticks + 1)),
        running_record("sh-none00", other_pid, None),
        exited.clone(),
    ];
    let out = f.mgr.recover(records);
    // A second recovery (or a record of a shell started since) leaves the
    // known shells as they are.
    assert_eq!(
        f.mgr.recover(vec![running_record("sh-ours00", 1, None)]),
        [out[1].clone()]
    );

    assert_eq!(out.len(), 5);
    for r in &out[..4] {
        assert_eq!(r.status, ShellStatus::Lost, "{r:?}");
        assert!(r.ended_at_ms.is_some());
    }
    assert_eq!(out[4], exited);
    assert_eq!(out[1].output_bytes, 17);
    // Ours is gone, group and all; the impostor and its group live on.
    assert!(!group_alive(Pid::from_raw(ours_pid as i32)));
    assert!(group_alive(Pid::from_raw(other_pid as i32)));
    let _ = killpg(Pid::from_raw(other_pid as i32), Signal::SIGKILL);
    let _ = ours.wait();
    let _ = other.wait();

    // Every change was stored; the records stay listable and readable.
    let persisted = lock(&f.persisted).clone();
    assert_eq!(persisted, out[..4].to_vec());
    assert_eq!(f.mgr.list(None).len(), 5);
    assert_eq!(f.mgr.get("sh-ours00").unwrap().status, ShellStatus::Lost);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (bytes, _) = f.mgr.read("sh-ours00", 0, 100).await.unwrap();
        assert_eq!(bytes, b"before the crash\n");
        let (text, r) = f.mgr.read_new("sh-ours00", None, 100).await.unwrap();
        assert_eq!(
            (text.as_str(), r.status),
            ("before the crash\n", ShellStatus::Lost)
        );
        // Ended shells are not killed again.
        assert_eq!(
            f.mgr.kill("sh-ours00").await.unwrap().status,
            ShellStatus::Lost
        );
    });
}

#[test]
fn ids_are_short_and_vary() {
    let ids: std::collections::HashSet<String> = (0..1000).map(new_id).collect();
    assert!(ids.len() > 990);
    for id in &ids {
        assert_eq!(id.len(), 9);
        assert!(id.starts_with("sh-"));
        assert!(id[3..].bytes().all(|b| ID_ALPHABET.contains(&b)), "{id}");
    }
}

#[test]
fn status_reads_as_the_model_sees_it() {
    assert_eq!(ShellStatus::Running.to_string(), "running");
    assert_eq!(
        ShellStatus::Exited { code: 2 }.to_string(),
        "exited (code 2)"
    );
    assert_eq!(ShellStatus::Killed.to_string(), "killed");
    assert_eq!(ShellStatus::Lost.to_string(), "lost");
    let json = serde_json::to_string(&ShellStatus::Exited { code: 1 }).unwrap();
    assert_eq!(
        serde_json::from_str::<ShellStatus>(&json).unwrap(),
        ShellStatus::Exited { code: 1 }
    );
}

/// The manager's futures must be `Send`: the daemon awaits them in spawned
/// tasks (gRPC handlers, conversation actors).
#[test]
fn futures_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    let f = fixture(quick());
    let m = &f.mgr;
    let re = Regex::new("x").unwrap();
    assert_send(&m.spawn("c", "true", &f.cwd));
    assert_send(&m.read("sh-x", 0, 1));
    assert_send(&m.read_new("sh-x", Some(&re), 1));
    assert_send(&m.wait_output("sh-x", 0));
    assert_send(&m.kill("sh-x"));
    assert_send(&m.kill_all());
}

#[tokio::test]
async fn kill_all_stores_every_end_before_returning() {
    let f = fixture(quick());
    let a = f
        .mgr
        .spawn("a", "trap '' TERM; sleep 300", &f.cwd)
        .await
        .unwrap();
    let b = f.mgr.spawn("b", "sleep 300", &f.cwd).await.unwrap();
    let c = f.mgr.spawn("b", "true", &f.cwd).await.unwrap();
    let started = Instant::now();
    f.mgr.kill_all().await;
    // `trap '' TERM` costs the grace (500 ms), then SIGKILL.
    assert!(started.elapsed() < Duration::from_secs(3));
    let persisted = lock(&f.persisted).clone();
    for rec in [&a, &b, &c] {
        let stored = persisted.iter().rev().find(|r| r.id == rec.id).unwrap();
        assert!(stored.status.is_ended(), "{stored:?}");
        assert_eq!(stored, &f.mgr.get(&rec.id).unwrap());
        assert!(!group_alive(Pid::from_raw(rec.pid as i32)));
    }
    assert_eq!(f.mgr.get(&a.id).unwrap().status, ShellStatus::Killed);
    assert_eq!(f.mgr.get(&b.id).unwrap().status, ShellStatus::Killed);
}

#[test]
fn a_prefix_without_sh_names_the_random_part_first() {
    let ids: Vec<String> = ["sh-skgynv", "sh-zmueup", "sh-shabcd"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    // `s` starts every whole id, but only two random parts.
    assert_eq!(
        sorted(super::matching_ids(ids.iter(), "s")),
        vec!["sh-shabcd", "sh-skgynv"]
    );
    assert_eq!(super::matching_ids(ids.iter(), "z"), vec!["sh-zmueup"]);
    // `sh` starts a random part: that one wins.
    assert_eq!(super::matching_ids(ids.iter(), "sh"), vec!["sh-shabcd"]);
    // With `sh-`, whole ids.
    assert_eq!(
        sorted(super::matching_ids(ids.iter(), "sh-")),
        sorted(ids.clone())
    );
    assert_eq!(super::matching_ids(ids.iter(), "sh-z"), vec!["sh-zmueup"]);
    // No random part starts with `h`, and no whole id: nothing.
    assert!(super::matching_ids(ids.iter(), "h").is_empty());
}
