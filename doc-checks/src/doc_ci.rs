//! CI cannot drift from what this repository ships and tests. Our own
//! workflow (`.github/workflows/ci.yml`) runs every stage `just test` runs
//! (the `stages=(…)` of the justfile's `test` recipe), each as its `just`
//! recipe, and no other recipe. The CI recipe for adopters: docs/adopt-ci.md's
//! workflow is `adopt/ci/olm-upgrade.yml` word for word (actionlint checks
//! that file in `just validate`), it runs `adopt/ci/olm-upgrade-check.sh`
//! from the gate's release of the library's version, and the inputs it gives
//! the script are the ones the script reads — the script a cluster test
//! runs (tests/cluster/adopt_ci.rs).
//!
//! Owns: these checks, run by `cargo test`. Must not touch: the files (it
//! only reads them).

use std::collections::BTreeSet;

const WORKFLOW: &str = "adopt/ci/olm-upgrade.yml";
const SCRIPT: &str = "adopt/ci/olm-upgrade-check.sh";
/// Where the workflow checks out the gate's repository.
const CHECKOUT: &str = ".upgrade-gate/";
const SECTION: &str = "## Check it in CI";

fn read(path: &str) -> String {
    let full = crate::repository_root().join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|error| panic!("{path}: {error}"))
}

/// The fenced code blocks (with their language) of the section `heading`.
fn blocks_under(text: &str, heading: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, String)> = None;
    let section = text
        .lines()
        .skip_while(|line| line.trim_end() != heading)
        .skip(1)
        .take_while(|line| !line.starts_with("## "));
    for line in section {
        if let Some(language) = line.strip_prefix("```") {
            match open.take() {
                Some(block) => blocks.push(block),
                None => open = Some((language.trim().to_owned(), String::new())),
            }
        } else if let Some((_, body)) = open.as_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    blocks
}

/// The `UG_*` names set in a workflow (`UG_NAME: value` lines).
fn inputs_given(workflow: &str) -> BTreeSet<String> {
    workflow
        .lines()
        .filter_map(|line| line.trim().split_once(':'))
        .map(|(key, _)| key.trim())
        .filter(|key| key.starts_with("UG_"))
        .map(str::to_owned)
        .collect()
}

/// The inputs the script documents (`#   UG_NAME  what` in its header)
/// and the ones it requires (its `for input in ...` line).
fn inputs_read(script: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let documented = script
        .lines()
        .take_while(|line| line.starts_with('#'))
        .filter_map(|line| line.strip_prefix("#   "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|word| word.starts_with("UG_"))
        .map(str::to_owned)
        .collect();
    let required = script
        .lines()
        .find_map(|line| line.strip_prefix("for input in "))
        .unwrap_or_else(|| panic!("{SCRIPT} has no `for input in` line"))
        .trim_end_matches("; do")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    (documented, required)
}

/// Everything that is wrong with the recipe, one line each.
fn recipe_problems(adopt_md: &str, workflow: &str, script: &str, version: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let yaml: Vec<String> = blocks_under(adopt_md, SECTION)
        .into_iter()
        .filter(|(language, _)| language == "yaml")
        .map(|(_, body)| body)
        .collect();
    if !yaml.iter().any(|block| block == workflow) {
        problems.push(format!(
            "docs/adopt-ci.md, {SECTION:?}: no yaml block is {WORKFLOW} word for word (copy the file into it)"
        ));
    }
    let run = format!("run: {CHECKOUT}{SCRIPT}");
    if !workflow.lines().any(|line| line.trim() == run) {
        problems.push(format!("{WORKFLOW}: no step says `{run}`"));
    }
    let pinned = format!("UPGRADE_GATE_VERSION: {version} ");
    if !workflow
        .lines()
        .any(|line| line.trim_start().starts_with(&pinned))
    {
        problems.push(format!(
            "{WORKFLOW}: UPGRADE_GATE_VERSION is not the library's version {version}"
        ));
    }
    let (documented, required) = inputs_read(script);
    let given = inputs_given(workflow);
    for input in given.difference(&documented) {
        problems.push(format!(
            "{WORKFLOW} sets {input}, which {SCRIPT} does not read"
        ));
    }
    for input in required.difference(&given) {
        problems.push(format!(
            "{WORKFLOW} does not set {input}, which {SCRIPT} requires"
        ));
    }
    let catalogs = ["UG_CATALOG_IMAGE", "UG_CATALOG_ADDRESS"]
        .iter()
        .filter(|input| given.contains(**input))
        .count();
    if catalogs != 1 {
        problems.push(format!(
            "{WORKFLOW} sets {catalogs} of UG_CATALOG_IMAGE and UG_CATALOG_ADDRESS, not one"
        ));
    }
    problems
}

#[test]
fn the_workflow_in_docs_adopt_md_runs_the_shipped_script_with_its_inputs() {
    // The library's version, as its binary's `--version` says it.
    let command = <upgrade_gate::cli::commands::Cli as clap::CommandFactory>::command();
    let version = command.get_version().expect("upgrade-gate has a version");
    let problems = recipe_problems(
        &read("docs/adopt-ci.md"),
        &read(WORKFLOW),
        &read(SCRIPT),
        version,
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let path = crate::repository_root().join(SCRIPT);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path)
            .unwrap_or_else(|error| panic!("{SCRIPT}: {error}"))
            .permissions()
            .mode();
        assert!(mode & 0o111 != 0, "{SCRIPT} is executable");
    }
}

