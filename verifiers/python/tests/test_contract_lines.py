"""An invoice's contract lines (docs/RATING.md, "Contracts"), recomputed from its bundle:
`bundle --invoice INVOICE.json`.

The committed fixture tests/fixtures/contract/ is what the Rust ledger issues (tests/contracts.rs
keeps it byte for byte): tenant acme's contract C-acme-2027, a year from 2027-01-15T12:00:00Z,
billed by calendar month, rent 3100 in advance, public IPs 10 in arrears, setup 500 once, a
commitment of 1000 a month; one usage record of 10 GPU-h at 18.5 CNY. Its January invoice:
usage 185.00, setup 500.00, rent 3100 × 16.5/31 = 1650.00, IPs 10 × 16.5/31 = 5.3225… → 5.32,
committed 1000 × 16.5/31 = 532.258… → 532.26, true-up 532.26 − 185.00 = 347.26, total 2687.58.

The pure functions (billing periods, proration, half-even rounding, minor units) are checked
with figures worked out by hand here, not with the verifier's own arithmetic."""

import copy
import io
import json
import os
import unittest
from contextlib import redirect_stderr, redirect_stdout
from fractions import Fraction

from support import REPO, LogBundleTestCase, VerifierTestCase, gv, producer

FIXTURE = os.path.join(REPO, "tests", "fixtures", "contract")
FIXTURE_INVOICE = os.path.join(FIXTURE, "invoice.json")
FIXTURE_BUNDLE = os.path.join(FIXTURE, "bundle.ndjson")
FIXTURE_KEY = os.path.join(FIXTURE, "verifier_key.txt")


def ts(text):
    return gv.parse_timestamp(text)


def load_fixture_invoice():
    with open(FIXTURE_INVOICE, "rb") as f:
        return json.loads(f.read())


