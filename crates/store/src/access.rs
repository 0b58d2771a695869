//! Tenants and API tokens. A token is `glt_<id>_<secret>`; only SHA-256 of the whole token is
//! stored, looked up by its public id and compared in constant time. A token may expire: from
//! its `expires_at` on it is refused. Only a caller who presents the whole token (its secret
//! included) learns that it expired or was revoked ([`Authentication`]); anything else (a
//! malformed token, an unknown id, a wrong secret) is simply unknown.

use super::conn::DbConn;
use super::error::StoreError;
use super::schema::{api_tokens, tenants};
use base64::prelude::{Engine, BASE64_URL_SAFE_NO_PAD};
use diesel::prelude::*;
use gpuledger_core::ids::{check_display_chars, check_display_text, check_new_id};
use gpuledger_core::time::Timestamp;
use rand_core::RngCore;
use serde::Serialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Who a token speaks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApiRole {
    /// Everything.
    Admin,
    /// Reads everything, changes nothing.
    Auditor,
    /// Reads its own tenant's data only.
    Tenant,
}

impl ApiRole {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            ApiRole::Admin => "admin",
            ApiRole::Auditor => "auditor",
            ApiRole::Tenant => "tenant",
        }
    }

    /// Parses a stored or user-given name.
    pub fn parse(s: &str) -> Option<ApiRole> {
        [ApiRole::Admin, ApiRole::Auditor, ApiRole::Tenant]
            .into_iter()
            .find(|r| r.as_str() == s)
    }
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub token_id: String,
    pub role: ApiRole,
    /// Set exactly when `role` is `Tenant`.
    pub tenant: Option<String>,
}

/// A token as listed (never with its secret).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct TokenInfo {
    pub id: String,
    pub role: ApiRole,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    pub label: String,
    #[schema(value_type = String, example = "2026-11-30T12:00:00Z")]
    pub created_at: Timestamp,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub revoked_at: Option<Timestamp>,
    /// When the token stops working, if it expires.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "2027-01-01T00:00:00Z")]
    pub expires_at: Option<Timestamp>,
}

impl TokenInfo {
    /// Whether the token has expired at `now`.
    pub fn expired(&self, now: Timestamp) -> bool {
        self.expires_at.is_some_and(|e| e <= now)
    }
}

/// A tenant.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Tenant {
    pub id: String,
    /// Display name (the bill-to name of its invoices).
    pub name: String,
    /// Billing address, one line per element (its invoices' bill-to block); may be empty.
    pub address: Vec<String>,
    #[schema(value_type = String, example = "2026-11-30T12:00:00Z")]
    pub created_at: Timestamp,
}

/// Most lines of a tenant's billing address.
pub const MAX_ADDRESS_LINES: usize = 8;
/// Longest line of a tenant's billing address, in bytes.
pub const MAX_ADDRESS_LINE_BYTES: usize = 200;

/// The rules of a billing address: at most [`MAX_ADDRESS_LINES`] lines of 1 to
/// [`MAX_ADDRESS_LINE_BYTES`] bytes of text shown to people ([`check_display_text`]).
pub fn check_address(address: &[String]) -> Result<(), StoreError> {
    if address.len() > MAX_ADDRESS_LINES {
        return Err(StoreError::Refused(format!(
            "address has {} lines; at most {MAX_ADDRESS_LINES}",
            address.len()
        )));
    }
    for (i, l) in address.iter().enumerate() {
        check_display_text(l, MAX_ADDRESS_LINE_BYTES)
            .map_err(|m| StoreError::Refused(format!("address line {} {m}", i + 1)))?;
    }
    Ok(())
}

/// Longest tenant display name, in bytes.
pub const MAX_TENANT_NAME_BYTES: usize = 200;
/// Longest token label, in bytes.
pub const MAX_TOKEN_LABEL_BYTES: usize = 200;

/// The rules of a tenant's display name: 1 to [`MAX_TENANT_NAME_BYTES`] bytes of text shown to
/// people ([`check_display_text`]: no control, bidirectional or invisible format characters).
pub fn check_tenant_name(name: &str) -> Result<(), String> {
    check_display_text(name, MAX_TENANT_NAME_BYTES)
}

