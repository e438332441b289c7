//! `fio` under the preload, with each synchronous I/O engine (`psync`:
//! pread/pwrite, `pvsync2`: preadv2/pwritev2, `sync`: read/write after
//! lseek): a random write of every block of a 16 MiB file with crc32c
//! verification headers, fsyncs along the way, then fio's verification
//! pass in the same run, through the cache. What it wrote is then checked
//! without the preload: `fio --verify_only` checks every block's checksum,
//! and the test itself reads the file and checks every block's header
//! (magic, length, offset). Skipped with a printed reason when fio is
//! missing, except under `CI=true`.

use crate::common;

use std::path::Path;

use common::{plain, preloaded, run, tool, Scratch, MIB, OPTIONS, TIMEOUT};

const FIO_SIZE: usize = 16 * MIB;
const FIO_BLOCK: usize = 4096;

/// fio's arguments for a random write of the whole file, each block once,
/// with crc32c verification headers.
fn fio_job(file: &Path, engine: &str) -> Vec<String> {
    [
        "--name=verify".to_string(),
        format!("--filename={}", file.display()),
        format!("--size={FIO_SIZE}"),
        format!("--bs={FIO_BLOCK}"),
        "--rw=randwrite".to_string(),
        format!("--ioengine={engine}"),
        "--verify=crc32c".to_string(),
        "--fsync=64".to_string(),
        "--randseed=7".to_string(),
        // No verify state file left in the working directory.
        "--verify_state_save=0".to_string(),
    ]
    .to_vec()
}

/// Every block of `file` starts with fio's verification header for it.
fn assert_fio_headers(file: &Path) {
    let data = std::fs::read(file).unwrap();
    assert_eq!(data.len(), FIO_SIZE, "{}: size", file.display());
    for (i, block) in data.chunks(FIO_BLOCK).enumerate() {
        let magic = u16::from_le_bytes(block[0..2].try_into().unwrap());
        let len = u32::from_le_bytes(block[4..8].try_into().unwrap());
        let offset = u64::from_le_bytes(block[16..24].try_into().unwrap());
        assert_eq!((magic, len as usize, offset as usize), (0xacca, FIO_BLOCK, i * FIO_BLOCK), "block {i}");
    }
}

fn fio_writes_and_verifies(engine: &str) {
    let Some(fio) = tool("fio") else { return };
    let scratch = Scratch::new(&format!("fio-{engine}"));
    let managed = scratch.dir("managed");
    let file = managed.join("fio.dat");
    let mut cmd = preloaded(&fio, &[&managed], OPTIONS);
    cmd.current_dir(&scratch.0).args(fio_job(&file, engine)).arg("--do_verify=1");
    run(cmd, TIMEOUT).ok().no_complaints(&[]);
    assert_fio_headers(&file);
    let mut cmd = plain(&fio);
    cmd.current_dir(&scratch.0).args(fio_job(&file, "psync")).arg("--verify_only");
    let out = run(cmd, TIMEOUT).ok();
    assert!(!out.stdout.contains("verify: bad") && !out.stderr.contains("verify"), "{}", out.details());
}

/// pread/pwrite.
#[test]
fn fio_psync() {
    fio_writes_and_verifies("psync");
}

/// preadv2/pwritev2 (preadv64v2/pwritev64v2 in fio's build).
#[test]
fn fio_pvsync2() {
    fio_writes_and_verifies("pvsync2");
}

/// read/write after lseek.
#[test]
fn fio_sync() {
    fio_writes_and_verifies("sync");
}
