//! A client's environment in, where a conversation's came from out.

use crate::environment::{Origin, check_name};
use agent_proto::v1 as pb;
use std::collections::BTreeMap;
use tonic::Status;

/// The most variables an environment may have.
const MAX_VARS: usize = 10_000;
/// The most bytes its names and values may have together.
const MAX_BYTES: usize = 1024 * 1024;

/// A client's environment, checked: names a process can be given, values
/// without NUL, within [`MAX_VARS`] and [`MAX_BYTES`].
pub(crate) fn environment_from(env: pb::Environment) -> Result<BTreeMap<String, String>, Status> {
    if env.vars.len() > MAX_VARS {
        return Err(Status::invalid_argument(format!(
            "the environment has {} variables; at most {MAX_VARS}",
            env.vars.len()
        )));
    }
    let bytes: usize = env.vars.iter().map(|(k, v)| k.len() + v.len()).sum();
    if bytes > MAX_BYTES {
        return Err(Status::invalid_argument(format!(
            "the environment has {bytes} bytes; at most {MAX_BYTES}"
        )));
    }
    for (name, value) in &env.vars {
        check_name(name).map_err(|e| Status::invalid_argument(format!("environment: {e}")))?;
        if value.contains('\0') {
            return Err(Status::invalid_argument(format!(
                "environment: the value of {name} has a NUL byte"
            )));
        }
    }
    Ok(env.vars.into_iter().collect())
}

pub(crate) fn environment_origin(origin: Origin) -> pb::EnvironmentOrigin {
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    pb::EnvironmentOrigin {
        set_at_ms: origin.set_at_ms,
        variables: count(origin.variables),
        held: count(origin.held),
        missing: count(origin.missing),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> pb::Environment {
        pb::Environment {
            vars: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn names_a_process_cannot_take_and_nul_values_are_refused() {
        assert_eq!(environment_from(env(&[("A", "1")])).unwrap().len(), 1);
        for bad in [
            env(&[("A=B", "1")]),
            env(&[("", "1")]),
            env(&[("A", "x\0y")]),
        ] {
            let status = environment_from(bad).unwrap_err();
            assert_eq!(status.code(), tonic::Code::InvalidArgument);
            assert!(status.message().starts_with("environment: "), "{status:?}");
        }
        let big = "x".repeat(MAX_BYTES);
        let status = environment_from(env(&[("A", &big)])).unwrap_err();
        assert!(status.message().contains("at most"), "{status:?}");
    }
}
