"""Shared helpers for the tests of the Python verifier."""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import sys
import tempfile
import unittest
from typing import Any, Callable, Dict, List, Optional, Union

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
REPO = os.path.abspath(os.path.join(PKG, "..", ".."))
# GPULEDGER_VECTORS_DIR: check another copy of tests/vectors/ (e.g. freshly regenerated ones).
VECTORS = os.environ.get("GPULEDGER_VECTORS_DIR") or os.path.join(REPO, "tests", "vectors")
ENTRY_POINT = os.path.join(PKG, "gpuledger_verify.py")
for p in (PKG, HERE):
    if p not in sys.path:
        sys.path.insert(0, p)

import gpuledger_verify as gv  # noqa: E402
import producer  # noqa: E402

ED25519_CASES = os.path.join(VECTORS, "ed25519", "cases.json")


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def vector(name: str) -> bytes:
    return read(os.path.join(VECTORS, name))


def vector_line(name: str) -> str:
    """`.hex`/`.b64` vector files end with one newline that is not part of the value."""
    text = vector(name).decode()
    assert text.endswith("\n")
    return text[:-1]


def changed(obj: Dict[str, Any], changes: Dict[str, Any]) -> Dict[str, Any]:
    """`obj` with `changes` applied in place and returned: each member set to its value, or
    removed where the value is `...`."""
    for k, v in changes.items():
        if v is ...:
            del obj[k]
        else:
            obj[k] = v
    return obj


def leaf_of(line: Dict[str, Any]) -> Dict[str, Any]:
    return json.loads(base64.b64decode(line["leaf"]))


def with_leaf(line: Dict[str, Any], leaf: Any) -> Dict[str, Any]:
    return dict(line, leaf=base64.b64encode(producer.jcs(leaf)).decode())


def with_leaf_bytes(line: Dict[str, Any], raw: bytes) -> Dict[str, Any]:
    return dict(line, leaf=base64.b64encode(raw).decode())


def entry_lines(bundle: List[Dict[str, Any]]) -> List[int]:
    """Positions (in the bundle list) of the entry lines."""
    return [i for i, l in enumerate(bundle) if l.get("type") == "entry"]


