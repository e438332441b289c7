//! Where a run happens: a fresh directory it creates (and removes however
//! the run ends) or a raw block device, checked for room before anything
//! is measured; and the real data laid out there before the groups that
//! read it.

use std::fs;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use super::interrupt::INTERRUPTED;
use crate::cli::Plan;
use crate::progress::say;
use crate::sys::{self, fmt_size, IoBuffer, ALIGN};
use crate::workloads::Place;

/// The fresh directory a run works in, locked while the run lives (what a
/// run killed outright leaves, the next one removes: [`super::leftovers`]).
/// Dropping it removes it, so every other way out of the run (an error, a
/// signal, a panic while unwinding) leaves nothing behind.
pub struct ScratchDir {
    path: PathBuf,
    _lock: Option<fs::File>,
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_dir_all(&self.path) {
            if e.kind() != io::ErrorKind::NotFound {
                say(&format!("note: could not remove {}: {e}", self.path.display()));
            }
        }
    }
}

/// Where the run happens, and what to remove afterwards.
pub struct Site {
    pub place: Place,
    /// The fresh directory we created (removed when dropped).
    pub created_dir: Option<ScratchDir>,
    pub fs: String,
    pub device: String,
}

/// Where a run makes its fresh directory: `--dir`, or the first of
/// /var/tmp, the current directory and /tmp on a disk where it can.
pub fn parents(plan: &Plan) -> Vec<PathBuf> {
    let mut candidates: Vec<PathBuf> = plan.args.dir.iter().cloned().collect();
    candidates.push(PathBuf::from("/var/tmp"));
    candidates.extend(std::env::current_dir().ok());
    candidates.push(PathBuf::from("/tmp"));
    candidates
}

fn pick_default_parent(plan: &Plan) -> Result<PathBuf, String> {
    for c in parents(plan) {
        if c.is_dir() && !sys::is_memory_fs(&c) {
            let probe = c.join(format!(".wbcache-bench-probe-{}", std::process::id()));
            if fs::create_dir(&probe).is_ok() {
                let _ = fs::remove_dir(&probe);
                return Ok(c);
            }
        }
    }
    Err("no writable directory on a disk file system (tried /var/tmp, the current directory, /tmp); pass --dir".into())
}

