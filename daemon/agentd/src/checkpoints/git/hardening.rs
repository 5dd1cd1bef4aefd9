//! What keeps a repository's own programs from running when the daemon
//! runs git in it: every command's environment and settings, and the
//! filter drivers turned off for commands that would start one.

use std::path::Path;
use std::process::Stdio;

use tokio::process::Command;

/// Variables that would point git elsewhere than the directory it runs in,
/// or give it settings of the daemon's environment over ours.
const GIT_ENV: [&str; 8] = [
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_CEILING_DIRECTORIES",
];

/// Settings given to every git the snapshot runs, over whatever the
/// repository's config says: a repository must not make the daemon run
/// its programs. `core.fsmonitor` names a program `git add` (and any
/// command that reads the index) would start; no hook runs for the
/// commands used here, but `core.hooksPath` points nowhere in case one
/// ever does. The filter drivers are the other way in: see
/// [`FilterDrivers`]. Nothing else the commands used here read from the
/// config names a program (`core.untrackedCache` and `core.preloadIndex`
/// only change how git itself reads the work tree; `core.sshCommand`,
/// `diff.external`, `core.pager` belong to commands not run here).
pub(super) const HARDENING: [(&str, &str); 2] =
    [("core.fsmonitor", "false"), ("core.hooksPath", "/dev/null")];

/// The filter drivers (`filter.<name>.clean`, `.smudge`, `.process`) that
/// git's config defines for a repository, in any scope (system, global,
/// the repository's own, included files). `.gitattributes` in the work
/// tree or `.git/info/attributes` can apply any of them to any file, and
/// `git add` would run its `clean` command, `cat-file --filters` its
/// `smudge`. Each one found is overridden with an empty command (git then
/// stores and returns the bytes as they are) and `required = false`,
/// through `GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n`, which take precedence
/// over every config file and, unlike `-c name=value`, need no parsing of
/// a name that may itself contain `=`. A driver that is not defined in
/// the config cannot run, so overriding every defined one stops all of
/// them. What a rewind restores is then exactly the bytes that were in
/// the work tree.
///
/// Only a config changed between the listing and the `git add` (by a
/// command running in the background in that repository at that very
/// moment) could slip a new driver in.
#[derive(Debug, Default)]
pub(super) struct FilterDrivers(Vec<String>);

impl FilterDrivers {
    /// Lists the drivers git's config defines for the repository `dir`.
    /// Reading the config runs no program.
    pub(super) async fn of(dir: &Path) -> Result<FilterDrivers, String> {
        let mut cmd = git(dir);
        cmd.args(["config", "-z", "--name-only", "--get-regexp", r"^filter\."]);
        let out = cmd
            .output()
            .await
            .map_err(|e| format!("git config: cannot run git: {e}"))?;
        // 1: no such variable, nothing to override.
        match out.status.code() {
            Some(0) => {}
            Some(1) => return Ok(FilterDrivers::default()),
            _ => {
                return Err(format!(
                    "git config failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
        let mut names: Vec<String> = out
            .stdout
            .split(|&b| b == 0)
            .filter_map(|key| {
                let key = std::str::from_utf8(key).ok()?;
                let (name, _variable) = key.strip_prefix("filter.")?.rsplit_once('.')?;
                Some(name.to_string())
            })
            .collect();
        names.sort();
        names.dedup();
        Ok(FilterDrivers(names))
    }

    /// Makes `cmd` run with every listed driver disabled and with
    /// [`HARDENING`].
    pub(super) fn disable_in(&self, cmd: &mut Command) {
        let mut settings: Vec<(String, &str)> = HARDENING
            .iter()
            .map(|(key, value)| (key.to_string(), *value))
            .collect();
        for name in &self.0 {
            for (variable, value) in [
                ("clean", ""),
                ("smudge", ""),
                ("process", ""),
                ("required", "false"),
            ] {
                settings.push((format!("filter.{name}.{variable}"), value));
            }
        }
        cmd.env("GIT_CONFIG_COUNT", settings.len().to_string());
        for (i, (key, value)) in settings.into_iter().enumerate() {
            cmd.env(format!("GIT_CONFIG_KEY_{i}"), key)
                .env(format!("GIT_CONFIG_VALUE_{i}"), value);
        }
    }
}

/// `git -C dir`, with nothing to answer prompts, the daemon's credentials
/// withheld and [`HARDENING`] applied.
pub(super) fn git(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("-C").arg(dir);
    for (key, value) in HARDENING {
        cmd.arg("-c").arg(format!("{key}={value}"));
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("GIT_TERMINAL_PROMPT", "0")
        .kill_on_drop(true);
    for name in GIT_ENV {
        cmd.env_remove(name);
    }
    crate::process::withhold_secrets(cmd.as_std_mut());
    cmd
}

/// [`git`] with every filter driver of the repository disabled: for a
/// command that would run one (`cat-file --filters`).
pub(super) async fn git_without_filters(dir: &Path) -> Result<Command, String> {
    let drivers = FilterDrivers::of(dir).await?;
    let mut cmd = git(dir);
    drivers.disable_in(&mut cmd);
    Ok(cmd)
}
