//! Decision algorithms of SPEC §3: Alg1 (regular text), Alg2 (rows) and the answer parser.
//!
//! Architecture Invariant: pure functions of (output text, expected values, dictionary).
//! No IO here except `Dictionary::load` / `Dictionary::shipped`, which callers run once.

pub mod alg1;
pub mod alg2;
pub mod answer;
pub mod dictionary;
pub mod parity;

pub use alg1::{Alg1Profile, alg1, alg1_any_name};
pub use alg2::{Alg2Scope, StopRule, alg2};
pub use answer::{Answer, parse_answer};
pub use dictionary::{Dictionary, DictionaryError};

/// One expected word of Alg1.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum Word {
    /// A boolean value (matches `true` / `false` in the output).
    Bool(bool),
    /// A string that must (or may) appear in the output.
    Text(String),
    /// A missing value: counts as found and is never "unknown".
    Missing,
}

/// One expected value of Alg2, spelled as in the data file.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum Cell {
    /// An integer value.
    Int(i64),
    /// A float value; an integral one compares as the integer (`5.0` matches `5`).
    Float(f64),
    /// A value as text (compared numerically when both it and the output are numbers).
    Text(String),
}
