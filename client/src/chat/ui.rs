//! The chat's frame, drawn from its state alone (`draw(&App, &mut Frame)`): the
//! transcript, a permission panel when one waits, the input box and the status line; or
//! the session picker; or, on a terminal too small for either, a one-line notice.

use super::app::{App, Screen};
use super::markdown;
use crate::view::{Item, NoticeKind, TurnState};
use ratatui::layout::{Constraint, Layout, Position, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use ratatui::Frame;
use unicode_width::UnicodeWidthChar;

/// The smallest terminal the layout needs.
pub const MIN_WIDTH: u16 = 24;
pub const MIN_HEIGHT: u16 = 8;

fn dim() -> Style {
    Style::default().fg(Color::DarkGray)
}

/// Wraps one logical line at `width` columns, preferring to break after a space; wide
/// characters never straddle a break.
pub fn wrap(line: Line<'static>, width: usize) -> Vec<Line<'static>> {
    let width = width.max(1);
    let mut cells: Vec<(char, Style)> = Vec::new();
    for span in &line.spans {
        let style = line.style.patch(span.style);
        for c in span.content.chars() {
            let c = if c == '\t' {
                ' '
            } else if c.is_control() {
                continue;
            } else {
                c
            };
            cells.push((c, style));
        }
    }
    let mut rows: Vec<&[(char, Style)]> = Vec::new();
    let mut start = 0;
    while start < cells.len() {
        let mut col = 0;
        let mut end = start;
        let mut last_space = None;
        while end < cells.len() {
            let w = cells[end].0.width().unwrap_or(0);
            if col + w > width {
                break;
            }
            if cells[end].0 == ' ' {
                last_space = Some(end);
            }
            col += w;
            end += 1;
        }
        if end < cells.len() {
            // A break at a space, unless it would leave most of the row empty.
            if let Some(s) = last_space.filter(|&s| s > start + width / 3) {
                end = s + 1;
            }
        }
        if end == start {
            end = start + 1; // a character wider than the row
        }
        rows.push(&cells[start..end]);
        start = end;
    }
    if rows.is_empty() {
        return vec![Line::default()];
    }
    rows.into_iter()
        .map(|row| {
            let mut spans: Vec<Span<'static>> = Vec::new();
            let mut buf = String::new();
            let mut cur = row[0].1;
            for &(c, s) in row {
                if s != cur {
                    spans.push(Span::styled(std::mem::take(&mut buf), cur));
                    cur = s;
                }
                buf.push(c);
            }
            spans.push(Span::styled(buf, cur));
            Line::from(spans)
        })
        .collect()
}

/// The logical (unwrapped) lines of one transcript item.
pub fn item_lines(item: &Item, app: &App) -> Vec<Line<'static>> {
    let mut out = Vec::new();
    match item {
        Item::User { text } => {
            out.push(Line::default());
            for (i, l) in text.split('\n').enumerate() {
                let prefix = if i == 0 { "› " } else { "  " };
                out.push(Line::from(vec![
                    Span::styled(prefix, Style::default().fg(Color::Cyan)),
                    Span::styled(l.to_string(), Style::default().add_modifier(Modifier::BOLD)),
                ]));
            }
        }
        Item::Assistant {
            text,
            streaming,
            partial,
        } => {
            out.extend(markdown::render(text, Style::default()));
            if *streaming {
                if let Some(last) = out.last_mut() {
                    last.spans
                        .push(Span::styled("▍", Style::default().fg(Color::Cyan)));
                }
            }
            if *partial {
                out.push(Line::from(Span::styled(
                    "(partial answer: the turn was cut)",
                    Style::default().fg(Color::Yellow),
                )));
            }
        }
        Item::Reasoning { text, streaming } => {
            let style = dim().add_modifier(Modifier::ITALIC);
            if app.show_reasoning {
                out.push(Line::from(Span::styled("▾ reasoning", style)));
                for l in text.split('\n') {
                    out.push(Line::from(Span::styled(format!("  {l}"), style)));
                }
            } else {
                let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
                let more = if *streaming { "…" } else { "" };
                out.push(Line::from(Span::styled(
                    format!(
                        "▸ reasoning: {}{more}  (Ctrl-R)",
                        crate::render::one_line(first, 80)
                    ),
                    style,
                )));
            }
        }
        Item::Tool {
            name,
            summary,
            result,
            decision,
            ..
        } => {
            let mut spans = vec![
                Span::styled("⏺ ", Style::default().fg(Color::Blue)),
                Span::styled(name.clone(), Style::default().add_modifier(Modifier::BOLD)),
            ];
            if !summary.is_empty() {
                spans.push(Span::raw(format!(" {summary}")));
            }
            if let Some(d) = decision {
                let color = if d.starts_with("allow") {
                    Color::Green
                } else {
                    Color::Red
                };
                spans.push(Span::styled(format!("  [{d}]"), Style::default().fg(color)));
            }
            out.push(Line::from(spans));
            match result {
                None => out.push(Line::from(Span::styled("  ⎿ running…", dim()))),
                Some(r) => {
                    let excerpt = if app.expand_tools {
                        r.excerpt.clone()
                    } else {
                        crate::render::one_line(&r.excerpt, 72)
                    };
                    let (mark, style) = if r.orphan {
                        (
                            "⚠ orphan, closed by reconciliation: ",
                            Style::default().fg(Color::Yellow),
                        )
                    } else if r.ok {
                        ("", dim())
                    } else {
                        ("✗ ", Style::default().fg(Color::Red))
                    };
                    let size = if r.ok {
                        format!("{} B  ", r.bytes)
                    } else {
                        String::new()
                    };
                    out.push(Line::from(Span::styled(
                        format!("  ⎿ {mark}{size}{excerpt}"),
                        style,
                    )));
                }
            }
        }
        Item::Notice { kind, text } => {
            let (mark, style) = match kind {
                NoticeKind::Info => ("· ", Style::default().fg(Color::Gray)),
                NoticeKind::Event => ("— ", Style::default().fg(Color::Yellow)),
                NoticeKind::Error => ("✗ ", Style::default().fg(Color::Red)),
            };
            for (i, l) in text.split('\n').enumerate() {
                let prefix = if i == 0 { mark } else { "  " };
                out.push(Line::from(Span::styled(format!("{prefix}{l}"), style)));
            }
        }
    }
    out
}

/// Rows the whole drawn transcript takes at `width` (for PgUp at its top).
pub fn total_rows(app: &App, width: u16) -> usize {
    app.view
        .items
        .iter()
        .map(|item| {
            item_lines(item, app)
                .into_iter()
                .map(|l| wrap(l, width as usize).len())
                .sum::<usize>()
        })
        .sum()
}

/// The transcript's rows that fit `area`, scrolled `app.scroll` rows up from the end.
fn transcript_rows(app: &App, width: u16, height: u16) -> Vec<Line<'static>> {
    let need = height as usize + app.scroll as usize;
    let mut rows: Vec<Line<'static>> = Vec::new();
    for item in app.view.items.iter().rev() {
        let mut wrapped: Vec<Line<'static>> = item_lines(item, app)
            .into_iter()
            .flat_map(|l| wrap(l, width as usize))
            .collect();
        wrapped.reverse();
        rows.extend(wrapped);
        if rows.len() >= need {
            break;
        }
    }
    // `rows` runs bottom-up; skip the scrolled rows, keep a screenful, flip.
    let skip = (app.scroll as usize).min(rows.len().saturating_sub(height as usize));
    let mut shown: Vec<Line<'static>> = rows.into_iter().skip(skip).take(height as usize).collect();
    shown.reverse();
    shown
}

