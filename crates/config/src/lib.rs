//! One configuration file for every command: `/etc/kansoku/kansoku.toml`, or
//! the file `--config FILE` (or `KANSOKU_CONFIG`) names. Its keys are the
//! flags' long names. A top-level key applies to every command that has the
//! flag; a table names a command (`[up]`, `[lab.store]`) and its keys apply
//! to that command and those beneath it, over the top-level ones. The
//! command line (and a flag's environment variable) wins over the file, the
//! file over the defaults. The layering is clap's own: a flag whose value did
//! not come from the command line (`ValueSource`) takes the file's value as
//! if it had been typed, so clap parses it with the flag's own parser and a
//! value means, and is checked, the same in both places. Every key and value
//! of the whole file is checked at every start: an unknown key or a refused
//! value is one line naming the file, the line and the key. Why not a serde
//! layer (figment and the like): it needs a serde twin of every flag, its
//! parser and its default, kept in step with clap's by hand; clap already
//! holds all three. The manual pages are generated from the same
//! definitions (`clap_mangen`).

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};
use toml::de::{DeTable, DeValue};

/// The file read when neither `--config` nor `KANSOKU_CONFIG` names one (if
/// it exists).
pub const DEFAULT_PATH: &str = "/etc/kansoku/kansoku.toml";

/// The id of the top-level command's global `--config FILE` flag.
pub const ARG: &str = "config";

/// What is wrong with a configuration file, where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub file: PathBuf,
    /// 1-based; none when the file as a whole is at fault (unreadable).
    pub line: Option<usize>,
    pub key: Option<String>,
    pub message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(key) = &self.key {
            write!(f, ": key '{key}'")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for Error {}

impl Error {
    fn unreadable(path: &Path, e: &std::io::Error) -> Error {
        Error { file: path.to_owned(), line: None, key: None, message: format!("cannot read it: {e}") }
    }
}

/// A value as the file writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    Text(String),
    Bool(bool),
    List(Vec<String>),
}

/// One `key = value` of the file.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The command path of the table it is in; empty: every command.
    pub scope: Vec<String>,
    pub key: String,
    /// 1-based line of the key.
    pub line: usize,
    value: Value,
}

/// A configuration file, read and checked against a command tree.
#[derive(Debug, Clone)]
pub struct File {
    pub path: PathBuf,
    pub entries: Vec<Entry>,
    /// Tables that name no command.
    tables: Vec<Error>,
}

