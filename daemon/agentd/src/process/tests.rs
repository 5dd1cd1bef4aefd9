use std::os::unix::process::ExitStatusExt;

use tokio::io::AsyncReadExt;

use std::time::Instant;

use nix::unistd::Pid;

use super::group::{parse_stat, start_ticks};
use super::*;

/// Live (not zombie) pids in the group, from /proc.
fn members(pgid: Pid) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| proc_stat(*pid).is_some_and(|s| s.pgrp == pgid.as_raw() && s.is_alive()))
        .collect()
}

/// Waits (at most 10 s) until the group has at least `n` live members, so
/// a test never races the shell starting its children.
async fn wait_for_members(pgid: Pid, n: usize) -> Vec<i32> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = members(pgid);
        if now.len() >= n {
            return now;
        }
        assert!(Instant::now() < deadline, "group {pgid} has {now:?}");
        tokio::time::sleep(POLL).await;
    }
}

/// Whether `pid` is gone or a zombie.
fn dead(pid: i32) -> bool {
    proc_stat(pid).is_none_or(|s| !s.is_alive())
}

/// `command` started the usual way in `dir`: the daemon's environment, no
/// sandbox, killed when dropped.
fn bash_in(command: &str, dir: &Path) -> Spawned {
    spawn_bash(command, dir, OnDrop::Kill, &Launch::daemon(), None).unwrap()
}

async fn read_all(mut output: pipe::Receiver) -> String {
    let mut bytes = Vec::new();
    output.read_to_end(&mut bytes).await.unwrap();
    String::from_utf8(bytes).unwrap()
}

#[tokio::test]
async fn spawns_bash_in_a_group_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().canonicalize().unwrap();
    let mut spawned = bash_in(
        "echo $$; pwd; echo err >&2; cat; echo \"key=${ANTHROPIC_API_KEY-unset}\"",
        &cwd,
    );
    let pid = i32::try_from(spawned.child.id()).unwrap();
    assert_eq!(spawned.group.pgid(), Pid::from_raw(pid));
    // The daemon is not in it: the group is the command's alone.
    assert_ne!(
        nix::unistd::getpgrp(),
        spawned.group.pgid(),
        "the command shares the daemon's group"
    );
    let stat = proc_stat(pid).unwrap();
    assert_eq!(stat.pgrp, pid);
    assert_eq!(spawned.group.leader_ticks(), Some(stat.start_ticks));
    assert!(spawned.group.is_ours());

    let text = read_all(spawned.output).await;
    let status = spawned.child.wait().await.unwrap();
    assert!(status.success());
    // stdout and stderr share the pipe in the order written; stdin is
    // empty, so `cat` ends at once.
    assert_eq!(
        text,
        format!("{pid}\n{}\nerr\nkey=unset\n", cwd.display()),
        "{text}"
    );
    assert!(!spawned.group.is_alive());
}

#[test]
fn daemon_credentials_are_not_passed_on() {
    let mut vars: Vec<(OsString, OsString)> = SECRET_ENV
        .iter()
        .map(|name| (OsString::from(name), OsString::from("secret")))
        .collect();
    vars.push(("ANTHROPIC_BASE_URL".into(), "http://x".into()));
    vars.push(("KEEP_ME".into(), "1".into()));
    vars.push(("PAGER".into(), "less".into()));
    let env = command_env(&Launch::new(None, Some(vars)));
    let names: Vec<String> = env
        .iter()
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .collect();
    for name in SECRET_ENV.iter().chain(&["ANTHROPIC_BASE_URL"]) {
        assert!(!names.iter().any(|n| n == name), "{name} is passed on");
    }
    let value = |name: &str| {
        env.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.to_string_lossy().into_owned())
    };
    assert_eq!(value("KEEP_ME").as_deref(), Some("1"));
    // The fixed additions win over the conversation's.
    assert_eq!(value("PAGER").as_deref(), Some("cat"));
    assert_eq!(value("GIT_TERMINAL_PROMPT").as_deref(), Some("0"));
    // The daemon's own environment, when the conversation has none, loses
    // its credentials the same way.
    let daemon = command_env(&Launch::daemon());
    assert!(daemon.iter().all(|(k, _)| !is_secret_var(k)));
}

