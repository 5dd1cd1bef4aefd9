use super::*;
use crate::tools::ToolContext;
use serde_json::json;

struct Fixture {
    _data: tempfile::TempDir,
    _work: tempfile::TempDir,
    cp: Arc<Checkpoints>,
    ctx: ToolContext,
}

fn fixture(config: CheckpointsSection) -> Fixture {
    let data = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let store = Store::open(&data.path().join("db")).unwrap();
    let mut cp = Checkpoints::open(&store, &data.path().join("checkpoints"), config).unwrap();
    cp.sweep_grace = std::time::Duration::ZERO;
    let cwd = work.path().canonicalize().unwrap();
    Fixture {
        _data: data,
        ctx: ToolContext::new(cwd),
        _work: work,
        cp: Arc::new(cp),
    }
}

fn key(turn: u64, id: &str, at_ms: i64) -> CallKey {
    CallKey {
        conversation_id: "c1".into(),
        turn,
        tool_use_id: id.into(),
        at_ms,
    }
}

impl Fixture {
    fn path(&self, name: &str) -> PathBuf {
        self.ctx.cwd.join(name)
    }

    /// A `write` call as the runner makes it: checkpoint, write, complete.
    async fn write(&self, turn: u64, id: &str, at_ms: i64, name: &str, content: &str) {
        let input = json!({"path": name, "content": content});
        let pending = self
            .cp
            .before(key(turn, id, at_ms), "write", &input, &self.ctx)
            .await;
        std::fs::write(self.path(name), content).unwrap();
        if let Some(p) = pending {
            self.cp.after(p).await;
        }
    }

    fn blob_count(&self) -> usize {
        self.cp.blobs.list().unwrap().len()
    }
}

#[tokio::test]
async fn the_same_prior_content_is_stored_once() {
    let f = fixture(CheckpointsSection::default());
    std::fs::write(f.path("a.txt"), "same").unwrap();
    std::fs::write(f.path("b.txt"), "same").unwrap();
    f.write(1, "t1", 1, "a.txt", "new a").await;
    f.write(1, "t2", 2, "b.txt", "new b").await;
    assert_eq!(f.blob_count(), 1, "two files with one content: one blob");
    let records = f.cp.records("c1").unwrap();
    assert_eq!(records.len(), 2);
    assert!(records[0].0 < records[1].0, "records keep their order");
    let turns = f.cp.turns("c1").unwrap();
    assert_eq!(turns.len(), 1);
    assert_eq!((turns[0].turn, turns[0].calls), (1, 2));
}

#[tokio::test]
async fn a_call_that_changes_nothing_leaves_no_record() {
    let f = fixture(CheckpointsSection::default());
    std::fs::write(f.path("a.txt"), "one").unwrap();
    let input = json!({"path": "a.txt", "content": "two"});
    let pending = f.cp.before(key(1, "t1", 1), "write", &input, &f.ctx).await;
    // The call failed: the file is as it was.
    f.cp.after(pending.unwrap()).await;
    assert!(f.cp.records("c1").unwrap().is_empty());
    // Tools that change nothing are not checkpointed at all.
    let read = json!({"path": "a.txt"});
    assert!(
        f.cp.before(key(1, "t2", 1), "read", &read, &f.ctx)
            .await
            .is_none()
    );
}

#[tokio::test]
async fn restore_brings_back_every_file_and_removes_created_ones() {
    let f = fixture(CheckpointsSection::default());
    std::fs::write(f.path("a.txt"), "a0").unwrap();
    f.write(1, "t1", 1, "a.txt", "a1").await;
    f.write(3, "t2", 2, "a.txt", "a2").await;
    f.write(3, "t3", 3, "new.txt", "created").await;
    // To before turn 3: a.txt as turn 1 left it, new.txt gone.
    let done =
        f.cp.restore("c1", Since::Turn(3), false, false)
            .await
            .unwrap();
    assert_eq!(std::fs::read_to_string(f.path("a.txt")).unwrap(), "a1");
    assert!(!f.path("new.txt").exists());
    assert_eq!(done.restored, vec![f.path("a.txt")]);
    assert_eq!(done.removed, vec![f.path("new.txt")]);
    // Those records are used up; turn 1's remains.
    assert_eq!(f.cp.turns("c1").unwrap().len(), 1);
    f.cp.restore("c1", Since::Turn(1), false, false)
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(f.path("a.txt")).unwrap(), "a0");
}

