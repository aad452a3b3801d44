//! perf ring bytes come from the kernel (and, copied, from agents): parsing
//! arbitrary bytes never panics, and the counts agree with the records seen.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // With and without sample ids after the side band's records.
    for sample_id_all in [false, true] {
        let mut counts = perf::ring::Counts::default();
        let mut seen = 0u64;
        let mut lost = 0u64;
        let _ = perf::ring::parse_records(data, sample_id_all, &mut counts, |r| {
            seen += 1;
            if let perf::ring::Record::Lost { lost: n } = r {
                lost += n;
            }
        });
        let c = &counts;
        assert_eq!(seen, c.samples + c.lost_records + c.throttle + c.unthrottle + c.sideband + c.other);
        assert_eq!(lost, c.lost);
    }
    // The same bytes through the ring copy, from every start.
    if data.len() >= 8 {
        let len = (data.len() / 2).next_power_of_two().min(1 << 12);
        let ring: Vec<u8> = data.iter().copied().cycle().take(len).collect();
        let mut out = Vec::new();
        let tail = u64::from(data[0]) * 977;
        perf::ring::copy_span(len, tail, tail + u64::from(data[1]) * 7 % len as u64, &mut out, |off, dst| {
            dst.copy_from_slice(&ring[off..off + dst.len()]);
        });
    }
});
