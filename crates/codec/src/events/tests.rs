//! Round trips, refusals and codec choices of the event batch.

use proptest::prelude::*;

use super::column::*;
use super::*;
use crate::varint::{Reader, put_i64, put_u64};

fn batches() -> impl Strategy<Value = EventBatch> {
    let edge_t = prop_oneof![Just(i64::MIN), Just(i64::MAX), Just(0i64), Just(-1i64), any::<i64>()];
    (1usize..300, any::<u32>(), edge_t, any::<bool>()).prop_flat_map(|(n, cpu, t0, chain)| {
        let ips = prop_oneof![
            Just(u64::MAX),
            Just(0u64),
            0xffff_ffff_8100_0000u64..0xffff_ffff_8200_0000,
            0x5555_0000_0000u64..0x5555_0001_0000,
            any::<u64>()
        ];
        (
            proptest::collection::vec(0i64..1_000_000, n),
            proptest::collection::vec(prop_oneof![Just(0u32), Just(u32::MAX), 1u32..5], n),
            proptest::collection::vec(prop_oneof![Just(0u32), Just(u32::MAX), 1u32..5], n),
            proptest::collection::vec(ips, n),
            proptest::collection::vec(any::<u32>(), if chain { n } else { 0 }),
            proptest::collection::vec(
                proptest::collection::vec(any::<u64>(), 0..20),
                if chain { 1..=n } else { 0..=0 },
            ),
            proptest::collection::vec(procs(), 0..=n.min(3)),
        )
            .prop_map(move |(gaps, pid, tid, ip, chain, stacks, procs)| {
                let chain = chain.iter().map(|c| c % stacks.len().max(1) as u32).collect();
                // Times from t0, clamped so the span fits (validate's rule).
                let mut t = t0.min(i64::MAX - 1_000_000 * 300);
                let time = gaps
                    .iter()
                    .map(|g| {
                        t += g;
                        t
                    })
                    .collect();
                EventBatch { cpu, time, pid, tid, ip, chain, stacks, procs }
            })
    })
}

fn procs() -> impl Strategy<Value = ProcInfo> {
    let map = (any::<u64>(), 1u64..1 << 30, any::<u64>(), proptest::collection::vec(any::<u8>(), 0..=20), ".{0,40}")
        .prop_map(|(start, len, pgoff, build_id, path)| MapInfo {
            start: start.min(u64::MAX - len),
            end: start.min(u64::MAX - len) + len,
            pgoff,
            build_id,
            path,
        });
    (any::<u32>(), ".{0,16}", proptest::collection::vec(map, 0..4)).prop_map(|(pid, comm, maps)| ProcInfo {
        pid,
        comm,
        maps,
    })
}

proptest! {
    #[test]
    fn round_trips_either_encoding(b in batches(), compact in any::<bool>()) {
        let mut b = b;
        b.validate().unwrap();
        let mut out = Vec::new();
        b.encode(&mut out, if compact { Encoding::Compact } else { Encoding::Fast });
        prop_assert_eq!(EventBatch::decode(&out, Want::ALL).unwrap(), b.clone());
        prop_assert!(EventBatch::check(&out).is_ok());
        // Every truncation is detected, never a shorter answer.
        for cut in [0, 1, out.len() / 2, out.len() - 1] {
            prop_assert!(EventBatch::decode(&out[..cut], Want::ALL).is_err());
            prop_assert!(EventBatch::check(&out[..cut]).is_err());
        }
        let only_ip = EventBatch::decode(&out, Want::column(Column::Ip)).unwrap();
        prop_assert_eq!(&only_ip.ip, &b.ip);
        prop_assert!(only_ip.pid.is_empty() && only_ip.tid.is_empty());
    }

    #[test]
    fn unordered_input_is_sorted_stably(times in proptest::collection::vec(-5i64..5, 1..50)) {
        let n = times.len();
        let mut b = EventBatch {
            cpu: 1,
            time: times.clone(),
            pid: (0..n as u32).collect(),
            tid: (0..n as u32).collect(),
            ip: (0..n as u64).collect(),
            ..EventBatch::default()
        };
        b.validate().unwrap();
        let mut want: Vec<(i64, u32)> = times.iter().copied().zip(0..n as u32).collect();
        want.sort_by_key(|p| p.0);
        prop_assert_eq!(b.time.clone(), want.iter().map(|p| p.0).collect::<Vec<_>>());
        prop_assert_eq!(b.pid.clone(), want.iter().map(|p| p.1).collect::<Vec<_>>());
        prop_assert_eq!(b.ip, want.iter().map(|p| u64::from(p.1)).collect::<Vec<_>>());
    }
}

