//! The guardian process: started per cache, it waits for its owner's
//! death and then replays the crash table into the files.
//!
//! Starting it: a double fork by raw `clone` (no `pthread_atfork`
//! handlers run, so a library that hands files over at `fork` is not
//! triggered), the middle process starting a new session and exiting at
//! once, so the guardian is never a child the program can reap and is not
//! in the program's process group (a shell's Ctrl-C, `timeout` and a
//! killed group miss it). It ignores SIGINT, SIGTERM, SIGHUP and SIGPIPE,
//! keeps no descriptor of the program's but standard error (for its
//! reports; standard input and output become `/dev/null`), and `exec`s
//! this very program (`/proc/self/exe`, with this library preloaded when
//! it is a shared object): a constructor in the library sees
//! [`GUARDIAN_ENV`] and runs [`serve`] before any program code, so the
//! guardian never runs the program's code and shares none of its memory.
//!
//! Protocol on a `SOCK_SEQPACKET` pair: `FILE slot` with the file's
//! descriptor (`SCM_RIGHTS`), `RELEASE slot`, `KEEP` with a descriptor the
//! guardian holds until it exits (the owner's lock registries: their
//! open-file-description locks outlive the owner until the dead owner's
//! data is written), `CLOSED`. The guardian
//! learns of the death by a `pidfd` (a socket's end-of-file never comes
//! while a fork child of the owner still holds the socket). It writes
//! nothing until the owner has exited: a process exits after its threads,
//! so no thread-pool write is in flight; before its first write to a file
//! it waits for the file system's direct I/O in flight there (an
//! `fallocate` over the range it writes: `inode_dio_wait`), so an
//! io_uring write still landing cannot overwrite the guardian's data.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

use super::arena::{Arena, TableView};
use super::board::{BoardView, CacheState, Writable};
use super::replay::{bytes_to_replay, replay, ReplaySink};

/// The environment variable that makes a process the guardian:
/// `owner_pid,socket,table,arena,board` (descriptor numbers; board -1
/// when the cache has none).
pub const GUARDIAN_ENV: &str = "WBCACHE_GUARDIAN";

const MSG_FILE: u32 = 1;
const MSG_RELEASE: u32 = 2;
const MSG_CLOSED: u32 = 3;
const MSG_KEEP: u32 = 4;

/// The owner's end of the link to its guardian.
pub struct Link {
    sock: OwnedFd,
}

fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    let rc = unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let (a, b) =
        (crate::base::sys::above_program_descriptors(fds[0]), crate::base::sys::above_program_descriptors(fds[1]));
    // SAFETY: two fresh descriptors we own.
    Ok(unsafe { (OwnedFd::from_raw_fd(a), OwnedFd::from_raw_fd(b)) })
}

/// The file this library was loaded from, when it is a shared object
/// (the guardian must load it too), and where it is mapped; `None` when
/// it is part of the program.
fn library_path() -> Option<(CString, usize)> {
    // SAFETY: an all-zero `Dl_info` (null pointers) is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: the address of a function of this library; `info` is ours.
    let found = unsafe { libc::dladdr(guardian_entry as *const libc::c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr returned a NUL-terminated name that lives as long as
    // the object is loaded.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    let bytes = name.to_bytes();
    let is_shared_object = bytes.ends_with(b".so") || bytes.windows(4).any(|w| w == b".so.");
    is_shared_object.then(|| (name.to_owned(), info.dli_fbase as usize))
}

/// A descriptor of the very file this library was loaded from, for the
/// guardian to load (as `/proc/self/fd/N`): an upgrade that installs
/// another library at the same path (a rename over it) while the program
/// runs leaves this process's guardian the library it was loaded with,
/// whose layouts and protocol are its own. `None` when the library is
/// part of the program, or the file at its path is already another (the
/// guardian then loads it by its path).
pub fn open_loaded_library() -> Option<OwnedFd> {
    let (path, mapped_at) = library_path()?;
    let fd = crate::base::sys::open(&path, libc::O_RDONLY | libc::O_CLOEXEC, 0).ok()?;
    // SAFETY: the descriptor just opened, ours.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let opened = crate::base::sys::fstat_identity(fd.as_raw_fd()).ok()?;
    (crate::base::sys::mapped_file_identity(mapped_at) == Some(opened)).then_some(fd)
}

/// The guardian's environment: the program's (its libraries may need
/// `LD_LIBRARY_PATH`), less wbcache's own settings, plus [`GUARDIAN_ENV`]
/// and the preload of this library.
fn guardian_environment(spec: &str, library: Option<RawFd>) -> Vec<CString> {
    let mut env: Vec<CString> = std::env::vars_os()
        .filter(|(k, _)| {
            let k = k.as_bytes();
            !k.starts_with(b"WBCACHE_") && k != b"LD_PRELOAD"
        })
        .filter_map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            CString::new(kv).ok()
        })
        .collect();
    env.push(CString::new(format!("{GUARDIAN_ENV}={spec}")).expect("no NUL"));
    let preload = match library {
        Some(fd) => Some(format!("/proc/self/fd/{fd}").into_bytes()),
        None => library_path().map(|(path, _)| path.into_bytes()),
    };
    if let Some(lib) = preload {
        let mut kv = b"LD_PRELOAD=".to_vec();
        kv.extend_from_slice(&lib);
        env.push(CString::new(kv).expect("no NUL"));
    }
    env
}

