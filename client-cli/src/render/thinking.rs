//! How the model's reasoning is shown: collapsed to one dimmed line by
//! default (`✻ thinking… 3.2s`, redrawn in place on a terminal, where it
//! ends as `✻ thought for 3.2s`), or whole and dimmed in the transcript
//! view (`agent show`). `--json` and ACP carry the text whole either way.

use std::time::{Duration, Instant};

/// Redraws of the in-place line are at least this far apart.
const REDRAW: Duration = Duration::from_millis(100);

/// The state of the thinking line.
#[derive(Debug, Default)]
pub(super) struct ThinkingLine {
    /// Shown whole (the transcript view) instead of collapsed.
    pub(super) expanded: bool,
    /// The line may be redrawn in place (a terminal).
    pub(super) in_place: bool,
    /// When the block being streamed began, and when its line was last
    /// drawn.
    started: Option<(Instant, Instant)>,
}

impl ThinkingLine {
    /// A block begins at `now`: the line to show.
    pub(super) fn begin(&mut self, now: Instant) -> &'static str {
        self.started = Some((now, now));
        "✻ thinking…"
    }

    /// More of the block at `now`: the line to draw over the old one, when
    /// it is redrawn in place and is due.
    pub(super) fn more(&mut self, now: Instant) -> Option<String> {
        let (start, drawn) = self.started.as_mut()?;
        if !self.in_place || now.duration_since(*drawn) < REDRAW {
            return None;
        }
        *drawn = now;
        Some(format!(
            "✻ thinking… {}",
            seconds(now.duration_since(*start))
        ))
    }

    /// The block ended at `now`: the line's last form, when it is redrawn
    /// in place.
    pub(super) fn end(&mut self, now: Instant) -> Option<String> {
        let (start, _) = self.started.take()?;
        self.in_place
            .then(|| format!("✻ thought for {}", seconds(now.duration_since(start))))
    }
}

fn seconds(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_counts_seconds_only_in_place_and_not_too_often() {
        let t0 = Instant::now();
        let mut line = ThinkingLine::default();
        assert_eq!(line.begin(t0), "✻ thinking…");
        assert_eq!(line.more(t0 + Duration::from_secs(2)), None, "not in place");
        assert_eq!(line.end(t0 + Duration::from_secs(3)), None);
        let mut line = ThinkingLine {
            in_place: true,
            ..Default::default()
        };
        line.begin(t0);
        assert_eq!(line.more(t0 + Duration::from_millis(50)), None, "too soon");
        assert_eq!(
            line.more(t0 + Duration::from_millis(3_200)).as_deref(),
            Some("✻ thinking… 3.2s")
        );
        assert_eq!(line.more(t0 + Duration::from_millis(3_250)), None);
        assert_eq!(
            line.end(t0 + Duration::from_millis(4_000)).as_deref(),
            Some("✻ thought for 4.0s")
        );
        assert_eq!(line.end(t0), None, "ended once");
    }
}
