//! Argument shapes shared by the commands: `K=V`, durations, `ID:/path`.

/// `KEY=VALUE` (the value may hold `=`).
pub fn key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

/// A lifetime: `90` (seconds), `90s`, `30m`, `2h`, `1h30m`.
pub fn duration_s(s: &str) -> Result<f64, String> {
    let seconds = match s.parse::<f64>() {
        Ok(n) => n,
        Err(_) => humantime::parse_duration(s)
            .map_err(|e| format!("expected a duration such as 90s, 30m or 2h ({e})"))?
            .as_secs_f64(),
    };
    if seconds > 0.0 && seconds.is_finite() {
        Ok(seconds)
    } else {
        Err(format!("must be > 0 (got {s:?})"))
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
        assert_eq!(duration_s("90").unwrap(), 90.0);
        assert_eq!(duration_s("1h30m").unwrap(), 5400.0);
        assert!(duration_s("0").is_err() && duration_s("soon").is_err());
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
