//! Container states kept current by one `docker events` stream, so `Status` answers from
//! memory instead of one `docker inspect` per call.
//!
//! The stream starts on the first status question (no runtime is needed before). Each time
//! it (re)starts, one `docker ps -a` resynchronises the table; the events buffered meanwhile
//! are applied after it, in order, so the last word on each container wins. While the stream
//! is down the table says nothing and callers fall back to `inspect`.
//!
//! The same lines feed `Watch` ([`super::watch_events`]): one stream for every watcher. Events
//! while the stream is down (restarting after an error) are not told.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

use super::argv;
use super::cli::DockerCli;
use super::state::ContainerState;
use super::watch_events::Follower;
use crate::core::watch::EventHub;

/// How long to wait before restarting a stream that ended.
const RESTART_DELAY: Duration = Duration::from_secs(1);

/// Most destroyed names kept for `take_gone` between two drains (the sweep drains every few
/// seconds; past this the oldest half is dropped).
const GONE_MEMORY: usize = 65_536;

/// What the stream knows: `None` while it is (re)starting.
#[derive(Default)]
struct Table {
    states: Option<HashMap<String, ContainerState>>,
    /// The names known when the stream last ended: those missing from the next resync were
    /// removed while it was down.
    last_known: Option<Vec<String>>,
    /// Containers destroyed since the last `take_gone` (removed by anyone: this process, the
    /// sweep, another replica, `docker rm` from outside), so caches keyed by them are pruned.
    gone: Vec<String>,
}

impl Table {
    fn gone(&mut self, name: String) {
        if self.gone.len() >= GONE_MEMORY {
            self.gone.drain(..GONE_MEMORY / 2);
        }
        self.gone.push(name);
    }
}

/// The live table of owned containers' states.
pub struct StateWatch {
    cli: DockerCli,
    table: Arc<Mutex<Table>>,
    /// Where the same stream's lifecycle events go, for `Watch`.
    hub: Arc<EventHub>,
    task: OnceLock<tokio::task::JoinHandle<()>>,
}

impl StateWatch {
    pub fn new(cli: DockerCli) -> Self {
        Self { cli, table: Arc::default(), hub: Arc::default(), task: OnceLock::new() }
    }

    /// The state of `name` when the stream is up and knows it; `None` means "ask docker".
    pub fn state(&self, name: &str) -> Option<ContainerState> {
        self.ensure_started();
        self.lock().states.as_ref().and_then(|states| states.get(name).cloned())
    }

    /// Record a change this process made itself (pause, resume, remove), so a status asked
    /// right after it does not wait for the event. `None` forgets the container.
    pub fn record(&self, name: &str, state: Option<ContainerState>) {
        if let Some(states) = self.lock().states.as_mut() {
            match state {
                Some(state) => states.insert(name.to_string(), state),
                None => states.remove(name),
            };
        }
    }

    /// The containers destroyed since the last call (the stream runs once anything asked or
    /// `ensure_started` was called).
    pub fn take_gone(&self) -> Vec<String> {
        std::mem::take(&mut self.lock().gone)
    }

    /// Entries in the table now (for `cache_sizes`).
    pub fn size(&self) -> usize {
        self.lock().states.as_ref().map_or(0, HashMap::len)
    }

    /// The lifecycle events of owned containers (the stream runs once this was asked for).
    pub fn hub(&self) -> Arc<EventHub> {
        self.ensure_started();
        self.hub.clone()
    }

