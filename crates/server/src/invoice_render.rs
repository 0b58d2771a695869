//! Invoice downloads: an issued invoice ([`InvoiceDoc`]) as JSON, CSV and PDF.
//!
//! The three say the same thing with the same spellings, so a tenant's finance tool can check
//! one against another: quantities, prices and rates in their canonical decimal form
//! (`core::decimal`), amounts with exactly the currency's minor digits (`148.00`), timestamps in
//! the wire form (`core::time`). JSON is the document as issued (version 2, or version 1 for
//! invoices issued before it); CSV and PDF render the version 2 view of either
//! ([`InvoiceDoc::view`]).
//!
//! Pure: no I/O and no clock. A PDF is a function of the invoice document and its
//! [`PdfNotes`] (language, payment instructions, the buyer's tax id, links): every download of
//! an issued invoice with the same settings is the same bytes. Its dates are the invoice's own
//! (the document's creation date is `issued_at`), its trailer `/ID` is derived from the
//! invoice's SHA-256, and its font resources have fixed names. Payments and the balance, which
//! change, are not on it: they are the invoice's account (`GET /v1/invoices/{number}/account`).
//!
//! Labels and dates are in English or Simplified Chinese ([`Lang`]); dates as people write them
//! ("1 December 2026", "2026年12月1日"), in UTC, with the time of day only where a period does
//! not start or end at midnight. Every font is embedded (archivable, no standard-14 font):
//! Arimo Regular and Bold (OFL-1.1) for Latin, Greek and Cyrillic text, Droid Sans Fallback
//! (Apache-2.0) for Chinese (assets/fonts/), each as a subset of the glyphs drawn, with a
//! ToUnicode CMap so the text extracts back. All text is real text (searchable, copyable) on as
//! many A4 pages as it needs. A character no font has (a control character) becomes `?`.

use gpuledger_core::decimal::to_canonical;
use gpuledger_core::invoice::{
    class_label, CreditNoteDoc, Invoice, InvoiceDoc, InvoiceLine, LineKind, Period,
};
use gpuledger_core::time::Timestamp;
use printpdf::{
    FontId, Line, LinePoint, Mm, Op, ParsedFont, PdfDocument, PdfFont, PdfFontHandle, PdfPage,
    PdfSaveOptions, Point, Pt, TextItem, TextRenderingMode,
};
use rust_decimal::Decimal;
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

/// Most invoice lines a PDF is rendered for (about 350 pages). Larger invoices are refused with
/// [`RenderError::TooManyLines`]; their JSON and CSV downloads have no such limit.
pub const MAX_PDF_LINES: usize = 20_000;

/// The fonts a PDF embeds (subsets of), in assets/fonts/.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Slot {
    /// Arimo Regular (OFL-1.1): Latin, Greek, Cyrillic.
    Regular,
    /// Arimo Bold (OFL-1.1).
    Bold,
    /// Droid Sans Fallback (Apache-2.0): Chinese; bold is drawn by stroking it.
    Cjk,
}

const SLOTS: [Slot; 3] = [Slot::Regular, Slot::Bold, Slot::Cjk];

impl Slot {
    fn bytes(self) -> &'static [u8] {
        match self {
            Slot::Regular => include_bytes!("../../../assets/fonts/Arimo-Regular.ttf"),
            Slot::Bold => include_bytes!("../../../assets/fonts/Arimo-Bold.ttf"),
            Slot::Cjk => include_bytes!("../../../assets/fonts/DroidSansFallbackFull.ttf"),
        }
    }

    /// The font's resource name: fixed, so two renderings are the same bytes; its first six
    /// letters are the subset tag of ISO 32000-1 9.6.4.
    fn id(self) -> FontId {
        FontId(
            match self {
                Slot::Regular => "GLARIR",
                Slot::Bold => "GLARIB",
                Slot::Cjk => "GLDSFB",
            }
            .to_owned(),
        )
    }

    /// The font's PostScript name.
    fn name(self) -> &'static str {
        match self {
            Slot::Regular => "Arimo-Regular",
            Slot::Bold => "Arimo-Bold",
            Slot::Cjk => "DroidSansFallbackFull",
        }
    }

    /// The whole font, parsed once per process (for glyph lookups and widths).
    fn font(self) -> &'static ParsedFont {
        static FONTS: [OnceLock<ParsedFont>; 3] =
            [OnceLock::new(), OnceLock::new(), OnceLock::new()];
        FONTS[self as usize].get_or_init(|| {
            ParsedFont::from_bytes(self.bytes(), 0, &mut Vec::new())
                .expect("the fonts in assets/fonts parse")
        })
    }

    /// Whether the font has a glyph for `c`.
    fn has(self, c: char) -> bool {
        self.font()
            .lookup_glyph_index(c as u32)
            .is_some_and(|g| g != 0)
    }

    /// The font cut down to the glyphs of `chars` (and `.notdef`), with a Unicode cmap: what a
    /// PDF embeds, a few kB instead of 0.5 to 4 MB. `None` if allsorts cannot subset it.
    fn subset(self, chars: &BTreeSet<char>) -> Option<ParsedFont> {
        use allsorts::binary::read::ReadScope;
        use allsorts::font_data::FontData;
        use allsorts::subset::{subset, CmapTarget, SubsetProfile};
        let font = self.font();
        let gids: BTreeSet<u16> = chars
            .iter()
            .filter_map(|c| font.lookup_glyph_index(*c as u32))
            .filter(|g| *g != 0)
            .collect();
        let ids: Vec<u16> = std::iter::once(0).chain(gids).collect();
        let data = ReadScope::new(self.bytes()).read::<FontData<'_>>().ok()?;
        let provider = data.table_provider(0).ok()?;
        let bytes = subset(
            &provider,
            &ids,
            &SubsetProfile::Minimal,
            CmapTarget::Unicode,
        )
        .ok()?;
        ParsedFont::from_bytes(&bytes, 0, &mut Vec::new())
    }
}

/// The CSV columns, in order.
pub const CSV_HEADER: [&str; 30] = [
    "invoice_number",
    "format",
    "tenant",
    "bill_to_name",
    "issuer_name",
    "period_from",
    "period_to",
    "currency",
    "issued_at",
    "due_at",
    "kind",
    "description",
    "region",
    "gpu_model",
    "class",
    "quantity",
    "unit",
    "gpu_seconds",
    "measured_kwh",
    "pue",
    "unit_price",
    "net",
    "tax_name",
    "tax_rate",
    "tax",
    "gross",
    "records",
    "adjustment_for_from",
    "adjustment_for_to",
    "excluded_entry",
];

/// Why an invoice could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    #[error("invoice {number}: its totals, taxes or due date are not what its lines make")]
    TotalMismatch { number: String },
    #[error(
        "invoice {number} has {lines} lines; a PDF is rendered for at most {MAX_PDF_LINES} \
         (download it as CSV or JSON)"
    )]
    TooManyLines { number: String, lines: usize },
}

/// The language of a PDF's labels and dates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lang {
    #[default]
    En,
    /// Simplified Chinese.
    ZhCn,
}

impl Lang {
    /// `en`, `en-GB`, ... → English; `zh`, `zh-CN`, `zh-Hans`, `zh-Hans-CN` → Simplified
    /// Chinese (case-insensitive); anything else (`zh-TW`, `fr`) `None`.
    pub fn parse(tag: &str) -> Option<Lang> {
        let t = tag.trim().to_ascii_lowercase();
        let mut parts = t.split(['-', '_']);
        match (parts.next(), parts.next()) {
            (Some("en"), _) => Some(Lang::En),
            (Some("zh"), None | Some("cn" | "hans" | "sg")) => Some(Lang::ZhCn),
            _ => None,
        }
    }

    /// The language an invoice is rendered in when none is asked for: Simplified Chinese when
    /// the bill-to name or address is written in Chinese characters, else English. The
    /// invoice's own language, not the reader's: everyone who downloads it gets the same
    /// document.
    pub fn of_invoice(invoice: &Invoice) -> Lang {
        let han = |s: &str| s.chars().any(is_han);
        if han(&invoice.bill_to.name) || invoice.bill_to.address.iter().any(|l| han(l)) {
            Lang::ZhCn
        } else {
            Lang::En
        }
    }

    /// The BCP 47 tag: `en`, `zh-CN`.
    pub fn tag(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::ZhCn => "zh-CN",
        }
    }
}

/// A CJK unified ideograph (the basic block and extension A).
fn is_han(c: char) -> bool {
    matches!(c, '\u{4e00}'..='\u{9fff}' | '\u{3400}'..='\u{4dbf}')
}

/// What a PDF shows besides the invoice document: its language, the buyer's tax id, how to
/// pay, and where and how to verify it. All of it comes from the settings, so a PDF is the same
/// bytes on every download while they stay the same.
#[derive(Debug, Clone, Default)]
pub struct PdfNotes {
    /// The labels' language; none: [`Lang::of_invoice`].
    pub lang: Option<Lang>,
    /// The buyer's tax registration number (`[issuer.bill_to_tax_ids]`), shown in the bill-to block.
    pub buyer_tax_id: Option<String>,
    /// How to pay (`[issuer]` `payment_instructions`): bank, account, reference; one line each.
    pub payment_instructions: Vec<String>,
    /// The service's public base URL (`public_url`), for the JSON, bundle and account links.
    pub public_url: Option<String>,
    /// The log's verifier key (`<origin>+<key id>+<key>`), for `--log-key`.
    pub verifier_key: String,
}

// ---------------------------------------------------------------------------------------------
// Spellings shared by the three formats.

/// A quantity, price or rate: canonical decimal, as `core::decimal::serialize` writes it.
fn exact(d: Decimal) -> String {
    to_canonical(d)
}

