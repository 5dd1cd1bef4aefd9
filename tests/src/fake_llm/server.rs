//! The HTTP side: one handler for every request, and the body stream that
//! paces, holds and breaks replies as their scripts say.

use std::io;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::plan::{Plan, Step};
use super::script::{Fault, Gate, Script, error_body};
use super::{Recorded, RequestBody, Shared, anthropic, lock, openai};

/// Request bodies larger than this are refused (a whole conversation fits).
const MAX_BODY: usize = 256 * 1024 * 1024;

/// Which wire format a request asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Anthropic,
    OpenAi,
}

pub(crate) async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let arrived_at = SystemTime::now();
    let seq = shared.next_seq();
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_string();
    let headers = parts
        .headers
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_string(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    let bytes = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(bytes) => bytes,
        Err(e) => {
            let body = error_body(
                "invalid_request_error",
                &format!("fake LLM: cannot read the request body: {e}"),
            );
            return json_response(seq, 400, &[], &body);
        }
    };
    let mut body = RequestBody::new(bytes.clone());
    let format = match (parts.method.as_str(), path.as_str()) {
        ("POST", "/v1/messages") => Some(Format::Anthropic),
        ("POST", "/v1/chat/completions") => Some(Format::OpenAi),
        _ => None,
    };
    let (stream, model) = body.stream_and_model();
    // Chosen before the request is recorded so a responder sees the body
    // without a copy; a request to an unknown path takes no script.
    let script = format.map(|_| shared.next_script(&mut body));
    // Only a request that gets a reply reads or fills the prompt cache.
    let replied = matches!(script, Some(Some(Script::Reply(_))));
    let cached = match (format, lock(&shared.prompt_cache).as_mut()) {
        (Some(Format::Anthropic), Some(cache)) if replied => Some(cache.request(body.tree())),
        _ => None,
    };
    let images = match format {
        Some(f) if body.may_carry_images() => Some(super::images::received(f, body.tree())),
        Some(_) => Some(Ok(Vec::new())),
        None => None,
    };
    let (images, image_error) = match images {
        Some(Ok(images)) => (images, None),
        Some(Err(e)) => (Vec::new(), Some(e)),
        None => (Vec::new(), None),
    };
    let thinking_error = match format {
        Some(Format::Anthropic) if super::thinking::may_concern(&bytes) => {
            super::thinking::check(body.tree()).err()
        }
        _ => None,
    };
    let (body, unparsed) = body.into_record();
    let record = shared.record(Recorded {
        path: path.clone(),
        headers,
        body,
        unparsed,
        raw_body: bytes,
        arrived_at,
        received_at: SystemTime::now(),
        replied_at: None,
        images,
        image_error: image_error.clone(),
    });
    if let Some(message) = image_error {
        // As the real services answer a bad image.
        return json_response(
            seq,
            400,
            &[],
            &error_body("invalid_request_error", &message),
        );
    }

    if let Some(message) = thinking_error {
        // As the API answers a broken thinking chain.
        return json_response(
            seq,
            400,
            &[],
            &error_body("invalid_request_error", &message),
        );
    }
    let Some(format) = format else {
        let message = format!("fake LLM: no route for {} {path}", parts.method);
        return json_response(seq, 404, &[], &error_body("not_found_error", &message));
    };
    let Some(script) = script.flatten() else {
        return json_response(
            seq,
            500,
            &[],
            &error_body("api_error", "fake LLM: no script left"),
        );
    };
    match script {
        Script::Status {
            code,
            retry_after,
            headers,
            body,
        } => {
            let mut extra = headers;
            if let Some(value) = retry_after {
                extra.push(("retry-after".to_string(), value));
            }
            json_response(seq, code, &extra, &body)
        }
        Script::Hang => {
            // Dropped with the handler when the client gives up.
            let mut guard = Unfinished::new(&shared);
            shared.shutdown.cancelled().await;
            guard.armed = false;
            aborted_response(seq)
        }
        Script::Reply(reply) => {
            let mut plan = Plan::new(reply, model, seq, unix_now().as_secs());
            if let Some(usage) = cached {
                plan.input_tokens = usage.uncached;
                plan.cache_read_tokens = usage.read;
                plan.cache_creation_tokens = usage.written;
            }
            if stream {
                stream_response(seq, record, plan, format, &shared)
            } else {
                let mut guard = Unfinished::new(&shared);
                let response = whole_response(seq, plan, format, &shared.shutdown).await;
                guard.armed = false;
                response
            }
        }
    }
}

