//! Realistic objects for tests, benchmarks and examples: classes, claims, and the launcher pods and VMIs KubeVirt
//! creates, shaped as KubeVirt shapes them (labels, nodeSelector, host-model affinity term, default tolerations).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use serde_json::{Value, json};

use crate::keys::{self, kubevirt};
use crate::model::{
    Claim, ClaimPhase, Class, GpuMode, Name, Node, Placement, Pod, Published, Time, View, Vmi, VmiPhase, VmiRef,
};

/// The taint GPU nodes carry so only GPU workloads land there.
pub fn gpu_toleration(resource_name: &str) -> Toleration {
    Toleration {
        key: Some(resource_name.to_owned()),
        operator: Some("Exists".to_owned()),
        effect: Some("NoSchedule".to_owned()),
        ..Toleration::default()
    }
}

/// A class whose nodes carry the taint `<resource>:NoSchedule`, with `largest_free_on_node` published.
pub fn class(name: &str, resource_name: &str, mode: GpuMode, max_count: u32, largest_free_on_node: u64) -> Class {
    Class {
        name: name.to_owned(),
        resource_name: resource_name.to_owned(),
        mode,
        max_count,
        node_selector: BTreeMap::new().into(),
        tolerations: vec![gpu_toleration(resource_name)].into(),
        live_migratable: mode == GpuMode::Vgpu,
        placement: Placement::BestFit,
        published: Published {
            allocatable_units: largest_free_on_node * 4,
            free_units: largest_free_on_node * 2,
            largest_free_on_node,
            fragmented_units: 0,
        },
        resource_version: "1".to_owned(),
    }
}

/// A held claim, Pending, with a uid derived from its name.
pub fn held_claim(namespace: &str, name: &str, class: &str, count: u32) -> Claim {
    Claim {
        namespace: namespace.into(),
        name: name.into(),
        uid: format!("uid-{namespace}-{name}").into(),
        resource_version: "1".into(),
        class: class.into(),
        count,
        finalizer: true,
        ..Claim::default()
    }
}

pub fn bound(mut claim: Claim, node: &str) -> Claim {
    claim.phase = ClaimPhase::Bound;
    claim.node = Some(node.into());
    claim
}

pub fn attached(claim: Claim, node: &str, vmi: &str) -> Claim {
    let mut claim = bound(claim, node);
    claim.phase = ClaimPhase::Attached;
    claim.attached_to = Some(VmiRef { name: vmi.into(), uid: format!("uid-vmi-{vmi}").into() });
    claim
}

/// A small platform: classes `h100` (passthrough, max 8, 8 free on one node) and `a100-40c` (vGPU, max 1);
/// tenant `tenant-a` (vGPU-entitled, budget 8 × h100) holding `train-a` (1 × h100 bound on gpu-1), `train-b`
/// (1 × h100 bound on gpu-2) and `busy` (1 × h100 attached to VMI `other`); tenant `tenant-b` with no entitlement.
pub fn platform() -> View {
    let mut view = View::default();
    view.upsert_class(class("h100", "nvidia.com/GH100_H100_SXM5_80GB", GpuMode::Passthrough, 8, 8));
    view.upsert_class(class("a100-40c", "nvidia.com/A100-40C", GpuMode::Vgpu, 1, 4));
    view.set_vgpu_entitled("tenant-a", true);
    view.set_vgpu_entitled("tenant-b", false);
    view.upsert_quota("tenant-a", "gpu-budget", BTreeMap::from([("h100".to_owned(), 8)]));
    view.upsert_claim(bound(held_claim("tenant-a", "train-a", "h100", 1), "gpu-1"));
    view.upsert_claim(bound(held_claim("tenant-a", "train-b", "h100", 1), "gpu-2"));
    view.upsert_claim(attached(held_claim("tenant-a", "busy", "h100", 1), "gpu-1", "other"));
    view
}

