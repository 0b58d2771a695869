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
VECTORS = os.path.join(REPO, "tests", "vectors")
ENTRY_POINT = os.path.join(PKG, "gpuledger_verify.py")
for p in (PKG, HERE):
    if p not in sys.path:
        sys.path.insert(0, p)

import gpuledger_verify as gv  # noqa: E402
import producer  # noqa: E402


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
    """Every scalar member path of a JSON object (for 'change any field of any record')."""
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += leaf_paths(v, prefix + (k,))
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
