//! Engine variants: the shipped rules and the counterfactuals DESIGN.md §4 names, as explicit options, so a
//! scenario can run the engine that ships beside one with a rule changed and show why the shipped rule is right.
//!
//! Production runs [`Variant::SHIPPED`] only; the other settings exist for the twin's scenarios and tests.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Which rules the engine applies. Every field is `false` in the engine that ships.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Variant {
    /// The pod webhook gates migration targets too. Shipped: never (KubeVirt deletes a target that stays Pending
    /// for 900 s, so a gated target fails the migration).
    pub gate_migration_targets: bool,
    /// The VMI webhook refuses a VMI whose template units do not fit the class's published free units on one
    /// node, or exceed the namespace's budget, or whose held claims are not bound. Shipped: the VMI is admitted
    /// and its launcher waits at the gate (a refusal sends the VM into KubeVirt's create retries instead).
    pub refuse_short_at_admission: bool,
    /// The controller removes the gate in one pod update and writes the pin in a second. Shipped: one update
    /// (the API server only lets a gated pod's node affinity grow, so the second update is refused).
    pub two_update_pin: bool,
    /// The pod webhook adds no tolerations from the claims' classes. Shipped: it adds them, so the pinned pod
    /// can land on a tainted GPU node.
    pub no_class_tolerations: bool,
    /// The controller writes its pins from its cache alone. Shipped: before a pass pins launchers, the controller
    /// reads each pin's node and the pods bound there from the API server and takes the pass again if its cache
    /// had the node wrong (kube-scheduler binds migration targets and raw-device pods on its own, and a lagging
    /// cache would pin a launcher onto the units one of them took).
    pub unconfirmed_pins: bool,
    /// The chart ships without its guards on tenants' writes: no ValidatingAdmissionPolicy, no rule on a
    /// GPUClaim's spec, and the order webhook judges creates only, so every write a tenant's RBAC allows lands.
    /// Shipped: guarded (docs/admission.md, "Who may write what").
    pub unguarded_writes: bool,
}

/// A variant's name on the command line and in scenario files, and its settings.
pub const NAMED: [(&str, Variant); 7] = [
    ("shipped", Variant::SHIPPED),
    ("gate-migration-targets", Variant { gate_migration_targets: true, ..Variant::SHIPPED }),
    ("refuse-at-admission", Variant { refuse_short_at_admission: true, ..Variant::SHIPPED }),
    ("two-update-pin", Variant { two_update_pin: true, ..Variant::SHIPPED }),
    ("no-class-tolerations", Variant { no_class_tolerations: true, ..Variant::SHIPPED }),
    ("unconfirmed-pins", Variant { unconfirmed_pins: true, ..Variant::SHIPPED }),
    ("unguarded-writes", Variant { unguarded_writes: true, ..Variant::SHIPPED }),
];

impl Variant {
    /// The rules that ship.
    pub const SHIPPED: Variant = Variant {
        gate_migration_targets: false,
        refuse_short_at_admission: false,
        two_update_pin: false,
        no_class_tolerations: false,
        unconfirmed_pins: false,
        unguarded_writes: false,
    };

    /// The variant of a name in [`NAMED`].
    pub fn named(name: &str) -> Result<Variant, UnknownVariant> {
        NAMED
            .iter()
            .find(|(known, _)| *known == name)
            .map(|(_, variant)| *variant)
            .ok_or_else(|| UnknownVariant(name.to_owned()))
    }

    /// The name of a variant in [`NAMED`], or `None` for a combination with no name.
    pub fn name(&self) -> Option<&'static str> {
        NAMED.iter().find(|(_, variant)| variant == self).map(|(name, _)| *name)
    }
}

/// A variant name that is not one of [`NAMED`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownVariant(pub String);

impl fmt::Display for UnknownVariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = NAMED.iter().map(|(name, _)| *name).collect();
        write!(f, "unknown engine variant {:?}; known: {}", self.0, names.join(", "))
    }
}

impl std::error::Error for UnknownVariant {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_list_the_known_ones() {
        for (name, variant) in NAMED {
            assert_eq!(Variant::named(name), Ok(variant));
            assert_eq!(variant.name(), Some(name));
        }
        assert_eq!(Variant::default(), Variant::SHIPPED);
        let error = Variant::named("fast").unwrap_err().to_string();
        assert_eq!(
            error,
            "unknown engine variant \"fast\"; known: shipped, gate-migration-targets, refuse-at-admission, \
             two-update-pin, no-class-tolerations, unconfirmed-pins, unguarded-writes"
        );
    }
}
