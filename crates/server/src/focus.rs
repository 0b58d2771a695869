//! FinOps FOCUS 1.2 cost-and-usage rows from issued invoices and credit notes (docs/FOCUS.md).
//!
//! Presentation, not core: a pure mapping from an issued invoice document
//! ([`gpuledger_core::invoice::Invoice`], of either version through `InvoiceDoc::view`) and the
//! credit notes against it to rows, and the CSV writer. The HTTP endpoint
//! (`api::exports`) reads the documents; nothing here touches the database.
//!
//! The rows reconcile with the invoices to the last digit: per invoice, one `Usage` row per line
//! with `BilledCost` = the line's `net` and, where the line is taxed, one `Tax` row with
//! `BilledCost` = its `tax`; so `BilledCost` summed per `InvoiceId` is the invoice's `total`
//! (Σ gross), which [`invoice_rows`] checks before it answers. A credit note is a `Credit` row of
//! its own document (`InvoiceId` `CN-<log index>`), naming the invoice it credits in
//! `x_InvoiceNumber`. Payments are not charges and have no rows.

use gpuledger_core::certificate::Certificate;
use gpuledger_core::invoice::{Invoice, InvoiceLine, LineKind, Period};
use gpuledger_core::rating::LeaseClass;
use gpuledger_core::record::{FeeCategory, FeeTiming, RegionParameters, Settlement};
use rust_decimal::Decimal;

/// The FOCUS version the rows follow.
pub const FOCUS_VERSION: &str = "1.2";

/// `ServiceName` of every row: the provider's one service.
pub const SERVICE_NAME: &str = "GPU Compute";
/// `ServiceCategory` (a FOCUS 1.2 allowed value).
pub const SERVICE_CATEGORY: &str = "Compute";
/// `ServiceSubcategory` (a FOCUS 1.2 allowed value under `Compute`: bare-metal and cloud GPUs
/// are neither virtual machines, containers nor serverless).
pub const SERVICE_SUBCATEGORY: &str = "Other (Compute)";
/// `PricingUnit` of GPU lines.
pub const GPU_PRICING_UNIT: &str = "GPU-Hours";
/// `ConsumedUnit` of GPU lines: the measured quantity.
pub const GPU_CONSUMED_UNIT: &str = "GPU-Seconds";
/// `PricingUnit` and `ConsumedUnit` of energy lines.
pub const ENERGY_UNIT: &str = "kWh";

/// The FOCUS 1.2 applicability criteria that hold for this provider, as `focus-validator
/// --applicability-criteria` takes them: display names for accounts (tenants' names), several
/// pricing categories (on-demand, reserved, spot), negotiated prices (tenant plans' volume
/// tiers), published unit prices (rate cards and spot prices are log entries), measured usage,
/// sub accounts (tenants) and regions. Not: availability zones, capacity reservations,
/// commitment discounts (a reserved lease is priced by its own rate card, not discounted),
/// several account types, billing by provisioned resource, resource types, a pricing currency
/// other than the billing one, virtual currencies, tags.
pub const APPLICABILITY_CRITERIA: &str = "ACCOUNT_NAMING_SUPPORTED,\
MULTIPLE_PRICING_CATEGORIES_SUPPORTED,NEGOTIATED_PRICING_SUPPORTED,PUBLIC_PRICE_LIST_SUPPORTED,\
USAGE_MEASUREMENT_SUPPORTED,UNIT_PRICING_SUPPORTED,SUB_ACCOUNT_SUPPORTED,REGION_SUPPORTED";

/// Something a row cannot be made from.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FocusError {
    /// The rows of an invoice do not add up to its total: the stored document is inconsistent.
    #[error("invoice {number}: its rows add up to {rows}, its total is {total}")]
    Unbalanced {
        number: String,
        rows: Decimal,
        total: Decimal,
    },
    /// A credit note that is not against the invoice it was given with.
    #[error("credit note at entry {index} is against {credited}, not invoice {number}")]
    WrongInvoice {
        index: u64,
        credited: String,
        number: String,
    },
}

/// One cell of the CSV: empty for null. Text goes through
/// [`crate::invoice_render::csv_text`] (formula injection: a name beginning with `=` is
/// written `'=`); decimals, timestamps and counts are written as they are, so a negative
/// `BilledCost` stays a number.
trait Cell {
    fn cell(&self) -> String;
}

impl Cell for String {
    fn cell(&self) -> String {
        crate::invoice_render::csv_text(self).into_owned()
    }
}

impl Cell for Option<String> {
    fn cell(&self) -> String {
        self.as_deref()
            .map(|s| crate::invoice_render::csv_text(s).into_owned())
            .unwrap_or_default()
    }
}

/// A hash in base64, as the log writes it: ours, not people's text, so it is written as it is
/// (one beginning with `+` is not given a quote: a verifier compares it byte for byte).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Base64(pub String);

