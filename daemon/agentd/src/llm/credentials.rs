//! Where the API key comes from, resolved again for every model request so
//! that `agent login` (or an edited config file) takes effect without a
//! restart.
//!
//! The sources, first match wins: the config file (`api_key` under
//! `[anthropic]` or `[openai]`), the credentials file `agent login` writes
//! (`credentials.toml` in the config directory), the daemon's environment
//! (`ANTHROPIC_API_KEY`, `OPENAI_API_KEY`). A file is parsed again only when
//! its metadata changed (inode, size, modification or change time), so a
//! request costs one `stat` per file. A file that holds a key must not be
//! readable by other users; if it is, the request fails with a message
//! saying how to fix it.
//!
//! [`KeyedProvider`] is the provider the daemon runs with: it resolves the
//! key, builds the real provider for it (again only when the key changed)
//! and hands the request on.

use super::{LlmError, LlmRequest, Provider, ProviderConfig, StreamEvent};
use crate::config::{FileConfig, ProviderKind};
use agentd_core::Reply;
use futures::future::BoxFuture;
use serde::Deserialize;
use std::collections::HashMap;
use std::fmt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// The credentials file's name, in the config directory.
pub(crate) const CREDENTIALS_FILE: &str = "credentials.toml";

/// Where the key in use came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// `api_key` in the config file.
    ConfigFile,
    /// The credentials file `agent login` writes.
    CredentialsFile,
    /// `ANTHROPIC_API_KEY` / `OPENAI_API_KEY` in the daemon's environment.
    Environment,
    /// No key anywhere.
    None,
}

impl Source {
    /// The name `agent doctor` shows.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Source::ConfigFile => "config file",
            Source::CredentialsFile => "credentials file",
            Source::Environment => "environment",
            Source::None => "none",
        }
    }
}

/// A key and where it came from. `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Resolved {
    pub key: Option<String>,
    pub source: Source,
}

impl fmt::Debug for Resolved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resolved")
            .field("key", &self.key.as_ref().map(|_| "<redacted>"))
            .field("source", &self.source)
            .finish()
    }
}

/// Why no key could be read. The messages never contain a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CredentialsError {
    /// A file exists but could not be read.
    #[error("cannot read {path}: {message}")]
    Read { path: PathBuf, message: String },
    /// A file is not valid TOML for its schema.
    #[error("invalid {path}: {message}")]
    Parse { path: PathBuf, message: String },
    /// A file holding a key is readable by other users.
    #[error(
        "{path} holds an API key but is readable by other users (mode {mode:o}); run `chmod 600 {path}`"
    )]
    Insecure { path: PathBuf, mode: u32 },
}

/// The credentials file's schema: one table per provider.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct CredentialsFile {
    anthropic: KeyOnly,
    openai: KeyOnly,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct KeyOnly {
    api_key: Option<String>,
}

/// What identifies one version of a file: a change of any of these means
/// the file must be read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    mode: u32,
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
            mode: meta.mode(),
        }
    }
}

/// What reading one file gave: its key (if it holds one) or why not.
type FileKey = Result<Option<String>, CredentialsError>;

/// A provider and the key it was built with.
type Built = (Option<String>, Arc<dyn Provider>);

/// The key sources of one daemon, with the last reading of each file.
pub(crate) struct Sources {
    provider: ProviderKind,
    config_file: Option<PathBuf>,
    credentials_file: Option<PathBuf>,
    env_key: Option<String>,
    /// Path → (stamp, the key read or the error met).
    cache: Mutex<HashMap<PathBuf, (Stamp, FileKey)>>,
}

