//! Operational parameter negotiation (RFC 7143 §6.2, §13; iSER keys from
//! RFC 7145 §6), from the target's side.
//!
//! Layer: sans-I/O, above [`crate::text`]. The login state machine feeds the
//! initiator's key=value pairs of each login request to
//! [`Negotiator::process`] and sends back the answers; before the response
//! that ends the operational stage it appends
//! [`Negotiator::pending_declarations`]. Security keys are left to
//! [`crate::chap::SecurityNegotiator`].
//!
//! Guarantees:
//! - never panics on peer input; every numerical value is range-checked;
//! - the negotiated [`SessionParams`] never exceed the configured [`Limits`]
//!   (the target offers its own value when an RFC default would);
//! - a key sent twice in one login phase is an error (§6.2), except that
//!   the declaratives that may ride along with the security stage
//!   (InitiatorName, TargetName, InitiatorAlias, SessionType) may come
//!   again in a later request with the same value (libiscsi does so).
//!
//! Result functions (§6.2.2, per key in §13):
//!
//! | key                           | kind        | result            | Irrelevant when   |
//! |-------------------------------|-------------|-------------------|-------------------|
//! | HeaderDigest, DataDigest      | list (IO)   | first supported   | iSER: always None |
//! | MaxConnections                | number (LO) | min, 1..65535     | Discovery         |
//! | InitialR2T                    | bool (LO)   | OR                | Discovery         |
//! | ImmediateData                 | bool (LO)   | AND               | Discovery         |
//! | MaxRecvDataSegmentLength      | declarative | 512..2^24-1       |                   |
//! | MaxBurstLength                | number (LO) | min, 512..2^24-1  | Discovery         |
//! | FirstBurstLength              | number (LO) | min, <= MaxBurst  | Discovery, R2T=Yes & Imm=No |
//! | DefaultTime2Wait              | number (LO) | max, 0..3600      |                   |
//! | DefaultTime2Retain            | number (LO) | min, 0..3600      |                   |
//! | MaxOutstandingR2T             | number (LO) | min, 1..65535     | Discovery         |
//! | DataPDUInOrder, DataSequenceInOrder | bool (LO) | OR          | Discovery         |
//! | ErrorRecoveryLevel            | number (LO) | min, 0..2         |                   |
//! | TaskReporting (§13.23)        | list (LO)   | RFC3720 only      | Discovery         |
//! | iSCSIProtocolLevel (RFC 7144) | number (LO) | min, 0..31 (we: 1)| Discovery         |
//! | IFMarker, OFMarker (§13.25)   | obsolete    | Reject (iSER: No) |                   |
//! | IFMarkInt, OFMarkInt          | obsolete    | Reject            |                   |
//! | RDMAExtensions (7145 §6.3)    | bool (LO)   | AND               | TCP: answer No    |
//! | Target/InitiatorRecvDataSegmentLength (7145 §6.4, 6.5) | declarative | 512..2^24-1 | TCP |
//! | MaxOutstandingUnexpectedPDUs (7145 §6.7) | declarative | 0 or 2..2^32-1 | TCP  |
//!
//! One file per sub-job: `types` (transport, SessionType, digests),
//! `limits` ([`Limits`] and the RFC ranges), `params` ([`SessionParams`]),
//! `error` ([`NegotiationError`]), `keys` (the known keys and their
//! properties), `values` (parsing and formatting values), `negotiator`
//! ([`Negotiator`], the login-phase state and per-request processing),
//! `rules` (per-key result functions) and `declare` (the target's own
//! declarations and offers).

mod declare;
mod error;
mod keys;
mod limits;
mod negotiator;
mod params;
mod rules;
mod types;
mod values;

pub use error::NegotiationError;
pub use limits::{LimitProblem, Limits};
pub use negotiator::Negotiator;
pub use params::SessionParams;
pub use types::{Digest, SessionType, Transport};
