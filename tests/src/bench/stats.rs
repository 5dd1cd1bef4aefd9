//! Numbers: samples, their median/min/max, targets, and how a scenario's
//! results are printed (a table for people, one JSON line for scripts).

use serde_json::{Value, json};

/// A target a metric is held to.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    /// The median must be at most this.
    AtMost(f64),
    /// The median must be at least this.
    AtLeast(f64),
}

impl Target {
    fn met(self, value: f64) -> bool {
        match self {
            Target::AtMost(t) => value <= t,
            Target::AtLeast(t) => value >= t,
        }
    }

    fn text(self, unit: &str) -> String {
        match self {
            Target::AtMost(t) => format!("≤ {} {unit}", fmt_num(t)),
            Target::AtLeast(t) => format!("≥ {} {unit}", fmt_num(t)),
        }
    }
}

/// One measured quantity: one sample per run.
#[derive(Debug, Clone)]
pub struct Metric {
    /// Stable key for JSON (`think_overhead_ms`).
    pub key: String,
    /// What it is, for people.
    pub label: String,
    /// Unit shown after the numbers.
    pub unit: String,
    /// One value per run.
    pub samples: Vec<f64>,
    /// The target, if the issue sets one.
    pub target: Option<Target>,
}

impl Metric {
    /// A metric without a target.
    pub fn new(key: &str, label: &str, unit: &str) -> Metric {
        Metric {
            key: key.to_string(),
            label: label.to_string(),
            unit: unit.to_string(),
            samples: Vec::new(),
            target: None,
        }
    }

    /// Sets the target.
    pub fn target(mut self, target: Target) -> Metric {
        self.target = Some(target);
        self
    }

    /// Adds one run's value.
    pub fn push(&mut self, value: f64) {
        self.samples.push(value);
    }

    /// The median of the samples (NaN when there are none).
    pub fn median(&self) -> f64 {
        let mut s = self.samples.clone();
        s.sort_by(f64::total_cmp);
        median_sorted(&s)
    }

    fn min(&self) -> f64 {
        self.samples.iter().copied().fold(f64::NAN, f64::min)
    }

    fn max(&self) -> f64 {
        self.samples.iter().copied().fold(f64::NAN, f64::max)
    }

    /// "met" / "NOT met" / "" (no target).
    pub fn verdict(&self) -> &'static str {
        match self.target {
            Some(t) if t.met(self.median()) => "met",
            Some(_) => "NOT met",
            None => "",
        }
    }
}

/// The median of sorted values.
pub fn median_sorted(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// The `p`-th percentile (0..=100) of sorted values, nearest rank.
pub fn percentile_sorted<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Formats a number with about four significant digits.
pub fn fmt_num(v: f64) -> String {
    if v.is_nan() {
        return "-".to_string();
    }
    let a = v.abs();
    if a >= 100_000.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else if a == 0.0 {
        "0".to_string()
    } else {
        format!("{v:.3}")
    }
}

/// What a scenario found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The scenario's name (`tool-rounds`).
    pub scenario: String,
    /// Measured quantities, in display order.
    pub metrics: Vec<Metric>,
    /// Facts that are not numbers per run (settings, observations).
    pub notes: Vec<String>,
}

impl Report {
    /// An empty report for `scenario`.
    pub fn new(scenario: &str) -> Report {
        Report {
            scenario: scenario.to_string(),
            ..Report::default()
        }
    }

    /// Adds a metric and returns its index.
    pub fn add(&mut self, metric: Metric) -> usize {
        self.metrics.push(metric);
        self.metrics.len() - 1
    }

    /// Adds one value to the metric `key`, creating it (without a target)
    /// on first use.
    pub fn sample(&mut self, key: &str, label: &str, unit: &str, value: f64) {
        match self.metrics.iter_mut().find(|m| m.key == key) {
            Some(m) => m.push(value),
            None => {
                let mut m = Metric::new(key, label, unit);
                m.push(value);
                self.metrics.push(m);
            }
        }
    }

    /// Sets the target of the metric `key` (if it exists).
    pub fn set_target(&mut self, key: &str, target: Target) {
        if let Some(m) = self.metrics.iter_mut().find(|m| m.key == key) {
            m.target = Some(target);
        }
    }

    /// Adds a note.
    pub fn note(&mut self, text: impl Into<String>) {
        self.notes.push(text.into());
    }

    /// The table, as Markdown (readable in a terminal and pasteable into
    /// BENCHMARKS.md).
    pub fn table(&self) -> String {
        let mut out = format!("### {}\n\n", self.scenario);
        out.push_str("| metric | median | min | max | runs | target | |\n");
        out.push_str("|---|---:|---:|---:|---:|---|---|\n");
        for m in &self.metrics {
            let target = m.target.map(|t| t.text(&m.unit)).unwrap_or_default();
            out.push_str(&format!(
                "| {} ({}) | {} | {} | {} | {} | {} | {} |\n",
                m.label,
                m.unit,
                fmt_num(m.median()),
                fmt_num(m.min()),
                fmt_num(m.max()),
                m.samples.len(),
                target,
                m.verdict()
            ));
        }
        if !self.notes.is_empty() {
            out.push('\n');
            for n in &self.notes {
                out.push_str(&format!("- {n}\n"));
            }
        }
        out
    }

    /// One JSON object.
    pub fn json(&self) -> Value {
        let metrics: serde_json::Map<String, Value> = self
            .metrics
            .iter()
            .map(|m| {
                let mut v = json!({
                    "unit": m.unit,
                    "median": finite(m.median()),
                    "min": finite(m.min()),
                    "max": finite(m.max()),
                    "samples": m.samples.iter().map(|s| finite(*s)).collect::<Vec<_>>(),
                });
                if let Some(t) = m.target {
                    v["target"] = json!(t.text(&m.unit));
                    v["met"] = json!(m.verdict() == "met");
                }
                (m.key.clone(), v)
            })
            .collect();
        json!({"scenario": self.scenario, "metrics": metrics, "notes": self.notes})
    }
}

fn finite(v: f64) -> Value {
    if v.is_finite() { json!(v) } else { Value::Null }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_medians() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile_sorted(&v, 50.0), Some(50));
        assert_eq!(percentile_sorted(&v, 99.0), Some(99));
        assert_eq!(percentile_sorted(&v, 100.0), Some(100));
        assert_eq!(percentile_sorted::<u32>(&[], 50.0), None);
        assert_eq!(median_sorted(&[1.0, 2.0, 3.0, 4.0]), 2.5);
        let mut m = Metric::new("k", "l", "ms").target(Target::AtMost(2.0));
        m.push(3.0);
        m.push(1.0);
        m.push(2.0);
        assert_eq!(m.median(), 2.0);
        assert_eq!(m.verdict(), "met");
    }
}
