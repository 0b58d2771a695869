//! Invoices: what an issued invoice says, in one currency, for one tenant and period. Built from
//! rated lines (`core::rating`); rendered as JSON, CSV and PDF by the server's `invoice_render`.

use super::rating::{LeaseClass, Line, LineKey, PriceBook, Rater, Unpriced};
use super::time::Timestamp;
use rust_decimal::Decimal;
use serde::Serialize;
use std::collections::BTreeMap;

/// One line of an invoice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InvoiceLine {
    /// `gpu` or `energy`.
    pub kind: &'static str,
    pub region: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub class: Option<LeaseClass>,
    /// Exact quantity: GPU-seconds for `gpu` lines, measured kWh for `energy` lines.
    #[serde(serialize_with = "super::decimal::serialize")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub quantity: Decimal,
    /// `GPU-s` or `kWh`.
    pub unit: &'static str,
    /// Price per GPU-hour (gpu) or per kWh (energy).
    #[serde(serialize_with = "super::decimal::serialize")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub unit_price: Decimal,
    /// Energy lines: the PUE applied.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "opt_decimal"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::decimal::DecimalString>))]
    pub pue: Option<Decimal>,
    /// Rounded half-even to the currency's minor unit.
    #[serde(serialize_with = "amount")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub amount: Decimal,
    pub records: u64,
    /// Set on adjustment lines: the earlier period the late records belong to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adjustment_for: Option<Period>,
}

/// A half-open period `[from, to)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Period {
    pub from: Timestamp,
    pub to: Timestamp,
}

impl Period {
    /// Whether `t` is in `[from, to)`.
    pub fn contains(&self, t: Timestamp) -> bool {
        (self.from..self.to).contains(&t)
    }

    /// Whether the two periods share an instant.
    pub fn overlaps(&self, other: &Period) -> bool {
        self.from < other.to && other.from < self.to
    }
}

/// Which of a tenant's records an invoice for `period` rates, and how (docs/RATING.md, "Late
/// records"). The one rule the ledger issues invoices by, writes their bundles by, and the
/// verifier recomputes them by.
#[derive(Debug, Clone)]
pub struct InvoiceScope {
    /// The invoice's own period.
    pub period: Period,
    /// The tenant's invoices issued before this one: their periods.
    pub earlier: Vec<Period>,
    /// The log size of the last earlier invoice: records below it were invoiced already.
    pub since: u64,
}

/// Where one of the tenant's records goes on an invoice ([`InvoiceScope::place`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// It starts in the invoice's period: a line of the invoice.
    Period,
    /// It starts in an earlier invoiced period and was logged after the last invoice: an
    /// adjustment line for that period.
    Late(Period),
    /// It starts in an earlier invoiced period and was invoiced already: it only counts toward
    /// that period's volume tiers, which late records continue from.
    Invoiced(Period),
    /// It starts in no period the invoice covers.
    Outside,
}

impl InvoiceScope {
    /// The scope of an invoice for `period`, after earlier invoices given as (period, log size
    /// they were computed at).
    pub fn new(period: Period, earlier: impl IntoIterator<Item = (Period, u64)>) -> Self {
        let (earlier, sizes): (Vec<Period>, Vec<u64>) = earlier.into_iter().unzip();
        InvoiceScope {
            period,
            earlier,
            since: sizes.into_iter().max().unwrap_or(0),
        }
    }

    /// Where the record at log `index`, whose interval starts at `start`, goes.
    pub fn place(&self, index: u64, start: Timestamp) -> Placement {
        if self.period.contains(start) {
            return Placement::Period;
        }
        match self.earlier.iter().find(|p| p.contains(start)) {
            Some(p) if index >= self.since => Placement::Late(*p),
            Some(p) => Placement::Invoiced(*p),
            None => Placement::Outside,
        }
    }

    /// Whether an invoice's evidence bundle holds the record: everything it rates, and, when
    /// volume tiers are logged (`tiered`), the invoiced records its adjustments count from.
    pub fn in_bundle(&self, index: u64, start: Timestamp, tiered: bool) -> bool {
        match self.place(index, start) {
            Placement::Period | Placement::Late(_) => true,
            Placement::Invoiced(_) => tiered,
            Placement::Outside => false,
        }
    }
}

/// The interval start of a usage or energy record; `None` for other kinds.
pub fn record_start(body: &super::record::Body) -> Option<Timestamp> {
    match body {
        super::record::Body::GpuUsage(u) => Some(u.start),
        super::record::Body::Energy(e) => Some(e.start),
        _ => None,
    }
}

/// The rating of one invoice: the period's records and each earlier period's late records,
/// placed by an [`InvoiceScope`].
pub struct InvoiceRating {
    scope: InvoiceScope,
    main: Rater,
    late: BTreeMap<Period, Rater>,
}

