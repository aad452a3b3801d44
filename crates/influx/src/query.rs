//! Runs parsed InfluxQL ([`crate::ql`]) on the store, answering as
//! InfluxDB 1.x does (the differential test against `influxd` holds us to
//! it). A measurement is read into a [`Table`]: rows of (tag set, time)
//! with a value per field, the shape InfluxDB's conditions and functions
//! are defined on; `WHERE` is evaluated per tag set first (three-valued, so
//! a series a tag test rules out is never read) and then per row.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use model::{Selector, SeriesKey, Timestamp};
use serde_json::{Value, json};

use crate::ql::{Arith, Cast, CmpOp, Expr, Func, Item, Lit, NameMatch, Select, Statement, VarKind};
use crate::{FIELD_LABEL, TYPE_LABEL};

/// Runs one statement; `databases` holds those created here. `epoch`:
/// numeric times in that unit (ns per unit), else RFC 3339 strings.
/// `strings`: the string of a string field's stored id (the dictionary,
/// [`crate::strings`]).
pub fn execute(
    store: &dyn source::Source,
    st: &Statement,
    db: Option<&str>,
    epoch: Option<i64>,
    databases: &mut BTreeSet<String>,
    strings: &dyn Fn(u32) -> Option<Arc<str>>,
) -> Result<Value, String> {
    let need_db = || named_db(store, db, databases);
    match st {
        Statement::CreateDatabase(name) => {
            if name.is_empty() || name.chars().any(char::is_control) {
                return Err(format!("invalid database name {name:?}"));
            }
            databases.insert(name.clone());
            Ok(json!({}))
        }
        Statement::ShowDatabases => {
            let sel = Selector::parse(&format!("{{{FIELD_LABEL}!=\"\"}}")).expect("valid selector");
            let mut names = databases.clone();
            names.extend(store.series(&sel).into_iter().filter_map(|(_, k)| k.get("db").map(str::to_owned)));
            let values: Vec<_> = names.into_iter().map(|n| json!([n])).collect();
            Ok(json!({"series": [{"name": "databases", "columns": ["name"], "values": values}]}))
        }
        Statement::ShowRetentionPolicies(on) => {
            let db = named_db(store, on.as_deref().or(db), databases)?;
            // kansoku keeps every point of a database alike (its retention is
            // the store's): the default policy influxd creates, and those
            // writes named (`rp=`), never expiring.
            let mut rps: BTreeSet<String> = store
                .series(&Selector {
                    matchers: vec![
                        model::Matcher::new("db", model::MatchOp::Equal, db).map_err(|e| e.to_string())?,
                        model::Matcher::new("rp", model::MatchOp::NotEqual, "").map_err(|e| e.to_string())?,
                    ],
                })
                .into_iter()
                .filter_map(|(_, k)| k.get("rp").map(str::to_owned))
                .collect();
            rps.remove("autogen");
            let mut values = vec![json!(["autogen", "0s", "168h0m0s", 1, true])];
            values.extend(rps.into_iter().map(|rp| json!([rp, "0s", "168h0m0s", 1, false])));
            Ok(
                json!({"series": [{"columns": ["name", "duration", "shardGroupDuration", "replicaN", "default"], "values": values}]}),
            )
        }
        Statement::ShowMeasurements(with) => {
            let names: BTreeSet<String> = db_series(store, need_db()?)?
                .into_iter()
                .filter_map(|(_, k)| measurement_of(&k).map(str::to_owned))
                .filter(|m| with.as_ref().is_none_or(|w| w.matches(m)))
                .collect();
            Ok(series_of_names("measurements", names))
        }
        Statement::Select(s) => {
            let db = named_db(store, s.db.as_deref().or(db), databases)?;
            let from = crate::transform::reads_from(s);
            // The database's series listed once, by measurement; `FROM /re/`:
            // each measurement it matches, in name order.
            let mut by_measurement: BTreeMap<String, Vec<(u32, SeriesKey)>> = BTreeMap::new();
            for (id, k) in db_series(store, db)? {
                let Some(m) = measurement_of(&k) else { continue };
                let wanted = match &s.from_re {
                    None => m == s.measurement,
                    Some(re) => re.is_match(m),
                };
                if wanted {
                    by_measurement.entry(m.to_owned()).or_default().push((id, k));
                }
            }
            if s.from_re.is_none() && by_measurement.is_empty() {
                // A measurement named but absent: answered empty, as before.
                by_measurement.insert(s.measurement.clone(), Vec::new());
            }
            let top_bottom = matches!(s.items.first(), Some(Item::Call { func: Func::Top | Func::Bottom, .. }));
            // A compile error in influxd (the statement's error, not the request's).
            if s.items.iter().any(|i| matches!(i, Item::Wild { func: Some(Func::Distinct), .. })) {
                return Err("expected field argument in distinct()".into());
            }
            // Wildcards (`mean(*)`, `SELECT /re/`) made items of the fields
            // and tags of every measurement read, as influxd does.
            let (fields, tags) = fields_and_tags(by_measurement.values().flatten());
            let expanded = s.expand(&fields, &tags)?;
            let s = expanded.as_ref().unwrap_or(s);
            if s.items.is_empty() {
                return Ok(json!({}));
            }
            // Arithmetic between fields or functions: its operands computed
            // as items, then combined per row.
            let flat = flatten(s);
            let unflat = s;
            let s = flat.as_ref().map_or(s, |f| &f.0);
            let mut series = Vec::new();
            for (m, all) in by_measurement {
                let table = Table::read_from(store, all, s, &m, from, strings)?;
                check_arith_types(&table, unflat)?;
                let mut one = if s.transform().is_some() {
                    crate::transform::run(&table, s, epoch)?
                } else if top_bottom {
                    crate::aggregate::top_bottom(&table, s, epoch)?
                } else if s.is_aggregate() {
                    crate::aggregate::run(&table, s, epoch)?
                } else {
                    raw(&table, s, epoch)
                };
                apply_arith(&table, s, &mut one);
                if let Some((_, outs)) = &flat {
                    combine(&table, outs, &mut one);
                }
                series.extend(one);
            }
            // Raw points in descending time come in descending series order
            // too (aggregates keep theirs), as in InfluxDB.
            if s.desc && !s.is_aggregate() {
                series.reverse();
            }
            let series: Vec<Value> = series.into_iter().skip(s.soffset).take(s.slimit.unwrap_or(usize::MAX)).collect();
            Ok(if series.is_empty() { json!({}) } else { json!({ "series": series }) })
        }
        Statement::ShowSeries { from, cond } => show_series(store, need_db()?, from.as_ref(), cond.as_ref()),
        Statement::ShowTagKeys(m) | Statement::ShowFieldKeys(m) | Statement::ShowTagValues { from: m, .. } => {
            show_keys(store, need_db()?, m.as_ref(), st)
        }
        Statement::Cardinality { of, exact, from } => cardinality(store, need_db()?, of, *exact, from.as_ref()),
    }
}

