//! Who may ask what. Without `--tokens` the API is open (it listens on
//! loopback by default). With them, every endpoint but `/ping` needs a
//! token — series, queries, the live tail, hosts (agents' addresses), SNMP
//! targets (the device inventory), profiles (process and symbol names),
//! `/metrics` and the dashboard alike — and only a writing token may write
//! (`/write`, `CREATE DATABASE`). The kinds are `access::Tokens`'s.
//!
//! The token is checked before anything of the request is read: an
//! anonymous client costs no body read, no decompression, no parse.

use std::collections::HashMap;

pub use access::{Access, Caller};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::ApiState;

/// The cookie `/login` sets, so a browser (whose `EventSource` cannot send
/// headers) carries the token on every request of the dashboard.
pub const COOKIE: &str = "kansoku_token";

const HOW: &str = "give a token: Authorization: Token T (or Bearer T, or Basic with the token as password), \
                   the p=T parameter on /write and /query, or open /login?token=T once in a browser";

/// Where a token is taken in the URL (`p=T`): InfluxDB 1.x's endpoints,
/// whose clients may send it so. Everywhere else a header carries it (a
/// token in a URL ends up in logs, histories and `Referer`s).
pub const URL_TOKEN_PATHS: [&str; 2] = ["/write", "/query"];

/// How a request's token came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Header,
    Url,
    /// The dashboard's cookie, which a browser attaches to requests other
    /// pages make too (cross-site request forgery).
    Cookie,
}

/// The token of a request and how it came: `Authorization: Token T` or
/// `Bearer T`, HTTP Basic with the token as password (InfluxDB clients'
/// username/password), the `p` parameter (where `url`), or the dashboard's
/// cookie.
fn credential_of(headers: &HeaderMap, params: &HashMap<String, String>, url: bool) -> Option<(String, Via)> {
    if let Some(v) = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        let (scheme, rest) = v.split_once(' ')?;
        return match scheme.to_ascii_lowercase().as_str() {
            "token" | "bearer" => Some((rest.trim().to_owned(), Via::Header)),
            "basic" => {
                use base64::Engine;
                let raw = base64::engine::general_purpose::STANDARD.decode(rest.trim()).ok()?;
                let text = String::from_utf8(raw).ok()?;
                Some((text.split_once(':')?.1.to_owned(), Via::Header))
            }
            _ => None,
        };
    }
    if url && let Some(p) = params.get("p") {
        return Some((p.clone(), Via::Url));
    }
    let cookies = headers.get_all(header::COOKIE).into_iter().filter_map(|v| v.to_str().ok());
    cookies
        .flat_map(|c| c.split(';'))
        .find_map(|c| c.trim().strip_prefix(COOKIE)?.strip_prefix('=').map(|t| (t.to_owned(), Via::Cookie)))
}

/// Whether a request's `Origin` (or, lacking one, `Sec-Fetch-Site`) says a
/// page of this server made it; `None` when the request says nothing of
/// where it comes from (a client that is not a browser).
fn same_origin(headers: &HeaderMap) -> Option<bool> {
    if let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
        let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
        let authority = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"));
        return Some(!host.is_empty() && authority == Some(host));
    }
    let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok())?;
    Some(matches!(site, "same-origin" | "none"))
}

/// The CSRF check of a state-changing request (a write, a load job, an
/// InfluxQL POST that may `CREATE DATABASE`): one a browser made from
/// another origin is refused, with or without tokens (a page on another
/// port of the same host could write, or start load jobs); one carried by
/// the dashboard's cookie must also say it comes from here. Reads are not
/// checked: without CORS headers another origin's page cannot read their
/// answers, and Grafana's browser access POSTs its queries.
fn forged(method: &axum::http::Method, path: &str, headers: &HeaderMap, via: Option<Via>) -> bool {
    if matches!(*method, axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::OPTIONS) {
        return false;
    }
    if !WRITE_PATHS.contains(&path) && path != "/query" {
        return false;
    }
    match same_origin(headers) {
        Some(same) => !same,
        None => via == Some(Via::Cookie),
    }
}

