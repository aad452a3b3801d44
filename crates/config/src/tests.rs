//! The configuration file against a small command tree shaped as kansoku's:
//! layering, precedence, every kind of mistake, `check` and `show`.

use super::*;
use clap::{Arg, ArgAction, Command, value_parser};

/// A command tree shaped as kansoku's: a global --config, flags shared by
/// several commands, a switch, a list, a conflict, nested commands.
fn cli() -> Command {
    let data = || Arg::new("data").long("data").default_value("kansoku-data");
    Command::new("kansoku")
        .arg(Arg::new(ARG).long("config").global(true).value_parser(value_parser!(PathBuf)))
        .arg(Arg::new("log").long("log").global(true).default_value("info"))
        .subcommand(
            Command::new("up")
                .arg(data())
                .arg(
                    Arg::new("interval")
                        .long("interval")
                        .default_value("100")
                        .value_parser(value_parser!(u64).range(1..)),
                )
                .arg(Arg::new("perf_callchain").long("perf-callchain").action(ArgAction::SetTrue))
                .arg(Arg::new("peer").long("peer").action(ArgAction::Append))
                .arg(Arg::new("trace").long("trace").value_parser(["on", "off"]).default_value("on"))
                .arg(Arg::new("cpus").long("cpus").value_delimiter(','))
                .arg(Arg::new("token").long("token").env("KANSOKU_TEST_TOKEN_NEVER_SET")),
        )
        .subcommand(
            Command::new("series")
                .arg(data().conflicts_with("server"))
                .arg(Arg::new("server").long("server"))
                .arg(Arg::new("selector")),
        )
        .subcommand(
            Command::new("lab")
                .subcommand_required(true)
                .subcommand(Command::new("store").arg(data()).arg(Arg::new("span").long("span")))
                .subcommand(
                    Command::new("run")
                        .arg(Arg::new("command").num_args(0..).trailing_var_arg(true).allow_hyphen_values(true)),
                ),
        )
}

fn parse(text: &str) -> Result<File, Error> {
    File::parse(Path::new("/etc/kansoku/kansoku.toml"), text, &cli())
}

fn argv(words: &[&str]) -> Vec<OsString> {
    std::iter::once("kansoku").chain(words.iter().copied()).map(OsString::from).collect()
}

/// The matches of the leaf command `words` runs, with `text` layered under.
fn run(text: &str, words: &[&str]) -> (ArgMatches, Layered) {
    let cmd = built(&cli());
    let file = parse(text).expect("a good file");
    let args = argv(words);
    let pre = cmd.clone().ignore_errors(true).try_get_matches_from(&args).unwrap();
    let layered = file.layer(&cmd, args, &pre);
    let mut m = cmd.try_get_matches_from(&layered.argv).unwrap_or_else(|e| panic!("{e}"));
    while let Some((_, sub)) = m.subcommand() {
        m = sub.clone();
    }
    (m, layered)
}

fn one<'a>(m: &'a ArgMatches, id: &str) -> &'a str {
    m.get_raw(id).and_then(|mut v| v.next()).and_then(|s| s.to_str()).unwrap()
}

#[test]
fn a_top_level_key_reaches_every_command_that_has_the_flag() {
    let text = "data = \"/var/lib/kansoku\"\n";
    for words in [&["up"][..], &["series"], &["lab", "store"]] {
        let (m, layered) = run(text, words);
        assert_eq!(one(&m, "data"), "/var/lib/kansoku", "{words:?}");
        assert_eq!(layered.from_file.get("data"), Some(&1));
    }
    // A command without the flag is untouched.
    let (m, _) = run(text, &["lab", "run", "echo", "--data", "x"]);
    let words: Vec<&str> = m.get_many::<String>("command").unwrap().map(String::as_str).collect();
    assert_eq!(words, ["echo", "--data", "x"]);
}

#[test]
fn a_command_s_table_wins_over_the_top_level_and_the_command_line_over_both() {
    let text = "data = \"/top\"\n[up]\ndata = \"/up\"\ninterval = 10\n[lab]\ndata = \"/lab\"\n";
    let (m, _) = run(text, &["up"]);
    assert_eq!(one(&m, "data"), "/up");
    assert_eq!(*m.get_one::<u64>("interval").unwrap(), 10);
    let (m, layered) = run(text, &["up", "--interval", "5", "--data=/cli"]);
    assert_eq!(one(&m, "data"), "/cli");
    assert_eq!(*m.get_one::<u64>("interval").unwrap(), 5);
    assert!(layered.from_file.is_empty());
    let (m, _) = run(text, &["lab", "store"]);
    assert_eq!(one(&m, "data"), "/lab");
    let (m, _) = run(text, &["series"]);
    assert_eq!(one(&m, "data"), "/top");
}