/// A column of a statement whose arithmetic combines several items, from
/// the columns of its flattened statement (`flatten`).
enum Out<'s> {
    /// That statement's column, and the name it has before it is made
    /// unique.
    Col(usize, String),
    /// `expr` of those columns (each an operand), named `name`.
    Expr { cols: Vec<usize>, operands: &'s [Item], expr: &'s Arith, name: String },
}

/// A statement with arithmetic between fields or functions (`a + b`,
/// `sum(a) / count(a)`) as one whose items are the operands, and how its
/// columns make this one's (None: it has no such arithmetic).
fn flatten(s: &Select) -> Option<(Select, Vec<Out<'_>>)> {
    if !s.items.iter().any(|i| matches!(i, Item::Expr { .. })) {
        return None;
    }
    let (mut items, mut arith, mut outs) = (Vec::new(), Vec::new(), Vec::new());
    let mut col = 0;
    for (item, a) in s.items.iter().zip(&s.arith) {
        match item {
            Item::Expr { operands, expr, alias } => {
                let name = alias.clone().unwrap_or_else(|| {
                    let names: Vec<&str> = operands
                        .iter()
                        .map(|o| match o {
                            Item::Var { name, .. } => name.as_str(),
                            Item::Call { func, .. } => func.name(),
                            _ => "",
                        })
                        .collect();
                    names.join("_")
                });
                let cols = (0..operands.len()).map(|k| col + 1 + k).collect();
                col += operands.len();
                items.extend(operands.iter().cloned());
                arith.extend(operands.iter().map(|_| None));
                outs.push(Out::Expr { cols, operands, expr, name });
            }
            // A raw `time` item has no column of its own (time is the first).
            Item::Var { name, alias: None, .. } if name == "time" && !s.is_aggregate() => {
                items.push(item.clone());
                arith.push(a.clone());
            }
            _ => {
                col += 1;
                let name = match item {
                    Item::Var { name, alias, .. } => alias.as_ref().unwrap_or(name).clone(),
                    Item::Call { func, alias, .. } => alias.clone().unwrap_or_else(|| func.name().to_owned()),
                    _ => String::new(),
                };
                items.push(item.clone());
                arith.push(a.clone());
                outs.push(Out::Col(col, name));
            }
        }
    }
    let mut flat = s.clone();
    flat.items = items;
    flat.arith = arith;
    Some((flat, outs))
}

