"""Node updates, MIG layouts and the fleet as of a log index (crates/core/src/fleet.rs
`check_fleet`, `check_node_update`, `lease_covers`, `lease_units_on`, `within_energy_bound`,
`check_not_overbooked`; crates/core/src/fleet/inventory.rs `Node`, `NodeAt`; record.rs
`NodeUpdated`, `MigLayout`, `node_gpus`, `mig_layout`), rechecked from a bundle's entries.

Every fleet question is answered as of the entry checked: a node's GPUs are those added by
entries below its index, its power limit the latest set below it. A bundle holds every
node_updated entry below its checkpoint in its context, and its records after the context, so
the verifier reads updates logged after a record before the record: it must not judge the record
by them. Each test below is written so that a verifier that used the node's final state (or
ignored updates, or counted a partitioned GPU as a whole one) would give another verdict."""

import unittest
from decimal import Decimal

from support import LogBundleTestCase, gv, producer

gpu, mig = producer.gpu, producer.mig

# n1: 4 whole H100s, 700 W each: 4 x 700 W x 3600 s + 5 % = 2.94 kWh an hour.
N1_GPUS = [gpu(i, f"GPU-n1-{i}", "H100") for i in range(4)]


def added(index, model="H100", layout=None, tag="new"):
    return gpu(index, f"GPU-n1-{tag}-{index}", model, layout)


