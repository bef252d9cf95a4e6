//! Services, their Endpoints and ServiceExports, as the control-plane and dataplane tests make
//! and read them.

use crate::Testbed;

/// The Service and Endpoints of [`service`].
fn service_yaml(name: &str, port: u16, ips: &[&str]) -> String {
    let addresses: Vec<String> = ips.iter().map(|ip| format!("{{ip: {ip}}}")).collect();
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}}}\nspec:\n  ports: [{{name: http, port: {port}, protocol: TCP}}]\n---\napiVersion: v1\nkind: Endpoints\nmetadata: {{name: {name}}}\nsubsets:\n  - addresses: [{}]\n    ports: [{{name: http, port: {port}, protocol: TCP}}]\n",
        addresses.join(", ")
    )
}

/// The ServiceExport of [`export`].
fn export_yaml(name: &str) -> String {
    format!(
        "apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\nmetadata: {{name: {name}}}\n"
    )
}

/// A selectorless Service `ns/name` on `port` with the ready endpoints `ips` (the endpoint-slice
/// mirroring controller turns the Endpoints into an EndpointSlice, as it does for any such
/// Service).
pub fn service(tb: &Testbed, cluster: &str, ns: &str, name: &str, port: u16, ips: &[&str]) {
    tb.apply(cluster, ns, &service_yaml(name, port, ips));
}

/// A ServiceExport of `ns/name`.
pub fn export(tb: &Testbed, cluster: &str, ns: &str, name: &str) {
    tb.apply(cluster, ns, &export_yaml(name));
}

/// A Service on port 80 with the one endpoint `ip`, and its ServiceExport, in one apply.
pub fn service_and_export(tb: &Testbed, cluster: &str, ns: &str, name: &str, ip: &str) {
    services_and_exports(tb, cluster, ns, &[(name, ip)]);
}

/// What [`service_and_export`] does for each `(name, ip)`, all in one apply (a burst).
pub fn services_and_exports(tb: &Testbed, cluster: &str, ns: &str, services: &[(&str, &str)]) {
    let docs: Vec<String> = services
        .iter()
        .map(|(name, ip)| {
            format!(
                "{}---\n{}",
                service_yaml(name, 80, &[ip]),
                export_yaml(name)
            )
        })
        .collect();
    tb.apply(cluster, ns, &docs.join("---\n"));
}

/// The ClusterIP of Service `ns/name`.
pub fn cluster_ip(tb: &Testbed, cluster: &str, ns: &str, name: &str) -> String {
    tb.get_json(cluster, &["get", "service", "-n", ns, name])["spec"]["clusterIP"]
        .as_str()
        .expect("clusterIP")
        .to_owned()
}

/// The ready addresses of an Endpoints object (as `kubectl get -o json` gives it), in its order.
pub fn addresses_of(endpoints: &serde_json::Value) -> Vec<String> {
    endpoints["subsets"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["addresses"].as_array().into_iter().flatten())
        .filter_map(|a| a["ip"].as_str().map(str::to_owned))
        .collect()
}

/// The IPs of Endpoints `ns/name`, sorted; Err when it does not exist.
pub fn endpoint_ips(
    tb: &Testbed,
    cluster: &str,
    ns: &str,
    name: &str,
) -> Result<Vec<String>, String> {
    let e = tb
        .try_json(cluster, &["get", "endpoints", "-n", ns, name])
        .ok_or_else(|| format!("no Endpoints {ns}/{name} in {cluster}"))?;
    let mut ips = addresses_of(&e);
    ips.sort();
    Ok(ips)
}
