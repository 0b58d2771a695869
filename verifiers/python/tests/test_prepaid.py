"""Prepaid balances: the ledger-written `prepayment` entry (PROTOCOL.md section 5.20), the
prepayment rules of section 6.7 that a bundle rechecks, and what an invoice draws on its
tenant's lots (docs/RATING.md, "Prepaid balances"), recomputed by `bundle --invoice`.

The draw rule, for an invoice of tenant T in currency C with total G, issued at the instant I
(its `issued_at`) at checkpoint size S: the lots of T in C logged below S that had not expired
when it was issued (`expires_at` absent or I < `expires_at`, strictly) and have something left
after the draws of T's earlier invoice_issued entries (each drawing by the same rule with its own
total and checkpoint_size, issued at its entry's `received_at`), grants before purchases,
earliest expiry first (none last), then log order; each gives min(what is left of it, what is
left to pay), from max(G, 0). The figures below are worked
out by hand, not with the verifier's arithmetic.

Body rules are `leaf_invalid`, with the ledger's code and field in the message; the admission
rules (`unknown_tenant`, `reference_used`, `invalid_field` at `body.expires_at`) are reported
with their own codes."""

import copy
import io
import json
import os
import unittest
from contextlib import redirect_stdout
from fractions import Fraction

from support import LogBundleTestCase, REPO, RustInvoiceFixture, VerifierTestCase, changed, gv, producer

FIXTURE = os.path.join(REPO, "tests", "fixtures", "prepaid")
FIXTURE_INVOICE = os.path.join(FIXTURE, "invoice.json")
FIXTURE_BUNDLE = os.path.join(FIXTURE, "bundle.ndjson")
FIXTURE_KEY = os.path.join(FIXTURE, "verifier_key.txt")

LOGGED = "2026-10-02T00:00:00Z"  # when the tests' lots arrive, after the tenants' registrations
PERIOD = ("2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z")  # the invoice checked
ISSUED = "2027-01-01T01:00:00Z"  # its issued_at
NUMBER = "INV-000009"


def ts(text):
    return gv.parse_timestamp(text)


def body(**changes):
    """A valid prepayment body of tenant t (section 5.20's example), with `changes` applied (a
    value of ... removes the member)."""
    out = {"tenant": "t", "reference": "TOPUP-2027-0042", "source": "purchase", "currency": "CNY",
           "amount": "5000.00", "expires_at": "2028-01-01T00:00:00Z"}
    changed(out, changes)
    return out


