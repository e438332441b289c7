//! Writeback error reporting with the kernel's errseq semantics: every
//! failed writeback bumps a sequence; each open handle keeps a cursor and its
//! next fsync reports the newest error once if the sequence moved past the
//! cursor. A handle opened after an error that nobody has seen yet still sees
//! it; once seen, new handles start clean.

use crate::base::locks;
use std::io;
use std::sync::Mutex;

#[derive(Default)]
struct ErrState {
    /// Number of errors recorded so far; 0 = none ever.
    seq: u64,
    errno: i32,
    /// Some handle has reported the newest error.
    seen: bool,
}

/// One inode's error sequence.
#[derive(Default)]
pub struct ErrSeq {
    state: Mutex<ErrState>,
}

impl ErrSeq {
    /// Records a failed writeback (or store sync) with its errno.
    pub fn record(&self, errno: i32) {
        let mut st = locks::lock(&self.state);
        st.seq += 1;
        st.errno = errno;
        st.seen = false;
    }

    /// The cursor a new handle starts from: behind an unseen error so that it
    /// reports it, at the newest error otherwise.
    pub fn open_cursor(&self) -> u64 {
        let st = locks::lock(&self.state);
        if st.seq > 0 && !st.seen {
            st.seq - 1
        } else {
            st.seq
        }
    }

    /// The current sequence, for [`ErrSeq::error_since`].
    pub fn sample(&self) -> u64 {
        locks::lock(&self.state).seq
    }

    /// The newest errno if an error was recorded after `sample`; does not
    /// mark it seen (handles still report it through their cursors).
    pub fn error_since(&self, sample: u64) -> Option<i32> {
        let st = locks::lock(&self.state);
        (st.seq > sample).then_some(st.errno)
    }

    /// Reports the newest error if the sequence moved past `cursor`, and
    /// advances the cursor so the same error is reported once per handle.
    pub fn check_and_advance(&self, cursor: &mut u64) -> io::Result<()> {
        let mut st = locks::lock(&self.state);
        if st.seq > *cursor {
            *cursor = st.seq;
            st.seen = true;
            return Err(io::Error::from_raw_os_error(st.errno));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_handle_sees_an_error_once() {
        let e = ErrSeq::default();
        let mut a = e.open_cursor();
        let mut b = e.open_cursor();
        assert!(e.check_and_advance(&mut a).is_ok());
        e.record(libc::EIO);
        assert_eq!(e.check_and_advance(&mut a).unwrap_err().raw_os_error(), Some(libc::EIO));
        assert!(e.check_and_advance(&mut a).is_ok(), "reported once");
        assert_eq!(e.check_and_advance(&mut b).unwrap_err().raw_os_error(), Some(libc::EIO));
        assert!(e.check_and_advance(&mut b).is_ok());
        // Seen already: a new handle starts clean.
        let mut c = e.open_cursor();
        assert!(e.check_and_advance(&mut c).is_ok());
    }

    #[test]
    fn error_since_a_sample_does_not_consume_it() {
        let e = ErrSeq::default();
        let s = e.sample();
        assert_eq!(e.error_since(s), None);
        e.record(libc::EIO);
        assert_eq!(e.error_since(s), Some(libc::EIO));
        assert_eq!(e.error_since(e.sample()), None);
        let mut c = 0;
        assert!(e.check_and_advance(&mut c).is_err(), "still reported to handles");
    }

    #[test]
    fn a_handle_opened_after_an_unseen_error_sees_it() {
        let e = ErrSeq::default();
        e.record(libc::ENOSPC);
        let mut late = e.open_cursor();
        assert_eq!(e.check_and_advance(&mut late).unwrap_err().raw_os_error(), Some(libc::ENOSPC));
    }
}
