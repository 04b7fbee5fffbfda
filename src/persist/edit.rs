//! Writing a change of the running configuration into the admin's file
//! with `toml_edit`: only the tables and keys that differ between the
//! configuration before and after the change are touched, so comments,
//! order and layout of everything else stay as the admin wrote them.
//!
//! Targets are matched by name (case-insensitively) and LUNs by id, in
//! `[[targets]]` / `[[targets.luns]]` arrays of tables or inline arrays.
//! A changed key gets its new value and keeps its comment; a removed key,
//! LUN or target is deleted; an added LUN or target is appended without
//! the keys that hold their default.

use toml_edit::{ArrayOfTables, DocumentMut, Item, Table, TableLike};

use crate::config::{Config, LunSettings, TargetSettings};

/// Why a file could not be updated.
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    #[error("the file is not valid TOML: {0}")]
    Parse(#[from] toml_edit::TomlError),
    #[error("cannot write the configuration as TOML: {0}")]
    Serialize(#[from] toml::ser::Error),
    #[error("{0}")]
    Shape(String),
}

pub(super) type Result<T, E = EditError> = std::result::Result<T, E>;

/// `text` (a configuration file) with the change from `old` to `new`
/// written into it.
pub fn update(text: &str, old: &Config, new: &Config) -> Result<String> {
    let mut doc: DocumentMut = text.parse()?;
    let (ov, nv) = (as_table(old)?, as_table(new)?);
    let src = source(new)?;
    merge(doc.as_table_mut(), &ov, &nv, &src, &["targets"]);
    let root = doc.as_table_mut();
    for t in &old.targets {
        if !new
            .targets
            .iter()
            .any(|n| n.iqn.eq_ignore_ascii_case(&t.iqn))
        {
            if let Some(list) = root.get_mut("targets") {
                remove_where(list, |x| is_target(x, &t.iqn));
            }
        }
    }
    for t in &new.targets {
        let before = old
            .targets
            .iter()
            .find(|o| o.iqn.eq_ignore_ascii_case(&t.iqn));
        let in_doc = root
            .get_mut("targets")
            .and_then(|l| find_where(l, |x| is_target(x, &t.iqn)));
        match (before, in_doc) {
            (Some(before), Some(dt)) => update_target(dt, before, t)?,
            _ => append(root, "targets", new_target(t)?)?,
        }
    }
    Ok(doc.to_string())
}

fn update_target(
    doc: &mut dyn TableLike,
    old: &TargetSettings,
    new: &TargetSettings,
) -> Result<()> {
    let src = source(new)?;
    merge(
        doc,
        &as_table(old)?,
        &as_table(new)?,
        &src,
        &["luns", "groups"],
    );
    super::groups::update_groups(doc, old, new)?;
    for l in &old.luns {
        if !new.luns.iter().any(|n| n.id == l.id) {
            if let Some(list) = doc.get_mut("luns") {
                remove_where(list, |x| is_lun(x, l.id));
            }
        }
    }
    for l in &new.luns {
        let before = old.luns.iter().find(|o| o.id == l.id);
        let in_doc = doc
            .get_mut("luns")
            .and_then(|list| find_where(list, |x| is_lun(x, l.id)));
        match (before, in_doc) {
            (Some(before), Some(dl)) => {
                merge(dl, &as_table(before)?, &as_table(l)?, &source(l)?, &[]);
            }
            _ => append(doc, "luns", new_lun(l)?)?,
        }
    }
    Ok(())
}

/// Sets in `doc` every key whose value differs between `old` and `new`
/// (taking the formatted value from `src`) and removes the keys `new`
/// lacks; `skip` names keys handled by the caller.
fn merge(
    doc: &mut dyn TableLike,
    old: &toml::Table,
    new: &toml::Table,
    src: &dyn TableLike,
    skip: &[&str],
) {
    for (k, nv) in new {
        if skip.contains(&k.as_str()) || old.get(k) == Some(nv) {
            continue;
        }
        let Some(item) = src.get(k) else { continue };
        if let (Some(toml::Value::Table(ot)), toml::Value::Table(nt), Some(st)) =
            (old.get(k), nv, item.as_table_like())
        {
            if let Some(dt) = doc.get_mut(k).and_then(Item::as_table_like_mut) {
                merge(dt, ot, nt, st, &[]);
                continue;
            }
        }
        set(doc, k, fresh_item(item));
    }
    for k in old.keys() {
        if !skip.contains(&k.as_str()) && !new.contains_key(k) {
            doc.remove(k);
        }
    }
}

/// Replaces or adds `k`, keeping the comment and place of a value or
/// table that was there.
pub(super) fn set(doc: &mut dyn TableLike, k: &str, mut item: Item) {
    match doc.get_mut(k) {
        Some(existing) => {
            match (&*existing, &mut item) {
                (Item::Value(ov), Item::Value(nv)) => *nv.decor_mut() = ov.decor().clone(),
                (Item::Table(ot), Item::Table(nt)) => {
                    *nt.decor_mut() = ot.decor().clone();
                    if let Some(p) = ot.position() {
                        nt.set_position(p);
                    }
                }
                _ => {}
            }
            *existing = item;
        }
        None => {
            doc.insert(k, item);
        }
    }
}

/// The configuration value as a plain TOML table, for comparing.
fn as_table<T: serde::Serialize>(v: &T) -> Result<toml::Table> {
    match toml::Value::try_from(v)? {
        toml::Value::Table(t) => Ok(t),
        _ => Err(EditError::Shape("a table was expected".into())),
    }
}

/// The value as a TOML document written in field order, where the items
/// that go into the file are taken from.
pub(super) fn source<T: serde::Serialize>(v: &T) -> Result<Table> {
    let doc: DocumentMut = toml::to_string(v)?.parse()?;
    Ok(doc.as_table().clone())
}

/// A copy of `item` without the document positions of the text it was
/// parsed from, so it is placed where it is inserted.
fn fresh_item(item: &Item) -> Item {
    match item {
        Item::Table(t) => Item::Table(fresh(t)),
        Item::ArrayOfTables(a) => {
            let mut out = ArrayOfTables::new();
            for t in a.iter() {
                out.push(fresh(t));
            }
            Item::ArrayOfTables(out)
        }
        other => other.clone(),
    }
}

fn fresh(t: &Table) -> Table {
    let mut out = Table::new();
    for (k, item) in t.iter() {
        out.insert(k, fresh_item(item));
    }
    out
}

fn is_target(t: &dyn TableLike, iqn: &str) -> bool {
    t.get("iqn")
        .and_then(Item::as_str)
        .is_some_and(|s| s.eq_ignore_ascii_case(iqn))
}

fn is_lun(t: &dyn TableLike, id: u64) -> bool {
    t.get("id")
        .and_then(Item::as_integer)
        .is_some_and(|i| u64::try_from(i).ok() == Some(id))
}

/// The first table of an array of tables (or inline array) that `pred` accepts.
pub(super) fn find_where(
    list: &mut Item,
    pred: impl Fn(&dyn TableLike) -> bool,
) -> Option<&mut dyn TableLike> {
    match list {
        Item::ArrayOfTables(a) => a
            .iter_mut()
            .find(|t| pred(&**t))
            .map(|t| t as &mut dyn TableLike),
        Item::Value(v) => v
            .as_array_mut()?
            .iter_mut()
            .filter_map(|v| v.as_inline_table_mut())
            .find(|t| pred(&**t))
            .map(|t| t as &mut dyn TableLike),
        _ => None,
    }
}

pub(super) fn remove_where(list: &mut Item, pred: impl Fn(&dyn TableLike) -> bool) {
    match list {
        Item::ArrayOfTables(a) => {
            let at = a.iter().position(|t| pred(t));
            if let Some(i) = at {
                a.remove(i);
            }
        }
        Item::Value(v) => {
            if let Some(a) = v.as_array_mut() {
                let at = a
                    .iter()
                    .position(|v| v.as_inline_table().is_some_and(|t| pred(t)));
                if let Some(i) = at {
                    a.remove(i);
                }
            }
        }
        _ => {}
    }
}

/// Appends `table` to the list `key` of `doc`, in the list's own form.
pub(super) fn append(doc: &mut dyn TableLike, key: &str, table: Table) -> Result<()> {
    match doc.get_mut(key) {
        None => {
            let mut a = ArrayOfTables::new();
            a.push(table);
            doc.insert(key, Item::ArrayOfTables(a));
            Ok(())
        }
        Some(Item::ArrayOfTables(a)) => {
            a.push(table);
            Ok(())
        }
        Some(Item::Value(v)) if v.is_array() => {
            if let Some(a) = v.as_array_mut() {
                a.push(table.into_inline_table());
            }
            Ok(())
        }
        Some(_) => Err(EditError::Shape(format!(
            "`{key}` in the file is not an array of tables"
        ))),
    }
}

/// A new target's table without the keys that hold their default.
fn new_target(t: &TargetSettings) -> Result<Table> {
    let mut table = fresh(&source(t)?);
    if let Ok(min) = toml::from_str::<TargetSettings>(&format!("iqn = {:?}", t.iqn)) {
        prune(
            &mut table,
            &as_table(t)?,
            &as_table(&min)?,
            &["iqn", "luns"],
        );
    }
    if let Some(Item::ArrayOfTables(luns)) = table.get_mut("luns") {
        for (dl, l) in luns.iter_mut().zip(&t.luns) {
            prune_lun(dl, l)?;
        }
    }
    Ok(table)
}

/// A new LUN's table without the keys that hold their default.
fn new_lun(l: &LunSettings) -> Result<Table> {
    let mut table = fresh(&source(l)?);
    prune_lun(&mut table, l)?;
    Ok(table)
}

fn prune_lun(table: &mut Table, l: &LunSettings) -> Result<()> {
    let min = format!("id = {}\nbackstore = {:?}", l.id, l.backstore.text());
    if let Ok(min) = toml::from_str::<LunSettings>(&min) {
        prune(table, &as_table(l)?, &as_table(&min)?, &["id", "backstore"]);
    }
    Ok(())
}

fn prune(table: &mut Table, full: &toml::Table, min: &toml::Table, keep: &[&str]) {
    for (k, v) in full {
        if !keep.contains(&k.as_str()) && min.get(k) == Some(v) {
            table.remove(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{load_text_jailed, ChapSettings, Overrides};
    use std::path::Path;

    const FILE: &str = r#"# rustgt at the lab
data_dir = "/srv/rustgt"   # where images live

[iscsi]
queue_depth = 64 # deep enough

# The one target.
[[targets]]
iqn = "iqn.2026-11.org.example:disk"
portals = ["127.0.0.1:3260"]
acl = ["iqn.2026-11.org.example:host1"] # only host1

# The boot disk.
[[targets.luns]]
id = 0
backstore = "ram"
size = "16M"   # small
serial = "boot0"

# Second target, untouched.
[[targets]]
iqn = "iqn.2026-11.org.example:other"

[[targets.luns]]
id = 3
backstore = "null"
size = "1G"
"#;

    fn load(text: &str) -> Config {
        load_text_jailed(
            Path::new("test.toml"),
            text.to_owned(),
            &Overrides::default(),
        )
        .expect("valid config")
    }

    fn edited(change: impl FnOnce(&mut Config)) -> (String, Config) {
        let old = load(FILE);
        let mut new = old.clone();
        change(&mut new);
        let text = update(FILE, &old, &new).expect("updates");
        (text, new)
    }

    #[test]
    fn unchanged_configuration_leaves_the_text_as_it_is() {
        let old = load(FILE);
        assert_eq!(update(FILE, &old, &old).expect("updates"), FILE);
    }

    #[test]
    fn an_added_lun_is_appended_to_its_target_with_only_its_own_keys() {
        let (text, new) = edited(|c| {
            let mut lun = c.targets[0].luns[0].clone();
            lun.id = 5;
            lun.serial = Some("five".into());
            c.targets[0].luns.push(lun);
        });
        assert_eq!(load(&text), new);
        assert!(text.contains("# The boot disk."), "{text}");
        assert!(text.contains("size = \"16M\"   # small"), "{text}");
        let five = text.find("id = 5").expect("LUN 5 written");
        let other = text
            .find("iqn.2026-11.org.example:other")
            .expect("second target");
        assert!(five < other, "LUN 5 belongs to the first target:\n{text}");
        // Defaults are not spelt out.
        assert!(!text.contains("block_size"), "{text}");
        assert!(!text.contains("write_cache"), "{text}");
    }

    #[test]
    fn acl_and_chap_changes_keep_comments() {
        let (text, new) = edited(|c| {
            c.targets[0]
                .acl
                .push("iqn.2026-11.org.example:host2".into());
            c.targets[0].chap = Some(ChapSettings {
                user: "alice".into(),
                secret: "twelve-chars-secret".into(),
                mutual_user: None,
                mutual_secret: None,
            });
        });
        assert_eq!(load(&text), new);
        assert!(
            text.contains(
                "acl = [\"iqn.2026-11.org.example:host1\", \"iqn.2026-11.org.example:host2\"] # only host1"
            ),
            "{text}"
        );
        assert!(text.contains("# rustgt at the lab"), "{text}");
        assert!(text.contains("queue_depth = 64 # deep enough"), "{text}");
        let chap = text.find("user = \"alice\"").expect("chap written");
        let other = text
            .find("iqn.2026-11.org.example:other")
            .expect("second target");
        assert!(chap < other, "chap belongs to the first target:\n{text}");
    }

    #[test]
    fn removals_delete_only_what_went() {
        let (text, new) = edited(|c| {
            c.targets[1].luns.clear();
            c.targets[0].luns[0].serial = None;
        });
        assert_eq!(load(&text), new);
        assert!(!text.contains("id = 3"), "{text}");
        assert!(!text.contains("boot0"), "{text}");
        assert!(text.contains("# Second target, untouched."), "{text}");
        let (text, new) = edited(|c| {
            c.targets.remove(0);
        });
        assert_eq!(load(&text), new);
        assert!(!text.contains("org.example:disk"), "{text}");
    }

    #[test]
    fn an_added_target_and_top_level_change_are_written() {
        let (text, new) = edited(|c| {
            let mut t = c.targets[1].clone();
            t.iqn = "iqn.2026-11.org.example:third".into();
            t.luns[0].id = 7;
            c.targets.push(t);
            c.iscsi.queue_depth = 32;
            c.discovery.chap = Some(ChapSettings {
                user: "disc".into(),
                secret: "discovery-secret".into(),
                mutual_user: None,
                mutual_secret: None,
            });
        });
        assert_eq!(load(&text), new);
        assert!(text.contains("queue_depth = 32 # deep enough"), "{text}");
        assert!(text.contains("id = 7"), "{text}");
    }

    #[test]
    fn inline_arrays_are_edited_in_their_own_form() {
        let file = "targets = [{ iqn = \"iqn.2026-11.org.example:a\", luns = [{ id = 0, backstore = \"null\", size = \"1M\" }] }]\n";
        let old = load(file);
        let mut new = old.clone();
        new.targets[0].luns[0].serial = Some("s0".into());
        let mut l = new.targets[0].luns[0].clone();
        l.id = 1;
        l.serial = Some("s1".into());
        new.targets[0].luns.push(l);
        let text = update(file, &old, &new).expect("updates");
        assert_eq!(load(&text), new);
        assert!(text.starts_with("targets = [{"), "{text}");
    }
}
