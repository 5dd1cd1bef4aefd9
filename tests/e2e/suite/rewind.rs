//! Checkpoints and rewind (issue 17 point 5, Done-when 3): the files a turn
//! changed go back byte for byte, the user's git index, branches and stash
//! stay as they were, a file someone else changed stops the rewind unless
//! forced, and a rewound conversation can be forked before a message; a
//! turn of twenty commands in a repository of 20,000 files rewinds whole.

use super::util::{
    MUTATING, agent_out, assert_same_files, create_with, get, git, git_user_state, result_of, send,
    text_of_message, tool, tree_files, wait_state,
};
use agent_proto::v1 as pb;
use agent_tests::fake_llm::Script;
use agent_tests::harness::Scenario;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

/// What the user's repository looks like to them: status, stash, branches,
/// and the index file's bytes.
fn git_state(dir: &Path) -> (Vec<u8>, String, String, String) {
    // The index first: nothing the test runs after may have rewritten it.
    let index = std::fs::read(dir.join(".git/index")).unwrap();
    (
        index,
        git(dir, &["status", "--porcelain"]),
        git(dir, &["stash", "list"]),
        git(dir, &["branch", "--list"]),
    )
}

/// Every file of the work tree (outside .git) and its bytes.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name != ".git" && entry.file_type().unwrap().is_file() {
            out.insert(name, std::fs::read(entry.path()).unwrap());
        }
    }
    out
}

