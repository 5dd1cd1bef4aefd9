//! What a request may grant a conversation, decided once for every entry
//! point (CreateConversation, the Attach `create` frame, UpdateConversation,
//! ImportConversations; ACP speaks through the same RPCs).
//!
//! The role table in `access/roles.rs` says which RPCs a caller may make; this
//! says what the request may *carry*. Some fields of a request are grants:
//! they let the conversation do things no approver is asked about. An MCP
//! server is a program the daemon starts; an allow rule runs tools
//! unasked; bypass mode asks nothing; a directory opens files to the tools.
//! The local user (the Unix socket, whose uid the listener checked) may
//! grant all of that, as they could by running the programs themselves. A
//! remote caller is bound by the permission mode and the approvers, so it
//! may grant none of it, and may work only in the directories the local
//! user opened to remote callers (`[remote] roots`). An import file is
//! data, not a decision: whoever imports it, it grants nothing (its bypass
//! or accept_edits mode becomes `default`, its allow rules are dropped,
//! each said in the reply) and its directories are checked as a create's
//! are.
//!
//! Whether the daemon allows bypass mode at all (`--allow-bypass`) is the
//! runtime's rule, checked where a mode is set and again when a
//! conversation is loaded; it holds whoever asks.

use super::access::Caller;
use super::convert::brief;
use agentd_core::Mode;
use std::path::{Path, PathBuf};
use tonic::Status;

/// Where a request comes from, as far as grants go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
    /// The Unix socket: the user.
    Local,
    /// The TCP listener: a token's holder.
    Remote,
    /// A record in an import file, whoever sent it.
    Import { remote: bool },
}

impl Source {
    /// A live request's source.
    pub(super) fn of(caller: &Caller) -> Source {
        if caller.remote.is_some() {
            Source::Remote
        } else {
            Source::Local
        }
    }

    /// An import by `caller`.
    pub(super) fn import(caller: &Caller) -> Source {
        Source::Import {
            remote: caller.remote.is_some(),
        }
    }

    fn remote(self) -> bool {
        matches!(self, Source::Remote | Source::Import { remote: true })
    }
}

/// The grants a request carries (directories canonical already).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Grants<'a> {
    pub mode: Option<Mode>,
    pub allow_rules: &'a [String],
    /// The names of the MCP servers it would start.
    pub mcp_servers: &'a [String],
    /// The working directory and the directories it adds, each with what
    /// it is called in a refusal.
    pub dirs: &'a [(&'a Path, &'static str)],
    /// Whether it sends an environment for the conversation's commands.
    pub environment: bool,
}

/// One grant a source may not give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Refusal {
    /// A mode that asks less than `default`.
    Mode(Mode),
    /// Allow rules (how many).
    AllowRules(usize),
    /// MCP servers, by name.
    McpServers(Vec<String>),
    /// A directory outside every root remote callers may use.
    Dir { what: &'static str, path: PathBuf },
    /// An environment for the conversation's commands.
    Environment,
}

impl Refusal {
    /// Says what was refused and why.
    pub(super) fn describe(&self, source: Source) -> String {
        let who = match source {
            Source::Local => "this client",
            Source::Remote => "a remote client",
            Source::Import { .. } => "an import",
        };
        match self {
            Refusal::Mode(mode) => format!(
                "{who} may not set {} mode (it runs tools without asking an approver)",
                mode.as_str()
            ),
            Refusal::AllowRules(n) => format!(
                "{who} may not give allow rules ({n} given): they run tools without asking an approver"
            ),
            Refusal::McpServers(names) => format!(
                "{who} may not give MCP servers ({}): each is a program the daemon would start; \
                 configure them in the daemon's config file instead",
                names.join(", ")
            ),
            Refusal::Dir { what, path } => format!(
                "{what} {:?} is outside the directories open to remote clients \
                 (`[remote] roots` in the daemon's config; the daemon user's home when unset)",
                brief(&path.display().to_string())
            ),
            Refusal::Environment => format!(
                "{who} may not send an environment: it would decide what the commands run \
                 (PATH, LD_PRELOAD, BASH_ENV); only the local user's clients send one"
            ),
        }
    }
}

/// Every grant of `grants` that `source` may not give, in field order;
/// `roots` are the canonical directories remote callers may work in.
pub(super) fn refusals(source: Source, roots: &[PathBuf], grants: &Grants) -> Vec<Refusal> {
    if source == Source::Local {
        return Vec::new();
    }
    let mut out = Vec::new();
    if let Some(mode) = grants.mode.filter(|m| asks_less_than_default(*m)) {
        // A remote driver may choose accept_edits as the local user could;
        // only an import is held to `default`, and bypass is never remote.
        if mode == Mode::Bypass || matches!(source, Source::Import { .. }) {
            out.push(Refusal::Mode(mode));
        }
    }
    if !grants.allow_rules.is_empty() {
        out.push(Refusal::AllowRules(grants.allow_rules.len()));
    }
    if !grants.mcp_servers.is_empty() {
        out.push(Refusal::McpServers(grants.mcp_servers.to_vec()));
    }
    if grants.environment {
        out.push(Refusal::Environment);
    }
    if source.remote() {
        for (path, what) in grants.dirs {
            if !roots.iter().any(|root| path.starts_with(root)) {
                out.push(Refusal::Dir {
                    what,
                    path: path.to_path_buf(),
                });
            }
        }
    }
    out
}

/// Refuses a live request (create, Attach create, update) that carries a
/// grant its source may not give: PERMISSION_DENIED naming each.
pub(super) fn admit(source: Source, roots: &[PathBuf], grants: &Grants) -> Result<(), Status> {
    let refused = refusals(source, roots, grants);
    if refused.is_empty() {
        return Ok(());
    }
    let reasons: Vec<String> = refused.iter().map(|r| r.describe(source)).collect();
    Err(Status::permission_denied(reasons.join("; ")))
}

