//! Permission requests and plan approvals: asking the person (a key, a
//! typed line, `--yes`, or another client), sending the answer, and saying
//! when it was refused or came too late.

use agent_proto::v1::{self as pb, attach_request::Frame};

use super::Session;
use crate::cli::{
    Decision, PLAN_KEYS, PlanKey, TypedAnswer, offered_decisions, parse_plan_key,
    parse_typed_answer,
};
use crate::error::CliError;
use crate::repl::term::Question;

/// What the person is being asked.
pub(super) struct Prompt {
    request: pb::PermissionRequest,
    offered: Vec<Decision>,
    /// Deny-and-stop was chosen; the next line is its feedback.
    wants_feedback: bool,
}

impl Session<'_> {
    pub(super) async fn permission_requested(
        &mut self,
        request: &pb::PermissionRequest,
    ) -> Result<(), CliError> {
        let id = &request.request_id;
        if self
            .prompt
            .as_ref()
            .is_some_and(|p| &p.request.request_id == id)
            || self.answered.as_ref().is_some_and(|(a, _)| a == id)
        {
            return Ok(());
        }
        if self.json_out.is_some() {
            // With --json the block goes to stderr for the person.
            self.render
                .permission_request(request)
                .map_err(|e| CliError::io("writing output", e))?;
        }
        if request.plan.is_some() {
            // A plan approval offers no permission decision (not even to
            // --yes). On a terminal a key answers it (a, e, r); elsewhere,
            // and to edit the steps, `agent plan`.
            let short: String = self.config.conversation_id.chars().take(10).collect();
            if (self.ui.is_some() || self.input.is_terminal()) && !self.input_closed {
                self.prompt = Some(Prompt {
                    request: request.clone(),
                    offered: Vec::new(),
                    wants_feedback: false,
                });
                self.reading_input = true;
                self.note(PLAN_KEYS)?;
                return self.note(&format!("(to edit the steps: agent plan {short} edit)"));
            }
            return self.note(&format!(
                "the plan waits for approval: agent plan {short} approve|approve_edits|reject --feedback TEXT|edit"
            ));
        }
        let offered = offered_decisions(&request.options);
        if self.config.yes {
            self.send_answer(id.clone(), Decision::AllowOnce, None, false)
                .await;
            if self.json_out.is_some() {
                return self.note("allowed once (--yes)");
            }
            return Ok(());
        }
        if let Some(ui) = &self.ui {
            ui.ask(Question {
                request_id: id.clone(),
                offered: offered.clone(),
            });
            self.prompt = Some(Prompt {
                request: request.clone(),
                offered,
                wants_feedback: false,
            });
            return Ok(());
        }
        if self.input.is_terminal() && !self.input_closed {
            self.prompt = Some(Prompt {
                request: request.clone(),
                offered,
                wants_feedback: false,
            });
            self.reading_input = true;
            return self.note("type a key and press Enter");
        }
        let names: Vec<&str> = offered.iter().map(|d| d.name()).collect();
        let short: String = self.config.conversation_id.chars().take(10).collect();
        self.note(&format!(
            "waiting for another client to answer (agent answer {short} {})",
            names.join("|")
        ))
    }

    /// The daemon refused a frame of this client's (it says so with an
    /// error event of sequence number 0, or by ending the stream).
    pub(super) fn refused(&mut self, message: &str) -> Result<(), CliError> {
        if let Some((_, decision)) = self.answered.take() {
            self.show_error(&format!(
                "answer \"{}\" refused: {message}",
                decision.label()
            ))
        } else if std::mem::take(&mut self.late_answer_reported) {
            // Already explained: another client answered first.
            Ok(())
        } else if self.outbox.refused() {
            self.show_error(&format!("message not sent: {message}"))
        } else {
            self.show_error(message)
        }
    }

    pub(super) fn permission_resolved(
        &mut self,
        p: &pb::PermissionResolved,
    ) -> Result<(), CliError> {
        if let Some(ui) = &self.ui {
            ui.withdraw(&p.request_id);
        }
        if self
            .prompt
            .as_ref()
            .is_some_and(|q| q.request.request_id == p.request_id)
        {
            self.prompt = None;
        }
        let by_other = !p.client_id.is_empty() && p.client_id != self.own_client_id;
        let mine = self.answered.take_if(|(id, _)| *id == p.request_id);
        if let Some((_, decision)) = mine
            && by_other
        {
            let who = if p.client_name.is_empty() {
                &p.client_id
            } else {
                &p.client_name
            };
            self.show_error(&format!(
                "your answer \"{}\" came too late: {who} answered first",
                decision.label()
            ))?;
            self.late_answer_reported = true;
        }
        Ok(())
    }

    async fn send_answer(
        &mut self,
        request_id: String,
        decision: Decision,
        feedback: Option<String>,
        project: bool,
    ) {
        let feedback = feedback.unwrap_or_default();
        if decision == Decision::DenyAndStop && !feedback.trim().is_empty() {
            // The feedback comes back as the next user message and starts a turn.
            self.feedback_pending = true;
            self.render.note_sent(&feedback);
        }
        self.answered = Some((request_id.clone(), decision));
        self.prompt = None;
        self.send_frame(Frame::Answer(pb::AnswerPermissionFrame {
            request_id,
            decision: decision.to_proto() as i32,
            feedback,
            scope: if project {
                pb::RuleScope::Project as i32
            } else {
                pb::RuleScope::Unspecified as i32
            },
            client_request_id: crate::commands::request_id(),
            plan_answer: None,
        }))
        .await;
    }

    /// Answers the pending plan approval request with a key's meaning.
    async fn send_plan_answer(&mut self, request_id: String, key: PlanKey) {
        self.prompt = None;
        let answer = match key {
            PlanKey::Approve { edits } => pb::plan_answer::Answer::Approve(pb::PlanApprove {
                mode: if edits {
                    pb::PermissionMode::AcceptEdits
                } else {
                    pb::PermissionMode::Default
                } as i32,
            }),
            PlanKey::Reject { feedback } => pb::plan_answer::Answer::Reject(pb::PlanReject {
                feedback: feedback.unwrap_or_default(),
            }),
        };
        self.send_frame(Frame::Answer(pb::AnswerPermissionFrame {
            request_id,
            client_request_id: crate::commands::request_id(),
            plan_answer: Some(pb::PlanAnswer {
                answer: Some(answer),
            }),
            ..Default::default()
        }))
        .await;
    }

    /// A line typed while a permission request or a plan approval waits
    /// for this person: its answer (or the feedback of a refusal).
    pub(super) async fn answer_line(&mut self, line: &str) -> Result<(), CliError> {
        let Some(prompt) = &mut self.prompt else {
            return Ok(());
        };
        let id = prompt.request.request_id.clone();
        if prompt.request.plan.is_some() {
            if prompt.wants_feedback {
                let feedback = Some(line.trim().to_string()).filter(|f| !f.is_empty());
                self.send_plan_answer(id, PlanKey::Reject { feedback })
                    .await;
                return Ok(());
            }
            match parse_plan_key(line) {
                Err(why) => self.show_error(&why)?,
                Ok(PlanKey::Reject { feedback: None }) => {
                    prompt.wants_feedback = true;
                    self.note("what should the plan do differently? (Enter to just reject it)")?;
                }
                Ok(key) => self.send_plan_answer(id, key).await,
            }
            return Ok(());
        }
        if prompt.wants_feedback {
            let feedback = Some(line.trim().to_string()).filter(|f| !f.is_empty());
            self.send_answer(id, Decision::DenyAndStop, feedback, false)
                .await;
            return Ok(());
        }
        match parse_typed_answer(line, &prompt.offered) {
            Err(why) => self.show_error(&why)?,
            Ok(TypedAnswer {
                decision: Decision::DenyAndStop,
                feedback: None,
                ..
            }) => {
                prompt.wants_feedback = true;
                if let Some(ui) = &self.ui {
                    // The next line typed is the feedback.
                    ui.withdraw(&id);
                }
                self.note("what should the agent do instead? (Enter for nothing)")?;
            }
            Ok(answer) => {
                self.send_answer(id, answer.decision, answer.feedback, answer.project)
                    .await;
            }
        }
        Ok(())
    }
}