fn status_line(app: &App) -> Line<'static> {
    let v = &app.view;
    let name = v
        .title
        .clone()
        .or_else(|| app.session_id.clone())
        .unwrap_or_else(|| "agentctl chat".into());
    let model = app
        .settings
        .model
        .clone()
        .or_else(|| v.model.clone())
        .unwrap_or_else(|| "default model".into());
    let mode = app
        .settings
        .permission_mode
        .clone()
        .unwrap_or_else(|| "default".into());
    let sandbox = v
        .sandbox
        .clone()
        .or_else(|| {
            app.settings
                .sandbox
                .as_ref()
                .and_then(|s| s.get("mode"))
                .and_then(|m| m.as_str())
                .map(str::to_string)
        })
        .unwrap_or_else(|| "default".into());
    let ctx = v
        .pressure
        .map(|p| format!("{:.0}%", p * 100.0))
        .unwrap_or_else(|| "–".into());
    let (state, state_style) = if !app.connected {
        (
            "disconnected, reconnecting…".to_string(),
            Style::default().fg(Color::White).bg(Color::Red),
        )
    } else if app.loading {
        ("loading".to_string(), Style::default().fg(Color::Yellow))
    } else if !app.permissions.is_empty() {
        (
            "waiting for approval".to_string(),
            Style::default().fg(Color::Black).bg(Color::Yellow),
        )
    } else {
        match &v.turn {
            TurnState::Idle => ("idle".to_string(), Style::default().fg(Color::Green)),
            TurnState::Running { .. } => (
                "running".to_string(),
                Style::default().fg(Color::Black).bg(Color::Cyan),
            ),
        }
    };
    let sep = Span::styled(" │ ", dim());
    Line::from(vec![
        Span::styled(format!(" {state} "), state_style),
        sep.clone(),
        Span::styled(
            crate::render::one_line(&name, 40),
            Style::default().add_modifier(Modifier::BOLD),
        ),
        sep.clone(),
        Span::raw(model),
        sep.clone(),
        Span::raw(format!("mode {mode}")),
        sep.clone(),
        Span::raw(format!("sandbox {sandbox}")),
        sep.clone(),
        Span::raw(format!("ctx {ctx}")),
    ])
}