impl File {
    /// Reads and checks `path` against `cmd`'s flags.
    pub fn read(path: &Path, cmd: &Command) -> Result<File, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::unreadable(path, &e))?;
        File::parse(path, &text, cmd)
    }

    /// Parses `text` (read from `path`) and checks every key and value.
    pub fn parse(path: &Path, text: &str, cmd: &Command) -> Result<File, Error> {
        let cmd = &built(cmd);
        let file = File::parse_unchecked(path, text, cmd)?;
        match file.problems(cmd).into_iter().min_by_key(|e| e.line) {
            Some(e) => Err(e),
            None => Ok(file),
        }
    }

    /// Every problem of the file at `path`: its syntax, or each key and
    /// value `cmd` refuses (`kansoku config check`).
    pub fn check(path: &Path, cmd: &Command) -> Result<File, Vec<Error>> {
        let cmd = &built(cmd);
        let text = std::fs::read_to_string(path).map_err(|e| vec![Error::unreadable(path, &e)])?;
        let file = File::parse_unchecked(path, &text, cmd).map_err(|e| vec![e])?;
        let mut problems = file.problems(cmd);
        problems.sort_by_key(|e| e.line);
        if problems.is_empty() { Ok(file) } else { Err(problems) }
    }

    /// The entries of `text`, tables resolved to commands; keys unchecked.
    fn parse_unchecked(path: &Path, text: &str, cmd: &Command) -> Result<File, Error> {
        let err = |span: Option<std::ops::Range<usize>>, key: Option<String>, message: String| Error {
            file: path.to_owned(),
            line: span.map(|s| line_of(text, s.start)),
            key,
            message,
        };
        let root = DeTable::parse(text).map_err(|e| err(e.span(), None, e.message().trim().replace('\n', " ")))?;
        let (mut entries, mut tables) = (Vec::new(), Vec::new());
        let mut stack = vec![(Vec::<String>::new(), cmd, root.get_ref())];
        while let Some((scope, at, table)) = stack.pop() {
            for (k, v) in table.iter() {
                let key = k.get_ref().to_string();
                let span = Some(k.span());
                let value = match v.get_ref() {
                    DeValue::Table(t) => {
                        let mut path = scope.clone();
                        path.push(key.clone());
                        let Some(sub) = at.find_subcommand(&key) else {
                            let message =
                                format!("[{}]: there is no command `kansoku {}`", path.join("."), path.join(" "));
                            tables.push(err(span, None, message));
                            continue;
                        };
                        stack.push((path, sub, t));
                        continue;
                    }
                    DeValue::Array(items) => {
                        let mut list = Vec::new();
                        for item in items.iter() {
                            match scalar(item.get_ref()) {
                                Some(Value::Text(s)) => list.push(s),
                                Some(Value::Bool(b)) => list.push(b.to_string()),
                                _ => {
                                    return Err(err(
                                        Some(item.span()),
                                        Some(key),
                                        "a list holds strings or numbers only".into(),
                                    ));
                                }
                            }
                        }
                        Value::List(list)
                    }
                    other => scalar(other).expect("tables and arrays are handled above"),
                };
                entries.push(Entry { scope: scope.clone(), key, line: line_of(text, k.span().start), value });
            }
        }
        entries.sort_by_key(|e| e.line);
        tables.sort_by_key(|e| e.line);
        Ok(File { path: path.to_owned(), entries, tables })
    }

    /// Every key no command under its table has, and every value its flag
    /// refuses (for each command that has the flag).
    pub fn problems(&self, cmd: &Command) -> Vec<Error> {
        let cmd = &built(cmd);
        let mut out = self.tables.clone();
        for e in &self.entries {
            let err = |message: String| Error {
                file: self.path.clone(),
                line: Some(e.line),
                key: Some(e.key.clone()),
                message,
            };
            if e.key == ARG {
                out.push(err("names the configuration file: give it on the command line".into()));
                continue;
            }
            let Some(scope_cmd) = descend(cmd, &e.scope) else { continue };
            let mut targets = Vec::new();
            commands_under(scope_cmd, &mut targets);
            let mut found = false;
            for c in targets {
                let Some(arg) = flag(c, &e.key) else { continue };
                found = true;
                if let Err(m) = accepts(c, arg, &e.value) {
                    out.push(err(format!("`kansoku {}`: {m}", path_of(cmd, c).join(" "))));
                    break;
                }
            }
            if !found {
                let message = if e.scope.is_empty() {
                    format!("unknown key: no command has a flag --{}", e.key)
                } else if scope_cmd.has_subcommands() {
                    format!("unknown key: no `kansoku {} …` command has a flag --{}", e.scope.join(" "), e.key)
                } else {
                    format!("unknown key: `kansoku {}` has no flag --{}", e.scope.join(" "), e.key)
                };
                out.push(err(message));
            }
        }
        out
    }
}

/// The command line with the file's values layered under it.
#[derive(Debug, Clone, Default)]
pub struct Layered {
    /// The arguments to parse, the file's values in them as flags.
    pub argv: Vec<OsString>,
    /// The file read, if any.
    pub file: Option<PathBuf>,
    /// Each flag's id the file set, with the key's line.
    pub from_file: BTreeMap<String, usize>,
}

/// Which file to read: the one `--config` or `KANSOKU_CONFIG` names (it
/// must exist), else [`DEFAULT_PATH`] if it exists, else none.
fn chosen(m: &ArgMatches) -> Option<PathBuf> {
    match m.try_get_one::<PathBuf>(ARG) {
        Ok(Some(p)) => Some(p.clone()),
        _ => Path::new(DEFAULT_PATH).exists().then(|| PathBuf::from(DEFAULT_PATH)),
    }
}

/// The names of the command `argv` runs (`["lab", "store"]`) and the
/// configuration file it would read; none if clap cannot parse `argv` even
/// leniently (`--help`, an unknown command).
pub fn command_of(cmd: &Command, argv: &[OsString]) -> Option<(Vec<String>, Option<PathBuf>)> {
    let pre = cmd.clone().ignore_errors(true).try_get_matches_from(argv).ok()?;
    let mut names = Vec::new();
    let mut m = &pre;
    while let Some((name, sub)) = m.subcommand() {
        names.push(name.to_owned());
        m = sub;
    }
    Some((names, chosen(&pre)))
}

