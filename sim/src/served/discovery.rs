//! The discovery documents the twin serves, generated from the registry ([`super::resources`]): `/version`, the
//! legacy `/api`, `/apis`, `/apis/{group}` and APIResourceLists, aggregated discovery v2 (one document for `/api`,
//! one for `/apis`, when the Accept header asks for it: [`accepts_aggregated`]), and the OpenAPI v3 index and
//! per-group-version documents.
//!
//! The OpenAPI documents hold, for every kind, the item path's PATCH operation with the
//! `x-kubernetes-group-version-kind` extension and the `fieldValidation` query parameter: that is all kubectl 1.37
//! reads to decide server-side validation (cli-runtime `query_param_verifier_v3.go`: the first PATCH operation whose
//! extension names the kind must list a `query` parameter of that name). `components.schemas` is empty: kubectl then
//! probes `/openapi/v2` for strategic-merge metadata, which the served twin answers 404, and falls back (issue 39
//! plan, Appendix A). Each document's hash in the index is the API server's ETag: SHA-512 of the served bytes
//! ([`openapi_bytes`]), uppercase hex (kube-openapi `handler3` `computeETag`).
//!
//! ```
//! use gpuclaim_sim::served::discovery;
//!
//! let accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
//! assert!(discovery::accepts_aggregated(accept));
//! assert!(!discovery::accepts_aggregated("application/json"));
//! let pods = discovery::api_resource_list("", "v1").unwrap();
//! assert!(pods["resources"].as_array().unwrap().iter().any(|row| row["name"] == "pods/status"));
//! ```

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha512};

use super::media::{self, MediaRange};
use super::resources::{self, Resource};

/// The version the twin reports, as the API server it stands for.
pub const GIT_VERSION: &str = "v1.37.0-gpuclaim-twin";

/// The Content-Type of an aggregated discovery answer.
pub const AGGREGATED_CONTENT_TYPE: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// The `/version` body: the API server's `version.Info`. Every field is fixed (the platform too: the API server the
/// twin stands for runs on Linux), so the answer is the same on every machine.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "37",
        "emulationMajor": "1",
        "emulationMinor": "37",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "36",
        "gitVersion": GIT_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "n/a",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// The legacy `/api` body (`APIVersions`); `server_address` is the `host:port` clients reach the twin at.
pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

/// The legacy `/apis` body (`APIGroupList`): every group but the core one, in discovery's order.
pub fn api_group_list() -> Value {
    let groups: Vec<Value> = groups().into_iter().filter(|group| !group.is_empty()).map(group_entry).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// The legacy `/apis/{group}` body (`APIGroup`), if the group is served.
pub fn api_group(group: &str) -> Option<Value> {
    let group = groups().into_iter().find(|served| !served.is_empty() && *served == group)?;
    let mut entry = group_entry(group);
    let fields = entry.as_object_mut().expect("a group entry is an object");
    fields.insert("kind".into(), "APIGroup".into());
    fields.insert("apiVersion".into(), "v1".into());
    Some(entry)
}

/// The served groups, `""` first, in discovery's order.
fn groups() -> Vec<&'static str> {
    let mut groups: Vec<&'static str> = Vec::new();
    for (group, _) in resources::group_versions() {
        if !groups.contains(&group) {
            groups.push(group);
        }
    }
    groups
}

/// The versions of a group, in the registry's order (the first is the preferred one).
fn versions(group: &str) -> Vec<&'static str> {
    resources::group_versions().into_iter().filter(|(served, _)| *served == group).map(|(_, version)| version).collect()
}

/// One group as `APIGroupList` lists it.
fn group_entry(group: &str) -> Value {
    let versions: Vec<Value> = versions(group)
        .into_iter()
        .map(|version| json!({"groupVersion": format!("{group}/{version}"), "version": version}))
        .collect();
    let preferred = versions[0].clone();
    json!({"name": group, "versions": versions, "preferredVersion": preferred})
}