#[test]
fn every_credential_variable_is_withheld_also_when_set_on_the_command() {
    let mut cmd = std::process::Command::new("env");
    cmd.env("ANTHROPIC_AUTH_TOKEN", "a")
        .env("ANTHROPIC_CUSTOM_HEADERS", "x-api-key: b")
        .env("OPENAI_ORG_ID", "c")
        .env("AGENTD_TOKEN_FILE", "/t")
        .env("KEEP_ME", "d")
        .env("MY_ANTHROPIC_NOTE", "e");
    withhold_secrets(&mut cmd);
    let envs: std::collections::HashMap<String, Option<String>> = cmd
        .get_envs()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.map(|v| v.to_string_lossy().into_owned()),
            )
        })
        .collect();
    for gone in [
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_CUSTOM_HEADERS",
        "OPENAI_ORG_ID",
        "AGENTD_TOKEN_FILE",
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "AGENTD_TOKEN",
    ] {
        assert_eq!(envs.get(gone), Some(&None), "{gone} is passed on");
    }
    assert_eq!(envs.get("KEEP_ME"), Some(&Some("d".to_string())));
    assert_eq!(envs.get("MY_ANTHROPIC_NOTE"), Some(&Some("e".to_string())));
}

#[test]
fn bash_is_found_on_path_as_execvp_would() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let (first, second, third) = (
        dir.path().join("first"),
        dir.path().join("second"),
        dir.path().join("third"),
    );
    for d in [&first, &second, &third] {
        std::fs::create_dir(d).unwrap();
    }
    // Not executable, a directory: skipped.
    std::fs::write(first.join("bash"), "").unwrap();
    std::fs::create_dir(second.join("bash")).unwrap();
    std::fs::write(third.join("bash"), "").unwrap();
    std::fs::set_permissions(third.join("bash"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = std::env::join_paths([&first, &second, &third]).unwrap();
    assert_eq!(find_in_path(&path, "bash"), Some(third.join("bash")));
    assert_eq!(find_in_path(&path, "zsh"), None);
    // A relative directory before it is searched from each command's own
    // directory: left to the new process.
    let relative = std::env::join_paths([Path::new("."), third.as_path()]).unwrap();
    assert_eq!(find_in_path(&relative, "bash"), None);
    let empty = std::env::join_paths([Path::new(""), third.as_path()]).unwrap();
    assert_eq!(find_in_path(&empty, "bash"), None);
}

#[tokio::test]
async fn a_remembered_bash_that_moved_away_is_looked_for_again() {
    let dir = tempfile::tempdir().unwrap();
    *BASH.lock().unwrap() = Some(dir.path().join("gone/bash"));
    let spawned = bash_in("echo $0 ok", dir.path());
    assert_eq!(read_all(spawned.output).await, "bash ok\n");
    let found = BASH.lock().unwrap().clone();
    // Another test may have moved it away meanwhile; any path it holds is
    // a real bash.
    assert!(found.as_ref().is_none_or(|p| p.is_file()), "{found:?}");
    // Hooks' commands too.
    *BASH.lock().unwrap() = Some(dir.path().join("gone/bash"));
    let mut piped = spawn_piped("echo $0 ok", dir.path(), &Launch::daemon(), None).unwrap();
    let mut out = String::new();
    piped
        .child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .await
        .unwrap();
    assert_eq!(out, "bash ok\n");
    assert!(piped.child.wait().await.unwrap().success());
}

#[tokio::test]
async fn a_missing_directory_is_a_start_error() {
    let err = spawn_bash(
        "true",
        Path::new("/nonexistent/agentd"),
        OnDrop::Kill,
        &Launch::daemon(),
        None,
    )
    .unwrap_err();
    assert!(matches!(err, SpawnError::Start { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("cannot start bash in /nonexistent/agentd: "),
        "{err}"
    );
}

#[tokio::test]
async fn sigterm_ignored_means_sigkill_after_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    // The ignored SIGTERM is inherited by the sleeps.
    let mut spawned = bash_in("trap '' TERM; sleep 300 & sleep 300; wait", dir.path());
    let pgid = spawned.group.pgid();
    let pids = wait_for_members(pgid, 3).await;

    let grace = Duration::from_millis(300);
    let started = Instant::now();
    spawned.group.terminate(grace).await;
    let elapsed = started.elapsed();
    // Only SIGKILL can have ended it, and that comes after the grace.
    assert!(elapsed >= grace, "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    assert!(!group_alive(pgid), "left: {:?}", members(pgid));
    assert!(pids.iter().all(|p| dead(*p)), "{pids:?}");
    let status = spawned.child.wait().await.unwrap();
    assert_eq!(status.signal(), Some(Signal::SIGKILL as i32));
}

#[tokio::test]
async fn sigterm_ends_a_willing_group_before_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let mut spawned = bash_in("sleep 300", dir.path());
    let pgid = spawned.group.pgid();
    wait_for_members(pgid, 1).await;
    // A grace far beyond what the test may take: SIGTERM must do it.
    spawned.group.terminate(Duration::from_secs(60)).await;
    assert!(!group_alive(pgid));
    let status = spawned.child.wait().await.unwrap();
    assert_eq!(status.signal(), Some(Signal::SIGTERM as i32));
}

#[tokio::test]
async fn a_grandchild_is_killed_with_the_group() {
    let dir = tempfile::tempdir().unwrap();
    // bash, a subshell and the sleep it starts, plus a sleep of bash's own.
    let mut spawned = bash_in(
        "(trap '' TERM; sleep 300; true) & sleep 300; wait",
        dir.path(),
    );
    let pgid = spawned.group.pgid();
    let pids = wait_for_members(pgid, 4).await;
    let leader = pgid.as_raw();
    // At least one member is not a child of the leader.
    let grandchildren: Vec<i32> = pids
        .iter()
        .copied()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| {
                    let (_, rest) = s.rsplit_once(')')?;
                    rest.split_whitespace().nth(1)?.parse::<i32>().ok()
                })
                .is_some_and(|ppid| ppid != leader && *p != leader)
        })
        .collect();
    assert!(!grandchildren.is_empty(), "{pids:?}");

    spawned.group.terminate(Duration::from_millis(300)).await;
    assert!(!group_alive(pgid), "left: {:?}", members(pgid));
    assert!(pids.iter().all(|p| dead(*p)), "{pids:?}");
    let _ = spawned.child.wait().await;
}

