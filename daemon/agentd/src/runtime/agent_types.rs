//! The manager's side of sub-agent types (see `crate::agent_types`): the
//! types a directory offers, and the type a child is spawned as.

use super::{Manager, RuntimeError};
use crate::agent_types::Listing;
use crate::store::SubAgentType;
use std::path::Path;

/// A child's type, resolved when it is spawned.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ChildType {
    /// What its record keeps.
    pub kind: SubAgentType,
    /// Its model, when the type names one the daemon knows.
    pub model: Option<String>,
}

impl Manager {
    /// The sub-agent types of a conversation in `cwd`: its trusted
    /// project's and the user's.
    pub(crate) fn agent_types(&self, cwd: &Path) -> Listing {
        listing(&self.shared, cwd)
    }

    /// The type `name` as a child in `cwd` runs it, or why there is none.
    /// A model the type names that the daemon does not know is left for
    /// the parent's (and logged).
    pub(super) fn child_type(&self, cwd: &Path, name: &str) -> Result<ChildType, RuntimeError> {
        let listing = self.agent_types(cwd);
        let Some((listed, agent)) = listing.find(name) else {
            return Err(RuntimeError::InvalidArgument(format!(
                "there is no sub-agent type `{name}` (available: {}; `agent agents ls` tells why a file is not used)",
                listing.names()
            )));
        };
        let model = match &agent.model {
            Some(m) if self.shared.config.models.lookup(m).known => Some(super::model_name(m)?),
            // Listed as a problem (`listing`).
            Some(_) => None,
            None => None,
        };
        Ok(ChildType {
            kind: SubAgentType {
                name: agent.name.clone(),
                tools: listed.tools.clone(),
                prompt: agent.prompt.clone(),
            },
            model,
        })
    }
}

/// The sub-agent types of a conversation in `cwd`: its trusted project's
/// and the user's.
pub(super) fn listing(shared: &super::Shared, cwd: &Path) -> Listing {
    let trusted = match shared.store.trusted_dirs() {
        Ok(dirs) => dirs,
        Err(e) => {
            tracing::error!("cannot read trusted directories: {e}");
            Vec::new()
        }
    };
    let mut listing = shared
        .agent_types
        .list(shared.config.user_dir.as_deref(), cwd, &trusted);
    for listed in &mut listing.types {
        if let Ok(agent) = &listed.agent
            && let Some(model) = &agent.model
            && !shared.config.models.lookup(model).known
        {
            listed.problems.push(format!(
                "model {model} is not one agentd knows (its table or a [models.\"{model}\"] entry): children get the parent's"
            ));
        }
    }
    listing
}
