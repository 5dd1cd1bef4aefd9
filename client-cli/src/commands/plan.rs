//! `agent plan`: a pending plan approved, rejected or edited (in $EDITOR).

use agent_proto::v1 as pb;

use super::{Ctx, client_name, conversation, print_json, print_line, request_id, retrying};
use crate::cli::{PlanAction, PlanArgs};
use crate::error::{CliError, Exit};
use crate::io::Io;

pub(super) async fn plan_answer(ctx: &Ctx, args: PlanArgs, io: &mut Io) -> Result<Exit, CliError> {
    use pb::plan_answer::Answer as A;
    let answer = match args.action {
        PlanAction::Approve => A::Approve(pb::PlanApprove {
            mode: pb::PermissionMode::Default as i32,
        }),
        PlanAction::ApproveEdits => A::Approve(pb::PlanApprove {
            mode: pb::PermissionMode::AcceptEdits as i32,
        }),
        PlanAction::Reject => A::Reject(pb::PlanReject {
            feedback: args.feedback.clone().unwrap_or_default(),
        }),
        PlanAction::Edit => {
            let text = match &args.steps_file {
                Some(path) if path.as_os_str() == "-" => std::io::read_to_string(std::io::stdin())
                    .map_err(|e| {
                        CliError::Input(format!("cannot read the steps from standard input: {e}"))
                    })?,
                Some(path) => std::fs::read_to_string(path)
                    .map_err(|e| CliError::Input(format!("cannot read {}: {e}", path.display())))?,
                None => {
                    let pending = conversation(ctx, &args.id)
                        .await?
                        .pending_permission
                        .and_then(|p| p.plan)
                        .ok_or_else(|| {
                            CliError::Refused("no plan is waiting for approval".to_string())
                        })?;
                    edit_in_editor(&crate::render::plan_steps_text(&pending))?
                }
            };
            let steps = crate::render::parse_plan_steps(&text).map_err(CliError::Input)?;
            A::Edit(pb::PlanEdit {
                steps,
                mode: pb::PermissionMode::Default as i32,
            })
        }
    };
    let request = pb::AnswerPermissionRequest {
        conversation_id: args.id.clone(),
        client_name: client_name(),
        client_request_id: request_id(),
        plan_answer: Some(pb::PlanAnswer {
            answer: Some(answer),
        }),
        ..Default::default()
    };
    retrying(ctx, |mut client| {
        let request = request.clone();
        async move { client.answer_permission(request).await }
    })
    .await?
    .map_err(|s| CliError::conversation_status(s, &args.id))?;
    let done = match args.action {
        PlanAction::Approve => "plan approved",
        PlanAction::ApproveEdits => "plan approved (accept_edits)",
        PlanAction::Reject => "plan rejected",
        PlanAction::Edit => "edited plan approved",
    };
    if ctx.json {
        print_json(io, &serde_json::json!({"answered": done}))?;
    } else {
        print_line(io, done)?;
    }
    Ok(Exit::Ok)
}

/// Opens `text` in $VISUAL / $EDITOR (vi without either) and returns what
/// the user saved.
pub(super) fn edit_in_editor(text: &str) -> Result<String, CliError> {
    let editor = std::env::var("VISUAL")
        .or_else(|_| std::env::var("EDITOR"))
        .unwrap_or_else(|_| "vi".to_string());
    let path = std::env::temp_dir().join(format!("agent-plan-{}.txt", std::process::id()));
    let header = "# Edit the steps, one a line: id. [kind] title (after id, id) {file, file}\n# kinds: analyze, edit, validate, test. Lines starting with # are ignored.\n";
    std::fs::write(&path, format!("{header}{text}"))
        .map_err(|e| CliError::Input(format!("cannot write {}: {e}", path.display())))?;
    let mut words = shlex::split(&editor).unwrap_or_else(|| vec![editor.clone()]);
    if words.is_empty() {
        words.push("vi".to_string());
    }
    let status = std::process::Command::new(&words[0])
        .args(&words[1..])
        .arg(&path)
        .status();
    let edited = std::fs::read_to_string(&path);
    let _ = std::fs::remove_file(&path);
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => {
            return Err(CliError::Input(format!(
                "{editor} exited with {s}; nothing sent"
            )));
        }
        Err(e) => return Err(CliError::Input(format!("cannot run {editor}: {e}"))),
    }
    edited.map_err(|e| CliError::Input(format!("cannot read the edited steps: {e}")))
}
