//! The catalog of known datasets: shipped and user descriptors, and where their files live.
//!
//! Built-in descriptors and the shipped data files are compiled into the binary, so an
//! installed `tabcontam` knows the paper's datasets from any working directory, with no
//! source tree. Files are looked up, for each variant in the descriptor's order of
//! preference, in: the `--data-dir` / `TABCONTAM_DATA_DIR` directory, the user data
//! directory (`<home>/datasets`, see [`user_home`]), then the built-in files. The first
//! variant found anywhere wins, so pointing `--data-dir` at the paper's files makes them win
//! over the shipped stand-ins.
//!
//! A name `<dataset>:<rows>` (id `<dataset>-first<rows>`) is the dataset's first `rows`
//! rows: a real table small enough to train a calibration checkpoint on, read from the
//! same file.

use std::borrow::Cow;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::Dataset;
use super::descriptor::{DataFile, Descriptor};

/// `(file name, TOML text)` of every built-in descriptor.
const BUILTIN_DESCRIPTORS: &[(&str, &str)] = &[
    ("adult.toml", include_str!("../../datasets/adult.toml")),
    ("bank.toml", include_str!("../../datasets/bank.toml")),
    ("german.toml", include_str!("../../datasets/german.toml")),
    ("housing.toml", include_str!("../../datasets/housing.toml")),
    ("iris.toml", include_str!("../../datasets/iris.toml")),
    ("wine.toml", include_str!("../../datasets/wine.toml")),
    ("titanic.toml", include_str!("../../datasets/titanic.toml")),
    (
        "spaceship-titanic.toml",
        include_str!("../../datasets/spaceship-titanic.toml"),
    ),
    ("thyroid.toml", include_str!("../../datasets/thyroid.toml")),
];

/// `(file name, bytes)` of every shipped data file (`datasets/`, 5.7 MB), compiled in.
const BUILTIN_FILES: &[(&str, &[u8])] = &[
    ("adult.data", include_bytes!("../../datasets/adult.data")),
    (
        "california_housing.csv",
        include_bytes!("../../datasets/california_housing.csv"),
    ),
    (
        "german_credit.csv",
        include_bytes!("../../datasets/german_credit.csv"),
    ),
    ("iris.csv", include_bytes!("../../datasets/iris.csv")),
    ("titanic.csv", include_bytes!("../../datasets/titanic.csv")),
    ("wine.csv", include_bytes!("../../datasets/wine.csv")),
];

/// The compiled-in copy of a shipped data file.
pub fn builtin_file(name: &str) -> Option<&'static [u8]> {
    BUILTIN_FILES
        .iter()
        .find(|(file, _)| *file == name)
        .map(|(_, bytes)| *bytes)
}

/// Where a dataset's file was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A file on disk.
    Disk(PathBuf),
    /// A shipped file compiled into the binary.
    BuiltIn(&'static str),
}

impl Location {
    /// The path shown to people and recorded in tables: the file's path, or
    /// `(built-in) datasets/NAME` for a compiled-in file.
    pub fn display_path(&self) -> PathBuf {
        match self {
            Location::Disk(path) => path.clone(),
            Location::BuiltIn(name) => PathBuf::from(format!("(built-in) datasets/{name}")),
        }
    }

    /// The file's bytes.
    pub fn read(&self) -> anyhow::Result<Cow<'static, [u8]>> {
        match self {
            Location::Disk(path) => std::fs::read(path)
                .map(Cow::Owned)
                .map_err(|err| anyhow::anyhow!("{}: cannot read the file: {err}", path.display())),
            Location::BuiltIn(name) => builtin_file(name)
                .map(Cow::Borrowed)
                .ok_or_else(|| anyhow::anyhow!("no built-in data file named {name}")),
        }
    }
}

