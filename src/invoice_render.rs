//! Invoice downloads: an issued invoice ([`InvoiceDoc`]) as JSON, CSV and PDF.
//!
//! The three say the same thing with the same spellings, so a tenant's finance tool can check
//! one against another: quantities, prices and rates in their canonical decimal form
//! (`core::decimal`), amounts with exactly the currency's minor digits (`148.00`), timestamps in
//! the wire form (`core::time`). JSON is the document as issued (version 2, or version 1 for
//! invoices issued before it); CSV and PDF render the version 2 view of either
//! ([`InvoiceDoc::view`]).
//!
//! Pure: no I/O and no clock. The PDF's dates are the invoice's `issued_at` (and, for the
//! payments block, the `as_of` of the account it is given); only its trailer `/ID` (which
//! printpdf draws at random) differs between two renderings.
//!
//! The PDF writes all its text as real text objects (so it can be searched, copied and
//! extracted) and runs onto as many A4 pages as the lines need. Printable ASCII is set in the
//! built-in Helvetica faces; any other text (Chinese names and addresses) in Droid Sans
//! Fallback (assets/fonts/, Apache-2.0), embedded as a subset of the glyphs drawn, with a
//! ToUnicode CMap so it extracts back. A character that font lacks becomes `?`.

use crate::core::decimal::to_canonical;
use crate::core::invoice::{class_label, Invoice, InvoiceDoc, InvoiceLine, LineKind, Period};
use crate::store::invoices::{AccountStatus, InvoiceAccount};
use printpdf::{
    BuiltinFont, FontId, Line, LinePoint, Mm, Op, ParsedFont, PdfDocument, PdfFontHandle, PdfPage,
    PdfSaveOptions, Point, Pt, TextItem,
};
use rust_decimal::Decimal;
use std::borrow::Cow;
use std::sync::OnceLock;

/// Most invoice lines a PDF is rendered for (about 350 pages). Larger invoices are refused with
/// [`RenderError::TooManyLines`]; their JSON and CSV downloads have no such limit.
pub const MAX_PDF_LINES: usize = 20_000;

/// The font for text that is not printable ASCII: Droid Sans Fallback (CJK), Apache-2.0.
const CJK_FONT: &[u8] = include_bytes!("../assets/fonts/DroidSansFallbackFull.ttf");

/// The CJK font, parsed once per process.
fn cjk_font() -> Option<&'static ParsedFont> {
    static FONT: OnceLock<Option<ParsedFont>> = OnceLock::new();
    FONT.get_or_init(|| ParsedFont::from_bytes(CJK_FONT, 0, &mut Vec::new()))
        .as_ref()
}

/// The CJK font cut down to the glyphs of the characters of `text` it has (and `.notdef`),
/// with a Unicode cmap: what a PDF embeds, a few kB instead of 4 MB. `None` if allsorts
/// cannot subset it.
fn subset_cjk(font: &ParsedFont, text: &str) -> Option<ParsedFont> {
    use allsorts::binary::read::ReadScope;
    use allsorts::font_data::FontData;
    use allsorts::subset::{subset, CmapTarget, SubsetProfile};
    let mut gids: std::collections::BTreeSet<u16> = text
        .chars()
        .filter(|c| !(' '..='~').contains(c))
        .filter_map(|c| font.lookup_glyph_index(c as u32))
        .collect();
    gids.remove(&0);
    let ids: Vec<u16> = std::iter::once(0).chain(gids).collect();
    let data = ReadScope::new(CJK_FONT).read::<FontData<'_>>().ok()?;
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

/// The CSV columns, in order.
pub const CSV_HEADER: [&str; 29] = [
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

/// What a PDF shows besides the invoice document: the payments and balance as of a time, and
/// where and how to verify it.
#[derive(Debug, Clone, Default)]
pub struct PdfNotes {
    /// The invoice's payments and balance (`store::invoices::account`); none: no such block.
    pub account: Option<InvoiceAccount>,
    /// The service's public base URL (`public_url`), for the JSON and bundle links.
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
/// the line's members of the JSON document, and a final row of kind `total` whose `net`,
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
        ]);
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
    row.extend(std::iter::repeat_n(String::new(), 3)); // records, adjustment_for_*
    debug_assert_eq!(row.len(), CSV_HEADER.len());
    w.write_record(&row)?;
    w.into_inner().map_err(|e| e.into_error().into())
}

