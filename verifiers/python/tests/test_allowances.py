"""Included GPU-hours and overage (docs/RATING.md, "Included GPU-hours and overage"; PROTOCOL.md
section 5.19, `fees[i].included`): the body rules of the new member, and an invoice's
`allowances` rows and `included` and `overage` lines, recomputed by `bundle --invoice` from the
bundle's contract, gpu_usage, record_excluded and earlier invoice_issued entries.

The rule, for a contract with included GPU-hours, each of its billing periods B (clipped to the
term) wholly inside the invoice period, each fee F renting a lease L and each entry E of F's
`included` (in that order): allowance = E.gpu_hours × 3600 × used ÷ full seconds of B, rounded
half-even to 6 decimals; used = Σ gpu_seconds of the tenant's records of L and E's model that
start in B (so in the term and in the invoice period) and are not excluded; covered = min(used,
allowance), over = used − covered; an `included` line when covered > 0 (net 0), an `overage`
line when over > 0 (net = round_half_even(over × rate ÷ 3600)). A contract-priced record late
for an earlier invoiced period makes an `overage` line with `adjustment_for` that period,
counting toward no allowance.

The figures below are worked out by hand in each test's docstring or comment (and checked with
fractions of the test's own), not taken from the verifier's arithmetic."""

import copy
import io
import json
import os
import unittest
from contextlib import redirect_stdout
from fractions import Fraction

from support import REPO, RustInvoiceFixture, VerifierTestCase, body_verdict, changed, gv, producer

LEASE = "lease-acme"
CONTRACT = "C-acme-inc"
FEE_NAME = "2 \u00d7 H100 on node-1, monthly"
MODEL = "H100"
OTHER = "A100"
AT = "2026-12-01T00:00:00Z"  # when the registrations and the contract arrive
TERM = ("2027-01-01T00:00:00Z", "2027-04-01T00:00:00Z")
JAN = ("2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z")
FEB = ("2027-02-01T00:00:00Z", "2027-03-01T00:00:00Z")
MAR = ("2027-03-01T00:00:00Z", "2027-04-01T00:00:00Z")
INCLUDED = [producer.included(MODEL, "1", "9.50")]  # 1 H100 GPU-hour a month, 9.50 per GPU-hour above


def ts(text):
    return gv.parse_timestamp(text)


def hours(seconds) -> Fraction:
    """GPU-seconds as GPU-hours, rounded half-even to 6 places (Fraction's own round)."""
    return round(Fraction(seconds) / 3600, 6)


def body(**changes):
    """The third example of section 5.19 (2000 H100 GPU-hours a month in the fee of a reserved
    lease, 9.50 above), with `changes` applied (a value of ... removes the member)."""
    out = {"billing_anchor": "calendar", "billing_period": "month", "contract": CONTRACT, "currency": "CNY",
           "fees": [producer.fee(FEE_NAME, "20000", lease=LEASE, included=[producer.included(MODEL, "2000", "9.50")])],
           "region": "west", "tenant": "acme", "term_from": TERM[0], "term_to": TERM[1]}
    changed(out, changes)
    return out


def inc(model=MODEL, gpu_hours="2000", rate="9.50"):
    return producer.included(model, gpu_hours, rate)


