//! The pin directory: where maps and links live, and the check that it is on a BPF filesystem.

use std::{
    ffi::CString,
    os::unix::ffi::OsStrExt as _,
    path::{Path, PathBuf},
};

/// `BPF_FS_MAGIC` from `<linux/magic.h>`.
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

#[derive(Debug, thiserror::Error)]
pub enum PinRootError {
    #[error(
        "pin root {path}: {found} is not on a BPF filesystem; mount one (`mount -t bpf bpf /sys/fs/bpf`) \
         or, in a Pod, run `mc-agent mount-bpffs` in a privileged init container that mounts the host's /sys/fs/bpf with mountPropagation: Bidirectional"
    )]
    NotBpffs { path: PathBuf, found: PathBuf },
    #[error("pin root {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Layout of the pin directory (`/sys/fs/bpf/mc/v1` on a Node):
/// `<root>/<map name>` for every map and `<root>/links/<interface>_<direction>` for TCX links.
#[derive(Clone, Debug)]
pub struct PinLayout {
    root: PathBuf,
}

impl PinLayout {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn map(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    pub fn links_dir(&self) -> PathBuf {
        self.root.join("links")
    }

    pub fn link(&self, interface: &str, direction: &str) -> PathBuf {
        self.links_dir().join(format!("{interface}_{direction}"))
    }

    /// Checks that the root is (or would be created) on bpffs, then creates it.
    pub fn prepare(&self) -> Result<(), PinRootError> {
        let existing = self
            .root
            .ancestors()
            .find(|p| p.exists())
            .unwrap_or_else(|| Path::new("/"));
        if !is_bpffs(existing).map_err(|source| PinRootError::Io {
            path: self.root.clone(),
            source,
        })? {
            return Err(PinRootError::NotBpffs {
                path: self.root.clone(),
                found: existing.to_owned(),
            });
        }
        std::fs::create_dir_all(self.links_dir()).map_err(|source| PinRootError::Io {
            path: self.root.clone(),
            source,
        })
    }
}

/// Mounts a BPF filesystem at `path` (created when missing) unless `path` is on one already.
/// Whether it mounted one. Needs CAP_SYS_ADMIN in the mount namespace's owner.
pub fn mount(path: &Path) -> std::io::Result<bool> {
    std::fs::create_dir_all(path)?;
    if is_bpffs(path)? {
        return Ok(false);
    }
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: every argument is a NUL-terminated string we own (or null for no data).
    let rc = unsafe {
        libc::mount(
            c"bpffs".as_ptr(),
            c_path.as_ptr(),
            c"bpf".as_ptr(),
            0,
            c"mode=0700".as_ptr().cast(),
        )
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        return Err(std::io::Error::new(
            e.kind(),
            format!("mounting a BPF filesystem at {}: {e}", path.display()),
        ));
    }
    Ok(true)
}

/// Whether `path` is on a BPF filesystem.
pub fn is_bpffs(path: &Path) -> std::io::Result<bool> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: statfs writes into the zeroed struct we own; the path is NUL-terminated.
    let mut buf: libc::statfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statfs(c_path.as_ptr(), &mut buf) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between libcs
    Ok(buf.f_type as i64 == BPF_FS_MAGIC)
}
