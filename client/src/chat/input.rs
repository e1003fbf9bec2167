//! The input box's editor (a multi-line buffer with a cursor, prompt history) and the
//! mapping of key presses to the chat's actions. Pure: keys in, actions out.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use unicode_width::UnicodeWidthChar;

/// What a key press asks the chat to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Enter: send the prompt (steer while a turn runs) or run the slash command.
    Submit,
    /// Alt+Enter while a turn runs: queue the prompt after it.
    Queue,
    /// Esc: interrupt the running turn.
    Interrupt,
    /// Ctrl-C: interrupt, clear the input, or (a second time, idle) quit.
    CtrlC,
    /// Ctrl-D: quit.
    Quit,
    Complete,
    ScrollUp,
    ScrollDown,
    ScrollBottom,
    ToggleReasoning,
    ToggleTools,
    /// The key changed the input box (or did nothing visible).
    Edited,
    None,
}

/// A multi-line text buffer with a cursor (a byte index on a character boundary).
#[derive(Debug, Default, Clone)]
pub struct Editor {
    pub text: String,
    pub cursor: usize,
    history: Vec<String>,
    /// Position while browsing the history (`None`: editing the draft).
    browsing: Option<usize>,
    draft: String,
}

impl Editor {
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    pub fn insert_str(&mut self, s: &str) {
        // Pasted text keeps its newlines; carriage returns become newlines.
        let s = s.replace("\r\n", "\n").replace('\r', "\n");
        self.text.insert_str(self.cursor, &s);
        self.cursor += s.len();
    }

    pub fn insert(&mut self, c: char) {
        self.text.insert(self.cursor, c);
        self.cursor += c.len_utf8();
    }

    fn prev_boundary(&self) -> usize {
        self.text[..self.cursor]
            .char_indices()
            .next_back()
            .map_or(0, |(i, _)| i)
    }

    fn next_boundary(&self) -> usize {
        self.text[self.cursor..]
            .chars()
            .next()
            .map_or(self.cursor, |c| self.cursor + c.len_utf8())
    }

    pub fn backspace(&mut self) {
        if self.cursor > 0 {
            let p = self.prev_boundary();
            self.text.replace_range(p..self.cursor, "");
            self.cursor = p;
        }
    }

    pub fn delete(&mut self) {
        if self.cursor < self.text.len() {
            let n = self.next_boundary();
            self.text.replace_range(self.cursor..n, "");
        }
    }

    fn line_start(&self) -> usize {
        self.text[..self.cursor].rfind('\n').map_or(0, |i| i + 1)
    }

    fn line_end(&self) -> usize {
        self.text[self.cursor..]
            .find('\n')
            .map_or(self.text.len(), |i| self.cursor + i)
    }

    /// Moves the cursor one line up or down inside the buffer; false at the edge.
    fn vertical(&mut self, up: bool) -> bool {
        let start = self.line_start();
        let col = self.text[start..self.cursor].chars().count();
        let (from, to) = if up {
            if start == 0 {
                return false;
            }
            let prev_end = start - 1;
            let prev_start = self.text[..prev_end].rfind('\n').map_or(0, |i| i + 1);
            (prev_start, prev_end)
        } else {
            let end = self.line_end();
            if end == self.text.len() {
                return false;
            }
            let next_start = end + 1;
            let next_end = self.text[next_start..]
                .find('\n')
                .map_or(self.text.len(), |i| next_start + i);
            (next_start, next_end)
        };
        let line = &self.text[from..to];
        self.cursor = from + line.char_indices().nth(col).map_or(line.len(), |(i, _)| i);
        true
    }

    /// Takes the buffer (for sending) and records it in the history.
    pub fn take(&mut self) -> String {
        let t = std::mem::take(&mut self.text);
        self.cursor = 0;
        self.browsing = None;
        if !t.trim().is_empty() && self.history.last() != Some(&t) {
            self.history.push(t.clone());
        }
        t
    }

    pub fn clear(&mut self) {
        self.text.clear();
        self.cursor = 0;
        self.browsing = None;
    }

    pub fn set(&mut self, s: &str) {
        self.text = s.to_string();
        self.cursor = self.text.len();
    }

    fn history_step(&mut self, up: bool) {
        if self.history.is_empty() {
            return;
        }
        let next = match (self.browsing, up) {
            (None, true) => {
                self.draft = self.text.clone();
                Some(self.history.len() - 1)
            }
            (None, false) => return,
            (Some(0), true) => Some(0),
            (Some(i), true) => Some(i - 1),
            (Some(i), false) if i + 1 < self.history.len() => Some(i + 1),
            (Some(_), false) => None,
        };
        self.browsing = next;
        let text = match next {
            Some(i) => self.history[i].clone(),
            None => std::mem::take(&mut self.draft),
        };
        self.set(&text);
    }