fn stream_response(
    seq: u64,
    record: usize,
    plan: Plan,
    format: Format,
    shared: &Arc<Shared>,
) -> Response {
    let emitter = Emitter {
        guard: Unfinished::new(shared),
        record,
        shutdown: shared.shutdown.clone(),
        holds: plan.script.holds.clone(),
        raws: plan.script.raws.clone().into(),
        fault: plan.script.fault.clone(),
        pace: plan.script.pace,
        plan,
        format,
        pos: 0,
        sent: 0,
        done: false,
    };
    let events = futures::stream::unfold(emitter, |mut emitter| async move {
        let item = emitter.next().await?;
        Some((item, emitter))
    });
    let mut response = Response::new(Body::from_stream(events));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    insert_request_id(headers, seq);
    response
}

/// A reply to a request without `"stream": true`: holds are awaited, pace
/// and raw blocks are ignored, `error_after` becomes an error status,
/// `drop_after` and `raw_error_after` an aborted body (raw SSE has no
/// counterpart in a JSON answer).
async fn whole_response(
    seq: u64,
    plan: Plan,
    format: Format,
    shutdown: &CancellationToken,
) -> Response {
    for (_, gate) in &plan.script.holds {
        if !wait_gate(gate, shutdown).await {
            return aborted_response(seq);
        }
    }
    match &plan.script.fault {
        Some((_, Fault::Drop | Fault::Raw(_))) => aborted_response(seq),
        Some((
            _,
            Fault::Error {
                error_type,
                message,
            },
        )) => {
            let body = match format {
                Format::Anthropic => error_body(error_type, message),
                Format::OpenAi => {
                    json!({"error": {"message": message, "type": error_type, "code": null}})
                }
            };
            json_response(seq, status_for_error_type(error_type), &[], &body)
        }
        None => {
            let body = match format {
                Format::Anthropic => anthropic::full_message(&plan),
                Format::OpenAi => openai::full_completion(&plan),
            };
            json_response(seq, 200, &[], &body)
        }
    }
}

/// The status Anthropic pairs with an error type.
fn status_for_error_type(error_type: &str) -> u16 {
    match error_type {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "overloaded_error" => 529,
        _ => 500,
    }
}

fn json_response(
    seq: u64,
    code: u16,
    extra: &[(String, String)],
    body: &serde_json::Value,
) -> Response {
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() =
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    insert_request_id(headers, seq);
    for (name, value) in extra {
        match (
            header::HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            (Ok(name), Ok(value)) => {
                headers.append(name, value);
            }
            _ => panic!("fake LLM: invalid scripted header {name:?}: {value:?}"),
        }
    }
    response
}

/// Headers, then a body that fails at once: the connection is cut.
fn aborted_response(seq: u64) -> Response {
    let failing = futures::stream::once(async { Err::<Bytes, _>(dropped()) });
    let mut response = Response::new(Body::from_stream(failing));
    insert_request_id(response.headers_mut(), seq);
    response
}

fn insert_request_id(headers: &mut axum::http::HeaderMap, seq: u64) {
    if let Ok(value) = HeaderValue::from_str(&format!("req_fake_{seq}")) {
        headers.insert("request-id", value);
    }
}

fn dropped() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "fake LLM: connection dropped by script",
    )
}

fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// Waits for `gate`; false when the server shuts down first.
async fn wait_gate(gate: &Gate, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        () = gate.wait() => true,
        () = shutdown.cancelled() => false,
    }
}

/// Counts a client disconnect when dropped while armed: the reply was cut
/// short by its client, not by its script or a server shutdown.
struct Unfinished {
    shared: Arc<Shared>,
    armed: bool,
}

