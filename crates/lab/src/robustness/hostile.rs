//! The requests of issue 42 that each ended a server (allocation failure or
//! stack overflow) before their class was bounded, as a hostile client
//! sends them over loopback, each with the refusal it must now get. `lab
//! soak` mixes them in beside a healthy agent; the end-to-end test
//! `hostile_e2e` sends each once to a server under a 4 GB address-space
//! cap while `/ping` is asked throughout.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One HTTP/1.0 exchange; (status, body). Errors count as status 0.
pub fn http(addr: &str, method: &str, path: &str, headers: &str, body: &[u8]) -> (u16, String) {
    let exchange = || -> std::io::Result<(u16, String)> {
        let mut s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(60)))?;
        write!(s, "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: {}\r\n{headers}\r\n", body.len())?;
        s.write_all(body)?;
        let mut resp = Vec::new();
        s.read_to_end(&mut resp)?;
        let text = String::from_utf8_lossy(&resp).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        Ok((head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0), body.to_owned()))
    };
    exchange().unwrap_or((0, String::new()))
}

/// A hostile request: the class (issue 42's item), and a function that
/// sends it to `addr` with the `auth` headers (CRLF-ended, may be empty)
/// and says what was wrong with the answer, if anything.
#[derive(Debug)]
pub struct Hostile {
    pub name: &'static str,
    pub send: fn(addr: &str, auth: &str) -> Result<(), String>,
}

fn expect(what: &str, got: (u16, String), status: u16, contains: &str) -> Result<(), String> {
    if got.0 == status && got.1.contains(contains) {
        Ok(())
    } else {
        let shown: String = got.1.chars().take(300).collect();
        Err(format!("{what}: expected {status} with {contains:?}, got {} {shown}", got.0))
    }
}

fn form(addr: &str, auth: &str, path: &str, body: &str) -> (u16, String) {
    http(addr, "POST", path, &format!("{auth}Content-Type: application/x-www-form-urlencoded\r\n"), body.as_bytes())
}

fn snappy(raw: &[u8]) -> Vec<u8> {
    snap::raw::Encoder::new().compress_vec(raw).expect("snappy compresses any input")
}

fn remote_write(addr: &str, auth: &str, body: &[u8]) -> (u16, String) {
    let headers = format!("{auth}Content-Encoding: snappy\r\nContent-Type: application/x-protobuf\r\n");
    http(addr, "POST", "/prometheus/api/v1/write", &headers, body)
}