/// The columns of `series` (answered for the flattened statement) made
/// the statement's: each arithmetic of operands computed per row — null
/// when an operand is (or is not a number); integers stay integers as
/// [`Arith::eval`] says, a raw field an integer by its stored type.
fn combine(table: &Table, outs: &[Out<'_>], series: &mut [Value]) {
    for one in series {
        let Some(obj) = one.as_object_mut() else { continue };
        let old_columns: Vec<String> = obj
            .get("columns")
            .and_then(Value::as_array)
            .map(|c| c.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        let mut columns = vec!["time".to_owned()];
        for out in outs {
            let name = match out {
                Out::Col(c, base) if base.is_empty() => old_columns.get(*c).cloned().unwrap_or_default(),
                Out::Col(_, name) | Out::Expr { name, .. } => unique_name(name, &columns),
            };
            columns.push(name);
        }
        if let Some(rows) = obj.get_mut("values").and_then(Value::as_array_mut) {
            for row in rows {
                let Some(cells) = row.as_array() else { continue };
                let mut out = vec![cells.first().cloned().unwrap_or(Value::Null)];
                for o in outs {
                    out.push(match o {
                        Out::Col(c, _) => cells.get(*c).cloned().unwrap_or(Value::Null),
                        Out::Expr { cols, operands, expr, .. } => {
                            let values: Option<Vec<(f64, bool)>> = cols
                                .iter()
                                .zip(operands.iter())
                                .map(|(c, operand)| {
                                    let cell = cells.get(*c)?;
                                    let x = cell.as_f64()?;
                                    let int = match operand {
                                        Item::Var { name, cast, .. } => {
                                            *cast == Some(Cast::Integer)
                                                || table.field(name).is_some_and(|f| {
                                                    matches!(table.fields[f].1, FieldType::Int | FieldType::Unsigned)
                                                })
                                        }
                                        _ => cell.is_i64() || cell.is_u64(),
                                    };
                                    Some((x, int))
                                })
                                .collect();
                            values.map_or(Value::Null, |v| arith_json(expr.eval(&v)))
                        }
                    });
                }
                *row = Value::Array(out);
            }
        }
        obj.insert("columns".into(), json!(columns));
    }
}

/// influxd's type check of the select list's arithmetic: a string or
/// boolean field with anything is `type error: msg::string * 2:
/// incompatible types: string and integer`, word for word.
fn check_arith_types(table: &Table, s: &Select) -> Result<(), String> {
    for (item, arith) in s.items.iter().zip(&s.arith) {
        let (operands, expr) = match (item, arith) {
            (Item::Expr { operands, expr, .. }, _) => (operands.as_slice(), expr),
            (item, Some(expr)) => (std::slice::from_ref(item), expr),
            _ => continue,
        };
        let typed: Vec<(String, &str)> = operands
            .iter()
            .map(|o| match o {
                Item::Var { name, cast, .. } => {
                    let ty = table.field(name).map(|f| table.fields[f].1);
                    let ty = if *cast == Some(Cast::Integer) { "integer" } else { ty.map_or("float", FieldType::name) };
                    (format!("{name}::{ty}"), ty)
                }
                Item::Call { func, field, .. } => {
                    // A selector of a string or boolean field is of its type.
                    let ty = table.field(field).map(|f| table.fields[f].1);
                    match ty.filter(|t| matches!(t, FieldType::Str | FieldType::Bool)) {
                        Some(t) if func.is_selector_of_values() => {
                            (format!("{}({field}::{})", func.name(), t.name()), t.name())
                        }
                        _ => (format!("{}({field})", func.name()), "float"),
                    }
                }
                _ => (String::new(), "float"),
            })
            .collect();
        arith_type(expr, &typed)?;
    }
    Ok(())
}

/// The type of `e` (its operands named and typed in `typed`), as influxd
/// reckons it, or its type error.
fn arith_type<'a>(e: &Arith, typed: &'a [(String, &'a str)]) -> Result<&'a str, String> {
    match e {
        Arith::Value(i) => Ok(typed[*i].1),
        Arith::Lit(_, true) => Ok("integer"),
        Arith::Lit(..) => Ok("float"),
        Arith::Bin(op, a, b) => {
            let (ta, tb) = (arith_type(a, typed)?, arith_type(b, typed)?);
            if ["string", "boolean"].iter().any(|t| *t == ta || *t == tb) {
                return Err(format!(
                    "type error: {} {} {}: incompatible types: {ta} and {tb}",
                    arith_text(a, typed),
                    *op as char,
                    arith_text(b, typed)
                ));
            }
            Ok(if ta == "integer" && tb == "integer" && *op != b'/' { "integer" } else { "float" })
        }
    }
}

/// An arithmetic expression as influxd prints it in its errors.
fn arith_text(e: &Arith, typed: &[(String, &str)]) -> String {
    match e {
        Arith::Value(i) => typed[*i].0.clone(),
        Arith::Lit(v, true) => format!("{}", *v as i64),
        Arith::Lit(v, false) => format!("{v}"),
        Arith::Bin(op, a, b) => format!("{} {} {}", arith_text(a, typed), *op as char, arith_text(b, typed)),
    }
}

/// An arithmetic result as influxd writes it: an integer, a float, or null
/// for what JSON cannot hold.
fn arith_json((v, int): (f64, bool)) -> Value {
    if int {
        json!(v as i64)
    } else if v.is_finite() {
        go_float(v)
    } else {
        Value::Null
    }
}

/// A measurement's fields (name and type) and tags, each in name order.
fn fields_and_tags<'a>(all: impl Iterator<Item = &'a (u32, SeriesKey)>) -> (Vec<(String, FieldType)>, Vec<String>) {
    let mut fields: BTreeMap<&str, FieldType> = BTreeMap::new();
    let mut tags: BTreeSet<&str> = BTreeSet::new();
    for (_, k) in all {
        if let Some(f) = k.get(FIELD_LABEL) {
            fields.entry(f).or_insert_with(|| FieldType::of(k));
        }
        tags.extend(k.labels().iter().map(|l| l.0.as_str()).filter(|l| !hidden_label(l)));
    }
    (fields.into_iter().map(|(f, t)| (f.to_owned(), t)).collect(), tags.into_iter().map(str::to_owned).collect())
}

/// The arithmetic of the select list (`mean(bytes) * 8`) on each value of
/// its items' columns (one column an item: `*` and top/bottom are refused
/// beside it, and a raw `time` item has none). A raw field is an integer
/// by its stored type (a float field's 0 negated is -0, as in influxd); a
/// function's result by its answer.
fn apply_arith(table: &Table, s: &Select, series: &mut [Value]) {
    if s.arith.iter().all(Option::is_none) {
        return;
    }
    let mut col = 0;
    let mut exprs = Vec::new();
    for (item, expr) in s.items.iter().zip(&s.arith) {
        if matches!(item, Item::Var { name, alias: None, .. } if name == "time") && !s.is_aggregate() {
            continue;
        }
        col += 1;
        let float_field = match item {
            Item::Var { name, cast, .. } if *cast != Some(Cast::Integer) => {
                table.field(name).is_some_and(|f| table.fields[f].1 == FieldType::Float)
            }
            _ => false,
        };
        if let Some(e) = expr {
            exprs.push((col, e, float_field));
        }
    }
    for one in series {
        let Some(rows) = one.get_mut("values").and_then(Value::as_array_mut) else { continue };
        for row in rows {
            let Some(cells) = row.as_array_mut() else { continue };
            for &(c, e, float_field) in &exprs {
                let Some(cell) = cells.get_mut(c) else { continue };
                let Some(x) = cell.as_f64() else { continue };
                *cell = arith_json(e.eval(&[(x, !float_field && (cell.is_i64() || cell.is_u64()))]));
            }
        }
    }
}

/// The database a statement reads: named, and existing — created, or
/// holding data — as influxd requires (`database not found: x`).
fn named_db<'a>(
    store: &dyn source::Source,
    db: Option<&'a str>,
    created: &BTreeSet<String>,
) -> Result<&'a str, String> {
    let db = db.ok_or_else(|| "database name required (db=...)".to_owned())?;
    if exists(store, db, created) { Ok(db) } else { Err(format!("database not found: {db}")) }
}

/// Whether database `db` exists: created, or holding data.
pub fn exists(store: &dyn source::Source, db: &str, created: &BTreeSet<String>) -> bool {
    if created.contains(db) {
        return true;
    }
    let Ok(m) = model::Matcher::new("db", model::MatchOp::Equal, db) else { return false };
    let field = model::Matcher::new(FIELD_LABEL, model::MatchOp::NotEqual, "").expect("a valid matcher");
    store.series_limited(&Selector { matchers: vec![field, m] }, 1).1 > 0
}

fn series_of_names(name: &str, names: BTreeSet<String>) -> Value {
    if names.is_empty() {
        return json!({});
    }
    let values: Vec<_> = names.into_iter().map(|n| json!([n])).collect();
    json!({"series": [{"name": name, "columns": ["name"], "values": values}]})
}

/// Every series written by line protocol into `db`.
fn db_series(store: &dyn source::Source, db: &str) -> Result<Vec<(u32, SeriesKey)>, String> {
    Ok(store.series(&Selector {
        matchers: vec![
            model::Matcher::new(FIELD_LABEL, model::MatchOp::NotEqual, "").map_err(|e| e.to_string())?,
            model::Matcher::new("db", model::MatchOp::Equal, db).map_err(|e| e.to_string())?,
        ],
    }))
}

/// The measurement a series belongs to: its name less `_field`.
fn measurement_of(k: &SeriesKey) -> Option<&str> {
    let f = k.get(FIELD_LABEL)?;
    k.name().strip_suffix(f)?.strip_suffix('_')
}

/// Labels that are kansoku's, not the writer's tags.
pub(crate) fn hidden_label(k: &str) -> bool {
    k == FIELD_LABEL || k == TYPE_LABEL || k == "db" || k == "rp"
}

/// A float as InfluxDB's JSON writes it (Go's encoder): whole numbers
/// without a fraction (`2`, not `2.0`).
pub(crate) fn go_float(v: f64) -> Value {
    if v.fract() == 0.0 && v.abs() < 1e15 && !(v == 0.0 && v.is_sign_negative()) { json!(v as i64) } else { json!(v) }
}

/// How a field is stored (the `kansoku_type` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FieldType {
    Float,
    Int,
    /// Bit for bit: the f64's bits are the u64.
    Unsigned,
    /// 1 or 0, answered `true` or `false`.
    Bool,
    /// In a [`Table`], the string's rank among the table's strings (in
    /// string order: comparing ranks compares strings).
    Str,
}

