//! The configuration file through the real binary: `up` runs with the
//! file's values, typed flags win, `config check` lists every problem and
//! `config show` says where each value came from; a bad file stops a command
//! before it starts, with one line naming the file, line and key.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{BIN, http_get};

fn kansoku(args: &[&str]) -> Output {
    Command::new(BIN).args(args).env_remove("KANSOKU_CONFIG").output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn up_runs_with_the_file_s_values() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("from-file");
    let conf = dir.path().join("kansoku.toml");
    std::fs::write(
        &conf,
        format!(
            "# every command\ndata = {data:?}\n\n[up]\nlisten = \"127.0.0.1:0\"\ninterval = \"250ms\"\nhost = \"from-file\"\ntrace = \"off\"\n"
        ),
    )
    .unwrap();
    // The file named by the environment, as a unit file would set it.
    let up = common::listening(
        Command::new(BIN)
            .args(["up", "--host", "typed"])
            .env("KANSOKU_CONFIG", &conf)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let addr = up.addr.clone();
    // The file's listen (port 0: any), not the default 7070.
    assert!(!addr.ends_with(":7070"), "{addr}");
    let (code, body) = http_get(&addr, "/api/v1/status");
    assert_eq!(code, 200, "{body}");
    assert!(
        data.join("wal").exists() || data.read_dir().unwrap().next().is_some(),
        "the file's data directory is used"
    );
    drop(up);

    // The same, as `config show` sees it: the typed --host wins.
    let out = Command::new(BIN)
        .args(["config", "show", "up", "--host", "typed"])
        .env("KANSOKU_CONFIG", &conf)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    let row = |key: &str| {
        shown
            .lines()
            .find(|l| l.starts_with(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("{key}: {shown}"))
            .to_owned()
    };
    let file = conf.display();
    assert!(row("host").starts_with("host = \"typed\"") && row("host").ends_with("# command line"), "{shown}");
    assert!(
        row("interval").starts_with("interval = \"250ms\"") && row("interval").ends_with(&format!("# {file}:6")),
        "{shown}"
    );
    assert!(row("data").ends_with(&format!("# {file}:2")), "{shown}");
    assert!(row("retention-size").ends_with("# default"), "{shown}");
}

#[test]
fn a_bad_file_stops_the_command_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("kansoku.toml");
    let conf_s = conf.to_str().unwrap();
    std::fs::write(&conf, "[up]\ninterval = \"10 parsecs\"\n").unwrap();
    let out = kansoku(&["--config", conf_s, "up", "--data", dir.path().join("d").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!("kansoku: {conf_s}:2: key 'interval': `kansoku up`: invalid value '10 parsecs'")),
        "{err}"
    );
    assert!(!dir.path().join("d").exists(), "nothing started");

    // `config check`: every problem, in the file's order; exit 1.
    std::fs::write(&conf, "lisen = \"x\"\n[up]\nperf = \"fast\"\n[agent]\nspool-size = \"a lot\"\n[uo]\n").unwrap();
    let out = kansoku(&["config", "check", "--config", conf_s]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 4, "{err}");
    assert!(lines[0].starts_with(&format!("{conf_s}:1: key 'lisen': unknown key")), "{err}");
    assert!(lines[1].starts_with(&format!("{conf_s}:3: key 'perf': `kansoku up`: invalid value 'fast'")), "{err}");
    assert!(lines[2].starts_with(&format!("{conf_s}:5: key 'spool-size'")), "{err}");
    assert!(lines[3].starts_with(&format!("{conf_s}:6: [uo]: there is no command")), "{err}");

    std::fs::write(&conf, "data = \"/var/lib/kansoku\"\n[server]\ningest = \"127.0.0.1:7071\"\n").unwrap();
    let out = kansoku(&["config", "check", "--config", conf_s]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr).trim(), format!("{conf_s}: ok (2 keys)"));
}

#[test]
fn read_commands_take_the_data_directory_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("kansoku.toml");
    let missing = dir.path().join("no-such-data");
    std::fs::write(&conf, format!("data = {missing:?}\n")).unwrap();
    let out = kansoku(&["--config", conf.to_str().unwrap(), "series"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains(&*missing.to_string_lossy()), "{}", text(&out.stderr));
    // A typed --server stands the file's conflicting --data aside.
    let out = kansoku(&["--config", conf.to_str().unwrap(), "series", "--server", "http://127.0.0.1:9"]);
    let err = text(&out.stderr);
    assert!(!err.contains("cannot be used with"), "{err}");
    assert!(!err.contains("no-such-data"), "{err}");
    // /dev/null: no file at all.
    let out = kansoku(&["--config", "/dev/null", "config", "show", "series"]);
    assert!(text(&out.stdout).contains("data = \"kansoku-data\""), "{}", text(&out.stdout));
    assert!(Path::new("/dev/null").exists());
}
