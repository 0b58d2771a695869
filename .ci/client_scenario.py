"""A short scenario through a Python client generated from schemas/openapi.json by
openapi-python-client (issue #16 item 1), against the live demo started by
.ci/generated_client.sh: typed answers, decimals as strings.

Environment: GPULEDGER_URL, GPULEDGER_ADMIN_TOKEN, GPULEDGER_TENANT_TOKEN (of acme-ai),
GPULEDGER_AUDITOR_TOKEN.
"""

import datetime
import os
import sys
import time
import uuid
from decimal import Decimal

from gpuledger_client import AuthenticatedClient, Client
from gpuledger_client.api.admin import create_tenant, list_tenants
from gpuledger_client.api.invoices import balance, download, get_invoice, issue_invoice, list_invoices
from gpuledger_client.api.log import get_checkpoint, get_entries, get_inclusion, get_log
from gpuledger_client.api.pricing import get_preview, get_prices
from gpuledger_client.api.records import post_records
from gpuledger_client.models import (
    BalanceView,
    DuplicateOutcome,
    EntriesPage,
    Envelope,
    IngestResponse,
    InvoiceSummary,
    IssueRequest,
    NewTenant,
    Preview,
    Problem,
    ProofView,
    Reason,
    RejectedOutcome,
    Tenant,
)

base = os.environ["GPULEDGER_URL"]


def client(var):
    return AuthenticatedClient(base_url=base, token=os.environ[var], raise_on_unexpected_status=True)


admin, tenant, auditor = client("GPULEDGER_ADMIN_TOKEN"), client("GPULEDGER_TENANT_TOKEN"), client("GPULEDGER_AUDITOR_TOKEN")


def typed(answer, cls, what):
    """The answer, which must be of the documented success type (a Problem is a failure)."""
    if isinstance(answer, Problem) or not isinstance(answer, cls):
        sys.exit(f"client scenario: {what}: expected {cls.__name__}, got {answer!r}")
    return answer


def decimal(s, what):
    if not isinstance(s, str):
        sys.exit(f"client scenario: {what}: a decimal must be a string, got {s!r}")
    return Decimal(s)


# Admin: a tenant, then the list holds it.
tid = "client-" + uuid.uuid4().hex[:8]
t = typed(create_tenant.sync(client=admin, body=NewTenant(id=tid, name="Client Scenario Ltd")), Tenant, "create tenant")
assert t.id == tid and t.name == "Client Scenario Ltd", t
assert any(x.id == tid for x in list_tenants.sync(client=admin)), "the new tenant is listed"

# Prices: every entry typed, the demo has some.
prices = get_prices.sync(client=admin)
assert isinstance(prices, list) and prices, prices

# The period: the day up to a second that has passed, so it has ended, as an invoice's period
# must have. The tenant previews it until the fresh demo's agents have delivered acme-ai's
# first GPU and energy records (at most a minute), then checks the lines' decimal strings.
fmt = lambda d: d.strftime("%Y-%m-%dT%H:%M:%SZ")
deadline = time.monotonic() + 60
while True:
    end = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    start = end - datetime.timedelta(days=1)
    preview = typed(get_preview.sync(client=tenant, from_=fmt(start), to=fmt(end)), Preview, "preview")
    kinds = {line.kind.value for c in preview.currencies for line in c.lines}
    if {"gpu", "energy"} <= kinds:
        break
    if time.monotonic() > deadline:
        sys.exit(f"client scenario: no GPU and energy lines for acme-ai after a minute: {preview!r}")
    time.sleep(1)
assert preview.tenant == "acme-ai", preview.tenant
for c in preview.currencies:
    for line in c.lines:
        decimal(line.net, "preview line net")
        decimal(line.quantity, "preview line quantity")

# Admin issues the tenant's invoice for the period; the tenant lists, reads and downloads it.
issued = issue_invoice.sync(client=admin, body=IssueRequest(tenant="acme-ai", from_=fmt(start), to=fmt(end)))
if isinstance(issued, Problem) or not isinstance(issued, list) or not issued:
    sys.exit(f"client scenario: issue invoice: {issued!r}")
number = issued[0].number
decimal(issued[0].total, "invoice total")
listed = list_invoices.sync(client=tenant)
assert isinstance(listed, list) and all(isinstance(x, InvoiceSummary) for x in listed), listed
assert number in [x.number for x in listed], (number, listed)
inv = get_invoice.sync(number, client=tenant)
assert not isinstance(inv, Problem) and inv.number == number, inv
assert decimal(inv.total, "total") == decimal(issued[0].total, "issued total")
# Read back with its energy lines: billed kWh (measured kWh × PUE) is a wire decimal.
assert any(line.kind.value == "energy" for line in inv.lines), [line.kind for line in inv.lines]
for line in inv.lines:
    decimal(line.quantity, "invoice line quantity")
    decimal(line.net, "invoice line net")
csv = download.sync_detailed(number, "csv", client=tenant)
assert csv.status_code == 200 and number.encode() in csv.content, csv.status_code

# The tenant's balance: decimals as strings.
bal = typed(balance.sync(client=tenant), BalanceView, "balance")
assert bal.tenant == "acme-ai"
assert bal.currencies.additional_properties, "acme-ai has an invoice, so a balance"
for cur, b in bal.currencies.additional_properties.items():
    for field in ("invoiced", "paid", "credited", "credit", "due"):
        decimal(getattr(b, field), f"balance {cur} {field}")

# The auditor: the checkpoint (public) and an inclusion proof of entry 0 in it.
note = get_checkpoint.sync(client=Client(base_url=base))
assert isinstance(note, str) and note.count("\n") >= 3, note
size = int(note.split("\n")[1])
proof = typed(get_inclusion.sync(client=auditor, index="0", size=str(size)), ProofView, "inclusion proof")
assert proof.root and (size == 1 or proof.hashes), proof
log = get_log.sync(client=auditor)
assert log is not None and not isinstance(log, Problem), log

# Records in (authenticated by their signatures, no token): a logged usage record sent again
# is a duplicate at its index; the same record with its seq changed no longer matches its
# signature and is rejected. Both outcomes come back typed, in order.
page = typed(get_entries.sync(client=auditor, start="0", end=str(min(size, 1000))), EntriesPage, "entries")
usage = [e for e in page.entries if e.entry.envelope.kind == "gpu_usage"]
if not usage:
    sys.exit(f"client scenario: no gpu_usage record among the first {len(page.entries)} entries")
logged = usage[-1]
again = Envelope.from_dict(logged.entry.envelope.to_dict())
forged = Envelope.from_dict({**logged.entry.envelope.to_dict(), "seq": logged.entry.envelope.seq + 1_000_000})
ingest = typed(post_records.sync(client=Client(base_url=base), body=[again, forged]), IngestResponse, "post records")
assert (ingest.accepted, ingest.duplicates, ingest.rejected) == (0, 1, 1), ingest
dup, rej = ingest.outcomes
assert isinstance(dup, DuplicateOutcome) and dup.index == logged.index, dup
assert isinstance(rej, RejectedOutcome) and rej.reason == Reason.BAD_SIGNATURE and rej.message, rej

print(
    f"client scenario: PASS (tenant {tid}, invoice {number}, checkpoint {size}, "
    f"entry {logged.index} sent again: duplicate, forged: {rej.reason.value})"
)
