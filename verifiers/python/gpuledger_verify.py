#!/usr/bin/env python3
"""gpuledger_verify: a second, independent verifier for gpuledger, protocol version 3.

Written from docs/PROTOCOL.md (version 3: envelope and leaf `v` 3; version 2's changes of issue
#12 kept, and issue #27's fleet, leases, settlements and disputes added:
signed messages that name the log's origin, key validity, strict signatures, signer scopes,
tenant registrations, log policies and the admission rules rechecked from a bundle), with the
JSON Schemas and vectors the document makes part of the contract; not from the Rust code (the
fleet rules of node updates, MIG layouts and the node's region, which the document does not
describe yet, follow crates/core/src/fleet.rs and record.rs: README, items 42-44; issue #28's
contract_registered entries follow the specification of section 5.19: README, items 45-48; its
prepayment entries, section 5.20: README, items 60-69; its contract_amended entries, section
5.21: README, items 76-79). It
checks compute-usage certificates with their evidence bundles (PROTOCOL.md section 15), bundles
alone (steps 1, 2 and 4), signed checkpoints (section 9) and consistency proofs between two
checkpoints (section 8). With a bundle and its invoice (`bundle --invoice`), it recomputes the
invoice's contract lines (fees, true-ups), commitments, taxes and totals from the bundle's
contracts as amended there by docs/RATING.md "Contracts" and "Amendments", its SLA
`availability` and `sla_credit` lines from the bundle's leases and usage records by "SLA
credits", its `allowances` and `included` and `overage` lines from the bundle's usage records and earlier invoices by "Included GPU-hours and overage",
and what it draws on the tenant's prepaid lots
(`prepaid`, `amount_due`) by "Prepaid balances" (exact fractions); it does not re-rate usage
lines.

Usage (exit 0 on PASS, 1 on FAIL, 2 on usage errors or unreadable files):

    gpuledger_verify.py certificate --certificate CERT.json --bundle BUNDLE.ndjson --log-key KEY [--json]
    gpuledger_verify.py bundle --bundle BUNDLE.ndjson --log-key KEY [--invoice INVOICE.json] [--json]
    gpuledger_verify.py checkpoint --checkpoint NOTE --log-key KEY [--json]
    gpuledger_verify.py consistency --old NOTE1 --new NOTE2 --proof PROOF.json --log-key KEY [--json]

KEY is the signed-note verifier key string `<name>+<8 hex>+<base64(0x01 || public key)>`, or
the path of a file holding it. Its name is the log's origin: the origin every signed message is
checked under (never taken from the bundle).

Dependencies: `pynacl` (libsodium: Ed25519 key validity and strict signature verification) and
`rfc8785` (JCS), nothing else outside the standard library. No Ed25519 arithmetic of its own.
"""

from __future__ import annotations

import argparse
import base64
import bisect
import calendar
import contextlib
import copy
import dataclasses
import datetime
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import unicodedata
from dataclasses import dataclass, field
from decimal import Context as _DecimalContext
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple

import nacl.bindings
import rfc8785
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

__all__ = [
    "REASONS",
    "Failure",
    "Result",
    "VerifierKey",
    "Checkpoint",
    "parse_verifier_key",
    "load_verifier_key",
    "verify_checkpoint_note",
    "verify_certificate",
    "verify_bundle",
    "check_invoice_contract_lines",
    "PrepaidBook",
    "prepaid_members",
    "billing_periods",
    "contract_charges",
    "round_half_even",
    "minor_units",
    "verify_consistency_files",
    "verify_inclusion",
    "verify_consistency",
    "verify_strict",
    "valid_public_key",
    "check_envelope",
    "ADMISSION_REASONS",
    "leaf_hash",
    "merkle_root",
    "multiproof_root",
    "signed_message",
    "certificate_message",
    "jcs",
    "main",
]

# ---------------------------------------------------------------------------------------------
# Reason codes (PROTOCOL.md section 15), plus one for the `consistency` command, which section
# 15 does not cover.
# ---------------------------------------------------------------------------------------------

REASONS = (
    "malformed",
    "truncated",
    "order",
    "checkpoint_signature",
    "certificate_signature",
    "checkpoint_mismatch",
    "not_in_checkpoint",
    "leaf_invalid",
    "inclusion_proof",
    "unknown_key",
    "key_revoked",
    "key_not_allowed",
    "entry_signature",
    "wrong_tenant",
    "outside_period",
    "outside_scope",
    "entries_mismatch",
    "claim_mismatch",
    # Section 7: the log's receive times never decrease.
    "received_at_decreased",
    # Version 2: the admission rules (issue #12, section 6) rechecked from the bundle's entries,
    # with the same names as the ledger's rejection codes (section 8 of the change list).
    "node_not_allowed",
    "region_not_allowed",
    "unknown_tenant",
    "unknown_lease",
    "lease_tenant_mismatch",
    "too_old",
    "in_future",
    "price_in_past",
    "price_conflict",
    "price_in_invoiced_period",
    "price_not_forward",
    "already_registered",
    # Section 6.4a: a stream never claims a second twice.
    "overlapping_interval",
    # Section 5.10: settlements name an issued invoice of their tenant, in its currency, and
    # credit notes never total more than the invoice.
    "unknown_invoice",
    "currency_mismatch",
    "credit_above_total",
    "reference_used",
    # The fleet rules (section 6.7, fleet): a node key names registered nodes only, and a record
    # fits the node it names (its region, a GPU model it has, at most as many GPUs of that model,
    # no more energy than its GPUs can draw).
    "unknown_node",
    # A gpu_usage or energy record names another region than its node's registration (checked
    # right after unknown_node, before the GPU model, lease and energy rules).
    "wrong_region",
    "unknown_gpu_model",
    "over_capacity",
    "energy_over_bound",
    # Leases bind tenants to GPUs (issue #27; section 6.7, leases): a lease covers GPUs of its
    # nodes without overbooking any, and usage is billed only under a lease that covers it.
    "unknown_gpu",
    "lease_overbooked",
    "lease_not_on_node",
    "outside_lease_term",
    # Disputes (issue #27 item 5; section 6.7, disputes): a record_excluded entry names an earlier
    # record of its tenant (unknown_record), one not excluded before (already_excluded) and not
    # invoiced (record_invoiced). A bundle rechecks already_excluded only: its records come after
    # its context, so a record_excluded entry of the context names a record not yet seen.
    "unknown_record",
    "already_excluded",
    "record_invoiced",
    # Node updates (section 5.18; fleet.rs `check_node_update`): a node_updated entry that lists
    # a UUID the node had, changes a replaced board's model or MIG layout, or lowers the power
    # limit (invalid_field), or gives the node more than 64 GPUs (quantity_out_of_range). The
    # Rust bundle verifier reports these with the ledger's own codes (bundle.rs
    # `Reason::of_rejection`: Admission(invalid_field)), and so does this one.
    "invalid_field",
    "quantity_out_of_range",
    # Contracts (section 5.19, issue #28; section 6.7, contracts): a contract_registered entry's
    # term [term_from, term_to) overlaps the term of an earlier contract of the same tenant (a
    # tenant has at most one contract in force at any instant). An admission rule, after
    # unknown_tenant, already_registered, price_in_past and price_in_invoiced_period. Also a
    # contract_amended entry's extension of a term over another contract of its tenant.
    "contract_overlap",
    # Contract amendments (section 5.21; section 6.7, contract amendments): a contract_amended
    # entry names no earlier contract_registered entry of its tenant (body.contract).
    "unknown_contract",
)
ADMISSION_REASONS = REASONS[REASONS.index("node_not_allowed"):]
CONSISTENCY_REASON = "consistency_proof"  # not in section 15: see README "Where the document was unclear"


class Failure(Exception):
    """A verification failure: a stable reason code, the item at fault, a message for people."""

    def __init__(self, reason: str, item: str, message: str):
        assert reason in REASONS or reason == CONSISTENCY_REASON, reason
        super().__init__(f"{reason}: {item}: {message}")
        self.reason = reason
        self.item = item
        self.message = message


class UsageError(Exception):
    """Bad command line, unreadable file or unusable verifier key (exit status 2)."""


class FieldError(Exception):
    """An envelope or body check failed (the ledger's own reason code, section 6.6)."""

    def __init__(self, code: str, field_name: str, message: str):
        super().__init__(f"{code}: {field_name}: {message}")
        self.code = code
        self.field = field_name
        self.message = message


@dataclass
class Result:
    ok: bool
    reason: Optional[str]
    item: Optional[str]
    message: str
    summary: Dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> Dict[str, Any]:
        return {
            "result": "PASS" if self.ok else "FAIL",
            "reason": self.reason,
            "item": self.item,
            "message": self.message,
            "summary": self.summary,
        }

    def line(self) -> str:
        if self.ok:
            return f"PASS: {self.message}"
        return f"FAIL: {self.reason}: {self.item}: {self.message}"


# ---------------------------------------------------------------------------------------------
# Limits (Appendix A) and value forms (section 2)
# ---------------------------------------------------------------------------------------------

MAX_ID_LEN = 128
MAX_DECIMAL_LEN = 40
MAX_SCALE = 9
MAX_SIGNIFICANT_DIGITS = 28
MAX_GPU_COUNT = Decimal(1024)
MAX_INTERVAL_SECONDS = 86400
MAX_GPU_SECONDS = Decimal(1024 * 86400)
MAX_KWH_PER_RECORD = Decimal(100000)
MAX_PRICE_PER_GPU_HOUR = Decimal(1000000)
MAX_SPOT_SCHEDULE_AHEAD_SECONDS = 604800
MAX_SEQ = 2**53 - 1
MAX_INDEX = 2**53 - 1
MAX_ENVELOPE_BYTES = 8192
MIN_TIME = 946684800  # 2000-01-01T00:00:00Z
MAX_TIME = 253402300799  # 9999-12-31T23:59:59Z
MAX_ELECTRICITY_PRICE = Decimal(1000)
MIN_PUE = Decimal(1)
MAX_PUE = Decimal(5)
MAX_CARBON_G_PER_KWH = Decimal(5000)
MAX_AMOUNT = Decimal(10**12)  # from the schemas' descriptions (invoice_issued, payment, credit_note)
MAX_NOTE_BYTES = 500
MAX_EXCLUSION_REASON_BYTES = 500  # record_excluded.reason (section 5.17), contract_amended.reason (5.21)
# Ids no body may give a thing it names (section 2.3; crates/core/src/ids.rs RESERVED_IDS).
RESERVED_IDS = frozenset({"ledger"})
MAX_EXTERNAL_REFERENCE_BYTES = 128
MAX_SCOPE_NODES = 1000
MAX_SIGNER_NODES = 256  # version 2: signer_key_registered.nodes
MAX_SIGNER_REGIONS = 64  # version 2: signer_key_registered.regions
MAX_VOLUME_TIERS = 16
MAX_TIER_BOUND_GPU_HOURS = Decimal(1000000000)
MAX_NODE_GPUS = 64  # node_registered.gpus; and the most GPUs a node has after its node_updated entries
MAX_MIG_SLICES = 8  # limits.rs: the most compute slices of a MIG-partitioned GPU, profiles and instances
GPU_UNITS = 840  # limits.rs: a GPU in units of 1/840 (the lcm of 1..MAX_MIG_SLICES), for the energy bound
MAX_GPU_INDEX = 2**32 - 1  # node_registered.gpus[i].index is a u32
MAX_GPU_UUID_LEN = 128  # node_registered.gpus[i].uuid: 1 to 128 visible ASCII characters
MAX_WATTS_PER_GPU = Decimal(5000)  # node_registered.max_watts_per_gpu
MAX_LEASE_NODES = 64  # lease_registered.nodes: 1 to 64 items
MAX_LEASE_GPUS = 64  # lease_registered.nodes[i].gpus: 1 to 64 indexes (MAX_NODE_GPUS)
# lease_registered.nodes[i].count: above 0, at most MAX_NODE_GPUS x MAX_MIG_SLICES = 512 (a count of a
# MIG profile's instances)
MAX_LEASE_COUNT = Decimal(MAX_NODE_GPUS * MAX_MIG_SLICES)
# contract_registered (section 5.19): a term of at most 3660 days, 1 to 16 fees, a fee's name of
# 1 to 100 bytes of display text; its enumerations.
MAX_CONTRACT_TERM_SECONDS = 316224000
MAX_CONTRACT_FEES = 16
MAX_FEE_NAME_BYTES = 100
CONTRACT_BILLING_PERIODS = ("month", "quarter", "year")
CONTRACT_BILLING_ANCHORS = ("calendar", "anniversary")
FEE_MEMBERS = ("name", "amount", "timing", "category")  # contract_registered.fees[i]: these, required
# And optionally the lease the fee rents (an SLA is measured on it) and the GPU-hours it
# includes (an array, docs/RATING.md "Included GPU-hours and overage").
FEE_OPTIONAL_MEMBERS = ("lease", "included")
FEE_STRING_MEMBERS = FEE_MEMBERS + ("lease",)  # the fee's members that are strings
# contract_registered.fees[i].included (section 5.19): 1 to MAX_INCLUDED_MODELS entries of exactly
# {gpu_model, gpu_hours, overage_rate}, strings.
MAX_INCLUDED_MODELS = 8
INCLUDED_MEMBERS = ("gpu_model", "gpu_hours", "overage_rate")
# contract_registered.sla (section 5.19, docs/RATING.md "SLA credits"): exactly {target, credits},
# 1 to MAX_SLA_STEPS steps of exactly {below, percent}; percentages are amounts (at most 4 decimals).
MAX_SLA_STEPS = 8
SLA_MEMBERS = ("target", "credits")
SLA_STEP_MEMBERS = ("below", "percent")
ONE_HUNDRED = Decimal(100)
FEE_TIMINGS = ("advance", "arrears", "once")
FEE_CATEGORIES = ("compute", "networking", "storage", "support", "other")
# prepayment (section 5.20): where a lot's money came from, in drawing order (grants first).
PREPAYMENT_SOURCES = ("grant", "purchase")
ENERGY_BOUND_MARGIN_PERCENT = 5  # an energy record may exceed GPUs x watts x seconds by 5 %
WATT_SECONDS_PER_KWH = 3600000

# One protocol version for envelopes and leaves (3 since issue #27; 1 and 2 are retired).
PROTOCOL_VERSION = 3
MESSAGE_TAG_PREFIX = b"gpuledger/v3/"
MIN_RECORD_AGE_SECONDS, MAX_RECORD_AGE_SECONDS = 3600, 31536000  # log_policy.max_record_age_seconds
MIN_FUTURE_SKEW_SECONDS, MAX_FUTURE_SKEW_SECONDS = 0, 3600  # log_policy.max_future_skew_seconds
DEFAULT_MAX_RECORD_AGE_SECONDS = 3024000  # 35 days, in force before any log_policy entry
DEFAULT_MAX_FUTURE_SKEW_SECONDS = 300

# Exact arithmetic: values are at most 40 characters; products of a few of them need far fewer
# than 1000 digits, so nothing computed here is ever rounded.
DEC = _DecimalContext(prec=1000, Emax=10**6, Emin=-(10**6))

DECIMAL_RE = re.compile(r"(0|[1-9][0-9]*)(\.[0-9]{0,8}[1-9])?")
EXACT_DECIMAL_RE = re.compile(r"(0|[1-9][0-9]*)(\.[0-9]*[1-9])?")  # section 13.2, no length limit
TIMESTAMP_RE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})Z")
ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}")
KEY_ID_RE = re.compile(r"[0-9a-f]{16}")
CURRENCY_RE = re.compile(r"[A-Z]{3}")
B64_RE = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")
AMOUNT_RE = re.compile(r"(0|[1-9][0-9]*)(\.[0-9]{1,4})?")
HEX64_RE = re.compile(r"[0-9a-f]{64}")
INVOICE_NUMBER_RE = re.compile(r"INV-[0-9]{6}")
CERT_ID_RE = re.compile(r"CERT-[0-9]{6,}")
SIZE_RE = re.compile(r"0|[1-9][0-9]*")
GPU_UUID_RE = re.compile(r"[\x21-\x7e]{1,128}")  # visible ASCII
GPU_MEMBERS = ("index", "uuid", "model")  # required; `mig` is optional (GPU_OPTIONAL_MEMBERS)
GPU_OPTIONAL_MEMBERS = ("mig",)
MIG_MEMBERS = ("slices", "instances")
MIG_INSTANCE_MEMBERS = ("profile", "count")
MAX_U32 = 2**32 - 1


def is_id(value: Any) -> bool:
    return isinstance(value, str) and ID_RE.fullmatch(value) is not None


def is_int(value: Any) -> bool:
    # bool is a subclass of int in Python; JSON true is not an integer.
    return type(value) is int


