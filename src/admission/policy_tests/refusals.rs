//! What a refusal says: the operator, the move, the reason and the
//! override that admits it, each kind of change in the user's words; and
//! the refusals the docs quote are the policy's.

use super::*;

/// The override a refusal prints, applied to `record`'s entries.
fn printed_override(refused: &str, entries: Value) -> Value {
    let patch: Value = serde_json::from_str(
        refused
            .rsplit_once(" -p ")
            .map(|(_, patch)| patch.trim_matches('\''))
            .expect("the override command"),
    )
    .unwrap_or_else(|error| panic!("the override is JSON ({error}): {refused}"));
    record(entries, patch["spec"]["overrides"].clone())
}

#[test]
fn the_refusal_names_the_operator_the_move_the_reason_and_the_override() {
    let in_progress = record(
        json!({"app-operator": entry("7.10.0", "InProgress")}),
        json!({}),
    );
    let refused =
        judge(Some(&release("7.10.0")), &release("7.10.1"), &in_progress).expect_err("refused");
    assert_eq!(
        refused,
        "upgrade-gate: operator app-operator (Deployment app-operator) runs release 7.10.0, whose \
         upgrade has not completed (1 of 1 App(s): Job shop-db-7-10-0-1 running); it cannot move \
         to release 7.10.1 (last completed: 7.9.3). Retry once its operator records the upgrade \
         complete. To let this one change through anyway, with the role upgrade-gate:override: \
         kubectl -n shop patch upgraderecord upgrade-gate --type merge -p \
         '{\"spec\":{\"overrides\":{\"app-operator\": {\"from\": \"7.10.0\", \"to\": \"7.10.1\", \
         \"fromImages\": [\"app-operator=app:7.10.0\", \"upgrade-gate=gate:0.2.0\"], \
         \"toImages\": [\"app-operator=app:7.10.1\", \"upgrade-gate=gate:0.2.0\"]}}}}'"
    );
    // The override it prints lets exactly that move through, and no other.
    let entries = json!({"app-operator": entry("7.10.0", "InProgress")});
    let overridden = printed_override(&refused, entries.clone());
    assert_eq!(
        judge(Some(&release("7.10.0")), &release("7.10.1"), &overridden),
        Ok(())
    );
    let rebuilt = deployment(Shape {
        release: Some("7.10.1"),
        image: "app:7.10.1-rebuilt",
        ..BASE
    });
    assert!(judge(Some(&release("7.10.0")), &rebuilt, &overridden).is_err());

    let image = judge(
        Some(&release("7.10.0")),
        &deployment(Shape {
            image: "app:7.10.1",
            ..BASE
        }),
        &in_progress,
    )
    .expect_err("refused");
    assert!(
        image.contains(
            "cannot move to other code under the same release label \
             (app-operator=app:7.10.1 instead of app-operator=app:7.10.0)"
        ),
        "{image}"
    );
    // A release that completed, then went back in progress (a new object
    // to upgrade): its last completed release is itself, said as such.
    let again = record(
        json!({"app-operator": {"release": "7.10.0", "state": "InProgress",
                                "message": "1 of 2 App(s): Job shop-db-7-10-0-2 running",
                                "lastCompleted": "7.10.0"}}),
        json!({}),
    );
    let refused_again =
        judge(Some(&release("7.10.0")), &release("7.10.1"), &again).expect_err("refused");
    assert!(
        refused_again.contains(
            "it cannot move to release 7.10.1 (7.10.0 had completed before; its operator \
             records it in progress again). Retry"
        ),
        "{refused_again}"
    );
    let unrecorded = judge(
        Some(&release("7.10.0")),
        &release("7.10.1"),
        &record(
            json!({"app-operator": entry("7.9.3", "Complete")}),
            json!({}),
        ),
    )
    .expect_err("refused");
    assert!(
        unrecorded.contains(
            "(release 7.10.0 has recorded nothing yet; last record: release 7.9.3 Complete)"
        ),
        "{unrecorded}"
    );
}

