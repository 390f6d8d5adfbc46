//! One seeded random stream per actor, derived from (seed, actor name): adding an actor, or an actor drawing more,
//! never changes what another actor draws.

use std::collections::BTreeMap;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sha2::{Digest, Sha256};

use crate::kernel::Millis;

/// Domain separation: a change of derivation must change this tag (and every recorded hash with it).
const STREAM_TAG: &[u8] = b"gpuclaim-sim/actor-stream/v1";

/// The stream of `actor` in a run seeded with `seed`.
pub fn actor_stream(seed: u64, actor: &str) -> ChaCha8Rng {
    let digest = Sha256::new()
        .chain_update(STREAM_TAG)
        .chain_update(seed.to_le_bytes())
        .chain_update((actor.len() as u64).to_le_bytes())
        .chain_update(actor.as_bytes())
        .finalize();
    let mut key = [0u8; 32];
    key.copy_from_slice(&digest);
    ChaCha8Rng::from_seed(key)
}

/// Every actor's stream of one run, created on first use.
#[derive(Debug)]
pub struct Streams {
    seed: u64,
    streams: BTreeMap<String, ChaCha8Rng>,
}

impl Streams {
    pub fn new(seed: u64) -> Self {
        Streams { seed, streams: BTreeMap::new() }
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn of(&mut self, actor: &str) -> &mut ChaCha8Rng {
        if !self.streams.contains_key(actor) {
            self.streams.insert(actor.to_owned(), actor_stream(self.seed, actor));
        }
        self.streams.get_mut(actor).expect("inserted above")
    }
}

/// An exponentially distributed draw with the given mean, in whole milliseconds (at least 1). `libm`'s logarithm
/// is the same on every machine, which the event-log hash needs.
pub fn exponential(rng: &mut ChaCha8Rng, mean: Millis) -> Millis {
    // Uniform in (0, 1]: never zero, so the logarithm is finite.
    let uniform = (rng.random_range(0..(1u64 << 53)) + 1) as f64 / (1u64 << 53) as f64;
    let draw = -libm::log(uniform) * mean.0 as f64;
    Millis((draw as u64).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draws(rng: &mut ChaCha8Rng) -> Vec<u32> {
        (0..8).map(|_| rng.random_range(0..1_000)).collect()
    }

    #[test]
    fn an_actors_stream_depends_only_on_the_seed_and_its_name() {
        let mut alone = Streams::new(7);
        let expected = draws(alone.of("scheduler"));
        let mut crowded = Streams::new(7);
        draws(crowded.of("kubelet"));
        draws(crowded.of("kubelet"));
        assert_eq!(draws(crowded.of("scheduler")), expected, "other actors do not perturb it");
        assert_ne!(draws(Streams::new(8).of("scheduler")), expected, "another seed, another stream");
        assert_ne!(draws(Streams::new(7).of("scheduler2")), expected);
    }

    #[test]
    fn streams_are_the_same_on_every_machine() {
        // Pinned: a change here changes every recorded event-log hash.
        let mut rng = actor_stream(42, "workload");
        assert_eq!(draws(&mut rng), PINNED);
    }

    const PINNED: [u32; 8] = [660, 141, 217, 754, 259, 863, 90, 893];

    #[test]
    fn exponential_draws_have_the_mean_asked() {
        let mut rng = actor_stream(1, "workload");
        let mean = Millis::seconds(60);
        let total: u64 = (0..20_000).map(|_| exponential(&mut rng, mean).0).sum();
        let observed = total / 20_000;
        assert!((57_000..63_000).contains(&observed), "{observed}");
    }
}
