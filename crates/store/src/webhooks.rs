//! The webhook outbox (docs/WEBHOOKS.md): endpoints, events, deliveries and their attempts.
//!
//! **Same transaction as the cause.** [`enqueue_entry`] is called by `write::push_ledger_entry`
//! for every ledger-written entry (invoices, payments, credit notes, certificates, key
//! revocations; other kinds cause no event), [`enqueue_conflict`] by the append transaction
//! that refuses a conflicting record, [`enqueue_cosignature`] by the transaction that stores a
//! witness cosignature. So an event exists if and only if its cause committed, and a rolled
//! back entry leaves none.
//!
//! **Fan-out at enqueue.** An event gets one delivery row per enabled endpoint subscribed to
//! its type (and, for an endpoint of one tenant, of that tenant) when it is written: an
//! endpoint registered later never receives older events. The delivery's id is the
//! `webhook-id` header, the same on every attempt and on manual redelivery.
//!
//! **Claims.** A worker claims due deliveries by setting a lease (owner, expiry) with a
//! compare-and-set update; on PostgreSQL the candidates are selected `FOR UPDATE SKIP LOCKED`,
//! so several `serve` processes never attempt the same delivery at once. A worker killed
//! mid-attempt leaves a lease that expires, after which the delivery is attempted again (at
//! least once, with the same id).

use super::conn::DbConn;
use super::error::StoreError;
use super::schema::{webhook_attempts, webhook_deliveries, webhook_endpoints, webhook_events};
use diesel::prelude::*;
use gpuledger_core::record::Body;
use gpuledger_core::time::Timestamp;
use rand_core::RngCore;
use serde::Serialize;
use serde_json::{json, Map, Value};

/// Most endpoints that may be registered.
pub const MAX_ENDPOINTS: usize = 1_000;

/// The event types an endpoint may subscribe to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventType {
    /// An `invoice_issued` entry was appended.
    InvoiceIssued,
    /// A `credit_note` entry was appended.
    CreditNoteCreated,
    /// A `payment` entry was appended.
    PaymentRecorded,
    /// A `certificate_issued` entry was appended.
    CertificateIssued,
    /// A witness cosignature of a checkpoint was stored (one event per checkpoint and witness).
    CheckpointCosigned,
    /// A record was refused as a conflict: its (signer, seq) is logged with other content.
    RecordConflict,
    /// A `record_excluded` entry was appended: a record of the tenant is excluded from rating.
    RecordExcluded,
    /// A `signer_key_revoked` entry was appended.
    SignerRevoked,
    /// An invoice's prepaid draws took its tenant's available balance in a currency below
    /// the tenant's `low_balance` threshold (once per crossing).
    BalanceLow,
    /// The tenant's spend in a currency this calendar month reached one of its `spend`
    /// thresholds (once per threshold and month; `store::alerts`).
    SpendThreshold,
    /// The draw-down of a contract's commitment over its current billing period reached one of
    /// the tenant's `commitment_percent` (100 by default; once per percentage and period).
    CommitmentReached,
}

impl EventType {
    /// Every event type, in the order the documentation lists them.
    pub const ALL: [EventType; 11] = [
        EventType::InvoiceIssued,
        EventType::CreditNoteCreated,
        EventType::PaymentRecorded,
        EventType::CertificateIssued,
        EventType::CheckpointCosigned,
        EventType::RecordConflict,
        EventType::RecordExcluded,
        EventType::SignerRevoked,
        EventType::BalanceLow,
        EventType::SpendThreshold,
        EventType::CommitmentReached,
    ];

