//! Writing a target's `[[targets.groups]]` into the admin's file: groups
//! are matched by name; a changed group's keys are set in place (keeping
//! their comments), a removed one is deleted, an added one appended with
//! its `luns` map and `chap` as inline values. Order decides which
//! wildcard group an initiator falls in, so if the groups kept were
//! reordered, the whole list is written again.

use toml_edit::{Item, Table, TableLike, Value};

use super::edit::{append, find_where, remove_where, set, source, Result};
use crate::config::{GroupSettings, TargetSettings};

fn is_group(t: &dyn TableLike, name: &str) -> bool {
    t.get("name")
        .and_then(Item::as_str)
        .is_some_and(|s| s.eq_ignore_ascii_case(name))
}

fn same(a: &GroupSettings, b: &GroupSettings) -> bool {
    a.name.eq_ignore_ascii_case(&b.name)
}

/// A group's table as written: plain keys, `chap` an inline table,
/// `luns` an inline array of inline tables.
fn group_table(g: &GroupSettings) -> Result<Table> {
    let mut out = Table::new();
    for (k, item) in source(g)?.iter() {
        let item = match item.clone() {
            Item::Table(t) => Item::Value(Value::InlineTable(t.into_inline_table())),
            Item::ArrayOfTables(a) => Item::Value(Value::Array(a.into_array())),
            other => other,
        };
        out.insert(k, item);
    }
    Ok(out)
}

/// Updates the `groups` of target table `doc` from `old` to `new`.
pub(super) fn update_groups(
    doc: &mut dyn TableLike,
    old: &TargetSettings,
    new: &TargetSettings,
) -> Result<()> {
    if old.groups == new.groups {
        return Ok(());
    }
    let kept_old: Vec<&GroupSettings> = old
        .groups
        .iter()
        .filter(|o| new.groups.iter().any(|n| same(o, n)))
        .collect();
    let kept_new: Vec<&GroupSettings> = new
        .groups
        .iter()
        .filter(|n| old.groups.iter().any(|o| same(o, n)))
        .collect();
    let reordered = kept_old.iter().zip(&kept_new).any(|(o, n)| !same(o, n));
    if reordered || new.groups.is_empty() {
        doc.remove("groups");
        for g in &new.groups {
            append(doc, "groups", group_table(g)?)?;
        }
        return Ok(());
    }
    for g in &old.groups {
        if !new.groups.iter().any(|n| same(g, n)) {
            if let Some(list) = doc.get_mut("groups") {
                remove_where(list, |x| is_group(x, &g.name));
            }
        }
    }
    for g in &new.groups {
        let before = old.groups.iter().find(|o| same(o, g));
        let fresh = group_table(g)?;
        let in_doc = doc
            .get_mut("groups")
            .and_then(|list| find_where(list, |x| is_group(x, &g.name)));
        match (before, in_doc) {
            (Some(before), Some(dg)) => {
                if before == g {
                    continue;
                }
                let stale: Vec<String> = dg
                    .iter()
                    .map(|(k, _)| k.to_owned())
                    .filter(|k| !fresh.contains_key(k))
                    .collect();
                for k in stale {
                    dg.remove(&k);
                }
                for (k, item) in fresh.iter() {
                    set(dg, k, item.clone());
                }
            }
            _ => append(doc, "groups", fresh)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::{load_text_jailed, Config, Overrides};
    use crate::persist::edit::update;

    const TEXT: &str = r#"
[[targets]]
iqn = "iqn.2026-11.org.rustgt:t"
[[targets.luns]]
id = 0
backstore = "ram"
size = "16M"
[[targets.luns]]
id = 1
backstore = "ram"
size = "16M"
[[targets.groups]]
name = "db" # the database hosts
initiators = ["iqn.2026-11.org.example:db*"]
luns = [{ lun = 0, source = 1 }]
[[targets.groups]]
name = "web"
initiators = ["iqn.2026-11.org.example:web*"]
"#;

    fn load(text: &str) -> Config {
        load_text_jailed(Path::new("t.toml"), text.to_owned(), &Overrides::default())
            .expect("valid")
    }

    #[test]
    fn a_changed_group_keeps_its_comment_and_place() {
        let old = load(TEXT);
        let mut new = old.clone();
        new.targets[0].groups[0].luns = Some(vec![crate::config::LunMapping {
            lun: 2,
            source: 0,
            read_only: true,
        }]);
        new.targets[0].groups.remove(1);
        let text = update(TEXT, &old, &new).expect("update");
        assert!(
            text.contains("name = \"db\" # the database hosts"),
            "{text}"
        );
        assert!(
            text.contains("luns = [{ lun = 2, source = 0, read_only = true }]"),
            "{text}"
        );
        assert!(!text.contains("web"), "{text}");
        assert_eq!(load(&text).targets[0].groups, new.targets[0].groups);
    }

    #[test]
    fn reordered_groups_are_written_in_the_new_order() {
        let old = load(TEXT);
        let mut new = old.clone();
        new.targets[0].groups.reverse();
        let text = update(TEXT, &old, &new).expect("update");
        assert_eq!(load(&text).targets[0].groups, new.targets[0].groups);
    }

    #[test]
    fn an_added_target_keeps_its_groups() {
        let old = load(TEXT);
        let mut new = old.clone();
        let mut t = new.targets[0].clone();
        t.iqn = "iqn.2026-11.org.rustgt:second".into();
        new.targets.push(t);
        let text = update(TEXT, &old, &new).expect("update");
        assert_eq!(
            load(&text).targets[1].groups,
            new.targets[1].groups,
            "{text}"
        );
    }
}
