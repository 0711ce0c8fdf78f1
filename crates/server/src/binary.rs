//! The binary protocol (protocol-binary.txt): executes binary requests
//! buffered in a session. Not implemented yet: a binary client is closed.

use crate::session::{Flow, Session};
use crate::worker::WorkerCtx;

pub fn process(_session: &mut Session, _ctx: &WorkerCtx) -> Flow {
    Flow::Close
}
