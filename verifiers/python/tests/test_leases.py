"""Leases bind tenants to GPUs (issue #27; PROTOCOL.md section 5.8 and section 6.7, leases;
crates/core/src/fleet.rs `check_usage_lease`, `check_not_overbooked`): a lease_registered body
is checked on its own (record.rs `lease_nodes`), a lease covers GPUs and models its registered
nodes have without overbooking any node at any instant of its term, and usage is billed only
under a lease that covers its node and model for its whole interval, for at most what it covers.

`LeaseState` mirrors the Rust unit test `leases_bind_usage_to_gpus_and_never_overbook` case by
case on the verifier's registry (LogView); `LeaseRules` the same cases through bundles and
certificates, as `tests/test_fleet.py` does for the node rules; `LeaseBodies` the body rules."""

import copy
import unittest
from decimal import Decimal

from support import LogBundleTestCase, gv, producer

# n1 and n2: GPUs 0-7 H100, GPU 8 an L40S (the Rust test's nodes).
MODELS = {"H100": 8, "L40S": 1}

T0 = producer.unix("2026-11-05T00:00:00Z")


def ts(seconds):
    """The instant `seconds` after T0 (the Rust test's `t`)."""
    return gv.format_ts(T0 + seconds)


def lease_body(lease, start, end, items, tenant="t", cls="on_demand"):
    body = {"lease": lease, "tenant": tenant, "class": cls, "from": ts(start), "nodes": items}
    if end is not None:
        body["to"] = ts(end)
    return body


gpus = producer.lease_gpus
count = producer.lease_count

# The Rust test's leases, all of tenant t: L, GPUs 0-3 of n1, open-ended; S, half of GPUs 4 and 5
# of n1 (MIG or fractional slices) for 2 h; P, any 4 H100s of n2 for [1 h, 3 h).
LEASE_L = lease_body("L", 0, None, [gpus("n1", [0, 1, 2, 3])])
LEASE_S = lease_body("S", 0, 7200, [gpus("n1", [4, 5], "0.5")])
LEASE_P = lease_body("P", 3600, 10800, [count("n2", "H100", "4")])

# (name, lease, node, model, gpu_count, start, end, refusal or None): fleet.rs's usage cases.
USAGE_CASES = [
    ("the lease's 4 GPUs", "L", "n1", "H100", "4", 0, 3600, None),
    ("one GPU more than the lease", "L", "n1", "H100", "4.000001", 0, 3600, ("over_capacity", "body.gpu_count")),
    ("no lease", None, "n1", "H100", "1", 0, 3600, ("lease_not_on_node", "body.lease")),
    ("a model the lease lacks on the node", "L", "n1", "L40S", "1", 0, 3600, ("lease_not_on_node", "body.lease")),
    ("another node", "L", "n2", "H100", "1", 0, 3600, ("lease_not_on_node", "body.lease")),
    ("two half GPUs make one", "S", "n1", "H100", "1", 0, 3600, None),
    ("more than the halves", "S", "n1", "H100", "1.5", 0, 3600, ("over_capacity", "body.gpu_count")),
    ("after the slices' term", "S", "n1", "H100", "1", 7000, 7201, ("outside_lease_term", "body.end")),
    ("any 4 of n2", "P", "n2", "H100", "4", 3600, 7200, None),
    ("up to the term's end", "P", "n2", "H100", "4", 7200, 10800, None),
    ("before the term", "P", "n2", "H100", "1", 3599, 4000, ("outside_lease_term", "body.start")),
    ("past the term", "P", "n2", "H100", "1", 10000, 10801, ("outside_lease_term", "body.end")),
    # The node's own bound comes first: 1,024 GPUs on a 9-GPU node.
    ("1,024 GPUs", "L", "n1", "H100", "1024", 0, 60, ("over_capacity", "body.gpu_count")),
]

