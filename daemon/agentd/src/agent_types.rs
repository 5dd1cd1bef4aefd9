//! Custom sub-agent types (issue 42 point 6; README "Custom sub-agents"):
//! where their files are, whether they may be used, and a cache of what
//! they say. The core reads a file's text (`agentd_core::agent_types`).
//!
//! A type comes from `.agents/agents/*.md` of the project (the nearest
//! `.agents/agents` at or above the working directory) or from the
//! user's config directory (`<config dir>/agents/*.md`). Project files
//! follow the trust rule of project hooks: the project must be at or
//! under a directory the user trusted (`agent trust DIR`), and each file
//! must be as it was pinned then (same bytes, same owner), because a type
//! is instructions and tools a cloned repository would otherwise give the
//! model. On a name clash the project's type wins. Files are read again
//! only when their size or modification time changed: a listing costs a
//! directory read and a `stat` per file.

use crate::store::TrustRecord;
use agentd_core::ToolSpec;
use agentd_core::agent_types::{self, AgentType, Parsed};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

/// Where a project's types live, below its root.
const PROJECT_DIR: &str = ".agents/agents";
/// Where the user's types live, below the config directory.
const USER_DIR: &str = "agents";
/// A type file larger than this is refused.
const MAX_FILE_BYTES: u64 = 64 * 1024;

/// Whether `path` is a project type file (pinned by `agent trust`).
pub(crate) fn is_project_file(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "md")
        && path.parent().is_some_and(|d| d.ends_with(PROJECT_DIR))
}

/// Where a type was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    Project,
    User,
}

impl Origin {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Origin::Project => "project",
            Origin::User => "user",
        }
    }
}

/// One type file as listed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Listed {
    pub path: PathBuf,
    pub origin: Origin,
    /// The type, or why the file gives none (unreadable, not trusted as
    /// it is, not a type).
    pub agent: Result<AgentType, String>,
    /// Its tools as the daemon calls them (`None`: the parent's).
    pub tools: Option<Vec<String>>,
    /// What is wrong but does not stop it: keys and tools left out, and
    /// for one not used, why (another of the same name wins).
    pub problems: Vec<String>,
    /// Whether spawning by its name uses it.
    pub usable: bool,
}

/// The types a conversation in one directory can use, and notes about
/// what was not looked at (an untrusted project).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Listing {
    pub types: Vec<Listed>,
    pub notes: Vec<String>,
}

impl Listing {
    /// The type spawning by `name` uses.
    pub(crate) fn find(&self, name: &str) -> Option<(&Listed, &AgentType)> {
        self.usable().find(|(_, a)| a.name == name)
    }

    /// The types that can be used, project first.
    pub(crate) fn usable(&self) -> impl Iterator<Item = (&Listed, &AgentType)> {
        self.types
            .iter()
            .filter(|l| l.usable)
            .filter_map(|l| l.agent.as_ref().ok().map(|a| (l, a)))
    }

    /// The names of the types that can be used, for messages.
    pub(crate) fn names(&self) -> String {
        let names: Vec<&str> = self.usable().map(|(_, a)| a.name.as_str()).collect();
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    }

    /// The spawn tool's spec listing these types; `None` when there are
    /// none (the plain spec serves).
    pub(crate) fn spawn_spec(&self) -> Option<ToolSpec> {
        let types: Vec<(String, String)> = self
            .usable()
            .map(|(_, a)| (a.name.clone(), a.description.clone()))
            .collect();
        (!types.is_empty()).then(|| agentd_core::tools::spawn_agents_spec_with(&types))
    }
}

/// A file as last read.
#[derive(Debug, Clone)]
struct Cached {
    modified: Option<SystemTime>,
    len: u64,
    uid: u32,
    sha256: String,
    parsed: Result<Parsed, String>,
}

/// The daemon's cache of type files, by path.
#[derive(Debug, Default)]
pub(crate) struct Catalog {
    files: Mutex<HashMap<PathBuf, Cached>>,
}

