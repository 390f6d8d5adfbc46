//! The claim sizes each class sees: how many claims of each size the view holds now (a function of its objects,
//! read for the published `fragmentedUnits`), and a decayed histogram of the sizes that arrived (the view's history,
//! read by the `FragmentationAware` policy).

use std::collections::BTreeMap;

/// How fast the arrivals' histogram forgets: each arrival of a class scales its weights by `1 − 2^−SHIFT` before
/// adding its own, so an arrival's weight halves after about `0.69 · 2^SHIFT` later arrivals (710 with 10). Long
/// enough that a class's mix is read over many placements (a run of one size does not swing it), short enough that
/// a mix that changes (a new project's 8-GPU jobs) is seen within a day of a busy cluster's arrivals.
pub const SEEN_DECAY_SHIFT: u32 = 10;

/// The weight one arrival adds, in fixed point: whole numbers keep the histogram exact and the same on every
/// machine (no floating-point order to depend on). The weights of a class sum to less than `2^(20 + SHIFT)`.
pub const SEEN_ARRIVAL_WEIGHT: u64 = 1 << 20;

/// class → claim size → how many claims of that size the view holds.
pub(super) type Held = BTreeMap<String, BTreeMap<u32, u32>>;

/// Counts (or uncounts) one claim of `count` units of `class`.
pub(super) fn hold(held: &mut Held, class: &str, count: u32, adding: bool) {
    if adding {
        if !held.contains_key(class) {
            held.insert(class.to_owned(), BTreeMap::new());
        }
        *held.get_mut(class).expect("inserted above").entry(count).or_insert(0) += 1;
        return;
    }
    let Some(sizes) = held.get_mut(class) else { return };
    if let Some(claims) = sizes.get_mut(&count) {
        *claims -= 1;
        if *claims == 0 {
            sizes.remove(&count);
        }
    }
    if sizes.is_empty() {
        held.remove(class);
    }
}

/// The most common size among claims counted by size (ties: the larger, as a planner would rather keep room for
/// it); `None` when there are none.
pub fn typical_size(sizes: &BTreeMap<u32, u32>) -> Option<u32> {
    sizes
        .iter()
        .filter(|(_, claims)| **claims > 0)
        .max_by_key(|(size, claims)| (**claims, **size))
        .map(|(size, _)| *size)
}

pub(super) fn typical(held: &Held, class: &str) -> Option<u32> {
    typical_size(held.get(class)?)
}

/// The sizes a class has seen arrive, decayed: size → weight (in [`SEEN_ARRIVAL_WEIGHT`]s).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SizesSeen {
    weights: BTreeMap<u32, u64>,
}

impl SizesSeen {
    /// One more claim of `count` units arrived.
    fn arrived(&mut self, count: u32) {
        for weight in self.weights.values_mut() {
            *weight -= *weight >> SEEN_DECAY_SHIFT;
        }
        *self.weights.entry(count).or_insert(0) += SEEN_ARRIVAL_WEIGHT;
    }

    /// Size → weight, by size.
    pub fn weights(&self) -> impl DoubleEndedIterator<Item = (u32, u64)> + '_ {
        self.weights.iter().map(|(size, weight)| (*size, *weight))
    }

    /// The weight of the sizes above `units`: how likely, times the total, the next claim is larger.
    pub fn weight_above(&self, units: u64) -> u64 {
        let above = u32::try_from(units.saturating_add(1)).unwrap_or(u32::MAX);
        self.weights.range(above..).map(|(_, weight)| weight).sum()
    }
}

/// Every class's arrivals: history, not contents, so two views holding the same objects are equal whatever they saw
/// (`PartialEq` ignores it, as it does the waiters' journal).
#[derive(Clone, Debug, Default)]
pub(super) struct Seen(BTreeMap<String, SizesSeen>);

impl PartialEq for Seen {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Seen {
    pub(super) fn arrived(&mut self, class: &str, count: u32) {
        if !self.0.contains_key(class) {
            self.0.insert(class.to_owned(), SizesSeen::default());
        }
        self.0.get_mut(class).expect("inserted above").arrived(count);
    }

    pub(super) fn of(&self, class: &str) -> Option<&SizesSeen> {
        self.0.get(class)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_decay_so_the_latest_mix_weighs_most() {
        let mut seen = SizesSeen::default();
        seen.arrived(4);
        assert_eq!(seen.weights().collect::<Vec<_>>(), [(4, 1 << 20)]);
        seen.arrived(1);
        // 2^20 less 2^10 for the older arrival; a whole weight for the new one.
        assert_eq!(seen.weights().collect::<Vec<_>>(), [(1, 1 << 20), (4, (1 << 20) - (1 << 10))]);
        assert_eq!(seen.weight_above(1), (1 << 20) - (1 << 10));
        assert_eq!(seen.weight_above(4), 0);
        assert_eq!(seen.weight_above(0), (2 << 20) - (1 << 10));
    }

    #[test]
    fn the_typical_size_is_the_most_held_and_the_larger_on_a_tie() {
        let mut held = Held::new();
        assert_eq!(typical(&held, "h100"), None);
        hold(&mut held, "h100", 1, true);
        hold(&mut held, "h100", 4, true);
        assert_eq!(typical(&held, "h100"), Some(4));
        hold(&mut held, "h100", 1, true);
        assert_eq!(typical(&held, "h100"), Some(1));
        hold(&mut held, "h100", 1, false);
        hold(&mut held, "h100", 1, false);
        hold(&mut held, "h100", 4, false);
        assert!(held.is_empty(), "emptied classes leave no entry, so equal contents stay equal views");
    }
}
