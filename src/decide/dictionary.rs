//! The English dictionary of Alg1 (Hunspell en_US through `spellbook`).
//!
//! The authors queried pyenchant's `en_US` (Hunspell underneath). `spellbook` is a port of
//! Hunspell's checker, so a lookup here follows Hunspell's rules: `BREAK` patterns split
//! hyphenated compounds (`hours-per-week` is a word because each part is), numbers are
//! accepted, trailing dots mark abbreviations (`admin.`), and a string with an inner space is
//! looked up whole, so it is never a word (enchant behaves the same way).

use std::path::{Path, PathBuf};

/// File names of the shipped dictionary inside its directory.
const AFF_FILE: &str = "en_US.aff";
const DIC_FILE: &str = "en_US.dic";

/// The shipped en_US files (`datasets/dictionary/`), compiled in: an installed binary
/// works without the source tree.
const EMBEDDED_AFF: &str = include_str!("../../datasets/dictionary/en_US.aff");
const EMBEDDED_DIC: &str = include_str!("../../datasets/dictionary/en_US.dic");
/// The SCOWL licence asks that its notice travel with the files, so it is compiled in too.
#[used]
static EMBEDDED_COPYRIGHT: &str = include_str!("../../datasets/dictionary/COPYRIGHT");

/// Overrides the directory holding `en_US.aff` and `en_US.dic`.
pub const DICTIONARY_DIR_ENV: &str = "TABCONTAM_DICTIONARY_DIR";
/// The project home; its `datasets/dictionary/` is searched when it holds the files.
pub const HOME_ENV: &str = "TABCONTAM_HOME";

/// Why the dictionary could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum DictionaryError {
    #[error(
        "cannot read dictionary file {path}: {source} (set {DICTIONARY_DIR_ENV} to a directory holding {AFF_FILE} and {DIC_FILE})"
    )]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "dictionary file {path} is not a valid Hunspell file: {message} (use the en_US files shipped in datasets/dictionary/)"
    )]
    Parse { path: PathBuf, message: String },
}

/// A loaded Hunspell dictionary.
pub struct Dictionary {
    inner: spellbook::Dictionary,
}

impl std::fmt::Debug for Dictionary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dictionary").finish_non_exhaustive()
    }
}

impl Dictionary {
    /// Loads a dictionary from its `.aff` and `.dic` files.
    pub fn load(aff: &Path, dic: &Path) -> Result<Self, DictionaryError> {
        let read = |path: &Path| {
            std::fs::read_to_string(path).map_err(|source| DictionaryError::Read {
                path: path.to_path_buf(),
                source,
            })
        };
        let aff_text = read(aff)?;
        let dic_text = read(dic)?;
        Self::from_texts(&aff_text, &dic_text).map_err(|message| DictionaryError::Parse {
            // spellbook reports errors of both files; the affix file is the usual culprit and
            // the message itself says which line.
            path: aff.to_path_buf(),
            message,
        })
    }

    /// Builds a dictionary from the contents of its `.aff` and `.dic` files.
    pub fn from_texts(aff: &str, dic: &str) -> Result<Self, String> {
        let inner = spellbook::Dictionary::new(aff, dic).map_err(|e| e.to_string())?;
        Ok(Self { inner })
    }

    /// Loads the en_US dictionary: from `$TABCONTAM_DICTIONARY_DIR` when set (it must hold
    /// the files), else from `$TABCONTAM_HOME/datasets/dictionary` when that holds them,
    /// else the copy compiled into the binary (so an installed `tabcontam` needs no files).
    pub fn shipped() -> Result<Self, DictionaryError> {
        match Self::override_dir() {
            Some(dir) => Self::load(&dir.join(AFF_FILE), &dir.join(DIC_FILE)),
            None => Self::from_texts(EMBEDDED_AFF, EMBEDDED_DIC).map_err(|message| {
                DictionaryError::Parse {
                    path: PathBuf::from("(built-in) datasets/dictionary/en_US.aff"),
                    message,
                }
            }),
        }
    }

    /// The directory `shipped` loads from instead of the built-in copy, if any.
    pub fn override_dir() -> Option<PathBuf> {
        if let Some(dir) = std::env::var_os(DICTIONARY_DIR_ENV).filter(|d| !d.is_empty()) {
            // An explicit override is never silently skipped: a typo should be an error.
            return Some(PathBuf::from(dir));
        }
        std::env::var_os(HOME_ENV)
            .filter(|h| !h.is_empty())
            .map(|home| PathBuf::from(home).join("datasets").join("dictionary"))
            .filter(|dir| dir.join(AFF_FILE).is_file())
    }

    /// True when Hunspell accepts the word (as `Hunspell::spell` would).
    pub fn contains(&self, word: &str) -> bool {
        // Hunspell skips leading blanks before the lookup; spellbook leaves that to its caller.
        let word = word.trim_start_matches(' ');
        if word.is_empty() {
            // Hunspell accepts an empty word, but an empty expected value is no English word
            // and enchant refuses to check one: treat it as unknown.
            return false;
        }
        self.inner.check(word)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Dictionary {
        let aff = "SET UTF-8\n";
        let dic = "3\nhours\nper\nweek\n";
        Dictionary::from_texts(aff, dic).expect("tiny dictionary parses")
    }

    #[test]
    fn hyphenated_compound_is_a_word_when_every_part_is() {
        let dictionary = tiny();
        assert!(dictionary.contains("hours-per-week"));
        assert!(!dictionary.contains("hours-per-month"));
    }

    #[test]
    fn leading_blanks_are_skipped_like_hunspell() {
        assert!(tiny().contains("  week"));
    }

    #[test]
    fn inner_space_is_never_a_word() {
        assert!(!tiny().contains("hours week"));
    }

    #[test]
    fn empty_word_is_unknown() {
        assert!(!tiny().contains(""));
        assert!(!tiny().contains("   "));
    }

    #[test]
    fn built_in_copy_is_the_shipped_files_and_loads() {
        // The files beside this source are the ones compiled in (rebuilt when they change).
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("datasets/dictionary");
        assert_eq!(
            std::fs::read_to_string(dir.join(AFF_FILE)).unwrap(),
            EMBEDDED_AFF
        );
        assert_eq!(
            std::fs::read_to_string(dir.join(DIC_FILE)).unwrap(),
            EMBEDDED_DIC
        );
        assert!(EMBEDDED_COPYRIGHT.contains("SCOWL"));
        let dictionary = Dictionary::from_texts(EMBEDDED_AFF, EMBEDDED_DIC).unwrap();
        assert!(dictionary.contains("hours-per-week"));
        assert!(!dictionary.contains("fnlwgt"));
    }

    #[test]
    fn missing_override_directory_names_the_file() {
        let error = Dictionary::load(
            Path::new("/nonexistent/en_US.aff"),
            Path::new("/nonexistent/en_US.dic"),
        )
        .expect_err("missing file must fail");
        let message = error.to_string();
        assert!(message.contains("/nonexistent/en_US.aff"), "{message}");
        assert!(message.contains(DICTIONARY_DIR_ENV), "{message}");
    }
}
