//! `sandboxctl prefetch IMAGE… [--node NODE…]`: images onto nodes before the tasks that need
//! them, a progress bar per image and node on a terminal, then one line per image and node.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::Duration;

use clap::Args;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use sandboxd_client::{is_final, Client, ImagePrefetchState, PrefetchStep};

use crate::error::CtlError;
use crate::Output;

#[derive(Debug, Args)]
pub struct PrefetchArgs {
    /// Images to make ready.
    #[arg(required = true)]
    images: Vec<String>,
    /// A node to make them ready on (repeatable; default: every node).
    #[arg(long = "node", short = 'n', value_name = "NODE")]
    nodes: Vec<String>,
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    output: Output,
}

fn state_word(state: ImagePrefetchState) -> &'static str {
    match state {
        ImagePrefetchState::Present => "present",
        ImagePrefetchState::Pulling => "pulling",
        ImagePrefetchState::Copying => "copying",
        ImagePrefetchState::Ready => "ready",
        ImagePrefetchState::Failed => "failed",
        ImagePrefetchState::Unspecified => "?",
    }
}

/// The bars, one per (image, node), hidden without a terminal.
struct Bars {
    multi: Option<MultiProgress>,
    bars: BTreeMap<(String, String), ProgressBar>,
}

impl Bars {
    fn new() -> Self {
        Self { multi: std::io::stderr().is_terminal().then(MultiProgress::new), bars: BTreeMap::new() }
    }

    fn show(&mut self, step: &PrefetchStep) {
        let Some(multi) = &self.multi else { return };
        let bar = self.bars.entry((step.image.clone(), step.node.clone())).or_insert_with(|| {
            let bar = multi.add(ProgressBar::new(0)).with_style(
                ProgressStyle::with_template("{spinner} {prefix} {msg} {bar:25} {bytes}/{total_bytes}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar.set_prefix(format!("{} on {}", step.image, step.node));
            bar.enable_steady_tick(Duration::from_millis(100));
            bar
        });
        bar.set_length(step.bytes_total.max(step.bytes_done));
        bar.set_position(step.bytes_done);
        let from = if step.source.is_empty() { String::new() } else { format!(" from {}", step.source) };
        bar.set_message(format!("{}{from}", state_word(step.state())));
        if is_final(step) {
            bar.finish_and_clear();
        }
    }

    fn clear(&self) {
        if let Some(multi) = &self.multi {
            let _ = multi.clear();
        }
    }
}

pub async fn prefetch(client: &Client, args: PrefetchArgs) -> Result<i32, CtlError> {
    let mut stream = client.prefetch_images(args.images, args.nodes).await?;
    let mut bars = Bars::new();
    let mut done = Vec::new();
    let result = loop {
        match stream.next().await {
            Ok(Some(step)) => {
                bars.show(&step);
                if is_final(&step) {
                    done.push(step);
                }
            }
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    bars.clear();
    result?;
    let failed = done.iter().filter(|s| s.state() == ImagePrefetchState::Failed).count();
    match args.output {
        Output::Json => {
            let rows: Vec<_> = done
                .iter()
                .map(|s| {
                    serde_json::json!({
                        "image": s.image, "node": s.node, "state": state_word(s.state()),
                        "bytes": s.bytes_total, "source": s.source, "error": s.error,
                    })
                })
                .collect();
            println!("{}", serde_json::Value::Array(rows));
        }
        Output::Table => {
            for s in &done {
                let from = if s.source.is_empty() { String::new() } else { format!(" from {}", s.source) };
                let error = if s.error.is_empty() { String::new() } else { format!(": {}", s.error) };
                println!("{}  {}  {}{from}{error}", s.image, s.node, state_word(s.state()));
            }
        }
    }
    Ok(if failed > 0 { 1 } else { 0 })
}
