//! Exact texts the model and users see. They come from the seeds and are
//! part of the contract: tests compare against these constants.

/// Tool result for a tool that was running when the user cancelled.
pub const CANCELLED_BY_USER: &str = "Cancelled by user";
/// Tool result for a tool that had not started when the user cancelled.
pub const SKIPPED_DUE_TO_CANCELLATION: &str = "Skipped due to cancellation";
/// Appended after a reply the user interrupted.
pub const INTERRUPT_USER: &str = "[Request interrupted by user]";
/// First line of the result of a "deny and stop" answer.
pub const INTERRUPT_TOOL: &str = "[Request interrupted by user for tool use]";
/// The rest of the result of a "deny and stop" answer.
pub const INTERRUPT_EXPLANATION: &str = "The user doesn't want to proceed with this tool use. \
The tool use was rejected (eg. if it was a file edit, the new_string was NOT written to the file). \
STOP what you are doing and wait for the user to tell you how to proceed.";
/// Rejection of a user message while a turn runs.
pub const AGENT_IS_BUSY: &str = "agent is busy";
/// Rejection of a user message while a cancel completes.
pub const CANCELLATION_IN_PROGRESS: &str = "cancellation in progress";
/// Rejection of a user message once the context is exhausted.
pub const CONTEXT_EXHAUSTED: &str = "context exhausted";
/// The iteration guard's error.
pub const ERR_MAX_ITERATIONS: &str = "Maximum conversation iterations reached";
/// Result of a running tool whose daemon crashed.
pub const RESTARTED_WHILE_RUNNING: &str =
    "agentd restarted while this tool was running; its effects are unknown";
/// Result of a running tool whose daemon was stopped cleanly.
pub const STOPPED_WHILE_RUNNING: &str = "agentd was stopped while this tool was running; it was interrupted and its effects are unknown";
/// Result of a tool that had not started when the daemon was stopped.
pub const SKIPPED_DUE_TO_STOP: &str = "Skipped: agentd was stopped before this tool ran";
/// Result of a tool that had not started when the daemon crashed.
pub const SKIPPED_DUE_TO_RESTART: &str = "Skipped: agentd restarted before this tool ran";
/// Result of a tool skipped because an earlier one was denied with "stop".
pub const SKIPPED_AFTER_INTERRUPT: &str = "Skipped: the user stopped this reply at an earlier tool";

/// "Permission to use {tool} has been denied".
pub fn permission_denied(tool: &str) -> String {
    format!("Permission to use {tool} has been denied")
}

/// "Permission to use {tool} has been permanently denied".
pub fn permission_denied_permanently(tool: &str) -> String {
    format!("Permission to use {tool} has been permanently denied")
}

/// The seed's continuation prompt.
pub const CONTINUATION_PROMPT: &str = "The conversation context is nearly full. Please provide a brief continuation summary that could seed a new conversation.

Include:
1. Current task status (if any)
2. Key files or concepts discussed
3. Suggested next steps

Keep your response concise.";

/// Summary used when the continuation request failed.
pub const CONTINUATION_FALLBACK: &str = "Context limit reached. The continuation summary could not be generated. Please start a new conversation.";
/// Summary used when the user cancelled the continuation request.
pub const CONTINUATION_CANCELLED: &str = "Continuation cancelled by user.";

/// The continuation prompt with the rejected tool calls listed.
pub fn continuation_prompt(rejected_tools: &[String]) -> String {
    let mut prompt = CONTINUATION_PROMPT.to_string();
    if !rejected_tools.is_empty() {
        prompt.push_str(
            "\n\nNote: The following tool calls were requested but not executed due to context limits:\n",
        );
        for name in rejected_tools {
            prompt.push_str("- ");
            prompt.push_str(name);
            prompt.push('\n');
        }
    }
    prompt
}

