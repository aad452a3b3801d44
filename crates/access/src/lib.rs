//! Who may connect and what they may do, for the HTTP API and the agents'
//! ingest alike: the tokens file (`TOKEN [HOST]` writes and reads, `read
//! TOKEN` reads only), checked in constant time; a caller's identity for
//! per-writer limits ([`Caller`]: the host its token is bound to, or a hash
//! of the token, never the secret); and the rule that a file holding
//! secrets is readable by its owner alone. No I/O beyond reading those
//! files; the HTTP middleware (`api::auth`) and the ingest's handshake
//! (`ingest`) call it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// Bearer tokens, one per line (`#` comments):
/// - `TOKEN [HOST]`: writes (agents, `/write`) and reads; with a host, it may
///   only send as that host;
/// - `read TOKEN`: reads only (queries, the dashboard, `/metrics`).
///
/// With tokens, every endpoint but `/ping` needs one.
#[derive(Debug, Default)]
pub struct Tokens {
    by_token: HashMap<String, Access>,
}

/// What a token may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// Read everything; write nothing.
    Read,
    /// Read everything; write as this host, or any host (`None`).
    Write(Option<String>),
}

/// Who made a request (with tokens): what its token may do, and which
/// writer it is — the host a token is bound to, or the token itself (as a
/// hash: never a secret in a log or an error) — for per-writer limits.
#[derive(Debug, Clone)]
pub struct Caller {
    pub access: Access,
    pub writer: String,
}

impl Caller {
    pub fn new(token: &str, access: Access) -> Caller {
        let writer = match &access {
            Access::Write(Some(host)) => format!("host {host}"),
            _ => {
                use std::hash::{Hash, Hasher};
                let mut h = std::collections::hash_map::DefaultHasher::new();
                token.hash(&mut h);
                format!("token #{:016x}", h.finish())
            }
        };
        Caller { access, writer }
    }
}

impl Tokens {
    /// Reads a tokens file, refusing one that others may read: a token is a
    /// password (`chmod 600` it).
    pub fn load(path: &Path) -> anyhow::Result<Tokens> {
        check_private(path, "tokens file")?;
        let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("tokens file {}: {e}", path.display()))?;
        Tokens::parse(&text).map_err(|e| anyhow::anyhow!("tokens file {}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Tokens, String> {
        let mut by_token = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            let (token, access) = match words[..] {
                ["read", token] => (token, Access::Read),
                [token] => (token, Access::Write(None)),
                [token, host] => (token, Access::Write(Some(host.to_owned()))),
                _ => return Err(format!("line {}: expected TOKEN [HOST], or read TOKEN", n + 1)),
            };
            if token.len() < 16 {
                return Err(format!("line {}: token shorter than 16 characters", n + 1));
            }
            by_token.insert(token.to_owned(), access);
        }
        if by_token.is_empty() {
            return Err("no tokens (expected TOKEN [HOST], or read TOKEN, per line)".into());
        }
        Ok(Tokens { by_token })
    }

    /// How many tokens there are.
    pub fn len(&self) -> usize {
        self.by_token.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_token.is_empty()
    }

    /// What a known token may do; Err for an unknown one.
    pub fn access(&self, token: &str) -> Result<&Access, &'static str> {
        // Every token is compared, in constant time each, so the time taken
        // tells nothing of which (or whether one) matched.
        let mut found = None;
        for (t, a) in &self.by_token {
            if constant_time_eq(t.as_bytes(), token.as_bytes()) {
                found = Some(a);
            }
        }
        found.ok_or("unknown token")
    }

    /// The host a writing token is bound to: Ok(None) for a token valid for
    /// any host, Err for an unknown or read-only one.
    pub fn host_of(&self, token: &str) -> Result<Option<&str>, &'static str> {
        match self.access(token)? {
            Access::Read => Err("a read-only token cannot write"),
            Access::Write(h) => Ok(h.as_deref()),
        }
    }

    /// Ok when `token` may send as `host`.
    pub fn check(&self, token: &str, host: &str) -> Result<(), &'static str> {
        match self.host_of(token)? {
            Some(h) if h != host => Err("token not valid for this host"),
            _ => Ok(()),
        }
    }
}