impl Link {
    /// Starts the guardian of `arena`, handing it the cache's board, and
    /// loading this library from `library` (see [`open_loaded_library`]).
    pub fn spawn(arena: &Arena, board: Option<RawFd>, library: Option<RawFd>) -> io::Result<Link> {
        // The constructor must be in the program wherever this function
        // is (a static link takes only the objects it needs): the
        // guardian it starts would otherwise run the program's `main`.
        std::hint::black_box(&GUARDIAN_ENTRY);
        let (ours, theirs) = socket_pair()?;
        let board = board.unwrap_or(-1);
        let spec =
            format!("{},{},{},{},{board}", std::process::id(), theirs.as_raw_fd(), arena.table_fd(), arena.arena_fd());
        let env = guardian_environment(&spec, library);
        let mut envp: Vec<*const libc::c_char> = env.iter().map(|e| e.as_ptr()).collect();
        envp.push(std::ptr::null());
        let argv: [*const libc::c_char; 2] = [c"wbcache-guardian".as_ptr(), std::ptr::null()];
        let devnull = crate::base::sys::open(c"/dev/null", libc::O_RDWR | libc::O_CLOEXEC, 0)?;
        // SAFETY: the descriptor just opened, ours.
        let devnull = unsafe { OwnedFd::from_raw_fd(devnull) };
        let keep = [theirs.as_raw_fd(), arena.table_fd(), arena.arena_fd(), board, library.unwrap_or(-1)];
        let image = ExecImage { argv: &argv, envp: &envp, devnull: devnull.as_raw_fd(), keep };
        // SAFETY: a raw fork: the child runs only `middle_process`, which
        // makes system calls and nothing else (no allocation, no lock).
        let pid = unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_ulong, 0, 0, 0, 0) };
        match pid {
            -1 => return Err(io::Error::last_os_error()),
            0 => middle_process(&image),
            pid => reap(pid as libc::pid_t),
        }
        drop(theirs);
        Ok(Link { sock: ours })
    }

    fn send(&self, kind: u32, file: u32, fd: Option<RawFd>) -> io::Result<()> {
        let msg = [kind, file];
        let mut iov = libc::iovec { iov_base: msg.as_ptr() as *mut libc::c_void, iov_len: std::mem::size_of_val(&msg) };
        // Room for one descriptor's control message.
        let mut control = [0u64; 4];
        // SAFETY: an all-zero msghdr is a valid empty one.
        let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
        hdr.msg_iov = &mut iov;
        hdr.msg_iovlen = 1;
        if let Some(fd) = fd {
            // SAFETY: CMSG_* compute sizes and positions within `control`,
            // which is large enough for one descriptor.
            unsafe {
                hdr.msg_control = control.as_mut_ptr().cast();
                hdr.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
                let cmsg = libc::CMSG_FIRSTHDR(&hdr);
                (*cmsg).cmsg_level = libc::SOL_SOCKET;
                (*cmsg).cmsg_type = libc::SCM_RIGHTS;
                (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
                libc::CMSG_DATA(cmsg).cast::<RawFd>().write_unaligned(fd);
            }
        }
        loop {
            // SAFETY: `hdr` points at live buffers for the call.
            let n = unsafe { libc::sendmsg(self.sock.as_raw_fd(), &hdr, libc::MSG_NOSIGNAL) };
            if n >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }

    /// Hands file slot `file`'s descriptor to the guardian.
    pub fn send_file(&self, file: u32, fd: RawFd) -> io::Result<()> {
        self.send(MSG_FILE, file, Some(fd))
    }

    /// The guardian closes its descriptor of file slot `file`.
    pub fn release_file(&self, file: u32) {
        let _ = self.send(MSG_RELEASE, file, None);
    }

    /// The guardian keeps a duplicate of `fd` open until it exits.
    pub fn keep(&self, fd: RawFd) -> io::Result<()> {
        self.send(MSG_KEEP, 0, Some(fd))
    }

    /// The cache closed: the guardian exits.
    pub fn closed(&self) {
        let _ = self.send(MSG_CLOSED, 0, None);
    }
}

/// What the forked processes need, prepared before the fork.
struct ExecImage<'a> {
    argv: &'a [*const libc::c_char; 2],
    envp: &'a [*const libc::c_char],
    devnull: RawFd,
    /// Descriptors the guardian keeps across its `exec` (-1: none).
    keep: [RawFd; 5],
}

