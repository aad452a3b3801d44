//! The stop every long-running command waits for (Ctrl-C or SIGTERM), and
//! what the service manager is told: ready once serving, a watchdog ping
//! while the runtime schedules, stopping once a stop began (systemd's
//! `Type=notify`, `WatchdogSec=`; nothing when not run by systemd).

use std::time::Duration;

/// Resolves on the first SIGINT or SIGTERM, and tells systemd it is
/// stopping.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
}

/// Tells systemd the service is ready and, under `WatchdogSec=`, pings it
/// at half the period from a task of the calling tokio runtime: a runtime
/// that stops scheduling (a deadlock, a stall) stops the pings and systemd
/// restarts the service. Call it from within the runtime that serves.
pub fn ready() {
    if let Err(e) = sd_notify::notify(&[sd_notify::NotifyState::Ready]) {
        tracing::warn!("could not tell systemd we are ready: {e}");
    }
    if let Some(period) = sd_notify::watchdog_enabled() {
        let every = (period / 2).max(Duration::from_millis(100));
        tracing::info!("systemd watchdog: a ping every {every:?}");
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
            }
        });
    }
}