/// Layers the configuration file under `argv` for the command `argv` runs.
/// `cmd` is the whole command tree, with a global `--config` flag whose id is
/// [`ARG`]. Arguments clap cannot parse even leniently (`--help`, an unknown
/// command) are returned as they are, for clap to answer.
pub fn layer(cmd: &Command, argv: Vec<OsString>) -> Result<Layered, Error> {
    let Ok(pre) = cmd.clone().ignore_errors(true).try_get_matches_from(&argv) else {
        return Ok(Layered { argv, ..Layered::default() });
    };
    let Some(path) = chosen(&pre) else {
        return Ok(Layered { argv, ..Layered::default() });
    };
    let file = File::read(&path, cmd)?;
    Ok(file.layer(&built(cmd), argv, &pre))
}

impl File {
    fn layer(&self, cmd: &Command, mut argv: Vec<OsString>, pre: &ArgMatches) -> Layered {
        let mut names = Vec::new();
        let (mut c, mut m) = (cmd, pre);
        while let Some((name, sub)) = m.subcommand() {
            names.push(name.to_owned());
            c = c.find_subcommand(name).expect("clap matched this subcommand");
            m = sub;
        }
        let mut layered = Layered { file: Some(self.path.clone()), ..Layered::default() };
        // The most specific table's value of each key: scopes are prefixes
        // of the command's path, the longer wins.
        let mut chosen: BTreeMap<&str, &Entry> = BTreeMap::new();
        for e in self.entries.iter().filter(|e| names.starts_with(&e.scope)) {
            if chosen.get(e.key.as_str()).is_none_or(|old| old.scope.len() <= e.scope.len()) {
                chosen.insert(&e.key, e);
            }
        }
        let mut entries: Vec<&Entry> = chosen.into_values().collect();
        entries.sort_by_key(|e| e.line);
        let given = |id: &str| matches!(m.value_source(id), Some(ValueSource::CommandLine | ValueSource::EnvVariable));
        let mut inserted = Vec::new();
        for e in entries {
            let Some(arg) = flag(c, &e.key) else { continue };
            let id = arg.get_id().as_str();
            if given(id) || c.get_arg_conflicts_with(arg).iter().any(|a| given(a.get_id().as_str())) {
                continue;
            }
            // Checked when the file was read.
            let Ok(t) = tokens(arg, &e.value) else { continue };
            inserted.extend(t);
            layered.from_file.insert(id.to_owned(), e.line);
        }
        let at = after_command(&argv, &names);
        argv.splice(at..at, inserted);
        layered.argv = argv;
        layered
    }
}

/// The index just after the last subcommand's name in `argv`: where the
/// file's flags go, so that what follows (flags, `--`, trailing commands)
/// keeps its meaning. Before a subcommand's name only `--config FILE` and
/// other options of the parents can stand.
fn after_command(argv: &[OsString], names: &[String]) -> usize {
    let mut i = 1;
    for name in names {
        while i < argv.len() && argv[i] != OsStr::new(name) {
            // The value of `--config FILE` may be any word.
            i += if argv[i] == OsStr::new("--config") { 2 } else { 1 };
        }
        i += 1;
    }
    i.min(argv.len())
}

/// `cmd` built: each command then lists the global flags as its own.
fn built(cmd: &Command) -> Command {
    let mut cmd = cmd.clone();
    cmd.build();
    cmd
}

/// `cmd`'s flag whose long name is `key`.
fn flag<'a>(cmd: &'a Command, key: &str) -> Option<&'a Arg> {
    cmd.get_arguments().find(|a| a.get_long() == Some(key))
}

fn descend<'a>(cmd: &'a Command, path: &[String]) -> Option<&'a Command> {
    path.iter().try_fold(cmd, |c, name| c.find_subcommand(name))
}

/// `cmd` and every command beneath it.
fn commands_under<'a>(cmd: &'a Command, out: &mut Vec<&'a Command>) {
    out.push(cmd);
    for sub in cmd.get_subcommands() {
        commands_under(sub, out);
    }
}

