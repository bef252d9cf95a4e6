//! Certificates and keys for one cluster, made with the openssl CLI (kept once made).

use std::{path::Path, process::Command};

use anyhow::{Context as _, bail};

use crate::topology::Cluster;

fn openssl(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .context("running openssl (scripts/setup.sh installs it)")?;
    if !out.status.success() {
        bail!(
            "openssl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

fn ec_key(dir: &Path, name: &str) -> anyhow::Result<()> {
    openssl(
        dir,
        &[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
            name,
        ],
    )
}

/// A certificate for `subject` signed by the cluster CA, with optional extensions.
fn signed_cert(dir: &Path, name: &str, subject: &str, ext: &str) -> anyhow::Result<()> {
    let key = format!("{name}.key");
    let csr = format!("{name}.csr");
    let crt = format!("{name}.crt");
    let extfile = format!("{name}.ext");
    ec_key(dir, &key)?;
    openssl(
        dir,
        &["req", "-new", "-key", &key, "-subj", subject, "-out", &csr],
    )?;
    std::fs::write(dir.join(&extfile), ext)?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "3650",
            "-sha256",
            "-extfile",
            &extfile,
            "-out",
            &crt,
        ],
    )?;
    let _ = std::fs::remove_file(dir.join(&csr));
    Ok(())
}

const CLIENT_EXT: &str = "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n";

/// Makes the cluster's PKI in `dir` unless it is already there.
pub fn ensure(dir: &Path, cluster: &Cluster) -> anyhow::Result<()> {
    if dir.join("admin.crt").exists() {
        return Ok(());
    }
    std::fs::create_dir_all(dir)?;
    ec_key(dir, "ca.key")?;
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-new",
            "-key",
            "ca.key",
            "-subj",
            &format!("/CN=strait-testbed-{}-ca", cluster.name),
            "-days",
            "3650",
            "-sha256",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-out",
            "ca.crt",
        ],
    )?;
    let sans = format!(
        "IP:{},IP:{},IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local",
        cluster.api_ip, cluster.kubernetes_service_ip
    );
    signed_cert(
        dir,
        "apiserver",
        &format!("/CN=kube-apiserver-{}", cluster.name),
        &format!(
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName={sans}\n"
        ),
    )?;
    let client = CLIENT_EXT;
    signed_cert(dir, "admin", "/O=system:masters/CN=strait-admin", client)?;
    signed_cert(
        dir,
        "controller-manager",
        "/CN=system:kube-controller-manager",
        client,
    )?;
    signed_cert(dir, "kube-proxy", "/CN=system:kube-proxy", client)?;
    // Service-account token signing key pair.
    openssl(
        dir,
        &[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            "sa.key",
        ],
    )?;
    openssl(dir, &["pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub"])?;
    Ok(())
}

/// The client certificate of a Node's kubelet (`system:node:<name>`, group `system:nodes`: what
/// the Node authorizer expects), made once.
pub fn ensure_node(dir: &Path, node: &str) -> anyhow::Result<String> {
    let user = format!("kubelet-{node}");
    ensure_client(
        dir,
        &user,
        &format!("/O=system:nodes/CN=system:node:{node}"),
    )?;
    Ok(user)
}

/// The scheduler's client certificate (what its default RBAC binds), made once.
pub fn ensure_scheduler(dir: &Path) -> anyhow::Result<()> {
    ensure_client(dir, "scheduler", "/CN=system:kube-scheduler")
}

/// The API server's client certificate towards the kubelets (logs, exec, port-forward), made
/// once; its group lets the kubelets' webhook authorization allow it everything.
pub fn ensure_kubelet_client(dir: &Path) -> anyhow::Result<()> {
    ensure_client(
        dir,
        "apiserver-kubelet-client",
        "/O=system:masters/CN=kube-apiserver-kubelet-client",
    )
}

fn ensure_client(dir: &Path, name: &str, subject: &str) -> anyhow::Result<()> {
    if !dir.join(format!("{name}.crt")).exists() {
        signed_cert(dir, name, subject, CLIENT_EXT)?;
    }
    Ok(())
}

/// A kubeconfig with embedded certificates.
pub fn kubeconfig(dir: &Path, cluster: &Cluster, user: &str) -> anyhow::Result<String> {
    use std::fmt::Write as _;
    let b64 = |f: &str| -> anyhow::Result<String> {
        let bytes = std::fs::read(dir.join(f)).with_context(|| format!("reading {f}"))?;
        Ok(base64(&bytes))
    };
    let mut s = String::new();
    writeln!(
        s,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {0}\n  cluster:\n    server: {1}\n    certificate-authority-data: {2}",
        cluster.name,
        cluster.server(),
        b64("ca.crt")?
    )?;
    writeln!(
        s,
        // The user's name carries the cluster's, as kind's do: kubeconfigs of several
        // clusters merged (KUBECONFIG=a:b, `mcctl verify`) keep each cluster's credentials.
        "users:\n- name: {user}@{}\n  user:\n    client-certificate-data: {}\n    client-key-data: {}",
        cluster.name,
        b64(&format!("{user}.crt"))?,
        b64(&format!("{user}.key"))?
    )?;
    writeln!(
        s,
        "contexts:\n- name: {0}\n  context:\n    cluster: {0}\n    user: {user}@{0}\ncurrent-context: {0}",
        cluster.name
    )?;
    Ok(s)
}

fn base64(data: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(TABLE[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (input, expected) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(super::base64(input.as_bytes()), expected);
        }
    }
}
