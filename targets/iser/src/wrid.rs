//! The 64-bit work request id of every posted WR: what it was and which
//! buffer slot it holds, so that its completion can release the slot. Pure
//! encoding; an id this driver did not make decodes to `None`.

#![forbid(unsafe_code)]

/// What a work request is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrKind {
    /// A receive into receive slot `n`.
    Recv(u32),
    /// A Send from send slot `n`.
    Send(u32),
    /// A Send too long for a send slot, from data buffer `n`.
    SendLarge(u32),
    /// An RDMA Write (Data-In) from data buffer `n`.
    Write(u32),
    /// An RDMA Read (Data-Out) into data buffer `n`.
    Read(u32),
    /// An RDMA Write (Data-In) straight from a registered pooled buffer,
    /// which the driver holds as zero-copy write `n`.
    WriteFrom(u32),
    /// An RDMA Read (Data-Out) straight into a registered write buffer,
    /// whose destination the driver holds as zero-copy read `n`.
    ReadInto(u32),
}

const SHIFT: u32 = 56;
const RECV: u64 = 1;
const SEND: u64 = 2;
const SEND_LARGE: u64 = 3;
const WRITE: u64 = 4;
const READ: u64 = 5;
const WRITE_FROM: u64 = 6;
const READ_INTO: u64 = 7;

impl WrKind {
    /// The work request ID that carries this kind and index.
    pub fn encode(self) -> u64 {
        let (kind, n) = match self {
            WrKind::Recv(n) => (RECV, n),
            WrKind::Send(n) => (SEND, n),
            WrKind::SendLarge(n) => (SEND_LARGE, n),
            WrKind::Write(n) => (WRITE, n),
            WrKind::Read(n) => (READ, n),
            WrKind::WriteFrom(n) => (WRITE_FROM, n),
            WrKind::ReadInto(n) => (READ_INTO, n),
        };
        (kind << SHIFT) | u64::from(n)
    }

    /// The kind and index of a work request ID made by [`WrKind::encode`];
    /// `None` for an ID it cannot have made.
    pub fn decode(id: u64) -> Option<WrKind> {
        if id & 0x00ff_ffff_0000_0000 != 0 {
            return None;
        }
        let n = u32::try_from(id & 0xffff_ffff).ok()?;
        Some(match id >> SHIFT {
            RECV => WrKind::Recv(n),
            SEND => WrKind::Send(n),
            SEND_LARGE => WrKind::SendLarge(n),
            WRITE => WrKind::Write(n),
            READ => WrKind::Read(n),
            WRITE_FROM => WrKind::WriteFrom(n),
            READ_INTO => WrKind::ReadInto(n),
            _ => return None,
        })
    }

    /// Posted on the send queue (everything but receives).
    pub fn on_send_queue(self) -> bool {
        !matches!(self, WrKind::Recv(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_foreign_ids_are_refused() {
        for k in [
            WrKind::Recv(0),
            WrKind::Send(7),
            WrKind::SendLarge(u32::MAX),
            WrKind::Write(12),
            WrKind::Read(99),
            WrKind::WriteFrom(5),
            WrKind::ReadInto(6),
        ] {
            assert_eq!(WrKind::decode(k.encode()), Some(k));
        }
        assert_eq!(WrKind::Recv(3).encode(), 0x0100_0000_0000_0003);
        assert_eq!(WrKind::decode(0), None);
        assert_eq!(WrKind::decode(0x0900_0000_0000_0001), None);
        assert_eq!(WrKind::decode(0x0100_0001_0000_0001), None);
        assert!(!WrKind::Recv(1).on_send_queue());
        assert!(WrKind::Read(1).on_send_queue());
        assert!(WrKind::WriteFrom(1).on_send_queue());
        assert_eq!(WrKind::WriteFrom(2).encode(), 0x0600_0000_0000_0002);
        assert!(WrKind::ReadInto(1).on_send_queue());
        assert_eq!(WrKind::ReadInto(2).encode(), 0x0700_0000_0000_0002);
    }
}
