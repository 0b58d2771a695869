"""An invoice's usage lines re-rated from its bundle (docs/RATING.md; crates/core/src/rating.rs
`PriceBook`, `Rater`, `graduate`; crates/core/src/invoice.rs `InvoiceScope`, `InvoiceRating`,
`lines_v2`, `InvoiceCheck`): `bundle --invoice` recomputes the `gpu` and `energy` lines (and
the adjustment lines of late records) from the records and the context's prices, as the Rust
verifier does, and names the first difference.

The rules: a usage record is priced per GPU-hour by the price in force for its region, GPU
model and lease class, second by second (split at every price change inside it; spot leases by
the spot prices); energy at kWh × PUE × the electricity price in force at its start; a tenant on
a plan with volume tiers for a series pays by graduated volume (late records continue the count
after the invoiced records); each line (one per currency and key) rounded half-even once; lines
ordered by region, GPU model, class, tier, unit price, energy last. A record excluded by a
record_excluded entry is listed, not billed; a contract-priced record makes no rate-card line.

The figures are worked out by hand in each test's docstring (the golden scenario is
rating.rs's own, `golden_scenario_to_the_last_digit`), not with the verifier's arithmetic."""

import copy
import json
import os
import unittest
from fractions import Fraction

from support import REPO, VerifierTestCase, gv, producer

NOV = ("2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z")
OCT = ("2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z")
AT = "2026-10-01T00:00:00Z"  # registrations and prices
FIXTURES = os.path.join(REPO, "tests", "fixtures")


def ts(text):
    return gv.parse_timestamp(text)


def money(x) -> str:
    return gv.fixed_str(Fraction(x), 2)


def taxed(line):
    return dict(line, tax_rate="0", tax="0.00", gross=line["net"])


def gpu_line(region, cls, seconds, quantity, unit_price, net, records=1, model="H100", label=None,
             plan=None, tier=None, adjustment_for=None):
    """A `gpu` line as the ledger writes it (tax 0)."""
    description = f"GPU compute, {model}, {region}, {label or cls.replace('_', '-')}"
    line = {"kind": "gpu", "description": description, "region": region, "gpu_model": model, "class": cls,
            "quantity": quantity, "unit": "GPU-h", "gpu_seconds": seconds, "unit_price": unit_price, "net": net,
            "records": records}
    if plan is not None:
        line.update(plan=plan, tier=tier, description=f"{description}, volume tier {tier} of plan {plan}")
    if adjustment_for is not None:
        line["adjustment_for"] = {"from": adjustment_for[0], "to": adjustment_for[1]}
    return taxed(line)


def energy_line(region, measured, pue, billed, unit_price, net, records=1):
    return taxed({"kind": "energy", "description": f"Electricity, {region}, PUE {pue}", "region": region,
                  "quantity": billed, "unit": "kWh", "measured_kwh": measured, "pue": pue, "unit_price": unit_price,
                  "net": net, "records": records})


class UsageLog:
    """A producer log of tenant acme: node-w in west (16 H100) and node-e in east (16 H100), each
    with its node key; leases lease-w (on-demand, 8 H100 of node-w), lease-e (on-demand, 8 of
    node-e) and lease-spot (spot, 2 of node-w); rate cards of on-demand H100, 18.5 in west and
    24 in east (CNY, from 1 October 2026); west's region parameters (0.28 per kWh, PUE 1.08).
    `spot` logs rating.rs's spot prices in west on 10 November (9 from 00:00, 7.2 from 00:15,
    11.35 from 00:40, 8 from 00:50); `tiers` puts acme on plan gold, whose on-demand H100 in
    west is 20 per GPU-hour up to 1 GPU-hour, 10 above."""

    def __init__(self, spot=True, tiers=False, origin="test.gpuledger/usage"):
        self.log = log = producer.Log(producer.Key.from_byte(0xb1), origin)
        self.keys = {"node-w": producer.Key.from_byte(0xb2), "node-e": producer.Key.from_byte(0xb3)}
        log.policy(AT)
        log.tenant("acme", AT)
        log.node("node-w", "west", AT, {"H100": 16})
        log.node("node-e", "east", AT, {"H100": 16})
        log.register("node-w", self.keys["node-w"], "node", AT, regions=["west"])
        log.register("node-e", self.keys["node-e"], "node", AT, regions=["east"])
        log.lease("lease-w", "acme", "on_demand", AT, [producer.lease_count("node-w", "H100", "8")])
        log.lease("lease-e", "acme", "on_demand", AT, [producer.lease_count("node-e", "H100", "8")])
        log.lease("lease-spot", "acme", "spot", AT, [producer.lease_count("node-w", "H100", "2")])
        log.rate_card("west", "H100", "on_demand", "18.5", AT, AT)
        log.rate_card("east", "H100", "on_demand", "24", AT, AT)
        log.region_params("west", "1.08", "530", AT, AT, price="0.28")
        if tiers:
            log.tenant_plan("acme", "gold", AT, AT)
            log.volume_tiers("gold", "west", "H100", "on_demand",
                             [{"up_to_gpu_hours": "1", "price_per_gpu_hour": "20"}, {"price_per_gpu_hour": "10"}],
                             AT, AT)
        if spot:
            market = producer.Key.from_byte(0xb4)
            log.register("market-1", market, "market", AT, regions=["west"])
            for at, price in (("00:00", "9"), ("00:15", "7.2"), ("00:40", "11.35"), ("00:50", "8")):
                log.spot_price("market-1", market, "west", "H100", price, f"2026-11-10T{at}:00Z",
                               "2026-11-09T12:00:00Z")

    def usage(self, node, lease, count, start, seconds, **kw):
        region = "west" if node == "node-w" else "east"
        return self.log.gpu_usage(node, self.keys[node], "acme", region, "H100", count, start, seconds,
                                  lease=lease, **kw)

    def energy(self, kwh, start, seconds, **kw):
        return self.log.energy("node-w", self.keys["node-w"], "acme", "west", kwh, start, seconds, **kw)

    def records_in(self, period):
        lo, hi = ts(period[0]), ts(period[1])
        return [e.index for e in self.log.entries if e.kind in ("gpu_usage", "energy")
                and lo <= ts(e.body["start"]) < hi]