#[test]
fn switches_lists_and_delimited_values_mean_what_they_mean_on_the_command_line() {
    let text = "[up]\nperf-callchain = true\npeer = [\"pcp\", \"netdata\"]\ncpus = [0, 1, 0x2]\n";
    let (m, _) = run(text, &["up"]);
    assert!(m.get_flag("perf_callchain"));
    let peers: Vec<&String> = m.get_many("peer").unwrap().collect();
    assert_eq!(peers, ["pcp", "netdata"]);
    let cpus: Vec<&String> = m.get_many("cpus").unwrap().collect();
    assert_eq!(cpus, ["0", "1", "2"]);
    // A list on the command line replaces the file's, never adds to it.
    let (m, _) = run(text, &["up", "--peer", "ab"]);
    let peers: Vec<&String> = m.get_many("peer").unwrap().collect();
    assert_eq!(peers, ["ab"]);
    let (m, _) = run("[up]\nperf-callchain = false\n", &["up"]);
    assert!(!m.get_flag("perf_callchain"));
}

#[test]
fn a_file_value_that_conflicts_with_a_typed_flag_stands_aside() {
    let (m, layered) = run("data = \"/var/lib/kansoku\"\n", &["series", "--server", "http://127.0.0.1:7070"]);
    assert_eq!(one(&m, "server"), "http://127.0.0.1:7070");
    assert_eq!(m.value_source("data"), Some(ValueSource::DefaultValue));
    assert!(layered.from_file.is_empty());
}

#[test]
fn the_file_s_flags_go_before_trailing_words_and_after_the_command() {
    let text = "[lab.run]\n";
    let (m, _) = run(text, &["lab", "run", "--", "up"]);
    let words: Vec<&str> = m.get_many::<String>("command").unwrap().map(String::as_str).collect();
    assert_eq!(words, ["up"]);
    // `--config up` before the command: the value is not the command.
    let args = argv(&["--config", "up", "up", "--", "x"]);
    assert_eq!(after_command(&args, &["up".into()]), 4);
    let args = argv(&["lab", "store", "--span", "1h"]);
    assert_eq!(after_command(&args, &["lab".into(), "store".into()]), 3);
    let (m, layered) = run("[lab.store]\nspan = \"2h\"\n", &["lab", "store", "--data", "/d"]);
    assert_eq!(one(&m, "span"), "2h");
    assert_eq!(layered.argv, argv(&["lab", "store", "--span=2h", "--data", "/d"]));
}

#[test]
fn every_mistake_names_the_file_the_line_and_the_key() {
    let cases: &[(&str, usize, Option<&str>, &str)] = &[
        ("data = \"/x\"\nlisten = 1\n", 2, Some("listen"), "unknown key: no command has a flag --listen"),
        ("[up]\n\nspan = \"1h\"\n", 3, Some("span"), "unknown key: `kansoku up` has no flag --span"),
        ("[lab]\nintervl = 3\n", 2, Some("intervl"), "unknown key: no `kansoku lab …` command has a flag --intervl"),
        ("[up]\ninterval = 0\n", 2, Some("interval"), "`kansoku up`: invalid value '0' for '--interval"),
        ("[up]\ntrace = \"maybe\"\n", 2, Some("trace"), "invalid value 'maybe' for '--trace"),
        ("[up]\nperf-callchain = \"yes\"\n", 2, Some("perf-callchain"), "is a switch: write true or false"),
        ("[up]\ndata = [\"a\", \"b\"]\n", 2, Some("data"), "takes one value, not a list"),
        ("[up]\npeer = [[\"a\"]]\n", 2, Some("peer"), "a list holds strings or numbers only"),
        ("config = \"/x\"\n", 1, Some("config"), "give it on the command line"),
        ("\n[down]\ndata = \"/x\"\n", 2, None, "[down]: there is no command `kansoku down`"),
        ("[lab.nothing]\n", 1, None, "there is no command `kansoku lab nothing`"),
        ("[up]\ndata = \"/a\"\ndata = \"/b\"\n", 3, None, "duplicate key"),
        ("[up]\ninterval = \n", 2, None, ""),
    ];
    for (text, line, key, message) in cases {
        let e = parse(text).expect_err(text);
        assert_eq!(e.file, Path::new("/etc/kansoku/kansoku.toml"), "{text}");
        assert_eq!(e.line, Some(*line), "{text}: {e}");
        assert_eq!(e.key.as_deref(), *key, "{text}: {e}");
        assert!(e.message.contains(message), "{text}: {e}");
        assert!(!e.to_string().contains('\n'), "one line: {e}");
    }
    let e = parse("[up]\ninterval = 0\n").unwrap_err();
    assert!(
        e.to_string().starts_with("/etc/kansoku/kansoku.toml:2: key 'interval': `kansoku up`: invalid value '0'"),
        "{e}"
    );
}

