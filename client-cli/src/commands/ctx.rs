//! The daemon connection a command shares between its calls, and the one
//! retry of a call whose connection broke.

use std::path::PathBuf;

use agent_proto::v1 as pb;

use crate::connect::{Client, connect_or_start};
use crate::error::CliError;

/// What every command needs to reach the daemon.
pub(crate) struct Ctx {
    pub(crate) socket: PathBuf,
    pub(super) pass_socket: bool,
    pub(super) autostart: bool,
    pub(super) json: bool,
    /// The connection the command made first, which its later calls share
    /// (a client is a handle on one HTTP/2 connection): `agent run` creates
    /// the conversation and attaches over one connection, not two.
    pub(super) connected: std::sync::Mutex<Option<Client>>,
}

impl Ctx {
    pub(super) fn target(&self) -> crate::admin::Target {
        crate::admin::Target {
            socket: self.socket.clone(),
            pass_socket: self.pass_socket,
            autostart: self.autostart,
            json: self.json,
        }
    }

    /// A client on the command's connection, connecting (or starting the
    /// daemon) the first time.
    pub(crate) async fn client(&self) -> Result<Client, CliError> {
        if let Some(client) = self.shared().clone() {
            return Ok(client);
        }
        let client = connect_or_start(&self.socket, self.pass_socket, self.autostart).await?;
        *self.shared() = Some(client.clone());
        Ok(client)
    }

    /// A client on a new connection (which later calls share), for a call
    /// whose connection broke or may have.
    pub(crate) async fn reconnect(&self) -> Result<Client, CliError> {
        self.shared().take();
        self.client().await
    }

    fn shared(&self) -> std::sync::MutexGuard<'_, Option<Client>> {
        self.connected
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Pause before the one retry of a call whose connection broke.
const RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

/// Makes a mutating call, and makes it once more when the connection broke
/// before its answer came: the request carries a client request id, so a
/// daemon that did it already answers with the first outcome.
pub(super) async fn retrying<T, F, Fut>(
    ctx: &Ctx,
    call: F,
) -> Result<Result<T, tonic::Status>, CliError>
where
    F: Fn(Client) -> Fut,
    Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    match call(ctx.client().await?).await {
        Err(status) if status.code() == tonic::Code::Unavailable => {
            tokio::time::sleep(RETRY_PAUSE).await;
            Ok(call(ctx.reconnect().await?)
                .await
                .map(tonic::Response::into_inner))
        }
        other => Ok(other.map(tonic::Response::into_inner)),
    }
}

/// The conversation `id` names (a retry after a broken connection).
pub(super) async fn conversation(
    ctx: &Ctx,
    id: &str,
) -> Result<pb::GetConversationResponse, CliError> {
    let request = pb::GetConversationRequest {
        conversation_id: id.to_string(),
    };
    retrying(ctx, |mut client| {
        let request = request.clone();
        async move { client.get_conversation(request).await }
    })
    .await?
    .map_err(|s| CliError::conversation_status(s, id))
}
