"""Contract amendments: the ledger-written `contract_amended` entry (PROTOCOL.md section 5.21),
the rules of section 6.7 ("Contract amendments") that a bundle rechecks, and an invoice's
contract lines recomputed with the terms as amended (docs/RATING.md, "Amendments").

An invoice's bundle holds its tenant's `contract_registered` and `contract_amended` entries in
its context (section 14). A contract as amended is its registration with the term_to of its
latest amendment (same contract id, same tenant) before the entry read. In order, an amendment
names a registered tenant (`unknown_tenant`, body.tenant) and an earlier contract of that tenant
(`unknown_contract`, body.contract); then, all on body.term_to, with C the contract as amended
and m the earlier of C's end and the new one: the new end is after C's start (`invalid_field`),
the term at most 3660 days (`quantity_out_of_range`), the new end is not C's end
(`invalid_field`), m is not before received_at minus the policy's skew (`price_in_past`), the
billing period of C that m falls in starts at or after the tenant's latest invoiced period_to
(`price_in_invoiced_period`), and an extension overlaps no other contract of the tenant
(`contract_overlap`). A contract's registration is compared with the terms as amended. Body
rules are `leaf_invalid`, with the ledger's code and field in the message."""

import copy
import json
import unittest
from decimal import Decimal
from fractions import Fraction

import os

from support import REPO, LogBundleTestCase, RustInvoiceFixture, body_verdict, changed, gv, producer

FEES = [producer.fee("Bare-metal 8\u00d7H100 node, monthly", "120000"),
        producer.fee("Rack setup", "800", "once", "support")]
REGISTERED_AT = "2026-12-01T00:00:00Z"  # after the tenants' registrations: receive times never decrease
AMENDED_AT = "2026-12-02T00:00:00Z"
TERM = ("2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z")


def body(**changes):
    """A valid contract_amended body (section 5.21's example, of contract C-1 of tenant t), with
    `changes` applied (a value of ... removes the member)."""
    out = {"contract": "C-1", "reason": "Ended early by mutual agreement", "tenant": "t",
           "term_to": "2027-07-01T00:00:00Z"}
    changed(out, changes)
    return out