/// The `APIResourceList` of `/api/v1` (group `""`) or `/apis/{group}/{version}`, if served: the resources and their
/// subresources (as `plural/sub` rows), sorted by name.
pub fn api_resource_list(group: &str, version: &str) -> Option<Value> {
    let mut rows = Vec::new();
    for resource in resources::of_group_version(group, version) {
        rows.push(legacy_row(resource));
        for subresource in resource.subresources {
            let mut row = json!({
                "name": format!("{}/{}", resource.plural, subresource.name),
                "singularName": "",
                "namespaced": resource.namespaced,
            });
            // The API server names the kind's group and version only when they are not the list's.
            if let Some((group, version)) = subresource.kind_group_version {
                row["group"] = group.into();
                row["version"] = version.into();
            }
            row["kind"] = subresource.kind.into();
            row["verbs"] = json!(subresource.verbs);
            rows.push(row);
        }
    }
    if rows.is_empty() {
        return None;
    }
    // The API server lists resources and subresources sorted by name (its installer sorts the paths).
    rows.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    let mut list = json!({"kind": "APIResourceList", "groupVersion": group_version(group, version), "resources": rows});
    // The core group's list carries no apiVersion; the others' do.
    if !group.is_empty() {
        list["apiVersion"] = "v1".into();
    }
    Some(list)
}

fn legacy_row(resource: &Resource) -> Value {
    let mut row = json!({
        "name": resource.plural,
        "singularName": resource.singular,
        "namespaced": resource.namespaced,
        "kind": resource.kind,
        "verbs": resource.verbs,
    });
    if !resource.short_names.is_empty() {
        row["shortNames"] = json!(resource.short_names);
    }
    if !resource.categories.is_empty() {
        row["categories"] = json!(resource.categories);
    }
    row
}

fn group_version(group: &str, version: &str) -> String {
    match group {
        "" => version.to_owned(),
        group => format!("{group}/{version}"),
    }
}

/// The aggregated discovery document (`APIGroupDiscoveryList`, apidiscovery.k8s.io/v2) of `/api` (`core: true`: the
/// core group alone) or of `/apis` (every other group, in discovery's order).
pub fn aggregated(core: bool) -> Value {
    let items: Vec<Value> =
        groups().into_iter().filter(|group| group.is_empty() == core).map(aggregated_group).collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}

fn aggregated_group(group: &'static str) -> Value {
    let versions: Vec<Value> = versions(group)
        .into_iter()
        .map(|version| {
            let mut served: Vec<&Resource> = resources::of_group_version(group, version).collect();
            served.sort_by_key(|resource| resource.plural);
            let resources: Vec<Value> = served.into_iter().map(aggregated_resource).collect();
            json!({"version": version, "resources": resources, "freshness": "Current"})
        })
        .collect();
    let metadata = if group.is_empty() { json!({}) } else { json!({"name": group}) };
    json!({"metadata": metadata, "versions": versions})
}

fn aggregated_resource(resource: &Resource) -> Value {
    let response_kind = json!({"group": resource.group, "version": resource.version, "kind": resource.kind});
    let mut row = json!({
        "resource": resource.plural,
        "responseKind": response_kind,
        "scope": resource.scope(),
        "singularResource": resource.singular,
        "verbs": resource.verbs,
    });
    if !resource.short_names.is_empty() {
        row["shortNames"] = json!(resource.short_names);
    }
    if !resource.categories.is_empty() {
        row["categories"] = json!(resource.categories);
    }
    if !resource.subresources.is_empty() {
        let subresources: Vec<Value> = resource
            .subresources
            .iter()
            .map(|subresource| {
                let (group, version) = subresource.kind_group_version.unwrap_or((resource.group, resource.version));
                json!({
                    "subresource": subresource.name,
                    "responseKind": {"group": group, "version": version, "kind": subresource.kind},
                    "verbs": subresource.verbs,
                })
            })
            .collect();
        row["subresources"] = subresources.into();
    }
    row
}

