//! Stock third-party gRPC clients against a real daemon: Python `grpcio` with
//! stubs generated from the proto when the test runs, and Node
//! `@grpc/grpc-js` with `@grpc/proto-loader`, each with default options on
//! `unix:PATH`. The scripts are in `tests/clients/`; each lists the services
//! by reflection, makes unary calls and attaches to receive a streamed reply.
//!
//! The clients are installed from their package registries (pinned versions)
//! into the cargo target directory the first time and reused after that. A
//! registry that cannot be reached skips the test with a message saying so;
//! any other failure fails it.

use agent_proto::v1 as pb;
use agent_tests::fake_llm::Script;
use agent_tests::harness::{Scenario, Started};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// How long an install may take before the test fails.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(600);

/// `tests/clients/` in the source tree.
fn clients_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("clients")
}

/// The directory holding `agent/v1/agent.proto`.
fn proto_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../proto")
}

/// Where installed clients are kept between runs: `<target>/stock-clients`.
fn cache_root() -> PathBuf {
    // The test executable is <target>/<profile>/deps/e2e-<hash>.
    let exe = std::env::current_exe().unwrap();
    let target = exe.ancestors().nth(3).unwrap().to_path_buf();
    target.join("stock-clients")
}

/// A short stable name for the contents of `files`, so a change of pinned
/// versions installs afresh beside the old install.
fn content_key(files: &[PathBuf]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for file in files {
        for byte in std::fs::read(file).unwrap() {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{hash:016x}")
}

/// Runs `cmd` to completion within `limit`, killing it after that.
fn run(cmd: &mut Command, limit: Duration) -> Output {
    let child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            panic!("{cmd:?} did not finish within {limit:?}");
        }
    }
}

fn describe(out: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// How an install ended.
enum Installed {
    /// Ready in this directory.
    At(PathBuf),
    /// The registry could not be reached: why, for the skip message.
    Unreachable(String),
}

/// Installs a client into `<cache>/<name>-<key>` once: `install` fills the
/// directory and says whether it worked; when it did not, `probe` asks the
/// registry something trivial, and only if that fails too is the registry
/// taken to be unreachable. A marker file records a finished install; a lock
/// file keeps two test processes from installing into one directory at once.
fn install_once(
    name: &str,
    key: &str,
    install: impl FnOnce(&Path) -> Result<(), String>,
    probe: impl FnOnce(&Path) -> Output,
) -> Installed {
    let root = cache_root();
    std::fs::create_dir_all(&root).unwrap();
    let dir = root.join(format!("{name}-{key}"));
    let lock_file = std::fs::File::create(root.join(format!("{name}.lock"))).unwrap();
    let _lock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .unwrap();
    let marker = dir.join(".installed");
    if marker.exists() {
        eprintln!("{name}: using the install in {}", dir.display());
        return Installed::At(dir);
    }
    if dir.exists() {
        std::fs::remove_dir_all(&dir).unwrap();
    }
    std::fs::create_dir_all(&dir).unwrap();
    let started = Instant::now();
    match install(&dir) {
        Ok(()) => {
            announce(&format!(
                "stock clients: {name} installed in {:.1} s into {}",
                started.elapsed().as_secs_f64(),
                dir.display()
            ));
            std::fs::write(&marker, b"").unwrap();
            Installed::At(dir)
        }
        Err(failure) => {
            let probed = probe(&dir);
            if probed.status.success() {
                panic!("{name}: the install failed although the registry answers:\n{failure}");
            }
            Installed::Unreachable(format!("{failure}\nregistry probe: {}", describe(&probed)))
        }
    }
}

/// The Python virtual environment with `tests/clients/python/requirements.txt`.
fn python_env() -> Installed {
    let requirements = clients_src().join("python/requirements.txt");
    let key = content_key(std::slice::from_ref(&requirements));
    install_once(
        "python",
        &key,
        |dir| {
            let venv = run(
                Command::new("python3").args(["-m", "venv"]).arg(dir),
                INSTALL_TIMEOUT,
            );
            // A machine without a working venv module is not a registry
            // problem: fail, whatever pip would say.
            assert!(
                venv.status.success(),
                "python3 -m venv failed: {}",
                describe(&venv)
            );
            let pip = run(
                Command::new(dir.join("bin/python"))
                    .args(["-m", "pip", "install", "--disable-pip-version-check"])
                    .args(["--no-input", "--progress-bar", "off", "-r"])
                    .arg(&requirements),
                INSTALL_TIMEOUT,
            );
            if pip.status.success() {
                Ok(())
            } else {
                Err(format!("pip install failed: {}", describe(&pip)))
            }
        },
        |dir| {
            run(
                Command::new(dir.join("bin/python"))
                    .args(["-m", "pip", "index", "versions", "grpcio"])
                    .args(["--disable-pip-version-check", "--no-input"]),
                Duration::from_secs(120),
            )
        },
    )
}

/// The npm packages of `tests/clients/node/package.json`, as locked.
fn node_env() -> Installed {
    let src = clients_src().join("node");
    let manifests = [src.join("package.json"), src.join("package-lock.json")];
    let key = content_key(&manifests);
    install_once(
        "node",
        &key,
        |dir| {
            for file in &manifests {
                std::fs::copy(file, dir.join(file.file_name().unwrap())).unwrap();
            }
            // No install scripts: the packages are plain JavaScript, and
            // none needs its scripts to work.
            let npm = run(
                Command::new("npm")
                    .args(["ci", "--ignore-scripts", "--no-audit", "--no-fund"])
                    .current_dir(dir),
                INSTALL_TIMEOUT,
            );
            if npm.status.success() {
                Ok(())
            } else {
                Err(format!("npm ci failed: {}", describe(&npm)))
            }
        },
        |dir| {
            run(
                Command::new("npm").arg("ping").current_dir(dir),
                Duration::from_secs(120),
            )
        },
    )
}

/// Writes to the real stderr: the test harness captures `eprintln!` of a
/// passing test, and a skip or an install time must show in a CI log.
fn announce(text: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{text}");
}

/// Says why a test is skipped.
fn skip(client: &str, why: &str) {
    announce(&format!(
        "SKIPPED: the {client} stock-client test did not run: its package registry is unreachable.\n{why}"
    ));
}

/// The client's printed `key: value` lines.
fn field<'a>(stdout: &'a str, key: &str) -> Option<&'a str> {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(": "))
}