class AllowanceBodies(unittest.TestCase):
    """check_envelope on contract_registered bodies with `fees[i].included`: each rule's code and
    field (section 5.19), and the order of the checks."""

    def code(self, b):
        return body_verdict("contract_registered", b, "gpuledger.test/allowances")

    def fees(self, *fees):
        return body(fees=list(fees))

    def entries(self, *entries, **fee_changes):
        """The example with its fee's `included` set to `entries` and the fee's members changed."""
        f = producer.fee(FEE_NAME, "20000", lease=LEASE, included=list(entries))
        return body(fees=[changed(f, fee_changes)])

    def test_the_section_5_19_example_passes(self):
        example = ('{"billing_anchor":"calendar","billing_period":"month","contract":"C-acme-inc","currency":"CNY",'
                   '"fees":[{"amount":"20000","category":"compute","included":[{"gpu_hours":"2000","gpu_model":"H100",'
                   '"overage_rate":"9.50"}],"lease":"lease-acme","name":"2 \u00d7 H100 on node-1, monthly",'
                   '"timing":"advance"}],"region":"west","tenant":"acme","term_from":"2027-01-01T00:00:00Z",'
                   '"term_to":"2027-04-01T00:00:00Z"}')
        self.assertEqual(json.loads(example), body())
        self.assertEqual(self.code(json.loads(example)), "PASS")
        self.assertEqual(gv.MAX_INCLUDED_MODELS, 8)

    def test_codes(self):
        eight = [inc(f"M{k}") for k in range(8)]
        other_lease = producer.fee("Second node", "1000", lease="lease-2", included=[inc()])
        cases = [
            (body(), "PASS"),
            (self.entries(inc(gpu_hours="0", rate="0")), "PASS"),  # 0 allowed: every GPU-hour at the rate
            (self.entries(inc(gpu_hours="0.0000", rate="0.0")), "PASS"),
            (self.entries(inc(gpu_hours="1000000000000", rate="1000000000000.0000")), "PASS"),
            (self.entries(inc(gpu_hours="0.0001", rate="0.0001")), "PASS"),
            (self.entries(*eight), "PASS"),
            (self.entries(inc(), inc(OTHER)), "PASS"),
            (self.entries(inc("A100/1g.10gb")), "PASS"),  # a MIG instance's model
            (self.entries(inc(), timing="arrears"), "PASS"),
            (self.fees(body()["fees"][0], other_lease), "PASS"),  # the same model on another lease
            (self.fees(body()["fees"][0], producer.fee("Support", "100", "arrears", "support", LEASE, [inc(OTHER)])),
             "PASS"),  # the same lease on two fees, another model
            (body(commitment="1000"), "PASS"),
            (body(sla={"target": "99.9", "credits": [{"below": "99.9", "percent": "10"}]}), "PASS"),
            # only on a fee that names a lease
            (self.entries(inc(), lease=...), ("invalid_field", "body.fees[0].included")),
            (self.entries(inc(), lease=..., timing="once"), ("invalid_field", "body.fees[0].included")),
            (self.entries(inc(), timing="once"), ("invalid_field", "body.fees[0].lease")),  # the lease's rule first
            # 1 to 8 entries
            (self.entries(), ("invalid_field", "body.fees[0].included")),
            (self.entries(*eight, inc("M8")), ("invalid_field", "body.fees[0].included")),
            # gpu_model: an id
            (self.entries(inc("H 100")), ("invalid_field", "body.fees[0].included[0].gpu_model")),
            (self.entries(inc("")), ("invalid_field", "body.fees[0].included[0].gpu_model")),
            (self.entries(inc("ledger")), ("invalid_field", "body.fees[0].included[0].gpu_model")),
            (self.entries(inc(), inc("-H100")), ("invalid_field", "body.fees[0].included[1].gpu_model")),
            # gpu_hours and overage_rate: amounts, 0 allowed, at most 10^12
            (self.entries(inc(gpu_hours="-1")), ("negative_quantity", "body.fees[0].included[0].gpu_hours")),
            (self.entries(inc(gpu_hours="-0")), ("negative_quantity", "body.fees[0].included[0].gpu_hours")),
            (self.entries(inc(gpu_hours="1.00001")), ("invalid_field", "body.fees[0].included[0].gpu_hours")),
            (self.entries(inc(gpu_hours="02000")), ("invalid_field", "body.fees[0].included[0].gpu_hours")),
            (self.entries(inc(gpu_hours="")), ("invalid_field", "body.fees[0].included[0].gpu_hours")),
            (self.entries(inc(gpu_hours="2e3")), ("invalid_field", "body.fees[0].included[0].gpu_hours")),
            (self.entries(inc(gpu_hours="1000000000000.0001")),
             ("quantity_out_of_range", "body.fees[0].included[0].gpu_hours")),
            (self.entries(inc(rate="-9.50")), ("negative_quantity", "body.fees[0].included[0].overage_rate")),
            (self.entries(inc(rate="9.")), ("invalid_field", "body.fees[0].included[0].overage_rate")),
            (self.entries(inc(rate="9.500001")), ("invalid_field", "body.fees[0].included[0].overage_rate")),
            (self.entries(inc(rate="10000000000000")),
             ("quantity_out_of_range", "body.fees[0].included[0].overage_rate")),
            # a lease and model at most once in the contract: named at the second occurrence
            (self.entries(inc(), inc(gpu_hours="1")), ("invalid_field", "body.fees[0].included[1].gpu_model")),
            (self.entries(inc(), inc(OTHER), inc()), ("invalid_field", "body.fees[0].included[2].gpu_model")),
            (self.fees(body()["fees"][0], producer.fee("Support", "100", "arrears", "support", LEASE, [inc(OTHER), inc()])),
             ("invalid_field", "body.fees[1].included[1].gpu_model")),
            # the shape (malformed), before any value
            (self.entries(inc(), included=None), ("malformed", "body.fees[0].included")),
            (self.entries(inc(), included=inc()), ("malformed", "body.fees[0].included")),
            (self.entries(inc(), included="H100"), ("malformed", "body.fees[0].included")),
            (self.entries("H100"), ("malformed", "body.fees[0].included[0]")),
            (self.entries(None), ("malformed", "body.fees[0].included[0]")),
            (self.entries({"gpu_model": MODEL, "gpu_hours": "1"}), ("malformed", "body.fees[0].included[0].overage_rate")),
            (self.entries({}), ("malformed", "body.fees[0].included[0].gpu_model")),
            (self.entries(dict(inc(), unit="GPU-h")), ("malformed", "body.fees[0].included[0].unit")),
            (self.entries(dict(inc(), gpu_hours=2000)), ("malformed", "body.fees[0].included[0].gpu_hours")),
            (self.entries(dict(inc(), overage_rate=None)), ("malformed", "body.fees[0].included[0].overage_rate")),
            (self.entries(dict(inc(), gpu_model=["H100"])), ("malformed", "body.fees[0].included[0].gpu_model")),
            (self.entries(inc(), inc(), {"gpu_model": MODEL}), ("malformed", "body.fees[0].included[2].gpu_hours")),
            # the order: shapes first (every fee's), then the table
            (body(tenant="a b", fees=[dict(producer.fee(FEE_NAME, "1", lease=LEASE), included=None)]),
             ("malformed", "body.fees[0].included")),
            (self.fees(producer.fee(FEE_NAME, "0", lease=LEASE, included=[inc()]),
                       producer.fee("x", "1", lease=LEASE, included=[None])), ("malformed", "body.fees[1].included[0]")),
            (body(tenant="a b"), ("invalid_field", "body.tenant")),
            # a fee's included after its other members (the lease last of them)
            (self.entries(inc("H 100"), category="gpu"), ("invalid_field", "body.fees[0].category")),
            (self.entries(inc("H 100"), lease="a b"), ("invalid_field", "body.fees[0].lease")),
            (self.entries(inc("H 100"), amount="0"), ("quantity_out_of_range", "body.fees[0].amount")),
            # needs-a-lease, then the count, then entry by entry
            (self.entries(*eight, inc("H 100"), lease=...), ("invalid_field", "body.fees[0].included")),
            (self.entries(inc("H 100"), *eight), ("invalid_field", "body.fees[0].included")),
            (self.entries(inc(rate="x"), inc("H 100")), ("invalid_field", "body.fees[0].included[0].overage_rate")),
            # within an entry: gpu_model, gpu_hours, overage_rate, then the at-most-once rule
            (self.entries(inc("H 100", "-1", "-1")), ("invalid_field", "body.fees[0].included[0].gpu_model")),
            (self.entries(inc(MODEL, "-1", "x")), ("negative_quantity", "body.fees[0].included[0].gpu_hours")),
            (self.entries(inc(), inc(MODEL, "1", "x")), ("invalid_field", "body.fees[0].included[1].overage_rate")),
            # fee by fee: fee 0's included before fee 1's name; fee 1's duplicate after its own members
            (self.fees(producer.fee(FEE_NAME, "1", lease=LEASE, included=[]), producer.fee("", "1")),
             ("invalid_field", "body.fees[0].included")),
            (self.fees(body()["fees"][0], producer.fee("Support", "0", "arrears", "support", LEASE, [inc()])),
             ("quantity_out_of_range", "body.fees[1].amount")),
            (self.fees(body()["fees"][0], producer.fee("Support", "100", "arrears", "support", LEASE, [inc()])),
             ("invalid_field", "body.fees[1].included[0].gpu_model")),
            # the fees before the commitment, the presence rule and the SLA
            (dict(self.entries(), commitment="0"), ("invalid_field", "body.fees[0].included")),
            (dict(self.entries(), sla={"target": "100", "credits": []}), ("invalid_field", "body.fees[0].included")),
        ]
        for b, want in cases:
            with self.subTest(b):
                self.assertEqual(self.code(b), want)


# --- invoices built here ----------------------------------------------------------------------


