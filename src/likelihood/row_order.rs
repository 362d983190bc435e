//! Test 17, `row-order`: is the file's own row order more likely under the model than
//! shuffles of the same rows? After Oren et al., "Proving test set contamination in
//! black-box language models" (ICLR 2024): rows of a table that the model never saw are
//! exchangeable, so the canonical order's log-likelihood ranks uniformly among random
//! permutations and the p-value below is exact, with no threshold to calibrate.
//!
//! The guarantee needs the order to be exchangeable under the null. A file sorted or
//! grouped by a column (iris by class) or with increasing ids is more likely in its own
//! order under any model that has merely learnt what tables look like. [`plan`] tests
//! every column for order with a model-free statistic; rows are then permuted only within
//! the blocks of the grouping columns, and a file ordered in a way blocks cannot absorb
//! (a sorted number, an id) is refused with the reason.
//!
//! Architecture Invariant: pure. The log-likelihoods come in as numbers; scoring and
//! caching the texts live in `run::likelihood`.

use std::ops::Range;

use serde::Serialize;

use crate::dataset::table::{ColumnKind, Table};
use crate::probe::rng::{DrawKey, TrialRng};
use crate::probe::verbatim;

/// The test's id in specs, the cache and reports.
pub const TEST_ID: &str = "row-order";

/// Rows per shard. Eight rows keep a shard's text near 100–300 tokens (one forward pass
/// each) while leaving 40,320 orders to draw from.
pub const SHARD_ROWS: usize = 8;
/// At most this many shards, spread evenly over the file: each adds one independent rank.
pub const MAX_SHARDS: usize = 10;
/// Permutations scored per shard. With ten shards the rank sum reaches p ≈ 1e-13, while a
/// shard costs only twenty texts; Oren et al. show many shards with few permutations each
/// is the powerful layout.
pub const PERMUTATIONS: usize = 19;
/// A column whose order statistic lies this many standard deviations beyond its seeded
/// shuffles counts as ordered (one-sided, p ≈ 3e-5 under a normal tail). Strict, because
/// a false alarm only narrows the permutations (or refuses the cell), while a missed order
/// would break the guarantee; iris's class column sits near 12.
pub const ORDER_Z: f64 = 4.0;
/// Seeded shuffles behind each column's order statistic (mean and spread under the null).
const ORDER_SHUFFLES: usize = 199;
/// A number with at most this many distinct values can form blocks (see [`can_group`]).
const MAX_GROUP_VALUES: usize = 32;

/// How a column's values follow the file order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OrderedColumn {
    pub column: String,
    /// `grouped` (equal values sit together) or `trend` (neighbouring rows have close
    /// values: sorted, ids, a time series).
    pub pattern: &'static str,
    /// Standard deviations beyond the shuffles' mean (≥ [`ORDER_Z`]).
    pub z: f64,
}

/// What the plan permutes: the whole shard, or only within blocks of grouping columns.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowOrderPlan {
    /// Columns whose runs of equal values bound the permutations (empty: none).
    pub blocked_by: Vec<String>,
    /// The columns found ordered (including those the blocks absorbed).
    pub ordered: Vec<OrderedColumn>,
    pub shards: Vec<Shard>,
}

/// Consecutive rows of the file and the permutations drawn for them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Shard {
    /// Row indices in file order.
    pub rows: Vec<usize>,
    /// Each a reordering of `rows` (moves only within blocks).
    pub permutations: Vec<Vec<usize>>,
}

/// The test's result on one (model, dataset).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowOrderStats {
    pub shards: usize,
    pub permutations: usize,
    /// Per shard: how many permutations score strictly below the file order (0..=m).
    pub ranks: Vec<usize>,
    pub rank_sum: usize,
    /// Exact P(rank sum ≥ observed) when the order is exchangeable; ties count against
    /// detection, so the p-value is conservative.
    pub p_value: f64,
    /// Mean over shards of log p(file order) − mean log p(permutations), in nats.
    pub mean_gap_nats: f64,
}

