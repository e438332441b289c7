//! What the library leaves in `/dev/shm`: only its lock registries, empty
//! and unlocked once its processes ended; no shared memory and no other
//! file. The test runs alone ([`Scratch::alone`]), so that no other test's
//! process holds locks on the registries while it looks.

use crate::common;

use common::{preloaded, python, Scratch, OPTIONS, TIMEOUT};

/// What the library leaves in `/dev/shm` once its processes ended: only
/// its lock registries (`wbcache-locks-DEV`), empty, and none of their
/// bytes locked; no shared memory, no other file. A preloaded Python
/// caches a file, hands it to the kernel (a child runs), takes a file's
/// users lock, and exits.
#[test]
fn processes_leave_only_empty_unlocked_lock_registries_in_dev_shm() {
    let Some(python) = python() else { return };
    let scratch = Scratch::alone("coherence-shm");
    let managed = scratch.dir("managed");
    let code = "import os, subprocess, sys\n\
                fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)\n\
                os.write(fd, b'x' * 10000)\n\
                subprocess.run(['/bin/true'])\n\
                os.write(fd, b'y')\n";
    let mut cmd = preloaded(&python, &[&managed], OPTIONS);
    cmd.arg("-c").arg(code).arg(managed.join("f"));
    common::run(cmd, TIMEOUT).ok().no_complaints(&[]);
    for entry in std::fs::read_dir("/dev/shm").unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("wbcache") {
            continue;
        }
        let device = name.strip_prefix("wbcache-locks-");
        assert!(
            device.is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_hexdigit())),
            "/dev/shm/{name}: not a lock registry"
        );
        assert_eq!(entry.metadata().unwrap().len(), 0, "/dev/shm/{name} holds data");
    }
    let registry = std::fs::read_dir("/dev/shm")
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("wbcache-locks-")))
        .expect("the registry of the scratch directory's device");
    assert_eq!(locks_on(&registry), 0, "{} keeps locks of ended processes", registry.display());
}

/// How many locks `/proc/locks` lists on `path`'s inode.
fn locks_on(path: &std::path::Path) -> usize {
    use std::os::unix::fs::MetadataExt;
    let ino = path.metadata().unwrap().ino();
    let locks = std::fs::read_to_string("/proc/locks").unwrap();
    locks
        .lines()
        .filter(|line| line.split_whitespace().nth(5).is_some_and(|id| id.ends_with(&format!(":{ino}"))))
        .count()
}
