//! kube-rs against a served twin (issue 39): discovery, LIST with pages and selectors, GET, the API server's
//! errors, a watch resumed from a revision the history dropped (410 in the stream) and kube-rs's watcher relisting
//! through it, and a reflector that ends equal to a fresh list while the scenario runs.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use gpuclaim_engine::api::GPUClaim;
use gpuclaim_scenarios::scenario::parse_scenario;
use gpuclaim_serve::pacer::Speed;
use gpuclaim_serve::{Config, Ready};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{WatchStreamExt, reflector, watcher};

/// Two nodes, and a tenant whose VMs with template claims arrive every 30 s on average and live 5 minutes.
const CHURN: &str = "name: churn\nduration: 3h\ncluster:\n  classes: [{name: gpu, resourceName: example.com/gpu, mode: \
    Passthrough, maxCount: 1}]\n  nodes: [{prefix: gpu-, count: 2, cpu: '64', memory: 256Gi, devices: \
    {example.com/gpu: 8}}]\n  tenants: [{name: team}]\nworkloads:\n- {tenant: team, prefix: vm, cpu: '1', \
    memory: 1Gi, arrivalsPerHour: 120, meanLifetime: 5m, gpus: [{claimTemplate: {class: gpu, count: 1}}]}\n";

fn temp_path(name: &str) -> PathBuf {
    static COUNT: AtomicUsize = AtomicUsize::new(0);
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("served-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// A served twin of [`CHURN`] at `speed`, keeping `history` changes per resource; stops when dropped.
struct Twin {
    ready: Ready,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), gpuclaim_serve::ServeError>>,
}

impl Twin {
    async fn start(speed: Speed, history: usize) -> Twin {
        let scenario = parse_scenario(CHURN).unwrap();
        let mut config = Config::new(scenario, "127.0.0.1:0".parse().unwrap(), temp_path("kubeconfig"), speed);
        config.history_max = history;
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(gpuclaim_serve::run(
            config,
            move |ready| {
                let _ = ready_tx.send(ready.clone());
            },
            async move {
                let _ = stopped.await;
            },
        ));
        let ready = tokio::time::timeout(Duration::from_secs(30), ready_rx).await.unwrap().unwrap();
        Twin { ready, stop: Some(stop), task }
    }

    async fn client(&self) -> kube::Client {
        let kubeconfig = Kubeconfig::read_from(&self.ready.kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await.unwrap();
        kube::Client::try_from(config).unwrap()
    }

    /// A client of the twin holding `token` instead of the kubeconfig's.
    async fn client_with_token(&self, token: &str) -> kube::Client {
        let mut kubeconfig = Kubeconfig::read_from(&self.ready.kubeconfig).unwrap();
        kubeconfig.auth_infos[0].auth_info.as_mut().unwrap().token = Some(token.to_owned().into());
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await.unwrap();
        kube::Client::try_from(config).unwrap()
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(30), &mut self.task).await.unwrap().unwrap().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_lists_gets_and_pages_through_a_running_twin() {
    let twin = Twin::start(Speed::Times(600.0), 10_000).await;
    let client = twin.client().await;
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(version.git_version, "v1.37.0-gpuclaim-twin");
    let nodes: Api<Node> = Api::all(client.clone());
    let names: Vec<String> =
        nodes.list(&ListParams::default()).await.unwrap().items.into_iter().map(|n| n.metadata.name.unwrap()).collect();
    assert_eq!(names, ["gpu-0000", "gpu-0001"]);
    let node = nodes.get("gpu-0000").await.unwrap();
    assert_eq!(node.status.unwrap().allocatable.unwrap()["example.com/gpu"].0, "8");
    let missing = nodes.get("gpu-9").await.unwrap_err();
    let kube::Error::Api(status) = missing else { panic!("{missing:?}") };
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
    assert_eq!(status.message, "nodes \"gpu-9\" not found");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    assert!(namespaces.get("team").await.is_ok());
    // Wait until VMs run, then page through the pods one at a time.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "team");
    let mut seen = 0;
    for _ in 0..100 {
        seen = pods.list(&ListParams::default()).await.unwrap().items.len();
        if seen >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(seen >= 3, "{seen} pods");
    let mut params = ListParams::default().limit(1);
    let mut pages = 0;
    let first = pods.list(&params).await.unwrap();
    let revision = first.metadata.resource_version.clone().unwrap();
    let mut token = first.metadata.continue_.clone();
    while let Some(next) = token.filter(|t| !t.is_empty()) {
        params = params.continue_token(&next);
        let page = pods.list(&params).await.unwrap();
        assert_eq!(page.metadata.resource_version.as_deref(), Some(revision.as_str()));
        token = page.metadata.continue_;
        pages += 1;
    }
    assert!(pages >= 1, "paged");
    // Selectors: the launchers carry the claims label and are bound to a node or not.
    let selected = ListParams::default().labels("gpu.cozystack.io/claims=true").fields("spec.nodeName!=");
    for pod in pods.list(&selected).await.unwrap() {
        assert!(pod.spec.unwrap().node_name.is_some());
    }
    let bad = pods.list(&ListParams::default().fields("spec.color=red")).await.unwrap_err();
    let kube::Error::Api(status) = bad else { panic!("{bad:?}") };
    assert_eq!((status.code, status.message.as_str()), (400, "field label not supported: spec.color"));
    let claims: Api<GPUClaim> = Api::all(client.clone());
    assert!(!claims.list(&ListParams::default()).await.unwrap().items.is_empty(), "template claims are served");
    twin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_a_dropped_revision_gets_410_in_the_stream_and_the_watcher_relists() {
    let twin = Twin::start(Speed::Times(1200.0), 5).await;
    let client = twin.client().await;
    let pods: Api<Pod> = Api::all(client.clone());
    let old = pods.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    // Let more than five pod changes happen.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut stream = pods.watch(&WatchParams::default(), &old).await.unwrap().boxed();
    let event = tokio::time::timeout(Duration::from_secs(10), stream.try_next()).await.unwrap().unwrap().unwrap();
    let WatchEvent::Error(error) = event else { panic!("{event:?}") };
    assert_eq!((error.code, error.reason.as_str()), (410, "Expired"));
    assert!(error.message.starts_with(&format!("too old resource version: {old} (")), "{}", error.message);
    // kube-rs's watcher relists on that event; its reflector ends equal to a fresh list.
    let (reader, writer) = reflector::store::<Pod>();
    let watched = reflector(writer, watcher(pods.clone(), watcher::Config::default())).applied_objects();
    let driver = tokio::spawn(watched.for_each(|_| async {}));
    reader.wait_until_ready().await.unwrap();
    let mut equal = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let listed = pods.list(&ListParams::default()).await.unwrap();
        let mut listed: Vec<(String, String)> = listed
            .items
            .iter()
            .map(|p| (p.metadata.name.clone().unwrap(), p.metadata.resource_version.clone().unwrap()))
            .collect();
        let mut cached: Vec<(String, String)> = reader
            .state()
            .iter()
            .map(|p| (p.metadata.name.clone().unwrap(), p.metadata.resource_version.clone().unwrap()))
            .collect();
        listed.sort();
        cached.sort();
        if listed == cached {
            equal = true;
            break;
        }
    }
    assert!(equal, "the reflector caught up with the served pods");
    driver.abort();
    twin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_the_token_is_unauthorized() {
    let twin = Twin::start(Speed::Times(1.0), 100).await;
    let mut kubeconfig = Kubeconfig::read_from(&twin.ready.kubeconfig).unwrap();
    kubeconfig.auth_infos[0].auth_info.as_mut().unwrap().token = Some("wrong".to_owned().into());
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await.unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let error = Api::<Node>::all(client).list(&ListParams::default()).await.unwrap_err();
    let kube::Error::Api(status) = error else { panic!("{error:?}") };
    assert_eq!(status.code, 401);
    twin.stop().await;
}

/// The API error of a failed call.
fn api_error<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected an API error: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_accounts_minted_token_is_held_to_its_roles() {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec, TokenReview, TokenReviewSpec};
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec, SubjectAccessReview,
        SubjectAccessReviewSpec,
    };
    use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
    use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};

    let twin = Twin::start(Speed::Times(1.0), 1000).await;
    let admin = twin.client().await;
    let post = PostParams::default();
    let named = |name: &str| kube::api::ObjectMeta { name: Some(name.to_owned()), ..Default::default() };
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), "team");
    let request = TokenRequest { spec: TokenRequestSpec::default(), ..Default::default() };
    let missing = api_error(accounts.create_token_request("reader", &post, &request).await);
    assert_eq!((missing.code, missing.message.as_str()), (404, "serviceaccounts \"reader\" not found"));
    accounts.create(&post, &ServiceAccount { metadata: named("reader"), ..Default::default() }).await.unwrap();
    let rule = PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(vec!["configmaps".to_owned()]),
        verbs: vec!["get".to_owned(), "list".to_owned()],
        ..Default::default()
    };
    let role = Role { metadata: named("read-configmaps"), rules: Some(vec![rule]) };
    Api::<Role>::namespaced(admin.clone(), "team").create(&post, &role).await.unwrap();
    let binding = RoleBinding {
        metadata: named("reader"),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_owned(),
            kind: "Role".to_owned(),
            name: "read-configmaps".to_owned(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_owned(),
            name: "reader".to_owned(),
            ..Default::default()
        }]),
    };
    Api::<RoleBinding>::namespaced(admin.clone(), "team").create(&post, &binding).await.unwrap();
    let configmaps: Api<ConfigMap> = Api::namespaced(admin.clone(), "team");
    configmaps.create(&post, &ConfigMap { metadata: named("c"), ..Default::default() }).await.unwrap();

    let minted = accounts.create_token_request("reader", &post, &request).await.unwrap();
    assert_eq!(minted.spec.expiration_seconds, Some(3600));
    let token = minted.status.unwrap().token;
    let reader = twin.client_with_token(&token).await;
    let readable: Api<ConfigMap> = Api::namespaced(reader.clone(), "team");
    assert_eq!(readable.get("c").await.unwrap().metadata.name.as_deref(), Some("c"));
    assert_eq!(readable.list(&ListParams::default()).await.unwrap().items.len(), 1);
    let refused = api_error(readable.create(&post, &ConfigMap { metadata: named("d"), ..Default::default() }).await);
    assert_eq!((refused.code, refused.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        refused.message,
        "configmaps is forbidden: User \"system:serviceaccount:team:reader\" cannot create resource \"configmaps\" \
         in API group \"\" in the namespace \"team\""
    );
    let nodes = api_error(Api::<Node>::all(reader.clone()).get("gpu-0000").await);
    assert_eq!(
        nodes.message,
        "nodes \"gpu-0000\" is forbidden: User \"system:serviceaccount:team:reader\" cannot get resource \"nodes\" \
         in API group \"\" at the cluster scope"
    );
    assert_eq!(
        reader.apiserver_version().await.unwrap().git_version,
        "v1.37.0-gpuclaim-twin",
        "discovery is everyone's"
    );

    // Who the token is, and what the account may do, as the reviews answer.
    let review = TokenReview {
        spec: TokenReviewSpec { token: Some(token.clone()), ..Default::default() },
        ..Default::default()
    };
    let reviewed = Api::<TokenReview>::all(admin.clone()).create(&post, &review).await.unwrap().status.unwrap();
    assert_eq!(reviewed.authenticated, Some(true));
    let user = reviewed.user.unwrap();
    assert_eq!(user.username.as_deref(), Some("system:serviceaccount:team:reader"));
    assert_eq!(user.groups.unwrap(), ["system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated"]);
    assert!(user.uid.is_some_and(|uid| !uid.is_empty()));
    let unknown = TokenReview {
        spec: TokenReviewSpec { token: Some("not-a-token".to_owned()), ..Default::default() },
        ..Default::default()
    };
    let unknown = Api::<TokenReview>::all(admin.clone()).create(&post, &unknown).await.unwrap().status.unwrap();
    assert_eq!(unknown.authenticated, None);

    let attributes = |verb: &str| ResourceAttributes {
        namespace: Some("team".to_owned()),
        verb: Some(verb.to_owned()),
        resource: Some("configmaps".to_owned()),
        ..Default::default()
    };
    let access = |verb: &str| SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some("system:serviceaccount:team:reader".to_owned()),
            groups: Some(vec!["system:serviceaccounts".to_owned(), "system:authenticated".to_owned()]),
            resource_attributes: Some(attributes(verb)),
            ..Default::default()
        },
        ..Default::default()
    };
    let reviews: Api<SubjectAccessReview> = Api::all(admin.clone());
    let allowed = reviews.create(&post, &access("get")).await.unwrap().status.unwrap();
    assert!(allowed.allowed);
    assert_eq!(
        allowed.reason.as_deref(),
        Some(
            "RBAC: allowed by RoleBinding \"reader/team\" of Role \"read-configmaps\" to ServiceAccount \"reader/team\""
        )
    );
    let denied = reviews.create(&post, &access("create")).await.unwrap().status.unwrap();
    assert!(!denied.allowed);
    let forbidden = api_error(Api::<SubjectAccessReview>::all(reader.clone()).create(&post, &access("get")).await);
    assert_eq!(forbidden.code, 403, "reviewing others takes a grant");
    let mine = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec { resource_attributes: Some(attributes("list")), ..Default::default() },
        ..Default::default()
    };
    let mine = Api::<SelfSubjectAccessReview>::all(reader.clone()).create(&post, &mine).await.unwrap();
    assert!(mine.status.unwrap().allowed);

    // A token the twin never issued is refused; the administrator still does everything.
    let stranger = twin.client_with_token("not-a-token").await;
    assert_eq!(api_error(Api::<ConfigMap>::namespaced(stranger, "team").get("c").await).code, 401);
    Api::<ConfigMap>::namespaced(admin.clone(), "team").delete("c", &Default::default()).await.unwrap();
    // Deleting the account ends its token.
    accounts.delete("reader", &Default::default()).await.unwrap();
    assert_eq!(api_error(readable.get("c").await).code, 401);
    twin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_scheduler_binds_its_pod_through_pods_binding() {
    let twin = Twin::start(Speed::Times(60.0), 10_000).await;
    let client = twin.client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "team");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "mine"},
        "spec": {
            "schedulerName": "client-scheduler",
            "containers": [{"name": "main", "image": "example.com/app:1", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    // kube-scheduler leaves a pod for another scheduler alone.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(pods.get("mine").await.unwrap().spec.unwrap().node_name, None);
    let binding = serde_json::json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "mine"}, "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-0001"}});
    let answer: serde_json::Value =
        pods.create_subresource("binding", "mine", &PostParams::default(), &binding).await.unwrap();
    assert_eq!(answer["status"], "Success");
    let mut phase = None;
    for _ in 0..100 {
        let pod = pods.get("mine").await.unwrap();
        assert_eq!(pod.spec.as_ref().unwrap().node_name.as_deref(), Some("gpu-0001"));
        phase = pod.status.and_then(|s| s.phase);
        if phase.as_deref() == Some("Running") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(phase.as_deref(), Some("Running"), "the kubelet started it on its node");
    let again = pods
        .create_subresource::<serde_json::Value, serde_json::Value>("binding", "mine", &PostParams::default(), &binding)
        .await
        .unwrap_err();
    let kube::Error::Api(status) = again else { panic!("{again:?}") };
    assert_eq!((status.code, status.message.as_str()), (409, "pod mine is already assigned to node \"gpu-0001\""));
    twin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_placement_condition_is_written_through_pods_status_and_the_rest_of_status_is_refused() {
    let twin = Twin::start(Speed::Times(1.0), 10_000).await;
    let client = twin.client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "team");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "waits"},
        "spec": {"schedulerName": "elsewhere", "containers": [{"name": "main", "image": "example.com/app:1"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let version = pods.get("waits").await.unwrap().metadata.resource_version.unwrap();
    // The adapter's SetPodWaiting: a strategic merge patch of pods/status, the condition merged by type.
    let waiting = serde_json::json!({"metadata": {"resourceVersion": version}, "status": {"conditions": [{
        "type": "gpu.cozystack.io/Placement", "status": "False", "reason": "NoCapacity",
        "message": "no node has 2 free units", "lastTransitionTime": "2027-01-15T08:00:00Z"}]}});
    let params = kube::api::PatchParams::default();
    pods.patch_status("waits", &params, &kube::api::Patch::Strategic(&waiting)).await.unwrap();
    let conditions = pods.get("waits").await.unwrap().status.unwrap().conditions.unwrap();
    let placement = conditions.iter().find(|c| c.type_ == "gpu.cozystack.io/Placement").unwrap();
    assert_eq!(
        (placement.reason.as_deref(), placement.message.as_deref()),
        (Some("NoCapacity"), Some("no node has 2 free units"))
    );
    // A stale revision is a conflict, as the adapter's precondition expects.
    let stale = pods.patch_status("waits", &params, &kube::api::Patch::Strategic(&waiting)).await.unwrap_err();
    let kube::Error::Api(status) = stale else { panic!("{stale:?}") };
    assert_eq!(status.code, 409);
    // The kubelet's fields are not the client's.
    let phase = serde_json::json!({"status": {"phase": "Running"}});
    let refused = pods.patch_status("waits", &params, &kube::api::Patch::Merge(&phase)).await.unwrap_err();
    let kube::Error::Api(status) = refused else { panic!("{refused:?}") };
    assert_eq!(status.code, 422);
    assert!(status.message.contains("only the GPU controller's placement condition"), "{}", status.message);
    twin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_controllers_caches_sync_against_a_served_twin_and_follow_it() {
    use gpuclaim_adapter::cache::Caches;
    use gpuclaim_adapter::shared::SharedView;

    let twin = Twin::start(Speed::Times(60.0), 10_000).await;
    let client = twin.client().await;
    // The adapter's own watches (its selectors: the claims label and its negation, pods still on nodes, the settings
    // by name), as the controller runs them.
    let caches = Caches::new(SharedView::default());
    let tasks: Vec<_> = caches
        .watches(&client, gpuclaim_engine::keys::DEFAULT_CONTROLLER_NAMESPACE)
        .into_iter()
        .map(|(_, watch)| tokio::spawn(watch))
        .collect();
    let mut synced = caches.synced();
    tokio::time::timeout(Duration::from_secs(30), synced.wait_for(|_| caches.all_synced())).await.unwrap().unwrap();
    {
        let view = caches.view.read().unwrap();
        assert_eq!(view.nodes().count(), 2);
        assert_eq!(view.classes().map(|class| class.name.as_str()).collect::<Vec<_>>(), ["gpu"]);
        assert!(view.settings.controller_user.is_some(), "the settings ConfigMap is read by name");
    }
    // While VMs come and go, the cache follows the twin: its claims and launchers end equal to a fresh list.
    let claims: Api<GPUClaim> = Api::all(client.clone());
    let pods: Api<Pod> = Api::all(client.clone());
    let mut equal = false;
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let listed = |names: Vec<(String, String)>| {
            let mut names = names;
            names.sort();
            names
        };
        let served_claims = listed(
            claims
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .iter()
                .map(|c| (c.metadata.name.clone().unwrap(), c.metadata.resource_version.clone().unwrap()))
                .collect(),
        );
        let served_pods = listed(
            pods.list(&ListParams::default().labels("gpu.cozystack.io/claims=true"))
                .await
                .unwrap()
                .items
                .iter()
                .map(|p| (p.metadata.name.clone().unwrap(), p.metadata.resource_version.clone().unwrap()))
                .collect(),
        );
        let view = caches.view.read().unwrap();
        let cached_claims =
            listed(view.claims().map(|c| (c.name.to_string(), c.resource_version.to_string())).collect());
        let cached_pods = listed(
            view.pods()
                .filter(|p| p.labels.get("gpu.cozystack.io/claims").map(String::as_str) == Some("true"))
                .map(|p| (p.name.to_string(), p.resource_version.to_string()))
                .collect(),
        );
        if !served_claims.is_empty() && served_claims == cached_claims && served_pods == cached_pods {
            equal = true;
            break;
        }
    }
    assert!(equal, "the live controller's cache follows the served twin");
    for task in tasks {
        task.abort();
    }
    twin.stop().await;
}