/// Decides what to permute, or why the file cannot be tested (the refusal reason).
pub fn plan(table: &Table, dataset: &str, seed: u64) -> Result<RowOrderPlan, String> {
    let n = table.n_rows();
    if n < 2 * SHARD_ROWS {
        return Err(format!(
            "{n} rows: the row-order test needs at least {} (two shards of {SHARD_ROWS})",
            2 * SHARD_ROWS
        ));
    }
    let mut blocks: Vec<Range<usize>> = std::iter::once(0..n).collect();
    let mut blocked_by: Vec<String> = Vec::new();
    let mut ordered: Vec<OrderedColumn> = Vec::new();
    // Each round absorbs one grouping column into the blocks, then looks again: iris is
    // grouped by class, and within each class nothing else is ordered.
    loop {
        let mut found = Vec::new();
        for column in 0..table.n_cols() {
            let name = &table.columns[column].name;
            if blocked_by.contains(name) {
                continue;
            }
            let (pattern, z) = column_order(table, column, &blocks, dataset, seed);
            if z >= ORDER_Z {
                found.push((column, pattern, z));
            }
        }
        let Some(&(column, _, _)) = found
            .iter()
            .filter(|(c, pattern, _)| *pattern == "grouped" && can_group(table, *c))
            .max_by(|a, b| a.2.total_cmp(&b.2).then(b.0.cmp(&a.0)))
        else {
            if let Some((column, pattern, z)) = found.first() {
                return Err(format!(
                    "row order is not exchangeable: column `{}` is {} ({z:.1} standard deviations beyond shuffled orders{}); a model that never saw the file would still prefer its order",
                    table.columns[*column].name,
                    match *pattern {
                        "trend" => "sorted or counts up (neighbouring rows hold close values)",
                        _ => "grouped (equal values sit together)",
                    },
                    if blocked_by.is_empty() {
                        String::new()
                    } else {
                        format!(", within blocks of {}", blocked_by.join(", "))
                    }
                ));
            }
            break;
        };
        let (_, pattern, z) = found.iter().find(|f| f.0 == column).unwrap();
        ordered.push(OrderedColumn {
            column: table.columns[column].name.clone(),
            pattern,
            z: *z,
        });
        blocked_by.push(table.columns[column].name.clone());
        blocks = split_by_runs(table, column, &blocks);
    }
    let shards = draw_shards(n, &blocks, dataset, seed);
    if shards.len() < 2 {
        return Err(format!(
            "fewer than two shards of {SHARD_ROWS} rows have two rows in one block (blocks of {})",
            blocked_by.join(", ")
        ));
    }
    Ok(RowOrderPlan {
        blocked_by,
        ordered,
        shards,
    })
}

/// The text scored for `rows` in this order: the header line, then each row as a line of
/// the file (the verbatim tests' spelling).
pub fn shard_text(table: &Table, rows: &[usize]) -> String {
    let mut text = verbatim::file_text(table, 0);
    for &row in rows {
        text.push_str(&verbatim::row_line(table, row));
        text.push('\n');
    }
    text
}

/// Judges the scores: `canonical[s]` is shard s's log-likelihood in file order,
/// `permuted[s][j]` that of its j-th permutation. `None` without two shards.
pub fn judge(canonical: &[f64], permuted: &[Vec<f64>]) -> Option<RowOrderStats> {
    let shards = canonical.len().min(permuted.len());
    if shards < 2 {
        return None;
    }
    let m = permuted[0].len();
    if m == 0 || permuted[..shards].iter().any(|p| p.len() != m) {
        return None;
    }
    let ranks: Vec<usize> = (0..shards)
        .map(|s| permuted[s].iter().filter(|&&p| p < canonical[s]).count())
        .collect();
    let rank_sum = ranks.iter().sum();
    let mean_gap_nats = (0..shards)
        .map(|s| canonical[s] - permuted[s].iter().sum::<f64>() / m as f64)
        .sum::<f64>()
        / shards as f64;
    Some(RowOrderStats {
        shards,
        permutations: m,
        p_value: rank_sum_tail(rank_sum, shards, m),
        ranks,
        rank_sum,
        mean_gap_nats,
    })
}