/// The rules of a token label: at most [`MAX_TOKEN_LABEL_BYTES`] bytes, possibly empty, of text
/// shown to people.
pub fn check_token_label(label: &str) -> Result<(), String> {
    if label.len() > MAX_TOKEN_LABEL_BYTES {
        return Err(format!("is longer than {MAX_TOKEN_LABEL_BYTES} bytes"));
    }
    check_display_chars(label)
}

fn address_column(address: &[String]) -> Option<String> {
    (!address.is_empty()).then(|| serde_json::to_string(address).expect("strings serialise"))
}

fn address_of(column: Option<String>, id: &str) -> Result<Vec<String>, StoreError> {
    match column {
        None => Ok(Vec::new()),
        Some(text) => serde_json::from_str(&text)
            .map_err(|e| StoreError::Corrupt(format!("tenant {id} address: {e}"))),
    }
}

/// Most currencies a tenant's `low_balance` thresholds name.
pub const MAX_ALERT_CURRENCIES: usize = 16;

/// A tenant's `low_balance` thresholds (docs/RATING.md, "Prepaid balances"): per currency, the
/// prepaid balance below which an invoice's draws raise a `balance.low` event. Empty when none;
/// `NotFound` for a tenant without an account.
pub fn low_balance(
    conn: &mut DbConn,
    id: &str,
) -> Result<std::collections::BTreeMap<String, rust_decimal::Decimal>, StoreError> {
    let column: Option<Option<String>> = tenants::table
        .find(id)
        .select(tenants::low_balance)
        .first(conn)
        .optional()?;
    match column.ok_or_else(|| StoreError::NotFound(format!("tenant {id}")))? {
        None => Ok(Default::default()),
        Some(text) => serde_json::from_str::<std::collections::BTreeMap<String, String>>(&text)
            .map_err(|e| StoreError::Corrupt(format!("tenant {id} low_balance: {e}")))?
            .into_iter()
            .map(|(c, a)| {
                let d = a.parse().map_err(|e| {
                    StoreError::Corrupt(format!("tenant {id} low_balance {c}: {e}"))
                })?;
                Ok((c, d))
            })
            .collect(),
    }
}

/// Replaces a tenant's `low_balance` thresholds (an empty map removes them): at most
/// [`MAX_ALERT_CURRENCIES`] ISO 4217 codes, each an amount of 0 or more with at most the
/// currency's minor-unit digits. `NotFound` for a tenant without an account.
pub fn set_low_balance(
    conn: &mut DbConn,
    id: &str,
    thresholds: &std::collections::BTreeMap<String, rust_decimal::Decimal>,
) -> Result<(), StoreError> {
    check_low_balance(thresholds).map_err(StoreError::Refused)?;
    let column = (!thresholds.is_empty()).then(|| {
        let spelled: std::collections::BTreeMap<&String, String> =
            thresholds.iter().map(|(c, a)| (c, a.to_string())).collect();
        serde_json::to_string(&spelled).expect("strings serialise")
    });
    let n = diesel::update(tenants::table.find(id))
        .set(tenants::low_balance.eq(column))
        .execute(conn)?;
    if n == 0 {
        return Err(StoreError::NotFound(format!("tenant {id}")));
    }
    Ok(())
}

/// The rules of `low_balance` thresholds ([`set_low_balance`]): what is wrong, naming the
/// currency.
pub fn check_low_balance(
    thresholds: &std::collections::BTreeMap<String, rust_decimal::Decimal>,
) -> Result<(), String> {
    if thresholds.len() > MAX_ALERT_CURRENCIES {
        return Err(format!(
            "names {} currencies; at most {MAX_ALERT_CURRENCIES}",
            thresholds.len()
        ));
    }
    for (c, a) in thresholds {
        if c.len() != 3 || !c.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(format!(
                "{c:?} is not an ISO 4217 code of three upper-case letters"
            ));
        }
        if a.is_sign_negative() || a.scale() > gpuledger_core::rating::minor_units(c) {
            return Err(format!(
                "{c}: {a} is not an amount of 0 or more with at most {} decimal places",
                gpuledger_core::rating::minor_units(c)
            ));
        }
    }
    Ok(())
}

