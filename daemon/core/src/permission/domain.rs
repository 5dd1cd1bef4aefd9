//! Web addresses for the rules: the host of a `web_fetch` URL, and the
//! `domain:HOST` / `domain:*.HOST` patterns that name hosts.
//!
//! The host is read here, strictly, with no I/O: an address whose host
//! this reading cannot be sure of (no `http`/`https` scheme, characters a
//! host name does not have, percent-encoding, non-ASCII) has no host, so
//! no rule allows it, and the tool refuses what it cannot read the same
//! way (it fetches only when its URL parser finds this same host).

use super::{Action, Rule};
use crate::tools::Tool;

/// How a domain pattern begins.
pub(crate) const DOMAIN_PREFIX: &str = "domain:";

/// The host of an `http`/`https` URL, lower case, without a trailing dot;
/// an IPv6 address keeps its brackets (`[::1]`). `None` for anything else.
pub fn url_host(url: &str) -> Option<String> {
    let url = url.trim();
    let (scheme, rest) = url.split_once("://")?;
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return None;
    }
    let end = rest.find(['/', '?', '#', '\\']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if host_port.starts_with('[') {
        let close = host_port.find(']')?;
        let (host, port) = host_port.split_at(close + 1);
        if !(port.is_empty() || port.starts_with(':')) {
            return None;
        }
        let inner = &host[1..host.len() - 1];
        if inner.is_empty()
            || !inner
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
        {
            return None;
        }
        host
    } else {
        host_port.split(':').next().unwrap_or_default()
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    host_chars_ok(&host).then_some(host)
}

/// Whether `host` is made of what host names and IP addresses are.
fn host_chars_ok(host: &str) -> bool {
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return !inner.is_empty();
    }
    !host.is_empty()
        && !host.starts_with('.')
        && !host.contains("..")
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
}

/// Checks a domain rule's pattern: `domain:HOST` or `domain:*.HOST`.
pub(crate) fn check_pattern(pattern: &str) -> Result<(), String> {
    let Some(host) = pattern.trim().strip_prefix(DOMAIN_PREFIX) else {
        return Err(format!(
            "a web_fetch pattern is `{DOMAIN_PREFIX}HOST` or `{DOMAIN_PREFIX}*.HOST` \
             (e.g. `{DOMAIN_PREFIX}docs.rs`)"
        ));
    };
    let host = host.trim();
    let host = host.strip_prefix("*.").unwrap_or(host);
    if host_chars_ok(&host.to_ascii_lowercase()) {
        Ok(())
    } else {
        Err(format!(
            "`{host}` is not a host name (letters, digits, `-`, `.`; an IPv6 address in brackets; \
             a wildcard only as a leading `*.`)"
        ))
    }
}

/// Whether the domain pattern `pattern` names `host` (as [`url_host`]
/// gives it): `domain:docs.rs` that host alone, `domain:*.rust-lang.org`
/// every host below `rust-lang.org` (not `rust-lang.org` itself).
pub(crate) fn matches(pattern: &str, host: &str) -> bool {
    let Some(want) = pattern.trim().strip_prefix(DOMAIN_PREFIX) else {
        return false;
    };
    let want = want.trim().trim_end_matches('.').to_ascii_lowercase();
    match want.strip_prefix("*.") {
        Some(parent) => host
            .strip_suffix(parent)
            .is_some_and(|below| below.len() > 1 && below.ends_with('.')),
        None => host == want,
    }
}

/// Whether an allow rule on `web_fetch` names `host` with a domain pattern,
/// and no ask or deny rule does. Only then may the tool reach a private or
/// loopback address at that host (`web_fetch(domain:127.0.0.1)`), or follow
/// a redirect to it without a call of its own; a bare `web_fetch` rule, or
/// the `bypass` mode, does not do either.
pub fn rules_name_host(rules: &[Rule], host: &str) -> bool {
    let named = |r: &&Rule| {
        r.tool == Tool::WebFetch.name() && r.pattern.as_deref().is_some_and(|p| matches(p, host))
    };
    let mut naming = rules.iter().filter(named);
    naming.clone().any(|r| r.action == Action::Allow) && naming.all(|r| r.action == Action::Allow)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_read_strictly() {
        let host = |u: &str| url_host(u);
        assert_eq!(host("https://docs.rs/serde").as_deref(), Some("docs.rs"));
        assert_eq!(host("HTTP://Docs.RS.:8080?q").as_deref(), Some("docs.rs"));
        assert_eq!(
            host("https://user:pw@example.com/x").as_deref(),
            Some("example.com")
        );
        assert_eq!(host("http://127.0.0.1:9/").as_deref(), Some("127.0.0.1"));
        assert_eq!(host("http://[::1]:80/a").as_deref(), Some("[::1]"));
        assert_eq!(
            host("https://evil.com\\@good.com/").as_deref(),
            Some("evil.com")
        );
        for bad in [
            "ftp://x.org/",
            "docs.rs",
            "https:///x",
            "https://ex%61mple.com/",
            "https://exämple.com/",
            "http://[::1/",
            "http://[::1]x/",
            "http://a..b/",
        ] {
            assert_eq!(host(bad), None, "{bad}");
        }
    }

    #[test]
    fn patterns_name_hosts() {
        assert!(matches("domain:docs.rs", "docs.rs"));
        assert!(!matches("domain:docs.rs", "x.docs.rs"));
        assert!(matches("domain:*.rust-lang.org", "doc.rust-lang.org"));
        assert!(matches("domain:*.rust-lang.org", "a.b.rust-lang.org"));
        assert!(!matches("domain:*.rust-lang.org", "rust-lang.org"));
        assert!(!matches("domain:*.rust-lang.org", "evilrust-lang.org"));
        assert!(matches("domain:Docs.RS", "docs.rs"));
        assert!(!matches("docs.rs", "docs.rs"));
        assert!(check_pattern("domain:docs.rs").is_ok());
        assert!(check_pattern("domain:*.rust-lang.org").is_ok());
        assert!(check_pattern("domain:[::1]").is_ok());
        assert!(check_pattern("docs.rs").is_err());
        assert!(check_pattern("domain:a*b.org").is_err());
        assert!(check_pattern("domain:").is_err());
    }

    #[test]
    fn only_allow_rules_with_a_domain_name_a_host() {
        let rule = |text: &str, action| Rule::parse(text, action).unwrap();
        let rules = vec![
            rule("web_fetch", Action::Allow),
            rule("web_fetch(domain:localhost)", Action::Deny),
        ];
        assert!(!rules_name_host(&rules, "localhost"));
        let rules = vec![rule("web_fetch(domain:127.0.0.1)", Action::Allow)];
        assert!(rules_name_host(&rules, "127.0.0.1"));
        assert!(!rules_name_host(&rules, "127.0.0.2"));
        // A narrower ask or deny rule wins over a wildcard allow.
        let rules = vec![
            rule("web_fetch(domain:*.corp.example)", Action::Allow),
            rule("web_fetch(domain:vault.corp.example)", Action::Ask),
        ];
        assert!(rules_name_host(&rules, "wiki.corp.example"));
        assert!(!rules_name_host(&rules, "vault.corp.example"));
    }
}
