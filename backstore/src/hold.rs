//! What an operation in flight keeps alive until it completes: the store
//! whose file or mapping it uses. Below `crate::store`, so the submission
//! types (`aio`, `uring`) need not name the store trait.

/// Anything shared between threads; every [`crate::Backstore`] is one, so
/// an `Arc<dyn Backstore>` goes where an `Arc<dyn Keepalive>` is held.
pub trait Keepalive: Send + Sync {}

impl<T: ?Sized + Send + Sync> Keepalive for T {}