fn permission_lines(app: &App) -> Vec<Line<'static>> {
    let Some(p) = app.permissions.front() else {
        return Vec::new();
    };
    let warn = Style::default().fg(Color::Yellow);
    let mut out = vec![Line::from(vec![
        Span::styled("Allow ", warn.add_modifier(Modifier::BOLD)),
        Span::styled(
            p.tool.clone(),
            Style::default().add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!(" {}?", p.summary)),
    ])];
    if let Some(child) = &p.subagent {
        out[0]
            .spans
            .push(Span::styled(format!(" (subagent {child})"), warn));
    }
    if let Some(g) = &p.grant {
        out.push(Line::from(Span::styled(
            format!("sandbox grant asked: {g}"),
            warn,
        )));
    }
    if let Some(j) = &p.justification {
        out.push(Line::from(Span::styled(
            format!("justification: {j}"),
            warn,
        )));
    }
    match &app.deny_reason {
        Some(r) => out.push(Line::from(vec![
            Span::styled("deny, reason (Enter sends, Esc back): ", warn),
            Span::raw(r.text.clone()),
        ])),
        None => out.push(Line::from(Span::styled(
            "[y] allow once   [a] allow for the session   [n] deny",
            Style::default().fg(Color::Cyan),
        ))),
    }
    if app.permissions.len() > 1 {
        out.push(Line::from(Span::styled(
            format!("({} more waiting)", app.permissions.len() - 1),
            dim(),
        )));
    }
    out
}

fn draw_picker(app: &App, frame: &mut Frame, area: Rect) {
    let mut lines = vec![
        Line::from(Span::styled(
            format!("Sessions in {}", app.cwd.display()),
            Style::default().add_modifier(Modifier::BOLD),
        )),
        Line::default(),
    ];
    let sel = |i: usize| {
        if i == app.picker_sel {
            Style::default().fg(Color::Black).bg(Color::Cyan)
        } else {
            Style::default()
        }
    };
    lines.push(Line::from(Span::styled("+ new session", sel(0))));
    for (i, e) in app.picker.iter().enumerate() {
        let title = if e.title.is_empty() {
            e.session_id.clone()
        } else {
            e.title.clone()
        };
        lines.push(Line::from(vec![
            Span::styled(format!("  {title}"), sel(i + 1)),
            Span::styled(format!("  {}  {}", e.age, e.status), dim()),
        ]));
        if !e.last_prompt.is_empty() {
            lines.push(Line::from(Span::styled(
                format!("      › {}", e.last_prompt),
                dim(),
            )));
        }
    }
    let help_row = Rect {
        y: area.y + area.height - 1,
        height: 1,
        ..area
    };
    let list = Rect {
        height: area.height - 1,
        ..area
    };
    // Keep the selection in view.
    let sel_row = lines
        .iter()
        .position(|l| {
            l.spans
                .first()
                .is_some_and(|s| s.style.bg == Some(Color::Cyan))
        })
        .unwrap_or(0);
    let skip = sel_row.saturating_sub(list.height.saturating_sub(2) as usize);
    let shown: Vec<Line> = lines.into_iter().skip(skip).collect();
    frame.render_widget(Paragraph::new(shown), list);
    let back = if app.picker_return { "back" } else { "quit" };
    frame.render_widget(
        Paragraph::new(Line::from(Span::styled(
            format!("↑/↓ choose · Enter open · Esc {back}"),
            dim(),
        ))),
        help_row,
    );
}

