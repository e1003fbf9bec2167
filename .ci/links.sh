#!/usr/bin/env bash
# Link check: every relative link in the tracked Markdown files (README, docs/, the root
# files, packaging READMEs) names a file or directory that exists, and a `#anchor` on a
# Markdown target names one of its headings (GitHub's slugs). Links to http(s), mailto
# and other schemes are not followed: CI has no network. Needs python3 and git.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v python3 >/dev/null; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing python3 (apt-get)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 >/dev/null
  fi
  command -v python3 >/dev/null || { echo "links.sh: python3 is missing (Debian's python3 package)" >&2; exit 1; }
fi
git ls-files -z --cached --others --exclude-standard -- '*.md' | python3 -c '
import os, re, sys, unicodedata

files = [f for f in sys.stdin.read().split("\0") if f]
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
for b in bad:
    print(b, file=sys.stderr)
print(f"links.sh: {checked} relative links in {len(files)} Markdown files, {len(bad)} broken", file=sys.stderr)
sys.exit(1 if bad else 0)
'
