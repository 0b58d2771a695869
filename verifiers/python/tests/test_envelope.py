"""Envelope and body checks (sections 4 and 5) and the log rules checked on a bundle's context."""

import copy
import unittest

from support import ED_P, ORDER8, VerifierTestCase, base_mul, encode_y, gv, mixed_order_key, producer, scalar

ORIGIN = "gpuledger.test/envelope"
NODE = producer.Key.from_byte(0x01)

BODIES = {
    "gpu_usage": {"tenant": "tenant-acme", "lease": "lease-0042", "region": "cn-nmg-1", "node": "node-imx-0001",
                  "gpu_model": "H100-SXM5-80GB", "gpu_count": "8", "start": "2026-11-30T12:00:00Z",
                  "end": "2026-11-30T12:05:00Z", "gpu_seconds": "2400"},
    "energy": {"tenant": "tenant-acme", "region": "cn-nmg-1", "node": "node-imx-0001",
               "start": "2026-11-30T12:00:00Z", "end": "2026-11-30T12:05:00Z", "kwh": "3.125"},
    "spot_price": {"region": "cn-nmg-1", "gpu_model": "H100-SXM5-80GB", "price_per_gpu_hour": "14.75",
                   "currency": "CNY", "effective_from": "2026-11-30T13:00:00Z"},
    "signer_key_registered": {"signer": "node-imx-0001", "role": "node", "key_id": NODE.key_id,
                              "public_key": producer.b64(NODE.pub), "nodes": ["node-imx-0001", "node-imx-0002"],
                              "regions": ["cn-nmg-1"]},
    "signer_key_revoked": {"signer": "market-cn", "key_id": "6a3803d5f059902a", "reason": "rotated"},
    "rate_card": {"region": "cn-nmg-1", "gpu_model": "H100-SXM5-80GB", "lease_class": "on_demand",
                  "currency": "CNY", "price_per_gpu_hour": "20", "effective_from": "2026-11-01T00:00:00Z"},
    "region_params": {"region": "cn-nmg-1", "currency": "CNY", "electricity_price_per_kwh": "0.5", "pue": "1.08",
                      "carbon_g_per_kwh": "550", "effective_from": "2026-11-01T00:00:00Z"},
    # Section 5.8's example.
    "lease_registered": {"class": "on_demand", "from": "2026-11-01T00:00:00Z", "lease": "L-acme-1",
                         "nodes": [{"gpus": [0, 1, 2, 3], "node": "n1"}, {"gpus": [6], "node": "n1", "share": "0.5"},
                                   {"count": "4", "gpu_model": "H100-SXM-80G", "node": "n2"}],
                         "tenant": "acme", "to": "2027-11-01T00:00:00Z"},
    "invoice_issued": {"number": "INV-000001", "tenant": "tenant-acme", "period_from": "2026-10-01T00:00:00Z",
                       "period_to": "2026-11-01T00:00:00Z", "currency": "CNY", "total": "148.00",
                       "checkpoint_size": 17, "invoice_sha256": "0" * 64},
    "payment": {"tenant": "tenant-acme", "invoice": "INV-000001", "currency": "CNY", "amount": "100",
                "note": "wire 42"},
    "credit_note": {"tenant": "tenant-acme", "invoice": "INV-000001", "currency": "CNY", "amount": "0.01",
                    "note": ""},
    "volume_tiers": {"plan": "volume", "region": "west", "gpu_model": "H100", "lease_class": "on_demand",
                     "currency": "CNY", "effective_from": "2026-11-01T00:00:00Z",
                     "tiers": [{"price_per_gpu_hour": "20.5", "up_to_gpu_hours": "10"},
                               {"price_per_gpu_hour": "17.25", "up_to_gpu_hours": "25"},
                               {"price_per_gpu_hour": "13.333"}]},
    "tenant_plan": {"tenant": "tenant-acme", "plan": "volume", "effective_from": "2026-11-01T00:00:00Z"},
    "certificate_issued": {"id": "CERT-000001", "tenant": "tenant-acme", "period_from": "2026-11-01T00:00:00Z",
                           "period_to": "2026-12-01T00:00:00Z", "checkpoint_size": 7,
                           "certificate_sha256": "f" * 64},
    "tenant_registered": {"tenant": "tenant-acme"},
    "log_policy": {"max_record_age_seconds": 3024000, "max_future_skew_seconds": 300},
    "node_registered": {"node": "node-imx-0001", "region": "cn-nmg-1", "hub": "hub-1",
                        "gpus": [{"index": 0, "uuid": "GPU-5f1c0a7e-0000", "model": "H100-SXM5-80GB"},
                                 {"index": 1, "uuid": "GPU-5f1c0a7e-0001", "model": "H100-SXM5-80GB"},
                                 {"index": 3, "uuid": "GPU-5f1c0a7e-0003", "model": "L40S"}],
                        "max_watts_per_gpu": "700"},
    "record_excluded": {"tenant": "tenant-acme", "entry": 12, "reason": "node-imx-0001's meter was faulty"},
    "node_updated": {"node": "node-imx-0001", "max_watts_per_gpu": "800"},
    # Section 5.19's example (issue #28).
    "contract_registered": {"billing_anchor": "calendar", "billing_period": "month", "commitment": "5000",
                            "contract": "C-acme-2027", "currency": "CNY",
                            "fees": [{"amount": "120000", "category": "compute",
                                      "name": "Bare-metal 8\u00d7H100 node, monthly", "timing": "advance"},
                                     {"amount": "800", "category": "support", "name": "Rack setup",
                                      "timing": "once"}],
                            "region": "cn-east", "tenant": "acme", "term_from": "2027-01-15T00:00:00Z",
                            "term_to": "2028-01-15T00:00:00Z"},
    # Section 5.20's example.
    "prepayment": {"amount": "5000.00", "currency": "CNY", "expires_at": "2028-01-01T00:00:00Z",
                   "reference": "TOPUP-2027-0042", "source": "purchase", "tenant": "acme"},
    # Section 5.21's example.
    "contract_amended": {"contract": "C-acme-2027", "reason": "Ended early by mutual agreement", "tenant": "acme",
                         "term_to": "2027-07-01T00:00:00Z"},
}


