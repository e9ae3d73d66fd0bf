// Independent reference for the tokenizer tests and `dice bench tokenizer`: encodes files with
// @lenml/tokenizers (a JavaScript port of the Hugging Face tokenizers) under node.
//
//   node js_encode.js <data_dir> encode <file>...   -> JSON array: the ids of each file
//   node js_encode.js <data_dir> bench <file> <reps> -> JSON {bytes, tokens, encode_s, cpu_s}
// <data_dir> holds qwen3/tokenizer.json, qwen3/tokenizer_config.json and
// npm/node_modules/@lenml/tokenizers (tools/install-deps.sh). Files are read as UTF-8.
"use strict";
const fs = require("fs");
const path = require("path");

const [dataDirArg, mode, ...args] = process.argv.slice(2);
const dataDir = dataDirArg && path.resolve(dataDirArg);
if (!dataDirArg || !mode) {
  console.error("usage: js_encode.js <data_dir> encode <file>... | bench <file> <reps>");
  process.exit(2);
}
const { TokenizerLoader } = require(path.join(dataDir, "npm/node_modules/@lenml/tokenizers"));
const readJson = (f) => JSON.parse(fs.readFileSync(path.join(dataDir, "qwen3", f), "utf8"));
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: readJson("tokenizer.json"),
  tokenizerConfig: readJson("tokenizer_config.json"),
});

if (mode === "encode") {
  const out = args.map((f) => Array.from(tok.encode(fs.readFileSync(f, "utf8"))));
  process.stdout.write(JSON.stringify(out));
} else if (mode === "bench") {
  const text = fs.readFileSync(args[0], "utf8");
  const reps = Number(args[1] || 1);
  tok.encode(text.slice(0, 10000));  // warm-up
  let tokens = 0;
  const c0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  for (let r = 0; r < reps; r++) tokens += tok.encode(text).length;
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  const c = process.cpuUsage(c0);
  const cpu_s = (c.user + c.system) / 1e6;
  process.stdout.write(JSON.stringify({ bytes: Buffer.byteLength(text, "utf8") * reps, tokens, encode_s: s, cpu_s }));
} else {
  console.error(`js_encode.js: unknown mode '${mode}'`);
  process.exit(2);
}
