//! Argument parsing for the LMR subcommands: `--grant NODE:PERM` and errno names.

use lite::Perm;
use nix::errno::Errno;
use std::str::FromStr;

/// `--grant NODE:PERM`, NODE a node id or `any`.
#[derive(Clone, Debug)]
pub struct GrantArg {
    pub(super) node: Option<u32>,
    pub(super) perm: Perm,
}

impl FromStr for GrantArg {
    type Err = String;

    fn from_str(s: &str) -> Result<GrantArg, String> {
        let (node, perm) = s.split_once(':').ok_or_else(|| format!("{s:?}: expected NODE:PERM, e.g. 2:rw or any:r"))?;
        let node = match node {
            "any" => None,
            n => Some(n.parse().map_err(|_| format!("{s:?}: node must be a node id or `any`"))?),
        };
        Ok(GrantArg { node, perm: perm.parse().map_err(|e: lite::Error| e.to_string())? })
    }
}

/// An errno liblite returns, by name (as `{:?}` prints it).
pub fn parse_errno(s: &str) -> Result<Errno, String> {
    let errnos = lite::ERRNO_MESSAGES.map(|(errno, _)| errno);
    errnos.into_iter().find(|e| format!("{e:?}") == s).ok_or_else(|| {
        let names: Vec<String> = errnos.iter().map(|e| format!("{e:?}")).collect();
        format!("unknown errno name {s:?}: one of {}", names.join(", "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_and_errno_names_parse() {
        let g: GrantArg = "2:rw".parse().unwrap();
        assert_eq!((g.node, g.perm), (Some(2), Perm::READ | Perm::WRITE));
        let g: GrantArg = "any:none".parse().unwrap();
        assert_eq!((g.node, g.perm), (None, Perm::NONE));
        assert!("2".parse::<GrantArg>().is_err() && "x:r".parse::<GrantArg>().is_err());
        assert_eq!(parse_errno("EIDRM"), Ok(Errno::EIDRM));
        assert!(parse_errno("EWHAT").unwrap_err().contains("EACCES"));
    }
}
