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
//!
//! Ownership: this module owns the group, its marks and its two threads;
//! what a hand-over does is `handover.rs`'s, a layer above: `open.rs`,
//! which places a file's mark ([`watch`]) as it starts caching the file,
//! passes the hand-over in as a [`HandOver`], so the watcher names no
//! module above its own.

use std::sync::atomic::{AtomicI32, Ordering};

use crate::{guard, real, state, table};

/// How a file another process opens goes to the kernel: its device and
/// inode in; `Err` when its dirty data could not be written back (the
/// file then stays cached, and the open proceeds all the same).
pub type HandOver = fn((u64, u64)) -> std::io::Result<()>;

/// The fanotify group's descriptor, or -1 without one.
static GROUP: AtomicI32 = AtomicI32::new(-1);

/// The group, created (and the watcher started) on the first call: only
/// a process that caches a file pays for it, and each group counts
/// against the user's limit (`fs.fanotify.max_user_groups`, 128 by
/// default); -1 when the process may not (no `CAP_SYS_ADMIN`), the
/// limit is reached, or the kernel has no fanotify. The hand-over
/// thread hands files over with `hand_over`, the first call's.
fn group(hand_over: HandOver) -> libc::c_int {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        if let Some(group) = start(hand_over) {
            GROUP.store(group, Ordering::Release);
        }
    });
    GROUP.load(Ordering::Acquire)
}

fn start(hand_over: HandOver) -> Option<libc::c_int> {
    let flags = libc::FAN_CLASS_CONTENT | libc::FAN_CLOEXEC | libc::FAN_UNLIMITED_MARKS | libc::FAN_UNLIMITED_QUEUE;
    // SAFETY: fanotify_init takes two flag words and no pointer; the group
    // descriptor it returns is ours.
    let group = unsafe { libc::fanotify_init(flags, (libc::O_RDONLY | libc::O_LARGEFILE | libc::O_CLOEXEC) as u32) };
    if group < 0 {
        return None;
    }
    let group = state::above_program_descriptors(group);
    let (to_hand_over, handing) = std::sync::mpsc::channel::<Pending>();
    let worker = std::thread::Builder::new().name("wbcache-handover".into()).spawn(move || {
        let _inside = guard::enter();
        for pending in handing {
            let_go_of(pending.key, hand_over);
            respond(group, pending.event_fd);
            answered().push(pending.event_fd);
        }
        // The watcher ended: with its copy, this one is the group's last,
        // and closing it lets every waiting open go and drops the marks.
        GROUP.store(-1, Ordering::Release);
        // SAFETY: the group's descriptor in the shared table, closed once.
        unsafe { real::close(group) };
    });
    if worker.is_err() {
        // SAFETY: the group made just above, closed once.
        unsafe { real::close(group) };
        return None;
    }
    let (ready, watching) = std::sync::mpsc::sync_channel::<bool>(1);
    let watcher =
        std::thread::Builder::new().name("wbcache-watcher".into()).spawn(move || serve(group, to_hand_over, ready));
    // Without a watcher (no thread, or no table of its own) the sender
    // went with it, and the hand-over thread closes the group.
    (watcher.is_ok() && watching.recv() == Ok(true)).then_some(group)
}

/// Another process's open, waiting for the hand-over of its file.
struct Pending {
    key: (u64, u64),
    /// The event's descriptor number in the watcher's own table: the
    /// answer names it.
    event_fd: libc::c_int,
}

/// Event descriptors answered by the hand-over thread, for the watcher to
/// close in its own table.
fn answered() -> std::sync::MutexGuard<'static, Vec<libc::c_int>> {
    static ANSWERED: std::sync::Mutex<Vec<libc::c_int>> = std::sync::Mutex::new(Vec::new());
    ANSWERED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Puts the permission mark on the file `fd` is open on. The first call
/// starts the watcher, whose hand-overs are `hand_over`.
pub fn watch(fd: libc::c_int, hand_over: HandOver) {
    mark(group(hand_over), fd, libc::FAN_MARK_ADD);
}

/// Takes the mark off the file `fd` is open on.
pub fn unwatch(fd: libc::c_int) {
    mark(GROUP.load(Ordering::Acquire), fd, libc::FAN_MARK_REMOVE);
}

