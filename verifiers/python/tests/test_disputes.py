"""Disputes without billing (issue #27 item 5): the ledger-written `record_excluded` entry
(PROTOCOL.md section 5.17) and the dispute rules of section 6.7 that a bundle can recheck.

An invoice's bundle holds its tenant's `record_excluded` entries in its context (section 14),
and its records after the context; so at a `record_excluded` entry the verifier has not read the
record it names. It rechecks the parties (`unknown_tenant`) and that no earlier exclusion names
the same entry (`already_excluded`); `unknown_record` and `record_invoiced` need the record and
are left to verify-log (and the ledger)."""

import copy
import unittest

from support import LogBundleTestCase, changed, gv, producer

N1_GPUS = producer.node_gpus({"H100": 8}, prefix="GPU-n1")
EXCLUDED_AT = "2026-11-06T00:00:00Z"  # after the records' received_at: receive times never decrease
REASON = "meter fault on n1, confirmed by the operator"


class Disputes(LogBundleTestCase):
    """The base log: 0 log_policy, 1 tenant_registered t, 2 node_registered n1 (r1, 8 H100), 3
    node-a's key (n1, r1), 4 lease L of t (all of n1), 5 and 6 gpu_usage of t under L; the test
    appends exclusions. `bundle()` holds every entry, as an invoice's bundle (context: every
    entry but the records)."""

    ORIGIN = "gpuledger.test/disputes"

    def setUp(self):
        super().setUp()
        self.lk, self.na = producer.Key.from_byte(0x71), producer.Key.from_byte(0x72)
        log = self.log = producer.Log(self.lk, self.ORIGIN)
        log.policy("2026-10-01T00:00:00Z")                                                            # 0
        log.tenant("t", "2026-10-01T00:00:00Z")                                                       # 1
        log.node("n1", "r1", "2026-10-01T00:00:00Z", gpus=N1_GPUS, max_watts_per_gpu="700")           # 2
        log.register("node-a", self.na, "node", "2026-10-01T00:00:00Z", regions=["r1"], nodes=["n1"])  # 3
        log.lease("L", "t", "on_demand", "2026-10-01T00:00:00Z", [producer.lease_gpus("n1", range(8))])  # 4
        self.r5 = self.usage("2026-11-05T00:00:00Z")                                                  # 5
        self.r6 = self.usage("2026-11-05T01:00:00Z")                                                  # 6

    def usage(self, start):
        return self.log.gpu_usage("node-a", self.na, "t", "r1", "H100", "8", start, 3600, node="n1", lease="L")

    def exclude(self, entry, tenant="t", reason=REASON, received_at=EXCLUDED_AT):
        return self.log.exclude(tenant, entry, reason, received_at)

    def test_reasons_are_known(self):
        for reason in ("unknown_record", "already_excluded", "record_invoiced"):
            self.assertIn(reason, gv.REASONS)
            self.assertIn(reason, gv.ADMISSION_REASONS)
        self.assertIn("record_excluded", gv.LEDGER_KINDS)
        self.assertIn("record_excluded", gv.TENANT_LEDGER_KINDS)
        self.assertEqual(gv.MAX_EXCLUSION_REASON_BYTES, 500)

    # admission in a bundle

    def test_a_bundle_with_an_exclusion_passes(self):
        self.exclude(self.r5)
        r = self.bundle()
        self.passes(r)
        self.assertEqual(r[0].summary["entries_by_kind"]["record_excluded"], 1)

    def test_exclusions_of_two_records_pass(self):
        self.exclude(self.r5)
        self.exclude(self.r6, reason="duplicate of entry 5")
        self.passes(self.bundle())

    def test_an_invoice_bundle_holds_the_tenants_exclusions(self):
        # Section 14: an invoice's context holds the subject tenant's record_excluded entries,
        # not another tenant's; a certificate's context holds none.
        i = self.exclude(self.r5)
        self.log.tenant("u", "2026-11-06T00:00:00Z")
        j = self.exclude(self.r6, tenant="u")  # a ledger would refuse it (unknown_record): not t's record
        size = len(self.log.entries)
        records = [self.r5, self.r6]
        ctx = producer.context_for(self.log, size, records, "t", invoice=True)
        self.assertIn(i, ctx)
        self.assertNotIn(j, ctx)
        self.assertNotIn(i, producer.context_for(self.log, size, records, "t"))
        lines = producer.make_bundle(self.log, size, ctx, records, {"invoice": "INV-000009"})
        self.assertPass(self.run_bundle(lines, self.log.verifier_key()))

    def test_a_second_exclusion_of_the_same_entry(self):
        first = self.exclude(self.r5)
        i = self.exclude(self.r5, reason="excluded again", received_at="2026-11-07T00:00:00Z")
        self.refused(self.bundle(), "already_excluded", i, "body.entry",
                     says=f"entry {self.r5} is already excluded (entry {first})")

    def test_already_excluded_whatever_the_tenant(self):
        # Section 6.7: "no earlier record_excluded entry has the same entry", of any tenant.
        first = self.exclude(self.r5)
        self.log.tenant("u", "2026-11-06T00:00:00Z")
        i = self.exclude(self.r5, tenant="u")
        self.refused(self.bundle(), "already_excluded", i, "body.entry",
                     says=f"(entry {first})")

    def test_the_same_entry_at_the_exclusions_own_index_is_not_earlier(self):
        # Two exclusions, one of entry 5 and one of entry 6: neither is "already" excluded.
        self.exclude(self.r6)
        self.exclude(self.r5)
        self.passes(self.bundle())

    def test_unknown_tenant(self):
        i = self.exclude(self.r5, tenant="v")
        self.refused(self.bundle(), "unknown_tenant", i, "body.tenant", says="'v'")

    def test_tenant_registered_after_the_exclusion(self):
        i = self.exclude(self.r5, tenant="v")
        self.log.tenant("v", "2026-11-07T00:00:00Z")
        self.refused(self.bundle(), "unknown_tenant", i, "body.tenant")

    def test_the_parties_come_before_the_disputes(self):
        self.exclude(self.r5)
        i = self.exclude(self.r5, tenant="v")
        self.refused(self.bundle(), "unknown_tenant", i, "body.tenant")

    def test_an_exclusion_signed_by_a_node_key(self):
        # A ledger kind: signed by the log key, signer "ledger".
        i = self.log.append("record_excluded", "node-a", self.na, {"tenant": "t", "entry": self.r5, "reason": REASON},
                            EXCLUDED_AT)
        self.refused(self.bundle(), "key_not_allowed", i)

    # what a bundle cannot show (section 6.7, "Which dispute checks need the whole log")

    def test_unknown_record_is_not_checked_from_a_bundle(self):
        # Entry 4 is a lease, entry 99 does not exist: verify-log refuses both (unknown_record);
        # at a context entry the bundle has read no record yet, so it does not.
        self.exclude(4)
        self.exclude(99)
        self.passes(self.bundle())

    def test_record_invoiced_is_not_checked_from_a_bundle(self):
        # t's invoice of [11-01, 11-06) computed at size 7 rated entry 5: verify-log refuses its
        # exclusion (record_invoiced); the bundle does not.
        self.log.invoice("INV-000001", "t", "2026-11-01T00:00:00Z", "2026-11-06T00:00:00Z", 7, EXCLUDED_AT)
        self.exclude(self.r5)
        self.passes(self.bundle())

    # bodies (section 5.17): every failure is leaf_invalid, the ledger's code and field in the message

    def bad_body(self, body, code, field):
        i = self.log.ledger("record_excluded", body, EXCLUDED_AT)
        r = self.refused(self.bundle(), "leaf_invalid", i)
        self.assertIn(f"{code}: {field}:", r.message)

    def test_a_missing_member(self):
        for name in ("tenant", "entry", "reason"):
            with self.subTest(name):
                self.setUp()
                body = {"tenant": "t", "entry": self.r5, "reason": REASON}
                del body[name]
                self.bad_body(body, "malformed", f"body.{name}")

    def test_an_extra_member(self):
        self.bad_body({"tenant": "t", "entry": self.r5, "reason": REASON, "invoice": "INV-000001"},
                      "malformed", "body.invoice")

    def test_null_members(self):
        for name in ("tenant", "entry", "reason"):
            with self.subTest(name):
                self.setUp()
                body = {"tenant": "t", "entry": self.r5, "reason": REASON}
                body[name] = None
                self.bad_body(body, "malformed", f"body.{name}")

    def test_an_empty_reason(self):
        self.bad_body({"tenant": "t", "entry": self.r5, "reason": ""}, "invalid_field", "body.reason")

    def test_a_reason_of_500_bytes_passes_501_does_not(self):
        self.exclude(self.r5, reason="x" * 500)
        self.passes(self.bundle())
        self.setUp()
        self.exclude(self.r5, reason="\u00e9" * 250)  # 250 characters, 500 bytes of UTF-8
        self.passes(self.bundle())
        for reason in ("x" * 501, "\u00e9" * 250 + "x", "\u4e2d" * 167):  # 501 bytes each
            with self.subTest(len(reason)):
                self.setUp()
                self.bad_body({"tenant": "t", "entry": self.r5, "reason": reason}, "invalid_field", "body.reason")

    def test_a_reason_with_a_control_character(self):
        for reason in ("meter\u0007fault", "meter\nfault", "meter\tfault", "meter fault\u007f", "meter\u0085fault",
                       "\u0000"):
            with self.subTest(repr(reason)):
                self.setUp()
                self.bad_body({"tenant": "t", "entry": self.r5, "reason": reason}, "invalid_field", "body.reason")

    def test_a_reason_with_surrounding_white_space(self):
        for reason in ("meter fault ", " meter fault", "meter fault\u3000", "\u00a0meter fault", " "):
            with self.subTest(repr(reason)):
                self.setUp()
                self.bad_body({"tenant": "t", "entry": self.r5, "reason": reason}, "invalid_field", "body.reason")

    def test_white_space_and_other_characters_inside_a_reason_pass(self):
        self.exclude(self.r5, reason="meter  fault\u3000\u8ba1\u91cf\u6545\u969c (ticket #42)")
        self.passes(self.bundle())

    def test_an_entry_that_is_not_an_integer(self):
        for entry in (str(self.r5), True, [self.r5]):
            with self.subTest(repr(entry)):
                self.setUp()
                self.bad_body({"tenant": "t", "entry": entry, "reason": REASON}, "malformed", "body.entry")

    def test_an_entry_with_a_fraction(self):
        # 5.0 is not an integer (section 2.5): JSON parsed strictly has no floats, so the leaf is
        # refused as it is read; the body check says malformed too.
        i = self.exclude(self.r5)
        e = self.log.entries.pop()
        leaf = e.leaf.replace(f'"entry":{self.r5}'.encode(), f'"entry":{self.r5}.0'.encode(), 1)
        self.assertNotEqual(leaf, e.leaf)
        self.log.append_leaf_bytes(leaf, e.envelope, e.received_at)
        self.refused(self.bundle(), "leaf_invalid", i)
        env = {"v": 3, "kind": "record_excluded", "signer": "ledger", "key_id": self.lk.key_id, "seq": 1,
               "body": {"tenant": "t", "entry": 5.0, "reason": REASON}, "sig": "A" * 86 + "=="}
        with self.assertRaises(gv.FieldError) as cm:
            gv.check_envelope(env, self.ORIGIN)
        self.assertEqual((cm.exception.code, cm.exception.field), ("malformed", "body.entry"))

    def test_the_largest_entry(self):
        self.exclude(2**53 - 1)  # not a record of the log: verify-log's unknown_record, not a bundle's
        self.passes(self.bundle())

    def test_a_tenant_that_is_not_an_id(self):
        for tenant in ("a b", "", "-t", "ledger"):
            with self.subTest(tenant):
                self.setUp()
                self.bad_body({"tenant": tenant, "entry": self.r5, "reason": REASON}, "invalid_field", "body.tenant")

    def test_the_order_of_the_field_checks(self):
        # The members' presence and types first (malformed), then tenant, entry, reason.
        self.bad_body({"tenant": "a b", "entry": "5", "reason": ""}, "malformed", "body.entry")
        self.setUp()
        self.bad_body({"tenant": "a b", "entry": self.r5, "reason": ""}, "invalid_field", "body.tenant")
        self.setUp()
        # A negative entry is no u64 (section 2.5): malformed, before the tenant's id.
        self.bad_body({"tenant": "a b", "entry": -1, "reason": ""}, "malformed", "body.entry")


