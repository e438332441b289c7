//! A loop device over a sparse file in a temporary directory, detached (and
//! the directory removed) on drop: for tests that need a real block device.
//! Creating one needs root and the loop driver; callers decide whether its
//! absence skips or fails the test.

use std::path::PathBuf;
use std::process::Command;

use super::programs::TempDir;

pub struct LoopDevice {
    /// The device node, e.g. `/dev/loop3`.
    pub device: PathBuf,
    /// The directory holding the backing image; tests may put more there.
    pub dir: TempDir,
}

impl LoopDevice {
    /// A device of `size` bytes, with O_DIRECT to its backing file.
    pub fn create(tag: &str, size: u64) -> Result<LoopDevice, String> {
        let dir = TempDir::new(tag);
        let backing = dir.0.join("disk.img");
        let f = std::fs::File::create(&backing).map_err(|e| e.to_string())?;
        f.set_len(size).map_err(|e| e.to_string())?;
        let out = Command::new("losetup")
            .args(["--find", "--show", "--direct-io=on"])
            .arg(&backing)
            .output()
            .map_err(|e| format!("losetup: {e}"))?;
        if !out.status.success() {
            return Err(format!("losetup failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        let device = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim().to_string());
        Ok(LoopDevice { device, dir })
    }
}

impl LoopDevice {
    /// [`LoopDevice::create`], or `None` (with a SKIPPED line) where the
    /// machine has none; with `CI=true` a missing loop device fails instead.
    pub fn create_or_skip(tag: &str, size: u64) -> Option<LoopDevice> {
        match LoopDevice::create(tag, size) {
            Ok(d) => Some(d),
            Err(e) if std::env::var("CI").as_deref() == Ok("true") => panic!("CI=true but no loop device: {e}"),
            Err(e) => {
                eprintln!("SKIPPED: no loop device here ({e})");
                None
            }
        }
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.device).status();
    }
}

/// Makes a block-device node for `rdev` at `at` (a second name for a
/// device, with its own inode number; needs root).
pub fn mknod_block(at: &std::path::Path, rdev: u64) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(at.as_os_str().as_bytes()).unwrap();
    #[allow(clippy::useless_conversion)] // dev_t is not u64 on every target.
    let dev: libc::dev_t = rdev.try_into().unwrap();
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    let rc = unsafe { libc::mknod(c.as_ptr(), libc::S_IFBLK | 0o600, dev) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
