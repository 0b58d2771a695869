"""Contracts (issue #28): the ledger-written `contract_registered` entry (PROTOCOL.md section
5.19) and the contract rules of section 6.7 that a bundle rechecks.

An invoice's bundle holds its tenant's `contract_registered` entries in its context (section
14). In order, a contract names a registered tenant (`unknown_tenant`) and a contract id no
earlier entry of the bundle registered (`already_registered`); its term starts no earlier than
its arrival minus the policy's `max_future_skew_seconds` (`price_in_past`) and no earlier than
the end of any earlier invoiced period of its tenant (`price_in_invoiced_period`), and overlaps
no earlier contract of its tenant (`contract_overlap`, half-open terms). Body rules are
`leaf_invalid`, with the ledger's code and field in the message."""

import copy
import unittest

from support import LogBundleTestCase, body_verdict, changed, gv, producer

FEES = [producer.fee("Bare-metal 8\u00d7H100 node, monthly", "120000"),
        producer.fee("Rack setup", "800", "once", "support")]
REGISTERED_AT = "2026-12-01T00:00:00Z"  # after the tenants' registrations: receive times never decrease
TERM = ("2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z")


def body(**changes):
    """A valid contract_registered body of tenant t (section 5.19's example, its term TERM), with
    `changes` applied (a value of ... removes the member)."""
    out = {"tenant": "t", "contract": "C-1", "currency": "CNY", "region": "cn-east", "term_from": TERM[0],
           "term_to": TERM[1], "billing_period": "month", "billing_anchor": "calendar",
           "fees": copy.deepcopy(FEES), "commitment": "5000"}
    changed(out, changes)
    return out


def fees(n):
    return [producer.fee(f"fee {i}", "1") for i in range(n)]