/// Most thresholds of one kind (per currency for spend) a tenant's usage alerts hold.
pub const MAX_ALERT_THRESHOLDS: usize = 8;

/// A tenant's usage alerts (docs/WEBHOOKS.md, `spend.threshold` and `commitment.reached`):
/// per currency, the amounts of a calendar month's spend that raise `spend.threshold`; and the
/// percentages of a contract's commitment whose draw-down raises `commitment.reached` (100
/// when none are set, for every contract with a commitment). Account data, not the log.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UsageAlerts {
    /// Currency → the thresholds, increasing, each above 0 with at most the currency's
    /// minor-unit digits.
    #[serde(default)]
    pub spend: std::collections::BTreeMap<String, Vec<rust_decimal::Decimal>>,
    /// Percentages of the commitment, increasing, each above 0 and at most 1000, at most 4
    /// decimals; empty: 100.
    #[serde(default)]
    pub commitment_percent: Vec<rust_decimal::Decimal>,
}

impl UsageAlerts {
    /// The commitment percentages in force: the configured ones, or 100.
    pub fn commitment_percents(&self) -> Vec<rust_decimal::Decimal> {
        if self.commitment_percent.is_empty() {
            vec![rust_decimal::Decimal::ONE_HUNDRED]
        } else {
            self.commitment_percent.clone()
        }
    }

    /// What is wrong with the thresholds, naming the member (`spend` or `commitment_percent`)
    /// and the currency; nothing when they are well formed.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let increasing = |v: &[rust_decimal::Decimal]| v.windows(2).all(|w| w[0] < w[1]);
        if self.spend.len() > MAX_ALERT_CURRENCIES {
            return Err((
                "spend",
                format!(
                    "names {} currencies; at most {MAX_ALERT_CURRENCIES}",
                    self.spend.len()
                ),
            ));
        }
        for (c, amounts) in &self.spend {
            let digits = gpuledger_core::rating::minor_units(c);
            if c.len() != 3 || !c.bytes().all(|b| b.is_ascii_uppercase()) {
                return Err((
                    "spend",
                    format!("{c:?} is not an ISO 4217 code of three upper-case letters"),
                ));
            }
            if amounts.is_empty() || amounts.len() > MAX_ALERT_THRESHOLDS || !increasing(amounts) {
                return Err((
                    "spend",
                    format!("{c}: 1 to {MAX_ALERT_THRESHOLDS} thresholds, strictly increasing"),
                ));
            }
            if let Some(a) = amounts
                .iter()
                .find(|a| **a <= rust_decimal::Decimal::ZERO || a.scale() > digits)
            {
                return Err((
                    "spend",
                    format!(
                        "{c}: {a} is not an amount above 0 with at most {digits} decimal places"
                    ),
                ));
            }
        }
        let p = &self.commitment_percent;
        if p.len() > MAX_ALERT_THRESHOLDS || !increasing(p) {
            return Err((
                "commitment_percent",
                format!("at most {MAX_ALERT_THRESHOLDS} percentages, strictly increasing"),
            ));
        }
        if let Some(x) = p.iter().find(|x| {
            **x <= rust_decimal::Decimal::ZERO
                || **x > rust_decimal::Decimal::from(1000)
                || x.scale() > 4
        }) {
            return Err((
                "commitment_percent",
                format!("{x} is not a percentage above 0 and at most 1000 with at most 4 decimals"),
            ));
        }
        Ok(())
    }
}

/// A tenant's usage alerts ([`UsageAlerts`]); the default when none are set. `NotFound` for a
/// tenant without an account.
pub fn usage_alerts(conn: &mut DbConn, id: &str) -> Result<UsageAlerts, StoreError> {
    let column: Option<Option<String>> = tenants::table
        .find(id)
        .select(tenants::usage_alerts)
        .first(conn)
        .optional()?;
    let column = column.ok_or_else(|| StoreError::NotFound(format!("tenant {id}")))?;
    parse_usage_alerts(id, column)
}

