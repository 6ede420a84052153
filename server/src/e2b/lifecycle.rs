//! E2B's timeout lifecycle `on_timeout: pause` (`autoPause` of a create): at its timeout the
//! sandbox is paused (`Pause`: frozen with its memory) instead of ended, and kept paused until a
//! connect resumes it. The front-end holds a timer per such sandbox; sandboxd's own lease stays a
//! little past the timer (so a server that restarted and lost its timers ends the sandbox, as a
//! plain E2B timeout would), and is extended to [`PAUSED_LEASE`] once paused.
//! `autoResume` (a paused sandbox woken by traffic to its public host name) is not served: this
//! server has no public host names; a create asking for it is refused naming the field.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use sandboxd_proto::v1 as pb;
use serde::Deserialize;
use tonic::Status;

use super::inproc::request;
use super::inproc::Caller;
use super::E2bFront;

/// How long past its E2B timeout a sandbox's lease runs while the front-end's timer is to pause it.
pub const LEASE_MARGIN: Duration = Duration::from_secs(60);
/// How long a sandbox stays paused before its lease ends it (E2B keeps paused sandboxes for days).
pub const PAUSED_LEASE: Duration = Duration::from_secs(24 * 3600);

/// A create's lifecycle fields.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lifecycle {
    auto_pause: Option<bool>,
    auto_pause_memory: Option<bool>,
    auto_resume: Option<AutoResume>,
}

#[derive(Debug, Default, Deserialize)]
pub struct AutoResume {
    enabled: Option<bool>,
}

impl Lifecycle {
    /// Whether the timeout pauses; refuses what is not served, by field.
    pub fn pauses(&self) -> Result<bool, Status> {
        if self.auto_resume.as_ref().and_then(|a| a.enabled) == Some(true) {
            return Err(Status::invalid_argument(
                "autoResume.enabled: not served (a paused sandbox is woken by traffic to its public \
                 host name, which this server does not have); resume it with connect",
            ));
        }
        let pauses = self.auto_pause == Some(true);
        if pauses && self.auto_pause_memory == Some(false) {
            return Err(Status::invalid_argument(
                "autoPauseMemory: false (a filesystem-only pause that cold-boots on resume) is not \
                 served; a pause here keeps the sandbox's memory",
            ));
        }
        Ok(pauses)
    }
}

/// The pause timers, by sandbox.
#[derive(Default)]
pub struct Timers {
    by_sandbox: Mutex<HashMap<String, Timer>>,
}

struct Timer {
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Timer {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Whether `sandbox_id` pauses at its timeout.
pub fn pauses(front: &E2bFront, sandbox_id: &str) -> bool {
    front.inner.lifecycles.by_sandbox.lock().expect("timers").contains_key(sandbox_id)
}

/// (Re)arm `sandbox_id`'s pause `after` from now: its lease set to that plus [`LEASE_MARGIN`],
/// its timer replaced. `after` zero pauses it now.
pub async fn arm(front: &E2bFront, caller: &Caller, sandbox_id: &str, after: Duration) -> Result<(), Status> {
    if after.is_zero() {
        // Paused by the caller's own rights (`Pause`, `SetTimeout`), which also stops its timer.
        return pause_now(front, caller, sandbox_id).await;
    }
    let lease = (after + LEASE_MARGIN).as_secs_f64();
    let set = pb::SetTimeoutRequest { sandbox_id: sandbox_id.into(), ttl_s: lease };
    front.calls().set_timeout(request(caller, set)).await?;
    let task = {
        let front = front.clone();
        let caller = caller.clone();
        let id = sandbox_id.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            if let Err(e) = pause_now(&front, &caller, &id).await {
                if e.code() == tonic::Code::NotFound {
                    forget(&front, &id); // it ended some other way
                    return;
                }
                tracing::warn!(sandbox_id = %id, error = %e, "E2B auto-pause at the timeout failed");
            }
        })
    };
    let timer = Timer { task: Some(task) };
    front.inner.lifecycles.by_sandbox.lock().expect("timers").insert(sandbox_id.to_string(), timer);
    Ok(())
}

/// Pause it (if it runs) and keep it paused for [`PAUSED_LEASE`].
async fn pause_now(front: &E2bFront, caller: &Caller, sandbox_id: &str) -> Result<(), Status> {
    let status = front.status(caller, sandbox_id).await?;
    if status.status == pb::SandboxStatus::Running as i32 {
        front.pause_sandbox(caller, sandbox_id, &status).await?;
    }
    let keep = pb::SetTimeoutRequest { sandbox_id: sandbox_id.into(), ttl_s: PAUSED_LEASE.as_secs_f64() };
    front.calls().set_timeout(request(caller, keep)).await?;
    // Paused: no timer runs (a replaced one is aborted by its drop); it stays one that pauses,
    // resumed by a connect. One that was killed meanwhile is not put back.
    let mut timers = front.inner.lifecycles.by_sandbox.lock().expect("timers");
    if let Some(timer) = timers.get_mut(sandbox_id) {
        let previous = std::mem::replace(timer, Timer { task: None });
        drop(timers);
        drop(previous);
    }
    Ok(())
}

/// `sandbox_id` ended: its timer goes.
pub fn forget(front: &E2bFront, sandbox_id: &str) {
    front.inner.lifecycles.by_sandbox.lock().expect("timers").remove(sandbox_id);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lifecycle(json: &str) -> Lifecycle {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn a_pausing_lifecycle_is_taken_and_what_is_not_served_is_refused_by_field() {
        assert!(lifecycle(r#"{"autoPause": true}"#).pauses().unwrap());
        assert!(lifecycle(
            r#"{"autoPause": true, "autoPauseMemory": true, "autoResume": {"enabled": false}}"#
        )
        .pauses()
        .unwrap());
        assert!(!lifecycle("{}").pauses().unwrap());
        let resume =
            lifecycle(r#"{"autoPause": true, "autoResume": {"enabled": true}}"#).pauses().unwrap_err();
        assert!(resume.message().starts_with("autoResume.enabled"));
        let fs_only = lifecycle(r#"{"autoPause": true, "autoPauseMemory": false}"#).pauses().unwrap_err();
        assert!(fs_only.message().starts_with("autoPauseMemory"));
    }
}