impl FieldType {
    fn of(k: &SeriesKey) -> FieldType {
        match k.get(TYPE_LABEL) {
            Some("int") => FieldType::Int,
            Some("u64") => FieldType::Unsigned,
            Some("bool") => FieldType::Bool,
            Some(crate::STRING_TYPE) => FieldType::Str,
            _ => FieldType::Float,
        }
    }

    /// The number a stored value stands for.
    pub(crate) fn number(self, v: f64) -> f64 {
        if self == FieldType::Unsigned { v.to_bits() as f64 } else { v }
    }

    /// A table's value as JSON, exactly (`strings`: the table's).
    pub(crate) fn json(self, v: f64, strings: &[Arc<str>]) -> Value {
        match self {
            FieldType::Unsigned => json!(v.to_bits()),
            FieldType::Int => json!(v as i64),
            FieldType::Bool => json!(v != 0.0),
            FieldType::Str => strings.get(v as usize).map_or(Value::Null, |s| Value::String(s.to_string())),
            FieldType::Float => go_float(v),
        }
    }

    /// influxd's name for the type: `SHOW FIELD KEYS`, and the iterator its
    /// errors name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            FieldType::Int => "integer",
            FieldType::Unsigned => "unsigned",
            FieldType::Bool => "boolean",
            FieldType::Str => "string",
            FieldType::Float => "float",
        }
    }
}

/// A tag set: the value of each of the table's tag keys (None: absent).
pub(crate) type TagSet = Vec<Option<String>>;
/// One tag set's rows: time → a value per field read.
pub(crate) type Rows = BTreeMap<i64, Vec<Option<f64>>>;

/// One measurement's points in the range, rows filtered by the condition.
pub(crate) struct Table {
    pub measurement: String,
    /// Every tag key of the measurement's series, in name order.
    pub tag_keys: Vec<String>,
    /// The fields read (those the statement names, or all), in name order.
    pub fields: Vec<(String, FieldType)>,
    pub sets: BTreeMap<TagSet, Rows>,
    /// The string fields' values, in string order: a string field's value
    /// in `sets` is its index here.
    pub strings: Vec<Arc<str>>,
}