/// The stored `usage_alerts` column of tenant `id`: the default when none.
fn parse_usage_alerts(id: &str, column: Option<String>) -> Result<UsageAlerts, StoreError> {
    match column {
        None => Ok(UsageAlerts::default()),
        Some(text) => serde_json::from_str(&text)
            .map_err(|e| StoreError::Corrupt(format!("tenant {id} usage_alerts: {e}"))),
    }
}

/// Every tenant account with its usage alerts (the default for those without), by id.
pub fn all_usage_alerts(conn: &mut DbConn) -> Result<Vec<(String, UsageAlerts)>, StoreError> {
    let rows: Vec<(String, Option<String>)> = tenants::table
        .select((tenants::id, tenants::usage_alerts))
        .order(tenants::id.asc())
        .load(conn)?;
    rows.into_iter()
        .map(|(id, text)| {
            let alerts = parse_usage_alerts(&id, text)?;
            Ok((id, alerts))
        })
        .collect()
}

/// Replaces a tenant's usage alerts ([`UsageAlerts::check`]; the default removes them).
/// `NotFound` for a tenant without an account.
pub fn set_usage_alerts(
    conn: &mut DbConn,
    id: &str,
    alerts: &UsageAlerts,
) -> Result<(), StoreError> {
    alerts
        .check()
        .map_err(|(member, m)| StoreError::Refused(format!("{member}: {m}")))?;
    let column = (*alerts != UsageAlerts::default())
        .then(|| serde_json::to_string(alerts).expect("usage alerts serialise"));
    let n = diesel::update(tenants::table.find(id))
        .set(tenants::usage_alerts.eq(column))
        .execute(conn)?;
    if n == 0 {
        return Err(StoreError::NotFound(format!("tenant {id}")));
    }
    Ok(())
}

fn ts(secs: i64) -> Timestamp {
    Timestamp::from_unix(secs).unwrap_or_else(Timestamp::now)
}

/// The rules of a new tenant's id and name (checked before anything is written).
pub fn check_new_tenant(id: &str, name: &str) -> Result<(), StoreError> {
    check_new_id(id).map_err(|m| StoreError::Refused(format!("tenant id {m}")))?;
    check_tenant_name(name).map_err(|m| StoreError::Refused(format!("tenant name {m}")))
}

/// Creates a tenant row without a billing address; refuses a duplicate id (the API registers
/// the tenant on the log first).
pub fn create_tenant(conn: &mut DbConn, id: &str, name: &str) -> Result<Tenant, StoreError> {
    create_tenant_with_address(conn, id, name, &[])
}

/// Creates a tenant row with a billing address ([`check_address`]).
pub fn create_tenant_with_address(
    conn: &mut DbConn,
    id: &str,
    name: &str,
    address: &[String],
) -> Result<Tenant, StoreError> {
    check_new_tenant(id, name)?;
    check_address(address)?;
    let now = Timestamp::now();
    let exists: Option<String> = tenants::table
        .find(id)
        .select(tenants::id)
        .first(conn)
        .optional()?;
    if exists.is_some() {
        return Err(StoreError::AlreadyExists(format!(
            "tenant {id} already exists"
        )));
    }
    let inserted = diesel::insert_into(tenants::table)
        .values((
            tenants::id.eq(id),
            tenants::name.eq(name),
            tenants::created_at.eq(now.unix()),
            tenants::billing_address.eq(address_column(address)),
        ))
        .execute(conn);
    match inserted {
        Ok(_) => {}
        // Another request created the same id between the check and the insert.
        Err(diesel::result::Error::DatabaseError(
            diesel::result::DatabaseErrorKind::UniqueViolation,
            _,
        )) => {
            return Err(StoreError::AlreadyExists(format!(
                "tenant {id} already exists"
            )))
        }
        Err(e) => return Err(e.into()),
    }
    Ok(Tenant {
        id: id.to_owned(),
        name: name.to_owned(),
        address: address.to_vec(),
        created_at: now,
    })
}

