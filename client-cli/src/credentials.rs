//! The daemon's API key on disk: `agent login` and `agent logout` write the
//! credentials file the daemon reads for every model request, and
//! autostart decides which of the terminal's keys a new daemon may inherit.
//!
//! The file is `credentials.toml` in the daemon's config directory
//! (`$XDG_CONFIG_HOME/agentd`, else `~/.config/agentd`), one table per
//! provider (`[anthropic] api_key = "…"`). When a daemon answers, its own
//! idea of the path (`GetDaemonInfo`) wins over this process's environment.
//! The file is only ever replaced whole: a temporary file created with mode
//! 0600 in the same directory, written, synced, then renamed over it, so it
//! is never readable by others and never half-written, not even briefly.

use std::fs::{DirBuilder, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::CliError;

/// The credentials file's name, in the config directory.
pub const CREDENTIALS_FILE: &str = "credentials.toml";

/// The providers the daemon has keys for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Provider {
    /// Anthropic's Messages API (`ANTHROPIC_API_KEY`)
    Anthropic,
    /// An OpenAI-compatible server (`OPENAI_API_KEY`)
    Openai,
}

impl Provider {
    /// The table of the credentials and config files.
    pub fn table(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic",
            Provider::Openai => "openai",
        }
    }

    /// The environment variable the daemon reads last.
    pub fn variable(self) -> &'static str {
        match self {
            Provider::Anthropic => "ANTHROPIC_API_KEY",
            Provider::Openai => "OPENAI_API_KEY",
        }
    }

    /// The provider's own API, the daemon's base URL when none is set.
    pub(crate) fn official_url(self) -> &'static str {
        match self {
            Provider::Anthropic => "https://api.anthropic.com",
            Provider::Openai => "https://api.openai.com/v1",
        }
    }

    /// How the keys of the provider's own API begin.
    pub(crate) fn key_prefix(self) -> &'static str {
        match self {
            Provider::Anthropic => "sk-ant-",
            Provider::Openai => "sk-",
        }
    }

    /// The provider a daemon reports (`GetDaemonInfo.provider`).
    pub fn from_name(name: &str) -> Option<Provider> {
        match name {
            "anthropic" => Some(Provider::Anthropic),
            "openai" => Some(Provider::Openai),
            _ => None,
        }
    }
}

/// The daemon's config directory by the rule the daemon follows:
/// `$XDG_CONFIG_HOME/agentd`, else `$HOME/.config/agentd`.
pub fn config_dir(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(dir) = env("XDG_CONFIG_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join("agentd"));
    }
    env("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".config/agentd"))
}

/// The config file a daemon started from this environment reads.
pub fn config_file(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    match env("AGENTD_CONFIG").filter(|c| !c.is_empty()) {
        Some(path) => Some(PathBuf::from(path)),
        None => config_dir(env).map(|d| d.join("config.toml")),
    }
}

/// The credentials file of a daemon started from this environment.
pub fn credentials_file(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    config_dir(env).map(|d| d.join(CREDENTIALS_FILE))
}

/// The shortest and longest key `agent login` takes: shorter is a paste
/// gone wrong, longer is a file pasted (gateway tokens run to a few
/// hundred characters; Anthropic's and OpenAI's keys are 100 to 200).
const KEY_LENGTH: std::ops::RangeInclusive<usize> = 8..=2048;

/// Where the key's provider sends requests, as far as `agent login`
/// knows it: the provider's own API, another server speaking its protocol
/// (a gateway, vLLM, OpenRouter, …), or not known (an older daemon).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    Official,
    Other,
    Unknown,
}

impl Endpoint {
    /// What a base URL is for `provider`; an empty one is not known.
    pub(crate) fn of(base_url: &str, provider: Provider) -> Endpoint {
        let url = base_url.trim_end_matches('/');
        if url.is_empty() {
            Endpoint::Unknown
        } else if url == provider.official_url().trim_end_matches('/') {
            Endpoint::Official
        } else {
            Endpoint::Other
        }
    }
}

