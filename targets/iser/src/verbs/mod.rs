//! Owners of the librdmacm and libibverbs objects the driver uses, with
//! safe methods. Every `unsafe` block of the crate is in this module.
//!
//! Guarantees:
//! - every object is released exactly once, in an order the libraries
//!   accept: a connection's QP, CQ, completion channel, memory regions,
//!   registrations of pooled buffers, PD, CM id and CM event channel go in
//!   that order ([`ConnResources`]);
//! - registered memory is never handed out as a Rust reference while the
//!   device may write it: buffers are raw allocations, and a slot is only
//!   borrowed while no work request that uses it is posted (the caller's
//!   slot pools track that);
//! - pooled `IoBuf` storage registered for zero-copy RDMA Writes is only
//!   read by the device, and only while the driver holds a `Bytes` of it
//!   for a posted WR; its registration is dropped before the pool frees the
//!   storage (release hook) and with the connection's PD, never while a WR
//!   names it;
//! - file descriptors are non-blocking, so readiness-driven callers never
//!   block in `rdma_get_cm_event` or `ibv_get_cq_event`.
//!
//! Layout: `sys` holds the error type and libc helpers, `cm` the
//! connection manager's objects, `mem` registered memory, `conn` the
//! queues of one connection; each imports only those before it.

mod cm;
mod conn;
mod mem;
mod sys;

pub use cm::AcceptParams;
pub use conn::{Buf, Completion, ConnResources, ConnShape, IdChannel, SendKind};
pub use mem::pinned;
pub use sys::{watch, VerbsError};
