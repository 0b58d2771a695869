"""The fleet rules (section 6.7, fleet; crates/core/src/fleet.rs `check_fleet`), rechecked from a
bundle's entries: a node is registered once (`node_registered`, a ledger kind the bundle carries
as context), a node key names registered nodes only, and a record fits the node it names: its
region (the node's own: `wrong_region`), a GPU model the node has, at most as many GPUs of that
model as the node has, and no more energy than the node's GPUs can draw (GPUs x max_watts_per_gpu
x seconds, plus 5 %). Node updates and MIG layouts: tests/test_fleet_updates.py."""

import copy
import unittest
from decimal import Decimal

from support import LogBundleTestCase, gv, producer

# n1: 8 H100 and one L40S, 700 W each: 9 x 700 W x 3600 s = 22,680,000 W s = 6.3 kWh, + 5 % = 6.615 kWh
# an hour (1 kWh = 3,600,000 W s).
N1_GPUS = producer.node_gpus({"H100": 8, "L40S": 1}, prefix="GPU-n1")


class FleetRules(LogBundleTestCase):
    """The base log: 0 log_policy, 1 tenant_registered t, 2 node_registered n1 (region r1, 8 H100 +
    1 L40S, 700 W), 3 node-a's key (nodes [n1], regions [r1, r2]: wider than n1's region, which is
    not a rule), 4 lease L of t (all 9 of n1's GPUs, open-ended: the lease rules are
    tests/test_leases.py's), under which `usage()` bills; the test appends more. `bundle()` holds
    every entry (context: every entry but the records)."""

    ORIGIN = "gpuledger.test/fleet"

    def setUp(self):
        super().setUp()
        self.lk, self.na = producer.Key.from_byte(0x61), producer.Key.from_byte(0x62)
        log = self.log = producer.Log(self.lk, self.ORIGIN)
        log.policy("2026-10-01T00:00:00Z")                                                            # 0
        log.tenant("t", "2026-10-01T00:00:00Z")                                                       # 1
        log.node("n1", "r1", "2026-10-01T00:00:00Z", gpus=N1_GPUS, max_watts_per_gpu="700")           # 2
        log.register("node-a", self.na, "node", "2026-10-01T00:00:00Z", regions=["r1", "r2"], nodes=["n1"])  # 3
        log.lease("L", "t", "on_demand", "2026-10-01T00:00:00Z", [producer.lease_gpus("n1", range(9))])      # 4

    def usage(self, count="1", model="H100", region="r1", node="n1", seconds=3600, start="2026-11-05T00:00:00Z",
              lease="L", **kw):
        return self.log.gpu_usage("node-a", self.na, "t", region, model, count, start, seconds, node=node,
                                  lease=lease, **kw)

    def energy(self, kwh, seconds=3600, region="r1", node="n1", start="2026-11-05T00:00:00Z", **kw):
        return self.log.energy("node-a", self.na, "t", region, kwh, start, seconds, node=node, **kw)

    def test_reasons_are_known(self):
        for reason in ("unknown_node", "unknown_gpu_model", "over_capacity", "energy_over_bound"):
            self.assertIn(reason, gv.REASONS)
            self.assertIn(reason, gv.ADMISSION_REASONS)

    def test_baseline(self):
        self.usage("8")
        self.usage("1", model="L40S")
        self.usage("0.5", model="L40S", start="2026-11-06T00:00:00Z")
        self.energy("2")
        self.passes(self.bundle())
        self.passes(self.cert())

    # capacity: at most as many GPUs of the model as the node has

    def test_all_gpus_of_the_model_pass(self):
        self.usage("8")
        self.passes(self.bundle())

    def test_one_millionth_of_a_gpu_more_is_over_capacity(self):
        i = self.usage("8.000001")
        self.refused(self.bundle(), "over_capacity", i, "body.gpu_count", says="n1 has 8 H100 GPUs")
        self.refused(self.cert(), "over_capacity", i, "body.gpu_count")

    def test_a_thousand_gpus_on_an_eight_gpu_node(self):
        i = self.usage("1024", seconds=60)
        self.refused(self.bundle(), "over_capacity", i, "body.gpu_count")

    def test_capacity_counts_the_records_model_only(self):
        i = self.usage("2", model="L40S")  # the node has 9 GPUs, one of them an L40S
        self.refused(self.bundle(), "over_capacity", i, "body.gpu_count")

    def test_a_model_the_node_lacks(self):
        i = self.usage("1", model="A100")
        self.refused(self.bundle(), "unknown_gpu_model", i, "body.gpu_model", says="n1 has no A100 GPU")
        self.refused(self.cert(), "unknown_gpu_model", i, "body.gpu_model")

    # region: within the key's scope (section 6.7, scope) and the node's own region (wrong_region)

    def test_reasons_include_wrong_region(self):
        self.assertIn("wrong_region", gv.REASONS)
        self.assertIn("wrong_region", gv.ADMISSION_REASONS)

    def test_usage_in_a_region_of_the_key_other_than_the_nodes_is_wrong_region(self):
        i = self.usage("1", region="r2")  # within the key's scope (r1, r2), not node n1's region r1
        self.refused(self.bundle(), "wrong_region", i, "body.region", says="node n1 is registered in r1")
        self.refused(self.cert(), "wrong_region", i, "body.region")

    def test_energy_in_a_region_of_the_key_other_than_the_nodes_is_wrong_region(self):
        i = self.energy("1", region="r2")
        self.refused(self.bundle(), "wrong_region", i, "body.region", says="node n1 is registered in r1")
        self.refused(self.cert(), "wrong_region", i, "body.region")

    def test_wrong_region_comes_before_the_model_and_capacity(self):
        i = self.usage("9", model="A100", region="r2")  # a model n1 lacks, and too many: the region speaks first
        self.refused(self.bundle(), "wrong_region", i, "body.region")

    def test_wrong_region_comes_before_the_energy_bound(self):
        i = self.energy("100", region="r2")
        self.refused(self.bundle(), "wrong_region", i, "body.region")

    def test_the_keys_scope_comes_before_wrong_region(self):
        i = self.usage("1", region="r3")  # neither the key's regions nor the node's
        self.refused(self.bundle(), "region_not_allowed", i, "body.region")

    def test_the_nodes_region_passes(self):
        self.usage("1", region="r1")
        self.energy("1", region="r1", start="2026-11-05T01:00:00Z")
        self.passes(self.bundle())

    # energy: at most GPUs x max_watts_per_gpu x seconds, + 5 %

    def test_energy_exactly_at_the_bound_passes(self):
        self.energy("6.615")  # 9 x 700 W x 3600 s x 1.05 / 3,600,000 = 6.615 kWh
        self.passes(self.bundle())
        self.passes(self.cert())

    def test_energy_one_millionth_above_the_bound(self):
        i = self.energy("6.615001")
        r = self.refused(self.bundle(), "energy_over_bound", i, "body.kwh")
        self.assertIn("(+5 %): 6.615 kWh", r.message)
        self.refused(self.cert(), "energy_over_bound", i, "body.kwh")

    def test_energy_bound_is_exact_where_it_does_not_terminate(self):
        # 9 x 700 W x 1 s x 1.05 / 3,600,000 = 0.0018375 kWh exactly; x 7 s = 0.0128625.
        self.energy("0.0128625", seconds=7)
        self.passes(self.bundle())
        self.log.entries.pop()
        i = self.energy("0.012862501", seconds=7)
        self.refused(self.bundle(), "energy_over_bound", i, "body.kwh")
        # 1 GPU of 1 W for 1 s: 1.05 / 3,600,000 kWh = 0.000000291666... (no finite decimal):
        # 0.000000291 passes, 0.000000292 does not.
        self.setUp()
        self.log.node("n2", "r1", "2026-10-02T00:00:00Z", {"H100": 1}, "1")
        nb = producer.Key.from_byte(0x63)
        self.log.register("node-b", nb, "node", "2026-10-02T00:00:00Z", regions=["r1"], nodes=["n2"])
        self.log.lease("L2", "t", "on_demand", "2026-10-02T00:00:00Z", [producer.lease_gpus("n2", range(1))])
        self.log.energy("node-b", nb, "t", "r1", "0.000000291", "2026-11-05T00:00:00Z", 1, node="n2")
        self.passes(self.bundle())
        i = self.log.energy("node-b", nb, "t", "r1", "0.000000292", "2026-11-05T00:00:01Z", 1, node="n2")
        self.refused(self.bundle(), "energy_over_bound", i, "body.kwh")

    # a tenant's energy: under its leases of the node, for what they cover

    def tenant_energy(self, tenant, kwh, start="2026-11-05T00:00:00Z", seconds=3600):
        return self.log.energy("node-a", self.na, tenant, "r1", kwh, start, seconds, node="n1")

    def partial_leases(self):
        """Tenant u leases GPU 0 of n1 whole and GPUs 1 and 2 at a quarter each, from
        2026-11-05T00:00Z to 02:00Z: 1.5 GPUs, 1.5 x 700 W x 3600 s + 5 % = 1.1025 kWh an hour
        (t's lease L shares those GPUs: it is replaced by one of GPUs 3-8)."""
        self.setUp()
        self.log.entries.pop()
        self.log.lease("L", "t", "on_demand", "2026-10-01T00:00:00Z", [producer.lease_gpus("n1", range(3, 9))])
        self.log.tenant("u", "2026-10-01T00:00:00Z")
        self.log.lease("U1", "u", "on_demand", "2026-10-01T00:00:00Z", [producer.lease_gpus("n1", [0])],
                       start="2026-11-05T00:00:00Z", end="2026-11-05T02:00:00Z")
        self.log.lease("U2", "u", "on_demand", "2026-10-01T00:00:00Z", [producer.lease_gpus("n1", [1, 2], "0.25")],
                       start="2026-11-05T00:00:00Z", end="2026-11-05T01:00:00Z")

    def test_a_tenants_energy_at_the_bound_of_its_leases(self):
        self.partial_leases()
        self.tenant_energy("u", "1.1025")
        # after U2's term only U1's GPU holds: 700 W x 3600 s + 5 % = 0.735 kWh
        self.tenant_energy("u", "0.735", start="2026-11-05T01:00:00Z")
        self.passes(self.bundle())

    def test_a_tenants_energy_above_its_leases_is_over_bound(self):
        self.partial_leases()
        i = self.tenant_energy("u", "1.102500001")
        self.refused(self.bundle(), "energy_over_bound", i, "body.kwh", says="the 1.5 GPUs u leases of node n1")

    def test_the_nodes_whole_draw_billed_to_a_tenant_with_part_of_it(self):
        self.partial_leases()
        i = self.tenant_energy("u", "6.615")
        self.refused(self.bundle(), "energy_over_bound", i, "body.kwh")

    def test_a_lease_ending_inside_the_interval_does_not_count(self):
        self.partial_leases()
        i = self.tenant_energy("u", "0.8", start="2026-11-05T00:30:00Z")  # U2 ends at 01:00
        self.refused(self.bundle(), "energy_over_bound", i, "body.kwh")

    def test_a_tenants_energy_outside_its_leases_terms(self):
        self.partial_leases()
        i = self.tenant_energy("u", "0.1", start="2026-11-05T01:30:00Z")  # U1 ends at 02:00
        self.refused(self.bundle(), "outside_lease_term", i, "body.start", says="any lease of u on node n1")

    def test_a_tenants_energy_on_a_node_it_does_not_lease(self):
        self.log.tenant("u", "2026-10-01T00:00:00Z")
        i = self.tenant_energy("u", "0.001")
        self.refused(self.bundle(), "lease_not_on_node", i, "body.tenant", says="u has no lease on node n1")

    def test_energy_without_a_tenant_keeps_the_nodes_bound(self):
        self.partial_leases()
        self.tenant_energy(None, "6.615")
        self.passes(self.bundle())

    def test_energy_bound_uses_the_records_interval(self):
        self.energy("0.11025", seconds=60)  # 6.615 / 60
        self.passes(self.bundle())
        i = self.energy("0.1102501", seconds=60, start="2026-11-05T01:00:00Z")
        self.refused(self.bundle(), "energy_over_bound", i, "body.kwh")

    # nodes: registered once, before the keys and records that name them

    def test_a_node_registered_twice(self):
        i = self.log.node("n1", "r2", "2026-10-02T00:00:00Z", {"H100": 64})
        self.refused(self.bundle(), "already_registered", i, "body.node", says="entry 2")

    def test_a_key_for_an_unregistered_node(self):
        i = self.log.register("node-b", producer.Key.from_byte(0x63), "node", "2026-10-02T00:00:00Z",
                              regions=["r1"], nodes=["n2"], register_nodes=False)
        self.refused(self.bundle(), "unknown_node", i, "body.nodes", says="n2 is not a registered node")

    def test_a_key_naming_a_registered_and_an_unregistered_node(self):
        i = self.log.register("node-b", producer.Key.from_byte(0x63), "node", "2026-10-02T00:00:00Z",
                              regions=["r1"], nodes=["n1", "n3"], register_nodes=False)
        self.refused(self.bundle(), "unknown_node", i, "body.nodes", says="n3 is not")

    def test_a_node_registered_after_its_key(self):
        i = self.log.register("node-b", producer.Key.from_byte(0x63), "node", "2026-10-02T00:00:00Z",
                              regions=["r1"], nodes=["n2"], register_nodes=False)
        self.log.node("n2", "r1", "2026-10-03T00:00:00Z")
        self.refused(self.bundle(), "unknown_node", i, "body.nodes")

    def test_market_keys_name_no_nodes(self):
        self.log.register("market-a", producer.Key.from_byte(0x64), "market", "2026-10-02T00:00:00Z",
                          regions=["r9"])
        self.passes(self.bundle())

    def test_a_bundle_without_the_node_registration(self):
        # The bundle must carry every node_registered entry below its checkpoint: without n1's,
        # node-a's key names an unknown node.
        self.usage("1")
        self.refused(self.bundle(drop=(2,)), "unknown_node", 3, "body.nodes")

    def test_the_certificate_context_carries_the_nodes(self):
        self.log.node("n9", "r9", "2026-10-02T00:00:00Z")  # of no record, still context
        self.usage("1")
        size = len(self.log.entries)
        records = producer.covered(self.log, size, "t", *producer.PERIOD, {})
        self.assertEqual(producer.context_for(self.log, size, records, "t"), [0, 1, 2, 3, 4, 5])
        self.passes(self.cert())

    # the order of the rules: scope, parties, fleet, time

    def test_scope_comes_before_the_fleet(self):
        i = self.usage("1", node="n2")  # not in the key's nodes, and not registered
        self.refused(self.bundle(), "node_not_allowed", i, "body.node")

    def test_parties_come_before_the_fleet(self):
        i = self.log.gpu_usage("node-a", self.na, "t2", "r1", "A100", "1", "2026-11-05T00:00:00Z", 60, node="n1",
                               lease="L")
        self.refused(self.bundle(), "unknown_tenant", i, "body.tenant")

    def test_the_fleet_comes_before_time(self):
        # too old (35 days and one second) and over capacity: the fleet speaks first
        i = self.usage("9", seconds=60, received_at="2026-12-10T00:00:01Z")
        self.refused(self.bundle(), "over_capacity", i, "body.gpu_count")
        self.log.entries.pop()
        i = self.usage("8", seconds=60, received_at="2026-12-10T00:00:01Z")
        self.refused(self.bundle(), "too_old", i, "body.start")


