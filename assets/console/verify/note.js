// Signed notes and checkpoints (docs/PROTOCOL.md §9), witness cosignatures (§16), the two
// kinds of verifier key, and envelope key ids (§3.2).
//
// A checkpoint note is the C2SP tlog-checkpoint body (origin, size, base64 root, each ending
// in LF), an empty line, and signature lines `— <name> <base64(key id ‖ signature)>`. The log
// key's line has a 4-byte key id and a 64-byte Ed25519 signature over the body; a witness's
// cosignature/v1 line has a 4-byte key id, an 8-byte big-endian timestamp and a 64-byte
// signature over `cosignature/v1\ntime <t>\n` ‖ body. Lines of keys the verifier was not given
// are ignored, as C2SP signed-note says.

import { b64decode, concat, fromUtf8, hex, sha256, utf8 } from './jcs.js';
import { PublicKey } from './ed25519.js';
import { Failure } from './result.js';

/** The algorithm byte of an Ed25519 signed-note key (§9). */
export const ALG_ED25519 = 0x01;
/** The algorithm byte of a cosignature/v1 witness key (§16.1). */
export const ALG_COSIGNATURE_V1 = 0x04;
/** The largest cosignature timestamp (2^63 − 1, §16.2). */
export const MAX_TIMESTAMP = 2n ** 63n - 1n;
/** The signature line prefix: U+2014 and a space. */
const DASH = '\u2014 ';

/** The 4-byte note key id of a key (§9, §16.1), as a number. */
export async function noteKeyId(name, alg, publicKey) {
  const h = await sha256(concat(utf8(name), new Uint8Array([0x0a, alg]), publicKey));
  return ((h[0] << 24) >>> 0) + (h[1] << 16) + (h[2] << 8) + h[3];
}

/** The 16-hex-digit envelope key id of a 32-byte public key (§3.2). */
export async function envelopeKeyId(publicKey) {
  return hex((await sha256(publicKey)).subarray(0, 8));
}

const validName = (name) => name.length > 0 && !/[\s+]/u.test(name);

/**
 * Parses a verifier key `<name>+<8 hex>+<base64(alg ‖ key)>` of algorithm `alg`, checks its
 * key id and the key (§3.1). Returns {name, keyId, key: PublicKey, text}. Throws Error.
 */
export async function parseVerifierKey(text, alg = ALG_ED25519) {
  if (typeof text !== 'string') throw new Error('a verifier key is text');
  const s = text.trim();
  const first = s.indexOf('+');
  const second = first < 0 ? -1 : s.indexOf('+', first + 1);
  if (second < 0) throw new Error('not a verifier key (<name>+<key id>+<key>)');
  const name = s.slice(0, first);
  const idHex = s.slice(first + 1, second);
  if (!validName(name)) throw new Error('the key name is empty or holds whitespace or "+"');
  if (!/^[0-9a-f]{8}$/.test(idHex)) throw new Error('the key id is not 8 lower-case hex digits');
  const raw = b64decode(s.slice(second + 1));
  if (!raw || raw.length !== 33) throw new Error('the key is not base64 of 33 bytes');
  if (raw[0] !== alg) {
    throw new Error(
      alg === ALG_ED25519
        ? 'not an Ed25519 (algorithm 1) verifier key'
        : 'not a cosignature/v1 (algorithm 4) witness key',
    );
  }
  const keyBytes = raw.slice(1);
  const keyId = await noteKeyId(name, alg, keyBytes);
  if (keyId !== parseInt(idHex, 16)) throw new Error('the key id does not match the name and key');
  const key = await PublicKey.fromBytes(keyBytes);
  return { name, keyId, key, text: s };
}

/**
 * Splits a signed note into its body and signature lines (C2SP signed-note). Each line is
 * {name, keyId, sig: Uint8Array (after the key id), text}. Throws Error when malformed.
 */
export function splitNote(text) {
  if (typeof text !== 'string' || !text.endsWith('\n')) throw new Error('a note ends with a newline');
  if (/[\u0000-\u0009\u000b-\u001f\u007f]/u.test(text)) throw new Error('the note holds control characters');
  const split = text.lastIndexOf('\n\n');
  if (split < 0) throw new Error('the note has no signature block');
  const body = text.slice(0, split + 1);
  const lines = text.slice(split + 2, -1).split('\n');
  const sigs = [];
  for (const line of lines) {
    if (!line.startsWith(DASH)) throw new Error('a signature line does not start with "— "');
    const rest = line.slice(DASH.length);
    const space = rest.indexOf(' ');
    if (space <= 0) throw new Error('a signature line has no name');
    const name = rest.slice(0, space);
    if (!validName(name)) throw new Error('a signature line has a bad name');
    const raw = b64decode(rest.slice(space + 1));
    if (!raw || raw.length < 5) throw new Error('a signature line is not base64 of a key id and signature');
    const keyId = ((raw[0] << 24) >>> 0) + (raw[1] << 16) + (raw[2] << 8) + raw[3];
    sigs.push({ name, keyId, sig: raw.slice(4), text: line });
  }
  if (sigs.length === 0) throw new Error('the note has no signature lines');
  return { body, sigs };
}

/**
 * Parses a checkpoint body (§9): exactly origin, size and root lines. Returns
 * {origin, size, root: Uint8Array, rootB64}. Throws Error.
 */
