// The reference side of test-tokenizer-gpt2: npm's gpt-3-encoder (GPT-2's encoder.py ported to
// JavaScript) encodes and decodes what the C test gives it.
//
//   node gpt2_reference.js PACKAGE_DIR DOCS.bin DECODES.bin OUT.bin
//
// DOCS.bin: documents as [u32 length][bytes]. The encoder works on JavaScript strings, so each
// document is decoded as the WHATWG decoder does (TextDecoder: each invalid sequence becomes
// U+FFFD), encoded, and the ids written with the bytes of the string it encoded:
// [u32 n][i32 ids...][u32 length][UTF-8 bytes]. It also checks its own round trip.
// DECODES.bin: cases as [u32 n][i32 ids...][u32 length][bytes Cohort decoded the ids to]; for
// each it writes one byte, 1 when the reference's decode(ids) equals those bytes read through
// TextDecoder (the reference's decode ends the same way), else 0.
'use strict';
const fs = require('fs');
const path = require('path');
const [pkg, docsPath, decodesPath, outPath] = process.argv.slice(2);
const { encode, decode } = require(path.resolve(pkg));

function* records(buf) {
  let at = 0;
  while (at < buf.length) {
    const n = buf.readUInt32LE(at);
    yield [at + 4, n];
    at += 4 + n;
  }
}

const out = [];
const u32 = (v) => { const b = Buffer.alloc(4); b.writeUInt32LE(v); return b; };
const docs = fs.readFileSync(docsPath);
let selfMismatch = 0;
for (const [at, n] of records(docs)) {
  const text = new TextDecoder().decode(docs.subarray(at, at + n));
  const ids = encode(text);
  if (decode(ids) !== text) selfMismatch++;
  const idBuf = Buffer.alloc(4 * ids.length);
  ids.forEach((id, i) => idBuf.writeInt32LE(id, 4 * i));
  const bytes = Buffer.from(text, 'utf8');
  out.push(u32(ids.length), idBuf, u32(bytes.length), bytes);
}

const decodes = fs.readFileSync(decodesPath);
const verdicts = [];
for (let at = 0; at < decodes.length;) {
  const n = decodes.readUInt32LE(at);
  const ids = [];
  for (let i = 0; i < n; i++) ids.push(decodes.readInt32LE(at + 4 + 4 * i));
  at += 4 + 4 * n;
  const len = decodes.readUInt32LE(at);
  const mine = new TextDecoder().decode(decodes.subarray(at + 4, at + 4 + len));
  at += 4 + len;
  verdicts.push(decode(ids) === mine ? 1 : 0);
}
out.push(u32(verdicts.length), Buffer.from(verdicts));
fs.writeFileSync(outPath, Buffer.concat(out));
console.log(`reference: ${selfMismatch} documents whose decode(encode(x)) != x`);
