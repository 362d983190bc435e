//! The English dictionary of Alg1 (Hunspell en_US through `spellbook`).

use std::path::Path;

/// A loaded Hunspell dictionary.
pub struct Dictionary {
    inner: spellbook::Dictionary,
}

impl Dictionary {
    /// Loads a dictionary from its `.aff` and `.dic` files.
    pub fn load(aff: &Path, dic: &Path) -> anyhow::Result<Self> {
        let aff_text = std::fs::read_to_string(aff)?;
        let dic_text = std::fs::read_to_string(dic)?;
        let inner = spellbook::Dictionary::new(&aff_text, &dic_text)
            .map_err(|e| anyhow::anyhow!("{}: {e}", aff.display()))?;
        Ok(Self { inner })
    }

    /// True when Hunspell accepts the word.
    pub fn contains(&self, word: &str) -> bool {
        self.inner.check(word)
    }
}
