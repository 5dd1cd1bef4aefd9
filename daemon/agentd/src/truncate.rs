//! Keeping tool output within the model's budget, and client input
//! within an error message.
//!
//! Both ends are kept: the head of a build log says what ran, the tail says
//! how it ended, and the error is usually at the tail. The marker between
//! them states the real size, so the model knows how much it did not see.

use std::collections::VecDeque;

/// Client input longer than this is cut when an error quotes it.
const QUOTE_BYTES: usize = 64;

/// `input` as an error quotes it: whole when short, else its start and its
/// size, e.g. `AAAA… (300000 bytes)`.
pub(crate) fn brief(input: &str) -> String {
    if input.len() <= QUOTE_BYTES {
        return input.to_string();
    }
    let head = &input[..floor_char_boundary(input, QUOTE_BYTES)];
    format!("{head}… ({} bytes)", input.len())
}

/// Cuts `text` to about `max` bytes, keeping its head and tail around a
/// marker. Cuts fall on character boundaries, and on line boundaries when one
/// is close, so no line arrives half-garbled.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let head_budget = max / 2;
    let tail_budget = max - head_budget;
    let mut head_end = floor_char_boundary(text, head_budget);
    if let Some(nl) = text[..head_end].rfind('\n')
        && nl + 1 >= head_end - head_end / 4
    {
        head_end = nl + 1;
    }
    let mut tail_start = ceil_char_boundary(text, text.len() - tail_budget);
    if let Some(nl) = text[tail_start..].find('\n')
        && nl < tail_budget / 4
    {
        tail_start += nl + 1;
    }
    let mut out = String::with_capacity(head_end + (text.len() - tail_start) + 100);
    out.push_str(&text[..head_end]);
    out.push_str(&marker(
        text.len() as u64,
        head_end,
        text.len() - tail_start,
    ));
    out.push_str(&text[tail_start..]);
    out
}

fn marker(total: u64, head: usize, tail: usize) -> String {
    format!("\n… [output truncated: {total} bytes total, showing first {head} and last {tail}]\n")
}

pub(crate) fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_char_boundary(s: &str, mut i: usize) -> usize {
    while i < s.len() && !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// A byte sink that remembers only the first and last `cap` bytes of a
/// stream, so a command printing gigabytes costs at most `2 * cap` bytes of
/// memory while still producing the head-and-tail view.
#[derive(Debug)]
pub(crate) struct HeadTail {
    cap: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
}

impl HeadTail {
    pub(crate) fn new(cap: usize) -> Self {
        HeadTail {
            cap,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
        }
    }

    pub(crate) fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        if self.head.len() < self.cap {
            let take = bytes.len().min(self.cap - self.head.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        if bytes.len() >= self.cap {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.cap..]);
            return;
        }
        let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.cap);
        self.tail.drain(..overflow);
        self.tail.extend(bytes);
    }

    /// Bytes seen so far, including those no longer held.
    #[cfg(test)]
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Bytes currently held in memory.
    pub(crate) fn retained(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    /// The output as text of at most about `max` bytes, with the truncation
    /// marker when anything was cut. Invalid UTF-8 is replaced, not refused:
    /// commands print whatever they like.
    pub(crate) fn render(&self, max: usize) -> String {
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        if self.total == self.retained() as u64 {
            let mut all = self.head.clone();
            all.extend_from_slice(&tail);
            return truncate(&String::from_utf8_lossy(&all), max);
        }
        let head_text = String::from_utf8_lossy(trim_partial_end(&self.head));
        let tail_text = String::from_utf8_lossy(trim_partial_start(&tail));
        let head_end = floor_char_boundary(&head_text, max / 2);
        let tail_budget = max - max / 2;
        let tail_start =
            ceil_char_boundary(&tail_text, tail_text.len().saturating_sub(tail_budget));
        let mut out = String::with_capacity(max + 100);
        out.push_str(&head_text[..head_end]);
        out.push_str(&marker(self.total, head_end, tail_text.len() - tail_start));
        out.push_str(&tail_text[tail_start..]);
        out
    }
}

/// Drops a UTF-8 sequence cut off at the end of `bytes`.
fn trim_partial_end(bytes: &[u8]) -> &[u8] {
    match std::str::from_utf8(bytes) {
        Ok(_) => bytes,
        Err(e) if e.error_len().is_none() => &bytes[..e.valid_up_to()],
        Err(_) => bytes,
    }
}

/// Drops continuation bytes of a character cut off at the start of `bytes`.
fn trim_partial_start(bytes: &[u8]) -> &[u8] {
    let skip = bytes
        .iter()
        .take(3)
        .take_while(|b| (**b & 0xC0) == 0x80)
        .count();
    &bytes[skip..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_unchanged() {
        assert_eq!(truncate("hello", 10), "hello");
    }

    #[test]
    fn long_text_keeps_head_and_tail_with_marker() {
        let text: String = (0..10_000).map(|i| format!("line {i}\n")).collect();
        let out = truncate(&text, 1000);
        assert!(out.starts_with("line 0\n"));
        assert!(out.ends_with("line 9999\n"));
        assert!(out.contains(&format!("[output truncated: {} bytes total", text.len())));
        assert!(out.len() < 1200);
    }

    #[test]
    fn cuts_on_char_boundaries() {
        let text = "é".repeat(1000);
        let out = truncate(&text, 101);
        assert!(out.contains("output truncated"));
        assert!(out.starts_with('é') && out.ends_with('é'));
    }

    #[test]
    fn head_tail_is_bounded_and_renders_marker() {
        let mut ht = HeadTail::new(1000);
        let chunk = vec![b'y'; 65536];
        for _ in 0..100 {
            ht.push(&chunk);
        }
        ht.push(b"THE END");
        assert!(ht.retained() <= 2000);
        assert_eq!(ht.total(), 6_553_607);
        let out = ht.render(500);
        assert!(
            out.contains("[output truncated: 6553607 bytes total"),
            "{out}"
        );
        assert!(out.ends_with("THE END"));
        assert!(out.len() < 650);
    }

    #[test]
    fn head_tail_small_output_is_whole() {
        let mut ht = HeadTail::new(100);
        ht.push(b"abc");
        ht.push(b"def");
        assert_eq!(ht.render(100), "abcdef");
    }

    #[test]
    fn head_tail_handles_split_utf8() {
        let mut ht = HeadTail::new(5);
        ht.push("ééééééééééé".as_bytes());
        let out = ht.render(10);
        assert!(!out.contains('\u{FFFD}'), "{out}");
    }
}