    /// The type's name on the wire (`type` of the payload).
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::InvoiceIssued => "invoice.issued",
            EventType::CreditNoteCreated => "credit_note.created",
            EventType::PaymentRecorded => "payment.recorded",
            EventType::CertificateIssued => "certificate.issued",
            EventType::CheckpointCosigned => "checkpoint.cosigned",
            EventType::RecordConflict => "record.conflict",
            EventType::RecordExcluded => "record.excluded",
            EventType::SignerRevoked => "signer.revoked",
            EventType::BalanceLow => "balance.low",
            EventType::SpendThreshold => "spend.threshold",
            EventType::CommitmentReached => "commitment.reached",
        }
    }

    /// The type named `s`, if any.
    pub fn parse(s: &str) -> Option<EventType> {
        EventType::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// What causes an event of this type, for people.
    pub fn description(self) -> &'static str {
        match self {
            EventType::InvoiceIssued => "An invoice was issued (its `invoice_issued` log entry)",
            EventType::CreditNoteCreated => {
                "A credit note was recorded against an invoice (its `credit_note` log entry)"
            }
            EventType::PaymentRecorded => {
                "A payment was recorded against an invoice (its `payment` log entry)"
            }
            EventType::CertificateIssued => {
                "A compute-usage certificate was issued (its `certificate_issued` log entry)"
            }
            EventType::CheckpointCosigned => {
                "A witness cosignature of a checkpoint was stored: one event per checkpoint and witness"
            }
            EventType::RecordConflict => {
                "A record was refused as a conflict (its signer and seq are logged with other content) and kept as evidence"
            }
            EventType::RecordExcluded => {
                "A logged record was excluded from rating, with the reason (its `record_excluded` log entry)"
            }
            EventType::SignerRevoked => {
                "A signer's key was revoked (its `signer_key_revoked` log entry)"
            }
            EventType::BalanceLow => {
                "An invoice's prepaid draws took the tenant's available balance in a currency below its `low_balance` threshold (once per crossing; `log_index` is the invoice's `invoice_issued` entry)"
            }
            EventType::SpendThreshold => {
                "The tenant's spend in a currency this calendar month (the preview's total so far) reached one of its `spend` thresholds (once per threshold and month; found by `serve` every checkpoint interval)"
            }
            EventType::CommitmentReached => {
                "The draw-down of a contract's commitment over its current billing period reached a percentage of it (the tenant's `commitment_percent`, 100 by default; once per percentage and billing period; found by `serve` every checkpoint interval)"
            }
        }
    }

    /// Whether events of this type belong to a tenant (and reach that tenant's endpoints).
    pub fn per_tenant(self) -> bool {
        matches!(
            self,
            EventType::InvoiceIssued
                | EventType::CreditNoteCreated
                | EventType::PaymentRecorded
                | EventType::CertificateIssued
                | EventType::RecordConflict
                | EventType::RecordExcluded
                | EventType::BalanceLow
                | EventType::SpendThreshold
                | EventType::CommitmentReached
        )
    }
}

/// A delivery waiting for its next attempt.
pub const PENDING: &str = "pending";
/// A delivery answered 2xx.
pub const DELIVERED: &str = "delivered";
/// A delivery whose last attempt failed (schedule exhausted, or the endpoint answered 410).
pub const FAILED: &str = "failed";

/// Most deliveries listed per request of the delivery log.
pub const MAX_LISTED_DELIVERIES: i64 = 200;

/// An event to enqueue.
#[derive(Debug, Clone)]
pub struct Event {
    /// Its type.
    pub kind: EventType,
    /// The tenant it belongs to, if any (only global endpoints receive the others).
    pub tenant: Option<String>,
    /// The log index of the entry that caused it (for a conflict: the logged entry the record
    /// conflicts with; for a cosignature: none, the checkpoint size is in `data`).
    pub log_index: Option<u64>,
    /// Names the cause; an event whose cause was enqueued already is not enqueued again.
    pub dedupe: String,
    /// The payload's `data` (`tenant` and `log_index` are added to it).
    pub data: Map<String, Value>,
}

fn random_id(prefix: &str) -> String {
    let mut b = [0u8; 16];
    rand_core::OsRng.fill_bytes(&mut b);
    format!("{prefix}{}", hex::encode(b))
}

fn to_i64(n: u64) -> i64 {
    n.min(i64::MAX as u64) as i64
}