impl Unfinished {
    fn new(shared: &Arc<Shared>) -> Self {
        Unfinished {
            shared: Arc::clone(shared),
            armed: true,
        }
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if self.armed {
            self.shared.note_disconnect();
        }
    }
}

/// Produces a reply's SSE frames one at a time, each as one write.
struct Emitter {
    /// Disarmed once the last frame is out or the stream ends on purpose.
    guard: Unfinished,
    /// The index of the request this answers (see `Shared::replied`).
    record: usize,
    plan: Plan,
    format: Format,
    /// Next step of the plan.
    pos: usize,
    /// Events written so far (what `hold_after`/`raw_after`/`error_after`/
    /// `drop_after` count).
    sent: usize,
    holds: Vec<(usize, Gate)>,
    /// Raw blocks not written yet, in the order they were added.
    raws: std::collections::VecDeque<(usize, String)>,
    fault: Option<(usize, Fault)>,
    pace: Duration,
    shutdown: CancellationToken,
    done: bool,
}

impl Emitter {
    async fn next(&mut self) -> Option<Result<Bytes, io::Error>> {
        let item = self.step().await;
        if self.done || self.pos >= self.plan.steps.len() {
            self.guard.armed = false;
        }
        item
    }

    async fn step(&mut self) -> Option<Result<Bytes, io::Error>> {
        if self.done {
            return None;
        }
        while self.pos < self.plan.steps.len() && !self.emits(&self.plan.steps[self.pos]) {
            self.pos += 1;
        }
        let at_end = self.pos >= self.plan.steps.len();
        // Counts past the end of the reply apply at its end.
        let due = |n: usize| n == self.sent || (at_end && n > self.sent);

        if self.holds.iter().any(|(n, _)| due(*n)) {
            let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.holds)
                .into_iter()
                .partition(|(n, _)| due(*n));
            self.holds = later;
            for (_, gate) in now {
                if !wait_gate(&gate, &self.shutdown).await {
                    self.done = true;
                    return Some(Err(dropped()));
                }
            }
        }
        // One raw block per call, each its own write; the ones due later
        // keep their place.
        if let Some(i) = self.raws.iter().position(|(n, _)| due(*n))
            && let Some((_, raw)) = self.raws.remove(i)
        {
            return Some(Ok(Bytes::from(raw)));
        }
        if let Some((n, _)) = &self.fault
            && due(*n)
        {
            self.done = true;
            return match self.fault.take() {
                Some((
                    _,
                    Fault::Error {
                        error_type,
                        message,
                    },
                )) => Some(Ok(match self.format {
                    Format::Anthropic => anthropic::encode_error(&error_type, &message),
                    Format::OpenAi => openai::encode_error(&error_type, &message),
                })),
                Some((_, Fault::Raw(raw))) => Some(Ok(Bytes::from(raw))),
                _ => {
                    // Give the server a moment to flush the events already
                    // written, so the client sees exactly `n` of them before
                    // the connection breaks.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    Some(Err(dropped()))
                }
            };
        }
        if at_end {
            self.done = true;
            self.guard.shared.replied(self.record, SystemTime::now());
            return None;
        }
        if !self.pace.is_zero() {
            tokio::select! {
                () = tokio::time::sleep(self.pace) => {}
                () = self.shutdown.cancelled() => {
                    self.done = true;
                    return Some(Err(dropped()));
                }
            }
        }
        let step = &self.plan.steps[self.pos];
        let stamp = self.plan.script.timestamps.then(|| unix_now().as_nanos());
        let frame = match self.format {
            Format::Anthropic => anthropic::encode(&self.plan, step, stamp),
            Format::OpenAi => openai::encode(&self.plan, step, stamp),
        };
        self.pos += 1;
        self.sent += 1;
        Some(Ok(frame))
    }

    fn emits(&self, step: &Step) -> bool {
        match self.format {
            Format::Anthropic => true,
            Format::OpenAi => openai::emits(&self.plan, step),
        }
    }
}