#[test]
fn bad_batches_are_refused_with_a_reason() {
    let mut ragged =
        EventBatch { time: vec![1, 2], pid: vec![1], tid: vec![1, 1], ip: vec![1, 1], ..Default::default() };
    assert!(matches!(ragged.validate(), Err(BatchError::Ragged { time: 2, pid: 1, .. })));
    assert_eq!(EventBatch::default().validate(), Err(BatchError::Empty));
    let mut span = EventBatch {
        time: vec![i64::MIN, i64::MAX],
        pid: vec![0; 2],
        tid: vec![0; 2],
        ip: vec![0; 2],
        ..Default::default()
    };
    assert!(span.validate().is_err());
    // A header claiming more events than allowed never allocates them.
    let mut huge = Vec::new();
    put_u64(&mut huge, (MAX_EVENTS + 1) as u64);
    assert!(EventBatch::decode(&huge, Want::ALL).is_err());
}

/// A second of one CPU as `perf record -F 10000` sees it: a 100 µs timer
/// with jitter and the odd idle gap, a few processes, a loop's ips and
/// some kernel ones.
fn second_of_samples(seed: u64) -> EventBatch {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut b = EventBatch { cpu: 3, ..Default::default() };
    let mut t = 1_700_000_000_000_000_000i64;
    for _ in 0..10_000 {
        t += if rng.u32(..500) == 0 { rng.i64(200_000..5_000_000) } else { 100_000 + rng.i64(-2000..2000) };
        let pid = [0, 4242, 4242, 4242, 977][rng.usize(..5)];
        let ip = if pid == 0 { 0xffff_ffff_8100_0000 + rng.u64(..16) * 4 } else { 0x5555_5555_1000 + rng.u64(..2000) };
        b.push(t, pid, pid + u32::from(rng.u8(..8) == 0), ip);
    }
    b
}

#[test]
fn time_and_ip_columns_take_the_codecs_made_for_them() {
    let b = second_of_samples(1);
    let mut out = Vec::new();
    b.encode(&mut out, Encoding::Fast);
    assert_eq!(EventBatch::decode(&out, Want::ALL).unwrap(), b);
    let (_, mut r) = Header::read(&out).unwrap();
    let n = b.len();
    let mut column = |shape: &str| {
        let at = r.pos;
        match shape {
            "u32" => drop(get_column::<u32>(&mut r, n, Read::Skip).unwrap()),
            "u64" => drop(get_column::<u64>(&mut r, n, Read::Skip).unwrap()),
            _ => drop(get_column::<i64>(&mut r, n, Read::Skip).unwrap()),
        }
        (out[at], r.pos - at)
    };
    let (time, pid, tid, ip) = (column("i64"), column("u32"), column("i64"), column("u64"));
    assert_eq!(time.0, CODEC_ZSTD_OFFSET);
    assert_eq!(ip.0, CODEC_DICT);
    assert!(matches!(pid.0, CODEC_ZSTD_NARROW | CODEC_RAW_NARROW) && matches!(tid.0, CODEC_ZSTD_NARROW));
    // Each smaller than the narrow bytes it replaced.
    let deltas: Vec<i64> = std::iter::once(0).chain(b.time.windows(2).map(|w| w[1] - w[0])).collect();
    let narrow = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut c = Vec::new();
        f(&mut c);
        c.len()
    };
    assert!(time.1 < narrow(&|c| put_narrow(c, &deltas, 1)), "time {time:?}");
    assert!(ip.1 < narrow(&|c| put_narrow(c, &b.ip, 1)), "ip {ip:?}");
}

#[test]
fn offsets_escape_what_does_not_fit_and_check_their_tail() {
    // Mostly within a few of 1000, a few far off either way.
    let mut vals: Vec<i64> = (0..1000).map(|i| 1000 + (i % 7) - 3).collect();
    (vals[10], vals[500], vals[999]) = (i64::MAX, i64::MIN, -5_000_000);
    for level in [1, 3] {
        let mut out = Vec::new();
        put_offset(&mut out, &vals, median_bits(&vals), level);
        assert_eq!(out[1], 1, "most values fit a byte");
        assert_eq!(get_column::<i64>(&mut Reader::new(&out), vals.len(), Read::Values).unwrap(), vals);
    }
    // Width 1, base 0: the n bytes, then the escaped values' varints.
    let raw = |fixed: &[u8], tail: &[u8]| {
        let mut c = vec![CODEC_OFFSET, 1, 0];
        put_u64(&mut c, (fixed.len() + tail.len()) as u64);
        c.extend_from_slice(fixed);
        c.extend_from_slice(tail);
        c
    };
    let get = |c: &[u8], n| get_column::<i64>(&mut Reader::new(c), n, Read::Values);
    assert_eq!(get(&raw(&[2, 255], &[0x80, 0x01]), 2).unwrap(), vec![1, 64]);
    assert!(get(&raw(&[2, 255], &[]), 2).is_err(), "an escape without its value");
    assert!(get(&raw(&[2, 3], &[7]), 2).is_err(), "bytes beyond the values");
    assert!(get(&raw(&[2], &[]), 2).is_err(), "fewer values than n");
    let beyond_u32 = raw(&[255], &[0x80, 0x80, 0x80, 0x80, 0x20]);
    assert!(get_column::<u32>(&mut Reader::new(&beyond_u32), 1, Read::Values).is_err());
    let mut wide = raw(&[2], &[]);
    wide[1] = 9;
    assert!(get(&wide, 1).is_err(), "width beyond 8 bytes");
}