# (name, lease F's from, to, items, refusal or None): fleet.rs's registration cases.
OVERBOOKED = ("lease_overbooked", "body.nodes")
REGISTRATION_CASES = [
    ("the free GPUs 6 and 7", 0, None, [gpus("n1", [6, 7])], None),
    ("a GPU leased whole already", 0, None, [gpus("n1", [3])], OVERBOOKED),
    ("the other half of a sliced GPU", 0, None, [gpus("n1", [4], "0.5")], None),
    ("more than the other half", 0, None, [gpus("n1", [4], "0.500001")], OVERBOOKED),
    ("more than half, from the slices' end", 7200, None, [gpus("n1", [4], "0.6")], None),
    ("more than half, a second before it", 7199, None, [gpus("n1", [4], "0.6")], OVERBOOKED),
    # n1's H100s: 4 (L) + 2 x 0.5 (S) leased; 3 more fill it, 4 overbook it until S ends.
    ("exactly full by count", 0, None, [count("n1", "H100", "3")], None),
    ("one GPU more by count", 0, None, [count("n1", "H100", "4")], OVERBOOKED),
    ("one more, once the slices end", 7200, None, [count("n1", "H100", "4")], None),
    # n2: P holds 4 of 8 during [1 h, 3 h).
    ("5 ending where P starts", 0, 3600, [count("n2", "H100", "5")], None),
    ("5 overlapping P by a second", 0, 3601, [count("n2", "H100", "5")], OVERBOOKED),
    ("5 starting inside P", 10799, None, [count("n2", "H100", "5")], OVERBOOKED),
    ("5 starting where P ends", 10800, None, [count("n2", "H100", "5")], None),
    ("9 of an 8-H100 node on its own", 20000, None, [count("n2", "H100", "9")], OVERBOOKED),
    ("a GPU the node lacks", 0, None, [gpus("n1", [9])], ("unknown_gpu", "body.nodes[0].gpus")),
    ("a model the node lacks", 0, None, [count("n1", "A100", "1")], ("unknown_gpu_model", "body.nodes[0].gpu_model")),
    ("an unregistered node", 0, None, [count("n9", "H100", "1")], ("unknown_node", "body.nodes[0].node")),
]


def usage_body(lease, node, model, gpu_count, start, end, tenant="t", region="r1"):
    body = {"tenant": tenant, "region": region, "node": node, "gpu_model": model, "gpu_count": gpu_count,
            "start": ts(start), "end": ts(end), "gpu_seconds": producer.dec(Decimal(gpu_count) * (end - start))}
    if lease is not None:
        body["lease"] = lease
    return body


def node_body(node):
    return {"node": node, "region": "r1", "gpus": producer.node_gpus(MODELS, prefix=f"GPU-{node}"),
            "max_watts_per_gpu": "700"}


