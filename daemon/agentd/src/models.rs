//! What the daemon knows about models: context window, output limit and
//! list price, from a built-in table that the config file can override or
//! extend (`[models."NAME"]`). An unknown model gets the config's
//! `[limits] context_window` and no price: its cost is never made up.
//! Thinking: the table says how a model takes it (its `ThinkForm`); the
//! config file says whether it thinks by default (`thinking = {…}`).

use agentd_core::{Effort, ThinkForm, Thinking, Usage};
use serde::Deserialize;
use std::collections::HashMap;

pub(crate) use agentd_core::Price;

/// What is known of one model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ModelInfo {
    /// Tokens of context.
    pub context_window: u64,
    /// Most tokens one reply may have.
    pub max_output_tokens: u32,
    /// None: unknown, so no cost is shown.
    pub price: Option<Price>,
    /// Whether the table or the config file named the model.
    pub known: bool,
    /// Whether it takes images (in user messages and tool results): `read`
    /// returns an image file as an image only to such a model.
    pub images: bool,
    /// How it takes thinking; None: unknown (the provider's usual form).
    pub think_form: Option<ThinkForm>,
    /// Whether it thinks when a turn does not say (the config file's
    /// `thinking`); None: it does not.
    pub thinking: Option<Thinking>,
}

/// A model's entry in the config file; what it leaves out comes from the
/// built-in table (or, for a model the table does not know, from
/// `[limits]`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ModelSection {
    pub context_window: Option<u64>,
    pub max_output_tokens: Option<u32>,
    /// USD per million tokens.
    pub price: Option<Price>,
    /// Whether the model takes images (the table says for the models it
    /// knows; an unknown model is taken not to).
    pub images: Option<bool>,
    /// Thinking by default, and how the model takes it.
    pub thinking: Option<ThinkingSection>,
}

/// `thinking = { budget_tokens = 8000 }`, `{ effort = "high" }` or
/// `{ enabled = false }`; `form` says how the model takes thinking when
/// the table does not know (`budget`, `adaptive`, `effort`, `none`).
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ThinkingSection {
    pub budget_tokens: Option<u32>,
    pub effort: Option<Effort>,
    pub enabled: Option<bool>,
    pub form: Option<ThinkForm>,
}

impl ThinkingSection {
    /// What the model does when a turn does not say.
    fn default_choice(&self) -> Option<Thinking> {
        if self.enabled == Some(false) {
            return Some(Thinking::Off);
        }
        match (self.budget_tokens, self.effort) {
            (Some(b), _) => Some(Thinking::Budget(b)),
            (None, Some(e)) => Some(Thinking::Effort(e)),
            (None, None) if self.enabled == Some(true) => Some(Thinking::On),
            (None, None) => None,
        }
    }
}

const fn usd(input: f64, output: f64, cache_write: f64, cache_read: f64) -> Option<Price> {
    Some(Price {
        input,
        output,
        cache_write,
        cache_read,
    })
}

/// The built-in table: name, context window, output limit, list price
/// (USD per million tokens: input, output, cache write, cache read) as the
/// providers publish them. A dated or provider-prefixed name
/// (`claude-sonnet-4-5-20250929`, `openai/gpt-4.1`) finds its entry.
/// Every model in it takes images. The last column is how it takes
/// thinking: Claude 4.5 and earlier a budget (`B`), OpenAI's reasoning
/// models an effort (`E`), the rest none (`N`).
#[rustfmt::skip]
const TABLE: &[Row] = &[
    ("claude-opus-4-5",   200_000,   64_000,  usd(5.0, 25.0, 6.25, 0.5),       B),
    ("claude-opus-4-1",   200_000,   32_000,  usd(15.0, 75.0, 18.75, 1.5),     B),
    ("claude-opus-4",     200_000,   32_000,  usd(15.0, 75.0, 18.75, 1.5),     B),
    ("claude-sonnet-4-5", 200_000,   64_000,  usd(3.0, 15.0, 3.75, 0.3),       B),
    ("claude-sonnet-4",   200_000,   64_000,  usd(3.0, 15.0, 3.75, 0.3),       B),
    ("claude-3-7-sonnet", 200_000,   64_000,  usd(3.0, 15.0, 3.75, 0.3),       B),
    ("claude-haiku-4-5",  200_000,   64_000,  usd(1.0, 5.0, 1.25, 0.1),        B),
    ("claude-3-5-haiku",  200_000,   8_192,   usd(0.8, 4.0, 1.0, 0.08),        N),
    ("gpt-5",             400_000,   128_000, usd(1.25, 10.0, 1.25, 0.125),    E),
    ("gpt-5-mini",        400_000,   128_000, usd(0.25, 2.0, 0.25, 0.025),     E),
    ("gpt-4.1",           1_047_576, 32_768,  usd(2.0, 8.0, 2.0, 0.5),         N),
    ("gpt-4.1-mini",      1_047_576, 32_768,  usd(0.4, 1.6, 0.4, 0.1),         N),
    ("gpt-4o",            128_000,   16_384,  usd(2.5, 10.0, 2.5, 1.25),       N),
    ("gpt-4o-mini",       128_000,   16_384,  usd(0.15, 0.6, 0.15, 0.075),     N),
    ("o3",                200_000,   100_000, usd(2.0, 8.0, 2.0, 0.5),         E),
    ("o4-mini",           200_000,   100_000, usd(1.1, 4.4, 1.1, 0.275),       E),
];

