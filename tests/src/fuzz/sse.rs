//! The `sse` target: the SSE decoder (`agentd::llm::sse`) and the
//! providers' stream parsers (through `agentd::fuzzing`), in process.
//!
//! Each case is a body: random bytes (biased towards the bytes SSE gives
//! meaning to), random SSE lines (every field, comments, blank lines, all
//! three line ends, a byte-order mark, invalid UTF-8, a cut at the end), or
//! a provider's event stream (Anthropic or OpenAI) with random indices,
//! types, values and damage. Checked:
//! - nothing panics;
//! - the decoder, fed the body whole, yields exactly what an independent
//!   reading of the WHATWG rules (below, written for this test) yields;
//! - fed in random cuts (empty chunks, single bytes, cuts inside `\r\n`
//!   and inside UTF-8 sequences) it yields the same events;
//! - a provider reads the same reply, or fails with the same error, and
//!   passes on the same stream events (deltas of a block merged), whatever
//!   the cuts.

use agentd::fuzzing::{Wire, merged, read_body};
use agentd::sse::{SseDecoder, SseEvent};
use bytes::Bytes;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};

use super::{FuzzOptions, Progress, Report, Target, catch, minimize, show_bytes};

/// Runs the target for the budget.
pub fn run(opts: &FuzzOptions) -> Report {
    let mut report = Report::new(Target::Sse, opts.seed);
    let mut rng = StdRng::seed_from_u64(opts.seed);
    let runtime = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(rt) => rt,
        Err(e) => {
            report.fail(format!("cannot build a runtime: {e}"));
            return report;
        }
    };
    let deadline = std::time::Instant::now() + opts.budget;
    let mut progress = Progress::new(Target::Sse, opts.progress);
    let (mut events_seen, mut provider_cases) = (0u64, 0u64);
    while std::time::Instant::now() < deadline && !report.full() {
        report.cases += 1;
        let (body, wire) = body(&mut rng);
        let cuts = cuts(&mut rng, body.len());
        match check_decoder(&body, &cuts) {
            Ok(n) => events_seen += n as u64,
            Err(e) => {
                let small = minimize(&body, 4000, |b| {
                    check_decoder(b, &clamp(&cuts, b.len())).is_err()
                });
                let cuts = clamp(&cuts, small.len());
                let why = check_decoder(&small, &cuts).err().unwrap_or(e);
                report.fail(format!(
                    "SSE decoder: {why}\n    body {} cut at {cuts:?}",
                    show_bytes(&small)
                ));
                continue;
            }
        }
        let wire = wire.unwrap_or(if rng.random_bool(0.5) {
            Wire::Anthropic
        } else {
            Wire::OpenAi
        });
        provider_cases += 1;
        if let Err(e) = check_provider(&runtime, wire, &body, &cuts) {
            let small = minimize(&body, 2000, |b| {
                check_provider(&runtime, wire, b, &clamp(&cuts, b.len())).is_err()
            });
            let cuts = clamp(&cuts, small.len());
            let why = check_provider(&runtime, wire, &small, &cuts)
                .err()
                .unwrap_or(e);
            report.fail(format!(
                "{wire:?} stream parser: {why}\n    body {} cut at {cuts:?}",
                show_bytes(&small)
            ));
        }
        progress.tick(report.cases, String::new);
    }
    report.notes.push(format!(
        "{events_seen} events decoded; {provider_cases} bodies read by a provider parser"
    ));
    report
}

/// Cut positions (sorted, possibly repeated: an empty chunk) for a body of
/// `len` bytes.
fn cuts(rng: &mut StdRng, len: usize) -> Vec<usize> {
    if len > 0 && rng.random_bool(0.05) {
        return (1..len).collect();
    }
    let n = rng.random_range(0..=12usize.min(len + 2));
    let mut cuts: Vec<usize> = (0..n).map(|_| rng.random_range(0..=len)).collect();
    cuts.sort_unstable();
    cuts
}

fn clamp(cuts: &[usize], len: usize) -> Vec<usize> {
    cuts.iter().map(|&c| c.min(len)).collect()
}

fn chunks<'a>(body: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut out = Vec::with_capacity(cuts.len() + 1);
    let mut prev = 0;
    for &cut in cuts {
        out.push(&body[prev..cut]);
        prev = cut;
    }
    out.push(&body[prev..]);
    out
}

fn decode(pieces: &[&[u8]]) -> Vec<SseEvent> {
    let mut d = SseDecoder::new();
    let mut out = Vec::new();
    for piece in pieces {
        out.extend(d.feed(piece));
    }
    out.extend(d.finish());
    out
}

