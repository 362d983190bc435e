//! CSV loading for any user file: delimiter sniffing, quoting, BOM, CRLF, missing values,
//! typed columns, and one-line errors naming file, row and column.
//!
//! The parser is written here rather than taken from the `csv` crate because that crate
//! silently accepts an unclosed quote (swallowing the rest of the file into one cell), and
//! a contamination test run on a silently truncated table is worse than no run at all.
//!
//! Numbering in messages: "row N" counts data rows from 1 (the header is "the header");
//! "line L" counts physical lines of the file from 1.
//!
//! Size: over 700 lines because a quarter is tests of malformed input, one per message.

use std::fmt;
use std::path::{Path, PathBuf};

use memchr::{memchr, memchr_iter, memchr2};

use super::table::{Column, ColumnKind, Table};

/// Tokens that mean "missing" in every file, besides the empty cell. pandas reads the
/// same tokens as missing by default; `?` is deliberately absent because pandas kept it as
/// text in the paper's adult file, so the models were shown (and are expected to say) `?`.
pub const DEFAULT_MISSING: &[&str] = &["NA", "N/A", "NaN", "nan", "null", "NULL", "None"];

/// The `delimiter` value that means "runs of spaces or tabs" (UCI `.data` files such as
/// Statlog german). Quotes are not special in that mode.
pub const WHITESPACE: u8 = b' ';

/// Delimiters tried by the sniffer, in order of preference on a tie.
const SNIFFED_DELIMITERS: [u8; 4] = [b',', b';', b'\t', b'|'];

/// How many records the sniffer looks at, and how many bytes at most.
const SNIFF_RECORDS: usize = 20;
const SNIFF_BYTES: usize = 64 * 1024;

/// How to read one file.
#[derive(Debug, Clone, Default)]
pub struct CsvOptions {
    /// Field delimiter; sniffed from the first lines when `None`. [`WHITESPACE`] splits on
    /// runs of blanks.
    pub delimiter: Option<u8>,
    /// Column names when the file has no header row.
    pub header: Option<Vec<String>>,
    /// Trim spaces around unquoted cells.
    pub trim: bool,
    /// Extra missing-value tokens.
    pub missing: Vec<String>,
}

/// Parses a descriptor's `delimiter` setting: one of `,` `;` `|`, a tab, or `" "` /
/// `"whitespace"` for blank-separated files.
pub fn parse_delimiter(text: &str) -> Option<u8> {
    match text {
        "," => Some(b','),
        ";" => Some(b';'),
        "|" => Some(b'|'),
        "\t" | "tab" => Some(b'\t'),
        " " | "whitespace" => Some(WHITESPACE),
        _ => None,
    }
}

/// Everything that can be wrong with a delimited file. Each message is one line that names
/// the file and, where there is one, the row, line or column at fault.
#[derive(Debug, thiserror::Error)]
pub enum CsvError {
    #[error("{}: cannot read the file: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{}: line {line} is not valid UTF-8 (byte offset {offset}); re-save the file as UTF-8",
        path.display()
    )]
    InvalidUtf8 {
        path: PathBuf,
        line: usize,
        offset: usize,
    },
    #[error("{}: the file is empty; a dataset needs a header row and at least one data row", path.display())]
    Empty { path: PathBuf },
    #[error("{}: the file has a header row but no data rows", path.display())]
    NoDataRows { path: PathBuf },
    #[error(
        "{}: row {row} (line {line}) has {found} fields, the header has {expected}; \
         give every row one field per column (quote fields that contain {delimiter})",
        path.display()
    )]
    Ragged {
        path: PathBuf,
        row: usize,
        line: usize,
        found: usize,
        expected: usize,
        delimiter: DelimiterName,
    },
    #[error(
        "{}: {record}: unclosed quote starting at line {line}; close the quoted field, \
         or write a quote inside it as two quotes (\"\")",
        path.display()
    )]
    UnclosedQuote {
        path: PathBuf,
        record: RecordName,
        line: usize,
    },
    #[error(
        "{}: column name \"{name}\" is used by columns {positions} of the header; give each column its own name",
        path.display()
    )]
    DuplicateColumn {
        path: PathBuf,
        name: String,
        positions: String,
    },
    #[error(
        "{}: column {position} has an empty name in the header; name it (only the first column \
         may be unnamed, as a row index)",
        path.display()
    )]
    EmptyColumnName { path: PathBuf, position: usize },
}