#[tokio::test]
async fn restore_refuses_files_changed_by_someone_else_unless_forced() {
    let f = fixture(CheckpointsSection::default());
    std::fs::write(f.path("a.txt"), "a0").unwrap();
    std::fs::write(f.path("b.txt"), "b0").unwrap();
    f.write(1, "t1", 1, "a.txt", "a1").await;
    f.write(1, "t2", 2, "b.txt", "b1").await;
    std::fs::write(f.path("b.txt"), "edited by a person").unwrap();
    let refused = f.cp.restore("c1", Since::Turn(1), false, false).await;
    assert_eq!(
        refused,
        Err(RestoreError::ChangedSince(vec![f.path("b.txt")]))
    );
    // Nothing was touched.
    assert_eq!(std::fs::read_to_string(f.path("a.txt")).unwrap(), "a1");
    // A rollback leaves the changed file and restores the rest.
    let partial =
        f.cp.restore("c1", Since::Turn(1), false, true)
            .await
            .unwrap();
    assert_eq!(partial.skipped, vec![f.path("b.txt")]);
    assert_eq!(std::fs::read_to_string(f.path("a.txt")).unwrap(), "a0");
    assert_eq!(
        std::fs::read_to_string(f.path("b.txt")).unwrap(),
        "edited by a person"
    );
}

#[tokio::test]
async fn forced_restore_overwrites_changes_made_since() {
    let f = fixture(CheckpointsSection::default());
    std::fs::write(f.path("a.txt"), "a0").unwrap();
    f.write(1, "t1", 1, "a.txt", "a1").await;
    std::fs::write(f.path("a.txt"), "theirs").unwrap();
    f.cp.restore("c1", Since::Turn(1), true, false)
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(f.path("a.txt")).unwrap(), "a0");
}

#[tokio::test]
async fn marks_restore_only_what_came_after_them() {
    let f = fixture(CheckpointsSection::default());
    std::fs::write(f.path("a.txt"), "a0").unwrap();
    f.write(1, "t1", 1, "a.txt", "a1").await;
    let mark = f.cp.mark("c1", "plan:p1:2").unwrap();
    assert_eq!(f.cp.mark_of("c1", "plan:p1:2"), Some(mark));
    f.write(1, "t2", 2, "a.txt", "a2").await;
    f.cp.restore("c1", Since::Mark(mark), false, false)
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(f.path("a.txt")).unwrap(), "a1");
}

#[tokio::test]
async fn retention_drops_the_oldest_checkpoints_and_their_contents() {
    let f = fixture(CheckpointsSection {
        max_bytes: 25,
        ..CheckpointsSection::default()
    });
    let now = crate::runtime::Clock::System.now_ms();
    for (i, name) in ["a.txt", "b.txt", "c.txt"].iter().enumerate() {
        std::fs::write(f.path(name), format!("prior content {i}")).unwrap();
    }
    // 15 bytes of prior content each: after the third only one fits.
    f.write(1, "t1", now - 3, "a.txt", "x").await;
    f.write(2, "t2", now - 2, "b.txt", "y").await;
    f.write(3, "t3", now - 1, "c.txt", "z").await;
    f.cp.prune(now).unwrap();
    let left: Vec<String> =
        f.cp.records("c1")
            .unwrap()
            .into_iter()
            .map(|(_, r)| r.tool_use_id)
            .collect();
    assert_eq!(left, vec!["t3".to_string()]);
    assert_eq!(f.blob_count(), 1);
}

#[tokio::test]
async fn retention_drops_checkpoints_older_than_max_age() {
    let f = fixture(CheckpointsSection {
        max_age_days: 1,
        ..CheckpointsSection::default()
    });
    std::fs::write(f.path("a.txt"), "old").unwrap();
    let now = crate::runtime::Clock::System.now_ms();
    f.write(1, "t1", now - 2 * 86_400_000, "a.txt", "x").await;
    std::fs::write(f.path("b.txt"), "recent").unwrap();
    f.write(2, "t2", now - 1000, "b.txt", "y").await;
    assert_eq!(f.cp.prune(now).unwrap(), 1);
    assert_eq!(f.cp.records("c1").unwrap().len(), 1);
    assert_eq!(f.blob_count(), 1);
}

