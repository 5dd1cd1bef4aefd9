//! The tables other commands print: `agent ls` (flat or as a tree of
//! sub-agents), `agent usage` and `agent shells`, and the short token,
//! cost and shell-status texts their cells hold.

use std::io::{self, Write};

use agent_proto::v1::{self as pb, ShellStatus};

use super::{budget_amount, format_age, one_line, shorten_home, state_text};

/// The `agent ls` table. `full_ids` prints whole ids instead of 10 characters.
pub fn conversation_table(
    out: &mut impl Write,
    conversations: &[pb::ConversationSummary],
    now_ms: i64,
    full_ids: bool,
) -> io::Result<()> {
    let flat: Vec<(usize, &pb::ConversationSummary)> =
        conversations.iter().map(|c| (0, c)).collect();
    conversation_rows(out, &flat, now_ms, full_ids)
}

/// `agent ls`: like [`conversation_table`], with each sub-agent under its
/// parent (indented, marked `└`), in the order they were started, when the
/// parent is in the list.
pub fn conversation_tree(
    out: &mut impl Write,
    conversations: &[pb::ConversationSummary],
    now_ms: i64,
    full_ids: bool,
) -> io::Result<()> {
    let listed = |id: &str| conversations.iter().any(|c| c.id == id);
    let mut rows = Vec::with_capacity(conversations.len());
    fn place<'a>(
        rows: &mut Vec<(usize, &'a pb::ConversationSummary)>,
        all: &'a [pb::ConversationSummary],
        c: &'a pb::ConversationSummary,
        depth: usize,
    ) {
        rows.push((depth, c));
        // Ids are ULIDs: ascending is the order they were started.
        let mut children: Vec<&pb::ConversationSummary> = all
            .iter()
            .filter(|k| k.sub_agent_parent_id == c.id)
            .collect();
        children.sort_by(|a, b| a.id.cmp(&b.id));
        for child in children {
            place(rows, all, child, depth + 1);
        }
    }
    for c in conversations {
        if c.sub_agent_parent_id.is_empty() || !listed(&c.sub_agent_parent_id) {
            place(&mut rows, conversations, c, 0);
        }
    }
    conversation_rows(out, &rows, now_ms, full_ids)
}

/// The shortest prefix length, at least `min`, at which `ids` are told
/// apart: ULIDs made in the same millisecond (sub-agents of one call) share
/// their first 10 characters, and a listed prefix must name one
/// conversation.
pub(super) fn unique_prefix_len<'a>(ids: impl Iterator<Item = &'a str>, min: usize) -> usize {
    let mut ids: Vec<&str> = ids.collect();
    ids.sort_unstable();
    ids.dedup();
    let common = |a: &str, b: &str| a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
    ids.windows(2)
        .map(|w| common(w[0], w[1]) + 1)
        .fold(min, usize::max)
}

fn conversation_rows(
    out: &mut impl Write,
    conversations: &[(usize, &pb::ConversationSummary)],
    now_ms: i64,
    full_ids: bool,
) -> io::Result<()> {
    if conversations.is_empty() {
        return writeln!(out, "no conversations");
    }
    let width = if full_ids {
        usize::MAX
    } else {
        unique_prefix_len(conversations.iter().map(|(_, c)| c.id.as_str()), 10)
    };
    let rows: Vec<[String; 7]> = conversations
        .iter()
        .map(|&(depth, c)| {
            let id: String = c.id.chars().take(width).collect();
            let title = if c.agent_id.is_empty() {
                c.title.clone()
            } else {
                format!("[sub-agent] {}", c.title)
            };
            [
                if depth == 0 {
                    id
                } else {
                    format!("{}└ {id}", "  ".repeat(depth - 1))
                },
                ls_state(c),
                format_age(now_ms.saturating_sub(c.created_at_ms)),
                tokens_text(c.usage.as_ref()),
                cost_text(c.cost_usd),
                shorten_home(&c.cwd),
                one_line(&title, 60),
            ]
        })
        .collect();
    table(
        out,
        ["ID", "STATE", "AGE", "TOKENS", "COST", "CWD", "TITLE"],
        &rows,
    )
}

/// The STATE column of `agent ls`: the state, marked when the context is
/// nearly full (`ctx 85%`) and with the chain of continuations.
fn ls_state(c: &pb::ConversationSummary) -> String {
    let mut text = c.state.as_ref().map_or("unknown".to_string(), state_text);
    if c.context_warning {
        let percent = c.context_tokens.saturating_mul(100) / c.context_window.max(1);
        text.push_str(&format!(" !ctx {percent}%"));
    }
    if !c.continued_as.is_empty() {
        let next: String = c.continued_as.chars().take(10).collect();
        text.push_str(&format!(" → {next}"));
    }
    if !c.parent_conversation_id.is_empty() {
        let parent: String = c.parent_conversation_id.chars().take(10).collect();
        text.push_str(&format!(" ← {parent}"));
    }
    text
}