/// The tokens in use, from their file, swapped whole when it is read again
/// (`SIGHUP`): a request or a handshake sees the old set or the new one,
/// never a mix. A file that fails to read keeps the set in use.
#[derive(Debug)]
pub struct TokenFile {
    path: Option<PathBuf>,
    current: RwLock<Arc<Tokens>>,
}

impl TokenFile {
    /// Reads `path` ([`Tokens::load`]).
    pub fn load(path: &Path) -> anyhow::Result<TokenFile> {
        Ok(TokenFile { path: Some(path.to_owned()), current: RwLock::new(Arc::new(Tokens::load(path)?)) })
    }

    /// A set with no file behind it (tests): reloading keeps it.
    pub fn fixed(tokens: Tokens) -> TokenFile {
        TokenFile { path: None, current: RwLock::new(Arc::new(tokens)) }
    }

    /// The set in use now.
    pub fn get(&self) -> Arc<Tokens> {
        Arc::clone(&self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Reads the file again; on success the new set is in use and its size
    /// is returned; on failure the old set stays in use.
    pub fn reload(&self) -> anyhow::Result<usize> {
        let Some(path) = &self.path else { return Ok(self.get().len()) };
        let tokens = Tokens::load(path)?;
        let n = tokens.len();
        *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(tokens);
        Ok(n)
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }
}

/// Refuses a secret file (tokens, a token, a private key) that users other
/// than its owner may read or write.
pub fn check_private(path: &Path, what: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| anyhow::anyhow!("{what} {}: {e}", path.display()))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        anyhow::bail!(
            "{what} {} is open to other users (mode {mode:04o}): it holds secrets; run `chmod 600 {}`",
            path.display(),
            path.display()
        );
    }
    Ok(())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: &str = "0123456789abcdef-write";
    const H: &str = "0123456789abcdef-hostbound";
    const R: &str = "0123456789abcdef-read";

    fn tokens() -> Tokens {
        Tokens::parse(&format!("# comment\n{W}\n{H} web1  # bound\nread {R}\n\n")).unwrap()
    }

    #[test]
    fn each_kind_of_token_may_do_what_its_line_says() {
        let t = tokens();
        assert_eq!(t.access(W), Ok(&Access::Write(None)));
        assert_eq!(t.access(R), Ok(&Access::Read));
        assert_eq!(t.access("0123456789abcdef-nope"), Err("unknown token"));
        assert_eq!(t.check(W, "any"), Ok(()));
        assert_eq!(t.check(H, "web1"), Ok(()));
        assert_eq!(t.check(H, "web2"), Err("token not valid for this host"));
        assert_eq!(t.check(R, "web1"), Err("a read-only token cannot write"));
    }

    #[test]
    fn a_bad_tokens_file_names_its_line() {
        assert_eq!(Tokens::parse("short").unwrap_err(), "line 1: token shorter than 16 characters");
        assert_eq!(Tokens::parse(&format!("{W}\na b c")).unwrap_err(), "line 2: expected TOKEN [HOST], or read TOKEN");
        assert!(Tokens::parse("# only a comment\n").unwrap_err().starts_with("no tokens"));
    }

    /// A writer is its bound host, or a hash of its token: never the token.
    #[test]
    fn a_caller_never_carries_the_secret() {
        assert_eq!(Caller::new(H, Access::Write(Some("web1".into()))).writer, "host web1");
        let c = Caller::new(W, Access::Write(None));
        assert!(c.writer.starts_with("token #") && !c.writer.contains(W), "{}", c.writer);
        assert_eq!(c.writer, Caller::new(W, Access::Read).writer, "the same token is the same writer");
    }

    #[test]
    fn a_secret_file_others_may_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tokens");
        std::fs::write(&f, format!("{W}\n")).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Tokens::load(&f).unwrap_err().to_string();
        assert!(e.contains("open to other users (mode 0644)") && e.contains("chmod 600"), "{e}");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(Tokens::load(&f).is_ok());
    }
}
