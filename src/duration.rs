//! The one duration syntax of every binary's flags: a number with units,
//! `30s`, `2m`, `1m30s`, `1500ms`, `1h` (jiff's friendly format, the
//! humantime-like form Kubernetes users write), or a bare number of
//! seconds, `90`, as earlier releases took.
//!
//! Owns: parsing such a flag's text. Must not touch: what a binary does
//! with the duration (whether zero is allowed is its own rule).

use std::time::Duration;

/// A flag's text that is not a duration.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{text:?} is not a duration like 30s, 2m, 1m30s, 1500ms or 90 (seconds): {why}")]
pub struct DurationError {
    /// The text given.
    pub text: String,
    /// What the parser said.
    pub why: String,
}

/// `30s`, `2m`, `1m30s`, `1500ms` or `90` (seconds) as a [`Duration`];
/// negative durations are refused.
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let error = |why: String| DurationError {
        text: text.to_owned(),
        why,
    };
    let trimmed = text.trim();
    if let Ok(seconds) = trimmed.parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    let signed = trimmed
        .parse::<k8s_openapi::jiff::SignedDuration>()
        .map_err(|e| error(e.to_string()))?;
    Duration::try_from(signed).map_err(|e| error(e.to_string()))
}

/// [`parse`] for clap's `value_parser`: the error as clap prints it.
pub fn flag(text: &str) -> Result<Duration, String> {
    parse(text).map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_a_flag_takes() {
        let cases: &[(&str, Option<Duration>)] = &[
            ("90", Some(Duration::from_secs(90))),
            ("0", Some(Duration::ZERO)),
            ("30s", Some(Duration::from_secs(30))),
            ("2m", Some(Duration::from_secs(120))),
            ("1m30s", Some(Duration::from_secs(90))),
            ("1500ms", Some(Duration::from_millis(1500))),
            ("1h", Some(Duration::from_secs(3600))),
            (" 15s ", Some(Duration::from_secs(15))),
            ("-5s", None),
            ("soon", None),
            ("", None),
            ("1.5", None),
        ];
        for (text, expected) in cases {
            assert_eq!(parse(text).ok(), *expected, "{text:?}");
        }
    }

    #[test]
    fn the_error_names_the_text_and_the_forms() {
        let message = flag("soon").unwrap_err();
        assert!(
            message.starts_with("\"soon\" is not a duration like 30s, 2m"),
            "{message}"
        );
    }
}