/// Every token of some usage, short: "812", "12.3k", "4.5M".
pub fn tokens_text(u: Option<&pb::Usage>) -> String {
    let n = u.map_or(0, |u| {
        u.input_tokens + u.output_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens
    });
    match n {
        0..1000 => n.to_string(),
        1000..1_000_000 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

/// A cost in USD, or "-" when the model's price is unknown.
pub fn cost_text(usd: Option<f64>) -> String {
    match usd {
        None => "-".to_string(),
        Some(c) if c < 0.005 && c > 0.0 => "<$0.01".to_string(),
        Some(c) => format!("${c:.2}"),
    }
}

/// The `agent usage` table.
pub fn usage_table(out: &mut impl Write, r: &pb::GetUsageResponse) -> io::Result<()> {
    for b in &r.budgets {
        let raised = if b.raised > 0 {
            format!(" (raised by {})", budget_amount(b.usd, b.raised))
        } else {
            String::new()
        };
        writeln!(
            out,
            "budget {}: {} of {} spent{raised}",
            b.budget,
            budget_amount(b.usd, b.spent),
            budget_amount(b.usd, b.limit)
        )?;
    }
    if r.lines.is_empty() {
        return writeln!(out, "no usage recorded");
    }
    let row = |l: &pb::UsageLine| {
        let u = l.usage.unwrap_or_default();
        [
            l.label.clone(),
            l.model.clone(),
            u.input_tokens.to_string(),
            u.cache_creation_input_tokens.to_string(),
            u.cache_read_input_tokens.to_string(),
            u.output_tokens.to_string(),
            cost_text(l.cost_usd),
        ]
    };
    let mut rows: Vec<[String; 7]> = r.lines.iter().map(row).collect();
    if let Some(total) = &r.total {
        rows.push(row(total));
    }
    table(
        out,
        [
            "",
            "MODEL",
            "INPUT",
            "CACHE WRITE",
            "CACHE READ",
            "OUTPUT",
            "COST",
        ],
        &rows,
    )
}

/// The `agent shells` table. Listed for conversation `of` (an id or a
/// prefix of it), a shell of another conversation is one of its
/// sub-agents': its conversation is marked so.
pub fn shell_table(
    out: &mut impl Write,
    shells: &[pb::ShellInfo],
    of: Option<&str>,
    now_ms: i64,
) -> io::Result<()> {
    if shells.is_empty() {
        return writeln!(out, "no background shells");
    }
    let rows: Vec<[String; 5]> = shells
        .iter()
        .map(|s| {
            let mut conversation: String = s.conversation_id.chars().take(10).collect();
            if of.is_some_and(|of| !s.conversation_id.starts_with(of)) {
                conversation.push_str(" (sub-agent)");
            }
            [
                s.id.clone(),
                conversation,
                shell_status_text(s),
                format_age(now_ms.saturating_sub(s.started_at_ms)),
                one_line(&s.command, 70),
            ]
        })
        .collect();
    table(
        out,
        ["ID", "CONVERSATION", "STATE", "AGE", "COMMAND"],
        &rows,
    )
}

fn table<const N: usize>(
    out: &mut impl Write,
    head: [&str; N],
    rows: &[[String; N]],
) -> io::Result<()> {
    let mut widths = head.map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let print = |out: &mut dyn Write, cells: Vec<&str>| -> io::Result<()> {
        let mut line = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == N {
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.push_str(&" ".repeat(w - cell.chars().count() + 2));
            }
        }
        writeln!(out, "{}", line.trim_end())
    };
    print(out, head.to_vec())?;
    for row in rows {
        print(out, row.iter().map(String::as_str).collect())?;
    }
    Ok(())
}

pub(super) fn shell_status_text(s: &pb::ShellInfo) -> String {
    match ShellStatus::try_from(s.status).unwrap_or(ShellStatus::Unspecified) {
        ShellStatus::Unspecified => "unknown".into(),
        ShellStatus::Running => "running".into(),
        ShellStatus::Exited => format!("exited ({})", s.exit_code),
        ShellStatus::Killed => "killed".into(),
        ShellStatus::Lost => "lost".into(),
    }
}
