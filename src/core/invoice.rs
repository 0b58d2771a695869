//! Invoices: what an issued invoice says, in one currency, for one tenant and period. Built from
//! rated lines (`core::rating`); rendered as JSON, CSV and PDF by `crate::invoice_render`.

use super::rating::LeaseClass;
use super::time::Timestamp;
use rust_decimal::Decimal;
use serde::Serialize;

/// One line of an invoice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InvoiceLine {
    /// `gpu` or `energy`.
    pub kind: &'static str,
    pub region: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<LeaseClass>,
    /// Exact quantity: GPU-seconds for `gpu` lines, measured kWh for `energy` lines.
    #[serde(serialize_with = "super::decimal::serialize")]
    pub quantity: Decimal,
    /// `GPU-s` or `kWh`.
    pub unit: &'static str,
    /// Price per GPU-hour (gpu) or per kWh (energy).
    #[serde(serialize_with = "super::decimal::serialize")]
    pub unit_price: Decimal,
    /// Energy lines: the PUE applied.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "opt_decimal"
    )]
    pub pue: Option<Decimal>,
    /// Rounded half-even to the currency's minor unit.
    #[serde(serialize_with = "amount")]
    pub amount: Decimal,
    pub records: u64,
    /// Set on adjustment lines: the earlier period the late records belong to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adjustment_for: Option<Period>,
}

/// A half-open period `[from, to)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
pub struct Period {
    pub from: Timestamp,
    pub to: Timestamp,
}

/// An issued invoice. Immutable once issued; its SHA-256 is recorded in the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Invoice {
    pub number: String,
    pub tenant: String,
    pub period: Period,
    pub currency: String,
    pub issued_at: Timestamp,
    /// The log's origin and the checkpoint (size and base64 root) the invoice was computed at.
    pub log_origin: String,
    pub checkpoint_size: u64,
    pub checkpoint_root: String,
    /// Lines of the period, then adjustment lines for earlier periods.
    pub lines: Vec<InvoiceLine>,
    /// Sum of the line amounts.
    #[serde(serialize_with = "amount")]
    pub total: Decimal,
}

fn amount<S: serde::Serializer>(d: &Decimal, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(d)
}

fn opt_decimal<S: serde::Serializer>(d: &Option<Decimal>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => super::decimal::serialize(d, s),
        None => s.serialize_none(),
    }
}

impl Invoice {
    /// The sum of the line amounts (what `total` must equal).
    pub fn sum_of_lines(&self) -> Decimal {
        self.lines.iter().map(|l| l.amount).sum()
    }
}

/// Reads an invoice back from its JSON (as stored and served).
pub fn from_json(json: &str) -> Result<Invoice, String> {
    #[derive(serde::Deserialize)]
    struct LineWire {
        kind: String,
        region: String,
        gpu_model: Option<String>,
        class: Option<LeaseClass>,
        quantity: Decimal,
        unit: String,
        unit_price: Decimal,
        pue: Option<Decimal>,
        amount: Decimal,
        records: u64,
        adjustment_for: Option<Period>,
    }
    #[derive(serde::Deserialize)]
    struct InvoiceWire {
        number: String,
        tenant: String,
        period: Period,
        currency: String,
        issued_at: Timestamp,
        log_origin: String,
        checkpoint_size: u64,
        checkpoint_root: String,
        lines: Vec<LineWire>,
        total: Decimal,
    }
    let w: InvoiceWire = serde_json::from_str(json).map_err(|e| e.to_string())?;
    let lines = w
        .lines
        .into_iter()
        .map(|l| {
            let (kind, unit) = match (l.kind.as_str(), l.unit.as_str()) {
                ("gpu", "GPU-s") => ("gpu", "GPU-s"),
                ("energy", "kWh") => ("energy", "kWh"),
                (k, u) => return Err(format!("unknown line kind {k:?} / unit {u:?}")),
            };
            Ok(InvoiceLine {
                kind,
                region: l.region,
                gpu_model: l.gpu_model,
                class: l.class,
                quantity: l.quantity,
                unit,
                unit_price: l.unit_price,
                pue: l.pue,
                amount: l.amount,
                records: l.records,
                adjustment_for: l.adjustment_for,
            })
        })
        .collect::<Result<_, String>>()?;
    Ok(Invoice {
        number: w.number,
        tenant: w.tenant,
        period: w.period,
        currency: w.currency,
        issued_at: w.issued_at,
        log_origin: w.log_origin,
        checkpoint_size: w.checkpoint_size,
        checkpoint_root: w.checkpoint_root,
        lines,
        total: w.total,
    })
}
