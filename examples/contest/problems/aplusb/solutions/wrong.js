// Numbers are doubles: sums past 2^53 lose their last digits.
const tokens = require("fs").readFileSync(0, "utf8").split(/\s+/).filter(Boolean);
const t = Number(tokens[0]);
const out = [];
for (let i = 0; i < t; i++) {
  out.push(String(Number(tokens[1 + 2 * i]) + Number(tokens[2 + 2 * i])));
}
console.log(out.join("\n"));