/// The decoder's events for `body`, whole and cut, against the reference.
fn check_decoder(body: &[u8], cuts: &[usize]) -> Result<usize, String> {
    let want = reference(body);
    let whole = catch(|| decode(&[body]))?;
    if whole != want {
        return Err(format!(
            "fed whole, the decoder yields {whole:?}; the reference reading {want:?}"
        ));
    }
    let cut = catch(|| decode(&chunks(body, cuts)))?;
    if cut != want {
        return Err(format!(
            "fed in cuts, the decoder yields {cut:?}; whole, {want:?}"
        ));
    }
    Ok(want.len())
}

/// An independent reading of an event stream (WHATWG HTML, "event stream
/// interpretation", without `id` and `retry`, as the decoder documents):
/// one leading BOM dropped; lines end at `\r\n`, `\n` or `\r`; an
/// unterminated last line is dropped; `:` starts a comment; a field's
/// value follows its first `:`, minus one leading space; `data` lines are
/// joined by `\n`; a blank line dispatches an event that has data; the end
/// of the stream dispatches one too.
fn reference(body: &[u8]) -> Vec<SseEvent> {
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    let mut lines: Vec<&[u8]> = Vec::new();
    let (mut start, mut i) = (0, 0);
    while i < body.len() {
        match body[i] {
            b'\n' => {
                lines.push(&body[start..i]);
                i += 1;
                start = i;
            }
            b'\r' => {
                lines.push(&body[start..i]);
                i += if body.get(i + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
                start = i;
            }
            _ => i += 1,
        }
    }
    let mut out = Vec::new();
    let (mut event, mut data, mut has_data) = (String::new(), String::new(), false);
    let mut dispatch = |event: &mut String, data: &mut String, has_data: &mut bool| {
        let name = std::mem::take(event);
        let mut text = std::mem::take(data);
        if std::mem::take(has_data) {
            text.pop();
            out.push(SseEvent {
                event: if name.is_empty() {
                    "message".to_string()
                } else {
                    name
                },
                data: text,
            });
        }
    };
    for line in lines {
        if line.is_empty() {
            dispatch(&mut event, &mut data, &mut has_data);
            continue;
        }
        let line = String::from_utf8_lossy(line);
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = match line.find(':') {
            Some(at) => {
                let value = &line[at + 1..];
                (&line[..at], value.strip_prefix(' ').unwrap_or(value))
            }
            None => (&line[..], ""),
        };
        if field == "event" {
            event = value.to_string();
        } else if field == "data" {
            data.push_str(value);
            data.push('\n');
            has_data = true;
        }
    }
    dispatch(&mut event, &mut data, &mut has_data);
    out
}

/// A provider reads the same thing whatever the cuts: compared with one
/// read of the whole body.
fn check_provider(
    runtime: &tokio::runtime::Runtime,
    wire: Wire,
    body: &[u8],
    cuts: &[usize],
) -> Result<(), String> {
    let read = |pieces: Vec<&[u8]>| {
        let chunks: Vec<Bytes> = pieces.into_iter().map(Bytes::copy_from_slice).collect();
        catch(|| runtime.block_on(read_body(wire, chunks)))
    };
    let (events, reply) = read(vec![body])?;
    let (cut_events, cut_reply) = read(chunks(body, cuts))?;
    if cut_reply != reply {
        return Err(format!("whole, it reads {reply:?}; in cuts, {cut_reply:?}"));
    }
    let (events, cut_events) = (merged(events), merged(cut_events));
    if cut_events != events {
        return Err(format!(
            "whole, it passes on {events:?}; in cuts, {cut_events:?}"
        ));
    }
    Ok(())
}

/// One body, and the provider format it was written in (if any).
fn body(rng: &mut StdRng) -> (Vec<u8>, Option<Wire>) {
    let (mut body, wire) = match rng.random_range(0..10) {
        0 | 1 => (random_bytes(rng), None),
        2..=5 => (random_lines(rng), None),
        6..=7 => (anthropic_stream(rng), Some(Wire::Anthropic)),
        _ => (openai_stream(rng), Some(Wire::OpenAi)),
    };
    if rng.random_bool(0.1) {
        body.splice(0..0, b"\xEF\xBB\xBF".iter().copied());
    }
    if !body.is_empty() && rng.random_bool(0.15) {
        let at = rng.random_range(0..body.len());
        body.truncate(at);
    }
    if !body.is_empty() && rng.random_bool(0.1) {
        // A few bytes flipped anywhere.
        for _ in 0..rng.random_range(1..4) {
            let at = rng.random_range(0..body.len());
            body[at] = rng.random();
        }
    }
    (body, wire)
}

const SSE_BYTES: &[u8] = b"\r\n: dataevntim\xEF\xBB\xBF{}\"";

fn random_bytes(rng: &mut StdRng) -> Vec<u8> {
    let n = rng.random_range(0..300);
    (0..n)
        .map(|_| {
            if rng.random_bool(0.6) {
                *SSE_BYTES.choose(rng).unwrap_or(&b'\n')
            } else {
                rng.random()
            }
        })
        .collect()
}

const FIELDS: &[&str] = &[
    "data",
    "data",
    "data",
    "event",
    "id",
    "retry",
    "Data",
    "dat",
    "data ",
    " data",
    "event:x",
    "",
    "datadata",
    "\u{feff}data",
];
const VALUES: &[&str] = &[
    "",
    " ",
    "hello",
    " two  spaces",
    "{\"type\":\"ping\"}",
    "[DONE]",
    "héllo ✓ 🎉",
    ":",
    "a:b:c",
    "message",
    "\u{0}",
    "世界",
];
const ENDINGS: &[&[u8]] = &[
    b"\n",
    b"\r\n",
    b"\r",
    b"\n\n",
    b"\r\r",
    b"\r\n\r\n",
    b"\n\r",
];

fn random_lines(rng: &mut StdRng) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..rng.random_range(0..30) {
        match rng.random_range(0..10) {
            0 => {}
            1 => {
                out.push(b':');
                out.extend(VALUES.choose(rng).unwrap_or(&"").as_bytes());
            }
            _ => {
                out.extend(FIELDS.choose(rng).unwrap_or(&"data").as_bytes());
                match rng.random_range(0..4) {
                    0 => {}
                    1 => out.push(b':'),
                    _ => out.extend(b": "),
                }
                out.extend(VALUES.choose(rng).unwrap_or(&"").as_bytes());
                if rng.random_bool(0.1) {
                    // Invalid UTF-8: a lone continuation byte, a cut
                    // sequence, an overlong form.
                    let bad: &[&[u8]] = &[b"\x80", b"\xE2\x82", b"\xC0\xAF", b"\xFF\xFE"];
                    out.extend(*bad.choose(rng).unwrap_or(&&b"\x80"[..]));
                }
            }
        }
        out.extend(*ENDINGS.choose(rng).unwrap_or(&&b"\n"[..]));
    }
    out
}