class Contracts(LogBundleTestCase):
    """The base log: 0 log_policy (skew 300 s), 1 tenant_registered t, 2 tenant_registered u; the
    tests append contracts (and invoices) received from REGISTERED_AT on. `bundle()` holds every
    entry, as an invoice's bundle (all context)."""

    ORIGIN = "gpuledger.test/contracts"

    def setUp(self):
        super().setUp()
        self.lk = producer.Key.from_byte(0x91)
        log = self.log = producer.Log(self.lk, self.ORIGIN)
        log.policy("2026-10-01T00:00:00Z")      # 0
        log.tenant("t", "2026-10-01T00:00:00Z")  # 1
        log.tenant("u", "2026-10-01T00:00:00Z")  # 2

    def contract(self, name="C-1", term=TERM, tenant="t", received_at=REGISTERED_AT, fees=FEES,
                 commitment="5000", **kw):
        return self.log.contract(tenant, name, term[0], term[1], received_at, fees=copy.deepcopy(fees),
                                 commitment=commitment, **kw)

    def test_reasons_and_kinds_are_known(self):
        self.assertIn("contract_overlap", gv.REASONS)
        self.assertIn("contract_overlap", gv.ADMISSION_REASONS)
        for kinds in (gv.KINDS, gv.LEDGER_KINDS, gv.ROLE_KINDS["ledger"], gv.TENANT_LEDGER_KINDS):
            self.assertIn("contract_registered", kinds)
        self.assertNotIn("contract_registered", gv.RECORD_KINDS)
        self.assertEqual((gv.MAX_CONTRACT_TERM_SECONDS, gv.MAX_CONTRACT_FEES, gv.MAX_FEE_NAME_BYTES),
                         (316224000, 16, 100))

    # admission in a bundle

    def test_a_contract_passes(self):
        self.contract()
        r = self.bundle()
        self.passes(r)
        self.assertEqual(r[0].summary["entries_by_kind"]["contract_registered"], 1)

    def test_fees_only_and_commitment_only_pass(self):
        self.contract(commitment=None)
        self.contract("C-2", term=("2028-01-01T00:00:00Z", "2029-01-01T00:00:00Z"), fees=None)
        self.passes(self.bundle())

    def test_the_section_5_19_example_passes(self):
        self.log.ledger("contract_registered", dict(body(tenant="t", contract="C-acme-2027",
                                                         term_from="2027-01-15T00:00:00Z",
                                                         term_to="2028-01-15T00:00:00Z")), REGISTERED_AT)
        self.passes(self.bundle())

    def test_unknown_tenant(self):
        i = self.contract(tenant="v")
        self.refused(self.bundle(), "unknown_tenant", i, "body.tenant", says="'v'")

    def test_tenant_registered_after_the_contract(self):
        i = self.contract(tenant="v")
        self.log.tenant("v", "2026-12-02T00:00:00Z")
        self.refused(self.bundle(), "unknown_tenant", i, "body.tenant")

    def test_a_contract_id_registered_twice(self):
        first = self.contract()
        i = self.contract(term=("2028-01-01T00:00:00Z", "2029-01-01T00:00:00Z"))  # no overlap: the id alone
        self.refused(self.bundle(), "already_registered", i, "body.contract",
                     says=f"'C-1' is already registered at entry {first}")

    def test_a_contract_id_of_another_tenant(self):
        # "Registered at most once in the log", whoever the tenant (here the bundle holds both).
        first = self.contract(tenant="u")
        i = self.contract()
        self.refused(self.bundle(), "already_registered", i, "body.contract", says=f"entry {first}")

    def test_a_term_from_in_the_past(self):
        # The skew in force is 300 s: received_at - 300 s passes, one second more does not.
        self.contract(term=("2026-11-30T23:55:00Z", "2027-01-01T00:00:00Z"))
        self.passes(self.bundle())
        self.setUp()
        i = self.contract(term=("2026-11-30T23:54:59Z", "2027-01-01T00:00:00Z"))
        self.refused(self.bundle(), "price_in_past", i, "body.term_from", says="301 s before received_at")

    def test_a_term_from_in_the_past_under_the_policy_in_force(self):
        self.log.policy("2026-11-01T00:00:00Z", max_future_skew_seconds=3600)
        self.contract(term=("2026-11-30T23:00:00Z", "2027-01-01T00:00:00Z"))
        self.passes(self.bundle())
        i = self.contract("C-2", term=("2026-11-30T23:59:59Z", "2027-01-01T00:00:00Z"), tenant="u",
                          received_at="2026-12-01T01:00:00Z")  # 3601 s
        self.refused(self.bundle(), "price_in_past", i, "body.term_from", says="(max_future_skew_seconds 3600)")
        self.setUp()
        self.log.policy("2026-11-01T00:00:00Z", max_future_skew_seconds=0)
        i = self.contract(term=("2026-11-30T23:59:59Z", "2027-01-01T00:00:00Z"))
        self.refused(self.bundle(), "price_in_past", i, "body.term_from", says="1 s before received_at")

    def invoice(self, tenant="t", number="INV-000001", period=("2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z"),
                received_at=REGISTERED_AT):
        return self.log.invoice(number, tenant, period[0], period[1], 3, received_at)

    def test_a_term_from_inside_an_invoiced_period(self):
        inv = self.invoice()
        i = self.contract(term=("2026-11-30T23:59:00Z", "2027-01-01T00:00:00Z"), received_at="2026-12-01T00:01:00Z")
        self.refused(self.bundle(), "price_in_invoiced_period", i, "body.term_from",
                     says=f"2026-12-01T00:00:00Z, the end of the period invoiced to t at entry {inv}")

    def test_a_term_from_at_the_end_of_an_invoiced_period_passes(self):
        self.invoice()
        self.contract(term=("2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"), received_at="2026-12-01T00:01:00Z")
        self.passes(self.bundle())

    def test_a_term_from_before_an_invoiced_period(self):
        # "Not before the period_to of any earlier invoice_issued": a term that starts before an
        # invoiced period (not inside it) would bill that period too.
        self.log.policy("2026-11-01T00:00:00Z", max_future_skew_seconds=3600)
        inv = self.invoice(period=("2026-12-01T00:30:00Z", "2026-12-01T00:40:00Z"), received_at="2026-12-01T00:40:00Z")
        i = self.contract(term=("2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"), received_at="2026-12-01T00:41:00Z")
        self.refused(self.bundle(), "price_in_invoiced_period", i, "body.term_from", says=f"entry {inv}")

    def test_another_tenants_invoiced_period_does_not_count(self):
        self.invoice(tenant="u")
        self.contract(term=("2026-11-30T23:59:00Z", "2027-01-01T00:00:00Z"), received_at="2026-12-01T00:01:00Z")
        self.passes(self.bundle())

    def test_an_invoice_logged_after_the_contract_does_not_count(self):
        self.contract(term=("2026-11-30T23:59:00Z", "2027-01-01T00:00:00Z"), received_at="2026-12-01T00:00:00Z")
        self.invoice(received_at="2026-12-01T00:01:00Z")
        self.passes(self.bundle())

    def test_overlapping_terms(self):
        cases = [
            TERM,                                                # the same term
            ("2027-03-01T00:00:00Z", "2027-04-01T00:00:00Z"),    # inside
            ("2026-12-01T00:00:00Z", "2028-06-01T00:00:00Z"),    # around
            ("2026-12-01T00:00:00Z", "2027-01-01T00:00:01Z"),    # one second at the start
            ("2027-12-31T23:59:59Z", "2029-01-01T00:00:00Z"),    # one second at the end
        ]
        for term in cases:
            with self.subTest(term):
                self.setUp()
                first = self.contract()
                i = self.contract("C-2", term=term, received_at="2026-12-01T00:00:01Z")
                self.refused(self.bundle(), "contract_overlap", i, "body.term_from",
                             says=f"overlaps the term of contract C-1 of t (entry {first}), [{TERM[0]}, {TERM[1]})")

    def test_adjacent_terms_pass(self):
        # Half-open terms: one ending at T and one starting at T do not overlap, in either order.
        self.contract()
        self.contract("C-2", term=(TERM[1], "2029-01-01T00:00:00Z"))
        self.contract("C-3", term=("2026-12-01T00:00:00Z", TERM[0]))
        self.passes(self.bundle())

    def test_another_tenants_contract_does_not_overlap(self):
        self.contract()
        self.contract("C-2", tenant="u")
        self.passes(self.bundle())

    def test_the_overlap_names_the_contract_it_overlaps(self):
        self.contract()
        second = self.contract("C-2", term=(TERM[1], "2029-01-01T00:00:00Z"))
        i = self.contract("C-3", term=("2028-06-01T00:00:00Z", "2028-07-01T00:00:00Z"))
        self.refused(self.bundle(), "contract_overlap", i, "body.term_from", says=f"contract C-2 of t (entry {second})")

    def test_the_order_of_the_rules(self):
        # unknown_tenant, already_registered, price_in_past, price_in_invoiced_period,
        # contract_overlap: each case breaks every rule from its own on.
        self.contract()
        i = self.contract(tenant="v", term=("2026-11-01T00:00:00Z", "2027-02-01T00:00:00Z"))
        self.refused(self.bundle(), "unknown_tenant", i, "body.tenant")
        self.setUp()
        self.contract()
        i = self.contract(term=("2026-11-01T00:00:00Z", "2027-02-01T00:00:00Z"))
        self.refused(self.bundle(), "already_registered", i, "body.contract")
        self.setUp()
        self.invoice()
        self.contract()
        i = self.contract("C-2", term=("2026-11-01T00:00:00Z", "2027-02-01T00:00:00Z"))
        self.refused(self.bundle(), "price_in_past", i, "body.term_from")
        self.setUp()
        self.contract(term=("2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"))
        self.invoice(received_at="2026-12-01T00:00:00Z")
        i = self.contract("C-2", term=("2026-11-30T23:59:00Z", "2027-02-01T00:00:00Z"),
                          received_at="2026-12-01T00:01:00Z")
        self.refused(self.bundle(), "price_in_invoiced_period", i, "body.term_from")

    def test_a_contract_signed_by_a_node_key(self):
        # A ledger kind: signed by the log key, signer "ledger".
        i = self.log.append("contract_registered", "node-a", producer.Key.from_byte(0x92), body(), REGISTERED_AT)
        self.refused(self.bundle(), "key_not_allowed", i)

    def test_an_invoice_bundle_holds_the_tenants_contracts(self):
        # Section 14: an invoice's context holds its tenant's contract_registered entries, not
        # another tenant's; a certificate's context holds none.
        i = self.contract()
        j = self.contract("C-2", tenant="u")
        self.assert_invoice_context_is_the_tenants(i, j)

    def test_the_command_line_names_contract_overlap(self):
        self.contract()
        self.contract("C-2", received_at="2026-12-01T00:00:01Z")
        out = self.cli_fails_on_whole_log()
        self.assertTrue(out.startswith("FAIL: contract_overlap: entry 4 (bundle line 6): body.term_from:"),
                        out)

    # bodies (section 5.19): every failure is leaf_invalid, the ledger's code and field in the message

    def bad_body(self, b, code, field):
        i = self.log.ledger("contract_registered", b, REGISTERED_AT)
        r = self.refused(self.bundle(), "leaf_invalid", i)
        self.assertIn(f"{code}: {field}:", r.message)

    def test_term_to_not_after_term_from(self):
        for term_to in (TERM[0], "2026-12-31T23:59:59Z"):
            with self.subTest(term_to):
                self.setUp()
                self.bad_body(body(term_to=term_to), "invalid_field", "body.term_to")

    def test_a_term_of_3660_days_passes_one_second_more_does_not(self):
        # 2027-01-01 + 3660 days = 2037-01-08 (2028, 2032 and 2036 are leap years).
        self.log.ledger("contract_registered", body(term_to="2037-01-08T00:00:00Z"), REGISTERED_AT)
        self.passes(self.bundle())
        self.setUp()
        self.bad_body(body(term_to="2037-01-08T00:00:01Z"), "quantity_out_of_range", "body.term_to")

    def test_empty_fees(self):
        self.bad_body(body(fees=[]), "invalid_field", "body.fees")

    def test_16_fees_pass_17_do_not(self):
        self.log.ledger("contract_registered", body(fees=fees(16)), REGISTERED_AT)
        self.passes(self.bundle())
        self.setUp()
        self.bad_body(body(fees=fees(17)), "quantity_out_of_range", "body.fees")

    def test_a_bad_timing(self):
        b = body()
        b["fees"][1]["timing"] = "monthly"
        self.bad_body(b, "invalid_field", "body.fees[1].timing")

    def test_a_bad_category(self):
        b = body()
        b["fees"][1]["category"] = "Compute"
        self.bad_body(b, "invalid_field", "body.fees[1].category")

    def test_a_zero_amount(self):
        for amount in ("0", "0.0000"):
            with self.subTest(amount):
                self.setUp()
                b = body()
                b["fees"][0]["amount"] = amount
                self.bad_body(b, "quantity_out_of_range", "body.fees[0].amount")
        self.setUp()
        self.bad_body(body(commitment="0"), "quantity_out_of_range", "body.commitment")

    def test_an_amount_of_10_12_passes_above_does_not(self):
        b = body(commitment="1000000000000")
        b["fees"][1]["amount"] = "1000000000000"
        self.log.ledger("contract_registered", b, REGISTERED_AT)
        self.passes(self.bundle())
        self.setUp()
        b = body()
        b["fees"][1]["amount"] = "1000000000000.0001"
        self.bad_body(b, "quantity_out_of_range", "body.fees[1].amount")
        self.setUp()
        self.bad_body(body(commitment="1000000000001"), "quantity_out_of_range", "body.commitment")

    def test_neither_fees_nor_commitment(self):
        self.bad_body(body(fees=..., commitment=...), "invalid_field", "body.fees")

    def test_an_unknown_member(self):
        self.bad_body(body(plan="gold"), "malformed", "body.plan")
        self.setUp()
        b = body()
        b["fees"][0]["unit"] = "month"
        self.bad_body(b, "malformed", "body.fees[0].unit")

    def test_a_fee_name_that_is_no_display_text(self):
        for name in ("", "   ", "x" * 101, "\u00e9" * 50 + "x", "Rack\tsetup", "Rack\nsetup",
                     "evil\u202efdp", "a\u200bb", "\u3164", "tag\U000e0001"):
            with self.subTest(repr(name)):
                self.setUp()
                b = body()
                b["fees"][1]["name"] = name
                self.bad_body(b, "invalid_field", "body.fees[1].name")

    def test_a_fee_name_of_display_text_passes(self):
        b = body()
        b["fees"][0]["name"] = "x" * 100
        b["fees"][1]["name"] = ("\u5305\u6708 \u00b7 \u5317\u4eac\u7b97\u529b "  # CJK
                                "\u0634\u0631\u06a9\u062a\u200c\u0647\u0627 "  # Persian, with ZWNJ
                                "\U0001f469\u200d\U0001f4bb")  # an emoji sequence, with ZWJ
        self.log.ledger("contract_registered", b, REGISTERED_AT)
        self.passes(self.bundle())


