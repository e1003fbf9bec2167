//! Model-visible names of MCP tools: `mcp__<server>__<tool>`, each part's characters
//! outside `[A-Za-z0-9_-]` replaced by `_`, at most 64 bytes (the strictest provider
//! limit), with `_` + 12 hex digits of SHA-256(`server\0tool`) replacing the tail when
//! the name is too long or two tools would get the same name. Pure and deterministic:
//! the same set of (server, tool) pairs always gives the same names, in the same order.

use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};

/// Prefix of every MCP tool name; no built-in tool starts with it.
pub const PREFIX: &str = "mcp__";
/// Longest name offered to a provider.
pub const MAX_NAME: usize = 64;
const HASH_HEX: usize = 12;

/// One offered tool: its model-visible name and the raw names it routes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mangled {
    pub name: String,
    pub server: String,
    pub tool: String,
}

/// `s` with every character outside `[A-Za-z0-9_-]` replaced by `_` (one per char).
pub fn sanitize(s: &str) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() {
        "_".into()
    } else {
        out
    }
}

/// The name before overflow and collision handling.
pub fn base_name(server: &str, tool: &str) -> String {
    format!("{PREFIX}{}__{}", sanitize(server), sanitize(tool))
}

fn hashed(base: &str, server: &str, tool: &str, round: u32) -> String {
    let mut h = Sha256::new();
    h.update(server.as_bytes());
    h.update([0]);
    h.update(tool.as_bytes());
    if round > 0 {
        h.update(round.to_le_bytes());
    }
    let hex = hex::encode(h.finalize());
    // `base` is ASCII, so any byte index is a char boundary.
    let keep = base.len().min(MAX_NAME - HASH_HEX - 1);
    format!("{}_{}", &base[..keep], &hex[..HASH_HEX])
}

/// Names for every (server, tool) pair, sorted by (server, tool); duplicates in the
/// input are offered once. Every name matches `^[A-Za-z0-9_-]{1,64}$` and starts with
/// [`PREFIX`], and no two are equal.
pub fn assign<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<Mangled> {
    let sorted: BTreeSet<(&str, &str)> = pairs.into_iter().collect();
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    let bases: Vec<(String, &str, &str)> = sorted
        .iter()
        .map(|&(s, t)| {
            let b = base_name(s, t);
            *count.entry(b.clone()).or_default() += 1;
            (b, s, t)
        })
        .collect();
    // Names kept as written first, so a hashed name never takes one of them.
    let mut used: BTreeSet<String> = bases
        .iter()
        .filter(|(b, _, _)| b.len() <= MAX_NAME && count[b] == 1)
        .map(|(b, _, _)| b.clone())
        .collect();
    bases
        .into_iter()
        .map(|(b, s, t)| {
            let name = if b.len() <= MAX_NAME && count[&b] == 1 {
                b
            } else {
                let mut round = 0;
                loop {
                    let n = hashed(&b, s, t, round);
                    if used.insert(n.clone()) {
                        break n;
                    }
                    round += 1;
                }
            };
            Mangled {
                name,
                server: s.to_string(),
                tool: t.to_string(),
            }
        })
        .collect()
}

/// True for a name the model may see for an MCP tool.
pub fn is_valid(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_kept() {
        let m = assign([("everything", "echo"), ("time", "get_current_time")]);
        assert_eq!(m[0].name, "mcp__everything__echo");
        assert_eq!(m[1].name, "mcp__time__get_current_time");
    }

    #[test]
    fn odd_characters_long_names_and_collisions() {
        let long = "x".repeat(100);
        let pairs = [
            ("srv", "a.b"),
            ("srv", "a b"),
            ("srv", "a_b"),
            ("srv", long.as_str()),
            ("my server", "ünï"),
        ];
        let m = assign(pairs);
        let names: BTreeSet<&str> = m.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(names.len(), pairs.len());
        for x in &m {
            assert!(is_valid(&x.name), "{}", x.name);
            assert!(x.name.starts_with(PREFIX));
        }
        // `a_b` was a collision too (all three sanitize to `a_b`): each got a hash.
        assert!(m
            .iter()
            .filter(|x| x.server == "srv" && x.tool.len() == 3)
            .all(|x| x.name.len() == "mcp__srv__a_b".len() + 13));
        assert_eq!(
            m.iter().find(|x| x.tool == long).unwrap().name.len(),
            MAX_NAME
        );
        assert_eq!(assign(pairs), m, "deterministic");
        let mut rev = pairs;
        rev.reverse();
        assert_eq!(assign(rev), m, "independent of input order");
    }

    #[test]
    fn separator_ambiguity_collides_and_is_resolved() {
        let m = assign([("a__b", "c"), ("a", "b__c")]);
        assert_ne!(m[0].name, m[1].name);
        assert!(m.iter().all(|x| is_valid(&x.name)));
    }
}