/// "the header" or "row N", for messages.
#[derive(Debug, Clone, Copy)]
pub enum RecordName {
    Header,
    Row(usize),
}

impl fmt::Display for RecordName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordName::Header => f.write_str("the header"),
            RecordName::Row(n) => write!(f, "row {n}"),
        }
    }
}

/// A delimiter as a person would name it in a message (`','`, `tab`).
#[derive(Debug, Clone, Copy)]
pub struct DelimiterName(pub u8);

impl fmt::Display for DelimiterName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            b'\t' => f.write_str("a tab"),
            WHITESPACE => f.write_str("spaces"),
            other => write!(f, "'{}'", other as char),
        }
    }
}

/// Reads a delimited text file into a [`Table`].
pub fn read_table(path: &Path, options: &CsvOptions) -> anyhow::Result<Table> {
    let bytes = std::fs::read(path).map_err(|source| CsvError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_table(&bytes, path, options)
}

/// Parses the bytes of a delimited file; `source_path` is recorded in the table and named
/// in errors.
pub fn parse_table(
    bytes: &[u8],
    source_path: &Path,
    options: &CsvOptions,
) -> anyhow::Result<Table> {
    Ok(parse(bytes, source_path, options)?)
}

/// [`parse_table`] with the typed error, for callers that want to match on it.
pub fn parse(bytes: &[u8], source_path: &Path, options: &CsvOptions) -> Result<Table, CsvError> {
    let path = || source_path.to_path_buf();
    let bom = if bytes.starts_with(b"\xEF\xBB\xBF") {
        3
    } else {
        0
    };
    let body = &bytes[bom..];
    let text = std::str::from_utf8(body).map_err(|err| {
        let offset = err.valid_up_to();
        CsvError::InvalidUtf8 {
            path: path(),
            line: line_of_offset(body, offset),
            offset: offset + bom,
        }
    })?;
    if text.trim().is_empty() {
        return Err(CsvError::Empty { path: path() });
    }
    let delimiter = options.delimiter.unwrap_or_else(|| sniff_delimiter(text));
    let mut reader = RecordReader::new(text, delimiter, options.trim);

    let mut fields = Vec::new();
    let header = match &options.header {
        Some(names) => names.clone(),
        None => {
            if let Err(line) = reader.next_record(&mut fields) {
                return Err(CsvError::UnclosedQuote {
                    path: path(),
                    record: RecordName::Header,
                    line,
                });
            }
            std::mem::take(&mut fields)
        }
    };
    let names = column_names(header, source_path)?;
    let width = names.len();

    let mut rows: Vec<Vec<String>> = Vec::new();
    loop {
        let mut fields = Vec::with_capacity(width);
        let line = match reader.next_record(&mut fields) {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(line) => {
                let record = RecordName::Row(rows.len() + 1);
                return Err(CsvError::UnclosedQuote {
                    path: path(),
                    record,
                    line,
                });
            }
        };
        if fields.len() != width {
            return Err(CsvError::Ragged {
                path: path(),
                row: rows.len() + 1,
                line,
                found: fields.len(),
                expected: width,
                delimiter: DelimiterName(delimiter),
            });
        }
        rows.push(fields);
    }
    if rows.is_empty() {
        return Err(CsvError::NoDataRows { path: path() });
    }

    let mut missing_tokens: Vec<String> = DEFAULT_MISSING.iter().map(|t| t.to_string()).collect();
    for token in &options.missing {
        if !missing_tokens.contains(token) {
            missing_tokens.push(token.clone());
        }
    }
    let columns = infer_columns(names, &rows, &missing_tokens);
    Ok(Table {
        source: source_path.to_path_buf(),
        columns,
        rows,
        missing_tokens,
    })
}

/// Checks the header: names must be unique and non-empty, except an unnamed first column
/// (the row index pandas writes), which is called `Unnamed: 0` as pandas calls it.
fn column_names(header: Vec<String>, path: &Path) -> Result<Vec<String>, CsvError> {
    let mut names = header;
    for (position, name) in names.iter_mut().enumerate() {
        if name.trim().is_empty() {
            if position == 0 {
                *name = "Unnamed: 0".to_string();
            } else {
                return Err(CsvError::EmptyColumnName {
                    path: path.to_path_buf(),
                    position: position + 1,
                });
            }
        }
    }
    let mut seen = std::collections::HashSet::with_capacity(names.len());
    for name in &names {
        if !seen.insert(name.as_str()) {
            let positions: Vec<String> = names
                .iter()
                .enumerate()
                .filter(|(_, other)| *other == name)
                .map(|(p, _)| (p + 1).to_string())
                .collect();
            let positions = match positions.split_last() {
                Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
                None => String::new(),
            };
            return Err(CsvError::DuplicateColumn {
                path: path.to_path_buf(),
                name: name.clone(),
                positions,
            });
        }
    }
    Ok(names)
}

/// The 1-based physical line holding byte `offset` of `body`.
fn line_of_offset(body: &[u8], offset: usize) -> usize {
    let newline = line_break_byte(body);
    1 + memchr_iter(newline, &body[..offset]).count()
}

/// `\n` for LF and CRLF files, `\r` for old Mac files that use CR alone.
fn line_break_byte(bytes: &[u8]) -> u8 {
    if memchr(b'\n', bytes).is_none() && memchr(b'\r', bytes).is_some() {
        b'\r'
    } else {
        b'\n'
    }
}

/// Picks the delimiter that splits the first records into the same, largest number of
/// fields. Quotes are honoured so that a `,` inside `"Braund, Mr. Owen"` does not count.
fn sniff_delimiter(text: &str) -> u8 {
    let bytes = &text.as_bytes()[..text.len().min(SNIFF_BYTES)];
    let complete = bytes.len() == text.len();
    let mut per_record: Vec<[usize; SNIFFED_DELIMITERS.len()]> = Vec::new();
    let mut counts = [0usize; SNIFFED_DELIMITERS.len()];
    let mut in_quotes = false;
    let mut record_has_content = false;
    for &byte in bytes {
        match byte {
            b'"' => in_quotes = !in_quotes,
            b'\n' | b'\r' if !in_quotes => {
                if record_has_content {
                    per_record.push(counts);
                    if per_record.len() == SNIFF_RECORDS {
                        break;
                    }
                }
                counts = [0; SNIFFED_DELIMITERS.len()];
                record_has_content = false;
                continue;
            }
            _ if !in_quotes => {
                if let Some(k) = SNIFFED_DELIMITERS.iter().position(|&d| d == byte) {
                    counts[k] += 1;
                }
            }
            _ => {}
        }
        record_has_content = true;
    }
    // The last record counts only if the sample reached the end of the file (otherwise it
    // may be cut in the middle).
    if record_has_content && complete && per_record.len() < SNIFF_RECORDS {
        per_record.push(counts);
    }
    let Some(first) = per_record.first() else {
        return b',';
    };
    let consistent = |k: usize| first[k] > 0 && per_record.iter().all(|r| r[k] == first[k]);
    let best = (0..SNIFFED_DELIMITERS.len())
        .filter(|&k| consistent(k))
        .max_by(|&a, &b| first[a].cmp(&first[b]).then(b.cmp(&a)))
        // No delimiter is consistent (a ragged file): take the header's most frequent one so
        // that the ragged-row error names the right culprit.
        .or_else(|| {
            (0..SNIFFED_DELIMITERS.len())
                .filter(|&k| first[k] > 0)
                .max_by(|&a, &b| first[a].cmp(&first[b]).then(b.cmp(&a)))
        });
    best.map_or(b',', |k| SNIFFED_DELIMITERS[k])
}

/// Splits the text into records. Lines without a quote take a fast path (split on the
/// delimiter); others go through the quote-aware state machine.
struct RecordReader<'a> {
    text: &'a str,
    delimiter: u8,
    newline: u8,
    trim: bool,
    /// Byte position of the next record.
    pos: usize,
    /// Physical line number (1-based) at `pos`.
    line: usize,
}

