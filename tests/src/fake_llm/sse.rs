//! A small server-sent-events reader for tests that look at what the fake
//! LLM (or anything else) streamed.

/// One dispatched SSE event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if any.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

impl SseEvent {
    /// `data` parsed as JSON (`Null` when it is not JSON, e.g. `[DONE]`).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.data).unwrap_or(serde_json::Value::Null)
    }
}

/// Splits an SSE body into events, following the WHATWG rules that matter
/// here: comment lines (`:`) are skipped, one space after the colon is
/// dropped, a blank line dispatches, an unterminated last event is dropped.
pub fn parse_sse(text: &str) -> Vec<SseEvent> {
    let mut events = Vec::new();
    let mut event = None;
    let mut data: Option<String> = None;
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            if let Some(data) = data.take() {
                events.push(SseEvent {
                    event: event.take(),
                    data,
                });
            }
            event = None;
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => event = Some(value.to_string()),
            "data" => match &mut data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => data = Some(value.to_string()),
            },
            _ => {}
        }
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_events_comments_and_multiline_data() {
        let text = ": hello\n\nevent: a\ndata: {\"x\":1}\n\ndata: one\ndata:two\r\n\r\nevent: cut\ndata: partial";
        let events = parse_sse(text);
        assert_eq!(
            events,
            vec![
                SseEvent {
                    event: Some("a".into()),
                    data: "{\"x\":1}".into()
                },
                SseEvent {
                    event: None,
                    data: "one\ntwo".into()
                },
            ]
        );
        assert_eq!(events[0].json()["x"], 1);
    }
}
