//! What the interactive session shows above its input line: while the
//! agent works, a spinner with the state in words, the time it has been in
//! it and the tokens streamed; while it is idle, the status line (model,
//! mode, context used, tokens and cost, shells, other clients, queue).
//!
//! Pure: the time comes in as an argument, so every line is tested.

use agent_proto::v1::{self as pb, StateKind};

use crate::render::{format_duration_ms, one_line};

/// Spinner frames, one per [`FRAME_MS`].
const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
/// How long one spinner frame shows.
pub const FRAME_MS: u64 = 100;

/// Roughly how many characters of text one token is (for the count shown
/// while a reply streams; the real count comes with the reply's usage).
const CHARS_PER_TOKEN: u64 = 4;

/// Everything the status line is made of. Times are milliseconds on the
/// session's own clock (any monotonic origin).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Status {
    pub model: String,
    pub mode: String,
    pub state: StateKind,
    /// When `state` began.
    pub state_since_ms: u64,
    /// The tool call running (its summary, e.g. "bash: cargo test").
    pub tool: Option<String>,
    /// A retry is scheduled: (attempt, max attempts, when it runs).
    pub retry: Option<(u32, u32, u64)>,
    /// Characters of reply and reasoning text streamed since the model
    /// was last asked.
    pub streamed_chars: u64,
    /// The conversation's usage so far.
    pub total: pb::Usage,
    /// Input tokens of the last request (what the context holds).
    pub context_used: u64,
    /// The model's context window; 0 when not known.
    pub context_window: u64,
    pub cost_usd: Option<f64>,
    pub shells_running: usize,
    /// Other clients attached to the conversation.
    pub others: usize,
    /// User messages queued for the next model request.
    pub queued: usize,
    /// Directories the tools reach besides the working directory (for
    /// `/add-dir`; not shown on the line).
    pub additional_dirs: Vec<String>,
    /// When the agent last started working (ms on the link's clock).
    pub busy_since_ms: u64,
    /// The model's todo list in a few words (`render::todo_status`),
    /// shown after what the agent does while it works.
    pub todo: String,
}

impl Status {
    /// Whether a turn is in flight (the spinner shows).
    pub fn busy(&self) -> bool {
        !matches!(
            self.state,
            StateKind::Idle
                | StateKind::Error
                | StateKind::ContextExhausted
                | StateKind::Unspecified
        )
    }

    /// Whether a `bash` command runs now (Ctrl-B moves it to the
    /// background).
    pub fn runs_command(&self) -> bool {
        self.state == StateKind::ToolExecuting
            && self
                .tool
                .as_deref()
                .is_some_and(|t| t == "bash" || t.starts_with("bash:"))
    }

    /// The state in words, for the spinner.
    pub fn doing(&self, now_ms: u64) -> String {
        match self.state {
            StateKind::AwaitingLlm | StateKind::LlmRequesting => match self.retry {
                Some((attempt, max, at)) if at > now_ms => format!(
                    "retrying ({attempt}/{max}) in {}",
                    seconds(at.saturating_sub(now_ms))
                ),
                Some((attempt, max, _)) => format!("retrying ({attempt}/{max})"),
                None if self.streamed_chars > 0 => "writing".to_string(),
                None => "thinking".to_string(),
            },
            StateKind::ToolExecuting => match &self.tool {
                Some(tool) => format!("running {tool}"),
                None => "running tools".to_string(),
            },
            StateKind::AwaitingPermission => "waiting for your answer".to_string(),
            StateKind::Cancelling => "cancelling".to_string(),
            StateKind::AwaitingSubAgents => "waiting for sub-agents".to_string(),
            StateKind::AwaitingContinuation => "summarising the conversation".to_string(),
            StateKind::StopHooks => "running stop hooks".to_string(),
            StateKind::Idle
            | StateKind::Error
            | StateKind::ContextExhausted
            | StateKind::Unspecified => String::new(),
        }
    }

    /// What goes before the input on its line: the spinner while the
    /// agent works (at most `width` columns, so typing has room), else
    /// nothing. The timer and the streamed count always show; what the
    /// agent does is cut to the room left.
    pub fn left(&self, now_ms: u64, width: usize) -> String {
        if !self.busy() {
            return String::new();
        }
        let width = width.max(10);
        let frame = FRAMES[usize::try_from(now_ms / FRAME_MS).unwrap_or(0) % FRAMES.len()];
        let mut tail = format!(" {}", seconds(now_ms.saturating_sub(self.state_since_ms)));
        let streamed = self.streamed_chars.div_ceil(CHARS_PER_TOKEN);
        if streamed > 0 {
            tail.push_str(&format!(" ↓{}", count(streamed)));
        }
        let mut doing = self.doing(now_ms);
        if !self.todo.is_empty() {
            doing = format!("{doing} · {}", self.todo);
        }
        // The frame and its space, and at least one column of what it does.
        let room = width.saturating_sub(2 + tail.chars().count());
        if room == 0 {
            return one_line(&format!("{frame} {doing}{tail}"), width) + " ";
        }
        format!("{frame} {}{tail} ", one_line(&doing, room))
    }