    pub fn ensure_started(&self) {
        self.task.get_or_init(|| {
            let (cli, table, hub) = (self.cli.clone(), self.table.clone(), self.hub.clone());
            tokio::spawn(async move {
                let mut follower = Follower::default();
                loop {
                    if let Err(e) = follow(&cli, &table, &hub, &mut follower).await {
                        tracing::warn!(error = %e, "docker events stream ended; status falls back to inspect");
                    }
                    hub.set_up(false);
                    {
                        let mut t = table.lock().unwrap_or_else(|p| p.into_inner());
                        t.last_known = t.states.take().map(|s| s.into_keys().collect());
                    }
                    tokio::time::sleep(RESTART_DELAY).await;
                }
            })
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for StateWatch {
    fn drop(&mut self) {
        if let Some(task) = self.task.get() {
            task.abort(); // drops the events client, which kills its process group
        }
    }
}

/// One life of the stream: start it, resynchronise, then apply events until it ends.
async fn follow(
    cli: &DockerCli,
    table: &Mutex<Table>,
    hub: &EventHub,
    follower: &mut Follower,
) -> Result<(), String> {
    let mut child = cli.spawn(&argv::events_args(), false, false).await.map_err(|e| e.to_string())?;
    let stdout = child.child.stdout.take().ok_or("no stdout pipe")?;
    let out = cli
        .run(&argv::owned_states_args(), Some(Duration::from_secs(30)), None)
        .await
        .map_err(|e| e.to_string())?;
    let states: HashMap<String, ContainerState> = out
        .stdout_text()
        .lines()
        .filter_map(|line| line.split_once('\t'))
        .map(|(name, state)| (name.trim_start_matches('/').to_string(), ContainerState::parse(state)))
        .collect();
    {
        let mut t = table.lock().unwrap_or_else(|p| p.into_inner());
        for name in t.last_known.take().unwrap_or_default() {
            if !states.contains_key(&name) {
                t.gone(name);
            }
        }
        t.states = Some(states);
    }
    hub.set_up(true);
    let mut lines = BufReader::new(stdout).lines();
    while let Some(line) = lines.next_line().await.map_err(|e| e.to_string())? {
        follower.line(hub, &line);
        if let Some(change) = parse_event(&line) {
            let mut t = table.lock().unwrap_or_else(|p| p.into_inner());
            if let Change::Gone(name) = &change {
                t.gone(name.clone());
            }
            if let Some(states) = t.states.as_mut() {
                apply(states, change);
            }
            drop(t);
        }
    }
    let _ = child.wait().await;
    Err("the stream closed".into())
}

/// What one event does to the table.
#[derive(Debug, PartialEq, Eq)]
enum Change {
    /// The container is now in this state.
    Now(String, ContainerState),
    /// The container is gone.
    Gone(String),
    /// The container took a new name (creates finish by renaming).
    Renamed { from: String, to: String },
}

/// A container event as a change of the table; events that change no state (exec_*, kill,
/// attach, ...) are `None`.
fn parse_event(line: &str) -> Option<Change> {
    let event: serde_json::Value = serde_json::from_str(line).ok()?;
    let action = event.get("Action").or_else(|| event.get("status"))?.as_str()?;
    let name = event.pointer("/Actor/Attributes/name")?.as_str()?.to_string();
    let state = match action {
        "create" => ContainerState::Created,
        "start" | "unpause" | "restart" => ContainerState::Running,
        "pause" => ContainerState::Paused,
        "die" | "stop" => ContainerState::Exited,
        "destroy" => return Some(Change::Gone(name)),
        "rename" => {
            let old = event.pointer("/Actor/Attributes/oldName")?.as_str()?;
            return Some(Change::Renamed { from: old.trim_start_matches('/').to_string(), to: name });
        }
        _ => return None,
    };
    Some(Change::Now(name, state))
}

fn apply(states: &mut HashMap<String, ContainerState>, change: Change) {
    match change {
        Change::Now(name, state) => {
            states.insert(name, state);
        }
        Change::Gone(name) => {
            states.remove(&name);
        }
        Change::Renamed { from, to } => {
            if let Some(state) = states.remove(&from) {
                states.insert(to, state);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_become_state_changes() {
        let ev = |action: &str| {
            format!(
                r#"{{"status":"{action}","Action":"{action}","Type":"container","Actor":{{"ID":"abc","Attributes":{{"name":"sandboxd-x","image":"i"}}}}}}"#
            )
        };
        let x = || "sandboxd-x".to_string();
        assert_eq!(parse_event(&ev("start")), Some(Change::Now(x(), ContainerState::Running)));
        assert_eq!(parse_event(&ev("pause")), Some(Change::Now(x(), ContainerState::Paused)));
        assert_eq!(parse_event(&ev("die")), Some(Change::Now(x(), ContainerState::Exited)));
        assert_eq!(parse_event(&ev("destroy")), Some(Change::Gone(x())));
        assert_eq!(parse_event(&ev("exec_start: sh -c true")), None);
        assert_eq!(parse_event("not json"), None);
        let renamed = r#"{"Action":"rename","Actor":{"Attributes":{"name":"sandboxd-x","oldName":"/sandboxd-creating-x"}}}"#;
        let change = parse_event(renamed).unwrap();
        assert_eq!(change, Change::Renamed { from: "sandboxd-creating-x".into(), to: x() });
        let mut states = HashMap::from([("sandboxd-creating-x".to_string(), ContainerState::Running)]);
        apply(&mut states, change);
        assert_eq!(states.get("sandboxd-x"), Some(&ContainerState::Running));
        assert!(!states.contains_key("sandboxd-creating-x"));
    }
}