class Amendments(LogBundleTestCase):
    """The base log: 0 log_policy (skew 300 s), 1 tenant_registered t, 2 tenant_registered u; the
    tests append contracts, invoices and amendments. `bundle()` holds every entry, as an
    invoice's bundle (all context)."""

    ORIGIN = "gpuledger.test/contract-amendments"

    def setUp(self):
        super().setUp()
        self.lk = producer.Key.from_byte(0x94)
        log = self.log = producer.Log(self.lk, self.ORIGIN)
        log.policy("2026-10-01T00:00:00Z")      # 0
        log.tenant("t", "2026-10-01T00:00:00Z")  # 1
        log.tenant("u", "2026-10-01T00:00:00Z")  # 2

    def contract(self, name="C-1", term=TERM, tenant="t", received_at=REGISTERED_AT):
        return self.log.contract(tenant, name, term[0], term[1], received_at, fees=copy.deepcopy(FEES),
                                 commitment="5000")

    def amend(self, term_to, name="C-1", tenant="t", received_at=AMENDED_AT, **kw):
        return self.log.amend(tenant, name, term_to, received_at, **kw)

    def invoice(self, period, tenant="t", number="INV-000001", received_at=None):
        return self.log.invoice(number, tenant, period[0], period[1], 3, received_at or period[1])

    def test_reasons_and_kinds_are_known(self):
        self.assertIn("unknown_contract", gv.REASONS)
        self.assertIn("unknown_contract", gv.ADMISSION_REASONS)
        for kinds in (gv.KINDS, gv.LEDGER_KINDS, gv.ROLE_KINDS["ledger"], gv.TENANT_LEDGER_KINDS):
            self.assertIn("contract_amended", kinds)
        self.assertNotIn("contract_amended", gv.RECORD_KINDS)

    # admission in a bundle

    def test_a_shortening_passes(self):
        self.contract()
        self.amend("2027-07-01T00:00:00Z")
        r = self.bundle()
        self.passes(r)
        self.assertEqual(r[0].summary["entries_by_kind"]["contract_amended"], 1)

    def test_an_extension_passes(self):
        self.contract()
        self.amend("2028-06-01T00:00:00Z")
        self.passes(self.bundle())

    def test_the_section_5_21_example_passes(self):
        self.log.tenant("acme", REGISTERED_AT)
        self.log.contract("acme", "C-acme-2027", "2027-01-15T00:00:00Z", "2028-01-15T00:00:00Z", REGISTERED_AT,
                          fees=copy.deepcopy(FEES), commitment="5000")
        self.log.ledger("contract_amended", body(contract="C-acme-2027", tenant="acme"), AMENDED_AT)
        self.passes(self.bundle())

    def test_amendments_in_turn(self):
        # Each amendment is judged against the term as the ones before it left it.
        self.contract()
        self.amend("2027-07-01T00:00:00Z")
        self.amend("2027-09-01T00:00:00Z")
        self.amend(TERM[1])
        self.amend("2027-03-01T00:00:00Z")
        self.passes(self.bundle())

    def test_unknown_tenant(self):
        self.contract()
        i = self.amend("2027-07-01T00:00:00Z", tenant="v")
        self.refused(self.bundle(), "unknown_tenant", i, "body.tenant", says="'v'")

    def test_tenant_registered_after_the_amendment(self):
        i = self.amend("2027-07-01T00:00:00Z", tenant="v")
        self.log.tenant("v", AMENDED_AT)
        self.refused(self.bundle(), "unknown_tenant", i, "body.tenant")

    def test_unknown_contract(self):
        self.contract()
        i = self.amend("2027-07-01T00:00:00Z", name="C-9")
        self.refused(self.bundle(), "unknown_contract", i, "body.contract", says="t has no contract 'C-9'")

    def test_another_tenants_contract(self):
        self.contract(tenant="u")
        i = self.amend("2027-07-01T00:00:00Z")
        self.refused(self.bundle(), "unknown_contract", i, "body.contract", says="t has no contract 'C-1'")

    def test_a_contract_registered_after_the_amendment(self):
        i = self.amend("2027-07-01T00:00:00Z", received_at=REGISTERED_AT)
        self.contract()
        self.refused(self.bundle(), "unknown_contract", i, "body.contract")

    def test_term_to_not_after_term_from(self):
        for term_to in (TERM[0], "2026-12-31T23:59:59Z"):
            with self.subTest(term_to):
                self.setUp()
                self.contract()
                i = self.amend(term_to)
                self.refused(self.bundle(), "invalid_field", i, "body.term_to",
                             says=f"is not after the term's start, {TERM[0]}")

    def test_one_second_of_term_passes(self):
        self.contract()
        self.amend("2027-01-01T00:00:01Z")
        self.passes(self.bundle())

    def test_a_term_of_3660_days_passes_one_second_more_does_not(self):
        # 2027-01-01 + 3660 days = 2037-01-08 (2028, 2032 and 2036 are leap years).
        self.contract()
        self.amend("2037-01-08T00:00:00Z")
        self.passes(self.bundle())
        self.setUp()
        self.contract()
        i = self.amend("2037-01-08T00:00:01Z")
        self.refused(self.bundle(), "quantity_out_of_range", i, "body.term_to", says="above MAX_CONTRACT_TERM_SECONDS")

    def test_the_current_end(self):
        self.contract()
        i = self.amend(TERM[1])
        self.refused(self.bundle(), "invalid_field", i, "body.term_to", says=f"already ends at {TERM[1]}")

    def test_the_current_end_is_the_amended_one(self):
        self.contract()
        self.amend("2027-07-01T00:00:00Z")
        i = self.amend("2027-07-01T00:00:00Z")
        self.refused(self.bundle(), "invalid_field", i, "body.term_to", says="already ends at 2027-07-01T00:00:00Z")

    def test_a_shortening_into_the_past(self):
        # The skew in force is 300 s: m = the new end, received_at - 300 s passes, a second more not.
        self.contract()
        self.amend("2027-02-28T23:55:00Z", received_at="2027-03-01T00:00:00Z")
        self.passes(self.bundle())
        self.setUp()
        self.contract()
        i = self.amend("2027-02-28T23:54:59Z", received_at="2027-03-01T00:00:00Z")
        self.refused(self.bundle(), "price_in_past", i, "body.term_to",
                     says="from 2027-02-28T23:54:59Z, 301 s before received_at")

    def test_an_extension_of_a_term_that_ended(self):
        # m = the current end: a term that ended is never extended (beyond the skew).
        term = ("2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z")
        self.contract(term=term)
        self.amend("2027-02-01T00:00:00Z", received_at="2027-01-01T00:05:00Z")
        self.passes(self.bundle())
        self.setUp()
        self.contract(term=term)
        i = self.amend("2027-02-01T00:00:00Z", received_at="2027-01-01T00:05:01Z")
        self.refused(self.bundle(), "price_in_past", i, "body.term_to",
                     says="from 2027-01-01T00:00:00Z, 301 s before received_at")

    def test_the_past_under_the_policy_in_force(self):
        self.log.policy("2026-11-01T00:00:00Z", max_future_skew_seconds=0)
        self.contract()
        i = self.amend("2027-02-28T23:59:59Z", received_at="2027-03-01T00:00:00Z")
        self.refused(self.bundle(), "price_in_past", i, "body.term_to", says="(max_future_skew_seconds 0)")
        self.setUp()
        self.log.policy("2026-11-01T00:00:00Z", max_future_skew_seconds=3600)
        self.contract()
        self.amend("2027-02-28T23:00:00Z", received_at="2027-03-01T00:00:00Z")
        self.passes(self.bundle())

    def test_a_change_inside_an_invoiced_billing_period(self):
        # Invoiced to 15 January: a new end on 20 January changes January's fees (from 1 January).
        self.contract()
        inv = self.invoice(("2027-01-01T00:00:00Z", "2027-01-15T00:00:00Z"))
        i = self.amend("2027-01-20T00:00:00Z", received_at="2027-01-16T00:00:00Z")
        self.refused(self.bundle(), "price_in_invoiced_period", i, "body.term_to",
                     says=f"from 2027-01-01T00:00:00Z, before 2027-01-15T00:00:00Z, the end of the period invoiced "
                          f"to t at entry {inv}")

    def test_a_change_from_a_billing_period_not_invoiced_passes(self):
        # February starts after the invoiced period's end; a new end on 1 February starts a whole
        # period (m itself).
        for term_to in ("2027-02-01T00:00:00Z", "2027-02-15T00:00:00Z"):
            with self.subTest(term_to):
                self.setUp()
                self.contract()
                self.invoice(("2027-01-01T00:00:00Z", "2027-01-15T00:00:00Z"))
                self.amend(term_to, received_at="2027-01-16T00:00:00Z")
                self.passes(self.bundle())

    def test_the_billing_period_of_the_anniversary(self):
        # Anniversary months from 15 January: invoiced to 1 March, a new end on 10 March changes the
        # period [15 February, 15 March).
        self.log.contract("t", "C-1", "2027-01-15T00:00:00Z", "2028-01-15T00:00:00Z", REGISTERED_AT,
                          fees=copy.deepcopy(FEES), billing_anchor="anniversary")
        self.invoice(("2027-01-15T00:00:00Z", "2027-03-01T00:00:00Z"))
        i = self.amend("2027-03-10T00:00:00Z", received_at="2027-03-02T00:00:00Z")
        self.refused(self.bundle(), "price_in_invoiced_period", i, "body.term_to", says="from 2027-02-15T00:00:00Z")

    def test_an_extension_of_a_term_ending_inside_an_invoiced_month(self):
        # The last period [1 January, 20 January) grows: January is invoiced in part.
        self.contract(term=("2026-12-01T00:00:00Z", "2027-01-20T00:00:00Z"))
        self.invoice(("2026-12-01T00:00:00Z", "2027-01-10T00:00:00Z"))
        i = self.amend("2027-03-01T00:00:00Z", received_at="2027-01-11T00:00:00Z")
        self.refused(self.bundle(), "price_in_invoiced_period", i, "body.term_to", says="from 2027-01-01T00:00:00Z")
        self.setUp()
        self.contract(term=("2026-12-01T00:00:00Z", "2027-01-20T00:00:00Z"))
        self.invoice(("2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"))
        self.amend("2027-03-01T00:00:00Z", received_at="2027-01-11T00:00:00Z")
        self.passes(self.bundle())

    def test_an_extension_of_a_term_ending_on_a_boundary(self):
        # m = the end, on a boundary: no billing period holds it; December is invoiced whole.
        self.contract(term=("2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"))
        self.invoice(("2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"))
        self.amend("2027-02-01T00:00:00Z", received_at="2027-01-01T00:01:00Z")
        self.passes(self.bundle())

    def test_the_latest_invoiced_period_counts(self):
        self.contract()
        first = self.invoice(("2027-01-15T00:00:00Z", "2027-02-10T00:00:00Z"))
        self.invoice(("2027-01-01T00:00:00Z", "2027-01-15T00:00:00Z"), number="INV-000002",
                     received_at="2027-02-10T00:00:00Z")
        i = self.amend("2027-02-20T00:00:00Z", received_at="2027-02-11T00:00:00Z")
        self.refused(self.bundle(), "price_in_invoiced_period", i, "body.term_to",
                     says=f"before 2027-02-10T00:00:00Z, the end of the period invoiced to t at entry {first}")
        self.setUp()
        self.contract()
        self.invoice(("2027-01-15T00:00:00Z", "2027-02-10T00:00:00Z"))
        self.invoice(("2027-01-01T00:00:00Z", "2027-01-15T00:00:00Z"), number="INV-000002",
                     received_at="2027-02-10T00:00:00Z")
        self.amend("2027-03-05T00:00:00Z", received_at="2027-02-11T00:00:00Z")
        self.passes(self.bundle())

    def test_another_tenants_invoice_does_not_count(self):
        self.contract()
        self.invoice(("2027-01-01T00:00:00Z", "2027-01-15T00:00:00Z"), tenant="u")
        self.amend("2027-01-20T00:00:00Z", received_at="2027-01-16T00:00:00Z")
        self.passes(self.bundle())

    def test_an_invoice_logged_after_the_amendment_does_not_count(self):
        self.contract()
        self.amend("2027-01-20T00:00:00Z", received_at="2027-01-15T00:00:00Z")
        self.invoice(("2027-01-01T00:00:00Z", "2027-01-15T00:00:00Z"), received_at="2027-01-15T00:00:00Z")
        self.passes(self.bundle())

    def test_an_extension_over_another_contract(self):
        self.contract()
        second = self.contract("C-2", term=(TERM[1], "2029-01-01T00:00:00Z"))
        i = self.amend("2028-01-01T00:00:01Z")
        self.refused(self.bundle(), "contract_overlap", i, "body.term_to",
                     says=f"[{TERM[0]}, 2028-01-01T00:00:01Z) overlaps the term of contract C-2 of t (entry {second}), "
                          f"[{TERM[1]}, 2029-01-01T00:00:00Z)")

    def test_an_extension_up_to_another_contract_passes(self):
        self.contract()
        self.contract("C-2", term=("2028-06-01T00:00:00Z", "2029-01-01T00:00:00Z"))
        self.amend("2028-06-01T00:00:00Z")
        self.passes(self.bundle())

    def test_another_tenants_contract_does_not_overlap(self):
        self.contract()
        self.contract("C-U", term=(TERM[1], "2029-01-01T00:00:00Z"), tenant="u")
        self.amend("2028-06-01T00:00:00Z")
        self.passes(self.bundle())

    def test_a_shortening_never_overlaps(self):
        self.contract()
        self.contract("C-2", term=(TERM[1], "2029-01-01T00:00:00Z"))
        self.amend("2027-06-01T00:00:00Z")
        self.amend("2028-06-01T00:00:00Z", name="C-2")
        self.passes(self.bundle())

    def test_an_extension_into_the_gap_a_shortening_left(self):
        self.contract()
        self.amend("2027-07-01T00:00:00Z")
        second = self.contract("C-2", term=("2027-09-01T00:00:00Z", TERM[1]), received_at=AMENDED_AT)  # as amended
        self.amend("2027-09-01T00:00:00Z")
        self.passes(self.bundle())
        i = self.amend("2027-10-01T00:00:00Z")
        self.refused(self.bundle(), "contract_overlap", i, "body.term_to", says=f"contract C-2 of t (entry {second})")

    def test_a_registration_is_compared_with_the_terms_as_amended(self):
        # Shortened: a contract may follow the new end. Extended: a contract may not start before it.
        self.contract()
        self.amend("2027-07-01T00:00:00Z")
        self.contract("C-2", term=("2027-07-01T00:00:00Z", TERM[1]), received_at=AMENDED_AT)
        self.passes(self.bundle())
        self.setUp()
        first = self.contract()
        self.amend("2028-06-01T00:00:00Z")
        i = self.contract("C-2", term=(TERM[1], "2029-01-01T00:00:00Z"), received_at=AMENDED_AT)
        self.refused(self.bundle(), "contract_overlap", i, "body.term_from",
                     says=f"contract C-1 of t (entry {first}), [{TERM[0]}, 2028-06-01T00:00:00Z)")

    def test_an_amendment_logged_after_a_registration_does_not_count_for_it(self):
        # The terms compared are those before the entry checked: C-2 overlapped C-1 when logged.
        self.contract()
        i = self.contract("C-2", term=("2027-07-01T00:00:00Z", TERM[1]), received_at=AMENDED_AT)
        self.amend("2027-07-01T00:00:00Z")
        self.refused(self.bundle(), "contract_overlap", i, "body.term_from")

    def test_the_order_of_the_rules(self):
        # unknown_tenant, unknown_contract, invalid_field (start), quantity_out_of_range,
        # invalid_field (the current end), price_in_past, price_in_invoiced_period,
        # contract_overlap: each case breaks later rules too.
        self.contract()
        i = self.amend("2026-01-01T00:00:00Z", name="C-9", tenant="v")
        self.refused(self.bundle(), "unknown_tenant", i, "body.tenant")
        self.setUp()
        self.contract()
        i = self.amend("2026-01-01T00:00:00Z", name="C-9")
        self.refused(self.bundle(), "unknown_contract", i, "body.contract")
        self.setUp()
        self.contract()
        i = self.amend("2026-06-01T00:00:00Z")  # also in the past
        self.refused(self.bundle(), "invalid_field", i, "body.term_to", says="not after the term's start")
        self.setUp()
        self.contract()
        self.contract("C-2", term=(TERM[1], "2029-01-01T00:00:00Z"))
        i = self.amend("2037-01-08T00:00:01Z")  # also over C-2
        self.refused(self.bundle(), "quantity_out_of_range", i, "body.term_to")
        self.setUp()
        self.contract(term=("2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"))
        i = self.amend("2027-01-01T00:00:00Z", received_at="2027-02-01T00:00:00Z")  # also in the past
        self.refused(self.bundle(), "invalid_field", i, "body.term_to", says="already ends at")
        self.setUp()
        self.contract()
        self.invoice(("2027-01-01T00:00:00Z", "2027-01-15T00:00:00Z"))
        i = self.amend("2027-01-10T00:00:00Z", received_at="2027-01-16T00:00:00Z")  # also invoiced
        self.refused(self.bundle(), "price_in_past", i, "body.term_to")
        self.setUp()
        self.contract(term=("2026-12-01T00:00:00Z", "2027-01-20T00:00:00Z"))
        self.contract("C-2", term=("2027-02-01T00:00:00Z", "2027-06-01T00:00:00Z"))
        self.invoice(("2026-12-01T00:00:00Z", "2027-01-10T00:00:00Z"))
        i = self.amend("2027-03-01T00:00:00Z", received_at="2027-01-11T00:00:00Z")  # also over C-2
        self.refused(self.bundle(), "price_in_invoiced_period", i, "body.term_to")

    def test_an_amendment_signed_by_a_node_key(self):
        # A ledger kind: signed by the log key, signer "ledger".
        self.contract()
        i = self.log.append("contract_amended", "node-a", producer.Key.from_byte(0x95), body(), AMENDED_AT)
        self.refused(self.bundle(), "key_not_allowed", i)

    def test_an_invoice_bundle_holds_the_tenants_amendments(self):
        # Section 14: an invoice's context holds its tenant's contract_amended entries, not
        # another tenant's; a certificate's context holds none.
        self.contract()
        self.contract("C-U", tenant="u")
        i = self.amend("2027-07-01T00:00:00Z")
        j = self.amend("2027-07-01T00:00:00Z", name="C-U", tenant="u")
        self.assert_invoice_context_is_the_tenants(i, j)

    def test_the_command_line_names_unknown_contract(self):
        self.contract()
        self.amend("2027-07-01T00:00:00Z", name="C-9")
        out = self.cli_fails_on_whole_log()
        self.assertTrue(out.startswith("FAIL: unknown_contract: entry 4 (bundle line 6): body.contract:"), out)

    # bodies (section 5.21): every failure is leaf_invalid, the ledger's code and field in the message

    def bad_body(self, b, code, field):
        self.contract()
        i = self.log.ledger("contract_amended", b, AMENDED_AT)
        r = self.refused(self.bundle(), "leaf_invalid", i)
        self.assertIn(f"{code}: {field}:", r.message)

    def test_bad_bodies_in_a_bundle(self):
        cases = [
            (body(reason=""), "invalid_field", "body.reason"),
            (body(reason=...), "malformed", "body.reason"),
            (body(term_from=TERM[0]), "malformed", "body.term_from"),
            (body(term_to="2027-07-01"), "invalid_field", "body.term_to"),
        ]
        for b, code, field in cases:
            with self.subTest(b):
                self.setUp()
                self.bad_body(b, code, field)