/// An amount: every digit of the currency's minor unit, as `core::invoice` serialises it.
fn money(d: Decimal) -> String {
    d.to_string()
}

/// A tax rate as a percentage: `0.06` → `6%`.
fn percent(rate: Decimal) -> String {
    format!("{}%", to_canonical(rate * Decimal::from(100)))
}

fn class_name(line: &InvoiceLine) -> &'static str {
    line.class.map_or("", |c| c.as_str())
}

/// A text cell of a CSV export (invoice CSV and FOCUS), neutralised against formula injection
/// as OWASP's "CSV Injection" page recommends: a cell that begins with `=`, `+`, `-`, `@`, a tab
/// or a carriage return (or their full-width forms `＝＋－＠`, which some spreadsheets read
/// the same way) gets a single quote in front, so a spreadsheet shows it as text instead of
/// running it. Quotes, commas and line breaks inside a cell are the CSV writer's business
/// (RFC 4180 quoting).
///
/// Only for text that can come from people (names, addresses, descriptions, regions, GPU
/// models, tax names, notes, ids): the numbers, decimals, timestamps and hashes the exports
/// write themselves keep their spelling, so a credit of `-1.50` stays the number −1.50.
pub fn csv_text(s: &str) -> Cow<'_, str> {
    match s.chars().next() {
        Some(
            '=' | '+' | '-' | '@' | '\t' | '\r' | '\u{ff1d}' | '\u{ff0b}' | '\u{ff0d}' | '\u{ff20}',
        ) => Cow::Owned(format!("'{s}")),
        _ => Cow::Borrowed(s),
    }
}

// ---------------------------------------------------------------------------------------------
// JSON

/// The invoice document as pretty-printed JSON (the members and values the document's RFC 8785
/// form has, which is what its SHA-256 is of), decimals as strings; ends with a newline.
pub fn to_json(invoice: &InvoiceDoc) -> Vec<u8> {
    let mut out = serde_json::to_vec_pretty(&invoice.to_value())
        .expect("an invoice always serialises: string keys, strings and integers only");
    out.push(b'\n');
    out
}

// ---------------------------------------------------------------------------------------------
// CSV

/// The invoice as CSV: the [`CSV_HEADER`] row, one row per line in the invoice's order with
/// the line's members of the JSON document, one row of kind `excluded` per record the
/// document's `excluded` lists (its log index in `excluded_entry`, its reason in
/// `description`, `records` 1, nothing priced), and a final row of kind `total` whose `net`,
/// `tax` and `gross` are the invoice's `net_total`, `tax_total` and `total`. Empty cells for
/// what a line does not have. Text cells go through [`csv_text`] (a name beginning with `=`
/// is written `'=`); the numeric and timestamp columns are written as the JSON has them.
pub fn to_csv(invoice: &InvoiceDoc) -> Vec<u8> {
    write_csv(&invoice.view()).expect("writing CSV into memory cannot fail")
}

fn write_csv(invoice: &Invoice) -> Result<Vec<u8>, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(CSV_HEADER)?;
    let from = invoice.period.from.to_string();
    let to = invoice.period.to.to_string();
    let issued = invoice.issued_at.to_string();
    let due = invoice.due_at.to_string();
    let text = |s: &str| csv_text(s).into_owned();
    let common = [
        text(&invoice.number),
        text(&invoice.format),
        text(&invoice.tenant),
        text(&invoice.bill_to.name),
        text(&invoice.issuer.name),
        from,
        to,
        text(&invoice.currency),
        issued,
        due,
    ];
    let opt = |d: Option<Decimal>| d.map(exact).unwrap_or_default();
    for line in &invoice.lines {
        let (adj_from, adj_to) = match line.adjustment_for {
            Some(p) => (p.from.to_string(), p.to.to_string()),
            None => (String::new(), String::new()),
        };
        let mut row: Vec<String> = common.to_vec();
        row.extend([
            line.kind.as_str().to_owned(),
            text(&line.description),
            text(&line.region),
            text(line.gpu_model.as_deref().unwrap_or_default()),
            class_name(line).to_owned(),
            exact(line.quantity),
            line.unit.as_str().to_owned(),
            opt(line.gpu_seconds),
            opt(line.measured_kwh),
            opt(line.pue),
            exact(line.unit_price),
            money(line.net),
            text(line.tax_name.as_deref().unwrap_or_default()),
            exact(line.tax_rate),
            money(line.tax),
            money(line.gross),
            line.records.to_string(),
            adj_from,
            adj_to,
            String::new(), // excluded_entry
        ]);
        w.write_record(&row)?;
    }
    for x in &invoice.excluded {
        let mut row: Vec<String> = common.to_vec();
        row.push("excluded".into());
        row.push(text(&x.reason));
        row.extend(std::iter::repeat_n(String::new(), 14)); // region .. gross
        row.push("1".into()); // records
        row.extend([String::new(), String::new(), x.entry.to_string()]);
        debug_assert_eq!(row.len(), CSV_HEADER.len());
        w.write_record(&row)?;
    }
    let mut row: Vec<String> = common.to_vec();
    row.push("total".into());
    row.extend(std::iter::repeat_n(String::new(), 10)); // description .. unit_price
    row.push(money(invoice.net_total));
    row.push(String::new()); // tax_name
    row.push(String::new()); // tax_rate
    row.push(money(invoice.tax_total));
    row.push(money(invoice.total));
    row.extend(std::iter::repeat_n(String::new(), 4)); // records, adjustment_for_*, excluded_entry
    debug_assert_eq!(row.len(), CSV_HEADER.len());
    w.write_record(&row)?;
    // What the prepaid lots paid: one `prepaid` row per draw (the lot's reference in
    // `description`, its source in `class`, the amount drawn, negative, in `gross`), then an
    // `amount_due` row.
    let tail = |kind: &str, description: String, class: &str, gross: String| {
        let mut row: Vec<String> = common.to_vec();
        row.push(kind.into());
        row.push(description);
        row.extend(std::iter::repeat_n(String::new(), 2)); // region, gpu_model
        row.push(class.into());
        row.extend(std::iter::repeat_n(String::new(), 10)); // quantity .. tax
        row.push(gross);
        row.extend(std::iter::repeat_n(String::new(), 4));
        debug_assert_eq!(row.len(), CSV_HEADER.len());
        row
    };
    for d in &invoice.prepaid {
        w.write_record(tail(
            "prepaid",
            text(&d.prepayment),
            d.source.as_str(),
            money(-d.amount),
        ))?;
    }
    if let Some(due) = invoice.amount_due {
        w.write_record(tail("amount_due", String::new(), "", money(due)))?;
    }
    w.into_inner().map_err(|e| e.into_error().into())
}

// ---------------------------------------------------------------------------------------------
// Credit notes: JSON and CSV

/// The CSV columns of a credit note, in order: its document's members.
pub const CREDIT_NOTE_CSV_HEADER: [&str; 13] = [
    "number",
    "format",
    "index",
    "tenant",
    "invoice",
    "currency",
    "amount",
    "note",
    "recorded_at",
    "invoice_period_from",
    "invoice_period_to",
    "invoice_total",
    "log_origin",
];

/// The credit-note document as pretty-printed JSON, decimals as strings; ends with a newline.
pub fn credit_note_to_json(note: &CreditNoteDoc) -> Vec<u8> {
    let mut out = serde_json::to_vec_pretty(note)
        .expect("a credit note always serialises: string keys, strings and integers only");
    out.push(b'\n');
    out
}

/// The credit note as CSV: the [`CREDIT_NOTE_CSV_HEADER`] row and one row with the document's
/// members, spelled as its JSON spells them; text cells through [`csv_text`].
pub fn credit_note_to_csv(note: &CreditNoteDoc) -> Vec<u8> {
    let text = |s: &str| csv_text(s).into_owned();
    let row = [
        text(&note.number),
        text(&note.format),
        note.index.to_string(),
        text(&note.tenant),
        text(&note.invoice),
        text(&note.currency),
        money(note.amount),
        text(&note.note),
        note.recorded_at.to_string(),
        note.invoice_period.from.to_string(),
        note.invoice_period.to.to_string(),
        money(note.invoice_total),
        text(&note.log_origin),
    ];
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(CREDIT_NOTE_CSV_HEADER)
        .and_then(|()| w.write_record(&row))
        .expect("writing CSV into memory cannot fail");
    w.into_inner().expect("writing CSV into memory cannot fail")
}

// ---------------------------------------------------------------------------------------------
// PDF

/// The words a PDF is written in, per [`Lang`].
struct Labels {
    title: &'static str,
    from: &'static str,
    bill_to: &'static str,
    tax_id: &'static str,
    email: &'static str,
    tenant_id: &'static str,
    no_address: &'static str,
    not_fapiao: Option<&'static str>,
    number: &'static str,
    issue_date: &'static str,
    due_date: &'static str,
    terms: &'static str,
    period: &'static str,
    currency: &'static str,
    log: &'static str,
    checkpoint: &'static str,
    description: &'static str,
    quantity: &'static str,
    unit_price: &'static str,
    net: &'static str,
    tax_rate: &'static str,
    tax: &'static str,
    gross: &'static str,
    net_total: &'static str,
    tax_total: &'static str,
    total: &'static str,
    /// "Paid from prepaid balance": a draw of a prepaid lot, with the lot's reference.
    prepaid: &'static str,
    amount_due: &'static str,
    payment: &'static str,
    verify: &'static str,
    continued: &'static str,
    colon: &'static str,
}

