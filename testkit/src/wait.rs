//! Waiting for something the daemon or a process does in its own time: polls with a bound, so a
//! hang fails the test with what was awaited instead of running into the harness's limit.

use std::time::{Duration, Instant};

/// Poll until `done`, failing past `within` with `what`.
pub async fn eventually(within: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what} (waited {within:?})");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Poll the async `check` every 250 ms until it gives a value, failing past `within` with `what`
/// and the last thing `check` said (`Err`).
pub async fn until<T, F, Fut>(within: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + within;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(last) => assert!(Instant::now() < deadline, "{what} (waited {within:?}; last: {last})"),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Polls `check` every 100 ms until it holds (`Some`) or `within` passes (`None`); blocks the
/// thread (for code outside a runtime, and for callers that report the failure themselves).
pub fn wait_until(within: Duration, mut check: impl FnMut() -> bool) -> Option<()> {
    let end = Instant::now() + within;
    loop {
        if check() {
            return Some(());
        }
        if Instant::now() > end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Read a byte stream (a terminal's output) with `read`, given the time left, until the text
/// seen contains `needle`; returns that text. Fails the test on the end of the stream (an empty
/// chunk), a read error or `within` passing, with what was seen.
pub async fn read_until<F, Fut, E>(needle: &str, within: Duration, mut read: F) -> String
where
    F: FnMut(Duration) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<u8>, E>>,
    E: std::fmt::Display,
{
    let deadline = Instant::now() + within;
    let mut seen = Vec::new();
    loop {
        let text = String::from_utf8_lossy(&seen);
        if text.contains(needle) {
            return text.into_owned();
        }
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "never saw {needle:?} within {within:?}; saw {text:?}");
        match read(left).await {
            Ok(chunk) if chunk.is_empty() => panic!("EOF before {needle:?}; saw {text:?}"),
            Ok(chunk) => seen.extend_from_slice(&chunk),
            Err(e) => panic!("{e} before {needle:?}; saw {text:?}"),
        }
    }
}