impl Cell for Base64 {
    fn cell(&self) -> String {
        self.0.clone()
    }
}

/// Money keeps its scale (`148.00`); other decimals are written as they are given.
impl Cell for Decimal {
    fn cell(&self) -> String {
        self.to_string()
    }
}

impl Cell for Option<Decimal> {
    fn cell(&self) -> String {
        self.map(|d| d.to_string()).unwrap_or_default()
    }
}

impl Cell for gpuledger_core::time::Timestamp {
    fn cell(&self) -> String {
        self.to_string()
    }
}

impl Cell for Option<u64> {
    fn cell(&self) -> String {
        self.map(|n| n.to_string()).unwrap_or_default()
    }
}

/// Defines [`Row`] and [`COLUMNS`] from one list, so a field and its column cannot drift apart.
macro_rules! focus_columns {
    ($($(#[$doc:meta])* $field:ident: $ty:ty => $name:literal,)*) => {
        /// One row of the FOCUS 1.2 cost-and-usage dataset; `None` is null (an empty cell).
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct Row {
            $($(#[$doc])* pub $field: $ty,)*
        }

        /// The dataset's columns, in the CSV's order: the FOCUS columns, then the `x_` ones.
        pub const COLUMNS: &[&str] = &[$($name),*];

        impl Row {
            /// The row's cells in [`COLUMNS`] order.
            pub fn cells(&self) -> Vec<String> {
                vec![$(Cell::cell(&self.$field)),*]
            }
        }
    };
}

focus_columns! {
    /// What the invoice bills for this row: a line's `net`, a line's `tax`, or minus a credit.
    billed_cost: Decimal => "BilledCost",
    /// The tenant: each tenant is billed as an account of its own.
    billing_account_id: String => "BillingAccountId",
    /// The tenant's display name (the invoice's bill-to name).
    billing_account_name: String => "BillingAccountName",
    billing_currency: String => "BillingCurrency",
    /// The invoice's period end (exclusive).
    billing_period_end: gpuledger_core::time::Timestamp => "BillingPeriodEnd",
    billing_period_start: gpuledger_core::time::Timestamp => "BillingPeriodStart",
    /// `Usage`, `Tax` or `Credit`.
    charge_category: String => "ChargeCategory",
    /// `Correction` on rows of late records for an earlier invoiced period, else null.
    charge_class: Option<String> => "ChargeClass",
    charge_description: String => "ChargeDescription",
    /// `Usage-Based` (usage and its tax) or `One-Time` (credits).
    charge_frequency: String => "ChargeFrequency",
    /// The period the charge is for: the invoice's, or an adjustment's earlier period.
    charge_period_end: gpuledger_core::time::Timestamp => "ChargePeriodEnd",
    charge_period_start: gpuledger_core::time::Timestamp => "ChargePeriodStart",
    /// `Spend` on the rows of a contract's commitment (a minimum spend); else null.
    commitment_discount_category: Option<String> => "CommitmentDiscountCategory",
    /// `contract/<id>/commitment` on the usage rows that draw a contract's commitment down
    /// (`Used`) and on its true-up row (`Unused`); else null.
    commitment_discount_id: Option<String> => "CommitmentDiscountId",
    commitment_discount_name: Option<String> => "CommitmentDiscountName",
    /// The amount drawn (a usage row's `BilledCost`) or left unused (the true-up), in the
    /// billing currency.
    commitment_discount_quantity: Option<Decimal> => "CommitmentDiscountQuantity",
    /// `Used` (usage drawing it down) or `Unused` (the true-up).
    commitment_discount_status: Option<String> => "CommitmentDiscountStatus",
    /// `Minimum spend`.
    commitment_discount_type: Option<String> => "CommitmentDiscountType",
    /// The billing currency (a spend commitment is measured in money).
    commitment_discount_unit: Option<String> => "CommitmentDiscountUnit",
    /// The measured quantity: GPU-seconds, or kWh before PUE. Usage rows only.
    consumed_quantity: Option<Decimal> => "ConsumedQuantity",
    consumed_unit: Option<String> => "ConsumedUnit",
    /// `ContractedUnitPrice × PricingQuantity` on usage rows; `BilledCost` on the others.
    contracted_cost: Decimal => "ContractedCost",
    contracted_unit_price: Option<Decimal> => "ContractedUnitPrice",
    /// `BilledCost`: no amortised commitments.
    effective_cost: Decimal => "EffectiveCost",
    /// The invoice number, or `CN-<log index>` for a credit note.
    invoice_id: String => "InvoiceId",
    invoice_issuer_name: String => "InvoiceIssuerName",
    /// `ListUnitPrice × PricingQuantity` on usage rows; `BilledCost` on the others.
    list_cost: Decimal => "ListCost",
    list_unit_price: Option<Decimal> => "ListUnitPrice",
    /// `Standard` (on-demand), `Committed` (reserved), `Dynamic` (spot); null for tax and credits.
    pricing_category: Option<String> => "PricingCategory",
    /// The billing currency: prices are set in the currency they are billed in.
    pricing_currency: String => "PricingCurrency",
    /// `ContractedUnitPrice` (one currency).
    pricing_currency_contracted_unit_price: Option<Decimal> => "PricingCurrencyContractedUnitPrice",
    /// `EffectiveCost` (one currency).
    pricing_currency_effective_cost: Decimal => "PricingCurrencyEffectiveCost",
    /// `ListUnitPrice` (one currency).
    pricing_currency_list_unit_price: Option<Decimal> => "PricingCurrencyListUnitPrice",
    /// The line's `quantity`: GPU-hours (six places) or billed kWh (measured × PUE).
    pricing_quantity: Option<Decimal> => "PricingQuantity",
    pricing_unit: Option<String> => "PricingUnit",
    provider_name: String => "ProviderName",
    publisher_name: String => "PublisherName",
    region_id: Option<String> => "RegionId",
    region_name: Option<String> => "RegionName",
    service_category: String => "ServiceCategory",
    service_name: String => "ServiceName",
    service_subcategory: String => "ServiceSubcategory",
    /// `gpu/<model>` or `energy`: the same for every lease class (FOCUS: SkuId stays the same
    /// across pricing categories).
    sku_id: Option<String> => "SkuId",
    sku_meter: Option<String> => "SkuMeter",
    sku_price_details: Option<String> => "SkuPriceDetails",
    /// `gpu/<model>/<region>/<class>` (graduated volume lines add `/<plan>/tier-<n>`) or
    /// `energy/<region>`.
    sku_price_id: Option<String> => "SkuPriceId",
    sub_account_id: String => "SubAccountId",
    sub_account_name: String => "SubAccountName",
    /// Energy rows: the measured kWh (before PUE).
    x_energy_kwh: Option<Decimal> => "x_EnergyKWh",
    /// Energy rows: the PUE applied.
    x_pue: Option<Decimal> => "x_PUE",
    /// Energy rows: billed kWh × the region's grid carbon intensity (gCO2e/kWh) logged with the
    /// price; null when the line's price and PUE match region parameters of differing
    /// intensities.
    x_carbon_grams_co2e: Option<Decimal> => "x_CarbonGramsCO2e",
    /// The invoice the row is on, or the one a credit note credits.
    x_invoice_number: String => "x_InvoiceNumber",
    /// A certificate of the tenant that counts every record the row rates, if one was issued.
    x_certificate_id: Option<String> => "x_CertificateId",
    x_log_origin: String => "x_LogOrigin",
    /// The checkpoint the invoice was computed at (its evidence bundle's).
    x_log_checkpoint_size: Option<u64> => "x_LogCheckpointSize",
    x_log_checkpoint_root: Base64 => "x_LogCheckpointRoot",
}

/// A certificate as far as the export needs it: whom and what it counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Covering {
    pub id: String,
    pub tenant: String,
    pub period: Period,
    /// Its region scope, if any.
    pub region: Option<String>,
    /// The log size it counted records below.
    pub checkpoint_size: u64,
}

impl Covering {
    /// What `cert` counts; `None` for a certificate scoped to a lease or to nodes, which never
    /// counts all of a line's records.
    pub fn of(cert: &Certificate, checkpoint_size: u64) -> Option<Covering> {
        if cert.scope.lease.is_some() || cert.scope.nodes.is_some() {
            return None;
        }
        Some(Covering {
            id: cert.id.clone(),
            tenant: cert.tenant.clone(),
            period: Period {
                from: cert.period_from,
                to: cert.period_to,
            },
            region: cert.scope.region.clone(),
            checkpoint_size,
        })
    }

    /// Whether it counts every record of a row of `tenant` in `region` for `charge` rated by an
    /// invoice computed at log size `size`: those records start in `charge` and were logged
    /// below `size`.
    fn covers(&self, tenant: &str, region: &str, charge: Period, size: u64) -> bool {
        self.tenant == tenant
            && self.period.from <= charge.from
            && charge.to <= self.period.to
            && self.region.as_deref().is_none_or(|r| r == region)
            && self.checkpoint_size >= size
    }
}

/// A logged `region_params` entry: its log index and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionEntry {
    pub index: u64,
    pub params: RegionParameters,
}

/// A credit note entry: its log index and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreditNote {
    pub index: u64,
    pub body: Settlement,
}

/// What the rows need besides the documents: the certificates that may cover them and the
/// logged region parameters (for carbon).
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// In the order to prefer (the first that covers a row is named).
    pub certificates: Vec<Covering>,
    pub regions: Vec<RegionEntry>,
}

