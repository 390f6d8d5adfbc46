//! The placement policies (GPUClass `spec.placement`): in which order a class's candidate nodes are tried, each one
//! function named after its policy. Every walk reads the placement index — its nodes ordered by free units and its
//! buckets (free units → how many nodes) — corrected on the nodes this pass touched, so no policy scans the
//! class's nodes (docs/controller.md, "Placement policies").

use std::collections::BTreeSet;
use std::iter::Peekable;

use super::Pass;
use crate::model::{Capacity, Class, Placement, SizesSeen};

/// `FragmentationAware`: the most nodes of one free-units bucket tried before the next-best bucket. The measure
/// reads units only, so every node of a bucket scores the same: the walk stops at the first that takes the pod,
/// and the ones before it refused it for what the measure does not see (CPU, memory, the pod's own selector or
/// affinity). After this many such refusals the next-best bucket is as good a bet as digging on; with 8-unit nodes
/// a walk tries at most 8 buckets × 16 = 128 nodes before it falls back to BestFit's walk over every candidate
/// (so the policy never leaves waiting a pod that BestFit would place).
pub const FRAGMENTATION_AWARE_CANDIDATES_PER_BUCKET: usize = 16;

/// The nodes to try, in the class's policy's order.
pub(super) enum Candidates<B, S, F> {
    BestFit(B),
    Spread(S),
    FragmentationAware(F),
}

