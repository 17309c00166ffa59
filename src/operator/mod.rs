//! The `app-operator`: reconciles `App` resources (observe → decide → act)
//! and opens the OLM upgrade gate once every App is at this release.
pub mod decide;
pub mod gate;