export function parseCheckpointBody(body) {
  const lines = body.split('\n');
  if (lines.length !== 4 || lines[3] !== '') throw new Error('a checkpoint body is exactly three lines');
  const [origin, sizeText, rootB64] = lines;
  if (!validName(origin)) throw new Error('the origin is empty or holds whitespace or "+"');
  if (!/^(0|[1-9][0-9]*)$/.test(sizeText)) throw new Error('the size is not a decimal without leading zeros');
  const size = Number(sizeText);
  if (!Number.isSafeInteger(size)) throw new Error('the size is above 2^53 − 1');
  const root = b64decode(rootB64);
  if (!root || root.length !== 32) throw new Error('the root is not base64 of 32 bytes');
  return { origin, size, root, rootB64 };
}

/**
 * Verifies a checkpoint note with the log's verifier key (parsed by parseVerifierKey): the
 * note's form, a valid signature line of that key, the origin equal to the key's name.
 * Returns the checkpoint {origin, size, root, rootB64, note, body, sigs}. Throws Failure
 * `checkpoint_signature` naming `item`.
 */
export async function verifyCheckpointNote(noteText, logKey, item = 'checkpoint') {
  const fail = (m) => new Failure('checkpoint_signature', item, m);
  let note;
  try {
    note = splitNote(noteText);
  } catch (e) {
    throw fail(`malformed signed note: ${e.message}`);
  }
  const mine = note.sigs.filter((s) => s.name === logKey.name && s.keyId === logKey.keyId);
  if (mine.length === 0) {
    const found = note.sigs.map((s) => `${s.name}+${s.keyId.toString(16).padStart(8, '0')}`);
    throw fail(
      `no signature by the expected key ${logKey.name}+${logKey.keyId.toString(16).padStart(8, '0')}` +
        ` (found ${found.join(', ')})`,
    );
  }
  const bodyBytes = utf8(note.body);
  for (const s of mine) {
    if (!(await logKey.key.verify(bodyBytes, s.sig))) throw fail('the log signature does not verify (Ed25519)');
  }
  let cp;
  try {
    cp = parseCheckpointBody(note.body);
  } catch (e) {
    throw fail(`not a checkpoint: ${e.message}`);
  }
  if (cp.origin !== logKey.name) {
    throw fail(`the checkpoint's origin ${cp.origin} is not the key's name ${logKey.name}`);
  }
  return { ...cp, note: noteText, body: note.body, sigs: note.sigs };
}

/**
 * The cosignatures (§16.2) of the given witnesses (parsed with ALG_COSIGNATURE_V1) that
 * verify on the note: one per distinct witness, [{name, keyId, timestamp (BigInt)}]. Lines of
 * other keys, or that do not verify, are not counted; a malformed note counts none.
 */
export async function validCosignatures(noteText, witnesses) {
  let note;
  try {
    note = splitNote(noteText);
  } catch {
    return [];
  }
  const found = [];
  const counted = new Set();
  for (const s of note.sigs) {
    const w = witnesses.find((x) => x.name === s.name && x.keyId === s.keyId);
    if (!w) continue;
    const id = `${w.name}+${w.keyId}`;
    if (counted.has(id) || s.sig.length !== 72) continue;
    let t = 0n;
    for (let k = 0; k < 8; k++) t = (t << 8n) | BigInt(s.sig[k]);
    if (t > MAX_TIMESTAMP) continue;
    const msg = utf8(`cosignature/v1\ntime ${t}\n${note.body}`);
    if (await w.key.verify(msg, s.sig.slice(8))) {
      counted.add(id);
      found.push({ name: w.name, keyId: w.keyId, timestamp: t });
    }
  }
  return found;
}

/**
 * The witness rule (§16.6): at least `quorum` distinct given witnesses cosigned the note.
 * `witnessTexts` are vkey strings. Returns the cosignatures found; throws Failure
 * `witness_quorum` (or `malformed` for a bad witness key or quorum).
 */
export async function checkQuorum(noteText, witnessTexts, quorum, item = 'checkpoint') {
  const witnesses = [];
  for (const t of witnessTexts) {
    let w;
    try {
      w = await parseVerifierKey(t, ALG_COSIGNATURE_V1);
    } catch (e) {
      throw new Failure('malformed', 'witness key', `${t}: ${e.message}`);
    }
    if (!witnesses.some((x) => x.name === w.name && x.keyId === w.keyId)) witnesses.push(w);
  }
  // Like `gpuledger verify --witness` without --quorum: 1 when not given (0 counts as not given).
  const k = quorum || 1;
  if (!Number.isInteger(k) || k < 1 || k > witnesses.length) {
    throw new Failure('malformed', 'quorum', `the quorum must be 1 to ${witnesses.length} (the distinct witnesses given), not ${quorum}`);
  }
  const found = await validCosignatures(noteText, witnesses);
  if (found.length < k) {
    throw new Failure(
      'witness_quorum',
      item,
      `the checkpoint carries valid cosignatures from ${found.length} of the ${witnesses.length} given witnesses, ${k} required`,
    );
  }
  return found;
}

/** Reads a note's bytes (string or Uint8Array) as text; throws Failure `malformed`. */
export function noteText(v, item) {
  if (typeof v === 'string') return v;
  try {
    return fromUtf8(v);
  } catch {
    throw new Failure('malformed', item, 'not UTF-8');
  }
}
