//! What mcctl creates: marked with the created-by-CLI annotation (so `leave`, `destroy` and
//! `delete membertoken` remove only what mcctl made), and deleted again when a command fails
//! half-way ([`Rollback`]).

use std::time::{Duration, Instant};

use kube::{Api, Client, Resource, ResourceExt as _, api::DeleteParams};
use mc_api::names::annotations;

/// Whether mcctl created this object (its created-by-CLI annotation is "true").
pub fn created_by_mcctl<K: Resource>(o: &K) -> bool {
    o.annotations()
        .get(annotations::CREATED_BY_CLI)
        .is_some_and(|v| v == "true")
}

/// What a command created, deleted again (newest first) when it fails.
#[derive(Default)]
pub struct Rollback(Vec<(String, Undo)>);

/// Resolves to Ok(true) once the object is gone, Ok(false) while it still exists.
type DeleteFuture = std::pin::Pin<Box<dyn Future<Output = kube::Result<bool>>>>;
type Undo = Box<dyn Fn(Client) -> DeleteFuture>;

impl Rollback {
    pub fn push<K>(&mut self, ns: &str, name: &str)
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + 'static,
        K::DynamicType: Default,
    {
        let (ns, name) = (ns.to_owned(), name.to_owned());
        let label = format!("{} {ns}/{name}", K::kind(&Default::default()));
        self.0.push((
            label,
            Box::new(move |client| {
                let (ns, name) = (ns.clone(), name.clone());
                Box::pin(async move {
                    let a: Api<K> = Api::namespaced(client, &ns);
                    match a.delete(&name, &DeleteParams::background()).await {
                        Ok(_) => Ok(false),
                        Err(kube::Error::Api(s)) if s.code == 404 => Ok(true),
                        Err(e) => Err(e),
                    }
                })
            }),
        ));
    }

    /// Deletes newest first, each gone before the next: a ClusterSet goes before its token
    /// Secret, so the member controller still holds the token when it leaves the leader.
    pub async fn run(self, client: &Client) {
        for (label, delete) in self.0.into_iter().rev() {
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut first = true;
            loop {
                // Deleting again answers 404 once the object is really gone.
                match delete(client.clone()).await {
                    Err(e) => {
                        eprintln!("  could not delete {label}: {e}; delete it by hand");
                        break;
                    }
                    Ok(true) => {
                        eprintln!("  rolled back: deleted {label}");
                        break;
                    }
                    Ok(false) if Instant::now() > deadline => {
                        eprintln!("  {label} is still being deleted");
                        break;
                    }
                    Ok(false) => {
                        if first && label.starts_with("ClusterSet") {
                            // Give the member controller the moment it needs to leave.
                            tokio::time::sleep(Duration::from_secs(2)).await;
                        }
                        first = false;
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                }
            }
        }
    }
}