class LeaseState(unittest.TestCase):
    """The verifier's registry (LogView.check_fleet) against fleet.rs's unit test: n1 registered at
    entry 1, n2 at 2, L at 4, S at 5, P at 6; the entry checked is entry 10."""

    KEY = gv.parse_verifier_key(producer.Key.from_byte(0x71).verifier_key("gpuledger.test/leases"))

    @staticmethod
    def fail(reason, field, message):
        return gv.Failure(reason, "entry 10", f"{field}: {message}")

    def setUp(self):
        self.view = gv.LogView(self.KEY)
        for index, kind, body in ((1, "node_registered", node_body("n1")), (2, "node_registered", node_body("n2")),
                                  (4, "lease_registered", LEASE_L), (5, "lease_registered", LEASE_S),
                                  (6, "lease_registered", LEASE_P)):
            env = {"kind": kind, "signer": "ledger", "seq": index + 1, "body": body}
            self.view.apply(env, index, gv.check_body(kind, body))

    def verdict(self, kind, body, index=10):
        parsed = gv.check_body(kind, body)
        try:
            self.view.check_fleet(kind, body, index, parsed, self.fail)
        except gv.Failure as f:
            return f.reason, f.message.split(":")[0]
        return None

    def test_the_registry_keeps_the_leases(self):
        lease = self.view.leases["S"]
        self.assertEqual((lease.tenant, lease.index, lease.start, lease.end), ("t", 5, T0, T0 + 7200))
        self.assertEqual(lease.items, (gv.LeaseItem("n1", gpus=(4, 5), share=Decimal("0.5")),))
        self.assertEqual(self.view.leases_by_node, {"n1": ["L", "S"], "n2": ["P"]})
        n1 = node_body("n1")
        self.assertEqual(lease.covers(n1, "H100"), 1)
        self.assertEqual(lease.covers(n1, "L40S"), 0)
        self.assertEqual(self.view.leases["P"].covers(node_body("n2"), "H100"), 4)
        self.assertEqual(self.view.leases["P"].covers(n1, "H100"), 0)

    def test_usage_under_leases(self):
        for name, lease, node, model, n, start, end, want in USAGE_CASES:
            with self.subTest(name):
                self.assertEqual(self.verdict("gpu_usage", usage_body(lease, node, model, n, start, end)), want)

    def test_a_lease_registered_after_the_record_does_not_count(self):
        # Left to the party rules (unknown_lease), which come first.
        self.assertIsNone(self.verdict("gpu_usage", usage_body("P", "n2", "H100", "1", 3600, 4000), index=6))

    def test_registrations(self):
        for name, start, end, items, want in REGISTRATION_CASES:
            with self.subTest(name):
                self.assertEqual(self.verdict("lease_registered", lease_body("F", start, end, items)), want)

    def test_only_earlier_leases_count(self):
        # At entry 5, S is not yet registered: half of GPU 4 more than half is not overbooked.
        self.assertIsNone(self.verdict("lease_registered", lease_body("F", 0, None, [gpus("n1", [4], "0.6")]),
                                       index=5))
        # A lease's own registration is not one of its others (a re-registration is the party
        # rules' already_registered).
        self.assertIsNone(self.verdict("lease_registered", LEASE_L, index=4))

    def test_items_are_checked_in_order(self):
        items = [gpus("n1", [6]), count("n1", "A100", "1"), gpus("n1", [9])]
        self.assertEqual(self.verdict("lease_registered", lease_body("F", 0, None, items)),
                         ("unknown_gpu_model", "body.nodes[1].gpu_model"))
        items = [gpus("n1", [6]), count("n9", "H100", "1"), gpus("n1", [9])]
        self.assertEqual(self.verdict("lease_registered", lease_body("F", 0, None, items)),
                         ("unknown_node", "body.nodes[1].node"))
        # every item is checked against the nodes before overbooking is
        items = [gpus("n1", [3]), gpus("n2", [9])]
        self.assertEqual(self.verdict("lease_registered", lease_body("F", 0, None, items)),
                         ("unknown_gpu", "body.nodes[1].gpus"))

    def test_overbooking_sums_the_items_of_one_lease(self):
        # GPUs 6 and 7 whole plus any 1 H100 of n1, beside L (4) and S (2 halves): 4 + 1 + 2 + 1 = 8,
        # full; any 2: 9 > 8. Once S has ended, any 2 fit and any 3 do not.
        for start, n, want in ((0, "1", None), (0, "2", OVERBOOKED), (7200, "2", None), (7200, "3", OVERBOOKED)):
            with self.subTest(start=start, count=n):
                items = [gpus("n1", [6, 7]), count("n1", "H100", n)]
                self.assertEqual(self.verdict("lease_registered", lease_body("F", start, None, items)), want)
        # GPU 8 (the L40S) whole and one L40S by count: 2 of a model the node has 1 of.
        items = [gpus("n2", [8]), count("n2", "L40S", "1")]
        self.assertEqual(self.verdict("lease_registered", lease_body("F", 0, None, items)), OVERBOOKED)
        # Shares of different GPUs of a model add up per model: 9 halves of 8 H100s plus 4 more.
        items = [gpus("n2", range(8), "0.5"), count("n2", "H100", "4.5")]
        self.assertEqual(self.verdict("lease_registered", lease_body("F", 20000, None, items)), OVERBOOKED)
        items = [gpus("n2", range(8), "0.5"), count("n2", "H100", "4")]
        self.assertIsNone(self.verdict("lease_registered", lease_body("F", 20000, None, items)))

    def test_usage_covered_by_several_items(self):
        # A lease of GPU 6 whole, a quarter of GPU 7 and any 1.5 H100s of n1 covers 2.75 of them.
        lease = lease_body("M", 7200, None, [gpus("n1", [6]), gpus("n1", [7], "0.25"), count("n1", "H100", "1.5")])
        self.assertIsNone(self.verdict("lease_registered", lease, index=7))
        self.view.apply({"kind": "lease_registered", "signer": "ledger", "seq": 8, "body": lease}, 7,
                        gv.check_body("lease_registered", lease))
        self.assertEqual(self.view.leases["M"].covers(node_body("n1"), "H100"), Decimal("2.75"))
        self.assertIsNone(self.verdict("gpu_usage", usage_body("M", "n1", "H100", "2.75", 7200, 7260)))
        self.assertEqual(self.verdict("gpu_usage", usage_body("M", "n1", "H100", "2.750000001", 7200, 7260)),
                         ("over_capacity", "body.gpu_count"))
        self.assertEqual(self.verdict("gpu_usage", usage_body("M", "n1", "L40S", "1", 7200, 7260)),
                         ("lease_not_on_node", "body.lease"))
        # an open-ended term holds any later interval; its start is its edge
        self.assertIsNone(self.verdict("gpu_usage", usage_body("M", "n1", "H100", "1", 10 ** 7, 10 ** 7 + 60)))
        self.assertEqual(self.verdict("gpu_usage", usage_body("M", "n1", "H100", "1", 7199, 7260)),
                         ("outside_lease_term", "body.start"))


