//! stub (replaced by the real-fd backend)
