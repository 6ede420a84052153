//! Defaults every part of the client shares (kept apart so no feature module needs the
//! sandbox handle for a constant).

/// `exec`'s default timeout, as in NeMo Gym.
pub const DEFAULT_EXEC_TIMEOUT_S: f64 = 180.0;
