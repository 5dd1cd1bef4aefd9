//! Starting a process the way `posix_spawn` does, with one more step: the
//! child may confine itself (the sandbox) before it `exec`s.
//!
//! std's `Command` forks the whole daemon as soon as a `pre_exec` hook is
//! set, and a fork copies the page tables of every mapping the daemon has:
//! about 1.7 ms a command on the benchmark machine, against ~0.1 ms for the
//! `posix_spawn` std uses otherwise (issue 44). glibc's `posix_spawn` is a
//! `clone(CLONE_VM | CLONE_VFORK)`: the child runs in the daemon's memory
//! on a stack of its own, the calling thread waits until it has `exec`ed,
//! and nothing is copied. This module makes the same `clone`, and the
//! child does what `posix_spawn`'s attributes would (signal dispositions
//! and mask, process group, standard streams, working directory), then the
//! sandbox's three system calls, then `execve`.
//!
//! What the child may do is what a `vfork` child may: async-signal-safe
//! system calls on memory the parent prepared. It allocates nothing, takes
//! no lock and never returns into Rust code of the daemon; an error is
//! written to a slot the parent reads once `clone` returns, and the child
//! `_exit`s.
//!
//! The clone also asks for a pidfd (`CLONE_PIDFD`, Linux 5.2): the handle
//! [`super::child::Child`] waits on. An older kernel refuses the flag
//! (EINVAL); the daemon then clones without it from that spawn on, and the
//! child is followed by SIGCHLD and `waitpid` instead.

use std::ffi::{CString, OsStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicI32, Ordering};

use nix::unistd::Pid;

use super::sandbox::Confinement;

/// The child's stack. Its work is a few dozen system calls through libc;
/// `posix_spawn` itself uses 32 KiB plus the arguments' size.
const STACK_BYTES: usize = 64 * 1024;

/// What to start: everything the child needs, prepared in the parent.
pub(super) struct Spec<'a> {
    /// The program: an absolute path, or a name the child looks up on the
    /// `PATH` of `env` (as `execvp` does).
    pub(super) program: &'a OsStr,
    /// `argv`, `argv[0]` included.
    pub(super) args: &'a [&'a OsStr],
    /// The whole environment.
    pub(super) env: &'a [(std::ffi::OsString, std::ffi::OsString)],
    pub(super) cwd: &'a std::path::Path,
    /// stdin, stdout and stderr; each becomes the child's 0, 1 and 2.
    pub(super) stdio: [RawFd; 3],
    /// Confines the child before `exec`.
    pub(super) sandbox: Option<&'a Confinement>,
}

/// A started process: its pid and its pidfd (None on a kernel without
/// `CLONE_PIDFD`).
pub(super) struct Started {
    pub(super) pid: Pid,
    pub(super) pidfd: Option<OwnedFd>,
}

/// Set once the kernel refused `CLONE_PIDFD`.
static NO_PIDFD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Starts `spec` in a new process group of its own (the child leads it).
/// The error is the one the child met (`chdir`, the sandbox, `execve`) or
/// the one `clone` returned.
pub(super) fn spawn(spec: &Spec<'_>) -> std::io::Result<Started> {
    let prepared = Prepared::new(spec)?;
    if NO_PIDFD.load(Ordering::Relaxed) {
        return prepared.run(false).map_err(Failure::into_inner);
    }
    match prepared.run(true) {
        Err(Failure::Clone(e)) if e.raw_os_error() == Some(libc::EINVAL) => {
            // Before Linux 5.2: no pidfds; follow children by SIGCHLD.
            NO_PIDFD.store(true, Ordering::Relaxed);
            tracing::info!("the kernel has no CLONE_PIDFD: commands are followed by SIGCHLD");
            prepared.run(false).map_err(Failure::into_inner)
        }
        other => other.map_err(Failure::into_inner),
    }
}

/// Why a start failed: `clone` itself, or the child before `exec`.
enum Failure {
    Clone(std::io::Error),
    Child(std::io::Error),
}