class NodeUpdates(LogBundleTestCase):
    """The base log: 0 log_policy, 1 tenant_registered t, 2 node_registered n1 (r1, GPUs 0-3
    H100, 700 W), 3 node-a's key (nodes [n1], regions [r1]), 4 lease L of t (GPUs 0-3 of n1,
    [2026-10-01, 2026-11-10)). Each test appends more; `bundle()` holds every entry (context:
    every entry but the records, so node_updated entries logged after a record too)."""

    ORIGIN = "gpuledger.test/fleet-updates"

    def setUp(self):
        super().setUp()
        self.lk, self.na = producer.Key.from_byte(0x81), producer.Key.from_byte(0x82)
        log = self.log = producer.Log(self.lk, self.ORIGIN)
        log.policy("2026-10-01T00:00:00Z")                                                            # 0
        log.tenant("t", "2026-10-01T00:00:00Z")                                                       # 1
        log.node("n1", "r1", "2026-10-01T00:00:00Z", gpus=N1_GPUS, max_watts_per_gpu="700")           # 2
        log.register("node-a", self.na, "node", "2026-10-01T00:00:00Z", regions=["r1"], nodes=["n1"])  # 3
        log.lease("L", "t", "on_demand", "2026-10-01T00:00:00Z", [producer.lease_gpus("n1", range(4))],
                  start="2026-10-01T00:00:00Z", end="2026-11-10T00:00:00Z")                           # 4

    def usage(self, count, model="H100", start="2026-11-02T00:00:00Z", lease="L", seconds=3600, **kw):
        return self.log.gpu_usage("node-a", self.na, "t", "r1", model, count, start, seconds, node="n1",
                                  lease=lease, **kw)

    def energy(self, kwh, start="2026-11-02T00:00:00Z", tenant=None, seconds=3600, **kw):
        return self.log.energy("node-a", self.na, tenant, "r1", kwh, start, seconds, node="n1", **kw)

    def update(self, at, gpus=None, watts=None, node="n1"):
        return self.log.node_update(node, at, gpus=gpus, max_watts_per_gpu=watts)

    def lease_from(self, lease, at, gpus, start):
        return self.log.lease(lease, "t", "on_demand", at, [producer.lease_gpus("n1", gpus)], start=start)

    # GPUs added: records after the update may use them, records before it may not

    def test_usage_on_an_added_gpu_passes(self):
        self.update("2026-11-01T00:00:00Z", gpus=[added(4, "L40S")])                                  # 5
        self.lease_from("L2", "2026-11-01T00:00:00Z", [4], "2026-11-01T00:00:00Z")                     # 6
        self.usage("1", model="L40S", lease="L2", start="2026-11-05T00:00:00Z")                        # 7
        self.passes(self.bundle())
        self.passes(self.cert())

    def test_usage_of_a_model_logged_before_the_update_that_adds_it_is_unknown_gpu_model(self):
        i = self.usage("1", model="L40S", start="2026-11-02T00:00:00Z")  # under L, which lists GPUs 0-3
        u = self.update("2026-11-03T00:00:00Z", gpus=[added(4, "L40S")])
        self.lease_from("L2", "2026-11-03T00:00:00Z", [4], "2026-11-03T00:00:00Z")
        self.usage("1", model="L40S", lease="L2", start="2026-11-05T00:00:00Z")
        self.assertLess(i, u)
        # The bundle's context (the update included) comes before its records: the verifier has
        # read the update when it checks the record. As of the record, n1 has no L40S (by its
        # final state it would have one, and L, covering GPUs 0-3, would be lease_not_on_node).
        r = self.refused(self.bundle(), "unknown_gpu_model", i, "body.gpu_model", says="node n1 has no L40S GPU")
        self.assertNotIn("lease", r.message)
        self.refused(self.cert(), "unknown_gpu_model", i, "body.gpu_model")
        self.assertIn(u, producer.context_for(self.log, len(self.log.entries), [i], "t"))

    def test_more_gpus_than_the_node_had_before_the_update_is_over_capacity(self):
        i = self.usage("5", start="2026-11-02T00:00:00Z")  # 5 H100s; n1 has 4 until entry 6
        self.update("2026-11-03T00:00:00Z", gpus=[added(4)])                                           # 6
        self.lease_from("L2", "2026-11-03T00:00:00Z", range(5), "2026-11-10T00:00:00Z")               # 7
        self.usage("5", lease="L2", start="2026-11-12T00:00:00Z")                                      # 8: passes
        # The node's rule (n1 has 4), not the lease's (by n1's final state the node rule passes
        # and L's 4 GPUs refuse it, with another message).
        self.refused(self.bundle(), "over_capacity", i, "body.gpu_count", says="node n1 has 4 H100 GPUs")
        self.refused(self.cert(), "over_capacity", i, "body.gpu_count", says="node n1 has 4 H100 GPUs")

    def test_the_same_usage_after_the_update_passes(self):
        self.update("2026-11-01T00:00:00Z", gpus=[added(4)])
        self.lease_from("L2", "2026-11-01T00:00:00Z", range(5), "2026-11-10T00:00:00Z")
        self.usage("5", lease="L2", start="2026-11-12T00:00:00Z")
        self.passes(self.bundle())
        self.passes(self.cert())

    def test_a_bundle_without_the_update_refuses_the_usage_it_allows(self):
        u = self.update("2026-11-01T00:00:00Z", gpus=[added(4, "L40S")])
        self.lease_from("L2", "2026-11-01T00:00:00Z", [4], "2026-11-01T00:00:00Z")
        self.usage("1", model="L40S", lease="L2", start="2026-11-05T00:00:00Z")
        # Without the update, lease L2 lists a GPU n1 does not have.
        self.refused(self.bundle(drop=(u,)), "unknown_gpu", u + 1, "body.nodes[0].gpus")

    def test_a_lease_registered_before_the_update_may_not_list_the_added_gpu(self):
        i = self.lease_from("L2", "2026-11-01T00:00:00Z", [4], "2026-11-01T00:00:00Z")
        self.update("2026-11-02T00:00:00Z", gpus=[added(4)])
        self.refused(self.bundle(), "unknown_gpu", i, "body.nodes[0].gpus", says="node n1 has no GPU 4")

    # node_updated admission: a replaced board, a new UUID, at most 64 GPUs, a rising limit

    def test_a_replaced_board_passes_and_keeps_the_gpus_capacity(self):
        self.update("2026-11-01T00:00:00Z", gpus=[gpu(2, "GPU-n1-replaced-2", "H100")])             # 5
        self.usage("4", start="2026-11-02T00:00:00Z")
        self.passes(self.bundle())
        i = self.usage("4.000001", start="2026-11-03T00:00:00Z")  # a replaced board adds nothing
        self.refused(self.bundle(), "over_capacity", i, "body.gpu_count", says="node n1 has 4 H100 GPUs")

    def test_a_replaced_board_of_another_model_is_refused(self):
        i = self.update("2026-11-01T00:00:00Z", gpus=[gpu(2, "GPU-n1-replaced-2", "A100"), added(4)])
        self.refused(self.bundle(), "invalid_field", i, "body.gpus[0].model", says="GPU 2 of node n1 is a H100")

    def test_a_replaced_board_with_a_mig_layout_is_refused(self):
        i = self.update("2026-11-01T00:00:00Z", gpus=[gpu(2, "GPU-n1-replaced-2", "H100", mig(7, {"1g.10gb": 7}))])
        self.refused(self.bundle(), "invalid_field", i, "body.gpus[0].model")

    def test_a_reused_uuid_is_refused(self):
        # GPU 1's UUID (listed by the registration, entry 2) under a new index.
        i = self.update("2026-11-01T00:00:00Z", gpus=[added(4), gpu(5, "GPU-n1-1", "H100")])
        self.refused(self.bundle(), "invalid_field", i, "body.gpus[1].uuid", says="(entry 2)")

    def test_a_replaced_boards_old_uuid_may_not_come_back(self):
        self.update("2026-11-01T00:00:00Z", gpus=[gpu(2, "GPU-n1-replaced-2", "H100")])              # 5
        i = self.update("2026-11-02T00:00:00Z", gpus=[gpu(2, "GPU-n1-2", "H100")])  # the first board again
        self.refused(self.bundle(), "invalid_field", i, "body.gpus[0].uuid", says="(entry 2)")
        self.log.entries.pop()
        i = self.update("2026-11-02T00:00:00Z", gpus=[gpu(7, "GPU-n1-replaced-2", "H100")])
        self.refused(self.bundle(), "invalid_field", i, "body.gpus[0].uuid", says="(entry 5)")

    def test_the_uuid_rule_comes_before_the_model_rule(self):
        i = self.update("2026-11-01T00:00:00Z", gpus=[gpu(2, "GPU-n1-2", "A100")])
        self.refused(self.bundle(), "invalid_field", i, "body.gpus[0].uuid")

    def test_at_most_64_gpus(self):
        self.update("2026-11-01T00:00:00Z", gpus=[added(k) for k in range(4, 64)])  # 4 + 60 = 64
        self.passes(self.bundle())
        i = self.update("2026-11-02T00:00:00Z", gpus=[added(64)])
        self.refused(self.bundle(), "quantity_out_of_range", i, "body.gpus", says="65 GPUs")
        self.log.entries.pop()
        # a replaced board of a full node adds none
        self.update("2026-11-02T00:00:00Z", gpus=[gpu(63, "GPU-n1-replaced-63", "H100")])
        self.passes(self.bundle())

    def test_61_gpus_added_to_4_is_refused_after_the_gpu_rules(self):
        i = self.update("2026-11-01T00:00:00Z", gpus=[added(k) for k in range(4, 65)])
        self.refused(self.bundle(), "quantity_out_of_range", i, "body.gpus", says="65 GPUs")
        self.log.entries.pop()
        gpus = [added(k) for k in range(4, 64)] + [gpu(64, "GPU-n1-0", "H100")]  # 65 GPUs, the last reused
        i = self.update("2026-11-01T00:00:00Z", gpus=gpus)
        self.refused(self.bundle(), "invalid_field", i, "body.gpus[60].uuid")

    def test_the_power_limit_only_rises(self):
        for watts in ("700", "699", "0.000000001"):
            with self.subTest(watts=watts):
                i = self.update("2026-11-01T00:00:00Z", watts=watts)
                self.refused(self.bundle(), "invalid_field", i, "body.max_watts_per_gpu", says="not above")
                self.log.entries.pop()
        self.update("2026-11-01T00:00:00Z", watts="700.000000001")
        self.passes(self.bundle())
        self.update("2026-11-02T00:00:00Z", watts="1000")
        self.passes(self.bundle())
        # against the limit in force (1000), not the registration's (700)
        i = self.update("2026-11-03T00:00:00Z", watts="900")
        self.refused(self.bundle(), "invalid_field", i, "body.max_watts_per_gpu", says="1000 W")

    def test_the_gpu_rules_come_before_the_power_limit(self):
        i = self.log.node_update("n1", "2026-11-01T00:00:00Z", gpus=[gpu(2, "GPU-x", "A100")], max_watts_per_gpu="1")
        self.refused(self.bundle(), "invalid_field", i, "body.gpus[0].model")

    def test_an_update_of_an_unregistered_node(self):
        i = self.update("2026-11-01T00:00:00Z", watts="1000", node="n9")
        self.refused(self.bundle(), "unknown_node", i, "body.node")

    def test_an_update_before_the_nodes_registration(self):
        i = self.update("2026-10-02T00:00:00Z", watts="1000", node="n2")
        self.log.node("n2", "r1", "2026-10-03T00:00:00Z", {"H100": 1}, "700")
        self.refused(self.bundle(), "unknown_node", i, "body.node")

    def test_node_updated_is_written_by_the_ledger(self):
        self.assertIn("node_updated", gv.LEDGER_KINDS)
        self.assertIn("node_updated", gv.KINDS)
        i = self.log.append("node_updated", "node-a", self.na, {"node": "n1", "max_watts_per_gpu": "1000"},
                            "2026-11-01T00:00:00Z")
        self.refused(self.bundle(), "key_not_allowed", i)

    def test_an_update_of_bad_form_is_leaf_invalid(self):
        i = self.update("2026-11-01T00:00:00Z")  # neither gpus nor max_watts_per_gpu
        r = self.refused(self.bundle(), "leaf_invalid", i)
        self.assertIn("invalid_field: body.gpus", r.message)

    # the energy bound: the watts (and GPUs) in force at the record's index

    def test_energy_bound_uses_the_watts_in_force_at_the_record(self):
        self.energy("2.94", start="2026-11-02T00:00:00Z")  # 4 x 700 W x 3600 s + 5 %
        i = self.energy("4.2", start="2026-11-02T01:00:00Z")  # 4 x 1000 W: not yet
        self.update("2026-11-03T00:00:00Z", watts="1000")
        self.energy("4.2", start="2026-11-04T00:00:00Z")
        r = self.refused(self.bundle(), "energy_over_bound", i, "body.kwh", says="x 700 W")
        self.assertIn("2.94 kWh", r.message)
        self.setUp()  # the same log without the refused record
        self.energy("2.94", start="2026-11-02T00:00:00Z")
        self.update("2026-11-03T00:00:00Z", watts="1000")
        self.energy("4.2", start="2026-11-04T00:00:00Z")
        self.passes(self.bundle())
        i = self.energy("4.200000001", start="2026-11-04T01:00:00Z")
        self.refused(self.bundle(), "energy_over_bound", i, "body.kwh", says="x 1000 W")

    def test_energy_bound_uses_the_gpus_in_force_at_the_record(self):
        i = self.energy("3.675", start="2026-11-02T00:00:00Z")  # 5 x 700 W x 3600 s + 5 %: one GPU too many
        self.update("2026-11-03T00:00:00Z", gpus=[added(4)])
        self.energy("3.675", start="2026-11-04T00:00:00Z")
        self.refused(self.bundle(), "energy_over_bound", i, "body.kwh", says="node n1's 4 GPUs")
        self.setUp()
        self.update("2026-11-01T00:00:00Z", gpus=[added(4)])
        self.energy("3.675", start="2026-11-04T00:00:00Z")
        self.passes(self.bundle())

    def test_a_tenants_energy_uses_the_watts_in_force(self):
        # t's lease L: GPUs 0-3 of n1 until 2026-11-10.
        i = self.energy("4.2", tenant="t", start="2026-11-02T00:00:00Z")
        self.update("2026-11-03T00:00:00Z", watts="1000")
        self.energy("4.2", tenant="t", start="2026-11-04T00:00:00Z")
        self.refused(self.bundle(), "energy_over_bound", i, "body.kwh", says="the 4 GPUs t leases of node n1")
        self.refused(self.cert(), "energy_over_bound", i, "body.kwh")


