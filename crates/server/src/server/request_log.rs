//! The request span of every HTTP request, and the one event at its end that an answer worth
//! an operator's attention gets: a 5xx at ERROR. A 4xx is the client's mistake, answered
//! precisely in the problem body and counted in `gpuledger_http_requests_total`; it is logged
//! at DEBUG, so a fuzzer or a misconfigured agent cannot fill the log with warnings.

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::Error;
use tracing::Span;
use tracing_actix_web::{DefaultRootSpanBuilder, RootSpanBuilder};

/// [`DefaultRootSpanBuilder`]'s span and fields, with our levels for the closing event.
pub struct RequestSpan;

impl RootSpanBuilder for RequestSpan {
    fn on_request_start(request: &ServiceRequest) -> Span {
        DefaultRootSpanBuilder::on_request_start(request)
    }

    fn on_request_end<B: MessageBody>(span: Span, outcome: &Result<ServiceResponse<B>, Error>) {
        let failed = match outcome {
            Ok(response) => response
                .response()
                .error()
                .map(|e| (response.status(), e.to_string())),
            Err(e) => Some((e.as_response_error().status_code(), e.to_string())),
        };
        if let Some((status, error)) = &failed {
            span.in_scope(|| log_failure(*status, error));
        }
        DefaultRootSpanBuilder::on_request_end(span, outcome);
    }
}

/// The event for an answer that is an error: ERROR for 5xx, DEBUG for 4xx.
fn log_failure(status: StatusCode, error: &str) {
    if status.is_server_error() {
        tracing::error!(status = status.as_u16(), %error, "request failed");
    } else {
        tracing::debug!(status = status.as_u16(), %error, "request refused");
    }
}