class VerifierTestCase(unittest.TestCase):
    """A temporary directory, and shortcuts to run the verifier on in-memory artefacts."""

    maxDiff = None

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="gpuledger-py-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def write(self, name: str, data: Union[bytes, str, Dict[str, Any], List[Any]]) -> str:
        path = os.path.join(self.tmp, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if isinstance(data, str):
            data = data.encode("utf-8")
        elif isinstance(data, (dict, list)):
            data = json.dumps(data).encode("utf-8")
        with open(path, "wb") as f:
            f.write(data)
        return path

    def run_certificate(self, cert: Union[Dict[str, Any], bytes], bundle: Union[List[Dict[str, Any]], bytes],
                        key: Union[str, "gv.VerifierKey"], fix_count: bool = False) -> "gv.Result":
        cert_path = self.write("certificate.json", cert if isinstance(cert, bytes) else json.dumps(cert))
        bundle_path = self.write("bundle.ndjson", bundle if isinstance(bundle, bytes)
                                 else producer.bundle_bytes(bundle, fix_count=fix_count))
        if isinstance(key, str):
            key = gv.parse_verifier_key(key)
        return gv.verify_certificate(cert_path, bundle_path, key)

    def run_bundle(self, bundle: Union[List[Dict[str, Any]], bytes], key: Union[str, "gv.VerifierKey"],
                   fix_count: bool = False) -> "gv.Result":
        bundle_path = self.write("bundle.ndjson", bundle if isinstance(bundle, bytes)
                                 else producer.bundle_bytes(bundle, fix_count=fix_count))
        if isinstance(key, str):
            key = gv.parse_verifier_key(key)
        return gv.verify_bundle(bundle_path, key)

    def assertPass(self, result: "gv.Result"):
        self.assertTrue(result.ok, f"expected PASS, got {result.line()}")

    def assertFail(self, result: "gv.Result", reason: Union[str, tuple], item: Optional[str] = None):
        reasons = (reason,) if isinstance(reason, str) else reason
        self.assertFalse(result.ok, f"expected FAIL {reasons}, got PASS: {result.message}")
        self.assertIn(result.reason, reasons, result.line())
        if item is not None:
            self.assertEqual(result.item, item, result.line())


def mutate_string(value: str) -> str:
    """Another value of the same shape where possible (the leaf stays canonical JSON)."""
    if not value:
        return "x"
    last = value[-1]
    if last.isdigit():
        repl = "1" if last != "1" else "2"
    elif last == "=":
        return value[:-2] + ("B" if value[-2] != "B" else "C") + "=" if len(value) > 1 else "A"
    elif last.isalpha():
        repl = "a" if last != "a" else "b"
    else:
        repl = "x"
    return value[:-1] + repl


def leaf_paths(obj: Any, prefix: tuple = ()) -> List[tuple]:
    """Every scalar member path of a JSON value, through objects and arrays (for 'change any
    field of any record'; version 2 bodies hold arrays: nodes, regions, tiers)."""
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += leaf_paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += leaf_paths(v, prefix + (i,))
    else:
        out.append(prefix)
    return out


def get_path(obj: Any, path: tuple) -> Any:
    for p in path:
        obj = obj[p]
    return obj


def set_path(obj: Any, path: tuple, value: Any) -> Any:
    obj = copy.deepcopy(obj)
    target = obj
    for p in path[:-1]:
        target = target[p]
    target[path[-1]] = value
    return obj


# --- Ed25519 adversarial material, built with PyNaCl's low-level libsodium bindings -----------
#
# Where the constants come from: ORDER8_Y is the y-coordinate of a point of order 8 on
# edwards25519, in the small-order blocklist of libsodium (src/libsodium/crypto_core/ed25519/
# ref10/ed25519_ref10.c, ge25519_has_small_order: "2707385501144840649318225287225658788936804267575313519463743609750303402022
# (order 8)") and in "Taming the many EdDSAs" (Chalkias et al., 2020), Table 6. Its multiples,
# computed with crypto_core_ed25519_add, are the eight torsion points; their canonical encodings
# are checked against TORSION_ENCODINGS, the same public constants (libsodium's blocklist lists
# the y values; the sign bit gives the other x).

import hashlib as _hashlib  # noqa: E402
import math as _math  # noqa: E402

import nacl.bindings as nb  # noqa: E402

ED_L = 2**252 + 27742317777372353535851937790883648493  # the prime order of the base point
ED_P = 2**255 - 19
ORDER8 = bytes.fromhex("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05")
IDENTITY = (1).to_bytes(32, "little")
TORSION_ENCODINGS = {  # canonical encodings of k * ORDER8, k = 0..7
    0: "0100000000000000000000000000000000000000000000000000000000000000",  # identity, order 1
    1: "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",  # order 8
    2: "0000000000000000000000000000000000000000000000000000000000000000",  # y = 0, order 4
    3: "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",  # order 8
    4: "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",  # y = p - 1, order 2
    5: "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",  # order 8 (sign bit set)
    6: "0000000000000000000000000000000000000000000000000000000000000080",  # y = 0, order 4 (sign bit set)
    7: "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",  # order 8 (sign bit set)
}


def torsion_point(k: int) -> bytes:
    """k * ORDER8, by repeated crypto_core_ed25519_add (libsodium accepts small-order inputs there)."""
    k %= 8
    if k == 0:
        return nb.crypto_core_ed25519_add(ORDER8, torsion_point(7))
    pt = ORDER8
    for _ in range(k - 1):
        pt = nb.crypto_core_ed25519_add(pt, ORDER8)
    return pt


def torsion_order(k: int) -> int:
    return 8 // _math.gcd(k % 8, 8) if k % 8 else 1


def torsion_of_order(n: int) -> bytes:
    return torsion_point({1: 0, 2: 4, 4: 2, 8: 1}[n])


def scalar(n: int) -> bytes:
    """A scalar as 32 little-endian bytes, reduced mod L with crypto_core_ed25519_scalar_reduce."""
    return nb.crypto_core_ed25519_scalar_reduce((n % 2**512).to_bytes(64, "little"))


def scalar_int(s: bytes) -> int:
    return int.from_bytes(s, "little")


def base_mul(s: bytes) -> bytes:
    """[s]B (s not 0 mod L)."""
    return nb.crypto_scalarmult_ed25519_base_noclamp(s)


def challenge(r_enc: bytes, a_enc: bytes, message: bytes) -> bytes:
    """k = SHA-512(R || A || M) mod L (RFC 8032)."""
    return nb.crypto_core_ed25519_scalar_reduce(_hashlib.sha512(r_enc + a_enc + message).digest())


def s_of(r: bytes, k: bytes, a: bytes) -> bytes:
    """S = r + k * a mod L."""
    return nb.crypto_core_ed25519_scalar_add(r, nb.crypto_core_ed25519_scalar_mul(k, a))


def encode_y(y: int, sign: int = 0) -> bytes:
    """The 32-byte encoding with the given y (any value below 2^255, so also y >= p) and sign bit."""
    return (y | (sign << 255)).to_bytes(32, "little")


def is_torsion_encoding(enc: bytes) -> bool:
    return enc.hex() in TORSION_ENCODINGS.values()


def nacl_accepts(pub: bytes, message: bytes, sig: bytes) -> bool:
    import nacl.exceptions
    import nacl.signing
    try:
        nacl.signing.VerifyKey(pub).verify(message, sig)
    except (nacl.exceptions.BadSignatureError, ValueError, TypeError):
        return False
    return True


def openssl_accepts(pub: bytes, message: bytes, sig: bytes) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    try:
        Ed25519PublicKey.from_public_bytes(pub).verify(sig, message)
    except (InvalidSignature, ValueError):
        return False
    return True


def mixed_order_key(a: bytes, torsion_k: int = 1) -> bytes:
    """A = [a]B + T (T = torsion_k * ORDER8): a point of mixed order (not torsion-free)."""
    return nb.crypto_core_ed25519_add(base_mul(a), torsion_point(torsion_k))


NONCANONICAL_ON_CURVE_Y = (3, 4, 5, 6, 9, 10, 14, 15, 16, 18)  # y0 <= 18 on the curve: y0 + p < 2^255


class LogBundleTestCase(VerifierTestCase):
    """A test that builds `self.log` (a producer.Log) and checks it whole as a bundle, or as a
    certificate of one tenant with its bundle; `refused` names the failing entry's line."""

    def bundle(self, context=None, records=None, drop=(), subject=None):
        """Every entry (or `context` and `records` as given), `drop` left out; subject an invoice."""
        log = self.log
        if context is None:
            context = [e.index for e in log.entries if e.kind not in ("gpu_usage", "energy") and e.index not in drop]
        if records is None:
            records = [e.index for e in log.entries if e.kind in ("gpu_usage", "energy") and e.index not in drop]
        lines = producer.make_bundle(log, len(log.entries), context, records, subject or {"invoice": "INV-000009"})
        return self.run_bundle(lines, log.verifier_key()), lines

    def assert_invoice_context_is_the_tenants(self, mine: int, theirs: int, number="INV-000009"):
        """Section 14: an invoice bundle's context for tenant t holds entry `mine` (t's) and not
        `theirs` (another tenant's); a certificate's context holds neither; the invoice's bundle
        passes."""
        size = len(self.log.entries)
        ctx = producer.context_for(self.log, size, [], "t", invoice=True)
        self.assertIn(mine, ctx)
        self.assertNotIn(theirs, ctx)
        self.assertNotIn(mine, producer.context_for(self.log, size, [], "t"))
        lines = producer.make_bundle(self.log, size, ctx, [], {"invoice": number})
        self.assertPass(self.run_bundle(lines, self.log.verifier_key()))

    def cli_fails_on_whole_log(self, number="INV-000009") -> str:
        """Runs `gpuledger_verify.py bundle` on every entry of `self.log` as an invoice
        `number`'s bundle; asserts it exits 1 and returns what it printed."""
        import io
        from contextlib import redirect_stdout
        size = len(self.log.entries)
        lines = producer.make_bundle(self.log, size, list(range(size)), [], {"invoice": number})
        path = self.write("bundle.ndjson", producer.bundle_bytes(lines))
        out = io.StringIO()
        with redirect_stdout(out):
            status = gv.main(["bundle", "--bundle", path, "--log-key", self.log.verifier_key()])
        self.assertEqual(status, 1, out.getvalue())
        return out.getvalue()

    def cert(self, tenant="t"):
        log = self.log
        size = len(log.entries)
        records = producer.covered(log, size, tenant, *producer.PERIOD, {})
        context = producer.context_for(log, size, records, tenant)
        cert = producer.make_certificate(log, size, tenant, *producer.PERIOD, records=records)
        lines = producer.make_bundle(log, size, context, records, {"certificate": cert["id"]})
        return self.run_certificate(cert, lines, log.verifier_key()), lines

    def refused(self, result_and_lines, reason, index, field=None, says=None):
        """The result fails with `reason` at entry `index` (by its bundle line), its message
        starting with `field:` and holding `says` when given."""
        r, lines = result_and_lines
        pos = [i for i, l in enumerate(lines) if l.get("type") == "entry" and l["index"] == index]
        self.assertEqual(len(pos), 1, f"entry {index} is not in the bundle")
        self.assertFail(r, reason, f"entry {index} (bundle line {pos[0] + 1})")
        if field is not None:
            self.assertTrue(r.message.startswith(field + ":"), r.message)
        if says is not None:
            self.assertIn(says, r.message)
        return r

    def passes(self, result_and_lines):
        self.assertPass(result_and_lines[0])


def body_verdict(kind: str, body: Dict[str, Any], origin: str) -> Any:
    """check_envelope's verdict on a ledger-written `kind` body, in an envelope whose signature
    has the right length and is never verified: (code, field) of the first rule it breaks, or
    "PASS"."""
    env = {"v": 3, "kind": kind, "signer": "ledger", "key_id": "34750f98bd59fcfc", "seq": 1,
           "body": body, "sig": "A" * 86 + "=="}
    try:
        gv.check_envelope(env, origin)
    except gv.FieldError as e:
        return e.code, e.field
    return "PASS"


class RustInvoiceFixture(VerifierTestCase):
    """A committed invoice fixture the Rust ledger writes (`invoice.json`, `bundle.ndjson`,
    `verifier_key.txt` in `fixture_dir()`): loaded into `invoice`, `bundle_lines` and `key`;
    skipped, loudly, while the directory lacks a file."""

    def fixture_dir(self) -> str:
        raise NotImplementedError

    def setUp(self):
        super().setUp()
        self.load()

    def load(self):
        d = self.fixture_dir()
        self.paths = [os.path.join(d, name) for name in ("invoice.json", "bundle.ndjson", "verifier_key.txt")]
        missing = [p for p in self.paths if not os.path.isfile(p)]
        if missing:
            self.skipTest(f"*** SKIPPED: {os.path.relpath(d, REPO)}/ lacks "
                          f"{', '.join(os.path.basename(p) for p in missing)} (yet): the Rust side writes it ***")
        self.key = gv.load_verifier_key(self.paths[2])
        self.invoice = json.loads(read(self.paths[0]))
        self.bundle_lines = read(self.paths[1]).splitlines(keepends=True)

    def check(self, invoice, bundle=None):
        """verify_bundle's result on `invoice` (written out) with the fixture's bundle, or
        `bundle` (a path)."""
        path = self.write("checked-invoice.json", json.dumps(invoice, ensure_ascii=False))
        return gv.verify_bundle(self.paths[1] if bundle is None else bundle, self.key, path)
