//! Invoices: what an issued invoice says, in one currency, for one tenant and period. Built from
//! rated lines (`core::rating`); rendered as JSON, CSV and PDF by `crate::invoice_render`.

use super::rating::{LeaseClass, Line, LineKey};
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

/// Invoice lines from rated lines; `adjustment_for` names the earlier period of late records.
pub fn invoice_lines(lines: Vec<Line>, adjustment_for: Option<Period>) -> Vec<InvoiceLine> {
    lines
        .into_iter()
        .map(|l| match l.key {
            LineKey::Gpu {
                region,
                gpu_model,
                class,
                unit_price_per_gpu_hour,
                tier: _,
            } => InvoiceLine {
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
            } => InvoiceLine {
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
        })
        .collect()
}

/// Recomputes an issued invoice from an evidence bundle (docs/PROTOCOL.md §15, last
/// paragraph): prices from the context's pricing entries, the tenant's earlier invoices from its
/// `invoice_issued` entries, lines from the records, exactly as the ledger rated them.
pub struct InvoiceCheck {
    invoice: Invoice,
    book: super::rating::PriceBook,
    earlier: Vec<Period>,
    /// The log size of the last earlier invoice: records below it were invoiced already.
    since: u64,
    main: super::rating::Rater,
    late: std::collections::BTreeMap<Period, super::rating::Rater>,
}

impl InvoiceCheck {
    /// Checks that the bundle is the invoice's (subject, checkpoint size and root) and starts.
    pub fn start(
        invoice: Invoice,
        header: &super::bundle::Header,
        anchor: &super::bundle::Anchor,
    ) -> Result<Self, super::bundle::Failure> {
        use super::bundle::{BundleSubject, Failure, Reason};
        let mismatch = |m: &str| Err(Failure::new(Reason::CheckpointMismatch, "invoice", m));
        if header.subject != BundleSubject::Invoice(invoice.number.clone()) {
            return mismatch("the bundle is not for this invoice");
        }
        if invoice.checkpoint_size != anchor.size()
            || invoice.checkpoint_root != super::merkle::encode_hash(&anchor.root())
            || invoice.log_origin != anchor.checkpoint.origin()
        {
            return mismatch("its checkpoint is not the bundle's");
        }
        Ok(InvoiceCheck {
            main: super::rating::Rater::new(invoice.period.from),
            invoice,
            book: Default::default(),
            earlier: Vec::new(),
            since: 0,
            late: Default::default(),
        })
    }

    /// The invoice's lines and total, recomputed, must equal the invoice's.
    pub fn finish(self) -> Result<Invoice, super::bundle::Failure> {
        use super::bundle::{Failure, Reason};
        let (mut by_currency, unpriced) = self.main.finish();
        let fail = |item: String, m: &str| Failure::new(Reason::ClaimMismatch, item, m);
        if !unpriced.is_empty() {
            return Err(fail(
                "invoice".into(),
                "the bundle's prices leave some of the period's usage unpriced",
            ));
        }
        let c = &self.invoice.currency;
        let mut lines = invoice_lines(by_currency.remove(c).unwrap_or_default(), None);
        for (p, r) in self.late {
            let (mut l, _) = r.finish();
            lines.extend(invoice_lines(l.remove(c).unwrap_or_default(), Some(p)));
        }
        let total: Decimal = lines.iter().map(|l| l.amount).sum();
        let recomputed = Invoice {
            lines,
            total,
            ..self.invoice.clone()
        };
        let json = |i: &Invoice| serde_json::to_value(i).expect("invoices serialise");
        let (claimed, computed) = (json(&self.invoice), json(&recomputed));
        if claimed != computed {
            let lines = |v: &serde_json::Value| v["lines"].as_array().cloned().unwrap_or_default();
            let (a, b) = (lines(&claimed), lines(&computed));
            let item = (0..a.len().max(b.len()))
                .find(|&i| a.get(i) != b.get(i))
                .map_or("total".to_owned(), |i| format!("lines[{i}]"));
            return Err(fail(
                item,
                "the invoice differs from the lines recomputed from the bundle",
            ));
        }
        Ok(recomputed)
    }
}

impl super::bundle::Subject for InvoiceCheck {
    fn tenant(&self) -> Option<&str> {
        Some(&self.invoice.tenant)
    }

    fn context(
        &mut self,
        _index: u64,
        body: &super::record::Body,
    ) -> Result<(), super::bundle::Failure> {
        use super::record::Body;
        match body {
            Body::InvoiceIssued(i)
                if i.tenant == self.invoice.tenant && i.number != self.invoice.number =>
            {
                self.earlier.push(Period {
                    from: i.period_from,
                    to: i.period_to,
                });
                self.since = self.since.max(i.checkpoint_size);
            }
            b => self.book.add_entry(b),
        }
        Ok(())
    }

    fn record(
        &mut self,
        index: u64,
        _leaf_hash: &super::merkle::Hash,
        body: &super::record::Body,
    ) -> Result<(), super::bundle::Failure> {
        use super::bundle::{Failure, Reason};
        use super::record::Body;
        let (tenant, start) = match body {
            Body::GpuUsage(u) => (Some(u.tenant.as_str()), u.start),
            Body::Energy(e) => (e.tenant.as_deref(), e.start),
            _ => return Ok(()),
        };
        if tenant != Some(self.invoice.tenant.as_str()) {
            return Err(Failure::new(
                Reason::WrongTenant,
                format!("entry {index}"),
                format!("the record is not {}'s", self.invoice.tenant),
            ));
        }
        let p = self.invoice.period;
        if (p.from..p.to).contains(&start) {
            match body {
                Body::GpuUsage(u) => self.main.add_usage(&self.book, u),
                Body::Energy(e) => self.main.add_energy(&self.book, e),
                _ => {}
            }
            return Ok(());
        }
        let since = self.since;
        let Some(period) = self
            .earlier
            .iter()
            .find(|q| (q.from..q.to).contains(&start))
        else {
            return Err(Failure::new(
                Reason::OutsidePeriod,
                format!("entry {index}"),
                "the record is in neither the invoice's period nor an invoiced one",
            ));
        };
        let r = self
            .late
            .entry(*period)
            .or_insert_with(|| super::rating::Rater::new(period.from));
        match body {
            // Logged before the last invoice: already invoiced; it only counts for tiers.
            Body::GpuUsage(u) if index < since => r.add_invoiced_usage(&self.book, u),
            Body::GpuUsage(u) => r.add_usage(&self.book, u),
            Body::Energy(e) if index >= since => r.add_energy(&self.book, e),
            _ => {}
        }
        Ok(())
    }
}
