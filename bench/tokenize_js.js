// The JavaScript side of bench/run-tokenize-bench: GPT-2's encoding by npm's tiktoken (Rust
// compiled to WebAssembly), js-tiktoken (pure JavaScript) or gpt-3-encoder (the reference,
// GPT-2's encoder.py ported), on a text file, on 1 or more threads (worker_threads, each
// encoding a part of the text). Prints "<name> <threads> <MB/s> <seconds> <tokens> <MB per
// CPU second>" for the encoding alone (the file read and the tables loaded before the clock
// starts; CPU time of the whole process, all threads); with --ids FILE it writes the ids (one
// thread only), little-endian uint32.
//   node tokenize_js.js NODE_MODULES tiktoken|js-tiktoken|gpt-3-encoder TEXT THREADS [--ids F]
'use strict';
const fs = require('fs');
const path = require('path');
const { Worker, isMainThread, parentPort, workerData } = require('worker_threads');

// A place at or after `want` where the text can be cut without changing its pieces (the rule
// cohort_bpe_safe_cut follows): before a space between two printable ASCII characters (the
// space begins the next piece), or after a newline between two non-spaces; else the end.
function cutAfter(t, want) {
  const ascii = (c) => c > ' ' && c <= '~';
  for (let i = Math.max(want, 1); i + 1 < t.length; i++) {
    if (t[i] === ' ' && ascii(t[i - 1]) && ascii(t[i + 1])) return i;
    if (t[i] === '\n' && /\S/.test(t[i - 1]) && /\S/.test(t[i + 1])) return i + 1;
  }
  return t.length;
}

function encoder(modules, name) {
  if (name === 'tiktoken') {
    const enc = require(path.join(modules, 'tiktoken')).get_encoding('gpt2');
    return (t) => enc.encode(t, [], []);
  }
  if (name === 'js-tiktoken') {
    const enc = require(path.join(modules, 'js-tiktoken')).getEncoding('gpt2');
    return (t) => enc.encode(t, [], []);
  }
  // Its encode() appends each piece's ids with Array.concat, which copies everything so far:
  // quadratic in the length of one call. It is given the text about 4 KB at a time, cut where
  // the pieces stay the same, as one would use it.
  const encode = require(path.join(modules, 'gpt-3-encoder')).encode;
  return (t) => {
    const ids = [];
    for (let at = 0; at < t.length;) {
      const end = cutAfter(t, at + 4096);
      for (const id of encode(t.slice(at, end))) ids.push(id);
      at = end;
    }
    return ids;
  };
}

if (!isMainThread) {
  const encode = encoder(workerData.modules, workerData.name);
  parentPort.postMessage('ready');
  parentPort.once('message', () => {
    const n = encode(workerData.text).length;
    parentPort.postMessage(n);
  });
} else {
  const [modules, name, file, threadsText, flag, idsPath] = process.argv.slice(2);
  const threads = Number(threadsText);
  const bytes = fs.readFileSync(file);
  const text = new TextDecoder().decode(bytes);
  if (threads === 1) {
    const encode = encoder(modules, name);
    const c0 = process.cpuUsage();
    const t0 = process.hrtime.bigint();
    const ids = encode(text);
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    const c = process.cpuUsage(c0);
    const cpu = (c.user + c.system) / 1e6;
    console.log(`${name} 1 ${(bytes.length / 1e6 / s).toFixed(2)} ${s.toFixed(3)} ${ids.length} ` +
      `${(bytes.length / 1e6 / cpu).toFixed(2)}`);
    if (flag === '--ids') fs.writeFileSync(idsPath, Buffer.from(Uint32Array.from(ids).buffer));
  } else {
    // Parts of about equal size, cut where the pieces stay the same.
    const parts = [];
    let at = 0;
    for (let k = 1; k <= threads; k++) {
      const end = k === threads ? text.length : cutAfter(text, Math.floor((text.length * k) / threads));
      parts.push(text.slice(at, end));
      at = end;
    }
    const workers = parts.map((p) => new Worker(__filename, { workerData: { modules, name, text: p } }));
    let ready = 0, done = 0, tokens = 0, t0, c0;
    for (const w of workers) {
      w.on('message', (m) => {
        if (m === 'ready') {
          if (++ready === workers.length) {
            c0 = process.cpuUsage();
            t0 = process.hrtime.bigint();
            workers.forEach((x) => x.postMessage('go'));
          }
          return;
        }
        tokens += m;
        if (++done === workers.length) {
          const s = Number(process.hrtime.bigint() - t0) / 1e9;
          const c = process.cpuUsage(c0);
          const cpu = (c.user + c.system) / 1e6;
          console.log(`${name} ${threads} ${(bytes.length / 1e6 / s).toFixed(2)} ${s.toFixed(3)} ` +
            `${tokens} ${(bytes.length / 1e6 / cpu).toFixed(2)}`);
          workers.forEach((x) => x.terminate());
        }
      });
    }
  }
}