    /// What goes at the right end of the input line (hidden by the editor
    /// when the input reaches it): the status while idle, the keys while
    /// busy. Parts that do not fit are left out, the least important first,
    /// so the line never ends in a field cut in the middle.
    pub fn right(&self, width: usize) -> String {
        let parts = if self.busy() {
            let mut parts = vec![(0, "Ctrl-C cancels".to_string())];
            if self.queued > 0 {
                parts.insert(0, (1, format!("{} queued", self.queued)));
            }
            if self.runs_command() {
                parts.push((2, "Ctrl-B to background".to_string()));
            }
            parts
        } else {
            self.idle_parts()
        };
        fit(parts, width.max(10))
    }

    /// The idle status's parts in the order shown, each with its rank:
    /// the lower, the longer it stays when the line is too wide.
    fn idle_parts(&self) -> Vec<(u8, String)> {
        let mut parts = Vec::new();
        if !self.model.is_empty() {
            parts.push((3, self.model.clone()));
        }
        if !self.mode.is_empty() {
            parts.push((1, self.mode.clone()));
        }
        match self.state {
            StateKind::Error => parts.push((0, "last turn failed".to_string())),
            StateKind::ContextExhausted => parts.push((0, "context exhausted".to_string())),
            _ => {}
        }
        if self.context_window > 0 && self.context_used > 0 {
            let percent = self.context_used.saturating_mul(100) / self.context_window;
            parts.push((2, format!("context {percent}%")));
        }
        let tokens = self.total.input_tokens
            + self.total.cache_creation_input_tokens
            + self.total.cache_read_input_tokens
            + self.total.output_tokens;
        if tokens > 0 {
            parts.push((7, format!("{} tokens", count(tokens))));
        }
        if let Some(cost) = self.cost_usd {
            parts.push((4, format!("${cost:.2}")));
        }
        if self.shells_running > 0 {
            parts.push((6, plural(self.shells_running, "shell", "shells")));
        }
        if self.others > 0 {
            let others = plural(self.others, "other client", "other clients");
            parts.push((8, format!("{others} attached")));
        }
        if self.queued > 0 {
            parts.push((5, format!("{} queued", self.queued)));
        }
        parts.push((9, "/help".to_string()));
        parts
    }
}

/// `parts` joined with ` · ` in `width` columns: the highest-ranked part
/// (the last of equals) left out until the rest fits; one part alone is cut.
fn fit(mut parts: Vec<(u8, String)>, width: usize) -> String {
    loop {
        let line = parts
            .iter()
            .map(|(_, text)| text.as_str())
            .collect::<Vec<_>>()
            .join(" · ");
        if line.chars().count() <= width || parts.len() <= 1 {
            return one_line(&line, width);
        }
        let least = parts
            .iter()
            .enumerate()
            .max_by_key(|(i, (rank, _))| (*rank, *i))
            .map_or(0, |(i, _)| i);
        parts.remove(least);
    }
}

/// "0.4s", "12s", "2m05s".
fn seconds(ms: u64) -> String {
    if ms < 10_000 {
        format!("{}.{}s", ms / 1000, (ms % 1000) / 100)
    } else {
        format_duration_ms(ms)
    }
}