impl<'a, B, S, F> Iterator for Candidates<B, S, F>
where
    B: Iterator<Item = (u64, &'a str)>,
    S: Iterator<Item = (u64, &'a str)>,
    F: Iterator<Item = (u64, &'a str)>,
{
    type Item = (u64, &'a str);

    fn next(&mut self) -> Option<(u64, &'a str)> {
        match self {
            Candidates::BestFit(walk) => walk.next(),
            Candidates::Spread(walk) => walk.next(),
            Candidates::FragmentationAware(walk) => walk.next(),
        }
    }
}

impl<'v> Pass<'v> {
    /// Nodes offering `class` with at least `units` free after this pass's decisions, in the order the class's
    /// policy tries them. The three walks are three types, named here rather than boxed: a placement allocates no
    /// walk.
    #[allow(clippy::type_complexity)]
    pub(super) fn candidates<'a>(
        &'a self,
        class: &'a Class,
        units: u64,
    ) -> Candidates<
        impl Iterator<Item = (u64, &'a str)> + 'a,
        impl Iterator<Item = (u64, &'a str)> + 'a,
        impl Iterator<Item = (u64, &'a str)> + 'a,
    > {
        match class.placement {
            Placement::BestFit => Candidates::BestFit(self.best_fit(class, units)),
            Placement::Spread => Candidates::Spread(self.spread(class, units)),
            Placement::FragmentationAware => Candidates::FragmentationAware(self.fragmentation_aware(class, units)),
        }
    }

    /// `BestFit`: the fewest free units that still fit first, then by name — the index's order, with the nodes this
    /// pass touched re-sorted by what they will have. Keeps large blocks whole for large claims.
    pub(super) fn best_fit<'a>(&'a self, class: &'a Class, units: u64) -> impl Iterator<Item = (u64, &'a str)> + 'a {
        let (touched, adjusted) = self.touched(class, units);
        let indexed =
            self.view.capacity().candidates(&class.name, units).filter(move |(_, node)| !touched.contains(node));
        Merge { a: adjusted.into_iter().peekable(), b: indexed.peekable() }
    }

    /// `Spread`: the most free units first, then by name, as kube-scheduler's LeastAllocated scores nodes (for the
    /// class's units alone): load and the blast radius of a node's loss spread evenly, at the cost of breaking the
    /// large blocks a large claim needs.
    pub(super) fn spread<'a>(
        &'a self,
        class: &'a Class,
        units: u64,
    ) -> BucketWalk<'a, impl Iterator<Item = (u64, &'a str)> + 'a> {
        let (touched, adjusted) = self.touched(class, units);
        let mut order = buckets(self.view.capacity(), class, units, &adjusted);
        order.reverse();
        let order = order.into_iter().map(|free| (free, usize::MAX)).collect();
        // Every bucket is walked whole: nothing is left for a fallback.
        let fallback = None::<std::iter::Empty<_>>;
        BucketWalk::new(self.view.capacity(), class, touched, adjusted, order, fallback)
    }

    /// `FragmentationAware`: the buckets by how little placing `units` there raises the class's expected
    /// fragmentation (then fewest free first, as BestFit), at most
    /// [`FRAGMENTATION_AWARE_CANDIDATES_PER_BUCKET`] nodes of each, by name; then BestFit's walk. The measure is
    /// FGD's (Weng et al., ATC'23) for whole units: a node with `f` free units strands all `f` for a claim larger
    /// than `f` and none for one that fits, so its expected fragmentation is `f · P(size > f)` over the class's
    /// claim sizes (the decayed histogram of arrivals the view keeps, [`SizesSeen`]), and a placement changes only
    /// its node's term. With no sizes seen every bucket scores 0 and the walk is BestFit's.
    pub(super) fn fragmentation_aware<'a>(
        &'a self,
        class: &'a Class,
        units: u64,
    ) -> BucketWalk<'a, impl Iterator<Item = (u64, &'a str)> + 'a> {
        let (touched, adjusted) = self.touched(class, units);
        let seen = self.view.sizes_seen(&class.name);
        let mut order: Vec<(i128, u64)> = buckets(self.view.capacity(), class, units, &adjusted)
            .into_iter()
            .map(|free| (fragmentation_added(seen, free, units), free))
            .collect();
        order.sort_unstable();
        let order = order.into_iter().map(|(_, free)| (free, FRAGMENTATION_AWARE_CANDIDATES_PER_BUCKET)).collect();
        let fallback = self.best_fit(class, units);
        BucketWalk::new(self.view.capacity(), class, touched, adjusted, order, Some(fallback))
    }

    /// The nodes offering `class` whose free units this pass moved, and those of them with at least `units` free
    /// after it, as (free, node) ascending.
    fn touched<'a>(&'a self, class: &'a Class, units: u64) -> (Vec<&'a str>, Vec<(u64, &'a str)>) {
        let resource = class.resource_name.as_str();
        let touched: Vec<&str> =
            self.units.get(resource).into_iter().flatten().map(|(node, _)| node.as_str()).collect();
        let mut adjusted: Vec<(u64, &str)> = touched
            .iter()
            .filter_map(|node| self.free(class, node).map(|free| (free, *node)))
            .filter(|(free, _)| *free >= units)
            .collect();
        adjusted.sort_unstable();
        (touched, adjusted)
    }
}

/// `f · P(size > f)` times the histogram's total weight: the units of a node with `free` units that the class's
/// next claim cannot use, in expectation (FGD's node fragmentation for whole units).
fn expected_fragmentation(seen: Option<&SizesSeen>, free: u64) -> i128 {
    i128::from(free) * i128::from(seen.map_or(0, |seen| seen.weight_above(free)))
}

/// How much placing `units` on a node with `free` units raises its expected fragmentation (negative: lowers it).
fn fragmentation_added(seen: Option<&SizesSeen>, free: u64, units: u64) -> i128 {
    expected_fragmentation(seen, free - units) - expected_fragmentation(seen, free)
}

/// The distinct free-unit figures of at least `units` among the class's nodes after this pass, ascending: the
/// index's buckets and the touched nodes' figures.
fn buckets(capacity: &Capacity, class: &Class, units: u64, adjusted: &[(u64, &str)]) -> Vec<u64> {
    let indexed = capacity.buckets(&class.name, units).map(|(free, _)| free);
    let all: BTreeSet<u64> = indexed.chain(adjusted.iter().map(|(free, _)| *free)).collect();
    all.into_iter().collect()
}

