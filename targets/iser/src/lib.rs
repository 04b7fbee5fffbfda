//! # rustgt-iser: the iSER driver (RFC 7145)
//!
//! Drives the same sans-I/O [`rustgt_iscsi::Connection`] as the TCP driver,
//! over RDMA: librdmacm accepts connections (with the iSER CM private
//! data), libibverbs moves the messages and the data. Login, negotiation,
//! sessions and sequencing stay in the core; this crate only maps the
//! core's iSER operations (Sends, RDMA Writes for Data-In, RDMA Reads for
//! Data-Out) to work requests and their completions back.
//!
//! Layer: a transport driver beside `rustgt-iscsi-tcp`, on top of the port
//! layer (`rustgt-port`): the targets, the session table shared with TCP,
//! the connection registry, SCSI dispatch (run to completion where the LUN
//! allows), statistics, kill/logout/shutdown and the reactor threads are
//! the port's. This crate accepts RDMA connections and moves work
//! requests; every connection task runs on one of the port's reactors.
//!
//! Guarantees:
//! - no memory registration per I/O: each connection registers its
//!   receive, send and data buffers once, at accept, and a pooled read
//!   buffer (`IoBuf`) the first time an RDMA Write sends from it; that
//!   registration is cached until the buffer pool frees the storage (its
//!   release hook deregisters first) or the connection goes, and bounded
//!   ([`regcache::PINNED_LIMIT`] bytes; past it the data is copied). The
//!   target's memory is registered for local access only, never exposed;
//! - receives are posted for as many unexpected PDUs as the target
//!   declares (MaxOutstandingUnexpectedPDUs), send and completion queues
//!   follow the session queue depth, RDMA Reads in flight never exceed the
//!   initiator depth agreed at accept;
//! - an idle connection sleeps on its completion channel and CM event
//!   channel (non-blocking descriptors watched by the port reactor that
//!   runs it); under load the completion queue is polled on without
//!   waiting for events;
//! - each connection takes the port's configuration as it is at accept,
//!   with MaxOutstandingUnexpectedPDUs set to the receives it posts
//!   ([`iser_config`]), so targets and settings changed at run time reach
//!   iSER connections like TCP ones;
//! - a buffer a posted work request uses outlives it: slots are held
//!   until the completion, the data of a zero-copy Write too, and at
//!   teardown until the QP is destroyed;
//! - a disconnect, a flushed work request or an error completion ends the
//!   connection: its SCSI tasks are aborted (nexus loss) and its QP, CQ,
//!   memory regions, PD and CM id are released in order, exactly once;
//! - every `unsafe` block is in the `verbs` module.
//!
//! The RDMA parts need the `rdma` feature (and libibverbs-dev,
//! librdmacm-dev, libclang-dev to build); without it only the pure
//! planning and bookkeeping modules are built, which keeps the default
//! workspace build free of RDMA headers.

#![cfg_attr(not(feature = "rdma"), forbid(unsafe_code))]
#![warn(missing_docs)]

pub mod pool;
pub mod regcache;
pub mod sizing;
pub mod wrid;

#[cfg(feature = "rdma")]
mod driver;
#[cfg(feature = "rdma")]
mod server;
#[cfg(feature = "rdma")]
mod verbs;

#[cfg(feature = "rdma")]
pub use driver::DriverError;
#[cfg(feature = "rdma")]
pub use server::{bind, serve, serve_until, IserListener};
pub use sizing::{iser_config, IserSettings};
#[cfg(feature = "rdma")]
pub use verbs::VerbsError;
