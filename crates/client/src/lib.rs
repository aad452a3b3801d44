//! A client of kansoku's HTTP API (`docs/api.md`): what `kansoku query
//! --server`, `kansoku series --server` and the lab's experiments use to ask
//! a running kansoku. One GET (or POST) of a JSON document, the server's
//! `{"error"}` bodies turned into errors that say what the server said.

use anyhow::{Context, bail};

/// An HTTP agent that answers error statuses as responses (their bodies
/// say why), not as errors.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).build().into()
}

/// GETs a JSON document from a kansoku server at `base` (`http://host:port`),
/// turning its `{"error"}` bodies into errors.
pub fn get_json(base: &str, path: &str, params: &[(&str, &str)]) -> anyhow::Result<serde_json::Value> {
    let url = format!("{}{path}", base.trim_end_matches('/'));
    let mut req = agent().get(&url);
    for (k, v) in params {
        req = req.query(*k, *v);
    }
    let resp = req.call().with_context(|| format!("GET {url}: is kansoku running there?"))?;
    read_json("GET", &url, resp)
}

/// POSTs `body` as JSON to a kansoku server at `base` and reads its JSON
/// answer, as [`get_json`].
pub fn post_json(base: &str, path: &str, body: &serde_json::Value) -> anyhow::Result<serde_json::Value> {
    let url = format!("{}{path}", base.trim_end_matches('/'));
    let resp = agent()
        .post(&url)
        .header("content-type", "application/json")
        .send(serde_json::to_vec(body)?.as_slice())
        .with_context(|| format!("POST {url}: is kansoku running there?"))?;
    read_json("POST", &url, resp)
}

fn read_json(method: &str, url: &str, mut resp: ureq::http::Response<ureq::Body>) -> anyhow::Result<serde_json::Value> {
    let status = resp.status();
    let text = resp
        .body_mut()
        .with_config()
        .limit(1 << 30)
        .read_to_string()
        .with_context(|| format!("{method} {url}: reading response"))?;
    let body: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{method} {url}: response is not JSON"))?;
    if !status.is_success() {
        let msg = body.get("error").and_then(|e| e.as_str()).unwrap_or("unknown error");
        bail!("server answered {status}: {msg}");
    }
    Ok(body)
}

/// Percent-encodes `s` for a URL's query (every byte but the unreserved).
pub fn escape(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
