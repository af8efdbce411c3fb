use std::fmt::Write as _;
use std::io::{self, Read, Write};

fn main() {
    let mut input = String::new();
    io::stdin().read_to_string(&mut input).unwrap();
    let mut tokens = input.split_ascii_whitespace();
    let t: usize = tokens.next().unwrap().parse().unwrap();
    let mut out = String::new();
    for _ in 0..t {
        let a: i64 = tokens.next().unwrap().parse().unwrap();
        let b: i64 = tokens.next().unwrap().parse().unwrap();
        writeln!(out, "{}", a + b).unwrap();
    }
    io::stdout().write_all(out.as_bytes()).unwrap();
}