def b64decode_canonical(value: Any, length: Optional[int] = None) -> bytes:
    """Standard base64 with padding, no whitespace, unused bits zero (section 2.4)."""
    if not isinstance(value, str) or B64_RE.fullmatch(value) is None:
        raise ValueError("not standard padded base64")
    raw = base64.b64decode(value, validate=True)
    if base64.b64encode(raw).decode("ascii") != value:
        raise ValueError("non-canonical base64 (unused bits not zero)")
    if length is not None and len(raw) != length:
        raise ValueError(f"base64 of {len(raw)} bytes, expected {length}")
    return raw


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def format_ts(unix: int) -> str:
    """Section 2.2's form of Unix seconds."""
    return datetime.datetime.fromtimestamp(unix, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_timestamp(value: Any) -> int:
    """Section 2.2: returns Unix seconds, or raises ValueError."""
    if not isinstance(value, str):
        raise TypeError("not a string")
    m = TIMESTAMP_RE.fullmatch(value)
    if m is None:
        raise ValueError("not YYYY-MM-DDTHH:MM:SSZ")
    y, mo, d, h, mi, s = (int(g) for g in m.groups())
    try:
        dt = datetime.datetime(y, mo, d, h, mi, s)
    except ValueError as e:
        raise ValueError(f"not a real date and time ({e})") from None
    unix = calendar.timegm(dt.timetuple())
    if not MIN_TIME <= unix <= MAX_TIME:
        raise ValueError("outside 2000-01-01T00:00:00Z .. 9999-12-31T23:59:59Z")
    return unix


def significant_digits(text: str) -> int:
    digits = text.replace(".", "").lstrip("0")
    return len(digits)


def parse_exact_decimal(value: Any) -> Decimal:
    """Certificate decimals (section 13.2): the spelling of 2.1 without its length limits."""
    if not isinstance(value, str) or EXACT_DECIMAL_RE.fullmatch(value) is None:
        raise ValueError(f"{value!r} is not a canonical decimal string")
    return Decimal(value)


def dec_str(value: Decimal) -> str:
    """Canonical spelling of an exact Decimal (no exponent, no trailing zeros)."""
    s = format(value, "f")
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    if s in ("", "-0"):
        s = "0"
    return s


# ---------------------------------------------------------------------------------------------
# JSON: strict parsing and RFC 8785 canonical bytes (section 2.6)
# ---------------------------------------------------------------------------------------------


def _no_duplicates(pairs):
    obj = {}
    for k, v in pairs:
        if k in obj:
            raise ValueError(f"member name {k!r} repeats")
        obj[k] = v
    return obj


def _no_float(text):
    raise ValueError(f"number {text!r} is not an integer in plain decimal")


def _no_constant(text):
    raise ValueError(f"{text} is not JSON")


def parse_json(data: bytes) -> Any:
    """Parse UTF-8 JSON strictly: no repeated member names, no fractions/exponents, no NaN."""
    text = data.decode("utf-8")  # strict: invalid UTF-8 raises
    return json.loads(
        text,
        object_pairs_hook=_no_duplicates,
        parse_float=_no_float,
        parse_constant=_no_constant,
    )


def jcs(value: Any) -> bytes:
    return rfc8785.dumps(value)


# ---------------------------------------------------------------------------------------------
# Ed25519 through libsodium (PyNaCl): key validity (section 3.1, version 2) and strict
# verification (section 3.3). No curve arithmetic of our own decides anything here.
# ---------------------------------------------------------------------------------------------

_KEY_VALID_CACHE: Dict[bytes, bool] = {}


def valid_public_key(pub: bytes) -> bool:
    """Version 2, section 3.1: exactly 32 bytes that decode to a point of edwards25519, encoded
    canonically (re-encoding gives the same bytes: no y >= p, no x = 0 with the sign bit set), not
    of small order and torsion-free ([L]A is the identity). libsodium's
    crypto_core_ed25519_is_valid_point checks exactly the last four."""
    if not isinstance(pub, (bytes, bytearray)) or len(pub) != 32:
        return False
    pub = bytes(pub)
    ok = _KEY_VALID_CACHE.get(pub)
    if ok is None:
        ok = bool(nacl.bindings.crypto_core_ed25519_is_valid_point(pub))
        if len(_KEY_VALID_CACHE) > 4096:
            _KEY_VALID_CACHE.clear()
        _KEY_VALID_CACHE[pub] = ok
    return ok


def verify_strict(pub: bytes, message: bytes, sig: bytes) -> bool:
    """Strict Ed25519 (section 3.3; ed25519-dalek verify_strict semantics), one verdict everywhere.

    A key that is not valid by section 3.1 (valid_public_key) verifies nothing. For a valid key,
    libsodium's crypto_sign_verify_detached (PyNaCl VerifyKey.verify) gives the verdict: S < L,
    R not of small order, and the cofactorless equation with the 32 bytes of R compared to the
    encoding of [S]B - [k]A (so an R that is no point, or not canonically encoded, never
    verifies). libsodium does not check that A is torsion-free; valid_public_key does."""
    if len(sig) != 64 or not valid_public_key(pub):
        return False
    try:
        VerifyKey(bytes(pub)).verify(bytes(message), bytes(sig))
    except BadSignatureError:
        return False
    return True


def key_id_of(pub: bytes) -> str:
    """Section 3.2."""
    return hashlib.sha256(pub).digest()[:8].hex()


# ---------------------------------------------------------------------------------------------
# Merkle trees (section 8): RFC 9162 verification algorithms
# ---------------------------------------------------------------------------------------------

EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def verify_inclusion(index: int, size: int, lhash: bytes, proof: List[bytes], root: bytes) -> bool:
    """RFC 9162 section 2.1.3.2."""
    if index < 0 or index >= size:
        return False
    fn, sn, r = index, size - 1, lhash
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(first: int, second: int, first_hash: bytes, second_hash: bytes, proof: List[bytes]) -> bool:
    """RFC 9162 section 2.1.4.2 (with the m = n and m = 0 cases of RFC 6962 2.1.2)."""
    if first < 0 or first > second:
        return False
    if first == second:
        return not proof and first_hash == second_hash
    if first == 0:
        # The empty tree is a prefix of every tree; RFC 6962 defines no proof for it.
        return not proof and first_hash == EMPTY_ROOT
    if not proof:
        return False
    path = list(proof)
    if first & (first - 1) == 0:
        path.insert(0, first_hash)
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == first_hash and sr == second_hash


class StreamingMerkle:
    """RFC 6962 MTH over leaf hashes appended one at a time; memory O(log n)."""

    def __init__(self):
        self._stack: List[Tuple[int, bytes]] = []  # (subtree size, hash), sizes strictly decreasing
        self.count = 0

    def append_leaf_hash(self, h: bytes) -> None:
        size = 1
        while self._stack and self._stack[-1][0] == size:
            _, left = self._stack.pop()
            h = node_hash(left, h)
            size *= 2
        self._stack.append((size, h))
        self.count += 1

    def root(self) -> bytes:
        if not self._stack:
            return EMPTY_ROOT
        h = self._stack[-1][1]
        for _, left in reversed(self._stack[:-1]):
            h = node_hash(left, h)
        return h


def merkle_root(leaf_hashes: List[bytes]) -> bytes:
    m = StreamingMerkle()
    for h in leaf_hashes:
        m.append_leaf_hash(h)
    return m.root()


def multiproof_root(size: int, leaves: List[Tuple[int, bytes]], nodes: Iterator[bytes]) -> bytes:
    """The root of the tree of `size` from `leaves` ((index, leaf hash), indexes strictly
    increasing) and the nodes of their multi-proof (section 14, version 3), by the recursion over
    RFC 6962 subtrees [lo, hi): a subtree with no leaf of the bundle takes the next node; a
    one-leaf subtree whose leaf is in the bundle takes that leaf's hash; any other joins its
    halves (split at the largest power of two below hi - lo), left first. Raises ValueError when
    the nodes run out, some are left over, or an index repeats or is not below `size`."""
    pos = 0

    def visit(lo: int, hi: int) -> bytes:
        nonlocal pos
        if pos < len(leaves) and leaves[pos][0] < lo:
            raise ValueError(f"index {leaves[pos][0]} repeats or is out of order")
        if pos >= len(leaves) or leaves[pos][0] >= hi:
            node = next(nodes, None)
            if node is None:
                raise ValueError("the multi-proof has too few nodes")
            return node
        if hi - lo == 1:
            pos += 1
            return leaves[pos - 1][1]
        k = 1 << ((hi - lo - 1).bit_length() - 1)
        left = visit(lo, lo + k)
        return node_hash(left, visit(lo + k, hi))

    root = visit(0, size) if size > 0 else EMPTY_ROOT
    if pos != len(leaves):
        raise ValueError(f"index {leaves[pos][0]} is not below the tree size {size}")
    if next(nodes, None) is not None:
        raise ValueError("the multi-proof has more nodes than the tree needs")
    return root


# ---------------------------------------------------------------------------------------------
# Signed notes and checkpoints (section 9)
# ---------------------------------------------------------------------------------------------

NOTE_SIG_PREFIX = "\u2014 "  # EM DASH, space


@dataclass(frozen=True)
class VerifierKey:
    name: str
    note_key_id: int  # 4-byte note key id
    public_key: bytes
    text: str

    @property
    def envelope_key_id(self) -> str:
        """The log key's key id (section 3.2), used in the ledger's own envelopes (6.1)."""
        return key_id_of(self.public_key)


def note_key_id(name: str, pub: bytes) -> int:
    return int.from_bytes(hashlib.sha256(name.encode("utf-8") + b"\n\x01" + pub).digest()[:4], "big")


def _valid_note_name(name: str) -> bool:
    return name != "" and "+" not in name and not any(ch.isspace() for ch in name)


def parse_verifier_key(text: str) -> VerifierKey:
    text = text.strip()
    # The base64 part may itself hold '+': split at the first two only (as Go's note package does).
    parts = text.split("+", 2)
    if len(parts) != 3:
        raise UsageError("verifier key must be <name>+<8 hex digits>+<base64(0x01 || public key)>")
    name, hexid, key64 = parts
    if not _valid_note_name(name):
        raise UsageError(f"verifier key name {name!r} is empty or holds whitespace")
    if re.fullmatch(r"[0-9a-f]{8}", hexid) is None:
        raise UsageError(f"verifier key id {hexid!r} is not 8 lower-case hex digits")
    try:
        raw = b64decode_canonical(key64, 33)
    except ValueError as e:
        raise UsageError(f"verifier key: {e}") from None
    if raw[0] != 0x01:
        raise UsageError("verifier key algorithm byte is not 0x01 (Ed25519)")
    pub = raw[1:]
    if note_key_id(name, pub) != int(hexid, 16):
        raise UsageError(f"verifier key id {hexid} does not match its name and public key")
    if not valid_public_key(pub):
        raise UsageError("verifier key public key is not a valid Ed25519 key (a canonically encoded point, "
                         "not of small order, torsion-free)")
    return VerifierKey(name, int(hexid, 16), pub, text)


def load_verifier_key(arg: str) -> VerifierKey:
    """KEY is the verifier key string, or the path of a file holding it."""
    if os.path.isfile(arg):
        try:
            with open(arg, "r", encoding="utf-8") as f:
                return parse_verifier_key(f.read())
        except OSError as e:
            raise UsageError(f"cannot read {arg}: {e}") from None
        except UnicodeDecodeError:
            raise UsageError(f"{arg} is not UTF-8") from None
    return parse_verifier_key(arg)


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes
    note: str


def verify_checkpoint_note(note: Any, key: VerifierKey, item: str = "checkpoint") -> Checkpoint:
    """Parse a C2SP signed note holding a C2SP tlog-checkpoint and check it (section 9).

    Raises Failure(checkpoint_signature)."""

    def bad(msg: str) -> Failure:
        return Failure("checkpoint_signature", item, msg)

    if isinstance(note, bytes):
        try:
            note = note.decode("utf-8")
        except UnicodeDecodeError:
            raise bad("note is not UTF-8") from None
    if not isinstance(note, str):
        raise bad("note is not a string")
    if any((ord(ch) < 0x20 and ch != "\n") or ord(ch) == 0x7F for ch in note):
        raise bad("note holds a control character other than LF")
    if not note.endswith("\n"):
        raise bad("note does not end with LF")
    split = note.rfind("\n\n")
    if split < 0:
        raise bad("note has no blank line before its signatures")
    body, sigs = note[: split + 1], note[split + 2 :]
    if sigs == "":
        raise bad("note has no signature lines")
    parsed = []
    for line in sigs[:-1].split("\n"):
        if not line.startswith(NOTE_SIG_PREFIX):
            raise bad(f"signature line {line[:40]!r} does not start with '\u2014 '")
        rest = line[len(NOTE_SIG_PREFIX) :]
        name, sep, sig64 = rest.partition(" ")
        if not sep or not _valid_note_name(name) or sig64 == "":
            raise bad("malformed signature line")
        try:
            raw = b64decode_canonical(sig64)
        except ValueError:
            raise bad("signature is not standard base64") from None
        if len(raw) < 5:
            raise bad("signature too short")
        parsed.append((name, int.from_bytes(raw[:4], "big"), raw[4:]))

    lines = body.split("\n")
    if len(lines) != 4 or lines[3] != "":
        raise bad("checkpoint body is not exactly three lines (origin, size, root; no extension lines)")
    origin, size_text, root64 = lines[0], lines[1], lines[2]
    if origin == "":
        raise bad("empty origin")
    if SIZE_RE.fullmatch(size_text) is None or int(size_text) > MAX_INDEX + 1:
        raise bad(f"tree size {size_text!r} is not a decimal without leading zeros")
    try:
        root = b64decode_canonical(root64, 32)
    except ValueError as e:
        raise bad(f"root hash: {e}") from None

    mine = [p for p in parsed if p[0] == key.name and p[1] == key.note_key_id]
    if not mine:
        raise bad(f"no signature by the verifier key {key.name}+{key.note_key_id:08x}")
    body_bytes = body.encode("utf-8")
    for _, _, sig in mine:
        if not verify_strict(key.public_key, body_bytes, sig):
            raise bad("the signature by the verifier key does not verify over the checkpoint body")
    if origin != key.name:
        raise bad(f"checkpoint origin {origin!r} is not the verifier key's name {key.name!r}")
    return Checkpoint(origin, int(size_text), root, note)


# ---------------------------------------------------------------------------------------------
# Envelopes and bodies (sections 4 and 5)
# ---------------------------------------------------------------------------------------------

NODE_KINDS = ("gpu_usage", "energy")
PRICE_KINDS = ("spot_price", "rate_card", "region_params", "volume_tiers", "tenant_plan")
MARKET_KINDS = ("spot_price",)
LEDGER_KINDS = (
    "signer_key_registered",
    "signer_key_revoked",
    "rate_card",
    "region_params",
    "lease_registered",
    "invoice_issued",
    "payment",
    "credit_note",
    "volume_tiers",
    "tenant_plan",
    "certificate_issued",
    "tenant_registered",  # version 2
    "log_policy",  # version 2
    "node_registered",  # the fleet: a node, its region and its GPUs
    "record_excluded",  # disputes: a record of a tenant excluded from rating (section 5.17)
    "node_updated",  # the fleet: capacity added to a registered node (GPUs, a replaced board, watts)
    "contract_registered",  # contracts: a tenant's term, fees and commitment (section 5.19, issue #28)
    "prepayment",  # prepaid balances: a tenant's lot, a top-up or a grant (section 5.20)
    "contract_amended",  # contracts: a contract's term ended early or extended (section 5.21)
)
KINDS = NODE_KINDS + MARKET_KINDS + LEDGER_KINDS
RECORD_KINDS = NODE_KINDS
ROLE_KINDS = {"node": NODE_KINDS, "market": MARKET_KINDS, "ledger": LEDGER_KINDS}
ENVELOPE_MEMBERS = ("v", "kind", "signer", "key_id", "seq", "body", "sig")
LEAF_MEMBERS = ("v", "index", "received_at", "prev", "envelope")


def _message(kind: str, origin: str, unsigned_jcs: bytes) -> bytes:
    return MESSAGE_TAG_PREFIX + kind.encode("ascii") + b"\n" + origin.encode("utf-8") + b"\n" + unsigned_jcs


def signed_message(envelope: Dict[str, Any], origin: str) -> bytes:
    """Section 4.1: "gpuledger/v3/" || kind || LF || origin || LF || JCS(envelope
    without sig). `origin` is the log's checkpoint origin, the verifier key's name."""
    unsigned = {k: v for k, v in envelope.items() if k != "sig"}
    return _message(envelope["kind"], origin, jcs(unsigned))


def certificate_message(cert: Dict[str, Any]) -> bytes:
    """Section 13.4."""
    unsigned = {k: v for k, v in cert.items() if k != "sig"}
    return b"gpuledger-certificate/v1\n" + jcs(unsigned)


def _is_control(c: str) -> bool:
    """Unicode category Cc, as Rust's `char::is_control`."""
    return unicodedata.category(c) == "Cc"


# The invisible format characters text shown to people may not hold (core::ids
# `display_char_refusal`): (first, last, why), inclusive code point ranges.
_DISPLAY_REFUSED = (
    (0x2028, 0x2029, "a line or paragraph separator"),
    (0x061C, 0x061C, "a bidirectional mark"),
    (0x200E, 0x200F, "a bidirectional mark"),
    (0x202A, 0x202E, "a bidirectional embedding or override"),
    (0x2066, 0x2069, "a bidirectional isolate"),
    (0x00AD, 0x00AD, "an invisible format character"),
    (0x034F, 0x034F, "an invisible format character"),
    (0x180E, 0x180E, "an invisible format character"),
    (0x200B, 0x200B, "an invisible format character"),
    (0x2060, 0x2064, "an invisible format character"),
    (0x206A, 0x206F, "a deprecated format character"),
    (0xFEFF, 0xFEFF, "a byte-order mark (zero-width no-break space)"),
    (0xFFF9, 0xFFFB, "an interlinear annotation character"),
    (0x115F, 0x1160, "a Hangul filler"),
    (0x3164, 0x3164, "a Hangul filler"),
    (0xFFA0, 0xFFA0, "a Hangul filler"),
    (0xE0000, 0xE007F, "a tag character"),
)


def display_char_refusal(c: str) -> Optional[str]:
    """Why `c` may not appear in text shown to people (a display name, a fee's name), or None
    when it may: control characters (Cc), the line and paragraph separators, the bidirectional
    marks, embeddings, overrides and isolates, and the invisible format characters that make two
    strings look alike (core::ids `display_char_refusal`). The zero-width joiner and non-joiner
    (U+200D, U+200C) are allowed. A lone surrogate (which JSON's \\u escapes can spell, and no
    Rust string holds) is refused too."""
    if _is_control(c):
        return "a control character"
    o = ord(c)
    if 0xD800 <= o <= 0xDFFF:
        return "a lone surrogate (not a Unicode scalar value)"
    for first, last, why in _DISPLAY_REFUSED:
        if first <= o <= last:
            return why
    return None


def display_text_refusal(text: str, max_bytes: int) -> Optional[str]:
    """core::ids `check_display_text`: text shown to people is not empty or only white space
    (Unicode White_Space, as Rust's `trim`; str.strip also strips U+001C..U+001F, control
    characters refused anyway), at most `max_bytes` bytes of UTF-8, and holds no character
    display_char_refusal refuses. Returns why not, or None. Unlike record_excluded.reason and
    external_reference, white space around the text is allowed."""
    if not text.strip():
        return "must not be empty or only white space"
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        return f"is {size} bytes long, above {max_bytes}"
    for i, c in enumerate(text, 1):
        why = display_char_refusal(c)
        if why is not None:
            return (f"character {i} is U+{ord(c):04X}, {why}, which is not allowed in text shown to "
                    "people")
    return None


class _Body:
    """Field-by-field checks of one body, with the ledger's reason codes."""

    def __init__(self, body: Dict[str, Any], members: Dict[str, bool], int_members: Tuple[str, ...] = (),
                 array_members: Tuple[str, ...] = (), object_members: Tuple[str, ...] = ()):
        self.body = body
        for name in body:
            if name not in members:
                raise FieldError("malformed", f"body.{name}", "unknown member")
        for name, required in members.items():
            if name not in body:
                if required:
                    raise FieldError("malformed", f"body.{name}", "missing")
                continue
            value = body[name]
            if name in int_members:
                # Section 2.5: a JSON integer 0 to 2^53 - 1; anything else is malformed (Rust's
                # serde reads these members as u64 before any rule).
                if not is_int(value) or not 0 <= value <= MAX_INDEX:
                    raise FieldError("malformed", f"body.{name}", "not an integer 0 to 2^53 - 1")
            elif name in array_members:
                if not isinstance(value, list):
                    raise FieldError("malformed", f"body.{name}", "not an array (null is not allowed)")
            elif name in object_members:
                if not isinstance(value, dict):
                    raise FieldError("malformed", f"body.{name}", "not an object (null is not allowed)")
            elif not isinstance(value, str):
                raise FieldError("malformed", f"body.{name}", "not a string (null is not allowed)")

    def id_list(self, name: str, limit: int, limit_name: str) -> frozenset:
        """Version 2, section 5.4: an array of 1..=limit identifiers, strictly increasing in byte
        order. Empty: invalid_field; too many: quantity_out_of_range; an element that is not a
        string: malformed; not an identifier, or out of order / repeated: invalid_field."""
        value = self.body[name]
        f = f"body.{name}"
        if not value:
            raise FieldError("invalid_field", f, "an empty array (at least one identifier is required)")
        if len(value) > limit:
            raise FieldError("quantity_out_of_range", f, f"{len(value)} elements, above {limit_name} = {limit}")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise FieldError("malformed", f"{f}[{i}]", "not a string")
            if not is_id(item):
                raise FieldError("invalid_field", f"{f}[{i}]", f"{item!r} is not an identifier")
            if item in RESERVED_IDS:
                raise FieldError("invalid_field", f"{f}[{i}]", f"{item!r} is reserved for the ledger itself")
        for i in range(len(value) - 1):
            if value[i].encode("utf-8") >= value[i + 1].encode("utf-8"):
                raise FieldError("invalid_field", f, f"not strictly increasing in byte order: {value[i]!r} "
                                 f"then {value[i + 1]!r} (sorted, no repeats)")
        return frozenset(value)

    def has(self, name: str) -> bool:
        return name in self.body

    def id(self, name: str) -> str:
        value = self.body[name]
        if not is_id(value):
            raise FieldError("invalid_field", f"body.{name}", f"{value!r} is not an identifier")
        if value in RESERVED_IDS:
            raise FieldError("invalid_field", f"body.{name}", f"{value!r} is reserved for the ledger itself")
        return value

    def timestamp(self, name: str) -> int:
        try:
            return parse_timestamp(self.body[name])
        except ValueError as e:
            raise FieldError("invalid_field", f"body.{name}", f"{self.body[name]!r}: {e}") from None

    def decimal(self, name: str, lo: Optional[Decimal] = None, hi: Optional[Decimal] = None,
                lo_exclusive: bool = False) -> Decimal:
        value = self.body[name]
        f = f"body.{name}"
        if value.startswith("-") and EXACT_DECIMAL_RE.fullmatch(value[1:]):
            raise FieldError("negative_quantity", f, f"{value!r} is negative")
        if len(value) > MAX_DECIMAL_LEN or DECIMAL_RE.fullmatch(value) is None:
            raise FieldError("invalid_field", f, f"{value!r} is not a canonical decimal")
        if significant_digits(value) > MAX_SIGNIFICANT_DIGITS:
            raise FieldError("invalid_field", f, f"{value!r} has more than 28 significant digits")
        d = Decimal(value)
        if lo is not None and (d < lo or (lo_exclusive and d == lo)):
            raise FieldError("quantity_out_of_range", f, f"{value} is below its limit {dec_str(lo)}")
        if hi is not None and d > hi:
            raise FieldError("quantity_out_of_range", f, f"{value} is above its limit {dec_str(hi)}")
        return d

    def amount(self, name: str, positive: bool) -> Decimal:
        return _amount(self.body[name], f"body.{name}", positive)

    def currency(self, name: str) -> str:
        value = self.body[name]
        if CURRENCY_RE.fullmatch(value) is None:
            raise FieldError("invalid_field", f"body.{name}", f"{value!r} is not three upper-case letters")
        return value

    def enum(self, name: str, allowed: Tuple[str, ...]) -> str:
        value = self.body[name]
        if value not in allowed:
            raise FieldError("invalid_field", f"body.{name}", f"{value!r} is not one of {', '.join(allowed)}")
        return value

    def pattern(self, name: str, regex: "re.Pattern[str]", what: str) -> str:
        value = self.body[name]
        if regex.fullmatch(value) is None:
            raise FieldError("invalid_field", f"body.{name}", f"{value!r} is not {what}")
        return value

    def integer(self, name: str, lo: int, hi: int) -> int:
        value = self.body[name]
        if not lo <= value <= hi:
            raise FieldError("quantity_out_of_range", f"body.{name}", f"{value} is outside {lo}..{hi}")
        return value


def _amount(value: str, f: str, positive: bool) -> Decimal:
    """An amount (section 5.10, payment.amount) at field `f`: digits, at most 4 after the point,
    at most 24 characters (a minus sign: negative_quantity; another spelling: invalid_field),
    at most 10^12 and, if `positive`, above 0 (quantity_out_of_range)."""
    if value.startswith("-"):
        raise FieldError("negative_quantity", f, f"{value!r} is negative")
    if len(value) > 24 or AMOUNT_RE.fullmatch(value) is None:
        raise FieldError("invalid_field", f, f"{value!r} is not an amount (digits, at most 4 decimals)")
    d = Decimal(value)
    if positive and d <= 0:
        raise FieldError("quantity_out_of_range", f, f"{value} is not above 0")
    if d > MAX_AMOUNT:
        raise FieldError("quantity_out_of_range", f, f"{value} is above 1000000000000")
    return d


def _interval(b: _Body) -> Tuple[int, int]:
    """The interval rules of section 5.1. The clock rules (too_old, in_future) are admission rules
    in version 2 (they need the log policy in force): LogView.check_admission."""
    start = b.timestamp("start")
    end = b.timestamp("end")
    if end <= start:
        raise FieldError("empty_interval", "body.end", "end is not after start")
    if end - start > MAX_INTERVAL_SECONDS:
        raise FieldError("interval_too_long", "body.end", f"end - start is {end - start} s, above 86400 s")
    return start, end


def _tiers(b: _Body) -> None:
    """Section 5.11: volume_tiers.tiers."""
    tiers = b.body["tiers"]
    if not tiers:
        raise FieldError("invalid_field", "body.tiers", "no tiers (at least one is required)")
    if len(tiers) > MAX_VOLUME_TIERS:
        raise FieldError("quantity_out_of_range", "body.tiers", f"{len(tiers)} tiers, above {MAX_VOLUME_TIERS}")
    previous = Decimal(0)
    for i, tier in enumerate(tiers):
        f = f"body.tiers[{i}]"
        if not isinstance(tier, dict):
            raise FieldError("malformed", f, "not an object")
        try:
            t = _Body(tier, {"up_to_gpu_hours": False, "price_per_gpu_hour": True})
        except FieldError as e:
            raise FieldError(e.code, f + e.field[len("body"):], e.message) from None
        last = i == len(tiers) - 1
        if "up_to_gpu_hours" in tier:
            if last:
                raise FieldError("invalid_field", f"{f}.up_to_gpu_hours", "the last tier is the open tier: no bound")
            try:
                bound = t.decimal("up_to_gpu_hours", Decimal(0), MAX_TIER_BOUND_GPU_HOURS)
            except FieldError as e:
                raise FieldError(e.code, f"{f}.up_to_gpu_hours", e.message) from None
            if bound <= previous:
                # Bounds increase strictly (the first above 0): a wrong value, not a limit.
                raise FieldError("invalid_field", f"{f}.up_to_gpu_hours",
                                 f"{dec_str(bound)} is not above the previous bound {dec_str(previous)}")
            previous = bound
        elif not last:
            raise FieldError("invalid_field", f"{f}.up_to_gpu_hours", "missing on a tier that is not the last")
        try:
            t.decimal("price_per_gpu_hour", Decimal(0), MAX_PRICE_PER_GPU_HOUR)
        except FieldError as e:
            raise FieldError(e.code, f"{f}.price_per_gpu_hour", e.message) from None


def _node_gpus(b: _Body) -> List[Dict[str, Any]]:
    """node_registered.gpus (and node_updated.gpus) as serde reads them: objects {index, uuid,
    model} with an optional `mig` {slices, instances: [{profile, count}]} (no null, no other
    member; integers u32). The members' presence and types are checked for every GPU first
    (malformed), as the ledger reads the whole body before it checks any value; the values come
    after the body's ids (_check_node_gpus)."""
    gpus = b.body["gpus"]
    for i, gpu in enumerate(gpus):
        f = f"body.gpus[{i}]"
        if not isinstance(gpu, dict):
            raise FieldError("malformed", f, "not an object")
        for name in gpu:
            if name not in GPU_MEMBERS and name not in GPU_OPTIONAL_MEMBERS:
                raise FieldError("malformed", f"{f}.{name}", "unknown member")
        for name in GPU_MEMBERS:
            if name not in gpu:
                raise FieldError("malformed", f"{f}.{name}", "missing")
        if not is_int(gpu["index"]) or not 0 <= gpu["index"] <= MAX_GPU_INDEX:
            raise FieldError("malformed", f"{f}.index", f"not an integer 0..{MAX_GPU_INDEX}")
        for name in ("uuid", "model"):
            if not isinstance(gpu[name], str):
                raise FieldError("malformed", f"{f}.{name}", "not a string (null is not allowed)")
        if "mig" in gpu:
            _mig_shape(gpu["mig"], f"{f}.mig")
    return gpus


def _serde_members(obj: Dict[str, Any], members, at: str) -> None:
    """serde's deny_unknown_fields and required members: an unknown member, then a missing one,
    each `malformed` at `<at>.<name>`."""
    for name in obj:
        if name not in members:
            raise FieldError("malformed", f"{at}.{name}", "unknown member")
    for name in members:
        if name not in obj:
            raise FieldError("malformed", f"{at}.{name}", "missing")


def _mig_shape(mig: Any, f: str) -> None:
    """record.rs `MigLayout` as serde reads it: {slices: u32, instances: [{profile: string,
    count: u32}]}, nothing else, no null (malformed)."""
    if not isinstance(mig, dict):
        raise FieldError("malformed", f, "not an object (null is not allowed)")
    _serde_members(mig, MIG_MEMBERS, f)
    if not is_int(mig["slices"]) or not 0 <= mig["slices"] <= MAX_U32:
        raise FieldError("malformed", f"{f}.slices", f"not an integer 0..{MAX_U32}")
    if not isinstance(mig["instances"], list):
        raise FieldError("malformed", f"{f}.instances", "not an array (null is not allowed)")
    for j, inst in enumerate(mig["instances"]):
        at = f"{f}.instances[{j}]"
        if not isinstance(inst, dict):
            raise FieldError("malformed", at, "not an object")
        _serde_members(inst, MIG_INSTANCE_MEMBERS, at)
        if not isinstance(inst["profile"], str):
            raise FieldError("malformed", f"{at}.profile", "not a string (null is not allowed)")
        if not is_int(inst["count"]) or not 0 <= inst["count"] <= MAX_U32:
            raise FieldError("malformed", f"{at}.count", f"not an integer 0..{MAX_U32}")


def _check_node_gpus(gpus: List[Dict[str, Any]]) -> None:
    """record.rs `node_gpus`: 1 to MAX_NODE_GPUS GPUs (quantity_out_of_range, body.gpus), GPU by
    GPU: strictly increasing index, UUID of 1 to 128 visible ASCII characters, UUIDs distinct,
    model an identifier, MIG layout whole (`mig_layout`), then no earlier GPU of the same model
    partitioned into other slices (invalid_field, body.gpus[i].mig.slices; `mig_slices_differ`)."""
    if not 1 <= len(gpus) <= MAX_NODE_GPUS:
        raise FieldError("quantity_out_of_range", "body.gpus", f"{len(gpus)} GPUs; lists 1 to {MAX_NODE_GPUS} GPUs")
    uuids = set()
    for i, gpu in enumerate(gpus):
        f = f"body.gpus[{i}]"
        if i > 0 and gpu["index"] <= gpus[i - 1]["index"]:
            raise FieldError("invalid_field", f"{f}.index",
                             f"{gpu['index']} is not above {gpus[i - 1]['index']}: GPUs are listed by strictly "
                             "increasing index")
        if GPU_UUID_RE.fullmatch(gpu["uuid"]) is None:
            raise FieldError("invalid_field", f"{f}.uuid",
                             f"{gpu['uuid']!r} is not 1 to {MAX_GPU_UUID_LEN} visible ASCII characters")
        if gpu["uuid"] in uuids:
            raise FieldError("invalid_field", f"{f}.uuid", f"{gpu['uuid']} is listed twice")
        uuids.add(gpu["uuid"])
        if not is_id(gpu["model"]) or gpu["model"] in RESERVED_IDS:
            raise FieldError("invalid_field", f"{f}.model", f"{gpu['model']!r} is not an identifier a body may name")
        if "mig" in gpu:
            _check_mig_layout(f"{f}.mig", gpu["model"], gpu["mig"])
            for other in gpus[:i]:
                if other["model"] == gpu["model"] and "mig" in other \
                        and other["mig"]["slices"] != gpu["mig"]["slices"]:
                    raise mig_slices_differ(i, gpu, other)


def mig_slices_differ(i: int, gpu: Dict[str, Any], other: Dict[str, Any]) -> "FieldError":
    """record.rs `mig_slices_differ`: the refusal of GPU `i`, partitioned into other slices than
    `other`, a partitioned GPU of the same model (invalid_field, body.gpus[i].mig.slices): one MIG
    profile of a model is one share of a GPU on a node."""
    return FieldError("invalid_field", f"body.gpus[{i}].mig.slices",
                      f"GPU {gpu['index']} of model {gpu['model']} has {gpu['mig']['slices']} slices, GPU "
                      f"{other['index']} of the node {other['mig']['slices']}: a node's partitioned GPUs of one "
                      "model have the same slices")


MIG_PROFILE_RE = re.compile(r"([0-9])g\.([1-9][0-9]{0,3})gb")


def mig_profile_slices(profile: str) -> Optional[int]:
    """record.rs `mig_profile_slices`: the compute slices of a MIG profile `<g>g.<GB>gb` (g one
    digit 1 to MAX_MIG_SLICES, GB 1 to 9999 without a leading zero), else None."""
    m = MIG_PROFILE_RE.fullmatch(profile)
    if m is None:
        return None
    g = int(m.group(1))
    return g if 1 <= g <= MAX_MIG_SLICES else None


def _check_mig_layout(f: str, model: str, layout: Dict[str, Any]) -> None:
    """record.rs `mig_layout`: slices 1 to MAX_MIG_SLICES (`.slices`); 1 to MAX_MIG_SLICES
    profiles (`.instances`); instance by instance: a profile of at most the GPU's slices, then by
    strictly increasing name (`.instances[j].profile`), count 1 to MAX_MIG_SLICES
    (`.instances[j].count`), `<model>/<profile>` an identifier (`.instances[j].profile`); the
    instances together within the slices (`.instances`). All invalid_field."""
    slices = layout["slices"]
    if not 1 <= slices <= MAX_MIG_SLICES:
        raise FieldError("invalid_field", f"{f}.slices", f"{slices}: a GPU has 1 to {MAX_MIG_SLICES} compute slices")
    instances = layout["instances"]
    if not 1 <= len(instances) <= MAX_MIG_SLICES:
        raise FieldError("invalid_field", f"{f}.instances", f"{len(instances)} profiles; lists 1 to "
                         f"{MAX_MIG_SLICES} profiles")
    used = 0
    for j, inst in enumerate(instances):
        at = f"{f}.instances[{j}]"
        g = mig_profile_slices(inst["profile"])
        if g is None or g > slices:
            raise FieldError("invalid_field", f"{at}.profile",
                             f"{inst['profile']!r} is not a MIG profile <g>g.<GB>gb of at most the GPU's "
                             f"{slices} slices")
        if j > 0 and inst["profile"].encode("utf-8") <= instances[j - 1]["profile"].encode("utf-8"):
            raise FieldError("invalid_field", f"{at}.profile", "profiles are listed once each, by increasing name")
        if not 1 <= inst["count"] <= MAX_MIG_SLICES:
            raise FieldError("invalid_field", f"{at}.count", f"{inst['count']}: 1 to {MAX_MIG_SLICES} instances")
        unit = f"{model}/{inst['profile']}"
        if not is_id(unit) or unit in RESERVED_IDS:
            raise FieldError("invalid_field", f"{at}.profile", f"{unit!r} is not an identifier a body may name")
        used += g * inst["count"]
    if used > slices:
        raise FieldError("invalid_field", f"{f}.instances", f"take {used} compute slices of the GPU's {slices}")


# --- A GPU's units (record.rs `NodeGpu::units_of`, `unit_share`, `unit_models`) ----------------


def gpu_units_of(gpu: Dict[str, Any], model: str) -> int:
    """How many units of GPU model `model` the GPU is: unpartitioned, 1 when it is of that model;
    partitioned (`mig`), the count of the profile's instances when `model` is
    `<its model>/<profile>`; otherwise 0."""
    mig = gpu.get("mig")
    if mig is None:
        return 1 if gpu["model"] == model else 0
    prefix = gpu["model"] + "/"
    if not model.startswith(prefix):
        return 0
    profile = model[len(prefix):]
    for inst in mig["instances"]:
        if inst["profile"] == profile:
            return inst["count"]
    return 0


def gpu_unit_share(gpu: Dict[str, Any], model: str) -> int:
    """What one unit of `model` on the GPU is, in GPU_UNITS of a GPU: the whole GPU (840)
    unpartitioned, an instance's slices of the GPU's slices (840 / slices x g) partitioned; 0
    when the GPU has no unit of `model`."""
    if gpu_units_of(gpu, model) == 0:
        return 0
    mig = gpu.get("mig")
    if mig is None:
        return GPU_UNITS
    profile = model[len(gpu["model"]) + 1:]
    return GPU_UNITS // mig["slices"] * (mig_profile_slices(profile) or 0)


def gpu_unit_models(gpu: Dict[str, Any]) -> List[str]:
    """The models the GPU's units are: its own, or `<model>/<profile>` per MIG profile."""
    mig = gpu.get("mig")
    if mig is None:
        return [gpu["model"]]
    return [f"{gpu['model']}/{inst['profile']}" for inst in mig["instances"]]


LEASE_ITEM_MEMBERS = ("node", "gpus", "share", "gpu_model", "count")


@dataclass(frozen=True)
class LeaseItem:
    """What a lease covers of one node (section 5.8): whole GPUs by index (`gpus`), a `share` of
    each of them, or up to `count` GPUs of `gpu_model`, whichever they are."""
    node: str
    gpus: Optional[Tuple[int, ...]] = None
    share: Optional[Decimal] = None
    gpu_model: Optional[str] = None
    count: Optional[Decimal] = None


@dataclass(frozen=True)
class Lease:
    """A lease registration (section 5.8): its tenant, class, term [start, end) (end None:
    open-ended), items, and the index of its lease_registered entry (-1 before it is logged)."""
    lease: str
    tenant: str
    lease_class: str
    start: int
    end: Optional[int]
    items: Tuple[LeaseItem, ...]
    index: int = -1

    def covers(self, node: Any, model: str) -> Decimal:
        """How many units of `model` the lease covers on `node` (a NodeAt, or a node_registered
        body: the node as registered): lease_covers."""
        if isinstance(node, dict):
            node = FleetNode(node, -1).at(None)
        return lease_covers(self, node, model)

    def term_holds(self, start: int, end: int) -> bool:
        """[start, end) lies within the term."""
        return start >= self.start and (self.end is None or end <= self.end)

    def active_at(self, t: int) -> bool:
        return self.start <= t and (self.end is None or t < self.end)

    def term_overlaps(self, other: "Lease") -> bool:
        """The two half-open terms share an instant."""
        return (self.end is None or other.start < self.end) and (other.end is None or self.start < other.end)


# --- The fleet as of a log index (crates/core/src/fleet/inventory.rs `Node`, `NodeAt`) ---------


class FleetNode:
    """A node as the log holds it (inventory.rs `Node`): its registration and what its
    node_updated entries added, each GPU, UUID and power limit with the index of the entry that
    brought it. Every question is answered as of a log index (`at`): a bundle's context may hold
    updates logged after a record, which do not count for it."""

    def __init__(self, registration: Dict[str, Any], at: int):
        self.registration = registration
        self.name: str = registration["node"]
        self.region: str = registration["region"]
        self.registered_at = at
        # (GPU, index of the entry that added it), by increasing GPU index; a replaced board's
        # entry keeps its index and takes the latest UUID (index, model and mig never change).
        self.gpus: List[Tuple[Dict[str, Any], int]] = [(dict(g), at) for g in registration["gpus"]]
        self.uuids: List[Tuple[str, int]] = [(g["uuid"], at) for g in registration["gpus"]]
        self.watts: List[Tuple[Decimal, int]] = [(Decimal(registration["max_watts_per_gpu"]), at)]
        self._entries: List[int] = [at]  # the indexes of the node's entries, increasing
        self._views: Dict[int, "NodeAt"] = {}

    def apply(self, update: Dict[str, Any], at: int) -> None:
        """inventory.rs `Node::apply`: takes in the node_updated body at `at` (after check_fleet
        admitted it)."""
        for g in update.get("gpus") or ():
            self.uuids.append((g["uuid"], at))
            indexes = [h["index"] for h, _ in self.gpus]
            i = bisect.bisect_left(indexes, g["index"])
            if i < len(indexes) and indexes[i] == g["index"]:
                self.gpus[i][0]["uuid"] = g["uuid"]
            else:
                self.gpus.insert(i, (dict(g), at))
        if "max_watts_per_gpu" in update:
            self.watts.append((Decimal(update["max_watts_per_gpu"]), at))
        bisect.insort(self._entries, at)
        self._views.clear()

    def uuid_listed(self, uuid: str, index: int) -> Optional[int]:
        """The index of the latest entry that listed `uuid` for this node before `index`."""
        for u, at in reversed(self.uuids):
            if u == uuid and at < index:
                return at
        return None

    def at(self, index: Optional[int]) -> "NodeAt":
        """The node as the entries before `index` made it (None: every entry so far)."""
        k = len(self._entries) if index is None else bisect.bisect_left(self._entries, index)
        view = self._views.get(k)
        if view is None:
            view = self._views[k] = NodeAt(self, self._entries[k - 1] + 1 if k else -1)
        return view


class NodeAt:
    """inventory.rs `NodeAt`: a node as of a log index, the GPUs and power limit the entries
    before it gave it."""

    def __init__(self, node: FleetNode, index: int):
        self.node = node
        self.index = index
        self.name = node.name
        self.region = node.region
        self.gpus: List[Dict[str, Any]] = [g for g, at in node.gpus if at < index]
        self.by_index: Dict[int, Dict[str, Any]] = {g["index"]: g for g in self.gpus}
        watts = node.watts[0][0]
        for w, at in node.watts:
            if at < index:
                watts = w
        self.max_watts_per_gpu: Decimal = watts
        self._units: Dict[str, int] = {}

    def gpu_count(self) -> int:
        return len(self.gpus)

    def gpu(self, index: int) -> Optional[Dict[str, Any]]:
        """Its GPU at `index` (as nvidia-smi numbers it), if it had it."""
        return self.by_index.get(index)

    def units_of(self, model: str) -> int:
        """How many units of `model` it has: its unpartitioned GPUs of that model, or the MIG
        instances of `<model>/<profile>` (gpu_units_of, summed)."""
        n = self._units.get(model)
        if n is None:
            n = self._units[model] = sum(gpu_units_of(g, model) for g in self.gpus)
        return n


def lease_covers(lease: Lease, node: NodeAt, model: str) -> Decimal:
    """fleet.rs `lease_covers`: how many units of `model` (whole GPUs, or MIG instances of
    `<model>/<profile>`) the lease covers on `node`: for each item listing GPUs, its share (1 when
    absent) x the units of `model` of each listed GPU the node has (a partitioned GPU listed covers
    its instances); plus the count of the items of that model. Exact."""
    total = Decimal(0)
    for item in lease.items:
        if item.node != node.name:
            continue
        if item.gpus is not None:
            units = sum(gpu_units_of(g, model) for g in (node.gpu(i) for i in item.gpus) if g is not None)
            total = DEC.add(total, DEC.multiply(Decimal(units), item.share if item.share is not None
                                                else Decimal(1)))
        elif item.gpu_model == model and item.count is not None:
            total = DEC.add(total, item.count)
    return total


def lease_units_on(lease: Lease, node: NodeAt) -> Decimal:
    """fleet.rs `lease_units_on`: how much of `node` the lease covers, every model, in GPU_UNITS
    (1/840) of a GPU: each listed GPU the node has x share x 840, and each count of a model x what
    one unit of it is (the largest gpu_unit_share of that model over the node's GPUs; 0 when none).
    Exact."""
    total = Decimal(0)
    for item in lease.items:
        if item.node != node.name:
            continue
        if item.gpus is not None:
            listed = sum(1 for i in item.gpus if node.gpu(i) is not None)
            share = item.share if item.share is not None else Decimal(1)
            total = DEC.add(total, DEC.multiply(DEC.multiply(Decimal(listed), share), Decimal(GPU_UNITS)))
        elif item.gpu_model is not None and item.count is not None:
            unit = max((gpu_unit_share(g, item.gpu_model) for g in node.gpus), default=0)
            total = DEC.add(total, DEC.multiply(item.count, Decimal(unit)))
    return total


def within_energy_bound(units: Decimal, watts: Decimal, seconds: int, kwh: Decimal) -> bool:
    """fleet.rs `within_energy_bound`: kWh x 3,600,000 x 100 x 840 <= units x W x seconds x (100 +
    margin), `units` in GPU_UNITS of a GPU; exact (every operand has at most 9 decimals, as the
    ledger's integers of 1e-18 compare them)."""
    used = DEC.multiply(kwh, Decimal(WATT_SECONDS_PER_KWH * 100 * GPU_UNITS))
    allowed = DEC.multiply(DEC.multiply(DEC.multiply(units, watts), Decimal(seconds)),
                           Decimal(100 + ENERGY_BOUND_MARGIN_PERCENT))
    return used <= allowed


def energy_bound_kwh(units: Decimal, watts: Decimal, seconds: int) -> Decimal:
    """fleet.rs `energy_bound_kwh`, for people: the bound in kWh, to 9 decimals."""
    allowed = DEC.multiply(DEC.multiply(DEC.multiply(units, watts), Decimal(seconds)),
                           Decimal(100 + ENERGY_BOUND_MARGIN_PERCENT))
    return DEC.divide(allowed, Decimal(WATT_SECONDS_PER_KWH * 100 * GPU_UNITS)).quantize(Decimal("1e-9"),
                                                                                          context=DEC)


def _lease_items_shape(items: List[Any]) -> None:
    """lease_registered.nodes, as serde reads it before any value is checked: objects with a
    string `node`, optional `gpus` (an array of integers 0..2^32-1), `share`, `gpu_model` and
    `count` (strings), nothing else, no null (malformed)."""
    for i, item in enumerate(items):
        f = f"body.nodes[{i}]"
        if not isinstance(item, dict):
            raise FieldError("malformed", f, "not an object")
        for name in item:
            if name not in LEASE_ITEM_MEMBERS:
                raise FieldError("malformed", f"{f}.{name}", "unknown member")
        if "node" not in item:
            raise FieldError("malformed", f"{f}.node", "missing")
        for name in ("node", "share", "gpu_model", "count"):
            if name in item and not isinstance(item[name], str):
                raise FieldError("malformed", f"{f}.{name}", "not a string (null is not allowed)")
        if "gpus" in item:
            gpus = item["gpus"]
            if not isinstance(gpus, list):
                raise FieldError("malformed", f"{f}.gpus", "not an array (null is not allowed)")
            for j, g in enumerate(gpus):
                if not is_int(g) or not 0 <= g <= MAX_GPU_INDEX:
                    raise FieldError("malformed", f"{f}.gpus[{j}]", f"not an integer 0..{MAX_GPU_INDEX}")


def _item_field(prefix: str, fn, *args):
    """Runs a _Body check on a lease item, naming the item's field (body.nodes[i].<name>)."""
    try:
        return fn(*args)
    except FieldError as e:
        raise FieldError(e.code, prefix + e.field[len("body"):], e.message) from None


def _lease_items(items: List[Dict[str, Any]]) -> Tuple[LeaseItem, ...]:
    """Section 5.8, as record.rs `lease_nodes`: 1 to MAX_LEASE_NODES items (empty: invalid_field,
    more: quantity_out_of_range), each checked in order: its `node`; then either `gpus` (1 to 64
    indexes, strictly increasing, none of the node listed before in the lease; an optional
    `share` above 0 and below 1) or `gpu_model` and `count` (above 0, at most 512: 64 GPUs x 8
    MIG instances; a model of a node counted once), else invalid_field on the item."""
    if not items:
        raise FieldError("invalid_field", "body.nodes", "an empty array (a lease covers 1 to "
                         f"{MAX_LEASE_NODES} items)")
    if len(items) > MAX_LEASE_NODES:
        raise FieldError("quantity_out_of_range", "body.nodes",
                         f"{len(items)} items, above MAX_LEASE_NODES = {MAX_LEASE_NODES}")
    seen = set()
    out: List[LeaseItem] = []
    for i, item in enumerate(items):
        f = f"body.nodes[{i}]"
        t = _Body(item, {name: name == "node" for name in LEASE_ITEM_MEMBERS}, array_members=("gpus",))
        node = _item_field(f, t.id, "node")
        has = {name: name in item for name in LEASE_ITEM_MEMBERS}
        if has["gpus"] and not has["gpu_model"] and not has["count"]:
            gpus = item["gpus"]
            if not 1 <= len(gpus) <= MAX_LEASE_GPUS:
                raise FieldError("quantity_out_of_range", f"{f}.gpus", f"{len(gpus)} GPUs; an item lists 1 to "
                                 f"{MAX_LEASE_GPUS}")
            for j in range(1, len(gpus)):
                if gpus[j] <= gpus[j - 1]:
                    raise FieldError("invalid_field", f"{f}.gpus", f"{gpus[j]} after {gpus[j - 1]}: GPUs are "
                                     "listed by strictly increasing index")
            for g in gpus:
                if (node, g, None) in seen:
                    raise FieldError("invalid_field", f"{f}.gpus", f"GPU {g} of {node} is listed twice")
                seen.add((node, g, None))
            share = None
            if has["share"]:
                share = _item_field(f, t.decimal, "share", Decimal(0), Decimal(1), True)
                if share == 1:
                    raise FieldError("quantity_out_of_range", f"{f}.share",
                                     "is not below 1 (a whole GPU has no share)")
            out.append(LeaseItem(node, gpus=tuple(gpus), share=share))
        elif not has["gpus"] and has["gpu_model"] and has["count"] and not has["share"]:
            model = _item_field(f, t.id, "gpu_model")
            count = _item_field(f, t.decimal, "count", Decimal(0), MAX_LEASE_COUNT, True)
            if (node, None, model) in seen:
                raise FieldError("invalid_field", f"{f}.gpu_model", f"{model} of {node} is listed twice")
            seen.add((node, None, model))
            out.append(LeaseItem(node, gpu_model=model, count=count))
        else:
            raise FieldError("invalid_field", f, "covers either gpus (with an optional share) or a gpu_model "
                             "with a count")
    return tuple(out)


@dataclass(frozen=True)
class Contract:
    """A contract registration (section 5.19): its tenant, its term [start, end) and the index of
    its contract_registered entry (-1 before it is logged)."""
    contract: str
    tenant: str
    start: int
    end: int
    index: int = -1

    def term_overlaps(self, other: "Contract") -> bool:
        """The two half-open terms share an instant (one ending at T and one starting at T do not)."""
        return self.start < other.end and other.start < self.end


class Contracts:
    """A log's contracts as amended (section 5.21; core::contract `Contracts`): each
    contract_registered entry (the first of an id counts) with the term_to of the latest
    contract_amended entry of the same contract id and the same tenant, taken in log order
    (`apply`); an amendment of a contract it does not hold, or of another tenant's, is ignored.
    What the contract rules compare (LogView.check_contract_term, check_contract_amendment)
    and what an invoice's contract lines are recomputed from (verify_bundle: every entry of a
    bundle is below its size, so an invoice is rated with the terms its log held)."""

    def __init__(self):
        self._at: Dict[str, int] = {}  # contract id -> its place in `terms` and `bodies`
        self.terms: List[Contract] = []  # in order of registration, each end as amended
        self.bodies: List[Dict[str, Any]] = []  # their bodies, term_to as amended

    def apply(self, index: int, kind: str, body: Dict[str, Any]) -> None:
        """Takes in the entry at `index` (contract_registered and contract_amended; any other kind
        is ignored). The bodies passed check_body."""
        if kind == "contract_registered" and body["contract"] not in self._at:
            self._at[body["contract"]] = len(self.terms)
            self.terms.append(Contract(body["contract"], body["tenant"], parse_timestamp(body["term_from"]),
                                       parse_timestamp(body["term_to"]), index))
            self.bodies.append(body)
        elif kind == "contract_amended":
            at = self._at.get(body["contract"])
            if at is not None and self.terms[at].tenant == body["tenant"]:
                self.terms[at] = dataclasses.replace(self.terms[at], end=parse_timestamp(body["term_to"]))
                self.bodies[at] = dict(self.bodies[at], term_to=body["term_to"])

    def get(self, contract: str) -> Optional[Contract]:
        """The contract `contract` as amended (its index: its contract_registered entry's), or None."""
        at = self._at.get(contract)
        return None if at is None else self.terms[at]

    def body(self, contract: str) -> Dict[str, Any]:
        """The contract_registered body of a contract `get` holds, term_to as amended."""
        return self.bodies[self._at[contract]]

    def of_tenant(self, tenant: str) -> List[Contract]:
        """`tenant`'s contracts as amended, in order of registration."""
        return [c for c in self.terms if c.tenant == tenant]

    def bodies_of(self, tenant: str) -> List[Dict[str, Any]]:
        """The bodies of `tenant`'s contracts as amended, in order of registration."""
        return [b for c, b in zip(self.terms, self.bodies) if c.tenant == tenant]


def _contract_fees_shape(fees: List[Any]) -> None:
    """contract_registered.fees as serde reads it before any value is checked: objects with
    the members name, amount, timing and category and optionally lease and included, nothing
    else, each a string (no null) but `included`, an array of objects with exactly gpu_model,
    gpu_hours and overage_rate, strings (_included_shape); else `malformed`, naming
    `body.fees[i]` or `body.fees[i].<member>`, for every fee first."""
    for i, fee in enumerate(fees):
        f = f"body.fees[{i}]"
        if not isinstance(fee, dict):
            raise FieldError("malformed", f, "not an object")
        for name in fee:
            if name not in FEE_MEMBERS and name not in FEE_OPTIONAL_MEMBERS:
                raise FieldError("malformed", f"{f}.{name}", "unknown member")
        for name in FEE_MEMBERS:
            if name not in fee:
                raise FieldError("malformed", f"{f}.{name}", "missing")
        for name in FEE_STRING_MEMBERS:
            if name in fee and not isinstance(fee[name], str):
                raise FieldError("malformed", f"{f}.{name}", "not a string (null is not allowed)")
        if "included" in fee:
            _included_shape(fee["included"], f"{f}.included")


def _included_shape(included: Any, f: str) -> None:
    """contract_registered.fees[i].included as serde reads it (at field `f`): an array (null is
    not one) of objects with exactly gpu_model, gpu_hours and overage_rate (an unknown member,
    then a missing one), each a string; else `malformed`, naming `f`, `f[j]` or
    `f[j].<member>`."""
    if not isinstance(included, list):
        raise FieldError("malformed", f, "not an array (null is not allowed)")
    for j, entry in enumerate(included):
        at = f"{f}[{j}]"
        if not isinstance(entry, dict):
            raise FieldError("malformed", at, "not an object")
        _serde_members(entry, INCLUDED_MEMBERS, at)
        for name in INCLUDED_MEMBERS:
            if not isinstance(entry[name], str):
                raise FieldError("malformed", f"{at}.{name}", "not a string (null is not allowed)")


def _contract_sla_shape(sla: Dict[str, Any]) -> None:
    """contract_registered.sla as serde reads it before any value is checked (the body's member
    check made it an object): exactly `target` (a string) and `credits` (an array of objects
    with exactly `below` and `percent`, strings), no null; else `malformed`, naming
    `body.sla.<member>`, `body.sla.credits[i]` or `body.sla.credits[i].<member>`."""
    _serde_members(sla, SLA_MEMBERS, "body.sla")
    if not isinstance(sla["target"], str):
        raise FieldError("malformed", "body.sla.target", "not a string (null is not allowed)")
    if not isinstance(sla["credits"], list):
        raise FieldError("malformed", "body.sla.credits", "not an array (null is not allowed)")
    for i, step in enumerate(sla["credits"]):
        f = f"body.sla.credits[{i}]"
        if not isinstance(step, dict):
            raise FieldError("malformed", f, "not an object")
        _serde_members(step, SLA_STEP_MEMBERS, f)
        for name in SLA_STEP_MEMBERS:
            if not isinstance(step[name], str):
                raise FieldError("malformed", f"{f}.{name}", "not a string (null is not allowed)")


def _percentage(obj: Dict[str, Any], name: str, field_name: str) -> Decimal:
    """record/contract.rs `percent`: an amount (digits, at most 4 decimals; `negative_quantity`
    for a minus sign, else `invalid_field`) above 0 and at most 100 (`quantity_out_of_range`),
    read as a number of percent (`99.9` is 99.9 %)."""
    d = _amount(obj[name], field_name, True)
    if d > ONE_HUNDRED:
        raise FieldError("quantity_out_of_range", field_name, f"{obj[name]} is a percentage, at most 100")
    return d


def _contract_sla(sla: Dict[str, Any]) -> None:
    """Section 5.19, contract_registered.sla (docs/RATING.md "SLA credits"), in the table's order:
    `target` a percentage above 0 and below 100 (`quantity_out_of_range`, 100 included); 1 to
    MAX_SLA_STEPS `credits` (else `invalid_field`, `body.sla.credits`); then step by step its
    `below` (a percentage; at most the target for the first step, strictly below the step
    before's for the others, else `invalid_field`), then its `percent` (a percentage; strictly
    above the step before's, else `invalid_field`)."""
    target = _percentage(sla, "target", "body.sla.target")
    if target == ONE_HUNDRED:
        raise FieldError("quantity_out_of_range", "body.sla.target",
                         "must be below 100: no measurement proves every second")
    credits = sla["credits"]
    if not 1 <= len(credits) <= MAX_SLA_STEPS:
        raise FieldError("invalid_field", "body.sla.credits",
                         f"lists {len(credits)} steps; 1 to {MAX_SLA_STEPS} (MAX_SLA_STEPS) are allowed")
    previous: Optional[Tuple[Decimal, Decimal]] = None
    for i, step in enumerate(credits):
        f = f"body.sla.credits[{i}]"
        below = _percentage(step, "below", f"{f}.below")
        percent = _percentage(step, "percent", f"{f}.percent")
        if previous is None and below > target:
            raise FieldError("invalid_field", f"{f}.below",
                             f"{step['below']} is above the target {sla['target']}: the first step's below is at "
                             "most the target")
        if previous is not None and below >= previous[0]:
            raise FieldError("invalid_field", f"{f}.below",
                             f"{step['below']} is not below the step before's ({credits[i - 1]['below']})")
        if previous is not None and percent <= previous[1]:
            raise FieldError("invalid_field", f"{f}.percent",
                             f"{step['percent']} is not above the step before's ({credits[i - 1]['percent']}): a "
                             "lower availability credits more")
        previous = (below, percent)


def _contract_fees(fees: List[Dict[str, Any]]) -> None:
    """Section 5.19, contract_registered.fees: 1 to MAX_CONTRACT_FEES fees (empty: invalid_field,
    more: quantity_out_of_range, both on body.fees), each in order: its name display text of 1 to
    MAX_FEE_NAME_BYTES bytes (display_text_refusal), its amount above 0 and at most 10^12 (the
    amount form), its timing and its category one of theirs, its lease (an id, not on a `once`
    fee), then its included GPU-hours (_included: after its lease, as the table has it);
    invalid_field (the amount's limits quantity_out_of_range) on body.fees[i].<member>. A lease
    and GPU model included twice is found at its second occurrence, fee by fee, entry by
    entry."""
    if not fees:
        raise FieldError("invalid_field", "body.fees", "an empty array (absent when there is no fee; "
                         f"else 1 to {MAX_CONTRACT_FEES} fees)")
    if len(fees) > MAX_CONTRACT_FEES:
        raise FieldError("quantity_out_of_range", "body.fees",
                         f"{len(fees)} fees, above MAX_CONTRACT_FEES = {MAX_CONTRACT_FEES}")
    seen: set = set()  # (lease, gpu_model) of the included entries checked so far
    for i, fee in enumerate(fees):
        f = f"body.fees[{i}]"
        why = display_text_refusal(fee["name"], MAX_FEE_NAME_BYTES)
        if why is not None:
            raise FieldError("invalid_field", f"{f}.name", why)
        t = _Body(fee, {**{name: True for name in FEE_MEMBERS}, **{name: False for name in FEE_OPTIONAL_MEMBERS}},
                  array_members=("included",))
        _item_field(f, t.amount, "amount", True)
        timing = _item_field(f, t.enum, "timing", FEE_TIMINGS)
        _item_field(f, t.enum, "category", FEE_CATEGORIES)
        if t.has("lease"):
            _item_field(f, t.id, "lease")
            if timing == "once":
                raise FieldError("invalid_field", f"{f}.lease", "a one-off fee rents no lease over a period")
        if "included" in fee:
            _included(fee, f, seen)


def _included(fee: Dict[str, Any], f: str, seen: set) -> None:
    """Section 5.19, contract_registered.fees[i].included (docs/RATING.md, "Included GPU-hours
    and overage"), of the fee at field `f` whose lease is checked already, in the order of the
    spec: only on a fee that names a lease (invalid_field, `f.included`); 1 to
    MAX_INCLUDED_MODELS entries (else invalid_field, `f.included`); then entry by entry its
    gpu_model (an id, as gpu_usage.gpu_model), gpu_hours and overage_rate (amounts, 0 allowed, at
    most 10^12: negative_quantity, invalid_field, quantity_out_of_range), then that the pair
    (the fee's lease, the model) is not in `seen`, the pairs of the contract's entries before it
    (invalid_field, `f.included[j].gpu_model`), which it joins."""
    included = fee["included"]
    field_name = f"{f}.included"
    if "lease" not in fee:
        raise FieldError("invalid_field", field_name, "GPU-hours are included in the fee of a lease: name the "
                         "fee's lease")
    if not 1 <= len(included) <= MAX_INCLUDED_MODELS:
        raise FieldError("invalid_field", field_name, f"lists {len(included)} GPU models; 1 to "
                         f"{MAX_INCLUDED_MODELS} (MAX_INCLUDED_MODELS) are allowed")
    for j, entry in enumerate(included):
        at = f"{field_name}[{j}]"
        t = _Body(entry, {name: True for name in INCLUDED_MEMBERS})
        model = _item_field(at, t.id, "gpu_model")
        _item_field(at, t.amount, "gpu_hours", False)
        _item_field(at, t.amount, "overage_rate", False)
        pair = (fee["lease"], model)
        if pair in seen:
            raise FieldError("invalid_field", f"{at}.gpu_model",
                             f"{model} of lease {fee['lease']} is included twice in the contract: a lease and "
                             "model are included at most once")
        seen.add(pair)


def _contract(b: _Body) -> Contract:
    """Section 5.19 (issue #28), contract_registered, in the member table's order: tenant and
    contract (ids), currency, region, term_from, term_to (after term_from, else invalid_field;
    at most MAX_CONTRACT_TERM_SECONDS later, else quantity_out_of_range; both on body.term_to),
    billing_period, billing_anchor, fees (_contract_fees: a fee's name, amount, timing,
    category, lease, included), commitment (above 0, at most 10^12); then at least one of fees and
    commitment (invalid_field, body.fees); then the sla (_contract_sla); last, an sla with no fee
    that names a lease (invalid_field, body.sla). The shapes of the fees and of the sla
    (malformed) are checked before any value (_contract_fees_shape, _contract_sla_shape)."""
    fees = b.body.get("fees")
    if fees is not None:
        _contract_fees_shape(fees)
    sla = b.body.get("sla")
    if sla is not None:
        _contract_sla_shape(sla)
    tenant = b.id("tenant")
    contract = b.id("contract")
    b.currency("currency")
    b.id("region")
    start = b.timestamp("term_from")
    end = b.timestamp("term_to")
    if end <= start:
        raise FieldError("invalid_field", "body.term_to",
                         f"{b.body['term_to']} is not after body.term_from ({b.body['term_from']})")
    if end - start > MAX_CONTRACT_TERM_SECONDS:
        raise FieldError("quantity_out_of_range", "body.term_to",
                         f"the term is {end - start} s, above MAX_CONTRACT_TERM_SECONDS = "
                         f"{MAX_CONTRACT_TERM_SECONDS} (3660 days)")
    b.enum("billing_period", CONTRACT_BILLING_PERIODS)
    b.enum("billing_anchor", CONTRACT_BILLING_ANCHORS)
    if fees is not None:
        _contract_fees(fees)
    if b.has("commitment"):
        b.amount("commitment", positive=True)
    elif fees is None:
        raise FieldError("invalid_field", "body.fees", "a contract has fees, a commitment, or both")
    if sla is not None:
        _contract_sla(sla)
        if not any("lease" in fee for fee in fees or ()):
            raise FieldError("invalid_field", "body.sla", "an SLA credits the fees of leases: name the lease of "
                             "at least one periodic fee")
    return Contract(contract, tenant, start, end)


def _trimmed_text_refusal(text: str, max_bytes: int) -> Optional[str]:
    """record.rs `trimmed_text` (payment.external_reference, prepayment.reference,
    contract_amended.reason): 1 to `max_bytes` bytes of UTF-8, no control character, no white
    space at either end (Rust's `trim`: Unicode White_Space, which str.strip also removes).
    Returns why not, or None."""
    if (not text or len(text.encode("utf-8", "surrogatepass")) > max_bytes or text.strip() != text
            or any(_is_control(c) for c in text)):
        return f"1 to {max_bytes} bytes without control characters or surrounding spaces"
    return None


def _contract_amendment(b: _Body) -> Dict[str, Any]:
    """Section 5.21, contract_amended (record/contract.rs `ContractAmended::check`), in the
    member table's order: tenant and contract (ids), term_to (a timestamp), reason (1 to
    MAX_EXCLUSION_REASON_BYTES bytes without control characters or surrounding spaces, as
    record_excluded.reason: _trimmed_text_refusal, invalid_field). The rules that need the log
    (the contract, its term, the tenant's invoices and other contracts) are admission rules
    (LogView.check_contract_amendment)."""
    tenant = b.id("tenant")
    contract = b.id("contract")
    term_to = b.timestamp("term_to")
    why = _trimmed_text_refusal(b.body["reason"], MAX_EXCLUSION_REASON_BYTES)
    if why is not None:
        raise FieldError("invalid_field", "body.reason", why)
    return {"tenant": tenant, "contract": contract, "term_to": term_to}


def _prepayment(b: _Body) -> Dict[str, Any]:
    """Section 5.20, prepayment, in the member table's order ("the checks run in the order of the
    table"): tenant (an id); reference (_trimmed_text_refusal, 1 to 128 bytes, invalid_field);
    source (grant or purchase, invalid_field); currency; amount (the payment.amount form: above 0,
    at most 10^12, quantity_out_of_range), then at most the currency's minor-unit digits as
    written (`100.00` in CNY passes, `100.001` and `5.0` in JPY do not; invalid_field,
    body.amount); expires_at, if present, a timestamp. That expires_at is after the entry's
    received_at is an admission rule (LogView.check_prepayment)."""
    tenant = b.id("tenant")
    ref = b.body["reference"]
    why = _trimmed_text_refusal(ref, MAX_EXTERNAL_REFERENCE_BYTES)
    if why is not None:
        raise FieldError("invalid_field", "body.reference", why)
    source = b.enum("source", PREPAYMENT_SOURCES)
    currency = b.currency("currency")
    b.amount("amount", positive=True)
    text = b.body["amount"]
    digits = len(text.partition(".")[2])
    if digits > minor_units(currency):
        raise FieldError("invalid_field", "body.amount",
                         f"{text} has {digits} decimal places, more than {currency}'s minor unit "
                         f"({minor_units(currency)})")
    expires_at = b.timestamp("expires_at") if b.has("expires_at") else None
    return {"tenant": tenant, "reference": ref, "source": source, "currency": currency,
            "amount": Fraction(text), "expires_at": expires_at}


def check_body(kind: str, body: Dict[str, Any]) -> Dict[str, Any]:
    """Section 5 (version 2), in each table's order. Returns parsed values useful later."""
    out: Dict[str, Any] = {}
    if kind == "gpu_usage":
        b = _Body(body, {"tenant": True, "lease": False, "region": True, "node": True, "gpu_model": True,
                         "gpu_count": True, "start": True, "end": True, "gpu_seconds": True})
        b.id("tenant")
        if b.has("lease"):
            b.id("lease")
        b.id("region")
        b.id("node")
        b.id("gpu_model")
        count = b.decimal("gpu_count", Decimal(0), MAX_GPU_COUNT, lo_exclusive=True)
        start, end = _interval(b)
        secs = b.decimal("gpu_seconds", Decimal(0), MAX_GPU_SECONDS)
        if DEC.multiply(count, Decimal(end - start)) != secs:
            raise FieldError("gpu_seconds_mismatch", "body.gpu_seconds",
                             f"{body['gpu_seconds']} is not gpu_count x (end - start) = "
                             f"{dec_str(DEC.multiply(count, Decimal(end - start)))}")
        out.update(start=start, end=end, gpu_seconds=secs)
    elif kind == "energy":
        b = _Body(body, {"tenant": False, "region": True, "node": True, "start": True, "end": True, "kwh": True})
        if b.has("tenant"):
            b.id("tenant")
        b.id("region")
        b.id("node")
        start, end = _interval(b)
        kwh = b.decimal("kwh", Decimal(0), MAX_KWH_PER_RECORD)
        out.update(start=start, end=end, kwh=kwh)
    elif kind == "spot_price":
        b = _Body(body, {"region": True, "gpu_model": True, "price_per_gpu_hour": True, "currency": True,
                         "effective_from": True})
        b.id("region")
        b.id("gpu_model")
        b.decimal("price_per_gpu_hour", Decimal(0), MAX_PRICE_PER_GPU_HOUR)
        b.currency("currency")
        out.update(effective_from=b.timestamp("effective_from"))
    elif kind == "signer_key_registered":
        b = _Body(body, {"signer": True, "role": True, "key_id": True, "public_key": True, "nodes": False,
                         "regions": True}, array_members=("nodes", "regions"))
        signer = b.id("signer")
        if signer == "ledger":
            raise FieldError("invalid_field", "body.signer", "the id ledger is reserved (section 2.3)")
        role = b.enum("role", ("node", "market", "ledger"))
        if role == "ledger":
            raise FieldError("invalid_field", "body.role", "the ledger registers only node and market signers")
        if role == "node" and not b.has("nodes"):
            raise FieldError("malformed", "body.nodes", "missing (required for role node)")
        if role == "market" and b.has("nodes"):
            raise FieldError("malformed", "body.nodes", "must be absent for role market")
        kid = b.pattern("key_id", KEY_ID_RE, "a key id")
        try:
            pub = b64decode_canonical(body["public_key"], 32)
        except ValueError as e:
            raise FieldError("invalid_field", "body.public_key", str(e)) from None
        if not valid_public_key(pub):
            raise FieldError("invalid_field", "body.public_key",
                             "not a valid Ed25519 public key (canonically encoded point, not of small order, "
                             "torsion-free)")
        if key_id_of(pub) != kid:
            raise FieldError("invalid_field", "body.key_id", f"{kid} is not the key id of public_key ({key_id_of(pub)})")
        nodes = b.id_list("nodes", MAX_SIGNER_NODES, "MAX_SIGNER_NODES") if b.has("nodes") else None
        regions = b.id_list("regions", MAX_SIGNER_REGIONS, "MAX_SIGNER_REGIONS")
        out.update(public_key=pub, nodes=nodes, regions=regions)
    elif kind == "signer_key_revoked":
        b = _Body(body, {"signer": True, "key_id": True, "reason": False})
        b.id("signer")
        b.pattern("key_id", KEY_ID_RE, "a key id")
    elif kind == "rate_card":
        b = _Body(body, {"region": True, "gpu_model": True, "lease_class": True, "currency": True,
                         "price_per_gpu_hour": True, "effective_from": True})
        b.id("region")
        b.id("gpu_model")
        b.enum("lease_class", ("on_demand", "reserved"))
        b.currency("currency")
        b.decimal("price_per_gpu_hour", Decimal(0), MAX_PRICE_PER_GPU_HOUR)
        out.update(effective_from=b.timestamp("effective_from"))
    elif kind == "region_params":
        b = _Body(body, {"region": True, "currency": True, "electricity_price_per_kwh": True, "pue": True,
                         "carbon_g_per_kwh": True, "effective_from": True})
        b.id("region")
        b.currency("currency")
        b.decimal("electricity_price_per_kwh", Decimal(0), MAX_ELECTRICITY_PRICE)
        pue = b.decimal("pue", MIN_PUE, MAX_PUE)
        carbon = b.decimal("carbon_g_per_kwh", Decimal(0), MAX_CARBON_G_PER_KWH)
        out.update(pue=pue, carbon=carbon, effective_from=b.timestamp("effective_from"))
    elif kind == "lease_registered":
        # record.rs `LeaseRegistered::check`: the class first, then the ids, the term and the items.
        b = _Body(body, {"lease": True, "tenant": True, "class": True, "from": True, "to": False, "nodes": True},
                  array_members=("nodes",))
        _lease_items_shape(body["nodes"])
        cls = b.enum("class", ("on_demand", "reserved", "spot"))
        lease = b.id("lease")
        tenant = b.id("tenant")
        start = b.timestamp("from")
        end = b.timestamp("to") if b.has("to") else None
        if end is not None and end <= start:
            raise FieldError("empty_interval", "body.to", f"{body['to']} is not after body.from ({body['from']})")
        out.update(lease=Lease(lease, tenant, cls, start, end, _lease_items(body["nodes"])))
    elif kind == "invoice_issued":
        b = _Body(body, {"number": True, "tenant": True, "period_from": True, "period_to": True, "currency": True,
                         "total": True, "checkpoint_size": True, "invoice_sha256": True},
                  int_members=("checkpoint_size",))
        b.id("number")
        b.pattern("number", INVOICE_NUMBER_RE, "INV- and six digits")
        b.id("tenant")
        pf = b.timestamp("period_from")
        pt = b.timestamp("period_to")
        b.currency("currency")
        b.amount("total", positive=False)
        b.integer("checkpoint_size", 0, MAX_INDEX)
        b.pattern("invoice_sha256", HEX64_RE, "64 lower-case hex digits")
        out.update(period_from=pf, period_to=pt)
    elif kind in ("payment", "credit_note"):
        b = _Body(body, {"tenant": True, "invoice": True, "currency": True, "amount": True, "note": True,
                         "external_reference": False})
        b.id("tenant")
        b.id("invoice")
        b.currency("currency")
        b.amount("amount", positive=True)
        if len(body["note"].encode("utf-8")) > MAX_NOTE_BYTES:
            raise FieldError("invalid_field", "body.note", "longer than 500 bytes")
        ref = body.get("external_reference")
        if ref is not None and (not ref or len(ref.encode("utf-8")) > MAX_EXTERNAL_REFERENCE_BYTES
                                or ref.strip() != ref or any(_is_control(c) for c in ref)):
            raise FieldError("invalid_field", "body.external_reference",
                             "1 to 128 bytes without control characters or surrounding spaces")
    elif kind == "volume_tiers":
        b = _Body(body, {"plan": True, "region": True, "gpu_model": True, "lease_class": True, "currency": True,
                         "tiers": True, "effective_from": True}, array_members=("tiers",))
        b.id("plan")
        b.id("region")
        b.id("gpu_model")
        b.enum("lease_class", ("on_demand", "reserved"))
        b.currency("currency")
        _tiers(b)
        out.update(effective_from=b.timestamp("effective_from"))
    elif kind == "tenant_plan":
        b = _Body(body, {"tenant": True, "plan": True, "effective_from": True})
        b.id("tenant")
        b.id("plan")
        out.update(effective_from=b.timestamp("effective_from"))
    elif kind == "certificate_issued":
        b = _Body(body, {"id": True, "tenant": True, "period_from": True, "period_to": True,
                         "checkpoint_size": True, "certificate_sha256": True},
                  int_members=("checkpoint_size",))
        b.pattern("id", CERT_ID_RE, "CERT- and six or more digits")
        b.id("tenant")
        b.timestamp("period_from")
        b.timestamp("period_to")
        b.integer("checkpoint_size", 0, MAX_INDEX)
        b.pattern("certificate_sha256", HEX64_RE, "64 lower-case hex digits")
    elif kind == "tenant_registered":
        b = _Body(body, {"tenant": True})
        b.id("tenant")
    elif kind == "record_excluded":
        # Section 5.17 (record.rs `RecordExcluded::check`): tenant, entry (a JSON integer,
        # section 2.5), reason (1 to 500 bytes, no control characters or surrounding spaces; as
        # Rust's `trim`, white space is Unicode White_Space, which str.strip also removes).
        b = _Body(body, {"tenant": True, "entry": True, "reason": True}, int_members=("entry",))
        b.id("tenant")
        b.integer("entry", 0, MAX_INDEX)
        reason = body["reason"]
        if (not reason or len(reason.encode("utf-8")) > MAX_EXCLUSION_REASON_BYTES
                or reason.strip() != reason or any(_is_control(c) for c in reason)):
            raise FieldError("invalid_field", "body.reason",
                             f"1 to {MAX_EXCLUSION_REASON_BYTES} bytes without control characters or "
                             "surrounding spaces")
    elif kind == "log_policy":
        b = _Body(body, {"max_record_age_seconds": True, "max_future_skew_seconds": True},
                  int_members=("max_record_age_seconds", "max_future_skew_seconds"))
        age = b.integer("max_record_age_seconds", MIN_RECORD_AGE_SECONDS, MAX_RECORD_AGE_SECONDS)
        skew = b.integer("max_future_skew_seconds", MIN_FUTURE_SKEW_SECONDS, MAX_FUTURE_SKEW_SECONDS)
        out.update(max_record_age_seconds=age, max_future_skew_seconds=skew)
    elif kind == "node_registered":
        b = _Body(body, {"node": True, "region": True, "hub": False, "gpus": True, "max_watts_per_gpu": True},
                  array_members=("gpus",))
        gpus = _node_gpus(b)
        b.id("node")
        b.id("region")
        if b.has("hub"):
            b.id("hub")
        _check_node_gpus(gpus)
        watts = b.decimal("max_watts_per_gpu", Decimal(0), MAX_WATTS_PER_GPU, lo_exclusive=True)
        out.update(max_watts_per_gpu=watts)
    elif kind == "node_updated":
        # record.rs `NodeUpdated::check` (section 5.18): the node; the GPUs, if any, as
        # node_registered's; the power limit, if any, as node_registered's; at least one of them.
        b = _Body(body, {"node": True, "gpus": False, "max_watts_per_gpu": False}, array_members=("gpus",))
        gpus = _node_gpus(b) if b.has("gpus") else None
        b.id("node")
        if gpus is not None:
            _check_node_gpus(gpus)
        watts = None
        if b.has("max_watts_per_gpu"):
            watts = b.decimal("max_watts_per_gpu", Decimal(0), MAX_WATTS_PER_GPU, lo_exclusive=True)
        if gpus is None and watts is None:
            raise FieldError("invalid_field", "body.gpus", "an update adds GPUs, raises max_watts_per_gpu, or both")
        out.update(max_watts_per_gpu=watts)
    elif kind == "contract_registered":
        # Section 5.19 (issue #28): a tenant's contract, written by the ledger (_contract).
        b = _Body(body, {"tenant": True, "contract": True, "currency": True, "region": True, "term_from": True,
                         "term_to": True, "billing_period": True, "billing_anchor": True, "fees": False,
                         "commitment": False, "sla": False}, array_members=("fees",), object_members=("sla",))
        out.update(contract=_contract(b))
    elif kind == "prepayment":
        # Section 5.20: a tenant's prepaid lot, written by the ledger (_prepayment).
        b = _Body(body, {"tenant": True, "reference": True, "source": True, "currency": True, "amount": True,
                         "expires_at": False})
        out.update(prepayment=_prepayment(b))
    elif kind == "contract_amended":
        # Section 5.21: a contract's term ended early or extended, written by the ledger
        # (_contract_amendment).
        b = _Body(body, {"tenant": True, "contract": True, "term_to": True, "reason": True})
        out.update(amendment=_contract_amendment(b))
    else:  # pragma: no cover - kinds are checked before
        raise FieldError("unknown_kind", "kind", kind)
    return out


def check_envelope(env: Any, origin: str) -> Dict[str, Any]:
    """Sections 4.3 and 5 (version 2). `origin` is the log's origin (the verifier key's name),
    which the signed message names. The rules that need the log (keys, scope, parties, the
    clock rules under the log policy, price series) are LogView's. Raises FieldError."""
    if not isinstance(env, dict):
        raise FieldError("malformed", "envelope", "not a JSON object")
    for name in env:
        if name not in ENVELOPE_MEMBERS:
            raise FieldError("malformed", name, "unknown member")
    for name in ENVELOPE_MEMBERS:
        if name not in env:
            raise FieldError("malformed", name, "missing")
    types = {"v": is_int, "kind": lambda x: isinstance(x, str), "signer": lambda x: isinstance(x, str),
             "key_id": lambda x: isinstance(x, str), "seq": is_int, "body": lambda x: isinstance(x, dict),
             "sig": lambda x: isinstance(x, str)}
    for name, ok in types.items():
        if not ok(env[name]):
            raise FieldError("malformed", name, "wrong type")
    if env["v"] != PROTOCOL_VERSION:
        raise FieldError("unsupported_version", "v", f"v is {env['v']}, not {PROTOCOL_VERSION}")
    if env["kind"] not in KINDS:
        raise FieldError("unknown_kind", "kind", f"{env['kind']!r} names no record kind")
    if not is_id(env["signer"]):
        raise FieldError("invalid_field", "signer", f"{env['signer']!r} is not an identifier")
    if KEY_ID_RE.fullmatch(env["key_id"]) is None:
        raise FieldError("invalid_field", "key_id", f"{env['key_id']!r} is not a key id")
    if not 1 <= env["seq"] <= MAX_SEQ:
        raise FieldError("quantity_out_of_range", "seq", f"{env['seq']} is outside 1..{MAX_SEQ}")
    parsed = check_body(env["kind"], env["body"])
    try:
        sig = b64decode_canonical(env["sig"], 64)
    except ValueError as e:
        raise FieldError("invalid_field", "sig", str(e)) from None
    unsigned = jcs({k: v for k, v in env.items() if k != "sig"})
    # JCS of the whole envelope is the unsigned form with `,"sig":"<base64>"` inserted (a base64
    # string needs no escaping), so its size follows without encoding it again.
    size = len(unsigned) + len(',"sig":""') + len(env["sig"])
    if size > MAX_ENVELOPE_BYTES:
        raise FieldError("too_large", "envelope", f"canonical envelope is {size} bytes, above 8192")
    parsed["sig"] = sig
    parsed["message"] = _message(env["kind"], origin, unsigned)
    return parsed


# ---------------------------------------------------------------------------------------------
# Certificates (section 13)
# ---------------------------------------------------------------------------------------------

CERT_MEMBERS = ("v", "id", "tenant", "period_from", "period_to", "scope", "issued_at", "log_origin",
                "checkpoint", "entries", "gpu", "energy", "totals", "sig")
GPU_LINE_MEMBERS = ("region", "gpu_model", "gpu_seconds", "records")
ENERGY_LINE_BASE = ("region", "kwh", "records")
ENERGY_LINE_PARAMS = ("pue", "carbon_g_per_kwh", "kwh_with_pue", "carbon_kg")
TOTALS_MEMBERS = ("records", "gpu_seconds", "kwh", "kwh_with_pue", "carbon_kg", "kwh_without_region_params")


@dataclass
class CertInfo:
    raw: Dict[str, Any]
    id: str
    tenant: str
    period_from: int
    period_to: int
    scope_lease: Optional[str]
    scope_nodes: Optional[frozenset]
    scope_region: Optional[str]
    sig: bytes


def check_certificate_shape(cert: Any) -> CertInfo:
    """The certificate object of section 13.2. Raises Failure(malformed, certificate...)."""

    def bad(item: str, msg: str) -> Failure:
        return Failure("malformed", item, msg)

    if not isinstance(cert, dict):
        raise bad("certificate", "not a JSON object")
    for name in cert:
        if name not in CERT_MEMBERS:
            raise bad(f"certificate.{name}", "unknown member")
    for name in CERT_MEMBERS:
        if name not in cert:
            raise bad(f"certificate.{name}", "missing")
    # The certificate object is unchanged in protocol version 2 (its own v stays 1, its tag
    # gpuledger-certificate/v1).
    if not is_int(cert["v"]) or cert["v"] != 1:
        raise bad("certificate.v", "not the integer 1")
    if not isinstance(cert["id"], str) or CERT_ID_RE.fullmatch(cert["id"]) is None:
        raise bad("certificate.id", "not CERT- and six or more digits")
    if not is_id(cert["tenant"]):
        raise bad("certificate.tenant", "not an identifier")
    times = {}
    for name in ("period_from", "period_to", "issued_at"):
        try:
            times[name] = parse_timestamp(cert[name])
        except (TypeError, ValueError) as e:
            raise bad(f"certificate.{name}", f"not a timestamp ({e})") from None
    if times["period_from"] >= times["period_to"]:
        raise bad("certificate.period_to", "period_from is not before period_to")
    scope = cert["scope"]
    if not isinstance(scope, dict):
        raise bad("certificate.scope", "not an object")
    for name in scope:
        if name not in ("lease", "nodes", "region"):
            raise bad(f"certificate.scope.{name}", "unknown member")
    lease = scope.get("lease")
    if "lease" in scope and not is_id(lease):
        raise bad("certificate.scope.lease", "not an identifier")
    region = scope.get("region")
    if "region" in scope and not is_id(region):
        raise bad("certificate.scope.region", "not an identifier")
    nodes = None
    if "nodes" in scope:
        n = scope["nodes"]
        if not isinstance(n, list) or not 1 <= len(n) <= MAX_SCOPE_NODES or not all(is_id(x) for x in n):
            raise bad("certificate.scope.nodes", "not an array of 1 to 1000 identifiers")
        if any(n[i].encode() >= n[i + 1].encode() for i in range(len(n) - 1)):
            raise bad("certificate.scope.nodes", "not sorted by byte order without repeats")
        nodes = frozenset(n)
    if not isinstance(cert["log_origin"], str) or cert["log_origin"] == "":
        raise bad("certificate.log_origin", "not a non-empty string")
    if not isinstance(cert["checkpoint"], str):
        raise bad("certificate.checkpoint", "not a string")
    entries = cert["entries"]
    if not isinstance(entries, dict) or set(entries) != {"count", "commitment"}:
        raise bad("certificate.entries", "not an object {count, commitment}")
    if not is_int(entries["count"]) or not 0 <= entries["count"] <= MAX_INDEX:
        raise bad("certificate.entries.count", "not a non-negative integer")
    try:
        b64decode_canonical(entries["commitment"], 32)
    except ValueError as e:
        raise bad("certificate.entries.commitment", str(e)) from None

    def dec(item: str, value: Any) -> None:
        try:
            parse_exact_decimal(value)
        except ValueError as e:
            raise bad(item, str(e)) from None

    def count(item: str, value: Any) -> None:
        if not is_int(value) or not 0 <= value <= MAX_INDEX:
            raise bad(item, "not a non-negative integer")

    if not isinstance(cert["gpu"], list):
        raise bad("certificate.gpu", "not an array")
    for i, line in enumerate(cert["gpu"]):
        item = f"gpu[{i}]"
        if not isinstance(line, dict) or set(line) != set(GPU_LINE_MEMBERS):
            raise bad(item, f"not an object with exactly {', '.join(GPU_LINE_MEMBERS)}")
        for name in ("region", "gpu_model"):
            if not is_id(line[name]):
                raise bad(f"{item}.{name}", "not an identifier")
        dec(f"{item}.gpu_seconds", line["gpu_seconds"])
        count(f"{item}.records", line["records"])
    if not isinstance(cert["energy"], list):
        raise bad("certificate.energy", "not an array")
    for i, line in enumerate(cert["energy"]):
        item = f"energy[{i}]"
        if not isinstance(line, dict) or (set(line) != set(ENERGY_LINE_BASE)
                                          and set(line) != set(ENERGY_LINE_BASE + ENERGY_LINE_PARAMS)):
            raise bad(item, "not an energy line (region, kwh, records[, pue, carbon_g_per_kwh, kwh_with_pue, carbon_kg])")
        if not is_id(line["region"]):
            raise bad(f"{item}.region", "not an identifier")
        count(f"{item}.records", line["records"])
        for name in ("kwh",) + ENERGY_LINE_PARAMS:
            if name in line:
                dec(f"{item}.{name}", line[name])
    totals = cert["totals"]
    if not isinstance(totals, dict) or set(totals) != set(TOTALS_MEMBERS):
        raise bad("certificate.totals", f"not an object with exactly {', '.join(TOTALS_MEMBERS)}")
    count("totals.records", totals["records"])
    for name in TOTALS_MEMBERS[1:]:
        dec(f"totals.{name}", totals[name])
    try:
        sig = b64decode_canonical(cert["sig"], 64)
    except ValueError as e:
        raise bad("certificate.sig", str(e)) from None
    return CertInfo(cert, cert["id"], cert["tenant"], times["period_from"], times["period_to"],
                    lease, nodes, region, sig)


# ---------------------------------------------------------------------------------------------
# Bundles (sections 14 and 15)
# ---------------------------------------------------------------------------------------------

BUNDLE_FORMAT = "gpuledger-bundle/v2"
# Version 3 (section 14): leaves as JSON objects, every line canonical (RFC 8785), one multi-proof
# in node lines before the end line. The header's format says which a bundle is.
BUNDLE_FORMAT_V3 = "gpuledger-bundle/v3"
BUNDLE_FORMATS = (BUNDLE_FORMAT, BUNDLE_FORMAT_V3)
MAX_NODES_PER_LINE = 4096
HEADER_MEMBERS = ("type", "format", "log_origin", "checkpoint", "subject")
ENTRY_MEMBERS = ("type", "index", "leaf", "proof")
ENTRY_MEMBERS_V3 = ("type", "index", "leaf")
NODES_MEMBERS = ("type", "hashes")
END_MEMBERS = ("type", "entries")
END_MEMBERS_V3 = ("type", "entries", "nodes")


@dataclass
class Header:
    log_origin: str
    checkpoint: str
    subject_kind: str
    subject_id: str
    format: str = BUNDLE_FORMAT


@dataclass
class EntryLine:
    lineno: int
    index: int
    leaf: bytes
    proof: Optional[List[bytes]]  # None in version 3: the multi-proof proves every entry

    @property
    def item(self) -> str:
        return f"entry {self.index} (bundle line {self.lineno})"


@contextlib.contextmanager
def _rereadable(path: str) -> Iterator[str]:
    """Bundles are read twice (step 1, then steps 4 to 7). A pipe or `-` (stdin) is first
    copied to a temporary file; a regular file is read in place."""
    if path != "-" and os.path.isfile(path):
        yield path
        return
    try:
        src = sys.stdin.buffer if path == "-" else open(path, "rb")
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e}") from None
    fd, tmp = tempfile.mkstemp(prefix="gpuledger-bundle-")
    try:
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(src, out)
        if src is not sys.stdin.buffer:
            src.close()
        yield tmp
    finally:
        os.unlink(tmp)


