"""Value forms (section 2), strict JSON, Ed25519 strictness (section 3.3), Merkle helpers."""

import hashlib
import unittest
from decimal import Decimal

from support import ED_L, ORDER8, gv, producer, vector, vector_line


class DecimalForms(unittest.TestCase):
    def check(self, value, lo=None, hi=None, lo_exclusive=False):
        b = gv._Body({"x": value}, {"x": True})
        return b.decimal("x", lo, hi, lo_exclusive)

    def code(self, value, **kw):
        with self.assertRaises(gv.FieldError) as cm:
            self.check(value, **kw)
        return cm.exception.code

    def test_canonical_examples_of_2_1(self):
        for v in ["0", "8", "0.25", "14.75", "0.000000001", "1234567890123456789.123456789"]:
            self.assertEqual(self.check(v), Decimal(v), v)

    def test_non_canonical_examples_of_2_1(self):
        for v in ["8.0", "1.50", "08", ".5", "8.", "+8", "1e3", " 8", "0.0", "0.0000000001", "", "8 ", "1,000",
                  "١"]:
            self.assertEqual(self.code(v), "invalid_field", v)

    def test_negative(self):
        for v in ["-1", "-0.5", "-0.0000000001", "-0"]:
            self.assertEqual(self.code(v), "negative_quantity", v)
        self.assertEqual(self.code("-08"), "invalid_field")

    def test_length_and_digits(self):
        self.assertEqual(self.code("1" * 41), "invalid_field")
        self.assertEqual(self.code("1" * 29), "invalid_field")  # more than 28 significant digits
        self.assertEqual(self.check("1" * 28), Decimal("1" * 28))

    def test_limits(self):
        self.assertEqual(self.code("0", lo=Decimal(0), lo_exclusive=True), "quantity_out_of_range")
        self.assertEqual(self.code("1024.000000001", hi=Decimal(1024)), "quantity_out_of_range")
        self.assertEqual(self.check("1024", hi=Decimal(1024)), Decimal(1024))

    def test_json_number_is_malformed(self):
        with self.assertRaises(gv.FieldError) as cm:
            gv._Body({"x": 8}, {"x": True})
        self.assertEqual(cm.exception.code, "malformed")
        with self.assertRaises(gv.FieldError) as cm:
            gv._Body({"x": None}, {"x": False})
        self.assertEqual(cm.exception.code, "malformed")


class TimestampForms(unittest.TestCase):
    def test_good(self):
        self.assertEqual(gv.parse_timestamp("2000-01-01T00:00:00Z"), 946684800)
        self.assertEqual(gv.parse_timestamp("9999-12-31T23:59:59Z"), 253402300799)
        self.assertEqual(gv.parse_timestamp("2028-02-29T12:00:00Z"), 1835438400)

    def test_bad(self):
        for v in ["2026-02-30T00:00:00Z", "2026-11-30T24:00:00Z", "2026-11-30T23:59:60Z", "1999-12-31T23:59:59Z",
                  "2026-11-30t12:00:00Z", "2026-11-30T12:00:00z", "2026-11-30T12:00:00.5Z", "2026-11-30T12:00:00+00:00",
                  "2026-11-30 12:00:00Z", "2026-11-30T12:00:00Z\n", "2027-02-29T00:00:00Z", "2026-13-01T00:00:00Z"]:
            with self.assertRaises(ValueError, msg=v):
                gv.parse_timestamp(v)


class IdAndBase64Forms(unittest.TestCase):
    def test_ids(self):
        for v in ["a", "node-imx-0001", "H100-SXM5-80GB", "x" * 128, "a.b_c:d/e-f", "0"]:
            self.assertTrue(gv.is_id(v), v)
        for v in ["", "-a", ".a", "x" * 129, "a b", "a|b", "a\n", "é", "a+b", "_a"]:
            self.assertFalse(gv.is_id(v), v)

    def test_base64(self):
        self.assertEqual(gv.b64decode_canonical("AAAA"), b"\0\0\0")
        self.assertEqual(len(gv.b64decode_canonical("A" * 43 + "=", 32)), 32)
        for v in ["A" * 42 + "B=", "AAA", "AA==\n", " AAAA", "AA=A", "AB==", "A-_A", "AAAA===="]:
            with self.assertRaises(ValueError, msg=v):
                gv.b64decode_canonical(v)
        with self.assertRaises(ValueError):
            gv.b64decode_canonical("AAAA", 32)


class StrictJson(unittest.TestCase):
    def test_refusals(self):
        for text in [b'{"a":1,"a":2}', b'{"a":1.0}', b'{"a":1e0}', b'{"a":NaN}', b'\xff{}', b'{"a":Infinity}']:
            with self.assertRaises(ValueError, msg=text):
                gv.parse_json(text)

    def test_repeated_member_names_at_every_depth(self):
        # Version 2, section 7: refused at every depth, also with equal values, and the message
        # names the member.
        for text, member in [(b'{"a":1,"a":1}', "a"), (b'{"x":{"b":"1","b":"1"}}', "b"),
                             (b'{"x":[{"c":1},{"d":2,"d":2}]}', "d"), (b'[[[{"e":{"f":0,"f":0}}]]]', "f"),
                             (b'{"envelope":{"body":{"tiers":[{"price_per_gpu_hour":"1","price_per_gpu_hour":"1"}]}}}',
                              "price_per_gpu_hour")]:
            with self.subTest(text=text):
                with self.assertRaises(ValueError) as cm:
                    gv.parse_json(text)
                self.assertIn(repr(member), str(cm.exception))
        # Names that differ only by escaping are the same name.
        with self.assertRaises(ValueError):
            gv.parse_json(b'{"a":1,"\u0061":2}')

    def test_jcs_matches_the_vectors(self):
        for kind in ("gpu_usage", "energy", "spot_price"):
            raw = vector(f"{kind}.envelope.json")
            self.assertEqual(gv.jcs(gv.parse_json(raw)), raw)
            raw = vector(f"{kind}.leaf.json")
            self.assertEqual(gv.jcs(gv.parse_json(raw)), raw)


