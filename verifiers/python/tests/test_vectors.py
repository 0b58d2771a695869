"""The committed vectors (tests/vectors/, produced by the Rust code) checked from the document.

Protocol version 2: these fail until the Rust side regenerates tests/vectors/ for version 2
(envelope and leaf v 2, messages "gpuledger/v3/<kind>" LF origin LF JCS). Positions in the vector
log are derived from the log itself, not from version 1's layout."""

import base64
import json
import os
import unittest

from support import VECTORS, VerifierTestCase, gv, producer, read, vector, vector_line

KEYS = json.loads(vector("keys.json"))
TREE = json.loads(vector("tree.json"))
VERIFIER_KEY = "gpuledger.example/vectors+8fc7e056+Ae1JKMYo0cLG6ukDOJBZlWEpWSc6XGP5NjbBRhSshzfR"  # PROTOCOL.md section 9
LEAVES = [line for line in vector("log.jsonl").split(b"\n") if line]
ORIGIN = KEYS["log"]["origin"]
SIZE = TREE["size"]
RECORD_KINDS = ("gpu_usage", "energy")


def log_from_vectors() -> producer.Log:
    log_key = producer.Key(bytes.fromhex(KEYS["log"]["seed_hex"]))
    return producer.Log.from_leaves(log_key, KEYS["log"]["origin"], LEAVES)


class Keys(unittest.TestCase):
    def test_key_ids_and_verifier_key(self):
        for name in ("node", "market", "log"):
            k = KEYS[name]
            pub = gv.b64decode_canonical(k["public_key"], 32)
            self.assertEqual(gv.key_id_of(pub), k["key_id"])
            seed = bytes.fromhex(k["seed_hex"])
            self.assertEqual(producer.Key(seed).pub, pub)
            self.assertEqual(k["secret"], "gpuledger-ed25519-secret-v1:" + base64.b64encode(seed).decode() + "\n")
        self.assertEqual(KEYS["log"]["verifier_key"], VERIFIER_KEY)
        vk = gv.parse_verifier_key(VERIFIER_KEY)
        self.assertEqual(vk.name, "gpuledger.example/vectors")
        self.assertEqual(f"{vk.note_key_id:08x}", KEYS["log"]["note_key_id"])
        self.assertEqual(vk.envelope_key_id, KEYS["log"]["key_id"])
        self.assertEqual(producer.Key(bytes.fromhex(KEYS["log"]["seed_hex"])).verifier_key(vk.name), VERIFIER_KEY)

    def test_bad_verifier_keys(self):
        for bad in ["", "gpuledger.example/vectors+8fc7e057+Ae1JKMYo0cLG6ukDOJBZlWEpWSc6XGP5NjbBRhSshzfR",
                    "other+8fc7e056+Ae1JKMYo0cLG6ukDOJBZlWEpWSc6XGP5NjbBRhSshzfR",
                    "gpuledger.example/vectors+8fc7e056+Ae1JKMYo0cLG6ukDOJBZlWEpWSc6XGP5NjbBRhSshzf",
                    "gpuledger.example/vectors+8FC7E056+Ae1JKMYo0cLG6ukDOJBZlWEpWSc6XGP5NjbBRhSshzfR",
                    "gpuledger.example/vectors+8fc7e056+Ae1JKMYo0cLG6ukDOJBZlWEpWSc6XGP5NjbBRhSshzfR+x"]:
            with self.assertRaises(gv.UsageError, msg=bad):
                gv.parse_verifier_key(bad)


