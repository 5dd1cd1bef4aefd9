//! `agent trust` and `agent untrust`: which projects' hooks run and
//! sub-agent types are used.

use std::path::PathBuf;

use agent_proto::v1 as pb;

use super::{Ctx, print_json, print_line};
use crate::error::{CliError, Exit};
use crate::io::Io;

/// `agent trust [DIR]`, `agent trust --list`, `agent untrust [DIR]`: `dir`
/// `None` lists; `Some(None)` is the current directory.
pub(super) async fn trust(
    ctx: &Ctx,
    dir: Option<Option<PathBuf>>,
    trusted: bool,
    io: &mut Io,
) -> Result<Exit, CliError> {
    let mut client = ctx.client().await?;
    let (response, path) = match dir {
        None => (
            client
                .list_trusted_directories(pb::ListTrustedDirectoriesRequest {})
                .await
                .map_err(CliError::status)?
                .into_inner(),
            None,
        ),
        Some(dir) => {
            let dir = dir.unwrap_or_else(|| PathBuf::from("."));
            // The daemon runs elsewhere: the path goes absolute.
            let path = std::path::absolute(&dir)
                .map_err(|e| CliError::io("reading the current directory", e))?;
            let path = std::fs::canonicalize(&path).unwrap_or(path);
            let response = client
                .set_directory_trust(pb::SetDirectoryTrustRequest {
                    path: path.display().to_string(),
                    trusted,
                })
                .await
                .map_err(CliError::status)?
                .into_inner();
            (response, Some(path))
        }
    };
    if ctx.json {
        let value = serde_json::json!({"paths": response.paths, "changed": response.changed});
        print_json(io, &value)?;
        return Ok(Exit::Ok);
    }
    match path {
        None if response.paths.is_empty() => print_line(io, "no trusted directories")?,
        None => {
            for p in &response.paths {
                print_line(io, p)?;
            }
        }
        Some(path) => {
            let what = match (trusted, response.changed) {
                (true, true) => {
                    "trusted: its projects' hooks run and their sub-agent types are used"
                }
                (true, false) => "already trusted",
                (false, true) => {
                    "no longer trusted: its projects' hooks do not run nor their sub-agent types"
                }
                (false, false) => "was not trusted",
            };
            print_line(io, &format!("{}: {what}", path.display()))?;
        }
    }
    Ok(Exit::Ok)
}
