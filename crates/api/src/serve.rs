//! The HTTP listener: the router behind hyper's HTTP/1 with the bounds
//! `axum::serve` does not set. At most `max_connections` connections are
//! served at once (a further one waits in the kernel's backlog until one
//! closes, costing no descriptor of ours); a client that does not finish a
//! request's headers within `header_read_timeout` — a half-open socket, a
//! slowloris, an idle keep-alive — is closed, so connections cannot pile up
//! until the process runs out of descriptors. A request body must keep
//! coming too: one that sends nothing for `body_idle_timeout`, or is not
//! complete within `body_timeout`, ends in an error and its connection is
//! closed (512 bodies trickling a byte every 15 s held every slot). On
//! shutdown, open connections finish their request and close.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

#[derive(Debug, Clone, Copy)]
pub struct ServeLimits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    /// Longest a request body may send nothing.
    pub body_idle_timeout: Duration,
    /// Longest a request body may take in all.
    pub body_timeout: Duration,
}

impl Default for ServeLimits {
    fn default() -> ServeLimits {
        ServeLimits {
            max_connections: 512,
            header_read_timeout: Duration::from_secs(10),
            body_idle_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(120),
        }
    }
}

/// A request body that fails once it sends nothing for `idle`, or runs
/// past `deadline`.
struct TimedBody {
    inner: axum::body::Body,
    idle: Duration,
    deadline: tokio::time::Instant,
    timer: std::pin::Pin<Box<tokio::time::Sleep>>,
    stats: Arc<ServeStats>,
}

/// The error a body that timed out ends with ([`is_body_timeout`]).
#[derive(Debug)]
struct BodyTimeout(Duration);

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the request body stopped coming (nothing for {:?}, or past its time)", self.0)
    }
}

impl std::error::Error for BodyTimeout {}

/// Whether reading a body failed because it timed out.
fn is_body_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(e) = cur {
        if e.is::<BodyTimeout>() {
            return true;
        }
        cur = e.source();
    }
    false
}

impl http_body::Body for TimedBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        use std::task::Poll;
        match std::pin::Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                let next = (tokio::time::Instant::now() + self.idle).min(self.deadline);
                self.timer.as_mut().reset(next);
                Poll::Ready(frame)
            }
            Poll::Pending => match self.timer.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    self.stats.body_timeouts.fetch_add(1, Relaxed);
                    Poll::Ready(Some(Err(axum::Error::new(BodyTimeout(self.idle)))))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Reads a request body of at most `max` bytes: the status and message to
/// answer when it is larger (413) or stopped coming (408).
pub async fn read_body(
    body: axum::body::Body,
    max: usize,
) -> Result<axum::body::Bytes, (axum::http::StatusCode, String)> {
    use axum::http::StatusCode;
    axum::body::to_bytes(body, max).await.map_err(|e| {
        use std::error::Error;
        if e.source().is_some_and(is_body_timeout) {
            (StatusCode::REQUEST_TIMEOUT, e.source().map(ToString::to_string).unwrap_or_default())
        } else {
            (StatusCode::PAYLOAD_TOO_LARGE, format!("request body over {max} bytes"))
        }
    })
}

/// Wraps every request's body in a [`TimedBody`].
async fn timed_body(
    axum::extract::State((limits, stats)): axum::extract::State<(ServeLimits, Arc<ServeStats>)>,
    req: axum::extract::Request,
) -> axum::extract::Request {
    use http_body::Body;
    // Nothing to wait for (a GET): no timer.
    if req.body().is_end_stream() {
        return req;
    }
    let now = tokio::time::Instant::now();
    let deadline = now + limits.body_timeout;
    req.map(|inner| {
        axum::body::Body::new(TimedBody {
            inner,
            idle: limits.body_idle_timeout,
            deadline,
            timer: Box::pin(tokio::time::sleep_until((now + limits.body_idle_timeout).min(deadline))),
            stats,
        })
    })
}

/// Connection counters (`/api/v1/status` → `http`).
#[derive(Debug, Default)]
pub struct ServeStats {
    pub connections: AtomicU64,
    pub open: AtomicU64,
    /// Accepts that failed (most often: out of descriptors).
    pub accept_errors: AtomicU64,
    /// Request bodies that stopped coming and were cut off.
    pub body_timeouts: AtomicU64,
}

/// Serves `router` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ServeLimits,
    stats: Arc<ServeStats>,
    shutdown: impl Future<Output = ()>,
) {
    let router = router.layer(axum::middleware::map_request_with_state((limits, Arc::clone(&stats)), timed_body));
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let (closing_tx, closing_rx) = watch::channel(false);
    // Query columns kept for the next query are let go once queries stop.
    let trimmer = tokio::spawn(async {
        let mut tick = tokio::time::interval(store::query::pool::POOL_IDLE);
        loop {
            tick.tick().await;
            store::query::pool::trim();
        }
    });
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => slot.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // EMFILE and friends: the socket stays in the backlog;
                    // pausing lets connections close instead of spinning.
                    if stats.accept_errors.fetch_add(1, Relaxed).is_multiple_of(1000) {
                        tracing::warn!("http: accept failed: {e} (counted in http.accept_errors)");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        stats.connections.fetch_add(1, Relaxed);
        stats.open.fetch_add(1, Relaxed);
        let service = TowerToHyperService::new(router.clone());
        let mut closing = closing_rx.clone();
        let stats = Arc::clone(&stats);
        tokio::spawn(async move {
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
            let conn = http.serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                () = closed(&mut closing) => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
            stats.open.fetch_sub(1, Relaxed);
            drop(slot);
        });
    }
    trimmer.abort();
    closing_tx.send_replace(true);
    // Connections finish their request; a few seconds at most.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(Duration::from_secs(5), slots.acquire_many(all)).await;
}

/// Returns once the shutdown flag is set (or its sender is gone).
async fn closed(rx: &mut watch::Receiver<bool>) {
    while !*rx.borrow_and_update() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}
