//! When an open loop's requests are due: evenly spaced or a Poisson
//! process (`load --arrivals`).

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::Rng;

/// How an open loop spaces its requests in time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Arrivals {
    /// Evenly spaced: each connection every `conns / rate` seconds.
    #[default]
    Uniform,
    /// A Poisson process of the offered rate: exponential gaps.
    Poisson,
}

/// The gap after one open-loop request of a connection whose mean gap is
/// `mean`.
pub(super) fn next_gap(arrivals: Arrivals, mean: Duration, rng: &mut SmallRng) -> Duration {
    match arrivals {
        Arrivals::Uniform => mean,
        Arrivals::Poisson => {
            // Inverse transform: -ln(U) is exponential with mean 1; U in
            // (0, 1] so the logarithm is finite.
            let u: f64 = 1.0 - rng.gen::<f64>();
            mean.mul_f64(-u.ln())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn poisson_gaps_have_the_mean_and_spread_of_an_exponential() {
        let mut rng = SmallRng::seed_from_u64(7);
        let mean = Duration::from_micros(100);
        let gaps: Vec<f64> = (0..200_000)
            .map(|_| next_gap(Arrivals::Poisson, mean, &mut rng).as_secs_f64() * 1e6)
            .collect();
        let avg = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let var = gaps.iter().map(|g| (g - avg).powi(2)).sum::<f64>() / gaps.len() as f64;
        assert!((avg - 100.0).abs() < 1.5, "mean {avg}");
        // An exponential's standard deviation equals its mean.
        assert!((var.sqrt() - 100.0).abs() < 2.0, "sd {}", var.sqrt());
        assert!(gaps.iter().all(|g| g.is_finite() && *g >= 0.0));
        let uniform = next_gap(Arrivals::Uniform, mean, &mut rng);
        assert_eq!(uniform, mean);
    }
}