// ---------------------------------------------------------------------------------------------
// PDF

/// The invoice as a PDF on A4 pages: the issuer and bill-to blocks, the invoice's number,
/// dates and terms, its lines (description, quantity and unit, unit price, net, tax rate, tax,
/// gross) with adjustments for earlier periods apart, the net, tax and gross totals, the
/// payments and balance as of `notes.account`'s time, and how to verify it all.
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

    let title = format!("Invoice {}", invoice.number);
    let mut doc = PdfDocument::new(&safe(&title));
    // The CJK font goes in only when some text needs it.
    let needs_cjk = !serde_json::to_string(invoice)
        .expect("invoices serialise")
        .is_ascii()
        || notes
            .account
            .as_ref()
            .is_some_and(|a| a.settlements.iter().any(|s| !s.note.is_ascii()));
    let cjk = match (needs_cjk, cjk_font()) {
        (true, Some(font)) => {
            let mut text = serde_json::to_string(invoice).expect("invoices serialise");
            if let Some(a) = &notes.account {
                text.extend(a.settlements.iter().map(|s| s.note.as_str()));
            }
            // Only the glyphs drawn go into the PDF; the full font if subsetting fails.
            let id = match subset_cjk(font, &text) {
                Some(subset) => doc.add_font(&subset),
                None => doc.add_font(font),
            };
            Some((id, font))
        }
        _ => None,
    };
    let mut pdf = Pages::new(invoice, cjk);
    pdf.heading(invoice);
    pdf.table(invoice);
    if let Some(a) = &notes.account {
        pdf.payments(a);
    }
    pdf.verification_note(invoice, notes);
    let pages = pdf.finish();

    let issued = printpdf::DateTime::from_unix_timestamp(invoice.issued_at.unix())
        .unwrap_or(printpdf::DateTime::epoch());
    let info = &mut doc.metadata.info;
    info.creation_date = issued;
    info.modification_date = issued;
    info.metadata_date = issued;
    info.creator = "gpuledger".into();
    info.producer = "gpuledger".into();
    info.identifier = safe(&invoice.number);
    let mut warnings = Vec::new();
    Ok(doc
        .with_pages(pages)
        .save(&PdfSaveOptions::default(), &mut warnings))
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
    fn builtin(self) -> BuiltinFont {
        match self {
            Face::Regular => BuiltinFont::Helvetica,
            Face::Bold => BuiltinFont::HelveticaBold,
        }
    }
}

/// The fonts text is set in: Helvetica for printable ASCII, the CJK font (when embedded) for
/// the rest.
#[derive(Clone)]
struct Fonts {
    cjk: Option<(FontId, &'static ParsedFont)>,
}

/// A run of text in one font.
enum Run {
    Latin(String),
    Cjk(String),
}

impl Fonts {
    /// Whether the CJK font has a glyph for `c`.
    fn cjk_has(&self, c: char) -> bool {
        self.cjk
            .as_ref()
            .and_then(|(_, f)| f.lookup_glyph_index(c as u32))
            .is_some_and(|g| g != 0)
    }

    /// `s` split into runs: printable ASCII in Helvetica, characters the CJK font has in it,
    /// anything else as `?` in Helvetica.
    fn runs(&self, s: &str) -> Vec<Run> {
        let mut runs: Vec<Run> = Vec::new();
        for c in s.chars() {
            let cjk = !(' '..='~').contains(&c) && self.cjk_has(c);
            let c = if cjk || (' '..='~').contains(&c) {
                c
            } else {
                '?'
            };
            match (runs.last_mut(), cjk) {
                (Some(Run::Cjk(r)), true) | (Some(Run::Latin(r)), false) => r.push(c),
                (_, true) => runs.push(Run::Cjk(c.to_string())),
                (_, false) => runs.push(Run::Latin(c.to_string())),
            }
        }
        runs
    }