class FixtureInvoice(VerifierTestCase):
    """The Rust ledger's January invoice and its bundle; edits of a copy of the invoice."""

    def setUp(self):
        super().setUp()
        self.key = gv.load_verifier_key(FIXTURE_KEY)
        self.invoice = load_fixture_invoice()

    def check(self, invoice=None, bundle=FIXTURE_BUNDLE):
        path = self.write("invoice.json", json.dumps(self.invoice if invoice is None else invoice,
                                                     ensure_ascii=False))
        return gv.verify_bundle(bundle, self.key, path)

    def edited(self, edit):
        inv = copy.deepcopy(self.invoice)
        edit(inv)
        return self.check(inv)

    def test_the_fixture_is_the_scenario(self):
        inv = self.invoice
        self.assertEqual([(l["kind"], l["net"]) for l in inv["lines"]],
                         [("gpu", "185.00"), ("fee", "500.00"), ("fee", "1650.00"), ("fee", "5.32"),
                          ("true_up", "347.26")])
        self.assertEqual(inv["total"], "2687.58")
        self.assertEqual(inv["commitments"], [{"contract": "C-acme-2027", "committed": "532.26",
                                               "drawn": "185.00", "true_up": "347.26"}])

    def test_passes(self):
        r = self.check()
        self.assertPass(r)
        s = r.summary["invoice"]
        self.assertEqual((s["number"], s["tenant"], s["currency"]), ("INV-000001", "acme", "CNY"))
        self.assertEqual((s["contracts"], s["contract_lines"], s["commitments"]), (["C-acme-2027"], 4, 1))
        self.assertEqual((s["usage_lines"], s["other_lines"], s["usage_lines_rerated"]), (1, 0, True))
        self.assertEqual(s["total"], "2687.58")
        self.assertIn("4 contract lines", r.message)
        self.assertIn("adjustment lines re-rated from the bundle's 1 records", r.message)

    def test_without_the_option_nothing_changes(self):
        r = gv.verify_bundle(FIXTURE_BUNDLE, self.key)
        self.assertPass(r)
        self.assertNotIn("invoice", r.summary)
        self.assertNotIn("contract lines", r.message)

    def test_the_command_line(self):
        path = self.write("invoice.json", json.dumps(self.invoice))
        out = io.StringIO()
        with redirect_stdout(out):
            rc = gv.main(["bundle", "--bundle", FIXTURE_BUNDLE, "--log-key", FIXTURE_KEY, "--invoice", path,
                          "--json"])
        self.assertEqual(rc, 0, out.getvalue())
        obj = json.loads(out.getvalue())
        self.assertEqual(obj["result"], "PASS")
        self.assertTrue(obj["summary"]["invoice"]["usage_lines_rerated"])
        self.invoice["lines"][2]["net"] = "1650.01"
        path = self.write("invoice.json", json.dumps(self.invoice))
        out = io.StringIO()
        with redirect_stdout(out):
            rc = gv.main(["bundle", "--bundle", FIXTURE_BUNDLE, "--log-key", FIXTURE_KEY, "--invoice", path])
        self.assertEqual(rc, 1)
        self.assertTrue(out.getvalue().startswith("FAIL: claim_mismatch: lines[2].net: "), out.getvalue())

    def test_an_unreadable_invoice_is_a_usage_error(self):
        err = io.StringIO()
        with redirect_stderr(err), redirect_stdout(io.StringIO()) as out:
            rc = gv.main(["bundle", "--bundle", FIXTURE_BUNDLE, "--log-key", FIXTURE_KEY,
                          "--invoice", os.path.join(self.tmp, "absent.json")])
        self.assertEqual((rc, out.getvalue()), (2, ""))
        self.assertIn("cannot read", err.getvalue())

    # the edits of the brief

    def test_a_fee_net_off_by_a_cent(self):
        def edit(inv):
            inv["lines"][2]["net"] = "1650.01"
            inv["lines"][2]["gross"] = "1650.01"
        r = self.edited(edit)
        self.assertFail(r, "claim_mismatch", "lines[2].gross")
        r = self.edited(lambda inv: inv["lines"][2].update(net="1650.01"))
        self.assertFail(r, "claim_mismatch", "lines[2].net")
        self.assertIn('"1650.01"', r.message)
        self.assertIn('"1650.00"', r.message)

    def test_the_true_up_line_removed(self):
        def edit(inv):
            del inv["lines"][4]
            for name in ("net_total", "total"):
                inv[name] = "2340.32"
        self.assertFail(self.edited(edit), "claim_mismatch", "lines[4]")

    def test_commitments_drawn_changed(self):
        r = self.edited(lambda inv: inv["commitments"][0].update(drawn="185.01"))
        self.assertFail(r, "claim_mismatch", "commitments")

    def test_commitments_left_out(self):
        self.assertFail(self.edited(lambda inv: inv.pop("commitments")), "claim_mismatch", "commitments")

    def test_a_fee_quantity_changed(self):
        self.assertFail(self.edited(lambda inv: inv["lines"][3].update(quantity="0.532259")),
                        "claim_mismatch", "lines[3].quantity")
        # The share 16.5/31 = 0.5322580645…: the exact value, or trailing zeros, are not the wire's.
        self.assertFail(self.edited(lambda inv: inv["lines"][2].update(quantity="0.5322580645")),
                        "claim_mismatch", "lines[2].quantity")
        self.assertFail(self.edited(lambda inv: inv["lines"][1].update(quantity="1.0")),
                        "claim_mismatch", "lines[1].quantity")

    def test_total_changed(self):
        self.assertFail(self.edited(lambda inv: inv.update(total="2687.59")), "claim_mismatch", "total")
        self.assertFail(self.edited(lambda inv: inv.update(net_total="2687.5")), "claim_mismatch", "net_total")
        self.assertFail(self.edited(lambda inv: inv.update(tax_total="0")), "claim_mismatch", "tax_total")

    # other members of the contract lines

    def test_each_member_of_a_fee_line(self):
        for member, value in (("kind", "true_up"), ("description", "Rack set-up"), ("region", "east"),
                              ("contract", "C-other"), ("category", "other"), ("timing", "advance"),
                              ("service_period", {"from": "2027-01-15T12:00:00Z", "to": "2027-02-01T00:00:00Z"}),
                              ("unit", "GPU-h"), ("unit_price", "500.00"), ("records", 1), ("records", False)):
            with self.subTest(member=member, value=value):
                self.assertFail(self.edited(lambda inv: inv["lines"][1].update({member: value})),
                                "claim_mismatch", f"lines[1].{member}")

    def test_a_member_added_or_left_out(self):
        self.assertFail(self.edited(lambda inv: inv["lines"][4].update(timing="once")),
                        "claim_mismatch", "lines[4].timing")
        self.assertFail(self.edited(lambda inv: inv["lines"][2].pop("service_period")),
                        "claim_mismatch", "lines[2].service_period")

    def test_the_true_up_line(self):
        self.assertFail(self.edited(lambda inv: inv["lines"][4].update(description="Minimum commitment true-up")),
                        "claim_mismatch", "lines[4].description")
        self.assertFail(self.edited(lambda inv: inv["lines"][4].update(unit_price="347.260")),
                        "claim_mismatch", "lines[4].unit_price")
        self.assertFail(self.edited(lambda inv: inv["lines"][4].update(quantity="1.0")),
                        "claim_mismatch", "lines[4].quantity")

    def test_the_fee_order(self):
        def swap(inv):
            inv["lines"][2], inv["lines"][3] = inv["lines"][3], inv["lines"][2]
        self.assertFail(self.edited(swap), "claim_mismatch", "lines[2].category")

    def test_contract_lines_come_right_after_the_usage_lines(self):
        def usage_last(inv):
            inv["lines"].append(inv["lines"].pop(0))
        self.assertFail(self.edited(usage_last), "claim_mismatch", "lines[0].category")

    def test_an_extra_fee_line(self):
        def extra(inv):
            inv["lines"].insert(4, copy.deepcopy(inv["lines"][3]))
        self.assertFail(self.edited(extra), "claim_mismatch", "lines[4].category")

    def test_drawn_follows_the_rerated_usage(self):
        # The usage line is re-rated from the record (10 GPU-h at 18.5 = 185.00): a usage net of
        # 185.01 with the draw-down and the true-up made to match (185.01, 347.25) is named at
        # the usage line, where the invoice first differs from the records.
        def edit(inv):
            inv["lines"][0].update(net="185.01", gross="185.01")
            inv["lines"][4].update(net="347.25", gross="347.25", unit_price="347.25")
            inv["commitments"][0].update(drawn="185.01", true_up="347.25")
        self.assertFail(self.edited(edit), "claim_mismatch", "lines[0].gross")
        self.assertFail(self.edited(lambda inv: inv["lines"][0].update(net="185.01")),
                        "claim_mismatch", "lines[0].net")

        def not_money(inv):
            inv["lines"][0].update(net="185.0", gross="185.0")
        self.assertFail(self.edited(not_money), "claim_mismatch", "lines[0].gross")
        # Taken as stated (rerate_usage=False), the first edit is consistent in everything else.
        inv = copy.deepcopy(self.invoice)
        edit(inv)
        path = self.write("invoice.json", json.dumps(inv))
        self.assertPass(gv.verify_bundle(FIXTURE_BUNDLE, self.key, path, rerate_usage=False))

    def test_taxes_are_recomputed_with_the_declared_rates(self):
        # 1650.00 × 0.06 = 99.00; 5.32 × 0.125 = 0.665 → 0.66 (half-even).
        def taxed(inv):
            inv["lines"][2].update(tax_name="VAT", tax_rate="0.06", tax="99.00", gross="1749.00")
            inv["lines"][3].update(tax_name="VAT", tax_rate="0.125", tax="0.66", gross="5.98")
            inv.update(tax_total="99.66", total="2787.24")
        self.assertPass(self.edited(taxed))

        def tax_rounded_up(inv):
            taxed(inv)
            inv["lines"][3].update(tax="0.67", gross="5.99")
            inv.update(tax_total="99.67", total="2787.25")
        self.assertFail(self.edited(tax_rounded_up), "claim_mismatch", "lines[3].gross")

        def totals_kept(inv):
            taxed(inv)
            inv.update(tax_total="0.00", total="2687.58")
        self.assertFail(self.edited(totals_kept), "claim_mismatch", "tax_total")

        def above_one(inv):
            inv["lines"][1].update(tax_rate="1.5", tax="750.00", gross="1250.00")
        self.assertFail(self.edited(above_one), "claim_mismatch", "lines[1].tax_rate")

    # the period, the subject, the invoice's form

    def test_a_period_that_splits_a_committed_billing_period(self):
        # Ending at the usage record's start: the record is in no period the invoice covers.
        r = self.edited(lambda inv: inv["period"].update(to="2027-01-20T00:00:00Z"))
        self.assertFail(r, "outside_period", "entry 7")
        r = self.edited(lambda inv: inv["period"].update(to="2027-01-25T00:00:00Z"))
        self.assertFail(r, "claim_mismatch", "period")
        self.assertIn("[2027-01-15T12:00:00Z, 2027-02-01T00:00:00Z)", r.message)
        self.assertIn("C-acme-2027", r.message)

    def test_the_subject_is_the_invoice(self):
        r = self.edited(lambda inv: inv.update(number="INV-000002"))
        self.assertFail(r, "checkpoint_mismatch", "invoice")
        self.assertIn("INV-000001", r.message)

    def test_the_checkpoint_is_the_bundles(self):
        for member, value in (("checkpoint_size", 12), ("checkpoint_root", "A" * 43 + "="),
                              ("log_origin", "test.gpuledger/other")):
            with self.subTest(member=member):
                self.assertFail(self.edited(lambda inv: inv.update({member: value})), "checkpoint_mismatch",
                                "invoice")

    def test_a_failing_bundle_fails_first(self):
        with open(FIXTURE_BUNDLE, "rb") as f:
            lines = f.read().splitlines(keepends=True)
        bundle = self.write("bundle.ndjson", b"".join(lines[:-1]))
        self.invoice["total"] = "1"
        r = self.check(bundle=bundle)
        self.assertFail(r, "truncated")

    def test_malformed_invoices(self):
        for edit, item in ((lambda inv: inv.pop("format"), "invoice.format"),
                           (lambda inv: inv.update(number="INV-1"), "invoice.number"),
                           (lambda inv: inv.update(currency="cny"), "invoice.currency"),
                           (lambda inv: inv["period"].update(to="2027-02-30T00:00:00Z"), "invoice.period"),
                           (lambda inv: inv.update(lines={}), "invoice.lines"),
                           (lambda inv: inv["lines"][1].update(kind="setup"), "invoice.lines[1].kind"),
                           (lambda inv: inv["lines"][1].update(net=500), "invoice.lines[1].net"),
                           (lambda inv: inv["lines"][1].update(tax_rate="0.0"), "invoice.lines[1].tax_rate"),
                           (lambda inv: inv.update(commitments={}), "invoice.commitments")):
            with self.subTest(item=item):
                self.assertFail(self.edited(edit), "malformed", item)
        path = self.write("invoice.json", b'{"format": "gpuledger-invoice/v2", "format": "x"}')
        self.assertFail(gv.verify_bundle(FIXTURE_BUNDLE, self.key, path), "malformed", "invoice")
        path = self.write("invoice.json", b"[]")
        self.assertFail(gv.verify_bundle(FIXTURE_BUNDLE, self.key, path), "malformed", "invoice")


