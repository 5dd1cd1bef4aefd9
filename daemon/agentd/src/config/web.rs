//! `[web]`: the `web_fetch` tool's limits and Anthropic's server-side web
//! search (README "The web").

use serde::Deserialize;

use super::ConfigError;

/// The `[web]` section.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct WebSection {
    /// Offer Anthropic's server-side `web_search` tool with every request
    /// (Anthropic provider only; the search runs at Anthropic and is billed
    /// there).
    pub search: bool,
    /// Searches one reply may run (`max_uses` of the server tool).
    pub search_max_uses: u32,
    /// Time one `web_fetch` call may take, redirects included, in seconds.
    pub fetch_timeout_secs: u64,
    /// Most bytes of a page `web_fetch` downloads; the rest is not read.
    pub fetch_max_bytes: u64,
    /// How long a fetched page is served from memory, in seconds (0: never).
    pub cache_secs: u64,
}

impl Default for WebSection {
    fn default() -> Self {
        WebSection {
            search: false,
            search_max_uses: 5,
            fetch_timeout_secs: 30,
            fetch_max_bytes: 5 * 1024 * 1024,
            cache_secs: 15 * 60,
        }
    }
}

impl WebSection {
    /// Refuses limits that would make the tool useless.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let positive = [
            ("web.search_max_uses", u64::from(self.search_max_uses)),
            ("web.fetch_timeout_secs", self.fetch_timeout_secs),
            ("web.fetch_max_bytes", self.fetch_max_bytes),
        ];
        for (key, value) in positive {
            if value == 0 {
                return Err(ConfigError::Invalid(format!("{key} must be at least 1")));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_checks_the_section() {
        let s: WebSection = toml::from_str("search = true\nsearch_max_uses = 3").unwrap();
        assert!(s.search);
        assert_eq!(s.search_max_uses, 3);
        assert_eq!(s.fetch_timeout_secs, 30);
        assert!(s.validate().is_ok());
        let zero = WebSection {
            fetch_max_bytes: 0,
            ..WebSection::default()
        };
        assert!(
            zero.validate()
                .unwrap_err()
                .to_string()
                .contains("web.fetch_max_bytes")
        );
        assert!(toml::from_str::<WebSection>("serch = true").is_err());
    }
}