/// A VirtualMachineInstance as the VM render leaves it: references only as the claims label and annotation.
pub fn vmi_json(namespace: &str, name: &str, references: &str) -> Value {
    json!({
        "apiVersion": kubevirt::API_VERSION,
        "kind": kubevirt::KIND_VMI,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"kubevirt.io/domain": name, keys::LABEL_CLAIMS: keys::TRUE},
            "annotations": {keys::ANNOTATION_CLAIMS: references},
            "ownerReferences": [{
                "apiVersion": kubevirt::API_VERSION, "kind": "VirtualMachine", "name": name,
                "uid": format!("uid-vm-{name}"), "controller": true, "blockOwnerDeletion": true
            }]
        },
        "spec": {
            "domain": {
                "cpu": {"cores": 4, "model": "host-model"},
                "memory": {"guest": "16Gi"},
                "devices": {
                    "disks": [{"name": "rootdisk", "disk": {"bus": "virtio"}}],
                    "interfaces": [{"name": "default", "masquerade": {}}]
                },
                "resources": {}
            },
            "networks": [{"name": "default", "pod": {}}],
            "volumes": [{"name": "rootdisk", "dataVolume": {"name": format!("{name}-root")}}]
        }
    })
}

/// A virt-launcher pod as KubeVirt renders it for a VMI whose webhook recorded `attachments` (a JSON list); one
/// GPU request per unit of `resource_name`.
pub fn launcher_pod_json(namespace: &str, vmi: &str, attachments: &str, resource_name: &str, units: u32) -> Value {
    let vmi_uid = format!("uid-vmi-{vmi}");
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": format!("virt-launcher-{vmi}-"),
            "namespace": namespace,
            "labels": {
                kubevirt::LABEL_APP: kubevirt::LAUNCHER,
                kubevirt::LABEL_CREATED_BY: vmi_uid,
                "vm.kubevirt.io/name": vmi,
                "kubevirt.io/domain": vmi,
                keys::LABEL_CLAIMS: keys::TRUE
            },
            "annotations": {
                "kubectl.kubernetes.io/default-container": "compute",
                "kubevirt.io/domain": vmi,
                "kubevirt.io/migrationTransportUnix": "true",
                keys::ANNOTATION_CLAIMS: "[]",
                keys::ANNOTATION_ATTACHMENTS: attachments
            },
            "ownerReferences": [{
                "apiVersion": kubevirt::API_VERSION, "kind": kubevirt::KIND_VMI, "name": vmi, "uid": vmi_uid,
                "controller": true, "blockOwnerDeletion": true
            }]
        },
        "spec": {
            "automountServiceAccountToken": false,
            "containers": [{
                "name": "compute",
                "image": "quay.io/kubevirt/virt-launcher:v1.6.0",
                "command": ["/usr/bin/virt-launcher-monitor", "--name", vmi, "--namespace", namespace],
                "resources": {
                    "requests": {
                        "cpu": "4", "memory": "17Gi", "devices.kubevirt.io/kvm": "1",
                        "devices.kubevirt.io/tun": "1", "devices.kubevirt.io/vhost-net": "1",
                        resource_name: units.to_string()
                    },
                    "limits": {
                        "devices.kubevirt.io/kvm": "1", "devices.kubevirt.io/tun": "1",
                        "devices.kubevirt.io/vhost-net": "1", resource_name: units.to_string()
                    }
                }
            }],
            "nodeSelector": {kubevirt::LABEL_SCHEDULABLE: "true"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
                "matchExpressions": [{"key": "node-labeller.kubevirt.io/obsolete-host-model", "operator": "DoesNotExist"}]
            }]}}},
            "readinessGates": [{"conditionType": "kubevirt.io/virtual-machine-unpaused"}],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 60,
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            ]
        }
    })
}

/// A large platform for benchmarks: four classes, `claims` held claims spread over 20 claims per namespace and
/// bound round-robin to `nodes` nodes, every tenant entitled with a budget that still has room.
pub fn world(nodes: usize, claims: usize) -> View {
    let mut view = platform();
    for (name, resource, mode) in [
        ("l40s", "nvidia.com/AD102GL_L40S", GpuMode::Passthrough),
        ("a10-12q", "nvidia.com/NVIDIA_A10-12Q", GpuMode::Vgpu),
    ] {
        view.upsert_class(class(name, resource, mode, 8, 8));
    }
    let classes = ["h100", "a100-40c", "l40s", "a10-12q"];
    for i in 0..claims {
        let namespace = format!("tenant-{:04}", i / 20);
        if i % 20 == 0 {
            view.set_vgpu_entitled(&namespace, true);
            let budgets = classes.iter().map(|c| ((*c).to_owned(), 64)).collect();
            view.upsert_quota(&namespace, "gpu-budget", budgets);
        }
        let claim = held_claim(&namespace, &format!("claim-{i}"), classes[i % classes.len()], 1);
        view.upsert_claim(bound(claim, &format!("gpu-node-{:04}", i % nodes.max(1))));
    }
    view
}