class FleetAsOfAnIndex(unittest.TestCase):
    """The verifier's fleet state (FleetNode, NodeAt; inventory.rs `Node`, `NodeAt`): each GPU
    with the index of the entry that added it, every UUID with its entry, the power limits with
    theirs; read as of any index, also below updates already taken in."""

    KEY = gv.parse_verifier_key(producer.Key.from_byte(0x81).verifier_key("gpuledger.test/fleet-updates"))
    N1 = {"node": "n1", "region": "r1", "gpus": N1_GPUS, "max_watts_per_gpu": "700"}

    @staticmethod
    def fail(reason, field, message):
        return gv.Failure(reason, "entry 99", f"{field}: {message}")

    def apply(self, view, index, kind, body):
        env = {"kind": kind, "signer": "ledger", "seq": index + 1, "body": body}
        view.apply(env, index, gv.check_body(kind, body))

    def view(self):
        """n1 registered at 2; at 20 an L40S added (index 4) and GPU 2 replaced; at 30 the limit
        raised to 1000 W and an H100 added (index 5)."""
        view = gv.LogView(self.KEY)
        self.apply(view, 2, "node_registered", self.N1)
        self.apply(view, 20, "node_updated", {"node": "n1", "gpus": [gpu(2, "GPU-n1-r2", "H100"),
                                                                     added(4, "L40S")]})
        self.apply(view, 30, "node_updated", {"node": "n1", "gpus": [added(5)], "max_watts_per_gpu": "1000"})
        return view

    def check(self, view, kind, body, index):
        try:
            view.check_fleet(kind, body, index, gv.check_body(kind, body), self.fail, leases=False)
        except gv.Failure as f:
            return f.reason, f.message.split(":")[0]
        return "PASS"

    @staticmethod
    def usage(count, model="H100"):
        return {"tenant": "t", "region": "r1", "node": "n1", "gpu_model": model, "gpu_count": count,
                "start": "2026-11-05T00:00:00Z", "end": "2026-11-05T01:00:00Z",
                "gpu_seconds": producer.dec(Decimal(count) * 3600)}

    def test_the_node_as_of_each_index(self):
        node = self.view().nodes["n1"]
        self.assertEqual([(g["index"], at) for g, at in node.gpus], [(0, 2), (1, 2), (2, 2), (3, 2), (4, 20), (5, 30)])
        self.assertEqual(node.gpus[2][0]["uuid"], "GPU-n1-r2")  # the replaced board keeps entry 2
        self.assertEqual(node.uuid_listed("GPU-n1-2", 21), 2)
        self.assertEqual(node.uuid_listed("GPU-n1-r2", 21), 20)
        self.assertIsNone(node.uuid_listed("GPU-n1-r2", 20))
        self.assertEqual(node.watts, [(Decimal(700), 2), (Decimal(1000), 30)])
        for index, count, l40s, watts in ((3, 4, 0, 700), (20, 4, 0, 700), (21, 5, 1, 700), (30, 5, 1, 700),
                                          (31, 6, 1, 1000), (None, 6, 1, 1000)):
            with self.subTest(index=index):
                at = node.at(index)
                self.assertEqual(at.gpu_count(), count)
                self.assertEqual(at.units_of("L40S"), l40s)
                self.assertEqual(at.units_of("H100"), count - l40s)
                self.assertEqual(at.max_watts_per_gpu, Decimal(watts))

    def test_records_are_judged_as_of_their_index(self):
        view = self.view()
        self.assertEqual(self.check(view, "gpu_usage", self.usage("1", "L40S"), 20),
                         ("unknown_gpu_model", "body.gpu_model"))
        self.assertEqual(self.check(view, "gpu_usage", self.usage("1", "L40S"), 21), "PASS")
        self.assertEqual(self.check(view, "gpu_usage", self.usage("5"), 30), ("over_capacity", "body.gpu_count"))
        self.assertEqual(self.check(view, "gpu_usage", self.usage("5"), 31), "PASS")
        energy = {"region": "r1", "node": "n1", "start": "2026-11-05T00:00:00Z", "end": "2026-11-05T01:00:00Z"}
        # 5 GPUs x 700 W before entry 30 (3.675 kWh), 6 x 1000 W after it (6.3 kWh)
        self.assertEqual(self.check(view, "energy", dict(energy, kwh="3.675"), 25), "PASS")
        self.assertEqual(self.check(view, "energy", dict(energy, kwh="3.675000001"), 25),
                         ("energy_over_bound", "body.kwh"))
        self.assertEqual(self.check(view, "energy", dict(energy, kwh="6.3"), 31), "PASS")
        self.assertEqual(self.check(view, "energy", dict(energy, kwh="6.300000001"), 31),
                         ("energy_over_bound", "body.kwh"))

    def test_updates_are_judged_as_of_their_index(self):
        view = self.view()
        # At entry 25 the limit is still 700 W and GPU 5 is new; at 31 both are taken.
        up = {"node": "n1", "gpus": [added(5)], "max_watts_per_gpu": "800"}
        self.assertEqual(self.check(view, "node_updated", up, 25), "PASS")
        self.assertEqual(self.check(view, "node_updated", {"node": "n1", "max_watts_per_gpu": "800"}, 31),
                         ("invalid_field", "body.max_watts_per_gpu"))
        self.assertEqual(self.check(view, "node_updated", {"node": "n1", "gpus": [added(5, tag="other")]}, 31),
                         "PASS")  # a new board under index 5: a replaced board at 31
        self.assertEqual(self.check(view, "node_updated", {"node": "n1", "gpus": [added(5, "L40S", tag="o")]}, 31),
                         ("invalid_field", "body.gpus[0].model"))
        # GPU-n1-r2 was listed at 20: a UUID rule as of the index
        again = {"node": "n1", "gpus": [gpu(7, "GPU-n1-r2", "H100")]}
        self.assertEqual(self.check(view, "node_updated", again, 20), "PASS")
        self.assertEqual(self.check(view, "node_updated", again, 21), ("invalid_field", "body.gpus[0].uuid"))
        self.assertEqual(self.check(view, "node_updated", dict(again, node="n2"), 21), ("unknown_node", "body.node"))
        self.assertEqual(self.check(view, "node_updated", again, 2), ("unknown_node", "body.node"))

    def test_the_slices_rule_is_judged_as_of_the_index(self):
        view = self.view()
        self.apply(view, 40, "node_updated", {"node": "n1", "gpus": [added(6, "A100", mig(4, {"1g.10gb": 4}))]})
        other = {"node": "n1", "gpus": [added(7, "A100", mig(2, {"1g.40gb": 2}))]}
        self.assertEqual(self.check(view, "node_updated", other, 40), "PASS")
        self.assertEqual(self.check(view, "node_updated", other, 41), ("invalid_field", "body.gpus[0].mig.slices"))
        same = {"node": "n1", "gpus": [added(7, "A100", mig(4, {"2g.20gb": 2}))]}
        self.assertEqual(self.check(view, "node_updated", same, 41), "PASS")
        # n1's whole A100s: none before 40; an A100 in other slices than a whole one is new
        whole = {"node": "n1", "gpus": [added(7, "A100")]}
        self.assertEqual(self.check(view, "node_updated", whole, 41), "PASS")


