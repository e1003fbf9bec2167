//! The fast path of a Log load: a line in exactly the form agentd writes (the
//! envelope's six keys in order, no whitespace, strings escaped as serde_json escapes
//! them, integers only, no duplicate key) is parsed in one pass straight into an
//! [`Event`], and is by construction byte-equal to the event's serialization. Any other
//! line is left to the general path (`StoredEvent::parse_line`: a serde_json parse and
//! a serialization to compare), which reads every valid line and reports the rest as
//! corrupt (docs/log-format.md#torn-tails).
//!
//! The fast path may leave a line in agentd's form to the general path (it is stricter:
//! floats, `-0`, deep nesting); it never takes a line the general path would read as
//! another event or keep in another form. The property test below and the `log` fuzz
//! target check that.

use agentd_proto::Event;
use serde_json::{Map, Number, Value};

/// Nesting deeper than this goes to the general path (serde_json's own limit is 128).
const MAX_DEPTH: usize = 100;

/// The event of `line` (no newline) when the line is in agentd's own form; `None`
/// when it is not (the caller then parses it the general way).
pub fn parse(line: &str) -> Option<Event> {
    let mut p = Parser {
        s: line,
        b: line.as_bytes(),
        i: 0,
    };
    p.lit(b"{\"id\":")?;
    let id = p.string()?;
    p.lit(b",\"session_id\":")?;
    let session_id = p.string()?;
    p.lit(b",\"seq\":")?;
    let seq = match p.number()? {
        Num::U(n) => n,
        Num::I(_) => return None,
    };
    p.lit(b",\"ts\":")?;
    let ts = p.string()?;
    p.lit(b",\"type\":")?;
    let kind = p.string()?;
    p.lit(b",\"data\":")?;
    let data = p.value(0)?;
    p.lit(b"}")?;
    (p.i == p.b.len()).then_some(Event {
        id,
        session_id,
        seq,
        ts,
        kind,
        data,
    })
}

struct Parser<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
}

enum Num {
    U(u64),
    I(i64),
}

