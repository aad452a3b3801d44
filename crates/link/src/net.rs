//! Connections: TCP, optionally TLS, and reading one frame at a time.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::TcpStream;

use wire::{Msg, WireError};

/// A byte stream to a peer: plain TCP or TLS over it.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}
pub type Conn = Box<dyn Stream>;

#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Wire(#[from] WireError),
    #[error("connection closed by the peer")]
    Closed,
    #[error("refused by the server: {0}")]
    Rejected(String),
    #[error("{0}")]
    Protocol(String),
}

/// Resolves once `stop` turns true (or its sender is gone).
pub async fn stopped(stop: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// A frame buffer larger than this is shrunk back before the next frame.
const BUF_KEEP: usize = 1 << 20;

/// Reads one frame. Ok(None): the peer closed the connection between frames.
pub async fn read_msg<R: AsyncRead + Unpin>(r: &mut R, buf: &mut Vec<u8>, max: u32) -> Result<Option<Msg>, NetError> {
    let mut head = [0u8; wire::HEADER];
    match r.read_exact(&mut head[..1]).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    r.read_exact(&mut head[1..]).await?;
    let (len, crc) = wire::parse_header(&head, max)?;
    // Grown as bytes arrive, never to what the header merely claims: a
    // peer that sends a 16 MiB header and stalls costs nothing. A buffer
    // grown by an earlier large frame is given back.
    buf.clear();
    if buf.capacity() > BUF_KEEP {
        buf.shrink_to(BUF_KEEP);
    }
    let got = r.take(len as u64).read_to_end(buf).await?;
    if got < len {
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
    }
    Ok(Some(wire::decode_body(buf, crc)?))
}

/// Frames read by a task of their own: (message, frame bytes) or the error
/// that ended the stream.
pub type Frames = tokio::sync::mpsc::Receiver<Result<(Msg, usize), NetError>>;

/// Reads frames from `rd` on a task of its own, handing them over a bounded
/// channel (backpressure reaches TCP). Waiting on the channel in a
/// `select!` is cancellation-safe; waiting on [`read_msg`] is not: a frame
/// half read when another branch wins would be lost and the stream
/// desynchronised. The task ends when the guard is dropped.
pub fn spawn_reader<R: AsyncRead + Unpin + Send + 'static>(mut rd: R, max: u32) -> (Frames, AbortOnDrop) {
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let task = tokio::spawn(async move {
        let mut buf = Vec::new();
        loop {
            let item = match read_msg(&mut rd, &mut buf, max).await {
                Ok(Some(m)) => Ok((m, buf.len() + wire::HEADER)),
                Ok(None) => Err(NetError::Closed),
                Err(e) => Err(e),
            };
            let end = item.is_err();
            if tx.send(item).await.is_err() || end {
                return;
            }
        }
    });
    (rx, AbortOnDrop(task))
}

/// Aborts a task when dropped.
#[derive(Debug)]
pub struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Splits `tcp://host:port`, `tls://host:port` or `host:port` into
/// (address, wants TLS, host name for the certificate).
pub fn parse_server(server: &str) -> Result<(String, bool, String), String> {
    let (tls, rest) = if let Some(r) = server.strip_prefix("tls://") {
        (true, r)
    } else if let Some(r) = server.strip_prefix("tcp://") {
        (false, r)
    } else if server.contains("://") {
        return Err(format!("{server:?}: use tcp://HOST:PORT, tls://HOST:PORT or HOST:PORT"));
    } else {
        (false, server)
    };
    let rest = rest.trim_end_matches('/');
    let Some((host, port)) = rest.rsplit_once(':') else {
        return Err(format!("{server:?}: no port; e.g. tls://collector.example:7071"));
    };
    if port.parse::<u16>().is_err() || host.is_empty() {
        return Err(format!("{server:?}: expected HOST:PORT"));
    }
    let name = host.trim_start_matches('[').trim_end_matches(']').to_owned();
    Ok((rest.to_owned(), tls, name))
}

/// Connects to the server, over TLS when the URL says tls:// or a client
/// configuration is given.
pub async fn connect(server: &str, tls: Option<Arc<rustls::ClientConfig>>) -> Result<Conn, NetError> {
    let (addr, wants_tls, name) = parse_server(server).map_err(NetError::Protocol)?;
    let tcp = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(&addr))
        .await
        .map_err(|_| NetError::Protocol(format!("connect {addr}: timed out after 5 s")))??;
    tcp.set_nodelay(true)?;
    match (tls, wants_tls) {
        (Some(cfg), _) => {
            let name = rustls::pki_types::ServerName::try_from(name.clone())
                .map_err(|e| NetError::Protocol(format!("{name:?} is not a server name: {e}")))?;
            let conn =
                tokio::time::timeout(Duration::from_secs(10), tokio_rustls::TlsConnector::from(cfg).connect(name, tcp))
                    .await
                    .map_err(|_| NetError::Protocol("TLS handshake timed out".into()))??;
            Ok(Box::new(conn))
        }
        (None, true) => Err(NetError::Protocol(format!("{server}: tls:// needs --ca (the server's CA certificate)"))),
        (None, false) => Ok(Box::new(tcp)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header claiming the largest frame, then a stall: the buffer holds
    /// what arrived, not what was claimed.
    #[tokio::test]
    async fn a_claimed_length_is_not_allocated_before_it_arrives() {
        let mut frame = Vec::new();
        Msg::Rounds { seq: 1, body: vec![7; 8 << 20] }.encode(&mut frame);
        let (mut tx, mut rx) = tokio::io::duplex(64 << 10);
        let sent = frame[..wire::HEADER + 1000].to_vec();
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            tx.write_all(&sent).await.unwrap();
            // The peer goes away mid-frame.
        });
        let mut buf = Vec::new();
        let err = read_msg(&mut rx, &mut buf, wire::FRAME_MAX).await.unwrap_err();
        assert!(err.to_string().contains("eof") || err.to_string().contains("end of file"), "{err}");
        assert!(buf.capacity() < 64 << 10, "{} bytes allocated for 1000 received", buf.capacity());
        // A whole frame still reads.
        let (mut tx, mut rx) = tokio::io::duplex(64 << 10);
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            tx.write_all(&frame).await.unwrap();
        });
        let mut buf = Vec::new();
        let Some(Msg::Rounds { seq: 1, body }) = read_msg(&mut rx, &mut buf, wire::FRAME_MAX).await.unwrap() else {
            panic!("not the frame sent")
        };
        assert_eq!(body.len(), 8 << 20);
    }

    #[test]
    fn server_urls_parse_or_explain() {
        assert_eq!(parse_server("127.0.0.1:7071").unwrap(), ("127.0.0.1:7071".into(), false, "127.0.0.1".into()));
        assert_eq!(parse_server("tls://srv.lan:7071/").unwrap(), ("srv.lan:7071".into(), true, "srv.lan".into()));
        assert_eq!(parse_server("tcp://[::1]:7071").unwrap(), ("[::1]:7071".into(), false, "::1".into()));
        assert!(parse_server("http://x:1").unwrap_err().contains("tls://"));
        assert!(parse_server("x").unwrap_err().contains("no port"));
        assert!(parse_server("x:99999").unwrap_err().contains("HOST:PORT"));
    }
}
