//! A running command's output for people watching, as it is produced.
//!
//! The tool result is the source of truth; this is a view of it, and a
//! cheap one: output is coalesced into at most one [`OutputChunk`] per
//! [`INTERVAL`] (plus one at the end if any was sent), each at most
//! [`MAX_CHUNK_BYTES`] long, keeping the newest bytes when more arrived.
//! Nothing here waits: a chunk is handed to [`LiveOutput`], whose sink
//! never blocks, so the command never slows down for its viewers. A
//! command that ends within the first interval (`echo hi`) sends nothing
//! at all: its result's preview ([`OutputPreview`]) shows what it printed.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

/// The shortest time between two chunks of one call.
pub(crate) const INTERVAL: Duration = Duration::from_millis(80);
/// The most text one chunk carries; older bytes are skipped.
pub(crate) const MAX_CHUNK_BYTES: usize = 8 * 1024;
/// Lines of the output's start and end a result's preview keeps.
const PREVIEW_LINES: usize = 5;
/// The longest line a preview keeps, in bytes.
const PREVIEW_LINE_BYTES: usize = 500;

/// A piece of a running command's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OutputChunk {
    /// The output, decoded (invalid UTF-8 replaced).
    pub text: String,
    /// Bytes left out just before `text`.
    pub skipped_bytes: u64,
}

/// Where a running tool sends its output as it is produced. The sink must
/// not block: it is called from the task that reads the command's output.
#[derive(Clone)]
pub(crate) struct LiveOutput(Arc<dyn Fn(OutputChunk) + Send + Sync>);

impl LiveOutput {
    /// A sink calling `send` with every chunk.
    pub(crate) fn new(send: impl Fn(OutputChunk) + Send + Sync + 'static) -> Self {
        LiveOutput(Arc::new(send))
    }

    fn send(&self, chunk: OutputChunk) {
        (self.0)(chunk);
    }
}

impl std::fmt::Debug for LiveOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LiveOutput")
    }
}

/// The start and the end of what a command printed, for people to glance
/// at when the call ends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct OutputPreview {
    /// The first lines (at most [`PREVIEW_LINES`]).
    pub head: Vec<String>,
    /// The last lines, none of them also in `head`.
    pub tail: Vec<String>,
    /// Lines printed in all.
    pub lines: u64,
}

impl OutputPreview {
    /// The preview of `text` (the output as the result keeps it, possibly
    /// cut in the middle) of a command that printed `lines` lines.
    pub(crate) fn of(text: &str, lines: u64) -> OutputPreview {
        let all: Vec<&str> = text.lines().collect();
        let head_n = all.len().min(PREVIEW_LINES);
        let tail_n = (all.len() - head_n).min(PREVIEW_LINES);
        let cut = |l: &&str| clip(l, PREVIEW_LINE_BYTES);
        OutputPreview {
            head: all[..head_n].iter().map(cut).collect(),
            tail: all[all.len() - tail_n..].iter().map(cut).collect(),
            lines,
        }
    }
}

/// `line` cut to at most `max` bytes on a character boundary, with `…`.
fn clip(line: &str, max: usize) -> String {
    if line.len() <= max {
        return line.to_string();
    }
    let mut end = max;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &line[..end])
}

/// Counts the lines of a stream of bytes: newlines, plus a last line
/// without one.
#[derive(Debug, Default)]
pub(crate) struct LineCount {
    newlines: u64,
    open: bool,
}

impl LineCount {
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        self.newlines += bytes.iter().filter(|&&b| b == b'\n').count() as u64;
        if let Some(&last) = bytes.last() {
            self.open = last != b'\n';
        }
    }

    pub(crate) fn lines(&self) -> u64 {
        self.newlines + u64::from(self.open)
    }
}

/// Gathers a command's output between two chunks and sends them when due.
#[derive(Debug)]
pub(crate) struct Coalescer {
    sink: LiveOutput,
    /// Bytes not sent yet (at most [`MAX_CHUNK_BYTES`] plus an incomplete
    /// character held back from the last chunk).
    pending: Vec<u8>,
    /// Bytes dropped from `pending` since the last chunk.
    skipped: u64,
    /// The last byte dropped was a newline: `pending` starts a line.
    dropped_line_end: bool,
    /// When the next chunk may go: [`INTERVAL`] after the start, then after
    /// each chunk sent.
    next_due: Instant,
    /// A chunk was sent, so the end sends what is left.
    sent_any: bool,
}

