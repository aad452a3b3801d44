//! A configuration file is outside bytes (an operator's, or a package's):
//! any text is either refused with an error that names the file and, past
//! the syntax, a line within it, or read into entries whose values clap
//! accepts, so layering them under a command line always parses.
#![no_main]
use std::ffi::OsString;
use std::path::Path;

use clap::{Arg, ArgAction, Command, value_parser};
use libfuzzer_sys::fuzz_target;

fn cli() -> Command {
    let data = || Arg::new("data").long("data").default_value("kansoku-data");
    Command::new("kansoku")
        .arg(Arg::new(config::ARG).long("config").global(true).value_parser(value_parser!(std::path::PathBuf)))
        .subcommand(
            Command::new("up")
                .arg(data())
                .arg(Arg::new("interval").long("interval").value_parser(value_parser!(u64).range(1..)))
                .arg(Arg::new("perf-callchain").long("perf-callchain").action(ArgAction::SetTrue))
                .arg(Arg::new("peer").long("peer").action(ArgAction::Append))
                .arg(Arg::new("verbose").long("verbose").action(ArgAction::Count))
                .arg(Arg::new("trace").long("trace").value_parser(["on", "off"]))
                .arg(Arg::new("cpus").long("cpus").value_delimiter(',')),
        )
        .subcommand(Command::new("series").arg(data().conflicts_with("server")).arg(Arg::new("server").long("server")))
        .subcommand(Command::new("lab").subcommand(Command::new("store").arg(data()).arg(Arg::new("span").long("span"))))
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let path = Path::new("/fuzz.toml");
    let cmd = cli();
    match config::File::parse(path, text, &cmd) {
        Err(e) => {
            assert_eq!(e.file, path);
            assert!(e.line.is_some_and(|l| l >= 1 && l <= text.lines().count().max(1) + 1), "{e}");
        }
        Ok(_) => {
            let dir = std::env::temp_dir().join(format!("kansoku-fuzz-config-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let file = dir.join("k.toml");
            std::fs::write(&file, text).unwrap();
            for words in [&["up"][..], &["series"], &["lab", "store"]] {
                let argv: Vec<OsString> = ["kansoku", "--config", file.to_str().unwrap()]
                    .iter()
                    .chain(words)
                    .map(OsString::from)
                    .collect();
                let layered = config::layer(&cmd, argv).expect("a file parse accepted layers");
                if let Err(e) = cmd.clone().try_get_matches_from(&layered.argv) {
                    // Only the file's own flags against each other may clash.
                    assert!(
                        matches!(e.kind(), clap::error::ErrorKind::ArgumentConflict),
                        "{words:?} {:?}: {e}",
                        layered.argv
                    );
                }
                config::show(&cmd, &layered).ok();
            }
        }
    }
});
