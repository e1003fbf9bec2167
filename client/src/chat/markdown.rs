//! A small Markdown renderer for answers: headings, lists, quotes, `inline code`,
//! **bold**, *italic*, and fenced code blocks with a light keyword/string/comment
//! highlighter. Line-based, so a half-streamed answer renders the same way as the whole
//! one up to where it stops (an open fence highlights what has arrived).

use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

const KEYWORDS: &[&str] = &[
    "fn",
    "let",
    "mut",
    "pub",
    "use",
    "mod",
    "impl",
    "struct",
    "enum",
    "trait",
    "match",
    "if",
    "else",
    "for",
    "while",
    "loop",
    "return",
    "async",
    "await",
    "const",
    "static",
    "def",
    "class",
    "import",
    "from",
    "function",
    "var",
    "func",
    "package",
    "type",
    "interface",
    "true",
    "false",
    "None",
    "null",
    "self",
    "Self",
    "in",
    "of",
    "new",
    "try",
    "catch",
    "except",
    "raise",
    "with",
    "as",
    "where",
    "break",
    "continue",
    "do",
    "then",
    "fi",
    "echo",
    "export",
];

fn code_style() -> Style {
    Style::default().fg(Color::Cyan)
}

/// Highlights one line of code.
pub fn highlight(line: &str) -> Vec<Span<'static>> {
    let mut spans = Vec::new();
    let base = Style::default().fg(Color::Gray);
    let trimmed = line.trim_start();
    if trimmed.starts_with("//") || trimmed.starts_with('#') || trimmed.starts_with("--") {
        spans.push(Span::styled(
            line.to_string(),
            Style::default().fg(Color::DarkGray),
        ));
        return spans;
    }
    let mut word = String::new();
    let mut chars = line.chars().peekable();
    let flush = |word: &mut String, spans: &mut Vec<Span<'static>>| {
        if word.is_empty() {
            return;
        }
        let style = if KEYWORDS.contains(&word.as_str()) {
            Style::default()
                .fg(Color::Magenta)
                .add_modifier(Modifier::BOLD)
        } else if word.chars().next().is_some_and(|c| c.is_ascii_digit()) {
            Style::default().fg(Color::Yellow)
        } else {
            base
        };
        spans.push(Span::styled(std::mem::take(word), style));
    };
    while let Some(c) = chars.next() {
        if c == '"' || c == '\'' || c == '`' {
            flush(&mut word, &mut spans);
            let mut s = String::from(c);
            for d in chars.by_ref() {
                s.push(d);
                if d == c {
                    break;
                }
            }
            spans.push(Span::styled(s, Style::default().fg(Color::Green)));
        } else if c == '/' && chars.peek() == Some(&'/') {
            flush(&mut word, &mut spans);
            let rest: String = std::iter::once(c).chain(chars.by_ref()).collect();
            spans.push(Span::styled(rest, Style::default().fg(Color::DarkGray)));
        } else if c.is_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            flush(&mut word, &mut spans);
            spans.push(Span::styled(c.to_string(), base));
        }
    }
    flush(&mut word, &mut spans);
    spans
}

/// Inline markup of one prose line: `code`, **bold**, *italic* / _italic_.
fn inline(line: &str, base: Style) -> Vec<Span<'static>> {
    let mut spans = Vec::new();
    let mut buf = String::new();
    let mut rest = line;
    let push = |buf: &mut String, spans: &mut Vec<Span<'static>>, style: Style| {
        if !buf.is_empty() {
            spans.push(Span::styled(std::mem::take(buf), style));
        }
    };
    while let Some(c) = rest.chars().next() {
        let marker = if rest.starts_with("**") {
            Some(("**", Modifier::BOLD))
        } else if c == '`' {
            Some(("`", Modifier::empty()))
        } else if c == '*' && !rest.starts_with("* ") {
            Some(("*", Modifier::ITALIC))
        } else {
            None
        };
        if let Some((m, modifier)) = marker {
            if let Some(end) = rest[m.len()..].find(m).filter(|&e| e > 0) {
                push(&mut buf, &mut spans, base);
                let inner = &rest[m.len()..m.len() + end];
                let style = if m == "`" {
                    code_style()
                } else {
                    base.add_modifier(modifier)
                };
                spans.push(Span::styled(inner.to_string(), style));
                rest = &rest[m.len() * 2 + end..];
                continue;
            }
        }
        buf.push(c);
        rest = &rest[c.len_utf8()..];
    }
    push(&mut buf, &mut spans, base);
    spans
}

/// Renders `text` as Markdown into logical lines (not yet wrapped).
pub fn render(text: &str, base: Style) -> Vec<Line<'static>> {
    let mut out = Vec::new();
    let mut in_code = false;
    for line in text.split('\n') {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            in_code = !in_code;
            let lang = trimmed.trim_start_matches('`').trim();
            let label = if in_code && !lang.is_empty() {
                format!("┌ {lang}")
            } else if in_code {
                "┌".to_string()
            } else {
                "└".to_string()
            };
            out.push(Line::from(Span::styled(
                label,
                Style::default().fg(Color::DarkGray),
            )));
            continue;
        }
        if in_code {
            let mut spans = vec![Span::styled("│ ", Style::default().fg(Color::DarkGray))];
            spans.extend(highlight(line));
            out.push(Line::from(spans));
            continue;
        }
        if let Some(h) = trimmed.strip_prefix('#') {
            let h = h.trim_start_matches('#').trim();
            out.push(Line::from(Span::styled(
                h.to_string(),
                base.add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
            )));
            continue;
        }
        let indent = &line[..line.len() - trimmed.len()];
        if let Some(item) = trimmed
            .strip_prefix("- ")
            .or_else(|| trimmed.strip_prefix("* "))
            .or_else(|| trimmed.strip_prefix("+ "))
        {
            let mut spans = vec![Span::styled(format!("{indent}• "), base)];
            spans.extend(inline(item, base));
            out.push(Line::from(spans));
            continue;
        }
        if let Some(q) = trimmed.strip_prefix('>') {
            let mut spans = vec![Span::styled("▎ ", Style::default().fg(Color::DarkGray))];
            spans.extend(inline(q.trim_start(), base.add_modifier(Modifier::ITALIC)));
            out.push(Line::from(spans));
            continue;
        }
        out.push(Line::from(inline(line, base)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(l: &Line) -> String {
        l.spans.iter().map(|s| s.content.as_ref()).collect()
    }

    #[test]
    fn renders_blocks_and_inline_markup() {
        let lines = render(
            "# Title\nsome `code` and **bold**\n- item\n```rust\nfn main() {}\n```",
            Style::default(),
        );
        let texts: Vec<String> = lines.iter().map(plain).collect();
        assert_eq!(
            texts,
            vec![
                "Title",
                "some code and bold",
                "• item",
                "┌ rust",
                "│ fn main() {}",
                "└"
            ]
        );
        let kw = &lines[4].spans[1];
        assert_eq!(kw.content, "fn");
        assert!(kw.style.add_modifier.contains(Modifier::BOLD));
        assert_eq!(lines[1].spans[1].style.fg, Some(Color::Cyan));
    }
}