impl Context {
    /// The carbon intensity (gCO2e per kWh) of an energy line of `inv`: that of the region
    /// parameters logged below the invoice's checkpoint, in force during `charge`, with the
    /// line's currency, price and PUE; `None` when none or several differing ones match.
    fn carbon_intensity(
        &self,
        inv: &Invoice,
        line: &InvoiceLine,
        charge: Period,
    ) -> Option<Decimal> {
        let mut series: Vec<&RegionParameters> = self
            .regions
            .iter()
            .filter(|e| e.index < inv.checkpoint_size && e.params.region == line.region)
            .map(|e| &e.params)
            .collect();
        series.sort_by_key(|p| p.effective_from);
        let mut found: Option<Decimal> = None;
        for (i, p) in series.iter().enumerate() {
            let until = series.get(i + 1).map(|n| n.effective_from);
            let in_force = p.effective_from < charge.to && until.is_none_or(|u| u > charge.from);
            let matches = p.currency == inv.currency
                && p.electricity_price_per_kwh == line.unit_price
                && Some(p.pue) == line.pue;
            if in_force && matches {
                match found {
                    Some(c) if c != p.carbon_g_per_kwh => return None,
                    _ => found = Some(p.carbon_g_per_kwh),
                }
            }
        }
        found
    }