def _iter_lines(path: str) -> Iterator[Tuple[int, bytes]]:
    try:
        f = open(path, "rb")
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e}") from None
    with f:
        lineno = 0
        for raw in f:
            lineno += 1
            yield lineno, raw


def _parse_bundle_line(lineno: int, raw: bytes) -> Dict[str, Any]:
    item = f"bundle line {lineno}"
    if raw == b"\n":
        raise Failure("malformed", item, "blank line")
    try:
        obj = parse_json(raw[:-1])
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise Failure("malformed", item, f"not a JSON object ({e})") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        raise Failure("malformed", item, "not a JSON object with a string type")
    return obj


def _require_canonical(obj: Dict[str, Any], raw: bytes, item: str) -> None:
    """Version 3: a line is exactly the RFC 8785 form of its object (so an entry's leaf text is
    its leaf bytes)."""
    try:
        canonical = jcs(obj)
    except Exception:  # noqa: BLE001 - rfc8785 refuses some values (huge integers, lone surrogates)
        canonical = None
    if canonical != raw[:-1]:
        raise Failure("malformed", item, "a version-3 line must be canonical JSON (RFC 8785)")


def _exact_members(obj: Dict[str, Any], members: Tuple[str, ...], item: str) -> None:
    if set(obj) != set(members):
        extra = sorted(set(obj) - set(members))
        missing = sorted(set(members) - set(obj))
        raise Failure("malformed", item, f"members must be exactly {', '.join(members)}"
                      + (f"; unknown {extra}" if extra else "") + (f"; missing {missing}" if missing else ""))


