//! Pages fetched lately, by URL, for every conversation of the daemon: a
//! model that reads a page twice in a few minutes (or two sub-agents that
//! read the same docs) costs one download. Bounded in entries and bytes;
//! the oldest entry goes first.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Entries kept at most.
const MAX_ENTRIES: usize = 64;
/// Bytes of page text kept at most, over all entries.
const MAX_BYTES: usize = 16 * 1024 * 1024;

/// A fetched page as the tool returns it, before its cut to the budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Page {
    /// The URL the page came from, after redirects.
    pub url: String,
    pub content_type: String,
    /// Its text (Markdown for HTML).
    pub text: String,
    /// The download stopped at the size limit.
    pub cut: bool,
}

#[derive(Debug, Default)]
pub(crate) struct PageCache {
    pages: Mutex<HashMap<String, (Instant, Page)>>,
}

impl PageCache {
    /// The page fetched from `url` less than `ttl` ago.
    pub(super) fn get(&self, url: &str, ttl: Duration) -> Option<Page> {
        let pages = self.pages.lock().ok()?;
        let (at, page) = pages.get(url)?;
        (at.elapsed() < ttl).then(|| page.clone())
    }

    /// Keeps `page` as fetched from `url` now, dropping expired entries
    /// and then the oldest ones beyond the bounds.
    pub(super) fn put(&self, url: &str, page: Page, ttl: Duration) {
        if ttl.is_zero() || page.text.len() > MAX_BYTES {
            return;
        }
        let Ok(mut pages) = self.pages.lock() else {
            return;
        };
        pages.retain(|_, (at, _)| at.elapsed() < ttl);
        pages.insert(url.to_string(), (Instant::now(), page));
        while pages.len() > MAX_ENTRIES
            || pages.values().map(|(_, p)| p.text.len()).sum::<usize>() > MAX_BYTES
        {
            let Some(oldest) = pages
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            pages.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(text: &str) -> Page {
        Page {
            url: "u".into(),
            content_type: "text/plain".into(),
            text: text.into(),
            cut: false,
        }
    }

    #[test]
    fn keeps_pages_for_a_while_and_within_bounds() {
        let cache = PageCache::default();
        let ttl = Duration::from_secs(60);
        cache.put("a", page("x"), ttl);
        assert_eq!(cache.get("a", ttl), Some(page("x")));
        assert_eq!(cache.get("a", Duration::ZERO), None);
        assert_eq!(cache.get("b", ttl), None);
        for i in 0..MAX_ENTRIES + 5 {
            cache.put(&format!("k{i}"), page("y"), ttl);
        }
        assert_eq!(cache.pages.lock().unwrap().len(), MAX_ENTRIES);
        assert_eq!(cache.get("a", ttl), None, "the oldest went first");
        cache.put("z", page("z"), Duration::ZERO);
        assert_eq!(cache.get("z", ttl), None, "a zero ttl keeps nothing");
    }
}
