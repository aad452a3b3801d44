//! The one error type of the API: every failure is a status code and a JSON
//! body `{"error": "..."}` saying what was wrong and how to fix it.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

#[derive(Debug)]
pub enum ApiError {
    /// The request is malformed: a bad selector, duration, time or parameter.
    BadRequest(String),
    NotFound,
    /// The query is valid but too large.
    TooLarge(String),
    /// A bug or an environment failure on our side.
    Internal(String),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, msg) = match self {
            ApiError::BadRequest(m) => (StatusCode::BAD_REQUEST, m),
            ApiError::NotFound => (StatusCode::NOT_FOUND, "no such endpoint; see /".to_owned()),
            ApiError::TooLarge(m) => (StatusCode::UNPROCESSABLE_ENTITY, m),
            ApiError::Internal(m) => (StatusCode::INTERNAL_SERVER_ERROR, m),
        };
        (status, Json(serde_json::json!({ "error": msg }))).into_response()
    }
}

impl From<store::query::QueryError> for ApiError {
    fn from(e: store::query::QueryError) -> ApiError {
        use store::query::QueryError as Q;
        match e {
            Q::TooManySeries(_) | Q::TooManyCells(_) => ApiError::TooLarge(e.to_string()),
            _ => ApiError::BadRequest(e.to_string()),
        }
    }
}
