//! InfluxQL, the statements InfluxDB 1.x users send: a lexer and a
//! recursive-descent parser into [`Statement`]s. No crate parses InfluxQL
//! in Rust (InfluxDB IOx's parser is not published), so this is ours; it
//! is fuzzed (`fuzz/fuzz_targets/influxql.rs`) and every error names the
//! token it stopped at and what it expected there.
//!
//! Grammar (the part served; `docs/api.md` lists it for users):
//!
//! ```text
//! statement := SELECT items FROM source [WHERE cond] [GROUP BY group {, group}] [fill(f)]
//!              [ORDER BY time [ASC|DESC]] [LIMIT n] [OFFSET n] [SLIMIT n] [SOFFSET n]
//!            | SHOW DATABASES | SHOW MEASUREMENTS [WITH MEASUREMENT (= name | =~ /re/)]
//!            | SHOW TAG KEYS [FROM m] | SHOW FIELD KEYS [FROM m]
//!            | SHOW TAG VALUES [FROM m] WITH KEY (= k | != k | =~ /re/ | !~ /re/ | IN (k, …))
//!            | SHOW SERIES [FROM m] [WHERE cond] | CREATE DATABASE name
//! items     := item {, item}        item := (* | arith) [AS name]
//! arith     := term {(+|-) term}    term := factor {(*|/|%) factor}
//! factor    := number | ( arith ) | - factor | name | call   (one name or call an item)
//! call      := f(name [, number]) | count(distinct(name))
//! cond      := and {OR and}         and := primary {AND primary}
//! primary   := ( cond ) | name op literal | time op time_expr
//! time_expr := (now() | 'RFC 3339' | integer ns | duration) {(+|-) duration}
//! ```

use regex::Regex;

use crate::aggregate::{Fill, Grouping};
use crate::query::FieldType;

/// A parsed statement.
#[derive(Debug)]
pub enum Statement {
    ShowDatabases,
    /// `SHOW RETENTION POLICIES [ON db]`.
    ShowRetentionPolicies(Option<String>),
    ShowMeasurements(Option<NameMatch>),
    /// `FROM m` or `FROM /re/`: the measurements it names.
    ShowTagKeys(Option<NameMatch>),
    ShowFieldKeys(Option<NameMatch>),
    ShowTagValues {
        from: Option<NameMatch>,
        keys: NameMatch,
    },
    ShowSeries {
        from: Option<NameMatch>,
        cond: Option<Expr>,
    },
    CreateDatabase(String),
    Select(Box<Select>),
    /// `SHOW … [EXACT] CARDINALITY`: what is counted, whether exactly (an
    /// estimate is written as influxd writes one, counted exactly here).
    Cardinality {
        of: Cardinality,
        exact: bool,
        from: Option<NameMatch>,
    },
}

/// What a cardinality statement counts.
#[derive(Debug)]
pub enum Cardinality {
    Series,
    Measurements,
    TagKeys,
    TagValues(NameMatch),
    FieldKeys,
}

/// A name test: `= n`, `!= n`, `=~ /re/`, `!~ /re/`, `IN (a, b)`.
#[derive(Debug)]
pub enum NameMatch {
    Eq(String),
    Ne(String),
    Re(Regex),
    NotRe(Regex),
    In(Vec<String>),
}

impl NameMatch {
    pub fn matches(&self, name: &str) -> bool {
        match self {
            NameMatch::Eq(n) => n == name,
            NameMatch::Ne(n) => n != name,
            NameMatch::Re(r) => r.is_match(name),
            NameMatch::NotRe(r) => !r.is_match(name),
            NameMatch::In(ns) => ns.iter().any(|n| n == name),
        }
    }
}

/// `SELECT … FROM m …`.
#[derive(Debug, Clone)]
pub struct Select {
    /// `FROM /re/`: every measurement the regex matches, each answered as
    /// if named (then `measurement` is empty), in name order.
    pub from_re: Option<Regex>,
    pub items: Vec<Item>,
    /// Per item, arithmetic of its values with numbers (`mean(bytes) * 8`,
    /// `used / 1024 / 1024`), each value alone; the column keeps the
    /// item's name, as in influxd.
    pub arith: Vec<Option<Arith>>,
    pub measurement: String,
    /// The database `FROM db.rp.m` or `FROM db..m` names (else `db=`).
    pub db: Option<String>,
    /// The time range, both ends inclusive (ns).
    pub from: i64,
    pub to: i64,
    /// What is left of `WHERE` once the time comparisons are taken out.
    pub cond: Option<Expr>,
    pub group: Grouping,
    pub desc: bool,
    pub limit: Option<usize>,
    pub offset: usize,
    pub slimit: Option<usize>,
    pub soffset: usize,
}

impl Select {
    /// Whether this selects function results rather than raw points.
    pub fn is_aggregate(&self) -> bool {
        self.items.iter().any(Item::is_aggregate)
    }

    /// This statement for a measurement of these fields (name and type,
    /// in name order) and tags: its wildcards made items (None: it has
    /// none). A function of `*` takes the fields of the types influxd
    /// gives it (`mean` numbers; `min`, `max` booleans too; `count`,
    /// `first`, `last`, `distinct`, `mode` any).
    pub(crate) fn expand(&self, fields: &[(String, FieldType)], tags: &[String]) -> Result<Option<Select>, String> {
        if !self.items.iter().any(|i| matches!(i, Item::Wild { .. })) {
            return Ok(None);
        }
        let (mut items, mut arith) = (Vec::new(), Vec::new());
        for (item, a) in self.items.iter().zip(&self.arith) {
            let Item::Wild { func, re, arg } = item else {
                items.push(item.clone());
                arith.push(a.clone());
                continue;
            };
            let before = items.len();
            let re = re.as_deref().map(|r| compile(r).expect("compiled when parsed"));
            let matches = |name: &str| re.as_ref().is_none_or(|re| re.is_match(name));
            match func {
                Some(func) => {
                    items.extend(fields.iter().filter(|(f, ty)| matches(f) && func.takes_in_wildcard(*ty)).map(
                        |(f, _)| Item::Call {
                            func: *func,
                            field: f.clone(),
                            arg: *arg,
                            alias: Some(format!("{}_{f}", func.name())),
                        },
                    ))
                }
                None => {
                    let mut names: Vec<&str> = fields
                        .iter()
                        .map(|(f, _)| f.as_str())
                        .chain(tags.iter().map(String::as_str))
                        .filter(|n| matches(n))
                        .collect();
                    names.sort_unstable();
                    names.dedup();
                    items.extend(names.into_iter().map(|n| Item::Var { name: n.to_owned(), alias: None, cast: None }));
                }
            }
            arith.extend((before..items.len()).map(|_| None));
        }
        if items.len() > ITEMS_MAX {
            return Err(format!("the select list's wildcards make {} columns; at most {ITEMS_MAX}", items.len()));
        }
        let mut out = self.clone();
        out.arith = arith;
        out.items = items;
        Ok(Some(out))
    }

    /// The transformation this selects, if any (then the only item).
    pub fn transform(&self) -> Option<(Transform, &Item, Option<i64>, Option<&str>)> {
        self.items.iter().find_map(|i| match i {
            Item::Transform { t, inner, arg, alias } => Some((*t, &**inner, *arg, alias.as_deref())),
            _ => None,
        })
    }
}

/// One item of the select list.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    Star,
    /// A field or tag, and its `::type` cast, as influxd casts: a field of
    /// another type answers null, but a float's `::integer` is truncated
    /// and an integer's `::float` kept; `::tag` names only a tag, `::field`
    /// only a field.
    Var {
        name: String,
        alias: Option<String>,
        cast: Option<Cast>,
    },
    Call {
        func: Func,
        field: String,
        arg: Option<f64>,
        alias: Option<String>,
    },
    /// Every field (and, raw, every tag) a wildcard matches — `mean(*)`,
    /// `count(/re/)`, `SELECT /re/` (`func` None) — made items of the
    /// measurement's fields when it is read (`Select::expand`), named
    /// `mean_f` as influxd names them. `re`: the regex (None: `*`).
    Wild {
        func: Option<Func>,
        re: Option<String>,
        arg: Option<f64>,
    },
    /// Arithmetic between several fields or functions (`a + b`,
    /// `sum(a) / count(a)`): its operands (`Var`s or `Call`s, at least
    /// two), computed as items, then `expr` of them per row; the column is
    /// named for its operands joined by `_` (`a_b`, `sum_count`), as
    /// influxd names it.
    Expr {
        operands: Vec<Item>,
        expr: Arith,
        alias: Option<String>,
    },
    /// A transformation of a field's points (`derivative(f, 1s)`) or of a
    /// function's buckets (`derivative(mean(f), 1s) … GROUP BY time(…)`):
    /// `inner` is an `Item::Var` or an `Item::Call`; `arg` the unit (ns) or
    /// the window (`moving_average`).
    Transform {
        t: Transform,
        inner: Box<Item>,
        arg: Option<i64>,
        alias: Option<String>,
    },
}

impl Item {
    /// A function's result (or arithmetic of such), not raw points.
    pub fn is_aggregate(&self) -> bool {
        match self {
            Item::Call { .. } | Item::Wild { func: Some(_), .. } => true,
            Item::Expr { operands, .. } => operands.iter().any(Item::is_aggregate),
            _ => false,
        }
    }
}

