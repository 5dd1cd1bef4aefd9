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

/// The spec of `update_plan`.
pub fn update_plan_spec() -> crate::tools::ToolSpec {
    crate::tools::ToolSpec {
        name: crate::tools::Tool::UpdatePlan.name().to_string(),
        description: "Report progress on the approved plan: mark a step in_progress when you start it, then completed or failed (with a note). A step starts only after its dependencies completed; steps that depend on a failed step are skipped.".to_string(),
        input_schema: serde_json::json!({
            "type": "object",
            "required": ["steps"],
            "properties": {
                "steps": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["id", "status"],
                        "properties": {
                            "id": {"type": "string"},
                            "status": {"type": "string", "enum": ["in_progress", "completed", "failed", "skipped"]},
                            "note": {"type": "string", "description": "Why it failed or was skipped"}
                        }
                    }
                }
            }
        }),
    }
}
