// Package gpucache owns the line cache protocol of the project: a
// set-associative, write-back cache of fixed-size lines with reference
// counted ways (BaM dissertation ch. 6, with the set-associative metadata of
// the GPU4FS driver thesis §4.2). The CPU engine uses this Go implementation
// directly; the GPU engine runs the same protocol on the same bytes in device
// memory (kernels/include/bam/cache.cuh), so this comment is written for both.
//
// The package does no I/O of its own: a Backend reads and writes whole lines
// by tag. It does not know how tags map to namespaces and LBAs (the store's
// layout does), does not group requests (the engines do, and pass the group
// size as the count of Acquire), and must not import the queue or controller
// packages.
//
// # Memory
//
// A cache of N sets × K ways of L bytes has two regions:
//
//   - the data region, N*K*L bytes; way g (= set*K + way) holds its line at
//     [g*L, (g+1)*L). A fill reads storage straight into that slice (an NVMe
//     Read whose PRP names it), so there is no copy.
//   - the metadata region, RegionBytes(N, K) bytes, laid out by the constants
//     of layout.go (generated into kernels/include/bam/detail/layout.h):
//     a set record per set (lock word, clock hand), a tag word and a
//     write-back tag per way (the K tag words of a set are contiguous; a tag
//     word holds the way's tag, its clock reference bit and its generation),
//     and a way record per way (state word, fill status). Metadata grows
//     with the cache, never with the data (no per-line table as in BaM).
//
// On Linux the data region is advised for transparent huge pages
// (madvise MADV_HUGEPAGE): lookups land on random lines of a region that is
// often larger than the TLB covers with 4 KiB pages. The advice is a hint;
// nothing depends on it being taken.
//
// The state word of a way is VALID (bit 31) | BUSY (bit 30) | DIRTY (bit 29)
// | reference count (bits 0-28):
//
//	VALID BUSY   meaning
//	  0    0     free: no data (tag TagEmpty, or the tag of a failed fill)
//	  0    1     being filled for the way's tag by its BUSY owner
//	  1    0     resident: the line holds the tag's data
//	  1    1     resident, owned exclusively (being evicted or written back)
//
// DIRTY means the line differs from storage. Every change of the state word
// is an atomic read-modify-write (fetch_add, fetch_sub, fetch_or, fetch_and,
// compare-and-swap); it is never stored whole except when the region is
// initialised, because other callers' speculative references may be in the
// count at any time. Tags are read without the lock and written only by the
// holder of the set lock, except that the BUSY owner clears the write-back
// tag when its write-back completes and publishes its fill's generation.
// The clock bit shares the tag word: hits set it and the hand clears it
// with an atomic or/and, never a store of the whole word.
//
// # Acquire (hit path, DESIGN.md §3 steps 2-3)
//
// Acquire(tag, n) takes n references for a group of n requests for one line
// (the leader of a coalesced warp; a batch on the CPU) and releases them with
// one fetch_sub(n).
//
//  1. set = SetIndex(tag, N). Scan the set's K tags for tag. If none
//     matches, go to the miss path.
//  2. old = state.fetch_add(n) (acquire). Re-read the way's tag; if it is no
//     longer tag, the way was reassigned after the scan: fetch_sub(n) and
//     start over (§5: a speculative fetch_add on a changed tag is undone).
//  3. old VALID and not BUSY: hit. Set the clock bit if clear; use the line.
//     (Once old shows VALID and not BUSY, no owner can claim the way until
//     the references are dropped, so its tag and data are fixed from the
//     fetch_add on: device code loads the element right after the fetch_add,
//     while the re-read of step 2 is in flight, and keeps it only if that
//     re-read shows tag. It stores the clock bit without reading it first.)
//  4. old VALID and BUSY: the line is being evicted or written back by an
//     exclusive owner. fetch_sub(n), back off, start over.
//  5. old neither VALID nor BUSY: a failed fill left the tag behind.
//     fetch_sub(n) and go to the miss path, which clears it.
//  6. old BUSY, not VALID: the tag is being filled. Keep the references
//     (they stop the way from being claimed again) and back off until BUSY
//     clears. Then: tag changed → fetch_sub(n), start over (the owner was
//     filling another tag when we added); VALID → hit; otherwise the fill
//     failed: with status StatusFillFailed and an error stored while you
//     waited, undo and return the filler's error; otherwise (the filler was
//     cancelled, StatusFillAborted, or the failure is an earlier fill's)
//     undo and retry the miss yourself. An earlier failure is possible
//     because BUSY may have been set only by a claimer's fetch_or that it
//     undid on finding the way referenced (miss step 4), over a failed
//     fill's leftover; its status says nothing about this wait. Device code
//     keeps no per-way error: its waiters always start over, and a failure
//     of their own launch is in the launch's error record, on which they
//     unwind.
//
// Release is state.fetch_sub(n) with release ordering. Writers set DIRTY
// with fetch_or after their stores and before the fetch_sub (ReleaseDirty);
// readers never touch DIRTY (§5: reads never mark lines dirty). Setting
// DIRTY after the stores is what makes Flush correct without generations.
//
// # Miss (DESIGN.md §3 step 4)
//
//  1. Take the set lock (compare-and-swap of LockFree to LockHeld, backing
//     off between tries). It protects only steps 2-5, which do no I/O
//     (§5: no lock is held across an I/O; spinlocks are short). Between
//     tries, scan the set: a way whose tag is tag and that is VALID or BUSY
//     means someone installed the line meanwhile; stop waiting and take
//     the hit path, as step 2 would (the misses of one line that raced to
//     the lock then do not take it one after the other).
//  2. Re-scan every way of the set, reading its write-back tag before its
//     tag. Write-back tag == tag: the line's write-back is in flight;
//     unlock, back off, start over (§5: a line is not read from storage
//     until its write-back completes). Tag == tag and VALID or BUSY: someone
//     installed it since step 1; unlock and take the hit path (§5: never
//     resident twice). Tag == tag, neither VALID nor BUSY: a failed fill's
//     leftover; store TagEmpty there (its waiters see the change and retry).
//  3. Choose a victim: the first free way (not VALID, not BUSY, count 0);
//     else by policy from the set's hand: clock skips BUSY or referenced ways,
//     clears set clock bits as it passes and takes the first unreferenced way
//     with a clear bit (at most 2K steps); round-robin takes the next
//     unreferenced, not BUSY way (at most K steps).
//  4. Claim the victim: its count must be 0 and BUSY clear in a plain load
//     and again in the value returned by state.fetch_or(BUSY); if the second
//     check fails and BUSY was clear, fetch_and(~BUSY) undoes it and the next
//     candidate is tried (§5 eviction rule). If no way can be claimed,
//     unlock, back off and start over; after Config.FullSetTimeout fail with
//     ErrCacheTooSmall (§5: never spin forever on a fully referenced set).
//  5. Install, in this order: if the victim was VALID and DIRTY, its old tag
//     goes to its write-back tag; status = StatusOK; tag word = new tag with
//     an odd generation and a clear clock bit (a new line earns its second
//     chance only by a hit), one store (release); state.fetch_add(n);
//     state.fetch_and(~(VALID|DIRTY)).
//     Because the tag is stored before VALID clears, anyone whose fetch_add
//     observes BUSY without VALID then reads the new tag. Unlock.
//  6. If the victim was dirty, WriteLine(old tag, line). On success store
//     TagEmpty to the write-back tag (release): from then on a miss on the
//     old tag may read storage. On failure, retake the set lock and restore
//     the way: write-back tag = TagEmpty, tag word = old tag at an even
//     generation, fetch_or(VALID|DIRTY),
//     fetch_and(~BUSY), fetch_sub(n); return ErrWriteBack. The dirty data is
//     still in the line, so nothing is lost, and waiters for the new tag see
//     the tag change and retry.
//  7. ReadLine(tag, line). On success publish with one atomic BUSY → VALID
//     (fetch_xor(VALID|BUSY), release; on the device, after the completion
//     was read with acquire ordering, so the DMA data is visible first —
//     §5). On failure record the error (status StatusFillFailed, or
//     StatusFillAborted when the filler's own context ended), fetch_and(~BUSY),
//     fetch_sub(n): the way is free with the tag kept for the waiters, who
//     receive the error; the next miss on the tag clears it and retries.
//
// Write-backs in flight are tracked by the victim way itself: its
// write-back tag holds the old tag from step 5 to step 6, so the table is
// bounded by the cache (one slot per way) and found by the same set scan.
//
// # Flush
//
// Flush visits every set under its lock. A way that is VALID and DIRTY is
// claimed like a victim (count 0, BUSY before and after fetch_or) but keeps
// VALID and its tag: the exclusive owner writes the line back and then
// clears BUSY|DIRTY together (only BUSY on failure, so the line stays
// dirty). Because a claim requires count 0, no writer holds the line during
// its write-back, so there is no lost-update race between clearing DIRTY and
// a concurrent store, and storage never reads bytes while they change. The
// state returned by the claim is re-checked: if another write-back finished
// between the scan and the claim the line is clean and the claim is undone.
// Dirty ways that are referenced or busy, and write-back tags in flight, are
// retried until clean, gone, or claimable (bounded by Config.WaitTimeout).
// Write-backs run with bounded parallelism; then the Backend's Flush runs.
//
// # Reads without references
//
// Peek/Valid and PeekMany here, and bam::array's reads on the device, read
// resident lines without touching the state word, like a sequence lock.
// A way's tag word carries a generation (the TagWordGenBits bits from
// TagWordGenShift) that only the way's BUSY owner changes: it makes it odd
// in the store that installs a new tag (adding 1 to an even generation, 2
// to an odd one, so every claim changes it), before it writes the line,
// and even again (adding 1) only after the line holds the tag's complete
// data: when the fill is published, or when a failed write-back gives the
// way its old tag back. A failed fill leaves it odd; clearing a tag keeps
// it. Claims that do not change the line (a write-back by Flush) leave it
// alone.
//
// A reader finds the way whose word holds its tag at an even generation,
// copies, and reads the word again (on the device the copy is an acquire
// load whose address depends on the word, and the re-read is acquire; here
// Go's atomics order them): the copy is the tag's data when the word holds
// the same tag at the same generation (its clock bit may have changed). A
// copy that overlapped a refill sees an odd or a newer generation, even
// when the way holds its tag again afterwards. Otherwise the reader takes
// references through Acquire. The generation wraps after 2^19 claims of
// one way; a reader would have to stall between its two reads for that
// many fills of the way, each an I/O, and then find its own tag again, for
// a stale copy to pass. With the generation and the clock bit in the tag
// word a hit reads the set's tag words, the element and the word again,
// where a generation and clock bit in the way record took two loads more:
// on the device C2 rose from 0.30 to 0.45 of a plain device array, and
// PeekMany touches two cache lines a request instead of three. The copy itself reads bytes that may be changing: here callers
// use these reads only without the race detector, on processors that keep
// loads in order (amd64). A reader that copies while a writer holding a
// reference changes the same element may see either value, as with
// references.
//
// PeekMany serves a batch in passes so that the misses of many requests
// are in flight together: the tag lines of every set; the ways, found with
// conditional moves (which way holds a tag is random, so branches would
// mispredict once a lookup); a loop of few instructions touching each
// data line; then the copies and checks, all from the CPU's caches.
//
// # Invariants and their reasons
//
//   - At most one way of a set holds a given tag, and no tag is both held and
//     in a write-back tag (checked under the set lock by the tests): claims
//     happen only under the lock after a re-scan (§5).
//   - No ReadLine of a tag while its WriteLine is in flight, and at most one
//     WriteLine and one ReadLine per tag at a time (§5 write-back rule).
//   - A way is claimed only with count 0 and BUSY clear before and after
//     fetch_or(BUSY), so no holder ever sees its line change (§5).
//   - Every speculative reference is undone by the caller that added it;
//     the count is only ever added to and subtracted from (§5).
//   - Reads never set DIRTY; only dirty lines are written back (§5).
//   - No lock is held across I/O; every wait is bounded by Config.WaitTimeout
//     or Config.FullSetTimeout and by the caller's context, and backs off
//     with yields and growing sleeps, never a hot spin (§5; on the device,
//     __nanosleep and %globaltimer).
//   - A failed fill or write-back leaves the cache usable and loses no data.
//
// # Choices
//
// The set lock is a try-lock with backoff rather than a ticket lock: its
// critical section is a scan of K ways and a claim, and a ticket lock cannot
// be abandoned by a waiter whose context ends. On the device a prefetch's
// claim (cache::claim_absent in kernels/include/bam/cache.cuh), whose warp
// has up to 32 lanes claiming sets at once, tries the lock once and leaves
// the line to its reads when it is held: lanes waiting there while others
// of their warp held set locks kept those locks held past the wait bound.
// Set records are 64 bytes and
// way records 32 bytes, so that a state word has a GPU sector of its own;
// 128-byte padding (as in package vq) would cost four times the metadata per
// line for a word that, unlike a queue ticket, is shared only by users of one
// line. Tags are opaque to the cache except for SetIndex; MakeTag builds the
// namespace-qualified tags the store uses.
package gpucache