def _parse_header(obj: Dict[str, Any], lineno: int) -> Header:
    item = f"bundle line {lineno} (header)"
    if obj["type"] != "header":
        raise Failure("malformed", f"bundle line {lineno}", "the first line is not the header")
    _exact_members(obj, HEADER_MEMBERS, item)
    if obj["format"] not in BUNDLE_FORMATS:
        raise Failure("malformed", item, f"format is {obj['format']!r}, not one of {', '.join(BUNDLE_FORMATS)}")
    if not isinstance(obj["log_origin"], str) or not isinstance(obj["checkpoint"], str):
        raise Failure("malformed", item, "log_origin and checkpoint must be strings")
    subject = obj["subject"]
    if (not isinstance(subject, dict) or len(subject) != 1
            or next(iter(subject)) not in ("certificate", "invoice")
            or not isinstance(next(iter(subject.values())), str)):
        raise Failure("malformed", item, 'subject must be {"certificate": id} or {"invoice": number}')
    (kind, ident), = subject.items()
    return Header(obj["log_origin"], obj["checkpoint"], kind, ident, obj["format"])


def _parse_entry(obj: Dict[str, Any], lineno: int, v3: bool = False) -> EntryLine:
    item = f"bundle line {lineno}"
    _exact_members(obj, ENTRY_MEMBERS_V3 if v3 else ENTRY_MEMBERS, item)
    index = obj["index"]
    if not is_int(index) or not 0 <= index <= MAX_INDEX:
        raise Failure("malformed", item, "index is not an integer 0..2^53-1")
    if v3:
        # The leaf is its JSON object; its bytes are that object's canonical form, which the
        # (canonical) line holds verbatim.
        if not isinstance(obj["leaf"], dict):
            raise Failure("malformed", item, "a version-3 leaf is a JSON object")
        return EntryLine(lineno, index, jcs(obj["leaf"]), None)
    try:
        leaf = b64decode_canonical(obj["leaf"])
    except ValueError as e:
        raise Failure("malformed", item, f"leaf: {e}") from None
    if not isinstance(obj["proof"], list):
        raise Failure("malformed", item, "proof is not an array")
    proof = []
    for i, h in enumerate(obj["proof"]):
        try:
            proof.append(b64decode_canonical(h, 32))
        except ValueError as e:
            raise Failure("malformed", item, f"proof[{i}]: {e}") from None
    return EntryLine(lineno, index, leaf, proof)


def _leaf_kind(leaf: bytes) -> Optional[str]:
    try:
        obj = parse_json(leaf)
        kind = obj["envelope"]["kind"]
    except Exception:  # noqa: BLE001 - any failure here is reported by step 4
        return None
    return kind if isinstance(kind, str) else None


@dataclass
class Structure:
    header: Header
    entries: int
    context: int
    records: int


def _parse_nodes(obj: Dict[str, Any], lineno: int) -> List[bytes]:
    item = f"bundle line {lineno} (nodes)"
    _exact_members(obj, NODES_MEMBERS, item)
    hashes = obj["hashes"]
    if not isinstance(hashes, list) or not 1 <= len(hashes) <= MAX_NODES_PER_LINE:
        raise Failure("malformed", item, f"hashes must be an array of 1 to {MAX_NODES_PER_LINE} hashes")
    out = []
    for i, h in enumerate(hashes):
        try:
            out.append(b64decode_canonical(h, 32))
        except ValueError as e:
            raise Failure("malformed", item, f"hashes[{i}]: {e}") from None
    return out


def check_structure(path: str) -> Structure:
    """Step 1 (section 15): one pass, memory bounded by the context's indexes."""
    header: Optional[Header] = None
    v3 = False
    n_nodes = 0
    in_nodes = False
    ended_with: Optional[int] = None
    n_entries = n_context = n_records = 0
    last_context = last_record = -1
    context_indexes = set()
    in_records = False
    last_lineno = 0
    for lineno, raw in _iter_lines(path):
        last_lineno = lineno
        if not raw.endswith(b"\n"):
            raise Failure("truncated", f"bundle line {lineno}", "the file ends in the middle of a line")
        if ended_with is not None:
            raise Failure("malformed", f"bundle line {lineno}", "a line after the end line")
        obj = _parse_bundle_line(lineno, raw)
        if header is None:
            header = _parse_header(obj, lineno)
            v3 = header.format == BUNDLE_FORMAT_V3
            if v3:
                _require_canonical(obj, raw, f"bundle line {lineno} (header)")
            continue
        t = obj["type"]
        if v3 and t in ("entry", "nodes", "end"):
            _require_canonical(obj, raw, f"bundle line {lineno}")
        if v3 and t == "nodes":
            n_nodes += len(_parse_nodes(obj, lineno))
            in_nodes = True
            continue
        if t == "entry":
            e = _parse_entry(obj, lineno, v3)
            if in_nodes:
                raise Failure("order", e.item, "an entry after the node lines")
            n_entries += 1
            kind = _leaf_kind(e.leaf)
            if kind not in KINDS:
                # A leaf that does not parse or names no kind cannot be placed; step 4 refuses it
                # (leaf_invalid or inclusion_proof), so it is left out of the order checks.
                continue
            if kind not in RECORD_KINDS:
                if in_records:
                    raise Failure("order", e.item, "a context entry after the records")
                if e.index <= last_context:
                    raise Failure("order", e.item, f"context index {e.index} does not increase "
                                  f"(after {last_context})")
                last_context = e.index
                context_indexes.add(e.index)
                n_context += 1
            else:
                in_records = True
                if e.index <= last_record:
                    raise Failure("order", e.item, f"record index {e.index} does not increase "
                                  f"(after {last_record})")
                if e.index in context_indexes:
                    raise Failure("order", e.item, f"index {e.index} appears twice")
                last_record = e.index
                n_records += 1
        elif t == "end":
            _exact_members(obj, END_MEMBERS_V3 if v3 else END_MEMBERS, f"bundle line {lineno} (end)")
            if not is_int(obj["entries"]) or obj["entries"] < 0:
                raise Failure("malformed", f"bundle line {lineno} (end)", "entries is not a non-negative integer")
            if v3 and (not is_int(obj["nodes"]) or obj["nodes"] < 0):
                raise Failure("malformed", f"bundle line {lineno} (end)", "nodes is not a non-negative integer")
            if obj["entries"] != n_entries:
                raise Failure("truncated", f"bundle line {lineno} (end)",
                              f"end line counts {obj['entries']} entries, the bundle holds {n_entries}")
            if v3 and obj["nodes"] != n_nodes:
                raise Failure("truncated", f"bundle line {lineno} (end)",
                              f"end line counts {obj['nodes']} nodes, the bundle holds {n_nodes}")
            ended_with = obj["entries"]
        elif t == "header":
            raise Failure("malformed", f"bundle line {lineno}", "a second header")
        else:
            raise Failure("malformed", f"bundle line {lineno}", f"unknown line type {t!r}")
    if header is None:
        raise Failure("truncated", "bundle", "empty bundle (no header)")
    if ended_with is None:
        raise Failure("truncated", f"bundle line {last_lineno + 1}", "no end line")
    return Structure(header, n_entries, n_context, n_records)


def _iter_entries(path: str, v3: bool = False) -> Iterator[EntryLine]:
    """Second pass: the entry lines (already checked by check_structure)."""
    for lineno, raw in _iter_lines(path):
        if not raw.endswith(b"\n"):
            raise Failure("truncated", f"bundle line {lineno}", "the file changed while it was read")
        obj = _parse_bundle_line(lineno, raw)
        if obj["type"] == "entry":
            yield _parse_entry(obj, lineno, v3)


def _iter_nodes(path: str) -> Iterator[bytes]:
    """Version 3: the multi-proof's nodes, in order (their lines checked by check_structure)."""
    for lineno, raw in _iter_lines(path):
        obj = _parse_bundle_line(lineno, raw)
        if obj["type"] == "nodes":
            yield from _parse_nodes(obj, lineno)


@dataclass
class KeyInfo:
    signer: str
    role: str
    public_key: bytes
    registered_at: int
    nodes: Optional[frozenset]  # version 2 scope: the nodes a node key may sign for (None for market keys)
    regions: frozenset  # version 2 scope: the regions the key may sign for
    revoked_at: Optional[int] = None


@dataclass(frozen=True)
class Policy:
    """A log_policy entry (version 2), in force from the entry after `index` on."""
    index: int
    max_record_age_seconds: int
    max_future_skew_seconds: int


DEFAULT_POLICY = Policy(-1, DEFAULT_MAX_RECORD_AGE_SECONDS, DEFAULT_MAX_FUTURE_SKEW_SECONDS)


@dataclass
class RegionParams:
    index: int
    effective_from: int
    pue: Decimal
    carbon: Decimal
    pue_text: str
    carbon_text: str


# Ledger kinds that name a tenant (version 2, section 6 "Parties").
TENANT_LEDGER_KINDS = ("lease_registered", "tenant_plan", "invoice_issued", "payment", "credit_note",
                       "certificate_issued", "record_excluded", "contract_registered", "prepayment",
                       "contract_amended")


def _stream(kind: str, body: Dict[str, Any]) -> Optional[str]:
    """Section 6.4a: the measurement stream of a gpu_usage or energy record, else None."""
    if kind == "gpu_usage":
        return f"gpu_usage|{body['node']}|{body['tenant']}|{body.get('lease', '')}|{body['gpu_model']}"
    if kind == "energy":
        return f"energy|{body['node']}|{body.get('tenant', '')}"
    return None


def _price_series(kind: str, body: Dict[str, Any]) -> Optional[Tuple[str, ...]]:
    """Version 2, section 6 "Prices only move forward": the series of a pricing entry."""
    if kind == "rate_card":
        return (kind, body["region"], body["gpu_model"], body["lease_class"])
    if kind == "region_params":
        return (kind, body["region"])
    if kind == "volume_tiers":
        return (kind, body["plan"], body["region"], body["gpu_model"], body["lease_class"])
    if kind == "tenant_plan":
        return (kind, body["tenant"])
    return None