#[test]
fn each_kind_of_change_is_named_in_the_users_words_and_its_override_admits_it() {
    let entries = json!({"app-operator": entry("7.10.0", "InProgress")});
    let in_progress = record(entries.clone(), json!({}));
    let unlabelled = changed(release("7.10.0"), |d| {
        d["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove(ADMISSION_LABEL);
    });
    let cases: Vec<(&str, Option<Value>, Value, &str)> = vec![
        (
            "a setting",
            Some(release("7.10.0")),
            deployment(Shape { env: "b", ..BASE }),
            "it cannot change its settings (its pod template changed: while the upgrade runs \
             only a restart and scaling pass)",
        ),
        (
            "the opt-in removed",
            Some(release("7.10.0")),
            unlabelled,
            "it cannot leave the policy (its label upgrade-gate.dev/admission removed or changed)",
        ),
        (
            "the identity changed",
            Some(release("7.10.0")),
            deployment(Shape {
                operator: Some("fresh"),
                ..BASE
            }),
            "it cannot change its identity (label upgrade-gate.dev/operator app-operator to fresh)",
        ),
        (
            "re-created without the opt-in",
            None,
            deployment(Shape {
                opted_in: false,
                ..BASE
            }),
            "it cannot be re-created without the label upgrade-gate.dev/admission: enforce",
        ),
        (
            "re-created with other images",
            None,
            deployment(Shape {
                image: "app:7.10.0-debug",
                ..BASE
            }),
            "it cannot move to other code under the same release label \
             (app-operator=app:7.10.0-debug instead of app-operator=app:7.10.0)",
        ),
    ];
    for (what, old, new, words) in cases {
        let refused =
            judge(old.as_ref(), &new, &in_progress).expect_err(&format!("{what}: refused"));
        assert!(refused.contains(words), "{what}: {refused}");
        let overridden = printed_override(&refused, entries.clone());
        assert_eq!(
            judge(old.as_ref(), &new, &overridden),
            Ok(()),
            "{what}: the printed override admits it"
        );
    }
    let aliased = judge(
        None,
        &deployment(Shape {
            operator: Some("fresh"),
            ..BASE
        }),
        &in_progress,
    )
    .expect_err("refused");
    assert!(
        aliased.starts_with(
            "upgrade-gate: operator app-operator (Deployment app-operator) runs release 7.10.0, \
             whose upgrade has not completed (1 of 1 App(s): Job shop-db-7-10-0-1 running); it \
             cannot be re-created under another identity (label upgrade-gate.dev/operator fresh)."
        ),
        "{aliased}"
    );
}

/// The refusals README.md and docs/ quote, whole (a ```text block that
/// starts `upgrade-gate: operator`) or in part (an inline span that names
/// the move, or a kubectl or Helm error's tail after `denied request: `):
/// each as `(whole, text)`, its white space folded to single spaces. A
/// part quoted after `denied request: ` is anchored at the message's start.
fn quoted_refusals(doc: &str) -> Vec<(bool, String)> {
    let fold = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut quotes = Vec::new();
    let mut prose = String::new();
    let mut block: Option<String> = None;
    for line in doc.lines() {
        let fence = line.trim_start().starts_with("```");
        match (&mut block, fence) {
            (None, true) => block = Some(String::new()),
            (Some(text), true) => {
                let text = fold(text);
                if text.starts_with("upgrade-gate: operator") {
                    quotes.push((true, text));
                }
                block = None;
            }
            (Some(text), false) => {
                text.push_str(line);
                text.push(' ');
            }
            (None, false) => {
                prose.push_str(line);
                prose.push(' ');
            }
        }
    }
    const PARTS: [&str; 5] = [
        "it cannot ",
        "whose upgrade has not completed",
        "had completed before",
        "has recorded nothing yet",
        "upgrade-gate: operator",
    ];
    for span in prose.split('`').skip(1).step_by(2) {
        let span = fold(span);
        if let Some((_, refusal)) = span.split_once("denied request: ") {
            quotes.push((false, format!("\u{2}{refusal}")));
        } else if PARTS.iter().any(|part| span.contains(part)) {
            quotes.push((false, span));
        }
    }
    quotes
}

/// Whether `message` is what `quote` says, `…` or `...` standing for any
/// text: the pieces in order, the first at the start and the last at the
/// end when the quote is `whole` (or, for a part, starts with `\u{2}`).
fn quote_fits(whole: bool, quote: &str, message: &str) -> bool {
    let (anchored, quote) = match quote.strip_prefix('\u{2}') {
        Some(rest) => (true, rest),
        None => (whole, quote),
    };
    // A `<placeholder>` (lowercase within angle brackets) stands for any text too.
    let mut elided = String::new();
    let mut rest = quote;
    while let Some(at) = rest.find('<') {
        let (before, from) = rest.split_at(at);
        elided.push_str(before);
        match from[1..].find('>') {
            Some(end) if from[1..=end].starts_with(|c: char| c.is_ascii_lowercase()) => {
                elided.push('…');
                rest = &from[end + 2..];
            }
            _ => {
                elided.push('<');
                rest = &from[1..];
            }
        }
    }
    elided.push_str(rest);
    let pieces: Vec<&str> = elided
        .split(['…'])
        .flat_map(|piece| piece.split("..."))
        .map(str::trim)
        .collect();
    let mut rest = message;
    for (index, piece) in pieces.iter().enumerate() {
        if piece.is_empty() {
            continue;
        }
        let Some(at) = rest.find(piece) else {
            return false;
        };
        if index == 0 && anchored && at != 0 {
            return false;
        }
        rest = &rest[at + piece.len()..];
    }
    !whole || pieces.last().is_some_and(|last| last.is_empty()) || rest.is_empty()
}

/// What the policy says for every kind of refusal the docs describe: a
/// move, each other change, a re-creation under another identity, a
/// release back in progress, nothing recorded yet, and adopt.md's Helm
/// operator.
fn refusals() -> Vec<String> {
    let entries = json!({"app-operator": entry("7.10.0", "InProgress")});
    let in_progress = record(entries, json!({}));
    let unlabelled = changed(release("7.10.0"), |d| {
        d["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove(ADMISSION_LABEL);
    });
    let again = record(
        json!({"app-operator": {"release": "7.10.0", "state": "InProgress",
                                "message": "1 of 2 App(s): Job shop-db-7-10-0-2 running",
                                "lastCompleted": "7.10.0"}}),
        json!({}),
    );
    let unrecorded = record(
        json!({"app-operator": entry("7.9.3", "Complete")}),
        json!({}),
    );
    let widget = |release: &'static str| {
        deployment(Shape {
            name: "widget-helm-operator",
            release: Some(release),
            image: "widget:0.1.0",
            ..BASE
        })
    };
    let widget_record = record(
        json!({"widget-helm-operator": {"release": "0.1.0", "state": "InProgress",
               "message": "Widget shop/gizmo is not ready", "images": []}}),
        json!({}),
    );
    let cases: Vec<(Option<Value>, Value, &Value)> = vec![
        (Some(release("7.10.0")), release("7.10.1"), &in_progress),
        (
            Some(release("7.10.0")),
            deployment(Shape { env: "b", ..BASE }),
            &in_progress,
        ),
        (Some(release("7.10.0")), unlabelled, &in_progress),
        (
            Some(release("7.10.0")),
            deployment(Shape {
                operator: Some("fresh"),
                ..BASE
            }),
            &in_progress,
        ),
        (
            None,
            deployment(Shape {
                opted_in: false,
                ..BASE
            }),
            &in_progress,
        ),
        (
            Some(release("7.10.0")),
            deployment(Shape {
                image: "app:7.10.1",
                ..BASE
            }),
            &in_progress,
        ),
        (
            None,
            deployment(Shape {
                operator: Some("fresh"),
                ..BASE
            }),
            &in_progress,
        ),
        (Some(release("7.10.0")), release("7.10.1"), &again),
        (Some(release("7.10.0")), release("7.10.1"), &unrecorded),
        (Some(widget("0.1.0")), widget("0.2.0"), &widget_record),
    ];
    cases
        .into_iter()
        .map(|(old, new, params)| {
            judge(old.as_ref(), &new, params).expect_err("each case is a refusal")
        })
        .collect()
}

#[test]
fn a_quote_fits_a_refusal_with_its_elisions() {
    let message = "upgrade-gate: operator a (Deployment a) runs release 1, whose upgrade has \
                   not completed (1 of 1 App(s): Job j running); it cannot move to release 2.";
    let cases = [
        (
            true,
            "upgrade-gate: operator a (Deployment a) runs release 1, whose upgrade has not completed (1 of 1 App(s) ...: Job j running); it cannot move to release 2.",
            true,
        ),
        (
            true,
            "upgrade-gate: operator a (Deployment a) runs release 1, …",
            true,
        ),
        (
            true,
            "upgrade-gate: operator a (Deployment a) runs release 1",
            false,
        ),
        (
            true,
            "upgrade-gate: Deployment a runs release 1, ...",
            false,
        ),
        (false, "it cannot move to release 2", true),
        (false, "it cannot move to release (…)", false),
        (false, "\u{2}upgrade-gate: ...", true),
        (
            false,
            "\u{2}upgrade-gate: Deployment a runs release 1, ...",
            false,
        ),
        (
            false,
            "operator a (Deployment a) runs release 1, whose upgrade has not completed (...j...); it cannot move to release 2",
            true,
        ),
        (
            true,
            "upgrade-gate: operator <operator> (Deployment <name>) runs release <r>, …",
            true,
        ),
        (false, "release <r> has recorded nothing yet", false),
        (
            false,
            "operator <operator> (Deployment <name>) runs release 1",
            true,
        ),
        (false, "operator <Operator> (Deployment a)", false),
    ];
    for (whole, quote, fits) in cases {
        assert_eq!(quote_fits(whole, quote, message), fits, "{quote}");
    }
    let doc = "Read `it cannot\nmove to release 2` and `kubectl get`.\n\n```text\nupgrade-gate: operator a\n(Deployment a) ...\n```\n\n`Error: x denied request: upgrade-gate: ...`\n";
    assert_eq!(
        quoted_refusals(doc),
        [
            (
                true,
                "upgrade-gate: operator a (Deployment a) ...".to_owned()
            ),
            (false, "it cannot move to release 2".to_owned()),
            (false, "\u{2}upgrade-gate: ...".to_owned()),
        ]
    );
}

/// admission.md once quoted `upgrade-gate: Deployment app-operator runs
/// release 7.10.0` while the policy says `operator app-operator
/// (Deployment app-operator)`: every refusal the docs quote must be what
/// the policy's own messageExpressions say, and every policy or binding a
/// quoted error names must be one of the manifests'.
#[test]
fn the_refusals_the_docs_quote_are_the_policys() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut docs = vec![root.join("README.md")];
    docs.extend(
        std::fs::read_dir(root.join("docs"))
            .expect("docs/")
            .filter_map(|entry| Some(entry.ok()?.path()))
            .filter(|path| path.extension().is_some_and(|ext| ext == "md")),
    );
    docs.sort();
    let refusals = refusals();
    let names: Vec<Value> = [POLICY, GUARD]
        .into_iter()
        .map(yaml)
        .chain(yaml_documents(BINDINGS))
        .map(|object| object["metadata"]["name"].clone())
        .collect();
    let mut wrong = Vec::new();
    let mut seen = 0;
    for path in docs {
        let text = std::fs::read_to_string(&path).expect("a doc");
        let doc = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .display()
            .to_string();
        for (whole, quote) in quoted_refusals(&text) {
            seen += 1;
            if !refusals
                .iter()
                .any(|message| quote_fits(whole, &quote, message))
            {
                wrong.push(format!(
                    "{doc} quotes a refusal the policy never gives: {:?}",
                    quote.trim_start_matches('\u{2}')
                ));
            }
        }
        for (kind, marker) in [
            ("policy", "ValidatingAdmissionPolicy '"),
            ("binding", "with binding '"),
        ] {
            for named in text.split(marker).skip(1) {
                let name = named.split('\'').next().unwrap_or_default();
                if !names.contains(&json!(name)) {
                    wrong.push(format!(
                        "{doc} names a {kind} {name:?} the manifests do not"
                    ));
                }
            }
        }
    }
    assert!(seen >= 5, "the docs' quoted refusals were found ({seen})");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