/// P(U ≥ observed) for U the sum of `shards` independent uniforms on 0..=m: the exact null
/// distribution of the rank sum, by convolution.
pub fn rank_sum_tail(observed: usize, shards: usize, m: usize) -> f64 {
    let mut distribution = vec![1.0f64];
    let step = 1.0 / (m + 1) as f64;
    for _ in 0..shards {
        let mut next = vec![0.0; distribution.len() + m];
        for (sum, &p) in distribution.iter().enumerate() {
            for r in 0..=m {
                next[sum + r] += p * step;
            }
        }
        distribution = next;
    }
    distribution
        .iter()
        .skip(observed)
        .sum::<f64>()
        .clamp(0.0, 1.0)
}

/// Whether runs of a column's values can serve as blocks: a text or yes/no column whose
/// values repeat (at most half as many values as rows), or a number with few values (at
/// most [`MAX_GROUP_VALUES`], and a quarter as many as rows). A number with many values
/// is judged for a trend instead: blocks of its ties would keep a sorted file sorted and
/// leave almost nothing to permute.
fn can_group(table: &Table, column: usize) -> bool {
    let distinct = distinct_values(table, column);
    match table.columns[column].kind {
        ColumnKind::Text | ColumnKind::Boolean => 2 * distinct <= table.n_rows(),
        _ => distinct <= MAX_GROUP_VALUES && 4 * distinct <= table.n_rows(),
    }
}

fn distinct_values(table: &Table, column: usize) -> usize {
    let values: std::collections::HashSet<&str> =
        table.rows.iter().map(|r| r[column].as_str()).collect();
    values.len()
}

/// The column's order statistic against seeded shuffles within `blocks`, as standard
/// deviations beyond the shuffles' mean (the pattern and z): for a column
/// that can group, how many neighbouring rows hold equal values; for a numeric column
/// with many values, how far apart neighbours' ranks are (a small sum = smooth = sorted).
/// Neighbours across a block boundary do not count.
fn column_order(
    table: &Table,
    column: usize,
    blocks: &[Range<usize>],
    dataset: &str,
    seed: u64,
) -> (&'static str, f64) {
    let grouping = can_group(table, column);
    let values: Vec<f64> = if grouping {
        // Equal-neighbour count on value ids.
        let mut ids = std::collections::HashMap::new();
        table
            .rows
            .iter()
            .map(|r| {
                let next = ids.len();
                *ids.entry(r[column].as_str()).or_insert(next) as f64
            })
            .collect()
    } else {
        ranks_of(table, column)
    };
    let equal_pairs = grouping;
    let statistic = |values: &[f64]| -> f64 {
        let mut total = 0.0;
        for block in blocks {
            for i in block.start + 1..block.end {
                total += if equal_pairs {
                    f64::from(u8::from(values[i] == values[i - 1]))
                } else {
                    -(values[i] - values[i - 1]).abs()
                };
            }
        }
        total
    };
    let observed = statistic(&values);
    let mut rng = SplitMix64(
        TrialRng::new(DrawKey {
            seed,
            dataset,
            test: "row-order/column-order",
            trial: column as u32,
            serialization: None,
        })
        .next_u64(),
    );
    let mut shuffled = values.clone();
    let null: Vec<f64> = (0..ORDER_SHUFFLES)
        .map(|_| {
            for block in blocks {
                rng.shuffle(&mut shuffled[block.clone()]);
            }
            statistic(&shuffled)
        })
        .collect();
    let mean = null.iter().sum::<f64>() / null.len() as f64;
    let spread =
        (null.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (null.len() - 1) as f64).sqrt();
    let z = match spread > 0.0 {
        true => (observed - mean) / spread,
        // Every shuffle gives the same statistic (one value, or one row per block).
        false => 0.0,
    };
    let pattern = if equal_pairs { "grouped" } else { "trend" };
    (pattern, z)
}

/// The shuffles behind the column order statistics: 199 shuffles of every column of a
/// 32,561-row file are 100 million draws, too many for the blake3 stream of [`TrialRng`]
/// (which seeds this one). SplitMix64 is fixed here, so the draws are the same on every
/// platform and dependency version.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Fisher–Yates with Lemire's multiply-shift draw (its bias, below 2⁻³² for these
    /// sizes, cannot matter to a z-score).
    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = ((self.next_u64() >> 32) * (i as u64 + 1)) >> 32;
            items.swap(i, j as usize);
        }
    }
}

