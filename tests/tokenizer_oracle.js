// tokenizer_oracle.js — the reference tokenizer for the differential tests.
//
//   node tokenizer_oracle.js PACKAGE_DIR IN.json OUT.json
//
// IN.json: {"mode": "plain" | "encode", "texts": [...]}. OUT.json: one array
// of ids per text. "encode" is the package's own encode() without BOS: it
// also turns every added-token string of the vocabulary into its id.
// "plain" runs the same pipeline (pre-tokenizer, BPE, id lookup) on the
// whole text without the added-token split: what ds4_tokenize promises for
// untrusted text. Both modes are cross-checked on texts that contain no
// added token, where they must agree.
'use strict';
const fs = require('fs');
const [pkgDir, inPath, outPath] = process.argv.slice(2);
const { fromPreTrained } = require(pkgDir);
const tok = fromPreTrained();
const input = JSON.parse(fs.readFileSync(inPath, 'utf8'));

function plain(text) {
    if (text.length === 0) return [];
    let x = text;
    if (tok.normalizer !== null) x = tok.normalizer(x);
    const pieces = tok.pre_tokenizer !== null ? tok.pre_tokenizer(x, { section_index: 0 }) : [x];
    return tok.model.convert_tokens_to_ids(tok.model(pieces));
}

function encode(text) {
    return tok.encode(text, { add_special_tokens: false });
}

const added = tok.added_tokens.map((t) => t.content);
const t0 = process.hrtime.bigint();
const out = input.texts.map(input.mode === 'encode' ? encode : plain);
const ms = Number(process.hrtime.bigint() - t0) / 1e6;

let crossChecked = 0;
if (input.mode === 'plain') {
    for (let i = 0; i < input.texts.length; i++) {
        const t = input.texts[i];
        if (added.some((a) => t.includes(a))) continue;
        const e = encode(t);
        if (e.length !== out[i].length || e.some((v, k) => v !== out[i][k])) {
            process.stderr.write(`oracle: plain and encode disagree on text ${i}\n`);
            process.exit(3);
        }
        crossChecked++;
    }
}
fs.writeFileSync(outPath, JSON.stringify({ ids: out, ms, crossChecked }));