impl Parser<'_> {
    fn lit(&mut self, want: &[u8]) -> Option<()> {
        let end = self.i.checked_add(want.len())?;
        (self.b.get(self.i..end)? == want).then(|| self.i = end)
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn value(&mut self, depth: usize) -> Option<Value> {
        match self.peek()? {
            b'"' => self.string().map(Value::String),
            b'{' => self.object(depth + 1),
            b'[' => self.array(depth + 1),
            b't' => self.lit(b"true").map(|()| Value::Bool(true)),
            b'f' => self.lit(b"false").map(|()| Value::Bool(false)),
            b'n' => self.lit(b"null").map(|()| Value::Null),
            b'-' | b'0'..=b'9' => Some(match self.number()? {
                Num::U(n) => Value::Number(Number::from(n)),
                Num::I(n) => Value::Number(Number::from(n)),
            }),
            _ => None,
        }
    }

    fn object(&mut self, depth: usize) -> Option<Value> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.i += 1; // `{`
        let mut map = Map::new();
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(Value::Object(map));
        }
        loop {
            if self.peek()? != b'"' {
                return None;
            }
            let key = self.string()?;
            self.lit(b":")?;
            let v = self.value(depth)?;
            // A repeated key serializes once: not agentd's form.
            if map.insert(key, v).is_some() {
                return None;
            }
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(Value::Object(map));
                }
                _ => return None,
            }
        }
    }

    fn array(&mut self, depth: usize) -> Option<Value> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.i += 1; // `[`
        let mut items = Vec::new();
        if self.peek()? == b']' {
            self.i += 1;
            return Some(Value::Array(items));
        }
        loop {
            items.push(self.value(depth)?);
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(Value::Array(items));
                }
                _ => return None,
            }
        }
    }

    /// An integer as serde_json writes one: no leading zero, no `+`, no fraction or
    /// exponent, no `-0`, within u64 (or i64 when negative).
    fn number(&mut self) -> Option<Num> {
        let neg = self.peek()? == b'-';
        if neg {
            self.i += 1;
        }
        let start = self.i;
        let mut n: u64 = 0;
        while let Some(c @ b'0'..=b'9') = self.peek() {
            n = n.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
            self.i += 1;
        }
        let digits = self.i - start;
        if digits == 0 || (digits > 1 && self.b[start] == b'0') {
            return None;
        }
        if matches!(self.peek(), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        if neg {
            if n == 0 {
                return None;
            }
            // -(2^63) is the lowest i64.
            let v = 0i64.checked_sub_unsigned(n)?;
            return Some(Num::I(v));
        }
        Some(Num::U(n))
    }

    /// A string escaped exactly as serde_json escapes one (the rule of
    /// `escaped_as_agentd_does` in the stored-event module); the cursor is on its
    /// opening quote.
    fn string(&mut self) -> Option<String> {
        if self.peek()? != b'"' {
            return None;
        }
        self.i += 1;
        let mut out: Option<String> = None;
        let mut seg = self.i;
        loop {
            let rel = memchr::memchr2(b'"', b'\\', &self.b[self.i..])?;
            let end = self.i + rel;
            // A raw control character is not JSON at all (the general path reports it).
            if self.b[self.i..end]
                .iter()
                .fold(false, |a, &c| a | (c < 0x20))
            {
                return None;
            }
            if self.b[end] == b'"' {
                self.i = end + 1;
                // The line is a `str` and the quotes are ASCII: these are char bounds.
                let tail = self.s.get(seg..end)?;
                return Some(match out {
                    None => tail.to_string(),
                    Some(mut o) => {
                        o.push_str(tail);
                        o
                    }
                });
            }
            let o = out.get_or_insert_with(|| String::with_capacity(end - seg + 16));
            o.push_str(self.s.get(seg..end)?);
            let c = match *self.b.get(end + 1)? {
                b'"' => '"',
                b'\\' => '\\',
                b'b' => '\u{8}',
                b't' => '\t',
                b'n' => '\n',
                b'f' => '\u{c}',
                b'r' => '\r',
                b'u' => {
                    let &[b'0', b'0', hi, lo] = self.b.get(end + 2..end + 6)? else {
                        return None;
                    };
                    let c = hex(hi)? * 16 + hex(lo)?;
                    // serde_json writes these short, and nothing above 0x1f escaped.
                    if c >= 0x20 || matches!(c, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d) {
                        return None;
                    }
                    self.i = end + 6;
                    seg = self.i;
                    o.push(char::from(c));
                    continue;
                }
                _ => return None,
            };
            o.push(c);
            self.i = end + 2;
            seg = self.i;
        }
    }
}