const EN: Labels = Labels {
    title: "Invoice",
    from: "From",
    bill_to: "Bill to",
    tax_id: "Tax ID",
    email: "Email",
    tenant_id: "Tenant ID",
    no_address: "No billing address is on file for this customer; ask the issuer to add it \
                 where this invoice must serve as a tax invoice.",
    not_fapiao: None,
    number: "Invoice number",
    issue_date: "Issue date",
    due_date: "Due date",
    terms: "Payment terms",
    period: "Period",
    currency: "Currency",
    log: "Log",
    checkpoint: "Checkpoint",
    description: "Description",
    quantity: "Quantity",
    unit_price: "Unit price",
    net: "Net",
    tax_rate: "Tax rate",
    tax: "Tax",
    gross: "Gross",
    net_total: "Net total",
    tax_total: "Tax total",
    total: "Total",
    prepaid: "Paid from prepaid balance",
    amount_due: "Amount due",
    payment: "How to pay",
    verify: "How to verify",
    continued: "(continued)",
    colon: ": ",
};

const ZH: Labels = Labels {
    title: "账单",
    from: "销售方",
    bill_to: "购买方",
    tax_id: "纳税人识别号",
    email: "邮箱",
    tenant_id: "租户 ID",
    no_address: "购买方未登记账单地址；如需将本账单用作税务凭证，请联系销售方补充。",
    not_fapiao: Some("本文件为服务账单，不是增值税发票。"),
    number: "账单编号",
    issue_date: "开具日期",
    due_date: "付款截止日期",
    terms: "付款期限",
    period: "计费周期",
    currency: "币种",
    log: "账本日志",
    checkpoint: "检查点",
    description: "项目",
    quantity: "数量",
    unit_price: "单价",
    net: "不含税金额",
    tax_rate: "税率",
    tax: "税额",
    gross: "价税合计",
    net_total: "不含税合计",
    tax_total: "税额合计",
    total: "价税合计",
    prepaid: "预付余额抵扣",
    amount_due: "应付金额",
    payment: "付款方式",
    verify: "如何验证",
    continued: "（续）",
    colon: "：",
};

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

const DAY: i64 = 86_400;

impl Lang {
    fn labels(self) -> &'static Labels {
        match self {
            Lang::En => &EN,
            Lang::ZhCn => &ZH,
        }
    }

    /// A date as people write it, in UTC: `1 December 2026`, `2026年12月1日`.
    fn date(self, t: Timestamp) -> String {
        let d = civil(t);
        match self {
            Lang::En => format!(
                "{} {} {}",
                d.day(),
                MONTHS[usize::from(u8::from(d.month())) - 1],
                d.year()
            ),
            Lang::ZhCn => format!("{}年{}月{}日", d.year(), u8::from(d.month()), d.day()),
        }
    }

    /// A date and time of day (UTC; seconds only where there are some).
    fn date_time(self, t: Timestamp) -> String {
        match self {
            Lang::En => format!("{}, {}", self.date(t), clock(t)),
            Lang::ZhCn => format!("{} {}", self.date(t), clock(t)),
        }
    }

    /// A period `[from, to)`: whole days as the first and last day (`1 November 2026 to
    /// 30 November 2026`), anything else with the times of day (`1 December 2026, 08:00 to
    /// 14:00 UTC`, the end excluded).
    fn period(self, p: Period) -> String {
        let midnight = |t: Timestamp| t.unix().rem_euclid(DAY) == 0;
        let (to_word, utc) = match self {
            Lang::En => (" to ", " UTC"),
            Lang::ZhCn => ("至", "（UTC）"),
        };
        if midnight(p.from) && midnight(p.to) && p.to.unix() > p.from.unix() {
            let last = Timestamp::from_unix(p.to.unix() - DAY).unwrap_or(p.from);
            if last.unix() <= p.from.unix() {
                return self.date(p.from);
            }
            return format!("{}{to_word}{}", self.date(p.from), self.date(last));
        }
        let same_day = p.from.unix().div_euclid(DAY) == p.to.unix().div_euclid(DAY);
        let end = if same_day {
            clock(p.to)
        } else {
            self.date_time(p.to)
        };
        match self {
            Lang::En => format!("{}{to_word}{end}{utc}", self.date_time(p.from)),
            Lang::ZhCn => format!("{} {to_word} {end}{utc}", self.date_time(p.from)),
        }
    }

    fn terms(self, days: u32) -> String {
        match (self, days) {
            (Lang::En, 0) => "due on issue".to_owned(),
            (Lang::En, 1) => "1 day".to_owned(),
            (Lang::En, n) => format!("{n} days"),
            (Lang::ZhCn, 0) => "开具即付".to_owned(),
            (Lang::ZhCn, n) => format!("{n} 天"),
        }
    }

    fn records(self, n: u64) -> String {
        match (self, n) {
            (Lang::En, 1) => "1 record".to_owned(),
            (Lang::En, n) => format!("{n} records"),
            (Lang::ZhCn, n) => format!("{n} 条记录"),
        }
    }

    /// A line's description for people. The document's description is English in a fixed
    /// grammar (`core::invoice::describe`): `GPU compute, H100, west, on-demand[, volume tier
    /// 2 of plan P]`, `Electricity, west, PUE 1.08`; in Chinese it is said again from its
    /// parts. A description in another shape is shown as it is.
    fn describe(self, line: &InvoiceLine) -> String {
        let d = &line.description;
        match self {
            Lang::En => match line.class {
                // The description names the class in lower case; the label is for people.
                Some(c) => d.replacen(&class_label(c).to_lowercase(), class_label(c), 1),
                None => d.clone(),
            },
            Lang::ZhCn => describe_zh(d).unwrap_or_else(|| d.clone()),
        }
    }
}

fn describe_zh(d: &str) -> Option<String> {
    let parts: Vec<&str> = d.split(", ").collect();
    match parts.as_slice() {
        ["GPU compute", model, region, class, rest @ ..] => {
            let class = match *class {
                "on-demand" => "按需",
                "reserved" => "预留",
                "spot" => "竞价",
                _ => return None,
            };
            let mut s = format!("GPU 算力，{model}，{region}，{class}");
            match rest {
                [] => {}
                [tier] => {
                    let (n, plan) = tier.strip_prefix("volume tier ")?.split_once(" of plan ")?;
                    s.push_str(&format!("，套餐 {plan} 第 {n} 档"));
                }
                _ => return None,
            }
            Some(s)
        }
        ["Electricity", region, pue] => {
            let pue = pue.strip_prefix("PUE ")?;
            Some(format!("电力，{region}，PUE {pue}"))
        }
        _ => sla_credit_zh(d).or_else(|| allowance_zh(d)),
    }
}

/// An `included` or `overage` line's description (`core::invoice::contract_lines`) in
/// Chinese.
fn allowance_zh(d: &str) -> Option<String> {
    if let Some(rest) = d.strip_prefix("Included GPU-hours, ") {
        let (model_lease, rest) = rest.split_once(": ")?;
        let (model, lease) = model_lease.split_once(", lease ")?;
        let (used, rest) = rest.split_once(" of ")?;
        let (included, fee) = rest.split_once(" GPU-h (")?;
        let fee = fee.strip_suffix(')')?;
        return Some(format!(
            "包含 GPU 时，{model}，租约 {lease}：已用 {used} / 包含 {included} GPU 时（{fee}）"
        ));
    }
    if let Some(rest) = d.strip_prefix("Overage (late records), ") {
        let (model_lease, fee) = rest.split_once(" (")?;
        let (model, lease) = model_lease.split_once(", lease ")?;
        let fee = fee.strip_suffix(')')?;
        return Some(format!(
            "超出用量（迟到记录），{model}，租约 {lease}（{fee}）"
        ));
    }
    let rest = d.strip_prefix("Overage above ")?;
    let (included, rest) = rest.split_once(" included GPU-h, ")?;
    let (model_lease, fee) = rest.split_once(" (")?;
    let (model, lease) = model_lease.split_once(", lease ")?;
    let fee = fee.strip_suffix(')')?;
    Some(format!(
        "超出包含 {included} GPU 时的用量，{model}，租约 {lease}（{fee}）"
    ))
}

/// An `sla_credit` line's description (`core::invoice::contract_lines`) in Chinese.
fn sla_credit_zh(d: &str) -> Option<String> {
    let (percent, rest) = d.strip_prefix("SLA credit ")?.split_once(" %: ")?;
    let (fee_lease, measured) = rest.rsplit_once(", availability ")?;
    let (fee, lease) = fee_lease.rsplit_once(", lease ")?;
    let (availability, target) = measured.split_once(" % (target ")?;
    let target = target.strip_suffix(" %)")?;
    Some(format!(
        "SLA 赔付 {percent} %：{fee}，租约 {lease}，可用率 {availability} %（承诺 {target} %）"
    ))
}

/// A timestamp's date and time of day in UTC.
fn civil(t: Timestamp) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(t.unix()).unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

/// `08:00`, or `08:00:30` where there are seconds.
fn clock(t: Timestamp) -> String {
    let d = civil(t);
    match d.second() {
        0 => format!("{:02}:{:02}", d.hour(), d.minute()),
        s => format!("{:02}:{:02}:{s:02}", d.hour(), d.minute()),
    }
}

/// The SHA-256 of the invoice's RFC 8785 JSON: the hash its `invoice_issued` entry records.
fn document_hash(doc: &InvoiceDoc) -> [u8; 32] {
    let bytes = gpuledger_core::canonical::to_vec(&doc.to_value())
        .expect("an invoice always serialises: string keys, strings and integers only");
    Sha256::digest(&bytes).into()
}