/// The names from `root` down to `target` (which is beneath it).
fn path_of(root: &Command, target: &Command) -> Vec<String> {
    fn find(at: &Command, target: &Command, path: &mut Vec<String>) -> bool {
        if std::ptr::eq(at, target) {
            return true;
        }
        for sub in at.get_subcommands() {
            path.push(sub.get_name().to_owned());
            if find(sub, target, path) {
                return true;
            }
            path.pop();
        }
        false
    }
    let mut path = Vec::new();
    find(root, target, &mut path);
    path
}

fn scalar(v: &DeValue<'_>) -> Option<Value> {
    Some(match v {
        DeValue::String(s) => Value::Text(s.to_string()),
        DeValue::Integer(i) => Value::Text(
            i128::from_str_radix(i.as_str(), i.radix())
                .map(|n| n.to_string())
                .unwrap_or_else(|_| i.as_str().to_owned()),
        ),
        DeValue::Float(f) => Value::Text(f.as_str().replace('_', "")),
        DeValue::Boolean(b) => Value::Bool(*b),
        DeValue::Datetime(d) => Value::Text(d.to_string()),
        DeValue::Array(_) | DeValue::Table(_) => return None,
    })
}

/// The command-line words that say what `value` says for `arg`.
fn tokens(arg: &Arg, value: &Value) -> Result<Vec<OsString>, String> {
    let long = format!("--{}", arg.get_long().expect("flags are found by their long name"));
    let one = |s: &str| OsString::from(format!("{long}={s}"));
    match (arg.get_action(), value) {
        (ArgAction::SetTrue, Value::Bool(b)) => Ok(if *b { vec![long.into()] } else { vec![] }),
        (ArgAction::SetFalse, Value::Bool(b)) => Ok(if *b { vec![] } else { vec![long.into()] }),
        (ArgAction::SetTrue | ArgAction::SetFalse, _) => Err("is a switch: write true or false, without quotes".into()),
        (ArgAction::Count, Value::Text(n)) => match n.parse::<u8>() {
            Ok(n) => Ok(vec![OsString::from(&long); n as usize]),
            Err(_) => Err(format!("counts: write a number from 0 to 255, not {n:?}")),
        },
        (ArgAction::Count, _) => Err("counts: write a number from 0 to 255".into()),
        (ArgAction::Set | ArgAction::Append, Value::Text(s)) => Ok(vec![one(s)]),
        (ArgAction::Set | ArgAction::Append, Value::Bool(b)) => Ok(vec![one(&b.to_string())]),
        (ArgAction::Append, Value::List(items)) => Ok(items.iter().map(|s| one(s)).collect()),
        (ArgAction::Set, Value::List(items)) => match arg.get_value_delimiter() {
            Some(d) => Ok(vec![one(&items.join(&d.to_string()))]),
            None => Err("takes one value, not a list".into()),
        },
        _ => Err("is not a setting".into()),
    }
}

/// Whether `arg` takes `value`: the words it stands for, parsed by `cmd`
/// alone (so by the flag's own parser, delimiter and possible values).
/// Only what is wrong with the value counts here: a flag another requires,
/// or one that conflicts, may be settled by the rest of the command line.
fn accepts(cmd: &Command, arg: &Arg, value: &Value) -> Result<(), String> {
    use clap::error::ErrorKind;
    let words = tokens(arg, value)?;
    let alone = cmd.clone().mut_args(|a| a.required(false)).subcommand_required(false).arg_required_else_help(false);
    match alone.try_get_matches_from(std::iter::once(OsString::from(cmd.get_name())).chain(words)) {
        Err(e) if matches!(e.kind(), ErrorKind::InvalidValue | ErrorKind::ValueValidation | ErrorKind::InvalidUtf8) => {
            Err(one_line(&e))
        }
        _ => Ok(()),
    }
}

/// clap's message without its `error: ` and its advice to try --help.
fn one_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default();
    first.strip_prefix("error: ").unwrap_or(first).to_owned()
}

fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1
}

