//! The witness's HTTP interface (actix-web): `POST /add-checkpoint` (C2SP tlog-witness),
//! `GET /healthz`, `GET /logs` (the latest cosigned checkpoint per log, JSON, for
//! operators) and `GET /metrics` (Prometheus text, [`super::metrics`]; every answer to
//! `add-checkpoint`, the 413s included, is counted by outcome). Bodies over [`MAX_ADD_CHECKPOINT_BODY`] are refused with 413 before they are read
//! whole. Errors other than 409 leave as `application/problem+json`; a 409 is the spec's
//! `text/x.tlog.size` body.

use super::metrics::Outcome;
use super::{now_seconds, Answer, Witness, WitnessError, WitnessSettings};
use crate::api::error::Problem;
use actix_web::body::MessageBody;
use actix_web::dev::{ServerHandle, ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::{middleware, web, App, HttpResponse, HttpServer};
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
    metrics: Option<MetricsListener>,
}

/// The listener of `--metrics-listen`: `GET /metrics` and `GET /healthz` alone.
struct MetricsListener {
    addr: SocketAddr,
    handle: ServerHandle,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl MetricsListener {
    /// Binds `at` and serves `witness`'s metrics there, on the current tokio runtime.
    fn start(witness: &web::Data<Witness>, at: SocketAddr) -> Result<Self, WitnessError> {
        let data = witness.clone();
        let s = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .route("/metrics", web::get().to(metrics))
                .route("/healthz", web::get().to(healthz))
        })
        .workers(1)
        .disable_signals()
        .shutdown_timeout(1)
        .bind(at)
        .map_err(|e| WitnessError::Bind(at, e))?;
        let addr = *s
            .addrs()
            .first()
            .ok_or(WitnessError::Missing("a bound metrics address"))?;
        let s = s.run();
        let handle = s.handle();
        Ok(MetricsListener {
            addr,
            handle,
            task: tokio::spawn(s),
        })
    }

    /// Stops accepting, lets in-flight requests finish, and waits for the listener to end.
    async fn stop(self) {
        self.handle.stop(true).await;
        let _ = self.task.await;
    }
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

    /// The bound address of the metrics listener, when one was asked for.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|m| m.addr)
    }

    /// A handle that stops the server (the metrics listener stops with it, in
    /// [`RunningWitness::wait`]).
    pub fn handle(&self) -> ServerHandle {
        self.handle.clone()
    }

    /// Stops accepting, lets in-flight requests finish, and waits for the server to end.
    pub async fn stop(self) {
        self.handle.stop(true).await;
        let _ = self.task.await;
        if let Some(m) = self.metrics {
            m.stop().await;
        }
    }

    /// Waits until the server ends (after [`RunningWitness::handle`]`().stop(..)`), then stops
    /// the metrics listener.
    pub async fn wait(self) -> std::io::Result<()> {
        let ended = self.task.await.map_err(std::io::Error::other);
        if let Some(m) = self.metrics {
            m.stop().await;
        }
        ended?
    }
}

/// Opens the witness's state and starts serving on `settings.listen` (port 0: any free port)
/// on the current tokio runtime, `GET /metrics` included; returns once bound. The server does
/// not handle signals: the caller stops it through [`RunningWitness::stop`].
pub async fn start(settings: WitnessSettings) -> Result<RunningWitness, WitnessError> {
    start_with_metrics(settings, None).await
}

/// [`start`], with `GET /metrics` served on `metrics_listen` alone when it is given (the
/// submission listener then answers 404 for it): a witness that logs reach over the Internet
/// can keep its metrics on a private address.
pub async fn start_with_metrics(
    settings: WitnessSettings,
    metrics_listen: Option<SocketAddr>,
) -> Result<RunningWitness, WitnessError> {
    let witness = Witness::open(
        &settings.name,
        settings.key,
        &settings.logs,
        &settings.state,
    )?;
    let key = witness.witness_key();
    let data = web::Data::new(witness);
    let metrics_here = metrics_listen.is_none();
    let app_data = data.clone();
    let server = HttpServer::new(move || {
        let app = App::new()
            .app_data(app_data.clone())
            .app_data(web::PayloadConfig::new(MAX_ADD_CHECKPOINT_BODY))
            .service(
                web::resource("/add-checkpoint")
                    .wrap(middleware::from_fn(count_outcome))
                    .route(web::post().to(add_checkpoint)),
            )
            .route("/healthz", web::get().to(healthz))
            .route("/logs", web::get().to(logs));
        if metrics_here {
            app.route("/metrics", web::get().to(metrics))
        } else {
            app
        }
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
    let metrics = metrics_listen
        .map(|at| MetricsListener::start(&data, at))
        .transpose()?;
    let server = server.run();
    let handle = server.handle();
    let task = tokio::spawn(server);
    tracing::info!(
        %addr,
        metrics = ?metrics.as_ref().map(|m| m.addr),
        witness = %key.vkey(),
        state = %settings.state.display(),
        "witness serving"
    );
    Ok(RunningWitness {
        addr,
        key,
        handle,
        task,
        metrics,
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

/// Counts each answer to `add-checkpoint` by its status, after it is made: the 413 of an
/// oversized body is answered before the handler runs.
async fn count_outcome<B: MessageBody>(
    req: ServiceRequest,
    next: middleware::Next<B>,
) -> Result<ServiceResponse<B>, actix_web::Error> {
    let witness = req.app_data::<web::Data<Witness>>().cloned();
    let res = next.call(req).await?;
    if let (Some(w), Some(outcome)) = (witness, Outcome::of_status(res.status().as_u16())) {
        w.metrics().request(outcome);
    }
    Ok(res)
}

/// `GET /metrics`: the witness's metrics, Prometheus text.
async fn metrics(witness: web::Data<Witness>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(witness.metrics().render())
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
