//! The user's environment, per conversation (issue 41 point 1).
//!
//! The client that creates a conversation sends its environment (the
//! terminal's, or the editor's for ACP); the conversation's commands (the
//! `bash` tool, background shells, hooks) then run in it instead of in the
//! environment of whatever started the daemon. A refresh (`/env`, `agent
//! set ID --env-from-here`) replaces it. A conversation that never got
//! one (older records, clients that send none) runs in the daemon's, as
//! before.
//!
//! What is kept where:
//! - The daemon's own credentials (`process::is_secret_var`: the model
//!   keys, `AGENTD_TOKEN`) are dropped on arrival, and
//!   `process::withhold_secrets` takes them out of every child anyway.
//! - Variables `[shell.environment] exclude` names (by default `*KEY*`,
//!   `*SECRET*`, `*TOKEN*`) are held in memory only: commands get them
//!   until the daemon stops, and after a restart not until a client sends
//!   the environment again. Only their names are stored, so `agent show`
//!   can say some are missing.
//! - The rest is stored in the `environments` tree of the store (the data
//!   directory is the user's alone, like the transcripts) and survives a
//!   restart. Export never carries it and import never sets it.
//!
//! The policy (`inherit`, `include_only`, `set`, the shell) is applied when
//! a conversation's [`Launch`] is built: once per conversation, kept
//! (`Arc`) until its environment is replaced, so a command's start costs a
//! map lookup more than before.

mod policy;

pub(crate) use policy::{Policy, ShellSection, check_name};

use crate::process::Launch;
use crate::store::{StoreError, Tree};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::sync::{Arc, Mutex};

/// A conversation's environment as stored: the value of its id in the
/// `environments` tree.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Stored {
    /// When a client sent it, Unix ms.
    set_at_ms: i64,
    /// The variables written to disk.
    vars: BTreeMap<String, String>,
    /// The names of those held in memory only.
    held: Vec<String>,
}

/// Where a conversation's environment came from, for `agent show`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Origin {
    /// When the client sent it, Unix ms.
    pub set_at_ms: i64,
    /// Variables it has, held ones included.
    pub variables: usize,
    /// Of those, the ones held in memory for this daemon only.
    pub held: usize,
    /// Held ones this daemon does not have (it started after they were
    /// sent): commands lack them until a client sends them again.
    pub missing: usize,
}

/// The conversations' environments: the stored ones, the held variables,
/// and each conversation's [`Launch`].
pub(crate) struct Environments {
    tree: Tree,
    policy: Policy,
    /// The variables held in memory only, by conversation.
    held: Mutex<HashMap<String, BTreeMap<String, String>>>,
    /// Each conversation's launch, built on first use.
    launches: Mutex<HashMap<String, Arc<Launch>>>,
    /// The launch of conversations without an environment.
    daemon: Arc<Launch>,
}

