//! Making a sandbox: the kernel probe, the Landlock ruleset of a plan, the
//! seccomp program that cuts the network, and the system calls a child
//! makes to enter them.

use std::os::fd::{OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr,
};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

use super::plan::{Grant, Rule};

/// The Landlock ABI version the kernel speaks, or why there is none.
#[expect(unsafe_code, reason = "the Landlock probe is a raw system call")]
pub(super) fn landlock_abi() -> Result<i32, String> {
    if !cfg!(target_os = "linux") {
        return Err("Landlock is Linux-only".to_string());
    }
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: the documented version probe: no attribute, size 0.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if version > 0 {
        return i32::try_from(version).map_err(|_| format!("odd Landlock ABI {version}"));
    }
    Err(match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::ENOSYS) => "the kernel has no Landlock (before Linux 5.13)".to_string(),
        Some(libc::EOPNOTSUPP) => {
            "Landlock is disabled in this kernel (boot option lsm=)".to_string()
        }
        _ => format!(
            "the Landlock probe failed: {}",
            std::io::Error::last_os_error()
        ),
    })
}

/// The entries of `dir` that are not symbolic links, for the planner.
pub(super) fn list_dir(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| !t.is_symlink()))
        .map(|e| e.path())
        .collect()
}

/// The Landlock ruleset of `rules`, every file-system right the ABI knows
/// handled. A path that cannot be opened (gone, a device this machine
/// lacks) is left out: it grants nothing then.
pub(super) fn ruleset(abi: i32, rules: &[Rule]) -> Result<OwnedFd, String> {
    let abi = ABI::from(abi);
    let mut created = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .and_then(Ruleset::create)
        .map_err(|e| format!("Landlock ruleset: {e}"))?;
    for rule in rules {
        let access = match rule.grant {
            Grant::List => AccessFs::ReadDir.into(),
            Grant::Read => AccessFs::from_read(abi),
            Grant::Write => AccessFs::from_all(abi),
        };
        let Ok(fd) = PathFd::new(&rule.path) else {
            continue;
        };
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| format!("Landlock rule for {}: {e}", rule.path.display()))?;
    }
    Option::<OwnedFd>::from(created).ok_or_else(|| "Landlock made no ruleset".to_string())
}

/// The seccomp program that cuts the network: `socket()` for any family
/// but `AF_UNIX`, and `io_uring_setup`, fail with EPERM.
pub(super) fn network_filter() -> Result<BpfProgram, String> {
    let not_unix = SeccompCondition::new(
        0,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Ne,
        libc::AF_UNIX as u64,
    )
    .and_then(|c| SeccompRule::new(vec![c]))
    .map_err(|e| e.to_string())?;
    let rules = [
        (libc::SYS_socket, vec![not_unix]),
        (libc::SYS_io_uring_setup, Vec::new()),
    ]
    .into_iter()
    .collect();
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| format!("seccomp on {}: {e}", std::env::consts::ARCH))?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| format!("seccomp filter: {e}"))?;
    BpfProgram::try_from(filter).map_err(|e| format!("seccomp program: {e}"))
}

/// Sets no-new-privileges and restricts the calling process with the
/// Landlock ruleset `ruleset`. Async-signal-safe: for the child between
/// `fork` and `exec`.
#[expect(
    unsafe_code,
    reason = "prctl and landlock_restrict_self are raw system calls"
)]
pub(super) fn restrict_self(ruleset: RawFd) -> std::io::Result<()> {
    // SAFETY: plain system calls on integers; nothing is allocated.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