/// Draws the whole frame from `app`.
pub fn draw(app: &App, frame: &mut Frame) {
    let area = frame.area();
    frame.render_widget(Clear, area);
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let mut msg = format!("too small: {}x{}", area.width, area.height);
        let need = format!(" (needs {MIN_WIDTH}x{MIN_HEIGHT})");
        if msg.len() + need.len() <= area.width as usize {
            msg.push_str(&need);
        }
        let row = Rect { height: 1, ..area };
        frame.render_widget(
            Paragraph::new(Line::from(Span::styled(
                crate::render::one_line(&msg, area.width as usize),
                Style::default().fg(Color::Yellow),
            ))),
            row,
        );
        return;
    }
    if app.screen == Screen::Picker {
        draw_picker(app, frame, area);
        return;
    }
    let width = area.width;
    let (rows, cursor) = match &app.deny_reason {
        Some(_) => (Vec::new(), (0, 0)),
        None => app.editor.layout(width.saturating_sub(2)),
    };
    let input_h = (rows.len() as u16).clamp(1, (area.height / 3).max(1)) + 1;
    let perm = permission_lines(app);
    let perm_rows: Vec<Line<'static>> = perm
        .into_iter()
        .flat_map(|l| wrap(l, width.saturating_sub(2) as usize))
        .collect();
    let perm_h = if perm_rows.is_empty() {
        0
    } else {
        (perm_rows.len() as u16 + 2).min(area.height / 2)
    };
    let [transcript, perm_area, input_area, status] = Layout::vertical([
        Constraint::Min(1),
        Constraint::Length(perm_h),
        Constraint::Length(input_h),
        Constraint::Length(1),
    ])
    .areas(area);
    frame.render_widget(
        Paragraph::new(transcript_rows(app, transcript.width, transcript.height)),
        transcript,
    );
    if perm_h > 0 {
        frame.render_widget(
            Paragraph::new(perm_rows).block(
                Block::default()
                    .borders(Borders::ALL)
                    .border_style(Style::default().fg(Color::Yellow))
                    .title(" permission "),
            ),
            perm_area,
        );
    }
    let attached = (!app.images.is_empty()).then(|| {
        let names: Vec<String> = app.images.iter().map(|i| i.name()).collect();
        Span::styled(
            format!(" [{} image(s): {}] ", names.len(), names.join(", ")),
            Style::default().fg(Color::Magenta),
        )
    });
    let title = match &app.hint {
        Some(h) => Span::styled(format!(" {h} "), Style::default().fg(Color::Yellow)),
        None if app.running() => {
            Span::styled(" Enter steers · Alt+Enter queues · Esc interrupts ", dim())
        }
        None => Span::styled(" Enter sends · Shift/Alt+Enter new line · /help ", dim()),
    };
    let block = Block::default()
        .borders(Borders::TOP)
        .border_style(dim())
        .title(Line::from(
            attached.into_iter().chain([title]).collect::<Vec<_>>(),
        ));
    let inner = block.inner(input_area);
    // Keep the cursor's row in view when the text is taller than the box.
    let first = (cursor.0 + 1).saturating_sub(inner.height);
    let shown: Vec<Line> = rows
        .into_iter()
        .skip(first as usize)
        .take(inner.height as usize)
        .map(|r| Line::from(vec![Span::styled("> ", dim()), Span::raw(r)]))
        .collect();
    frame.render_widget(Paragraph::new(shown).block(block), input_area);
    if app.deny_reason.is_none() && app.permissions.is_empty() {
        frame.set_cursor_position(Position {
            x: inner.x + 2 + cursor.1,
            y: inner.y + cursor.0 - first,
        });
    }
    frame.render_widget(Paragraph::new(status_line(app)), status);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::app::TurnSettings;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;
    use serde_json::json;

    fn screen(app: &App, w: u16, h: u16) -> String {
        let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
        t.draw(|f| draw(app, f)).unwrap();
        let buf = t.backend().buffer().clone();
        let mut out = String::new();
        for y in 0..h {
            let mut line = String::new();
            let mut x = 0;
            while x < w {
                let sym = buf[(x, y)].symbol();
                line.push_str(sym);
                x += unicode_width::UnicodeWidthStr::width(sym).max(1) as u16;
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    fn app() -> App {
        let mut a = App::new("/w".into(), TurnSettings::default());
        a.session_id = Some("s1".into());
        let events = [
            json!({"seq":0,"type":"session_started","data":{"workspace":"/w","title":"demo"}}),
            json!({"seq":1,"type":"turn_started","data":{"turn_id":"t","model":"gpt-x","sandbox":{"mode":"read_only"}}}),
            json!({"seq":2,"type":"user_message","data":{"text":"héllo 世界"}}),
            json!({"seq":3,"type":"reasoning","data":{"item":{"summary":[{"text":"look first"}]}}}),
            json!({"seq":4,"type":"tool_call","data":{"call_id":"c","name":"list_dir","args":{"path":"."}}}),
            json!({"seq":5,"type":"tool_result","data":{"call_id":"c","ok":true,"output":"a.txt\nb.txt"}}),
            json!({"seq":6,"type":"assistant_message","data":{"text":"Two files: `a.txt` and **b**.\n```sh\nls -la\n```"}}),
            json!({"type":"context_pressure","data":{"pressure":0.42}}),
            json!({"seq":7,"type":"turn_ended","data":{"turn_id":"t","status":"completed"}}),
        ];
        for e in &events {
            a.view.apply(e);
        }
        a
    }

    #[test]
    fn a_finished_turn_draws_prompt_reasoning_tool_answer_and_status() {
        let s = screen(&app(), 80, 16);
        let want = [
            "",
            "› héllo 世界",
            "▸ reasoning: look first  (Ctrl-R)",
            "⏺ list_dir .",
            "  ⎿ 11 B  a.txt b.txt",
            "Two files: a.txt and b.",
            "┌ sh",
            "│ ls -la",
            "└",
        ]
        .join("\n");
        assert!(s.contains(&want), "{s}");
        assert!(
            s.contains(" idle  │ demo │ gpt-x │ mode default │ sandbox read_only │ ctx 42%"),
            "{s}"
        );
        assert!(s.contains("Enter sends"), "{s}");
    }

    #[test]
    fn a_small_terminal_gets_a_notice_and_wide_text_wraps_whole() {
        let s = screen(&app(), 20, 8);
        assert_eq!(s.lines().next().unwrap(), "too small: 20x8");
        assert_eq!(
            screen(&app(), 40, 6).lines().next().unwrap(),
            "too small: 40x6 (needs 24x8)"
        );
        let mut a = app();
        a.view.apply(&json!({"seq":8,"type":"user_message","data":{"text":"日本語日本語日本語日本語日本語"}}));
        let s = screen(&a, 24, 10);
        assert!(s.contains("› 日本語日本語日本語日本"), "{s}");
        assert!(s.contains("語日本語"), "{s}");
    }

    #[test]
    fn a_permission_request_shows_the_grant_and_the_keys() {
        let mut a = app();
        a.on_request(
            json!(1),
            "agentd/permission",
            &json!({"session_id":"s1","tool":"shell","args":{"command":"make"},
                    "sandbox_grant":{"network":"host"},"justification":"fetch deps"}),
        );
        let s = screen(&a, 70, 20);
        assert!(s.contains("Allow shell make?"), "{s}");
        assert!(
            s.contains(r#"sandbox grant asked: {"network":"host"}"#),
            "{s}"
        );
        assert!(s.contains("justification: fetch deps"), "{s}");
        assert!(
            s.contains("[y] allow once   [a] allow for the session   [n] deny"),
            "{s}"
        );
        assert!(s.contains("waiting for approval"), "{s}");
    }

    #[test]
    fn disconnected_and_streaming_states_show() {
        let mut a = app();
        a.view
            .apply(&json!({"seq":8,"type":"turn_started","data":{"turn_id":"t2"}}));
        a.view
            .apply(&json!({"type":"text_delta","data":{"text":"partial ans"}}));
        let s = screen(&a, 60, 12);
        assert!(s.contains("partial ans▍"), "{s}");
        assert!(s.contains("running"), "{s}");
        assert!(s.contains("Alt+Enter queues"), "{s}");
        a.on_disconnected();
        let s = screen(&a, 60, 12);
        assert!(s.contains("disconnected, reconnecting"), "{s}");
    }
}