/// The user's tabcontam folder: `$TABCONTAM_HOME`, else `$XDG_DATA_HOME/tabcontam`, else
/// `~/.local/share/tabcontam`. `None` when no home directory is known.
pub fn user_home() -> Option<PathBuf> {
    let from_env = |key: &str| {
        std::env::var_os(key)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    from_env("TABCONTAM_HOME")
        .or_else(|| from_env("XDG_DATA_HOME").map(|d| d.join("tabcontam")))
        .or_else(|| from_env("HOME").map(|h| h.join(".local/share/tabcontam")))
}

/// Where imported and fetched datasets live: descriptors (`*.toml`) and files side by side.
pub fn user_datasets_dir() -> Option<PathBuf> {
    user_home().map(|home| home.join("datasets"))
}

/// The built-in descriptors, parsed once per process. They are checked by the test suite,
/// so a failure here is a bug in a shipped descriptor.
pub fn builtin_descriptors() -> anyhow::Result<Vec<Descriptor>> {
    builtins().clone().map_err(anyhow::Error::msg)
}

fn builtins() -> &'static Result<Vec<Descriptor>, String> {
    static PARSED: OnceLock<Result<Vec<Descriptor>, String>> = OnceLock::new();
    PARSED.get_or_init(|| {
        BUILTIN_DESCRIPTORS
            .iter()
            .map(|(file, text)| Descriptor::from_toml(text, &format!("built-in datasets/{file}")))
            .collect::<anyhow::Result<Vec<_>>>()
            .map_err(|err| format!("{err:#}"))
    })
}

/// Whether `name` is the id or an alias of a built-in dataset (imports may not take it).
pub fn is_builtin_name(name: &str) -> bool {
    let wanted = normalize(name);
    builtins()
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|d| normalize(&d.id) == wanted || d.aliases.iter().any(|a| normalize(a) == wanted))
}

/// How status output describes a file's checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChecksumStatus {
    Ok,
    Mismatch,
    /// The descriptor records no checksum for this file.
    Unknown,
}