class LogView:
    """What the bundle's context tells about the log: keys and their scopes, tenants, leases, nodes,
    log policies, region parameters, prices and invoices; and the rules of sections 5 and 6 that can
    be checked with the entries at hand.

    `subject_tenant` is the certificate's tenant when a certificate is checked: a record of
    another tenant is not the certificate's (step 5, wrong_tenant), and the bundle holds no
    registrations of other tenants (version 2, section 8), so the party rules are not applied to
    such a record. With `subject_tenant` None (a bundle alone) they apply to every record."""

    def __init__(self, key: VerifierKey, subject_tenant: Optional[str] = None):
        self.origin = key.name
        self.log_pub = key.public_key
        self.log_key_id = key.envelope_key_id
        self.subject_tenant = subject_tenant
        self.keys: Dict[str, KeyInfo] = {}
        self.roles: Dict[str, str] = {}
        self.early_revocations: Dict[str, Tuple[str, int]] = {}  # revocations of keys the context does not register
        self.policies: List[Policy] = []  # in index order
        self.tenants: Dict[str, int] = {}  # tenant -> index of its tenant_registered entry
        # lease -> its registration (with the index of its lease_registered entry); the first
        # registration of a lease counts. leases_by_node: node -> the leases naming it, in log order.
        self.leases: Dict[str, Lease] = {}
        self.leases_by_node: Dict[str, List[str]] = {}
        # The fleet (inventory.rs `FleetLog`): node -> its registration (the first counts) with
        # what its node_updated entries added, each with the index of its entry.
        self.nodes: Dict[str, FleetNode] = {}
        self.region_params: Dict[str, List[RegionParams]] = {}
        self.series_latest: Dict[Tuple[str, ...], int] = {}  # price series -> latest effective_from
        self.spot_prices: Dict[Tuple[str, str, int], int] = {}  # (region, gpu_model, effective_from) -> index
        # Section 5.10: invoice number -> [tenant, currency, total, credited so far].
        self.accounts: Dict[str, List[Any]] = {}
        # (tenant, kind, external_reference) -> index of the settlement that carries it
        self.references: Dict[Tuple[str, str, str], int] = {}
        # Disputes (section 6.7): excluded entry -> index of the (first) record_excluded naming it
        self.exclusions: Dict[int, int] = {}
        # The same, (tenant of the record_excluded entry, excluded entry), in log order: the
        # records an invoice's SLA availability leaves out (RATING.md, "SLA credits").
        self.excluded_entries: List[Tuple[str, int]] = []
        # The same with the exclusion's reason, (tenant, excluded entry, reason), in log order: an
        # invoice's `excluded` member (InvoiceScope).
        self.exclusion_reasons: List[Tuple[str, int, str]] = []
        # The pricing entries of the context, (index, kind, body) in log order: rate_card,
        # spot_price, region_params, volume_tiers, tenant_plan and lease_registered (a lease's
        # class), of every tenant: what an invoice's usage lines are re-rated by (PriceBook).
        self.pricing_entries: List[Tuple[int, str, Dict[str, Any]]] = []
        # An invoice's bundle (verify_bundle with an invoice): its records, in bundle order, as
        # rating reads them (UsageRecord); left empty for any other bundle.
        self.usage_records: List["UsageRecord"] = []
        # The bundle's gpu_usage records that name a lease, as SLA availability and included
        # GPU-hours read them: (index, tenant, lease, start, end, gpu_count, gpu_model,
        # gpu_seconds) (RATING.md, "SLA credits", "Included GPU-hours and overage").
        self.lease_usage: List[Tuple[int, str, str, int, int, str, str, str]] = []
        # Contracts (section 6.7, contracts and contract amendments): the contracts of the
        # entries taken in so far, as amended by the contract_amended entries among them (the
        # first registration of an id counts). The contract rules compare their terms; an
        # invoice's contract lines are recomputed from their bodies (RATING.md, "Contracts",
        # "Amendments"; verify_bundle with an invoice).
        self.contracts = Contracts()
        # Prepaid balances (section 6.7, prepayments): (tenant, reference) -> index of the
        # prepayment that carries it (the first counts); and the prepayment and invoice_issued
        # entries, (index, kind, body) in index order, from which an invoice's draws on its
        # tenant's lots are recomputed (RATING.md, "Prepaid balances"; PrepaidBook).
        self.prepayments: Dict[Tuple[str, str], int] = {}
        self.prepaid_entries: List[Tuple[int, str, Dict[str, Any], Optional[int]]] = []
        # Section 6.4a: stream -> (starts, [(end, index)]) of the intervals held so far, by start.
        self.intervals: Dict[str, Tuple[List[int], List[Tuple[int, int]]]] = {}
        self.invoices: List[Tuple[int, str, int, int]] = []  # (index, tenant, period_from, period_to)
        # (tenant, number, period_from, period_to, checkpoint_size) of each invoice_issued entry, in
        # log order: which of an invoice's records are late (InvoiceScope, RATING.md "Late records").
        self.invoice_scopes: List[Tuple[str, str, int, int, int]] = []
        self.invoice_numbers: List[str] = []
        self.invoice_periods: Dict[str, List[Tuple[int, int]]] = {}
        self.context_seqs: set = set()  # (signer, seq) of the context entries (section 6.3)
        self.context_leaf_hashes: Dict[int, bytes] = {}
        # Receive times (section 7: they never decrease in index order): the context entries'
        # by index (in increasing order, context comes first) and the last record's.
        self.context_times: List[Tuple[int, int]] = []
        self.context_time_indexes: List[int] = []
        self.last_record_time: Optional[Tuple[int, int]] = None

    # section 7: the receive times of the entries held never decrease in index order
    def check_received_in_order(self, index: int, received_at: int, record: bool) -> None:
        keys = self.context_time_indexes
        at = bisect.bisect_left(keys, index)
        before = self.context_times[at - 1] if at > 0 else None
        if self.last_record_time is not None and self.last_record_time[0] < index and (
                before is None or self.last_record_time[0] > before[0]):
            before = self.last_record_time
        if before is not None and received_at < before[1]:
            raise Failure("received_at_decreased", f"entry {index}",
                          f"received_at {format_ts(received_at)} is before {format_ts(before[1])}, the received_at "
                          f"of entry {before[0]}: the log's receive times never decrease")
        after = self.context_times[at] if at < len(self.context_times) and keys[at] > index else None
        if after is not None and after[1] < received_at:
            raise Failure("received_at_decreased", f"entry {after[0]}",
                          f"received_at {format_ts(after[1])} is before {format_ts(received_at)}, the received_at "
                          f"of entry {index}: the log's receive times never decrease")
        if record:
            self.last_record_time = (index, received_at)
        else:
            self.context_times.insert(at, (index, received_at))
            keys.insert(at, index)

    # step 4: key validity (sections 6.1, 6.2)
    def key_for(self, env: Dict[str, Any], index: int, item: str) -> bytes:
        kind, signer, kid = env["kind"], env["signer"], env["key_id"]
        if kind in LEDGER_KINDS:
            if signer != "ledger":
                raise Failure("key_not_allowed", item, f"{kind} is a ledger kind, signed by {signer!r}")
            if kid != self.log_key_id:
                raise Failure("unknown_key", item, f"ledger entry signed with key id {kid}, not the log key's {self.log_key_id}")
            return self.log_pub
        if signer == "ledger":
            raise Failure("key_not_allowed", item, f"the ledger may not sign {kind}")
        info = self.keys.get(kid)
        if info is None or info.registered_at >= index:
            raise Failure("unknown_key", item, f"key id {kid} of {signer} is not registered before entry {index}")
        if info.signer != signer:
            raise Failure("key_not_allowed", item, f"key id {kid} belongs to {info.signer}, not {signer}")
        if info.revoked_at is not None and info.revoked_at < index:
            raise Failure("key_revoked", item, f"key id {kid} of {signer} was revoked at entry {info.revoked_at}, "
                          f"before entry {index}")
        if kind not in ROLE_KINDS[info.role]:
            raise Failure("key_not_allowed", item, f"{signer} has role {info.role}, which may not sign {kind}")
        return info.public_key

    # step 4: registry rules of sections 5 and 6 among the context entries (leaf_invalid)
    def check_context_rules(self, env: Dict[str, Any], index: int, parsed: Dict[str, Any]) -> None:
        kind, body = env["kind"], env["body"]
        if (env["signer"], env["seq"]) in self.context_seqs:
            raise FieldError("conflict", "seq", f"({env['signer']}, {env['seq']}) occurs twice in the log")
        if kind == "signer_key_registered":
            kid = body["key_id"]
            if kid in self.keys or kid == self.log_key_id:
                raise FieldError("invalid_field", "body.key_id", f"key id {kid} is registered twice")
            if kid in self.early_revocations:
                raise FieldError("invalid_field", "body.key_id", f"key id {kid} was revoked before it was registered")
            role = self.roles.get(body["signer"])
            if role is not None and role != body["role"]:
                raise FieldError("invalid_field", "body.role",
                                 f"{body['signer']} has role {role}; a signer keeps one role")
        elif kind == "signer_key_revoked":
            kid = body["key_id"]
            info = self.keys.get(kid)
            if info is not None:
                if info.signer != body["signer"]:
                    raise FieldError("invalid_field", "body.signer", f"key id {kid} belongs to {info.signer}")
                if info.revoked_at is not None:
                    raise FieldError("invalid_field", "body.key_id", f"key id {kid} is already revoked")
            elif kid in self.early_revocations:
                raise FieldError("invalid_field", "body.key_id", f"key id {kid} is already revoked")
        elif kind == "invoice_issued":
            if self.invoice_numbers and body["number"] <= self.invoice_numbers[-1]:
                raise FieldError("invalid_field", "body.number", "invoice numbers are not in issue order")
            for pf, pt in self.invoice_periods.get(body["tenant"], []):
                if parsed["period_from"] < pt and pf < parsed["period_to"]:
                    raise FieldError("invalid_field", "body.period_from",
                                     "overlaps an invoiced period of the same tenant")

    def policy_at(self, index: int) -> Policy:
        """The log policy in force at entry `index`: the latest log_policy entry before it, else the
        defaults (version 2, section 5)."""
        best = DEFAULT_POLICY
        for p in self.policies:
            if p.index < index:
                best = p
        return best

    # step 4: the admission rules of version 2 (section 6), each failure with its own reason
    def check_admission(self, env: Dict[str, Any], index: int, parsed: Dict[str, Any], now: int, item: str) -> None:
        """Scope, parties, fleet, time, spot series and prices forward, in that order (section 6's
        order; key and role were checked before, the signature comes after)."""
        kind, body = env["kind"], env["body"]

        def fail(reason: str, field_name: str, message: str) -> Failure:
            return Failure(reason, item, f"{field_name}: {message}")

        # Scope: the key's registration gives the nodes and regions it may sign for.
        if kind in NODE_KINDS or kind in MARKET_KINDS:
            info = self.keys[env["key_id"]]
            if kind in NODE_KINDS and body["node"] not in (info.nodes or ()):
                raise fail("node_not_allowed", "body.node",
                           f"node {body['node']!r} is not among the nodes of key {env['key_id']} of "
                           f"{env['signer']} ({', '.join(sorted(info.nodes or ()))})")
            if body["region"] not in info.regions:
                raise fail("region_not_allowed", "body.region",
                           f"region {body['region']!r} is not among the regions of key {env['key_id']} of "
                           f"{env['signer']} ({', '.join(sorted(info.regions))})")

        # Parties.
        def registered(tenant: str) -> None:
            at = self.tenants.get(tenant)
            if at is None or at >= index:
                raise fail("unknown_tenant", "body.tenant",
                           f"tenant {tenant!r} has no tenant_registered entry before entry {index} in the bundle")

        def subject(tenant: str) -> bool:
            return self.subject_tenant is None or tenant == self.subject_tenant

        if kind == "gpu_usage" and subject(body["tenant"]):
            registered(body["tenant"])
            if "lease" in body:
                lease = self.leases.get(body["lease"])
                if lease is None or lease.index >= index:
                    raise fail("unknown_lease", "body.lease",
                               f"lease {body['lease']!r} has no lease_registered entry before entry {index} "
                               "in the bundle")
                if lease.tenant != body["tenant"]:
                    raise fail("lease_tenant_mismatch", "body.lease",
                               f"lease {body['lease']!r} is tenant {lease.tenant!r}'s, not {body['tenant']!r}'s")
        elif kind == "energy" and "tenant" in body and subject(body["tenant"]):
            registered(body["tenant"])
        elif kind in TENANT_LEDGER_KINDS:
            registered(body["tenant"])
            if kind == "lease_registered":
                lease = self.leases.get(body["lease"])
                if lease is not None and lease.index < index:
                    raise fail("already_registered", "body.lease",
                               f"lease {body['lease']!r} is already declared at entry {lease.index}")
            elif kind == "contract_registered":
                # The leases its fees rent (an SLA is measured on them): registered before it and
                # the contract tenant's, fee by fee (section 6.7, parties; admission.rs
                # `check_parties`, so before the contract rules of `ContractBook`).
                for i, fee in enumerate(body.get("fees") or ()):
                    if "lease" not in fee:
                        continue
                    f = f"body.fees[{i}].lease"
                    lease = self.leases.get(fee["lease"])
                    if lease is None or lease.index >= index:
                        raise fail("unknown_lease", f,
                                   f"lease {fee['lease']!r} has no lease_registered entry before entry {index} "
                                   "in the bundle")
                    if lease.tenant != body["tenant"]:
                        raise fail("lease_tenant_mismatch", f,
                                   f"lease {fee['lease']!r} is tenant {lease.tenant!r}'s, not {body['tenant']!r}'s")
                # Among the entries seen: a bundle holds its tenant's contracts only (section 14).
                other = self.contracts.get(body["contract"])
                if other is not None and other.index < index:
                    raise fail("already_registered", "body.contract",
                               f"contract {body['contract']!r} is already registered at entry {other.index}")
        elif kind == "tenant_registered":
            at = self.tenants.get(body["tenant"])
            if at is not None and at < index:
                raise fail("already_registered", "body.tenant",
                           f"tenant {body['tenant']!r} is already registered at entry {at}")

        # The fleet: node keys name registered nodes only, a node is registered once, a record
        # fits the node it names; and the leases: a lease covers GPUs its nodes have without
        # overbooking them, and usage is billed under a lease that covers it (section 6.7).
        self.check_fleet(kind, body, index, parsed, fail,
                         leases=kind not in NODE_KINDS or "tenant" not in body or subject(body["tenant"]))

        # Time, with the log policy in force at this index (now = received_at).
        policy = self.policy_at(index)
        if kind in ("invoice_issued", "certificate_issued"):
            to = parse_timestamp(body["period_to"])
            if to > now:
                raise fail("in_future", "body.period_to",
                           f"the period ends {to - now} s after received_at: it had not ended when it was issued")
        if kind in NODE_KINDS:
            start, end = parsed["start"], parsed["end"]
            if start < now - policy.max_record_age_seconds:
                raise fail("too_old", "body.start",
                           f"start is {now - start} s before received_at (max_record_age_seconds "
                           f"{policy.max_record_age_seconds})")
            if end > now + policy.max_future_skew_seconds:
                raise fail("in_future", "body.end",
                           f"end is {end - now} s after received_at (max_future_skew_seconds "
                           f"{policy.max_future_skew_seconds})")
        elif kind in PRICE_KINDS:
            # No price of any kind takes effect in the past (beyond the skew) or inside an
            # invoiced period (a tenant plan: inside one of its tenant's).
            eff = parsed["effective_from"]
            if eff < now - policy.max_future_skew_seconds:
                raise fail("price_in_past", "body.effective_from",
                           f"effective_from is {now - eff} s before received_at (max_future_skew_seconds "
                           f"{policy.max_future_skew_seconds})")
            if kind == "spot_price" and eff - now > MAX_SPOT_SCHEDULE_AHEAD_SECONDS:
                raise fail("in_future", "body.effective_from",
                           f"effective_from is {eff - now} s after received_at (limit 604800 s)")
            # Spot series (region, gpu_model); the currency is not part of the series.
            other = self.spot_prices.get((body["region"], body["gpu_model"], eff)) \
                if kind == "spot_price" else None
            if other is not None and other < index:
                raise fail("price_conflict", "body.effective_from",
                           f"entry {other} already prices ({body['region']}, {body['gpu_model']}) from "
                           f"{body['effective_from']}")
            only = body["tenant"] if kind == "tenant_plan" else None
            for inv_index, tenant, pf, pt in self.invoices:
                if inv_index < index and pf <= eff < pt and only in (None, tenant):
                    raise fail("price_in_invoiced_period", "body.effective_from",
                               f"{body['effective_from']} is inside the period invoiced at entry {inv_index} "
                               f"(tenant {tenant})")
        elif kind == "contract_registered":
            # Contracts (section 6.7): the term rules, with the policy in force, after the parties.
            self.check_contract_term(parsed["contract"], index, now, policy, fail)
        elif kind == "contract_amended":
            # Contract amendments (section 6.7): after the parties, in the table's order.
            self.check_contract_amendment(parsed["amendment"], index, now, policy, fail)
        elif kind == "prepayment":
            # Prepayments (section 6.7): after the parties, in the table's order.
            self.check_prepayment(parsed["prepayment"], index, now, fail)

        # Section 6.4a: no second of a stream claimed twice. The intervals of one stream never
        # overlap each other, so the one starting last before this end is the only candidate.
        stream = _stream(kind, body)
        if stream is not None and stream in self.intervals:
            starts, ends = self.intervals[stream]
            i = bisect.bisect_left(starts, parsed["end"]) - 1
            if i >= 0 and ends[i][0] > parsed["start"]:
                raise fail("overlapping_interval", "body.start",
                           f"[{body['start']}, {body['end']}) overlaps the interval of entry {ends[i][1]} "
                           f"for the same {kind} stream")

        # Prices only move forward.
        series = _price_series(kind, body)
        if series is not None:
            latest = self.series_latest.get(series)
            if latest is not None and parsed["effective_from"] <= latest:
                raise fail("price_not_forward", "body.effective_from",
                           f"{body['effective_from']} is not later than the latest effective_from of the series "
                           f"{'/'.join(series[1:])} earlier in the log")

    def registered_node(self, node: str, index: int) -> Optional[NodeAt]:
        """The node as of entry `index` (its registration and the updates before it), if the
        bundle holds a registration of it at an index below `index`."""
        reg = self.nodes.get(node)
        return reg.at(index) if reg is not None and reg.registered_at < index else None

    def check_fleet(self, kind: str, body: Dict[str, Any], index: int, parsed: Dict[str, Any], fail,
                    leases: bool = True) -> None:
        """Section 6.7, fleet (crates/core/src/fleet.rs `check_fleet`), after the party rules and
        before the time rules. Every question is answered as of the entry checked: a node's GPUs
        are those added by entries below its index, its power limit the latest set below it (a
        bundle's context may hold node_updated entries logged after a record).

        - node_registered: a node is registered once (already_registered).
        - node_updated: the node is registered (unknown_node), then `check_node_update`.
        - signer_key_registered: a node key's nodes are registered (unknown_node).
        - gpu_usage: its node is registered (unknown_node), the record names the node's region
          (wrong_region), a model the node has units of (unknown_gpu_model: an unpartitioned
          GPU's model, or `<model>/<profile>` of a MIG-partitioned GPU), at most as many units as
          the node has (over_capacity); then the lease rules (`check_usage_lease`).
        - lease_registered: `check_lease_registration`.
        - energy: its node is registered, the node's region (wrong_region), and at most what the
          node's units draw: units x max_watts_per_gpu x seconds, + 5 %, in units of 1/840 GPU
          (`within_energy_bound`); the units are the node's GPUs x 840 without a tenant, what the
          tenant's leases of the node cover with one (`energy_lease_cover`).

        `leases` False skips the lease rules of records (usage, and a tenant's energy): a record of
        another tenant than a certificate's, to which the party rules (which the lease rules build
        on) do not apply. The region rule is the node's, and applies to every record."""
        if kind == "node_registered":
            reg = self.nodes.get(body["node"])
            if reg is not None and reg.registered_at < index:
                raise fail("already_registered", "body.node",
                           f"{body['node']} is already registered (entry {reg.registered_at})")
        elif kind == "node_updated":
            node = self.registered_node(body["node"], index)
            if node is None:
                raise fail("unknown_node", "body.node", f"{body['node']} is not a registered node")
            self.check_node_update(body, node, index, parsed, fail)
        elif kind == "signer_key_registered":
            for node in body.get("nodes") or ():
                if self.registered_node(node, index) is None:
                    raise fail("unknown_node", "body.nodes", f"{node} is not a registered node")
        elif kind == "lease_registered":
            self.check_lease_registration(parsed["lease"], index, fail)
        elif kind in NODE_KINDS:
            name = body["node"]
            node = self.registered_node(name, index)
            if node is None:
                raise fail("unknown_node", "body.node", f"{name} is not a registered node")
            if node.region != body["region"]:
                raise fail("wrong_region", "body.region",
                           f"is {body['region']}, but node {name} is registered in {node.region}")
            if kind == "gpu_usage":
                model = body["gpu_model"]
                has = node.units_of(model)
                if has == 0:
                    raise fail("unknown_gpu_model", "body.gpu_model", f"node {name} has no {model} GPU")
                if Decimal(body["gpu_count"]) > has:
                    raise fail("over_capacity", "body.gpu_count",
                               f"is {body['gpu_count']}, but node {name} has {has} {model} GPUs")
                if leases:
                    self.check_usage_lease(body, node, index, parsed, fail)
            else:
                seconds = parsed["end"] - parsed["start"]
                tenant = body.get("tenant")
                if tenant is None:
                    units = Decimal(node.gpu_count() * GPU_UNITS)
                    whose = f"node {name}'s {node.gpu_count()} GPUs"
                elif leases:
                    units = self.energy_lease_cover(body, tenant, node, index, parsed, fail)
                    gpus = DEC.divide(units, Decimal(GPU_UNITS)).quantize(Decimal("0.000001"), context=DEC)
                    whose = f"the {dec_str(gpus)} GPUs {tenant} leases of node {name}"
                else:
                    return  # another tenant's record in a bundle: its leases are not in the view
                watts = node.max_watts_per_gpu
                if not within_energy_bound(units, watts, seconds, parsed["kwh"]):
                    raise fail("energy_over_bound", "body.kwh",
                               f"is {body['kwh']} kWh, above what {whose} x {dec_str(watts)} W draw in {seconds} s "
                               f"(+{ENERGY_BOUND_MARGIN_PERCENT} %): "
                               f"{dec_str(energy_bound_kwh(units, watts, seconds))} kWh")

    def check_node_update(self, body: Dict[str, Any], node: NodeAt, index: int, parsed: Dict[str, Any],
                          fail) -> None:
        """fleet.rs `check_node_update`: an update adds capacity only. GPU by GPU, in order: its
        UUID was listed for the node by no earlier entry (invalid_field, body.gpus[i].uuid); an
        index the node has keeps its model and MIG layout (a replaced board; invalid_field,
        body.gpus[i].model), one it lacks is a new GPU, which, if partitioned, has the slices of
        the node's partitioned GPUs of its model (invalid_field, body.gpus[i].mig.slices). Then the node has at most MAX_NODE_GPUS
        GPUs (quantity_out_of_range, body.gpus); then the power limit, if given, rises strictly
        above the node's (invalid_field, body.max_watts_per_gpu)."""
        reg = self.nodes[body["node"]]
        added = 0
        for i, g in enumerate(body.get("gpus") or ()):
            at = reg.uuid_listed(g["uuid"], index)
            if at is not None:
                raise fail("invalid_field", f"body.gpus[{i}].uuid",
                           f"{g['uuid']} was listed for node {node.name} already (entry {at})")
            had = node.gpu(g["index"])
            if had is None:
                if "mig" in g:
                    for other in node.gpus:
                        if other["model"] == g["model"] and "mig" in other \
                                and other["mig"]["slices"] != g["mig"]["slices"]:
                            e = mig_slices_differ(i, g, other)
                            raise fail(e.code, e.field, e.message)
                added += 1
            elif had["model"] != g["model"] or had.get("mig") != g.get("mig"):
                partitioned = " partitioned into MIG instances" if had.get("mig") is not None else ""
                raise fail("invalid_field", f"body.gpus[{i}].model",
                           f"GPU {g['index']} of node {node.name} is a {had['model']}{partitioned}: a replaced "
                           "board keeps its model and partition (add a new board under a new index)")
        if node.gpu_count() + added > MAX_NODE_GPUS:
            raise fail("quantity_out_of_range", "body.gpus",
                       f"would give node {node.name} {node.gpu_count() + added} GPUs; a node has at most "
                       f"{MAX_NODE_GPUS}")
        watts = parsed.get("max_watts_per_gpu")
        if watts is not None and watts <= node.max_watts_per_gpu:
            raise fail("invalid_field", "body.max_watts_per_gpu",
                       f"is {dec_str(watts)} W, not above node {node.name}'s {dec_str(node.max_watts_per_gpu)} W: "
                       "a power limit only rises (a node that draws less is registered anew)")

    def energy_lease_cover(self, body: Dict[str, Any], tenant: str, node: NodeAt, index: int,
                           parsed: Dict[str, Any], fail) -> Decimal:
        """fleet.rs `energy_lease_cover`: a tenant's energy on a node is billed only under the
        tenant's leases of the node registered before it (else lease_not_on_node), whose terms
        hold its whole interval (else outside_lease_term), for what those leases cover of the
        node as of the record, every model, in GPU_UNITS of a GPU (lease_units_on)."""
        name = body["node"]
        mine = [self.leases[n] for n in self.leases_by_node.get(name, ())]
        mine = [l for l in mine if l.index < index and l.tenant == tenant]
        if not mine:
            raise fail("lease_not_on_node", "body.tenant",
                       f"{tenant} has no lease on node {name}: its energy is billed only under a lease of the node")
        holding = [l for l in mine if l.term_holds(parsed["start"], parsed["end"])]
        if not holding:
            raise fail("outside_lease_term", "body.start",
                       f"[{body['start']}, {body['end']}) is not within the term of any lease of {tenant} "
                       f"on node {name}")
        total = Decimal(0)
        for l in holding:
            total = DEC.add(total, lease_units_on(l, node))
        return total

    def check_usage_lease(self, body: Dict[str, Any], node: NodeAt, index: int,
                          parsed: Dict[str, Any], fail) -> None:
        """fleet.rs `check_usage_lease`: the record names a lease (registered earlier to its tenant:
        the party rules, which come first) that covers more than 0 of its node's units of its model
        (as of the record), whose term holds its interval, and that covers at least its gpu_count
        of them."""
        name = body.get("lease")
        if name is None:
            raise fail("lease_not_on_node", "body.lease",
                       f"is absent: usage on node {body['node']} is billed under a lease that covers it")
        lease = self.leases.get(name)
        if lease is None or lease.index >= index:
            return  # the party rules' refusal (unknown_lease)
        covered = lease_covers(lease, node, body["gpu_model"])
        if covered == 0:
            raise fail("lease_not_on_node", "body.lease",
                       f"{name} covers no {body['gpu_model']} GPU of node {body['node']}")
        start, end = parsed["start"], parsed["end"]
        if not lease.term_holds(start, end):
            to = format_ts(lease.end) if lease.end is not None else "open-ended"
            raise fail("outside_lease_term", "body.start" if start < lease.start else "body.end",
                       f"[{body['start']}, {body['end']}) is not within the term of {name}, "
                       f"[{format_ts(lease.start)}, {to})")
        if Decimal(body["gpu_count"]) > covered:
            raise fail("over_capacity", "body.gpu_count",
                       f"is {body['gpu_count']}, but {name} covers {dec_str(covered)} {body['gpu_model']} GPUs of "
                       f"node {body['node']}")

    def check_lease_registration(self, lease: Lease, index: int, fail) -> None:
        """fleet.rs `check_fleet` for a lease_registered: item by item, its node is registered,
        its GPU indexes are the node's, its count's model is one the node has units of (as of the
        lease's entry); then, node by node in byte order, no overbooking against the node's other
        earlier leases whose terms overlap its own."""
        for i, item in enumerate(lease.items):
            node = self.registered_node(item.node, index)
            if node is None:
                raise fail("unknown_node", f"body.nodes[{i}].node", f"{item.node} is not a registered node")
            for g in item.gpus or ():
                if node.gpu(g) is None:
                    raise fail("unknown_gpu", f"body.nodes[{i}].gpus", f"node {item.node} has no GPU {g}")
            if item.gpu_model is not None and node.units_of(item.gpu_model) == 0:
                raise fail("unknown_gpu_model", f"body.nodes[{i}].gpu_model",
                           f"node {item.node} has no {item.gpu_model} GPU")
        for name in sorted({item.node for item in lease.items}, key=str.encode):
            others = [o for o in (self.leases[n] for n in self.leases_by_node.get(name, ()))
                      if o.index < index and o.lease != lease.lease and o.term_overlaps(lease)]
            self.check_not_overbooked(lease, self.registered_node(name, index), others, fail)

    @staticmethod
    def check_not_overbooked(lease: Lease, node: NodeAt, others: List[Lease], fail) -> None:
        """fleet.rs `check_not_overbooked`: at no instant of the lease's term do it and the node's
        `others` (whose terms overlap it) lease more of a GPU than all of it (the sum of the shares,
        1 when absent, of the items listing it), nor more units of a model than the node has (the
        counts of that model, plus share x units of that model of each listed GPU the node has: a
        MIG-partitioned GPU counts its instances of each profile). The load changes only where a
        term starts or ends: evaluated at the lease's start and at every other lease's start or end
        strictly inside its term. Exact decimals."""
        name = node.name
        instants = {lease.start}
        for o in others:
            for t in (o.start, o.end):
                if t is not None and t > lease.start and (lease.end is None or t < lease.end):
                    instants.add(t)
        for t in sorted(instants):
            per_gpu: Dict[int, Decimal] = {}
            per_model: Dict[str, Decimal] = {}
            for held in [o for o in others if o.active_at(t)] + [lease]:
                for item in held.items:
                    if item.node != name:
                        continue
                    if item.gpu_model is not None and item.count is not None:
                        per_model[item.gpu_model] = DEC.add(per_model.get(item.gpu_model, Decimal(0)), item.count)
                    share = item.share if item.share is not None else Decimal(1)
                    for g in item.gpus or ():
                        per_gpu[g] = DEC.add(per_gpu.get(g, Decimal(0)), share)
                        gpu = node.gpu(g)
                        if gpu is not None:
                            for model in gpu_unit_models(gpu):
                                units = DEC.multiply(share, Decimal(gpu_units_of(gpu, model)))
                                per_model[model] = DEC.add(per_model.get(model, Decimal(0)), units)
            for g in sorted(per_gpu):
                if per_gpu[g] > 1:
                    raise fail("lease_overbooked", "body.nodes",
                               f"would lease {dec_str(per_gpu[g])} of GPU {g} of node {name} at {format_ts(t)}, "
                               "counting its other leases")
            for model in sorted(per_model, key=str.encode):
                has = node.units_of(model)
                if per_model[model] > has:
                    raise fail("lease_overbooked", "body.nodes",
                               f"would lease {dec_str(per_model[model])} {model} GPUs of node {name} at "
                               f"{format_ts(t)}, which has {has}, counting its other leases")

    def check_contract_term(self, contract: Contract, index: int, now: int, policy: Policy, fail) -> None:
        """Section 6.7, contracts (issue #28), after the parties (unknown_tenant, then
        already_registered by contract id): a contract never re-prices the past, nor an invoiced
        period, and a tenant has at most one contract in force at any instant. In order, all on
        body.term_from: term_from not before received_at minus the policy's
        max_future_skew_seconds (price_in_past, as a price's effective_from); not before the
        period_to of any earlier invoice_issued of its tenant (price_in_invoiced_period: a
        contract bills from its term_from on, so an invoiced period must lie wholly before it);
        its term overlapping the term of no earlier contract of its tenant, half-open
        (contract_overlap), each term as amended by the contract_amended entries before this
        one (Contracts)."""
        start = contract.start
        if start < now - policy.max_future_skew_seconds:
            raise fail("price_in_past", "body.term_from",
                       f"term_from is {now - start} s before received_at (max_future_skew_seconds "
                       f"{policy.max_future_skew_seconds})")
        for inv_index, tenant, _, pt in self.invoices:
            if inv_index < index and tenant == contract.tenant and start < pt:
                raise fail("price_in_invoiced_period", "body.term_from",
                           f"{format_ts(start)} is before {format_ts(pt)}, the end of the period invoiced to "
                           f"{tenant} at entry {inv_index}")
        for other in self.contracts.of_tenant(contract.tenant):
            if other.index < index and other.term_overlaps(contract):
                raise fail("contract_overlap", "body.term_from",
                           f"the term [{format_ts(start)}, {format_ts(contract.end)}) overlaps the term of "
                           f"contract {other.contract} of {other.tenant} (entry {other.index}), "
                           f"[{format_ts(other.start)}, {format_ts(other.end)})")

    def check_contract_amendment(self, amendment: Dict[str, Any], index: int, now: int, policy: Policy,
                                 fail) -> None:
        """Section 6.7, contract amendments (core::contract `ContractBook::check_amendment`), after
        the parties (unknown_tenant): only a term's future changes, never an invoiced period. With
        C the contract as amended by the entries before this one (Contracts) and m the earlier of
        C's current term_to and the new one (where the change begins), in order:
        1. an earlier contract_registered entry registers `contract` for `tenant`
           (unknown_contract, body.contract; a bundle holds its tenant's contracts only);
        2. term_to after C's term_from (invalid_field), the term at most
           MAX_CONTRACT_TERM_SECONDS long (quantity_out_of_range), term_to not C's current end
           (invalid_field);
        3. m not before received_at minus the policy's max_future_skew_seconds (price_in_past):
           the past is never amended;
        4. the billing period of C that m falls in starts at or after the latest period_to of
           the tenant's earlier invoices (price_in_invoiced_period): its clipped start, the first
           of C's billing_periods whose start <= m < full_end, or m itself when none is (m starts
           a whole period, or is C's end on a boundary);
        5. an extension ([C's term_to, term_to), when later) overlaps the term, as amended, of
           no other contract of the tenant, half-open (contract_overlap).
        Rules 2 to 5 are on body.term_to."""
        tenant, name, term_to = amendment["tenant"], amendment["contract"], amendment["term_to"]
        c = self.contracts.get(name)
        if c is None or c.index >= index or c.tenant != tenant:
            raise fail("unknown_contract", "body.contract",
                       f"{tenant} has no contract {name!r} registered before entry {index} in the bundle")
        if term_to <= c.start:
            raise fail("invalid_field", "body.term_to",
                       f"{format_ts(term_to)} is not after the term's start, {format_ts(c.start)}")
        if term_to - c.start > MAX_CONTRACT_TERM_SECONDS:
            raise fail("quantity_out_of_range", "body.term_to",
                       f"the term would be {term_to - c.start} s, above MAX_CONTRACT_TERM_SECONDS = "
                       f"{MAX_CONTRACT_TERM_SECONDS} (3660 days)")
        if term_to == c.end:
            raise fail("invalid_field", "body.term_to", f"the term of {name} already ends at {format_ts(c.end)}")
        m = min(c.end, term_to)
        if m < now - policy.max_future_skew_seconds:
            raise fail("price_in_past", "body.term_to",
                       f"the amendment changes the term from {format_ts(m)}, {now - m} s before received_at "
                       f"(max_future_skew_seconds {policy.max_future_skew_seconds}): the past is never amended")
        body = self.contracts.body(name)
        spans = billing_periods(c.start, c.end, body["billing_period"], body["billing_anchor"])
        changed_from = next((s.start for s in spans if s.start <= m < s.full_end), m)
        latest = max(((pt, i) for i, t, _, pt in self.invoices if i < index and t == tenant), default=None)
        if latest is not None and changed_from < latest[0]:
            pt, inv_index = latest
            raise fail("price_in_invoiced_period", "body.term_to",
                       f"the amendment changes the billing period from {format_ts(changed_from)}, before "
                       f"{format_ts(pt)}, the end of the period invoiced to {tenant} at entry {inv_index}")
        if term_to > c.end:
            for other in self.contracts.of_tenant(tenant):
                if other.contract != name and other.index < index and c.end < other.end and other.start < term_to:
                    raise fail("contract_overlap", "body.term_to",
                               f"the term extended to [{format_ts(c.start)}, {format_ts(term_to)}) overlaps the "
                               f"term of contract {other.contract} of {tenant} (entry {other.index}), "
                               f"[{format_ts(other.start)}, {format_ts(other.end)})")

    def check_prepayment(self, lot: Dict[str, Any], index: int, now: int, fail) -> None:
        """Section 6.7, prepayments (core::prepaid `PrepaidBook::check`), after the parties
        (unknown_tenant), in order: no earlier prepayment of the same tenant in the bundle carries
        the same reference (reference_used, body.reference; a payment's or credit note's
        external_reference is another namespace); expires_at, if present, is after the entry's
        received_at (invalid_field, body.expires_at: a lot is never logged expired). An invoice's
        bundle holds its tenant's prepayments (section 14), so both are rechecked among them."""
        at = self.prepayments.get((lot["tenant"], lot["reference"]))
        if at is not None and at < index:
            raise fail("reference_used", "body.reference",
                       f"a prepayment of {lot['tenant']} already carries {lot['reference']!r} (entry {at})")
        expires_at = lot["expires_at"]
        if expires_at is not None and expires_at <= now:
            raise fail("invalid_field", "body.expires_at",
                       f"{format_ts(expires_at)} is not after the entry's received_at {format_ts(now)}: a lot is "
                       "never logged expired")

    def check_settlement(self, env: Dict[str, Any], item: str) -> None:
        """Section 5.10: a payment or credit note names an invoice issued earlier to its tenant, in
        its currency; credit notes on an invoice never total more than it."""
        kind, body = env["kind"], env["body"]
        if kind not in ("payment", "credit_note"):
            return
        account = self.accounts.get(body["invoice"])
        if account is None or account[0] != body["tenant"]:
            raise Failure("unknown_invoice", item,
                          f"body.invoice: {body['invoice']} is not an invoice issued to {body['tenant']}")
        if account[1] != body["currency"]:
            raise Failure("currency_mismatch", item,
                          f"body.currency: invoice {body['invoice']} is in {account[1]}, not {body['currency']}")
        ref = body.get("external_reference")
        if ref is not None and (body["tenant"], kind, ref) in self.references:
            raise Failure("reference_used", item,
                          f"body.external_reference: {kind} of {body['tenant']} already carries {ref!r} "
                          f"(entry {self.references[(body['tenant'], kind, ref)]})")
        if kind == "credit_note" and DEC.add(account[3], Decimal(body["amount"])) > account[2]:
            raise Failure("credit_above_total", item,
                          f"body.amount: credit notes on {body['invoice']} would total "
                          f"{DEC.add(account[3], Decimal(body['amount']))}, above its total {account[2]}")

    def check_dispute(self, env: Dict[str, Any], index: int, item: str) -> None:
        """Section 6.7, disputes (core::dispute), after the settlements: a record_excluded entry
        names an entry no earlier record_excluded entry names (already_excluded).

        Not checked here: unknown_record (the entry is an earlier gpu_usage or energy record of
        the tenant) and record_invoiced (no invoice of the tenant rated it). Both need the record,
        and a bundle holds its records after its context (section 14): at a record_excluded
        entry of the context the record has not been read. verify-log (and the ledger) check them."""
        if env["kind"] != "record_excluded":
            return
        entry = env["body"]["entry"]
        at = self.exclusions.get(entry)
        if at is not None and at < index:
            raise Failure("already_excluded", item, f"body.entry: entry {entry} is already excluded (entry {at})")

    def claim_interval(self, env: Dict[str, Any], index: int, parsed: Dict[str, Any]) -> None:
        """Section 6.4a: the interval of a record that passed is claimed for its stream."""
        stream = _stream(env["kind"], env["body"])
        if stream is None:
            return
        starts, ends = self.intervals.setdefault(stream, ([], []))
        at = bisect.bisect_left(starts, parsed["start"])
        starts.insert(at, parsed["start"])
        ends.insert(at, (parsed["end"], index))

    def apply(self, env: Dict[str, Any], index: int, parsed: Dict[str, Any],
              received_at: Optional[int] = None) -> None:
        """A context entry that passed, into the view; `received_at` its leaf's (the instant an
        invoice_issued entry's invoice was issued: its prepaid draws, PrepaidBook)."""
        kind, body = env["kind"], env["body"]
        self.context_seqs.add((env["signer"], env["seq"]))
        if kind == "signer_key_registered":
            self.keys[body["key_id"]] = KeyInfo(body["signer"], body["role"], parsed["public_key"], index,
                                                parsed["nodes"], parsed["regions"])
            self.roles.setdefault(body["signer"], body["role"])
        elif kind == "signer_key_revoked":
            info = self.keys.get(body["key_id"])
            if info is not None:
                info.revoked_at = index
            else:
                self.early_revocations[body["key_id"]] = (body["signer"], index)
        elif kind == "region_params":
            self.region_params.setdefault(body["region"], []).append(RegionParams(
                index, parsed["effective_from"], parsed["pue"], parsed["carbon"], body["pue"], body["carbon_g_per_kwh"]))
        elif kind == "lease_registered":
            if body["lease"] not in self.leases:
                lease = dataclasses.replace(parsed["lease"], index=index)
                self.leases[lease.lease] = lease
                for node in sorted({item.node for item in lease.items}):
                    self.leases_by_node.setdefault(node, []).append(lease.lease)
        elif kind == "tenant_registered":
            self.tenants.setdefault(body["tenant"], index)
        elif kind in ("contract_registered", "contract_amended"):
            self.contracts.apply(index, kind, body)
        elif kind == "prepayment":
            self.prepayments.setdefault((body["tenant"], body["reference"]), index)
            self.prepaid_entries.append((index, kind, body, received_at))
        elif kind == "node_registered":
            if body["node"] not in self.nodes:
                self.nodes[body["node"]] = FleetNode(body, index)
        elif kind == "node_updated":
            node = self.nodes.get(body["node"])
            if node is not None:
                node.apply(body, index)
        elif kind == "log_policy":
            self.policies.append(Policy(index, parsed["max_record_age_seconds"], parsed["max_future_skew_seconds"]))
        elif kind == "spot_price":
            self.spot_prices.setdefault((body["region"], body["gpu_model"], parsed["effective_from"]), index)
        if kind in ("payment", "credit_note") and "external_reference" in body:
            self.references.setdefault((body["tenant"], kind, body["external_reference"]), index)
        if kind == "record_excluded":
            self.exclusions.setdefault(body["entry"], index)
            self.excluded_entries.append((body["tenant"], body["entry"]))
            self.exclusion_reasons.append((body["tenant"], body["entry"], body["reason"]))
        if kind in PRICE_KINDS or kind == "lease_registered":
            self.pricing_entries.append((index, kind, body))
        if kind == "credit_note" and body["invoice"] in self.accounts:
            self.accounts[body["invoice"]][3] = DEC.add(self.accounts[body["invoice"]][3], Decimal(body["amount"]))
        elif kind == "invoice_issued":
            self.accounts.setdefault(body["number"], [body["tenant"], body["currency"], Decimal(body["total"]), Decimal(0)])
            self.invoice_numbers.append(body["number"])
            self.invoice_periods.setdefault(body["tenant"], []).append((parsed["period_from"], parsed["period_to"]))
            self.invoices.append((index, body["tenant"], parsed["period_from"], parsed["period_to"]))
            self.invoice_scopes.append((body["tenant"], body["number"], parsed["period_from"], parsed["period_to"],
                                        body["checkpoint_size"]))
            self.prepaid_entries.append((index, kind, body, received_at))
        series = _price_series(kind, body)
        if series is not None:
            self.series_latest[series] = max(parsed["effective_from"], self.series_latest.get(series, parsed["effective_from"]))

    def params_in_force(self, region: str, start: int) -> Optional[RegionParams]:
        """Section 13.2: latest effective_from not after start; ties: highest index."""
        best = None
        for p in self.region_params.get(region, ()):
            if p.effective_from <= start and (best is None or (p.effective_from, p.index) > (best.effective_from, best.index)):
                best = p
        return best


ZERO_HASH = bytes(32)


@dataclass
class CheckedEntry:
    index: int
    leaf_hash: bytes
    envelope: Dict[str, Any]
    parsed: Dict[str, Any]
    received_at: int


def check_entry(e: EntryLine, cp: Checkpoint, view: LogView, prev_known: Dict[int, bytes]) -> CheckedEntry:
    """Step 4 of section 15 for one entry line."""
    item = e.item
    if e.index >= cp.size:
        raise Failure("not_in_checkpoint", item, f"index {e.index} is not below the checkpoint size {cp.size}")
    try:
        leaf = parse_json(e.leaf)
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        # Strict JSON (version 2, section 7): a repeated member name at any depth is malformed.
        raise Failure("leaf_invalid", item, f"malformed: leaf bytes are not strict JSON ({err})") from None
    try:
        canonical = jcs(leaf)
    except Exception as err:  # noqa: BLE001 - rfc8785 refuses some values (huge integers, lone surrogates)
        raise Failure("leaf_invalid", item, f"leaf cannot be canonicalised ({err})") from None
    if canonical != e.leaf:
        raise Failure("leaf_invalid", item, "leaf bytes are not RFC 8785 canonical")
    if not isinstance(leaf, dict) or not is_int(leaf.get("index")) or leaf["index"] != e.index:
        raise Failure("leaf_invalid", item, f"the leaf's index is not the line's index {e.index}")
    lh = leaf_hash(e.leaf)
    if e.proof is not None and not verify_inclusion(e.index, cp.size, lh, e.proof, cp.root):
        raise Failure("inclusion_proof", item, f"the inclusion proof of entry {e.index} does not lead to the "
                      f"checkpoint's root (size {cp.size})")
    # The leaf and its envelope (sections 7, 4, 5).
    for name in leaf:
        if name not in LEAF_MEMBERS:
            raise Failure("leaf_invalid", item, f"malformed: leaf member {name!r} is unknown")
    for name in LEAF_MEMBERS:
        if name not in leaf:
            raise Failure("leaf_invalid", item, f"malformed: leaf member {name!r} is missing")
    if not is_int(leaf["v"]) or leaf["v"] != PROTOCOL_VERSION:
        raise Failure("leaf_invalid", item, f"unsupported_version: leaf v is {leaf['v']!r}, not {PROTOCOL_VERSION}")
    try:
        now = parse_timestamp(leaf["received_at"])
    except (TypeError, ValueError) as err:
        raise Failure("leaf_invalid", item, f"invalid_field: received_at: {err}") from None
    try:
        prev = b64decode_canonical(leaf["prev"], 32)
    except ValueError as err:
        raise Failure("leaf_invalid", item, f"invalid_field: prev: {err}") from None
    env = leaf["envelope"]
    try:
        parsed = check_envelope(env, view.origin)
    except FieldError as err:
        raise Failure("leaf_invalid", item, f"{err.code}: {err.field}: {err.message}") from None
    # A record of another tenant than the subject's is named at once, before its chain, time and
    # admission rules (crates/core/src/bundle.rs `place`): the bundle holds none of that
    # tenant's registrations, so its rules could only fail for want of them (an energy record's
    # lease_not_on_node, say), and the verdict would differ from the Rust verifier's.
    tenant = env["body"].get("tenant") if isinstance(env.get("body"), dict) else None
    if view.subject_tenant is not None and env["kind"] in RECORD_KINDS and tenant != view.subject_tenant:
        raise Failure("wrong_tenant", item, f"{env['kind']} of tenant {tenant!r}, the subject is "
                      f"{view.subject_tenant!r}")
    # The hash chain (section 7), where the bundle holds the entry before.
    expected_prev = ZERO_HASH if e.index == 0 else prev_known.get(e.index - 1)
    if expected_prev is not None and prev != expected_prev:
        raise Failure("leaf_invalid", item, f"prev is not the leaf hash of entry {e.index - 1}")
    view.check_received_in_order(e.index, now, env["kind"] in RECORD_KINDS)
    if env["kind"] not in RECORD_KINDS:
        try:
            view.check_context_rules(env, e.index, parsed)
        except FieldError as err:
            raise Failure("leaf_invalid", item, f"{err.code}: {err.field}: {err.message}") from None
    pub = view.key_for(env, e.index, item)
    view.check_admission(env, e.index, parsed, now, item)
    view.check_settlement(env, item)
    view.check_dispute(env, e.index, item)
    if not verify_strict(pub, parsed["message"], parsed["sig"]):
        raise Failure("entry_signature", item, f"the signature of {env['signer']} (key {env['key_id']}) does not "
                      f"verify strictly over the signed message (origin {view.origin})")
    return CheckedEntry(e.index, lh, env, parsed, now)


class Claims:
    """Accumulates the covered records (section 13): count, commitment, lines."""

    def __init__(self):
        self.commitment = StreamingMerkle()
        self.gpu: Dict[Tuple[str, str], List[Any]] = {}
        self.energy: Dict[Tuple[str, Optional[str], Optional[str]], List[Any]] = {}
        self.count = 0

    def add(self, ce: CheckedEntry, view: LogView) -> None:
        self.count += 1
        self.commitment.append_leaf_hash(leaf_hash(ce.index.to_bytes(8, "big") + ce.leaf_hash))
        body = ce.envelope["body"]
        if ce.envelope["kind"] == "gpu_usage":
            line = self.gpu.setdefault((body["region"], body["gpu_model"]), [Decimal(0), 0])
            line[0] = DEC.add(line[0], ce.parsed["gpu_seconds"])
            line[1] += 1
        else:
            p = view.params_in_force(body["region"], ce.parsed["start"])
            key = (body["region"], p.pue_text, p.carbon_text) if p else (body["region"], None, None)
            line = self.energy.setdefault(key, [Decimal(0), 0, p])
            line[0] = DEC.add(line[0], ce.parsed["kwh"])
            line[1] += 1

    def lines(self) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]], Dict[str, Any]]:
        gpu = []
        for (region, model) in sorted(self.gpu, key=lambda k: (k[0].encode(), k[1].encode())):
            s, n = self.gpu[(region, model)]
            gpu.append({"region": region, "gpu_model": model, "gpu_seconds": s, "records": n})

        def energy_key(k):
            region, pue, carbon = k
            if pue is None:
                return (region.encode(), 0, Decimal(0), Decimal(0))
            return (region.encode(), 1, Decimal(pue), Decimal(carbon))

        energy = []
        for k in sorted(self.energy, key=energy_key):
            kwh, n, p = self.energy[k]
            line: Dict[str, Any] = {"region": k[0], "kwh": kwh, "records": n}
            if p is not None:
                with_pue = DEC.multiply(kwh, p.pue)
                line.update(pue=p.pue, carbon_g_per_kwh=p.carbon, kwh_with_pue=with_pue,
                            carbon_kg=DEC.divide(DEC.multiply(with_pue, p.carbon), Decimal(1000)))
            energy.append(line)
        z = Decimal(0)
        totals = {
            "records": sum(l["records"] for l in gpu) + sum(l["records"] for l in energy),
            "gpu_seconds": sum((l["gpu_seconds"] for l in gpu), z),
            "kwh": sum((l["kwh"] for l in energy), z),
            "kwh_with_pue": sum((l["kwh_with_pue"] for l in energy if "pue" in l), z),
            "carbon_kg": sum((l["carbon_kg"] for l in energy if "pue" in l), z),
            "kwh_without_region_params": sum((l["kwh"] for l in energy if "pue" not in l), z),
        }
        return gpu, energy, totals


