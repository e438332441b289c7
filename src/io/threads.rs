//! stub
use super::*;
pub struct ThreadsIo;
impl ThreadsIo { pub fn new(_d: u32) -> Self { ThreadsIo } }
impl Io for ThreadsIo { fn kind(&self) -> IoKind { IoKind::Threads } fn open(&self, _p: &Path, _h: &OpenHow) -> io::Result<Arc<dyn BackingStore>> { Err(io::Error::from_raw_os_error(libc::ENOSYS)) } }