/// A repository with a commit, a second branch, a stash entry, a staged
/// change and an untracked file: all of which a rewind must leave alone.
fn user_repo(dir: &Path) {
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["config", "user.name", "Test User"]);
    git(dir, &["config", "user.email", "test@example.com"]);
    std::fs::write(dir.join("a.txt"), "alpha\nline two\n").unwrap();
    std::fs::write(dir.join("b.txt"), "bravo\n").unwrap();
    std::fs::write(dir.join("tracked.txt"), "tracked v1\n").unwrap();
    std::fs::write(dir.join("staged.txt"), "staged v1\n").unwrap();
    git(dir, &["add", "."]);
    git(dir, &["commit", "-qm", "first"]);
    git(dir, &["branch", "feature"]);
    std::fs::write(dir.join("b.txt"), "bravo stashed\n").unwrap();
    git(dir, &["stash", "-q"]);
    std::fs::write(dir.join("staged.txt"), "staged v2\n").unwrap();
    git(dir, &["add", "staged.txt"]);
    std::fs::write(dir.join("notes.txt"), "the user's untracked notes\n").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewind_restores_a_turns_files_and_forks_the_conversation() {
    let s = Scenario::new()
        .scripts([
            // Turn 1 (message 1): no change.
            Script::text("hello"),
            // Turn 2 (message 3): three edits and a command.
            tool(
                "e1",
                "edit",
                json!({"path": "a.txt", "old_string": "alpha", "new_string": "ALPHA"}),
            ),
            tool("e2", "write", json!({"path": "b.txt", "content": "bravo by the agent\n"})),
            tool("e3", "write", json!({"path": "created.txt", "content": "new file\n"})),
            tool(
                "b1",
                "bash",
                json!({"command": "echo changed by bash >> tracked.txt && echo made > made_by_bash.txt"}),
            ),
            Script::text("done"),
        ])
        .start()
        .await;
    let (mut d, work) = (s.daemon, s.work);
    let mut client = s.client;
    let dir = work.path().canonicalize().unwrap();
    user_repo(&dir);
    let files_before = files(&dir);
    let git_before = git_state(&dir);

    let id = create_with(
        &mut client,
        &dir,
        "say hello",
        MUTATING,
        pb::PermissionMode::Unspecified,
    )
    .await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    send(&mut client, &id, "change the files").await;
    let r = wait_state(&mut client, &id, pb::StateKind::Idle).await;
    assert_eq!(r.messages.len(), 12, "{:#?}", r.messages);
    let changed = files(&dir);
    assert_eq!(changed["a.txt"], b"ALPHA\nline two\n");
    assert_eq!(changed["b.txt"], b"bravo by the agent\n");
    assert_eq!(changed["created.txt"], b"new file\n");
    assert_eq!(changed["tracked.txt"], b"tracked v1\nchanged by bash\n");
    assert_eq!(changed["made_by_bash.txt"], b"made\n");
    // The turn of message 3 can be rewound: four calls, five files.
    assert_eq!(r.checkpoints.len(), 1, "{:?}", r.checkpoints);
    assert_eq!(r.checkpoints[0].message_seq, 3);
    assert_eq!(r.checkpoints[0].tool_calls, 4);
    assert_eq!(
        r.checkpoints[0].files.len(),
        5,
        "{:?}",
        r.checkpoints[0].files
    );
    let (ok, out, err) = agent_out(&d, &["show", &id, "--checkpoints"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("message    3  4 call(s), 5 file(s)"), "{out}");

    // A restart between the turn and the rewind changes nothing.
    d.terminate().await;
    d.restart().await;

    // Someone else changes a file the agent changed: the rewind refuses,
    // names it, and touches nothing.
    std::fs::write(dir.join("b.txt"), "bravo by a person\n").unwrap();
    let (ok, out, err) = agent_out(&d, &["rewind", &id, "--to", "3", "--code"]).await;
    assert!(!ok, "a rewind over someone else's change must fail: {out}");
    assert!(err.contains("b.txt"), "{err}");
    assert!(
        !err.contains("a.txt"),
        "only the changed file is named: {err}"
    );
    assert_eq!(
        std::fs::read(dir.join("a.txt")).unwrap(),
        b"ALPHA\nline two\n"
    );
    assert!(dir.join("created.txt").exists());

    // Forced, it restores every file byte for byte and removes the created
    // ones; the user's index, branches and stash are as they were.
    let (ok, out, err) = agent_out(&d, &["--json", "rewind", &id, "--to", "3", "--force"]).await;
    assert!(ok, "{err}");
    let answer: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(answer["message_seq"], 3);
    assert_eq!(
        answer["code"]["removed"].as_array().unwrap().len(),
        2,
        "{answer}"
    );
    assert_eq!(files(&dir), files_before);
    assert_eq!(git_state(&dir), git_before);
    assert_eq!(git(&dir, &["stash", "list"]).lines().count(), 1);
    // Those checkpoints are used up.
    let mut client = d.client().await;
    assert!(get(&mut client, &id).await.checkpoints.is_empty());

    // Forking before message 3: a new conversation whose transcript ends
    // just before it, linked to the original, which keeps all of its own.
    let (ok, out, err) = agent_out(
        &d,
        &["--json", "rewind", &id, "--to", "3", "--conversation"],
    )
    .await;
    assert!(ok, "{err}");
    let answer: Value = serde_json::from_str(&out).unwrap();
    let fork = answer["forked"]["id"].as_str().unwrap().to_string();
    assert_ne!(fork, id);
    let forked = get(&mut client, &fork).await;
    let summary = forked.conversation.clone().unwrap();
    assert_eq!(summary.forked_from, id);
    assert_eq!(summary.forked_at_message, 3);
    let texts: Vec<String> = forked.messages.iter().map(text_of_message).collect();
    assert_eq!(texts, vec!["say hello".to_string(), "hello".to_string()]);
    assert_eq!(get(&mut client, &id).await.messages.len(), 12);
    // The original's files were not touched by the fork.
    assert_eq!(files(&dir), files_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewind_outside_git_says_commands_are_not_tracked_and_is_refused_mid_turn() {
    let s = Scenario::new()
        .scripts([
            tool(
                "w1",
                "write",
                json!({"path": "f.txt", "content": "agent\n"}),
            ),
            tool("b1", "bash", json!({"command": "echo x > by_bash.txt"})),
            Script::text("done"),
        ])
        .start()
        .await;
    let (d, work) = (s.daemon, s.work);
    let mut client = s.client;
    let dir = work.path().canonicalize().unwrap();
    std::fs::write(dir.join("f.txt"), "original\n").unwrap();
    let id = create_with(
        &mut client,
        &dir,
        "go",
        MUTATING,
        pb::PermissionMode::Unspecified,
    )
    .await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let (ok, out, err) = agent_out(&d, &["rewind", &id]).await;
    assert!(ok, "{err}");
    assert_eq!(std::fs::read(dir.join("f.txt")).unwrap(), b"original\n");
    // Outside a work tree the command's changes are not known: it says so.
    assert!(out.contains("not undone: 1 bash command(s)"), "{out}");
    assert!(dir.join("by_bash.txt").exists());

    // While a turn runs, a rewind is refused.
    let fake = s.fake;
    fake.push(tool("s1", "bash", json!({"command": "sleep 3"})));
    fake.push(Script::text("slept"));
    send(&mut client, &id, "sleep").await;
    let refused = client
        .rewind(pb::RewindRequest {
            conversation_id: id.clone(),
            code: true,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );
    assert!(refused.message().contains("running a turn"), "{refused:?}");
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
}

/// Issue 39, point 9: a rewind never writes or removes through a symbolic
/// link that now stands where the agent worked (nothing outside the
/// working directory changes, and it says why); a file someone else
/// changed between two of the agent's calls is refused by name unless
/// forced; and a stored copy that no longer matches its hash is never
/// written back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewind_never_writes_through_a_link_refuses_others_changes_and_checks_each_copy() {
    let s = Scenario::new()
        .scripts([
            tool(
                "w1",
                "write",
                json!({"path": "sub/made.txt", "content": "agent's\n"}),
            ),
            Script::text("made"),
            tool("w2", "write", json!({"path": "f.txt", "content": "one\n"})),
            Script::text("first"),
            tool("w3", "write", json!({"path": "f.txt", "content": "two\n"})),
            Script::text("second"),
        ])
        .start()
        .await;
    let (d, work) = (s.daemon, s.work);
    let mut client = s.client;
    let dir = work.path().canonicalize().unwrap();
    std::fs::create_dir(dir.join("sub")).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let outside = outside.path().canonicalize().unwrap();
    std::fs::write(outside.join("made.txt"), "theirs\n").unwrap();
    let id = create_with(
        &mut client,
        &dir,
        "make it",
        MUTATING,
        pb::PermissionMode::Unspecified,
    )
    .await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    assert!(dir.join("sub/made.txt").exists());

    // `sub` replaced by a link to a directory outside the working directory.
    std::fs::rename(dir.join("sub"), dir.join("sub.old")).unwrap();
    std::os::unix::fs::symlink(&outside, dir.join("sub")).unwrap();
    for force in [false, true] {
        let mut args = vec!["rewind", id.as_str()];
        if force {
            args.push("--force");
        }
        let (ok, out, err) = agent_out(&d, &args).await;
        assert!(!ok, "{out}");
        assert!(
            err.contains("symbolic link") && err.contains("nothing was restored"),
            "{err}"
        );
        assert_eq!(
            std::fs::read_to_string(outside.join("made.txt")).unwrap(),
            "theirs\n",
            "a file outside the working directory changed"
        );
    }
    std::fs::remove_file(dir.join("sub")).unwrap();
    std::fs::rename(dir.join("sub.old"), dir.join("sub")).unwrap();

    // Two calls on f.txt with someone else's change between them.
    let first_turn = get(&mut client, &id).await.messages.len() as u64 + 1;
    send(&mut client, &id, "first").await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    std::fs::write(dir.join("f.txt"), "the user's edit\n").unwrap();
    send(&mut client, &id, "second").await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let to = first_turn.to_string();
    let (ok, out, err) = agent_out(&d, &["rewind", &id, "--to", &to]).await;
    assert!(!ok, "{out}");
    assert!(
        err.contains("changed since the agent last changed it (by someone else)")
            && err.contains("f.txt"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(dir.join("f.txt")).unwrap(), "two\n");

    // A stored copy that is damaged: refused, nothing written.
    let blobs = d.data_dir.join("checkpoints/blobs");
    let mut damaged = 0;
    for shard in std::fs::read_dir(&blobs).unwrap() {
        for blob in std::fs::read_dir(shard.unwrap().path()).unwrap() {
            let blob = blob.unwrap().path();
            let bytes = std::fs::read(&blob).unwrap();
            if bytes == b"the user's edit\n" {
                std::fs::write(&blob, &bytes[..3]).unwrap();
                damaged += 1;
            }
        }
    }
    assert_eq!(
        damaged, 1,
        "the user's edit was kept before the second call"
    );
    // The last turn's call kept the user's edit: rewinding it needs that copy.
    let (ok, out, err) = agent_out(&d, &["rewind", &id, "--force"]).await;
    assert!(!ok, "{out}");
    assert!(err.contains("damaged"), "{err}");
    assert_eq!(std::fs::read_to_string(dir.join("f.txt")).unwrap(), "two\n");
}

/// Directories and files per directory of [`big_repo`].
const DIRS: usize = 200;
const FILES_PER_DIR: usize = 100;

/// The committed content of `d{d}/f{f}.txt` in [`big_repo`]: 100 bytes.
fn big_file(d: usize, f: usize) -> String {
    let head = format!("file d{d:03}/f{f:03}: ");
    format!("{head}{}\n", "x".repeat(99 - head.len()))
}

/// A git repository of 20,000 committed files of 100 bytes in 200
/// directories, with what a person leaves around: a second branch, a
/// stash entry, a staged change and an untracked file. The commit is
/// written as one pack by `git fast-import` (20,000 loose objects take
/// longer than the rest of the test) while two threads write the files,
/// and `git reset` makes the index.
fn big_repo(dir: &Path) {
    use std::io::Write as _;
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["config", "user.name", "Test User"]);
    git(dir, &["config", "user.email", "test@example.com"]);
    let mut files: Vec<(String, String)> = Vec::with_capacity(DIRS * FILES_PER_DIR + 2);
    for d in 0..DIRS {
        std::fs::create_dir(dir.join(format!("d{d:03}"))).unwrap();
        for f in 0..FILES_PER_DIR {
            files.push((format!("d{d:03}/f{f:03}.txt"), big_file(d, f)));
        }
    }
    files.push(("staged.txt".into(), "staged v1\n".into()));
    files.push(("stashed.txt".into(), "stashed v1\n".into()));
    let mut stream = String::with_capacity(files.len() * 160);
    stream.push_str(
        "commit refs/heads/main\n\
         committer Test User <test@example.com> 1700000000 +0000\n\
         data 9\ngenerated\n",
    );
    for (path, content) in &files {
        stream.push_str(&format!(
            "M 100644 inline {path}\ndata {}\n{content}\n",
            content.len()
        ));
    }
    std::thread::scope(|scope| {
        let import = scope.spawn(|| {
            let mut import = std::process::Command::new("git")
                .arg("-C")
                .arg(dir)
                .args(["fast-import", "--quiet"])
                .stdin(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let mut stdin = import.stdin.take().unwrap();
            stdin.write_all(stream.as_bytes()).unwrap();
            drop(stdin);
            import.wait().unwrap()
        });
        for half in files.chunks(files.len().div_ceil(2)) {
            scope.spawn(move || {
                for (path, content) in half {
                    std::fs::write(dir.join(path), content).unwrap();
                }
            });
        }
        assert!(import.join().unwrap().success());
    });
    git(dir, &["reset", "-q"]);
    git(dir, &["branch", "feature"]);
    std::fs::write(dir.join("stashed.txt"), "stashed v2\n").unwrap();
    git(dir, &["stash", "-q"]);
    std::fs::write(dir.join("staged.txt"), "staged v2\n").unwrap();
    git(dir, &["add", "staged.txt"]);
    std::fs::write(dir.join("notes.txt"), "the user's untracked notes\n").unwrap();
}

/// The turn's twenty commands and what each prints: tracked files
/// changed, overwritten, truncated, given binary content, renamed and
/// deleted (one whole directory of them); files created, one in a new
/// directory and a hundred in another; one file appended to by four
/// calls; a file created and later changed, another created and later
/// deleted; the staged file and the user's untracked file changed.
fn twenty_commands() -> Vec<(&'static str, &'static str)> {
    vec![
        (
            "printf 'changed by call 1\\n' > d000/f000.txt && cat d000/f000.txt",
            "changed by call 1",
        ),
        (
            "echo created by call 2 > new_top.txt && cat new_top.txt",
            "created by call 2",
        ),
        (
            "rm d001/f001.txt && test ! -e d001/f001.txt && echo removed f001",
            "removed f001",
        ),
        (
            "echo append 4 >> d002/f002.txt && wc -l < d002/f002.txt",
            "2",
        ),
        (
            "mkdir -p brand/new/dir && echo deep > brand/new/dir/file.txt && ls brand/new/dir",
            "file.txt",
        ),
        (
            "for i in $(seq 100 149); do echo bulk $i >> d$i/f050.txt; done && tail -n 1 d149/f050.txt",
            "bulk 149",
        ),
        (
            "sed -i 's/^file/FILE/' d003/f003.txt && head -c 4 d003/f003.txt",
            "FILE",
        ),
        (
            "echo append 8 >> d002/f002.txt && wc -l < d002/f002.txt",
            "3",
        ),
        ("echo temp > scratch.txt && cat scratch.txt", "temp"),
        (
            "mv d004/f004.txt d004/renamed.txt && ls d004 | grep -c renamed",
            "1",
        ),
        (
            "echo changed by call 11 >> staged.txt && tail -n 1 staged.txt",
            "changed by call 11",
        ),
        (
            "echo append 12 >> d002/f002.txt && wc -l < d002/f002.txt",
            "4",
        ),
        (
            "echo more >> scratch.txt && printf 'the agent was here\\n' > notes.txt && wc -l < scratch.txt",
            "2",
        ),
        (
            "rm new_top.txt && test ! -e new_top.txt && echo removed new_top",
            "removed new_top",
        ),
        (": > d005/f005.txt && wc -c < d005/f005.txt", "0"),
        (
            "echo append 16 >> d002/f002.txt && wc -l < d002/f002.txt",
            "5",
        ),
        (
            "printf '\\000\\001\\377binary' > d006/f006.txt && wc -c < d006/f006.txt",
            "9",
        ),
        (
            "mkdir gen && for i in $(seq 1 100); do echo $i > gen/$i.txt; done && ls gen | wc -l",
            "100",
        ),
        (
            "rm -r d199 && test ! -e d199 && echo removed d199",
            "removed d199",
        ),
        (
            "echo last >> d198/f099.txt && tail -n 1 d198/f099.txt",
            "last",
        ),
    ]
}

/// Issue 44: one turn of twenty `bash` calls in a repository of 20,000
/// files, rewound: every file is back byte for byte (those changed,
/// deleted, renamed, appended to again and again), every file the turn
/// created is gone, what the turn before it did stays, and the user's
/// index, HEAD, branches and stash are as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewind_restores_a_turn_of_twenty_commands_in_a_repository_of_20k_files() {
    let started = Instant::now();
    let commands = twenty_commands();
    let mut scripts = vec![
        // Turn 1 (message 1): a change the rewind of turn 2 keeps.
        tool(
            "k1",
            "bash",
            json!({"command": "echo kept > kept.txt && printf 'turn one\\n' > d007/f007.txt"}),
        ),
        Script::text("turn one done"),
    ];
    for (n, (command, _)) in commands.iter().enumerate() {
        scripts.push(tool(
            &format!("b{}", n + 1),
            "bash",
            json!({ "command": command }),
        ));
    }
    scripts.push(Script::text("twenty commands done"));
    let s = Scenario::new().scripts(scripts).start().await;
    let (d, fake, work) = (s.daemon, s.fake, s.work);
    let mut client = s.client;
    let dir = work.path().canonicalize().unwrap();
    big_repo(&dir);
    let generated = started.elapsed();

    let id = create_with(
        &mut client,
        &dir,
        "turn one",
        MUTATING,
        pb::PermissionMode::Unspecified,
    )
    .await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    assert_eq!(std::fs::read(dir.join("kept.txt")).unwrap(), b"kept\n");
    let before = tree_files(&dir);
    assert_eq!(before.len(), DIRS * FILES_PER_DIR + 4);
    let git_before = git_user_state(&dir);
    let turn_seq = get(&mut client, &id).await.messages.len() as u64 + 1;

    let turn = Instant::now();
    send(&mut client, &id, "run the twenty commands").await;
    let r = wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let turn = turn.elapsed();
    assert_eq!(r.messages.len(), 4 + 1 + 2 * commands.len() + 1);
    // Every command ran, in order, and did what it says.
    let last = fake.requests().into_iter().last().unwrap();
    for (n, (command, printed)) in commands.iter().enumerate() {
        let result = result_of(&last, &format!("b{}", n + 1));
        let content = result["content"].as_str().unwrap_or_default();
        assert_ne!(result["is_error"], true, "{command}: {result}");
        assert!(
            content.lines().any(|l| l.trim() == *printed),
            "call {} ({command}) printed {content:?}, not {printed:?}",
            n + 1
        );
    }
    let changed = tree_files(&dir);
    assert_eq!(
        changed["d002/f002.txt"],
        format!(
            "{}append 4\nappend 8\nappend 12\nappend 16\n",
            big_file(2, 2)
        )
        .as_bytes()
    );
    assert_eq!(changed["d006/f006.txt"], b"\x00\x01\xffbinary");
    assert!(!changed.contains_key("d001/f001.txt"));
    assert!(!changed.keys().any(|p| p.starts_with("d199/")));
    assert_eq!(changed["gen/100.txt"], b"100\n");
    assert_eq!(changed["notes.txt"], b"the agent was here\n");

    // Rewound to before the turn.
    let rewind = Instant::now();
    let to = turn_seq.to_string();
    let (ok, out, err) = agent_out(&d, &["--json", "rewind", &id, "--to", &to, "--code"]).await;
    let rewind = rewind.elapsed();
    assert!(ok, "{err}");
    let answer: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(answer["message_seq"], turn_seq);
    let count = |key: &str| answer["code"][key].as_array().map_or(0, Vec::len);
    // Written back: f000, f001, f002, f003, f004, 50 bulk, staged.txt,
    // notes.txt, f005, f006, d199's 100, d198/f099. Removed: the new
    // directory's file, renamed.txt, scratch.txt and gen's 100.
    assert_eq!(
        (count("restored"), count("removed")),
        (160, 103),
        "{answer}"
    );
    assert_same_files(&tree_files(&dir), &before, "after the rewind");
    assert_eq!(git_user_state(&dir), git_before);
    assert!(git(&dir, &["stash", "show", "-p"]).contains("+stashed v2"));
    println!(
        "20k-file rewind: repository made in {:.2} s, the turn of 20 commands took {:.2} s, \
         the rewind {:.2} s, the test {:.2} s",
        generated.as_secs_f64(),
        turn.as_secs_f64(),
        rewind.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}