/// blake3 of some bytes, as lowercase hex.
pub fn blake3_hex(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

impl ChecksumStatus {
    pub fn of(file: &DataFile, bytes: &[u8]) -> ChecksumStatus {
        match &file.blake3 {
            None => ChecksumStatus::Unknown,
            Some(expected) if expected.eq_ignore_ascii_case(&blake3_hex(bytes)) => {
                ChecksumStatus::Ok
            }
            Some(_) => ChecksumStatus::Mismatch,
        }
    }
}

/// All known descriptors plus the directories searched for their files.
pub struct Catalog {
    pub descriptors: Vec<Descriptor>,
    pub search_dirs: Vec<PathBuf>,
}

impl Catalog {
    /// Shipped descriptors, user descriptors, and the data directory given (flag or env).
    pub fn open(data_dir: Option<&Path>) -> anyhow::Result<Self> {
        let mut descriptors = builtin_descriptors()?;
        let user_dir = user_datasets_dir();
        if let Some(dir) = &user_dir {
            for descriptor in read_user_descriptors(dir)? {
                if let Some(existing) = descriptors.iter().find(|d| d.id == descriptor.id) {
                    anyhow::bail!(
                        "{}: id \"{}\" is already taken by the built-in dataset \"{}\"; rename the file's id",
                        dir.join(format!("{}.toml", descriptor.id)).display(),
                        descriptor.id,
                        existing.name
                    );
                }
                descriptors.push(descriptor);
            }
        }

        let mut search_dirs: Vec<PathBuf> = Vec::new();
        let candidates = data_dir.map(Path::to_path_buf).into_iter().chain(user_dir);
        for dir in candidates {
            if !search_dirs.contains(&dir) {
                search_dirs.push(dir);
            }
        }
        Ok(Catalog {
            descriptors,
            search_dirs,
        })
    }

    /// The descriptor with this id or alias; an unknown name lists the known ones.
    /// Case, `_`, `-` and spaces do not matter (`Spaceship_Titanic` finds `spaceship-titanic`).
    pub fn find(&self, name: &str) -> anyhow::Result<&Descriptor> {
        if let Some(exact) = self.descriptors.iter().find(|d| d.id == name) {
            return Ok(exact);
        }
        let wanted = normalize(name);
        let by_id = self.descriptors.iter().find(|d| normalize(&d.id) == wanted);
        let by_other_name = || {
            self.descriptors.iter().find(|d| {
                normalize(&d.name) == wanted
                    || d.aliases.iter().any(|alias| normalize(alias) == wanted)
            })
        };
        by_id.or_else(by_other_name).ok_or_else(|| {
            let known: Vec<&str> = self.descriptors.iter().map(|d| d.id.as_str()).collect();
            let near: Vec<&str> = known.iter().copied().filter(|id| !wanted.is_empty() && id.contains(&wanted)).collect();
            let hint = match near.as_slice() {
                [] => String::new(),
                near => format!("did you mean {}? ", near.join(" or ")),
            };
            anyhow::anyhow!(
                "unknown dataset \"{name}\"; {hint}known datasets: {} (see `tabcontam datasets list`)",
                known.join(", ")
            )
        })
    }

    /// The first variant of the descriptor whose file exists in a search directory or is
    /// built in, and where it is.
    pub fn locate<'d>(&self, descriptor: &'d Descriptor) -> Option<(&'d DataFile, Location)> {
        descriptor.files.iter().find_map(|file| {
            let on_disk = self
                .search_dirs
                .iter()
                .map(|dir| dir.join(&file.file))
                .find(|path| path.is_file())
                .map(Location::Disk);
            let built_in = || {
                BUILTIN_FILES
                    .iter()
                    .find(|(name, _)| *name == file.file)
                    .map(|(name, _)| Location::BuiltIn(name))
            };
            on_disk.or_else(built_in).map(|location| (file, location))
        })
    }

    /// Loads the first present file variant of a dataset.
    pub fn load(&self, name: &str) -> anyhow::Result<Dataset> {
        self.load_with_checksum(name).map(|(dataset, _)| dataset)
    }

    /// [`Catalog::load`], with the blake3 (hex) of the bytes it loaded: the file may be
    /// built in, so `dataset.table.source` is not always a path to read again.
    pub fn load_with_checksum(&self, name: &str) -> anyhow::Result<(Dataset, String)> {
        if let Some(parsed) = super::synth::parse_name(name) {
            let name = parsed.map_err(|e| anyhow::anyhow!(e))?;
            return load_synthetic(&name);
        }
        // A dataset of that exact name (an import called `race-first100`) comes first.
        if let Some((base, rows)) = first_rows_name(name).filter(|_| self.find(name).is_err()) {
            return self.load_first_rows(name, base, rows);
        }
        let descriptor = self.find(name)?;
        let (file, location) = self
            .locate(descriptor)
            .ok_or_else(|| self.not_found(descriptor))?;
        let bytes = location.read()?;
        let table = crate::dataset::csv::parse_table(
            &bytes,
            &location.display_path(),
            &file.csv_options(),
        )?;
        Ok((descriptor.resolve(file, table)?, blake3_hex(&bytes)))
    }

    /// The first `rows` rows of the dataset `base` (the name `name` asked for), as a
    /// dataset of its own id `<base id>-first<rows>`; the checksum is the whole file's.
    fn load_first_rows(
        &self,
        name: &str,
        base: &str,
        rows: usize,
    ) -> anyhow::Result<(Dataset, String)> {
        let (mut dataset, checksum) = self.load_with_checksum(base)?;
        let available = dataset.table.n_rows();
        if !(FIRST_ROWS_MIN..=available).contains(&rows) {
            anyhow::bail!(
                "dataset \"{name}\": {} has {available} rows; ask for {FIRST_ROWS_MIN} to {available} of them",
                dataset.id
            );
        }
        dataset.table.rows.truncate(rows);
        let table = &dataset.table;
        let missing: Vec<usize> = (0..table.n_cols())
            .map(|c| {
                table
                    .rows
                    .iter()
                    .filter(|row| table.is_missing(&row[c]))
                    .count()
            })
            .collect();
        for (column, missing) in dataset.table.columns.iter_mut().zip(missing) {
            column.missing = missing;
        }
        dataset.id = format!("{}{FIRST_ROWS_INFIX}{rows}", dataset.id);
        // Another table than the whole file: the full file's aliases do not name it.
        dataset.aliases.clear();
        Ok((dataset, checksum))
    }

    /// Why a dataset has no file, and what to do about it.
    pub fn not_found(&self, descriptor: &Descriptor) -> anyhow::Error {
        let dirs: Vec<String> = self
            .search_dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        anyhow::anyhow!(
            "no file for dataset \"{}\": looked for {} in {}{}; {}, or pass --data-dir DIR for a folder that holds it",
            descriptor.id,
            file_names(descriptor),
            dirs.join(", "),
            if dirs.is_empty() {
                "the built-in files"
            } else {
                " and the built-in files"
            },
            how_to_obtain(descriptor)
        )
    }
}