def envelope(kind, body=None, **over):
    env = {"v": 3, "kind": kind, "signer": "node-imx-0001", "key_id": "34750f98bd59fcfc", "seq": 1,
           "body": copy.deepcopy(BODIES[kind]) if body is None else body, "sig": "A" * 86 + "=="}
    env.update(over)
    return env


class EnvelopeChecks(unittest.TestCase):
    def code(self, env):
        with self.assertRaises(gv.FieldError) as cm:
            gv.check_envelope(env, ORIGIN)
        return cm.exception.code, cm.exception.field

    def test_every_kind_valid(self):
        for kind in BODIES:
            with self.subTest(kind):
                gv.check_envelope(envelope(kind), ORIGIN)
        self.assertEqual(set(BODIES), set(gv.KINDS))

    def test_signed_message_names_the_origin(self):
        env = envelope("gpu_usage")
        msg = gv.check_envelope(env, ORIGIN)["message"]
        self.assertTrue(msg.startswith(b"gpuledger/v3/gpu_usage\n" + ORIGIN.encode() + b"\n{"))
        self.assertEqual(msg.count(b"\n"), 2)
        self.assertEqual(msg, gv.signed_message(env, ORIGIN))
        unsigned = {k: v for k, v in env.items() if k != "sig"}
        self.assertEqual(msg, producer.Log(NODE, ORIGIN).message("gpu_usage", unsigned))
        self.assertNotEqual(msg, gv.signed_message(env, "gpuledger.test/staging"))

    def test_envelope_members(self):
        env = envelope("gpu_usage")
        self.assertEqual(self.code(dict(env, extra=1))[0], "malformed")
        self.assertEqual(self.code({k: v for k, v in env.items() if k != "seq"})[0], "malformed")
        self.assertEqual(self.code(dict(env, seq="1"))[0], "malformed")
        self.assertEqual(self.code(dict(env, seq=True))[0], "malformed")
        self.assertEqual(self.code(dict(env, v=1)), ("unsupported_version", "v"))  # version 1 is retired
        self.assertEqual(self.code(dict(env, v=2)), ("unsupported_version", "v"))  # and so is version 2
        self.assertEqual(self.code(dict(env, kind="gpu_use")), ("unknown_kind", "kind"))
        self.assertEqual(self.code(dict(env, signer="-x")), ("invalid_field", "signer"))
        self.assertEqual(self.code(dict(env, key_id="34750F98BD59FCFC")), ("invalid_field", "key_id"))
        self.assertEqual(self.code(dict(env, seq=0)), ("quantity_out_of_range", "seq"))
        self.assertEqual(self.code(dict(env, seq=2**53)), ("quantity_out_of_range", "seq"))
        gv.check_envelope(dict(env, seq=2**53 - 1), ORIGIN)
        self.assertEqual(self.code(dict(env, sig="A" * 88)), ("invalid_field", "sig"))
        self.assertEqual(self.code(dict(env, sig="A" * 42 + "A=")), ("invalid_field", "sig"))

    def test_too_large(self):
        body = dict(BODIES["signer_key_revoked"], reason="x" * 8000)
        env = envelope("signer_key_revoked", body=body, signer="ledger")
        size = len(gv.jcs(env))
        self.assertGreater(size, 8192)
        self.assertEqual(self.code(env), ("too_large", "envelope"))
        fits = dict(body, reason="x" * (8000 - (size - 8192)))
        self.assertEqual(len(gv.jcs(envelope("signer_key_revoked", body=fits, signer="ledger"))), 8192)
        gv.check_envelope(envelope("signer_key_revoked", body=fits, signer="ledger"), ORIGIN)

    def body_code(self, kind, drop=(), **changes):
        body = copy.deepcopy(BODIES[kind])
        for d in drop:
            del body[d]
        body.update(changes)
        return self.code(envelope(kind, body=body))

    def test_gpu_usage(self):
        self.assertEqual(self.body_code("gpu_usage", gpu_count="0", gpu_seconds="0"),
                         ("quantity_out_of_range", "body.gpu_count"))
        self.assertEqual(self.body_code("gpu_usage", gpu_count="1025"), ("quantity_out_of_range", "body.gpu_count"))
        self.assertEqual(self.body_code("gpu_usage", gpu_count="-8"), ("negative_quantity", "body.gpu_count"))
        self.assertEqual(self.body_code("gpu_usage", gpu_count="8.0"), ("invalid_field", "body.gpu_count"))
        self.assertEqual(self.body_code("gpu_usage", gpu_count=8), ("malformed", "body.gpu_count"))
        self.assertEqual(self.body_code("gpu_usage", lease=None), ("malformed", "body.lease"))
        self.assertEqual(self.body_code("gpu_usage", drop=("tenant",)), ("malformed", "body.tenant"))
        self.assertEqual(self.body_code("gpu_usage", colour="blue"), ("malformed", "body.colour"))
        self.assertEqual(self.body_code("gpu_usage", end="2026-11-30T12:00:00Z"), ("empty_interval", "body.end"))
        self.assertEqual(self.body_code("gpu_usage", start="2026-11-29T12:04:59Z"),
                         ("interval_too_long", "body.end"))
        self.assertEqual(self.body_code("gpu_usage", gpu_seconds="2401"), ("gpu_seconds_mismatch", "body.gpu_seconds"))
        self.assertEqual(self.body_code("gpu_usage", gpu_count="0.25", gpu_seconds="74"), ("gpu_seconds_mismatch",
                                                                                         "body.gpu_seconds"))
        gv.check_envelope(envelope("gpu_usage", body=dict(BODIES["gpu_usage"], gpu_count="0.25",
                                                          gpu_seconds="75", end="2026-11-30T12:05:00Z")), ORIGIN)
        body = dict(BODIES["gpu_usage"], gpu_count="1024", start="2026-11-29T12:05:00Z", gpu_seconds="88473600")
        gv.check_envelope(envelope("gpu_usage", body=body), ORIGIN)
        self.assertEqual(self.body_code("gpu_usage", start="2026-02-30T00:00:00Z"), ("invalid_field", "body.start"))

    def gpus(self, n=3, **changes):
        """BODIES' node_registered with `n` GPUs (indexes 0..n-1), GPU i's members changed by
        changes[i] (a dict; None deletes a member)."""
        gpus = [{"index": i, "uuid": f"GPU-{i}", "model": "H100"} for i in range(n)]
        for i, change in changes.items():
            for k, v in change.items():
                if v is None:
                    del gpus[int(i)][k]
                else:
                    gpus[int(i)][k] = v
        return gpus

    def test_node_registered(self):
        ok = lambda **ch: gv.check_envelope(envelope("node_registered", body=dict(BODIES["node_registered"], **ch)),
                                            ORIGIN)
        code = lambda drop=(), **ch: self.body_code("node_registered", drop=drop, **ch)
        ok()
        gv.check_envelope(envelope("node_registered", body={k: v for k, v in BODIES["node_registered"].items()
                                                            if k != "hub"}), ORIGIN)
        # members
        self.assertEqual(code(drop=("gpus",)), ("malformed", "body.gpus"))
        self.assertEqual(code(drop=("node",)), ("malformed", "body.node"))
        self.assertEqual(code(drop=("max_watts_per_gpu",)), ("malformed", "body.max_watts_per_gpu"))
        self.assertEqual(code(hub=None), ("malformed", "body.hub"))
        self.assertEqual(code(rack="r7"), ("malformed", "body.rack"))
        self.assertEqual(code(gpus=None), ("malformed", "body.gpus"))
        self.assertEqual(code(gpus={"index": 0}), ("malformed", "body.gpus"))
        self.assertEqual(code(max_watts_per_gpu=700), ("malformed", "body.max_watts_per_gpu"))
        # each GPU is exactly {index, uuid, model}
        self.assertEqual(code(gpus=["GPU-0"]), ("malformed", "body.gpus[0]"))
        self.assertEqual(code(gpus=self.gpus(3, **{"1": {"serial": "x"}})), ("malformed", "body.gpus[1].serial"))
        self.assertEqual(code(gpus=self.gpus(3, **{"2": {"model": None}})), ("malformed", "body.gpus[2].model"))
        self.assertEqual(code(gpus=self.gpus(3, **{"0": {"uuid": None}})), ("malformed", "body.gpus[0].uuid"))
        for bad in (-1, 2**32, "0", None, True):
            self.assertEqual(code(gpus=self.gpus(1, **{"0": {"index": bad}})), ("malformed", "body.gpus[0].index"),
                             bad)
        ok(gpus=self.gpus(1, **{"0": {"index": 2**32 - 1}}))
        self.assertEqual(code(gpus=self.gpus(2, **{"1": {"uuid": 7}})), ("malformed", "body.gpus[1].uuid"))
        # the shape of every GPU comes before any value rule (the ledger reads the body whole first)
        self.assertEqual(code(node="-bad", gpus=self.gpus(2, **{"1": {"serial": "x"}})),
                         ("malformed", "body.gpus[1].serial"))
        # identifiers
        self.assertEqual(code(node="-bad"), ("invalid_field", "body.node"))
        self.assertEqual(code(region=""), ("invalid_field", "body.region"))
        self.assertEqual(code(hub="a b"), ("invalid_field", "body.hub"))
        # 1 to 64 GPUs
        self.assertEqual(code(gpus=[]), ("quantity_out_of_range", "body.gpus"))
        ok(gpus=self.gpus(64))
        self.assertEqual(code(gpus=self.gpus(65)), ("quantity_out_of_range", "body.gpus"))
        # strictly increasing indexes
        self.assertEqual(code(gpus=self.gpus(3, **{"2": {"index": 1}})), ("invalid_field", "body.gpus[2].index"))
        self.assertEqual(code(gpus=self.gpus(3, **{"1": {"index": 0}})), ("invalid_field", "body.gpus[1].index"))
        ok(gpus=self.gpus(2, **{"0": {"index": 4}, "1": {"index": 7}}))
        # UUIDs: 1 to 128 visible ASCII characters, distinct within the node
        for bad in ("", "GPU 1", "GPU-\u00e9", "x" * 129, "GPU-\t"):
            self.assertEqual(code(gpus=self.gpus(2, **{"1": {"uuid": bad}})), ("invalid_field", "body.gpus[1].uuid"),
                             bad)
        ok(gpus=self.gpus(2, **{"1": {"uuid": "!" + "~" * 127}}))
        self.assertEqual(code(gpus=self.gpus(3, **{"2": {"uuid": "GPU-0"}})), ("invalid_field", "body.gpus[2].uuid"))
        # models are identifiers
        self.assertEqual(code(gpus=self.gpus(2, **{"1": {"model": "H100 SXM"}})),
                         ("invalid_field", "body.gpus[1].model"))
        # the index rule of GPU i comes before its UUID rule, GPU by GPU
        self.assertEqual(code(gpus=self.gpus(3, **{"1": {"uuid": ""}, "2": {"index": 0}})),
                         ("invalid_field", "body.gpus[1].uuid"))
        # max_watts_per_gpu: above 0, at most 5000, a canonical decimal
        self.assertEqual(code(max_watts_per_gpu="0"), ("quantity_out_of_range", "body.max_watts_per_gpu"))
        self.assertEqual(code(max_watts_per_gpu="5000.000000001"),
                         ("quantity_out_of_range", "body.max_watts_per_gpu"))
        self.assertEqual(code(max_watts_per_gpu="-700"), ("negative_quantity", "body.max_watts_per_gpu"))
        self.assertEqual(code(max_watts_per_gpu="700.0"), ("invalid_field", "body.max_watts_per_gpu"))
        self.assertEqual(code(max_watts_per_gpu="7e2"), ("invalid_field", "body.max_watts_per_gpu"))
        ok(max_watts_per_gpu="5000")
        ok(max_watts_per_gpu="0.000000001")
        # the GPU rules come after the identifiers, max_watts_per_gpu last
        self.assertEqual(code(node="-bad", gpus=[]), ("invalid_field", "body.node"))
        self.assertEqual(code(gpus=[], max_watts_per_gpu="0"), ("quantity_out_of_range", "body.gpus"))
        # a ledger kind
        self.assertIn("node_registered", gv.LEDGER_KINDS)
        self.assertIn("node_registered", gv.ROLE_KINDS["ledger"])

    def test_energy(self):
        self.assertEqual(self.body_code("energy", kwh="100000.000000001"), ("quantity_out_of_range", "body.kwh"))
        gv.check_envelope(envelope("energy", body=dict(BODIES["energy"], kwh="0")), ORIGIN)
        gv.check_envelope(envelope("energy", body={k: v for k, v in BODIES["energy"].items() if k != "tenant"}),
                          ORIGIN)
        self.assertEqual(self.body_code("energy", tenant=None), ("malformed", "body.tenant"))
        self.assertEqual(self.body_code("energy", lease="x"), ("malformed", "body.lease"))

    def test_the_reserved_id_is_refused_wherever_a_body_names_a_thing(self):
        # Section 2.3 (crates/core/src/ids.rs RESERVED_IDS): as gpuledger verify and the
        # console refuse it, so a crafted log naming a tenant, region or node "ledger" gets one
        # verdict from every verifier.
        for kind, member in (("gpu_usage", "tenant"), ("gpu_usage", "region"), ("gpu_usage", "node"),
                             ("gpu_usage", "gpu_model"), ("energy", "node"), ("spot_price", "region")):
            with self.subTest(kind=kind, member=member):
                self.assertEqual(self.body_code(kind, **{member: "ledger"}), ("invalid_field", f"body.{member}"))
        self.assertEqual(self.body_code("signer_key_registered", regions=["ledger"]),
                         ("invalid_field", "body.regions[0]"))

    def test_spot_price(self):
        self.assertEqual(self.body_code("spot_price", currency="cny"), ("invalid_field", "body.currency"))
        self.assertEqual(self.body_code("spot_price", price_per_gpu_hour="1000000.5"),
                         ("quantity_out_of_range", "body.price_per_gpu_hour"))
        self.assertEqual(self.body_code("spot_price", effective_from="2026-11-30"),
                         ("invalid_field", "body.effective_from"))

    def test_signer_key_registered(self):
        other = producer.Key.from_byte(0x02)
        self.assertEqual(self.body_code("signer_key_registered", key_id=other.key_id),
                         ("invalid_field", "body.key_id"))
        small = producer.b64((1).to_bytes(32, "little"))
        self.assertEqual(self.body_code("signer_key_registered", public_key=small,
                                        key_id=gv.key_id_of((1).to_bytes(32, "little"))),
                         ("invalid_field", "body.public_key"))
        self.assertEqual(self.body_code("signer_key_registered", public_key="AAAA"),
                         ("invalid_field", "body.public_key"))
        self.assertEqual(self.body_code("signer_key_registered", role="ledger"), ("invalid_field", "body.role"))
        self.assertEqual(self.body_code("signer_key_registered", role="admin"), ("invalid_field", "body.role"))
        self.assertEqual(self.body_code("signer_key_registered", signer="ledger"), ("invalid_field", "body.signer"))
        # y = 2 is not on the curve
        not_point = (2).to_bytes(32, "little")
        self.assertEqual(self.body_code("signer_key_registered", public_key=producer.b64(not_point),
                                        key_id=gv.key_id_of(not_point)), ("invalid_field", "body.public_key"))

    def test_signer_key_registered_public_key_validity(self):
        # Version 2, section 3.1: canonical, not of small order, torsion-free.
        mixed = mixed_order_key(scalar(12345), 1)
        noncanonical = encode_y(3 + ED_P)
        cases = {"non-canonical (y >= p)": noncanonical, "small order (order 8)": ORDER8,
                 "mixed order (aB + T8)": mixed, "mixed order (aB + T2)": mixed_order_key(scalar(777), 4),
                 "x = 0 with the sign bit": encode_y(1, 1)}
        for name, pub in cases.items():
            with self.subTest(name):
                self.assertEqual(self.body_code("signer_key_registered", public_key=producer.b64(pub),
                                                key_id=gv.key_id_of(pub)), ("invalid_field", "body.public_key"))
        good = base_mul(scalar(12345))
        gv.check_envelope(envelope("signer_key_registered", body=dict(
            BODIES["signer_key_registered"], public_key=producer.b64(good), key_id=gv.key_id_of(good))), ORIGIN)

    def test_signer_key_registered_scope(self):
        code = self.body_code
        self.assertEqual(code("signer_key_registered", drop=("nodes",)), ("malformed", "body.nodes"))
        self.assertEqual(code("signer_key_registered", drop=("regions",)), ("malformed", "body.regions"))
        self.assertEqual(code("signer_key_registered", role="market"), ("malformed", "body.nodes"))
        gv.check_envelope(envelope("signer_key_registered", body={
            k: v for k, v in BODIES["signer_key_registered"].items() if k != "nodes"} | {"role": "market"}), ORIGIN)
        self.assertEqual(code("signer_key_registered", role="market", drop=("nodes", "regions")),
                         ("malformed", "body.regions"))
        self.assertEqual(code("signer_key_registered", nodes=None), ("malformed", "body.nodes"))
        self.assertEqual(code("signer_key_registered", nodes="node-imx-0001"), ("malformed", "body.nodes"))
        self.assertEqual(code("signer_key_registered", regions={"a": 1}), ("malformed", "body.regions"))
        self.assertEqual(code("signer_key_registered", nodes=[]), ("invalid_field", "body.nodes"))
        self.assertEqual(code("signer_key_registered", regions=[]), ("invalid_field", "body.regions"))
        self.assertEqual(code("signer_key_registered", nodes=["b", "a"]), ("invalid_field", "body.nodes"))
        self.assertEqual(code("signer_key_registered", nodes=["a", "a"]), ("invalid_field", "body.nodes"))
        self.assertEqual(code("signer_key_registered", regions=["r2", "r1"]), ("invalid_field", "body.regions"))
        self.assertEqual(code("signer_key_registered", nodes=["a", "-b"]), ("invalid_field", "body.nodes[1]"))
        self.assertEqual(code("signer_key_registered", nodes=["a", 7]), ("malformed", "body.nodes[1]"))
        # byte order: upper case sorts before lower case, digits before letters
        gv.check_envelope(envelope("signer_key_registered", body=dict(
            BODIES["signer_key_registered"], nodes=["9", "Z", "a"], regions=["R", "r"])), ORIGIN)
        many = sorted(f"n{i:03d}" for i in range(257))
        self.assertEqual(code("signer_key_registered", nodes=many), ("quantity_out_of_range", "body.nodes"))
        gv.check_envelope(envelope("signer_key_registered", body=dict(BODIES["signer_key_registered"],
                                                                      nodes=many[:256])), ORIGIN)
        regions = sorted(f"r{i:02d}" for i in range(65))
        self.assertEqual(code("signer_key_registered", regions=regions), ("quantity_out_of_range", "body.regions"))
        gv.check_envelope(envelope("signer_key_registered", body=dict(BODIES["signer_key_registered"],
                                                                      regions=regions[:64])), ORIGIN)

    def test_log_policy(self):
        code = self.body_code
        self.assertEqual(code("log_policy", max_record_age_seconds=3599),
                         ("quantity_out_of_range", "body.max_record_age_seconds"))
        self.assertEqual(code("log_policy", max_record_age_seconds=31536001),
                         ("quantity_out_of_range", "body.max_record_age_seconds"))
        self.assertEqual(code("log_policy", max_future_skew_seconds=3601),
                         ("quantity_out_of_range", "body.max_future_skew_seconds"))
        self.assertEqual(code("log_policy", max_future_skew_seconds="300"),
                         ("malformed", "body.max_future_skew_seconds"))
        self.assertEqual(code("log_policy", drop=("max_future_skew_seconds",)),
                         ("malformed", "body.max_future_skew_seconds"))
        for age, skew in ((3600, 0), (31536000, 3600)):
            gv.check_envelope(envelope("log_policy", body={"max_record_age_seconds": age,
                                                           "max_future_skew_seconds": skew}), ORIGIN)
        # integers are spelled plainly: a JSON 300.0 never parses (section 2.5)
        with self.assertRaises(ValueError):
            gv.parse_json(b'{"max_record_age_seconds":3024000,"max_future_skew_seconds":300.0}')

    def test_tenant_registered(self):
        self.assertEqual(self.body_code("tenant_registered", tenant="a b"), ("invalid_field", "body.tenant"))
        self.assertEqual(self.body_code("tenant_registered", plan="x"), ("malformed", "body.plan"))

    def test_volume_tiers_and_tenant_plan(self):
        code = self.body_code
        tiers = BODIES["volume_tiers"]["tiers"]
        self.assertEqual(code("volume_tiers", tiers=[]), ("invalid_field", "body.tiers"))
        self.assertEqual(code("volume_tiers", tiers=[{"price_per_gpu_hour": "1", "up_to_gpu_hours": str(i + 1)}
                                                     for i in range(16)] + [{"price_per_gpu_hour": "1"}]),
                         ("quantity_out_of_range", "body.tiers"))
        self.assertEqual(code("volume_tiers", tiers=tiers[:2]), ("invalid_field", "body.tiers[1].up_to_gpu_hours"))
        self.assertEqual(code("volume_tiers", tiers=[tiers[2]] + tiers[:2]),
                         ("invalid_field", "body.tiers[0].up_to_gpu_hours"))
        # Bounds that do not increase: a wrong value (invalid_field), as the ledger says.
        self.assertEqual(code("volume_tiers", tiers=[tiers[1], tiers[0], tiers[2]]),
                         ("invalid_field", "body.tiers[1].up_to_gpu_hours"))
        self.assertEqual(code("volume_tiers", tiers=[dict(tiers[0], extra="1"), tiers[2]]),
                         ("malformed", "body.tiers[0].extra"))
        self.assertEqual(code("volume_tiers", tiers=["x"]), ("malformed", "body.tiers[0]"))
        self.assertEqual(code("volume_tiers", lease_class="spot"), ("invalid_field", "body.lease_class"))
        gv.check_envelope(envelope("volume_tiers", body=dict(BODIES["volume_tiers"], tiers=[tiers[2]])), ORIGIN)
        self.assertEqual(code("tenant_plan", effective_from="x"), ("invalid_field", "body.effective_from"))

    def test_ledger_kinds(self):
        self.assertEqual(self.body_code("region_params", pue="0.99"), ("quantity_out_of_range", "body.pue"))
        self.assertEqual(self.body_code("region_params", pue="5.01"), ("quantity_out_of_range", "body.pue"))
        gv.check_envelope(envelope("region_params", body=dict(BODIES["region_params"], pue="5")), ORIGIN)
        self.assertEqual(self.body_code("region_params", carbon_g_per_kwh="5001"),
                         ("quantity_out_of_range", "body.carbon_g_per_kwh"))
        self.assertEqual(self.body_code("rate_card", lease_class="spot"), ("invalid_field", "body.lease_class"))
        self.assertEqual(self.body_code("lease_registered", **{"class": "free"}), ("invalid_field", "body.class"))
        self.assertEqual(self.body_code("invoice_issued", number="INV-1"), ("invalid_field", "body.number"))
        self.assertEqual(self.body_code("invoice_issued", total="148.00001"), ("invalid_field", "body.total"))
        self.assertEqual(self.body_code("invoice_issued", checkpoint_size="17"), ("malformed", "body.checkpoint_size"))
        self.assertEqual(self.body_code("invoice_issued", invoice_sha256="A" * 64), ("invalid_field",
                                                                                   "body.invoice_sha256"))
        self.assertEqual(self.body_code("payment", amount="0"), ("quantity_out_of_range", "body.amount"))
        self.assertEqual(self.body_code("payment", drop=("note",)), ("malformed", "body.note"))
        self.assertEqual(self.body_code("credit_note", note="x" * 501), ("invalid_field", "body.note"))
        self.assertEqual(self.body_code("certificate_issued", id="CERT-12345"), ("invalid_field", "body.id"))
        gv.check_envelope(envelope("certificate_issued", body=dict(BODIES["certificate_issued"], id="CERT-1234567")),
                          ORIGIN)


