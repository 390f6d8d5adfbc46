//! The figures' arithmetic: buckets, quantiles as Prometheus estimates them, gate exits, unit-seconds, gauges.

use super::*;
use crate::fixtures::{self, gated_launcher, held_claim};
use crate::model::Reason;

const H100: &str = "nvidia.com/GH100_H100_SXM5_80GB";

fn at(seconds: i64) -> Time {
    Time::from_second(1_800_000_000 + seconds).unwrap()
}

#[test]
fn a_histogram_counts_each_wait_in_the_first_bucket_that_holds_it() {
    let mut histogram = Histogram::new(&GATE_WAIT_BUCKETS_SECONDS);
    for seconds in [0.0, 0.1, 0.2, 3_600.0, 30_000.0, -1.0] {
        histogram.observe(seconds);
    }
    let cumulative = histogram.cumulative();
    let le = |bound: f64| cumulative.iter().find(|(b, _)| *b == bound).unwrap().1;
    // 0, 0.1 and the clock-skewed -1 (as 0) at or below 0.1; 0.2 by 0.25; an hour by 3600; 30,000 s only by +Inf.
    assert_eq!((le(0.1), le(0.25), le(1_800.0), le(3_600.0), le(21_600.0), le(f64::INFINITY)), (3, 4, 4, 5, 5, 6));
    assert_eq!(cumulative.len(), GATE_WAIT_BUCKETS_SECONDS.len() + 1);
    assert_eq!((histogram.count(), histogram.sum_seconds()), (6, 33_600.3));
}

#[test]
fn quantiles_are_interpolated_within_a_bucket_as_histogram_quantile_does() {
    let mut histogram = Histogram::new(&GATE_WAIT_BUCKETS_SECONDS);
    assert_eq!(histogram.quantile(0.5), None, "no observations");
    // Four waits between 10 s and 30 s, four between 60 s and 120 s.
    for seconds in [12.0, 15.0, 20.0, 25.0, 70.0, 80.0, 90.0, 100.0] {
        histogram.observe(seconds);
    }
    // Rank 4 of 8 is the last in (10, 30]: its upper bound; rank 6 is half-way through (60, 120].
    assert_eq!(histogram.quantile(0.5), Some(30.0));
    assert_eq!(histogram.quantile(0.75), Some(90.0));
    assert_eq!(histogram.quantile(0.25), Some(20.0), "half-way through (10, 30]");
    histogram.observe(50_000.0);
    assert_eq!(histogram.quantile(0.99), Some(21_600.0), "in +Inf's bucket: the highest finite bound");
}

#[test]
fn a_pod_leaves_the_gate_when_ungated_or_deleted_while_gated() {
    let attachments = r#"[{"template":0,"class":"h100","count":1},{"template":1,"class":"a10","count":1},{"template":2,"class":"h100","count":1}]"#;
    let gated = gated_launcher("tenant-a", "vm-1", attachments, H100, 2, at(10));
    let mut ungated = gated.clone();
    ungated.scheduling_gates.clear();
    let exit = gate_exit(&gated, Some(&ungated)).expect("ungated");
    assert_eq!(
        exit,
        GateExit { gated: at(10), classes: vec!["a10".into(), "h100".into()], outcome: GateOutcome::Ungated }
    );
    assert_eq!(gate_exit(&gated, None).map(|exit| exit.outcome), Some(GateOutcome::Deleted));
    assert_eq!(gate_exit(&gated, Some(&gated)), None, "still gated");
    assert_eq!(gate_exit(&ungated, None), None, "it had left the gate before");
    let unreadable = gated_launcher("tenant-a", "vm-2", "not json", H100, 1, at(10));
    assert_eq!(gate_exit(&unreadable, None).unwrap().classes, [Name::from(NO_CLASS)], "no class can be read");

    let mut figures = Figures::default();
    figures.left_gate(&exit, at(40));
    let readings = figures.readings(at(40));
    for class in ["a10", "h100"] {
        let waits = readings.gate_waits_of(Some(class), Some(GateOutcome::Ungated));
        assert_eq!((waits.count(), waits.sum_seconds()), (1, 30.0), "{class}: one wait of 30 s for each class");
    }
}

