//! The targets file: who to poll, how, and what.
//!
//! Line format (one target per line, `#` comments), every field after the
//! address optional, in any order:
//!
//! ```text
//! # address[:port]   [v1|v2c]  [community=NAME]  [oids=OBJ,OBJ,...]  [name=LABEL]  [label=value ...]
//! 127.0.3.1:27161    v2c       community=public
//! switch-a.example   v1        oids=sysUpTime.0,ifInOctets.3,ifOutOctets.3  rack=r12
//! ```
//!
//! TOML (a file ending in `.toml`): `[defaults]` with any of `version`,
//! `community`, `oids`, `labels`, then `[[target]]` tables with `address` and
//! the same keys. Defaults: port 161, v2c, community `public`, the default
//! OID set (discovered at start-up, see [`crate::discover`]).

use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;

use serde::Deserialize;

use crate::message::Version;
use crate::mib;
use crate::oid::Oid;

#[derive(Debug, Clone, PartialEq)]
pub enum OidSet {
    /// sysUpTime.0, interface octets, UCD disk used/available and load,
    /// found by discovery.
    Default,
    /// Exactly these instance OIDs (sysUpTime.0 is put first if missing).
    List(Vec<Oid>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct TargetSpec {
    pub address: SocketAddr,
    /// The `target` label: the address as written in the file, or `name=`.
    pub name: String,
    pub version: Version,
    pub community: String,
    pub oids: OidSet,
    pub labels: Vec<(String, String)>,
}

#[derive(Debug, thiserror::Error)]
pub enum TargetsError {
    #[error("{path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}:{line}: {msg}")]
    Line { path: String, line: usize, msg: String },
    #[error("{path}: {msg}")]
    File { path: String, msg: String },
}

/// Labels the poller sets itself; a targets file may not override them.
const RESERVED_LABELS: &[&str] = &["target", "oid", "error", "ifIndex", "ifDescr", "dskIndex", "dskPath", "laIndex"];

pub fn load(path: &Path) -> Result<Vec<TargetSpec>, TargetsError> {
    let p = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| TargetsError::Read { path: p.clone(), source })?;
    let targets =
        if path.extension().is_some_and(|e| e == "toml") { parse_toml(&p, &text)? } else { parse_lines(&p, &text)? };
    if targets.is_empty() {
        return Err(TargetsError::File { path: p, msg: "no targets".into() });
    }
    Ok(targets)
}

pub fn parse_lines(path: &str, text: &str) -> Result<Vec<TargetSpec>, TargetsError> {
    let mut out = Vec::new();
    let mut seen = HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let err = |msg: String| TargetsError::Line { path: path.to_owned(), line, msg };
        let content = raw.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        let mut fields = content.split_whitespace();
        let address = fields.next().expect("non-empty line has a field");
        let mut spec = Raw { address: address.to_owned(), ..Raw::default() };
        for f in fields {
            match f {
                "v1" | "1" => spec.version = Some("1".into()),
                "v2c" | "2c" => spec.version = Some("2c".into()),
                _ => {
                    let (k, v) = f.split_once('=').ok_or_else(|| {
                        err(format!("{f:?}: expected v1, v2c, or key=value (community=, oids=, name=, or a label)"))
                    })?;
                    match k {
                        "community" => spec.community = Some(v.to_owned()),
                        "oids" => spec.oids = Some(v.split(',').map(str::to_owned).collect()),
                        "name" => spec.name = Some(v.to_owned()),
                        "version" => spec.version = Some(v.to_owned()),
                        _ => {
                            spec.labels.insert(k.to_owned(), v.to_owned());
                        }
                    }
                }
            }
        }
        let t = spec.resolve(&Raw::default()).map_err(err)?;
        if let Some(prev) = seen.insert(t.address, line) {
            return Err(err(format!("{} is already a target on line {prev}", t.address)));
        }
        out.push(t);
    }
    Ok(out)
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    address: String,
    name: Option<String>,
    version: Option<String>,
    community: Option<String>,
    oids: Option<Vec<String>>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlFile {
    #[serde(default)]
    defaults: Raw,
    #[serde(default)]
    target: Vec<Raw>,
}

pub fn parse_toml(path: &str, text: &str) -> Result<Vec<TargetSpec>, TargetsError> {
    let file: TomlFile =
        toml::from_str(text).map_err(|e| TargetsError::File { path: path.to_owned(), msg: e.to_string() })?;
    let mut out = Vec::new();
    let mut seen = HashMap::new();
    for (i, raw) in file.target.into_iter().enumerate() {
        let n = i + 1;
        let err = |msg: String| TargetsError::File { path: path.to_owned(), msg: format!("[[target]] #{n}: {msg}") };
        let t = raw.resolve(&file.defaults).map_err(err)?;
        if let Some(prev) = seen.insert(t.address, n) {
            return Err(err(format!("{} is already target #{prev}", t.address)));
        }
        out.push(t);
    }
    Ok(out)
}

impl Raw {
    fn resolve(self, defaults: &Raw) -> Result<TargetSpec, String> {
        if self.address.is_empty() {
            return Err("a target needs an address".into());
        }
        let address = resolve_address(&self.address)?;
        let version = match self.version.as_deref().or(defaults.version.as_deref()).unwrap_or("2c") {
            "1" | "v1" => Version::V1,
            "2c" | "v2c" => Version::V2c,
            v => return Err(format!("version {v:?}: use 1 or 2c (SNMPv3 is not supported yet)")),
        };
        let community = self.community.or_else(|| defaults.community.clone()).unwrap_or_else(|| "public".into());
        let oids = match self.oids.as_ref().or(defaults.oids.as_ref()) {
            None => OidSet::Default,
            Some(list) if list.len() == 1 && list[0] == "default" => OidSet::Default,
            Some(list) => {
                let mut oids = list.iter().map(|s| mib::parse_instance(s)).collect::<Result<Vec<_>, _>>()?;
                let up = mib::sys_uptime();
                oids.retain(|o| *o != up);
                oids.insert(0, up);
                OidSet::List(oids)
            }
        };
        let mut labels = defaults.labels.clone();
        labels.extend(self.labels);
        for k in labels.keys() {
            if RESERVED_LABELS.contains(&k.as_str()) {
                return Err(format!("label {k:?} is set by the poller; choose another name"));
            }
            if !is_label_name(k) {
                return Err(format!("label {k:?}: names are letters, digits and _, not starting with a digit"));
            }
        }
        Ok(TargetSpec {
            address,
            name: self.name.unwrap_or(self.address),
            version,
            community,
            oids,
            labels: labels.into_iter().collect(),
        })
    }
}

fn is_label_name(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn resolve_address(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    if let Ok(ip) = s.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, 161));
    }
    let with_port = if s.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) {
        s.to_owned()
    } else {
        format!("{s}:161")
    };
    with_port
        .to_socket_addrs()
        .map_err(|e| format!("address {s:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("address {s:?} resolves to nothing"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_format() {
        let text = "# comment\n127.0.3.1:27161\n\n127.0.3.2 v1 community=private oids=ifInOctets.2,sysUpTime.0 rack=r12 name=sw1 # trailing\n";
        let t = parse_lines("f", text).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].address, "127.0.3.1:27161".parse().unwrap());
        assert_eq!((t[0].version, t[0].community.as_str(), &t[0].oids), (Version::V2c, "public", &OidSet::Default));
        assert_eq!(t[0].name, "127.0.3.1:27161");
        assert_eq!(t[1].address, "127.0.3.2:161".parse().unwrap());
        assert_eq!((t[1].version, t[1].community.as_str(), t[1].name.as_str()), (Version::V1, "private", "sw1"));
        let OidSet::List(oids) = &t[1].oids else { panic!("expected a list") };
        let shown: Vec<String> = oids.iter().map(mib::display).collect();
        assert_eq!(shown, ["sysUpTime.0", "ifInOctets.2"], "sysUpTime first, once");
        assert_eq!(t[1].labels, [("rack".to_owned(), "r12".to_owned())]);
    }

    #[test]
    fn line_errors_name_the_line() {
        for (text, want) in [
            ("127.0.0.1\n127.0.0.1:161\n", "f:2: 127.0.0.1:161 is already a target on line 1"),
            ("127.0.0.1 v3\n", "f:1: \"v3\": expected v1, v2c, or key=value"),
            ("127.0.0.1 version=3\n", "f:1: version \"3\": use 1 or 2c"),
            ("127.0.0.1 oids=ifBogus.1\n", "f:1: unknown object \"ifBogus\""),
            ("127.0.0.1 target=x\n", "f:1: label \"target\" is set by the poller"),
            ("127.0.0.1 9x=y\n", "f:1: label \"9x\": names are"),
        ] {
            let e = parse_lines("f", text).unwrap_err().to_string();
            assert!(e.starts_with(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn toml_format_with_defaults() {
        let text = r#"
[defaults]
version = "1"
community = "c"
labels = { site = "lab" }

[[target]]
address = "127.0.3.1:27161"

[[target]]
address = "127.0.3.2:27161"
version = "2c"
oids = ["sysUpTime.0", "laLoad.1"]
labels = { rack = "r1" }
"#;
        let t = parse_toml("f.toml", text).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!((t[0].version, t[0].community.as_str()), (Version::V1, "c"));
        assert_eq!(t[1].version, Version::V2c);
        assert_eq!(t[1].labels, [("rack".to_owned(), "r1".to_owned()), ("site".to_owned(), "lab".to_owned())]);
        let e = parse_toml("f.toml", "[[target]]\naddress = \"127.0.0.1\"\nport = 5\n").unwrap_err().to_string();
        assert!(e.contains("unknown field `port`"), "{e}");
    }
}