LEASE_L = {"lease": "l", "tenant": "t", "class": "spot", "from": "2026-10-01T00:00:00Z",
           "nodes": [producer.lease_count("node-a", "m", "1")]}


class ContextRules(VerifierTestCase):
    """Rules of sections 5 and 6 that the verifier checks among the bundle's entries. The log:
    0 log_policy, 1 tenant_registered t, 2 node_registered node-a (region r1), 3 node-a's key
    (nodes [node-a], regions [r1]), 4 region_params, then the test's entries (from entry 5, bundle
    line 7), then lease-t (one of node-a's m GPUs) and a record under it."""

    def build(self, extra):
        lk, na = producer.Key.from_byte(0x41), producer.Key.from_byte(0x42)
        log = producer.Log(lk, "gpuledger.test/context")
        log.policy("2026-10-01T00:00:00Z")
        log.tenant("t", "2026-10-01T00:00:00Z")
        log.register("node-a", na, "node", "2026-10-01T00:00:00Z", regions=["r1"])
        log.region_params("r1", "1.1", "400", "2026-10-01T00:00:00Z", "2026-10-01T00:00:00Z")
        extra(log, na)
        log.lease("lease-t", "t", "on_demand", log.entries[-1].received_at, [producer.lease_count("node-a", "m", "1")])
        log.gpu_usage("node-a", na, "t", "r1", "m", "1", "2026-11-05T00:00:00Z", 60, lease="lease-t")
        size = len(log.entries)
        records = producer.covered(log, size, "t", *producer.PERIOD, {})
        context = [e.index for e in log.entries if e.kind not in ("gpu_usage", "energy")]
        cert = producer.make_certificate(log, size, "t", *producer.PERIOD, records=records)
        bundle = producer.make_bundle(log, size, context, records, {"certificate": cert["id"]})
        return self.run_certificate(cert, bundle, log.verifier_key())

    def test_baseline(self):
        self.assertPass(self.build(lambda log, na: None))

    def test_region_params_with_the_same_effective_from(self):
        # Version 2: prices only move forward, with its own reason.
        r = self.build(lambda log, na: log.region_params("r1", "1.2", "400", "2026-10-01T00:00:00Z",
                                                         "2026-10-01T00:00:00Z"))
        self.assertFail(r, "price_not_forward", "entry 5 (bundle line 7)")

    def test_ledger_prices_do_not_take_effect_in_the_past(self):
        # No price of any kind takes effect more than the policy's skew (300 s) before it is
        # logged: region parameters logged a day after they would take effect re-price the past.
        r = self.build(lambda log, na: log.region_params("r1", "1.2", "400", "2026-10-02T00:00:00Z",
                                                         "2026-10-03T00:00:00Z"))
        self.assertFail(r, "price_in_past", "entry 5 (bundle line 7)")
        r = self.build(lambda log, na: log.region_params("r1", "1.2", "400", "2026-10-02T00:00:00Z",
                                                         "2026-10-02T00:05:00Z"))
        self.assertPass(r)

    def test_key_registered_twice(self):
        r = self.build(lambda log, na: log.register("node-a", na, "node", "2026-10-02T00:00:00Z", regions=["r1"]))
        self.assertFail(r, "leaf_invalid", "entry 5 (bundle line 7)")

    def test_signer_changes_role(self):
        r = self.build(lambda log, na: log.register("node-a", producer.Key.from_byte(0x43), "market",
                                                    "2026-10-02T00:00:00Z"))
        self.assertFail(r, "leaf_invalid")

    def test_key_revoked_twice(self):
        def extra(log, na):
            k = producer.Key.from_byte(0x44)
            log.register("node-x", k, "node", "2026-10-02T00:00:00Z")
            log.revoke("node-x", k, "2026-10-03T00:00:00Z")
            log.revoke("node-x", k, "2026-10-04T00:00:00Z")
        # 5 node_registered node-x, 6 its key, 7 the revocation, 8 the second one
        self.assertFail(self.build(extra), "leaf_invalid", "entry 8 (bundle line 10)")

    def test_revocation_names_another_signers_key(self):
        self.assertFail(self.build(lambda log, na: log.revoke("node-z", na, "2026-10-03T00:00:00Z")), "leaf_invalid")

    def test_ledger_entry_not_by_the_log_key(self):
        def extra(log, na):
            log.append("lease_registered", "ledger", na, LEASE_L, "2026-10-02T00:00:00Z")
        self.assertFail(self.build(extra), "unknown_key", "entry 5 (bundle line 7)")

        def extra2(log, na):
            log.append("lease_registered", "node-a", na, LEASE_L, "2026-10-02T00:00:00Z")
        self.assertFail(self.build(extra2), "key_not_allowed", "entry 5 (bundle line 7)")

    def test_key_of_another_signer(self):
        def extra(log, na):
            log.register("node-b", producer.Key.from_byte(0x45), "node", "2026-10-02T00:00:00Z")
            log.gpu_usage("node-b", na, "t", "r1", "m", "1", "2026-11-04T00:00:00Z", 60)
        self.assertFail(self.build(extra), "key_not_allowed")

    def test_broken_hash_chain(self):
        sc = producer.Scenario()
        log = sc.log
        e = log.entries[11]  # a record whose predecessor (10) is in the bundle
        import json as _json
        leaf = _json.loads(e.leaf)
        leaf["prev"] = producer.b64(bytes(32))
        log.entries[11] = producer.Entry(11, producer.jcs(leaf), e.envelope, e.received_at)
        cert = producer.make_certificate(log, sc.size, producer.TENANT, *producer.PERIOD, records=sc.records)
        bundle = producer.make_bundle(log, sc.size, sc.context, sc.records, {"certificate": cert["id"]})
        self.assertFail(self.run_certificate(cert, bundle, sc.verifier_key()), "leaf_invalid",
                        "entry 11 (bundle line 13)")


if __name__ == "__main__":
    unittest.main()
