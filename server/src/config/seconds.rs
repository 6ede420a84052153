//! Config durations: written as seconds (a JSON/YAML number, the keys ending in `_s`, as in the
//! seed's `docker.yaml`), held as `Duration` from parsing on so no user converts. Negative,
//! NaN, infinite and absurd values are refused here; whether zero is allowed is `validate`'s.

use std::time::Duration;

use serde::de::{Deserialize, Deserializer, Error, Unexpected};

/// The largest config duration: a century (anything longer is a mistake, and would
/// overflow deadline arithmetic).
pub const MAX: f64 = 100.0 * 365.0 * 86_400.0;

fn checked<E: Error>(value: f64) -> Result<Duration, E> {
    match Duration::try_from_secs_f64(value) {
        Ok(d) if value <= MAX => Ok(d),
        _ => Err(E::invalid_value(Unexpected::Float(value), &"seconds >= 0 and <= 3153600000")),
    }
}

pub fn required<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    checked(f64::deserialize(d)?)
}

/// `null` is `None`.
pub fn optional<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    Option::<f64>::deserialize(d)?.map(checked).transpose()
}
