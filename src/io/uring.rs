//! stub
use super::*;
pub struct UringIo;
impl UringIo { pub fn new(_d: u32) -> io::Result<Self> { Err(io::Error::from_raw_os_error(libc::ENOSYS)) } }
impl Io for UringIo { fn kind(&self) -> IoKind { IoKind::Uring } fn open(&self, _p: &Path, _h: &OpenHow) -> io::Result<Arc<dyn BackingStore>> { Err(io::Error::from_raw_os_error(libc::ENOSYS)) } }