/// Every class, in issue 42's order.
pub fn classes() -> Vec<Hostile> {
    vec![
        Hostile {
            name: "1 PromQL steps²",
            send: |a, auth| {
                let q = client::escape(r#"count(count_over_time(count_values("v", vector(time()))[6h:1s]))"#);
                let got = http(a, "GET", &format!("/prometheus/api/v1/query?query={q}&time=1800000000"), auth, b"");
                expect("steps²", got, 422, "points")
            },
        },
        Hostile {
            name: "2 answer past its size",
            send: |a, auth| {
                let got = http(a, "GET", "/api/v1/query?query=up&from=1800000000&to=1800000000.05&step=1ns", auth, b"");
                // 422 when the series exists; 200 with nothing when it does not.
                if got.0 == 200 && !got.1.contains("\"values\":[") {
                    return Ok(());
                }
                expect("1 ns steps", got, 422, "MiB")
            },
        },
        Hostile {
            name: "3 gzip of bad lines",
            send: |a, auth| {
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
                for _ in 0..512 {
                    gz.write_all(&b"x\n".repeat(1 << 16)).map_err(|e| e.to_string())?;
                }
                let body = gz.finish().map_err(|e| e.to_string())?;
                let got = http(a, "POST", "/write?db=hostile", &format!("{auth}Content-Encoding: gzip\r\n"), &body);
                expect("gzip of bad lines", got, 400, "more bad lines")
            },
        },
        Hostile {
            name: "4 remote write of empty series",
            send: |a, auth| {
                let got = remote_write(a, auth, &snappy(&[0x0a, 0x00].repeat(16 << 20)));
                expect("empty series", got, 400, "series")
            },
        },
        Hostile {
            name: "5 InfluxQL functions × buckets",
            send: |a, auth| {
                let fields = vec!["mean(v)"; 600].join(",");
                let q = format!(
                    "SELECT {fields} FROM hostile WHERE time >= 1800000000s AND time < 1800099999s GROUP BY time(1s)"
                );
                let got = form(a, auth, "/query?db=hostile", &format!("q={}", client::escape(&q)));
                if got.0 == 200 && (got.1.contains("cells") || !got.1.contains("\"series\"")) {
                    return Ok(());
                }
                Err(format!("InfluxQL cells: {} {}", got.0, got.1.chars().take(300).collect::<String>()))
            },
        },
        Hostile {
            name: "6 InfluxQL regex",
            send: |a, auth| {
                let q = client::escape("SELECT v FROM m WHERE a =~ /(.*){10000}/");
                expect("InfluxQL regex", http(a, "GET", &format!("/query?db=x&q={q}"), auth, b""), 400, "size limit")
            },
        },
        Hostile {
            name: "7 match[] of 5,000 regexes",
            send: |a, auth| {
                let body: String =
                    (0..5000).map(|i| format!("match[]={}&", client::escape(&format!("{{a=~\"x{i}.*\"}}")))).collect();
                expect("match[]", form(a, auth, "/prometheus/api/v1/series", &body), 400, "label matchers")
            },
        },
        Hostile {
            name: "8 a 30 MB label",
            send: |a, auth| {
                let big = "v".repeat(30 << 20);
                let body = promql::remote_write::encode(&[(
                    vec![("__name__", "hostile_label"), ("a", &big)],
                    vec![(1_800_000_000_000, 1.0)],
                )]);
                expect("30 MB label", remote_write(a, auth, &body), 400, "at most")
            },
        },
        Hostile {
            name: "9 depth",
            send: |a, auth| {
                let sum = vec!["1"; 3000].join("+");
                let abs = format!("{}1{}", "abs(".repeat(3000), ")".repeat(3000));
                for q in [sum, abs, "(".repeat(50_000)] {
                    let got = form(a, auth, "/prometheus/api/v1/query", &format!("query={}", client::escape(&q)));
                    expect("PromQL depth", got, 400, "bad_data")?;
                }
                let got = form(a, auth, "/prometheus/api/v1/series", &format!("match[]={}", "(".repeat(10_000)));
                expect("match[] depth", got, 400, "deeper")?;
                let q = format!("SELECT v FROM m WHERE {}a = 'b'{}", "(".repeat(3500), ")".repeat(3500));
                expect(
                    "InfluxQL depth",
                    form(a, auth, "/query?db=x", &format!("q={}", client::escape(&q))),
                    400,
                    "deeper",
                )
            },
        },
        Hostile {
            name: "11 trickling bodies",
            send: |a, auth| {
                // Sixteen bodies that stop after a byte; each is cut off
                // (408) once the body timeout passes, its slot freed.
                let held: Vec<TcpStream> = (0..16)
                    .filter_map(|_| {
                        let mut s = TcpStream::connect(a).ok()?;
                        write!(s, "POST /write?db=x HTTP/1.1\r\nHost: {a}\r\n{auth}Content-Length: 100\r\n\r\nx")
                            .ok()?;
                        Some(s)
                    })
                    .collect();
                for mut s in held {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
                    let mut answer = Vec::new();
                    let _ = s.read_to_end(&mut answer);
                    if !answer.starts_with(b"HTTP/1.1 408") {
                        return Err(format!("a trickling body got {}", String::from_utf8_lossy(&answer)));
                    }
                }
                Ok(())
            },
        },
        Hostile {
            name: "16 samples out of bounds",
            send: |a, auth| {
                let body = promql::remote_write::encode(&[(vec![("__name__", "hostile_oob")], vec![(-5_000, 1.0)])]);
                expect("out of bounds", remote_write(a, auth, &body), 400, "out of bounds")
            },
        },
        Hostile {
            name: "19 forged names",
            send: |a, auth| {
                let forged = "up\ninjected_metric{job=\"forged\"} 1e9";
                let body =
                    promql::remote_write::encode(&[(vec![("__name__", forged)], vec![(1_800_000_000_000, 1.0)])]);
                expect("forged name", remote_write(a, auth, &body), 400, "invalid metric name")
            },
        },
        Hostile {
            name: "20 all of time",
            send: |a, auth| {
                let path = "/prometheus/api/v1/query_range?query=1&start=-9223372036&end=9223372036&step=1";
                expect("all of time", http(a, "GET", path, auth, b""), 400, "11000")
            },
        },
    ]
}