/// The first child: a new session, then the guardian's fork, then exit.
/// System calls only: this is a fork of a threaded process.
fn middle_process(image: &ExecImage<'_>) -> ! {
    // SAFETY: plain system calls on values prepared before the fork.
    unsafe {
        libc::setsid();
        let pid = libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_ulong, 0, 0, 0, 0);
        if pid == 0 {
            guardian_exec(image);
        }
        libc::syscall(libc::SYS_exit_group, 0);
    }
    unreachable!("exit_group returned")
}

/// The guardian before its `exec`: standard input and output on
/// `/dev/null`, every other descriptor closed at exec but those it
/// serves, the stop signals ignored. System calls only.
///
/// # Safety
/// Runs in a fork child of a threaded process: calls nothing but system
/// calls.
unsafe fn guardian_exec(image: &ExecImage<'_>) -> ! {
    // SAFETY: system calls only, as this function's contract asks: the
    // descriptors, argument and environment arrays were prepared before
    // the fork and outlive the calls (execve replaces the image, or
    // exit_group ends the process); `empty` is a valid, empty signal set
    // (all zeros) of the 8 bytes the kernel's sigset has.
    unsafe {
        libc::syscall(libc::SYS_dup3, image.devnull, 0, 0);
        libc::syscall(libc::SYS_dup3, image.devnull, 1, 0);
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC);
        for fd in image.keep.into_iter().filter(|fd| *fd >= 0) {
            libc::syscall(libc::SYS_fcntl, fd, libc::F_SETFD, 0);
        }
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGPIPE, libc::SIGQUIT, libc::SIGTSTP] {
            libc::signal(sig, libc::SIG_IGN);
        }
        let empty: libc::sigset_t = std::mem::zeroed();
        libc::syscall(libc::SYS_rt_sigprocmask, libc::SIG_SETMASK, &empty, std::ptr::null_mut::<libc::sigset_t>(), 8);
        libc::syscall(libc::SYS_execve, c"/proc/self/exe".as_ptr(), image.argv.as_ptr(), image.envp.as_ptr());
        libc::syscall(libc::SYS_exit_group, 127);
    }
    unreachable!("exit_group returned")
}

