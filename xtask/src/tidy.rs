//! `cargo xtask tidy`: the layering checks Cargo alone does not make.
//!
//! - **Crate graph.** Every normal dependency between the workspace's own crates must be
//!   listed in the allow-list block of `ARCHITECTURE.md` (between the `crate-graph`
//!   markers). A crate that gains an internal dependency the map does not draw fails.
//! - **Pure history.** `agentd-history`'s normal dependency tree holds no async runtime,
//!   network client or database driver.
//! - **Module cycles.** Inside each crate, the top-level modules (`crate::X`) and the
//!   files of one folder module (`super::X`) form no cycle; test modules are ignored.
//! - **Crate docs.** Each crate's `lib.rs` (or `main.rs`) opens with a `//!` doc saying
//!   what it owns.
//! - **File size.** No source file of a crate (under `src/`, `examples/` or `benches/`)
//!   is longer than [`MAX_FILE_LINES`]: a file that outgrows it is split along what it
//!   holds. Integration tests (`tests/`) are not counted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Crates `agentd-history` must never reach through normal dependencies.
pub const HISTORY_FORBIDDEN: &[&str] = &[
    "tokio",
    "mio",
    "reqwest",
    "hyper",
    "postgres",
    "tokio-postgres",
    "rusqlite",
];

/// Most lines one source file may have (see the module doc).
pub const MAX_FILE_LINES: usize = 1500;

/// The dependency graph of the workspace, as `cargo metadata` resolves it.
pub struct Graph {
    /// Workspace package name → its manifest directory.
    pub members: BTreeMap<String, PathBuf>,
    /// Package name → names of its normal (non-dev, non-build) dependencies.
    pub normal: BTreeMap<String, BTreeSet<String>>,
}

/// The host's target triple, from `rustc -vV`.
fn host_triple() -> Option<String> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = std::process::Command::new(rustc).arg("-vV").output().ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(|h| h.trim().to_string()))
}

impl Graph {
    /// Reads the resolved graph with `cargo metadata` (offline: the lock file decides),
    /// for the host platform: the dependencies of other platforms (Android, Windows) are
    /// never downloaded by a build here, so offline metadata could not read them.
    pub fn load(root: &Path) -> Result<Graph, String> {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = std::process::Command::new(cargo);
        cmd.args(["metadata", "--format-version", "1", "--offline"]);
        if let Some(host) = host_triple() {
            cmd.args(["--filter-platform", &host]);
        }
        let out = cmd
            .current_dir(root)
            .output()
            .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "cargo metadata failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let meta: serde_json::Value =
            serde_json::from_slice(&out.stdout).map_err(|e| format!("cargo metadata: {e}"))?;
        Graph::from_metadata(&meta)
    }

    /// Builds the graph from `cargo metadata`'s JSON document.
    pub fn from_metadata(meta: &serde_json::Value) -> Result<Graph, String> {
        let packages = meta["packages"].as_array().ok_or("no packages")?;
        let mut names = BTreeMap::new();
        let mut members = BTreeMap::new();
        let workspace: BTreeSet<&str> = meta["workspace_members"]
            .as_array()
            .ok_or("no workspace_members")?
            .iter()
            .filter_map(|v| v.as_str())
            .collect();
        for p in packages {
            let id = p["id"].as_str().ok_or("package without id")?;
            let name = p["name"].as_str().ok_or("package without name")?;
            names.insert(id.to_string(), name.to_string());
            if workspace.contains(id) {
                let manifest = PathBuf::from(p["manifest_path"].as_str().unwrap_or_default());
                let dir = manifest.parent().map(Path::to_path_buf).unwrap_or_default();
                members.insert(name.to_string(), dir);
            }
        }
        let mut normal: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for node in meta["resolve"]["nodes"]
            .as_array()
            .ok_or("no resolve graph")?
        {
            let from = &names[node["id"].as_str().unwrap_or_default()];
            let deps = normal.entry(from.clone()).or_default();
            for dep in node["deps"].as_array().into_iter().flatten() {
                let is_normal = dep["dep_kinds"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|k| k["kind"].is_null());
                if is_normal {
                    if let Some(to) = dep["pkg"].as_str().and_then(|id| names.get(id)) {
                        deps.insert(to.clone());
                    }
                }
            }
        }
        Ok(Graph { members, normal })
    }