#[test]
fn dictionaries_round_trip_and_refuse_what_they_cannot_hold() {
    let vals: Vec<u64> = (0..500u64)
        .map(|i| [u64::MAX - 2, 0, 0xffff_ffff_8100_0000, 0x5555_0000_1234][i as usize % 4] + i % 3)
        .collect();
    for level in [1, 3] {
        let mut out = Vec::new();
        put_dict(&mut out, &vals, level);
        assert_eq!(get_column::<u64>(&mut Reader::new(&out), vals.len(), Read::Values).unwrap(), vals);
        // Skipped unread, its n unknown (a stack table's frames).
        let mut r = Reader::new(&out);
        assert!(get_column::<u64>(&mut r, 0, Read::Skip).unwrap().is_empty());
        assert_eq!(r.remaining(), 0);
    }
    // k, the gaps (offsets, width 1, base 0), the indexes (narrow, width 1).
    let dict = |gaps: &[u8], index: u8| {
        let k = gaps.len() as u8;
        let mut c = vec![CODEC_DICT, k, CODEC_OFFSET, 1, 0, k];
        c.extend_from_slice(gaps);
        c.extend([CODEC_RAW_NARROW, 1, 1, index]);
        c
    };
    // Checked (values not looked up) and read alike.
    let get = |c: &[u8]| {
        let checked = get_column::<u32>(&mut Reader::new(c), 1, Read::Check);
        let read = get_column::<u32>(&mut Reader::new(c), 1, Read::Values);
        assert_eq!(checked.is_ok(), read.is_ok(), "{checked:?} {read:?}");
        read
    };
    assert_eq!(get(&dict(&[14], 0)).unwrap(), vec![7]);
    assert!(get(&dict(&[14], 1)).is_err(), "an index past the dictionary");
    assert!(get(&dict(&[14, 2], 0)).is_err(), "more distinct values than values");
    let beyond_u32 = [CODEC_DICT, 1, CODEC_OFFSET, 8, 0, 8, 0, 0, 0, 0, 2, 0, 0, 0, CODEC_RAW_NARROW, 1, 1, 0];
    assert!(get(&beyond_u32).is_err(), "a u32 column's value beyond u32");
    let mut nested = vec![CODEC_DICT, 1];
    nested.extend(dict(&[14], 0));
    nested.extend([CODEC_RAW_NARROW, 1, 1, 0]);
    assert!(get(&nested).is_err(), "a dictionary inside a dictionary");
}

#[test]
fn a_batch_checks_as_it_decodes_whichever_column_is_a_dictionary() {
    // (Compact picks a dictionary for any column where it is smallest;
    // the fuzzer found check() reading a dictionary of times as empty.)
    let b = second_of_samples(2);
    let deltas: Vec<i64> = std::iter::once(0).chain(b.time.windows(2).map(|w| w[1] - w[0])).collect();
    let rel: Vec<i64> = b.tid.iter().zip(&b.pid).map(|(&t, &p)| i64::from(t) - i64::from(p)).collect();
    for dict in 0..4 {
        let mut out = Vec::new();
        put_u64(&mut out, b.len() as u64);
        put_u64(&mut out, u64::from(b.cpu));
        put_i64(&mut out, b.time[0]);
        put_i64(&mut out, b.time[b.len() - 1]);
        out.push(0);
        if dict == 0 {
            put_dict(&mut out, &deltas, 1)
        } else {
            put_narrow(&mut out, &deltas, 1)
        }
        if dict == 1 {
            put_dict(&mut out, &b.pid, 1)
        } else {
            put_narrow(&mut out, &b.pid, 1)
        }
        if dict == 2 {
            put_dict(&mut out, &rel, 1)
        } else {
            put_narrow(&mut out, &rel, 1)
        }
        if dict == 3 {
            put_dict(&mut out, &b.ip, 1)
        } else {
            put_narrow(&mut out, &b.ip, 1)
        }
        assert_eq!(EventBatch::decode(&out, Want::ALL).unwrap(), b, "dictionary in column {dict}");
        assert!(EventBatch::check(&out).is_ok(), "dictionary in column {dict}");
        // A time that disagrees with the header is found either way.
        let mut bad = out.clone();
        bad[out.len() - 1] ^= 1;
        assert_eq!(EventBatch::check(&bad).is_ok(), EventBatch::decode(&bad, Want::ALL).is_ok());
    }
}
