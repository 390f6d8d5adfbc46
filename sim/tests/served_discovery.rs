//! The served registry, discovery documents and Status bodies: the registry agrees with itself, with admission's
//! resource constants and with our CRDs; every row is discoverable both ways with the same verbs and scope; the
//! documents read back into kube-core's and k8s-openapi's types; the OpenAPI documents carry what kubectl checks;
//! Status bodies are the API server's.

use std::collections::BTreeSet;

use gpuclaim_sim::apiserver::admission::policy::Denial;
use gpuclaim_sim::apiserver::admission::request;
use gpuclaim_sim::apiserver::admission::{AdmissionError, crd::RuleBroken};
use gpuclaim_sim::apiserver::gates::Invalid;
use gpuclaim_sim::apiserver::{ApiError, Kind};
use gpuclaim_sim::served::resources::{self, RESOURCES, Resource};
use gpuclaim_sim::served::select::FieldSelector;
use gpuclaim_sim::served::{discovery, status};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIGroup, APIGroupList, APIResourceList, APIVersions};
use kube_core::CustomResourceExt;
use kube_core::discovery::v2::APIGroupDiscoveryList;
use serde_json::{Value, json};

fn row(group: &str, version: &str, plural: &str) -> &'static Resource {
    resources::find(group, version, plural).unwrap_or_else(|| panic!("{group}/{version}/{plural} is served"))
}

#[test]
fn every_row_is_unique_by_resource_and_by_kind() {
    let by_resource: BTreeSet<_> = RESOURCES.iter().map(|r| (r.group, r.version, r.plural)).collect();
    let by_kind: BTreeSet<_> = RESOURCES.iter().map(|r| (r.group, r.kind)).collect();
    assert_eq!(by_resource.len(), RESOURCES.len());
    assert_eq!(by_kind.len(), RESOURCES.len());
    for resource in RESOURCES {
        assert!(!resource.verbs.contains(&"deletecollection"), "{}: deletecollection is not served", resource.plural);
        let mut sorted = resource.verbs.to_vec();
        sorted.sort();
        assert_eq!(sorted, resource.verbs, "{}: verbs are listed sorted", resource.plural);
        assert_eq!(resources::of_kind(&resource.api_version(), resource.kind), Some(resource));
    }
}

#[test]
fn no_short_name_is_taken_twice() {
    let mut short_names = BTreeSet::new();
    for resource in RESOURCES {
        for name in resource.short_names {
            assert!(short_names.insert(*name), "short name {name} is taken twice");
        }
    }
}

#[test]
fn admissions_resource_constants_agree_with_the_registry() {
    for constant in [request::CLAIMS, request::USAGES, request::PODS, request::VMIS, request::NAMESPACES] {
        let resource = row(constant.group, constant.version, constant.resource);
        assert_eq!(resource.kind, constant.kind, "{}", constant.resource);
        assert_eq!(resource.namespaced, constant.namespaced, "{}", constant.resource);
    }
}

#[test]
fn our_crds_names_are_the_registrys() {
    use gpuclaim_engine::api::{GPUClaim, GPUClass, GPUUsage};
    for crd in [GPUClass::crd(), GPUClaim::crd(), GPUUsage::crd()] {
        let names = &crd.spec.names;
        let version = &crd.spec.versions[0];
        let resource = row(&crd.spec.group, &version.name, &names.plural);
        assert_eq!(resource.kind, names.kind);
        assert_eq!(Some(resource.singular), names.singular.as_deref());
        assert_eq!(resource.short_names, names.short_names.clone().unwrap_or_default());
        assert_eq!(resource.categories, names.categories.clone().unwrap_or_default());
        assert_eq!(resource.scope(), crd.spec.scope);
        let status = version.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some();
        assert_eq!(resource.subresource("status").is_some(), status, "{}", names.plural);
        assert!(resource.is_custom());
    }
}

