//! What a driver and the port tell one connection: the description of a
//! new connection ([`ConnInfo`]) and the messages it receives
//! ([`PortMsg`]).

use std::net::SocketAddr;

use rustgt_iscsi::negotiate::Transport;
use rustgt_scsi::{Response, TmfResponse};

use crate::admission::Admitted;

/// What a driver tells the port about a new connection.
#[derive(Debug)]
pub struct ConnInfo {
    /// TCP or iSER.
    pub transport: Transport,
    /// The initiator's address.
    pub peer: SocketAddr,
    /// The portal address the initiator connected to.
    pub local: SocketAddr,
    /// A second descriptor of a TCP socket, so the port can see from
    /// another thread that the initiator closed it (`None` for iSER).
    pub probe: Option<std::net::TcpStream>,
    /// Its place under the connection caps ([`crate::Port::admit`]), held until
    /// the connection is forgotten.
    pub admitted: Admitted,
}

/// Messages from the rest of the process to one connection.
#[derive(Debug)]
pub enum PortMsg {
    /// A command a LUN worker finished: [`rustgt_iscsi::Connection::complete`].
    Done(Response),
    /// A task-management result: [`rustgt_iscsi::Connection::tmf_done`].
    Tmf(u32, TmfResponse),
    /// Session reinstatement or admin kill: close now.
    Kill,
    /// Shutdown or admin logout: ask the initiator to log out (two
    /// seconds, [`rustgt_iscsi::Connection::request_logout`]).
    RequestLogout,
}
