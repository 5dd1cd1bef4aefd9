//! The environment a client sends with a new conversation (and with `/env`
//! and `agent set --env-from-here`): the conversation's commands run in it.

use agent_proto::v1 as pb;

/// This process's environment, to send to the daemon; None when the
/// daemon is remote: only the local user may give commands an environment
/// (the daemon refuses it from a remote caller). Variables whose name or
/// value is not UTF-8 are left out (the wire carries text).
pub fn here() -> Option<pb::Environment> {
    crate::remote::current().is_none().then(|| pb::Environment {
        vars: std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect(),
    })
}
