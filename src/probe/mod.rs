//! The twelve tests of SPEC §2 as probes: prompts from (dataset, serialization, seed),
//! verdicts from outputs.
