// The console's in-browser verifier: gpuledger's evidence checked with WebCrypto (Ed25519,
// SHA-256) by code written from docs/PROTOCOL.md, with no third-party code and no network.
// Plain ES modules with relative imports: they run in Chromium ≥ 137 and Node ≥ 20 alike.
//
// Every function resolves to {ok: true, steps, summary} or
// {ok: false, steps, failure: {reason, item, message}}; `steps` is [{name, ok, detail}] for
// display, `reason` one of the protocol's stable codes (§15, §16.6), the ones
// `gpuledger verify` reports for the same input. Every PASS's summary has `witnesses`, as
// `gpuledger verify --json` does: `{required: 0, found: null, operator_alone: true}` when no
// witness was required (only the log operator vouches for the checkpoint's history), else
// `{required, found, cosigned_by}`.
//
// WHAT THE BROWSER CHECK PROVES, compared with `gpuledger verify` (the offline verifier):
//
// Checked here, exactly as the offline verifier does:
// - the checkpoint note's Ed25519 signature by the log's verifier key, and that its origin is
//   the key's name (§9); witness cosignatures (cosignature/v1) and the quorum when witness
//   keys are given (§16.6);
// - the certificate's signature under its own tag (§13.4), and that its checkpoint, origin
//   and id are the bundle's;
// - the bundle's form, line by line: header, canonical lines in v3, end-line counts, order
//   (context before records, increasing indexes), no repeated member names (§14, §15 step 1);
// - every leaf: canonical version-3 leaf bytes at its index, the hash chain (`prev`) where the
//   bundle holds the entry before, the envelope's shape (§4) and the signed message for the
//   verifier key's origin (§4.1);
// - the key of every entry by log position (§6.1, §6.2): ledger entries by the log key, other
//   records by a key registered earlier in the context, to that signer, with a role that may
//   sign the kind, not revoked, and within its nodes and regions (§5.4); registered keys valid
//   by §3.1 (canonical, not of small order, torsion-free);
// - every signature, strictly (§3.3: WebCrypto's cofactorless equation with S < L, plus the
//   small-order R refusal done here);
// - inclusion: each v2 entry's proof (RFC 9162 §2.1.3.2), or the v3 multi-proof (§14.2);
//   consistency of two checkpoints (RFC 9162 §2.1.4.2);
// - the certificate's arithmetic: each record the tenant's, in the period and scope, the
//   covered-entries commitment (§13.3), and every line and total recomputed exactly (§13.2).
//
// - the field rules of §5 of every kind (leaf.js);
// - the admission rules of §6.7 beyond the key registry, at each entry's position against the
//   context (admission.js): tenants and leases registered (`unknown_tenant`, `unknown_lease`,
//   `lease_tenant_mismatch`, `already_registered`), the fleet (nodes registered once and before
//   the keys and records that name them, `unknown_node`, and updated only to add capacity:
//   new GPUs, a replaced board under a new UUID, a higher power limit, `invalid_field`,
//   `quantity_out_of_range`; a record in its node's region, `wrong_region`, of a GPU model or
//   MIG profile the node has, `unknown_gpu_model`, for at most its units of it,
//   `over_capacity`, and at most the energy they draw under the power limit in force,
//   `energy_over_bound`; every node as of the entry's index, so an update later in the
//   context changes nothing for an earlier record), the leases (§5.8: a lease over registered nodes, `unknown_node`,
//   GPUs and models they have, `unknown_gpu`, `unknown_gpu_model`, that overbooks no node at
//   any instant of its term counting the bundle's other leases, i.e. the subject tenant's own,
//   `lease_overbooked`; usage only under a lease, `lease_not_on_node`, that covers its node's
//   model, `lease_not_on_node`, within its term, `outside_lease_term`, for at most what it
//   covers, `over_capacity`), the time rules under the log policy in force (`too_old`, `in_future`, `price_in_past`), the spot series (`price_conflict`,
//   `price_in_invoiced_period`), no stream claiming a second twice (`overlapping_interval`,
//   §6.4a), prices that only move forward (`price_not_forward`), the dispute rule a bundle
//   can show: a record excluded at most once (`already_excluded`; a `record_excluded` entry's
//   tenant registered, `unknown_tenant`). Not `unknown_record` nor `record_invoiced`: they need
//   the record an exclusion names, which a bundle holds only after its context (§6.7); and the
//   contract rules (§5.19, §6.7 contracts): a `contract_registered` entry's tenant registered
//   (`unknown_tenant`), the lease each of its fees rents, if any, registered earlier
//   (`unknown_lease`) to its tenant (`lease_tenant_mismatch`), its contract id registered once
//   among the entries the bundle holds (`already_registered`; like leases, the context carries
//   the tenant's own), its term
//   starting neither in the past beyond the policy's skew (`price_in_past`) nor before the end
//   of an invoiced period of its tenant (`price_in_invoiced_period`), and overlapping no earlier
//   contract of its tenant, half-open (`contract_overlap`), every term as amended by the
//   `contract_amended` entries before it; the amendment rules (§5.21, §6.7 contract
//   amendments): a `contract_amended` entry's tenant registered (`unknown_tenant`), its
//   contract registered earlier for that tenant (`unknown_contract`), its new end after the
//   term's start (`invalid_field`), within 3660 days of it (`quantity_out_of_range`) and not
//   the current end (`invalid_field`), the change beginning neither in the past beyond the
//   policy's skew (`price_in_past`) nor in a billing period an invoice of its tenant holds
//   (`price_in_invoiced_period`, billing.js), and an extension overlapping no other contract
//   of its tenant (`contract_overlap`; the context carries the tenant's contracts,
//   amendments and invoices); and the prepayment rules (§5.20,
//   §6.7 prepayments): a `prepayment` entry's tenant registered (`unknown_tenant`), its
//   reference carried by no earlier prepayment of its tenant among the entries the bundle
//   holds (`reference_used`; the context carries the tenant's own), and its `expires_at`, if
//   any, after the entry's `received_at` (`invalid_field`).
//
// - invoices (`verifyInvoice`, invoice.js; crates/core/src/invoice.rs `InvoiceCheck`): that
//   the bundle is the invoice's (subject, checkpoint size, root and origin), each record the
//   tenant's and in the invoice's period or an earlier invoiced one (`wrong_tenant`,
//   `outside_period`), and the whole document recomputed exactly from the bundle: the usage
//   lines by docs/RATING.md (rating.js: rate cards and spot prices split at each price change,
//   region parameters for energy, volume tiers, late records as adjustment lines, excluded
//   records), the contract lines (contract_lines.js: fees in advance, in arrears and once,
//   prorated by the second; included GPU-hours and overage and the `allowances`; SLA credits
//   and the `availability`; commitments and their true-ups), tax and gross at the rates the
//   invoice declares, the totals and `due_at`, and what it draws from the tenant's prepaid
//   lots (prepaid.js: `prepaid`, `amount_due`); the first member that differs is
//   `claim_mismatch` with its path (`lines[2].net`, `total`, `availability`), as
//   `gpuledger verify --invoice` names it.
//
//   Version 1 documents (no `format` member, issued before `gpuledger-invoice/v2`) are
//   recomputed by their own rules (crates/core/src/invoice/v1.rs: usage lines with an
//   `amount` each, no tax, `total` = Σ amount).
//
// Everything `gpuledger verify` checks of a certificate, a bundle, a checkpoint, a consistency
// proof or an invoice is checked here too. And whatever it checks, code served by the log's own server cannot protect against that
// server: docs/CONSOLE.md says how to run it from a copy you trust (offline.html).
//
// Memory: the bundle is read as a stream (Blob.stream()); the verifier keeps the context
// entries and 40 bytes per entry (index and leaf hash, §14.2), never the whole file or the
// multi-proof's nodes (an invoice's check keeps its running sums per line, not the records),
// so a bundle of 100 MB or more verifies in a browser tab.