/// Waits for the middle process (it exits at once). Another waiter of the
/// program may reap it first (ECHILD): fine.
fn reap(pid: libc::pid_t) {
    loop {
        // SAFETY: waits for our own child; no status wanted.
        let rc = unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        if rc >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

/// Runs first in every process that loads this library: the guardian's
/// entry point when [`GUARDIAN_ENV`] is set, nothing otherwise.
#[used]
#[link_section = ".init_array"]
static GUARDIAN_ENTRY: extern "C" fn() = guardian_entry;

extern "C" fn guardian_entry() {
    let Some(spec) = std::env::var_os(GUARDIAN_ENV) else { return };
    let code = match parse_spec(spec.as_bytes()) {
        Some(spec) => serve(spec),
        None => {
            eprintln!("wbcache guardian: bad {GUARDIAN_ENV} value {spec:?}");
            2
        }
    };
    // SAFETY: ends this process, which exists only to serve.
    unsafe { libc::_exit(code) }
}

struct Spec {
    owner: libc::pid_t,
    sock: RawFd,
    table: RawFd,
    arena: RawFd,
    board: Option<RawFd>,
}

fn parse_spec(spec: &[u8]) -> Option<Spec> {
    let text = std::str::from_utf8(spec).ok()?;
    let n: Vec<i32> = text.split(',').map(|p| p.parse().ok()).collect::<Option<_>>()?;
    match n[..] {
        [owner, sock, table, arena, board] => {
            Some(Spec { owner, sock, table, arena, board: (board >= 0).then_some(board) })
        }
        _ => None,
    }
}

/// The guardian's life: collect descriptors until the owner closes its
/// cache (exit 0) or dies (replay, exit 0, or 1 after a failure).
fn serve(spec: Spec) -> i32 {
    // SAFETY: a NUL-terminated name of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"wbc-guardian".as_ptr()) };
    // SAFETY: the descriptors the owner passed us, ours alone now.
    let (sock, table_fd, arena_fd) = unsafe {
        (OwnedFd::from_raw_fd(spec.sock), OwnedFd::from_raw_fd(spec.table), OwnedFd::from_raw_fd(spec.arena))
    };
    // SAFETY: as above: passed to us alone.
    let board_fd = spec.board.map(|fd| unsafe { OwnedFd::from_raw_fd(fd) });
    // The board says what this process does, for `wbcache stat`; a
    // guardian without one only cannot say it.
    let board = board_fd.as_ref().and_then(|fd| BoardView::open(fd, Writable::Yes).ok());
    if let Some(board) = &board {
        board.set_guardian_pid(std::process::id());
    }
    // One descriptor per managed file: the owner's limit may be lower
    // than the files it opens.
    raise_descriptor_limit();
    let watch = OwnerWatch::open(spec.owner);
    let mut files: HashMap<u32, OwnedFd> = HashMap::new();
    // Gone already (ESRCH from pidfd_open): replay at once.
    if !matches!(watch, OwnerWatch::Gone) && wait_for_death(&watch, &sock, &mut files) == Ending::Closed {
        return 0;
    }
    match replay_files(&table_fd, &arena_fd, files, board.as_ref()) {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("wbcache guardian: cannot read the dead owner's cache: {e}");
            1
        }
    }
}

#[derive(PartialEq, Eq)]
enum Ending {
    Closed,
    OwnerDied,
}

/// How the guardian learns of its owner's death.
enum OwnerWatch {
    /// A pidfd, readable once the owner has exited.
    Pidfd(OwnedFd),
    /// No pidfd to be had (`ENOSYS` before Linux 5.3, a seccomp filter):
    /// `kill(owner, 0)` every 50 ms, `ESRCH` once it is gone. A guardian
    /// never takes a failure to watch for a death.
    Polled(libc::pid_t),
    /// The owner was gone before the guardian looked.
    Gone,
}

impl OwnerWatch {
    fn open(owner: libc::pid_t) -> OwnerWatch {
        // SAFETY: pidfd_open reads no memory (a pid and a zero flag word);
        // the descriptor it returns is ours.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, owner, 0) } as RawFd;
        if fd >= 0 {
            // SAFETY: a fresh descriptor, ours.
            return OwnerWatch::Pidfd(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::ESRCH) => OwnerWatch::Gone,
            _ => OwnerWatch::Polled(owner),
        }
    }

    /// The descriptor to poll, and the poll timeout (ms).
    fn poll_args(&self) -> (RawFd, libc::c_int) {
        match self {
            OwnerWatch::Pidfd(fd) => (fd.as_raw_fd(), -1),
            OwnerWatch::Polled(_) | OwnerWatch::Gone => (-1, 50),
        }
    }

    /// Whether the owner is gone, after a poll that returned `revents`
    /// for the pidfd.
    fn gone(&self, revents: libc::c_short) -> bool {
        match self {
            OwnerWatch::Pidfd(_) => revents != 0,
            OwnerWatch::Polled(pid) => {
                // SAFETY: signal 0 only checks that the process exists.
                let rc = unsafe { libc::kill(*pid, 0) };
                rc != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
            }
            OwnerWatch::Gone => true,
        }
    }
}

/// `RLIMIT_NOFILE`'s soft limit raised to the hard one.
fn raise_descriptor_limit() {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit fills one live `rlimit`; setrlimit reads it.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// Serves the owner's messages until it closes the cache or dies.
fn wait_for_death(watch: &OwnerWatch, sock: &OwnedFd, files: &mut HashMap<u32, OwnedFd>) -> Ending {
    let mut sock_open = true;
    let (watch_fd, timeout_ms) = watch.poll_args();
    loop {
        let mut fds = [
            libc::pollfd { fd: watch_fd, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: if sock_open { sock.as_raw_fd() } else { -1 }, events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: two pollfds we own.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout_ms) };
        if n < 0 {
            continue; // EINTR
        }
        if fds[1].revents != 0 {
            match receive(sock, files) {
                Received::Closed => return Ending::Closed,
                Received::EndOfFile => sock_open = false,
                Received::Message => {}
            }
            // Messages first: a file sent just before the death counts.
            continue;
        }
        if watch.gone(fds[0].revents) {
            // Whatever the owner sent before it died is still queued.
            while sock_open && matches!(receive_nonblocking(sock, files), Some(Received::Message)) {}
            return Ending::OwnerDied;
        }
    }
}

enum Received {
    Message,
    Closed,
    EndOfFile,
}

fn receive_nonblocking(sock: &OwnedFd, files: &mut HashMap<u32, OwnedFd>) -> Option<Received> {
    let mut pfd = libc::pollfd { fd: sock.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd we own.
    let ready = unsafe { libc::poll(&mut pfd, 1, 0) } > 0;
    ready.then(|| receive(sock, files))
}

/// One message from the owner.
fn receive(sock: &OwnedFd, files: &mut HashMap<u32, OwnedFd>) -> Received {
    let mut msg = [0u32; 2];
    let mut iov = libc::iovec { iov_base: msg.as_mut_ptr().cast(), iov_len: std::mem::size_of_val(&msg) };
    let mut control = [0u64; 4];
    // SAFETY: an all-zero msghdr is a valid empty one.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    hdr.msg_control = control.as_mut_ptr().cast();
    hdr.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: `hdr` points at live buffers.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut hdr, libc::MSG_CMSG_CLOEXEC) };
    if n == 0 {
        return Received::EndOfFile;
    }
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::EINTR) { Received::Message } else { Received::EndOfFile };
    }
    // SAFETY: CMSG_* walk the control data the kernel filled in.
    let fd = unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&hdr);
        (!cmsg.is_null() && (*cmsg).cmsg_type == libc::SCM_RIGHTS)
            .then(|| OwnedFd::from_raw_fd(libc::CMSG_DATA(cmsg).cast::<RawFd>().read_unaligned()))
    };
    match (msg[0], fd) {
        (MSG_FILE, Some(fd)) => {
            files.insert(msg[1], fd);
        }
        (MSG_RELEASE, _) => {
            files.remove(&msg[1]);
        }
        (MSG_KEEP, Some(fd)) => {
            // Held (never used) until this process exits.
            std::mem::forget(fd);
        }
        (MSG_CLOSED, _) => return Received::Closed,
        _ => {}
    }
    Received::Message
}