class PrepaymentRules(LogBundleTestCase):
    """Admission in a bundle. The base log: 0 log_policy, 1 tenant_registered t, 2
    tenant_registered u; the tests append lots (and invoices) from LOGGED on. `bundle()` holds
    every entry, as an invoice's bundle (all context)."""

    ORIGIN = "gpuledger.test/prepayments"

    def setUp(self):
        super().setUp()
        self.lk = producer.Key.from_byte(0x95)
        log = self.log = producer.Log(self.lk, self.ORIGIN)
        log.policy("2026-10-01T00:00:00Z")      # 0
        log.tenant("t", "2026-10-01T00:00:00Z")  # 1
        log.tenant("u", "2026-10-01T00:00:00Z")  # 2

    def lot(self, reference="TOPUP-1", amount="100.00", tenant="t", received_at=LOGGED, **kw):
        return self.log.prepayment(tenant, reference, amount, received_at, **kw)

    def test_reasons_and_kinds_are_known(self):
        for kinds in (gv.KINDS, gv.LEDGER_KINDS, gv.ROLE_KINDS["ledger"], gv.TENANT_LEDGER_KINDS):
            self.assertIn("prepayment", kinds)
        self.assertNotIn("prepayment", gv.RECORD_KINDS)
        self.assertNotIn("prepayment", gv.PRICE_KINDS)
        for reason in ("reference_used", "invalid_field", "unknown_tenant"):
            self.assertIn(reason, gv.ADMISSION_REASONS)
        self.assertEqual(gv.PREPAYMENT_SOURCES, ("grant", "purchase"))

    def test_lots_pass(self):
        self.lot()
        self.lot("TOPUP-2", "0.01", source="grant", expires_at="2026-10-02T00:00:01Z")
        self.lot("TOPUP-3", "1000000000000", currency="JPY")
        r = self.bundle()
        self.passes(r)
        self.assertEqual(r[0].summary["entries_by_kind"]["prepayment"], 3)

    def test_the_section_5_20_example_passes(self):
        self.log.ledger("prepayment", body(tenant="t"), "2027-06-01T00:00:00Z")
        self.passes(self.bundle())

    def test_unknown_tenant(self):
        i = self.lot(tenant="v")
        self.refused(self.bundle(), "unknown_tenant", i, "body.tenant", says="'v'")

    def test_tenant_registered_after_the_lot(self):
        i = self.lot(tenant="v")
        self.log.tenant("v", "2026-10-03T00:00:00Z")
        self.refused(self.bundle(), "unknown_tenant", i, "body.tenant")

    def test_a_reference_used_twice(self):
        first = self.lot()
        i = self.lot(amount="5.00", source="grant", received_at="2026-10-03T00:00:00Z")
        self.refused(self.bundle(), "reference_used", i, "body.reference",
                     says=f"a prepayment of t already carries 'TOPUP-1' (entry {first})")

    def test_a_reference_is_a_tenants_own(self):
        # The same reference for another tenant, or another reference for the same: both pass.
        self.lot()
        self.lot(tenant="u")
        self.lot("topup-1")  # references compare byte for byte
        self.passes(self.bundle())

    def test_a_payments_external_reference_is_another_namespace(self):
        # Section 6.7: "no earlier prepayment entry of the same tenant has the same reference";
        # a payment's external_reference does not count (nor the other way round).
        self.log.invoice("INV-000001", "t", "2026-10-01T00:00:00Z", "2026-10-02T00:00:00Z", 3, LOGGED)
        self.log.ledger("payment", {"tenant": "t", "invoice": "INV-000001", "currency": "CNY", "amount": "1",
                                    "note": "", "external_reference": "BANK-7"}, LOGGED)
        self.lot("BANK-7")
        self.passes(self.bundle())

    def test_expires_at_not_after_received_at(self):
        for expires_at, says in (("2026-10-02T00:00:00Z", "is not after the entry's received_at 2026-10-02T00:00:00Z"),
                                 ("2026-10-01T23:59:59Z", "2026-10-01T23:59:59Z is not after"),
                                 ("2000-01-01T00:00:00Z", "a lot is never logged expired")):
            with self.subTest(expires_at):
                self.setUp()
                i = self.lot(expires_at=expires_at)
                self.refused(self.bundle(), "invalid_field", i, "body.expires_at", says=says)
        self.setUp()
        self.lot(expires_at="2026-10-02T00:00:01Z")
        self.passes(self.bundle())

    def test_the_order_of_the_rules(self):
        # unknown_tenant, reference_used, then the expiry: each case breaks every rule from its own
        # on (a tenant that is not registered has no earlier lot of the bundle: it was refused).
        i = self.lot(tenant="v", expires_at=LOGGED)
        self.refused(self.bundle(), "unknown_tenant", i, "body.tenant")
        self.setUp()
        self.lot()
        i = self.lot(expires_at=LOGGED)
        self.refused(self.bundle(), "reference_used", i, "body.reference")

    def test_a_lot_signed_by_a_node_key(self):
        # A ledger kind (section 6.1): signed by the log key, signer "ledger".
        i = self.log.append("prepayment", "node-a", producer.Key.from_byte(0x96), body(), LOGGED)
        self.refused(self.bundle(), "key_not_allowed", i)

    def test_an_invoice_bundle_holds_the_tenants_lots(self):
        # Section 14: an invoice's context holds its tenant's prepayment entries, not another
        # tenant's; a certificate's context holds none.
        i = self.lot()
        j = self.lot(tenant="u")
        self.assert_invoice_context_is_the_tenants(i, j, NUMBER)

    def test_another_tenants_lot_in_an_invoice_bundle(self):
        # Nothing of another tenant: u's lot in t's bundle, without u's registration (which a
        # bundle of t never holds), fails as u's contract would: unknown_tenant.
        self.lot()
        j = self.lot(tenant="u")
        size = len(self.log.entries)
        ctx = sorted(producer.context_for(self.log, size, [], "t", invoice=True) + [j])
        lines = producer.make_bundle(self.log, size, ctx, [], {"invoice": NUMBER})
        r = self.run_bundle(lines, self.log.verifier_key())
        self.refused((r, lines), "unknown_tenant", j, "body.tenant", says="'u'")

    def test_another_tenants_contract_fails_the_same_way(self):
        j = self.log.contract("u", "C-U", "2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z", LOGGED,
                              fees=[producer.fee("Rent", "1")])
        size = len(self.log.entries)
        ctx = sorted(producer.context_for(self.log, size, [], "t", invoice=True) + [j])
        lines = producer.make_bundle(self.log, size, ctx, [], {"invoice": NUMBER})
        self.refused((self.run_bundle(lines, self.log.verifier_key()), lines), "unknown_tenant", j, "body.tenant")

    def test_another_tenants_lot_in_a_certificate_bundle(self):
        i = self.lot()
        j = self.lot(tenant="u")
        size = len(self.log.entries)
        cert = producer.make_certificate(self.log, size, "t", *producer.PERIOD, records=[])
        ctx = sorted(producer.context_for(self.log, size, [], "t") + [j])
        lines = producer.make_bundle(self.log, size, ctx, [], {"certificate": cert["id"]})
        r = self.run_certificate(cert, lines, self.log.verifier_key())
        self.refused((r, lines), "unknown_tenant", j, "body.tenant")
        # The subject tenant's own lot in a certificate's bundle is accepted (as its contracts).
        ctx = sorted(producer.context_for(self.log, size, [], "t") + [i])
        lines = producer.make_bundle(self.log, size, ctx, [], {"certificate": cert["id"]})
        self.assertPass(self.run_certificate(cert, lines, self.log.verifier_key()))

    def test_the_command_line_names_reference_used(self):
        self.lot()
        self.lot()
        out = self.cli_fails_on_whole_log(NUMBER)
        self.assertTrue(out.startswith("FAIL: reference_used: entry 4 (bundle line 6): body.reference:"),
                        out)

    # bodies (section 5.20): every failure is leaf_invalid, the ledger's code and field in the message

    def bad_body(self, b, code, field):
        i = self.log.ledger("prepayment", b, LOGGED)
        r = self.refused(self.bundle(), "leaf_invalid", i)
        self.assertIn(f"{code}: {field}:", r.message)

    def test_each_row_of_the_table(self):
        cases = [
            (body(tenant="a b"), "invalid_field", "body.tenant"),
            (body(reference=""), "invalid_field", "body.reference"),
            (body(reference=" TOPUP"), "invalid_field", "body.reference"),
            (body(reference="x" * 129), "invalid_field", "body.reference"),
            (body(reference="TOP\tUP"), "invalid_field", "body.reference"),
            (body(source="gift"), "invalid_field", "body.source"),
            (body(currency="cny"), "invalid_field", "body.currency"),
            (body(amount="0"), "quantity_out_of_range", "body.amount"),
            (body(amount="0.00"), "quantity_out_of_range", "body.amount"),
            (body(amount="1000000000000.01"), "quantity_out_of_range", "body.amount"),
            (body(amount="-5"), "negative_quantity", "body.amount"),
            (body(amount="5.001"), "invalid_field", "body.amount"),
            (body(amount="5", currency="JPY", expires_at="2027-01-01"), "invalid_field", "body.expires_at"),
            (body(amount="5.0", currency="JPY"), "invalid_field", "body.amount"),
            (body(note="x"), "malformed", "body.note"),
            (body(expires_at=None), "malformed", "body.expires_at"),
        ]
        for b, code, field in cases:
            with self.subTest(b):
                self.setUp()
                self.bad_body(b, code, field)