#[tokio::test]
async fn bash_outside_git_is_recorded_as_not_tracked() {
    let f = fixture(CheckpointsSection::default());
    let input = json!({"command": "true"});
    let mut pending =
        f.cp.before(key(1, "t1", 1), "bash", &input, &f.ctx)
            .await
            .unwrap();
    // Nothing is written before the command starts: the record waits for
    // `started`, which the tool task calls once the command runs.
    assert!(pending.unwritten());
    assert!(f.cp.records("c1").unwrap().is_empty());
    f.cp.started(&mut pending);
    assert!(!pending.unwritten());
    assert_eq!(f.cp.records("c1").unwrap().len(), 1);
    f.cp.after(pending).await;
    let done =
        f.cp.restore("c1", Since::Turn(1), false, false)
            .await
            .unwrap();
    assert_eq!(done.untracked_commands, 1);
}

#[tokio::test]
async fn the_last_changed_turn_skips_turns_of_untracked_commands_alone() {
    let f = fixture(CheckpointsSection::default());
    assert_eq!(f.cp.last_changed_turn("c1").unwrap(), None);
    f.write(1, "t1", 1, "a.txt", "a1").await;
    f.write(3, "t2", 2, "b.txt", "b1").await;
    f.write(1, "t3", 3, "c.txt", "c1").await;
    // Turn 5 ran a command outside git: nothing it could put back.
    let input = json!({"command": "true"});
    let mut pending =
        f.cp.before(key(5, "t4", 4), "bash", &input, &f.ctx)
            .await
            .unwrap();
    f.cp.started(&mut pending);
    f.cp.after(pending).await;
    assert_eq!(f.cp.turns("c1").unwrap().len(), 3);
    assert_eq!(f.cp.last_changed_turn("c1").unwrap(), Some(3));
    assert_eq!(f.cp.last_changed_turn("c2").unwrap(), None);
}

#[tokio::test]
async fn bash_outside_git_that_never_started_leaves_no_record() {
    let f = fixture(CheckpointsSection::default());
    let input = json!({"command": "true"});
    let pending = f.cp.before(key(1, "t1", 1), "bash", &input, &f.ctx).await;
    f.cp.after(pending.unwrap()).await;
    assert!(f.cp.records("c1").unwrap().is_empty());
}

#[tokio::test]
async fn bash_in_a_git_work_tree_is_undone() {
    let f = fixture(CheckpointsSection::default());
    git_repo(&f);
    let input = json!({"command": "echo v2 > tracked.txt; echo n > made.txt"});
    let pending = f.cp.before(key(1, "t1", 1), "bash", &input, &f.ctx).await;
    std::fs::write(f.path("tracked.txt"), "v2\n").unwrap();
    std::fs::write(f.path("made.txt"), "n\n").unwrap();
    f.cp.after(pending.unwrap()).await;
    let records = f.cp.records("c1").unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].1.files.len(), 2);
    f.cp.restore("c1", Since::Turn(1), false, false)
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(f.path("tracked.txt")).unwrap(),
        "v1\n"
    );
    assert!(!f.path("made.txt").exists());
}

#[tokio::test]
async fn contents_of_a_replaced_store_are_not_swept() {
    // Contents stored for records the store no longer has: the store was
    // moved aside (or is new). Retention keeps them.
    let f = fixture(CheckpointsSection::default());
    f.cp.blobs.put(b"from the old store").unwrap();
    let now = record_now_ms();
    f.cp.prune(now).unwrap();
    assert_eq!(f.blob_count(), 1, "an empty store sweeps nothing");

    // With records, unreferenced contents go, unless the daemon started
    // with a store moved aside.
    std::fs::write(f.path("a.txt"), "one").unwrap();
    f.write(1, "t1", now, "a.txt", "two").await;
    assert_eq!(f.blob_count(), 2);
    let checkpoints_dir = f._data.path().join("checkpoints");
    let mut kept = Checkpoints::open(&f.cp.store, &checkpoints_dir, CheckpointsSection::default())
        .unwrap()
        .keep_unreferenced();
    kept.sweep_grace = std::time::Duration::ZERO;
    kept.prune(now).unwrap();
    assert_eq!(
        f.blob_count(),
        2,
        "kept while a moved-aside store may come back"
    );
    f.cp.prune(now).unwrap();
    assert_eq!(f.blob_count(), 1, "otherwise the unreferenced one is swept");
}