class ContractAmendmentBodies(unittest.TestCase):
    """check_envelope on contract_amended bodies: each rule's code and field (section 5.21)."""

    def code(self, b):
        return body_verdict("contract_amended", b, "gpuledger.test/contract-amendments")

    def test_codes(self):
        cases = [
            (body(), "PASS"),
            (body(contract="C/2027:a.b_c-d", tenant="t.2"), "PASS"),
            (body(reason="r"), "PASS"),
            (body(reason="r" * 500), "PASS"),
            (body(reason="\u4e2d" * 166 + "rr"), "PASS"),  # 500 bytes
            (body(reason="ended  early, \u00e0 la demande du client"), "PASS"),
            # members
            (body(tenant=...), ("malformed", "body.tenant")),
            (body(contract=...), ("malformed", "body.contract")),
            (body(term_to=...), ("malformed", "body.term_to")),
            (body(reason=...), ("malformed", "body.reason")),
            (body(term_from=TERM[0]), ("malformed", "body.term_from")),
            (body(note="x"), ("malformed", "body.note")),
            (body(reason=None), ("malformed", "body.reason")),
            (body(reason=5), ("malformed", "body.reason")),
            (body(term_to=1814400000), ("malformed", "body.term_to")),
            (body(contract=["C-1"]), ("malformed", "body.contract")),
            # ids and the timestamp
            (body(tenant="a b"), ("invalid_field", "body.tenant")),
            (body(tenant="ledger"), ("invalid_field", "body.tenant")),
            (body(contract="C 1"), ("invalid_field", "body.contract")),
            (body(contract="-C"), ("invalid_field", "body.contract")),
            (body(term_to="2027-07-01T00:00:00"), ("invalid_field", "body.term_to")),
            (body(term_to="2027-07-01T00:00:00.000Z"), ("invalid_field", "body.term_to")),
            (body(term_to="2027-02-30T00:00:00Z"), ("invalid_field", "body.term_to")),
            (body(term_to=""), ("invalid_field", "body.term_to")),
            # the reason: 1 to 500 bytes, no control characters, no surrounding white space
            (body(reason=""), ("invalid_field", "body.reason")),
            (body(reason="r" * 501), ("invalid_field", "body.reason")),
            (body(reason="\u4e2d" * 167), ("invalid_field", "body.reason")),  # 501 bytes
            (body(reason=" ended"), ("invalid_field", "body.reason")),
            (body(reason="ended "), ("invalid_field", "body.reason")),
            (body(reason="ended\u3000"), ("invalid_field", "body.reason")),
            (body(reason=" "), ("invalid_field", "body.reason")),
            (body(reason="ended\tearly"), ("invalid_field", "body.reason")),
            (body(reason="ended\nearly"), ("invalid_field", "body.reason")),
            (body(reason="ended\u0085early"), ("invalid_field", "body.reason")),
            (body(reason="ended\u007f"), ("invalid_field", "body.reason")),
            # the order: members, then tenant, contract, term_to, reason
            (body(tenant="a b", note="x"), ("malformed", "body.note")),
            (body(tenant="a b", contract="C 1"), ("invalid_field", "body.tenant")),
            (body(contract="C 1", term_to="x"), ("invalid_field", "body.contract")),
            (body(term_to="x", reason=""), ("invalid_field", "body.term_to")),
        ]
        for b, want in cases:
            with self.subTest(b):
                self.assertEqual(self.code(b), want)