/// The first user message of a conversation continued from `parent_id`:
/// what the model is told, then the parent's summary.
pub fn continued_from(parent_id: &str, summary: &str) -> String {
    format!(
        "This conversation continues conversation {parent_id}, whose context window was full. \
Its continuation summary:\n\n{summary}"
    )
}

/// What a continued conversation asks when nothing was queued in the
/// parent: go on with the work.
pub const CONTINUE_THE_TASK: &str =
    "Continue the task from where the previous conversation left off.";

/// Result of `request_mode_upgrade` outside a restricted mode (REQ-BED-015).
pub const ALREADY_UNRESTRICTED: &str = "Already in Unrestricted mode";
/// Result of an approved `request_mode_upgrade`.
pub const MODE_UPGRADED: &str = "The user approved the upgrade: the conversation is now in default mode, and write tools are available.";

/// The tool result of a call a `pre_tool_use` hook refused: the reason the
/// hook gave follows.
pub fn hook_denied(tool: &str, reason: &str) -> String {
    let reason = reason.trim();
    if reason.is_empty() {
        format!("A pre_tool_use hook blocked this {tool} call")
    } else {
        format!("A pre_tool_use hook blocked this {tool} call: {reason}")
    }
}

/// How the user message a `stop` hook sends to make the model continue
/// begins; the hook's reason follows.
pub const STOP_HOOK_PREFIX: &str = "[stop hook] ";

/// The user message that makes the model continue after a `stop` hook.
pub fn stop_hook_message(reason: &str) -> String {
    format!("{STOP_HOOK_PREFIX}{}", reason.trim())
}

/// What a reached budget says: which budget, its limit and what was spent
/// (the error message of a turn stopped at it).
pub fn budget_reached(stop: &crate::budget::BudgetStop) -> String {
    let whose = if stop.kind.is_daily() {
        "today, by every conversation"
    } else {
        "by this conversation"
    };
    format!(
        "Budget reached: {} is {} and {} was spent {whose}. The turn stopped before its next model request; raise the budget to go on.",
        stop.kind.name(),
        stop.kind.show(stop.limit),
        stop.kind.show(stop.spent),
    )
}

/// The error of a turn whose reached budget was not raised.
pub fn budget_not_raised(stop: &crate::budget::BudgetStop) -> String {
    format!(
        "The turn was stopped at the budget: {} is {} and {} was spent.",
        stop.kind.name(),
        stop.kind.show(stop.limit),
        stop.kind.show(stop.spent),
    )
}

/// Reason of a plan approval request.
pub const PLAN_APPROVAL_REASON: &str = "the model proposes a plan";

/// Result of `propose_plan` when a user approved the plan as proposed.
pub fn plan_approved(mode: crate::permission::Mode) -> String {
    format!(
        "The user approved the plan. Permission mode is now {mode}. Carry it out step by step: before each step call update_plan to mark it in_progress, and after it mark it completed or failed."
    )
}

/// Result of `propose_plan` when a user edited the steps and approved them.
pub fn plan_edited(mode: crate::permission::Mode, steps: &str) -> String {
    format!(
        "The user edited the plan and approved these steps instead of yours (id. [kind] title (after dependencies) {{files}}):\n{steps}\nPermission mode is now {mode}. Carry out exactly these steps: before each step call update_plan to mark it in_progress, and after it mark it completed or failed."
    )
}

/// Result of `propose_plan` when a user rejected the plan.
pub fn plan_rejected(feedback: &str) -> String {
    let feedback = feedback.trim();
    if feedback.is_empty() {
        "The user rejected the plan. Revise it and propose a new one with propose_plan.".to_string()
    } else {
        format!(
            "The user rejected the plan with this feedback:\n{feedback}\nRevise the plan accordingly and propose it again with propose_plan."
        )
    }
}

/// Result of a `propose_plan` call whose input is not a valid plan.
pub fn plan_invalid(why: &str) -> String {
    format!("The plan was not proposed: {why}")
}

/// Result of an `update_plan` call that was refused.
pub fn plan_update_refused(why: &str) -> String {
    format!("The plan was not updated: {why}")
}

