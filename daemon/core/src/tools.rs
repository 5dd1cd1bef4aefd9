//! The tools the daemon knows, typed once.
//!
//! [`Tool`] is the whole vocabulary. Every fact some part of the daemon
//! decides by — may calls run alongside others, what a permission rule on
//! the tool describes, who answers a call, in which modes the model is
//! offered the tool — is stated in one table, the match in `Tool::facts`:
//! a new variant does not compile until all of them are stated. Every other
//! place that treats tools differently (the policy, the rule parser, the
//! daemon's registry) matches on `Tool` or on these facts without a
//! wildcard arm, so the compiler points to each of them as well.
//!
//! A call's name is the model's text, so callers hold an `Option<Tool>`:
//! `None` is a name the daemon does not have. The tool layer answers such a
//! call with an error, and it needs no permission. Tools whose names are
//! only known at run time, MCP servers' tools, are the other class of names
//! the core knows ([`Called::Mcp`], named `mcp__SERVER__TOOL`): they are
//! judged by the permission policy like any mutating tool (default ask)
//! unless the runtime says they are read-only
//! (`Policy::mcp_read_only`, filled from trusted servers' hints).

/// Declares [`Tool`] and [`Tool::ALL`] from one list, so that no variant can
/// be missing from `ALL` (and so from [`Tool::from_name`]).
macro_rules! tools {
    ($(#[$meta:meta])* pub enum Tool { $($(#[$doc:meta])* $variant:ident,)+ }) => {
        $(#[$meta])*
        pub enum Tool {
            $($(#[$doc])* $variant,)+
        }

        impl Tool {
            /// Every tool, in the order the model is offered them.
            pub const ALL: &'static [Tool] = &[$(Tool::$variant,)+];
        }
    };
}

tools! {
    /// A tool the daemon has. The declaration order is the order in which
    /// the model is offered them.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum Tool {
        /// Runs a command line with `bash -c`, or starts it as a background
        /// shell.
        Bash,
        /// Reads a background shell's new output.
        BashOutput,
        /// Stops a background shell.
        KillShell,
        /// Reads a file.
        Read,
        /// Writes a whole file.
        Write,
        /// Replaces text in a file.
        Edit,
        /// Applies a unified diff.
        Patch,
        /// Finds files by name.
        Glob,
        /// Searches file contents.
        Grep,
        /// Ranks files by keywords.
        KeywordSearch,
        /// Reads a web page (HTTP(S) GET) as Markdown (issue 42 point 3).
        WebFetch,
        /// A scratchpad: acknowledges a thought.
        Think,
        /// Asks the user to leave a restricted mode (REQ-BED-015).
        RequestModeUpgrade,
        /// Proposes a plan for a user to approve (issue 17).
        ProposePlan,
        /// Reports progress on the approved plan (issue 17).
        UpdatePlan,
        /// Runs sub-agents: child conversations, concurrently, whose results
        /// come back as this call's result (REQ-BED-008). Not offered to
        /// sub-agents (no nesting).
        SpawnAgents,
        /// Ends a sub-agent with its result (REQ-BED-008); offered only to
        /// sub-agents.
        SubmitResult,
    }
}

/// What a tool's input names that permission rules judge, and so what the
/// pattern of a rule on the tool describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    /// A bash command line in `command`: its simple commands, and the files
    /// its redirections write. Rule patterns are command lines
    /// (`bash(git status)`, `bash(cargo test:*)`).
    CommandLine,
    /// The file at `path`, written. Rule patterns are globs over files
    /// written, shared by every tool that writes files.
    WrittenFile,
    /// The files the unified diff in `patch` writes. Rule patterns as for
    /// [`Subject::WrittenFile`].
    PatchedFiles,
    /// The file at `path`, read. Rule patterns are globs over files read or
    /// directories searched, shared by every tool that reads.
    ReadFile,
    /// The directory searched, `path` (the working directory when absent).
    /// Rule patterns as for [`Subject::ReadFile`].
    SearchedDir,
    /// A background shell, by `shell_id`. A rule pattern is the id.
    ShellId,
    /// The host of the web address in `url`. Rule patterns are
    /// `domain:HOST` or `domain:*.HOST` (its subdomains); a host no rule
    /// allows asks, though the tool only reads.
    Domain,
    /// Nothing a pattern could describe: a rule pattern never matches.
    Nothing,
}

impl Subject {
    /// Whether calls may write files that path rules on file writes judge
    /// (a command line through its redirections).
    pub fn writes_files(self) -> bool {
        match self {
            Subject::CommandLine | Subject::WrittenFile | Subject::PatchedFiles => true,
            Subject::ReadFile
            | Subject::SearchedDir
            | Subject::ShellId
            | Subject::Domain
            | Subject::Nothing => false,
        }
    }

    /// Whether calls read files or search directories that path rules on
    /// reading judge.
    pub fn reads_files(self) -> bool {
        match self {
            Subject::ReadFile | Subject::SearchedDir => true,
            Subject::CommandLine
            | Subject::WrittenFile
            | Subject::PatchedFiles
            | Subject::ShellId
            | Subject::Domain
            | Subject::Nothing => false,
        }
    }
}

/// Who answers a call of the tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runner {
    /// The daemon's tool layer, in a spawned task.
    Spawned,
    /// The tool layer, inline right after the transition that starts the
    /// call is written: the tool finishes at once and touches nothing
    /// outside the daemon, so running it again after a crash changes
    /// nothing (see ARCHITECTURE.md, "Persist before effects").
    Instant,
    /// The core itself, through the permission flow: the call is never
    /// executed.
    Core,
}

/// In which modes the model is offered the tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offered {
    /// In every mode.
    Always,
    /// Only outside the restricted modes (`read_only`, `plan`), which deny
    /// it anyway.
    Unrestricted,
    /// Only in the restricted modes.
    Restricted,
}

