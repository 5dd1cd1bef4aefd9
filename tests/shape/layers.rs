//! The layers: which workspace crates each production crate may depend on,
//! and which top modules of the daemon may not name which others. Each rule
//! says why, and the failure repeats it.

/// What a production crate may depend on inside the workspace.
pub(crate) struct CrateRule {
    pub name: &'static str,
    pub may_use: &'static [&'static str],
    pub why: &'static str,
}

/// Every production member of the workspace, with the workspace crates it
/// may use. A new member fails the check until it has a line here.
pub(crate) const CRATES: &[CrateRule] = &[
    CrateRule {
        name: "agent-proto",
        may_use: &[],
        why: "the protocol crate holds only the types on the wire; every side depends on it, it depends on none",
    },
    CrateRule {
        name: "agentd-core",
        may_use: &[],
        why: "the pure core does no I/O and knows no wire format; it depends on no workspace crate",
    },
    CrateRule {
        name: "agentd",
        may_use: &["agent-proto", "agentd-core"],
        why: "the daemon is the edge around the core; it uses no client",
    },
    // agent-cli uses agent-proto only today; the core's types reach a
    // client through the wire, so agentd-core is out too.
    CrateRule {
        name: "agent-cli",
        may_use: &["agent-proto"],
        why: "a client talks to the daemon through agent-proto only and never reaches into the daemon or its core",
    },
    CrateRule {
        name: "agent-acp",
        may_use: &["agent-proto", "agent-cli"],
        why: "the ACP bridge is a client: it reaches the daemon through agent-cli and agent-proto, never the daemon or its core",
    },
    CrateRule {
        name: "agent-highlight",
        may_use: &[],
        why: "the highlighter is the client's co-process: code in, coloured lines out over its pipes; it knows neither the client nor the daemon",
    },
];

/// Top modules of one crate that a top module may not name.
pub(crate) struct ModuleRule {
    pub krate: &'static str,
    pub from: &'static str,
    pub not: &'static [&'static str],
    pub why: &'static str,
}

pub(crate) const MODULES: &[ModuleRule] = &[
    ModuleRule {
        krate: "agentd",
        from: "store",
        not: &[
            "hooks",
            "mcp",
            "shells",
            "runtime",
            "grpc",
            "tools",
            "llm",
            "checkpoints",
        ],
        why: "the persisted types sit below the executors: move the type the store needs into store (or agentd-core) and convert at the caller",
    },
    ModuleRule {
        krate: "agentd",
        from: "runtime",
        not: &["grpc"],
        why: "the runtime is driven by the gRPC edge, never the other way: move the shared type below both (runtime or agentd-core)",
    },
    ModuleRule {
        krate: "agentd",
        from: "checkpoints",
        not: &["runtime"],
        why: "file checkpoints are a service the runtime calls: take what is needed as arguments instead of runtime types",
    },
    ModuleRule {
        krate: "agentd",
        from: "config",
        not: &["llm"],
        why: "configuration is read before any provider exists: keep the settings' types in config and let llm read them",
    },
];

/// The rule (and the forbidden module) that `from` naming `to` breaks.
pub(crate) fn forbidden(krate: &str, from: &str, to: &str) -> Option<&'static ModuleRule> {
    MODULES
        .iter()
        .find(|r| r.krate == krate && r.from == from && r.not.contains(&to))
}