/// Whether an Accept header asks `/api` or `/apis` for aggregated discovery v2, as the API server negotiates it: the
/// media ranges are taken by descending `q` (stable), the first one the server can answer decides. It answers
/// `application/json` (or `*/*`, `application/*`) without parameters with the legacy document, and
/// `application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList` with the aggregated one; any other range
/// (protobuf, v2beta1, a Table) is skipped. A header with no range it can answer reads as legacy.
pub fn accepts_aggregated(accept: &str) -> bool {
    media::ranges(accept).iter().find_map(answer) == Some(Answer::Aggregated)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    Legacy,
    Aggregated,
}

/// The document `range` accepts, if the server can answer it.
fn answer(range: &MediaRange<'_>) -> Option<Answer> {
    if !range.takes_json() {
        return None;
    }
    match (range.parameter("g"), range.parameter("v"), range.parameter("as")) {
        (None, None, None) => Some(Answer::Legacy),
        (Some("apidiscovery.k8s.io"), Some("v2"), Some("APIGroupDiscoveryList")) if range.is_json() => {
            Some(Answer::Aggregated)
        }
        _ => None,
    }
}

/// The OpenAPI v3 index (`/openapi/v3`): every served group version's document path, with its hash.
pub fn openapi_index() -> Value {
    let mut paths = Map::new();
    for (group, version) in resources::group_versions() {
        let path = openapi_path(group, version);
        let bytes = openapi_bytes(&path).expect("a served group version has a document");
        let url = format!("/openapi/v3/{path}?hash={}", openapi_hash(&bytes));
        paths.insert(path, json!({"serverRelativeURL": url}));
    }
    json!({"paths": paths})
}

/// The index key of a group version's document (`api/v1`, `apis/gpu.cozystack.io/v1alpha1`).
pub fn openapi_path(group: &str, version: &str) -> String {
    match group {
        "" => format!("api/{version}"),
        group => format!("apis/{group}/{version}"),
    }
}

/// The API server's ETag of a document: SHA-512 of its bytes, uppercase hex.
pub fn openapi_hash(bytes: &[u8]) -> String {
    let digest = Sha512::digest(bytes);
    let mut hex = String::with_capacity(digest.len() * 2);
    for byte in digest {
        hex.push_str(&format!("{byte:02X}"));
    }
    hex
}