/// What kind of tool it is, for clients to show its calls by (an icon, a
/// layout) without knowing tool names. MCP servers' tools and names the
/// daemon does not have are [`Kind::Other`] ([`kind_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Reads a file.
    Read,
    /// Changes files.
    Edit,
    /// Searches files or their contents.
    Search,
    /// Runs a command, or looks after one running.
    Execute,
    /// Thinks aloud: changes nothing.
    Think,
    /// Asks to switch to another permission mode.
    SwitchMode,
    /// Reads from the network.
    Fetch,
    /// Anything else.
    Other,
}

/// The table row of one tool.
struct Facts {
    name: &'static str,
    read_only: bool,
    subject: Subject,
    runner: Runner,
    offered: Offered,
    kind: Kind,
}

impl Tool {
    /// The one table of what the daemon knows about each tool besides its
    /// spec (which the daemon's tool file writes).
    const fn facts(self) -> Facts {
        use Kind::{Edit, Execute, Fetch, Other, Read, Search, SwitchMode, Think};
        use Offered::{Always, Restricted, Unrestricted};
        use Runner::{Core, Instant, Spawned};
        use Subject::{
            CommandLine, Domain, Nothing, PatchedFiles, ReadFile, SearchedDir, ShellId, WrittenFile,
        };
        // Name, read-only, subject, runner, offered, kind.
        let (name, read_only, subject, runner, offered, kind) = match self {
            Tool::Bash => ("bash", false, CommandLine, Spawned, Unrestricted, Execute),
            Tool::BashOutput => ("bash_output", true, ShellId, Spawned, Always, Execute),
            Tool::KillShell => ("kill_shell", false, ShellId, Spawned, Unrestricted, Execute),
            Tool::Read => ("read", true, ReadFile, Spawned, Always, Read),
            Tool::Write => ("write", false, WrittenFile, Spawned, Unrestricted, Edit),
            Tool::Edit => ("edit", false, WrittenFile, Spawned, Unrestricted, Edit),
            Tool::Patch => ("patch", false, PatchedFiles, Spawned, Unrestricted, Edit),
            Tool::Glob => ("glob", true, SearchedDir, Spawned, Always, Search),
            Tool::Grep => ("grep", true, SearchedDir, Spawned, Always, Search),
            Tool::KeywordSearch => ("keyword_search", true, SearchedDir, Spawned, Always, Search),
            // A network read: it runs alongside other reads and in the
            // restricted modes, but a host no rule allows asks (`Domain`).
            Tool::WebFetch => ("web_fetch", true, Domain, Spawned, Always, Fetch),
            Tool::Think => ("think", true, Nothing, Instant, Always, Think),
            Tool::RequestModeUpgrade => (
                "request_mode_upgrade",
                false,
                Nothing,
                Core,
                Restricted,
                SwitchMode,
            ),
            // Both are answered by the core (the plan is its data): a
            // proposal raises an approval request, an update changes the
            // plan's steps and nothing else.
            Tool::ProposePlan => ("propose_plan", false, Nothing, Core, Always, Other),
            Tool::UpdatePlan => ("update_plan", true, Nothing, Core, Always, Other),
            // The children are narrowed to the parent's mode, so spawning
            // is offered (and allowed) in every mode.
            Tool::SpawnAgents => ("spawn_agents", false, Nothing, Core, Always, Other),
            Tool::SubmitResult => ("submit_result", false, Nothing, Core, Always, Other),
        };
        Facts {
            name,
            read_only,
            subject,
            runner,
            offered,
            kind,
        }
    }