class AmendedInvoices(LogBundleTestCase):
    """An invoice's contract lines with the contracts as amended below its size (RATING.md,
    "Amendments"): tenant t's contract C-A, monthly by calendar from 1 January 2027 for a year,
    rent 3100 in advance, setup 500 once, a commitment of 1000 a month; on 10 February its term
    is shortened to 16 March (entry 4), on 11 February extended to 1 April (entry 5)."""

    ORIGIN = "gpuledger.test/amended-invoices"
    TERM_A = ("2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z")
    SHORT = "2027-03-16T00:00:00Z"
    LONGER = "2027-04-01T00:00:00Z"

    def setUp(self):
        super().setUp()
        self.lk = producer.Key.from_byte(0x96)
        log = self.log = producer.Log(self.lk, self.ORIGIN)
        at = "2026-12-01T00:00:00Z"
        log.policy(at)      # 0
        log.tenant("t", at)  # 1
        log.tenant("u", at)  # 2
        log.contract("t", "C-A", self.TERM_A[0], self.TERM_A[1], at,  # 3
                     fees=[producer.fee("Rent", "3100"), producer.fee("Setup", "500", "once", "support")],
                     commitment="1000")
        log.amend("t", "C-A", self.SHORT, "2027-02-10T00:00:00Z", reason="Ended early")  # 4
        log.amend("t", "C-A", self.LONGER, "2027-02-11T00:00:00Z", reason="Extended to the quarter's end")  # 5

    def run_invoice(self, inv):
        size = inv["checkpoint_size"]
        lines = producer.make_bundle(self.log, size, list(range(size)), [], {"invoice": inv["number"]})
        bundle = self.write("bundle.ndjson", producer.bundle_bytes(lines))
        path = self.write("invoice.json", json.dumps(inv, ensure_ascii=False))
        return gv.verify_bundle(bundle, gv.parse_verifier_key(self.log.verifier_key()), path)

    def invoice(self, size, period, lines, committed, number="INV-000001"):
        """An invoice of t over `period` at log size `size` with contract `lines` and no usage: the
        true-up is the whole `committed`."""
        lines = lines + [{"kind": "true_up", "description": "Minimum commitment true-up, contract C-A",
                          "region": "cn-east", "contract": "C-A", "quantity": "1", "unit": "period",
                          "unit_price": gv.canonical_str(Fraction(committed)), "net": committed, "tax_rate": "0", "tax": "0.00",
                          "gross": committed, "records": 0}]
        total = str(sum(Decimal(l["net"]) for l in lines))
        return {"format": "gpuledger-invoice/v2", "number": number, "tenant": "t",
                "period": {"from": period[0], "to": period[1]}, "currency": "CNY",
                "issued_at": "2027-04-01T01:00:00Z", "log_origin": self.ORIGIN, "checkpoint_size": size,
                "checkpoint_root": producer.b64(self.log.root(size)),
                "issuer": {"name": self.ORIGIN, "address": []}, "bill_to": {"tenant": "t", "name": "t", "address": []},
                "payment_terms_days": 30, "due_at": "2027-05-01T01:00:00Z", "lines": lines,
                "commitments": [{"contract": "C-A", "committed": committed, "drawn": "0.00", "true_up": committed}],
                "net_total": total, "tax_total": "0.00", "total": total}

    @staticmethod
    def fee(description, category, timing, service, quantity, unit_price, net):
        return {"kind": "fee", "description": description, "region": "cn-east", "contract": "C-A",
                "category": category, "timing": timing, "service_period": {"from": service[0], "to": service[1]},
                "quantity": quantity, "unit": "period", "unit_price": unit_price, "net": net, "tax_rate": "0",
                "tax": "0.00", "gross": net, "records": 0}

    def january(self, size, term_to):
        """January at `size`: setup 500.00 for the term as amended there, rent 3100.00, true-up 1000.00."""
        jan = ("2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z")
        return self.invoice(size, jan, [self.fee("Setup", "support", "once", (self.TERM_A[0], term_to), "1", "500",
                                                 "500.00"),
                                        self.fee("Rent", "compute", "advance", jan, "1", "3100", "3100.00")],
                            "1000.00")

    def march(self, size, term_to, quantity, rent, committed):
        mar = ("2027-03-01T00:00:00Z", "2027-04-01T00:00:00Z")
        return self.invoice(size, mar, [self.fee("Rent", "compute", "advance", ("2027-03-01T00:00:00Z", term_to),
                                                 quantity, "3100", rent)], committed, number="INV-000002")

    def test_an_invoice_issued_before_the_amendment_keeps_the_old_term(self):
        # At size 4 the log holds no amendment: the once fee's service period is the registered term.
        self.assertPass(self.run_invoice(self.january(4, self.TERM_A[1])))
        self.assertFail(self.run_invoice(self.january(4, self.SHORT)), "claim_mismatch",
                        "lines[0].service_period")

    def test_an_invoice_issued_after_the_amendment_uses_the_amended_term(self):
        self.assertPass(self.run_invoice(self.january(5, self.SHORT)))
        self.assertFail(self.run_invoice(self.january(5, self.TERM_A[1])), "claim_mismatch",
                        "lines[0].service_period")
        self.assertPass(self.run_invoice(self.january(6, self.LONGER)))

    def test_the_last_fee_of_a_shortened_term_is_prorated(self):
        # Shortened to 16 March: March's rent is for [1 March, 16 March), 15 of 31 days:
        # 3100 × 15/31 = 1500.00 (quantity 0.483871), committed 1000 × 15/31 = 483.870… → 483.87.
        r = self.run_invoice(self.march(5, self.SHORT, "0.483871", "1500.00", "483.87"))
        self.assertPass(r)
        self.assertEqual(r.summary["invoice"]["contracts"], ["C-A"])
        self.assertFail(self.run_invoice(self.march(5, self.LONGER, "1", "3100.00", "1000.00")), "claim_mismatch",
                        "lines[0].gross")

    def test_the_latest_amendment_counts(self):
        # Before any amendment and after the extension to 1 April, March is a whole month.
        self.assertPass(self.run_invoice(self.march(4, self.LONGER, "1", "3100.00", "1000.00")))
        self.assertPass(self.run_invoice(self.march(6, self.LONGER, "1", "3100.00", "1000.00")))
        self.assertFail(self.run_invoice(self.march(6, self.SHORT, "0.483871", "1500.00", "483.87")),
                        "claim_mismatch", "lines[0].gross")

    def test_the_bundle_of_the_amended_invoice_passes(self):
        r = self.run_invoice(self.march(6, self.LONGER, "1", "3100.00", "1000.00"))
        self.assertPass(r)
        self.assertEqual(r.summary["entries_by_kind"]["contract_amended"], 2)