impl Table {
    /// The statement's `measurement`, whose series are `all`, from `from`
    /// (its start, or earlier for a transformation of buckets) to its end.
    pub(crate) fn read_from(
        store: &dyn source::Source,
        all: Vec<(u32, SeriesKey)>,
        s: &Select,
        measurement: &str,
        from: i64,
        strings: &dyn Fn(u32) -> Option<Arc<str>>,
    ) -> Result<Table, String> {
        let field_names: BTreeSet<&str> = all.iter().filter_map(|(_, k)| k.get(FIELD_LABEL)).collect();
        let tag_keys: Vec<String> = all
            .iter()
            .flat_map(|(_, k)| k.labels().iter().map(|l| l.0.as_str()))
            .filter(|k| !hidden_label(k))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .map(str::to_owned)
            .collect();
        // The fields to read: those named (in items and the condition), or all.
        let mut wanted: BTreeSet<&str> = BTreeSet::new();
        let mut star = false;
        for item in &s.items {
            match item {
                Item::Star | Item::Wild { .. } => star = true,
                Item::Var { name, .. } | Item::Call { field: name, .. } => {
                    wanted.insert(name);
                }
                Item::Transform { inner, .. } => {
                    if let Item::Var { name, .. } | Item::Call { field: name, .. } = &**inner {
                        wanted.insert(name);
                    }
                }
                Item::Expr { operands, .. } => {
                    for o in operands {
                        if let Item::Var { name, .. } | Item::Call { field: name, .. } = o {
                            wanted.insert(name);
                        }
                    }
                }
            }
        }
        if let Some(c) = &s.cond {
            cond_names(c, &mut wanted);
        }
        let fields: Vec<(String, FieldType)> = field_names
            .iter()
            .filter(|f| star || wanted.contains(*f))
            .map(|f| {
                let ty = all
                    .iter()
                    .find(|(_, k)| k.get(FIELD_LABEL) == Some(f))
                    .map_or(FieldType::Float, |(_, k)| FieldType::of(k));
                ((*f).to_owned(), ty)
            })
            .collect();
        let mut t =
            Table { measurement: measurement.to_owned(), tag_keys, fields, sets: BTreeMap::new(), strings: Vec::new() };
        let field_set: BTreeSet<String> = field_names.iter().map(|f| (*f).to_owned()).collect();
        let (from, to) = (Timestamp(from), Timestamp(s.to));
        // The series the tags admit, then all of them in one read (one
        // round trip where the store is remote).
        let mut wanted: Vec<(u32, usize, TagSet)> = Vec::new();
        for (id, key) in &all {
            let Some(col) = t.fields.iter().position(|(f, _)| Some(f.as_str()) == key.get(FIELD_LABEL)) else {
                continue;
            };
            // A field written with another type too (influxd refuses the
            // second type; kansoku kept it): the type first listed is read,
            // so no number is ever read as a string's id.
            if FieldType::of(key) != t.fields[col].1 {
                continue;
            }
            let tags: TagSet = t.tag_keys.iter().map(|k| key.get(k).map(str::to_owned)).collect();
            if let Some(c) = &s.cond
                && eval_tags(c, &|name| tag_value(&t.tag_keys, &tags, name), &field_set) == Some(false)
            {
                continue;
            }
            wanted.push((*id, col, tags));
        }
        let ids: Vec<u32> = wanted.iter().map(|w| w.0).collect();
        let reads = store.read_many(&ids, from, to, usize::MAX);
        let width = t.fields.len();
        for ((_, col, tags), (ts, vs)) in wanted.into_iter().zip(reads) {
            let rows = t.sets.entry(tags).or_default();
            for (time, v) in ts.into_iter().zip(vs) {
                rows.entry(time).or_insert_with(|| vec![None; width])[col] = Some(v);
            }
        }
        t.rank_strings(strings);
        if let Some(c) = &s.cond {
            let (keys, fields, strs) = (&t.tag_keys, &t.fields, &t.strings);
            for (tags, rows) in &mut t.sets {
                rows.retain(|_, row| {
                    eval(
                        c,
                        &|name| tag_value(keys, tags, name),
                        &|name| field_value(fields, strs, row, name),
                        &field_set,
                    )
                });
            }
            t.sets.retain(|_, rows| !rows.is_empty());
        }
        Ok(t)
    }

    /// String fields' ids made ranks among the table's strings, in string
    /// order (a value whose string was lost to a damaged dictionary is no
    /// value).
    fn rank_strings(&mut self, strings: &dyn Fn(u32) -> Option<Arc<str>>) {
        let cols: Vec<usize> = (0..self.fields.len()).filter(|&c| self.fields[c].1 == FieldType::Str).collect();
        if cols.is_empty() {
            return;
        }
        let mut ids: BTreeSet<u32> = BTreeSet::new();
        for rows in self.sets.values() {
            for row in rows.values() {
                ids.extend(cols.iter().filter_map(|&c| row[c]).map(|v| v as u32));
            }
        }
        let mut known: Vec<(Arc<str>, u32)> = ids.into_iter().filter_map(|id| Some((strings(id)?, id))).collect();
        known.sort();
        let mut rank: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
        for (id, s) in known.iter().map(|(s, id)| (*id, s)) {
            let same = self.strings.last().is_some_and(|last| last == s);
            if !same {
                self.strings.push(Arc::clone(s));
            }
            rank.insert(id, self.strings.len() - 1);
        }
        for rows in self.sets.values_mut() {
            for row in rows.values_mut() {
                for &c in &cols {
                    row[c] = row[c].and_then(|v| rank.get(&(v as u32)).map(|&r| r as f64));
                }
            }
            rows.retain(|_, row| row.iter().any(Option::is_some));
        }
        self.sets.retain(|_, rows| !rows.is_empty());
    }

    fn tag<'a>(&self, tags: &'a TagSet, name: &str) -> &'a str {
        tag_value(&self.tag_keys, tags, name)
    }

    pub(crate) fn field(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|(f, _)| f == name)
    }
}

/// A tag's value in a tag set; an absent tag is "", as in InfluxDB.
fn tag_value<'a>(keys: &[String], tags: &'a TagSet, name: &str) -> &'a str {
    keys.binary_search_by(|k| k.as_str().cmp(name)).ok().and_then(|i| tags[i].as_deref()).unwrap_or("")
}

/// A field's value in a condition: a number, or a string field's string.
enum FieldValue<'a> {
    Num(f64),
    Str(&'a str),
}

fn field_value<'a>(
    fields: &[(String, FieldType)],
    strings: &'a [Arc<str>],
    row: &[Option<f64>],
    name: &str,
) -> Option<FieldValue<'a>> {
    let i = fields.iter().position(|(f, _)| f == name)?;
    let v = row[i]?;
    Some(match fields[i].1 {
        FieldType::Str => FieldValue::Str(strings.get(v as usize)?),
        ty => FieldValue::Num(ty.number(v)),
    })
}

fn cond_names<'a>(e: &'a Expr, out: &mut BTreeSet<&'a str>) {
    match e {
        Expr::And(a, b) | Expr::Or(a, b) => {
            cond_names(a, out);
            cond_names(b, out);
        }
        Expr::Cmp { name, .. } => {
            out.insert(name);
        }
        Expr::Time(..) => {}
    }
}

/// Whether `name` in a condition is a field (else a tag): its cast, or
/// whether the measurement has such a field.
fn is_field(name: &str, kind: Option<VarKind>, fields: &BTreeSet<String>) -> bool {
    match kind {
        Some(VarKind::Tag) => false,
        Some(VarKind::Field) => true,
        None => fields.contains(name),
    }
}

