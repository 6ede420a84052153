//! What the end of a run asserts about Docker, scoped by the run's own label: which containers
//! exist, and which processes run inside the sandboxes clients still hold.

use std::process::{Command, Stdio};

fn docker(args: &[&str]) -> Result<String, String> {
    let out = Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("docker {args:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("docker {args:?}: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// One container of this run: its name and whether it runs.
#[derive(Debug, Clone)]
pub struct Container {
    pub name: String,
    pub running: bool,
}

/// Every container (running or not) carrying `label` (`KEY=VALUE`).
pub fn containers(label: &str) -> Vec<Container> {
    let filter = format!("label={label}");
    docker(&["ps", "-a", "--filter", &filter, "--format", "{{.Names}}\t{{.State}}"])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (name, state) = l.split_once('\t')?;
            Some(Container { name: name.to_string(), running: state == "running" })
        })
        .collect()
}

/// `docker kill` one container; whether it worked.
pub fn kill(name: &str) -> bool {
    docker(&["kill", name]).is_ok()
}

/// Removes every container carrying `label` (this run's own; never anyone else's).
pub fn remove_all(label: &str) {
    let names: Vec<String> = containers(label).into_iter().map(|c| c.name).collect();
    if !names.is_empty() {
        let mut args = vec!["rm", "-f"];
        args.extend(names.iter().map(String::as_str));
        let _ = docker(&args);
    }
}

/// Whether a process inside a sandbox is one the sandbox is meant to have: the init, the
/// keep-alive loop and its sleep, or an in-container agent.
fn expected_process(args: &str) -> bool {
    args.contains("docker-init")
        || args.starts_with("/dev/init")
        || args.contains("tini")
        || args.contains("sleep 2147483647")
        || args.contains("/.sandboxd/agent")
        || args.contains("sandboxd-agent")
}

/// The processes of a running sandbox that are none of the expected ones.
pub fn stray_processes(name: &str) -> Result<Vec<String>, String> {
    let out = docker(&["top", name, "-eo", "pid,args"])?;
    Ok(out
        .lines()
        .skip(1)
        .filter_map(|l| {
            let l = l.trim();
            let (_pid, args) = l.split_once(char::is_whitespace)?;
            let args = args.trim();
            (!expected_process(args)).then(|| format!("{name}: {args}"))
        })
        .collect())
}
