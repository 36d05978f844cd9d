// Writes the reference encodings of one tokenizer.json with Hugging Face
// tokenizers' Node binding (npm install tokenizers), in the format of
// encoder_tokenizer_refs.py, for when Python's tokenizers is not at hand.
//
// Usage: node encoder_tokenizer_refs.js INPUTS.json OUT.json NAME tokenizer.json
// INPUTS.json is {"texts": [...], "pairs": [[a, b], ...]}: the texts and
// pairs of encoder_tokenizer_refs.py.
const { Tokenizer } = require('tokenizers');
const fs = require('fs');
const [inputs, out, name, file] = process.argv.slice(2);
(async () => {
  const inp = JSON.parse(fs.readFileSync(inputs, 'utf8'));
  const tok = Tokenizer.fromFile(file);
  const cases = [], pairs = [];
  for (const t of inp.texts) {
    const e = await tok.encode(t, null, { addSpecialTokens: false });
    const s = await tok.encode(t, null, { addSpecialTokens: true });
    const ids = Array.from(e.getIds()), sids = Array.from(s.getIds());
    cases.push({ text: t, ids, ids_with_special: sids, type_ids: Array.from(s.getTypeIds()),
      decoded: await tok.decode(ids, false), decoded_special: await tok.decode(sids, false),
      decoded_skip: await tok.decode(sids, true) });
  }
  for (const [a, b] of inp.pairs) {
    const p = await tok.encode(a, b, { addSpecialTokens: true });
    const ids = Array.from(p.getIds());
    pairs.push({ a, b, ids, type_ids: Array.from(p.getTypeIds()),
      decoded_special: await tok.decode(ids, false), decoded_skip: await tok.decode(ids, true) });
  }
  const ver = require('tokenizers/package.json').version;
  fs.writeFileSync(out, JSON.stringify({ tokenizer: name, tokenizers: 'node tokenizers ' + ver, cases, pairs }, null, 1));
  console.log(name, cases.length, pairs.length);
})();