/// An arithmetic expression over values (`Value(i)`: the item's `i`th
/// field or function, 0 for an item of one) and numbers, as InfluxDB
/// evaluates it: integers stay integers through `+ - * %`, `/` gives a
/// float, and a division by zero gives 0.
#[derive(Debug, Clone, PartialEq)]
pub enum Arith {
    Value(usize),
    /// A number; whether it was written as an integer.
    Lit(f64, bool),
    Bin(u8, Box<Arith>, Box<Arith>),
}

impl Arith {
    /// The expression of `values` (each with whether it is an integer):
    /// the result and whether it is an integer.
    pub fn eval(&self, values: &[(f64, bool)]) -> (f64, bool) {
        match self {
            Arith::Value(i) => values[*i],
            Arith::Lit(v, i) => (*v, *i),
            Arith::Bin(op, a, b) => {
                let ((a, ai), (b, bi)) = (a.eval(values), b.eval(values));
                if ai && bi && *op != b'/' {
                    let (a, b) = (a as i64, b as i64);
                    let v = match op {
                        b'+' => a.wrapping_add(b),
                        b'-' => a.wrapping_sub(b),
                        b'*' => a.wrapping_mul(b),
                        _ if b == 0 => 0,
                        _ => a.wrapping_rem(b),
                    };
                    return (v as f64, true);
                }
                let v = match op {
                    b'+' => a + b,
                    b'-' => a - b,
                    b'*' => a * b,
                    _ if b == 0.0 => 0.0,
                    b'/' => a / b,
                    _ => a % b,
                };
                (v, false)
            }
        }
    }
}

/// The transformations served (each over consecutive points of a series).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transform {
    Derivative,
    NonNegativeDerivative,
    Difference,
    NonNegativeDifference,
    CumulativeSum,
    MovingAverage,
    Elapsed,
    /// A function of each value (`abs`, `sqrt`, …): every point kept.
    Math(MathFn),
}

/// The math functions served, one argument each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MathFn {
    Abs,
    Ceil,
    Floor,
    Round,
    Sqrt,
    Ln,
    Log2,
    Log10,
    Exp,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
}

const MATH: [(&str, MathFn); 15] = [
    ("abs", MathFn::Abs),
    ("ceil", MathFn::Ceil),
    ("floor", MathFn::Floor),
    ("round", MathFn::Round),
    ("sqrt", MathFn::Sqrt),
    ("ln", MathFn::Ln),
    ("log2", MathFn::Log2),
    ("log10", MathFn::Log10),
    ("exp", MathFn::Exp),
    ("sin", MathFn::Sin),
    ("cos", MathFn::Cos),
    ("tan", MathFn::Tan),
    ("asin", MathFn::Asin),
    ("acos", MathFn::Acos),
    ("atan", MathFn::Atan),
];

impl MathFn {
    /// Whether an integer stays an integer (`abs ceil floor round`).
    pub fn keeps_integers(self) -> bool {
        matches!(self, MathFn::Abs | MathFn::Ceil | MathFn::Floor | MathFn::Round)
    }

    /// The function of a float, as Go's `math` computes it (`round`: half
    /// away from zero, influxd's own).
    pub fn apply(self, x: f64) -> f64 {
        match self {
            MathFn::Abs => x.abs(),
            MathFn::Ceil => x.ceil(),
            MathFn::Floor => x.floor(),
            MathFn::Round => {
                let t = x.trunc();
                if (x - t).abs() >= 0.5 { t + 1f64.copysign(x) } else { t }
            }
            MathFn::Sqrt => x.sqrt(),
            MathFn::Ln => x.ln(),
            // Go's formulas (its `Log` is the platform's, as ours).
            MathFn::Log2 => go_log2(x),
            MathFn::Log10 => x.ln() * (1.0 / std::f64::consts::LN_10),
            MathFn::Exp => x.exp(),
            MathFn::Sin => x.sin(),
            MathFn::Cos => x.cos(),
            MathFn::Tan => x.tan(),
            MathFn::Asin => x.asin(),
            MathFn::Acos => x.acos(),
            MathFn::Atan => x.atan(),
        }
    }
}

/// Go's `math.Log2`: exact for powers of two, else `ln(frac)/ln 2 + exp`.
fn go_log2(x: f64) -> f64 {
    if !x.is_finite() || x <= 0.0 {
        return x.log2();
    }
    // frexp: x = frac × 2^exp, frac in [0.5, 1).
    let (mut frac, mut exp) = (x, 0i32);
    if frac < f64::MIN_POSITIVE {
        frac *= (1u64 << 52) as f64;
        exp -= 52;
    }
    let bits = frac.to_bits();
    exp += ((bits >> 52) & 0x7ff) as i32 - 1022;
    frac = f64::from_bits((bits & !(0x7ff << 52)) | (1022 << 52));
    if frac == 0.5 {
        return f64::from(exp - 1);
    }
    frac.ln() * (1.0 / std::f64::consts::LN_2) + f64::from(exp)
}

const TRANSFORMS: [(&str, Transform); 7] = [
    ("derivative", Transform::Derivative),
    ("non_negative_derivative", Transform::NonNegativeDerivative),
    ("difference", Transform::Difference),
    ("non_negative_difference", Transform::NonNegativeDifference),
    ("cumulative_sum", Transform::CumulativeSum),
    ("moving_average", Transform::MovingAverage),
    ("elapsed", Transform::Elapsed),
];

impl Transform {
    /// The column name InfluxDB gives its result.
    pub fn name(self) -> &'static str {
        if let Transform::Math(m) = self {
            return MATH.iter().find(|(_, f)| *f == m).map_or("?", |(n, _)| n);
        }
        TRANSFORMS.iter().find(|(_, t)| *t == self).map_or("?", |(n, _)| n)
    }
}

/// The functions served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Func {
    Count,
    CountDistinct,
    Sum,
    Mean,
    Median,
    Min,
    Max,
    First,
    Last,
    Spread,
    Stddev,
    Percentile,
    Distinct,
    Mode,
    /// `integral(f[, unit])`: the area under the points (trapezoids), per unit.
    Integral,
    /// `top(f, N)` / `bottom(f, N)`: the N largest / smallest points, each
    /// a row at its own time.
    Top,
    Bottom,
}

const FUNCS: [(&str, Func); 16] = [
    ("count", Func::Count),
    ("sum", Func::Sum),
    ("mean", Func::Mean),
    ("median", Func::Median),
    ("min", Func::Min),
    ("max", Func::Max),
    ("first", Func::First),
    ("last", Func::Last),
    ("spread", Func::Spread),
    ("stddev", Func::Stddev),
    ("percentile", Func::Percentile),
    ("distinct", Func::Distinct),
    ("mode", Func::Mode),
    ("integral", Func::Integral),
    ("top", Func::Top),
    ("bottom", Func::Bottom),
];

impl Func {
    /// The column name InfluxDB gives its result.
    pub fn name(self) -> &'static str {
        match self {
            Func::CountDistinct => "count",
            f => FUNCS.iter().find(|(_, g)| *g == f).map_or("?", |(n, _)| n),
        }
    }

    /// Whether `f(*)` takes a field of type `ty` (influxql's
    /// `RewriteFields`): most functions numbers only; `min`, `max`
    /// booleans too; `count`, `first`, `last`, `distinct`, `mode` any.
    pub(crate) fn takes_in_wildcard(self, ty: FieldType) -> bool {
        match ty {
            FieldType::Float | FieldType::Int | FieldType::Unsigned => true,
            FieldType::Bool => {
                matches!(
                    self,
                    Func::Min | Func::Max | Func::Count | Func::First | Func::Last | Func::Distinct | Func::Mode
                )
            }
            FieldType::Str => matches!(self, Func::Count | Func::First | Func::Last | Func::Distinct | Func::Mode),
        }
    }

    /// Whether its result is one of the values (so of the field's type):
    /// the selectors, `mode` and `distinct`.
    pub(crate) fn is_selector_of_values(self) -> bool {
        self.is_selector() || matches!(self, Func::Mode | Func::Distinct)
    }

    /// A selector returns one of the points, and alone, its time.
    pub fn is_selector(self) -> bool {
        matches!(self, Func::Min | Func::Max | Func::First | Func::Last | Func::Percentile)
    }
}

/// A `WHERE` condition.
#[derive(Debug, Clone)]
pub enum Expr {
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    /// `name op literal`; `kind` from a `::tag` / `::field` cast.
    Cmp {
        name: String,
        kind: Option<VarKind>,
        op: CmpOp,
        lit: Lit,
    },
    /// `time op t` (only at the top level of `AND`s once parsed).
    Time(CmpOp, i64),
}

/// A select item's `::type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cast {
    Tag,
    Field,
    Float,
    Integer,
    Unsigned,
    Boolean,
    String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VarKind {
    Tag,
    Field,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Re,
    NotRe,
}

#[derive(Debug, Clone)]
pub enum Lit {
    Str(String),
    Num(f64),
    Bool(bool),
    Regex(Regex),
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    /// A name; `quoted` names are never keywords.
    Ident {
        text: String,
        quoted: bool,
    },
    Str(String),
    Num(f64),
    Int(i64),
    /// A duration literal (`10s`, `1h`) in ns.
    Dur(i64),
    Regex(String),
    Op(&'static str),
}

impl std::fmt::Display for Tok {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tok::Ident { text, .. } => write!(f, "{text}"),
            Tok::Str(s) => write!(f, "'{s}'"),
            Tok::Num(n) => write!(f, "{n}"),
            Tok::Int(n) => write!(f, "{n}"),
            Tok::Dur(n) => write!(f, "{n}ns"),
            Tok::Regex(r) => write!(f, "/{r}/"),
            Tok::Op(o) => write!(f, "{o}"),
        }
    }
}