class PrepaymentBodies(unittest.TestCase):
    """check_envelope on prepayment bodies: each rule's code and field (section 5.20)."""

    def code(self, b):
        env = {"v": 3, "kind": "prepayment", "signer": "ledger", "key_id": "34750f98bd59fcfc", "seq": 1,
               "body": b, "sig": "A" * 86 + "=="}
        try:
            gv.check_envelope(env, "gpuledger.test/prepayments")
        except gv.FieldError as e:
            return e.code, e.field
        return "PASS"

    def test_codes(self):
        cases = [
            (body(), "PASS"),
            (body(expires_at=...), "PASS"),
            (body(source="grant"), "PASS"),
            (body(reference="x" * 128), "PASS"),
            (body(reference="\u4e2d" * 42 + "xx"), "PASS"),  # 128 bytes
            (body(reference="\u5145\u503c 2027/03 #42"), "PASS"),  # inner spaces, any script
            (body(amount="5000"), "PASS"),  # fewer digits than the minor unit
            (body(amount="5000.5"), "PASS"),
            (body(amount="0.01"), "PASS"),
            (body(amount="1000000000000"), "PASS"),
            (body(amount="1000000000000.00"), "PASS"),
            (body(amount="5000", currency="JPY"), "PASS"),
            (body(amount="5000.125", currency="BHD"), "PASS"),
            (body(amount="5000.12", currency="XYZ"), "PASS"),  # an unlisted currency: 2 digits
            # members (serde first: deny_unknown_fields, strings, no null)
            (body(tenant=...), ("malformed", "body.tenant")),
            (body(reference=...), ("malformed", "body.reference")),
            (body(source=...), ("malformed", "body.source")),
            (body(currency=...), ("malformed", "body.currency")),
            (body(amount=...), ("malformed", "body.amount")),
            (body(lot="x"), ("malformed", "body.lot")),
            (body(amount=5000), ("malformed", "body.amount")),
            (body(expires_at=None), ("malformed", "body.expires_at")),
            (body(reference=None), ("malformed", "body.reference")),
            # tenant
            (body(tenant="a b"), ("invalid_field", "body.tenant")),
            (body(tenant="ledger"), ("invalid_field", "body.tenant")),
            # reference: 1 to 128 bytes, no control characters, no white space around it
            (body(reference=""), ("invalid_field", "body.reference")),
            (body(reference="x" * 129), ("invalid_field", "body.reference")),
            (body(reference="\u4e2d" * 43), ("invalid_field", "body.reference")),  # 129 bytes
            (body(reference=" TOPUP"), ("invalid_field", "body.reference")),
            (body(reference="TOPUP "), ("invalid_field", "body.reference")),
            (body(reference="TOPUP\u3000"), ("invalid_field", "body.reference")),
            (body(reference="TOP\nUP"), ("invalid_field", "body.reference")),
            (body(reference="TOP\x7fUP"), ("invalid_field", "body.reference")),
            (body(reference="TOP\u0085UP"), ("invalid_field", "body.reference")),
            # source
            (body(source="Grant"), ("invalid_field", "body.source")),
            (body(source="top-up"), ("invalid_field", "body.source")),
            (body(source=""), ("invalid_field", "body.source")),
            # currency
            (body(currency="cny"), ("invalid_field", "body.currency")),
            (body(currency="CNYX"), ("invalid_field", "body.currency")),
            # amount: the payment.amount form, above 0, at most 10^12, the minor digits
            (body(amount="0"), ("quantity_out_of_range", "body.amount")),
            (body(amount="0.0000"), ("quantity_out_of_range", "body.amount")),
            (body(amount="0.000", currency="CNY"), ("quantity_out_of_range", "body.amount")),
            (body(amount="1000000000000.01"), ("quantity_out_of_range", "body.amount")),
            (body(amount="1000000000001"), ("quantity_out_of_range", "body.amount")),
            (body(amount="-1"), ("negative_quantity", "body.amount")),
            (body(amount="1e3"), ("invalid_field", "body.amount")),
            (body(amount="01"), ("invalid_field", "body.amount")),
            (body(amount="1."), ("invalid_field", "body.amount")),
            (body(amount=".5"), ("invalid_field", "body.amount")),
            (body(amount="1.00001"), ("invalid_field", "body.amount")),
            (body(amount="5000.001"), ("invalid_field", "body.amount")),
            (body(amount="5000.100"), ("invalid_field", "body.amount")),  # the digits as written
            (body(amount="5000.0", currency="JPY"), ("invalid_field", "body.amount")),
            (body(amount="5000.1", currency="KRW"), ("invalid_field", "body.amount")),
            (body(amount="5000.1250", currency="BHD"), ("invalid_field", "body.amount")),
            # expires_at
            (body(expires_at="2028-01-01"), ("invalid_field", "body.expires_at")),
            (body(expires_at="2027-02-30T00:00:00Z"), ("invalid_field", "body.expires_at")),
            (body(expires_at=""), ("invalid_field", "body.expires_at")),
            # the order of the table
            (body(tenant="a b", reference=""), ("invalid_field", "body.tenant")),
            (body(reference="", source="x"), ("invalid_field", "body.reference")),
            (body(source="x", currency="x"), ("invalid_field", "body.source")),
            (body(currency="x", amount="0"), ("invalid_field", "body.currency")),
            (body(amount="0", expires_at="x"), ("quantity_out_of_range", "body.amount")),
            (body(amount="1.001", expires_at="x"), ("invalid_field", "body.amount")),
            (body(amount="1000000000000.001"), ("quantity_out_of_range", "body.amount")),  # the limit first
            (body(tenant="a b", lot="x"), ("malformed", "body.lot")),
        ]
        for b, want in cases:
            with self.subTest(b):
                self.assertEqual(self.code(b), want)