    fn certificate(&self, inv: &Invoice, region: &str, charge: Period) -> Option<String> {
        self.certificates
            .iter()
            .find(|c| c.covers(&inv.tenant, region, charge, inv.checkpoint_size))
            .map(|c| c.id.clone())
    }
}

/// Who issued the invoice: the issuer's configured name, else the log's origin.
fn issuer_name(inv: &Invoice) -> String {
    let name = inv.issuer.name.trim();
    if name.is_empty() {
        inv.log_origin.clone()
    } else {
        name.to_owned()
    }
}

/// A row of `inv` with the columns every row of it shares, for `charge`.
fn base_row(inv: &Invoice, charge: Period, billed: Decimal) -> Row {
    let issuer = issuer_name(inv);
    let account_name = if inv.bill_to.name.trim().is_empty() {
        inv.tenant.clone()
    } else {
        inv.bill_to.name.clone()
    };
    Row {
        billed_cost: billed,
        billing_account_id: inv.tenant.clone(),
        billing_account_name: account_name.clone(),
        billing_currency: inv.currency.clone(),
        billing_period_end: inv.period.to,
        billing_period_start: inv.period.from,
        charge_category: "Usage".into(),
        charge_class: None,
        charge_description: String::new(),
        charge_frequency: "Usage-Based".into(),
        charge_period_end: charge.to,
        charge_period_start: charge.from,
        commitment_discount_category: None,
        commitment_discount_id: None,
        commitment_discount_name: None,
        commitment_discount_quantity: None,
        commitment_discount_status: None,
        commitment_discount_type: None,
        commitment_discount_unit: None,
        consumed_quantity: None,
        consumed_unit: None,
        contracted_cost: billed,
        contracted_unit_price: None,
        effective_cost: billed,
        invoice_id: inv.number.clone(),
        invoice_issuer_name: issuer.clone(),
        list_cost: billed,
        list_unit_price: None,
        pricing_category: None,
        pricing_currency: inv.currency.clone(),
        pricing_currency_contracted_unit_price: None,
        pricing_currency_effective_cost: billed,
        pricing_currency_list_unit_price: None,
        pricing_quantity: None,
        pricing_unit: None,
        provider_name: issuer.clone(),
        publisher_name: issuer,
        region_id: None,
        region_name: None,
        service_category: SERVICE_CATEGORY.into(),
        service_name: SERVICE_NAME.into(),
        service_subcategory: SERVICE_SUBCATEGORY.into(),
        sku_id: None,
        sku_meter: None,
        sku_price_details: None,
        sku_price_id: None,
        sub_account_id: inv.tenant.clone(),
        sub_account_name: account_name,
        x_energy_kwh: None,
        x_pue: None,
        x_carbon_grams_co2e: None,
        x_invoice_number: inv.number.clone(),
        x_certificate_id: None,
        x_log_origin: inv.log_origin.clone(),
        x_log_checkpoint_size: Some(inv.checkpoint_size),
        x_log_checkpoint_root: Base64(inv.checkpoint_root.clone()),
    }
}

/// The FOCUS `ServiceCategory` of a contract fee's category.
pub fn service_category(category: FeeCategory) -> &'static str {
    match category {
        FeeCategory::Compute => "Compute",
        FeeCategory::Networking => "Networking",
        FeeCategory::Storage => "Storage",
        FeeCategory::Support | FeeCategory::Other => "Other",
    }
}

/// The FOCUS `PricingCategory` of a lease class.
pub fn pricing_category(class: LeaseClass) -> &'static str {
    match class {
        LeaseClass::OnDemand => "Standard",
        LeaseClass::Reserved => "Committed",
        LeaseClass::Spot => "Dynamic",
    }
}