class AllowanceLog:
    """A producer log of tenant acme renting `lease-acme` (node-1's GPUs by model and count: 2
    H100 and 1 A100) under contract C-acme-inc (TERM unless told, calendar months, FEE_NAME 20000
    in advance renting the lease and including `included`, INCLUDED unless told), with the
    agent's records added by `record`. What the contract does not price is the rate card's:
    reserved H100 at 18.5 and A100 at 10 per GPU-hour in west (CNY)."""

    def __init__(self, included=None, fees=None, commitment=None, sla=None, term=TERM,
                 origin="test.gpuledger/allowances"):
        self.log = log = producer.Log(producer.Key.from_byte(0xa1), origin)
        self.node = producer.Key.from_byte(0xa2)
        log.policy("2026-11-01T00:00:00Z")
        log.tenant("acme", "2026-11-01T00:00:00Z")
        log.rate_card("west", MODEL, "reserved", "18.5", "2026-11-01T00:00:00Z", "2026-11-01T00:00:00Z")
        log.rate_card("west", OTHER, "reserved", "10", "2026-11-01T00:00:00Z", "2026-11-01T00:00:00Z")
        log.node("node-1", "west", "2026-11-01T00:00:00Z", {MODEL: 8, OTHER: 8})
        log.register("node-1", self.node, "node", "2026-11-01T00:00:00Z", regions=["west"])
        log.lease(LEASE, "acme", "reserved", "2026-11-01T00:00:00Z",
                  [producer.lease_count("node-1", MODEL, "2"), producer.lease_count("node-1", OTHER, "1")])
        if fees is None:
            fees = [producer.fee(FEE_NAME, "20000", lease=LEASE,
                                 included=copy.deepcopy(included if included is not None else INCLUDED))]
        extra = {"sla": sla} if sla is not None else {}
        self.contract = log.contract("acme", CONTRACT, term[0], term[1], AT, fees=fees, commitment=commitment,
                                     region="west", **extra)

    def record(self, start, seconds, count="1", model=MODEL, received_at=None):
        """One gpu_usage record of acme on node-1 under the lease: `count` GPUs of `model` over
        [start, start + seconds), logged 2 s after its end unless told."""
        return self.log.gpu_usage("node-1", self.node, "acme", "west", model, count, start, seconds,
                                  received_at=received_at, lease=LEASE)

    def records_in(self, period):
        lo, hi = ts(period[0]), ts(period[1])
        return [e.index for e in self.log.entries if e.kind == "gpu_usage" and lo <= ts(e.body["start"]) < hi]

    def issue(self, number, period, total):
        """The invoice_issued entry of acme's invoice `number` for `period`, computed at the log's
        size, logged an hour after the period ends (or after the last entry)."""
        at = max(ts(period[1]) + 3600, ts(self.log.entries[-1].received_at))
        return self.log.invoice(number, "acme", period[0], period[1], len(self.log.entries), gv.format_ts(at), total)


def taxed(line):
    return dict(line, tax_rate="0", tax="0.00", gross=line["net"])


def rate_card_line(model, seconds, quantity, unit_price, net, records):
    """A `gpu` line of the rate card (reserved, west): what the contract does not price."""
    return taxed({"kind": "gpu", "description": f"GPU compute, {model}, west, reserved", "region": "west",
                  "gpu_model": model, "class": "reserved", "quantity": quantity, "unit": "GPU-h",
                  "gpu_seconds": seconds, "unit_price": unit_price, "net": net, "records": records})


def fee_line(service, net="20000.00", quantity="1", unit_price="20000", name=FEE_NAME):
    return taxed({"kind": "fee", "description": name, "region": "west", "contract": CONTRACT, "category": "compute",
                  "timing": "advance", "service_period": {"from": service[0], "to": service[1]},
                  "quantity": quantity, "unit": "period", "unit_price": unit_price, "net": net, "records": 0})


def gpu_line(kind, description, seconds, quantity, unit_price, net, records, model=MODEL, category="compute"):
    return taxed({"kind": kind, "description": description, "region": "west", "gpu_model": model,
                  "quantity": quantity, "unit": "GPU-h", "gpu_seconds": seconds, "unit_price": unit_price,
                  "net": net, "records": records, "contract": CONTRACT, "category": category})


def included_line(service, seconds, quantity, used_h, allowance_h, records, model=MODEL, name=FEE_NAME,
                  category="compute"):
    line = gpu_line("included", f"Included GPU-hours, {model}, lease {LEASE}: {used_h} of {allowance_h} GPU-h ({name})",
                    seconds, quantity, "0", "0.00", records, model, category)
    return dict(line, service_period={"from": service[0], "to": service[1]})


def overage_line(service, seconds, quantity, unit_price, net, allowance_h, records, model=MODEL, name=FEE_NAME,
                 category="compute"):
    line = gpu_line("overage", f"Overage above {allowance_h} included GPU-h, {model}, lease {LEASE} ({name})",
                    seconds, quantity, unit_price, net, records, model, category)
    return dict(line, service_period={"from": service[0], "to": service[1]})


def late_line(period, seconds, quantity, unit_price, net, records, model=MODEL, name=FEE_NAME):
    line = gpu_line("overage", f"Overage (late records), {model}, lease {LEASE} ({name})",
                    seconds, quantity, unit_price, net, records, model)
    return dict(line, adjustment_for={"from": period[0], "to": period[1]})


def allowance_row(period, included, used, over, model=MODEL):
    return {"contract": CONTRACT, "lease": LEASE, "gpu_model": model, "period": {"from": period[0], "to": period[1]},
            "included_gpu_seconds": included, "used_gpu_seconds": used, "overage_gpu_seconds": over}


def money(x: Fraction) -> str:
    return gv.fixed_str(x, 2)


def make_invoice(al, period, lines, allowances=None, commitments=None, availability=None, number="INV-000002",
                 size=None):
    """A version 2 invoice of acme for `period` at log size `size` (the log's, unless told),
    with `lines` (tax 0), its totals their sums, and the `allowances`, `commitments` and
    `availability` given (absent when none)."""
    log = al.log
    size = len(log.entries) if size is None else size
    total = sum((Fraction(l["net"]) for l in lines), Fraction(0))
    inv = {"format": "gpuledger-invoice/v2", "number": number, "tenant": "acme",
           "period": {"from": period[0], "to": period[1]}, "currency": "CNY",
           "issued_at": gv.format_ts(ts(period[1]) + 3600), "log_origin": log.origin, "checkpoint_size": size,
           "checkpoint_root": producer.b64(log.root(size)), "issuer": {"name": log.origin, "address": []},
           "bill_to": {"tenant": "acme", "name": "acme", "address": []}, "payment_terms_days": 30,
           "due_at": gv.format_ts(ts(period[1]) + 3600 + 30 * 86400), "lines": lines,
           "net_total": money(total), "tax_total": "0.00", "total": money(total)}
    for name, value in (("allowances", allowances), ("commitments", commitments), ("availability", availability)):
        if value:
            inv[name] = value
    return inv