#[test]
fn each_kind_of_drift_in_the_recipe_is_named() {
    let script = "#!/usr/bin/env bash\n# Inputs:\n#   UG_NAMESPACE  the namespace\n#   UG_CATALOG_IMAGE  an image\n#   UG_CATALOG_ADDRESS  an address\n#   UG_TIMEOUT  seconds\nset -eu\nfor input in UG_NAMESPACE; do\n";
    let workflow = "env:\n  UPGRADE_GATE_VERSION: 1.0.0   # pinned\nsteps:\n  - env:\n      UG_NAMESPACE: x\n      UG_CATALOG_IMAGE: y\n    run: .upgrade-gate/adopt/ci/olm-upgrade-check.sh\n";
    let doc = format!("# Adopt\n\n{SECTION}\n\n```yaml\n{workflow}```\n\n## Next\n");
    assert_eq!(
        recipe_problems(&doc, workflow, script, "1.0.0"),
        Vec::<String>::new()
    );
    let drifted = workflow
        .replace("UG_NAMESPACE", "UG_NAMESPACES")
        .replace("1.0.0", "0.9.0")
        .replace("olm-upgrade-check.sh", "check.sh");
    let problems = recipe_problems(&doc, &drifted, script, "1.0.0");
    for expected in [
        "no yaml block is adopt/ci/olm-upgrade.yml word for word",
        "no step says `run: .upgrade-gate/adopt/ci/olm-upgrade-check.sh`",
        "UPGRADE_GATE_VERSION is not the library's version 1.0.0",
        "sets UG_NAMESPACES, which adopt/ci/olm-upgrade-check.sh does not read",
        "does not set UG_NAMESPACE, which adopt/ci/olm-upgrade-check.sh requires",
    ] {
        assert!(
            problems.iter().any(|problem| problem.contains(expected)),
            "{expected:?} in {problems:#?}"
        );
    }
    let both = workflow.replace(
        "UG_CATALOG_IMAGE: y",
        "UG_CATALOG_IMAGE: y\n      UG_CATALOG_ADDRESS: z",
    );
    let doc_both = format!("{SECTION}\n```yaml\n{both}```\n");
    assert_eq!(
        recipe_problems(&doc_both, &both, script, "1.0.0"),
        vec![format!(
            "{WORKFLOW} sets 2 of UG_CATALOG_IMAGE and UG_CATALOG_ADDRESS, not one"
        )]
    );
}

const CI: &str = ".github/workflows/ci.yml";

/// The stages `just test` runs: the words of the `stages=(…)` line of the
/// justfile's `test` recipe (its body: the indented lines under `test:`).
fn test_stages(justfile: &str) -> Option<Vec<String>> {
    justfile
        .lines()
        .skip_while(|line| line.trim_end() != "test:")
        .skip(1)
        .take_while(|line| line.is_empty() || line.starts_with(' ') || line.starts_with('\t'))
        .find_map(|line| line.trim().strip_prefix("stages=("))
        .and_then(|rest| rest.strip_suffix(')'))
        .map(|words| words.split_whitespace().map(str::to_owned).collect())
}

