//! The backup's compression: what a person asks for with
//! `--backup-compression`, and the `pg_dump --compress` argument that says
//! it to the client tools actually installed.
//!
//! Owns: parsing the setting (refused before anything runs when it is not
//! one), reading the client's major version from `pg_dump --version`, and
//! the pure rendering per major version. Must not touch: the dump itself
//! (`backup`).
//!
//! Why per version: the `method:level` form (`gzip:1`, `lz4`, `zstd:3`,
//! `none`) came with pg_dump 16; pg_dump 15 takes only a gzip level
//! (`--compress=0..9`, 0 for none) and refuses the rest with `invalid value
//! "gzip:1" for option -Z/--compress`. Both clients read every server this
//! project supports, so the setting is written once and each client gets
//! the form it understands.

use std::fmt;
use std::str::FromStr;

/// A compression method `pg_dump` knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Gzip,
    Lz4,
    Zstd,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::Gzip => "gzip",
            Method::Lz4 => "lz4",
            Method::Zstd => "zstd",
        }
    }
}

/// What `--backup-compression` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// No compression.
    None,
    /// A method, at a level or at the method's default.
    With { method: Method, level: Option<u8> },
}

/// The first pg_dump release that takes `method[:level]`.
const METHOD_FORM_SINCE: u32 = 16;

/// The setting is not a compression pg_dump knows.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid backup compression {value:?}: {why} (use none, gzip, gzip:0-9, lz4, lz4:1-12, zstd or zstd:1-22)"
)]
pub struct InvalidCompression {
    value: String,
    why: &'static str,
}

/// The installed client cannot write what the setting asks for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "pg_dump {major} cannot write backup compression {asked}: before PostgreSQL {METHOD_FORM_SINCE} pg_dump only has gzip (use gzip, gzip:N or none, or a newer client)"
)]
pub struct UnsupportedByClient {
    pub major: u32,
    pub asked: Compression,
}

impl FromStr for Compression {
    type Err = InvalidCompression;

    /// Accepts pg_dump 16's form (`none`, `gzip`, `gzip:6`, `lz4:3`,
    /// `zstd`) and pg_dump 15's (`0`–`9`: a gzip level, 0 meaning none), so
    /// a setting written for either client keeps working.
    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let invalid = |why| InvalidCompression {
            value: value.to_owned(),
            why,
        };
        let trimmed = value.trim();
        if let Ok(level) = trimmed.parse::<u8>() {
            return match level {
                0 => Ok(Compression::None),
                1..=9 => Ok(Compression::With {
                    method: Method::Gzip,
                    level: Some(level),
                }),
                _ => Err(invalid("a bare number is a gzip level, 0 to 9")),
            };
        }
        let (name, level) = match trimmed.split_once(':') {
            Some((name, level)) => (name, Some(level)),
            None => (trimmed, None),
        };
        let method = match name.to_ascii_lowercase().as_str() {
            "none" if level.is_none() => return Ok(Compression::None),
            "none" => return Err(invalid("none takes no level")),
            "gzip" => Method::Gzip,
            "lz4" => Method::Lz4,
            "zstd" => Method::Zstd,
            _ => return Err(invalid("unknown method")),
        };
        let level = match level {
            None => None,
            Some(text) => {
                let level: u8 = text
                    .parse()
                    .map_err(|_| invalid("the level is not a number"))?;
                let range = match method {
                    Method::Gzip => 0..=9,
                    Method::Lz4 => 1..=12,
                    Method::Zstd => 1..=22,
                };
                if !range.contains(&level) {
                    return Err(invalid("the level is out of the method's range"));
                }
                Some(level)
            }
        };
        Ok(match (method, level) {
            (Method::Gzip, Some(0)) => Compression::None,
            _ => Compression::With { method, level },
        })
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Compression::None => f.write_str("none"),
            Compression::With {
                method,
                level: None,
            } => f.write_str(method.name()),
            Compression::With {
                method,
                level: Some(level),
            } => write!(f, "{}:{level}", method.name()),
        }
    }
}

