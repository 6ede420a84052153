//! `fork -n N`'s progress on a terminal: the children counted as they become ready, from a
//! `Watch` of the source's labels (and the fork's, which the children carry) opened before the
//! fork; without a terminal nothing is shown and no extra call is made. A caller who may not
//! watch (a token for one sandbox) still gets the bar with the time elapsed, filled at the end.

use std::collections::{BTreeMap, HashSet};
use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use sandboxd_client::{proto, Client, EventKind, WatchOptions};

pub struct ForkProgress {
    bar: ProgressBar,
    watch: Option<tokio::task::JoinHandle<()>>,
}

impl ForkProgress {
    /// A bar for `count` children of `source` (hidden when stderr is not a terminal).
    pub async fn start(client: &Client, source: &str, count: u32, labels: &[(String, String)]) -> Self {
        if !std::io::stderr().is_terminal() {
            return Self { bar: ProgressBar::hidden(), watch: None };
        }
        let bar = ProgressBar::new(u64::from(count)).with_style(
            ProgressStyle::with_template("{spinner} forking {pos}/{len} {bar:30} {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.enable_steady_tick(Duration::from_millis(100));
        let watch = follow(client, source, labels, bar.clone()).await;
        Self { bar, watch }
    }

    /// The fork answered with `forked` children: the bar gives way to one line saying so.
    pub fn finish(self, forked: usize) {
        self.stop();
        if self.bar.is_hidden() {
            return;
        }
        let elapsed = self.bar.elapsed();
        self.bar.finish_and_clear();
        eprintln!("forked {forked}/{} in {:.1}s", self.bar.length().unwrap_or(0), elapsed.as_secs_f64());
    }

    /// The fork failed: the bar goes (the error says what happened).
    pub fn fail(self) {
        self.stop();
        self.bar.finish_and_clear();
    }

    fn stop(&self) {
        if let Some(watch) = &self.watch {
            watch.abort();
        }
    }
}

/// Counts the READY events of sandboxes labelled like the children, other than the source.
async fn follow(
    client: &Client,
    source: &str,
    labels: &[(String, String)],
    bar: ProgressBar,
) -> Option<tokio::task::JoinHandle<()>> {
    let reference = proto::SandboxRef { sandbox_id: source.to_string(), ..Default::default() };
    let known = client.raw().connect(proto::ConnectRequest { sandbox: Some(reference) }).await.ok()?;
    let mut wanted: BTreeMap<String, String> = known.into_inner().sandbox?.metadata.into_iter().collect();
    wanted.extend(labels.iter().cloned());
    let options = WatchOptions { labels: wanted.into_iter().collect(), ..Default::default() };
    let mut events = client.watch(options).await.ok()?;
    let source = source.to_string();
    Some(tokio::spawn(async move {
        let mut ready = HashSet::new();
        while let Ok(Some(event)) = events.next().await {
            if event.kind == EventKind::Ready
                && event.sandbox_id != source
                && bar.position() < bar.length().unwrap_or(0)
                && ready.insert(event.sandbox_id)
            {
                bar.inc(1);
            }
        }
    }))
}