class DrawRule(unittest.TestCase):
    """PrepaidBook on bodies made here: the rule of RATING.md "Prepaid balances" (the figures of
    core::prepaid's own tests, worked out by hand)."""

    def book(self, *entries):
        b = gv.PrepaidBook()
        for index, kind, body_, received_at in entries:
            b.apply(index, kind, body_, received_at)
        return b

    @staticmethod
    def lot(reference, source, amount, expires_at=None, tenant="acme", currency="CNY",
            received_at="2026-11-01T00:00:00Z"):
        """(kind, body, received_at) of a prepayment entry (a lot's received_at is not read)."""
        out = {"tenant": tenant, "reference": reference, "source": source, "currency": currency, "amount": amount}
        if expires_at is not None:
            out["expires_at"] = expires_at
        return "prepayment", out, ts(received_at)

    @staticmethod
    def invoice(number, total, size, issued, tenant="acme", currency="CNY", period_to="2027-01-01T00:00:00Z"):
        """(kind, body, received_at) of an invoice_issued entry received (so issued) at `issued`;
        its period is not read by the rule."""
        return "invoice_issued", {"number": number, "tenant": tenant, "period_from": "2026-12-01T00:00:00Z",
                                  "period_to": period_to, "currency": currency, "total": total,
                                  "checkpoint_size": size, "invoice_sha256": "00" * 32}, ts(issued)

    def drawn(self, book, total, size, issued, tenant="acme", currency="CNY"):
        return [(lot.reference, amount)
                for lot, amount in book.draws(tenant, currency, Fraction(total), size, ts(issued))]

    def four_lots(self):
        return self.book((1, *self.lot("p-late", "purchase", "100.00")),
                         (2, *self.lot("p-soon", "purchase", "50.00", "2027-06-01T00:00:00Z")),
                         (3, *self.lot("g-never", "grant", "20.00")),
                         (4, *self.lot("g-soon", "grant", "10.00", "2027-03-01T00:00:00Z")))

    def test_the_stated_order(self):
        # Grants before purchases, earliest expiry first (none last), then log order.
        book = self.four_lots()
        self.assertEqual(self.drawn(book, "123.45", 10, "2027-02-01T00:00:00Z"),
                         [("g-soon", 10), ("g-never", 20), ("p-soon", 50), ("p-late", Fraction("43.45"))])
        # An invoice that draws it all, and one that draws one lot in part.
        self.assertEqual(sum(a for _, a in self.drawn(book, "500", 10, "2027-02-01T00:00:00Z")), 180)
        self.assertEqual(self.drawn(book, "7.5", 10, "2027-02-01T00:00:00Z"), [("g-soon", Fraction("7.5"))])

    def test_log_order_breaks_ties(self):
        book = self.book((1, *self.lot("b", "grant", "10")), (2, *self.lot("a", "grant", "10")),
                         (3, *self.lot("d", "purchase", "10", "2027-05-01T00:00:00Z")),
                         (4, *self.lot("c", "purchase", "10", "2027-05-01T00:00:00Z")))
        self.assertEqual([r for r, _ in self.drawn(book, "35", 5, "2027-02-01T00:00:00Z")], ["b", "a", "d", "c"])

    def test_earlier_invoices_draw_first(self):
        book = self.four_lots()
        book.apply(10, *self.invoice("INV-000001", "123.45", 10, "2027-01-01T00:00:00Z"))
        self.assertEqual(book.lot("acme", "p-late").remaining, Fraction("56.55"))
        self.assertEqual(book.lot("acme", "g-soon").draws, [("INV-000001", 10)])
        # The next invoice finds only what is left.
        self.assertEqual(self.drawn(book, "999.99", 11, "2027-02-01T00:00:00Z"), [("p-late", Fraction("56.55"))])
        book.apply(11, *self.invoice("INV-000002", "56.55", 11, "2027-02-01T00:00:00Z"))
        self.assertEqual(self.drawn(book, "1", 12, "2027-03-01T00:00:00Z"), [])

    def test_an_earlier_invoice_draws_by_its_own_size_issue_and_currency(self):
        book = self.book((1, *self.lot("a", "purchase", "10")),
                         (5, *self.lot("b", "purchase", "10")),
                         (6, *self.lot("soon", "grant", "10", "2027-01-01T00:00:00Z")),
                         (7, *self.invoice("INV-000001", "15", 5, "2027-01-01T00:00:00Z")),
                         (8, *self.invoice("INV-000002", "15", 8, "2027-01-01T00:00:01Z", currency="USD")),
                         (9, *self.invoice("INV-000003", "15", 8, "2027-01-01T00:00:01Z", tenant="other")))
        # INV-000001: size 5 holds only a; it was issued as soon expired.
        self.assertEqual([(l.reference, l.remaining) for l in book.lots], [("a", 0), ("b", 10), ("soon", 10)])

    def test_an_earlier_invoice_draws_as_of_its_received_at(self):
        # The issue instant of an invoice_issued entry is its leaf's received_at, not its period:
        # the same body, received a second before the lot expires, draws on it; received as it
        # expires, not (the period ends long before either).
        for received_at, left in (("2027-02-28T23:59:59Z", [("soon", 0), ("late", 10)]),
                                  ("2027-03-01T00:00:00Z", [("soon", 10), ("late", 0)])):
            with self.subTest(received_at):
                book = self.book((1, *self.lot("soon", "grant", "10", "2027-03-01T00:00:00Z")),
                                 (2, *self.lot("late", "purchase", "10")),
                                 (3, *self.invoice("INV-000001", "10", 3, received_at,
                                                   period_to="2026-12-01T00:00:00Z")))
                self.assertEqual([(l.reference, l.remaining) for l in book.lots], left)
        with self.assertRaises(ValueError):
            gv.PrepaidBook().apply(0, "invoice_issued", self.invoice("INV-000001", "1", 0, LOGGED)[1], None)

    def test_a_total_of_zero_or_less_draws_nothing(self):
        book = self.four_lots()
        for total in ("0", "-5", "-0.01"):
            self.assertEqual(self.drawn(book, total, 10, "2027-02-01T00:00:00Z"), [], total)
        self.assertEqual(gv.prepaid_members([], Fraction(-5), "CNY"), (None, None))

    def test_expiry_and_checkpoint_bound_what_a_lot_pays(self):
        book = self.book((5, *self.lot("p", "purchase", "10.00", "2027-02-01T00:00:00Z")))
        self.assertEqual(len(self.drawn(book, "5", 6, "2027-01-31T23:59:59Z")), 1, "issued a second before")
        self.assertEqual(self.drawn(book, "5", 6, "2027-02-01T00:00:00Z"), [], "issued as it expires")
        self.assertEqual(self.drawn(book, "5", 6, "2027-02-01T00:00:01Z"), [], "issued after it expired")
        self.assertEqual(self.drawn(book, "5", 5, "2027-01-01T00:00:00Z"), [], "checkpoint at the lot")
        self.assertEqual(self.drawn(book, "5", 6, "2027-01-01T00:00:00Z", tenant="other"), [])
        self.assertEqual(self.drawn(book, "5", 6, "2027-01-01T00:00:00Z", currency="USD"), [])

    def test_a_reference_used_again_is_no_lot(self):
        book = self.book((1, *self.lot("r", "purchase", "10")), (2, *self.lot("r", "grant", "99")),
                         (3, *self.lot("r", "purchase", "5", tenant="other")))
        self.assertEqual([(l.reference, l.source, l.tenant) for l in book.lots],
                         [("r", "purchase", "acme"), ("r", "purchase", "other")])

    def test_entries_in_index_order(self):
        book = self.book((5, *self.lot("r", "purchase", "10")))
        with self.assertRaises(ValueError):
            book.apply(5, *self.lot("s", "purchase", "10"))

    def test_members_padded_never_rounded(self):
        book = self.book((1, *self.lot("whole", "grant", "50")), (2, *self.lot("half", "purchase", "10.5")))
        draws = book.draws("acme", "CNY", Fraction("80.00"), 3, ts("2027-01-01T00:00:00Z"))
        self.assertEqual(gv.prepaid_members(draws, Fraction(80), "CNY"),
                         ([{"prepayment": "whole", "source": "grant", "amount": "50.00"},
                           {"prepayment": "half", "source": "purchase", "amount": "10.50"}], "19.50"))
        self.assertEqual(gv.prepaid_members(draws, Fraction("60.5"), "JPY")[1], "0")
        self.assertEqual(gv.prepaid_members(draws, Fraction(61), "BHD"),
                         ([{"prepayment": "whole", "source": "grant", "amount": "50.000"},
                           {"prepayment": "half", "source": "purchase", "amount": "10.500"}], "0.500"))
        self.assertEqual([gv.padded_str(Fraction(x), p) for x, p in (("0", 2), ("1.5", 0), ("0.001", 2), ("7", 3))],
                         ["0.00", "1.5", "0.001", "7.000"])


