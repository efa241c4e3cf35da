//! `/etc/lite/lite.conf`: what an operator sets once per node for `lite-admin join`,
//! `leave` and `manager`, so that the systemd units and a shell run them the same way.
//! The command line wins over the file, the file over the built-in defaults.
//!
//! The format is the part of systemd's `EnvironmentFile=` syntax that this parser
//! reads the same way, so the units can load the file too: `KEY=value` lines, blank
//! lines and `#` or `;` comment lines, a value optionally quoted as a whole with `"`
//! or `'`. What systemd would read differently (backslash escapes, inner quotes,
//! unquoted spaces, a comment after a value) is refused here rather than guessed.
//! An empty value leaves the key unset.

use crate::membership::DEFAULT_PORT;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Where the file is unless `--config` or `LITE_CONFIG` says otherwise.
pub const DEFAULT_PATH: &str = "/etc/lite/lite.conf";

/// Every key, in the order `dist/lite.conf` explains them.
pub const KEYS: [&str; 7] = [
    "LITE_MANAGER",
    "LITE_NODE_ID",
    "LITE_AGENT_PIDFILE",
    "LITE_LISTEN",
    "LITE_HEARTBEAT_MS",
    "LITE_DEAD_AFTER_MS",
    "LITE_MANAGER_PIDFILE",
];

/// The settings the file gives; `None` where it gives none.
#[derive(Debug, Default, PartialEq)]
pub struct Config {
    /// The file these came from (or would have), for messages that send the
    /// operator to it.
    pub path: PathBuf,
    pub manager: Option<String>,
    pub node_id: Option<u32>,
    pub agent_pidfile: Option<PathBuf>,
    pub listen: Option<SocketAddr>,
    pub heartbeat_ms: Option<u64>,
    pub dead_after_ms: Option<u64>,
    pub manager_pidfile: Option<PathBuf>,
}

/// A file that cannot be read or does not parse: which file, which line, and why.
#[derive(Debug, PartialEq)]
pub struct Error {
    path: PathBuf,
    line: Option<usize>,
    message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.path.display(), self.message),
            None => write!(f, "{}: {}", self.path.display(), self.message),
        }
    }
}

/// Reads the file `explicit` names (`--config` or `LITE_CONFIG`), else the default
/// one. A missing default file means no settings; a missing named file is an error,
/// since the operator meant a file to be read.
pub fn load(explicit: Option<&Path>) -> Result<Config, Error> {
    let path = explicit.unwrap_or(Path::new(DEFAULT_PATH));
    match std::fs::read_to_string(path) {
        Ok(text) => parse(&text, path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && explicit.is_none() => {
            Ok(Config { path: path.to_owned(), ..Config::default() })
        }
        Err(e) => Err(Error { path: path.to_owned(), line: None, message: format!("cannot read it: {e}") }),
    }
}

pub fn parse(text: &str, path: &Path) -> Result<Config, Error> {
    let mut config = Config { path: path.to_owned(), ..Config::default() };
    let mut seen: Vec<(&str, usize)> = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let error = |message: String| Error { path: path.to_owned(), line: Some(line), message };
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with(';') {
            continue;
        }
        let Some((key, value)) = trimmed.split_once('=') else {
            return Err(error(format!("expected KEY=value, found `{trimmed}`")));
        };
        let key = key.trim();
        if !KEYS.contains(&key) {
            return Err(error(format!("unknown key `{key}` (the keys are {})", KEYS.join(", "))));
        }
        // systemd keeps the last of repeated keys; a repeat is more likely a slip
        // than an override, so it is named.
        if let Some((_, first)) = seen.iter().find(|(k, _)| *k == key) {
            return Err(error(format!("{key} is set again (first on line {first})")));
        }
        seen.push((key, line));
        let value = unquote(value.trim()).map_err(|m| error(format!("{key}: {m}")))?;
        config.set(key, value).map_err(|m| error(format!("{key}: {m}")))?;
    }
    Ok(config)
}

/// The value inside its quotes, if quoted as a whole; refuses what systemd would
/// read otherwise.
fn unquote(value: &str) -> Result<&str, String> {
    if value.contains('\\') {
        return Err(format!("`{value}`: backslashes are not allowed (systemd reads them as escapes)"));
    }
    for quote in ['"', '\''] {
        if let Some(rest) = value.strip_prefix(quote) {
            return match rest.strip_suffix(quote) {
                Some(inner) if !inner.contains(quote) => Ok(inner),
                _ => Err(format!("`{value}`: quote the whole value, once")),
            };
        }
    }
    if value.contains(['"', '\'']) {
        return Err(format!("`{value}`: quote the whole value, once"));
    }
    if value.contains(char::is_whitespace) {
        return Err(if value.contains('#') {
            format!("`{value}`: a comment goes on a line of its own")
        } else {
            format!("`{value}`: a value with spaces needs quotes (no key takes one)")
        });
    }
    Ok(value)
}

