//! Samples as a pprof profile (`profile.proto` of google/pprof, read by
//! `go tool pprof`, Parca, Pyroscope, speedscope): one sample per (process,
//! call chain) with its count, labelled with the process's pid and name;
//! one location and function per symbol and module. Uncompressed; the
//! server gzips it as pprof expects of a file.

use std::collections::HashMap;

use prost::Message;

use crate::symbols::{Procs, symbolize_stacks};

#[derive(Clone, PartialEq, Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    /// Leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Label {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
    #[prost(int64, tag = "3")]
    pub num: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
}

/// Strings of a profile, each once; index 0 is "".
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn id(&mut self, s: &str) -> i64 {
        if self.table.is_empty() {
            self.table.push(String::new());
            self.index.insert(String::new(), 0);
        }
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_owned());
        self.index.insert(s.to_owned(), i);
        i
    }
}

/// The profile of `stacks` ((pid, call chain leaf first) -> samples) over
/// `[from, to)` (ns since the epoch), samples counted.
pub fn profile(stacks: &HashMap<(u32, Vec<u64>), u64>, procs: &Procs, from: i64, to: i64) -> Profile {
    let names = symbolize_stacks(stacks, procs);
    let mut strings = Strings::default();
    let count = ValueType { r#type: strings.id("samples"), unit: strings.id("count") };
    let (pid_key, process_key) = (strings.id("pid"), strings.id("process"));
    // One location (and function) per (symbol, module).
    let mut locations: HashMap<crate::symbols::Named, u64> = HashMap::new();
    let mut p = Profile {
        sample_type: vec![count.clone()],
        time_nanos: from,
        duration_nanos: to.saturating_sub(from).max(0),
        period_type: Some(count),
        period: 1,
        ..Profile::default()
    };
    let mut keys: Vec<&(u32, Vec<u64>)> = stacks.keys().collect();
    keys.sort();
    for key in keys {
        let (pid, stack) = key;
        let location_id = stack
            .iter()
            .map(|ip| {
                let named = &names[&(*pid, *ip)];
                let next = locations.len() as u64 + 1;
                let id = *locations.entry(named.clone()).or_insert(next);
                if id == next {
                    let f = Function { id, name: strings.id(&named.0), filename: strings.id(&named.1) };
                    p.function.push(f);
                    p.location.push(Location { id, line: vec![Line { function_id: id }] });
                }
                id
            })
            .collect();
        let process = procs.comm(*pid).unwrap_or_else(|| format!("pid {pid}"));
        p.sample.push(Sample {
            location_id,
            value: vec![stacks[key] as i64],
            label: vec![
                Label { key: pid_key, num: i64::from(*pid), ..Label::default() },
                Label { key: process_key, str: strings.id(&process), ..Label::default() },
            ],
        });
    }
    p.string_table = strings.table;
    p
}

/// [`profile`], encoded (uncompressed protobuf).
pub fn encode(p: &Profile) -> Vec<u8> {
    p.encode_to_vec()
}

/// A profile from its protobuf bytes (uncompressed).
pub fn decode(bytes: &[u8]) -> Result<Profile, prost::DecodeError> {
    Profile::decode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn a_function_for_pprof(x: u64) -> u64 {
        x.rotate_left(5) ^ 0x77
    }

    #[test]
    fn stacks_become_samples_locations_and_functions() {
        let f = a_function_for_pprof as *const () as usize as u64;
        std::hint::black_box(a_function_for_pprof(1));
        let me = std::process::id();
        let mut stacks = HashMap::new();
        stacks.insert((me, vec![0x10, f + 1]), 3);
        stacks.insert((me, vec![f + 2]), 4);
        let p = Profile::decode(&encode(&profile(&stacks, &Procs::default(), 10, 30))[..]).unwrap();
        assert_eq!(p.string_table[0], "");
        assert_eq!(p.sample.iter().map(|s| s.value[0]).sum::<i64>(), 7);
        assert_eq!(p.duration_nanos, 20);
        let name = |loc: u64| {
            let func = &p.function[p.location.iter().find(|l| l.id == loc).unwrap().line[0].function_id as usize - 1];
            p.string_table[func.name as usize].clone()
        };
        // Both samples end (outermost) in the named function: one location.
        let outer: Vec<u64> = p.sample.iter().map(|s| *s.location_id.last().unwrap()).collect();
        assert_eq!(outer[0], outer[1]);
        assert!(name(outer[0]).contains("a_function_for_pprof"), "{p:?}");
        assert_eq!(p.location.len(), 2, "the named function and one unknown frame");
        let pid_label = p.sample[0].label.iter().find(|l| p.string_table[l.key as usize] == "pid").unwrap();
        assert_eq!(pid_label.num, i64::from(me));
    }
}
