//! Test fixtures for real components: a throwaway PostgreSQL and the local
//! single-node cluster with OLM.