/// The usage row of one invoice line.
fn usage_row(inv: &Invoice, line: &InvoiceLine, ctx: &Context) -> Row {
    let charge = line.adjustment_for.unwrap_or(inv.period);
    let mut row = base_row(inv, charge, line.net);
    // Σ BilledCost reconciles with the invoice; List/ContractedCost are the price × the
    // quantity as printed (FOCUS: unit price × PricingQuantity = cost), which differs from
    // `net` (computed from the exact GPU-seconds, rounded once) by the rounding only.
    let at_price = (line.unit_price * line.quantity).normalize();
    row.list_cost = at_price;
    row.contracted_cost = at_price;
    row.list_unit_price = Some(line.unit_price.normalize());
    row.contracted_unit_price = Some(line.unit_price.normalize());
    row.pricing_currency_list_unit_price = row.list_unit_price;
    row.pricing_currency_contracted_unit_price = row.contracted_unit_price;
    row.pricing_quantity = Some(line.quantity.normalize());
    row.charge_description = line.description.clone();
    row.charge_class = line.adjustment_for.map(|_| "Correction".to_owned());
    row.region_id = Some(line.region.clone());
    row.region_name = Some(line.region.clone());
    row.x_certificate_id = ctx.certificate(inv, &line.region, charge);
    // Usage of the invoice's own period draws its (first) contract commitment down
    // (docs/RATING.md, "Contracts": drawn = Σ net of those lines and of the overage lines).
    if gpuledger_core::invoice::draws_down(line) {
        if let Some(c) = inv.commitments.first() {
            commitment_columns(&mut row, inv, &c.contract, "Used", line.net);
        }
    }
    match line.kind {
        LineKind::Gpu => {
            let model = line.gpu_model.as_deref().unwrap_or("unknown");
            let class = line.class.unwrap_or(LeaseClass::OnDemand);
            row.pricing_unit = Some(GPU_PRICING_UNIT.into());
            row.consumed_quantity = line.gpu_seconds.map(|s| s.normalize());
            row.consumed_unit = row.consumed_quantity.map(|_| GPU_CONSUMED_UNIT.into());
            row.pricing_category = Some(pricing_category(class).into());
            row.sku_id = Some(format!("gpu/{model}"));
            row.sku_meter = Some("GPU Hours".into());
            let mut price_id = format!("gpu/{model}/{}/{}", line.region, class.as_str());
            if let (Some(plan), Some(tier)) = (&line.plan, line.tier) {
                price_id.push_str(&format!("/{plan}/tier-{tier}"));
            }
            row.sku_price_id = Some(price_id);
        }
        LineKind::Energy => {
            row.pricing_unit = Some(ENERGY_UNIT.into());
            row.consumed_quantity = Some(line.measured_kwh.unwrap_or(line.quantity).normalize());
            row.consumed_unit = Some(ENERGY_UNIT.into());
            // Electricity is billed at the region's logged price: a standard price.
            row.pricing_category = Some("Standard".into());
            row.sku_id = Some("energy".into());
            row.sku_meter = Some("Energy".into());
            row.sku_price_id = Some(format!("energy/{}", line.region));
            row.x_energy_kwh = line.measured_kwh.map(|k| k.normalize());
            row.x_pue = line.pue.map(|p| p.normalize());
            row.x_carbon_grams_co2e = ctx
                .carbon_intensity(inv, line, charge)
                .map(|c| (line.quantity * c).normalize());
        }
        // GPU time a contract prices (docs/RATING.md, "Included GPU-hours and overage"):
        // usage at the contract's price (0 within the included hours), of its billing period.
        LineKind::Included | LineKind::Overage => {
            let model = line.gpu_model.as_deref().unwrap_or("unknown");
            row.pricing_unit = Some(GPU_PRICING_UNIT.into());
            row.consumed_quantity = line.gpu_seconds.map(|s| s.normalize());
            row.consumed_unit = row.consumed_quantity.map(|_| GPU_CONSUMED_UNIT.into());
            row.pricing_category = Some("Committed".into());
            let what = match line.kind {
                LineKind::Included => "included",
                _ => "overage",
            };
            contract_charge(&mut row, line, &format!("{what}/{model}"));
            row.sku_id = Some(format!("gpu/{model}"));
            row.sku_meter = Some("GPU Hours".into());
        }
        // A contract's fixed fee: a purchase for its billing period (FOCUS 1.2: ChargeCategory
        // Purchase, ChargeFrequency Recurring, or One-Time for a one-off fee).
        LineKind::Fee => {
            let one_off = line.timing == Some(FeeTiming::Once);
            row.charge_category = "Purchase".into();
            row.charge_frequency = if one_off { "One-Time" } else { "Recurring" }.into();
            row.pricing_unit = Some("Billing Period".into());
            row.pricing_category = Some("Committed".into());
            contract_charge(&mut row, line, "fee");
        }
        // A commitment's shortfall: the unused part of the minimum spend (FOCUS 1.2: a Usage
        // row of the commitment with CommitmentDiscountStatus Unused).
        LineKind::TrueUp => {
            row.charge_category = "Usage".into();
            row.charge_frequency = "Recurring".into();
            row.pricing_unit = Some("Billing Period".into());
            row.pricing_category = Some("Committed".into());
            contract_charge(&mut row, line, "true-up");
            if let Some(c) = line.contract.as_deref() {
                commitment_columns(&mut row, inv, c, "Unused", line.net);
            }
        }
        // An SLA credit: a credit (FOCUS 1.2 ChargeCategory Credit, negative cost) against the
        // fee of the billing period whose availability fell short.
        LineKind::SlaCredit => {
            row.charge_category = "Credit".into();
            row.charge_frequency = "One-Time".into();
            // A credit has a cost, not a price: as a credit note's row.
            row.list_cost = line.net;
            row.contracted_cost = line.net;
            row.list_unit_price = None;
            row.contracted_unit_price = None;
            row.pricing_currency_list_unit_price = None;
            row.pricing_currency_contracted_unit_price = None;
            row.pricing_quantity = None;
            contract_charge(&mut row, line, "sla-credit");
        }
    }
    row
}