class FixtureInvoice(RustInvoiceFixture):
    """tests/fixtures/amendment/ (invoice.json, bundle.ndjson, verifier_key.txt), written by the
    Rust ledger (tests/amendments.rs): acme's contract C-1 (3100 a month in advance, a minimum
    spend of 1000 a month) ended early on 2027-03-20 by a contract_amended entry, and its
    successor C-2 (2000 a month) from that instant; the March invoice bills C-1's 19 days
    (1900.00, a commitment of 612.90 trued up by 427.90 above 185.00 of usage) and C-2's 12
    (774.19). Recomputed here from the bundle, independently of Rust."""

    def fixture_dir(self):
        return os.path.join(REPO, "tests", "fixtures", "amendment")

    def test_passes_with_the_amended_term(self):
        r = self.check(self.invoice)
        self.assertPass(r)
        self.assertGreaterEqual(r.summary["entries_by_kind"].get("contract_amended", 0), 1)
        fee = self.invoice["lines"][1]
        self.assertEqual((fee["contract"], fee["net"], fee["service_period"]["to"]),
                         ("C-1", "1900.00", "2027-03-20T00:00:00Z"))
        self.assertEqual(self.invoice["commitments"][0]["true_up"], "427.90")

    def test_a_fee_billed_to_the_old_term_fails(self):
        inv = copy.deepcopy(self.invoice)
        line = inv["lines"][1]
        line["service_period"]["to"] = "2027-04-01T00:00:00Z"
        self.assertFail(self.check(inv), "claim_mismatch", "lines[1].service_period")

    def test_an_altered_amendment_fails_at_its_signature(self):
        lines = [l.replace(b"2027-03-20T00:00:00Z", b"2027-03-25T00:00:00Z") if b"contract_amended" in l else l
                 for l in self.bundle_lines]
        self.assertNotEqual(lines, self.bundle_lines)
        path = self.write("altered.ndjson", b"".join(lines))
        # Entry 9 is the amendment (tests/amendments.rs logs it after 9 entries).
        self.assertFail(self.check(self.invoice, path), "entry_signature", "entry 9 (bundle line 10)")


if __name__ == "__main__":
    unittest.main()