#[test]
fn every_row_is_in_its_legacy_list_and_in_aggregated_discovery_alike() {
    let core: APIGroupDiscoveryList = serde_json::from_value(discovery::aggregated(true)).unwrap();
    let groups: APIGroupDiscoveryList = serde_json::from_value(discovery::aggregated(false)).unwrap();
    assert_eq!(core.items.len(), 1);
    for resource in RESOURCES {
        let (group, version) = resource.group_version();
        let list: APIResourceList =
            serde_json::from_value(discovery::api_resource_list(group, version).unwrap()).unwrap();
        assert_eq!(list.group_version, resource.api_version());
        let legacy = list.resources.iter().find(|r| r.name == resource.plural).unwrap();
        assert_eq!((legacy.kind.as_str(), legacy.namespaced), (resource.kind, resource.namespaced));
        assert_eq!(legacy.verbs, resource.verbs);
        assert_eq!(legacy.singular_name, resource.singular);
        assert_eq!(legacy.short_names.clone().unwrap_or_default(), resource.short_names);
        for subresource in resource.subresources {
            let name = format!("{}/{}", resource.plural, subresource.name);
            let legacy = list.resources.iter().find(|r| r.name == name).unwrap();
            assert_eq!(legacy.verbs, subresource.verbs);
        }

        let items = if group.is_empty() { &core.items } else { &groups.items };
        let item = items
            .iter()
            .find(|item| item.metadata.as_ref().and_then(|m| m.name.as_deref()).unwrap_or("") == group)
            .unwrap_or_else(|| panic!("group {group:?} is discovered"));
        let served = item.versions.iter().find(|v| v.version.as_deref() == Some(version)).unwrap();
        assert_eq!(served.freshness.as_deref(), Some("Current"));
        let aggregated = served.resources.iter().find(|r| r.resource.as_deref() == Some(resource.plural)).unwrap();
        assert_eq!(aggregated.verbs, resource.verbs);
        assert_eq!(aggregated.scope.as_deref(), Some(resource.scope()));
        assert_eq!(aggregated.singular_resource.as_deref(), Some(resource.singular));
        assert_eq!(aggregated.short_names, resource.short_names);
        assert_eq!(aggregated.categories, resource.categories);
        let kind = aggregated.response_kind.as_ref().unwrap();
        assert_eq!(kind.group.as_deref(), Some(group));
        assert_eq!(kind.kind.as_deref(), Some(resource.kind));
        let subresources: Vec<_> = aggregated.subresources.iter().map(|s| s.subresource.clone().unwrap()).collect();
        assert_eq!(subresources, resource.subresources.iter().map(|s| s.name).collect::<Vec<_>>());
    }
}

#[test]
fn the_legacy_group_documents_read_back_as_k8s_openapi_types() {
    let versions: APIVersions = serde_json::from_value(discovery::api_versions("127.0.0.1:6443")).unwrap();
    assert_eq!(versions.versions, ["v1"]);
    assert_eq!(versions.server_address_by_client_cidrs[0].server_address, "127.0.0.1:6443");
    let list: APIGroupList = serde_json::from_value(discovery::api_group_list()).unwrap();
    let names: Vec<&str> = list.groups.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "apps",
            "events.k8s.io",
            "authentication.k8s.io",
            "authorization.k8s.io",
            "policy",
            "rbac.authorization.k8s.io",
            "storage.k8s.io",
            "admissionregistration.k8s.io",
            "apiextensions.k8s.io",
            "coordination.k8s.io",
            "cert-manager.io",
            "gpu.cozystack.io",
            "kubevirt.io",
        ]
    );
    let gpu: APIGroup = serde_json::from_value(discovery::api_group("gpu.cozystack.io").unwrap()).unwrap();
    assert_eq!(gpu.preferred_version.unwrap().group_version, "gpu.cozystack.io/v1alpha1");
    assert_eq!(discovery::api_group(""), None);
    assert_eq!(discovery::api_group("nothing.example"), None);
    assert_eq!(discovery::api_resource_list("apps", "v2"), None);
}