/// Writes `event` and one delivery per subscribed enabled endpoint, in the caller's
/// transaction, unless an event with the same `dedupe` exists; nothing at all when no
/// endpoint subscribes to it. `at` is the transaction's
/// clock reading: the payload's `timestamp`.
pub(crate) fn enqueue(conn: &mut DbConn, event: &Event, at: Timestamp) -> Result<(), StoreError> {
    // Only endpoints that exist now receive it; with none, nothing is written (a witness's
    // cosignature every checkpoint would otherwise fill the outbox for nobody).
    let endpoints: Vec<(String, Option<String>, String)> = webhook_endpoints::table
        .filter(webhook_endpoints::enabled.eq(true))
        .select((
            webhook_endpoints::id,
            webhook_endpoints::tenant,
            webhook_endpoints::event_types,
        ))
        .load(conn)?;
    let subscribed: Vec<String> = endpoints
        .into_iter()
        .filter(|(_, tenant, types)| {
            types.split(',').any(|t| t == event.kind.as_str())
                && (tenant.is_none() || *tenant == event.tenant)
        })
        .map(|(endpoint, _, _)| endpoint)
        .collect();
    if subscribed.is_empty() {
        return Ok(());
    }
    let exists: Option<String> = webhook_events::table
        .filter(webhook_events::dedupe.eq(&event.dedupe))
        .select(webhook_events::id)
        .first(conn)
        .optional()?;
    if exists.is_some() {
        return Ok(());
    }
    let mut data = event.data.clone();
    data.insert("tenant".into(), json!(event.tenant));
    data.insert("log_index".into(), json!(event.log_index));
    let payload = json!({
        "type": event.kind.as_str(),
        "timestamp": at.to_string(),
        "data": data,
    })
    .to_string();
    let id = random_id("evt_");
    diesel::insert_into(webhook_events::table)
        .values((
            webhook_events::id.eq(&id),
            webhook_events::event_type.eq(event.kind.as_str()),
            webhook_events::tenant.eq(&event.tenant),
            webhook_events::log_index.eq(event.log_index.map(to_i64)),
            webhook_events::dedupe.eq(&event.dedupe),
            webhook_events::payload.eq(&payload),
            webhook_events::created_at.eq(at.unix()),
        ))
        .execute(conn)?;
    for endpoint in subscribed {
        diesel::insert_into(webhook_deliveries::table)
            .values((
                webhook_deliveries::id.eq(random_id("msg_")),
                webhook_deliveries::event_id.eq(&id),
                webhook_deliveries::endpoint_id.eq(&endpoint),
                webhook_deliveries::state.eq(PENDING),
                webhook_deliveries::attempts.eq(0i64),
                webhook_deliveries::schedule_step.eq(0i64),
                webhook_deliveries::next_attempt_at.eq(at.unix()),
                webhook_deliveries::created_at.eq(at.unix()),
                webhook_deliveries::updated_at.eq(at.unix()),
            ))
            .execute(conn)?;
    }
    Ok(())
}

/// The data of a ledger entry as an event's `data`: its body's fields (amounts as decimal
/// strings, timestamps as RFC 3339) plus `log_index` and `tenant`.
fn body_data<T: Serialize>(body: &T) -> Map<String, Value> {
    match serde_json::to_value(body) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    }
}

/// Enqueues the event a ledger-written entry at `index` causes, if its kind causes one
/// (`invoice_issued`, `payment`, `credit_note`, `certificate_issued`, `record_excluded`,
/// `signer_key_revoked`).
/// Called in the entry's transaction by `write::push_ledger_entry`.
pub(crate) fn enqueue_entry(
    conn: &mut DbConn,
    index: u64,
    body: &Body,
    at: Timestamp,
) -> Result<(), StoreError> {
    let (kind, tenant, mut data) = match body {
        Body::InvoiceIssued(b) => (EventType::InvoiceIssued, Some(&b.tenant), body_data(b)),
        Body::Payment(b) => (EventType::PaymentRecorded, Some(&b.tenant), body_data(b)),
        Body::CreditNote(b) => (EventType::CreditNoteCreated, Some(&b.tenant), body_data(b)),
        Body::CertificateIssued(b) => (EventType::CertificateIssued, Some(&b.tenant), body_data(b)),
        Body::SignerKeyRevoked(b) => (EventType::SignerRevoked, None, body_data(b)),
        Body::RecordExcluded(b) => (EventType::RecordExcluded, Some(&b.tenant), body_data(b)),
        _ => return Ok(()),
    };
    data.insert("kind".into(), json!(body.kind().as_str()));
    enqueue(
        conn,
        &Event {
            kind,
            tenant: tenant.cloned(),
            log_index: Some(index),
            dedupe: format!("entry:{index}"),
            data,
        },
        at,
    )
}

