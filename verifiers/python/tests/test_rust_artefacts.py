"""The Python verifier on artefacts produced by the Rust service.

Where: $GPULEDGER_ARTEFACTS_DIR if set, else tests/fixtures/certificate/ if it exists; otherwise
the tests are skipped LOUDLY (`*** SKIPPED: no Rust artefacts ***`), unless
GPULEDGER_REQUIRE_ARTEFACTS=1, which makes a missing directory a failure (for CI).

Files in that directory:
  certificate.json        the certificate (section 13)                       required
  bundle.ndjson           its evidence bundle (section 14)                   required
  verifier_key.txt        the log's signed-note verifier key (section 9)     required
  log_key.seed.b64        the test log key's 32-byte seed, base64 (or the    optional: re-signing tampers
                          private-key text `gpuledger-ed25519-secret-v1:...`)
  older_checkpoint.txt    a checkpoint of the same log at a smaller size     optional
  consistency/            old checkpoint (old.txt or old_checkpoint.txt),    optional
                          new checkpoint (new.txt or new_checkpoint.txt),
                          proof.json (array of base64, or {"hashes": [...]})
  bundle.v3.ndjson        the certificate's bundle in version 3 (section 14) \
  invoice.json            an invoice of the same log (section 12)            | checked by RustBundleFormats;
  invoice_bundle.ndjson   its bundle, version 2                              | required with
  invoice_bundle.v3.ndjson                     version 3                     / GPULEDGER_REQUIRE_ARTEFACTS=1

The same checks also run on artefacts the test producer writes in that layout, so that this
harness itself is tested when no Rust artefacts are present.
"""

import base64
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from decimal import Decimal

from support import (ENTRY_POINT, REPO, VerifierTestCase, entry_lines, get_path, gv, leaf_of, leaf_paths,
                     mutate_string, producer, read, set_path, with_leaf)

SKIP_LINE = "*** SKIPPED: no Rust artefacts ***"
MAX_LINES_FOR_FIELD_TAMPERS = 40


def artefacts_dir():
    env = os.environ.get("GPULEDGER_ARTEFACTS_DIR")
    if env:
        return env
    default = os.path.join(REPO, "tests", "fixtures", "certificate")
    return default if os.path.isdir(default) else None


def load_seed(path):
    text = read(path).decode().strip()
    if text.startswith("gpuledger-ed25519-secret-v1:"):
        text = text[len("gpuledger-ed25519-secret-v1:"):].strip()
    seed = base64.b64decode(text, validate=True)
    if len(seed) != 32:
        raise ValueError(f"{path}: seed of {len(seed)} bytes, expected 32")
    return seed


def bump(value):
    if isinstance(value, int):
        return value + 1
    return producer.dec(Decimal(value) + Decimal("0.5"))


