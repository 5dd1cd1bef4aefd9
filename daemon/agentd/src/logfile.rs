//! The daemon's log kept to a size. When standard error is a regular file
//! (an autostarted daemon's `agentd.log` in the runtime directory, a small
//! tmpfs; or a redirection), the log is written to that file until it
//! would pass `[log] max_bytes`; then the file becomes `<file>.1`
//! (replacing the one before), a new one is started, and standard error
//! and output (panics, the start lines) are moved to it too. A log on a
//! terminal, a pipe or the journal is written as it is.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The file standard error goes to, when it is a regular file: `agent
/// daemon logs` reads it.
pub(crate) fn stderr_file() -> Option<PathBuf> {
    let target = std::fs::read_link("/proc/self/fd/2").ok()?;
    std::fs::metadata(&target)
        .ok()
        .filter(std::fs::Metadata::is_file)
        .map(|_| target)
}

/// A log file kept under a size, shared by every writer of the tracing
/// subscriber.
#[derive(Debug, Clone)]
pub(crate) struct CappedLog {
    state: Arc<Mutex<State>>,
}

#[derive(Debug)]
struct State {
    path: PathBuf,
    file: File,
    max_bytes: u64,
    /// Whether standard error and output follow the file when it is
    /// replaced (the daemon's; not a test's).
    redirect_std: bool,
}

/// Where the tracing subscriber writes: the capped file, or standard
/// error as it is.
#[derive(Debug, Clone)]
pub(crate) enum LogWriter {
    Capped(CappedLog),
    Stderr,
}

impl LogWriter {
    /// The daemon's: capped when standard error is a regular file that
    /// can be opened again (at the default size until
    /// [`LogWriter::set_max_bytes`]).
    pub(crate) fn for_stderr() -> LogWriter {
        let Some(log) =
            stderr_file().and_then(|path| CappedLog::open(&path, DEFAULT_MAX, true).ok())
        else {
            return LogWriter::Stderr;
        };
        // Standard error (and output, when it is the same file) become
        // this file, opened to append: `2> FILE` opened it to write at its
        // own offset, over the lines appended since.
        if let Ok(state) = log.state.lock() {
            state.redirect();
        }
        LogWriter::Capped(log)
    }

    /// Applies `[log] max_bytes`.
    pub(crate) fn set_max_bytes(&self, max_bytes: u64) {
        if let LogWriter::Capped(log) = self
            && let Ok(mut state) = log.state.lock()
        {
            state.max_bytes = max_bytes;
        }
    }
}

/// The size cap before the config is read.
const DEFAULT_MAX: u64 = 10 * 1024 * 1024;

impl CappedLog {
    /// Appends to `path` (mode 0600 when created), starting a new file
    /// whenever the next line would take it past `max_bytes`.
    pub(crate) fn open(
        path: &Path,
        max_bytes: u64,
        redirect_std: bool,
    ) -> std::io::Result<CappedLog> {
        let file = append(path)?;
        Ok(CappedLog {
            state: Arc::new(Mutex::new(State {
                path: path.to_path_buf(),
                file,
                max_bytes,
                redirect_std,
            })),
        })
    }
}

fn append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

impl State {
    /// `<file>` becomes `<file>.1`, and a new `<file>` is started.
    fn rotate(&mut self) -> std::io::Result<()> {
        let mut old = self.path.clone().into_os_string();
        old.push(".1");
        match std::fs::rename(&self.path, &old) {
            // Removed by someone: a new one is started all the same.
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let old = std::mem::replace(&mut self.file, append(&self.path)?);
        self.redirect_from(&old);
        Ok(())
    }

    /// Points standard error, and standard output when it was open on
    /// `was` too, at the file.
    fn redirect_from(&self, was: &File) {
        if !self.redirect_std {
            return;
        }
        let out_too = is_same_file(std::io::stdout(), was);
        let _ = nix::unistd::dup2_stderr(&self.file);
        if out_too {
            let _ = nix::unistd::dup2_stdout(&self.file);
        }
    }

    /// Points standard error (and output, when it is the same file) at
    /// the file.
    fn redirect(&self) {
        self.redirect_from(&self.file);
    }
}

/// Whether `fd` is open on the same file as `file`.
fn is_same_file(fd: impl std::os::fd::AsFd, file: &File) -> bool {
    let Ok(stat) = nix::sys::stat::fstat(fd) else {
        return false;
    };
    file.metadata()
        .is_ok_and(|m| m.ino() == stat.st_ino && m.dev() == stat.st_dev)
}

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let LogWriter::Capped(log) = self else {
            return std::io::stderr().write(buf);
        };
        let Ok(mut state) = log.state.lock() else {
            return std::io::stderr().write(buf);
        };
        let len = u64::try_from(buf.len()).unwrap_or(u64::MAX);
        // Others append to the file too (standard error, a client's start
        // lines): its real size decides.
        let size = state.file.metadata().map_or(0, |m| m.len());
        if size > 0 && size.saturating_add(len) > state.max_bytes {
            // A log that cannot be replaced is written on: losing lines
            // would hide why.
            let _ = state.rotate();
        }
        state.file.write_all(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;

    fn make_writer(&'a self) -> LogWriter {
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_stays_under_its_cap_with_one_older_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agentd.log");
        std::fs::write(&path, "a line from before\n").unwrap();
        let mut log = LogWriter::Capped(CappedLog::open(&path, 1000, false).unwrap());
        let line = format!("{}\n", "x".repeat(99));
        for _ in 0..95 {
            log.write_all(line.as_bytes()).unwrap();
        }
        let size = |p: &Path| std::fs::metadata(p).unwrap().len();
        let older = dir.path().join("agentd.log.1");
        assert!(size(&path) <= 1000, "{}", size(&path));
        assert!(size(&older) <= 1000, "{}", size(&older));
        // 19 + 95 × 100 bytes: the first file held 9 lines, the others 10
        // each; the newest 16 are kept.
        assert_eq!(
            size(&path) + size(&older),
            1600,
            "the newest lines are kept"
        );
        // Only one older file.
        let files = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(files, 2);
        // Whole lines in each.
        for p in [&path, &older] {
            let text = std::fs::read_to_string(p).unwrap();
            assert!(text.lines().all(|l| l.len() == 99), "{text}");
        }
        // A file started by rotation is private.
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn what_others_wrote_counts_too() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agentd.log");
        let mut log = LogWriter::Capped(CappedLog::open(&path, 1000, false).unwrap());
        log.write_all(&[b'x'; 100]).unwrap();
        // Another writer (standard error) appends 950 bytes.
        let mut other = append(&path).unwrap();
        other.write_all(&[b'y'; 950]).unwrap();
        log.write_all(&[b'z'; 100]).unwrap();
        assert!(dir.path().join("agentd.log.1").exists());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 100);
    }
}
