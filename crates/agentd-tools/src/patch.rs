//! `apply_patch`: the patch format coding models are trained to edit with.
//!
//! Grammar (one operation per file, in order):
//!
//! ```text
//! *** Begin Patch
//! *** Add File: PATH        then lines each starting with `+`
//! *** Delete File: PATH
//! *** Update File: PATH
//! *** Move to: PATH         optional, right after Update File
//! @@ [context line]         a chunk: lines starting with ` ` (context), `-` (removed),
//!                           `+` (added); the first chunk's `@@` may be left out; an
//!                           empty line counts as an empty context line
//! *** End of File           optional, ends a chunk that must match at the file's end
//! *** End Patch
//! ```
//!
//! [`parse`] is pure and total: any input gives a [`Patch`] or a [`PatchError`] naming the
//! patch line. [`apply_update`] applies an update's chunks to a file's text in order,
//! each found after the previous one (exact match first, then ignoring trailing
//! whitespace, then ignoring surrounding whitespace); a chunk that matches nowhere names
//! the file and the line it could not find. The tool computes every file's new content
//! before it writes any, so a failing patch changes nothing.

use std::fmt;

/// A parsed patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    pub ops: Vec<Op>,
}

/// One file operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Add {
        path: String,
        contents: String,
    },
    Delete {
        path: String,
    },
    Update {
        path: String,
        move_to: Option<String>,
        chunks: Vec<Chunk>,
    },
}

impl Op {
    pub fn path(&self) -> &str {
        match self {
            Op::Add { path, .. } | Op::Delete { path } | Op::Update { path, .. } => path,
        }
    }
}

/// One `@@` chunk of an update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The text after `@@ `: a line to find first; the chunk matches after it.
    pub context: Option<String>,
    /// Lines the chunk expects (context and removed), in order.
    pub old: Vec<String>,
    /// Lines that replace them (context and added), in order.
    pub new: Vec<String>,
    /// `*** End of File`: the old lines end the file.
    pub eof: bool,
    /// 1-based line of the patch where the chunk starts.
    pub line: usize,
}

/// A patch that does not parse, or a chunk that does not apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchError {
    pub message: String,
    /// 1-based patch line the error is about.
    pub line: usize,
}

impl fmt::Display for PatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (patch line {})", self.message, self.line)
    }
}

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File: ";
const DELETE: &str = "*** Delete File: ";
const UPDATE: &str = "*** Update File: ";
const MOVE: &str = "*** Move to: ";
const EOF_MARK: &str = "*** End of File";

fn err(line: usize, message: impl Into<String>) -> PatchError {
    PatchError {
        message: message.into(),
        line,
    }
}

