//! The specs of the plan tools (`propose_plan`, `update_plan`) the model
//! is offered.

/// The spec of `propose_plan`.
pub fn propose_plan_spec() -> crate::tools::ToolSpec {
    crate::tools::ToolSpec {
        name: crate::tools::Tool::ProposePlan.name().to_string(),
        description: "Propose a step-by-step plan for the user to approve before you change anything. The user approves it (you then carry it out, reporting progress with update_plan), rejects it with feedback (revise it and propose again), or edits the steps (carry out the steps you are told were approved).".to_string(),
        input_schema: serde_json::json!({
            "type": "object",
            "required": ["intent", "risk", "steps"],
            "properties": {
                "intent": {"type": "string", "description": "What the plan achieves, in one line"},
                "risk": {"type": "string", "enum": ["low", "medium", "high"]},
                "estimated_seconds": {"type": "integer", "description": "Your estimate for the whole plan"},
                "steps": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["title", "kind"],
                        "properties": {
                            "id": {"type": "string", "description": "Unique; default: its position, 1-based"},
                            "title": {"type": "string"},
                            "kind": {"type": "string", "enum": ["analyze", "edit", "validate", "test"]},
                            "files": {"type": "array", "items": {"type": "string"}},
                            "depends_on": {"type": "array", "items": {"type": "string"}, "description": "Ids of earlier steps that must complete first"},
                            "estimated_seconds": {"type": "integer"}
                        }
                    }
                }
            }
        }),
    }
}

/// The spec of `update_plan`: the approved plan's progress, or the todo
/// list when no approved plan is under way (one vocabulary, two uses).
pub fn update_plan_spec() -> crate::tools::ToolSpec {
    crate::tools::ToolSpec {
        name: crate::tools::Tool::UpdatePlan.name().to_string(),
        description: "Keep your todo list, or report progress on an approved plan.\n\
Todo list (no approved plan, or every step of it done): for a task of several steps, send the whole list each time as `steps`, each {title, status} with status pending, in_progress or completed; keep exactly one item in_progress while you work and mark items completed as soon as they are done. The user sees the list. Skip it for simple one-step tasks.\n\
Approved plan: mark a step in_progress when you start it (by its id), then completed or failed (with a note). A step starts only after its dependencies completed; steps that depend on a failed step are skipped.".to_string(),
        input_schema: serde_json::json!({
            "type": "object",
            "required": ["steps"],
            "properties": {
                "steps": {
                    "type": "array",
                    "description": "Todo list: every item, in order. Approved plan: the steps whose status changed.",
                    "items": {
                        "type": "object",
                        "required": ["status"],
                        "properties": {
                            "id": {"type": "string", "description": "The plan step's id (optional for a todo item)"},
                            "title": {"type": "string", "description": "A todo item's text"},
                            "status": {"type": "string", "enum": ["pending", "in_progress", "completed", "failed", "skipped"]},
                            "note": {"type": "string", "description": "Why a plan step failed or was skipped"}
                        }
                    }
                }
            }
        }),
    }
}
