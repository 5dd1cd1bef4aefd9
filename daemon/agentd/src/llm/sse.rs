//! An incremental Server-Sent Events decoder: byte chunks in, events out.
//!
//! The network hands us chunks cut anywhere: inside a line, between `\r` and
//! `\n`, inside a multi-byte UTF-8 sequence. The decoder therefore keeps raw
//! bytes until a whole line is available and only then decodes it, so the
//! events it yields do not depend on how the stream was split.
//!
//! It follows the WHATWG "event stream interpretation" rules, minus the parts
//! that only matter to a reconnecting browser client (`id`, `retry`): lines
//! end with `\r\n`, `\n` or a lone `\r`; `data:` lines accumulate joined by
//! `\n`; a line starting with `:` is a comment; a blank line dispatches.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, or `"message"` when the event had none.
    pub event: String,
    /// The `data:` lines joined by `\n`.
    pub data: String,
}

/// Decodes an event stream incrementally. Feed it chunks with
/// [`SseDecoder::feed`] and call [`SseDecoder::finish`] at end of stream.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes of the line not yet terminated.
    pending: Vec<u8>,
    /// How many bytes of `pending` are known to hold no line end, so that a
    /// long line arriving in many chunks is scanned once, not once a chunk.
    scanned: usize,
    /// Whether the byte-order mark check at the very start is still due.
    bom_checked: bool,
    /// The `event:` field of the event being assembled.
    event: String,
    /// The `data:` lines of the event being assembled, each followed by `\n`.
    data: String,
    /// Whether any `data:` line was seen since the last dispatch. Kept apart
    /// from `data` because `data:` with an empty value still counts.
    has_data: bool,
}

impl SseDecoder {
    /// A decoder at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Consumes one chunk and returns the events it completed, in order.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        self.pending.extend_from_slice(chunk);
        if !self.bom_checked {
            // The stream may begin with a UTF-8 BOM; it is not part of the
            // first field name. Wait until three bytes (or a non-BOM prefix)
            // are known before deciding.
            const BOM: &[u8] = b"\xEF\xBB\xBF";
            let n = self.pending.len().min(BOM.len());
            if self.pending[..n] != BOM[..n] {
                self.bom_checked = true;
            } else if n == BOM.len() {
                self.pending.drain(..BOM.len());
                self.bom_checked = true;
            } else {
                return Vec::new();
            }
        }

