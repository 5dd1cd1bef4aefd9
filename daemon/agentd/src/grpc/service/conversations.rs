//! Conversations as a whole: create, list, get, update, compact, continue
//! and rewind one, and the checks a new conversation passes (shared with
//! the Attach stream's `create` frame).

use super::{Service, caller, check_text, display_name, validate_dir};
use crate::grpc::access::Caller;
use crate::grpc::admission::{Grants, Source};
use crate::grpc::convert::{self, to_status};
use crate::runtime::NewConversation;
use agent_proto::v1 as pb;
use tonic::{Request, Response, Status};

/// What a create request makes: the conversation, and its first prompt
/// with its images (none when the request has neither).
type Creation = (
    NewConversation,
    Option<(String, Vec<crate::images::StagedImage>)>,
);

/// A CreateConversation request from `who` checked and turned into
/// what the manager creates (also the Attach stream's `create` frame).
pub(super) fn new_conversation(
    svc: &Service,
    who: &Caller,
    req: pb::CreateConversationRequest,
) -> Result<Creation, Status> {
    if req.cwd.is_empty() {
        return Err(Status::invalid_argument("cwd is required"));
    }
    let cwd = validate_dir(&req.cwd, "cwd")?;
    let additional_dirs = req
        .additional_dirs
        .iter()
        .map(|d| validate_dir(d, "additional directory"))
        .collect::<Result<Vec<_>, _>>()?;
    let mode = (req.mode != pb::PermissionMode::Unspecified as i32)
        .then(|| convert::mode_from(req.mode))
        .transpose()?;
    let server_names: Vec<String> = req.mcp_servers.iter().map(|s| s.name.clone()).collect();
    let environment = req.environment.map(convert::environment_from).transpose()?;
    let mut dirs = vec![(cwd.as_path(), "cwd")];
    dirs.extend(
        additional_dirs
            .iter()
            .map(|d| (d.as_path(), "additional directory")),
    );
    svc.admit(
        Source::of(who),
        &Grants {
            mode,
            allow_rules: &req.allow_rules,
            mcp_servers: &server_names,
            dirs: &dirs,
            environment: environment.is_some(),
        },
    )?;
    let mut mcp_servers = Vec::with_capacity(req.mcp_servers.len());
    for s in &req.mcp_servers {
        let spec = convert::mcp_server_from(s)?;
        if mcp_servers
            .iter()
            .any(|m: &crate::mcp::ServerSpec| m.name == spec.name)
        {
            return Err(Status::invalid_argument(format!(
                "MCP server {:?} is given twice",
                spec.name
            )));
        }
        mcp_servers.push(spec);
    }
    let prompt = req.prompt;
    check_text(svc.limits(), "prompt", &prompt)?;
    // Checked before anything is made: a refused image creates nothing.
    let images = convert::uploads(&svc.manager.shared().config.images.limits(), req.images)?;
    Ok((
        NewConversation {
            cwd,
            model: req.model,
            mode,
            allow_rules: req.allow_rules,
            additional_dirs,
            mcp_servers,
            client_request_id: convert::client_request_id_from(req.client_request_id)?,
            parent: None,
            sub_agent: None,
            environment,
            thinking: convert::thinking_from(req.thinking.as_ref())?,
        },
        (!prompt.is_empty() || !images.is_empty()).then_some((prompt, images)),
    ))
}

/// The project instructions a turn in `cwd` would read now.
async fn instructions_for(svc: &Service, cwd: &std::path::Path) -> pb::Instructions {
    use crate::runtime::instructions;
    let config = &svc.manager.shared().config;
    let dirs = instructions::directories(config.user_dir.as_deref(), cwd);
    let max_bytes = config.instructions.max_bytes;
    let found = crate::tasks::spawn_blocking("AGENTS.md load", move || {
        instructions::load(&dirs, max_bytes)
    })
    .await
    .unwrap_or_default();
    convert::instructions(&found.files(), found.truncated)
}

pub(super) async fn create_conversation(
    svc: &Service,
    request: Request<pb::CreateConversationRequest>,
) -> Result<Response<pb::CreateConversationResponse>, Status> {
    let who = caller(&request)?;
    let (new, prompt) = new_conversation(svc, &who, request.into_inner())?;
    let record = svc.manager.create(new, prompt).await.map_err(to_status)?;
    Ok(Response::new(pb::CreateConversationResponse {
        conversation: Some(svc.summary(&record)),
    }))
}

pub(super) async fn list_conversations(
    svc: &Service,
    request: Request<pb::ListConversationsRequest>,
) -> Result<Response<pb::ListConversationsResponse>, Status> {
    let req = request.into_inner();
    let before = req.before_id.trim().to_ascii_uppercase();
    let before = (!before.is_empty()).then_some(before.as_str());
    let (page, more) = svc
        .manager
        .list(before, req.limit as usize, req.archived)
        .map_err(to_status)?;
    let next_before_id = match page.last() {
        Some(last) if more => last.id.clone(),
        _ => String::new(),
    };
    Ok(Response::new(pb::ListConversationsResponse {
        conversations: page.iter().map(|r| svc.summary(r)).collect(),
        notices: svc.manager.shared().notices.clone(),
        next_before_id,
    }))
}