    /// Every crate `name` reaches through normal dependencies (itself excluded).
    pub fn reach(&self, name: &str) -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![name.to_string()];
        while let Some(n) = todo.pop() {
            for d in self.normal.get(&n).into_iter().flatten() {
                if seen.insert(d.clone()) {
                    todo.push(d.clone());
                }
            }
        }
        seen
    }
}

/// The allow-list: for each workspace crate, the workspace crates it may depend on.
/// Read from the lines between `<!-- crate-graph -->` and `<!-- /crate-graph -->`, each
/// `` - `crate` → `dep`, `dep` `` (or `→ nothing`).
pub fn allow_list(architecture: &str) -> Result<BTreeMap<String, BTreeSet<String>>, String> {
    let start = architecture
        .find("<!-- crate-graph -->")
        .ok_or("ARCHITECTURE.md has no <!-- crate-graph --> block")?;
    let end = architecture[start..]
        .find("<!-- /crate-graph -->")
        .ok_or("ARCHITECTURE.md's crate-graph block is not closed")?;
    let mut allowed = BTreeMap::new();
    for line in architecture[start..start + end].lines() {
        let Some(rest) = line.trim().strip_prefix("- ") else {
            continue;
        };
        let Some((from, to)) = rest.split_once('→') else {
            continue;
        };
        let name = |s: &str| s.trim().trim_matches('`').trim().to_string();
        let deps: BTreeSet<String> = to
            .split(',')
            .map(name)
            .filter(|d| !d.is_empty() && d != "nothing")
            .collect();
        allowed.insert(name(from), deps);
    }
    Ok(allowed)
}

/// Internal edges the allow-list does not draw, and workspace crates it does not list.
pub fn check_graph(graph: &Graph, allowed: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut problems = Vec::new();
    for name in graph.members.keys() {
        let Some(ok) = allowed.get(name) else {
            problems.push(format!(
                "crate {name} is not in ARCHITECTURE.md's crate graph"
            ));
            continue;
        };
        for dep in graph.normal.get(name).into_iter().flatten() {
            if graph.members.contains_key(dep) && !ok.contains(dep) {
                problems.push(format!(
                    "{name} depends on {dep}, which ARCHITECTURE.md's crate graph does not allow"
                ));
            }
        }
    }
    problems
}

/// Forbidden crates in `agentd-history`'s normal dependency tree.
pub fn check_history_pure(graph: &Graph) -> Vec<String> {
    let reach = graph.reach("agentd-history");
    let mut problems: Vec<String> = HISTORY_FORBIDDEN
        .iter()
        .filter(|f| reach.contains(**f))
        .map(|f| format!("agentd-history reaches {f} through its normal dependencies"))
        .collect();
    for dep in &reach {
        if graph.members.contains_key(dep) && dep != "agentd-proto" && dep != "agentd-base" {
            problems.push(format!("agentd-history depends on {dep}"));
        }
    }
    problems
}

/// Each member's crate root opens with a `//!` doc.
pub fn check_crate_docs(graph: &Graph) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, dir) in &graph.members {
        let root = ["src/lib.rs", "src/main.rs"]
            .iter()
            .map(|f| dir.join(f))
            .find(|p| p.exists());
        let Some(root) = root else { continue };
        let text = std::fs::read_to_string(&root).unwrap_or_default();
        if !text.trim_start().starts_with("//!") {
            problems.push(format!(
                "{name}: {} does not open with a //! doc",
                root.display()
            ));
        }
    }
    problems
}

/// Source files of `crate_dir` (under `src/`, `examples/`, `benches/`) longer than
/// [`MAX_FILE_LINES`].
pub fn check_file_lengths(crate_name: &str, crate_dir: &Path) -> Vec<String> {
    let mut files = Vec::new();
    for sub in ["src", "examples", "benches"] {
        rust_files(&crate_dir.join(sub), &mut files);
    }
    files.sort();
    files
        .iter()
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).ok()?.lines().count();
            (lines > MAX_FILE_LINES).then(|| {
                format!(
                    "{crate_name}: {} has {lines} lines, more than {MAX_FILE_LINES}; split it along what it holds",
                    f.display()
                )
            })
        })
        .collect()
}

