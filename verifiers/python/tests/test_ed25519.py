"""Ed25519 cross-checks (version 2, sections 3.1 and 3.3): adversarial keys and signatures built
with PyNaCl's low-level libsodium bindings, the verifier's verdict on each, and the promise that
every signature the verifier ACCEPTS is also accepted by libsodium (PyNaCl) and by OpenSSL
(`cryptography`).

The cases (each a public key, a message, a signature, whether the key is valid by section 3.1,
and the strict verdict):

- honest RFC 8032 signatures: accept;
- R = rB + T with T a torsion point of order 2, 4 or 8 and S = r + k*a: the cofactored equation
  holds, the cofactorless one does not: refuse;
- a mixed-order key A = aB + T (T of order 2, 4, 8), with r ground until k = 0 mod ord(T), so
  that the cofactorless equation holds: refuse (the key is not torsion-free; libsodium's verify
  alone does not check that, so the verifier checks the key first);
- non-canonical encodings of A (y >= p, and x = 0 with the sign bit set) and of R: refuse;
- small-order A (each of the eight torsion points) with signatures that pass the cofactorless
  equation, small-order R (R = identity with S = k*a, which OpenSSL accepts; R of order 8 with
  a small-order A): refuse;
- S >= L (S + L, S = L, S = 2^256 - 1): refuse.

If tests/vectors/ed25519/cases.json (written by the Rust side) exists, every case in it is
checked the same way; otherwise that test is skipped with a message.
"""

import base64
import hashlib
import os
import unittest

import nacl.signing

from support import (ED25519_CASES, ED_L, ED_P, IDENTITY, NONCANONICAL_ON_CURVE_Y, ORDER8, TORSION_ENCODINGS,
                     base_mul, challenge, encode_y, gv, is_torsion_encoding, mixed_order_key, nacl_accepts, nb,
                     openssl_accepts, producer, REPO, s_of, scalar, scalar_int, torsion_of_order, torsion_order,
                     torsion_point)

MESSAGE = b"gpuledger/v3/gpu_usage\ngpuledger.test/ed25519\n{}"


def case(name, pub, message, sig, key_valid, verdict, note=""):
    return {"name": name, "public_key": pub, "message": message, "signature": sig, "key_valid": key_valid,
            "verdict": verdict, "note": note}


def secret(n: int) -> bytes:
    return scalar(int.from_bytes(hashlib.sha512(b"secret %d" % n).digest(), "little"))


def nonce(n: int) -> bytes:
    return scalar(int.from_bytes(hashlib.sha512(b"nonce %d" % n).digest(), "little"))


def honest_cases():
    out = []
    for i, msg in enumerate((b"", MESSAGE, b"x" * 1000)):
        sk = nacl.signing.SigningKey(bytes([0x30 + i]) * 32)
        sig = sk.sign(msg).signature
        out.append(case(f"honest_{i}", bytes(sk.verify_key), msg, sig, True, "accept", "RFC 8032 signature"))
    # An honest signature made with the bindings (R = rB, S = r + k*a), to check the helpers.
    a, r = secret(1), nonce(1)
    pub, big_r = base_mul(a), base_mul(r)
    out.append(case("honest_bindings", pub, MESSAGE, big_r + s_of(r, challenge(big_r, pub, MESSAGE), a), True,
                    "accept", "R = rB, S = r + k*a with libsodium's scalar arithmetic"))
    return out


def torsion_r_cases():
    out = []
    a = secret(2)
    pub = base_mul(a)
    for order in (2, 4, 8):
        r = nonce(10 + order)
        big_r = nb.crypto_core_ed25519_add(base_mul(r), torsion_of_order(order))
        sig = big_r + s_of(r, challenge(big_r, pub, MESSAGE), a)
        out.append(case(f"torsion_r_order_{order}", pub, MESSAGE, sig, True, "refuse",
                        f"R = rB + T (T of order {order}), S = r + k*a: cofactored accept, strict refuse"))
    return out


def mixed_order_key_cases():
    out = []
    for order, tk in ((2, 4), (4, 2), (8, 1)):
        a = secret(20 + order)
        pub = mixed_order_key(a, tk)
        # grind r so that ord(T) divides k: then [S]B - [k]A = rB - [k]T = R (cofactorless holds)
        for i in range(1000):
            r = nonce(100 * order + i)
            big_r = base_mul(r)
            k = challenge(big_r, pub, MESSAGE)
            if scalar_int(k) % order == 0:
                break
        else:  # pragma: no cover - probability (1 - 1/8)^1000
            raise AssertionError("no suitable nonce")
        out.append(case(f"mixed_order_key_order_{order}", pub, MESSAGE, big_r + s_of(r, k, a), False, "refuse",
                        f"A = aB + T (T of order {order}); k = 0 mod {order}, so the cofactorless equation holds"))
    return out