/// The OpenAPI v3 document at `/openapi/v3/{path}` (`path` as [`openapi_path`] writes it), if served.
pub fn openapi_document(path: &str) -> Option<Value> {
    let (group, version) = match path.split('/').collect::<Vec<_>>()[..] {
        ["api", version] => ("", version),
        ["apis", group, version] if !group.is_empty() => (group, version),
        _ => return None,
    };
    let mut paths = Map::new();
    for resource in resources::of_group_version(group, version) {
        match resource.serves("patch") {
            true => paths.insert(item_path(resource), json!({"patch": patch_operation(resource)})),
            false => paths.insert(collection_path(resource), json!({"post": post_operation(resource)})),
        };
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": GIT_VERSION},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}

/// The bytes the server sends for [`openapi_document`], the ones its hash is of.
pub fn openapi_bytes(path: &str) -> Option<Vec<u8>> {
    openapi_document(path).map(|document| serde_json::to_vec(&document).expect("a JSON value serializes"))
}

/// `/api/v1/namespaces/{namespace}/pods/{name}`, `/apis/{g}/{v}/gpuclasses/{name}`.
fn item_path(resource: &Resource) -> String {
    let prefix = match resource.group {
        "" => format!("/api/{}", resource.version),
        group => format!("/apis/{group}/{}", resource.version),
    };
    let namespace = if resource.namespaced { "/namespaces/{namespace}" } else { "" };
    format!("{prefix}{namespace}/{}/{{name}}", resource.plural)
}

/// `/apis/{g}/{v}/tokenreviews`: where a resource that is only created is posted.
fn collection_path(resource: &Resource) -> String {
    let item = item_path(resource);
    item.strip_suffix("/{name}").unwrap_or(&item).to_owned()
}

/// The parameters every write takes (after the path's own).
fn write_parameters(parameters: &mut Vec<Value>) {
    parameters.push(parameter(
        "dryRun",
        "query",
        "When present, indicates that modifications should not be persisted.",
    ));
    parameters.push(parameter(
        "fieldManager",
        "query",
        "fieldManager is a name associated with the actor or entity that is making these changes.",
    ));
    parameters.push(parameter(
        "fieldValidation",
        "query",
        "fieldValidation instructs the server on how to handle objects in the request containing unknown or \
         duplicate fields. Valid values are: Ignore, Warn, Strict.",
    ));
}

/// The collection's POST of a resource that is only created (the reviews), with the kind's extension.
fn post_operation(resource: &Resource) -> Value {
    let mut parameters = Vec::new();
    write_parameters(&mut parameters);
    let kind = json!({"group": resource.group, "version": resource.version, "kind": resource.kind});
    json!({
        "description": format!("create a {}", resource.kind),
        "operationId": format!("create{}", resource.kind),
        "parameters": parameters,
        "requestBody": {"content": {"application/json": {"schema": {"type": "object"}}}, "required": true},
        "responses": {"200": {"description": "OK"}, "201": {"description": "Created"}},
        "x-kubernetes-action": "post",
        "x-kubernetes-group-version-kind": kind,
    })
}

fn patch_operation(resource: &Resource) -> Value {
    let mut parameters = vec![parameter("name", "path", "name of the resource")];
    if resource.namespaced {
        parameters.push(parameter("namespace", "path", "object name and auth scope, such as for teams and projects"));
    }
    write_parameters(&mut parameters);
    let content: Map<String, Value> = resource
        .patch_types()
        .iter()
        .map(|media| ((*media).to_owned(), json!({"schema": {"type": "object"}})))
        .collect();
    let kind = json!({"group": resource.group, "version": resource.version, "kind": resource.kind});
    json!({
        "description": format!("partially update the specified {}", resource.kind),
        "operationId": format!("patch{}", resource.kind),
        "parameters": parameters,
        "requestBody": {"content": content, "required": true},
        "responses": {"200": {"description": "OK"}, "201": {"description": "Created"}},
        "x-kubernetes-action": "patch",
        "x-kubernetes-group-version-kind": kind,
    })
}

/// One operation parameter: a path one is required.
fn parameter(name: &str, location: &str, description: &str) -> Value {
    let mut parameter = json!({
        "name": name,
        "in": location,
        "description": description,
        "schema": {"type": "string", "uniqueItems": true},
    });
    if location == "path" {
        parameter["required"] = true.into();
    }
    parameter
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_higher_quality_range_decides_before_an_earlier_one() {
        assert!(accepts_aggregated(
            "application/json;q=0.5,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        ));
        assert!(!accepts_aggregated(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=0,application/json"
        ));
    }

    #[test]
    fn ranges_the_server_cannot_answer_are_skipped() {
        let protobuf_first = "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,\
            application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
        assert!(accepts_aggregated(protobuf_first));
        assert!(!accepts_aggregated("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"));
        assert!(!accepts_aggregated("application/json;as=Table;v=v1;g=meta.k8s.io,application/json"));
        assert!(!accepts_aggregated(""));
        assert!(!accepts_aggregated("*/*"));
        assert!(!accepts_aggregated(";;,,"));
    }

    #[test]
    fn openapi_paths_name_the_item() {
        let pods = resources::find("", "v1", "pods").unwrap();
        assert_eq!(item_path(pods), "/api/v1/namespaces/{namespace}/pods/{name}");
        let classes = resources::find("gpu.cozystack.io", "v1alpha1", "gpuclasses").unwrap();
        assert_eq!(item_path(classes), "/apis/gpu.cozystack.io/v1alpha1/gpuclasses/{name}");
        assert_eq!(openapi_document("apis/nothing.example/v1"), None);
        assert_eq!(openapi_document("api"), None);
        assert_eq!(openapi_document("apis//v1"), None);
    }
}
