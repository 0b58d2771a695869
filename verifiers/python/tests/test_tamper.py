"""The tamper matrix on artefacts built by the test producer (section 15's reason codes, and the
version-2 admission reasons)."""

import base64
import copy
import json
import unittest
from decimal import Decimal

from support import (ED_P, ORDER8, LogBundleTestCase, VerifierTestCase, encode_y, entry_lines, get_path, gv, leaf_of,
                     leaf_paths, mixed_order_key, mutate_string, producer, scalar, set_path, with_leaf,
                     with_leaf_bytes)

NUMERIC_CLAIMS = {
    "gpu": ("gpu_seconds", "records"),
    "energy": ("kwh", "records", "pue", "carbon_g_per_kwh", "kwh_with_pue", "carbon_kg"),
}


def bump(value):
    if isinstance(value, int):
        return value + 1
    return producer.dec(Decimal(value) + Decimal("0.5"))


class Base(VerifierTestCase):
    scenario_variant = "good"

    def setUp(self):
        super().setUp()
        self.sc = producer.Scenario(self.scenario_variant)
        self.key = self.sc.verifier_key()
        self.cert = copy.deepcopy(self.sc.certificate)
        self.bundle = copy.deepcopy(self.sc.bundle)

    def resign(self, cert, key=None):
        return producer.sign_certificate(cert, key or self.sc.log_key)

    def verify(self, cert=None, bundle=None, fix_count=False):
        return self.run_certificate(cert if cert is not None else self.cert,
                                    bundle if bundle is not None else self.bundle, self.key, fix_count=fix_count)

    def line_of(self, index):
        for pos, l in enumerate(self.bundle):
            if l.get("type") == "entry" and l["index"] == index:
                return pos
        raise KeyError(index)


class Genuine(Base):
    def test_genuine_passes(self):
        r = self.verify()
        self.assertPass(r)
        self.assertEqual(r.summary["records"], 6)
        self.assertEqual(r.summary["gpu_seconds"], "6007.5")
        self.assertEqual(r.summary["carbon_kg"], "2.241")

    def test_certificate_as_any_json_spelling(self):
        # The certificate file is parsed; its spelling (member order, whitespace) does not matter.
        self.assertPass(self.verify(cert=json.dumps(self.cert, indent=2, sort_keys=True).encode()))

    def test_scopes(self):
        for scope, records in (({"lease": "lease-0042"}, [10, 14, 20]), ({"nodes": ["node-b"]}, [14, 17]),
                               ({"region": "eu-west-1"}, [14, 17]), ({"nodes": ["node-a", "node-b"],
                                                                       "region": "cn-nmg-1"}, [10, 11, 16, 20])):
            with self.subTest(scope=scope):
                sc = producer.Scenario("good", scope=scope)
                self.assertEqual(sc.records, records)
                self.assertPass(self.run_certificate(sc.certificate, sc.bundle, sc.verifier_key()))

    def test_empty_certificate(self):
        sc = self.sc
        cert = producer.make_certificate(sc.log, sc.size, "tenant-nobody", *producer.PERIOD)
        self.assertEqual(cert["totals"], {"records": 0, "gpu_seconds": "0", "kwh": "0", "kwh_with_pue": "0",
                                          "carbon_kg": "0", "kwh_without_region_params": "0"})
        self.assertEqual(cert["entries"]["commitment"], gv.b64(gv.EMPTY_ROOT))
        bundle = producer.make_bundle(sc.log, sc.size, producer.context_for(sc.log, sc.size, [], "tenant-nobody"),
                                      [], {"certificate": cert["id"]})
        self.assertPass(self.run_certificate(cert, bundle, self.key))

    def test_bundle_command_on_the_certificate_bundle(self):
        r = self.run_bundle(self.bundle, self.key)
        self.assertPass(r)
        self.assertEqual(r.summary["records"], 6)


class Claims(Base):
    def claim_paths(self):
        paths = [("totals", m) for m in self.cert["totals"]]
        for name, members in NUMERIC_CLAIMS.items():
            for i, line in enumerate(self.cert[name]):
                paths += [(name, i, m) for m in members if m in line]
        return paths

    def test_every_claim_changed_unsigned_is_certificate_signature(self):
        for path in self.claim_paths():
            with self.subTest(path=path):
                cert = set_path(self.cert, path, bump(get_path(self.cert, path)))
                self.assertFail(self.verify(cert=cert), "certificate_signature", "certificate")

    def test_every_claim_changed_and_resigned_is_claim_mismatch(self):
        for path in self.claim_paths():
            with self.subTest(path=path):
                cert = self.resign(set_path(self.cert, path, bump(get_path(self.cert, path))))
                item = ".".join(str(p) for p in path) if path[0] == "totals" else f"{path[0]}[{path[1]}].{path[2]}"
                self.assertFail(self.verify(cert=cert), "claim_mismatch", item)

    def test_line_keys_changed_and_resigned(self):
        for path in (("gpu", 0, "region"), ("gpu", 1, "gpu_model"), ("energy", 2, "region")):
            with self.subTest(path=path):
                cert = self.resign(set_path(self.cert, path, get_path(self.cert, path) + "x"))
                self.assertFail(self.verify(cert=cert), "claim_mismatch", f"{path[0]}[{path[1]}].{path[2]}")

    def test_lines_dropped_added_reordered_resigned(self):
        cert = copy.deepcopy(self.cert)
        del cert["gpu"][1]
        self.assertFail(self.verify(cert=self.resign(cert)), "claim_mismatch", "gpu[1]")
        cert = copy.deepcopy(self.cert)
        cert["energy"].append(dict(cert["energy"][2]))
        self.assertFail(self.verify(cert=self.resign(cert)), "claim_mismatch", "energy[3]")
        cert = copy.deepcopy(self.cert)
        cert["gpu"].reverse()
        self.assertFail(self.verify(cert=self.resign(cert)), "claim_mismatch")
        cert = copy.deepcopy(self.cert)
        for m in ("pue", "carbon_g_per_kwh", "kwh_with_pue", "carbon_kg"):
            del cert["energy"][0][m]
        self.assertFail(self.verify(cert=self.resign(cert)), "claim_mismatch", "energy[0].pue")

    def test_values_are_compared_as_numbers_but_spelled_canonically(self):
        cert = self.resign(set_path(self.cert, ("totals", "gpu_seconds"), "6007.50"))
        self.assertFail(self.verify(cert=cert), "malformed", "totals.gpu_seconds")

    def test_entries_member_resigned(self):
        cert = self.resign(set_path(self.cert, ("entries", "count"), 7))
        self.assertFail(self.verify(cert=cert), "entries_mismatch", "entries.count")
        cert = self.resign(set_path(self.cert, ("entries", "commitment"), gv.b64(bytes(32))))
        self.assertFail(self.verify(cert=cert), "entries_mismatch", "entries.commitment")

    def test_other_members_changed_unsigned(self):
        for path, value in ((("tenant",), "tenant-other"), (("period_to",), "2026-11-20T00:00:00Z"),
                            (("issued_at",), "2026-12-02T00:00:00Z"), (("scope",), {"region": "cn-nmg-1"}),
                            (("id",), "CERT-000002")):
            with self.subTest(path=path):
                self.assertFail(self.verify(cert=set_path(self.cert, path, value)), "certificate_signature")

    def test_subject_members_changed_and_resigned(self):
        self.assertFail(self.verify(cert=self.resign(set_path(self.cert, ("tenant",), "tenant-other"))),
                        "wrong_tenant")
        self.assertFail(self.verify(cert=self.resign(set_path(self.cert, ("period_to",), "2026-11-20T00:00:00Z"))),
                        "outside_period", "entry 16 (bundle line 15)")
        self.assertFail(self.verify(cert=self.resign(set_path(self.cert, ("scope",), {"region": "cn-nmg-1"}))),
                        "outside_scope", "entry 14 (bundle line 14)")
        self.assertFail(self.verify(cert=self.resign(set_path(self.cert, ("id",), "CERT-000002"))),
                        "checkpoint_mismatch", "bundle header subject")
        self.assertFail(self.verify(cert=self.resign(set_path(self.cert, ("log_origin",), "elsewhere"))),
                        "checkpoint_mismatch", "certificate.log_origin")
        # issued_at is not recomputed from anything: re-signed, it passes.
        self.assertPass(self.verify(cert=self.resign(set_path(self.cert, ("issued_at",), "2026-12-02T00:00:00Z"))))

    def test_certificate_signed_by_another_key(self):
        cert = self.resign(self.cert, producer.Key.from_byte(0x77))
        self.assertFail(self.verify(cert=cert), "certificate_signature", "certificate")
        # the same key signing the envelope tag instead of the certificate tag
        unsigned = {k: v for k, v in self.cert.items() if k != "sig"}
        sig = self.sc.log_key.sign(self.sc.log.message("certificate_issued", unsigned))
        self.assertFail(self.verify(cert=dict(unsigned, sig=gv.b64(sig))), "certificate_signature")

    def test_malformed_certificates(self):
        for name, cert in (("not json", b"{"), ("array", b"[]"), ("extra member", dict(self.cert, extra=1)),
                           ("missing sig", {k: v for k, v in self.cert.items() if k != "sig"}),
                           ("v 2", dict(self.cert, v=2)), ("bad id", dict(self.cert, id="CERT-1")),
                           ("period reversed", dict(self.cert, period_from=self.cert["period_to"])),
                           ("nodes unsorted", dict(self.cert, scope={"nodes": ["b", "a"]})),
                           ("duplicate member", json.dumps(self.cert)[:-1].encode() + b',"v":1}')):
            with self.subTest(name):
                self.assertFail(self.verify(cert=cert), "malformed")