class BillingPeriods(unittest.TestCase):
    """RATING.md, "Contracts", billing periods: the spans as (start, end, full start, full end)."""

    def spans(self, term_from, term_to, period, anchor):
        return [tuple(gv.format_ts(t) for t in (s.start, s.end, s.full_start, s.full_end))
                for s in gv.billing_periods(ts(term_from), ts(term_to), period, anchor)]

    def test_calendar_months(self):
        self.assertEqual(self.spans("2027-01-15T12:00:00Z", "2027-03-10T00:00:00Z", "month", "calendar"), [
            ("2027-01-15T12:00:00Z", "2027-02-01T00:00:00Z", "2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z"),
            ("2027-02-01T00:00:00Z", "2027-03-01T00:00:00Z", "2027-02-01T00:00:00Z", "2027-03-01T00:00:00Z"),
            ("2027-03-01T00:00:00Z", "2027-03-10T00:00:00Z", "2027-03-01T00:00:00Z", "2027-04-01T00:00:00Z"),
        ])
        # A term on the boundaries: whole months, none empty.
        self.assertEqual(len(self.spans("2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z", "month", "calendar")), 12)
        # Across a leap February.
        feb = self.spans("2028-02-10T00:00:00Z", "2028-03-01T00:00:00Z", "month", "calendar")
        self.assertEqual(feb, [("2028-02-10T00:00:00Z", "2028-03-01T00:00:00Z", "2028-02-01T00:00:00Z",
                                "2028-03-01T00:00:00Z")])
        span = gv.billing_periods(ts("2028-02-10T00:00:00Z"), ts("2028-03-01T00:00:00Z"), "month", "calendar")[0]
        self.assertEqual((span.used, span.full), (20 * 86400, 29 * 86400))

    def test_calendar_quarters(self):
        s = self.spans("2027-11-05T00:00:00Z", "2028-11-05T00:00:00Z", "quarter", "calendar")
        self.assertEqual([x[2] for x in s], ["2027-10-01T00:00:00Z", "2028-01-01T00:00:00Z", "2028-04-01T00:00:00Z",
                                             "2028-07-01T00:00:00Z", "2028-10-01T00:00:00Z"])
        self.assertEqual(s[0][:2], ("2027-11-05T00:00:00Z", "2028-01-01T00:00:00Z"))
        self.assertEqual(s[-1], ("2028-10-01T00:00:00Z", "2028-11-05T00:00:00Z", "2028-10-01T00:00:00Z",
                                 "2029-01-01T00:00:00Z"))

    def test_calendar_years(self):
        self.assertEqual(self.spans("2027-06-01T00:00:00Z", "2029-06-01T00:00:00Z", "year", "calendar"), [
            ("2027-06-01T00:00:00Z", "2028-01-01T00:00:00Z", "2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"),
            ("2028-01-01T00:00:00Z", "2029-01-01T00:00:00Z", "2028-01-01T00:00:00Z", "2029-01-01T00:00:00Z"),
            ("2029-01-01T00:00:00Z", "2029-06-01T00:00:00Z", "2029-01-01T00:00:00Z", "2030-01-01T00:00:00Z"),
        ])

    def test_anniversaries_keep_the_day_clamped_to_short_months(self):
        s = self.spans("2028-01-31T08:00:00Z", "2028-05-31T08:00:00Z", "month", "anniversary")
        self.assertEqual([x[0] for x in s], ["2028-01-31T08:00:00Z", "2028-02-29T08:00:00Z", "2028-03-31T08:00:00Z",
                                             "2028-04-30T08:00:00Z"])
        self.assertEqual(s[1], ("2028-02-29T08:00:00Z", "2028-03-31T08:00:00Z", "2028-02-29T08:00:00Z",
                                "2028-03-31T08:00:00Z"))
        self.assertEqual(s[-1][1], "2028-05-31T08:00:00Z")
        # Not a leap year: the 28th; each boundary from term_from, so March is the 31st again.
        s = self.spans("2027-01-31T08:00:00Z", "2027-04-15T00:00:00Z", "month", "anniversary")
        self.assertEqual([x[0] for x in s], ["2027-01-31T08:00:00Z", "2027-02-28T08:00:00Z", "2027-03-31T08:00:00Z"])
        self.assertEqual(s[-1], ("2027-03-31T08:00:00Z", "2027-04-15T00:00:00Z", "2027-03-31T08:00:00Z",
                                 "2027-04-30T08:00:00Z"))
        # Quarters and years from a 30th and a 29 February.
        s = self.spans("2027-11-30T00:00:00Z", "2028-08-01T00:00:00Z", "quarter", "anniversary")
        self.assertEqual([x[0] for x in s], ["2027-11-30T00:00:00Z", "2028-02-29T00:00:00Z", "2028-05-30T00:00:00Z"])
        s = self.spans("2028-02-29T12:00:00Z", "2030-03-01T00:00:00Z", "year", "anniversary")
        self.assertEqual([x[0] for x in s], ["2028-02-29T12:00:00Z", "2029-02-28T12:00:00Z", "2030-02-28T12:00:00Z"])

    def test_a_boundary_past_year_9999(self):
        s = gv.billing_periods(ts("9999-06-01T00:00:00Z"), ts("9999-12-31T23:59:59Z"), "year", "calendar")
        self.assertEqual(len(s), 1)
        self.assertEqual(s[0].full, 365 * 86400)  # 9999 is not a leap year; the boundary is 10000-01-01