/// A JSON value that is sometimes the wrong type, sometimes huge.
fn odd_number(rng: &mut StdRng) -> serde_json::Value {
    use serde_json::json;
    match rng.random_range(0..10) {
        0 => json!(u32::MAX),
        1 => json!(-1),
        2 => json!(u64::MAX),
        3 => json!("0"),
        4 => json!(null),
        5 => json!(1.5),
        _ => json!(rng.random_range(0..4)),
    }
}

fn odd_text(rng: &mut StdRng) -> serde_json::Value {
    use serde_json::json;
    match rng.random_range(0..12) {
        0 => json!(null),
        1 => json!(7),
        2 => json!(""),
        3 => json!("{\"a\":"),
        4 => json!("\"}]"),
        5 => json!("héllo ✓ 🎉\n"),
        6 => json!({"x": 1}),
        _ => json!(
            *["Hel", "lo", " world", "{\"path\":", "\"a.txt\"}", "x"]
                .choose(rng)
                .unwrap_or(&"x")
        ),
    }
}

fn sse_event(out: &mut Vec<u8>, rng: &mut StdRng, name: Option<&str>, data: &serde_json::Value) {
    if let Some(name) = name {
        out.extend(b"event: ");
        out.extend(name.as_bytes());
        out.push(b'\n');
    }
    let mut text = data.to_string();
    if rng.random_bool(0.03) {
        // Data that is not JSON (a cut, a proxy's text).
        let keep = rng.random_range(0..=text.len());
        text = text.get(..keep).unwrap_or("oops").to_string();
    }
    out.extend(b"data: ");
    out.extend(text.as_bytes());
    out.extend(if rng.random_bool(0.8) {
        &b"\n\n"[..]
    } else {
        &b"\r\n\r\n"[..]
    });
}

const ANTHROPIC_EVENTS: &[&str] = &[
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_delta",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "ping",
    "error",
    "unknown_event",
];