/// The place of the run: the device of `--device`, checked and its
/// whole size known (`--size` shrunk to it), or a fresh directory under
/// `--dir` (or a default one) with room for the run.
pub fn prepare_site(plan: &mut Plan, notes: &mut Vec<String>) -> Result<Site, String> {
    if let Some(dev) = plan.args.device.clone() {
        return device_site(plan, &dev, notes);
    }
    let parent = match &plan.args.dir {
        // Checked when the plan was made: a directory, on a disk.
        Some(d) => d.clone(),
        None => pick_default_parent(plan)?,
    };
    let dir = parent.join(format!("wbcache-bench-{}", std::process::id()));
    fs::create_dir(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let dir = fs::canonicalize(&dir).unwrap_or(dir);
    let scratch = ScratchDir { _lock: super::leftovers::lock(&dir), path: dir.clone() };
    let (fs_type, source) = sys::mount_of(&dir).map(|(t, s, _)| (t, s)).unwrap_or(("unknown".into(), "unknown".into()));
    let free = sys::free_bytes(&dir).unwrap_or(u64::MAX);
    let need = match &plan.custom {
        Some(job) => job.files_bytes() + (256 << 20),
        None => 2 * plan.params.size + (256 << 20),
    };
    if free < need {
        return Err(format!(
            "{} has {} free; this run needs about {} (lower --size, --memory or --numjobs)",
            dir.display(),
            fmt_size(free),
            fmt_size(need)
        ));
    }
    Ok(Site {
        place: Place { dir: Some(dir.clone()), device: None, device_size: 0, free_bytes: free },
        created_dir: Some(scratch),
        fs: fs_type,
        device: source,
    })
}

/// `--device`: a block device nobody uses, large enough for the run.
fn device_site(plan: &mut Plan, dev: &Path, notes: &mut Vec<String>) -> Result<Site, String> {
    if !sys::is_block_device(dev) {
        return Err(format!("{} is not a block device", dev.display()));
    }
    if let Some(why) = sys::device_in_use(dev) {
        return Err(format!("refusing to overwrite {}: {why}", dev.display()));
    }
    let dev_size = sys::block_device_size(dev).map_err(|e| format!("{}: {e}", dev.display()))?;
    let mib = 1u64 << 20;
    if dev_size < 8 * mib {
        return Err(format!("{} is too small ({} bytes)", dev.display(), dev_size));
    }
    if let Some(job) = &plan.custom {
        let need = job.files_bytes();
        if need > dev_size {
            return Err(format!(
                "{} holds {}; --numjobs × --size need {}",
                dev.display(),
                fmt_size(dev_size),
                fmt_size(need)
            ));
        }
    }
    if plan.params.size > dev_size {
        plan.params.size = (dev_size / mib) * mib;
        notes.push(format!("--size reduced to the device size, {}", fmt_size(plan.params.size)));
    }
    Ok(Site {
        place: Place { dir: None, device: Some(dev.to_path_buf()), device_size: dev_size, free_bytes: dev_size },
        created_dir: None,
        fs: "raw block device".into(),
        device: dev.display().to_string(),
    })
}

/// Writes `len` bytes of real data at the start of the data file or device
/// (O_DIRECT where possible, so the parent does not fill the page cache).
pub fn lay_out(place: &Place, len: u64) -> io::Result<()> {
    lay_out_file(&place.data_path(), len, place.device.is_some())
}

/// Writes `len` bytes of real data at the start of `path`: with O_DIRECT
/// where the file system takes it (so the parent does not fill the page
/// cache), for the whole 4 KiB blocks; a tail O_DIRECT cannot write (the
/// files of a `--bs=3000` job end mid-block) through the page cache.
pub fn lay_out_file(path: &Path, len: u64, is_device: bool) -> io::Result<()> {
    let open = |direct: bool, truncate: bool| {
        let mut o = fs::OpenOptions::new();
        o.write(true);
        if truncate {
            o.create(true).truncate(true);
        }
        if direct {
            o.custom_flags(libc::O_DIRECT);
        }
        o.open(path)
    };
    let (file, direct) = match open(true, !is_device) {
        Ok(f) => (f, true),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (open(false, !is_device)?, false),
        Err(e) => return Err(e),
    };
    let buf = IoBuffer::filled(1 << 20, 0x5eed);
    let whole_blocks = if direct { len / ALIGN as u64 * ALIGN as u64 } else { len };
    write_range(&file, 0, whole_blocks, &buf)?;
    if whole_blocks < len {
        let tail = open(false, false)?;
        write_range(&tail, whole_blocks, len, &buf)?;
        tail.sync_all()?;
    }
    file.sync_all()
}

/// Writes `[from, to)` of `file`, byte `x` being `buf[x % buf.len()]`
/// (the same data however the file was split between calls), up to the
/// end of the buffer at a time.
fn write_range(file: &fs::File, from: u64, to: u64, buf: &IoBuffer) -> io::Result<()> {
    let mut off = from;
    while off < to {
        if INTERRUPTED.load(Ordering::SeqCst) {
            return Err(io::Error::new(io::ErrorKind::Interrupted, "interrupted"));
        }
        let start = (off % buf.len() as u64) as usize;
        let n = ((buf.len() - start) as u64).min(to - off) as usize;
        std::os::unix::fs::FileExt::write_all_at(file, &buf[start..start + n], off)?;
        off += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Any length is laid out: whole blocks (with O_DIRECT where the file
    /// system takes it) and a tail that ends mid-block, every byte data.
    #[test]
    fn files_of_any_length_are_laid_out() {
        let dir = [PathBuf::from("/var/tmp"), std::env::temp_dir()]
            .into_iter()
            .find(|d| d.is_dir() && !sys::is_memory_fs(d))
            .expect("a directory on a disk");
        let path = dir.join(format!("wbcache-layout-test-{}", std::process::id()));
        let data = IoBuffer::filled(1 << 20, 0x5eed);
        for len in [33_552_000u64, 3000, 4096, (1 << 20) + 512, 5 << 20] {
            lay_out_file(&path, len, false).unwrap_or_else(|e| panic!("{len} bytes: {e}"));
            let written = fs::read(&path).unwrap();
            assert_eq!(written.len() as u64, len);
            for (i, chunk) in written.chunks(1 << 20).enumerate() {
                assert!(chunk == &data[..chunk.len()], "{len} bytes: MiB {i} is the data");
            }
        }
        fs::remove_file(&path).unwrap();
    }
}