#[test]
fn a_named_file_must_exist_and_an_absent_default_is_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.toml");
    let e = layer(&cli(), argv(&["--config", missing.to_str().unwrap(), "up"])).unwrap_err();
    assert_eq!(e.file, missing);
    assert!(e.message.starts_with("cannot read it: "), "{e}");
    let good = dir.path().join("k.toml");
    std::fs::write(&good, "[up]\ninterval = 7\n").unwrap();
    // --config after the command, as clap's global flags allow.
    let layered = layer(&cli(), argv(&["up", "--config", good.to_str().unwrap()])).unwrap();
    assert_eq!(layered.file.as_deref(), Some(good.as_path()));
    assert_eq!(layered.from_file.get("interval"), Some(&2));
    // --help and unknown commands are clap's to answer: left as they are.
    let args = argv(&["--config", good.to_str().unwrap(), "--help"]);
    assert_eq!(layer(&cli(), args.clone()).unwrap().argv, args);
}

#[test]
fn show_prints_every_flag_with_where_its_value_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.toml");
    std::fs::write(&path, "data = \"/var/lib/k\"\n[up]\npeer = [\"a\", \"b\\\"c\"]\n").unwrap();
    let cmd = cli();
    let layered = layer(&cmd, argv(&["--config", path.to_str().unwrap(), "up", "--interval", "5"])).unwrap();
    let shown = show(&cmd, &layered).unwrap();
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines[0], "# the effective configuration of `kansoku up`");
    assert_eq!(lines[1], "[up]");
    let row = |key: &str| *lines.iter().find(|l| l.starts_with(key)).unwrap_or_else(|| panic!("{key} in {shown}"));
    let file = path.display();
    assert!(row("data = \"/var/lib/k\"").ends_with(&format!("# {file}:1")), "{shown}");
    assert!(row("interval = \"5\"").ends_with("# command line"), "{shown}");
    assert!(row("perf-callchain = false").ends_with("# default"), "{shown}");
    assert!(row("peer = [\"a\", \"b\\\"c\"]").ends_with(&format!("# {file}:3")), "{shown}");
    assert!(row("trace = \"on\"").ends_with("# default"), "{shown}");
    assert!(row("# token =").ends_with("# unset"), "{shown}");
    // What it prints reads back as the same configuration.
    let again = dir.path().join("again.toml");
    std::fs::write(&again, &shown).unwrap();
    let back = layer(&cmd, argv(&["--config", again.to_str().unwrap(), "up"])).unwrap();
    let shown_again = show(&cmd, &back).unwrap();
    let values = |s: &str| s.lines().map(|l| l.split("  #").next().unwrap().trim_end().to_owned()).collect::<Vec<_>>();
    assert_eq!(values(&shown), values(&shown_again));
}

#[test]
fn check_lists_every_problem_in_the_order_of_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.toml");
    std::fs::write(&path, "listn = 1\n[up]\ninterval = 0\n[sever]\ndata = \"/x\"\n[up.more]\n").unwrap();
    let problems = File::check(&path, &cli()).unwrap_err();
    let lines: Vec<(Option<usize>, Option<&str>)> = problems.iter().map(|e| (e.line, e.key.as_deref())).collect();
    assert_eq!(lines, [(Some(1), Some("listn")), (Some(3), Some("interval")), (Some(4), None), (Some(6), None)]);
    std::fs::write(&path, "[up]\ninterval = 3\n").unwrap();
    assert_eq!(File::check(&path, &cli()).unwrap().entries.len(), 1);
    let e = File::check(&dir.path().join("none"), &cli()).unwrap_err();
    assert!(e[0].message.starts_with("cannot read it"), "{e:?}");
}

#[test]
fn a_global_flag_is_a_key_of_every_command() {
    let (m, layered) = run("log = \"debug\"\n[lab.store]\nlog = \"trace\"\n", &["up"]);
    assert_eq!(one(&m, "log"), "debug");
    assert_eq!(layered.from_file.get("log"), Some(&1));
    let (m, _) = run("log = \"debug\"\n[lab.store]\nlog = \"trace\"\n", &["lab", "store"]);
    assert_eq!(one(&m, "log"), "trace");
    let (m, _) = run("log = \"debug\"\n", &["up", "--log", "warn"]);
    assert_eq!(one(&m, "log"), "warn");
}