class Records(Base):
    def test_change_any_field_of_any_entry(self):
        """Every member of every leaf (and its envelope and body) of every entry line."""
        count = 0
        for pos in entry_lines(self.bundle):
            line = self.bundle[pos]
            leaf = leaf_of(line)
            for path in leaf_paths(leaf):
                value = get_path(leaf, path)
                new = value + 1 if isinstance(value, int) else mutate_string(value)
                bundle = copy.deepcopy(self.bundle)
                bundle[pos] = with_leaf(line, set_path(leaf, path, new))
                expected = "leaf_invalid" if path == ("index",) else "inclusion_proof"
                with self.subTest(index=line["index"], path=path):
                    self.assertFail(self.verify(bundle=bundle), expected,
                                    f"entry {line['index']} (bundle line {pos + 1})")
                count += 1
        self.assertGreater(count, 100)

    def test_flip_a_byte_of_any_entry_signature(self):
        for pos in entry_lines(self.bundle):
            line = self.bundle[pos]
            leaf = leaf_of(line)
            sig = bytearray(base64.b64decode(leaf["envelope"]["sig"]))
            for byte in (0, 31, 32, 63):
                sig2 = bytes(sig[:byte]) + bytes([sig[byte] ^ 0x01]) + bytes(sig[byte + 1:])
                bundle = copy.deepcopy(self.bundle)
                bundle[pos] = with_leaf(line, set_path(leaf, ("envelope", "sig"), gv.b64(sig2)))
                with self.subTest(index=line["index"], byte=byte):
                    self.assertFail(self.verify(bundle=bundle), "inclusion_proof")

    def test_flip_a_byte_of_any_proof_hash(self):
        n = 0
        for pos in entry_lines(self.bundle):
            line = self.bundle[pos]
            for j, h in enumerate(line["proof"]):
                raw = bytearray(base64.b64decode(h))
                raw[j % 32] ^= 0x80
                bundle = copy.deepcopy(self.bundle)
                bundle[pos] = dict(line, proof=line["proof"][:j] + [gv.b64(bytes(raw))] + line["proof"][j + 1:])
                with self.subTest(index=line["index"], hash=j):
                    self.assertFail(self.verify(bundle=bundle), "inclusion_proof",
                                    f"entry {line['index']} (bundle line {pos + 1})")
                n += 1
            # a hash dropped or added
            bundle = copy.deepcopy(self.bundle)
            bundle[pos] = dict(line, proof=line["proof"][:-1])
            self.assertFail(self.verify(bundle=bundle), "inclusion_proof")
            bundle[pos] = dict(line, proof=line["proof"] + [line["proof"][0]])
            self.assertFail(self.verify(bundle=bundle), "inclusion_proof")
        self.assertGreater(n, 20)

    def test_leaf_not_canonical(self):
        pos = self.line_of(10)
        leaf = leaf_of(self.bundle[pos])
        bundle = copy.deepcopy(self.bundle)
        bundle[pos] = with_leaf_bytes(self.bundle[pos], json.dumps(leaf, indent=1).encode())
        self.assertFail(self.verify(bundle=bundle), "leaf_invalid")
        bundle[pos] = with_leaf_bytes(self.bundle[pos], b"not json")
        self.assertFail(self.verify(bundle=bundle), "leaf_invalid")

    def test_line_index_differs_from_leaf_index(self):
        pos = self.line_of(20)
        bundle = copy.deepcopy(self.bundle)
        bundle[pos] = dict(bundle[pos], index=21)
        self.assertFail(self.verify(bundle=bundle), "leaf_invalid", f"entry 21 (bundle line {pos + 1})")