def _same(claimed: Any, computed: Any) -> bool:
    if isinstance(computed, Decimal):
        return parse_exact_decimal(claimed) == computed
    return type(claimed) is type(computed) and claimed == computed


def _show(v: Any) -> str:
    return dec_str(v) if isinstance(v, Decimal) else json.dumps(v)


def compare_claims(cert: Dict[str, Any], claims: Claims) -> None:
    """Step 7."""
    gpu, energy, totals = claims.lines()
    for name, computed in (("gpu", gpu), ("energy", energy)):
        claimed = cert[name]
        for i in range(max(len(claimed), len(computed))):
            item = f"{name}[{i}]"
            if i >= len(claimed):
                raise Failure("claim_mismatch", item, f"missing: the records give a line {_line_text(computed[i])}")
            if i >= len(computed):
                raise Failure("claim_mismatch", item, "the records give no such line")
            c, r = claimed[i], computed[i]
            for member in list(r) + [m for m in c if m not in r]:
                if member not in c:
                    raise Failure("claim_mismatch", f"{item}.{member}",
                                  f"missing, the records give {_show(r[member])}")
                if member not in r:
                    raise Failure("claim_mismatch", f"{item}.{member}",
                                  "the records give no region parameters for this line")
                if not _same(c[member], r[member]):
                    raise Failure("claim_mismatch", f"{item}.{member}",
                                  f"claimed {_show(c[member])}, the records give {_show(r[member])}")
    for member in TOTALS_MEMBERS:
        if not _same(cert["totals"][member], totals[member]):
            raise Failure("claim_mismatch", f"totals.{member}",
                          f"claimed {_show(cert['totals'][member])}, the records give {_show(totals[member])}")


def _line_text(line: Dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {_show(v)}" for k, v in line.items()) + "}"


def _check_record_subject(ce: CheckedEntry, cert: CertInfo, item: str) -> Optional[Failure]:
    """Step 5."""
    body = ce.envelope["body"]
    kind = ce.envelope["kind"]
    tenant = body.get("tenant")
    if tenant != cert.tenant:
        return Failure("wrong_tenant", item, f"{kind} of tenant {tenant!r}, the certificate is for {cert.tenant!r}")
    start = ce.parsed["start"]
    if not cert.period_from <= start < cert.period_to:
        return Failure("outside_period", item, f"starts at {body['start']}, outside "
                       f"[{cert.raw['period_from']}, {cert.raw['period_to']})")
    if cert.scope_lease is not None and (kind != "gpu_usage" or body.get("lease") != cert.scope_lease):
        return Failure("outside_scope", item, f"not a gpu_usage record of lease {cert.scope_lease}")
    if cert.scope_nodes is not None and body["node"] not in cert.scope_nodes:
        return Failure("outside_scope", item, f"node {body['node']} is not in the scope's nodes")
    if cert.scope_region is not None and body["region"] != cert.scope_region:
        return Failure("outside_scope", item, f"region {body['region']} is not the scope's {cert.scope_region}")
    return None


def _run_bundle(path: str, key: VerifierKey, cert: Optional[CertInfo],
                invoice_tenant: Optional[str] = None) -> Tuple[Structure, Checkpoint, LogView, Optional[Claims], Dict[str, int]]:
    """Steps 1 to 5 over a bundle. With `invoice_tenant` (an invoice's bundle) a record of
    another tenant is `wrong_tenant` (as for a certificate's; crates/core/src/bundle.rs `place`
    with InvoiceCheck's tenant) and the records are kept in `view.usage_records` for rating."""
    # Step 1
    st = check_structure(path)
    # Step 2
    cp = verify_checkpoint_note(st.header.checkpoint, key, "bundle header checkpoint")
    # Step 3
    if cert is not None:
        if not verify_strict(key.public_key, certificate_message(cert.raw), cert.sig):
            raise Failure("certificate_signature", "certificate",
                          "the certificate's sig does not verify with the log key over section 13.4's message")
        if cert.raw["checkpoint"] != st.header.checkpoint:
            raise Failure("checkpoint_mismatch", "certificate.checkpoint",
                          "not byte for byte the bundle header's checkpoint")
        if cert.raw["log_origin"] != cp.origin:
            raise Failure("checkpoint_mismatch", "certificate.log_origin",
                          f"{cert.raw['log_origin']!r} is not the checkpoint's origin {cp.origin!r}")
        if st.header.subject_kind != "certificate" or st.header.subject_id != cert.id:
            raise Failure("checkpoint_mismatch", "bundle header subject",
                          f"the bundle is for {st.header.subject_kind} {st.header.subject_id}, not certificate {cert.id}")
    if st.header.log_origin != cp.origin:
        raise Failure("checkpoint_mismatch", "bundle header log_origin",
                      f"{st.header.log_origin!r} is not the checkpoint's origin {cp.origin!r}")
    # Steps 4 and 5 (step 5 failures are reported after every entry passed step 4)
    view = LogView(key, cert.tenant if cert is not None else invoice_tenant)
    claims = Claims() if cert is not None else None
    first_subject_failure: Optional[Failure] = None
    last_record: Optional[Tuple[int, bytes]] = None
    kinds: Dict[str, int] = {}
    seen = 0
    v3 = st.header.format == BUNDLE_FORMAT_V3
    leaves: List[Tuple[int, bytes]] = []  # version 3: (index, leaf hash) of every entry
    for e in _iter_entries(path, v3):
        seen += 1
        prev_known = view.context_leaf_hashes
        if last_record is not None and last_record[0] == e.index - 1:
            prev_known = {e.index - 1: last_record[1]}
        ce = check_entry(e, cp, view, prev_known)
        if v3:
            leaves.append((e.index, ce.leaf_hash))
        kind = ce.envelope["kind"]
        kinds[kind] = kinds.get(kind, 0) + 1
        if kind in RECORD_KINDS:
            last_record = (e.index, ce.leaf_hash)
            view.claim_interval(ce.envelope, e.index, ce.parsed)
            body = ce.envelope["body"]
            if kind == "gpu_usage" and "lease" in body:
                view.lease_usage.append((e.index, body["tenant"], body["lease"], ce.parsed["start"],
                                         ce.parsed["end"], body["gpu_count"], body["gpu_model"], body["gpu_seconds"]))
            if invoice_tenant is not None:
                view.usage_records.append(UsageRecord.of(e.index, kind, body, ce.parsed["start"], ce.parsed["end"]))
            if cert is not None:
                if first_subject_failure is None:
                    first_subject_failure = _check_record_subject(ce, cert, e.item)
                claims.add(ce, view)
        else:
            view.apply(ce.envelope, e.index, ce.parsed, ce.received_at)
            view.context_leaf_hashes[e.index] = ce.leaf_hash
    if seen != st.entries:
        raise Failure("malformed", "bundle", "the file changed while it was read")
    if first_subject_failure is not None:
        raise first_subject_failure
    if v3:
        # The multi-proof (section 14): every entry, context and records merged by index.
        leaves.sort()
        for (a, _), (b, _) in zip(leaves, leaves[1:]):
            if a == b:
                raise Failure("order", f"entry {b}", f"index {b} appears twice")
        try:
            root = multiproof_root(cp.size, leaves, _iter_nodes(path))
        except ValueError as err:
            raise Failure("inclusion_proof", "multi-proof", f"the multi-proof does not fit the bundle's entries: {err}") from None
        if root != cp.root:
            raise Failure("inclusion_proof", "multi-proof", "the entries and the multi-proof do not lead to the "
                          f"checkpoint's root (size {cp.size})")
    return st, cp, view, claims, kinds


def _failure_result(f: Failure, summary: Optional[Dict[str, Any]] = None) -> Result:
    return Result(False, f.reason, f.item, f.message, summary or {})


def _read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e}") from None


def verify_certificate(cert_path: str, bundle_path: str, key: VerifierKey) -> Result:
    """Section 15, steps 1 to 7."""
    try:
        raw = _read_bytes(cert_path)
        try:
            cert_obj = parse_json(raw)
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise Failure("malformed", "certificate", f"not JSON ({e})") from None
        cert = check_certificate_shape(cert_obj)
        with _rereadable(bundle_path) as path:
            st, cp, view, claims, kinds = _run_bundle(path, key, cert)
        # Step 6
        if claims.count != cert_obj["entries"]["count"]:
            raise Failure("entries_mismatch", "entries.count",
                          f"the certificate claims {cert_obj['entries']['count']} entries, the bundle holds "
                          f"{claims.count} records")
        commitment = claims.commitment.root()
        if b64(commitment) != cert_obj["entries"]["commitment"]:
            raise Failure("entries_mismatch", "entries.commitment",
                          f"the records' commitment is {b64(commitment)}, not the certificate's")
        # Step 7
        compare_claims(cert_obj, claims)
    except Failure as f:
        return _failure_result(f)
    t = cert_obj["totals"]
    summary = {
        "certificate": cert.id,
        "tenant": cert.tenant,
        "period_from": cert_obj["period_from"],
        "period_to": cert_obj["period_to"],
        "checkpoint_origin": cp.origin,
        "checkpoint_size": cp.size,
        "checkpoint_root": b64(cp.root),
        "bundle_entries": st.entries,
        "context_entries": st.context,
        "records": claims.count,
        "records_by_kind": {k: v for k, v in kinds.items() if k in RECORD_KINDS},
        "gpu_seconds": dec_str(parse_exact_decimal(t["gpu_seconds"])),
        "kwh": dec_str(parse_exact_decimal(t["kwh"])),
        "kwh_with_pue": dec_str(parse_exact_decimal(t["kwh_with_pue"])),
        "carbon_kg": dec_str(parse_exact_decimal(t["carbon_kg"])),
    }
    msg = (f"certificate {cert.id} for {cert.tenant} [{cert_obj['period_from']}, {cert_obj['period_to']}): "
           f"{claims.count} records under checkpoint {cp.origin} size {cp.size}; "
           f"gpu_seconds {summary['gpu_seconds']}, kwh {summary['kwh']}, kwh_with_pue {summary['kwh_with_pue']}, "
           f"carbon_kg {summary['carbon_kg']}")
    return Result(True, None, None, msg, summary)


def verify_bundle(bundle_path: str, key: VerifierKey, invoice_path: Optional[str] = None, *,
                  rerate_usage: bool = True) -> Result:
    """A bundle alone (section 15 steps 1, 2 and 4), e.g. an invoice's. With `invoice_path` (a
    version 2 invoice document, read and shape-checked before the bundle, as a certificate is),
    then also the invoice's contract lines, commitments, taxes and totals recomputed from the
    bundle's contracts, and its prepaid draws and amount due from the bundle's prepayment and
    earlier invoice_issued entries of its tenant (check_invoice_contract_lines), and its usage
    lines (gpu, energy, adjustment lines) and `excluded` member re-rated from the bundle's
    records and prices (invoice_usage, as the Rust verifier's InvoiceCheck: a record of another
    tenant is wrong_tenant, one in no period the invoice covers outside_period). `rerate_usage`
    False (never from the command line; for tests of the other members on invoices written by
    hand) takes the usage lines and `excluded` as the invoice states them instead."""
    invoice: Optional[Dict[str, Any]] = None
    try:
        inv = read_invoice(invoice_path) if invoice_path is not None else None
        with _rereadable(bundle_path) as path:
            st, cp, view, _, kinds = _run_bundle(path, key, None, inv.tenant if inv is not None else None)
        if inv is not None:
            check_invoice_subject(inv, st.header, cp)
            usage = invoice_usage(view, inv) if rerate_usage else None
            # The tenant's contracts as amended by the amendments in the bundle (all below its size).
            contracts = view.contracts.bodies_of(inv.tenant)
            book = invoice_prepaid_book(view.prepaid_entries, inv.tenant, inv.number)
            invoice = check_invoice_contract_lines(inv, st.header, cp, contracts, book,
                                                   SlaEvidence.of_view(view, inv.tenant, inv.number), usage)
    except Failure as f:
        return _failure_result(f)
    summary = {
        "subject": {st.header.subject_kind: st.header.subject_id},
        "checkpoint_origin": cp.origin,
        "checkpoint_size": cp.size,
        "checkpoint_root": b64(cp.root),
        "bundle_entries": st.entries,
        "context_entries": st.context,
        "records": st.records,
        "entries_by_kind": kinds,
    }
    msg = (f"bundle for {st.header.subject_kind} {st.header.subject_id}: {st.entries} entries "
           f"({st.context} context, {st.records} records) verified under checkpoint {cp.origin} size {cp.size}")
    if invoice is not None:
        summary["invoice"] = invoice
        msg += (f"; invoice {invoice['number']}: its {invoice['contract_lines']} contract lines (fees, included "
                f"GPU-hours and overage, SLA credits, true-ups), {invoice['commitments']} commitments, "
                f"{invoice['allowances']} allowances rows (included GPU-hours) and {invoice['availability']} SLA "
                f"availability rows recomputed from the bundle's "
                f"{len(invoice['contracts'])} contracts of {invoice['tenant']} in {invoice['currency']} (and, for "
                "the SLAs and the included GPU-hours, its leases, usage records and earlier invoices), every "
                f"line's tax and gross and the totals rechecked (total {invoice['total']} {invoice['currency']}); "
                f"{_prepaid_text(invoice)}; its {invoice['usage_lines']} usage and {invoice['other_lines']} "
                + (f"adjustment lines re-rated from the bundle's {st.records} records and its prices"
                   + (f" ({invoice['excluded']} records excluded)" if invoice["excluded"] else "")
                   if invoice["usage_lines_rerated"] else "adjustment lines NOT re-rated (taken as the invoice "
                   "states them)"))
    return Result(True, None, None, msg, summary)


def _prepaid_text(invoice: Dict[str, Any]) -> str:
    lots = len(invoice["prepaid_lots"])
    if not invoice["prepaid"]:
        return f"nothing drawn on the bundle's {lots} prepaid lots of {invoice['tenant']} in {invoice['currency']}"
    drawn = ", ".join(f"{d['amount']} from {d['prepayment']} ({d['source']})" for d in invoice["prepaid"])
    return (f"prepaid draws recomputed from the bundle's {lots} prepaid lots of {invoice['tenant']} in "
            f"{invoice['currency']}: {drawn}; amount due {invoice['amount_due']}")


def verify_checkpoint_file(path: str, key: VerifierKey) -> Result:
    try:
        cp = verify_checkpoint_note(_read_bytes(path), key)
    except Failure as f:
        return _failure_result(f)
    return Result(True, None, None, f"checkpoint {cp.origin} size {cp.size} root {b64(cp.root)} signed by "
                  f"{key.name}+{key.note_key_id:08x}",
                  {"origin": cp.origin, "size": cp.size, "root": b64(cp.root)})


def _load_proof(path: str) -> List[bytes]:
    raw = _read_bytes(path)
    try:
        obj = parse_json(raw)
    except (UnicodeDecodeError, ValueError) as e:
        raise Failure("malformed", "proof", f"not JSON ({e})") from None
    if isinstance(obj, dict):
        if "hashes" not in obj:
            raise Failure("malformed", "proof", "an object without a hashes member")
        obj = obj["hashes"]
    if not isinstance(obj, list):
        raise Failure("malformed", "proof", "not an array of base64 hashes")
    out = []
    for i, h in enumerate(obj):
        try:
            out.append(b64decode_canonical(h, 32))
        except ValueError as e:
            raise Failure("malformed", f"proof[{i}]", str(e)) from None
    return out


def verify_consistency_files(old_path: str, new_path: str, proof_path: str, key: VerifierKey) -> Result:
    try:
        old = verify_checkpoint_note(_read_bytes(old_path), key, "old checkpoint")
        new = verify_checkpoint_note(_read_bytes(new_path), key, "new checkpoint")
        proof = _load_proof(proof_path)
        if old.size > new.size:
            raise Failure(CONSISTENCY_REASON, "proof", f"the old checkpoint's size {old.size} is above the new one's {new.size}")
        if not verify_consistency(old.size, new.size, old.root, new.root, proof):
            raise Failure(CONSISTENCY_REASON, "proof",
                          f"the proof does not show size {old.size} is a prefix of size {new.size}")
    except Failure as f:
        return _failure_result(f)
    return Result(True, None, None, f"{old.origin}: size {old.size} ({b64(old.root)}) is a prefix of size "
                  f"{new.size} ({b64(new.root)})",
                  {"origin": old.origin, "old_size": old.size, "old_root": b64(old.root),
                   "new_size": new.size, "new_root": b64(new.root)})


# ---------------------------------------------------------------------------------------------
# An invoice's contract lines (docs/RATING.md, "Contracts"), recomputed from the
# contract_registered entries of its bundle with exact fractions (fractions.Fraction, never a
# float). The invoice's usage lines (gpu, energy) are re-rated from its records (the "Usage
# rating" section below: invoice_usage), and their nets draw the commitments down. The
# `included` and `overage` lines of GPU-hours a contract includes are contract lines: recomputed.
# ---------------------------------------------------------------------------------------------

INVOICE_FORMAT_V2 = "gpuledger-invoice/v2"
LINE_KINDS = ("gpu", "energy", "fee", "included", "overage", "sla_credit", "true_up")
USAGE_LINE_KINDS = ("gpu", "energy")
# Recomputed from the bundle, never taken as the invoice states them (an sla_credit line too, and
# the included and overage lines of a contract's GPU-hours, late overage lines included).
CONTRACT_LINE_KINDS = ("fee", "included", "overage", "sla_credit", "true_up")
BILLING_PERIOD_MONTHS = {"month": 1, "quarter": 3, "year": 12}
PERIOD_SHARE_DECIMALS = 6  # a fee line's quantity: used / full, half-even to 6 places
# RATING.md "Exact amounts": 0 minor digits for JPY and KRW, 3 for the seven below, else 2. The
# ledger's table (crates/core/src/rating.rs `minor_units`) also gives VND, CLP, ISK and UGX 0
# digits, as ISO 4217 does; those are kept here so that an invoice in them is read alike.
ZERO_MINOR_UNIT_CURRENCIES = ("JPY", "KRW", "VND", "CLP", "ISK", "UGX")
THREE_MINOR_UNIT_CURRENCIES = ("BHD", "KWD", "OMR", "JOD", "TND", "IQD", "LYD")
PLAIN_DECIMAL_RE = re.compile(r"(0|[1-9][0-9]*)(\.[0-9]+)?")


def minor_units(currency: str) -> int:
    """The digits of a currency's minor unit (RATING.md, "Exact amounts and the one rounding rule")."""
    if currency in ZERO_MINOR_UNIT_CURRENCIES:
        return 0
    if currency in THREE_MINOR_UNIT_CURRENCIES:
        return 3
    return 2


def round_half_even(x: Fraction, places: int) -> Fraction:
    """`x` rounded to `places` decimal places, a tie to the even last digit (RATING.md, "the one
    rounding rule"): exact integer arithmetic on the fraction."""
    scale = 10 ** places
    n = x * scale
    q, r = divmod(n.numerator, n.denominator)  # floor division: 0 <= r < denominator
    if 2 * r > n.denominator or (2 * r == n.denominator and q % 2 == 1):
        q += 1
    return Fraction(q, scale)


def fixed_str(x: Fraction, places: int) -> str:
    """An amount with exactly `places` digits after the point (`148.00`; `185` for 0 places), as
    the invoice writes money (`net`, `tax`, `gross`, the totals, the commitments). `x` must be a
    multiple of 10^-places."""
    n = x * 10 ** places
    if n.denominator != 1:
        raise ValueError(f"{x} has more than {places} decimal places")
    sign = "-" if n < 0 else ""
    digits = str(abs(n.numerator))
    if places == 0:
        return sign + digits
    digits = digits.rjust(places + 1, "0")
    return f"{sign}{digits[:-places]}.{digits[-places:]}"


def canonical_str(x: Fraction) -> str:
    """A terminating fraction as a canonical decimal (PROTOCOL.md section 2.1: no trailing zeros,
    `0` for zero), as the invoice writes `quantity` and `unit_price`."""
    places = 0
    while (x * 10 ** places).denominator != 1:
        places += 1
        if places > 60:
            raise ValueError(f"{x} is not a terminating decimal")
    s = fixed_str(x, places)
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return "0" if s in ("", "-0") else s


def decimal_fraction(text: str) -> Fraction:
    """A plain decimal string (digits, an optional point and digits) as an exact fraction."""
    if not isinstance(text, str) or PLAIN_DECIMAL_RE.fullmatch(text) is None:
        raise ValueError(f"{text!r} is not a decimal")
    return Fraction(text)


def _month_length(year: int, month: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)[month - 1]


def _days_since_year_one(year: int, month: int, day: int) -> int:
    """Days from 0001-01-01 to the date (proleptic Gregorian), for any year from 1 on (a billing
    boundary may fall in year 10000, which datetime cannot hold)."""
    y = year - 1
    days = 365 * y + y // 4 - y // 100 + y // 400
    days += sum(_month_length(year, m) for m in range(1, month))
    return days + day - 1


_UNIX_EPOCH_DAYS = _days_since_year_one(1970, 1, 1)


def _unix_of(year: int, month: int, day: int, second_of_day: int = 0) -> int:
    return (_days_since_year_one(year, month, day) - _UNIX_EPOCH_DAYS) * 86400 + second_of_day


def add_months(unix: int, months: int) -> int:
    """`unix` moved by `months` calendar months, on the same day of the month and time of day,
    the day clamped to the last day of a shorter month (RATING.md, "Contracts", anniversary)."""
    at = datetime.datetime.fromtimestamp(unix, datetime.timezone.utc)
    index = at.year * 12 + at.month - 1 + months
    year, month = index // 12, index % 12 + 1
    day = min(at.day, _month_length(year, month))
    return _unix_of(year, month, day, at.hour * 3600 + at.minute * 60 + at.second)


def calendar_start(unix: int, months: int) -> int:
    """The calendar boundary at or before `unix` for billing periods of `months` months: 00:00:00
    UTC on the first day of a month whose number from January is a multiple of `months`
    (RATING.md, "Contracts": month, quarter, year)."""
    at = datetime.datetime.fromtimestamp(unix, datetime.timezone.utc)
    first_month = (at.month - 1) // months * months + 1
    return _unix_of(at.year, first_month, 1)


@dataclass(frozen=True)
class BillingSpan:
    """One billing period of a contract (RATING.md, "Contracts"): the unclipped period
    [full_start, full_end) and the period clipped to the term, [start, end)."""
    start: int
    end: int
    full_start: int
    full_end: int

    @property
    def used(self) -> int:
        return self.end - self.start

    @property
    def full(self) -> int:
        return self.full_end - self.full_start

    @property
    def share(self) -> Fraction:
        """used ÷ full seconds, exact."""
        return Fraction(self.used, self.full)

    def prorate(self, amount: Fraction, places: int) -> Fraction:
        """amount × used ÷ full, exact, rounded half-even once to `places` (the minor unit)."""
        return round_half_even(amount * self.share, places)


def billing_periods(term_from: int, term_to: int, billing_period: str, billing_anchor: str) -> List[BillingSpan]:
    """A contract's billing periods, in order (RATING.md, "Contracts", billing periods):
    `calendar` boundaries at 00:00:00 UTC on the first day of each month, quarter (January, April,
    July, October) or year; `anniversary` boundaries at term_from plus k × 1, 3 or 12 months, each
    computed from term_from (the day clamped to a shorter month's last). Each period is clipped to
    the term [term_from, term_to); periods outside it are left out."""
    months = BILLING_PERIOD_MONTHS[billing_period]
    first = calendar_start(term_from, months) if billing_anchor == "calendar" else term_from
    out: List[BillingSpan] = []
    full_start, k = first, 1
    while True:
        full_end = add_months(first, k * months)
        start, end = max(full_start, term_from), min(full_end, term_to)
        if start < end:
            out.append(BillingSpan(start, end, full_start, full_end))
        if full_end >= term_to:
            return out
        full_start, k = full_end, k + 1


@dataclass(frozen=True)
class FeeCharge:
    """A fee an invoice period bills: the fee's place in the contract's `fees`, the span it is
    for (a `once` fee: the term), the share of its billing period (1 for `once`) and its net."""
    fee: int
    start: int
    end: int
    share: Fraction
    net: Fraction


@dataclass
class Charges:
    """What one contract charges an invoice period: its fees in line order, the commitment of
    the billing periods wholly inside the period (None: no commitment, or no such period) and
    the first billing period the period holds part, not all, of, of a contract with a
    commitment, an SLA or included GPU-hours (judged over whole billing periods only)."""
    fees: List[FeeCharge]
    committed: Optional[Fraction]
    split: Optional[BillingSpan]


def contract_charges(contract: Dict[str, Any], period_from: int, period_to: int) -> Charges:
    """RATING.md, "Contracts": the fees and the commitment that an invoice of [period_from,
    period_to) in the contract's currency bills. A fee of a billing period is billed by the
    invoice whose period holds its anchor (`advance`: the clipped period's start; `arrears`: its
    end minus one second; `once`: term_from); it is amount × used ÷ full rounded half-even once
    to the minor unit (a `once` fee: its amount, not prorated). Fees come in order of billing
    period and within one in the order of the contract's `fees`, `once` fees first (at the
    term's start). committed = Σ over the billing periods whose clipped span lies wholly inside
    the invoice period of round_half_even(commitment × used ÷ full)."""
    places = minor_units(contract["currency"])
    term_from = parse_timestamp(contract["term_from"])
    term_to = parse_timestamp(contract["term_to"])
    fees = contract.get("fees") or []
    amounts = [decimal_fraction(f["amount"]) for f in fees]

    def holds(t: int) -> bool:
        return period_from <= t < period_to

    out = Charges([], None, None)
    for i, fee in enumerate(fees):
        if fee["timing"] == "once" and holds(term_from):
            out.fees.append(FeeCharge(i, term_from, term_to, Fraction(1), round_half_even(amounts[i], places)))
    if period_to <= term_from or term_to <= period_from:
        return out
    commitment = decimal_fraction(contract["commitment"]) if "commitment" in contract else None
    for span in billing_periods(term_from, term_to, contract["billing_period"], contract["billing_anchor"]):
        if span.end <= period_from or period_to <= span.start:
            continue
        for i, fee in enumerate(fees):
            if fee["timing"] == "once":
                continue
            anchor = span.start if fee["timing"] == "advance" else span.end - 1
            if holds(anchor):
                out.fees.append(FeeCharge(i, span.start, span.end, span.share, span.prorate(amounts[i], places)))
        whole = period_from <= span.start and span.end <= period_to
        if commitment is not None and whole:
            out.committed = (out.committed or Fraction(0)) + span.prorate(commitment, places)
        # A commitment, an SLA and included GPU-hours are judged over whole billing periods only
        # (RATING.md, "Contracts", "SLA credits" and "Included GPU-hours and overage").
        if (not whole and (commitment is not None or "sla" in contract or has_included(contract))
                and out.split is None):
            out.split = span
    return out


# ---------------------------------------------------------------------------------------------
# SLA availability and credits (docs/RATING.md, "SLA credits"; PROTOCOL.md section 5.19, `sla`
# and `fees[i].lease`), recomputed from the bundle's lease_registered, gpu_usage and
# record_excluded entries of the invoice's tenant with exact fractions.
# ---------------------------------------------------------------------------------------------

AVAILABILITY_DECIMALS = 4  # an availability percentage is truncated (not rounded) to 4 places


@dataclass
class SlaEvidence:
    """What an invoice's SLA availability and included GPU-hours are computed from: its tenant's
    leases in the bundle (lease -> its registration), the tenant's gpu_usage records of the
    bundle that name a lease (lease -> [(index, start, end, gpu_count)]; and by lease and GPU
    model, (lease, gpu_model) -> [(index, start, gpu_seconds)], in bundle order), the entries
    its tenant's record_excluded entries exclude from rating, and the tenant's other invoices in
    the bundle, [(period_from, period_to, checkpoint_size)] (which records are late: InvoiceScope
    in crates/core/src/invoice.rs, late_period)."""
    leases: Dict[str, Lease] = field(default_factory=dict)
    usage: Dict[str, List[Tuple[int, int, int, Fraction]]] = field(default_factory=dict)
    excluded: frozenset = frozenset()
    model_usage: Dict[Tuple[str, str], List[Tuple[int, int, Fraction]]] = field(default_factory=dict)
    earlier: List[Tuple[int, int, int]] = field(default_factory=list)

    @classmethod
    def of_view(cls, view: "LogView", tenant: str, number: Optional[str] = None) -> "SlaEvidence":
        """The evidence of `view` (a verified bundle) for an invoice of `tenant` numbered `number`
        (its own invoice_issued entry, were the bundle to hold it, is not an earlier invoice)."""
        usage: Dict[str, List[Tuple[int, int, int, Fraction]]] = {}
        model_usage: Dict[Tuple[str, str], List[Tuple[int, int, Fraction]]] = {}
        for index, t, lease, start, end, count, model, seconds in view.lease_usage:
            if t == tenant:
                usage.setdefault(lease, []).append((index, start, end, Fraction(count)))
                model_usage.setdefault((lease, model), []).append((index, start, Fraction(seconds)))
        earlier = [(pf, pt, size) for t, n, pf, pt, size in view.invoice_scopes if t == tenant and n != number]
        return cls({name: l for name, l in view.leases.items() if l.tenant == tenant}, usage,
                   frozenset(entry for t, entry in view.excluded_entries if t == tenant), model_usage, earlier)


def leased_gpus(lease: Lease) -> Fraction:
    """RATING.md, "SLA credits": how many GPUs a lease rents: Σ over its items of the GPUs it
    names × their share (1 for whole GPUs), or the item's count of a model. Exact."""
    total = Fraction(0)
    for item in lease.items:
        if item.gpus is not None:
            total += len(item.gpus) * (Fraction(item.share) if item.share is not None else Fraction(1))
        elif item.count is not None:
            total += Fraction(item.count)
    return total


def leased_gpu_seconds(lease: Lease, start: int, end: int) -> Fraction:
    """The lease's GPUs × the seconds of its term [from, to) inside [start, end); 0 when it is not
    in force then."""
    lo = max(start, lease.start)
    hi = end if lease.end is None else min(end, lease.end)
    return leased_gpus(lease) * (hi - lo) if hi > lo else Fraction(0)


def present_gpu_seconds(evidence: SlaEvidence, lease: str, start: int, end: int, period_from: int,
                        period_to: int) -> Fraction:
    """RATING.md, "SLA credits", present GPU-seconds of `lease` over the billing period [start,
    end): over the tenant's gpu_usage records of the lease that the invoice of [period_from,
    period_to) rates in its own period (their start in that period, not excluded by a
    record_excluded entry) and whose start is in [start, end): Σ gpu_count × (min(record end,
    end) − record start). A record running past the billing period counts its part in it only."""
    total = Fraction(0)
    for index, s, e, count in evidence.usage.get(lease, ()):
        if index in evidence.excluded or not (period_from <= s < period_to and start <= s < end):
            continue
        total += count * (min(e, end) - s)
    return total


