//! The acceptor's loop with its upgrades: `Started::serve` returns when
//! a stop is asked, or when a new binary passed its check, and then the
//! upgrade runs (`exec::run`), which returns only when the server goes on
//! in this process.

use std::io;

use crate::context::StopRequest;
use crate::server::{Served, Started};
use crate::upgrade::exec;
use crate::{daemon, launch};

/// Serves until a stop; how it was asked to stop.
pub(crate) fn serve(mut started: Started) -> io::Result<StopRequest> {
    loop {
        match started.serve()? {
            Served::Stopped(how) => return Ok(how),
            Served::Upgrade(server, checked) => started = exec::run(*server, checked)?,
        }
    }
}

/// Runs the acceptor of a started server until a stop; the exit status.
pub(crate) fn serve_to_exit(started: Started) -> i32 {
    match serve(started) {
        Ok(_) => 0,
        Err(e) => {
            daemon::report_failure(&launch::failure_message(&e));
            71 // EX_OSERR
        }
    }
}
