//! Command-line arguments turned into what the daemon wants: absolute
//! directories, images read from files, `--mcp` servers. Shared by `run`,
//! `send`, `set` and the interactive session.

use std::path::{Path, PathBuf};

use agent_proto::v1 as pb;

use crate::error::CliError;

/// `dir` made absolute (symlinks resolved), checked to be a directory,
/// as the daemon wants it; `what` names it in errors.
pub(crate) fn absolute_dir(dir: &Path, what: &str) -> Result<String, CliError> {
    let canonical = dir
        .canonicalize()
        .map_err(|e| CliError::io(format!("{what} {}", dir.display()), e))?;
    if !canonical.is_dir() {
        return Err(CliError::Input(format!(
            "{} is not a directory",
            canonical.display()
        )));
    }
    canonical
        .to_str()
        .map(str::to_string)
        .ok_or_else(|| CliError::Input(format!("{what} {} is not UTF-8", canonical.display())))
}

/// A directory as a person typed it in the session (`~/src`, `../lib`):
/// absolute and canonical, from the current directory.
pub(crate) fn typed_dir(typed: &str) -> Result<String, CliError> {
    let typed = typed.trim();
    let path = match typed.strip_prefix("~/") {
        Some(rest) => match std::env::var_os("HOME") {
            Some(home) => PathBuf::from(home).join(rest),
            None => PathBuf::from(typed),
        },
        None => PathBuf::from(typed),
    };
    absolute_dir(&path, "directory")
}

/// The images named on the command line, read for sending. Whether each
/// is an image the daemon takes is the daemon's to say (by content, with
/// the limits of its config); here only a file that cannot be read is an
/// error.
pub fn read_images(paths: &[std::path::PathBuf]) -> Result<Vec<pb::ImageUpload>, CliError> {
    paths
        .iter()
        .map(|path| {
            let data = std::fs::read(path).map_err(|e| {
                CliError::Input(format!("cannot read image {}: {e}", path.display()))
            })?;
            Ok(pb::ImageUpload {
                data,
                name: path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| path.display().to_string()),
            })
        })
        .collect()
}

/// `--mcp NAME=COMMAND [ARGS…]` (split as a shell would) or `--mcp NAME=URL`.
pub(crate) fn mcp_server_arg(arg: &str) -> Result<pb::McpServer, CliError> {
    let bad = |why: &str| CliError::Input(format!("--mcp {arg:?}: {why}"));
    let Some((name, rest)) = arg.split_once('=') else {
        return Err(bad("expected NAME=COMMAND or NAME=URL"));
    };
    let name = name.trim();
    let rest = rest.trim();
    if name.is_empty() || rest.is_empty() {
        return Err(bad("expected NAME=COMMAND or NAME=URL"));
    }
    if rest.starts_with("http://") || rest.starts_with("https://") {
        return Ok(pb::McpServer {
            name: name.to_string(),
            url: rest.to_string(),
            ..Default::default()
        });
    }
    let words = shlex::split(rest).ok_or_else(|| bad("unbalanced quotes in the command"))?;
    let Some((command, args)) = words.split_first() else {
        return Err(bad("empty command"));
    };
    Ok(pb::McpServer {
        name: name.to_string(),
        command: command.clone(),
        args: args.to_vec(),
        ..Default::default()
    })
}