/// Maps the table and arena and replays them into `files`, saying how far
/// it got on `board`; `Ok(false)` after a failure (reported on standard
/// error, naming file and offset).
fn replay_files(
    table_fd: &OwnedFd,
    arena_fd: &OwnedFd,
    files: HashMap<u32, OwnedFd>,
    board: Option<&BoardView>,
) -> io::Result<bool> {
    let table_bytes = crate::base::sys::fstat_size(table_fd.as_raw_fd())?;
    let table_base = crate::base::sys::map_shared(table_fd.as_raw_fd(), table_bytes as usize, libc::PROT_READ)?;
    // SAFETY: the table's whole memfd, mapped for the rest of this process.
    let table = unsafe { TableView::new(table_base) };
    if !table.is_valid(table_bytes) {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "the crash table's layout is not this version's"));
    }
    let arena_bytes = table.header().arena_bytes as usize;
    let arena_base = crate::base::sys::map_shared(arena_fd.as_raw_fd(), arena_bytes, libc::PROT_READ)?;
    // SAFETY: the arena's whole memfd, mapped read-only for the rest of
    // this process; nobody writes it any more (its owner is dead).
    let arena = unsafe { std::slice::from_raw_parts(arena_base.as_ptr(), arena_bytes) };
    let total_bytes = bytes_to_replay(&table, |file| files.contains_key(&file));
    let progress = board.map(|board| Progress { board, total_bytes, written_bytes: 0 });
    if let Some(p) = &progress {
        p.board.set_guardian_progress(CacheState::GuardianWriting, 0, total_bytes);
    }
    let mut sink = FileSink { files, writable: HashMap::new(), drained: Default::default(), progress };
    let report = replay(&table, arena, &mut sink);
    if let Some(p) = &sink.progress {
        p.board.set_guardian_progress(CacheState::GuardianDone, p.written_bytes, p.total_bytes);
    }
    for failure in &report.failures {
        eprintln!("wbcache guardian: {failure}");
    }
    Ok(report.failures.is_empty())
}

