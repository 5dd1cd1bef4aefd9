//! Scenario 6, bytes per request: the part of every model request that does
//! not depend on the conversation (system prompt + tool schemas and the
//! envelope), read from the body the fake recorded, and where the prompt-
//! cache breakpoints (`cache_control`) are.

use std::time::Duration;

use agent_proto::v1 as pb;
use serde_json::Value;

use super::stats::Report;
use super::{BenchResult, Context as _, Settings};
use crate::fake_llm::{FakeLlm, Script};

/// Runs the scenario (deterministic: one run).
pub async fn run(_settings: &Settings) -> BenchResult<Report> {
    let mut report = Report::new("request-bytes");
    let fake = FakeLlm::start().await;
    fake.set_default(Some(Script::text("ok")));
    let daemon = super::start_daemon(&fake).await;
    let mut client = super::client(&daemon.socket).await?;
    for (mode, name) in [
        (pb::PermissionMode::Default, "default"),
        (pb::PermissionMode::ReadOnly, "read_only"),
    ] {
        let before = fake.request_count();
        client
            .create_conversation(pb::CreateConversationRequest {
                cwd: daemon.work_dir.display().to_string(),
                prompt: "hi".to_string(),
                mode: mode as i32,
                ..Default::default()
            })
            .await
            .ctx("CreateConversation")?;
        let requests = fake
            .wait_for_requests(before + 1, Duration::from_secs(10))
            .await;
        let request = requests.get(before).ctx("the recorded request")?;
        let body = &request.body;
        let size = |v: &Value| serde_json::to_vec(v).map_or(0, |b| b.len()) as f64;
        let total = request
            .header("content-length")
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| size(body));
        let messages = size(&body["messages"]);
        let system = size(&body["system"]);
        let tools = size(&body["tools"]);
        let fixed = total - messages;
        report.sample(
            &format!("{name}_total_bytes"),
            &format!("{name} mode: whole first request (\"hi\")"),
            "bytes",
            total,
        );
        report.sample(
            &format!("{name}_fixed_bytes"),
            &format!("{name} mode: fixed part (all but `messages`)"),
            "bytes",
            fixed,
        );
        report.sample(
            &format!("{name}_system_bytes"),
            &format!("{name} mode: `system` as sent"),
            "bytes",
            system,
        );
        report.sample(
            &format!("{name}_tools_bytes"),
            &format!("{name} mode: `tools` as sent"),
            "bytes",
            tools,
        );
        report.sample(
            &format!("{name}_tools_count"),
            &format!("{name} mode: tools offered"),
            "tools",
            body["tools"].as_array().map_or(0, Vec::len) as f64,
        );
        if name == "default" {
            if let Some(tools) = body["tools"].as_array() {
                let sizes: Vec<String> = tools
                    .iter()
                    .map(|t| format!("{} {}", t["name"].as_str().unwrap_or("?"), size(t)))
                    .collect();
                report.note(format!("tool schema sizes in bytes: {}", sizes.join(", ")));
            }
            let text = body["system"][0]["text"].as_str().unwrap_or("");
            report.note(format!(
                "system prompt: {} bytes of text (~{} tokens at 4 bytes/token)",
                text.len(),
                text.len() / 4
            ));
            let mut breakpoints = Vec::new();
            find_cache_control(body, String::new(), &mut breakpoints);
            report.note(format!(
                "cache_control breakpoints: {}",
                if breakpoints.is_empty() {
                    "none".to_string()
                } else {
                    breakpoints.join(", ")
                }
            ));
            let headers: Vec<String> = request
                .headers
                .iter()
                .filter(|(n, _)| n.starts_with("anthropic-"))
                .map(|(n, v)| format!("{n}: {v}"))
                .collect();
            report.note(format!("headers: {}", headers.join("; ")));
        }
    }
    report.note("for comparison (the issue): the leading CLIs send 31–86 KB per request");
    Ok(report)
}

/// JSON paths of every `cache_control` key.
fn find_cache_control(v: &Value, path: String, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                if k == "cache_control" {
                    out.push(if path.is_empty() {
                        "/".to_string()
                    } else {
                        path.clone()
                    });
                } else {
                    find_cache_control(child, format!("{path}/{k}"), out);
                }
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                find_cache_control(child, format!("{path}/{i}"), out);
            }
        }
        _ => {}
    }
}