/// The invoice as a PDF on A4 pages, in `notes.lang` (else [`Lang::of_invoice`]): the issuer
/// and bill-to blocks (with the buyer's tax id, and a warning where the bill-to has no
/// address), the invoice's number, dates and terms, its lines (description, quantity and unit,
/// unit price, net, tax rate, tax, gross) with adjustments for earlier periods apart, the net,
/// tax and gross totals, how to pay, where the balance is, and how to verify it all.
///
/// The same document and notes always give the same bytes: the creation date is `issued_at`,
/// the trailer `/ID` is derived from the invoice's SHA-256 (and the language), and the font
/// resources have fixed names.
pub fn to_pdf(doc: &InvoiceDoc, notes: &PdfNotes) -> Result<Vec<u8>, RenderError> {
    let view = doc.view();
    let invoice: &Invoice = &view;
    if let InvoiceDoc::V2(i) = doc {
        if !i.is_consistent() {
            return Err(RenderError::TotalMismatch {
                number: i.number.clone(),
            });
        }
    }
    if invoice.lines.len() > MAX_PDF_LINES {
        return Err(RenderError::TooManyLines {
            number: invoice.number.clone(),
            lines: invoice.lines.len(),
        });
    }
    let lang = notes.lang.unwrap_or_else(|| Lang::of_invoice(invoice));

    let mut pdf = Pages::new(invoice, lang);
    pdf.heading(invoice, notes);
    pdf.table(invoice);
    pdf.availability(invoice);
    pdf.allowances(invoice);
    pdf.excluded(invoice);
    pdf.payment(invoice, notes);
    pdf.verification_note(invoice, notes);
    let pages = pdf.finish();
    let hash = document_hash(doc);
    Ok(save(
        pages,
        &format!("{} {}", EN.title, invoice.number),
        &invoice.number,
        invoice.issued_at,
        hash,
        lang,
    ))
}

/// The PDF of `pages`: each font drawn embedded as the subset of the characters drawn in it,
/// the metadata dates all `created`, and the trailer's `/ID` from `hash` (the document's
/// SHA-256) and the language, so the same pages are the same bytes.
fn save(
    pages: Vec<PdfPage>,
    title: &str,
    identifier: &str,
    created: Timestamp,
    hash: [u8; 32],
    lang: Lang,
) -> Vec<u8> {
    let used = chars_drawn(&pages);
    let mut document = PdfDocument::new(&safe(title));
    embed_fonts(&mut document, &used);

    let issued = printpdf::DateTime::from_unix_timestamp(created.unix())
        .unwrap_or(printpdf::DateTime::epoch());
    let info = &mut document.metadata.info;
    info.creation_date = issued;
    info.modification_date = issued;
    info.metadata_date = issued;
    info.creator = "gpuledger".into();
    info.producer = "gpuledger".into();
    info.identifier = safe(identifier);
    let mut warnings = Vec::new();
    let mut lo = document
        .with_pages(pages)
        .to_lopdf_document(&PdfSaveOptions::default(), &mut warnings);
    // The trailer's /ID: printpdf draws both halves at random.
    if let Ok(ids) = lo.trailer.get_mut(b"ID").and_then(|id| id.as_array_mut()) {
        for (id, half) in ids.iter_mut().zip(trailer_id(hash, lang)) {
            if let Ok(s) = id.as_str_mut() {
                *s = half.into_bytes();
            }
        }
    }
    lo.compress();
    let mut out = Vec::new();
    lo.save_to(&mut out)
        .expect("writing a PDF into memory cannot fail");
    out
}

/// The characters drawn in each font that is drawn on `pages`.
fn chars_drawn(pages: &[PdfPage]) -> BTreeMap<FontId, BTreeSet<char>> {
    let mut used: BTreeMap<FontId, BTreeSet<char>> = BTreeMap::new();
    for page in pages {
        let mut font = None;
        for op in &page.ops {
            match op {
                Op::SetFont {
                    font: PdfFontHandle::External(id),
                    ..
                } => font = Some(id.clone()),
                Op::ShowText { items } => {
                    let set = used
                        .entry(font.clone().expect("text follows its font"))
                        .or_default();
                    for item in items {
                        if let TextItem::Text(t) = item {
                            set.extend(t.chars());
                        }
                    }
                }
                _ => {}
            }
        }
    }
    used
}

/// Embeds each font that is drawn (`used`: the characters drawn in it) in `document`, as the
/// subset of those characters.
fn embed_fonts(document: &mut PdfDocument, used: &BTreeMap<FontId, BTreeSet<char>>) {
    for slot in SLOTS {
        if let Some(chars) = used.get(&slot.id()) {
            // The whole font if subsetting fails. A subset is named `<tag>+<PostScript name>`
            // (ISO 32000-1 9.6.4); allsorts' minimal subset has no name table of its own.
            let font = match slot.subset(chars) {
                Some(mut subset) => {
                    subset.font_name = Some(format!("{}+{}", slot.id().0, slot.name()));
                    subset
                }
                None => slot.font().clone(),
            };
            document
                .resources
                .fonts
                .map
                .insert(slot.id(), PdfFont::new(font));
        }
    }
}

/// The two halves of the trailer's /ID (ISO 32000-1 14.4), in hex: the first half of the
/// document's SHA-256 (`hash`) names the document, the second half of SHA-256(hash, language)
/// this rendering of it.
fn trailer_id(hash: [u8; 32], lang: Lang) -> [String; 2] {
    let rendering: [u8; 32] = Sha256::new()
        .chain_update(hash)
        .chain_update(lang.tag())
        .finalize()
        .into();
    [hex::encode(&hash[..16]), hex::encode(&rendering[16..])]
}

/// The words of a credit note's PDF that an invoice's has not, per [`Lang`].
struct CreditLabels {
    title: &'static str,
    not_fapiao: Option<&'static str>,
    number: &'static str,
    date: &'static str,
    credits: &'static str,
    invoice_period: &'static str,
    invoice_total: &'static str,
    entry: &'static str,
    amount: &'static str,
    reason: &'static str,
}

const EN_CREDIT: CreditLabels = CreditLabels {
    title: "Credit note",
    not_fapiao: None,
    number: "Credit note number",
    date: "Date",
    credits: "Credits invoice",
    invoice_period: "Invoice period",
    invoice_total: "Invoice total",
    entry: "Log entry",
    amount: "Amount credited",
    reason: "Reason",
};

const ZH_CREDIT: CreditLabels = CreditLabels {
    title: "贷项通知单",
    not_fapiao: Some("本文件为贷项通知单，不是红字增值税发票。"),
    number: "贷项通知单编号",
    date: "日期",
    credits: "冲减账单",
    invoice_period: "账单计费周期",
    invoice_total: "账单价税合计",
    entry: "日志条目",
    amount: "冲减金额",
    reason: "原因",
};

impl Lang {
    fn credit_labels(self) -> &'static CreditLabels {
        match self {
            Lang::En => &EN_CREDIT,
            Lang::ZhCn => &ZH_CREDIT,
        }
    }
}

/// A credit note as a PDF on A4 pages, in `notes.lang` (else the language of the invoice it
/// credits, [`Lang::of_invoice`], so the two documents read alike): the issuer and bill-to
/// blocks of that invoice, the credit note's number and date, the invoice it credits (number,
/// period, total), the log entry, the amount credited and the reason, and how to verify it.
///
/// The same credit note, invoice and notes always give the same bytes, as [`to_pdf`] does: the
/// creation date is the time the entry was recorded, the trailer `/ID` is derived from the
/// SHA-256 of the credit note's RFC 8785 JSON (and the language), the fonts are embedded
/// subsets with fixed names.
pub fn credit_note_to_pdf(note: &CreditNoteDoc, invoice: &Invoice, notes: &PdfNotes) -> Vec<u8> {
    let lang = notes.lang.unwrap_or_else(|| Lang::of_invoice(invoice));
    let (l, c) = (lang.labels(), lang.credit_labels());
    let footer = format!("{} {} - {}", c.title, note.number, invoice.bill_to.name);
    let mut pdf = Pages::with_footer(lang, footer, &note.currency);
    pdf.text_wrapped_face(
        &format!("{} {}", c.title, note.number),
        MARGIN_X,
        RIGHT - MARGIN_X,
        18.0,
        Face::Bold,
    );
    if let Some(n) = c.not_fapiao {
        pdf.text_wrapped(n, MARGIN_X, RIGHT - MARGIN_X, 8.0);
    }
    pdf.y -= 6.0;
    pdf.parties(invoice, notes, false);
    let cur = &note.currency;
    let fields = [
        (c.number, note.number.clone()),
        (c.date, lang.date(note.recorded_at)),
        (c.credits, note.invoice.clone()),
        (c.invoice_period, lang.period(note.invoice_period)),
        (
            c.invoice_total,
            format!("{} {cur}", money(note.invoice_total)),
        ),
        (l.currency, cur.clone()),
        (l.log, note.log_origin.clone()),
        (c.entry, note.index.to_string()),
    ];
    pdf.fields(&fields, MARGIN_X + 110.0);
    pdf.y -= 14.0;

    pdf.ensure(3.0 * LEADING + 12.0);
    pdf.rule(pdf.y, 0.8);
    pdf.y -= LEADING + 2.0;
    let y = pdf.y;
    pdf.text(
        &format!("{} ({cur})", c.amount),
        MARGIN_X,
        y,
        11.0,
        Face::Bold,
    );
    pdf.text_right(&money(note.amount), RIGHT, 90.0, 11.0, Face::Bold);
    if !note.note.trim().is_empty() {
        pdf.y -= 6.0;
        pdf.fields(&[(c.reason, note.note.clone())], MARGIN_X + 110.0);
    }
    pdf.y -= 20.0;
    pdf.credit_verification_note(note, notes);
    let pages = pdf.finish();

    let json = serde_json::to_value(note).expect("a credit note serialises: strings and integers");
    let bytes = gpuledger_core::canonical::to_vec(&json)
        .expect("a credit note serialises: string keys, strings and integers only");
    let hash: [u8; 32] = Sha256::digest(&bytes).into();
    save(
        pages,
        &format!("{} {}", EN_CREDIT.title, note.number),
        &note.number,
        note.recorded_at,
        hash,
        lang,
    )
}