impl Config {
    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let value = (!value.is_empty()).then_some(value);
        match key {
            "LITE_MANAGER" => self.manager = value.map(parse_manager).transpose()?,
            "LITE_NODE_ID" => self.node_id = value.map(parse_node_id).transpose()?,
            "LITE_AGENT_PIDFILE" => self.agent_pidfile = value.map(parse_pidfile).transpose()?,
            "LITE_LISTEN" => self.listen = value.map(parse_listen).transpose()?,
            "LITE_HEARTBEAT_MS" => self.heartbeat_ms = value.map(parse_ms).transpose()?,
            "LITE_DEAD_AFTER_MS" => self.dead_after_ms = value.map(parse_ms).transpose()?,
            "LITE_MANAGER_PIDFILE" => self.manager_pidfile = value.map(parse_pidfile).transpose()?,
            _ => return Err(format!("unknown key (the keys are {})", KEYS.join(", "))),
        }
        Ok(())
    }
}

/// A manager address, HOST[:PORT] or [IPV6]:PORT, with the default port added. The
/// command line's parser too, so both refuse the same mistakes.
pub fn parse_manager(s: &str) -> Result<String, String> {
    let bad = |why: &str| format!("`{s}` is not a manager address, HOST[:PORT]: {why}");
    if s.is_empty() || s.contains(char::is_whitespace) || s.contains('/') {
        return Err(bad("give a host name or address"));
    }
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (addr, after) = rest.split_once(']').ok_or_else(|| bad("an IPv6 address needs its closing `]`"))?;
        if addr.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(bad("not an IPv6 address inside the brackets"));
        }
        match after {
            "" => (&s[..addr.len() + 2], None),
            _ => (&s[..addr.len() + 2], Some(after.strip_prefix(':').ok_or_else(|| bad("`:PORT` after `]`"))?)),
        }
    } else {
        match s.split_once(':') {
            Some((_, port)) if port.contains(':') => {
                return Err(bad("write an IPv6 address in brackets, [ADDRESS]:PORT"))
            }
            Some((host, port)) => (host, Some(port)),
            None => (s, None),
        }
    };
    if host.is_empty() {
        return Err(bad("the host is missing"));
    }
    let port = match port {
        Some(p) => p.parse::<u16>().ok().filter(|&p| p != 0).ok_or_else(|| bad("the port is 1 to 65535"))?,
        None => DEFAULT_PORT,
    };
    Ok(format!("{host}:{port}"))
}

/// A node id the manager can grant.
pub fn parse_node_id(s: &str) -> Result<u32, String> {
    let max = lite::uapi::LITE_MAX_NODES;
    s.parse::<u32>().ok().filter(|&id| id < max).ok_or_else(|| format!("`{s}` is not a node id (0 to {})", max - 1))
}

/// The address the manager listens on.
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    s.parse().map_err(|_| format!("`{s}` is not an ADDRESS:PORT such as 0.0.0.0:{DEFAULT_PORT}"))
}

fn parse_ms(s: &str) -> Result<u64, String> {
    s.parse().map_err(|_| format!("`{s}` is not a whole number of milliseconds"))
}

