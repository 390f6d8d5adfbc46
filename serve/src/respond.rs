//! How answers are written: JSON with a status code, the API server's `Status` bodies with the code they carry, and
//! streams.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// A JSON answer with `code`.
pub fn json_response(code: u16, body: &Value) -> Response {
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (code, body.to_string()).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A `Status` answer, with the code the body carries.
pub fn status_response(body: Value) -> Response {
    let code = body.get("code").and_then(Value::as_u64).and_then(|c| u16::try_from(c).ok()).unwrap_or(500);
    json_response(code, &body)
}

/// Headers every answer of a stream shares.
pub fn stream_headers(headers: &mut HeaderMap) {
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
}

pub fn body_response(body: Body) -> Response {
    let mut response = Response::new(body);
    stream_headers(response.headers_mut());
    response
}