// Page geometry, in points (A4 is 595.28 × 841.89 pt).
const PAGE_W_MM: f32 = 210.0;
const PAGE_H_MM: f32 = 297.0;
const PAGE_W: f32 = 595.28;
const PAGE_H: f32 = 841.89;
const MARGIN_X: f32 = 50.0;
const TOP: f32 = PAGE_H - 50.0;
/// Lowest baseline of the body; the footer sits below it.
const BOTTOM: f32 = 60.0;
const RIGHT: f32 = PAGE_W - MARGIN_X;

// Table columns: the description's text box, and the right edges and widths of the others.
const ITEM_X: f32 = MARGIN_X + 6.0;
const ITEM_W: f32 = 128.0;
const QTY_RIGHT: f32 = 262.0;
const QTY_W: f32 = 72.0;
const PRICE_RIGHT: f32 = 328.0;
const PRICE_W: f32 = 62.0;
const NET_RIGHT: f32 = 385.0;
const RATE_RIGHT: f32 = 440.0;
const RATE_W: f32 = 50.0;
const TAX_RIGHT: f32 = 490.0;
const AMOUNT_W: f32 = 52.0;

const BODY: f32 = 8.0;
const LEADING: f32 = 11.0;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Face {
    Regular,
    Bold,
}

impl Face {
    fn latin(self) -> Slot {
        match self {
            Face::Regular => Slot::Regular,
            Face::Bold => Slot::Bold,
        }
    }
}

/// `s` split into runs of one font each: what Arimo (in `face`) has in it, what only the CJK
/// font has in that, and anything else (control characters, scripts neither has) as `?`.
fn runs(s: &str, face: Face) -> Vec<(Slot, String)> {
    let mut runs: Vec<(Slot, String)> = Vec::new();
    for c in s.chars() {
        let latin = face.latin();
        let (slot, c) = if c.is_control() {
            (latin, '?')
        } else if latin.has(c) {
            (latin, c)
        } else if Slot::Cjk.has(c) {
            (Slot::Cjk, c)
        } else {
            (latin, '?')
        };
        match runs.last_mut() {
            Some((last, r)) if *last == slot => r.push(c),
            _ => runs.push((slot, c.to_string())),
        }
    }
    runs
}

/// Width of `s` in points, from the fonts' advance widths.
fn width(s: &str, size: f32, face: Face) -> f32 {
    runs(s, face)
        .iter()
        .map(|(slot, t)| {
            let f = slot.font();
            let em = f32::from(f.units_per_em.max(1));
            t.chars()
                .map(|c| {
                    f.lookup_glyph_index(c as u32)
                        .and_then(|g| f.get_glyph_width(g))
                        .map_or(em, f32::from)
                })
                .sum::<f32>()
                * size
                / em
        })
        .sum()
}

/// The body of the document as pages of drawing operations, with a cursor that moves down and
/// starts a new page when the next block does not fit.
struct Pages {
    lang: Lang,
    footer: String,
    currency: String,
    pages: Vec<Vec<Op>>,
    y: f32,
    /// Whether a new page repeats the table's column headings.
    in_table: bool,
}

impl Pages {
    fn new(invoice: &Invoice, lang: Lang) -> Self {
        let footer = format!(
            "{} {} - {}",
            lang.labels().title,
            invoice.number,
            invoice.bill_to.name
        );
        Self::with_footer(lang, footer, &invoice.currency)
    }

    /// Empty pages whose footer (and a new page's heading) is `footer`.
    fn with_footer(lang: Lang, footer: String, currency: &str) -> Self {
        Pages {
            lang,
            footer,
            currency: currency.to_owned(),
            pages: vec![Vec::new()],
            y: TOP,
            in_table: false,
        }
    }

