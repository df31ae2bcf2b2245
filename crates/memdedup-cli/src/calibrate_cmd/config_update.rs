//! Writing recommended thresholds into `memdedup.toml`, keeping the rest of the file (its
//! comments, order and other keys) as it was.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use memdedup::{ConfigFile, DeduplicationConfig};
use toml_edit::{DocumentMut, InlineTable, Item, TableLike, Value};

use crate::output::write_output;

/// The thresholds to set: `[dedup] default_threshold` and `[dedup.thresholds] <namespace>`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ThresholdUpdate {
    pub default_threshold: Option<f64>,
    pub namespaces: BTreeMap<String, f64>,
}

impl ThresholdUpdate {
    pub(crate) fn is_empty(&self) -> bool {
        self.default_threshold.is_none() && self.namespaces.is_empty()
    }
}

/// `text` (a config file, empty for a new one) with `update` applied; everything else is
/// kept byte for byte. `origin` names the file in errors.
pub(crate) fn apply(text: &str, update: &ThresholdUpdate, origin: &Path) -> Result<String> {
    let origin = origin.display();
    let mut doc: DocumentMut = text.parse().map_err(|e| anyhow!("{origin}: not valid TOML: {e}"))?;
    let created = !doc.contains_key("dedup");
    let dedup = doc.entry("dedup").or_insert_with(toml_edit::table);
    if let Some(table) = dedup.as_table_mut() {
        // A `[dedup]` header only when it gets a key of its own (or the file had one).
        if created || update.default_threshold.is_some() {
            table.set_implicit(update.default_threshold.is_none());
        }
    }
    let inline = dedup.is_inline_table();
    let dedup = dedup.as_table_like_mut().ok_or_else(|| anyhow!("{origin}: `dedup` is not a table"))?;
    if let Some(threshold) = update.default_threshold {
        set_number(dedup, "default_threshold", threshold);
    }
    if !update.namespaces.is_empty() {
        let empty = if inline { Item::Value(Value::InlineTable(InlineTable::new())) } else { toml_edit::table() };
        let thresholds = dedup.entry("thresholds").or_insert(empty);
        let thresholds =
            thresholds.as_table_like_mut().ok_or_else(|| anyhow!("{origin}: `dedup.thresholds` is not a table"))?;
        for (namespace, &threshold) in &update.namespaces {
            set_number(thresholds, namespace, threshold);
        }
    }
    Ok(doc.to_string())
}

/// Sets `key` to `number`, keeping the comment and spacing around an existing value.
fn set_number(table: &mut dyn TableLike, key: &str, number: f64) {
    match table.get_mut(key).and_then(Item::as_value_mut) {
        Some(value) => {
            let decor = value.decor().clone();
            *value = Value::from(number);
            *value.decor_mut() = decor;
        }
        None => {
            table.insert(key, toml_edit::value(number));
        }
    }
}