/// Ranks of a column's values (ties share their mean rank; missing or unparsable values
/// rank together below every number).
fn ranks_of(table: &Table, column: usize) -> Vec<f64> {
    let keys: Vec<f64> = table
        .rows
        .iter()
        .map(|row| {
            row[column]
                .trim()
                .parse::<f64>()
                .unwrap_or(f64::NEG_INFINITY)
        })
        .collect();
    let key = |r: usize| keys[r];
    let mut order: Vec<usize> = (0..table.n_rows()).collect();
    order.sort_by(|&a, &b| key(a).total_cmp(&key(b)));
    let mut ranks = vec![0.0; order.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && key(order[j + 1]) == key(order[i]) {
            j += 1;
        }
        let mean = (i + j) as f64 / 2.0;
        for &row in &order[i..=j] {
            ranks[row] = mean;
        }
        i = j + 1;
    }
    ranks
}

/// `blocks` cut further wherever `column` changes value.
fn split_by_runs(table: &Table, column: usize, blocks: &[Range<usize>]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    for block in blocks {
        let mut start = block.start;
        for i in block.start + 1..block.end {
            if table.rows[i][column] != table.rows[i - 1][column] {
                out.push(start..i);
                start = i;
            }
        }
        out.push(start..block.end);
    }
    out
}