/// The guardian's sink: the files' descriptors, reopened without
/// O_DIRECT (through `/proc/self/fd`, which reaches unlinked files too), so
/// the data lands in the kernel's page cache.
struct FileSink<'a> {
    files: HashMap<u32, OwnedFd>,
    writable: HashMap<u32, (OwnedFd, bool)>,
    /// Files whose direct I/O in flight was waited for.
    drained: std::collections::HashSet<u32>,
    progress: Option<Progress<'a>>,
}

/// The replay's progress, as the board shows it.
struct Progress<'a> {
    board: &'a BoardView,
    total_bytes: u64,
    written_bytes: u64,
}

impl FileSink<'_> {
    /// File slot `file`'s writable descriptor, and whether it is a block
    /// device.
    fn writable(&mut self, file: u32) -> io::Result<(RawFd, bool)> {
        if let Some((fd, block)) = self.writable.get(&file) {
            return Ok((fd.as_raw_fd(), *block));
        }
        let held = self.files.get(&file).ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))?;
        let path = CString::new(format!("/proc/self/fd/{}", held.as_raw_fd())).expect("no NUL");
        let fd = crate::base::sys::open(&path, libc::O_WRONLY | libc::O_CLOEXEC, 0)?;
        // SAFETY: a fresh descriptor, ours.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let block = crate::base::sys::is_block_device(fd.as_raw_fd())?;
        let raw = fd.as_raw_fd();
        self.writable.insert(file, (fd, block));
        Ok((raw, block))
    }
}