# m1: GPU 0 an H100 in 7 instances 1g.10gb, GPU 1 an H100 in 3 x 1g.10gb + 2 x 2g.20gb, GPU 2 a
# whole H100; 700 W. Its units: 10 H100/1g.10gb, 2 H100/2g.20gb, 1 H100.
M1_GPUS = [gpu(0, "GPU-m1-0", "H100", mig(7, {"1g.10gb": 7})),
           gpu(1, "GPU-m1-1", "H100", mig(7, {"1g.10gb": 3, "2g.20gb": 2})),
           gpu(2, "GPU-m1-2", "H100")]
ONE_G, TWO_G = "H100/1g.10gb", "H100/2g.20gb"


class MigLayouts(LogBundleTestCase):
    """The base log: 0 log_policy, 1, 2 tenant_registered t, u, 3 node_registered m1 (r1,
    M1_GPUS, 700 W), 4 node-a's key (nodes [m1], regions [r1]). Each test registers its leases
    (from 2026-10-01, open-ended) and records."""

    ORIGIN = "gpuledger.test/mig"

    def setUp(self):
        super().setUp()
        self.lk, self.na = producer.Key.from_byte(0x91), producer.Key.from_byte(0x92)
        log = self.log = producer.Log(self.lk, self.ORIGIN)
        log.policy("2026-10-01T00:00:00Z")                                                            # 0
        log.tenant("t", "2026-10-01T00:00:00Z")                                                       # 1
        log.tenant("u", "2026-10-01T00:00:00Z")                                                       # 2
        log.node("m1", "r1", "2026-10-01T00:00:00Z", gpus=M1_GPUS, max_watts_per_gpu="700")           # 3
        log.register("node-a", self.na, "node", "2026-10-01T00:00:00Z", regions=["r1"], nodes=["m1"])  # 4

    def lease(self, name, *items, tenant="t", at="2026-10-01T00:00:00Z"):
        return self.log.lease(name, tenant, "on_demand", at, list(items))

    def usage(self, count, model=ONE_G, lease="M", start="2026-11-05T00:00:00Z", tenant="t"):
        return self.log.gpu_usage("node-a", self.na, tenant, "r1", model, count, start, 3600, node="m1",
                                  lease=lease)

    def energy(self, kwh, tenant="t", start="2026-11-05T00:00:00Z"):
        return self.log.energy("node-a", self.na, tenant, "r1", kwh, start, 3600, node="m1")

    # usage of MIG instances: at most the node's instances of the profile

    def test_usage_of_instances_up_to_the_nodes_count(self):
        self.lease("M", producer.lease_gpus("m1", [0, 1]))
        self.usage("10")
        self.usage("2", model=TWO_G)
        self.passes(self.bundle())
        self.passes(self.cert())

    def test_one_instance_more_than_the_node_has_is_over_capacity(self):
        self.lease("M", producer.lease_gpus("m1", [0, 1]))
        i = self.usage("11")
        self.refused(self.bundle(), "over_capacity", i, "body.gpu_count", says="node m1 has 10 H100/1g.10gb GPUs")
        self.refused(self.cert(), "over_capacity", i, "body.gpu_count")
        self.log.entries.pop()
        i = self.usage("3", model=TWO_G)
        self.refused(self.bundle(), "over_capacity", i, "body.gpu_count", says="node m1 has 2 H100/2g.20gb GPUs")

    def test_a_partitioned_gpu_is_not_a_unit_of_its_model(self):
        self.lease("M", producer.lease_gpus("m1", [0, 1, 2]))
        self.usage("1", model="H100")  # GPU 2, the only whole H100
        self.passes(self.bundle())
        i = self.usage("2", model="H100", start="2026-11-06T00:00:00Z")
        self.refused(self.bundle(), "over_capacity", i, "body.gpu_count", says="node m1 has 1 H100 GPUs")

    def test_a_profile_the_node_lacks(self):
        self.lease("M", producer.lease_gpus("m1", [0, 1]))
        for model in ("H100/3g.40gb", "H100/1g.10gb/x", "A100/1g.10gb", "H100/"):
            with self.subTest(model=model):
                i = self.usage("1", model=model)
                self.refused(self.bundle(), "unknown_gpu_model", i, "body.gpu_model")
                self.log.entries.pop()

    # leases: a partitioned GPU listed covers its instances

    def test_a_lease_listing_a_partitioned_gpu_covers_its_instances(self):
        self.lease("M", producer.lease_gpus("m1", [1]))
        self.usage("3")
        self.usage("2", model=TWO_G)
        self.passes(self.bundle())
        i = self.usage("4", start="2026-11-06T00:00:00Z")  # the node has 10, M covers 3
        self.refused(self.bundle(), "over_capacity", i, "body.gpu_count", says="M covers 3 H100/1g.10gb GPUs")
        self.log.entries.pop()
        i = self.usage("1", model="H100", start="2026-11-06T00:00:00Z")
        self.refused(self.bundle(), "lease_not_on_node", i, "body.lease", says="M covers no H100 GPU")

    def test_a_share_of_a_partitioned_gpu_covers_that_share_of_its_instances(self):
        self.lease("S", producer.lease_gpus("m1", [0], "0.5"))
        self.usage("3.5", lease="S")
        self.passes(self.bundle())
        i = self.usage("3.500000001", lease="S", start="2026-11-06T00:00:00Z")
        self.refused(self.bundle(), "over_capacity", i, "body.gpu_count", says="S covers 3.5")

    def test_a_lease_counting_instances(self):
        self.lease("C", producer.lease_count("m1", ONE_G, "4"))
        self.usage("4", lease="C")
        self.passes(self.bundle())
        i = self.usage("5", lease="C", start="2026-11-06T00:00:00Z")
        self.refused(self.bundle(), "over_capacity", i, "body.gpu_count", says="C covers 4")

    def test_a_lease_counting_a_profile_the_node_lacks(self):
        i = self.lease("C", producer.lease_count("m1", "H100/3g.40gb", "1"))
        self.refused(self.bundle(), "unknown_gpu_model", i, "body.nodes[0].gpu_model")

    # overbooking counts a listed partitioned GPU's instances

    def test_overbooking_counts_instances(self):
        self.lease("A", producer.lease_count("m1", ONE_G, "3"))
        self.lease("B", producer.lease_gpus("m1", [0]), tenant="u")  # 3 + 7 = 10: full
        self.passes(self.bundle())
        self.setUp()
        self.lease("A", producer.lease_count("m1", ONE_G, "4"))
        i = self.lease("B", producer.lease_gpus("m1", [0]), tenant="u")  # 4 + 7 = 11 of 10
        self.refused(self.bundle(), "lease_overbooked", i, "body.nodes", says="11 H100/1g.10gb GPUs")

    def test_overbooking_counts_every_profile_of_a_listed_gpu(self):
        self.lease("A", producer.lease_count("m1", TWO_G, "1"))
        self.lease("B", producer.lease_gpus("m1", [1], "0.5"), tenant="u")  # 1 + 0.5 x 2 = 2 2g.20gb: full
        self.passes(self.bundle())
        i = self.lease("D", producer.lease_count("m1", TWO_G, "0.000000001"), tenant="u")
        self.refused(self.bundle(), "lease_overbooked", i, "body.nodes", says="H100/2g.20gb")

    def test_a_count_of_instances_above_the_nodes(self):
        self.lease("A", producer.lease_count("m1", ONE_G, "10"))
        self.passes(self.bundle())
        self.setUp()
        i = self.lease("A", producer.lease_count("m1", ONE_G, "11"))
        self.refused(self.bundle(), "lease_overbooked", i, "body.nodes")

    # a tenant's energy: a unit of a MIG profile is its slices of the GPU's

    def test_tenant_energy_bound_for_a_count_of_instances(self):
        # 2 x 1g.10gb of a 7-slice GPU: 2/7 of a GPU (240 of 840 units): 2/7 x 700 W x 3600 s + 5 % = 0.21 kWh.
        self.lease("C", producer.lease_count("m1", ONE_G, "2"))
        self.energy("0.21")
        self.passes(self.bundle())
        self.passes(self.cert())
        i = self.energy("0.210000001", start="2026-11-05T01:00:00Z")
        self.refused(self.bundle(), "energy_over_bound", i, "body.kwh", says="the 0.285714 GPUs t leases of node m1")
        self.refused(self.cert(), "energy_over_bound", i, "body.kwh")

    def test_tenant_energy_bound_for_a_count_of_larger_instances(self):
        # 1 x 2g.20gb: 2/7 of a GPU too (0.21 kWh an hour); 1.5 of them: 0.315.
        self.lease("C", producer.lease_count("m1", TWO_G, "1.5"))
        self.energy("0.315")
        self.passes(self.bundle())
        i = self.energy("0.315000001", start="2026-11-05T01:00:00Z")
        self.refused(self.bundle(), "energy_over_bound", i, "body.kwh")

    def test_tenant_energy_bound_for_a_listed_partitioned_gpu_is_the_whole_gpu(self):
        self.lease("M", producer.lease_gpus("m1", [1]))
        self.energy("0.735")  # 1 GPU x 700 W x 3600 s + 5 %
        self.passes(self.bundle())
        i = self.energy("0.735000001", start="2026-11-05T01:00:00Z")
        self.refused(self.bundle(), "energy_over_bound", i, "body.kwh")

    def test_node_energy_counts_whole_gpus(self):
        self.energy("2.205", tenant=None)  # 3 GPUs x 700 W x 3600 s + 5 %, however partitioned
        self.passes(self.bundle())
        i = self.energy("2.205000001", tenant=None, start="2026-11-05T01:00:00Z")
        self.refused(self.bundle(), "energy_over_bound", i, "body.kwh")

    # an added partitioned GPU

    def test_instances_of_an_added_gpu_count_from_the_update_on(self):
        self.lease("M0", producer.lease_gpus("m1", [2]))                                              # 5
        i = self.usage("1", model="H100/7g.80gb", lease="M0", start="2026-11-02T00:00:00Z")           # 6
        self.log.node_update("m1", "2026-11-03T00:00:00Z",
                             gpus=[gpu(3, "GPU-m1-3", "H100", mig(7, {"7g.80gb": 1}))])                # 7
        self.lease("M", producer.lease_gpus("m1", [3]), at="2026-11-03T00:00:00Z")                    # 8
        self.usage("1", model="H100/7g.80gb", start="2026-11-05T00:00:00Z")                           # 9
        # (by m1's final state: lease_not_on_node, M0's whole H100 covering no instance)
        self.refused(self.bundle(), "unknown_gpu_model", i, "body.gpu_model")
        self.setUp()
        self.log.node_update("m1", "2026-11-03T00:00:00Z",
                             gpus=[gpu(3, "GPU-m1-3", "H100", mig(7, {"7g.80gb": 1}))])
        self.lease("M", producer.lease_gpus("m1", [3]), at="2026-11-03T00:00:00Z")
        self.usage("1", model="H100/7g.80gb", start="2026-11-05T00:00:00Z")
        self.passes(self.bundle())

    # a node's partitioned GPUs of one model have the same slices (record.rs `mig_slices_differ`)

    def test_an_added_gpu_partitioned_into_other_slices_is_refused(self):
        # m1's partitioned H100s have 7 slices; a new H100 in 4 (a 1g.10gb would be 1/4 of a GPU)
        i = self.log.node_update("m1", "2026-11-01T00:00:00Z",
                                 gpus=[gpu(3, "GPU-m1-3", "H100", mig(4, {"1g.10gb": 4}))])
        self.refused(self.bundle(), "invalid_field", i, "body.gpus[0].mig.slices",
                     says="GPU 3 of model H100 has 4 slices, GPU 0 of the node 7")
        self.log.entries.pop()
        # the second GPU listed (the first whole: the entry's form has nothing to compare with)
        i = self.log.node_update("m1", "2026-11-01T00:00:00Z",
                                 gpus=[gpu(3, "GPU-m1-3", "H100"),
                                       gpu(4, "GPU-m1-4", "H100", mig(8, {"1g.10gb": 8}))])
        self.refused(self.bundle(), "invalid_field", i, "body.gpus[1].mig.slices")

    def test_an_added_gpu_partitioned_into_the_same_slices_passes(self):
        self.log.node_update("m1", "2026-11-01T00:00:00Z",
                             gpus=[gpu(3, "GPU-m1-3", "H100", mig(7, {"1g.10gb": 1, "3g.40gb": 2}))])   # 5
        self.lease("M", producer.lease_gpus("m1", [0, 3]), at="2026-11-01T00:00:00Z")
        self.usage("8")  # 7 on GPU 0, 1 on GPU 3
        self.usage("2", model="H100/3g.40gb")
        self.passes(self.bundle())
        self.passes(self.cert())

    def test_other_slices_are_allowed_for_another_model_or_a_whole_gpu(self):
        self.log.node_update("m1", "2026-11-01T00:00:00Z",
                             gpus=[gpu(3, "GPU-m1-3", "H100"),                              # whole
                                   gpu(4, "GPU-m1-4", "A100", mig(4, {"1g.10gb": 4})),      # another model
                                   gpu(5, "GPU-m1-5", "A100", mig(4, {"2g.20gb": 2}))])
        self.log.node_update("m1", "2026-11-02T00:00:00Z",
                             gpus=[gpu(6, "GPU-m1-6", "A100", mig(4, {"4g.40gb": 1}))])
        self.passes(self.bundle())

    def test_a_partitioned_gpu_added_to_a_node_with_only_whole_ones_of_its_model_passes(self):
        # m1's GPU 2 is a whole H100 and an A100 is whole too: neither has slices to differ from
        self.log.node_update("m1", "2026-11-01T00:00:00Z", gpus=[gpu(3, "GPU-m1-3", "A100")])
        self.log.node_update("m1", "2026-11-02T00:00:00Z",
                             gpus=[gpu(4, "GPU-m1-4", "A100", mig(2, {"1g.40gb": 2}))])
        self.passes(self.bundle())

    def test_the_slices_rule_as_of_the_update(self):
        # A100s in 4 slices from entry 5 on: an A100 in 2 is refused at entry 6, not entry 5
        self.log.node_update("m1", "2026-11-01T00:00:00Z",
                             gpus=[gpu(3, "GPU-m1-3", "A100", mig(4, {"1g.10gb": 4}))])                # 5
        i = self.log.node_update("m1", "2026-11-02T00:00:00Z",
                                 gpus=[gpu(4, "GPU-m1-4", "A100", mig(2, {"1g.40gb": 2}))])            # 6
        self.refused(self.bundle(), "invalid_field", i, "body.gpus[0].mig.slices",
                     says="GPU 4 of model A100 has 2 slices, GPU 3 of the node 4")

    def test_a_replaced_board_in_other_slices_is_refused_by_the_model_rule(self):
        i = self.log.node_update("m1", "2026-11-01T00:00:00Z",
                                 gpus=[gpu(1, "GPU-m1-r1", "H100", mig(4, {"1g.10gb": 4}))])
        self.refused(self.bundle(), "invalid_field", i, "body.gpus[0].model")

    def test_the_slices_rule_after_the_uuid_rule_before_the_count_and_the_limit(self):
        # GPU 0's UUID again under a new index, in other slices: the UUID rule
        i = self.log.node_update("m1", "2026-11-01T00:00:00Z",
                                 gpus=[gpu(3, "GPU-m1-0", "H100", mig(4, {"1g.10gb": 4}))])
        self.refused(self.bundle(), "invalid_field", i, "body.gpus[0].uuid")
        self.log.entries.pop()
        # a GPU in other slices, then a reused UUID: GPU by GPU, the slices of GPU 0 first
        i = self.log.node_update("m1", "2026-11-01T00:00:00Z",
                                 gpus=[gpu(3, "GPU-m1-3", "H100", mig(4, {"1g.10gb": 4})),
                                       gpu(4, "GPU-m1-0", "H100")])
        self.refused(self.bundle(), "invalid_field", i, "body.gpus[0].mig.slices")
        self.log.entries.pop()
        # 62 GPUs more than m1's 3 (65), one in other slices; a power limit that does not rise
        gpus = [gpu(k, f"GPU-m1-{k}", "H100") for k in range(3, 64)] \
            + [gpu(64, "GPU-m1-64", "H100", mig(4, {"1g.10gb": 4}))]
        i = self.log.node_update("m1", "2026-11-01T00:00:00Z", gpus=gpus, max_watts_per_gpu="1")
        self.refused(self.bundle(), "invalid_field", i, "body.gpus[61].mig.slices")

    def test_a_registration_in_two_slices_of_one_model_is_leaf_invalid(self):
        i = self.log.node("m2", "r1", "2026-10-02T00:00:00Z", max_watts_per_gpu="700",
                          gpus=[gpu(0, "GPU-m2-0", "H100", mig(7, {"1g.10gb": 7})),
                                gpu(1, "GPU-m2-1", "H100", mig(4, {"1g.10gb": 4}))])
        r = self.refused(self.bundle(), "leaf_invalid", i)
        self.assertIn("invalid_field: body.gpus[1].mig.slices", r.message)

    def test_an_update_in_two_slices_of_one_model_is_leaf_invalid(self):
        i = self.log.node_update("m1", "2026-11-01T00:00:00Z",
                                 gpus=[gpu(3, "GPU-m1-3", "A100", mig(7, {"1g.10gb": 7})),
                                       gpu(4, "GPU-m1-4", "A100", mig(4, {"1g.10gb": 4}))])
        r = self.refused(self.bundle(), "leaf_invalid", i)
        self.assertIn("invalid_field: body.gpus[1].mig.slices", r.message)


