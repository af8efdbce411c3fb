use std::fmt::Write as _;
use std::io::{self, Read, Write};

fn main() {
    let mut input = String::new();
    io::stdin().read_to_string(&mut input).unwrap();
    let mut tokens = input.split_ascii_whitespace().map(|t| t.parse::<i64>().unwrap());
    let n = tokens.next().unwrap() as usize;
    let mut a: Vec<i64> = (0..n).map(|_| tokens.next().unwrap()).collect();
    a.sort_unstable();
    let mut prefix = vec![0i64; n + 1];
    for i in 0..n {
        prefix[i + 1] = prefix[i] + a[i];
    }
    let q = tokens.next().unwrap() as usize;
    let mut out = String::new();
    for _ in 0..q {
        let k = tokens.next().unwrap() as usize;
        writeln!(out, "{}", prefix[k]).unwrap();
    }
    io::stdout().write_all(out.as_bytes()).unwrap();
}