/// The condition on a tag set alone: Some(false) rules the series out;
/// None when it depends on field values.
fn eval_tags<'t>(e: &Expr, tag: &dyn Fn(&str) -> &'t str, fields: &BTreeSet<String>) -> Option<bool> {
    match e {
        Expr::And(a, b) => match (eval_tags(a, tag, fields), eval_tags(b, tag, fields)) {
            (Some(false), _) | (_, Some(false)) => Some(false),
            (Some(true), Some(true)) => Some(true),
            _ => None,
        },
        Expr::Or(a, b) => match (eval_tags(a, tag, fields), eval_tags(b, tag, fields)) {
            (Some(true), _) | (_, Some(true)) => Some(true),
            (Some(false), Some(false)) => Some(false),
            _ => None,
        },
        Expr::Cmp { name, kind, .. } if is_field(name, *kind, fields) => None,
        Expr::Cmp { name, op, lit, .. } => Some(cmp_tag(tag(name), *op, lit)),
        Expr::Time(..) => None,
    }
}

fn eval<'t, 'f>(
    e: &Expr,
    tag: &dyn Fn(&str) -> &'t str,
    field: &dyn Fn(&str) -> Option<FieldValue<'f>>,
    fields: &BTreeSet<String>,
) -> bool {
    match e {
        Expr::And(a, b) => eval(a, tag, field, fields) && eval(b, tag, field, fields),
        Expr::Or(a, b) => eval(a, tag, field, fields) || eval(b, tag, field, fields),
        Expr::Cmp { name, kind, op, lit } if is_field(name, *kind, fields) => {
            // A missing field, or a value of another type, compares false;
            // a string field compares as a tag does.
            let v = match field(name) {
                Some(FieldValue::Num(v)) => v,
                // As influxd: a string field is equal or not, or matches;
                // ordered comparisons are false.
                Some(FieldValue::Str(v)) => {
                    return matches!(op, CmpOp::Eq | CmpOp::Ne | CmpOp::Re | CmpOp::NotRe) && cmp_tag(v, *op, lit);
                }
                None => return false,
            };
            let x = match lit {
                Lit::Num(x) => *x,
                Lit::Bool(b) => f64::from(u8::from(*b)),
                Lit::Str(_) | Lit::Regex(_) => return false,
            };
            match op {
                CmpOp::Eq => v == x,
                CmpOp::Ne => v != x,
                CmpOp::Lt => v < x,
                CmpOp::Le => v <= x,
                CmpOp::Gt => v > x,
                CmpOp::Ge => v >= x,
                CmpOp::Re | CmpOp::NotRe => false,
            }
        }
        Expr::Cmp { name, op, lit, .. } => cmp_tag(tag(name), *op, lit),
        Expr::Time(..) => true,
    }
}

/// A tag compares as a string; regexes match anywhere in it.
fn cmp_tag(v: &str, op: CmpOp, lit: &Lit) -> bool {
    match (op, lit) {
        (CmpOp::Eq, Lit::Str(s)) => v == s,
        (CmpOp::Ne, Lit::Str(s)) => v != s,
        (CmpOp::Lt, Lit::Str(s)) => v < s.as_str(),
        (CmpOp::Le, Lit::Str(s)) => v <= s.as_str(),
        (CmpOp::Gt, Lit::Str(s)) => v > s.as_str(),
        (CmpOp::Ge, Lit::Str(s)) => v >= s.as_str(),
        (CmpOp::Re, Lit::Regex(r)) => r.is_match(v),
        (CmpOp::NotRe, Lit::Regex(r)) => !r.is_match(v),
        _ => false,
    }
}

/// `base`, or `base_1`, `base_2`, … the first not in `taken`: influxd's
/// names for a column that repeats.
pub(crate) fn unique_name(base: &str, taken: &[String]) -> String {
    if !taken.iter().any(|t| t == base) {
        return base.to_owned();
    }
    // Linear in `taken` (a list of a thousand `mean(…)` is a million
    // steps to name, not a billion).
    let used: std::collections::HashSet<&str> =
        taken.iter().filter(|t| t.starts_with(base)).map(String::as_str).collect();
    (1..).map(|k| format!("{base}_{k}")).find(|n| !used.contains(n.as_str())).expect("a free name")
}

/// A series' rows as a statement pages them: `ORDER BY time DESC`,
/// `OFFSET`, `LIMIT`.
pub(crate) fn paged<T>(mut rows: Vec<T>, s: &Select) -> impl Iterator<Item = T> {
    if s.desc {
        rows.reverse();
    }
    rows.into_iter().skip(s.offset).take(s.limit.unwrap_or(usize::MAX))
}

/// The time column: `epoch` units, or RFC 3339 as influxd writes it (Go's
/// `RFC3339Nano`: trailing zeros of the fraction trimmed, none when whole).
pub(crate) fn time_json(t: i64, epoch: Option<i64>) -> Value {
    match epoch {
        Some(unit) => json!(t / unit),
        None => json!(rfc3339_nano(t)),
    }
}

/// `2026-01-01T00:00:05Z`, `…05.5Z`, `…05.000000001Z`.
pub(crate) fn rfc3339_nano(t: i64) -> String {
    let s = Timestamp(t).to_string();
    match s.split_once('.') {
        Some((whole, frac)) => {
            let digits = frac.trim_end_matches('Z').trim_end_matches('0');
            if digits.is_empty() { format!("{whole}Z") } else { format!("{whole}.{digits}Z") }
        }
        None => s,
    }
}

/// Tag groups: the group's tag values → the tag sets in it.
pub(crate) type Groups<'t> = BTreeMap<Vec<String>, Vec<(&'t TagSet, &'t Rows)>>;

/// The output series of a statement grouped by tags: (group tag values,
/// the tag sets in it), in tag value order.
pub(crate) fn groups<'t>(table: &'t Table, s: &Select) -> (Vec<String>, Groups<'t>) {
    // Grouped by tag key name order, whatever the clause's (as influxd).
    let mut keys: Vec<String> = if s.group.all_tags { table.tag_keys.clone() } else { s.group.tags.clone() };
    keys.sort();
    keys.dedup();
    let mut out: BTreeMap<Vec<String>, Vec<_>> = BTreeMap::new();
    for (tags, rows) in &table.sets {
        let gk = keys.iter().map(|k| table.tag(tags, k).to_owned()).collect();
        out.entry(gk).or_default().push((tags, rows));
    }
    (keys, out)
}