class PrepaidInvoices(LogBundleTestCase):
    """Invoices written by hand over producer logs, checked with `bundle --invoice` on the
    invoice's bundle (section 14: the context producer.context_for gives it). The invoice is
    for tenant t, December 2026 (PERIOD), in CNY unless said, with one usage line of net =
    total, issued at the log's size, at ISSUED unless said; its usage line is taken as it says
    (`verify_bundle(..., rerate_usage=False)`: these logs hold no records, and the draws are the
    subject here; ProducerFixtureInvoice and the Rust fixture re-rate theirs). The base log: 0
    log_policy, 1 tenant_registered t, 2 tenant_registered u."""

    ORIGIN = "gpuledger.test/prepaid"

    def setUp(self):
        super().setUp()
        self.lk = producer.Key.from_byte(0x97)
        log = self.log = producer.Log(self.lk, self.ORIGIN)
        log.policy("2026-10-01T00:00:00Z")
        log.tenant("t", "2026-10-01T00:00:00Z")
        log.tenant("u", "2026-10-01T00:00:00Z")

    def lot(self, reference, amount, source="purchase", expires_at=None, tenant="t", currency="CNY",
            received_at=LOGGED):
        return self.log.prepayment(tenant, reference, amount, received_at, source=source, currency=currency,
                                   expires_at=expires_at)

    def earlier(self, number, period, total, size=None, tenant="t", currency="CNY", received_at=None):
        """An earlier invoice_issued of `tenant`, received (so issued) at `received_at` (default:
        as its period ends); `size` its checkpoint_size (default: the log's size as it is logged)."""
        size = len(self.log.entries) if size is None else size
        received_at = period[1] if received_at is None else received_at
        return self.log.invoice(number, tenant, period[0], period[1], size, received_at, total=total,
                                currency=currency)

    def invoice(self, total, prepaid=None, amount_due=None, currency="CNY", tenant="t", period=PERIOD,
                issued_at=ISSUED):
        size = len(self.log.entries)
        zero = "0" if currency == "JPY" else "0.00"
        lines = []
        if total not in ("0", "0.00"):
            lines = [{"kind": "gpu", "description": "GPU compute, H100, cn-east, on-demand", "region": "cn-east",
                      "gpu_model": "H100", "class": "on_demand", "quantity": "1", "unit": "GPU-h",
                      "gpu_seconds": "3600", "unit_price": total, "net": total, "tax_rate": "0", "tax": zero,
                      "gross": total, "records": 1}]
        inv = {"format": "gpuledger-invoice/v2", "number": NUMBER, "tenant": tenant,
               "period": {"from": period[0], "to": period[1]}, "currency": currency,
               "issued_at": issued_at, "log_origin": self.ORIGIN, "checkpoint_size": size,
               "checkpoint_root": producer.b64(self.log.root(size)),
               "issuer": {"name": self.ORIGIN, "address": []}, "bill_to": {"tenant": tenant, "name": tenant, "address": []},
               "payment_terms_days": 30, "due_at": "2027-01-31T01:00:00Z", "lines": lines,
               "net_total": total, "tax_total": zero, "total": total}
        if prepaid is not None:
            inv["prepaid"] = [{"prepayment": r, "source": s, "amount": a} for r, s, a in prepaid]
        if amount_due is not None:
            inv["amount_due"] = amount_due
        return inv

    def run_invoice(self, inv, context=None):
        size = len(self.log.entries)
        if context is None:
            context = producer.context_for(self.log, size, [], inv["tenant"], invoice=True)
        lines = producer.make_bundle(self.log, size, context, [], {"invoice": NUMBER})
        bundle = self.write("bundle.ndjson", producer.bundle_bytes(lines))
        path = self.write("invoice.json", json.dumps(inv, ensure_ascii=False))
        return gv.verify_bundle(bundle, gv.parse_verifier_key(self.log.verifier_key()), path, rerate_usage=False)

    def four_lots(self):
        self.lot("p-late", "100.00")                                          # 3
        self.lot("p-soon", "50.00", expires_at="2027-06-01T00:00:00Z")        # 4
        self.lot("g-never", "20.00", "grant")                                 # 5
        self.lot("g-soon", "10.00", "grant", expires_at="2027-03-01T00:00:00Z")  # 6

    ORDERED = [("g-soon", "grant", "10.00"), ("g-never", "grant", "20.00"), ("p-soon", "purchase", "50.00"),
               ("p-late", "purchase", "43.45")]

    def test_without_lots_nothing_is_drawn(self):
        r = self.run_invoice(self.invoice("148.00"))
        self.assertPass(r)
        s = r.summary["invoice"]
        self.assertEqual((s["prepaid_lots"], s["prepaid"], s["amount_due"]), ([], [], None))
        self.assertIn("nothing drawn on the bundle's 0 prepaid lots of t in CNY", r.message)

    def test_the_draw_order(self):
        # Grants first (the earlier expiry first), then purchases (the one that expires first).
        self.four_lots()
        inv = self.invoice("123.45", self.ORDERED, "0.00")
        r = self.run_invoice(inv)
        self.assertPass(r)
        s = r.summary["invoice"]
        self.assertEqual(s["prepaid_lots"], ["p-late", "p-soon", "g-never", "g-soon"])
        self.assertEqual(s["prepaid"], inv["prepaid"])
        self.assertEqual(s["amount_due"], "0.00")
        self.assertIn("43.45 from p-late (purchase); amount due 0.00", r.message)
        # The same draws in log order, or by amount, are not the rule's.
        for order in ([3, 2, 1, 0], [0, 1, 3, 2], [1, 0, 2, 3]):
            with self.subTest(order):
                moved = copy.deepcopy(inv)
                moved["prepaid"] = [inv["prepaid"][i] for i in order]
                r = self.assertFail(self.run_invoice(moved), "claim_mismatch", "prepaid")

    def test_lots_draw_until_the_invoice_is_paid_or_they_are_spent(self):
        self.four_lots()
        everything = [("g-soon", "grant", "10.00"), ("g-never", "grant", "20.00"), ("p-soon", "purchase", "50.00"),
                      ("p-late", "purchase", "100.00")]
        self.assertPass(self.run_invoice(self.invoice("200.00", everything, "20.00")))
        self.assertPass(self.run_invoice(self.invoice("25.00", [("g-soon", "grant", "10.00"),
                                                                ("g-never", "grant", "15.00")], "0.00")))

    def test_log_order_breaks_ties(self):
        self.lot("grant-b", "10.00", "grant")
        self.lot("grant-a", "10.00", "grant")
        self.lot("buy-d", "10.00", expires_at="2027-05-01T00:00:00Z")
        self.lot("buy-c", "10.00", expires_at="2027-05-01T00:00:00Z")
        draws = [("grant-b", "grant", "10.00"), ("grant-a", "grant", "10.00"), ("buy-d", "purchase", "10.00"),
                 ("buy-c", "purchase", "5.00")]
        self.assertPass(self.run_invoice(self.invoice("35.00", draws, "0.00")))
        swapped = [draws[1], draws[0]] + draws[2:]
        self.assertFail(self.run_invoice(self.invoice("35.00", swapped, "0.00")), "claim_mismatch", "prepaid")

    def test_the_expiry_boundary(self):
        # A lot pays an invoice issued before its expires_at (strictly): issued one second before,
        # it draws; issued at expires_at or later, the lot's remainder is forfeit. The period's end
        # does not count: a lot that expires as the period ends pays none of it, issued after.
        for expires_at, issued_at, draws in (("2027-01-01T01:00:00Z", "2027-01-01T00:59:59Z", True),
                                             ("2027-01-01T01:00:00Z", "2027-01-01T01:00:00Z", False),
                                             ("2027-01-01T01:00:00Z", "2027-01-01T01:00:01Z", False),
                                             (PERIOD[1], ISSUED, False),
                                             ("2027-01-01T01:00:01Z", ISSUED, True)):
            with self.subTest(expires_at=expires_at, issued_at=issued_at):
                self.setUp()
                self.lot("expiring", "30.00", expires_at=expires_at)
                paid = self.invoice("20.00", [("expiring", "purchase", "20.00")], "0.00", issued_at=issued_at)
                unpaid = self.invoice("20.00", issued_at=issued_at)
                if draws:
                    self.assertPass(self.run_invoice(paid))
                    r = self.run_invoice(unpaid)
                    self.assertFail(r, "claim_mismatch", "prepaid")
                    self.assertIn("the invoice says absent", r.message)
                else:
                    self.assertPass(self.run_invoice(unpaid))
                    r = self.run_invoice(paid)
                    self.assertFail(r, "claim_mismatch", "prepaid")
                    self.assertIn("the bundle's prepaid lots give absent", r.message)

    def test_an_earlier_invoice_draws_as_of_its_entrys_received_at(self):
        # INV-000001 (October; its period ends long before the grant expires) is issued, so drawn,
        # at its entry's received_at: a second before the grant expires it draws 20.00 of the
        # grant, leaving the purchase whole; as the grant expires, 20.00 of the purchase. The
        # invoice checked (issued after the grant expired) finds 60.00 or 40.00 of it.
        for received_at, draws, due in (("2026-11-14T23:59:59Z", "50.00", "0.00"),
                                        ("2026-11-15T00:00:00Z", "40.00", "10.00")):
            with self.subTest(received_at):
                self.setUp()
                self.lot("grant", "30.00", "grant", expires_at="2026-11-15T00:00:00Z")
                self.lot("purchase", "60.00")
                self.earlier("INV-000001", ("2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z"), "20.00",
                             received_at=received_at)
                self.assertPass(self.run_invoice(self.invoice("50.00", [("purchase", "purchase", draws)], due)))

    def test_an_expired_lot_is_skipped_not_the_rest(self):
        self.lot("expired", "30.00", "grant", expires_at="2026-12-15T00:00:00Z")
        self.lot("open", "30.00")
        self.assertPass(self.run_invoice(self.invoice("20.00", [("open", "purchase", "20.00")], "0.00")))

    def test_a_lot_logged_at_or_after_an_earlier_invoices_checkpoint(self):
        # INV-000001 (November) was issued at checkpoint size 4: it draws on lot a (entry 3), not
        # on lot b (entry 4, logged before the invoice entry but at its checkpoint size).
        self.lot("a", "20.00")                                                         # 3
        self.lot("b", "50.00")                                                         # 4
        self.earlier("INV-000001", ("2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z"), "30.00", size=4)  # 5
        self.assertPass(self.run_invoice(self.invoice("60.00", [("b", "purchase", "50.00")], "10.00")))
        # Issued at size 5 instead, it would have drawn 10.00 of b too.
        self.setUp()
        self.lot("a", "20.00")
        self.lot("b", "50.00")
        self.earlier("INV-000001", ("2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z"), "30.00", size=5)
        self.assertPass(self.run_invoice(self.invoice("60.00", [("b", "purchase", "40.00")], "20.00")))

    def test_earlier_invoices_reduce_what_is_left(self):
        self.lot("topup", "100.00")
        self.earlier("INV-000001", ("2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z"), "30.00")
        self.earlier("INV-000002", ("2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z"), "50.00")
        self.assertPass(self.run_invoice(self.invoice("70.00", [("topup", "purchase", "20.00")], "50.00")))
        r = self.run_invoice(self.invoice("70.00", [("topup", "purchase", "70.00")], "0.00"))
        self.assertFail(r, "claim_mismatch", "prepaid")
        self.assertIn('prepaid[0].amount: the invoice says "70.00", the bundle\'s prepaid lots give "20.00"', r.message)

    def test_a_spent_lot_draws_nothing(self):
        self.lot("topup", "30.00")
        self.earlier("INV-000001", ("2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z"), "30.00")
        self.assertPass(self.run_invoice(self.invoice("70.00")))

    def test_other_tenants_and_currencies_do_not_count(self):
        # A full-log bundle (it holds u's registration): u's lot and invoice, t's USD lot and USD
        # invoice change nothing of t's CNY invoice.
        self.lot("topup", "100.00")
        self.lot("topup", "500.00", tenant="u")
        self.lot("dollars", "500.00", "grant", currency="USD")
        self.earlier("INV-000001", ("2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z"), "80.00", tenant="u")
        self.earlier("INV-000002", ("2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z"), "90.00", currency="USD")
        inv = self.invoice("70.00", [("topup", "purchase", "70.00")], "0.00")
        everything = [e.index for e in self.log.entries]
        r = self.run_invoice(inv, context=everything)
        self.assertPass(r)
        self.assertEqual(r.summary["invoice"]["prepaid_lots"], ["topup"])
        # ... and t's own bundle, which holds none of u's entries, says the same.
        self.assertPass(self.run_invoice(inv))
        usd = self.invoice("600.00", [("dollars", "grant", "410.00")], "190.00", currency="USD")
        self.assertPass(self.run_invoice(usd))

    def test_a_total_of_zero_draws_nothing(self):
        self.four_lots()
        self.assertPass(self.run_invoice(self.invoice("0.00")))
        self.assertFail(self.run_invoice(self.invoice("0.00", [], "0.00")), "claim_mismatch", "prepaid")
        self.assertFail(self.run_invoice(self.invoice("0.00", [("g-soon", "grant", "0.00")], "0.00")),
                        "claim_mismatch", "prepaid")
        self.assertFail(self.run_invoice(self.invoice("0.00", None, "0.00")), "claim_mismatch", "amount_due")

    def test_amounts_are_padded_to_the_minor_unit(self):
        self.lot("round", "50")
        self.lot("half", "10.5", "grant")
        self.assertPass(self.run_invoice(self.invoice("80.00", [("half", "grant", "10.50"),
                                                                ("round", "purchase", "50.00")], "19.50")))
        for draws, due, item in (([("half", "grant", "10.5"), ("round", "purchase", "50.00")], "19.50", "prepaid"),
                                 ([("half", "grant", "10.50"), ("round", "purchase", "50")], "19.50", "prepaid"),
                                 ([("half", "grant", "10.50"), ("round", "purchase", "50.00")], "19.5", "amount_due"),
                                 ([("half", "grant", "10.50"), ("round", "purchase", "50.000")], "19.50", "prepaid")):
            with self.subTest(draws=draws, due=due):
                self.assertFail(self.run_invoice(self.invoice("80.00", draws, due)), "claim_mismatch", item)

    def test_jpy_and_bhd(self):
        self.lot("yen", "5000", currency="JPY")
        self.lot("dinar", "1.5", currency="BHD")
        self.assertPass(self.run_invoice(self.invoice("1200", [("yen", "purchase", "1200")], "0", currency="JPY")))
        self.assertFail(self.run_invoice(self.invoice("1200", [("yen", "purchase", "1200.00")], "0.00",
                                                      currency="JPY")), "claim_mismatch", "prepaid")
        inv = self.invoice("2.000", [("dinar", "purchase", "1.500")], "0.500", currency="BHD")
        inv["tax_total"] = inv["lines"][0]["tax"] = "0.000"
        self.assertPass(self.run_invoice(inv))

    # the edits of the brief

    def tampered(self, edit):
        self.four_lots()
        inv = self.invoice("123.45", self.ORDERED, "0.00")
        self.assertPass(self.run_invoice(inv))
        edit(inv)
        return self.run_invoice(inv)

    def test_a_tampered_draw_amount(self):
        def edit(inv):
            inv["prepaid"][0]["amount"] = "10.01"
            inv["amount_due"] = "-0.01"
        r = self.tampered(edit)
        self.assertFail(r, "claim_mismatch", "prepaid")
        self.assertIn('prepaid[0].amount: the invoice says "10.01", the bundle\'s prepaid lots give "10.00"', r.message)

    def test_a_tampered_amount_due(self):
        r = self.tampered(lambda inv: inv.update(amount_due="123.45"))
        self.assertFail(r, "claim_mismatch", "amount_due")
        self.assertIn('the invoice says "123.45", the bundle\'s prepaid lots give "0.00"', r.message)

    def test_other_tampers(self):
        for edit, item in ((lambda inv: inv["prepaid"][3].update(source="grant"), "prepaid"),
                           (lambda inv: inv["prepaid"][1].update(prepayment="g-other"), "prepaid"),
                           (lambda inv: inv["prepaid"].pop(), "prepaid"),
                           (lambda inv: inv["prepaid"].append({"prepayment": "x", "source": "grant", "amount": "0.00"}),
                            "prepaid"),
                           (lambda inv: (inv.pop("prepaid"), inv.pop("amount_due")), "prepaid"),
                           (lambda inv: inv.pop("amount_due"), "amount_due"),
                           (lambda inv: inv.pop("prepaid"), "prepaid")):
            with self.subTest(item=item):
                self.setUp()
                self.assertFail(self.tampered(edit), "claim_mismatch", item)

    def test_the_totals_come_before_the_draws(self):
        # The draws follow from the recomputed total: a wrong total is named first.
        r = self.tampered(lambda inv: inv.update(total="100.00", prepaid=inv["prepaid"][:3] + [
            {"prepayment": "p-late", "source": "purchase", "amount": "20.00"}]))
        self.assertFail(r, "claim_mismatch", "total")

    def test_malformed_members(self):
        for edit, item in ((lambda inv: inv.update(prepaid={}), "invoice.prepaid"),
                           (lambda inv: inv.update(prepaid=None), "invoice.prepaid"),
                           (lambda inv: inv["prepaid"].__setitem__(0, "g-soon"), "invoice.prepaid[0]"),
                           (lambda inv: inv["prepaid"][0].pop("amount"), "invoice.prepaid[0].amount"),
                           (lambda inv: inv["prepaid"][0].update(amount=10), "invoice.prepaid[0].amount"),
                           (lambda inv: inv["prepaid"][0].update(lot="x"), "invoice.prepaid[0].lot"),
                           (lambda inv: inv["prepaid"][0].update(source="gift"), "invoice.prepaid[0].source"),
                           (lambda inv: inv.update(amount_due=0), "invoice.amount_due"),
                           (lambda inv: inv.pop("issued_at"), "invoice.issued_at"),
                           (lambda inv: inv.update(issued_at="2027-01-01"), "invoice.issued_at"),
                           (lambda inv: inv.update(amount_due=None), "invoice.amount_due")):
            with self.subTest(item=item):
                self.setUp()
                self.assertFail(self.tampered(edit), "malformed", item)

    def test_the_command_line(self):
        self.four_lots()
        inv = self.invoice("123.45", self.ORDERED, "0.00")
        size = len(self.log.entries)
        lines = producer.make_bundle(self.log, size, producer.context_for(self.log, size, [], "t", invoice=True), [],
                                     {"invoice": NUMBER})
        bundle = self.write("bundle.ndjson", producer.bundle_bytes(lines))
        key = self.log.verifier_key()
        path = self.write("invoice.json", json.dumps(inv))
        # The command line always re-rates: the hand-written usage line has no record behind it
        # (ProducerFixtureInvoice runs the command line on an invoice whose usage is logged).
        out = io.StringIO()
        with redirect_stdout(out):
            rc = gv.main(["bundle", "--bundle", bundle, "--log-key", key, "--invoice", path])
        self.assertEqual(rc, 1)
        self.assertTrue(out.getvalue().startswith("FAIL: claim_mismatch: lines[0]: "), out.getvalue())
        self.assertPass(self.run_invoice(inv))
        inv["amount_due"] = "1.00"
        self.assertFail(self.run_invoice(inv), "claim_mismatch", "amount_due")