/// The commitment columns of a row of contract `contract`'s minimum spend: `status` `Used`
/// (usage drawing it down) or `Unused` (its true-up), `quantity` in the billing currency.
fn commitment_columns(
    row: &mut Row,
    inv: &Invoice,
    contract: &str,
    status: &str,
    quantity: Decimal,
) {
    row.commitment_discount_id = Some(format!("contract/{contract}/commitment"));
    row.commitment_discount_name = Some(format!("Minimum spend, contract {contract}"));
    row.commitment_discount_category = Some("Spend".into());
    row.commitment_discount_type = Some("Minimum spend".into());
    row.commitment_discount_status = Some(status.into());
    row.commitment_discount_quantity = Some(quantity);
    row.commitment_discount_unit = Some(inv.currency.clone());
}

/// What a contract's line (`fee`, `true_up`, `sla_credit`) says of itself on its row: the
/// billing period it is for (when it names one), its `ServiceCategory` (from its fee's
/// category), and its SKU: `contract/<id>`, priced as `contract/<id>/<what>`.
fn contract_charge(row: &mut Row, line: &InvoiceLine, what: &str) {
    if let Some(p) = line.service_period {
        row.charge_period_start = p.from;
        row.charge_period_end = p.to;
    }
    row.service_category = line
        .category
        .map_or(SERVICE_CATEGORY, service_category)
        .into();
    let contract = line.contract.as_deref().unwrap_or("contract");
    row.sku_id = Some(format!("contract/{contract}"));
    row.sku_price_id = Some(format!("contract/{contract}/{what}"));
}

/// The tax row of one invoice line (only for a line with a non-zero tax).
fn tax_row(inv: &Invoice, line: &InvoiceLine) -> Row {
    let charge = line.adjustment_for.unwrap_or(inv.period);
    let mut row = base_row(inv, charge, line.tax);
    row.charge_category = "Tax".into();
    row.charge_class = line.adjustment_for.map(|_| "Correction".to_owned());
    let rate = (line.tax_rate * Decimal::ONE_HUNDRED).normalize();
    row.charge_description = format!(
        "{} {rate} % on: {}",
        line.tax_name.as_deref().unwrap_or("Tax"),
        line.description
    );
    row.region_id = Some(line.region.clone());
    row.region_name = Some(line.region.clone());
    row
}

/// The rows of one issued invoice: per line, a `Usage` row (`BilledCost` = `net`) and, when
/// its tax is not zero, a `Tax` row (`BilledCost` = `tax`). Their `BilledCost` adds up to the
/// invoice's `total` exactly, or the invoice is refused as [`FocusError::Unbalanced`].
pub fn invoice_rows(inv: &Invoice, ctx: &Context) -> Result<Vec<Row>, FocusError> {
    let mut rows = Vec::with_capacity(inv.lines.len() * 2);
    for line in &inv.lines {
        rows.push(usage_row(inv, line, ctx));
        if !line.tax.is_zero() {
            rows.push(tax_row(inv, line));
        }
    }
    let sum: Decimal = rows.iter().map(|r| r.billed_cost).sum();
    if sum != inv.total {
        return Err(FocusError::Unbalanced {
            number: inv.number.clone(),
            rows: sum,
            total: inv.total,
        });
    }
    Ok(rows)
}

/// The `InvoiceId` of a credit note: its number, `CN-` and its log index
/// ([`gpuledger_core::invoice::credit_note_number`], the one the API answers with; the entry is
/// the document).
pub fn credit_note_id(index: u64) -> String {
    gpuledger_core::invoice::credit_note_number(index)
}

