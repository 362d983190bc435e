//! Plain-text tables for the terminal: space-aligned columns, the last one unpadded.

use std::io::Write;

/// Writes rows as columns aligned with two spaces between them; each line is trimmed at the
/// end, so the last column is never padded.
pub fn write_aligned<R: AsRef<[String]>>(
    out: &mut (impl Write + ?Sized),
    rows: &[R],
) -> std::io::Result<()> {
    let columns = rows.iter().map(|r| r.as_ref().len()).max().unwrap_or(0);
    let mut widths = vec![0usize; columns];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row.as_ref()) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for row in rows {
        let mut line = String::new();
        for (cell, width) in row.as_ref().iter().zip(&widths) {
            line.push_str(cell);
            line.extend(std::iter::repeat_n(' ', width - cell.chars().count() + 2));
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_lines_end_without_padding() {
        let rows = vec![
            vec!["a".to_string(), "bb".into(), "c".into()],
            vec!["ccc".to_string(), "d".into(), "eeee".into()],
        ];
        let mut out = Vec::new();
        write_aligned(&mut out, &rows).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "a    bb  c\nccc  d   eeee\n"
        );
    }
}