class FixtureInvoice(RustInvoiceFixture):
    """tests/fixtures/prepaid/ (invoice.json, bundle.ndjson, verifier_key.txt), written by the
    Rust ledger as tests/fixtures/contract/ is: an invoice that draws on its tenant's lots, and
    its bundle. Skipped, loudly, until the Rust side commits it (ProducerFixtureInvoice runs the
    same checks on a directory of that layout made here, so the harness always runs)."""

    def fixture_dir(self):
        return FIXTURE

    def test_passes(self):
        self.assertIn("prepaid", self.invoice, "the fixture's invoice should draw on a prepaid lot")
        self.assertIn("amount_due", self.invoice)
        r = self.check(self.invoice)
        self.assertPass(r)
        s = r.summary["invoice"]
        self.assertEqual(s["prepaid"], self.invoice["prepaid"])
        self.assertEqual(s["amount_due"], self.invoice["amount_due"])
        self.assertGreaterEqual(r.summary["entries_by_kind"].get("prepayment", 0), len(s["prepaid"]))

    def test_the_command_line(self):
        out = io.StringIO()
        with redirect_stdout(out):
            rc = gv.main(["bundle", "--bundle", self.paths[1], "--log-key", self.paths[2], "--invoice", self.paths[0]])
        self.assertEqual(rc, 0, out.getvalue())
        self.assertIn("prepaid draws recomputed", out.getvalue())

    def test_tampered_draw_and_amount_due(self):
        places = gv.minor_units(self.invoice["currency"])
        unit = Fraction(1, 10 ** places)
        inv = copy.deepcopy(self.invoice)
        inv["prepaid"][0]["amount"] = gv.padded_str(Fraction(inv["prepaid"][0]["amount"]) - unit, places)
        self.assertFail(self.check(inv), "claim_mismatch", "prepaid")
        inv = copy.deepcopy(self.invoice)
        inv["amount_due"] = gv.padded_str(Fraction(inv["amount_due"]) + unit, places)
        self.assertFail(self.check(inv), "claim_mismatch", "amount_due")
        inv = copy.deepcopy(self.invoice)
        del inv["prepaid"], inv["amount_due"]
        self.assertFail(self.check(inv), "claim_mismatch", "prepaid")


