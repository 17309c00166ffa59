//! upgrade-gate's docs checked against its code and files. Test-only: the
//! library (`upgrade_gate`) and the sample carry none of it.
//!
//! Owns: reading markdown tables and comparing them with clap definitions
//! and exit codes (`doc_check`, re-exported here: the binaries' unit tests
//! call it, since the clap definitions live in the binaries), and, as this
//! crate's own unit tests, the checks that read the repository's files:
//! docs/architecture.md's layers and figures (`doc_architecture`) and its
//! glossary against the code's names (`doc_glossary`), the CI
//! workflow against `just test` and docs/adopt-ci.md's recipe (`doc_ci`),
//! docs/operate.md's pins and runbook (`doc_operate`), every measured
//! figure's command and date (`doc_figures`), the paths the docs
//! name (`doc_paths`), the docs' tables, index and counts
//! (`doc_tables`), every table of README.md and docs/ tested, measured or
//! listed (`doc_table_inventory`), the listed tables' comparisons with
//! the code (`doc_table_checks`, and the reference tables'
//! `doc_table_reference`), the lists that name the code's facts
//! (`doc_lists`: a release's files, the rendered paths, the plugin's
//! ClusterExtension columns), and the user path's word counts
//! (`doc_user_path`). Must not touch: anything but reading the repository.

mod doc_check;
pub use doc_check::*;

#[cfg(test)]
mod doc_architecture;
#[cfg(test)]
mod doc_ci;
#[cfg(test)]
mod doc_figures;
#[cfg(test)]
mod doc_glossary;
#[cfg(test)]
mod doc_lists;
#[cfg(test)]
mod doc_operate;
#[cfg(test)]
mod doc_paths;
#[cfg(test)]
mod doc_table_checks;
#[cfg(test)]
mod doc_table_inventory;
#[cfg(test)]
mod doc_table_reference;
#[cfg(test)]
mod doc_tables;
#[cfg(test)]
mod doc_user_path;

/// The repository's root: this crate's parent folder.
#[cfg(test)]
fn repository_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("doc-checks/ is in the repository")
        .to_path_buf()
}
