//! Prometheus series selectors: `name{label="v",other=~"re.*",x!="y",y!~"z"}`.
//! Parsed from user input (CLI arguments, URL parameters), so the parser never
//! panics and reports the byte offset of what it did not understand.

use std::fmt;

use regex::Regex;

use crate::series::{METRIC_NAME_LABEL, SeriesKey};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatchOp {
    Equal,
    NotEqual,
    Regex,
    NotRegex,
}

/// The most memory one compiled regex (and, apart, its lazy DFA's cache) may
/// take: a label regex a person writes compiles to a few KiB; `(.*){10000}`
/// would take hundreds of MB and seconds, so it is refused at once.
pub const REGEX_BYTES_MAX: usize = 256 << 10;
/// The most matchers one selector may hold.
pub const MATCHERS_MAX: usize = 64;

/// One `label op "value"` condition. Regexes are anchored at both ends, as in
/// Prometheus: `mode=~"user|system"` does not match `user_extra`.
#[derive(Clone, Debug)]
pub struct Matcher {
    pub label: String,
    pub op: MatchOp,
    pub value: String,
    regex: Option<Regex>,
}

impl Matcher {
    pub fn new(label: impl Into<String>, op: MatchOp, value: impl Into<String>) -> Result<Matcher, regex::Error> {
        let value = value.into();
        let regex = match op {
            MatchOp::Regex | MatchOp::NotRegex => Some(
                regex::RegexBuilder::new(&format!("^(?:{value})$"))
                    .size_limit(REGEX_BYTES_MAX)
                    .dfa_size_limit(REGEX_BYTES_MAX)
                    .build()?,
            ),
            MatchOp::Equal | MatchOp::NotEqual => None,
        };
        Ok(Matcher { label: label.into(), op, value, regex })
    }

    /// Whether a label value (`""` when the label is absent) satisfies this.
    pub fn matches(&self, v: &str) -> bool {
        match (self.op, &self.regex) {
            (MatchOp::Equal, _) => v == self.value,
            (MatchOp::NotEqual, _) => v != self.value,
            (MatchOp::Regex, Some(re)) => re.is_match(v),
            (MatchOp::NotRegex, Some(re)) => !re.is_match(v),
            (_, None) => unreachable!("regex matchers always hold a compiled regex"),
        }
    }
}

impl PartialEq for Matcher {
    fn eq(&self, other: &Matcher) -> bool {
        self.label == other.label && self.op == other.op && self.value == other.value
    }
}

/// A conjunction of matchers. The empty selector matches every series.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selector {
    pub matchers: Vec<Matcher>,
}

impl Selector {
    pub fn all() -> Selector {
        Selector::default()
    }

    pub fn matches(&self, key: &SeriesKey) -> bool {
        self.matchers.iter().all(|m| m.matches(key.get(&m.label).unwrap_or("")))
    }

    /// The metric name when the selector pins one with `=`: lets a store skip
    /// series of other names without evaluating every matcher.
    pub fn exact_name(&self) -> Option<&str> {
        self.matchers.iter().find(|m| m.label == METRIC_NAME_LABEL && m.op == MatchOp::Equal).map(|m| m.value.as_str())
    }

    pub fn parse(input: &str) -> Result<Selector, SelectorError> {
        Parser { s: input, pos: 0 }.selector()
    }
}

impl std::str::FromStr for Selector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Selector, SelectorError> {
        Selector::parse(s)
    }
}

/// Whether `s` can stand bare before the braces: `[a-zA-Z_:][a-zA-Z0-9_:]*`.
fn is_metric_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

impl fmt::Display for Selector {
    /// Prints a selector that parses back to the same matchers in the same
    /// order: the name stands bare only when it is the first matcher.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bare = self
            .matchers
            .first()
            .filter(|m| m.label == METRIC_NAME_LABEL && m.op == MatchOp::Equal && is_metric_name(&m.value));
        if let Some(m) = bare {
            f.write_str(&m.value)?;
        }
        let rest = &self.matchers[usize::from(bare.is_some())..];
        if rest.is_empty() && bare.is_some() {
            return Ok(());
        }
        f.write_str("{")?;
        for (i, m) in rest.iter().enumerate() {
            let op = match m.op {
                MatchOp::Equal => "=",
                MatchOp::NotEqual => "!=",
                MatchOp::Regex => "=~",
                MatchOp::NotRegex => "!~",
            };
            let sep = if i == 0 { "" } else { "," };
            write!(f, "{sep}{}{op}\"", m.label)?;
            crate::series::write_escaped(f, &m.value)?;
            f.write_str("\"")?;
        }
        f.write_str("}")
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid selector {input:?} at byte {offset}: {what}")]
pub struct SelectorError {
    pub input: String,
    pub offset: usize,
    pub what: String,
}

struct Parser<'a> {
    s: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn err<T>(&self, what: impl Into<String>) -> Result<T, SelectorError> {
        Err(SelectorError { input: self.s.to_owned(), offset: self.pos, what: what.into() })
    }

