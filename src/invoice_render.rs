//! Invoice downloads: an issued [`Invoice`] as JSON, CSV and PDF.
//!
//! The three say the same thing with the same spellings, so a tenant's finance tool can check
//! one against another: quantities, prices and PUE in their canonical decimal form
//! (`core::decimal`), amounts with exactly the currency's minor digits (`148.00`), timestamps in
//! the wire form (`core::time`).
//!
//! Pure: no I/O and no clock. The PDF's dates are the invoice's `issued_at`; only its trailer
//! `/ID` (which printpdf draws at random) differs between two renderings of one invoice.
//!
//! The PDF uses only the built-in Helvetica faces (no font files), writes all its text as real
//! text objects (so it can be searched, copied and extracted), keeps to printable ASCII (anything
//! else becomes `?`), and runs onto as many A4 pages as the lines need.

use crate::core::decimal::to_canonical;
use crate::core::invoice::{Invoice, InvoiceLine, Period};
use printpdf::{
    BuiltinFont, Line, LinePoint, Mm, Op, PdfDocument, PdfFontHandle, PdfPage, PdfSaveOptions,
    Point, Pt, TextItem,
};
use rust_decimal::Decimal;

/// Most invoice lines a PDF is rendered for (about 350 pages). Larger invoices are refused with
/// [`RenderError::TooManyLines`]; their JSON and CSV downloads have no such limit.
pub const MAX_PDF_LINES: usize = 20_000;

/// The CSV columns, in order.
pub const CSV_HEADER: [&str; 17] = [
    "invoice_number",
    "tenant",
    "period_from",
    "period_to",
    "currency",
    "kind",
    "region",
    "gpu_model",
    "class",
    "quantity",
    "unit",
    "unit_price",
    "pue",
    "amount",
    "records",
    "adjustment_for_from",
    "adjustment_for_to",
];

/// Why an invoice could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    #[error("invoice {number}: its total {total} is not the sum of its lines ({sum})")]
    TotalMismatch {
        number: String,
        total: Decimal,
        sum: Decimal,
    },
    #[error(
        "invoice {number} has {lines} lines; a PDF is rendered for at most {MAX_PDF_LINES} \
         (download it as CSV or JSON)"
    )]
    TooManyLines { number: String, lines: usize },
}

// ---------------------------------------------------------------------------------------------
// Spellings shared by the three formats.

/// A quantity, price or PUE: canonical decimal, as `core::decimal::serialize` writes it.
fn exact(d: Decimal) -> String {
    to_canonical(d)
}

/// An amount: every digit of the currency's minor unit, as `core::invoice` serialises it.
fn money(d: Decimal) -> String {
    d.to_string()
}

fn class_name(line: &InvoiceLine) -> &'static str {
    line.class.map_or("", |c| c.as_str())
}

// ---------------------------------------------------------------------------------------------
// JSON

/// The invoice as pretty-printed JSON, fields in the order `core::invoice` declares them,
/// decimals as strings; ends with a newline.
pub fn to_json(invoice: &Invoice) -> Vec<u8> {
    debug_assert_eq!(
        invoice.total,
        invoice.sum_of_lines(),
        "total = sum of lines"
    );
    let mut out = serde_json::to_vec_pretty(invoice)
        .expect("an Invoice always serialises: string keys, strings and integers only");
    out.push(b'\n');
    out
}

// ---------------------------------------------------------------------------------------------
// CSV

/// The invoice as CSV: the [`CSV_HEADER`] row, one row per line in the invoice's order, and a
/// final row of kind `total` whose amount is the invoice total. Empty cells for what a line
/// does not have (an energy line's GPU model and class, a current line's adjustment period).
pub fn to_csv(invoice: &Invoice) -> Vec<u8> {
    debug_assert_eq!(
        invoice.total,
        invoice.sum_of_lines(),
        "total = sum of lines"
    );
    write_csv(invoice).expect("writing CSV into memory cannot fail")
}