/// Changes a tenant's display name and/or billing address (`None`: unchanged); `NotFound` for
/// an unknown id. Invoices already issued keep what they say.
pub fn update_tenant(
    conn: &mut DbConn,
    id: &str,
    name: Option<&str>,
    address: Option<&[String]>,
) -> Result<Tenant, StoreError> {
    if let Some(n) = name {
        check_tenant_name(n).map_err(|m| StoreError::Refused(format!("tenant name {m}")))?;
    }
    if let Some(a) = address {
        check_address(a)?;
    }
    conn.transaction(|conn| {
        if !tenant_exists(conn, id)? {
            return Err(StoreError::NotFound(format!("tenant {id}")));
        }
        if let Some(n) = name {
            diesel::update(tenants::table.find(id))
                .set(tenants::name.eq(n))
                .execute(conn)?;
        }
        if let Some(a) = address {
            diesel::update(tenants::table.find(id))
                .set(tenants::billing_address.eq(address_column(a)))
                .execute(conn)?;
        }
        get_tenant(conn, id)?.ok_or_else(|| StoreError::NotFound(format!("tenant {id}")))
    })
}

/// One tenant.
pub fn get_tenant(conn: &mut DbConn, id: &str) -> Result<Option<Tenant>, StoreError> {
    let row: Option<(String, String, i64, Option<String>)> = tenants::table
        .find(id)
        .select((
            tenants::id,
            tenants::name,
            tenants::created_at,
            tenants::billing_address,
        ))
        .first(conn)
        .optional()?;
    row.map(|(id, name, c, a)| {
        Ok(Tenant {
            address: address_of(a, &id)?,
            id,
            name,
            created_at: ts(c),
        })
    })
    .transpose()
}

/// The bill-to block of a tenant's invoices: its display name and billing address; a tenant
/// known to the log but without an account row is billed under its id.
pub fn bill_to(conn: &mut DbConn, id: &str) -> Result<gpuledger_core::invoice::BillTo, StoreError> {
    Ok(match get_tenant(conn, id)? {
        Some(t) => gpuledger_core::invoice::BillTo {
            tenant: t.id,
            name: t.name,
            address: t.address,
        },
        None => gpuledger_core::invoice::BillTo {
            tenant: id.to_owned(),
            name: id.to_owned(),
            address: Vec::new(),
        },
    })
}

/// Every tenant, by id.
pub fn list_tenants(conn: &mut DbConn) -> Result<Vec<Tenant>, StoreError> {
    list_tenants_page(conn, (None, None), None, usize::MAX)
}

/// One page of [`list_tenants`]: at most `limit` tenants, by id, whose id sorts after `after`
/// and that were created in `[from, to)` (either bound may be open).
pub fn list_tenants_page(
    conn: &mut DbConn,
    (from, to): (Option<Timestamp>, Option<Timestamp>),
    after: Option<&str>,
    limit: usize,
) -> Result<Vec<Tenant>, StoreError> {
    let mut q = tenants::table
        .order(tenants::id.asc())
        .select((
            tenants::id,
            tenants::name,
            tenants::created_at,
            tenants::billing_address,
        ))
        .limit(i64::try_from(limit).unwrap_or(i64::MAX))
        .into_boxed();
    if let Some(a) = after {
        q = q.filter(tenants::id.gt(a.to_owned()));
    }
    if let Some(f) = from {
        q = q.filter(tenants::created_at.ge(f.unix()));
    }
    if let Some(t) = to {
        q = q.filter(tenants::created_at.lt(t.unix()));
    }
    let rows: Vec<(String, String, i64, Option<String>)> = q.load(conn)?;
    rows.into_iter()
        .map(|(id, name, c, a)| {
            Ok(Tenant {
                address: address_of(a, &id)?,
                id,
                name,
                created_at: ts(c),
            })
        })
        .collect()
}