/// Relative paths are refused: a unit and a shell start in different directories.
fn parse_pidfile(s: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(s);
    if path.is_absolute() {
        Ok(path)
    } else {
        Err(format!("`{s}` is not an absolute path"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATH: &str = "/etc/lite/lite.conf";

    fn parsed(text: &str) -> Result<Config, String> {
        parse(text, Path::new(PATH)).map_err(|e| e.to_string())
    }

    #[test]
    fn reads_every_key() {
        let text = "# the cluster\n\
                    LITE_MANAGER=node0\n\
                    \n\
                    ; systemd's other comment\n\
                    LITE_NODE_ID = 3\n\
                    LITE_AGENT_PIDFILE=\"/run/lite/agent.pid\"\n\
                    LITE_LISTEN='10.0.0.1:18501'\n\
                    LITE_HEARTBEAT_MS=500\n\
                    LITE_DEAD_AFTER_MS=4000\n\
                    LITE_MANAGER_PIDFILE=/run/lite/manager.pid\n";
        let config = parsed(text).expect("valid file");
        assert_eq!(
            config,
            Config {
                path: PATH.into(),
                manager: Some("node0:18500".into()),
                node_id: Some(3),
                agent_pidfile: Some("/run/lite/agent.pid".into()),
                listen: Some("10.0.0.1:18501".parse().expect("address")),
                heartbeat_ms: Some(500),
                dead_after_ms: Some(4000),
                manager_pidfile: Some("/run/lite/manager.pid".into()),
            }
        );
    }

    #[test]
    fn empty_values_and_files_set_nothing() {
        assert_eq!(parsed("").expect("empty file"), Config { path: PATH.into(), ..Config::default() });
        assert_eq!(parsed("LITE_MANAGER=\nLITE_NODE_ID=''\n").expect("empty values").manager, None);
    }

    #[test]
    fn errors_name_the_file_and_line() {
        let cases = [
            ("LITE_MANAGER=node0\nLITE_MANGER=node1\n", "/etc/lite/lite.conf:2: unknown key `LITE_MANGER`"),
            ("\n\nLITE_NODE_ID=16\n", "/etc/lite/lite.conf:3: LITE_NODE_ID: `16` is not a node id (0 to 15)"),
            ("LITE_NODE_ID=one\n", "/etc/lite/lite.conf:1: LITE_NODE_ID: `one` is not a node id"),
            ("LITE_MANAGER node0\n", "/etc/lite/lite.conf:1: expected KEY=value, found `LITE_MANAGER node0`"),
            ("LITE_MANAGER=node0:99999\n", "/etc/lite/lite.conf:1: LITE_MANAGER: `node0:99999` is not a manager"),
            ("LITE_MANAGER=fe80::1\n", "/etc/lite/lite.conf:1: LITE_MANAGER: `fe80::1` is not a manager address"),
            ("LITE_MANAGER=node0 # there\n", "/etc/lite/lite.conf:1: LITE_MANAGER: `node0 # there`: a comment goes"),
            ("LITE_MANAGER=\"node0\n", "/etc/lite/lite.conf:1: LITE_MANAGER: `\"node0`: quote the whole value"),
            ("LITE_MANAGER=no\\de0\n", "/etc/lite/lite.conf:1: LITE_MANAGER: `no\\de0`: backslashes are not allowed"),
            ("LITE_LISTEN=18500\n", "/etc/lite/lite.conf:1: LITE_LISTEN: `18500` is not an ADDRESS:PORT"),
            ("LITE_HEARTBEAT_MS=1s\n", "/etc/lite/lite.conf:1: LITE_HEARTBEAT_MS: `1s` is not a whole number"),
            ("LITE_AGENT_PIDFILE=agent.pid\n", "/etc/lite/lite.conf:1: LITE_AGENT_PIDFILE: `agent.pid` is not an abs"),
            ("LITE_NODE_ID=1\nLITE_NODE_ID=2\n", "/etc/lite/lite.conf:2: LITE_NODE_ID is set again (first on line 1)"),
        ];
        for (text, expected) in cases {
            let error = parsed(text).expect_err(text);
            assert!(error.starts_with(expected), "{text:?}: got {error:?}, expected {expected:?}...");
        }
    }

    #[test]
    fn manager_addresses_get_the_default_port() {
        assert_eq!(parse_manager("node0"), Ok("node0:18500".into()));
        assert_eq!(parse_manager("10.0.0.1:7000"), Ok("10.0.0.1:7000".into()));
        assert_eq!(parse_manager("[fe80::1]"), Ok("[fe80::1]:18500".into()));
        assert_eq!(parse_manager("[fe80::1]:7000"), Ok("[fe80::1]:7000".into()));
        for bad in ["", ":7000", "node0:", "node0:0", "[fe80::1", "[node0]:1", "[::1]7000", "a b"] {
            assert!(parse_manager(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_missing_default_file_is_no_settings_but_a_named_one_is_an_error() {
        let dir = std::env::temp_dir().join(format!("lite-admin-config-{}", std::process::id()));
        let missing = dir.join("lite.conf");
        let error = load(Some(&missing)).expect_err("a named file that is missing").to_string();
        assert!(error.starts_with(&format!("{}: cannot read it:", missing.display())), "{error}");
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::fs::write(&missing, "LITE_MANAGER=node7\n").expect("write config");
        assert_eq!(load(Some(&missing)).expect("named file").manager, Some("node7:18500".into()));
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    /// The shipped file parses, and it explains every key and no other.
    #[test]
    fn the_shipped_file_explains_every_key() {
        let shipped = include_str!("../../../dist/lite.conf");
        assert_eq!(parsed(shipped).expect("dist/lite.conf parses"), Config { path: PATH.into(), ..Config::default() });
        for key in KEYS {
            assert!(shipped.contains(&format!("\n#{key}=")), "dist/lite.conf lacks a commented-out {key}=");
        }
        for line in shipped.lines() {
            if let Some((key, _)) = line.trim_start_matches('#').split_once('=') {
                if key.starts_with("LITE_") {
                    assert!(KEYS.contains(&key), "dist/lite.conf explains {key}, which lite-admin does not know");
                }
            }
        }
        // Each commented example is a valid setting once uncommented.
        let uncommented: String = shipped
            .lines()
            .filter_map(|l| l.strip_prefix('#'))
            .filter(|l| l.starts_with("LITE_"))
            .map(|l| format!("{l}\n"))
            .collect();
        let config = parsed(&uncommented).expect("the examples parse");
        assert!(config.manager.is_some() && config.listen.is_some(), "{config:?}");
    }
}