class Checkpoint(unittest.TestCase):
    def test_checkpoint_verifies(self):
        cp = gv.verify_checkpoint_note(vector("checkpoint.txt"), gv.parse_verifier_key(VERIFIER_KEY))
        self.assertEqual(cp.origin, "gpuledger.example/vectors")
        self.assertEqual(cp.size, SIZE)
        self.assertEqual(cp.size, len(LEAVES))
        self.assertEqual(gv.b64(cp.root), TREE["root"])
        self.assertEqual(cp.root.hex(), TREE["root_hex"])

    def test_checkpoint_tampers(self):
        key = gv.parse_verifier_key(VERIFIER_KEY)
        note = vector("checkpoint.txt").decode()
        cases = {
            "size": note.replace(f"\n{SIZE}\n", f"\n{SIZE + 1}\n"),
            "root": note.replace(TREE["root"][:4], TREE["root"][:3] + ("A" if TREE["root"][3] != "A" else "B")),
            "origin": note.replace(f"gpuledger.example/vectors\n{SIZE}", f"gpuledger.example/vectorz\n{SIZE}"),
            "signature": note[:-10] + ("A" if note[-10] != "A" else "B") + note[-9:],
            "no final newline": note[:-1],
            "extra line": note.replace("\n\n", "\nextension\n\n"),
            "CRLF": note.replace("\n", "\r\n"),
            "no signature": note.split("\n\n")[0] + "\n\n",
        }
        for name, bad in cases.items():
            with self.subTest(name):
                with self.assertRaises(gv.Failure) as cm:
                    gv.verify_checkpoint_note(bad.encode(), key)
                self.assertEqual(cm.exception.reason, "checkpoint_signature")
        # Another key (its name is the origin too): no signature by it.
        other = producer.Key.from_byte(0x09).verifier_key("gpuledger.example/vectors")
        with self.assertRaises(gv.Failure):
            gv.verify_checkpoint_note(note.encode(), gv.parse_verifier_key(other))

    def test_unknown_extra_signatures_are_ignored(self):
        key = gv.parse_verifier_key(VERIFIER_KEY)
        note = vector("checkpoint.txt").decode()
        other = producer.Key.from_byte(0x09)
        body = note.split("\n\n")[0] + "\n"
        extra = "\u2014 witness.example " + base64.b64encode(other.note_key_id("witness.example")
                                                              + other.sign(body.encode())).decode() + "\n"
        cp = gv.verify_checkpoint_note((note + extra).encode(), key)
        self.assertEqual(cp.size, SIZE)


class Messages(unittest.TestCase):
    def test_worked_example_bytes(self):
        for kind in ("gpu_usage", "energy", "spot_price"):
            with self.subTest(kind):
                env_bytes = vector(f"{kind}.envelope.json")
                env = gv.parse_json(env_bytes)
                self.assertEqual(env["v"], 3)
                self.assertEqual(gv.jcs(env), env_bytes)
                self.assertEqual(gv.jcs(env["body"]), vector(f"{kind}.body.json"))
                msg = gv.signed_message(env, ORIGIN)
                self.assertEqual(msg, vector(f"{kind}.message.bin"))
                self.assertEqual(msg.hex(), vector_line(f"{kind}.message.hex"))
                # "gpuledger/v3/" || kind || LF || origin || LF || JCS(envelope without sig): two LFs
                self.assertTrue(msg.startswith(f"gpuledger/v3/{kind}\n{ORIGIN}\n{{".encode()), msg[:80])
                self.assertEqual(msg.count(b"\n"), 2)
                self.assertTrue(msg.endswith(b"}"))
                self.assertEqual(env["sig"], vector_line(f"{kind}.sig.b64"))
                signer = "market" if kind == "spot_price" else "node"
                pub = gv.b64decode_canonical(KEYS[signer]["public_key"], 32)
                sig = gv.b64decode_canonical(env["sig"], 64)
                self.assertTrue(gv.verify_strict(pub, msg, sig))
                # The tag binds the kind: the same bytes under another tag do not verify.
                other = msg.replace(b"gpuledger/v3/" + kind.encode(), b"gpuledger/v3/energy" if kind != "energy"
                                    else b"gpuledger/v3/gpu_usage", 1)
                self.assertFalse(gv.verify_strict(pub, other, sig))
                # The origin binds the log: the same envelope for another log does not verify.
                self.assertFalse(gv.verify_strict(pub, gv.signed_message(env, "gpuledger.example/staging"), sig))
        msg = vector("gpu_usage.message.bin")
        unsigned = {k: v for k, v in gv.parse_json(vector("gpu_usage.envelope.json")).items() if k != "sig"}
        self.assertEqual(len(msg), len(b"gpuledger/v3/gpu_usage\n") + len(ORIGIN) + 1 + len(gv.jcs(unsigned)))

    def test_leaves_and_hashes(self):
        hashes = [gv.b64decode_canonical(h, 32) for h in TREE["leaf_hashes"]]
        self.assertEqual(len(hashes), len(LEAVES))
        prev = bytes(32)
        for i, leaf in enumerate(LEAVES):
            with self.subTest(index=i):
                obj = gv.parse_json(leaf)
                self.assertEqual(gv.jcs(obj), leaf)
                self.assertEqual(obj["v"], 3)
                self.assertEqual(obj["index"], i)
                self.assertEqual(gv.b64decode_canonical(obj["prev"], 32), prev)
                self.assertEqual(gv.leaf_hash(leaf), hashes[i])
                # Every envelope passes sections 4 and 5.
                gv.check_envelope(obj["envelope"], ORIGIN)
                prev = gv.leaf_hash(leaf)
        for kind in ("gpu_usage", "energy", "spot_price"):
            with self.subTest(kind):
                leaf = vector(f"{kind}.leaf.json")
                self.assertIn(leaf, LEAVES)
                i = LEAVES.index(leaf)
                self.assertEqual(gv.leaf_hash(leaf).hex(), vector_line(f"{kind}.leaf_hash.hex"))
                self.assertEqual(gv.jcs(gv.parse_json(leaf)["envelope"]), vector(f"{kind}.envelope.json"))
                self.assertEqual(gv.parse_json(leaf)["prev"], TREE["leaf_hashes"][i - 1] if i else gv.b64(bytes(32)))

    def test_small_order_signature_makes_the_entry_invalid(self):
        env = gv.parse_json(vector("gpu_usage.envelope.json"))
        pub = gv.b64decode_canonical(KEYS["node"]["public_key"], 32)
        sig = gv.b64decode_canonical(vector_line("gpu_usage.small_order_r.sig.b64"), 64)
        self.assertFalse(gv.verify_strict(pub, gv.signed_message(env, ORIGIN), sig))