impl ReplaySink for FileSink<'_> {
    fn has_file(&self, file: u32) -> bool {
        self.files.contains_key(&file)
    }

    /// The file's name now.
    fn name(&self, file: u32) -> String {
        let Some(fd) = self.files.get(&file) else { return format!("file slot {file}") };
        crate::base::sys::read_link(&format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .unwrap_or_else(|| format!("file slot {file}"))
    }

    fn len(&mut self, file: u32) -> io::Result<u64> {
        let (fd, _) = self.writable(file)?;
        crate::base::sys::fstat_size(fd)
    }

    fn set_len(&mut self, file: u32, len: u64) -> io::Result<()> {
        let (fd, block) = self.writable(file)?;
        if block {
            return Ok(());
        }
        crate::base::sys::ftruncate(fd, len as i64)
    }

    fn write(&mut self, file: u32, offset: u64, data: &[u8]) -> io::Result<()> {
        let (fd, block) = self.writable(file)?;
        if !block && self.drained.insert(file) {
            // Waits for the file system's direct I/O in flight on the file
            // (ext4 and XFS wait in fallocate): an io_uring write of the
            // dead owner still landing must not overwrite this data. The
            // range is about to be written anyway; a file system without
            // fallocate has nothing to wait for here.
            let _ = crate::base::sys::fallocate(fd, libc::FALLOC_FL_KEEP_SIZE, offset as i64, data.len() as i64);
        }
        let mut done = 0;
        while done < data.len() {
            match crate::base::sys::pwrite(fd, &data[done..], (offset + done as u64) as i64) {
                Ok(0) => return Err(io::Error::from_raw_os_error(libc::EIO)),
                Ok(n) => done += n,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => return Err(e),
            }
        }
        if let Some(p) = &mut self.progress {
            p.written_bytes += data.len() as u64;
            p.board.set_guardian_progress(CacheState::GuardianWriting, p.written_bytes, p.total_bytes);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::arena::{BlockState, BLOCK_BYTES};
    use super::super::board::{Board, BoardView, CacheState, GuardianProgress, Writable};
    use super::*;
    use std::sync::atomic::Ordering;

    /// A descriptor of `fd` of our own.
    fn dup(fd: RawFd) -> OwnedFd {
        crate::base::sys::dup_above_program_descriptors(fd).expect("dup")
    }

    /// The guardian's replay of a dead owner's two dirty blocks into a
    /// file (a `memfd` here), with the board saying how far it got.
    #[test]
    fn a_replay_writes_the_dirty_blocks_and_says_so_on_the_board() {
        let arena = Arena::new(16 << 20).expect("arena");
        let record = arena.table().file(1);
        // The size ends inside the second block: the replay writes (and
        // counts) up to it only.
        let bytes = BLOCK_BYTES as u64 + 100;
        record.size.store(bytes, Ordering::Relaxed);
        record.used.store(1, Ordering::Release);
        let (slot, data) = arena.allocate(4 * BLOCK_BYTES).expect("a slot");
        // SAFETY: the slot's four blocks, ours alone.
        unsafe { std::ptr::write_bytes(data.as_ptr(), b'w', 4 * BLOCK_BYTES) };
        arena.record_owner(slot, (1, 0), 0);
        arena.mark(slot, (0, 2), BlockState::Dirty);
        // The file: a memfd of one block (the replay grows it to the size).
        // SAFETY: a valid name; a descriptor of our own comes back.
        let file = unsafe { libc::memfd_create(c"replayed-file".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(file >= 0, "memfd_create");
        // SAFETY: the descriptor just made, ours alone.
        let file = unsafe { OwnedFd::from_raw_fd(file) };
        crate::base::sys::ftruncate(file.as_raw_fd(), BLOCK_BYTES as i64).expect("its first block");
        let board = Board::create("owner").expect("board");
        let guardian_view = BoardView::open(&dup(board.fd()), Writable::Yes).expect("the guardian's view");
        let files = HashMap::from([(1u32, dup(file.as_raw_fd()))]);
        let (table_fd, arena_fd) = (dup(arena.table_fd()), dup(arena.arena_fd()));
        assert!(replay_files(&table_fd, &arena_fd, files, Some(&guardian_view)).expect("replayed"));
        let reading = BoardView::open(&dup(board.fd()), Writable::No).expect("a reader's view").read();
        assert_eq!(reading.state, CacheState::GuardianDone);
        assert_eq!(
            reading.guardian,
            GuardianProgress { written_bytes: bytes, total_bytes: bytes },
            "written and found"
        );
        assert_eq!(crate::base::sys::fstat_size(file.as_raw_fd()).unwrap(), bytes, "the file's length is its size");
        let back = crate::base::sys::map_shared(file.as_raw_fd(), bytes as usize, libc::PROT_READ).expect("map");
        // SAFETY: the file's mapping just made, `bytes` long, left mapped.
        let back = unsafe { std::slice::from_raw_parts(back.as_ptr(), bytes as usize) };
        assert!(back.iter().all(|b| *b == b'w'));
        arena.free(slot);
    }
}