const CROSS_ORIGIN: &str = "a state-changing request from another origin (a page elsewhere, through this browser) is refused; \
     a request carried by the dashboard's cookie must come from the dashboard (its Origin or Sec-Fetch-Site)";

fn refuse(status: StatusCode, msg: String) -> Response {
    let mut r = (status, axum::Json(serde_json::json!({ "error": msg }))).into_response();
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
    }
    r
}

/// The middleware: passes a request with a good token on, with its
/// [`Caller`] in the request's extensions; answers 401 (no or an unknown
/// token) or 403 (a read-only token writing) before reading anything else.
/// The endpoints that store what they are sent: a read-only token may not.
/// (And the one that makes agents send traffic.)
pub const WRITE_PATHS: [&str; 3] = ["/write", "/prometheus/api/v1/write", "/api/v1/jobs/load"];

pub async fn require_token(State(st): State<ApiState>, mut req: Request, next: Next) -> Response {
    let refused = || st.auth_refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let Some(tokens) = st.tokens.as_ref().map(|f| f.get()) else {
        if forged(req.method(), req.uri().path(), req.headers(), None) {
            refused();
            return refuse(StatusCode::FORBIDDEN, CROSS_ORIGIN.into());
        }
        return next.run(req).await;
    };
    let path = req.uri().path();
    if path == "/ping" || path == "/login" {
        return next.run(req).await;
    }
    let params: HashMap<String, String> = req
        .uri()
        .query()
        .and_then(|q| {
            axum::extract::Query::<HashMap<String, String>>::try_from_uri(&format!("/?{q}").parse().ok()?).ok()
        })
        .map(|q| q.0)
        .unwrap_or_default();
    let Some((token, via)) = credential_of(req.headers(), &params, URL_TOKEN_PATHS.contains(&path)) else {
        refused();
        let why = if params.contains_key("p") {
            format!("a token in the URL (p=) is taken by {URL_TOKEN_PATHS:?} only; send it in a header")
        } else {
            "a token is required".into()
        };
        return refuse(StatusCode::UNAUTHORIZED, format!("authorization failed: {why}; {HOW}"));
    };
    if forged(req.method(), path, req.headers(), Some(via)) {
        refused();
        return refuse(StatusCode::FORBIDDEN, CROSS_ORIGIN.into());
    }
    let access = match tokens.access(&token) {
        Ok(a) => a.clone(),
        Err(why) => {
            st.auth_refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return refuse(StatusCode::UNAUTHORIZED, format!("authorization failed: {why}"));
        }
    };
    if access == Access::Read && WRITE_PATHS.contains(&path) {
        st.auth_refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return refuse(StatusCode::FORBIDDEN, "a read-only token cannot write".into());
    }
    req.extensions_mut().insert(Caller::new(&token, access));
    next.run(req).await
}

/// `GET /login?token=T`: checks the token, sets it as an HTTP-only cookie
/// and opens the dashboard; the way a browser signs in.
pub async fn login(
    State(st): State<ApiState>,
    axum::extract::Query(params): axum::extract::Query<HashMap<String, String>>,
) -> Response {
    let Some(tokens) = st.tokens.as_ref().map(|f| f.get()) else {
        return axum::response::Redirect::to("/").into_response();
    };
    let Some(token) = params.get("token") else {
        return refuse(StatusCode::BAD_REQUEST, "give the token: /login?token=T".into());
    };
    if let Err(why) = tokens.access(token) {
        st.auth_refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return refuse(StatusCode::UNAUTHORIZED, format!("authorization failed: {why}"));
    }
    let cookie = format!("{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict");
    let mut r = axum::response::Redirect::to("/").into_response();
    if let Ok(v) = header::HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}
