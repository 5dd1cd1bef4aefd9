//! `[shell]` in the config file: the shell commands run in and which of a
//! conversation's environment variables they get, in the manner of Codex's
//! `shell_environment_policy`.
//!
//! ```toml
//! [shell]
//! program = "zsh"            # else the conversation's $SHELL; bash or zsh, bash otherwise
//! [shell.environment]
//! inherit = "all"            # "all" | "core" | "none"
//! exclude = ["*KEY*", "*SECRET*", "*TOKEN*"]   # never written to disk (see below)
//! include_only = []          # when given, only these reach commands
//! set = { CI = "1" }         # added to every command's environment
//! ```
//!
//! `exclude` does not take a variable away from commands: it keeps it off
//! the disk. An excluded variable is held in the daemon's memory and
//! reaches the conversation's commands until the daemon stops; after a
//! restart it is missing until a client sends the environment again
//! (`/env`, `agent set ID --env-from-here`). To keep a variable from
//! commands altogether, leave it out with `include_only` or `inherit`.

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};

/// The `[shell]` table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct ShellSection {
    /// The shell commands run in (a name or a path); its file name must be
    /// `bash` or `zsh`, anything else means bash. Unset: the conversation's
    /// `SHELL`.
    pub program: Option<String>,
    pub environment: EnvironmentSection,
}

/// The `[shell.environment]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct EnvironmentSection {
    pub inherit: Inherit,
    /// Globs (case-insensitive) of variables never written to disk.
    pub exclude: Vec<String>,
    /// Variables set for every command, over the conversation's.
    pub set: BTreeMap<String, String>,
    /// When not empty, only variables matching one of these globs are
    /// passed on (`set` is added after).
    pub include_only: Vec<String>,
}

impl Default for EnvironmentSection {
    fn default() -> Self {
        EnvironmentSection {
            inherit: Inherit::All,
            exclude: DEFAULT_EXCLUDE.iter().map(|s| s.to_string()).collect(),
            set: BTreeMap::new(),
            include_only: Vec::new(),
        }
    }
}

/// Which of the conversation's variables commands start from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Inherit {
    /// Every one.
    #[default]
    All,
    /// Only [`CORE`]: where things are, who the user is, the locale.
    Core,
    /// None: only `set` (and the daemon's fixed variables).
    None,
}

/// What `exclude` is when the config does not say.
const DEFAULT_EXCLUDE: [&str; 3] = ["*KEY*", "*SECRET*", "*TOKEN*"];

/// The variables `inherit = "core"` keeps (`LC_` is a prefix).
const CORE: [&str; 13] = [
    "HOME", "LOGNAME", "PATH", "SHELL", "USER", "USERNAME", "TMPDIR", "TEMP", "TMP", "LANG",
    "LANGUAGE", "TERM", "TZ",
];

/// `[shell]`, checked and compiled.
#[derive(Debug, Clone)]
pub(crate) struct Policy {
    pub(crate) program: Option<String>,
    inherit: Inherit,
    exclude: GlobSet,
    include_only: Option<GlobSet>,
    set: Vec<(OsString, OsString)>,
}

impl Default for Policy {
    fn default() -> Self {
        // The defaults are valid globs.
        ShellSection::default().policy().unwrap_or_else(|_| Policy {
            program: None,
            inherit: Inherit::All,
            exclude: GlobSet::empty(),
            include_only: None,
            set: Vec::new(),
        })
    }
}

impl ShellSection {
    /// The policy, or what is wrong with the table.
    pub(crate) fn policy(&self) -> Result<Policy, String> {
        let env = &self.environment;
        for name in env.set.keys() {
            check_name(name).map_err(|e| format!("shell.environment.set: {e}"))?;
        }
        Ok(Policy {
            program: self.program.clone().filter(|p| !p.trim().is_empty()),
            inherit: env.inherit,
            exclude: globs(&env.exclude, "exclude")?,
            include_only: if env.include_only.is_empty() {
                None
            } else {
                Some(globs(&env.include_only, "include_only")?)
            },
            set: env
                .set
                .iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v)))
                .collect(),
        })
    }
}

impl Policy {
    /// Whether `name` is kept in memory only (`exclude`).
    pub(crate) fn is_held(&self, name: &str) -> bool {
        self.exclude.is_match(name)
    }