fn write_csv(invoice: &Invoice) -> Result<Vec<u8>, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(CSV_HEADER)?;
    let from = invoice.period.from.to_string();
    let to = invoice.period.to.to_string();
    for line in &invoice.lines {
        let (adj_from, adj_to) = match line.adjustment_for {
            Some(p) => (p.from.to_string(), p.to.to_string()),
            None => (String::new(), String::new()),
        };
        w.write_record([
            invoice.number.as_str(),
            &invoice.tenant,
            &from,
            &to,
            &invoice.currency,
            line.kind,
            &line.region,
            line.gpu_model.as_deref().unwrap_or(""),
            class_name(line),
            &exact(line.quantity),
            line.unit,
            &exact(line.unit_price),
            &line.pue.map(exact).unwrap_or_default(),
            &money(line.amount),
            &line.records.to_string(),
            &adj_from,
            &adj_to,
        ])?;
    }
    let total = money(invoice.total);
    #[rustfmt::skip]
    w.write_record([
        invoice.number.as_str(), &invoice.tenant, &from, &to, &invoice.currency, "total",
        "", "", "", "", "", "", "", // region .. pue
        &total,
        "", "", "", // records, adjustment_for_from, adjustment_for_to
    ])?;
    w.into_inner().map_err(|e| e.into_error().into())
}

// ---------------------------------------------------------------------------------------------
// PDF