impl Coalescer {
    /// For a command that started at `started`.
    pub(crate) fn new(sink: LiveOutput, started: Instant) -> Coalescer {
        Coalescer {
            sink,
            pending: Vec::new(),
            skipped: 0,
            dropped_line_end: false,
            next_due: started + INTERVAL,
            sent_any: false,
        }
    }

    /// Takes output the command wrote. Only the newest
    /// [`MAX_CHUNK_BYTES`] are kept: older ones count as skipped.
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        if bytes.len() >= MAX_CHUNK_BYTES {
            let keep = bytes.len() - MAX_CHUNK_BYTES;
            let last_dropped = match keep {
                0 => self.pending.last(),
                _ => bytes.get(keep - 1),
            };
            if let Some(&b) = last_dropped {
                self.dropped_line_end = b == b'\n';
            }
            self.skipped += (self.pending.len() + keep) as u64;
            self.pending.clear();
            self.pending.extend_from_slice(&bytes[keep..]);
            return;
        }
        let over = (self.pending.len() + bytes.len()).saturating_sub(MAX_CHUNK_BYTES);
        if over > 0 {
            self.dropped_line_end = self.pending.get(over - 1) == Some(&b'\n');
            self.pending.drain(..over);
            self.skipped += over as u64;
        }
        self.pending.extend_from_slice(bytes);
    }

    /// When a chunk is due, if there is anything to send.
    pub(crate) fn due(&self) -> Option<Instant> {
        (!self.pending.is_empty()).then_some(self.next_due)
    }

    /// Sends what is pending as one chunk (the time is due). An incomplete
    /// character at the end waits for the rest of its bytes.
    pub(crate) fn flush(&mut self, now: Instant) {
        self.next_due = now + INTERVAL;
        self.send(false);
    }

    /// The command's output ended: sends what is left, if chunks were sent
    /// before (otherwise the result's preview shows it all).
    pub(crate) fn finish(mut self) {
        if self.sent_any {
            self.send(true);
        }
    }

    fn send(&mut self, last: bool) {
        let mut start = 0;
        if self.skipped > 0 {
            // Cut at a line start, so the text does not begin mid-line.
            if !self.dropped_line_end
                && let Some(nl) = self.pending.iter().position(|&b| b == b'\n')
                && nl + 1 < self.pending.len()
            {
                start = nl + 1;
            }
            // Never mid-character.
            while start < self.pending.len() && is_continuation(self.pending[start]) {
                start += 1;
            }
        }
        let end = if last {
            self.pending.len()
        } else {
            complete_prefix(&self.pending[start..]) + start
        };
        if end <= start && self.skipped == 0 {
            return;
        }
        let text = String::from_utf8_lossy(&self.pending[start..end]).into_owned();
        let chunk = OutputChunk {
            text,
            skipped_bytes: self.skipped + start as u64,
        };
        self.pending.drain(..end);
        self.skipped = 0;
        self.sent_any = true;
        self.sink.send(chunk);
    }
}

fn is_continuation(b: u8) -> bool {
    b & 0xC0 == 0x80
}