const OPS: [&str; 20] =
    ["=~", "!~", "!=", "<>", "<=", ">=", "::", "=", "<", ">", "(", ")", ",", ";", ".", "+", "-", "*", "/", "%"];

/// Splits a query into tokens. A `/` right after `=~`, `!~` or `FROM`
/// opens a regex; elsewhere it is division.
fn lex(s: &str) -> Result<Vec<Tok>, String> {
    let b = s.as_bytes();
    let mut out: Vec<Tok> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'-' && b.get(i + 1) == Some(&b'-') {
            // A comment to the end of the line.
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'\'' || c == b'"' {
            let mut text = String::new();
            let mut j = i + 1;
            loop {
                let Some(&d) = b.get(j) else { return Err(format!("unterminated quote from char {}", i + 1)) };
                if d == b'\\' && j + 1 < b.len() {
                    let e = b[j + 1];
                    if e != c && e != b'\\' {
                        text.push('\\');
                    }
                    // Push the escaped character whole (it may be multi-byte).
                    let len = utf8_len(e);
                    text.push_str(&s[j + 1..(j + 1 + len).min(b.len())]);
                    j += 1 + len;
                    continue;
                }
                if d == c {
                    break;
                }
                let len = utf8_len(d);
                text.push_str(&s[j..(j + len).min(b.len())]);
                j += len;
            }
            out.push(if c == b'\'' { Tok::Str(text) } else { Tok::Ident { text, quoted: true } });
            i = j + 1;
        } else if c == b'/' && regex_may_follow(out.last()) {
            let mut text = String::new();
            let mut j = i + 1;
            loop {
                let Some(&d) = b.get(j) else { return Err(format!("unterminated regex from char {}", i + 1)) };
                if d == b'\\' && b.get(j + 1) == Some(&b'/') {
                    text.push('/');
                    j += 2;
                    continue;
                }
                if d == b'/' {
                    break;
                }
                let len = utf8_len(d);
                text.push_str(&s[j..(j + len).min(b.len())]);
                j += len;
            }
            out.push(Tok::Regex(text));
            i = j + 1;
        } else if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            let start = i;
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
                i += 1;
            }
            if i < b.len()
                && (b[i] == b'e' || b[i] == b'E')
                && b.get(i + 1).is_some_and(|d| d.is_ascii_digit() || *d == b'-' || *d == b'+')
            {
                i += 2;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
            }
            let num = &s[start..i];
            let unit_start = i;
            while i < b.len() && (b[i].is_ascii_alphabetic() || b[i] >= 0x80) {
                i += 1;
            }
            let unit = &s[unit_start..i];
            if !unit.is_empty() {
                let d = crate::duration_ns(&s[start..i]).ok_or_else(|| {
                    format!("bad duration {:?} (an integer and ns, u, ms, s, m, h, d or w)", &s[start..i])
                })?;
                out.push(Tok::Dur(d));
            } else if let Ok(n) = num.parse::<i64>() {
                out.push(Tok::Int(n));
            } else {
                out.push(Tok::Num(num.parse().map_err(|_| format!("bad number {num:?}"))?));
            }
        } else if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] >= 0x80) {
                i += 1;
            }
            out.push(Tok::Ident { text: s[start..i].to_owned(), quoted: false });
        } else if let Some(op) = OPS.iter().find(|o| s[i..].starts_with(**o)) {
            out.push(Tok::Op(op));
            i += op.len();
        } else {
            let ch = s[i..].chars().next().unwrap_or('?');
            return Err(format!("unexpected {ch:?} at char {}", i + 1));
        }
    }
    Ok(out)
}

fn utf8_len(first: u8) -> usize {
    match first {
        0xf0.. => 4,
        0xe0.. => 3,
        0xc0.. => 2,
        _ => 1,
    }
}

fn regex_may_follow(prev: Option<&Tok>) -> bool {
    // Where `/` cannot divide (nothing on its left): a regex, as in
    // `FROM /re/`, `SELECT /re/, mean(/re/)`, `=~ /re/`.
    match prev {
        Some(Tok::Op(o)) => matches!(*o, "=~" | "!~" | "(" | ","),
        Some(Tok::Ident { text, quoted: false }) => {
            text.eq_ignore_ascii_case("FROM") || text.eq_ignore_ascii_case("SELECT")
        }
        _ => false,
    }
}

/// InfluxQL's time strings beside RFC 3339, as RFC 3339: a date alone
/// (`'2026-01-01'`, midnight UTC) and a date and time with a space
/// (`'2026-01-01 00:00:05.5'`, UTC), as influxd reads them.
fn influxql_time(s: &str) -> std::borrow::Cow<'_, str> {
    let b = s.as_bytes();
    let date = b.len() >= 10
        && b[..10].iter().enumerate().all(|(i, c)| if i == 4 || i == 7 { *c == b'-' } else { c.is_ascii_digit() });
    if date && b.len() == 10 {
        format!("{s}T00:00:00Z").into()
    } else if date && b.get(10) == Some(&b' ') && !s.ends_with('Z') {
        format!("{}T{}Z", &s[..10], &s[11..]).into()
    } else {
        s.into()
    }
}

/// Keywords that are never names unless quoted.
const RESERVED: [&str; 17] = [
    "SELECT", "FROM", "WHERE", "GROUP", "BY", "ORDER", "LIMIT", "OFFSET", "SLIMIT", "SOFFSET", "AND", "OR", "AS",
    "WITH", "SHOW", "CREATE", "FILL",
];

/// Parses `;`-separated statements; `now` is what `now()` means.
pub fn parse(q: &str, now: i64) -> Result<Vec<Statement>, String> {
    parse_each(q, now)?.into_iter().collect()
}

/// Whether a parse error refuses a statement kansoku does not support (a
/// statement error, as influxd answers one it cannot compile), not a
/// syntax error (which fails the whole request, as in influxd).
pub fn is_unsupported(e: &str) -> bool {
    e.contains("not supported")
}

/// [`parse`], statement by statement: a statement kansoku does not support
/// is an `Err` of its own and the others still run (issue 49: one such
/// statement lost the answers of all); a syntax error anywhere fails the
/// whole query, as in influxd.
pub fn parse_each(q: &str, now: i64) -> Result<Vec<Result<Statement, String>>, String> {
    let toks = lex(q)?;
    let mut p = Parser { toks, i: 0, now, depth: 0, comparisons: 0 };
    let mut out = Vec::new();
    loop {
        while p.eat_op(";") {}
        if p.peek().is_none() {
            break;
        }
        match p.statement() {
            Ok(st) => out.push(Ok(st)),
            Err(e) if is_unsupported(&e) => {
                // On to the next statement.
                while p.peek().is_some() && !p.eat_op(";") {
                    p.i += 1;
                }
                p.depth = 0;
                out.push(Err(e));
                continue;
            }
            Err(e) => return Err(e),
        }
        if p.peek().is_some() && !p.eat_op(";") {
            return Err(p.expected("; or the end of the query"));
        }
    }
    if out.is_empty() {
        return Err("empty query".into());
    }
    Ok(out)
}

struct Parser {
    toks: Vec<Tok>,
    i: usize,
    now: i64,
    /// Brackets open around the condition being parsed.
    depth: usize,
    /// Comparisons parsed in this statement's conditions.
    comparisons: usize,
}