impl<'a> RecordReader<'a> {
    fn new(text: &'a str, delimiter: u8, trim: bool) -> Self {
        let newline = line_break_byte(text.as_bytes());
        RecordReader {
            text,
            delimiter,
            newline,
            trim,
            pos: 0,
            line: 1,
        }
    }

    /// Reads the next non-blank record into `fields`; returns the line it starts on, or
    /// `None` at the end. `Err(line)` is an unclosed quote opened on that line.
    fn next_record(&mut self, fields: &mut Vec<String>) -> Result<Option<usize>, usize> {
        let bytes = self.text.as_bytes();
        let len = bytes.len();
        while self.pos < len {
            let line_end = memchr(self.newline, &bytes[self.pos..]).map_or(len, |k| self.pos + k);
            let mut content_end = line_end;
            if self.newline == b'\n' && content_end > self.pos && bytes[content_end - 1] == b'\r' {
                content_end -= 1;
            }
            let line = &self.text[self.pos..content_end];
            let start_line = self.line;
            // Blank lines are skipped, as pandas does (the UCI adult files end with one). The
            // first byte decides for almost every line, so the full scan is rare.
            let maybe_blank = line
                .as_bytes()
                .first()
                .is_none_or(|&b| b == b' ' || b == b'\t');
            if maybe_blank && line.bytes().all(|b| b == b' ' || b == b'\t') {
                self.pos = line_end + 1;
                self.line += 1;
                continue;
            }
            if self.delimiter == WHITESPACE {
                fields.extend(line.split_ascii_whitespace().map(String::from));
            } else if memchr(b'"', line.as_bytes()).is_none() {
                self.split_plain(line, fields);
            } else {
                self.pos = self.split_quoted(self.pos, fields)?;
                return Ok(Some(start_line));
            }
            self.pos = line_end + 1;
            self.line += 1;
            return Ok(Some(start_line));
        }
        Ok(None)
    }