/// A git repository in the fixture's work directory: `tracked.txt` and
/// `other.txt` committed, `*.log` ignored.
fn git_repo(f: &Fixture) {
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(&f.ctx.cwd)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    git(&["init", "-q"]);
    git(&["config", "user.name", "t"]);
    git(&["config", "user.email", "t@example.com"]);
    std::fs::write(f.path("tracked.txt"), "v1\n").unwrap();
    std::fs::write(f.path("other.txt"), "o1\n").unwrap();
    std::fs::write(f.path(".gitignore"), "*.log\n").unwrap();
    git(&["add", "."]);
    git(&["commit", "-qm", "one"]);
}

impl Fixture {
    /// A foreground `bash` call whose command is `change`, done here.
    async fn bash(&self, turn: u64, id: &str, change: impl FnOnce(&Path)) {
        let input = json!({"command": "…"});
        let pending = self
            .cp
            .before(key(turn, id, record_now_ms()), "bash", &input, &self.ctx)
            .await;
        change(&self.ctx.cwd);
        self.cp.after(pending.unwrap()).await;
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap()
    }

    /// Each record's tool call and files (relative), in order.
    fn recorded(&self) -> Vec<(String, Vec<String>)> {
        self.cp
            .records("c1")
            .unwrap()
            .into_iter()
            .map(|(_, r)| {
                let files = r
                    .files
                    .iter()
                    .map(|f| {
                        f.path
                            .strip_prefix(&self.ctx.cwd)
                            .unwrap()
                            .display()
                            .to_string()
                    })
                    .collect();
                (r.tool_use_id, files)
            })
            .collect()
    }
}

#[tokio::test]
async fn each_bash_call_in_git_is_credited_with_its_own_changes_only() {
    let f = fixture(CheckpointsSection::default());
    git_repo(&f);
    f.bash(1, "t1", |d| {
        std::fs::write(d.join("tracked.txt"), "v2\n").unwrap();
        std::fs::write(d.join("made.txt"), "m\n").unwrap();
        std::fs::write(d.join("build.log"), "ignored\n").unwrap();
    })
    .await;
    // Someone else, between two calls.
    std::fs::write(f.path("other.txt"), "theirs\n").unwrap();
    f.bash(1, "t2", |d| {
        std::fs::write(d.join("tracked.txt"), "v3\n").unwrap()
    })
    .await;
    f.bash(1, "t3", |_| {}).await;
    // Retention keeps what the work tree's history still needs.
    f.cp.prune(record_now_ms()).unwrap();
    assert_eq!(
        f.recorded(),
        [
            (
                "t1".to_string(),
                vec!["made.txt".to_string(), "tracked.txt".to_string()]
            ),
            ("t2".to_string(), vec!["tracked.txt".to_string()]),
        ]
    );
    let done =
        f.cp.restore("c1", Since::Turn(1), false, false)
            .await
            .unwrap();
    assert_eq!(done.removed, [f.path("made.txt")]);
    assert_eq!(f.read("tracked.txt"), "v1\n");
    assert!(!f.path("made.txt").exists());
    assert_eq!(f.read("other.txt"), "theirs\n", "not the agent's to undo");
    assert_eq!(f.read("build.log"), "ignored\n");
}

