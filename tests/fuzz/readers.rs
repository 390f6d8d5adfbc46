//! The YAML readers: `--objects` manifests (`engine::objects::load_objects`), scenarios (`sim::scenario::
//! parse_scenario`, then `Scenario::build`) and what-if studies (`reports::study::parse_study`). Each input is a real
//! file of the repository, mutated as a tree (hostile values in valid shapes) and as text (alias bombs, nesting past
//! the parser's limit, tags, YAML's own numbers), and every refusal must name its field and reason on one line.

use std::path::Path;

use gpuclaim_engine::objects::load_objects;
use gpuclaim_engine::yaml::DEPTH_MAX;
use gpuclaim_scenarios::scenario::{NODES_MAX, ScenarioError, parse_scenario};
use gpuclaim_sim::log::EventLog;
use serde_json::Value;

use super::hostile::{Tape, hostile_value, mutate_text, mutate_tree, set_pointer};
use super::{Finding, Verdict, one_line};

/// The objects files, and the pods and VMIs of the review fixtures (which the objects files do not hold).
const OBJECTS: [&str; 5] = [
    include_str!("../fixtures/objects.yaml"),
    include_str!("../../examples/objects.yaml"),
    include_str!("../fixtures/bad/objects-bad-yaml.yaml"),
    include_str!("../fixtures/bad/objects-claim-without-count.yaml"),
    include_str!("../fixtures/bad/objects-unknown-kind.yaml"),
];
const REVIEWED_OBJECTS: [&str; 3] = [
    include_str!("../fixtures/reviews/pod-launcher-trainer.json"),
    include_str!("../fixtures/reviews/pod-migration-target-inference-0.json"),
    include_str!("../fixtures/reviews/vmi-trainer.json"),
];

const OBJECT_TARGETS: [&str; 24] = [
    "",
    "/apiVersion",
    "/kind",
    "/items",
    "/metadata/name",
    "/metadata/namespace",
    "/metadata/labels",
    "/metadata/labels/gpu.cozystack.io~1vgpu-entitled",
    "/metadata/annotations/gpu.cozystack.io~1attachments",
    "/metadata/ownerReferences",
    "/spec/maxCount",
    "/spec/mode",
    "/spec/resourceName",
    "/spec/count",
    "/spec/className",
    "/spec/hard/requests.gpu.cozystack.io~1h100",
    "/spec/containers/0/resources/requests/cpu",
    "/spec/containers/0/resources/requests/memory",
    "/spec/containers/0/resources/limits/nvidia.com~1GH100_H100_SXM5_80GB",
    "/status/allocatable/nvidia.com~1GH100_H100_SXM5_80GB",
    "/status/allocatable/cpu",
    "/status/largestFreeOnNode",
    "/status/phase",
    "/data/templateClaimCreator",
];

const SCENARIOS: [&str; 21] = [
    include_str!("../../scenarios/suite/01-migration-targets-ungated.yaml"),
    include_str!("../../scenarios/suite/02-start-backoff-avoidance.yaml"),
    include_str!("../../scenarios/suite/03-pin-and-ungate-in-one-update.yaml"),
    include_str!("../../scenarios/suite/04-wait-for-first-consumer.yaml"),
    include_str!("../../scenarios/suite/05-pod-webhook-reinvoked.yaml"),
    include_str!("../../scenarios/suite/06a-webhook-two-replicas-drain.yaml"),
    include_str!("../../scenarios/suite/06b-webhook-one-replica-outage.yaml"),
    include_str!("../../scenarios/suite/07-controller-failover.yaml"),
    include_str!("../../scenarios/suite/08-budgets.yaml"),
    include_str!("../../scenarios/suite/09-vgpu-entitlement.yaml"),
    include_str!("../../scenarios/suite/10-held-claim-race.yaml"),
    include_str!("../../scenarios/suite/11-node-loss-held-claims-move.yaml"),
    include_str!("../../scenarios/suite/12-template-claims-released.yaml"),
    include_str!("../../scenarios/suite/13-raw-gpus-beside-claims.yaml"),
    include_str!("../../scenarios/suite/14-every-fault.yaml"),
    include_str!("../../scenarios/suite/15-pins-confirmed.yaml"),
    include_str!("../../scenarios/suite/19-vms-from-chart-values.yaml"),
    include_str!("../../scenarios/examples/small.yaml"),
    include_str!("../../scenarios/perf/ref-1k.yaml"),
    include_str!("../../scenarios/perf/gate-10k.yaml"),
    include_str!("../../reports/examples/erlang-scenario.yaml"),
];