class LeaseRules(LogBundleTestCase):
    """The lease rules rechecked from bundles and certificates. The base log: 0 log_policy, 1
    tenant_registered t, 2 tenant_registered u, 3, 4 node_registered n1, n2 (region r1, GPUs 0-7
    H100 and 8 an L40S, 700 W), 5 node-a's key (nodes [n1, n2], regions [r1]), 6, 7, 8 the leases
    L, S, P of t (the Rust test's), terms from T0 = 2026-11-05T00:00:00Z; the test appends more.
    `bundle()` holds every entry (context: every entry but the records); `cert()` a certificate
    for t with section 14's context (t's leases only)."""

    ORIGIN = "gpuledger.test/leases"
    REGISTERED = "2026-10-01T00:00:00Z"

    def setUp(self):
        super().setUp()
        self.lk, self.na = producer.Key.from_byte(0x71), producer.Key.from_byte(0x72)
        log = self.log = producer.Log(self.lk, self.ORIGIN)
        log.policy(self.REGISTERED)                                                                   # 0
        log.tenant("t", self.REGISTERED)                                                              # 1
        log.tenant("u", self.REGISTERED)                                                              # 2
        for node in ("n1", "n2"):                                                                     # 3, 4
            log.node(node, "r1", self.REGISTERED, gpus=producer.node_gpus(MODELS, prefix=f"GPU-{node}"),
                     max_watts_per_gpu="700")
        log.register("node-a", self.na, "node", self.REGISTERED, regions=["r1"], nodes=["n1", "n2"])   # 5
        for body in (LEASE_L, LEASE_S, LEASE_P):                                                       # 6, 7, 8
            self.lease(body)

    def lease(self, body, received_at=None):
        return self.log.ledger("lease_registered", copy.deepcopy(body), received_at or self.REGISTERED)

    def usage(self, lease, node, model, n, start, end, tenant="t", **kw):
        return self.log.gpu_usage("node-a", self.na, tenant, "r1", model, n, ts(start), end - start, node=node,
                                  lease=lease, **kw)

    def test_reasons_are_known(self):
        for reason in ("unknown_gpu", "lease_overbooked", "lease_not_on_node", "outside_lease_term"):
            self.assertIn(reason, gv.REASONS)
            self.assertIn(reason, gv.ADMISSION_REASONS)

    def test_baseline(self):
        self.passes(self.bundle())
        self.passes(self.cert())
        self.assertEqual(producer.context_for(self.log, len(self.log.entries), [], "t"), [0, 1, 3, 4, 6, 7, 8])

    # usage under leases

    def test_usage_under_leases(self):
        for name, lease, node, model, n, start, end, want in USAGE_CASES:
            with self.subTest(name):
                self.setUp()
                i = self.usage(lease, node, model, n, start, end)
                if want is None:
                    self.passes(self.bundle())
                    self.passes(self.cert())
                else:
                    self.refused(self.bundle(), want[0], i, want[1])
                    self.refused(self.cert(), want[0], i, want[1])

    def test_what_the_refusals_say(self):
        i = self.usage(None, "n1", "H100", "1", 0, 60)
        self.refused(self.bundle(), "lease_not_on_node", i, "body.lease", says="is absent")
        self.log.entries.pop()
        i = self.usage("L", "n1", "H100", "4.5", 0, 60)
        self.refused(self.bundle(), "over_capacity", i, "body.gpu_count", says="L covers 4 H100 GPUs of node n1")
        self.log.entries.pop()
        i = self.usage("L", "n1", "H100", "9", 0, 60)
        self.refused(self.bundle(), "over_capacity", i, "body.gpu_count", says="node n1 has 8 H100 GPUs")
        self.log.entries.pop()
        i = self.usage("S", "n1", "H100", "1", 7000, 7201)
        self.refused(self.bundle(), "outside_lease_term", i, "body.end",
                     says="not within the term of S, [2026-11-05T00:00:00Z, 2026-11-05T02:00:00Z)")

    def test_records_of_one_lease_are_one_stream(self):
        # Two signers' records of one lease, node and model never overlap (section 6.4a), so at no
        # instant does the lease bill more than it covers.
        nb = producer.Key.from_byte(0x73)
        self.log.register("node-b", nb, "node", self.REGISTERED, regions=["r1"], nodes=["n1"])
        self.usage("L", "n1", "H100", "4", 0, 3600)
        i = self.log.gpu_usage("node-b", nb, "t", "r1", "H100", "4", ts(1800), 3600, node="n1", lease="L")
        self.refused(self.bundle(), "overlapping_interval", i, "body.start")

    # the order of the rules: parties, the node, the lease, time

    def test_parties_come_before_the_lease_rules(self):
        self.lease(lease_body("U", 20000, None, [gpus("n1", [7])], tenant="u"))
        i = self.usage("U", "n1", "H100", "1", 20000, 20060)  # t's record under u's lease
        self.refused(self.bundle(), "lease_tenant_mismatch", i, "body.lease")
        self.refused(self.cert(), "unknown_lease", i, "body.lease")  # t's bundle holds no lease of u

    def test_a_lease_registered_after_the_record(self):
        i = self.usage("F", "n1", "H100", "1", 0, 60)
        self.lease(lease_body("F", 0, None, [gpus("n1", [6])]), received_at=self.log.entries[-1].received_at)
        self.refused(self.bundle(), "unknown_lease", i, "body.lease")

    def test_the_node_comes_before_the_lease(self):
        i = self.usage("L", "n1", "A100", "1", 0, 60)
        self.refused(self.bundle(), "unknown_gpu_model", i, "body.gpu_model")

    def test_the_lease_comes_before_time(self):
        # outside the term and too old (35 days and one second): the lease speaks first
        i = self.usage("P", "n2", "H100", "1", 3599, 3659, received_at="2026-12-10T01:00:00Z")
        self.refused(self.bundle(), "outside_lease_term", i, "body.start")
        self.log.entries.pop()
        i = self.usage("P", "n2", "H100", "1", 3600, 3660, received_at="2026-12-10T01:01:01Z")
        self.refused(self.bundle(), "too_old", i, "body.start")

    # registrations

    def test_registrations(self):
        for name, start, end, items, want in REGISTRATION_CASES:
            with self.subTest(name):
                self.setUp()
                i = self.lease(lease_body("F", start, end, items))
                if want is None:
                    self.passes(self.bundle())
                    self.passes(self.cert())
                else:
                    self.refused(self.bundle(), want[0], i, want[1])
                    self.refused(self.cert(), want[0], i, want[1])

    def test_what_an_overbooking_says(self):
        i = self.lease(lease_body("F", 0, None, [gpus("n1", [4], "0.75")]))
        self.refused(self.bundle(), "lease_overbooked", i, "body.nodes",
                     says="would lease 1.25 of GPU 4 of node n1 at 2026-11-05T00:00:00Z")
        self.log.entries.pop()
        i = self.lease(lease_body("F", 5000, None, [count("n2", "H100", "5")]))
        self.refused(self.bundle(), "lease_overbooked", i, "body.nodes",
                     says="would lease 9 H100 GPUs of node n2 at 2026-11-05T01:23:20Z, which has 8")

    def test_parties_come_before_the_lease_rules_of_a_registration(self):
        i = self.lease(lease_body("L", 0, None, [gpus("n9", [0])]))
        self.refused(self.bundle(), "already_registered", i, "body.lease")
        self.log.entries.pop()
        i = self.lease(lease_body("F", 0, None, [gpus("n9", [0])], tenant="v"))
        self.refused(self.bundle(), "unknown_tenant", i, "body.tenant")

    def test_a_lease_naming_a_node_registered_after_it(self):
        i = self.lease(lease_body("F", 0, None, [gpus("n3", [0])]))
        self.log.node("n3", "r1", self.REGISTERED, gpus=producer.node_gpus(MODELS, prefix="GPU-n3"))
        self.refused(self.bundle(), "unknown_node", i, "body.nodes[0].node")

    def test_an_invalid_lease_body_is_leaf_invalid(self):
        i = self.lease(lease_body("F", 0, 0, [gpus("n1", [6])]))
        r = self.refused(self.bundle(), "leaf_invalid", i)
        self.assertIn("empty_interval: body.to", r.message)

    # what a bundle shows: the subject tenant's leases only (sections 6.7 and 14)

    def test_overbooking_by_another_tenants_lease(self):
        # u leases GPU 3 of n1, which t's L holds whole: found in a bundle that holds both leases;
        # t's certificate bundle holds neither u's lease nor its registration.
        i = self.lease(lease_body("U", 0, None, [gpus("n1", [3])], tenant="u"))
        self.refused(self.bundle(), "lease_overbooked", i, "body.nodes")
        self.usage("L", "n1", "H100", "4", 0, 3600)
        self.passes(self.cert())
        # and the other way round: t's lease overbooking u's earlier one
        self.setUp()
        self.log.entries[6:] = []
        self.lease(lease_body("U", 0, None, [gpus("n1", [0, 1, 2, 3])], tenant="u"))   # 6
        i = self.lease(LEASE_L)                                                         # 7
        self.usage("L", "n1", "H100", "4", 0, 3600)
        self.refused(self.bundle(), "lease_overbooked", i, "body.nodes")
        self.passes(self.cert())

    def test_records_of_another_tenant_in_a_certificate_bundle(self):
        # u's record names no lease: the lease rules, like the party rules, are not applied to a
        # record of another tenant than the certificate's; step 5 names it (wrong_tenant).
        self.usage("L", "n1", "H100", "1", 0, 60)
        j = self.usage(None, "n1", "H100", "1", 120, 180, tenant="u")
        log, size = self.log, len(self.log.entries)
        records = sorted(producer.covered(log, size, "t", *producer.PERIOD, {}) + [j])
        cert = producer.make_certificate(log, size, "t", *producer.PERIOD, records=records[:-1])
        lines = producer.make_bundle(log, size, producer.context_for(log, size, records, "t"), records,
                                     {"certificate": cert["id"]})
        self.assertFail(self.run_certificate(cert, lines, log.verifier_key()), "wrong_tenant")
        # A bundle alone applies them to every record.
        self.refused(self.bundle(), "lease_not_on_node", j, "body.lease")


