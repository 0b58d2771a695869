//! `GET /v1/witnesses`: where each configured witness stands (admins and auditors).

use super::auth::Caller;
use super::error::ApiError;
use super::AppState;
use actix_web::get;
use actix_web::{web, HttpResponse};
use gpuledger_core::time::Timestamp;
use serde::Serialize;

/// The witnesses of this log and where each stands.
#[derive(Serialize, utoipa::ToSchema)]
pub struct WitnessesView {
    /// Cosignatures an invoice's or certificate's checkpoint needs (0: none).
    pub quorum: usize,
    /// Each configured witness, by name.
    pub witnesses: Vec<WitnessView>,
}

/// One witness.
#[derive(Serialize, utoipa::ToSchema)]
pub struct WitnessView {
    /// Its name (the name of its cosignature lines).
    pub name: String,
    /// Its `cosignature/v1` verifier key.
    pub vkey: String,
    /// Where checkpoints are sent (`<url>/add-checkpoint`).
    pub url: String,
    /// Size of the latest checkpoint it cosigned, if any.
    pub cosigned_size: Option<u64>,
    /// The latest checkpoint's size minus `cosigned_size`.
    pub lag_entries: u64,
    /// When it last cosigned (`YYYY-MM-DDTHH:MM:SSZ`), since this process started.
    pub last_cosigned_at: Option<String>,
    /// The latest failure since this process started, if any.
    pub last_error: Option<WitnessErrorView>,
}

/// A failed `add-checkpoint`.
#[derive(Serialize, utoipa::ToSchema)]
pub struct WitnessErrorView {
    /// `conflict`, `forbidden`, `not_found`, `unprocessable`, `unreachable` or `bad_response`;
    /// `conflict` and `unprocessable` mean the witness saw another history of this log.
    pub reason: String,
    /// What happened.
    pub message: String,
    /// When (`YYYY-MM-DDTHH:MM:SSZ`).
    pub at: String,
}

fn time(t: i64) -> String {
    Timestamp::from_unix(t)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// The configured witnesses, the quorum, and for each the size it cosigned, its lag and its
/// latest failure (admins and auditors).
#[utoipa::path(tag = "log",
    responses((status = 200, body = WitnessesView),
              (status = 401, body = super::error::Problem, content_type = "application/problem+json"),
              (status = 403, body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[get("/witnesses")]
pub async fn get_witnesses(
    state: web::Data<AppState>,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    caller.require_reader_of_all()?;
    let Some(w) = state.ledger.witnessing() else {
        return Ok(HttpResponse::Ok().json(WitnessesView {
            quorum: 0,
            witnesses: Vec::new(),
        }));
    };
    let reports = w.reports();
    let witnesses = w
        .witnesses()
        .iter()
        .map(|k| {
            let r = reports.get(k.name()).cloned().unwrap_or_default();
            WitnessView {
                name: k.name().to_owned(),
                vkey: k.vkey(),
                url: r
                    .endpoint
                    .strip_suffix("/add-checkpoint")
                    .unwrap_or(&r.endpoint)
                    .to_owned(),
                cosigned_size: r.cosigned_size,
                lag_entries: r.lag_entries,
                last_cosigned_at: r.last_cosigned_at.map(time),
                last_error: r.last_error.map(|(reason, message, at)| WitnessErrorView {
                    reason,
                    message,
                    at: time(at),
                }),
            }
        })
        .collect();
    Ok(HttpResponse::Ok().json(WitnessesView {
        quorum: w.quorum(),
        witnesses,
    }))
}
