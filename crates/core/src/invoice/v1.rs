//! Version 1 invoice documents (no `format` member): issued before `gpuledger-invoice/v2`.
//! Their SHA-256 is in existing logs, so they are read, served and recomputed exactly as they
//! always were: GPU lines in GPU-seconds priced per GPU-hour, energy lines in measured kWh, an
//! `amount` per line, no tax, `total` = Σ amount.

use super::{gpu_hours, Invoice, InvoiceLine, LineKind, Period, RatedLine, Unit};
use crate::rating::{LeaseClass, LineKey};
use crate::time::Timestamp;
use rust_decimal::Decimal;
use serde::Serialize;

/// One line of a version 1 invoice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LegacyLine {
    /// `gpu` or `energy`.
    pub kind: &'static str,
    pub region: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<LeaseClass>,
    /// Exact quantity: GPU-seconds for `gpu` lines, measured kWh for `energy` lines.
    #[serde(serialize_with = "crate::decimal::serialize")]
    pub quantity: Decimal,
    /// `GPU-s` or `kWh`.
    pub unit: &'static str,
    /// Price per GPU-hour (gpu) or per kWh (energy).
    #[serde(serialize_with = "crate::decimal::serialize")]
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

/// A version 1 invoice document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InvoiceV1 {
    pub number: String,
    pub tenant: String,
    pub period: Period,
    pub currency: String,
    pub issued_at: Timestamp,
    pub log_origin: String,
    pub checkpoint_size: u64,
    pub checkpoint_root: String,
    pub lines: Vec<LegacyLine>,
    /// Sum of the line amounts.
    #[serde(serialize_with = "amount")]
    pub total: Decimal,
}

fn amount<S: serde::Serializer>(d: &Decimal, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(d)
}

fn opt_decimal<S: serde::Serializer>(d: &Option<Decimal>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => crate::decimal::serialize(d, s),
        None => s.serialize_none(),
    }
}

impl InvoiceV1 {
    /// The sum of the line amounts (what `total` must equal).
    pub fn sum_of_lines(&self) -> Decimal {
        self.lines.iter().map(|l| l.amount).sum()
    }

    /// The same invoice with lines and total recomputed from rated lines, by the version 1
    /// rules.
    pub fn recomputed(&self, lines: Vec<RatedLine>) -> InvoiceV1 {
        let lines = legacy_lines(lines);
        let total = lines.iter().map(|l| l.amount).sum();
        let recomputed = InvoiceV1 {
            lines,
            total,
            ..self.clone()
        };
        debug_assert_eq!(
            recomputed.total,
            recomputed.sum_of_lines(),
            "a version 1 invoice's total is the sum of its lines"
        );
        recomputed
    }

    /// The document in the version 2 schema, for rendering ([`super::InvoiceDoc::view`]).
    pub fn view(&self) -> Invoice {
        let zero = crate::rating::round_amount(Decimal::ZERO, &self.currency);
        let lines = self.lines.iter().map(|l| l.view(zero)).collect();
        Invoice {
            format: super::INVOICE_FORMAT_V1.to_owned(),
            number: self.number.clone(),
            tenant: self.tenant.clone(),
            period: self.period,
            currency: self.currency.clone(),
            issued_at: self.issued_at,
            log_origin: self.log_origin.clone(),
            checkpoint_size: self.checkpoint_size,
            checkpoint_root: self.checkpoint_root.clone(),
            issuer: Default::default(),
            bill_to: super::BillTo {
                tenant: self.tenant.clone(),
                name: self.tenant.clone(),
                address: Vec::new(),
            },
            payment_terms_days: 0,
            due_at: self.issued_at,
            lines,
            net_total: self.total,
            tax_total: zero,
            total: self.total,
            excluded: Vec::new(),
            commitments: Vec::new(),
            availability: Vec::new(),
            allowances: Vec::new(),
            prepaid: Vec::new(),
            amount_due: None,
        }
    }
}

impl LegacyLine {
    /// Whether the line is an energy line (else a GPU line).
    fn is_energy(&self) -> bool {
        self.kind == "energy"
    }

