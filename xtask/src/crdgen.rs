//! `cargo xtask crdgen [--check]`: the CRD YAML under deploy/ is generated from mc-api.

use anyhow::{Context as _, bail};

use testbed::paths::repo_root;

pub fn run(check: bool) -> anyhow::Result<()> {
    let deploy = repo_root().join("deploy");
    let mut drifted = Vec::new();
    for (relative, yaml) in mc_api::crdgen::render() {
        let path = deploy.join(&relative);
        if check {
            let committed = std::fs::read_to_string(&path).unwrap_or_default();
            if committed != yaml {
                drifted.push(relative.display().to_string());
            }
        } else {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
            println!("wrote deploy/{}", relative.display());
        }
    }
    if !drifted.is_empty() {
        bail!(
            "generated CRDs differ from the committed ones: {}\nrun `cargo xtask crdgen` and commit the result",
            drifted.join(", ")
        );
    }
    if check {
        println!("crdgen: deploy/ matches mc-api");
    }
    Ok(())
}
