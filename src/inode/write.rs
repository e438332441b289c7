//! The write side of an inode: a write is cut into one part per folio,
//! each copied under that folio's lock (atomic per folio), the partial
//! blocks at its edges filled first, the bytes marked dirty and accounted
//! to the domain before the lock is released, and the inode put on its
//! domain's dirty list before the write returns.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::Inode;
use crate::buf::user::WriteSource;
use crate::buf::AlignedBuf;
use crate::guardian::arena::BlockState;
use crate::io::BLOCK_SIZE;
use crate::mapping::folio::{Caching, DirtyMark, Folio, FolioGuard, FolioState};
use crate::policy::dirty::DirtyRoom;
use crate::policy::memory::{BufUse, WhenFull};
use crate::policy::throttle;
use crate::stats::Counters;

const BLOCK: u64 = BLOCK_SIZE as u64;

/// Where one folio's part of a write lies (see [`Inode::write_at`]).
struct WritePart {
    /// Bytes of the write already copied: the part starts at this offset
    /// of the source.
    done: usize,
    /// Bytes of the write left.
    len: usize,
    /// File offset of the part.
    pos: u64,
    /// Block after the write's last byte: a new folio ends at or before it.
    end_block: u64,
    caching: Caching,
}

impl Inode {
    /// Copies the first `len` bytes of `data` into the cache at `off` and
    /// marks them dirty. Each folio's part is copied under that folio's lock
    /// (atomic per folio). Returns the `(bytes copied, bytes newly
    /// dirtied)`; fewer bytes copied than asked only when an error stopped
    /// the write part-way (a short write).
    pub fn write_at<S: WriteSource + ?Sized>(
        self: &Arc<Self>,
        data: &S,
        len: usize,
        off: u64,
        caching: Caching,
    ) -> io::Result<(usize, u64)> {
        assert!(len <= data.len(), "a write of {len} bytes from a source of {}", data.len());
        let end_block = (off + len as u64).div_ceil(BLOCK);
        let mut done = 0usize;
        let mut newly_dirty_bytes_total = 0u64;
        let mut result = Ok(());
        // Dirty room a part waited for, kept for its retry.
        let mut room = self.dirty.no_room();
        while done < len {
            let part = WritePart { done, len: len - done, pos: off + done as u64, end_block, caching };
            match self.write_folio_part(data, &part, &mut room) {
                // The folio left the mapping before it could be locked, or
                // the part had to wait for dirty room: again, room in hand.
                Ok(None) => continue,
                Ok(Some((n, newly_bytes))) => {
                    debug_assert!(n > 0 && n <= part.len);
                    // What the part did not dirty goes back before the
                    // throttle below can pause this writer.
                    room = self.dirty.no_room();
                    done += n;
                    newly_dirty_bytes_total += newly_bytes;
                    if newly_bytes > 0 {
                        self.dirtied(part.pos / BLOCK, newly_bytes, caching);
                    }
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        debug_assert!(done <= len && newly_dirty_bytes_total <= (done as u64).next_multiple_of(BLOCK) + BLOCK);
        match result {
            // Bytes copied before an error stay written, as a short write.
            Err(e) if done == 0 => Err(e),
            _ => Ok((done, newly_dirty_bytes_total)),
        }
    }

    /// One folio's part of a write: find or create the folio, make its
    /// buffer private, take dirty room for the blocks it will newly dirty,
    /// read a partly covered edge block, copy, mark dirty. Returns the bytes
    /// copied and newly dirtied, or `None` when the folio left the mapping
    /// meanwhile or the part waited for room (`room` then holds it: call
    /// again).
    fn write_folio_part<S: WriteSource + ?Sized>(
        self: &Arc<Self>,
        data: &S,
        part: &WritePart,
        room: &mut DirtyRoom<'_>,
    ) -> io::Result<Option<(usize, u64)>> {
        debug_assert!(part.len > 0 && part.pos / BLOCK < part.end_block, "a part of the write is left");
        let (part_end, room_max) = self.part_bounds(part);
        debug_assert!(room.bytes() <= room_max, "a retried part holds at most the room it waited for");
        let (folio, _) = self.find_or_create(part.pos / BLOCK, part.end_block, BufUse::Written, WhenFull::Wait)?;
        let Some(mut st) = self.lock_private(&folio)? else { return Ok(None) };
        self.guard_folio(&folio, &mut st);
        let folio_off = (part.pos - folio.offset()) as usize;
        let n = (folio.size_bytes() - folio_off).min(part.len).min((part_end - part.pos) as usize);
        let (first, last) = (folio_off / BLOCK_SIZE, (folio_off + n).div_ceil(BLOCK_SIZE));
        // Room for the blocks this part dirties newly, taken under the
        // folio lock, so nothing can dirty them meanwhile: a rewrite of
        // dirty blocks needs none (and costs no shared atomic). Without
        // enough room, the wait (kicking writeback, throttling this writer)
        // happens with no lock held, and the part runs again.
        let needed = (last - first - st.dirty.count_range(first, last)) as u64 * BLOCK;
        if needed > room.bytes() {
            match self.dirty.try_take_room(needed - room.bytes(), throttle::room_limit_bytes(&self.config)) {
                Some(more) => room.absorb(more),
                None => {
                    drop(st);
                    let more = throttle::wait_for_dirty_room(&self.dirty, &self.config, room_max - room.bytes())?;
                    if more.bytes() == 0 {
                        // The cache closed while this writer waited.
                        return Err(io::Error::from_raw_os_error(libc::EBADF));
                    }
                    room.absorb(more);
                    return Ok(None);
                }
            }
        }
        debug_assert!(room.bytes() >= needed, "room for every newly dirty block");
        let fresh_blocks = self.fill_edges_for_write(&folio, &mut st, folio_off, n)?;
        folio.change(&mut st, |st| {
            let dst = Arc::get_mut(st.buf_mut()).expect("the buffer was made private above");
            data.copy_out(part.done, n, dst, folio_off, fresh_blocks);
            st.set_uptodate(folio.nr_blocks(), first, last);
        });
        // In the crash table after the copy, before the size covers the
        // bytes: a guardian that finds the new size finds them too (never
        // zeros where an acknowledged write put data).
        if self.guarded.is_some() {
            st.buf().record_blocks((first, last), BlockState::Dirty);
        }
        // The size covers these bytes before they can be written back, so a
        // backing-size fix never cuts them off.
        let new_end = part.pos + n as u64;
        self.extend_size_for_write(new_end);
        let room_before = room.bytes();
        let newly = self.mark_dirty(&folio, &mut st, (first, last), part.caching, room);
        debug_assert!(
            newly as u64 * BLOCK == needed && room_before - room.bytes() == needed,
            "the newly dirty blocks are the ones counted, and come out of the room"
        );
        if part.caching.is_uncached() {
            folio.dropbehind.store(true, Ordering::Relaxed);
        } else {
            folio.dropbehind.store(false, Ordering::Relaxed);
            folio.mark_accessed();
        }
        st.check(folio.nr_blocks());
        debug_assert!(self.size() >= new_end && st.is_uptodate(first, last));
        Ok(Some((n, newly as u64 * BLOCK)))
    }

    /// Where a write part ends, and the most it can newly dirty: whole
    /// blocks (2 bytes across a block boundary dirty two), up to the end of
    /// its folio, which ends at a `folio_max` boundary at the latest, and at
    /// most a quarter of `dirty_limit` (a part is cut there): a folio larger
    /// than that is written in several parts, each taking its own room, so
    /// dirty + writeback never passes the limit.
    fn part_bounds(&self, part: &WritePart) -> (u64, u64) {
        let folio_max = self.config.folio_max_bytes;
        let first_byte = part.pos / BLOCK * BLOCK;
        let part_end = (part.pos + part.len as u64)
            .min((part.pos / folio_max + 1) * folio_max)
            .min(first_byte + throttle::room_bytes_max(&self.config));
        let room_max = part_end.next_multiple_of(BLOCK) - first_byte;
        debug_assert!(
            room_max > 0 && room_max <= folio_max && room_max <= throttle::room_bytes_max(&self.config),
            "a part dirties at most one folio, and at most the room a writer may take"
        );
        (part_end, room_max)
    }

    /// Before a write copies `n` bytes at `folio_off` into `folio`: reads
    /// the old contents of a partly covered edge block (no other block
    /// needs them). Returns whether the write covers only whole blocks that
    /// held nothing cached: new data on its way to the device, which the
    /// copy streams past the CPU caches (blocks that were cached may be
    /// read again soon and are copied normally).
    fn fill_edges_for_write(&self, folio: &Folio, st: &mut FolioState, folio_off: usize, n: usize) -> io::Result<bool> {
        let (first, last) = (folio_off / BLOCK_SIZE, (folio_off + n).div_ceil(BLOCK_SIZE));
        if !st.all_uptodate {
            if folio_off % BLOCK_SIZE != 0 {
                self.fill_blocks(folio, st, first, first + 1)?;
            }
            if (folio_off + n) % BLOCK_SIZE != 0 {
                self.fill_blocks(folio, st, last - 1, last)?;
            }
        }
        debug_assert!(
            st.all_uptodate || (folio_off % BLOCK_SIZE == 0 || st.is_uptodate(first, first + 1)),
            "a partly covered first block holds its old contents"
        );
        Ok(n % BLOCK_SIZE == 0
            && folio_off % BLOCK_SIZE == 0
            && !st.all_uptodate
            && st.uptodate.next_set(first, last).is_none())
    }

    /// Raises the size to `new_end` if a write reaches past it. Loads
    /// first: an overwrite leaves the size alone, and a locked
    /// read-modify-write on every write took the line from the flusher (80%
    /// of `write_folio_part`'s time under random writes).
    fn extend_size_for_write(&self, new_end: u64) {
        if self.size.load(Ordering::Acquire) < new_end && self.size.fetch_max(new_end, Ordering::AcqRel) < new_end {
            if let Some(guarded) = &self.guarded {
                guarded.record_size_at_least(new_end);
            }
            self.size_changed.store(true, Ordering::Release);
        }
        debug_assert!(self.size() >= new_end, "the size covers the write");
    }

    /// Locks a filled folio whose buffer only this folio holds. When
    /// writeback holds the buffer, the write goes into a copy instead of
    /// waiting for the I/O; the copy's memory is reserved like a new
    /// folio's (the old buffer stays counted until that writeback
    /// completes). `None` when the folio left the mapping meanwhile.
    fn lock_private<'f>(&self, folio: &'f Folio) -> io::Result<Option<FolioGuard<'f>>> {
        let Some(st) = folio.lock_filled() else { return Ok(None) };
        if Arc::strong_count(st.buf()) <= 1 {
            return Ok(Some(st));
        }
        drop(st);
        let folio_len = folio.size_bytes();
        let mut fresh = self.memory.reserve(folio_len, BufUse::Written, WhenFull::Wait)?;
        let Some(mut st) = folio.lock_filled() else {
            self.memory.release_reserved_buf(fresh, folio_len);
            return Ok(None);
        };
        if Arc::strong_count(st.buf()) > 1 {
            fresh.copy_from_slice(st.buf());
            // The copy is the folio's newest bytes: its record moves with
            // it. Into a buffer that is not guarded (one from the pool), it
            // is forgotten: two records of one folio would leave the
            // guardian to choose between old and new bytes;
            // `guard_folio` records the copy's dirty blocks next.
            match (st.buf().guard_slot(), fresh.guard_slot()) {
                (Some((arena, from)), Some((_, to))) => arena.move_record(from, to),
                (Some(_), None) => st.buf().forget_record(),
                _ => {}
            }
            folio.change(&mut st, |st| *st.buf_mut() = Arc::new(fresh));
            Counters::add(&self.counters.cow_copies, 1);
        } else {
            // The writeback finished meanwhile.
            self.memory.release_reserved_buf(fresh, folio_len);
        }
        debug_assert_eq!(Arc::strong_count(st.buf()), 1);
        Ok(Some(st))
    }

    /// Before a write copies into a locked, private folio (a cache with a
    /// guardian): its buffer is guarded memory, recorded as this folio's,
    /// so the bytes the write copies outlive the process. A read-filled
    /// folio's buffer moves there on its first write (one copy of the
    /// folio); when guarded memory is full the write goes on unguarded.
    fn guard_folio(&self, folio: &Folio, st: &mut FolioState) {
        let Some(guarded) = &self.guarded else { return };
        if !st.buf().is_guarded() {
            let Some(mut moved) = AlignedBuf::guarded_stale(guarded.arena(), folio.size_bytes()) else { return };
            moved.copy_from_slice(st.buf());
            let old = folio.change(st, |st| std::mem::replace(st.buf_mut(), Arc::new(moved)));
            // Lock-free readers may still be copying from the old buffer.
            crate::base::epoch::defer_bytes(old.len(), move || drop(old));
        }
        if st.buf().record_owner(guarded.id(), folio.offset()) {
            // Blocks dirtied before the buffer was guarded (guarded memory
            // was full then) are recorded now.
            let mut b = 0;
            while let Some(start) = st.dirty.next_set(b, folio.nr_blocks()) {
                let end = st.dirty.next_clear(start, folio.nr_blocks()).unwrap_or(folio.nr_blocks());
                st.buf().record_blocks((start, end), BlockState::Dirty);
                b = end;
            }
        }
        debug_assert!(st.buf().is_guarded() && Arc::strong_count(st.buf()) == 1);
    }

    /// Marks blocks `[first, last)` of a locked folio dirty and accounts
    /// the newly dirty ones before the lock drops, so writeback can never
    /// take (and subtract) bytes not yet added. Returns the newly dirty
    /// blocks.
    fn mark_dirty(
        &self,
        folio: &Arc<Folio>,
        st: &mut FolioState,
        (first, last): (usize, usize),
        caching: Caching,
        room: &mut DirtyRoom<'_>,
    ) -> usize {
        debug_assert!(first < last && last <= folio.nr_blocks(), "blocks {first}..{last} of the folio");
        debug_assert_eq!(
            folio.dirty_mark.load(Ordering::Relaxed),
            if st.nr_dirty > 0 { DirtyMark::DIRTY } else { DirtyMark::CLEAN },
            "a cached folio's mark follows its dirty blocks"
        );
        let was_clean = st.nr_dirty == 0;
        let newly = st.set_dirty(first, last);
        if newly > 0 {
            let newly_bytes = newly as u64 * BLOCK;
            let uncached_bytes = if caching.is_uncached() { newly_bytes } else { 0 };
            self.dirty.account_dirty_bytes(newly_bytes, uncached_bytes, room);
            if caching.is_uncached() {
                st.dontcache_dirty += newly;
            }
            if was_clean {
                self.mapping.index_dirty(folio);
            }
        }
        debug_assert!(st.nr_dirty >= newly);
        debug_assert!(
            self.mapping.dirty_index().get(&folio.index).is_some_and(|f| Arc::ptr_eq(f, folio)),
            "a dirty folio is in its dirty index"
        );
        newly
    }

    /// After a folio's lock dropped with `newly_bytes` newly dirty: the
    /// inode joins the dirty list, an uncached write kicks the flusher
    /// (never writing back inline), and the writer is throttled.
    fn dirtied(self: &Arc<Self>, block: u64, newly_bytes: u64, caching: Caching) {
        debug_assert!(newly_bytes > 0 && newly_bytes % BLOCK == 0, "whole blocks newly dirty");
        let workers = self.queue_on_dirty_list(Some(block));
        if caching.is_uncached() {
            // Only the worker that writes this block: the others have
            // nothing of it to write.
            self.dirty.kick_dontcache(workers);
        }
        throttle::balance_dirty(&self.dirty, &self.config, newly_bytes, caching);
    }
}