/// Result of an `update_plan` call that replaced the todo list.
pub fn todo_updated(checklist: &str) -> String {
    if checklist.is_empty() {
        "Todo list cleared.".to_string()
    } else {
        format!("Todo list updated.\n{checklist}")
    }
}

/// Result of an `update_plan` call whose todo list was refused.
pub fn todo_refused(why: &str) -> String {
    format!("The todo list was not updated: {why}")
}

/// Added once per turn to the tool results of a turn that made many tool
/// calls without a todo list (issue 42 point 4), in the spirit of the
/// seed's bracketed warnings.
pub const TODO_REMINDER: &str = "[REMINDER: This turn has made many tool calls and there is no todo list.]\n[If the task has several steps, call update_plan with the whole list (each item {title, status}, one in_progress at a time) and keep it current as you work.]\n[Ignore this if the task is simple.]";

/// Result of `spawn_agents` called by a sub-agent (no nesting, REQ-BED-008).
pub const NO_NESTING: &str =
    "spawn_agents is not available to sub-agents: a sub-agent cannot start sub-agents";
/// Result of `submit_result` called outside a sub-agent.
pub const SUBMIT_ONLY_IN_SUB_AGENTS: &str =
    "submit_result is only available to sub-agents; answer the user directly";
/// Result of `request_mode_upgrade` called by a sub-agent (REQ-BED-018).
pub const NO_UPGRADE_IN_SUB_AGENTS: &str =
    "request_mode_upgrade is not available to sub-agents: a sub-agent keeps the mode it was given";
/// Result of a sub-agent's call of a tool its type does not list.
pub fn not_in_agent_type(tool: &str, allowed: &[String]) -> String {
    let mut allowed: Vec<&str> = allowed.iter().map(String::as_str).collect();
    allowed.push("submit_result");
    format!(
        "{tool} is not available to this sub-agent: its type allows only {}",
        allowed.join(", ")
    )
}
/// Result of an accepted `submit_result`.
pub const RESULT_SUBMITTED: &str = "Result submitted to the parent conversation.";
/// Result of a call after `submit_result` in the same reply.
pub const SKIPPED_AFTER_SUBMIT: &str = "Skipped: the sub-agent already submitted its result";
/// What a sub-agent that ended its turn without `submit_result` is told
/// (once).
pub const SUBMIT_RESULT_REMINDER: &str = "You ended your turn without calling submit_result. \
Call submit_result now with your final result (success false if the task could not be done); \
the conversation that started you receives only what you submit.";
/// How the result of a sub-agent that never called `submit_result` begins;
/// its last text follows.
pub const LAST_TEXT_RESULT: &str = "[no submit_result: the sub-agent's last text]";
/// The result of a sub-agent that was cancelled.
pub const SUB_AGENT_CANCELLED: &str = "Cancelled by user";

/// The result of a `spawn_agents` call: every sub-agent's result, in the
/// order they were asked for, under the seed's synthesis ids. Each item:
/// (agent id, child conversation id, success, result).
pub fn sub_agent_results(synthesis_id: &str, results: &[(&str, &str, bool, &str)]) -> String {
    let failed = results.iter().filter(|r| !r.2).count();
    let mut out = format!(
        "{synthesis_id}: {} sub-agent(s) ended, {} succeeded, {failed} failed.",
        results.len(),
        results.len() - failed
    );
    for (agent, conversation, success, result) in results {
        let outcome = if *success { "succeeded" } else { "failed" };
        out.push_str(&format!(
            "\n\n## {agent} (conversation {conversation}) {outcome}\n{result}"
        ));
    }
    out
}

/// What a request says in place of an old tool output of `bytes` bytes
/// that was pruned to make room in the context (see `prune`).
pub fn tool_output_pruned(bytes: usize) -> String {
    format!(
        "[This tool output ({}) was pruned from the context to make room; the transcript keeps \
         it. Call the tool again if you need it.]",
        crate::prune::size(bytes)
    )
}

