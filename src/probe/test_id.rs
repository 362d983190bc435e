//! The twelve tests' identities (SPEC §2): ids, numbers, names, kinds and the order the
//! report lists them in.

use serde::{Deserialize, Serialize};

use super::ProbeError;

/// The tests, in the paper's numbering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TestId {
    FeatureListInformed,
    FeatureListUninformed,
    RecognitionFeatures,
    RecognitionExamples,
    FeatureValuesInformed,
    FeatureValuesUninformed,
    IncompleteCompletion,
    FullCompletion,
    FeatureCompletion,
    Membership,
    #[serde(rename = "classify-0shot")]
    Classify0Shot,
    #[serde(rename = "classify-1shot")]
    Classify1Shot,
    /// Test 13 (family `verbatim`): the raw file's beginning, continued exactly.
    Header,
    /// Test 14: the next row of the raw file, exactly.
    RowCompletion,
    /// Test 15: a near-unique value of a raw row, exactly.
    FeatureCompletionVerbatim,
    /// Test 16: the first token of the next raw row, against the most common one.
    FirstToken,
}

/// What a test measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TestKind {
    /// Uses metadata only.
    Knowledge,
    /// Uses rows.
    Memorization,
    /// Classification accuracy (not a contamination test).
    Classification,
}

impl TestId {
    /// Every test: the paper's twelve, then the verbatim family (13–16).
    pub const ALL: [TestId; 16] = [
        TestId::FeatureListInformed,
        TestId::FeatureListUninformed,
        TestId::RecognitionFeatures,
        TestId::RecognitionExamples,
        TestId::FeatureValuesInformed,
        TestId::FeatureValuesUninformed,
        TestId::IncompleteCompletion,
        TestId::FullCompletion,
        TestId::FeatureCompletion,
        TestId::Membership,
        TestId::Classify0Shot,
        TestId::Classify1Shot,
        TestId::Header,
        TestId::RowCompletion,
        TestId::FeatureCompletionVerbatim,
        TestId::FirstToken,
    ];

    /// The verbatim tests on the raw file (SPEC §8; spec name `verbatim`).
    pub const VERBATIM: [TestId; 4] = [
        TestId::Header,
        TestId::RowCompletion,
        TestId::FeatureCompletionVerbatim,
        TestId::FirstToken,
    ];

    /// The paper's twelve tests (spec name `all`: unchanged by later families).
    pub const PAPER: [TestId; 12] = [
        TestId::FeatureListInformed,
        TestId::FeatureListUninformed,
        TestId::RecognitionFeatures,
        TestId::RecognitionExamples,
        TestId::FeatureValuesInformed,
        TestId::FeatureValuesUninformed,
        TestId::IncompleteCompletion,
        TestId::FullCompletion,
        TestId::FeatureCompletion,
        TestId::Membership,
        TestId::Classify0Shot,
        TestId::Classify1Shot,
    ];

    /// The nine tests that make up the contamination score (SPEC §4).
    pub const CONTAMINATION: [TestId; 9] = [
        TestId::FeatureListInformed,
        TestId::FeatureListUninformed,
        TestId::RecognitionFeatures,
        TestId::RecognitionExamples,
        TestId::FeatureValuesInformed,
        TestId::FeatureValuesUninformed,
        TestId::IncompleteCompletion,
        TestId::FullCompletion,
        TestId::FeatureCompletion,
    ];