/// Parses a patch. Blank lines before `*** Begin Patch` and after `*** End Patch` are
/// ignored; anything else outside them is an error.
pub fn parse(input: &str) -> Result<Patch, PatchError> {
    let lines: Vec<&str> = input
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    let mut i = 0;
    while i < lines.len() && lines[i].trim().is_empty() {
        i += 1;
    }
    if lines.get(i).map(|l| l.trim()) != Some(BEGIN) {
        return Err(err(
            (i + 1).min(lines.len()),
            format!("a patch starts with `{BEGIN}`"),
        ));
    }
    i += 1;
    let mut ops = Vec::new();
    loop {
        let Some(&line) = lines.get(i) else {
            return Err(err(i, format!("the patch ends without `{END}`")));
        };
        let n = i + 1;
        if line.trim() == END {
            if let Some(j) = (i + 1..lines.len()).find(|&j| !lines[j].trim().is_empty()) {
                return Err(err(j + 1, format!("text after `{END}`")));
            }
            break;
        }
        if let Some(path) = line.strip_prefix(ADD) {
            let path = file_path(path, n)?;
            i += 1;
            let mut contents = String::new();
            while let Some(l) = lines.get(i).and_then(|l| l.strip_prefix('+')) {
                contents.push_str(l);
                contents.push('\n');
                i += 1;
            }
            ops.push(Op::Add { path, contents });
        } else if let Some(path) = line.strip_prefix(DELETE) {
            ops.push(Op::Delete {
                path: file_path(path, n)?,
            });
            i += 1;
        } else if let Some(path) = line.strip_prefix(UPDATE) {
            let path = file_path(path, n)?;
            i += 1;
            let mut move_to = None;
            if let Some(to) = lines.get(i).and_then(|l| l.strip_prefix(MOVE)) {
                move_to = Some(file_path(to, i + 1)?);
                i += 1;
            }
            let (chunks, next) = parse_chunks(&lines, i)?;
            if chunks.is_empty() && move_to.is_none() {
                return Err(err(n, format!("`{UPDATE}{path}` has no chunk")));
            }
            ops.push(Op::Update {
                path,
                move_to,
                chunks,
            });
            i = next;
        } else if line.trim().is_empty() {
            i += 1;
        } else {
            return Err(err(
                n,
                format!(
                    "expected `{ADD}`, `{DELETE}`, `{UPDATE}` or `{END}`, found {:?}",
                    clip(line)
                ),
            ));
        }
    }
    if ops.is_empty() {
        return Err(err(1, "the patch changes no file"));
    }
    Ok(Patch { ops })
}

fn clip(s: &str) -> String {
    agentd_base::text::clip_chars(s, 80)
}

fn file_path(p: &str, line: usize) -> Result<String, PatchError> {
    let p = p.trim();
    if p.is_empty() {
        return Err(err(line, "a file operation names no path"));
    }
    Ok(p.to_string())
}

fn is_header(l: &str) -> bool {
    l.trim() == END || [ADD, DELETE, UPDATE].iter().any(|h| l.starts_with(h))
}

/// The chunks of an update starting at `lines[i]`; returns them and the next line.
fn parse_chunks(lines: &[&str], mut i: usize) -> Result<(Vec<Chunk>, usize), PatchError> {
    let mut chunks: Vec<Chunk> = Vec::new();
    let mut cur: Option<Chunk> = None;
    while let Some(&l) = lines.get(i) {
        if is_header(l) {
            break;
        }
        let n = i + 1;
        if l == "@@" || l.starts_with("@@ ") {
            if let Some(c) = cur.take() {
                chunks.push(checked(c)?);
            }
            let ctx = l.strip_prefix("@@").unwrap_or("").trim_start_matches(' ');
            cur = Some(Chunk {
                context: (!ctx.trim().is_empty()).then(|| ctx.to_string()),
                old: Vec::new(),
                new: Vec::new(),
                eof: false,
                line: n,
            });
        } else if l.trim() == EOF_MARK {
            let Some(mut c) = cur.take() else {
                return Err(err(n, format!("`{EOF_MARK}` outside a chunk")));
            };
            c.eof = true;
            chunks.push(checked(c)?);
        } else {
            let c = match &mut cur {
                Some(c) => c,
                None if chunks.is_empty() => cur.insert(Chunk {
                    context: None,
                    old: Vec::new(),
                    new: Vec::new(),
                    eof: false,
                    line: n,
                }),
                None => {
                    return Err(err(
                        n,
                        format!("a chunk line after `{EOF_MARK}`: {:?}", clip(l)),
                    ))
                }
            };
            match l.chars().next() {
                Some(' ') => {
                    c.old.push(l[1..].to_string());
                    c.new.push(l[1..].to_string());
                }
                Some('-') => c.old.push(l[1..].to_string()),
                Some('+') => c.new.push(l[1..].to_string()),
                None => {
                    c.old.push(String::new());
                    c.new.push(String::new());
                }
                Some(_) => {
                    return Err(err(
                        n,
                        format!(
                            "a chunk line starts with ` `, `-` or `+`, found {:?}",
                            clip(l)
                        ),
                    ))
                }
            }
        }
        i += 1;
    }
    if let Some(c) = cur.take() {
        chunks.push(checked(c)?);
    }
    // An empty line that ended the last chunk before the next header is a separator,
    // not context: drop trailing empty context lines shared by old and new.
    Ok((chunks, i))
}