class Rounding(unittest.TestCase):
    """RATING.md, "Exact amounts and the one rounding rule"."""

    def test_half_even(self):
        r = gv.round_half_even
        for x, places, want in (("0.025", 2, "0.02"), ("0.035", 2, "0.04"), ("2.5", 0, "2"), ("3.5", 0, "4"),
                                ("0.5", 0, "0"), ("1.0005", 3, "1"), ("1.0015", 3, "1.002"),
                                ("0.0000005", 6, "0"), ("0.0000015", 6, "0.000002"), ("5.3225806", 2, "5.32"),
                                ("532.2580645", 2, "532.26"), ("0.0251", 2, "0.03")):
            with self.subTest(x=x, places=places):
                self.assertEqual(r(Fraction(x), places), Fraction(want))
        self.assertEqual(r(Fraction(-5, 2), 0), -2)

    def test_spellings(self):
        self.assertEqual(gv.fixed_str(Fraction(148), 2), "148.00")
        self.assertEqual(gv.fixed_str(Fraction("0.5"), 3), "0.500")
        self.assertEqual(gv.fixed_str(Fraction(185), 0), "185")
        self.assertEqual(gv.fixed_str(Fraction(0), 2), "0.00")
        self.assertEqual(gv.canonical_str(Fraction("10.50")), "10.5")
        self.assertEqual(gv.canonical_str(Fraction(3100)), "3100")
        self.assertEqual(gv.canonical_str(Fraction(0)), "0")
        self.assertEqual(gv.canonical_str(gv.round_half_even(Fraction(33, 62), 6)), "0.532258")
        self.assertEqual(gv.canonical_str(gv.round_half_even(Fraction(1, 2), 6)), "0.5")

    def test_minor_units(self):
        self.assertEqual([gv.minor_units(c) for c in ("CNY", "USD", "EUR", "JPY", "KRW", "BHD", "KWD", "OMR", "JOD",
                                                      "TND", "IQD", "LYD")],
                         [2, 2, 2, 0, 0, 3, 3, 3, 3, 3, 3, 3])
        # crates/core/src/rating.rs also gives these 0 digits.
        self.assertEqual([gv.minor_units(c) for c in ("VND", "CLP", "ISK", "UGX")], [0, 0, 0, 0])