import { b64decode } from './jcs.js';
import { PublicKey } from './ed25519.js';
import { checkQuorum, envelopeKeyId, parseVerifierKey, verifyCheckpointNote, noteText } from './note.js';
import { verifyConsistency as consistencyProof } from './merkle.js';
import { checkBundle } from './bundle.js';
import { CertificateCheck, checkCertificateSignature, parseCertificate } from './certificate.js';
import { InvoiceCheck, parseInvoice } from './invoice.js';
import { Failure, run } from './result.js';

export { Failure } from './result.js';

/** Parses the log's verifier key (§9); a bad one is `malformed` (item `log key`). */
async function logKeyOf(text, steps) {
  return steps.step(
    'log key',
    async () => {
      try {
        const k = await parseVerifierKey(text);
        k.envelopeKeyId = await envelopeKeyId(k.key.bytes);
        return k;
      } catch (e) {
        throw new Failure('malformed', 'log key', e.message);
      }
    },
    (k) => `${k.name} (key id ${k.keyId.toString(16).padStart(8, '0')})`,
  );
}

/**
 * What a passing verdict without any required witness says (as `gpuledger verify` and the
 * Python verifier do, crates/verifier `OPERATOR_ALONE`): the checkpoint is signed by the log
 * key alone. The console shows its own words for it (lib/trust.js `witnessNote`, in the
 * user's language, with how to require witnesses in its trust settings).
 */
