//! Deletes in the crash test's workload (issue 41 point 4): in a share of
//! the rounds ([`super::CrashOptions::deletes`]) one conversation no other
//! action of the round touches — with its transcript, events, checkpoints
//! and sub-agents — is deleted (`DeleteConversation`, forced) at a random
//! moment, so kills land before, during and after it.
//!
//! After every kill, the stopped daemon's store is read: a conversation
//! whose delete was asked for is either whole (its record is there; only
//! when the delete was not acknowledged, or its tombstone is there), or
//! being deleted (a tombstone names it: start-up finishes it), or gone
//! without a key left in any tree. After the restart, one acknowledged is
//! absent, and one not acknowledged is absent or present and checked as
//! every other conversation is (it stays in the run).

use std::time::Duration;

use agent_proto::v1 as pb;
use agent_proto::v1::agent_service_client::AgentServiceClient;
use rand::Rng;
use tonic::transport::Channel;

use super::{Action, Kind, Outcome, Run, Tag, unexplained};

/// Where a conversation's delete stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Deletion {
    /// Asked for; not acknowledged (a kill may have cut it).
    Asked,
    /// Acknowledged: it must never be seen again.
    Acknowledged,
    /// Found gone after a restart.
    Gone,
}

impl Run {
    /// With chance `deletes`, the delete of a conversation that none of
    /// `actions` touches (nor the git conversation), at a random moment.
    pub(super) fn plan_delete(&mut self, actions: &[Action]) -> Option<Action> {
        if !self.rng.random_bool(self.opts.deletes.clamp(0.0, 1.0)) {
            return None;
        }
        let git = self.git.as_ref().map(|g| g.conv);
        let busy: Vec<usize> = actions
            .iter()
            .filter_map(|a| match a.kind {
                Kind::Send { conv } => Some(conv),
                _ => None,
            })
            .collect();
        let candidates: Vec<usize> = (0..self.convs.len())
            .filter(|i| Some(*i) != git && !busy.contains(i) && self.convs[*i].deletion.is_none())
            .collect();
        if candidates.is_empty() {
            return None;
        }
        let conv = candidates[self.rng.random_range(0..candidates.len())];
        // Early in the round, so most deletes end before the kill and some
        // are cut by it.
        let after = self
            .rng
            .random_range(Duration::ZERO..=(self.opts.max_delay / 4).max(Duration::from_millis(1)));
        self.convs[conv].deletion = Some(Deletion::Asked);
        self.summary.deletes += 1;
        Some(Action {
            kind: Kind::Delete { conv, after },
            tag: Tag {
                conv: self.convs[conv].label,
                turn: 0,
                rounds: 0,
                spawn: 0,
                git: false,
            },
            cancel_after: None,
            cancel_child: false,
        })
    }

    /// Takes note of a delete's outcome.
    pub(super) fn record_delete(&mut self, conv: usize, outcome: &Outcome) {
        if outcome.acked {
            self.convs[conv].deletion = Some(Deletion::Acknowledged);
            self.summary.deletes_acknowledged += 1;
        }
    }

    /// Reads the stopped daemon's store: every conversation a delete was
    /// asked for is whole, being deleted, or gone without a key left.
    pub(super) fn check_deleted_keys(&self) -> Result<(), String> {
        let asked: Vec<_> = self.convs.iter().filter(|c| c.deletion.is_some()).collect();
        if asked.is_empty() {
            return Ok(());
        }
        let db = self.daemon.data_dir.join("db");
        let store = open_stopped(&db)?;
        let tombstones = store
            .tombstones()
            .map_err(|e| format!("cannot read the tombstones: {e}"))?;
        for conv in asked {
            let keys = store
                .keys_of(&conv.id)
                .map_err(|e| format!("cannot read the keys of {}: {e}", conv.id))?;
            let being_deleted = tombstones.iter().any(|(_, ids)| ids.contains(&conv.id));
            let whole = keys.contains(&"conversations");
            let acknowledged = conv.deletion != Some(Deletion::Asked);
            if being_deleted || keys.is_empty() || (whole && !acknowledged) {
                continue;
            }
            return Err(format!(
                "conversation {} (delete {:?}) is half deleted: no tombstone, {}",
                conv.id,
                conv.deletion,
                if whole {
                    "and its record is back after an acknowledged delete".to_string()
                } else {
                    format!("no record, and keys left in {keys:?}")
                }
            ));
        }
        Ok(())
    }

    /// After a restart: a conversation whose delete was acknowledged is
    /// absent; one not acknowledged is absent, or present and back in the
    /// run (checked as any other).
    pub(super) async fn check_deletes(
        &mut self,
        client: &mut AgentServiceClient<Channel>,
    ) -> Result<(), String> {
        for conv in self.convs.iter_mut() {
            let Some(deletion) = conv.deletion.filter(|d| *d != Deletion::Gone) else {
                continue;
            };
            let found = client
                .get_conversation(pb::GetConversationRequest {
                    conversation_id: conv.id.clone(),
                })
                .await;
            match found {
                Err(status) if status.code() == tonic::Code::NotFound => {
                    conv.deletion = Some(Deletion::Gone);
                    conv.dirty = false;
                }
                Err(status) => {
                    return Err(format!("GetConversation {} failed: {status}", conv.id));
                }
                Ok(_) if deletion == Deletion::Acknowledged => {
                    return Err(format!(
                        "conversation {} is back after its delete was acknowledged",
                        conv.id
                    ));
                }
                Ok(_) => {
                    conv.deletion = None;
                    conv.dirty = true;
                }
            }
        }
        Ok(())
    }

    /// Whether the conversation labelled `label` was deleted (its requests
    /// have no transcript left to be compared with).
    pub(super) fn deleted_label(&self, label: u64) -> bool {
        self.convs
            .iter()
            .any(|c| c.label == label && c.deletion.is_some())
    }
}

/// Deletes `id` after `after`, forced (a kill explains a failure).
pub(super) async fn delete(
    client: &mut AgentServiceClient<Channel>,
    id: &str,
    after: Duration,
    outcome: &mut Outcome,
) {
    tokio::time::sleep(after).await;
    let request = pb::DeleteConversationRequest {
        conversation_id: id.to_string(),
        force: true,
    };
    match client.delete_conversation(request).await {
        Ok(_) => outcome.acked = true,
        Err(status) => outcome.violation = unexplained(&status, "DeleteConversation"),
    }
}

/// How long the check waits for the stopped daemon's store lock: a daemon
/// killed while it spawned a command leaves the lock held by the
/// half-started child until that child's `exec` closes it (the daemon's
/// own start-up waits for it the same way, `LOCK_WAIT`).
const LOCK_WAIT: Duration = Duration::from_secs(5);

/// Opens the store of a stopped daemon, waiting out a lock a half-started
/// child of it still holds.
fn open_stopped(db: &std::path::Path) -> Result<agentd::Store, String> {
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match agentd::Store::open(db) {
            Ok(store) => return Ok(store),
            Err(e)
                if e.to_string().contains("could not acquire lock")
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(format!("cannot open the stopped daemon's store: {e}")),
        }
    }
}