/// Name, context window, output limit, price, thinking form.
type Row = (&'static str, u64, u32, Option<Price>, ThinkForm);
const B: ThinkForm = ThinkForm::Budget;
const E: ThinkForm = ThinkForm::Effort;
const N: ThinkForm = ThinkForm::None;

/// The table with the config file's entries over it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Models {
    overrides: HashMap<String, ModelSection>,
    /// For models nobody knows: `[limits] context_window`, `max_tokens`.
    default_window: u64,
    default_output: u32,
    /// Unknown models already logged (each is said once).
    said: std::sync::Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

impl Models {
    pub(crate) fn new(
        overrides: HashMap<String, ModelSection>,
        default_window: u64,
        default_output: u32,
    ) -> Models {
        Models {
            overrides,
            default_window,
            default_output,
            said: Default::default(),
        }
    }

    /// What is known of `model`.
    pub(crate) fn lookup(&self, model: &str) -> ModelInfo {
        let from_table = table_entry(model);
        let configured = self
            .overrides
            .get(model)
            .or_else(|| self.overrides.get(base_name(model)));
        let mut info = match from_table {
            Some((_, window, output, price, form)) => ModelInfo {
                context_window: *window,
                max_output_tokens: *output,
                price: *price,
                known: true,
                images: true,
                think_form: Some(*form),
                thinking: None,
            },
            None => ModelInfo {
                context_window: self.default_window,
                max_output_tokens: self.default_output,
                price: None,
                known: false,
                images: false,
                think_form: None,
                thinking: None,
            },
        };
        if configured.is_none()
            && !info.known
            && let Ok(mut said) = self.said.lock()
            && said.insert(model.to_string())
        {
            tracing::warn!(
                "model {model} is not in agentd's table: its context window is taken as {} tokens \
([limits] context_window) and its cost is not shown; describe it under [models.\"{model}\"] in the config",
                info.context_window
            );
        }
        if let Some(c) = configured {
            info.known = true;
            if let Some(w) = c.context_window {
                info.context_window = w;
            }
            if let Some(o) = c.max_output_tokens {
                info.max_output_tokens = o;
            }
            if c.price.is_some() {
                info.price = c.price;
            }
            if let Some(images) = c.images {
                info.images = images;
            }
            if let Some(t) = &c.thinking {
                info.thinking = t.default_choice();
                info.think_form = t.form.or(info.think_form);
            }
        }
        info
    }

    /// What `usage` of `model` cost, USD; None when its price is unknown.
    pub(crate) fn cost(&self, model: &str, usage: &Usage) -> Option<f64> {
        self.lookup(model).price.map(|p| p.cost(usage))
    }

    /// What a conversation's own replies cost, each model's at its price
    /// (`/model` switches it); None when one of them has no known price.
    pub(crate) fn conversation_cost(
        &self,
        record: &crate::store::ConversationRecord,
    ) -> Option<f64> {
        self.pricing(record).cost_usd
    }

    /// What a conversation's own replies used and cost, in all and by
    /// model, and its model's window.
    pub(crate) fn pricing(&self, record: &crate::store::ConversationRecord) -> Pricing {
        let by_model: Vec<ModelCost> = record
            .usage_by_model()
            .into_iter()
            .map(|(model, usage)| ModelCost {
                cost_usd: self.cost(&model, &usage),
                model,
                usage,
            })
            .collect();
        Pricing {
            context_window: self.lookup(&record.model).context_window,
            cost_usd: by_model
                .iter()
                .try_fold(0.0, |sum, m| Some(sum + m.cost_usd?)),
            by_model,
        }
    }
}

/// What a conversation's own replies used and cost, and its model's
/// window (tokens).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Pricing {
    pub context_window: u64,
    /// The sum of `by_model`'s costs; None when one is unknown.
    pub cost_usd: Option<f64>,
    pub by_model: Vec<ModelCost>,
}

/// What one model's replies used and cost (None: its price is unknown).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ModelCost {
    pub model: String,
    pub usage: Usage,
    pub cost_usd: Option<f64>,
}

/// `model` without a provider prefix (`openai/…`) or a date or `-latest`
/// suffix.
fn base_name(model: &str) -> &str {
    let name = model.rsplit('/').next().unwrap_or(model);
    if let Some(stem) = name.strip_suffix("-latest") {
        return stem;
    }
    if let Some((stem, date)) = name.rsplit_once('-')
        && date.len() == 8
        && date.bytes().all(|b| b.is_ascii_digit())
    {
        return stem;
    }
    dated_openai(name).unwrap_or(name)
}

