//! How a gate message is shown: its one-line summary for a table cell and
//! its whole text laid out in lines. Pure.
//!
//! Owns: [`summary`] and [`message_lines`]. Must not touch: which message
//! is shown where (the rows', the holds' and the extensions').

/// How long a SUMMARY cell is at most, in characters.
const SUMMARY_CHARS: usize = 80;

/// The gate message's summary for the table: its first clause (up to the
/// first ": "), as an operator writes its headline there (app-operator:
/// "37/100 upgraded, 4 running, 12 queued, 1 failed (release 7.10.1)"),
/// or its first `SUMMARY_CHARS` (80) characters.
pub fn summary(message: &str) -> String {
    let first = message.split_once(": ").map_or(message, |(head, _)| head);
    let first = first.lines().next().unwrap_or_default().trim();
    if first.chars().count() <= SUMMARY_CHARS {
        return first.to_owned();
    }
    let cut: String = first.chars().take(SUMMARY_CHARS - 1).collect();
    format!("{}…", cut.trim_end())
}

/// The whole message, readable: its first clause, then each part of the
/// rest (the message split at "; ") on a line of its own, indented.
pub fn message_lines(message: &str) -> Vec<String> {
    match message.split_once(": ") {
        None => vec![message.trim().to_owned()],
        Some((head, rest)) => std::iter::once(format!("{head}:"))
            .chain(
                rest.split("; ")
                    .map(str::trim)
                    .filter(|part| !part.is_empty())
                    .map(|part| format!("  {part}")),
            )
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_are_short() {
        assert_eq!(summary("plain message"), "plain message");
        assert_eq!(
            summary(crate::gate::DEFAULT_HOLD_MESSAGE),
            "upgrade-gate hold"
        );
        let long = "x".repeat(200);
        assert_eq!(summary(&long).chars().count(), SUMMARY_CHARS);
        assert!(summary(&long).ends_with('…'));
        assert_eq!(message_lines("no parts"), ["no parts"]);
    }
}
