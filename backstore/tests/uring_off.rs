//! `[reactor] io_uring = "off"`: a thread then gets no ring, whatever the
//! kernel offers (its own test binary: the switch is process-wide).

use rustgt_backstore::uring;

#[test]
fn off_means_no_ring() {
    assert!(uring::enabled(), "on by default");
    uring::set_enabled(false);
    assert!(uring::start_thread().expect("no error").is_none());
    assert!(!uring::active());
    assert!(!uring::has_room());
    uring::set_enabled(true);
}