    fn l(&self) -> &'static Labels {
        self.lang.labels()
    }

    fn ops(&mut self) -> &mut Vec<Op> {
        self.pages.last_mut().expect("there is always a page")
    }

    /// Makes room for `height` points below the cursor, starting a new page if needed.
    fn ensure(&mut self, height: f32) {
        if self.y - height >= BOTTOM {
            return;
        }
        self.pages.push(Vec::new());
        self.y = TOP;
        let continued = format!("{} {}", self.footer, self.l().continued);
        self.text_wrapped(&continued, MARGIN_X, RIGHT - MARGIN_X, 8.0);
        self.y -= 6.0;
        if self.in_table {
            self.column_headings();
        }
    }

    fn text(&mut self, s: &str, x: f32, y: f32, size: f32, face: Face) {
        push_text(self.ops(), s, x, y, size, face, None);
    }

    /// One line of text on the cursor's baseline, ending at `right` (see [`push_text_right`]).
    fn text_right(&mut self, s: &str, right: f32, max_w: f32, size: f32, face: Face) {
        let y = self.y;
        push_text_right(self.ops(), s, right, y, max_w, size, face);
    }

    /// Writes `s` wrapped into lines of at most `width` points, moving the cursor down.
    fn text_wrapped(&mut self, s: &str, x: f32, width: f32, size: f32) {
        self.text_wrapped_face(s, x, width, size, Face::Regular);
    }

    fn text_wrapped_face(&mut self, s: &str, x: f32, width: f32, size: f32, face: Face) {
        let leading = size * 1.35;
        for line in wrap(s, width, size, face) {
            self.ensure(leading);
            self.y -= leading;
            let y = self.y;
            self.text(&line, x, y, size, face);
        }
    }

    fn rule(&mut self, y: f32, thickness: f32) {
        let point = |x: f32| LinePoint {
            p: Point { x: Pt(x), y: Pt(y) },
            bezier: false,
        };
        self.ops().extend([
            Op::SetOutlineThickness { pt: Pt(thickness) },
            Op::DrawLine {
                line: Line {
                    points: vec![point(MARGIN_X), point(RIGHT)],
                    is_closed: false,
                },
            },
        ]);
    }

    /// Label: value rows, values wrapped.
    fn fields(&mut self, fields: &[(&str, String)], value_x: f32) {
        for (label, value) in fields {
            self.ensure(LEADING + 2.0);
            let label_y = self.y - 9.5 * 1.35; // the value's first baseline
            self.text(label, MARGIN_X, label_y, 9.5, Face::Bold);
            self.text_wrapped_face(value, value_x, RIGHT - value_x, 9.5, Face::Regular);
        }
    }

    /// An address block: a bold title, then its lines.
    fn block(&mut self, title: &str, lines: &[String]) {
        self.text_wrapped_face(title, MARGIN_X, RIGHT - MARGIN_X, 10.0, Face::Bold);
        for l in lines {
            self.text_wrapped(l, MARGIN_X, RIGHT - MARGIN_X, 9.5);
        }
        self.y -= 6.0;
    }

    fn heading(&mut self, invoice: &Invoice, notes: &PdfNotes) {
        let l = self.l();
        let lang = self.lang;
        self.text_wrapped_face(
            &format!("{} {}", l.title, invoice.number),
            MARGIN_X,
            RIGHT - MARGIN_X,
            18.0,
            Face::Bold,
        );
        if let Some(n) = l.not_fapiao {
            self.text_wrapped(n, MARGIN_X, RIGHT - MARGIN_X, 8.0);
        }
        self.y -= 6.0;
        self.parties(invoice, notes, true);

        let mut fields = vec![
            (l.number, invoice.number.clone()),
            (l.issue_date, lang.date(invoice.issued_at)),
        ];
        if invoice.format != gpuledger_core::invoice::INVOICE_FORMAT_V1 {
            fields.push((l.due_date, lang.date(invoice.due_at)));
            fields.push((l.terms, lang.terms(invoice.payment_terms_days)));
        }
        let checkpoint = match lang {
            Lang::En => format!(
                "size {}, root {}",
                invoice.checkpoint_size, invoice.checkpoint_root
            ),
            Lang::ZhCn => format!(
                "大小 {}，根哈希 {}",
                invoice.checkpoint_size, invoice.checkpoint_root
            ),
        };
        fields.extend([
            (l.period, lang.period(invoice.period)),
            (l.currency, invoice.currency.clone()),
            (l.log, invoice.log_origin.clone()),
            (l.checkpoint, checkpoint),
        ]);
        self.fields(&fields, MARGIN_X + 90.0);
        self.y -= 14.0;
    }

    /// The issuer ("From", when it has a name) and bill-to blocks of `invoice`, with the buyer's
    /// tax id, and (`warn`) a warning where the bill-to has no address.
    fn parties(&mut self, invoice: &Invoice, notes: &PdfNotes, warn: bool) {
        let l = self.l();
        // Issuer.
        if !invoice.issuer.name.is_empty() {
            let i = &invoice.issuer;
            let mut lines = vec![i.name.clone()];
            lines.extend(i.address.iter().cloned());
            if let Some(t) = &i.tax_id {
                lines.push(format!("{}{}{t}", l.tax_id, l.colon));
            }
            if let Some(e) = &i.email {
                lines.push(format!("{}{}{e}", l.email, l.colon));
            }
            self.block(l.from, &lines);
        }
        // Bill to.
        let b = &invoice.bill_to;
        let mut lines = vec![b.name.clone()];
        lines.extend(b.address.iter().cloned());
        if let Some(t) = notes
            .buyer_tax_id
            .as_deref()
            .filter(|t| !t.trim().is_empty())
        {
            lines.push(format!("{}{}{t}", l.tax_id, l.colon));
        }
        lines.push(format!("{}{}{}", l.tenant_id, l.colon, b.tenant));
        self.block(l.bill_to, &lines);
        if warn && b.address.iter().all(|a| a.trim().is_empty()) {
            self.y += 4.0;
            self.text_wrapped_face(l.no_address, MARGIN_X, RIGHT - MARGIN_X, 8.5, Face::Bold);
            self.y -= 8.0;
        }
    }

    fn column_headings(&mut self) {
        let l = self.l();
        self.y -= LEADING;
        let y = self.y;
        self.text(l.description, MARGIN_X, y, BODY, Face::Bold);
        self.text_right(l.quantity, QTY_RIGHT, QTY_W, BODY, Face::Bold);
        self.text_right(l.unit_price, PRICE_RIGHT, PRICE_W, BODY, Face::Bold);
        self.text_right(l.net, NET_RIGHT, AMOUNT_W, BODY, Face::Bold);
        self.text_right(l.tax_rate, RATE_RIGHT, RATE_W, BODY, Face::Bold);
        self.text_right(l.tax, TAX_RIGHT, AMOUNT_W, BODY, Face::Bold);
        self.text_right(l.gross, RIGHT, AMOUNT_W, BODY, Face::Bold);
        self.rule(y - 4.0, 0.6);
        self.y -= 6.0;
    }

    /// A group or section title, kept on the same page as the row after it.
    fn group_title(&mut self, title: &str, size: f32) {
        let lines = wrap(title, RIGHT - MARGIN_X, size, Face::Bold);
        self.ensure(lines.len() as f32 * LEADING + 6.0 + LEADING);
        self.y -= 4.0;
        for line in lines {
            self.y -= LEADING;
            let y = self.y;
            self.text(&line, MARGIN_X, y, size, Face::Bold);
        }
    }

    fn row(&mut self, line: &InvoiceLine) {
        let lang = self.lang;
        let item = lang.describe(line);
        let measured = match (line.kind, lang) {
            (LineKind::Gpu | LineKind::Included | LineKind::Overage, Lang::En) => line
                .gpu_seconds
                .map(|s| format!("{} GPU-seconds", exact(s))),
            (LineKind::Gpu | LineKind::Included | LineKind::Overage, Lang::ZhCn) => {
                line.gpu_seconds.map(|s| format!("{} GPU 秒", exact(s)))
            }
            (LineKind::Energy, Lang::En) => line
                .measured_kwh
                .map(|k| format!("{} kWh measured", exact(k))),
            (LineKind::Energy, Lang::ZhCn) => {
                line.measured_kwh.map(|k| format!("实测 {} kWh", exact(k)))
            }
            // A contract's line: the billing period it is for, and its contract.
            (LineKind::Fee | LineKind::TrueUp | LineKind::SlaCredit, _) => {
                line.service_period.map(|p| lang.period(p))
            }
        };
        let sep = match lang {
            Lang::En => ", ",
            Lang::ZhCn => "，",
        };
        let counted = !matches!(
            line.kind,
            LineKind::Fee | LineKind::TrueUp | LineKind::SlaCredit
        );
        let detail = match (measured, counted) {
            (Some(m), true) => format!("{m}{sep}{}", lang.records(line.records)),
            (Some(m), false) => m,
            (None, true) => lang.records(line.records),
            (None, false) => String::new(),
        };
        let mut item_lines = wrap(&item, ITEM_W, BODY, Face::Regular);
        item_lines.extend(wrap(&detail, ITEM_W, BODY - 1.0, Face::Regular));
        self.ensure(item_lines.len() as f32 * LEADING);
        self.y -= LEADING;
        let top = self.y;
        let unit = line.unit.as_str();
        self.text_right(
            &format!("{} {unit}", exact(line.quantity)),
            QTY_RIGHT,
            QTY_W,
            BODY,
            Face::Regular,
        );
        self.text_right(
            &format!("{}/{unit}", exact(line.unit_price)),
            PRICE_RIGHT,
            PRICE_W,
            BODY,
            Face::Regular,
        );
        self.text_right(&money(line.net), NET_RIGHT, AMOUNT_W, BODY, Face::Regular);
        let rate = match &line.tax_name {
            Some(n) => format!("{n} {}", percent(line.tax_rate)),
            None => percent(line.tax_rate),
        };
        self.text_right(&rate, RATE_RIGHT, RATE_W, BODY, Face::Regular);
        self.text_right(&money(line.tax), TAX_RIGHT, AMOUNT_W, BODY, Face::Regular);
        self.text_right(&money(line.gross), RIGHT, AMOUNT_W, BODY, Face::Regular);
        let n = item_lines.len();
        for (i, text) in item_lines.iter().enumerate() {
            if i > 0 {
                self.y -= LEADING - 1.0;
            }
            let y = self.y;
            let size = if i + 1 == n { BODY - 1.0 } else { BODY };
            self.text(text, ITEM_X, y, size, Face::Regular);
        }
        debug_assert!(self.y <= top);
    }

    fn table(&mut self, invoice: &Invoice) {
        let l = self.l();
        let lang = self.lang;
        self.ensure(4.0 * LEADING);
        self.in_table = true;
        self.column_headings();

        let current: Vec<&InvoiceLine> = invoice
            .lines
            .iter()
            .filter(|l| l.adjustment_for.is_none())
            .collect();
        self.lines(&current);

        let mut adjustments: Vec<&InvoiceLine> = invoice
            .lines
            .iter()
            .filter(|l| l.adjustment_for.is_some())
            .collect();
        adjustments.sort_by_key(|l| l.adjustment_for);
        for period_lines in adjustments.chunk_by(|a, b| a.adjustment_for == b.adjustment_for) {
            let period = period_lines[0].adjustment_for.expect("filtered on Some");
            self.y -= 6.0;
            let title = match lang {
                Lang::En => format!(
                    "Adjustments: late records of the period {}",
                    lang.period(period)
                ),
                Lang::ZhCn => format!("调整：计费周期 {} 的迟到记录", lang.period(period)),
            };
            self.group_title(&title, 9.0);
            self.lines(period_lines);
        }

        self.ensure(4.0 * LEADING + 12.0);
        self.y -= 6.0;
        self.rule(self.y, 0.8);
        let cur = self.currency.clone();
        for (label, amount, face, size) in [
            (
                format!("{} ({cur})", l.net_total),
                invoice.net_total,
                Face::Regular,
                9.5,
            ),
            (
                format!("{} ({cur})", l.tax_total),
                invoice.tax_total,
                Face::Regular,
                9.5,
            ),
            (
                format!("{} ({cur})", l.total),
                invoice.total,
                Face::Bold,
                11.0,
            ),
        ] {
            self.y -= LEADING + 2.0;
            let y = self.y;
            self.text(&label, MARGIN_X, y, size, face);
            self.text_right(&money(amount), RIGHT, 90.0, size, face);
        }
        // What the tenant's prepaid lots paid (docs/RATING.md, "Prepaid balances"), each lot
        // by its reference, then what is left to pay.
        for d in &invoice.prepaid {
            self.ensure(LEADING + 4.0);
            self.y -= LEADING + 2.0;
            let y = self.y;
            let label = format!("{} ({}, {cur})", l.prepaid, d.prepayment);
            self.text(&label, MARGIN_X, y, 9.5, Face::Regular);
            self.text_right(&money(-d.amount), RIGHT, 90.0, 9.5, Face::Regular);
        }
        if let Some(due) = invoice.amount_due {
            self.ensure(LEADING + 4.0);
            self.y -= LEADING + 2.0;
            let y = self.y;
            self.text(
                &format!("{} ({cur})", l.amount_due),
                MARGIN_X,
                y,
                11.0,
                Face::Bold,
            );
            self.text_right(&money(due), RIGHT, 90.0, 11.0, Face::Bold);
        }
        self.in_table = false;
        self.y -= 20.0;
    }

    /// The availability each SLA judged (docs/RATING.md, "SLA credits"): per lease and billing
    /// period, leased and present GPU-seconds, the availability, and the credit if any.
    fn availability(&mut self, invoice: &Invoice) {
        if invoice.availability.is_empty() {
            return;
        }
        let lang = self.lang;
        self.ensure(4.0 * LEADING);
        let title = match lang {
            Lang::En => "Availability (SLA), from the signed usage records",
            Lang::ZhCn => "可用率（SLA），依据已签名的用量记录",
        };
        self.text_wrapped_face(title, MARGIN_X, RIGHT - MARGIN_X, 10.0, Face::Bold);
        for a in &invoice.availability {
            let (leased, present) = (exact(a.leased_gpu_seconds), exact(a.present_gpu_seconds));
            let period = lang.period(a.period);
            let text = match (lang, a.credit_percent) {
                (Lang::En, credit) => format!(
                    "Contract {}, lease {}, {period}: {present} of {leased} leased GPU-seconds \
                     present, availability {} % (target {} %){}",
                    a.contract,
                    a.lease,
                    exact(a.availability),
                    exact(a.target),
                    credit.map_or(String::new(), |c| format!(": credit {} %", exact(c)))
                ),
                (Lang::ZhCn, credit) => format!(
                    "合同 {}，租约 {}，{period}：租用 {leased} GPU 秒，在线 {present} GPU 秒，\
                     可用率 {} %（承诺 {} %）{}",
                    a.contract,
                    a.lease,
                    exact(a.availability),
                    exact(a.target),
                    credit.map_or(String::new(), |c| format!("，赔付 {} %", exact(c)))
                ),
            };
            self.text_wrapped(&text, MARGIN_X, RIGHT - MARGIN_X, 9.0);
        }
        self.y -= 12.0;
    }

    /// The included GPU-hours per contract, billing period, lease and model: included, used
    /// and above (docs/RATING.md, "Included GPU-hours and overage").
    fn allowances(&mut self, invoice: &Invoice) {
        if invoice.allowances.is_empty() {
            return;
        }
        let lang = self.lang;
        self.ensure(4.0 * LEADING);
        let title = match lang {
            Lang::En => "Included GPU-hours, from the signed usage records",
            Lang::ZhCn => "包含 GPU 时，依据已签名的用量记录",
        };
        self.text_wrapped_face(title, MARGIN_X, RIGHT - MARGIN_X, 10.0, Face::Bold);
        for a in &invoice.allowances {
            let hours = gpuledger_core::invoice::gpu_hours;
            let (included, used, over) = (
                exact(hours(a.included_gpu_seconds)),
                exact(hours(a.used_gpu_seconds)),
                exact(hours(a.overage_gpu_seconds)),
            );
            let period = lang.period(a.period);
            let text = match lang {
                Lang::En => format!(
                    "Contract {}, lease {}, {}, {period}: {used} of {included} GPU-h used, \
                     {over} GPU-h above",
                    a.contract, a.lease, a.gpu_model
                ),
                Lang::ZhCn => format!(
                    "合同 {}，租约 {}，{}，{period}：包含 {included} GPU 时，已用 {used} GPU 时，\
                     超出 {over} GPU 时",
                    a.contract, a.lease, a.gpu_model
                ),
            };
            self.text_wrapped(&text, MARGIN_X, RIGHT - MARGIN_X, 9.0);
        }
        self.y -= 12.0;
    }

    /// GPU lines (by region and GPU model, then in invoice order), then energy lines.
    fn lines(&mut self, lines: &[&InvoiceLine]) {
        let mut sorted: Vec<&InvoiceLine> = lines.to_vec();
        sorted.sort_by(|a, b| {
            (a.kind, &a.region, &a.gpu_model).cmp(&(b.kind, &b.region, &b.gpu_model))
        });
        for line in sorted {
            self.row(line);
        }
    }

    /// "How to pay": the amount and the due date, the issuer's payment instructions and the
    /// reference to quote; and where the payments and the balance are (not on this document,
    /// which never changes).
    fn payment(&mut self, invoice: &Invoice, notes: &PdfNotes) {
        let l = self.l();
        let lang = self.lang;
        let n = &invoice.number;
        let cur = &invoice.currency;
        // What is left to pay once the prepaid lots paid their part.
        let total = money(invoice.amount_due.unwrap_or(invoice.total));
        let base = notes
            .public_url
            .as_deref()
            .unwrap_or("<the service's URL>")
            .trim_end_matches('/');
        self.ensure(6.0 * LEADING);
        self.text_wrapped_face(l.payment, MARGIN_X, RIGHT - MARGIN_X, 11.0, Face::Bold);
        let v1 = invoice.format == gpuledger_core::invoice::INVOICE_FORMAT_V1;
        let mut paragraphs = Vec::new();
        paragraphs.push(match (lang, v1) {
            (Lang::En, false) => format!("{total} {cur}, due by {}.", lang.date(invoice.due_at)),
            (Lang::En, true) => format!("{total} {cur}."),
            (Lang::ZhCn, false) => {
                format!(
                    "应付 {total} {cur}，请于 {} 前支付。",
                    lang.date(invoice.due_at)
                )
            }
            (Lang::ZhCn, true) => format!("应付 {total} {cur}。"),
        });
        let instructions: Vec<&String> = notes
            .payment_instructions
            .iter()
            .filter(|p| !p.trim().is_empty())
            .collect();
        if !instructions.is_empty() {
            paragraphs.extend(instructions.iter().map(|p| p.to_string()));
            paragraphs.push(match lang {
                Lang::En => format!("Please quote {n} as the payment reference."),
                Lang::ZhCn => format!("付款时请在附言中注明账单编号 {n}。"),
            });
        }
        paragraphs.push(match lang {
            Lang::En => format!(
                "Payments received and the balance due are not on this document, which never \
                 changes once issued: see {base}/v1/invoices/{n}/account."
            ),
            Lang::ZhCn => format!(
                "已收款项及未付余额不在本账单上（账单开具后不再改变），请见 \
                 {base}/v1/invoices/{n}/account。"
            ),
        });
        for p in paragraphs {
            self.y -= 1.0;
            self.text_wrapped(&p, MARGIN_X, RIGHT - MARGIN_X, 9.0);
        }
        self.y -= 14.0;
    }

    /// The records a dispute excluded from billing (`excluded`), each with its log entry and
    /// reason; nothing when there are none.
    fn excluded(&mut self, invoice: &Invoice) {
        if invoice.excluded.is_empty() {
            return;
        }
        let lang = self.lang;
        self.ensure(4.0 * LEADING);
        let title = match lang {
            Lang::En => "Excluded from billing",
            Lang::ZhCn => "不计费的记录",
        };
        self.text_wrapped_face(title, MARGIN_X, RIGHT - MARGIN_X, 11.0, Face::Bold);
        for x in &invoice.excluded {
            self.y -= 1.0;
            let line = match lang {
                Lang::En => format!("Log entry {}: {}", x.entry, x.reason),
                Lang::ZhCn => format!("日志条目 {}：{}", x.entry, x.reason),
            };
            self.text_wrapped(&line, MARGIN_X, RIGHT - MARGIN_X, 9.0);
        }
        self.y -= 14.0;
    }

    fn verification_note(&mut self, invoice: &Invoice, notes: &PdfNotes) {
        let l = self.l();
        self.ensure(6.0 * LEADING);
        self.y -= 4.0;
        self.text_wrapped_face(l.verify, MARGIN_X, RIGHT - MARGIN_X, 11.0, Face::Bold);
        let n = &invoice.number;
        let base = notes
            .public_url
            .as_deref()
            .unwrap_or("<the service's URL>")
            .trim_end_matches('/');
        let key = if notes.verifier_key.is_empty() {
            "<the log's verifier key>"
        } else {
            &notes.verifier_key
        };
        let (origin, size, root) = (
            &invoice.log_origin,
            invoice.checkpoint_size,
            &invoice.checkpoint_root,
        );
        let paragraphs = match self.lang {
            Lang::En => [
                format!(
                    "This invoice was computed from the log {origin} at checkpoint size {size}, \
                     root hash {root}. Every quantity and net amount on it can be recomputed \
                     from the log's signed entries (usage, rate cards, spot prices, region \
                     parameters) by the rules of docs/RATING.md; tax is each line's net times \
                     its rate, rounded half-even to the currency's minor unit, and the totals \
                     are the sums of the lines."
                ),
                format!(
                    "Download the invoice and its evidence bundle: {base}/v1/invoices/{n} \
                     (save as {n}.json) and {base}/v1/invoices/{n}/bundle (save as \
                     {n}.bundle.jsonl), then run:"
                ),
                format!(
                    "gpuledger verify --invoice {n}.json --bundle {n}.bundle.jsonl --log-key '{key}'"
                ),
            ],
            Lang::ZhCn => [
                format!(
                    "本账单依据账本日志 {origin} 在检查点（大小 {size}，根哈希 {root}）时的记录计算。\
                     账单上的每个数量和不含税金额都可以按 docs/RATING.md 的规则，由日志中已签名的条目\
                     （用量、价目表、竞价价格、区域参数）重新算出；每行税额为不含税金额乘以税率，按币种\
                     最小单位四舍六入五成双，合计为各行之和。"
                ),
                format!(
                    "下载账单及其证据包：{base}/v1/invoices/{n}（保存为 {n}.json）和 \
                     {base}/v1/invoices/{n}/bundle（保存为 {n}.bundle.jsonl），然后运行："
                ),
                format!(
                    "gpuledger verify --invoice {n}.json --bundle {n}.bundle.jsonl --log-key '{key}'"
                ),
            ],
        };
        for p in paragraphs {
            self.y -= 3.0;
            self.text_wrapped(&p, MARGIN_X, RIGHT - MARGIN_X, BODY);
        }
    }

    /// "How to verify" a credit note: the log entry it is, its inclusion proof and the signed
    /// checkpoint, the invoice balance it counts in, and its row in the FOCUS export.
    fn credit_verification_note(&mut self, note: &CreditNoteDoc, notes: &PdfNotes) {
        let l = self.l();
        self.ensure(6.0 * LEADING);
        self.y -= 4.0;
        self.text_wrapped_face(l.verify, MARGIN_X, RIGHT - MARGIN_X, 11.0, Face::Bold);
        let base = notes
            .public_url
            .as_deref()
            .unwrap_or("<the service's URL>")
            .trim_end_matches('/');
        let key = if notes.verifier_key.is_empty() {
            "<the log's verifier key>"
        } else {
            &notes.verifier_key
        };
        let (n, i, inv, origin) = (&note.number, note.index, &note.invoice, &note.log_origin);
        let when = self.lang.date_time(note.recorded_at);
        let paragraphs = match self.lang {
            Lang::En => [
                format!(
                    "This credit note is entry {i} of the log {origin}: a credit_note entry that \
                     the ledger signed and recorded on {when} UTC. Invoice {inv} never changes \
                     once issued; the amount credited counts in its balance: \
                     {base}/v1/invoices/{inv}/account."
                ),
                format!(
                    "The entry is {base}/v1/log/entries/{i}; {base}/v1/proofs/inclusion?index={i} \
                     proves it is in the log (RFC 6962) under a signed checkpoint \
                     ({base}/v1/checkpoint), which the log's key verifies: '{key}'. In the FOCUS \
                     export (docs/FOCUS.md) it is the Credit row with InvoiceId {n}."
                ),
            ],
            Lang::ZhCn => [
                format!(
                    "本贷项通知单即账本日志 {origin} 的第 {i} 号条目：由账本签名、于 {when}（UTC）\
                     记录的 credit_note 条目。账单 {inv} 开具后不再改变；冲减金额计入该账单的余额，\
                     请见 {base}/v1/invoices/{inv}/account。"
                ),
                format!(
                    "该条目见 {base}/v1/log/entries/{i}；{base}/v1/proofs/inclusion?index={i} \
                     证明它在日志中（RFC 6962），对应已签名的检查点（{base}/v1/checkpoint），可用日志\
                     公钥验证：'{key}'。在 FOCUS 导出（docs/FOCUS.md）中，它是 InvoiceId 为 {n} \
                     的 Credit 行。"
                ),
            ],
        };
        for p in paragraphs {
            self.y -= 3.0;
            self.text_wrapped(&p, MARGIN_X, RIGHT - MARGIN_X, BODY);
        }
    }

    /// Adds the page footers ("page i of n") and returns the pages.
    fn finish(self) -> Vec<PdfPage> {
        let n = self.pages.len();
        let lang = self.lang;
        let footer = self.footer;
        self.pages
            .into_iter()
            .enumerate()
            .map(|(i, mut ops)| {
                push_text(&mut ops, &footer, MARGIN_X, 35.0, 8.0, Face::Regular, None);
                let page = match lang {
                    Lang::En => format!("Page {} of {n}", i + 1),
                    Lang::ZhCn => format!("第 {} 页，共 {n} 页", i + 1),
                };
                push_text_right(&mut ops, &page, RIGHT, 35.0, 120.0, 8.0, Face::Regular);
                PdfPage::new(Mm(PAGE_W_MM), Mm(PAGE_H_MM), ops)
            })
            .collect()
    }
}