class AllowanceInvoices(VerifierTestCase):
    """Invoices of acme built by hand over an AllowanceLog, each checked with `bundle --invoice`
    against a bundle (at the invoice's checkpoint size) of the invoice's records. The records
    are the contract's (no usage line) unless a test logs one the rate card prices (re-rated:
    its `gpu` line comes first)."""

    def check(self, al, inv, records=None):
        log = al.log
        size = inv["checkpoint_size"]
        period = (inv["period"]["from"], inv["period"]["to"])
        records = sorted(set([i for i in al.records_in(period) if i < size] if records is None else records))
        context = producer.context_for(log, size, records, "acme", invoice=True)
        data = producer.bundle_bytes(producer.make_bundle(log, size, context, records, {"invoice": inv["number"]}))
        bundle = self.write("bundle.ndjson", data)
        path = self.write("invoice.json", json.dumps(inv, ensure_ascii=False))
        return gv.verify_bundle(bundle, gv.parse_verifier_key(log.verifier_key()), path)

    def january(self):
        """January, 1 H100 GPU-hour included at 9.50 above: 2 GPUs for an hour on 5 January (7200
        GPU-s) and 1 GPU for half an hour on 6 January (1800): used 9000 GPU-s (2.5 GPU-h),
        allowance 1 × 3600 × 31/31 days = 3600 (1 GPU-h); covered 3600, over 5400 (1.5 GPU-h):
        1.5 × 9.50 = 14.25. Lines: the fee 20000.00, included (0.00), overage 14.25; total
        20014.25."""
        al = AllowanceLog()
        al.record("2027-01-05T10:00:00Z", 3600, "2")
        al.record("2027-01-06T10:00:00Z", 1800, "1")
        used, allowance = 7200 + 1800, 3600
        over = used - min(used, allowance)
        self.assertEqual((hours(used), hours(allowance), hours(over)), (Fraction("2.5"), 1, Fraction("1.5")))
        self.assertEqual(round(Fraction(over) * Fraction("9.50") / 3600, 2), Fraction("14.25"))
        inv = make_invoice(al, JAN, [
            fee_line(JAN),
            included_line(JAN, "3600", "1", "2.5", "1", 2),
            overage_line(JAN, "5400", "1.5", "9.5", "14.25", "1", 2),
        ], [allowance_row(JAN, "3600", "9000", "5400")])
        return al, inv

    def test_a_month_beyond_its_allowance(self):
        al, inv = self.january()
        self.assertEqual(inv["total"], "20014.25")
        r = self.check(al, inv)
        self.assertPass(r)
        s = r.summary["invoice"]
        self.assertEqual((s["contract_lines"], s["included_lines"], s["overage_lines"], s["allowances"]), (3, 1, 1, 1))
        self.assertIn("1 allowances rows", r.message)

    def test_tampered_january(self):
        al, inv = self.january()
        edits = {
            "lines[2].net": lambda i: i["lines"][2].update(net="14.26"),
            "lines[2].gross": lambda i: i["lines"][2].update(net="14.26", gross="14.26"),
            "lines[2].unit_price": lambda i: i["lines"][2].update(unit_price="9.50"),
            "lines[2].gpu_seconds": lambda i: i["lines"][2].update(gpu_seconds="5400.0"),
            "lines[2].records": lambda i: i["lines"][2].update(records=1),
            "lines[2].service_period": lambda i: i["lines"][2].pop("service_period"),
            "lines[2].adjustment_for": lambda i: i["lines"][2].update(adjustment_for={"from": JAN[0], "to": JAN[1]}),
            "lines[1].quantity": lambda i: i["lines"][1].update(quantity="1.0"),
            "lines[1].description": lambda i: i["lines"][1].update(description=i["lines"][1]["description"]
                                                                   .replace("2.5 of 1", "1 of 1")),
            "lines[1].gpu_model": lambda i: i["lines"][1].update(gpu_model=OTHER),
            "lines[1].unit": lambda i: i["lines"][1].update(unit="GPU-s"),
            "lines[1].class": lambda i: i["lines"][1].update({"class": "reserved"}),
            "lines[1].category": lambda i: i["lines"][1].update(category="other"),
            "lines[1].kind": lambda i: i["lines"][1].update(kind="overage"),
        }
        for item, edit in edits.items():
            with self.subTest(item):
                changed = copy.deepcopy(inv)
                edit(changed)
                self.assertFail(self.check(al, changed), "claim_mismatch", item)
        # The included line called a usage line: the records make none (they are the contract's).
        changed = copy.deepcopy(inv)
        changed["lines"][1].update(kind="gpu")
        self.assertFail(self.check(al, changed), "claim_mismatch", "lines[1].kind")
        # Each member of the row, the row left out, the whole member left out.
        for member, value in (("included_gpu_seconds", "3600.000001"), ("used_gpu_seconds", "9001"),
                              ("overage_gpu_seconds", "5401"), ("gpu_model", OTHER), ("lease", "lease-x"),
                              ("contract", "C-x"), ("period", {"from": JAN[0], "to": "2027-01-31T00:00:00Z"})):
            with self.subTest(member):
                changed = copy.deepcopy(inv)
                changed["allowances"][0][member] = value
                self.assertFail(self.check(al, changed), "claim_mismatch", "allowances")
        changed = copy.deepcopy(inv)
        del changed["allowances"]
        self.assertFail(self.check(al, changed), "claim_mismatch", "allowances")
        changed = copy.deepcopy(inv)
        changed["allowances"] = {}
        self.assertFail(self.check(al, changed), "malformed", "invoice.allowances")
        # The overage line dropped, totals adjusted: the line is missing.
        changed = copy.deepcopy(inv)
        del changed["lines"][2]
        changed.update(net_total="20000.00", total="20000.00")
        self.assertFail(self.check(al, changed), "claim_mismatch", "lines[2]")
        # The included line dropped (its net is 0): the overage line is where it was.
        changed = copy.deepcopy(inv)
        del changed["lines"][1]
        self.assertFail(self.check(al, changed), "claim_mismatch", "lines[1].description")
        # The records rated by the rate card instead (a gpu line first, the contract's lines
        # dropped): the records are contract-priced, so the bundle makes no gpu line.
        changed = copy.deepcopy(inv)
        changed["lines"][1:] = [rate_card_line(MODEL, "9000", "2.5", "18.5", "46.25", 2)]
        changed["lines"].reverse()
        changed.update(net_total="20046.25", total="20046.25")
        self.assertFail(self.check(al, changed), "claim_mismatch", "lines[0].category")
        # Both: a contract-priced record billed at the rate card too.
        changed = copy.deepcopy(inv)
        changed["lines"].insert(0, rate_card_line(MODEL, "9000", "2.5", "18.5", "46.25", 2))
        changed.update(net_total="20060.50", total="20060.50")
        self.assertFail(self.check(al, changed), "claim_mismatch", "lines[0].category")

    def test_overage_is_taxed_like_every_line(self):
        # 6 % of 14.25 = 0.855 → 0.86 (half-even: 0.855 is a tie, 5 odd → up), gross 15.11; of 0.00: 0.00.
        al, inv = self.january()
        for line in inv["lines"]:
            tax = round(Fraction(line["net"]) * Fraction("0.06"), 2)
            line.update(tax_name="VAT", tax_rate="0.06", tax=money(tax), gross=money(Fraction(line["net"]) + tax))
        self.assertEqual((inv["lines"][2]["tax"], inv["lines"][2]["gross"]), ("0.86", "15.11"))
        inv.update(tax_total="1200.86", total="21215.11")
        self.assertPass(self.check(al, inv))

    def test_under_the_allowance_and_unused(self):
        """February: 1 GPU for half an hour (1800 GPU-s, 0.5 GPU-h) of 1 included: an included
        line only. March, no record: a row with nothing used, no line."""
        al = AllowanceLog()
        al.record("2027-02-03T00:00:00Z", 1800)
        feb = make_invoice(al, FEB, [fee_line(FEB), included_line(FEB, "1800", "0.5", "0.5", "1", 1)],
                           [allowance_row(FEB, "3600", "1800", "0")])
        self.assertPass(self.check(al, feb))
        mar = make_invoice(al, MAR, [fee_line(MAR)], [allowance_row(MAR, "3600", "0", "0")])
        self.assertPass(self.check(al, mar))
        mar.pop("allowances")
        self.assertFail(self.check(al, mar), "claim_mismatch", "allowances")

    def test_exactly_the_allowance(self):
        """2 GPUs for half an hour: 3600 GPU-s, the allowance exactly: included, no overage line."""
        al = AllowanceLog()
        al.record("2027-01-05T10:00:00Z", 1800, "2")
        inv = make_invoice(al, JAN, [fee_line(JAN), included_line(JAN, "3600", "1", "1", "1", 1)],
                           [allowance_row(JAN, "3600", "3600", "0")])
        self.assertPass(self.check(al, inv))

    def test_no_hours_included(self):
        """gpu_hours 0 at 12: every GPU-hour is overage, no included line; 1 GPU for 20 minutes
        (1200 GPU-s = 0.333333 GPU-h): 1200 × 12 / 3600 = 4.00."""
        al = AllowanceLog(included=[producer.included(MODEL, "0", "12")])
        al.record("2027-01-05T10:00:00Z", 1200)
        self.assertEqual(hours(1200), Fraction("0.333333"))
        inv = make_invoice(al, JAN, [fee_line(JAN), overage_line(JAN, "1200", "0.333333", "12", "4.00", "0", 1)],
                           [allowance_row(JAN, "0", "1200", "1200")])
        self.assertPass(self.check(al, inv))

    def test_an_overage_that_rounds_to_nothing_is_listed(self):
        """A rate of 0.01: 1 GPU for a minute above nothing included: 60 × 0.01 / 3600 =
        0.000166… → 0.00, listed (GPU time was used); rate 0: 0.00 too."""
        for rate, price in (("0.01", "0.01"), ("0", "0")):
            with self.subTest(rate):
                al = AllowanceLog(included=[producer.included(MODEL, "0", rate)])
                al.record("2027-01-05T10:00:00Z", 60)
                self.assertEqual(round(Fraction(60) * Fraction(rate) / 3600, 2), 0)
                inv = make_invoice(al, JAN, [fee_line(JAN), overage_line(JAN, "60", "0.016667", price, "0.00", "0", 1)],
                                   [allowance_row(JAN, "0", "60", "60")])
                self.assertPass(self.check(al, inv))

    def test_a_partial_first_month_prorates_the_allowance(self):
        """A term from 16 January: January's billing period is 16 of 31 days. The fee: 20000 ×
        16/31 = 10322.580645… → 10322.58, quantity 0.516129. The allowance: 3600 × 16/31 =
        1858.064516129… → 1858.064516 GPU-s (A = 0.516129 GPU-h). 2 GPUs for an hour on 20
        January: used 7200 (2 GPU-h), over 7200 − 1858.064516 = 5341.935484 (1.483871 GPU-h):
        5341.935484 × 9.50 / 3600 = 14.0967… → 14.10."""
        term = ("2027-01-16T00:00:00Z", TERM[1])
        span = (term[0], JAN[1])
        al = AllowanceLog(term=term)
        al.record("2027-01-20T10:00:00Z", 3600, "2")
        allowance = round(Fraction(3600 * 16, 31), 6)
        self.assertEqual(allowance, Fraction("1858.064516"))
        over = 7200 - allowance
        self.assertEqual(over, Fraction("5341.935484"))
        self.assertEqual((hours(allowance), hours(over)), (Fraction("0.516129"), Fraction("1.483871")))
        self.assertEqual(round(over * Fraction("9.5") / 3600, 2), Fraction("14.10"))
        self.assertEqual(round(Fraction(20000 * 16, 31), 2), Fraction("10322.58"))
        inv = make_invoice(al, JAN, [
            fee_line(span, "10322.58", "0.516129"),
            included_line(span, "1858.064516", "0.516129", "2", "0.516129", 1),
            overage_line(span, "5341.935484", "1.483871", "9.5", "14.10", "0.516129", 1),
        ], [allowance_row(span, "1858.064516", "7200", "5341.935484")])
        self.assertPass(self.check(al, inv))

    def test_a_quarter_judges_each_month(self):
        """A quarterly invoice of the monthly contract: the three fee lines, then per month (in
        order) its included and overage lines: January 5400 GPU-s (1.5 GPU-h: 1 included, 0.5
        over: 4.75), February 1800 (included), March 7200 (1 included, 1 over: 9.50); one row
        per month."""
        al = AllowanceLog()
        al.record("2027-01-05T10:00:00Z", 2700, "2")
        al.record("2027-02-05T10:00:00Z", 1800)
        al.record("2027-03-05T10:00:00Z", 3600, "2")
        inv = make_invoice(al, TERM, [
            fee_line(JAN), fee_line(FEB), fee_line(MAR),
            included_line(JAN, "3600", "1", "1.5", "1", 1),
            overage_line(JAN, "1800", "0.5", "9.5", "4.75", "1", 1),
            included_line(FEB, "1800", "0.5", "0.5", "1", 1),
            included_line(MAR, "3600", "1", "2", "1", 1),
            overage_line(MAR, "3600", "1", "9.5", "9.50", "1", 1),
        ], [allowance_row(JAN, "3600", "5400", "1800"), allowance_row(FEB, "3600", "1800", "0"),
            allowance_row(MAR, "3600", "7200", "3600")])
        self.assertPass(self.check(al, inv))
        swapped = copy.deepcopy(inv)
        swapped["allowances"].reverse()
        self.assertFail(self.check(al, swapped), "claim_mismatch", "allowances")

    def test_two_models_of_the_lease_and_a_second_fee(self):
        """Fee 0 includes 1 H100 GPU-hour (9.50) and 2 A100 GPU-hours (4); fee 1 (support,
        arrears) includes nothing. H100 2 GPU-h used: 1 over, 9.50; A100 3 GPU-h used: 1 over,
        4.00. Lines per month, fee and entry: H100 included, H100 overage, A100 included, A100
        overage; the support fee's line is with the fee lines."""
        fees = [producer.fee(FEE_NAME, "20000", lease=LEASE,
                             included=[producer.included(MODEL, "1", "9.50"), producer.included(OTHER, "2", "4")]),
                producer.fee("Support", "500", "arrears", "support")]
        al = AllowanceLog(fees=fees)
        al.record("2027-01-05T10:00:00Z", 3600, "2")
        al.record("2027-01-05T10:00:00Z", 10800, "1", OTHER)
        support = dict(fee_line(JAN, "500.00", unit_price="500", name="Support"), category="support", timing="arrears")
        inv = make_invoice(al, JAN, [
            fee_line(JAN), support,
            included_line(JAN, "3600", "1", "2", "1", 1),
            overage_line(JAN, "3600", "1", "9.5", "9.50", "1", 1),
            included_line(JAN, "7200", "2", "3", "2", 1, OTHER),
            overage_line(JAN, "3600", "1", "4", "4.00", "2", 1, OTHER),
        ], [allowance_row(JAN, "3600", "7200", "3600"), allowance_row(JAN, "7200", "10800", "3600", OTHER)])
        self.assertPass(self.check(al, inv))

    def test_a_model_not_included_is_not_the_contracts(self):
        """Only H100 is included: the lease's A100 record (1 GPU-h, rated by the rate card at 10:
        a gpu line of 10.00, first) counts toward nothing; the H100 row shows only H100 usage."""
        al = AllowanceLog()
        al.record("2027-01-05T10:00:00Z", 3600, "1", OTHER)
        al.record("2027-01-06T10:00:00Z", 1800)
        inv = make_invoice(al, JAN, [rate_card_line(OTHER, "3600", "1", "10", "10.00", 1), fee_line(JAN),
                                     included_line(JAN, "1800", "0.5", "0.5", "1", 1)],
                           [allowance_row(JAN, "3600", "1800", "0")])
        self.assertPass(self.check(al, inv))
        # Without its gpu line (totals adjusted), the A100 record is missing from the invoice.
        inv["lines"].pop(0)
        inv.update(net_total="20000.00", total="20000.00")
        self.assertFail(self.check(al, inv), "claim_mismatch", "lines[0].category")

    def test_records_outside_the_term_are_not_contract_priced(self):
        """An invoice of December and January; the contract's term starts on 1 January: the
        December H100 record (2 GPU-h) is the rate card's (2 × 18.5 = 37.00), January's row
        counts January only."""
        al = AllowanceLog()
        al.record("2026-12-20T10:00:00Z", 3600, "2", received_at="2026-12-20T11:00:02Z")
        al.record("2027-01-06T10:00:00Z", 1800)
        inv = make_invoice(al, ("2026-12-01T00:00:00Z", JAN[1]),
                           [rate_card_line(MODEL, "7200", "2", "18.5", "37.00", 1), fee_line(JAN),
                            included_line(JAN, "1800", "0.5", "0.5", "1", 1)],
                           [allowance_row(JAN, "3600", "1800", "0")])
        self.assertPass(self.check(al, inv))

    def test_an_excluded_record_does_not_count(self):
        """January's record of 6 January (1800 GPU-s) excluded by a dispute: used 7200, over
        3600: 9.50, 1 record."""
        al, _ = self.january()
        disputed = al.records_in(("2027-01-06T00:00:00Z", JAN[1]))[0]
        al.log.exclude("acme", disputed, "tenant disputes the job", "2027-02-01T00:30:00Z")
        inv = make_invoice(al, JAN, [fee_line(JAN), included_line(JAN, "3600", "1", "2", "1", 1),
                                     overage_line(JAN, "3600", "1", "9.5", "9.50", "1", 1)],
                           [allowance_row(JAN, "3600", "7200", "3600")])
        self.assertFail(self.check(al, inv), "claim_mismatch", "excluded")
        inv["excluded"] = [{"entry": disputed, "reason": "tenant disputes the job"}]
        self.assertPass(self.check(al, inv))

    def test_overage_draws_down_the_commitment(self):
        """A commitment of 100 a month; a usage line of 50.00 (the lease's A100, 5 GPU-h at the
        rate card's 10) and the overage of 14.25: drawn 64.25, true-up 35.75. Lines: usage, fee,
        included, overage, true-up."""
        al = AllowanceLog(commitment="100")
        al.record("2027-01-05T10:00:00Z", 3600, "2")
        al.record("2027-01-06T10:00:00Z", 1800, "1")
        al.record("2027-01-07T10:00:00Z", 18000, "1", OTHER)
        usage = rate_card_line(OTHER, "18000", "5", "10", "50.00", 1)
        true_up = taxed({"kind": "true_up", "description": f"Minimum commitment true-up, contract {CONTRACT}",
                         "region": "west", "contract": CONTRACT, "quantity": "1", "unit": "period",
                         "unit_price": "35.75", "net": "35.75", "records": 0})
        inv = make_invoice(al, JAN, [usage, fee_line(JAN), included_line(JAN, "3600", "1", "2.5", "1", 2),
                                     overage_line(JAN, "5400", "1.5", "9.5", "14.25", "1", 2), true_up],
                           [allowance_row(JAN, "3600", "9000", "5400")],
                           [{"contract": CONTRACT, "committed": "100.00", "drawn": "64.25", "true_up": "35.75"}])
        self.assertPass(self.check(al, inv))
        # The overage left out of drawn: drawn 50.00, true-up 50.00.
        changed = copy.deepcopy(inv)
        changed["lines"][4] = dict(true_up, unit_price="50", net="50.00", gross="50.00")
        changed["commitments"] = [{"contract": CONTRACT, "committed": "100.00", "drawn": "50.00", "true_up": "50.00"}]
        changed.update(net_total="20114.25", total="20114.25")
        self.assertFail(self.check(al, changed), "claim_mismatch", "lines[4].gross")

    def test_with_an_sla(self):
        """The contract with an SLA too: per contract, the fee, its included and overage lines,
        then its sla_credit line. The lease rents 3 GPUs (2 H100, 1 A100): present 9000 GPU-s of
        3 × 2678400 = 8035200 leased: 100 × 9000 / 8035200 = 0.11200… → 0.112 %: 25 % of
        20000.00 = −5000.00."""
        sla = {"target": "99.9", "credits": [{"below": "99.9", "percent": "10"}, {"below": "99", "percent": "25"}]}
        al = AllowanceLog(sla=sla)
        al.record("2027-01-05T10:00:00Z", 3600, "2")
        al.record("2027-01-06T10:00:00Z", 1800, "1")
        self.assertEqual(Fraction(int(Fraction(100 * 9000, 3 * 31 * 86400) * 10000), 10000), Fraction("0.112"))
        credit = taxed({"kind": "sla_credit", "description": f"SLA credit 25 %: {FEE_NAME}, lease {LEASE}, availability "
                        "0.112 % (target 99.9 %)", "region": "west", "contract": CONTRACT, "category": "compute",
                        "service_period": {"from": JAN[0], "to": JAN[1]}, "quantity": "0.25", "unit": "period",
                        "unit_price": "20000", "net": "-5000.00", "records": 0})
        row = {"contract": CONTRACT, "lease": LEASE, "period": {"from": JAN[0], "to": JAN[1]},
               "leased_gpu_seconds": str(3 * 31 * 86400), "present_gpu_seconds": "9000", "availability": "0.112",
               "target": "99.9", "credit_percent": "25"}
        inv = make_invoice(al, JAN, [fee_line(JAN), included_line(JAN, "3600", "1", "2.5", "1", 2),
                                     overage_line(JAN, "5400", "1.5", "9.5", "14.25", "1", 2), credit],
                           [allowance_row(JAN, "3600", "9000", "5400")], availability=[row])
        self.assertPass(self.check(al, inv))
        moved = copy.deepcopy(inv)
        moved["lines"][2], moved["lines"][3] = moved["lines"][3], moved["lines"][2]
        self.assertFail(self.check(al, moved), "claim_mismatch", "lines[2].description")

    def test_a_period_that_splits_a_billing_period(self):
        """Included GPU-hours are judged over whole billing periods: an invoice of 1 to 16 January
        is refused (item `period`), as for a commitment; the same contract without `included` may
        be invoiced so."""
        al = AllowanceLog()
        inv = make_invoice(al, (JAN[0], "2027-01-16T00:00:00Z"), [fee_line(JAN)])
        r = self.check(al, inv)
        self.assertFail(r, "claim_mismatch", "period")
        self.assertIn(f"[{JAN[0]}, {JAN[1]}) of contract {CONTRACT}, which has a commitment, an SLA or included "
                      "GPU-hours", r.message)
        plain = AllowanceLog(fees=[producer.fee(FEE_NAME, "20000", lease=LEASE)])
        self.assertPass(self.check(plain, make_invoice(plain, (JAN[0], "2027-01-16T00:00:00Z"), [fee_line(JAN)])))

    def test_an_invoice_in_another_currency_judges_nothing(self):
        al, inv = self.january()
        inv = make_invoice(al, JAN, [])
        inv["currency"] = "USD"
        self.assertPass(self.check(al, inv))

    def test_late_records(self):
        """January is invoiced (INV-000001, at the log's size then), then 1 H100 for an hour on 20
        January arrives (late: 3600 GPU-s). February's invoice (INV-000002): 1800 GPU-s of
        February (included), and the late record at the overage rate whatever January's
        allowance: 9.50, adjustment_for January, after February's included line; it draws
        nothing down. March's invoice (INV-000003, after INV-000002): late records of January
        (1800 GPU-s: 4.75) and of February (2 × 1800: 9.50), in order of period; the record
        INV-000002 rated late is invoiced, not rated again."""
        al, jan = self.january()
        self.assertPass(self.check(al, jan))
        al.issue("INV-000001", JAN, jan["total"])
        late_jan = al.record("2027-01-20T10:00:00Z", 3600, received_at="2027-02-01T02:00:00Z")
        al.record("2027-02-03T00:00:00Z", 1800)
        feb_records = al.records_in(FEB) + [late_jan] + al.records_in(JAN)  # the invoiced ones count nowhere
        feb = make_invoice(al, FEB, [fee_line(FEB), included_line(FEB, "1800", "0.5", "0.5", "1", 1),
                                     late_line(JAN, "3600", "1", "9.5", "9.50", 1)],
                           [allowance_row(FEB, "3600", "1800", "0")], number="INV-000002")
        self.assertEqual(feb["total"], "20009.50")
        self.assertPass(self.check(al, feb, feb_records))
        s = self.check(al, feb, feb_records).summary["invoice"]
        self.assertEqual((s["overage_lines"], s["other_lines"]), (1, 0))
        for item, edit in (("lines[2].adjustment_for", lambda i: i["lines"][2].update(adjustment_for={"from": FEB[0],
                                                                                                     "to": FEB[1]})),
                           ("lines[2].description", lambda i: i["lines"][2].update(
                               description=f"Overage above 1 included GPU-h, {MODEL}, lease {LEASE} ({FEE_NAME})")),
                           ("lines[2].net", lambda i: i["lines"][2].update(net="0.00")),
                           ("lines[2].service_period", lambda i: i["lines"][2].update(
                               service_period={"from": JAN[0], "to": JAN[1]}))):
            with self.subTest(item):
                changed = copy.deepcopy(feb)
                edit(changed)
                self.assertFail(self.check(al, changed, feb_records), "claim_mismatch", item)
        # Left out: the line is missing.
        changed = copy.deepcopy(feb)
        del changed["lines"][2]
        changed.update(net_total="20000.00", total="20000.00")
        self.assertFail(self.check(al, changed, feb_records), "claim_mismatch", "lines[2]")
        # Before INV-000001 is in the bundle (no earlier invoice), the record is not late: it starts
        # in no period the invoice covers (outside_period, as InvoiceCheck says).
        no_earlier = make_invoice(al, FEB, feb["lines"][:2], feb["allowances"], number="INV-000002")
        records = sorted(al.records_in(FEB) + [late_jan])
        size = no_earlier["checkpoint_size"]
        context = [i for i in producer.context_for(al.log, size, records, "acme", invoice=True)
                   if al.log.entries[i].kind != "invoice_issued"]
        data = producer.bundle_bytes(producer.make_bundle(al.log, size, context, records, {"invoice": "INV-000002"}))
        path = self.write("invoice.json", json.dumps(no_earlier, ensure_ascii=False))
        self.assertFail(gv.verify_bundle(self.write("bundle.ndjson", data),
                                         gv.parse_verifier_key(al.log.verifier_key()), path),
                        "outside_period", f"entry {late_jan}")

        al.issue("INV-000002", FEB, feb["total"])
        late_jan2 = al.record("2027-01-25T10:00:00Z", 1800, received_at="2027-03-01T02:00:00Z")
        late_feb = al.record("2027-02-10T10:00:00Z", 1800, "2", received_at="2027-03-01T02:00:00Z")
        mar_records = [late_jan2, late_feb, late_jan]
        mar = make_invoice(al, MAR, [fee_line(MAR), late_line(JAN, "1800", "0.5", "9.5", "4.75", 1),
                                     late_line(FEB, "3600", "1", "9.5", "9.50", 1)],
                           [allowance_row(MAR, "3600", "0", "0")], number="INV-000003")
        self.assertPass(self.check(al, mar, mar_records))
        swapped = copy.deepcopy(mar)
        swapped["lines"][1], swapped["lines"][2] = swapped["lines"][2], swapped["lines"][1]
        self.assertFail(self.check(al, swapped, mar_records), "claim_mismatch", "lines[1].adjustment_for")
        # An excluded late record counts nowhere.
        al.log.exclude("acme", late_feb, "tenant disputes the job", "2027-03-01T03:00:00Z")
        mar2 = make_invoice(al, MAR, mar["lines"][:2], mar["allowances"], number="INV-000003")
        mar2["excluded"] = [{"entry": late_feb, "reason": "tenant disputes the job"}]
        self.assertPass(self.check(al, mar2, mar_records))

    def test_late_overage_draws_nothing_down(self):
        """A commitment of 100: February's invoice with only a late overage line (9.50) and no
        usage of its own: drawn 0.00, true-up 100.00."""
        al = AllowanceLog(commitment="100")
        al.issue("INV-000001", JAN, "20100.00")
        late = al.record("2027-01-20T10:00:00Z", 3600, received_at="2027-02-01T02:00:00Z")
        true_up = taxed({"kind": "true_up", "description": f"Minimum commitment true-up, contract {CONTRACT}",
                         "region": "west", "contract": CONTRACT, "quantity": "1", "unit": "period",
                         "unit_price": "100", "net": "100.00", "records": 0})
        feb = make_invoice(al, FEB, [fee_line(FEB), late_line(JAN, "3600", "1", "9.5", "9.50", 1), true_up],
                           [allowance_row(FEB, "3600", "0", "0")],
                           [{"contract": CONTRACT, "committed": "100.00", "drawn": "0.00", "true_up": "100.00"}])
        self.assertPass(self.check(al, feb, [late]))

    def test_the_command_line(self):
        al, inv = self.january()
        size = inv["checkpoint_size"]
        records = al.records_in(JAN)
        context = producer.context_for(al.log, size, records, "acme", invoice=True)
        bundle = self.write("bundle.ndjson", producer.bundle_bytes(
            producer.make_bundle(al.log, size, context, records, {"invoice": inv["number"]})))
        path = self.write("invoice.json", json.dumps(inv, ensure_ascii=False))
        key = self.write("key.txt", al.log.verifier_key() + "\n")
        out = io.StringIO()
        with redirect_stdout(out):
            rc = gv.main(["bundle", "--bundle", bundle, "--log-key", key, "--invoice", path])
        self.assertEqual(rc, 0, out.getvalue())
        self.assertIn("1 allowances rows (included GPU-hours)", out.getvalue())


