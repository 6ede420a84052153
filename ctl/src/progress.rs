//! A counted progress bar on a terminal (`create -n N`: the sandboxes as the server streams
//! them); hidden, and no extra work, when stderr is not a terminal.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

pub struct Counter {
    bar: ProgressBar,
}

impl Counter {
    /// `{spinner} <doing> {pos}/{len} {bar} {elapsed}` for `count` items.
    pub fn start(doing: &str, count: u32) -> Self {
        if !std::io::stderr().is_terminal() {
            return Self { bar: ProgressBar::hidden() };
        }
        let template = format!("{{spinner}} {doing} {{pos}}/{{len}} {{bar:30}} {{elapsed}}");
        let bar = ProgressBar::new(u64::from(count)).with_style(
            ProgressStyle::with_template(&template).unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.enable_steady_tick(Duration::from_millis(100));
        Self { bar }
    }

    pub fn inc(&self) {
        self.bar.inc(1);
    }

    /// Prints (`print` writes a line to stdout or stderr) above the bar, which is redrawn below.
    pub fn above<R>(&self, print: impl FnOnce() -> R) -> R {
        self.bar.suspend(print)
    }

    /// The call ended: the bar gives way to one line, `<done> N/M in T s[, F failed]`.
    pub fn finish(self, done: &str, failed: u64) {
        if self.bar.is_hidden() {
            return;
        }
        let (len, elapsed) = (self.bar.length().unwrap_or(0), self.bar.elapsed());
        let made = self.bar.position().saturating_sub(failed);
        self.bar.finish_and_clear();
        let failed = if failed > 0 { format!(", {failed} failed") } else { String::new() };
        eprintln!("{done} {made}/{len} in {:.1}s{failed}", elapsed.as_secs_f64());
    }

    /// The call failed: the bar goes (the error says what happened).
    pub fn fail(self) {
        self.bar.finish_and_clear();
    }
}