/// One text object at (`x`, `y`), a run per font; `squeeze` narrows it to that percentage of
/// its natural width. Bold Chinese (the CJK font has no bold face) is filled and stroked.
fn push_text(
    ops: &mut Vec<Op>,
    s: &str,
    x: f32,
    y: f32,
    size: f32,
    face: Face,
    squeeze: Option<f32>,
) {
    ops.push(Op::StartTextSection);
    if let Some(percent) = squeeze {
        ops.push(Op::SetHorizontalScaling { percent });
    }
    ops.push(Op::SetTextCursor {
        pos: Point { x: Pt(x), y: Pt(y) },
    });
    for (slot, text) in runs(s, face) {
        let stroke = slot == Slot::Cjk && face == Face::Bold;
        if stroke {
            ops.push(Op::SetOutlineThickness {
                pt: Pt(size * 0.035),
            });
            ops.push(Op::SetTextRenderingMode {
                mode: TextRenderingMode::FillStroke,
            });
        }
        ops.extend([
            Op::SetFont {
                font: PdfFontHandle::External(slot.id()),
                size: Pt(size),
            },
            Op::ShowText {
                items: vec![TextItem::Text(text)],
            },
        ]);
        if stroke {
            ops.push(Op::SetTextRenderingMode {
                mode: TextRenderingMode::Fill,
            });
        }
    }
    if squeeze.is_some() {
        // Horizontal scaling is text state, which outlives the text object: reset it.
        ops.push(Op::SetHorizontalScaling { percent: 100.0 });
    }
    ops.push(Op::EndTextSection);
}