class DisputeBodies(unittest.TestCase):
    """check_envelope on record_excluded bodies: each rule's code and field (section 5.17)."""

    BODY = {"tenant": "tenant-acme", "entry": 12, "reason": REASON}

    def code(self, **changes):
        body = copy.deepcopy(self.BODY)
        changed(body, changes)
        env = {"v": 3, "kind": "record_excluded", "signer": "ledger", "key_id": "34750f98bd59fcfc", "seq": 1,
               "body": body, "sig": "A" * 86 + "=="}
        try:
            gv.check_envelope(env, "gpuledger.test/disputes")
        except gv.FieldError as e:
            return e.code, e.field
        return "PASS"

    def test_codes(self):
        cases = [
            ({}, "PASS"),
            ({"entry": 0}, "PASS"),
            ({"entry": 2**53 - 1}, "PASS"),
            ({"reason": "x" * 500}, "PASS"),
            ({"reason": "\u4e2d" * 166 + "xx"}, "PASS"),  # 500 bytes
            ({"tenant": ...}, ("malformed", "body.tenant")),
            ({"entry": ...}, ("malformed", "body.entry")),
            ({"reason": ...}, ("malformed", "body.reason")),
            ({"note": "x"}, ("malformed", "body.note")),
            ({"reason": None}, ("malformed", "body.reason")),
            ({"entry": None}, ("malformed", "body.entry")),
            ({"tenant": None}, ("malformed", "body.tenant")),
            ({"entry": "12"}, ("malformed", "body.entry")),
            ({"entry": 12.0}, ("malformed", "body.entry")),
            ({"entry": False}, ("malformed", "body.entry")),
            ({"reason": 7}, ("malformed", "body.reason")),
            ({"tenant": "tenant acme"}, ("invalid_field", "body.tenant")),
            ({"tenant": "ledger"}, ("invalid_field", "body.tenant")),
            ({"reason": ""}, ("invalid_field", "body.reason")),
            ({"reason": "x" * 501}, ("invalid_field", "body.reason")),
            ({"reason": "\u4e2d" * 167}, ("invalid_field", "body.reason")),  # 501 bytes
            ({"reason": "a\u0001b"}, ("invalid_field", "body.reason")),
            ({"reason": "a\u009fb"}, ("invalid_field", "body.reason")),
            ({"reason": "trailing "}, ("invalid_field", "body.reason")),
            ({"reason": " leading"}, ("invalid_field", "body.reason")),
            ({"reason": "line\n"}, ("invalid_field", "body.reason")),
            ({"reason": "ideographic\u3000"}, ("invalid_field", "body.reason")),
            ({"reason": "zero width\u200b"}, "PASS"),  # not white space (nor for Rust's trim)
            ({"tenant": "a b", "reason": ""}, ("invalid_field", "body.tenant")),
            ({"tenant": "a b", "entry": "x"}, ("malformed", "body.entry")),
        ]
        for changes, want in cases:
            with self.subTest(changes):
                self.assertEqual(self.code(**changes), want)


if __name__ == "__main__":
    unittest.main()