    /// Whether the policy leaves an environment as it is: then the
    /// daemon's own needs no copy.
    pub(crate) fn keeps_all(&self) -> bool {
        self.inherit == Inherit::All && self.include_only.is_none() && self.set.is_empty()
    }

    /// What commands start from, given the variables `base`: those
    /// `inherit` and `include_only` let through, then `set`.
    pub(crate) fn child_env(
        &self,
        base: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Vec<(OsString, OsString)> {
        let mut out: Vec<(OsString, OsString)> = base
            .into_iter()
            .filter(|(name, _)| self.inherits(name))
            .filter(|(name, _)| {
                self.include_only
                    .as_ref()
                    .is_none_or(|only| name.to_str().is_some_and(|n| only.is_match(n)))
            })
            .filter(|(name, _)| !self.set.iter().any(|(set, _)| set == name))
            .collect();
        out.extend(self.set.iter().cloned());
        out
    }

    fn inherits(&self, name: &OsStr) -> bool {
        match self.inherit {
            Inherit::All => true,
            Inherit::None => false,
            Inherit::Core => name
                .to_str()
                .is_some_and(|n| CORE.contains(&n) || n.starts_with("LC_")),
        }
    }
}

/// Refuses a variable name a process cannot be given: empty, or with `=`
/// or NUL in it.
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.contains(['=', '\0']) {
        return Err(format!("{name:?} is not a variable name"));
    }
    Ok(())
}

/// `patterns` as one case-insensitive set.
fn globs(patterns: &[String], key: &str) -> Result<GlobSet, String> {
    let mut set = GlobSetBuilder::new();
    for pattern in patterns {
        let glob = GlobBuilder::new(pattern)
            .case_insensitive(true)
            .build()
            .map_err(|e| format!("shell.environment.{key}: {pattern:?}: {e}"))?;
        set.add(glob);
    }
    set.build()
        .map_err(|e| format!("shell.environment.{key}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(toml_text: &str) -> Policy {
        toml::from_str::<ShellSection>(toml_text)
            .unwrap()
            .policy()
            .unwrap()
    }

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    fn names(env: &[(OsString, OsString)]) -> Vec<&str> {
        env.iter().map(|(k, _)| k.to_str().unwrap()).collect()
    }

    const BASE: [(&str, &str); 5] = [
        ("PATH", "/bin"),
        ("LC_ALL", "C"),
        ("FOO", "bar"),
        ("GITHUB_TOKEN", "t"),
        ("CI", "0"),
    ];

    #[test]
    fn by_default_everything_passes_and_secret_looking_names_are_held() {
        let p = policy("");
        assert!(p.keeps_all());
        assert_eq!(p.child_env(vars(&BASE)), vars(&BASE));
        for held in ["GITHUB_TOKEN", "aws_secret_access_key", "MY_KEY"] {
            assert!(p.is_held(held), "{held}");
        }
        assert!(!p.is_held("PATH"));
    }

    #[test]
    fn inherit_include_only_and_set_each_narrow_or_add() {
        let core = policy("[environment]\ninherit = \"core\"");
        assert_eq!(names(&core.child_env(vars(&BASE))), ["PATH", "LC_ALL"]);
        let none = policy("[environment]\ninherit = \"none\"\nset = { CI = \"1\" }");
        assert_eq!(none.child_env(vars(&BASE)), vars(&[("CI", "1")]));
        let only = policy("[environment]\ninclude_only = [\"path\", \"F*\"]\nset = { CI = \"1\" }");
        assert!(!only.keeps_all());
        assert_eq!(
            only.child_env(vars(&BASE)),
            vars(&[("PATH", "/bin"), ("FOO", "bar"), ("CI", "1")])
        );
        let none_held = policy("[environment]\nexclude = []");
        assert!(!none_held.is_held("GITHUB_TOKEN"));
    }

    #[test]
    fn bad_globs_and_names_are_refused_with_the_key() {
        let bad = toml::from_str::<ShellSection>("[environment]\nexclude = [\"[\"]").unwrap();
        assert!(
            bad.policy()
                .unwrap_err()
                .contains("shell.environment.exclude")
        );
        let bad =
            toml::from_str::<ShellSection>("[environment]\nset = { \"A=B\" = \"1\" }").unwrap();
        assert!(bad.policy().unwrap_err().contains("shell.environment.set"));
        assert!(toml::from_str::<ShellSection>("[environment]\ninherit = \"some\"").is_err());
    }
}