impl Compression {
    /// The `--compress` value for pg_dump of major version `major`, or
    /// `None` when the argument is best left out (gzip at its default level
    /// is what `--format=custom` does on its own before 16).
    pub fn pg_dump_argument(self, major: u32) -> Result<Option<String>, UnsupportedByClient> {
        if major >= METHOD_FORM_SINCE {
            return Ok(Some(self.to_string()));
        }
        match self {
            Compression::None => Ok(Some("0".to_owned())),
            Compression::With {
                method: Method::Gzip,
                level: None,
            } => Ok(None),
            Compression::With {
                method: Method::Gzip,
                level: Some(level),
            } => Ok(Some(level.to_string())),
            Compression::With { .. } => Err(UnsupportedByClient { major, asked: self }),
        }
    }
}

/// The major version in a PostgreSQL tool's `--version` line, e.g.
/// `pg_dump (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)` → 15,
/// `pg_dump (PostgreSQL) 18.6` → 18; a pre-10 `9.6.24` → 9.
pub fn client_major(version_line: &str) -> Option<u32> {
    let after = version_line.split_once("(PostgreSQL)")?.1.trim_start();
    let number: String = after
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    number.split('.').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gzip(level: Option<u8>) -> Compression {
        Compression::With {
            method: Method::Gzip,
            level,
        }
    }

    #[test]
    fn settings_table() {
        let zstd3 = Compression::With {
            method: Method::Zstd,
            level: Some(3),
        };
        let lz4 = Compression::With {
            method: Method::Lz4,
            level: None,
        };
        let cases: [(&str, Option<Compression>); 14] = [
            ("gzip:1", Some(gzip(Some(1)))),
            ("gzip", Some(gzip(None))),
            ("GZIP:9", Some(gzip(Some(9)))),
            ("gzip:0", Some(Compression::None)),
            ("none", Some(Compression::None)),
            ("0", Some(Compression::None)),
            ("6", Some(gzip(Some(6)))),
            ("zstd:3", Some(zstd3)),
            ("lz4", Some(lz4)),
            ("gzip:10", None),
            ("lz4:0", None),
            ("none:1", None),
            ("brotli", None),
            ("12", None),
        ];
        for (text, expected) in cases {
            assert_eq!(text.parse::<Compression>().ok(), expected, "{text}");
        }
    }

    #[test]
    fn a_bad_setting_says_what_is_accepted() {
        let error = "gzip:x".parse::<Compression>().unwrap_err().to_string();
        assert!(error.contains("\"gzip:x\""), "{error}");
        assert!(error.contains("gzip:0-9"), "{error}");
    }

    #[test]
    fn each_client_gets_the_form_it_understands() {
        let zstd = Compression::With {
            method: Method::Zstd,
            level: Some(3),
        };
        // "" = the argument left out; "refused" = the client cannot.
        let cases: [(Compression, u32, &str); 10] = [
            (gzip(Some(1)), 18, "gzip:1"),
            (gzip(Some(1)), 16, "gzip:1"),
            (gzip(Some(1)), 15, "1"),
            (gzip(None), 18, "gzip"),
            (gzip(None), 15, ""),
            (Compression::None, 18, "none"),
            (Compression::None, 15, "0"),
            (Compression::None, 13, "0"),
            (zstd, 17, "zstd:3"),
            (zstd, 15, "refused"),
        ];
        for (compression, major, expected) in cases {
            let got = match compression.pg_dump_argument(major) {
                Ok(argument) => argument.unwrap_or_default(),
                Err(_) => "refused".to_owned(),
            };
            assert_eq!(got, expected, "{compression} for pg_dump {major}");
        }
    }

    #[test]
    fn every_setting_survives_display_and_parse() {
        for text in ["none", "gzip", "gzip:1", "lz4:12", "zstd", "zstd:22"] {
            let parsed: Compression = text.parse().expect(text);
            assert_eq!(parsed.to_string(), text);
        }
    }

    #[test]
    fn version_lines_table() {
        let cases = [
            (
                "pg_dump (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)",
                Some(15),
            ),
            ("pg_dump (PostgreSQL) 18.6", Some(18)),
            ("pg_dump (PostgreSQL) 16beta2", Some(16)),
            ("pg_dump (PostgreSQL) 9.6.24", Some(9)),
            ("pg_dump 15", None),
            ("", None),
        ];
        for (line, expected) in cases {
            assert_eq!(client_major(line), expected, "{line}");
        }
    }
}