    /// The name the model calls it by, and rules and answers name it by.
    pub const fn name(self) -> &'static str {
        self.facts().name
    }

    /// The tool called `name`, or `None` for a name the daemon does not
    /// have.
    pub fn from_name(name: &str) -> Option<Tool> {
        Tool::ALL.iter().copied().find(|t| t.name() == name)
    }

    /// Whether it never changes anything outside the daemon's own
    /// bookkeeping: consecutive calls of such tools run concurrently, a
    /// call needs no permission unless a rule says so (or, for a web
    /// read, unless a rule allows its host), and the restricted modes
    /// allow it.
    pub const fn is_read_only(self) -> bool {
        self.facts().read_only
    }

    /// What its input names that permission rules judge.
    pub const fn subject(self) -> Subject {
        self.facts().subject
    }

    /// Who answers its calls.
    pub const fn runner(self) -> Runner {
        self.facts().runner
    }

    /// What kind of tool it is, for clients.
    pub const fn kind(self) -> Kind {
        self.facts().kind
    }

    /// Whether the model is offered it in a restricted mode (`restricted`)
    /// or in an unrestricted one.
    pub fn is_offered(self, restricted: bool) -> bool {
        match self.facts().offered {
            Offered::Always => true,
            Offered::Unrestricted => !restricted,
            Offered::Restricted => restricted,
        }
    }
}

impl std::fmt::Display for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether `name` is a read-only tool (see [`Tool::is_read_only`]); a name
/// the daemon does not have is not.
pub fn is_read_only(name: &str) -> bool {
    Tool::from_name(name).is_some_and(Tool::is_read_only)
}

/// The kind of the tool a call names: [`Kind::Other`] for an MCP server's
/// tool and a name the daemon does not have.
pub fn kind_of(name: &str) -> Kind {
    Tool::from_name(name).map_or(Kind::Other, Tool::kind)
}

/// How the names of MCP servers' tools begin: `mcp__SERVER__TOOL`.
pub const MCP_PREFIX: &str = "mcp__";

/// The server and tool of an MCP tool's name (`mcp__github__create_issue`
/// → `("github", "create_issue")`), or `None` for any other name. A server
/// name never contains `__`, so the first `__` after the prefix ends it.
pub fn mcp_parts(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix(MCP_PREFIX)?;
    let (server, tool) = rest.split_once("__")?;
    (!server.is_empty() && !tool.is_empty()).then_some((server, tool))
}

/// The name an MCP server's tool is offered under.
pub fn mcp_name(server: &str, tool: &str) -> String {
    format!("{MCP_PREFIX}{server}__{tool}")
}

/// What a call's name names: one of the daemon's own tools, a tool of an
/// MCP server, or nothing the daemon has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Called<'a> {
    /// A built-in tool.
    Builtin(Tool),
    /// A tool of the MCP server `server`; the runtime runs it.
    Mcp {
        /// The server's name as configured.
        server: &'a str,
        /// The tool's name as the server gives it.
        tool: &'a str,
    },
    /// A name the daemon does not have.
    Unknown,
}

impl<'a> Called<'a> {
    /// The class of `name`.
    pub fn of(name: &'a str) -> Called<'a> {
        if let Some(tool) = Tool::from_name(name) {
            return Called::Builtin(tool);
        }
        match mcp_parts(name) {
            Some((server, tool)) => Called::Mcp { server, tool },
            None => Called::Unknown,
        }
    }
}

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What it does and when to use it.
    pub description: String,
    /// JSON Schema of its input.
    pub input_schema: serde_json::Value,
}

/// The spec of `request_mode_upgrade`, offered only in the restricted modes
/// (REQ-BED-015). The core answers it itself: it is never executed.
pub fn request_mode_upgrade_spec() -> ToolSpec {
    ToolSpec {
        name: Tool::RequestModeUpgrade.name().to_string(),
        description: "Ask the user to leave read-only mode so that write tools (bash, write, edit, patch) become available. Use only when the task needs changes.".to_string(),
        input_schema: serde_json::json!({
            "type": "object",
            "required": ["reason"],
            "properties": {
                "reason": {"type": "string", "description": "Why write access is needed"}
            }
        }),
    }
}