/// How many bytes of `bytes` to send now: all but a character whose bytes
/// have not all arrived (invalid bytes go, to be replaced).
fn complete_prefix(bytes: &[u8]) -> usize {
    match std::str::from_utf8(bytes) {
        Ok(_) => bytes.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => {
            // Invalid somewhere: hold back only an incomplete tail (at
            // most 3 bytes after a lead byte).
            let tail_start = bytes.len().saturating_sub(3);
            for i in (tail_start..bytes.len()).rev() {
                let b = bytes[i];
                if !is_continuation(b) {
                    let need = match b {
                        0xC0..=0xDF => 2,
                        0xE0..=0xEF => 3,
                        0xF0..=0xF7 => 4,
                        _ => 1,
                    };
                    return if bytes.len() - i < need {
                        i
                    } else {
                        bytes.len()
                    };
                }
            }
            bytes.len()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    fn sink() -> (LiveOutput, Arc<Mutex<Vec<OutputChunk>>>) {
        let got = Arc::new(Mutex::new(Vec::new()));
        let into = Arc::clone(&got);
        (LiveOutput::new(move |c| into.lock().unwrap().push(c)), got)
    }

    fn texts(got: &Mutex<Vec<OutputChunk>>) -> Vec<String> {
        got.lock().unwrap().iter().map(|c| c.text.clone()).collect()
    }

    #[test]
    fn nothing_is_sent_for_output_that_ends_within_the_first_interval() {
        let (live, got) = sink();
        let t0 = Instant::now();
        let mut c = Coalescer::new(live, t0);
        c.push(b"hi\n");
        assert_eq!(c.due(), Some(t0 + INTERVAL));
        c.finish();
        assert!(got.lock().unwrap().is_empty());
    }

    #[test]
    fn once_a_chunk_went_the_end_sends_the_rest() {
        let (live, got) = sink();
        let t0 = Instant::now();
        let mut c = Coalescer::new(live, t0);
        c.push(b"one\n");
        c.flush(t0 + INTERVAL);
        assert_eq!(c.due(), None, "nothing pending");
        c.push(b"two\nthr");
        assert_eq!(c.due(), Some(t0 + INTERVAL * 2));
        c.push(b"ee");
        c.finish();
        assert_eq!(texts(&got), ["one\n", "two\nthree"]);
    }

    #[test]
    fn a_flood_keeps_the_newest_bytes_from_a_line_start_and_says_what_was_skipped() {
        let (live, got) = sink();
        let t0 = Instant::now();
        let mut c = Coalescer::new(live, t0);
        let line = b"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\n";
        for _ in 0..1000 {
            c.push(line);
        }
        c.flush(t0 + INTERVAL);
        let chunk = got.lock().unwrap()[0].clone();
        assert!(chunk.text.len() <= MAX_CHUNK_BYTES);
        assert!(chunk.text.starts_with("0123"), "{}", &chunk.text[..10]);
        assert_eq!(
            chunk.skipped_bytes + chunk.text.len() as u64,
            1000 * line.len() as u64
        );
        // One big write alone is cut the same way.
        let (live, got) = sink();
        let mut c = Coalescer::new(live, t0);
        c.push(&line.repeat(1000));
        c.flush(t0 + INTERVAL);
        assert_eq!(got.lock().unwrap()[0], chunk);
    }

    #[test]
    fn a_character_split_between_reads_arrives_whole() {
        let (live, got) = sink();
        let t0 = Instant::now();
        let mut c = Coalescer::new(live, t0);
        let text = "héllo → wörld\n".as_bytes();
        c.push(&text[..2]);
        c.flush(t0 + INTERVAL);
        c.push(&text[2..9]);
        c.flush(t0 + INTERVAL * 2);
        c.push(&text[9..]);
        c.finish();
        assert_eq!(texts(&got).concat(), "héllo → wörld\n");
        assert!(texts(&got).iter().all(|t| !t.contains('\u{FFFD}')));
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        let (live, got) = sink();
        let t0 = Instant::now();
        let mut c = Coalescer::new(live, t0);
        c.push(b"a\xffb\n");
        c.flush(t0 + INTERVAL);
        c.push(b"\xe2\x82");
        c.finish();
        assert_eq!(texts(&got), ["a\u{FFFD}b\n", "\u{FFFD}"]);
    }

    #[test]
    fn previews_keep_the_first_and_last_lines_once() {
        let short = OutputPreview::of("a\nb\n", 2);
        assert_eq!(short.head, ["a", "b"]);
        assert!(short.tail.is_empty());
        let text: String = (1..=20).map(|i| format!("line {i}\n")).collect();
        let long = OutputPreview::of(&text, 20);
        assert_eq!(long.head.len(), 5);
        assert_eq!(long.head[0], "line 1");
        assert_eq!(
            long.tail,
            ["line 16", "line 17", "line 18", "line 19", "line 20"]
        );
        let seven = OutputPreview::of("1\n2\n3\n4\n5\n6\n7", 7);
        assert_eq!(seven.tail, ["6", "7"]);
        let wide = OutputPreview::of(&"é".repeat(400), 1);
        assert!(wide.head[0].len() <= PREVIEW_LINE_BYTES + '…'.len_utf8());
        assert!(wide.head[0].ends_with('…'));
    }

    #[test]
    fn lines_are_counted_across_reads() {
        let mut n = LineCount::default();
        assert_eq!(n.lines(), 0);
        n.push(b"a\nb");
        assert_eq!(n.lines(), 2);
        n.push(b"c\n");
        assert_eq!(n.lines(), 2);
        n.push(b"\n");
        assert_eq!(n.lines(), 3);
    }
}