/// Runs a client script and checks what it printed: the services by
/// reflection, a conversation it created (which the daemon has, with the
/// reply streamed to the client), and the reply.
async fn run_client(s: &mut Started, mut cmd: Command, reply: &str) -> String {
    s.fake.push(Script::text(reply));
    let out = tokio::task::spawn_blocking(move || run(&mut cmd, Duration::from_secs(120)))
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the client failed: {}\ndaemon log:\n{}",
        describe(&out),
        s.daemon.log()
    );
    let services = field(&stdout, "services").unwrap_or_default();
    for service in [
        "agent.v1.AgentService",
        "grpc.health.v1.Health",
        "ServerReflection",
    ] {
        assert!(services.contains(service), "{service} in {stdout}");
    }
    let listed: usize = field(&stdout, "listed").unwrap().parse().unwrap();
    assert!(listed >= 1, "{stdout}");
    assert_eq!(field(&stdout, "reply"), Some(reply), "{stdout}");
    let id = field(&stdout, "created").unwrap().to_string();
    let conversation = super::util::get(&mut s.client, &id).await;
    let texts: Vec<String> = conversation
        .messages
        .iter()
        .filter(|m| m.role == pb::Role::Assistant as i32)
        .map(super::util::text_of_message)
        .collect();
    assert_eq!(texts, [reply], "the daemon has the reply the client saw");
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_grpcio_with_default_options_works_over_the_unix_socket() {
    let env = match tokio::task::spawn_blocking(python_env).await.unwrap() {
        Installed::At(dir) => dir,
        Installed::Unreachable(why) => return skip("Python grpcio", &why),
    };
    let mut s = Scenario::new().start().await;
    let gen_dir = tempfile::tempdir().unwrap();
    // Default options: grpcio sends the percent-encoded socket path as
    // `:authority`. Then the bare path, as grpc-java and grpcurl send it.
    let authorities = [None, Some(s.daemon.socket.display().to_string())];
    for (i, authority) in authorities.iter().enumerate() {
        let mut cmd = Command::new(env.join("bin/python"));
        cmd.arg(clients_src().join("python/client.py"))
            .arg(&s.daemon.socket)
            .arg(proto_root())
            .arg(gen_dir.path().join(i.to_string()))
            .arg(s.work.path())
            .args(authority);
        let stdout = run_client(&mut s, cmd, &format!("Hello, grpcio number {i}")).await;
        assert!(
            stdout.contains("grpc.reflection.v1alpha.ServerReflection"),
            "{stdout}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_grpc_js_with_default_options_works_over_the_unix_socket() {
    let env = match tokio::task::spawn_blocking(node_env).await.unwrap() {
        Installed::At(dir) => dir,
        Installed::Unreachable(why) => return skip("Node grpc-js", &why),
    };
    // The script runs from the install, where its packages resolve.
    let script = env.join("client.js");
    std::fs::copy(clients_src().join("node/client.js"), &script).unwrap();
    let mut s = Scenario::new().start().await;
    let mut cmd = Command::new("node");
    cmd.arg(&script)
        .arg(&s.daemon.socket)
        .arg(proto_root())
        .arg(s.work.path());
    let stdout = run_client(&mut s, cmd, "Hello, grpc-js").await;
    let methods = field(&stdout, "methods").unwrap_or_default();
    for method in ["Attach", "CreateConversation", "ListConversations"] {
        assert!(
            methods.split(' ').any(|m| m == method),
            "{method} in {stdout}"
        );
    }
}
