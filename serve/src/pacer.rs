//! Virtual time paced to the wall clock: the served twin's world runs `speed` virtual seconds per wall second, or
//! as fast as it can (`max`), so a person or a test sees a scenario unfold at a chosen pace.

use std::time::{Duration, Instant};

use gpuclaim_sim::kernel::Millis;

/// How fast virtual time runs against the wall clock.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Speed {
    /// Virtual seconds per wall second (1 is real time).
    Times(f64),
    /// No pacing: each slice runs to the next event at once.
    Max,
}

impl std::str::FromStr for Speed {
    type Err = String;

    fn from_str(text: &str) -> Result<Speed, String> {
        if text == "max" {
            return Ok(Speed::Max);
        }
        match text.parse::<f64>() {
            Ok(times) if times.is_finite() && times > 0.0 && times <= 1e9 => Ok(Speed::Times(times)),
            _ => Err(format!(
                "{text:?}: a speed is a positive number of virtual seconds per second (at most 1e9), or max"
            )),
        }
    }
}

/// The virtual time the wall clock says it is.
#[derive(Clone, Copy, Debug)]
pub struct Pacer {
    wall_start: Instant,
    virtual_start: Millis,
    speed: Speed,
}

impl Pacer {
    pub fn new(wall_start: Instant, virtual_start: Millis, speed: Speed) -> Pacer {
        Pacer { wall_start, virtual_start, speed }
    }

    /// The virtual time to run to at wall time `now` (`None` at `max`: as far as the events go).
    pub fn target(&self, now: Instant) -> Option<Millis> {
        match self.speed {
            Speed::Max => None,
            Speed::Times(times) => {
                let elapsed = now.saturating_duration_since(self.wall_start).as_secs_f64() * times * 1000.0;
                Some(Millis(self.virtual_start.0.saturating_add(elapsed as u64)))
            }
        }
    }

    /// How long from wall time `now` until virtual time `at` is due (zero at `max`, or if it is due already).
    pub fn until(&self, now: Instant, at: Millis) -> Duration {
        match self.speed {
            Speed::Max => Duration::ZERO,
            Speed::Times(times) => {
                let ahead = at.0.saturating_sub(self.virtual_start.0) as f64 / 1000.0 / times;
                (self.wall_start + Duration::from_secs_f64(ahead)).saturating_duration_since(now)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paced_clock_runs_speed_virtual_seconds_per_second() {
        let start = Instant::now();
        let pacer = Pacer::new(start, Millis::seconds(100), Speed::Times(60.0));
        assert_eq!(pacer.target(start), Some(Millis::seconds(100)));
        assert_eq!(pacer.target(start + Duration::from_secs(2)), Some(Millis::seconds(220)));
        assert_eq!(pacer.until(start, Millis::seconds(160)), Duration::from_secs(1));
        assert_eq!(pacer.until(start + Duration::from_secs(5), Millis::seconds(160)), Duration::ZERO);
        let max = Pacer::new(start, Millis::ZERO, Speed::Max);
        assert_eq!(max.target(start), None);
        assert_eq!(max.until(start, Millis::seconds(1_000)), Duration::ZERO);
    }

    #[test]
    fn a_speed_is_a_positive_number_or_max() {
        assert_eq!("60".parse::<Speed>(), Ok(Speed::Times(60.0)));
        assert_eq!("0.5".parse::<Speed>(), Ok(Speed::Times(0.5)));
        assert_eq!("max".parse::<Speed>(), Ok(Speed::Max));
        for bad in ["0", "-1", "NaN", "inf", "fast", ""] {
            let error = bad.parse::<Speed>().unwrap_err();
            assert!(error.contains("a speed is a positive number"), "{bad}: {error}");
        }
    }
}