impl std::fmt::Debug for Environments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Environments").finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Environments {
    /// The environments kept in `tree`, applied as `policy` says.
    pub(crate) fn new(tree: Tree, policy: Policy) -> Environments {
        let env = (!policy.keeps_all()).then(|| policy.child_env(std::env::vars_os()));
        let daemon = Arc::new(Launch::new(
            policy.program.as_deref().map(std::ffi::OsStr::new),
            env,
        ));
        Environments {
            tree,
            policy,
            held: Mutex::default(),
            launches: Mutex::default(),
            daemon,
        }
    }

    /// Gives conversation `id` the environment `vars` a client sent at
    /// `now_ms`, replacing the one it had. Written, not flushed: the
    /// caller's next flush makes it durable.
    pub(crate) fn receive(
        &self,
        id: &str,
        vars: BTreeMap<String, String>,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let mut stored = Stored {
            set_at_ms: now_ms,
            ..Stored::default()
        };
        let mut held = BTreeMap::new();
        for (name, value) in vars {
            if crate::process::is_secret_var(name.as_ref()) {
                continue;
            }
            if self.policy.is_held(&name) {
                stored.held.push(name.clone());
                held.insert(name, value);
            } else {
                stored.vars.insert(name, value);
            }
        }
        self.write(id, &stored)?;
        lock(&self.held).insert(id.to_string(), held);
        lock(&self.launches).remove(id);
        Ok(())
    }

    /// Gives conversation `to` the environment of `from` (a continuation,
    /// a sub-agent, a fork), held variables included. Nothing when `from`
    /// has none. Not flushed.
    pub(crate) fn copy(&self, from: &str, to: &str) -> Result<(), StoreError> {
        let Some(stored) = self.read(from)? else {
            return Ok(());
        };
        self.write(to, &stored)?;
        let held = lock(&self.held).get(from).cloned();
        if let Some(held) = held {
            lock(&self.held).insert(to.to_string(), held);
        }
        lock(&self.launches).remove(to);
        Ok(())
    }

    /// What conversation `id`'s commands start with.
    pub(crate) fn launch(&self, id: &str) -> Arc<Launch> {
        if let Some(launch) = lock(&self.launches).get(id) {
            return Arc::clone(launch);
        }
        let launch = match self.read(id) {
            Ok(Some(stored)) => Arc::new(self.build(id, stored)),
            Ok(None) => Arc::clone(&self.daemon),
            Err(e) => {
                // Commands still run, as they did before conversations had
                // an environment; the next call tries again.
                tracing::warn!(conversation = id, "cannot read its environment: {e}");
                return Arc::clone(&self.daemon);
            }
        };
        lock(&self.launches).insert(id.to_string(), Arc::clone(&launch));
        launch
    }

    /// Lets go of conversation `id`'s launch (its actor unloaded): built
    /// again when it next runs a command. Its held variables stay.
    pub(crate) fn unloaded(&self, id: &str) {
        lock(&self.launches).remove(id);
    }

    /// Forgets conversation `id`'s environment (it is being deleted): the
    /// stored one, the held variables and its launch. Not flushed.
    pub(crate) fn forget(&self, id: &str) -> Result<(), StoreError> {
        self.tree.remove(id.as_bytes())?;
        lock(&self.held).remove(id);
        lock(&self.launches).remove(id);
        Ok(())
    }

    /// Where conversation `id`'s environment came from; None: it runs in
    /// the daemon's.
    pub(crate) fn origin(&self, id: &str) -> Result<Option<Origin>, StoreError> {
        let Some(stored) = self.read(id)? else {
            return Ok(None);
        };
        let present = lock(&self.held).get(id).map_or(0, BTreeMap::len);
        Ok(Some(Origin {
            set_at_ms: stored.set_at_ms,
            variables: stored.vars.len() + stored.held.len(),
            held: stored.held.len(),
            missing: stored.held.len().saturating_sub(present),
        }))
    }

    fn build(&self, id: &str, stored: Stored) -> Launch {
        let mut vars = stored.vars;
        if let Some(held) = lock(&self.held).get(id) {
            vars.extend(held.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        let shell = self
            .policy
            .program
            .clone()
            .or_else(|| vars.get("SHELL").cloned());
        let env = self.policy.child_env(
            vars.into_iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v))),
        );
        Launch::new(shell.as_deref().map(std::ffi::OsStr::new), Some(env))
    }

    fn read(&self, id: &str) -> Result<Option<Stored>, StoreError> {
        let Some(bytes) = self.tree.get(id.as_bytes())? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StoreError::Corrupt {
                key: format!("environment of {id}"),
                message: e.to_string(),
            })
    }

    fn write(&self, id: &str, stored: &Stored) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(stored).map_err(|e| StoreError::Corrupt {
            key: format!("environment of {id}"),
            message: e.to_string(),
        })?;
        self.tree.insert(id.as_bytes(), bytes)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