/// The `Credit` row of a credit note against `inv`: `BilledCost` = minus its amount, for the
/// invoice's period, `InvoiceId` of its own ([`credit_note_id`]), `x_InvoiceNumber` the
/// invoice's.
pub fn credit_row(inv: &Invoice, note: &CreditNote) -> Result<Row, FocusError> {
    if note.body.invoice != inv.number || note.body.tenant != inv.tenant {
        return Err(FocusError::WrongInvoice {
            index: note.index,
            credited: note.body.invoice.clone(),
            number: inv.number.clone(),
        });
    }
    let mut row = base_row(inv, inv.period, -note.body.amount);
    row.charge_category = "Credit".into();
    row.charge_frequency = "One-Time".into();
    row.invoice_id = credit_note_id(note.index);
    row.charge_description = if note.body.note.trim().is_empty() {
        format!("Credit note against invoice {}", inv.number)
    } else {
        format!(
            "Credit note against invoice {}: {}",
            inv.number, note.body.note
        )
    };
    Ok(row)
}

/// Writes `rows` as CSV with the [`COLUMNS`] header (RFC 4180, `\n` line ends).
pub fn write_csv<W: std::io::Write>(
    rows: impl IntoIterator<Item = Row>,
    out: W,
) -> Result<(), csv::Error> {
    let mut w = csv::WriterBuilder::new()
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(out);
    w.write_record(COLUMNS)?;
    for row in rows {
        w.write_record(row.cells())?;
    }
    w.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuledger_core::invoice::{BillTo, Issuer, Unit, INVOICE_FORMAT_V2};
    use gpuledger_core::time::Timestamp;

    fn dec(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse(s).unwrap()
    }

    fn period(from: &str, to: &str) -> Period {
        Period {
            from: ts(from),
            to: ts(to),
        }
    }

    fn line(
        kind: LineKind,
        class: Option<LeaseClass>,
        qty: &str,
        price: &str,
        net: &str,
    ) -> InvoiceLine {
        InvoiceLine {
            kind,
            description: "a line".into(),
            region: "west".into(),
            gpu_model: (kind == LineKind::Gpu).then(|| "H100".into()),
            class,
            plan: None,
            tier: None,
            quantity: dec(qty),
            unit: if kind == LineKind::Gpu {
                Unit::GpuHour
            } else {
                Unit::Kwh
            },
            gpu_seconds: (kind == LineKind::Gpu).then(|| dec(qty) * dec("3600")),
            measured_kwh: (kind == LineKind::Energy).then(|| dec("12.5")),
            pue: (kind == LineKind::Energy).then(|| dec("1.08")),
            unit_price: dec(price),
            net: dec(net),
            tax_name: Some("VAT".into()),
            tax_rate: dec("0.06"),
            tax: Decimal::ZERO,
            gross: Decimal::ZERO,
            records: 1,
            adjustment_for: None,
            contract: None,
            category: None,
            timing: None,
            service_period: None,
        }
    }

    fn invoice(mut lines: Vec<InvoiceLine>) -> Invoice {
        let t = gpuledger_core::invoice::apply_tax(&mut lines, "CNY");
        Invoice {
            format: INVOICE_FORMAT_V2.into(),
            number: "INV-000001".into(),
            tenant: "acme".into(),
            period: period("2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z"),
            currency: "CNY".into(),
            issued_at: ts("2026-12-01T00:00:00Z"),
            log_origin: "ledger.example/log".into(),
            checkpoint_size: 40,
            checkpoint_root: "root".into(),
            issuer: Issuer {
                name: "GPU Cloud Ltd".into(),
                ..Default::default()
            },
            bill_to: BillTo {
                tenant: "acme".into(),
                name: "Acme AI".into(),
                address: vec![],
            },
            payment_terms_days: 30,
            due_at: ts("2026-12-31T00:00:00Z"),
            lines,
            net_total: t.net,
            tax_total: t.tax,
            total: t.gross,
            excluded: Vec::new(),
            commitments: Vec::new(),
            availability: Vec::new(),
            allowances: Vec::new(),
            prepaid: Vec::new(),
            amount_due: None,
        }
    }

    #[test]
    fn rows_add_up_to_the_total_and_name_their_category() {
        let mut late = line(
            LineKind::Gpu,
            Some(LeaseClass::OnDemand),
            "2",
            "18.5",
            "37.00",
        );
        late.adjustment_for = Some(period("2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z"));
        let inv = invoice(vec![
            line(LineKind::Gpu, Some(LeaseClass::Spot), "0.5", "9", "4.50"),
            line(
                LineKind::Gpu,
                Some(LeaseClass::Reserved),
                "1",
                "12.345",
                "12.35",
            ),
            line(LineKind::Energy, None, "13.5", "0.28", "3.78"),
            late,
        ]);
        let rows = invoice_rows(&inv, &Context::default()).unwrap();
        let sum: Decimal = rows.iter().map(|r| r.billed_cost).sum();
        assert_eq!(sum, inv.total);
        assert_eq!((inv.net_total, inv.tax_total), (dec("57.63"), dec("3.46")));
        let cats: Vec<(&str, Option<&str>)> = rows
            .iter()
            .map(|r| (r.charge_category.as_str(), r.pricing_category.as_deref()))
            .collect();
        assert_eq!(
            cats,
            [
                ("Usage", Some("Dynamic")),
                ("Tax", None),
                ("Usage", Some("Committed")),
                ("Tax", None),
                ("Usage", Some("Standard")),
                ("Tax", None),
                ("Usage", Some("Standard")),
                ("Tax", None),
            ]
        );
        // The reserved line: 1 GPU-h at 12.345 is 12.345 at list price, billed 12.35.
        assert_eq!(
            (rows[2].list_cost, rows[2].billed_cost),
            (dec("12.345"), dec("12.35"))
        );
        // The late line and its tax are corrections for October, billed in November.
        assert_eq!(rows[6].charge_class.as_deref(), Some("Correction"));
        assert_eq!(rows[7].charge_class.as_deref(), Some("Correction"));
        assert_eq!(rows[6].charge_period_start, ts("2026-10-01T00:00:00Z"));
        assert_eq!(rows[6].billing_period_start, ts("2026-11-01T00:00:00Z"));
        assert_eq!(rows[0].invoice_issuer_name, "GPU Cloud Ltd");
        assert_eq!(rows[0].cells().len(), COLUMNS.len());
    }

    #[test]
    fn an_inconsistent_invoice_is_refused() {
        let mut inv = invoice(vec![line(
            LineKind::Gpu,
            Some(LeaseClass::OnDemand),
            "8",
            "18.5",
            "148.00",
        )]);
        inv.total += dec("0.01");
        assert!(matches!(
            invoice_rows(&inv, &Context::default()),
            Err(FocusError::Unbalanced { .. })
        ));
    }

    #[test]
    fn carbon_and_certificates_come_from_the_context() {
        let inv = invoice(vec![line(LineKind::Energy, None, "13.5", "0.28", "3.78")]);
        let params = |index, carbon: &str, from: &str| RegionEntry {
            index,
            params: RegionParameters {
                region: "west".into(),
                currency: "CNY".into(),
                electricity_price_per_kwh: dec("0.28"),
                pue: dec("1.08"),
                carbon_g_per_kwh: dec(carbon),
                effective_from: ts(from),
            },
        };
        let cert = Covering {
            id: "CERT-000001".into(),
            tenant: "acme".into(),
            period: inv.period,
            region: None,
            checkpoint_size: 40,
        };
        let mut ctx = Context {
            certificates: vec![
                Covering {
                    checkpoint_size: 39,
                    ..cert.clone()
                },
                cert,
            ],
            regions: vec![params(3, "530", "2026-01-01T00:00:00Z")],
        };
        let row = &invoice_rows(&inv, &ctx).unwrap()[0];
        assert_eq!(row.x_carbon_grams_co2e, Some(dec("7155")));
        // The certificate computed before the invoice's checkpoint may miss some of its records.
        assert_eq!(row.x_certificate_id.as_deref(), Some("CERT-000001"));
        ctx.certificates.pop();
        assert_eq!(invoice_rows(&inv, &ctx).unwrap()[0].x_certificate_id, None);
        // A second matching price in force in the period with another intensity: unknown.
        ctx.regions.push(params(5, "600", "2026-11-15T00:00:00Z"));
        assert_eq!(
            invoice_rows(&inv, &ctx).unwrap()[0].x_carbon_grams_co2e,
            None
        );
        // Logged after the invoice's checkpoint: not what it was priced with.
        ctx.regions[1].index = 40;
        assert_eq!(
            invoice_rows(&inv, &ctx).unwrap()[0].x_carbon_grams_co2e,
            Some(dec("7155"))
        );
    }

    #[test]
    fn a_credit_note_is_its_own_document() {
        let inv = invoice(vec![line(
            LineKind::Gpu,
            Some(LeaseClass::OnDemand),
            "8",
            "18.5",
            "148.00",
        )]);
        let note = CreditNote {
            index: 77,
            body: Settlement {
                tenant: "acme".into(),
                invoice: "INV-000001".into(),
                currency: "CNY".into(),
                amount: dec("48.00"),
                note: "outage".into(),
                external_reference: None,
            },
        };
        let row = credit_row(&inv, &note).unwrap();
        assert_eq!(
            (
                row.billed_cost,
                row.invoice_id.as_str(),
                row.x_invoice_number.as_str()
            ),
            (dec("-48.00"), "CN-77", "INV-000001")
        );
        let mut other = note.clone();
        other.body.invoice = "INV-000002".into();
        assert!(credit_row(&inv, &other).is_err());
    }
}