fn checked(mut c: Chunk) -> Result<Chunk, PatchError> {
    while c.old.last().is_some_and(String::is_empty)
        && c.new.last().is_some_and(String::is_empty)
        && !c.eof
        && c.old.len() > 1
    {
        c.old.pop();
        c.new.pop();
    }
    if c.old.is_empty() && c.new.is_empty() {
        return Err(err(c.line, "an empty chunk"));
    }
    Ok(c)
}

/// Finds `pat` in `lines` at or after `from` (at the end only when `eof`): exactly,
/// then ignoring trailing whitespace, then ignoring surrounding whitespace.
fn seek(lines: &[&str], pat: &[String], from: usize, eof: bool) -> Option<usize> {
    if pat.is_empty() {
        return Some(if eof { lines.len() } else { from });
    }
    if pat.len() > lines.len() {
        return None;
    }
    let last = lines.len() - pat.len();
    let norms: [fn(&str) -> &str; 3] = [|s| s, str::trim_end, str::trim];
    for norm in norms {
        let eq = |at: usize| {
            pat.iter()
                .zip(&lines[at..])
                .all(|(p, l)| norm(p) == norm(l))
        };
        if eof {
            if last >= from && eq(last) {
                return Some(last);
            }
            continue;
        }
        if let Some(at) = (from..=last).find(|&at| eq(at)) {
            return Some(at);
        }
    }
    None
}

/// `text` with `chunks` applied; an error names `path` and the line not found.
pub fn apply_update(text: &str, chunks: &[Chunk], path: &str) -> Result<String, PatchError> {
    let lines: Vec<&str> = {
        let body = text.strip_suffix('\n').unwrap_or(text);
        if text.is_empty() {
            Vec::new()
        } else {
            body.split('\n').collect()
        }
    };
    // (start, removed count, new lines), in file order.
    let mut edits: Vec<(usize, usize, &[String])> = Vec::new();
    let mut pos = 0usize;
    for c in chunks {
        if let Some(ctx) = &c.context {
            let at = seek(&lines, std::slice::from_ref(ctx), pos, false).ok_or_else(|| {
                err(
                    c.line,
                    format!("{path}: could not find the line {:?}", clip(ctx)),
                )
            })?;
            pos = at + 1;
        }
        if c.old.is_empty() {
            // A pure insertion: after the context line, else at the end.
            let at = if c.context.is_some() && !c.eof {
                pos
            } else {
                lines.len()
            };
            edits.push((at, 0, &c.new));
            pos = at;
            continue;
        }
        let at = seek(&lines, &c.old, pos, c.eof).ok_or_else(|| {
            let first = c
                .old
                .iter()
                .find(|l| !l.trim().is_empty())
                .unwrap_or(&c.old[0]);
            err(
                c.line,
                format!(
                    "{path}: could not find the lines starting with {:?}{}",
                    clip(first),
                    if c.eof { " at the end of the file" } else { "" }
                ),
            )
        })?;
        edits.push((at, c.old.len(), &c.new));
        pos = at + c.old.len();
    }
    let mut out: Vec<&str> = Vec::with_capacity(lines.len());
    let mut next = 0usize;
    for (at, removed, new) in edits {
        out.extend_from_slice(&lines[next.min(at)..at]);
        out.extend(new.iter().map(String::as_str));
        next = next.max(at + removed);
    }
    out.extend_from_slice(&lines[next.min(lines.len())..]);
    let mut s = out.join("\n");
    if !out.is_empty() {
        s.push('\n');
    }
    Ok(s)
}