#[test]
fn aggregated_discovery_lists_the_groups_in_the_legacy_order() {
    let legacy: Vec<Value> =
        discovery::api_group_list()["groups"].as_array().unwrap().iter().map(|g| g["name"].clone()).collect();
    let aggregated: Vec<Value> = discovery::aggregated(false)["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["metadata"]["name"].clone())
        .collect();
    assert_eq!(legacy, aggregated);
    let core = discovery::aggregated(true);
    assert_eq!(core["items"][0]["metadata"], json!({}));
    let resources = core["items"][0]["versions"][0]["resources"].as_array().unwrap();
    assert!(resources.iter().map(|r| r["resource"].as_str().unwrap()).is_sorted());
}

#[test]
fn the_field_selectors_kubectl_and_the_adapter_send_are_supported() {
    let supported = |group, version, plural, selector: &str| {
        let labels = row(group, version, plural).field_selector_labels();
        FieldSelector::parse(selector).unwrap().check_supported(&labels)
    };
    // kubectl describe's events (issue 39 probe), kubectl wait's name, the adapter's pods.
    let describe =
        "involvedObject.kind=ConfigMap,involvedObject.uid=u,involvedObject.name=c1,involvedObject.namespace=default";
    assert_eq!(supported("", "v1", "events", describe), Ok(()));
    assert_eq!(supported("", "v1", "pods", "metadata.name=p1"), Ok(()));
    assert_eq!(supported("", "v1", "pods", "status.phase!=Succeeded,status.phase!=Failed,spec.nodeName=n1"), Ok(()));
    assert_eq!(supported("gpu.cozystack.io", "v1alpha1", "gpuclaims", "metadata.namespace=tenant-a"), Ok(()));
    assert_eq!(
        supported("gpu.cozystack.io", "v1alpha1", "gpuclaims", "spec.className=h100").unwrap_err().to_string(),
        "field label not supported: spec.className"
    );
}

#[test]
fn the_core_resource_list_is_shaped_as_the_api_servers() {
    let list = discovery::api_resource_list("", "v1").unwrap();
    assert_eq!(list.get("apiVersion"), None, "the core list carries no apiVersion");
    let rows = list["resources"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert!(names.is_sorted(), "{names:?}");
    assert!(names.windows(3).any(|three| three == ["pods", "pods/binding", "pods/status"]), "{names:?}");
    let binding = rows.iter().find(|r| r["name"] == "pods/binding").unwrap();
    assert_eq!(
        binding,
        &json!({"name": "pods/binding", "singularName": "", "namespaced": true, "kind": "Binding", "verbs": ["create"]})
    );
    let token = rows.iter().find(|r| r["name"] == "serviceaccounts/token").unwrap();
    assert_eq!(
        token,
        &json!({"name": "serviceaccounts/token", "singularName": "", "namespaced": true,
            "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest", "verbs": ["create"]})
    );
    let pods = rows.iter().find(|r| r["name"] == "pods").unwrap();
    assert_eq!(
        pods,
        &json!({"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod",
            "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
            "shortNames": ["po"], "categories": ["all"]})
    );
    let status = rows.iter().find(|r| r["name"] == "pods/status").unwrap();
    assert_eq!(
        status,
        &json!({"name": "pods/status", "singularName": "", "namespaced": true, "kind": "Pod",
            "verbs": ["get", "patch", "update"]})
    );
}

#[test]
fn aggregated_discovery_is_asked_for_as_kubectl_asks() {
    let kubectl = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
    assert!(discovery::accepts_aggregated(kubectl));
    assert!(discovery::accepts_aggregated(kube_core::discovery::v2::ACCEPT_AGGREGATED_DISCOVERY_V2));
    assert!(!discovery::accepts_aggregated("application/json"));
    assert!(!discovery::accepts_aggregated("application/json, */*"));
    assert_eq!(
        discovery::AGGREGATED_CONTENT_TYPE,
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    let document = discovery::aggregated(false);
    assert_eq!(
        (document["kind"].as_str(), document["apiVersion"].as_str()),
        (Some("APIGroupDiscoveryList"), Some("apidiscovery.k8s.io/v2"))
    );
}

#[test]
fn every_kind_has_a_patch_operation_kubectl_reads_as_taking_field_validation() {
    let index = discovery::openapi_index();
    let paths = index["paths"].as_object().unwrap();
    assert_eq!(paths.len(), resources::group_versions().len());
    for (group, version) in resources::group_versions() {
        let path = discovery::openapi_path(group, version);
        let bytes = discovery::openapi_bytes(&path).unwrap();
        let hash = discovery::openapi_hash(&bytes);
        assert_eq!(hash.len(), 128);
        assert!(hash.chars().all(|c| c.is_ascii_digit() || c.is_ascii_uppercase()));
        assert_eq!(paths[&path]["serverRelativeURL"], format!("/openapi/v3/{path}?hash={hash}"));
        let document: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(document, discovery::openapi_document(&path).unwrap());
        for resource in resources::of_group_version(group, version) {
            // As cli-runtime's query_param_verifier_v3 reads it: the first PATCH with the kind's extension (the
            // collection's POST for a kind only ever created, a review).
            let method = if resource.serves("patch") { "patch" } else { "post" };
            let patch = document["paths"]
                .as_object()
                .unwrap()
                .values()
                .filter_map(|item| item.get(method))
                .find(|op| {
                    op["x-kubernetes-group-version-kind"]
                        == json!({"group": group, "version": version, "kind": resource.kind})
                })
                .unwrap_or_else(|| panic!("{} has a patch operation", resource.kind));
            let parameters = patch["parameters"].as_array().unwrap();
            assert!(
                parameters.iter().any(|p| p["name"] == "fieldValidation" && p["in"] == "query"),
                "{}",
                resource.kind
            );
        }
    }
    // SHA-512 of nothing, as Go's `fmt.Sprintf("%X", sha512.Sum512(nil))` writes it.
    let empty = "CF83E1357EEFB8BDF1542850D66D8007D620E4050B5715DC83F4A921D36CE9CE\
                 47D0D13C5D85F2B0FF8318D2877EEC2F63B931BD47417A81A538327AF927DA3E";
    assert_eq!(discovery::openapi_hash(b""), empty);
}

#[test]
fn version_is_the_twins() {
    let version: k8s_openapi::apimachinery::pkg::version::Info = serde_json::from_value(discovery::version()).unwrap();
    assert_eq!((version.major.as_str(), version.minor.as_str()), ("1", "37"));
    assert_eq!(version.git_version, "v1.37.0-gpuclaim-twin");
    assert_eq!(version.go_version, "n/a");
}

fn claims() -> &'static Resource {
    row("gpu.cozystack.io", "v1alpha1", "gpuclaims")
}

#[test]
fn a_missing_claim_is_not_found_by_its_resource() {
    let error = ApiError::NotFound { kind: Kind::Claim, name: "train".into() };
    let body = status::from_api_error(&error, claims(), "train");
    assert_eq!(
        body,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "gpuclaims.gpu.cozystack.io \"train\" not found", "reason": "NotFound",
            "details": {"name": "train", "group": "gpu.cozystack.io", "kind": "gpuclaims"}, "code": 404})
    );
    assert_eq!(body["message"], error.to_string());
    let pods = row("", "v1", "pods");
    let taken = ApiError::AlreadyExists { kind: Kind::Pod, name: "p".into() };
    let body = status::from_api_error(&taken, pods, "p");
    assert_eq!(body["message"], taken.to_string());
    assert_eq!(body["details"], json!({"name": "p", "kind": "pods"}));
    assert_eq!(body["code"], 409);
}