/// A series of the answer.
pub(crate) fn series_json(
    name: &str,
    group_keys: &[String],
    gk: Vec<String>,
    columns: Vec<String>,
    values: Vec<Value>,
) -> Value {
    let mut s = json!({ "name": name, "columns": columns, "values": values });
    if !group_keys.is_empty() {
        let t: serde_json::Map<String, Value> =
            group_keys.iter().cloned().zip(gk.into_iter().map(Value::String)).collect();
        s["tags"] = Value::Object(t);
    }
    s
}

/// Raw points: `SELECT *`, `SELECT f, tag AS x`, one series per group.
pub(crate) fn raw(table: &Table, s: &Select, epoch: Option<i64>) -> Vec<Value> {
    let (group_keys, groups) = groups(table, s);
    // The columns: names and what fills them.
    enum Col {
        Tag(usize),
        Field(usize),
        /// A float field cast `::integer`.
        Truncated(usize),
        Missing,
    }
    let mut cols: Vec<(String, Col)> = Vec::new();
    for item in &s.items {
        match item {
            Item::Star => {
                // Tags and fields together in name order, less the grouped tags.
                let mut all: Vec<(String, Col)> = table
                    .tag_keys
                    .iter()
                    .enumerate()
                    .filter(|(_, k)| !group_keys.contains(k))
                    .map(|(i, k)| (k.clone(), Col::Tag(i)))
                    .chain(table.fields.iter().enumerate().map(|(i, (f, _))| (f.clone(), Col::Field(i))))
                    .collect();
                all.sort_by(|a, b| a.0.cmp(&b.0));
                cols.extend(all);
            }
            // `time` is the first column already (influxd drops it here).
            Item::Var { name, alias: None, .. } if name == "time" => {}
            Item::Var { name, alias, cast } => {
                let (field, tag) = (table.field(name), table.tag_keys.binary_search(name).ok());
                let col = match (cast, field, tag) {
                    (Some(Cast::Tag), _, Some(t)) | (None, None, Some(t)) => Col::Tag(t),
                    (None | Some(Cast::Field), Some(f), _) => Col::Field(f),
                    // Cast to a type: the field's values if it is of that
                    // type (an integer is a float and an unsigned too, as
                    // influxd casts), a float truncated to an integer, else
                    // none.
                    (Some(c), Some(f), _) => match (c, table.fields[f].1) {
                        (Cast::Integer, FieldType::Float) => Col::Truncated(f),
                        (Cast::Integer, FieldType::Int)
                        | (Cast::Float, FieldType::Float | FieldType::Int)
                        | (Cast::Unsigned, FieldType::Unsigned | FieldType::Int)
                        | (Cast::Boolean, FieldType::Bool)
                        | (Cast::String, FieldType::Str) => Col::Field(f),
                        _ => Col::Missing,
                    },
                    _ => Col::Missing,
                };
                cols.push((alias.clone().unwrap_or_else(|| name.clone()), col));
            }
            Item::Call { .. } | Item::Transform { .. } | Item::Wild { .. } | Item::Expr { .. } => {}
        }
    }
    // A name taken twice becomes `name_1`, `name_2`, … as in influxd.
    let mut taken = vec!["time".to_owned()];
    for (name, _) in &mut cols {
        *name = unique_name(name, &taken);
        taken.push(name.clone());
    }
    let mut out = Vec::new();
    for (gk, sets) in groups {
        // Rows in (time, tag set) order; a row shows when a field it names has a value.
        let mut rows: Vec<(i64, &TagSet, &Vec<Option<f64>>)> = sets
            .iter()
            .flat_map(|(tags, rows)| rows.iter().map(move |(t, row)| (*t, *tags, row)))
            .filter(|(_, _, row)| {
                cols.iter().any(|(_, c)| matches!(c, Col::Field(f) | Col::Truncated(f) if row[*f].is_some()))
            })
            .collect();
        rows.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        let values: Vec<Value> = paged(rows, s)
            .map(|(t, tags, row)| {
                let mut v = vec![time_json(t, epoch)];
                v.extend(cols.iter().map(|(_, c)| match c {
                    Col::Tag(i) => tags[*i].clone().map_or(Value::Null, Value::String),
                    Col::Field(i) => row[*i].map_or(Value::Null, |x| table.fields[*i].1.json(x, &table.strings)),
                    Col::Truncated(i) => row[*i].map_or(Value::Null, |x| json!(x.trunc() as i64)),
                    Col::Missing => Value::Null,
                }));
                Value::Array(v)
            })
            .collect();
        if values.is_empty() {
            continue;
        }
        let mut columns = vec!["time".to_owned()];
        columns.extend(cols.iter().map(|(n, _)| n.clone()));
        out.push(series_json(&table.measurement, &group_keys, gk, columns, values));
    }
    out
}

/// `SHOW SERIES [FROM m] [WHERE tags]`: each series key (`m,tag=v,…`, tags
/// in name order) once, whatever its fields.
fn show_series(
    store: &dyn source::Source,
    db: &str,
    from: Option<&NameMatch>,
    cond: Option<&Expr>,
) -> Result<Value, String> {
    let esc = |s: &str| s.replace(',', "\\,").replace(' ', "\\ ").replace('=', "\\=");
    let mut keys = BTreeSet::new();
    let no_fields = BTreeSet::new();
    for (_, k) in db_series(store, db)? {
        let Some(m) = measurement_of(&k) else { continue };
        if from.is_some_and(|f| !f.matches(m)) {
            continue;
        }
        let tag = |name: &str| k.get(name).filter(|_| !hidden_label(name)).unwrap_or("");
        if cond.is_some_and(|c| eval_tags(c, &tag, &no_fields) != Some(true)) {
            continue;
        }
        let mut key = esc(m);
        for (t, v) in k.labels().iter().filter(|(t, _)| !hidden_label(t)) {
            key.push_str(&format!(",{}={}", esc(t), esc(v)));
        }
        keys.insert(key);
    }
    if keys.is_empty() {
        return Ok(json!({}));
    }
    let values: Vec<_> = keys.into_iter().map(|k| json!([k])).collect();
    Ok(json!({"series": [{"columns": ["key"], "values": values}]}))
}