class Membership(Base):
    def test_drop_each_record(self):
        for pos in entry_lines(self.bundle):
            if pos <= len(self.sc.context):
                continue
            bundle = [l for i, l in enumerate(self.bundle) if i != pos]
            with self.subTest(index=self.bundle[pos]["index"]):
                self.assertFail(self.verify(bundle=bundle, fix_count=True), "entries_mismatch", "entries.count")

    def test_swap_a_record_for_another_of_the_same_count(self):
        # Same count, other entries: only the commitment tells.
        sc = self.sc
        cert = producer.make_certificate(sc.log, sc.size, producer.TENANT, *producer.PERIOD,
                                         records=[10, 11, 14, 16, 17, 20])
        records = [10, 11, 14, 16, 17, 19]  # 19 is outside the period
        bundle = producer.make_bundle(sc.log, sc.size, sc.context, records, {"certificate": cert["id"]})
        self.assertFail(self.run_certificate(cert, bundle, self.key), "outside_period", "entry 19 (bundle line 17)")

    def test_drop_context_entries(self):
        # The registration of node-a: records signed by an unknown key.
        bundle = [l for l in self.bundle if not (l.get("type") == "entry" and l["index"] == 5)]
        self.assertFail(self.verify(bundle=bundle, fix_count=True), "unknown_key", "entry 10 (bundle line 11)")
        # The second region parameters: the energy of the 20th is priced under the first: claims differ.
        bundle = [l for l in self.bundle if not (l.get("type") == "entry" and l["index"] == 15)]
        self.assertFail(self.verify(bundle=bundle, fix_count=True), "claim_mismatch")

    def test_add_a_record_of_another_tenant(self):
        for index in (12, 21):  # tenant-other's gpu_usage; an energy record without a tenant
            with self.subTest(index=index):
                records = sorted(self.sc.records + [index])
                bundle = producer.make_bundle(self.sc.log, self.sc.size, self.sc.context, records,
                                              {"certificate": self.cert["id"]})
                self.assertFail(self.verify(bundle=bundle), "wrong_tenant", f"entry {index} (bundle line "
                                f"{2 + len(self.sc.context) + records.index(index)})")

    def test_add_a_record_outside_the_period(self):
        records = sorted(self.sc.records + [19])
        bundle = producer.make_bundle(self.sc.log, self.sc.size, self.sc.context, records,
                                      {"certificate": self.cert["id"]})
        self.assertFail(self.verify(bundle=bundle), "outside_period")

    def test_add_a_record_outside_the_scope(self):
        sc = producer.Scenario("good", scope={"lease": "lease-0042"})
        bundle = producer.make_bundle(sc.log, sc.size, sc.context, sorted(sc.records + [11]),
                                      {"certificate": sc.certificate["id"]})
        self.assertEqual(sc.context, [0, 1, 3, 4, 5, 6, 8, 9, 15, 18])  # 14 is node-b's, signed by its key
        self.assertFail(self.run_certificate(sc.certificate, bundle, sc.verifier_key()), "outside_scope",
                        "entry 11 (bundle line 13)")

    def test_a_wrong_tenant_record_is_named_at_its_line(self):
        # A wrong-tenant record early, a bad proof later: the record is named where it stands,
        # before its own chain, time and admission rules and before later lines, as the Rust
        # verifier names it (crates/core/src/bundle.rs `place`).
        records = sorted(self.sc.records + [12])
        bundle = producer.make_bundle(self.sc.log, self.sc.size, self.sc.context, records,
                                      {"certificate": self.cert["id"]})
        last = entry_lines(bundle)[-1]
        bundle[last] = dict(bundle[last], proof=list(reversed(bundle[last]["proof"])))
        self.assertFail(self.verify(bundle=bundle), "wrong_tenant")
        # Without the wrong-tenant record, the bad proof is what is named.
        bundle = producer.make_bundle(self.sc.log, self.sc.size, self.sc.context, self.sc.records,
                                      {"certificate": self.cert["id"]})
        last = entry_lines(bundle)[-1]
        bundle[last] = dict(bundle[last], proof=list(reversed(bundle[last]["proof"])))
        self.assertFail(self.verify(bundle=bundle), "inclusion_proof")

    def test_record_beyond_the_checkpoint(self):
        sc = self.sc
        extra = sc.log.gpu_usage("node-a", sc.node_a, producer.TENANT, "cn-nmg-1", "H100-SXM5-80GB", "1",
                                 "2026-11-28T00:00:00Z", 60, lease="lease-0042")
        bundle = copy.deepcopy(self.bundle)
        bundle.insert(-1, producer.entry_line(sc.log, extra, extra + 1))
        self.assertFail(self.verify(bundle=bundle, fix_count=True), "not_in_checkpoint",
                        f"entry {extra} (bundle line {len(bundle) - 1})")


class BadLogs(Base):
    """Logs the producer builds with a bad entry inside the tree."""

    def check(self, variant, reason):
        sc = producer.Scenario(variant)
        self.assertIn(sc.bad_index, sc.records)
        r = self.run_certificate(sc.certificate, sc.bundle, sc.verifier_key())
        pos = [i for i, l in enumerate(sc.bundle) if l.get("type") == "entry" and l["index"] == sc.bad_index][0]
        self.assertFail(r, reason, f"entry {sc.bad_index} (bundle line {pos + 1})")

    def test_bad_signature_inside_the_tree(self):
        self.check("bad_signature", "entry_signature")

    def test_small_order_r_signature_inside_the_tree(self):
        self.check("small_order_r", "entry_signature")

    def test_torsion_r_signature_inside_the_tree(self):
        # R = rB + T (T of order 8): a cofactored verifier accepts it, a strict one does not.
        self.check("torsion_r", "entry_signature")

    def test_record_signed_after_its_key_was_revoked(self):
        self.check("revoked", "key_revoked")

    def test_record_of_a_kind_the_role_may_not_sign(self):
        self.check("wrong_role", "key_not_allowed")

    def test_record_by_an_unregistered_key(self):
        self.check("unregistered", "unknown_key")

    def test_record_before_its_key_registration(self):
        self.check("late_key_use", "unknown_key")

    def test_invalid_envelope_inside_the_tree(self):
        self.check("invalid_envelope", "leaf_invalid")

    # version 2

    def test_record_signed_for_another_log(self):
        # Signed under the origin gpuledger.test/staging: the message names the log, so it does
        # not verify under this log's origin (the verifier key's name).
        self.check("other_origin", "entry_signature")

    def test_version_1_envelope(self):
        self.check("v1_envelope", "leaf_invalid")
        sc = producer.Scenario("v1_envelope")
        r = self.run_certificate(sc.certificate, sc.bundle, sc.verifier_key())
        self.assertIn("unsupported_version", r.message)

    def test_repeated_member_name_inside_a_body(self):
        self.check("duplicate_member", "leaf_invalid")
        sc = producer.Scenario("duplicate_member")
        r = self.run_certificate(sc.certificate, sc.bundle, sc.verifier_key())
        self.assertIn("malformed", r.message)
        self.assertIn("'gpu_count' repeats", r.message)

    def test_record_naming_a_node_outside_its_keys_scope(self):
        self.check("node_not_allowed", "node_not_allowed")

    def test_record_naming_a_region_outside_its_keys_scope(self):
        self.check("region_not_allowed", "region_not_allowed")

    def test_record_under_an_unknown_lease(self):
        self.check("unknown_lease", "unknown_lease")

    def test_record_too_old(self):
        self.check("too_old", "too_old")

    def test_record_in_the_future(self):
        self.check("in_future", "in_future")


# What the leases of AdmissionRules cover (section 5.8): some of node-a's GPUs of model m, so
# that lease-1 and a second lease of the tests never overbook it (section 6.7, leases).
LEASE_1 = [producer.lease_count("node-a", "m", "4")]
LEASE_2 = [producer.lease_count("node-a", "m", "2")]