const SCENARIO_TARGETS: [&str; 39] = [
    "",
    "/name",
    "/seed",
    "/duration",
    "/cluster",
    "/cluster/classes/0/maxCount",
    "/cluster/classes/0/mode",
    "/cluster/classes/0/tolerations",
    "/cluster/nodes/0/count",
    "/cluster/nodes/0/cpu",
    "/cluster/nodes/0/memory",
    "/cluster/nodes/0/devices/nvidia.com~1GH100_H100_SXM5_80GB",
    "/cluster/nodes/0/taints",
    "/cluster/tenants/0/budgets/h100",
    "/cluster/tenants/0/claims",
    "/cluster/tenants/0/claims/0/count",
    "/workloads/0/arrivalsPerHour",
    "/workloads/0/meanLifetime",
    "/workloads/0/gpus",
    "/workloads/0/gpus/0/claimTemplate/count",
    "/workloads/0/heldClaim",
    "/workloads/1/from",
    "/workloads/1/until",
    "/vms/0/at",
    "/vms/0/stopAt",
    "/vms/0/gpus",
    "/vms/0/chart/gpus",
    "/vms/0/chart/gpus/0",
    "/vms/0/chart/resources/cpu",
    "/events/0/at",
    "/events/0/addNodes/count",
    "/events/0/controllerCrash",
    "/events/0/deviceFailure/units",
    "/faults/conflictRate",
    "/faults/watchLagMax",
    "/controller/replicas",
    "/variants",
    "/expect/0",
    "/invariants/reactionTime",
];

const STUDIES: [&str; 4] = [
    include_str!("../../reports/examples/erlang.yaml"),
    include_str!("../../reports/examples/h100-headroom.yaml"),
    include_str!("../../reports/examples/ref-1k-whatif.yaml"),
    include_str!("../../reports/examples/openb-g3.yaml"),
];

const STUDY_TARGETS: [&str; 22] = [
    "",
    "/scenario",
    "/import",
    "/duration",
    "/warmup",
    "/seeds",
    "/samples",
    "/metrics",
    "/slo",
    "/slo/max",
    "/slo/classes",
    "/variants",
    "/variants/0/name",
    "/variants/0/nodes/h100",
    "/variants/0/nodes/gpu",
    "/variants/0/budgets/research/h100",
    "/variants/0/workloads/vm/arrivalsPerHour",
    "/variants/0/engine",
    "/variants/0/set",
    "/compaction",
    "/compaction/min",
    "/compaction/max",
];

/// What a study's node counts, budgets and scalings may be written as, and what they must not be.
const ADJUSTMENTS: [&str; 14] = [
    "+4",
    "-2",
    "x0.5",
    "x2",
    "+9223372036854775807",
    "-9223372036854775808",
    "x1e300",
    "x-1",
    "xNaN",
    "x",
    "+",
    "x1e-300",
    "-0",
    "+18446744073709551616",
];

/// Whole YAML values written inline, each a hazard of its own: an anchor aliased until it is large (the classic
/// billion laughs, and the flat kind whose cost grows with the square of its text), nesting past the parser's limit,
/// tags, merge keys, YAML 1.1 numbers and spellings of infinity.
pub fn yaml_fragment(tape: &mut Tape) -> String {
    match tape.pick(10) {
        0 => {
            // Nine levels of ten: 10^9 leaves if expanded.
            let mut text = String::from("[&l0 [x,x,x,x,x,x,x,x,x,x]");
            for level in 1..9 {
                let alias = format!("*l{}", level - 1);
                text.push_str(&format!(", &l{level} [{}]", vec![alias; 10].join(",")));
            }
            text.push(']');
            text
        }
        1 => {
            // `items` values aliased `aliases` times: items × aliases values from a text of items + aliases.
            let items = *tape.choose(&[10, 100, 1_000, 3_000]);
            let aliases = *tape.choose(&[10, 100, 1_000, 3_000]);
            format!("[&a [{}], {}]", vec!["1"; items].join(","), vec!["*a"; aliases].join(","))
        }
        2 => {
            let depth = *tape.choose(&[DEPTH_MAX - 1, DEPTH_MAX, 200, 1_000]);
            format!("{}{}", "[".repeat(depth), "]".repeat(depth))
        }
        3 => {
            let depth = *tape.choose(&[DEPTH_MAX - 1, DEPTH_MAX, 200]);
            format!("{}x{}", "{a: ".repeat(depth), "}".repeat(depth))
        }
        4 => tape
            .choose(&["!!binary aGVsbG8=", "!!float 1", "!Custom x", "!!map {}", "!!str 5", "!<tag:x> 1"])
            .to_string(),
        5 => tape
            .choose(&["{<<: {a: 1}, b: 2}", "{<<: [*undefined]}", "*undefined", "&x", "{? [a]: b}", "{[1]: 2}"])
            .to_string(),
        6 => tape
            .choose(&["0x1F", "0o17", "1_000", ".inf", "-.inf", ".nan", "1e400", "18446744073709551616", "~"])
            .to_string(),
        7 => tape
            .choose(&["yes", "off", "Null", "TRUE", "012", "+12", "1:30", "2001-12-14t21:59:43.10-05:00"])
            .to_string(),
        8 => format!("'{}'", "y".repeat(super::hostile::LONG_STRING_BYTES)),
        _ => tape.choose(&["{a: 1, a: 2}", "[a, b", "{a: [}", "\"\\xZZ\"", "'unterminated", "|\n  block"]).to_string(),
    }
}

