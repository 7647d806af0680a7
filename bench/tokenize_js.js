// The JavaScript side of bench/run-tokenize-bench: GPT-2's encoding by npm's tiktoken (Rust
// compiled to WebAssembly), js-tiktoken (pure JavaScript) or gpt-3-encoder (the reference,
// GPT-2's encoder.py ported), on a text file, on 1 or more threads (worker_threads, each
// encoding a part of the text cut after a newline). Prints "<name> <threads> <MB/s>
// <seconds> <tokens>" for the encoding alone (the file read and the tables loaded before the
// clock starts), and with --ids FILE writes the ids (one thread only), little-endian uint32.
//   node tokenize_js.js NODE_MODULES tiktoken|js-tiktoken|gpt-3-encoder TEXT THREADS [--ids F]
'use strict';
const fs = require('fs');
const path = require('path');
const { Worker, isMainThread, parentPort, workerData } = require('worker_threads');

function encoder(modules, name) {
  if (name === 'tiktoken') {
    const enc = require(path.join(modules, 'tiktoken')).get_encoding('gpt2');
    return (t) => enc.encode(t, [], []);
  }
  if (name === 'js-tiktoken') {
    const enc = require(path.join(modules, 'js-tiktoken')).getEncoding('gpt2');
    return (t) => enc.encode(t, [], []);
  }
  return require(path.join(modules, 'gpt-3-encoder')).encode;
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
    const t0 = process.hrtime.bigint();
    const ids = encode(text);
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    console.log(`${name} 1 ${(bytes.length / 1e6 / s).toFixed(2)} ${s.toFixed(3)} ${ids.length}`);
    if (flag === '--ids') fs.writeFileSync(idsPath, Buffer.from(Uint32Array.from(ids).buffer));
  } else {
    // Parts of about equal size, each ending after a newline (a newline before a non-space is a
    // piece of its own, so the parts' tokens are the whole's up to the cut).
    const parts = [];
    let at = 0;
    for (let k = 1; k <= threads; k++) {
      let end = k === threads ? text.length : Math.floor((text.length * k) / threads);
      if (k < threads) end = text.indexOf('\n', end) + 1 || text.length;
      parts.push(text.slice(at, end));
      at = end;
    }
    const workers = parts.map((p) => new Worker(__filename, { workerData: { modules, name, text: p } }));
    let ready = 0, done = 0, tokens = 0, t0;
    for (const w of workers) {
      w.on('message', (m) => {
        if (m === 'ready') {
          if (++ready === workers.length) {
            t0 = process.hrtime.bigint();
            workers.forEach((x) => x.postMessage('go'));
          }
          return;
        }
        tokens += m;
        if (++done === workers.length) {
          const s = Number(process.hrtime.bigint() - t0) / 1e9;
          console.log(`${name} ${threads} ${(bytes.length / 1e6 / s).toFixed(2)} ${s.toFixed(3)} ${tokens}`);
          workers.forEach((x) => x.terminate());
        }
      });
    }
  }
}