/// The nodes of some buckets, bucket by bucket in a given order (each by name, at most a limit of each), then
/// another walk's nodes not yet given.
pub(super) struct BucketWalk<'a, F> {
    capacity: &'a Capacity,
    class: &'a str,
    /// Nodes whose free units this pass moved: their index entries are stale.
    touched: Vec<&'a str>,
    /// (free after this pass, node) of the touched nodes with enough units, ascending.
    adjusted: Vec<(u64, &'a str)>,
    /// (bucket, most nodes to give from it), in the policy's order, the current one first.
    order: std::collections::VecDeque<(u64, usize)>,
    /// The current bucket's untouched nodes from the index, by name.
    indexed: Option<Peekable<Box<dyn Iterator<Item = &'a str> + 'a>>>,
    /// Where the current bucket's touched nodes start in `adjusted`.
    adjusted_at: usize,
    /// Nodes given so far, when a fallback follows (so it gives none twice).
    given: BTreeSet<&'a str>,
    fallback: Option<F>,
}

impl<'a, F: Iterator<Item = (u64, &'a str)>> BucketWalk<'a, F> {
    fn new(
        capacity: &'a Capacity,
        class: &'a Class,
        touched: Vec<&'a str>,
        adjusted: Vec<(u64, &'a str)>,
        order: std::collections::VecDeque<(u64, usize)>,
        fallback: Option<F>,
    ) -> Self {
        BucketWalk {
            capacity,
            class: &class.name,
            touched,
            adjusted,
            order,
            indexed: None,
            adjusted_at: 0,
            given: BTreeSet::new(),
            fallback,
        }
    }

    /// The next node of the current bucket, by name, if its limit allows.
    fn next_in_bucket(&mut self) -> Option<(u64, &'a str)> {
        let (free, left) = self.order.front_mut()?;
        let free = *free;
        if *left == 0 {
            return None;
        }
        if self.indexed.is_none() {
            let touched = self.touched.clone();
            let nodes = self.capacity.in_bucket(self.class, free).filter(move |node| !touched.contains(node));
            self.indexed = Some((Box::new(nodes) as Box<dyn Iterator<Item = &'a str> + 'a>).peekable());
            self.adjusted_at = self.adjusted.partition_point(|(f, _)| *f < free);
        }
        let indexed = self.indexed.as_mut().expect("set above");
        let from_adjusted = self.adjusted.get(self.adjusted_at).filter(|(f, _)| *f == free).map(|(_, node)| *node);
        let node = match (indexed.peek(), from_adjusted) {
            (Some(a), Some(b)) if b < *a => {
                self.adjusted_at += 1;
                b
            }
            (Some(_), _) => indexed.next().expect("peeked"),
            (None, Some(b)) => {
                self.adjusted_at += 1;
                b
            }
            (None, None) => return None,
        };
        *left -= 1;
        Some((free, node))
    }
}

impl<'a, F: Iterator<Item = (u64, &'a str)>> Iterator for BucketWalk<'a, F> {
    type Item = (u64, &'a str);

    fn next(&mut self) -> Option<(u64, &'a str)> {
        while !self.order.is_empty() {
            if let Some((free, node)) = self.next_in_bucket() {
                if self.fallback.is_some() {
                    self.given.insert(node);
                }
                return Some((free, node));
            }
            self.order.pop_front();
            self.indexed = None;
        }
        let given = &self.given;
        self.fallback.as_mut()?.find(|(_, node)| !given.contains(node))
    }
}

/// Merges two ascending streams.
struct Merge<A: Iterator, B: Iterator> {
    a: Peekable<A>,
    b: Peekable<B>,
}

impl<T: Ord, A: Iterator<Item = T>, B: Iterator<Item = T>> Iterator for Merge<A, B> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        match (self.a.peek(), self.b.peek()) {
            (Some(a), Some(b)) if a <= b => self.a.next(),
            (Some(_), None) => self.a.next(),
            _ => self.b.next(),
        }
    }
}