/// Writes `tree` as YAML (block style, or flow-style JSON, which YAML reads too), then mutates the text: a value
/// replaced by a YAML fragment, or a text mutation of the kind reviews get.
fn emit(tape: &mut Tape, tree: &Value) -> String {
    let mut text = if tape.chance(1, 4) {
        serde_json::to_string(tree).expect("values serialize")
    } else {
        gpuclaim_engine::yaml::to_string(tree)
    };
    // Text mutations mostly end a read at the parser, so they are rarer than the tree's, which reach the fields.
    if tape.chance(1, 3) {
        plant_fragment(tape, &mut text);
    }
    if tape.chance(1, 6) {
        let mut bytes = text.into_bytes();
        mutate_text(tape, &mut bytes, &["name", "count", "kind", "cluster", "variants", "spec", "metadata"]);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    text
}

/// Replaces what follows one `: ` of the text (a block-style value, or a flow-style one up to the next `,`) by a
/// fragment.
fn plant_fragment(tape: &mut Tape, text: &mut String) {
    let colons: Vec<usize> = text.match_indices(": ").map(|(at, _)| at + 2).take(4096).collect();
    let fragment = yaml_fragment(tape);
    if colons.is_empty() {
        *text = fragment;
        return;
    }
    let at = colons[tape.pick(colons.len())];
    let end = text[at..].find(['\n', ',', '}']).map_or(text.len(), |p| at + p);
    text.replace_range(at..end, &fragment);
}

/// An objects file: documents of the objects files and of the reviews' objects, mutated, written as YAML documents,
/// as one `List`, or as JSON.
pub fn objects_text(tape: &mut Tape) -> String {
    let mut documents: Vec<Value> = Vec::new();
    for _ in 0..tape.up_to(3) + 1 {
        if tape.chance(1, 3) {
            let review: Value =
                serde_json::from_str(tape.choose::<&str>(&REVIEWED_OBJECTS)).expect("fixtures are JSON");
            documents.push(review["request"]["object"].clone());
        } else {
            let file = *tape.choose(&OBJECTS);
            // The bad fixtures are not all YAML; those add nothing here (emit mutates text anyway).
            let values: Vec<Value> = gpuclaim_engine::yaml::documents(file).filter_map(Result::ok).collect();
            if !values.is_empty() {
                let take = tape.up_to(values.len() - 1) + 1;
                documents.extend(values.into_iter().take(take));
            }
        }
    }
    for document in &mut documents {
        let mutations = tape.up_to(3);
        mutate_tree(tape, document, &OBJECT_TARGETS, mutations);
    }
    if tape.chance(1, 8) {
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": documents});
        return emit(tape, &list);
    }
    documents.iter().map(|document| emit(tape, document)).collect::<Vec<_>>().join("\n---\n")
}

pub fn run_objects(text: &str) -> Result<Verdict, Finding> {
    match load_objects(text, "cozy-gpuclaim") {
        Ok(objects) => Ok(Verdict::Answered(format!("loaded {} objects", objects.counts.values().sum::<usize>()))),
        Err(error) => {
            one_line("objects refusal", &error.to_string())?;
            if error.field.is_empty() || error.reason.trim().is_empty() || error.document == 0 {
                return Err(Finding::new("objects refusal names no document, field or reason", &error));
            }
            Ok(Verdict::Refused(format!("objects: {}", super::generalise(&error.field))))
        }
    }
}

/// A scenario: a repository scenario, mutated.
pub fn scenario_text(tape: &mut Tape) -> String {
    let mut tree = gpuclaim_engine::yaml::from_str(tape.choose::<&str>(&SCENARIOS)).expect("the scenarios are YAML");
    if tape.chance(1, 4) {
        let adjustment = Value::from(*tape.choose(&ADJUSTMENTS));
        set_pointer(&mut tree, tape.choose::<&str>(&SCENARIO_TARGETS), adjustment, false);
    }
    let mutations = tape.up_to(4);
    mutate_tree(tape, &mut tree, &SCENARIO_TARGETS, mutations);
    emit(tape, &tree)
}

/// The largest cluster a fuzz case builds: building a world of up to [`NODES_MAX`] nodes is allowed and takes
/// seconds, which says nothing about the reader; the bound above that is still checked.
const NODES_BUILT_MAX: u64 = 10_000;

pub fn run_scenario(text: &str) -> Result<Verdict, Finding> {
    let scenario = match parse_scenario(text) {
        Ok(scenario) => scenario,
        Err(error) => return scenario_refusal("scenario", &error),
    };
    let nodes: u64 = scenario.cluster.nodes.iter().map(|g| u64::from(g.count)).sum::<u64>()
        + scenario.events.iter().filter_map(|e| e.add_nodes.as_ref()).map(|g| u64::from(g.count)).sum::<u64>();
    if nodes > NODES_BUILT_MAX && nodes <= u64::from(NODES_MAX) {
        return Ok(Verdict::Answered("parsed (too large to build here)".to_owned()));
    }
    match scenario.build(1, EventLog::unhashed()) {
        Ok(_) => Ok(Verdict::Answered("built".to_owned())),
        Err(error) => scenario_refusal("build", &error),
    }
}

fn scenario_refusal(step: &str, error: &ScenarioError) -> Result<Verdict, Finding> {
    let message = error.to_string();
    one_line("scenario refusal", &message)?;
    match error {
        ScenarioError::Invalid { field, reason } if !field.is_empty() && !reason.trim().is_empty() => {
            Ok(Verdict::Refused(format!("{step}: {}", super::generalise(field))))
        }
        ScenarioError::World(_) if !message.trim().is_empty() => Ok(Verdict::Refused(format!("{step}: world"))),
        _ => Err(Finding::new("scenario refusal names no field or no reason", &message)),
    }
}

/// A study and the base scenario it names: a repository study whose base is a repository scenario (both mutated,
/// the base less often), written where the study's `scenario:` points.
pub struct StudyCase {
    pub study: String,
    pub base: String,
}

pub fn study_case(tape: &mut Tape) -> StudyCase {
    let mut tree = gpuclaim_engine::yaml::from_str(tape.choose::<&str>(&STUDIES)).expect("the studies are YAML");
    let scenario = match tape.pick(16) {
        0 => Value::from("missing.yaml"),
        1 => Value::from("."),
        2 => Value::from(""),
        _ => Value::from("base.yaml"),
    };
    set_pointer(&mut tree, "/scenario", scenario, false);
    if tape.chance(15, 16) {
        set_pointer(&mut tree, "/import", Value::Null, true);
    }
    if tape.chance(1, 3) {
        let adjustment = Value::from(*tape.choose(&ADJUSTMENTS));
        set_pointer(&mut tree, tape.choose::<&str>(&STUDY_TARGETS), adjustment, false);
    }
    let mutations = tape.up_to(4);
    mutate_tree(tape, &mut tree, &STUDY_TARGETS, mutations);
    let base = if tape.chance(1, 4) {
        scenario_text(tape)
    } else {
        let tree = gpuclaim_engine::yaml::from_str(tape.choose::<&str>(&SCENARIOS)).expect("the scenarios are YAML");
        if tape.chance(1, 16) {
            serde_json::to_string(&hostile_value(tape)).expect("values serialize")
        } else {
            serde_json::to_string(&tree).expect("values serialize")
        }
    };
    StudyCase { study: emit(tape, &tree), base }
}

/// Parses the study in `dir` (where the base is written as `base.yaml`).
pub fn run_study(case: &StudyCase, dir: &Path) -> Result<Verdict, Finding> {
    std::fs::write(dir.join("base.yaml"), &case.base).map_err(|e| Finding::new("cannot write the base", e))?;
    match gpuclaim_reports::study::parse_study(&case.study, &dir.join("study.yaml")) {
        Ok(study) => Ok(Verdict::Answered(format!("parsed, {} variants", study.variants.len()))),
        Err(error) => {
            let message = error.to_string();
            one_line("study refusal", &message)?;
            match &error {
                gpuclaim_reports::study::StudyError::Invalid { field, reason, .. }
                    if !field.is_empty() && !reason.trim().is_empty() =>
                {
                    Ok(Verdict::Refused(format!("study: {}", super::generalise(field))))
                }
                gpuclaim_reports::study::StudyError::Read { .. } => Ok(Verdict::Refused("study: read".to_owned())),
                _ => Err(Finding::new("study refusal names no field or no reason", &message)),
            }
        }
    }
}