/// Shards of [`SHARD_ROWS`] consecutive rows spread evenly over `n` rows, each with
/// [`PERMUTATIONS`] seeded reorderings that move rows only within their block. A shard
/// whose rows all sit in blocks of their own (nothing to permute) is left out.
fn draw_shards(n: usize, blocks: &[Range<usize>], dataset: &str, seed: u64) -> Vec<Shard> {
    let count = (n / SHARD_ROWS).min(MAX_SHARDS);
    let stride = n / count;
    let block_of = |row: usize| blocks.iter().position(|b| b.contains(&row)).unwrap_or(0);
    let mut shards = Vec::new();
    for index in 0..count {
        let rows: Vec<usize> = (index * stride..index * stride + SHARD_ROWS).collect();
        // Segments of the shard inside one block: the only places rows may move.
        let mut segments: Vec<Range<usize>> = Vec::new();
        let mut start = 0;
        for i in 1..=rows.len() {
            if i == rows.len() || block_of(rows[i]) != block_of(rows[i - 1]) {
                segments.push(start..i);
                start = i;
            }
        }
        if segments.iter().all(|s| s.len() < 2) {
            continue;
        }
        let mut rng = TrialRng::new(DrawKey {
            seed,
            dataset,
            test: TEST_ID,
            trial: index as u32,
            serialization: None,
        });
        let permutations = (0..PERMUTATIONS)
            .map(|_| {
                let mut order = rows.clone();
                for segment in &segments {
                    rng.shuffle(&mut order[segment.clone()]);
                }
                order
            })
            .collect();
        shards.push(Shard { rows, permutations });
    }
    shards
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::table::Column;

    fn table(columns: &[(&str, ColumnKind)], rows: Vec<Vec<String>>) -> Table {
        Table {
            source: "test.csv".into(),
            columns: columns
                .iter()
                .map(|(name, kind)| Column {
                    name: name.to_string(),
                    kind: *kind,
                    missing: 0,
                })
                .collect(),
            rows,
            missing_tokens: Vec::new(),
        }
    }

    /// A deterministic scramble of 0..n (no order left in it).
    fn scrambled(n: usize) -> Vec<usize> {
        (0..n).map(|i| (i * 37 + 11) % n).collect()
    }

    #[test]
    fn rank_sum_tail_is_the_exact_null_distribution() {
        // One shard, m = 19: P(rank ≥ r) = (20 − r) / 20.
        for r in 0..=19 {
            assert!((rank_sum_tail(r, 1, 19) - (20 - r) as f64 / 20.0).abs() < 1e-12);
        }
        // Two shards, m = 1: sums 0, 1, 1, 2.
        assert!((rank_sum_tail(2, 2, 1) - 0.25).abs() < 1e-12);
        assert!((rank_sum_tail(1, 2, 1) - 0.75).abs() < 1e-12);
        assert_eq!(rank_sum_tail(0, 10, 19), 1.0);
        assert!((rank_sum_tail(190, 10, 19) - 20f64.powi(-10)).abs() < 1e-25);
    }

    #[test]
    fn judge_ranks_each_shard_and_counts_ties_against_detection() {
        let canonical = [-10.0, -5.0];
        let permuted = vec![vec![-12.0, -10.0, -9.0], vec![-6.0, -7.0, -8.0]];
        let stats = judge(&canonical, &permuted).unwrap();
        assert_eq!(stats.ranks, vec![1, 3]);
        assert_eq!(stats.rank_sum, 4);
        // P(sum of two uniforms on 0..=3 ≥ 4) = (3 + 2 + 1) / 16.
        assert!((stats.p_value - 6.0 / 16.0).abs() < 1e-12);
        assert!((stats.mean_gap_nats - ((-10.0 + 31.0 / 3.0) + (-5.0 + 7.0)) / 2.0).abs() < 1e-12);
        assert!(judge(&[-1.0], &[vec![-2.0]]).is_none());
    }

    #[test]
    fn a_shuffled_table_is_permuted_whole() {
        let n = 120;
        let rows = scrambled(n)
            .into_iter()
            .map(|v| vec![v.to_string(), format!("{}", (v * 7) % 13)])
            .collect();
        let t = table(
            &[("x", ColumnKind::Integer), ("y", ColumnKind::Integer)],
            rows,
        );
        let plan = plan(&t, "t", 0).unwrap();
        assert!(plan.blocked_by.is_empty(), "{plan:?}");
        assert_eq!(plan.shards.len(), MAX_SHARDS);
        for shard in &plan.shards {
            assert_eq!(shard.permutations.len(), PERMUTATIONS);
            let mut sorted = shard.permutations[0].clone();
            sorted.sort_unstable();
            assert_eq!(sorted, shard.rows);
        }
        assert!(
            plan.shards
                .iter()
                .any(|s| s.permutations.iter().any(|p| p != &s.rows))
        );
    }

    #[test]
    fn a_sorted_number_or_an_id_is_refused() {
        let n = 100;
        let sorted = table(
            &[("id", ColumnKind::Integer), ("noise", ColumnKind::Integer)],
            (0..n)
                .map(|i| vec![(i * 3).to_string(), scrambled(n)[i].to_string()])
                .collect(),
        );
        let reason = plan(&sorted, "s", 0).unwrap_err();
        assert!(
            reason.contains("column `id`") && reason.contains("sorted"),
            "{reason}"
        );
    }

    #[test]
    fn a_class_sorted_table_is_permuted_within_its_classes() {
        // Three classes of 40 rows, written class by class (as iris is).
        let values = scrambled(120);
        let rows = (0..120)
            .map(|i| vec![values[i].to_string(), ["a", "b", "c"][i / 40].to_string()])
            .collect();
        let t = table(
            &[("x", ColumnKind::Integer), ("class", ColumnKind::Text)],
            rows,
        );
        let plan = plan(&t, "c", 0).unwrap();
        assert_eq!(plan.blocked_by, vec!["class".to_string()]);
        for shard in &plan.shards {
            for permutation in &shard.permutations {
                for (&from, &to) in shard.rows.iter().zip(permutation) {
                    assert_eq!(from / 40, to / 40, "a row left its class");
                }
            }
        }
    }

    #[test]
    fn shard_text_is_the_header_then_the_rows_in_the_given_order() {
        let t = table(
            &[("a", ColumnKind::Text), ("b", ColumnKind::Text)],
            vec![vec!["1".into(), "x,y".into()], vec!["2".into(), "z".into()]],
        );
        assert_eq!(shard_text(&t, &[1, 0]), "a,b\n2,z\n1,\"x,y\"\n");
    }
}