/// The invoice as a PDF on A4 pages: the heading (number, tenant, period, currency, issue
/// time, checkpoint), the lines grouped by region and GPU model, then energy, then adjustments
/// for earlier periods, the total, and how to verify it all from the log.
pub fn to_pdf(invoice: &Invoice) -> Result<Vec<u8>, RenderError> {
    let sum = invoice.sum_of_lines();
    if invoice.total != sum {
        return Err(RenderError::TotalMismatch {
            number: invoice.number.clone(),
            total: invoice.total,
            sum,
        });
    }
    if invoice.lines.len() > MAX_PDF_LINES {
        return Err(RenderError::TooManyLines {
            number: invoice.number.clone(),
            lines: invoice.lines.len(),
        });
    }

    let mut pdf = Pages::new(invoice);
    pdf.heading(invoice);
    pdf.table(invoice);
    pdf.verification_note(invoice);
    let pages = pdf.finish();

    let title = safe(&format!("Invoice {}", invoice.number));
    let mut doc = PdfDocument::new(&title);
    let issued = printpdf::DateTime::from_unix_timestamp(invoice.issued_at.unix())
        .unwrap_or(printpdf::DateTime::epoch());
    let info = &mut doc.metadata.info;
    info.creation_date = issued;
    info.modification_date = issued;
    info.metadata_date = issued;
    info.creator = "gpuledger".into();
    info.producer = "gpuledger".into();
    info.identifier = safe(&invoice.number);
    // printpdf reports what it had to work around (font and image problems, colours out of
    // range); built-in fonts, printable ASCII and black lines give it none to report.
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

// Table columns: the item's text box, and the right edges of the number columns.
const ITEM_X: f32 = MARGIN_X + 8.0;
const ITEM_W: f32 = 150.0;
const QTY_RIGHT: f32 = 340.0;
const QTY_W: f32 = 120.0;
const PRICE_RIGHT: f32 = 455.0;
const PRICE_W: f32 = 105.0;
const AMOUNT_W: f32 = 80.0;

const BODY: f32 = 9.0;
const LEADING: f32 = 12.0;

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

/// The body of the document as pages of drawing operations, with a cursor that moves down and
/// starts a new page when the next block does not fit.
struct Pages {
    footer: String,
    table_header: String,
    pages: Vec<Vec<Op>>,
    y: f32,
    /// Whether a new page repeats the table's column headings.
    in_table: bool,
}

impl Pages {
    fn new(invoice: &Invoice) -> Self {
        Pages {
            footer: format!("Invoice {} - {}", invoice.number, invoice.tenant),
            table_header: invoice.currency.clone(),
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

    fn heading(&mut self, invoice: &Invoice) {
        self.text_wrapped_face(
            &format!("Invoice {}", invoice.number),
            MARGIN_X,
            RIGHT - MARGIN_X,
            18.0,
            Face::Bold,
        );
        self.y -= 8.0;
        let period = period_text(invoice.period);
        let fields = [
            ("Tenant", invoice.tenant.clone()),
            ("Period", period),
            ("Currency", invoice.currency.clone()),
            ("Issued at", invoice.issued_at.to_string()),
            ("Log", invoice.log_origin.clone()),
            ("Checkpoint size", invoice.checkpoint_size.to_string()),
            ("Checkpoint root", invoice.checkpoint_root.clone()),
        ];
        let value_x = MARGIN_X + 90.0;
        for (label, value) in fields {
            self.ensure(LEADING + 2.0);
            let label_y = self.y - LEADING - 2.0;
            self.text(&format!("{label}:"), MARGIN_X, label_y, 10.0, Face::Bold);
            self.y -= 2.0;
            self.text_wrapped_face(&value, value_x, RIGHT - value_x, 10.0, Face::Regular);
        }
        self.y -= 16.0;
    }

    fn column_headings(&mut self) {
        self.y -= LEADING;
        let y = self.y;
        let cur = self.table_header.clone();
        self.text("Item", MARGIN_X, y, BODY, Face::Bold);
        self.text_right("Quantity", QTY_RIGHT, QTY_W, BODY, Face::Bold);
        self.text_right(
            &format!("Unit price ({cur})"),
            PRICE_RIGHT,
            PRICE_W,
            BODY,
            Face::Bold,
        );
        self.text_right(
            &format!("Amount ({cur})"),
            RIGHT,
            AMOUNT_W,
            BODY,
            Face::Bold,
        );
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

    fn row(&mut self, item: &str, line: &InvoiceLine) {
        let item_lines = wrap(item, ITEM_W, BODY, Face::Regular);
        self.ensure(item_lines.len() as f32 * LEADING);
        self.y -= LEADING;
        let top = self.y;
        let per = match line.unit {
            "GPU-s" => "GPU-h",
            other => other,
        };
        self.text_right(
            &format!("{} {}", exact(line.quantity), line.unit),
            QTY_RIGHT,
            QTY_W,
            BODY,
            Face::Regular,
        );
        self.text_right(
            &format!("{} per {per}", exact(line.unit_price)),
            PRICE_RIGHT,
            PRICE_W,
            BODY,
            Face::Regular,
        );
        self.text_right(&money(line.amount), RIGHT, AMOUNT_W, BODY, Face::Regular);
        for (i, text) in item_lines.iter().enumerate() {
            if i > 0 {
                self.y -= LEADING;
            }
            let y = self.y;
            self.text(text, ITEM_X, y, BODY, Face::Regular);
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
        self.gpu_groups(&current);
        self.energy(&current);

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
                10.0,
            );
            self.gpu_groups(period_lines);
            self.energy(period_lines);
        }

        self.ensure(LEADING + 12.0);
        self.y -= 6.0;
        self.rule(self.y, 0.8);
        self.y -= LEADING + 2.0;
        let y = self.y;
        self.text(
            &format!("Total ({})", invoice.currency),
            MARGIN_X,
            y,
            11.0,
            Face::Bold,
        );
        self.text_right(&money(invoice.total), RIGHT, AMOUNT_W, 11.0, Face::Bold);
        self.in_table = false;
        self.y -= 20.0;
    }

    /// GPU lines grouped by (region, GPU model), groups in that order, lines in invoice order.
    fn gpu_groups(&mut self, lines: &[&InvoiceLine]) {
        let mut gpu: Vec<&InvoiceLine> = lines
            .iter()
            .copied()
            .filter(|l| l.kind != "energy")
            .collect();
        gpu.sort_by(|a, b| (&a.region, &a.gpu_model).cmp(&(&b.region, &b.gpu_model)));
        for group in gpu.chunk_by(|a, b| (&a.region, &a.gpu_model) == (&b.region, &b.gpu_model)) {
            let first = group[0];
            let model = first.gpu_model.as_deref().unwrap_or("(no model)");
            self.group_title(&format!("Region {}, GPU {model}", first.region), BODY);
            for line in group {
                let class = match class_name(line) {
                    "" => line.kind,
                    c => c,
                };
                self.row(&format!("{class} ({})", records(line.records)), line);
            }
        }
    }

    /// Energy lines, by region.
    fn energy(&mut self, lines: &[&InvoiceLine]) {
        let mut energy: Vec<&InvoiceLine> = lines
            .iter()
            .copied()
            .filter(|l| l.kind == "energy")
            .collect();
        if energy.is_empty() {
            return;
        }
        energy.sort_by(|a, b| a.region.cmp(&b.region));
        self.group_title("Energy", BODY);
        for line in energy {
            let pue = line.pue.map(exact).unwrap_or_else(|| "-".into());
            self.row(
                &format!(
                    "Region {}, PUE {pue} ({} records)",
                    line.region, line.records
                ),
                line,
            );
        }
    }

    fn verification_note(&mut self, invoice: &Invoice) {
        self.ensure(5.0 * LEADING);
        self.y -= 4.0;
        self.text_wrapped_face(
            "How to verify",
            MARGIN_X,
            RIGHT - MARGIN_X,
            11.0,
            Face::Bold,
        );
        let paragraphs = [
            format!(
                "This invoice was computed from the log {} at checkpoint size {}, root hash {}.",
                invoice.log_origin, invoice.checkpoint_size, invoice.checkpoint_root
            ),
            "Anyone holding the log can recompute every amount on it from the log's entries \
             (rate cards, spot prices, region parameters and usage) by the rules of \
             docs/RATING.md: each line is rounded once, half-even, to the currency's minor unit, \
             and the total is the sum of the lines."
                .to_owned(),
            "Check the log itself (signatures, hash chain, Merkle tree and checkpoints) with \
             `gpuledger verify-log`."
                .to_owned(),
        ];
        for p in paragraphs {
            self.y -= 3.0;
            self.text_wrapped(&p, MARGIN_X, RIGHT - MARGIN_X, BODY);
        }
    }

    /// Adds the page footers ("page i of n") and returns the pages.
    fn finish(self) -> Vec<PdfPage> {
        let n = self.pages.len();
        self.pages
            .into_iter()
            .enumerate()
            .map(|(i, mut ops)| {
                push_text(
                    &mut ops,
                    &self.footer,
                    MARGIN_X,
                    35.0,
                    8.0,
                    Face::Regular,
                    None,
                );
                let page = format!("Page {} of {n}", i + 1);
                push_text_right(&mut ops, &page, RIGHT, 35.0, 120.0, 8.0, Face::Regular);
                PdfPage::new(Mm(PAGE_W_MM), Mm(PAGE_H_MM), ops)
            })
            .collect()
    }
}

/// One text object at (`x`, `y`); `squeeze` narrows it to that percentage of its natural width.
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
    ops.extend([
        Op::SetFont {
            font: PdfFontHandle::Builtin(face.builtin()),
            size: Pt(size),
        },
        Op::SetTextCursor {
            pos: Point { x: Pt(x), y: Pt(y) },
        },
        Op::ShowText {
            items: vec![TextItem::Text(safe(s))],
        },
    ]);
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
    let w = text_width(s, size, face);
    if w <= max_w {
        push_text(ops, s, right - w, y, size, face, None);
    } else {
        let percent = (max_w / w * 100.0).max(1.0);
        push_text(ops, s, right - max_w, y, size, face, Some(percent));
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

/// Printable ASCII only: anything else (never in ids, but the PDF must not depend on it)
/// becomes `?`.
fn safe(s: &str) -> String {
    s.chars()
        .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
        .collect()
}

/// Width of `s` in points, from the standard Helvetica metrics (thousandths of the size).
fn text_width(s: &str, size: f32, face: Face) -> f32 {
    let units: u32 = s.chars().map(|c| glyph_width(c, face)).sum();
    units as f32 * size / 1000.0
}

fn glyph_width(c: char, face: Face) -> u32 {
    let table = match face {
        Face::Regular => &HELVETICA_WIDTHS,
        Face::Bold => &HELVETICA_BOLD_WIDTHS,
    };
    // Only printable ASCII is ever drawn (`safe`); anything else is measured as a wide glyph.
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
/// (an id, a hash) where the word alone is too wide.
fn wrap(s: &str, width: f32, size: f32, face: Face) -> Vec<String> {
    let s = safe(s);
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in s.split(' ') {
        let candidate = if line.is_empty() {
            word.to_owned()
        } else {
            format!("{line} {word}")
        };
        if text_width(&candidate, size, face) <= width {
            line = candidate;
            continue;
        }
        if !line.is_empty() {
            lines.push(std::mem::take(&mut line));
        }
        // The word alone: break it wherever it reaches the width.
        for c in word.chars() {
            line.push(c);
            if text_width(&line, size, face) > width && line.len() > 1 {
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
        let lines = wrap(
            "aaa bbb ccc",
            text_width("aaa bbb", 10.0, Face::Regular),
            10.0,
            Face::Regular,
        );
        assert_eq!(lines, ["aaa bbb", "ccc"]);
        let long = "x".repeat(300);
        let lines = wrap(&long, 100.0, 10.0, Face::Regular);
        assert!(lines.len() > 1);
        assert_eq!(lines.concat(), long);
        for l in &lines {
            assert!(text_width(l, 10.0, Face::Regular) <= 100.0);
        }
        assert_eq!(wrap("", 100.0, 10.0, Face::Regular), [""]);
        assert_eq!(safe("caf\u{e9}\n"), "caf??");
    }
}
