//! Foreground commands while they run: the `bash` tool registers each one
//! ([`ShellManager::foreground`]) so that any client may move it to the
//! background ([`CommandAction::Background`]: it goes on as a shell of
//! this manager) or kill it ([`CommandAction::Kill`]: the call ends with a
//! result saying who killed it, and the turn goes on). The command's own
//! task does the work when it gets the request; the caller waits for its
//! answer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};

use super::{ShellError, ShellManager, lock};

/// What a client asks of a running foreground command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CommandAction {
    /// Go on as a background shell.
    Background,
    /// Stop it (its whole process group).
    Kill,
}

/// One request to a running command: what, by whom (a client's name), and
/// where its answer goes: the shell id it goes on as (Background), or
/// nothing (Kill); an error says why it could not.
#[derive(Debug)]
pub(crate) struct CommandRequest {
    pub(crate) action: CommandAction,
    pub(crate) by: String,
    pub(crate) reply: oneshot::Sender<Result<Option<String>, String>>,
}

/// (conversation id, tool_use_id).
type Key = (String, String);
type Map = Arc<Mutex<HashMap<Key, mpsc::Sender<CommandRequest>>>>;

/// The foreground commands running now.
#[derive(Debug, Default)]
pub(super) struct Running(Map);

/// A running foreground command's end of the line: requests for it arrive
/// here. Dropped when the command's call ends, which unregisters it.
#[derive(Debug)]
pub(crate) struct Foreground {
    key: Key,
    requests: mpsc::Receiver<CommandRequest>,
    map: Map,
}

impl Foreground {
    /// The next request (never, once nobody can send one).
    pub(crate) async fn next(&mut self) -> CommandRequest {
        match self.requests.recv().await {
            Some(request) => request,
            None => std::future::pending().await,
        }
    }
}

impl Drop for Foreground {
    fn drop(&mut self) {
        lock(&self.map).remove(&self.key);
    }
}

impl ShellManager {
    /// Registers the foreground command of call `tool_use_id` of
    /// `conversation_id` while it runs.
    pub(crate) fn foreground(&self, conversation_id: &str, tool_use_id: &str) -> Foreground {
        let (tx, requests) = mpsc::channel(4);
        let key = (conversation_id.to_string(), tool_use_id.to_string());
        lock(&self.foreground.0).insert(key.clone(), tx);
        Foreground {
            key,
            requests,
            map: Arc::clone(&self.foreground.0),
        }
    }

    /// Asks the running foreground command of call `tool_use_id` of
    /// `conversation_id` (empty: the one command running there) to do
    /// `action`, for the client `by`; its answer: the shell id it goes on
    /// as (Background), or None (Kill).
    pub(crate) async fn control(
        &self,
        conversation_id: &str,
        tool_use_id: &str,
        action: CommandAction,
        by: &str,
    ) -> Result<Option<String>, ShellError> {
        let target = self.running_command(conversation_id, tool_use_id)?;
        let (reply, answer) = oneshot::channel();
        let request = CommandRequest {
            action,
            by: by.to_string(),
            reply,
        };
        let gone = || ShellError::NoCommand("the command ended meanwhile".to_string());
        target.send(request).await.map_err(|_| gone())?;
        answer
            .await
            .map_err(|_| gone())?
            .map_err(ShellError::Refused)
    }

    /// Where requests for the command go.
    fn running_command(
        &self,
        conversation_id: &str,
        tool_use_id: &str,
    ) -> Result<mpsc::Sender<CommandRequest>, ShellError> {
        let running = lock(&self.foreground.0);
        let mut of_conversation = running.iter().filter(|((c, t), _)| {
            c == conversation_id && (tool_use_id.is_empty() || t == tool_use_id)
        });
        match (of_conversation.next(), of_conversation.next()) {
            (Some((_, tx)), None) => Ok(tx.clone()),
            (None, _) if tool_use_id.is_empty() => Err(ShellError::NoCommand(
                "no command is running in this conversation".to_string(),
            )),
            (None, _) => Err(ShellError::NoCommand(format!(
                "no command of tool call {tool_use_id} is running in this conversation"
            ))),
            (Some(_), Some(_)) => Err(ShellError::NoCommand(
                "several commands are running in this conversation: name the tool call".to_string(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manager(dir: &tempfile::TempDir) -> Arc<ShellManager> {
        let (events, _) = tokio::sync::broadcast::channel(4);
        ShellManager::new(
            dir.path().join("spool"),
            super::super::ShellLimits::default(),
            Box::new(|_: &super::super::ShellRecord| {}),
            events,
        )
    }

    #[tokio::test]
    async fn a_request_reaches_the_running_command_and_its_answer_comes_back() {
        let dir = tempfile::tempdir().unwrap();
        let shells = manager(&dir);
        let err = shells
            .control("c", "", CommandAction::Kill, "me")
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "no command is running in this conversation"
        );
        let mut fg = shells.foreground("c", "toolu_1");
        let asked = {
            let shells = Arc::clone(&shells);
            tokio::spawn(async move {
                shells
                    .control("c", "", CommandAction::Background, "alice")
                    .await
            })
        };
        let request = fg.next().await;
        assert_eq!(
            (request.action, request.by.as_str()),
            (CommandAction::Background, "alice")
        );
        request.reply.send(Ok(Some("sh-x".into()))).unwrap();
        assert_eq!(asked.await.unwrap().unwrap(), Some("sh-x".into()));
        // Another conversation's command, or another call, is not it.
        assert!(
            shells
                .control("d", "", CommandAction::Kill, "me")
                .await
                .is_err()
        );
        assert!(
            shells
                .control("c", "toolu_2", CommandAction::Kill, "me")
                .await
                .is_err()
        );
        drop(fg);
        assert!(
            shells
                .control("c", "toolu_1", CommandAction::Kill, "me")
                .await
                .is_err()
        );
    }
}
