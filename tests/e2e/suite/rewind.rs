//! Checkpoints and rewind (issue 17 point 5, Done-when 3): the files a turn
//! changed go back byte for byte, the user's git index, branches and stash
//! stay as they were, a file someone else changed stops the rewind unless
//! forced, and a rewound conversation can be forked before a message.

use super::util::{
    MUTATING, agent_out, create_with, get, git, send, text_of_message, tool, wait_state,
};
use agent_proto::v1 as pb;
use agent_tests::fake_llm::Script;
use agent_tests::harness::Scenario;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;

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
