const tokens = require("fs").readFileSync(0, "utf8").split(/\s+/).filter(Boolean).map(Number);
const n = tokens[0];
const a = Float64Array.from(tokens.slice(1, 1 + n)).sort();
const prefix = new Float64Array(n + 1);
for (let i = 0; i < n; i++) prefix[i + 1] = prefix[i] + a[i];
const q = tokens[1 + n];
const out = [];
for (let j = 0; j < q; j++) out.push(prefix[tokens[2 + n + j]]);
process.stdout.write(out.join("\n") + "\n");