/// What an [`InvoiceRating`] came to, per currency.
pub struct Rated {
    /// The invoice period's lines.
    pub lines: BTreeMap<String, Vec<InvoiceLine>>,
    /// The adjustment lines of late records, per currency.
    pub adjustments: BTreeMap<String, Vec<InvoiceLine>>,
    /// Usage that no price in force priced (the invoice's period first, then late records).
    pub unpriced: Vec<(Option<Period>, Vec<Unpriced>)>,
}

impl InvoiceRating {
    /// Starts rating an invoice of `scope`.
    pub fn new(scope: InvoiceScope) -> Self {
        InvoiceRating {
            main: Rater::new(scope.period.from),
            scope,
            late: BTreeMap::new(),
        }
    }

    /// The scope the records are placed by.
    pub fn scope(&self) -> &InvoiceScope {
        &self.scope
    }

    /// Rates the tenant's record at log `index` where [`InvoiceScope::place`] puts it, with the
    /// prices of `book`; returns the placement (`Outside` adds nothing).
    pub fn add(&mut self, book: &PriceBook, index: u64, body: &super::record::Body) -> Placement {
        use super::record::Body;
        let Some(start) = record_start(body) else {
            return Placement::Outside;
        };
        let placement = self.scope.place(index, start);
        let rater = match placement {
            Placement::Period => &mut self.main,
            Placement::Late(p) | Placement::Invoiced(p) => {
                self.late.entry(p).or_insert_with(|| Rater::new(p.from))
            }
            Placement::Outside => return placement,
        };
        match (placement, body) {
            (Placement::Invoiced(_), Body::GpuUsage(u)) => rater.add_invoiced_usage(book, u),
            (Placement::Invoiced(_), _) => {}
            (_, Body::GpuUsage(u)) => rater.add_usage(book, u),
            (_, Body::Energy(e)) => rater.add_energy(book, e),
            _ => {}
        }
        placement
    }

    /// The invoice lines per currency (rounded once per line, docs/RATING.md).
    pub fn finish(self) -> Rated {
        let (main, unpriced) = self.main.finish();
        let mut rated = Rated {
            lines: main
                .into_iter()
                .map(|(c, l)| (c, invoice_lines(l, None)))
                .collect(),
            adjustments: BTreeMap::new(),
            unpriced: Vec::new(),
        };
        if !unpriced.is_empty() {
            rated.unpriced.push((None, unpriced));
        }
        for (p, r) in self.late {
            let (lines, unpriced) = r.finish();
            if !unpriced.is_empty() {
                rated.unpriced.push((Some(p), unpriced));
            }
            for (currency, l) in lines {
                let adj = rated.adjustments.entry(currency).or_default();
                adj.extend(invoice_lines(l, Some(p)));
            }
        }
        rated
    }
}

/// An issued invoice. Immutable once issued; its SHA-256 is recorded in the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
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
    book: PriceBook,
    earlier: Vec<(Period, u64)>,
    /// Set by the first record: the scope is known once the context (the earlier invoices)
    /// has been read.
    rating: Option<InvoiceRating>,
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
            invoice,
            book: Default::default(),
            earlier: Vec::new(),
            rating: None,
        })
    }

    /// The invoice's lines and total, recomputed, must equal the invoice's.
    pub fn finish(mut self) -> Result<Invoice, super::bundle::Failure> {
        use super::bundle::{Failure, Reason};
        let fail = |item: String, m: &str| Failure::new(Reason::ClaimMismatch, item, m);
        let rating = self.rating.take().unwrap_or_else(|| self.start_rating());
        let mut rated = rating.finish();
        if rated.unpriced.first().is_some_and(|(p, _)| p.is_none()) {
            return Err(fail(
                "invoice".into(),
                "the bundle's prices leave some of the period's usage unpriced",
            ));
        }
        let c = &self.invoice.currency;
        let mut lines = rated.lines.remove(c).unwrap_or_default();
        lines.extend(rated.adjustments.remove(c).unwrap_or_default());
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

impl InvoiceCheck {
    fn start_rating(&self) -> InvoiceRating {
        InvoiceRating::new(InvoiceScope::new(
            self.invoice.period,
            self.earlier.iter().copied(),
        ))
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
                let p = Period {
                    from: i.period_from,
                    to: i.period_to,
                };
                self.earlier.push((p, i.checkpoint_size));
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
        let tenant = match body {
            Body::GpuUsage(u) => Some(u.tenant.as_str()),
            Body::Energy(e) => e.tenant.as_deref(),
            _ => return Ok(()),
        };
        if tenant != Some(self.invoice.tenant.as_str()) {
            return Err(Failure::new(
                Reason::WrongTenant,
                format!("entry {index}"),
                format!("the record is not {}'s", self.invoice.tenant),
            ));
        }
        if self.rating.is_none() {
            self.rating = Some(self.start_rating());
        }
        let rating = self.rating.as_mut().expect("started above");
        if rating.add(&self.book, index, body) == Placement::Outside {
            return Err(Failure::new(
                Reason::OutsidePeriod,
                format!("entry {index}"),
                "the record is in neither the invoice's period nor an invoiced one",
            ));
        }
        Ok(())
    }
}
