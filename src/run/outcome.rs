//! What the senders (network tasks, the local-inference thread) hand to the executor's
//! writer thread: one type below both, so neither side imports the other for it.

use crate::llm::error::ErrorClass;
use crate::request::{Request, Response};

/// What a network task or the local thread hands to the writer. `model` indexes the
/// executor's models: remote ones first, then local ones.
pub(super) enum Outcome {
    Stored {
        model: usize,
        response: Response,
    },
    Failed {
        model: usize,
        kind: String,
        message: String,
        attempts: u32,
        class: ErrorClass,
    },
}

/// The channel to the writer thread.
pub(super) type OutcomeSender = std::sync::mpsc::Sender<(Request, Outcome)>;
