//! A request's path and method read as the API server reads them: which endpoint, which resource, namespace,
//! name and subresource, and which verb.

use gpuclaim_sim::served::resources::{self, Resource};

/// What a path names.
#[derive(Clone, Debug, PartialEq)]
pub enum Endpoint<'a> {
    Version,
    Health,
    /// `/api` (legacy `APIVersions`, or aggregated discovery of the core group).
    Api,
    /// `/apis` (legacy `APIGroupList`, or aggregated discovery of the other groups).
    Apis,
    /// `/apis/{group}`.
    Group(&'a str),
    /// `/api/v1`, `/apis/{group}/{version}`.
    ResourceList {
        group: &'a str,
        version: &'a str,
    },
    OpenApiIndex,
    /// `/openapi/v3/{path}`.
    OpenApiDocument(String),
    /// A resource's collection or one of its objects.
    Resource(Target<'a>),
}

/// A resource request's target.
#[derive(Clone, Debug, PartialEq)]
pub struct Target<'a> {
    pub resource: &'static Resource,
    /// `None` for all namespaces (or a cluster-scoped resource).
    pub namespace: Option<&'a str>,
    pub name: Option<&'a str>,
    pub subresource: Option<&'a str>,
}

/// A path the twin does not serve, and why (a 404 either way).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unknown;

/// Reads `path` (without its query).
pub fn endpoint(path: &str) -> Result<Endpoint<'_>, Unknown> {
    let trimmed = path.trim_end_matches('/');
    let segments: Vec<&str> = trimmed.split('/').skip(1).collect();
    match segments[..] {
        ["version"] => Ok(Endpoint::Version),
        ["healthz"] | ["livez"] | ["readyz"] => Ok(Endpoint::Health),
        ["api"] => Ok(Endpoint::Api),
        ["apis"] => Ok(Endpoint::Apis),
        ["openapi", "v3"] => Ok(Endpoint::OpenApiIndex),
        ["openapi", "v3", ref rest @ ..] if !rest.is_empty() => Ok(Endpoint::OpenApiDocument(rest.join("/"))),
        ["api", version] => Ok(Endpoint::ResourceList { group: "", version }),
        ["apis", group] => Ok(Endpoint::Group(group)),
        ["apis", group, version] => Ok(Endpoint::ResourceList { group, version }),
        ["api", version, ref rest @ ..] => target("", version, rest).map(Endpoint::Resource),
        ["apis", group, version, ref rest @ ..] => target(group, version, rest).map(Endpoint::Resource),
        _ => Err(Unknown),
    }
}

fn target<'a>(group: &'a str, version: &'a str, rest: &[&'a str]) -> Result<Target<'a>, Unknown> {
    let find = |plural: &str| resources::find(group, version, plural).ok_or(Unknown);
    let (namespace, rest) = match rest {
        // `/api/v1/namespaces/{name}` and `/api/v1/namespaces/{name}/status` name the namespace itself.
        ["namespaces", namespace, plural, tail @ ..]
            if !(group.is_empty() && is_namespace_subresource(plural, tail)) =>
        {
            (Some(*namespace), [&[*plural][..], tail].concat())
        }
        _ => (None, rest.to_vec()),
    };
    let (resource, name, subresource) = match rest[..] {
        [plural] => (find(plural)?, None, None),
        [plural, name] => (find(plural)?, Some(name), None),
        [plural, name, subresource] => (find(plural)?, Some(name), Some(subresource)),
        _ => return Err(Unknown),
    };
    if namespace.is_some() && !resource.namespaced {
        return Err(Unknown);
    }
    if name.is_some_and(str::is_empty) {
        return Err(Unknown);
    }
    Ok(Target { resource, namespace, name, subresource })
}

/// `/api/v1/namespaces/{name}/status` (and `finalize`): the namespace's own subresources.
fn is_namespace_subresource(segment: &str, tail: &[&str]) -> bool {
    tail.is_empty() && matches!(segment, "status" | "finalize")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(path: &str) -> (&'static str, Option<&str>, Option<&str>, Option<&str>) {
        match endpoint(path).unwrap() {
            Endpoint::Resource(target) => (target.resource.plural, target.namespace, target.name, target.subresource),
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn paths_name_what_the_api_server_names() {
        assert_eq!(resource("/api/v1/pods"), ("pods", None, None, None));
        assert_eq!(resource("/api/v1/namespaces/a/pods"), ("pods", Some("a"), None, None));
        assert_eq!(resource("/api/v1/namespaces/a/pods/p/status"), ("pods", Some("a"), Some("p"), Some("status")));
        assert_eq!(resource("/api/v1/namespaces"), ("namespaces", None, None, None));
        assert_eq!(resource("/api/v1/namespaces/a"), ("namespaces", None, Some("a"), None));
        assert_eq!(resource("/api/v1/namespaces/a/status"), ("namespaces", None, Some("a"), Some("status")));
        assert_eq!(resource("/api/v1/nodes/n"), ("nodes", None, Some("n"), None));
        assert_eq!(
            resource("/apis/gpu.cozystack.io/v1alpha1/namespaces/t/gpuclaims/c"),
            ("gpuclaims", Some("t"), Some("c"), None)
        );
        assert_eq!(resource("/apis/gpu.cozystack.io/v1alpha1/gpuclaims"), ("gpuclaims", None, None, None));
        assert_eq!(endpoint("/apis/gpu.cozystack.io"), Ok(Endpoint::Group("gpu.cozystack.io")));
        assert_eq!(endpoint("/api/v1"), Ok(Endpoint::ResourceList { group: "", version: "v1" }));
        assert_eq!(endpoint("/openapi/v3/apis/apps/v1"), Ok(Endpoint::OpenApiDocument("apis/apps/v1".into())));
        for unknown in ["/", "/api/v1/nonsense", "/api/v1/namespaces/a/nodes", "/apis/x.io/v1/things", "/metrics"] {
            assert_eq!(endpoint(unknown), Err(Unknown), "{unknown}");
        }
    }
}