def noncanonical_key_cases():
    out = []
    r = nonce(30)
    big_r = base_mul(r)
    for y0 in NONCANONICAL_ON_CURVE_Y[:3] + (0, 1):
        for sign in (0, 1):
            pub = encode_y(y0 + ED_P, sign)
            out.append(case(f"noncanonical_key_y{y0}+p_sign{sign}", pub, MESSAGE, big_r + r, False, "refuse",
                            "y >= p"))
    # x = 0 with the sign bit set: the identity and the point of order 2, encoded with sign 1
    for y, label in ((1, "identity"), (ED_P - 1, "order2")):
        pub = encode_y(y, 1)
        out.append(case(f"noncanonical_key_{label}_sign1", pub, MESSAGE, IDENTITY + bytes(32), False, "refuse",
                        "x = 0 with the sign bit set"))
    return out


def noncanonical_r_cases():
    out = []
    a = secret(40)
    pub = base_mul(a)
    # The identity encoded as y = p + 1 or with the sign bit set; S = k*a, so [S]B - [k]A is the
    # identity as a point, but its canonical encoding is not R's bytes.
    for label, big_r in (("identity_y=p+1", encode_y(ED_P + 1)), ("identity_sign1", encode_y(1, 1)),
                         ("order4_y=p", encode_y(ED_P))):
        k = challenge(big_r, pub, MESSAGE)
        sig = big_r + nb.crypto_core_ed25519_scalar_mul(k, a)
        out.append(case(f"noncanonical_r_{label}", pub, MESSAGE, sig, True, "refuse", "R not canonically encoded"))
    for y0 in NONCANONICAL_ON_CURVE_Y[:2]:
        big_r = encode_y(y0 + ED_P)
        out.append(case(f"noncanonical_r_y{y0}+p", pub, MESSAGE, big_r + secret(41), True, "refuse",
                        "R with y >= p"))
    return out


def small_order_key_cases():
    out = []
    for k in range(8):
        pub = torsion_point(k)
        order = torsion_order(k)
        # R = rB, S = r: [S]B - [k']A = rB - [k']T = R when ord(T) divides k' (grind r)
        for i in range(1000):
            r = nonce(500 + 10 * k + i)
            big_r = base_mul(r)
            if scalar_int(challenge(big_r, pub, MESSAGE)) % order == 0:
                break
        else:  # pragma: no cover
            raise AssertionError("no suitable nonce")
        out.append(case(f"small_order_key_{k}xT8", pub, MESSAGE, big_r + r, False, "refuse",
                        f"A of order {order}; the cofactorless equation holds"))
    # A = R = identity, S = 0: the equation holds for every message
    out.append(case("small_order_key_and_r_identity", IDENTITY, MESSAGE, IDENTITY + bytes(32), False, "refuse",
                    "A = R = identity, S = 0: a 'signature' on anything"))
    # A of order 8, R a torsion point, S = 0: -[k]A = R when the message is ground for it
    pub = ORDER8
    for i in range(1000):
        msg = MESSAGE + b" %d" % i
        big_r = torsion_point(3)
        k = scalar_int(challenge(big_r, pub, msg))
        if (-k) % 8 == 3:
            break
    else:  # pragma: no cover
        raise AssertionError("no suitable message")
    out.append(case("small_order_key_and_small_order_r", pub, msg, big_r + bytes(32), False, "refuse",
                    "A = T8, R = 3*T8, S = 0, -[k]A = R"))
    return out


def small_order_r_cases():
    out = []
    a = secret(60)
    pub = base_mul(a)
    k = challenge(IDENTITY, pub, MESSAGE)
    out.append(case("small_order_r_identity", pub, MESSAGE, IDENTITY + nb.crypto_core_ed25519_scalar_mul(k, a),
                    True, "refuse", "R = identity, S = k*a: the cofactorless equation holds; OpenSSL accepts"))
    for t in (1, 2, 4):
        big_r = torsion_point(t)
        k = challenge(big_r, pub, MESSAGE)
        out.append(case(f"small_order_r_{t}xT8", pub, MESSAGE, big_r + nb.crypto_core_ed25519_scalar_mul(k, a),
                        True, "refuse", "R of small order"))
    return out


