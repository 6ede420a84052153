//! Command lines for logs and errors, with `--env KEY=VALUE` values masked so secrets never leak.

/// Render `argv` for a log line or an error message, masking every env value.
pub fn masked(argv: &[String]) -> String {
    let mut out = Vec::with_capacity(argv.len());
    let mut mask_next = false;
    for tok in argv {
        if mask_next {
            out.push(match tok.split_once('=') {
                Some((key, _)) => format!("{key}=***"),
                None => tok.clone(),
            });
            mask_next = false;
            continue;
        }
        if let Some(rest) = tok.strip_prefix("--env=") {
            out.push(format!("--env={}=***", rest.split('=').next().unwrap_or_default()));
            continue;
        }
        mask_next = tok == "--env" || tok == "-e";
        out.push(tok.clone());
    }
    out.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn env_values_are_masked() {
        let argv =
            v(&["docker", "exec", "--env", "TOKEN=hunter2", "-e", "K=v=w", "--env=X=secret", "c", "sh"]);
        let out = masked(&argv);
        assert_eq!(out, "docker exec --env TOKEN=*** -e K=*** --env=X=*** c sh");
        assert!(!out.contains("hunter2") && !out.contains("secret"));
    }
}