pub(super) async fn get_conversation(
    svc: &Service,
    request: Request<pb::GetConversationRequest>,
) -> Result<Response<pb::GetConversationResponse>, Status> {
    let id = svc
        .manager
        .resolve(&request.into_inner().conversation_id)
        .map_err(to_status)?;
    let record = svc.manager.record(&id).map_err(to_status)?;
    let messages = svc.manager.messages(&record).map_err(to_status)?;
    let pending = record.conversation.state.pending_permission().map(|ask| {
        convert::permission(&crate::runtime::PermissionView {
            summary: crate::tools::summarize_call(&ask.tool_name, &ask.input),
            diff: None,
            ask: ask.clone(),
            sub_agent: crate::runtime::SubAgentRef::of(&record),
        })
    });
    let instructions = instructions_for(svc, &record.cwd).await;
    Ok(Response::new(pb::GetConversationResponse {
        conversation: Some(svc.summary(&record)),
        messages: messages
            .iter()
            .map(|(s, m)| convert::message(*s, m))
            .collect(),
        pending_permission: pending,
        instructions: Some(instructions),
        plan: record.conversation.plan.as_ref().map(convert::plan),
        environment: svc
            .manager
            .shared()
            .environments
            .origin(&record.id)
            .map_err(|e| to_status(e.into()))?
            .map(convert::environment_origin),
        checkpoints: svc
            .manager
            .shared()
            .checkpoints
            .turns(&record.id)
            .map(|t| convert::checkpoint_turns(&t))
            .unwrap_or_else(|e| {
                tracing::warn!(conversation = %record.id, "cannot list checkpoints: {e}");
                Vec::new()
            }),
    }))
}

pub(super) async fn update_conversation(
    svc: &Service,
    request: Request<pb::UpdateConversationRequest>,
) -> Result<Response<pb::UpdateConversationResponse>, Status> {
    let who = caller(&request)?;
    let req = request.into_inner();
    let id = svc
        .manager
        .resolve(&req.conversation_id)
        .map_err(to_status)?;
    let settings = crate::runtime::Settings {
        mode: (req.mode != pb::PermissionMode::Unspecified as i32)
            .then(|| convert::mode_from(req.mode))
            .transpose()?,
        model: (!req.model.is_empty()).then_some(req.model),
        add_dirs: req
            .add_dirs
            .iter()
            .map(|d| validate_dir(d, "additional directory"))
            .collect::<Result<Vec<_>, _>>()?,
        by: display_name(&req.client_name),
    };
    let environment = req.environment.map(convert::environment_from).transpose()?;
    let dirs: Vec<_> = settings
        .add_dirs
        .iter()
        .map(|d| (d.as_path(), "additional directory"))
        .collect();
    svc.admit(
        Source::of(&who),
        &Grants {
            mode: settings.mode,
            dirs: &dirs,
            environment: environment.is_some(),
            ..Grants::default()
        },
    )?;
    let record = svc.manager.update(&id, settings).await.map_err(to_status)?;
    // After the settings: a refused update changes nothing.
    if let Some(vars) = environment {
        svc.manager
            .set_environment(&id, vars)
            .await
            .map_err(to_status)?;
    }
    Ok(Response::new(pb::UpdateConversationResponse {
        conversation: Some(svc.summary(&record)),
    }))
}

pub(super) async fn compact_conversation(
    svc: &Service,
    request: Request<pb::CompactConversationRequest>,
) -> Result<Response<pb::CompactConversationResponse>, Status> {
    let id = svc
        .manager
        .resolve(&request.into_inner().conversation_id)
        .map_err(to_status)?;
    let record = svc.manager.compact(&id).await.map_err(to_status)?;
    Ok(Response::new(pb::CompactConversationResponse {
        conversation: Some(svc.summary(&record)),
    }))
}

pub(super) async fn continue_conversation(
    svc: &Service,
    request: Request<pb::ContinueConversationRequest>,
) -> Result<Response<pb::ContinueConversationResponse>, Status> {
    let request = request.into_inner();
    let id = svc
        .manager
        .resolve(&request.conversation_id)
        .map_err(to_status)?;
    let model = (!request.model.is_empty())
        .then(|| crate::runtime::model_name(&request.model))
        .transpose()
        .map_err(to_status)?;
    let record = svc
        .manager
        .continue_conversation(&id, false, model)
        .await
        .map_err(to_status)?;
    Ok(Response::new(pb::ContinueConversationResponse {
        conversation: Some(svc.summary(&record)),
    }))
}

pub(super) async fn rewind(
    svc: &Service,
    request: Request<pb::RewindRequest>,
) -> Result<Response<pb::RewindResponse>, Status> {
    let req = request.into_inner();
    let id = svc
        .manager
        .resolve(&req.conversation_id)
        .map_err(to_status)?;
    let done = svc
        .manager
        .rewind(
            &id,
            crate::runtime::RewindRequest {
                to: req.message_seq,
                code: req.code,
                conversation: req.conversation,
                force: req.force,
            },
        )
        .await
        .map_err(to_status)?;
    Ok(Response::new(pb::RewindResponse {
        message_seq: done.message_seq,
        code: done
            .code
            .as_ref()
            .map(|r| convert::code_rewound(done.message_seq, r, "")),
        forked: done.forked.as_ref().map(|r| svc.summary(r)),
    }))
}