impl Catalog {
    /// The types of a conversation in `cwd`: its trusted project's, then
    /// the user's (in `user_dir`, the config directory).
    pub(crate) fn list(
        &self,
        user_dir: Option<&Path>,
        cwd: &Path,
        trusted: &[(PathBuf, TrustRecord)],
    ) -> Listing {
        let mut listing = Listing::default();
        if let Some((project, dir)) = project_dir(cwd) {
            let covering: Vec<&TrustRecord> = trusted
                .iter()
                .filter(|(d, _)| project.starts_with(d))
                .map(|(_, t)| t)
                .collect();
            if covering.is_empty() {
                listing.notes.push(format!(
                    "project agent types in {} are not loaded: the project is not trusted; read them, then run `agent trust {}`",
                    dir.display(),
                    project.display()
                ));
            } else {
                for path in md_files(&dir) {
                    let mut listed = self.read(&path, Origin::Project);
                    if let Ok(agent) = &listed.agent
                        && let Err(why) = self.pinned(&path, covering.iter().copied())
                    {
                        listed.agent = Err(format!(
                            "type {} is not loaded: {why}; read it, then run `agent trust {}` to trust it as it is now",
                            agent.name,
                            project.display()
                        ));
                    }
                    listing.types.push(listed);
                }
            }
        }
        if let Some(user) = user_dir {
            for path in md_files(&user.join(USER_DIR)) {
                listing.types.push(self.read(&path, Origin::User));
            }
        }
        settle_names(&mut listing.types);
        listing
    }

    /// `path` read (again only when it changed) as a listed type.
    fn read(&self, path: &Path, origin: Origin) -> Listed {
        let cached = self.cached(path);
        let (agent, mut problems) = match cached {
            Ok(Cached { parsed: Ok(p), .. }) => (Ok(p.agent), p.warnings),
            Ok(Cached { parsed: Err(e), .. }) => (Err(e), Vec::new()),
            Err(e) => (Err(format!("{}: {e}", path.display())), Vec::new()),
        };
        let tools = match &agent {
            Ok(AgentType {
                tools: Some(listed),
                ..
            }) => {
                let (names, left_out) = agent_types::tool_names(listed);
                problems.extend(left_out);
                Some(names)
            }
            _ => None,
        };
        Listed {
            path: path.to_path_buf(),
            origin,
            usable: agent.is_ok(),
            agent,
            tools,
            problems,
        }
    }

    /// What `path` holds, read again when its size or modification time
    /// changed.
    fn cached(&self, path: &Path) -> Result<Cached, String> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
        let modified = meta.modified().ok();
        let mut files = self
            .files
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(c) = files.get(path)
            && c.modified == modified
            && modified.is_some()
            && c.len == meta.len()
            && c.uid == meta.uid()
        {
            return Ok(c.clone());
        }
        if meta.len() > MAX_FILE_BYTES {
            return Err(format!(
                "it is {} bytes; a type file may have at most {MAX_FILE_BYTES}",
                meta.len()
            ));
        }
        let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
        let name = path.display().to_string();
        let parsed = match std::str::from_utf8(&bytes) {
            Ok(text) => agent_types::parse(&name, text),
            Err(_) => Err(format!("{name}: it is not UTF-8")),
        };
        let c = Cached {
            modified,
            len: bytes.len() as u64,
            uid: meta.uid(),
            sha256: crate::hooks::sha256_hex(&bytes),
            parsed,
        };
        files.insert(path.to_path_buf(), c.clone());
        Ok(c)
    }

    /// Whether `path`, as last read, is as one of `trusts` pinned it.
    fn pinned<'a>(
        &self,
        path: &Path,
        trusts: impl Iterator<Item = &'a TrustRecord>,
    ) -> Result<(), String> {
        let c = self.cached(path)?;
        crate::hooks::check_pin(path, &c.sha256, c.uid, trusts)
    }
}

/// The nearest project root at or above `cwd` (canonical) with a types
/// directory, and that directory.
fn project_dir(cwd: &Path) -> Option<(PathBuf, PathBuf)> {
    let cwd = std::fs::canonicalize(cwd).ok()?;
    cwd.ancestors()
        .map(|d| (d.to_path_buf(), d.join(PROJECT_DIR)))
        .find(|(_, dir)| dir.is_dir())
}

/// The `*.md` files of `dir`, by name.
fn md_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md") && p.is_file())
        .collect();
    files.sort();
    files
}

/// One type per name: the first listed (the project's before the user's,
/// then by file name) is used; the others say which one wins.
fn settle_names(types: &mut [Listed]) {
    let mut taken: HashMap<String, PathBuf> = HashMap::new();
    for listed in types.iter_mut() {
        let Ok(agent) = &listed.agent else {
            continue;
        };
        if let Some(winner) = taken.get(&agent.name) {
            listed.usable = false;
            listed.problems.push(format!(
                "not used: {} defines `{}` too and wins",
                winner.display(),
                agent.name
            ));
        } else {
            taken.insert(agent.name.clone(), listed.path.clone());
        }
    }
}

#[cfg(test)]
mod tests;
