//! The watcher: coherence with other processes, as the kernel gives it.
//! Every file this process caches carries a `fanotify` permission mark
//! (`FAN_OPEN_PERM`), so another process's `open` of it waits in the
//! kernel until this process's watcher thread has handed the file to the
//! kernel (its dirty data written back, `handover.rs`) and allowed the
//! open: the opener, run under this library or not, reads every byte
//! this process's calls acknowledged, and both then use the file through
//! the kernel. Opens by this process itself are allowed at once.
//!
//! `fanotify` permission events need `CAP_SYS_ADMIN`; without it
//! (`fanotify_init` fails with `EPERM`) nothing is watched, and a file this
//! process caches is seen by others as the kernel has it (written back
//! by the flusher, at close, `fsync` and exit): docs/run.md says so.
//!
//! Invariants: every permission event read is answered, and its
//! descriptor closed; the watcher thread itself never blocks on anything
//! but reading events, and answers this process's own opens at once
//! (the engine opens files too, on any of its threads: one waiting on an
//! answer that a busy watcher would never give is a deadlock), so the
//! hand-overs run on a second thread, which answers those events when it
//! is done; both threads run inside the library's guard for their whole
//! lives, so their own calls go to the C library; a forked child
//! closes its copy of the group's descriptor (the parent's thread answers
//! the group's events, and a child that outlived it must not keep the
//! group, with its marks, alive).

use std::sync::atomic::{AtomicI32, Ordering};

use crate::{guard, handover, real, state, table};

/// The fanotify group's descriptor, or -1 without one.
static GROUP: AtomicI32 = AtomicI32::new(-1);

/// The group, created (and the watcher started) on the first call: only
/// a process that caches a file pays for it, and each group counts
/// against the user's limit (`fs.fanotify.max_user_groups`, 128 by
/// default); -1 when the process may not (no `CAP_SYS_ADMIN`), the
/// limit is reached, or the kernel has no fanotify.
fn group() -> libc::c_int {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        if let Some(group) = start() {
            GROUP.store(group, Ordering::Release);
        }
    });
    GROUP.load(Ordering::Acquire)
}

fn start() -> Option<libc::c_int> {
    let flags = libc::FAN_CLASS_CONTENT | libc::FAN_CLOEXEC | libc::FAN_UNLIMITED_MARKS | libc::FAN_UNLIMITED_QUEUE;
    // SAFETY: a plain system call.
    let group = unsafe { libc::fanotify_init(flags, (libc::O_RDONLY | libc::O_LARGEFILE | libc::O_CLOEXEC) as u32) };
    if group < 0 {
        return None;
    }
    let (to_hand_over, handing) = std::sync::mpsc::channel::<libc::fanotify_event_metadata>();
    let worker = std::thread::Builder::new().name("wbcache-handover".into()).spawn(move || {
        let _inside = guard::enter();
        for event in handing {
            let_go_of(event.fd);
            allow(group, &event);
        }
    });
    let spawned = worker.and_then(|_| {
        std::thread::Builder::new().name("wbcache-watcher".into()).spawn(move || serve(group, to_hand_over))
    });
    if spawned.is_err() {
        // SAFETY: the group made just above, closed once.
        unsafe { real::close(group) };
        return None;
    }
    Some(group)
}

/// Puts the permission mark on the file `fd` is open on.
pub fn watch(fd: libc::c_int) {
    mark(fd, libc::FAN_MARK_ADD);
}

/// Takes the mark off the file `fd` is open on.
pub fn unwatch(fd: libc::c_int) {
    mark(fd, libc::FAN_MARK_REMOVE);
}

fn mark(fd: libc::c_int, how: libc::c_uint) {
    let group = if how == libc::FAN_MARK_ADD { group() } else { GROUP.load(Ordering::Acquire) };
    if group < 0 {
        return;
    }
    // SAFETY: a plain system call; a NULL path marks `fd`'s own inode.
    unsafe { libc::fanotify_mark(group, how, libc::FAN_OPEN_PERM, fd, std::ptr::null()) };
}

/// In a forked child: its copy of the group goes (see the module's doc).
pub fn forget_in_child() {
    let group = GROUP.swap(-1, Ordering::AcqRel);
    if group >= 0 {
        // SAFETY: the child's copy of the group's descriptor, closed once.
        unsafe { real::close(group) };
    }
}

/// The watcher thread: reads events; answers this process's own, passes
/// other processes' opens to the hand-over thread.
fn serve(group: libc::c_int, to_hand_over: std::sync::mpsc::Sender<libc::fanotify_event_metadata>) {
    let _inside = guard::enter();
    let mut buf = vec![0u8; 64 * 1024];
    let header = std::mem::size_of::<libc::fanotify_event_metadata>();
    loop {
        // SAFETY: reading into a live buffer of its length.
        let n = unsafe { real::read(group, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return;
        }
        let mut at = 0usize;
        while at + header <= n as usize {
            // SAFETY: the kernel wrote whole events; one starts at `at`
            // (read unaligned: the buffer is bytes).
            let event: libc::fanotify_event_metadata = unsafe { std::ptr::read_unaligned(buf[at..].as_ptr().cast()) };
            if event.event_len < header as u32 {
                break;
            }
            // SAFETY: a plain call.
            let own = event.pid == unsafe { libc::getpid() };
            if own || event.mask & libc::FAN_OPEN_PERM == 0 || event.fd < 0 {
                allow(group, &event);
            } else if let Err(refused) = to_hand_over.send(event) {
                allow(group, &refused.0);
            }
            at += event.event_len as usize;
        }
    }
}

/// Allows the event's open (a permission event) and closes its
/// descriptor.
fn allow(group: libc::c_int, event: &libc::fanotify_event_metadata) {
    if event.fd < 0 {
        return;
    }
    if event.mask & libc::FAN_OPEN_PERM != 0 {
        let response = libc::fanotify_response { fd: event.fd, response: libc::FAN_ALLOW };
        // SAFETY: writing one live response to the group.
        unsafe {
            real::write(group, (&response as *const libc::fanotify_response).cast(), std::mem::size_of_val(&response))
        };
    }
    // SAFETY: the event's descriptor, the watcher's to close, closed once.
    unsafe { real::close(event.fd) };
}

/// Another process opens the file `fd` is open on: hand it over if it is
/// cached here, else note it for an open of it that is starting to cache
/// it; the mark goes either way (the next cache of it marks it again).
fn let_go_of(fd: libc::c_int) {
    let Some(state) = state::built() else { return };
    // SAFETY: an all-zero `stat` is a valid value for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is valid for one `stat`.
    if unsafe { real::fstat(fd, &mut st) } != 0 {
        return;
    }
    let key = (st.st_dev, st.st_ino);
    if table::any_of(key).is_some() {
        if let Err(e) = handover::hand_over(Some(key)) {
            state::complain(&format!("another process opened a cached file whose data stays cached: {e}"));
        }
    } else {
        state.mark_contended(key);
    }
    if table::any_of(key).is_none() {
        unwatch(fd);
    }
}
