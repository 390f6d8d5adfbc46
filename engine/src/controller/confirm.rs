//! Confirming a pass's pins (docs/controller.md, "Pins are confirmed"): which pinned nodes a controller still has to
//! read live before it writes the pass, round by round. The reads are the caller's (the engine does no I/O).

use std::collections::BTreeSet;

use super::Action;

/// Rounds of confirmation one pass may take before it is written as it stands: each round reads only nodes not read
/// before, so more rounds mean pins moving from node to node as the cache catches up.
pub const CONFIRMATION_ROUNDS_MAX: usize = 4;

/// The nodes already read for one pass, and how many rounds ran.
#[derive(Debug, Default)]
pub struct PinConfirmation {
    confirmed: BTreeSet<String>,
    rounds: usize,
}

impl PinConfirmation {
    /// The nodes `actions` pin pods to that this pass has not read yet, now counted as read; none once
    /// [`CONFIRMATION_ROUNDS_MAX`] rounds ran (the pass is then written as it stands).
    pub fn next_round(&mut self, actions: &[Action]) -> BTreeSet<String> {
        if self.rounds == CONFIRMATION_ROUNDS_MAX {
            return BTreeSet::new();
        }
        self.rounds += 1;
        let nodes: BTreeSet<String> = actions
            .iter()
            .filter_map(Action::pinned_node)
            .filter(|node| !self.confirmed.contains(*node))
            .map(str::to_owned)
            .collect();
        self.confirmed.extend(nodes.iter().cloned());
        nodes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::ObjectRef;

    fn pin(pod: &str, node: &str) -> Action {
        Action::PinAndUngate {
            pod: ObjectRef::new("tenant-a", pod),
            precondition: "1".into(),
            node: node.into(),
            terms: Default::default(),
        }
    }

    #[test]
    fn each_pinned_node_is_read_once_and_the_rounds_are_bounded() {
        let mut confirmation = PinConfirmation::default();
        let pass = [pin("a", "gpu-1"), pin("b", "gpu-2"), pin("c", "gpu-1")];
        assert_eq!(confirmation.next_round(&pass), BTreeSet::from(["gpu-1".into(), "gpu-2".into()]));
        let again = [pin("a", "gpu-2"), pin("b", "gpu-3")];
        assert_eq!(confirmation.next_round(&again), BTreeSet::from(["gpu-3".into()]), "gpu-2 was read");
        assert!(confirmation.next_round(&[]).is_empty(), "a pass that pins nothing reads nothing");
        assert_eq!(confirmation.next_round(&[pin("a", "gpu-4")]), BTreeSet::from(["gpu-4".into()]));
        assert!(confirmation.next_round(&[pin("a", "gpu-5")]).is_empty(), "four rounds ran");
    }
}