/// `SHOW TAG KEYS`, `SHOW FIELD KEYS`, `SHOW TAG VALUES WITH KEY …`: one
/// series per measurement, names in order, as InfluxDB answers them.
fn show_keys(
    store: &dyn source::Source,
    db: &str,
    measurement: Option<&NameMatch>,
    st: &Statement,
) -> Result<Value, String> {
    // measurement -> rows
    let mut out: BTreeMap<String, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (_, k) in db_series(store, db)? {
        let (Some(f), Some(m)) = (k.get(FIELD_LABEL), measurement_of(&k)) else { continue };
        if measurement.is_some_and(|f| !f.matches(m)) {
            continue;
        }
        let rows = out.entry(m.to_owned()).or_default();
        let tags = || k.labels().iter().filter(|(n, _)| !hidden_label(n));
        match st {
            Statement::ShowTagKeys(_) => rows.extend(tags().map(|(n, _)| vec![n.clone()])),
            // One type a field (the one its reads take, as above).
            Statement::ShowFieldKeys(_) if !rows.iter().any(|r| r[0] == f) => {
                rows.insert(vec![f.to_owned(), FieldType::of(&k).name().to_owned()]);
            }
            Statement::ShowTagValues { keys, .. } => {
                rows.extend(tags().filter(|(n, _)| keys.matches(n)).map(|(n, v)| vec![n.clone(), v.clone()]));
            }
            _ => {}
        }
    }
    let columns: &[&str] = match st {
        Statement::ShowTagKeys(_) => &["tagKey"],
        Statement::ShowFieldKeys(_) => &["fieldKey", "fieldType"],
        _ => &["key", "value"],
    };
    let series: Vec<Value> = out
        .into_iter()
        .filter(|(_, rows)| !rows.is_empty())
        .map(|(name, rows)| json!({"name": name, "columns": columns, "values": rows}))
        .collect();
    Ok(if series.is_empty() { json!({}) } else { json!({ "series": series }) })
}

/// `SHOW … [EXACT] CARDINALITY`: per measurement `count`, or (series and
/// measurements without EXACT) one `cardinality estimation`, as influxd
/// writes them; counted exactly here.
fn cardinality(
    store: &dyn source::Source,
    db: &str,
    of: &crate::ql::Cardinality,
    exact: bool,
    from: Option<&NameMatch>,
) -> Result<Value, String> {
    use crate::ql::Cardinality as C;
    // measurement -> the distinct things counted.
    let mut per: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (_, k) in db_series(store, db)? {
        let (Some(f), Some(m)) = (k.get(FIELD_LABEL), measurement_of(&k)) else { continue };
        if from.is_some_and(|f| !f.matches(m)) {
            continue;
        }
        let set = per.entry(m.to_owned()).or_default();
        let tags = k.labels().iter().filter(|(n, _)| !hidden_label(n));
        match of {
            C::Series => {
                set.insert(tags.map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join(","));
            }
            C::Measurements => {}
            C::TagKeys => set.extend(tags.map(|(n, _)| n.clone())),
            C::TagValues(keys) => set.extend(tags.filter(|(n, _)| keys.matches(n)).map(|(_, v)| v.clone())),
            C::FieldKeys => {
                set.insert(f.to_owned());
            }
        }
    }
    let one = |column: &str, n: usize| json!({"series": [{"columns": [column], "values": [[n]]}]});
    Ok(match (of, exact) {
        (C::Measurements, true) => one("count", per.len()),
        (C::Measurements, false) => one("cardinality estimation", per.len()),
        // With FROM, influxd counts per measurement, estimate or not.
        (C::Series, false) if from.is_none() => one("cardinality estimation", per.values().map(BTreeSet::len).sum()),
        _ => {
            let series: Vec<Value> = per
                .into_iter()
                .filter(|(_, set)| !set.is_empty())
                .map(|(name, set)| json!({"name": name, "columns": ["count"], "values": [[set.len()]]}))
                .collect();
            if series.is_empty() { json!({}) } else { json!({ "series": series }) }
        }
    })
}

/// A statement's answer as `chunked=true` sends it: one JSON document per
/// line; a `SELECT`'s series cut into pieces of `size` rows, each piece
/// but the last marked `"partial": true` (and the result too while more of
/// the statement follows); other statements a line per series, unmarked.
pub fn chunk_lines(statement_id: usize, result: &Value, select: bool, size: usize, out: &mut String) {
    let size = size.max(1);
    let mut line = |r: Value| {
        out.push_str(&json!({ "results": [r] }).to_string());
        out.push('\n');
    };
    let series = result.get("series").and_then(Value::as_array).filter(|s| !s.is_empty());
    let Some(series) = series else {
        let mut r = result.clone();
        r["statement_id"] = json!(statement_id);
        return line(r);
    };
    let mut pieces: Vec<Value> = Vec::new();
    for s in series {
        let values = s.get("values").and_then(Value::as_array).cloned().unwrap_or_default();
        if !select || values.len() <= size {
            pieces.push(s.clone());
            continue;
        }
        let n = values.len().div_ceil(size);
        // The series less its values, copied for each piece (a copy of the
        // whole series per piece was quadratic: found by fuzzing).
        let head: serde_json::Map<String, Value> = s
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| *k != "values")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (k, part) in values.chunks(size).enumerate() {
            let mut p = Value::Object(head.clone());
            p["values"] = Value::Array(part.to_vec());
            if k + 1 < n {
                p["partial"] = json!(true);
            }
            pieces.push(p);
        }
    }
    let last = pieces.len() - 1;
    for (k, p) in pieces.into_iter().enumerate() {
        let mut r = json!({ "statement_id": statement_id, "series": [p] });
        if select && k < last {
            r["partial"] = json!(true);
        }
        line(r);
    }
}