class ContractBodies(unittest.TestCase):
    """check_envelope on contract_registered bodies: each rule's code and field (section 5.19)."""

    def code(self, b):
        return body_verdict("contract_registered", b, "gpuledger.test/contracts")

    def with_fee(self, i, **changes):
        b = body()
        changed(b["fees"][i], changes)
        return b

    def test_codes(self):
        cases = [
            (body(), "PASS"),
            (body(fees=...), "PASS"),
            (body(commitment=...), "PASS"),
            (body(billing_period="quarter", billing_anchor="anniversary"), "PASS"),
            (body(billing_period="year"), "PASS"),
            (body(region="ledger2", contract="C/2027:a.b_c-d"), "PASS"),
            (body(fees=fees(16)), "PASS"),
            (body(commitment="0.0001"), "PASS"),
            (body(term_from="2027-01-01T00:00:00Z", term_to="2027-01-01T00:00:01Z"), "PASS"),
            # members
            (body(tenant=...), ("malformed", "body.tenant")),
            (body(contract=...), ("malformed", "body.contract")),
            (body(term_to=...), ("malformed", "body.term_to")),
            (body(billing_anchor=...), ("malformed", "body.billing_anchor")),
            (body(lease="L"), ("malformed", "body.lease")),
            (body(fees=None), ("malformed", "body.fees")),
            (body(fees="x"), ("malformed", "body.fees")),
            (body(commitment=None), ("malformed", "body.commitment")),
            (body(commitment=5000), ("malformed", "body.commitment")),
            (body(term_from=None), ("malformed", "body.term_from")),
            (body(fees=["x"]), ("malformed", "body.fees[0]")),
            (self.with_fee(1, name=...), ("malformed", "body.fees[1].name")),
            (self.with_fee(1, amount=800), ("malformed", "body.fees[1].amount")),
            (self.with_fee(1, timing=None), ("malformed", "body.fees[1].timing")),
            (self.with_fee(0, extra="x"), ("malformed", "body.fees[0].extra")),
            # ids, currency, timestamps
            (body(tenant="a b"), ("invalid_field", "body.tenant")),
            (body(tenant="ledger"), ("invalid_field", "body.tenant")),
            (body(contract="-C"), ("invalid_field", "body.contract")),
            (body(currency="cny"), ("invalid_field", "body.currency")),
            (body(currency="CNYX"), ("invalid_field", "body.currency")),
            (body(region="cn east"), ("invalid_field", "body.region")),
            (body(term_from="2027-01-01"), ("invalid_field", "body.term_from")),
            (body(term_to="2027-02-30T00:00:00Z"), ("invalid_field", "body.term_to")),
            # the term
            (body(term_to=TERM[0]), ("invalid_field", "body.term_to")),
            (body(term_from=TERM[1], term_to=TERM[0]), ("invalid_field", "body.term_to")),
            (body(term_to="2037-01-08T00:00:00Z"), "PASS"),
            (body(term_to="2037-01-08T00:00:01Z"), ("quantity_out_of_range", "body.term_to")),
            # enumerations
            (body(billing_period="week"), ("invalid_field", "body.billing_period")),
            (body(billing_period="Month"), ("invalid_field", "body.billing_period")),
            (body(billing_anchor="first"), ("invalid_field", "body.billing_anchor")),
            (self.with_fee(0, timing="monthly"), ("invalid_field", "body.fees[0].timing")),
            (self.with_fee(0, category="gpu"), ("invalid_field", "body.fees[0].category")),
            # fees
            (body(fees=[]), ("invalid_field", "body.fees")),
            (body(fees=[], commitment=...), ("invalid_field", "body.fees")),
            (body(fees=fees(17)), ("quantity_out_of_range", "body.fees")),
            (body(fees=fees(17) + ["x"]), ("malformed", "body.fees[17]")),  # shape before the count
            (self.with_fee(1, name=""), ("invalid_field", "body.fees[1].name")),
            (self.with_fee(1, name=" \u3000 "), ("invalid_field", "body.fees[1].name")),
            (self.with_fee(1, name="x" * 101), ("invalid_field", "body.fees[1].name")),
            (self.with_fee(1, name="\u4e2d" * 33 + "x"), "PASS"),  # 100 bytes
            (self.with_fee(1, name="\u4e2d" * 34), ("invalid_field", "body.fees[1].name")),  # 102 bytes
            (self.with_fee(1, name=" Rack setup "), "PASS"),  # white space around: allowed in display text
            (self.with_fee(1, name="a\u0085b"), ("invalid_field", "body.fees[1].name")),
            (self.with_fee(1, name="a\u2028b"), ("invalid_field", "body.fees[1].name")),
            (self.with_fee(1, name="a\u00adb"), ("invalid_field", "body.fees[1].name")),
            (self.with_fee(1, name="a\ufeffb"), ("invalid_field", "body.fees[1].name")),
            (self.with_fee(1, name="a\u200cb\u200dc"), "PASS"),
            (self.with_fee(1, name="a\u202fb"), "PASS"),  # narrow no-break space: white space, shown
            (self.with_fee(0, amount="0"), ("quantity_out_of_range", "body.fees[0].amount")),
            (self.with_fee(0, amount="1000000000000"), "PASS"),
            (self.with_fee(0, amount="1000000000000.0001"), ("quantity_out_of_range", "body.fees[0].amount")),
            (self.with_fee(0, amount="1.00001"), ("invalid_field", "body.fees[0].amount")),
            (self.with_fee(0, amount="01"), ("invalid_field", "body.fees[0].amount")),
            (self.with_fee(0, amount="1e3"), ("invalid_field", "body.fees[0].amount")),
            (self.with_fee(0, amount="-5"), ("negative_quantity", "body.fees[0].amount")),
            # the commitment
            (body(commitment="0"), ("quantity_out_of_range", "body.commitment")),
            (body(commitment="1000000000000.0001"), ("quantity_out_of_range", "body.commitment")),
            (body(commitment="5000.00001"), ("invalid_field", "body.commitment")),
            (body(fees=..., commitment=...), ("invalid_field", "body.fees")),
            # the order: members, the fees' shape, then the table's order
            (body(tenant="a b", fees=["x"]), ("malformed", "body.fees[0]")),
            (body(tenant="a b", contract="-C"), ("invalid_field", "body.tenant")),
            (body(contract="-C", currency="x"), ("invalid_field", "body.contract")),
            (body(currency="x", region="-r"), ("invalid_field", "body.currency")),
            (body(region="-r", term_from="x"), ("invalid_field", "body.region")),
            (body(term_to=TERM[0], billing_period="week"), ("invalid_field", "body.term_to")),
            (body(billing_period="week", billing_anchor="x"), ("invalid_field", "body.billing_period")),
            (body(billing_anchor="x", fees=[]), ("invalid_field", "body.billing_anchor")),
            (body(fees=[], commitment="0"), ("invalid_field", "body.fees")),
            (self.with_fee(0, name="", amount="0", timing="x"), ("invalid_field", "body.fees[0].name")),
            (self.with_fee(0, amount="0", timing="x"), ("quantity_out_of_range", "body.fees[0].amount")),
            (self.with_fee(0, timing="x", category="y"), ("invalid_field", "body.fees[0].timing")),
            (dict(self.with_fee(1, category="y"), commitment="0"), ("invalid_field", "body.fees[1].category")),
        ]
        for b, want in cases:
            with self.subTest(b):
                self.assertEqual(self.code(b), want)

    def test_display_text(self):
        # core::ids `check_display_text`'s table, at the edges of every refused range.
        for c in ("\u00a0", "\u2027", "\u202f", "\u2065", "\u2070", "\ufffc", "\u200c", "\u200d"):
            self.assertIsNone(gv.display_char_refusal(c), f"U+{ord(c):04X}")
        for c in ("\u0000", "\u001f", "\u007f", "\u0080", "\u009f", "\u2028", "\u2029", "\u061c", "\u200e",
                  "\u200f", "\u202a", "\u202e", "\u2066", "\u2069", "\u00ad", "\u034f", "\u180e", "\u200b",
                  "\u2060", "\u2064", "\u206a", "\u206f", "\ufeff", "\ufff9", "\ufffb", "\u115f", "\u1160",
                  "\u3164", "\uffa0", "\U000e0000", "\U000e007f", "\ud800"):
            self.assertIsNotNone(gv.display_char_refusal(c), f"U+{ord(c):04X}")
        why = gv.display_text_refusal("ab\u202ec", 200)
        self.assertIn("character 3", why)
        self.assertIn("U+202E", why)
        self.assertIsNone(gv.display_text_refusal("a" * 200, 200))
        self.assertIsNotNone(gv.display_text_refusal("a" * 201, 200))
        self.assertIsNotNone(gv.display_text_refusal("", 200))
        self.assertIsNotNone(gv.display_text_refusal("   ", 200))
        for ok in ("Acme GPU Ltd", "\u5317\u4eac\u7b97\u529b\u79d1\u6280\u6709\u9650\u516c\u53f8",
                   "M\u00fcller & S\u00f6hne GmbH", "\u00a0No-break space"):
            self.assertIsNone(gv.display_text_refusal(ok, 200), ok)


if __name__ == "__main__":
    unittest.main()
