//! Build-script helper shared by `client-cli/build.rs` and `tests/build.rs`:
//! lays out the client's start-up code together.
//!
//! `startup-symbols.txt` (next to this file) lists the functions of the
//! release client that one `agent run`, `agent ls` and `agent show` run
//! (`tests/orderfile.sh` writes it from callgrind). Linked first, in one
//! stretch of `.text`, they are paged in by ~18 faults instead of ~50
//! spread over 3 MB, and the kernel maps (and at exit unmaps) about a
//! quarter of the text pages (BENCHMARKS.md, 2026-11-27, later). Names
//! that are not in the binary (another toolchain, other dependency
//! versions) are skipped by the linker, so a stale list costs nothing but
//! the gain.
//!
//! Only release builds get it, and only when the linker takes lld's
//! `--symbol-ordering-file` (rustc's default `rust-lld` on x86_64 Linux);
//! that is tried by linking an empty program with the same rustc, target,
//! linker and flags.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The link arguments that order the start-up symbols listed in `list`,
/// or none when this build should not (or cannot) use them.
pub(crate) fn startup_order_args(list: &Path) -> Vec<String> {
    println!("cargo:rerun-if-changed={}", list.display());
    println!("cargo:rerun-if-env-changed=AGENT_NO_LINK_ORDER");
    let wanted = std::env::var("PROFILE").is_ok_and(|p| p == "release")
        && std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux")
        && std::env::var_os("AGENT_NO_LINK_ORDER").is_none()
        && list.is_file();
    if !wanted {
        return Vec::new();
    }
    let args = vec![
        format!("-Wl,--symbol-ordering-file={}", list.display()),
        "-Wl,--no-warn-symbol-ordering".to_string(),
    ];
    if linker_takes(&args) {
        args
    } else {
        println!(
            "cargo:warning=the linker does not take --symbol-ordering-file: the client's \
             start-up code is not laid out together (no harm, a slower start)"
        );
        Vec::new()
    }
}

/// Whether an empty program links with `args` the way this crate's
/// binaries will be linked.
fn linker_takes(args: &[String]) -> bool {
    let Some(out_dir) = std::env::var_os("OUT_DIR").map(PathBuf::from) else {
        return false;
    };
    let source = out_dir.join("link_order_probe.rs");
    if std::fs::write(&source, "fn main() {}\n").is_err() {
        return false;
    }
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let mut cmd = Command::new(rustc);
    cmd.arg("--crate-name=link_order_probe")
        .arg("--edition=2021")
        .arg("-o")
        .arg(out_dir.join("link_order_probe"))
        .arg(&source);
    if let Ok(target) = std::env::var("TARGET") {
        cmd.arg("--target").arg(target);
    }
    if let Some(linker) = std::env::var_os("RUSTC_LINKER") {
        cmd.arg("-C").arg({
            let mut arg = std::ffi::OsString::from("linker=");
            arg.push(linker);
            arg
        });
    }
    if let Ok(flags) = std::env::var("CARGO_ENCODED_RUSTFLAGS") {
        cmd.args(flags.split('\u{1f}').filter(|f| !f.is_empty()));
    }
    for arg in args {
        cmd.arg("-C").arg(format!("link-arg={arg}"));
    }
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    cmd.status().is_ok_and(|status| status.success())
}
