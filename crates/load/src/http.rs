//! HTTP/1.1 on the wire: the request a connection sends, and a reader of
//! responses fed whatever bytes arrive. The head is parsed by `httparse`;
//! the body's framing (`Content-Length`, `chunked`, or up to the close) is
//! followed here, counting the bytes and keeping none of them, so a 1 GB
//! response costs one buffer. Ours rather than a client crate's because the
//! load generator must own every byte's timing and never buffer a body.

/// Longest response head accepted (status line and headers).
pub const HEAD_MAX: usize = 64 * 1024;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HttpError {
    #[error("malformed response head: {0}")]
    Head(String),
    #[error("response head longer than {HEAD_MAX} bytes")]
    HeadTooLong,
    #[error("bad Content-Length {0:?}")]
    Length(String),
    #[error("bad chunk size line")]
    ChunkSize,
    #[error("chunk data not followed by CRLF")]
    ChunkEnd,
    #[error("connection closed in the middle of a response")]
    Truncated,
}

/// A GET of `path` from `host` (its `Host` header) with extra `headers`
/// (`Name: value` each), keeping the connection open or asking the server
/// to close it.
pub fn request(host: &str, path: &str, headers: &[String], keep_alive: bool) -> Vec<u8> {
    let connection = if keep_alive { "keep-alive" } else { "close" };
    let extra: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
    format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: kansoku-load\r\nConnection: {connection}\r\n{extra}\r\n"
    )
    .into_bytes()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Body {
    /// Bytes still to come.
    Length(u64),
    /// In a chunked body.
    Chunked(Chunk),
    /// Everything up to the close.
    UntilClose,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chunk {
    /// Reading the size line: the size so far, whether its digits ended
    /// (an extension follows), whether a CR was seen.
    Size { size: u64, digits: u8, ext: bool, cr: bool },
    /// In a chunk's data: bytes left.
    Data(u64),
    /// After the data: the CRLF (how much of it seen).
    DataEnd(u8),
    /// In the trailer: the length of the current line, whether a CR was seen.
    Trailer { len: usize, cr: bool },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Head,
    Body(Body),
    Done,
}

/// One response, read from the bytes fed to it.
#[derive(Debug)]
pub struct ResponseReader {
    state: State,
    /// The status code, once the head is read.
    pub status: u16,
    /// Body bytes so far (for chunked: the data, not the framing).
    pub body_bytes: u64,
    /// All bytes of the response so far, head and framing included.
    pub wire_bytes: u64,
    /// Whether the connection may carry another request after this one.
    pub keep_alive: bool,
}

impl Default for ResponseReader {
    fn default() -> Self {
        ResponseReader { state: State::Head, status: 0, body_bytes: 0, wire_bytes: 0, keep_alive: true }
    }
}

impl ResponseReader {
    pub fn new() -> ResponseReader {
        ResponseReader::default()
    }

    /// Whether the whole response has been read.
    pub fn done(&self) -> bool {
        self.state == State::Done
    }

    /// Takes what it can of `buf`; returns how many bytes it used (the rest
    /// belongs to the next response). Reading the head needs the whole head
    /// in `buf`: when it returns 0 without being done, the caller reads
    /// more and calls again with the bytes it kept (at most [`HEAD_MAX`]).
    pub fn feed(&mut self, buf: &[u8]) -> Result<usize, HttpError> {
        let mut used = 0;
        loop {
            let rest = &buf[used..];
            let n = match self.state {
                State::Done => break,
                State::Head => {
                    let n = self.head(rest)?;
                    if n == 0 {
                        break;
                    }
                    n
                }
                State::Body(body) => {
                    if rest.is_empty() {
                        break;
                    }
                    self.body(body, rest)?
                }
            };
            used += n;
            self.wire_bytes += n as u64;
        }
        Ok(used)
    }

    /// The connection closed: the end of a body that runs up to the close;
    /// an error anywhere else in a response.
    pub fn eof(&mut self) -> Result<(), HttpError> {
        match self.state {
            State::Done => Ok(()),
            State::Body(Body::UntilClose) => {
                self.state = State::Done;
                self.keep_alive = false;
                Ok(())
            }
            _ => Err(HttpError::Truncated),
        }
    }

    fn head(&mut self, buf: &[u8]) -> Result<usize, HttpError> {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut resp = httparse::Response::new(&mut headers);
        let n = match resp.parse(buf) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if buf.len() >= HEAD_MAX => return Err(HttpError::HeadTooLong),
            Ok(httparse::Status::Partial) => return Ok(0),
            Err(e) => return Err(HttpError::Head(e.to_string())),
        };
        let status = resp.code.unwrap_or(0);
        if (100..200).contains(&status) {
            // An interim response (100 Continue): the real one follows.
            return Ok(n);
        }
        self.status = status;
        let (mut length, mut chunked) = (None, false);
        self.keep_alive = resp.version == Some(1);
        for h in resp.headers.iter() {
            if h.name.eq_ignore_ascii_case("content-length") {
                let text = String::from_utf8_lossy(h.value).trim().to_owned();
                let v: u64 = text.parse().map_err(|_| HttpError::Length(text.clone()))?;
                if length.is_some_and(|l| l != v) {
                    return Err(HttpError::Length(text));
                }
                length = Some(v);
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = h
                    .value
                    .rsplit(|&b| b == b',')
                    .next()
                    .is_some_and(|last| String::from_utf8_lossy(last).trim().eq_ignore_ascii_case("chunked"));
            } else if h.name.eq_ignore_ascii_case("connection") {
                let v = String::from_utf8_lossy(h.value).to_ascii_lowercase();
                if v.contains("close") {
                    self.keep_alive = false;
                } else if v.contains("keep-alive") {
                    self.keep_alive = true;
                }
            }
        }
        // RFC 9112 6.3: no body for 204 and 304; chunked wins over a length.
        self.state = if status == 204 || status == 304 {
            State::Done
        } else if chunked {
            State::Body(Body::Chunked(Chunk::Size { size: 0, digits: 0, ext: false, cr: false }))
        } else if let Some(len) = length {
            if len == 0 { State::Done } else { State::Body(Body::Length(len)) }
        } else {
            self.keep_alive = false;
            State::Body(Body::UntilClose)
        };
        Ok(n)
    }

    fn body(&mut self, body: Body, buf: &[u8]) -> Result<usize, HttpError> {
        match body {
            Body::Length(left) => {
                let n = (buf.len() as u64).min(left);
                self.body_bytes += n;
                self.state = if n == left { State::Done } else { State::Body(Body::Length(left - n)) };
                Ok(n as usize)
            }
            Body::UntilClose => {
                self.body_bytes += buf.len() as u64;
                Ok(buf.len())
            }
            Body::Chunked(c) => self.chunk(c, buf),
        }
    }

    fn chunk(&mut self, c: Chunk, buf: &[u8]) -> Result<usize, HttpError> {
        let set = |r: &mut ResponseReader, c| r.state = State::Body(Body::Chunked(c));
        match c {
            Chunk::Data(left) => {
                let n = (buf.len() as u64).min(left);
                self.body_bytes += n;
                set(self, if n == left { Chunk::DataEnd(0) } else { Chunk::Data(left - n) });
                Ok(n as usize)
            }
            Chunk::DataEnd(seen) => {
                let want = if seen == 0 { b'\r' } else { b'\n' };
                if buf[0] != want {
                    return Err(HttpError::ChunkEnd);
                }
                set(
                    self,
                    if seen == 0 {
                        Chunk::DataEnd(1)
                    } else {
                        Chunk::Size { size: 0, digits: 0, ext: false, cr: false }
                    },
                );
                Ok(1)
            }
            Chunk::Size { mut size, mut digits, mut ext, cr } => {
                let b = buf[0];
                if cr {
                    if b != b'\n' || digits == 0 {
                        return Err(HttpError::ChunkSize);
                    }
                    set(self, if size == 0 { Chunk::Trailer { len: 0, cr: false } } else { Chunk::Data(size) });
                    return Ok(1);
                }
                match b {
                    b'\r' => {
                        set(self, Chunk::Size { size, digits, ext, cr: true });
                        return Ok(1);
                    }
                    _ if ext => {}
                    b';' | b' ' | b'\t' => ext = true,
                    _ => {
                        let d = (b as char).to_digit(16).ok_or(HttpError::ChunkSize)?;
                        // 16 hex digits fill a u64.
                        if digits >= 16 {
                            return Err(HttpError::ChunkSize);
                        }
                        size = size << 4 | u64::from(d);
                        digits += 1;
                    }
                }
                set(self, Chunk::Size { size, digits, ext, cr: false });
                Ok(1)
            }
            Chunk::Trailer { len, cr } => {
                let b = buf[0];
                if cr {
                    if b != b'\n' {
                        return Err(HttpError::ChunkSize);
                    }
                    if len == 0 {
                        self.state = State::Done;
                    } else {
                        set(self, Chunk::Trailer { len: 0, cr: false });
                    }
                } else if b == b'\r' {
                    set(self, Chunk::Trailer { len, cr: true });
                } else if len >= HEAD_MAX {
                    return Err(HttpError::HeadTooLong);
                } else {
                    set(self, Chunk::Trailer { len: len + 1, cr: false });
                }
                Ok(1)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Feeds `bytes` in pieces cut at `cuts`, as a connection would: the
    /// unused rest is kept and more appended. Returns the reader and the
    /// bytes left over after the response.
    fn read_in_pieces(bytes: &[u8], cuts: &[usize]) -> Result<(ResponseReader, Vec<u8>), HttpError> {
        let mut r = ResponseReader::new();
        let mut kept: Vec<u8> = Vec::new();
        let mut at = 0;
        let mut ends: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        ends.push(bytes.len());
        ends.sort_unstable();
        for end in ends {
            kept.extend_from_slice(&bytes[at..end]);
            at = end;
            let used = r.feed(&kept)?;
            kept.drain(..used);
            if r.done() {
                break;
            }
        }
        kept.extend_from_slice(&bytes[at..]);
        if !r.done() {
            r.eof()?;
        }
        Ok((r, kept))
    }

    fn chunked(body: &[u8], sizes: &[usize]) -> Vec<u8> {
        let mut out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        let mut at = 0;
        for &s in sizes.iter().chain(std::iter::once(&usize::MAX)) {
            let n = s.min(body.len() - at);
            if n == 0 {
                continue;
            }
            out.extend_from_slice(format!("{n:x};ext=1\r\n").as_bytes());
            out.extend_from_slice(&body[at..at + n]);
            out.extend_from_slice(b"\r\n");
            at += n;
        }
        out.extend_from_slice(b"0\r\nX-Trailer: t\r\n\r\n");
        out
    }

    #[test]
    fn a_length_delimited_body_and_the_next_response() {
        let two =
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n";
        let (r, rest) = read_in_pieces(two, &[3, 20, 41]).unwrap();
        assert_eq!((r.status, r.body_bytes, r.keep_alive), (200, 5, true));
        assert_eq!(r.wire_bytes as usize, two.len() - rest.len());
        let (r, rest) = read_in_pieces(&rest, &[]).unwrap();
        assert_eq!((r.status, r.body_bytes, rest.len()), (404, 0, 0));
    }

    #[test]
    fn chunked_bodies_count_their_data_only() {
        let body = vec![7u8; 1000];
        let bytes = chunked(&body, &[1, 100, 17]);
        let (r, rest) = read_in_pieces(&bytes, &[5, 60, 61, 62, 900]).unwrap();
        assert_eq!((r.status, r.body_bytes, rest.len()), (200, 1000, 0));
        assert_eq!(r.wire_bytes as usize, bytes.len());
    }

    #[test]
    fn until_close_no_body_and_interim_responses() {
        let (r, _) = read_in_pieces(b"HTTP/1.0 200 OK\r\n\r\nabc", &[]).unwrap();
        assert_eq!((r.body_bytes, r.keep_alive), (3, false));
        let (r, rest) =
            read_in_pieces(b"HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\nHTTP/1.1 200 OK", &[]).unwrap();
        assert_eq!((r.status, r.body_bytes, rest.len()), (204, 0, 15));
        let (r, _) =
            read_in_pieces(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\nx", &[])
                .unwrap();
        assert_eq!((r.status, r.body_bytes), (201, 1));
        let (r, _) =
            read_in_pieces(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx", &[]).unwrap();
        assert!(!r.keep_alive);
    }

    #[test]
    fn bad_responses_say_what_is_wrong() {
        let err = |b: &[u8]| read_in_pieces(b, &[]).unwrap_err();
        assert!(matches!(err(b"HTTX/1.1 200 OK\r\n\r\n"), HttpError::Head(_)));
        assert_eq!(err(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"), HttpError::Length("-1".into()));
        assert_eq!(err(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"), HttpError::Truncated);
        assert_eq!(err(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"), HttpError::ChunkSize);
        assert_eq!(err(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab"), HttpError::ChunkEnd);
        assert_eq!(
            err(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n11111111111111111\r\n"),
            HttpError::ChunkSize
        );
        let long = [b"HTTP/1.1 200 OK\r\nX: ".as_slice(), &vec![b'a'; HEAD_MAX]].concat();
        assert_eq!(err(&long), HttpError::HeadTooLong);
    }

    proptest! {
        /// However the bytes arrive, the same response is read.
        #[test]
        fn any_cuts_read_the_same(len in 0usize..3000, sizes in proptest::collection::vec(1usize..700, 0..6),
                                  cuts in proptest::collection::vec(0usize..5000, 0..12)) {
            let body = vec![b'x'; len];
            let bytes = chunked(&body, &sizes);
            let (r, rest) = read_in_pieces(&bytes, &cuts).unwrap();
            prop_assert_eq!((r.body_bytes, rest.len(), r.wire_bytes), (len as u64, 0, bytes.len() as u64));
        }

        /// Any bytes at all: an answer or an error, never a panic.
        #[test]
        fn any_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400),
                                 cuts in proptest::collection::vec(0usize..500, 0..6)) {
            let head = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".as_slice(), &bytes].concat();
            let _ = read_in_pieces(&head, &cuts);
            let _ = read_in_pieces(&bytes, &cuts);
        }
    }
}
