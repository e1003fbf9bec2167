//! A small mutational fuzzing engine that runs on the stable toolchain.
//!
//! It keeps a corpus (seed files plus inputs it found interesting), picks one, applies a
//! stack of byte-level and line-level mutations (bit flips, interesting bytes and
//! numbers, inserts, deletes, duplicated ranges, splices with other corpus entries,
//! NDJSON-aware line swaps and truncations) and runs the target under `catch_unwind`. A
//! panic is a finding: the input is written to `fuzz/artifacts/<target>/crash-<sha>`
//! and the run fails. Without compiler coverage instrumentation, "interesting" is
//! approximated by the outcome signature a target reports (which error kind, how many
//! events, which branch of a projection), so inputs that reach new outcomes are kept.

use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// xorshift64*: deterministic from a seed, fast, no dependencies.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
    pub fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

const INTERESTING: &[&[u8]] = &[
    b"\n",
    b"\r\n",
    b"\0",
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b"\\",
    b",",
    b":",
    b"null",
    b"true",
    b"-1",
    b"0",
    b"1e999",
    b"18446744073709551615",
    b"18446744073709551616",
    b"-9223372036854775808",
    b"\xff\xfe",
    b"\xe2\x82",
    b"\\u0000",
    b"\\ud800",
    b"..",
    b"/",
    b"../",
    b"\"seq\":",
    b"\"type\":",
    b"\"data\":{}",
    b"\"call_id\":\"c1\"",
    b"\"tool_call\"",
    b"\"tool_result\"",
    b"\"history_compaction\"",
    b"\"jsonrpc\":\"2.0\"",
    b"\"method\":",
    b"\"id\":",
    b"[[[[[[[[[[",
];

pub fn mutate(rng: &mut Rng, input: &[u8], corpus: &[Vec<u8>], max_len: usize) -> Vec<u8> {
    let mut out = input.to_vec();
    let rounds = 1 + rng.below(4);
    for _ in 0..rounds {
        match rng.below(12) {
            0 if !out.is_empty() => {
                let i = rng.below(out.len());
                out[i] ^= 1 << rng.below(8);
            }
            1 if !out.is_empty() => {
                let i = rng.below(out.len());
                out[i] = rng.next_u64() as u8;
            }
            2 => {
                let tok = INTERESTING[rng.below(INTERESTING.len())];
                let at = rng.below(out.len() + 1);
                out.splice(at..at, tok.iter().copied());
            }
            3 if !out.is_empty() => {
                let a = rng.below(out.len());
                let len = 1 + rng.below((out.len() - a).min(64));
                out.drain(a..a + len);
            }
            4 if !out.is_empty() => {
                let a = rng.below(out.len());
                let len = 1 + rng.below((out.len() - a).min(256));
                let chunk = out[a..a + len].to_vec();
                let at = rng.below(out.len() + 1);
                out.splice(at..at, chunk);
            }
            5 if !corpus.is_empty() => {
                let other = &corpus[rng.below(corpus.len())];
                if !other.is_empty() {
                    let a = rng.below(other.len());
                    let len = 1 + rng.below((other.len() - a).min(512));
                    let at = rng.below(out.len() + 1);
                    out.splice(at..at, other[a..a + len].iter().copied());
                }
            }
            6 if !out.is_empty() => {
                // Truncate: torn tails, cut frames.
                out.truncate(rng.below(out.len()));
            }
            7 => {
                // Swap, drop or duplicate whole lines (structure of NDJSON files).
                let mut lines: Vec<Vec<u8>> =
                    out.split(|b| *b == b'\n').map(|l| l.to_vec()).collect();
                if lines.len() > 1 {
                    let a = rng.below(lines.len());
                    let b = rng.below(lines.len());
                    match rng.below(3) {
                        0 => lines.swap(a, b),
                        1 => {
                            lines.remove(a);
                        }
                        _ => {
                            let l = lines[a].clone();
                            lines.insert(b, l);
                        }
                    }
                    out = lines.join(&b'\n');
                }
            }
            8 if !out.is_empty() => {
                // Replace a decimal number with another.
                let digits: Vec<usize> = out
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| b.is_ascii_digit())
                    .map(|(i, _)| i)
                    .collect();
                if !digits.is_empty() {
                    let i = digits[rng.below(digits.len())];
                    let n = match rng.below(4) {
                        0 => 0u64,
                        1 => u64::MAX,
                        2 => rng.below(10) as u64,
                        _ => rng.next_u64(),
                    };
                    let s = n.to_string();
                    out.splice(i..i + 1, s.bytes());
                }
            }
            9 => {
                let n = 1 + rng.below(16);
                let at = rng.below(out.len() + 1);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
                out.splice(at..at, bytes);
            }
            _ => {
                // Splice a whole other input's lines in.
                if !corpus.is_empty() {
                    let other = &corpus[rng.below(corpus.len())];
                    let cut = rng.below(out.len() + 1);
                    let from = rng.below(other.len() + 1);
                    out.truncate(cut);
                    out.extend_from_slice(&other[from..]);
                }
            }
        }
    }
    out.truncate(max_len);
    out
}