class AdmissionRules(LogBundleTestCase):
    """Version 2, section 6: every admission rule rechecked from the bundle's entries, each
    refusal with its own reason (section 8's bundle reasons), on logs a ledger would refuse.

    The base log: 0 log_policy (defaults), 1 tenant_registered t, 2 node_registered node-a (region
    r1, 8 GPUs of each of producer.DEFAULT_NODE_MODELS, 5000 W each), 3 node-a's key (nodes
    [node-a], regions [r1]), 4 market-a's key (regions [r1, r2]), 5 lease-1 of t (4 of node-a's m
    GPUs, open-ended), under which `usage()` bills; the test appends more.
    `bundle()` holds every entry (context: every entry but the records, as a superset of
    section 8's); `cert()` checks a certificate for t with section 8's context."""

    ORIGIN = "gpuledger.test/admission"

    def setUp(self):
        super().setUp()
        self.lk, self.na, self.mk = producer.Key.from_byte(0x51), producer.Key.from_byte(0x52), \
            producer.Key.from_byte(0x53)
        log = self.log = producer.Log(self.lk, self.ORIGIN)
        log.policy("2026-10-01T00:00:00Z")                                                          # 0
        log.tenant("t", "2026-10-01T00:00:00Z")                                                     # 1
        log.register("node-a", self.na, "node", "2026-10-01T00:00:00Z", regions=["r1"])              # 2, 3
        log.register("market-a", self.mk, "market", "2026-10-01T00:00:00Z", regions=["r1", "r2"])    # 4
        log.lease("lease-1", "t", "reserved", "2026-10-01T00:00:00Z", LEASE_1)                     # 5

    def usage(self, tenant="t", start="2026-11-05T00:00:00Z", seconds=60, lease="lease-1", **kw):
        return self.log.gpu_usage("node-a", self.na, tenant, "r1", "m", "1", start, seconds, lease=lease, **kw)

    def spot(self, effective_from, received_at, region="r1", model="m", currency="CNY", **kw):
        return self.log.spot_price("market-a", self.mk, region, model, "14.75", effective_from, received_at,
                                   currency=currency, **kw)

    def test_baseline(self):
        self.spot("2026-11-03T00:00:00Z", "2026-11-02T00:00:00Z")
        self.usage(lease="lease-1")
        self.passes(self.bundle())
        self.passes(self.cert())

    # an invoice or certificate issued before its period ended (section 6.7, time): in_future

    def issued(self, kind, period_to, received_at):
        body = {"tenant": "t", "period_from": "2026-11-01T00:00:00Z", "period_to": period_to,
                "checkpoint_size": 5}
        if kind == "invoice_issued":
            body.update(number="INV-000001", currency="CNY", total="1.00", invoice_sha256="ab" * 32)
        else:
            body.update(id="CERT-000001", certificate_sha256="ab" * 32)
        return self.log.ledger(kind, body, received_at)

    def test_issued_documents_cover_ended_periods(self):
        for kind in ("invoice_issued", "certificate_issued"):
            with self.subTest(kind=kind):
                self.setUp()
                self.issued(kind, "2026-11-02T00:00:00Z", "2026-11-02T00:00:00Z")
                self.passes(self.bundle())
                self.setUp()
                i = self.issued(kind, "2026-11-02T00:00:00Z", "2026-11-01T23:59:59Z")
                self.refused(self.bundle(), "in_future", i, "body.period_to")

    # key registrations (section 3.1): leaf_invalid, invalid_field in body.public_key

    def registration_refused(self, pub, what):
        i = self.log.register_public_key("node-x", pub, "node", "2026-10-02T00:00:00Z", regions=["r1"],
                                         nodes=["node-x"])
        r = self.refused(self.bundle(), "leaf_invalid", i)
        self.assertIn("invalid_field: body.public_key", r.message, what)

    def test_registration_with_a_non_canonical_key(self):
        self.registration_refused(encode_y(3 + ED_P), "y >= p")

    def test_registration_with_a_non_canonical_key_x0_sign_bit(self):
        self.registration_refused(encode_y(1, 1), "x = 0 with the sign bit set")

    def test_registration_with_a_small_order_key(self):
        self.registration_refused(ORDER8, "order 8")

    def test_registration_with_a_mixed_order_key(self):
        self.registration_refused(mixed_order_key(scalar(4242), 1), "aB + T, T of order 8")

    def test_registration_scope_out_of_order(self):
        i = self.log.register_public_key("node-x", producer.Key.from_byte(0x54).pub, "node", "2026-10-02T00:00:00Z",
                                         regions=["r2", "r1"], nodes=["node-x"], sort=False)
        r = self.refused(self.bundle(), "leaf_invalid", i)
        self.assertIn("invalid_field: body.regions", r.message)

    # scope

    def test_record_naming_a_node_outside_its_keys_scope(self):
        i = self.log.gpu_usage("node-a", self.na, "t", "r1", "m", "1", "2026-11-05T00:00:00Z", 60, node="node-b")
        self.refused(self.bundle(), "node_not_allowed", i, "body.node")
        i2 = self.log.energy("node-a", self.na, "t", "r1", "1", "2026-11-06T00:00:00Z", 60, node="node-b")
        self.refused(self.bundle(records=[i2]), "node_not_allowed", i2, "body.node")

    def test_record_naming_a_region_outside_its_keys_scope(self):
        i = self.log.energy("node-a", self.na, "t", "r2", "1", "2026-11-06T00:00:00Z", 60)
        self.refused(self.bundle(), "region_not_allowed", i, "body.region")

    def test_spot_price_in_a_region_outside_its_keys_scope(self):
        self.spot("2026-11-03T00:00:00Z", "2026-11-02T00:00:00Z", region="r2")  # in scope
        i = self.spot("2026-11-03T00:00:00Z", "2026-11-02T00:00:00Z", region="r3")
        self.refused(self.bundle(), "region_not_allowed", i, "body.region")

    def test_scope_is_the_signing_keys(self):
        # A rotation with a wider scope: the old key keeps its own scope. (A node is in one
        # region: the wider key also names node-b, registered in r2.)
        nb2 = producer.Key.from_byte(0x55)
        self.log.node("node-b", "r2", "2026-10-02T00:00:00Z")
        self.log.lease("lease-b", "t", "reserved", "2026-10-02T00:00:00Z", [producer.lease_count("node-b", "m", "1")])
        self.log.register("node-a", nb2, "node", "2026-10-02T00:00:00Z", regions=["r1", "r2"],
                          nodes=["node-a", "node-b"])
        self.log.gpu_usage("node-a", nb2, "t", "r2", "m", "1", "2026-11-05T00:00:00Z", 60, node="node-b",
                           lease="lease-b")
        self.passes(self.bundle())
        i = self.log.gpu_usage("node-a", self.na, "t", "r2", "m", "1", "2026-11-06T00:00:00Z", 60, node="node-b",
                               lease="lease-b")
        self.refused(self.bundle(), "node_not_allowed", i, "body.node")
        self.log.entries.pop()
        i = self.log.gpu_usage("node-a", self.na, "t", "r2", "m", "1", "2026-11-06T00:00:00Z", 60, lease="lease-1")
        self.refused(self.bundle(), "region_not_allowed", i, "body.region")

    # parties

    def test_unknown_tenant(self):
        i = self.usage(tenant="t2")
        self.refused(self.bundle(), "unknown_tenant", i, "body.tenant")
        self.refused(self.cert("t2"), "unknown_tenant", i, "body.tenant")

    def test_unknown_tenant_of_energy(self):
        i = self.log.energy("node-a", self.na, "t2", "r1", "1", "2026-11-06T00:00:00Z", 60)
        self.refused(self.bundle(), "unknown_tenant", i, "body.tenant")
        # energy without a tenant names no party
        self.log.entries.pop()
        self.log.energy("node-a", self.na, None, "r1", "1", "2026-11-06T00:00:00Z", 60)
        self.passes(self.bundle())

    def test_tenant_registered_after_the_record(self):
        i = self.usage(tenant="t2")
        self.log.tenant("t2", "2026-11-10T00:00:00Z")
        self.refused(self.bundle(), "unknown_tenant", i)
        self.refused(self.cert("t2"), "unknown_tenant", i)

    def test_ledger_entries_naming_an_unknown_tenant(self):
        for kind, body in (("lease_registered", {"lease": "lease-2", "tenant": "t2", "class": "spot",
                                                 "from": "2026-10-01T00:00:00Z", "nodes": LEASE_2}),
                           ("tenant_plan", {"tenant": "t2", "plan": "p", "effective_from": "2026-11-01T00:00:00Z"}),
                           ("payment", {"tenant": "t2", "invoice": "INV-000001", "currency": "CNY", "amount": "1",
                                        "note": "x"})):
            with self.subTest(kind):
                self.setUp()
                i = self.log.ledger(kind, body, "2026-10-02T00:00:00Z")
                self.refused(self.bundle(), "unknown_tenant", i, "body.tenant")

    def test_tenant_registered_twice(self):
        i = self.log.tenant("t", "2026-10-02T00:00:00Z")
        self.refused(self.bundle(), "already_registered", i, "body.tenant")

    def test_lease_declared_twice(self):
        i = self.log.lease("lease-1", "t", "spot", "2026-10-02T00:00:00Z", LEASE_2)
        self.refused(self.bundle(), "already_registered", i, "body.lease")

    def test_unknown_lease(self):
        i = self.usage(lease="lease-9")
        self.refused(self.bundle(), "unknown_lease", i, "body.lease")
        self.refused(self.cert(), "unknown_lease", i, "body.lease")

    def test_lease_declared_after_the_record(self):
        i = self.usage(lease="lease-2")
        self.log.lease("lease-2", "t", "spot", "2026-11-10T00:00:00Z", LEASE_2)
        self.refused(self.bundle(), "unknown_lease", i)

    def test_lease_of_another_tenant(self):
        self.log.tenant("t2", "2026-10-02T00:00:00Z")
        self.log.lease("lease-2", "t2", "spot", "2026-10-02T00:00:00Z", LEASE_2)
        i = self.usage(lease="lease-2")
        # A bundle that also holds the other tenant's lease (and its registration) shows the mismatch.
        self.refused(self.bundle(), "lease_tenant_mismatch", i, "body.lease")
        # Section 8's bundle for t holds nothing of t2: the lease is then unknown to the verifier.
        self.refused(self.cert(), "unknown_lease", i)

    def test_records_of_another_tenant_in_a_certificate_bundle(self):
        # t2 is not registered and the record is not t's: step 5 names it (wrong_tenant), the
        # party rules are not applied to another tenant's record whose registration the bundle
        # does not hold.
        self.usage()
        j = self.usage(tenant="t2", start="2026-11-06T00:00:00Z")
        r, lines = self.cert()
        self.assertPass(r)
        records = sorted(producer.covered(self.log, len(self.log.entries), "t", *producer.PERIOD, {}) + [j])
        cert = producer.make_certificate(self.log, len(self.log.entries), "t", *producer.PERIOD,
                                         records=records[:-1])
        lines = producer.make_bundle(self.log, len(self.log.entries),
                                     producer.context_for(self.log, len(self.log.entries), records, "t"), records,
                                     {"certificate": cert["id"]})
        self.assertFail(self.run_certificate(cert, lines, self.log.verifier_key()), "wrong_tenant")

    # time

    def test_too_old(self):
        # 35 days (the default) and one second before received_at
        i = self.usage(start="2026-11-05T00:00:00Z", received_at="2026-12-10T00:00:01Z")
        self.refused(self.bundle(), "too_old", i, "body.start")
        self.log.entries.pop()
        self.usage(start="2026-11-05T00:00:00Z", received_at="2026-12-10T00:00:00Z")
        self.passes(self.bundle())

    def test_too_old_under_a_later_policy(self):
        ok = self.usage(start="2026-11-05T00:00:00Z", received_at="2026-11-05T02:00:00Z")  # 2 h: fine by default
        self.log.policy("2026-11-05T03:00:00Z", max_record_age_seconds=3600)
        i = self.usage(start="2026-11-05T04:00:00Z", received_at="2026-11-05T06:00:00Z")
        r = self.refused(self.bundle(), "too_old", i)
        self.assertIn("max_record_age_seconds 3600", r.message)
        self.assertLess(ok, i)
        # the policy applies from its index on, also when the bundle lists it after older records
        self.log.entries.pop()
        self.passes(self.bundle())

    def test_in_future(self):
        # ends 301 s after received_at (default max_future_skew_seconds 300)
        i = self.usage(start="2026-11-05T00:00:00Z", seconds=60, received_at="2026-11-04T23:55:59Z")
        self.refused(self.bundle(), "in_future", i, "body.end")

    def test_in_future_under_a_policy_without_skew(self):
        self.log.policy("2026-11-01T00:00:00Z", max_future_skew_seconds=0)
        i = self.log.energy("node-a", self.na, "t", "r1", "0.1", "2026-11-05T00:00:00Z", 60,
                            received_at="2026-11-05T00:00:59Z")
        self.refused(self.bundle(), "in_future", i, "body.end")
        self.log.entries.pop()
        self.log.energy("node-a", self.na, "t", "r1", "0.1", "2026-11-05T00:00:00Z", 60,
                        received_at="2026-11-05T00:01:00Z")
        self.passes(self.bundle())

    def test_spot_price_more_than_7_days_ahead(self):
        self.spot("2026-11-09T00:00:00Z", "2026-11-02T00:00:00Z")  # exactly 7 days: fine
        i = self.spot("2026-11-09T00:00:01Z", "2026-11-02T00:00:00Z")
        self.refused(self.bundle(), "in_future", i, "body.effective_from")

    def test_spot_price_in_the_past(self):
        self.spot("2026-11-02T00:00:00Z", "2026-11-02T00:05:00Z")  # 300 s before: allowed
        i = self.spot("2026-11-03T00:00:00Z", "2026-11-03T00:05:01Z")
        self.refused(self.bundle(), "price_in_past", i, "body.effective_from")

    # spot series

    def test_spot_price_same_instant_in_one_series(self):
        self.spot("2026-11-03T00:00:00Z", "2026-11-02T00:00:00Z")
        self.spot("2026-11-03T00:00:00Z", "2026-11-02T00:00:01Z", model="m2")  # another series
        self.spot("2026-11-03T00:00:00Z", "2026-11-02T00:00:02Z", region="r2")  # another series
        self.passes(self.bundle())
        # the currency is not part of the series
        i = self.spot("2026-11-03T00:00:00Z", "2026-11-02T00:00:03Z", currency="USD")
        self.refused(self.bundle(), "price_conflict", i, "body.effective_from")

    def test_spot_price_inside_an_invoiced_period(self):
        # Issued once the period ended (section 6.7); a price then inside it, within the skew.
        self.log.invoice("INV-000001", "t", "2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z", 5,
                         "2026-11-01T00:00:00Z")
        self.spot("2026-11-01T00:00:00Z", "2026-11-01T00:01:00Z")  # period_to is outside [from, to)
        self.passes(self.bundle())
        i = self.spot("2026-10-31T23:59:59Z", "2026-11-01T00:02:00Z", model="m2")
        self.refused(self.bundle(), "price_in_invoiced_period", i, "body.effective_from")

    # section 6.4a: a stream never claims a second twice

    def test_overlapping_intervals_of_one_stream(self):
        self.log.lease("lease-2", "t", "spot", "2026-10-02T00:00:00Z", LEASE_2)
        self.usage(start="2026-11-05T00:00:00Z", seconds=60)
        self.usage(start="2026-11-05T00:01:00Z", seconds=60)  # adjacent: no overlap
        self.usage(start="2026-11-05T00:00:30Z", seconds=60, lease="lease-2")  # another stream
        self.passes(self.bundle())
        self.passes(self.cert())
        # Late, out of order, and one second into the first interval.
        i = self.usage(start="2026-11-04T23:59:01Z", seconds=60)
        self.refused(self.bundle(), "overlapping_interval", i, "body.start")
        self.refused(self.cert(), "overlapping_interval", i, "body.start")

    # prices only move forward

    def test_rate_card_not_moving_forward(self):
        log = self.log
        log.rate_card("r1", "m", "on_demand", "20", "2026-11-01T00:00:00Z", "2026-10-02T00:00:00Z")
        log.rate_card("r1", "m", "reserved", "15", "2026-11-01T00:00:00Z", "2026-10-02T00:00:00Z")  # other series
        log.rate_card("r1", "m", "on_demand", "21", "2026-12-01T00:00:00Z", "2026-10-03T00:00:00Z")
        self.passes(self.bundle())
        for eff in ("2026-12-01T00:00:00Z", "2026-11-15T00:00:00Z"):
            with self.subTest(effective_from=eff):
                i = log.rate_card("r1", "m", "on_demand", "22", eff, "2026-10-04T00:00:00Z")
                self.refused(self.bundle(), "price_not_forward", i, "body.effective_from")
                log.entries.pop()

    def test_other_price_series_not_moving_forward(self):
        tiers = [{"price_per_gpu_hour": "10"}]
        cases = {
            "region_params": lambda eff: self.log.region_params("r1", "1.1", "400", eff, "2026-10-02T00:00:00Z"),
            "volume_tiers": lambda eff: self.log.volume_tiers("p", "r1", "m", "on_demand", tiers, eff,
                                                              "2026-10-02T00:00:00Z"),
            "tenant_plan": lambda eff: self.log.tenant_plan("t", "p", eff, "2026-10-02T00:00:00Z"),
        }
        for kind, add in cases.items():
            with self.subTest(kind):
                self.setUp()
                add("2026-11-01T00:00:00Z")
                add("2026-11-02T00:00:00Z")
                self.passes(self.bundle())
                i = add("2026-11-02T00:00:00Z")
                self.refused(self.bundle(), "price_not_forward", i, "body.effective_from")

    # strict JSON and the log policy itself

    def test_repeated_member_name_inside_a_context_body(self):
        i = self.log.lease("lease-2", "t", "spot", "2026-10-02T00:00:00Z", LEASE_2)
        e = self.log.entries.pop()
        leaf = e.leaf.replace(b'"class":"spot"', b'"class":"spot","class":"spot"', 1)
        self.log.append_leaf_bytes(leaf, e.envelope, e.received_at)
        r = self.refused(self.bundle(), "leaf_invalid", i)
        self.assertIn("'class' repeats", r.message)

    def test_version_1_leaf(self):
        self.log.tenant("t2", "2026-10-02T00:00:00Z")
        e = self.log.entries.pop()
        i = self.log.append_envelope(e.envelope, e.received_at, version=1)
        r = self.refused(self.bundle(), "leaf_invalid", i)
        self.assertIn("unsupported_version", r.message)

    def test_log_policy_out_of_range(self):
        i = self.log.policy("2026-10-02T00:00:00Z", max_record_age_seconds=60)
        r = self.refused(self.bundle(), "leaf_invalid", i)
        self.assertIn("quantity_out_of_range", r.message)

    def test_every_new_reason_is_a_bundle_reason(self):
        for reason in ("node_not_allowed", "region_not_allowed", "unknown_tenant", "unknown_lease",
                       "lease_tenant_mismatch", "too_old", "in_future", "price_in_past", "price_conflict",
                       "price_in_invoiced_period", "price_not_forward", "already_registered"):
            self.assertIn(reason, gv.REASONS)
            self.assertIn(reason, gv.ADMISSION_REASONS)