class MigUnits(unittest.TestCase):
    """record.rs `NodeGpu::units_of`, `unit_share`, `unit_models`, `mig_profile_slices`, and
    fleet.rs `lease_units_on` (the largest unit of a model over the node's GPUs)."""

    def test_units_of_a_gpu(self):
        whole, part = M1_GPUS[2], M1_GPUS[1]
        self.assertEqual((gv.gpu_units_of(whole, "H100"), gv.gpu_units_of(whole, ONE_G)), (1, 0))
        self.assertEqual((gv.gpu_units_of(part, "H100"), gv.gpu_units_of(part, ONE_G), gv.gpu_units_of(part, TWO_G)),
                         (0, 3, 2))
        self.assertEqual(gv.gpu_units_of(part, "H100x/1g.10gb"), 0)
        self.assertEqual((gv.gpu_unit_share(whole, "H100"), gv.gpu_unit_share(part, ONE_G),
                          gv.gpu_unit_share(part, TWO_G), gv.gpu_unit_share(part, "H100")), (840, 120, 240, 0))
        self.assertEqual(gv.gpu_unit_models(part), [ONE_G, TWO_G])
        self.assertEqual(gv.gpu_unit_models(whole), ["H100"])

    def test_profile_slices(self):
        for profile, want in (("1g.10gb", 1), ("7g.80gb", 7), ("8g.1gb", 8), ("3g.9999gb", 3), ("0g.5gb", None),
                              ("9g.5gb", None), ("1g.05gb", None), ("1g.10000gb", None), ("10g.5gb", None),
                              ("1g.10GB", None), ("1g.gb", None), ("g.5gb", None), ("1g10gb", None),
                              ("1g.10gbgb", None), ("1g.1g.5gb", None), ("\u0661g.5gb", None)):
            with self.subTest(profile=profile):
                self.assertEqual(gv.mig_profile_slices(profile), want)

    def test_a_count_lease_is_worth_the_largest_unit_of_its_model(self):
        # The same profile on a 7-slice GPU (120 units) and on a 4-slice one (210): a count of 1 is
        # worth 210 (fleet.rs `lease_units_on`: the max unit_share over the node's GPUs). Such a
        # node is refused by form now (one model's partitioned GPUs have the same slices), so the
        # max never chooses in a valid log; the function is checked on its own here.
        body = {"node": "m2", "region": "r1", "max_watts_per_gpu": "700",
                "gpus": [gpu(0, "a", "H100", mig(7, {"1g.10gb": 7})), gpu(1, "b", "H100", mig(4, {"1g.10gb": 4}))]}
        node = gv.FleetNode(body, 1).at(None)
        lease = gv.check_body("lease_registered", {
            "lease": "C", "tenant": "t", "class": "on_demand", "from": "2026-10-01T00:00:00Z",
            "nodes": [producer.lease_count("m2", ONE_G, "1.5"), producer.lease_gpus("m2", [1], "0.5")]})["lease"]
        self.assertEqual(gv.lease_units_on(lease, node), Decimal(315) + Decimal(420))
        self.assertEqual(gv.lease_covers(lease, node, ONE_G), Decimal("3.5"))
        self.assertEqual(node.units_of(ONE_G), 11)
        # 0.875 of a GPU x 700 W x 3600 s + 5 % = 0.643125 kWh (exact), a billionth more is above
        units = gv.lease_units_on(lease, node)
        self.assertTrue(gv.within_energy_bound(units, Decimal(700), 3600, Decimal("0.643125")))
        self.assertFalse(gv.within_energy_bound(units, Decimal(700), 3600, Decimal("0.643125001")))