/// Enqueues `record.conflict` for a record refused because `signer`'s `seq` is logged at
/// `existing_index` with other content; `envelope` is the refused record's canonical JSON
/// (kept as evidence in `conflicts`). Called in the append transaction that refused it. The
/// first variant of a (signer, seq) raises the event; later ones add evidence, not events.
pub(crate) fn enqueue_conflict(
    conn: &mut DbConn,
    signer: &str,
    seq: i64,
    existing_index: i64,
    envelope: &str,
    at: Timestamp,
) -> Result<(), StoreError> {
    let parsed: Value = serde_json::from_str(envelope).unwrap_or(Value::Null);
    // The tenant of the logged entry: the refused record's is whatever its signer wrote.
    let tenant: Option<String> = super::schema::entries::table
        .find(existing_index)
        .select(super::schema::entries::tenant)
        .first::<Option<String>>(conn)
        .optional()?
        .flatten();
    let content = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(envelope.as_bytes()));
    let mut data = Map::new();
    data.insert("signer".into(), json!(signer));
    data.insert("seq".into(), json!(seq));
    data.insert("kind".into(), parsed["kind"].clone());
    data.insert("existing_index".into(), json!(existing_index));
    data.insert("record_sha256".into(), json!(content));
    enqueue(
        conn,
        &Event {
            kind: EventType::RecordConflict,
            tenant,
            log_index: Some(existing_index.max(0) as u64),
            // Coalesced: one event per conflicting (signer, seq), however many variants of it
            // are refused (each is kept as evidence, up to the bounds).
            dedupe: format!("conflict:{signer}:{seq}"),
            data,
        },
        at,
    )
}

/// Enqueues `checkpoint.cosigned` for `witness`'s cosignature of the checkpoint of `size`
/// (once per checkpoint and witness). Called in the transaction that stores it.
pub(crate) fn enqueue_cosignature(
    conn: &mut DbConn,
    size: i64,
    witness: &str,
    at: Timestamp,
) -> Result<(), StoreError> {
    let mut data = Map::new();
    data.insert("checkpoint_size".into(), json!(size));
    data.insert("witness".into(), json!(witness));
    enqueue(
        conn,
        &Event {
            kind: EventType::CheckpointCosigned,
            tenant: None,
            log_index: None,
            dedupe: format!("cosignature:{size}:{witness}"),
            data,
        },
        at,
    )
}

/// A registered endpoint, as the API shows it (never its secret).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Endpoint {
    /// `ep_` and 32 hexadecimal digits.
    pub id: String,
    pub url: String,
    /// The one tenant whose events it receives; absent: every tenant's and the global ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The event types it receives.
    pub event_types: Vec<String>,
    /// `ed25519` (header `v1a`, the service's key) or `hmac` (header `v1`, its own secret).
    pub signing: String,
    pub description: String,
    pub enabled: bool,
    /// Why it was disabled (`gone`: it answered 410; `admin`), when disabled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<String>,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub updated_at: String,
}

type EndpointRow = (
    String,
    String,
    Option<String>,
    String,
    String,
    String,
    bool,
    Option<String>,
    i64,
    i64,
);

fn endpoint_view(r: EndpointRow) -> Endpoint {
    let ts = |s: i64| Timestamp::from_unix(s).map_or_else(|| s.to_string(), |t| t.to_string());
    Endpoint {
        id: r.0,
        url: r.1,
        tenant: r.2,
        event_types: r
            .3
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
        signing: r.4,
        description: r.5,
        enabled: r.6,
        disabled_reason: r.7,
        created_at: ts(r.8),
        updated_at: ts(r.9),
    }
}

macro_rules! endpoint_columns {
    () => {
        (
            webhook_endpoints::id,
            webhook_endpoints::url,
            webhook_endpoints::tenant,
            webhook_endpoints::event_types,
            webhook_endpoints::signing,
            webhook_endpoints::description,
            webhook_endpoints::enabled,
            webhook_endpoints::disabled_reason,
            webhook_endpoints::created_at,
            webhook_endpoints::updated_at,
        )
    };
}

/// What registering an endpoint needs (checked by the caller: URL, types, tenant).
pub struct NewEndpoint {
    pub url: String,
    pub tenant: Option<String>,
    pub event_types: Vec<EventType>,
    /// The `whsec_` secret for `hmac` signing; `None` for `ed25519`.
    pub secret: Option<String>,
    pub description: String,
}

fn types_text(types: &[EventType]) -> String {
    let mut t: Vec<EventType> = types.to_vec();
    t.sort();
    t.dedup();
    t.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(",")
}

