//! `cargo xtask image build`: Strait's container images, from the Containerfiles in `images/`.
//!
//! Every image is `FROM scratch` plus a staged root filesystem: the binaries it runs and the
//! shared libraries they load, found with `ldd` on the build machine (glibc's NSS and DNS
//! resolver live in libc.so.6 itself since glibc 2.34, so nothing is loaded that ldd does not
//! name). The staging is the same whichever tool builds: buildah (the default, no daemon; it
//! also writes each image as an OCI archive `target/images/<name>.oci.tar` that the testbed's
//! Nodes import), podman or docker (into their own image stores, to push from there).

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Command as Cmd,
};

use anyhow::{Context as _, bail};
use clap::{Subcommand, ValueEnum};

use crate::{
    cargo::{build_target_env, build_test_server},
    paths::{TEST_SERVER, node_bin_dir, pinned, repo_root},
};

/// Where shipped images are published; the manifests and the chart name the same repository.
pub const REGISTRY: &str = "ghcr.io/strait-net";
/// Images only the testbed uses; never pushed anywhere.
pub const TEST_REGISTRY: &str = "localhost/strait-test";

#[derive(Subcommand)]
pub enum ImageCommand {
    /// Build the images (all, or those named) from images/<name>/Containerfile.
    Build {
        /// What builds them: buildah also writes target/images/<name>.oci.tar.
        #[arg(long, value_enum, default_value_t = Tool::Buildah)]
        tool: Tool,
        /// Only these images (mc-controller, mc-agent, test-pause, test-coredns, test-tools,
        /// test-mcs-socat, test-mcs-netshoot).
        names: Vec<String>,
        /// Another build of the named shipped images: its binaries report this as their version
        /// (`STRAIT_BUILD_ID`), and it is tagged `v<ID>` ('+' becomes '-') and written to
        /// target/images/<name>-<tag>.oci.tar (an upgrade to try: `testbed load` it).
        #[arg(long)]
        build_id: Option<String>,
    },
    /// List the images with their references (and archives, when built).
    List,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Tool {
    Buildah,
    Podman,
    Docker,
}

/// One image: its name (the directory of its Containerfile) and what its root filesystem holds.
pub struct Image {
    pub name: &'static str,
    /// The full reference it is tagged with.
    pub reference: String,
}

/// The shipped images' tag: the workspace version.
pub fn version_tag() -> String {
    format!("v{}", env!("CARGO_PKG_VERSION"))
}

pub fn images() -> anyhow::Result<Vec<Image>> {
    let tag = version_tag();
    Ok(vec![
        Image {
            name: "mc-controller",
            reference: format!("{REGISTRY}/mc-controller:{tag}"),
        },
        Image {
            name: "mc-agent",
            reference: format!("{REGISTRY}/mc-agent:{tag}"),
        },
        Image {
            name: "test-pause",
            reference: format!("{TEST_REGISTRY}/pause:{}", pinned("PAUSE_VERSION")?),
        },
        Image {
            name: "test-coredns",
            reference: format!("{TEST_REGISTRY}/coredns:{}", pinned("COREDNS_VERSION")?),
        },
        Image {
            name: "test-tools",
            reference: format!("{TEST_REGISTRY}/tools:{tag}"),
        },
        // The two images the MCS API conformance suite names (it cannot pull them here): the
        // same commands, from this machine's Debian packages, under the suite's names.
        Image {
            name: "test-mcs-socat",
            reference: "docker.io/alpine/socat:1.7.4.4".to_owned(),
        },
        Image {
            name: "test-mcs-netshoot",
            reference: "docker.io/nicolaka/netshoot:v0.15".to_owned(),
        },
    ])
}

/// The reference image `name` is tagged with.
pub fn reference(name: &str) -> anyhow::Result<String> {
    Ok(images()?
        .into_iter()
        .find(|i| i.name == name)
        .with_context(|| format!("no image {name}"))?
        .reference)
}

/// `target/images` in the repository: the staged contexts and the archives.
pub fn images_dir() -> PathBuf {
    repo_root().join("target/images")
}

pub fn archive(name: &str) -> PathBuf {
    images_dir().join(format!("{name}.oci.tar"))
}

pub fn run(command: ImageCommand) -> anyhow::Result<()> {
    match command {
        ImageCommand::Build {
            tool,
            names,
            build_id,
        } => {
            if let Some(id) = build_id {
                return build_variant(&names, tool, &id);
            }
            let all = images()?;
            for n in &names {
                if !all.iter().any(|i| i.name == n) {
                    bail!(
                        "no image {n:?}; there are {}",
                        all.iter().map(|i| i.name).collect::<Vec<_>>().join(", ")
                    );
                }
            }
            for image in all
                .iter()
                .filter(|i| names.is_empty() || names.iter().any(|n| n == i.name))
            {
                build(image, tool)?;
            }
            Ok(())
        }
        ImageCommand::List => {
            for image in images()? {
                let a = archive(image.name);
                let size = std::fs::metadata(&a)
                    .map(|m| format!("{} ({:.1} MiB)", a.display(), mib(m.len())))
                    .unwrap_or_else(|_| "not built".into());
                println!("{:<14} {:<48} {size}", image.name, image.reference);
            }
            Ok(())
        }
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// `image build --build-id`: the named shipped images built as another build.
fn build_variant(names: &[String], tool: Tool, id: &str) -> anyhow::Result<()> {
    if names.is_empty()
        || names
            .iter()
            .any(|n| n != "mc-agent" && n != "mc-controller")
    {
        bail!("--build-id builds mc-agent or mc-controller: name which");
    }
    if !id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "+-._".contains(c))
    {
        bail!("--build-id {id:?}: letters, digits and + - . _ only");
    }
    let tag = format!("v{}", id.replace('+', "-"));
    for name in names {
        let image = Image {
            name: if name == "mc-agent" {
                "mc-agent"
            } else {
                "mc-controller"
            },
            reference: format!("{REGISTRY}/{name}:{tag}"),
        };
        build_as(&image, tool, Some(id), &format!("{name}-{tag}"))?;
    }
    Ok(())
}

/// Builds one image with `tool`; with buildah, also its OCI archive.
pub fn build(image: &Image, tool: Tool) -> anyhow::Result<()> {
    build_as(image, tool, None, image.name)
}

/// Builds `image`, its binaries with `STRAIT_BUILD_ID=build_id` if given, its archive
/// `target/images/<archive_name>.oci.tar`.
fn build_as(
    image: &Image,
    tool: Tool,
    build_id: Option<&str>,
    archive_name: &str,
) -> anyhow::Result<()> {
    let context = images_dir().join(image.name);
    let rootfs = context.join("rootfs");
    if rootfs.exists() {
        std::fs::remove_dir_all(&rootfs)
            .with_context(|| format!("removing {}", rootfs.display()))?;
    }
    std::fs::create_dir_all(&rootfs)?;
    let env: Vec<(&str, &str)> = build_id
        .map(|id| ("STRAIT_BUILD_ID", id))
        .into_iter()
        .collect();
    stage(image.name, &rootfs, &env)?;
    let containerfile = repo_root()
        .join("images")
        .join(image.name)
        .join("Containerfile");
    let mut cmd = match tool {
        Tool::Buildah => {
            let mut c = Cmd::new("buildah");
            c.args(buildah_storage()).arg("bud");
            c
        }
        Tool::Podman => {
            let mut c = Cmd::new("podman");
            c.arg("build");
            c
        }
        Tool::Docker => {
            let mut c = Cmd::new("docker");
            c.arg("build");
            c
        }
    };
    cmd.arg("--quiet")
        .arg("-f")
        .arg(&containerfile)
        .args(["-t", &image.reference])
        .arg(&context);
    run_quiet(&mut cmd).with_context(|| format!("building the image {}", image.name))?;
    if let Tool::Buildah = tool {
        let out = archive(archive_name);
        let _ = std::fs::remove_file(&out);
        run_quiet(
            Cmd::new("buildah")
                .args(buildah_storage())
                .args(["push", "--quiet", &image.reference])
                .arg(format!("oci-archive:{}:{}", out.display(), image.reference)),
        )
        .with_context(|| format!("writing {}", out.display()))?;
        // Earlier builds of the image leave untagged layers behind (full copies with vfs).
        let _ = Cmd::new("buildah")
            .args(buildah_storage())
            .args(["rmi", "--prune"])
            .output();
        let size = std::fs::metadata(&out)?.len();
        println!(
            "[image] {} {} ({:.1} MiB)",
            image.reference,
            out.display(),
            mib(size)
        );
    } else {
        println!("[image] {}", image.reference);
    }
    Ok(())
}

/// buildah's storage: vfs, which works wherever the build runs (overlay needs a filesystem that
/// can carry an overlay mount, which a container's root often is not).
fn buildah_storage() -> [&'static str; 2] {
    ["--storage-driver", "vfs"]
}

fn run_quiet(cmd: &mut Cmd) -> anyhow::Result<()> {
    let out = cmd
        .output()
        .with_context(|| format!("running {:?}", cmd.get_program()))?;
    if !out.status.success() {
        bail!(
            "{:?} failed: {}{}",
            cmd.get_program(),
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Fills `rootfs` with what the image `name` runs; its binaries built with `env`.
fn stage(name: &str, rootfs: &Path, env: &[(&str, &str)]) -> anyhow::Result<()> {
    let node_bin = node_bin_dir()?;
    match name {
        "mc-controller" => {
            let bin = build_target_env("mc-controller", "mc-controller", true, env)?;
            install(rootfs, &bin, "/usr/local/bin/mc-controller")?;
        }
        "mc-agent" => {
            let bin = build_target_env("mc-agent", "mc-agent", true, env)?;
            install(rootfs, &bin, "/usr/local/bin/mc-agent")?;
            install(rootfs, &host_tool("ip")?, "/usr/sbin/ip")?;
            install(rootfs, &host_tool("bpftool")?, "/usr/sbin/bpftool")?;
        }
        "test-pause" => install(rootfs, &node_bin.join("pause"), "/pause")?,
        "test-coredns" => install(rootfs, &node_bin.join("coredns"), "/coredns")?,
        "test-tools" => {
            let busybox = host_tool("busybox")?;
            install(rootfs, &busybox, "/bin/busybox")?;
            let out = Cmd::new(&busybox).arg("--list-full").output()?;
            for applet in String::from_utf8_lossy(&out.stdout).lines() {
                let link = rootfs.join(applet.trim_start_matches('/'));
                if link.exists() || applet.is_empty() {
                    continue;
                }
                std::fs::create_dir_all(link.parent().expect("an applet has a directory"))?;
                std::os::unix::fs::symlink("/bin/busybox", &link)?;
            }
            install(rootfs, &host_tool("curl")?, "/usr/bin/curl")?;
            install(rootfs, &host_tool("socat")?, "/usr/bin/socat")?;
            install(rootfs, &build_test_server()?, TEST_SERVER)?;
            std::fs::create_dir_all(rootfs.join("tmp"))?;
        }
        "test-mcs-socat" | "test-mcs-netshoot" => {
            // What the suite's Pods run: `sh -c` scripts with grep, awk, tail and tr, socat
            // listening, BIND's nslookup (the suite parses its output) and OpenBSD nc.
            install(rootfs, &host_tool("dash")?, "/bin/sh")?;
            let busybox = host_tool("busybox")?;
            install(rootfs, &busybox, "/bin/busybox")?;
            for applet in [
                "grep", "egrep", "awk", "tail", "tr", "echo", "cat", "sleep", "head", "sed", "ls",
                "env", "ps",
            ] {
                std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet))?;
            }
            install(rootfs, &host_tool("socat")?, "/usr/bin/socat")?;
            install(rootfs, &host_tool("nslookup")?, "/usr/bin/nslookup")?;
            install(rootfs, &host_tool("nc.openbsd")?, "/usr/bin/nc")?;
            std::fs::create_dir_all(rootfs.join("etc"))?;
            std::fs::write(rootfs.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n")?;
            std::fs::create_dir_all(rootfs.join("tmp"))?;
        }
        other => bail!("no recipe for the image {other}"),
    }
    Ok(())
}

/// A tool of the build machine, by name, from the usual directories.
fn host_tool(name: &str) -> anyhow::Result<PathBuf> {
    [
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ]
    .iter()
    .map(|d| Path::new(d).join(name))
    .find(|p| p.is_file())
    .with_context(|| format!("{name} is not installed here (scripts/setup.sh installs it)"))
}

/// Copies `bin` to `dest` in the root filesystem, with every shared library it loads.
fn install(rootfs: &Path, bin: &Path, dest: &str) -> anyhow::Result<()> {
    copy_into(rootfs, bin, dest)?;
    for lib in libraries(bin)? {
        let at = lib.display().to_string();
        if !rootfs.join(at.trim_start_matches('/')).exists() {
            copy_into(rootfs, &lib, &at)?;
        }
    }
    Ok(())
}

fn copy_into(rootfs: &Path, from: &Path, dest: &str) -> anyhow::Result<()> {
    let to = rootfs.join(dest.trim_start_matches('/'));
    std::fs::create_dir_all(to.parent().expect("an absolute destination"))?;
    // (Symbolic links are followed: the image holds the file under the name it is loaded by.)
    std::fs::copy(from, &to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    Ok(())
}

/// The shared libraries `bin` loads, the dynamic loader included (none for a static binary).
fn libraries(bin: &Path) -> anyhow::Result<BTreeSet<PathBuf>> {
    let out = Cmd::new("ldd").arg(bin).output().context("running ldd")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        // "not a dynamic executable": nothing to carry.
        return Ok(BTreeSet::new());
    }
    parse_ldd(&text)
}

fn parse_ldd(text: &str) -> anyhow::Result<BTreeSet<PathBuf>> {
    let mut libs = BTreeSet::new();
    for line in text.lines().map(str::trim) {
        if line.contains("statically linked") || line.starts_with("linux-vdso") {
            continue;
        }
        if line.contains("=> not found") {
            bail!("a library is missing: {line}");
        }
        // "libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)"
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            libs.insert(PathBuf::from(p));
        }
    }
    Ok(libs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_gives_the_libraries_and_the_loader() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\
            \tlibz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x00007f6a)\n\
            \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f6b)\n\
            \t/lib64/ld-linux-x86-64.so.2 (0x00007f6c)\n";
        let libs: Vec<String> = parse_ldd(text)
            .unwrap()
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(
            libs,
            [
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib/x86_64-linux-gnu/libz.so.1",
                "/lib64/ld-linux-x86-64.so.2"
            ]
        );
        assert!(parse_ldd("\tlibfoo.so.1 => not found\n").is_err());
    }
}
