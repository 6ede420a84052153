//! A map of one record per sandbox, by name, under one lock: a record is made on its first
//! change and dropped the moment every part of it is empty, so one `take` lets go of all that
//! is kept of a sandbox. The Docker backend (`backends/docker/records.rs`) and the agent engine
//! (`agent_client`) each keep theirs in one.

use std::collections::HashMap;
use std::sync::Mutex;

/// What a [`RecordMap`] holds: empty is the same as absent.
pub trait Record: Default {
    fn is_empty(&self) -> bool;
}

/// Records by sandbox name.
pub struct RecordMap<R> {
    map: Mutex<HashMap<String, R>>,
}

impl<R> Default for RecordMap<R> {
    fn default() -> Self {
        Self { map: Mutex::default() }
    }
}

impl<R: Record> RecordMap<R> {
    /// Read a part of `name`'s record (`None`: no record).
    pub fn read<T>(&self, name: &str, f: impl FnOnce(&R) -> T) -> Option<T> {
        self.map.lock().ok()?.get(name).map(f)
    }

    /// Change `name`'s record (made if missing, dropped if left empty).
    pub fn update<T: Default>(&self, name: &str, f: impl FnOnce(&mut R) -> T) -> T {
        let Ok(mut map) = self.map.lock() else { return T::default() };
        let record = map.entry(name.to_string()).or_default();
        let out = f(record);
        if record.is_empty() {
            map.remove(name);
        }
        out
    }

    /// Take `name`'s whole record.
    pub fn take(&self, name: &str) -> Option<R> {
        self.map.lock().ok()?.remove(name)
    }

    /// A rename: what was kept under `from` is `to`'s now.
    pub fn rename(&self, from: &str, to: &str) {
        if let Ok(mut map) = self.map.lock() {
            if let Some(record) = map.remove(from) {
                map.insert(to.to_string(), record);
            }
        }
    }

    /// Change every record (those left empty are dropped).
    pub fn update_all(&self, mut f: impl FnMut(&mut R)) {
        if let Ok(mut map) = self.map.lock() {
            map.retain(|_, record| {
                f(record);
                !record.is_empty()
            });
        }
    }

    /// Read across every record, by name.
    pub fn survey<T: Default>(&self, f: impl FnOnce(&HashMap<String, R>) -> T) -> T {
        self.map.lock().map(|m| f(&m)).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Marks(u32);

    impl Record for Marks {
        fn is_empty(&self) -> bool {
            self.0 == 0
        }
    }

    #[test]
    fn a_record_left_empty_is_dropped_and_a_missing_one_is_never_made() {
        let records = RecordMap::<Marks>::default();
        records.update("a", |r| r.0 += 2);
        records.update("b", |r| r.0 = 0);
        assert!(records.read("b", |_| ()).is_none(), "clearing a missing record makes none");
        assert_eq!(records.survey(|m| m.len()), 1);
        records.update_all(|r| r.0 -= 1);
        assert_eq!(records.read("a", |r| r.0), Some(1));
        records.rename("a", "c");
        assert!(records.read("a", |_| ()).is_none());
        records.update("c", |r| r.0 = 0);
        assert_eq!(records.survey(|m| m.len()), 0);
        assert!(records.take("c").is_none());
    }
}