def big_s_cases():
    out = []
    sk = nacl.signing.SigningKey(b"\x41" * 32)
    pub = bytes(sk.verify_key)
    sig = sk.sign(MESSAGE).signature
    s = int.from_bytes(sig[32:], "little")
    out.append(case("s_plus_l", pub, MESSAGE, sig[:32] + (s + ED_L).to_bytes(32, "little"), True, "refuse",
                    "S + L: the same point equation, S not canonical"))
    out.append(case("s_plus_2l", pub, MESSAGE, sig[:32] + (s + 2 * ED_L).to_bytes(32, "little"), True, "refuse",
                    "S + 2L"))
    out.append(case("s_equals_l", pub, MESSAGE, sig[:32] + ED_L.to_bytes(32, "little"), True, "refuse", "S = L"))
    out.append(case("s_all_ones", pub, MESSAGE, sig[:32] + b"\xff" * 32, True, "refuse", "S = 2^256 - 1"))
    return out


def all_cases():
    return (honest_cases() + torsion_r_cases() + mixed_order_key_cases() + noncanonical_key_cases()
            + noncanonical_r_cases() + small_order_key_cases() + small_order_r_cases() + big_s_cases())


class Ed25519CrossCheck(unittest.TestCase):
    def check_cases(self, cases, source):
        accepted = 0
        for c in cases:
            with self.subTest(source=source, case=c["name"]):
                pub, msg, sig = c["public_key"], c["message"], c["signature"]
                self.assertEqual(gv.valid_public_key(pub), c["key_valid"], f"{c['name']}: key validity")
                verdict = "accept" if gv.verify_strict(pub, msg, sig) else "refuse"
                self.assertEqual(verdict, c["verdict"], f"{c['name']}: {c.get('note', '')}")
                if verdict == "accept":
                    accepted += 1
                    self.assertTrue(nacl_accepts(pub, msg, sig), f"{c['name']}: PyNaCl (libsodium) refuses it")
                    self.assertTrue(openssl_accepts(pub, msg, sig), f"{c['name']}: OpenSSL (cryptography) refuses it")
                    self.assertTrue(c["key_valid"])
        return accepted

    def test_adversarial_cases(self):
        cases = all_cases()
        self.assertGreater(len(cases), 30)
        self.assertEqual(len({c["name"] for c in cases}), len(cases))
        self.assertEqual(self.check_cases(cases, "python"), 4)

    def test_torsion_r_passes_a_cofactored_verifier_only(self):
        for c in torsion_r_cases():
            with self.subTest(c["name"]):
                pub, sig = c["public_key"], c["signature"]
                big_r, s = sig[:32], sig[32:]
                k = challenge(big_r, pub, c["message"])
                # [S]B - [k]A = rB = R - T: not R (cofactorless fails) ...
                d = nb.crypto_core_ed25519_sub(base_mul(s), nb.crypto_scalarmult_ed25519_noclamp(k, pub))
                self.assertNotEqual(d, big_r)
                # ... but R - ([S]B - [k]A) = T is a torsion point, so [8](...) = O (cofactored holds)
                self.assertTrue(is_torsion_encoding(nb.crypto_core_ed25519_sub(big_r, d)))
                self.assertFalse(nacl_accepts(pub, c["message"], sig))
                self.assertFalse(openssl_accepts(pub, c["message"], sig))

    def test_mixed_order_keys_pass_the_cofactorless_equation(self):
        # The key check is what refuses them: the signature itself satisfies R = [S]B - [k]A.
        for c in mixed_order_key_cases():
            with self.subTest(c["name"]):
                self.assertFalse(nb.crypto_core_ed25519_is_valid_point(c["public_key"]))
                self.assertFalse(gv.verify_strict(c["public_key"], c["message"], c["signature"]))
                # libsodium's verify does not check that A is torsion-free; OpenSSL neither.
                lax = (nacl_accepts(c["public_key"], c["message"], c["signature"]),
                       openssl_accepts(c["public_key"], c["message"], c["signature"]))
                self.assertEqual(lax, (True, True), f"{c['name']}: lax verdicts {lax}")

    def test_small_order_r_identity_passes_the_cofactorless_equation(self):
        c = small_order_r_cases()[0]
        pub, sig = c["public_key"], c["signature"]
        k = challenge(sig[:32], pub, c["message"])
        d = nb.crypto_core_ed25519_sub(base_mul(sig[32:]) if scalar_int(sig[32:]) else IDENTITY,
                                       nb.crypto_scalarmult_ed25519_noclamp(k, pub))
        self.assertEqual(d, IDENTITY)  # [S]B - [k]A = O = R
        self.assertFalse(gv.verify_strict(pub, c["message"], sig))
        self.assertFalse(nacl_accepts(pub, c["message"], sig))

    def test_torsion_points(self):
        for k, enc in TORSION_ENCODINGS.items():
            pt = torsion_point(k)
            self.assertEqual(pt.hex(), enc)
            self.assertFalse(gv.valid_public_key(pt))
            self.assertFalse(gv.valid_public_key(pt[:31] + bytes([pt[31] ^ 0x80])))  # the other sign
        self.assertEqual(len(set(TORSION_ENCODINGS.values())), 8)

    def test_no_torsion_free_point_has_a_non_canonical_encoding(self):
        # y >= p means y = y0 + p with y0 <= 18; none of those y0 is the y of a torsion-free point,
        # so a non-canonical key is always refused also as a point (checks 4, 5), not only by check 3.
        base = base_mul(scalar(1))
        on_curve = []
        for y0 in range(19):
            for sign in (0, 1):
                canonical = encode_y(y0, sign)
                self.assertFalse(nb.crypto_core_ed25519_is_valid_point(canonical), (y0, sign))
                self.assertFalse(gv.valid_public_key(encode_y(y0 + ED_P, sign)), (y0, sign))
                try:
                    nb.crypto_core_ed25519_add(canonical, base)
                    on_curve.append(y0)
                except Exception:  # noqa: BLE001 - not a curve point
                    pass
        self.assertEqual(tuple(sorted(set(on_curve) - {0, 1})), NONCANONICAL_ON_CURVE_Y)

    def test_keys(self):
        for seed in (1, 2, 3, 0x21, 0x22):
            pub = producer.Key.from_byte(seed).pub
            self.assertTrue(gv.valid_public_key(pub))
            self.assertTrue(nb.crypto_core_ed25519_is_valid_point(pub))
        for bad in (b"", bytes(31), bytes(33), encode_y(2)):  # y = 2 is not on the curve
            self.assertFalse(gv.valid_public_key(bad))
        self.assertFalse(gv.verify_strict(bytes(31), b"", bytes(64)))
        sk = nacl.signing.SigningKey(b"\x05" * 32)
        self.assertFalse(gv.verify_strict(bytes(sk.verify_key), b"m", sk.sign(b"m").signature[:63]))

    def test_checkpoint_signatures_use_the_same_rule(self):
        # A checkpoint note signed with R = identity, S = k*a by the log key is refused.
        lk = producer.Key.from_byte(0x61)
        log = producer.Log(lk, "gpuledger.test/ed25519")
        log.policy("2026-10-01T00:00:00Z")
        body = f"{log.origin}\n1\n{gv.b64(log.root(1))}\n"
        sig = lk.sign_small_order_r(body.encode())
        note = body + "\n" + f"\u2014 {log.origin} {gv.b64(lk.note_key_id(log.origin) + sig)}\n"
        with self.assertRaises(gv.Failure) as cm:
            gv.verify_checkpoint_note(note, gv.parse_verifier_key(log.verifier_key()))
        self.assertEqual(cm.exception.reason, "checkpoint_signature")
        gv.verify_checkpoint_note(log.checkpoint(1), gv.parse_verifier_key(log.verifier_key()))

    def test_rust_cases_table(self):
        """tests/vectors/ed25519/cases.json, written by the Rust side: the verifier agrees on every
        case, and PyNaCl and cryptography accept every "accept" case."""
        if not os.path.exists(ED25519_CASES):
            self.skipTest(f"*** SKIPPED: {os.path.relpath(ED25519_CASES, REPO)} does not exist (yet): "
                          "the Rust side writes it ***")
        with open(ED25519_CASES, "rb") as f:
            table = gv.parse_json(f.read())
        rows = table["cases"] if isinstance(table, dict) else table
        self.assertIsInstance(rows, list)
        self.assertGreater(len(rows), 0)
        cases = []
        for row in rows:
            for member in ("name", "public_key", "message", "signature", "key_valid", "verdict"):
                self.assertIn(member, row, f"case {row.get('name')!r} has no {member}")
            self.assertIn(row["verdict"], ("accept", "refuse"), row["name"])
            self.assertIsInstance(row["key_valid"], bool, row["name"])
            cases.append(case(row["name"], base64.b64decode(row["public_key"], validate=True),
                              bytes.fromhex(row["message"]), base64.b64decode(row["signature"], validate=True),
                              row["key_valid"], row["verdict"], row.get("why", row.get("note", ""))))
        accepted = self.check_cases(cases, ED25519_CASES)
        self.assertEqual(accepted, sum(1 for c in cases if c["verdict"] == "accept"))


if __name__ == "__main__":
    unittest.main()