/// Fewer rows would leave tests without examples (test 7 shows 4 rows and a fifth), as for
/// synthetic tables.
const FIRST_ROWS_MIN: usize = super::synth::MIN_ROWS;
/// Between a dataset's id and the row count in a first-rows subset's id (`wine-first20`).
const FIRST_ROWS_INFIX: &str = "-first";

/// `(base name, rows)` of a first-rows name: `wine:20` as a spec writes it, or the id
/// `wine-first20` that cells and manifests carry; `None` for other names.
fn first_rows_name(name: &str) -> Option<(&str, usize)> {
    let digits = |text: &str| {
        (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
            .then(|| text.parse::<usize>().ok())
            .flatten()
    };
    if let Some((base, rows)) = name.rsplit_once(':') {
        return digits(rows).map(|rows| (base, rows));
    }
    let (base, rows) = name.rsplit_once(FIRST_ROWS_INFIX)?;
    Some((base, digits(rows)?))
}

/// Generates a synthetic dataset (SPEC §8 negatives) and loads it like a file of the catalog.
fn load_synthetic(name: &super::synth::SyntheticName) -> anyhow::Result<(Dataset, String)> {
    let synthetic = super::synth::generate_named(name);
    let descriptor = Descriptor::from_toml(&synthetic.descriptor_toml, &synthetic.id)?;
    let file = &descriptor.files[0];
    let table = crate::dataset::csv::parse_table(
        synthetic.csv.as_bytes(),
        Path::new(&format!("(generated) {}", synthetic.file_name)),
        &file.csv_options(),
    )?;
    let checksum = blake3_hex(synthetic.csv.as_bytes());
    Ok((descriptor.resolve(file, table)?, checksum))
}

/// The file names a dataset may have, in order of preference (`bank.csv or bank-full.csv`).
pub fn file_names(descriptor: &Descriptor) -> String {
    let names: Vec<&str> = descriptor.files.iter().map(|f| f.file.as_str()).collect();
    names.join(" or ")
}

/// How a person gets a missing file: `fetch` when a variant has a download URL, else the
/// page to download it from by hand (Kaggle needs a login, UCI serves some sets as zips).
pub fn how_to_obtain(descriptor: &Descriptor) -> String {
    if descriptor.files.iter().any(|f| f.url.is_some()) {
        return format!("run `tabcontam datasets fetch {}`", descriptor.id);
    }
    match descriptor.files.iter().find_map(|f| f.page.as_deref()) {
        Some(page) => format!("download it from {page}"),
        None => "download it from its source".to_string(),
    }
}

/// `<dir>/*.toml`, in file-name order; a missing folder holds none.
fn read_user_descriptors(dir: &Path) -> anyhow::Result<Vec<Descriptor>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => anyhow::bail!("{}: cannot list user datasets: {err}", dir.display()),
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    paths.sort();
    let mut descriptors: Vec<Descriptor> = Vec::with_capacity(paths.len());
    for path in paths {
        let text = std::fs::read_to_string(&path).map_err(|err| {
            anyhow::anyhow!("{}: cannot read the descriptor: {err}", path.display())
        })?;
        let descriptor = Descriptor::from_toml(&text, &path.display().to_string())?;
        if descriptors.iter().any(|d| d.id == descriptor.id) {
            anyhow::bail!(
                "{}: id \"{}\" is used by another user descriptor; rename one",
                path.display(),
                descriptor.id
            );
        }
        descriptors.push(descriptor);
    }
    Ok(descriptors)
}

