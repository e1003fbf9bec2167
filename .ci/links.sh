#!/usr/bin/env bash
# Link check: every relative link in the tracked Markdown files (README, docs/, the root
# files, packaging READMEs) names a file or directory that exists, and a `#anchor` on a
# Markdown target names one of its headings (GitHub's slugs). Links to http(s), mailto
# and other schemes are not followed: CI has no network.
# Citations in code comments too: a `docs/PAGE.md#anchor` (or ARCHITECTURE.md, README.md,
# CONTRIBUTING.md) in a `//` comment of a tracked .rs file must name an existing page and
# heading, and no tracked file may cite the old `DESIGN.md` or its numbered sections
# (the contract lives in docs/: log-format.md, protocol.md, history-rules.md).
# Needs python3 and git.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v python3 >/dev/null; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing python3 (apt-get)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 >/dev/null
  fi
  command -v python3 >/dev/null || { echo "links.sh: python3 is missing (Debian's python3 package)" >&2; exit 1; }
fi
git ls-files -z --cached --others --exclude-standard | python3 -c '
import os, re, sys, unicodedata

tracked = [f for f in sys.stdin.read().split("\0") if f and os.path.isfile(f)]
files = [f for f in tracked if f.endswith(".md")]
link = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
ref = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")

def strip_code(text):
    out, fence = [], None
    for line in text.split("\n"):
        m = re.match(r"^\s{0,3}(`{3,}|~{3,})", line)
        if m:
            if fence is None:
                fence = m.group(1)[0]
            elif m.group(1)[0] == fence:
                fence = None
            out.append("")
            continue
        out.append("" if fence else re.sub(r"`[^`]*`", "", line))
    return out

def heading_slugs(path):
    # Headings with code spans: slug from the text with the backticks dropped.
    seen, out, fence = {}, set(), None
    for line in open(path, encoding="utf-8").read().split("\n"):
        m = re.match(r"^\s{0,3}(`{3,}|~{3,})", line)
        if m:
            fence = None if fence else m.group(1)[0]
            continue
        if fence:
            continue
        m = re.match(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        text = m.group(2).replace("`", "")
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
        s = "".join(c for c in text.lower() if c.isalnum() or c in " -_").replace(" ", "-")
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out

bad, checked = [], 0
for f in files:
    lines = strip_code(open(f, encoding="utf-8").read())
    for no, line in enumerate(lines, 1):
        targets = [m.group(1) for m in link.finditer(line)]
        m = ref.match(line)
        if m:
            targets.append(m.group(1))
        for t in targets:
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", t):
                continue  # http:, https:, mailto:, ...
            checked += 1
            path, _, anchor = t.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
            if path and not os.path.exists(dest):
                bad.append(f"{f}:{no}: {t}: no such file {dest}")
                continue
            if anchor and dest.endswith(".md") and os.path.isfile(dest):
                if anchor.lower() not in heading_slugs(dest):
                    bad.append(f"{f}:{no}: {t}: no heading #{anchor} in {dest}")
# Citations in Rust comments: paths are relative to the repository root.
cite = re.compile(r"(?<![\w/.-])((?:docs/[\w./-]*|ARCHITECTURE|README|CONTRIBUTING)\.md)(?:#([\w-]+))?")
cited, slugs = 0, {}
for f in tracked:
    if not f.endswith(".rs"):
        continue
    for no, line in enumerate(open(f, encoding="utf-8", errors="replace"), 1):
        at = line.find("//")
        if at < 0:
            continue
        for m in cite.finditer(line[at:]):
            cited += 1
            path, anchor = m.group(1), m.group(2)
            if not os.path.isfile(path):
                bad.append(f"{f}:{no}: {m.group(0)}: no such file {path}")
            elif anchor:
                if path not in slugs:
                    slugs[path] = heading_slugs(path)
                if anchor.lower() not in slugs[path]:
                    bad.append(f"{f}:{no}: {m.group(0)}: no heading #{anchor} in {path}")

# The old contract file is gone: no citation of it or of its numbered sections.
old = re.compile(r"DESIGN(?:\.md|\x27s\b|\s+\u00a7)|\u00a7\s?\d")
for f in tracked:
    if f == ".ci/links.sh":
        continue
    try:
        text = open(f, encoding="utf-8").read()
    except (UnicodeDecodeError, OSError):
        continue
    for no, line in enumerate(text.split("\n"), 1):
        if old.search(line):
            bad.append(f"{f}:{no}: cites DESIGN.md or a \u00a7 section; cite a docs/ page and heading instead")

for b in bad:
    print(b, file=sys.stderr)
print(f"links.sh: {checked} relative links in {len(files)} Markdown files, {cited} docs citations in code comments, {len(bad)} broken", file=sys.stderr)
sys.exit(1 if bad else 0)
'
