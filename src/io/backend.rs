//! [`Io`], a backend: it opens backing stores, names and renames paths,
//! and gives each thread its queue of asynchronous writes; and the cache's
//! I/O threads, which make their descriptors before their spawner goes on.
//!
//! Each backend (`uring`, `threads`, `sim`) implements `Io`; the default
//! methods here are the descriptor backends' (`fd`) and the batch queue.

use std::io;
use std::path::Path;
use std::sync::Arc;

use crate::io::fd;
use crate::io::queue;
use crate::io::store::{BackingStore, IoKind, OpenHow, Symlink};

/// A backend: opens backing stores.
pub trait Io: Send + Sync {
    fn kind(&self) -> IoKind;
    fn open(&self, path: &Path, how: &OpenHow) -> io::Result<Arc<dyn BackingStore>>;
    /// The identity ([`BackingInfo::store_id`](crate::io::store::BackingInfo::store_id)) of the regular file or
    /// block device `path` names now, without opening it (`stat(2)`, or
    /// `lstat(2)` with [`Symlink::NoFollow`]); `None` when it names
    /// something else (a directory, a symlink not followed).
    fn store_id_at(&self, path: &Path, symlink: Symlink) -> io::Result<Option<(u64, u64)>> {
        fd::store_id_at(path, symlink)
    }
    /// Removes the name `path` (`unlink(2)`).
    fn remove_name(&self, path: &Path) -> io::Result<()> {
        crate::base::sys::unlink(&fd::path_cstring(path)?)
    }
    /// Renames `from` to `to`, replacing `to` (`rename(2)`).
    fn rename_name(&self, from: &Path, to: &Path) -> io::Result<()> {
        crate::base::sys::rename(&fd::path_cstring(from)?, &fd::path_cstring(to)?)
    }
    /// A queue of asynchronous writes for the calling thread (which alone
    /// may use it), for stores this backend opened. The default runs them in
    /// batches ([`queue::BatchQueue`]).
    fn write_queue(&self) -> Box<dyn queue::WriteQueue> {
        Box::<queue::BatchQueue>::default()
    }
    /// Makes the calling thread's I/O resources now (its io_uring, whose
    /// descriptor would otherwise be made at its first I/O): see
    /// [`spawn_io_thread`]. The default has none.
    fn prepare_thread(&self) {}
}

/// A cache thread's promise to say when its descriptors exist.
pub struct Ready(std::sync::mpsc::SyncSender<()>);

impl Ready {
    /// The thread made every descriptor it keeps (its rings): its spawner
    /// may go on.
    pub fn done(self) {
        let _ = self.0.send(());
    }
}

/// Spawns a cache thread named `name` running `body`, and returns once
/// the thread said [`Ready::done`] (or ended). Why: a descriptor is made
/// at the lowest free number, and a thread of the cache that made one
/// while the program's own thread runs could take a number the program
/// has just closed to `dup2` onto (a shell's `exec >f`, a redirection
/// before `exec`), and lose it, or its file, to the program. So every
/// thread makes its descriptors before its spawner, the program's thread,
/// goes on; and moves them above the program's numbers
/// ([`crate::base::sys::above_program_descriptors`]).
pub fn spawn_io_thread(
    name: String,
    body: impl FnOnce(Ready) + Send + 'static,
) -> io::Result<std::thread::JoinHandle<()>> {
    let (ready, made) = std::sync::mpsc::sync_channel(1);
    let handle = std::thread::Builder::new().name(name).spawn(move || body(Ready(ready)))?;
    // An error means the thread ended without saying: nothing to wait for.
    let _ = made.recv();
    Ok(handle)
}

/// [`spawn_io_thread`] for a thread whose only descriptors are `io`'s for
/// the thread ([`Io::prepare_thread`]), made before `body` runs.
pub fn spawn_io_worker(
    name: String,
    io: &Arc<dyn Io>,
    body: impl FnOnce() + Send + 'static,
) -> io::Result<std::thread::JoinHandle<()>> {
    let io = io.clone();
    spawn_io_thread(name, move |ready| {
        io.prepare_thread();
        drop(io);
        ready.done();
        body();
    })
}

/// CPU time (user + system) the calling thread has used, in microseconds
/// (`getrusage(RUSAGE_THREAD)`); `None` if the kernel refuses.
pub fn thread_cpu_us() -> Option<u64> {
    // SAFETY: `getrusage` only writes the `rusage` it is given, which is a
    // valid, writable, zero-initialised value on this stack.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_THREAD, &mut usage) != 0 {
            return None;
        }
        usage
    };
    let us = |t: libc::timeval| (t.tv_sec as u64).saturating_mul(1_000_000).saturating_add(t.tv_usec as u64);
    Some(us(usage.ru_utime).saturating_add(us(usage.ru_stime)))
}