export const OPERATOR_ALONE =
  'no witness was required, so only the log operator vouches that this checkpoint is on the history everybody else sees; ' +
  'require independent cosigners with --witness VKEY (and --quorum K)';

/**
 * `summary.witnesses` of a PASS, in the shape `gpuledger verify --json` gives it: without
 * witnesses `{required: 0, found: null, operator_alone: true}`; with them
 * `{required, found, cosigned_by: [{name, key_id, timestamp}]}`.
 */
function witnessSummary(found, witnesses, quorum) {
  if (!witnesses || witnesses.length === 0) return { required: 0, found: null, operator_alone: true };
  const list = found || [];
  return {
    required: quorum || 1,
    found: list.length,
    cosigned_by: list.map((c) => ({
      name: c.name,
      key_id: c.keyId.toString(16).padStart(8, '0'),
      timestamp: c.timestamp <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(c.timestamp) : String(c.timestamp),
    })),
  };
}

/** The witness step (§16.6), when witness keys are given. */
async function witnessStep(steps, note, witnesses, quorum, item) {
  if (!witnesses || witnesses.length === 0) return null;
  return steps.step(
    'witness cosignatures',
    () => checkQuorum(note, witnesses, quorum, item),
    (found) => `${found.length} of ${witnesses.length} witnesses cosigned (quorum ${quorum || 1}): ${found.map((f) => f.name).join(', ')}`,
  );
}

/** A cache of imported signer keys (checked by §3.1), by their base64. */
function keyImporter() {
  const cache = new Map();
  return (b64) => {
    if (!cache.has(b64)) cache.set(b64, PublicKey.fromBase64(b64));
    return cache.get(b64);
  };
}

async function bundleSteps(steps, { bundle, logKey, onProgress, makeSubject, witnesses }) {
  const { subject, summary } = await checkBundle({
    input: bundle,
    logKey,
    logKeyId: logKey.envelopeKeyId,
    importKey: keyImporter(),
    makeSubject,
    onProgress,
    steps,
    witnesses,
  });
  steps.pass(
    'entries',
    `${summary.entries} entries (${summary.records} records): canonical leaves, hash chain, keys registered and not revoked, every signature valid`,
  );
  steps.pass(
    'inclusion',
    summary.bundle_format.endsWith('v3')
      ? `the multi-proof (${summary.multiproof_nodes} nodes) and the leaves give the checkpoint's root`
      : "every entry's inclusion proof leads to the checkpoint's root",
  );
  return { subject, summary };
}