def make_invoice(ul, period, lines, number="INV-000002", excluded=None):
    """A version 2 invoice of acme for `period` at the log's size, with `lines` (tax 0) and its
    totals their sums, and `excluded` ([(entry, reason)]) if given."""
    log = ul.log
    size = len(log.entries)
    total = money(sum((Fraction(l["net"]) for l in lines), Fraction(0)))
    inv = {"format": "gpuledger-invoice/v2", "number": number, "tenant": "acme",
           "period": {"from": period[0], "to": period[1]}, "currency": "CNY",
           "issued_at": gv.format_ts(ts(period[1]) + 3600), "log_origin": log.origin, "checkpoint_size": size,
           "checkpoint_root": producer.b64(log.root(size)), "issuer": {"name": log.origin, "address": []},
           "bill_to": {"tenant": "acme", "name": "acme", "address": []}, "payment_terms_days": 30,
           "due_at": gv.format_ts(ts(period[1]) + 3600 + 30 * 86400), "lines": lines,
           "net_total": total, "tax_total": "0.00", "total": total}
    if excluded:
        inv["excluded"] = [{"entry": e, "reason": r} for e, r in excluded]
    return inv


def totals_of(inv):
    """The invoice with its totals the sums of its lines (tax 0)."""
    total = money(sum((Fraction(l["net"]) for l in inv["lines"]), Fraction(0)))
    inv.update(net_total=total, total=total)
    return inv