fn anthropic_stream(rng: &mut StdRng) -> Vec<u8> {
    use serde_json::json;
    let mut out = Vec::new();
    let usage = |rng: &mut StdRng| {
        json!({"input_tokens": odd_number(rng), "output_tokens": odd_number(rng),
               "cache_read_input_tokens": odd_number(rng)})
    };
    let start = json!({"type": "message_start", "message": {"id": "m", "usage": usage(rng)}});
    sse_event(&mut out, rng, Some("message_start"), &start);
    for _ in 0..rng.random_range(0..24) {
        let kind = *ANTHROPIC_EVENTS.choose(rng).unwrap_or(&"ping");
        let index = odd_number(rng);
        let data = match kind {
            "message_start" => json!({"type": kind, "message": {"usage": usage(rng)}}),
            "content_block_start" => {
                let block = match rng.random_range(0..6) {
                    0 => json!({"type": "text", "text": odd_text(rng)}),
                    1 => {
                        json!({"type": "thinking", "thinking": odd_text(rng), "signature": odd_text(rng)})
                    }
                    2 => json!({"type": "redacted_thinking", "data": odd_text(rng)}),
                    3 => {
                        json!({"type": "tool_use", "id": odd_text(rng), "name": odd_text(rng), "input": {}})
                    }
                    4 => json!({"type": "server_tool_use", "id": "s"}),
                    _ => json!({"type": odd_text(rng)}),
                };
                json!({"type": kind, "index": index, "content_block": block})
            }
            "content_block_delta" => {
                let delta = match rng.random_range(0..6) {
                    0 => json!({"type": "text_delta", "text": odd_text(rng)}),
                    1 => json!({"type": "thinking_delta", "thinking": odd_text(rng)}),
                    2 => json!({"type": "signature_delta", "signature": odd_text(rng)}),
                    3 => json!({"type": "input_json_delta", "partial_json": odd_text(rng)}),
                    4 => json!({"type": "citations_delta"}),
                    _ => json!({"text": odd_text(rng)}),
                };
                json!({"type": kind, "index": index, "delta": delta})
            }
            "content_block_stop" => json!({"type": kind, "index": index}),
            "message_delta" => {
                let reason = *[
                    "end_turn",
                    "tool_use",
                    "max_tokens",
                    "pause_turn",
                    "refusal",
                    "weird",
                ]
                .choose(rng)
                .unwrap_or(&"end_turn");
                json!({"type": kind, "delta": {"stop_reason": reason}, "usage": usage(rng)})
            }
            "error" => {
                json!({"type": "error", "error": {"type": odd_text(rng), "message": odd_text(rng)}})
            }
            _ => json!({"type": kind}),
        };
        // Sometimes without the event name (the type is in the data).
        let name = if rng.random_bool(0.1) {
            None
        } else {
            Some(kind)
        };
        sse_event(&mut out, rng, name, &data);
    }
    if rng.random_bool(0.7) {
        sse_event(
            &mut out,
            rng,
            Some("message_stop"),
            &json!({"type": "message_stop"}),
        );
    }
    out
}

fn openai_stream(rng: &mut StdRng) -> Vec<u8> {
    use serde_json::json;
    let mut out = Vec::new();
    for _ in 0..rng.random_range(0..24) {
        let mut delta = serde_json::Map::new();
        if rng.random_bool(0.5) {
            delta.insert("content".into(), odd_text(rng));
        }
        if rng.random_bool(0.2) {
            delta.insert("reasoning_content".into(), odd_text(rng));
        }
        if rng.random_bool(0.1) {
            delta.insert("reasoning".into(), odd_text(rng));
        }
        if rng.random_bool(0.3) {
            let calls: Vec<serde_json::Value> = (0..rng.random_range(0..3))
                .map(|_| {
                    json!({"index": odd_number(rng), "id": odd_text(rng), "type": "function",
                           "function": {"name": odd_text(rng), "arguments": odd_text(rng)}})
                })
                .collect();
            delta.insert("tool_calls".into(), json!(calls));
        }
        let finish = if rng.random_bool(0.15) {
            json!(
                *["stop", "tool_calls", "length", "content_filter", "other"]
                    .choose(rng)
                    .unwrap_or(&"stop")
            )
        } else {
            json!(null)
        };
        let mut chunk = json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        if rng.random_bool(0.1) {
            chunk = json!({"choices": [], "usage": {"prompt_tokens": odd_number(rng),
                "completion_tokens": odd_number(rng),
                "prompt_tokens_details": {"cached_tokens": odd_number(rng)}}});
        }
        if rng.random_bool(0.03) {
            chunk = json!({"error": {"message": odd_text(rng), "type": odd_text(rng)}});
        }
        sse_event(&mut out, rng, None, &chunk);
    }
    if rng.random_bool(0.7) {
        out.extend(b"data: [DONE]\n\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.to_string(),
            data: data.to_string(),
        }
    }

    #[test]
    fn the_reference_reads_the_rules() {
        assert_eq!(
            reference(b"\xEF\xBB\xBFevent: a\r\ndata: 1\rdata:2\n\n: c\ndata\n\ndata: cut"),
            vec![ev("a", "1\n2"), ev("message", "")]
        );
        assert_eq!(reference(b"data: x\r"), vec![ev("message", "x")]);
        assert_eq!(
            reference(b"event: e\n\ndata: y\n"),
            vec![ev("message", "y")]
        );
    }
}
