//! Where the database lives: a SQLite file or a Postgres URL.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// The environment variable holding a database URL (the usual sqlx and libpq name).
pub const DATABASE_URL_ENV_VAR: &str = "DATABASE_URL";
/// The environment variable naming memdedup's home directory (default database, models).
pub const MEMDEDUP_HOME_ENV_VAR: &str = "MEMDEDUP_HOME";

/// A database location.
#[derive(Clone, PartialEq, Eq)]
pub enum DbLocation {
    /// A SQLite database file (created if missing, with its parent directory).
    Sqlite(PathBuf),
    /// A Postgres connection URL (`postgres://…` or `postgresql://…`).
    Postgres(String),
}

impl DbLocation {
    /// Parses a `--db` value: a `postgres://` / `postgresql://` URL, a `sqlite:` URL
    /// (`sqlite:PATH` or `sqlite://PATH`), or else a file path.
    pub fn parse(value: &str) -> Result<DbLocation> {
        let invalid = |reason: &str| Error::InvalidLocation { location: value.to_owned(), reason: reason.to_owned() };
        if value.trim().is_empty() {
            return Err(invalid("empty"));
        }
        if value.starts_with("postgres://") || value.starts_with("postgresql://") {
            return Ok(DbLocation::Postgres(value.to_owned()));
        }
        if let Some(rest) = value.strip_prefix("sqlite:") {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            let path = path.split('?').next().unwrap_or_default();
            if path.is_empty() || path == ":memory:" {
                return Err(invalid("a SQLite location must name a file"));
            }
            return Ok(DbLocation::Sqlite(PathBuf::from(path)));
        }
        if let Some((scheme, _)) = value.split_once("://") {
            return Err(invalid(&format!(
                "unsupported scheme `{scheme}://` (use a file path, sqlite:PATH or postgres://…)"
            )));
        }
        Ok(DbLocation::Sqlite(PathBuf::from(value)))
    }

    /// Resolves the location: `explicit` (a `--db` flag) > `DATABASE_URL` >
    /// `configured` (the config file) > `$MEMDEDUP_HOME/memdedup.db` > the platform data
    /// directory (`~/.local/share/memdedup/memdedup.db` on Linux). Empty values count as
    /// unset.
    pub fn resolve(explicit: Option<&str>, configured: Option<&str>) -> Result<DbLocation> {
        let env = std::env::var(DATABASE_URL_ENV_VAR).ok();
        let chosen = [explicit, env.as_deref(), configured].into_iter().flatten().find(|v| !v.trim().is_empty());
        if let Some(value) = chosen {
            return DbLocation::parse(value);
        }
        DbLocation::default_sqlite()
    }

    /// The default SQLite file: `$MEMDEDUP_HOME/memdedup.db`, else the platform data
    /// directory.
    pub fn default_sqlite() -> Result<DbLocation> {
        if let Some(home) = std::env::var_os(MEMDEDUP_HOME_ENV_VAR).filter(|v| !v.is_empty()) {
            return Ok(DbLocation::Sqlite(Path::new(&home).join("memdedup.db")));
        }
        match dirs::data_dir() {
            Some(dir) => Ok(DbLocation::Sqlite(dir.join("memdedup").join("memdedup.db"))),
            None => Err(Error::InvalidLocation {
                location: String::new(),
                reason: "no data directory is known for this user; pass --db or set MEMDEDUP_HOME".to_owned(),
            }),
        }
    }

    /// "sqlite" or "postgres".
    pub fn backend(&self) -> &'static str {
        match self {
            DbLocation::Sqlite(_) => "sqlite",
            DbLocation::Postgres(_) => "postgres",
        }
    }

    /// The location for messages and reports, with any password replaced by `***`.
    pub fn redacted(&self) -> String {
        match self {
            DbLocation::Sqlite(path) => path.display().to_string(),
            DbLocation::Postgres(url) => redact_url(url),
        }
    }
}

impl fmt::Debug for DbLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DbLocation({})", self.redacted())
    }
}

impl fmt::Display for DbLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// Replaces the password of `scheme://user:password@host/…` with `***`.
fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_paths_and_urls() {
        assert_eq!(DbLocation::parse("mem.db").unwrap(), DbLocation::Sqlite("mem.db".into()));
        assert_eq!(DbLocation::parse("sqlite:///tmp/a.db").unwrap(), DbLocation::Sqlite("/tmp/a.db".into()));
        assert_eq!(DbLocation::parse("sqlite:a.db?mode=rwc").unwrap(), DbLocation::Sqlite("a.db".into()));
        assert_eq!(
            DbLocation::parse("postgres://u@localhost/db").unwrap(),
            DbLocation::Postgres("postgres://u@localhost/db".into())
        );
        assert!(DbLocation::parse("mysql://x").unwrap_err().to_string().contains("unsupported scheme `mysql://`"));
        assert!(DbLocation::parse("  ").is_err());
        assert!(DbLocation::parse("sqlite::memory:").is_err());
    }

    #[test]
    fn passwords_are_redacted() {
        let loc = DbLocation::parse("postgresql://app:s3cret@db.example:5432/mem?sslmode=disable").unwrap();
        assert_eq!(loc.redacted(), "postgresql://app:***@db.example:5432/mem?sslmode=disable");
        assert!(!format!("{loc:?}").contains("s3cret"));
        assert_eq!(redact_url("postgres://app@h/db"), "postgres://app@h/db");
    }
}