# --- the rule's pieces ----------------------------------------------------------------------------


class Pieces(unittest.TestCase):
    """allowance_gpu_seconds, late_period and the split rule, with figures worked out by hand."""

    def test_the_allowance_is_prorated_and_rounded_half_even(self):
        span = gv.BillingSpan(ts("2027-01-16T00:00:00Z"), ts(JAN[1]), ts(JAN[0]), ts(JAN[1]))
        # 1 GPU-hour over 16 of 31 days: 57600/31 = 1858.0645161… → 1858.064516.
        self.assertEqual(gv.allowance_gpu_seconds(inc(gpu_hours="1"), span), Fraction("1858.064516"))
        # 2000 GPU-hours: 7200000 × 16/31 = 3716129.0322580… → 3716129.032258.
        self.assertEqual(gv.allowance_gpu_seconds(inc(), span), Fraction("3716129.032258"))
        whole = gv.BillingSpan(ts(JAN[0]), ts(JAN[1]), ts(JAN[0]), ts(JAN[1]))
        self.assertEqual(gv.allowance_gpu_seconds(inc(gpu_hours="0.0001"), whole), Fraction("0.36"))

    def test_late_is_after_the_last_earlier_invoice(self):
        ev = gv.SlaEvidence(earlier=[(ts(JAN[0]), ts(JAN[1]), 10), (ts(FEB[0]), ts(FEB[1]), 20)],
                            excluded=frozenset({25}))
        mar = (ts(MAR[0]), ts(MAR[1]))
        jan_start = ts("2027-01-20T00:00:00Z")
        self.assertEqual(gv.late_period(20, jan_start, *mar, ev), (ts(JAN[0]), ts(JAN[1])))
        self.assertIsNone(gv.late_period(19, jan_start, *mar, ev))  # invoiced by February's invoice
        self.assertIsNone(gv.late_period(25, jan_start, *mar, ev))  # excluded
        self.assertIsNone(gv.late_period(30, ts("2027-03-02T00:00:00Z"), *mar, ev))  # the invoice's own period
        self.assertIsNone(gv.late_period(30, ts("2026-12-20T00:00:00Z"), *mar, ev))  # no invoiced period

    def test_split_periods_are_refused_with_included_hours(self):
        ch = gv.contract_charges(body(), ts(JAN[0]), ts("2027-01-16T00:00:00Z"))
        self.assertEqual((ch.split.start, ch.split.end), (ts(JAN[0]), ts(JAN[1])))
        plain = body(fees=[producer.fee(FEE_NAME, "20000", lease=LEASE)])
        self.assertIsNone(gv.contract_charges(plain, ts(JAN[0]), ts("2027-01-16T00:00:00Z")).split)