/// A fuzz target: runs one input, panics on a bug, returns an outcome signature.
pub type Target = fn(&[u8]) -> u64;

pub struct Stats {
    pub execs: u64,
    pub corpus: usize,
    pub elapsed: Duration,
    pub crashes: Vec<PathBuf>,
}

fn load_dir(dir: &Path, out: &mut Vec<Vec<u8>>, max_len: usize) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            load_dir(&p, out, max_len);
        } else if let Ok(mut b) = std::fs::read(&p) {
            b.truncate(max_len);
            out.push(b);
        }
    }
}

pub struct Run<'a> {
    pub name: &'a str,
    pub target: Target,
    pub seeds: Vec<Vec<u8>>,
    pub seed_dirs: Vec<PathBuf>,
    pub duration: Duration,
    pub seed: u64,
    pub max_len: usize,
    pub artifacts: PathBuf,
    /// Stop at the first crash (the default) or keep going and collect them.
    pub keep_going: bool,
}

pub fn run(r: Run<'_>) -> Stats {
    let mut corpus = r.seeds;
    for d in &r.seed_dirs {
        load_dir(d, &mut corpus, r.max_len);
    }
    if corpus.is_empty() {
        corpus.push(Vec::new());
    }
    // Silence the default hook: a panic is reported once, as a finding.
    let prev_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut rng = Rng::new(r.seed);
    let mut seen: HashSet<u64> = HashSet::new();
    let mut crashes = Vec::new();
    let start = Instant::now();
    let mut execs = 0u64;
    // Every seed runs once as it is.
    let seeds = corpus.clone();
    let mut queue = seeds.into_iter();
    while start.elapsed() < r.duration {
        let input = match queue.next() {
            Some(s) => s,
            None => {
                let base = &corpus[rng.below(corpus.len())];
                mutate(&mut rng, base, &corpus, r.max_len)
            }
        };
        execs += 1;
        let target = r.target;
        match catch_unwind(AssertUnwindSafe(|| target(&input))) {
            Ok(sig) => {
                if seen.insert(sig) && corpus.len() < 4096 {
                    corpus.push(input);
                }
            }
            Err(payload) => {
                let msg = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "panic".into());
                let sha = hex::encode(Sha256::digest(&input));
                let dir = r.artifacts.join(r.name);
                let _ = std::fs::create_dir_all(&dir);
                let path = dir.join(format!("crash-{}", &sha[..16]));
                let _ = std::fs::write(&path, &input);
                eprintln!(
                    "[{}] CRASH after {execs} execs: {msg}\n  input saved to {} ({} bytes)",
                    r.name,
                    path.display(),
                    input.len()
                );
                crashes.push(path);
                if !r.keep_going {
                    break;
                }
            }
        }
    }
    std::panic::set_hook(prev_hook);
    Stats {
        execs,
        corpus: corpus.len(),
        elapsed: start.elapsed(),
        crashes,
    }
}
