//! Tables and `-o yaml|json`, as kubectl prints them.

use serde_json::Value;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Yaml,
    Json,
}

/// Columns separated by three spaces, each as wide as its widest cell.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}   "));
            }
        }
        out.trim_end().to_owned() + "\n"
    };
    let mut out = line(headers.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// An object without the fields nobody reads on a terminal.
pub fn clean(mut v: Value) -> Value {
    if let Some(m) = v["metadata"].as_object_mut() {
        m.remove("managedFields");
    }
    v
}

/// One object, or a `v1 List` of several, in YAML or JSON.
pub fn objects(format: Format, mut items: Vec<Value>, single: bool) -> anyhow::Result<String> {
    let v = if single && items.len() == 1 {
        items.remove(0)
    } else {
        serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items})
    };
    Ok(match format {
        Format::Json => serde_json::to_string_pretty(&v)? + "\n",
        _ => serde_yaml::to_string(&v)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up() {
        let t = table(
            &["CLUSTER-ID", "NAMESPACE", "STATUS"],
            &[
                vec![
                    "test-cluster-east".into(),
                    "kube-system".into(),
                    "True".into(),
                ],
                vec!["w".into(), "ns".into(), "False".into()],
            ],
        );
        assert_eq!(
            t,
            "CLUSTER-ID          NAMESPACE     STATUS\n\
             test-cluster-east   kube-system   True\n\
             w                   ns            False\n"
        );
    }
}
