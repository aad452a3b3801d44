//! The stop every long-running command waits for (Ctrl-C or SIGTERM), what
//! the service manager is told: ready once serving, a watchdog ping while
//! the runtime schedules, stopping once a stop began (systemd's
//! `Type=notify`, `WatchdogSec=`; nothing when not run by systemd), and
//! SIGHUP: the tokens file read again, and what else changed named as
//! needing a restart.

use std::sync::Arc;
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

/// On each SIGHUP: reads the tokens file again (the new set in use at once;
/// on a mistake the old set kept, saying why), and names the settings the
/// configuration file now gives differently from what this process runs
/// with: they take effect at the next restart. Without this a SIGHUP would
/// end the process. Spawn it on the runtime that serves.
pub async fn on_hangup(tokens: Option<Arc<access::TokenFile>>) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("SIGHUP: cannot listen for it ({e}); a SIGHUP would stop this process");
            return;
        }
    };
    while hup.recv().await.is_some() {
        if let Some(file) = &tokens {
            let path = file.path().map(|p| p.display().to_string()).unwrap_or_default();
            match file.reload() {
                Ok(n) => tracing::info!("SIGHUP: {n} tokens in use, read again from {path}"),
                Err(e) => tracing::warn!("SIGHUP: tokens kept as they were ({} in use): {e:#}", file.get().len()),
            }
        }
        match config::changed_since_start() {
            Ok(changed) if changed.is_empty() => {
                tracing::info!("SIGHUP: no other setting changed (rules and SNMP targets files are read at start)")
            }
            Ok(changed) => tracing::warn!(
                "SIGHUP: --{} changed in the configuration file: restart to apply (this process keeps what it started with)",
                changed.join(", --")
            ),
            Err(e) => tracing::warn!("SIGHUP: the configuration file: {e}; this process keeps what it started with"),
        }
    }
}
