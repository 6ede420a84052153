//! Argument shapes shared by the commands: `K=V`, durations, `ID:/path`.

/// `KEY=VALUE` (the value may hold `=`).
pub fn key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

/// The units a duration may carry (humantime's names; the first of each is the short one).
pub const DURATION_UNITS: &str = "s (seconds), m (minutes), h (hours), d (days)";

/// A duration with a unit: `90s`, `30m`, `2h`, `1h30m`. A bare number is refused: `--ttl 30`
/// could mean seconds or minutes, and a guess is a sandbox that dies early or lives on.
pub fn duration_s(s: &str) -> Result<f64, String> {
    if s.trim().parse::<f64>().is_ok() {
        return Err(format!("{s:?} has no unit; use one of {DURATION_UNITS}, for example 90s, 30m or 1h30m"));
    }
    let seconds = humantime::parse_duration(s)
        .map_err(|e| format!("expected a duration with a unit ({DURATION_UNITS}), such as 90s or 30m ({e})"))?
        .as_secs_f64();
    if seconds > 0.0 && seconds.is_finite() {
        Ok(seconds)
    } else {
        Err(format!("must be > 0 (got {s:?})"))
    }
}

/// A memory size in MiB: `512m`, `2g` (also `512MiB`, `2GiB`, `512mb`). A bare number is
/// refused, as `docker run --memory 512` (bytes) would surprise.
pub fn memory_mib(s: &str) -> Result<u64, String> {
    const UNITS: &str = "m (MiB) or g (GiB), for example 512m or 2g";
    let lower = s.trim().to_ascii_lowercase();
    let split = lower.find(|c: char| !c.is_ascii_digit()).unwrap_or(lower.len());
    let (digits, unit) = lower.split_at(split);
    let n: u64 = digits.parse().map_err(|_| format!("expected a size such as 512m or 2g, got {s:?}"))?;
    let mib = match unit {
        "" => return Err(format!("{s:?} has no unit; use {UNITS}")),
        "m" | "mb" | "mib" => Some(n),
        "g" | "gb" | "gib" => n.checked_mul(1024),
        _ => return Err(format!("unknown unit {unit:?} in {s:?}; use {UNITS}")),
    };
    match mib {
        Some(m) if m > 0 => Ok(m),
        Some(_) => Err(format!("must be > 0 (got {s:?})")),
        None => Err(format!("{s:?} is too large")),
    }
}

/// A size in bytes with a unit (`64m`, `1g`), for `--shm-size`.
pub fn size_bytes(s: &str) -> Result<u64, String> {
    memory_mib(s)?.checked_mul(1 << 20).ok_or_else(|| format!("{s:?} is too large"))
}

/// `NAME:TARGET` or `NAME:TARGET:ro` (`--volume`): a named volume of the server, never a host
/// path (a NAME starting with `/` or `.` is refused here, before any call).
pub fn named_volume(s: &str) -> Result<(String, String, bool), String> {
    let usage = "expected NAME:TARGET or NAME:TARGET:ro (a named volume of the server)";
    let (name, rest) = s.split_once(':').ok_or_else(|| format!("{usage}, got {s:?}"))?;
    if name.starts_with('/') || name.starts_with('.') || name.is_empty() {
        return Err(format!(
            "{name:?} is a path: --volume takes a volume name, host paths are never mounted"
        ));
    }
    let (target, read_only) = match rest.rsplit_once(':') {
        Some((target, "ro")) => (target, true),
        Some((target, "rw")) => (target, false),
        _ => (rest, false),
    };
    if !target.starts_with('/') {
        return Err(format!("{usage}; TARGET must be an absolute path, got {target:?}"));
    }
    Ok((name.to_string(), target.to_string(), read_only))
}

/// A CPU count > 0 (`--cpu 1.5`, as `docker run --cpus`).
pub fn cpus(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(n) if n > 0.0 && n.is_finite() => Ok(n),
        _ => Err(format!("expected a CPU count > 0 such as 1 or 0.5, got {s:?}")),
    }
}

/// One side of `cp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// `-`: stdin or stdout.
    Std,
    /// A local path.
    Local(std::path::PathBuf),
    /// `ID:/path` in a sandbox.
    Remote { sandbox_id: String, path: String },
}

/// `ID:/path` is remote (a `:` before any `/`, as `docker cp` reads it); `-` is stdio.
pub fn location(s: &str) -> Location {
    if s == "-" {
        return Location::Std;
    }
    match s.split_once(':') {
        Some((id, path)) if !id.is_empty() && !id.contains('/') => {
            Location::Remote { sandbox_id: id.to_string(), path: path.to_string() }
        }
        _ => Location::Local(s.into()),
    }
}

/// `exec`'s command line: one argument is a shell command line as is; several are an argv,
/// shell-quoted and joined so the sandbox's shell runs exactly that argv.
pub fn command_line(args: &[String]) -> Result<String, String> {
    match args {
        [] => Err("a command is required after --".into()),
        [one] => Ok(one.clone()),
        many => shlex::try_join(many.iter().map(String::as_str))
            .map_err(|e| format!("cannot quote the command: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        assert_eq!(key_value("a=b=c").unwrap(), ("a".into(), "b=c".into()));
        assert!(key_value("=x").is_err() && key_value("x").is_err());
        assert_eq!(duration_s("30m").unwrap(), 1800.0);
        assert_eq!(duration_s("90s").unwrap(), 90.0);
        assert_eq!(duration_s("1h30m").unwrap(), 5400.0);
        assert!(duration_s("0s").is_err() && duration_s("soon").is_err());
        let bare = duration_s("30").unwrap_err();
        assert!(
            bare.contains("no unit") && bare.contains("s (seconds)") && bare.contains("m (minutes)"),
            "{bare}"
        );
        assert_eq!(memory_mib("512m").unwrap(), 512);
        assert_eq!(memory_mib("2G").unwrap(), 2048);
        assert_eq!(memory_mib("64MiB").unwrap(), 64);
        assert!(memory_mib("512").unwrap_err().contains("no unit"));
        assert!(memory_mib("1t").is_err() && memory_mib("0m").is_err() && memory_mib("m").is_err());
        assert_eq!(cpus("0.5").unwrap(), 0.5);
        assert!(cpus("0").is_err() && cpus("x").is_err());
        assert_eq!(location("-"), Location::Std);
        assert_eq!(location("./a:b"), Location::Local("./a:b".into()));
        assert_eq!(
            location("sbx:/tmp/x"),
            Location::Remote { sandbox_id: "sbx".into(), path: "/tmp/x".into() }
        );
    }

    #[test]
    fn several_arguments_are_quoted_as_an_argv() {
        let argv: Vec<String> = ["sh", "-c", "echo hi; exit 3"].iter().map(|s| s.to_string()).collect();
        assert_eq!(command_line(&argv).unwrap(), "sh -c 'echo hi; exit 3'");
        assert_eq!(command_line(&["echo $HOME".into()]).unwrap(), "echo $HOME");
        assert!(command_line(&[]).is_err());
    }
}