/// The error of a model stream the user aborted (seed 000, Appendix B):
/// what `LlmError::Cancelled` says in logs and errors.
pub const ERR_STREAM_ABORTED: &str = "Stream aborted by user";

/// "Error executing {tool}: {error}" (seed 000, Appendix B): the result of
/// a tool call that failed inside the daemon (the tool panicked), not one
/// whose own error says what was wrong.
pub fn tool_execution_error(tool: &str, error: &str) -> String {
    format!("Error executing {tool}: {error}")
}

/// The seed's re-engagement prompt (autonomous-plan-and-self-correction.md
/// §5), sent with the results of a reply whose tool failed with the
/// `SELF_CORRECT_ATTEMPT:` signal.
pub fn reengagement_prompt(fallback_request: &str) -> String {
    format!(
        "The previous approach failed. Here's a more direct strategy:\n{fallback_request}\n\nPlease generate new tool calls using the suggested approach."
    )
}

/// Why a turn ended after its self-corrections ran out: told to the model
/// (with the results) and to people.
pub fn correction_failed(attempts: u32, tool: &str, error: &str) -> String {
    format!(
        "Self-correction stopped: {tool} failed again after {attempts} correction attempts (the limit). Last error: {}",
        error.trim().lines().next().unwrap_or_default()
    )
}

/// The result of a call refused as a doom loop (`doom_loop = "deny"`):
/// the reason, then the warning of seed 004 (tool-integration-agentic-loop
/// "Doom Loop Detection"), with the call's arguments, shortened.
pub fn doom_loop_warning(
    reason: &str,
    found: &crate::loops::Loop,
    call: &crate::message::ToolCall,
) -> String {
    let what = match found {
        crate::loops::Loop::Identical { times } => format!(
            "The LLM has called '{}' with identical arguments {times} times in a row",
            call.name
        ),
        other => {
            let reason = other.reason(&call.name);
            let sentence = reason.trim_start_matches("doom loop: ");
            let mut chars = sentence.chars();
            chars
                .next()
                .map(|c| c.to_uppercase().chain(chars).collect())
                .unwrap_or_default()
        }
    };
    let mut arguments = call.input.to_string();
    if let Some((cut, _)) = arguments.char_indices().nth(200) {
        arguments.truncate(cut);
        arguments.push('…');
    }
    format!(
        "{reason}\n[WARNING: Doom loop detected!]\n[{what}]\n[Arguments: {arguments}]\n[This may indicate the LLM is stuck.]"
    )
}

/// How the note that a background shell ended begins (in the next model
/// request of its conversation, or as the message of the turn it wakes).
pub const SHELL_ENDED_PREFIX: &str = "[background shell] ";

/// The note that a background shell ended: its id, command, how it ended
/// and the last lines of its output.
pub fn shell_ended(note: &crate::conversation::ShellNote) -> String {
    let mut text = format!(
        "{SHELL_ENDED_PREFIX}Shell {} ended ({}). Command: {}",
        note.shell_id, note.status, note.command
    );
    let tail = note.tail.trim_end();
    if tail.is_empty() {
        text.push_str("\nIt printed nothing.");
    } else {
        text.push_str("\nLast lines of its output:\n");
        text.push_str(tail);
        text.push_str(&format!(
            "\n(bash_output with shell_id {} reads what was not read yet.)",
            note.shell_id
        ));
    }
    text
}

/// The block that attaches a file a user's message mentions (`@path`).
pub fn mention_contents(path: &str, content: &str) -> String {
    format!("Contents of {path}:\n{content}")
}

/// The text before the image a user's message mentions (`@path`).
pub fn mention_image(path: &str) -> String {
    format!("Image {path}:")
}

/// The note that a mentioned file was not attached, and why.
pub fn mention_refused(path: &str, reason: &str) -> String {
    format!("[{path} was not attached: {reason}]")
}