/// Lowercase with `_` and spaces read as `-`, so that the ways people write a name match.
fn normalize(name: &str) -> String {
    name.trim().to_lowercase().replace(['_', ' '], "-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_descriptors_parse_and_cover_the_paper() {
        let ids: Vec<String> = builtin_descriptors()
            .unwrap()
            .into_iter()
            .map(|d| d.id)
            .collect();
        assert_eq!(
            ids,
            [
                "adult",
                "bank",
                "german",
                "housing",
                "iris",
                "wine",
                "titanic",
                "spaceship-titanic",
                "thyroid"
            ]
        );
    }

    #[test]
    fn first_rows_name_a_real_table_small_enough_to_train_on() {
        assert_eq!(first_rows_name("wine:20"), Some(("wine", 20)));
        assert_eq!(first_rows_name("wine-first20"), Some(("wine", 20)));
        assert_eq!(
            first_rows_name("spaceship-titanic:40"),
            Some(("spaceship-titanic", 40))
        );
        assert_eq!(first_rows_name("wine"), None);
        assert_eq!(first_rows_name("spaceship-titanic"), None);
        assert_eq!(first_rows_name("wine:x"), None);
        let catalog = Catalog::open(None).unwrap();
        let (whole, whole_checksum) = catalog.load_with_checksum("wine").unwrap();
        for name in ["wine:20", "wine-first20"] {
            let (first, checksum) = catalog.load_with_checksum(name).unwrap();
            assert_eq!(first.id, "wine-first20");
            assert_eq!(first.table.rows, whole.table.rows[..20].to_vec());
            let names = |d: &Dataset| {
                d.table
                    .columns
                    .iter()
                    .map(|c| c.name.clone())
                    .collect::<Vec<_>>()
            };
            assert_eq!(names(&first), names(&whole));
            assert_eq!(
                (first.target, checksum),
                (whole.target.clone(), whole_checksum.clone())
            );
        }
        let too_many = catalog.load("wine:100000").unwrap_err().to_string();
        assert!(
            too_many.contains("\"wine:100000\"") && too_many.contains("rows"),
            "{too_many}"
        );
        assert!(catalog.load("wine:3").is_err());
        assert!(
            catalog
                .load("no-such-table:20")
                .unwrap_err()
                .to_string()
                .contains("unknown dataset")
        );
    }

    #[test]
    fn find_accepts_ids_aliases_and_spellings() {
        let catalog = Catalog {
            descriptors: builtin_descriptors().unwrap(),
            search_dirs: Vec::new(),
        };
        assert_eq!(
            catalog.find("Spaceship_Titanic").unwrap().id,
            "spaceship-titanic"
        );
        assert_eq!(catalog.find("adult income").unwrap().id, "adult");
        assert_eq!(catalog.find("thyroid_diff").unwrap().id, "thyroid");
        assert_eq!(catalog.find("california housing").unwrap().id, "housing");
        let err = catalog.find("adlt").unwrap_err().to_string();
        assert!(
            err.contains("unknown dataset \"adlt\"") && err.contains("adult, bank"),
            "{err}"
        );
        assert!(err.contains("tabcontam datasets list"), "{err}");
    }

    #[test]
    fn every_shipped_data_file_is_built_in_and_identical() {
        // Descriptors name files; every one shipped in datasets/ must be compiled in, so an
        // installed binary finds what a checkout finds.
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("datasets");
        let mut found = 0;
        for descriptor in builtin_descriptors().unwrap() {
            for file in &descriptor.files {
                let path = shipped.join(&file.file);
                if path.is_file() {
                    let built_in = builtin_file(&file.file)
                        .unwrap_or_else(|| panic!("{} is shipped but not built in", file.file));
                    assert!(std::fs::read(&path).unwrap() == built_in, "{}", file.file);
                    found += 1;
                }
            }
        }
        assert_eq!(found, BUILTIN_FILES.len());
    }

    #[test]
    fn built_in_files_load_with_no_search_directory() {
        let catalog = Catalog {
            descriptors: builtin_descriptors().unwrap(),
            search_dirs: Vec::new(),
        };
        let iris = catalog.load("iris").unwrap();
        assert_eq!(
            (iris.variant.as_str(), iris.table.n_rows()),
            ("tabmemcheck", 150)
        );
        assert_eq!(
            iris.table.source,
            PathBuf::from("(built-in) datasets/iris.csv")
        );
        let err = catalog.not_found(catalog.find("bank").unwrap()).to_string();
        assert!(err.contains("in the built-in files;"), "{err}");
    }

    #[test]
    fn descriptor_errors_name_the_file_line_and_key() {
        let text = include_str!("../../datasets/iris.toml")
            .replace("target = \"target\"", "tagret = \"target\"");
        let err = Descriptor::from_toml(&text, "my.toml")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("my.toml: line "), "{err}");
        assert!(err.contains("tagret"), "{err}");
    }
}