/**
 * The witness check of a bundle header's checkpoint for `bundleSteps` (`check`; null without
 * witnesses) and the summary of what it found (`summary()`).
 */
function headerWitnesses(steps, witnesses, quorum) {
  let found = null;
  const check =
    witnesses && witnesses.length
      ? async (note) => {
          found = await witnessStep(steps, note, witnesses, quorum, 'checkpoint');
          return found;
        }
      : null;
  return { check, summary: () => witnessSummary(found, witnesses, quorum) };
}

/**
 * Verifies a certificate with its evidence bundle (§15, §16.6).
 * @param {{certificateText: string, bundle: Blob|string|Uint8Array|ReadableStream, logKey: string,
 *   witnesses?: string[], quorum?: number, onProgress?: (done: number, total: number|null) => void}} args
 */
export async function verifyCertificate({ certificateText, bundle, logKey, witnesses, quorum, onProgress }) {
  return run(async (steps) => {
    const key = await logKeyOf(logKey, steps);
    const cert = parseCertificate(noteText(certificateText, 'certificate'));
    const found = await witnessStep(steps, cert.checkpoint, witnesses, quorum, 'checkpoint');
    const { subject, summary } = await bundleSteps(steps, {
      bundle,
      logKey: key,
      onProgress,
      makeSubject: async (header, anchor) => {
        await steps.step('certificate signature', () => checkCertificateSignature(cert, key), () => `${cert.id} signed by the log key`);
        const check = new CertificateCheck(cert);
        await steps.step('certificate matches bundle', () => check.checkHeader(header, anchor), () => 'same checkpoint, origin and subject');
        return check;
      },
    });
    const computed = await steps.step(
      'claims',
      () => subject.finish(),
      (c) =>
        `${c.entries.count} covered entries (commitment matches); ${c.totals.gpu_seconds} GPU-s, ${c.totals.kwh} kWh ` +
        `(${c.totals.kwh_with_pue} kWh with PUE, ${c.totals.carbon_kg} kgCO2e), recomputed exactly`,
    );
    return {
      ...summary,
      certificate: cert.id,
      tenant: cert.tenant,
      totals: computed.totals,
      witnesses: witnessSummary(found, witnesses, quorum),
    };
  });
}

/**
 * Verifies an invoice (`gpuledger-invoice/v2`, as `GET /v1/invoices/{number}` serves it) with
 * its evidence bundle (§15; crates/verifier `invoice`): the bundle as `verifyBundle` does, then
 * the invoice recomputed from it (invoice.js `InvoiceCheck`).
 * @param {{invoiceText: string, bundle: Blob|string|Uint8Array|ReadableStream, logKey: string,
 *   witnesses?: string[], quorum?: number, onProgress?: (done: number, total: number|null) => void}} args
 */
export async function verifyInvoice({ invoiceText, bundle, logKey, witnesses, quorum, onProgress }) {
  return run(async (steps) => {
    const key = await logKeyOf(logKey, steps);
    const inv = parseInvoice(invoiceText);
    const w = headerWitnesses(steps, witnesses, quorum);
    const { subject, summary } = await bundleSteps(steps, {
      bundle,
      logKey: key,
      onProgress,
      witnesses: w.check,
      makeSubject: async (header, anchor) => {
        const check = new InvoiceCheck(inv);
        await steps.step('invoice matches bundle', () => check.checkHeader(header, anchor), () => 'same checkpoint, origin and subject');
        return check;
      },
    });
    const computed = await steps.step(
      'claims',
      () => subject.finish(),
      (c) =>
        (c.format ? `${c.lines.length} lines, net ${c.net_total}, tax ${c.tax_total} at the rates it declares` : `${c.lines.length} lines (version 1)`) +
        `, total ${c.total} ${c.currency}${c.amount_due !== undefined ? `, ${c.amount_due} due after prepaid lots` : ''}` +
        `: recomputed exactly from ${summary.records} signed records`,
    );
    const v2 = computed.format === 'gpuledger-invoice/v2';
    return {
      ...summary,
      invoice: computed.number,
      tenant: computed.tenant,
      currency: computed.currency,
      total: computed.total,
      ...(v2 ? { net_total: computed.net_total, tax_total: computed.tax_total } : {}),
      format: v2 ? computed.format : 'gpuledger-invoice/v1',
      witnesses: w.summary(),
    };
  });
}

