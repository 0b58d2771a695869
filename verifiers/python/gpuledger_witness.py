"""gpuledger_witness: witness cosignatures for the Python verifier (docs/PROTOCOL.md section 16).

Written from C2SP tlog-cosignature (`cosignature/v1`, Ed25519, signature type 0x04) and
docs/PROTOCOL.md section 16, not from the Rust code. A cosignature is a note signature line

    \u2014 <witness name> base64(key id || u64 big-endian timestamp || Ed25519 signature)

where the key id is SHA-256(name || "\\n" || 0x04 || public key)[:4] and the signature is over

    "cosignature/v1\\n" "time <timestamp>\\n" <the checkpoint body, its final LF included>

A certificate, invoice or bundle verified with `--witness VKEY ... --quorum K` passes only if its
checkpoint carries valid cosignatures from at least K distinct given witnesses; otherwise it
fails with the reason `witness_quorum`. Verification is gpuledger_verify.verify_strict (strict
Ed25519 through libsodium, with the key rule of section 3.1), nothing of its own.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence

import gpuledger_verify as gv

COSIGNATURE_V1_ALG = 0x04
COSIGNATURE_V1_HEADER = b"cosignature/v1\n"
WITNESS_QUORUM = "witness_quorum"
MAX_TIMESTAMP = 2**63 - 1
# The most bytes read of a bundle's first line (its header) to find the checkpoint.
MAX_HEADER_LINE = 1 << 20
_HEX8 = re.compile(r"[0-9a-fA-F]{8}")


@dataclass(frozen=True)
class WitnessKey:
    name: str
    key_id: int
    public_key: bytes

    @property
    def vkey(self) -> str:
        material = gv.b64(bytes([COSIGNATURE_V1_ALG]) + self.public_key)
        return f"{self.name}+{self.key_id:08x}+{material}"


@dataclass(frozen=True)
class Cosigned:
    witness: str
    key_id: int
    timestamp: int
    line: str  # the signature line with its final LF


def witness_key_id(name: str, pub: bytes) -> int:
    """SHA-256(name || LF || 0x04 || public key), first 4 bytes, big-endian."""
    digest = hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([COSIGNATURE_V1_ALG]) + pub).digest()
    return int.from_bytes(digest[:4], "big")


def parse_witness_vkey(text: str) -> WitnessKey:
    """`<name>+<8 hex key id>+<base64(0x04 || 32-byte key)>`; raises ValueError."""
    text = text.strip()
    parts = text.split("+", 2)
    if len(parts) != 3:
        raise ValueError("witness vkey must be <name>+<8 hex digits>+<base64(0x04 || public key)>")
    name, hexid, key64 = parts
    if not gv._valid_note_name(name):
        raise ValueError(f"witness name {name!r} is empty or holds whitespace")
    if _HEX8.fullmatch(hexid) is None:
        raise ValueError(f"witness key id {hexid!r} is not 8 hex digits")
    raw = gv.b64decode_canonical(key64)
    if len(raw) != 33:
        raise ValueError(f"witness key is {len(raw)} bytes, expected 33 (0x04 and 32 bytes)")
    if raw[0] != COSIGNATURE_V1_ALG:
        raise ValueError(f"witness key has signature type 0x{raw[0]:02x}, expected 0x04 (cosignature/v1)")
    pub = raw[1:]
    if not gv.valid_public_key(pub):
        raise ValueError("witness public key is not a valid Ed25519 key (section 3.1)")
    if witness_key_id(name, pub) != int(hexid, 16):
        raise ValueError(f"witness key id {hexid} does not match its name and public key")
    return WitnessKey(name, int(hexid, 16), pub)


def signed_message(body: bytes, timestamp: int) -> bytes:
    """What a witness signs: the header line, the time line, the checkpoint body."""
    return COSIGNATURE_V1_HEADER + f"time {timestamp}\n".encode("ascii") + body


def _split_note(note: Any) -> Optional[tuple]:
    """(body bytes with the final LF, signature lines without LF), or None if malformed."""
    if isinstance(note, (bytes, bytearray)):
        try:
            note = bytes(note).decode("utf-8")
        except UnicodeDecodeError:
            return None
    if not isinstance(note, str) or not note.endswith("\n"):
        return None
    if any(ord(ch) < 0x20 and ch != "\n" for ch in note):
        return None
    split = note.rfind("\n\n")
    if split < 0:
        return None
    body, sigs = note[: split + 1], note[split + 2 :]
    if sigs == "":
        return None
    return body.encode("utf-8"), sigs[:-1].split("\n")


def valid_cosignatures(note: Any, witnesses: Sequence[WitnessKey]) -> List[Cosigned]:
    """The valid cosignatures on the note's body, at most one per distinct given witness. Lines
    of unknown name or key id are ignored; a line of a known witness that does not verify
    strictly does not count."""
    parts = _split_note(note)
    if parts is None:
        return []
    body, lines = parts
    counted = set()
    found: List[Cosigned] = []
    for line in lines:
        if not line.startswith(gv.NOTE_SIG_PREFIX):
            continue
        name, sep, sig64 = line[len(gv.NOTE_SIG_PREFIX) :].partition(" ")
        if not sep:
            continue
        try:
            raw = gv.b64decode_canonical(sig64)
        except ValueError:
            continue
        if len(raw) != 4 + 8 + 64:
            continue
        key_id = int.from_bytes(raw[:4], "big")
        w = next((w for w in witnesses if w.name == name and w.key_id == key_id), None)
        if w is None or (w.name, w.key_id) in counted:
            continue
        timestamp = int.from_bytes(raw[4:12], "big")
        if timestamp > MAX_TIMESTAMP:
            continue
        if gv.verify_strict(w.public_key, signed_message(body, timestamp), raw[12:]):
            counted.add((w.name, w.key_id))
            found.append(Cosigned(w.name, w.key_id, timestamp, line + "\n"))
    return found


# ---------------------------------------------------------------------------------------------
# Command line: --witness VKEY|@FILE (repeatable), --quorum K
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    witnesses: List[WitnessKey]
    quorum: int
    usage_error: Any  # the exception class the caller reports as a usage error


def add_arguments(parser) -> None:
    parser.add_argument("--witness", action="append", default=[], metavar="VKEY|@FILE",
                        help="a witness whose cosignature counts (its vkey), or @FILE with one vkey a line; "
                             "repeatable (PROTOCOL.md section 16)")
    parser.add_argument("--quorum", type=int, default=None, metavar="K",
                        help="distinct given witnesses that must have cosigned the checkpoint "
                             "[default: 1 with --witness]")


def policy_from_args(args, usage_error) -> Optional[Policy]:
    """The witnesses and quorum asked for, or None; raises usage_error on bad values."""
    given = getattr(args, "witness", None) or []
    quorum = getattr(args, "quorum", None)
    keys: List[WitnessKey] = []
    for arg in given:
        if arg.startswith("@"):
            try:
                with open(arg[1:], "r", encoding="utf-8") as f:
                    text = f.read()
            except (OSError, UnicodeDecodeError) as e:
                raise usage_error(f"--witness {arg}: {e}") from None
        else:
            text = arg
        for vkey in (l.strip() for l in text.splitlines()):
            if not vkey or vkey.startswith("#"):
                continue
            try:
                key = parse_witness_vkey(vkey)
            except ValueError as e:
                raise usage_error(f"--witness {vkey}: {e}") from None
            if key not in keys:
                keys.append(key)
    if not keys:
        if quorum is not None or given:
            raise usage_error("--quorum needs at least one --witness")
        return None
    if quorum is not None and not 1 <= quorum <= len(keys):
        raise usage_error(f"--quorum {quorum} must be between 1 and the number of distinct witnesses ({len(keys)})")
    return Policy(keys, 1 if quorum is None else quorum, usage_error)


def _json_field(raw: bytes) -> Optional[str]:
    try:
        obj = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    value = obj.get("checkpoint") if isinstance(obj, dict) else None
    return value if isinstance(value, str) else None


def anchored_note(args, usage_error) -> Optional[str]:
    """The checkpoint the verification is anchored to: a certificate's `checkpoint`, else the
    `checkpoint` of the bundle's header line, else the checkpoint file, else (consistency) the
    NEW checkpoint file; the old one is the verifier's own. None if unreadable."""
    if getattr(args, "certificate", None):
        try:
            with open(args.certificate, "rb") as f:
                return _json_field(f.read())
        except OSError:
            return None
    if getattr(args, "bundle", None):
        if args.bundle == "-":
            raise usage_error("--witness with a bundle on stdin: give the bundle as a file")
        try:
            with open(args.bundle, "rb") as f:
                return _json_field(f.readline(MAX_HEADER_LINE))
        except OSError:
            return None
    for path in (getattr(args, "checkpoint", None), getattr(args, "new", None)):
        if path:
            try:
                with open(path, "rb") as f:
                    return f.read().decode("utf-8")
            except (OSError, UnicodeDecodeError):
                return None
    return None


