"""The command line: output forms, exit statuses, the four commands."""

import json
import os
import subprocess
import sys

from support import ENTRY_POINT, VECTORS, VerifierTestCase, gv, producer, vector
from test_vectors import TREE, VERIFIER_KEY, log_from_vectors


class Cli(VerifierTestCase):
    def cli(self, *args):
        p = subprocess.run([sys.executable, ENTRY_POINT, *args], capture_output=True, text=True, timeout=120)
        return p.returncode, p.stdout, p.stderr

    def scenario_files(self):
        sc = producer.Scenario()
        cert = self.write("cli/certificate.json", producer.jcs(sc.certificate))
        bundle = self.write("cli/bundle.ndjson", producer.bundle_bytes(sc.bundle))
        key = self.write("cli/verifier_key.txt", sc.verifier_key() + "\n")
        return sc, cert, bundle, key

    def test_certificate_pass_and_json(self):
        sc, cert, bundle, key = self.scenario_files()
        rc, out, err = self.cli("certificate", "--certificate", cert, "--bundle", bundle, "--log-key", key)
        self.assertEqual(rc, 0, out + err)
        self.assertTrue(out.startswith("PASS: certificate CERT-000001"), out)
        self.assertEqual(out.count("\n"), 1)
        rc, out, err = self.cli("certificate", "--certificate", cert, "--bundle", bundle,
                                "--log-key", sc.verifier_key(), "--json")
        self.assertEqual(rc, 0, out + err)
        obj = json.loads(out)
        self.assertEqual(set(obj), {"result", "reason", "item", "message", "summary"})
        self.assertEqual(obj["result"], "PASS")
        self.assertIsNone(obj["reason"])
        self.assertIsNone(obj["item"])
        self.assertEqual(obj["summary"]["records"], 6)
        self.assertEqual(obj["summary"]["gpu_seconds"], "6007.5")

    def test_certificate_fail(self):
        sc, cert, bundle, key = self.scenario_files()
        bad = dict(sc.certificate, totals=dict(sc.certificate["totals"], kwh="5"))
        bad_path = self.write("cli/bad.json", json.dumps(bad))
        rc, out, err = self.cli("certificate", "--certificate", bad_path, "--bundle", bundle, "--log-key", key)
        self.assertEqual(rc, 1)
        self.assertEqual(out, "FAIL: certificate_signature: certificate: the certificate's sig does not verify with "
                              "the log key over section 13.4's message\n")
        bad_path = self.write("cli/bad2.json", json.dumps(producer.sign_certificate(bad, sc.log_key)))
        rc, out, err = self.cli("certificate", "--certificate", bad_path, "--bundle", bundle, "--log-key", key,
                                "--json")
        self.assertEqual(rc, 1)
        obj = json.loads(out)
        self.assertEqual((obj["result"], obj["reason"], obj["item"]), ("FAIL", "claim_mismatch", "totals.kwh"))

    def test_usage_errors_exit_2(self):
        sc, cert, bundle, key = self.scenario_files()
        cases = [
            ("certificate", "--certificate", cert, "--bundle", bundle),  # no key
            ("certificate", "--certificate", cert, "--bundle", bundle, "--log-key", "not-a-key"),
            ("certificate", "--certificate", os.path.join(self.tmp, "missing.json"), "--bundle", bundle,
             "--log-key", key),
            ("certificate", "--certificate", cert, "--bundle", os.path.join(self.tmp, "missing.ndjson"),
             "--log-key", key),
            ("frobnicate",),
            (),
        ]
        for args in cases:
            with self.subTest(args=args):
                rc, out, err = self.cli(*args)
                self.assertEqual(rc, 2, out + err)
                self.assertEqual(out, "")

    def test_bundle_from_stdin(self):
        sc, cert, bundle, key = self.scenario_files()
        with open(bundle, "rb") as f:
            p = subprocess.run([sys.executable, ENTRY_POINT, "certificate", "--certificate", cert, "--bundle", "-",
                                "--log-key", key], stdin=f, capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertTrue(p.stdout.startswith("PASS: "))

    def test_bundle_command(self):
        sc, cert, bundle, key = self.scenario_files()
        rc, out, _ = self.cli("bundle", "--bundle", bundle, "--log-key", key)
        self.assertEqual(rc, 0, out)
        self.assertTrue(out.startswith("PASS: bundle for certificate CERT-000001: 16 entries"), out)
        lines = producer.bundle_bytes(sc.bundle).split(b"\n")
        cut = self.write("cli/cut.ndjson", b"\n".join(lines[:-2]) + b"\n")
        rc, out, _ = self.cli("bundle", "--bundle", cut, "--log-key", key, "--json")
        self.assertEqual(rc, 1)
        self.assertEqual(json.loads(out)["reason"], "truncated")

    def test_admission_reason_on_the_command_line(self):
        # Version 2: an admission rule's own reason, in the line and in --json.
        for variant, reason in (("too_old", "too_old"), ("node_not_allowed", "node_not_allowed")):
            with self.subTest(variant):
                sc = producer.Scenario(variant)
                bundle = self.write(f"cli/{variant}.ndjson", producer.bundle_bytes(sc.bundle))
                rc, out, _ = self.cli("bundle", "--bundle", bundle, "--log-key", sc.verifier_key())
                self.assertEqual(rc, 1, out)
                self.assertTrue(out.startswith(f"FAIL: {reason}: entry 20 (bundle line 17): "), out)
                rc, out, _ = self.cli("bundle", "--bundle", bundle, "--log-key", sc.verifier_key(), "--json")
                self.assertEqual(rc, 1, out)
                self.assertEqual(json.loads(out)["reason"], reason)

    def test_origin_comes_from_the_key(self):
        # The same log under a verifier key of another name: the checkpoint's origin is not the
        # key's name, so nothing verifies (the origin is never taken from the bundle).
        sc, cert, bundle, key = self.scenario_files()
        other = sc.log_key.verifier_key("gpuledger.test/staging")
        rc, out, _ = self.cli("bundle", "--bundle", bundle, "--log-key", other)
        self.assertEqual(rc, 1, out)
        self.assertTrue(out.startswith("FAIL: checkpoint_signature: "), out)

    def test_checkpoint_command(self):
        path = os.path.join(VECTORS, "checkpoint.txt")
        rc, out, _ = self.cli("checkpoint", "--checkpoint", path, "--log-key", VERIFIER_KEY)
        self.assertEqual(rc, 0, out)
        self.assertIn(f"size {TREE['size']}", out)
        other = producer.Key.from_byte(0x44).verifier_key("gpuledger.example/vectors")
        rc, out, _ = self.cli("checkpoint", "--checkpoint", path, "--log-key", other)
        self.assertEqual(rc, 1)
        self.assertTrue(out.startswith("FAIL: checkpoint_signature: checkpoint: "), out)

    def test_consistency_command(self):
        # Old checkpoints signed with the vectors' log key by the producer; the new one is the
        # committed (Rust-signed) checkpoint.txt when the proof ends at the log's size, else the
        # producer's note of that size; proofs from tree.json.
        log = log_from_vectors()
        for case in TREE["consistency"]:
            with self.subTest(old=case["old_size"], new=case["new_size"]):
                m, n = case["old_size"], case["new_size"]
                if n == TREE["size"]:
                    new = os.path.join(VECTORS, "checkpoint.txt")
                else:
                    new = self.write(f"cons/new{m}-{n}.txt", log.checkpoint(n))
                old = self.write(f"cons/old{m}-{n}.txt", log.checkpoint(m))
                proof = self.write(f"cons/proof{m}-{n}.json", case["proof"])
                rc, out, _ = self.cli("consistency", "--old", old, "--new", new, "--proof", proof,
                                      "--log-key", VERIFIER_KEY)
                self.assertEqual(rc, 0, out)
                proof_obj = self.write(f"cons/proofobj{m}-{n}.json", {"hashes": case["proof"]})
                rc, out, _ = self.cli("consistency", "--old", old, "--new", new, "--proof", proof_obj,
                                      "--log-key", VERIFIER_KEY, "--json")
                self.assertEqual(rc, 0, out)
                self.assertEqual(json.loads(out)["summary"]["new_size"], n)
                if case["proof"]:
                    bad = list(case["proof"])
                    bad[0] = gv.b64(bytes(32))
                    bad_path = self.write(f"cons/bad{m}-{n}.json", bad)
                    rc, out, _ = self.cli("consistency", "--old", old, "--new", new, "--proof", bad_path,
                                          "--log-key", VERIFIER_KEY)
                    self.assertEqual(rc, 1, out)
                    self.assertTrue(out.startswith("FAIL: consistency_proof: proof: "), out)
        # And the committed checkpoint against an old size, with the producer's proof.
        old = self.write("cons/old3.txt", log.checkpoint(3))
        proof = self.write("cons/proof3.json", [gv.b64(h) for h in log.consistency(3, TREE["size"])])
        rc, out, _ = self.cli("consistency", "--old", old, "--new", os.path.join(VECTORS, "checkpoint.txt"),
                              "--proof", proof, "--log-key", VERIFIER_KEY)
        self.assertEqual(rc, 0, out)

    def test_consistency_command_refusals(self):
        sc = producer.Scenario()
        old = self.write("c/old.txt", sc.log.checkpoint(9))
        new = self.write("c/new.txt", sc.log.checkpoint(sc.size))
        proof = self.write("c/proof.json", [gv.b64(h) for h in sc.log.consistency(9, sc.size)])
        key = sc.verifier_key()
        rc, out, _ = self.cli("consistency", "--old", old, "--new", new, "--proof", proof, "--log-key", key)
        self.assertEqual(rc, 0, out)
        # swapped checkpoints
        rc, out, _ = self.cli("consistency", "--old", new, "--new", old, "--proof", proof, "--log-key", key)
        self.assertEqual(rc, 1, out)
        # a rewritten history: same size 9, other entries
        other = producer.Scenario()
        other.log.entries[5] = other.log.entries[6]  # not a real log any more, but a signed root of size 9
        forged = self.write("c/forged.txt", other.log.checkpoint(9))
        rc, out, _ = self.cli("consistency", "--old", forged, "--new", new, "--proof", proof, "--log-key", key)
        self.assertEqual(rc, 1, out)
        self.assertIn("consistency_proof", out)
        # an old checkpoint signed by another key
        bad = self.write("c/bad.txt", sc.log.checkpoint(9, key=producer.Key.from_byte(0x55)))
        rc, out, _ = self.cli("consistency", "--old", bad, "--new", new, "--proof", proof, "--log-key", key)
        self.assertEqual(rc, 1, out)
        self.assertTrue(out.startswith("FAIL: checkpoint_signature: old checkpoint: "), out)
        # a proof file that is not a proof
        junk = self.write("c/junk.json", {"proof": []})
        rc, out, _ = self.cli("consistency", "--old", old, "--new", new, "--proof", junk, "--log-key", key)
        self.assertEqual(rc, 1, out)
        self.assertTrue(out.startswith("FAIL: malformed: proof: "), out)