/// Every path a patch names (targets of moves included), for callers that must know
/// what it may touch before it runs; empty when it does not parse.
pub fn paths(input: &str) -> Vec<String> {
    let Ok(p) = parse(input) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for op in &p.ops {
        out.push(op.path().to_string());
        if let Op::Update {
            move_to: Some(t), ..
        } = op
        {
            out.push(t.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(text: &str, patch: &str) -> Result<String, PatchError> {
        let p = parse(patch)?;
        match &p.ops[0] {
            Op::Update { chunks, .. } => apply_update(text, chunks, "f.rs"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn parses_every_operation() {
        let p = parse(
            "*** Begin Patch\n*** Add File: a.txt\n+one\n+two\n*** Delete File: b.txt\n\
             *** Update File: c.txt\n*** Move to: d/c.txt\n@@ fn main() {\n-    old();\n+    new();\n\
             *** End Patch\n",
        )
        .unwrap();
        assert_eq!(
            p.ops,
            vec![
                Op::Add {
                    path: "a.txt".into(),
                    contents: "one\ntwo\n".into()
                },
                Op::Delete {
                    path: "b.txt".into()
                },
                Op::Update {
                    path: "c.txt".into(),
                    move_to: Some("d/c.txt".into()),
                    chunks: vec![Chunk {
                        context: Some("fn main() {".into()),
                        old: vec!["    old();".into()],
                        new: vec!["    new();".into()],
                        eof: false,
                        line: 8,
                    }],
                }
            ]
        );
    }

    #[test]
    fn updates_apply_in_order_with_whitespace_tolerance() {
        let text = "a\nb\nc\nd\nb\ne\n";
        let got = update(
            text,
            "*** Begin Patch\n*** Update File: f.rs\n@@ d\n-b  \n+B\n@@\n e\n+f\n*** End Patch",
        )
        .unwrap();
        assert_eq!(got, "a\nb\nc\nd\nB\ne\nf\n");
        // The first chunk may leave out `@@`.
        let got = update(
            text,
            "*** Begin Patch\n*** Update File: f.rs\n a\n-b\n*** End Patch",
        )
        .unwrap();
        assert_eq!(got, "a\nc\nd\nb\ne\n");
        // End of file anchors at the end.
        let got = update(
            text,
            "*** Begin Patch\n*** Update File: f.rs\n@@\n-b\n-e\n+z\n*** End of File\n*** End Patch",
        )
        .unwrap();
        assert_eq!(got, "a\nb\nc\nd\nz\n");
    }

    #[test]
    fn a_chunk_that_does_not_match_names_the_file_and_the_line() {
        let e = update(
            "a\nb\n",
            "*** Begin Patch\n*** Update File: f.rs\n@@\n a\n-x\n*** End Patch",
        )
        .unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.message.contains("f.rs"), "{e}");
        assert!(e.message.contains("\"a\""), "{e}");
        let e = update(
            "a\n",
            "*** Begin Patch\n*** Update File: f.rs\n@@ nowhere\n-a\n*** End Patch",
        )
        .unwrap_err();
        assert!(e.message.contains("nowhere"), "{e}");
    }

    #[test]
    fn bad_patches_are_errors_with_their_line() {
        for (p, line) in [
            ("", 1),
            ("*** Begin Patch\n", 2),
            ("*** Begin Patch\n*** End Patch", 1),
            ("*** Begin Patch\n*** Frobnicate: x\n*** End Patch", 2),
            ("*** Begin Patch\n*** Update File: x\n*** End Patch", 2),
            (
                "*** Begin Patch\n*** Update File: x\n@@\n?x\n*** End Patch",
                4,
            ),
            (
                "*** Begin Patch\n*** Add File: a\n+x\n*** End Patch\nmore",
                5,
            ),
        ] {
            let e = parse(p).unwrap_err();
            assert_eq!(e.line, line, "{p:?}: {e}");
        }
    }
}
