//! Object names, annotations, labels and finalizers of the contract (Antrea's, kept exactly).

/// Prefix of imported Services, Endpoints and ACNPs.
pub const IMPORTED_PREFIX: &str = "antrea-mc-";
pub const MEMBER_ANNOUNCE_PREFIX: &str = "member-announce-from-";

pub mod annotations {
    /// On a Node: it is a gateway candidate (the key's presence is what counts).
    pub const GATEWAY: &str = "multicluster.antrea.io/gateway";
    /// On a Node: overrides the Gateway's gatewayIP.
    pub const GATEWAY_IP: &str = "multicluster.antrea.io/gateway-ip";
    pub const IMPORTED_SERVICE: &str = "multicluster.antrea.io/imported-service";
    pub const IMPORTED_ACNP: &str = "multicluster.antrea.io/imported-acnp";
    /// On a member's ServiceAccount in the leader: the cluster ID its token speaks for.
    pub const CLUSTER_ID: &str = "multicluster.antrea.io/cluster-id";
    /// On a MemberClusterAnnounce: the ServiceAccount (in the leader's namespace) that created
    /// it, stamped by the leader's mutating webhook; the leader binds an unannotated
    /// ServiceAccount to the announce's cluster ID from it.
    pub const ANNOUNCED_BY: &str = "multicluster.antrea.io/announced-by";
    pub const CREATED_BY_CLI: &str = "multicluster.antrea.io/created-by-antctl";
    /// On a ServiceImport: the keys of the labels and annotations its exporter marked
    /// (`labels=a,b;annotations=c`), always present, so that a key no longer marked is taken
    /// off (a change of this annotation rewrites the object).
    pub const EXPORTED_KEYS: &str = "multicluster.strait.io/exported-keys";
    /// On a MemberClusterAnnounce: the heartbeat (RFC 3339).
    pub const TOUCH_TS: &str = "touch-ts";
    /// On the leader's ClusterSet: the highest label identity ID the leader ever issued,
    /// recorded before an import carries it, so that a restarted leader holds back every ID it
    /// may have freed just before (see `labelidentity::IdAllocator::restored`).
    pub const LABEL_IDS_ISSUED: &str = "multicluster.strait.io/label-ids-issued-up-to";
    /// On a member's Gateway: the Pod CIDRs the cluster announces (comma-separated, as its
    /// ClusterInfo has them: the config's `podCIDRs`, or the Nodes' and the CNI's), written by
    /// the member controller, which alone reads the CNI's objects. The gateway's agent lets other
    /// clusters open flows to them when Pod-to-Pod connectivity is on.
    pub const POD_CIDRS: &str = "multicluster.strait.io/pod-cidrs";
}

pub mod labels {
    pub const SOURCE_NAME: &str = "sourceName";
    pub const SOURCE_NAMESPACE: &str = "sourceNamespace";
    pub const SOURCE_CLUSTER_ID: &str = "sourceClusterID";
    pub const SOURCE_KIND: &str = "sourceKind";
    /// On every object a Strait member controller creates in its own cluster (imported Services,
    /// Endpoints, ServiceImports, ACNPs, ClusterInfoImports, Gateways): only objects carrying
    /// it are ever updated or deleted by the controller.
    pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
    pub const MANAGED_BY_VALUE: &str = "strait-mc-controller";
}

pub mod finalizers {
    pub const RESOURCE_EXPORT: &str = "resourceexport.antrea.io/finalizer";
    /// Written by older versions; still honoured and removed.
    pub const RESOURCE_EXPORT_LEGACY: &str = "resourceexport.finalizers.antrea.io";

    pub fn member_announce(cluster_id: &str) -> String {
        format!("memberclusterannounce.finalizer.antrea.io/{cluster_id}")
    }
}

/// Well-known ClusterClaim names.
pub mod claims {
    pub const CLUSTER_ID: &str = "id.k8s.io";
    pub const CLUSTERSET_ID: &str = "clusterset.k8s.io";
}

/// `<clusterID>-<ns>-<name>-service` or `-endpoints` (`kind` lowercased).
pub fn resource_export(cluster_id: &str, namespace: &str, name: &str, kind: &str) -> String {
    format!(
        "{cluster_id}-{namespace}-{name}-{}",
        kind.to_ascii_lowercase()
    )
}

pub fn cluster_info_export(cluster_id: &str) -> String {
    format!("{cluster_id}-clusterinfo")
}

/// `<clusterID>-<hash>`: a member's export of one normalized label (`hash` is
/// `labelidentity::label_hash`; the leader's import and the members' LabelIdentity are named
/// `<hash>`).
pub fn label_identity_export(cluster_id: &str, hash: &str) -> String {
    format!("{cluster_id}-{hash}")
}

/// The hash a LabelIdentity export's name ends with (after the last `-`, as Antrea parses it).
pub fn label_hash_of_export(name: &str) -> &str {
    name.rsplit_once('-').map_or(name, |(_, h)| h)
}

/// `<ns>-<name>-<lowercase kind>`, or `<name>-<lowercase kind>` without a namespace.
pub fn resource_import(namespace: &str, name: &str, kind: &str) -> String {
    let kind = kind.to_ascii_lowercase();
    if namespace.is_empty() {
        format!("{name}-{kind}")
    } else {
        format!("{namespace}-{name}-{kind}")
    }
}

pub fn member_announce(cluster_id: &str) -> String {
    format!("{MEMBER_ANNOUNCE_PREFIX}{cluster_id}")
}

/// `antrea-mc-<name>`.
pub fn imported(name: &str) -> String {
    format!("{IMPORTED_PREFIX}{name}")
}

/// `east` and `east-1` (either way round): names made by joining IDs with dashes could collide.
pub fn prefix_pair(a: &str, b: &str) -> bool {
    a != b
        && (b.strip_prefix(a).is_some_and(|rest| rest.starts_with('-'))
            || a.strip_prefix(b).is_some_and(|rest| rest.starts_with('-')))
}

/// A DNS-1123 label: lowercase alphanumerics and '-', starting and ending alphanumeric, ≤ 63.
pub fn dns1123_label(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 63
        && v.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !v.starts_with('-')
        && !v.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_the_guides() {
        assert_eq!(
            resource_export("test-cluster-west", "default", "nginx", "Service"),
            "test-cluster-west-default-nginx-service"
        );
        assert_eq!(
            resource_export("test-cluster-west", "default", "nginx", "Endpoints"),
            "test-cluster-west-default-nginx-endpoints"
        );
        assert_eq!(
            cluster_info_export("test-cluster-east"),
            "test-cluster-east-clusterinfo"
        );
        assert_eq!(
            resource_import("default", "nginx", "Service"),
            "default-nginx-service"
        );
        assert_eq!(
            resource_import("", "strict-acnp", "AntreaClusterNetworkPolicy"),
            "strict-acnp-antreaclusternetworkpolicy"
        );
        assert_eq!(
            member_announce("test-cluster-east"),
            "member-announce-from-test-cluster-east"
        );
        assert_eq!(imported("nginx"), "antrea-mc-nginx");
        assert_eq!(
            finalizers::member_announce("east"),
            "memberclusterannounce.finalizer.antrea.io/east"
        );
    }
}