def contract(term_from, term_to, fees, commitment=None, currency="CNY", period="month", anchor="calendar",
             name="C-1", region="cn-east"):
    body = {"tenant": "t", "contract": name, "currency": currency, "region": region, "term_from": term_from,
            "term_to": term_to, "billing_period": period, "billing_anchor": anchor,
            "fees": [producer.fee(n, a, t) for n, a, t in fees]}
    if commitment is not None:
        body["commitment"] = commitment
    return body


# 2027-01-16T12:00:00Z to the end of January is 15.5 of its 31 days: a share of exactly 1/2.
HALF_JANUARY = "2027-01-16T12:00:00Z"
JANUARY = (ts("2027-01-01T00:00:00Z"), ts("2027-02-01T00:00:00Z"))


class Charges(unittest.TestCase):
    """RATING.md, "Contracts": fees, anchors and commitments."""

    def test_the_fixture_scenario(self):
        c = contract("2027-01-15T12:00:00Z", "2028-01-15T12:00:00Z",
                     [("rent", "3100", "advance"), ("IPs", "10", "arrears"), ("setup", "500", "once")], "1000")
        ch = gv.contract_charges(c, *JANUARY)
        self.assertEqual([(f.fee, f.net) for f in ch.fees],
                         [(2, Fraction(500)), (0, Fraction(1650)), (1, Fraction("5.32"))])
        self.assertEqual(ch.fees[1].share, Fraction(33, 62))
        self.assertEqual((ch.committed, ch.split), (Fraction("532.26"), None))
        # February: the whole month, nothing once.
        feb = gv.contract_charges(c, ts("2027-02-01T00:00:00Z"), ts("2027-03-01T00:00:00Z"))
        self.assertEqual([(f.fee, f.net, f.share) for f in feb.fees], [(0, 3100, 1), (1, 10, 1)])
        self.assertEqual(feb.committed, 1000)
        # Half of January: the committed January is split; the advance fee is still billed there.
        mid = gv.contract_charges(c, ts("2027-01-01T00:00:00Z"), ts("2027-01-20T00:00:00Z"))
        self.assertEqual((mid.split.start, mid.split.end), (ts("2027-01-15T12:00:00Z"), ts("2027-02-01T00:00:00Z")))
        self.assertEqual([f.fee for f in mid.fees], [2, 0])
        self.assertIsNone(mid.committed)

    def test_a_fee_whose_exact_value_is_a_tie(self):
        c = contract(HALF_JANUARY, "2027-06-01T00:00:00Z",
                     [("a", "0.05", "advance"), ("b", "0.07", "advance"), ("c", "0.0125", "arrears")])
        ch = gv.contract_charges(c, *JANUARY)
        # 0.025 → 0.02, 0.035 → 0.04, 0.00625 → 0.01 (not a tie)
        self.assertEqual([f.net for f in ch.fees], [Fraction("0.02"), Fraction("0.04"), Fraction("0.01")])
        self.assertEqual([f.share for f in ch.fees], [Fraction(1, 2)] * 3)

    def test_jpy_has_no_minor_digits(self):
        c = contract(HALF_JANUARY, "2027-06-01T00:00:00Z",
                     [("a", "5", "advance"), ("b", "3", "arrears"), ("c", "1001", "advance")], "777",
                     currency="JPY")
        ch = gv.contract_charges(c, *JANUARY)
        # 2.5 → 2, 1.5 → 2, 500.5 → 500; committed 388.5 → 388
        self.assertEqual([f.net for f in ch.fees], [2, 2, 500])
        self.assertEqual(ch.committed, 388)

    def test_three_minor_digits(self):
        c = contract(HALF_JANUARY, "2027-06-01T00:00:00Z", [("a", "0.0025", "advance"), ("b", "0.0035", "advance")],
                     currency="BHD")
        self.assertEqual([f.net for f in gv.contract_charges(c, *JANUARY).fees], [Fraction("0.001"), Fraction("0.002")])

    def test_anchors(self):
        c = contract("2027-01-01T00:00:00Z", "2027-04-01T00:00:00Z",
                     [("adv", "30", "advance"), ("arr", "20", "arrears"), ("once", "5", "once")])
        # An invoice of 10 January to 10 February: January's arrears (anchor 31 January 23:59:59)
        # and February's advance (1 February); the once fee's anchor (1 January) is outside.
        ch = gv.contract_charges(c, ts("2027-01-10T00:00:00Z"), ts("2027-02-10T00:00:00Z"))
        self.assertEqual([(f.fee, gv.format_ts(f.start)) for f in ch.fees],
                         [(1, "2027-01-01T00:00:00Z"), (0, "2027-02-01T00:00:00Z")])
        # An invoice ending one second earlier leaves January's arrears to the next.
        ch = gv.contract_charges(c, ts("2027-01-10T00:00:00Z"), ts("2027-01-31T23:59:59Z"))
        self.assertEqual(ch.fees, [])
        # A once fee is its amount, its span the term, its share 1.
        ch = gv.contract_charges(c, *JANUARY)
        self.assertEqual([(f.fee, f.share, f.net) for f in ch.fees], [(2, 1, 5), (0, 1, 30), (1, 1, 20)])
        self.assertEqual((ch.fees[0].start, ch.fees[0].end), (ts("2027-01-01T00:00:00Z"), ts("2027-04-01T00:00:00Z")))
        # Outside the term: nothing.
        after = gv.contract_charges(c, ts("2027-04-01T00:00:00Z"), ts("2027-05-01T00:00:00Z"))
        self.assertEqual((after.fees, after.committed, after.split), ([], None, None))

    def test_a_quarter_pools_its_months(self):
        c = contract("2027-01-15T12:00:00Z", "2027-03-10T00:00:00Z", [("rent", "3100", "advance"),
                                                                      ("IPs", "10", "arrears")], "1000")
        q = gv.contract_charges(c, ts("2027-01-01T00:00:00Z"), ts("2027-04-01T00:00:00Z"))
        self.assertEqual(len(q.fees), 6)
        # 532.26 + 1000.00 + 1000 × 9/31 = 290.3225… → 290.32
        self.assertEqual(q.committed, Fraction("532.26") + 1000 + Fraction("290.32"))
        # March: rent 3100 × 9/31 = 900, IPs 2.903… → 2.90
        self.assertEqual([f.net for f in q.fees[4:]], [900, Fraction("2.90")])

    def test_without_a_commitment_any_period(self):
        c = contract("2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z", [("rent", "100", "advance")])
        ch = gv.contract_charges(c, ts("2027-01-01T00:00:00Z"), ts("2027-01-16T00:00:00Z"))
        self.assertEqual((len(ch.fees), ch.split, ch.committed), (1, None, None))