/// Applies `update` to the config file at `path` (created when missing) atomically, after
/// checking that the result loads; then loads it again from disk and checks the values.
/// Returns warnings for values that `SUBCOG_DEDUP_*` variables override.
pub(crate) fn write(path: &Path, update: &ThresholdUpdate) -> Result<Vec<String>> {
    let name = path.display();
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("cannot read {name}")),
    };
    let updated = apply(&text, update, path)?;
    ConfigFile::parse(&updated, path)
        .with_context(|| format!("{name} would not load with the new thresholds; nothing written"))?;
    write_output(path, &updated)?;

    let loaded = ConfigFile::load(Some(path)).with_context(|| format!("{name} was written but does not load"))?;
    let table: toml::Table = updated.parse().with_context(|| format!("{name} was written but does not parse"))?;
    let mut from_file = DeduplicationConfig::default();
    from_file.apply_toml(&table, &name.to_string()).with_context(|| format!("{name} was written but does not load"))?;
    let in_force = loaded.dedup_config().with_context(|| format!("{name} was written but does not load"))?;
    let mut warnings = Vec::new();
    let expected = update.default_threshold.map(|t| ("default_threshold".to_owned(), None, t));
    let expected = expected
        .into_iter()
        .chain(update.namespaces.iter().map(|(ns, &t)| (format!("thresholds.{ns}"), Some(ns.as_str()), t)));
    for (key, namespace, threshold) in expected {
        let (read, used) = match namespace {
            Some(ns) => (from_file.threshold_for(ns), in_force.threshold_for(ns)),
            None => (from_file.default_threshold, in_force.default_threshold),
        };
        if (f64::from(read) - threshold).abs() > 1e-6 {
            bail!("{name} was written but reads dedup.{key} as {read}, not {threshold}");
        }
        if (f64::from(used) - threshold).abs() > 1e-6 {
            warnings.push(format!(
                "dedup.{key} = {threshold} is overridden by a SUBCOG_DEDUP_* environment variable ({used} is in force)"
            ));
        }
    }
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(default: Option<f64>, namespaces: &[(&str, f64)]) -> ThresholdUpdate {
        ThresholdUpdate {
            default_threshold: default,
            namespaces: namespaces.iter().map(|&(ns, t)| (ns.to_owned(), t)).collect(),
        }
    }

    fn applied(text: &str, update: &ThresholdUpdate) -> String {
        apply(text, update, Path::new("memdedup.toml")).unwrap()
    }

    #[test]
    fn a_new_file_gets_both_tables() {
        let text = applied("", &update(Some(0.83), &[("lessons", 0.8)]));
        assert_eq!(text, "[dedup]\ndefault_threshold = 0.83\n\n[dedup.thresholds]\nlessons = 0.8\n");
        assert!(ConfigFile::parse(&text, Path::new("memdedup.toml")).is_ok());
        let text = applied("", &update(None, &[("lessons", 0.8)]));
        assert_eq!(text, "[dedup.thresholds]\nlessons = 0.8\n");
        let text = applied("[dedup]\n", &update(None, &[("lessons", 0.8)]));
        assert_eq!(text, "[dedup]\n\n[dedup.thresholds]\nlessons = 0.8\n");
    }

    #[test]
    fn comments_order_and_other_keys_are_kept() {
        let before = "# my settings\n[store]\ndb = \"/tmp/x.db\" # the db\n\n[dedup]\n# tuned by hand\ndefault_threshold = 0.9 # old\ntime_window_secs = 60\n\n[dedup.thresholds]\ndecisions = 0.92\n";
        let after = applied(before, &update(Some(0.83), &[("lessons", 0.8), ("decisions", 0.85)]));
        assert_eq!(
            after,
            "# my settings\n[store]\ndb = \"/tmp/x.db\" # the db\n\n[dedup]\n# tuned by hand\ndefault_threshold = 0.83 # old\ntime_window_secs = 60\n\n[dedup.thresholds]\ndecisions = 0.85\nlessons = 0.8\n"
        );
    }

    #[test]
    fn an_implicit_or_inline_dedup_table_is_filled_in() {
        let after = applied("[dedup.thresholds]\nops = 0.9\n", &update(Some(0.8), &[]));
        let config = ConfigFile::parse(&after, Path::new("memdedup.toml")).unwrap();
        let dedup = config.dedup_config().unwrap();
        assert_eq!((dedup.default_threshold, dedup.threshold_for("ops")), (0.8, 0.9), "{after}");
        let after = applied("dedup = { enabled = true }\n", &update(Some(0.8), &[("ops", 0.85)]));
        let dedup = ConfigFile::parse(&after, Path::new("memdedup.toml")).unwrap().dedup_config().unwrap();
        assert_eq!((dedup.default_threshold, dedup.threshold_for("ops")), (0.8, 0.85), "{after}");
    }

    #[test]
    fn a_file_that_is_not_toml_or_a_dedup_that_is_no_table_is_an_error() {
        let err = apply("[dedup\n", &update(Some(0.8), &[]), Path::new("m.toml")).unwrap_err().to_string();
        assert!(err.starts_with("m.toml: not valid TOML"), "{err}");
        let err = apply("dedup = 3\n", &update(Some(0.8), &[]), Path::new("m.toml")).unwrap_err().to_string();
        assert!(err.contains("`dedup` is not a table"), "{err}");
    }

    #[test]
    fn write_creates_replaces_and_checks_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memdedup.toml");
        write(&path, &update(Some(0.83), &[])).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "[dedup]\ndefault_threshold = 0.83\n");
        // A namespace the loader refuses leaves the file as it was.
        let err = write(&path, &update(None, &[("bad namespace!", 0.8)])).unwrap_err();
        assert!(format!("{err:#}").contains("nothing written"), "{err:#}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "[dedup]\ndefault_threshold = 0.83\n");
    }
}
