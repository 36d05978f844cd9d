// generate.js writes the reference encodings of the texts in this folder
// for each fixture tokenizer, using Hugging Face's tokenizers library (the
// Rust implementation, through its node bindings).
//
// To regenerate, outside the repository:
//
//	mkdir -p /tmp/tokref && cd /tmp/tokref && npm install tokenizers@0.23.2
//
// then, from the repository root:
//
//	NODE_PATH=/tmp/tokref/node_modules node tokenizer/testdata/ordinary/generate.js ../shared/fixtures/tokenizers
//
// It writes <name>.json next to this script for every tokenizer folder
// named below, holding, for each text file, the ids without and with the
// special tokens the tokenizer adds, and the decoding of the former.
"use strict";

const fs = require("fs");
const path = require("path");
const zlib = require("zlib");
const { Tokenizer } = require("tokenizers");

const names = ["qwen3", "llama3", "llama2", "gemma3"];
const texts = ["english.txt", "languages.txt", "code_go.txt", "code_py.txt", "code_js.txt", "mixed.txt", "log.txt"];

async function main() {
  const fixtures = process.argv[2];
  if (!fixtures) {
    throw new Error("usage: node generate.js FIXTURES/tokenizers");
  }
  const version = require("tokenizers/package.json").version;
  for (const name of names) {
    const json = zlib.gunzipSync(fs.readFileSync(path.join(fixtures, name, "tokenizer.json.gz")));
    const tok = Tokenizer.fromString(json.toString("utf8"));
    const cases = [];
    for (const file of texts) {
      const text = fs.readFileSync(path.join(__dirname, file), "utf8");
      const plain = await tok.encode(text, null, { addSpecialTokens: false });
      const special = await tok.encode(text, null, { addSpecialTokens: true });
      const ids = plain.getIds();
      cases.push({
        file,
        ids,
        ids_with_special: special.getIds(),
        decoded: await tok.decode(ids, false),
      });
    }
    // One case per line, ids on that line, so that a diff shows which
    // file changed.
    const lines = cases.map((c) => "    " + JSON.stringify(c));
    const out =
      "{\n" +
      `  "tokenizer": ${JSON.stringify(name)},\n` +
      `  "library": ${JSON.stringify("tokenizers (npm) " + version)},\n` +
      '  "cases": [\n' +
      lines.join(",\n") +
      "\n  ]\n}\n";
    fs.writeFileSync(path.join(__dirname, name + ".json"), out);
    console.log(`${name}: ${cases.map((c) => `${c.file} ${c.ids.length}`).join(", ")}`);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