class Checkpoints(Base):
    def test_older_checkpoint(self):
        sc = self.sc
        older = sc.log.checkpoint(9)
        cert = self.resign(dict(self.cert, checkpoint=older))
        bundle = copy.deepcopy(self.bundle)
        bundle[0] = dict(bundle[0], checkpoint=older)
        self.assertFail(self.verify(cert=cert, bundle=bundle), ("not_in_checkpoint", "inclusion_proof"))
        # With every proof redone for size 9, the first entry at or above 9 is named.
        bundle = producer.make_bundle(sc.log, 9, [0, 1, 3, 4, 5], [], {"certificate": self.cert["id"]}, checkpoint=older)
        for i in sc.context + sc.records:
            if i >= 9:
                line = producer.entry_line(sc.log, i, sc.size)
                bundle.insert(-1, line)
        bundle = [l for l in bundle if l.get("type") != "entry" or l["index"] in sc.context + sc.records]
        self.assertFail(self.verify(cert=cert, bundle=bundle, fix_count=True), "not_in_checkpoint")

    def test_checkpoint_signed_by_another_key(self):
        note = self.sc.log.checkpoint(self.sc.size, key=producer.Key.from_byte(0x66))
        cert = self.resign(dict(self.cert, checkpoint=note))
        bundle = copy.deepcopy(self.bundle)
        bundle[0] = dict(bundle[0], checkpoint=note)
        self.assertFail(self.verify(cert=cert, bundle=bundle), "checkpoint_signature", "bundle header checkpoint")

    def test_checkpoint_of_another_origin(self):
        note = self.sc.log.checkpoint(self.sc.size, origin="gpuledger.test/other", name=producer.ORIGIN)
        bundle = copy.deepcopy(self.bundle)
        bundle[0] = dict(bundle[0], checkpoint=note)
        self.assertFail(self.verify(bundle=bundle), "checkpoint_signature")

    def test_certificate_checkpoint_differs_from_the_header(self):
        older = self.sc.log.checkpoint(9)
        self.assertFail(self.verify(cert=self.resign(dict(self.cert, checkpoint=older))), "checkpoint_mismatch",
                        "certificate.checkpoint")
        bundle = copy.deepcopy(self.bundle)
        bundle[0] = dict(bundle[0], log_origin="elsewhere")
        self.assertFail(self.verify(bundle=bundle), "checkpoint_mismatch", "bundle header log_origin")
        bundle[0] = dict(self.bundle[0], subject={"invoice": "INV-000001"})
        self.assertFail(self.verify(bundle=bundle), "checkpoint_mismatch", "bundle header subject")