class ProducerFixtureInvoice(FixtureInvoice):
    """FixtureInvoice's checks on a directory of the fixture's layout written here from a producer
    log: tenant acme, a grant of 100.00 expiring 2027-03-01 and a purchase of 5000.00, an earlier
    invoice (December 2026, total 40.00) that drew 40.00 of the grant; the January invoice,
    total 185.00 (one record, 10 GPU-h at 18.5, re-rated), draws the grant's 60.00 and 125.00 of the purchase: amount due 0.00."""

    def fixture_dir(self):
        return os.path.join(self.tmp, "prepaid")

    def setUp(self):
        VerifierTestCase.setUp(self)
        log = producer.Log(producer.Key.from_byte(0x98), "test.gpuledger/log")
        node = producer.Key.from_byte(0x99)
        log.policy("2026-11-01T00:00:00Z")
        log.tenant("acme", "2026-11-01T00:00:00Z")
        log.prepayment("acme", "GRANT-1", "100.00", "2026-11-02T00:00:00Z", source="grant",
                       expires_at="2027-03-01T00:00:00Z")
        log.prepayment("acme", "TOPUP-2027-0042", "5000.00", "2026-11-02T00:00:00Z")
        log.invoice("INV-000001", "acme", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z", 4, "2027-01-01T01:00:00Z",
                    total="40.00")
        # The January usage: 5 H100s for 2 hours (36000 GPU-s) at 18.5 an hour, 185.00.
        log.rate_card("west", "H100", "on_demand", "18.5", "2027-01-02T00:00:00Z", "2027-01-01T02:00:00Z")
        log.node("node-1", "west", "2027-01-01T02:00:00Z", {"H100": 8})
        log.register("node-1", node, "node", "2027-01-01T02:00:00Z", regions=["west"])
        log.lease("lease-acme", "acme", "on_demand", "2027-01-01T02:00:00Z",
                  [producer.lease_count("node-1", "H100", "5")], start="2027-01-01T00:00:00Z")
        record = log.gpu_usage("node-1", node, "acme", "west", "H100", "5", "2027-01-10T00:00:00Z", 7200,
                               lease="lease-acme")
        size = len(log.entries)
        usage = {"kind": "gpu", "description": "GPU compute, H100, west, on-demand", "region": "west",
                 "gpu_model": "H100", "class": "on_demand", "quantity": "10", "unit": "GPU-h", "gpu_seconds": "36000",
                 "unit_price": "18.5", "net": "185.00", "tax_rate": "0", "tax": "0.00", "gross": "185.00", "records": 1}
        invoice = {"format": "gpuledger-invoice/v2", "number": "INV-000002", "tenant": "acme",
                   "period": {"from": "2027-01-01T00:00:00Z", "to": "2027-02-01T00:00:00Z"}, "currency": "CNY",
                   "issued_at": "2027-02-01T01:00:00Z", "log_origin": log.origin, "checkpoint_size": size,
                   "checkpoint_root": producer.b64(log.root(size)), "issuer": {"name": log.origin, "address": []},
                   "bill_to": {"tenant": "acme", "name": "acme", "address": []}, "payment_terms_days": 30,
                   "due_at": "2027-03-03T01:00:00Z", "lines": [usage], "net_total": "185.00", "tax_total": "0.00",
                   "total": "185.00",
                   "prepaid": [{"prepayment": "GRANT-1", "source": "grant", "amount": "60.00"},
                               {"prepayment": "TOPUP-2027-0042", "source": "purchase", "amount": "125.00"}],
                   "amount_due": "0.00"}
        lines = producer.make_bundle(log, size, producer.context_for(log, size, [record], "acme", invoice=True),
                                     [record], {"invoice": "INV-000002"})
        self.write("prepaid/invoice.json", json.dumps(invoice, ensure_ascii=False))
        self.write("prepaid/bundle.ndjson", producer.bundle_bytes(lines))
        self.write("prepaid/verifier_key.txt", log.verifier_key() + "\n")
        self.load()


if __name__ == "__main__":
    unittest.main()
