//! The command line's parsing: memcached's forms, defaults, and refusals.

use super::*;

fn run(args: &[&str]) -> Result<Settings, String> {
    let mut v = vec!["osmium"];
    v.extend_from_slice(args);
    match parse(v)? {
        Action::Run(s) => Ok(*s),
        Action::Print(_) | Action::GenSecret(_) => Err("print".into()),
    }
}

#[test]
fn defaults() {
    let s = run(&[]).unwrap();
    assert_eq!(s.memory_limit, 64 << 20);
    assert_eq!(s.item_size_max, 1 << 20);
    assert_eq!(s.threads, 4);
    assert_eq!(s.max_connections, 1024);
    assert_eq!(s.listen[0].host, "127.0.0.1");
    assert_eq!(s.listen[0].port, 11211);
}

#[test]
fn replication_needs_a_secret() {
    let e = run(&["--replicate-to", "h:1"]).err().unwrap();
    assert!(e.contains("--replication-secret"), "{e}");
    let s = run(&["--replicate-to", "h:1", "--replication-secret", "/k"]).unwrap();
    assert_eq!(s.replication_secret.as_deref(), Some("/k"));
}

#[test]
fn memcached_forms() {
    let s = run(&[
        "-p",
        "5000",
        "-U",
        "0",
        "-l",
        "127.0.0.1",
        "-m",
        "1024",
        "-t",
        "1",
    ])
    .unwrap();
    assert_eq!((s.port, s.memory_limit, s.threads), (5000, 1 << 30, 1));
    let s = run(&[
        "-vv",
        "-I",
        "2m",
        "-o",
        "idle_timeout=5,hashpower=20",
        "-C",
        "-M",
        "-F",
        "-A",
    ])
    .unwrap();
    assert_eq!(s.verbose, 2);
    assert_eq!(s.item_size_max, 2 << 20);
    assert_eq!(s.idle_timeout, 5);
    assert!(!s.use_cas && !s.evictions && !s.flush_enabled && s.shutdown_enabled);
    let s = run(&[
        "--port=6000",
        "--listen=127.0.0.1:7000,::1",
        "--memory-limit=8",
    ])
    .unwrap();
    assert_eq!(s.listen.len(), 2);
    assert_eq!(s.listen[0].port, 7000);
    assert_eq!(s.listen[1].port, 6000);
    assert!(run(&["-o", "slab_chunk_max=64"]).unwrap().warnings.len() == 1);
}

#[test]
fn compaction_options() {
    let s = run(&[]).unwrap();
    assert_eq!(s.clean, osmium_store::CleanConfig::default());
    let s = run(&[
        "-o",
        "compact_policy=cost_benefit,compact_threshold=40",
        "-o",
        "compact_reserve=5,no_compact_background,ext_max_frag=0.5",
        "-o",
        "ext_path=/tmp/x:64m",
    ])
    .unwrap();
    assert_eq!(s.clean.policy, osmium_store::CleanPolicy::CostBenefit);
    assert_eq!(
        (s.clean.threshold_percent, s.clean.reserve_percent),
        (40, 5)
    );
    assert!(!s.clean.background);
    assert_eq!(s.flash.unwrap().max_frag_percent, 50);
    for bad in [
        "compact_policy=lru",
        "compact_policy",
        "compact_threshold=101",
        "compact_threshold=x",
        "compact_reserve=51",
    ] {
        assert!(run(&["-o", bad]).is_err(), "{bad}");
    }
}

#[test]
fn compression_option() {
    use osmium_store::Compression;
    assert_eq!(run(&[]).unwrap().compression, Compression::Cold);
    for (arg, want) in [
        ("compression=off", Compression::Off),
        ("compression=cold", Compression::Cold),
        ("compression=all", Compression::All),
    ] {
        assert_eq!(run(&["-o", arg]).unwrap().compression, want, "{arg}");
    }
    for bad in [
        "compression",
        "compression=",
        "compression=zstd",
        "compression=ALL",
    ] {
        assert!(run(&["-o", bad]).is_err(), "{bad}");
    }
}

#[test]
fn compress_dicts_option() {
    assert!(run(&[]).unwrap().compress_dicts);
    assert!(!run(&["-o", "compress_dicts=off"]).unwrap().compress_dicts);
    assert!(run(&["-o", "compress_dicts=on"]).unwrap().compress_dicts);
    for bad in ["compress_dicts", "compress_dicts=", "compress_dicts=yes"] {
        assert!(run(&["-o", bad]).is_err(), "{bad}");
    }
}

#[test]
fn an_option_given_twice_takes_its_last_value_and_lists_add_up() {
    let s = run(&[
        "-t",
        "4",
        "-m",
        "10",
        "-t",
        "2",
        "-o",
        "idle_timeout=5",
        "-o",
        "no_lru_crawler",
    ])
    .unwrap();
    assert_eq!((s.threads, s.memory_limit), (2, 10 << 20));
    assert_eq!(s.idle_timeout, 5);
    assert!(!s.lru_crawler);
    let s = run(&["-l", "127.0.0.1", "-l", "127.0.0.2"]).unwrap();
    assert_eq!(s.listen.len(), 2);
}