/// Registers an endpoint; at most [`MAX_ENDPOINTS`].
pub fn create_endpoint(
    conn: &mut DbConn,
    new: &NewEndpoint,
    now: Timestamp,
) -> Result<Endpoint, StoreError> {
    let count: i64 = webhook_endpoints::table.count().get_result(conn)?;
    if count as usize >= MAX_ENDPOINTS {
        return Err(StoreError::Refused(format!(
            "at most {} webhook endpoints may be registered",
            MAX_ENDPOINTS
        )));
    }
    let id = random_id("ep_");
    diesel::insert_into(webhook_endpoints::table)
        .values((
            webhook_endpoints::id.eq(&id),
            webhook_endpoints::url.eq(&new.url),
            webhook_endpoints::tenant.eq(&new.tenant),
            webhook_endpoints::event_types.eq(types_text(&new.event_types)),
            webhook_endpoints::signing.eq(if new.secret.is_some() {
                "hmac"
            } else {
                "ed25519"
            }),
            webhook_endpoints::secret.eq(&new.secret),
            webhook_endpoints::description.eq(&new.description),
            webhook_endpoints::enabled.eq(true),
            webhook_endpoints::created_at.eq(now.unix()),
            webhook_endpoints::updated_at.eq(now.unix()),
        ))
        .execute(conn)?;
    get_endpoint(conn, &id)?.ok_or_else(|| StoreError::Internal("endpoint vanished".into()))
}

/// Every endpoint, oldest first.
pub fn list_endpoints(conn: &mut DbConn) -> Result<Vec<Endpoint>, StoreError> {
    Ok(webhook_endpoints::table
        .select(endpoint_columns!())
        .order((webhook_endpoints::created_at, webhook_endpoints::id))
        .load::<EndpointRow>(conn)?
        .into_iter()
        .map(endpoint_view)
        .collect())
}

/// One endpoint.
pub fn get_endpoint(conn: &mut DbConn, id: &str) -> Result<Option<Endpoint>, StoreError> {
    Ok(webhook_endpoints::table
        .find(id)
        .select(endpoint_columns!())
        .first::<EndpointRow>(conn)
        .optional()?
        .map(endpoint_view))
}

/// Changes an endpoint: enabled (re-enabling clears the reason), event types, description.
pub fn update_endpoint(
    conn: &mut DbConn,
    id: &str,
    enabled: Option<bool>,
    event_types: Option<&[EventType]>,
    description: Option<&str>,
    now: Timestamp,
) -> Result<Option<Endpoint>, StoreError> {
    conn.transaction(|conn| {
        let row = webhook_endpoints::table.find(id);
        // A write first: on SQLite it takes the write lock at once (see `claim`).
        let n = diesel::update(row)
            .set(webhook_endpoints::updated_at.eq(now.unix()))
            .execute(conn)?;
        if n == 0 {
            return Ok(None);
        }
        if let Some(e) = enabled {
            diesel::update(row)
                .set((
                    webhook_endpoints::enabled.eq(e),
                    webhook_endpoints::disabled_reason.eq((!e).then_some("admin")),
                ))
                .execute(conn)?;
        }
        if let Some(t) = event_types {
            diesel::update(row)
                .set(webhook_endpoints::event_types.eq(types_text(t)))
                .execute(conn)?;
        }
        if let Some(d) = description {
            diesel::update(row)
                .set(webhook_endpoints::description.eq(d))
                .execute(conn)?;
        }
        get_endpoint(conn, id)
    })
}

/// Deletes an endpoint with its deliveries and their attempts; whether it existed.
pub fn delete_endpoint(conn: &mut DbConn, id: &str) -> Result<bool, StoreError> {
    conn.transaction(|conn| {
        // A write first: on SQLite it takes the write lock at once (see `claim`).
        diesel::update(webhook_endpoints::table.find(id))
            .set(webhook_endpoints::enabled.eq(false))
            .execute(conn)?;
        let ids: Vec<String> = webhook_deliveries::table
            .filter(webhook_deliveries::endpoint_id.eq(id))
            .select(webhook_deliveries::id)
            .load(conn)?;
        for chunk in ids.chunks(500) {
            diesel::delete(
                webhook_attempts::table.filter(webhook_attempts::delivery_id.eq_any(chunk)),
            )
            .execute(conn)?;
        }
        diesel::delete(webhook_deliveries::table.filter(webhook_deliveries::endpoint_id.eq(id)))
            .execute(conn)?;
        Ok(diesel::delete(webhook_endpoints::table.find(id)).execute(conn)? == 1)
    })
}

