//! A shell's output: the spool file with its size cap, the in-memory tail,
//! and the scan that turns "bytes since the cursor" into what the model
//! reads.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Write};

use regex::Regex;

use crate::truncate::HeadTail;

/// Size of the chunks the spool is read in.
const CHUNK: usize = 64 * 1024;

/// The writing side of a shell's output. Offsets are offsets in the spool
/// file; the tail holds its last `tail_cap` bytes.
#[derive(Debug)]
pub(super) struct Spool {
    /// None once the shell has ended, or after a write failed.
    file: Option<File>,
    /// Bytes in the spool file.
    written: u64,
    tail: VecDeque<u8>,
    tail_cap: usize,
    /// Output beyond this many bytes is discarded.
    cap: u64,
    /// Output was discarded and the marker written.
    discarding: bool,
}

/// What [`Spool::append`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Appended {
    /// Bytes that reached the spool.
    pub(super) written: usize,
    /// This call hit the cap (the marker was written).
    pub(super) started_discarding: bool,
}

impl Spool {
    pub(super) fn new(file: File, cap: u64, tail_cap: usize) -> Self {
        Spool {
            file: Some(file),
            written: 0,
            tail: VecDeque::new(),
            tail_cap,
            cap,
            discarding: false,
        }
    }

    /// Bytes in the spool file.
    pub(super) fn written(&self) -> u64 {
        self.written
    }

    /// Bytes of the tail held in memory.
    #[cfg(test)]
    pub(super) fn tail_len(&self) -> usize {
        self.tail.len()
    }

    /// Appends command output, up to the cap; the first byte beyond it
    /// writes the marker, and everything after is dropped.
    pub(super) fn append(&mut self, bytes: &[u8]) -> Appended {
        if self.discarding || bytes.is_empty() {
            return Appended::default();
        }
        let room = self.cap.saturating_sub(self.written);
        let take = usize::try_from(room).unwrap_or(usize::MAX).min(bytes.len());
        let mut done = Appended {
            written: self.write(&bytes[..take]),
            started_discarding: false,
        };
        if take < bytes.len() {
            let newline = if self.ends_with_newline() { "" } else { "\n" };
            let marker = format!(
                "{newline}[agentd: output beyond {} bytes discarded]\n",
                self.cap
            );
            done.written += self.write(marker.as_bytes());
            self.discarding = true;
            done.started_discarding = true;
        }
        done
    }

    /// Appends a note of agentd's own (not command output) unless output is
    /// being discarded, in which case the marker already ends the spool.
    pub(super) fn note(&mut self, text: &str) {
        if self.discarding {
            return;
        }
        let newline = if self.ends_with_newline() { "" } else { "\n" };
        self.write(format!("{newline}{text}\n").as_bytes());
    }

    /// Closes the file: the shell has ended and nothing more is written.
    pub(super) fn close(&mut self) {
        self.file = None;
    }

    fn ends_with_newline(&self) -> bool {
        self.written == 0 || self.tail.back() == Some(&b'\n')
    }

    /// Writes to the file and the tail. A failing disk ends spooling (the
    /// offsets would no longer match the file), it does not stop the shell.
    fn write(&mut self, bytes: &[u8]) -> usize {
        let Some(file) = &mut self.file else {
            return 0;
        };
        // Plain blocking writes: they go to the page cache and take
        // microseconds, less than handing them to another thread would.
        if let Err(e) = file.write_all(bytes) {
            tracing::warn!("background shell spool write failed, output dropped: {e}");
            self.file = None;
            return 0;
        }
        self.written += bytes.len() as u64;
        if bytes.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.tail_cap..]);
        } else {
            let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.tail_cap);
            self.tail.drain(..overflow);
            self.tail.extend(bytes);
        }
        bytes.len()
    }

    /// The bytes `[start, end)` if the tail still holds all of them.
    pub(super) fn tail_range(&self, start: u64, end: u64) -> Option<Vec<u8>> {
        let tail_start = self.written - self.tail.len() as u64;
        if start < tail_start || end > self.written || start > end {
            return None;
        }
        let from = usize::try_from(start - tail_start).ok()?;
        let to = usize::try_from(end - tail_start).ok()?;
        Some(self.tail.range(from..to).copied().collect())
    }
}

/// The result of scanning new output for the model.
#[derive(Debug)]
pub(super) struct Scanned {
    /// The text, within the budget, with a truncation marker if cut.
    pub(super) text: String,
    /// Bytes of the spool the scan took up; the cursor moves by this much.
    pub(super) consumed: u64,
}