#[test]
fn idle_spin_is_off_by_default_and_taken_when_asked() {
    let cpus = std::thread::available_parallelism().unwrap().get();
    let t = |n: usize| run(&["-t", &n.to_string()]).unwrap().idle_spin_us;
    assert_eq!(t(1), 0);
    assert_eq!(t(cpus), 0);
    assert_eq!(t(cpus + 1), 0);
    assert_eq!(run(&["-o", "idle_spin=100"]).unwrap().idle_spin_us, 100);
    assert_eq!(run(&["-o", "idle_spin=0"]).unwrap().idle_spin_us, 0);
    assert_eq!(
        run(&["-t", "64", "-o", "idle_spin=30"])
            .unwrap()
            .idle_spin_us,
        30
    );
    assert_eq!(
        run(&["-o", "idle_spin=99999999"]).unwrap().idle_spin_us,
        MAX_IDLE_SPIN_US
    );
    assert!(run(&["-o", "idle_spin"]).is_err());
}

#[test]
fn thread_affinity_takes_a_first_cpu() {
    assert_eq!(run(&[]).unwrap().thread_affinity, None);
    assert_eq!(
        run(&["-o", "thread_affinity=1"]).unwrap().thread_affinity,
        Some(1)
    );
    assert!(run(&["-o", "thread_affinity"]).is_err());
}

#[test]
fn bad_flags_fail() {
    assert!(run(&["-Q"]).is_err());
    assert!(run(&["-m", "abc"]).is_err());
    assert!(run(&["-t", "0"]).is_err());
    assert!(run(&["-I", "100"]).is_err());
    assert!(run(&["-m", "1", "-I", "1m"]).is_err());
    assert!(run(&["-o", "bogus_option"]).is_err());
    assert!(run(&["-U", "11211", "-S"]).is_err());
}

#[test]
fn udp_and_unix_flags() {
    let s = run(&["-U", "5000"]).unwrap();
    assert_eq!((s.port, s.udp_port), (5000, 5000), "-U alone moves -p");
    let s = run(&["-U", "5000", "-p", "6000"]).unwrap();
    assert_eq!((s.port, s.udp_port), (6000, 5000));
    let s = run(&["-l", "127.0.0.1:7000,127.0.0.2", "-p", "6000", "-t", "3"]).unwrap();
    assert!(s.listen[0].explicit_port && !s.listen[1].explicit_port);
    assert_eq!((s.listen[0].port, s.listen[1].port), (7000, 6000));
    assert_eq!(
        s.threads_per_udp, 1,
        "one worker per UDP socket with several -l"
    );
    assert_eq!(run(&["-t", "3"]).unwrap().threads_per_udp, 3);
    let s = run(&["-s", "/tmp/x.sock", "-a", "640"]).unwrap();
    assert_eq!(s.unix_socket.as_deref(), Some("/tmp/x.sock"));
    assert_eq!(s.unix_mask, 0o640);
    assert_eq!(run(&[]).unwrap().unix_mask, 0o700);
}

#[test]
fn unix_mask_reads_like_strtol() {
    assert_eq!(strtol_octal("755"), 0o755);
    assert_eq!(strtol_octal("  0644"), 0o644);
    assert_eq!(strtol_octal("78"), 0o7);
    assert_eq!(strtol_octal("abc"), 0);
    assert_eq!(strtol_octal(""), 0);
    assert_eq!(strtol_octal("-1"), u32::MAX);
    assert_eq!(strtol_octal("+17"), 0o17);
}

#[test]
fn authentication_picks_the_protocol() {
    assert_eq!(run(&[]).unwrap().binding_protocol, "auto-negotiate");
    assert_eq!(run(&["-B", "binary"]).unwrap().binding_protocol, "binary");
    assert_eq!(run(&["-B", "ascii"]).unwrap().binding_protocol, "ascii");
    let s = run(&["-S", "--sasl-pwdb", "/p"]).unwrap();
    assert_eq!((s.binding_protocol, s.sasl), ("binary", true));
    assert_eq!(s.sasl_pwdb.as_deref(), Some("/p"));
    assert!(run(&["-S", "-B", "ascii"]).is_err());
    assert!(run(&["-S", "-B", "auto"]).is_err());
    assert_eq!(
        run(&["-S", "-B", "binary"]).unwrap().binding_protocol,
        "binary"
    );
    let s = run(&["-Y", "/f"]).unwrap();
    assert_eq!(
        (s.binding_protocol, s.auth_file.as_deref()),
        ("ascii", Some("/f"))
    );
    assert!(run(&["-Y", "/f", "-B", "binary"]).is_err());
    assert!(run(&["-Y", "/f", "-B", "auto"]).is_err());
    assert_eq!(run(&["-S", "-Y", "/f"]).unwrap().binding_protocol, "ascii");
    assert!(run(&["-S", "-Y", "/f", "-B", "ascii"]).is_err());
    assert!(run(&["-B", "udp"]).is_err());
}

#[test]
fn item_memory_option() {
    assert_eq!(run(&[]).unwrap().item_memory, ItemMemory::Memfd);
    for (arg, want) in [
        ("item_memory=memfd", ItemMemory::Memfd),
        ("item_memory=anonymous", ItemMemory::Anonymous),
    ] {
        assert_eq!(run(&["-o", arg]).unwrap().item_memory, want, "{arg}");
    }
    for bad in ["item_memory", "item_memory=", "item_memory=file"] {
        assert!(run(&["-o", bad]).is_err(), "{bad}");
    }
}
