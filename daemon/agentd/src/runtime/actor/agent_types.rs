//! The actor's side of sub-agent types (see `crate::agent_types`): the
//! spawn tool a parent is offered lists the types its directory has, read
//! at the start of each turn (a few `stat`s when nothing changed), so the
//! tools stay the same through a turn's requests and the prompt cache
//! holds; a typed child is offered only its type's tools (and
//! `submit_result`), reads its type's prompt after the system prompt, and
//! its core refuses any other tool (`ConvContext::agent_tools`).

use super::Actor;
use agentd_core::ToolSpec;
use agentd_core::tools::Tool;
use std::sync::Arc;

/// The tools this conversation's turns offer, as last made: made again
/// only when the spawn tool's spec changes.
#[derive(Debug, Default)]
pub(super) struct TypeOffer {
    /// Whether the types were read (a conversation loaded mid-turn, after
    /// a restart, reads them at its first request).
    read: bool,
    /// The spawn tool's spec as the types last read give it (`None`: the
    /// plain one).
    spec: Option<ToolSpec>,
    /// What the last reading could not load as a whole (an untrusted
    /// project), told to clients when it changes.
    notes: Vec<String>,
    /// The tools offered, unrestricted and restricted.
    made: [Option<Arc<[ToolSpec]>>; 2],
}

impl TypeOffer {
    /// Keeps `spec` as the spawn tool's; what was made from the one
    /// before is made again.
    fn set_spec(&mut self, spec: Option<ToolSpec>) {
        self.read = true;
        if self.spec != spec {
            self.spec = spec;
            self.made = Default::default();
        }
    }

    /// The tools offered in the restricted modes or the others: made once
    /// by `make` from the spawn tool's spec.
    fn offered(
        &mut self,
        restricted: bool,
        make: impl FnOnce(Option<&ToolSpec>) -> Arc<[ToolSpec]>,
    ) -> Arc<[ToolSpec]> {
        let slot = &mut self.made[usize::from(restricted)];
        if let Some(made) = slot {
            return made.clone();
        }
        let made = make(self.spec.as_ref());
        *slot = Some(made.clone());
        made
    }
}

/// `base` with the spawn tool's spec replaced by `spec`.
fn with_spawn_spec(base: &[ToolSpec], spec: &ToolSpec) -> Arc<[ToolSpec]> {
    base.iter()
        .map(|t| {
            if t.name == Tool::SpawnAgents.name() {
                spec.clone()
            } else {
                t.clone()
            }
        })
        .collect()
}

/// The tools of `base` a child limited to `allowed` may call.
pub(super) fn only(base: &[ToolSpec], allowed: &[String]) -> Vec<ToolSpec> {
    base.iter()
        .filter(|t| agentd_core::agent_types::allows(allowed, &t.name))
        .cloned()
        .collect()
}

impl Actor {
    /// The tools this typed sub-agent may call, when its type lists them.
    pub(super) fn agent_tools(&self) -> Option<Vec<String>> {
        self.record
            .sub_agent
            .as_ref()?
            .agent_type
            .as_ref()?
            .tools
            .clone()
    }

    /// What this typed sub-agent's system prompt adds: its type's prompt.
    pub(super) fn agent_type_prompt(&self) -> Option<&str> {
        let kind = self.record.sub_agent.as_ref()?.agent_type.as_ref()?;
        Some(kind.prompt.as_str())
    }

    /// Reads the sub-agent types of this conversation's directory again
    /// (at a turn's start): the spawn tool lists them from now on, and
    /// clients are told once why a project's are not loaded.
    pub(super) fn refresh_agent_types(&mut self) {
        if self.record.sub_agent.is_some() {
            return;
        }
        let listing = crate::runtime::agent_types::listing(&self.shared, &self.record.cwd);
        self.parts.types.set_spec(listing.spawn_spec());
        if self.parts.types.notes != listing.notes {
            for note in &listing.notes {
                tracing::info!(conversation = %self.record.id, "{note}");
                self.emit(crate::runtime::events::EventKind::info(note.clone()));
            }
            self.parts.types.notes = listing.notes;
        }
    }

    /// The built-in tools a turn's request offers (MCP servers' join them
    /// later, through [`Actor::agent_tools`] for a typed child).
    pub(super) fn offered_tools(&mut self, restricted: bool) -> Arc<[ToolSpec]> {
        if self.record.sub_agent.is_some() {
            let allowed = self.agent_tools();
            let tools = &self.shared.tools;
            return self.parts.types.offered(restricted, |_| {
                let base = tools.offered_to_sub_agent(restricted);
                match allowed {
                    Some(allowed) => Arc::from(only(&base, &allowed)),
                    None => base,
                }
            });
        }
        if !self.parts.types.read {
            self.refresh_agent_types();
        }
        let tools = &self.shared.tools;
        self.parts.types.offered(restricted, |spec| {
            let base = tools.offered(restricted);
            match spec {
                Some(spec) => with_spawn_spec(&base, spec),
                None => base,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::Registry;

    fn names(tools: &[ToolSpec]) -> Vec<&str> {
        tools.iter().map(|t| t.name.as_str()).collect()
    }

    #[test]
    fn a_typed_child_is_offered_its_tools_and_submit_result_only() {
        let base = Registry::new().offered_to_sub_agent(false);
        let allowed = ["read", "grep", "glob", "bash_never_offered_here"].map(String::from);
        let offered = only(&base, &allowed);
        let mut got = names(&offered);
        got.sort_unstable();
        assert_eq!(got, ["glob", "grep", "read", "submit_result"]);
    }

    #[test]
    fn the_spawn_tool_is_replaced_in_place_and_made_again_only_when_its_spec_changes() {
        let registry = Registry::new();
        let mut offer = TypeOffer::default();
        let mut made = 0;
        let mut ask = |offer: &mut TypeOffer| {
            offer.offered(false, |spec| {
                made += 1;
                match spec {
                    Some(spec) => with_spawn_spec(&registry.offered(false), spec),
                    None => registry.offered(false),
                }
            })
        };
        let plain = ask(&mut offer);
        assert!(Arc::ptr_eq(&plain, &ask(&mut offer)), "kept");
        let spec = agentd_core::tools::spawn_agents_spec_with(&[("a".into(), "b".into())]);
        offer.set_spec(Some(spec.clone()));
        let typed = ask(&mut offer);
        assert_eq!(names(&typed), names(&plain), "same tools, same order");
        let spawn = typed.iter().find(|t| t.name == "spawn_agents").unwrap();
        assert_eq!(spawn, &spec);
        offer.set_spec(Some(spec));
        assert!(Arc::ptr_eq(&typed, &ask(&mut offer)), "the same spec: kept");
        assert_eq!(made, 2);
    }
}