# What a PASS without any required witness adds to its message, as `gpuledger verify` does:
# the checkpoint is signed by the log key alone (docs/PROTOCOL.md section 16).
OPERATOR_ALONE = ("no witness was required, so only the log operator vouches that this "
                  "checkpoint is on the history everybody else sees; require independent "
                  "cosigners with --witness VKEY (and --quorum K)")


def apply(policy: Optional[Policy], args, result):
    """The verdict with the witness rule: `witness_quorum` when the checkpoint carries fewer than
    the quorum's valid cosignatures (whatever else was found), else the result, with the
    witnesses that cosigned added to a PASS; a PASS without a policy says that the operator
    alone vouches for it."""
    if policy is None:
        if not result.ok:
            return result
        summary = dict(result.summary) if isinstance(result.summary, dict) else {}
        summary["witnesses"] = {"required": 0, "found": None, "operator_alone": True}
        return dataclasses.replace(result, message=f"{result.message}; {OPERATOR_ALONE}",
                                   summary=summary)
    found = valid_cosignatures(anchored_note(args, policy.usage_error), policy.witnesses)
    if len(found) < policy.quorum:
        names = ", ".join(c.witness for c in found)
        return dataclasses.replace(
            result, ok=False, reason=WITNESS_QUORUM,
            item="new checkpoint" if getattr(args, "new", None) else "checkpoint",
            message=(f"the checkpoint carries valid cosignatures from {len(found)} of the "
                     f"{len(policy.witnesses)} given witnesses, {policy.quorum} required"
                     + (f" (cosigned by {names})" if names else "")),
            summary={"found": len(found), "required": policy.quorum})
    if not result.ok:
        return result
    summary = dict(result.summary)
    summary["witnesses"] = {
        "required": policy.quorum,
        "found": len(found),
        "cosigned_by": [{"name": c.witness, "key_id": f"{c.key_id:08x}", "timestamp": c.timestamp} for c in found],
    }
    message = (result.message + f"; checkpoint cosigned by {len(found)} of the {len(policy.witnesses)} given "
               f"witnesses ({', '.join(c.witness for c in found)}; quorum {policy.quorum})")
    return dataclasses.replace(result, message=message, summary=summary)
