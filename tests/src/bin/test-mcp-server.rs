//! A real MCP server for the end-to-end tests, built with rmcp's server
//! side:
//!
//! ```text
//! test-mcp-server stdio            # JSON-RPC on stdin/stdout
//! test-mcp-server http FILE        # streamable HTTP on 127.0.0.1:<free>/mcp;
//!                                  # writes the URL to FILE once listening
//! ```
//!
//! Tools: `echo {text}` (text, with the server's pid so tests can tell
//! processes apart), `picture` (a text and a PNG image), `fail` (an error
//! result), `peek` and `slow {ms}` (marked read-only), `crash` (the process exits at once,
//! stdio only), `grow` (adds the tool `extra` and announces
//! `notifications/tools/list_changed`), and `extra` once grown. Every call
//! is appended to `$TEST_MCP_LOG` when set, one line `pid tool`.
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, Content, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerInfo, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};

/// A 1×1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

#[derive(Clone, Default)]
struct Server {
    grown: Arc<AtomicBool>,
    http: bool,
}

fn schema(props: serde_json::Value) -> Arc<serde_json::Map<String, serde_json::Value>> {
    let serde_json::Value::Object(map) = serde_json::json!({"type": "object", "properties": props})
    else {
        return Arc::new(serde_json::Map::new());
    };
    Arc::new(map)
}

impl Server {
    fn tools(&self) -> Vec<Tool> {
        let mut tools = vec![
            Tool::new(
                "echo",
                "Echoes text",
                schema(serde_json::json!({"text": {"type": "string"}})),
            ),
            Tool::new(
                "picture",
                "Returns a picture",
                schema(serde_json::json!({})),
            ),
            Tool::new("fail", "Always fails", schema(serde_json::json!({}))),
            Tool::new(
                "peek",
                "Reads nothing, says so",
                schema(serde_json::json!({})),
            )
            .annotate(ToolAnnotations::new().read_only(true)),
            Tool::new(
                "grow",
                "Adds the tool `extra`",
                schema(serde_json::json!({})),
            ),
            Tool::new(
                "slow",
                "Waits `ms` milliseconds",
                schema(serde_json::json!({"ms": {"type": "integer"}})),
            )
            .annotate(ToolAnnotations::new().read_only(true)),
        ];
        if !self.http {
            tools.push(Tool::new(
                "crash",
                "Exits the server",
                schema(serde_json::json!({})),
            ));
        }
        if self.grown.load(Ordering::SeqCst) {
            tools.push(Tool::new(
                "extra",
                "Appeared later",
                schema(serde_json::json!({})),
            ));
        }
        tools
    }
}

fn log(tool: &str) {
    if let Ok(path) = std::env::var("TEST_MCP_LOG")
        && let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
    {
        let _ = writeln!(f, "{} {tool}", std::process::id());
    }
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerInfo {
        ServerInfo {
            capabilities: ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
            ..ServerInfo::default()
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let name = request.name.to_string();
        log(&name);
        let pid = std::process::id();
        match name.as_str() {
            "echo" => {
                let text = request
                    .arguments
                    .as_ref()
                    .and_then(|a| a.get("text"))
                    .and_then(|t| t.as_str())
                    .unwrap_or("")
                    .to_string();
                Ok(CallToolResult::success(vec![Content::text(format!(
                    "echo: {text} (pid {pid})"
                ))]))
            }
            "picture" => Ok(CallToolResult::success(vec![
                Content::text("a red dot"),
                Content::image(PNG, "image/png"),
            ])),
            "fail" => Ok(CallToolResult::error(vec![Content::text(
                "the disk is on fire",
            )])),
            "peek" => Ok(CallToolResult::success(vec![Content::text("peeked")])),
            "slow" => {
                let ms = request
                    .arguments
                    .as_ref()
                    .and_then(|a| a.get("ms"))
                    .and_then(|m| m.as_u64())
                    .unwrap_or(0);
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                Ok(CallToolResult::success(vec![Content::text("slept")]))
            }
            "grow" => {
                self.grown.store(true, Ordering::SeqCst);
                let _ = context.peer.notify_tool_list_changed().await;
                Ok(CallToolResult::success(vec![Content::text("grown")]))
            }
            "extra" if self.grown.load(Ordering::SeqCst) => {
                Ok(CallToolResult::success(vec![Content::text("extra ran")]))
            }
            "crash" if !self.http => std::process::exit(3),
            other => Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("stdio") => {
            let server = match Server::default().serve(rmcp::transport::stdio()).await {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("test-mcp-server: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let _ = server.waiting().await;
            ExitCode::SUCCESS
        }
        Some("http") => {
            let Some(file) = args.get(1) else {
                eprintln!("usage: test-mcp-server http FILE");
                return ExitCode::FAILURE;
            };
            let service = rmcp::transport::StreamableHttpService::new(
                || {
                    Ok(Server {
                        http: true,
                        ..Server::default()
                    })
                },
                Arc::new(
                    rmcp::transport::streamable_http_server::session::local::LocalSessionManager::default(),
                ),
                rmcp::transport::StreamableHttpServerConfig::default(),
            );
            let router = axum::Router::new().nest_service("/mcp", service);
            let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("test-mcp-server: bind: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let url = match listener.local_addr() {
                Ok(a) => format!("http://{a}/mcp"),
                Err(e) => {
                    eprintln!("test-mcp-server: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let tmp = format!("{file}.tmp");
            if std::fs::write(&tmp, &url)
                .and_then(|_| std::fs::rename(&tmp, file))
                .is_err()
            {
                eprintln!("test-mcp-server: cannot write {file}");
                return ExitCode::FAILURE;
            }
            if let Err(e) = axum::serve(listener, router).await {
                eprintln!("test-mcp-server: {e}");
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("usage: test-mcp-server stdio | test-mcp-server http FILE");
            ExitCode::FAILURE
        }
    }
}
