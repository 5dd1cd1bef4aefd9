//! Sub-agent types on the wire (`ListAgentTypes`).

use crate::agent_types::{Listed, Listing};
use agent_proto::v1 as pb;

pub(crate) fn agent_types(listing: &Listing) -> pb::ListAgentTypesResponse {
    pb::ListAgentTypesResponse {
        types: listing.types.iter().map(agent_type).collect(),
        notes: listing.notes.clone(),
    }
}

fn agent_type(listed: &Listed) -> pb::AgentTypeInfo {
    let mut info = pb::AgentTypeInfo {
        origin: listed.origin.as_str().to_string(),
        path: listed.path.display().to_string(),
        tools: listed.tools.clone().unwrap_or_default(),
        all_tools: listed.tools.is_none(),
        problems: listed.problems.clone(),
        usable: listed.usable,
        ..Default::default()
    };
    match &listed.agent {
        Ok(agent) => {
            info.name = agent.name.clone();
            info.description = agent.description.clone();
            info.model = agent.model.clone().unwrap_or_default();
        }
        Err(e) => {
            info.error = e.clone();
            info.all_tools = false;
        }
    }
    info
}
