//! `docker exec` command lines (the exec engine's and the agent channel's).

use std::collections::BTreeMap;

use super::*;
use crate::config::DockerExecConfig;

/// Options of one `docker exec`.
#[derive(Debug, Clone, Default)]
pub struct ExecOptions<'a> {
    pub cwd: Option<&'a str>,
    pub env: Option<&'a BTreeMap<String, String>>,
    /// Already normalised (`root` -> `0`).
    pub user: Option<&'a str>,
    pub interactive: bool,
    pub tty: bool,
    /// Appended after all other `--env` flags (the PTY session marker).
    pub last_env: Option<&'a str>,
}

/// `docker exec [flags] NAME PROGRAM…`.
pub fn exec_args(
    cfg: &DockerExecConfig,
    name: &str,
    opts: &ExecOptions<'_>,
    program: &[String],
) -> Vec<String> {
    let mut a = vec![s("exec")];
    if opts.interactive {
        a.push(s("-i"));
    }
    if opts.tty {
        a.push(s("-t"));
    }
    if let Some(cwd) = opts.cwd {
        a.extend([s("-w"), s(cwd)]);
    }
    if let Some(env) = opts.env {
        // Names only: the values are in the client's environment (`exec_env`).
        for k in env.keys() {
            a.extend([s("--env"), exec_env_name(k)]);
        }
    }
    if let Some(user) = opts.user {
        a.extend([s("--user"), s(user)]);
    }
    a.extend(cfg.extra_exec_args.iter().cloned());
    if let Some(marker) = opts.last_env {
        a.extend([s("--env"), s(marker)]);
    }
    a.push(s(name));
    a.extend(program.iter().cloned());
    a
}

/// `<shell> -c <command>`.
pub fn shell_command(shell: &str, command: &str) -> Vec<String> {
    vec![s(shell), s("-c"), s(command)]
}

/// `docker exec -i -u 0 NAME AGENT serve`: the agent channel of a sandbox (its stdio); with
/// `relay`, `AGENT connect` (the stdio relayed to the `init` agent's socket inside the sandbox).
pub fn agent_serve_args(name: &str, agent_path: &str, relay: bool) -> Vec<String> {
    let mode = if relay { "connect" } else { "serve" };
    vec![s("exec"), s("-i"), s("-u"), s("0"), s(name), s(agent_path), s(mode)]
}