#[test]
fn unit_seconds_accrue_per_tenant_and_class_and_an_idle_series_goes_after_the_linger() {
    let mut view = fixtures::two_node_cluster();
    let mut figures = Figures::default();
    figures.accrue(&view, at(0));
    assert!(figures.readings(at(0)).units_bound_seconds.is_empty(), "nothing held");
    view.upsert_claim(fixtures::bound(held_claim("tenant-a", "a", "h100", 2), "gpu-1"));
    view.upsert_claim(held_claim("tenant-a", "pending", "h100", 4));
    figures.accrue(&view, at(10));
    let key = (Name::from("tenant-a"), Name::from("h100"));
    assert_eq!(
        figures.readings(at(70)).units_bound_seconds[&key],
        120.0,
        "2 units for 60 s; a Pending claim holds none"
    );
    view.upsert_claim(fixtures::bound(held_claim("tenant-a", "b", "h100", 1), "gpu-2"));
    figures.accrue(&view, at(70));
    assert_eq!(figures.readings(at(80)).units_bound_seconds[&key], 150.0, "3 units from 70 s");
    view.remove_claim("tenant-a", "a");
    view.remove_claim("tenant-a", "b");
    figures.accrue(&view, at(100));
    assert_eq!(figures.readings(at(500)).units_bound_seconds[&key], 210.0, "nothing held from 100 s");
    let linger = i64::try_from(SERIES_LINGER.as_secs()).unwrap();
    figures.accrue(&view, at(100 + linger - 1));
    assert!(figures.readings(at(100 + linger)).units_bound_seconds.contains_key(&key), "kept to be scraped");
    figures.accrue(&view, at(100 + linger));
    assert!(figures.readings(at(100 + linger)).units_bound_seconds.is_empty(), "gone after the linger");
}

#[test]
fn a_gate_wait_series_goes_once_its_class_has_been_gone_for_the_linger() {
    let mut view = fixtures::two_node_cluster();
    let mut figures = Figures::default();
    let exit = |class: &str| GateExit { gated: at(0), classes: vec![class.into()], outcome: GateOutcome::Deleted };
    figures.left_gate(&exit("h100"), at(1));
    figures.left_gate(&exit(NO_CLASS), at(1));
    view.remove_class("h100");
    let linger = i64::try_from(SERIES_LINGER.as_secs()).unwrap();
    figures.accrue(&view, at(linger));
    assert_eq!(figures.readings(at(linger)).gate_waits.len(), 2, "not yet");
    figures.accrue(&view, at(1 + linger));
    let classes: Vec<&str> = figures.gate_waits().map(|(class, _, _)| class).collect();
    assert_eq!(classes, [NO_CLASS], "the class's series went; pods without a readable set keep theirs");
}

#[test]
fn the_gauges_count_pods_at_the_gate_by_class_and_reason_and_claims_by_class_and_phase() {
    let mut view = fixtures::two_node_cluster();
    let one = r#"[{"template":0,"class":"h100","count":1}]"#;
    let mut budget = gated_launcher("tenant-a", "vm-1", one, H100, 1, at(5));
    budget.waiting = Some(Reason { reason: "BudgetExceeded".into(), message: String::new() });
    view.upsert_pod(budget);
    view.upsert_pod(gated_launcher("tenant-a", "vm-2", one, H100, 1, at(20)));
    view.upsert_claim(fixtures::bound(held_claim("tenant-a", "a", "h100", 2), "gpu-1"));
    view.upsert_claim(held_claim("tenant-a", "orphan", "gone", 1));
    let gauges = Gauges::of(&view);
    let gated: Vec<(&str, &str, u64)> =
        gauges.gated_pods.iter().map(|((class, reason), pods)| (class.as_str(), reason.as_str(), *pods)).collect();
    assert_eq!(gated, [("h100", "BudgetExceeded", 1), ("h100", NOT_YET_CONSIDERED, 1)]);
    assert_eq!(gauges.gated_wait_seconds_max(at(65)).collect::<Vec<_>>(), [("h100", 60.0)], "vm-1's, since 5 s");
    let claims: Vec<(&str, ClaimPhase, u64)> =
        gauges.claims.iter().map(|((class, phase), claims)| (class.as_str(), *phase, *claims)).collect();
    assert_eq!(
        claims,
        [
            ("gone", ClaimPhase::Pending, 1),
            ("h100", ClaimPhase::Pending, 0),
            ("h100", ClaimPhase::Bound, 1),
            ("h100", ClaimPhase::Attached, 0),
        ],
        "every phase of a class there is; a claim of a class that is gone under its own"
    );
    assert_eq!(gauges.classes.keys().collect::<Vec<_>>(), ["h100"]);
}

#[test]
fn readings_since_an_earlier_one_are_what_increase_over_the_window_gives() {
    let mut figures = Figures::default();
    let exit = GateExit { gated: at(0), classes: vec!["h100".into()], outcome: GateOutcome::Ungated };
    figures.left_gate(&exit, at(3));
    let mut held = fixtures::two_node_cluster();
    held.upsert_claim(fixtures::bound(held_claim("tenant-a", "a", "h100", 2), "gpu-1"));
    figures.accrue(&held, at(0));
    let earlier = figures.readings(at(100));
    figures.left_gate(&exit, at(400));
    let later = figures.readings(at(300));
    let gained = later.since(&earlier);
    let waits = gained.gate_waits_of(None, None);
    assert_eq!((waits.count(), waits.sum_seconds()), (1, 400.0), "only the wait that ended in the window");
    assert_eq!(gained.units_bound_seconds[&(Name::from("tenant-a"), Name::from("h100"))], 400.0, "2 units for 200 s");
}
