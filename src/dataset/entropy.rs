//! Entropy per row of a table: how much a model must learn to reproduce one of its rows,
//! the calibration card's measure of a treatment's difficulty.

use std::collections::BTreeMap;

use super::table::Table;

/// Entropy of one row in bits: the sum over columns of each column's Shannon entropy
/// `−Σ p log₂ p` over its values' frequencies in the file (columns taken as independent:
/// an upper bound on what a model must learn to reproduce a row it has seen).
pub fn entropy_per_row(table: &Table) -> f64 {
    row_entropy_bits(&table.rows)
}

/// [`entropy_per_row`] of rows of cells (the first row's length is the column count).
fn row_entropy_bits(rows: &[Vec<String>]) -> f64 {
    let n = rows.len();
    let Some(first) = rows.first() else {
        return 0.0;
    };
    let mut bits = 0.0;
    for col in 0..first.len() {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for row in rows {
            *counts
                .entry(row.get(col).map_or("", String::as_str))
                .or_default() += 1;
        }
        for &count in counts.values() {
            let p = count as f64 / n as f64;
            bits -= p * p.log2();
        }
    }
    bits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entropy_sums_each_columns_value_distribution() {
        let rows: Vec<Vec<String>> = vec![
            vec!["a".into(), "x".into()],
            vec!["b".into(), "x".into()],
            vec!["c".into(), "x".into()],
            vec!["d".into(), "y".into()],
        ];
        // Column 1: four values once each, 2 bits; column 2: 3/4 and 1/4.
        let by_hand = 2.0 - (0.75 * 0.75f64.log2() + 0.25 * 0.25f64.log2());
        let got = row_entropy_bits(&rows);
        assert!((got - by_hand).abs() < 1e-12, "{got} vs {by_hand}");
    }
}
