"""Issue #28's golden scenario (tests/contract_golden.rs), recomputed here twice: by the
verifier's `bundle --invoice` from each fixture's bundle, and by this file's own exact Fraction
arithmetic of the scenario as stated, which reads nothing but the invoice's lines to compare.

The scenario: acme rents its lease of two H100s under contract C-gold, from 2027-01-15 12:00 for
a year, calendar months: 20000 a month in advance, 1000 H100-hours included and 9.50 an hour
above, a minimum spend of 13000 a month, an SLA of 99.9 % (10 % below, 25 % below 99 %). A top-up
of 20000.00 expires on 15 February. One GPU is lost on 20 January from 00:00 to 03:00. C-gold is
amended to end on 10 March; C-gold-2 (15000 a month, nothing included) follows; the lease's
usage from then on is the rate card's (18.50 an hour). The fixtures are January
(tests/fixtures/golden-jan) and March (golden-mar)."""

import os
import unittest
from fractions import Fraction

from support import REPO, RustInvoiceFixture

DAY = 86_400
JAN_FULL = 31 * DAY
JAN_USED = 16 * DAY + DAY // 2  # from the 15th at noon


def half_even(x: Fraction, places: int) -> Fraction:
    """x rounded half to even at `places` decimals, exactly."""
    scaled = x * 10 ** places
    q, r = divmod(scaled.numerator, scaled.denominator)
    twice = 2 * r
    if twice > scaled.denominator or (twice == scaled.denominator and q % 2 == 1):
        q += 1
    return Fraction(q, 10 ** places)


def money(x: Fraction) -> str:
    """A Fraction with at most 2 decimals as the invoice writes it."""
    cents = x * 100
    assert cents.denominator == 1, x
    sign = "-" if cents < 0 else ""
    c = abs(cents.numerator)
    return f"{sign}{c // 100}.{c % 100:02d}"


def overage(used_seconds: int, allowance_seconds: Fraction) -> Fraction:
    return half_even((used_seconds - allowance_seconds) * Fraction("9.50") / 3600, 2)


class GoldenJanuary(RustInvoiceFixture):
    def fixture_dir(self):
        return os.path.join(REPO, "tests", "fixtures", "golden-jan")

    def test_the_verifier_recomputes_it(self):
        self.assertPass(self.check(self.invoice))

    def test_every_line_by_fractions(self):
        share = Fraction(JAN_USED, JAN_FULL)
        fee = half_even(20000 * share, 2)
        allowance = half_even(1000 * 3600 * share, 6)
        used = 2 * JAN_USED - 3 * 3600
        over = overage(used, allowance)
        availability = Fraction(100 * used, 2 * JAN_USED)
        self.assertTrue(99 <= availability < Fraction("99.9"), availability)
        credit = half_even(Fraction(10, 100) * fee, 2)
        committed = half_even(13000 * share, 2)
        true_up = committed - over
        self.assertEqual([(l["kind"], l["net"]) for l in self.invoice["lines"]],
                         [("fee", money(fee)), ("included", "0.00"), ("overage", money(over)),
                          ("sla_credit", money(-credit)), ("true_up", money(true_up))])
        total = fee + over - credit + true_up
        self.assertEqual(self.invoice["total"], money(total))
        # The top-up pays it all; what is left of it expires on 15 February.
        self.assertEqual(self.invoice["prepaid"], [{"prepayment": "TOPUP-GOLD", "source": "purchase",
                                                    "amount": money(total)}])
        self.assertEqual(self.invoice["amount_due"], "0.00")
        row = self.invoice["availability"][0]
        self.assertEqual((row["availability"], row["credit_percent"], row["present_gpu_seconds"]),
                         ("99.6212", "10", str(used)))
        self.assertEqual(self.invoice["commitments"],
                         [{"contract": "C-gold", "committed": money(committed), "drawn": money(over),
                           "true_up": money(true_up)}])


class GoldenMarch(RustInvoiceFixture):
    def fixture_dir(self):
        return os.path.join(REPO, "tests", "fixtures", "golden-mar")

    def test_the_verifier_recomputes_it_with_the_amended_term(self):
        r = self.check(self.invoice)
        self.assertPass(r)
        self.assertGreaterEqual(r.summary["entries_by_kind"].get("contract_amended", 0), 1)

    def test_every_line_by_fractions(self):
        share = Fraction(9, 31)  # C-gold's last period: 1 to 10 March
        fee = half_even(20000 * share, 2)
        allowance = half_even(1000 * 3600 * share, 6)
        over = overage(2 * 9 * DAY, allowance)
        usage = 2 * 10 * 24 * Fraction("18.50")  # 10 to 20 March at the rate card
        renewed = half_even(15000 * Fraction(22, 31), 2)
        committed = half_even(13000 * share, 2)
        self.assertGreater(usage + over, committed)  # no true-up
        self.assertEqual([(l["kind"], l["net"]) for l in self.invoice["lines"]],
                         [("gpu", money(usage)), ("fee", money(fee)), ("included", "0.00"),
                          ("overage", money(over)), ("fee", money(renewed))])
        self.assertEqual(self.invoice["total"], money(usage + fee + over + renewed))
        self.assertEqual(self.invoice["lines"][1]["service_period"],
                         {"from": "2027-03-01T00:00:00Z", "to": "2027-03-10T00:00:00Z"})


if __name__ == "__main__":
    unittest.main()