impl Failure {
    fn into_inner(self) -> std::io::Error {
        match self {
            Failure::Clone(e) | Failure::Child(e) => e,
        }
    }
}

/// [`spawn`] as on a kernel without `CLONE_PIDFD`.
#[cfg(test)]
pub(super) fn spawn_without_pidfd(spec: &Spec<'_>) -> std::io::Result<Started> {
    Prepared::new(spec)?.run(false).map_err(Failure::into_inner)
}

/// `spec` in the form the child uses: C strings, and the pointer arrays
/// `execve` takes.
struct Prepared<'a> {
    program: CString,
    /// Whether `program` is looked up on `PATH` (`execvpe`).
    search: bool,
    cwd: CString,
    // The strings the pointer arrays point into.
    _args: Vec<CString>,
    _env: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    stdio: [RawFd; 3],
    sandbox: Option<&'a Confinement>,
    /// Where the child writes the errno it failed with (0: it `exec`ed).
    error: AtomicI32,
}

fn c_string(s: &OsStr) -> std::io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} contains a NUL byte", s.to_string_lossy()),
        )
    })
}

/// A null-terminated array of pointers into `strings`.
fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

impl<'a> Prepared<'a> {
    fn new(spec: &Spec<'a>) -> std::io::Result<Self> {
        let args = spec
            .args
            .iter()
            .map(|a| c_string(a))
            .collect::<std::io::Result<Vec<_>>>()?;
        let env = spec
            .env
            .iter()
            .map(|(k, v)| {
                let mut pair = k.as_bytes().to_vec();
                pair.push(b'=');
                pair.extend_from_slice(v.as_bytes());
                c_string(OsStr::from_bytes(&pair))
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        let argv = pointers(&args);
        let envp = pointers(&env);
        Ok(Prepared {
            program: c_string(spec.program)?,
            search: !spec.program.as_bytes().contains(&b'/'),
            cwd: c_string(spec.cwd.as_os_str())?,
            _args: args,
            _env: env,
            argv,
            envp,
            stdio: spec.stdio,
            sandbox: spec.sandbox,
            error: AtomicI32::new(0),
        })
    }

    /// The `clone`, with every signal blocked around it so that no handler
    /// of the daemon runs in the child before the child has reset them.
    #[expect(
        unsafe_code,
        reason = "clone(CLONE_VM | CLONE_VFORK) and the signal mask around it"
    )]
    fn run(&self, with_pidfd: bool) -> Result<Started, Failure> {
        let mut stack = vec![0u8; STACK_BYTES];
        let mut pidfd: libc::c_int = -1;
        let mut flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD;
        if with_pidfd {
            flags |= libc::CLONE_PIDFD;
        }
        self.error.store(0, Ordering::Relaxed);
        // SAFETY: `all` and `old` are plain sigset_t values; every signal
        // is blocked for this thread only, and restored below.
        let old = unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
            old
        };
        // The stack grows down on every architecture Linux runs this on.
        let top = stack.as_mut_ptr().wrapping_add(STACK_BYTES);
        // SAFETY: the child runs `child_main` on `stack`, sharing our
        // memory; `self` and `stack` outlive it, since with CLONE_VFORK
        // this thread is suspended until the child has exec'ed or exited.
        // The child only makes system calls (see `child_main`).
        let pid = unsafe {
            libc::clone(
                child_main,
                top.cast(),
                flags,
                std::ptr::from_ref(self).cast_mut().cast(),
                &mut pidfd as *mut libc::c_int,
            )
        };
        let clone_error = std::io::Error::last_os_error();
        // SAFETY: restores this thread's mask saved above.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        }
        drop(stack);
        if pid < 0 {
            return Err(Failure::Clone(clone_error));
        }
        // SAFETY: with CLONE_PIDFD the kernel stored a new descriptor,
        // ours to own, in `pidfd`.
        let pidfd = with_pidfd.then(|| unsafe { OwnedFd::from_raw_fd(pidfd) });
        let child_error = self.error.load(Ordering::Acquire);
        if child_error != 0 {
            // The child has exited: reap it so it leaves no zombie.
            let _ = nix::sys::wait::waitpid(Pid::from_raw(pid), None);
            return Err(Failure::Child(std::io::Error::from_raw_os_error(
                child_error,
            )));
        }
        Ok(Started {
            pid: Pid::from_raw(pid),
            pidfd,
        })
    }
}

