//! Where a lab's output goes: its results to stdout, its progress to
//! stderr, so `kansoku lab store > result.txt` keeps the results while the
//! terminal still shows the work. Results are tables of measured figures,
//! ratios, summaries, the final verdict and the paths of the files a lab
//! wrote; they are written here, with [`result!`]. Progress is what a lab
//! is doing while it works ("building …", "running …", warm-ups, per-step
//! status) and warnings; it is written with `eprintln!` where it happens.

/// Writes one line of results to stdout. Results go to stdout, progress to
/// stderr: use [`result!`] for the former, `eprintln!` for the latter.
#[allow(clippy::print_stdout, reason = "the one place the lab writes its results: stdout")]
pub(crate) fn line(args: std::fmt::Arguments<'_>) {
    println!("{args}");
}

/// `result!("{x} ms")`: one line of results on stdout, formatted as
/// `println!` formats (no arguments: an empty line). Results go to stdout,
/// progress to stderr (`eprintln!`).
macro_rules! result {
    () => {
        $crate::out::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::out::line(format_args!($($arg)*))
    };
}

pub(crate) use result;