class ContractInvoices(LogBundleTestCase):
    """Invoices built here, by hand, over a log of the test producer: two contracts of tenant t
    (C-A: monthly, calendar, 16 January 12:00 to 10 March 2027, rent 3100 in advance, IPs 10 in
    arrears, setup 500 once, commitment 1000; C-B: quarterly by anniversary from 10 March 2027
    for a year, support 300 in advance, no commitment), and one of tenant u that t's invoices
    never show."""

    ORIGIN = "gpuledger.test/contract-lines"
    NUMBER = "INV-000004"

    def setUp(self):
        super().setUp()
        self.lk = producer.Key.from_byte(0x93)
        log = self.log = producer.Log(self.lk, self.ORIGIN)
        at = "2026-12-01T00:00:00Z"
        log.policy(at)
        log.tenant("t", at)
        log.tenant("u", at)
        log.contract("t", "C-B", "2027-03-10T00:00:00Z", "2028-03-10T00:00:00Z", at,
                     fees=[producer.fee("Support", "300", "advance", "support")],
                     billing_period="quarter", billing_anchor="anniversary", region="cn-north")
        log.contract("t", "C-A", HALF_JANUARY, "2027-03-10T00:00:00Z", at,
                     fees=[producer.fee("Rent", "3100"), producer.fee("IPs", "10", "arrears", "networking"),
                           producer.fee("Setup", "500", "once", "support")], commitment="1000")
        log.contract("u", "C-U", "2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z", at,
                     fees=[producer.fee("Other", "1")], commitment="5")

    def run_invoice(self, inv, rerate=True):
        size = len(self.log.entries)
        context = [e.index for e in self.log.entries]
        lines = producer.make_bundle(self.log, size, context, [], {"invoice": self.NUMBER})
        bundle = self.write("bundle.ndjson", producer.bundle_bytes(lines))
        path = self.write("invoice.json", json.dumps(inv, ensure_ascii=False))
        return gv.verify_bundle(bundle, gv.parse_verifier_key(self.log.verifier_key()), path, rerate_usage=rerate)

    def invoice(self, period, lines, commitments, totals, currency="CNY"):
        size = len(self.log.entries)
        inv = {"format": "gpuledger-invoice/v2", "number": self.NUMBER, "tenant": "t",
               "period": {"from": period[0], "to": period[1]}, "currency": currency,
               "issued_at": "2027-04-01T01:00:00Z", "log_origin": self.ORIGIN, "checkpoint_size": size,
               "checkpoint_root": producer.b64(self.log.root(size)),
               "issuer": {"name": self.ORIGIN, "address": []}, "bill_to": {"tenant": "t", "name": "t", "address": []},
               "payment_terms_days": 30, "due_at": "2027-05-01T01:00:00Z", "lines": lines,
               "net_total": totals[0], "tax_total": totals[1], "total": totals[2]}
        if commitments is not None:
            inv["commitments"] = commitments
        return inv

    @staticmethod
    def fee(description, contract, category, timing, service, quantity, unit_price, net, region="cn-east"):
        return {"kind": "fee", "description": description, "region": region, "contract": contract,
                "category": category, "timing": timing, "service_period": {"from": service[0], "to": service[1]},
                "quantity": quantity, "unit": "period", "unit_price": unit_price, "net": net, "tax_rate": "0",
                "tax": "0.00" if "." in net else "0", "gross": net, "records": 0}

    @staticmethod
    def true_up(contract, net, unit_price, region="cn-east"):
        return {"kind": "true_up", "description": f"Minimum commitment true-up, contract {contract}",
                "region": region, "contract": contract, "quantity": "1", "unit": "period",
                "unit_price": unit_price, "net": net, "tax_rate": "0", "tax": "0.00", "gross": net, "records": 0}

    def quarter(self):
        """The first quarter of 2027, no usage: setup 500.00; January (half): rent 1550.00, IPs
        5.00; February: 3100.00, 10.00; March (9 of 31 days): 3100 × 9/31 = 900.00, 10 × 9/31 =
        2.903… → 2.90; committed 500.00 + 1000.00 + 290.32 = 1790.32, drawn 0 (no usage line),
        true-up 1790.32; then C-B's support for [10 March, 10 June) in advance: 300.00."""
        term_a = ("2027-01-16T12:00:00Z", "2027-03-10T00:00:00Z")
        jan = ("2027-01-16T12:00:00Z", "2027-02-01T00:00:00Z")
        feb = ("2027-02-01T00:00:00Z", "2027-03-01T00:00:00Z")
        mar = ("2027-03-01T00:00:00Z", "2027-03-10T00:00:00Z")
        lines = [
            self.fee("Setup", "C-A", "support", "once", term_a, "1", "500", "500.00"),
            self.fee("Rent", "C-A", "compute", "advance", jan, "0.5", "3100", "1550.00"),
            self.fee("IPs", "C-A", "networking", "arrears", jan, "0.5", "10", "5.00"),
            self.fee("Rent", "C-A", "compute", "advance", feb, "1", "3100", "3100.00"),
            self.fee("IPs", "C-A", "networking", "arrears", feb, "1", "10", "10.00"),
            self.fee("Rent", "C-A", "compute", "advance", mar, "0.290323", "3100", "900.00"),
            self.fee("IPs", "C-A", "networking", "arrears", mar, "0.290323", "10", "2.90"),
            self.true_up("C-A", "1790.32", "1790.32"),
            self.fee("Support", "C-B", "support", "advance", ("2027-03-10T00:00:00Z", "2027-06-10T00:00:00Z"), "1",
                     "300", "300.00", region="cn-north"),
        ]
        commitments = [{"contract": "C-A", "committed": "1790.32", "drawn": "0.00", "true_up": "1790.32"}]
        return self.invoice(("2027-01-01T00:00:00Z", "2027-04-01T00:00:00Z"), lines, commitments,
                            ("8158.22", "0.00", "8158.22"))

    def test_a_quarter_of_two_contracts_without_usage(self):
        r = self.run_invoice(self.quarter())
        self.assertPass(r)
        self.assertEqual(r.summary["invoice"]["contract_lines"], 9)
        self.assertEqual(sorted(r.summary["invoice"]["contracts"]), ["C-A", "C-B"])

    def test_drawn_without_usage_is_an_amount_with_the_minor_digits(self):
        inv = self.quarter()
        inv["commitments"][0]["drawn"] = "0"
        self.assertFail(self.run_invoice(inv), "claim_mismatch", "commitments")

    def test_contracts_in_order_of_term(self):
        inv = self.quarter()
        inv["lines"].insert(0, inv["lines"].pop())
        self.assertFail(self.run_invoice(inv), "claim_mismatch", "lines[0].contract")

    def test_usage_lines_first_adjustments_last(self):
        inv = self.quarter()
        usage = {"kind": "gpu", "description": "GPU compute, H100, cn-east, on-demand", "region": "cn-east",
                 "gpu_model": "H100", "class": "on_demand", "quantity": "100", "unit": "GPU-h",
                 "gpu_seconds": "360000", "unit_price": "18", "net": "1800.00", "tax_rate": "0", "tax": "0.00",
                 "gross": "1800.00", "records": 3}
        adjustment = dict(usage, net="18.00", gross="18.00", quantity="1", gpu_seconds="3600", records=1,
                          adjustment_for={"from": "2026-12-01T00:00:00Z", "to": "2027-01-01T00:00:00Z"})
        inv["lines"] = [usage] + inv["lines"] + [adjustment]
        # drawn 1800.00: the true-up is 1790.32 - 1800.00 < 0, so no true-up line; the adjustment
        # line draws nothing down. These usage lines have no records behind them: taken as
        # stated (rerate=False; test_usage_rating.py re-rates logged ones).
        del inv["lines"][8]
        inv["commitments"][0].update(drawn="1800.00", true_up="0.00")
        inv.update(net_total="8185.90", total="8185.90")
        self.assertPass(self.run_invoice(inv, rerate=False))
        moved = copy.deepcopy(inv)
        moved["lines"].insert(1, moved["lines"].pop())
        self.assertFail(self.run_invoice(moved, rerate=False), "claim_mismatch", "lines[1].adjustment_for")
        kept = copy.deepcopy(inv)
        kept["lines"].insert(8, self.true_up("C-A", "0.00", "0"))
        self.assertFail(self.run_invoice(kept, rerate=False), "claim_mismatch", "lines[8].category")
        # Re-rated, the bundle's records (none) make no usage line.
        self.assertFail(self.run_invoice(inv), "claim_mismatch", "lines[0].category")

    def test_a_period_that_splits_a_committed_month(self):
        inv = self.quarter()
        inv["period"]["to"] = "2027-02-15T00:00:00Z"
        r = self.run_invoice(inv)
        self.assertFail(r, "claim_mismatch", "period")
        self.assertIn("[2027-02-01T00:00:00Z, 2027-03-01T00:00:00Z) of contract C-A", r.message)

    def test_an_invoice_in_another_currency_has_no_contract_lines(self):
        inv = self.invoice(("2027-01-01T00:00:00Z", "2027-04-01T00:00:00Z"), [], None, ("0", "0", "0"),
                           currency="JPY")
        r = self.run_invoice(inv)
        self.assertPass(r)
        self.assertEqual(r.summary["invoice"]["contract_lines"], 0)
        inv = self.invoice(("2027-01-01T00:00:00Z", "2027-04-01T00:00:00Z"), [], None, ("0.00", "0.00", "0.00"),
                           currency="JPY")
        self.assertFail(self.run_invoice(inv), "claim_mismatch", "net_total")

    def test_a_whole_month_in_jpy(self):
        # A JPY contract of t after C-B's term.
        self.log.contract("t", "C-J", "2028-06-10T00:00:00Z", "2028-08-01T00:00:00Z", "2026-12-01T00:00:00Z",
                          fees=[producer.fee("Rent", "1001"), producer.fee("IPs", "5", "arrears", "networking"),
                                producer.fee("Storage", "15", "arrears", "storage")],
                          commitment="777", currency="JPY")
        # June 2028: 21 of 30 days used, 0.7: rent 700.7 → 701, IPs 3.5 → 4 and storage 10.5 → 10
        # (ties, to the even yen), committed 543.9 → 544.
        june = ("2028-06-10T00:00:00Z", "2028-07-01T00:00:00Z")
        lines = [self.fee("Rent", "C-J", "compute", "advance", june, "0.7", "1001", "701"),
                 self.fee("IPs", "C-J", "networking", "arrears", june, "0.7", "5", "4"),
                 self.fee("Storage", "C-J", "storage", "arrears", june, "0.7", "15", "10"),
                 dict(self.true_up("C-J", "544", "544"), tax="0")]
        commitments = [{"contract": "C-J", "committed": "544", "drawn": "0", "true_up": "544"}]
        inv = self.invoice(("2028-06-01T00:00:00Z", "2028-07-01T00:00:00Z"), lines, commitments,
                           ("1259", "0", "1259"), currency="JPY")
        self.assertPass(self.run_invoice(inv))
        inv["lines"][0]["net"] = inv["lines"][0]["gross"] = "701.00"
        self.assertFail(self.run_invoice(inv), "claim_mismatch", "lines[0].gross")

    def test_another_tenants_contracts_are_not_t_s(self):
        inv = self.quarter()
        inv["tenant"] = "u"
        r = self.run_invoice(inv)
        # u's contract bills 1 + a true-up of 5 × (31 + 28 + 31 days): the lines differ from t's.
        self.assertFail(r, "claim_mismatch", "lines[0].category")


if __name__ == "__main__":
    unittest.main()