/// Scans `len` bytes of output from `src` for the model: whole lines only
/// while the shell runs (a trailing partial line waits for its end, unless
/// it is longer than `max`), only lines matching `filter` if there is one,
/// and at most about `max` bytes of text, keeping head and tail. Memory
/// stays within a few times `max` whatever `len` is.
pub(super) fn scan(
    mut src: impl Read,
    len: u64,
    complete: bool,
    filter: Option<&Regex>,
    max: usize,
) -> std::io::Result<Scanned> {
    let max = max.max(1);
    let mut out = HeadTail::new(max);
    // The current line: without a filter it is only the part not yet passed
    // on (under `max` bytes); with one, at most its first `max` bytes, for
    // matching. `line_len` counts all of it.
    let mut line: Vec<u8> = Vec::new();
    let mut line_len: u64 = 0;
    let matching = |line: &[u8], out: &mut HeadTail| {
        if filter.is_some_and(|re| re.is_match(&String::from_utf8_lossy(line))) {
            out.push(line);
            if line.last() != Some(&b'\n') {
                out.push(b"\n");
            }
        }
    };
    let mut buf = vec![0u8; CHUNK];
    let mut pos: u64 = 0;
    while pos < len {
        let want = usize::try_from(len - pos).unwrap_or(CHUNK).min(CHUNK);
        let n = src.read(&mut buf[..want])?;
        if n == 0 {
            break;
        }
        pos += n as u64;
        for piece in buf[..n].split_inclusive(|b| *b == b'\n') {
            let (kept, rest) = piece.split_at(piece.len().min(max.saturating_sub(line.len())));
            line.extend_from_slice(kept);
            line_len += piece.len() as u64;
            let ends = piece.last() == Some(&b'\n');
            if filter.is_none() && (ends || line.len() >= max) {
                // Without a filter every byte is passed on; a line longer
                // than the budget goes in pieces.
                out.push(&line);
                out.push(rest);
            } else if ends {
                matching(&line, &mut out);
            } else {
                continue;
            }
            line.clear();
            line_len = 0;
        }
    }
    let consumed = if complete || line_len > max as u64 {
        if filter.is_none() {
            out.push(&line);
        } else if line_len > 0 {
            matching(&line, &mut out);
        }
        pos
    } else {
        pos - line_len
    };
    Ok(Scanned {
        text: out.render(max),
        consumed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spool(cap: u64, tail: usize) -> (tempfile::TempDir, Spool) {
        let dir = tempfile::tempdir().unwrap();
        let file = File::create(dir.path().join("s.log")).unwrap();
        (dir, Spool::new(file, cap, tail))
    }

    fn scan_str(text: &str, complete: bool, filter: Option<&str>, max: usize) -> (String, u64) {
        let re = filter.map(|f| Regex::new(f).unwrap());
        let s = scan(
            text.as_bytes(),
            text.len() as u64,
            complete,
            re.as_ref(),
            max,
        )
        .unwrap();
        (s.text, s.consumed)
    }

    #[test]
    fn spool_caps_output_with_one_marker() {
        let (dir, mut s) = spool(10, 4);
        assert_eq!(s.append(b"12345").written, 5);
        let a = s.append(b"6789abc");
        assert!(a.started_discarding);
        assert_eq!(s.append(b"more"), Appended::default());
        s.note("ignored while discarding");
        let on_disk = std::fs::read_to_string(dir.path().join("s.log")).unwrap();
        assert_eq!(
            on_disk,
            "123456789a\n[agentd: output beyond 10 bytes discarded]\n"
        );
        assert_eq!(s.written(), on_disk.len() as u64);
        assert_eq!(s.tail_len(), 4);
        assert_eq!(
            s.tail_range(s.written() - 4, s.written()).unwrap(),
            b"ed]\n"
        );
        assert!(s.tail_range(0, 3).is_none());
    }

    #[test]
    fn output_of_exactly_the_cap_has_no_marker() {
        let (dir, mut s) = spool(4, 64);
        s.append(b"abc\n");
        s.note("note");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("s.log")).unwrap(),
            "abc\nnote\n"
        );
        assert_eq!(s.tail_range(2, 6).unwrap(), b"c\nno");
    }

    #[test]
    fn partial_lines_wait_while_running() {
        assert_eq!(
            scan_str("a\nb\npart", false, None, 100),
            ("a\nb\n".into(), 4)
        );
        assert_eq!(
            scan_str("a\nb\npart", true, None, 100),
            ("a\nb\npart".into(), 8)
        );
        assert_eq!(scan_str("part", false, None, 100), (String::new(), 0));
    }

    #[test]
    fn overlong_partial_line_is_not_held_back() {
        let text = "x".repeat(50);
        let (out, consumed) = scan_str(&text, false, None, 20);
        assert_eq!(consumed, 50);
        assert!(out.contains("output truncated: 50 bytes total"), "{out}");
    }

    #[test]
    fn filter_keeps_matching_lines() {
        let text = "ok 1\nERROR two\nok 3\nERROR four";
        assert_eq!(
            scan_str(text, false, Some("ERROR"), 100),
            ("ERROR two\n".into(), 20)
        );
        assert_eq!(
            scan_str(text, true, Some("ERROR"), 100),
            ("ERROR two\nERROR four\n".into(), text.len() as u64)
        );
    }

    #[test]
    fn big_output_keeps_head_and_tail() {
        let text: String = (0..10_000).map(|i| format!("line {i}\n")).collect();
        let (out, consumed) = scan_str(&text, false, None, 1000);
        assert_eq!(consumed, text.len() as u64);
        assert!(out.starts_with("line 0\n"), "{out}");
        assert!(out.ends_with("line 9999\n"), "{out}");
        assert!(out.len() < 1200, "{}", out.len());
    }
}