    pub fn id(self) -> &'static str {
        match self {
            TestId::FeatureListInformed => "feature-list-informed",
            TestId::FeatureListUninformed => "feature-list-uninformed",
            TestId::RecognitionFeatures => "recognition-features",
            TestId::RecognitionExamples => "recognition-examples",
            TestId::FeatureValuesInformed => "feature-values-informed",
            TestId::FeatureValuesUninformed => "feature-values-uninformed",
            TestId::IncompleteCompletion => "incomplete-completion",
            TestId::FullCompletion => "full-completion",
            TestId::FeatureCompletion => "feature-completion",
            TestId::Membership => "membership",
            TestId::Classify0Shot => "classify-0shot",
            TestId::Classify1Shot => "classify-1shot",
            TestId::Header => "header",
            TestId::RowCompletion => "row-completion",
            TestId::FeatureCompletionVerbatim => "feature-completion-verbatim",
            TestId::FirstToken => "first-token",
        }
    }

    /// The family a test belongs to: `paper` (1–12) or `verbatim` (13–16).
    pub fn family(self) -> &'static str {
        if TestId::VERBATIM.contains(&self) {
            "verbatim"
        } else {
            "paper"
        }
    }

    /// The test number (the paper's 1–12, then 13–16).
    pub fn number(self) -> u8 {
        TestId::ALL.iter().position(|&t| t == self).unwrap() as u8 + 1
    }

    /// Accepts the id or the test number.
    pub fn parse(text: &str) -> Option<TestId> {
        let text = text.trim();
        TestId::ALL
            .into_iter()
            .find(|t| t.id() == text || t.number().to_string() == text)
    }

    /// Parses or explains which ids exist.
    pub fn parse_or_explain(text: &str) -> Result<TestId, ProbeError> {
        TestId::parse(text).ok_or_else(|| ProbeError::UnknownTest(text.to_string()))
    }

    pub fn kind(self) -> TestKind {
        match self {
            TestId::FeatureListInformed
            | TestId::FeatureListUninformed
            | TestId::RecognitionFeatures => TestKind::Knowledge,
            TestId::Classify0Shot | TestId::Classify1Shot => TestKind::Classification,
            _ => TestKind::Memorization,
        }
    }

    /// Max output tokens (paper's Table 1; 4 for the short-answer tests as in the paper's code).
    pub fn max_tokens(self) -> u32 {
        match self {
            TestId::FeatureListInformed | TestId::FeatureListUninformed => 256,
            TestId::RecognitionFeatures | TestId::RecognitionExamples => 16,
            TestId::FeatureValuesInformed | TestId::FeatureValuesUninformed => 128,
            TestId::IncompleteCompletion => 256,
            TestId::FullCompletion => 512,
            TestId::FeatureCompletion => 64,
            TestId::Membership | TestId::Classify0Shot | TestId::Classify1Shot => 4,
            // About 600 characters of a CSV: several rows past any cut in lines 2–8.
            TestId::Header => 200,
            // One row of the widest shipped file (adult) is about 60 tokens.
            TestId::RowCompletion => 128,
            TestId::FeatureCompletionVerbatim => 32,
            TestId::FirstToken => 8,
        }
    }

    /// Stop sequences sent with raw-completion prompts of this test: the one-line answers of
    /// tests 14–16 end at the line break (only the first line is judged), so a base model
    /// does not write further rows up to the token limit. Chat models get none (their
    /// answer may open with a code-fence line).
    pub fn raw_stop(self) -> &'static [&'static str] {
        match self {
            TestId::RowCompletion | TestId::FeatureCompletionVerbatim | TestId::FirstToken => {
                &["\n"]
            }
            _ => &[],
        }
    }

    /// Whether the prompts contain serialized rows (and so depend on the template).
    /// Tests without rows draw the same prompts under every serialization, so their
    /// requests are shared across templates in the cache.
    pub fn serializes_rows(self) -> bool {
        !matches!(
            self,
            TestId::FeatureListInformed
                | TestId::FeatureListUninformed
                | TestId::RecognitionFeatures
                | TestId::FeatureValuesUninformed
                // Raw file text: no serialization template applies.
                | TestId::Header
                | TestId::RowCompletion
                | TestId::FeatureCompletionVerbatim
                | TestId::FirstToken
        )
    }
}

impl std::fmt::Display for TestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.id())
    }
}
