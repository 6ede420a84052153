//! The `server.console` section: the optional web console (`crate::console`).

use std::net::SocketAddr;

use serde::Deserialize;

/// `server.console`. Without `listen` nothing is served.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsoleSection {
    /// Address of the console's HTTP listener (the page, its JSON API and WebSockets); `null`: off.
    pub listen: Option<SocketAddr>,
}

#[cfg(test)]
mod tests {
    use crate::config::FileConfig;

    #[test]
    fn console_is_off_unless_configured() {
        let parse =
            |server: &str| FileConfig::from_text(&format!(r#"{{"server": {{"console": {server}}}}}"#), false);
        assert!(parse("{}").unwrap().server.console.listen.is_none());
        let on = parse(r#"{"listen": "127.0.0.1:8088"}"#).unwrap();
        assert_eq!(on.server.console.listen.unwrap().port(), 8088);
        let bad = parse(r#"{"listen": "nowhere"}"#).unwrap_err().to_string();
        assert!(bad.contains("listen"), "{bad}");
        let unknown = parse(r#"{"port": 1}"#).unwrap_err().to_string();
        assert!(unknown.contains("port"), "{unknown}");
    }
}