def availability_percent(leased: Fraction, present: Fraction) -> Optional[Fraction]:
    """100 × present ÷ leased, at most 100, truncated toward zero to AVAILABILITY_DECIMALS places
    (so that "below a step's bound" holds of the shown figure exactly when it holds of the exact
    ratio); None when nothing was leased."""
    if leased <= 0:
        return None
    ratio = min(Fraction(100), 100 * present / leased)
    scale = 10 ** AVAILABILITY_DECIMALS
    n = ratio * scale
    return Fraction(n.numerator // n.denominator, scale)  # present >= 0: floor is truncation


def sla_credit_step(sla: Dict[str, Any], availability: Fraction) -> Optional[Dict[str, str]]:
    """The credit step an availability earns under an SLA: the step with the lowest `below`
    that the availability is under (the steps' `below` fall strictly, so the last such step of
    `credits`); None when it is under none."""
    found = None
    for step in sla["credits"]:
        if availability < Fraction(step["below"]):
            found = step
    return found


def whole_spans(contract: Dict[str, Any], period_from: int, period_to: int) -> List[BillingSpan]:
    """The billing periods (clipped to the term) of a contract that lie wholly inside the invoice
    period [period_from, period_to), in order."""
    spans = billing_periods(parse_timestamp(contract["term_from"]), parse_timestamp(contract["term_to"]),
                            contract["billing_period"], contract["billing_anchor"])
    return [s for s in spans if period_from <= s.start and s.end <= period_to]


def judged_spans(contract: Dict[str, Any], period_from: int, period_to: int) -> List[BillingSpan]:
    """The billing periods (clipped to the term) of a contract with an SLA that lie wholly inside
    the invoice period [period_from, period_to): those whose availability the invoice judges.
    None without an SLA."""
    if "sla" not in contract:
        return []
    return whole_spans(contract, period_from, period_to)


def rented_leases(contract: Dict[str, Any]) -> List[str]:
    """The leases a contract's fees rent, each once, in the order of the fees."""
    out: List[str] = []
    for fee in contract.get("fees") or ():
        if "lease" in fee and fee["lease"] not in out:
            out.append(fee["lease"])
    return out


def sla_rows_and_credits(contract: Dict[str, Any], period_from: int, period_to: int, currency: str,
                         evidence: SlaEvidence) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """RATING.md, "SLA credits", for one contract of the invoice's currency: per billing period
    it judges (judged_spans) and lease its fees rent (rented_leases), in that order, the
    invoice's `availability` row {contract, lease, period, leased_gpu_seconds,
    present_gpu_seconds, availability, target, credit_percent?} (none when the lease is not in
    the bundle or was not in force), and, when a step applies, one `sla_credit` line per
    periodic fee renting the lease (in the order of the fees): quantity percent ÷ 100,
    unit_price the fee's amount for the billing period (amount × used ÷ full, rounded half-even
    to the minor unit, as its fee line has it), net −round_half_even(quantity × unit_price).
    Tax members are left to the caller."""
    places = minor_units(currency)
    sla = contract.get("sla")
    rows: List[Dict[str, Any]] = []
    lines: List[Dict[str, Any]] = []
    if sla is None:
        return rows, lines
    for span in judged_spans(contract, period_from, period_to):
        period = {"from": format_ts(span.start), "to": format_ts(span.end)}
        for name in rented_leases(contract):
            lease = evidence.leases.get(name)
            if lease is None:
                continue
            leased = leased_gpu_seconds(lease, span.start, span.end)
            present = present_gpu_seconds(evidence, name, span.start, span.end, period_from, period_to)
            availability = availability_percent(leased, present)
            if availability is None:
                continue
            step = sla_credit_step(sla, availability)
            row = {"contract": contract["contract"], "lease": name, "period": dict(period),
                   "leased_gpu_seconds": canonical_str(leased), "present_gpu_seconds": canonical_str(present),
                   "availability": canonical_str(availability), "target": canonical_str(Fraction(sla["target"]))}
            if step is not None:
                row["credit_percent"] = canonical_str(Fraction(step["percent"]))
            rows.append(row)
            if step is None:
                continue
            share = Fraction(step["percent"]) / 100
            for fee in contract["fees"]:
                if fee.get("lease") != name or fee["timing"] == "once":
                    continue
                base = span.prorate(decimal_fraction(fee["amount"]), minor_units(contract["currency"]))
                credit = round_half_even(share * base, places)
                if credit == 0:
                    # A credit that rounds to nothing makes no line (as a true-up of 0).
                    continue
                lines.append({
                    "kind": "sla_credit",
                    # The percent, the availability and the target canonical.
                    "description": (f"SLA credit {canonical_str(share * 100)} %: {fee['name']}, lease {name}, "
                                    f"availability {canonical_str(availability)} % "
                                    f"(target {canonical_str(Fraction(sla['target']))} %)"),
                    "region": contract["region"],
                    "contract": contract["contract"],
                    "category": fee["category"],
                    "service_period": dict(period),
                    "quantity": canonical_str(share),
                    "unit": "period",
                    "unit_price": canonical_str(base),
                    "net": fixed_str(-credit, places),
                    "records": 0,
                })
    return rows, lines


# ---------------------------------------------------------------------------------------------
# Included GPU-hours and overage (docs/RATING.md, "Included GPU-hours and overage"; PROTOCOL.md
# section 5.19, `fees[i].included`), recomputed from the bundle's gpu_usage, record_excluded and
# earlier invoice_issued entries of the invoice's tenant with exact fractions.
# ---------------------------------------------------------------------------------------------

GPU_HOUR_DECIMALS = 6  # GPU-seconds ÷ 3600 (a line's quantity, the figures of a description): half-even
ALLOWANCE_DECIMALS = 6  # an allowance in GPU-seconds: half-even to 6 places
SECONDS_PER_HOUR = 3600


def has_included(contract: Dict[str, Any]) -> bool:
    """Whether any fee of the contract includes GPU-hours (`fees[i].included`)."""
    return any("included" in fee for fee in contract.get("fees") or ())


def included_entries(contract: Dict[str, Any]) -> List[Tuple[int, Dict[str, Any], Dict[str, Any]]]:
    """(fee's place in `fees`, fee, entry) of every included entry of the contract, in the
    contract's order: fee by fee, entry by entry."""
    return [(i, fee, entry) for i, fee in enumerate(contract.get("fees") or ())
            for entry in fee.get("included") or ()]


def gpu_hours_str(seconds: Fraction) -> str:
    """GPU-seconds as GPU-hours: ÷ 3600 rounded half-even to 6 places, canonical (a line's
    `quantity`; U and A of a description)."""
    return canonical_str(round_half_even(seconds / SECONDS_PER_HOUR, GPU_HOUR_DECIMALS))


def allowance_gpu_seconds(entry: Dict[str, Any], span: BillingSpan) -> Fraction:
    """RATING.md, the allowance of an entry over the billing period `span`, in GPU-seconds:
    gpu_hours × 3600 × used ÷ full (the span's proration, as its fee's own line), rounded
    half-even to 6 decimals."""
    exact = decimal_fraction(entry["gpu_hours"]) * SECONDS_PER_HOUR * span.share
    return round_half_even(exact, ALLOWANCE_DECIMALS)


def priced_records(contract: Dict[str, Any], fee: Dict[str, Any], entry: Dict[str, Any],
                   evidence: SlaEvidence) -> List[Tuple[int, int, Fraction]]:
    """RATING.md, contract-priced records: the tenant's gpu_usage records (index, start,
    gpu_seconds) of the fee's lease and the entry's GPU model whose start is in the contract's
    term [term_from, term_to). The contract prices them, not the rate card."""
    term_from, term_to = parse_timestamp(contract["term_from"]), parse_timestamp(contract["term_to"])
    return [r for r in evidence.model_usage.get((fee["lease"], entry["gpu_model"]), ())
            if term_from <= r[1] < term_to]


def used_records(records: List[Tuple[int, int, Fraction]], span: BillingSpan, period_from: int, period_to: int,
                 evidence: SlaEvidence) -> List[Tuple[int, int, Fraction]]:
    """RATING.md, used: of the contract-priced `records` of an entry, those the invoice of
    [period_from, period_to) rates in its own period (their start in it, not excluded by a
    record_excluded entry) whose start is in the billing period `span`. A record counts whole
    toward the billing period it starts in."""
    return [r for r in records if r[0] not in evidence.excluded
            and period_from <= r[1] < period_to and span.start <= r[1] < span.end]


def late_period(index: int, start: int, period_from: int, period_to: int,
                evidence: SlaEvidence) -> Optional[Tuple[int, int]]:
    """The earlier invoiced period a record is late for on the invoice of [period_from,
    period_to), as crates/core/src/invoice.rs `InvoiceScope::place` places it (Late): its start
    is not in the invoice's period but in the period of one of the tenant's other invoices
    (evidence.earlier), its log index is at least the largest checkpoint_size of those
    invoices (it was logged after the last of them), and it is not excluded. None otherwise."""
    if period_from <= start < period_to or index in evidence.excluded:
        return None
    since = max((size for _, _, size in evidence.earlier), default=0)
    for pf, pt, _ in evidence.earlier:
        if pf <= start < pt:
            return (pf, pt) if index >= since else None
    return None


def _usage_line(kind: str, description: str, contract: Dict[str, Any], fee: Dict[str, Any],
                entry: Dict[str, Any], seconds: Fraction, unit_price: Fraction, net: Fraction, records: int,
                places: int) -> Dict[str, Any]:
    """An `included` or `overage` line (RATING.md): E's model, unit GPU-h, quantity the
    GPU-seconds ÷ 3600 (gpu_hours_str), gpu_seconds exact, the contract's region, the contract,
    F's category. The caller adds service_period or adjustment_for; tax members are left to
    the caller of contract_lines."""
    return {
        "kind": kind,
        "description": description,
        "region": contract["region"],
        "gpu_model": entry["gpu_model"],
        "quantity": gpu_hours_str(seconds),
        "unit": "GPU-h",
        "gpu_seconds": canonical_str(seconds),
        "unit_price": canonical_str(unit_price),
        "net": fixed_str(net, places),
        "records": records,
        "contract": contract["contract"],
        "category": fee["category"],
    }


def overage_net(seconds: Fraction, rate: Fraction, places: int) -> Fraction:
    """What GPU-seconds above the allowance cost: round_half_even(seconds × rate ÷ 3600) to the
    currency's minor unit."""
    return round_half_even(seconds * rate / SECONDS_PER_HOUR, places)


def allowance_rows_and_lines(contract: Dict[str, Any], period_from: int, period_to: int, currency: str,
                             evidence: SlaEvidence
                             ) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]], List[Dict[str, Any]]]:
    """RATING.md, "Included GPU-hours and overage", for one contract of the invoice's currency:
    per billing period it judges (whole_spans: wholly inside the invoice period), fee and
    entry (in the contract's order), the invoice's `allowances` row {contract, lease,
    gpu_model, period, included_gpu_seconds, used_gpu_seconds, overage_gpu_seconds} (used or
    not), an `included` line when covered = min(used, allowance) is above 0 (unit_price 0, net
    0) and an `overage` line when over = used − covered is above 0 (at the entry's
    overage_rate, listed even when its net rounds to 0), both with the service_period B and
    `records` the number of records used counts; and the late `overage` lines: per earlier
    invoiced period (ascending), fee and entry, the contract-priced records late for it
    (late_period) at the entry's rate, with `adjustment_for` that period. Returns (rows, own
    lines, late lines); tax members are left to the caller."""
    places = minor_units(currency)
    rows: List[Dict[str, Any]] = []
    lines: List[Dict[str, Any]] = []
    entries = included_entries(contract)
    if not entries:
        return rows, lines, []
    priced = [priced_records(contract, fee, entry, evidence) for _, fee, entry in entries]
    # The billing periods whose included GPU-hours the invoice judges (RATING.md, "Which billing
    # periods"): those wholly inside its period (one split is refused by contract_charges).
    for span in whole_spans(contract, period_from, period_to):
        period = {"from": format_ts(span.start), "to": format_ts(span.end)}
        for (_, fee, entry), records in zip(entries, priced):
            model, lease = entry["gpu_model"], fee["lease"]
            rate = decimal_fraction(entry["overage_rate"])
            allowance = allowance_gpu_seconds(entry, span)
            used_by = used_records(records, span, period_from, period_to, evidence)
            used = sum((r[2] for r in used_by), Fraction(0))
            covered = min(used, allowance)
            over = used - covered
            rows.append({"contract": contract["contract"], "lease": lease, "gpu_model": model,
                         "period": dict(period), "included_gpu_seconds": canonical_str(allowance),
                         "used_gpu_seconds": canonical_str(used), "overage_gpu_seconds": canonical_str(over)})
            a = gpu_hours_str(allowance)
            if covered > 0:
                line = _usage_line("included", f"Included GPU-hours, {model}, lease {lease}: {gpu_hours_str(used)} "
                                   f"of {a} GPU-h ({fee['name']})", contract, fee, entry, covered, Fraction(0),
                                   Fraction(0), len(used_by), places)
                lines.append(dict(line, service_period=dict(period)))
            if over > 0:
                line = _usage_line("overage", f"Overage above {a} included GPU-h, {model}, lease {lease} "
                                   f"({fee['name']})", contract, fee, entry, over, rate,
                                   overage_net(over, rate, places), len(used_by), places)
                lines.append(dict(line, service_period=dict(period)))
    late: Dict[Tuple[int, int], Dict[int, List[Fraction]]] = {}
    for k, records in enumerate(priced):
        for index, start, seconds in records:
            p = late_period(index, start, period_from, period_to, evidence)
            if p is not None:
                late.setdefault(p, {}).setdefault(k, []).append(seconds)
    late_lines: List[Dict[str, Any]] = []
    for p in sorted(late):
        for k, (_, fee, entry) in enumerate(entries):
            if k not in late[p]:
                continue
            seconds = sum(late[p][k], Fraction(0))
            rate = decimal_fraction(entry["overage_rate"])
            line = _usage_line("overage", f"Overage (late records), {entry['gpu_model']}, lease {fee['lease']} "
                               f"({fee['name']})", contract, fee, entry, seconds, rate,
                               overage_net(seconds, rate, places), len(late[p][k]), places)
            late_lines.append(dict(line, adjustment_for={"from": format_ts(p[0]), "to": format_ts(p[1])}))
    return rows, lines, late_lines


def contract_lines(contracts: List[Dict[str, Any]], period_from: int, period_to: int, currency: str,
                   drawn: Fraction, sla: Optional[SlaEvidence] = None
                   ) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]], List[Dict[str, Any]],
                              List[Dict[str, Any]]]:
    """RATING.md, "Contracts", "SLA credits" and "Included GPU-hours and overage": the contract
    lines of an invoice of [period_from, period_to) in `currency` from its tenant's contracts
    (those in other currencies make nothing), its `commitments`, its `availability` rows and its
    `allowances` rows. Contract by contract in order of term (the terms of a tenant never
    overlap): its fee lines, its `included` and `overage` lines, its late `overage` lines
    (allowance_rows_and_lines), its `sla_credit` lines (sla_rows_and_credits), its `true_up`
    line; the SLAs and the included GPU-hours from the evidence `sla`. A commitment's drawn is
    `drawn` (Σ net of the invoice's own-period usage lines) plus Σ net of the own-period (not
    late) `overage` lines of every contract in the currency, all computed before any true-up;
    credits do not draw down. Tax members are left to the caller. An invoice period that splits
    a billing period of a contract with a commitment, an SLA or included GPU-hours is
    `claim_mismatch`, item `period`."""
    places = minor_units(currency)
    evidence = sla if sla is not None else SlaEvidence()
    ordered = sorted((c for c in contracts if c["currency"] == currency),
                     key=lambda c: (parse_timestamp(c["term_from"]), c["contract"].encode()))
    charges = []
    for c in ordered:
        ch = contract_charges(c, period_from, period_to)
        if ch.split is not None:
            raise Failure("claim_mismatch", "period",
                          f"the invoice period [{format_ts(period_from)}, {format_ts(period_to)}) holds part, not "
                          f"all, of the billing period [{format_ts(ch.split.start)}, {format_ts(ch.split.end)}) of "
                          f"contract {c['contract']}, which has a commitment, an SLA or included GPU-hours: "
                          "invoices hold whole billing periods")
        charges.append(ch)
    # Every contract's included GPU-hours first: the own-period overage lines draw down the
    # commitments as usage lines do (RATING.md, "Commitments").
    priced = [allowance_rows_and_lines(c, period_from, period_to, currency, evidence) for c in ordered]
    drawn += sum((Fraction(l["net"]) for _, own, _ in priced for l in own if l["kind"] == "overage"), Fraction(0))
    # The draw-down is an amount like every other: with the currency's minor digits (0.00 when
    # the invoice has no usage line of its period).
    drawn_text = fixed_str(drawn, places)
    lines: List[Dict[str, Any]] = []
    commitments: List[Dict[str, Any]] = []
    availability: List[Dict[str, Any]] = []
    allowances: List[Dict[str, Any]] = []
    for c, ch, (rows, own, late) in zip(ordered, charges, priced):
        for f in ch.fees:
            fee = c["fees"][f.fee]
            lines.append({
                "kind": "fee",
                "description": fee["name"],
                "region": c["region"],
                "contract": c["contract"],
                "category": fee["category"],
                "timing": fee["timing"],
                "service_period": {"from": format_ts(f.start), "to": format_ts(f.end)},
                "quantity": canonical_str(round_half_even(f.share, PERIOD_SHARE_DECIMALS)),
                "unit": "period",
                "unit_price": canonical_str(decimal_fraction(fee["amount"])),
                "net": fixed_str(f.net, places),
                "records": 0,
            })
        allowances += rows
        lines += own + late
        rows, credits = sla_rows_and_credits(c, period_from, period_to, currency, evidence)
        availability += rows
        lines += credits
        if ch.committed is not None:
            true_up = max(Fraction(0), ch.committed - drawn)
            commitments.append({"contract": c["contract"], "committed": fixed_str(ch.committed, places),
                                "drawn": drawn_text, "true_up": fixed_str(true_up, places)})
            if true_up > 0:
                lines.append({
                    "kind": "true_up",
                    "description": f"Minimum commitment true-up, contract {c['contract']}",
                    "region": c["region"],
                    "contract": c["contract"],
                    "quantity": "1",
                    "unit": "period",
                    "unit_price": canonical_str(true_up),
                    "net": fixed_str(true_up, places),
                    "records": 0,
                })
    return lines, commitments, availability, allowances


# ---------------------------------------------------------------------------------------------
# Prepaid balances (docs/RATING.md, "Prepaid balances"; PROTOCOL.md section 5.20): a tenant's
# prepayment entries are lots; every invoice issued to it draws on them by one rule, recomputed
# here from the bundle's prepayment and invoice_issued entries with exact fractions.
# ---------------------------------------------------------------------------------------------


def padded_str(x: Fraction, places: int) -> str:
    """An exact terminating amount with at least `places` digits after the point: padded, never
    rounded (RATING.md, "Prepaid balances": "every amount is written with at least the
    currency's minor-unit digits", `100.00`); an amount with more digits keeps them."""
    needed = 0
    while (x * 10 ** needed).denominator != 1:
        needed += 1
        if needed > 60:
            raise ValueError(f"{x} is not a terminating decimal")
    return fixed_str(x, max(places, needed))


@dataclass
class Lot:
    """A prepaid lot: its prepayment entry's index and body, and what the invoices drew from it,
    (invoice number, amount) in log order."""
    index: int
    tenant: str
    reference: str
    source: str
    currency: str
    amount: Fraction
    expires_at: Optional[int]
    draws: List[Tuple[str, Fraction]] = field(default_factory=list)

    @property
    def remaining(self) -> Fraction:
        return self.amount - sum((a for _, a in self.draws), Fraction(0))

    def pays(self, size: int, issued: int) -> bool:
        """Whether an invoice issued at checkpoint size `size` at the instant `issued` may draw on
        it (its tenant and currency aside): its entry is below the size, and it had not expired
        when the invoice was issued (no expires_at, or issued < expires_at, strictly: from
        expires_at on, what is left of it is forfeit)."""
        return self.index < size and (self.expires_at is None or issued < self.expires_at)

    def order(self) -> Tuple[int, bool, int, int]:
        """The drawing order: grants before purchases, then the earliest expires_at first (a lot
        without one after every lot with one), then log order."""
        return (PREPAYMENT_SOURCES.index(self.source), self.expires_at is None, self.expires_at or 0, self.index)


class PrepaidBook:
    """The lots of a log (or of a bundle) and what its invoices drew from them, rebuilt from its
    prepayment and invoice_issued entries taken in increasing index order (`apply`). An
    invoice_issued entry draws by the same rule as the invoice checked, with its own tenant,
    currency, `total` and `checkpoint_size`, issued at its entry's `received_at` (the ledger
    writes the entry at the invoice's issued_at). A second prepayment of a tenant with a
    reference it used is not a lot (the ledger refuses it: reference_used)."""

    def __init__(self):
        self.lots: List[Lot] = []
        self._by_reference: Dict[Tuple[str, str], Lot] = {}
        self._last_index = -1

    def apply(self, index: int, kind: str, body: Dict[str, Any], received_at: Optional[int]) -> None:
        """Entry `index` of kind `kind` with `body`, its leaf's `received_at` (for an
        invoice_issued entry, the instant its invoice was issued; a prepayment's is not read)."""
        if index <= self._last_index:
            raise ValueError(f"entry {index} after entry {self._last_index}: a book is built in index order")
        if kind == "invoice_issued" and received_at is None:
            raise ValueError(f"entry {index}: an invoice_issued entry draws as issued at its received_at")
        self._last_index = index
        if kind == "prepayment":
            key = (body["tenant"], body["reference"])
            if key not in self._by_reference:
                expires_at = parse_timestamp(body["expires_at"]) if "expires_at" in body else None
                lot = Lot(index, body["tenant"], body["reference"], body["source"], body["currency"],
                          Fraction(body["amount"]), expires_at)
                self.lots.append(lot)
                self._by_reference[key] = lot
        elif kind == "invoice_issued":
            for lot, amount in self.draws(body["tenant"], body["currency"], Fraction(body["total"]),
                                          body["checkpoint_size"], received_at):
                lot.draws.append((body["number"], amount))

    def lot(self, tenant: str, reference: str) -> Optional[Lot]:
        return self._by_reference.get((tenant, reference))

    def draws(self, tenant: str, currency: str, total: Fraction, size: int,
              issued: int) -> List[Tuple[Lot, Fraction]]:
        """RATING.md, "Prepaid balances": what an invoice of `tenant` in `currency` with total
        `total` (gross), issued at checkpoint size `size` at the instant `issued`, draws from
        the lots as they stand, in drawing order. The lots of the tenant in the
        currency that the invoice may draw on (`Lot.pays`) with something left, in `Lot.order`;
        from max(total, 0) left to pay, each gives min(what is left of it, what is left to pay)
        until nothing is left to pay. Empty when nothing is drawn (a total of 0 or less, no lot)."""
        eligible = sorted((l for l in self.lots if l.tenant == tenant and l.currency == currency
                           and l.pays(size, issued) and l.remaining > 0), key=Lot.order)
        left = max(total, Fraction(0))
        out: List[Tuple[Lot, Fraction]] = []
        for lot in eligible:
            if left <= 0:
                break
            take = min(lot.remaining, left)
            left -= take
            out.append((lot, take))
        return out


def prepaid_members(draws: List[Tuple[Lot, Fraction]], total: Fraction,
                    currency: str) -> Tuple[Optional[List[Dict[str, str]]], Optional[str]]:
    """The invoice's `prepaid` list ([{prepayment, source, amount}] in drawing order) and
    `amount_due` (total − Σ prepaid.amount), amounts padded to the currency's minor digits
    (`padded_str`); (None, None), both absent, when nothing was drawn."""
    if not draws:
        return None, None
    places = minor_units(currency)
    prepaid = [{"prepayment": lot.reference, "source": lot.source, "amount": padded_str(amount, places)}
               for lot, amount in draws]
    drawn = sum((amount for _, amount in draws), Fraction(0))
    return prepaid, padded_str(total - drawn, places)


def invoice_prepaid_book(entries: List[Tuple[int, str, Dict[str, Any], Optional[int]]], tenant: str,
                         number: str) -> PrepaidBook:
    """The book of an invoice's bundle (LogView.prepaid_entries: index, kind, body, the leaf's
    received_at): the tenant's prepayment entries and its invoice_issued entries other than
    the invoice's own (a bundle at the invoice's checkpoint cannot hold that one), in index
    order, each invoice drawing as issued at its entry's received_at; other tenants' are left
    out."""
    book = PrepaidBook()
    for index, kind, body, received_at in sorted(entries, key=lambda e: e[0]):
        if body["tenant"] != tenant or (kind == "invoice_issued" and body["number"] == number):
            continue
        book.apply(index, kind, body, received_at)
    return book


# ---------------------------------------------------------------------------------------------
# Usage rating (docs/RATING.md; crates/core/src/rating.rs, crates/core/src/invoice.rs): an
# invoice's usage lines (gpu, energy, and the adjustment lines of late records) re-rated from
# the records of its bundle, by the prices of its context, with exact fractions: each record
# split second by second at every price change inside it, volume tiers graduated over the
# period's volume, energy at kWh × PUE × the electricity price in force at its start, each
# line rounded half-even once to the currency's minor unit.
# ---------------------------------------------------------------------------------------------

LEASE_CLASS_ORDER = ("on_demand", "reserved", "spot")  # rating.rs LeaseClass: declaration order is its Ord
LEASE_CLASS_LABELS = {"on_demand": "on-demand", "reserved": "reserved", "spot": "spot"}  # invoice.rs class_label
BILLED_KWH_DECIMALS = 6  # an energy line's quantity: measured kWh × PUE, half-even to 6 places
NO_RATE_CARD = "no rate card in force"
NO_SPOT_PRICE = "no spot price in force"
NO_REGION_PARAMS = "no region parameters in force"


@dataclass(frozen=True)
class PricePoint:
    """rating.rs `PricePoint`, `RegionParams`, `TierSchedule` and `PlanPoint` alike: what takes
    effect at `effective_from` and stays until the next point of its series; `value` is the
    price per GPU-hour (a Fraction), (price per kWh, PUE) for region parameters, the tiers
    [(bound in GPU-hours or None, price)] for volume tiers, the plan's name for a plan."""
    effective_from: int
    currency: str
    value: Any


def insert_point(points: List[PricePoint], point: PricePoint) -> None:
    """rating.rs `insert_sorted`: after every point taking effect at or before it, so that of
    points taking effect at one instant the one logged last is in force."""
    at = bisect.bisect_right([p.effective_from for p in points], point.effective_from)
    points.insert(at, point)


def in_force(points: List[PricePoint], t: int) -> Tuple[Optional[PricePoint], Optional[int]]:
    """rating.rs `in_force`: the point in force at `t` (None before the first) and the instant
    the series next changes after `t` (None when it does not)."""
    at = bisect.bisect_right([p.effective_from for p in points], t)
    return (points[at - 1] if at else None), (points[at].effective_from if at < len(points) else None)


@dataclass(frozen=True)
class UsageRecord:
    """A gpu_usage or energy record of a bundle, as rating reads it (`gpu_count`, `gpu_seconds`
    and `kwh` exact; an energy record has no lease or GPU model)."""
    index: int
    kind: str
    tenant: Optional[str]
    region: str
    start: int
    end: int
    lease: Optional[str] = None
    gpu_model: str = ""
    gpu_count: Fraction = Fraction(0)
    gpu_seconds: Fraction = Fraction(0)
    kwh: Fraction = Fraction(0)

    @classmethod
    def of(cls, index: int, kind: str, body: Dict[str, Any], start: int, end: int) -> "UsageRecord":
        """The record of a checked entry's body (its start and end parsed)."""
        if kind == "gpu_usage":
            return cls(index, kind, body["tenant"], body["region"], start, end, body.get("lease"),
                       body["gpu_model"], Fraction(body["gpu_count"]), Fraction(body["gpu_seconds"]))
        return cls(index, kind, body.get("tenant"), body["region"], start, end, kwh=Fraction(body["kwh"]))


class PriceBook:
    """rating.rs `PriceBook`: every price rating needs, from the pricing entries of a bundle's
    context taken in log order (`add_entry`): rate cards per (region, GPU model, class), spot
    prices per (region, GPU model), region parameters per region, each lease's class, tenants'
    plans and plans' volume tiers per (plan, region, GPU model, class)."""

    def __init__(self):
        self.rate_cards: Dict[Tuple[str, str, str], List[PricePoint]] = {}
        self.spot: Dict[Tuple[str, str], List[PricePoint]] = {}
        self.regions: Dict[str, List[PricePoint]] = {}
        self.leases: Dict[str, str] = {}
        self.plans: Dict[str, List[PricePoint]] = {}
        self.tiers: Dict[Tuple[str, str, str, str], List[PricePoint]] = {}

    def add_entry(self, kind: str, body: Dict[str, Any]) -> None:
        """rating.rs `PriceBook::add_entry`: what a rate_card, spot_price, region_params,
        lease_registered, volume_tiers or tenant_plan entry says (other kinds are ignored)."""
        if kind in ("rate_card", "spot_price", "region_params", "volume_tiers", "tenant_plan"):
            at = parse_timestamp(body["effective_from"])
        if kind == "rate_card":
            insert_point(self.rate_cards.setdefault((body["region"], body["gpu_model"], body["lease_class"]), []),
                         PricePoint(at, body["currency"], Fraction(body["price_per_gpu_hour"])))
        elif kind == "spot_price":
            insert_point(self.spot.setdefault((body["region"], body["gpu_model"]), []),
                         PricePoint(at, body["currency"], Fraction(body["price_per_gpu_hour"])))
        elif kind == "region_params":
            insert_point(self.regions.setdefault(body["region"], []),
                         PricePoint(at, body["currency"], (Fraction(body["electricity_price_per_kwh"]),
                                                           Fraction(body["pue"]))))
        elif kind == "lease_registered":
            self.leases[body["lease"]] = body["class"]
        elif kind == "volume_tiers":
            tiers = [(Fraction(t["up_to_gpu_hours"]) if "up_to_gpu_hours" in t else None,
                      Fraction(t["price_per_gpu_hour"])) for t in body["tiers"]]
            insert_point(self.tiers.setdefault((body["plan"], body["region"], body["gpu_model"],
                                                body["lease_class"]), []),
                         PricePoint(at, body["currency"], tiers))
        elif kind == "tenant_plan":
            insert_point(self.plans.setdefault(body["tenant"], []), PricePoint(at, "", body["plan"]))

    def class_of(self, lease: Optional[str]) -> str:
        """rating.rs `class_of`: the class a usage record is billed as (its lease's; on-demand
        without a lease or with one the book does not know)."""
        return self.leases.get(lease, "on_demand") if lease is not None else "on_demand"

    def series(self, region: str, gpu_model: str, cls: str) -> List[PricePoint]:
        """rating.rs `series`: spot prices for spot, else the class's rate cards."""
        if cls == "spot":
            return self.spot.get((region, gpu_model), [])
        return self.rate_cards.get((region, gpu_model, cls), [])

    def region_at(self, region: str, t: int) -> Optional[PricePoint]:
        """rating.rs `region_at`: the region parameters in force at `t`."""
        return in_force(self.regions.get(region, []), t)[0]

    def tiers_for(self, tenant: str, region: str, gpu_model: str, cls: str,
                  period_from: int) -> Optional[Tuple[str, PricePoint]]:
        """rating.rs `tiers_for`: the plan and tier schedule in force at the period's start that
        price the tenant's usage of a series; None (rate card or spot price) when the class is
        spot, no tiers are known, the tenant has no plan then, or its plan no tiers for it."""
        if cls == "spot" or not self.tiers:
            return None
        plan = in_force(self.plans.get(tenant, []), period_from)[0]
        if plan is None:
            return None
        schedule = in_force(self.tiers.get((plan.value, region, gpu_model, cls), []), period_from)[0]
        return None if schedule is None else (plan.value, schedule)

    def rate_usage(self, u: UsageRecord) -> List[Tuple[str, Fraction, Optional[Tuple[str, Fraction]]]]:
        """rating.rs `rate_usage`: a usage record split at every price change inside it, second
        by second: (class, GPU-seconds = gpu_count × the piece's seconds, (currency, price per
        GPU-hour) or None where no price is in force) per piece, in order."""
        cls = self.class_of(u.lease)
        series = self.series(u.region, u.gpu_model, cls)
        pieces = []
        t = u.start
        while t < u.end:
            point, following = in_force(series, t)
            piece_end = following if following is not None and following < u.end else u.end
            price = (point.currency, point.value) if point is not None else None
            pieces.append((cls, u.gpu_count * (piece_end - t), price))
            t = piece_end
        return pieces


def graduate(tiers: List[Tuple[Optional[Fraction], Fraction]], lo: Fraction, hi: Fraction) -> List[Tuple[int, Fraction]]:
    """rating.rs `graduate`: the volume between `lo` and `hi` GPU-seconds of a series' count in a
    period split over graduated tiers: (tier index from 0, GPU-seconds in it) for each tier the
    range touches, in order. Tier i holds the GPU-seconds above the previous bound and up to its
    `up_to_gpu_hours` × 3600; the last tier is open whatever it says."""
    out: List[Tuple[int, Fraction]] = []
    low = Fraction(0)
    for i, (bound, _) in enumerate(tiers):
        high = bound * SECONDS_PER_HOUR if bound is not None and i + 1 < len(tiers) else None
        a = max(lo, low)
        b = hi if high is None else min(hi, high)
        if b > a:
            out.append((i, b - a))
        if high is not None and high < hi:
            low = high
        else:
            break
    return out


class LineKey(NamedTuple):
    """rating.rs `LineKey`: what a line is for. `gpu`: region, GPU model, class, the plan and
    tier (from 1) of a tier line (None on rate-card and spot lines), the unit price per GPU-hour;
    `energy`: region, the price per kWh and the PUE."""
    kind: str
    region: str
    unit_price: Fraction
    gpu_model: Optional[str] = None
    cls: Optional[str] = None
    plan: Optional[str] = None
    tier: Optional[int] = None
    pue: Optional[Fraction] = None

    def order(self) -> Tuple[Any, ...]:
        """The key's place in rating.rs's BTreeMap: LineKey's derived Ord (Gpu before Energy;
        Gpu by region, GPU model, class in declaration order, tier (none first, then plan and
        tier), unit price; Energy by region, unit price, PUE; strings by their bytes, decimals
        by value)."""
        if self.kind == "gpu":
            tier = (0,) if self.plan is None else (1, self.plan.encode(), self.tier)
            return (0, self.region.encode(), self.gpu_model.encode(), LEASE_CLASS_ORDER.index(self.cls), tier,
                    self.unit_price)
        return (1, self.region.encode(), self.unit_price, self.pue)


@dataclass
class RatedLine:
    """rating.rs `Line` (less its currency): its key, exact quantity (GPU-seconds, or measured
    kWh), the amount rounded half-even once to the currency's minor unit, the records."""
    key: LineKey
    quantity: Fraction
    amount: Fraction
    records: int


@dataclass
class TieredVolume:
    """rating.rs `TieredVolume`: a graduated series' count in a period: its tiers, the
    GPU-seconds invoiced already (adjustments continue after them), those to bill now and their
    records."""
    tiers: List[Tuple[Optional[Fraction], Fraction]]
    invoiced: Fraction = Fraction(0)
    gpu_seconds: Fraction = Fraction(0)
    records: int = 0


