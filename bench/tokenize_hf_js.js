// The JavaScript side of bench/run-hf-tokenize-bench: @lenml/tokenizers (the JavaScript port
// of the Hugging Face tokenizers library) encoding a text file with one of the real tokenizers
// of @lenml/tokenizer-NAME, on 1 or more threads (worker_threads, each encoding a part of the
// text cut before a space between two printable ASCII characters). Prints "<name> <threads>
// <MB/s> <seconds> <tokens> <MB per CPU second>" for the encoding alone (the tokenizer loaded
// before the clock starts; CPU time of the whole process, all threads).
// With --ids OUT (one thread) it writes the ids, space-separated, on one line.
//   node tokenize_hf_js.js NODE_MODULES qwen3|llama3|llama2 TEXT THREADS [--ids OUT]
'use strict';
const fs = require('fs');
const path = require('path');
const { Worker, isMainThread, parentPort, workerData } = require('worker_threads');

function cutAfter(t, want) {
  const ascii = (c) => c > ' ' && c <= '~';
  for (let i = Math.max(want, 1); i + 1 < t.length; i++)
    if (t[i] === ' ' && ascii(t[i - 1]) && ascii(t[i + 1])) return i;
  return t.length;
}

function load(modules, name) {
  const tok = require(path.join(modules, '@lenml', 'tokenizer-' + name)).fromPreTrained();
  return (t) => tok.encode(t, { add_special_tokens: false });
}

if (!isMainThread) {
  const encode = load(workerData.modules, workerData.name);
  parentPort.postMessage('ready');
  parentPort.once('message', () => parentPort.postMessage(encode(workerData.text).length));
} else {
  const [modules, name, file, threadsText, flag, idsPath] = process.argv.slice(2);
  const threads = Number(threadsText);
  const bytes = fs.readFileSync(file);
  const text = new TextDecoder().decode(bytes);
  const report = (s, tokens, c) => {
    const cpu = (c.user + c.system) / 1e6;
    console.log(`${name} ${threads} ${(bytes.length / 1e6 / s).toFixed(2)} ${s.toFixed(3)} ` +
      `${tokens} ${(bytes.length / 1e6 / cpu).toFixed(2)}`);
  };
  if (threads === 1) {
    const encode = load(modules, name);
    const c0 = process.cpuUsage();
    const t0 = process.hrtime.bigint();
    const ids = encode(text);
    report(Number(process.hrtime.bigint() - t0) / 1e9, ids.length, process.cpuUsage(c0));
    if (flag === '--ids') fs.writeFileSync(idsPath, ids.join(' ') + '\n');
  } else {
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
          report(Number(process.hrtime.bigint() - t0) / 1e9, tokens, process.cpuUsage(c0));
          workers.forEach((x) => x.terminate());
        }
      });
    }
  }
}
