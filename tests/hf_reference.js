// The reference side of test-tokenizer-hf: npm's @lenml/tokenizers (a JavaScript port of the
// Hugging Face tokenizers library) encodes and decodes, and @huggingface/jinja renders chat
// templates, for the jobs the C test gives it.
//
//   node hf_reference.js NODE_MODULES JOB.json OUT.json
//
// JOB.json: {"tokenizers": {NAME: {"encode": [FILE...], "encode_special": [FILE...],
//            "decode": [[ids...]...]}}, "chat": [{"template": FILE, "conversations": FILE,
//            "generation_prompt": bool, "bos_token": S|null, "eos_token": S|null}]}
// NAME is qwen3, llama3 or llama2 (the package @lenml/tokenizer-NAME). Files are read as
// UTF-8. OUT.json: {"tokenizers": {NAME: {"encode": [[ids]], "encode_special": [[ids]],
// "decode": [string]}}, "chat": [[string or {"error": message}]]}; encode is
// add_special_tokens=false, encode_special the default (true); decode keeps special tokens and
// leaves tokenization spaces alone.
'use strict';
const fs = require('fs');
const path = require('path');
const [modules, jobPath, outPath] = process.argv.slice(2);
const job = JSON.parse(fs.readFileSync(jobPath, 'utf8'));
const out = { tokenizers: {}, chat: [] };

for (const [name, work] of Object.entries(job.tokenizers || {})) {
  const pkg = require(path.join(modules, '@lenml', 'tokenizer-' + name));
  const tok = pkg.fromPreTrained();
  const read = (f) => fs.readFileSync(f, 'utf8');
  const r = { encode: [], encode_special: [], decode: [] };
  for (const f of work.encode || []) r.encode.push(tok.encode(read(f), { add_special_tokens: false }));
  for (const f of work.encode_special || []) r.encode_special.push(tok.encode(read(f)));
  for (const ids of work.decode || [])
    r.decode.push(tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false }));
  out.tokenizers[name] = r;
}

if ((job.chat || []).length > 0) {
  const { Template } = require(path.join(modules, '@huggingface', 'jinja'));
  for (const c of job.chat) {
    const template = new Template(fs.readFileSync(c.template, 'utf8'));
    const rendered = [];
    for (const line of fs.readFileSync(c.conversations, 'utf8').split('\n')) {
      if (line.trim() === '') continue;
      const vars = JSON.parse(line);
      vars.add_generation_prompt = c.generation_prompt;
      if (c.bos_token !== null) vars.bos_token = c.bos_token;
      if (c.eos_token !== null) vars.eos_token = c.eos_token;
      try {
        rendered.push(template.render(vars));
      } catch (e) {
        rendered.push({ error: String(e.message || e) });
      }
    }
    out.chat.push(rendered);
  }
}
fs.writeFileSync(outPath, JSON.stringify(out));
