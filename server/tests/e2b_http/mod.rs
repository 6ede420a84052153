//! A small client of the E2B endpoint (`server.e2b`) as the SDK speaks it, for suites that drive
//! it from Rust: the control plane (`POST /sandboxes`, `DELETE /sandboxes/{id}`), envd's files
//! (`/files`) and `process.Start` over Connect (a server stream of 5-byte envelopes), each
//! with a `traceparent` when one is given.

#![allow(dead_code)]

use bytes::{Buf, Bytes};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

/// An answer: its status and whole body.
pub struct Answer {
    pub status: u16,
    pub body: Bytes,
}

impl Answer {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// The endpoint at `addr` (`HOST:PORT`).
#[derive(Clone)]
pub struct E2b {
    pub addr: String,
}

/// A sandbox the control plane made: its id and envd's access token.
pub struct Made {
    pub id: String,
    pub token: String,
}

impl E2b {
    pub fn new(addr: impl Into<String>) -> Self {
        Self { addr: addr.into() }
    }

    /// One HTTP/1.1 request on a fresh connection.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, String)],
        content_type: &str,
        body: impl Into<Bytes>,
    ) -> Answer {
        let stream = tokio::net::TcpStream::connect(&self.addr).await.expect("connect to the E2B endpoint");
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.expect("HTTP handshake");
        tokio::spawn(connection);
        let mut request = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", &self.addr)
            .header("content-type", content_type);
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let request = request.body(Full::new(body.into())).unwrap();
        let response = sender.send_request(request).await.expect("an HTTP answer");
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.expect("the whole body").to_bytes();
        Answer { status, body }
    }

    /// `POST /sandboxes` of `template` with `api_key`.
    pub async fn create(&self, api_key: &str, template: &str, traceparent: Option<&str>) -> Made {
        let mut headers = vec![("x-api-key", api_key.to_string())];
        headers.extend(traceparent.map(|t| ("traceparent", t.to_string())));
        let body = serde_json::json!({ "templateID": template, "timeout": 300 }).to_string();
        let answer = self.call("POST", "/sandboxes", &headers, "application/json", body).await;
        assert_eq!(answer.status, 201, "POST /sandboxes: {}", answer.text());
        let made = answer.json();
        Made {
            id: made["sandboxID"].as_str().unwrap().to_string(),
            token: made["envdAccessToken"].as_str().unwrap().to_string(),
        }
    }

    /// `DELETE /sandboxes/{id}`.
    pub async fn kill(&self, api_key: &str, id: &str) -> Answer {
        self.call("DELETE", &format!("/sandboxes/{id}"), &[("x-api-key", api_key.to_string())], "", "").await
    }

    fn envd(made: &Made, traceparent: Option<&str>) -> Vec<(&'static str, String)> {
        let mut headers = vec![("e2b-sandbox-id", made.id.clone()), ("x-access-token", made.token.clone())];
        headers.extend(traceparent.map(|t| ("traceparent", t.to_string())));
        headers
    }

    /// `POST /files?path=` of `content`.
    pub async fn write(&self, made: &Made, path: &str, content: &[u8]) -> Answer {
        let headers = Self::envd(made, None);
        let uri = format!("/files?path={path}");
        self.call("POST", &uri, &headers, "application/octet-stream", content.to_vec()).await
    }

    /// `GET /files?path=`.
    pub async fn read(&self, made: &Made, path: &str) -> Answer {
        self.call("GET", &format!("/files?path={path}"), &Self::envd(made, None), "", "").await
    }

    /// A Connect unary call of envd's `service/method` with a JSON message.
    pub async fn unary(&self, made: &Made, method: &str, message: serde_json::Value) -> Answer {
        let uri = format!("/{method}");
        self.call("POST", &uri, &Self::envd(made, None), "application/json", message.to_string()).await
    }

    /// `process.Start` of `sh -c script` (`pty`: on a terminal): the stream's messages, read
    /// until it ends (the command's end).
    pub async fn run(
        &self,
        made: &Made,
        script: &str,
        pty: bool,
        traceparent: Option<&str>,
    ) -> Vec<serde_json::Value> {
        let mut start = serde_json::json!({ "process": { "cmd": "/bin/sh", "args": ["-c", script] } });
        if pty {
            start["pty"] = serde_json::json!({ "size": { "rows": 24, "cols": 80 } });
        }
        let text = start.to_string();
        let mut envelope = vec![0u8];
        envelope.extend_from_slice(&(text.len() as u32).to_be_bytes());
        envelope.extend_from_slice(text.as_bytes());
        let answer = self
            .call(
                "POST",
                "/process.Process/Start",
                &Self::envd(made, traceparent),
                "application/connect+json",
                envelope,
            )
            .await;
        assert_eq!(answer.status, 200, "process.Start: {}", answer.text());
        let mut body = answer.body;
        let mut messages = Vec::new();
        while body.remaining() >= 5 {
            let flags = body.get_u8();
            let len = body.get_u32() as usize;
            let message: serde_json::Value = serde_json::from_slice(&body[..len]).expect("a JSON envelope");
            body.advance(len);
            if flags & 0x02 != 0 {
                assert!(message.get("error").is_none(), "process.Start ended with {message}");
                break;
            }
            messages.push(message);
        }
        messages
    }
}

/// The output a `process.Start` stream carried (stdout and terminal bytes, base64 in JSON).
pub fn output(messages: &[serde_json::Value]) -> String {
    use base64::Engine;
    let mut out = Vec::new();
    for m in messages {
        let data = &m["event"]["data"];
        for key in ["stdout", "pty"] {
            if let Some(b64) = data[key].as_str() {
                out.extend(base64::engine::general_purpose::STANDARD.decode(b64).expect("base64"));
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A fresh sampled W3C `traceparent`, and its trace id and parent span id in hex.
pub fn traceparent() -> (String, String, String) {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let span = uuid::Uuid::new_v4().simple().to_string()[..16].to_string();
    (format!("00-{id}-{span}-01"), id, span)
}
