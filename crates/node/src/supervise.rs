//! No thread dies unseen. A process-wide panic hook ([`install`]) records
//! every panic — of a producer, a writer, a tokio task, a blocking query —
//! by thread name with its message and place, logs it, and counts it; the
//! threads `kansoku` starts by name ([`spawn`]) are also known alive or
//! dead. [`report`] is the `threads` section of `/api/v1/status` and
//! `/metrics` (`kansoku_threads_panics_total{thread="trace-writer"}`), which
//! the dashboard's health badge and the verdict read. Writers that store
//! one batch at a time go on after a batch whose append panicked
//! ([`catch`]): that batch is counted lost, the next is stored.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use model::report::Figure;

/// One thread name's record.
#[derive(Debug, Clone, Default)]
pub struct ThreadRecord {
    /// Panics on threads of this name.
    pub panics: u64,
    /// The last panic's message and place.
    pub last: Option<String>,
    /// Started by [`spawn`] and running now.
    pub running: u64,
    /// Started by [`spawn`] and ended by a panic.
    pub died: u64,
}

#[derive(Debug, Default)]
struct Registry {
    panics: AtomicU64,
    threads: Mutex<BTreeMap<String, ThreadRecord>>,
}

fn registry() -> &'static Registry {
    static R: std::sync::OnceLock<Registry> = std::sync::OnceLock::new();
    R.get_or_init(Registry::default)
}

fn with_record<T>(name: &str, f: impl FnOnce(&mut ThreadRecord) -> T) -> T {
    let mut threads = registry().threads.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    f(threads.entry(name.to_owned()).or_default())
}

/// The calling thread's name, as the records key it.
fn current_name() -> String {
    std::thread::current().name().unwrap_or("unnamed").to_owned()
}

/// Installs the panic hook (once; later calls do nothing): each panic is
/// recorded against its thread's name, logged with its message and place,
/// then handed to the hook that was there before (the default one prints
/// it to stderr).
pub fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let name = current_name();
            let what = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            let place = info.location().map_or_else(String::new, |l| format!(" at {}:{}", l.file(), l.line()));
            record_panic(&name, format!("{what}{place}"));
            previous(info);
        }));
    });
}

fn record_panic(name: &str, message: String) {
    registry().panics.fetch_add(1, Relaxed);
    tracing::error!("thread {name} panicked: {message} (counted: /api/v1/status threads)");
    with_record(name, |r| {
        r.panics += 1;
        r.last = Some(message);
    });
}

/// Starts `f` on a thread named `name`, known to the records: running
/// until it returns, dead if it panics (the panic itself is recorded by
/// the hook, and the join handle still reports it).
pub fn spawn<T: Send + 'static>(
    name: impl Into<String>,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<T>> {
    let name = name.into();
    with_record(&name, |r| r.running += 1);
    let key = name.clone();
    std::thread::Builder::new().name(name).spawn(move || {
        // Marks the thread ended on return and on unwinding alike.
        struct Alive(String);
        impl Drop for Alive {
            fn drop(&mut self) {
                let died = std::thread::panicking();
                with_record(&self.0, |r| {
                    r.running = r.running.saturating_sub(1);
                    r.died += u64::from(died);
                });
            }
        }
        let _alive = Alive(key);
        f()
    })
}

/// Runs one unit of a loop's work (a writer's append of one batch),
/// turning a panic into `None` so the loop goes on with the next; the
/// panic was recorded and logged by the hook.
pub fn catch<T>(f: impl FnOnce() -> T) -> Option<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).ok()
}

/// Every thread name with a panic or a [`spawn`], and its record.
pub fn threads() -> BTreeMap<String, ThreadRecord> {
    registry().threads.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
}

/// Panics since start, on any thread.
pub fn panics() -> u64 {
    registry().panics.load(Relaxed)
}

/// Names of threads that panicked, leaked once each for the figures'
/// labels (a process has a bounded set of thread names).
fn label(name: &str) -> &'static str {
    static LABELS: Mutex<BTreeMap<String, &'static str>> = Mutex::new(BTreeMap::new());
    let mut labels = LABELS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    labels.entry(name.to_owned()).or_insert_with(|| Box::leak(name.to_owned().into_boxed_str()))
}

/// The `threads` section: panics in all and by thread, threads running,
/// threads dead.
pub fn report() -> Vec<Figure> {
    let threads = threads();
    let mut out = vec![
        Figure::counter("panics", panics()),
        Figure::gauge("running", threads.values().map(|r| r.running).sum()),
        Figure::gauge("died", threads.values().map(|r| r.died).sum()),
        // Log lines a flood from one place held back (each counted, none silently).
        Figure::counter("log_lines_held_back", logs::held_back()),
    ];
    out.extend(
        threads
            .iter()
            .filter(|(_, r)| r.panics > 0)
            .map(|(name, r)| Figure::counter("panics", r.panics).with_label("thread", label(name))),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A panic on a thread started here is recorded with its name, message
    /// and place, counted in the report, and the thread is known dead; a
    /// caught one lets the caller go on.
    #[test]
    fn a_panicking_thread_is_recorded_counted_and_known_dead() {
        install();
        let before = panics();
        let t = spawn("test-doomed", || {
            let v: Vec<u8> = Vec::new();
            #[allow(clippy::indexing_slicing)]
            let _ = v[usize::from(v.is_empty())];
        })
        .unwrap();
        assert!(t.join().is_err(), "the join still reports the panic");
        assert_eq!(panics(), before + 1);
        let r = &threads()["test-doomed"];
        assert_eq!((r.panics, r.running, r.died), (1, 0, 1));
        assert!(r.last.as_deref().unwrap().contains("index out of bounds"), "{r:?}");
        assert!(r.last.as_deref().unwrap().contains("supervise.rs"), "{r:?}");
        let fig = report();
        assert!(fig.iter().any(|f| f.json_key() == "panics_test-doomed" && f.as_f64() == 1.0), "{fig:?}");
        // A unit of work that panics is skipped, the loop goes on.
        let ok = spawn("test-survivor", || (0..3).filter_map(|i| catch(|| assert_ne!(i, 1))).count()).unwrap();
        assert_eq!(ok.join().unwrap(), 2);
        let r = &threads()["test-survivor"];
        assert_eq!((r.panics, r.running, r.died), (1, 0, 0));
    }
}