    fn peek(&self) -> Option<char> {
        self.s[self.pos..].chars().next()
    }

    fn skip_ws(&mut self) {
        while let Some(c) = self.peek().filter(|c| c.is_whitespace()) {
            self.pos += c.len_utf8();
        }
    }

    fn eat(&mut self, token: &str) -> bool {
        if self.s[self.pos..].starts_with(token) {
            self.pos += token.len();
            true
        } else {
            false
        }
    }

    fn ident(&mut self, allow_colon: bool) -> Option<&str> {
        let start = self.pos;
        for (i, c) in self.s[start..].char_indices() {
            let ok = c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()) || (allow_colon && c == ':');
            if !ok {
                break;
            }
            self.pos = start + i + c.len_utf8();
        }
        (self.pos > start).then(|| &self.s[start..self.pos])
    }

    fn string(&mut self) -> Result<String, SelectorError> {
        let quote = match self.peek() {
            Some(q @ ('"' | '\'' | '`')) => q,
            _ => return self.err("expected a quoted string"),
        };
        let open = self.pos;
        self.pos += 1;
        let mut out = String::new();
        loop {
            let Some(c) = self.peek() else {
                self.pos = open;
                return self.err("unterminated string");
            };
            self.pos += c.len_utf8();
            match c {
                c if c == quote => return Ok(out),
                '\\' if quote != '`' => {
                    let Some(e) = self.peek() else { continue };
                    self.pos += e.len_utf8();
                    out.push(match e {
                        'n' => '\n',
                        't' => '\t',
                        'r' => '\r',
                        other => other,
                    });
                }
                c => out.push(c),
            }
        }
    }

    fn selector(mut self) -> Result<Selector, SelectorError> {
        let mut matchers = Vec::new();
        self.skip_ws();
        if let Some(name) = self.ident(true) {
            let name = name.to_owned();
            matchers.push(Matcher::new(METRIC_NAME_LABEL, MatchOp::Equal, name).expect("no regex"));
        }
        self.skip_ws();
        if self.eat("{") {
            loop {
                self.skip_ws();
                if self.eat("}") {
                    break;
                }
                let Some(label) = self.ident(false).map(str::to_owned) else {
                    return self.err("expected a label name");
                };
                if matchers.len() >= MATCHERS_MAX {
                    return self.err(format!("more than {MATCHERS_MAX} label matchers"));
                }
                self.skip_ws();
                let op = if self.eat("=~") {
                    MatchOp::Regex
                } else if self.eat("!~") {
                    MatchOp::NotRegex
                } else if self.eat("!=") {
                    MatchOp::NotEqual
                } else if self.eat("=") {
                    MatchOp::Equal
                } else {
                    return self.err("expected one of = != =~ !~");
                };
                self.skip_ws();
                let at = self.pos;
                let value = self.string()?;
                match Matcher::new(label, op, value) {
                    Ok(m) => matchers.push(m),
                    Err(e) => {
                        self.pos = at;
                        return self.err(format!("bad regex: {}", regex_reason(&e)));
                    }
                }
                self.skip_ws();
                if self.eat(",") {
                    continue;
                }
                if self.eat("}") {
                    break;
                }
                return self.err("expected , or }");
            }
        }
        self.skip_ws();
        if self.pos != self.s.len() {
            return self.err("unexpected trailing input");
        }
        Ok(Selector { matchers })
    }
}