    /// Width of `s` in points.
    fn width(&self, s: &str, size: f32, face: Face) -> f32 {
        self.runs(s)
            .iter()
            .map(|r| match r {
                Run::Latin(t) => text_width(t, size, face),
                Run::Cjk(t) => {
                    let (_, f) = self.cjk.as_ref().expect("CJK runs need the font");
                    let em = f32::from(f.units_per_em.max(1));
                    t.chars()
                        .map(|c| {
                            f.lookup_glyph_index(c as u32)
                                .and_then(|g| f.get_glyph_width(g))
                                .map_or(1000.0, |w| f32::from(w) * 1000.0 / em)
                        })
                        .sum::<f32>()
                        * size
                        / 1000.0
                }
            })
            .sum()
    }
}

/// The body of the document as pages of drawing operations, with a cursor that moves down and
/// starts a new page when the next block does not fit.
struct Pages {
    fonts: Fonts,
    footer: String,
    currency: String,
    pages: Vec<Vec<Op>>,
    y: f32,
    /// Whether a new page repeats the table's column headings.
    in_table: bool,
}

impl Pages {
    fn new(invoice: &Invoice, cjk: Option<(FontId, &'static ParsedFont)>) -> Self {
        Pages {
            fonts: Fonts { cjk },
            footer: format!("Invoice {} - {}", invoice.number, invoice.bill_to.name),
            currency: invoice.currency.clone(),
            pages: vec![Vec::new()],
            y: TOP,
            in_table: false,
        }
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
        let footer = self.footer.clone();
        self.text_wrapped(
            &format!("{footer} (continued)"),
            MARGIN_X,
            RIGHT - MARGIN_X,
            8.0,
        );
        self.y -= 6.0;
        if self.in_table {
            self.column_headings();
        }
    }

    fn text(&mut self, s: &str, x: f32, y: f32, size: f32, face: Face) {
        let fonts = self.fonts.clone();
        push_text(self.ops(), &fonts, s, x, y, size, face, None);
    }

    /// One line of text on the cursor's baseline, ending at `right` (see [`push_text_right`]).
    fn text_right(&mut self, s: &str, right: f32, max_w: f32, size: f32, face: Face) {
        let y = self.y;
        let fonts = self.fonts.clone();
        push_text_right(self.ops(), &fonts, s, right, y, max_w, size, face);
    }

    /// Writes `s` wrapped into lines of at most `width` points, moving the cursor down.
    fn text_wrapped(&mut self, s: &str, x: f32, width: f32, size: f32) {
        self.text_wrapped_face(s, x, width, size, Face::Regular);
    }

    fn text_wrapped_face(&mut self, s: &str, x: f32, width: f32, size: f32, face: Face) {
        let leading = size * 1.35;
        for line in wrap(&self.fonts, s, width, size, face) {
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
            let label_y = self.y - 10.0 * 1.35;
            self.text(&format!("{label}:"), MARGIN_X, label_y, 9.5, Face::Bold);
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

    fn heading(&mut self, invoice: &Invoice) {
        self.text_wrapped_face(
            &format!("Invoice {}", invoice.number),
            MARGIN_X,
            RIGHT - MARGIN_X,
            18.0,
            Face::Bold,
        );
        self.y -= 6.0;
        // Issuer.
        if !invoice.issuer.name.is_empty() {
            let i = &invoice.issuer;
            let mut lines = vec![i.name.clone()];
            lines.extend(i.address.iter().cloned());
            if let Some(t) = &i.tax_id {
                lines.push(format!("Tax ID: {t}"));
            }
            if let Some(e) = &i.email {
                lines.push(format!("Email: {e}"));
            }
            self.block("From", &lines);
        }
        // Bill to.
        let b = &invoice.bill_to;
        let mut lines = vec![b.name.clone()];
        lines.extend(b.address.iter().cloned());
        lines.push(format!("Tenant ID: {}", b.tenant));
        self.block("Bill to", &lines);

        let terms = match invoice.payment_terms_days {
            0 => "due on issue".to_owned(),
            1 => "1 day".to_owned(),
            n => format!("{n} days"),
        };
        let mut fields = vec![
            ("Invoice number", invoice.number.clone()),
            ("Issue date", invoice.issued_at.to_string()),
        ];
        if invoice.format != crate::core::invoice::INVOICE_FORMAT_V1 {
            fields.push(("Due date", invoice.due_at.to_string()));
            fields.push(("Payment terms", terms));
        }
        fields.extend([
            ("Period", period_text(invoice.period)),
            ("Currency", invoice.currency.clone()),
            ("Log", invoice.log_origin.clone()),
            (
                "Checkpoint",
                format!(
                    "size {}, root {}",
                    invoice.checkpoint_size, invoice.checkpoint_root
                ),
            ),
        ]);
        self.fields(&fields, MARGIN_X + 90.0);
        self.y -= 14.0;
    }

    fn column_headings(&mut self) {
        self.y -= LEADING;
        let y = self.y;
        self.text("Description", MARGIN_X, y, BODY, Face::Bold);
        self.text_right("Quantity", QTY_RIGHT, QTY_W, BODY, Face::Bold);
        self.text_right("Unit price", PRICE_RIGHT, PRICE_W, BODY, Face::Bold);
        self.text_right("Net", NET_RIGHT, AMOUNT_W, BODY, Face::Bold);
        self.text_right("Tax rate", RATE_RIGHT, RATE_W, BODY, Face::Bold);
        self.text_right("Tax", TAX_RIGHT, AMOUNT_W, BODY, Face::Bold);
        self.text_right("Gross", RIGHT, AMOUNT_W, BODY, Face::Bold);
        self.rule(y - 4.0, 0.6);
        self.y -= 6.0;
    }

    /// A group or section title, kept on the same page as the row after it.
    fn group_title(&mut self, title: &str, size: f32) {
        let lines = wrap(&self.fonts, title, RIGHT - MARGIN_X, size, Face::Bold);
        self.ensure(lines.len() as f32 * LEADING + 6.0 + LEADING);
        self.y -= 4.0;
        for line in lines {
            self.y -= LEADING;
            let y = self.y;
            self.text(&line, MARGIN_X, y, size, Face::Bold);
        }
    }

    fn row(&mut self, line: &InvoiceLine) {
        let mut item = line.description.clone();
        if let Some(c) = line.class {
            // The description names the class in lower case; the label is for people.
            let lower = class_label(c).to_lowercase();
            item = item.replacen(&lower, class_label(c), 1);
        }
        let measured = match line.kind {
            LineKind::Gpu => line
                .gpu_seconds
                .map(|s| format!("{} GPU-seconds", exact(s))),
            LineKind::Energy => line
                .measured_kwh
                .map(|k| format!("{} kWh measured", exact(k))),
        };
        let detail = match measured {
            Some(m) => format!("{m}, {}", records(line.records)),
            None => records(line.records),
        };
        let mut item_lines = wrap(&self.fonts, &item, ITEM_W, BODY, Face::Regular);
        item_lines.extend(wrap(
            &self.fonts,
            &detail,
            ITEM_W,
            BODY - 1.0,
            Face::Regular,
        ));
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
            self.group_title(
                &format!(
                    "Adjustments: late records of the period {}",
                    period_text(period)
                ),
                9.0,
            );
            self.lines(period_lines);
        }

        self.ensure(4.0 * LEADING + 12.0);
        self.y -= 6.0;
        self.rule(self.y, 0.8);
        let cur = self.currency.clone();
        for (label, amount, face, size) in [
            (
                format!("Net total ({cur})"),
                invoice.net_total,
                Face::Regular,
                9.5,
            ),
            (
                format!("Tax total ({cur})"),
                invoice.tax_total,
                Face::Regular,
                9.5,
            ),
            (format!("Total ({cur})"), invoice.total, Face::Bold, 11.0),
        ] {
            self.y -= LEADING + 2.0;
            let y = self.y;
            self.text(&label, MARGIN_X, y, size, face);
            self.text_right(&money(amount), RIGHT, 90.0, size, face);
        }
        self.in_table = false;
        self.y -= 20.0;
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

    /// "Payments and balance as of <time>": each payment and credit note, then paid,
    /// credited and the balance due (or the excess that became the tenant's credit).
    fn payments(&mut self, a: &InvoiceAccount) {
        self.ensure(6.0 * LEADING);
        self.text_wrapped_face(
            &format!("Payments and balance as of {}", a.as_of),
            MARGIN_X,
            RIGHT - MARGIN_X,
            11.0,
            Face::Bold,
        );
        self.y -= 2.0;
        if a.settlements.is_empty() {
            self.text_wrapped(
                "No payments or credit notes yet.",
                MARGIN_X,
                RIGHT - MARGIN_X,
                9.0,
            );
        }
        for s in &a.settlements {
            let kind = if s.kind == "payment" {
                "Payment"
            } else {
                "Credit note"
            };
            let text = match s.note.as_str() {
                "" => format!("{} {kind} (log entry {})", s.date, s.index),
                n => format!("{} {kind} (log entry {}): {n}", s.date, s.index),
            };
            let lines = wrap(
                &self.fonts,
                &text,
                RIGHT - MARGIN_X - 100.0,
                9.0,
                Face::Regular,
            );
            self.ensure(lines.len() as f32 * LEADING);
            self.y -= LEADING;
            self.text_right(&money(s.amount), RIGHT, 90.0, 9.0, Face::Regular);
            for (i, l) in lines.iter().enumerate() {
                if i > 0 {
                    self.y -= LEADING;
                }
                let y = self.y;
                self.text(l, MARGIN_X, y, 9.0, Face::Regular);
            }
        }
        let cur = &a.currency;
        let status = match a.status {
            AccountStatus::Open => "open",
            AccountStatus::Paid => "paid",
            AccountStatus::Overpaid => "overpaid (the excess is the tenant's credit)",
        };
        let mut rows = vec![
            (format!("Invoice total ({cur})"), a.total, Face::Regular),
            (format!("Paid ({cur})"), a.paid, Face::Regular),
            (format!("Credited ({cur})"), a.credited, Face::Regular),
        ];
        if a.excess > Decimal::ZERO {
            rows.push((
                format!("Excess credited to the tenant ({cur})"),
                a.excess,
                Face::Regular,
            ));
        }
        rows.push((
            format!("Balance due ({cur}), {status}"),
            a.balance_due,
            Face::Bold,
        ));
        self.ensure(rows.len() as f32 * (LEADING + 1.0) + 4.0);
        self.y -= 4.0;
        for (label, amount, face) in rows {
            self.y -= LEADING + 1.0;
            let y = self.y;
            self.text(&label, MARGIN_X, y, 9.5, face);
            self.text_right(&money(amount), RIGHT, 90.0, 9.5, face);
        }
        self.y -= 16.0;
    }

    fn verification_note(&mut self, invoice: &Invoice, notes: &PdfNotes) {
        self.ensure(6.0 * LEADING);
        self.y -= 4.0;
        self.text_wrapped_face(
            "How to verify",
            MARGIN_X,
            RIGHT - MARGIN_X,
            11.0,
            Face::Bold,
        );
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
        let paragraphs = [
            format!(
                "This invoice was computed from the log {} at checkpoint size {}, root hash {}. \
                 Every quantity and net amount on it can be recomputed from the log's signed \
                 entries (usage, rate cards, spot prices, region parameters) by the rules of \
                 docs/RATING.md; tax is each line's net times its rate, rounded half-even to \
                 the currency's minor unit, and the totals are the sums of the lines.",
                invoice.log_origin, invoice.checkpoint_size, invoice.checkpoint_root
            ),
            format!(
                "Download the invoice and its evidence bundle: {base}/v1/invoices/{n} \
                 (save as {n}.json) and {base}/v1/invoices/{n}/bundle (save as \
                 {n}.bundle.jsonl), then run:"
            ),
            format!(
                "gpuledger verify --invoice {n}.json --bundle {n}.bundle.jsonl --log-key '{key}'"
            ),
        ];
        for p in paragraphs {
            self.y -= 3.0;
            self.text_wrapped(&p, MARGIN_X, RIGHT - MARGIN_X, BODY);
        }
    }

    /// Adds the page footers ("page i of n") and returns the pages.
    fn finish(self) -> Vec<PdfPage> {
        let n = self.pages.len();
        let fonts = self.fonts.clone();
        self.pages
            .into_iter()
            .enumerate()
            .map(|(i, mut ops)| {
                push_text(
                    &mut ops,
                    &fonts,
                    &self.footer,
                    MARGIN_X,
                    35.0,
                    8.0,
                    Face::Regular,
                    None,
                );
                let page = format!("Page {} of {n}", i + 1);
                push_text_right(
                    &mut ops,
                    &fonts,
                    &page,
                    RIGHT,
                    35.0,
                    120.0,
                    8.0,
                    Face::Regular,
                );
                PdfPage::new(Mm(PAGE_W_MM), Mm(PAGE_H_MM), ops)
            })
            .collect()
    }
}

/// One text object at (`x`, `y`), a run per font; `squeeze` narrows it to that percentage of
/// its natural width.
#[allow(clippy::too_many_arguments)]
fn push_text(
    ops: &mut Vec<Op>,
    fonts: &Fonts,
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
    for run in fonts.runs(s) {
        let (font, text) = match run {
            Run::Latin(t) => (PdfFontHandle::Builtin(face.builtin()), t),
            Run::Cjk(t) => (
                PdfFontHandle::External(
                    fonts
                        .cjk
                        .as_ref()
                        .expect("CJK runs need the font")
                        .0
                        .clone(),
                ),
                t,
            ),
        };
        ops.extend([
            Op::SetFont {
                font,
                size: Pt(size),
            },
            Op::ShowText {
                items: vec![TextItem::Text(text)],
            },
        ]);
    }
    if squeeze.is_some() {
        // Horizontal scaling is text state, which outlives the text object: reset it.
        ops.push(Op::SetHorizontalScaling { percent: 100.0 });
    }
    ops.push(Op::EndTextSection);
}

/// One line of text ending at `right`, squeezed horizontally when wider than `max_w` (a very
/// long quantity keeps every digit, narrower).
#[allow(clippy::too_many_arguments)]
fn push_text_right(
    ops: &mut Vec<Op>,
    fonts: &Fonts,
    s: &str,
    right: f32,
    y: f32,
    max_w: f32,
    size: f32,
    face: Face,
) {
    let w = fonts.width(s, size, face);
    if w <= max_w {
        push_text(ops, fonts, s, right - w, y, size, face, None);
    } else {
        let percent = (max_w / w * 100.0).max(1.0);
        push_text(ops, fonts, s, right - max_w, y, size, face, Some(percent));
    }
}

fn records(n: u64) -> String {
    match n {
        1 => "1 record".to_owned(),
        n => format!("{n} records"),
    }
}

fn period_text(p: Period) -> String {
    format!("{} to {} (the end excluded)", p.from, p.to)
}

/// Printable ASCII only, for the document's metadata: anything else becomes `?`.
fn safe(s: &str) -> String {
    s.chars()
        .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
        .collect()
}

/// Width of printable ASCII `s` in points, from the standard Helvetica metrics (thousandths of
/// the size).
fn text_width(s: &str, size: f32, face: Face) -> f32 {
    let units: u32 = s.chars().map(|c| glyph_width(c, face)).sum();
    units as f32 * size / 1000.0
}

fn glyph_width(c: char, face: Face) -> u32 {
    let table = match face {
        Face::Regular => &HELVETICA_WIDTHS,
        Face::Bold => &HELVETICA_BOLD_WIDTHS,
    };
    // Only printable ASCII is set in Helvetica (`Fonts::runs`); anything else is measured as
    // a wide glyph.
    let w = table
        .get((c as usize).wrapping_sub(32))
        .copied()
        .unwrap_or(1000);
    u32::from(w)
}

/// Helvetica advance widths of ASCII 32..=126, in thousandths of the font size.
const HELVETICA_WIDTHS: [u16; 95] = [
    278, 278, 355, 556, 556, 889, 667, 191, 333, 333, 389, 584, 278, 333, 278, 278, // ' '../
    556, 556, 556, 556, 556, 556, 556, 556, 556, 556, 278, 278, 584, 584, 584, 556, // 0..?
    1015, 667, 667, 722, 722, 667, 611, 778, 722, 278, 500, 667, 556, 833, 722, 778, // @..O
    667, 778, 722, 667, 611, 722, 667, 944, 667, 667, 611, 278, 278, 278, 469, 556, // P.._
    333, 556, 556, 500, 556, 556, 278, 556, 556, 222, 222, 500, 222, 833, 556, 556, // `..o
    556, 556, 333, 500, 278, 556, 500, 722, 500, 500, 500, 334, 260, 334, 584, // p..~
];

/// Helvetica-Bold advance widths of ASCII 32..=126, in thousandths of the font size.
const HELVETICA_BOLD_WIDTHS: [u16; 95] = [
    278, 333, 474, 556, 556, 889, 722, 238, 333, 333, 389, 584, 278, 333, 278, 278, // ' '../
    556, 556, 556, 556, 556, 556, 556, 556, 556, 556, 333, 333, 584, 584, 584, 611, // 0..?
    975, 722, 722, 722, 722, 667, 611, 778, 722, 278, 556, 722, 611, 833, 722, 778, // @..O
    667, 778, 722, 667, 611, 722, 667, 944, 667, 667, 611, 333, 278, 333, 584, 556, // P.._
    333, 556, 611, 556, 611, 556, 333, 611, 611, 278, 278, 556, 278, 889, 611, 611, // `..o
    611, 611, 389, 556, 333, 611, 556, 778, 556, 556, 500, 389, 280, 389, 584, // p..~
];

/// Splits `s` into lines no wider than `width` points: at spaces where it can, inside a word
/// (an id, a hash, a run of Chinese text) where the word alone is too wide.
fn wrap(fonts: &Fonts, s: &str, width: f32, size: f32, face: Face) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in s.split(' ') {
        let candidate = if line.is_empty() {
            word.to_owned()
        } else {
            format!("{line} {word}")
        };
        if fonts.width(&candidate, size, face) <= width {
            line = candidate;
            continue;
        }
        if !line.is_empty() {
            lines.push(std::mem::take(&mut line));
        }
        // The word alone: break it wherever it reaches the width.
        for c in word.chars() {
            line.push(c);
            if fonts.width(&line, size, face) > width && line.chars().count() > 1 {
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

    /// Our width tables against the metrics of the faces printpdf ships for the built-in fonts
    /// (which have no glyph for the space; its width is 278 in both).
    #[test]
    fn helvetica_widths_match_the_built_in_fonts() {
        for (face, builtin) in [
            (Face::Regular, BuiltinFont::Helvetica),
            (Face::Bold, BuiltinFont::HelveticaBold),
        ] {
            let font = builtin.get_parsed_font().expect("built-in font parses");
            let em = f32::from(font.units_per_em);
            let mut checked = 0;
            for c in '!'..='~' {
                let gid = font.lookup_glyph_index(c as u32).expect("glyph");
                let actual = f32::from(font.get_glyph_width(gid).expect("width")) * 1000.0 / em;
                let ours = glyph_width(c, face) as f32;
                assert!((actual - ours).abs() <= 1.0, "{c:?}: {actual} vs {ours}");
                checked += 1;
            }
            assert_eq!(checked, 94);
        }
    }

    #[test]
    fn wraps_at_spaces_and_inside_long_words() {
        let fonts = Fonts { cjk: None };
        let lines = wrap(
            &fonts,
            "aaa bbb ccc",
            text_width("aaa bbb", 10.0, Face::Regular),
            10.0,
            Face::Regular,
        );
        assert_eq!(lines, ["aaa bbb", "ccc"]);
        let long = "x".repeat(300);
        let lines = wrap(&fonts, &long, 100.0, 10.0, Face::Regular);
        assert!(lines.len() > 1);
        assert_eq!(lines.concat(), long);
        for l in &lines {
            assert!(text_width(l, 10.0, Face::Regular) <= 100.0);
        }
        assert_eq!(wrap(&fonts, "", 100.0, 10.0, Face::Regular), [""]);
        assert_eq!(safe("caf\u{e9}\n"), "caf??");
    }

    /// Chinese text goes to the CJK font in runs, Latin text stays in Helvetica, and
    /// characters neither has become `?`.
    #[test]
    fn text_is_split_into_runs_per_font() {
        let font = cjk_font().expect("the embedded CJK font parses");
        let fonts = Fonts {
            cjk: Some((FontId::new(), font)),
        };
        let runs = fonts.runs("VAT 北京市 6%\u{1}");
        let spelled: Vec<String> = runs
            .iter()
            .map(|r| match r {
                Run::Latin(t) => format!("L:{t}"),
                Run::Cjk(t) => format!("C:{t}"),
            })
            .collect();
        assert_eq!(spelled, ["L:VAT ", "C:北京市", "L: 6%?"]);
        // Chinese glyphs are wide (about one em), and measured from the font.
        let w = fonts.width("北京", 10.0, Face::Regular);
        assert!((15.0..=22.0).contains(&w), "{w}");
        let lines = wrap(&fonts, &"北京".repeat(40), 100.0, 10.0, Face::Regular);
        assert!(lines.len() > 1);
        for l in &lines {
            assert!(fonts.width(l, 10.0, Face::Regular) <= 100.0);
        }
    }
}