/// One attempt of a delivery.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Attempt {
    /// 1 for the first attempt.
    pub attempt: u64,
    /// RFC 3339.
    pub started_at: String,
    pub duration_ms: u64,
    /// The HTTP status answered, if an answer came.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Why no acceptable answer came, if so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A delivery of one event to one endpoint, with its attempts.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Delivery {
    /// The `webhook-id` header: `msg_` and 32 hexadecimal digits.
    pub id: String,
    pub endpoint_id: String,
    pub event_id: String,
    pub event_type: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// `pending`, `delivered` or `failed`.
    pub state: String,
    /// RFC 3339: when the next attempt is due (pending deliveries).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<String>,
    /// RFC 3339.
    pub created_at: String,
    /// The payload sent (the same bytes on every attempt).
    pub payload: String,
    /// Every attempt, oldest first.
    pub attempts: Vec<Attempt>,
}

type DeliveryRow = (
    String,
    String,
    String,
    String,
    Option<String>,
    String,
    i64,
    i64,
    String,
);

fn ts(s: i64) -> String {
    Timestamp::from_unix(s).map_or_else(|| s.to_string(), |t| t.to_string())
}

fn deliveries_where(
    conn: &mut DbConn,
    endpoint: Option<&str>,
    id: Option<&str>,
) -> Result<Vec<Delivery>, StoreError> {
    let mut q = webhook_deliveries::table
        .inner_join(webhook_events::table)
        .select((
            webhook_deliveries::id,
            webhook_deliveries::endpoint_id,
            webhook_deliveries::event_id,
            webhook_events::event_type,
            webhook_events::tenant,
            webhook_deliveries::state,
            webhook_deliveries::next_attempt_at,
            webhook_deliveries::created_at,
            webhook_events::payload,
        ))
        .order((
            webhook_deliveries::created_at.desc(),
            webhook_deliveries::id,
        ))
        .limit(MAX_LISTED_DELIVERIES)
        .into_boxed();
    if let Some(e) = endpoint {
        q = q.filter(webhook_deliveries::endpoint_id.eq(e.to_owned()));
    }
    if let Some(i) = id {
        q = q.filter(webhook_deliveries::id.eq(i.to_owned()));
    }
    let rows: Vec<DeliveryRow> = q.load(conn)?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let attempts = webhook_attempts::table
            .filter(webhook_attempts::delivery_id.eq(&r.0))
            .order(webhook_attempts::attempt)
            .select((
                webhook_attempts::attempt,
                webhook_attempts::started_at,
                webhook_attempts::duration_ms,
                webhook_attempts::status,
                webhook_attempts::error,
            ))
            .load::<(i64, i64, i64, Option<i64>, Option<String>)>(conn)?
            .into_iter()
            .map(|a| Attempt {
                attempt: a.0.max(0) as u64,
                started_at: ts(a.1),
                duration_ms: a.2.max(0) as u64,
                status: a.3.map(|s| s.clamp(0, 999) as u16),
                error: a.4,
            })
            .collect();
        out.push(Delivery {
            next_attempt_at: (r.5 == PENDING).then(|| ts(r.6)),
            id: r.0,
            endpoint_id: r.1,
            event_id: r.2,
            event_type: r.3,
            tenant: r.4,
            state: r.5,
            created_at: ts(r.7),
            payload: r.8,
            attempts,
        });
    }
    Ok(out)
}

/// The delivery log of an endpoint, newest first (at most [`MAX_LISTED_DELIVERIES`]).
pub fn deliveries(conn: &mut DbConn, endpoint: &str) -> Result<Vec<Delivery>, StoreError> {
    deliveries_where(conn, Some(endpoint), None)
}

/// One delivery.
pub fn delivery(conn: &mut DbConn, id: &str) -> Result<Option<Delivery>, StoreError> {
    Ok(deliveries_where(conn, None, Some(id))?.pop())
}

/// Schedules a delivery again now, with the same id (and payload), its retry schedule
/// restarted; a delivery being attempted right now keeps its lease and is retried after it.
pub fn redeliver(
    conn: &mut DbConn,
    id: &str,
    now: Timestamp,
) -> Result<Option<Delivery>, StoreError> {
    let n = diesel::update(webhook_deliveries::table.find(id))
        .set((
            webhook_deliveries::state.eq(PENDING),
            webhook_deliveries::schedule_step.eq(0i64),
            webhook_deliveries::next_attempt_at.eq(now.unix()),
            webhook_deliveries::updated_at.eq(now.unix()),
        ))
        .execute(conn)?;
    if n == 0 {
        return Ok(None);
    }
    delivery(conn, id)
}