class FixtureInvoice(RustInvoiceFixture):
    """tests/fixtures/allowances/ (invoice.json, bundle.ndjson, verifier_key.txt), written by
    the Rust ledger (tests/allowances.rs): acme's February 2027 invoice under a contract of
    20 000 a month for lease-acme with 1 000 H100-hours included and 9.50 above: 240 GPU-hours
    used in February (10 records of one GPU for a day), and a late January record (one GPU for
    2 hours) billed as overage of January, 2 × 9.50 = 19.00. Skipped, loudly, while the Rust
    side has not written it."""

    def fixture_dir(self):
        return os.path.join(REPO, "tests", "fixtures", "allowances")

    def test_the_fixture_is_the_scenario(self):
        inv = self.invoice
        self.assertEqual([l["kind"] for l in inv["lines"]], ["fee", "included", "overage"])
        included, late = inv["lines"][1], inv["lines"][2]
        # The test's own arithmetic: 10 days of one GPU = 864000 s = 240 GPU-h; 7200 s at 9.50.
        self.assertEqual((included["gpu_seconds"], included["quantity"], included["net"], included["records"]),
                         (str(10 * 86400), "240", "0.00", 10))
        self.assertEqual((late["gpu_seconds"], late["net"], late["adjustment_for"]),
                         ("7200", "19.00", {"from": "2027-01-01T00:00:00Z", "to": "2027-02-01T00:00:00Z"}))
        self.assertEqual(Fraction(7200) * Fraction("9.50") / 3600, Fraction(19))
        self.assertEqual(inv["allowances"][0]["used_gpu_seconds"], str(10 * 86400))
        self.assertEqual(inv["total"], "20019.00")

    def test_passes(self):
        self.assertPass(self.check(self.invoice))

    def test_each_recomputed_member_altered_fails(self):
        for i, member, value in ((1, "quantity", "250"), (1, "gpu_seconds", "900000"), (2, "net", "9.50"),
                                 (2, "unit_price", "4.75"), (2, "records", 2), (1, "description", "Included")):
            with self.subTest(line=i, member=member):
                inv = copy.deepcopy(self.invoice)
                inv["lines"][i][member] = value
                self.assertFail(self.check(inv), "claim_mismatch", f"lines[{i}].{member}")
        inv = copy.deepcopy(self.invoice)
        inv["allowances"][0]["included_gpu_seconds"] = "7200000"
        self.assertFail(self.check(inv), "claim_mismatch", "allowances")


if __name__ == "__main__":
    unittest.main()