class RatedInvoices(VerifierTestCase):
    """Invoices of acme over a UsageLog, checked with `bundle --invoice` against a bundle (at the
    invoice's size) of the records given (those starting in its period unless told)."""

    def check(self, ul, inv, records=None):
        log = ul.log
        size = inv["checkpoint_size"]
        period = (inv["period"]["from"], inv["period"]["to"])
        records = sorted(ul.records_in(period) if records is None else records)
        context = producer.context_for(log, size, records, "acme", invoice=True)
        data = producer.bundle_bytes(producer.make_bundle(log, size, context, records, {"invoice": inv["number"]}))
        bundle = self.write("bundle.ndjson", data)
        path = self.write("invoice.json", json.dumps(inv, ensure_ascii=False))
        return gv.verify_bundle(bundle, gv.parse_verifier_key(log.verifier_key()), path)

    def golden(self):
        """rating.rs's golden scenario, in November: 8 GPUs for an hour on-demand in west (8 ×
        18.5 = 148.00); 0.5 GPU for 10 minutes on-demand in east (0.5 × 600 × 24 / 3600 =
        2.00); 2 spot GPUs from 00:05 to 00:55 in west, split at 00:15, 00:40 and 00:50: 1200
        GPU-s at 9 (3.00), 3000 at 7.2 (6.00), 1200 at 11.35 (3.7833… → 3.78), 600 at 8
        (1.3333… → 1.33); 12.5 kWh in west: 12.5 × 1.08 × 0.28 = 3.78 (13.5 billed kWh). Lines by
        key: east, west on-demand, west spot by price (7.2, 8, 9, 11.35), energy; total 167.89."""
        ul = UsageLog()
        ul.usage("node-w", "lease-w", "8", "2026-11-10T00:00:00Z", 3600)
        ul.usage("node-e", "lease-e", "0.5", "2026-11-10T00:00:00Z", 600)
        ul.usage("node-w", "lease-spot", "2", "2026-11-10T00:05:00Z", 3000)
        ul.energy("12.5", "2026-11-10T00:00:00Z", 3600)
        self.assertEqual(round(Fraction(1200) * Fraction("11.35") / 3600, 2), Fraction("3.78"))
        self.assertEqual(Fraction("12.5") * Fraction("1.08") * Fraction("0.28"), Fraction("3.78"))
        inv = make_invoice(ul, NOV, [
            gpu_line("east", "on_demand", "300", "0.083333", "24", "2.00"),
            gpu_line("west", "on_demand", "28800", "8", "18.5", "148.00"),
            gpu_line("west", "spot", "3000", "0.833333", "7.2", "6.00"),
            gpu_line("west", "spot", "600", "0.166667", "8", "1.33"),
            gpu_line("west", "spot", "1200", "0.333333", "9", "3.00"),
            gpu_line("west", "spot", "1200", "0.333333", "11.35", "3.78"),
            energy_line("west", "12.5", "1.08", "13.5", "0.28", "3.78"),
        ], number="INV-000001")
        self.assertEqual(inv["total"], "167.89")
        return ul, inv

    def test_the_golden_scenario(self):
        ul, inv = self.golden()
        r = self.check(ul, inv)
        self.assertPass(r)
        s = r.summary["invoice"]
        self.assertEqual((s["usage_lines"], s["other_lines"], s["usage_lines_rerated"]), (7, 0, True))
        self.assertEqual(s["records_placed"], {"period": 4})
        self.assertIn("7 usage and 0 adjustment lines re-rated from the bundle's 4 records", r.message)

    def test_a_tampered_gpu_line(self):
        """Each member of the west on-demand line (lines[1]) altered, the totals kept consistent
        with the lines: the first differing member is named."""
        ul, inv = self.golden()
        edits = {
            "lines[1].gross": lambda l: l.update(net="148.01", gross="148.01"),
            "lines[1].net": lambda l: l.update(net="148.01"),
            "lines[1].quantity": lambda l: l.update(quantity="8.000001"),
            "lines[1].unit_price": lambda l: l.update(unit_price="18.50"),
            "lines[1].records": lambda l: l.update(records=2),
            "lines[1].gpu_seconds": lambda l: l.update(gpu_seconds="28801"),
            "lines[1].class": lambda l: l.update({"class": "reserved"}),
            "lines[1].description": lambda l: l.update(description="GPU compute, H100, west"),
            "lines[1].region": lambda l: l.update(region="east"),
            "lines[1].plan": lambda l: l.update(plan="gold", tier=1),
            "lines[1].adjustment_for": lambda l: l.update(adjustment_for={"from": OCT[0], "to": OCT[1]}),
        }
        for item, edit in edits.items():
            with self.subTest(item):
                changed = copy.deepcopy(inv)
                edit(changed["lines"][1])
                self.assertFail(self.check(ul, totals_of(changed)), "claim_mismatch", item)
        # A consistent lie about price and amount together: 8 GPU-h at 18 = 144.00.
        changed = copy.deepcopy(inv)
        changed["lines"][1].update(unit_price="18", net="144.00", gross="144.00")
        self.assertFail(self.check(ul, totals_of(changed)), "claim_mismatch", "lines[1].gross")

    def test_a_usage_line_added_removed_or_moved(self):
        ul, inv = self.golden()
        removed = copy.deepcopy(inv)
        del removed["lines"][3]
        self.assertFail(self.check(ul, totals_of(removed)), "claim_mismatch", "lines[3].gpu_seconds")
        last = copy.deepcopy(inv)
        del last["lines"][6]
        self.assertFail(self.check(ul, totals_of(last)), "claim_mismatch", "lines[6]")
        added = copy.deepcopy(inv)
        added["lines"].append(gpu_line("west", "on_demand", "3600", "1", "18.5", "18.50"))
        self.assertFail(self.check(ul, totals_of(added)), "claim_mismatch", "lines[7]")
        moved = copy.deepcopy(inv)
        moved["lines"][0], moved["lines"][1] = moved["lines"][1], moved["lines"][0]
        self.assertFail(self.check(ul, moved), "claim_mismatch", "lines[0].description")
        # A record the invoice does not bill is still in the bundle: its line is missing.
        self.assertFail(self.check(ul, totals_of(removed), ul.records_in(NOV)), "claim_mismatch",
                        "lines[3].gpu_seconds")

    def test_the_bundle_decides_the_lines(self):
        """The same invoice against a bundle without the energy record: it bills a line the
        records do not make."""
        ul, inv = self.golden()
        records = [i for i in ul.records_in(NOV) if ul.log.entries[i].kind == "gpu_usage"]
        self.assertFail(self.check(ul, inv, records), "claim_mismatch", "lines[6]")

    def test_a_price_change_inside_a_record(self):
        """East's on-demand price becomes 36 at 20 November 00:00:30: a record of 1 GPU from
        00:00:00 to 00:01:00 is split: 30 GPU-s at 24 and 30 at 36. East's 24 line: 300 + 30 =
        330 GPU-s, 330 × 24 / 3600 = 2.20, 2 records; the 36 line: 30 × 36 / 3600 = 0.30."""
        ul = UsageLog(spot=False)
        ul.usage("node-e", "lease-e", "0.5", "2026-11-10T00:00:00Z", 600)
        ul.log.rate_card("east", "H100", "on_demand", "36", "2026-11-20T00:00:30Z", "2026-11-19T00:00:00Z")
        ul.usage("node-e", "lease-e", "1", "2026-11-20T00:00:00Z", 60)
        inv = make_invoice(ul, NOV, [
            gpu_line("east", "on_demand", "330", "0.091667", "24", "2.20", records=2),
            gpu_line("east", "on_demand", "30", "0.008333", "36", "0.30"),
        ])
        self.assertPass(self.check(ul, inv))
        # Rated whole at the price in force at its start, it would be 60 GPU-s at 24.
        whole = make_invoice(ul, NOV, [gpu_line("east", "on_demand", "360", "0.1", "24", "2.40", records=2)])
        self.assertFail(self.check(ul, whole), "claim_mismatch", "lines[0].gpu_seconds")

    def test_usage_no_price_prices(self):
        """A record starting before east's first price: usage of the period left unpriced, which
        the ledger never invoices: `claim_mismatch`, item `invoice`, whatever the lines say."""
        ul = UsageLog(spot=False)
        ul.log.rate_card("east", "H100", "reserved", "30", "2026-11-20T00:00:30Z", "2026-11-19T00:00:00Z")
        ul.log.lease("lease-r", "acme", "reserved", "2026-11-19T00:00:00Z",
                     [producer.lease_count("node-e", "H100", "1")], start="2026-11-01T00:00:00Z")
        ul.usage("node-e", "lease-r", "1", "2026-11-20T00:00:00Z", 60)
        inv = make_invoice(ul, NOV, [gpu_line("east", "reserved", "30", "0.008333", "30", "0.25")])
        r = self.check(ul, inv)
        self.assertFail(r, "claim_mismatch", "invoice")
        self.assertIn("no rate card in force (east, H100, reserved): 30 GPU-seconds of 1 records", r.message)

    def test_energy(self):
        """Energy alone: 0.123456789 kWh × PUE 1.08 = 0.13333333212 → 0.133333 billed kWh, ×
        0.28 = 0.0373333… → 0.04; with the 12.5 kWh record: 12.623456789 kWh, billed 13.633333
        (13.63333333212 half-even), net 12.623456789 × 1.08 × 0.28 = 3.81733333… → 3.82, 2
        records."""
        ul = UsageLog(spot=False)
        ul.energy("0.123456789", "2026-11-10T00:00:00Z", 3600)
        inv = make_invoice(ul, NOV, [energy_line("west", "0.123456789", "1.08", "0.133333", "0.28", "0.04")])
        self.assertPass(self.check(ul, inv))
        ul.energy("12.5", "2026-11-11T00:00:00Z", 3600)
        self.assertEqual(round(Fraction("12.623456789") * Fraction("1.08") * Fraction("0.28"), 2), Fraction("3.82"))
        inv = make_invoice(ul, NOV, [energy_line("west", "12.623456789", "1.08", "13.633333", "0.28", "3.82", 2)])
        self.assertPass(self.check(ul, inv))
        for member, value in (("quantity", "13.63333333212"), ("measured_kwh", "12.62345679"), ("pue", "1"),
                              ("unit_price", "0.3"), ("records", 1)):
            with self.subTest(member):
                changed = copy.deepcopy(inv)
                changed["lines"][0][member] = value
                self.assertFail(self.check(ul, changed), "claim_mismatch", f"lines[0].{member}")

    def tiered(self):
        """Plan gold (20 up to 1 GPU-h, 10 above). October: record A, 1 GPU for half an hour on
        15 October (1800 GPU-s), invoiced by INV-000001 (at the log's size then); record B, 1 GPU
        for an hour on 31 October 22:00, logged after it (late). November: record C, 2 GPUs for
        an hour on 10 November (7200 GPU-s); record D, 1 GPU for 10 minutes on 11 November.
        Returns the log and the records (a, b, c, d)."""
        ul = UsageLog(spot=False, tiers=True)
        a = ul.usage("node-w", "lease-w", "1", "2026-10-15T10:00:00Z", 1800)
        ul.log.invoice("INV-000001", "acme", OCT[0], OCT[1], len(ul.log.entries), "2026-11-01T01:00:00Z",
                       total="10.00")
        b = ul.usage("node-w", "lease-w", "1", "2026-10-31T22:00:00Z", 3600, received_at="2026-11-01T02:00:00Z")
        c = ul.usage("node-w", "lease-w", "2", "2026-11-10T00:00:00Z", 3600)
        d = ul.usage("node-w", "lease-w", "1", "2026-11-11T00:00:00Z", 600)
        return ul, (a, b, c, d)

    def test_volume_tiers_and_late_records(self):
        """November's volume (C and D: 7800 GPU-s): tier 1 3600 (1 GPU-h at 20 = 20.00), tier 2
        4200 (1.166667 GPU-h at 10 = 11.67), each line counting both records. The late record B
        continues October's count after the invoiced A (1800): tier 1 from 1800 to 3600 (0.5
        GPU-h: 10.00), tier 2 1800 (0.5 GPU-h: 5.00), adjustment lines for October, last."""
        ul, (a, b, c, d) = self.tiered()
        self.assertEqual(round(Fraction(4200) * 10 / 3600, 2), Fraction("11.67"))
        inv = make_invoice(ul, NOV, [
            gpu_line("west", "on_demand", "3600", "1", "20", "20.00", 2, plan="gold", tier=1),
            gpu_line("west", "on_demand", "4200", "1.166667", "10", "11.67", 2, plan="gold", tier=2),
            gpu_line("west", "on_demand", "1800", "0.5", "20", "10.00", 1, plan="gold", tier=1, adjustment_for=OCT),
            gpu_line("west", "on_demand", "1800", "0.5", "10", "5.00", 1, plan="gold", tier=2, adjustment_for=OCT),
        ])
        records = [a, b, c, d]
        r = self.check(ul, inv, records)
        self.assertPass(r)
        s = r.summary["invoice"]
        self.assertEqual((s["usage_lines"], s["other_lines"]), (2, 2))
        self.assertEqual(s["records_placed"], {"invoiced": 1, "late": 1, "period": 2})
        # The invoiced record left out of the bundle: B's count starts at 0 (tier 1 only).
        self.assertFail(self.check(ul, inv, [b, c, d]), "claim_mismatch", "lines[2].gpu_seconds")
        # At the rate card instead of the tiers.
        flat = copy.deepcopy(inv)
        flat["lines"][:2] = [gpu_line("west", "on_demand", "7800", "2.166667", "18.5", "40.08", 2)]
        self.assertFail(self.check(ul, totals_of(flat), records), "claim_mismatch", "lines[0].description")
        # The adjustment lines with the invoice's own.
        moved = copy.deepcopy(inv)
        moved["lines"].insert(0, moved["lines"].pop())
        self.assertFail(self.check(ul, moved, records), "claim_mismatch", "lines[0].adjustment_for")

    def test_an_excluded_record_is_listed_not_billed(self):
        """D excluded by a record_excluded entry of acme: November's volume is C's 7200 GPU-s
        (tier 1 20.00, tier 2 10.00, 1 record each); `excluded` lists D with the reason."""
        ul, (a, b, c, d) = self.tiered()
        ul.log.exclude("acme", d, "tenant disputes the job", "2026-11-30T00:00:00Z")
        late = [gpu_line("west", "on_demand", "1800", "0.5", "20", "10.00", 1, plan="gold", tier=1,
                         adjustment_for=OCT),
                gpu_line("west", "on_demand", "1800", "0.5", "10", "5.00", 1, plan="gold", tier=2,
                         adjustment_for=OCT)]
        inv = make_invoice(ul, NOV, [
            gpu_line("west", "on_demand", "3600", "1", "20", "20.00", 1, plan="gold", tier=1),
            gpu_line("west", "on_demand", "3600", "1", "10", "10.00", 1, plan="gold", tier=2),
        ] + late, excluded=[(d, "tenant disputes the job")])
        records = [a, b, c, d]
        r = self.check(ul, inv, records)
        self.assertPass(r)
        self.assertEqual(r.summary["invoice"]["excluded"], 1)
        # Billed anyway (its 600 GPU-s in tier 2, 11.67), or not listed.
        billed = copy.deepcopy(inv)
        billed["lines"][1] = gpu_line("west", "on_demand", "4200", "1.166667", "10", "11.67", 2, plan="gold", tier=2)
        self.assertFail(self.check(ul, totals_of(billed), records), "claim_mismatch", "lines[1].gpu_seconds")
        unlisted = copy.deepcopy(inv)
        del unlisted["excluded"]
        self.assertFail(self.check(ul, unlisted, records), "claim_mismatch", "excluded")
        wrong_reason = copy.deepcopy(inv)
        wrong_reason["excluded"][0]["reason"] = "disputed"
        self.assertFail(self.check(ul, wrong_reason, records), "claim_mismatch", "excluded")

    def test_records_outside_or_of_another_tenant(self):
        """A record starting in no period the invoice covers is `outside_period`; one of
        another tenant `wrong_tenant` (the bundle is the invoice's tenant's), both `entry N`."""
        ul, (a, b, c, d) = self.tiered()
        inv = make_invoice(ul, NOV, [])
        # Without INV-000001 in the bundle, A and B start in no covered period.
        size = inv["checkpoint_size"]
        context = [i for i in producer.context_for(ul.log, size, [a, c], "acme", invoice=True)
                   if ul.log.entries[i].kind != "invoice_issued"]
        data = producer.bundle_bytes(producer.make_bundle(ul.log, size, context, [a, c], {"invoice": "INV-000002"}))
        path = self.write("invoice.json", json.dumps(inv))
        r = gv.verify_bundle(self.write("bundle.ndjson", data), gv.parse_verifier_key(ul.log.verifier_key()), path)
        self.assertFail(r, "outside_period", f"entry {a}")
        # Another tenant's record.
        ul.log.tenant("beta", "2026-11-12T00:00:00Z")
        ul.log.lease("lease-b", "beta", "on_demand", "2026-11-12T00:00:00Z",
                     [producer.lease_count("node-e", "H100", "1")], start="2026-11-12T00:00:00Z")
        other = ul.log.gpu_usage("node-e", ul.keys["node-e"], "beta", "east", "H100", "1", "2026-11-13T00:00:00Z", 60,
                                 lease="lease-b")
        other_inv = make_invoice(ul, NOV, [])
        log = ul.log
        size = other_inv["checkpoint_size"]
        context = sorted(set(producer.context_for(log, size, [c], "acme", invoice=True))
                         | set(producer.context_for(log, size, [other], "beta")))
        data = producer.bundle_bytes(producer.make_bundle(log, size, context, [c, other], {"invoice": "INV-000002"}))
        path = self.write("invoice.json", json.dumps(other_inv))
        r = gv.verify_bundle(self.write("bundle.ndjson", data), gv.parse_verifier_key(log.verifier_key()), path)
        self.assertFail(r, "wrong_tenant")
        self.assertTrue(r.item.startswith(f"entry {other} "), r.item)


