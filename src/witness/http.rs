//! The witness's HTTP interface (actix-web): `POST /add-checkpoint` (C2SP tlog-witness),
//! `GET /healthz` and `GET /logs` (the latest cosigned checkpoint per log, JSON, for
//! operators). Bodies over [`MAX_ADD_CHECKPOINT_BODY`] are refused with 413 before they are read
//! whole. Errors other than 409 leave as `application/problem+json`; a 409 is the spec's
//! `text/x.tlog.size` body.

use super::{now_seconds, Answer, Witness, WitnessError, WitnessSettings};
use crate::api::error::Problem;
use actix_web::dev::ServerHandle;
use actix_web::http::StatusCode;
use actix_web::{web, App, HttpResponse, HttpServer};
use gpuledger_core::cosignature::{self, WitnessKey, MAX_ADD_CHECKPOINT_BODY};
use gpuledger_core::merkle;
use serde::Serialize;
use std::net::SocketAddr;

/// The `Content-Type` of a 409 answer.
pub const SIZE_CONTENT_TYPE: &str = "text/x.tlog.size";

/// Seconds in-flight requests get to finish when the witness stops.
const SHUTDOWN_SECONDS: u64 = 5;

/// A witness serving in this process.
pub struct RunningWitness {
    addr: SocketAddr,
    key: WitnessKey,
    handle: ServerHandle,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl RunningWitness {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`: the submission and monitoring prefix.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The witness's public identity (its vkey is `witness_key().vkey()`).
    pub fn witness_key(&self) -> &WitnessKey {
        &self.key
    }

    /// A handle that stops the server.
    pub fn handle(&self) -> ServerHandle {
        self.handle.clone()
    }

    /// Stops accepting, lets in-flight requests finish, and waits for the server to end.
    pub async fn stop(self) {
        self.handle.stop(true).await;
        let _ = self.task.await;
    }

    /// Waits until the server ends (after [`RunningWitness::handle`]`().stop(..)`).
    pub async fn wait(self) -> std::io::Result<()> {
        self.task.await.map_err(std::io::Error::other)?
    }
}

/// Opens the witness's state and starts serving on `settings.listen` (port 0: any free port)
/// on the current tokio runtime; returns once bound. The server does not handle signals: the
/// caller stops it through [`RunningWitness::stop`].
pub async fn start(settings: WitnessSettings) -> Result<RunningWitness, WitnessError> {
    let witness = Witness::open(
        &settings.name,
        settings.key,
        &settings.logs,
        &settings.state,
    )?;
    let key = witness.witness_key();
    let data = web::Data::new(witness);
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .app_data(web::PayloadConfig::new(MAX_ADD_CHECKPOINT_BODY))
            .route("/add-checkpoint", web::post().to(add_checkpoint))
            .route("/healthz", web::get().to(healthz))
            .route("/logs", web::get().to(logs))
    })
    .workers(settings.workers.max(1))
    .disable_signals()
    .shutdown_timeout(SHUTDOWN_SECONDS)
    .bind(settings.listen)
    .map_err(|e| WitnessError::Bind(settings.listen, e))?;
    let addr = *server
        .addrs()
        .first()
        .ok_or(WitnessError::Missing("a bound address"))?;
    let server = server.run();
    let handle = server.handle();
    let task = tokio::spawn(server);
    tracing::info!(
        %addr,
        witness = %key.vkey(),
        state = %settings.state.display(),
        "witness serving"
    );
    Ok(RunningWitness {
        addr,
        key,
        handle,
        task,
    })
}

fn problem(status: StatusCode, slug: &str, title: &str, detail: String) -> HttpResponse {
    HttpResponse::build(status)
        .content_type("application/problem+json")
        .json(Problem {
            kind: format!("urn:gpuledger:problem:{slug}"),
            title: title.to_owned(),
            status: status.as_u16(),
            detail,
            errors: None,
        })
}

/// The HTTP response for an answer.
pub fn response(answer: Answer) -> HttpResponse {
    match answer {
        Answer::Cosigned(lines) => HttpResponse::Ok()
            .content_type("text/plain; charset=utf-8")
            .body(lines),
        Answer::Conflict(size) => HttpResponse::Conflict()
            .content_type(SIZE_CONTENT_TYPE)
            .body(cosignature::size_body(size)),
        Answer::BadRequest(d) => problem(
            StatusCode::BAD_REQUEST,
            "malformed_add_checkpoint",
            "Malformed add-checkpoint request",
            d,
        ),
        Answer::Forbidden(d) => problem(
            StatusCode::FORBIDDEN,
            "log_signature",
            "No valid signature of the log",
            d,
        ),
        Answer::UnknownOrigin(d) => problem(StatusCode::NOT_FOUND, "unknown_log", "Unknown log", d),
        Answer::BadProof(d) => problem(
            StatusCode::UNPROCESSABLE_ENTITY,
            "inconsistent_checkpoint",
            "Consistency proof does not verify",
            d,
        ),
    }
}

/// `POST /add-checkpoint`: checked, stored and committed in one transaction, then answered.
async fn add_checkpoint(witness: web::Data<Witness>, body: web::Bytes) -> HttpResponse {
    let now = now_seconds();
    let w = witness.clone();
    match web::block(move || w.add_checkpoint(&body, now)).await {
        Ok(Ok(answer)) => {
            tracing::debug!(status = answer.status(), "add-checkpoint");
            response(answer)
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, "witness state failed; nothing was cosigned");
            problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "Internal error",
                "the witness could not record the checkpoint; nothing was cosigned".into(),
            )
        }
        Err(e) => {
            tracing::error!(error = %e, "add-checkpoint task failed");
            problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "Internal error",
                "the witness could not record the checkpoint; nothing was cosigned".into(),
            )
        }
    }
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; charset=utf-8")
        .body("ok\n")
}

/// One configured log in `GET /logs`.
#[derive(Serialize)]
struct LogView {
    origin: String,
    /// The latest cosigned size (0 when none yet).
    size: u64,
    /// Its root, base64; null when none yet.
    root: Option<String>,
    /// When it was stored, RFC 3339; null when none yet.
    updated: Option<String>,
}

/// `GET /logs`: every configured log with its latest cosigned size and root.
async fn logs(witness: web::Data<Witness>) -> HttpResponse {
    let w = witness.clone();
    let stored = match web::block(move || w.state().all()).await {
        Ok(Ok(all)) => all,
        _ => {
            return problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "Internal error",
                "the witness state could not be read".into(),
            )
        }
    };
    let views: Vec<LogView> = witness
        .origins()
        .map(|origin| {
            let latest = stored.iter().find(|(o, _)| o == origin).map(|(_, l)| l);
            LogView {
                origin: origin.to_owned(),
                size: latest.map_or(0, |l| l.size),
                root: latest.map(|l| merkle::encode_hash(&l.root)),
                updated: latest.and_then(|l| {
                    let t = time::OffsetDateTime::from_unix_timestamp(
                        i64::try_from(l.updated_at).ok()?,
                    )
                    .ok()?;
                    t.format(&time::format_description::well_known::Rfc3339)
                        .ok()
                }),
            }
        })
        .collect();
    HttpResponse::Ok().json(views)
}