class LeaseBodies(unittest.TestCase):
    """Section 5.8 (record.rs `LeaseRegistered::check`, `lease_nodes`): each refusal's reason and
    field, in the Rust order (class, lease, tenant, from, to, then item by item)."""

    EXAMPLE = {"class": "on_demand", "from": "2026-11-01T00:00:00Z", "lease": "L-acme-1",
               "nodes": [{"gpus": [0, 1, 2, 3], "node": "n1"}, {"gpus": [6], "node": "n1", "share": "0.5"},
                         {"count": "4", "gpu_model": "H100-SXM-80G", "node": "n2"}],
               "tenant": "acme", "to": "2027-11-01T00:00:00Z"}

    def code(self, body=None, **changes):
        body = copy.deepcopy(self.EXAMPLE if body is None else body)
        body.update(changes)
        try:
            gv.check_body("lease_registered", body)
        except gv.FieldError as e:
            return e.code, e.field
        return None

    def items(self, *items, **changes):
        return self.code(nodes=list(items), **changes)

    def test_the_example_passes(self):
        self.assertIsNone(self.code())
        lease = gv.check_body("lease_registered", copy.deepcopy(self.EXAMPLE))["lease"]
        self.assertEqual(lease.items[1], gv.LeaseItem("n1", gpus=(6,), share=Decimal("0.5")))
        self.assertEqual(lease.items[2], gv.LeaseItem("n2", gpu_model="H100-SXM-80G", count=Decimal(4)))
        open_ended = {k: v for k, v in self.EXAMPLE.items() if k != "to"}
        self.assertIsNone(self.code(open_ended))
        self.assertIsNone(gv.check_body("lease_registered", open_ended)["lease"].end)

    def test_shape(self):
        self.assertEqual(self.code({k: v for k, v in self.EXAMPLE.items() if k != "from"}), ("malformed", "body.from"))
        self.assertEqual(self.code({k: v for k, v in self.EXAMPLE.items() if k != "nodes"}),
                         ("malformed", "body.nodes"))
        self.assertEqual(self.code(to=None), ("malformed", "body.to"))
        self.assertEqual(self.code(nodes={"node": "n1"}), ("malformed", "body.nodes"))
        self.assertEqual(self.code(extra="x"), ("malformed", "body.extra"))
        self.assertEqual(self.items("n1"), ("malformed", "body.nodes[0]"))
        self.assertEqual(self.items({"gpus": [0]}), ("malformed", "body.nodes[0].node"))
        self.assertEqual(self.items({"node": "n1", "gpus": [0], "model": "H100"}), ("malformed", "body.nodes[0].model"))
        self.assertEqual(self.items({"node": "n1", "gpus": None}), ("malformed", "body.nodes[0].gpus"))
        self.assertEqual(self.items({"node": "n1", "gpus": [0], "share": None}), ("malformed", "body.nodes[0].share"))
        self.assertEqual(self.items({"node": "n1", "gpus": [0], "share": 0.5}), ("malformed", "body.nodes[0].share"))
        self.assertEqual(self.items({"node": "n1", "gpu_model": "H100", "count": 4}),
                         ("malformed", "body.nodes[0].count"))
        self.assertEqual(self.items({"node": 1, "gpus": [0]}), ("malformed", "body.nodes[0].node"))
        for bad in ("0", -1, 2 ** 32, True):
            with self.subTest(gpu=bad):
                self.assertEqual(self.items({"node": "n1", "gpus": [bad]}), ("malformed", "body.nodes[0].gpus[0]"))
        self.assertIsNone(self.items({"node": "n1", "gpus": [2 ** 32 - 1]}))
        # every item's shape is read before any value is checked
        self.assertEqual(self.items({"node": "-", "gpus": [0]}, {"node": "n1", "gpus": ["0"]}),
                         ("malformed", "body.nodes[1].gpus[0]"))
        self.assertEqual(self.code(nodes=[{"node": "n1", "gpus": ["0"]}], **{"class": "free"}),
                         ("malformed", "body.nodes[0].gpus[0]"))

    def test_the_order_of_the_fields(self):
        self.assertEqual(self.code(lease="-", **{"class": "free"}), ("invalid_field", "body.class"))
        self.assertEqual(self.code(lease="-", tenant="-"), ("invalid_field", "body.lease"))
        self.assertEqual(self.code(tenant="ledger"), ("invalid_field", "body.tenant"))
        self.assertEqual(self.code(tenant="-", **{"from": "x"}), ("invalid_field", "body.tenant"))
        self.assertEqual(self.code(to="x", **{"from": "2026-02-30T00:00:00Z"}), ("invalid_field", "body.from"))
        self.assertEqual(self.code(to="2026-11-01T00:00:00"), ("invalid_field", "body.to"))
        self.assertEqual(self.code(to="2026-11-01T00:00:00Z", nodes=[]), ("empty_interval", "body.to"))
        self.assertEqual(self.code(to="2026-10-31T23:59:59Z"), ("empty_interval", "body.to"))
        self.assertIsNone(self.code(to="2026-11-01T00:00:01Z"))

    def test_nodes(self):
        self.assertEqual(self.code(nodes=[]), ("invalid_field", "body.nodes"))
        many = [{"node": "n1", "gpus": [i]} for i in range(64)]
        self.assertIsNone(self.code(nodes=many))
        self.assertEqual(self.code(nodes=many + [{"node": "n2", "gpus": [0]}]), ("quantity_out_of_range", "body.nodes"))

    def test_the_form_of_an_item(self):
        form = ("invalid_field", "body.nodes[1]")
        first = {"node": "n1", "gpus": [0]}
        self.assertEqual(self.items(first, {"node": "n1"}), form)
        self.assertEqual(self.items(first, {"node": "n1", "gpus": [1], "gpu_model": "H100", "count": "1"}), form)
        self.assertEqual(self.items(first, {"node": "n1", "gpus": [1], "count": "1"}), form)
        self.assertEqual(self.items(first, {"node": "n1", "gpus": [1], "gpu_model": "H100"}), form)
        self.assertEqual(self.items(first, {"node": "n1", "gpu_model": "H100"}), form)
        self.assertEqual(self.items(first, {"node": "n1", "count": "1"}), form)
        self.assertEqual(self.items(first, {"node": "n1", "share": "0.5"}), form)
        self.assertEqual(self.items(first, {"node": "n1", "gpu_model": "H100", "count": "1", "share": "0.5"}), form)
        # the node comes first, then the form
        self.assertEqual(self.items(first, {"node": "ledger"}), ("invalid_field", "body.nodes[1].node"))
        self.assertEqual(self.items(first, {"node": "n 1", "gpus": [0]}), ("invalid_field", "body.nodes[1].node"))
        # items are checked one after the other
        self.assertEqual(self.items({"node": "n1", "gpus": [0], "share": "2"}, {"node": "-", "gpus": [0]}),
                         ("quantity_out_of_range", "body.nodes[0].share"))

    def test_gpus(self):
        g = "body.nodes[0].gpus"
        self.assertEqual(self.items({"node": "n1", "gpus": []}), ("quantity_out_of_range", g))
        self.assertEqual(self.items({"node": "n1", "gpus": [], "share": "x"}), ("quantity_out_of_range", g))
        self.assertIsNone(self.items({"node": "n1", "gpus": list(range(64))}))
        self.assertEqual(self.items({"node": "n1", "gpus": list(range(65))}), ("quantity_out_of_range", g))
        self.assertEqual(self.items({"node": "n1", "gpus": [1, 1]}), ("invalid_field", g))
        self.assertEqual(self.items({"node": "n1", "gpus": [2, 1]}), ("invalid_field", g))
        self.assertEqual(self.items({"node": "n1", "gpus": [2, 1], "share": "x"}), ("invalid_field", g))
        # no GPU of a node listed twice in a lease (the same index of another node is another GPU)
        self.assertEqual(self.items({"node": "n1", "gpus": [0, 1]}, {"node": "n1", "gpus": [1, 2], "share": "0.5"}),
                         ("invalid_field", "body.nodes[1].gpus"))
        self.assertEqual(self.items({"node": "n1", "gpus": [0, 1]}, {"node": "n1", "gpus": [1], "share": "x"}),
                         ("invalid_field", "body.nodes[1].gpus"))
        self.assertIsNone(self.items({"node": "n1", "gpus": [0, 1]}, {"node": "n2", "gpus": [1, 2]}))
        self.assertIsNone(self.items({"node": "n1", "gpus": [0]}, {"node": "n1", "gpus": [1], "share": "0.5"}))

    def test_share(self):
        s = "body.nodes[0].share"
        for share, want in (("0.5", None), ("0.000000001", None), ("0.999999999", None),
                            ("0", ("quantity_out_of_range", s)), ("1", ("quantity_out_of_range", s)),
                            ("1.5", ("quantity_out_of_range", s)), ("2", ("quantity_out_of_range", s)),
                            ("-0.5", ("negative_quantity", s)), ("0.50", ("invalid_field", s)),
                            (".5", ("invalid_field", s)), ("0.0000000001", ("invalid_field", s)),
                            ("x", ("invalid_field", s))):
            with self.subTest(share=share):
                self.assertEqual(self.items({"node": "n1", "gpus": [0, 1], "share": share}), want)

    def test_count(self):
        c = "body.nodes[0].count"
        # up to MAX_NODE_GPUS x MAX_MIG_SLICES = 512 units (MIG instances; record.rs `quantity`)
        for n, want in (("4", None), ("0.5", None), ("64", None), ("0.000000001", None),
                        ("64.000000001", None), ("65", None), ("512", None), ("511.999999999", None),
                        ("0", ("quantity_out_of_range", c)), ("512.000000001", ("quantity_out_of_range", c)),
                        ("513", ("quantity_out_of_range", c)), ("-1", ("negative_quantity", c)),
                        ("4.0", ("invalid_field", c)), ("04", ("invalid_field", c))):
            with self.subTest(count=n):
                self.assertEqual(self.items({"node": "n1", "gpu_model": "H100", "count": n}), want)
        m = "body.nodes[0].gpu_model"
        self.assertEqual(self.items({"node": "n1", "gpu_model": "-", "count": "x"}), ("invalid_field", m))
        self.assertEqual(self.items({"node": "n1", "gpu_model": "ledger", "count": "1"}), ("invalid_field", m))
        # a node's model is counted once (after its count is read)
        self.assertEqual(self.items({"node": "n1", "gpu_model": "H100", "count": "1"},
                                    {"node": "n1", "gpu_model": "H100", "count": "2"}),
                         ("invalid_field", "body.nodes[1].gpu_model"))
        self.assertEqual(self.items({"node": "n1", "gpu_model": "H100", "count": "1"},
                                    {"node": "n1", "gpu_model": "H100", "count": "0"}),
                         ("quantity_out_of_range", "body.nodes[1].count"))
        self.assertIsNone(self.items({"node": "n1", "gpu_model": "H100", "count": "1"},
                                     {"node": "n2", "gpu_model": "H100", "count": "2"},
                                     {"node": "n1", "gpu_model": "L40S", "count": "1"},
                                     {"node": "n1", "gpus": [0]}))

    def test_in_an_envelope(self):
        env = {"v": 3, "kind": "lease_registered", "signer": "ledger", "key_id": "34750f98bd59fcfc", "seq": 1,
               "body": copy.deepcopy(self.EXAMPLE), "sig": "A" * 86 + "=="}
        gv.check_envelope(env, "gpuledger.test/leases")
        env["body"]["to"] = env["body"]["from"]
        with self.assertRaises(gv.FieldError) as cm:
            gv.check_envelope(env, "gpuledger.test/leases")
        self.assertEqual((cm.exception.code, cm.exception.field), ("empty_interval", "body.to"))


if __name__ == "__main__":
    unittest.main()
