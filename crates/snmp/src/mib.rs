//! The MIB objects kansoku knows by name: enough of MIB-II, IF-MIB and
//! UCD-SNMP-MIB for the glogger paper's values and their labels. Names and
//! index labels follow Prometheus' `snmp_exporter` (`ifHCInOctets{ifIndex,
//! ifDescr}`), so its users' queries carry over. Any other object is polled by
//! number and stored as `snmp_oid_value{oid="1.3.6..."}`.

use crate::oid::Oid;

/// A columnar object (table column) or scalar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Object {
    pub name: &'static str,
    pub oid: &'static [u32],
    /// The label its instance suffix becomes (`ifIndex`), or None for scalars
    /// (instance `.0`).
    pub index: Option<&'static str>,
}

const IF: [u32; 9] = [1, 3, 6, 1, 2, 1, 2, 2, 1];
const DSK: [u32; 9] = [1, 3, 6, 1, 4, 1, 2021, 9, 1];
const LA: [u32; 9] = [1, 3, 6, 1, 4, 1, 2021, 10, 1];

macro_rules! col {
    ($name:literal, $table:ident, $col:literal, $idx:literal) => {
        Object {
            name: $name,
            oid: &[
                $table[0], $table[1], $table[2], $table[3], $table[4], $table[5], $table[6], $table[7], $table[8], $col,
            ],
            index: Some($idx),
        }
    };
}

pub const OBJECTS: &[Object] = &[
    Object { name: "sysDescr", oid: &[1, 3, 6, 1, 2, 1, 1, 1], index: None },
    Object { name: "sysUpTime", oid: &[1, 3, 6, 1, 2, 1, 1, 3], index: None },
    Object { name: "sysName", oid: &[1, 3, 6, 1, 2, 1, 1, 5], index: None },
    col!("ifIndex", IF, 1, "ifIndex"),
    col!("ifDescr", IF, 2, "ifIndex"),
    col!("ifType", IF, 3, "ifIndex"),
    col!("ifMtu", IF, 4, "ifIndex"),
    col!("ifSpeed", IF, 5, "ifIndex"),
    col!("ifOperStatus", IF, 8, "ifIndex"),
    col!("ifInOctets", IF, 10, "ifIndex"),
    col!("ifInUcastPkts", IF, 11, "ifIndex"),
    col!("ifInDiscards", IF, 13, "ifIndex"),
    col!("ifInErrors", IF, 14, "ifIndex"),
    col!("ifOutOctets", IF, 16, "ifIndex"),
    col!("ifOutUcastPkts", IF, 17, "ifIndex"),
    col!("ifOutDiscards", IF, 19, "ifIndex"),
    col!("ifOutErrors", IF, 20, "ifIndex"),
    Object { name: "ifName", oid: &[1, 3, 6, 1, 2, 1, 31, 1, 1, 1, 1], index: Some("ifIndex") },
    Object { name: "ifHCInOctets", oid: &[1, 3, 6, 1, 2, 1, 31, 1, 1, 1, 6], index: Some("ifIndex") },
    Object { name: "ifHCOutOctets", oid: &[1, 3, 6, 1, 2, 1, 31, 1, 1, 1, 10], index: Some("ifIndex") },
    Object { name: "ifHighSpeed", oid: &[1, 3, 6, 1, 2, 1, 31, 1, 1, 1, 15], index: Some("ifIndex") },
    col!("dskPath", DSK, 2, "dskIndex"),
    col!("dskDevice", DSK, 3, "dskIndex"),
    col!("dskTotal", DSK, 6, "dskIndex"),
    col!("dskAvail", DSK, 7, "dskIndex"),
    col!("dskUsed", DSK, 8, "dskIndex"),
    col!("dskPercent", DSK, 9, "dskIndex"),
    col!("laNames", LA, 2, "laIndex"),
    col!("laLoad", LA, 3, "laIndex"),
    col!("laLoadInt", LA, 5, "laIndex"),
    Object { name: "memTotalReal", oid: &[1, 3, 6, 1, 4, 1, 2021, 4, 5], index: None },
    Object { name: "memAvailReal", oid: &[1, 3, 6, 1, 4, 1, 2021, 4, 6], index: None },
    Object { name: "ssCpuRawUser", oid: &[1, 3, 6, 1, 4, 1, 2021, 11, 50], index: None },
    Object { name: "ssCpuRawSystem", oid: &[1, 3, 6, 1, 4, 1, 2021, 11, 52], index: None },
    Object { name: "ssCpuRawIdle", oid: &[1, 3, 6, 1, 4, 1, 2021, 11, 53], index: None },
];

pub fn by_name(name: &str) -> Option<&'static Object> {
    OBJECTS.iter().find(|o| o.name == name)
}

pub fn oid_of(object: &Object) -> Oid {
    Oid::new(object.oid.to_vec()).expect("BUG: MIB table holds valid OIDs")
}

pub fn sys_uptime() -> Oid {
    oid_of(by_name("sysUpTime").expect("BUG: sysUpTime in table")).child(0)
}

/// The object an instance OID belongs to (longest prefix), with its suffix.
pub fn lookup(oid: &Oid) -> Option<(&'static Object, &[u32])> {
    OBJECTS
        .iter()
        .filter(|o| oid.arcs().starts_with(o.oid) && oid.arcs().len() > o.oid.len())
        .max_by_key(|o| o.oid.len())
        .map(|o| (o, &oid.arcs()[o.oid.len()..]))
}

/// `ifHCInOctets.2` or `1.3.6.1.2.1.31.1.1.1.6.2`: an instance OID.
pub fn parse_instance(s: &str) -> Result<Oid, String> {
    if s.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return Oid::parse(s).map_err(|e| e.to_string());
    }
    let (name, suffix) = s.split_once('.').unwrap_or((s, ""));
    let object = by_name(name).ok_or_else(|| {
        format!("unknown object {name:?}: use a number like 1.3.6.1.2.1.1.3.0 or one of {}", names().join(", "))
    })?;
    let base = oid_of(object);
    if suffix.is_empty() {
        return Ok(base.child(0));
    }
    let arcs: Option<Vec<u32>> = suffix.split('.').map(|a| a.parse().ok()).collect();
    let arcs = arcs.ok_or_else(|| format!("{s:?}: the instance after {name} must be numbers like .2"))?;
    Ok(base.concat(&arcs))
}

pub fn names() -> Vec<&'static str> {
    OBJECTS.iter().map(|o| o.name).collect()
}

/// Short text for an instance OID: `ifHCInOctets.2`, or the dotted number.
pub fn display(oid: &Oid) -> String {
    match lookup(oid) {
        Some((o, suffix)) => {
            let mut s = o.name.to_owned();
            for a in suffix {
                s.push('.');
                s.push_str(&a.to_string());
            }
            s
        }
        None => oid.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_both_ways() {
        let oid = parse_instance("ifHCInOctets.2").unwrap();
        assert_eq!(oid.to_string(), "1.3.6.1.2.1.31.1.1.1.6.2");
        assert_eq!(display(&oid), "ifHCInOctets.2");
        assert_eq!(parse_instance("sysUpTime").unwrap(), sys_uptime());
        assert_eq!(display(&sys_uptime()), "sysUpTime.0");
        assert_eq!(display(&parse_instance("dskAvail.1").unwrap()), "dskAvail.1");
        assert_eq!(parse_instance(".1.3.6.1.9.9").unwrap().to_string(), "1.3.6.1.9.9");
        assert!(parse_instance("ifNope.1").unwrap_err().contains("unknown object"));
        assert!(parse_instance("ifInOctets.x").is_err());
    }
}