/// The start time a spawn names its group with is the one `/proc` gives
/// the leader, whether it came from the clock around the spawn or, when
/// the spawn crossed a tick, from `/proc` itself.
#[tokio::test]
async fn a_spawned_group_has_its_leaders_start_time() {
    let dir = tempfile::tempdir().unwrap();
    for _ in 0..20 {
        let mut spawned = bash_in("sleep 30", dir.path());
        let piped = spawn_piped("sleep 30", dir.path(), &Launch::daemon(), None).unwrap();
        for group in [spawned.group, piped.group] {
            let pid = group.pgid().as_raw();
            let stat = proc_stat(pid).expect("the leader is not reaped yet");
            assert_eq!(group.leader_ticks(), Some(stat.start_ticks), "pid {pid}");
            group.signal(Signal::SIGKILL);
        }
        let _ = spawned.child.wait().await;
    }
    // The clock is the one start times are counted on: this process
    // started before now.
    let own = proc_stat(std::process::id().try_into().unwrap()).unwrap();
    assert!(own.start_ticks <= boot_ticks().unwrap());
}

#[tokio::test]
async fn a_start_time_mismatch_refuses_to_signal() {
    let dir = tempfile::tempdir().unwrap();
    let mut spawned = bash_in("sleep 300", dir.path());
    let real = spawned.group;
    wait_for_members(real.pgid(), 1).await;
    // The same number, but a leader that started at another time: as if
    // the pid had been reused by a process that is not ours.
    let impostor = Group::new(real.pgid(), real.leader_ticks().map(|t| t + 1));
    assert!(!impostor.is_ours());
    assert!(!impostor.is_alive());
    assert!(!impostor.signal(Signal::SIGKILL));
    impostor.terminate(Duration::from_millis(100)).await;
    impostor.terminate_blocking(Duration::from_millis(100));
    assert!(
        group_alive(real.pgid()),
        "the impostor's group was signalled"
    );
    assert!(real.is_alive());
    assert!(!leads_group_since(
        real.pgid(),
        real.leader_ticks().unwrap() + 1
    ));
    assert!(leads_group_since(real.pgid(), real.leader_ticks().unwrap()));

    real.terminate(Duration::from_millis(300)).await;
    assert!(!group_alive(real.pgid()));
    let _ = spawned.child.wait().await;
}