/// How deep brackets may nest in a condition (`WHERE (` × 3,500 overflowed
/// the stack).
pub const DEPTH_MAX: usize = 64;
/// Comparisons one statement's conditions may hold: each `OR`/`AND` is a
/// level of the tree evaluation and drop walk recursively.
pub const COMPARISONS_MAX: usize = 512;
/// Fields and functions one item's arithmetic may combine.
pub const OPERANDS_MAX: usize = 16;
/// Items a select list may hold, its wildcards expanded (each is a column
/// of the answer, and naming them costs their number squared).
pub const ITEMS_MAX: usize = 1000;

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.i)
    }

    fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.i).cloned();
        self.i += 1;
        t
    }

    /// "found X, expected what" as InfluxDB words it.
    fn expected(&self, what: &str) -> String {
        match self.peek() {
            Some(t) => format!("found {t}, expected {what}"),
            None => format!("found the end of the query, expected {what}"),
        }
    }

    fn is_kw(&self, kw: &str) -> bool {
        matches!(self.peek(), Some(Tok::Ident { text, quoted: false }) if text.eq_ignore_ascii_case(kw))
    }

    fn eat_kw(&mut self, kw: &str) -> bool {
        let yes = self.is_kw(kw);
        if yes {
            self.i += 1;
        }
        yes
    }

    fn kw(&mut self, kw: &str) -> Result<(), String> {
        if self.eat_kw(kw) { Ok(()) } else { Err(self.expected(kw)) }
    }

    fn eat_op(&mut self, op: &str) -> bool {
        let yes = matches!(self.peek(), Some(Tok::Op(o)) if *o == op);
        if yes {
            self.i += 1;
        }
        yes
    }

    fn op(&mut self, op: &str) -> Result<(), String> {
        if self.eat_op(op) { Ok(()) } else { Err(self.expected(op)) }
    }

    fn ident(&mut self, what: &str) -> Result<String, String> {
        match self.peek() {
            Some(Tok::Ident { text, quoted }) if *quoted || !RESERVED.iter().any(|k| text.eq_ignore_ascii_case(k)) => {
                let t = text.clone();
                self.i += 1;
                Ok(t)
            }
            _ => Err(self.expected(what)),
        }
    }

    fn count(&mut self, what: &str) -> Result<usize, String> {
        match self.next() {
            Some(Tok::Int(n)) if n >= 0 => Ok(n as usize),
            _ => {
                self.i -= 1;
                Err(self.expected(&format!("a count after {what}")))
            }
        }
    }

    /// `m`, `"m"`, `db.rp.m`, `"db"."rp"."m"`, `db..m`: the last name counts.
    fn measurement(&mut self) -> Result<String, String> {
        self.qualified().map(|(_, m)| m)
    }

    /// The measurement and the database it names (`db.rp.m`, `db..m`;
    /// `rp.m` names none).
    fn qualified(&mut self) -> Result<(Option<String>, String), String> {
        if matches!(self.peek(), Some(Tok::Regex(_))) {
            return Err("a /regex/ names measurements only in SELECT … FROM /regex/: name one measurement".into());
        }
        let mut names = vec![self.ident("a measurement")?];
        while self.eat_op(".") && names.len() < 3 {
            if self.eat_op(".") {
                // `db..m`: the default retention policy.
                names.push(String::new());
            }
            names.push(self.ident("a measurement")?);
        }
        let m = names.pop().expect("one name at least");
        let db = (names.len() == 2).then(|| names.swap_remove(0));
        Ok((db, m))
    }

    fn statement(&mut self) -> Result<Statement, String> {
        if self.eat_kw("SELECT") {
            return self.select().map(|s| Statement::Select(Box::new(s)));
        }
        if self.eat_kw("CREATE") {
            self.kw("DATABASE")?;
            return Ok(Statement::CreateDatabase(self.ident("a database name")?));
        }
        if !self.eat_kw("SHOW") {
            return Err(self.expected("SELECT, SHOW or CREATE DATABASE"));
        }
        if self.eat_kw("DATABASES") {
            return Ok(Statement::ShowDatabases);
        }
        if self.eat_kw("RETENTION") {
            self.kw("POLICIES")?;
            let on = if self.eat_kw("ON") { Some(self.ident("a database name")?) } else { None };
            return Ok(Statement::ShowRetentionPolicies(on));
        }
        if self.eat_kw("MEASUREMENT") {
            let exact = self.eat_kw("EXACT");
            self.kw("CARDINALITY")?;
            return Ok(Statement::Cardinality { of: Cardinality::Measurements, exact, from: None });
        }
        if self.eat_kw("MEASUREMENTS") {
            let m = if self.eat_kw("WITH") {
                self.kw("MEASUREMENT")?;
                Some(self.name_match(false)?)
            } else {
                None
            };
            return Ok(Statement::ShowMeasurements(m));
        }
        if self.eat_kw("SERIES") {
            if self.is_kw("EXACT") || self.is_kw("CARDINALITY") {
                let exact = self.eat_kw("EXACT");
                self.kw("CARDINALITY")?;
                return Ok(Statement::Cardinality { of: Cardinality::Series, exact, from: self.from()? });
            }
            let from = self.from()?;
            let cond = if self.eat_kw("WHERE") {
                let c = self.cond()?;
                if has_time(&c) {
                    return Err("SHOW SERIES ... WHERE time ... is not supported: tag conditions only".into());
                }
                Some(c)
            } else {
                None
            };
            return Ok(Statement::ShowSeries { from, cond });
        }
        if self.eat_kw("FIELD") {
            if self.eat_kw("KEY") {
                let exact = self.eat_kw("EXACT");
                self.kw("CARDINALITY")?;
                return Ok(Statement::Cardinality { of: Cardinality::FieldKeys, exact, from: self.from()? });
            }
            self.kw("KEYS")?;
            return Ok(Statement::ShowFieldKeys(self.from()?));
        }
        if self.eat_kw("TAG") {
            if self.eat_kw("KEYS") {
                return Ok(Statement::ShowTagKeys(self.from()?));
            }
            if self.eat_kw("KEY") {
                let exact = self.eat_kw("EXACT");
                self.kw("CARDINALITY")?;
                return Ok(Statement::Cardinality { of: Cardinality::TagKeys, exact, from: self.from()? });
            }
            self.kw("VALUES")?;
            if self.is_kw("EXACT") || self.is_kw("CARDINALITY") {
                let exact = self.eat_kw("EXACT");
                self.kw("CARDINALITY")?;
                let from = self.from()?;
                if !self.eat_kw("WITH") {
                    return Err(self.expected("WITH KEY (SHOW TAG VALUES CARDINALITY needs WITH KEY = k)"));
                }
                self.kw("KEY")?;
                let keys = self.name_match(true)?;
                return Ok(Statement::Cardinality { of: Cardinality::TagValues(keys), exact, from });
            }
            let from = self.from()?;
            if !self.eat_kw("WITH") {
                return Err(self.expected("WITH KEY (SHOW TAG VALUES needs WITH KEY = k)"));
            }
            self.kw("KEY")?;
            return Ok(Statement::ShowTagValues { from, keys: self.name_match(true)? });
        }
        Err(self.expected("DATABASES, RETENTION POLICIES, MEASUREMENTS, SERIES, TAG KEYS, TAG VALUES or FIELD KEYS"))
    }

    /// `FROM m` or `FROM /re/` of a SHOW statement.
    fn from(&mut self) -> Result<Option<NameMatch>, String> {
        if !self.eat_kw("FROM") {
            return Ok(None);
        }
        if let Some(Tok::Regex(re)) = self.peek() {
            let re = compile(&re.clone())?;
            self.i += 1;
            return Ok(Some(NameMatch::Re(re)));
        }
        self.measurement().map(|m| Some(NameMatch::Eq(m)))
    }

    /// `= n`, `!= n`, `=~ /re/`, `!~ /re/`, and with `list`, `IN (a, b)`.
    fn name_match(&mut self, list: bool) -> Result<NameMatch, String> {
        if list && self.eat_kw("IN") {
            self.op("(")?;
            let mut names = vec![self.ident("a tag key")?];
            while self.eat_op(",") {
                names.push(self.ident("a tag key")?);
            }
            self.op(")")?;
            return Ok(NameMatch::In(names));
        }
        let op = match self.next() {
            Some(Tok::Op(o)) if ["=", "!=", "<>", "=~", "!~"].contains(&o) => o,
            _ => {
                self.i -= 1;
                return Err(self.expected("=, !=, =~ or !~"));
            }
        };
        if op == "=~" || op == "!~" {
            let re = match self.next() {
                Some(Tok::Regex(r)) => compile(&r)?,
                _ => {
                    self.i -= 1;
                    return Err(self.expected("a /regex/"));
                }
            };
            return Ok(if op == "=~" { NameMatch::Re(re) } else { NameMatch::NotRe(re) });
        }
        let name = match self.next() {
            Some(Tok::Ident { text, .. } | Tok::Str(text)) => text,
            _ => {
                self.i -= 1;
                return Err(self.expected("a name"));
            }
        };
        Ok(if op == "=" { NameMatch::Eq(name) } else { NameMatch::Ne(name) })
    }

    fn select(&mut self) -> Result<Select, String> {
        let (mut items, mut arith) = (Vec::new(), Vec::new());
        loop {
            let (item, expr) = self.item()?;
            items.push(item);
            arith.push(expr);
            if !self.eat_op(",") {
                break;
            }
        }
        self.kw("FROM")?;
        let (db, measurement, from_re) = match self.peek() {
            Some(Tok::Regex(re)) => {
                let re = compile(re)?;
                self.i += 1;
                (None, String::new(), Some(re))
            }
            _ => {
                let (db, m) = self.qualified()?;
                (db, m, None)
            }
        };
        let (mut from, mut to, mut cond) = (i64::MIN, i64::MAX, None);
        if self.eat_kw("WHERE") {
            let c = self.cond()?;
            (from, to, cond) = split_time(c)?;
        }
        let mut group = Grouping::default();
        if self.eat_kw("GROUP") {
            self.kw("BY")?;
            loop {
                self.group_item(&mut group)?;
                if !self.eat_op(",") {
                    break;
                }
            }
        }
        if self.eat_kw("FILL") {
            self.op("(")?;
            group.fill = match self.next() {
                Some(Tok::Ident { text, quoted: false }) => match text.to_ascii_lowercase().as_str() {
                    "null" => Fill::Null,
                    "none" => Fill::None,
                    "previous" => Fill::Previous,
                    "linear" => Fill::Linear,
                    _ => return Err(format!("fill({text}): null, none, previous, linear or a number")),
                },
                Some(Tok::Int(n)) => Fill::Value(n as f64),
                Some(Tok::Num(n)) => Fill::Value(n),
                Some(Tok::Op("-")) => match self.next() {
                    Some(Tok::Int(n)) => Fill::Value(-(n as f64)),
                    Some(Tok::Num(n)) => Fill::Value(-n),
                    _ => return Err("fill(-...): a number".into()),
                },
                _ => return Err("fill(...): null, none, previous, linear or a number".into()),
            };
            self.op(")")?;
        }
        let mut desc = false;
        if self.eat_kw("ORDER") {
            self.kw("BY")?;
            if !self.eat_kw("time") {
                return Err(self.expected("time (only ORDER BY time [ASC|DESC] is supported)"));
            }
            if self.eat_kw("DESC") {
                desc = true;
            } else {
                self.eat_kw("ASC");
            }
        }
        let (mut limit, mut offset, mut slimit, mut soffset) = (None, 0, None, 0);
        if self.eat_kw("LIMIT") {
            limit = Some(self.count("LIMIT")?);
        }
        if self.eat_kw("OFFSET") {
            offset = self.count("OFFSET")?;
        }
        if self.eat_kw("SLIMIT") {
            slimit = Some(self.count("SLIMIT")?);
        }
        if self.eat_kw("SOFFSET") {
            soffset = self.count("SOFFSET")?;
        }
        if self.eat_kw("TZ") {
            return Err("tz(...) is not supported: times are UTC".into());
        }
        // InfluxDB's buckets run to now() when the query names no end.
        if to == i64::MAX && group.time.is_some() {
            to = self.now;
        }
        let s = Select {
            from_re,
            items,
            arith,
            measurement,
            db,
            from,
            to,
            cond,
            group,
            desc,
            limit,
            offset,
            slimit,
            soffset,
        };
        check_items(&s)?;
        Ok(s)
    }

    /// An item of the select list, and the arithmetic of its values.
    fn item(&mut self) -> Result<(Item, Option<Arith>), String> {
        let (item, expr) = if self.eat_op("*") {
            (Item::Star, None)
        } else if let Some(Tok::Regex(re)) = self.peek() {
            let re = re.clone();
            compile(&re)?;
            self.i += 1;
            (Item::Wild { func: None, re: Some(re), arg: None }, None)
        } else {
            let mut operands = Vec::new();
            let expr = self.arith(&mut operands)?;
            if let Some(Item::Transform { t, .. }) = operands.iter().find(|o| matches!(o, Item::Transform { .. }))
                && (operands.len() > 1 || expr != Arith::Value(0))
            {
                return Err(format!("arithmetic on {}() is not supported yet", t.name()));
            }
            if operands.iter().any(|o| matches!(o, Item::Wild { .. })) && operands.len() > 1 {
                return Err("arithmetic on a wildcard is not supported yet: name the fields".into());
            }
            match (operands.len(), expr) {
                (0, _) => return Err("a number alone is not an item: select a field, a tag or a function".into()),
                (1, Arith::Value(0)) => (operands.pop().expect("one"), None),
                (1, expr) => (operands.pop().expect("one"), Some(expr)),
                (_, expr) => (Item::Expr { operands, expr, alias: None }, None),
            }
        };
        if !self.eat_kw("AS") {
            return Ok((item, expr));
        }
        let alias = Some(self.ident("a name after AS")?);
        let item = match item {
            Item::Star => return Err("* cannot have an alias".into()),
            Item::Wild { .. } => {
                return Err("a wildcard cannot have an alias: its columns are named for their fields".into());
            }
            Item::Var { name, cast, .. } => Item::Var { name, alias, cast },
            Item::Call { func, field, arg, .. } => Item::Call { func, field, arg, alias },
            Item::Transform { t, inner, arg, .. } => Item::Transform { t, inner, arg, alias },
            Item::Expr { operands, expr, .. } => Item::Expr { operands, expr, alias },
        };
        Ok((item, expr))
    }

    /// `arith` of the grammar; the fields and calls it holds go to
    /// `operands` (`Arith::Value(i)` names the `i`th).
    fn arith(&mut self, inner: &mut Vec<Item>) -> Result<Arith, String> {
        let mut e = self.term(inner)?;
        while let Some(op) = [b'+', b'-'].into_iter().find(|&o| self.eat_op(if o == b'+' { "+" } else { "-" })) {
            e = Arith::Bin(op, Box::new(e), Box::new(self.term(inner)?));
        }
        Ok(e)
    }

    fn term(&mut self, inner: &mut Vec<Item>) -> Result<Arith, String> {
        let mut e = self.factor(inner)?;
        while let Some((op, _)) = [(b'*', "*"), (b'/', "/"), (b'%', "%")].into_iter().find(|(_, o)| self.eat_op(o)) {
            e = Arith::Bin(op, Box::new(e), Box::new(self.factor(inner)?));
        }
        Ok(e)
    }

    fn factor(&mut self, inner: &mut Vec<Item>) -> Result<Arith, String> {
        match self.peek() {
            Some(Tok::Int(n)) => {
                let n = *n;
                self.i += 1;
                return Ok(Arith::Lit(n as f64, true));
            }
            Some(Tok::Num(n)) => {
                let n = *n;
                self.i += 1;
                return Ok(Arith::Lit(n, false));
            }
            _ => {}
        }
        let nested = self.eat_op("(");
        if nested || self.eat_op("-") {
            // Bounded, as conditions are: `((((…` or `----…` a few KB long
            // must not take the stack.
            self.depth += 1;
            if self.depth > DEPTH_MAX {
                return Err(format!("arithmetic nests deeper than {DEPTH_MAX}; write it flatter"));
            }
            let e = if nested {
                let e = self.arith(inner)?;
                self.op(")")?;
                e
            } else {
                Arith::Bin(b'*', Box::new(Arith::Lit(-1.0, true)), Box::new(self.factor(inner)?))
            };
            self.depth -= 1;
            return Ok(e);
        }
        let name = self.ident("a field, a tag, * or a function call")?;
        let item = if self.eat_op("(") {
            self.call(&name)?
        } else {
            let cast = self.var_cast()?;
            Item::Var { name, alias: None, cast }
        };
        if inner.len() >= OPERANDS_MAX {
            return Err(format!("arithmetic of more than {OPERANDS_MAX} fields or functions; write fewer"));
        }
        inner.push(item);
        Ok(Arith::Value(inner.len() - 1))
    }

    /// A cast after a selected name: whether it is `::integer`.
    /// A select item's `::type`.
    fn var_cast(&mut self) -> Result<Option<Cast>, String> {
        if !self.eat_op("::") {
            return Ok(None);
        }
        let t = self.ident("a type after ::")?;
        Ok(Some(match t.to_ascii_lowercase().as_str() {
            "tag" => Cast::Tag,
            "field" => Cast::Field,
            "float" => Cast::Float,
            "integer" => Cast::Integer,
            "unsigned" => Cast::Unsigned,
            "boolean" => Cast::Boolean,
            "string" => Cast::String,
            _ => return Err(format!("unknown type ::{t}")),
        }))
    }

    /// `::field` / `::tag` / `::float`… in a condition or a function's
    /// argument: which a name is (the store knows the type).
    fn cast(&mut self) -> Result<Option<VarKind>, String> {
        Ok(self.var_cast()?.map(|c| if c == Cast::Tag { VarKind::Tag } else { VarKind::Field }))
    }

    /// After `name(`.
    fn call(&mut self, name: &str) -> Result<Item, String> {
        let lower = name.to_ascii_lowercase();
        if let Some(&(_, t)) = TRANSFORMS.iter().find(|(n, _)| *n == lower) {
            return self.transform(t);
        }
        if let Some(&(_, m)) = MATH.iter().find(|(n, _)| *n == lower) {
            return self.transform(Transform::Math(m));
        }
        let Some(&(_, mut func)) = FUNCS.iter().find(|(n, _)| *n == lower) else {
            return Err(format!(
                "the function {name}() is not supported yet: kansoku's InfluxQL has {}",
                FUNCS
                    .iter()
                    .map(|f| f.0)
                    .chain(TRANSFORMS.iter().map(|t| t.0))
                    .chain(MATH.iter().map(|m| m.0))
                    .map(|f| format!("{f}()"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        };
        // `f(*)`, `f(/re/)`: the fields it matches, when the measurement is read.
        let wild = if self.eat_op("*") {
            Some(None)
        } else if let Some(Tok::Regex(re)) = self.peek() {
            let re = re.clone();
            compile(&re)?;
            self.i += 1;
            Some(Some(re))
        } else {
            None
        };
        if wild.is_some() && matches!(func, Func::Top | Func::Bottom | Func::Integral) {
            return Err(format!("{lower}() of a wildcard is not supported yet: name the field"));
        }
        let field = if wild.is_some() {
            String::new()
        } else if func == Func::Count && self.is_kw("distinct") {
            self.i += 1;
            self.op("(")?;
            func = Func::CountDistinct;
            let f = self.ident("a field")?;
            self.op(")")?;
            f
        } else {
            let f = self.ident(&format!("one field in {lower}()"))?;
            self.cast()?;
            f
        };
        let arg = if self.eat_op(",") {
            match self.next() {
                Some(Tok::Ident { .. }) if matches!(func, Func::Top | Func::Bottom) => {
                    return Err(format!("{lower}(field, tag, N) is not supported yet: {lower}(field, N)"));
                }
                Some(Tok::Int(n)) if matches!(func, Func::Top | Func::Bottom) && n <= 0 => {
                    return Err(format!("limit ({n}) in {lower} function must be at least 1"));
                }
                // integral(f, 1m): the unit, in ns.
                Some(Tok::Dur(d)) if func == Func::Integral && d > 0 => Some(d as f64),
                Some(Tok::Int(n)) if func != Func::Integral => Some(n as f64),
                Some(Tok::Num(n)) if func != Func::Integral => Some(n),
                _ => {
                    self.i -= 1;
                    return Err(self.expected(&format!("a number as {lower}()'s second argument")));
                }
            }
        } else {
            None
        };
        self.op(")")?;
        match (func, arg) {
            (Func::Percentile, None) => Err("invalid number of arguments for percentile, expected 2, got 1".into()),
            (Func::Top | Func::Bottom, None) => {
                Err(format!("invalid number of arguments for {lower}, expected at least 2, got 1"))
            }
            (Func::Percentile | Func::Integral | Func::Top | Func::Bottom, Some(_)) | (_, None) => Ok(match wild {
                Some(re) => Item::Wild { func: Some(func), re, arg },
                None => Item::Call { func, field, arg, alias: None },
            }),
            (_, Some(_)) => Err(format!("invalid number of arguments for {lower}, expected 1, got 2")),
        }
    }

    /// After `derivative(` and the like: a field or a function call, then
    /// the unit (a duration) or the window (`moving_average`: a count).
    fn transform(&mut self, t: Transform) -> Result<Item, String> {
        let name = self.ident(&format!("a field or a function in {}()", t.name()))?;
        let inner = if self.eat_op("(") {
            match self.call(&name)? {
                Item::Transform { .. } => {
                    return Err(format!("{}() of a transformation is not supported yet", t.name()));
                }
                call => call,
            }
        } else {
            self.cast()?;
            Item::Var { name, alias: None, cast: None }
        };
        let arg = if self.eat_op(",") {
            match (t, self.next()) {
                (Transform::MovingAverage, Some(Tok::Int(n))) if n > 0 => Some(n),
                (Transform::MovingAverage, _) => {
                    self.i -= 1;
                    return Err(self.expected("a count of points as moving_average()'s second argument"));
                }
                (
                    Transform::CumulativeSum
                    | Transform::Difference
                    | Transform::NonNegativeDifference
                    | Transform::Math(_),
                    _,
                ) => {
                    return Err(format!("invalid number of arguments for {}, expected 1, got 2", t.name()));
                }
                (_, Some(Tok::Dur(d))) if d > 0 => Some(d),
                _ => {
                    self.i -= 1;
                    return Err(self.expected(&format!("a duration as {}()'s unit", t.name())));
                }
            }
        } else if t == Transform::MovingAverage {
            return Err("invalid number of arguments for moving_average, expected 2, got 1".into());
        } else {
            None
        };
        self.op(")")?;
        Ok(Item::Transform { t, inner: Box::new(inner), arg, alias: None })
    }

    fn group_item(&mut self, group: &mut Grouping) -> Result<(), String> {
        if self.eat_op("*") {
            group.all_tags = true;
            return Ok(());
        }
        let name = self.ident("time(...), a tag or *")?;
        if name.eq_ignore_ascii_case("time") && self.eat_op("(") {
            let d = match self.next() {
                Some(Tok::Dur(d)) if d > 0 => d,
                _ => {
                    self.i -= 1;
                    return Err(self.expected("a duration like 10s in GROUP BY time(...)"));
                }
            };
            let mut offset = 0;
            if self.eat_op(",") {
                let neg = self.eat_op("-");
                offset = match self.next() {
                    Some(Tok::Dur(o)) => o,
                    _ => {
                        self.i -= 1;
                        return Err(self.expected("an offset duration in GROUP BY time(d, offset)"));
                    }
                };
                if neg {
                    offset = -offset;
                }
            }
            self.op(")")?;
            group.time = Some(d);
            group.offset = offset.rem_euclid(d);
            return Ok(());
        }
        group.tags.push(name);
        Ok(())
    }

    fn cond(&mut self) -> Result<Expr, String> {
        let mut lhs = self.and()?;
        while self.eat_kw("OR") {
            lhs = Expr::Or(Box::new(lhs), Box::new(self.and()?));
        }
        Ok(lhs)
    }

    fn and(&mut self) -> Result<Expr, String> {
        let mut lhs = self.primary()?;
        while self.eat_kw("AND") {
            lhs = Expr::And(Box::new(lhs), Box::new(self.primary()?));
        }
        Ok(lhs)
    }

    fn primary(&mut self) -> Result<Expr, String> {
        if self.eat_op("(") {
            self.depth += 1;
            if self.depth > DEPTH_MAX {
                return Err(format!("conditions nest brackets deeper than {DEPTH_MAX}; write them flatter"));
            }
            let e = self.cond()?;
            self.op(")")?;
            self.depth -= 1;
            return Ok(e);
        }
        self.comparisons += 1;
        if self.comparisons > COMPARISONS_MAX {
            return Err(format!("more than {COMPARISONS_MAX} comparisons in the conditions; split the query"));
        }
        let quoted = matches!(self.peek(), Some(Tok::Ident { quoted: true, .. }));
        let name = self.ident("a condition (tag or field, an operator, a value)")?;
        let kind = self.cast()?;
        let op = match self.next() {
            Some(Tok::Op(o)) => match o {
                "=" => CmpOp::Eq,
                "!=" | "<>" => CmpOp::Ne,
                "<" => CmpOp::Lt,
                "<=" => CmpOp::Le,
                ">" => CmpOp::Gt,
                ">=" => CmpOp::Ge,
                "=~" => CmpOp::Re,
                "!~" => CmpOp::NotRe,
                _ => {
                    self.i -= 1;
                    return Err(self.expected("a comparison (=, !=, <, <=, >, >=, =~, !~)"));
                }
            },
            _ => {
                self.i -= 1;
                return Err(self.expected("a comparison (=, !=, <, <=, >, >=, =~, !~)"));
            }
        };
        if !quoted && name.eq_ignore_ascii_case("time") {
            if matches!(op, CmpOp::Re | CmpOp::NotRe | CmpOp::Ne) {
                return Err("time can be compared with =, <, <=, > and >= only".into());
            }
            return Ok(Expr::Time(op, self.time_expr()?));
        }
        let lit = match self.next() {
            Some(Tok::Str(s)) => Lit::Str(s),
            Some(Tok::Int(n)) => Lit::Num(n as f64),
            Some(Tok::Num(n)) => Lit::Num(n),
            Some(Tok::Op("-")) => match self.next() {
                Some(Tok::Int(n)) => Lit::Num(-(n as f64)),
                Some(Tok::Num(n)) => Lit::Num(-n),
                _ => {
                    self.i -= 1;
                    return Err(self.expected("a number after -"));
                }
            },
            Some(Tok::Regex(r)) => Lit::Regex(compile(&r)?),
            Some(Tok::Ident { text, quoted: false }) if text.eq_ignore_ascii_case("true") => Lit::Bool(true),
            Some(Tok::Ident { text, quoted: false }) if text.eq_ignore_ascii_case("false") => Lit::Bool(false),
            Some(Tok::Ident { text, .. }) => {
                return Err(format!(
                    "comparing {name} with {text}: conditions compare with a value ('string', number, /regex/, true, false)"
                ));
            }
            _ => {
                self.i -= 1;
                return Err(self.expected("a value ('string', number, /regex/, true or false)"));
            }
        };
        if matches!(lit, Lit::Regex(_)) != matches!(op, CmpOp::Re | CmpOp::NotRe) {
            return Err(format!("{name}: =~ and !~ take a /regex/, the other comparisons a value"));
        }
        Ok(Expr::Cmp { name, kind, op, lit })
    }

    /// `now() - 1h`, `'2026-01-01T00:00:00Z' + 5s`, `1767225600000000000`, `10s`.
    fn time_expr(&mut self) -> Result<i64, String> {
        let mut t = match self.next() {
            Some(Tok::Ident { text, quoted: false }) if text.eq_ignore_ascii_case("now") => {
                self.op("(")?;
                self.op(")")?;
                self.now
            }
            Some(Tok::Str(s)) => {
                let s = influxql_time(&s);
                model::parse_time(&s, model::Timestamp(self.now)).map(|t| t.as_nanos()).map_err(|e| e.to_string())?
            }
            Some(Tok::Int(n)) | Some(Tok::Dur(n)) => n,
            Some(Tok::Op("-")) => match self.next() {
                Some(Tok::Int(n)) | Some(Tok::Dur(n)) => n.saturating_neg(),
                _ => return Err("time: a number after -".into()),
            },
            _ => {
                self.i -= 1;
                return Err(self.expected("a time (now(), 'RFC 3339', nanoseconds or a duration)"));
            }
        };
        loop {
            let plus = if self.eat_op("+") {
                true
            } else if self.eat_op("-") {
                false
            } else {
                return Ok(t);
            };
            let d = match self.next() {
                Some(Tok::Dur(d)) | Some(Tok::Int(d)) => d,
                _ => {
                    self.i -= 1;
                    return Err(self.expected("a duration"));
                }
            };
            t = if plus { t.saturating_add(d) } else { t.saturating_sub(d) };
        }
    }
}

/// A regex of a query, bounded as PromQL's are ([`model::REGEX_BYTES_MAX`]
/// compiled; the regex crate's default is 10 MiB).
fn compile(re: &str) -> Result<Regex, String> {
    regex::RegexBuilder::new(re)
        .size_limit(model::REGEX_BYTES_MAX)
        .dfa_size_limit(model::REGEX_BYTES_MAX)
        .build()
        .map_err(|e| format!("bad regex /{re}/: {e}"))
}

fn has_time(e: &Expr) -> bool {
    match e {
        Expr::And(a, b) | Expr::Or(a, b) => has_time(a) || has_time(b),
        Expr::Time(..) => true,
        Expr::Cmp { .. } => false,
    }
}

/// Takes the time comparisons out of the top-level `AND`s: the range
/// (inclusive ns) and what is left. Time under an `OR` is refused.
fn split_time(e: Expr) -> Result<(i64, i64, Option<Expr>), String> {
    let (mut from, mut to) = (i64::MIN, i64::MAX);
    let rest = take_time(e, &mut from, &mut to)?;
    Ok((from, to, rest))
}

fn take_time(e: Expr, from: &mut i64, to: &mut i64) -> Result<Option<Expr>, String> {
    match e {
        Expr::Time(op, t) => {
            match op {
                CmpOp::Gt => *from = (*from).max(t.saturating_add(1)),
                CmpOp::Ge => *from = (*from).max(t),
                CmpOp::Lt => *to = (*to).min(t.saturating_sub(1)),
                CmpOp::Le => *to = (*to).min(t),
                _ => {
                    *from = (*from).max(t);
                    *to = (*to).min(t);
                }
            }
            Ok(None)
        }
        Expr::And(a, b) => Ok(match (take_time(*a, from, to)?, take_time(*b, from, to)?) {
            (Some(a), Some(b)) => Some(Expr::And(Box::new(a), Box::new(b))),
            (a, b) => a.or(b),
        }),
        e @ Expr::Or(..) if has_time(&e) => {
            Err("time conditions under OR are not supported: AND them with the rest (time > a AND (x OR y))".into())
        }
        e => Ok(Some(e)),
    }
}

/// Where a transformation may be used, as InfluxDB states it.
fn check_transform(t: Transform, inner: &Item, s: &Select) -> Result<(), String> {
    match (inner, s.group.time) {
        // A math function of a function needs no time buckets.
        (Item::Call { .. }, None) if matches!(t, Transform::Math(_)) => Ok(()),
        (Item::Call { .. }, None) => {
            Err(format!("{}() of a function needs GROUP BY time(...), as in InfluxDB", t.name()))
        }
        (Item::Var { .. }, Some(_)) => Err(format!("aggregate function required inside the call to {}", t.name())),
        _ => Ok(()),
    }
}

/// The select list's rules, as InfluxDB states them.
fn check_items(s: &Select) -> Result<(), String> {
    if s.items.len() > ITEMS_MAX {
        return Err(format!("the select list holds {} items; at most {ITEMS_MAX}", s.items.len()));
    }
    if s.items.iter().zip(&s.arith).any(|(i, a)| matches!(i, Item::Wild { .. }) && a.is_some()) {
        return Err("arithmetic on a wildcard is not supported yet: name the fields".into());
    }
    for item in &s.items {
        let Item::Expr { operands, .. } = item else { continue };
        let calls = operands.iter().filter(|o| matches!(o, Item::Call { .. })).count();
        if calls > 0 && calls < operands.len() {
            return Err("mixing aggregate and non-aggregate queries is not supported".into());
        }
        if let Some(Item::Call { func, .. }) =
            operands.iter().find(|o| matches!(o, Item::Call { func: Func::Top | Func::Bottom | Func::Distinct, .. }))
        {
            return Err(format!("arithmetic on {}() is not supported yet", func.name()));
        }
        if operands.iter().any(|o| matches!(o, Item::Var { name, .. } if name == "time")) {
            return Err("arithmetic on time is not supported".into());
        }
    }
    let exprs = s.items.iter().any(|i| matches!(i, Item::Expr { .. }));
    if exprs || s.arith.iter().any(Option::is_some) {
        if let Some((t, _, _, _)) = s.transform() {
            return Err(format!("arithmetic beside {}() is not supported yet", t.name()));
        }
        if s.items.iter().any(|i| matches!(i, Item::Star)) {
            return Err("arithmetic beside * is not supported yet: name the fields".into());
        }
        if s.items.iter().any(|i| matches!(i, Item::Call { func: Func::Top | Func::Bottom, .. })) {
            return Err("arithmetic beside top() or bottom() is not supported yet".into());
        }
    }
    if let Some((t, _, _, _)) = s.transform() {
        // Several math functions side by side; any other transformation alone.
        let all_math = s.items.iter().all(|i| matches!(i, Item::Transform { t: Transform::Math(_), .. }));
        if s.items.len() > 1 && !all_math {
            return Err(format!("{}() beside other items is not supported yet: select it alone", t.name()));
        }
        if s.desc {
            return Err(format!("{}() with ORDER BY time DESC is not supported yet", t.name()));
        }
        for item in &s.items {
            let Item::Transform { t, inner, .. } = item else { continue };
            check_transform(*t, inner, s)?;
        }
        return Ok(());
    }
    let calls = s.items.iter().filter(|i| i.is_aggregate()).count();
    if calls == 0 {
        if s.group.time.is_some() {
            return Err("GROUP BY time(...) needs an aggregate (count(), mean(), …) in the SELECT".into());
        }
        return Ok(());
    }
    if calls < s.items.len() {
        return Err("mixing aggregate and non-aggregate queries is not supported".into());
    }
    if let Some(Item::Call { func: f @ (Func::Top | Func::Bottom), .. }) =
        s.items.iter().find(|i| matches!(i, Item::Call { func: Func::Top | Func::Bottom, .. }))
        && s.items.len() > 1
    {
        return Err(format!("selector function {}() cannot be combined with other functions", f.name()));
    }
    let distinct = s.items.iter().any(|i| matches!(i, Item::Call { func: Func::Distinct, .. }));
    if distinct && s.items.len() > 1 {
        return Err("aggregate function distinct() cannot be combined with other functions or fields".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Transformations parse with their inner field or function and their
    /// argument, and are refused where InfluxDB refuses them.
    #[test]
    fn transformations_parse_and_are_checked() {
        let s = match one(
            "SELECT non_negative_derivative(mean(x), 10s) AS r FROM m WHERE time > now() - 1h GROUP BY time(1m)",
        ) {
            Statement::Select(s) => *s,
            other => panic!("{other:?}"),
        };
        let (t, inner, arg, alias) = s.transform().unwrap();
        assert_eq!((t, arg, alias), (Transform::NonNegativeDerivative, Some(10_000_000_000), Some("r")));
        assert!(matches!(inner, Item::Call { func: Func::Mean, .. }));
        for (q, why) in [
            ("SELECT derivative(mean(x)) FROM m", "needs GROUP BY time"),
            ("SELECT derivative(x) FROM m WHERE time > now() - 1h GROUP BY time(1m)", "aggregate function required"),
            ("SELECT moving_average(x) FROM m", "expected 2, got 1"),
            ("SELECT difference(x, 1s) FROM m", "expected 1, got 2"),
            ("SELECT derivative(x), y FROM m", "select it alone"),
        ] {
            match parse(q, 0) {
                Err(e) => assert!(e.contains(why), "{q}: {e}"),
                Ok(s) => panic!("{q}: {s:?}"),
            }
        }
    }

    /// Issue 49: one statement kansoku does not support cost the answers of
    /// the others; a syntax error still fails the whole query.
    #[test]
    fn an_unsupported_statement_is_its_own_error() {
        let each =
            parse_each("SELECT load FROM cpu; SELECT sample(load, 2) FROM cpu WHERE (a = 'b'); SHOW DATABASES", 0)
                .unwrap();
        assert_eq!(each.len(), 3);
        assert!(each[0].is_ok() && each[2].is_ok(), "{each:?}");
        assert!(matches!(&each[1], Err(e) if is_unsupported(e)), "{each:?}");
        assert!(parse_each("SELECT load FROM cpu; SELECT FROM", 0).is_err());
        assert!(parse("SELECT load FROM cpu; SELECT sample(load, 2) FROM cpu", 0).is_err());
    }

    fn one(q: &str) -> Statement {
        let mut s = parse(q, 1_000_000_000_000).unwrap_or_else(|e| panic!("{q}: {e}"));
        assert_eq!(s.len(), 1);
        s.remove(0)
    }

    fn select(q: &str) -> Select {
        match one(q) {
            Statement::Select(s) => *s,
            other => panic!("{q}: {other:?}"),
        }
    }

    #[test]
    fn select_clauses_in_their_places() {
        let s = select(
            "SELECT mean(\"load\") AS avg, percentile(n, 95.5) FROM \"lab\".\"autogen\".cpu WHERE time >= now() - 10s AND host = 'a' \
             GROUP BY time(5s, 1s), host fill(linear) ORDER BY time DESC LIMIT 3 OFFSET 1 SLIMIT 2 SOFFSET 4",
        );
        assert_eq!(s.measurement, "cpu");
        assert_eq!((s.from, s.to), (1_000_000_000_000 - 10_000_000_000, 1_000_000_000_000), "buckets end at now()");
        assert_eq!(
            s.items,
            vec![
                Item::Call { func: Func::Mean, field: "load".into(), arg: None, alias: Some("avg".into()) },
                Item::Call { func: Func::Percentile, field: "n".into(), arg: Some(95.5), alias: None },
            ]
        );
        assert_eq!(
            (s.group.time, s.group.offset, s.group.tags.clone()),
            (Some(5_000_000_000), 1_000_000_000, vec!["host".into()])
        );
        assert_eq!(s.group.fill, Fill::Linear);
        assert_eq!((s.desc, s.limit, s.offset, s.slimit, s.soffset), (true, Some(3), 1, Some(2), 4));
        assert!(matches!(s.cond, Some(Expr::Cmp { op: CmpOp::Eq, .. })));
    }

    #[test]
    fn conditions_nest_with_or_binding_looser_than_and() {
        let s = select("SELECT * FROM m WHERE a = 'x' OR b > 2 AND (c =~ /y|z/ OR d != -1.5)");
        let Some(Expr::Or(l, r)) = s.cond else { panic!("{:?}", s.cond) };
        assert!(matches!(*l, Expr::Cmp { op: CmpOp::Eq, .. }));
        let Expr::And(_, inner) = *r else { panic!() };
        let Expr::Or(re, ne) = *inner else { panic!() };
        assert!(matches!(*re, Expr::Cmp { op: CmpOp::Re, lit: Lit::Regex(_), .. }));
        assert!(matches!(*ne, Expr::Cmp { op: CmpOp::Ne, lit: Lit::Num(-1.5), .. }));
    }

    #[test]
    fn time_in_ands_becomes_the_range() {
        let s = select("SELECT x FROM m WHERE (time > 5 AND a = 'b') AND time <= '1970-01-01T00:00:01Z'");
        assert_eq!((s.from, s.to), (6, 1_000_000_000));
        assert!(s.cond.is_some());
        let e = parse("SELECT x FROM m WHERE time > 5 OR a = 'b'", 0).unwrap_err();
        assert!(e.contains("under OR"), "{e}");
    }

    #[test]
    fn show_statements() {
        assert!(matches!(
            one("SHOW MEASUREMENTS WITH MEASUREMENT =~ /c.u/"),
            Statement::ShowMeasurements(Some(NameMatch::Re(_)))
        ));
        let Statement::ShowTagValues { from, keys: NameMatch::In(k) } =
            one("show tag values from cpu with key in (host, \"region\")")
        else {
            panic!()
        };
        assert!(matches!(from, Some(NameMatch::Eq(m)) if m == "cpu"));
        assert_eq!(k, ["host", "region"]);
        let Statement::ShowFieldKeys(Some(from)) = one("SHOW FIELD KEYS FROM /^c/") else { panic!() };
        assert!(from.matches("cpu") && !from.matches("mem"));
        assert!(matches!(one("SHOW SERIES FROM cpu WHERE host = 'a'"), Statement::ShowSeries { cond: Some(_), .. }));
        assert!(matches!(one("CREATE DATABASE \"my db\""), Statement::CreateDatabase(n) if n == "my db"));
        assert_eq!(parse("SHOW DATABASES; SHOW MEASUREMENTS;", 0).unwrap().len(), 2);
    }

    /// Arithmetic between fields or functions keeps its operands in order,
    /// each a `Value(i)` of the expression; with one operand it stays the
    /// item and its arithmetic.
    #[test]
    fn arithmetic_keeps_its_operands() {
        let s = select("SELECT sum(a) / count(a) AS r FROM m");
        let raw = select("SELECT (x + y) * x, x * 2 FROM m");
        let call = |func, f: &str| Item::Call { func, field: f.into(), arg: None, alias: None };
        let var = |n: &str| Item::Var { name: n.into(), alias: None, cast: None };
        let bin = |op, a, b| Arith::Bin(op, Box::new(a), Box::new(b));
        assert_eq!(
            s.items,
            vec![Item::Expr {
                operands: vec![call(Func::Sum, "a"), call(Func::Count, "a")],
                expr: bin(b'/', Arith::Value(0), Arith::Value(1)),
                alias: Some("r".into()),
            },]
        );
        assert_eq!(
            raw.items,
            vec![
                Item::Expr {
                    operands: vec![var("x"), var("y"), var("x")],
                    expr: bin(b'*', bin(b'+', Arith::Value(0), Arith::Value(1)), Arith::Value(2)),
                    alias: None,
                },
                var("x"),
            ]
        );
        assert_eq!(raw.arith, vec![None, Some(bin(b'*', Arith::Value(0), Arith::Lit(2.0, true)))]);
        assert_eq!(bin(b'/', Arith::Value(0), Arith::Value(1)).eval(&[(7.0, true), (2.0, true)]), (3.5, false));
        assert_eq!(bin(b'%', Arith::Value(0), Arith::Value(1)).eval(&[(7.0, true), (0.0, true)]), (0.0, true));
    }

    /// Wildcards become the measurement's fields (and, raw, tags) when it
    /// is read: a function takes the types influxd gives it, each column
    /// named `func_field`.
    #[test]
    fn wildcards_expand_to_the_fields_they_match() {
        let fields = [("b", FieldType::Bool), ("n", FieldType::Int), ("s", FieldType::Str), ("x", FieldType::Float)]
            .map(|(f, t)| (f.to_owned(), t));
        let tags = ["host".to_owned(), "sx".to_owned()];
        let names = |q: &str| -> Vec<String> {
            let s = select(q).expand(&fields, &tags).unwrap().expect("a wildcard");
            s.items
                .iter()
                .map(|i| match i {
                    Item::Call { field, alias, .. } => format!("{}={field}", alias.as_deref().unwrap()),
                    Item::Var { name, .. } => name.clone(),
                    other => panic!("{other:?}"),
                })
                .collect()
        };
        assert_eq!(names("SELECT mean(*) FROM m"), ["mean_n=n", "mean_x=x"]);
        assert_eq!(names("SELECT max(*) FROM m"), ["max_b=b", "max_n=n", "max_x=x"]);
        assert_eq!(
            names("SELECT count(*), last(/^[sx]/) FROM m"),
            ["count_b=b", "count_n=n", "count_s=s", "count_x=x", "last_s=s", "last_x=x"]
        );
        assert_eq!(names("SELECT /s/ FROM m"), ["host", "s", "sx"]);
        assert!(select("SELECT x FROM m").expand(&fields, &tags).unwrap().is_none());
        let s = select("SELECT /s/, x * 10 FROM m").expand(&fields, &tags).unwrap().unwrap();
        assert_eq!(s.arith.iter().filter(|a| a.is_some()).count(), 1, "the other items keep their arithmetic");
        assert!(s.arith.last().unwrap().is_some());
        let many = format!("SELECT {} FROM m", vec!["mean(*)"; 600].join(", "));
        assert!(select(&many).expand(&fields, &tags).unwrap_err().contains("at most 1000"));
    }

    #[test]
    fn errors_name_what_was_found_and_expected() {
        for (q, want) in [
            ("SELECT load FROM cpu WHERE NOT host='a'", "found host, expected"),
            ("SELECT FROM cpu", "found FROM, expected a field"),
            ("SELECT x FROM", "found the end of the query, expected a measurement"),
            ("SELECT nosuch(x) FROM m", "nosuch() is not supported"),
            ("SELECT 5 FROM m", "a number alone is not an item"),
            ("SELECT a + mean(b) FROM m", "mixing aggregate"),
            ("SELECT top(a, 2) / count(a) FROM m", "arithmetic on top()"),
            ("SELECT time + a FROM m", "arithmetic on time"),
            ("SELECT a+a+a+a+a+a+a+a+a+a+a+a+a+a+a+a+a FROM m", "more than 16"),
            ("SELECT abs(a) * 2 FROM m", "arithmetic on abs()"),
            ("SELECT x * 2, derivative(y) FROM m", "arithmetic beside derivative()"),
            ("SELECT *, x * 2 FROM m", "arithmetic beside *"),
            ("SELECT mean(*) * 2 FROM m", "arithmetic on a wildcard"),
            ("SELECT mean(*) AS m FROM m", "a wildcard cannot have an alias"),
            ("SELECT top(*, 2) FROM m", "top() of a wildcard"),
            ("SELECT percentile(*) FROM m", "expected 2, got 1"),
            ("SELECT mean(*, 2) FROM m", "expected 1, got 2"),
            ("SELECT mean(/(/) FROM m", "regex"),
            ("SELECT mean(*), x FROM m", "mixing aggregate"),
            ("SELECT x * FROM m", "found FROM, expected a field"),
            ("SELECT (x * 2 FROM m", "expected )"),
            (&format!("SELECT {}x FROM m", "(".repeat(5_000)), "nests deeper than 64"),
            (&format!("SELECT {}x FROM m", "- ".repeat(5_000)), "nests deeper than 64"),
            ("SELECT percentile(x) FROM m", "expected 2, got 1"),
            ("SELECT distinct(x), count(x) FROM m", "cannot be combined"),
            ("SELECT x, count(x) FROM m", "mixing aggregate"),
            ("SELECT x FROM m GROUP BY time(1s)", "needs an aggregate"),
            ("SELECT x FROM m WHERE a =~ 'str'", "take a /regex/"),
            ("SELECT x FROM m WHERE a = b", "comparing a with b"),
            ("SELECT x FROM m LIMIT -1", "a count after LIMIT"),
            ("SELECT x FROM m WHERE a = 'open", "unterminated quote"),
            ("SELECT x FROM m WHERE a =~ /open", "unterminated regex"),
            ("SELECT x FROM m WHERE a =~ /(/", "bad regex"),
            ("DROP DATABASE x", "expected SELECT, SHOW or CREATE DATABASE"),
            ("SELECT x FROM m ORDER BY host", "only ORDER BY time"),
            ("SELECT x FROM m WHERE time > 12parsecs", "bad duration"),
            ("", "empty query"),
        ] {
            let e = parse(q, 0).map(|_| ()).unwrap_err();
            assert!(e.contains(want), "{q}: {e}");
        }
    }
}