/// Sub-agents one `spawn_agents` call may ask for.
pub const MAX_AGENTS_PER_CALL: usize = 10;

/// The spec of `spawn_agents`, offered to conversations that are not
/// sub-agents.
pub fn spawn_agents_spec() -> ToolSpec {
    spawn_agents_spec_with(&[])
}

/// The spec of `spawn_agents` when sub-agent types are available: each
/// agent may name one (`agent_type`, an enum of `types`, each `(name,
/// description)`); the description lists them. Without types it is
/// [`spawn_agents_spec`].
pub fn spawn_agents_spec_with(types: &[(String, String)]) -> ToolSpec {
    let mut spec = spawn_agents_base_spec();
    if types.is_empty() {
        return spec;
    }
    let listed: Vec<String> = types
        .iter()
        .map(|(name, description)| format!("- {name}: {description}"))
        .collect();
    let about = format!(
        "The kind of sub-agent (default: a general one with this conversation's tools). Available types:\n{}",
        listed.join("\n")
    );
    spec.description.push_str(&format!(
        " An agent may name an `agent_type`, which gives it that type's instructions, tools and model:\n{}",
        listed.join("\n")
    ));
    let names: Vec<&str> = types.iter().map(|(n, _)| n.as_str()).collect();
    if let Some(props) = spec
        .input_schema
        .pointer_mut("/properties/agents/items/properties")
        .and_then(serde_json::Value::as_object_mut)
    {
        props.insert(
            "agent_type".to_string(),
            serde_json::json!({"type": "string", "enum": names, "description": about}),
        );
    }
    spec
}

fn spawn_agents_base_spec() -> ToolSpec {
    ToolSpec {
        name: Tool::SpawnAgents.name().to_string(),
        description: format!(
            "Run sub-agents: each gets its own conversation with the same working directory and tools \
(except this one), works on its prompt on its own, and ends by calling submit_result. They run \
concurrently; this call returns when all have ended, with every result in the order asked. Use it \
for independent tasks (research, review, separate changes). At most {MAX_AGENTS_PER_CALL} agents per call."
        ),
        input_schema: serde_json::json!({
            "type": "object",
            "required": ["agents"],
            "properties": {
                "agents": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_AGENTS_PER_CALL,
                    "items": {
                        "type": "object",
                        "required": ["description", "prompt"],
                        "properties": {
                            "description": {"type": "string", "description": "A short label (3-8 words)"},
                            "prompt": {"type": "string", "description": "The complete task: the sub-agent sees nothing else"}
                        }
                    }
                },
                "model": {"type": "string", "description": "Model for the sub-agents (default: this conversation's)"},
                "read_only": {"type": "boolean", "description": "Run them in read-only mode (default: this conversation's mode)"}
            }
        }),
    }
}

/// The spec of `submit_result`, offered only to sub-agents.
pub fn submit_result_spec() -> ToolSpec {
    ToolSpec {
        name: Tool::SubmitResult.name().to_string(),
        description: "Submit your final result to the conversation that started you, and end. \
Call it once, when the task is done (or cannot be done: success false)."
            .to_string(),
        input_schema: serde_json::json!({
            "type": "object",
            "required": ["result"],
            "properties": {
                "result": {"type": "string", "description": "Final result to return to parent conversation"},
                "success": {"type": "boolean", "description": "Whether the task completed successfully"}
            }
        }),
    }
}

/// One sub-agent a `spawn_agents` call asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentTask {
    pub description: String,
    pub prompt: String,
    /// The sub-agent type it names (`agent_type`); `None`: the general one.
    pub agent_type: Option<String>,
}

/// A `spawn_agents` call's input, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnRequest {
    pub agents: Vec<AgentTask>,
    pub model: Option<String>,
    pub read_only: bool,
}

