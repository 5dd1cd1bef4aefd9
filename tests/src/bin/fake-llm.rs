//! Runs the fake LLM on its own, so agentd can be tried without a provider:
//!
//! ```text
//! cargo run -p agent-tests --bin fake-llm -- --port 8765 --reply "Hello from the fake LLM"
//! ANTHROPIC_BASE_URL=http://127.0.0.1:8765 ANTHROPIC_API_KEY=fake agentd
//! ```
//!
//! Every request to `/v1/messages` (or `/v1/chat/completions`) gets the same
//! streamed text reply, or first the replies of a script file (`--script`):
//! a JSON array whose items are `{"text": "…"}`, `{"tool": "NAME", "input":
//! {…}}`, or both (the text, then the call), answered in order. Stops on
//! Ctrl-C.
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use agent_tests::fake_llm::{FakeLlm, ReplyScript, Script, script_file};

const USAGE: &str = "usage: fake-llm [--port PORT] [--reply TEXT] [--script FILE] [--pace-ms MS]

  --port PORT    port on 127.0.0.1 to listen on (default 8765; 0 picks a free one)
  --reply TEXT   the text every request gets (default \"Hello from the fake LLM\")
  --script FILE  replies to give first, in order (a JSON array of {\"text\": …},
                 {\"tool\": NAME, \"input\": {…}} or both); then --reply
  --pace-ms MS   delay before each streamed event (default 0)";

struct Args {
    port: u16,
    reply: String,
    script: Vec<Script>,
    pace: Duration,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        port: 8765,
        reply: "Hello from the fake LLM".to_string(),
        script: Vec::new(),
        pace: Duration::ZERO,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--port" => {
                let v = value("--port")?;
                args.port = v.parse().map_err(|_| format!("invalid port {v:?}"))?;
            }
            "--reply" => args.reply = value("--reply")?,
            "--script" => args.script = script_file(&value("--script")?)?,
            "--pace-ms" => {
                let v = value("--pace-ms")?;
                let ms = v.parse().map_err(|_| format!("invalid --pace-ms {v:?}"))?;
                args.pace = Duration::from_millis(ms);
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            if message.is_empty() {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            eprintln!("fake-llm: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let llm = match FakeLlm::bind(SocketAddr::from(([127, 0, 0, 1], args.port))).await {
        Ok(llm) => llm,
        Err(e) => {
            eprintln!("fake-llm: cannot listen on 127.0.0.1:{}: {e}", args.port);
            return ExitCode::FAILURE;
        }
    };
    let reply = ReplyScript::new().text(&args.reply).pace(args.pace);
    llm.set_default(Some(Script::Reply(reply)));
    let scripted = args.script.len();
    llm.push_all(args.script);
    println!("fake LLM listening on {}", llm.base_url());
    println!(
        "  ANTHROPIC_BASE_URL={} ANTHROPIC_API_KEY=fake agentd",
        llm.base_url()
    );
    println!(
        "  OPENAI_BASE_URL={}/v1 OPENAI_API_KEY=fake (OpenAI-compatible)",
        llm.base_url()
    );
    if scripted > 0 {
        println!("  {scripted} scripted repl(ies) first, then the fixed text");
    }
    if let Err(e) = tokio::signal::ctrl_c().await {
        eprintln!("fake-llm: cannot wait for Ctrl-C: {e}");
        return ExitCode::FAILURE;
    }
    println!("fake LLM: served {} request(s)", llm.request_count());
    ExitCode::SUCCESS
}