/** Verifies an evidence bundle alone (§15 steps 1, 2 and 4; §16.6 on its header's checkpoint). */
export async function verifyBundle({ bundle, logKey, witnesses, quorum, onProgress }) {
  return run(async (steps) => {
    const key = await logKeyOf(logKey, steps);
    const w = headerWitnesses(steps, witnesses, quorum);
    const { summary } = await bundleSteps(steps, { bundle, logKey: key, onProgress, witnesses: w.check });
    return { ...summary, witnesses: w.summary() };
  });
}

/** Verifies a signed checkpoint note (§9) and, given witnesses, its cosignatures (§16.6). */
export async function verifyCheckpoint({ noteText: note, logKey, witnesses, quorum }) {
  return run(async (steps) => {
    const key = await logKeyOf(logKey, steps);
    const text = noteText(note, 'checkpoint');
    const found = await witnessStep(steps, text, witnesses, quorum, 'checkpoint');
    const cp = await steps.step(
      'checkpoint',
      () => verifyCheckpointNote(text, key, 'checkpoint'),
      (c) => `signed by the log key ${key.name}: size ${c.size}, root ${c.rootB64}`,
    );
    return { origin: cp.origin, size: cp.size, root: cp.rootB64, witnesses: witnessSummary(found, witnesses, quorum) };
  });
}

/**
 * Verifies that the log of `newNote` extends the log of `oldNote` (§15 "Consistency"):
 * both notes' signatures and the RFC 9162 §2.1.4.2 proof (`proof`: base64 hashes, or the
 * object {hashes} that GET /v1/proofs/consistency answers). Given witnesses, the NEW
 * checkpoint must carry the quorum (§16.6).
 */
export async function verifyConsistency({ oldNote, newNote, proof, logKey, witnesses, quorum }) {
  return run(async (steps) => {
    const key = await logKeyOf(logKey, steps);
    const newText = noteText(newNote, 'new checkpoint');
    const found = await witnessStep(steps, newText, witnesses, quorum, 'new checkpoint');
    const old = await steps.step(
      'old checkpoint',
      () => verifyCheckpointNote(noteText(oldNote, 'old checkpoint'), key, 'old checkpoint'),
      (c) => `size ${c.size}, root ${c.rootB64}`,
    );
    const neu = await steps.step(
      'new checkpoint',
      () => verifyCheckpointNote(newText, key, 'new checkpoint'),
      (c) => `size ${c.size}, root ${c.rootB64}`,
    );
    await steps.step(
      'consistency proof',
      async () => {
        if (old.size > neu.size) {
          throw new Failure('order', 'old checkpoint', `size ${old.size} is above the new size ${neu.size}`);
        }
        const list = Array.isArray(proof) ? proof : proof && Array.isArray(proof.hashes) ? proof.hashes : null;
        if (!list) throw new Failure('malformed', 'proof', 'not a list of hashes');
        const hashes = list.map((h) => b64decode(h));
        if (hashes.some((h) => !h || h.length !== 32)) throw new Failure('malformed', 'proof', 'hashes are not base64 of 32 bytes');
        if (!(await consistencyProof(old.size, neu.size, old.root, neu.root, hashes))) {
          throw new Failure(
            'consistency_proof',
            'proof',
            `the tree of size ${neu.size} is not an extension of the tree of size ${old.size}: the log was rewritten, or the proof is wrong`,
          );
        }
      },
      () => `the log only grew from size ${old.size} to size ${neu.size}`,
    );
    return { old_size: old.size, new_size: neu.size, witnesses: witnessSummary(found, witnesses, quorum) };
  });
}