fn mark(group: libc::c_int, fd: libc::c_int, how: libc::c_uint) {
    if group < 0 {
        return;
    }
    // SAFETY: fanotify_mark reads no memory when the path is NULL (it
    // marks `fd`'s own inode); the rest are descriptors and flags.
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
///
/// It works in a descriptor table of its own (`unshare(CLONE_FILES)`,
/// then every copied descriptor but the group's closed): the kernel puts
/// each event's descriptor at the lowest free number of the reader's
/// table, and in the program's table that number could be one the
/// program is about to `dup2` onto, which would close the event's
/// descriptor under the watcher, and the watcher's close would then close
/// the program's file.
fn serve(group: libc::c_int, to_hand_over: std::sync::mpsc::Sender<Pending>, ready: std::sync::mpsc::SyncSender<bool>) {
    let _inside = guard::enter();
    // SAFETY: plain system calls on this thread's own (unshared) table.
    let private = unsafe {
        libc::unshare(libc::CLONE_FILES) == 0
            && (group == 0 || libc::close_range(0, group as libc::c_uint - 1, 0) == 0)
            && libc::close_range(group as libc::c_uint + 1, libc::c_uint::MAX, 0) == 0
    };
    let _ = ready.send(private);
    if private {
        watch_events(group, &to_hand_over);
        // SAFETY: this table's copy of the group, closed once.
        unsafe { real::close(group) };
    }
}

/// Reads and sorts events until the group fails.
fn watch_events(group: libc::c_int, to_hand_over: &std::sync::mpsc::Sender<Pending>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        for fd in answered().drain(..) {
            // SAFETY: an answered event's descriptor, in this table, closed once.
            unsafe { real::close(fd) };
        }
        let mut ready = libc::pollfd { fd: group, events: libc::POLLIN, revents: 0 };
        // SAFETY: one live `pollfd`; a short timeout closes answered
        // events' descriptors soon (each holds its file open).
        match unsafe { libc::poll(&mut ready, 1, 100) } {
            0 => continue,
            rc if rc < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => continue,
            rc if rc < 0 => return,
            _ => {}
        }
        // SAFETY: reading into a live buffer of its length.
        let n = unsafe { real::read(group, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return;
        }
        for event in events(&buf[..n as usize]) {
            sort(group, &event, to_hand_over);
        }
    }
}

/// The whole events in what one read returned.
fn events(bytes: &[u8]) -> Vec<libc::fanotify_event_metadata> {
    let header = std::mem::size_of::<libc::fanotify_event_metadata>();
    let mut found = Vec::new();
    let mut at = 0usize;
    while at + header <= bytes.len() {
        // SAFETY: the kernel wrote whole events; one starts at `at` (read
        // unaligned: the buffer is bytes).
        let event: libc::fanotify_event_metadata = unsafe { std::ptr::read_unaligned(bytes[at..].as_ptr().cast()) };
        if (event.event_len as usize) < header {
            break;
        }
        found.push(event);
        at += event.event_len as usize;
    }
    found
}

/// Answers an event at once, or passes another process's open of a
/// file to the hand-over thread.
fn sort(group: libc::c_int, event: &libc::fanotify_event_metadata, to_hand_over: &std::sync::mpsc::Sender<Pending>) {
    if event.fd < 0 {
        return;
    }
    // SAFETY: getpid takes nothing, touches no memory and cannot fail.
    let own = event.pid == unsafe { libc::getpid() };
    let foreign = (!own && event.mask & libc::FAN_OPEN_PERM != 0).then(|| key_of(event.fd)).flatten();
    let key = foreign.filter(|&key| cached_here(key, event.fd));
    let pending = key.map(|key| Pending { key, event_fd: event.fd });
    if let Some(Err(refused)) = pending.map(|p| to_hand_over.send(p)) {
        respond(group, refused.0.event_fd);
        // SAFETY: the event's descriptor, in this table, closed once.
        unsafe { real::close(refused.0.event_fd) };
    } else if key.is_none() {
        if event.mask & libc::FAN_OPEN_PERM != 0 {
            respond(group, event.fd);
        }
        // SAFETY: the event's descriptor, in this table, closed once.
        unsafe { real::close(event.fd) };
    }
}

/// The file's device and inode.
fn key_of(fd: libc::c_int) -> Option<(u64, u64)> {
    // SAFETY: an all-zero `stat` is a valid value for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is valid for one `stat`.
    (unsafe { real::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// Allows the open the permission event on `event_fd` waits for.
fn respond(group: libc::c_int, event_fd: libc::c_int) {
    let response = libc::fanotify_response { fd: event_fd, response: libc::FAN_ALLOW };
    // SAFETY: writing one live response to the group.
    unsafe {
        real::write(group, (&response as *const libc::fanotify_response).cast(), std::mem::size_of_val(&response))
    };
}

/// Whether another process's open of the file `key` (its event's
/// descriptor `event_fd`) needs a hand-over. One that does not is noted
/// for an open here that is starting to cache the file (it hands the file
/// over when it sees the note), and the file's mark goes: it was left by
/// a descriptor closed behind this library's back, or is that starting
/// open's, which the note covers.
fn cached_here(key: (u64, u64), event_fd: libc::c_int) -> bool {
    // Noted before the table is looked at: an open here that inserts the
    // file after the look finds the note when it checks afterwards.
    if let Some(state) = state::built() {
        state.mark_contended(key);
    }
    if table::any_of(key).is_some() {
        return true;
    }
    unwatch(event_fd);
    false
}

/// Another process opens the file `key`, cached here: it goes to the
/// kernel. Its mark goes with its last cached descriptor (`handover.rs`).
fn let_go_of(key: (u64, u64), hand_over: HandOver) {
    if let Err(e) = hand_over(key) {
        state::complain(&format!("another process opened a cached file whose data stays cached: {e}"));
    }
}
