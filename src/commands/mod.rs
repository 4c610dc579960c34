//! The one-shot commands a DBA runs beside the daemon: `status` ([`status`]), `watch`
//! and the sampling loop it shares with `record` ([`watch`]), `diagnose`, `drain`, and
//! `record` / `replay` ([`replay`]). Each reads the server through the
//! [`crate::server::Server`] trait, so it runs the same against a live server, the
//! simulator and a recording.

pub mod advice;
pub mod diagnose;
pub mod drain;
pub mod finding;
pub mod replay;
pub mod restore;
pub mod status;
pub mod watch;

/// Test helpers shared by the commands' tests.
#[cfg(test)]
pub(crate) mod testkit {
    use std::sync::{Arc, Mutex};

    /// An in-memory sink a test reads back (progress lines, recordings, reports).
    #[derive(Clone, Default)]
    pub struct SharedBuf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for SharedBuf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl SharedBuf {
        pub fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
        }
    }
}