/// `NotFound` unless the ledger knows tenant `id`: registered (a tenant row) or named by an
/// entry (agents may report a tenant before an admin registers it). The one test every read
/// of a tenant's data makes before answering, so an unknown tenant and another tenant's data
/// read the same: 404.
pub fn require_tenant(conn: &mut DbConn, id: &str) -> Result<(), StoreError> {
    if tenant_exists(conn, id)? || super::usage::tenant_has_entries(conn, id)? {
        Ok(())
    } else {
        Err(StoreError::NotFound(format!("tenant {id}")))
    }
}

/// Whether a tenant is registered.
pub fn tenant_exists(conn: &mut DbConn, id: &str) -> Result<bool, StoreError> {
    Ok(tenants::table
        .find(id)
        .select(tenants::id)
        .first::<String>(conn)
        .optional()?
        .is_some())
}

fn hash(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

/// Creates a token that does not expire and returns `(info, secret token)`. The secret is
/// shown once and never stored.
pub fn create_token(
    conn: &mut DbConn,
    role: ApiRole,
    tenant: Option<&str>,
    label: &str,
) -> Result<(TokenInfo, String), StoreError> {
    create_token_expiring(conn, role, tenant, label, None)
}

/// Like [`create_token`], for a token that stops working at `expires_at` (which must be in the
/// future), if given.
pub fn create_token_expiring(
    conn: &mut DbConn,
    role: ApiRole,
    tenant: Option<&str>,
    label: &str,
    expires_at: Option<Timestamp>,
) -> Result<(TokenInfo, String), StoreError> {
    let now = Timestamp::now();
    if expires_at.is_some_and(|e| e <= now) {
        return Err(StoreError::Refused(
            "a token's expiry must be in the future".into(),
        ));
    }
    match (role, tenant) {
        (ApiRole::Tenant, Some(t)) => {
            if !tenant_exists(conn, t)? {
                return Err(StoreError::NotFound(format!("tenant {t}")));
            }
        }
        (ApiRole::Tenant, None) => {
            return Err(StoreError::Refused("a tenant token needs a tenant".into()))
        }
        (_, Some(_)) => {
            return Err(StoreError::Refused(
                "only tenant tokens name a tenant".into(),
            ))
        }
        (_, None) => {}
    }
    check_token_label(label).map_err(|m| StoreError::Refused(format!("label {m}")))?;
    let mut id_bytes = [0u8; 6];
    let mut secret = [0u8; 32];
    rand_core::OsRng.fill_bytes(&mut id_bytes);
    rand_core::OsRng.fill_bytes(&mut secret);
    let id = hex::encode(id_bytes);
    let token = format!("glt_{id}_{}", BASE64_URL_SAFE_NO_PAD.encode(secret));
    diesel::insert_into(api_tokens::table)
        .values((
            api_tokens::id.eq(&id),
            api_tokens::token_hash.eq(hash(&token)),
            api_tokens::role.eq(role.as_str()),
            api_tokens::tenant.eq(tenant),
            api_tokens::label.eq(label),
            api_tokens::created_at.eq(now.unix()),
            api_tokens::expires_at.eq(expires_at.map(Timestamp::unix)),
        ))
        .execute(conn)?;
    let info = TokenInfo {
        id,
        role,
        tenant: tenant.map(str::to_owned),
        label: label.to_owned(),
        created_at: now,
        revoked_at: None,
        expires_at,
    };
    Ok((info, token))
}

/// Every token, oldest first.
pub fn list_tokens(conn: &mut DbConn) -> Result<Vec<TokenInfo>, StoreError> {
    type Row = (
        String,
        String,
        Option<String>,
        String,
        i64,
        Option<i64>,
        Option<i64>,
    );
    let rows: Vec<Row> = api_tokens::table
        .order((api_tokens::created_at.asc(), api_tokens::id.asc()))
        .select((
            api_tokens::id,
            api_tokens::role,
            api_tokens::tenant,
            api_tokens::label,
            api_tokens::created_at,
            api_tokens::revoked_at,
            api_tokens::expires_at,
        ))
        .load(conn)?;
    rows.into_iter()
        .map(|(id, role, tenant, label, c, r, e)| {
            let role = ApiRole::parse(&role)
                .ok_or_else(|| StoreError::Corrupt(format!("token role {role:?}")))?;
            Ok(TokenInfo {
                id,
                role,
                tenant,
                label,
                created_at: ts(c),
                revoked_at: r.map(ts),
                expires_at: e.map(ts),
            })
        })
        .collect()
}

/// Revokes a token; unknown ids are `NotFound`.
pub fn revoke_token(conn: &mut DbConn, id: &str) -> Result<(), StoreError> {
    let n = diesel::update(
        api_tokens::table
            .find(id)
            .filter(api_tokens::revoked_at.is_null()),
    )
    .set(api_tokens::revoked_at.eq(Some(Timestamp::now().unix())))
    .execute(conn)?;
    if n == 0 {
        return Err(StoreError::NotFound(format!("active token {id}")));
    }
    Ok(())
}

/// What a presented token turned out to be. `Expired` and `Revoked` are answered only to a
/// caller who presented the whole token, secret included: without it nothing is learnt about
/// a token id, so an id alone cannot be probed for whether it exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authentication {
    /// A valid token and whom it speaks for.
    Valid(Principal),
    /// A real token, past its `expires_at`.
    Expired,
    /// A real token, revoked.
    Revoked,
    /// Malformed, unknown, or a known id with the wrong secret.
    Unknown,
}

