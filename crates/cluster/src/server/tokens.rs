//! Who may connect and what they may do: the tokens file (`TOKEN [HOST]`
//! writes and reads, `read TOKEN` reads only), checked in constant time, and
//! the rule that a file holding secrets is readable by its owner alone.

use std::collections::HashMap;
use std::path::Path;

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