/// "950", "1.2k", "35k", "1.5M".
pub fn count(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..10_000 => format!("{}.{}k", n / 1000, (n % 1000) / 100),
        10_000..1_000_000 => format!("{}k", n / 1000),
        _ => format!("{}.{}M", n / 1_000_000, (n % 1_000_000) / 100_000),
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(state: StateKind) -> Status {
        Status {
            state,
            state_since_ms: 1_000,
            ..Status::default()
        }
    }

    #[test]
    fn the_spinner_says_what_the_agent_does_and_for_how_long() {
        let s = busy(StateKind::LlmRequesting);
        assert_eq!(s.left(4_200, 80), "⠹ thinking 3.2s ");
        assert_eq!(s.right(80), "Ctrl-C cancels");
        let mut s = busy(StateKind::LlmRequesting);
        s.streamed_chars = 481;
        s.queued = 1;
        assert_eq!(s.left(1_000, 80), "⠋ writing 0.0s ↓121 ");
        assert_eq!(s.right(80), "1 queued · Ctrl-C cancels");
        let mut s = busy(StateKind::ToolExecuting);
        s.tool = Some("bash: cargo test".into());
        assert_eq!(s.left(31_000, 80), "⠋ running bash: cargo test 30s ");
        assert_eq!(s.right(80), "Ctrl-C cancels · Ctrl-B to background");
        assert_eq!(s.right(20), "Ctrl-C cancels");
        assert!(
            busy(StateKind::AwaitingPermission)
                .left(1_000, 80)
                .contains("waiting for your answer")
        );
    }

    #[test]
    fn the_spinner_follows_the_todo_list() {
        let mut s = busy(StateKind::LlmRequesting);
        s.todo = "◐ Fix the parser (1/3)".into();
        assert_eq!(
            s.left(4_200, 80),
            "⠹ thinking · ◐ Fix the parser (1/3) 3.2s "
        );
        assert!(s.left(4_200, 30).chars().count() <= 31);
    }

    #[test]
    fn a_retry_counts_down() {
        let mut s = busy(StateKind::AwaitingLlm);
        s.retry = Some((2, 3, 9_000));
        assert!(s.left(5_000, 80).contains("retrying (2/3) in 4.0s"));
        assert!(s.left(9_500, 80).contains("retrying (2/3) 8.5s"));
    }

    #[test]
    fn the_idle_status_shows_model_mode_context_tokens_cost_shells_and_clients() {
        let s = Status {
            model: "claude-sonnet-4-5".into(),
            mode: "default".into(),
            state: StateKind::Idle,
            total: pb::Usage {
                input_tokens: 1_000,
                output_tokens: 234,
                cache_creation_input_tokens: 0,
                cache_read_input_tokens: 10_000,
            },
            context_used: 50_000,
            context_window: 200_000,
            cost_usd: Some(0.0312),
            shells_running: 1,
            others: 2,
            ..Status::default()
        };
        assert_eq!(s.left(0, 80), "");
        assert_eq!(
            s.right(200),
            "claude-sonnet-4-5 · default · context 25% · 11k tokens · $0.03 · 1 shell · \
             2 other clients attached · /help"
        );
    }

    #[test]
    fn nothing_is_wider_than_asked() {
        let mut s = busy(StateKind::ToolExecuting);
        s.tool = Some("bash: ".to_string() + &"x".repeat(300));
        for width in [10, 40, 80, 160] {
            assert!(s.left(0, width).chars().count() <= width + 1, "{width}");
            assert!(s.right(width).chars().count() <= width, "{width}");
        }
    }

    #[test]
    fn a_narrow_status_leaves_out_whole_parts_least_important_first() {
        let s = Status {
            model: "claude-sonnet-4-5".into(),
            mode: "accept_edits".into(),
            state: StateKind::Error,
            total: pb::Usage {
                input_tokens: 1_000,
                ..Default::default()
            },
            context_used: 50_000,
            context_window: 200_000,
            cost_usd: Some(1.5),
            shells_running: 2,
            others: 1,
            queued: 1,
            ..Status::default()
        };
        assert_eq!(
            s.right(80),
            "claude-sonnet-4-5 · accept_edits · last turn failed · context 25% · $1.50"
        );
        assert_eq!(s.right(60), "accept_edits · last turn failed · context 25%");
        assert_eq!(s.right(40), "accept_edits · last turn failed");
        assert_eq!(s.right(10), "last turn…");
        for width in [10, 40, 60, 80, 120] {
            assert!(s.right(width).chars().count() <= width, "{width}");
        }
    }

    #[test]
    fn the_spinner_keeps_its_timer_however_long_the_command() {
        let mut s = busy(StateKind::ToolExecuting);
        s.tool = Some("bash: ".to_string() + &"cargo test --workspace ".repeat(20));
        s.state_since_ms = 0;
        for width in [20, 40, 80] {
            let left = s.left(75_000, width);
            assert!(left.ends_with(" 1m15s "), "{width}: {left:?}");
            assert!(left.chars().count() <= width + 1, "{width}: {left:?}");
        }
        s.streamed_chars = 4_000;
        assert!(s.left(75_000, 40).ends_with(" 1m15s ↓1.0k "));
    }

    #[test]
    fn counts_are_short() {
        assert_eq!(count(999), "999");
        assert_eq!(count(1_234), "1.2k");
        assert_eq!(count(35_000), "35k");
        assert_eq!(count(1_500_000), "1.5M");
    }
}