/// `gpt-4o-2024-08-06` → `gpt-4o`.
fn dated_openai(name: &str) -> Option<&str> {
    let cut = name.len().checked_sub(11)?;
    let date = name.get(cut..)?.as_bytes();
    let shaped = date[0] == b'-'
        && date[5] == b'-'
        && date[8] == b'-'
        && [1, 2, 3, 4, 6, 7, 9, 10]
            .iter()
            .all(|&i| date[i].is_ascii_digit());
    if shaped { name.get(..cut) } else { None }
}

fn table_entry(model: &str) -> Option<&'static Row> {
    let base = base_name(model);
    TABLE.iter().find(|(name, ..)| *name == base)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, output: u64, write: u64, read: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            cache_creation_input_tokens: write,
            cache_read_input_tokens: read,
        }
    }

    #[test]
    fn names_find_their_entry_with_or_without_date_and_prefix() {
        for name in [
            "claude-sonnet-4-5",
            "claude-sonnet-4-5-20250929",
            "claude-sonnet-4-5-latest",
            "anthropic/claude-sonnet-4-5",
        ] {
            assert_eq!(base_name(name), "claude-sonnet-4-5", "{name}");
        }
        assert_eq!(base_name("gpt-4o-2024-08-06"), "gpt-4o");
        assert_eq!(base_name("openai/gpt-4.1"), "gpt-4.1");
        assert_eq!(base_name("llama3.1:8b"), "llama3.1:8b");
        let models = Models::new(HashMap::new(), 100_000, 4_096);
        let sonnet = models.lookup("claude-sonnet-4-5-20250929");
        assert!(sonnet.known);
        assert_eq!(
            (sonnet.context_window, sonnet.max_output_tokens),
            (200_000, 64_000)
        );
    }

    #[test]
    fn cost_is_priced_per_kind_of_token_and_unknown_models_have_none() {
        let models = Models::new(HashMap::new(), 100_000, 4_096);
        // 1M input, 100k output, 200k cache write, 2M cache read of Sonnet 4.5:
        // 3 + 1.5 + 0.75 + 0.6.
        let cost = models
            .cost(
                "claude-sonnet-4-5",
                &usage(1_000_000, 100_000, 200_000, 2_000_000),
            )
            .unwrap();
        assert!((cost - 5.85).abs() < 1e-9, "{cost}");
        let local = models.lookup("llama3.1:8b");
        assert_eq!(
            local,
            ModelInfo {
                context_window: 100_000,
                max_output_tokens: 4_096,
                price: None,
                known: false,
                images: false,
                think_form: None,
                thinking: None,
            }
        );
        assert_eq!(models.cost("llama3.1:8b", &usage(1, 1, 0, 0)), None);
    }

    #[test]
    fn the_config_overrides_or_adds_entries() {
        let mut overrides = HashMap::new();
        overrides.insert(
            "llama3.1:8b".to_string(),
            ModelSection {
                context_window: Some(128_000),
                max_output_tokens: None,
                price: Some(Price {
                    input: 0.0,
                    output: 0.0,
                    cache_write: 0.0,
                    cache_read: 0.0,
                }),
                images: Some(true),
                thinking: Some(ThinkingSection {
                    budget_tokens: Some(4_000),
                    ..Default::default()
                }),
            },
        );
        overrides.insert(
            "claude-sonnet-4-5".to_string(),
            ModelSection {
                context_window: Some(1_000_000),
                ..Default::default()
            },
        );
        let models = Models::new(overrides, 100_000, 4_096);
        let local = models.lookup("llama3.1:8b");
        assert!(local.known);
        assert!(local.images, "the config says this model takes images");
        assert!(models.lookup("claude-sonnet-4-5").images);
        assert_eq!(
            (local.context_window, local.max_output_tokens),
            (128_000, 4_096)
        );
        assert_eq!(
            models.cost("llama3.1:8b", &usage(1000, 1000, 0, 0)),
            Some(0.0)
        );
        let sonnet = models.lookup("claude-sonnet-4-5-20250929");
        assert_eq!(sonnet.context_window, 1_000_000);
        assert_eq!(sonnet.price.map(|p| p.input), Some(3.0));
        assert_eq!(sonnet.think_form, Some(ThinkForm::Budget));
        assert_eq!(sonnet.thinking, None, "thinking is off unless configured");
        assert_eq!(local.thinking, Some(Thinking::Budget(4_000)));
        assert_eq!(local.think_form, None, "the provider's usual form");
    }

    #[test]
    fn a_thinking_section_reads_as_the_config_file_writes_it() {
        let read = |toml: &str| -> ModelSection { toml::from_str(toml).unwrap() };
        let s = read("thinking = { budget_tokens = 8000 }");
        assert_eq!(
            s.thinking.unwrap().default_choice(),
            Some(Thinking::Budget(8_000))
        );
        let s = read("thinking = { effort = \"high\", form = \"adaptive\" }");
        let t = s.thinking.unwrap();
        assert_eq!(t.default_choice(), Some(Thinking::Effort(Effort::High)));
        assert_eq!(t.form, Some(ThinkForm::Adaptive));
        let s = read("thinking = { enabled = false }");
        assert_eq!(s.thinking.unwrap().default_choice(), Some(Thinking::Off));
        assert!(toml::from_str::<ModelSection>("thinking = { budget = 1 }").is_err());
    }
}