impl SpawnRequest {
    /// Reads a call's input; the error says what is wrong, for the model.
    pub fn parse(input: &serde_json::Value) -> Result<SpawnRequest, String> {
        let agents = input
            .get("agents")
            .and_then(serde_json::Value::as_array)
            .ok_or("spawn_agents: `agents` must be a list of {description, prompt}")?;
        if agents.is_empty() {
            return Err("spawn_agents: `agents` is empty".to_string());
        }
        if agents.len() > MAX_AGENTS_PER_CALL {
            return Err(format!(
                "spawn_agents: {} agents asked for; at most {MAX_AGENTS_PER_CALL} per call",
                agents.len()
            ));
        }
        let mut tasks = Vec::with_capacity(agents.len());
        for (i, agent) in agents.iter().enumerate() {
            let field = |name: &str| {
                agent
                    .get(name)
                    .and_then(serde_json::Value::as_str)
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .ok_or(format!(
                        "spawn_agents: agents[{i}] needs a non-empty string `{name}`"
                    ))
            };
            let agent_type = match agent.get("agent_type") {
                None | Some(serde_json::Value::Null) => None,
                Some(serde_json::Value::String(t)) if !t.trim().is_empty() => {
                    Some(t.trim().to_string())
                }
                Some(_) => {
                    return Err(format!(
                        "spawn_agents: agents[{i}].agent_type must be a non-empty string"
                    ));
                }
            };
            tasks.push(AgentTask {
                description: field("description")?,
                prompt: field("prompt")?,
                agent_type,
            });
        }
        let model = match input.get("model") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(m)) if !m.trim().is_empty() => {
                Some(m.trim().to_string())
            }
            Some(_) => return Err("spawn_agents: `model` must be a non-empty string".to_string()),
        };
        let read_only = match input.get("read_only") {
            None | Some(serde_json::Value::Null) => false,
            Some(serde_json::Value::Bool(b)) => *b,
            Some(_) => return Err("spawn_agents: `read_only` must be true or false".to_string()),
        };
        Ok(SpawnRequest {
            agents: tasks,
            model,
            read_only,
        })
    }
}

/// The id of the `n`th (1-based) sub-agent of the call `call_id`: the
/// seed's synthesis id form, `agent_{n}_{id}` (agentic-flow-parity-spec §6).
pub fn agent_id(n: usize, call_id: &str) -> String {
    format!("agent_{n}_{call_id}")
}

/// The seed's main synthesis id, `synthesis_{id}`.
pub fn synthesis_id(call_id: &str) -> String {
    format!("synthesis_{call_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back() {
        for &tool in Tool::ALL {
            assert_eq!(Tool::from_name(tool.name()), Some(tool));
            assert_eq!(tool.to_string(), tool.name());
        }
        let mut names: Vec<&str> = Tool::ALL.iter().map(|t| t.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Tool::ALL.len(), "two tools share a name");
        assert_eq!(Tool::from_name("mcp__github__create_issue"), None);
        assert_eq!(Tool::from_name("Bash"), None);
        assert!(!is_read_only("mcp__github__create_issue"));
    }

    #[test]
    fn mcp_names_split_at_the_first_separator() {
        assert_eq!(
            mcp_parts("mcp__github__create_issue"),
            Some(("github", "create_issue"))
        );
        assert_eq!(mcp_parts("mcp__fs__read__all"), Some(("fs", "read__all")));
        assert_eq!(mcp_parts("mcp__github"), None);
        assert_eq!(mcp_parts("mcp____x"), None);
        assert_eq!(mcp_parts("mcp__x__"), None);
        assert_eq!(mcp_parts("read"), None);
        assert_eq!(
            mcp_name("github", "create_issue"),
            "mcp__github__create_issue"
        );
        assert_eq!(Called::of("read"), Called::Builtin(Tool::Read));
        assert_eq!(
            Called::of("mcp__a__b"),
            Called::Mcp {
                server: "a",
                tool: "b"
            }
        );
        assert_eq!(Called::of("nope"), Called::Unknown);
    }

    /// The restricted modes deny every tool that is not read-only, except
    /// the one the core answers; offering such a tool there would only
    /// earn the model a denial.
    #[test]
    fn restricted_modes_offer_only_what_they_allow() {
        for &tool in Tool::ALL {
            if tool.is_offered(true) {
                assert!(
                    tool.is_read_only() || tool.runner() == Runner::Core,
                    "{tool} is offered in restricted modes but denied there"
                );
            }
            if tool.is_read_only() {
                assert!(tool.is_offered(true) && tool.is_offered(false), "{tool}");
            }
        }
    }

    /// An instant tool runs inline, outside the rule that a call is
    /// persisted before it runs: that is only sound for tools that change
    /// nothing.
    #[test]
    fn instant_tools_only_read() {
        for &tool in Tool::ALL {
            if tool.runner() == Runner::Instant {
                assert!(tool.is_read_only(), "{tool}");
            }
        }
    }
}