impl fmt::Debug for Sources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sources")
            .field("provider", &self.provider)
            .field("config_file", &self.config_file)
            .field("credentials_file", &self.credentials_file)
            .field("env_key", &self.env_key.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

impl Sources {
    /// The sources of `provider`'s key. `env` is the daemon's environment
    /// (read once: it does not change while the daemon runs); an empty
    /// variable counts as unset.
    pub(crate) fn new(
        provider: ProviderKind,
        config_file: Option<PathBuf>,
        credentials_file: Option<PathBuf>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Sources {
        let var = match provider {
            ProviderKind::Anthropic => "ANTHROPIC_API_KEY",
            ProviderKind::Openai => "OPENAI_API_KEY",
        };
        Sources {
            provider,
            config_file,
            credentials_file,
            env_key: env(var).filter(|k| !k.is_empty()),
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The provider whose key these are.
    pub(crate) fn provider(&self) -> ProviderKind {
        self.provider
    }

    /// The config file read for a key (it need not exist).
    pub(crate) fn config_file(&self) -> Option<&Path> {
        self.config_file.as_deref()
    }

    /// The credentials file `agent login` writes (it need not exist).
    pub(crate) fn credentials_file(&self) -> Option<&Path> {
        self.credentials_file.as_deref()
    }

    /// The key to use now, and where it came from.
    pub(crate) fn resolve(&self) -> Result<Resolved, CredentialsError> {
        let files = [
            (Source::ConfigFile, self.config_file.as_deref()),
            (Source::CredentialsFile, self.credentials_file.as_deref()),
        ];
        for (source, path) in files {
            let Some(path) = path else { continue };
            if let Some(key) = self.file_key(path, source)? {
                return Ok(Resolved {
                    key: Some(key),
                    source,
                });
            }
        }
        Ok(match &self.env_key {
            Some(key) => Resolved {
                key: Some(key.clone()),
                source: Source::Environment,
            },
            None => Resolved {
                key: None,
                source: Source::None,
            },
        })
    }

    /// Every key these sources hold now (the config file's, the
    /// credentials file's, the environment's), each named by the variable
    /// it would be in: what tool results must never show. A file that
    /// cannot be read or parsed gives none.
    pub(crate) fn keys(&self) -> Vec<(&'static str, String)> {
        let name = match self.provider {
            ProviderKind::Anthropic => "ANTHROPIC_API_KEY",
            ProviderKind::Openai => "OPENAI_API_KEY",
        };
        let files = [
            (Source::ConfigFile, self.config_file.as_deref()),
            (Source::CredentialsFile, self.credentials_file.as_deref()),
        ];
        files
            .into_iter()
            .filter_map(|(source, path)| self.file_key(path?, source).ok().flatten())
            .chain(self.env_key.clone())
            .map(|key| (name, key))
            .collect()
    }

    /// The key in the file at `path` (none when the file does not exist),
    /// from the cache when the file did not change since it was read.
    fn file_key(&self, path: &Path, source: Source) -> Result<Option<String>, CredentialsError> {
        let meta = match std::fs::metadata(path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(CredentialsError::Read {
                    path: path.to_path_buf(),
                    message: e.to_string(),
                });
            }
        };
        let stamp = Stamp::of(&meta);
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((seen, result)) = cache.get(path)
            && *seen == stamp
        {
            return result.clone();
        }
        let result = read_key(path, source, self.provider, stamp.mode);
        cache.insert(path.to_path_buf(), (stamp, result.clone()));
        result
    }
}

/// Reads the key of `provider` from a config or credentials file.
fn read_key(
    path: &Path,
    source: Source,
    provider: ProviderKind,
    mode: u32,
) -> Result<Option<String>, CredentialsError> {
    let text = std::fs::read_to_string(path).map_err(|e| CredentialsError::Read {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let parse_error = |e: toml::de::Error| CredentialsError::Parse {
        path: path.to_path_buf(),
        // The parser's message quotes the offending line, which may hold a
        // key: keep only its first line (what is wrong, and where).
        message: e.message().lines().next().unwrap_or("").to_string(),
    };
    let key = if source == Source::ConfigFile {
        let file: FileConfig = toml::from_str(&text).map_err(parse_error)?;
        match provider {
            ProviderKind::Anthropic => file.anthropic.api_key,
            ProviderKind::Openai => file.openai.api_key,
        }
    } else {
        let file: CredentialsFile = toml::from_str(&text).map_err(parse_error)?;
        match provider {
            ProviderKind::Anthropic => file.anthropic.api_key,
            ProviderKind::Openai => file.openai.api_key,
        }
    };
    let key = key.filter(|k| !k.is_empty());
    if key.is_some() && mode & 0o077 != 0 {
        return Err(CredentialsError::Insecure {
            path: path.to_path_buf(),
            mode: mode & 0o777,
        });
    }
    Ok(key)
}

/// What a model request without a key fails with.
pub(crate) fn missing_key_message(provider: ProviderKind) -> &'static str {
    match provider {
        ProviderKind::Anthropic => {
            "no API key: run `agent login` (or set ANTHROPIC_API_KEY in agentd's environment, \
             or api_key under [anthropic] in its config file); no restart is needed"
        }
        // OpenAI-compatible local servers need no key, so this is never
        // shown today; it is here so the match stays exhaustive.
        ProviderKind::Openai => {
            "no API key: run `agent login --provider openai` (or set OPENAI_API_KEY in \
             agentd's environment, or api_key under [openai] in its config file)"
        }
    }
}

/// The daemon's provider: the key is resolved for every request, and the
/// real provider is rebuilt when it changed.
pub(crate) struct KeyedProvider {
    sources: Arc<Sources>,
    base_url: String,
    /// The key the provider was built with, and the provider.
    built: Mutex<Option<Built>>,
}

impl fmt::Debug for KeyedProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedProvider")
            .field("sources", &self.sources)
            .field("base_url", &super::transport::redact(&self.base_url))
            .finish_non_exhaustive()
    }
}

impl KeyedProvider {
    /// A provider that reads its key from `sources` and talks to `base_url`.
    pub(crate) fn new(sources: Arc<Sources>, base_url: String) -> KeyedProvider {
        KeyedProvider {
            sources,
            base_url,
            built: Mutex::new(None),
        }
    }

    /// The provider for the key in effect now.
    fn current(&self) -> Result<Arc<dyn Provider>, LlmError> {
        let resolved = self
            .sources
            .resolve()
            .map_err(|e| LlmError::Config(e.to_string()))?;
        let key = resolved.key;
        let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((used, provider)) = built.as_ref()
            && *used == key
        {
            return Ok(provider.clone());
        }
        let config = match (self.sources.provider(), key.clone()) {
            (ProviderKind::Anthropic, None) => {
                return Err(LlmError::Config(
                    missing_key_message(ProviderKind::Anthropic).to_string(),
                ));
            }
            (ProviderKind::Anthropic, Some(api_key)) => ProviderConfig::Anthropic {
                api_key,
                base_url: self.base_url.clone(),
            },
            (ProviderKind::Openai, api_key) => ProviderConfig::OpenAi {
                api_key,
                base_url: self.base_url.clone(),
            },
        };
        let provider = config.build()?;
        *built = Some((key, provider.clone()));
        Ok(provider)
    }
}

impl Provider for KeyedProvider {
    fn stream<'a>(
        &'a self,
        req: &'a LlmRequest,
        on_event: &'a mut (dyn FnMut(StreamEvent) + Send),
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<Reply, LlmError>> {
        Box::pin(async move {
            let provider = self.current()?;
            provider.stream(req, on_event, cancel).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn write(path: &Path, text: &str, mode: u32) {
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn sources(dir: &Path, env_key: Option<&'static str>) -> Sources {
        Sources::new(
            ProviderKind::Anthropic,
            Some(dir.join("config.toml")),
            Some(dir.join(CREDENTIALS_FILE)),
            &move |k| {
                (k == "ANTHROPIC_API_KEY")
                    .then(|| env_key.map(String::from))
                    .flatten()
            },
        )
    }

    fn resolved(s: &Sources) -> (Option<String>, Source) {
        let r = s.resolve().unwrap();
        (r.key, r.source)
    }

    #[test]
    fn the_config_file_beats_the_credentials_file_which_beats_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let s = sources(dir.path(), Some("from-env"));
        assert_eq!(resolved(&s), (Some("from-env".into()), Source::Environment));
        let creds = dir.path().join(CREDENTIALS_FILE);
        write(&creds, "[anthropic]\napi_key = \"from-login\"\n", 0o600);
        assert_eq!(
            resolved(&s),
            (Some("from-login".into()), Source::CredentialsFile)
        );
        let config = dir.path().join("config.toml");
        write(&config, "model = \"m\"\n", 0o644);
        assert_eq!(resolved(&s).1, Source::CredentialsFile, "no key there");
        write(&config, "[anthropic]\napi_key = \"from-config\"\n", 0o600);
        assert_eq!(
            resolved(&s),
            (Some("from-config".into()), Source::ConfigFile)
        );
        std::fs::remove_file(&config).unwrap();
        std::fs::remove_file(&creds).unwrap();
        assert_eq!(resolved(&s), (Some("from-env".into()), Source::Environment));
        let none = sources(dir.path(), None);
        assert_eq!(resolved(&none), (None, Source::None));
    }

    #[test]
    fn a_changed_file_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let s = sources(dir.path(), None);
        let creds = dir.path().join(CREDENTIALS_FILE);
        write(&creds, "[anthropic]\napi_key = \"one\"\n", 0o600);
        assert_eq!(resolved(&s).0.as_deref(), Some("one"));
        // Same length, so only the times and the inode tell the change.
        let next = dir.path().join("next");
        write(&next, "[anthropic]\napi_key = \"two\"\n", 0o600);
        std::fs::rename(&next, &creds).unwrap();
        assert_eq!(resolved(&s).0.as_deref(), Some("two"));
        write(&creds, "[openai]\napi_key = \"other\"\n", 0o600);
        assert_eq!(resolved(&s), (None, Source::None));
    }

    #[test]
    fn a_key_other_users_can_read_is_refused_without_showing_it() {
        let dir = tempfile::tempdir().unwrap();
        let s = sources(dir.path(), Some("from-env"));
        let creds = dir.path().join(CREDENTIALS_FILE);
        write(&creds, "[anthropic]\napi_key = \"secret-key\"\n", 0o644);
        let err = s.resolve().unwrap_err();
        assert!(matches!(
            err,
            CredentialsError::Insecure { mode: 0o644, .. }
        ));
        assert!(err.to_string().contains("chmod 600"), "{err}");
        assert!(!err.to_string().contains("secret-key"), "{err}");
        std::fs::set_permissions(&creds, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(resolved(&s).0.as_deref(), Some("secret-key"));
    }

    #[test]
    fn a_broken_file_is_a_clear_error_that_does_not_quote_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let s = sources(dir.path(), None);
        let creds = dir.path().join(CREDENTIALS_FILE);
        write(&creds, "[anthropic]\napi_key = \"secret-key\nx\n", 0o600);
        let err = s.resolve().unwrap_err().to_string();
        assert!(err.starts_with("invalid "), "{err}");
        assert!(!err.contains("secret-key"), "{err}");
        write(&creds, "[anthropic]\napi_kee = \"k\"\n", 0o600);
        let err = s.resolve().unwrap_err().to_string();
        assert!(err.contains("api_kee"), "{err}");
    }

    #[tokio::test]
    async fn without_a_key_a_request_fails_saying_to_log_in_and_a_login_needs_no_restart() {
        let dir = tempfile::tempdir().unwrap();
        let sources = Arc::new(sources(dir.path(), None));
        let provider = KeyedProvider::new(sources, "http://127.0.0.1:9".into());
        let request = LlmRequest {
            thinking: None,
            model: "m".into(),
            system: "".into(),
            messages: Arc::new(Vec::new()),
            tools: Arc::new([]),
            max_tokens: 1,
            cache: Default::default(),
            images: Default::default(),
            web_search: None,
        };
        let err = provider
            .stream(&request, &mut |_| {}, CancellationToken::new())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, LlmError::Config(m) if m.contains("agent login")),
            "{err}"
        );
        write(
            &dir.path().join(CREDENTIALS_FILE),
            "[anthropic]\napi_key = \"k\"\n",
            0o600,
        );
        assert!(provider.current().is_ok());
        let first = provider.current().unwrap();
        assert!(
            Arc::ptr_eq(&first, &provider.current().unwrap()),
            "built once per key"
        );
    }
}