    /// The rows of the buffer wrapped at `width` columns, and the cursor's (row, col).
    pub fn layout(&self, width: u16) -> (Vec<String>, (u16, u16)) {
        let width = width.max(2) as usize;
        let mut rows = vec![String::new()];
        let mut col = 0usize;
        let mut cursor = (0u16, 0u16);
        for (i, c) in self.text.char_indices() {
            if i == self.cursor {
                cursor = ((rows.len() - 1) as u16, col as u16);
            }
            if c == '\n' {
                rows.push(String::new());
                col = 0;
                continue;
            }
            let w = c.width().unwrap_or(0);
            if col + w > width {
                rows.push(String::new());
                col = 0;
                if i == self.cursor {
                    cursor = ((rows.len() - 1) as u16, 0);
                }
            }
            if let Some(r) = rows.last_mut() {
                r.push(if c.is_control() { ' ' } else { c });
            }
            col += w;
        }
        if self.cursor >= self.text.len() {
            if col >= width {
                rows.push(String::new());
                col = 0;
            }
            cursor = ((rows.len() - 1) as u16, col as u16);
        }
        (rows, cursor)
    }

    /// Applies an editing key; returns the action for the others.
    pub fn key(&mut self, key: KeyEvent, running: bool) -> Action {
        if key.kind == KeyEventKind::Release {
            return Action::None;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        let alt = key.modifiers.contains(KeyModifiers::ALT);
        let shift = key.modifiers.contains(KeyModifiers::SHIFT);
        match key.code {
            KeyCode::Enter if alt && running => Action::Queue,
            KeyCode::Enter if shift || alt => {
                self.insert('\n');
                Action::Edited
            }
            KeyCode::Char('j') if ctrl => {
                self.insert('\n');
                Action::Edited
            }
            KeyCode::Enter => Action::Submit,
            KeyCode::Esc => Action::Interrupt,
            KeyCode::Char('c') if ctrl => Action::CtrlC,
            KeyCode::Char('d') if ctrl => Action::Quit,
            KeyCode::Char('r') if ctrl => Action::ToggleReasoning,
            KeyCode::Char('o') if ctrl => Action::ToggleTools,
            KeyCode::Char('u') if ctrl => {
                let s = self.line_start();
                self.text.replace_range(s..self.cursor, "");
                self.cursor = s;
                Action::Edited
            }
            KeyCode::Char('a') if ctrl => {
                self.cursor = self.line_start();
                Action::Edited
            }
            KeyCode::Char('e') if ctrl => {
                self.cursor = self.line_end();
                Action::Edited
            }
            KeyCode::Tab => Action::Complete,
            KeyCode::PageUp => Action::ScrollUp,
            KeyCode::PageDown => Action::ScrollDown,
            KeyCode::End if ctrl => Action::ScrollBottom,
            KeyCode::Char(c) if !ctrl => {
                self.insert(c);
                Action::Edited
            }
            KeyCode::Backspace => {
                self.backspace();
                Action::Edited
            }
            KeyCode::Delete => {
                self.delete();
                Action::Edited
            }
            KeyCode::Left => {
                self.cursor = self.prev_boundary();
                Action::Edited
            }
            KeyCode::Right => {
                self.cursor = self.next_boundary();
                Action::Edited
            }
            KeyCode::Home => {
                self.cursor = self.line_start();
                Action::Edited
            }
            KeyCode::End => {
                self.cursor = self.line_end();
                Action::Edited
            }
            KeyCode::Up => {
                if !self.vertical(true) {
                    self.history_step(true);
                }
                Action::Edited
            }
            KeyCode::Down => {
                if !self.vertical(false) {
                    self.history_step(false);
                }
                Action::Edited
            }
            _ => Action::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    #[test]
    fn edits_multiline_and_wide_text() {
        let mut e = Editor::default();
        for c in "日本".chars() {
            e.key(k(KeyCode::Char(c)), false);
        }
        e.key(KeyEvent::new(KeyCode::Enter, KeyModifiers::SHIFT), false);
        e.key(k(KeyCode::Char('a')), false);
        assert_eq!(e.text, "日本\na");
        let (rows, cur) = e.layout(10);
        assert_eq!(rows, vec!["日本".to_string(), "a".into()]);
        assert_eq!(cur, (1, 1));
        e.key(k(KeyCode::Up), false);
        assert_eq!(e.layout(10).1, (0, 2));
        e.key(k(KeyCode::Backspace), false);
        assert_eq!(e.text, "本\na");
        // Wide characters wrap whole.
        e.set("日本語");
        assert_eq!(e.layout(5).0, vec!["日本".to_string(), "語".into()]);
        assert_eq!(
            e.key(KeyEvent::new(KeyCode::Enter, KeyModifiers::ALT), true),
            Action::Queue
        );
    }

    #[test]
    fn history_walks_back_and_returns_to_the_draft() {
        let mut e = Editor::default();
        e.set("one");
        e.take();
        e.set("two");
        e.take();
        e.set("dra");
        e.key(k(KeyCode::Up), false);
        assert_eq!(e.text, "two");
        e.key(k(KeyCode::Up), false);
        assert_eq!(e.text, "one");
        e.key(k(KeyCode::Down), false);
        e.key(k(KeyCode::Down), false);
        assert_eq!(e.text, "dra");
    }
}