/// Modes in which some tool runs that `default` would ask about.
fn asks_less_than_default(mode: Mode) -> bool {
    match mode {
        Mode::AcceptEdits | Mode::Bypass | Mode::Auto => true,
        Mode::ReadOnly | Mode::Default | Mode::Plan => false,
    }
}

/// The directories remote callers may work in: `configured`, else the
/// daemon user's home (`home`), each canonical; one that does not exist
/// opens nothing.
pub(super) fn remote_roots(configured: &[PathBuf], home: Option<&Path>) -> Vec<PathBuf> {
    let wanted: Vec<&Path> = if configured.is_empty() {
        home.into_iter().collect()
    } else {
        configured.iter().map(PathBuf::as_path).collect()
    };
    wanted
        .into_iter()
        .filter(|p| p.is_absolute())
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MODES: [Mode; 6] = [
        Mode::ReadOnly,
        Mode::Default,
        Mode::AcceptEdits,
        Mode::Plan,
        Mode::Bypass,
        Mode::Auto,
    ];

    fn sources() -> impl Strategy<Value = Source> {
        prop_oneof![
            Just(Source::Local),
            Just(Source::Remote),
            any::<bool>().prop_map(|remote| Source::Import { remote }),
        ]
    }

    fn dirs() -> impl Strategy<Value = Vec<PathBuf>> {
        prop::collection::vec(
            prop_oneof![
                Just(PathBuf::from("/")),
                Just(PathBuf::from("/home/al")),
                Just(PathBuf::from("/home/al/src/x")),
                Just(PathBuf::from("/home/alx")),
                Just(PathBuf::from("/etc")),
            ],
            0..4,
        )
    }

    proptest! {
        /// Every field of every request from every kind of source: the
        /// local user is refused nothing; anyone else is refused exactly
        /// the grants that would run something unasked, and a remote
        /// source every directory outside the roots.
        #[test]
        fn each_grant_is_refused_exactly_when_its_source_may_not_give_it(
            source in sources(),
            mode in prop::option::of(prop::sample::select(&MODES[..])),
            rules in prop::collection::vec("[a-z]{1,8}", 0..3),
            servers in prop::collection::vec("[a-z]{1,8}", 0..3),
            dir_paths in dirs(),
            environment in any::<bool>(),
        ) {
            let roots = [PathBuf::from("/home/al")];
            let dirs: Vec<(&Path, &'static str)> =
                dir_paths.iter().map(|p| (p.as_path(), "cwd")).collect();
            let grants = Grants {
                mode,
                allow_rules: &rules,
                mcp_servers: &servers,
                dirs: &dirs,
                environment,
            };
            let refused = refusals(source, &roots, &grants);
            let admitted = admit(source, &roots, &grants);
            prop_assert_eq!(admitted.is_ok(), refused.is_empty());
            if source == Source::Local {
                prop_assert!(refused.is_empty());
                return Ok(());
            }
            let mode_refused = refused.iter().any(|r| matches!(r, Refusal::Mode(_)));
            let expect_mode = matches!(
                (source, mode),
                (_, Some(Mode::Bypass))
                    | (Source::Import { .. }, Some(Mode::AcceptEdits | Mode::Auto))
            );
            prop_assert_eq!(mode_refused, expect_mode);
            prop_assert_eq!(
                refused.contains(&Refusal::AllowRules(rules.len())),
                !rules.is_empty()
            );
            prop_assert_eq!(
                refused.contains(&Refusal::McpServers(servers.clone())),
                !servers.is_empty()
            );
            prop_assert_eq!(refused.contains(&Refusal::Environment), environment);
            let outside = dir_paths
                .iter()
                .filter(|p| !p.starts_with("/home/al"))
                .count();
            let dirs_refused = refused
                .iter()
                .filter(|r| matches!(r, Refusal::Dir { .. }))
                .count();
            let remote = matches!(source, Source::Remote | Source::Import { remote: true });
            prop_assert_eq!(dirs_refused, if remote { outside } else { 0 });
            if let Err(status) = admitted {
                prop_assert_eq!(status.code(), tonic::Code::PermissionDenied);
            }
        }
    }

    #[test]
    fn a_refusal_names_what_and_why() {
        let roots = [PathBuf::from("/home/al")];
        let servers = ["x".to_string()];
        let dirs = [(Path::new("/"), "additional directory")];
        let status = admit(
            Source::Remote,
            &roots,
            &Grants {
                mcp_servers: &servers,
                dirs: &dirs,
                ..Grants::default()
            },
        )
        .unwrap_err();
        let message = status.message();
        assert!(
            message.contains("a remote client may not give MCP servers (x)"),
            "{message}"
        );
        assert!(
            message.contains(
                "additional directory \"/\" is outside the directories open to remote clients"
            ),
            "{message}"
        );
    }

    #[test]
    fn roots_default_to_home_and_are_canonical() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir(&home).unwrap();
        let dotted = dir.path().join("home/../home");
        let canonical = std::fs::canonicalize(&home).unwrap();
        assert_eq!(remote_roots(&[], Some(&dotted)), vec![canonical.clone()]);
        assert_eq!(
            remote_roots(
                &[dotted.clone(), dir.path().join("gone")],
                Some(Path::new("/"))
            ),
            vec![canonical]
        );
        assert!(remote_roots(&[], None).is_empty());
        assert!(remote_roots(&[PathBuf::from("relative")], None).is_empty());
    }
}