def view_apply(view, index, kind, body):
    """Takes a ledger entry into `view` at `index`, as a bundle's context entry."""
    env = {"kind": kind, "signer": "ledger", "seq": index + 1, "body": body}
    view.apply(env, index, gv.check_body(kind, body))


class FleetState(unittest.TestCase):
    """LogView's registrations, rule by rule (the record rule `unknown_node` cannot be reached
    through a bundle whose key registrations passed, since a key names registered nodes only)."""

    KEY = gv.parse_verifier_key(producer.Key.from_byte(0x61).verifier_key("gpuledger.test/fleet"))

    @staticmethod
    def fail(reason, field, message):
        return gv.Failure(reason, "entry 99", f"{field}: {message}")

    def view_with(self, *registrations, kind="node_registered"):
        view = gv.LogView(self.KEY)
        for index, body in registrations:
            view_apply(view, index, kind, body)
        return view

    def check(self, view, kind, body, index=10):
        parsed = gv.check_body(kind, body)
        try:
            view.check_fleet(kind, body, index, parsed, self.fail)
        except gv.Failure as f:
            return f.reason, f.message.split(":")[0]
        return "PASS"

    N1 = {"node": "n1", "region": "r1", "gpus": N1_GPUS, "max_watts_per_gpu": "700"}

    # Lease L of t: all 9 GPUs of n1, open-ended (the lease rules are tests/test_leases.py's).
    LEASE = {"lease": "L", "tenant": "t", "class": "on_demand", "from": "2026-10-01T00:00:00Z",
             "nodes": [producer.lease_gpus("n1", range(9))]}

    def usage(self, count="1", model="H100", node="n1", region="r1"):
        return {"tenant": "t", "lease": "L", "region": region, "node": node, "gpu_model": model, "gpu_count": count,
                "start": "2026-11-05T00:00:00Z", "end": "2026-11-05T01:00:00Z",
                "gpu_seconds": producer.dec(Decimal(count) * 3600)}

    def test_records(self):
        view = self.view_with((3, self.N1))
        view_apply(view, 4, "lease_registered", self.LEASE)
        self.assertEqual(self.check(view, "gpu_usage", self.usage("8")), "PASS")
        self.assertEqual(self.check(view, "gpu_usage", self.usage("8.000001")), ("over_capacity", "body.gpu_count"))
        self.assertEqual(self.check(view, "gpu_usage", self.usage("1", model="NO-PRICE")),
                         ("unknown_gpu_model", "body.gpu_model"))
        # A record names its node's region (wrong_region), checked right after unknown_node and
        # before the model (a model the node lacks in another region is wrong_region).
        self.assertEqual(self.check(view, "gpu_usage", self.usage("1", region="east")),
                         ("wrong_region", "body.region"))
        self.assertEqual(self.check(view, "gpu_usage", self.usage("1", model="NO-PRICE", region="east")),
                         ("wrong_region", "body.region"))
        self.assertEqual(self.check(view, "gpu_usage", self.usage("1", node="n9")), ("unknown_node", "body.node"))
        energy = {"region": "r1", "node": "n9", "start": "2026-11-05T00:00:00Z", "end": "2026-11-05T01:00:00Z",
                  "kwh": "1"}
        self.assertEqual(self.check(view, "energy", energy), ("unknown_node", "body.node"))
        self.assertEqual(self.check(view, "energy", dict(energy, node="n1", kwh="6.615")), "PASS")
        self.assertEqual(self.check(view, "energy", dict(energy, node="n1", kwh="6.615001")),
                         ("energy_over_bound", "body.kwh"))
        self.assertEqual(self.check(view, "energy", dict(energy, node="n1", region="east", kwh="0")),
                         ("wrong_region", "body.region"))
        # a node registered at or after the record's index does not count
        self.assertEqual(self.check(view, "gpu_usage", self.usage("1"), index=3), ("unknown_node", "body.node"))
        self.assertEqual(self.check(view, "gpu_usage", self.usage("1"), index=5), "PASS")

    def test_registrations(self):
        view = self.view_with((3, self.N1))
        self.assertEqual(self.check(view, "node_registered", self.N1), ("already_registered", "body.node"))
        self.assertEqual(self.check(view, "node_registered", self.N1, index=3), "PASS")
        self.assertEqual(self.check(view, "node_registered", dict(self.N1, node="n2")), "PASS")

    def test_the_first_registration_counts(self):
        other = dict(self.N1, region="r2", gpus=producer.node_gpus({"H100": 64}), max_watts_per_gpu="5000")
        view = self.view_with((3, self.N1), (5, other))
        self.assertEqual(view.nodes["n1"].registered_at, 3)
        self.assertEqual(self.check(view, "gpu_usage", self.usage("9")), ("over_capacity", "body.gpu_count"))

    def test_key_registrations(self):
        view = self.view_with((3, self.N1), (4, dict(self.N1, node="n2")))
        pub = producer.Key.from_byte(0x65).pub
        key = {"signer": "node-a", "role": "node", "key_id": gv.key_id_of(pub), "public_key": gv.b64(pub),
               "nodes": ["n1", "n2"], "regions": ["r1"]}
        self.assertEqual(self.check(view, "signer_key_registered", key), "PASS")
        self.assertEqual(self.check(view, "signer_key_registered", key, index=4), ("unknown_node", "body.nodes"))
        self.assertEqual(self.check(view, "signer_key_registered", dict(key, nodes=["n1", "n3"])),
                         ("unknown_node", "body.nodes"))
        market = {k: v for k, v in key.items() if k != "nodes"}
        self.assertEqual(self.check(view, "signer_key_registered", dict(market, role="market"), index=0), "PASS")


if __name__ == "__main__":
    unittest.main()