    /// The description a version 2 line of the same usage has: "GPU compute, H100, cn-east,
    /// on-demand" or "Electricity, cn-east, PUE 1.08".
    fn description(&self) -> String {
        match (self.is_energy(), &self.gpu_model, self.class) {
            (true, ..) => format!(
                "Electricity, {}, PUE {}",
                self.region,
                crate::decimal::to_canonical(self.pue.unwrap_or(Decimal::ONE))
            ),
            (false, model, class) => format!(
                "GPU compute, {}, {}, {}",
                model.as_deref().unwrap_or("GPU"),
                self.region,
                class.map_or("on-demand".to_owned(), |c| super::class_label(c)
                    .to_lowercase())
            ),
        }
    }

    /// The line in the version 2 schema, untaxed (`zero`: the currency's zero tax), for
    /// rendering ([`InvoiceV1::view`]).
    fn view(&self, zero: Decimal) -> InvoiceLine {
        let energy = self.is_energy();
        let pue = self.pue.unwrap_or(Decimal::ONE);
        InvoiceLine {
            kind: if energy {
                LineKind::Energy
            } else {
                LineKind::Gpu
            },
            description: self.description(),
            region: self.region.clone(),
            gpu_model: self.gpu_model.clone(),
            class: self.class,
            plan: None,
            tier: None,
            quantity: if energy {
                (self.quantity * pue).normalize()
            } else {
                gpu_hours(self.quantity)
            },
            unit: if energy { Unit::Kwh } else { Unit::GpuHour },
            gpu_seconds: (!energy).then_some(self.quantity),
            measured_kwh: energy.then_some(self.quantity),
            pue: self.pue,
            unit_price: self.unit_price,
            net: self.amount,
            tax_name: None,
            tax_rate: Decimal::ZERO,
            tax: zero,
            gross: self.amount,
            records: self.records,
            adjustment_for: self.adjustment_for,
            contract: None,
            category: None,
            timing: None,
            service_period: None,
        }
    }
}

/// Reads a version 1 document (a JSON value without `format`).
pub(super) fn from_value(value: serde_json::Value) -> Result<InvoiceV1, String> {
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
    let w: InvoiceWire = serde_json::from_value(value).map_err(|e| e.to_string())?;
    let lines = w
        .lines
        .into_iter()
        .map(|l| {
            let (kind, unit) = match (l.kind.as_str(), l.unit.as_str()) {
                ("gpu", "GPU-s") => ("gpu", "GPU-s"),
                ("energy", "kWh") => ("energy", "kWh"),
                (k, u) => return Err(format!("unknown line kind {k:?} / unit {u:?}")),
            };
            Ok(LegacyLine {
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
    Ok(InvoiceV1 {
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

/// Version 1 lines from rated lines (every line kept, zero quantities included).
pub fn legacy_lines(lines: Vec<RatedLine>) -> Vec<LegacyLine> {
    lines
        .into_iter()
        .map(
            |RatedLine {
                 line: l,
                 adjustment_for,
             }| match l.key {
                LineKey::Gpu {
                    region,
                    gpu_model,
                    class,
                    unit_price_per_gpu_hour,
                    tier: _,
                } => LegacyLine {
                    kind: "gpu",
                    region,
                    gpu_model: Some(gpu_model),
                    class: Some(class),
                    quantity: l.quantity,
                    unit: "GPU-s",
                    unit_price: unit_price_per_gpu_hour,
                    pue: None,
                    amount: l.amount,
                    records: l.records,
                    adjustment_for,
                },
                LineKey::Energy {
                    region,
                    unit_price_per_kwh,
                    pue,
                } => LegacyLine {
                    kind: "energy",
                    region,
                    gpu_model: None,
                    class: None,
                    quantity: l.quantity,
                    unit: "kWh",
                    unit_price: unit_price_per_kwh,
                    pue: Some(pue),
                    amount: l.amount,
                    records: l.records,
                    adjustment_for,
                },
            },
        )
        .collect()
}