class Structure(Base):
    def test_truncated_at_every_line(self):
        data = producer.bundle_bytes(self.bundle)
        lines = data.split(b"\n")[:-1]
        for k in range(0, len(lines)):
            with self.subTest(lines=k):
                self.assertFail(self.verify(bundle=b"".join(l + b"\n" for l in lines[:k])), "truncated")

    def test_truncated_mid_line(self):
        data = producer.bundle_bytes(self.bundle)
        for cut in range(1, len(data), max(1, len(data) // 97)):
            if data[cut - 1:cut] == b"\n":
                continue
            with self.subTest(cut=cut):
                self.assertFail(self.verify(bundle=data[:cut]), "truncated")
        self.assertFail(self.verify(bundle=data[:-1]), "truncated")

    def test_end_count_differs(self):
        bundle = copy.deepcopy(self.bundle)
        bundle[-1] = {"type": "end", "entries": bundle[-1]["entries"] + 1}
        self.assertFail(self.verify(bundle=bundle), "truncated")

    def test_reorder_entries(self):
        ctx = list(range(1, 1 + len(self.sc.context)))
        rec = list(range(1 + len(self.sc.context), len(self.bundle) - 1))
        cases = {
            "two records swapped": (rec[0], rec[1]),
            "two context entries swapped": (ctx[0], ctx[1]),
            "last record and first record": (rec[0], rec[-1]),
            "a context entry among the records": (ctx[-1], rec[0]),
        }
        for name, (a, b) in cases.items():
            with self.subTest(name):
                bundle = copy.deepcopy(self.bundle)
                bundle[a], bundle[b] = bundle[b], bundle[a]
                self.assertFail(self.verify(bundle=bundle), "order")
        bundle = copy.deepcopy(self.bundle)
        bundle.insert(rec[2], copy.deepcopy(bundle[rec[1]]))
        self.assertFail(self.verify(bundle=bundle, fix_count=True), "order")
        bundle = copy.deepcopy(self.bundle)
        bundle.insert(rec[-1], copy.deepcopy(bundle[ctx[0]]))
        self.assertFail(self.verify(bundle=bundle, fix_count=True), "order")

    def test_malformed_bundles(self):
        data = producer.bundle_bytes(self.bundle)
        lines = data.split(b"\n")[:-1]
        header = json.loads(lines[0])
        cases = {
            "no header": b"\n".join(lines[1:]) + b"\n",
            "wrong format": producer.bundle_bytes([dict(header, format="gpuledger-bundle/v1")] + self.bundle[1:]),
            "repeated member in the subject": b"\n".join(
                [lines[0].replace(b'"subject":{"certificate":"CERT-000001"}',
                                  b'"subject":{"certificate":"CERT-000001","certificate":"CERT-000001"}')]
                + lines[1:]) + b"\n",
            "extra header member": producer.bundle_bytes([dict(header, x=1)] + self.bundle[1:]),
            "blank line": b"\n".join(lines[:2] + [b""] + lines[2:]) + b"\n",
            "not json": b"\n".join(lines[:2] + [b"{nope"] + lines[2:]) + b"\n",
            "line after end": data + lines[1] + b"\n",
            "unknown type": b"\n".join(lines[:2] + [b'{"type":"comment"}'] + lines[2:]) + b"\n",
            "repeated member": b"\n".join([lines[0], lines[1][:-1] + b',"index":0}'] + lines[2:]) + b"\n",
            "index as float": b"\n".join([lines[0], lines[1].replace(b'"index":0', b'"index":0.0')] + lines[2:])
            + b"\n",
            "leaf not base64": producer.bundle_bytes(self.bundle[:1] + [dict(self.bundle[1], leaf="%%%")]
                                                     + self.bundle[2:]),
            "proof hash of 31 bytes": producer.bundle_bytes(
                self.bundle[:1] + [dict(self.bundle[1], proof=[gv.b64(bytes(31))])] + self.bundle[2:]),
            "second header": b"\n".join(lines[:2] + [lines[0]] + lines[2:]) + b"\n",
        }
        for name, bundle in cases.items():
            with self.subTest(name):
                self.assertFail(self.verify(bundle=bundle, fix_count=False), "malformed")

    def test_structure_is_checked_before_entries(self):
        # A bad proof on line 2 and a truncated end: step 1 (truncated) is reported.
        bundle = copy.deepcopy(self.bundle)
        bundle[1] = dict(bundle[1], proof=[])
        data = producer.bundle_bytes(bundle)
        self.assertFail(self.verify(bundle=data[: data.rfind(b'{"type":"end"')]), "truncated")


# --- version 3: leaves as JSON objects, one multi-proof (section 14) ------------------------------


def multiproof_nodes(leaf_hashes, lo, hi, indexes):
    """The multi-proof by its definition (section 14), over the whole log's leaf hashes."""
    if not any(lo <= i < hi for i in indexes):
        return [producer.mth_hashes(leaf_hashes[lo:hi])]
    if hi - lo == 1:
        return []
    k = producer._k(hi - lo)
    return (multiproof_nodes(leaf_hashes, lo, lo + k, indexes)
            + multiproof_nodes(leaf_hashes, lo + k, hi, indexes))


def v3_bundle(sc, per_line=4096):
    """The scenario's bundle in version 3, as canonical lines (bytes, without LF)."""
    log, size = sc.log, sc.size
    header = {"type": "header", "format": "gpuledger-bundle/v3", "log_origin": log.origin,
              "checkpoint": log.checkpoint(size), "subject": {"certificate": sc.certificate["id"]}}
    lines = [producer.jcs(header)]
    for i in list(sc.context) + list(sc.records):
        lines.append(producer.jcs({"type": "entry", "index": i, "leaf": json.loads(log.entries[i].leaf)}))
    nodes = multiproof_nodes(log.leaf_hashes(size), 0, size, set(sc.context) | set(sc.records))
    for k in range(0, len(nodes), per_line):
        lines.append(producer.jcs({"type": "nodes", "hashes": [gv.b64(h) for h in nodes[k:k + per_line]]}))
    lines.append(producer.jcs({"type": "end", "entries": len(sc.context) + len(sc.records), "nodes": len(nodes)}))
    return lines


class CompactBundles(Base):
    """Every tamper of a version-3 bundle is refused with its reason; version 2 still reads."""

    def setUp(self):
        super().setUp()
        self.v3 = v3_bundle(self.sc)

    def run_v3(self, lines, cert=None):
        return self.run_certificate(cert if cert is not None else self.cert, b"".join(l + b"\n" for l in lines),
                                    self.key)

    def obj(self, line):
        return json.loads(line)

    def positions(self, lines, ty):
        return [i for i, l in enumerate(lines) if self.obj(l)["type"] == ty]

    def fixed_end(self, lines):
        entries = len(self.positions(lines, "entry"))
        nodes = sum(len(self.obj(lines[i])["hashes"]) for i in self.positions(lines, "nodes"))
        return lines[:-1] + [producer.jcs({"type": "end", "entries": entries, "nodes": nodes})]

    def with_nodes(self, lines, nodes):
        at = self.positions(lines, "nodes")
        out = [l for i, l in enumerate(lines) if i not in at]
        if nodes:
            out.insert(at[0], producer.jcs({"type": "nodes", "hashes": nodes}))
        return out

    def test_genuine_v3_passes_and_is_smaller(self):
        r = self.run_v3(self.v3)
        self.assertPass(r)
        self.assertEqual(r.summary["records"], 6)
        self.assertPass(self.verify())  # version 2 still reads
        v2 = producer.bundle_bytes(self.bundle)
        self.assertLess(sum(len(l) + 1 for l in self.v3), len(v2))
        # Node lines of any size from 1 to 4096 hashes.
        self.assertPass(self.run_v3(v3_bundle(self.sc, per_line=1)))

    def test_every_node_changed_removed_or_added(self):
        nodes = self.obj(self.v3[self.positions(self.v3, "nodes")[0]])["hashes"]
        self.assertGreaterEqual(len(nodes), 3)
        for k in range(len(nodes)):
            raw = bytearray(base64.b64decode(nodes[k]))
            raw[k % 32] ^= 0x01
            changed = nodes[:k] + [gv.b64(bytes(raw))] + nodes[k + 1:]
            fewer = nodes[:k] + nodes[k + 1:]
            with self.subTest(node=k):
                self.assertFail(self.run_v3(self.with_nodes(self.v3, changed)), "inclusion_proof", "multi-proof")
                self.assertFail(self.run_v3(self.with_nodes(self.v3, fewer)), "truncated")
                self.assertFail(self.run_v3(self.fixed_end(self.with_nodes(self.v3, fewer))), "inclusion_proof")
        more = nodes + [gv.b64(bytes(32))]
        self.assertFail(self.run_v3(self.with_nodes(self.v3, more)), "truncated")
        self.assertFail(self.run_v3(self.fixed_end(self.with_nodes(self.v3, more))), "inclusion_proof")
        self.assertFail(self.run_v3(self.with_nodes(self.v3, [])), "truncated")
        self.assertFail(self.run_v3(self.fixed_end(self.with_nodes(self.v3, []))), "inclusion_proof")

    def test_counts(self):
        end = self.obj(self.v3[-1])
        for entries, nodes in ((end["entries"] + 1, end["nodes"]), (end["entries"] - 1, end["nodes"]),
                               (end["entries"], end["nodes"] + 1), (end["entries"], end["nodes"] - 1)):
            lines = self.v3[:-1] + [producer.jcs({"type": "end", "entries": entries, "nodes": nodes})]
            with self.subTest(entries=entries, nodes=nodes):
                self.assertFail(self.run_v3(lines), "truncated")
        self.assertFail(self.run_v3(self.v3[:-1]), "truncated")
        lines = self.v3[:-1] + [producer.jcs({"type": "end", "entries": end["entries"]})]
        self.assertFail(self.run_v3(lines), "malformed")

    def test_records_removed_added_or_changed(self):
        for pos in self.positions(self.v3, "entry"):
            line = self.obj(self.v3[pos])
            if line["leaf"]["envelope"]["kind"] not in ("gpu_usage", "energy"):
                continue
            with self.subTest(index=line["index"]):
                lines = self.fixed_end(self.v3[:pos] + self.v3[pos + 1:])
                self.assertFail(self.run_v3(lines), "inclusion_proof")
                lines = self.fixed_end(self.v3[:pos] + [self.v3[pos]] + self.v3[pos:])
                self.assertFail(self.run_v3(lines), "order")
                leaf = dict(line["leaf"], prev=gv.b64(bytes(32)))
                lines = self.v3[:pos] + [producer.jcs(dict(line, leaf=leaf))] + self.v3[pos + 1:]
                self.assertFail(self.run_v3(lines), ("leaf_invalid", "inclusion_proof"))
                leaf = dict(line["leaf"], index=line["index"] + 1)
                lines = self.v3[:pos] + [producer.jcs(dict(line, leaf=leaf))] + self.v3[pos + 1:]
                self.assertFail(self.run_v3(lines), "leaf_invalid")
        # A record of the log that the bundle does not hold, added: the proof gives its subtree
        # as a node, so the tree does not add up (or the record is not the certificate's).
        extra = next(i for i in range(self.sc.size) if i not in self.sc.records and i not in self.sc.context
                     and self.sc.log.entries[i].kind in ("gpu_usage", "energy"))
        entry = producer.jcs({"type": "entry", "index": extra, "leaf": json.loads(self.sc.log.entries[extra].leaf)})
        records = self.positions(self.v3, "entry")[len(self.sc.context):]
        at = next((p for p in records if self.obj(self.v3[p])["index"] > extra), records[-1] + 1)
        lines = self.fixed_end(self.v3[:at] + [entry] + self.v3[at:])
        self.assertFail(self.run_v3(lines), ("inclusion_proof", "wrong_tenant", "outside_period", "outside_scope"))

    def test_line_forms(self):
        pos = self.positions(self.v3, "entry")[-1]
        cases = {
            "entry not canonical": self.v3[:pos] + [self.v3[pos].replace(b'"leaf":{', b'"leaf": {', 1)]
            + self.v3[pos + 1:],
            "leaf as base64 (a v2 line)": self.v3[:pos] + [producer.jcs(
                producer.entry_line(self.sc.log, self.obj(self.v3[pos])["index"], self.sc.size))] + self.v3[pos + 1:],
            "header not canonical": [self.v3[0].replace(b'{"checkpoint"', b'{ "checkpoint"', 1)] + self.v3[1:],
            "header says v2": [self.v3[0].replace(b"gpuledger-bundle/v3", b"gpuledger-bundle/v2")] + self.v3[1:],
            "empty node line": self.v3[:-1] + [producer.jcs({"type": "nodes", "hashes": []})] + self.v3[-1:],
        }
        for name, lines in cases.items():
            with self.subTest(name):
                self.assertFail(self.run_v3(lines), "malformed")
        nodes_at = self.positions(self.v3, "nodes")[0]
        lines = self.v3[:nodes_at + 1] + [self.v3[pos]] + self.v3[nodes_at + 1:]
        lines = self.fixed_end([l for i, l in enumerate(lines) if i != pos])
        self.assertFail(self.run_v3(lines), "order")

    def test_multiproof_root_matches_the_definition(self):
        log = self.sc.log
        hashes = log.leaf_hashes(self.sc.size)
        for picked in ([], [0], [self.sc.size - 1], list(range(self.sc.size)), [1, 2, 3, 9, 12, 17]):
            nodes = multiproof_nodes(hashes, 0, self.sc.size, set(picked))
            leaves = [(i, hashes[i]) for i in picked]
            self.assertEqual(gv.multiproof_root(self.sc.size, leaves, iter(nodes)), log.root(self.sc.size))
            with self.assertRaises(ValueError):
                gv.multiproof_root(self.sc.size, leaves, iter(nodes + [bytes(32)]))


if __name__ == "__main__":
    unittest.main()