class ArtefactChecks:
    """The checks; `self.dir` is the artefacts directory."""

    dir = None

    def setUp(self):
        super().setUp()
        d = self.dir
        self.cert_bytes = read(os.path.join(d, "certificate.json"))
        self.cert = json.loads(self.cert_bytes)
        self.bundle_bytes = read(os.path.join(d, "bundle.ndjson"))
        self.bundle = [json.loads(l) for l in self.bundle_bytes.split(b"\n") if l]
        self.key_text = read(os.path.join(d, "verifier_key.txt")).decode().strip()
        self.key = gv.parse_verifier_key(self.key_text)
        seed_path = os.path.join(d, "log_key.seed.b64")
        self.log_key = producer.Key(load_seed(seed_path)) if os.path.exists(seed_path) else None
        self.records = [p for p in entry_lines(self.bundle)
                        if leaf_of(self.bundle[p])["envelope"]["kind"] in ("gpu_usage", "energy")]
        self.context = [p for p in entry_lines(self.bundle) if p not in self.records]

    def verify(self, cert=None, bundle=None, fix_count=False):
        return self.run_certificate(cert if cert is not None else self.cert,
                                    bundle if bundle is not None else self.bundle_bytes, self.key,
                                    fix_count=fix_count)

    def need_seed(self):
        if self.log_key is None:
            self.skipTest("no log_key.seed.b64: re-signing tampers skipped")

    def resign(self, cert):
        return producer.sign_certificate(cert, self.log_key)

    # --- genuine ---------------------------------------------------------------------------------

    def test_genuine_certificate_passes(self):
        r = gv.verify_certificate(os.path.join(self.dir, "certificate.json"), os.path.join(self.dir, "bundle.ndjson"),
                                  gv.load_verifier_key(os.path.join(self.dir, "verifier_key.txt")))
        self.assertPass(r)
        print(f"\n    [{self.dir}] {r.line()}", file=sys.stderr)

    def test_genuine_bundle_and_checkpoint_pass(self):
        self.assertPass(gv.verify_bundle(os.path.join(self.dir, "bundle.ndjson"), self.key))
        cp = gv.verify_checkpoint_note(self.cert["checkpoint"], self.key)
        self.assertEqual(cp.origin, self.cert["log_origin"])

    def test_seed_matches_the_verifier_key(self):
        self.need_seed()
        self.assertEqual(self.log_key.verifier_key(self.key.name), self.key_text)

    # --- claims ------------------------------------------------------------------------------------

    def claim_paths(self):
        paths = [("totals", m) for m in self.cert["totals"]]
        for name, members in (("gpu", ("gpu_seconds", "records")),
                              ("energy", ("kwh", "records", "pue", "carbon_g_per_kwh", "kwh_with_pue", "carbon_kg"))):
            for i, line in enumerate(self.cert[name]):
                paths += [(name, i, m) for m in members if m in line]
        return paths

    def test_change_any_claim_unsigned(self):
        for path in self.claim_paths():
            with self.subTest(path=path):
                cert = set_path(self.cert, path, bump(get_path(self.cert, path)))
                self.assertFail(self.verify(cert=cert), "certificate_signature")

    def test_change_any_claim_resigned(self):
        self.need_seed()
        self.assertPass(self.verify(cert=self.resign(self.cert)))
        for path in self.claim_paths():
            with self.subTest(path=path):
                cert = self.resign(set_path(self.cert, path, bump(get_path(self.cert, path))))
                item = ".".join(path) if path[0] == "totals" else f"{path[0]}[{path[1]}].{path[2]}"
                self.assertFail(self.verify(cert=cert), "claim_mismatch", item)
        cert = self.resign(set_path(self.cert, ("entries", "count"), self.cert["entries"]["count"] + 1))
        self.assertFail(self.verify(cert=cert), "entries_mismatch")

    def test_certificate_signed_by_another_key(self):
        cert = producer.sign_certificate(self.cert, producer.Key.from_byte(0x5A))
        self.assertFail(self.verify(cert=cert), "certificate_signature")

    # --- records -----------------------------------------------------------------------------------

    def test_change_any_field_of_any_entry(self):
        for pos in entry_lines(self.bundle)[:MAX_LINES_FOR_FIELD_TAMPERS]:
            line = self.bundle[pos]
            leaf = leaf_of(line)
            for path in leaf_paths(leaf):
                value = get_path(leaf, path)
                new = value + 1 if isinstance(value, int) else mutate_string(value)
                bundle = copy.deepcopy(self.bundle)
                bundle[pos] = with_leaf(line, set_path(leaf, path, new))
                with self.subTest(index=line["index"], path=path):
                    self.assertFail(self.verify(bundle=bundle),
                                    "leaf_invalid" if path == ("index",) else "inclusion_proof")

    def test_flip_a_byte_of_an_entry_signature(self):
        for pos in entry_lines(self.bundle)[:MAX_LINES_FOR_FIELD_TAMPERS]:
            line = self.bundle[pos]
            leaf = leaf_of(line)
            sig = bytearray(base64.b64decode(leaf["envelope"]["sig"]))
            sig[7] ^= 0x10
            bundle = copy.deepcopy(self.bundle)
            bundle[pos] = with_leaf(line, set_path(leaf, ("envelope", "sig"), gv.b64(bytes(sig))))
            with self.subTest(index=line["index"]):
                self.assertFail(self.verify(bundle=bundle), "inclusion_proof")

    def test_flip_a_byte_of_a_proof_hash(self):
        n = 0
        for pos in entry_lines(self.bundle)[:MAX_LINES_FOR_FIELD_TAMPERS]:
            line = self.bundle[pos]
            for j, h in enumerate(line["proof"]):
                raw = bytearray(base64.b64decode(h))
                raw[3] ^= 0x01
                bundle = copy.deepcopy(self.bundle)
                bundle[pos] = dict(line, proof=line["proof"][:j] + [gv.b64(bytes(raw))] + line["proof"][j + 1:])
                with self.subTest(index=line["index"], hash=j):
                    self.assertFail(self.verify(bundle=bundle), "inclusion_proof")
                n += 1
        if n == 0:
            self.skipTest("no proof hashes (a tree of size 1)")

    def test_drop_a_record(self):
        if not self.records:
            self.skipTest("the certificate covers no records")
        for pos in (self.records[0], self.records[-1]):
            bundle = [l for i, l in enumerate(self.bundle) if i != pos]
            self.assertFail(self.verify(bundle=bundle, fix_count=True), "entries_mismatch")

    def test_truncate(self):
        lines = self.bundle_bytes.split(b"\n")[:-1]
        for k in sorted({0, 1, len(lines) // 2, len(lines) - 1}):
            with self.subTest(lines=k):
                self.assertFail(self.verify(bundle=b"".join(l + b"\n" for l in lines[:k])), "truncated")
        self.assertFail(self.verify(bundle=self.bundle_bytes[: len(self.bundle_bytes) // 2]), "truncated")
        self.assertFail(self.verify(bundle=self.bundle_bytes[:-1]), "truncated")

    def test_reorder(self):
        pairs = []
        if len(self.records) >= 2:
            pairs.append((self.records[0], self.records[1]))
        if len(self.context) >= 2:
            pairs.append((self.context[0], self.context[1]))
        if self.records and self.context:
            pairs.append((self.context[-1], self.records[0]))
        if not pairs:
            self.skipTest("fewer than two entries")
        for a, b in pairs:
            with self.subTest(swap=(a, b)):
                bundle = copy.deepcopy(self.bundle)
                bundle[a], bundle[b] = bundle[b], bundle[a]
                self.assertFail(self.verify(bundle=bundle), "order")

    # --- checkpoints -----------------------------------------------------------------------------

    def test_checkpoint_signed_by_another_key(self):
        body = self.cert["checkpoint"].split("\n\n")[0] + "\n"
        other = producer.Key.from_byte(0x5B)
        note = body + "\n" + "\u2014 " + self.key.name + " " + gv.b64(other.note_key_id(self.key.name)
                                                                      + other.sign(body.encode())) + "\n"
        bundle = copy.deepcopy(self.bundle)
        bundle[0] = dict(bundle[0], checkpoint=note)
        self.assertFail(self.verify(cert=dict(self.cert, checkpoint=note), bundle=bundle), "checkpoint_signature")

    def test_older_checkpoint(self):
        path = os.path.join(self.dir, "older_checkpoint.txt")
        if not os.path.exists(path):
            self.skipTest("no older_checkpoint.txt")
        older = read(path).decode()
        self.assertLess(gv.verify_checkpoint_note(older, self.key).size,
                        gv.verify_checkpoint_note(self.cert["checkpoint"], self.key).size)
        bundle = copy.deepcopy(self.bundle)
        bundle[0] = dict(bundle[0], checkpoint=older)
        if self.log_key is not None:
            cert = self.resign(dict(self.cert, checkpoint=older))
            self.assertFail(self.verify(cert=cert, bundle=bundle), ("not_in_checkpoint", "inclusion_proof"))
        else:
            self.assertFail(self.verify(cert=dict(self.cert, checkpoint=older), bundle=bundle),
                            "certificate_signature")

    def test_consistency_files(self):
        d = os.path.join(self.dir, "consistency")
        if not os.path.isdir(d):
            self.skipTest("no consistency/")

        def pick(*names):
            for n in names:
                if os.path.exists(os.path.join(d, n)):
                    return os.path.join(d, n)
            self.fail(f"consistency/ holds none of {names}")

        old = pick("old.txt", "old_checkpoint.txt")
        new = pick("new.txt", "new_checkpoint.txt")
        proof = pick("proof.json")
        r = gv.verify_consistency_files(old, new, proof, self.key)
        self.assertPass(r)
        hashes = json.loads(read(proof))
        hashes = hashes["hashes"] if isinstance(hashes, dict) else hashes
        if hashes:
            raw = bytearray(base64.b64decode(hashes[0]))
            raw[0] ^= 1
            bad = self.write("bad_proof.json", [gv.b64(bytes(raw))] + hashes[1:])
            self.assertFail(gv.verify_consistency_files(old, new, bad, self.key), "consistency_proof")


class RustArtefacts(ArtefactChecks, VerifierTestCase):
    @classmethod
    def setUpClass(cls):
        d = artefacts_dir()
        required = os.environ.get("GPULEDGER_REQUIRE_ARTEFACTS") == "1"
        missing = d is None or not all(os.path.exists(os.path.join(d, f))
                                       for f in ("certificate.json", "bundle.ndjson", "verifier_key.txt"))
        if missing:
            where = d or "tests/fixtures/certificate/ (and GPULEDGER_ARTEFACTS_DIR unset)"
            if required:
                raise AssertionError(f"GPULEDGER_REQUIRE_ARTEFACTS=1 but no Rust artefacts in {where}")
            print(f"\n{SKIP_LINE} (looked in {where})", file=sys.stderr)
            raise unittest.SkipTest(f"{SKIP_LINE} (looked in {where})")
        cls.dir = d


FORMAT_FILES = ("bundle.v3.ndjson", "invoice.json", "invoice_bundle.ndjson", "invoice_bundle.v3.ndjson")


def v3_tampers(lines):
    """Tampered copies of a version-3 bundle (its lines, without their LFs), each with the reason
    it must be refused with: (name, bytes of the file, reason)."""
    objs = [json.loads(l) for l in lines]
    nodes = next(i for i, o in enumerate(objs) if o["type"] == "nodes")
    entries = [i for i, o in enumerate(objs) if o["type"] == "entry"]
    last = entries[-1]

    def file(ls):
        return b"".join(l + b"\n" for l in ls)

    def replaced(pos, obj):
        out = list(lines)
        out[pos] = gv.jcs(obj)
        return out

    node = copy.deepcopy(objs[nodes])
    raw = bytearray(base64.b64decode(node["hashes"][0]))
    raw[0] ^= 1
    node["hashes"][0] = gv.b64(bytes(raw))
    leaf = copy.deepcopy(objs[last])
    # One second earlier or later, between the receive times of the entries around it (they
    # never decrease): within every rule the entry is checked against, so only the tree notices.
    t = gv.parse_timestamp(leaf["leaf"]["received_at"])
    times = [(o["leaf"]["index"], gv.parse_timestamp(o["leaf"]["received_at"]))
             for o in objs if o.get("type") == "entry"]
    i = leaf["leaf"]["index"]
    before = max((u for j, u in times if j < i), default=t - 1)
    after = min((u for j, u in times if j > i), default=t + 1)
    moved = t - 1 if t - 1 >= before else t + 1
    leaf["leaf"]["received_at"] = gv.format_ts(moved)
    # Where the entries around it were received in the same second, any move breaks the order
    # of receive times, which is checked first.
    moved_reason = "inclusion_proof" if before <= moved <= after else "received_at_decreased"
    end = dict(objs[-1], nodes=objs[-1]["nodes"] + 1)
    swapped = list(lines)
    swapped[last - 1], swapped[last] = swapped[last], swapped[last - 1]
    spaced = list(lines)
    spaced[last] = lines[last].replace(b'{"index"', b'{ "index"', 1)
    return [
        ("a bit of a multi-proof node flipped", file(replaced(nodes, node)), "inclusion_proof"),
        ("a record's received_at changed", file(replaced(last, leaf)), moved_reason),
        ("an entry line not canonical JSON", file(spaced), "malformed"),
        ("the end line counting one node more", file(replaced(len(lines) - 1, end)), "truncated"),
        ("the end line cut off", file(lines[:-1]), "truncated"),
        ("the last two entries swapped", file(swapped), "order"),
    ]


class RustBundleFormats(VerifierTestCase):
    """The service's bundles in both formats (section 14): the certificate's version-3 bundle
    beside its version-2 one, and an invoice's bundle in each, through the command line; and
    tampered copies of each version-3 file refused with their reason and exit status 1."""

    @classmethod
    def setUpClass(cls):
        d = artefacts_dir()
        missing = [f for f in ("certificate.json", "verifier_key.txt") + FORMAT_FILES
                   if d is None or not os.path.exists(os.path.join(d, f))]
        if missing:
            where = d or "tests/fixtures/certificate/ (and GPULEDGER_ARTEFACTS_DIR unset)"
            if os.environ.get("GPULEDGER_REQUIRE_ARTEFACTS") == "1":
                raise AssertionError(f"GPULEDGER_REQUIRE_ARTEFACTS=1 but {where} lacks {missing}")
            print(f"\n{SKIP_LINE} (no {missing} in {where})", file=sys.stderr)
            raise unittest.SkipTest(f"{SKIP_LINE} (no {missing} in {where})")
        cls.dir = d

    def path(self, name):
        return os.path.join(self.dir, name)

    def cli(self, *args):
        p = subprocess.run([sys.executable, ENTRY_POINT, *args, "--log-key", self.path("verifier_key.txt"),
                            "--json"], capture_output=True, text=True, timeout=120)
        return p.returncode, json.loads(p.stdout) if p.stdout else p.stderr

    def header(self, name):
        return json.loads(read(self.path(name)).split(b"\n", 1)[0])

    def test_certificate_passes_with_its_bundle_in_each_format(self):
        summaries = {}
        for name, fmt in (("bundle.ndjson", "gpuledger-bundle/v2"), ("bundle.v3.ndjson", "gpuledger-bundle/v3")):
            with self.subTest(bundle=name):
                self.assertEqual(self.header(name)["format"], fmt)
                code, out = self.cli("certificate", "--certificate", self.path("certificate.json"),
                                     "--bundle", self.path(name))
                self.assertEqual((code, out["result"]), (0, "PASS"), out)
                summaries[name] = out["summary"]
        # The same evidence: the same checkpoint, entries, records and totals.
        self.assertEqual(summaries["bundle.ndjson"], summaries["bundle.v3.ndjson"])
        self.assertLess(len(read(self.path("bundle.v3.ndjson"))), len(read(self.path("bundle.ndjson"))))

    def test_invoice_bundle_passes_in_each_format(self):
        invoice = json.loads(read(self.path("invoice.json")))
        summaries = {}
        for name, fmt in (("invoice_bundle.ndjson", "gpuledger-bundle/v2"),
                          ("invoice_bundle.v3.ndjson", "gpuledger-bundle/v3")):
            with self.subTest(bundle=name):
                self.assertEqual(self.header(name)["format"], fmt)
                code, out = self.cli("bundle", "--bundle", self.path(name))
                self.assertEqual((code, out["result"]), (0, "PASS"), out)
                s = out["summary"]
                self.assertEqual(s["subject"], {"invoice": invoice["number"]})
                self.assertEqual((s["checkpoint_origin"], s["checkpoint_size"], s["checkpoint_root"]),
                                 (invoice["log_origin"], invoice["checkpoint_size"], invoice["checkpoint_root"]))
                # Every record a line rated is in the bundle (with tiers, earlier ones too).
                self.assertLessEqual(sum(l["records"] for l in invoice["lines"]), s["records"])
                summaries[name] = s
        self.assertEqual(summaries["invoice_bundle.ndjson"], summaries["invoice_bundle.v3.ndjson"])

    def test_tampered_v3_files_are_refused(self):
        for name, args in (("bundle.v3.ndjson", ("certificate", "--certificate", self.path("certificate.json"))),
                           ("invoice_bundle.v3.ndjson", ("bundle",))):
            lines = read(self.path(name)).split(b"\n")
            self.assertEqual(lines.pop(), b"", f"{name} ends with LF")
            for what, data, reason in v3_tampers(lines):
                with self.subTest(bundle=name, tamper=what):
                    code, out = self.cli(*args, "--bundle", self.write("tampered.v3.ndjson", data))
                    self.assertEqual((code, out["result"], out["reason"]), (1, "FAIL", reason), out)


class ArtefactHarnessOnProducerOutput(ArtefactChecks, VerifierTestCase):
    """The same checks on the producer's artefacts, written in the Rust artefacts' layout."""

    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.mkdtemp(prefix="gpuledger-artefacts-")
        sc = producer.Scenario()
        files = {
            "certificate.json": json.dumps(sc.certificate, indent=2).encode(),
            "bundle.ndjson": producer.bundle_bytes(sc.bundle),
            "verifier_key.txt": (sc.verifier_key() + "\n").encode(),
            "log_key.seed.b64": (gv.b64(sc.log_key.seed) + "\n").encode(),
            "older_checkpoint.txt": sc.log.checkpoint(9).encode(),
            "consistency/old.txt": sc.log.checkpoint(9).encode(),
            "consistency/new.txt": sc.log.checkpoint(sc.size).encode(),
            "consistency/proof.json": json.dumps([gv.b64(h) for h in sc.log.consistency(9, sc.size)]).encode(),
        }
        for name, data in files.items():
            path = os.path.join(cls._tmp, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
        cls.dir = cls._tmp

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls._tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