/// A key as typed or piped, checked for shape before it is stored:
/// surrounding whitespace dropped; empty, with whitespace or control
/// characters inside, or of no sane length, refused (a paste gone wrong).
/// Keys for the provider's own API must carry its prefix (`sk-ant-`,
/// `sk-`); keys for other servers speaking its protocol may look like
/// anything. When the endpoint is not known, a wrong prefix is refused for
/// Anthropic and only warned about for OpenAI (its protocol is spoken by
/// many servers): the warning is returned. No message quotes the key.
pub(crate) fn check_key(
    raw: &str,
    provider: Provider,
    endpoint: Endpoint,
) -> Result<(String, Option<String>), CliError> {
    let key = raw.trim();
    if key.is_empty() {
        return Err(CliError::BadKey("no API key given".into()));
    }
    if key.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(CliError::BadKey(
            "the API key contains spaces or control characters; give it on one line".into(),
        ));
    }
    let length = key.chars().count();
    if !KEY_LENGTH.contains(&length) {
        return Err(CliError::BadKey(format!(
            "the API key is {length} characters long; a key is {} to {}",
            KEY_LENGTH.start(),
            KEY_LENGTH.end()
        )));
    }
    let prefix = provider.key_prefix();
    let refuse = match (endpoint, provider) {
        _ if key.starts_with(prefix) => return Ok((key.to_string(), None)),
        (Endpoint::Other, _) => return Ok((key.to_string(), None)),
        (Endpoint::Official, _) | (Endpoint::Unknown, Provider::Anthropic) => true,
        (Endpoint::Unknown, Provider::Openai) => false,
    };
    let what = format!(
        "{} keys start with `{prefix}` and this one does not",
        provider.table()
    );
    if refuse {
        Err(CliError::BadKey(format!(
            "{what}; nothing stored (is it another provider's key? `--provider` picks the provider)"
        )))
    } else {
        Ok((
            key.to_string(),
            Some(format!(
                "{what}: stored anyway, as servers other than OpenAI's have keys of their own"
            )),
        ))
    }
}

/// Stores `key` for `provider` in the credentials file at `path`, keeping
/// the other providers' keys. Creates the directory (0700) if needed.
pub fn store(path: &Path, provider: Provider, key: &str) -> Result<(), CliError> {
    let mut table = read_table(path)?;
    let mut section = toml::Table::new();
    section.insert("api_key".into(), toml::Value::String(key.to_string()));
    table.insert(provider.table().into(), toml::Value::Table(section));
    if let Some(dir) = path.parent() {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| CliError::io(format!("cannot create {}", dir.display()), e))?;
    }
    replace(path, &table)
}

/// Removes `provider`'s key from the credentials file; the file goes when
/// no key is left. Returns whether there was a key.
pub fn remove(path: &Path, provider: Provider) -> Result<bool, CliError> {
    let mut table = read_table(path)?;
    if table.remove(provider.table()).is_none() {
        return Ok(false);
    }
    if table.is_empty() {
        std::fs::remove_file(path)
            .map_err(|e| CliError::io(format!("cannot remove {}", path.display()), e))?;
    } else {
        replace(path, &table)?;
    }
    Ok(true)
}

/// Whether `path` (a config or credentials file) holds a key for
/// `provider`. A file that cannot be read or parsed counts as holding none.
pub fn has_key(path: &Path, provider: Provider) -> bool {
    read_table(path).is_ok_and(|t| {
        t.get(provider.table())
            .and_then(|s| s.get("api_key"))
            .and_then(toml::Value::as_str)
            .is_some_and(|k| !k.is_empty())
    })
}

/// The provider a config file names (`provider = "openai"`); Anthropic by
/// default, as in the daemon.
pub fn configured_provider(config: Option<&Path>) -> Provider {
    config
        .and_then(|p| read_table(p).ok())
        .and_then(|t| {
            t.get("provider")
                .and_then(toml::Value::as_str)
                .and_then(Provider::from_name)
        })
        .unwrap_or(Provider::Anthropic)
}

