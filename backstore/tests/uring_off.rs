//! `[reactor] io_uring = "off"`: a reactor then gets no ring, whatever the
//! kernel offers (its own test binary: the switch is process-wide).

use rustgt_backstore::uring::{self, OpDone, Ring};

#[test]
fn off_means_no_ring() {
    assert!(uring::enabled(), "on by default");
    uring::set_enabled(false);
    assert!(Ring::<OpDone>::start().expect("no error").is_none());
    uring::set_enabled(true);
    if uring::probe().is_ok() {
        assert!(
            Ring::<OpDone>::start().expect("no error").is_some(),
            "on again"
        );
    }
}
