//! [`Reloadable`]: a configuration built from files, swapped whole when
//! they are loaded again (a certificate reload): a load that fails leaves
//! the one in use unchanged; what holds the old one keeps it.

use std::sync::{Arc, RwLock};
use std::time::Instant;

/// The configuration in use and when it was loaded.
#[derive(Debug)]
pub struct Reloadable<T> {
    current: RwLock<Arc<T>>,
    loaded_at: RwLock<Instant>,
}

impl<T> Reloadable<T> {
    /// `first`, loaded now.
    pub fn new(first: T) -> Self {
        Reloadable {
            current: RwLock::new(Arc::new(first)),
            loaded_at: RwLock::new(Instant::now()),
        }
    }

    /// The configuration in use.
    pub fn get(&self) -> Arc<T> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Loads again with `load`; Err leaves the one in use.
    pub fn reload<E>(&self, load: impl FnOnce() -> Result<T, E>) -> Result<(), E> {
        let next = Arc::new(load()?);
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = next;
        *self.loaded_at.write().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        Ok(())
    }

    /// Seconds since the last load.
    pub fn since_loaded(&self) -> u64 {
        self.loaded_at
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
            .as_secs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_reload_keeps_the_configuration_in_use() {
        let r = Reloadable::new(1);
        let held = r.get();
        r.reload(|| Ok::<_, ()>(2)).unwrap();
        assert_eq!((*held, *r.get()), (1, 2));
        assert_eq!(r.reload(|| Err("bad key")), Err("bad key"));
        assert_eq!(*r.get(), 2);
        assert_eq!(r.since_loaded(), 0);
    }
}