impl Authentication {
    /// The principal of a valid token.
    pub fn principal(self) -> Option<Principal> {
        match self {
            Authentication::Valid(p) => Some(p),
            _ => None,
        }
    }
}

/// The principal a presented token speaks for, or `None` for a malformed, unknown, revoked or
/// expired token ([`authenticate_token`] tells the last two apart).
pub fn authenticate(conn: &mut DbConn, token: &str) -> Result<Option<Principal>, StoreError> {
    authenticate_at(conn, token, Timestamp::now())
}

/// [`authenticate`] at the time `now`.
pub fn authenticate_at(
    conn: &mut DbConn,
    token: &str,
    now: Timestamp,
) -> Result<Option<Principal>, StoreError> {
    Ok(authenticate_token_at(conn, token, now)?.principal())
}

/// What a presented token is, now.
pub fn authenticate_token(conn: &mut DbConn, token: &str) -> Result<Authentication, StoreError> {
    authenticate_token_at(conn, token, Timestamp::now())
}

/// [`authenticate_token`] at the time `now`. A revoked token that has also expired is
/// `Revoked` (revocation is the deliberate act, and it is final).
pub fn authenticate_token_at(
    conn: &mut DbConn,
    token: &str,
    now: Timestamp,
) -> Result<Authentication, StoreError> {
    let Some(id) = token
        .strip_prefix("glt_")
        .and_then(|r| r.split_once('_'))
        .map(|(id, _)| id)
    else {
        return Ok(Authentication::Unknown);
    };
    if id.len() != 12 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(Authentication::Unknown);
    }
    type Row = (Vec<u8>, String, Option<String>, Option<i64>, Option<i64>);
    let row: Option<Row> = api_tokens::table
        .find(id)
        .select((
            api_tokens::token_hash,
            api_tokens::role,
            api_tokens::tenant,
            api_tokens::revoked_at,
            api_tokens::expires_at,
        ))
        .first(conn)
        .optional()?;
    let Some((stored, role, tenant, revoked, expires)) = row else {
        return Ok(Authentication::Unknown);
    };
    // The secret is checked first: only its holder learns more than "unknown".
    if !bool::from(stored.ct_eq(&hash(token))) {
        return Ok(Authentication::Unknown);
    }
    if revoked.is_some() {
        return Ok(Authentication::Revoked);
    }
    if expires.is_some_and(|e| e <= now.unix()) {
        return Ok(Authentication::Expired);
    }
    let role =
        ApiRole::parse(&role).ok_or_else(|| StoreError::Corrupt(format!("token role {role:?}")))?;
    Ok(Authentication::Valid(Principal {
        token_id: id.to_owned(),
        role,
        tenant,
    }))
}