/// One line of text ending at `right`, squeezed horizontally when wider than `max_w` (a very
/// long quantity keeps every digit, narrower).
fn push_text_right(
    ops: &mut Vec<Op>,
    s: &str,
    right: f32,
    y: f32,
    max_w: f32,
    size: f32,
    face: Face,
) {
    let w = width(s, size, face);
    if w <= max_w {
        push_text(ops, s, right - w, y, size, face, None);
    } else {
        let percent = (max_w / w * 100.0).max(1.0);
        push_text(ops, s, right - max_w, y, size, face, Some(percent));
    }
}

/// Printable ASCII only, for the document's metadata: anything else becomes `?`.
fn safe(s: &str) -> String {
    s.chars()
        .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
        .collect()
}

/// Splits `s` into lines no wider than `width` points: at spaces where it can, inside a word
/// (an id, a hash, a run of Chinese text) where the word alone is too wide.
fn wrap(s: &str, width: f32, size: f32, face: Face) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in s.split(' ') {
        let candidate = if line.is_empty() {
            word.to_owned()
        } else {
            format!("{line} {word}")
        };
        if self::width(&candidate, size, face) <= width {
            line = candidate;
            continue;
        }
        if !line.is_empty() {
            lines.push(std::mem::take(&mut line));
        }
        // The word alone: break it wherever it reaches the width.
        for c in word.chars() {
            line.push(c);
            if self::width(&line, size, face) > width && line.chars().count() > 1 {
                let last = line.pop().expect("just pushed");
                lines.push(std::mem::take(&mut line));
                line.push(last);
            }
        }
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_at_spaces_and_inside_long_words() {
        let lines = wrap(
            "aaa bbb ccc",
            width("aaa bbb", 10.0, Face::Regular),
            10.0,
            Face::Regular,
        );
        assert_eq!(lines, ["aaa bbb", "ccc"]);
        let long = "x".repeat(300);
        let lines = wrap(&long, 100.0, 10.0, Face::Regular);
        assert!(lines.len() > 1);
        assert_eq!(lines.concat(), long);
        for l in &lines {
            assert!(width(l, 10.0, Face::Regular) <= 100.0);
        }
        assert_eq!(wrap("", 100.0, 10.0, Face::Regular), [""]);
        assert_eq!(safe("caf\u{e9}\n"), "caf??");
    }

    /// Latin text goes to Arimo, Chinese text to the CJK font in runs, and characters neither
    /// has become `?`; widths come from the fonts (Arimo has Helvetica's metrics).
    #[test]
    fn text_is_split_into_runs_per_font() {
        let runs = runs("VAT 北京市 6% café\u{1}", Face::Regular);
        let spelled: Vec<String> = runs
            .iter()
            .map(|(slot, t)| format!("{slot:?}:{t}"))
            .collect();
        assert_eq!(spelled, ["Regular:VAT ", "Cjk:北京市", "Regular: 6% café?"]);
        // Helvetica's widths: "0" is 556/1000 em, "i" 222 (regular) and 278 (bold).
        assert!((width("0", 10.0, Face::Regular) - 5.56).abs() < 0.01);
        assert!((width("i", 10.0, Face::Regular) - 2.22).abs() < 0.01);
        assert!((width("i", 10.0, Face::Bold) - 2.78).abs() < 0.01);
        // Chinese glyphs are wide (about one em).
        let w = width("北京", 10.0, Face::Regular);
        assert!((15.0..=22.0).contains(&w), "{w}");
        let lines = wrap(&"北京".repeat(40), 100.0, 10.0, Face::Regular);
        assert!(lines.len() > 1);
        for l in &lines {
            assert!(width(l, 10.0, Face::Regular) <= 100.0);
        }
    }

    #[test]
    fn dates_are_written_as_people_write_them() {
        let t = |s: &str| Timestamp::parse(s).unwrap();
        let month = Period {
            from: t("2026-11-01T00:00:00Z"),
            to: t("2026-12-01T00:00:00Z"),
        };
        assert_eq!(Lang::En.date(t("2026-12-01T00:05:00Z")), "1 December 2026");
        assert_eq!(Lang::ZhCn.date(t("2026-12-01T00:05:00Z")), "2026年12月1日");
        assert_eq!(
            Lang::En.period(month),
            "1 November 2026 to 30 November 2026"
        );
        assert_eq!(Lang::ZhCn.period(month), "2026年11月1日至2026年11月30日");
        let day = Period {
            from: t("2026-11-05T00:00:00Z"),
            to: t("2026-11-06T00:00:00Z"),
        };
        assert_eq!(Lang::En.period(day), "5 November 2026");
        let hours = Period {
            from: t("2026-11-05T08:00:00Z"),
            to: t("2026-11-05T14:30:00Z"),
        };
        assert_eq!(
            Lang::En.period(hours),
            "5 November 2026, 08:00 to 14:30 UTC"
        );
        assert_eq!(
            Lang::ZhCn.period(hours),
            "2026年11月5日 08:00 至 14:30（UTC）"
        );
        let across = Period {
            from: t("2026-11-05T22:00:00Z"),
            to: t("2026-11-06T02:00:05Z"),
        };
        assert_eq!(
            Lang::En.period(across),
            "5 November 2026, 22:00 to 6 November 2026, 02:00:05 UTC"
        );
    }

    #[test]
    fn languages_parse_and_lines_are_described_in_chinese() {
        assert_eq!(Lang::parse("zh-CN"), Some(Lang::ZhCn));
        assert_eq!(Lang::parse("zh-Hans"), Some(Lang::ZhCn));
        assert_eq!(Lang::parse("ZH"), Some(Lang::ZhCn));
        assert_eq!(Lang::parse("en-GB"), Some(Lang::En));
        assert_eq!(Lang::parse("zh-TW"), None);
        assert_eq!(Lang::parse("fr"), None);
        assert_eq!(
            describe_zh("GPU compute, H100, west, spot, volume tier 2 of plan P1").as_deref(),
            Some("GPU 算力，H100，west，竞价，套餐 P1 第 2 档")
        );
        assert_eq!(
            describe_zh("Electricity, west, PUE 1.08").as_deref(),
            Some("电力，west，PUE 1.08")
        );
        assert_eq!(describe_zh("Something else"), None);
    }
}