class Ed25519Strict(unittest.TestCase):
    """Key validity and strict verification go through libsodium (PyNaCl); test_ed25519.py has
    the adversarial cross-checks. These are the vector-based checks."""

    def test_no_curve_arithmetic_of_its_own(self):
        for name in ("ed25519_decode_point", "_edwards_double", "ed25519_is_small_order_math",
                     "ed25519_is_small_order", "_SMALL_ORDER_Y"):
            self.assertFalse(hasattr(gv, name), name)

    def test_vector_signatures(self):
        node = gv.b64decode_canonical("iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w=", 32)
        msg = vector("gpu_usage.message.bin")
        sig = gv.b64decode_canonical(vector_line("gpu_usage.sig.b64"), 64)
        self.assertTrue(gv.verify_strict(node, msg, sig))
        self.assertFalse(gv.verify_strict(node, msg + b" ", sig))
        # S + L: the same equation, a non-canonical S: refused.
        s = int.from_bytes(sig[32:], "little") + ED_L
        self.assertLess(s, 2**256)
        self.assertFalse(gv.verify_strict(node, msg, sig[:32] + s.to_bytes(32, "little")))

    def test_small_order_r_vector_is_refused(self):
        node = gv.b64decode_canonical("iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w=", 32)
        msg = vector("gpu_usage.message.bin")
        sig = gv.b64decode_canonical(vector_line("gpu_usage.small_order_r.sig.b64"), 64)
        self.assertEqual(sig[:32], (1).to_bytes(32, "little"))  # R = identity
        self.assertFalse(gv.verify_strict(node, msg, sig))

    def test_producer_small_order_r_is_refused(self):
        k = producer.Key.from_byte(0x22)
        sig = k.sign_small_order_r(b"hello")
        self.assertFalse(gv.verify_strict(k.pub, b"hello", sig))
        self.assertTrue(gv.verify_strict(k.pub, b"hello", k.sign(b"hello")))
        sig = k.sign_torsion_r(b"hello", ORDER8)
        self.assertFalse(gv.verify_strict(k.pub, b"hello", sig))

    def test_small_order_public_key_is_refused(self):
        self.assertFalse(gv.valid_public_key(bytes(32)))
        self.assertFalse(gv.valid_public_key((1).to_bytes(32, "little")))
        ident = (1).to_bytes(32, "little")
        # With A and R the identity and S = 0, the cofactorless equation holds for any message.
        self.assertFalse(gv.verify_strict(ident, b"anything", ident + bytes(32)))

    def test_key_id(self):
        pub = gv.b64decode_canonical("iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w=", 32)
        self.assertEqual(gv.key_id_of(pub), "34750f98bd59fcfc")


class MerkleHelpers(unittest.TestCase):
    def test_empty_root(self):
        self.assertEqual(gv.merkle_root([]).hex(),
                         "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")

    def test_streaming_root_matches_recursive_definition(self):
        for n in range(0, 40):
            hashes = [hashlib.sha256(bytes([i])).digest() for i in range(n)]
            self.assertEqual(gv.merkle_root(hashes), producer.mth_hashes(hashes), n)

    def test_all_inclusion_and_consistency_proofs_small_trees(self):
        for n in range(1, 20):
            hashes = [hashlib.sha256(bytes([i, n])).digest() for i in range(n)]
            root = producer.mth_hashes(hashes)
            for m in range(n):
                proof = producer.path(m, hashes)
                self.assertTrue(gv.verify_inclusion(m, n, hashes[m], proof, root), (m, n))
                if proof:
                    bad = [proof[0][:-1] + bytes([proof[0][-1] ^ 1])] + proof[1:]
                    self.assertFalse(gv.verify_inclusion(m, n, hashes[m], bad, root))
                    self.assertFalse(gv.verify_inclusion(m, n, hashes[m], proof[:-1], root))
                self.assertFalse(gv.verify_inclusion(m, n, hashes[m], proof + [root], root))
            for m in range(1, n + 1):
                old = producer.mth_hashes(hashes[:m])
                proof = producer.consistency(m, hashes)
                self.assertTrue(gv.verify_consistency(m, n, old, root, proof), (m, n))
                if proof:
                    bad = proof[:-1] + [proof[-1][:-1] + bytes([proof[-1][-1] ^ 1])]
                    self.assertFalse(gv.verify_consistency(m, n, old, root, bad), (m, n))
                if m < n:
                    self.assertFalse(gv.verify_consistency(m, n, root, root, proof), (m, n))
                    self.assertFalse(gv.verify_consistency(n, m, root, old, proof), (m, n))


if __name__ == "__main__":
    unittest.main()