/// A delivery claimed for one attempt.
#[derive(Debug, Clone)]
pub struct Claimed {
    /// The `webhook-id`.
    pub id: String,
    pub endpoint_id: String,
    pub event_type: String,
    pub url: String,
    /// The `whsec_` secret of an `hmac` endpoint.
    pub secret: Option<String>,
    pub payload: String,
    /// Attempts made before this one.
    pub attempts: u64,
    /// Retries of the schedule used so far.
    pub schedule_step: u64,
}

/// Claims at most `limit` due deliveries of enabled endpoints for `owner` until
/// `now + lease_seconds`, oldest due first.
pub fn claim(
    conn: &mut DbConn,
    owner: &str,
    now: Timestamp,
    lease_seconds: i64,
    limit: i64,
) -> Result<Vec<Claimed>, StoreError> {
    let now_s = now.unix();
    conn.transaction(|conn| {
        if matches!(conn, DbConn::Sqlite(_)) {
            // SQLite: take the write lock first (as `BEGIN IMMEDIATE` would), waiting out other
            // writers with the busy timeout, rather than read and then fail to upgrade a
            // snapshot the sequencer has moved past.
            diesel::update(webhook_deliveries::table.filter(webhook_deliveries::id.eq("")))
                .set(webhook_deliveries::updated_at.eq(webhook_deliveries::updated_at))
                .execute(conn)?;
        }
        let mut out = Vec::new();
        for id in due_ids(conn, now_s, limit)? {
            if take_lease(conn, &id, owner, now_s + lease_seconds, now_s)? {
                out.push(claimed(conn, id)?);
            }
        }
        debug_assert!(out.len() as i64 <= limit.max(0));
        Ok(out)
    })
}

/// Up to `limit` deliveries due at `now_s` (pending, unleased or with a lapsed lease, to an
/// enabled endpoint), earliest first; on PostgreSQL locked, skipping rows another claimer
/// holds.
fn due_ids(conn: &mut DbConn, now_s: i64, limit: i64) -> Result<Vec<String>, StoreError> {
    macro_rules! due {
        () => {
            webhook_deliveries::table
                .filter(webhook_deliveries::state.eq(PENDING))
                .filter(webhook_deliveries::next_attempt_at.le(now_s))
                .filter(
                    webhook_deliveries::lease_until
                        .is_null()
                        .or(webhook_deliveries::lease_until.lt(now_s)),
                )
                .filter(
                    webhook_deliveries::endpoint_id.eq_any(
                        webhook_endpoints::table
                            .filter(webhook_endpoints::enabled.eq(true))
                            .select(webhook_endpoints::id),
                    ),
                )
                .order(webhook_deliveries::next_attempt_at)
                .select(webhook_deliveries::id)
                .limit(limit)
        };
    }
    Ok(match conn {
        DbConn::Pg(c) => due!().for_update().skip_locked().load(c)?,
        DbConn::Sqlite(c) => due!().load(c)?,
    })
}

/// Leases delivery `id` to `owner` until `until`, if it is still pending and unleased (or its
/// lease lapsed before `now_s`); whether this claimer won it.
fn take_lease(
    conn: &mut DbConn,
    id: &str,
    owner: &str,
    until: i64,
    now_s: i64,
) -> Result<bool, StoreError> {
    let won = diesel::update(
        webhook_deliveries::table
            .find(id)
            .filter(webhook_deliveries::state.eq(PENDING))
            .filter(
                webhook_deliveries::lease_until
                    .is_null()
                    .or(webhook_deliveries::lease_until.lt(now_s)),
            ),
    )
    .set((
        webhook_deliveries::lease_owner.eq(owner),
        webhook_deliveries::lease_until.eq(until),
    ))
    .execute(conn)?;
    Ok(won == 1)
}

/// A claimed delivery with its event and endpoint.
fn claimed(conn: &mut DbConn, id: String) -> Result<Claimed, StoreError> {
    let (endpoint_id, attempts, step, event_type, payload, url, secret) = webhook_deliveries::table
        .inner_join(webhook_events::table)
        .inner_join(webhook_endpoints::table)
        .filter(webhook_deliveries::id.eq(&id))
        .select((
            webhook_deliveries::endpoint_id,
            webhook_deliveries::attempts,
            webhook_deliveries::schedule_step,
            webhook_events::event_type,
            webhook_events::payload,
            webhook_endpoints::url,
            webhook_endpoints::secret,
        ))
        .first::<(String, i64, i64, String, String, String, Option<String>)>(conn)?;
    Ok(Claimed {
        id,
        endpoint_id,
        event_type,
        url,
        secret,
        payload,
        attempts: attempts.max(0) as u64,
        schedule_step: step.max(0) as u64,
    })
}

