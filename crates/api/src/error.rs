//! The one error type of the API: every failure is a status code and a JSON
//! body `{"error": "..."}` saying what was wrong and how to fix it.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

#[derive(Debug)]
pub enum ApiError {
    /// The request is malformed: a bad selector, duration, time or parameter.
    BadRequest(String),
    /// The caller's token does not allow this.
    Forbidden(String),
    NotFound,
    /// The query is valid but too large.
    TooLarge(String),
    /// A bug or an environment failure on our side.
    Internal(String),
    /// What was asked for does not run here, or did not answer in time.
    Unavailable(String),
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiError::BadRequest(m)
            | ApiError::Forbidden(m)
            | ApiError::TooLarge(m)
            | ApiError::Internal(m)
            | ApiError::Unavailable(m) => f.write_str(m),
            ApiError::NotFound => f.write_str("no such endpoint; see /"),
        }
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound => StatusCode::NOT_FOUND,
            ApiError::TooLarge(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        (status, Json(serde_json::json!({ "error": self.to_string() }))).into_response()
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
