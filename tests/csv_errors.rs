//! Bad CSV files given to `tabcontam datasets import`: each fails with one line naming the
//! file and the row, line or column at fault, without a panic and without writing anything;
//! good but unusual files (BOM, `;`, CRLF, a pandas row index) are accepted.

#[path = "support/cli_env.rs"]
mod cli_env;
#[path = "support/mock_server.rs"]
mod mock_server;

use std::path::{Path, PathBuf};
use std::process::Output;

use cli_env::{Env, one_line_error, succeeded};

/// Imports into the environment's private user data directory.
trait Imports {
    fn import(&self, file: &Path, name: &str, target: &str) -> Output;
    fn written(&self) -> Vec<PathBuf>;
    fn rejects(&self, name: &str, bytes: &[u8], target: &str, expected: &str) -> String;
}

impl Imports for Env {
    fn import(&self, file: &Path, name: &str, target: &str) -> Output {
        self.run(&[
            "datasets",
            "import",
            file.to_str().unwrap(),
            "--name",
            name,
            "--target",
            target,
        ])
    }

    /// Everything under the user data directory (temporary files included).
    fn written(&self) -> Vec<PathBuf> {
        let dir = self.home().join("datasets");
        match std::fs::read_dir(&dir) {
            Ok(entries) => entries.map(|e| e.unwrap().path()).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Imports `bytes` and checks the failure: exit code, one stderr line that names the file
    /// and contains `expected`, no panic, nothing written. Returns the message.
    fn rejects(&self, name: &str, bytes: &[u8], target: &str, expected: &str) -> String {
        let path = self.file(name, bytes);
        let output = self.import(&path, "bad-input", target);
        assert!(
            std::str::from_utf8(&output.stderr).is_ok(),
            "{name}: stderr"
        );
        let message = one_line_error(&output, &[path.to_str().unwrap(), expected]);
        assert!(message.starts_with("error: "), "{message}");
        assert!(
            self.written().is_empty(),
            "something was written: {:?}",
            self.written()
        );
        message
    }
}

/// A 15-column file whose data row `bad_row` has 14 fields.
fn ragged_file(bad_row: usize) -> Vec<u8> {
    let header: Vec<String> = (1..=15).map(|c| format!("c{c}")).collect();
    let mut text = header.join(",") + "\n";
    for row in 1..=20 {
        let width = if row == bad_row { 14 } else { 15 };
        let cells: Vec<String> = (0..width).map(|c| (row * 100 + c).to_string()).collect();
        text += &(cells.join(",") + "\n");
    }
    text.into_bytes()
}

#[test]
fn ragged_row_names_row_line_and_counts() {
    let env = Env::new();
    env.rejects(
        "ragged.csv",
        &ragged_file(17),
        "c1",
        "row 17 (line 18) has 14 fields, the header has 15",
    );
}

#[test]
fn unclosed_quote_names_the_row_and_its_line() {
    let env = Env::new();
    let text = b"name,kind\n\"a\",x\nb,y\n\"c, d,z\ne,x\nf,y\n";
    env.rejects(
        "quote.csv",
        text,
        "kind",
        "row 3: unclosed quote starting at line 4",
    );
}

#[test]
fn invalid_utf8_names_line_and_offset() {
    let env = Env::new();
    let mut bytes = b"name,kind\na,x\nb,y\nc,z\nd".to_vec();
    let offset = bytes.len();
    bytes.extend_from_slice(b"\xe9t\xe9,x\n");
    let message = env.rejects("latin1.csv", &bytes, "kind", "line 5 is not valid UTF-8");
    assert!(
        message.contains(&format!(
            "(byte offset {offset}); re-save the file as UTF-8"
        )),
        "{message}"
    );
}

#[test]
fn empty_and_blank_files() {
    let env = Env::new();
    env.rejects("empty.csv", b"", "x", "the file is empty");
    env.rejects(
        "blank.csv",
        b"\xEF\xBB\xBF\r\n\r\n",
        "x",
        "the file is empty",
    );
}

#[test]
fn header_only_file() {
    let env = Env::new();
    env.rejects(
        "header.csv",
        b"age,income\n",
        "income",
        "the file has a header row but no data rows",
    );
}

#[test]
fn duplicate_column_names_are_named_with_their_positions() {
    let env = Env::new();
    env.rejects(
        "dup.csv",
        b"age,income,age\n1,x,2\n",
        "income",
        "column name \"age\" is used by columns 1 and 3",
    );
}

#[test]
fn empty_header_name_after_the_first_column() {
    let env = Env::new();
    env.rejects(
        "noname.csv",
        b"age,,income\n1,2,x\n",
        "income",
        "column 2 has an empty name in the header",
    );
}

#[test]
fn missing_target_lists_the_columns() {
    let env = Env::new();
    env.rejects(
        "target.csv",
        b"age,income\n1,x\n2,y\n",
        "incme",
        "target column \"incme\" does not exist; available columns: age, income",
    );
}

#[test]
fn target_with_too_many_values_asks_for_a_categorical_one() {
    let env = Env::new();
    let mut text = String::from("id,label\n");
    for i in 0..30 {
        text += &format!("{i},v{i}\n");
    }
    env.rejects(
        "many.csv",
        text.as_bytes(),
        "label",
        "has 30 distinct values",
    );
}

#[test]
fn unreadable_file() {
    let env = Env::new();
    let path = env.path("absent.csv");
    let output = env.import(&path, "absent", "x");
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(!output.status.success());
    assert!(
        stderr.contains(&format!("{}: cannot read the file", path.display())),
        "{stderr}"
    );
    assert!(env.written().is_empty());
}

#[test]
fn builtin_names_are_refused() {
    let env = Env::new();
    let path = env.file("mine.csv", b"a,b\n1,x\n2,y\n");
    for name in ["adult", "thyroid_diff"] {
        let output = env.import(&path, name, "b");
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert!(!output.status.success());
        assert!(stderr.contains("is a built-in dataset"), "{stderr}");
    }
    assert!(env.written().is_empty());
}

#[test]
fn bom_semicolon_crlf_file_is_imported_and_listed() {
    let env = Env::new();
    let text = "\u{feff}id;city;score;passed\r\n1;Namur;12,5;yes\r\n2;\"Li\u{e8}ge; centre\";8;no\r\n3;Namur;15;yes\r\n";
    let path = env.file("grades.csv", text.as_bytes());
    let output = env.import(&path, "grades", "passed");
    let stdout = succeeded(&output);
    assert!(
        stdout.contains("imported grades: 3 rows x 4 columns, target passed (2 classes)"),
        "{stdout}"
    );

    // The copy is byte-identical and the descriptor is a sound user descriptor.
    let dir = env.home().join("datasets");
    assert_eq!(
        std::fs::read(dir.join("grades.csv")).unwrap(),
        text.as_bytes()
    );
    let descriptor = tabcontam::dataset::Descriptor::from_toml(
        &std::fs::read_to_string(dir.join("grades.toml")).unwrap(),
        "grades.toml",
    )
    .unwrap();
    assert_eq!(descriptor.target, "passed");
    // `score` reads as text: `12,5` is not a number in a `;` file (no decimal commas).
    assert_eq!(descriptor.categorical, ["passed", "city", "score"]);
    assert_eq!(descriptor.completion_feature.as_deref(), Some("id"));
    assert_eq!(descriptor.classification.answers.len(), 2);

    let list: serde_json::Value =
        serde_json::from_str(&env.ok(&["datasets", "list", "--json"])).unwrap();
    let grades = list
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "grades")
        .expect("grades listed");
    assert_eq!(grades["rows"], 3);
    assert_eq!(grades["columns"], 4);
    assert_eq!(grades["checksum"], "ok");
    assert_eq!(grades["builtin"], false);

    let output = env.run(&["datasets", "show", "grades", "--json"]);
    let shown: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(shown["head"][1][1], "Li\u{e8}ge; centre");
    assert_eq!(shown["columns"][2]["kind"], "text");

    // Importing again needs --force; a failed import leaves the first one intact.
    let again = env.import(&path, "grades", "passed");
    assert!(String::from_utf8_lossy(&again.stderr).contains("pass --force"));
    let bad = env.file("bad.csv", b"a,b\n1\n");
    let output = env.run(&[
        "datasets",
        "import",
        bad.to_str().unwrap(),
        "--name",
        "grades",
        "--target",
        "b",
        "--force",
    ]);
    assert!(!output.status.success());
    assert_eq!(
        std::fs::read(dir.join("grades.csv")).unwrap(),
        text.as_bytes()
    );
    let mut names: Vec<String> = env
        .written()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into())
        .collect();
    names.sort();
    assert_eq!(names, ["grades.csv", "grades.toml"]);
}

#[test]
fn pandas_row_index_is_dropped_on_import() {
    let env = Env::new();
    let path = env.file(
        "credit.csv",
        b",Age,Saving accounts,Risk\n0,67,NA,good\n1,22,little,bad\n2,49,little,good\n",
    );
    let output = env.import(&path, "credit", "Risk");
    succeeded(&output);
    let output = env.run(&["datasets", "show", "credit", "--json"]);
    let shown: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let names: Vec<&str> = shown["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Age", "Saving accounts", "Risk"]);
    assert_eq!(shown["columns"][1]["missing"], 1);
}