class Rater:
    """rating.rs `Rater`: a tenant's records of one period into lines per (currency, key), each
    (quantity, exact numerator, records), the numerator of GPU lines GPU-seconds × price
    (divided by 3600 once, in `finish`); the usage no price prices, per (what is missing,
    region, GPU model, class); the graduated series, counted whole and split over their tiers in
    `finish`."""

    def __init__(self, period_from: int):
        self.period_from = period_from
        self.lines: Dict[Tuple[str, LineKey], List[Any]] = {}
        self.unpriced: Dict[Tuple[str, str, Optional[str], Optional[str]], List[Any]] = {}
        self.tiered: Dict[Tuple[str, str, str, str, str], TieredVolume] = {}

    def _tiered_volume(self, book: PriceBook, u: UsageRecord) -> Optional[TieredVolume]:
        """rating.rs `tiered_volume`: the graduated count of the record's series (tenant,
        region, GPU model, lease) if its tenant's plan tiers it in this period."""
        cls = book.class_of(u.lease)
        found = book.tiers_for(u.tenant, u.region, u.gpu_model, cls, self.period_from)
        if found is None:
            return None
        plan, schedule = found
        key = (schedule.currency, plan, u.region, u.gpu_model, cls)
        if key not in self.tiered:
            self.tiered[key] = TieredVolume(list(schedule.value))
        return self.tiered[key]

    def add_invoiced_usage(self, book: PriceBook, u: UsageRecord) -> None:
        """rating.rs `add_invoiced_usage`: a usage record invoiced already is not billed again,
        but a graduated series' count continues after it."""
        v = self._tiered_volume(book, u)
        if v is not None:
            v.invoiced += u.gpu_seconds

    def add_usage(self, book: PriceBook, u: UsageRecord) -> None:
        """rating.rs `add_usage`: a usage record, to its graduated count or piece by piece
        (`PriceBook.rate_usage`) to its rate-card or spot lines (or to the unpriced usage)."""
        v = self._tiered_volume(book, u)
        if v is not None:
            v.gpu_seconds += u.gpu_seconds
            v.records += 1
            return
        for cls, gpu_seconds, price in book.rate_usage(u):
            self._add_piece(u, cls, price, gpu_seconds)

    def _add_piece(self, u: UsageRecord, cls: str, price: Optional[Tuple[str, Fraction]],
                   gpu_seconds: Fraction) -> None:
        """rating.rs `add_piece`, for one piece of one record."""
        if price is None:
            what = NO_SPOT_PRICE if cls == "spot" else NO_RATE_CARD
            e = self.unpriced.setdefault((what, u.region, u.gpu_model, cls), [Fraction(0), 0])
            e[0] += gpu_seconds
            e[1] += 1
            return
        currency, unit_price = price
        key = LineKey("gpu", u.region, unit_price, u.gpu_model, cls)
        e = self.lines.setdefault((currency, key), [Fraction(0), Fraction(0), 0])
        e[0] += gpu_seconds
        e[1] += gpu_seconds * unit_price
        e[2] += 1

    def add_energy(self, book: PriceBook, u: UsageRecord) -> None:
        """rating.rs `add_energy`: an energy record at the region parameters in force at its
        start: kWh × PUE × price per kWh (or to the unpriced usage)."""
        params = book.region_at(u.region, u.start)
        if params is None:
            e = self.unpriced.setdefault((NO_REGION_PARAMS, u.region, None, None), [Fraction(0), 0])
            e[0] += u.kwh
            e[1] += 1
            return
        price, pue = params.value
        key = LineKey("energy", u.region, price, pue=pue)
        e = self.lines.setdefault((params.currency, key), [Fraction(0), Fraction(0), 0])
        e[0] += u.kwh
        e[1] += u.kwh * pue * price
        e[2] += 1

    def finish(self) -> Tuple[Dict[str, List[RatedLine]], List[Tuple[str, str, Optional[str], Optional[str], Fraction, int]]]:
        """rating.rs `Rater::finish`: the graduated series split over their tiers (each tier line
        counting every record of the series), then the lines per currency in the BTreeMap's
        order of (currency, key), each amount = exact (numerator ÷ 3600 for GPU lines) rounded
        half-even once to the currency's minor unit; and the unpriced usage (what, region, GPU
        model, class, quantity, records), in its key's order."""
        for (currency, plan, region, gpu_model, cls), v in self.tiered.items():
            for i, quantity in graduate(v.tiers, v.invoiced, v.invoiced + v.gpu_seconds):
                price = v.tiers[i][1]
                key = LineKey("gpu", region, price, gpu_model, cls, plan, i + 1)
                e = self.lines.setdefault((currency, key), [Fraction(0), Fraction(0), 0])
                e[0] += quantity
                e[1] += quantity * price
                e[2] += v.records
        self.tiered = {}
        by_currency: Dict[str, List[RatedLine]] = {}
        for (currency, key) in sorted(self.lines, key=lambda ck: (ck[0].encode(), ck[1].order())):
            quantity, numerator, records = self.lines[(currency, key)]
            exact = numerator / SECONDS_PER_HOUR if key.kind == "gpu" else numerator
            by_currency.setdefault(currency, []).append(
                RatedLine(key, quantity, round_half_even(exact, minor_units(currency)), records))
        order = {c: i for i, c in enumerate(LEASE_CLASS_ORDER)}
        unpriced = [(what, region, model, cls, q, n) for (what, region, model, cls), (q, n) in sorted(
            self.unpriced.items(), key=lambda kv: (kv[0][0].encode(), kv[0][1].encode(),
                                                   (0,) if kv[0][2] is None else (1, kv[0][2].encode()),
                                                   (0,) if kv[0][3] is None else (1, order[kv[0][3]])))]
        return by_currency, unpriced


def billed_kwh(measured: Fraction, pue: Fraction) -> Fraction:
    """invoice.rs `billed_kwh`: an energy line's quantity, measured kWh × PUE rounded half-even
    to 6 places."""
    return round_half_even(measured * pue, BILLED_KWH_DECIMALS)


def describe(key: LineKey) -> str:
    """invoice.rs `describe`: `GPU compute, H100, cn-east, on-demand` (tier lines add `, volume
    tier 2 of plan P`), `Electricity, cn-east, PUE 1.08`."""
    if key.kind == "gpu":
        text = f"GPU compute, {key.gpu_model}, {key.region}, {LEASE_CLASS_LABELS[key.cls]}"
        if key.plan is not None:
            text += f", volume tier {key.tier} of plan {key.plan}"
        return text
    return f"Electricity, {key.region}, PUE {canonical_str(key.pue)}"


def usage_invoice_line(line: RatedLine, currency: str, adjustment_for: Optional[Tuple[int, int]]) -> Dict[str, Any]:
    """invoice.rs `line_v2`: the invoice line (version 2) of a rated line, tax members left to
    the caller: a `gpu` line in GPU-hours (gpu_hours_str) with the exact `gpu_seconds`, its
    `gpu_model`, `class` and, on a tier line, `plan` and `tier`; an `energy` line in billed kWh
    (billed_kwh) with the exact `measured_kwh` and the `pue`; `unit_price`, `net` (the rounded
    amount with the currency's minor digits), `records`, and on an adjustment line
    `adjustment_for` the earlier period."""
    key = line.key
    out: Dict[str, Any] = {"kind": key.kind, "description": describe(key), "region": key.region}
    if key.kind == "gpu":
        out.update(gpu_model=key.gpu_model, **{"class": key.cls})
        if key.plan is not None:
            out.update(plan=key.plan, tier=key.tier)
        out.update(quantity=gpu_hours_str(line.quantity), unit="GPU-h", gpu_seconds=canonical_str(line.quantity))
    else:
        out.update(quantity=canonical_str(billed_kwh(line.quantity, key.pue)), unit="kWh",
                   measured_kwh=canonical_str(line.quantity), pue=canonical_str(key.pue))
    out.update(unit_price=canonical_str(key.unit_price), net=fixed_str(line.amount, minor_units(currency)),
               records=line.records)
    if adjustment_for is not None:
        out["adjustment_for"] = {"from": format_ts(adjustment_for[0]), "to": format_ts(adjustment_for[1])}
    return out


@dataclass
class InvoiceScope:
    """invoice.rs `InvoiceScope`: which of a tenant's records an invoice of [period_from,
    period_to) rates, and how: the periods of the tenant's earlier invoices, `since` the largest
    checkpoint size among them (records below it were invoiced already), and the records its
    tenant's record_excluded entries exclude (entry -> the first exclusion's reason)."""
    period_from: int
    period_to: int
    earlier: List[Tuple[int, int]] = field(default_factory=list)
    since: int = 0
    excluded: Dict[int, str] = field(default_factory=dict)

    def place(self, index: int, start: int) -> Tuple[str, Optional[Tuple[int, int]]]:
        """invoice.rs `InvoiceScope::place`: ("period", None) when the record starts in the
        invoice's period; ("late", p) when it starts in the earlier invoiced period p and was
        logged at or after `since`; ("invoiced", p) when before (it only continues p's volume
        tiers); ("outside", None) when it starts in no such period. An excluded record that
        would be rated (period, late) is ("excluded", None); one that would only continue a
        count is ("outside", None)."""
        if self.period_from <= start < self.period_to:
            placement: Tuple[str, Optional[Tuple[int, int]]] = ("period", None)
        else:
            placement = ("outside", None)
            for p in self.earlier:
                if p[0] <= start < p[1]:
                    placement = ("late", p) if index >= self.since else ("invoiced", p)
                    break
        if index not in self.excluded:
            return placement
        return ("excluded", None) if placement[0] in ("period", "late") else ("outside", None)


class Metering:
    """allowance.rs `Metering::prices`: which usage records are contract-priced, from the
    tenant's contracts (every currency, terms as amended): a record is when it names a lease and
    a fee of a contract whose term [term_from, term_to) holds its start rents that lease and
    includes its GPU model. Such a record makes no rate-card line."""

    def __init__(self, contracts: List[Dict[str, Any]]):
        self.terms: Dict[Tuple[str, str], List[Tuple[int, int]]] = {}
        for c in contracts:
            term = (parse_timestamp(c["term_from"]), parse_timestamp(c["term_to"]))
            for fee in c.get("fees") or ():
                if fee.get("lease") is None:
                    continue
                for entry in fee.get("included") or ():
                    self.terms.setdefault((fee["lease"], entry["gpu_model"]), []).append(term)

    def prices(self, u: UsageRecord) -> bool:
        """Whether the usage record is contract-priced."""
        if u.lease is None:
            return False
        return any(a <= u.start < b for a, b in self.terms.get((u.lease, u.gpu_model), ()))


@dataclass
class RatedUsage:
    """What the re-rating of an invoice's records came to, in the invoice's currency: its
    own-period usage lines and its adjustment lines (invoice line objects, tax members left
    out), its `excluded` member ([{entry, reason}] by increasing entry) and how many of its
    records were placed where."""
    lines: List[Dict[str, Any]]
    adjustments: List[Dict[str, Any]]
    excluded: List[Dict[str, Any]]
    placed: Dict[str, int]


def _unpriced_text(unpriced: List[Tuple[str, str, Optional[str], Optional[str], Fraction, int]]) -> str:
    parts = []
    for what, region, model, cls, quantity, records in unpriced:
        series = ", ".join(x for x in (region, model, cls) if x is not None)
        unit = "kWh" if model is None else "GPU-seconds"
        parts.append(f"{what} ({series}): {canonical_str(quantity)} {unit} of {records} records")
    return "; ".join(parts)


def rate_invoice_usage(tenant: str, currency: str, scope: InvoiceScope, book: PriceBook, metering: Metering,
                       records: List[UsageRecord]) -> RatedUsage:
    """invoice.rs `InvoiceRating` (`add`, `finish`), fed as `InvoiceCheck` feeds it: each record
    of the bundle (index order) placed by the scope; a record of another tenant is
    `wrong_tenant`, one placed nowhere `outside_period` (item `entry N`); an excluded one is
    listed, rated nowhere; one of the period into the period's Rater, a late one into its
    earlier period's (Rater from that period's start: its plan and tiers), an invoiced one only
    continuing that period's tier count; a contract-priced gpu_usage record (Metering) rated by
    no Rater (nor counted toward a tier). Then usage of the period that no price prices is
    `claim_mismatch`, item `invoice` (the ledger never issues such an invoice; unpriced late
    usage just makes no line). The lines of the invoice's currency: the period's, then each
    earlier period's (ascending) as adjustment lines; a line of quantity 0 is left out
    (`lines_v2`)."""
    main = Rater(scope.period_from)
    late: Dict[Tuple[int, int], Rater] = {}
    excluded: Dict[int, str] = {}
    placed: Dict[str, int] = {}
    for u in records:
        if u.tenant != tenant:
            raise Failure("wrong_tenant", f"entry {u.index}", f"the record is not {tenant}'s")
        where, p = scope.place(u.index, u.start)
        placed[where] = placed.get(where, 0) + 1
        if where == "outside":
            raise Failure("outside_period", f"entry {u.index}",
                          "the record is in neither the invoice's period nor an invoiced one "
                          f"(it starts at {format_ts(u.start)})")
        if where == "excluded":
            excluded[u.index] = scope.excluded[u.index]
            continue
        rater = main if where == "period" else late.setdefault(p, Rater(p[0]))
        if u.kind == "gpu_usage" and metering.prices(u):
            continue  # contract-priced: no rate-card line, no volume tier
        if where == "invoiced":
            if u.kind == "gpu_usage":
                rater.add_invoiced_usage(book, u)
        elif u.kind == "gpu_usage":
            rater.add_usage(book, u)
        else:
            rater.add_energy(book, u)
    own, unpriced = main.finish()
    if unpriced:
        raise Failure("claim_mismatch", "invoice", "the bundle's prices leave some of the period's usage unpriced: "
                      + _unpriced_text(unpriced))
    lines = [usage_invoice_line(l, currency, None) for l in own.get(currency, []) if l.quantity != 0]
    adjustments: List[Dict[str, Any]] = []
    for p in sorted(late):
        by_currency, _ = late[p].finish()
        adjustments += [usage_invoice_line(l, currency, p) for l in by_currency.get(currency, []) if l.quantity != 0]
    return RatedUsage(lines, adjustments, [{"entry": e, "reason": excluded[e]} for e in sorted(excluded)], placed)


def invoice_usage(view: "LogView", inv: "InvoiceInfo") -> RatedUsage:
    """`InvoiceCheck` (crates/core/src/invoice.rs) for the usage lines of `inv` from its verified
    bundle's `view`: the book of every pricing entry of the context (PriceBook.add_entry, log
    order), the scope of the tenant's other invoice_issued entries (their periods; since = the
    largest of their checkpoint sizes) and of its record_excluded entries (the first reason of an
    entry counts), the metering of its contracts as amended, then the records rated
    (rate_invoice_usage)."""
    book = PriceBook()
    for _, kind, body in view.pricing_entries:
        book.add_entry(kind, body)
    earlier = [(pf, pt, size) for t, n, pf, pt, size in view.invoice_scopes if t == inv.tenant and n != inv.number]
    excluded: Dict[int, str] = {}
    for t, entry, reason in view.exclusion_reasons:
        if t == inv.tenant:
            excluded.setdefault(entry, reason)
    scope = InvoiceScope(inv.period_from, inv.period_to, [(pf, pt) for pf, pt, _ in earlier],
                         max((size for _, _, size in earlier), default=0), excluded)
    metering = Metering(view.contracts.bodies_of(inv.tenant))
    return rate_invoice_usage(inv.tenant, inv.currency, scope, book, metering, view.usage_records)



@dataclass
class InvoiceInfo:
    raw: Dict[str, Any]
    number: str
    tenant: str
    currency: str
    period_from: int
    period_to: int
    issued_at: int


PREPAID_DRAW_MEMBERS = ("prepayment", "source", "amount")  # an invoice's prepaid[i]


def _invoice_malformed(item: str, message: str) -> Failure:
    return Failure("malformed", f"invoice.{item}" if item else "invoice", message)


def check_invoice_shape(obj: Any) -> InvoiceInfo:
    """The members of a version 2 invoice document (RATING.md, "Invoices") that the contract-line
    check reads: `format` gpuledger-invoice/v2, `number`, `tenant`, `currency`, `period`,
    `issued_at` (a timestamp: the instant the invoice's prepaid draws are judged at),
    `log_origin`, `checkpoint_size`, `checkpoint_root`, `lines` (objects with a known `kind`, a
    `net` string, a canonical `tax_rate`, `adjustment_for` an object if present), the totals as
    strings, `commitments`, `availability` and `allowances` arrays if present, `prepaid` an array
    of {prepayment, source, amount} (strings; source grant or purchase) and `amount_due` a string
    if present; else `malformed`, naming `invoice.<member>`."""
    if not isinstance(obj, dict):
        raise _invoice_malformed("", "not a JSON object")
    if obj.get("format") != INVOICE_FORMAT_V2:
        raise _invoice_malformed("format", f"{obj.get('format')!r}: contract lines are on {INVOICE_FORMAT_V2} "
                                 "invoices only (a version 1 invoice has none)")
    if not isinstance(obj.get("number"), str) or INVOICE_NUMBER_RE.fullmatch(obj["number"]) is None:
        raise _invoice_malformed("number", "not INV- and six digits")
    if not is_id(obj.get("tenant")):
        raise _invoice_malformed("tenant", "not an identifier")
    if not isinstance(obj.get("currency"), str) or CURRENCY_RE.fullmatch(obj["currency"]) is None:
        raise _invoice_malformed("currency", "not three upper-case letters")
    period = obj.get("period")
    if not isinstance(period, dict) or set(period) != {"from", "to"}:
        raise _invoice_malformed("period", "not an object {from, to}")
    try:
        period_from, period_to = parse_timestamp(period["from"]), parse_timestamp(period["to"])
    except (TypeError, ValueError) as e:
        raise _invoice_malformed("period", f"not a timestamp ({e})") from None
    try:
        issued_at = parse_timestamp(obj.get("issued_at"))
    except (TypeError, ValueError) as e:
        raise _invoice_malformed("issued_at", f"missing or not a timestamp ({e})") from None
    for name in ("log_origin", "checkpoint_root", "net_total", "tax_total", "total"):
        if not isinstance(obj.get(name), str):
            raise _invoice_malformed(name, "missing or not a string")
    if not is_int(obj.get("checkpoint_size")):
        raise _invoice_malformed("checkpoint_size", "missing or not an integer")
    lines = obj.get("lines")
    if not isinstance(lines, list):
        raise _invoice_malformed("lines", "missing or not an array")
    for i, line in enumerate(lines):
        at = f"lines[{i}]"
        if not isinstance(line, dict):
            raise _invoice_malformed(at, "not an object")
        if line.get("kind") not in LINE_KINDS:
            raise _invoice_malformed(f"{at}.kind", f"{line.get('kind')!r} is not one of {', '.join(LINE_KINDS)}")
        if not isinstance(line.get("net"), str):
            raise _invoice_malformed(f"{at}.net", "missing or not a string")
        rate = line.get("tax_rate")
        if not isinstance(rate, str) or len(rate) > MAX_DECIMAL_LEN or DECIMAL_RE.fullmatch(rate) is None:
            raise _invoice_malformed(f"{at}.tax_rate", f"{rate!r} is not a canonical decimal")
        if "adjustment_for" in line and not isinstance(line["adjustment_for"], dict):
            raise _invoice_malformed(f"{at}.adjustment_for", "not an object {from, to}")
    if "commitments" in obj and not isinstance(obj["commitments"], list):
        raise _invoice_malformed("commitments", "not an array")
    if "availability" in obj and not isinstance(obj["availability"], list):
        raise _invoice_malformed("availability", "not an array")
    if "allowances" in obj and not isinstance(obj["allowances"], list):
        raise _invoice_malformed("allowances", "not an array")
    if "prepaid" in obj:
        # core::prepaid `PrepaidDraw` as serde reads it: exactly {prepayment, source, amount},
        # strings, source a word it knows.
        if not isinstance(obj["prepaid"], list):
            raise _invoice_malformed("prepaid", "not an array")
        for i, draw in enumerate(obj["prepaid"]):
            at = f"prepaid[{i}]"
            if not isinstance(draw, dict):
                raise _invoice_malformed(at, "not an object")
            for name in draw:
                if name not in PREPAID_DRAW_MEMBERS:
                    raise _invoice_malformed(f"{at}.{name}", "unknown member")
            for name in PREPAID_DRAW_MEMBERS:
                if not isinstance(draw.get(name), str):
                    raise _invoice_malformed(f"{at}.{name}", "missing or not a string")
            if draw["source"] not in PREPAYMENT_SOURCES:
                raise _invoice_malformed(f"{at}.source", f"{draw['source']!r} is not one of "
                                         f"{', '.join(PREPAYMENT_SOURCES)}")
    if "amount_due" in obj and not isinstance(obj["amount_due"], str):
        raise _invoice_malformed("amount_due", "not a string")
    return InvoiceInfo(obj, obj["number"], obj["tenant"], obj["currency"], period_from, period_to, issued_at)


def read_invoice(path: str) -> InvoiceInfo:
    """An invoice document (JSON, parsed strictly as every JSON here); unreadable: a usage error."""
    raw = _read_bytes(path)
    try:
        obj = parse_json(raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise Failure("malformed", "invoice", f"not JSON ({e})") from None
    return check_invoice_shape(obj)


def _json_equal(a: Any, b: Any) -> bool:
    """JSON values equal as JSON (true is not 1, a string is compared by its spelling)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    return a == b


_ABSENT = object()


def _shown(v: Any) -> str:
    return "absent" if v is _ABSENT else json.dumps(v, ensure_ascii=False)


def invoice_first_difference(claimed: Dict[str, Any], computed: Dict[str, Any]) -> Optional[Tuple[str, str]]:
    """The first member where the invoice and its recomputation differ, and a message (as
    crates/core/src/invoice.rs `first_difference`): at the first position i where the lines
    differ, `lines[i].member` (members in byte order), or `lines[i]` when one side has no line
    there (the counts differ) or a line is not an object; then `net_total`, `tax_total`,
    `total`, `due_at`, `prepaid`, `amount_due` in that order, then any other member in byte
    order (here only `commitments` can differ besides those: every other member, `due_at`
    included, is taken from the invoice). A difference in `prepaid` is named `prepaid`, as the
    Rust verifier names it; the message says which draw and member differ."""
    cl, co = claimed.get("lines", []), computed.get("lines", [])
    for i in range(max(len(cl), len(co))):
        if i >= len(cl) or i >= len(co):
            kinds = ", ".join(l.get("kind", "?") for l in co)
            return f"lines[{i}]", f"the invoice has {len(cl)} lines; the bundle's contracts give {len(co)} ({kinds})"
        x, y = cl[i], co[i]
        if _json_equal(x, y):
            continue
        if not isinstance(x, dict) or not isinstance(y, dict):
            return f"lines[{i}]", "not a line object"
        for k in sorted(set(x) | set(y)):
            a, b = x.get(k, _ABSENT), y.get(k, _ABSENT)
            if a is _ABSENT or b is _ABSENT or not _json_equal(a, b):
                return f"lines[{i}].{k}", f"the invoice says {_shown(a)}, the bundle's contracts give {_shown(b)}"
        return f"lines[{i}]", "the lines differ"
    first = ["net_total", "tax_total", "total", "due_at", "prepaid", "amount_due"]
    others = sorted((set(claimed) | set(computed)) - {"lines"} - set(first))
    for k in first + others:
        a, b = claimed.get(k, _ABSENT), computed.get(k, _ABSENT)
        if a is _ABSENT and b is _ABSENT:
            continue
        if a is _ABSENT or b is _ABSENT or not _json_equal(a, b):
            if k == "prepaid":
                return k, _prepaid_difference(a, b)
            source = "the bundle's prepaid lots give" if k == "amount_due" else "the bundle's contracts give"
            return k, f"the invoice says {_shown(a)}, {source} {_shown(b)}"
    return None


def _prepaid_difference(claimed: Any, computed: Any) -> str:
    """The message of a `prepaid` difference: the first draw (and member) that differs."""
    whole = f"the invoice says {_shown(claimed)}, the bundle's prepaid lots give {_shown(computed)}"
    if not isinstance(claimed, list) or not isinstance(computed, list):
        return whole
    for i in range(max(len(claimed), len(computed))):
        if i >= len(claimed) or i >= len(computed):
            return (f"prepaid[{i}]: the invoice lists {len(claimed)} draws, the bundle's prepaid lots give "
                    f"{len(computed)}; {whole}")
        x, y = claimed[i], computed[i]
        if _json_equal(x, y):
            continue
        for k in sorted(set(x) | set(y)):
            a, b = x.get(k, _ABSENT), y.get(k, _ABSENT)
            if a is _ABSENT or b is _ABSENT or not _json_equal(a, b):
                return f"prepaid[{i}].{k}: the invoice says {_shown(a)}, the bundle's prepaid lots give {_shown(b)}"
    return whole


def check_invoice_subject(inv: InvoiceInfo, header: Header, cp: Checkpoint) -> None:
    """invoice.rs `InvoiceCheck::start`: the bundle is the invoice's (its subject the invoice's
    number; its checkpoint the invoice's size, root and origin), else `checkpoint_mismatch`, item
    `invoice`."""
    doc = inv.raw
    if header.subject_kind != "invoice" or header.subject_id != inv.number:
        raise Failure("checkpoint_mismatch", "invoice",
                      f"the bundle is for {header.subject_kind} {header.subject_id}, not invoice {inv.number}")
    if (doc["checkpoint_size"] != cp.size or doc["checkpoint_root"] != b64(cp.root)
            or doc["log_origin"] != cp.origin):
        raise Failure("checkpoint_mismatch", "invoice",
                      f"the invoice's checkpoint ({doc['log_origin']} size {doc['checkpoint_size']} root "
                      f"{doc['checkpoint_root']}) is not the bundle's ({cp.origin} size {cp.size} root {b64(cp.root)})")


def check_invoice_contract_lines(inv: InvoiceInfo, header: Header, cp: Checkpoint,
                                 contracts: List[Dict[str, Any]],
                                 prepaid: Optional[PrepaidBook] = None,
                                 sla: Optional[SlaEvidence] = None,
                                 usage: Optional[RatedUsage] = None) -> Dict[str, Any]:
    """RATING.md, "Contracts" and "Invoice lines", for an invoice and its verified bundle: the
    bundle is the invoice's (subject, checkpoint size, root and origin: `checkpoint_mismatch`,
    item `invoice`); then the invoice's contract lines and `commitments` are recomputed from
    the `contract_registered` entries of its tenant in the bundle's context (`contracts`), as
    amended by its `contract_amended` entries there (Contracts; RATING.md, "Amendments"), and
    placed right after the invoice's own-period usage lines (kind gpu or energy without
    `adjustment_for`), before the rest (the usage kinds' adjustment lines); with them the SLA
    `availability` rows and `sla_credit` lines, and the included GPU-hours' `allowances` rows and
    `included` and `overage` lines (late ones too), from the tenant's leases, usage records,
    exclusions and other invoices in the bundle (`sla`, SlaEvidence; RATING.md "SLA credits",
    "Included GPU-hours and overage"). Every line's tax =
    round_half_even(net × tax_rate) to the minor unit and gross = net + tax, the totals the exact
    sums. Then what the invoice draws on its tenant's prepaid lots (`prepaid`, the book of the
    bundle's prepayment and earlier invoice_issued entries, invoice_prepaid_book) with the
    recomputed total, the bundle's checkpoint size and the invoice's issued_at, and
    `amount_due` (PrepaidBook.draws, prepaid_members; both absent when nothing is drawn). The
    first difference is `claim_mismatch` (invoice_first_difference). With `usage` (the
    invoice's records re-rated, rate_invoice_usage), the usage lines are the re-rated ones (own
    period first, adjustment lines last) and the `excluded` member the records the tenant's
    exclusions took out; without, the invoice's usage lines are taken as it states them (NOT
    re-rated) and its `excluded` as it is. The tax rates (and names) are the issuer's
    declaration, each at most 1."""
    doc = inv.raw
    check_invoice_subject(inv, header, cp)
    places = minor_units(inv.currency)
    lines = doc["lines"]
    if usage is not None:
        own_lines, adjustment_lines = copy.deepcopy(usage.lines), copy.deepcopy(usage.adjustments)
        drawn = sum((Fraction(l["net"]) for l in own_lines), Fraction(0))
    else:
        own_lines, adjustment_lines, drawn = _stated_usage_lines(inv)
    computed_contract, commitments, availability, allowances = contract_lines(
        contracts, inv.period_from, inv.period_to, inv.currency, drawn, sla)
    expected = own_lines + computed_contract + adjustment_lines
    net_total = tax_total = gross_total = Fraction(0)
    for i, line in enumerate(expected):
        claimed = lines[i] if i < len(lines) else {"tax_rate": "0"}
        line.pop("tax_name", None)
        if "tax_name" in claimed:
            line["tax_name"] = claimed["tax_name"]
        line["tax_rate"] = claimed["tax_rate"]
        rate = Fraction(claimed["tax_rate"])
        if rate > 1:
            raise Failure("claim_mismatch", f"lines[{i}].tax_rate", "a tax rate is a fraction from 0 to 1")
        net = Fraction(line["net"])
        tax = round_half_even(net * rate, places)
        gross = net + tax
        line["tax"], line["gross"] = fixed_str(tax, places), fixed_str(gross, places)
        net_total, tax_total, gross_total = net_total + net, tax_total + tax, gross_total + gross
    computed = dict(doc, lines=expected, net_total=fixed_str(net_total, places),
                    tax_total=fixed_str(tax_total, places), total=fixed_str(gross_total, places))
    computed.pop("commitments", None)
    if commitments:
        computed["commitments"] = commitments
    computed.pop("availability", None)
    if availability:
        computed["availability"] = availability
    computed.pop("allowances", None)
    if allowances:
        computed["allowances"] = allowances
    if usage is not None:
        computed.pop("excluded", None)
        if usage.excluded:
            computed["excluded"] = usage.excluded
    book = prepaid if prepaid is not None else PrepaidBook()
    draws = book.draws(inv.tenant, inv.currency, gross_total, cp.size, inv.issued_at)
    prepaid_list, amount_due = prepaid_members(draws, gross_total, inv.currency)
    computed.pop("prepaid", None)
    computed.pop("amount_due", None)
    if prepaid_list is not None:
        computed["prepaid"] = prepaid_list
        computed["amount_due"] = amount_due
    diff = invoice_first_difference(doc, computed)
    if diff is not None:
        raise Failure("claim_mismatch", diff[0], diff[1])
    return {
        "number": inv.number,
        "tenant": inv.tenant,
        "currency": inv.currency,
        "period_from": doc["period"]["from"],
        "period_to": doc["period"]["to"],
        "contracts": [c["contract"] for c in contracts if c["currency"] == inv.currency],
        "contract_lines": len(computed_contract),
        "sla_credit_lines": sum(1 for l in computed_contract if l["kind"] == "sla_credit"),
        "commitments": len(commitments),
        "availability": len(availability),
        "included_lines": sum(1 for l in computed_contract if l["kind"] == "included"),
        "overage_lines": sum(1 for l in computed_contract if l["kind"] == "overage"),
        "allowances": len(allowances),
        "usage_lines": len(own_lines),
        "other_lines": len(adjustment_lines),
        "usage_lines_rerated": usage is not None,
        "excluded": len(usage.excluded) if usage is not None else None,
        "records_placed": dict(sorted(usage.placed.items())) if usage is not None else None,
        "net_total": doc["net_total"],
        "tax_total": doc["tax_total"],
        "total": doc["total"],
        "prepaid_lots": [lot.reference for lot in book.lots if lot.tenant == inv.tenant
                         and lot.currency == inv.currency],
        "prepaid": prepaid_list or [],
        "amount_due": amount_due,
    }


def _stated_usage_lines(inv: InvoiceInfo) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]], Fraction]:
    """The invoice's usage lines as it states them (check_invoice_contract_lines without
    re-rating): its own-period ones (kind gpu or energy without `adjustment_for`), its adjustment
    ones, and the draw-down, Σ net of the former; a net that is not an amount with the
    currency's minor digits is `claim_mismatch`, item `lines[i].net`."""
    places = minor_units(inv.currency)
    lines = inv.raw["lines"]
    usage = [i for i, l in enumerate(lines) if l["kind"] in USAGE_LINE_KINDS and "adjustment_for" not in l]
    rest = [i for i, l in enumerate(lines) if l["kind"] in USAGE_LINE_KINDS and "adjustment_for" in l]
    money_re = re.compile(r"(0|[1-9][0-9]*)" + (rf"\.[0-9]{{{places}}}" if places else ""))
    for i in usage + rest:
        if money_re.fullmatch(lines[i]["net"]) is None:
            raise Failure("claim_mismatch", f"lines[{i}].net",
                          f"{lines[i]['net']!r} is not an amount with {inv.currency}'s {places} minor digits")
    drawn = sum((Fraction(lines[i]["net"]) for i in usage), Fraction(0))
    return [copy.deepcopy(lines[i]) for i in usage], [copy.deepcopy(lines[i]) for i in rest], drawn


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # exit status 2, as argparse does, with our wording
        self.print_usage(sys.stderr)
        print(f"usage error: {message}", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gpuledger_verify.py",
                description="Independent verifier for gpuledger certificates, bundles, checkpoints and "
                            "consistency proofs (docs/PROTOCOL.md, protocol version 3).")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def common(sp):
        sp.add_argument("--log-key", required=True,
                        help="the log's signed-note verifier key string, or a file holding it")
        sp.add_argument("--json", action="store_true", help="print one JSON object instead of a line")

    c = sub.add_parser("certificate", help="check a certificate with its evidence bundle (section 15)")
    c.add_argument("--certificate", required=True)
    c.add_argument("--bundle", required=True, help="the bundle file (- for stdin)")
    common(c)
    b = sub.add_parser("bundle", help="check a bundle alone (section 15 steps 1, 2, 4)")
    b.add_argument("--bundle", required=True, help="the bundle file (- for stdin)")
    b.add_argument("--invoice", metavar="INVOICE.json",
                   help="the bundle's invoice (gpuledger-invoice/v2): recompute its contract lines, commitments, "
                        "taxes and totals from the bundle's contracts (docs/RATING.md, Contracts), and its prepaid "
                        "draws and amount due from the bundle's prepaid lots (Prepaid balances), and its usage "
                        "lines re-rated from the bundle's records and prices")
    common(b)
    k = sub.add_parser("checkpoint", help="check a signed checkpoint note (section 9)")
    k.add_argument("--checkpoint", required=True)
    common(k)
    s = sub.add_parser("consistency", help="check two checkpoints and the consistency proof between them")
    s.add_argument("--old", required=True)
    s.add_argument("--new", required=True)
    s.add_argument("--proof", required=True)
    common(s)
    import gpuledger_witness  # --witness, --quorum (docs/PROTOCOL.md section 16)
    for sp in (c, b, k, s):
        gpuledger_witness.add_arguments(sp)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        key = load_verifier_key(args.log_key)
        import gpuledger_witness  # the witness quorum (docs/PROTOCOL.md section 16)
        witnesses = gpuledger_witness.policy_from_args(args, UsageError)
        if args.command == "certificate":
            result = verify_certificate(args.certificate, args.bundle, key)
        elif args.command == "bundle":
            result = verify_bundle(args.bundle, key, args.invoice)
        elif args.command == "checkpoint":
            result = verify_checkpoint_file(args.checkpoint, key)
        else:
            result = verify_consistency_files(args.old, args.new, args.proof, key)
        result = gpuledger_witness.apply(witnesses, args, result)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.as_json(), ensure_ascii=False, sort_keys=False))
    else:
        print(result.line())
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