    /// A line with no quote at all: every delimiter separates two cells.
    fn split_plain(&self, line: &str, fields: &mut Vec<String>) {
        // A plain byte loop: cells are short (adult averages 7 bytes), so a memchr call per
        // cell costs more than it saves, above all in debug builds.
        let bytes = line.as_bytes();
        let len = bytes.len();
        let mut start = 0;
        let mut i = 0;
        while i < len {
            if bytes[i] == self.delimiter {
                fields.push(self.cell(&line[start..i]));
                start = i + 1;
            }
            i += 1;
        }
        fields.push(self.cell(&line[start..]));
    }

    fn cell(&self, raw: &str) -> String {
        String::from(if self.trim { trim_blanks(raw) } else { raw })
    }

    /// RFC 4180 record starting at byte `start`: a field that starts with `"` runs to the
    /// next lone `"` (a doubled `""` is one quote) and may span lines; text after the
    /// closing quote is kept as written, as Python's csv module does. Returns the position
    /// after the record's line break.
    fn split_quoted(&mut self, start: usize, fields: &mut Vec<String>) -> Result<usize, usize> {
        let text = self.text;
        let bytes = text.as_bytes();
        let len = bytes.len();
        let mut i = start;
        loop {
            if self.trim {
                while i < len
                    && (bytes[i] == b' ' || bytes[i] == b'\t')
                    && bytes[i] != self.delimiter
                {
                    i += 1;
                }
            }
            let mut field = String::new();
            if i < len && bytes[i] == b'"' {
                let opened_on = self.line;
                i += 1;
                loop {
                    let Some(k) = memchr(b'"', &bytes[i..]) else {
                        return Err(opened_on);
                    };
                    let segment = &text[i..i + k];
                    self.line += memchr_iter(self.newline, segment.as_bytes()).count();
                    field.push_str(segment);
                    i += k + 1;
                    if i < len && bytes[i] == b'"' {
                        field.push('"');
                        i += 1;
                    } else {
                        break;
                    }
                }
                let end = self.unquoted_end(i);
                let tail = &text[i..end];
                field.push_str(if self.trim {
                    tail.trim_end_matches([' ', '\t'])
                } else {
                    tail
                });
                i = end;
            } else {
                let end = self.unquoted_end(i);
                let raw = &text[i..end];
                field.push_str(if self.trim { trim_blanks(raw) } else { raw });
                i = end;
            }
            fields.push(field);
            if i >= len {
                return Ok(len);
            }
            if bytes[i] == self.delimiter {
                i += 1;
                continue;
            }
            // A line break: `\r\n`, `\n`, or `\r` in a CR-only file.
            if self.newline == b'\n' && bytes[i] == b'\r' {
                i += 1;
            }
            self.line += 1;
            return Ok(i + 1);
        }
    }

