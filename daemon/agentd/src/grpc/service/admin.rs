//! The daemon itself rather than a conversation: trusted directories,
//! daemon info, MCP servers, access tokens and a conversation's audit trail.

use super::{Service, caller};
use crate::grpc::convert::{self, to_status};
use agent_proto::v1 as pb;
use std::time::Duration;
use tonic::{Request, Response, Status};

/// A token as clients see it.
fn token_info(t: &crate::store::access::TokenRecord) -> pb::TokenInfo {
    pb::TokenInfo {
        id: t.id.clone(),
        name: t.name.clone(),
        role: convert::role(t.role) as i32,
        created_at_ms: t.created_at_ms,
        expires_at_ms: t.expires_at_ms.unwrap_or(0),
        revoked_at_ms: t.revoked_at_ms.unwrap_or(0),
        last_used_at_ms: t.last_used_at_ms.unwrap_or(0),
    }
}

/// The trusted directories, as a response.
fn trusted(svc: &Service, changed: bool) -> Result<Response<pb::TrustedDirectories>, Status> {
    let dirs = svc
        .manager
        .shared()
        .store
        .trusted_dirs()
        .map_err(|e| to_status(e.into()))?;
    Ok(Response::new(pb::TrustedDirectories {
        paths: dirs.iter().map(|(d, _)| d.display().to_string()).collect(),
        changed,
    }))
}

pub(super) async fn set_directory_trust(
    svc: &Service,
    request: Request<pb::SetDirectoryTrustRequest>,
) -> Result<Response<pb::TrustedDirectories>, Status> {
    let req = request.into_inner();
    let store = &svc.manager.shared().store;
    let path = std::path::Path::new(&req.path);
    if !path.is_absolute() {
        return Err(convert::bounded(
            tonic::Code::InvalidArgument,
            format!("the directory must be an absolute path, got {:?}", req.path),
        ));
    }
    let changed = if req.trusted {
        let dir = std::fs::canonicalize(path).map_err(|e| {
            convert::bounded(
                tonic::Code::InvalidArgument,
                format!("cannot trust {}: {e}", path.display()),
            )
        })?;
        if !dir.is_dir() {
            return Err(Status::invalid_argument(format!(
                "cannot trust {}: not a directory",
                dir.display()
            )));
        }
        // The walk reads the disk: off the runtime's threads.
        let under = dir.clone();
        let pinned = crate::tasks::spawn_blocking("hook pins scan", move || {
            crate::hooks::pins_under(&under)
        })
        .await
        .map_err(|e| Status::internal(format!("looking for project files failed: {e}")))?;
        store.trust_dir(&dir, pinned)
    } else {
        // A directory that is gone can still be untrusted by its name.
        let dir = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        store.untrust_dir(&dir)
    }
    .map_err(|e| to_status(e.into()))?;
    store.flush().await.map_err(|e| to_status(e.into()))?;
    trusted(svc, changed)
}

pub(super) async fn list_trusted_directories(
    svc: &Service,
    _request: Request<pb::ListTrustedDirectoriesRequest>,
) -> Result<Response<pb::TrustedDirectories>, Status> {
    trusted(svc, false)
}

pub(super) async fn get_daemon_info(
    svc: &Service,
    request: Request<pb::GetDaemonInfoRequest>,
) -> Result<Response<pb::GetDaemonInfoResponse>, Status> {
    let who = caller(&request)?;
    let check_model = request.into_inner().check_model;
    if check_model {
        svc.model_checks.admit(&who, std::time::Instant::now())?;
    }
    Ok(Response::new(
        crate::grpc::info::daemon_info(&svc.manager, check_model).await,
    ))
}

pub(super) async fn list_mcp_servers(
    svc: &Service,
    _request: Request<pb::ListMcpServersRequest>,
) -> Result<Response<pb::ListMcpServersResponse>, Status> {
    let hub = &svc.manager.shared().mcp;
    Ok(Response::new(convert::mcp_servers(
        hub.list(),
        hub.config_servers(),
    )))
}

pub(super) async fn list_agent_types(
    svc: &Service,
    request: Request<pb::ListAgentTypesRequest>,
) -> Result<Response<pb::ListAgentTypesResponse>, Status> {
    let who = caller(&request)?;
    let raw = request.into_inner().cwd;
    let cwd = if raw.is_empty() {
        std::path::PathBuf::new()
    } else {
        // A remote caller looks only where it may work.
        let cwd = super::validate_dir(&raw, "cwd")?;
        svc.admit(
            crate::grpc::admission::Source::of(&who),
            &crate::grpc::admission::Grants {
                dirs: &[(cwd.as_path(), "cwd")],
                ..Default::default()
            },
        )?;
        cwd
    };
    let manager = svc.manager.clone();
    // Reading files: off the async workers.
    let listing =
        crate::tasks::spawn_blocking("list agent types", move || manager.agent_types(&cwd))
            .await
            .map_err(|e| Status::internal(format!("listing agent types failed: {e}")))?;
    Ok(Response::new(convert::agent_types(&listing)))
}

pub(super) async fn create_token(
    svc: &Service,
    request: Request<pb::CreateTokenRequest>,
) -> Result<Response<pb::CreateTokenResponse>, Status> {
    let req = request.into_inner();
    let Some(role) = convert::role_from(req.role)? else {
        return Err(Status::invalid_argument(
            "a token needs a role: viewer, approver or driver",
        ));
    };
    let expires_in = (req.expires_in_secs > 0).then(|| Duration::from_secs(req.expires_in_secs));
    let (token, secret) = svc.access.create(role, &req.name, expires_in)?;
    svc.access.flush().await?;
    tracing::info!(token = %token.id, name = %token.name, role = %token.role, "token created");
    Ok(Response::new(pb::CreateTokenResponse {
        token: Some(token_info(&token)),
        secret,
    }))
}

pub(super) async fn list_tokens(
    svc: &Service,
    _request: Request<pb::ListTokensRequest>,
) -> Result<Response<pb::ListTokensResponse>, Status> {
    let tokens = svc.access.tokens()?;
    let listening = svc.access.listening.clone();
    Ok(Response::new(pb::ListTokensResponse {
        tokens: tokens.iter().map(token_info).collect(),
        listen_address: listening
            .as_ref()
            .map(|l| l.address.clone())
            .unwrap_or_default(),
        fingerprint: listening.map(|l| l.fingerprint).unwrap_or_default(),
    }))
}

pub(super) async fn revoke_token(
    svc: &Service,
    request: Request<pb::RevokeTokenRequest>,
) -> Result<Response<pb::RevokeTokenResponse>, Status> {
    let token = svc.access.revoke(&request.into_inner().id)?;
    svc.access.flush().await?;
    tracing::info!(token = %token.id, name = %token.name, "token revoked");
    Ok(Response::new(pb::RevokeTokenResponse {
        token: Some(token_info(&token)),
    }))
}

pub(super) async fn get_audit(
    svc: &Service,
    request: Request<pb::GetAuditRequest>,
) -> Result<Response<pb::GetAuditResponse>, Status> {
    let id = svc
        .manager
        .resolve(&request.into_inner().conversation_id)
        .map_err(to_status)?;
    let entries = svc
        .manager
        .shared()
        .store
        .audit(&id)
        .map_err(|e| to_status(e.into()))?;
    Ok(Response::new(pb::GetAuditResponse {
        entries: entries.iter().map(convert::audit_entry).collect(),
    }))
}