        // The buffer is moved out while it is scanned so that lines can be
        // borrowed from it while `process_line` updates the rest of `self`.
        let buf = std::mem::take(&mut self.pending);
        let mut out = Vec::new();
        let mut start = 0;
        let mut i = self.scanned;
        while i < buf.len() {
            match buf[i] {
                b'\n' => {
                    out.extend(self.process_line(&buf[start..i]));
                    i += 1;
                    start = i;
                }
                b'\r' => {
                    // A `\r` at the end of the buffer may be the first half of
                    // `\r\n`: leave it for the next chunk to settle.
                    let Some(&next) = buf.get(i + 1) else {
                        break;
                    };
                    out.extend(self.process_line(&buf[start..i]));
                    i += if next == b'\n' { 2 } else { 1 };
                    start = i;
                }
                _ => i += 1,
            }
        }
        self.pending = buf;
        self.pending.drain(..start);
        self.scanned = i - start;
        out
    }

    /// Ends the stream. An unterminated last line is discarded (the
    /// connection was cut in the middle of it); an event whose lines were
    /// all complete but that lacks its closing blank line is still
    /// dispatched, because some servers close the stream right after the
    /// last `data:` line.
    pub fn finish(&mut self) -> Option<SseEvent> {
        let pending = std::mem::take(&mut self.pending);
        self.scanned = 0;
        // A trailing `\r` was held back only because `\n` might follow; at
        // the end of the stream it terminates its line.
        if let Some(line) = pending.strip_suffix(b"\r")
            && let Some(ev) = self.process_line(line)
        {
            return Some(ev);
        }
        self.dispatch()
    }

    /// Interprets one complete line; a blank line dispatches.
    fn process_line(&mut self, line: &[u8]) -> Option<SseEvent> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line[0] == b':' {
            return None;
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_ref(), ""),
        };
        match field {
            "event" => {
                self.event.clear();
                self.event.push_str(value);
            }
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
                self.has_data = true;
            }
            // `id` and `retry` only matter to a client that reconnects on its
            // own; unknown fields are ignored by the specification.
            _ => {}
        }
        None
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = std::mem::take(&mut self.event);
        if !self.has_data {
            self.data.clear();
            return None;
        }
        self.has_data = false;
        let mut data = std::mem::take(&mut self.data);
        if data.ends_with('\n') {
            data.pop();
        }
        Some(SseEvent {
            event: if event.is_empty() {
                "message".to_string()
            } else {
                event
            },
            data,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.to_string(),
            data: data.to_string(),
        }
    }

    fn decode_all(input: &[u8]) -> Vec<SseEvent> {
        let mut d = SseDecoder::new();
        let mut out = d.feed(input);
        out.extend(d.finish());
        out
    }

    fn decode_split(input: &[u8], cuts: &[usize]) -> Vec<SseEvent> {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        let mut prev = 0;
        for &cut in cuts {
            out.extend(d.feed(&input[prev..cut]));
            prev = cut;
        }
        out.extend(d.feed(&input[prev..]));
        out.extend(d.finish());
        out
    }

    const SAMPLE: &str = "\u{feff}: a comment\r\n\
        event: message_start\r\n\
        data: {\"a\":1}\r\n\
        \r\n\
        data: first line\n\
        data:second line\n\
        data:  two spaces\n\
        \n\
        event: héllo ✓\rdata: ünïcödé 🎉\r\r\
        :keepalive\n\n\
        event: empty\n\
        data:\n\
        \n\
        event: no-data\n\
        \n\
        data: [DONE]\n\n";

    fn sample_events() -> Vec<SseEvent> {
        vec![
            ev("message_start", "{\"a\":1}"),
            ev("message", "first line\nsecond line\n two spaces"),
            ev("héllo ✓", "ünïcödé 🎉"),
            ev("empty", ""),
            ev("message", "[DONE]"),
        ]
    }

    #[test]
    fn decodes_fields_line_endings_comments_and_bom() {
        assert_eq!(decode_all(SAMPLE.as_bytes()), sample_events());
    }

    #[test]
    fn byte_at_a_time_gives_the_same_events() {
        let bytes = SAMPLE.as_bytes();
        let cuts: Vec<usize> = (1..bytes.len()).collect();
        assert_eq!(decode_split(bytes, &cuts), sample_events());
    }

    #[test]
    fn crlf_split_between_cr_and_lf_is_one_line_end() {
        let mut d = SseDecoder::new();
        assert!(d.feed(b"data: x\r").is_empty());
        assert!(d.feed(b"\n\r").is_empty());
        assert_eq!(d.feed(b"\n"), vec![ev("message", "x")]);
    }

    #[test]
    fn a_field_without_colon_has_an_empty_value() {
        assert_eq!(
            decode_all(b"data\n\ndata\ndata\n\n"),
            vec![ev("message", ""), ev("message", "\n")]
        );
    }

    #[test]
    fn finish_dispatches_complete_lines_and_drops_a_cut_line() {
        assert_eq!(
            decode_all(b"event: e\ndata: whole\n"),
            vec![ev("e", "whole")]
        );
        assert_eq!(
            decode_all(b"data: whole\n\ndata: {\"cut"),
            vec![ev("message", "whole")]
        );
        assert_eq!(decode_all(b"data: x\r"), vec![ev("message", "x")]);
    }

    #[test]
    fn invalid_utf8_is_replaced_not_fatal() {
        assert_eq!(
            decode_all(b"data: a\xFFb\n\n"),
            vec![ev("message", "a\u{fffd}b")]
        );
    }

    proptest! {
        #[test]
        fn any_split_gives_identical_events(
            lines in proptest::collection::vec(
                prop_oneof![
                    Just("data: {\"text\":\"h\u{e9}llo \u{1f600}\"}".to_string()),
                    Just("event: content_block_delta".to_string()),
                    Just(": ping".to_string()),
                    Just(String::new()),
                    Just("data:".to_string()),
                    "[a-z:\u{e9}\u{4e16} ]{0,12}",
                ],
                0..24,
            ),
            endings in proptest::collection::vec(prop_oneof![Just("\n"), Just("\r\n"), Just("\r")], 24),
            mut cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..12),
        ) {
            let mut input = String::new();
            for (line, end) in lines.iter().zip(endings.iter()) {
                input.push_str(line);
                input.push_str(end);
            }
            let bytes = input.as_bytes();
            let mut positions: Vec<usize> = cuts.drain(..).map(|c| c.index(bytes.len() + 1)).collect();
            positions.sort_unstable();
            prop_assert_eq!(decode_split(bytes, &positions), decode_all(bytes));
        }
    }
}