    /// End of an unquoted stretch starting at `i`: the next delimiter or line break (before
    /// the `\r` of a CRLF), or the end of the text.
    fn unquoted_end(&self, i: usize) -> usize {
        let bytes = self.text.as_bytes();
        match memchr2(self.delimiter, self.newline, &bytes[i..]) {
            Some(k) => {
                let end = i + k;
                let crlf = bytes[end] == b'\n' && end > i && bytes[end - 1] == b'\r';
                if crlf { end - 1 } else { end }
            }
            None => bytes.len(),
        }
    }
}

fn trim_blanks(text: &str) -> &str {
    text.trim_matches([' ', '\t'])
}

/// What one cell could be; a column's kind is the join over its non-missing cells.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Seen {
    Nothing,
    Integer,
    Float,
    Boolean,
    Text,
}

/// One non-empty, non-missing cell; cheap first-byte tests come before any parsing.
fn classify(cell: &str) -> Seen {
    let first = cell.as_bytes()[0];
    if matches!(first, b't' | b'T' | b'f' | b'F') {
        let boolean = cell.eq_ignore_ascii_case("true") || cell.eq_ignore_ascii_case("false");
        return if boolean { Seen::Boolean } else { Seen::Text };
    }
    if !(first.is_ascii_digit() || first == b'-' || first == b'+' || first == b'.') {
        return Seen::Text;
    }
    if cell.parse::<i64>().is_ok() {
        Seen::Integer
    } else if cell.bytes().any(|b| b.is_ascii_digit()) && cell.parse::<f64>().is_ok() {
        // The digit check keeps `-inf` and similar words out of numeric columns.
        Seen::Float
    } else {
        Seen::Text
    }
}

fn join(a: Seen, b: Seen) -> Seen {
    match (a, b) {
        (Seen::Nothing, x) | (x, Seen::Nothing) => x,
        (x, y) if x == y => x,
        (Seen::Integer, Seen::Float) | (Seen::Float, Seen::Integer) => Seen::Float,
        _ => Seen::Text,
    }
}

/// Recognizes missing-value tokens; most cells are rejected on their first byte.
struct MissingTokens<'a> {
    tokens: &'a [String],
    first_bytes: [bool; 256],
}

impl<'a> MissingTokens<'a> {
    fn new(tokens: &'a [String]) -> Self {
        let mut first_bytes = [false; 256];
        for token in tokens {
            if let Some(&b) = token.as_bytes().first() {
                first_bytes[b as usize] = true;
            }
        }
        MissingTokens {
            tokens,
            first_bytes,
        }
    }

    fn matches(&self, cell: &str) -> bool {
        match cell.as_bytes().first() {
            None => true,
            Some(&b) => self.first_bytes[b as usize] && self.tokens.iter().any(|t| t == cell),
        }
    }
}

