//! Data round trips through a real libiscsi initiator (qemu-io's iscsi
//! driver): patterned writes at many offsets and sizes, read back with
//! pattern verification, under different negotiated parameters; and the
//! data must be in the backing file after a clean shutdown.

mod common;

use std::thread;

use common::{
    assert_file_regions, run_tool, verify, write_and_verify, Daemon, QemuTarget, Region,
    DEFAULT_IQN, TOOL_TIMEOUT,
};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;

/// Offsets and sizes from one sector to 4 MiB, including sizes that are not
/// multiples of the 256 KiB first burst / 1 MiB max burst, a write that
/// straddles a 1 MiB boundary, and the last sectors of the 1 GiB LUN.
fn mixed_regions() -> Vec<Region> {
    vec![
        Region::new(0, 512, 0x11),
        Region::new(4 * KIB, 4 * KIB, 0x22),
        Region::new(MIB - 512, 8 * KIB, 0x33),
        Region::new(2 * MIB + 512, 3 * MIB, 0x5a),
        Region::new(8 * MIB, 256 * KIB + 512, 0x44),
        Region::new(12 * MIB, MIB + 3 * 512, 0x55),
        Region::new(16 * MIB, 4 * MIB, 0x66),
        Region::new(64 * MIB + 7 * 512, 65 * KIB + 512, 0x77),
        Region::new(GIB - 64 * KIB, 64 * KIB, 0x88),
    ]
}

/// Config of one file-backed 1 GiB LUN with `iscsi` settings.
fn config_with(iscsi: &str) -> String {
    format!(
        "[iscsi]\n{iscsi}\n\
         [[targets]]\niqn = \"{DEFAULT_IQN}\"\n\
         [[targets.luns]]\nid = 0\nbackstore = \"file\"\npath = \"lun0.img\"\nsize = \"1G\"\n"
    )
}

fn url_target(d: &Daemon) -> QemuTarget {
    QemuTarget::Url(d.url(DEFAULT_IQN, 0))
}

/// Round trip, then checks the bytes landed in `lun0.img`.
fn round_trip_and_check_file(d: Daemon, target: &QemuTarget) {
    let regions = mixed_regions();
    write_and_verify(target, &regions);
    // Never-written sectors read back as zeros.
    verify(target, &[Region::new(512 * MIB, 64 * KIB, 0)]);
    let scratch = d.stop_keep_files();
    let file = scratch.path().join("data").join("lun0.img");
    let len = std::fs::metadata(&file)
        .map(|m| m.len())
        .unwrap_or_default();
    assert_eq!(len, GIB, "backing file size");
    assert_file_regions(&file, &regions);
}

#[test]
fn default_target_round_trip_persists_to_the_backing_file() {
    let d = Daemon::start();
    let t = url_target(&d);
    round_trip_and_check_file(d, &t);
}

#[test]
fn data_survives_a_new_session() {
    let d = Daemon::start();
    let t = url_target(&d);
    let regions = mixed_regions();
    write_and_verify(&t, &regions);
    // A second qemu-io process is a new login and a new session.
    verify(&t, &regions);
}

#[test]
fn header_digest_crc32c_round_trip() {
    let d = Daemon::start();
    let t = QemuTarget::with_header_digest(d.portal, DEFAULT_IQN, 0, "crc32c");
    round_trip_and_check_file(d, &t);
}

#[test]
fn target_requiring_header_digest() {
    let d = Daemon::start_with_config(&config_with("header_digest = [\"CRC32C\"]"), 1);
    // qemu offers "None,CRC32C" by default: the target must pick CRC32C.
    write_and_verify(&url_target(&d), &mixed_regions());
    // An initiator that refuses digests cannot log in.
    let opts = format!(
        "driver=iscsi,transport=tcp,portal={},target={DEFAULT_IQN},lun=0,header-digest=none",
        d.portal
    );
    let out = run_tool(
        "qemu-io",
        &args!["--image-opts", "-c", "read 0 512", opts],
        TOOL_TIMEOUT,
    );
    out.assert_failure();
}

#[test]
fn initial_r2t_and_immediate_data_combinations() {
    for (initial_r2t, immediate_data) in
        [(true, true), (true, false), (false, true), (false, false)]
    {
        let iscsi = format!("initial_r2t = {initial_r2t}\nimmediate_data = {immediate_data}");
        let d = Daemon::start_with_config(&config_with(&iscsi), 1);
        let t = url_target(&d);
        let regions = mixed_regions();
        write_and_verify(&t, &regions);
        let scratch = d.stop_keep_files();
        assert_file_regions(&scratch.path().join("data").join("lun0.img"), &regions);
    }
}

#[test]
fn tiny_data_segments_force_multi_pdu_data_out() {
    // 512-byte PDUs: a 4 MiB write becomes 8192 Data-Out PDUs.
    let d = Daemon::start_with_config(
        &config_with("max_recv_data_segment_length = 512\nfirst_burst_length = 512"),
        1,
    );
    let t = url_target(&d);
    round_trip_and_check_file(d, &t);
}

#[test]
fn small_bursts_with_one_outstanding_r2t() {
    // Every 4 KiB burst needs its own R2T, one at a time.
    let d = Daemon::start_with_config(
        &config_with(
            "max_burst_length = 4096\nfirst_burst_length = 4096\n\
             max_outstanding_r2t = 1\ninitial_r2t = true",
        ),
        1,
    );
    let t = url_target(&d);
    round_trip_and_check_file(d, &t);
}

#[test]
fn parallel_sessions_on_distinct_regions() {
    const SESSIONS: u64 = 4;
    let d = Daemon::start();
    let t = url_target(&d);
    // Each session owns a 32 MiB slice and writes several sizes into it.
    let slices: Vec<Vec<Region>> = (0..SESSIONS)
        .map(|n| {
            let base = 128 * MIB + n * 32 * MIB;
            let p = 0xa0 + u8::try_from(n).expect("small");
            vec![
                Region::new(base, 512, p),
                Region::new(base + MIB, 3 * MIB + 512, p ^ 0x0f),
                Region::new(base + 8 * MIB, 4 * MIB, p ^ 0x5a),
            ]
        })
        .collect();
    thread::scope(|s| {
        let handles: Vec<_> = slices
            .iter()
            .map(|regions| {
                let t = t.clone();
                s.spawn(move || {
                    write_and_verify(&t, regions);
                })
            })
            .collect();
        for h in handles {
            if let Err(panic) = h.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
    // Each session's data is intact after all of them wrote.
    let all: Vec<Region> = slices.concat();
    verify(&t, &all);
    let scratch = d.stop_keep_files();
    assert_file_regions(&scratch.path().join("data").join("lun0.img"), &all);
}