def node_registered(gpus, **over):
    body = {"node": "n1", "region": "r1", "gpus": gpus, "max_watts_per_gpu": "700"}
    body.update(over)
    return body


class Forms(unittest.TestCase):
    """record.rs `NodeUpdated::check`, `node_gpus`, `mig_layout`: each rule's code and field."""

    def code(self, kind, body):
        try:
            gv.check_body(kind, body)
        except gv.FieldError as e:
            return e.code, e.field
        return None

    def mig_code(self, layout, model="H100"):
        return self.code("node_registered", node_registered([gpu(0, "GPU-0", model, layout)]))

    def test_node_updated(self):
        one = [gpu(4, "GPU-4", "H100")]
        upd = lambda **b: self.code("node_updated", dict({"node": "n1"}, **b))
        self.assertIsNone(upd(gpus=one))
        self.assertIsNone(upd(max_watts_per_gpu="1000"))
        self.assertIsNone(upd(gpus=one, max_watts_per_gpu="1000"))
        self.assertEqual(upd(), ("invalid_field", "body.gpus"))
        self.assertEqual(upd(gpus=None), ("malformed", "body.gpus"))
        self.assertEqual(upd(max_watts_per_gpu=None), ("malformed", "body.max_watts_per_gpu"))
        self.assertEqual(upd(max_watts_per_gpu=1000), ("malformed", "body.max_watts_per_gpu"))
        self.assertEqual(upd(gpus=one, region="r1"), ("malformed", "body.region"))
        self.assertEqual(self.code("node_updated", {"gpus": one}), ("malformed", "body.node"))
        self.assertEqual(upd(gpus=[]), ("quantity_out_of_range", "body.gpus"))
        self.assertEqual(upd(gpus=[gpu(i, f"G{i}", "H100") for i in range(65)]), ("quantity_out_of_range", "body.gpus"))
        self.assertIsNone(upd(gpus=[gpu(i, f"G{i}", "H100") for i in range(64)]))
        self.assertEqual(upd(gpus=[gpu(1, "a", "H100"), gpu(1, "b", "H100")]), ("invalid_field", "body.gpus[1].index"))
        self.assertEqual(upd(gpus=[gpu(1, "a", "H100"), gpu(2, "a", "H100")]), ("invalid_field", "body.gpus[1].uuid"))
        self.assertEqual(upd(gpus=[{"index": 1, "uuid": "a"}]), ("malformed", "body.gpus[0].model"))
        self.assertEqual(upd(max_watts_per_gpu="0"), ("quantity_out_of_range", "body.max_watts_per_gpu"))
        self.assertEqual(upd(max_watts_per_gpu="5000.000000001"), ("quantity_out_of_range", "body.max_watts_per_gpu"))
        self.assertEqual(upd(max_watts_per_gpu="1000.0"), ("invalid_field", "body.max_watts_per_gpu"))
        # the node first, then the GPUs, then the limit; the shape of every GPU before any value
        self.assertEqual(upd(node="-bad", gpus=[]), ("invalid_field", "body.node"))
        self.assertEqual(upd(gpus=[], max_watts_per_gpu="0"), ("quantity_out_of_range", "body.gpus"))
        self.assertEqual(upd(node="-bad", gpus=[gpu(0, "a", "H100", {"slices": "7", "instances": []})]),
                         ("malformed", "body.gpus[0].mig.slices"))
        # a GPU's MIG layout as node_registered's
        self.assertEqual(upd(gpus=[gpu(0, "a", "H100", mig(7, {"1g.10gb": 8}))]),
                         ("invalid_field", "body.gpus[0].mig.instances"))

    def test_mig_shape(self):
        ok = mig(7, {"1g.10gb": 7})
        self.assertIsNone(self.mig_code(ok))
        self.assertEqual(self.code("node_registered", node_registered([dict(gpu(0, "a", "H100"), mig=None)])),
                         ("malformed", "body.gpus[0].mig"))
        self.assertEqual(self.mig_code(dict(ok, extra=1)), ("malformed", "body.gpus[0].mig.extra"))
        self.assertEqual(self.mig_code({"slices": 7}), ("malformed", "body.gpus[0].mig.instances"))
        self.assertEqual(self.mig_code(dict(ok, slices="7")), ("malformed", "body.gpus[0].mig.slices"))
        self.assertEqual(self.mig_code(dict(ok, slices=-1)), ("malformed", "body.gpus[0].mig.slices"))
        self.assertEqual(self.mig_code(dict(ok, slices=2**32)), ("malformed", "body.gpus[0].mig.slices"))
        self.assertEqual(self.mig_code(dict(ok, instances=None)), ("malformed", "body.gpus[0].mig.instances"))
        self.assertEqual(self.mig_code(dict(ok, instances=["1g.10gb"])), ("malformed", "body.gpus[0].mig.instances[0]"))
        self.assertEqual(self.mig_code(dict(ok, instances=[{"profile": "1g.10gb", "count": "7"}])),
                         ("malformed", "body.gpus[0].mig.instances[0].count"))
        self.assertEqual(self.mig_code(dict(ok, instances=[{"profile": 1, "count": 7}])),
                         ("malformed", "body.gpus[0].mig.instances[0].profile"))
        self.assertEqual(self.mig_code(dict(ok, instances=[{"profile": "1g.10gb", "count": 7, "memory": 10}])),
                         ("malformed", "body.gpus[0].mig.instances[0].memory"))

    def test_mig_values(self):
        f = "body.gpus[0].mig"
        for slices in (0, 9):
            self.assertEqual(self.mig_code(mig(slices, {"1g.10gb": 1})), ("invalid_field", f"{f}.slices"))
        self.assertIsNone(self.mig_code(mig(8, {"1g.10gb": 8})))
        self.assertEqual(self.mig_code({"slices": 7, "instances": []}), ("invalid_field", f"{f}.instances"))
        nine = {"slices": 8, "instances": [{"profile": f"1g.{k}gb", "count": 1} for k in range(11, 20)]}
        self.assertEqual(self.mig_code(nine), ("invalid_field", f"{f}.instances"))
        for profile in ("1g.10GB", "0g.5gb", "9g.5gb", "1g.05gb", "1g.10000gb", "10g.5gb", "4g.40gb"):
            with self.subTest(profile=profile):
                self.assertEqual(self.mig_code(mig(3, {profile: 1})), ("invalid_field", f"{f}.instances[0].profile"))
        unsorted = {"slices": 7, "instances": [{"profile": "2g.20gb", "count": 1}, {"profile": "1g.10gb", "count": 1}]}
        self.assertEqual(self.mig_code(unsorted), ("invalid_field", f"{f}.instances[1].profile"))
        twice = {"slices": 7, "instances": [{"profile": "1g.10gb", "count": 1}, {"profile": "1g.10gb", "count": 1}]}
        self.assertEqual(self.mig_code(twice), ("invalid_field", f"{f}.instances[1].profile"))
        for count in (0, 9):
            self.assertEqual(self.mig_code(mig(7, {"1g.10gb": count})), ("invalid_field", f"{f}.instances[0].count"))
        # the profile's rule before the count's
        self.assertEqual(self.mig_code(mig(7, {"9g.10gb": 0})), ("invalid_field", f"{f}.instances[0].profile"))
        # together within the slices
        self.assertEqual(self.mig_code(mig(7, {"1g.10gb": 8})), ("invalid_field", f"{f}.instances"))
        self.assertEqual(self.mig_code(mig(7, {"1g.10gb": 6, "2g.20gb": 1})), ("invalid_field", f"{f}.instances"))
        self.assertIsNone(self.mig_code(mig(7, {"1g.10gb": 5, "2g.20gb": 1})))
        # <model>/<profile> an identifier (at most 128 characters)
        self.assertEqual(self.mig_code(mig(7, {"1g.10gb": 1}), model="H" * 121),
                         ("invalid_field", f"{f}.instances[0].profile"))
        self.assertIsNone(self.mig_code(mig(7, {"1g.10gb": 1}), model="H" * 120))
        # the GPU's model before its layout
        self.assertEqual(self.mig_code(mig(0, {"1g.10gb": 1}), model="H 100"), ("invalid_field", "body.gpus[0].model"))

    def test_one_models_partitioned_gpus_have_the_same_slices(self):
        seven, four = mig(7, {"1g.10gb": 7}), mig(4, {"1g.10gb": 4})
        reg = lambda *gpus: self.code("node_registered", node_registered(list(gpus)))
        upd = lambda *gpus: self.code("node_updated", {"node": "n1", "gpus": list(gpus)})
        for check in (reg, upd):
            with self.subTest(kind="node_registered" if check is reg else "node_updated"):
                self.assertEqual(check(gpu(0, "a", "H100", seven), gpu(1, "b", "H100", four)),
                                 ("invalid_field", "body.gpus[1].mig.slices"))
                self.assertIsNone(check(gpu(0, "a", "H100", seven), gpu(1, "b", "H100", mig(7, {"7g.80gb": 1}))))
                self.assertIsNone(check(gpu(0, "a", "H100", seven), gpu(1, "b", "A100", four)))
                self.assertIsNone(check(gpu(0, "a", "H100", seven), gpu(1, "b", "H100"), gpu(2, "c", "A100", four)))
                # a whole GPU between them does not hide the first
                self.assertEqual(check(gpu(0, "a", "H100", seven), gpu(1, "b", "H100"), gpu(2, "c", "H100", four)),
                                 ("invalid_field", "body.gpus[2].mig.slices"))
                # GPU i's own layout first, then the slices rule, then GPU i+1
                self.assertEqual(check(gpu(0, "a", "H100", seven), gpu(1, "b", "H100", mig(4, {"1g.10gb": 5}))),
                                 ("invalid_field", "body.gpus[1].mig.instances"))
                self.assertEqual(check(gpu(0, "a", "H100", seven), gpu(1, "b", "H100", four), gpu(1, "c", "H100")),
                                 ("invalid_field", "body.gpus[1].mig.slices"))
                self.assertEqual(check(gpu(0, "a", "H100", seven), gpu(0, "b", "H100", four)),
                                 ("invalid_field", "body.gpus[1].index"))
        try:
            gv.check_body("node_registered", node_registered([gpu(3, "a", "H100", seven), gpu(5, "b", "H100", four)]))
        except gv.FieldError as e:
            self.assertIn("GPU 5 of model H100 has 4 slices, GPU 3 of the node 7", e.message)
        else:
            self.fail("two slices of one model passed")

    def test_a_lease_counts_up_to_512_units(self):
        def item(count):
            return self.code("lease_registered", {"lease": "C", "tenant": "t", "class": "on_demand",
                                                  "from": "2026-10-01T00:00:00Z",
                                                  "nodes": [producer.lease_count("n1", ONE_G, count)]})
        self.assertIsNone(item("512"))
        self.assertIsNone(item("65"))
        self.assertEqual(item("512.000000001"), ("quantity_out_of_range", "body.nodes[0].count"))


if __name__ == "__main__":
    unittest.main()
