"""A small, self-contained producer of gpuledger artefacts, protocol version 3, written from
docs/PROTOCOL.md and the version-2 change list (issue #12).

It builds logs (a log policy, tenant registrations, node registrations and updates (the fleet: a
node's region and GPUs, MIG layouts, added GPUs, replaced boards, higher power limits), ledger-signed key registrations with their node/region scopes and revocations, node and market records, region parameters, leases, prices,
invoices, exclusions of records from rating, contracts, prepaid lots), the RFC 6962 tree over them with inclusion and consistency proofs
(by the recursive definitions of RFC 6962 2.1, independently of the verifier's RFC 9162
algorithms), signed checkpoint notes (section 9), certificates (section 13) and evidence
bundles (section 14). Its certificate arithmetic is its own, so that the verifier is tested
against a second computation, not against itself.

It can also build logs a real ledger would refuse (a bad signature inside the tree, a record
signed after its key was revoked, a record outside its key's scope, an unknown tenant, ...), to
check that the verifier names them.
"""

from __future__ import annotations

import base64
import calendar
import datetime
import hashlib
import json
from decimal import Decimal, getcontext
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

getcontext().prec = 200

L = 2**252 + 27742317777372353535851937790883648493


def jcs(value: Any) -> bytes:
    return rfc8785.dumps(value)


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def unix(ts: str) -> int:
    return calendar.timegm(datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").timetuple())


def dec(d: Decimal) -> str:
    """Canonical decimal spelling of an exact value."""
    s = format(d, "f")
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return s or "0"


class Key:
    def __init__(self, seed: bytes):
        assert len(seed) == 32
        self.seed = seed
        self.sk = Ed25519PrivateKey.from_private_bytes(seed)
        self.pub = self.sk.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.key_id = sha256(self.pub)[:8].hex()

    @classmethod
    def from_byte(cls, b: int) -> "Key":
        return cls(bytes([b]) * 32)

    def sign(self, message: bytes) -> bytes:
        return self.sk.sign(message)

    def sign_small_order_r(self, message: bytes) -> bytes:
        """R = the identity point, S = H(R || A || M) * a mod L: passes the cofactorless equation
        ([S]B - [k]A = identity = R) but strict verification must refuse it (section 3.3)."""
        h = hashlib.sha512(self.seed).digest()
        a = bytearray(h[:32])
        a[0] &= 248
        a[31] &= 127
        a[31] |= 64
        a_int = int.from_bytes(bytes(a), "little")
        r = (1).to_bytes(32, "little")  # identity: y = 1, x = 0
        k = int.from_bytes(hashlib.sha512(r + self.pub + message).digest(), "little") % L
        s = (k * a_int) % L
        return r + s.to_bytes(32, "little")

    def sign_torsion_r(self, message: bytes, torsion: bytes) -> bytes:
        """R = rB + T with T a torsion point, S = r + k*a mod L (k = H(R || A || M)): the
        cofactored equation [8]([S]B - [k]A - R) = O holds, the cofactorless one does not (it
        gives R - T), so strict verification refuses it. Built with libsodium's bindings."""
        import nacl.bindings as nb
        h = hashlib.sha512(self.seed).digest()
        a = bytearray(h[:32])
        a[0] &= 248
        a[31] &= 127
        a[31] |= 64
        a_s = nb.crypto_core_ed25519_scalar_reduce(bytes(a) + bytes(32))
        r_s = nb.crypto_core_ed25519_scalar_reduce(hashlib.sha512(h[32:] + message + b"torsion").digest())
        r = nb.crypto_core_ed25519_add(nb.crypto_scalarmult_ed25519_base_noclamp(r_s), torsion)
        k = nb.crypto_core_ed25519_scalar_reduce(hashlib.sha512(r + self.pub + message).digest())
        s = nb.crypto_core_ed25519_scalar_add(r_s, nb.crypto_core_ed25519_scalar_mul(k, a_s))
        return r + s

    def note_key_id(self, name: str) -> bytes:
        return sha256(name.encode() + b"\n\x01" + self.pub)[:4]

    def verifier_key(self, name: str) -> str:
        tail = b64(bytes([1]) + self.pub)
        return f"{name}+{self.note_key_id(name).hex()}+{tail}"


# --- RFC 6962 section 2.1, recursive definitions ---------------------------------------------


def _k(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def mth_hashes(leaf_hashes: Sequence[bytes]) -> bytes:
    n = len(leaf_hashes)
    if n == 0:
        return sha256(b"")
    if n == 1:
        return leaf_hashes[0]
    k = _k(n)
    return sha256(b"\x01" + mth_hashes(leaf_hashes[:k]) + mth_hashes(leaf_hashes[k:]))


def mth_data(items: Sequence[bytes]) -> bytes:
    return mth_hashes([sha256(b"\x00" + d) for d in items])


def path(m: int, leaf_hashes: Sequence[bytes]) -> List[bytes]:
    n = len(leaf_hashes)
    if n == 1:
        return []
    k = _k(n)
    if m < k:
        return path(m, leaf_hashes[:k]) + [mth_hashes(leaf_hashes[k:])]
    return path(m - k, leaf_hashes[k:]) + [mth_hashes(leaf_hashes[:k])]


def consistency(m: int, leaf_hashes: Sequence[bytes]) -> List[bytes]:
    def sub(m: int, d: Sequence[bytes], b: bool) -> List[bytes]:
        n = len(d)
        if m == n:
            return [] if b else [mth_hashes(d)]
        k = _k(n)
        if m <= k:
            return sub(m, d[:k], b) + [mth_hashes(d[k:])]
        return sub(m - k, d[k:], False) + [mth_hashes(d[:k])]

    return sub(m, leaf_hashes, True)


# --- logs --------------------------------------------------------------------------------------


class Entry:
    def __init__(self, index: int, leaf: bytes, envelope: Dict[str, Any], received_at: str):
        self.index = index
        self.leaf = leaf
        self.leaf_hash = sha256(b"\x00" + leaf)
        self.envelope = envelope
        self.received_at = received_at

    @property
    def kind(self) -> str:
        return self.envelope["kind"]

    @property
    def body(self) -> Dict[str, Any]:
        return self.envelope["body"]


# The GPUs a node registered on the fly (Log.register of a node key naming an unregistered
# node) has: 8 of each model the tests' records name, each drawing up to 5000 W, so that the
# fleet rules (section 6.7) pass for every record of the tests that are not about them.
DEFAULT_NODE_MODELS = ("H100-SXM5-80GB", "A100-80GB", "m")
DEFAULT_NODE_GPUS_PER_MODEL = 8
DEFAULT_MAX_WATTS_PER_GPU = "5000"


# A lease's term starts here unless a test says otherwise: before every record of the tests.
DEFAULT_LEASE_FROM = "2026-10-01T00:00:00Z"


def lease_gpus(node: str, gpus: Iterable[int], share: Optional[str] = None) -> Dict[str, Any]:
    """A lease item (section 5.8): whole GPUs of `node` by index, or `share` of each."""
    item: Dict[str, Any] = {"node": node, "gpus": list(gpus)}
    if share is not None:
        item["share"] = share
    return item


def lease_count(node: str, model: str, count: str) -> Dict[str, Any]:
    """A lease item (section 5.8): up to `count` of `node`'s GPUs of `model`, whichever they are."""
    return {"node": node, "gpu_model": model, "count": count}


def node_gpus(models: Dict[str, int], prefix: str = "GPU") -> List[Dict[str, Any]]:
    """`count` GPUs of each model, indexes 0, 1, ... in the order given, UUIDs distinct."""
    gpus: List[Dict[str, Any]] = []
    for model, count in models.items():
        for _ in range(count):
            i = len(gpus)
            gpus.append({"index": i, "uuid": f"{prefix}-{i:04d}-{sha256(model.encode()).hex()[:8]}", "model": model})
    return gpus


def mig(slices: int, instances: Dict[str, int]) -> Dict[str, Any]:
    """A GPU's MIG layout (record.rs `MigLayout`): `slices` compute slices, `instances` profile ->
    count (e.g. {"1g.10gb": 7}), listed by increasing profile name as the ledger requires."""
    ordered = sorted(instances.items(), key=lambda kv: kv[0].encode())
    return {"slices": slices, "instances": [{"profile": p, "count": c} for p, c in ordered]}


def gpu(index: int, uuid: str, model: str, layout: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """One GPU of a node_registered or node_updated entry: index, UUID, model, and a MIG layout
    (`mig(...)`) when the GPU is partitioned."""
    g: Dict[str, Any] = {"index": index, "uuid": uuid, "model": model}
    if layout is not None:
        g["mig"] = layout
    return g


def fee(name: str, amount: str, timing: str = "advance", category: str = "compute",
        lease: Optional[str] = None, included: Optional[List[Any]] = None) -> Dict[str, Any]:
    """One fee of a contract_registered entry (section 5.19): its name (text for people), amount
    (per whole billing period; a `once` fee: the whole fee), timing and category; the lease it
    rents, if any (an SLA is measured on it); and the GPU-hours it includes, if any
    (`included(...)` entries, written as given)."""
    out = {"name": name, "amount": amount, "timing": timing, "category": category}
    if lease is not None:
        out["lease"] = lease
    if included is not None:
        out["included"] = included
    return out


def included(gpu_model: str, gpu_hours: str, overage_rate: str) -> Dict[str, Any]:
    """One entry of a fee's `included` (section 5.19): `gpu_hours` GPU-hours of `gpu_model` per
    whole billing period, every GPU-hour above them at `overage_rate`."""
    return {"gpu_model": gpu_model, "gpu_hours": gpu_hours, "overage_rate": overage_rate}


class Log:
    VERSION = 2

    def __init__(self, log_key: Key, origin: str):
        self.log_key = log_key
        self.origin = origin
        self.entries: List[Entry] = []
        self.seqs: Dict[str, int] = {}
        self.key_signer: Dict[str, str] = {}  # key id -> signer (for bundles)
        self.nodes: Dict[str, int] = {}  # node -> index of its (first) node_registered entry

    @classmethod
    def from_leaves(cls, log_key: Key, origin: str, leaves: Iterable[bytes]) -> "Log":
        """A log read back from its leaf bytes (e.g. tests/vectors/log.jsonl)."""
        log = cls(log_key, origin)
        for i, leaf in enumerate(leaves):
            obj = json.loads(leaf)
            log.entries.append(Entry(i, leaf, obj["envelope"], obj["received_at"]))
            if obj["envelope"]["kind"] == "node_registered":
                log.nodes.setdefault(obj["envelope"]["body"]["node"], i)
        return log

    def message(self, kind: str, unsigned: Dict[str, Any], origin: Optional[str] = None) -> bytes:
        """Version 3: "gpuledger/v3/" || kind || LF || origin || LF || JCS(envelope without sig)."""
        origin = self.origin if origin is None else origin
        return b"gpuledger/v3/" + kind.encode() + b"\n" + origin.encode() + b"\n" + jcs(unsigned)

    # envelopes and leaves
    def append(self, kind: str, signer: str, key: Key, body: Dict[str, Any], received_at: str,
               seq: Optional[int] = None, sig_mode: str = "good", sign_origin: Optional[str] = None,
               version: int = 3) -> int:
        """sig_mode: good, flipped (one bit of R), small_order_r (R = identity, S = k*a), torsion_r
        (R = rB + T8, S = r + k*a: passes a cofactored verifier, not a strict one).
        sign_origin: sign the message under another log's origin (a replay from another log)."""
        seq = seq if seq is not None else self.seqs.get(signer, 0) + 1
        self.seqs[signer] = max(seq, self.seqs.get(signer, 0))
        unsigned = {"v": version, "kind": kind, "signer": signer, "key_id": key.key_id, "seq": seq, "body": body}
        message = self.message(kind, unsigned, sign_origin)
        if sig_mode == "small_order_r":
            sig = key.sign_small_order_r(message)
        elif sig_mode == "torsion_r":
            order8 = bytes.fromhex("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05")
            sig = key.sign_torsion_r(message, order8)
        else:
            sig = key.sign(message)
        if sig_mode == "flipped":
            sig = bytes([sig[0] ^ 0x01]) + sig[1:]
        envelope = dict(unsigned, sig=b64(sig))
        return self.append_envelope(envelope, received_at, version=version)

    def received_after(self, end: str) -> str:
        """A record's default received_at: 2 s after it ends, but never before the last entry's
        (section 7: the log's receive times never decrease)."""
        t = unix(end) + 2
        if self.entries:
            t = max(t, unix(self.entries[-1].received_at))
        return _ts(t)

    def append_envelope(self, envelope: Dict[str, Any], received_at: str, version: int = 3) -> int:
        index = len(self.entries)
        prev = self.entries[-1].leaf_hash if self.entries else bytes(32)
        leaf = jcs({"v": version, "index": index, "received_at": received_at, "prev": b64(prev),
                    "envelope": envelope})
        self.entries.append(Entry(index, leaf, envelope, received_at))
        return index

    def append_leaf_bytes(self, leaf: bytes, envelope: Dict[str, Any], received_at: str) -> int:
        """An entry whose leaf bytes are given as they are (e.g. not strict JSON)."""
        index = len(self.entries)
        self.entries.append(Entry(index, leaf, envelope, received_at))
        return index

    def ledger(self, kind: str, body: Dict[str, Any], received_at: str, **kw) -> int:
        return self.append(kind, "ledger", self.log_key, body, received_at, **kw)

    # ledger kinds
    def policy(self, received_at: str, max_record_age_seconds: int = 3024000,
               max_future_skew_seconds: int = 300) -> int:
        return self.ledger("log_policy", {"max_record_age_seconds": max_record_age_seconds,
                                          "max_future_skew_seconds": max_future_skew_seconds}, received_at)

    def tenant(self, tenant: str, received_at: str) -> int:
        return self.ledger("tenant_registered", {"tenant": tenant}, received_at)

    def lease(self, lease: str, tenant: str, cls: str, received_at: str, nodes: List[Dict[str, Any]],
              start: str = DEFAULT_LEASE_FROM, end: Optional[str] = None) -> int:
        """A lease_registered entry (section 5.8): `nodes` its items (lease_gpus, lease_count), its
        term [start, end) (end None: open-ended)."""
        body: Dict[str, Any] = {"lease": lease, "tenant": tenant, "class": cls, "from": start, "nodes": nodes}
        if end is not None:
            body["to"] = end
        return self.ledger("lease_registered", body, received_at)

    def node(self, node: str, region: str, received_at: str, models: Optional[Dict[str, int]] = None,
             max_watts_per_gpu: str = DEFAULT_MAX_WATTS_PER_GPU, hub: Optional[str] = None,
             gpus: Optional[List[Dict[str, Any]]] = None) -> int:
        """A node_registered entry: `gpus` as given, else `models` (model -> count; default 8 of
        each of DEFAULT_NODE_MODELS) numbered from index 0."""
        if gpus is None:
            models = models if models is not None else {m: DEFAULT_NODE_GPUS_PER_MODEL for m in DEFAULT_NODE_MODELS}
            gpus = node_gpus(models, prefix=f"GPU-{node}")
        body: Dict[str, Any] = {"node": node, "region": region, "gpus": gpus, "max_watts_per_gpu": max_watts_per_gpu}
        if hub is not None:
            body["hub"] = hub
        index = self.ledger("node_registered", body, received_at)
        self.nodes.setdefault(node, index)
        return index

    def node_update(self, node: str, received_at: str, gpus: Optional[List[Dict[str, Any]]] = None,
                    max_watts_per_gpu: Optional[str] = None, **body_extra: Any) -> int:
        """A node_updated entry (ledger-written): GPUs added under new indexes or a replaced board
        (an index the node has, a new UUID), and/or a higher power limit. Written as given (also
        updates a ledger refuses)."""
        body: Dict[str, Any] = {"node": node}
        if gpus is not None:
            body["gpus"] = gpus
        if max_watts_per_gpu is not None:
            body["max_watts_per_gpu"] = max_watts_per_gpu
        body.update(body_extra)
        return self.ledger("node_updated", body, received_at)

    def register(self, signer: str, key: Key, role: str, received_at: str, regions: Sequence[str] = ("cn-nmg-1",),
                 nodes: Optional[Sequence[str]] = None, register_nodes: bool = True) -> int:
        """A version-2 registration; a node key's scope defaults to the node named like its signer.
        A node key names registered nodes only (section 6.7, fleet): with `register_nodes`, each
        of its nodes the log has not registered yet is registered first (Log.node, in the key's
        first region, with the default GPUs). Returns the index of the key's registration."""
        self.key_signer[key.key_id] = signer
        if role == "node":
            nodes = nodes if nodes is not None else [signer]
            if register_nodes:
                for node in sorted(set(nodes), key=str.encode):
                    if node not in self.nodes:
                        self.node(node, list(regions)[0], received_at)
        return self.register_public_key(signer, key.pub, role, received_at, regions=regions, nodes=nodes)

    def register_public_key(self, signer: str, pub: bytes, role: str, received_at: str,
                            regions: Optional[Sequence[str]] = ("cn-nmg-1",), nodes: Optional[Sequence[str]] = None,
                            key_id: Optional[str] = None, sort: bool = True) -> int:
        """Any 32 bytes as a public key (also invalid ones, which a ledger refuses)."""
        body: Dict[str, Any] = {"signer": signer, "role": role, "key_id": key_id or sha256(pub)[:8].hex(),
                                "public_key": b64(pub)}
        if regions is not None:
            body["regions"] = sorted(set(regions), key=str.encode) if sort else list(regions)
        if nodes is not None:
            body["nodes"] = sorted(set(nodes), key=str.encode) if sort else list(nodes)
        return self.ledger("signer_key_registered", body, received_at)

    def revoke(self, signer: str, key: Key, received_at: str, reason: Optional[str] = "rotated") -> int:
        body = {"signer": signer, "key_id": key.key_id}
        if reason is not None:
            body["reason"] = reason
        return self.ledger("signer_key_revoked", body, received_at)

    def region_params(self, region: str, pue: str, carbon: str, effective_from: str, received_at: str,
                      price: str = "0.5", currency: str = "CNY") -> int:
        return self.ledger("region_params", {"region": region, "currency": currency,
                                             "electricity_price_per_kwh": price, "pue": pue,
                                             "carbon_g_per_kwh": carbon, "effective_from": effective_from},
                           received_at)

    def rate_card(self, region: str, model: str, lease_class: str, price: str, effective_from: str,
                  received_at: str, currency: str = "CNY") -> int:
        return self.ledger("rate_card", {"region": region, "gpu_model": model, "lease_class": lease_class,
                                         "currency": currency, "price_per_gpu_hour": price,
                                         "effective_from": effective_from}, received_at)

    def volume_tiers(self, plan: str, region: str, model: str, lease_class: str, tiers: List[Dict[str, str]],
                     effective_from: str, received_at: str, currency: str = "CNY") -> int:
        return self.ledger("volume_tiers", {"plan": plan, "region": region, "gpu_model": model,
                                            "lease_class": lease_class, "currency": currency, "tiers": tiers,
                                            "effective_from": effective_from}, received_at)

    def tenant_plan(self, tenant: str, plan: str, effective_from: str, received_at: str) -> int:
        return self.ledger("tenant_plan", {"tenant": tenant, "plan": plan, "effective_from": effective_from},
                           received_at)

    def invoice(self, number: str, tenant: str, period_from: str, period_to: str, checkpoint_size: int,
                received_at: str, total: str = "148.00", currency: str = "CNY") -> int:
        return self.ledger("invoice_issued", {"number": number, "tenant": tenant, "period_from": period_from,
                                              "period_to": period_to, "currency": currency, "total": total,
                                              "checkpoint_size": checkpoint_size, "invoice_sha256": "cd" * 32},
                           received_at)

    def exclude(self, tenant: str, entry: Any, reason: Any, received_at: str) -> int:
        """A record_excluded entry (section 5.17): the ledger excludes `tenant`'s record at index
        `entry` from rating, for `reason`. Any values are written as given (also those a ledger
        refuses)."""
        return self.ledger("record_excluded", {"tenant": tenant, "entry": entry, "reason": reason}, received_at)

    def contract(self, tenant: str, contract: str, term_from: str, term_to: str, received_at: str,
                 fees: Optional[List[Any]] = None, commitment: Optional[str] = None, currency: str = "CNY",
                 region: str = "cn-east", billing_period: str = "month", billing_anchor: str = "calendar",
                 **body_extra: Any) -> int:
        """A contract_registered entry (section 5.19, ledger-written): `tenant`'s contract for the
        term [term_from, term_to), its fees (`fee(...)`; None: absent) and its minimum spend per
        billing period (`commitment`; None: absent). Written as given (also contracts a ledger
        refuses); `body_extra` adds or replaces members."""
        body: Dict[str, Any] = {"tenant": tenant, "contract": contract, "currency": currency, "region": region,
                                "term_from": term_from, "term_to": term_to, "billing_period": billing_period,
                                "billing_anchor": billing_anchor}
        if fees is not None:
            body["fees"] = fees
        if commitment is not None:
            body["commitment"] = commitment
        body.update(body_extra)
        return self.ledger("contract_registered", body, received_at)

    def amend(self, tenant: str, contract: str, term_to: str, received_at: str,
              reason: Any = "Amended by agreement", **body_extra: Any) -> int:
        """A contract_amended entry (section 5.21, ledger-written): `tenant`'s contract `contract`
        ends at `term_to` from this entry on, for `reason`. Written as given (also amendments a
        ledger refuses); `body_extra` adds or replaces members."""
        body: Dict[str, Any] = {"tenant": tenant, "contract": contract, "term_to": term_to, "reason": reason}
        body.update(body_extra)
        return self.ledger("contract_amended", body, received_at)

    def prepayment(self, tenant: str, reference: str, amount: str, received_at: str, source: str = "purchase",
                   currency: str = "CNY", expires_at: Optional[str] = None, **body_extra: Any) -> int:
        """A prepayment entry (section 5.20, ledger-written): `tenant`'s lot named `reference`, of
        `amount` in `currency`, a `purchase` (a top-up) or a `grant`, expiring at `expires_at`
        (None: absent, never). Written as given (also lots a ledger refuses); `body_extra` adds or
        replaces members."""
        body: Dict[str, Any] = {"tenant": tenant, "reference": reference, "source": source, "currency": currency,
                                "amount": amount}
        if expires_at is not None:
            body["expires_at"] = expires_at
        body.update(body_extra)
        return self.ledger("prepayment", body, received_at)

    # signed records
    def spot_price(self, signer: str, key: Key, region: str, model: str, price: str, effective_from: str,
                   received_at: str, currency: str = "CNY", **kw) -> int:
        return self.append("spot_price", signer, key, {"region": region, "gpu_model": model,
                                                       "price_per_gpu_hour": price, "currency": currency,
                                                       "effective_from": effective_from}, received_at, **kw)

    def gpu_usage(self, signer: str, key: Key, tenant: str, region: str, model: str, count: str, start: str,
                  seconds: int, received_at: Optional[str] = None, lease: Optional[str] = None,
                  node: Optional[str] = None, **kw) -> int:
        end = _ts(unix(start) + seconds)
        body = {"tenant": tenant, "region": region, "node": node or signer, "gpu_model": model,
                "gpu_count": count, "start": start, "end": end,
                "gpu_seconds": dec(Decimal(count) * seconds)}
        if lease is not None:
            body["lease"] = lease
        return self.append("gpu_usage", signer, key, body, received_at or self.received_after(end), **kw)

    def energy(self, signer: str, key: Key, tenant: Optional[str], region: str, kwh: str, start: str,
               seconds: int, received_at: Optional[str] = None, node: Optional[str] = None, **kw) -> int:
        end = _ts(unix(start) + seconds)
        body = {"region": region, "node": node or signer, "start": start, "end": end, "kwh": kwh}
        if tenant is not None:
            body["tenant"] = tenant
        return self.append("energy", signer, key, body, received_at or self.received_after(end), **kw)

    # tree
    def leaf_hashes(self, size: Optional[int] = None) -> List[bytes]:
        size = len(self.entries) if size is None else size
        return [e.leaf_hash for e in self.entries[:size]]

    def root(self, size: Optional[int] = None) -> bytes:
        return mth_hashes(self.leaf_hashes(size))

    def inclusion(self, index: int, size: int) -> List[bytes]:
        return path(index, self.leaf_hashes(size))

    def consistency(self, m: int, n: int) -> List[bytes]:
        return consistency(m, self.leaf_hashes(n))

    def checkpoint(self, size: Optional[int] = None, key: Optional[Key] = None, origin: Optional[str] = None,
                   name: Optional[str] = None) -> str:
        size = len(self.entries) if size is None else size
        key = key or self.log_key
        origin = origin or self.origin
        name = name or origin
        body = f"{origin}\n{size}\n{b64(self.root(size))}\n"
        sig = key.sign(body.encode())
        return body + "\n" + f"\u2014 {name} {b64(key.note_key_id(name) + sig)}\n"

    def verifier_key(self) -> str:
        return self.log_key.verifier_key(self.origin)


def _ts(t: int) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- certificates and bundles -----------------------------------------------------------------


def covered(log: Log, size: int, tenant: str, period_from: str, period_to: str,
            scope: Dict[str, Any]) -> List[int]:
    out = []
    for e in log.entries[:size]:
        if e.kind not in ("gpu_usage", "energy"):
            continue
        b = e.body
        if b.get("tenant") != tenant:
            continue
        if not unix(period_from) <= unix(b["start"]) < unix(period_to):
            continue
        if "lease" in scope and (e.kind != "gpu_usage" or b.get("lease") != scope["lease"]):
            continue
        if "nodes" in scope and b["node"] not in scope["nodes"]:
            continue
        if "region" in scope and b["region"] != scope["region"]:
            continue
        out.append(e.index)
    return out


def compute_claims(log: Log, size: int, records: Iterable[int]) -> Tuple[list, list, dict]:
    gpu: Dict[Tuple[str, str], List[Any]] = {}
    energy: Dict[Tuple[str, Optional[str], Optional[str]], List[Any]] = {}
    params = [e for e in log.entries[:size] if e.kind == "region_params"]
    for i in records:
        e = log.entries[i]
        b = e.body
        if e.kind == "gpu_usage":
            g = gpu.setdefault((b["region"], b["gpu_model"]), [Decimal(0), 0])
            g[0] += Decimal(b["gpu_seconds"])
            g[1] += 1
        else:
            cands = [p for p in params if p.body["region"] == b["region"]
                     and unix(p.body["effective_from"]) <= unix(b["start"])]
            best = max(cands, key=lambda p: (unix(p.body["effective_from"]), p.index)) if cands else None
            k = (b["region"], best.body["pue"], best.body["carbon_g_per_kwh"]) if best else (b["region"], None, None)
            g = energy.setdefault(k, [Decimal(0), 0])
            g[0] += Decimal(b["kwh"])
            g[1] += 1
    gpu_lines = [{"region": r, "gpu_model": m, "gpu_seconds": dec(v[0]), "records": v[1]}
                 for (r, m), v in sorted(gpu.items())]
    energy_lines = []
    for (r, pue, carbon), v in sorted(energy.items(), key=lambda kv: (
            kv[0][0], kv[0][1] is not None, Decimal(kv[0][1] or 0), Decimal(kv[0][2] or 0))):
        line = {"region": r, "kwh": dec(v[0]), "records": v[1]}
        if pue is not None:
            with_pue = v[0] * Decimal(pue)
            line.update(pue=pue, carbon_g_per_kwh=carbon, kwh_with_pue=dec(with_pue),
                        carbon_kg=dec(with_pue * Decimal(carbon) / 1000))
        energy_lines.append(line)
    totals = {
        "records": sum(l["records"] for l in gpu_lines + energy_lines),
        "gpu_seconds": dec(sum((Decimal(l["gpu_seconds"]) for l in gpu_lines), Decimal(0))),
        "kwh": dec(sum((Decimal(l["kwh"]) for l in energy_lines), Decimal(0))),
        "kwh_with_pue": dec(sum((Decimal(l["kwh_with_pue"]) for l in energy_lines if "pue" in l), Decimal(0))),
        "carbon_kg": dec(sum((Decimal(l["carbon_kg"]) for l in energy_lines if "pue" in l), Decimal(0))),
        "kwh_without_region_params": dec(sum((Decimal(l["kwh"]) for l in energy_lines if "pue" not in l),
                                             Decimal(0))),
    }
    return gpu_lines, energy_lines, totals


def commitment(log: Log, records: Iterable[int]) -> str:
    return b64(mth_data([i.to_bytes(8, "big") + log.entries[i].leaf_hash for i in records]))


def context_for(log: Log, size: int, records: Iterable[int], tenant: Optional[str] = None,
                invoice: bool = False) -> List[int]:
    """Version 2, section 8: every log_policy, node_registered and node_updated below the size (a
    node's updates too, also those logged after a record: bundle.rs); the registrations (and revocations
    below the size) of every key that signed a record or a context entry; the subject tenant's
    tenant_registered entry and every lease_registered entry of the subject tenant; every
    region_params below the size; and, for an invoice, every rate_card and spot_price below the
    size, the tenant's tenant_plan entries, the volume_tiers of the plans the tenant was ever on,
    and the tenant's invoice_issued, record_excluded, contract_registered, contract_amended and
    prepayment entries below it (section 14). Nothing of another tenant."""
    records = list(records)
    if tenant is None and records:
        tenant = log.entries[records[0]].body.get("tenant")
    ctx = set()
    plans = {e.body["plan"] for e in log.entries[:size] if e.kind == "tenant_plan" and e.body["tenant"] == tenant}
    for e in log.entries[:size]:
        b = e.body
        if e.kind in ("log_policy", "region_params", "node_registered", "node_updated"):
            ctx.add(e.index)
        elif e.kind in ("tenant_registered", "lease_registered") and b["tenant"] == tenant:
            ctx.add(e.index)
        elif invoice and (e.kind in ("rate_card", "spot_price")
                          or (e.kind in ("tenant_plan", "invoice_issued", "record_excluded", "contract_registered",
                                         "contract_amended", "prepayment")
                              and b["tenant"] == tenant)
                          or (e.kind == "volume_tiers" and b["plan"] in plans)):
            ctx.add(e.index)
    signing_keys = {log.entries[i].envelope["key_id"] for i in records + sorted(ctx)}
    for e in log.entries[:size]:
        if e.kind in ("signer_key_registered", "signer_key_revoked") and e.body["key_id"] in signing_keys:
            ctx.add(e.index)
    return sorted(ctx)


def sign_certificate(cert: Dict[str, Any], key: Key) -> Dict[str, Any]:
    unsigned = {k: v for k, v in cert.items() if k != "sig"}
    sig = key.sign(b"gpuledger-certificate/v1\n" + jcs(unsigned))
    return dict(unsigned, sig=b64(sig))


def make_certificate(log: Log, size: int, tenant: str, period_from: str, period_to: str,
                     scope: Optional[Dict[str, Any]] = None, cert_id: str = "CERT-000001",
                     issued_at: str = "2026-12-01T00:10:00Z", records: Optional[List[int]] = None,
                     checkpoint: Optional[str] = None, key: Optional[Key] = None) -> Dict[str, Any]:
    scope = scope or {}
    records = covered(log, size, tenant, period_from, period_to, scope) if records is None else records
    gpu, energy, totals = compute_claims(log, size, records)
    cert = {
        "v": 1, "id": cert_id, "tenant": tenant, "period_from": period_from, "period_to": period_to,
        "scope": scope, "issued_at": issued_at, "log_origin": log.origin,
        "checkpoint": checkpoint if checkpoint is not None else log.checkpoint(size),
        "entries": {"count": len(records), "commitment": commitment(log, records)},
        "gpu": gpu, "energy": energy, "totals": totals,
    }
    return sign_certificate(cert, key or log.log_key)


def entry_line(log: Log, index: int, size: int) -> Dict[str, Any]:
    return {"type": "entry", "index": index, "leaf": b64(log.entries[index].leaf),
            "proof": [b64(h) for h in log.inclusion(index, size)]}


def make_bundle(log: Log, size: int, context: List[int], records: List[int], subject: Dict[str, str],
                checkpoint: Optional[str] = None) -> List[Dict[str, Any]]:
    lines = [{"type": "header", "format": "gpuledger-bundle/v2", "log_origin": log.origin,
              "checkpoint": checkpoint if checkpoint is not None else log.checkpoint(size), "subject": subject}]
    lines += [entry_line(log, i, size) for i in context]
    lines += [entry_line(log, i, size) for i in records]
    lines.append({"type": "end", "entries": len(context) + len(records)})
    return lines


def bundle_bytes(lines: List[Dict[str, Any]], fix_count: bool = False) -> bytes:
    if fix_count:
        n = sum(1 for l in lines if l.get("type") == "entry")
        lines = [dict(l, entries=n) if l.get("type") == "end" else l for l in lines]
    return b"".join(json.dumps(l, ensure_ascii=False, separators=(",", ":")).encode() + b"\n" for l in lines)


# --- the standard scenario ----------------------------------------------------------------------

ORIGIN = "gpuledger.test/python-verifier"
TENANT = "tenant-acme"
PERIOD = ("2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z")


class Scenario:
    """A version-2 log of 24 entries (plus optional bad ones), a certificate for tenant-acme in
    November 2026 at the log's size, and its bundle.

    Entries: 0 log_policy; 1, 2 tenant_registered (tenant-acme, tenant-other); 3, 4
    node_registered (node-a: cn-nmg-1, 8 H100-SXM5-80GB of 2500 W; node-b: eu-west-1, 4
    A100-80GB of 400 W); 5, 6, 7 key registrations (node-a: nodes [node-a], regions [cn-nmg-1];
    node-b: [node-b], [eu-west-1]; market-cn: regions [cn-nmg-1]); 8 region_params; 9
    lease_registered (lease-0042 of tenant-acme: node-a's 8 GPUs and node-b's 4, from
    2026-10-01, open-ended); 10 gpu_usage; 11 energy; 12 gpu_usage of tenant-other (under no
    lease: node-a's GPUs are all lease-0042's, so it is not a record a ledger would take since
    issue #27; no bundle of tenant-acme holds it, and a certificate's bundle that does fails it
    as `wrong_tenant`); 13 spot_price; 14 gpu_usage (node-b); 15 region_params; 16, 17 energy;
    18 node-b's revocation; 19 gpu_usage before the period; 20 gpu_usage (the bad variants change
    it); 21 energy without a tenant; then the variant's extra entries, then certificate_issued.
    Every gpu_usage of tenant-acme is under lease-0042."""

    def __init__(self, variant: str = "good", scope: Optional[Dict[str, Any]] = None):
        self.log_key = Key.from_byte(0x21)
        self.node_a = Key.from_byte(0x22)
        self.node_b = Key.from_byte(0x23)
        self.market = Key.from_byte(0x24)
        self.stranger = Key.from_byte(0x25)
        log = self.log = Log(self.log_key, ORIGIN)
        na, nb, mk = self.node_a, self.node_b, self.market
        log.policy("2026-10-01T00:00:00Z")                                                             # 0
        log.tenant(TENANT, "2026-10-01T00:00:00Z")                                                     # 1
        log.tenant("tenant-other", "2026-10-01T00:00:00Z")                                             # 2
        log.node("node-a", "cn-nmg-1", "2026-10-01T00:00:00Z", {"H100-SXM5-80GB": 8}, "2500")           # 3
        log.node("node-b", "eu-west-1", "2026-10-01T00:00:00Z", {"A100-80GB": 4}, "400", hub="eu-hub-1")  # 4
        log.register("node-a", na, "node", "2026-10-01T00:00:00Z", regions=["cn-nmg-1"])               # 5
        log.register("node-b", nb, "node", "2026-10-01T00:00:00Z", regions=["eu-west-1"])              # 6
        log.register("market-cn", mk, "market", "2026-10-01T00:00:00Z", regions=["cn-nmg-1"])          # 7
        log.region_params("cn-nmg-1", "1.08", "550", "2026-10-01T00:00:00Z", "2026-10-01T00:00:01Z")   # 8
        log.lease("lease-0042", TENANT, "reserved", "2026-10-01T00:00:02Z",
                  [lease_gpus("node-a", range(8)), lease_gpus("node-b", range(4))])                     # 9
        log.gpu_usage("node-a", na, TENANT, "cn-nmg-1", "H100-SXM5-80GB", "8", "2026-11-02T10:00:00Z", 300,
                      lease="lease-0042")                                                               # 10
        log.energy("node-a", na, TENANT, "cn-nmg-1", "1.5", "2026-11-02T10:00:00Z", 300)                # 11
        log.gpu_usage("node-a", na, "tenant-other", "cn-nmg-1", "H100-SXM5-80GB", "2", "2026-11-02T10:00:00Z",
                      600)                                                                              # 12
        log.spot_price("market-cn", mk, "cn-nmg-1", "H100-SXM5-80GB", "14.75", "2026-11-03T00:00:00Z",
                       "2026-11-02T12:00:00Z")                                                          # 13
        log.gpu_usage("node-b", nb, TENANT, "eu-west-1", "A100-80GB", "0.25", "2026-11-03T08:00:00Z", 30,
                      lease="lease-0042")                                                               # 14
        log.region_params("cn-nmg-1", "1.2", "500", "2026-11-15T00:00:00Z", "2026-11-10T00:00:00Z")    # 15
        log.energy("node-a", na, TENANT, "cn-nmg-1", "2.25", "2026-11-20T00:00:00Z", 3600)              # 16
        log.energy("node-b", nb, TENANT, "eu-west-1", "0.75", "2026-11-04T00:00:00Z", 3600)             # 17
        log.revoke("node-b", nb, "2026-11-21T00:00:00Z")                                                # 18
        log.gpu_usage("node-a", na, TENANT, "cn-nmg-1", "H100-SXM5-80GB", "1", "2026-10-20T00:00:00Z", 60,
                      lease="lease-0042")                                                               # 19
        kw: Dict[str, Any] = {}
        if variant == "bad_signature":
            kw["sig_mode"] = "flipped"
        elif variant == "small_order_r":
            kw["sig_mode"] = "small_order_r"
        elif variant == "torsion_r":
            kw["sig_mode"] = "torsion_r"
        elif variant == "other_origin":
            kw["sign_origin"] = "gpuledger.test/staging"
        self.bad_index: Optional[int] = 20 if kw else None
        u20 = dict(lease="lease-0042", **kw)
        if variant == "node_not_allowed":
            u20["node"] = "node-z"
        elif variant == "region_not_allowed":
            u20["region"] = "eu-west-1"
        elif variant == "unknown_lease":
            u20["lease"] = "lease-9999"
        elif variant == "too_old":
            u20["received_at"] = "2026-12-31T01:00:03Z"  # starts 35 days and 1 h 3 s before it arrived
        elif variant == "in_future":
            u20["received_at"] = "2026-11-26T00:54:59Z"  # ends 301 s after it arrived
        if variant in ("node_not_allowed", "region_not_allowed", "unknown_lease", "too_old", "in_future"):
            self.bad_index = 20
        region20 = u20.pop("region", "cn-nmg-1")
        log.gpu_usage("node-a", na, TENANT, region20, "H100-SXM5-80GB", "1", "2026-11-26T00:00:00Z", 3600,
                      **u20)                                                                            # 20
        log.energy("node-a", na, None, "cn-nmg-1", "0.5", "2026-11-26T00:00:00Z", 3600)                # 21
        if variant == "revoked":
            # A record signed by node-b after its key was revoked (a ledger would refuse it).
            self.bad_index = log.gpu_usage("node-b", nb, TENANT, "eu-west-1", "A100-80GB", "1",
                                           "2026-11-27T00:00:00Z", 60, lease="lease-0042")              # 22
        elif variant == "wrong_role":
            # The market key signs gpu_usage (role market may not).
            self.bad_index = log.gpu_usage("market-cn", mk, TENANT, "cn-nmg-1", "H100-SXM5-80GB", "1",
                                           "2026-11-27T00:00:00Z", 60, node="node-a", lease="lease-0042")  # 22
        elif variant == "unregistered":
            # A key no registration names.
            self.bad_index = log.gpu_usage("node-c", self.stranger, TENANT, "cn-nmg-1", "H100-SXM5-80GB", "1",
                                           "2026-11-27T00:00:00Z", 60, lease="lease-0042")              # 22
        elif variant == "invalid_envelope":
            # gpu_seconds is not gpu_count x duration (a ledger would refuse it).
            body = {"tenant": TENANT, "region": "cn-nmg-1", "node": "node-a", "gpu_model": "H100-SXM5-80GB",
                    "gpu_count": "2", "start": "2026-11-27T00:00:00Z", "end": "2026-11-27T00:01:00Z",
                    "gpu_seconds": "121"}
            self.bad_index = log.append("gpu_usage", "node-a", na, body, "2026-11-27T00:01:02Z")         # 22
        elif variant == "v1_envelope":
            # A version-1 envelope (v 1, the v1 message) inside a version-2 leaf: unsupported_version.
            body = {"tenant": TENANT, "region": "cn-nmg-1", "node": "node-a", "gpu_model": "H100-SXM5-80GB",
                    "gpu_count": "1", "start": "2026-11-27T00:00:00Z", "end": "2026-11-27T00:01:00Z",
                    "gpu_seconds": "60"}
            unsigned = {"v": 1, "kind": "gpu_usage", "signer": "node-a", "key_id": na.key_id, "seq": 99,
                        "body": body}
            sig = na.sign(b"gpuledger/v1/gpu_usage\n" + jcs(unsigned))
            self.bad_index = log.append_envelope(dict(unsigned, sig=b64(sig)), "2026-11-27T00:01:02Z")   # 22
        elif variant == "duplicate_member":
            # The body of a record holds a member name twice (strict JSON refuses it at any depth).
            good = log.gpu_usage("node-a", na, TENANT, "cn-nmg-1", "H100-SXM5-80GB", "1", "2026-11-27T00:00:00Z",
                                 60, lease="lease-0042")
            e = log.entries.pop()
            leaf = e.leaf.replace(b'"gpu_count":"1"', b'"gpu_count":"1","gpu_count":"1"', 1)
            assert leaf != e.leaf
            self.bad_index = log.append_leaf_bytes(leaf, e.envelope, e.received_at)                     # 22
            assert self.bad_index == good
        elif variant == "late_key_use":
            # node-d's record comes before node-d's registration.
            nd = Key.from_byte(0x26)
            self.bad_index = log.gpu_usage("node-d", nd, TENANT, "cn-nmg-1", "H100-SXM5-80GB", "1",
                                           "2026-11-27T00:00:00Z", 60)                                  # 22
            log.register("node-d", nd, "node", "2026-11-28T00:00:00Z", regions=["cn-nmg-1"])           # 23 (node-d), 24 (its key)
        elif variant not in ("good", "bad_signature", "small_order_r", "torsion_r", "other_origin", "node_not_allowed",
                             "region_not_allowed", "unknown_lease", "too_old", "in_future"):
            raise ValueError(variant)
        log.ledger("certificate_issued", {"id": "CERT-000000", "tenant": "tenant-other",
                                          "period_from": "2026-10-01T00:00:00Z",
                                          "period_to": "2026-11-01T00:00:00Z", "checkpoint_size": 3,
                                          "certificate_sha256": "ab" * 32}, "2026-11-29T00:00:00Z")
        self.size = len(log.entries)
        self.scope = scope or {}
        self.records = covered(log, self.size, TENANT, *PERIOD, self.scope)
        self.context = context_for(log, self.size, self.records, TENANT)
        self.checkpoint = log.checkpoint(self.size)
        self.certificate = make_certificate(log, self.size, TENANT, *PERIOD, scope=self.scope,
                                            records=self.records, checkpoint=self.checkpoint)
        self.bundle = make_bundle(log, self.size, self.context, self.records,
                                  {"certificate": self.certificate["id"]}, checkpoint=self.checkpoint)

    def verifier_key(self) -> str:
        return self.log.verifier_key()