/// The effective configuration of the command `layered.argv` runs, as a
/// TOML file with where each value came from: every flag, unset ones
/// commented out, so it also lists what can be set.
pub fn show(cmd: &Command, layered: &Layered) -> Result<String, clap::Error> {
    let cmd = &built(cmd);
    let top = cmd.clone().try_get_matches_from(&layered.argv)?;
    let (mut c, mut m) = (cmd, &top);
    let mut names = Vec::new();
    while let Some((name, sub)) = m.subcommand() {
        names.push(name.to_owned());
        c = c.find_subcommand(name).expect("clap matched this subcommand");
        m = sub;
    }
    let mut rows = Vec::new();
    for arg in c.get_arguments() {
        let (Some(long), id) = (arg.get_long(), arg.get_id().as_str()) else { continue };
        if arg.is_hide_set() || id == ARG || matches!(arg.get_action(), ArgAction::Help | ArgAction::Version) {
            continue;
        }
        let origin = match m.value_source(id) {
            Some(ValueSource::CommandLine) => match (layered.from_file.get(id), &layered.file) {
                (Some(line), Some(file)) => format!("{}:{line}", file.display()),
                _ => "command line".to_owned(),
            },
            Some(ValueSource::EnvVariable) => "environment".to_owned(),
            Some(ValueSource::DefaultValue) => "default".to_owned(),
            _ => "unset".to_owned(),
        };
        let raw: Vec<String> =
            m.get_raw(id).map(|v| v.map(|s| s.to_string_lossy().into_owned()).collect()).unwrap_or_default();
        let text = match arg.get_action() {
            ArgAction::SetTrue | ArgAction::SetFalse => raw.first().cloned().unwrap_or_else(|| "false".into()),
            ArgAction::Count => m.get_count(id).to_string(),
            ArgAction::Append => format!("[{}]", raw.iter().map(|s| quote(s)).collect::<Vec<_>>().join(", ")),
            _ => raw.first().map(|s| quote(s)).unwrap_or_default(),
        };
        let line = if origin == "unset" { format!("# {long} =") } else { format!("{long} = {text}") };
        rows.push((line, origin));
    }
    let width = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
    let mut out = format!("# the effective configuration of `kansoku {}`\n[{}]\n", names.join(" "), names.join("."));
    for (line, origin) in rows {
        out.push_str(&format!("{line:width$}  # {origin}\n"));
    }
    Ok(out)
}

/// Parses the process's command line into `P` with the configuration file
/// layered under it. The command `own` (`config`: check and show the file)
/// is parsed as typed. On a mistake, says it on stderr (one line for the
/// file's) and returns the exit code.
pub fn parse<P: clap::Parser>(own: &str) -> Result<P, std::process::ExitCode> {
    let cmd = P::command();
    let argv: Vec<OsString> = std::env::args_os().collect();
    let own = command_of(&cmd, &argv).is_some_and(|(names, _)| names.first().is_some_and(|n| n == own));
    let layered = if own {
        Layered { argv, ..Layered::default() }
    } else {
        layer(&cmd, argv).map_err(|e| {
            eprintln!("{}: {e}", cmd.get_name());
            std::process::ExitCode::from(2)
        })?
    };
    let parsed = P::try_parse_from(&layered.argv);
    if parsed.is_ok() {
        let _ = STARTED.set((cmd, layered.clone()));
    }
    parsed.map_err(|e| {
        let _ = e.print();
        if let (Some(file), false, true) = (&layered.file, layered.from_file.is_empty(), e.use_stderr()) {
            let keys: Vec<&str> = layered.from_file.keys().map(String::as_str).collect();
            eprintln!("(with {} from {})", keys.join(", "), file.display());
        }
        std::process::ExitCode::from(e.exit_code().clamp(0, 255) as u8)
    })
}

/// `kansoku config …`: the file checked, a command's effective
/// configuration shown, or the manual pages written.
#[derive(clap::Subcommand, Debug)]
pub enum ConfigCmd {
    /// Check every key and value of the file without starting anything:
    /// each problem on a line of its own (file:line: key: why), exit 1.
    Check,
    /// The effective configuration of a command: every flag, its value and
    /// where it came from (command line, file:line, default), as TOML.
    /// Example: `kansoku config show up --interval 10ms`.
    Show {
        /// The command and its flags, as you would run it.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "COMMAND")]
        command: Vec<OsString>,
    },
    /// Write a manual page for every command (`kansoku.1`, `kansoku-up.1`,
    /// …), generated from these same definitions (the package's man pages).
    #[command(hide = true)]
    Man {
        /// The directory to write them in (created if missing).
        dir: PathBuf,
    },
}