/// The one-line reason from a regex error (its Display spans several lines
/// and shows our anchoring wrapper, which the user never typed).
fn regex_reason(e: &regex::Error) -> String {
    let text = e.to_string();
    let last = text.lines().last().unwrap_or_default();
    last.strip_prefix("error: ").unwrap_or(last).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::{Expect, expect};

    fn check(input: &str, expect: Expect) {
        let actual = match Selector::parse(input) {
            Ok(s) => s.to_string(),
            Err(e) => format!("error: {e}"),
        };
        expect.assert_eq(&actual);
    }

    #[test]
    fn heavy_regexes_and_long_selectors_are_refused() {
        let e = Selector::parse(r#"{a=~"(.*){10000}"}"#).unwrap_err().to_string();
        assert!(e.contains("bad regex") && e.contains("size limit"), "{e}");
        let many: Vec<String> = (0..=MATCHERS_MAX).map(|i| format!("l{i}=\"x\"")).collect();
        let e = Selector::parse(&format!("{{{}}}", many.join(","))).unwrap_err().to_string();
        assert!(e.contains("more than 64 label matchers"), "{e}");
        assert!(Selector::parse(r#"{mode=~"user|system|idle|iowait",cpu=~"[0-9]+"}"#).is_ok());
    }

    #[test]
    fn parses() {
        check("node_load1", expect![[r#"node_load1"#]]);
        check(
            " node_cpu_seconds_total { cpu = \"0\" , mode=~'user|system', } ",
            expect![[r#"node_cpu_seconds_total{cpu="0",mode=~"user|system"}"#]],
        );
        check(r#"{__name__=~"node_.*",device!~"lo"}"#, expect![[r#"{__name__=~"node_.*",device!~"lo"}"#]]);
        check(r#"m{path="a\"b"}"#, expect![[r#"m{path="a\"b"}"#]]);
        check("", expect![[r#"{}"#]]);
        check("job:rate5m", expect![[r#"job:rate5m"#]]);
        // Found by the selector fuzz target: a name that cannot stand bare.
        check(r#"{__name__="~x y"}"#, expect![[r#"{__name__="~x y"}"#]]);
        // Found by the selector fuzz target in CI: a second name matcher.
        check(r#"m_{__name__="n"}"#, expect![[r#"m_{__name__="n"}"#]]);
        check(r#"{a="b",__name__="m"}"#, expect![[r#"{a="b",__name__="m"}"#]]);
    }

    #[test]
    fn errors_point_at_the_problem() {
        check("m{", expect![[r#"error: invalid selector "m{" at byte 2: expected a label name"#]]);
        check(r#"m{a="b"#, expect![[r#"error: invalid selector "m{a=\"b" at byte 4: unterminated string"#]]);
        check(
            r#"m{a=~"("}"#,
            expect![[r#"error: invalid selector "m{a=~\"(\"}" at byte 5: bad regex: unclosed group"#]],
        );
        check("m{a}", expect![[r#"error: invalid selector "m{a}" at byte 3: expected one of = != =~ !~"#]]);
        check("m x", expect![[r#"error: invalid selector "m x" at byte 2: unexpected trailing input"#]]);
        check("9m", expect![[r#"error: invalid selector "9m" at byte 0: unexpected trailing input"#]]);
    }

    #[test]
    fn matching() {
        let key = SeriesKey::new("node_cpu_seconds_total", [("cpu", "0"), ("mode", "user")]);
        let yes = [
            "node_cpu_seconds_total",
            r#"{mode=~"us.*"}"#,
            r#"{cpu!="1"}"#,
            r#"{missing=""}"#,
            r#"{mode!~"idle"}"#,
            "",
        ];
        let no = ["node_load1", r#"{mode=~"us"}"#, r#"{cpu="1"}"#, r#"{missing!=""}"#, r#"{mode!~"user"}"#];
        for s in yes {
            assert!(Selector::parse(s).unwrap().matches(&key), "{s}");
        }
        for s in no {
            assert!(!Selector::parse(s).unwrap().matches(&key), "{s}");
        }
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in ".{0,40}") {
            let _ = Selector::parse(&s);
        }

        #[test]
        fn display_reparses(name in "[a-z_][a-z0-9_]{0,8}", v in "[ -~]{0,8}") {
            let sel = Selector {
                matchers: vec![
                    Matcher::new(METRIC_NAME_LABEL, MatchOp::Equal, name).unwrap(),
                    Matcher::new("l", MatchOp::NotEqual, v).unwrap(),
                ],
            };
            proptest::prop_assert_eq!(Selector::parse(&sel.to_string()).unwrap(), sel);
        }
    }
}
