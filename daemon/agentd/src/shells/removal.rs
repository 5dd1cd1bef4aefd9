//! The shells of a deleted conversation: killed, forgotten, their output
//! removed.

use super::{ShellManager, lock};

impl ShellManager {
    /// Kills every running shell of `conversation_id` and waits for their
    /// ends to be recorded, then forgets them and removes their output.
    /// Returns how many were running. Their records in the store are the
    /// caller's to remove, after this returns (an end is recorded through
    /// the store, so before that a record could be written again).
    pub(crate) async fn forget_conversation(&self, conversation_id: &str) -> usize {
        let shells = self.list(Some(conversation_id));
        let running: Vec<&str> = shells
            .iter()
            .filter(|r| !r.status.is_ended())
            .map(|r| r.id.as_str())
            .collect();
        futures::future::join_all(running.iter().map(|id| self.kill(id))).await;
        let mut map = lock(&self.shells);
        for record in &shells {
            if let Some(shell) = map.remove(&record.id) {
                let _ = std::fs::remove_file(&shell.spool_path);
            }
        }
        running.len()
    }
}