#[test]
fn the_daemon_and_init_are_never_ours() {
    for pid in [0, 1, nix::unistd::getpid().as_raw()] {
        let group = Group::new(Pid::from_raw(pid), start_ticks(Pid::from_raw(pid)));
        assert!(!group.is_ours(), "{pid}");
        assert!(!group.signal(Signal::SIGCONT), "{pid}");
    }
}

/// A group of our own started outside any runtime, as a shell from before a
/// daemon crash would be.
#[test]
fn terminate_blocking_works_outside_a_runtime() {
    use std::os::unix::process::CommandExt;
    let mut child = std::process::Command::new("bash")
        .args(["-c", "trap '' TERM; sleep 300 & sleep 300; wait"])
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
    let group = Group::led_by(pid);
    let deadline = Instant::now() + Duration::from_secs(10);
    while members(pid).len() < 3 {
        assert!(Instant::now() < deadline, "{:?}", members(pid));
        std::thread::sleep(POLL);
    }
    let grace = Duration::from_millis(200);
    let started = Instant::now();
    group.terminate_blocking(grace);
    assert!(started.elapsed() >= grace);
    assert!(!group_alive(pid), "left: {:?}", members(pid));
    let _ = child.wait();
}

#[test]
fn stat_fields_survive_odd_command_names() {
    let line = "4242 (a) b (c) S 1 4240 4240 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 \
                987654 1000 10 18446744073709551615";
    assert_eq!(
        parse_stat(line),
        Some(ProcStat {
            state: 'S',
            pgrp: 4240,
            start_ticks: 987_654,
        })
    );
    assert_eq!(parse_stat("4242 (x) Z 1"), None);
    let own = proc_stat(nix::unistd::getpid().as_raw()).unwrap();
    assert!(own.is_alive());
    assert_eq!(own.pgrp, nix::unistd::getpgrp().as_raw());
}

#[tokio::test]
async fn a_conversations_environment_replaces_the_daemons_and_keeps_the_fixed_additions() {
    let dir = tempfile::tempdir().unwrap();
    let path = std::env::var_os("PATH").unwrap();
    let env: Vec<(OsString, OsString)> = vec![
        ("PATH".into(), path),
        ("FOO".into(), "bar".into()),
        ("ANTHROPIC_API_KEY".into(), "sk-sent-by-a-client".into()),
        ("PAGER".into(), "less".into()),
    ];
    let launch = Launch::new(None, Some(env));
    assert!(launch.program().is_some(), "bash is on the PATH");
    let spawned = spawn_bash(
        "echo \"$0 FOO=$FOO PAGER=$PAGER key=${ANTHROPIC_API_KEY-unset} home=${HOME-unset}\"",
        dir.path(),
        OnDrop::Kill,
        &launch,
        None,
    )
    .unwrap();
    assert_eq!(
        read_all(spawned.output).await,
        "bash FOO=bar PAGER=cat key=unset home=unset\n"
    );
}