/// The base URL a daemon started from this environment would use for
/// `provider`: its variable (`ANTHROPIC_BASE_URL`, `OPENAI_BASE_URL`),
/// else the config file's `[provider] base_url`, else the official one.
pub(crate) fn configured_base_url(
    env: &dyn Fn(&str) -> Option<String>,
    config: Option<&Path>,
    provider: Provider,
) -> String {
    let variable = match provider {
        Provider::Anthropic => "ANTHROPIC_BASE_URL",
        Provider::Openai => "OPENAI_BASE_URL",
    };
    env(variable)
        .filter(|u| !u.is_empty())
        .or_else(|| {
            config.and_then(|p| read_table(p).ok()).and_then(|t| {
                t.get(provider.table())
                    .and_then(|s| s.get("base_url"))
                    .and_then(toml::Value::as_str)
                    .map(str::to_string)
            })
        })
        .unwrap_or_else(|| provider.official_url().to_string())
}

/// The file parsed; an empty table when it does not exist.
fn read_table(path: &Path) -> Result<toml::Table, CliError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(toml::Table::new()),
        Err(e) => return Err(CliError::io(format!("cannot read {}", path.display()), e)),
    };
    text.parse::<toml::Table>().map_err(|e| {
        // The parser quotes the offending line, which may hold a key.
        let what = e.message().lines().next().unwrap_or("").to_string();
        CliError::Input(format!("{} is not valid TOML: {what}", path.display()))
    })
}