/// The child: runs on its own stack in the daemon's memory until `exec`.
/// Returns only by `_exit`.
#[expect(unsafe_code, reason = "the vfork child's system calls")]
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `Prepared`, alive while the parent is
    // suspended in `clone`.
    let prepared: &Prepared<'_> = unsafe { &*arg.cast::<Prepared<'_>>() };
    let errno = match prepared.enter() {
        Ok(()) => 0,
        Err(e) => e.raw_os_error().unwrap_or(libc::EINVAL),
    };
    prepared.error.store(
        if errno == 0 { libc::EINVAL } else { errno },
        Ordering::Release,
    );
    // SAFETY: ends the child without running any of the daemon's exit
    // code (atexit handlers, destructors) in shared memory.
    unsafe { libc::_exit(127) }
}

impl Prepared<'_> {
    /// The child's steps, in `posix_spawn`'s order; returns only on error.
    #[expect(unsafe_code, reason = "the vfork child's system calls")]
    fn enter(&self) -> std::io::Result<()> {
        let check = |r: libc::c_int| {
            if r < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(())
            }
        };
        // SAFETY: every call below is an async-signal-safe system call on
        // integers and on memory the parent prepared before `clone`.
        unsafe {
            reset_signals();
            check(libc::setpgid(0, 0))?;
            for (target, &fd) in self.stdio.iter().enumerate() {
                let target = target as RawFd;
                if fd == target {
                    // Already in place: only the close-on-exec flag goes.
                    check(libc::fcntl(fd, libc::F_SETFD, 0))?;
                } else {
                    check(libc::dup2(fd, target))?;
                }
            }
            check(libc::chdir(self.cwd.as_ptr()))?;
            if let Some(sandbox) = self.sandbox {
                sandbox.enter()?;
            }
            if self.search {
                libc::execvpe(
                    self.program.as_ptr(),
                    self.argv.as_ptr(),
                    self.envp.as_ptr(),
                );
            } else {
                libc::execve(
                    self.program.as_ptr(),
                    self.argv.as_ptr(),
                    self.envp.as_ptr(),
                );
            }
        }
        Err(std::io::Error::last_os_error())
    }
}

/// Every signal the daemon handles goes back to its default action, and
/// SIGPIPE (which Rust programs ignore) too, as std's spawn does; then
/// the mask is emptied. Until then every signal is blocked (the parent
/// blocked them before `clone`), so no handler of the daemon runs here.
#[expect(unsafe_code, reason = "sigaction and sigprocmask in the vfork child")]
unsafe fn reset_signals() {
    // SAFETY: sigaction and sigprocmask on stack values; the child has its
    // own copy of the handler table (no CLONE_SIGHAND).
    unsafe {
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        for signal in 1..=libc::SIGRTMAX() {
            if signal == libc::SIGKILL || signal == libc::SIGSTOP {
                continue;
            }
            let mut current: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut current) != 0 {
                continue;
            }
            let handled =
                current.sa_sigaction != libc::SIG_DFL && current.sa_sigaction != libc::SIG_IGN;
            if handled || signal == libc::SIGPIPE {
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    }
}

/// `fd` moved to a number above the standard streams' when it is one of
/// them, so that putting the streams in place in the child cannot
/// overwrite another stream's source first.
pub(super) fn above_stdio(fd: OwnedFd) -> std::io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    let moved = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(3))?;
    #[expect(
        unsafe_code,
        reason = "fcntl(F_DUPFD_CLOEXEC) returned a new descriptor"
    )]
    // SAFETY: `moved` is a new descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(moved) })
}