#[test]
fn a_conflict_keeps_the_api_servers_exact_text() {
    let error = ApiError::Conflict { kind: Kind::Claim, name: "train".into() };
    let body = status::from_api_error(&error, claims(), "train");
    assert_eq!(
        body,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Operation cannot be fulfilled on gpuclaims.gpu.cozystack.io \"train\": the object has been \
                modified; please apply your changes to the latest version and try again",
            "reason": "Conflict",
            "details": {"name": "train", "group": "gpu.cozystack.io", "kind": "gpuclaims"}, "code": 409})
    );
    assert_eq!(body["message"], error.to_string());
}

#[test]
fn every_modelled_kinds_messages_are_the_models() {
    for resource in RESOURCES {
        let resources::Storage::Modelled(kind) = resource.storage else { continue };
        for error in [
            ApiError::NotFound { kind, name: "x".into() },
            ApiError::AlreadyExists { kind, name: "x".into() },
            ApiError::Conflict { kind, name: "x".into() },
        ] {
            let body = status::from_api_error(&error, resource, "x");
            assert_eq!(body["message"], error.to_string());
            assert_eq!(body["code"], error.code());
            assert_eq!(body["reason"], error.reason());
        }
    }
}

#[test]
fn an_invalid_claim_names_its_kind_with_one_cause() {
    let broken = RuleBroken {
        field: "spec".into(),
        reason: "Forbidden",
        message: gpuclaim_engine::api::SPEC_IMMUTABLE_MESSAGE.into(),
    };
    let error = ApiError::Rule { kind: Kind::Claim, name: "train".into(), broken };
    let body = status::from_api_error(&error, claims(), "train");
    let message = format!(
        "GPUClaim.gpu.cozystack.io \"train\" is invalid: spec: Forbidden: {}",
        gpuclaim_engine::api::SPEC_IMMUTABLE_MESSAGE
    );
    assert_eq!(body["message"], message);
    assert_eq!(body["message"], error.to_string());
    assert_eq!(
        body["details"],
        json!({"name": "train", "group": "gpu.cozystack.io", "kind": "GPUClaim", "causes": [{
            "reason": "FieldValueForbidden",
            "message": format!("Forbidden: {}", gpuclaim_engine::api::SPEC_IMMUTABLE_MESSAGE),
            "field": "spec"}]})
    );
    assert_eq!((body["code"].as_u64(), body["reason"].as_str()), (Some(422), Some("Invalid")));

    let invalid = Invalid { field: "spec.schedulingGates[0]".into(), message: "Duplicate value: \"g\"".into() };
    let error = ApiError::Invalid { kind: Kind::Pod, name: "p".into(), invalid };
    let body = status::from_api_error(&error, row("", "v1", "pods"), "p");
    assert_eq!(body["message"], error.to_string());
    assert_eq!(
        body["details"],
        json!({"name": "p", "kind": "Pod", "causes": [{
            "reason": "FieldValueDuplicate", "message": "Duplicate value: \"g\"", "field": "spec.schedulingGates[0]"}]})
    );
}

