"""Witness cosignatures (docs/PROTOCOL.md section 16): the committed vectors of
tests/vectors/cosignature/ (made by the Rust code) checked from the spec's definitions, and the
`--witness` / `--quorum` rule of the command line: quorum met, not met, a wrong key, a tampered
cosignature, usage errors."""

import base64
import contextlib
import hashlib
import io
import json
import os
import tempfile
import unittest

import nacl.signing

from support import VECTORS, gv, read

import gpuledger_witness as gw

DIR = os.path.join(VECTORS, "cosignature")


def vfile(name: str) -> bytes:
    return read(os.path.join(DIR, name))


def vline(name: str) -> str:
    text = vfile(name).decode()
    assert text.endswith("\n") and text.count("\n") == 1, name
    return text[:-1]


WITNESS = json.loads(vfile("witness.json"))
LOG_VKEY = vline("log.vkey")
NOTE = vfile("checkpoint.note").decode()
COSIGNED = vfile("cosigned.note").decode()
TIMESTAMP = int(vline("timestamp.txt"))


class Signer:
    """A second witness, signing with libsodium (the test's producer side)."""

    def __init__(self, name: str, seed: bytes):
        self.name = name
        self.sk = nacl.signing.SigningKey(seed)
        self.pub = bytes(self.sk.verify_key)
        self.key_id = gw.witness_key_id(name, self.pub)
        self.vkey = gw.WitnessKey(name, self.key_id, self.pub).vkey

    def cosign(self, note: str, timestamp: int) -> str:
        body = note[: note.rfind("\n\n") + 1].encode()
        sig = self.sk.sign(gw.signed_message(body, timestamp)).signature
        raw = self.key_id.to_bytes(4, "big") + timestamp.to_bytes(8, "big") + sig
        return f"\u2014 {self.name} {base64.b64encode(raw).decode()}\n"


class Vectors(unittest.TestCase):
    def test_key_id_and_vkey_from_the_definition(self):
        pub = base64.b64decode(WITNESS["public_key"])
        seed = bytes.fromhex(WITNESS["seed_hex"])
        self.assertEqual(bytes(nacl.signing.SigningKey(seed).verify_key), pub)
        digest = hashlib.sha256(WITNESS["name"].encode() + b"\n\x04" + pub).digest()
        self.assertEqual(digest[:4].hex(), WITNESS["key_id"])
        key = gw.parse_witness_vkey(vline("witness.vkey"))
        self.assertEqual((key.name, f"{key.key_id:08x}", key.public_key),
                         (WITNESS["name"], WITNESS["key_id"], pub))
        self.assertEqual(key.vkey, WITNESS["vkey"])

    def test_signed_message_and_signature_line(self):
        body = NOTE[: NOTE.rfind("\n\n") + 1].encode()
        message = gw.signed_message(body, TIMESTAMP)
        self.assertEqual(message, vfile("signed_message.bin"))
        self.assertEqual(message.hex(), vline("signed_message.hex"))
        self.assertTrue(message.startswith(b"cosignature/v1\ntime 1796126400\n"))
        raw = base64.b64decode(vline("signature.b64"))
        self.assertEqual(raw[:4].hex(), WITNESS["key_id"])
        self.assertEqual(int.from_bytes(raw[4:12], "big"), TIMESTAMP)
        pub = base64.b64decode(WITNESS["public_key"])
        self.assertTrue(gv.verify_strict(pub, message, raw[12:]))
        line = vfile("signature_line.txt").decode()
        self.assertEqual(line, f"\u2014 {WITNESS['name']} {vline('signature.b64')}\n")
        self.assertEqual(COSIGNED, NOTE + line)

    def test_valid_cosignatures_of_the_vector_note(self):
        key = gw.parse_witness_vkey(vline("witness.vkey"))
        found = gw.valid_cosignatures(COSIGNED, [key])
        self.assertEqual([(c.witness, c.timestamp) for c in found], [(WITNESS["name"], TIMESTAMP)])
        self.assertEqual(found[0].line, vfile("signature_line.txt").decode())
        # The log's own signature and a note without the line count for nothing.
        self.assertEqual(gw.valid_cosignatures(NOTE, [key]), [])
        # The line moved to the older checkpoint does not verify.
        moved = vfile("old_checkpoint.note").decode() + vfile("signature_line.txt").decode()
        self.assertEqual(gw.valid_cosignatures(moved, [key]), [])
        # Any flipped bit of the timestamp or signature: not counted.
        raw = bytearray(base64.b64decode(vline("signature.b64")))
        for i in (4, 11, 12, 50, 75):
            bad = bytearray(raw)
            bad[i] ^= 1
            tampered = COSIGNED.replace(vline("signature.b64"), base64.b64encode(bytes(bad)).decode())
            self.assertEqual(gw.valid_cosignatures(tampered, [key]), [], i)

    def test_bad_vkeys_are_refused(self):
        good = vline("witness.vkey")
        name, hexid, key64 = good.split("+", 2)
        with self.assertRaises(ValueError):
            gw.parse_witness_vkey(f"{name}+00000000+{key64}")  # wrong key id
        with self.assertRaises(ValueError):
            gw.parse_witness_vkey(LOG_VKEY)  # type 0x01: a log key, not a witness key
        small = bytes([1]) + bytes(31)  # the identity point: small order
        kid = gw.witness_key_id("w", small)
        with self.assertRaises(ValueError):
            gw.parse_witness_vkey(f"w+{kid:08x}+{base64.b64encode(bytes([4]) + small).decode()}")

    def test_spec_example_line_decodes(self):
        # C2SP tlog-cosignature's example: witness.example.com/w1 at time 1679315147.
        sig = "jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dlrDJsX3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+qnA=="
        raw = base64.b64decode(sig)
        self.assertEqual(raw[:4].hex(), "8d66cf3f")
        self.assertEqual(int.from_bytes(raw[4:12], "big"), 1679315147)
        body = b"example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
        self.assertEqual(gw.signed_message(body, 1679315147),
                         b"cosignature/v1\ntime 1679315147\n" + body)