/// Replaces the file at `path` with `table`, atomically and never readable
/// by others.
fn replace(path: &Path, table: &toml::Table) -> Result<(), CliError> {
    let text = format!(
        "# API keys of agentd, written by `agent login` (`agent logout` removes them).\n{}",
        toml::to_string(table)
            .map_err(|e| CliError::Input(format!("cannot write the credentials: {e}")))?
    );
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| CREDENTIALS_FILE.to_string());
    let temp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let io = |what: &str, p: &Path| {
        let context = format!("cannot {what} {}", p.display());
        move |e| CliError::io(context, e)
    };
    let result = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)
        .map_err(io("create", &temp))
        .and_then(|mut file| {
            file.write_all(text.as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(io("write", &temp))
        })
        .and_then(|()| std::fs::rename(&temp, path).map_err(io("replace", path)));
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

/// What an autostarted daemon gets of this terminal's keys: the variables
/// to remove from its environment, and a line to print for each key it
/// inherits. A terminal key is passed on only when the daemon has no key
/// of that provider of its own (none in its config file, none in its
/// credentials file): a daemon belongs to the user, not to whichever
/// terminal happened to start it.
pub fn daemon_environment(
    env: &dyn Fn(&str) -> Option<String>,
) -> (Vec<&'static str>, Vec<String>) {
    let config = config_file(env);
    let credentials = credentials_file(env);
    let mut remove = Vec::new();
    let mut notices = Vec::new();
    for provider in [Provider::Anthropic, Provider::Openai] {
        let var = provider.variable();
        let terminal_has = env(var).is_some_and(|k| !k.is_empty());
        let daemon_has = [config.as_deref(), credentials.as_deref()]
            .into_iter()
            .flatten()
            .any(|p| has_key(p, provider));
        if terminal_has && !daemon_has {
            notices.push(format!(
                "agentd started with {var} from this terminal; `agent login` stores a key for the daemon"
            ));
        } else {
            remove.push(var);
        }
    }
    (remove, notices)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn login_writes_a_private_file_and_keeps_the_other_providers_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agentd").join(CREDENTIALS_FILE);
        store(&path, Provider::Anthropic, "sk-one").unwrap();
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        store(&path, Provider::Openai, "sk-two").unwrap();
        // A file left readable by others is replaced by a private one.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        store(&path, Provider::Anthropic, "sk-three").unwrap();
        assert_eq!(mode(&path), 0o600);
        let table: toml::Table = std::fs::read_to_string(&path).unwrap().parse().unwrap();
        assert_eq!(table["anthropic"]["api_key"].as_str(), Some("sk-three"));
        assert_eq!(table["openai"]["api_key"].as_str(), Some("sk-two"));
        let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers, vec![std::ffi::OsString::from(CREDENTIALS_FILE)]);

        assert!(remove(&path, Provider::Anthropic).unwrap());
        assert!(!has_key(&path, Provider::Anthropic));
        assert!(has_key(&path, Provider::Openai));
        assert!(!remove(&path, Provider::Anthropic).unwrap());
        assert!(remove(&path, Provider::Openai).unwrap());
        assert!(!path.exists(), "the last key takes the file with it");
    }

    #[test]
    fn keys_are_cleaned_and_bad_ones_refused() {
        let clean_key =
            |raw: &str| check_key(raw, Provider::Anthropic, Endpoint::Other).map(|(key, _)| key);
        assert_eq!(clean_key("  sk-ant-1\n").unwrap(), "sk-ant-1");
        assert!(clean_key("\n").is_err());
        assert!(clean_key("sk one").is_err());
        assert!(clean_key("sk\u{7}x").is_err());
        assert!(clean_key("sk-1").is_err(), "too short");
        assert!(clean_key(&"k".repeat(2049)).is_err(), "too long");
    }

    #[test]
    fn the_prefix_is_checked_only_for_the_providers_own_api() {
        let anthropic = "sk-ant-api03-Zq8xW3kP0v7Yt2Lm";
        let openai = "sk-proj-Zq8xW3kP0v7Yt2Lm";
        let other = "token-abc123";
        let check = |key, provider, endpoint| check_key(key, provider, endpoint);
        assert!(check(anthropic, Provider::Anthropic, Endpoint::Official).is_ok());
        assert!(check(openai, Provider::Openai, Endpoint::Official).is_ok());
        let refused = check(openai, Provider::Anthropic, Endpoint::Official).unwrap_err();
        assert!(matches!(refused, CliError::BadKey(_)));
        assert_eq!(refused.exit(), crate::error::Exit::Usage);
        assert!(refused.to_string().contains("`sk-ant-`"), "{refused}");
        assert!(!refused.to_string().contains("Zq8x"), "{refused}");
        assert!(check(other, Provider::Openai, Endpoint::Official).is_err());
        assert!(check(other, Provider::Anthropic, Endpoint::Unknown).is_err());
        // vLLM, OpenRouter, a gateway: their keys are their own.
        for provider in [Provider::Anthropic, Provider::Openai] {
            assert_eq!(
                check(other, provider, Endpoint::Other).unwrap(),
                (other.to_string(), None)
            );
        }
        // Not knowing the endpoint, an OpenAI-protocol key is only warned about.
        let (key, warning) = check(other, Provider::Openai, Endpoint::Unknown).unwrap();
        assert_eq!(key, other);
        assert!(warning.is_some_and(|w| w.contains("`sk-`") && !w.contains(other)));
        assert_eq!(
            Endpoint::of("https://api.openai.com/v1/", Provider::Openai),
            Endpoint::Official
        );
        assert_eq!(
            Endpoint::of("https://api.openai.com/v1", Provider::Anthropic),
            Endpoint::Other
        );
        assert_eq!(Endpoint::of("", Provider::Openai), Endpoint::Unknown);
    }

    #[test]
    fn the_base_url_comes_from_the_environment_then_the_config_file() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.toml");
        std::fs::write(&config, "[openai]\nbase_url = \"http://vllm:8000/v1\"\n").unwrap();
        let none = |_: &str| None;
        let set = |k: &str| (k == "OPENAI_BASE_URL").then(|| "http://env/v1".to_string());
        let url = |env: &dyn Fn(&str) -> Option<String>, provider| {
            configured_base_url(env, Some(&config), provider)
        };
        assert_eq!(url(&set, Provider::Openai), "http://env/v1");
        assert_eq!(url(&none, Provider::Openai), "http://vllm:8000/v1");
        assert_eq!(url(&set, Provider::Anthropic), "https://api.anthropic.com");
    }

    /// A key as the shape check sees it: printable, no whitespace.
    fn key_strategy() -> impl proptest::strategy::Strategy<Value = String> {
        "[!-~]{8,200}"
    }

    proptest::proptest! {
        #[test]
        fn any_key_with_whitespace_inside_is_refused(
            head in key_strategy(),
            space in "[ \t\n\r\u{a0}\u{2003}\u{3000}]",
            tail in key_strategy(),
            provider in proptest::sample::select(vec![Provider::Anthropic, Provider::Openai]),
            endpoint in proptest::sample::select(
                vec![Endpoint::Official, Endpoint::Other, Endpoint::Unknown],
            ),
        ) {
            let key = format!("{}{head}{space}{tail}", provider.key_prefix());
            let refused = check_key(&key, provider, endpoint);
            proptest::prop_assert!(matches!(refused, Err(CliError::BadKey(_))));
        }

        #[test]
        fn keys_of_the_right_shape_pass(
            body in key_strategy(),
            provider in proptest::sample::select(vec![Provider::Anthropic, Provider::Openai]),
            endpoint in proptest::sample::select(
                vec![Endpoint::Official, Endpoint::Other, Endpoint::Unknown],
            ),
        ) {
            let key = format!("{}{body}", provider.key_prefix());
            let (stored, warning) = check_key(&format!(" {key}\n"), provider, endpoint)
                .map_err(|e| proptest::test_runner::TestCaseError::fail(e.to_string()))?;
            proptest::prop_assert_eq!(stored, key);
            proptest::prop_assert!(warning.is_none());
        }
    }

    #[test]
    fn a_file_that_is_not_toml_is_an_error_that_does_not_quote_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CREDENTIALS_FILE);
        std::fs::write(&path, "[anthropic]\napi_key = \"sk-secret\n").unwrap();
        let err = store(&path, Provider::Anthropic, "k")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not valid TOML"), "{err}");
        assert!(!err.contains("sk-secret"), "{err}");
    }

    #[test]
    fn an_autostarted_daemon_inherits_a_terminal_key_only_when_it_has_none() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().to_string_lossy().into_owned();
        let env = |with_key: bool| {
            let home = home.clone();
            move |k: &str| match k {
                "XDG_CONFIG_HOME" => Some(home.clone()),
                "ANTHROPIC_API_KEY" if with_key => Some("sk-terminal".to_string()),
                _ => None,
            }
        };
        let (remove_vars, notices) = daemon_environment(&env(true));
        assert_eq!(remove_vars, vec!["OPENAI_API_KEY"]);
        assert_eq!(
            notices,
            vec![
                "agentd started with ANTHROPIC_API_KEY from this terminal; `agent login` stores a key for the daemon"
            ]
        );
        let (remove_vars, notices) = daemon_environment(&env(false));
        assert_eq!(remove_vars, vec!["ANTHROPIC_API_KEY", "OPENAI_API_KEY"]);
        assert!(notices.is_empty());
        store(
            &dir.path().join("agentd").join(CREDENTIALS_FILE),
            Provider::Anthropic,
            "sk-daemon",
        )
        .unwrap();
        let (remove_vars, notices) = daemon_environment(&env(true));
        assert_eq!(remove_vars, vec!["ANTHROPIC_API_KEY", "OPENAI_API_KEY"]);
        assert!(notices.is_empty());
    }

    #[test]
    fn the_config_dir_follows_the_daemons_rule() {
        let env = |k: &str| (k == "HOME").then(|| "/home/u".to_string());
        assert_eq!(
            credentials_file(&env),
            Some(PathBuf::from("/home/u/.config/agentd/credentials.toml"))
        );
        let env = |k: &str| match k {
            "HOME" => Some("/home/u".to_string()),
            "XDG_CONFIG_HOME" => Some("/x".to_string()),
            "AGENTD_CONFIG" => Some("/etc/agentd.toml".to_string()),
            _ => None,
        };
        assert_eq!(
            credentials_file(&env),
            Some(PathBuf::from("/x/agentd/credentials.toml"))
        );
        assert_eq!(config_file(&env), Some(PathBuf::from("/etc/agentd.toml")));
    }
}
