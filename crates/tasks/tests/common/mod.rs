//! Helpers of the tests on the real `/proc`: a shell under a name of its
//! own, a child killed when dropped, and a batch's value by series name and
//! labels.
#![allow(dead_code)]

/// A copy of the shell under a name of its own: its processes' comm.
pub fn busy_shell(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::copy("/bin/dash", &p).or_else(|_| std::fs::copy("/bin/sh", &p)).unwrap();
    p
}

/// The sum of the batch's points of series `name` with `labels`.
pub fn value(
    b: &model::Batch,
    ids: &std::collections::HashMap<u32, model::SeriesKey>,
    name: &str,
    labels: &[(&str, &str)],
) -> Option<f64> {
    b.points
        .iter()
        .filter(|(id, _)| {
            ids.get(id).is_some_and(|k| k.name() == name && labels.iter().all(|(l, v)| k.get(l) == Some(v)))
        })
        .map(|p| p.1)
        .reduce(|a, b| a + b)
}

/// Kills the child on drop: a failed assertion leaves nothing running.
pub struct Kill(pub std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Spawns `cmd`, to be killed when dropped.
pub fn spawn(cmd: &mut std::process::Command) -> Kill {
    Kill(cmd.spawn().unwrap())
}
