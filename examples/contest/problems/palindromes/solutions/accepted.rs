// Prints YES/NO in capitals: the checker ignores case.
use std::io::{self, Read, Write};

fn main() {
    let mut input = String::new();
    io::stdin().read_to_string(&mut input).unwrap();
    let mut out = String::new();
    for w in input.split_ascii_whitespace().skip(1) {
        let same = w.bytes().eq(w.bytes().rev());
        out.push_str(if same { "YES\n" } else { "NO\n" });
    }
    io::stdout().write_all(out.as_bytes()).unwrap();
}
