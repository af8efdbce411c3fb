const tokens = require("fs").readFileSync(0, "utf8").split(/\s+/).filter(Boolean);
const t = Number(tokens[0]);
const out = [];
for (let i = 0; i < t; i++) {
  out.push((BigInt(tokens[1 + 2 * i]) + BigInt(tokens[2 + 2 * i])).toString());
}
process.stdout.write(out.join("\n") + "\n");
