//! What this node learnt of which node has which image (`images.rs` asks; a create reads it).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a create trusts what it learnt of a node's images (a present image rarely goes).
const PRESENT_FOR: Duration = Duration::from_secs(60);
const ABSENT_FOR: Duration = Duration::from_secs(2);

/// What this node learnt of which node has which image: (node id, image) → (when, present).
#[derive(Default)]
pub struct ImageCache(Mutex<HashMap<(String, String), (Instant, bool)>>);

impl ImageCache {
    pub(super) fn get(&self, node: &str, image: &str) -> Option<bool> {
        let cache = self.0.lock().ok()?;
        let (at, present) = cache.get(&(node.to_string(), image.to_string()))?;
        let fresh = at.elapsed() < if *present { PRESENT_FOR } else { ABSENT_FOR };
        fresh.then_some(*present)
    }

    pub(super) fn put(&self, node: &str, image: &str, present: bool) {
        if let Ok(mut cache) = self.0.lock() {
            cache.insert((node.to_string(), image.to_string()), (Instant::now(), present));
        }
    }
}