#[tokio::test]
async fn a_file_changed_by_someone_else_between_two_calls_is_refused_by_name() {
    let f = fixture(CheckpointsSection::default());
    git_repo(&f);
    f.bash(1, "t1", |d| {
        std::fs::write(d.join("tracked.txt"), "v2\n").unwrap()
    })
    .await;
    std::fs::write(f.path("tracked.txt"), "theirs\n").unwrap();
    f.bash(2, "t2", |d| {
        std::fs::write(d.join("tracked.txt"), "v3\n").unwrap()
    })
    .await;
    let err =
        f.cp.restore("c1", Since::Turn(1), false, false)
            .await
            .unwrap_err();
    assert_eq!(err, RestoreError::ChangedSince(vec![f.path("tracked.txt")]));
    // Only the later turn: the content it started from comes back.
    f.cp.restore("c1", Since::Turn(2), false, false)
        .await
        .unwrap();
    assert_eq!(f.read("tracked.txt"), "theirs\n");
}

#[tokio::test]
async fn new_directories_and_moved_ones_are_undone_too() {
    let f = fixture(CheckpointsSection::default());
    git_repo(&f);
    std::fs::create_dir_all(f.path("src/deep")).unwrap();
    std::fs::write(f.path("src/deep/lib.rs"), "lib\n").unwrap();
    f.bash(1, "t1", |d| {
        std::fs::create_dir_all(d.join("gen/inner")).unwrap();
        std::fs::write(d.join("gen/inner/out.rs"), "gen\n").unwrap();
    })
    .await;
    // A directory moved: inotify cannot say what moved with it.
    f.bash(1, "t2", |d| {
        std::fs::rename(d.join("src/deep"), d.join("deeper")).unwrap();
    })
    .await;
    f.bash(1, "t3", |d| {
        std::fs::write(d.join("deeper/lib.rs"), "edited\n").unwrap()
    })
    .await;
    f.cp.restore("c1", Since::Turn(1), false, false)
        .await
        .unwrap();
    assert!(!f.path("gen/inner/out.rs").exists());
    assert_eq!(f.read("src/deep/lib.rs"), "lib\n");
    assert!(!f.path("deeper/lib.rs").exists());
}

#[tokio::test]
async fn a_bash_call_the_daemon_stopped_during_is_compared_with_the_work_tree() {
    let f = fixture(CheckpointsSection::default());
    git_repo(&f);
    f.bash(1, "t1", |d| {
        std::fs::write(d.join("tracked.txt"), "v2\n").unwrap()
    })
    .await;
    let input = json!({"command": "…"});
    let pending = f.cp.before(key(1, "t2", 2), "bash", &input, &f.ctx).await;
    assert!(pending.is_some());
    std::fs::write(f.path("tracked.txt"), "v3\n").unwrap();
    std::fs::write(f.path("other.txt"), "o2\n").unwrap();
    std::fs::write(f.path("half.txt"), "h\n").unwrap();
    // The daemon is killed: the call never ends; a new one restores.
    std::mem::forget(pending);
    let restarted = Arc::new(
        Checkpoints::open(
            &f.cp.store,
            &f._data.path().join("checkpoints"),
            CheckpointsSection::default(),
        )
        .unwrap(),
    );
    restarted
        .restore("c1", Since::Turn(1), false, false)
        .await
        .unwrap();
    assert_eq!(f.read("tracked.txt"), "v1\n");
    assert_eq!(f.read("other.txt"), "o1\n");
    assert!(!f.path("half.txt").exists());
}

#[tokio::test]
async fn a_new_base_after_many_changes_keeps_every_call_undoable() {
    let f = fixture(CheckpointsSection::default());
    git_repo(&f);
    // More paths than the history keeps: the next call takes a new base
    // from the old one's index and the changed paths.
    f.bash(1, "t1", |d| {
        std::fs::create_dir_all(d.join("many")).unwrap();
        for i in 0..70 {
            std::fs::write(d.join(format!("many/f{i}.txt")), format!("{i}\n")).unwrap();
        }
    })
    .await;
    f.bash(2, "t2", |d| {
        std::fs::write(d.join("many/f3.txt"), "changed\n").unwrap();
        std::fs::write(d.join("tracked.txt"), "v2\n").unwrap();
        std::fs::remove_file(d.join("many/f4.txt")).unwrap();
    })
    .await;
    let recorded = f.recorded();
    assert_eq!(recorded.len(), 2);
    assert_eq!(recorded[0].1.len(), 70);
    assert_eq!(recorded[1].1, ["many/f3.txt", "many/f4.txt", "tracked.txt"]);
    f.cp.restore("c1", Since::Turn(2), false, false)
        .await
        .unwrap();
    assert_eq!(f.read("many/f3.txt"), "3\n");
    assert_eq!(f.read("many/f4.txt"), "4\n");
    assert_eq!(f.read("tracked.txt"), "v1\n");
    f.cp.restore("c1", Since::Turn(1), false, false)
        .await
        .unwrap();
    assert!(!f.path("many/f0.txt").exists());
    assert!(!f.path("many/f69.txt").exists());
}

