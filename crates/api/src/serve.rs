//! The HTTP listener: the router behind hyper's HTTP/1 with the bounds
//! `axum::serve` does not set. At most `max_connections` connections are
//! served at once (a further one waits in the kernel's backlog until one
//! closes, costing no descriptor of ours); a client that does not finish a
//! request's headers within `header_read_timeout` — a half-open socket, a
//! slowloris, an idle keep-alive — is closed, so connections cannot pile up
//! until the process runs out of descriptors. On shutdown, open connections
//! finish their request and close.

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
}

impl Default for ServeLimits {
    fn default() -> ServeLimits {
        ServeLimits { max_connections: 512, header_read_timeout: Duration::from_secs(10) }
    }
}

/// Connection counters (`/api/v1/status` → `http`).
#[derive(Debug, Default)]
pub struct ServeStats {
    pub connections: AtomicU64,
    pub open: AtomicU64,
    /// Accepts that failed (most often: out of descriptors).
    pub accept_errors: AtomicU64,
}

/// Serves `router` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ServeLimits,
    stats: Arc<ServeStats>,
    shutdown: impl Future<Output = ()>,
) {
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