class CommandLine(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.w1 = vline("witness.vkey")
        self.other = Signer("witness.test/w2", bytes([5]) * 32)

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name: str, text: str) -> str:
        path = os.path.join(self.tmp.name, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def run_cli(self, note: str, *extra: str):
        path = self.write("cp.note", note)
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = gv.main(["checkpoint", "--checkpoint", path, "--log-key", LOG_VKEY, "--json", *extra])
        text = out.getvalue()
        return code, (json.loads(text) if text else None)

    def test_quorum_met(self):
        code, r = self.run_cli(COSIGNED, "--witness", self.w1)
        self.assertEqual(code, 0, r)
        self.assertEqual(r["summary"]["witnesses"]["found"], 1)
        self.assertEqual(r["summary"]["witnesses"]["cosigned_by"][0]["timestamp"], TIMESTAMP)
        # Two witnesses, both cosigned, quorum 2.
        both = COSIGNED + self.other.cosign(COSIGNED, 1800000000)
        code, r = self.run_cli(both, "--witness", self.w1, "--witness", self.other.vkey, "--quorum", "2")
        self.assertEqual(code, 0, r)
        self.assertEqual(r["summary"]["witnesses"]["found"], 2)

    def test_quorum_not_met(self):
        code, r = self.run_cli(COSIGNED, "--witness", self.w1, "--witness", self.other.vkey, "--quorum", "2")
        self.assertEqual((code, r["reason"]), (1, "witness_quorum"))
        self.assertEqual(r["summary"], {"found": 1, "required": 2})
        code, r = self.run_cli(NOTE, "--witness", self.w1)
        self.assertEqual((code, r["reason"]), (1, "witness_quorum"))

    def test_wrong_key_does_not_count(self):
        code, r = self.run_cli(COSIGNED, "--witness", self.other.vkey)
        self.assertEqual((code, r["reason"]), (1, "witness_quorum"))
        # Same name as the vector witness, another key: another key id, ignored.
        impostor = Signer(WITNESS["name"], bytes([6]) * 32)
        forged = NOTE + impostor.cosign(NOTE, TIMESTAMP)
        code, r = self.run_cli(forged, "--witness", self.w1)
        self.assertEqual((code, r["reason"]), (1, "witness_quorum"))

    def test_tampered_cosignature_fails(self):
        raw = bytearray(base64.b64decode(vline("signature.b64")))
        raw[30] ^= 0x40
        tampered = COSIGNED.replace(vline("signature.b64"), base64.b64encode(bytes(raw)).decode())
        code, r = self.run_cli(tampered, "--witness", self.w1)
        self.assertEqual((code, r["reason"]), (1, "witness_quorum"))

    def test_consistency_needs_the_quorum_on_the_new_checkpoint(self):
        # The same checkpoint as old and new: the empty proof is the consistency proof.
        def consistency(old: str, new: str, *extra: str):
            paths = [self.write("old.note", old), self.write("new.note", new), self.write("proof.json", "[]")]
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                code = gv.main(["consistency", "--old", paths[0], "--new", paths[1], "--proof", paths[2],
                                "--log-key", LOG_VKEY, "--json", *extra])
            return code, json.loads(out.getvalue())
        code, r = consistency(NOTE, NOTE)
        self.assertEqual(code, 0, r)
        code, r = consistency(NOTE, COSIGNED, "--witness", self.w1)
        self.assertEqual(code, 0, r)
        self.assertEqual(r["summary"]["witnesses"]["found"], 1)
        # A cosigned old checkpoint does not stand in for the new one.
        code, r = consistency(COSIGNED, NOTE, "--witness", self.w1)
        self.assertEqual((code, r["reason"], r["item"]), (1, "witness_quorum", "new checkpoint"), r)
        code, r = consistency(NOTE, COSIGNED, "--witness", self.w1, "--witness", self.other.vkey, "--quorum", "2")
        self.assertEqual((code, r["reason"]), (1, "witness_quorum"), r)

    def test_witness_file_and_usage_errors(self):
        listing = self.write("witnesses.txt", f"# trusted witnesses\n{self.other.vkey}\n{self.w1}\n")
        self.assertEqual(self.run_cli(COSIGNED, "--witness", "@" + listing)[0], 0)
        self.assertEqual(self.run_cli(COSIGNED, "--quorum", "1")[0], 2)
        self.assertEqual(self.run_cli(COSIGNED, "--witness", self.w1, "--quorum", "2")[0], 2)
        self.assertEqual(self.run_cli(COSIGNED, "--witness", self.w1, "--quorum", "0")[0], 2)
        self.assertEqual(self.run_cli(COSIGNED, "--witness", LOG_VKEY)[0], 2)
        # Without witnesses nothing changes.
        self.assertEqual(self.run_cli(NOTE)[0], 0)


if __name__ == "__main__":
    unittest.main()