class Tree(unittest.TestCase):
    def test_root(self):
        hashes = [gv.b64decode_canonical(h, 32) for h in TREE["leaf_hashes"]]
        self.assertEqual(gv.b64(gv.merkle_root(hashes)), TREE["root"])
        self.assertEqual(TREE["size"], len(LEAVES))

    def test_inclusion_proofs(self):
        for case in TREE["inclusion"]:
            with self.subTest(leaf=case["leaf_index"], size=case["tree_size"]):
                proof = [gv.b64decode_canonical(h, 32) for h in case["proof"]]
                lh = gv.b64decode_canonical(case["leaf_hash"], 32)
                root = gv.b64decode_canonical(case["root"], 32)
                self.assertTrue(gv.verify_inclusion(case["leaf_index"], case["tree_size"], lh, proof, root))
                self.assertFalse(gv.verify_inclusion(case["leaf_index"] + 1, case["tree_size"], lh, proof, root))
                for j in range(len(proof)):
                    bad = list(proof)
                    bad[j] = bad[j][:5] + bytes([bad[j][5] ^ 0x40]) + bad[j][6:]
                    self.assertFalse(gv.verify_inclusion(case["leaf_index"], case["tree_size"], lh, bad, root))

    def test_worked_example_proof_shape(self):
        # Each inclusion proof is RFC 6962's PATH: the roots of the sibling subtrees, nearest the
        # leaf first (for version 1's entry 2 of 7: [leaf hash 3, MTH(0-1), MTH(4-6)]).
        hashes = [gv.b64decode_canonical(h, 32) for h in TREE["leaf_hashes"]]

        def path(m, lo, hi):
            if hi - lo == 1:
                return []
            k = 1
            while k * 2 < hi - lo:
                k *= 2
            if m < lo + k:
                return path(m, lo, lo + k) + [gv.merkle_root(hashes[lo + k:hi])]
            return path(m, lo + k, hi) + [gv.merkle_root(hashes[lo:lo + k])]

        self.assertTrue(TREE["inclusion"])
        for case in TREE["inclusion"]:
            with self.subTest(leaf=case["leaf_index"], size=case["tree_size"]):
                self.assertEqual(case["proof"], [gv.b64(h) for h in path(case["leaf_index"], 0, case["tree_size"])])

    def test_consistency_proofs(self):
        for case in TREE["consistency"]:
            with self.subTest(old=case["old_size"], new=case["new_size"]):
                proof = [gv.b64decode_canonical(h, 32) for h in case["proof"]]
                old = gv.b64decode_canonical(case["old_root"], 32)
                new = gv.b64decode_canonical(case["new_root"], 32)
                self.assertTrue(gv.verify_consistency(case["old_size"], case["new_size"], old, new, proof))
                if proof:
                    bad = proof[:-1] + [proof[-1][:-1] + bytes([proof[-1][-1] ^ 1])]
                    self.assertFalse(gv.verify_consistency(case["old_size"], case["new_size"], old, new, bad))
                    self.assertFalse(gv.verify_consistency(case["old_size"], case["new_size"], new, new, proof))

    def test_producer_agrees_with_the_vectors(self):
        log = log_from_vectors()
        self.assertEqual(gv.b64(log.root()), TREE["root"])
        for case in TREE["inclusion"]:
            self.assertEqual([gv.b64(h) for h in log.inclusion(case["leaf_index"], case["tree_size"])], case["proof"])
        for case in TREE["consistency"]:
            self.assertEqual([gv.b64(h) for h in log.consistency(case["old_size"], case["new_size"])], case["proof"])
        # The producer's note for the log's size is byte for byte the committed checkpoint (Ed25519 is
        # deterministic).
        self.assertEqual(log.checkpoint(SIZE).encode(), vector("checkpoint.txt"))


