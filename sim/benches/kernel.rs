//! The bare event queue, for comparison with whole runs: one million events scheduled a little ahead and handled,
//! each scheduling the next, as a run's events do. Run: `cargo bench -p gpuclaim-sim --bench kernel`.

use divan::{Bencher, black_box};
use gpuclaim_sim::kernel::{Kernel, Millis};

fn main() {
    divan::main();
}

const EVENTS: u64 = 1_000_000;

#[divan::bench]
fn a_million_events_through_the_queue(bencher: Bencher) {
    bencher.bench(|| {
        let mut kernel: Kernel<u64> = Kernel::new();
        // A thousand actors with an event in flight each, like a busy world.
        for actor in 0..1_000 {
            kernel.schedule_at(Millis(actor), actor).unwrap();
        }
        let ran = kernel
            .run(Millis(u64::MAX / 2), 2 * EVENTS, |kernel, now, actor| -> Result<(), ()> {
                if kernel.handled() + kernel.queued() as u64 <= EVENTS {
                    kernel.schedule_at(now + Millis(1 + actor % 97), actor).unwrap();
                }
                Ok(())
            })
            .unwrap();
        black_box(ran)
    });
}
