// Prepaid balances (docs/RATING.md, "Prepaid balances"; docs/PROTOCOL.md §5.20): a tenant's
// `prepayment` entries are lots, and every invoice issued to it draws on them in one order at
// issue. Mirrors crates/core/src/prepaid.rs (`PrepaidBook`, `draws`, `amount_due`).

import { Dec } from './decimal.js';
import { unixOf, padAmount, numOrder } from './rating.js';

/** `Lot::order`: grants first, earliest expiry first (none last), log order. */
function lotOrder(a, b) {
  const source = (l) => (l.source === 'grant' ? 0 : 1);
  const never = (l) => (l.expiresAt === null ? 1 : 0);
  return (
    numOrder(source(a), source(b)) ||
    numOrder(never(a), never(b)) ||
    numOrder(a.expiresAt ?? 0, b.expiresAt ?? 0) ||
    numOrder(a.index, b.index)
  );
}

/** The lots of a log and what its invoices drew (prepaid.rs `PrepaidBook`). */
export class PrepaidBook {
  constructor() {
    this.lots = [];
    this.references = new Map();
  }

  /** `PrepaidBook::apply`: a `prepayment` is a lot; an `invoice_issued` draws on the lots. */
  apply(index, receivedAt, kind, b) {
    if (kind === 'prepayment') this.#addLot(index, b);
    else if (kind === 'invoice_issued') this.#draw(b, unixOf(receivedAt));
  }

  /** `PrepaidBook::add_lot`: unless its tenant's reference is taken. */
  #addLot(index, b) {
    const key = JSON.stringify([b.tenant, b.reference]);
    if (this.references.has(key)) return;
    this.references.set(key, this.lots.length);
    this.lots.push({
      index,
      tenant: b.tenant,
      reference: b.reference,
      source: b.source,
      currency: b.currency,
      amount: Dec.parse(b.amount),
      expiresAt: b.expires_at === undefined ? null : unixOf(b.expires_at),
      drawn: Dec.zero(),
    });
  }

  /** `PrepaidBook::draw`: records what the invoice issued at `issuedAt` draws. */
  #draw(i, issuedAt) {
    for (const d of this.draws(i.tenant, i.currency, Dec.parseSigned(i.total), i.checkpoint_size, issuedAt)) {
      const at = this.references.get(JSON.stringify([i.tenant, d.prepayment]));
      if (at !== undefined) this.lots[at].drawn = this.lots[at].drawn.add(d.amount);
    }
  }

  /**
   * `PrepaidBook::draws`: what an invoice of `tenant` in `currency` totalling `total`, issued at
   * `issuedAt` at checkpoint size `size`, draws from the lots as they stand, in drawing order:
   * [{prepayment, source, amount}].
   */
  draws(tenant, currency, total, size, issuedAt) {
    const remaining = (l) => l.amount.sub(l.drawn);
    const open = this.lots
      .filter((l) => l.tenant === tenant && l.currency === currency && l.index < size)
      .filter((l) => (l.expiresAt === null || issuedAt < l.expiresAt) && remaining(l).cmp(Dec.zero()) > 0)
      .sort(lotOrder);
    let left = total.max(Dec.zero());
    const out = [];
    for (const lot of open) {
      if (left.cmp(Dec.zero()) <= 0) break;
      const take = remaining(lot).min(left);
      left = left.sub(take);
      out.push({ prepayment: lot.reference, source: lot.source, amount: padAmount(take, currency) });
    }
    return out;
  }
}

/** prepaid.rs `amount_due`: total − Σ draws, padded; null when nothing was drawn. */
export function amountDue(total, draws, currency) {
  if (draws.length === 0) return null;
  return padAmount(draws.reduce((t, d) => t.sub(d.amount), total), currency);
}