/// A Ready GPU node with `units` devices of `resource_name` (and KubeVirt's device plugins), 64 CPUs and 512 GiB,
/// tainted `<resource>:NoSchedule`.
pub fn gpu_node(name: &str, resource_name: &str, units: u64) -> Node {
    Node {
        name: name.to_owned(),
        resource_version: "1".to_owned(),
        labels: BTreeMap::from([
            ("kubernetes.io/hostname".to_owned(), name.to_owned()),
            (kubevirt::LABEL_SCHEDULABLE.to_owned(), "true".to_owned()),
        ]),
        taints: vec![k8s_openapi::api::core::v1::Taint {
            key: resource_name.to_owned(),
            value: None,
            effect: "NoSchedule".to_owned(),
            time_added: None,
        }],
        unschedulable: false,
        ready: true,
        cpu_millis: 64_000,
        memory_bytes: 512 << 30,
        devices: BTreeMap::from([
            (resource_name.to_owned(), units),
            ("devices.kubevirt.io/kvm".to_owned(), 1000),
            ("devices.kubevirt.io/tun".to_owned(), 1000),
            ("devices.kubevirt.io/vhost-net".to_owned(), 1000),
        ]),
    }
}

/// A VMI of `namespace` in `phase`, with uid `uid-vmi-<name>`.
pub fn vmi(namespace: &str, name: &str, phase: VmiPhase, node: Option<&str>) -> Vmi {
    Vmi {
        namespace: namespace.into(),
        name: name.into(),
        uid: format!("uid-vmi-{name}").into(),
        phase,
        node_name: node.map(Name::from),
        ..Vmi::default()
    }
}

/// The launcher of VMI `vmi` as the pod webhook leaves it: gated, tolerating the classes' taints, requesting
/// `units` of `resource_name`, 4 CPUs and 16 GiB, created at `created`.
pub fn gated_launcher(
    namespace: &str,
    vmi: &str,
    attachments: &str,
    resource_name: &str,
    units: u64,
    created: Time,
) -> Pod {
    let json = launcher_pod_json(namespace, vmi, attachments, resource_name, units as u32);
    let mut pod = crate::convert::pod_from_json(&json, namespace).expect("the fixture launcher converts");
    pod.name = format!("virt-launcher-{vmi}-abcde").into();
    pod.uid = format!("uid-pod-{vmi}").into();
    pod.resource_version = "1".into();
    pod.created = created;
    pod.scheduling_gates.push(keys::GATE_PLACEMENT.into());
    std::sync::Arc::make_mut(&mut pod.tolerations).push(gpu_toleration(resource_name));
    pod
}

/// The smallest cluster where placement has a choice: class `h100` (passthrough, max 8, nothing published yet) on
/// two nodes of 8 and 4 units, and tenant `tenant-a` (not vGPU-entitled) with a budget of 8.
pub fn two_node_cluster() -> View {
    let resource = "nvidia.com/GH100_H100_SXM5_80GB";
    let mut view = View::default();
    view.upsert_class(class("h100", resource, GpuMode::Passthrough, 8, 0));
    view.upsert_node(gpu_node("gpu-1", resource, 8));
    view.upsert_node(gpu_node("gpu-2", resource, 4));
    view.set_vgpu_entitled("tenant-a", false);
    view.upsert_quota("tenant-a", "gpu-budget", BTreeMap::from([("h100".to_owned(), 8)]));
    view
}

/// Reconciles and applies until nothing is left to do; returns every action, pass by pass (a test's world settling).
pub fn settle(view: &mut View, now: Time) -> Vec<Vec<crate::controller::Action>> {
    let mut passes = Vec::new();
    for _ in 0..8 {
        let actions = crate::controller::reconcile(view, now);
        if actions.is_empty() {
            return passes;
        }
        crate::controller::apply(view, &actions, now).expect("the pass's own writes apply");
        passes.push(actions);
    }
    panic!("reconcile did not settle in 8 passes: {passes:#?}");
}
