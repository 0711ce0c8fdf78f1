//! SIGHUP's re-reading of `--config-file`: the command line is parsed
//! again (with the file's new contents) and validated as at start; a
//! file that does not parse or validate is refused whole (one WARN line,
//! nothing applied). Otherwise what can change live is applied
//! (`--replicate-to`: `replication::targets`; `--replication`), and each
//! other option that differs is named in one WARN line and left as it
//! was. Both outcomes, and every change of the targets, are `sysevents`:
//!
//! ```text
//! ts=... gid=... type=config_reload file=<path> state=applied|refused [reason=<why>]
//! ts=... gid=... type=replication_targets source=reload|command old=<a,b> new=<b,c>
//! ```

use std::sync::Arc;

use crate::context::Shared;
use crate::replication::targets::TargetChange;
use crate::settings::{self, live, Action};

/// SIGHUP: re-reads the config file, when the server was started with
/// one.
pub(crate) fn config_file(shared: &Arc<Shared>) {
    let Some(path) = shared.settings.options.config_file.clone() else {
        return;
    };
    let new = match settings::parse(std::env::args_os()) {
        Ok(Action::Run(s)) => s,
        Ok(Action::Print(_) | Action::GenSecret(_)) => {
            return refused(shared, &path, "it asks for -h, -V, -i or --gen-secret");
        }
        Err(msg) => return refused(shared, &path, msg.trim_end()),
    };
    for name in live::unchangeable(&shared.settings.options, &new.options) {
        tracing::warn!(
            "SIGHUP: {name} differs in {path}, but cannot change while the server runs: \
             left as it was (restart to apply)"
        );
    }
    let repl = &shared.replication;
    if let Err(e) = repl.set_targets(&new.replicate_to, "reload") {
        return refused(shared, &path, &format!("--replicate-to: {e}"));
    }
    if repl.is_on() {
        repl.set_sync(new.replication_sync);
    }
    tracing::info!("SIGHUP: {path} read again");
    shared.logger.sysevent(format_args!(
        "type=config_reload file={} state=applied",
        Encoded(&path)
    ));
}

fn refused(shared: &Shared, path: &str, why: &str) {
    tracing::warn!("SIGHUP: {path} refused, nothing of it applied: {why}");
    shared.logger.sysevent(format_args!(
        "type=config_reload file={} state=refused reason={}",
        Encoded(path),
        Encoded(why)
    ));
}

/// Tells the log watchers of every change of the targets.
pub(crate) fn report_target_changes(shared: &Arc<Shared>) {
    let weak = Arc::downgrade(shared);
    shared
        .replication
        .on_targets_change(Box::new(move |c: &TargetChange| {
            let Some(shared) = weak.upgrade() else {
                return;
            };
            shared.logger.sysevent(format_args!(
                "type=replication_targets source={} old={} new={}",
                c.source,
                Encoded(&c.old.join(",")),
                Encoded(&c.new.join(","))
            ));
        }));
}

/// Text URI-encoded as the log watchers' values are.
struct Encoded<'a>(&'a str);

impl std::fmt::Display for Encoded<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut b = Vec::with_capacity(self.0.len());
        crate::logger::uri_encode(self.0.as_bytes(), &mut b);
        f.write_str(&String::from_utf8_lossy(&b))
    }
}
