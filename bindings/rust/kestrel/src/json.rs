//! Just enough JSON to read the reply parser's deltas (the crate has no dependencies): a value
//! tree, and a check that text is one JSON value.

/// A parsed JSON value; numbers keep their text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Json {
    Null,
    Bool(bool),
    Number(String),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    /// The member `key` of an object.
    pub(crate) fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }
    pub(crate) fn as_array(&self) -> &[Json] {
        match self {
            Json::Array(items) => items,
            _ => &[],
        }
    }
}

/// Parses one JSON value (surrounding whitespace allowed); None when the text is not JSON.
pub(crate) fn parse(text: &str) -> Option<Json> {
    let mut p = Parser { s: text.as_bytes(), at: 0, depth: 0 };
    let v = p.value()?;
    p.ws();
    if p.at == p.s.len() {
        Some(v)
    } else {
        None
    }
}

struct Parser<'a> {
    s: &'a [u8],
    at: usize,
    depth: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.at < self.s.len() && matches!(self.s[self.at], b' ' | b'\t' | b'\n' | b'\r') {
            self.at += 1;
        }
    }
    fn eat(&mut self, b: u8) -> bool {
        self.ws();
        if self.s.get(self.at) == Some(&b) {
            self.at += 1;
            true
        } else {
            false
        }
    }
    fn literal(&mut self, word: &str, v: Json) -> Option<Json> {
        if self.s[self.at..].starts_with(word.as_bytes()) {
            self.at += word.len();
            Some(v)
        } else {
            None
        }
    }
    fn value(&mut self) -> Option<Json> {
        self.ws();
        self.depth += 1;
        if self.depth > 512 {
            return None;
        }
        let v = match *self.s.get(self.at)? {
            b'n' => self.literal("null", Json::Null),
            b't' => self.literal("true", Json::Bool(true)),
            b'f' => self.literal("false", Json::Bool(false)),
            b'"' => self.string().map(Json::String),
            b'[' => {
                self.at += 1;
                let mut items = Vec::new();
                if !self.eat(b']') {
                    loop {
                        items.push(self.value()?);
                        if self.eat(b']') {
                            break;
                        }
                        if !self.eat(b',') {
                            return None;
                        }
                    }
                }
                Some(Json::Array(items))
            }
            b'{' => {
                self.at += 1;
                let mut members = Vec::new();
                if !self.eat(b'}') {
                    loop {
                        self.ws();
                        let key = self.string()?;
                        if !self.eat(b':') {
                            return None;
                        }
                        members.push((key, self.value()?));
                        if self.eat(b'}') {
                            break;
                        }
                        if !self.eat(b',') {
                            return None;
                        }
                    }
                }
                Some(Json::Object(members))
            }
            _ => self.number(),
        };
        self.depth -= 1;
        v
    }
    fn number(&mut self) -> Option<Json> {
        let start = self.at;
        let digits = |p: &mut Parser<'_>| {
            let from = p.at;
            while p.at < p.s.len() && p.s[p.at].is_ascii_digit() {
                p.at += 1;
            }
            p.at > from
        };
        if self.s.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        if self.s.get(self.at) == Some(&b'0') {
            self.at += 1;
        } else if !digits(self) {
            return None;
        }
        if self.s.get(self.at) == Some(&b'.') {
            self.at += 1;
            if !digits(self) {
                return None;
            }
        }
        if matches!(self.s.get(self.at), Some(b'e') | Some(b'E')) {
            self.at += 1;
            if matches!(self.s.get(self.at), Some(b'+') | Some(b'-')) {
                self.at += 1;
            }
            if !digits(self) {
                return None;
            }
        }
        Some(Json::Number(String::from_utf8_lossy(&self.s[start..self.at]).into_owned()))
    }
    fn hex4(&mut self) -> Option<u32> {
        let h = std::str::from_utf8(self.s.get(self.at..self.at + 4)?).ok()?;
        self.at += 4;
        u32::from_str_radix(h, 16).ok()
    }
    fn string(&mut self) -> Option<String> {
        if self.s.get(self.at) != Some(&b'"') {
            return None;
        }
        self.at += 1;
        let mut out: Vec<u8> = Vec::new();
        loop {
            let b = *self.s.get(self.at)?;
            self.at += 1;
            match b {
                b'"' => return String::from_utf8(out).ok(),
                b'\\' => {
                    let e = *self.s.get(self.at)?;
                    self.at += 1;
                    let c = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hi = self.hex4()?;
                            let cp = if (0xD800..0xDC00).contains(&hi) && self.s[self.at..].starts_with(b"\\u") {
                                self.at += 2;
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return None;
                                }
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            } else {
                                hi
                            };
                            char::from_u32(cp).unwrap_or('\u{FFFD}')
                        }
                        _ => return None,
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                0..=0x1F => return None,
                _ => out.push(b),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_the_parser_writes() {
        let v = parse(r#" {"content": "a\"b\u00e9\ud83d\ude00", "tool_calls": [{"index": 0, "x": [true, null, -1.5e3]}]} "#).unwrap();
        assert_eq!(v.get("content").and_then(Json::as_str), Some("a\"bé😀"));
        let calls = v.get("tool_calls").unwrap().as_array();
        assert_eq!(calls[0].get("index"), Some(&Json::Number("0".into())));
        assert_eq!(
            calls[0].get("x"),
            Some(&Json::Array(vec![Json::Bool(true), Json::Null, Json::Number("-1.5e3".into())]))
        );
    }

    #[test]
    fn refuses_what_is_not_json() {
        for bad in ["", "{", "{\"a\" 1}", "[1,]", "01", "\"\u{1}\"", "tru", "1 2", "{\"a\": 1,}", "\"\\x\""] {
            assert!(parse(bad).is_none(), "{}", bad);
        }
        assert!(parse(&"[".repeat(100_000)).is_none());
    }
}