/// Column kinds and missing counts from every cell.
fn infer_columns(
    names: Vec<String>,
    rows: &[Vec<String>],
    missing_tokens: &[String],
) -> Vec<Column> {
    let missing_token = MissingTokens::new(missing_tokens);
    let width = names.len();
    let mut seen = vec![Seen::Nothing; width];
    let mut missing = vec![0usize; width];
    for row in rows {
        let row = row.as_slice();
        for c in 0..width {
            let cell = row[c].as_str();
            if missing_token.matches(cell) {
                missing[c] += 1;
            } else if !matches!(seen[c], Seen::Text) {
                seen[c] = join(seen[c], classify(cell));
            }
        }
    }
    names
        .into_iter()
        .zip(seen.into_iter().zip(missing))
        .map(|(name, (seen, missing))| {
            let kind = match seen {
                Seen::Nothing => ColumnKind::Empty,
                Seen::Integer => ColumnKind::Integer,
                Seen::Float => ColumnKind::Float,
                Seen::Boolean => ColumnKind::Boolean,
                Seen::Text => ColumnKind::Text,
            };
            Column {
                name,
                kind,
                missing,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(text: &str) -> Table {
        parse(text.as_bytes(), Path::new("t.csv"), &CsvOptions::default()).unwrap()
    }

    fn parse_err(text: &[u8]) -> String {
        parse(text, Path::new("t.csv"), &CsvOptions::default())
            .unwrap_err()
            .to_string()
    }

    fn kinds(table: &Table) -> Vec<ColumnKind> {
        table.columns.iter().map(|c| c.kind).collect()
    }

    #[test]
    fn infers_kinds_from_every_non_missing_cell() {
        let table = parse_str("i,f,b,t,e,mixed\n1,41.0,True,a,,1\n-2,.5,false,b,NA,x\n,7,,3,,2\n");
        use ColumnKind::*;
        assert_eq!(
            kinds(&table),
            vec![Integer, Float, Boolean, Text, Empty, Text]
        );
        assert_eq!(table.columns[0].missing, 1);
        assert_eq!(table.columns[4].missing, 3);
        // Cells keep the file's spelling.
        assert_eq!(table.rows[0][1], "41.0");
        assert_eq!(table.rows[1][1], ".5");
    }

    #[test]
    fn words_that_rust_parses_as_floats_stay_text() {
        let table = parse_str("a,b\ninf,1e3\n-infinity,2\n");
        assert_eq!(kinds(&table), vec![ColumnKind::Text, ColumnKind::Float]);
    }

    #[test]
    fn question_mark_is_text_unless_the_file_says_otherwise() {
        let table = parse_str("a\n?\nx\n");
        assert_eq!(table.columns[0].missing, 0);
        let options = CsvOptions {
            missing: vec!["?".into()],
            ..CsvOptions::default()
        };
        let table = parse(b"a\n?\n1\n", Path::new("t.csv"), &options).unwrap();
        assert_eq!(table.columns[0].missing, 1);
        assert_eq!(table.columns[0].kind, ColumnKind::Integer);
        assert!(table.is_missing("?"));
    }

    #[test]
    fn quoting_edge_cases() {
        let table = parse_str(
            "name,note,n\n\"Braund, Mr. Owen\",\"He said \"\"hi\"\"\",1\n\"two\nlines\",5'10\",2\n\"\",\"x\"y,3\n",
        );
        assert_eq!(
            table.rows[0],
            vec!["Braund, Mr. Owen", "He said \"hi\"", "1"]
        );
        assert_eq!(table.rows[1], vec!["two\nlines", "5'10\"", "2"]);
        assert_eq!(table.rows[2], vec!["", "xy", "3"]);
        assert_eq!(table.n_rows(), 3);
    }

    #[test]
    fn bom_semicolon_crlf_and_no_trailing_newline() {
        let table = parse(
            b"\xEF\xBB\xBFa;b\r\n1;\"x;y\"\r\n2;z",
            Path::new("t.csv"),
            &CsvOptions::default(),
        )
        .unwrap();
        assert_eq!(table.columns[0].name, "a");
        assert_eq!(table.rows, vec![vec!["1", "x;y"], vec!["2", "z"]]);
    }

    #[test]
    fn carriage_return_only_line_ends() {
        let table = parse_str("a,b\r1,2\r3,\"4\r5\"\r");
        assert_eq!(table.rows, vec![vec!["1", "2"], vec!["3", "4\r5"]]);
    }

    #[test]
    fn crlf_inside_quotes_is_kept_and_lines_are_counted() {
        let err = parse_err(b"a,b\r\n\"x\r\ny\",1\r\n1,2,3\r\n");
        assert!(
            err.contains("row 2 (line 4) has 3 fields, the header has 2"),
            "{err}"
        );
    }

    #[test]
    fn sniffs_tab_and_pipe_and_ignores_delimiters_inside_quotes() {
        assert_eq!(parse_str("a\tb\n1\t2\n").rows[0], vec!["1", "2"]);
        assert_eq!(parse_str("a|b\n1|2\n").rows[0], vec!["1", "2"]);
        assert_eq!(
            parse_str("a;b\n\"1,5\";2\n\"3,5\";4\n").rows[1],
            vec!["3,5", "4"]
        );
        assert_eq!(parse_str("only\nx\n").n_cols(), 1);
    }

    #[test]
    fn whitespace_delimiter_and_trim() {
        let options = CsvOptions {
            delimiter: Some(WHITESPACE),
            header: Some(vec!["a".into(), "b".into()]),
            ..CsvOptions::default()
        };
        let table = parse(b"A11  6\n A12 48 \n\n", Path::new("t.data"), &options).unwrap();
        assert_eq!(table.rows, vec![vec!["A11", "6"], vec!["A12", "48"]]);
        let options = CsvOptions {
            trim: true,
            header: Some(vec!["a".into(), "b".into()]),
            ..CsvOptions::default()
        };
        let table = parse(
            b"39, State-gov\n50,  \"Self, emp\" \n\n",
            Path::new("t.data"),
            &options,
        )
        .unwrap();
        assert_eq!(
            table.rows,
            vec![vec!["39", "State-gov"], vec!["50", "Self, emp"]]
        );
    }

    #[test]
    fn unnamed_first_column_is_a_row_index() {
        let table = parse_str(",Age\n0,67\n1,22\n");
        assert_eq!(table.columns[0].name, "Unnamed: 0");
    }

    #[test]
    fn errors_name_the_culprit() {
        assert_eq!(
            parse_err(b""),
            "t.csv: the file is empty; a dataset needs a header row and at least one data row"
        );
        assert_eq!(parse_err(b"\xEF\xBB\xBF\r\n"), parse_err(b""));
        assert_eq!(
            parse_err(b"a,b\n"),
            "t.csv: the file has a header row but no data rows"
        );
        assert!(
            parse_err(b"a,b\n1,2\n3\n")
                .starts_with("t.csv: row 2 (line 3) has 1 fields, the header has 2")
        );
        assert!(
            parse_err(b"a,b\n1,2\n\"3,4\n5,6\n")
                .starts_with("t.csv: row 2: unclosed quote starting at line 3")
        );
        assert!(
            parse_err(b"a,\"b\n1,2\n")
                .starts_with("t.csv: the header: unclosed quote starting at line 1")
        );
        assert_eq!(
            parse_err(b"a,b\n1,2\n3,\xff\n"),
            "t.csv: line 3 is not valid UTF-8 (byte offset 10); re-save the file as UTF-8"
        );
        assert!(parse_err(b"a,b,a,a\n1,2,3,4\n").contains("\"a\" is used by columns 1, 3 and 4"));
        assert!(parse_err(b"a,,c\n1,2,3\n").contains("column 2 has an empty name"));
    }
}