impl ConfigCmd {
    /// Runs it for the command tree `cmd`, with the file `path` (else the
    /// default one).
    pub fn run(self, cmd: &Command, path: Option<PathBuf>) -> std::process::ExitCode {
        use std::io::Write;
        match self {
            ConfigCmd::Check => check_command(cmd, path),
            ConfigCmd::Show { command } => match show_command(cmd, path, command) {
                Ok(shown) if std::io::stdout().write_all(shown.as_bytes()).is_ok() => std::process::ExitCode::SUCCESS,
                Ok(_) => std::process::ExitCode::FAILURE,
                Err(e) => {
                    eprintln!("{}: {e}", cmd.get_name());
                    std::process::ExitCode::FAILURE
                }
            },
            ConfigCmd::Man { dir } => {
                match std::fs::create_dir_all(&dir).and_then(|()| clap_mangen::generate_to(cmd.clone(), &dir)) {
                    Ok(()) => std::process::ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("{}: cannot write the manual pages in {}: {e}", cmd.get_name(), dir.display());
                        std::process::ExitCode::FAILURE
                    }
                }
            }
        }
    }
}

/// The command tree and the command line this process started with
/// ([`parse`]), for [`changed_since_start`].
static STARTED: std::sync::OnceLock<(Command, Layered)> = std::sync::OnceLock::new();

/// The flags (long names) whose values the configuration file gives
/// differently now from what this process started with: on `SIGHUP`, what
/// needs a restart to take effect. Empty if the process did not start
/// through [`parse`].
pub fn changed_since_start() -> Result<Vec<String>, Error> {
    let Some((cmd, started)) = STARTED.get() else { return Ok(Vec::new()) };
    let now = layer(cmd, std::env::args_os().collect())?;
    let cmd = built(cmd);
    let values = |argv: &[OsString]| -> Vec<(String, Vec<OsString>)> {
        let Ok(top) = cmd.clone().try_get_matches_from(argv) else { return Vec::new() };
        let (mut c, mut m) = (&cmd, &top);
        while let Some((name, sub)) = m.subcommand() {
            let Some(next) = c.find_subcommand(name) else { break };
            c = next;
            m = sub;
        }
        c.get_arguments()
            .filter_map(|a| {
                let long = a.get_long()?;
                let raw = m.get_raw(a.get_id().as_str()).map(|v| v.map(OsStr::to_owned).collect()).unwrap_or_default();
                Some((long.to_owned(), raw))
            })
            .collect()
    };
    let (before, after) = (values(&started.argv), values(&now.argv));
    Ok(after.into_iter().filter(|kv| !before.contains(kv)).map(|(k, _)| k).collect())
}

/// `config check`: every problem of the file (`path`, else the default
/// one), one a line on stderr; exit 1 if any or if there is no file.
pub fn check_command(cmd: &Command, path: Option<PathBuf>) -> std::process::ExitCode {
    let Some(path) = path.or_else(|| Some(PathBuf::from(DEFAULT_PATH)).filter(|p| p.exists())) else {
        eprintln!("{}: no configuration file: {DEFAULT_PATH} does not exist and --config names none", cmd.get_name());
        return std::process::ExitCode::FAILURE;
    };
    match File::check(&path, cmd) {
        Ok(file) => {
            eprintln!("{}: ok ({} keys)", path.display(), file.entries.len());
            std::process::ExitCode::SUCCESS
        }
        Err(problems) => {
            for p in problems {
                eprintln!("{p}");
            }
            std::process::ExitCode::FAILURE
        }
    }
}

/// `config show COMMAND…`: [`show`] of `kansoku COMMAND…` with the file
/// `path` (else the default one) layered under it.
pub fn show_command(cmd: &Command, path: Option<PathBuf>, command: Vec<OsString>) -> Result<String, String> {
    let mut argv = vec![OsString::from(cmd.get_name())];
    if let Some(path) = path {
        argv.extend(["--config".into(), path.into_os_string()]);
    }
    argv.extend(command);
    let layered = layer(cmd, argv).map_err(|e| e.to_string())?;
    show(cmd, &layered).map_err(|e| one_line(&e))
}

/// A TOML basic string.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests;