/// What became of a delivery after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    /// Answered 2xx.
    Delivered,
    /// Try again at this time (unix seconds), one step further in the schedule.
    Retry(i64),
    /// The schedule is exhausted.
    Failed,
    /// Answered 410 Gone: the delivery failed and the endpoint is disabled.
    Gone,
}

/// One attempt's record.
#[derive(Debug, Clone)]
pub struct AttemptRecord {
    pub started_at: Timestamp,
    pub duration_ms: u64,
    pub status: Option<u16>,
    pub error: Option<String>,
}

/// Records an attempt of a claimed delivery and its consequence, releasing the lease, in one
/// transaction. Nothing is written when `owner` no longer holds the lease (it expired and
/// another worker took the delivery): `false`.
pub fn record_attempt(
    conn: &mut DbConn,
    claimed: &Claimed,
    owner: &str,
    attempt: &AttemptRecord,
    after: After,
    now: Timestamp,
) -> Result<bool, StoreError> {
    conn.transaction(|conn| {
        let next_attempt = to_i64(claimed.attempts + 1);
        let (state, next_at, step) = match after {
            After::Delivered => (DELIVERED, now.unix(), claimed.schedule_step),
            After::Retry(at) => (PENDING, at, claimed.schedule_step + 1),
            After::Failed | After::Gone => (FAILED, now.unix(), claimed.schedule_step),
        };
        let n = diesel::update(
            webhook_deliveries::table
                .find(&claimed.id)
                .filter(webhook_deliveries::lease_owner.eq(owner))
                .filter(webhook_deliveries::attempts.eq(to_i64(claimed.attempts))),
        )
        .set((
            webhook_deliveries::state.eq(state),
            webhook_deliveries::attempts.eq(next_attempt),
            webhook_deliveries::schedule_step.eq(to_i64(step)),
            webhook_deliveries::next_attempt_at.eq(next_at),
            webhook_deliveries::lease_owner.eq(None::<String>),
            webhook_deliveries::lease_until.eq(None::<i64>),
            webhook_deliveries::last_status.eq(attempt.status.map(i64::from)),
            webhook_deliveries::last_error.eq(&attempt.error),
            webhook_deliveries::updated_at.eq(now.unix()),
        ))
        .execute(conn)?;
        if n != 1 {
            return Ok(false);
        }
        diesel::insert_into(webhook_attempts::table)
            .values((
                webhook_attempts::delivery_id.eq(&claimed.id),
                webhook_attempts::attempt.eq(next_attempt),
                webhook_attempts::started_at.eq(attempt.started_at.unix()),
                webhook_attempts::duration_ms.eq(to_i64(attempt.duration_ms)),
                webhook_attempts::status.eq(attempt.status.map(i64::from)),
                webhook_attempts::error.eq(&attempt.error),
            ))
            .execute(conn)?;
        if after == After::Gone {
            diesel::update(webhook_endpoints::table.find(&claimed.endpoint_id))
                .set((
                    webhook_endpoints::enabled.eq(false),
                    webhook_endpoints::disabled_reason.eq("gone"),
                    webhook_endpoints::updated_at.eq(now.unix()),
                ))
                .execute(conn)?;
        }
        Ok(true)
    })
}

/// Pending deliveries of enabled endpoints, and the creation time (unix seconds) of the
/// oldest of them.
pub fn queue(conn: &mut DbConn) -> Result<(u64, Option<i64>), StoreError> {
    let pending = webhook_deliveries::table
        .filter(webhook_deliveries::state.eq(PENDING))
        .filter(
            webhook_deliveries::endpoint_id.eq_any(
                webhook_endpoints::table
                    .filter(webhook_endpoints::enabled.eq(true))
                    .select(webhook_endpoints::id),
            ),
        );
    let n: i64 = pending.count().get_result(conn)?;
    let oldest: Option<i64> = pending
        .select(diesel::dsl::min(webhook_deliveries::created_at))
        .first(conn)?;
    Ok((n.max(0) as u64, oldest))
}