class VectorBundles(VerifierTestCase):
    """The vector log as a bundle and a certificate over it, under the Rust-signed checkpoint."""

    def setUp(self):
        super().setUp()
        self.log = log_from_vectors()
        self.note = vector("checkpoint.txt").decode()
        self.context = [e.index for e in self.log.entries if e.kind not in RECORD_KINDS]
        self.records = [e.index for e in self.log.entries if e.kind in RECORD_KINDS]

    def test_whole_log_as_a_bundle(self):
        # Context: every entry but the records (a superset of section 8's); the records.
        bundle = producer.make_bundle(self.log, SIZE, self.context, self.records, {"invoice": "INV-000001"},
                                      checkpoint=self.note)
        r = self.run_bundle(bundle, VERIFIER_KEY)
        self.assertPass(r)
        kinds = {}
        for e in self.log.entries:
            kinds[e.kind] = kinds.get(e.kind, 0) + 1
        self.assertEqual(r.summary["entries_by_kind"], kinds)

    def test_spot_price_without_its_key_registration(self):
        market_key = KEYS["market"]["key_id"]
        reg = [e.index for e in self.log.entries if e.kind == "signer_key_registered"
               and e.body["key_id"] == market_key][0]
        spot = [e.index for e in self.log.entries if e.kind == "spot_price"][0]
        context = [i for i in self.context if i != reg]
        bundle = producer.make_bundle(self.log, SIZE, context, self.records, {"invoice": "INV-000001"},
                                      checkpoint=self.note)
        self.assertFail(self.run_bundle(bundle, VERIFIER_KEY), "unknown_key",
                        f"entry {spot} (bundle line {2 + context.index(spot)})")

    def test_certificate_over_the_vectors(self):
        period = ("2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z")
        records = producer.covered(self.log, SIZE, "tenant-acme", *period, {})
        self.assertEqual([self.log.entries[i].kind for i in records], ["gpu_usage", "energy"])
        context = producer.context_for(self.log, SIZE, records, "tenant-acme")
        cert = producer.make_certificate(self.log, SIZE, "tenant-acme", *period, records=records,
                                         checkpoint=self.note, issued_at="2026-11-30T12:10:00Z")
        self.assertEqual(cert["gpu"], [{"region": "cn-nmg-1", "gpu_model": "H100-SXM5-80GB", "gpu_seconds": "2400",
                                        "records": 1}])
        self.assertEqual(cert["totals"]["kwh"], "3.125")
        bundle = producer.make_bundle(self.log, SIZE, context, records, {"certificate": cert["id"]},
                                      checkpoint=self.note)
        self.assertPass(self.run_certificate(cert, bundle, VERIFIER_KEY))
        # Another tenant's record (tenant-beta's gpu_usage) is not tenant-acme's.
        other = [i for i in self.records if self.log.entries[i].body.get("tenant") != "tenant-acme"][0]
        recs2 = sorted(records + [other])
        bundle2 = producer.make_bundle(self.log, SIZE, context, recs2, {"certificate": cert["id"]},
                                       checkpoint=self.note)
        self.assertFail(self.run_certificate(cert, bundle2, VERIFIER_KEY), "wrong_tenant",
                        f"entry {other} (bundle line {2 + len(context) + recs2.index(other)})")
        # A lease scope: energy is not attributed to leases.
        cert3 = producer.make_certificate(self.log, SIZE, "tenant-acme", *period, scope={"lease": "lease-0042"},
                                          checkpoint=self.note)
        self.assertEqual(cert3["entries"]["count"], 1)
        self.assertPass(self.run_certificate(cert3, producer.make_bundle(
            self.log, SIZE, context, records[:1], {"certificate": cert3["id"]}, checkpoint=self.note), VERIFIER_KEY))
        self.assertFail(self.run_certificate(cert3, producer.make_bundle(
            self.log, SIZE, context, records, {"certificate": cert3["id"]}, checkpoint=self.note), VERIFIER_KEY),
            "outside_scope")


if __name__ == "__main__":
    unittest.main()