/// The daemon ignores SIGPIPE (every Rust program does) and handles
/// SIGCHLD through tokio; none of that reaches a command: it starts with
/// nothing blocked and SIGPIPE at its default, as after std's spawn.
#[tokio::test]
async fn a_command_starts_with_default_signals_and_an_empty_mask() {
    let dir = tempfile::tempdir().unwrap();
    // Make sure the daemon side has a handler installed (tokio's SIGCHLD).
    let _sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()).unwrap();
    let mut spawned = spawn_bash(
        "grep -E '^Sig(Blk|Ign)' /proc/self/status; yes | head -n 1 >/dev/null; \
         echo \"yes=${PIPESTATUS[0]}\"",
        dir.path(),
        OnDrop::Kill,
        &Launch::daemon(),
        None,
    )
    .unwrap();
    let text = read_all(spawned.output).await;
    assert!(spawned.child.wait().await.unwrap().success());
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .to_string()
    };
    // `grep` itself: nothing blocked, SIGPIPE not ignored (what else is
    // ignored came from whoever started the test, as with `posix_spawn`).
    assert_eq!(field("SigBlk:"), "0000000000000000", "{text}");
    let ignored = u64::from_str_radix(&field("SigIgn:"), 16).unwrap();
    assert_eq!(ignored & (1 << (libc::SIGPIPE - 1)), 0, "{text}");
    // `yes` died of SIGPIPE (128 + 13), not of a write error.
    assert_eq!(field("yes="), "141", "{text}");
}

/// A child dropped before it was waited for is killed (`OnDrop::Kill`) and
/// reaped: no process and no zombie is left.
#[tokio::test]
async fn a_dropped_child_is_killed_and_reaped() {
    let dir = tempfile::tempdir().unwrap();
    let spawned = bash_in("sleep 30", dir.path());
    let pid = i32::try_from(spawned.child.id()).unwrap();
    drop(spawned);
    let deadline = Instant::now() + Duration::from_secs(10);
    while proc_stat(pid).is_some() {
        assert!(Instant::now() < deadline, "{pid} is still there");
        tokio::time::sleep(POLL).await;
    }
}

/// `OnDrop::Leave`: the command goes on after its handle is dropped, and
/// is still reaped when it ends.
#[tokio::test]
async fn a_left_child_runs_on_and_is_reaped_when_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let flag = dir.path().join("done");
    let spawned = spawn_bash(
        &format!("sleep 0.3; touch {}", flag.display()),
        dir.path(),
        OnDrop::Leave,
        &Launch::daemon(),
        None,
    )
    .unwrap();
    let pid = i32::try_from(spawned.child.id()).unwrap();
    drop(spawned.child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while proc_stat(pid).is_some() {
        assert!(Instant::now() < deadline, "{pid} is still there");
        tokio::time::sleep(POLL).await;
    }
    assert!(flag.exists(), "the command was stopped");
}

/// Starts `bash -c command` the way a kernel without `CLONE_PIDFD` makes
/// the daemon: followed by SIGCHLD and `waitpid`.
fn spawn_without_pidfd(command: &str, on_drop: OnDrop) -> Child {
    let null = dev_null().unwrap();
    let fd = null.as_raw_fd();
    let args = [OsStr::new("bash"), OsStr::new("-c"), OsStr::new(command)];
    let env = command_env(&Launch::daemon());
    let spec = spawn::Spec {
        program: OsStr::new("bash"),
        args: &args,
        env: &env,
        cwd: Path::new("/"),
        stdio: [fd, fd, fd],
        sandbox: None,
    };
    let started = spawn::spawn_without_pidfd(&spec).unwrap();
    assert!(started.pidfd.is_none());
    Child::new(started.pid, None, on_drop).unwrap()
}

/// Before Linux 5.2 there are no pidfds: a child is still waited for with
/// its status, and one dropped is killed and reaped.
#[tokio::test]
async fn without_pidfds_children_are_waited_for_and_reaped_by_sigchld() {
    let mut child = spawn_without_pidfd("sleep 0.2; exit 3", OnDrop::Kill);
    assert_eq!(child.wait().await.unwrap().code(), Some(3));
    // Asked again, the same status.
    assert_eq!(child.wait().await.unwrap().code(), Some(3));
    let dropped = spawn_without_pidfd("sleep 30", OnDrop::Kill);
    let pid = i32::try_from(dropped.id()).unwrap();
    drop(dropped);
    let deadline = Instant::now() + Duration::from_secs(10);
    while proc_stat(pid).is_some() {
        assert!(Instant::now() < deadline, "{pid} is still there");
        tokio::time::sleep(POLL).await;
    }
}
