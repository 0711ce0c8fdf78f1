//! `osmium-bench --generate-man DIR` (a packaging step, not in `-h`):
//! writes DIR/osmium-bench.1 from the clap definition.

use std::path::PathBuf;
use std::process::ExitCode;

/// None when the command line is not `--generate-man DIR`.
pub fn generate<C: clap::CommandFactory>() -> Option<ExitCode> {
    let argv: Vec<_> = std::env::args_os().collect();
    if argv.len() != 3 || argv[1] != "--generate-man" {
        return None;
    }
    let path = PathBuf::from(&argv[2]).join("osmium-bench.1");
    let written = std::fs::File::create(&path)
        .and_then(|mut f| clap_mangen::Man::new(C::command()).render(&mut f));
    Some(match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("osmium-bench: {}: {e}", path.display());
            ExitCode::from(2)
        }
    })
}
