const words = require("fs").readFileSync(0, "utf8").split(/\s+/).filter(Boolean).slice(1);
const out = words.map((w) => (w === [...w].reverse().join("") ? "Yes" : "No"));
process.stdout.write(out.join("\n") + "\n");