class RustFixtures(VerifierTestCase):
    """The Rust ledger's invoices (tests/fixtures/*) pass re-rated; edits of their usage lines
    fail where the Rust verifier says."""

    def check(self, name, inv=None):
        d = os.path.join(FIXTURES, name)
        if inv is None:
            path = os.path.join(d, "invoice.json")
        else:
            path = self.write("invoice.json", json.dumps(inv, ensure_ascii=False))
        return gv.verify_bundle(os.path.join(d, "bundle.ndjson"),
                                gv.load_verifier_key(os.path.join(d, "verifier_key.txt")), path)

    def load(self, name):
        with open(os.path.join(FIXTURES, name, "invoice.json"), "rb") as f:
            return json.loads(f.read())

    def test_every_fixture_passes_re_rated(self):
        for name in ("allowances", "amendment", "contract", "golden-jan", "golden-mar", "prepaid", "sla"):
            with self.subTest(name):
                if not os.path.exists(os.path.join(FIXTURES, name, "invoice.json")):
                    self.skipTest(f"tests/fixtures/{name} is not committed")
                r = self.check(name)
                self.assertPass(r)
                self.assertTrue(r.summary["invoice"]["usage_lines_rerated"])
                usage = [l for l in self.load(name)["lines"] if l["kind"] in ("gpu", "energy")]
                self.assertEqual(r.summary["invoice"]["usage_lines"] + r.summary["invoice"]["other_lines"], len(usage))

    def test_golden_march_usage_tampered(self):
        """golden-mar's gpu line (480 GPU-h at 18.5 = 8880.00, 10 records), altered with the
        totals kept consistent."""
        inv = self.load("golden-mar")
        if inv["lines"][0]["kind"] != "gpu":
            self.skipTest("the fixture's first line is not a gpu line")
        for item, edit in (("lines[0].net", lambda l: l.update(net="8880.01")),
                           ("lines[0].gross", lambda l: l.update(net="8879.99", gross="8879.99")),
                           ("lines[0].quantity", lambda l: l.update(quantity="480.5")),
                           ("lines[0].unit_price", lambda l: l.update(unit_price="18.4")),
                           ("lines[0].records", lambda l: l.update(records=9))):
            with self.subTest(item):
                changed = copy.deepcopy(inv)
                edit(changed["lines"][0])
                self.assertFail(self.check("golden-mar", totals_of(changed)), "claim_mismatch", item)
        removed = copy.deepcopy(inv)
        del removed["lines"][0]
        self.assertFail(self.check("golden-mar", totals_of(removed)), "claim_mismatch", "lines[0].category")
        added = copy.deepcopy(inv)
        added["lines"].insert(1, copy.deepcopy(added["lines"][0]))
        self.assertFail(self.check("golden-mar", totals_of(added)), "claim_mismatch", "lines[1].category")

    def test_a_contract_priced_record_billed_at_the_rate_card(self):
        """golden-jan's records are all contract-priced (included and overage lines, no gpu
        line): a gpu line billing them too is not what the bundle makes."""
        inv = self.load("golden-jan")
        if any(l["kind"] == "gpu" for l in inv["lines"]):
            self.skipTest("the fixture has a gpu line")
        included = next(l for l in inv["lines"] if l["kind"] == "included")
        changed = copy.deepcopy(inv)
        changed["lines"].insert(0, gpu_line(included["region"], "reserved", included["gpu_seconds"],
                                            included["quantity"], "18.5", "0.00", included["records"]))
        self.assertFail(self.check("golden-jan", totals_of(changed)), "claim_mismatch", "lines[0].category")