/// The shell of every step of a workflow (`run: command` and the lines of
/// a `run: |` block), comments left out.
fn step_commands(workflow: &str) -> Vec<String> {
    let indent = |line: &str| line.len() - line.trim_start().len();
    let mut commands = Vec::new();
    let mut lines = workflow.lines().peekable();
    while let Some(line) = lines.next() {
        let key = line.trim_start().trim_start_matches("- ");
        let Some(value) = key.strip_prefix("run:") else {
            continue;
        };
        let value = value.trim();
        if !value.starts_with(['|', '>']) {
            commands.push(value.to_owned());
            continue;
        }
        while let Some(next) =
            lines.next_if(|next| next.trim().is_empty() || indent(next) > indent(line))
        {
            commands.push(next.trim().to_owned());
        }
    }
    commands.retain(|command| !command.is_empty() && !command.starts_with('#'));
    commands
}

/// The recipes the steps run: the word after `just`, also when just is
/// run through sudo as `"$(command -v just)"` (options skipped).
fn recipes_run(workflow: &str) -> Vec<String> {
    let mut recipes = Vec::new();
    for command in step_commands(workflow) {
        let mut words = command.split_whitespace();
        while let Some(word) = words.next() {
            if (word == "just" || word.ends_with("just)\""))
                && let Some(recipe) = words.by_ref().find(|word| !word.starts_with('-'))
            {
                recipes.push(recipe.to_owned());
            }
        }
    }
    recipes
}

/// Every way the workflow and `just test` disagree, one line each.
fn stage_problems(justfile: &str, workflow: &str) -> Vec<String> {
    let Some(stages) = test_stages(justfile) else {
        return vec!["justfile: the `test` recipe has no `stages=(…)` line".to_owned()];
    };
    let run: BTreeSet<String> = recipes_run(workflow).into_iter().collect();
    let mut problems: Vec<String> = stages
        .iter()
        .filter(|stage| !run.contains(*stage))
        .map(|stage| format!("{CI}: no step runs `just {stage}`, a stage of `just test`"))
        .collect();
    problems.extend(
        run.iter()
            .filter(|recipe| !stages.contains(recipe))
            .map(|recipe| {
                format!("{CI}: a step runs `just {recipe}`, which is no stage of `just test`")
            }),
    );
    problems
}

#[test]
fn the_workflow_runs_every_stage_of_just_test() {
    let problems = stage_problems(&read("justfile"), &read(CI));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn each_drift_between_the_workflow_and_just_test_is_named() {
    let justfile = "# Everything CI runs.\ntest:\n    #!/usr/bin/env bash\n    stages=(lint test-fast test-cluster)\n    for stage in \"${stages[@]}\"; do just \"$stage\"; done\n\n# Unit tests.\ntest-fast:\n    cargo test\n";
    assert_eq!(
        test_stages(justfile),
        Some(vec![
            "lint".into(),
            "test-fast".into(),
            "test-cluster".into()
        ])
    );
    // Every form a step runs just in: a line, a block, through sudo.
    let workflow = "# lint, test-fast: just lint runs clippy\njobs:\n  lint:\n    steps:\n      - run: just lint\n  test-fast:\n    steps:\n      - name: unit\n        run: |\n          # just test-machine needs root\n          cargo build\n          just --quiet test-fast\n  test-cluster:\n    steps:\n      - name: as root\n        run: sudo --preserve-env=PATH \"$(command -v just)\" test-cluster\n";
    assert_eq!(stage_problems(justfile, workflow), Vec::<String>::new());
    let missing = workflow.replace("          just --quiet test-fast\n", "");
    assert_eq!(
        stage_problems(justfile, &missing),
        vec![format!(
            "{CI}: no step runs `just test-fast`, a stage of `just test`"
        )]
    );
    let extra = workflow.replace("run: just lint", "run: just lint && just demo");
    assert_eq!(
        stage_problems(justfile, &extra),
        vec![format!(
            "{CI}: a step runs `just demo`, which is no stage of `just test`"
        )]
    );
    assert_eq!(
        stage_problems("test:\n    just lint\n", workflow),
        vec!["justfile: the `test` recipe has no `stages=(…)` line".to_owned()]
    );
}