#[test]
fn admission_refusals_are_worded_as_the_api_server_words_them() {
    let denied = ApiError::Admission(AdmissionError::Denied {
        name: "pods.gpu.cozystack.io".into(),
        reason: "Forbidden".into(),
        code: 403,
        message: "no".into(),
    });
    let body = status::from_api_error(&denied, row("", "v1", "pods"), "p");
    assert_eq!(
        body,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "admission webhook \"pods.gpu.cozystack.io\" denied the request: no",
            "reason": "Forbidden", "code": 403})
    );

    let denial = Denial { policy: "p".into(), binding: "b".into(), reason: "Forbidden".into(), message: "m".into() };
    let refused = ApiError::Admission(AdmissionError::Policy(denial));
    let body = status::from_api_error(&refused, claims(), "train");
    let text = "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: m";
    assert_eq!(body["message"], format!("gpuclaims.gpu.cozystack.io \"train\" is forbidden: {text}"));
    assert_eq!(
        body["details"],
        json!({"name": "train", "group": "gpu.cozystack.io", "kind": "gpuclaims", "causes": [{"message": text}]})
    );
    assert_eq!((body["code"].as_u64(), body["reason"].as_str()), (Some(403), Some("Forbidden")));
}

#[test]
fn a_webhook_outage_is_an_internal_error_around_the_calls_failure() {
    let outage = ApiError::Admission(AdmissionError::Unavailable {
        name: "orders.gpu.cozystack.io".into(),
        webhook: gpuclaim_engine::review::Webhook::Order,
        namespace: "cozy-gpu".into(),
    });
    let body = status::from_api_error(&outage, claims(), "train");
    assert_eq!(body["message"], outage.to_string());
    assert_eq!((body["code"].as_u64(), body["reason"].as_str()), (Some(500), Some("InternalError")));
    let cause = body["details"]["causes"][0]["message"].as_str().unwrap();
    assert_eq!(format!("Internal error occurred: {cause}"), outage.to_string());
    assert_eq!(body["details"].as_object().unwrap().len(), 1, "only the cause: {body}");
}

#[test]
fn route_refusals_are_go_restfuls_and_apimachinerys() {
    assert_eq!(
        status::not_found_path(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "the server could not find the requested resource", "reason": "NotFound", "details": {},
            "code": 404})
    );
    assert_eq!(
        status::method_not_allowed(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "the server does not allow this method on the requested resource", "reason": "MethodNotAllowed",
            "details": {}, "code": 405})
    );
    assert_eq!(
        status::method_not_supported(claims(), "deletecollection"),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "deletecollection is not supported on resources of kind \"gpuclaims.gpu.cozystack.io\"",
            "reason": "MethodNotAllowed", "details": {"group": "gpu.cozystack.io", "kind": "gpuclaims"}, "code": 405})
    );
    assert_eq!(
        status::unsupported_media_type(claims().patch_types()),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "the body of the request was in an unknown format - accepted media types include: \
                application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            "reason": "UnsupportedMediaType", "code": 415})
    );
    assert_eq!(status::bad_request("x")["code"], 400);
    assert_eq!(status::gone_expired("too old resource version: 1 (5)")["reason"], "Expired");
    assert_eq!(status::too_many_requests(1)["details"], json!({"retryAfterSeconds": 1}));
}