/// A lowercase hex digit (serde_json writes `\u001f`, never `\u001F`).
fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn general(line: &str) -> Option<(Event, bool)> {
        let ev: Event = serde_json::from_str(line).ok()?;
        let same = serde_json::to_string(&ev).ok()? == line;
        Some((ev, same))
    }

    fn ev(data: Value) -> Event {
        Event {
            id: "0123456789abcdef".into(),
            session_id: "s-1".into(),
            seq: 42,
            ts: "2026-11-01T00:00:00.000001Z".into(),
            kind: "tool_result".into(),
            data,
        }
    }

    #[test]
    fn agentd_lines_take_the_fast_path_and_equal_the_general_parse() {
        for data in [
            json!({}),
            json!({"call_id": "c1", "ok": true, "output": "line\n\"quoted\"\t\\ é😀 \u{1}\u{1f}\u{7f}"}),
            json!({"n": [0, 1, u64::MAX, -1, i64::MIN, null, false, [], {}], "o": {"a": {"b": "c"}}}),
            json!({"text": ""}),
        ] {
            let e = ev(data);
            let line = serde_json::to_string(&e).unwrap();
            assert_eq!(parse(&line).as_ref(), Some(&e), "{line}");
            assert_eq!(general(&line), Some((e, true)));
        }
    }

    #[test]
    fn other_forms_are_left_to_the_general_path() {
        let base = serde_json::to_string(&ev(json!({"a": 1}))).unwrap();
        let cases = [
            base.replace(r#""a":1"#, r#""a": 1"#),
            base.replace(r#""a":1"#, r#""a":1.0"#),
            base.replace(r#""a":1"#, r#""a":1e2"#),
            base.replace(r#""a":1"#, r#""a":01"#),
            base.replace(r#""a":1"#, r#""a":-0"#),
            base.replace(r#""a":1"#, r#""a":18446744073709551616"#),
            base.replace(r#""a":1"#, r#""a":"\/""#),
            base.replace(r#""a":1"#, r#""a":"\u0041""#),
            base.replace(r#""a":1"#, r#""a":"\u000a""#),
            base.replace(r#""a":1"#, r#""a":"\u001F""#),
            base.replace(r#""a":1"#, r#""a":"\ud83d\ude00""#),
            base.replace(r#""a":1"#, r#""a":1,"a":2"#),
            base.replace(r#""a":1"#, r#""a":tru"#),
            base.replace(r#""a":1"#, "\"a\":\"x\u{1}\""),
            base.replace(r#""seq":42"#, r#""seq":-1"#),
            base.replace(r#""id":"#, r#""extra":1,"id":"#),
            format!("{base} "),
            base[..base.len() - 1].to_string(),
            "[".repeat(200) + &"]".repeat(200),
        ];
        for line in cases {
            assert_eq!(parse(&line), None, "{line}");
        }
        let deep = base.replace(
            r#""a":1"#,
            &format!(r#""a":{}1{}"#, "[".repeat(120), "]".repeat(120)),
        );
        assert_eq!(parse(&deep), None, "deep nesting goes the general way");
        assert!(general(&deep).is_some_and(|(_, same)| same));
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<u64>().prop_map(|n| json!(n)),
            any::<i64>().prop_map(|n| json!(n)),
            any::<f64>().prop_map(|n| json!(n)),
            any::<String>().prop_map(Value::String),
            "[\\\\\"\\x00-\\x20/ée]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::vec(("[a-c\"\\\\]{0,3}", inner), 0..5)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    fn has_float(v: &Value) -> bool {
        match v {
            Value::Number(n) => n.is_f64(),
            Value::Array(a) => a.iter().any(has_float),
            Value::Object(o) => o.values().any(has_float),
            _ => false,
        }
    }

    /// Mutations that turn agentd's form into another valid (or invalid) JSON text.
    fn mutate(line: &str, at: usize, how: u8) -> String {
        let at = (0..=at.min(line.len()))
            .rev()
            .find(|i| line.is_char_boundary(*i))
            .unwrap_or(0);
        let (a, b) = line.split_at(at);
        let ins = match how % 8 {
            0 => " ",
            1 => "\\/",
            2 => "\\u0041",
            3 => "0",
            4 => ".5",
            5 => "\"",
            6 => ",",
            _ => "-",
        };
        format!("{a}{ins}{b}")
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        // Fast path taken ⟹ the general path parses the same event and finds the line
        // in agentd's form; agentd's form without floats ⟹ the fast path is taken.
        #[test]
        fn the_fast_path_agrees_with_the_general_one(
            data in json_value(),
            seq in any::<u64>(),
            id in any::<String>(),
            at in 0usize..400,
            how in any::<u8>(),
            mutated in any::<bool>(),
        ) {
            let mut e = ev(data);
            e.seq = seq;
            e.id = id;
            let mut line = serde_json::to_string(&e).unwrap();
            if mutated {
                line = mutate(&line, at, how);
            }
            match parse(&line) {
                Some(fast) => prop_assert_eq!(general(&line), Some((fast, true))),
                // Only floats (and depth, not generated here) leave agentd's own lines
                // to the general path.
                None => prop_assert!(mutated || has_float(&e.data), "refused an agentd line: {}", line),
            }
        }
    }
}