/// The source up to its first `#[cfg(test)] mod` (test modules may reach anywhere).
fn strip_tests(src: &str) -> &str {
    let mut at = 0;
    while let Some(i) = src[at..].find("#[cfg(test)]") {
        let after = src[at + i + "#[cfg(test)]".len()..].trim_start();
        let after = after
            .strip_prefix("pub(crate)")
            .or_else(|| after.strip_prefix("pub"))
            .unwrap_or(after)
            .trim_start();
        if after.starts_with("mod ") {
            return &src[..at + i];
        }
        at += i + 1;
    }
    src
}

/// Names referenced as `PREFIX::name` or inside `use PREFIX::{a, b::c}`.
fn refs(src: &str, prefix: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let pat = format!("{prefix}::");
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut at = 0;
    while let Some(i) = src[at..].find(&pat) {
        let start = at + i;
        let boundary = start == 0
            || !src[..start]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
        let rest = &src[start + pat.len()..];
        if boundary {
            if let Some(group) = rest.strip_prefix('{') {
                let group = &group[..group.find('}').unwrap_or(group.len())];
                for item in group.split(',') {
                    let name = ident(item.trim());
                    if !name.is_empty() {
                        found.insert(name);
                    }
                }
            } else {
                let name = ident(rest);
                if !name.is_empty() {
                    found.insert(name);
                }
            }
        }
        at = start + pat.len();
    }
    found
}