class PureRating(unittest.TestCase):
    """The rating functions on their own, with rating.rs's figures."""

    def test_graduate(self):
        tiers = [(Fraction(1), Fraction(20)), (Fraction(3), Fraction(15)), (None, Fraction(10))]
        self.assertEqual(gv.graduate(tiers, Fraction(0), Fraction(7200)), [(0, Fraction(3600)), (1, Fraction(3600))])
        self.assertEqual(gv.graduate(tiers, Fraction(1800), Fraction(18000)),
                         [(0, Fraction(1800)), (1, Fraction(7200)), (2, Fraction(7200))])
        self.assertEqual(gv.graduate(tiers, Fraction(3600), Fraction(3600)), [])
        # The last tier is open whatever it says.
        self.assertEqual(gv.graduate([(Fraction(1), Fraction(20))], Fraction(0), Fraction(7200)), [(0, Fraction(7200))])

    def test_the_golden_scenario_to_the_last_digit(self):
        book = gv.PriceBook()
        at = "2026-11-01T00:00:00Z"
        book.add_entry("rate_card", {"region": "west", "gpu_model": "H100", "lease_class": "on_demand",
                                     "currency": "CNY", "price_per_gpu_hour": "18.5", "effective_from": at})
        book.add_entry("rate_card", {"region": "east", "gpu_model": "H100", "lease_class": "on_demand",
                                     "currency": "CNY", "price_per_gpu_hour": "24", "effective_from": at})
        book.add_entry("lease_registered", {"lease": "spot-1", "class": "spot"})
        for t, p in (("00:00", "9"), ("00:15", "7.2"), ("00:40", "11.35"), ("00:50", "8")):
            book.add_entry("spot_price", {"region": "west", "gpu_model": "H100", "currency": "CNY",
                                          "price_per_gpu_hour": p, "effective_from": f"2026-11-10T{t}:00Z"})
        book.add_entry("region_params", {"region": "west", "currency": "CNY", "electricity_price_per_kwh": "0.28",
                                         "pue": "1.08", "carbon_g_per_kwh": "530", "effective_from": at})

        def usage(region, lease, count, start, end):
            s, e = ts(start), ts(end)
            return gv.UsageRecord(0, "gpu_usage", "acme", region, s, e, lease, "H100", Fraction(count),
                                  Fraction(count) * (e - s))

        r = gv.Rater(ts(at))
        r.add_usage(book, usage("west", None, "8", "2026-11-10T00:00:00Z", "2026-11-10T01:00:00Z"))
        r.add_usage(book, usage("east", None, "0.5", "2026-11-10T00:00:00Z", "2026-11-10T00:10:00Z"))
        r.add_usage(book, usage("west", "spot-1", "2", "2026-11-10T00:05:00Z", "2026-11-10T00:55:00Z"))
        r.add_energy(book, gv.UsageRecord(0, "energy", "acme", "west", ts("2026-11-10T00:00:00Z"),
                                          ts("2026-11-10T01:00:00Z"), kwh=Fraction("12.5")))
        r.add_energy(book, gv.UsageRecord(0, "energy", "acme", "east", ts("2026-11-10T00:00:00Z"),
                                          ts("2026-11-10T01:00:00Z"), kwh=Fraction(1)))
        lines, unpriced = r.finish()
        self.assertEqual([gv.fixed_str(l.amount, 2) for l in lines["CNY"]],
                         ["2.00", "148.00", "6.00", "1.33", "3.00", "3.78", "3.78"])
        self.assertEqual(sum(l.amount for l in lines["CNY"]), Fraction("167.89"))
        self.assertEqual(unpriced, [("no region parameters in force", "east", None, None, Fraction(1), 1)])

    def test_a_price_change_splits_on_demand_too(self):
        book = gv.PriceBook()
        book.add_entry("rate_card", {"region": "west", "gpu_model": "H100", "lease_class": "on_demand",
                                     "currency": "CNY", "price_per_gpu_hour": "36",
                                     "effective_from": "2026-11-10T00:00:30Z"})
        u = gv.UsageRecord(0, "gpu_usage", "acme", "west", ts("2026-11-10T00:00:00Z"), ts("2026-11-10T00:01:00Z"),
                           None, "H100", Fraction(1), Fraction(60))
        self.assertEqual(book.rate_usage(u), [("on_demand", Fraction(30), None),
                                              ("on_demand", Fraction(30), ("CNY", Fraction(36)))])

    def test_placement(self):
        """invoice.rs `exclusions_take_records_out_of_rating_only`: the invoice of [1 h, 2 h)
        after one of [0, 1 h) computed at log size 10; entries 5, 11 and 12 excluded."""
        t0 = 1_800_000_000
        scope = gv.InvoiceScope(t0 + 3600, t0 + 7200, [(t0, t0 + 3600)], 10)
        excluding = gv.InvoiceScope(t0 + 3600, t0 + 7200, [(t0, t0 + 3600)], 10, {5: "a", 11: "b", 12: "c"})
        jan = (t0, t0 + 3600)
        for index, start, before, after in ((12, 4000, ("period", None), ("excluded", None)),
                                            (11, 60, ("late", jan), ("excluded", None)),
                                            (5, 60, ("invoiced", jan), ("outside", None)),
                                            (13, 4000, ("period", None), ("period", None)),
                                            (12, 9000, ("outside", None), ("outside", None))):
            with self.subTest(index=index):
                self.assertEqual(scope.place(index, t0 + start), before)
                self.assertEqual(excluding.place(index, t0 + start), after)

    def test_line_order(self):
        """rating.rs LineKey's derived Ord: GPU lines before energy; region, model, class
        (on-demand, reserved, spot), tier (none first), unit price by value."""
        k = gv.LineKey
        keys = [k("energy", "a", Fraction(1), pue=Fraction(1)),
                k("gpu", "b", Fraction(1), "H100", "on_demand"),
                k("gpu", "a", Fraction(2), "H100", "spot"),
                k("gpu", "a", Fraction(10), "H100", "reserved"),
                k("gpu", "a", Fraction(9), "H100", "reserved"),
                k("gpu", "a", Fraction(1), "H100", "reserved", "gold", 1),
                k("gpu", "a", Fraction(1), "A100", "spot")]
        ordered = sorted(keys, key=lambda x: x.order())
        self.assertEqual([(x.region, x.gpu_model, x.cls, x.plan, x.unit_price) for x in ordered],
                         [("a", "A100", "spot", None, 1), ("a", "H100", "reserved", None, 9),
                          ("a", "H100", "reserved", None, 10), ("a", "H100", "reserved", "gold", 1),
                          ("a", "H100", "spot", None, 2), ("b", "H100", "on_demand", None, 1),
                          ("a", None, None, None, 1)])
        self.assertEqual(gv.describe(keys[5]), "GPU compute, H100, a, reserved, volume tier 1 of plan gold")
        self.assertEqual(gv.describe(k("energy", "west", Fraction("0.28"), pue=Fraction("1.50"))),
                         "Electricity, west, PUE 1.5")


if __name__ == "__main__":
    unittest.main()