#[tokio::test]
async fn ids_stay_above_every_record_after_a_restart() {
    // sled's generator can repeat ids after a kill before it saved its
    // counter; a reopened checkpoints never goes below what is stored.
    let f = fixture(CheckpointsSection::default());
    std::fs::write(f.path("a.txt"), "one").unwrap();
    let ahead = u64::MAX / 2;
    let record = Record {
        conversation_id: "c1".into(),
        turn: 1,
        tool_use_id: "old".into(),
        tool: "write".into(),
        at_ms: record_now_ms(),
        files: vec![FileChange {
            path: f.path("a.txt"),
            before: FileState::Absent,
            after: Some(FileState::Absent),
        }],
        git: None,
        untracked: false,
    };
    f.cp.put(ahead, &record).unwrap();
    let reopened = Arc::new(
        Checkpoints::open(
            &f.cp.store,
            &f._data.path().join("checkpoints"),
            CheckpointsSection::default(),
        )
        .unwrap(),
    );
    let input = json!({"path": "a.txt", "content": "two"});
    let pending = reopened
        .before(key(2, "new", record_now_ms()), "write", &input, &f.ctx)
        .await
        .unwrap();
    std::fs::write(f.path("a.txt"), "two").unwrap();
    reopened.after(pending).await;
    let ids: Vec<(u64, String)> = reopened
        .records("c1")
        .unwrap()
        .into_iter()
        .map(|(id, r)| (id, r.tool_use_id))
        .collect();
    assert_eq!(ids.len(), 2);
    assert_eq!(ids[0], (ahead, "old".to_string()));
    assert!(ids[1].0 > ahead && ids[1].1 == "new", "{ids:?}");
    assert!(reopened.mark("c1", "step").unwrap() > ids[1].0);
}

#[tokio::test]
async fn a_deleted_conversations_checkpoints_go_and_the_contents_another_shares_stay() {
    let f = fixture(CheckpointsSection::default());
    let now = crate::runtime::Clock::System.now_ms();
    std::fs::write(f.path("a.txt"), "shared").unwrap();
    std::fs::write(f.path("b.txt"), "shared").unwrap();
    std::fs::write(f.path("c.txt"), "its own").unwrap();
    f.write(1, "t1", now - 2, "a.txt", "a1").await;
    // Another conversation (a fork, say) changes files with the same prior
    // content, and one of its own.
    for (id, name, content) in [("u1", "b.txt", "b1"), ("u2", "c.txt", "c1")] {
        let key = CallKey {
            conversation_id: "c2".into(),
            turn: 1,
            tool_use_id: id.into(),
            at_ms: now - 1,
        };
        let input = json!({"path": name, "content": content});
        let pending = f.cp.before(key, "write", &input, &f.ctx).await;
        std::fs::write(f.path(name), content).unwrap();
        f.cp.after(pending.unwrap()).await;
    }
    f.cp.mark("c2", "step").unwrap();
    assert_eq!(f.blob_count(), 2);
    assert_eq!(f.cp.forget("c2").unwrap(), 2);
    assert_eq!(f.cp.forget("c2").unwrap(), 0, "idempotent");
    assert!(f.cp.records("c2").unwrap().is_empty());
    assert_eq!(f.cp.mark_of("c2", "step"), None);
    f.cp.prune(now).unwrap();
    assert_eq!(
        f.blob_count(),
        1,
        "only the content no one else refers to goes"
    );
    f.cp.restore("c1", Since::Turn(1), false, false)
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(f.path("a.txt")).unwrap(), "shared");
}