/// Strongly connected components of more than one node (Tarjan's algorithm).
fn cycles_in(
    nodes: &BTreeSet<String>,
    edges: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<Vec<String>> {
    struct State<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on.insert(v);
        if let Some(ws) = s.edges.get(v) {
            for w in ws {
                let w = w.as_str();
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let lw = s.low[w];
                    let lv = s.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if s.on.contains(w) {
                    let iw = s.index[w];
                    let lv = s.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in nodes {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Module cycles inside one crate's `src/`.
pub fn check_module_cycles(crate_name: &str, src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let mut problems = Vec::new();

    // Top-level modules through `crate::X`.
    let mut mods = BTreeSet::new();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in &files {
        let rel = p.strip_prefix(src).unwrap_or(p);
        let top = rel
            .components()
            .next()
            .map(|c| {
                c.as_os_str()
                    .to_string_lossy()
                    .trim_end_matches(".rs")
                    .to_string()
            })
            .unwrap_or_default();
        if top == "lib" || top == "main" {
            continue;
        }
        mods.insert(top.clone());
        let text = read(p);
        for r in refs(strip_tests(&text), "crate") {
            if r != top {
                edges.entry(top.clone()).or_default().insert(r);
            }
        }
    }
    let edges: BTreeMap<String, BTreeSet<String>> = edges
        .into_iter()
        .map(|(k, vs)| (k, vs.into_iter().filter(|v| mods.contains(v)).collect()))
        .collect();
    for comp in cycles_in(&mods, &edges) {
        problems.push(format!("{crate_name}: cycle {}", comp.join(" <-> ")));
    }

    // Files of one folder module through `super::X`.
    let dirs: BTreeSet<PathBuf> = files
        .iter()
        .filter_map(|f| f.parent().map(Path::to_path_buf))
        .filter(|d| d != src)
        .collect();
    for d in dirs {
        let local: Vec<&PathBuf> = files.iter().filter(|f| f.parent() == Some(&d)).collect();
        let names: BTreeSet<String> = local
            .iter()
            .filter_map(|f| f.file_stem().map(|s| s.to_string_lossy().to_string()))
            .collect();
        let mut fedges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for f in &local {
            let me = f
                .file_stem()
                .unwrap_or_default()
                .to_string_lossy()
                .to_string();
            let text = read(f);
            let rs: BTreeSet<String> = refs(strip_tests(&text), "super")
                .into_iter()
                .filter(|r| names.contains(r) && *r != me && r != "mod")
                .collect();
            fedges.insert(me, rs);
        }
        for comp in cycles_in(&names, &fedges) {
            problems.push(format!(
                "{crate_name} ({}): cycle {}",
                d.display(),
                comp.join(" <-> ")
            ));
        }
    }
    problems
}

/// Runs every check over the workspace at `root`; returns the problems found.
pub fn tidy(root: &Path) -> Result<Vec<String>, String> {
    let graph = Graph::load(root)?;
    let arch = std::fs::read_to_string(root.join("ARCHITECTURE.md"))
        .map_err(|e| format!("ARCHITECTURE.md: {e}"))?;
    let allowed = allow_list(&arch)?;
    let mut problems = check_graph(&graph, &allowed);
    problems.extend(check_history_pure(&graph));
    problems.extend(check_crate_docs(&graph));
    for (name, dir) in &graph.members {
        problems.extend(check_module_cycles(name, &dir.join("src")));
        problems.extend(check_file_lengths(name, dir));
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace_root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("xtask sits in the workspace")
            .to_path_buf()
    }

    fn graph(edges: &[(&str, &[&str])], members: &[&str]) -> Graph {
        Graph {
            members: members
                .iter()
                .map(|m| (m.to_string(), PathBuf::from(m)))
                .collect(),
            normal: edges
                .iter()
                .map(|(k, vs)| (k.to_string(), vs.iter().map(|v| v.to_string()).collect()))
                .collect(),
        }
    }

    #[test]
    fn history_is_pure() {
        let g = Graph::load(&workspace_root()).expect("cargo metadata");
        assert!(g.members.contains_key("agentd-history"));
        assert_eq!(check_history_pure(&g), Vec::<String>::new());
    }

    #[test]
    fn a_runtime_reached_through_history_is_found() {
        let g = graph(
            &[
                ("agentd-history", &["agentd-proto", "serde"]),
                ("agentd-proto", &["tokio-util"]),
                ("tokio-util", &["tokio"]),
            ],
            &["agentd-history", "agentd-proto"],
        );
        assert_eq!(
            check_history_pure(&g),
            vec!["agentd-history reaches tokio through its normal dependencies"]
        );
    }

    #[test]
    fn the_workspace_is_tidy() {
        assert_eq!(
            tidy(&workspace_root()).expect("tidy runs"),
            Vec::<String>::new()
        );
    }

    #[test]
    fn an_edge_the_map_does_not_draw_fails() {
        let arch = "<!-- crate-graph -->\n- `a` → `b`\n- `b` → nothing\n<!-- /crate-graph -->";
        let allowed = allow_list(arch).unwrap();
        let ok = graph(&[("a", &["b", "serde"])], &["a", "b"]);
        assert!(check_graph(&ok, &allowed).is_empty());
        let up = graph(&[("a", &["b"]), ("b", &["a"])], &["a", "b"]);
        assert_eq!(
            check_graph(&up, &allowed),
            vec!["b depends on a, which ARCHITECTURE.md's crate graph does not allow"]
        );
        let new = graph(&[], &["a", "b", "c"]);
        assert_eq!(
            check_graph(&new, &allowed),
            vec!["crate c is not in ARCHITECTURE.md's crate graph"]
        );
    }

    #[test]
    fn a_source_file_over_the_limit_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("src")).unwrap();
        std::fs::create_dir_all(dir.path().join("tests")).unwrap();
        let long = "fn f() {}\n".repeat(MAX_FILE_LINES + 1);
        std::fs::write(dir.path().join("src/lib.rs"), "//! x\n").unwrap();
        std::fs::write(dir.path().join("src/big.rs"), &long).unwrap();
        std::fs::write(dir.path().join("tests/big.rs"), &long).unwrap();
        let edge = "fn f() {}\n".repeat(MAX_FILE_LINES);
        std::fs::write(dir.path().join("src/edge.rs"), edge).unwrap();
        assert_eq!(
            check_file_lengths("t", dir.path()),
            vec![format!(
                "t: {} has 1501 lines, more than 1500; split it along what it holds",
                dir.path().join("src/big.rs").display()
            )]
        );
    }

    #[test]
    fn module_cycles_are_found_outside_tests_only() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir_all(src.join("m")).unwrap();
        std::fs::write(src.join("lib.rs"), "//! x\nmod a; mod b;").unwrap();
        std::fs::write(src.join("a.rs"), "use crate::b::X;\n").unwrap();
        std::fs::write(
            src.join("b.rs"),
            "pub struct X;\n#[cfg(test)]\nmod tests { use crate::a; }\n",
        )
        .unwrap();
        std::fs::write(src.join("m/mod.rs"), "mod p; mod q;").unwrap();
        std::fs::write(src.join("m/p.rs"), "use super::{q, r};").unwrap();
        std::fs::write(src.join("m/q.rs"), "use super::p::Y;").unwrap();
        assert_eq!(
            check_module_cycles("t", &src),
            vec![format!("t ({}): cycle p <-> q", src.join("m").display())]
        );
        std::fs::write(src.join("b.rs"), "use crate::a::Z;\n").unwrap();
        assert_eq!(check_module_cycles("t", &src).len(), 2);
    }
}
