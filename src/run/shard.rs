//! `--shard I/N`: which of the missing requests one of N machines sends.
//!
//! The split is a pure function of the request key (its first eight bytes, a blake3
//! digest, modulo N), so N machines given `1/N` … `N/N` cover every request exactly once,
//! whatever each machine already has cached and in whatever order they run.

use std::fmt;
use std::str::FromStr;

use crate::request::RequestKey;

/// Shard `index` (1-based) of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    index: u32,
    count: u32,
}

impl Shard {
    /// Shard `index` of `count` (1 ≤ index ≤ count).
    pub fn new(index: u32, count: u32) -> Result<Self, String> {
        if count == 0 || index == 0 || index > count {
            return Err(format!(
                "shard `{index}/{count}` is out of range; write I/N with 1 ≤ I ≤ N, e.g. 1/2 and 2/2"
            ));
        }
        Ok(Self { index, count })
    }

    pub fn index(self) -> u32 {
        self.index
    }

    pub fn count(self) -> u32 {
        self.count
    }

    /// Whether this shard sends `key`.
    pub fn owns(self, key: &RequestKey) -> bool {
        let head = u64::from_le_bytes(key.0[..8].try_into().expect("8 bytes"));
        head % u64::from(self.count) == u64::from(self.index - 1)
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let parse = |part: &str| part.trim().parse::<u32>().ok();
        match text.split_once('/').map(|(i, n)| (parse(i), parse(n))) {
            Some((Some(index), Some(count))) => Shard::new(index, count),
            _ => Err(format!(
                "shard `{text}` is not I/N; write e.g. 1/2 for the first of two machines"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_cover_every_key_exactly_once() {
        let keys: Vec<RequestKey> = (0u32..3000)
            .map(|i| RequestKey(*blake3::hash(&i.to_le_bytes()).as_bytes()))
            .collect();
        for count in 1..=5 {
            let shards: Vec<Shard> = (1..=count).map(|i| Shard::new(i, count).unwrap()).collect();
            let mut sizes = vec![0usize; count as usize];
            for key in &keys {
                let owners: Vec<usize> =
                    (0..shards.len()).filter(|&s| shards[s].owns(key)).collect();
                assert_eq!(owners.len(), 1, "key owned by {owners:?} of {count}");
                sizes[owners[0]] += 1;
            }
            // A hash split is even to within a few percent on 3000 keys.
            let even = keys.len() / count as usize;
            for size in sizes {
                assert!(size.abs_diff(even) < even / 5 + 20, "{size} vs {even}");
            }
        }
    }

    #[test]
    fn parses_and_refuses_with_the_fix() {
        assert_eq!("2/3".parse::<Shard>().unwrap(), Shard::new(2, 3).unwrap());
        assert_eq!(Shard::new(2, 3).unwrap().to_string(), "2/3");
        for bad in ["0/2", "3/2", "1/0", "1", "a/b", "1/2/3"] {
            let error = bad.parse::<Shard>().unwrap_err();
            assert!(error.contains("1/2"), "{bad}: {error}");
        }
    }
}
